/*  node_id.c — node ids "host:port:uid", interned.

    Interning gives one stable pointer per id, so the types compare nodes by pointer and store
    8 bytes per reference. The table is process-wide and guarded by a mutex (several nodes may
    live in one process); lookups happen when ids are decoded or configured, never per update.
    Interned ids live until the process exits: a restart of a peer adds one small entry (its
    new uid), which is the price of pointer identity.

    Each id also carries its dot floor: the highest dot counter this process has issued for it
    (or seen for it in decoded data). An incarnation lives in one process, so the floor is the
    per-incarnation counter that lets an ORSet re-created under a map key issue dots above every
    dot its dropped predecessors carried (orset.c, "Re-created sets"). Atomic because ids are
    shared by every thread of the process; it is touched once per local add, never per merge.
*/
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

struct shoal_node {
    char *id;
    char *host;
    uint16_t port;
    uint64_t uid;
    uint64_t hash;
    struct shoal_node *next;    /* hash chain */
    _Atomic uint64_t dot_floor; /* see the top of this file */
};

static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shoal_node **intern_table;
static size_t intern_cap, intern_count;

/* Parses "host:port:uid". The host is everything before the second-to-last colon, so a
   bracketed IPv6 host ("[::1]:2552:7") works. */
static int parse_id(const char *id, size_t len, size_t *host_len, uint16_t *port, uint64_t *uid)
{
    if (len == 0 || len > SHOAL_NODE_ID_MAX)
        return SHOAL_ENODE;
    ptrdiff_t c2 = -1, c1 = -1;
    for (ptrdiff_t i = (ptrdiff_t)len - 1; i >= 0; i--) {
        if (id[i] == ':') {
            if (c2 < 0)
                c2 = i;
            else {
                c1 = i;
                break;
            }
        }
    }
    if (c1 <= 0 || c2 < 0)
        return SHOAL_ENODE;
    for (ptrdiff_t i = 0; i < c1; i++) {
        unsigned char ch = (unsigned char)id[i];
        if (ch <= 0x20 || ch >= 0x7f)
            return SHOAL_ENODE;
    }
    if (id[0] == '[' && id[c1 - 1] != ']')
        return SHOAL_ENODE;
    /* port: 1..65535, decimal, no leading zero */
    uint64_t p = 0;
    size_t digits = 0;
    for (ptrdiff_t i = c1 + 1; i < c2; i++, digits++) {
        if (id[i] < '0' || id[i] > '9')
            return SHOAL_ENODE;
        p = p * 10 + (uint64_t)(id[i] - '0');
        if (p > 65535)
            return SHOAL_ENODE;
    }
    if (digits == 0 || p == 0 || id[c1 + 1] == '0')
        return SHOAL_ENODE;
    /* uid: decimal uint64, canonical (no leading zeros unless it is "0") */
    uint64_t u = 0;
    digits = 0;
    for (size_t i = (size_t)c2 + 1; i < len; i++, digits++) {
        if (id[i] < '0' || id[i] > '9')
            return SHOAL_ENODE;
        uint64_t d = (uint64_t)(id[i] - '0');
        if (u > (UINT64_MAX - d) / 10)
            return SHOAL_ENODE;
        u = u * 10 + d;
    }
    if (digits == 0 || (digits > 1 && id[c2 + 1] == '0'))
        return SHOAL_ENODE;
    *host_len = (size_t)c1;
    *port = (uint16_t)p;
    *uid = u;
    return 0;
}

static void table_grow(void)
{
    size_t ncap = intern_cap ? intern_cap * 2 : 64;
    struct shoal_node **nt = shoal_calloc(ncap, sizeof *nt);
    for (size_t i = 0; i < intern_cap; i++) {
        struct shoal_node *n = intern_table[i];
        while (n) {
            struct shoal_node *next = n->next;
            size_t b = n->hash & (ncap - 1);
            n->next = nt[b];
            nt[b] = n;
            n = next;
        }
    }
    free(intern_table);
    intern_table = nt;
    intern_cap = ncap;
}

const shoal_node_t *shoal_node_intern_n(const char *id, size_t len)
{
    size_t host_len;
    uint16_t port;
    uint64_t uid;
    if (!id || parse_id(id, len, &host_len, &port, &uid) != 0)
        return NULL;
    uint64_t h = shoal_hash_bytes(id, len);
    pthread_mutex_lock(&intern_lock);
    if (intern_cap) {
        for (struct shoal_node *n = intern_table[h & (intern_cap - 1)]; n; n = n->next)
            if (n->hash == h && strlen(n->id) == len && memcmp(n->id, id, len) == 0) {
                pthread_mutex_unlock(&intern_lock);
                return n;
            }
    }
    if (intern_count + 1 > intern_cap / 2)
        table_grow();
    struct shoal_node *n = shoal_calloc(1, sizeof *n);
    n->id = shoal_malloc(len + 1);
    memcpy(n->id, id, len);
    n->id[len] = 0;
    n->host = shoal_malloc(host_len + 1);
    memcpy(n->host, id, host_len);
    n->host[host_len] = 0;
    n->port = port;
    n->uid = uid;
    n->hash = h;
    size_t b = h & (intern_cap - 1);
    n->next = intern_table[b];
    intern_table[b] = n;
    intern_count++;
    pthread_mutex_unlock(&intern_lock);
    return n;
}

bool shoal_node_id_valid(const char *id, size_t len)
{
    size_t host_len;
    uint16_t port;
    uint64_t uid;
    return id && parse_id(id, len, &host_len, &port, &uid) == 0;
}

const shoal_node_t *shoal_node_intern(const char *id)
{
    return id ? shoal_node_intern_n(id, strlen(id)) : NULL;
}

const shoal_node_t *shoal_node_make(const char *host, uint16_t port, uint64_t uid)
{
    char buf[SHOAL_NODE_ID_MAX + 32];
    int n = snprintf(buf, sizeof buf, "%s:%u:%" PRIu64, host ? host : "", port, uid);
    if (n < 0 || (size_t)n >= sizeof buf)
        return NULL;
    return shoal_node_intern_n(buf, (size_t)n);
}

const char *shoal_node_id(const shoal_node_t *node)
{
    return node ? node->id : "(none)";
}

const char *shoal_node_host(const shoal_node_t *node)
{
    return node ? node->host : NULL;
}

uint16_t shoal_node_port(const shoal_node_t *node)
{
    return node ? node->port : 0;
}

uint64_t shoal_node_uid(const shoal_node_t *node)
{
    return node ? node->uid : 0;
}

int shoal_node_cmp(const shoal_node_t *a, const shoal_node_t *b)
{
    if (a == b)
        return 0;
    if (!a)
        return -1;
    if (!b)
        return 1;
    return strcmp(a->id, b->id);
}

uint64_t shoal_node_dot_floor(const shoal_node_t *node)
{
    return node
               ? atomic_load_explicit(&((struct shoal_node *)node)->dot_floor, memory_order_relaxed)
               : 0;
}

void shoal_node_dot_witness(const shoal_node_t *node, uint64_t counter)
{
    if (!node)
        return;
    _Atomic uint64_t *f = &((struct shoal_node *)node)->dot_floor;
    uint64_t cur = atomic_load_explicit(f, memory_order_relaxed);
    while (cur < counter && !atomic_compare_exchange_weak_explicit(
                                f, &cur, counter, memory_order_relaxed, memory_order_relaxed))
        ;
}
