/*  util.c — errors, allocation wrappers, the growable byte buffer, hashing, clocks, packing a
    protobuf message: what every layer of ddata (types, node, replicator) uses. */
#include "internal.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <stdio.h>
#include <time.h>
#include <xxhash.h>

const char *shoal_strerror(int code)
{
    switch (code) {
    case SHOAL_OK:
        return "ok";
    case SHOAL_EINVAL:
        return "invalid argument";
    case SHOAL_ETYPE:
        return "wrong value type";
    case SHOAL_EDECODE:
        return "malformed serialized input";
    case SHOAL_ETOOBIG:
        return "over the size limit";
    case SHOAL_EVERSION:
        return "unknown type or newer format version";
    case SHOAL_EOVERFLOW:
        return "counter overflow";
    case SHOAL_ENOTFOUND:
        return "not found";
    case SHOAL_ENODE:
        return "malformed node id";
    case SHOAL_EAGAIN:
        return "peer queue full";
    case SHOAL_ENOTCONN:
        return "not connected";
    case SHOAL_ETHREAD:
        return "called from the wrong thread";
    case SHOAL_EDEADLK:
        return "synchronous call from the node thread";
    case SHOAL_EBUSY:
        return "too many calls pending";
    case SHOAL_ETIMEOUT:
        return "timed out";
    case SHOAL_ESTOPPED:
        return "node stopped";
    case SHOAL_EIO:
        return "socket error";
    case SHOAL_EKIND:
        return "no handler for that message kind";
    case SHOAL_EREFUSED:
        return "handshake refused (wrong address, quarantined, or our CURVE key not admitted)";
    case SHOAL_EKEY:
        return "CURVE certificate, allow-list or server key missing";
    case SHOAL_EDELETED:
        return "the key was deleted";
    case SHOAL_EMODIFY:
        return "the modify function failed";
    case SHOAL_ENOQUORUM:
        return "no quorum: MAJORITY and ALL refused (this node is not Up in a cluster, or fewer "
               "members of its kept membership are up than a majority of it)";
    case SHOAL_ESTORE:
        return "the durable store failed";
    case SHOAL_ELIMIT:
        return "a configured limit is reached (keys or bytes of the replicator, entities of the "
               "node)";
    case -40: /* membership.h: SHOAL_ENOTMEMBER (codes of upper layers are named here too) */
        return "no such member";
    case -41: /* membership.h: SHOAL_ESTATE */
        return "not allowed in the member's current status";
    default:
        return "unknown error";
    }
}

static void out_of_memory(size_t n)
{
    fprintf(stderr, "shoal: out of memory allocating %zu bytes\n", n);
    abort();
}

void *shoal_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory(n);
    return p;
}

void *shoal_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        out_of_memory(count * size);
    return p;
}

void *shoal_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        out_of_memory(n);
    return q;
}

void *shoal_memdup(const void *p, size_t n)
{
    void *q = shoal_malloc(n);
    if (n)
        memcpy(q, p, n);
    return q;
}

void shoal_grow(void **arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 4;
    while (c < need)
        c *= 2;
    *arr = shoal_realloc(*arr, c * size);
    *cap = c;
}

uint64_t shoal_hash_bytes(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

void shoal_buf_init(shoal_buf_t *buf)
{
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

void shoal_buf_free(shoal_buf_t *buf)
{
    free(buf->data);
    shoal_buf_init(buf);
}

void shoal_buf_reset(shoal_buf_t *buf)
{
    buf->len = 0;
}

void shoal_buf_reserve(shoal_buf_t *buf, size_t extra)
{
    /* +1 keeps room for the NUL of shoal_buf_cstr */
    SHOAL_GROW(buf->data, buf->cap, buf->len + extra + 1);
}

void shoal_buf_append(shoal_buf_t *buf, const void *data, size_t len)
{
    shoal_buf_reserve(buf, len);
    if (len)
        memcpy(buf->data + buf->len, data, len);
    buf->len += len;
}

void shoal_buf_printf(shoal_buf_t *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    shoal_buf_reserve(buf, (size_t)n);
    va_start(ap, fmt);
    vsnprintf((char *)buf->data + buf->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    buf->len += (size_t)n;
}

void shoal_buf_append_quoted(shoal_buf_t *buf, const void *data, size_t len)
{
    const uint8_t *p = data;
    shoal_buf_reserve(buf, len + 2);
    shoal_buf_append(buf, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        uint8_t c = p[i];
        if (c == '"' || c == '\\')
            shoal_buf_printf(buf, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f)
            shoal_buf_append(buf, &c, 1);
        else
            shoal_buf_printf(buf, "\\x%02x", c);
    }
    shoal_buf_append(buf, "\"", 1);
}

const char *shoal_buf_cstr(shoal_buf_t *buf)
{
    shoal_buf_reserve(buf, 0);
    buf->data[buf->len] = 0;
    return (const char *)buf->data;
}

bool shoal_ratelimit_pass(shoal_ratelimit_t *r, int64_t interval_ms, uint64_t *suppressed)
{
    int64_t now = shoal_now_ms();
    if (r->used && now - r->last < interval_ms) {
        r->suppressed++;
        return false;
    }
    *suppressed = r->suppressed;
    r->suppressed = 0;
    r->last = now;
    r->used = true;
    return true;
}

void shoal_buf_json_string(shoal_buf_t *buf, const char *s)
{
    shoal_buf_append(buf, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            shoal_buf_printf(buf, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            shoal_buf_printf(buf, "\\u%04x", *p);
        else
            shoal_buf_append(buf, p, 1);
    }
    shoal_buf_append(buf, "\"", 1);
}

/* ---------------------------------------------------------------------------------------------
 * Clocks and packing
 */
int64_t shoal_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec shoal_deadline_in(uint64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

void shoal_pb_pack(const ProtobufCMessage *msg, shoal_buf_t *out)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    shoal_buf_reserve(out, n);
    out->len += protobuf_c_message_pack(msg, out->data + out->len);
}

/* "tcp://NAME:PORT" becomes "tcp://ADDRESS:PORT": the name's first IPv4 address, else its first
   IPv6 one in brackets. A node id records the address a member bound, and libzmq reads a name in
   a bind as an interface, so a bind and a seed given by name are resolved once, the same way
   (shoal_system_new, membership's seed list; tools/cli.h does it for the programs' flags). */
int shoal_endpoint_resolve_host(const char *endpoint, char *out, size_t cap)
{
    if (strncmp(endpoint, "tcp://", 6) != 0 || endpoint[6] == '[')
        return 0;
    const char *h = endpoint + 6, *colon = strrchr(h, ':');
    char host[256];
    if (!colon || colon == h || (size_t)(colon - h) >= sizeof host)
        return 0;
    memcpy(host, h, (size_t)(colon - h));
    host[colon - h] = 0;
    unsigned char tmp[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, host, tmp) == 1 || inet_pton(AF_INET6, host, tmp) == 1)
        return 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return -1;
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
        if (ai->ai_family == AF_INET)
            pick = ai;
    for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
        if (ai->ai_family == AF_INET6)
            pick = ai;
    char lit[INET6_ADDRSTRLEN] = "";
    if (pick && pick->ai_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)pick->ai_addr)->sin_addr,
                  lit, sizeof lit);
    else if (pick)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)pick->ai_addr)->sin6_addr,
                  lit, sizeof lit);
    bool v6 = pick && pick->ai_family == AF_INET6;
    freeaddrinfo(res);
    if (!*lit)
        return -1;
    char buf[300];
    if ((size_t)snprintf(buf, sizeof buf, v6 ? "tcp://[%s]%s" : "tcp://%s%s", lit, colon) >=
            sizeof buf ||
        strlen(buf) >= cap)
        return -1;
    memcpy(out, buf, strlen(buf) + 1);
    return 1;
}
