/*  orset.c — ORSet: observed-remove set of byte strings, add wins; and its delta, ORSetDelta.

    The optimized OR-Set (Bieniusa et al.) as a delta-state CRDT (Almeida, Shoker, Baquero).
    Every add of an element at node i makes a new dot (i, n), n one above the highest counter of
    i this replica has seen; the element's dots become {that dot} (the add supersedes the dots it
    observed). A causal context records every dot ever seen. A dot the context holds that no
    element carries was removed. Merge is the join of dot stores: a dot of an element survives
    when both sides carry it, or when one side carries it and the other has never seen it; so
    a remove only removes the adds it observed and a concurrent add wins.

    The context is EXACT: a compact version vector (every dot of node n up to vv[n]) plus a
    "dot cloud", the sorted dots above the vector with gaps, which is folded into the vector as
    soon as the gap closes. It never claims a dot it has not seen, so merge is the true join
    under any delivery order, any duplication. That is why ORSet deltas are NOT causal
    (delta_causal = false): an origin's delta #2 applied before its #1 leaves dot #1 outside the
    context (the cloud holds #2 above the gap), so #1 still applies when it arrives, and #1
    cannot resurrect what #2 removed because #2 carries the dots it saw removed. In-order
    delivery per origin only keeps the cloud empty. (A context of a version vector alone would
    have to claim #1 when absorbing #2, and would then drop #1's add: that design needs causal
    delivery.)

    A delta (ORSetDelta) maps each changed element to its dots and the dots it has seen removed
    ("seen"). Its causal context is the union of all of them, attributed to elements: a dot
    belongs to exactly one element, so applying a delta to a state only has to look at the
    elements in the delta (O(|delta|)): keep the state's dots of e that the delta has not seen
    removed, add the delta's dots of e the state has not seen, add all of the delta's dots to the
    state's context. Deltas join the same way per element, which makes delta groups: the pending
    delta of a set accumulates every mutation since the last take/reset.

    Pruning re-homes a removed node's dots by a plan (ddata.h, shoal_prune_plan_t): (removed, n)
    becomes (into, base + n - 1), in elements and in the context, the same way at the owner, at
    every other replica and in every delta, so a remove that saw the old dot covers the new one
    (Akka gives each element a fresh dot of `into`, which a concurrent remove of the old dot does
    not cover: the element came back). Without a plan, prune_cleanup drops whatever is left of
    the removed node (elements only it kept alive disappear).

    Re-created sets. Dots name adds, so within one set (and every earlier incarnation of it) no
    dot may name two adds: if (A, 1) named x on one replica and y on another, the merge would take
    each for an add the other side has seen removed and drop both. Counting from the set's own
    context (the highest counter of A it holds, plus one) guarantees that for a set that lives
    on, but not for an ORSet under a map key: the map drops the value with the key, and the set
    re-created under it would start again at (A, 1) while a replica that missed the removal still
    holds the old set. So a map marks the values it creates or decodes (it cannot know whether an
    earlier incarnation existed here: the key's removal may have come in a merge), and the first
    local add of node A to a marked set draws its dot above A's dot floor, the highest counter
    this process has issued for A (node_id.c; a restarted node has a new uid, so the floor
    covers A's whole incarnation), and claims every dot of A up to it in the set's context, as
    Pekko's version vector does. Claiming is safe: a dot of A this replica's set has not seen
    was issued for another set, or for an earlier incarnation of this one that a removal of the
    key observed here: a removed add. After that add the set is unmarked and counts on from its
    own context again, so a set that lives on keeps contiguous counters and an empty cloud. The
    claim is part of the set's state, not of an ORSetDelta (its dots belong to no element): the
    map ships that first change as the whole value instead (ormap.c). Dots in different sets
    never meet, so counters may repeat across sets; within one set's history they do not.

    Representation. Elements live in a byte-string hash map whose values are dot sets from a
    pool (no malloc per element beyond the key copy). A dot set holds two dots inline (one is
    the usual case, two the usual case after concurrent adds) and spills to the heap beyond.
    Dots are kept sorted by (node pointer, counter) in memory, which is fast and enough for set
    operations; the encoding sorts by node id, as canonical bytes need. Invariant of a full
    state: every dot of an element is in the context, and no element has zero dots. Every
    operation costs what its input costs: a local op or a small delta a few hash lookups, a
    merge O(|a| + |b|), a large delta O(|delta| log |delta|) even when its dots arrive far out
    of order.
*/
#include "internal.h"

/* ---------------------------------------------------------------------------------------------
 * Dots and small sorted dot sets
 */
typedef struct {
    const shoal_node_t *node;
    uint64_t counter;
} dot_t;

static inline int dot_cmp(dot_t a, dot_t b)
{
    uintptr_t x = (uintptr_t)a.node, y = (uintptr_t)b.node;
    if (x != y)
        return x < y ? -1 : 1;
    return a.counter < b.counter ? -1 : a.counter > b.counter;
}

/* Two dots inline: one is the usual case, two the usual case after concurrent adds. */
#define DS_INLINE 2

typedef struct {
    uint32_t n, cap; /* cap <= DS_INLINE: the dots are inline */
    union {
        dot_t inl[DS_INLINE];
        dot_t *heap;
    } u;
} dotset_t;

static inline dot_t *ds_dots(dotset_t *s)
{
    return s->cap > DS_INLINE ? s->u.heap : s->u.inl;
}

static inline const dot_t *ds_cdots(const dotset_t *s)
{
    return s->cap > DS_INLINE ? s->u.heap : s->u.inl;
}

static void ds_reserve(dotset_t *s, size_t need)
{
    if (need <= DS_INLINE || need <= s->cap)
        return;
    if (need > UINT32_MAX / 2)
        abort(); /* billions of dots on one element: not a state that can exist */
    uint32_t ncap = s->cap > DS_INLINE ? s->cap : 2 * DS_INLINE;
    while (ncap < need)
        ncap *= 2;
    if (s->cap > DS_INLINE) {
        s->u.heap = shoal_realloc(s->u.heap, ncap * sizeof(dot_t));
    } else {
        dot_t *h = shoal_malloc(ncap * sizeof(dot_t));
        memcpy(h, s->u.inl, s->n * sizeof(dot_t));
        s->u.heap = h;
    }
    s->cap = ncap;
}

static void ds_init(dotset_t *s)
{
    s->n = s->cap = 0;
}

static void ds_free(dotset_t *s)
{
    if (s->cap > DS_INLINE)
        free(s->u.heap);
    s->n = s->cap = 0;
}

/* d must not point into s. */
static void ds_assign(dotset_t *s, const dot_t *d, size_t n)
{
    ds_reserve(s, n);
    if (n)
        memcpy(ds_dots(s), d, n * sizeof *d);
    s->n = (uint32_t)n;
}

static bool dots_has(const dot_t *d, size_t n, dot_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = dot_cmp(d[mid], x);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static bool ds_equal(const dotset_t *a, const dotset_t *b)
{
    if (a->n != b->n)
        return false;
    const dot_t *x = ds_cdots(a), *y = ds_cdots(b);
    for (uint32_t i = 0; i < a->n; i++)
        if (x[i].node != y[i].node || x[i].counter != y[i].counter)
            return false;
    return true;
}

/* Sorts a few dots by (node pointer, counter): insertion sort, they are nearly always 1 or 2. */
static void dots_sort(dot_t *d, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        dot_t x = d[i];
        size_t j = i;
        while (j > 0 && dot_cmp(d[j - 1], x) > 0) {
            d[j] = d[j - 1];
            j--;
        }
        d[j] = x;
    }
}

/* A scratch vector of dots with room for a few on the stack. Not copyable. */
typedef struct {
    dot_t *d;
    size_t n, cap;
    dot_t inl[8];
} dotbuf_t;

static void db_init(dotbuf_t *b)
{
    b->d = b->inl;
    b->n = 0;
    b->cap = sizeof b->inl / sizeof b->inl[0];
}

static void db_push(dotbuf_t *b, dot_t d)
{
    if (b->n == b->cap) {
        size_t ncap = b->cap * 2;
        if (b->d == b->inl) {
            b->d = shoal_malloc(ncap * sizeof *b->d);
            memcpy(b->d, b->inl, b->n * sizeof *b->d);
        } else {
            b->d = shoal_realloc(b->d, ncap * sizeof *b->d);
        }
        b->cap = ncap;
    }
    b->d[b->n++] = d;
}

static void db_free(dotbuf_t *b)
{
    if (b->d != b->inl)
        free(b->d);
    db_init(b);
}

/* ---------------------------------------------------------------------------------------------
 * A pool of fixed-size entries (the map values): chunks that double in size, a free list.
 */
typedef struct pool_chunk {
    struct pool_chunk *next;
    void *pad; /* keeps the items 16-byte aligned */
} pool_chunk_t;

typedef struct {
    pool_chunk_t *chunks;
    void *free_list;
    char *bump, *end;
    size_t next_items;
} pool_t;

static void pool_add_chunk(pool_t *p, size_t size, size_t items)
{
    pool_chunk_t *c = shoal_malloc(sizeof *c + items * size);
    c->next = p->chunks;
    p->chunks = c;
    p->bump = (char *)(c + 1);
    p->end = p->bump + items * size;
}

static void *pool_alloc(pool_t *p, size_t size)
{
    if (p->free_list) {
        void *it = p->free_list;
        p->free_list = *(void **)it;
        return it;
    }
    if (!p->bump || (size_t)(p->end - p->bump) < size) {
        size_t items = p->next_items ? p->next_items : 4;
        pool_add_chunk(p, size, items);
        p->next_items = items < 4096 ? items * 2 : items;
    }
    void *it = p->bump;
    p->bump += size;
    return it;
}

/* Makes room for n more entries without further chunk allocations (decode, clone). The bump
   area may start as an entry inside the owner (not a chunk): pool_destroy frees chunks only. */
static void pool_reserve(pool_t *p, size_t size, size_t n)
{
    if (n == 0 || (p->bump && (size_t)(p->end - p->bump) >= n * size))
        return;
    pool_add_chunk(p, size, n);
}

static void pool_free(pool_t *p, void *it)
{
    *(void **)it = p->free_list;
    p->free_list = it;
}

static void pool_destroy(pool_t *p)
{
    while (p->chunks) {
        pool_chunk_t *c = p->chunks;
        p->chunks = c->next;
        free(c);
    }
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------------------------------------
 * Hash map helpers (the map's layout is in internal.h)
 */
/* Sizes an empty map for n entries, so that filling it never rehashes. */
static void hmap_presize(shoal_hmap_t *h, size_t n)
{
    if (h->index_cap || n < 8)
        return;
    shoal_hmap_reserve(h, n);
}

/* Removes the entry of a live slot found by iteration, without hashing the key again. */
static void hmap_kill(shoal_hmap_t *h, shoal_hslot_t *s)
{
    shoal_hmap_kill(h, s);
}

/* Live slots in canonical key order (an array the caller frees); the radix sort that makes
   this cheap for 100k keys lives with the map (containers.c). */
static shoal_hslot_t **sorted_slots(const shoal_hmap_t *h)
{
    return shoal_hmap_sorted(h);
}

static const void *elem_ptr(const void *elem)
{
    return elem ? elem : ""; /* the empty element may come as NULL; the map uses memcmp */
}

/* ---------------------------------------------------------------------------------------------
 * Causal context: version vector + dot cloud
 */
typedef struct {
    shoal_nodemap_t vv;
    dot_t *cloud; /* dots above vv with gaps, sorted by dot_cmp; never (n, vv[n] + 1) */
    size_t ncloud, capcloud;
} cc_t;

static void cc_free(cc_t *cc)
{
    shoal_nm_free(&cc->vv);
    free(cc->cloud);
    memset(cc, 0, sizeof *cc);
}

static void cc_copy(cc_t *dst, const cc_t *src)
{
    shoal_nm_copy(&dst->vv, &src->vv);
    dst->ncloud = 0;
    SHOAL_GROW(dst->cloud, dst->capcloud, src->ncloud);
    if (src->ncloud)
        memcpy(dst->cloud, src->cloud, src->ncloud * sizeof *src->cloud);
    dst->ncloud = src->ncloud;
}

static bool cc_equal(const cc_t *a, const cc_t *b)
{
    if (!shoal_nm_equal(&a->vv, &b->vv) || a->ncloud != b->ncloud)
        return false;
    for (size_t i = 0; i < a->ncloud; i++)
        if (dot_cmp(a->cloud[i], b->cloud[i]) != 0)
            return false;
    return true;
}

static bool cc_empty(const cc_t *cc)
{
    return cc->vv.n == 0 && cc->ncloud == 0;
}

/* Index of the first cloud dot >= d. */
static size_t cloud_lower_bound(const cc_t *cc, dot_t d)
{
    size_t lo = 0, hi = cc->ncloud;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (dot_cmp(cc->cloud[mid], d) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static inline bool cc_contains(const cc_t *cc, dot_t d)
{
    if (d.counter <= shoal_nm_get(&cc->vv, d.node))
        return true;
    if (!cc->ncloud)
        return false;
    size_t i = cloud_lower_bound(cc, d);
    return i < cc->ncloud && dot_cmp(cc->cloud[i], d) == 0;
}

static bool cc_has_node(const cc_t *cc, const shoal_node_t *node)
{
    if (shoal_nm_find(&cc->vv, node) >= 0)
        return true;
    for (size_t i = 0; i < cc->ncloud; i++)
        if (cc->cloud[i].node == node)
            return true;
    return false;
}

/* The highest counter of node seen. */
static uint64_t cc_max(const cc_t *cc, const shoal_node_t *node)
{
    uint64_t v = shoal_nm_get(&cc->vv, node);
    if (cc->ncloud) {
        size_t i = cloud_lower_bound(cc, (dot_t){node, UINT64_MAX});
        if (i < cc->ncloud && cc->cloud[i].node == node)
            return UINT64_MAX;
        if (i > 0 && cc->cloud[i - 1].node == node)
            return cc->cloud[i - 1].counter; /* cloud dots are above the vector */
    }
    return v;
}

static void cloud_remove_range(cc_t *cc, size_t from, size_t to)
{
    memmove(&cc->cloud[from], &cc->cloud[to], (cc->ncloud - to) * sizeof *cc->cloud);
    cc->ncloud -= to - from;
}

static void cc_add(cc_t *cc, dot_t d)
{
    ptrdiff_t i = shoal_nm_find(&cc->vv, d.node);
    uint64_t v = i >= 0 ? cc->vv.e[i].value : 0;
    if (d.counter <= v)
        return;
    if (d.counter != v + 1) { /* a gap below: into the cloud */
        size_t k = cloud_lower_bound(cc, d);
        if (k < cc->ncloud && dot_cmp(cc->cloud[k], d) == 0)
            return;
        SHOAL_GROW(cc->cloud, cc->capcloud, cc->ncloud + 1);
        memmove(&cc->cloud[k + 1], &cc->cloud[k], (cc->ncloud - k) * sizeof *cc->cloud);
        cc->cloud[k] = d;
        cc->ncloud++;
        return;
    }
    /* the vector grows by one, and absorbs the cloud dots that now continue it */
    uint64_t nv = d.counter;
    if (cc->ncloud) {
        size_t k = cloud_lower_bound(cc, (dot_t){d.node, 0});
        size_t j = k;
        while (j < cc->ncloud && cc->cloud[j].node == d.node && nv != UINT64_MAX &&
               cc->cloud[j].counter == nv + 1) {
            nv++;
            j++;
        }
        if (j > k)
            cloud_remove_range(cc, k, j);
    }
    if (i >= 0)
        cc->vv.e[i].value = nv;
    else
        shoal_nm_set(&cc->vv, d.node, nv);
}

/* Folds cloud dots at or just above the vector into it (after a union). */
static void cc_compact(cc_t *cc)
{
    size_t w = 0, i = 0;
    while (i < cc->ncloud) {
        const shoal_node_t *node = cc->cloud[i].node;
        uint64_t v0 = shoal_nm_get(&cc->vv, node), v = v0;
        for (; i < cc->ncloud && cc->cloud[i].node == node; i++) {
            uint64_t c = cc->cloud[i].counter;
            if (c <= v)
                continue;
            if (c == v + 1)
                v = c;
            else
                cc->cloud[w++] = cc->cloud[i];
        }
        if (v != v0)
            shoal_nm_set(&cc->vv, node, v);
    }
    cc->ncloud = w;
}

/* Adds n sorted distinct dots to the cloud (one merge of sorted arrays), then compacts. */
static void cc_cloud_union(cc_t *cc, const dot_t *add, size_t n)
{
    if (n) {
        dot_t *m = shoal_malloc((cc->ncloud + n) * sizeof *m);
        size_t i = 0, j = 0, k = 0;
        while (i < cc->ncloud || j < n) {
            int c = i == cc->ncloud ? 1 : j == n ? -1 : dot_cmp(cc->cloud[i], add[j]);
            if (c < 0)
                m[k++] = cc->cloud[i++];
            else if (c > 0)
                m[k++] = add[j++];
            else {
                m[k++] = cc->cloud[i++];
                j++;
            }
        }
        free(cc->cloud);
        cc->capcloud = cc->ncloud + n;
        cc->cloud = m;
        cc->ncloud = k;
    }
    if (cc->ncloud)
        cc_compact(cc);
}

static void cc_union(cc_t *dst, const cc_t *src)
{
    shoal_nm_merge_max(&dst->vv, &src->vv);
    cc_cloud_union(dst, src->cloud, src->ncloud);
}

static int dot_qcmp(const void *a, const void *b)
{
    return dot_cmp(*(const dot_t *)a, *(const dot_t *)b);
}

/* Adds dots in any order. One by one when they are few; many at once by sorting them first, so
   that a large delta arriving out of order (a clear, say, whose dots are in key order, not
   counter order) costs O(n log n) rather than a cloud insertion each. The array is reordered. */
static void cc_add_many(cc_t *cc, dot_t *d, size_t n)
{
    if (n <= 16) {
        for (size_t i = 0; i < n; i++)
            cc_add(cc, d[i]);
        return;
    }
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (d[i].counter > shoal_nm_get(&cc->vv, d[i].node))
            d[w++] = d[i];
    qsort(d, w, sizeof *d, dot_qcmp);
    size_t u = 0;
    for (size_t i = 0; i < w; i++)
        if (u == 0 || dot_cmp(d[u - 1], d[i]) != 0)
            d[u++] = d[i];
    cc_cloud_union(cc, d, u);
}

static void cc_remove_node(cc_t *cc, const shoal_node_t *node)
{
    shoal_nm_remove(&cc->vv, node);
    size_t w = 0;
    for (size_t i = 0; i < cc->ncloud; i++)
        if (cc->cloud[i].node != node)
            cc->cloud[w++] = cc->cloud[i];
    cc->ncloud = w;
}

/* ---------------------------------------------------------------------------------------------
 * The types
 */
typedef struct {
    dotset_t dots; /* the element's dots after the delta (empty: removed) */
    dotset_t seen; /* dots of the element the delta has seen removed; disjoint from dots */
} dentry_t;

typedef struct {
    shoal_crdt_t base;
    shoal_hmap_t elems; /* element -> dentry_t * (from pool) */
    pool_t pool;
    dentry_t first; /* the pool's first entry: most deltas have one element */
} orset_delta_t;

typedef struct {
    shoal_crdt_t base;
    shoal_hmap_t elems; /* element -> dotset_t * (from pool), never empty */
    pool_t pool;
    cc_t cc;
    orset_delta_t *delta; /* mutations since the last take/reset, or NULL */
    bool recreated;       /* a map's value: next local add draws above the floor (top of file) */
} orset_t;

#define OS(x)  ((orset_t *)(x))
#define COS(x) ((const orset_t *)(x))
#define DL(x)  ((orset_delta_t *)(x))
#define CDL(x) ((const orset_delta_t *)(x))

/* ---------------------------------------------------------------------------------------------
 * ORSetDelta
 */
static shoal_crdt_t *dl_create(void)
{
    orset_delta_t *d = shoal_calloc(1, sizeof *d);
    d->base.type = &shoal_type_orset_delta;
    d->pool.bump = (char *)&d->first;
    d->pool.end = d->pool.bump + sizeof d->first;
    return &d->base;
}

static dentry_t *dl_entry_new(orset_delta_t *d)
{
    dentry_t *e = pool_alloc(&d->pool, sizeof *e);
    ds_init(&e->dots);
    ds_init(&e->seen);
    return e;
}

static void dl_destroy(shoal_crdt_t *self)
{
    orset_delta_t *d = DL(self);
    for (size_t i = 0; i < d->elems.cap; i++) {
        shoal_hslot_t *s = &d->elems.slots[i];
        if (SHOAL_HSLOT_LIVE(s)) {
            dentry_t *e = s->value;
            ds_free(&e->dots);
            ds_free(&e->seen);
        }
    }
    shoal_hmap_free(&d->elems);
    pool_destroy(&d->pool);
    free(d);
}

static shoal_crdt_t *dl_clone(const shoal_crdt_t *self)
{
    const orset_delta_t *src = CDL(self);
    orset_delta_t *d = DL(dl_create());
    hmap_presize(&d->elems, src->elems.n);
    pool_reserve(&d->pool, sizeof(dentry_t), src->elems.n);
    for (size_t i = 0; i < src->elems.cap; i++) {
        const shoal_hslot_t *s = &src->elems.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        const dentry_t *se = s->value;
        bool inserted;
        shoal_hslot_t *t = shoal_hmap_upsert(&d->elems, s->key, s->klen, &inserted);
        dentry_t *e = dl_entry_new(d);
        ds_assign(&e->dots, ds_cdots(&se->dots), se->dots.n);
        ds_assign(&e->seen, ds_cdots(&se->seen), se->seen.n);
        t->value = e;
    }
    return &d->base;
}

/* Position of x in a sorted set (true if there), or where it would go. */
static bool ds_find(const dotset_t *s, dot_t x, size_t *pos)
{
    const dot_t *d = ds_cdots(s);
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = dot_cmp(d[mid], x);
        if (c == 0) {
            *pos = mid;
            return true;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *pos = lo;
    return false;
}

static void ds_insert_at(dotset_t *s, size_t pos, dot_t x)
{
    ds_reserve(s, s->n + 1u);
    dot_t *d = ds_dots(s);
    memmove(&d[pos + 1], &d[pos], (s->n - pos) * sizeof *d);
    d[pos] = x;
    s->n++;
}

static void ds_remove_at(dotset_t *s, size_t pos)
{
    dot_t *d = ds_dots(s);
    memmove(&d[pos], &d[pos + 1], (s->n - pos - 1) * sizeof *d);
    s->n--;
}

/* Joins (bd, bs) into entry e: the dots survive that both carry, or that one carries and the
   other has not seen (a side's context for the element = its dots ∪ its seen); seen becomes
   every other dot either side knows of. Both sides have dots and seen disjoint. */
static void dentry_join(dentry_t *e, const dot_t *bd, size_t nbd, const dot_t *bs, size_t nbs)
{
    if (e->dots.n == 0 && e->seen.n == 0) {
        ds_assign(&e->dots, bd, nbd);
        ds_assign(&e->seen, bs, nbs);
        return;
    }
    if (nbd + nbs <= 4) {
        /* A small b (one mutation) edits e in place, so that a key updated over and over within
           one delta group costs O(log seen) per update rather than a copy of its seen dots.
           b's seen: a dot e carries is now seen removed; a dot e had not heard of is seen too.
           b's dots: kept unless e has seen it removed (then it stays in e's seen). */
        for (size_t k = 0; k < nbs; k++) {
            size_t pos;
            if (ds_find(&e->dots, bs[k], &pos))
                ds_remove_at(&e->dots, pos);
            if (!ds_find(&e->seen, bs[k], &pos))
                ds_insert_at(&e->seen, pos, bs[k]);
        }
        for (size_t k = 0; k < nbd; k++) {
            size_t pos;
            if (!ds_find(&e->seen, bd[k], &pos) && !ds_find(&e->dots, bd[k], &pos))
                ds_insert_at(&e->dots, pos, bd[k]);
        }
        return;
    }
    /* otherwise one walk over the four sorted arrays */
    const dot_t *ad = ds_cdots(&e->dots), *as = ds_cdots(&e->seen);
    size_t nad = e->dots.n, nas = e->seen.n;
    size_t i = 0, j = 0, k = 0, l = 0;
    dotbuf_t dots, seen;
    db_init(&dots);
    db_init(&seen);
    for (;;) {
        const dot_t *m = NULL;
        if (i < nad)
            m = &ad[i];
        if (j < nas && (!m || dot_cmp(as[j], *m) < 0))
            m = &as[j];
        if (k < nbd && (!m || dot_cmp(bd[k], *m) < 0))
            m = &bd[k];
        if (l < nbs && (!m || dot_cmp(bs[l], *m) < 0))
            m = &bs[l];
        if (!m)
            break;
        dot_t x = *m;
        bool a = i < nad && dot_cmp(ad[i], x) == 0;
        bool sa = j < nas && dot_cmp(as[j], x) == 0;
        bool b = k < nbd && dot_cmp(bd[k], x) == 0;
        bool sb = l < nbs && dot_cmp(bs[l], x) == 0;
        i += a;
        j += sa;
        k += b;
        l += sb;
        bool ca = a || sa, cb = b || sb;
        if ((a && b) || (a && !cb) || (b && !ca))
            db_push(&dots, x);
        else
            db_push(&seen, x);
    }
    ds_assign(&e->dots, dots.d, dots.n);
    ds_assign(&e->seen, seen.d, seen.n);
    db_free(&dots);
    db_free(&seen);
}

/* Adds (dots, seen) for one element to delta d (a delta group). */
static void dl_record(orset_delta_t *d, const void *elem, size_t len, const dot_t *dots,
                      size_t ndots, const dot_t *seen, size_t nseen)
{
    bool inserted;
    shoal_hslot_t *s = shoal_hmap_upsert(&d->elems, elem, len, &inserted);
    if (inserted)
        s->value = dl_entry_new(d);
    dentry_join(s->value, dots, ndots, seen, nseen);
}

static int dl_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    orset_delta_t *d = DL(self);
    const shoal_hmap_t *h = &CDL(other)->elems;
    for (size_t i = 0; i < h->cap; i++) {
        const shoal_hslot_t *s = &h->slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        const dentry_t *e = s->value;
        dl_record(d, s->key, s->klen, ds_cdots(&e->dots), e->dots.n, ds_cdots(&e->seen), e->seen.n);
    }
    return 0;
}

static bool dl_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    const shoal_hmap_t *x = &CDL(a)->elems, *y = &CDL(b)->elems;
    if (x->n != y->n)
        return false;
    for (size_t i = 0; i < x->cap; i++) {
        const shoal_hslot_t *s = &x->slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        const dentry_t *ea = s->value, *eb = shoal_hmap_get(y, s->key, s->klen);
        if (!eb || !ds_equal(&ea->dots, &eb->dots) || !ds_equal(&ea->seen, &eb->seen))
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * ORSet: life cycle, queries
 */
static shoal_crdt_t *os_create(void)
{
    orset_t *s = shoal_calloc(1, sizeof *s);
    s->base.type = &shoal_type_orset;
    return &s->base;
}

shoal_crdt_t *shoal_orset_new(void)
{
    return os_create();
}

static dotset_t *os_entry_new(orset_t *s)
{
    dotset_t *e = pool_alloc(&s->pool, sizeof *e);
    ds_init(e);
    return e;
}

static void os_entry_free(orset_t *s, dotset_t *e)
{
    ds_free(e);
    pool_free(&s->pool, e);
}

static void os_free_elems(orset_t *s)
{
    for (size_t i = 0; i < s->elems.cap; i++) {
        shoal_hslot_t *sl = &s->elems.slots[i];
        if (SHOAL_HSLOT_LIVE(sl))
            ds_free(sl->value);
    }
    shoal_hmap_free(&s->elems);
    pool_destroy(&s->pool);
}

static void os_destroy(shoal_crdt_t *self)
{
    orset_t *s = OS(self);
    if (s->delta)
        dl_destroy(&s->delta->base);
    os_free_elems(s);
    cc_free(&s->cc);
    free(s);
}

static shoal_crdt_t *os_clone(const shoal_crdt_t *self)
{
    const orset_t *src = COS(self);
    orset_t *s = OS(os_create());
    hmap_presize(&s->elems, src->elems.n);
    pool_reserve(&s->pool, sizeof(dotset_t), src->elems.n);
    for (size_t i = 0; i < src->elems.cap; i++) {
        const shoal_hslot_t *sl = &src->elems.slots[i];
        if (!SHOAL_HSLOT_LIVE(sl))
            continue;
        bool inserted;
        shoal_hslot_t *t = shoal_hmap_upsert(&s->elems, sl->key, sl->klen, &inserted);
        dotset_t *e = os_entry_new(s);
        const dotset_t *se = sl->value;
        ds_assign(e, ds_cdots(se), se->n);
        t->value = e;
    }
    cc_copy(&s->cc, &src->cc);
    if (src->delta)
        s->delta = DL(dl_clone(&src->delta->base));
    s->recreated = src->recreated;
    return &s->base;
}

void shoal_orset_mark_recreated(shoal_crdt_t *set)
{
    if (shoal_is(set, &shoal_type_orset))
        OS(set)->recreated = true;
}

bool shoal_orset_recreated(const shoal_crdt_t *set)
{
    return shoal_is(set, &shoal_type_orset) && COS(set)->recreated;
}

/* Claims every dot of node up to `upto` (the vector absorbs the cloud's dots below it). */
static void cc_claim(cc_t *cc, const shoal_node_t *node, uint64_t upto)
{
    if (shoal_nm_get(&cc->vv, node) >= upto)
        return;
    shoal_nm_set(&cc->vv, node, upto);
    if (cc->ncloud)
        cc_compact(cc);
}

bool shoal_orset_contains(const shoal_crdt_t *s, const void *elem, size_t len)
{
    if (!shoal_is(s, &shoal_type_orset) || (!elem && len))
        return false;
    return shoal_hmap_get(&COS(s)->elems, elem_ptr(elem), len) != NULL;
}

size_t shoal_orset_size(const shoal_crdt_t *s)
{
    return shoal_is(s, &shoal_type_orset) ? COS(s)->elems.n : 0;
}

int shoal_orset_foreach(const shoal_crdt_t *s, shoal_elem_fn *fn, void *arg)
{
    if (!shoal_is(s, &shoal_type_orset))
        return SHOAL_ETYPE;
    if (!fn)
        return SHOAL_EINVAL;
    const shoal_hmap_t *h = &COS(s)->elems;
    if (h->n == 0)
        return 0;
    /* fn must not change the set: the sorted slots point into its map */
    shoal_hslot_t **sorted = sorted_slots(h);
    size_t n = h->n;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = fn(sorted[i]->key, sorted[i]->klen, arg);
    free(sorted);
    return rc;
}

static bool os_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    const orset_t *x = COS(a), *y = COS(b);
    if (x->elems.n != y->elems.n || !cc_equal(&x->cc, &y->cc))
        return false;
    for (size_t i = 0; i < x->elems.cap; i++) {
        const shoal_hslot_t *s = &x->elems.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        const dotset_t *eb = shoal_hmap_get(&y->elems, s->key, s->klen);
        if (!eb || !ds_equal(s->value, eb))
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * ORSet: mutations
 */
static void os_record(orset_t *s, const void *elem, size_t len, const dot_t *dots, size_t ndots,
                      const dot_t *seen, size_t nseen)
{
    if (!s->delta)
        s->delta = DL(dl_create());
    dl_record(s->delta, elem, len, dots, ndots, seen, nseen);
}

int shoal_orset_add(shoal_crdt_t *set, const shoal_node_t *self, const void *elem, size_t len)
{
    if (!shoal_is(set, &shoal_type_orset))
        return SHOAL_ETYPE;
    if (!self || (!elem && len))
        return SHOAL_EINVAL;
    elem = elem_ptr(elem);
    orset_t *s = OS(set);
    uint64_t max = cc_max(&s->cc, self);
    if (s->recreated) { /* above every dot of self an earlier incarnation could carry */
        uint64_t floor = shoal_node_dot_floor(self);
        /* a floor at the very top (only hostile or corrupt data holds such a counter of this
           node) would fail every re-created set's adds: those count from their own context */
        if (floor > max && floor < UINT64_MAX)
            max = floor;
    }
    if (max == UINT64_MAX)
        return SHOAL_EOVERFLOW;
    dot_t d = {self, max + 1};
    bool inserted;
    shoal_hslot_t *slot = shoal_hmap_upsert(&s->elems, elem, len, &inserted);
    dotset_t *e;
    if (inserted) {
        e = os_entry_new(s);
        slot->value = e;
    } else {
        e = slot->value;
    }
    /* the add supersedes the dots it observed: the delta carries them as seen */
    os_record(s, elem, len, &d, 1, ds_cdots(e), e->n);
    ds_reserve(e, 1);
    ds_dots(e)[0] = d;
    e->n = 1;
    if (s->recreated) {
        cc_claim(&s->cc, self, d.counter);
        s->recreated = false;
    } else {
        cc_add(&s->cc, d);
    }
    shoal_node_dot_witness(self, d.counter);
    return 0;
}

int shoal_orset_remove(shoal_crdt_t *set, const shoal_node_t *self, const void *elem, size_t len)
{
    if (!shoal_is(set, &shoal_type_orset))
        return SHOAL_ETYPE;
    if (!self || (!elem && len))
        return SHOAL_EINVAL;
    elem = elem_ptr(elem);
    orset_t *s = OS(set);
    dotset_t *e = shoal_hmap_remove(&s->elems, elem, len);
    if (!e)
        return SHOAL_ENOTFOUND;
    /* its dots stay in the context: that is what removes them everywhere */
    os_record(s, elem, len, NULL, 0, ds_cdots(e), e->n);
    os_entry_free(s, e);
    return 0;
}

int shoal_orset_clear(shoal_crdt_t *set, const shoal_node_t *self)
{
    if (!shoal_is(set, &shoal_type_orset))
        return SHOAL_ETYPE;
    if (!self)
        return SHOAL_EINVAL;
    orset_t *s = OS(set);
    if (s->elems.n == 0)
        return 0;
    if (!s->delta)
        s->delta = DL(dl_create());
    hmap_presize(&s->delta->elems, s->elems.n);
    for (size_t i = 0; i < s->elems.cap; i++) {
        shoal_hslot_t *sl = &s->elems.slots[i];
        if (!SHOAL_HSLOT_LIVE(sl))
            continue;
        const dotset_t *e = sl->value;
        dl_record(s->delta, sl->key, sl->klen, NULL, 0, ds_cdots(e), e->n);
    }
    os_free_elems(s);
    return 0;
}

static const shoal_crdt_t *os_delta(const shoal_crdt_t *self)
{
    return COS(self)->delta ? &COS(self)->delta->base : NULL;
}

static shoal_crdt_t *os_take_delta(shoal_crdt_t *self)
{
    orset_delta_t *d = OS(self)->delta;
    OS(self)->delta = NULL;
    return d ? &d->base : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * ORSet: merge (full state) and merge_delta
 */
static int os_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    orset_t *a = OS(self);
    const orset_t *b = COS(other);
    dotbuf_t tmp;
    db_init(&tmp);
    /* Elements of a: the join of both dot sets (or a's dots that b has not seen). */
    shoal_hmap_t *h = &a->elems;
    size_t found = 0; /* elements of b met there */
    for (size_t i = 0; i < h->cap; i++) {
        shoal_hslot_t *sl = &h->slots[i];
        if (!SHOAL_HSLOT_LIVE(sl))
            continue;
        dotset_t *ea = sl->value;
        const dotset_t *eb = shoal_hmap_get(&b->elems, sl->key, sl->klen);
        found += eb != NULL;
        const dot_t *x = ds_cdots(ea), *y = eb ? ds_cdots(eb) : NULL;
        size_t nx = ea->n, ny = eb ? eb->n : 0, p = 0, q = 0;
        tmp.n = 0;
        while (p < nx || q < ny) {
            int c = q == ny ? -1 : p == nx ? 1 : dot_cmp(x[p], y[q]);
            if (c < 0) {
                if (!cc_contains(&b->cc, x[p]))
                    db_push(&tmp, x[p]);
                p++;
            } else if (c > 0) {
                if (!cc_contains(&a->cc, y[q]))
                    db_push(&tmp, y[q]);
                q++;
            } else {
                db_push(&tmp, x[p]);
                p++;
                q++;
            }
        }
        if (tmp.n == 0) {
            os_entry_free(a, ea);
            hmap_kill(h, sl);
        } else if (tmp.n != nx || memcmp(tmp.d, x, nx * sizeof *x) != 0) {
            ds_assign(ea, tmp.d, tmp.n);
        }
    }
    /* Elements only b has: its dots that a has not seen. (An element both have was joined above;
       its dots that a has not seen are then in a already, so an element found in a is done.) */
    const shoal_hmap_t *hb = &b->elems;
    for (size_t i = 0; found < hb->n && i < hb->cap; i++) {
        const shoal_hslot_t *sl = &hb->slots[i];
        if (!SHOAL_HSLOT_LIVE(sl))
            continue;
        const dotset_t *eb = sl->value;
        const dot_t *y = ds_cdots(eb);
        tmp.n = 0;
        for (uint32_t q = 0; q < eb->n; q++)
            if (!cc_contains(&a->cc, y[q]))
                db_push(&tmp, y[q]);
        if (tmp.n == 0)
            continue;
        bool inserted;
        shoal_hslot_t *t = shoal_hmap_upsert(h, sl->key, sl->klen, &inserted);
        if (!inserted)
            continue;
        dotset_t *e = os_entry_new(a);
        ds_assign(e, tmp.d, tmp.n);
        t->value = e;
    }
    db_free(&tmp);
    cc_union(&a->cc, &b->cc);
    return 0;
}

static int os_merge_delta(shoal_crdt_t *self, const shoal_crdt_t *delta)
{
    orset_t *s = OS(self);
    const shoal_hmap_t *hd = &CDL(delta)->elems;
    dotbuf_t tmp, seen_all;
    db_init(&tmp);
    db_init(&seen_all);
    for (size_t i = 0; i < hd->cap; i++) {
        const shoal_hslot_t *sl = &hd->slots[i];
        if (!SHOAL_HSLOT_LIVE(sl))
            continue;
        const dentry_t *de = sl->value;
        const dot_t *dd = ds_cdots(&de->dots), *dseen = ds_cdots(&de->seen);
        size_t ndd = de->dots.n, nseen = de->seen.n;
        dotset_t *es = shoal_hmap_get(&s->elems, sl->key, sl->klen);
        const dot_t *x = es ? ds_cdots(es) : NULL;
        size_t nx = es ? es->n : 0, p = 0, q = 0;
        /* The delta's context for this element is exactly dots ∪ seen (a dot belongs to one
           element): keep the state's dots the delta has not seen removed, take the delta's
           dots the state has not seen. */
        tmp.n = 0;
        while (p < nx || q < ndd) {
            int c = q == ndd ? -1 : p == nx ? 1 : dot_cmp(x[p], dd[q]);
            if (c < 0) {
                if (!dots_has(dseen, nseen, x[p]))
                    db_push(&tmp, x[p]);
                p++;
            } else if (c > 0) {
                if (!cc_contains(&s->cc, dd[q]))
                    db_push(&tmp, dd[q]);
                q++;
            } else {
                db_push(&tmp, x[p]);
                p++;
                q++;
            }
        }
        if (tmp.n == 0) {
            if (es)
                os_entry_free(s, shoal_hmap_remove(&s->elems, sl->key, sl->klen));
        } else if (!es) {
            bool inserted;
            shoal_hslot_t *t = shoal_hmap_upsert(&s->elems, sl->key, sl->klen, &inserted);
            es = os_entry_new(s);
            ds_assign(es, tmp.d, tmp.n);
            t->value = es;
        } else if (tmp.n != nx || memcmp(tmp.d, x, nx * sizeof *x) != 0) {
            ds_assign(es, tmp.d, tmp.n);
        }
        /* the context takes every dot of the delta, once all elements are done (a dot belongs
           to one element: adding it earlier would change nothing for the others) */
        for (size_t k = 0; k < ndd; k++)
            db_push(&seen_all, dd[k]);
        for (size_t k = 0; k < nseen; k++)
            db_push(&seen_all, dseen[k]);
    }
    cc_add_many(&s->cc, seen_all.d, seen_all.n);
    db_free(&seen_all);
    db_free(&tmp);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Encoding
 */
/* Node pointer -> index in the node table: open addressing on the pointer. */
typedef struct {
    const shoal_node_t **keys;
    uint32_t *idx;
    size_t mask;
    const shoal_node_t **list; /* distinct nodes, in insertion order, then sorted */
    size_t n, cap;
} nodeix_t;

static void nx_init(nodeix_t *x, size_t expect)
{
    size_t cap = 16;
    while (cap < 2 * expect)
        cap *= 2;
    x->keys = shoal_calloc(cap, sizeof *x->keys);
    x->idx = shoal_malloc(cap * sizeof *x->idx);
    x->mask = cap - 1;
    x->list = NULL;
    x->n = x->cap = 0;
}

static inline size_t nx_slot(const nodeix_t *x, const shoal_node_t *node)
{
    size_t i = (size_t)(((uint64_t)(uintptr_t)node * 0x9e3779b97f4a7c15ull) >> 32) & x->mask;
    while (x->keys[i] && x->keys[i] != node)
        i = (i + 1) & x->mask;
    return i;
}

static void nx_grow(nodeix_t *x)
{
    const shoal_node_t **ok = x->keys;
    uint32_t *oi = x->idx;
    size_t ocap = x->mask + 1;
    x->keys = shoal_calloc(ocap * 2, sizeof *x->keys);
    x->idx = shoal_malloc(ocap * 2 * sizeof *x->idx);
    x->mask = ocap * 2 - 1;
    for (size_t i = 0; i < ocap; i++)
        if (ok[i]) {
            size_t j = nx_slot(x, ok[i]);
            x->keys[j] = ok[i];
            x->idx[j] = oi[i];
        }
    free(ok);
    free(oi);
}

static void nx_add(nodeix_t *x, const shoal_node_t *node)
{
    size_t i = nx_slot(x, node);
    if (x->keys[i])
        return;
    if ((x->n + 1) * 2 > x->mask + 1) {
        nx_grow(x);
        i = nx_slot(x, node);
    }
    x->keys[i] = node;
    x->idx[i] = (uint32_t)x->n;
    SHOAL_GROW(x->list, x->cap, x->n + 1);
    x->list[x->n++] = node;
}

static int node_ptr_cmp(const void *a, const void *b)
{
    return shoal_node_cmp(*(const shoal_node_t *const *)a, *(const shoal_node_t *const *)b);
}

/* Sorts the distinct nodes by id and numbers them: the canonical node table. */
static void nx_finish(nodeix_t *x)
{
    if (x->n > 1)
        qsort(x->list, x->n, sizeof *x->list, node_ptr_cmp);
    for (size_t k = 0; k < x->n; k++)
        x->idx[nx_slot(x, x->list[k])] = (uint32_t)k;
}

static inline uint32_t nx_index(const nodeix_t *x, const shoal_node_t *node)
{
    return x->idx[nx_slot(x, node)];
}

static void nx_free(nodeix_t *x)
{
    free(x->keys);
    free(x->idx);
    free(x->list);
}

/* A dot as encoded: (node index, counter), the canonical order. */
typedef struct {
    uint32_t node;
    uint64_t counter;
} edot_t;

static int edot_cmp(const void *a, const void *b)
{
    const edot_t *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    return x->counter < y->counter ? -1 : x->counter > y->counter;
}

/* A dot set's dots as (node index, counter) in canonical order: in `small` when they fit,
   else in an allocation the caller frees (the result is not small). */
static edot_t *sorted_edots(const nodeix_t *x, const dotset_t *ds, edot_t small[8])
{
    const dot_t *d = ds_cdots(ds);
    edot_t *e = ds->n <= 8 ? small : shoal_malloc(ds->n * sizeof *e);
    for (uint32_t k = 0; k < ds->n; k++)
        e[k] = (edot_t){nx_index(x, d[k].node), d[k].counter};
    if (ds->n > 1)
        qsort(e, ds->n, sizeof *e, edot_cmp);
    return e;
}

/* Appends a dot set in canonical order to the packed arrays at *pos. */
static void put_dots(const nodeix_t *x, const dotset_t *ds, uint32_t *nodes, uint64_t *counters,
                     size_t *pos)
{
    edot_t small[8], *e = sorted_edots(x, ds, small);
    for (uint32_t k = 0; k < ds->n; k++) {
        nodes[*pos + k] = e[k].node;
        counters[*pos + k] = e[k].counter;
    }
    if (e != small)
        free(e);
    *pos += ds->n;
}

static void put_nodes(const nodeix_t *x, Shoal__Ddata__ORSet *msg)
{
    msg->n_nodes = x->n;
    msg->nodes = shoal_malloc((x->n ? x->n : 1) * sizeof *msg->nodes);
    for (size_t k = 0; k < x->n; k++)
        msg->nodes[k] = (char *)shoal_node_id(x->list[k]);
}

/* A full state is written straight in protobuf's wire format rather than through protobuf-c:
   the bytes are those protobuf-c packs from the ORSet message (fields in number order, minimal
   varints, empty repeated fields left out: the canonical form digests depend on, which every
   round trip of the property tests checks, assert_protobuf_canonical in test/common/prop.c),
   without its arrays of 100k pointers and lengths, and in one pass over the elements whose
   result is copied, not a sizing pass and a packing pass. */

/* Room for up to n more varints in a buffer written through a raw pointer. */
static uint8_t *varints_at(shoal_buf_t *b, size_t n, size_t width)
{
    shoal_buf_reserve(b, n * width);
    return b->data + b->len;
}

/* Appends a dot set's dots in canonical order, as varints of node indices and of counters. */
static void put_dot_varints(const nodeix_t *x, const dotset_t *ds, uint8_t **nodes,
                            uint8_t **counters)
{
    if (ds->n == 1) { /* most elements: one dot (without this path orset_encode_100k: +10%) */
        const dot_t *d = ds_cdots(ds);
        *nodes += shoal_varint_put(*nodes, nx_index(x, d[0].node));
        *counters += shoal_varint_put(*counters, d[0].counter);
        return;
    }
    edot_t small[8], *e = sorted_edots(x, ds, small);
    for (uint32_t k = 0; k < ds->n; k++) {
        *nodes += shoal_varint_put(*nodes, e[k].node);
        *counters += shoal_varint_put(*counters, e[k].counter);
    }
    if (e != small)
        free(e);
}

/* The size on the wire of a length-delimited field (a one-byte tag) holding len bytes; 0 for an
   empty packed field, which protobuf leaves out. */
static size_t packed_size(size_t len)
{
    return len ? 1 + shoal_varint_len(len) + len : 0;
}

static void put_packed(shoal_buf_t *out, uint32_t field, const shoal_buf_t *b)
{
    if (!b->len)
        return;
    shoal_buf_append_varint(out, (uint64_t)field << 3 | 2);
    shoal_buf_append_varint(out, b->len);
    shoal_buf_append(out, b->data, b->len);
}

static int os_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const orset_t *s = COS(self);
    const cc_t *cc = &s->cc;

    /* every dot of an element is in the context, so its nodes are the whole table (the
       elements' dots are added too, which costs little and keeps the encoder total) */
    const shoal_hmap_t *h = &s->elems;
    size_t n = h->n, total = 0;
    shoal_hslot_t **sorted = sorted_slots(h);
    nodeix_t x;
    nx_init(&x, cc->vv.n + 4);
    for (size_t k = 0; k < cc->vv.n; k++)
        nx_add(&x, cc->vv.e[k].node);
    for (size_t k = 0; k < cc->ncloud; k++)
        nx_add(&x, cc->cloud[k].node);
    const shoal_node_t *last = NULL;
    for (size_t k = 0; k < n; k++) {
        const dotset_t *e = sorted[k]->value;
        const dot_t *d = ds_cdots(e);
        for (uint32_t j = 0; j < e->n; j++)
            if (d[j].node != last)
                nx_add(&x, last = d[j].node);
        total += e->n;
    }
    nx_finish(&x);

    /* 2: the causal context, a message of four packed fields */
    shoal_buf_t ctx = {0};
    if (!cc_empty(cc)) {
        shoal_buf_t f[4] = {{0}};
        uint8_t *vn = varints_at(&f[0], cc->vv.n, 5), *vc = varints_at(&f[1], cc->vv.n, 10);
        for (size_t k = 0; k < cc->vv.n; k++) { /* the vector is in node id order already */
            vn += shoal_varint_put(vn, nx_index(&x, cc->vv.e[k].node));
            vc += shoal_varint_put(vc, cc->vv.e[k].value);
        }
        f[0].len = (size_t)(vn - f[0].data);
        f[1].len = (size_t)(vc - f[1].data);
        size_t nc = cc->ncloud;
        edot_t *cloud = shoal_malloc((nc ? nc : 1) * sizeof *cloud);
        for (size_t k = 0; k < nc; k++)
            cloud[k] = (edot_t){nx_index(&x, cc->cloud[k].node), cc->cloud[k].counter};
        qsort(cloud, nc, sizeof *cloud, edot_cmp);
        uint8_t *cn = varints_at(&f[2], nc, 5), *ck = varints_at(&f[3], nc, 10);
        for (size_t k = 0; k < nc; k++) {
            cn += shoal_varint_put(cn, cloud[k].node);
            ck += shoal_varint_put(ck, cloud[k].counter);
        }
        f[2].len = (size_t)(cn - f[2].data);
        f[3].len = (size_t)(ck - f[3].data);
        free(cloud);
        for (uint32_t k = 0; k < 4; k++) {
            put_packed(&ctx, k + 1, &f[k]);
            shoal_buf_free(&f[k]);
        }
    }

    /* 4, 5, 6: per element its dot count, then the dots flattened */
    shoal_buf_t counts = {0}, dnodes = {0}, dcounters = {0};
    uint8_t *pc = varints_at(&counts, n, 5), *pn = varints_at(&dnodes, total, 5),
            *pk = varints_at(&dcounters, total, 10);
    size_t elements_size = 0;
    for (size_t k = 0; k < n; k++) {
        const dotset_t *e = sorted[k]->value;
        elements_size += 1 + shoal_varint_len(sorted[k]->klen) + sorted[k]->klen;
        pc += shoal_varint_put(pc, e->n);
        put_dot_varints(&x, e, &pn, &pk);
    }
    counts.len = (size_t)(pc - counts.data);
    dnodes.len = (size_t)(pn - dnodes.data);
    dcounters.len = (size_t)(pk - dcounters.data);

    size_t nodes_size = 0;
    for (size_t k = 0; k < x.n; k++) {
        size_t len = strlen(shoal_node_id(x.list[k]));
        nodes_size += 1 + shoal_varint_len(len) + len;
    }
    shoal_buf_reserve(out, nodes_size + (ctx.len ? packed_size(ctx.len) : 0) + elements_size +
                               packed_size(counts.len) + packed_size(dnodes.len) +
                               packed_size(dcounters.len));
    for (size_t k = 0; k < x.n; k++) { /* 1: the node table */
        const char *id = shoal_node_id(x.list[k]);
        size_t len = strlen(id);
        shoal_buf_append_varint(out, 1 << 3 | 2);
        shoal_buf_append_varint(out, len);
        shoal_buf_append(out, id, len);
    }
    put_packed(out, 2, &ctx);
    uint8_t *w = out->data + out->len; /* 3: the elements, in the room reserved above */
    for (size_t k = 0; k < n; k++) {
        *w++ = 3 << 3 | 2;
        w += shoal_varint_put(w, sorted[k]->klen);
        if (sorted[k]->klen)
            memcpy(w, sorted[k]->key, sorted[k]->klen);
        w += sorted[k]->klen;
    }
    out->len = (size_t)(w - out->data);
    put_packed(out, 4, &counts);
    put_packed(out, 5, &dnodes);
    put_packed(out, 6, &dcounters);

    free(sorted);
    shoal_buf_free(&ctx);
    shoal_buf_free(&counts);
    shoal_buf_free(&dnodes);
    shoal_buf_free(&dcounters);
    nx_free(&x);
    return 0;
}

static int dl_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const shoal_hmap_t *h = &CDL(self)->elems;
    Shoal__Ddata__ORSet msg = SHOAL__DDATA__ORSET__INIT;
    size_t n = h->n, ndots = 0, nseen = 0;
    shoal_hslot_t **sorted = sorted_slots(h);
    nodeix_t x;
    nx_init(&x, 4);
    for (size_t k = 0; k < n; k++) {
        const dentry_t *e = sorted[k]->value;
        const dot_t *d = ds_cdots(&e->dots), *sn = ds_cdots(&e->seen);
        for (uint32_t j = 0; j < e->dots.n; j++)
            nx_add(&x, d[j].node);
        for (uint32_t j = 0; j < e->seen.n; j++)
            nx_add(&x, sn[j].node);
        ndots += e->dots.n;
        nseen += e->seen.n;
    }
    nx_finish(&x);
    put_nodes(&x, &msg);

    /* a delta always lists both counts per element, so one delta has one encoding */
    msg.n_elements = msg.n_dot_count = msg.n_seen_count = n;
    msg.elements = shoal_malloc((n ? n : 1) * sizeof *msg.elements);
    msg.dot_count = shoal_malloc((n ? n : 1) * sizeof *msg.dot_count);
    msg.seen_count = shoal_malloc((n ? n : 1) * sizeof *msg.seen_count);
    msg.n_dot_node = msg.n_dot_counter = ndots;
    msg.dot_node = shoal_malloc((ndots ? ndots : 1) * sizeof *msg.dot_node);
    msg.dot_counter = shoal_malloc((ndots ? ndots : 1) * sizeof *msg.dot_counter);
    msg.n_seen_node = msg.n_seen_counter = nseen;
    msg.seen_node = shoal_malloc((nseen ? nseen : 1) * sizeof *msg.seen_node);
    msg.seen_counter = shoal_malloc((nseen ? nseen : 1) * sizeof *msg.seen_counter);
    size_t pd = 0, ps = 0;
    for (size_t k = 0; k < n; k++) {
        const dentry_t *e = sorted[k]->value;
        msg.elements[k].data = sorted[k]->key;
        msg.elements[k].len = sorted[k]->klen;
        msg.dot_count[k] = e->dots.n;
        msg.seen_count[k] = e->seen.n;
        put_dots(&x, &e->dots, msg.dot_node, msg.dot_counter, &pd);
        put_dots(&x, &e->seen, msg.seen_node, msg.seen_counter, &ps);
    }
    shoal_pb_pack(&msg.base, out);

    free(sorted);
    free(msg.nodes);
    free(msg.elements);
    free(msg.dot_count);
    free(msg.seen_count);
    free(msg.dot_node);
    free(msg.dot_counter);
    free(msg.seen_node);
    free(msg.seen_counter);
    nx_free(&x);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Decoding: everything is validated before it is trusted.
 */
/* A set of encoded dots, to check that a dot belongs to at most one element. */
typedef struct {
    edot_t *slots; /* counter 0 = empty (counters are > 0) */
    size_t mask;
} dotcheck_t;

static void dc_init(dotcheck_t *c, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    c->slots = shoal_calloc(cap, sizeof *c->slots);
    c->mask = cap - 1;
}

/* False if the dot was there already. */
static bool dc_insert(dotcheck_t *c, uint32_t node, uint64_t counter)
{
    uint64_t h = (counter ^ ((uint64_t)node << 40) ^ node) * 0x9e3779b97f4a7c15ull;
    size_t i = (size_t)(h >> 29) & c->mask;
    for (;; i = (i + 1) & c->mask) {
        edot_t *s = &c->slots[i];
        if (s->counter == 0) {
            s->node = node;
            s->counter = counter;
            return true;
        }
        if (s->counter == counter && s->node == node)
            return false;
    }
}

typedef struct {
    const Shoal__Ddata__ORSet *msg;
    bool delta;
    shoal_nodetab_t tab;
    bool *referenced;
    uint64_t *vv; /* full state: vector by node index */
} dec_t;

/* Checks the run of k dots at `at`: indexes in range, counters > 0, strictly ascending. (Base
   pointers and offsets, not pointer arithmetic: an empty packed array is NULL.) */
static int check_dots(dec_t *dc, const uint32_t *nodes_base, const uint64_t *counters_base,
                      size_t at, size_t k)
{
    if (k == 0)
        return 0;
    const uint32_t *nodes = nodes_base + at;
    const uint64_t *counters = counters_base + at;
    for (size_t j = 0; j < k; j++) {
        if (nodes[j] >= dc->tab.n || counters[j] == 0)
            return SHOAL_EDECODE;
        if (j > 0 && (nodes[j - 1] > nodes[j] ||
                      (nodes[j - 1] == nodes[j] && counters[j - 1] >= counters[j])))
            return SHOAL_EDECODE;
        dc->referenced[nodes[j]] = true;
    }
    return 0;
}

static bool sum_counts(const uint32_t *counts, size_t n, size_t expect)
{
    uint64_t sum = 0;
    for (size_t k = 0; k < n; k++)
        sum += counts[k];
    return sum == expect;
}

/* Is (node, counter) in the decoded context? The cloud is sorted by (index, counter). */
static bool ctx_covers(const dec_t *dc, uint32_t node, uint64_t counter)
{
    if (counter <= dc->vv[node])
        return true;
    const Shoal__Ddata__CausalContext *ctx = dc->msg->context;
    if (!ctx)
        return false;
    size_t lo = 0, hi = ctx->n_cloud_node;
    edot_t want = {node, counter};
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        edot_t m = {ctx->cloud_node[mid], ctx->cloud_counter[mid]};
        int c = edot_cmp(&m, &want);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static int check_context(dec_t *dc)
{
    const Shoal__Ddata__CausalContext *ctx = dc->msg->context;
    if (!ctx)
        return 0;
    if (ctx->n_vv_node != ctx->n_vv_counter || ctx->n_cloud_node != ctx->n_cloud_counter)
        return SHOAL_EDECODE;
    if (ctx->n_vv_node == 0 && ctx->n_cloud_node == 0)
        return SHOAL_EDECODE; /* an empty context is left out */
    for (size_t k = 0; k < ctx->n_vv_node; k++) {
        uint32_t i = ctx->vv_node[k];
        if (i >= dc->tab.n || ctx->vv_counter[k] == 0)
            return SHOAL_EDECODE;
        if (k > 0 && ctx->vv_node[k - 1] >= i)
            return SHOAL_EDECODE;
        dc->vv[i] = ctx->vv_counter[k];
        dc->referenced[i] = true;
    }
    int rc = check_dots(dc, ctx->cloud_node, ctx->cloud_counter, 0, ctx->n_cloud_node);
    if (rc < 0)
        return rc;
    for (size_t k = 0; k < ctx->n_cloud_node; k++) {
        /* strictly above the vector with a gap: (n, vv[n] + 1) would have been folded in */
        uint64_t v = dc->vv[ctx->cloud_node[k]], c = ctx->cloud_counter[k];
        if (c <= v || c - v < 2)
            return SHOAL_EDECODE;
    }
    return 0;
}

static int check_message(dec_t *dc)
{
    const Shoal__Ddata__ORSet *m = dc->msg;
    size_t n = m->n_elements;
    if (m->n_dot_count != n || m->n_dot_node != m->n_dot_counter ||
        !sum_counts(m->dot_count, n, m->n_dot_node))
        return SHOAL_EDECODE;
    if (dc->delta) {
        if (m->context)
            return SHOAL_EDECODE;
        if (m->n_seen_count != n || m->n_seen_node != m->n_seen_counter ||
            !sum_counts(m->seen_count, n, m->n_seen_node))
            return SHOAL_EDECODE;
    } else {
        if (m->n_seen_count || m->n_seen_node || m->n_seen_counter)
            return SHOAL_EDECODE;
        int rc = check_context(dc);
        if (rc < 0)
            return rc;
    }
    size_t pd = 0, ps = 0;
    for (size_t k = 0; k < n; k++) {
        if (k > 0 && shoal_bytes_cmp(m->elements[k - 1].data, m->elements[k - 1].len,
                                     m->elements[k].data, m->elements[k].len) >= 0)
            return SHOAL_EDECODE;
        size_t kd = m->dot_count[k], ks = dc->delta ? m->seen_count[k] : 0;
        if (kd + ks == 0)
            return SHOAL_EDECODE; /* a state element has dots; a delta element says something */
        int rc = check_dots(dc, m->dot_node, m->dot_counter, pd, kd);
        if (rc < 0)
            return rc;
        if (!dc->delta) {
            for (size_t j = pd; j < pd + kd; j++)
                if (!ctx_covers(dc, m->dot_node[j], m->dot_counter[j]))
                    return SHOAL_EDECODE;
        } else {
            rc = check_dots(dc, m->seen_node, m->seen_counter, ps, ks);
            if (rc < 0)
                return rc;
        }
        pd += kd;
        ps += ks;
    }
    /* a dot belongs to one element (and is either its dot or seen, not both) */
    if (n > 1 || (n == 1 && m->n_dot_node > 0 && m->n_seen_node > 0)) {
        dotcheck_t c;
        dc_init(&c, m->n_dot_node + m->n_seen_node);
        bool unique = true;
        for (size_t j = 0; unique && j < m->n_dot_node; j++)
            unique = dc_insert(&c, m->dot_node[j], m->dot_counter[j]);
        for (size_t j = 0; unique && j < m->n_seen_node; j++)
            unique = dc_insert(&c, m->seen_node[j], m->seen_counter[j]);
        free(c.slots);
        if (!unique)
            return SHOAL_EDECODE;
    }
    /* canonical: the table holds exactly the nodes referenced */
    for (size_t i = 0; i < dc->tab.n; i++)
        if (!dc->referenced[i])
            return SHOAL_EDECODE;
    return 0;
}

/* Copies k encoded dots into a dot set, in memory order. */
static void take_dots(const dec_t *dc, dotset_t *ds, const uint32_t *nodes_base,
                      const uint64_t *counters_base, size_t at, size_t k)
{
    if (k == 0)
        return;
    const uint32_t *nodes = nodes_base + at;
    const uint64_t *counters = counters_base + at;
    ds_reserve(ds, k);
    dot_t *d = ds_dots(ds);
    for (size_t j = 0; j < k; j++)
        d[j] = (dot_t){dc->tab.nodes[nodes[j]], counters[j]};
    dots_sort(d, k);
    ds->n = (uint32_t)k;
}

static void witness_max(uint64_t *max, const uint32_t *nodes, const uint64_t *counters, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (counters[k] > max[nodes[k]])
            max[nodes[k]] = counters[k];
}

/* Raises each node's dot floor to the highest counter the (checked) message holds for it: data
   that holds this process's own dots from outside its memory (a uid used again, a test) cannot
   make a re-created set issue one of them. */
static void witness_decoded(const dec_t *dc)
{
    const Shoal__Ddata__ORSet *m = dc->msg;
    uint64_t *max = shoal_calloc(dc->tab.n ? dc->tab.n : 1, sizeof *max);
    if (m->context) {
        witness_max(max, m->context->vv_node, m->context->vv_counter, m->context->n_vv_node);
        witness_max(max, m->context->cloud_node, m->context->cloud_counter,
                    m->context->n_cloud_node);
    }
    witness_max(max, m->dot_node, m->dot_counter, m->n_dot_node);
    witness_max(max, m->seen_node, m->seen_counter, m->n_seen_node);
    for (size_t i = 0; i < dc->tab.n; i++)
        shoal_node_dot_witness(dc->tab.nodes[i], max[i]);
    free(max);
}

static int decode_common(const uint8_t *data, size_t len, bool delta, shoal_crdt_t **out)
{
    Shoal__Ddata__ORSet *msg = shoal__ddata__orset__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    dec_t dc = {.msg = msg, .delta = delta};
    int rc = shoal_nodetab_from_pb(&dc.tab, msg->n_nodes, msg->nodes);
    if (rc == 0) {
        dc.referenced = shoal_calloc(dc.tab.n ? dc.tab.n : 1, sizeof *dc.referenced);
        dc.vv = shoal_calloc(dc.tab.n ? dc.tab.n : 1, sizeof *dc.vv);
        rc = check_message(&dc);
    }
    if (rc < 0) {
        free(dc.referenced);
        free(dc.vv);
        shoal_nodetab_free(&dc.tab);
        shoal__ddata__orset__free_unpacked(msg, NULL);
        return rc;
    }

    witness_decoded(&dc);
    size_t n = msg->n_elements, pd = 0, ps = 0;
    if (delta) {
        orset_delta_t *d = DL(dl_create());
        hmap_presize(&d->elems, n);
        pool_reserve(&d->pool, sizeof(dentry_t), n);
        for (size_t k = 0; k < n; k++) {
            bool inserted;
            shoal_hslot_t *sl = shoal_hmap_upsert(&d->elems, elem_ptr(msg->elements[k].data),
                                                  msg->elements[k].len, &inserted);
            dentry_t *e = dl_entry_new(d);
            take_dots(&dc, &e->dots, msg->dot_node, msg->dot_counter, pd, msg->dot_count[k]);
            take_dots(&dc, &e->seen, msg->seen_node, msg->seen_counter, ps, msg->seen_count[k]);
            pd += msg->dot_count[k];
            ps += msg->seen_count[k];
            sl->value = e;
        }
        *out = &d->base;
    } else {
        orset_t *s = OS(os_create());
        hmap_presize(&s->elems, n);
        pool_reserve(&s->pool, sizeof(dotset_t), n);
        for (size_t k = 0; k < n; k++) {
            bool inserted;
            shoal_hslot_t *sl = shoal_hmap_upsert(&s->elems, elem_ptr(msg->elements[k].data),
                                                  msg->elements[k].len, &inserted);
            dotset_t *e = os_entry_new(s);
            take_dots(&dc, e, msg->dot_node, msg->dot_counter, pd, msg->dot_count[k]);
            pd += msg->dot_count[k];
            sl->value = e;
        }
        const Shoal__Ddata__CausalContext *ctx = msg->context;
        if (ctx) {
            cc_t *cc = &s->cc;
            /* the vector's indexes ascend, so its nodes are in id order, as the node map keeps */
            SHOAL_GROW(cc->vv.e, cc->vv.cap, ctx->n_vv_node);
            for (size_t k = 0; k < ctx->n_vv_node; k++)
                cc->vv.e[k] = (shoal_nm_entry_t){dc.tab.nodes[ctx->vv_node[k]], ctx->vv_counter[k]};
            cc->vv.n = ctx->n_vv_node;
            SHOAL_GROW(cc->cloud, cc->capcloud, ctx->n_cloud_node);
            for (size_t k = 0; k < ctx->n_cloud_node; k++)
                cc->cloud[k] = (dot_t){dc.tab.nodes[ctx->cloud_node[k]], ctx->cloud_counter[k]};
            cc->ncloud = ctx->n_cloud_node;
            if (cc->ncloud > 1)
                qsort(cc->cloud, cc->ncloud, sizeof *cc->cloud, dot_qcmp);
        }
        *out = &s->base;
    }
    free(dc.referenced);
    free(dc.vv);
    shoal_nodetab_free(&dc.tab);
    shoal__ddata__orset__free_unpacked(msg, NULL);
    return 0;
}

static int os_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    return decode_common(data, len, false, out);
}

static int dl_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    return decode_common(data, len, true, out);
}

/* ---------------------------------------------------------------------------------------------
 * Rendering
 */
static int os_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const shoal_hmap_t *h = &COS(self)->elems;
    shoal_hslot_t **sorted = sorted_slots(h);
    shoal_buf_append(out, "ORSet{", 6);
    for (size_t i = 0; i < h->n; i++) {
        if (i)
            shoal_buf_append(out, ", ", 2);
        shoal_buf_append_quoted(out, sorted[i]->key, sorted[i]->klen);
    }
    shoal_buf_append(out, "}", 1);
    free(sorted);
    return 0;
}

/* ORSetDelta{+"a", -"b"}: + an element (re)added, - an element removed. */
static int dl_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const shoal_hmap_t *h = &CDL(self)->elems;
    shoal_hslot_t **sorted = sorted_slots(h);
    shoal_buf_append(out, "ORSetDelta{", 11);
    for (size_t i = 0; i < h->n; i++) {
        const dentry_t *e = sorted[i]->value;
        shoal_buf_append(out, i ? ", " : "", i ? 2 : 0);
        shoal_buf_append(out, e->dots.n ? "+" : "-", 1);
        shoal_buf_append_quoted(out, sorted[i]->key, sorted[i]->klen);
    }
    shoal_buf_append(out, "}", 1);
    free(sorted);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Pruning
 */
static size_t os_modified_by(const shoal_crdt_t *self, const shoal_node_t **nodes, size_t cap)
{
    const cc_t *cc = &COS(self)->cc;
    if (cc->ncloud == 0) { /* the vector is sorted by node id already */
        for (size_t i = 0; i < cc->vv.n && i < cap; i++)
            nodes[i] = cc->vv.e[i].node;
        return cc->vv.n;
    }
    size_t n = 0;
    const shoal_node_t **all = shoal_malloc((cc->vv.n + cc->ncloud) * sizeof *all);
    for (size_t i = 0; i < cc->vv.n; i++)
        all[n++] = cc->vv.e[i].node;
    for (size_t i = 0; i < cc->ncloud; i++)
        if (i == 0 || cc->cloud[i].node != cc->cloud[i - 1].node)
            all[n++] = cc->cloud[i].node;
    qsort(all, n, sizeof *all, node_ptr_cmp);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (w == 0 || all[w - 1] != all[i])
            all[w++] = all[i];
    for (size_t i = 0; i < w && i < cap; i++)
        nodes[i] = all[i];
    free(all);
    return w;
}

/* Every dot of an element is in the context, so the context tells. */
static bool os_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed)
{
    return cc_has_node(&COS(self)->cc, removed);
}

static void dl_drop_node(orset_delta_t *d, const shoal_node_t *removed);

static bool ds_has_node(const dotset_t *e, const shoal_node_t *node)
{
    const dot_t *d = ds_cdots(e);
    for (uint32_t k = 0; k < e->n; k++)
        if (d[k].node == node)
            return true;
    return false;
}

/* Drops the dots of node from e. */
static void ds_drop_node(dotset_t *e, const shoal_node_t *node)
{
    dot_t *d = ds_dots(e);
    uint32_t w = 0;
    for (uint32_t k = 0; k < e->n; k++)
        if (d[k].node != node)
            d[w++] = d[k];
    e->n = w;
}

/* ---------------------------------------------------------------------------------------------
 * Pruning by plan (shoal_prune_plan_t, ddata.h): the removed node's dot (removed, n) becomes
 * (into, base + n - 1) for n <= span, at every replica and in every delta, so that a remove
 * which saw the old dot covers the new one.
 */
/* A vector gap no longer than this is moved into the cloud dot by dot at a replica that is not
   the owner (its own vector of `into` lags the block); a longer one (a removed node that made
   over a million adds to one set) is dropped, as before plans, rather than held in memory. */
#define REHOME_CLOUD_MAX (1u << 20)

static inline bool plan_map(const shoal_prune_plan_t *p, dot_t *d)
{
    if (d->counter > p->span)
        return false; /* never seen by the owner: dropped, as a cleanup drops it */
    d->node = p->into;
    d->counter = p->base + d->counter - 1;
    return true;
}

/* Re-homes the removed node's dots of a sorted dot set, keeping it sorted and without
   duplicates (a replica may hold a dot and, merged in from a replica that applied the plan, its
   re-homed copy). Returns true if the set held any. */
static bool ds_rehome(dotset_t *e, const shoal_node_t *removed, const shoal_prune_plan_t *p,
                      const cc_t *seen)
{
    if (!ds_has_node(e, removed))
        return false;
    const dot_t *d = ds_cdots(e);
    dotbuf_t out;
    db_init(&out);
    for (uint32_t k = 0; k < e->n; k++) {
        dot_t x = d[k];
        if (x.node == removed) {
            if (!plan_map(p, &x))
                continue;
            /* a state whose context already holds the re-homed dot without carrying it has
               merged a remove of it (a delta from a replica that applied the plan first): the
               join of the two copies drops it */
            if (seen && cc_contains(seen, x) && !dots_has(d, e->n, x))
                continue;
        }
        db_push(&out, x);
    }
    dots_sort(out.d, out.n);
    size_t u = 0;
    for (size_t k = 0; k < out.n; k++)
        if (u == 0 || dot_cmp(out.d[u - 1], out.d[k]) != 0)
            out.d[u++] = out.d[k];
    ds_assign(e, out.d, u);
    db_free(&out);
    return true;
}

/* Drops from e the dots that are in `minus` (both sorted). */
static void ds_subtract(dotset_t *e, const dotset_t *minus)
{
    dot_t *d = ds_dots(e);
    uint32_t w = 0;
    for (uint32_t k = 0; k < e->n; k++) {
        size_t pos;
        if (!ds_find(minus, d[k], &pos))
            d[w++] = d[k];
    }
    e->n = w;
}

/* The context's dots of removed, re-homed. The owner also claims every dot of `into` up to the
   block's end: below the block are its own dots (it has them all) and counters it never used;
   in the block, what it did not see of the removed node is then dropped everywhere, as a
   cleanup drops it. Another replica adds exactly the re-homed dots it knows of. */
static void cc_rehome(cc_t *cc, const shoal_node_t *removed, const shoal_prune_plan_t *p,
                      bool owner)
{
    if (owner) {
        uint64_t top = p->base + p->span - 1;
        cc_remove_node(cc, removed);
        if (shoal_nm_get(&cc->vv, p->into) < top)
            shoal_nm_set(&cc->vv, p->into, top);
        cc_compact(cc); /* cloud dots of into at or below top are now in the vector */
        return;
    }
    uint64_t v = shoal_nm_get(&cc->vv, removed);
    uint64_t upto = v < p->span ? v : p->span; /* the vector's dots 1..upto move */
    dotbuf_t moved;
    db_init(&moved);
    for (size_t i = 0; i < cc->ncloud; i++) {
        dot_t d = cc->cloud[i];
        if (d.node == removed && plan_map(p, &d))
            db_push(&moved, d);
    }
    cc_remove_node(cc, removed);
    if (upto) {
        uint64_t have = shoal_nm_get(&cc->vv, p->into);
        if (have + 1 >= p->base) { /* the block continues the vector */
            if (p->base + upto - 1 > have)
                shoal_nm_set(&cc->vv, p->into, p->base + upto - 1);
        } else if (upto <= REHOME_CLOUD_MAX) {
            for (uint64_t n = 0; n < upto; n++)
                db_push(&moved, (dot_t){p->into, p->base + n});
        }
    }
    qsort(moved.d, moved.n, sizeof *moved.d, dot_qcmp); /* distinct: the map is one-to-one */
    cc_cloud_union(cc, moved.d, moved.n);
    db_free(&moved);
}

static void os_prune_bounds(const shoal_crdt_t *self, const shoal_node_t *removed,
                            const shoal_node_t *into, uint64_t *into_max, uint64_t *removed_max)
{
    const cc_t *cc = &COS(self)->cc;
    uint64_t a = cc_max(cc, into), b = cc_max(cc, removed);
    if (a > *into_max)
        *into_max = a;
    if (b > *removed_max)
        *removed_max = b;
}

/* Re-homes the removed node's dots of a delta (a delta group) by the plan. */
static void dl_rehome(orset_delta_t *d, const shoal_node_t *removed, const shoal_prune_plan_t *p)
{
    for (size_t i = 0; i < d->elems.cap; i++) {
        shoal_hslot_t *sl = &d->elems.slots[i];
        if (!SHOAL_HSLOT_LIVE(sl))
            continue;
        dentry_t *e = sl->value;
        bool a = ds_rehome(&e->dots, removed, p, NULL), b = ds_rehome(&e->seen, removed, p, NULL);
        if (a || b)
            ds_subtract(&e->dots, &e->seen); /* seen removed wins, as in a join */
        if (e->dots.n == 0 && e->seen.n == 0) {
            ds_free(&e->dots);
            ds_free(&e->seen);
            pool_free(&d->pool, e);
            hmap_kill(&d->elems, sl);
        }
    }
}

static int os_prune_apply(shoal_crdt_t *self, const shoal_node_t *removed,
                          const shoal_prune_plan_t *p, bool owner)
{
    orset_t *s = OS(self);
    bool held = cc_has_node(&s->cc, removed);
    if (!held && !owner)
        return 0;
    if (held)
        for (size_t i = 0; i < s->elems.cap; i++) {
            shoal_hslot_t *sl = &s->elems.slots[i];
            if (!SHOAL_HSLOT_LIVE(sl) || !ds_rehome(sl->value, removed, p, &s->cc))
                continue;
            if (((dotset_t *)sl->value)->n == 0) {
                os_entry_free(s, sl->value);
                hmap_kill(&s->elems, sl);
            }
        }
    cc_rehome(&s->cc, removed, p, owner);
    if (s->delta)
        dl_rehome(s->delta, removed, p);
    if (owner && p->span) /* the block is into's now: a re-created set draws above it */
        shoal_node_dot_witness(p->into, p->base + p->span - 1);
    return 0;
}

static int os_prune(shoal_crdt_t *self, const shoal_node_t *removed, const shoal_node_t *into)
{
    uint64_t into_max = 0, removed_max = 0;
    os_prune_bounds(self, removed, into, &into_max, &removed_max);
    if (!removed_max)
        return 0;
    if (into_max >= UINT64_MAX - removed_max)
        return SHOAL_EOVERFLOW;
    shoal_prune_plan_t p = {into, into_max + 1, removed_max};
    return os_prune_apply(self, removed, &p, true);
}

/* Without a plan: drops whatever is left of the removed node (elements only it kept alive
   disappear) so that old state cannot bring it back. */
static int os_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed)
{
    orset_t *s = OS(self);
    if (!cc_has_node(&s->cc, removed))
        return 0;
    for (size_t i = 0; i < s->elems.cap; i++) {
        shoal_hslot_t *sl = &s->elems.slots[i];
        if (!SHOAL_HSLOT_LIVE(sl) || !ds_has_node(sl->value, removed))
            continue;
        ds_drop_node(sl->value, removed);
        if (((dotset_t *)sl->value)->n == 0) {
            os_entry_free(s, sl->value);
            hmap_kill(&s->elems, sl);
        }
    }
    cc_remove_node(&s->cc, removed);
    if (s->delta)
        dl_drop_node(s->delta, removed);
    return 0;
}

static bool dl_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed)
{
    const shoal_hmap_t *h = &CDL(self)->elems;
    for (size_t i = 0; i < h->cap; i++) {
        const shoal_hslot_t *sl = &h->slots[i];
        if (SHOAL_HSLOT_LIVE(sl)) {
            const dentry_t *e = sl->value;
            if (ds_has_node(&e->dots, removed) || ds_has_node(&e->seen, removed))
                return true;
        }
    }
    return false;
}

static void dl_drop_node(orset_delta_t *d, const shoal_node_t *removed)
{
    shoal_prune_plan_t none = {0}; /* span 0: every dot of removed is above it, so dropped */
    dl_rehome(d, removed, &none);
}

static int dl_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed)
{
    dl_drop_node(DL(self), removed);
    return 0;
}

static int dl_prune_apply(shoal_crdt_t *self, const shoal_node_t *removed,
                          const shoal_prune_plan_t *p, bool owner)
{
    (void)owner; /* a delta reserves nothing: its origin's state did */
    dl_rehome(DL(self), removed, p);
    return 0;
}

const shoal_type_t shoal_type_orset_delta = {
    .name = "ORSetDelta",
    .tag = SHOAL_ORSET_DELTA,
    .format_version = 1,
    .delta_type = NULL,
    .delta_causal = false,
    .has_pruning = false,
    .needs_pruning_from = dl_needs_pruning_from,
    .prune_cleanup = dl_prune_cleanup,
    .prune_apply = dl_prune_apply,
    .create = NULL, /* deltas come from mutations of an ORSet */
    .destroy = dl_destroy,
    .clone = dl_clone,
    .merge = dl_merge,
    .equal = dl_equal,
    .encode_payload = dl_encode,
    .decode_payload = dl_decode,
    .render = dl_render,
};

const shoal_type_t shoal_type_orset = {
    .name = "ORSet",
    .tag = SHOAL_ORSET,
    .format_version = 1,
    .delta_type = &shoal_type_orset_delta,
    .delta_causal = false, /* exact context: see the top of this file */
    .has_pruning = true,
    .create = os_create,
    .destroy = os_destroy,
    .clone = os_clone,
    .merge = os_merge,
    .delta = os_delta,
    .take_delta = os_take_delta,
    .merge_delta = os_merge_delta,
    .equal = os_equal,
    .encode_payload = os_encode,
    .decode_payload = os_decode,
    .render = os_render,
    .modified_by = os_modified_by,
    .needs_pruning_from = os_needs_pruning_from,
    .prune = os_prune,
    .prune_cleanup = os_prune_cleanup,
    .prune_bounds = os_prune_bounds,
    .prune_apply = os_prune_apply,
};
