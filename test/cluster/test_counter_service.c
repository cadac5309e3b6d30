/*  test_counter_service.c — the sharded service an operator drives by hand (issue 37, item 2):
    docs/operations.md's walkthrough, run as written. The test takes the sh block that follows the
    marker "<!-- test_counter_service runs the next sh block -->", puts free ports in place of
    4001-4003 and 8558-8560 and its own directory in place of /tmp/counters, and runs it with
    `sh -e` from the source tree (the block puts build/bin on PATH): three counter-service node
    processes started in the background, tell and ask from the shell, shoal-cluster shards, move,
    rebalance, check, a refused move of shard 999, unpin. It checks what the walkthrough says
    they print: the value 125 answered from the member the shard was moved to. Then, the members
    still running, a move the test chooses (to a member that is not the shard's home, so a real
    handoff) through shoal-cluster, the value asked again through another member (it survived
    and answers from the new home), and the management endpoint's shard map (what the dashboard
    draws) with the pin.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "http.h"
#include "sharding.h"
#include "tools.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MARKER "<!-- test_counter_service runs the next sh block -->"

static char workdir[PATH_MAX];
static pid_t script_pgid;
static char out[1 << 16];
static char *text; /* what the walkthrough printed (freed at teardown, the test failed or not) */

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

/* s with every `from` replaced by `to` (a new string). */
static char *replace_all(char *s, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), n = 0;
    for (const char *p = strstr(s, from); p; p = strstr(p + fl, from))
        n++;
    char *r = malloc(strlen(s) + n * (tl + 1) + 1), *w = r;
    assert_non_null(r);
    const char *p = s, *q;
    while ((q = strstr(p, from))) {
        memcpy(w, p, (size_t)(q - p));
        w += q - p;
        memcpy(w, to, tl);
        w += tl;
        p = q + fl;
    }
    strcpy(w, p);
    free(s);
    return r;
}

/* The sh block after MARKER in docs/operations.md. */
static char *walkthrough(void)
{
    char path[PATH_MAX];
    ttool_tree_file("docs/operations.md", path, sizeof path);
    char *doc = read_file(path);
    if (!doc)
        fail_msg("cannot read %s", path);
    char *m = strstr(doc, MARKER);
    if (!m)
        fail_msg("%s: no '%s'", path, MARKER);
    char *start = strstr(m, "```sh\n");
    assert_non_null(start);
    start += 6;
    char *end = strstr(start, "\n```");
    assert_non_null(end);
    char *block = strndup(start, (size_t)(end - start) + 1);
    assert_non_null(block);
    free(doc);
    return block;
}

static int run_tool(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_tool(const char *name, const char *fmt, ...)
{
    char tool[PATH_MAX], args[1024];
    assert_true(ttool_find(name, tool, sizeof tool));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return ttool_run(tool, args, out, sizeof out);
}

static void need(const char *in, const char *what)
{
    if (!strstr(in, what))
        fail_msg("no '%s' in:\n%s", what, in);
}

static void test_walkthrough(void **state)
{
    (void)state;
    char tool[PATH_MAX], root[PATH_MAX];
    assert_true(ttool_find("counter-service", tool, sizeof tool));
    assert_true(ttool_find("shoal-cluster", tool, sizeof tool));
    assert_true(ttool_source_root("counter-service", root, sizeof root));
    /* the walkthrough names alice's shard: the default shard id of "alice" among 100 */
    char shard[SHOAL_SHARD_ID_MAX + 1];
    shoal_sharding_default_shard_id("alice", 100, shard);
    assert_string_equal(shard, "80");

    int port[3], http[3];
    for (int i = 0; i < 3; i++) {
        port[i] = tfree_port();
        http[i] = tfree_port();
        assert_true(port[i] > 0 && http[i] > 0);
    }
    char *script = walkthrough();
    for (int i = 0; i < 3; i++) {
        char from[32], to[32];
        snprintf(from, sizeof from, "127.0.0.1:%d", 4001 + i);
        snprintf(to, sizeof to, "127.0.0.1:%d", port[i]);
        script = replace_all(script, from, to);
        snprintf(from, sizeof from, "--http %d", 8558 + i);
        snprintf(to, sizeof to, "--http %d", http[i]);
        script = replace_all(script, from, to);
    }
    script = replace_all(script, "/tmp/counters", workdir);
    for (int i = 0; i < 3; i++) { /* nothing of the documented ports left */
        char p[16];
        snprintf(p, sizeof p, ":%d", 4001 + i);
        if (strstr(script, p))
            fail_msg("port %d left in the script:\n%s", 4001 + i, script);
    }

    /* the script in a process group of its own: its background members stay in it */
    char log[PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/walkthrough.out", workdir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        if (chdir(root) != 0 || !freopen(log, "w", stdout) || dup2(1, 2) < 0)
            _exit(126);
        execl("/bin/sh", "sh", "-ec", script, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    script_pgid = pid;
    free(script);
    int st = 0;
    int64_t until = shoal_now_ms() + 120000;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (shoal_now_ms() > until) {
            text = read_file(log);
            fail_msg("the walkthrough did not end within 120 s:\n%s", text ? text : "");
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    text = read_file(log);
    assert_non_null(text);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the walkthrough failed (status %d):\n%s", st, text);

    /* what the docs say it prints */
    char line[256];
    need(text, "told\n");
    need(text, "125 (account alice, shard 80, on 127.0.0.1:");
    snprintf(line, sizeof line, "shard 80 of account is on 127.0.0.1:%d:", port[2]);
    need(text, line);
    snprintf(line, sizeof line, "125 (account alice, shard 80, on 127.0.0.1:%d)\n", port[2]);
    char *moved = strstr(text, "shard 80 of account is on");
    need(moved, line); /* asked after the move: answered from its new home, the value kept */
    need(text, "rebalance of account: ");
    need(text, "[OK] 3 members Up; 2 entity types");
    need(text, "account has no shard '999': its shards are 0 to 99 (number-of-shards 100");
    need(text, "refused\n");
    need(text, "shard 80 unpinned");

    /* a handoff the test chooses: from its home (port[2]) to the first member, asked through
       the second */
    int rc = run_tool("shoal-cluster", "--node tcp://127.0.0.1:%d move account 80 127.0.0.1:%d",
                      port[1], port[0]);
    if (rc != 0)
        fail_msg("move account 80 to the first member: exit %d:\n%s", rc, out);
    snprintf(line, sizeof line, "handed off from 127.0.0.1:%d:", port[2]);
    need(out, line);
    rc = run_tool("counter-service", "--node tcp://127.0.0.1:%d ask account alice get", port[1]);
    snprintf(line, sizeof line, "125 (account alice, shard 80, on 127.0.0.1:%d)", port[0]);
    if (rc != 0 || !strstr(out, line))
        fail_msg("ask after the second move: exit %d:\n%s", rc, out);
    /* counters are their own type: a new one starts at 0 */
    rc = run_tool("counter-service", "--node tcp://127.0.0.1:%d ask counter alice add 2", port[2]);
    const char *want2 = "2 (counter alice, shard 80, on 127.0.0.1:";
    if (rc != 0 || strncmp(out, want2, strlen(want2)) != 0)
        fail_msg("ask counter alice add 2: exit %d:\n%s", rc, out);
    /* refusals: an unknown message, an unknown type, usage */
    rc = run_tool("counter-service", "--node tcp://127.0.0.1:%d ask account alice frobnicate",
                  port[0]);
    if (rc != 1 || !strstr(out, "does not know 'frobnicate'"))
        fail_msg("an unknown message: exit %d:\n%s", rc, out);
    rc = run_tool("counter-service", "--node tcp://127.0.0.1:%d tell nosuch alice get", port[0]);
    if (rc != 1 || !strstr(out, "no entity type 'nosuch'"))
        fail_msg("an unknown type: exit %d:\n%s", rc, out);
    assert_int_equal(run_tool("counter-service", "ask account alice"), 2);

    /* the management endpoint: the map the dashboard draws, with the pin; the dashboard itself */
    thttp_resp_t r;
    assert_true(thttp_get((uint16_t)http[1], "/cluster/shards/account", &r));
    assert_int_equal(r.status, 200);
    snprintf(line, sizeof line, "\"pinned\":\"127.0.0.1:%d\"", port[0]);
    need(r.body, line);
    need(r.body, "\"number_of_shards\":100");
    thttp_free(&r);
    assert_int_equal(thttp_status((uint16_t)http[2], "/"), 200);
    /* a shipped node program: its /metrics passes promtool, with the types' counters */
    assert_true(thttp_get((uint16_t)http[0], "/metrics", &r));
    need(r.body, "shoal_sharding_tells_total{type=\"account\"}");
    const char *complaint = thttp_promtool(r.body);
    if (complaint)
        fail_msg("promtool check metrics: %s", complaint);
    thttp_free(&r);
}

static int setup(void **state)
{
    (void)state;
    snprintf(workdir, sizeof workdir, "/tmp/shoal-counters-XXXXXX");
    assert_non_null(mkdtemp(workdir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (script_pgid > 0) {
        /* the members outlive the script (reparented): the group goes as a whole */
        kill(-script_pgid, SIGKILL);
        waitpid(script_pgid, NULL, WNOHANG);
        int64_t until = shoal_now_ms() + 10000;
        while (kill(-script_pgid, 0) == 0 && shoal_now_ms() < until) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        script_pgid = 0;
    }
    free(text);
    text = NULL;
    trm_tree(workdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_walkthrough, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
