/*  estate.c — EntityStateMap, the replicated type of a shard's entity states (state.c).

    value = (fence, entries): fence is a max-register (the newest allocation epoch that claimed
    the shard); entries map a key (an entity id, or a reminder's key) to (epoch, seq, deleted,
    deleted_unix_ms, data). Merge keeps the fence's max and, per key, the entry with the larger
    (epoch, seq); a tie (two writers with one epoch do not happen) is broken deterministically so
    merge stays a join: deleted over live, then the longer data, then memcmp, then the later
    deletion time.

    Entries live in one array sorted by key (memcmp, shorter first on a common prefix): lookups
    are binary searches, merges and encodings are linear walks, and a shard's states (a thousand
    entities, say) stay one allocation. An insert moves the tail (memmove), which at 10,000
    entries is still a few microseconds.

    Deltas are values of the type itself holding the changed entries and the fence, so
    merge_delta is merge and their order does not matter (delta_causal false).

    Payload (little-endian, canonical: entries in key order):
      u8 1 | u64 fence | u32 n | n x (u16 klen | key | u64 epoch | u64 seq | u8 deleted |
                                       i64 deleted_unix_ms | u32 len | data)
*/
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "estate.h"

#define FORMAT 1

typedef struct {
    uint8_t *key;
    uint32_t klen;
    uint64_t epoch, seq;
    bool deleted;
    int64_t deleted_ms;
    uint8_t *data;
    uint32_t len;
} ent_t;

typedef struct {
    shoal_crdt_t base;
    uint64_t fence;
    ent_t *e;
    size_t n, cap;
    shoal_crdt_t *delta; /* pending delta (NULL: none) */
} esmap_t;

#define M(x)  ((esmap_t *)(x))
#define CM(x) ((const esmap_t *)(x))

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

static shoal_crdt_t *es_create(void)
{
    esmap_t *m = calloc(1, sizeof *m);
    if (!m)
        abort();
    m->base.type = &estate_type;
    return &m->base;
}

shoal_crdt_t *estate_new(void)
{
    return es_create();
}

int estate_register(void)
{
    return shoal_type_register(&estate_type);
}

static void ent_free(ent_t *e)
{
    free(e->key);
    free(e->data);
}

static void es_destroy(shoal_crdt_t *self)
{
    esmap_t *m = M(self);
    for (size_t i = 0; i < m->n; i++)
        ent_free(&m->e[i]);
    free(m->e);
    if (m->delta)
        es_destroy(m->delta);
    free(m);
}

static void ent_copy(ent_t *dst, const ent_t *src)
{
    *dst = *src;
    dst->key = xmalloc(src->klen);
    memcpy(dst->key, src->key, src->klen);
    dst->data = NULL;
    if (src->len) {
        dst->data = xmalloc(src->len);
        memcpy(dst->data, src->data, src->len);
    }
}

static shoal_crdt_t *es_clone(const shoal_crdt_t *self)
{
    const esmap_t *m = CM(self);
    esmap_t *c = M(es_create());
    c->fence = m->fence;
    c->cap = m->n;
    c->n = m->n;
    c->e = m->n ? xmalloc(m->n * sizeof *c->e) : NULL;
    for (size_t i = 0; i < m->n; i++)
        ent_copy(&c->e[i], &m->e[i]);
    return &c->base;
}

static int key_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    if (c)
        return c;
    return al < bl ? -1 : al > bl ? 1 : 0;
}

/* Index of key, or of where it would go (*found false). */
static size_t find(const esmap_t *m, const void *key, size_t klen, bool *found)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = key_cmp(m->e[mid].key, m->e[mid].klen, key, klen);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

/* > 0 when a wins over b. */
static int ent_order(const ent_t *a, const ent_t *b)
{
    if (a->epoch != b->epoch)
        return a->epoch > b->epoch ? 1 : -1;
    if (a->seq != b->seq)
        return a->seq > b->seq ? 1 : -1;
    if (a->deleted != b->deleted)
        return a->deleted ? 1 : -1;
    if (a->len != b->len)
        return a->len > b->len ? 1 : -1;
    int c = a->len ? memcmp(a->data, b->data, a->len) : 0;
    if (c)
        return c > 0 ? 1 : -1;
    if (a->deleted_ms != b->deleted_ms)
        return a->deleted_ms > b->deleted_ms ? 1 : -1;
    return 0;
}

static void insert_at(esmap_t *m, size_t at, ent_t *e)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 8;
        ent_t *n = realloc(m->e, m->cap * sizeof *n);
        if (!n)
            abort();
        m->e = n;
    }
    memmove(&m->e[at + 1], &m->e[at], (m->n - at) * sizeof *m->e);
    m->e[at] = *e;
    m->n++;
}

/* Takes e (owned) into m if it wins; true when m changed. */
static bool absorb(esmap_t *m, ent_t *e)
{
    bool found;
    size_t at = find(m, e->key, e->klen, &found);
    if (!found) {
        insert_at(m, at, e);
        return true;
    }
    if (ent_order(e, &m->e[at]) > 0) {
        ent_free(&m->e[at]);
        m->e[at] = *e;
        return true;
    }
    ent_free(e);
    return false;
}

static int es_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    esmap_t *m = M(self);
    const esmap_t *o = CM(other);
    if (o->fence > m->fence)
        m->fence = o->fence;
    /* both sorted: a linear merge into a new array when other brings many keys */
    if (o->n > 16 && o->n * 4 > m->n) {
        size_t alloc = m->n + o->n;
        ent_t *out = xmalloc(alloc * sizeof *out);
        size_t i = 0, j = 0, k = 0;
        while (i < m->n || j < o->n) {
            int c = i == m->n   ? 1
                    : j == o->n ? -1
                                : key_cmp(m->e[i].key, m->e[i].klen, o->e[j].key, o->e[j].klen);
            if (c < 0) {
                out[k++] = m->e[i++];
            } else if (c > 0) {
                ent_copy(&out[k++], &o->e[j++]);
            } else {
                if (ent_order(&o->e[j], &m->e[i]) > 0) {
                    ent_free(&m->e[i]);
                    ent_copy(&out[k++], &o->e[j]);
                } else {
                    out[k++] = m->e[i];
                }
                i++;
                j++;
            }
        }
        free(m->e);
        m->e = out;
        m->n = k;
        m->cap = alloc;
        return 0;
    }
    for (size_t j = 0; j < o->n; j++) {
        ent_t c;
        ent_copy(&c, &o->e[j]);
        absorb(m, &c);
    }
    return 0;
}

static esmap_t *delta_of(esmap_t *m)
{
    if (!m->delta)
        m->delta = es_create();
    return M(m->delta);
}

static void record(esmap_t *m, const ent_t *e)
{
    ent_t c;
    ent_copy(&c, e);
    absorb(delta_of(m), &c);
}

static const shoal_crdt_t *es_delta(const shoal_crdt_t *self)
{
    return CM(self)->delta;
}

static shoal_crdt_t *es_take_delta(shoal_crdt_t *self)
{
    shoal_crdt_t *d = M(self)->delta;
    M(self)->delta = NULL;
    return d;
}

/* --- API -------------------------------------------------------------------------------------- */
static bool is_es(const shoal_crdt_t *m)
{
    return m && m->type == &estate_type;
}

uint64_t estate_fence(const shoal_crdt_t *m)
{
    return is_es(m) ? CM(m)->fence : 0;
}

int estate_raise_fence(shoal_crdt_t *m, uint64_t epoch)
{
    if (!is_es(m))
        return SHOAL_ETYPE;
    if (epoch > M(m)->fence) {
        M(m)->fence = epoch;
        esmap_t *d = delta_of(M(m));
        if (epoch > d->fence)
            d->fence = epoch;
    }
    return 0;
}

static int es_write(shoal_crdt_t *m, const void *key, size_t klen, uint64_t epoch, uint64_t seq,
                 bool deleted, int64_t now, const void *data, size_t len)
{
    if (!is_es(m))
        return SHOAL_ETYPE;
    if (!key || klen == 0 || klen > ESTATE_KEY_MAX || (len && !data))
        return SHOAL_EINVAL;
    if (len > ESTATE_DATA_MAX)
        return SHOAL_ETOOBIG;
    ent_t e = {0};
    e.klen = (uint32_t)klen;
    e.key = xmalloc(klen);
    memcpy(e.key, key, klen);
    e.epoch = epoch;
    e.seq = seq;
    e.deleted = deleted;
    e.deleted_ms = deleted ? now : 0;
    e.len = (uint32_t)len;
    if (len) {
        e.data = xmalloc(len);
        memcpy(e.data, data, len);
    }
    esmap_t *mm = M(m);
    bool found;
    size_t at = find(mm, key, klen, &found);
    if (found && (mm->e[at].epoch > epoch || (mm->e[at].epoch == epoch && mm->e[at].seq >= seq))) {
        ent_free(&e);
        return SHOAL_ESTALE;
    }
    record(mm, &e);
    absorb(mm, &e);
    return 0;
}

int estate_put(shoal_crdt_t *m, const void *key, size_t klen, uint64_t epoch, uint64_t seq,
               const void *data, size_t len)
{
    return es_write(m, key, klen, epoch, seq, false, 0, data, len);
}

int estate_delete(shoal_crdt_t *m, const void *key, size_t klen, uint64_t epoch, uint64_t seq,
                  int64_t now_unix_ms)
{
    return es_write(m, key, klen, epoch, seq, true, now_unix_ms, NULL, 0);
}

static void to_entry(const ent_t *e, estate_entry_t *out)
{
    out->epoch = e->epoch;
    out->seq = e->seq;
    out->deleted = e->deleted;
    out->deleted_unix_ms = e->deleted_ms;
    out->data = e->data;
    out->len = e->len;
}

int estate_get(const shoal_crdt_t *m, const void *key, size_t klen, estate_entry_t *out)
{
    if (!is_es(m) || !key || !out)
        return SHOAL_EINVAL;
    bool found;
    size_t at = find(CM(m), key, klen, &found);
    if (!found)
        return SHOAL_ENOTFOUND;
    to_entry(&CM(m)->e[at], out);
    return 0;
}

int estate_foreach_prefix(const shoal_crdt_t *m, const void *prefix, size_t plen,
                          int (*fn)(const void *key, size_t klen, const estate_entry_t *e,
                                    void *arg),
                          void *arg)
{
    if (!is_es(m) || !fn)
        return SHOAL_EINVAL;
    const esmap_t *mm = CM(m);
    bool found;
    size_t i = plen ? find(mm, prefix, plen, &found) : 0;
    for (; i < mm->n; i++) {
        const ent_t *e = &mm->e[i];
        if (plen && (e->klen < plen || memcmp(e->key, prefix, plen) != 0))
            break;
        estate_entry_t x;
        to_entry(e, &x);
        int rc = fn(e->key, e->klen, &x, arg);
        if (rc)
            return rc;
    }
    return 0;
}

int estate_foreach(const shoal_crdt_t *m,
                   int (*fn)(const void *key, size_t klen, const estate_entry_t *e, void *arg),
                   void *arg)
{
    return estate_foreach_prefix(m, NULL, 0, fn, arg);
}

size_t estate_count(const shoal_crdt_t *m)
{
    return is_es(m) ? CM(m)->n : 0;
}

size_t estate_restamp(shoal_crdt_t *m, uint64_t epoch, int64_t drop_deleted_before_unix_ms)
{
    if (!is_es(m))
        return 0;
    esmap_t *mm = M(m);
    estate_raise_fence(m, epoch);
    size_t k = 0, n = 0;
    for (size_t i = 0; i < mm->n; i++) {
        ent_t *e = &mm->e[i];
        if (e->epoch < epoch && e->deleted && e->deleted_ms < drop_deleted_before_unix_ms) {
            ent_free(e); /* a tombstone old enough to forget */
            continue;
        }
        if (e->epoch < epoch) {
            e->epoch = epoch;
            e->seq = 0;
            record(mm, e);
            n++;
        }
        mm->e[k++] = *e;
    }
    mm->n = k;
    return n;
}

int estate_admit(const shoal_crdt_t *current, const shoal_crdt_t *incoming)
{
    if (!is_es(current) || !is_es(incoming))
        return 0;
    const esmap_t *c = CM(current), *in = CM(incoming);
    /* an entry older than the fence is news only from an older owner (the owner of the fence
       re-stamped everything it adopted); one this replica holds already, as a full state
       carries, is not */
    for (size_t j = 0; j < in->n; j++) {
        const ent_t *e = &in->e[j];
        if (e->epoch >= c->fence)
            continue;
        bool found;
        size_t at = find(c, e->key, e->klen, &found);
        if (!found || ent_order(e, &c->e[at]) != 0)
            return SHOAL_ESTALE;
    }
    return 0;
}

size_t estate_bytes(const shoal_crdt_t *m)
{
    if (!is_es(m))
        return 0;
    size_t b = 13;
    for (size_t i = 0; i < CM(m)->n; i++)
        b += 2 + CM(m)->e[i].klen + 29 + 4 + CM(m)->e[i].len;
    return b;
}

/* --- encoding --------------------------------------------------------------------------------- */
static void put_le(shoal_buf_t *out, uint64_t v, int n)
{
    uint8_t b[8];
    for (int i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    shoal_buf_append(out, b, (size_t)n);
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int es_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const esmap_t *m = CM(self);
    uint8_t f = FORMAT;
    shoal_buf_reserve(out, estate_bytes(self));
    shoal_buf_append(out, &f, 1);
    put_le(out, m->fence, 8);
    put_le(out, m->n, 4);
    for (size_t i = 0; i < m->n; i++) {
        const ent_t *e = &m->e[i];
        put_le(out, e->klen, 2);
        shoal_buf_append(out, e->key, e->klen);
        put_le(out, e->epoch, 8);
        put_le(out, e->seq, 8);
        uint8_t d = e->deleted;
        shoal_buf_append(out, &d, 1);
        put_le(out, (uint64_t)e->deleted_ms, 8);
        put_le(out, e->len, 4);
        if (e->len)
            shoal_buf_append(out, e->data, e->len);
    }
    return 0;
}

static int es_decode(const uint8_t *p, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    if (len < 13 || p[0] != FORMAT)
        return len && p[0] > FORMAT ? SHOAL_EVERSION : SHOAL_EDECODE;
    esmap_t *m = M(es_create());
    m->fence = get_le(p + 1, 8);
    uint64_t n = get_le(p + 9, 4);
    size_t at = 13;
    /* every entry takes at least 32 bytes: a count beyond what the input holds is a lie */
    if (n > (len - at) / 32 + 1)
        goto bad;
    m->cap = (size_t)n;
    m->e = n ? calloc((size_t)n, sizeof *m->e) : NULL;
    if (n && !m->e)
        abort();
    for (uint64_t i = 0; i < n; i++) {
        if (len - at < 2)
            goto bad;
        size_t kl = (size_t)get_le(p + at, 2);
        at += 2;
        if (kl == 0 || kl > ESTATE_KEY_MAX || len - at < kl + 29)
            goto bad;
        const uint8_t *key = p + at;
        at += kl;
        uint64_t epoch = get_le(p + at, 8), seq = get_le(p + at + 8, 8);
        uint8_t del = p[at + 16];
        int64_t dms = (int64_t)get_le(p + at + 17, 8);
        size_t dl = (size_t)get_le(p + at + 25, 4);
        at += 29;
        if (del > 1 || dl > ESTATE_DATA_MAX || (del && dl) || (!del && dms) || len - at < dl)
            goto bad;
        if (m->n && key_cmp(m->e[m->n - 1].key, m->e[m->n - 1].klen, key, kl) >= 0)
            goto bad; /* unsorted or repeated: not canonical */
        ent_t *e = &m->e[m->n++];
        e->klen = (uint32_t)kl;
        e->key = xmalloc(kl);
        memcpy(e->key, key, kl);
        e->epoch = epoch;
        e->seq = seq;
        e->deleted = del;
        e->deleted_ms = dms;
        e->len = (uint32_t)dl;
        if (dl) {
            e->data = xmalloc(dl);
            memcpy(e->data, p + at, dl);
        }
        at += dl;
    }
    if (at != len)
        goto bad;
    *out = &m->base;
    return 0;
bad:
    es_destroy(&m->base);
    return SHOAL_EDECODE;
}

static void render_bytes(shoal_buf_t *out, const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (d[i] >= 0x20 && d[i] < 0x7f && d[i] != '"' && d[i] != '\\')
            shoal_buf_append(out, &d[i], 1);
        else
            shoal_buf_printf(out, "\\x%02x", d[i]);
    }
}

static int es_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const esmap_t *m = CM(self);
    shoal_buf_printf(out, "EntityStateMap{fence=%" PRIx64 ", n=%zu, entries: ", m->fence, m->n);
    for (size_t i = 0; i < m->n && i < 50; i++) {
        const ent_t *e = &m->e[i];
        shoal_buf_printf(out, "%s\"", i ? ", " : "");
        render_bytes(out, e->key, e->klen);
        shoal_buf_printf(out, "\"@%" PRIx64 ".%" PRIu64 "(%ub)%s", e->epoch, e->seq, e->len,
                         e->deleted ? "[deleted]" : "");
    }
    if (m->n > 50)
        shoal_buf_printf(out, ", ...");
    shoal_buf_printf(out, "}");
    return 0;
}

const shoal_type_t estate_type = {
    .name = "EntityStateMap",
    .tag = ESTATE_TAG,
    .format_version = 1,
    .delta_type = &estate_type,
    .delta_causal = false,
    .has_pruning = false,
    .create = es_create,
    .destroy = es_destroy,
    .clone = es_clone,
    .merge = es_merge,
    .delta = es_delta,
    .take_delta = es_take_delta,
    .merge_delta = es_merge,
    .encode_payload = es_encode,
    .decode_payload = es_decode,
    .render = es_render,
    .admit = estate_admit,
};
