/*  test_kill.c — separate node processes: one is killed with SIGKILL in the middle of majority
    writes; the others keep serving majority operations, and nothing acknowledged is lost.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "ddata.h"

#include <arpa/inet.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <stdbool.h>
#include <unistd.h>

#define N 3

/* Children still running when the test ends (or fails) are killed, never left behind. */
static pid_t children[N];

static void kill_children(void)
{
    tproc_kill_all(children, N);
}

static shoal_client_t *cl[N];

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        shoal_client_destroy(&cl[i]);
    kill_children();
    return 0;
}

static shoal_client_op_t incr = {.type = "GCounter", .op = "increment", .n = 1};

static void test_sigkill_during_majority_writes(void **state)
{
    (void)state;
    int ports[N];
    pid_t pids[N];
    FILE *outs[N];
    int started = tproc_start_mesh("prog_node", N, false, ports, pids, outs);
    memcpy(children, pids, sizeof children);
    assert_int_equal(started, 0);
    for (int i = 0; i < N; i++) {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ports[i]);
        int err = 0;
        cl[i] = shoal_client_new(ep, 5000, &err);
        assert_non_null(cl[i]);
    }
    shoal_consistency_t maj = c_majority(2000);
    /* wait until every node counts both others (prog_node adds a peer when its handshake is
       done): a node that counts nobody yet takes MAJORITY as itself alone, and its writes die
       with it (under load node 2's first 50 writes were acknowledged that way, then lost) */
    for (int i = 0; i < N; i++) {
        unsigned long long peers = 0;
        for (int tries = 0; tries < 200 && peers < N - 1; tries++) {
            shoal_buf_t st = {0};
            if (shoal_client_stats(cl[i], "", &st) == 0) {
                const char *p = strstr(shoal_buf_cstr(&st), "\nnode_peers ");
                if (p)
                    peers = strtoull(p + 12, NULL, 10);
            }
            shoal_buf_free(&st);
            if (peers < N - 1)
                usleep(50000);
        }
        assert_int_equal(peers, N - 1);
    }
    int rc = -1;
    for (int tries = 0; tries < 200 && rc != 0; tries++) {
        rc = shoal_client_update(cl[0], "", "warmup", &maj, &incr);
        if (rc != 0)
            usleep(50000);
    }
    assert_int_equal(rc, 0);
    uint64_t acked = 0, attempted = 0;
    for (int k = 0; k < 150; k++) {
        attempted++;
        int st = shoal_client_update(cl[k % N], "", "paid", &maj, &incr);
        if (st == 0)
            acked++;
        else
            print_error("write %d through node %d: %s\n", k, k % N, shoal_strerror(st));
    }
    assert_int_equal(acked, 150);
    /* kill node 2 without warning, then keep writing through the survivors */
    kill(pids[2], SIGKILL);
    waitpid(pids[2], NULL, 0);
    pids[2] = children[2] = 0;
    for (int k = 0; k < 150; k++) {
        attempted++;
        rc = shoal_client_update(cl[k % 2], "", "paid", &maj, &incr);
        if (rc == 0)
            acked++;
        else
            print_error("write %d through node %d (port %d): %s\n", k, k % 2, ports[k % 2], shoal_strerror(rc));
    }
    /* a majority (2 of 3) remains: every write is acknowledged */
    assert_int_equal(acked, 300);
    /* the admin class: a survivor's counters, as a tool reads them */
    shoal_buf_t stats = {0};
    assert_int_equal(shoal_client_stats(cl[0], "", &stats), 0);
    assert_non_null(strstr(shoal_buf_cstr(&stats), "replicator_updates "));
    assert_non_null(strstr(shoal_buf_cstr(&stats), "node_frames_in "));
    shoal_buf_free(&stats);
    for (int i = 0; i < 2; i++) {
        shoal_crdt_t *v = NULL;
        assert_int_equal(shoal_client_get(cl[i], "", "paid", &maj, &v), 0);
        assert_non_null(v);
        uint64_t value = shoal_gcounter_value(v);
        if (value < acked || value > attempted)
            print_error("node %d reads %llu; acknowledged %llu of %llu\n", i,
                        (unsigned long long)value, (unsigned long long)acked,
                        (unsigned long long)attempted);
        assert_true(value >= acked && value <= attempted);
        shoal_crdt_destroy(&v);
    }
    for (int i = 0; i < N; i++) {
        shoal_client_destroy(&cl[i]);
        if (pids[i]) {
            kill(pids[i], SIGTERM);
            waitpid(pids[i], NULL, 0);
            children[i] = 0;
        }
        fclose(outs[i]);
    }
}

int main(void)
{
    atexit(kill_children);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sigkill_during_majority_writes, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
