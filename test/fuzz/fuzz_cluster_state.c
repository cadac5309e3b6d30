/*  fuzz_cluster_state.c — libFuzzer target for membership's cluster state decoder (the custom
    ddata type "ClusterState", membership/state.c). The input is a whole Value envelope, as the
    replicator and the stores hand it to shoal_crdt_decode.

    A value that decodes must encode canonically (encode, decode, encode again gives the same
    bytes and an equal value), answer every decision function without crashing, render, and
    merge with itself and with its decoded copy to itself (idempotence). The seen bits of the
    digest-only gossip (membership's GossipStatus; its message is fuzz_cluster_msg's) are fuzzed
    with it: the input's tail as a seen bitset merged into the value (refused or merged, the seen
    set stays members only), and the value's own bitset merges to itself.
*/
#include "state.h"

#include <stdlib.h>
#include <string.h>

static void exercise_seen_bits(const cstate_t *s, const uint8_t *data, size_t size)
{
    size_t nb = cstate_seen_bits(s, NULL, 0);
    uint8_t *own = calloc(nb ? nb : 1, 1);
    if (!own)
        abort();
    cstate_seen_bits(s, own, nb);
    cstate_t *c = cstate_clone(s);
    size_t added = 1, missing = 1;
    if (cstate_merge_seen_bits(c, own, nb, &added, &missing) != 0 || added || missing ||
        !shoal_crdt_equal(&c->base, &s->base))
        abort(); /* its own seen set adds nothing and lacks nothing */
    if (size >= nb && cstate_merge_seen_bits(c, data + size - nb, nb, &added, &missing) == 0 &&
        (c->n_seen != s->n_seen + added || c->n_seen > c->n_members))
        abort();
    shoal_buf_t b = {0};
    shoal_crdt_t *back = NULL;
    if (shoal_crdt_encode(&c->base, &b) != 0 || shoal_crdt_decode(b.data, b.len, &back) != 0)
        abort(); /* whatever the bits said, the state stays valid */
    shoal_crdt_destroy(&back);
    shoal_buf_free(&b);
    cstate_destroy(&c);
    free(own);
}

static void exercise(const shoal_crdt_t *v, const uint8_t *data, size_t size)
{
    const cstate_t *s = (const cstate_t *)v;
    shoal_buf_t a = {0}, b = {0}, r = {0};
    if (shoal_crdt_encode(v, &a) != 0)
        abort();
    shoal_crdt_t *again = NULL;
    if (shoal_crdt_decode(a.data, a.len, &again) != 0)
        abort(); /* what decodes must re-encode to something decodable */
    if (!shoal_crdt_equal(v, again))
        abort();
    if (shoal_crdt_encode(again, &b) != 0 || a.len != b.len || memcmp(a.data, b.data, a.len))
        abort(); /* canonical: one value, one encoding */
    shoal_crdt_render(again, &r);

    shoal_crdt_t *m = shoal_crdt_clone(v);
    if (shoal_crdt_merge(m, again) != 0 || !shoal_crdt_equal(m, v))
        abort(); /* x ⊔ x = x */
    shoal_crdt_destroy(&m);

    (void)cstate_converged(s);
    (void)cstate_seen_count(s);
    (void)cstate_version_sum(s);
    (void)cstate_oldest(s, NULL);
    const shoal_node_t *self = s->n_members ? s->members[0].node : NULL;
    (void)cstate_leader(s, NULL, self);
    for (size_t i = 0; i < s->n_members && i < 8; i++) {
        const cmember_t *mb = &s->members[i];
        const shoal_node_t *obs[4];
        (void)cstate_is_unreachable(s, mb->node);
        (void)cstate_observers_of(s, mb->node, obs, 4);
        (void)cstate_seen_by(s, mb->node);
        if (mb->n_roles) {
            (void)cstate_leader(s, mb->roles[0], self);
            (void)cstate_oldest(s, mb->roles[0]);
        }
    }
    exercise_seen_bits(s, data, size);
    shoal_crdt_destroy(&again);
    shoal_buf_free(&a);
    shoal_buf_free(&b);
    shoal_buf_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool registered;
    if (!registered) {
        if (cstate_register() != 0)
            abort();
        registered = true;
    }
    shoal_crdt_t *v = NULL;
    /* another type's envelope decodes too: only the cluster state is checked here */
    if (shoal_crdt_decode(data, size, &v) == 0 && shoal_crdt_type(v) == &cstate_type)
        exercise(v, data, size);
    shoal_crdt_destroy(&v);
    return 0;
}
