/*  test_clock_skew_procs.c — shoal_node_clock_skew_seconds between real processes, one of them
    with its wall clock skewed by libfaketime (as tools/chaos.py skews its nodes; the monotonic
    clock left alone).

    skewed_member_seen_over_http: three shoal-members on loopback, the third under
      FAKETIME=+30s. GET /metrics of each of the other two members reports the gauge at 30 s ± 1 s
      (each hears the skewed member's pushes: membership's, or the replicator's probe within
      15 s), and the skewed member reports it too (it hears theirs). Skipped when libfaketime is
      not installed (Debian's faketime package; tools/install-deps.sh installs it). Then
      `shoal-cluster check` has a finding "... and a peer have wall clocks 30.0 s apart" and exits
      1.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "http.h"
#include "procs.h"
#include "tools.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_MS 30000 /* the probe comes within 15 s of a member's start; slow builds */
#define SKEW_S      30

static const char *const faketime_libs[] = {
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
};

static const char *faketime_lib(void)
{
    for (size_t i = 0; i < sizeof faketime_libs / sizeof *faketime_libs; i++)
        if (access(faketime_libs[i], R_OK) == 0)
            return faketime_libs[i];
    return NULL;
}

typedef struct {
    uint16_t port;
    double value; /* the last reading, -1 when none */
} gauge_wait_t;

static bool gauge_near_skew(void *arg)
{
    gauge_wait_t *g = arg;
    thttp_resp_t r = {0};
    g->value = -1;
    if (thttp_get(g->port, "/metrics", &r) && r.status == 200) {
        const char *p = strstr(r.body, "\nshoal_node_clock_skew_seconds ");
        if (p)
            g->value = strtod(p + strlen("\nshoal_node_clock_skew_seconds "), NULL);
    }
    thttp_free(&r);
    return g->value >= SKEW_S - 1 && g->value <= SKEW_S + 1;
}

static void skewed_member_seen_over_http(void **state)
{
    (void)state;
    const char *lib = faketime_lib();
    if (!lib) {
        print_message("libfaketime is not installed: skipped\n");
        skip();
    }
    char tool[PATH_MAX];
    if (!ttool_find("shoal-member", tool, sizeof tool))
        fail_msg("shoal-member is not built (build/bin/shoal-member)");
    char tmp[] = "/tmp/shoal-skew-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    int ports[6];
    for (int i = 0; i < 6; i++) {
        bool again;
        do { /* six distinct ports */
            ports[i] = tfree_port();
            again = false;
            for (int k = 0; k < i; k++)
                again |= ports[k] == ports[i];
        } while (again);
    }
    int *port = ports, *http = ports + 3;
    pid_t pid[3] = {0};
    char seed[64];
    snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", port[0]);
    for (int i = 0; i < 3; i++) {
        char bind[64], hp[16], log[PATH_MAX];
        snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port[i]);
        snprintf(hp, sizeof hp, "%d", http[i]);
        snprintf(log, sizeof log, "%s/member%d.log", tmp, i);
        char preload[PATH_MAX + 16], fake[32];
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lib);
        snprintf(fake, sizeof fake, "FAKETIME=+%ds", SKEW_S);
        char *plain[] = {tool, "--bind", bind, "--seed", seed, "--http", hp, NULL};
        char *skewed[] = {"/usr/bin/env", preload,  fake, "FAKETIME_DONT_FAKE_MONOTONIC=1",
                          tool,           "--bind", bind, "--seed",
                          seed,           "--http", hp,   NULL};
        pid[i] = i == 2 ? ttool_spawn("/usr/bin/env", skewed, log) : ttool_spawn(tool, plain, log);
        assert_true(pid[i] > 0);
    }
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) {
        gauge_wait_t g = {(uint16_t)http[i], -1};
        ok = wait_until(gauge_near_skew, &g, DEADLINE_MS);
        print_message("member %d%s: shoal_node_clock_skew_seconds %.3f\n", i,
                      i == 2 ? " (FAKETIME=+30s)" : "", g.value);
        if (!ok)
            print_message("member %d never read %d s ± 1 (logs in %s)\n", i, SKEW_S, tmp);
    }
    /* shoal-cluster check names each member as a finding (over 1 s) and exits 1 */
    char cli[PATH_MAX];
    static char out[1 << 16];
    int rc = -1;
    if (ok && ttool_find("shoal-cluster", cli, sizeof cli)) {
        rc = ttool_runf(cli, out, sizeof out, "--node tcp://127.0.0.1:%d --timeout 10000 check",
                        port[0]);
        print_message("shoal-cluster check: exit %d\n%s", rc, out);
        ok = rc == 1 && strstr(out, "and a peer have wall clocks 30.0 s apart") &&
             strstr(out, "Runbook: ShoalClockSkew");
    }
    for (int i = 0; i < 3; i++) {
        kill(pid[i], SIGKILL);
        waitpid(pid[i], NULL, 0);
    }
    if (ok)
        trm_tree(tmp);
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(skewed_member_seen_over_http),
    };
    return cmocka_run_group_tests_name("clock_skew_procs", tests, NULL, NULL);
}
