/*  containers.c — the sorted node map, the node table of encodings, and the byte-string
    hash map that the types share. */
#include "internal.h"

#include <stdio.h>

/* ---------------------------------------------------------------------------------------------
 * Sorted node map
 */
void shoal_nm_free(shoal_nodemap_t *m)
{
    free(m->e);
    m->e = NULL;
    m->n = m->cap = 0;
}

void shoal_nm_copy(shoal_nodemap_t *dst, const shoal_nodemap_t *src)
{
    dst->n = 0;
    SHOAL_GROW(dst->e, dst->cap, src->n);
    if (src->n)
        memcpy(dst->e, src->e, src->n * sizeof *src->e);
    dst->n = src->n;
}

ptrdiff_t shoal_nm_find(const shoal_nodemap_t *m, const shoal_node_t *node)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].node == node)
            return (ptrdiff_t)i;
    return -1;
}

uint64_t shoal_nm_get(const shoal_nodemap_t *m, const shoal_node_t *node)
{
    ptrdiff_t i = shoal_nm_find(m, node);
    return i < 0 ? 0 : m->e[i].value;
}

void shoal_nm_remove(shoal_nodemap_t *m, const shoal_node_t *node)
{
    ptrdiff_t i = shoal_nm_find(m, node);
    if (i < 0)
        return;
    memmove(&m->e[i], &m->e[i + 1], (m->n - (size_t)i - 1) * sizeof *m->e);
    m->n--;
}

void shoal_nm_set(shoal_nodemap_t *m, const shoal_node_t *node, uint64_t value)
{
    ptrdiff_t i = shoal_nm_find(m, node);
    if (i >= 0) {
        if (value)
            m->e[i].value = value;
        else
            shoal_nm_remove(m, node);
        return;
    }
    if (!value)
        return;
    size_t pos = 0;
    while (pos < m->n && shoal_node_cmp(m->e[pos].node, node) < 0)
        pos++;
    SHOAL_GROW(m->e, m->cap, m->n + 1);
    memmove(&m->e[pos + 1], &m->e[pos], (m->n - pos) * sizeof *m->e);
    m->e[pos].node = node;
    m->e[pos].value = value;
    m->n++;
}

bool shoal_nm_merge_max(shoal_nodemap_t *m, const shoal_nodemap_t *other)
{
    bool changed = false;
    for (size_t j = 0; j < other->n; j++) {
        ptrdiff_t i = shoal_nm_find(m, other->e[j].node);
        if (i >= 0) {
            if (other->e[j].value > m->e[i].value) {
                m->e[i].value = other->e[j].value;
                changed = true;
            }
        } else {
            shoal_nm_set(m, other->e[j].node, other->e[j].value);
            changed = true;
        }
    }
    return changed;
}

bool shoal_nm_equal(const shoal_nodemap_t *a, const shoal_nodemap_t *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (a->e[i].node != b->e[i].node || a->e[i].value != b->e[i].value)
            return false;
    return true;
}

void shoal_nm_to_pb(const shoal_nodemap_t *m, size_t *n, char ***nodes, uint64_t **values)
{
    *n = m->n;
    *nodes = shoal_malloc(m->n * sizeof **nodes);
    *values = shoal_malloc(m->n * sizeof **values);
    for (size_t i = 0; i < m->n; i++) {
        (*nodes)[i] = (char *)shoal_node_id(m->e[i].node);
        (*values)[i] = m->e[i].value;
    }
}

void shoal_nm_pb_free(char **nodes, uint64_t *values)
{
    free(nodes);
    free(values);
}

int shoal_nm_from_pb(shoal_nodemap_t *m, size_t n_nodes, char *const *nodes, size_t n_values,
                     const uint64_t *values)
{
    if (n_nodes != n_values)
        return SHOAL_EDECODE;
    m->n = 0;
    SHOAL_GROW(m->e, m->cap, n_nodes);
    for (size_t i = 0; i < n_nodes; i++) {
        const shoal_node_t *node = shoal_node_intern(nodes[i]);
        if (!node)
            return SHOAL_ENODE;
        if (values[i] == 0)
            return SHOAL_EDECODE;
        if (i > 0 && shoal_node_cmp(m->e[i - 1].node, node) >= 0)
            return SHOAL_EDECODE;
        m->e[i].node = node;
        m->e[i].value = values[i];
        m->n = i + 1;
    }
    return 0;
}

void shoal_nm_render(const shoal_nodemap_t *m, shoal_buf_t *out)
{
    shoal_buf_append(out, "{", 1);
    for (size_t i = 0; i < m->n; i++)
        shoal_buf_printf(out, "%s%s=%llu", i ? ", " : "", shoal_node_id(m->e[i].node),
                         (unsigned long long)m->e[i].value);
    shoal_buf_append(out, "}", 1);
}

/* ---------------------------------------------------------------------------------------------
 * Node table
 */
void shoal_nodetab_add(shoal_nodetab_t *t, const shoal_node_t *node)
{
    /* Most values touch few nodes: skip the common case of a repeat of the last one. */
    if (t->n && t->nodes[t->n - 1] == node)
        return;
    SHOAL_GROW(t->nodes, t->cap, t->n + 1);
    t->nodes[t->n++] = node;
}

static int node_ptr_cmp(const void *a, const void *b)
{
    return shoal_node_cmp(*(const shoal_node_t *const *)a, *(const shoal_node_t *const *)b);
}

void shoal_nodetab_finish(shoal_nodetab_t *t)
{
    if (t->n == 0)
        return;
    qsort(t->nodes, t->n, sizeof *t->nodes, node_ptr_cmp);
    size_t w = 1;
    for (size_t i = 1; i < t->n; i++)
        if (t->nodes[i] != t->nodes[w - 1])
            t->nodes[w++] = t->nodes[i];
    t->n = w;
}

uint32_t shoal_nodetab_index(const shoal_nodetab_t *t, const shoal_node_t *node)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->nodes[mid] == node)
            return (uint32_t)mid;
        if (shoal_node_cmp(t->nodes[mid], node) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    abort(); /* a caller bug: the node was not added */
}

void shoal_nodetab_free(shoal_nodetab_t *t)
{
    free(t->nodes);
    t->nodes = NULL;
    t->n = t->cap = 0;
}

int shoal_nodetab_from_pb(shoal_nodetab_t *t, size_t n, char *const *ids)
{
    t->n = 0;
    SHOAL_GROW(t->nodes, t->cap, n);
    for (size_t i = 0; i < n; i++) {
        const shoal_node_t *node = shoal_node_intern(ids[i]);
        if (!node)
            return SHOAL_ENODE;
        if (i > 0 && shoal_node_cmp(t->nodes[i - 1], node) >= 0)
            return SHOAL_EDECODE;
        t->nodes[t->n++] = node;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Byte-string hash map
 */
static uint64_t key_hash(const void *key, size_t klen)
{
    uint64_t h = shoal_hash_bytes(key, klen);
    return h ? h : 1; /* 0 marks an empty slot */
}

void shoal_hmap_free(shoal_hmap_t *h)
{
    for (size_t i = 0; i < h->cap; i++)
        free(h->slots[i].key);
    free(h->slots);
    free(h->index);
    free(h->order);
    memset(h, 0, sizeof *h);
}

#define HMAP_MAX_ENTRIES ((size_t)UINT32_MAX - 1) /* positions + 1 fit the 32-bit index */

static void too_many_entries(void)
{
    /* 2^32 entries of 32 bytes are 128 GiB of slots alone: as fatal as running out of memory */
    fprintf(stderr, "shoal: hash map of more than %zu entries\n", HMAP_MAX_ENTRIES);
    abort();
}

/* Index position of key, or of the empty place where the probe for it ends (*found false). */
static size_t index_probe(const shoal_hmap_t *h, const void *key, size_t klen, uint64_t hash,
                          bool *found)
{
    size_t mask = h->index_cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint32_t at = h->index[i];
        if (at == 0) {
            *found = false;
            return i;
        }
        const shoal_hslot_t *s = &h->slots[at - 1];
        if (s->hash == hash && s->key && s->klen == klen && memcmp(s->key, key, klen) == 0) {
            *found = true;
            return i;
        }
    }
}

static shoal_hslot_t *find_slot(const shoal_hmap_t *h, const void *key, size_t klen, uint64_t hash)
{
    if (!h->index_cap)
        return NULL;
    bool found;
    size_t i = index_probe(h, key, klen, hash, &found);
    return found ? &h->slots[h->index[i] - 1] : NULL;
}

/* Forgets the sorted-order memo (its positions no longer hold). */
static void order_forget(shoal_hmap_t *h)
{
    free(h->order);
    h->order = NULL;
    h->order_n = h->order_mark = 0;
}

/* Drops the holes from slots and rebuilds the index at index_cap positions (a power of two
   of at least 2n, so probes stay short). */
static void rebuild(shoal_hmap_t *h, size_t index_cap)
{
    order_forget(h); /* the entries move */
    size_t k = 0;
    for (size_t i = 0; i < h->cap; i++)
        if (SHOAL_HSLOT_LIVE(&h->slots[i]))
            h->slots[k++] = h->slots[i];
    h->cap = k;
    if (index_cap != h->index_cap) {
        free(h->index);
        h->index = shoal_malloc(index_cap * sizeof *h->index);
        h->index_cap = index_cap;
    }
    memset(h->index, 0, index_cap * sizeof *h->index);
    size_t mask = index_cap - 1;
    for (size_t i = 0; i < k; i++) {
        size_t j = h->slots[i].hash & mask;
        while (h->index[j])
            j = (j + 1) & mask;
        h->index[j] = (uint32_t)(i + 1);
    }
    h->used = k;
}

static size_t index_cap_for(size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

void shoal_hmap_reserve(shoal_hmap_t *h, size_t n)
{
    if (n > HMAP_MAX_ENTRIES)
        too_many_entries();
    if (h->alloc < n) {
        h->slots = shoal_realloc(h->slots, n * sizeof *h->slots);
        h->alloc = n;
    }
    if (h->index_cap < index_cap_for(n))
        rebuild(h, index_cap_for(n));
}

void *shoal_hmap_get(const shoal_hmap_t *h, const void *key, size_t klen)
{
    shoal_hslot_t *s = find_slot(h, key, klen, key_hash(key, klen));
    return s ? s->value : NULL;
}

shoal_hslot_t *shoal_hmap_upsert(shoal_hmap_t *h, const void *key, size_t klen, bool *inserted)
{
    uint64_t hash = key_hash(key, klen);
    shoal_hslot_t *s = find_slot(h, key, klen, hash);
    if (s) {
        *inserted = false;
        return s;
    }
    if (h->cap == h->alloc) {
        if (h->cap - h->n >= h->cap / 4 && h->cap >= 16) {
            rebuild(h, h->index_cap); /* a quarter or more are holes: reuse their room */
        } else {
            if (h->alloc >= HMAP_MAX_ENTRIES)
                too_many_entries();
            size_t na = h->alloc ? 2 * h->alloc : 8;
            if (na > HMAP_MAX_ENTRIES)
                na = HMAP_MAX_ENTRIES;
            h->slots = shoal_realloc(h->slots, na * sizeof *h->slots);
            h->alloc = na;
        }
    }
    /* keep the index load (live + tombstones) under 3/4; a rebuild brings it to 1/2 or less, so
       at least a quarter of the index is inserted into between two rebuilds (amortized O(1) for
       a map that churns at a steady size, such as the replicator's pending requests) */
    if ((h->used + 1) * 4 > h->index_cap * 3)
        rebuild(h, index_cap_for(h->n + 1));
    bool found;
    size_t i = index_probe(h, key, klen, hash, &found);
    s = &h->slots[h->cap];
    h->index[i] = (uint32_t)(++h->cap);
    s->hash = hash;
    s->key = shoal_memdup(key, klen);
    s->klen = klen;
    s->value = NULL;
    h->n++;
    h->used++;
    *inserted = true;
    return s;
}

void shoal_hmap_kill(shoal_hmap_t *h, shoal_hslot_t *s)
{
    free(s->key);
    s->key = NULL; /* a hole; its index position stays a tombstone so probes continue */
    s->klen = 0;
    s->value = NULL;
    h->n--;
}

void *shoal_hmap_remove(shoal_hmap_t *h, const void *key, size_t klen)
{
    shoal_hslot_t *s = find_slot(h, key, klen, key_hash(key, klen));
    if (!s)
        return NULL;
    void *v = s->value;
    shoal_hmap_kill(h, s);
    return v;
}

/* Canonical order of many keys (the encoding of a large set or map lists every key in order on
   every full-state encode, so this is on the gossip and durable-write paths; a map remembers the
   order it found, and the next sort only places the keys inserted since: see the order memo).

   An MSD radix sort on 16-byte chunks: each key is represented by the 16 bytes at the current
   depth, big-endian and zero-padded, held beside the slot pointer, so the sort reads each key
   once per depth (in slot order, prefetched: the keys are scattered on the heap, and waiting
   for them one at a time was most of the cost) and never compares keys through pointers.
   Padded chunks order keys consistently with shoal_bytes_cmp (a key that ends inside the chunk
   reads as zeros there, and a key is smaller than any longer key it prefixes); ties are refined
   at the next depth. One chunk is sorted with an LSD radix sort over its bytes, skipping bytes
   that every key shares (the common "entity-" of entity ids costs one counting pass; a
   comparison sort of 100k such keys made encoding a 100k-element ORSet 66x the cost of packing
   its elements). Small groups, and groups whose keys all end within the chunk, go to qsort with
   the full comparison. */
typedef struct {
    uint64_t hi, lo; /* 16 key bytes from the current depth, big-endian, zero-padded */
    shoal_hslot_t *slot;
} keyref_t;

enum {
    KEYREF_QSORT_BELOW = 64, /* below this a comparison sort beats the counting passes */
    KEYREF_MAX_DEPTH = 64,   /* keys alike beyond 64 bytes go to qsort: bounds the stack (16 KiB
                                of counts per level) on long shared prefixes */
    KEYREF_PREFETCH = 8      /* keys read ahead while chunking: enough misses in flight */
};

static int keyref_cmp(const void *a, const void *b)
{
    const keyref_t *x = a, *y = b;
    return shoal_bytes_cmp(x->slot->key, x->slot->klen, y->slot->key, y->slot->klen);
}

static inline uint64_t be64_padded(const uint8_t *key, size_t klen, size_t at)
{
    uint64_t c = 0;
    if (klen >= at + 8) {
        for (size_t j = 0; j < 8; j++)
            c = c << 8 | key[at + j];
        return c;
    }
    for (size_t j = 0; j < 8; j++)
        c = c << 8 | (at + j < klen ? key[at + j] : 0);
    return c;
}

static inline void keyref_chunk(keyref_t *r, size_t depth)
{
    const shoal_hslot_t *sl = r->slot;
    r->hi = be64_padded(sl->key, sl->klen, depth);
    r->lo = be64_padded(sl->key, sl->klen, depth + 8);
}

/* Byte b (0 = least significant) of the 16-byte chunk. */
static inline unsigned keyref_byte(const keyref_t *r, int b)
{
    return b < 8 ? (unsigned)(r->lo >> (8 * b)) & 0xff : (unsigned)(r->hi >> (8 * (b - 8))) & 0xff;
}

/* Sorts the n keyrefs at r, with tmp (n more) as the other buffer of the scatter passes;
   returns which of the two holds the result (copying it back would stream the array once more). */
static keyref_t *keyref_sort(keyref_t *r, keyref_t *tmp, size_t n, size_t depth)
{
    if (n < KEYREF_QSORT_BELOW || depth > KEYREF_MAX_DEPTH) {
        qsort(r, n, sizeof *r, keyref_cmp);
        return r;
    }
    /* which bytes vary: only those get a counting and a scattering pass (counting a byte every
       key shares is a chain of increments of one counter, slower than the scatter itself) */
    uint64_t vary_hi = 0, vary_lo = 0;
    bool longer = false; /* a key goes on past this chunk: a deeper level can tell ties apart */
    for (size_t i = 0; i < n; i++) {
        if (depth > 0) { /* depth 0 was chunked while collecting the slots */
            if (i + KEYREF_PREFETCH < n)
                __builtin_prefetch(r[i + KEYREF_PREFETCH].slot->key + depth);
            keyref_chunk(&r[i], depth);
        }
        longer |= r[i].slot->klen > depth + 16;
        vary_hi |= r[i].hi ^ r[0].hi;
        vary_lo |= r[i].lo ^ r[0].lo;
    }
    int bytes[16], nb = 0; /* varying bytes, least significant first */
    for (int b = 0; b < 16; b++)
        if (((b < 8 ? vary_lo >> (8 * b) : vary_hi >> (8 * (b - 8))) & 0xff) != 0)
            bytes[nb++] = b;
    uint32_t count[16][256]; /* a map holds fewer than 2^32 keys */
    memset(count, 0, (size_t)nb * sizeof count[0]);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < nb; k++)
            count[k][keyref_byte(&r[i], bytes[k])]++;
    keyref_t *src = r, *dst = tmp;
    for (int k = 0; k < nb; k++) {
        uint32_t *c = count[k], sum = 0;
        for (int v = 0; v < 256; v++) {
            uint32_t m = c[v];
            c[v] = sum;
            sum += m;
        }
        int b = bytes[k];
        for (size_t i = 0; i < n; i++)
            dst[c[keyref_byte(&src[i], b)]++] = src[i];
        keyref_t *t = src;
        src = dst;
        dst = t;
    }
    keyref_t *out = src, *spare = dst; /* the sorted keyrefs, and the other buffer */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && out[j].hi == out[i].hi && out[j].lo == out[i].lo)
            j++;
        if (j - i > 1) {
            if (!longer) {
                qsort(out + i, j - i, sizeof *out, keyref_cmp); /* equal up to their ends */
            } else {
                keyref_t *sub = keyref_sort(out + i, spare + i, j - i, depth + 16);
                if (sub != out + i)
                    memcpy(out + i, sub, (j - i) * sizeof *out);
            }
        }
        i = j;
    }
    return out;
}

/* The order memo. Below this many keys a sort is cheap and the memo (4 bytes a key) not worth
   keeping; above a quarter of the map inserted since the last sort, sorting everything again
   (a few streaming passes) beats one binary search per new key. */
enum { ORDER_MEMO_MIN = 256 };

static bool order_memo_usable(const shoal_hmap_t *h)
{
    return h->order && h->cap - h->order_mark <= h->n / 4;
}

/* Keeps the sorted keyrefs' positions as the memo. */
static void order_remember(shoal_hmap_t *h, const keyref_t *sorted, size_t k)
{
    order_forget(h);
    if (k < ORDER_MEMO_MIN)
        return;
    h->order = shoal_malloc(k * sizeof *h->order);
    for (size_t i = 0; i < k; i++)
        h->order[i] = (uint32_t)(sorted[i].slot - h->slots);
    h->order_n = k;
    h->order_mark = h->cap;
}

/* The memo brought up to date: its entries removed since are dropped, the entries inserted since
   are sorted among themselves and merged in, each at the place a binary search finds (keys are
   distinct, and a key removed and inserted again is a removed entry and a new one). */
static void order_update(shoal_hmap_t *h)
{
    size_t fresh_cap = h->cap - h->order_mark, nfresh = 0;
    keyref_t *r = shoal_malloc((fresh_cap ? 2 * fresh_cap : 1) * sizeof *r);
    for (size_t i = h->order_mark; i < h->cap; i++)
        if (SHOAL_HSLOT_LIVE(&h->slots[i])) {
            r[nfresh].slot = &h->slots[i];
            keyref_chunk(&r[nfresh++], 0);
        }
    const keyref_t *fresh = keyref_sort(r, r + fresh_cap, nfresh, 0);
    uint32_t *old = h->order;
    size_t nold = h->order_n;
    if (nold + nfresh != h->n) { /* entries of the memo were removed: drop their holes */
        size_t k = 0;
        for (size_t i = 0; i < nold; i++)
            if (SHOAL_HSLOT_LIVE(&h->slots[old[i]]))
                old[k++] = old[i];
        nold = k;
    }
    if (nfresh) {
        uint32_t *merged = shoal_malloc((nold + nfresh) * sizeof *merged);
        size_t at = 0, out = 0;
        for (size_t j = 0; j < nfresh; j++) {
            const shoal_hslot_t *s = fresh[j].slot;
            size_t lo = at, hi = nold;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                const shoal_hslot_t *m = &h->slots[old[mid]];
                if (shoal_bytes_cmp(m->key, m->klen, s->key, s->klen) < 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            memcpy(merged + out, old + at, (lo - at) * sizeof *old);
            out += lo - at;
            at = lo;
            merged[out++] = (uint32_t)(s - h->slots);
        }
        memcpy(merged + out, old + at, (nold - at) * sizeof *old);
        free(old);
        h->order = merged;
    }
    h->order_n = nold + nfresh;
    h->order_mark = h->cap;
    free(r);
}

shoal_hslot_t **shoal_hmap_sorted(const shoal_hmap_t *h_)
{
    /* the memo is no part of the map's value: a map read by its one owner thread may keep it */
    shoal_hmap_t *h = (shoal_hmap_t *)h_;
    size_t n = h->n ? h->n : 1;
    if (order_memo_usable(h)) {
        order_update(h);
        shoal_hslot_t **v = shoal_malloc(n * sizeof *v);
        for (size_t i = 0; i < h->order_n; i++)
            v[i] = &h->slots[h->order[i]];
        return v;
    }
    keyref_t *r = shoal_malloc(2 * n * sizeof *r);
    size_t k = 0;
    for (size_t i = 0; i < h->cap; i++) {
        if (i + KEYREF_PREFETCH < h->cap && h->slots[i + KEYREF_PREFETCH].key)
            __builtin_prefetch(h->slots[i + KEYREF_PREFETCH].key); /* keys are on the heap */
        if (SHOAL_HSLOT_LIVE(&h->slots[i])) {
            r[k].slot = &h->slots[i];
            keyref_chunk(&r[k++], 0);
        }
    }
    const keyref_t *sorted = keyref_sort(r, r + n, k, 0);
    order_remember(h, sorted, k);
    /* the answer goes into the same memory (one fewer large allocation to fault in on every
       encode): from the second half it cannot overlap; from the first, v[i] overwrites bytes of
       r[i / 3] or earlier, all read by then */
    shoal_hslot_t **v = (shoal_hslot_t **)(void *)r;
    for (size_t i = 0; i < k; i++) {
        shoal_hslot_t *sl = sorted[i].slot;
        v[i] = sl;
    }
    return shoal_realloc(v, n * sizeof *v);
}
