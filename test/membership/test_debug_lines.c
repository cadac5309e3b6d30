/*  test_debug_lines.c — what `--log-level debug` shows an operator over a join, a cut and a leave
    (issue 37, item 4): the InitJoin exchange with the seeds and its answers, the leader's
    convergence, the split-brain resolver's inputs and its decision, and the leave.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "members.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
    shoal_replicator_t *data;
} mnode_t;

static mnode_t nodes[3];
static char eps[3][64];

/* every line logged, by any node thread, kept for the test thread to search */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char *log_text;
static size_t log_len, log_cap;

static void capture(shoal_log_level_t level, const char *message, void *arg)
{
    (void)arg;
    (void)level;
    size_t n = strlen(message);
    pthread_mutex_lock(&log_mu);
    if (log_len + n + 2 > log_cap) {
        size_t cap = (log_cap ? log_cap * 2 : 1 << 16) + n + 2;
        char *p = realloc(log_text, cap);
        if (!p)
            abort();
        log_text = p;
        log_cap = cap;
    }
    memcpy(log_text + log_len, message, n);
    log_len += n;
    log_text[log_len++] = '\n';
    log_text[log_len] = 0;
    pthread_mutex_unlock(&log_mu);
}

static bool logged(const char *what)
{
    pthread_mutex_lock(&log_mu);
    bool found = log_text && strstr(log_text, what);
    pthread_mutex_unlock(&log_mu);
    return found;
}

static bool logged_pred(void *arg)
{
    return logged(arg);
}

/* waits for a line containing `what`; on a timeout the log goes with the failure */
static void must_log(const char *what, int timeout_ms)
{
    if (wait_until(logged_pred, (void *)what, timeout_ms))
        return;
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "no line with \"%s\"; the log:\n%s\n", what, log_text ? log_text : "");
    pthread_mutex_unlock(&log_mu);
    fail();
}

static void stop_nodes(void)
{
    for (int i = 0; i < 3; i++) {
        shoal_cluster_destroy(&nodes[i].cl);
        shoal_replicator_destroy(&nodes[i].data);
        shoal_system_destroy(&nodes[i].sys);
    }
    memset(nodes, 0, sizeof nodes);
}

static int teardown(void **state)
{
    stop_nodes();
    shoal_log_set_handler(NULL, NULL);
    shoal_log_set_level(SHOAL_LOG_INFO);
    pthread_mutex_lock(&log_mu);
    free(log_text);
    log_text = NULL;
    log_len = log_cap = 0;
    pthread_mutex_unlock(&log_mu);
    return tcluster_teardown(state);
}

static void start_member(int i, const shoal_cluster_settings_t *s)
{
    snprintf(eps[i], sizeof eps[i], "tcp://127.0.0.1:%d", tfree_port());
    int rc = tmember_start_joined(eps[i], s, i ? eps[0] : NULL, &nodes[i].sys, &nodes[i].cl,
                                  &nodes[i].data);
    if (rc != 0)
        fail_msg("node %d cannot start at %s: %s", i, eps[i], shoal_strerror(rc));
}

static bool three_up(void *arg)
{
    (void)arg;
    return tmember_all_up(nodes[0].cl, 3) && tmember_all_up(nodes[1].cl, 3) &&
           tmember_all_up(nodes[2].cl, 3);
}

static void test_join_cut_and_leave_at_debug(void **state)
{
    (void)state;
    shoal_log_set_handler(capture, NULL);
    shoal_log_set_level(SHOAL_LOG_DEBUG);
    shoal_cluster_settings_t s;
    tmember_settings(&s);
    s.sbr_strategy = SHOAL_SBR_KEEP_MAJORITY;
    for (int i = 0; i < 3; i++)
        start_member(i, &s);
    int t = 20000 * tscale();
    assert_true(wait_until(three_up, NULL, t));
    /* the join: what the joiners sent, what the seed answered, the leader's convergence */
    must_log("InitJoin to seed", t);
    must_log(": Ack (welcome, this node Up)", t);
    must_log("(leader): converged: leader actions run", t);

    /* node 2 cut off both ways: the resolver's inputs, then its decision (keep-majority: the two
       down node 2) */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(nodes[0].sys, eps[2], &cut), 0);
    assert_int_equal(shoal_system_fault(nodes[1].sys, eps[2], &cut), 0);
    assert_int_equal(shoal_system_fault(nodes[2].sys, NULL, &cut), 0);
    must_log("split-brain resolver: the unreachable members changed to 1", t);
    must_log("keep-majority; decision: down-unreachable, 1 to down", t);

    /* the leave of node 1: the leader's moves show */
    assert_int_equal(shoal_cluster_leave(nodes[1].cl, shoal_system_self(nodes[1].sys)), 0);
    must_log("-> Exiting", t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_join_cut_and_leave_at_debug, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
