/*  test_custom_delta_type.c — a registered type (shoal_type_register) whose deltas are of a
    type of their own travels through the replicator as ORSet's deltas do: a replica merges a
    delta into the key's value with the type's merge_delta, creates the key's empty value for a
    delta of a key it does not hold yet, and applies a causal type's deltas only in their origin's
    order (a gap waits for full state).

    The type is a single-writer log: a list of numbers that only grows at its end. Its delta
    (LogDelta) is a run of entries at a position; merged in order it extends the log, merged out
    of order it would leave a hole, which the type counts (`violations`) and refuses, so a
    replicator that applied deltas out of order, or kept a delta as the key's value, fails here.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "prop.h"
#include "replicator_internal.h" /* K_DELTA: deltas forged in a chosen order */

typedef struct log {
    shoal_crdt_t base;
    int64_t start; /* LogDelta: position of the first entry; 0 for a Log */
    int64_t *v;
    size_t n;
    struct log *pending; /* Log: the delta of the mutations since the last take */
} log_t;

static const shoal_type_t log_type, log_delta_type;
static int violations; /* deltas merged with a hole before them (out of causal order) */

static log_t *log_make(const shoal_type_t *t, int64_t start, const int64_t *v, size_t n)
{
    log_t *l = calloc(1, sizeof *l);
    l->base.type = t;
    l->start = start;
    l->v = calloc(n ? n : 1, sizeof *l->v);
    if (n)
        memcpy(l->v, v, n * sizeof *v);
    l->n = n;
    return l;
}

static void log_append(log_t *l, int64_t x)
{
    l->v = realloc(l->v, (l->n + 1) * sizeof *l->v);
    l->v[l->n++] = x;
}

static shoal_crdt_t *log_create(void)
{
    return &log_make(&log_type, 0, NULL, 0)->base;
}

static void log_destroy(shoal_crdt_t *s)
{
    log_t *l = (log_t *)s;
    if (l->pending)
        log_destroy(&l->pending->base);
    free(l->v);
    free(l);
}

static shoal_crdt_t *log_clone(const shoal_crdt_t *s)
{
    const log_t *l = (const log_t *)s;
    return &log_make(s->type, l->start, l->v, l->n)->base;
}

/* Writes o's entries (at o->start) into l (at l->start); they must overlap or touch l's. */
static int log_cover(log_t *l, const log_t *o)
{
    int64_t end = l->start + (int64_t)l->n;
    if (o->start > end || o->start + (int64_t)o->n < l->start) {
        violations++;
        return SHOAL_EINVAL;
    }
    if (o->start < l->start) { /* a delta group growing to the left */
        log_t *m = log_make(l->base.type, o->start, o->v, o->n);
        for (int64_t p = o->start + (int64_t)o->n; p < end; p++)
            log_append(m, l->v[p - l->start]);
        free(l->v);
        l->v = m->v;
        l->n = m->n;
        l->start = m->start;
        free(m);
        return 0;
    }
    for (size_t i = 0; i < o->n; i++)
        if (o->start + (int64_t)i >= end)
            log_append(l, o->v[i]);
    return 0;
}

/* Log ⊔ Log: the longer (one writer: one is a prefix of the other); LogDelta ⊔ LogDelta: the
   group of both. */
static int log_merge(shoal_crdt_t *s, const shoal_crdt_t *o)
{
    return log_cover((log_t *)s, (const log_t *)o);
}

static const shoal_crdt_t *log_delta(const shoal_crdt_t *s)
{
    const log_t *l = (const log_t *)s;
    return l->pending ? &l->pending->base : NULL;
}

static shoal_crdt_t *log_take_delta(shoal_crdt_t *s)
{
    log_t *l = (log_t *)s;
    shoal_crdt_t *d = l->pending ? &l->pending->base : NULL;
    l->pending = NULL;
    return d;
}

static int log_merge_delta(shoal_crdt_t *s, const shoal_crdt_t *d)
{
    return log_cover((log_t *)s, (const log_t *)d);
}

static int log_encode(const shoal_crdt_t *s, shoal_buf_t *out)
{
    const log_t *l = (const log_t *)s;
    if (s->type == &log_delta_type)
        shoal_buf_append(out, &l->start, sizeof l->start);
    if (l->n)
        shoal_buf_append(out, l->v, l->n * sizeof *l->v);
    return 0;
}

static int log_decode(const shoal_type_t *t, const uint8_t *d, size_t len, shoal_crdt_t **out)
{
    int64_t start = 0;
    if (t == &log_delta_type) {
        if (len < sizeof start)
            return SHOAL_EDECODE;
        memcpy(&start, d, sizeof start);
        d += sizeof start;
        len -= sizeof start;
    }
    if (len % sizeof(int64_t) || start < 0)
        return SHOAL_EDECODE;
    log_t *l = log_make(t, start, NULL, 0);
    for (size_t i = 0; i < len / sizeof(int64_t); i++) {
        int64_t x;
        memcpy(&x, d + i * sizeof x, sizeof x);
        log_append(l, x);
    }
    *out = &l->base;
    return 0;
}

static int log_decode_state(const uint8_t *d, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    return log_decode(&log_type, d, len, out);
}

static int log_decode_delta(const uint8_t *d, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    return log_decode(&log_delta_type, d, len, out);
}

static int log_render(const shoal_crdt_t *s, shoal_buf_t *out)
{
    const log_t *l = (const log_t *)s;
    shoal_buf_printf(out, "%s(@%lld:", s->type->name, (long long)l->start);
    for (size_t i = 0; i < l->n; i++)
        shoal_buf_printf(out, " %lld", (long long)l->v[i]);
    shoal_buf_printf(out, ")");
    return 0;
}

/* A delta type: no empty value of its own (create NULL, as ORSetDelta's). */
static const shoal_type_t log_delta_type = {.name = "CustomDeltaSpec.LogDelta",
                                            .tag = 171,
                                            .format_version = 1,
                                            .destroy = log_destroy,
                                            .clone = log_clone,
                                            .merge = log_merge,
                                            .encode_payload = log_encode,
                                            .decode_payload = log_decode_delta,
                                            .render = log_render};
static const shoal_type_t log_type = {.name = "CustomDeltaSpec.Log",
                                      .tag = 170,
                                      .format_version = 1,
                                      .delta_type = &log_delta_type,
                                      .delta_causal = true,
                                      .create = log_create,
                                      .destroy = log_destroy,
                                      .clone = log_clone,
                                      .merge = log_merge,
                                      .delta = log_delta,
                                      .take_delta = log_take_delta,
                                      .merge_delta = log_merge_delta,
                                      .encode_payload = log_encode,
                                      .decode_payload = log_decode_state,
                                      .render = log_render};

/* Appends *(int64_t *)arg entries (their values: positions * 10), recording the delta. */
static int append_fn(shoal_crdt_t *v, void *arg)
{
    log_t *l = (log_t *)v;
    int64_t k = *(int64_t *)arg;
    if (!l->pending)
        l->pending = log_make(&log_delta_type, (int64_t)l->n, NULL, 0);
    for (int64_t i = 0; i < k; i++) {
        int64_t x = (int64_t)l->n * 10;
        log_append(l, x);
        log_append(l->pending, x);
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    assert_int_equal(shoal_type_register(&log_delta_type), 0);
    assert_int_equal(shoal_type_register(&log_type), 0);
    return 0;
}

/* Node i's local value of key rendered into out ("(none)" when missing); its type in *type. */
static void local_value(tcluster_t *c, int i, const char *key, shoal_buf_t *out,
                        const shoal_type_t **type)
{
    shoal_consistency_t l = c_local();
    shoal_crdt_t *v = NULL;
    shoal_buf_reset(out);
    *type = NULL;
    if (shoal_replicator_get_sync(c->rep[i], key, NULL, &l, &v) == 0 && v) {
        *type = shoal_crdt_type(v);
        shoal_crdt_render(v, out);
    } else
        shoal_buf_printf(out, "(none)");
    shoal_crdt_destroy(&v);
}

typedef struct {
    tcluster_t *c;
    const char *key;
    int node;
    const char *want; /* rendering of the writer's value */
} same_t;

static bool holds_writers_value(void *arg)
{
    same_t *s = arg;
    shoal_buf_t b = {0};
    const shoal_type_t *t;
    local_value(s->c, s->node, s->key, &b, &t);
    bool ok = t == &log_type && strcmp(shoal_buf_cstr(&b), s->want) == 0;
    shoal_buf_free(&b);
    return ok;
}

/* Every node holds a Log equal to node 0's (the writer's); fails naming the first that does
   not, with what it holds. */
static void expect_converged(tcluster_t *c, const char *key, int timeout_ms)
{
    shoal_buf_t want = {0}, got = {0};
    const shoal_type_t *t;
    local_value(c, 0, key, &want, &t);
    assert_ptr_equal(t, &log_type);
    for (int i = 1; i < c->n; i++) {
        same_t s = {c, key, i, shoal_buf_cstr(&want)};
        if (!wait_until(holds_writers_value, &s, timeout_ms)) {
            local_value(c, i, key, &got, &t);
            shoal_replicator_stats_t st;
            shoal_replicator_stats(c->rep[i], &st);
            print_error("node %d holds %s (type %s), the writer %s; wrong_type %llu malformed "
                        "%llu gaps %llu\n",
                        i, shoal_buf_cstr(&got), t ? t->name : "none", shoal_buf_cstr(&want),
                        (unsigned long long)st.dropped_wrong_type,
                        (unsigned long long)st.dropped_malformed,
                        (unsigned long long)st.delta_gaps);
            shoal_buf_free(&want);
            shoal_buf_free(&got);
            fail();
        }
    }
    shoal_buf_free(&want);
    shoal_buf_free(&got);
}

/* Settings where only deltas carry updates (gossip far away), so that a full state cannot
   hide a delta the replicator mishandled. */
static void deltas_only(shoal_replicator_settings_t *s)
{
    tcluster_fast_settings(s);
    s->gossip_interval_ms = 60000;
    s->delta_interval_ms = 50;
}

/* Updates on node 0 reach two replicas that do not have the key yet, then more updates reach
   them as deltas merged into the Log they hold. */
static void deltas_build_the_value_everywhere(void **state)
{
    (void)state;
    violations = 0;
    static tcluster_t c;
    shoal_replicator_settings_t s;
    deltas_only(&s);
    tcluster_start(&c, 3, &s);
    shoal_consistency_t l = c_local();
    for (int64_t k = 1; k <= 4; k++) {
        assert_int_equal(
            shoal_replicator_update_typed_sync(c.rep[0], "log", &log_type, &l, append_fn, &k), 0);
        expect_converged(&c, "log", 3000);
    }
    /* several updates between two delta ticks travel as one delta group */
    for (int64_t k = 1; k <= 5; k++)
        assert_int_equal(
            shoal_replicator_update_typed_sync(c.rep[0], "log", &log_type, &l, append_fn, &k), 0);
    expect_converged(&c, "log", 3000);
    for (int i = 1; i < 3; i++) {
        shoal_replicator_stats_t st;
        shoal_replicator_stats(c.rep[i], &st);
        assert_int_equal(st.dropped_wrong_type, 0);
        assert_int_equal(st.dropped_malformed, 0);
    }
    assert_int_equal(violations, 0);
    tcluster_stop(&c);
}

/* A node that joins after the key's first deltas were shipped and dropped gets later deltas
   whose numbers do not start at 1: a causal type's delta must not be applied to an empty value
   then (a hole); the replica asks for full state and then takes deltas in order. */
static void late_replica_waits_for_full_state(void **state)
{
    (void)state;
    violations = 0;
    static tcluster_t c;
    shoal_replicator_settings_t s;
    deltas_only(&s);
    tcluster_start(&c, 2, &s);
    shoal_consistency_t l = c_local();
    int64_t k = 3;
    assert_int_equal(
        shoal_replicator_update_typed_sync(c.rep[0], "log", &log_type, &l, append_fn, &k), 0);
    expect_converged(&c, "log", 3000);
    tcluster_add(&c);
    for (k = 1; k <= 3; k++) {
        assert_int_equal(
            shoal_replicator_update_typed_sync(c.rep[0], "log", &log_type, &l, append_fn, &k), 0);
        expect_converged(&c, "log", 5000);
    }
    assert_int_equal(violations, 0);
    tcluster_stop(&c);
}

/* Forged delta propagation: node 2 (the origin) sends node 1 the deltas of one log in a random
   order, some of them twice, some as groups. */
typedef struct {
    tcluster_t *c;
    const char *key;
    const shoal_crdt_t *delta;
    uint64_t from_seq, to_seq;
} forged_delta_t;

static int forge_delta(shoal_system_t *sys, void *arg)
{
    forged_delta_t *f = arg;
    shoal_buf_t enc = {0};
    assert_int_equal(shoal_crdt_encode(f->delta, &enc), 0);
    Shoal__Replicator__DeltaEntry e = SHOAL__REPLICATOR__DELTA_ENTRY__INIT;
    e.key = (char *)f->key;
    e.delta.data = enc.data;
    e.delta.len = enc.len;
    e.from_seq = f->from_seq;
    e.to_seq = f->to_seq;
    Shoal__Replicator__DeltaEntry *ep = &e;
    Shoal__Replicator__DeltaPropagation m = SHOAL__REPLICATOR__DELTA_PROPAGATION__INIT;
    m.role = (char *)"";
    m.entries = &ep;
    m.n_entries = 1;
    size_t n = shoal__replicator__delta_propagation__get_packed_size(&m);
    uint8_t *buf = malloc(n);
    shoal__replicator__delta_propagation__pack(&m, buf);
    int rc = shoal_system_send(sys, shoal_system_self(f->c->sys[1]), K_DELTA, buf, n);
    free(buf);
    shoal_buf_free(&enc);
    return rc;
}

typedef struct {
    tcluster_t *c;
    const char *key;
    size_t want_n; /* entries node 1 must hold */
} len_wait_t;

static bool node1_has_entries(void *arg)
{
    len_wait_t *w = arg;
    shoal_consistency_t l = c_local();
    shoal_crdt_t *v = NULL;
    bool ok = shoal_replicator_get_sync(w->c->rep[1], w->key, NULL, &l, &v) == 0 && v &&
              shoal_crdt_type(v) == &log_type && ((log_t *)v)->n == w->want_n;
    shoal_crdt_destroy(&v);
    return ok;
}

#define FORGED_DELTAS 12

static void reordered_and_duplicated_deltas(void **state)
{
    (void)state;
    uint64_t seed = prop_seed();
    prop_rng_t rng;
    static tcluster_t c;
    shoal_replicator_settings_t s;
    deltas_only(&s);
    tcluster_start(&c, 3, &s);
    for (int round = 0; round < 5; round++) {
        violations = 0;
        char key[32];
        snprintf(key, sizeof key, "forged-%d", round);
        prop_rng_init(&rng, seed + (uint64_t)round);
        /* the origin's log and its numbered deltas 1..FORGED_DELTAS */
        shoal_crdt_t *full = log_create();
        shoal_crdt_t *deltas[FORGED_DELTAS + 1] = {0};
        for (int i = 1; i <= FORGED_DELTAS; i++) {
            int64_t k = 1 + (int64_t)prop_below(&rng, 3);
            append_fn(full, &k);
            deltas[i] = log_take_delta(full);
        }
        /* a schedule: every delta once at a random place, a third of them twice, and some
           groups of two or three consecutive ones */
        typedef struct {
            uint64_t from, to;
        } slot_t;
        slot_t sched[3 * FORGED_DELTAS];
        size_t ns = 0;
        for (uint64_t i = 1; i <= FORGED_DELTAS; i++) {
            sched[ns++] = (slot_t){i, i};
            if (prop_chance(&rng, 1, 3))
                sched[ns++] = (slot_t){i, i};
            if (i + 2 <= FORGED_DELTAS && prop_chance(&rng, 1, 4))
                sched[ns++] = (slot_t){i, i + 1 + prop_below(&rng, 2)};
        }
        for (size_t i = ns - 1; i > 0; i--) {
            size_t j = prop_below(&rng, i + 1);
            slot_t t = sched[i];
            sched[i] = sched[j];
            sched[j] = t;
        }
        for (size_t i = 0; i < ns; i++) {
            shoal_crdt_t *g = shoal_crdt_clone(deltas[sched[i].from]);
            for (uint64_t q = sched[i].from + 1; q <= sched[i].to; q++)
                assert_int_equal(shoal_crdt_merge(g, deltas[q]), 0);
            forged_delta_t f = {&c, key, g, sched[i].from, sched[i].to};
            assert_int_equal(shoal_system_call(c.sys[2], forge_delta, &f), 0);
            shoal_crdt_destroy(&g);
        }
        /* then everything once more in order, as one group: node 1 ends with the whole log */
        shoal_crdt_t *all = shoal_crdt_clone(deltas[1]);
        for (int i = 2; i <= FORGED_DELTAS; i++)
            assert_int_equal(shoal_crdt_merge(all, deltas[i]), 0);
        forged_delta_t f = {&c, key, all, 1, FORGED_DELTAS};
        assert_int_equal(shoal_system_call(c.sys[2], forge_delta, &f), 0);
        len_wait_t w = {&c, key, ((log_t *)full)->n};
        bool ok = wait_until(node1_has_entries, &w, 3000);
        shoal_buf_t got = {0}, want = {0};
        const shoal_type_t *t;
        local_value(&c, 1, key, &got, &t);
        shoal_crdt_render(full, &want);
        if (!ok || t != &log_type || strcmp(shoal_buf_cstr(&got), shoal_buf_cstr(&want)) != 0 ||
            violations) {
            print_error("seed %" PRIu64 " round %d: node 1 holds %s (type %s), want %s; %d deltas "
                        "applied out of order\n",
                        seed, round, shoal_buf_cstr(&got), t ? t->name : "none",
                        shoal_buf_cstr(&want), violations);
            fail();
        }
        shoal_buf_free(&got);
        shoal_buf_free(&want);
        shoal_crdt_destroy(&all);
        shoal_crdt_destroy(&full);
        for (int i = 1; i <= FORGED_DELTAS; i++)
            shoal_crdt_destroy(&deltas[i]);
    }
    shoal_replicator_stats_t st;
    shoal_replicator_stats(c.rep[1], &st);
    assert_true(st.delta_gaps > 0); /* the schedules did reorder */
    assert_int_equal(st.dropped_wrong_type, 0);
    tcluster_stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(deltas_build_the_value_everywhere, tcluster_teardown),
        cmocka_unit_test_teardown(late_replica_waits_for_full_state, tcluster_teardown),
        cmocka_unit_test_teardown(reordered_and_duplicated_deltas, tcluster_teardown),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
