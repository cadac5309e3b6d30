/*  version_vector.c — VersionVector: node -> counter, compared as a partial order.

    a < b (BEFORE) when every counter of a is <= b's and one is smaller; AFTER the reverse;
    SAME when equal; CONCURRENT otherwise. Merge takes the maximum per node. Pruning drops the
    removed node and increments the surviving node, so the vector still moves forward. It has no
    delta: a vector is small and its full state is what is shipped.
*/
#include "internal.h"

typedef struct {
    shoal_crdt_t base;
    shoal_nodemap_t m;
} vv_t;

#define VV(x) ((vv_t *)(x))
#define CVV(x) ((const vv_t *)(x))

static shoal_crdt_t *vv_create(void)
{
    vv_t *v = shoal_calloc(1, sizeof *v);
    v->base.type = &shoal_type_version_vector;
    return &v->base;
}

shoal_crdt_t *shoal_vv_new(void)
{
    return vv_create();
}

static void vv_destroy(shoal_crdt_t *self)
{
    shoal_nm_free(&VV(self)->m);
    free(self);
}

static shoal_crdt_t *vv_clone(const shoal_crdt_t *self)
{
    shoal_crdt_t *c = vv_create();
    shoal_nm_copy(&VV(c)->m, &CVV(self)->m);
    return c;
}

static int vv_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    shoal_nm_merge_max(&VV(self)->m, &CVV(other)->m);
    return 0;
}

static bool vv_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    return shoal_nm_equal(&CVV(a)->m, &CVV(b)->m);
}

int shoal_vv_increment(shoal_crdt_t *vv, const shoal_node_t *node)
{
    if (!shoal_is(vv, &shoal_type_version_vector))
        return SHOAL_ETYPE;
    if (!node)
        return SHOAL_EINVAL;
    uint64_t c = shoal_nm_get(&VV(vv)->m, node);
    if (c == UINT64_MAX)
        return SHOAL_EOVERFLOW;
    shoal_nm_set(&VV(vv)->m, node, c + 1);
    return 0;
}

int shoal_vv_witness(shoal_crdt_t *vv, const shoal_node_t *node, uint64_t counter)
{
    if (!shoal_is(vv, &shoal_type_version_vector))
        return SHOAL_ETYPE;
    if (!node)
        return SHOAL_EINVAL;
    if (counter > shoal_nm_get(&VV(vv)->m, node))
        shoal_nm_set(&VV(vv)->m, node, counter);
    return 0;
}

uint64_t shoal_vv_get(const shoal_crdt_t *vv, const shoal_node_t *node)
{
    return shoal_is(vv, &shoal_type_version_vector) ? shoal_nm_get(&CVV(vv)->m, node) : 0;
}

size_t shoal_vv_size(const shoal_crdt_t *vv)
{
    return shoal_is(vv, &shoal_type_version_vector) ? CVV(vv)->m.n : 0;
}

int shoal_vv_entry(const shoal_crdt_t *vv, size_t i, const shoal_node_t **node, uint64_t *counter)
{
    if (!shoal_is(vv, &shoal_type_version_vector))
        return SHOAL_ETYPE;
    if (i >= CVV(vv)->m.n)
        return SHOAL_EINVAL;
    if (node)
        *node = CVV(vv)->m.e[i].node;
    if (counter)
        *counter = CVV(vv)->m.e[i].value;
    return 0;
}

shoal_vv_order_t shoal_vv_compare(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    const shoal_nodemap_t *x = &CVV(a)->m, *y = &CVV(b)->m;
    bool a_less = false, b_less = false; /* some counter of a below b's; and the reverse */
    /* both are sorted by node id: walk them together */
    size_t i = 0, j = 0;
    while (i < x->n || j < y->n) {
        int c;
        if (i == x->n)
            c = 1;
        else if (j == y->n)
            c = -1;
        else
            c = shoal_node_cmp(x->e[i].node, y->e[j].node);
        if (c < 0) { /* only in a */
            b_less = true;
            i++;
        } else if (c > 0) {
            a_less = true;
            j++;
        } else {
            if (x->e[i].value < y->e[j].value)
                a_less = true;
            else if (x->e[i].value > y->e[j].value)
                b_less = true;
            i++;
            j++;
        }
        if (a_less && b_less)
            return SHOAL_VV_CONCURRENT;
    }
    if (a_less)
        return SHOAL_VV_BEFORE;
    if (b_less)
        return SHOAL_VV_AFTER;
    return SHOAL_VV_SAME;
}

static int vv_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    Shoal__Ddata__VersionVector msg = SHOAL__DDATA__VERSION_VECTOR__INIT;
    shoal_nm_to_pb(&CVV(self)->m, &msg.n_nodes, &msg.nodes, &msg.counters);
    msg.n_counters = msg.n_nodes;
    shoal_pb_pack(&msg.base, out);
    shoal_nm_pb_free(msg.nodes, msg.counters);
    return 0;
}

static int vv_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    Shoal__Ddata__VersionVector *msg = shoal__ddata__version_vector__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    shoal_crdt_t *v = vv_create();
    int rc = shoal_nm_from_pb(&VV(v)->m, msg->n_nodes, msg->nodes, msg->n_counters, msg->counters);
    shoal__ddata__version_vector__free_unpacked(msg, NULL);
    if (rc < 0) {
        vv_destroy(v);
        return rc;
    }
    *out = v;
    return 0;
}

static int vv_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    shoal_buf_append(out, "VersionVector", 13);
    shoal_nm_render(&CVV(self)->m, out);
    return 0;
}

static size_t vv_modified_by(const shoal_crdt_t *self, const shoal_node_t **nodes, size_t cap)
{
    const shoal_nodemap_t *m = &CVV(self)->m;
    for (size_t i = 0; i < m->n && i < cap; i++)
        nodes[i] = m->e[i].node;
    return m->n;
}

static bool vv_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed)
{
    return shoal_nm_find(&CVV(self)->m, removed) >= 0;
}

static int vv_prune(shoal_crdt_t *self, const shoal_node_t *removed, const shoal_node_t *into)
{
    if (shoal_nm_find(&VV(self)->m, removed) < 0)
        return 0;
    shoal_nm_remove(&VV(self)->m, removed);
    return shoal_vv_increment(self, into);
}

static int vv_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed)
{
    shoal_nm_remove(&VV(self)->m, removed);
    return 0;
}

const shoal_type_t shoal_type_version_vector = {
    .name = "VersionVector",
    .tag = SHOAL_VERSION_VECTOR,
    .format_version = 1,
    .has_pruning = true,
    .create = vv_create,
    .destroy = vv_destroy,
    .clone = vv_clone,
    .merge = vv_merge,
    .equal = vv_equal,
    .encode_payload = vv_encode,
    .decode_payload = vv_decode,
    .render = vv_render,
    .modified_by = vv_modified_by,
    .needs_pruning_from = vv_needs_pruning_from,
    .prune = vv_prune,
    .prune_cleanup = vv_prune_cleanup,
};
