/*  transport.c — the node transport's wire format (see transport.h), without sockets.

    Everything here reads untrusted bytes: bounds are checked before every read, lengths are
    compared against what is left rather than added to pointers, and a frame is validated whole
    before any of it is used, so a malformed frame is dropped whole and nothing half-applies.
*/
#include "transport.h"
#include "transport.pb-c.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>

/* ---------------------------------------------------------------------------------------------
 * Varints
 */
int shoal_varint_get(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    const uint8_t *q = *p;
    uint64_t r = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (q >= end)
            return SHOAL_EDECODE;
        uint8_t b = *q++;
        if (shift == 63 && (b & 0x7e))
            return SHOAL_EDECODE; /* more than 64 bits */
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *p = q;
            *v = r;
            return 0;
        }
    }
    return SHOAL_EDECODE; /* an 11th byte would be needed */
}

/* ---------------------------------------------------------------------------------------------
 * Frames
 */
int shoal_frame_parse(const uint8_t *data, size_t len, shoal_frame_t *f)
{
    if (!data || len < 2 || (data[0] & 0xf0) != SHOAL_WIRE_MAGIC)
        return SHOAL_EDECODE;
    uint8_t version = data[0] & 0x0f;
    if (version < SHOAL_WIRE_VERSION_MIN || version > SHOAL_WIRE_VERSION_MAX)
        return SHOAL_EVERSION;
    if (data[1] < SHOAL_FT_HELLO || data[1] > SHOAL_FT_REPLY_PART)
        return SHOAL_EDECODE;
    f->version = version;
    f->type = data[1];
    f->body = data + 2;
    f->body_len = len - 2;
    return 0;
}

static void write_head(shoal_buf_t *out, uint8_t version, shoal_ft_t type)
{
    uint8_t h[2] = {(uint8_t)(SHOAL_WIRE_MAGIC | (version & 0x0f)), (uint8_t)type};
    shoal_buf_append(out, h, 2);
}

void shoal_frame_write_empty(shoal_buf_t *out, uint8_t version, shoal_ft_t type)
{
    write_head(out, version, type);
}

/* ---------------------------------------------------------------------------------------------
 * DATA
 */
size_t shoal_record_size(uint16_t kind, size_t len)
{
    return shoal_varint_len(kind) + shoal_varint_len(len) + len;
}

void shoal_batch_append(shoal_batch_t *b, uint64_t seq, uint16_t kind, const void *data, size_t len)
{
    if (b->buf.len == 0) {
        shoal_buf_reserve(&b->buf, SHOAL_FRAME_HEADER_MAX + 64 + len);
        b->buf.len = SHOAL_FRAME_HEADER_MAX;
        b->first_seq = seq;
        b->count = 0;
    }
    shoal_buf_reserve(&b->buf, 20 + len);
    uint8_t *p = b->buf.data + b->buf.len;
    p += shoal_varint_put(p, kind);
    p += shoal_varint_put(p, len);
    if (len)
        memcpy(p, data, len);
    b->buf.len = (size_t)(p - b->buf.data) + len;
    b->count++;
}

const uint8_t *shoal_batch_seal(shoal_batch_t *b, uint8_t version, size_t *len)
{
    uint8_t h[SHOAL_FRAME_HEADER_MAX];
    h[0] = (uint8_t)(SHOAL_WIRE_MAGIC | (version & 0x0f));
    h[1] = SHOAL_FT_DATA;
    size_t hl = 2 + shoal_varint_put(h + 2, b->first_seq);
    uint8_t *start = b->buf.data + SHOAL_FRAME_HEADER_MAX - hl;
    memcpy(start, h, hl);
    *len = b->buf.len - (SHOAL_FRAME_HEADER_MAX - hl);
    return start;
}

void shoal_batch_reset(shoal_batch_t *b)
{
    b->buf.len = 0;
    b->count = 0;
    b->first_seq = 0;
}

void shoal_batch_free(shoal_batch_t *b)
{
    shoal_buf_free(&b->buf);
    b->count = 0;
}

int shoal_data_open(const shoal_frame_t *f, shoal_data_reader_t *r)
{
    if (f->type != SHOAL_FT_DATA)
        return SHOAL_EDECODE;
    const uint8_t *p = f->body, *end = f->body + f->body_len;
    uint64_t first;
    if (shoal_varint_get(&p, end, &first) != 0 || first == 0)
        return SHOAL_EDECODE;
    const uint8_t *records = p;
    size_t count = 0;
    while (p < end) {
        uint64_t kind, len;
        if (shoal_varint_get(&p, end, &kind) != 0 || kind > 0xffff)
            return SHOAL_EDECODE;
        if (shoal_varint_get(&p, end, &len) != 0 || len > (uint64_t)(end - p))
            return SHOAL_EDECODE;
        p += len;
        count++;
    }
    if (count == 0 || first > UINT64_MAX - count)
        return SHOAL_EDECODE;
    r->first_seq = first;
    r->count = count;
    r->p = records;
    r->end = end;
    return 0;
}

int shoal_data_next(shoal_data_reader_t *r, uint16_t *kind, const uint8_t **data, size_t *len)
{
    if (r->p >= r->end)
        return 0;
    uint64_t k, l;
    /* validated by shoal_data_open; checked again so a misuse cannot read out of bounds */
    if (shoal_varint_get(&r->p, r->end, &k) != 0 || shoal_varint_get(&r->p, r->end, &l) != 0 ||
        l > (uint64_t)(r->end - r->p) || k > 0xffff) {
        r->p = r->end;
        return 0;
    }
    *kind = (uint16_t)k;
    *data = r->p;
    *len = (size_t)l;
    r->p += l;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * Sequence accounting
 */
shoal_seq_verdict_t shoal_seq_accept(uint64_t *expected, uint64_t first, uint64_t count)
{
    shoal_seq_verdict_t v = {0, 0};
    uint64_t exp = *expected;
    if (first > exp) {
        v.missed = first - exp;
    } else if (first < exp) {
        uint64_t seen = exp - first;
        v.skip = seen < count ? seen : count;
    }
    uint64_t last_plus_one = first + count; /* no overflow: shoal_data_open checked */
    if (last_plus_one > exp)
        *expected = last_plus_one;
    return v;
}

/* ---------------------------------------------------------------------------------------------
 * ACK, REQUEST, REPLY
 */
void shoal_ack_write(shoal_buf_t *out, uint8_t version, uint64_t seq)
{
    write_head(out, version, SHOAL_FT_ACK);
    shoal_buf_append_varint(out, seq);
}

int shoal_ack_parse(const shoal_frame_t *f, uint64_t *seq)
{
    if (f->type != SHOAL_FT_ACK)
        return SHOAL_EDECODE;
    const uint8_t *p = f->body, *end = f->body + f->body_len;
    if (shoal_varint_get(&p, end, seq) != 0 || p != end)
        return SHOAL_EDECODE;
    return 0;
}

void shoal_request_write(shoal_buf_t *out, uint8_t version, uint64_t request_id, uint16_t kind,
                         const void *data, size_t len)
{
    write_head(out, version, SHOAL_FT_REQUEST);
    shoal_buf_append_varint(out, request_id);
    shoal_buf_append_varint(out, kind);
    shoal_buf_append(out, data, len);
}

int shoal_request_parse(const shoal_frame_t *f, uint64_t *request_id, uint16_t *kind,
                        const uint8_t **data, size_t *len)
{
    if (f->type != SHOAL_FT_REQUEST)
        return SHOAL_EDECODE;
    const uint8_t *p = f->body, *end = f->body + f->body_len;
    uint64_t k;
    if (shoal_varint_get(&p, end, request_id) != 0 || shoal_varint_get(&p, end, &k) != 0 ||
        k > 0xffff)
        return SHOAL_EDECODE;
    *kind = (uint16_t)k;
    *data = p;
    *len = (size_t)(end - p);
    return 0;
}

void shoal_reply_write(shoal_buf_t *out, uint8_t version, uint64_t request_id, uint16_t kind,
                       int status, const void *data, size_t len)
{
    write_head(out, version, SHOAL_FT_REPLY);
    shoal_buf_append_varint(out, request_id);
    shoal_buf_append_varint(out, kind);
    shoal_buf_append_varint(out, status < 0 ? (uint64_t)(-(int64_t)status) : 0);
    shoal_buf_append(out, data, len);
}

int shoal_reply_parse(const shoal_frame_t *f, uint64_t *request_id, uint16_t *kind, int *status,
                      const uint8_t **data, size_t *len)
{
    if (f->type != SHOAL_FT_REPLY)
        return SHOAL_EDECODE;
    const uint8_t *p = f->body, *end = f->body + f->body_len;
    uint64_t k, st;
    if (shoal_varint_get(&p, end, request_id) != 0 || shoal_varint_get(&p, end, &k) != 0 ||
        k > 0xffff || shoal_varint_get(&p, end, &st) != 0 || st > 0xffff)
        return SHOAL_EDECODE;
    *kind = (uint16_t)k;
    *status = -(int)st;
    *data = p;
    *len = (size_t)(end - p);
    return 0;
}

void shoal_reply_part_write(shoal_buf_t *out, uint8_t version, uint64_t request_id, uint16_t kind,
                            uint64_t total, uint64_t offset, const void *data, size_t len)
{
    write_head(out, version, SHOAL_FT_REPLY_PART);
    shoal_buf_append_varint(out, request_id);
    shoal_buf_append_varint(out, kind);
    shoal_buf_append_varint(out, total);
    shoal_buf_append_varint(out, offset);
    shoal_buf_append(out, data, len);
}

int shoal_reply_part_parse(const shoal_frame_t *f, uint64_t *request_id, uint16_t *kind,
                           uint64_t *total, uint64_t *offset, const uint8_t **data, size_t *len)
{
    if (f->type != SHOAL_FT_REPLY_PART)
        return SHOAL_EDECODE;
    const uint8_t *p = f->body, *end = f->body + f->body_len;
    uint64_t k;
    if (shoal_varint_get(&p, end, request_id) != 0 || shoal_varint_get(&p, end, &k) != 0 ||
        k > 0xffff || shoal_varint_get(&p, end, total) != 0 ||
        shoal_varint_get(&p, end, offset) != 0 || p == end)
        return SHOAL_EDECODE;
    /* compared against what is left, never added: offset + bytes must not pass total */
    size_t n = (size_t)(end - p);
    if (*offset > *total || n > *total - *offset)
        return SHOAL_EDECODE;
    *kind = (uint16_t)k;
    *data = p;
    *len = n;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Handshake
 */
uint32_t shoal_wire_version_pick(uint32_t peer_min, uint32_t peer_max)
{
    uint32_t hi = peer_max < SHOAL_WIRE_VERSION_MAX ? peer_max : SHOAL_WIRE_VERSION_MAX;
    uint32_t lo = peer_min > SHOAL_WIRE_VERSION_MIN ? peer_min : SHOAL_WIRE_VERSION_MIN;
    return hi >= lo ? hi : 0;
}

/* Copies a well-formed node id into dst (SHOAL_NODE_ID_MAX + 1 bytes). */
static bool copy_node_id(char *dst, const char *id)
{
    size_t n = strlen(id);
    if (!shoal_node_id_valid(id, n))
        return false;
    memcpy(dst, id, n + 1);
    return true;
}

/* A handshake's protocol range: absent (0) is 1, as 0.1.x nodes and clients say nothing. */
static bool protocol_range(uint32_t min, uint32_t max, uint32_t *omin, uint32_t *omax)
{
    *omin = min ? min : 1;
    *omax = max ? max : *omin;
    return *omin <= *omax;
}

void shoal_hello_write(shoal_buf_t *out, const shoal_hello_t *h)
{
    Shoal__Transport__Hello m = SHOAL__TRANSPORT__HELLO__INIT;
    m.version_min = h->version_min;
    m.version_max = h->version_max;
    m.from = (char *)h->from;
    m.to = (char *)h->to;
    m.role = h->client ? SHOAL__TRANSPORT__ROLE__ROLE_CLIENT : SHOAL__TRANSPORT__ROLE__ROLE_PEER;
    m.to_node = (char *)h->to_node;
    m.first_seq = h->first_seq;
    m.max_reply_bytes = h->max_reply_bytes;
    if (h->protocol_max > 1) {
        m.protocol_min = h->protocol_min;
        m.protocol_max = h->protocol_max;
    }
    write_head(out, 1, SHOAL_FT_HELLO);
    shoal_pb_pack((const ProtobufCMessage *)&m, out);
}

int shoal_hello_parse(const shoal_frame_t *f, shoal_hello_t *h)
{
    if (f->type != SHOAL_FT_HELLO)
        return SHOAL_EDECODE;
    Shoal__Transport__Hello *m = shoal__transport__hello__unpack(NULL, f->body_len, f->body);
    if (!m)
        return SHOAL_EDECODE;
    int rc = SHOAL_EDECODE;
    memset(h, 0, sizeof *h);
    size_t to_len = m->to ? strlen(m->to) : 0;
    if (m->version_min == 0 || m->version_min > m->version_max)
        goto out;
    if (to_len == 0 || to_len > SHOAL_ENDPOINT_MAX)
        goto out;
    if (m->role != SHOAL__TRANSPORT__ROLE__ROLE_PEER &&
        m->role != SHOAL__TRANSPORT__ROLE__ROLE_CLIENT)
        goto out;
    h->client = m->role == SHOAL__TRANSPORT__ROLE__ROLE_CLIENT;
    if (m->from && m->from[0]) {
        if (h->client)
            goto out; /* a client has no node id: it could not be told apart from a peer */
        if (!copy_node_id(h->from, m->from)) {
            rc = SHOAL_ENODE;
            goto out;
        }
    } else if (!h->client) {
        goto out; /* a peer must say who it is */
    }
    if (m->to_node && m->to_node[0] && !copy_node_id(h->to_node, m->to_node)) {
        rc = SHOAL_ENODE;
        goto out;
    }
    h->first_seq = m->first_seq ? m->first_seq : 1;
    if (h->client) /* a peer is never sent replies */
        h->max_reply_bytes = m->max_reply_bytes;
    h->version_min = m->version_min;
    h->version_max = m->version_max;
    if (!protocol_range(m->protocol_min, m->protocol_max, &h->protocol_min, &h->protocol_max))
        goto out;
    memcpy(h->to, m->to, to_len);
    h->to[to_len] = 0;
    rc = 0;
out:
    shoal__transport__hello__free_unpacked(m, NULL);
    return rc;
}

void shoal_hello_reply_write(shoal_buf_t *out, const shoal_hello_reply_t *r)
{
    Shoal__Transport__HelloReply m = SHOAL__TRANSPORT__HELLO_REPLY__INIT;
    m.status = (Shoal__Transport__HelloStatus)r->status;
    m.node = (char *)r->node;
    m.version = r->version;
    m.max_frame_bytes = r->max_frame_bytes;
    if (r->protocol_max > 1) {
        m.protocol_min = r->protocol_min;
        m.protocol_max = r->protocol_max;
    }
    write_head(out, 1, SHOAL_FT_HELLO_REPLY);
    shoal_pb_pack((const ProtobufCMessage *)&m, out);
}

int shoal_hello_reply_parse(const shoal_frame_t *f, shoal_hello_reply_t *r)
{
    if (f->type != SHOAL_FT_HELLO_REPLY)
        return SHOAL_EDECODE;
    Shoal__Transport__HelloReply *m =
        shoal__transport__hello_reply__unpack(NULL, f->body_len, f->body);
    if (!m)
        return SHOAL_EDECODE;
    int rc = SHOAL_EDECODE;
    memset(r, 0, sizeof *r);
    if ((int)m->status < SHOAL_HELLO_OK || (int)m->status > SHOAL_HELLO_NOT_ALLOWED)
        goto out;
    r->status = (int)m->status;
    if (m->node && m->node[0] && !copy_node_id(r->node, m->node)) {
        rc = SHOAL_ENODE;
        goto out;
    }
    if (r->status == SHOAL_HELLO_OK) {
        if (!r->node[0] || m->version < SHOAL_WIRE_VERSION_MIN ||
            m->version > SHOAL_WIRE_VERSION_MAX)
            goto out;
    }
    r->version = m->version;
    r->max_frame_bytes = m->max_frame_bytes;
    if (!protocol_range(m->protocol_min, m->protocol_max, &r->protocol_min, &r->protocol_max))
        goto out;
    rc = 0;
out:
    shoal__transport__hello_reply__free_unpacked(m, NULL);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Endpoints
 */
int shoal_endpoint_split(const char *endpoint, char *host, size_t host_cap, uint16_t *port)
{
    if (!endpoint || host_cap == 0)
        return SHOAL_EINVAL;
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        size_t n = strlen(endpoint + 6);
        if (n == 0 || n >= host_cap)
            return SHOAL_EINVAL;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)endpoint[6 + i];
            if (c <= 0x20 || c >= 0x7f)
                return SHOAL_EINVAL; /* node ids are printable, without spaces */
        }
        memcpy(host, endpoint + 6, n + 1);
        *port = 1;
        return 0;
    }
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return SHOAL_EINVAL;
    const char *h = endpoint + 6;
    const char *colon = strrchr(h, ':');
    if (!colon || colon == h)
        return SHOAL_EINVAL;
    size_t hl = (size_t)(colon - h);
    if (hl >= host_cap)
        return SHOAL_EINVAL;
    for (size_t i = 0; i < hl; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c <= 0x20 || c >= 0x7f)
            return SHOAL_EINVAL;
    }
    if (h[0] == '[' && h[hl - 1] != ']')
        return SHOAL_EINVAL;
    unsigned long p = 0;
    const char *d = colon + 1;
    if (!*d)
        return SHOAL_EINVAL;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return SHOAL_EINVAL;
        p = p * 10 + (unsigned long)(*d - '0');
        if (p > 65535)
            return SHOAL_EINVAL;
    }
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (uint16_t)p;
    return 0;
}

bool shoal_in6_is_any(const struct in6_addr *a)
{
    /* "::", and "::ffff:0.0.0.0", which a dual-stack socket binds as 0.0.0.0 */
    static const uint8_t mapped_any[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};
    return IN6_IS_ADDR_UNSPECIFIED(a) || memcmp(a->s6_addr, mapped_any, 16) == 0;
}

bool shoal_sockaddr_is_any(const struct sockaddr *sa)
{
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (sa->sa_family == AF_INET6)
        return shoal_in6_is_any(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
    return false;
}

int shoal_endpoint_check_bind(const char *endpoint, bool star_port, char *why, size_t why_len)
{
    char dummy[1];
    if (!why || !why_len) {
        why = dummy;
        why_len = sizeof dummy;
    }
    why[0] = 0;
    if (!endpoint) {
        snprintf(why, why_len, "no endpoint");
        return SHOAL_EINVAL;
    }
    if (strncmp(endpoint, "ipc://", 6) == 0) {
        if (!endpoint[6]) {
            snprintf(why, why_len, "ipc:// needs a path");
            return SHOAL_EINVAL;
        }
        return 0;
    }
    if (strncmp(endpoint, "tcp://", 6) != 0) {
        snprintf(why, why_len, "not tcp://host:port or ipc://path");
        return SHOAL_EINVAL;
    }
    const char *h = endpoint + 6;
    const char *colon = strrchr(h, ':');
    if (!colon) {
        snprintf(why, why_len, "no port (tcp://host:port)");
        return SHOAL_EINVAL;
    }
    const char *port = colon + 1;
    bool port_ok = star_port && strcmp(port, "*") == 0;
    if (!port_ok) {
        /* libzmq reads "99999" and "-1" as some port of its own choosing: digits only here */
        unsigned long p = 0;
        const char *d = port;
        for (; *d >= '0' && *d <= '9' && p <= 65535; d++)
            p = p * 10 + (unsigned long)(*d - '0');
        port_ok = d != port && !*d && p <= 65535;
    }
    if (!port_ok) {
        snprintf(why, why_len, "port '%s' is not a number from 0 to 65535%s", port,
                 star_port ? " (or *)" : "");
        return SHOAL_EINVAL;
    }
    size_t hl = (size_t)(colon - h);
    char host[SHOAL_ENDPOINT_MAX + 1];
    if (hl == 0 || hl >= sizeof host) {
        snprintf(why, why_len, hl ? "host too long" : "no host (tcp://host:port)");
        return SHOAL_EINVAL;
    }
    memcpy(host, h, hl);
    host[hl] = 0;
    for (size_t i = 0; i < hl; i++)
        if ((unsigned char)host[i] <= 0x20 || (unsigned char)host[i] >= 0x7f) {
            snprintf(why, why_len, "host has a space or a non-ASCII byte");
            return SHOAL_EINVAL;
        }
    /* the address literal without brackets, to recognize every spelling of "any" */
    char lit[SHOAL_ENDPOINT_MAX + 1];
    snprintf(lit, sizeof lit, "%s", host);
    if (lit[0] == '[' && hl >= 2 && lit[hl - 1] == ']') {
        memmove(lit, lit + 1, hl - 2);
        lit[hl - 2] = 0;
    }
    struct in_addr a4;
    struct in6_addr a6;
    bool any = strcmp(lit, "*") == 0;
    if (!any && inet_pton(AF_INET, lit, &a4) == 1)
        any = a4.s_addr == htonl(INADDR_ANY);
    else if (!any && inet_pton(AF_INET6, lit, &a6) == 1)
        any = shoal_in6_is_any(&a6);
    else if (!any) {
        /* a name: "0", "0x0" or a hosts entry resolve to "any" too (getaddrinfo reads numbers
           as inet_aton does); one that does not resolve is libzmq's to refuse */
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        if (getaddrinfo(lit, NULL, &hints, &res) == 0) {
            for (struct addrinfo *ai = res; ai && !any; ai = ai->ai_next)
                any = shoal_sockaddr_is_any(ai->ai_addr);
            freeaddrinfo(res);
        }
    }
    if (any) {
        snprintf(why, why_len,
                 "host '%s' is a wildcard: peers cannot dial it (a node id and a heartbeat "
                 "endpoint carry the host they dial); bind the address peers reach this node at",
                 host);
        return SHOAL_EINVAL;
    }
    return 0;
}

static bool host_is_wildcard(const char *h)
{
    return strcmp(h, "*") == 0 || strcmp(h, "0.0.0.0") == 0 || strcmp(h, "[::]") == 0 ||
           strcmp(h, "::") == 0;
}

/* An IPv4 literal or a bracketed IPv6 literal, as opposed to a name. */
static bool host_is_address(const char *h)
{
    if (h[0] == '[')
        return true;
    for (const char *p = h; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == '.'))
            return false;
    return h[0] != 0;
}

bool shoal_endpoint_matches(const char *self_endpoint, const char *to)
{
    if (!self_endpoint || !to)
        return false;
    if (strncmp(self_endpoint, "ipc://", 6) == 0)
        return strcmp(self_endpoint, to) == 0;
    char h1[SHOAL_ENDPOINT_MAX + 1], h2[SHOAL_ENDPOINT_MAX + 1];
    uint16_t p1, p2;
    if (strncmp(to, "tcp://", 6) != 0 ||
        shoal_endpoint_split(self_endpoint, h1, sizeof h1, &p1) != 0 ||
        shoal_endpoint_split(to, h2, sizeof h2, &p2) != 0)
        return false;
    if (p1 != p2)
        return false;
    if (strcmp(h1, h2) == 0 || host_is_wildcard(h1) || host_is_wildcard(h2))
        return true;
    return !host_is_address(h1) || !host_is_address(h2);
}
