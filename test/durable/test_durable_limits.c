/*  test_durable_limits.c — the durable store against directories it may not use, and a node
    whose store cannot open (test_durable.c has the map cap, corrupt and foreign files).

    This test runs as root, and root ignores permission bits, so "no permission" is made three
    ways: a regular file where the directory is expected; a child process that drops to nobody
    (setuid 65534) before opening a root-owned directory; a child in a mount namespace of its
    own where the directory is a read-only bind mount (skipped where mount namespaces are not
    allowed). Each refusal must be an open that fails with a message naming the directory.
    Then the node level: build/bin/kvstore (release), whose data directory is each of these (and
    one with a corrupt data file), exits 1 with a message and never serves; and a second kvstore
    on the data directory of a running one exits 1 naming the first one's pid, while ddata-dump
    reads the directory beside it, and a kvstore started after the first was SIGKILLed serves.
    And a bound: write-behind changes a store cannot commit (map at its cap) are kept one per
    key, so repeated writes of the same keys during the outage do not grow the queue.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "durable.h"
#include "tools.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOBODY 65534
#define SKIPPED 77 /* a child's exit code: this environment cannot make the case */

typedef enum { AS_ROOT, AS_NOBODY, READ_ONLY_MOUNT } how_t;


static void make_tmp(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/shoal-limits-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_tmp(const char *dir)
{
    trm_tree(dir);
}

static shoal_durable_settings_t settings(const char *dir)
{
    shoal_durable_settings_t s;
    shoal_durable_settings_default(&s);
    s.dir = dir;
    s.nosync = true;
    return s;
}

static shoal_durable_t *open_ok_or_fail(const shoal_durable_settings_t *s)
{
    char err[512];
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    shoal_durable_t *d = shoal_durable_open(s, &open_err);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (!d)
        fail_msg("open %s: %s", s->dir, err);
    return d;
}

static void done_status(void *arg, int status)
{
    *(int *)arg = status;
}

/* An environment with one entry, made by root, so the others have something to refuse. */
static void make_env(const char *dir)
{
    shoal_durable_settings_t s = settings(dir);
    char err[512];
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    shoal_durable_t *d = shoal_durable_open(&s, &open_err);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (!d)
        fail_msg("open %s: %s", dir, err);
    shoal_store_t *st = shoal_durable_store(d, "");
    assert_non_null(st);
    st->store(st->ctx, "k", 1, "v", 1, NULL, NULL);
    shoal_durable_close(&d);
}

/* In a child: become `how` (nobody, or root behind a read-only bind mount of `dir`). Returns
   false when this environment does not allow it. */
static bool become(how_t how, const char *dir)
{
    if (how == AS_NOBODY)
        return setgroups(0, NULL) == 0 && setgid(NOBODY) == 0 && setuid(NOBODY) == 0 &&
               getuid() == NOBODY;
    if (how == READ_ONLY_MOUNT)
        return unshare(CLONE_NEWNS) == 0 &&
               mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) == 0 &&
               mount(dir, dir, "none", MS_BIND, NULL) == 0 &&
               mount("none", dir, "none", MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) == 0;
    return true;
}

/* Runs fn(arg) in a child process that is `how`, its stdout and stderr captured in out.
   Returns its exit code (SKIPPED when `how` could not be made), or -1 when it had to be killed
   at the deadline (still running: it served instead of refusing). */
static int run_child(how_t how, const char *dir, void (*fn)(void *), void *arg, char *out,
                     size_t cap)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        if (!become(how, dir)) {
            fprintf(stderr, "cannot become %d: %s\n", (int)how, strerror(errno));
            _exit(SKIPPED);
        }
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int limit_ms = 60000 * tscale(), rc = -1;
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        int left = limit_ms - (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd p = {fd[0], POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            break;
        }
        ssize_t r = read(fd[0], out + n, cap - 1 - n);
        if (r <= 0) {
            int st = 0;
            waitpid(pid, &st, 0);
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            break;
        }
        n += (size_t)r;
        if (n == cap - 1)
            n = 0; /* keep the end */
    }
    close(fd[0]);
    out[n] = 0;
    return rc;
}

/* Child bodies: open the store and print what happened ("REFUSED <message>" or "OPENED"). */
static void open_store(void *arg)
{
    const char *dir = arg;
    shoal_durable_settings_t s = settings(dir);
    char err[512] = "";
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    shoal_durable_t *d = shoal_durable_open(&s, &open_err);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (d) {
        printf("OPENED\n");
        shoal_durable_close(&d);
    } else {
        printf("REFUSED %s\n", err);
    }
    fflush(stdout);
}

static void expect_open_refused(how_t how, const char *dir, const char *want)
{
    static char out[1 << 16];
    int rc = run_child(how, dir, open_store, (void *)dir, out, sizeof out);
    if (rc == SKIPPED) {
        print_message("case %d skipped: %s", (int)how, out);
        return;
    }
    print_message("case %d, %s: %s", (int)how, dir, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "REFUSED "));
    assert_non_null(strstr(out, dir));
    assert_non_null(strstr(out, want));
}

static void test_open_without_permission(void **state)
{
    (void)state;
    char tmp[64], path[128], sub[160];
    make_tmp(tmp, sizeof tmp);

    /* a regular file where the directory is expected, and a directory under that file */
    snprintf(path, sizeof path, "%s/file", tmp);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a directory\n", f);
    fclose(f);
    expect_open_refused(AS_ROOT, path, "not a directory");
    snprintf(sub, sizeof sub, "%s/ddata", path);
    expect_open_refused(AS_ROOT, sub, "not a directory");

    /* nobody: a root-owned directory without access for others, empty or with an environment,
       and a directory nobody may enter but not write (an environment made by root, 0755) */
    snprintf(path, sizeof path, "%s/private", tmp);
    assert_int_equal(mkdir(path, 0700), 0);
    expect_open_refused(AS_NOBODY, path, "no permission");
    make_env(path);
    expect_open_refused(AS_NOBODY, path, "no permission");
    snprintf(path, sizeof path, "%s/readable", tmp);
    assert_int_equal(mkdir(path, 0755), 0);
    make_env(path);
    assert_int_equal(chmod(tmp, 0755), 0);
    expect_open_refused(AS_NOBODY, path, "no permission");
    /* root, when the directory is on a read-only mount */
    expect_open_refused(READ_ONLY_MOUNT, path, "read-only");
    /* root still opens it in place: the refusals above were about access, not the files */
    {
        shoal_durable_settings_t s = settings(path);
        char err[512];
        int open_err = 0; /* the code; the words in shoal_last_error_detail() */
        shoal_durable_t *d = shoal_durable_open(&s, &open_err);
        if (open_err)
            snprintf(err, sizeof err, "%s", shoal_last_error_detail());
        if (!d)
            fail_msg("root cannot open %s: %s", path, err);
        shoal_durable_close(&d);
    }
    remove_tmp(tmp);
}

/* ---------------------------------------------------------------------------------------------
 * The node level: kvstore with a store it cannot open
 */
static char kvstore[4096];
static int kv_port;

static void exec_kvstore(void *arg)
{
    char bind[64];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", kv_port);
    execl(kvstore, kvstore, "node", "--bind", bind, "--data", (const char *)arg, "--fast",
          (char *)NULL);
    /* EACCES: this user cannot reach the binary at all (a chroot whose /tmp is closed to
       nobody): the environment cannot make the case, which the library-level test covers */
    int e = errno;
    fprintf(stderr, "cannot run %s as uid %d: %s\n", kvstore, (int)getuid(), strerror(e));
    _exit(e == EACCES ? SKIPPED : 127);
}

static bool port_serves(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

static void expect_node_refused(how_t how, const char *dir, const char *want)
{
    static char out[1 << 16];
    kv_port = tfree_port();
    int rc = run_child(how, dir, exec_kvstore, (void *)dir, out, sizeof out);
    if (rc == SKIPPED) {
        print_message("node case %d skipped: %s", (int)how, out);
        return;
    }
    print_message("node case %d, %s: exit %d: %s", (int)how, dir, rc, out);
    assert_int_equal(rc, 1); /* refused: not killed at the deadline, not serving */
    assert_non_null(strstr(out, "kvstore: cannot open the store: "));
    assert_non_null(strstr(out, dir));
    assert_non_null(strstr(out, want));
    assert_null(strstr(out, " is Up")); /* it never joined */
    assert_false(port_serves(kv_port));
}

/* Copies the binary at `from` to `to`, executable by everyone: the checkout may sit in a
   directory that nobody (the unprivileged case) cannot enter, such as /root. */
static void copy_executable(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    assert_true(in >= 0);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    assert_true(out >= 0);
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    assert_int_equal(n, 0);
    close(in);
    assert_int_equal(close(out), 0);
}

static void test_node_refuses_a_store_it_cannot_open(void **state)
{
    (void)state;
    char built[4096];
    if (!ttool_find("kvstore", built, sizeof built))
        fail_msg("build/bin/kvstore is missing: scons check builds the examples");
    char tmp[64], path[128];
    make_tmp(tmp, sizeof tmp);
    assert_int_equal(chmod(tmp, 0755), 0);
    snprintf(kvstore, sizeof kvstore, "%s/kvstore", tmp);
    copy_executable(built, kvstore); /* kvstore links libshoal statically */

    snprintf(path, sizeof path, "%s/file", tmp);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    expect_node_refused(AS_ROOT, path, "not a directory");

    snprintf(path, sizeof path, "%s/private", tmp);
    assert_int_equal(mkdir(path, 0700), 0);
    make_env(path);
    expect_node_refused(AS_NOBODY, path, "no permission");
    assert_int_equal(chmod(path, 0755), 0);
    expect_node_refused(AS_NOBODY, path, "no permission");
    expect_node_refused(READ_ONLY_MOUNT, path, "read-only");

    /* a corrupt data file: refused, naming the way out, and left where it is */
    snprintf(path, sizeof path, "%s/corrupt", tmp);
    assert_int_equal(mkdir(path, 0755), 0);
    make_env(path);
    char data[192];
    snprintf(data, sizeof data, "%s/data.mdb", path);
    int fd = open(data, O_WRONLY);
    assert_true(fd >= 0);
    char junk[8192];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)(i * 7 + 13);
    assert_int_equal(pwrite(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
    close(fd);
    expect_node_refused(AS_ROOT, path, "ddata-dump --salvage");
    struct stat sb;
    assert_int_equal(stat(data, &sb), 0);
    remove_tmp(tmp);
}

/* ---------------------------------------------------------------------------------------------
 * The node level: one kvstore per data directory
 */
static pid_t node_running; /* a kvstore started in the background, killed by the teardown */

static pid_t spawn_kvstore(const char *dir, int port)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        kv_port = port;
        exec_kvstore((void *)dir);
    }
    node_running = pid;
    return pid;
}

static bool serves(void *arg)
{
    return port_serves(*(int *)arg);
}

static int kill_node(void **state)
{
    (void)state;
    if (node_running > 0) {
        kill(node_running, SIGKILL);
        waitpid(node_running, NULL, 0);
        node_running = 0;
    }
    return 0;
}

static void test_node_refuses_a_directory_in_use(void **state)
{
    (void)state;
    char built[4096], dump[4096];
    if (!ttool_find("kvstore", built, sizeof built))
        fail_msg("build/bin/kvstore is missing: scons check builds the examples");
    if (!ttool_find("ddata-dump", dump, sizeof dump))
        fail_msg("build/bin/ddata-dump is missing: scons check builds the tools");
    char tmp[64], path[128];
    make_tmp(tmp, sizeof tmp);
    snprintf(kvstore, sizeof kvstore, "%s/kvstore", tmp);
    copy_executable(built, kvstore);
    snprintf(path, sizeof path, "%s/data", tmp);

    int port = tfree_port();
    pid_t first = spawn_kvstore(path, port);
    if (!wait_until(serves, &port, 30000))
        fail_msg("the first kvstore on %s did not start", path);

    /* a second node on the same directory is refused, naming the first one */
    char want[64];
    snprintf(want, sizeof want, "in use by process %ld (lock file ", (long)first);
    expect_node_refused(AS_ROOT, path, want);

    /* ddata-dump opens read-only and takes no lock: it reads the store beside the node */
    char args[160];
    static char out[1 << 14];
    snprintf(args, sizeof args, "'%s'", path);
    int rc = ttool_run(dump, args, out, sizeof out);
    print_message("ddata-dump beside the node: exit %d: %s", rc, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "replicator \"\": "));

    /* SIGKILL: no close runs, yet the kernel dropped the lock: the next node starts */
    assert_int_equal(kill(first, SIGKILL), 0);
    assert_int_equal(waitpid(first, NULL, 0), first);
    node_running = 0;
    port = tfree_port();
    spawn_kvstore(path, port);
    if (!wait_until(serves, &port, 30000))
        fail_msg("no kvstore could start on %s after the first was killed", path);
    kill_node(NULL);
    remove_tmp(tmp);
}

/* ---------------------------------------------------------------------------------------------
 * Write-behind during an outage: one pending change per key
 */
static void count_and_check(void *arg, const char *key, size_t klen, const void *data, size_t len)
{
    (void)key;
    (void)klen;
    size_t *n = arg;
    /* every key holds its last value, whose first byte is 'z' */
    if (len == 2000 && ((const char *)data)[0] == 'z')
        (*n)++;
}

typedef struct {
    shoal_durable_t *d;
    uint64_t retries, puts;
} wait_t;

static bool retried(void *arg)
{
    wait_t *w = arg;
    shoal_durable_stats_t st;
    shoal_durable_stats(w->d, &st);
    return st.retries >= w->retries;
}

static bool all_put(void *arg)
{
    wait_t *w = arg;
    shoal_durable_stats_t st;
    shoal_durable_stats(w->d, &st);
    return st.pending == 0 && st.puts >= w->puts;
}

static void test_write_behind_outage_keeps_one_change_per_key(void **state)
{
    (void)state;
    char tmp[64];
    make_tmp(tmp, sizeof tmp);
    shoal_durable_settings_t s = settings(tmp);
    s.write_behind_ms = 20;
    s.map_size = 64 * 1024;
    s.map_max = 128 * 1024; /* 100 keys of 2000 bytes do not fit */
    shoal_durable_t *d = open_ok_or_fail(&s);
    shoal_store_t *st = shoal_durable_store(d, "");
    static char val[2000];
    wait_t w = {d, 2, 0};
    for (int round = 0; round < 50; round++) {
        memset(val, round == 49 ? 'z' : 'a' + round % 25, sizeof val);
        for (int i = 0; i < 100; i++) {
            char key[32];
            snprintf(key, sizeof key, "k%04d", i);
            int status = 1;
            st->store(st->ctx, key, strlen(key), val, sizeof val, done_status, &status);
            assert_int_equal(status, 0); /* acknowledged at once (write-behind) */
        }
        if (round == 0) /* the commits fail and are retried from here on */
            assert_true(wait_until(retried, &w, 10000));
        shoal_durable_stats_t stats;
        shoal_durable_stats(d, &stats);
        assert_true(stats.pending <= 100);
    }
    shoal_durable_stats_t stats;
    shoal_durable_stats(d, &stats);
    print_message("5000 writes of 100 keys while the map is full: %zu pending, %llu retries\n",
                  stats.pending, (unsigned long long)stats.retries);
    assert_int_equal(stats.puts, 0);
    assert_int_equal(stats.failures, 0);
    /* room again: the last value of every key is committed */
    assert_int_equal(shoal_durable_set_map_max(d, 4u * 1024 * 1024), 0);
    w.puts = 100;
    assert_true(wait_until(all_put, &w, 15000)); /* the next retry is at most 10 s away */
    shoal_durable_close(&d);
    /* no check child: czmq's context exists by now (the store logged the full map), and a child
       forked after that reports it as definitely lost under valgrind when it _exits */
    s.check_on_open = false;
    d = open_ok_or_fail(&s);
    st = shoal_durable_store(d, "");
    size_t n = 0;
    assert_int_equal(st->load(st->ctx, count_and_check, &n), 0);
    assert_int_equal(n, 100);
    shoal_durable_close(&d);
    remove_tmp(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_without_permission),
        cmocka_unit_test(test_node_refuses_a_store_it_cannot_open),
        cmocka_unit_test_teardown(test_node_refuses_a_directory_in_use, kill_node),
        cmocka_unit_test(test_write_behind_outage_keeps_one_change_per_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
