/*  test_member_service.c — shoal-member as a service manager sees it (docs/deployment.md,
    "Running shoal-member as a service"): real processes of the release build, driven with
    shoal-cluster the way an operator does.

    downed_exits_3_leaver_exits_0: three members; the one downed by `shoal-cluster down` exits 3
      (so that systemd's Restart=on-failure starts it again), the one told `shoal-cluster leave`
      exits 0, and the last one, stopped by SIGTERM, exits 0.
    ready_waits_for_up_and_majority: systemd's notify protocol under a listener of this test (an
      AF_UNIX datagram socket named by NOTIFY_SOCKET, as systemd sets it for Type=notify). The
      member's configuration needs 2 members before anyone is moved to Up (min-nr-of-members):
      alone it sends STATUS= lines saying it is not up, and WATCHDOG=1 every half WATCHDOG_USEC,
      but no READY=1; once a second member joins, READY=1 arrives and shoal-cluster says the
      member is Up. SIGTERM then gives STOPPING=1 and exit 0.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "procs.h"
#include "tools.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_MS 20000
#define OUT_CAP     16384

static pid_t kids[4];
static char dir[64];

static int teardown(void **state)
{
    (void)state;
    tproc_kill_all(kids, 4);
    if (dir[0])
        trm_tree(dir);
    dir[0] = 0;
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    return 0;
}

static void find(const char *name, char *path, size_t cap)
{
    if (!ttool_find(name, path, cap))
        fail_msg("build/bin/%s is not built", name);
}

static pid_t start_member(const char *member, int port, int seed_port, const char *config,
                          const char *log)
{
    char bind[64], seed[64];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", seed_port);
    char *argv[12] = {(char *)"shoal-member", "--bind", bind, "--seed", seed, "--fast", "--quiet"};
    int n = 7;
    if (config) {
        argv[n++] = "--config";
        argv[n++] = (char *)config;
    }
    argv[n] = NULL;
    pid_t pid = ttool_spawn(member, argv, log);
    assert_true(pid > 0);
    return pid;
}

/* The member list as one node sees it contains `want` (a line of shoal-cluster members). */
static bool members_say(const char *cluster, int port, const char *addr, const char *status)
{
    static char out[OUT_CAP];
    if (ttool_runf(cluster, out, sizeof out, "--node tcp://127.0.0.1:%d --timeout 2000 members",
                   port) != 0)
        return false;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, addr) && strstr(line, status))
            return true;
    return false;
}

static void wait_members_say(const char *cluster, int port, const char *addr, const char *status)
{
    int64_t end = shoal_now_ms() + (int64_t)DEADLINE_MS * tscale();
    while (!members_say(cluster, port, addr, status)) {
        if (shoal_now_ms() > end)
            fail_msg("node at port %d never listed %s as %s", port, addr, status);
        usleep(100 * 1000);
    }
}

/* The exit code of pid, waited for up to the deadline (-1: killed by a signal). */
static int wait_exit(pid_t pid)
{
    int64_t end = shoal_now_ms() + (int64_t)DEADLINE_MS * tscale();
    for (;;) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            for (int i = 0; i < 4; i++)
                if (kids[i] == pid)
                    kids[i] = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        if (shoal_now_ms() > end)
            fail_msg("process %d did not exit within %d ms", (int)pid, DEADLINE_MS * tscale());
        usleep(50 * 1000);
    }
}

static void test_downed_exits_3_leaver_exits_0(void **state)
{
    (void)state;
    char member[4200], cluster[4200];
    find("shoal-member", member, sizeof member);
    find("shoal-cluster", cluster, sizeof cluster);
    int ports[3];
    for (int i = 0; i < 3; i++) {
        ports[i] = tfree_port();
        for (int j = 0; j < i; j++)
            if (ports[j] == ports[i])
                ports[i] = tfree_port(), j = -1;
        kids[i] = start_member(member, ports[i], ports[0], NULL, NULL);
    }
    char addr[3][32];
    for (int i = 0; i < 3; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d ", ports[i]);
        wait_members_say(cluster, ports[0], addr[i], " Up ");
    }
    char out[OUT_CAP];
    /* downed by the cluster: 3, a failure for the supervisor */
    assert_int_equal(ttool_runf(cluster, out, sizeof out, "--node tcp://127.0.0.1:%d down %.*s",
                                ports[0], (int)strlen(addr[1]) - 1, addr[1]),
                     0);
    assert_int_equal(wait_exit(kids[1]), 3);
    /* a leave asked for by the operator: 0 */
    assert_int_equal(ttool_runf(cluster, out, sizeof out, "--node tcp://127.0.0.1:%d leave %.*s",
                                ports[0], (int)strlen(addr[2]) - 1, addr[2]),
                     0);
    assert_int_equal(wait_exit(kids[2]), 0);
    /* SIGTERM (systemctl stop): a graceful leave, 0 */
    kill(kids[0], SIGTERM);
    assert_int_equal(wait_exit(kids[0]), 0);
}

/* ---------------------------------------------------------------------------------------------
 * The notify listener: what systemd does for a Type=notify service, reduced to reading datagrams
 */
typedef struct {
    int fd;
    bool ready, stopping, status_not_up;
    int watchdogs, statuses;
    char last_status[512];
} listener_t;

/* Reads the datagrams that arrive within ms; each is a set of KEY=VALUE lines. */
static void listen_for(listener_t *l, int ms)
{
    int64_t end = shoal_now_ms() + ms;
    for (;;) {
        int64_t left = end - shoal_now_ms();
        if (left <= 0)
            return;
        struct pollfd p = {l->fd, POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        char buf[4096];
        ssize_t n = recv(l->fd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = 0;
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
            if (strcmp(line, "READY=1") == 0)
                l->ready = true;
            else if (strcmp(line, "STOPPING=1") == 0)
                l->stopping = true;
            else if (strcmp(line, "WATCHDOG=1") == 0)
                l->watchdogs++;
            else if (strncmp(line, "STATUS=", 7) == 0) {
                l->statuses++;
                snprintf(l->last_status, sizeof l->last_status, "%s", line + 7);
                if (strstr(line, "not ready") && strstr(line, "not up"))
                    l->status_not_up = true;
            } else
                fail_msg("unknown notification '%s'", line);
        }
    }
}

static void test_ready_waits_for_up_and_majority(void **state)
{
    (void)state;
    char member[4200], cluster[4200];
    find("shoal-member", member, sizeof member);
    find("shoal-cluster", cluster, sizeof cluster);
    snprintf(dir, sizeof dir, "/tmp/shoal-service-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char config[100], sock[100], log[100];
    snprintf(config, sizeof config, "%s/shoal.cfg", dir);
    snprintf(sock, sizeof sock, "%s/notify", dir);
    snprintf(log, sizeof log, "%s/a.log", dir);
    FILE *f = fopen(config, "w");
    assert_non_null(f);
    fputs("shoal\n    cluster\n        min-nr-of-members = 2\n", f);
    fclose(f);

    listener_t l = {.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)};
    assert_true(l.fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    assert_int_equal(bind(l.fd, (struct sockaddr *)&a, sizeof a), 0);

    int pa = tfree_port(), pb = tfree_port();
    while (pb == pa)
        pb = tfree_port();
    setenv("NOTIFY_SOCKET", sock, 1);
    setenv("WATCHDOG_USEC", "400000", 1); /* WATCHDOG=1 every 200 ms */
    kids[0] = start_member(member, pa, pa, config, log);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");

    /* alone: Joining, waiting for a second member; it says so, and is not ready */
    int64_t end = shoal_now_ms() + (int64_t)DEADLINE_MS * tscale();
    while (!l.status_not_up || l.watchdogs < 3) {
        if (shoal_now_ms() > end)
            fail_msg("no STATUS saying not up, or fewer than 3 WATCHDOG=1 (%d); last status '%s'",
                     l.watchdogs, l.last_status);
        listen_for(&l, 100);
    }
    char addr_a[32];
    snprintf(addr_a, sizeof addr_a, "127.0.0.1:%d ", pa);
    wait_members_say(cluster, pa, addr_a, " Joining ");
    listen_for(&l, 500); /* two readiness checks more: still no READY=1 */
    assert_false(l.ready);
    assert_true(members_say(cluster, pa, addr_a, " Joining "));

    /* a second member: both are moved to Up, and only now READY=1 */
    kids[1] = start_member(member, pb, pa, NULL, NULL);
    end = shoal_now_ms() + (int64_t)DEADLINE_MS * tscale();
    while (!l.ready) {
        if (shoal_now_ms() > end)
            fail_msg("no READY=1 after the second member joined; last status '%s'", l.last_status);
        listen_for(&l, 100);
    }
    assert_true(members_say(cluster, pa, addr_a, " Up "));
    assert_non_null(strstr(l.last_status, "ready (serves MAJORITY)"));
    int before = l.watchdogs;
    listen_for(&l, 500);
    assert_true(l.watchdogs > before); /* the node thread keeps sending it */

    kill(kids[0], SIGTERM);
    assert_int_equal(wait_exit(kids[0]), 0);
    listen_for(&l, 200);
    assert_true(l.stopping);
    close(l.fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_downed_exits_3_leaver_exits_0, teardown),
        cmocka_unit_test_teardown(test_ready_waits_for_up_and_majority, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
