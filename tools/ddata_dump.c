/*  ddata-dump — look inside Shoal's replicated data: a durable store on disk, a running node, or
    several nodes side by side.

      ddata-dump DIR [--key K] [--json]         list (or show one key of) a durable store
      ddata-dump DIR --salvage OUT              copy every readable entry into a new store at OUT
      ddata-dump DIR --compact OUT              compacted copy of the store (mdb_env_copy2)
      ddata-dump --backup DEST DIR              hot backup: compacted copy + manifest (BACKUP)
      ddata-dump --restore BACKUP DIR (--keep-identity (--cluster ENDPOINT... | --cluster-stopped)
                                       | --new-identity)
                                                a backup into an empty directory (BACKUP)
      ddata-dump --node ENDPOINT [--role R] [--metrics]
                                                --metrics: exactly what the node's GET /metrics
                                                serves (shoal_client_metrics); --metrics-legacy:
                                                0.2's names (deprecated, see CHANGELOG 0.3)
      ddata-dump --compare ENDPOINT ENDPOINT... [--role R]
      ddata-dump DIR --sharding [TYPE] [--role R] [--entities] [--json]
      ddata-dump --node ENDPOINT --sharding [TYPE] [--role R] [--entities] [--json]
                                                what sharding keeps for an entity type (or the
                                                types found): see "Sharding" below

    The store is read straight through liblmdb (MDB_RDONLY, so it is safe while a node runs), not
    through durable/'s API: this tool must keep working on stores the library itself refuses. Its
    format: named database "meta" with "format" = "shoal-durable 1", and one database
    "ddata:<role>" per replicator whose values are packed shoal.replicator.DataEnvelope.

    A corrupt data.mdb can make LMDB fault (it maps the file and trusts its page pointers), so every
    store mode reads in a forked child that writes its report to a pipe; the parent prints the
    report only when the child exits normally.

    Exit codes: 0 ok; 1 differences (--compare), a missing key (--key), no state of the type
    (--sharding) or a refused request; 2 usage, or a missing, foreign, newer or corrupt store
    (a listing with an UNDECODABLE record included: it is printed, then exit 2); 3 the node
    cannot be reached (--restore --cluster: no member answered); 4 --restore --keep-identity
    refused because a live member of the cluster has the backup's identity.

    The kept membership (membership.h, KEPT MEMBERSHIP: replicator "__membership", key "voters")
    is membership's own plain-text record, not a DataEnvelope: it is shown as type
    kept-membership with its identities.
*/
#include "cli.h"
#include "ddata.h"
#include "durable.h"
#include "membership.h"
#include "sharding.h"
#include "estate.h" /* sharding's EntityStateMap, read for --sharding */

#include "client.pb-c.h"
#include "replicator.pb-c.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <lmdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FORMAT_NAME "shoal-durable"
#define FORMAT_VERSION 1
#define DB_PREFIX "ddata:"
#define MAX_DBS 256
#define LINE_RENDER 100
#define CLIENT_TIMEOUT_MS 3000
#define K_CLIENT_KEYS 0x8004u /* ddata/replicator/replicator_client.c: GET 0x8001 .. STATS 0x8005 */
/* A store read that takes longer than this is looping on corrupt page pointers. */
#define CHILD_TIMEOUT_S 120
/* LMDB's two meta pages of 4 KiB or more: the least a data.mdb it wrote can hold */
#define MIN_DATA_BYTES (2 * 4096)

/* Appends a string literal (or any C string). */
#define LIT(buf, s) shoal_buf_append((buf), (s), strlen(s))

enum { EXIT_OK = 0, EXIT_DIFF = 1, EXIT_BAD = 2, EXIT_UNREACHABLE = 3, EXIT_IDENTITY_LIVE = 4 };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ddata-dump DIR [--key K] [--json]\n"
            "       ddata-dump DIR --salvage OUT | --compact OUT\n"
            "       ddata-dump --backup DEST DIR\n"
            "       ddata-dump --restore BACKUP DIR --keep-identity (--cluster ENDPOINT... |\n"
            "                  --cluster-stopped)\n"
            "       ddata-dump --restore BACKUP DIR --new-identity\n"
            "       ddata-dump --node ENDPOINT [--role R] [--metrics | --metrics-legacy]\n"
            "       ddata-dump --compare ENDPOINT ENDPOINT... [--role R]\n"
            "       ddata-dump DIR --sharding [TYPE] [--role R] [--entities] [--json]\n"
            "       ddata-dump --node ENDPOINT --sharding [TYPE] [--role R] [--entities] [--json]\n"
            "       ddata-dump --help | --version\n"
            "--sharding TYPE: the type's coordinator state (shard, home, epoch term.counter),\n"
            "regions, remembered entities per shard (--entities: their ids), all-shards set and\n"
            "daemon workers; without TYPE (last, or before another option): the types found.\n"
            "--backup: a consistent compacted copy of the store (safe while the node runs) and a\n"
            "manifest (format, Shoal version, identity). --restore: into an empty DIR; the\n"
            "identity is kept (the same node comes back) or replaced (another node: never two\n"
            "live members with one identity); docs/operations.md, \"Backup, restore\".\n"
            "--keep-identity asks a member of the cluster (--cluster, repeatable or comma-\n"
            "separated: the first that answers) and refuses while a member that is not Down or\n"
            "Removed has the backup's identity; --cluster-stopped: no member runs (the whole\n"
            "cluster is being recovered), nobody to ask.\n"
            "Exit codes: 0 ok; 1 differences, missing key or type, or refused request; 2 usage\n"
            "or a bad store (an UNDECODABLE record too); 3 node unreachable; 4 the identity\n"
            "of the backup is live in the cluster (--restore --keep-identity).\n");
}

/* ---------------------------------------------------------------------------------------------
 * Output helpers
 */
/* Keys are bytes: printed bare when they are plain printable ASCII, quoted otherwise. */
static void key_text(shoal_buf_t *out, const void *key, size_t len)
{
    const unsigned char *k = key;
    bool plain = len > 0;
    for (size_t i = 0; i < len && plain; i++)
        plain = k[i] > 0x20 && k[i] < 0x7f && k[i] != '"';
    if (plain)
        shoal_buf_append(out, key, len);
    else
        shoal_buf_append_quoted(out, key, len);
}

/* Length of the valid UTF-8 sequence at s (0 if invalid). */
static size_t utf8_len(const unsigned char *s, size_t left)
{
    size_t n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
             : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || n > left || (n == 2 && s[0] < 0xc2))
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* A JSON string; bytes that are not valid UTF-8 become \u00XX so the output always parses. */
static void json_str(shoal_buf_t *out, const void *data, size_t len)
{
    const unsigned char *s = data;
    LIT(out, "\"");
    for (size_t i = 0; i < len;) {
        unsigned char ch = s[i];
        if (ch == '"' || ch == '\\') {
            shoal_buf_printf(out, "\\%c", ch);
            i++;
        } else if (ch == '\n') {
            LIT(out, "\\n");
            i++;
        } else if (ch < 0x20 || ch == 0x7f) {
            shoal_buf_printf(out, "\\u%04x", ch);
            i++;
        } else {
            size_t n = utf8_len(s + i, len - i);
            if (n == 0) {
                shoal_buf_printf(out, "\\u%04x", ch);
                i++;
            } else {
                shoal_buf_append(out, s + i, n);
                i += n;
            }
        }
    }
    LIT(out, "\"");
}

/* One line of at most `max` characters: newlines become spaces, a longer text ends in "...". */
static void one_line(shoal_buf_t *out, const shoal_buf_t *text, size_t max)
{
    size_t n = text->len;
    bool cut = n > max;
    if (cut) {
        n = max - 3;
        while (n > 0 && (text->data[n] & 0xc0) == 0x80) /* not inside a UTF-8 sequence */
            n--;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t c = text->data[i];
        shoal_buf_append(out, c == '\n' || c == '\r' || c == '\t' ? " " : (const char *)&c, 1);
    }
    if (cut)
        LIT(out, "...");
}

static void hex(shoal_buf_t *out, const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        shoal_buf_printf(out, "%02x", d[i]);
}

/* ---------------------------------------------------------------------------------------------
 * One stored entry, decoded as far as it goes
 */
typedef struct {
    Shoal__Replicator__DataEnvelope *env; /* NULL: the envelope itself is malformed */
    shoal_crdt_t *value;                  /* NULL: deleted or undecodable */
    bool deleted;
    const char *error; /* why it is undecodable, or NULL */
    size_t bytes;      /* size of the encoded value (of the record when the envelope is bad) */
    /* the kept membership (membership.h, KEPT MEMBERSHIP): not a replicated value but
       membership's own record, plain text; ids points into the record's bytes */
    bool kept;
    const char **ids;
    size_t *id_lens;
    size_t n_ids;
} entry_t;

/* Membership's kept-membership record (membership/membership.c, "Kept membership"): in the
   store of role SHOAL_CLUSTER_STORE_ROLE, key "voters", the bytes "shoal-voters 1\n" then one
   durable identity (shoal_durable_node_id) a line. */
#define KEPT_KEY  "voters"
#define KEPT_STEM "shoal-voters 1\n"
#define KEPT_TYPE "kept-membership"

static bool kept_record(const char *role, const MDB_val *k)
{
    return role && k && strcmp(role, SHOAL_CLUSTER_STORE_ROLE) == 0 &&
           k->mv_size == strlen(KEPT_KEY) && memcmp(k->mv_data, KEPT_KEY, k->mv_size) == 0;
}

/* Reads the kept membership: every line after the stem one identity, the last one ended by a
   newline too (membership writes it so); anything else is damage. */
static void kept_read(entry_t *e, const MDB_val *v)
{
    e->kept = true;
    size_t stem = strlen(KEPT_STEM);
    if (v->mv_size < stem || memcmp(v->mv_data, KEPT_STEM, stem) != 0) {
        e->error = "malformed kept membership (no \"shoal-voters 1\" line)";
        return;
    }
    const char *p = (const char *)v->mv_data + stem, *end = (const char *)v->mv_data + v->mv_size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : 0;
        bool printable = n > 0;
        for (size_t i = 0; i < n && printable; i++)
            printable = p[i] > 0x20 && p[i] < 0x7f;
        if (!nl || !printable) {
            e->error = "malformed kept membership (a line that is no identity)";
            return;
        }
        e->ids = realloc(e->ids, (e->n_ids + 1) * sizeof *e->ids);
        e->id_lens = realloc(e->id_lens, (e->n_ids + 1) * sizeof *e->id_lens);
        if (!e->ids || !e->id_lens)
            abort();
        e->ids[e->n_ids] = p;
        e->id_lens[e->n_ids++] = n;
        p = nl + 1;
    }
}

/* Reads one record of replicator `role` (NULL: not known) with key k. */
static void entry_read_in(entry_t *e, const char *role, const MDB_val *k, const MDB_val *v)
{
    memset(e, 0, sizeof *e);
    e->bytes = v->mv_size;
    if (kept_record(role, k)) {
        kept_read(e, v);
        return;
    }
    e->env = shoal__replicator__data_envelope__unpack(NULL, v->mv_size, v->mv_data);
    if (!e->env) {
        e->error = "malformed envelope";
        return;
    }
    e->bytes = e->env->value.len;
    if (e->env->deleted) {
        e->deleted = true;
        return;
    }
    int rc = shoal_crdt_decode(e->env->value.data, e->env->value.len, &e->value);
    if (rc < 0) {
        e->value = NULL;
        e->error = shoal_strerror(rc);
    }
}

static void entry_read(entry_t *e, const MDB_val *v)
{
    entry_read_in(e, NULL, NULL, v);
}

static void entry_free(entry_t *e)
{
    free(e->ids);
    free(e->id_lens);
    e->ids = NULL;
    e->id_lens = NULL;
    e->n_ids = 0;
    shoal_crdt_destroy(&e->value);
    if (e->env)
        shoal__replicator__data_envelope__free_unpacked(e->env, NULL);
    e->env = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Sharding: the keys sharding/ keeps in its role's replicator, shown per entity type
 * (sharding.h, THE COORDINATOR'S STATE; remember.c; daemon.c):
 *   coord-<type>               LWWMap: "s/<shard>" -> home node id ("" = unallocated) at
 *                              timestamp = allocation epoch (term << 32 | counter); "r/<node>" ->
 *                              "region", "proxy" or "" (gone). Not durable: only a live node
 *                              has it.
 *   shard-<type>-<shard>-<k>   ORSet of the shard's remembered entity ids (k = 0..4)
 *   shard-<type>-all-shards    GSet of the shards that have remembered entities
 *   daemon-<type>-workers      LWWRegister: the worker count of a sharded daemon process
 *   shard-<type>-estate:<shard> EntityStateMap (sharding/estate.c): entity id -> stored state
 *                              at (epoch, seq); "\x01<id>\0<reminder>" -> a reminder
 * The same report comes from a store (in the child) and from a node: both first collect the
 * decoded values of the keys with these prefixes.
 */
#define COORD_PREFIX "coord-"
#define SHARD_PREFIX "shard-"
#define DAEMON_PREFIX "daemon-"
#define ALL_SHARDS_SUFFIX "-all-shards"
#define WORKERS_SUFFIX "-workers"
#define ESTATE_MARK "-estate:"
#define CELL_MAX 40

typedef struct {
    char *key;
    shoal_crdt_t *value; /* NULL: deleted or undecodable */
    bool deleted;
    char *error; /* undecodable: why */
} skey_t;

typedef struct {
    skey_t *v;
    size_t n, cap;
} skeys_t;

/* Room for one more element of `size` bytes in *arr. */
static void grow(void *arr_p, size_t n, size_t *cap, size_t size)
{
    void **arr = arr_p;
    if (n < *cap)
        return;
    size_t want = *cap ? *cap * 2 : 8;
    void *p = realloc(*arr, want * size);
    if (!p)
        abort();
    *arr = p;
    *cap = want;
}

static char *xstrndup(const void *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        abort();
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool has_suffix(const char *s, size_t len, const char *suffix)
{
    size_t sl = strlen(suffix);
    return len >= sl && memcmp(s + len - sl, suffix, sl) == 0;
}

/* Keys sharding may have written; they are C strings (a NUL inside: not one of them). */
static bool sharding_key(const void *key, size_t len)
{
    static const char *const prefixes[] = {COORD_PREFIX, SHARD_PREFIX, DAEMON_PREFIX};
    if (memchr(key, 0, len))
        return false;
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (len > strlen(prefixes[i]) && !memcmp(key, prefixes[i], strlen(prefixes[i])))
            return true;
    return false;
}

/* Takes value (may be NULL). */
static void skeys_add(skeys_t *s, const void *key, size_t klen, shoal_crdt_t *value, bool deleted,
                      const char *error)
{
    grow(&s->v, s->n, &s->cap, sizeof *s->v);
    skey_t *k = &s->v[s->n++];
    k->key = xstrndup(key, klen);
    k->value = value;
    k->deleted = deleted;
    k->error = error ? xstrndup(error, strlen(error)) : NULL;
}

static void skeys_free(skeys_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].key);
        free(s->v[i].error);
        shoal_crdt_destroy(&s->v[i].value);
    }
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* The type a key names without ambiguity (coord-T, shard-T-all-shards, daemon-T-workers), or
   NULL. "shard-T-S-k" is left out: a '-' in T or S makes it ambiguous, and a type with
   remembered entities has its all-shards key anyway. */
static char *key_type(const char *k)
{
    size_t len = strlen(k);
    if (has_prefix(k, COORD_PREFIX))
        return xstrndup(k + strlen(COORD_PREFIX), len - strlen(COORD_PREFIX));
    if (has_prefix(k, SHARD_PREFIX) && has_suffix(k, len, ALL_SHARDS_SUFFIX) &&
        len > strlen(SHARD_PREFIX) + strlen(ALL_SHARDS_SUFFIX))
        return xstrndup(k + strlen(SHARD_PREFIX),
                        len - strlen(SHARD_PREFIX) - strlen(ALL_SHARDS_SUFFIX));
    const char *es = has_prefix(k, SHARD_PREFIX) ? strstr(k, ESTATE_MARK) : NULL;
    if (es && es > k + strlen(SHARD_PREFIX))
        return xstrndup(k + strlen(SHARD_PREFIX), (size_t)(es - k) - strlen(SHARD_PREFIX));
    if (has_prefix(k, DAEMON_PREFIX) && has_suffix(k, len, WORKERS_SUFFIX) &&
        len > strlen(DAEMON_PREFIX) + strlen(WORKERS_SUFFIX))
        return xstrndup(k + strlen(DAEMON_PREFIX),
                        len - strlen(DAEMON_PREFIX) - strlen(WORKERS_SUFFIX));
    return NULL;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The types found, sorted, without repeats (the caller frees each and the array). */
static char **sharding_types(const skeys_t *keys, size_t *n)
{
    char **t = calloc(keys->n + 1, sizeof *t);
    if (!t)
        abort();
    size_t k = 0;
    for (size_t i = 0; i < keys->n; i++) {
        char *type = key_type(keys->v[i].key);
        if (type)
            t[k++] = type;
    }
    qsort(t, k, sizeof *t, str_cmp);
    size_t u = 0;
    for (size_t i = 0; i < k; i++) {
        if (u && strcmp(t[u - 1], t[i]) == 0)
            free(t[i]);
        else
            t[u++] = t[i];
    }
    *n = u;
    return t;
}

static void strs_free(char **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

/* Shard ids in numeric order when both are numbers (the default shard ids), else byte order. */
static int shard_cmp(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    bool na = la && strspn(a, "0123456789") == la, nb = lb && strspn(b, "0123456789") == lb;
    if (na && nb) {
        while (la > 1 && *a == '0')
            a++, la--;
        while (lb > 1 && *b == '0')
            b++, lb--;
        if (la != lb)
            return la < lb ? -1 : 1;
    } else if (na != nb) {
        return na ? -1 : 1;
    }
    return strcmp(a, b);
}

typedef struct {
    char *shard;
    char *home; /* "" = unallocated */
    int64_t epoch;
} alloc_row_t;

typedef struct {
    char *node;
    char *kind; /* "region", "proxy", "" = gone */
    int64_t epoch;
} region_row_t;

typedef struct {
    char *shard;
    char **ids;
    size_t n, cap;
} remembered_t;

typedef struct {
    char *id;
    uint64_t epoch, seq;
    size_t bytes;
} estate_row_t;

/* One shard's stored entity states. */
typedef struct {
    char *shard;
    uint64_t fence;
    size_t entities, reminders, deleted, bytes;
    estate_row_t *ids; /* --entities */
    size_t n_ids, cap_ids;
} estate_shard_t;

/* Everything one entity type has in the replicator. */
typedef struct {
    const char *type;
    bool coord; /* coord-<type> holds an LWWMap */
    alloc_row_t *allocs;
    size_t n_allocs, cap_allocs;
    region_row_t *regions;
    size_t n_regions, cap_regions;
    remembered_t *rem;
    size_t n_rem, cap_rem, n_entities;
    bool has_all;
    char **all;
    size_t n_all, cap_all;
    bool has_daemon;
    char *daemon; /* the register's value */
    estate_shard_t *es; /* entity state, by shard */
    size_t n_es, cap_es, es_entities, es_reminders, es_bytes;
    char **problems; /* "<key>: what is wrong" */
    size_t n_problems, cap_problems;
} sview_t;

static void problem(sview_t *v, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void problem(sview_t *v, const char *key, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    shoal_buf_t b = {0};
    shoal_buf_printf(&b, "%s: %s", key, what);
    grow(&v->problems, v->n_problems, &v->cap_problems, sizeof *v->problems);
    v->problems[v->n_problems++] = xstrndup(b.data, b.len);
    shoal_buf_free(&b);
}

static void sview_free(sview_t *v)
{
    for (size_t i = 0; i < v->n_allocs; i++) {
        free(v->allocs[i].shard);
        free(v->allocs[i].home);
    }
    for (size_t i = 0; i < v->n_regions; i++) {
        free(v->regions[i].node);
        free(v->regions[i].kind);
    }
    for (size_t i = 0; i < v->n_rem; i++) {
        free(v->rem[i].shard);
        strs_free(v->rem[i].ids, v->rem[i].n);
    }
    for (size_t i = 0; i < v->n_es; i++) {
        free(v->es[i].shard);
        for (size_t j = 0; j < v->es[i].n_ids; j++)
            free(v->es[i].ids[j].id);
        free(v->es[i].ids);
    }
    free(v->es);
    free(v->allocs);
    free(v->regions);
    free(v->rem);
    strs_free(v->all, v->n_all);
    free(v->daemon);
    strs_free(v->problems, v->n_problems);
    memset(v, 0, sizeof *v);
}

static int coord_entry(const void *key, size_t klen, const shoal_crdt_t *value, void *arg)
{
    sview_t *v = arg;
    size_t vlen = 0;
    const char *val = shoal_lwwreg_value(value, &vlen);
    int64_t ts = shoal_lwwreg_timestamp(value);
    const char *k = key;
    if (klen > 2 && !memcmp(k, "s/", 2)) {
        grow(&v->allocs, v->n_allocs, &v->cap_allocs, sizeof *v->allocs);
        alloc_row_t *a = &v->allocs[v->n_allocs++];
        a->shard = xstrndup(k + 2, klen - 2);
        a->home = xstrndup(val ? val : "", val ? vlen : 0);
        a->epoch = ts;
    } else if (klen > 2 && !memcmp(k, "r/", 2)) {
        grow(&v->regions, v->n_regions, &v->cap_regions, sizeof *v->regions);
        region_row_t *r = &v->regions[v->n_regions++];
        r->node = xstrndup(k + 2, klen - 2);
        r->kind = xstrndup(val ? val : "", val ? vlen : 0);
        r->epoch = ts;
    }
    return 0;
}

typedef struct {
    char ***arr;
    size_t *n, *cap;
} str_sink_t;

static int collect_elem(const void *elem, size_t len, void *arg)
{
    str_sink_t *s = arg;
    grow(s->arr, *s->n, s->cap, sizeof **s->arr);
    (*s->arr)[(*s->n)++] = xstrndup(elem, len);
    return 0;
}

static int alloc_cmp(const void *a, const void *b)
{
    return shard_cmp(((const alloc_row_t *)a)->shard, ((const alloc_row_t *)b)->shard);
}

static int region_cmp(const void *a, const void *b)
{
    return strcmp(((const region_row_t *)a)->node, ((const region_row_t *)b)->node);
}

static int rem_cmp(const void *a, const void *b)
{
    return shard_cmp(((const remembered_t *)a)->shard, ((const remembered_t *)b)->shard);
}

static int shard_str_cmp(const void *a, const void *b)
{
    return shard_cmp(*(char *const *)a, *(char *const *)b);
}

/* A value that is not what sharding writes there: noted as a problem; false then. */
static bool expect(sview_t *v, const skey_t *k, const char *type_name)
{
    if (k->deleted)
        problem(v, k->key, "deleted");
    else if (!k->value)
        problem(v, k->key, "UNDECODABLE (%s)", k->error ? k->error : "?");
    else if (shoal_crdt_type(k->value) != shoal_type_by_name(type_name))
        problem(v, k->key, "a %s, not the %s sharding writes",
                shoal_type_name(shoal_crdt_type(k->value)), type_name);
    else
        return true;
    return false;
}

static int estate_entry(const void *key, size_t klen, const estate_entry_t *e, void *arg)
{
    estate_shard_t *x = arg;
    const uint8_t *k = key;
    x->bytes += klen + e->len;
    if (e->deleted) {
        x->deleted++;
        return 0;
    }
    if (klen && k[0] == 0x01) {
        x->reminders++;
        return 0;
    }
    x->entities++;
    grow(&x->ids, x->n_ids, &x->cap_ids, sizeof *x->ids);
    estate_row_t *r = &x->ids[x->n_ids++];
    r->id = xstrndup(key, klen);
    r->epoch = e->epoch;
    r->seq = e->seq;
    r->bytes = e->len;
    return 0;
}

static int es_cmp(const void *a, const void *b)
{
    return shard_cmp(((const estate_shard_t *)a)->shard, ((const estate_shard_t *)b)->shard);
}

/* shard-<type>-estate:<shard>: the shard, or NULL. */
static char *estate_shard(const char *key, const char *type)
{
    size_t pl = strlen(SHARD_PREFIX), tl = strlen(type), ml = strlen(ESTATE_MARK);
    if (!has_prefix(key, SHARD_PREFIX) || strncmp(key + pl, type, tl) != 0 ||
        strncmp(key + pl + tl, ESTATE_MARK, ml) != 0 || !key[pl + tl + ml])
        return NULL;
    return xstrndup(key + pl + tl + ml, strlen(key + pl + tl + ml));
}

/* shard-<type>-<shard>-<k>: the shard, or NULL. A key of a longer type ("<type>-x") that the
   keys name elsewhere belongs to that type. */
static char *remember_shard(const char *key, const char *type, char **types, size_t n_types)
{
    size_t plen = strlen(SHARD_PREFIX) + strlen(type) + 1, len = strlen(key);
    if (len <= plen || !has_prefix(key, SHARD_PREFIX) ||
        strncmp(key + strlen(SHARD_PREFIX), type, strlen(type)) != 0 || key[plen - 1] != '-' ||
        has_suffix(key, len, ALL_SHARDS_SUFFIX))
        return NULL;
    const char *dash = strrchr(key + plen, '-');
    if (!dash || dash == key + plen || !dash[1] ||
        strspn(dash + 1, "0123456789") != strlen(dash + 1))
        return NULL;
    for (size_t i = 0; i < n_types; i++) {
        size_t tl = strlen(types[i]);
        if (tl > strlen(type) && strncmp(types[i], type, strlen(type)) == 0 &&
            types[i][strlen(type)] == '-' &&
            strncmp(key + strlen(SHARD_PREFIX), types[i], tl) == 0 &&
            key[strlen(SHARD_PREFIX) + tl] == '-')
            return NULL;
    }
    return xstrndup(key + plen, (size_t)(dash - (key + plen)));
}

static void sview_build(sview_t *v, const skeys_t *keys, const char *type, char **types,
                        size_t n_types)
{
    memset(v, 0, sizeof *v);
    v->type = type;
    shoal_buf_t name = {0};
    for (size_t i = 0; i < keys->n; i++) {
        const skey_t *k = &keys->v[i];
        shoal_buf_reset(&name);
        shoal_buf_printf(&name, COORD_PREFIX "%s", type);
        if (!strcmp(k->key, shoal_buf_cstr(&name))) {
            if (expect(v, k, "LWWMap")) {
                v->coord = true;
                shoal_ormap_foreach(k->value, coord_entry, v);
            }
            continue;
        }
        shoal_buf_reset(&name);
        shoal_buf_printf(&name, SHARD_PREFIX "%s" ALL_SHARDS_SUFFIX, type);
        if (!strcmp(k->key, shoal_buf_cstr(&name))) {
            if (expect(v, k, "GSet")) {
                v->has_all = true;
                str_sink_t s = {&v->all, &v->n_all, &v->cap_all};
                shoal_gset_foreach(k->value, collect_elem, &s);
            }
            continue;
        }
        shoal_buf_reset(&name);
        shoal_buf_printf(&name, DAEMON_PREFIX "%s" WORKERS_SUFFIX, type);
        if (!strcmp(k->key, shoal_buf_cstr(&name))) {
            if (expect(v, k, "LWWRegister")) {
                size_t len = 0;
                const char *val = shoal_lwwreg_value(k->value, &len);
                v->has_daemon = true;
                v->daemon = xstrndup(val ? val : "", val ? len : 0);
            }
            continue;
        }
        char *eshard = estate_shard(k->key, type);
        if (eshard) {
            if (expect(v, k, "EntityStateMap")) {
                grow(&v->es, v->n_es, &v->cap_es, sizeof *v->es);
                estate_shard_t *x = &v->es[v->n_es++];
                memset(x, 0, sizeof *x);
                x->shard = eshard;
                x->fence = estate_fence(k->value);
                estate_foreach(k->value, estate_entry, x);
                v->es_entities += x->entities;
                v->es_reminders += x->reminders;
                v->es_bytes += x->bytes;
            } else {
                free(eshard);
            }
            continue;
        }
        char *shard = remember_shard(k->key, type, types, n_types);
        if (!shard)
            continue;
        if (!expect(v, k, "ORSet")) {
            free(shard);
            continue;
        }
        remembered_t *r = NULL;
        for (size_t j = v->n_rem; j-- > 0 && !r;) /* a shard's keys sort together: look back */
            if (!strcmp(v->rem[j].shard, shard))
                r = &v->rem[j];
        if (r) {
            free(shard);
        } else {
            grow(&v->rem, v->n_rem, &v->cap_rem, sizeof *v->rem);
            r = &v->rem[v->n_rem++];
            memset(r, 0, sizeof *r);
            r->shard = shard;
        }
        str_sink_t s = {&r->ids, &r->n, &r->cap};
        shoal_orset_foreach(k->value, collect_elem, &s);
    }
    shoal_buf_free(&name);
    qsort(v->allocs, v->n_allocs, sizeof *v->allocs, alloc_cmp);
    qsort(v->regions, v->n_regions, sizeof *v->regions, region_cmp);
    qsort(v->rem, v->n_rem, sizeof *v->rem, rem_cmp);
    qsort(v->all, v->n_all, sizeof *v->all, shard_str_cmp);
    qsort(v->es, v->n_es, sizeof *v->es, es_cmp);
    for (size_t j = 0; j < v->n_rem; j++) {
        remembered_t *r = &v->rem[j];
        /* an id sits in one key of its shard; a repeat would be counted twice */
        qsort(r->ids, r->n, sizeof *r->ids, str_cmp);
        size_t u = 0;
        for (size_t i = 0; i < r->n; i++) {
            if (u && !strcmp(r->ids[u - 1], r->ids[i]))
                free(r->ids[i]);
            else
                r->ids[u++] = r->ids[i];
        }
        r->n = u;
        v->n_entities += u;
    }
}

static bool sview_empty(const sview_t *v)
{
    return !v->coord && !v->n_rem && !v->has_all && !v->has_daemon && !v->n_problems && !v->n_es;
}

static size_t live_regions(const sview_t *v)
{
    size_t n = 0;
    for (size_t i = 0; i < v->n_regions; i++)
        n += v->regions[i].kind[0] != 0;
    return n;
}

/* An allocation epoch as term.counter (the coordinator's term << 32 | counter). */
static void epoch_text(shoal_buf_t *out, int64_t ts)
{
    if (ts <= 0)
        shoal_buf_printf(out, "%lld", (long long)ts);
    else
        shoal_buf_printf(out, "%llu.%llu", (unsigned long long)((uint64_t)ts >> 32),
                         (unsigned long long)((uint64_t)ts & 0xffffffffu));
}

static int cell_width(int w, const char *s)
{
    int n = (int)strlen(s);
    return n > w ? (n < CELL_MAX ? n : CELL_MAX) : w;
}

typedef struct {
    bool json;
    bool entities; /* list the remembered ids */
    bool online;   /* read from a node (else from a store) */
    const char *role;
} sopts_t;

static void sview_text(shoal_buf_t *out, const sview_t *v, const sopts_t *o)
{
    LIT(out, "sharding ");
    shoal_buf_append_quoted(out, v->type, strlen(v->type));
    LIT(out, ", replicator ");
    shoal_buf_append_quoted(out, o->role, strlen(o->role));
    LIT(out, ":\n");
    if (v->coord) {
        shoal_buf_printf(out, "coordinator (" COORD_PREFIX "%s): %zu shards, %zu regions\n",
                         v->type, v->n_allocs, live_regions(v));
        int ws = 5, wh = 4;
        for (size_t i = 0; i < v->n_allocs; i++) {
            ws = cell_width(ws, v->allocs[i].shard);
            wh = cell_width(wh, v->allocs[i].home[0] ? v->allocs[i].home : "(unallocated)");
        }
        if (v->n_allocs)
            shoal_buf_printf(out, "  %-*s  %-*s  %s\n", ws, "SHARD", wh, "HOME", "EPOCH");
        for (size_t i = 0; i < v->n_allocs; i++) {
            const alloc_row_t *a = &v->allocs[i];
            shoal_buf_printf(out, "  %-*s  %-*s  ", ws, a->shard, wh,
                             a->home[0] ? a->home : "(unallocated)");
            epoch_text(out, a->epoch);
            LIT(out, "\n");
        }
        int wn = 6;
        for (size_t i = 0; i < v->n_regions; i++)
            wn = cell_width(wn, v->regions[i].node);
        if (v->n_regions)
            shoal_buf_printf(out, "  %-*s  %-6s  %s\n", wn, "REGION", "KIND", "EPOCH");
        for (size_t i = 0; i < v->n_regions; i++) {
            const region_row_t *r = &v->regions[i];
            shoal_buf_printf(out, "  %-*s  %-6s  ", wn, r->node, r->kind[0] ? r->kind : "gone");
            epoch_text(out, r->epoch);
            LIT(out, "\n");
        }
    } else if (o->online) {
        shoal_buf_printf(out,
                         "no coordinator state: " COORD_PREFIX "%s is not on this node (no "
                         "coordinator has written it yet, or the type runs in another role)\n",
                         v->type);
    } else {
        shoal_buf_printf(out,
                         "no coordinator state: " COORD_PREFIX "%s is not stored here (it is not "
                         "durable; ask a live node with --node)\n",
                         v->type);
    }
    if (v->n_rem) {
        shoal_buf_printf(out, "remembered entities: %zu in %zu shards\n", v->n_entities, v->n_rem);
        int ws = 5;
        for (size_t i = 0; i < v->n_rem; i++)
            ws = cell_width(ws, v->rem[i].shard);
        shoal_buf_printf(out, "  %-*s  %s\n", ws, "SHARD",
                         o->entities ? "ENTITIES  IDS" : "ENTITIES");
        for (size_t i = 0; i < v->n_rem; i++) {
            const remembered_t *r = &v->rem[i];
            if (o->entities && r->n)
                shoal_buf_printf(out, "  %-*s  %-8zu", ws, r->shard, r->n);
            else
                shoal_buf_printf(out, "  %-*s  %zu", ws, r->shard, r->n);
            for (size_t j = 0; o->entities && j < r->n; j++) {
                LIT(out, j ? " " : "  ");
                key_text(out, r->ids[j], strlen(r->ids[j]));
            }
            LIT(out, "\n");
        }
    } else {
        LIT(out, "no remembered entities\n");
    }
    if (v->n_es) {
        shoal_buf_printf(out,
                         "entity state (" SHARD_PREFIX "%s" ESTATE_MARK "<shard>): %zu entities, "
                         "%zu reminders, %zu bytes in %zu shards\n",
                         v->type, v->es_entities, v->es_reminders, v->es_bytes, v->n_es);
        int ws = 5;
        for (size_t i = 0; i < v->n_es; i++)
            ws = cell_width(ws, v->es[i].shard);
        shoal_buf_printf(out, "  %-*s  %-8s  %-9s  %-7s  %-10s  %s\n", ws, "SHARD", "ENTITIES",
                         "REMINDERS", "DELETED", "BYTES", "FENCE");
        for (size_t i = 0; i < v->n_es; i++) {
            const estate_shard_t *x = &v->es[i];
            shoal_buf_printf(out, "  %-*s  %-8zu  %-9zu  %-7zu  %-10zu  ", ws, x->shard,
                             x->entities, x->reminders, x->deleted, x->bytes);
            epoch_text(out, (int64_t)x->fence);
            LIT(out, "\n");
            for (size_t j = 0; o->entities && j < x->n_ids; j++) {
                LIT(out, "    ");
                key_text(out, x->ids[j].id, strlen(x->ids[j].id));
                shoal_buf_printf(out, "  %zu bytes  at ", x->ids[j].bytes);
                epoch_text(out, (int64_t)x->ids[j].epoch);
                shoal_buf_printf(out, "/%llu\n", (unsigned long long)x->ids[j].seq);
            }
        }
    }
    if (v->has_all) {
        shoal_buf_printf(out, "all-shards (" SHARD_PREFIX "%s" ALL_SHARDS_SUFFIX "): %zu shards",
                         v->type, v->n_all);
        for (size_t i = 0; i < v->n_all; i++) {
            LIT(out, i ? " " : ": ");
            key_text(out, v->all[i], strlen(v->all[i]));
        }
        LIT(out, "\n");
    }
    if (v->has_daemon) {
        shoal_buf_printf(out, "daemon workers (" DAEMON_PREFIX "%s" WORKERS_SUFFIX "): ", v->type);
        key_text(out, v->daemon, strlen(v->daemon));
        LIT(out, "\n");
    }
    if (v->n_problems) {
        shoal_buf_printf(out, "problems: %zu\n", v->n_problems);
        for (size_t i = 0; i < v->n_problems; i++)
            shoal_buf_printf(out, "  %s\n", v->problems[i]);
    }
}

static void json_cstr(shoal_buf_t *out, const char *s)
{
    json_str(out, s, strlen(s));
}

static void json_epoch(shoal_buf_t *out, int64_t ts)
{
    LIT(out, "\"epoch\":");
    shoal_buf_t e = {0};
    epoch_text(&e, ts);
    json_str(out, e.data, e.len);
    shoal_buf_free(&e);
    shoal_buf_printf(out, ",\"timestamp\":%lld", (long long)ts);
}

/* The worker count as a number; a value that is no count, as the string it is. */
static void json_workers(shoal_buf_t *out, const sview_t *v)
{
    size_t len = v->has_daemon ? strlen(v->daemon) : 0;
    if (!v->has_daemon)
        LIT(out, "null");
    else if (len && len < 10 && strspn(v->daemon, "0123456789") == len)
        shoal_buf_printf(out, "%lu", strtoul(v->daemon, NULL, 10));
    else
        json_cstr(out, v->daemon);
}

static void sview_json(shoal_buf_t *out, const sview_t *v, const sopts_t *o)
{
    LIT(out, "{\"role\":");
    json_cstr(out, o->role);
    LIT(out, ",\"type\":");
    json_cstr(out, v->type);
    LIT(out, ",\"coordinator\":");
    if (v->coord) {
        LIT(out, "{\"shards\":[");
        for (size_t i = 0; i < v->n_allocs; i++) {
            LIT(out, i ? ",{\"shard\":" : "{\"shard\":");
            json_cstr(out, v->allocs[i].shard);
            LIT(out, ",\"home\":");
            if (v->allocs[i].home[0])
                json_cstr(out, v->allocs[i].home);
            else
                LIT(out, "null");
            LIT(out, ",");
            json_epoch(out, v->allocs[i].epoch);
            LIT(out, "}");
        }
        LIT(out, "],\"regions\":[");
        for (size_t i = 0; i < v->n_regions; i++) {
            LIT(out, i ? ",{\"node\":" : "{\"node\":");
            json_cstr(out, v->regions[i].node);
            LIT(out, ",\"kind\":");
            json_cstr(out, v->regions[i].kind[0] ? v->regions[i].kind : "gone");
            LIT(out, ",");
            json_epoch(out, v->regions[i].epoch);
            LIT(out, "}");
        }
        LIT(out, "]}");
    } else {
        LIT(out, "null");
    }
    shoal_buf_printf(out, ",\"remembered\":{\"entities\":%zu,\"shards\":[", v->n_entities);
    for (size_t i = 0; i < v->n_rem; i++) {
        LIT(out, i ? ",{\"shard\":" : "{\"shard\":");
        json_cstr(out, v->rem[i].shard);
        shoal_buf_printf(out, ",\"entities\":%zu", v->rem[i].n);
        if (o->entities) {
            LIT(out, ",\"ids\":[");
            for (size_t j = 0; j < v->rem[i].n; j++) {
                if (j)
                    LIT(out, ",");
                json_cstr(out, v->rem[i].ids[j]);
            }
            LIT(out, "]");
        }
        LIT(out, "}");
    }
    shoal_buf_printf(out,
                     "]},\"entity_state\":{\"entities\":%zu,\"reminders\":%zu,\"bytes\":%zu,"
                     "\"shards\":[",
                     v->es_entities, v->es_reminders, v->es_bytes);
    for (size_t i = 0; i < v->n_es; i++) {
        const estate_shard_t *x = &v->es[i];
        LIT(out, i ? ",{\"shard\":" : "{\"shard\":");
        json_cstr(out, x->shard);
        shoal_buf_printf(out, ",\"entities\":%zu,\"reminders\":%zu,\"deleted\":%zu,\"bytes\":%zu,",
                         x->entities, x->reminders, x->deleted, x->bytes);
        LIT(out, "\"fence\":{");
        json_epoch(out, (int64_t)x->fence);
        LIT(out, "}");
        if (o->entities) {
            LIT(out, ",\"ids\":[");
            for (size_t j = 0; j < x->n_ids; j++) {
                LIT(out, j ? ",{\"id\":" : "{\"id\":");
                json_cstr(out, x->ids[j].id);
                shoal_buf_printf(out, ",\"bytes\":%zu,\"seq\":%llu,", x->ids[j].bytes,
                                 (unsigned long long)x->ids[j].seq);
                json_epoch(out, (int64_t)x->ids[j].epoch);
                LIT(out, "}");
            }
            LIT(out, "]");
        }
        LIT(out, "}");
    }
    LIT(out, "]},\"all_shards\":");
    if (v->has_all) {
        LIT(out, "[");
        for (size_t i = 0; i < v->n_all; i++) {
            if (i)
                LIT(out, ",");
            json_cstr(out, v->all[i]);
        }
        LIT(out, "]");
    } else {
        LIT(out, "null");
    }
    LIT(out, ",\"daemon_workers\":");
    json_workers(out, v);
    LIT(out, ",\"problems\":[");
    for (size_t i = 0; i < v->n_problems; i++) {
        if (i)
            LIT(out, ",");
        json_cstr(out, v->problems[i]);
    }
    LIT(out, "]}\n");
}

/* The report of one type (type NULL: the types found). Nothing of the type: exit 1. */
static int sharding_report(const skeys_t *keys, const char *type, const sopts_t *o,
                           const char *where, shoal_buf_t *out)
{
    size_t n_types = 0;
    char **types = sharding_types(keys, &n_types);
    int ex = EXIT_OK, wt = 4;
    if (type) {
        sview_t v;
        sview_build(&v, keys, type, types, n_types);
        if (sview_empty(&v)) {
            fprintf(stderr, "ddata-dump: no sharding state of type \"%s\" in %s, replicator \"%s\"",
                    type, where, o->role);
            for (size_t i = 0; i < n_types; i++)
                fprintf(stderr, "%s%s", i ? ", " : " (types found: ", types[i]);
            fprintf(stderr, "%s\n", n_types ? ")" : "");
            ex = EXIT_DIFF;
        } else if (o->json) {
            sview_json(out, &v, o);
        } else {
            sview_text(out, &v, o);
        }
        sview_free(&v);
        strs_free(types, n_types);
        return ex;
    }
    if (o->json) {
        LIT(out, "{\"role\":");
        json_cstr(out, o->role);
        LIT(out, ",\"types\":[");
    } else if (n_types) {
        LIT(out, "sharding types in replicator ");
        shoal_buf_append_quoted(out, o->role, strlen(o->role));
        shoal_buf_printf(out, ": %zu\n", n_types);
        for (size_t i = 0; i < n_types; i++)
            wt = cell_width(wt, types[i]);
        shoal_buf_printf(out, "  %-*s  %-22s  %-24s  %s\n", wt, "TYPE", "COORDINATOR",
                         "REMEMBERED", "DAEMON");
    }
    for (size_t i = 0; i < n_types; i++) {
        sview_t v;
        sview_build(&v, keys, types[i], types, n_types);
        if (o->json) {
            LIT(out, i ? ",{\"type\":" : "{\"type\":");
            json_cstr(out, types[i]);
            shoal_buf_printf(out, ",\"coordinator\":%s", v.coord ? "true" : "false");
            if (v.coord)
                shoal_buf_printf(out, ",\"shards\":%zu,\"regions\":%zu", v.n_allocs,
                                 live_regions(&v));
            shoal_buf_printf(out, ",\"remembered_entities\":%zu,\"remembered_shards\":%zu",
                             v.n_entities, v.n_rem);
            LIT(out, ",\"daemon_workers\":");
            json_workers(out, &v);
            LIT(out, "}");
        } else {
            char coord[64] = "-", rem[64] = "-";
            if (v.coord)
                snprintf(coord, sizeof coord, "%zu shards, %zu regions", v.n_allocs,
                         live_regions(&v));
            if (v.n_rem)
                snprintf(rem, sizeof rem, "%zu in %zu shards", v.n_entities, v.n_rem);
            shoal_buf_printf(out, "  %-*s  %-22s  %-24s  %s\n", wt, types[i], coord, rem,
                             v.has_daemon ? v.daemon : "-");
        }
        sview_free(&v);
    }
    if (o->json) {
        LIT(out, "]}\n");
    } else if (!n_types) {
        LIT(out, "no sharding keys in replicator ");
        shoal_buf_append_quoted(out, o->role, strlen(o->role));
        LIT(out, "\n");
        ex = EXIT_DIFF;
    }
    strs_free(types, n_types);
    return ex;
}

/* ---------------------------------------------------------------------------------------------
 * The store (runs in the child)
 */
typedef struct {
    const char *dir;
    const char *key;
    bool json;
    const char *salvage;
    const char *compact;
    bool sharding;             /* --sharding [TYPE] */
    const char *sharding_type; /* NULL: list the types */
    bool entities;
    const char *role; /* of --sharding */
    const char *backup; /* --backup DEST */
} store_opts_t;

static int store_fail(const char *dir, const char *what, int rc)
{
    fprintf(stderr, "ddata-dump: %s: %s (%s)\n", dir, what, mdb_strerror(rc));
    return EXIT_BAD;
}

/* Checks meta/format; fills `format` with the stored value. */
static int check_format(MDB_txn *txn, const char *dir, char *format, size_t cap)
{
    MDB_dbi meta;
    int rc = mdb_dbi_open(txn, "meta", 0, &meta);
    if (rc != 0) {
        fprintf(stderr, "ddata-dump: %s: not a Shoal store (no \"meta\" database)\n", dir);
        return EXIT_BAD;
    }
    MDB_val k = {6, (void *)"format"}, v;
    rc = mdb_get(txn, meta, &k, &v);
    if (rc != 0) {
        fprintf(stderr, "ddata-dump: %s: not a Shoal store (no format record)\n", dir);
        return EXIT_BAD;
    }
    size_t n = v.mv_size < cap - 1 ? v.mv_size : cap - 1;
    memcpy(format, v.mv_data, n);
    format[n] = 0;
    size_t plen = strlen(FORMAT_NAME " ");
    if (v.mv_size != n || strncmp(format, FORMAT_NAME " ", plen) != 0 || strlen(format) != n) {
        fprintf(stderr, "ddata-dump: %s: not a Shoal store (format is not " FORMAT_NAME ")\n",
                dir);
        return EXIT_BAD;
    }
    char *end = NULL;
    errno = 0;
    long ver = strtol(format + plen, &end, 10);
    if (errno || end == format + plen || *end) {
        fprintf(stderr, "ddata-dump: %s: not a Shoal store (bad format record \"%s\")\n", dir,
                format);
        return EXIT_BAD;
    }
    if (ver > FORMAT_VERSION) {
        fprintf(stderr,
                "ddata-dump: %s: newer format (\"%s\"; this tool reads " FORMAT_NAME " %d)\n",
                dir, format, FORMAT_VERSION);
        return EXIT_BAD;
    }
    if (ver != FORMAT_VERSION) {
        fprintf(stderr, "ddata-dump: %s: not a Shoal store (unknown format \"%s\")\n", dir,
                format);
        return EXIT_BAD;
    }
    return EXIT_OK;
}

/* The replicator databases: names "ddata:<role>" in the main database. */
typedef struct {
    char **names;
    size_t n;
} db_list_t;

static int list_dbs(MDB_txn *txn, db_list_t *out)
{
    memset(out, 0, sizeof *out);
    MDB_dbi main_db;
    int rc = mdb_dbi_open(txn, NULL, 0, &main_db);
    if (rc != 0)
        return rc;
    MDB_cursor *cur;
    rc = mdb_cursor_open(txn, main_db, &cur);
    if (rc != 0)
        return rc;
    MDB_val k, v;
    size_t plen = strlen(DB_PREFIX);
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size < plen || memcmp(k.mv_data, DB_PREFIX, plen) != 0 ||
            memchr(k.mv_data, 0, k.mv_size))
            continue;
        char *name = malloc(k.mv_size + 1);
        char **grown = realloc(out->names, (out->n + 1) * sizeof *grown);
        if (!name || !grown)
            abort();
        out->names = grown;
        memcpy(name, k.mv_data, k.mv_size);
        name[k.mv_size] = 0;
        out->names[out->n++] = name;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static void db_list_free(db_list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
}

/* A value as structured JSON, so jq can query it: counters as numbers, sets as arrays of
   strings, maps as objects (key -> value), registers as {"value", "timestamp", "writer"}, a flag
   as a boolean, a version vector as node -> counter. Types without a structure of their own here
   (sharding's entity state, say) are their rendering, a string. */
typedef struct {
    shoal_buf_t *out;
    int depth;
    bool first;
} jv_t;

static void json_value(shoal_buf_t *out, const shoal_crdt_t *v, int depth);

static int jv_elem(const void *elem, size_t len, void *arg)
{
    jv_t *j = arg;
    if (!j->first)
        LIT(j->out, ",");
    j->first = false;
    json_str(j->out, elem, len);
    return 0;
}

static int jv_entry(const void *key, size_t len, const shoal_crdt_t *value, void *arg)
{
    jv_t *j = arg;
    if (!j->first)
        LIT(j->out, ",");
    j->first = false;
    json_str(j->out, key, len);
    LIT(j->out, ":");
    json_value(j->out, value, j->depth + 1);
    return 0;
}

static void json_value(shoal_buf_t *out, const shoal_crdt_t *v, int depth)
{
    const char *t = shoal_type_name(shoal_crdt_type(v));
    jv_t j = {out, depth, true};
    if (!t || depth > 8) {
        LIT(out, "null");
    } else if (!strcmp(t, "GCounter")) {
        shoal_buf_printf(out, "%llu", (unsigned long long)shoal_gcounter_value(v));
    } else if (!strcmp(t, "PNCounter")) {
        int64_t n = 0;
        if (shoal_pncounter_value(v, &n) == 0)
            shoal_buf_printf(out, "%lld", (long long)n);
        else /* past int64: increments less decrements, still exact */
            shoal_buf_printf(out, "{\"increments\":%llu,\"decrements\":%llu}",
                             (unsigned long long)shoal_pncounter_increments(v),
                             (unsigned long long)shoal_pncounter_decrements(v));
    } else if (!strcmp(t, "GSet") || !strcmp(t, "ORSet")) {
        LIT(out, "[");
        if (!strcmp(t, "GSet"))
            shoal_gset_foreach(v, jv_elem, &j);
        else
            shoal_orset_foreach(v, jv_elem, &j);
        LIT(out, "]");
    } else if (!strcmp(t, "Flag")) {
        LIT(out, shoal_flag_enabled(v) ? "true" : "false");
    } else if (!strcmp(t, "LWWRegister")) {
        size_t len = 0;
        const void *val = shoal_lwwreg_value(v, &len);
        const shoal_node_t *w = shoal_lwwreg_writer(v);
        LIT(out, "{\"value\":");
        if (val)
            json_str(out, val, len);
        else
            LIT(out, "null");
        shoal_buf_printf(out, ",\"timestamp\":%lld,\"writer\":", (long long)shoal_lwwreg_timestamp(v));
        if (w)
            json_str(out, shoal_node_id(w), strlen(shoal_node_id(w)));
        else
            LIT(out, "null");
        LIT(out, "}");
    } else if (!strcmp(t, "VersionVector")) {
        LIT(out, "{");
        for (size_t i = 0; i < shoal_vv_size(v); i++) {
            const shoal_node_t *n = NULL;
            uint64_t c = 0;
            if (shoal_vv_entry(v, i, &n, &c) != 0 || !n)
                continue;
            if (!j.first)
                LIT(out, ",");
            j.first = false;
            json_str(out, shoal_node_id(n), strlen(shoal_node_id(n)));
            shoal_buf_printf(out, ":%llu", (unsigned long long)c);
        }
        LIT(out, "}");
    } else if (!strcmp(t, "ORMap") || !strcmp(t, "LWWMap") || !strcmp(t, "PNCounterMap") ||
               !strcmp(t, "ORMultiMap")) {
        LIT(out, "{");
        shoal_ormap_foreach(v, jv_entry, &j);
        LIT(out, "}");
    } else {
        shoal_buf_t r = {0};
        shoal_crdt_render(v, &r);
        json_str(out, r.data, r.len);
        shoal_buf_free(&r);
    }
}

/* The kept membership's identities: a JSON array, or "N identities: a, b" */
static void kept_ids(shoal_buf_t *out, const entry_t *e, bool json)
{
    if (json) {
        LIT(out, "{\"format\":\"shoal-voters 1\",\"identities\":[");
        for (size_t i = 0; i < e->n_ids; i++) {
            if (i)
                LIT(out, ",");
            json_str(out, e->ids[i], e->id_lens[i]);
        }
        LIT(out, "]}");
        return;
    }
    shoal_buf_printf(out, "%zu %s", e->n_ids, e->n_ids == 1 ? "identity" : "identities");
    for (size_t i = 0; i < e->n_ids; i++) {
        LIT(out, i ? ", " : ": ");
        shoal_buf_append(out, e->ids[i], e->id_lens[i]);
    }
}

static void list_entry(shoal_buf_t *out, const MDB_val *k, const entry_t *e, bool json)
{
    shoal_buf_t r = {0};
    if (e->value)
        shoal_crdt_render(e->value, &r);
    const char *type = e->value               ? shoal_type_name(shoal_crdt_type(e->value))
                       : e->kept && !e->error ? KEPT_TYPE
                                              : NULL;
    if (json) {
        LIT(out, "{\"key\":");
        json_str(out, k->mv_data, k->mv_size);
        LIT(out, ",\"type\":");
        if (type)
            json_str(out, type, strlen(type));
        else
            LIT(out, "null");
        shoal_buf_printf(out, ",\"bytes\":%zu,\"deleted\":%s,\"value\":", e->bytes,
                         e->deleted ? "true" : "false");
        if (e->value)
            json_value(out, e->value, 0);
        else if (e->kept && !e->error)
            kept_ids(out, e, true);
        else
            LIT(out, "null");
        if (e->error) {
            LIT(out, ",\"error\":");
            json_str(out, e->error, strlen(e->error));
        }
        LIT(out, "}");
    } else {
        LIT(out, "  ");
        key_text(out, k->mv_data, k->mv_size);
        shoal_buf_printf(out, "  %s  %zu bytes  ", type ? type : "-", e->bytes);
        if (e->deleted)
            LIT(out, "deleted");
        else if (e->error)
            shoal_buf_printf(out, "UNDECODABLE (%s)", e->error);
        else if (e->kept)
            kept_ids(out, e, false);
        else
            one_line(out, &r, LINE_RENDER);
        LIT(out, "\n");
    }
    shoal_buf_free(&r);
}

static void show_key(shoal_buf_t *out, const char *role, const MDB_val *k, const entry_t *e)
{
    LIT(out, "role: ");
    shoal_buf_append_quoted(out, role, strlen(role));
    LIT(out, "\nkey: ");
    key_text(out, k->mv_data, k->mv_size);
    const char *type = e->value               ? shoal_type_name(shoal_crdt_type(e->value))
                       : e->kept && !e->error ? KEPT_TYPE
                                              : "-";
    shoal_buf_printf(out, "\ntype: %s\nbytes: %zu\ndeleted: %s\n", type, e->bytes,
                     e->deleted ? "yes" : "no");
    if (e->env)
        shoal_buf_printf(out, "pruning markers: %zu\ndelta origins: %zu\n", e->env->n_pruning,
                         e->env->n_delta_nodes);
    if (e->value) {
        uint8_t d[16];
        if (shoal_crdt_digest(e->value, d) == 0) {
            LIT(out, "digest: ");
            hex(out, d, sizeof d);
            LIT(out, "\n");
        }
        LIT(out, "value: ");
        shoal_crdt_render(e->value, out);
        LIT(out, "\n");
    } else if (e->error) {
        shoal_buf_printf(out, "value: UNDECODABLE (%s)\n", e->error);
    } else if (e->kept) {
        LIT(out, "value: ");
        kept_ids(out, e, false);
        LIT(out, "\n");
    }
}

/* Dump, --key, --json over every replicator database. */
static int dump(MDB_txn *txn, const db_list_t *dbs, const store_opts_t *o, const char *format,
                shoal_buf_t *out)
{
    size_t found = 0, damaged = 0;
    if (o->json) {
        LIT(out, "{\"format\":");
        json_str(out, format, strlen(format));
        LIT(out, ",\"replicators\":[");
    }
    for (size_t d = 0; d < dbs->n; d++) {
        const char *role = dbs->names[d] + strlen(DB_PREFIX);
        MDB_dbi dbi;
        int rc = mdb_dbi_open(txn, dbs->names[d], 0, &dbi);
        if (rc != 0) { /* a plain key named ddata:... in the main database: not a replicator */
            fprintf(stderr, "ddata-dump: skipping \"%s\": %s\n", dbs->names[d], mdb_strerror(rc));
            continue;
        }
        if (o->key) {
            MDB_val k = {strlen(o->key), (void *)o->key}, v;
            rc = mdb_get(txn, dbi, &k, &v);
            if (rc == 0) {
                entry_t e;
                entry_read_in(&e, role, &k, &v);
                damaged += e.error != NULL;
                if (o->json) { /* the listing's shape, with this key alone in each replicator */
                    if (found++)
                        LIT(out, ",");
                    LIT(out, "{\"role\":");
                    json_str(out, role, strlen(role));
                    LIT(out, ",\"keys\":[");
                    list_entry(out, &k, &e, true);
                    LIT(out, "]}");
                } else {
                    if (found++)
                        LIT(out, "\n");
                    show_key(out, role, &k, &e);
                }
                entry_free(&e);
            }
            continue;
        }
        MDB_stat st;
        if (mdb_stat(txn, dbi, &st) != 0)
            st.ms_entries = 0;
        if (o->json) {
            LIT(out, d ? ",{\"role\":" : "{\"role\":");
            json_str(out, role, strlen(role));
            LIT(out, ",\"keys\":[");
        } else {
            LIT(out, "replicator ");
            shoal_buf_append_quoted(out, role, strlen(role));
            shoal_buf_printf(out, ": %zu keys\n", (size_t)st.ms_entries);
        }
        MDB_cursor *cur;
        rc = mdb_cursor_open(txn, dbi, &cur);
        if (rc != 0)
            return store_fail(o->dir, "cannot read", rc);
        MDB_val k, v;
        size_t i = 0;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++) {
            entry_t e;
            entry_read_in(&e, role, &k, &v);
            damaged += e.error != NULL;
            if (o->json && i)
                LIT(out, ",");
            list_entry(out, &k, &e, o->json);
            entry_free(&e);
        }
        mdb_cursor_close(cur);
        if (rc != MDB_NOTFOUND)
            return store_fail(o->dir, "the store is corrupt", rc);
        if (o->json)
            LIT(out, "]}");
    }
    if (o->json)
        LIT(out, "]}\n");
    else if (!o->key && dbs->n == 0)
        LIT(out, "no replicator databases\n");
    if (o->key && !found) {
        fprintf(stderr, "ddata-dump: no key \"%s\" in %s\n", o->key, o->dir);
        return EXIT_DIFF;
    }
    if (damaged) {
        /* the listing is printed all the same: it shows which keys */
        fprintf(stderr,
                "ddata-dump: %s: %zu %s UNDECODABLE: the store is damaged (--salvage OUT copies "
                "the rest into a new store)\n",
                o->dir, damaged, damaged == 1 ? "record is" : "records are");
        return EXIT_BAD;
    }
    return EXIT_OK;
}

/* Prepares OUT for a new environment: created if missing, and it must not hold one already. */
static int prepare_out(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "ddata-dump: cannot create %s: %s\n", dir, strerror(errno));
        return EXIT_BAD;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (access(path, F_OK) == 0) {
        fprintf(stderr, "ddata-dump: %s already holds a store; choose an empty directory\n", dir);
        return EXIT_BAD;
    }
    return EXIT_OK;
}

/* Copies every entry whose envelope unpacks and whose value decodes (tombstones included: they
   are valid and keep a deleted key deleted) into a new environment at OUT, raw bytes unchanged. */
static int salvage(MDB_env *src, MDB_txn *txn, const db_list_t *dbs, const store_opts_t *o,
                   const char *format, shoal_buf_t *out)
{
    int ex = prepare_out(o->salvage);
    if (ex)
        return ex;
    MDB_envinfo info;
    mdb_env_info(src, &info);
    MDB_env *dst;
    MDB_txn *w = NULL;
    int rc = mdb_env_create(&dst);
    if (rc)
        return store_fail(o->salvage, "cannot create the copy", rc);
    mdb_env_set_maxdbs(dst, MAX_DBS);
    mdb_env_set_mapsize(dst, info.me_mapsize > (64u << 20) ? info.me_mapsize : (64u << 20));
    rc = mdb_env_open(dst, o->salvage, 0, 0644);
    if (rc == 0)
        rc = mdb_txn_begin(dst, NULL, 0, &w);
    MDB_dbi meta;
    if (rc == 0)
        rc = mdb_dbi_open(w, "meta", MDB_CREATE, &meta);
    if (rc == 0) {
        MDB_val k = {6, (void *)"format"}, v = {strlen(format), (void *)format};
        rc = mdb_put(w, meta, &k, &v, 0);
    }
    size_t kept = 0, skipped = 0;
    for (size_t d = 0; rc == 0 && d < dbs->n; d++) {
        MDB_dbi sdb, ddb;
        if (mdb_dbi_open(txn, dbs->names[d], 0, &sdb) != 0)
            continue;
        rc = mdb_dbi_open(w, dbs->names[d], MDB_CREATE, &ddb);
        MDB_cursor *cur = NULL;
        if (rc == 0)
            rc = mdb_cursor_open(txn, sdb, &cur);
        MDB_val k, v;
        int crc;
        for (crc = rc ? MDB_NOTFOUND : mdb_cursor_get(cur, &k, &v, MDB_FIRST); crc == 0 && rc == 0;
             crc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            entry_t e;
            entry_read_in(&e, dbs->names[d] + strlen(DB_PREFIX), &k, &v);
            if (e.value || e.deleted || (e.kept && !e.error)) {
                rc = mdb_put(w, ddb, &k, &v, 0);
                kept++;
            } else {
                skipped++;
                LIT(out, "skipped ");
                shoal_buf_append_quoted(out, dbs->names[d] + strlen(DB_PREFIX),
                                        strlen(dbs->names[d] + strlen(DB_PREFIX)));
                LIT(out, " ");
                key_text(out, k.mv_data, k.mv_size);
                shoal_buf_printf(out, ": UNDECODABLE (%s)\n", e.error);
            }
            entry_free(&e);
        }
        if (cur)
            mdb_cursor_close(cur);
        if (rc == 0 && crc != MDB_NOTFOUND) {
            /* A broken page ends this database; what was read before it is kept. */
            shoal_buf_printf(out, "database \"%s\" ends early: %s\n", dbs->names[d],
                             mdb_strerror(crc));
        }
    }
    if (rc == 0) {
        rc = mdb_txn_commit(w);
        w = NULL;
    }
    if (w)
        mdb_txn_abort(w);
    mdb_env_close(dst);
    if (rc)
        return store_fail(o->salvage, "cannot write the copy", rc);
    shoal_buf_printf(out, "salvaged %zu entries into %s, skipped %zu\n", kept, o->salvage,
                     skipped);
    return EXIT_OK;
}

/* --sharding over the role's database. */
static int store_sharding(MDB_txn *txn, const db_list_t *dbs, const store_opts_t *o,
                          shoal_buf_t *out)
{
    char name[4200];
    snprintf(name, sizeof name, DB_PREFIX "%s", o->role);
    bool listed = false;
    for (size_t d = 0; d < dbs->n && !listed; d++)
        listed = strcmp(dbs->names[d], name) == 0;
    MDB_dbi dbi;
    if (!listed || mdb_dbi_open(txn, name, 0, &dbi) != 0) {
        fprintf(stderr, "ddata-dump: %s: no replicator \"%s\" in this store\n", o->dir, o->role);
        return EXIT_DIFF;
    }
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc != 0)
        return store_fail(o->dir, "cannot read", rc);
    skeys_t keys = {0};
    MDB_val k, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (!sharding_key(k.mv_data, k.mv_size))
            continue;
        entry_t e;
        entry_read(&e, &v);
        skeys_add(&keys, k.mv_data, k.mv_size, e.value, e.deleted, e.error);
        e.value = NULL; /* kept in keys */
        entry_free(&e);
    }
    mdb_cursor_close(cur);
    int ex;
    if (rc != MDB_NOTFOUND) {
        ex = store_fail(o->dir, "the store is corrupt", rc);
    } else {
        sopts_t so = {o->json, o->entities, false, o->role};
        ex = sharding_report(&keys, o->sharding_type, &so, o->dir, out);
    }
    skeys_free(&keys);
    return ex;
}

/* ---------------------------------------------------------------------------------------------
 * Backup and restore (docs/operations.md, "Backup, restore and disaster recovery").
 *
 * BACKUP. mdb_env_copy2 with MDB_CP_COMPACT copies the environment inside one read transaction,
 * so the copy is the store as of one commit, whatever a running node writes meanwhile (LMDB
 * readers do not block its writer, nor it them). Beside the copy's data.mdb, a manifest
 * (MANIFEST_NAME) says what it is:
 *     shoal-backup 1
 *     format: shoal-durable 1           the store's meta/format
 *     shoal-version: 0.2.0              the ddata-dump that wrote it
 *     node-id: <32 hex>                 the identity of the directory backed up (meta/node-id)
 *     written-at: 2026-11-28T14:52:09Z
 *     source: /var/lib/app/ddata
 * written last (temporary file, fsync, rename, directory fsync): a backup without a manifest
 * was cut short and is refused by --restore.
 *
 * RESTORE. Into an empty (or new) directory only: a restore never overwrites a store. The
 * identity (meta/node-id) travels with the data, so the operator says which node the directory
 * becomes: --keep-identity, the node that was backed up comes back (its directory is gone; never
 * beside a live member with that identity), or --new-identity, a new node (a new id, and the
 * kept membership of the old one dropped: a new node learns the cluster's from the cluster).
 */
#define MANIFEST_NAME "shoal-backup"
#define MANIFEST_STEM "shoal-backup 1\n"
#define NODE_ID_KEY   "node-id"
#define KEPT_DB       DB_PREFIX SHOAL_CLUSTER_STORE_ROLE

static int fsync_path(const char *path, bool dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDWR);
    if (fd < 0)
        return errno;
    int rc = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

/* meta/node-id of the open transaction's store into id ("" when it has none yet) */
static void read_node_id(MDB_txn *txn, char *id, size_t cap)
{
    *id = 0;
    MDB_dbi meta;
    MDB_val k = {strlen(NODE_ID_KEY), (void *)NODE_ID_KEY}, v;
    if (mdb_dbi_open(txn, "meta", 0, &meta) == 0 && mdb_get(txn, meta, &k, &v) == 0 &&
        v.mv_size < cap) {
        memcpy(id, v.mv_data, v.mv_size);
        id[v.mv_size] = 0;
    }
}

static int write_manifest(const char *dest, const char *format, const char *id, const char *src)
{
    char tmp_path[4200], path[4200], abs_src[4096], when[32];
    snprintf(tmp_path, sizeof tmp_path, "%s/" MANIFEST_NAME ".tmp", dest);
    snprintf(path, sizeof path, "%s/" MANIFEST_NAME, dest);
    if (!realpath(src, abs_src))
        snprintf(abs_src, sizeof abs_src, "%s", src);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    FILE *f = fopen(tmp_path, "w");
    if (!f)
        return errno;
    fprintf(f,
            MANIFEST_STEM "format: %s\nshoal-version: %s\nnode-id: %s\nwritten-at: %s\n"
                          "source: %s\n",
            format, SHOAL_VERSION, *id ? id : "-", when, abs_src);
    int rc = fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : errno;
    if (fclose(f) != 0 && !rc)
        rc = errno;
    if (!rc && rename(tmp_path, path) != 0)
        rc = errno;
    if (!rc)
        rc = fsync_path(dest, true);
    if (rc)
        unlink(tmp_path);
    return rc;
}

static int backup(MDB_env *env, MDB_txn *txn, const store_opts_t *o, const char *format,
                  shoal_buf_t *out)
{
    int ex = prepare_out(o->backup);
    if (ex)
        return ex;
    char manifest[4200], file[4200], id[64];
    snprintf(manifest, sizeof manifest, "%s/" MANIFEST_NAME, o->backup);
    if (access(manifest, F_OK) == 0) {
        fprintf(stderr, "ddata-dump: %s already holds a backup; choose an empty directory\n",
                o->backup);
        return EXIT_BAD;
    }
    read_node_id(txn, id, sizeof id);
    /* the copy takes its own read transaction (one commit's state), and LMDB allows one per
       thread */
    mdb_txn_reset(txn);
    snprintf(file, sizeof file, "%s/data.mdb", o->backup);
    int rc = mdb_env_copy2(env, o->backup, MDB_CP_COMPACT);
    if (rc == 0)
        rc = fsync_path(file, false); /* LMDB's copy does not sync what it wrote */
    if (rc == 0)
        rc = write_manifest(o->backup, format, id, o->dir);
    if (rc) {
        unlink(file); /* a partial copy must not look like a backup */
        return store_fail(o->backup, "cannot write the backup", rc);
    }
    struct stat st;
    shoal_buf_printf(out, "backup of %s written to %s: %lld bytes, %s, identity %s, Shoal %s\n",
                     o->dir, o->backup, stat(file, &st) == 0 ? (long long)st.st_size : -1LL, format,
                     *id ? id : "(none yet)", SHOAL_VERSION);
    return EXIT_OK;
}

typedef struct {
    int format_version;
    char format[64], node_id[64], version[64], written_at[64];
} manifest_t;

static int read_manifest(const char *dir, manifest_t *m)
{
    memset(m, 0, sizeof *m);
    char path[4200], line[4200];
    snprintf(path, sizeof path, "%s/" MANIFEST_NAME, dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr,
                "ddata-dump: %s: no backup manifest (%s: %s): not a backup written by "
                "ddata-dump --backup, or one cut short\n",
                dir, path, strerror(errno));
        return EXIT_BAD;
    }
    bool stem = fgets(line, sizeof line, f) && strcmp(line, MANIFEST_STEM) == 0;
    while (stem && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *colon = strstr(line, ": ");
        if (!colon)
            continue;
        *colon = 0;
        const char *val = colon + 2;
        if (!strcmp(line, "format"))
            snprintf(m->format, sizeof m->format, "%s", val);
        else if (!strcmp(line, "node-id"))
            snprintf(m->node_id, sizeof m->node_id, "%s", val);
        else if (!strcmp(line, "shoal-version"))
            snprintf(m->version, sizeof m->version, "%s", val);
        else if (!strcmp(line, "written-at"))
            snprintf(m->written_at, sizeof m->written_at, "%s", val);
    }
    fclose(f);
    if (!stem || sscanf(m->format, "shoal-durable %d", &m->format_version) != 1) {
        fprintf(stderr,
                "ddata-dump: %s: the backup manifest does not read (want \"shoal-backup "
                "1\" and a \"format: shoal-durable N\" line)\n",
                path);
        return EXIT_BAD;
    }
    if (m->format_version > FORMAT_VERSION) {
        fprintf(stderr,
                "ddata-dump: %s: the backup holds a newer format (%s, by Shoal %s) than "
                "this build reads (shoal-durable %d): restore it with that release\n",
                dir, m->format, m->version, FORMAT_VERSION);
        return EXIT_BAD;
    }
    return EXIT_OK;
}

/* 0 when dir is missing (then created) or an empty directory; EXIT_BAD, said, otherwise */
static int empty_target(const char *dir)
{
    if (mkdir(dir, 0755) == 0)
        return EXIT_OK;
    if (errno != EEXIST) {
        fprintf(stderr, "ddata-dump: cannot create %s: %s\n", dir, strerror(errno));
        return EXIT_BAD;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "ddata-dump: %s: %s\n", dir, strerror(errno));
        return EXIT_BAD;
    }
    struct dirent *e;
    const char *found = NULL;
    while ((e = readdir(d)) && !found)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, ".."))
            found = e->d_name;
    char name[256];
    snprintf(name, sizeof name, "%s", found ? found : "");
    closedir(d);
    if (*name) {
        fprintf(stderr,
                "ddata-dump: %s is not empty (it holds %s): a restore never overwrites "
                "a data directory; move it aside or choose an empty one\n",
                dir, name);
        return EXIT_BAD;
    }
    return EXIT_OK;
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), outfd = -1, rc = 0;
    if (in < 0)
        return errno;
    outfd = open(to, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (outfd < 0) {
        rc = errno;
        goto cleanup;
    }
    char buf[1 << 16];
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = errno;
            goto cleanup;
        }
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(outfd, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = w < 0 ? errno : EIO;
                goto cleanup;
            }
            off += w;
        }
    }
    if (fsync(outfd) != 0)
        rc = errno;
cleanup:
    if (outfd >= 0 && close(outfd) != 0 && !rc)
        rc = errno;
    close(in);
    return rc;
}

/* A new identity: the old node's meta/node-id and kept membership go; shoal_durable_open then
   makes a new id, as for any directory without one. */
static int forget_identity(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn = NULL;
    int rc = mdb_env_create(&env);
    if (rc)
        return rc;
    mdb_env_set_maxdbs(env, MAX_DBS);
    rc = mdb_env_open(env, dir, 0, 0644);
    if (rc == 0)
        rc = mdb_txn_begin(env, NULL, 0, &txn);
    MDB_dbi dbi;
    if (rc == 0 && (rc = mdb_dbi_open(txn, "meta", 0, &dbi)) == 0) {
        MDB_val k = {strlen(NODE_ID_KEY), (void *)NODE_ID_KEY};
        rc = mdb_del(txn, dbi, &k, NULL);
        if (rc == MDB_NOTFOUND)
            rc = 0;
    }
    if (rc == 0 && mdb_dbi_open(txn, KEPT_DB, 0, &dbi) == 0) {
        MDB_val k = {strlen(KEPT_KEY), (void *)KEPT_KEY};
        rc = mdb_del(txn, dbi, &k, NULL);
        if (rc == MDB_NOTFOUND)
            rc = 0;
    }
    if (rc == 0) {
        rc = mdb_txn_commit(txn);
        txn = NULL;
    }
    if (txn)
        mdb_txn_abort(txn);
    mdb_env_close(env);
    return rc;
}

static int connect_node(const char *ep, shoal_client_t **out);

/* KEEP-IDENTITY CHECK. Two live members with one identity would each answer for it and be
   counted as one voter twice (membership.h, KEPT MEMBERSHIP), so --keep-identity asks the
   cluster first: the first endpoint of `eps` whose node is in a cluster sends its view, and a
   member there with identity `id` that is neither Down nor Removed refuses the restore
   (EXIT_IDENTITY_LIVE), reachable or not (an unreachable member may be alive behind a partition:
   down it first). EXIT_UNREACHABLE when no endpoint answered as a member of a cluster. */
static int identity_live_check(const char *id, char *const *eps, size_t n_eps)
{
    bool asked = false;
    for (size_t i = 0; i < n_eps && !asked; i++) {
        char ep[300], why[400];
        if (cli_node_address(eps[i], ep, sizeof ep, why, sizeof why) != 0) {
            fprintf(stderr, "ddata-dump: --cluster %s\n", why);
            return EXIT_BAD;
        }
        shoal_client_t *cl;
        if (connect_node(ep, &cl) != EXIT_OK)
            continue;
        shoal_buf_t text = {0};
        int rc = shoal_client_cluster_view(cl, &text);
        shoal_client_destroy(&cl);
        if (rc < 0) {
            fprintf(stderr, "ddata-dump: %s did not send its members (%s)\n", ep,
                    shoal_strerror(rc));
            shoal_buf_free(&text);
            continue;
        }
        json_error_t jerr;
        json_t *root = json_loadb(shoal_buf_cstr(&text), text.len, 0, &jerr);
        shoal_buf_free(&text);
        json_t *members = root ? json_object_get(root, "members") : NULL;
        if (!json_is_array(members) || json_is_false(json_object_get(root, "in_cluster"))) {
            fprintf(stderr, "ddata-dump: %s is in no cluster (or sent no members): asking the "
                            "next endpoint\n",
                    ep);
            json_decref(root);
            continue;
        }
        asked = true;
        size_t k;
        json_t *m;
        json_array_foreach(members, k, m)
        {
            const char *mid = json_string_value(json_object_get(m, "id"));
            const char *status = json_string_value(json_object_get(m, "status"));
            const char *node = json_string_value(json_object_get(m, "node"));
            if (!mid || strcmp(mid, id) != 0 || !status || !strcmp(status, "Down") ||
                !strcmp(status, "Removed"))
                continue;
            bool reachable = !json_is_false(json_object_get(m, "reachable"));
            fprintf(stderr,
                    "ddata-dump: refused: identity %s is live in the cluster: member %s is %s%s "
                    "(asked %s). Two live members with one identity would count as one voter "
                    "twice. Stop that node (or `shoal-cluster down` it) and wait until it is "
                    "Removed, or restore with --new-identity\n",
                    id, node ? node : "?", status, reachable ? "" : " (unreachable)", ep);
            json_decref(root);
            return EXIT_IDENTITY_LIVE;
        }
        json_decref(root);
    }
    if (!asked) {
        fprintf(stderr,
                "ddata-dump: no member of the cluster answered (--cluster): the restore cannot "
                "check that no live member has the backup's identity. If every member is "
                "stopped (the whole cluster is being recovered), say so with "
                "--cluster-stopped\n");
        return EXIT_UNREACHABLE;
    }
    return EXIT_OK;
}

static int restore_mode(const char *from, const char *dir, int identity, char *const *cluster,
                        size_t n_cluster, bool cluster_stopped)
{
    if (!identity) {
        fprintf(stderr,
                "ddata-dump: --restore needs --keep-identity or --new-identity: the directory "
                "keeps the identity of the node backed up (meta/node-id). --keep-identity: "
                "that node comes back (its own directory is lost, and no live member has that "
                "identity); --new-identity: another node, a new member of the cluster (docs/"
                "operations.md, \"Backup, restore and disaster recovery\")\n");
        return EXIT_BAD;
    }
    if (identity == 1 && !n_cluster && !cluster_stopped) {
        fprintf(stderr,
                "ddata-dump: --keep-identity needs --cluster ENDPOINT (a member to ask whether "
                "that identity is live: the restore is refused while it is) or, when every "
                "member is stopped, --cluster-stopped (docs/operations.md, \"Backup, restore and "
                "disaster recovery\")\n");
        return EXIT_BAD;
    }
    manifest_t m;
    int ex = read_manifest(from, &m);
    if (ex)
        return ex;
    /* before anything is written: a refused restore leaves DIR as it was */
    if (identity == 1 && n_cluster && strcmp(m.node_id, "-") != 0 && *m.node_id &&
        (ex = identity_live_check(m.node_id, cluster, n_cluster)) != 0)
        return ex;
    char src[4200], dst[4200], tmp_dst[4200], err[1024];
    snprintf(src, sizeof src, "%s/data.mdb", from);
    if (access(src, R_OK) != 0) {
        fprintf(stderr, "ddata-dump: %s: %s\n", src, strerror(errno));
        return EXIT_BAD;
    }
    if ((ex = empty_target(dir)) != 0)
        return ex;
    snprintf(dst, sizeof dst, "%s/data.mdb", dir);
    snprintf(tmp_dst, sizeof tmp_dst, "%s/data.mdb.restoring", dir);
    int rc = copy_file(src, tmp_dst);
    if (!rc && rename(tmp_dst, dst) != 0)
        rc = errno;
    if (!rc)
        rc = fsync_path(dir, true);
    if (rc) {
        unlink(tmp_dst);
        unlink(dst);
        fprintf(stderr, "ddata-dump: cannot restore %s into %s: %s\n", from, dir, strerror(rc));
        return EXIT_BAD;
    }
    /* read the whole copy in a child before anything opens it for writing */
    rc = shoal_durable_check(dir, err, sizeof err);
    if (rc == 0 && identity == 2 && (rc = forget_identity(dir)) != 0)
        snprintf(err, sizeof err, "cannot replace its identity: %s", mdb_strerror(rc));
    shoal_durable_t *d = NULL;
    if (rc == 0) {
        shoal_durable_settings_t ds;
        shoal_durable_settings_default(&ds);
        ds.dir = dir;
        ds.check_on_open = false; /* checked above */
        d = shoal_durable_open(&ds, &rc);
        if (!d)
            snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    }
    if (!d) {
        char lock[4200];
        snprintf(lock, sizeof lock, "%s/lock.mdb", dir);
        unlink(dst);
        unlink(lock);
        fprintf(stderr, "ddata-dump: %s: the backup does not restore (%s); %s is left empty\n",
                from, err, dir);
        return EXIT_BAD;
    }
    const char *id = shoal_durable_node_id(d);
    if (identity == 1)
        printf("restored %s (written %s by Shoal %s) into %s: identity %s kept (%s): this "
               "directory is the node that was backed up; never start it beside a live member "
               "with that identity\n",
               from, m.written_at, m.version, dir, id,
               n_cluster ? "no live member has it" : "--cluster-stopped: not checked");
    else
        printf("restored %s (written %s by Shoal %s) into %s: NEW identity %s (the backup's was "
               "%s; its kept membership dropped): this directory joins as a new member\n",
               from, m.written_at, m.version, dir, id, m.node_id);
    shoal_durable_close(&d);
    return EXIT_OK;
}

static int read_store(const store_opts_t *o, shoal_buf_t *out)
{
    /* LMDB takes an empty data.mdb for a new environment and, read-only, fails writing its meta
       pages (EBADF): a file too short for the two meta pages it always writes first (4 KiB
       each at least) is reported as what it is */
    char data_file[4200];
    struct stat fst;
    snprintf(data_file, sizeof data_file, "%s/data.mdb", o->dir);
    if (stat(data_file, &fst) == 0 && S_ISREG(fst.st_mode) && fst.st_size < MIN_DATA_BYTES) {
        fprintf(stderr, "ddata-dump: %s: the store is corrupt (data.mdb is %lld bytes, too short "
                "to hold LMDB's two meta pages)\n", o->dir, (long long)fst.st_size);
        return EXIT_BAD;
    }
    MDB_env *env;
    int rc = mdb_env_create(&env);
    if (rc)
        return store_fail(o->dir, "cannot open", rc);
    mdb_env_set_maxdbs(env, MAX_DBS);
    rc = mdb_env_open(env, o->dir, MDB_RDONLY, 0644);
    if (rc) {
        mdb_env_close(env);
        if (rc == ENOENT) {
            fprintf(stderr, "ddata-dump: %s: not a Shoal store (no LMDB environment)\n", o->dir);
            return EXIT_BAD;
        }
        if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED) {
            fprintf(stderr, "ddata-dump: %s: the store is corrupt or not LMDB (%s)\n", o->dir,
                    mdb_strerror(rc));
            return EXIT_BAD;
        }
        return store_fail(o->dir, "cannot open the store", rc);
    }
    MDB_txn *txn;
    rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (rc) {
        mdb_env_close(env);
        return store_fail(o->dir, "cannot read", rc);
    }
    char format[64];
    int ex = check_format(txn, o->dir, format, sizeof format);
    db_list_t dbs = {0};
    if (ex == EXIT_OK && (rc = list_dbs(txn, &dbs)) != 0)
        ex = store_fail(o->dir, "the store is corrupt", rc);
    if (ex == EXIT_OK) {
        if (o->compact) {
            ex = prepare_out(o->compact);
            if (ex == EXIT_OK) {
                /* the copy takes its own read transaction, and LMDB allows one per thread */
                mdb_txn_reset(txn);
                rc = mdb_env_copy2(env, o->compact, MDB_CP_COMPACT);
                if (rc) {
                    char file[4200];
                    snprintf(file, sizeof file, "%s/data.mdb", o->compact);
                    unlink(file); /* a partial copy must not look like a store */
                    ex = store_fail(o->compact, "cannot write the compacted copy", rc);
                } else {
                    shoal_buf_printf(out, "compacted copy written to %s\n", o->compact);
                }
            }
        } else if (o->backup) {
            ex = backup(env, txn, o, format, out);
        } else if (o->salvage) {
            ex = salvage(env, txn, &dbs, o, format, out);
        } else if (o->sharding) {
            ex = store_sharding(txn, &dbs, o, out);
        } else {
            ex = dump(txn, &dbs, o, format, out);
        }
    }
    db_list_free(&dbs);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return ex;
}

/* Runs read_store in a child: a fault on a corrupt file kills the child, not the report. */
static int store_mode(const store_opts_t *o)
{
    struct stat st;
    if (stat(o->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "ddata-dump: %s: no such directory\n", o->dir);
        return EXIT_BAD;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "ddata-dump: pipe: %s\n", strerror(errno));
        return EXIT_BAD;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ddata-dump: fork: %s\n", strerror(errno));
        return EXIT_BAD;
    }
    if (pid == 0) {
        close(fds[0]);
        alarm(CHILD_TIMEOUT_S);
        shoal_buf_t out = {0};
        int ex = read_store(o, &out);
        size_t off = 0;
        while (off < out.len) {
            ssize_t w = write(fds[1], out.data + off, out.len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        shoal_buf_free(&out);
        fflush(stderr);
        _exit(ex);
    }
    close(fds[1]);
    shoal_buf_t report = {0};
    char chunk[65536];
    for (;;) {
        ssize_t r = read(fds[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        shoal_buf_append(&report, chunk, (size_t)r);
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int ex;
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "ddata-dump: %s: the store is corrupt (reading it died of signal %d%s)\n",
                o->dir, WTERMSIG(status),
                WTERMSIG(status) == SIGALRM ? ", it took too long" : "");
        ex = EXIT_BAD;
    } else {
        fwrite(report.data ? report.data : (uint8_t *)"", 1, report.len, stdout);
        ex = WIFEXITED(status) ? WEXITSTATUS(status) : EXIT_BAD;
    }
    shoal_buf_free(&report);
    return ex;
}

/* ---------------------------------------------------------------------------------------------
 * Running nodes
 */
typedef struct {
    char *key;
    char *type; /* "(deleted)" for a tombstone */
} node_key_t;

typedef struct {
    node_key_t *keys;
    size_t n;
} node_keys_t;

static void node_keys_free(node_keys_t *k)
{
    for (size_t i = 0; i < k->n; i++) {
        free(k->keys[i].key);
        free(k->keys[i].type);
    }
    free(k->keys);
    k->keys = NULL;
    k->n = 0;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(((const node_key_t *)a)->key, ((const node_key_t *)b)->key);
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d)
        abort();
    return d;
}

/* The KEYS request: names and types of every key of the role's replicator (sorted). */
static int fetch_keys(shoal_client_t *c, const char *role, node_keys_t *out)
{
    memset(out, 0, sizeof *out);
    Shoal__Client__Keys req = SHOAL__CLIENT__KEYS__INIT;
    req.role = (char *)role;
    size_t len = shoal__client__keys__get_packed_size(&req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        abort();
    shoal__client__keys__pack(&req, buf);
    shoal_buf_t rep = {0};
    uint16_t kind = 0;
    int rc = shoal_client_request(c, K_CLIENT_KEYS, buf, len, &kind, &rep, CLIENT_TIMEOUT_MS);
    free(buf);
    if (rc < 0) {
        shoal_buf_free(&rep);
        return rc;
    }
    Shoal__Client__Reply *r =
        shoal__client__reply__unpack(NULL, rep.len, rep.data ? rep.data : (uint8_t *)"");
    shoal_buf_free(&rep);
    if (!r)
        return SHOAL_EDECODE;
    rc = r->status;
    if (rc == 0) {
        out->keys = calloc(r->n_keys ? r->n_keys : 1, sizeof *out->keys);
        if (!out->keys)
            abort();
        for (size_t i = 0; i < r->n_keys; i++) {
            out->keys[i].key = xstrdup(r->keys[i]);
            out->keys[i].type = xstrdup(i < r->n_types ? r->types[i] : "?");
        }
        out->n = r->n_keys;
        qsort(out->keys, out->n, sizeof *out->keys, key_cmp);
    }
    shoal__client__reply__free_unpacked(r, NULL);
    return rc;
}

static int connect_node(const char *ep, shoal_client_t **out)
{
    int err = 0;
    *out = shoal_client_new(ep, CLIENT_TIMEOUT_MS, &err);
    if (*out)
        return EXIT_OK;
    if (err == SHOAL_EINVAL) {
        fprintf(stderr, "ddata-dump: bad endpoint '%s' (expected tcp://HOST:PORT)\n", ep);
        return EXIT_BAD;
    }
    if (err == SHOAL_EREFUSED) {
        const char *why = shoal_last_error_detail();
        fprintf(stderr, "ddata-dump: the node at %s refused the connection%s%s\n", ep,
                *why ? ": " : "", why);
        return EXIT_DIFF;
    }
    fprintf(stderr, "ddata-dump: cannot reach node at %s (%s)\n", ep, shoal_strerror(err));
    return EXIT_UNREACHABLE;
}

/* Exit code for a failed request: a lost node is unreachable, anything else was refused. */
static int request_failed(const char *ep, const char *what, int rc)
{
    if (rc == SHOAL_ETIMEOUT || rc == SHOAL_EIO || rc == SHOAL_ESTOPPED) {
        fprintf(stderr, "ddata-dump: cannot reach node at %s (%s: %s)\n", ep, what,
                shoal_strerror(rc));
        return EXIT_UNREACHABLE;
    }
    if (rc == SHOAL_ENOTFOUND && strcmp(what, "keys") == 0)
        fprintf(stderr, "ddata-dump: %s runs no replicator of that role\n", ep);
    else
        fprintf(stderr, "ddata-dump: %s refused the %s request (%s)\n", ep, what,
                shoal_strerror(rc));
    return EXIT_DIFF;
}

/* DEPRECATED (--metrics-legacy, removed after 0.3): 0.2's --metrics output, its names made from
   shoal_client_stats' lines (counters as shoal_<name>_total, the sizes as gauges), without HELP.
   --metrics prints the node's own exposition instead (the names of /metrics; CHANGELOG maps them).
   Lines that are not "name number" are skipped. */
static void metrics_legacy(const char *text)
{
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        char line[512];
        if (n < sizeof line) {
            memcpy(line, p, n);
            line[n] = 0;
            char *sp = strchr(line, ' ');
            if (sp) {
                *sp = 0;
                const char *val = sp + 1;
                bool ok = *line && *val && strspn(val, "0123456789") == strlen(val);
                for (char *c = line; ok && *c; c++)
                    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                          (*c >= '0' && *c <= '9') || *c == '_'))
                        *c = '_';
                if (ok) {
                    bool gauge = strcmp(line, "replicator_keys") == 0 ||
                                 strcmp(line, "replicator_tombstones") == 0 ||
                                 strcmp(line, "node_peers") == 0;
                    if (gauge)
                        printf("# TYPE shoal_%s gauge\nshoal_%s %s\n", line, line, val);
                    else
                        printf("# TYPE shoal_%s_total counter\nshoal_%s_total %s\n", line, line,
                               val);
                }
            }
        }
        p += n;
        if (*p == '\n')
            p++;
    }
}

/* ---- a small JSON reader, for the membership view (trusted enough to show, never to crash) -- */
typedef struct {
    const char *p, *end;
} jr_t;

static void jr_ws(jr_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

/* A string into out (escapes other than \" and \\ kept as they are); false if malformed. */
static bool jr_string(jr_t *j, char *out, size_t cap)
{
    jr_ws(j);
    if (j->p >= j->end || *j->p != '"')
        return false;
    j->p++;
    size_t n = 0;
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\' && j->p < j->end)
            c = *j->p++;
        if (out && n + 1 < cap)
            out[n++] = c;
    }
    if (out && cap)
        out[n] = 0;
    if (j->p >= j->end)
        return false;
    j->p++;
    return true;
}

static bool jr_skip(jr_t *j, int depth)
{
    jr_ws(j);
    if (j->p >= j->end || depth > 32)
        return false;
    char c = *j->p;
    if (c == '"')
        return jr_string(j, NULL, 0);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        jr_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return true;
        }
        for (;;) {
            if (c == '{' && (!jr_string(j, NULL, 0) || (jr_ws(j), j->p >= j->end) ||
                             *j->p++ != ':'))
                return false;
            if (!jr_skip(j, depth + 1))
                return false;
            jr_ws(j);
            if (j->p >= j->end)
                return false;
            if (*j->p == ',') {
                j->p++;
                continue;
            }
            if (*j->p++ != close)
                return false;
            return true;
        }
    }
    while (j->p < j->end && *j->p != ',' && *j->p != '}' && *j->p != ']')
        j->p++;
    return true;
}

/* Prints "address status reachable" for each member of the view. */
static bool print_members(const char *json, size_t len)
{
    jr_t j = {json, json + len};
    jr_ws(&j);
    if (j.p >= j.end || *j.p++ != '{')
        return false;
    printf("members:\n  %-28s %-10s %s\n", "ADDRESS", "STATUS", "REACHABLE");
    for (;;) {
        char name[64];
        jr_ws(&j);
        if (j.p < j.end && *j.p == '}')
            return true;
        if (!jr_string(&j, name, sizeof name))
            return false;
        jr_ws(&j);
        if (j.p >= j.end || *j.p++ != ':')
            return false;
        jr_ws(&j);
        if (strcmp(name, "members") == 0 && j.p < j.end && *j.p == '[') {
            j.p++;
            for (;;) {
                jr_ws(&j);
                if (j.p < j.end && *j.p == ']') {
                    j.p++;
                    break;
                }
                if (j.p >= j.end || *j.p++ != '{')
                    return false;
                char addr[300] = "?", status[64] = "?", reach[8] = "?";
                for (;;) {
                    char f[64];
                    jr_ws(&j);
                    if (j.p < j.end && *j.p == '}') {
                        j.p++;
                        break;
                    }
                    if (!jr_string(&j, f, sizeof f))
                        return false;
                    jr_ws(&j);
                    if (j.p >= j.end || *j.p++ != ':')
                        return false;
                    jr_ws(&j);
                    const char *start = j.p;
                    if (strcmp(f, "address") == 0) {
                        if (!jr_string(&j, addr, sizeof addr))
                            return false;
                    } else if (strcmp(f, "status") == 0) {
                        if (!jr_string(&j, status, sizeof status))
                            return false;
                    } else {
                        if (!jr_skip(&j, 0))
                            return false;
                        if (strcmp(f, "reachable") == 0)
                            snprintf(reach, sizeof reach, "%s",
                                     (size_t)(j.p - start) >= 4 && !strncmp(start, "true", 4)
                                         ? "yes" : "no");
                    }
                    jr_ws(&j);
                    if (j.p < j.end && *j.p == ',')
                        j.p++;
                }
                printf("  %-28s %-10s %s\n", addr, status, reach);
                jr_ws(&j);
                if (j.p < j.end && *j.p == ',')
                    j.p++;
            }
        } else if (!jr_skip(&j, 0)) {
            return false;
        }
        jr_ws(&j);
        if (j.p < j.end && *j.p == ',')
            j.p++;
    }
}

static int node_mode(const char *ep, const char *role, int want_metrics)
{
    shoal_client_t *c;
    int ex = connect_node(ep, &c);
    if (ex)
        return ex;
    shoal_buf_t text = {0};
    if (want_metrics == 1) {
        /* the node's own /metrics text: one source of names (ddata.h, shoal_client_metrics) */
        int rc = shoal_client_metrics(c, &text);
        if (rc == SHOAL_EVERSION) {
            fprintf(stderr,
                    "ddata-dump: %s runs a Shoal before 0.3, which cannot send its "
                    "/metrics text: use --metrics-legacy, or its --http endpoint\n",
                    ep);
            ex = EXIT_DIFF;
        } else if (rc < 0) {
            ex = request_failed(ep, "metrics", rc);
        } else {
            fputs(shoal_buf_cstr(&text), stdout);
        }
        shoal_buf_free(&text);
        shoal_client_destroy(&c);
        return ex;
    }
    if (want_metrics == 2) {
        fprintf(stderr, "ddata-dump: --metrics-legacy is deprecated (0.2's names, no HELP): use "
                        "--metrics, the names of /metrics\n");
        int rc = shoal_client_stats(c, role, &text);
        if (rc < 0)
            ex = request_failed(ep, "stats", rc);
        else
            metrics_legacy(shoal_buf_cstr(&text));
        shoal_buf_free(&text);
        shoal_client_destroy(&c);
        return ex;
    }
    node_keys_t keys;
    int rc = fetch_keys(c, role, &keys);
    if (rc < 0) {
        ex = request_failed(ep, "keys", rc);
        shoal_client_destroy(&c);
        return ex;
    }
    printf("node %s, replicator \"%s\": %zu keys\n", ep, role, keys.n);
    shoal_consistency_t local = {.level = SHOAL_LOCAL};
    for (size_t i = 0; i < keys.n; i++) {
        shoal_buf_t line = {0}, r = {0}, enc = {0};
        LIT(&line, "  ");
        key_text(&line, keys.keys[i].key, strlen(keys.keys[i].key));
        shoal_crdt_t *v = NULL;
        rc = shoal_client_get(c, role, keys.keys[i].key, &local, &v);
        if (rc == 0 && v) {
            shoal_crdt_encode(v, &enc);
            shoal_crdt_render(v, &r);
            shoal_buf_printf(&line, "  %s  %zu bytes  ", shoal_type_name(shoal_crdt_type(v)),
                             enc.len);
            one_line(&line, &r, LINE_RENDER);
        } else if (rc == SHOAL_EDELETED) {
            LIT(&line, "  -  deleted");
        } else {
            const char *why = shoal_client_error(c); /* a reply over the client's limit... */
            shoal_buf_printf(&line, "  %s  (%s%s%s)", keys.keys[i].type, shoal_strerror(rc),
                             *why ? ": " : "", why);
        }
        printf("%s\n", shoal_buf_cstr(&line));
        shoal_crdt_destroy(&v);
        shoal_buf_free(&line);
        shoal_buf_free(&r);
        shoal_buf_free(&enc);
    }
    node_keys_free(&keys);
    rc = shoal_client_stats(c, role, &text);
    if (rc < 0) {
        ex = request_failed(ep, "stats", rc);
    } else {
        printf("counters:\n");
        const char *s = shoal_buf_cstr(&text);
        while (*s) {
            const char *eol = strchr(s, '\n');
            int n = eol ? (int)(eol - s) : (int)strlen(s);
            printf("  %.*s\n", n, s);
            s += n + (eol ? 1 : 0);
        }
    }
    shoal_buf_reset(&text);
    rc = shoal_client_cluster_view(c, &text);
    if (rc == SHOAL_EKIND) {
        printf("no membership on this node\n");
    } else if (rc < 0) {
        ex = request_failed(ep, "cluster view", rc);
    } else if (!print_members((const char *)shoal_buf_cstr(&text), text.len)) {
        printf("membership view (unparsed): %s\n", shoal_buf_cstr(&text));
    }
    shoal_buf_free(&text);
    shoal_client_destroy(&c);
    return ex;
}

/* --sharding against a node: its sharding keys, read with LOCAL consistency. */
static int node_sharding(const char *ep, const char *role, const char *type, bool json,
                         bool entities)
{
    shoal_client_t *c;
    int ex = connect_node(ep, &c);
    if (ex)
        return ex;
    node_keys_t names;
    int rc = fetch_keys(c, role, &names);
    if (rc < 0) {
        ex = request_failed(ep, "keys", rc);
        shoal_client_destroy(&c);
        return ex;
    }
    skeys_t keys = {0};
    shoal_consistency_t local = {.level = SHOAL_LOCAL};
    for (size_t i = 0; i < names.n && ex == EXIT_OK; i++) {
        const char *key = names.keys[i].key;
        if (!sharding_key(key, strlen(key)))
            continue;
        shoal_crdt_t *v = NULL;
        rc = shoal_client_get(c, role, key, &local, &v);
        if (rc == 0 && v)
            skeys_add(&keys, key, strlen(key), v, false, NULL);
        else if (rc == SHOAL_EDELETED)
            skeys_add(&keys, key, strlen(key), NULL, true, NULL);
        else if (rc == SHOAL_ETIMEOUT || rc == SHOAL_EIO || rc == SHOAL_ESTOPPED)
            ex = request_failed(ep, "get", rc);
        else if (rc != SHOAL_ENOTFOUND && rc != 0) /* not found: removed since the listing */
            skeys_add(&keys, key, strlen(key), NULL, false, shoal_strerror(rc));
        else
            shoal_crdt_destroy(&v);
    }
    node_keys_free(&names);
    shoal_client_destroy(&c);
    if (ex == EXIT_OK) {
        shoal_buf_t out = {0};
        sopts_t so = {json, entities, true, role};
        ex = sharding_report(&keys, type, &so, ep, &out);
        fwrite(out.data ? out.data : (uint8_t *)"", 1, out.len, stdout);
        shoal_buf_free(&out);
    }
    skeys_free(&keys);
    return ex;
}

/* What one node holds for one key. */
typedef enum { HELD_NONE = 0, HELD_VALUE, HELD_DELETED, HELD_ERROR } held_t;
typedef struct {
    held_t held;
    uint8_t digest[16];
} replica_t;

static bool same_replica(const replica_t *a, const replica_t *b)
{
    return a->held == b->held && (a->held != HELD_VALUE || !memcmp(a->digest, b->digest, 16));
}

/* Every node's replicas side by side. A node that cannot be asked (not reachable, refused, or
   lost midway) is reported and left out; the others are compared all the same. Exit: 1 when
   the replicas asked differ, else 3 when a node could not be asked, else 0. */
static int compare_mode(char **eps, int n, const char *role)
{
    shoal_client_t **cl = calloc((size_t)n, sizeof *cl);
    node_keys_t *keys = calloc((size_t)n, sizeof *keys);
    bool *lost = calloc((size_t)n, sizeof *lost);
    if (!cl || !keys || !lost)
        abort();
    int ex = EXIT_OK, n_lost = 0;
    for (int i = 0; i < n; i++) {
        int e = connect_node(eps[i], &cl[i]);
        if (e == EXIT_BAD) {
            ex = EXIT_BAD; /* a malformed endpoint is a usage error, not a lost node */
            break;
        }
        if (e == EXIT_OK) {
            int rc = fetch_keys(cl[i], role, &keys[i]);
            if (rc < 0)
                e = request_failed(eps[i], "keys", rc);
        }
        if (e != EXIT_OK) {
            lost[i] = true;
            n_lost++;
            shoal_client_destroy(&cl[i]);
        }
    }
    if (ex == EXIT_OK && n - n_lost < 1) {
        fprintf(stderr, "ddata-dump: no node could be asked\n");
        ex = EXIT_UNREACHABLE;
    }
    /* the union of the key names, sorted, without repeats */
    node_key_t *all = NULL;
    size_t n_all = 0;
    if (ex == EXIT_OK) {
        size_t total = 0;
        for (int i = 0; i < n; i++)
            total += keys[i].n;
        all = calloc(total ? total : 1, sizeof *all);
        if (!all)
            abort();
        for (int i = 0; i < n; i++)
            for (size_t k = 0; k < keys[i].n; k++)
                all[n_all++] = keys[i].keys[k]; /* borrowed */
        qsort(all, n_all, sizeof *all, key_cmp);
        size_t u = 0;
        for (size_t k = 0; k < n_all; k++)
            if (u == 0 || strcmp(all[u - 1].key, all[k].key) != 0)
                all[u++] = all[k];
        n_all = u;
    }
    size_t differ = 0;
    if (ex == EXIT_OK) {
        size_t width = 3;
        for (size_t k = 0; k < n_all; k++)
            if (strlen(all[k].key) > width)
                width = strlen(all[k].key) < 40 ? strlen(all[k].key) : 40;
        for (int i = 0; i < n; i++)
            printf("n%d = %s%s\n", i + 1, eps[i], lost[i] ? "  (unreachable: left out)" : "");
        printf("%-*s", (int)width, "KEY");
        for (int i = 0; i < n; i++)
            printf("  n%-3d", i + 1);
        printf("\n");
        shoal_consistency_t local = {.level = SHOAL_LOCAL};
        replica_t *row = calloc((size_t)n, sizeof *row);
        if (!row)
            abort();
        for (size_t k = 0; k < n_all; k++) {
            int first = -1;
            for (int i = 0; i < n; i++) {
                memset(&row[i], 0, sizeof row[i]);
                if (lost[i])
                    continue;
                shoal_crdt_t *v = NULL;
                int rc = shoal_client_get(cl[i], role, all[k].key, &local, &v);
                if (rc == 0 && v && shoal_crdt_digest(v, row[i].digest) == 0)
                    row[i].held = HELD_VALUE;
                else if (rc == SHOAL_EDELETED)
                    row[i].held = HELD_DELETED;
                else if (rc == SHOAL_ENOTFOUND || (rc == 0 && !v))
                    row[i].held = HELD_NONE;
                else if (rc == SHOAL_ETIMEOUT || rc == SHOAL_EIO || rc == SHOAL_ESTOPPED) {
                    request_failed(eps[i], "get", rc); /* lost midway: left out from here */
                    lost[i] = true;
                    n_lost++;
                } else
                    row[i].held = HELD_ERROR;
                if (row[i].held == HELD_ERROR)
                    fprintf(stderr, "ddata-dump: %s: get %s: %s%s%s\n", eps[i], all[k].key,
                            shoal_strerror(rc), *shoal_client_error(cl[i]) ? ": " : "",
                            shoal_client_error(cl[i]));
                shoal_crdt_destroy(&v);
                if (!lost[i] && first < 0)
                    first = i;
            }
            bool agree = true;
            printf("%-*s", (int)width, all[k].key);
            for (int i = 0; i < n; i++) {
                const char *mark;
                if (lost[i])
                    mark = "x";
                else if (row[i].held == HELD_NONE)
                    mark = "-";
                else if (row[i].held == HELD_ERROR)
                    mark = "?";
                else if (first >= 0 && same_replica(&row[i], &row[first]))
                    mark = row[i].held == HELD_DELETED ? "=del" : "=";
                else
                    mark = "!=";
                if (!lost[i] && ((first >= 0 && !same_replica(&row[i], &row[first])) ||
                                 row[i].held == HELD_ERROR))
                    agree = false;
                printf("  %-4s", mark);
            }
            printf("\n");
            if (!agree)
                differ++;
        }
        free(row);
        if (differ) {
            printf("%zu of %zu keys differ", differ, n_all);
            ex = EXIT_DIFF;
        } else {
            printf("all %zu keys agree on %d nodes", n_all, n - n_lost);
        }
        if (n_lost) {
            printf("; %d of %d nodes unreachable (x)", n_lost, n);
            if (ex == EXIT_OK)
                ex = EXIT_UNREACHABLE;
        }
        printf("\n");
    }
    free(all);
    for (int i = 0; i < n; i++) {
        node_keys_free(&keys[i]);
        shoal_client_destroy(&cl[i]);
    }
    free(keys);
    free(cl);
    free(lost);
    return ex;
}

/* ---------------------------------------------------------------------------------------------
 * Arguments
 */
int main(int argc, char **argv)
{
    int cli = cli_help_or_version(&argc, argv, "ddata-dump", usage);
    if (cli >= 0)
        return cli;
    shoal_sharding_register_types(); /* entity states decode and render like any value */
    store_opts_t so = {0};
    const char *node = NULL, *role = "";
    int want_metrics = 0; /* 1: --metrics, 2: --metrics-legacy */
    bool compare = false;
    const char *restore = NULL;
    int identity = 0; /* --restore: 1 keep, 2 new, -1 both (refused) */
    char **cluster = calloc((size_t)argc + 1, sizeof *cluster); /* --keep-identity's --cluster */
    size_t n_cluster = 0;
    bool cluster_stopped = false;
    if (!cluster)
        abort();
    char **eps = calloc((size_t)argc + 1, sizeof *eps);
    if (!eps)
        abort();
    int n_eps = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_next = i + 1 < argc;
        if (!strcmp(a, "--json")) {
            so.json = true;
        } else if (!strcmp(a, "--metrics") || !strcmp(a, "--metrics-legacy")) {
            want_metrics = a[9] ? 2 : 1;
        } else if (!strcmp(a, "--compare")) {
            compare = true;
        } else if (!strcmp(a, "--sharding")) {
            /* the type is optional: an argument that is no option is taken as the type */
            so.sharding = true;
            if (has_next && argv[i + 1][0] != '-')
                so.sharding_type = argv[++i];
        } else if (!strcmp(a, "--entities")) {
            so.entities = true;
        } else if (has_next && !strcmp(a, "--key")) {
            so.key = argv[++i];
        } else if (has_next && !strcmp(a, "--salvage")) {
            so.salvage = argv[++i];
        } else if (has_next && !strcmp(a, "--compact")) {
            so.compact = argv[++i];
        } else if (has_next && !strcmp(a, "--backup")) {
            so.backup = argv[++i];
        } else if (has_next && !strcmp(a, "--restore")) {
            restore = argv[++i];
        } else if (!strcmp(a, "--keep-identity")) {
            identity = identity == 2 ? -1 : 1;
        } else if (!strcmp(a, "--new-identity")) {
            identity = identity == 1 ? -1 : 2;
        } else if (has_next && !strcmp(a, "--cluster")) {
            /* repeatable, and each may list several: "h1:2552,h2:2552" */
            for (char *tok = strtok(argv[++i], ","); tok; tok = strtok(NULL, ","))
                cluster[n_cluster++] = tok;
        } else if (!strcmp(a, "--cluster-stopped")) {
            cluster_stopped = true;
        } else if (has_next && !strcmp(a, "--node")) {
            /* HOST:PORT or tcp://HOST:PORT, a host name resolved (cli.h, NODE ADDRESSES) */
            static char node_buf[300];
            char awhy[400];
            if (cli_node_address(argv[++i], node_buf, sizeof node_buf, awhy, sizeof awhy) != 0) {
                fprintf(stderr, "ddata-dump: --node %s\n", awhy);
                free(eps);
                free(cluster);
                return EXIT_BAD;
            }
            node = node_buf;
        } else if (has_next && !strcmp(a, "--role")) {
            role = argv[++i];
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "ddata-dump: unknown option or missing value: %s\n", a);
            usage(stderr);
            free(eps);
            free(cluster);
            return EXIT_BAD;
        } else {
            eps[n_eps++] = argv[i];
        }
    }
    int ex;
    int modes = (node != NULL) + compare + (n_eps > 0 && !compare);
    /* --json goes with --sharding on a node too; the other store options only with a store */
    bool store_opts = so.key || (so.json && !so.sharding) || so.salvage || so.compact || so.backup;
    if (restore || identity || n_cluster || cluster_stopped) {
        if (!restore || n_eps != 1 || node || compare || store_opts || so.sharding ||
            want_metrics || identity < 0 || (n_cluster && cluster_stopped)) {
            fprintf(stderr, "ddata-dump: --restore BACKUP DIR takes one directory and one of "
                            "--keep-identity (with --cluster ENDPOINT or --cluster-stopped) or "
                            "--new-identity, nothing else\n");
            usage(stderr);
            ex = EXIT_BAD;
        } else {
            ex = restore_mode(restore, eps[0], identity, cluster, n_cluster, cluster_stopped);
        }
    } else if (so.sharding && !node && !compare && n_eps == 0 && so.sharding_type) {
        fprintf(stderr, "ddata-dump: --sharding took \"%s\" as the type; name the store "
                        "first (ddata-dump DIR --sharding [TYPE]) or use --node\n",
                so.sharding_type);
        ex = EXIT_BAD;
    } else if (modes != 1 || (compare && n_eps < 2) || (!compare && n_eps > 1) ||
               ((node || compare) && store_opts) || (want_metrics && !node) ||
               (so.sharding && (compare || want_metrics || so.key || so.salvage || so.compact)) ||
               (so.entities && !so.sharding) || (so.sharding && so.backup) ||
               (!node && !compare &&
                (!!so.key + !!so.salvage + !!so.compact + !!so.backup > 1 ||
                 (so.json && (so.salvage || so.compact || so.backup))))) {
        usage(stderr);
        ex = EXIT_BAD;
    } else if (node && so.sharding) {
        ex = node_sharding(node, role, so.sharding_type, so.json, so.entities);
    } else if (node) {
        ex = node_mode(node, role, want_metrics);
    } else if (compare) {
        ex = compare_mode(eps, n_eps, role);
    } else {
        so.dir = eps[0];
        so.role = role;
        ex = store_mode(&so);
    }
    free(eps);
    free(cluster);
    return ex;
}
