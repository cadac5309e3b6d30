/*  gset.c — GSet: a grow-only set of byte strings (binary-safe; the empty string is an element).

    Merge is set union. Elements are never removed, so the delta of adds is simply the set of
    elements added since the last reset (itself a GSet); deltas merge by union like states, are
    idempotent and need no causal delivery. The set holds no per-node state: nothing to prune.

    Elements live in a byte-string hash map (membership in O(1)); the encoding, rendering and
    foreach sort them in canonical order (shoal_bytes_cmp), so one set has one encoding.
*/
#include "internal.h"

typedef struct {
    shoal_crdt_t base;
    shoal_hmap_t elems;  /* element -> &present (the value only marks membership) */
    shoal_crdt_t *delta; /* a GSet of the elements added since the last reset, or NULL */
} gset_t;

#define GS(x)  ((gset_t *)(x))
#define CGS(x) ((const gset_t *)(x))

/* The map's value for every element: non-NULL, so shoal_hmap_get tells presence. */
static char present;

static shoal_crdt_t *gs_create(void)
{
    gset_t *s = shoal_calloc(1, sizeof *s);
    s->base.type = &shoal_type_gset;
    return &s->base;
}

shoal_crdt_t *shoal_gset_new(void)
{
    return gs_create();
}

static void gs_destroy(shoal_crdt_t *self)
{
    shoal_crdt_destroy(&GS(self)->delta);
    shoal_hmap_free(&GS(self)->elems);
    free(self);
}

/* Inserts elem; true if it was not there. */
static bool insert(gset_t *s, const void *elem, size_t len)
{
    bool inserted;
    if (!elem)
        elem = ""; /* the empty element may come as NULL; the map compares with memcmp */
    shoal_hslot_t *slot = shoal_hmap_upsert(&s->elems, elem, len, &inserted);
    slot->value = &present;
    return inserted;
}

static void union_into(gset_t *dst, const gset_t *src)
{
    const shoal_hmap_t *h = &src->elems;
    for (size_t i = 0; i < h->cap; i++)
        if (SHOAL_HSLOT_LIVE(&h->slots[i]))
            insert(dst, h->slots[i].key, h->slots[i].klen);
}

static shoal_crdt_t *gs_clone(const shoal_crdt_t *self)
{
    shoal_crdt_t *c = gs_create();
    union_into(GS(c), CGS(self));
    if (CGS(self)->delta)
        GS(c)->delta = gs_clone(CGS(self)->delta);
    return c;
}

static int gs_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    union_into(GS(self), CGS(other));
    return 0;
}

static bool gs_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    const shoal_hmap_t *x = &CGS(a)->elems, *y = &CGS(b)->elems;
    if (x->n != y->n)
        return false;
    for (size_t i = 0; i < x->cap; i++)
        if (SHOAL_HSLOT_LIVE(&x->slots[i]) && !shoal_hmap_get(y, x->slots[i].key, x->slots[i].klen))
            return false;
    return true;
}

int shoal_gset_add(shoal_crdt_t *s, const void *elem, size_t len)
{
    if (!shoal_is(s, &shoal_type_gset))
        return SHOAL_ETYPE;
    if (!elem && len)
        return SHOAL_EINVAL;
    if (!insert(GS(s), elem, len))
        return 0; /* already there: not a change, nothing to ship */
    if (!GS(s)->delta)
        GS(s)->delta = gs_create();
    insert(GS(GS(s)->delta), elem, len);
    return 0;
}

bool shoal_gset_contains(const shoal_crdt_t *s, const void *elem, size_t len)
{
    if (!shoal_is(s, &shoal_type_gset) || (!elem && len))
        return false;
    if (!elem)
        elem = "";
    return shoal_hmap_get(&CGS(s)->elems, elem, len) != NULL;
}

size_t shoal_gset_size(const shoal_crdt_t *s)
{
    return shoal_is(s, &shoal_type_gset) ? CGS(s)->elems.n : 0;
}

int shoal_gset_foreach(const shoal_crdt_t *s, shoal_elem_fn *fn, void *arg)
{
    if (!shoal_is(s, &shoal_type_gset))
        return SHOAL_ETYPE;
    if (!fn)
        return SHOAL_EINVAL;
    shoal_hslot_t **sorted = shoal_hmap_sorted(&CGS(s)->elems);
    int rc = 0;
    for (size_t i = 0; i < CGS(s)->elems.n && rc == 0; i++)
        rc = fn(sorted[i]->key, sorted[i]->klen, arg);
    free(sorted);
    return rc;
}

static const shoal_crdt_t *gs_delta(const shoal_crdt_t *self)
{
    return CGS(self)->delta;
}

static shoal_crdt_t *gs_take_delta(shoal_crdt_t *self)
{
    shoal_crdt_t *d = GS(self)->delta;
    GS(self)->delta = NULL;
    return d;
}

static int gs_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const shoal_hmap_t *h = &CGS(self)->elems;
    Shoal__Ddata__GSet msg = SHOAL__DDATA__GSET__INIT;
    shoal_hslot_t **sorted = shoal_hmap_sorted(h);
    msg.n_elements = h->n;
    msg.elements = shoal_malloc((h->n ? h->n : 1) * sizeof *msg.elements);
    for (size_t i = 0; i < h->n; i++) {
        msg.elements[i].data = sorted[i]->key;
        msg.elements[i].len = sorted[i]->klen;
    }
    shoal_pb_pack(&msg.base, out);
    free(msg.elements);
    free(sorted);
    return 0;
}

static int gs_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    Shoal__Ddata__GSet *msg = shoal__ddata__gset__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    shoal_crdt_t *s = gs_create();
    int rc = 0;
    for (size_t i = 0; i < msg->n_elements; i++) {
        const ProtobufCBinaryData *e = &msg->elements[i];
        /* strictly ascending: canonical order, and no duplicates */
        if (i > 0 && shoal_bytes_cmp(msg->elements[i - 1].data, msg->elements[i - 1].len, e->data,
                                     e->len) >= 0) {
            rc = SHOAL_EDECODE;
            break;
        }
        insert(GS(s), e->data, e->len);
    }
    shoal__ddata__gset__free_unpacked(msg, NULL);
    if (rc < 0) {
        gs_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int gs_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const shoal_hmap_t *h = &CGS(self)->elems;
    shoal_hslot_t **sorted = shoal_hmap_sorted(h);
    shoal_buf_append(out, "GSet{", 5);
    for (size_t i = 0; i < h->n; i++) {
        if (i)
            shoal_buf_append(out, ", ", 2);
        shoal_buf_append_quoted(out, sorted[i]->key, sorted[i]->klen);
    }
    shoal_buf_append(out, "}", 1);
    free(sorted);
    return 0;
}

const shoal_type_t shoal_type_gset = {
    .name = "GSet",
    .tag = SHOAL_GSET,
    .format_version = 1,
    .delta_type = &shoal_type_gset,
    .delta_causal = false,
    .has_pruning = false,
    .create = gs_create,
    .destroy = gs_destroy,
    .clone = gs_clone,
    .merge = gs_merge,
    .delta = gs_delta,
    .take_delta = gs_take_delta,
    .merge_delta = gs_merge,
    .equal = gs_equal,
    .encode_payload = gs_encode,
    .decode_payload = gs_decode,
    .render = gs_render,
};
