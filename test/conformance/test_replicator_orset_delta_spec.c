/*  test_replicator_orset_delta_spec.c — conformance: Akka/Pekko's ReplicatorORSetDeltaSpec, see
    docs/conformance.md. Three members; the third is cut off while the first and second add to an
    ORSet; after the cut heals the first adds once more: the third must never apply that last
    delta before the ones it missed (causal order of deltas), and ends with every element.

    Deliberately different: the spec expects the third not to apply "c" before the "b" it missed
    (Akka's ORSet needs its deltas in causal order) and turns full-state gossip off to watch it
    stay at {a}. Shoal's ORSet keeps an exact causal context (ddata/types/orset.c), so its deltas
    are not causal: "c" applies on arrival, "b" still applies when it comes, and nothing is lost
    or brought back; and Shoal has no switch to turn anti-entropy off. The case checks what
    Shoal promises: the third converges on every element, and later deltas flow again.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"
#include "members.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "replicate data in initial phase" */
static void replicate_data_in_initial_phase(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        cm_start(i, NULL);
        cm_join(i, 0);
    }
    cm_wait_up(7u, 15000);
    cm_wait_replicas(7u, 3, 10000);
    assert_int_equal(cm_set_add(cm[0].rep, "A", SHOAL_ORSET, "a", c_local()), 0);
    for (int i = 0; i < 3; i++)
        assert_true(cm_wait_set(cm[i].rep, "A", "a", 5000));
}

typedef struct {
    int bad_samples, samples;
    char last[64], bad[64];
} watch_t;

static bool third_complete(void *arg)
{
    watch_t *w = arg;
    char got[64];
    if (cm_set_get(cm[2].rep, "A", c_local(), got, sizeof got) != 0)
        return false;
    w->samples++;
    snprintf(w->last, sizeof w->last, "%s", got);
    /* "b" and "c" are deltas of the same origin (the first), in that order; "d" is the second's,
       concurrent with both, so it may arrive before or after them */
    if (strchr(got, 'c') && !strchr(got, 'b')) {
        w->bad_samples++;
        snprintf(w->bad, sizeof w->bad, "%s", got);
    }
    return strcmp(got, "a,b,c,d") == 0;
}

static uint64_t sent_before[2];

static bool deltas_out(void *arg)
{
    (void)arg;
    /* the first and second have sent their new deltas to both others (one into the cut) */
    for (int i = 0; i < 2; i++) {
        shoal_replicator_stats_t st;
        if (shoal_replicator_stats(cm[i].rep, &st) != 0 || st.deltas_sent < sent_before[i] + 2)
            return false;
    }
    return true;
}

/* "be propagated with causal consistency during network split" */
static void causal_consistency_during_network_split(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) {
        shoal_replicator_stats_t st;
        assert_int_equal(shoal_replicator_stats(cm[i].rep, &st), 0);
        sent_before[i] = st.deltas_sent;
    }
    cm_cut(0, 2);
    cm_cut(1, 2);
    assert_int_equal(cm_set_add(cm[0].rep, "A", SHOAL_ORSET, "b", c_local()), 0);
    assert_int_equal(cm_set_add(cm[1].rep, "A", SHOAL_ORSET, "d", c_local()), 0);
    for (int i = 0; i < 2; i++)
        assert_true(cm_wait_set(cm[i].rep, "A", "a,b,d", 5000));
    assert_true(wait_until(deltas_out, NULL, 5000));
    char got[64];
    assert_int_equal(cm_set_get(cm[2].rep, "A", c_local(), got, sizeof got), 0);
    assert_string_equal(got, "a");
    cm_pass(0, 2);
    cm_pass(1, 2);
    assert_int_equal(cm_set_add(cm[0].rep, "A", SHOAL_ORSET, "c", c_local()), 0);
    for (int i = 0; i < 2; i++)
        assert_true(cm_wait_set(cm[i].rep, "A", "a,b,c,d", 5000));
    watch_t w = {0, 0, "", ""};
    if (!wait_until(third_complete, &w, 10000))
        fail_msg("the third did not catch up: %s", w.last);
    /* Deliberately different (see the top): Shoal may show "c" before "b" meanwhile; print how
       often it was seen, for the record */
    if (w.bad_samples)
        print_message("note: %d of %d samples of the third showed \"c\" before \"b\" (e.g. {%s}): "
                      "Shoal's ORSet deltas are not causal (orset.c)\n",
                      w.bad_samples, w.samples, w.bad);
    /* and the delta sequence is in step again: a new add arrives */
    assert_int_equal(cm_set_add(cm[0].rep, "A", SHOAL_ORSET, "e", c_local()), 0);
    for (int i = 0; i < 3; i++)
        assert_true(cm_wait_set(cm[i].rep, "A", "a,b,c,d,e", 5000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(replicate_data_in_initial_phase),
        cmocka_unit_test(causal_consistency_during_network_split),
    };
    return cmocka_run_group_tests_name("ReplicatorORSetDeltaSpec", tests, NULL, cm_teardown);
}
