/*  pncounter.c — PNCounter: a counter that goes up and down, as two grow-only counters.

    The value is (sum of increments) - (sum of decrements). Each half is a GCounter state (the
    shared sorted node map): one non-decreasing count per node, merged by taking the maximum per
    node. A decrement is an increment of the second half, so every state only ever grows and
    merge stays a join.

    Delta: a node only ever raises its own counts, so the delta of an add is that node's new count
    in the half it touched — itself a PNCounter — and deltas merge like states (max per node): they
    are idempotent and need no causal delivery (delta_type = PNCounter, not causal).

    Pruning works per half exactly as GCounter's: the removed node's count is added to the
    surviving node's count, so the value is kept; cleanup then drops the removed node from both
    halves so that old state merged back later cannot bring its counts back a second time.
*/
#include "internal.h"

#include <inttypes.h>

typedef struct {
    shoal_crdt_t base;
    shoal_nodemap_t inc;
    shoal_nodemap_t dec;
    shoal_crdt_t *delta; /* a PNCounter of the entries changed since the last reset, or NULL */
} pncounter_t;

#define PN(x)  ((pncounter_t *)(x))
#define CPN(x) ((const pncounter_t *)(x))

static shoal_crdt_t *pn_create(void)
{
    pncounter_t *c = shoal_calloc(1, sizeof *c);
    c->base.type = &shoal_type_pncounter;
    return &c->base;
}

shoal_crdt_t *shoal_pncounter_new(void)
{
    return pn_create();
}

static void pn_destroy(shoal_crdt_t *self)
{
    shoal_crdt_destroy(&PN(self)->delta);
    shoal_nm_free(&PN(self)->inc);
    shoal_nm_free(&PN(self)->dec);
    free(self);
}

static shoal_crdt_t *pn_clone(const shoal_crdt_t *self)
{
    shoal_crdt_t *c = pn_create();
    shoal_nm_copy(&PN(c)->inc, &CPN(self)->inc);
    shoal_nm_copy(&PN(c)->dec, &CPN(self)->dec);
    if (CPN(self)->delta)
        PN(c)->delta = pn_clone(CPN(self)->delta);
    return c;
}

static int pn_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    shoal_nm_merge_max(&PN(self)->inc, &CPN(other)->inc);
    shoal_nm_merge_max(&PN(self)->dec, &CPN(other)->dec);
    return 0;
}

static bool pn_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    return shoal_nm_equal(&CPN(a)->inc, &CPN(b)->inc) && shoal_nm_equal(&CPN(a)->dec, &CPN(b)->dec);
}

/* Raises node's count in one half by n, recording the new count in the same half of the delta. */
static int bump(pncounter_t *c, bool decrement, const shoal_node_t *node, uint64_t n)
{
    shoal_nodemap_t *m = decrement ? &c->dec : &c->inc;
    ptrdiff_t i = shoal_nm_find(m, node);
    uint64_t cur = i >= 0 ? m->e[i].value : 0;
    if (cur > UINT64_MAX - n)
        return SHOAL_EOVERFLOW;
    uint64_t next = cur + n;
    if (i >= 0)
        m->e[i].value = next;
    else
        shoal_nm_set(m, node, next);
    if (!c->delta)
        c->delta = pn_create();
    shoal_nm_set(decrement ? &PN(c->delta)->dec : &PN(c->delta)->inc, node, next);
    return 0;
}

int shoal_pncounter_add(shoal_crdt_t *c, const shoal_node_t *self, int64_t n)
{
    if (!shoal_is(c, &shoal_type_pncounter))
        return SHOAL_ETYPE;
    if (!self)
        return SHOAL_EINVAL;
    if (n == 0)
        return 0; /* not a change: no delta to ship */
    if (n > 0)
        return bump(PN(c), false, self, (uint64_t)n);
    /* |n| without negating INT64_MIN */
    return bump(PN(c), true, self, (uint64_t)(-(n + 1)) + 1);
}

/* Sum of one half; false if it does not fit in 64 bits. */
static bool half_sum(const shoal_nodemap_t *m, uint64_t *sum)
{
    uint64_t s = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (s > UINT64_MAX - m->e[i].value)
            return false;
        s += m->e[i].value;
    }
    *sum = s;
    return true;
}

static uint64_t half_sum_saturated(const shoal_nodemap_t *m)
{
    uint64_t s;
    return half_sum(m, &s) ? s : UINT64_MAX;
}

int shoal_pncounter_value(const shoal_crdt_t *c, int64_t *value)
{
    if (!shoal_is(c, &shoal_type_pncounter))
        return SHOAL_ETYPE;
    if (!value)
        return SHOAL_EINVAL;
    uint64_t p, n;
    if (!half_sum(&CPN(c)->inc, &p) || !half_sum(&CPN(c)->dec, &n))
        return SHOAL_EOVERFLOW;
    if (p >= n) {
        if (p - n > (uint64_t)INT64_MAX)
            return SHOAL_EOVERFLOW;
        *value = (int64_t)(p - n);
    } else {
        uint64_t d = n - p; /* the value is -d; -2^63 still fits */
        if (d > (uint64_t)INT64_MAX + 1)
            return SHOAL_EOVERFLOW;
        *value = d == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)d;
    }
    return 0;
}

uint64_t shoal_pncounter_increments(const shoal_crdt_t *c)
{
    return shoal_is(c, &shoal_type_pncounter) ? half_sum_saturated(&CPN(c)->inc) : 0;
}

uint64_t shoal_pncounter_decrements(const shoal_crdt_t *c)
{
    return shoal_is(c, &shoal_type_pncounter) ? half_sum_saturated(&CPN(c)->dec) : 0;
}

static const shoal_crdt_t *pn_delta(const shoal_crdt_t *self)
{
    return CPN(self)->delta;
}

static shoal_crdt_t *pn_take_delta(shoal_crdt_t *self)
{
    shoal_crdt_t *d = PN(self)->delta;
    PN(self)->delta = NULL;
    return d;
}

/* ---------------------------------------------------------------------------------------------
 * Encoding: two GCounter messages; an empty half is left out (canonical: proto3 omits defaults).
 */
static int pn_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    Shoal__Ddata__PNCounter msg = SHOAL__DDATA__PNCOUNTER__INIT;
    Shoal__Ddata__GCounter inc = SHOAL__DDATA__GCOUNTER__INIT;
    Shoal__Ddata__GCounter dec = SHOAL__DDATA__GCOUNTER__INIT;
    shoal_nm_to_pb(&CPN(self)->inc, &inc.n_nodes, &inc.nodes, &inc.values);
    inc.n_values = inc.n_nodes;
    shoal_nm_to_pb(&CPN(self)->dec, &dec.n_nodes, &dec.nodes, &dec.values);
    dec.n_values = dec.n_nodes;
    if (inc.n_nodes)
        msg.increments = &inc;
    if (dec.n_nodes)
        msg.decrements = &dec;
    shoal_pb_pack(&msg.base, out);
    shoal_nm_pb_free(inc.nodes, inc.values);
    shoal_nm_pb_free(dec.nodes, dec.values);
    return 0;
}

/* An absent half and a present empty one mean the same (protobuf's rule for defaults). */
static int half_from_pb(shoal_nodemap_t *m, const Shoal__Ddata__GCounter *g)
{
    if (!g)
        return 0;
    return shoal_nm_from_pb(m, g->n_nodes, g->nodes, g->n_values, g->values);
}

static int pn_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    Shoal__Ddata__PNCounter *msg = shoal__ddata__pncounter__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    shoal_crdt_t *c = pn_create();
    int rc = half_from_pb(&PN(c)->inc, msg->increments);
    if (rc == 0)
        rc = half_from_pb(&PN(c)->dec, msg->decrements);
    shoal__ddata__pncounter__free_unpacked(msg, NULL);
    if (rc < 0) {
        pn_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int pn_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    int64_t v;
    if (shoal_pncounter_value(self, &v) == 0)
        shoal_buf_printf(out, "PNCounter(%" PRId64 ")", v);
    else
        shoal_buf_printf(out, "PNCounter(overflow)");
    shoal_buf_append(out, "+", 1);
    shoal_nm_render(&CPN(self)->inc, out);
    shoal_buf_append(out, "-", 1);
    shoal_nm_render(&CPN(self)->dec, out);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Pruning
 */
static size_t pn_modified_by(const shoal_crdt_t *self, const shoal_node_t **nodes, size_t cap)
{
    /* the union of both halves' nodes: both are sorted by node id, so walk them together */
    const shoal_nodemap_t *a = &CPN(self)->inc, *b = &CPN(self)->dec;
    size_t i = 0, j = 0, k = 0;
    while (i < a->n || j < b->n) {
        const shoal_node_t *node;
        int c = i == a->n ? 1 : j == b->n ? -1 : shoal_node_cmp(a->e[i].node, b->e[j].node);
        if (c < 0) {
            node = a->e[i++].node;
        } else if (c > 0) {
            node = b->e[j++].node;
        } else {
            node = a->e[i++].node;
            j++;
        }
        if (k < cap)
            nodes[k] = node;
        k++;
    }
    return k;
}

static bool pn_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed)
{
    return shoal_nm_find(&CPN(self)->inc, removed) >= 0 ||
           shoal_nm_find(&CPN(self)->dec, removed) >= 0;
}

static bool fold_fits(const shoal_nodemap_t *m, const shoal_node_t *removed,
                      const shoal_node_t *into)
{
    return shoal_nm_get(m, into) <= UINT64_MAX - shoal_nm_get(m, removed);
}

static void fold(shoal_nodemap_t *m, const shoal_node_t *removed, const shoal_node_t *into)
{
    uint64_t v = shoal_nm_get(m, removed);
    if (!v)
        return;
    uint64_t cur = shoal_nm_get(m, into);
    shoal_nm_remove(m, removed);
    shoal_nm_set(m, into, cur + v);
}

static int pn_prune(shoal_crdt_t *self, const shoal_node_t *removed, const shoal_node_t *into)
{
    /* check both halves first, so a failure leaves the counter untouched */
    if (!fold_fits(&PN(self)->inc, removed, into) || !fold_fits(&PN(self)->dec, removed, into))
        return SHOAL_EOVERFLOW;
    fold(&PN(self)->inc, removed, into);
    fold(&PN(self)->dec, removed, into);
    return 0;
}

static int pn_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed)
{
    shoal_nm_remove(&PN(self)->inc, removed);
    shoal_nm_remove(&PN(self)->dec, removed);
    return 0;
}

const shoal_type_t shoal_type_pncounter = {
    .name = "PNCounter",
    .tag = SHOAL_PNCOUNTER,
    .format_version = 1,
    .delta_type = &shoal_type_pncounter,
    .delta_causal = false,
    .has_pruning = true,
    .create = pn_create,
    .destroy = pn_destroy,
    .clone = pn_clone,
    .merge = pn_merge,
    .delta = pn_delta,
    .take_delta = pn_take_delta,
    .merge_delta = pn_merge,
    .equal = pn_equal,
    .encode_payload = pn_encode,
    .decode_payload = pn_decode,
    .render = pn_render,
    .modified_by = pn_modified_by,
    .needs_pruning_from = pn_needs_pruning_from,
    .prune = pn_prune,
    .prune_cleanup = pn_prune_cleanup,
};
