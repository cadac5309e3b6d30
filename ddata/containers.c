/*  containers.c — the sorted node map, the node table of encodings, and the byte-string
    hash map that the types share. */
#include "internal.h"

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
    memset(h, 0, sizeof *h);
}

static shoal_hslot_t *find_slot(const shoal_hmap_t *h, const void *key, size_t klen, uint64_t hash)
{
    if (!h->cap)
        return NULL;
    size_t mask = h->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        shoal_hslot_t *s = &h->slots[i];
        if (s->hash == 0)
            return NULL;
        if (s->hash == hash && s->key && s->klen == klen && memcmp(s->key, key, klen) == 0)
            return s;
    }
}

static void rehash(shoal_hmap_t *h, size_t ncap)
{
    shoal_hslot_t *old = h->slots;
    size_t ocap = h->cap;
    h->slots = shoal_calloc(ncap, sizeof *h->slots);
    h->cap = ncap;
    h->used = h->n;
    for (size_t i = 0; i < ocap; i++) {
        shoal_hslot_t *s = &old[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        size_t j = s->hash & (ncap - 1);
        while (h->slots[j].hash)
            j = (j + 1) & (ncap - 1);
        h->slots[j] = *s;
    }
    free(old);
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
    /* keep the load (live + deleted) under 3/4 */
    if ((h->used + 1) * 4 > h->cap * 3) {
        size_t ncap = h->cap ? h->cap : 8;
        while ((h->n + 1) * 2 > ncap)
            ncap *= 2;
        rehash(h, ncap);
    }
    size_t mask = h->cap - 1;
    size_t i = hash & mask;
    while (h->slots[i].hash)
        i = (i + 1) & mask;
    s = &h->slots[i];
    s->hash = hash;
    s->key = shoal_memdup(key, klen);
    s->klen = klen;
    s->value = NULL;
    h->n++;
    h->used++;
    *inserted = true;
    return s;
}

void *shoal_hmap_remove(shoal_hmap_t *h, const void *key, size_t klen)
{
    shoal_hslot_t *s = find_slot(h, key, klen, key_hash(key, klen));
    if (!s)
        return NULL;
    void *v = s->value;
    free(s->key);
    s->key = NULL; /* a tombstone: hash stays nonzero so probes continue */
    s->klen = 0;
    s->value = NULL;
    h->n--;
    return v;
}

static int slot_cmp(const void *a, const void *b)
{
    const shoal_hslot_t *x = *(shoal_hslot_t *const *)a, *y = *(shoal_hslot_t *const *)b;
    return shoal_bytes_cmp(x->key, x->klen, y->key, y->klen);
}

shoal_hslot_t **shoal_hmap_sorted(const shoal_hmap_t *h)
{
    shoal_hslot_t **v = shoal_malloc((h->n ? h->n : 1) * sizeof *v);
    size_t k = 0;
    for (size_t i = 0; i < h->cap; i++)
        if (SHOAL_HSLOT_LIVE(&h->slots[i]))
            v[k++] = &h->slots[i];
    qsort(v, k, sizeof *v, slot_cmp);
    return v;
}
