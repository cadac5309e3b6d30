/*  gcounter.c — GCounter: a grow-only counter, one count per node that incremented it.

    The value is the sum of the per-node counts; merge takes the maximum per node. A node only
    ever raises its own count, so the delta of an increment is that node's new count alone
    (itself a GCounter), and deltas merge like states: they need no causal delivery.
    Pruning adds the removed node's count to the surviving node's, keeping the sum.
*/
#include "internal.h"

typedef struct {
    shoal_crdt_t base;
    shoal_nodemap_t m;
    shoal_crdt_t *delta; /* a GCounter of the entries changed since the last reset, or NULL */
} gcounter_t;

#define GC(x) ((gcounter_t *)(x))
#define CGC(x) ((const gcounter_t *)(x))

static shoal_crdt_t *gc_create(void)
{
    gcounter_t *c = shoal_calloc(1, sizeof *c);
    c->base.type = &shoal_type_gcounter;
    return &c->base;
}

shoal_crdt_t *shoal_gcounter_new(void)
{
    return gc_create();
}

static void gc_destroy(shoal_crdt_t *self)
{
    shoal_crdt_destroy(&GC(self)->delta);
    shoal_nm_free(&GC(self)->m);
    free(self);
}

static shoal_crdt_t *gc_clone(const shoal_crdt_t *self)
{
    shoal_crdt_t *c = gc_create();
    shoal_nm_copy(&GC(c)->m, &CGC(self)->m);
    if (CGC(self)->delta)
        GC(c)->delta = gc_clone(CGC(self)->delta);
    return c;
}

static int gc_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    shoal_nm_merge_max(&GC(self)->m, &CGC(other)->m);
    return 0;
}

static bool gc_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    return shoal_nm_equal(&CGC(a)->m, &CGC(b)->m);
}

int shoal_gcounter_increment(shoal_crdt_t *c, const shoal_node_t *self, uint64_t n)
{
    if (!shoal_is(c, &shoal_type_gcounter))
        return SHOAL_ETYPE;
    if (!self)
        return SHOAL_EINVAL;
    if (n == 0)
        return 0;
    shoal_nodemap_t *m = &GC(c)->m;
    ptrdiff_t i = shoal_nm_find(m, self);
    uint64_t cur = i >= 0 ? m->e[i].value : 0;
    if (cur > UINT64_MAX - n)
        return SHOAL_EOVERFLOW;
    uint64_t next = cur + n;
    if (i >= 0)
        m->e[i].value = next;
    else
        shoal_nm_set(m, self, next);
    if (!GC(c)->delta)
        GC(c)->delta = gc_create();
    shoal_nm_set(&GC(GC(c)->delta)->m, self, next);
    return 0;
}

uint64_t shoal_gcounter_value(const shoal_crdt_t *c)
{
    if (!shoal_is(c, &shoal_type_gcounter))
        return 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < CGC(c)->m.n; i++) {
        uint64_t v = CGC(c)->m.e[i].value;
        sum = sum > UINT64_MAX - v ? UINT64_MAX : sum + v; /* saturate rather than wrap */
    }
    return sum;
}

static const shoal_crdt_t *gc_delta(const shoal_crdt_t *self)
{
    return CGC(self)->delta;
}

static shoal_crdt_t *gc_take_delta(shoal_crdt_t *self)
{
    shoal_crdt_t *d = GC(self)->delta;
    GC(self)->delta = NULL;
    return d;
}

static int gc_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    Shoal__Ddata__GCounter msg = SHOAL__DDATA__GCOUNTER__INIT;
    shoal_nm_to_pb(&CGC(self)->m, &msg.n_nodes, &msg.nodes, &msg.values);
    msg.n_values = msg.n_nodes;
    shoal_pb_pack(&msg.base, out);
    shoal_nm_pb_free(msg.nodes, msg.values);
    return 0;
}

static int gc_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    Shoal__Ddata__GCounter *msg = shoal__ddata__gcounter__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    shoal_crdt_t *c = gc_create();
    int rc = shoal_nm_from_pb(&GC(c)->m, msg->n_nodes, msg->nodes, msg->n_values, msg->values);
    shoal__ddata__gcounter__free_unpacked(msg, NULL);
    if (rc < 0) {
        gc_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int gc_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    shoal_buf_printf(out, "GCounter(%llu)", (unsigned long long)shoal_gcounter_value(self));
    shoal_nm_render(&CGC(self)->m, out);
    return 0;
}

static size_t gc_modified_by(const shoal_crdt_t *self, const shoal_node_t **nodes, size_t cap)
{
    const shoal_nodemap_t *m = &CGC(self)->m;
    for (size_t i = 0; i < m->n && i < cap; i++)
        nodes[i] = m->e[i].node;
    return m->n;
}

static bool gc_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed)
{
    return shoal_nm_find(&CGC(self)->m, removed) >= 0;
}

static int gc_prune(shoal_crdt_t *self, const shoal_node_t *removed, const shoal_node_t *into)
{
    shoal_nodemap_t *m = &GC(self)->m;
    uint64_t v = shoal_nm_get(m, removed);
    if (!v)
        return 0;
    uint64_t cur = shoal_nm_get(m, into);
    if (cur > UINT64_MAX - v)
        return SHOAL_EOVERFLOW;
    shoal_nm_remove(m, removed);
    shoal_nm_set(m, into, cur + v);
    return 0;
}

static int gc_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed)
{
    shoal_nm_remove(&GC(self)->m, removed);
    return 0;
}

const shoal_type_t shoal_type_gcounter = {
    .name = "GCounter",
    .tag = SHOAL_GCOUNTER,
    .format_version = 1,
    .delta_type = &shoal_type_gcounter,
    .delta_causal = false,
    .has_pruning = true,
    .create = gc_create,
    .destroy = gc_destroy,
    .clone = gc_clone,
    .merge = gc_merge,
    .delta = gc_delta,
    .take_delta = gc_take_delta,
    .merge_delta = gc_merge,
    .equal = gc_equal,
    .encode_payload = gc_encode,
    .decode_payload = gc_decode,
    .render = gc_render,
    .modified_by = gc_modified_by,
    .needs_pruning_from = gc_needs_pruning_from,
    .prune = gc_prune,
    .prune_cleanup = gc_prune_cleanup,
};
