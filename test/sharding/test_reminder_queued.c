/*  test_reminder_queued.c — a reminder scheduled again in its own receive keeps firing when the
    schedule's write waits behind the shard's writes in flight (group commit of saves, issue 40
    section 2).

    The payments example's flows do exactly this: the "retry" reminder schedules itself again
    in its receive, and the other flows of the shard keep the shard's writes busy. With group
    commit a save issued while the shard's write slots are taken waits in the shard's queue and
    is not in the local replica yet. fire() decided "handled, not scheduled again" by looking at
    the local replica after the receive: it still held the entry that had just fired, so it
    forgot the new schedule and wrote a delete stamped after it, which won. The retry stopped
    after one firing, so a sanctions check or a settlement lost in the crash was never sent
    again (70-98 payments failed at their deadline instead of 40; settlements missing from the
    ledgers).

    Three members on loopback, entity state on, every entity of the test in one shard. Each
    entity, in the receive of its reminder, saves twice (taking both write slots of the shard)
    and then schedules the reminder again, ROUNDS times. Every entity must see ROUNDS firings,
    each with the reminder's message, and then read back its last save. A second check: a
    reliable message (a producer's) whose receive saves nothing makes the shard save the entity's
    stored bytes again with the producer's number; with saves of it still queued, those bytes
    must be the newest saved, not the replica's older ones.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "members.h"
#include "shards.h"

#define NODES    3
#define ENTITIES 4
#define ROUNDS   6

static shoal_region_t *rg[NODES];
static int fired[ENTITIES], bad_msg[ENTITIES];

typedef struct {
    int n;
} q_state_t;

static int index_of(const shoal_entity_t *e)
{
    return atoi(shoal_entity_id(e) + 1); /* "e<k>" */
}

static void *q_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    q_state_t *q = calloc(1, sizeof *q);
    size_t n = 0;
    const char *d = shoal_entity_stored(e, &n);
    if (d && n) {
        char b[32];
        snprintf(b, sizeof b, "%.*s", (int)n, d);
        q->n = atoi(b);
    }
    return q;
}

static void save_n(shoal_entity_t *e, int n)
{
    char b[32];
    int l = snprintf(b, sizeof b, "%d", n);
    assert_int_equal(shoal_entity_save(e, b, (size_t)l, NULL, NULL), 0);
}

static void q_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)arg;
    q_state_t *q = state;
    int k = index_of(e);
    if (shoal_entity_reminder(e)) {
        if (len != 4 || memcmp(msg, "tick", 4) != 0)
            __atomic_add_fetch(&bad_msg[k], 1, __ATOMIC_SEQ_CST);
        q->n = __atomic_add_fetch(&fired[k], 1, __ATOMIC_SEQ_CST);
        /* two writes of the shard's key in flight: what follows waits for a slot */
        save_n(e, q->n * 1000);
        save_n(e, q->n);
        if (q->n < ROUNDS)
            assert_int_equal(shoal_entity_remind(e, "tick", 30, "tick", 4, NULL, NULL), 0);
        return;
    }
    if (len == 3 && memcmp(msg, "arm", 3) == 0) {
        assert_int_equal(shoal_entity_remind(e, "tick", 30, "tick", 4, NULL, NULL), 0);
        shoal_entity_save_reply(e, "0", 1, "armed", 5);
    } else if (len == 3 && memcmp(msg, "get", 3) == 0) {
        size_t n = 0;
        const void *d = shoal_entity_stored(e, &n);
        shoal_entity_reply(e, d, n);
    } else if (len > 4 && memcmp(msg, "set:", 4) == 0) {
        /* three saves: two in flight, the newest queued behind them */
        char num[32]; /* the message is not NUL-terminated: atoi must not read past it */
        snprintf(num, sizeof num, "%.*s", (int)(len - 4), (const char *)msg + 4);
        q->n = atoi(num);
        save_n(e, q->n + 1000);
        save_n(e, q->n + 2000);
        save_n(e, q->n);
    }
    /* anything else ("noop") saves nothing */
}

static void q_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)arg;
    free(state);
}

static const shoal_entity_fns_t q_fns = {q_start, q_receive, q_stop, NULL};

static void one_shard(const char *eid, uint32_t n, char *out, void *arg)
{
    (void)eid;
    (void)n;
    (void)arg;
    strcpy(out, "one");
}

static void start_cluster(void)
{
    tsnode_start_cluster(NODES, &(tsnode_opts_t){.no_region = true});
    for (int i = 0; i < NODES; i++) {
        shoal_sharding_settings_t s;
        tshard_settings(&s);
        s.stop_message = NULL;
        s.stop_message_len = 0;
        s.entity_state = true;
        s.shard_id = one_shard;
        int err = 0;
        rg[i] = shoal_region_start(tsn[i].sh, "queued", &s, &q_fns, NULL, &err);
        assert_non_null(rg[i]);
    }
}

static bool all_fired(void *arg)
{
    (void)arg;
    for (int k = 0; k < ENTITIES; k++)
        if (__atomic_load_n(&fired[k], __ATOMIC_SEQ_CST) < ROUNDS)
            return false;
    return true;
}

static int stored_of(int k, char *out, size_t cap)
{
    char id[16];
    snprintf(id, sizeof id, "e%d", k);
    shoal_buf_t b = {0};
    int rc = shoal_region_ask_sync(rg[2], id, "get", 3, 5000, &b);
    snprintf(out, cap, "%.*s", (int)b.len, b.data ? (const char *)b.data : "");
    shoal_buf_free(&b);
    return rc;
}

static void rescheduled_reminder_keeps_firing(void **state)
{
    (void)state;
    memset(fired, 0, sizeof fired);
    memset(bad_msg, 0, sizeof bad_msg);
    start_cluster();
    shoal_buf_t b = {0};
    for (int k = 0; k < ENTITIES; k++) {
        char id[16];
        snprintf(id, sizeof id, "e%d", k);
        int rc = SHOAL_ETIMEOUT;
        for (int t = 0; t < 20 && rc != 0; t++)
            rc = shoal_region_ask_sync(rg[1], id, "arm", 3, 5000, &b);
        assert_int_equal(rc, 0);
    }
    shoal_buf_free(&b);
    bool ok = wait_until(all_fired, NULL, 15000);
    char line[128] = "";
    for (int k = 0; k < ENTITIES; k++)
        snprintf(line + strlen(line), sizeof line - strlen(line), " e%d:%d", k,
                 __atomic_load_n(&fired[k], __ATOMIC_SEQ_CST));
    print_message("firings of %d rounds:%s\n", ROUNDS, line);
    if (!ok)
        fail_msg("a reminder scheduled again in its receive stopped firing:%s", line);
    for (int k = 0; k < ENTITIES; k++) {
        assert_int_equal(fired[k], ROUNDS);
        assert_int_equal(bad_msg[k], 0);
        char got[32], want[32];
        snprintf(want, sizeof want, "%d", ROUNDS);
        assert_int_equal(stored_of(k, got, sizeof got), 0);
        assert_string_equal(got, want);
    }
}

typedef struct {
    int done, ok;
} tally_t;

static tally_t tally;

static void on_confirmed(shoal_producer_t *p, const char *entity_id, uint64_t seq, int status,
                         const void *reply, size_t len, void *arg)
{
    (void)p;
    (void)entity_id;
    (void)seq;
    (void)reply;
    (void)len;
    (void)arg;
    __atomic_add_fetch(&tally.ok, status == 0, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&tally.done, 1, __ATOMIC_SEQ_CST);
}

#define RELIABLE_ROUNDS 15

static bool round_confirmed(void *arg)
{
    return __atomic_load_n(&tally.done, __ATOMIC_SEQ_CST) == *(int *)arg;
}

/* A reliable message whose receive saves nothing right behind one whose saves still wait: the
   shard stores the entity's bytes again with the producer's number, and those bytes must be
   the newest saved ones. */
static void resave_behind_queued_saves_keeps_the_newest(void **state)
{
    (void)state;
    start_cluster();
    shoal_buf_t b = {0};
    for (int k = 0; k < ENTITIES; k++) {
        char id[16];
        snprintf(id, sizeof id, "e%d", k);
        int rc = SHOAL_ETIMEOUT;
        for (int t = 0; t < 20 && rc != 0; t++)
            rc = shoal_region_ask_sync(rg[1], id, "get", 3, 5000, &b);
        assert_int_equal(rc, 0);
    }
    shoal_buf_free(&b);
    memset(&tally, 0, sizeof tally);
    int err = 0;
    shoal_producer_t *p = shoal_producer_new(rg[1], "q-prod", NULL, on_confirmed, NULL, &err);
    assert_non_null(p);
    int sent = 0, wrong = 0;
    for (int r = 1; r <= RELIABLE_ROUNDS; r++) {
        for (int k = 0; k < ENTITIES; k++) {
            char id[16], m[32];
            snprintf(id, sizeof id, "e%d", k);
            int l = snprintf(m, sizeof m, "set:%d", r);
            assert_int_equal(shoal_producer_send(p, id, m, (size_t)l, NULL), 0);
            assert_int_equal(shoal_producer_send(p, id, "noop", 4, NULL), 0);
            sent += 2;
        }
        if (!wait_until(round_confirmed, &sent, 20000))
            fail_msg("round %d: %d of %d reliable messages confirmed", r, tally.done, sent);
        for (int k = 0; k < ENTITIES; k++) {
            char got[32], want[32];
            snprintf(want, sizeof want, "%d", r);
            assert_int_equal(stored_of(k, got, sizeof got), 0);
            if (strcmp(got, want) != 0) {
                print_message("round %d: e%d stored %s, saved %s last\n", r, k, got, want);
                wrong++;
            }
        }
    }
    shoal_producer_destroy(&p);
    assert_int_equal(tally.ok, sent);
    print_message("%d of %d stored states not the newest saved\n", wrong,
                  RELIABLE_ROUNDS * ENTITIES);
    assert_int_equal(wrong, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(rescheduled_reminder_keeps_firing, tsnode_teardown),
        cmocka_unit_test_teardown(resave_behind_queued_saves_keeps_the_newest, tsnode_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
