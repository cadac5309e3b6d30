/*  test_shard_cli.c — shoal-cluster's shard commands as an operator runs them, against three
    sharding members in their own processes (test/cluster/prog_shard): shards, check, move (the
    entity answers from the new member), a rebalance round that leaves pinned shards where they
    are, the pins kept by a new coordinator after the old one's host was killed, unpin (a
    rebalance then moves them), check finding a member that cannot be reached, and events
    streaming the moves and the member's end until interrupted.

    The tool is the release build/bin/shoal-cluster run through the shell; the members are
    driven for asks with the commands of shardprocs.h. Waits are conditions with deadlines.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "shardprocs.h"
#include "sharding.h"
#include "tools.h"

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N       3
#define NSHARDS 40
#define NPIN    4

static pid_t pids[N];
static int ports[N];
static shoal_client_t *clients[N];
static char workdir[PATH_MAX];
static char tool[PATH_MAX];
static char out[1 << 16];

static void spawn(int i, int seed)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = 0;
    char prog[PATH_MAX + 16], events[PATH_MAX + 16], err_path[PATH_MAX + 32];
    snprintf(prog, sizeof prog, "%s/prog_shard", dirname(self));
    snprintf(events, sizeof events, "%s/events", workdir);
    snprintf(err_path, sizeof err_path, "%s/member%d.err", workdir, i);
    ports[i] = tfree_port();
    assert_true(ports[i] > 0);
    char port[16], seedp[16], shards[32];
    snprintf(port, sizeof port, "%d", ports[i]);
    snprintf(seedp, sizeof seedp, "%d", seed);
    snprintf(shards, sizeof shards, "shards=%d", NSHARDS);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        tproc_die_with_parent();
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 1);
        int errfd = open(err_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (errfd >= 0)
            dup2(errfd, 2);
        execl(prog, prog, port, seedp, events, shards, (char *)NULL);
        _exit(127);
    }
    pids[i] = pid;
}

/* A shardprocs.h command to member i; its reply in o. */
static int cmd(int i, char *o, size_t cap, const char *fmt, ...)
{
    o[0] = 0;
    if (!clients[i]) {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ports[i]);
        int err = 0;
        clients[i] = shoal_client_new(ep, 2000 * (uint32_t)tscale(), &err);
        if (!clients[i])
            return err ? err : SHOAL_ENOTCONN;
    }
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    shoal_buf_t reply = {0};
    uint16_t kind = 0;
    int rc = shoal_client_request(clients[i], SHARDPROCS_KIND_CMD, text, strlen(text), &kind,
                                  &reply, 3000 * (uint32_t)tscale());
    if (rc == 0)
        snprintf(o, cap, "%s", shoal_buf_cstr(&reply));
    else
        shoal_client_destroy(&clients[i]); /* a late reply must not be taken for the next */
    shoal_buf_free(&reply);
    return rc;
}

static bool healthy(void *arg)
{
    char o[64];
    return cmd(*(int *)arg, o, sizeof o, "healthy") == 0 && o[0] == '1';
}

/* The port of the member that answered entity eid (asked through member via), -1 on error. */
static int answered_from(int via, const char *eid)
{
    char o[512];
    if (cmd(via, o, sizeof o, "ask %d %s", 2000 * tscale(), eid) != 0)
        return -1;
    char id[64];
    int pid = 0, port = -1;
    long long count = 0;
    if (sscanf(o, "%63s ok %d %d %lld", id, &pid, &port, &count) != 4)
        return -1;
    return port;
}

typedef struct {
    int via;
    const char **eids;
    size_t n;
    int port;  /* every entity answers from here */
    bool away; /* ... or: at least one answers from elsewhere */
} answer_cond_t;

static bool answers(void *arg)
{
    answer_cond_t *c = arg;
    size_t at = 0;
    for (size_t k = 0; k < c->n; k++) {
        int p = answered_from(c->via, c->eids[k]);
        if (p < 0)
            return false;
        at += p == c->port;
    }
    return c->away ? at < c->n : at == c->n;
}

/* shoal-cluster --node (member via) ARGS; the exit code, the output in `out`. */
static int sc(int via, const char *fmt, ...)
{
    char args[1024], line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "--node tcp://127.0.0.1:%d --timeout %d %s", ports[via],
             3000 * tscale(), args);
    return ttool_run(tool, line, out, sizeof out);
}

typedef struct {
    int via;
    const char *args;
    int code;         /* the exit code wanted */
    const char *text; /* in the output (NULL: anything) */
} sc_cond_t;

static bool sc_gives(void *arg)
{
    sc_cond_t *c = arg;
    return sc(c->via, "%s", c->args) == c->code && (!c->text || strstr(out, c->text));
}

static void wait_sc(int via, const char *args, int code, const char *text, int timeout_ms)
{
    sc_cond_t c = {via, args, code, text};
    if (!wait_until(sc_gives, &c, timeout_ms))
        fail_msg("shoal-cluster %s via member %d: no exit %d with '%s' within %d ms; last:\n%s",
                 args, via, code, text ? text : "", timeout_ms, out);
}

static bool file_has(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    static char buf[1 << 18];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, what) != NULL;
}

typedef struct {
    const char *path, *what;
} file_cond_t;

static bool file_cond(void *arg)
{
    file_cond_t *c = arg;
    return file_has(c->path, c->what);
}

static void wait_file(const char *path, const char *what, int timeout_ms)
{
    file_cond_t c = {path, what};
    if (!wait_until(file_cond, &c, timeout_ms)) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        if (f)
            fclose(f);
        out[n] = 0;
        fail_msg("%s: no '%s' within %d ms:\n%s", path, what, timeout_ms, out);
    }
}

static int setup(void **state)
{
    (void)state;
    snprintf(workdir, sizeof workdir, "/tmp/shoal-shardcli-XXXXXX");
    assert_non_null(mkdtemp(workdir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++) {
        shoal_client_destroy(&clients[i]);
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
    }
    char rm[PATH_MAX + 16];
    snprintf(rm, sizeof rm, "rm -rf %s", workdir);
    if (system(rm) != 0)
        fprintf(stderr, "could not remove %s\n", workdir);
    return 0;
}

static void test_move_pin_check_events(void **state)
{
    (void)state;
    assert_true(ttool_find("shoal-cluster", tool, sizeof tool));
    int T = 30000 * tscale();
    spawn(0, 0);
    spawn(1, ports[0]);
    spawn(2, ports[0]);
    for (int i = 0; i < N; i++)
        if (!wait_until(healthy, &i, T))
            fail_msg("member %d: its region did not register with the coordinator", i);

    /* entities in NPIN distinct shards, started where the coordinator puts them */
    const char *eids[NPIN];
    char shard_of[NPIN][SHOAL_SHARD_ID_MAX + 1];
    static char names[NPIN][24];
    size_t n = 0;
    for (int k = 0; n < NPIN && k < 1000; k++) {
        snprintf(names[n], sizeof names[n], "acct-%d", k);
        shoal_sharding_default_shard_id(names[n], NSHARDS, shard_of[n]);
        bool dup = false;
        for (size_t j = 0; j < n; j++)
            dup |= strcmp(shard_of[j], shard_of[n]) == 0;
        if (!dup) {
            eids[n] = names[n];
            n++;
        }
    }
    assert_int_equal(n, NPIN);
    for (size_t k = 0; k < NPIN; k++)
        assert_true(answered_from(1, eids[k]) > 0);

    /* the map, as a table and as JSON; a healthy cluster checks clean */
    wait_sc(1, "shards counter", 0, shard_of[0], T);
    assert_non_null(strstr(out, "coordinator 127.0.0.1:"));
    assert_int_equal(sc(1, "--json shards"), 0);
    assert_non_null(strstr(out, "{\"types\":[{\"type\":\"counter\""));
    wait_sc(1, "check", 0, "[OK] 3 members Up", T);

    /* events, streamed by a background shoal-cluster from member 1 */
    char events_log[PATH_MAX + 32], node_arg[64];
    snprintf(events_log, sizeof events_log, "%s/events.out", workdir);
    snprintf(node_arg, sizeof node_arg, "tcp://127.0.0.1:%d", ports[1]);
    char *ev_argv[] = {tool, "--node", node_arg, "--json", "events", NULL};
    pid_t watcher = ttool_spawn(tool, ev_argv, events_log);
    assert_true(watcher > 0);

    /* usage and refusals */
    assert_int_equal(sc(1, "move counter 1"), 2);
    assert_int_equal(sc(1, "move counter %s 127.0.0.1:1", shard_of[0]), 1);
    assert_non_null(strstr(out, "no region of counter registered at 127.0.0.1:1"));
    assert_int_equal(sc(1, "shards nosuchtype"), 1);
    assert_non_null(strstr(out, "no entity type nosuchtype"));
    assert_int_equal(sc(1, "unpin counter %s", shard_of[0]), 1);
    assert_non_null(strstr(out, "not pinned"));

    /* every one of them pinned to member 2, through member 1 (not the coordinator's node) */
    for (size_t k = 0; k < NPIN; k++) {
        int rc = sc(1, "move counter %s 127.0.0.1:%d", shard_of[k], ports[2]);
        if (rc != 0)
            fail_msg("move %s: exit %d:\n%s", shard_of[k], rc, out);
        assert_non_null(strstr(out, "pinned"));
    }
    answer_cond_t at2 = {0, eids, NPIN, ports[2], false};
    if (!wait_until(answers, &at2, T))
        fail_msg("the moved entities do not answer from member 2");
    assert_int_equal(sc(0, "--json shards counter"), 0);
    char pinned[64];
    snprintf(pinned, sizeof pinned, "\"pinned\":\"127.0.0.1:%d\"", ports[2]);
    assert_non_null(strstr(out, pinned));

    /* a rebalance round: four shards on member 2 and none elsewhere would be moved by the
       least-shards strategy, but pinned shards stay */
    wait_sc(0, "rebalance counter", 0, "rebalance of counter:", T);
    assert_non_null(strstr(out, ": 0 shards moving"));
    assert_true(answers(&at2));
    wait_file(events_log, "\"event\":\"shard-pinned\"", T);
    wait_file(events_log, "\"event\":\"shard-moved\"", T);

    /* the coordinator's host (member 0, the oldest) killed: check finds it at once, and the
       new coordinator has the pins (its rebalance rounds move none of the four) */
    kill(pids[0], SIGKILL);
    waitpid(pids[0], NULL, 0);
    pids[0] = 0;
    shoal_client_destroy(&clients[0]);
    int rc = sc(1, "check");
    if (rc != 1)
        fail_msg("check with a member killed: exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "[ERR] member "));
    wait_sc(1, "rebalance counter", 0, "rebalance of counter:", 3 * T);
    assert_non_null(strstr(out, ": 0 shards moving"));
    answer_cond_t still2 = {1, eids, NPIN, ports[2], false};
    if (!wait_until(answers, &still2, T))
        fail_msg("the pinned entities left member 2 after the coordinator moved");
    assert_int_equal(sc(1, "--json shards counter"), 0);
    assert_non_null(strstr(out, pinned));

    /* unpinned, a rebalance round moves some of them to member 1 */
    for (size_t k = 0; k < NPIN; k++) {
        rc = sc(1, "unpin counter %s", shard_of[k]);
        if (rc != 0)
            fail_msg("unpin %s: exit %d:\n%s", shard_of[k], rc, out);
    }
    assert_int_equal(sc(1, "--json shards counter"), 0);
    assert_null(strstr(out, "\"pinned\""));
    wait_sc(1, "rebalance counter", 0, "rebalance of counter:", T);
    answer_cond_t away = {1, eids, NPIN, ports[2], true};
    if (!wait_until(answers, &away, T))
        fail_msg("no unpinned entity moved off member 2 after a rebalance; last:\n%s", out);

    /* the watcher saw the member go and the unpins; interrupted, it exits 0 */
    wait_file(events_log, "\"event\":\"shard-unpinned\"", T);
    wait_file(events_log, "\"event\":\"unreachable\"", T);
    kill(watcher, SIGINT);
    int st = 0;
    assert_int_equal(waitpid(watcher, &st, 0), watcher);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_move_pin_check_events, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
