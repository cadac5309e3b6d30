/*  test_backup_restore.c — backup, restore and disaster recovery of durable stores on real
    processes (docs/operations.md, "Backup, restore and disaster recovery"): three kvstore nodes
    (release build/bin/kvstore: LMDB, kept membership) take writes at MAJORITY; each node's store
    is backed up while it runs (`ddata-dump --backup`); every node is killed with SIGKILL and every
    data directory deleted; the backups are restored (`ddata-dump --restore --keep-identity`) and
    the nodes started again: every write acknowledged before the backups is read back at
    MAJORITY. Around it, the rules of restore: never into a non-empty directory, never without
    saying whose identity the directory gets, a new identity differs from the backup's, and a
    backup without its manifest is refused. And the identity rule on a live cluster
    (test_keep_identity_refused_while_live): a running node's backup restored with
    --keep-identity --cluster is refused (exit 4, the member named) while that node runs, and
    accepted once it has left the cluster.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procs.h"
#include "tools.h"

#define OUT_CAP (1u << 20)
#define N       3
#define KEYS    12

static char kv[4096], tool[4096], dump[4096], dir[64];
static char *out;
static int ports[N];
static pid_t pids[N];

#define now_ms ttool_now_ms

static void start(int i)
{
    char bind[64], data[128], seeds[N][64], log[128];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", ports[i]);
    snprintf(data, sizeof data, "%s/kv%d", dir, i);
    snprintf(log, sizeof log, "%s/kv%d.log", dir, i);
    for (int k = 0; k < N; k++)
        snprintf(seeds[k], sizeof seeds[k], "tcp://127.0.0.1:%d", ports[k]);
    pids[i] =
        ttool_spawn(kv,
                    (char *const[]){kv, "node", "--bind", bind, "--seed", seeds[0], "--seed",
                                    seeds[1], "--seed", seeds[2], "--data", data, "--fast", NULL},
                    log);
    assert_true(pids[i] > 0);
}

static void kill_node(int i)
{
    ttool_kill(&pids[i]);
}

#define kvcmd(...)   ttool_runf(kv, out, OUT_CAP, __VA_ARGS__)
#define dumpcmd(...) ttool_runf(dump, out, OUT_CAP, __VA_ARGS__)

static bool wait_up(int i, int up, int timeout_ms)
{
    char args[128];
    snprintf(args, sizeof args, "--node tcp://127.0.0.1:%d --json members", ports[i]);
    for (int64_t end = now_ms() + timeout_ms; now_ms() < end; usleep(100000)) {
        bool converged;
        if (ttool_run(tool, args, out, OUT_CAP) == 0 &&
            ttool_members_up(out, NULL, &converged) == up && converged)
            return true;
    }
    return false;
}

static void dump_logs(void)
{
    ttool_tail_logs(dir, "kv", N, 15);
}

static int setup(void **state)
{
    (void)state;
    out = calloc(1, OUT_CAP);
    if (!ttool_find("kvstore", kv, sizeof kv) || !ttool_find("shoal-cluster", tool, sizeof tool) ||
        !ttool_find("ddata-dump", dump, sizeof dump))
        fail_msg("build/bin/kvstore, shoal-cluster or ddata-dump is missing: scons check builds "
                 "them");
    snprintf(dir, sizeof dir, "/tmp/shoal-backup-XXXXXX");
    assert_non_null(mkdtemp(dir));
    for (int i = 0; i < N; i++)
        ports[i] = tfree_port();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        kill_node(i);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        print_message("could not remove %s\n", dir);
    free(out);
    return 0;
}

/* text has `line` as a whole line */
static bool has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p += n)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0))
            return true;
    return false;
}

static void test_disaster_recovery_from_backups(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        start(i);
    if (!wait_up(0, N, 30000)) {
        dump_logs();
        fail_msg("the three kvstore nodes did not come Up");
    }
    /* acknowledged MAJORITY writes, through every node */
    for (int k = 0; k < KEYS; k++) {
        int rc = kvcmd("put %d key%02d value%02d majority", ports[k % N], k, k);
        if (rc != 0) {
            dump_logs();
            fail_msg("put key%02d at majority: exit %d: %s", k, rc, out);
        }
    }
    /* hot backups, one per node, while the nodes run and take writes */
    for (int i = 0; i < N; i++) {
        assert_int_equal(kvcmd("put %d during%d x local", ports[(i + 1) % N], i), 0);
        int rc = dumpcmd("--backup '%s/bk%d' '%s/kv%d'", dir, i, dir, i);
        if (rc != 0)
            fail_msg("backup of node %d: exit %d: %s", i, rc, out);
        assert_non_null(strstr(out, "backup of "));
        char manifest[256], cmd[1400];
        snprintf(manifest, sizeof manifest, "%s/bk%d/shoal-backup", dir, i);
        snprintf(cmd, sizeof cmd,
                 "grep -qx 'shoal-backup 1' '%s' && grep -qx 'format: shoal-durable 1' '%s' && "
                 "grep -q '^shoal-version: ' '%s' && grep -Eqx 'node-id: [0-9a-f]{32}' '%s'",
                 manifest, manifest, manifest, manifest);
        assert_int_equal(system(cmd), 0);
    }
    /* a backup goes only where there is none */
    assert_int_equal(dumpcmd("--backup '%s/bk0' '%s/kv0'", dir, dir), 2);

    /* the disaster: every node killed, every data directory gone */
    for (int i = 0; i < N; i++)
        kill_node(i);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/kv0' '%s/kv1' '%s/kv2'", dir, dir, dir);
    assert_int_equal(system(cmd), 0);

    /* the rules of restore */
    assert_int_equal(dumpcmd("--restore '%s/bk0' '%s/kv0'", dir, dir), 2);
    assert_non_null(strstr(out, "--keep-identity or --new-identity"));
    assert_int_equal(
        dumpcmd("--restore '%s/bk0' '%s/other' --keep-identity --new-identity", dir, dir), 2);
    /* --keep-identity says how it knows no live member has the identity */
    assert_int_equal(dumpcmd("--restore '%s/bk0' '%s/kv0' --keep-identity", dir, dir), 2);
    assert_non_null(strstr(out, "--cluster-stopped"));
    assert_int_equal(
        dumpcmd("--restore '%s/kv-none' '%s/other' --keep-identity --cluster-stopped", dir, dir),
        2);
    assert_non_null(strstr(out, "no backup manifest"));
    /* another node from node 0's backup: a new identity, said, and not the backup's */
    assert_int_equal(dumpcmd("--restore '%s/bk0' '%s/other' --new-identity", dir, dir), 0);
    char old_id[40] = "", new_id[40] = "";
    const char *p = strstr(out, "NEW identity "), *q = strstr(out, "the backup's was ");
    assert_non_null(p);
    assert_non_null(q);
    assert_int_equal(sscanf(p, "NEW identity %32[0-9a-f]", new_id), 1);
    assert_int_equal(sscanf(q, "the backup's was %32[0-9a-f]", old_id), 1);
    assert_int_equal(strlen(new_id), 32);
    assert_string_not_equal(new_id, old_id);
    /* its kept membership is gone with the old identity; its data is there */
    assert_int_equal(dumpcmd("'%s/other'", dir), 0);
    assert_null(strstr(out, "kept-membership"));
    assert_non_null(strstr(out, "\"key00\" -> \"value00\""));

    /* each node's own backup, its identity kept */
    for (int i = 0; i < N; i++) {
        int rc = dumpcmd("--restore '%s/bk%d' '%s/kv%d' --keep-identity --cluster-stopped", dir, i,
                         dir, i);
        if (rc != 0)
            fail_msg("restore of node %d: exit %d: %s", i, rc, out);
        assert_non_null(strstr(out, "kept"));
        /* restoring over it again is refused: never overwrite */
        assert_int_equal(dumpcmd("--restore '%s/bk%d' '%s/kv%d' --keep-identity --cluster-stopped",
                                 dir, i, dir, i),
                         2);
        assert_non_null(strstr(out, "is not empty"));
        /* the restored store reads clean (no UNDECODABLE: the kept membership is shown) */
        assert_int_equal(dumpcmd("'%s/kv%d'", dir, i), 0);
        assert_null(strstr(out, "UNDECODABLE"));
        assert_non_null(strstr(out, "kept-membership"));
    }
    for (int i = 0; i < N; i++)
        start(i);
    if (!wait_up(0, N, 30000)) {
        dump_logs();
        fail_msg("the restored nodes did not come Up");
    }
    for (int k = 0; k < KEYS; k++) {
        char key[16], want[40];
        snprintf(key, sizeof key, "key%02d", k);
        snprintf(want, sizeof want, "key%02d = value%02d", k, k);
        int rc = -1;
        for (int64_t end = now_ms() + 10000; now_ms() < end; usleep(100000)) {
            rc = kvcmd("get %d %s majority", ports[(k + 1) % N], key);
            if (rc == 0 && has_line(out, want))
                break;
        }
        if (rc != 0 || !has_line(out, want)) {
            dump_logs();
            fail_msg("after the restore, %s at majority: exit %d: %s", key, rc, out);
        }
    }
}

/* A node's own identity (meta/node-id) from its backup's manifest. */
static void manifest_id(int i, char id[40])
{
    char path[256], line[256];
    snprintf(path, sizeof path, "%s/bk%d/shoal-backup", dir, i);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    *id = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "node-id: %32[0-9a-f]", id) == 1)
            break;
    fclose(f);
    assert_int_equal(strlen(id), 32);
}

static void test_keep_identity_refused_while_live(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        start(i);
    if (!wait_up(0, N, 30000)) {
        dump_logs();
        fail_msg("the three kvstore nodes did not come Up");
    }
    assert_int_equal(kvcmd("put %d k v majority", ports[0]), 0);
    /* node 2's hot backup, restored beside it as if it were a lost node: refused while it runs */
    int rc = dumpcmd("--backup '%s/bk2' '%s/kv2'", dir, dir);
    if (rc != 0)
        fail_msg("backup of node 2: exit %d: %s", rc, out);
    char id[40];
    manifest_id(2, id);
    rc = dumpcmd("--restore '%s/bk2' '%s/copy' --keep-identity --cluster 127.0.0.1:%d", dir, dir,
                 ports[0]);
    print_message("while node 2 runs: exit %d: %s", rc, out);
    assert_int_equal(rc, 4);
    assert_non_null(strstr(out, "is live in the cluster"));
    assert_non_null(strstr(out, id));
    char node2[64];
    snprintf(node2, sizeof node2, "127.0.0.1:%d:", ports[2]);
    assert_non_null(strstr(out, node2)); /* the member that has it, named */
    char copy[128];
    snprintf(copy, sizeof copy, "%s/copy", dir);
    assert_int_not_equal(access(copy, F_OK), 0); /* nothing written */
    /* asked through another member, comma-separated after a dead endpoint: the same answer */
    rc = dumpcmd("--restore '%s/bk2' '%s/copy' --keep-identity --cluster "
                 "127.0.0.1:%d,127.0.0.1:%d",
                 dir, dir, tfree_port(), ports[1]);
    assert_int_equal(rc, 4);
    /* no member answers: refused as unreachable, never taken as "nobody has it" */
    rc = dumpcmd("--restore '%s/bk2' '%s/copy' --keep-identity --cluster 127.0.0.1:%d", dir, dir,
                 tfree_port());
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "--cluster-stopped"));
    assert_int_not_equal(access(copy, F_OK), 0);
    /* forced past the check (--cluster-stopped, said wrongly) and started: the cluster refuses
       the copy's join while node 2 runs (membership, join.c: identity_in_use) */
    rc = dumpcmd("--restore '%s/bk2' '%s/forced' --keep-identity --cluster-stopped", dir, dir);
    if (rc != 0)
        fail_msg("forced restore: exit %d: %s", rc, out);
    int copy_port = tfree_port();
    char bind[64], data[128], log[128], seed[64];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", copy_port);
    snprintf(data, sizeof data, "%s/forced", dir);
    snprintf(log, sizeof log, "%s/forced.log", dir);
    snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", ports[0]);
    pid_t twin = ttool_spawn(
        kv,
        (char *const[]){kv, "node", "--bind", bind, "--seed", seed, "--data", data, "--fast", NULL},
        log);
    assert_true(twin > 0);
    char seen[256];
    snprintf(seen, sizeof seen, "%s/kv0.log", dir);
    bool refused_seen = false, told = false;
    for (int64_t end = now_ms() + 20000; now_ms() < end && !(refused_seen && told);
         usleep(100000)) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "grep -q 'refused: identity %s' '%s'", id, seen);
        refused_seen = system(cmd) == 0;
        snprintf(cmd, sizeof cmd, "grep -q 'refused: identity %s' '%s'", id, log);
        told = system(cmd) == 0;
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "tail -n 5 '%s' >&2", log);
    if (!refused_seen || !told) {
        dump_logs();
        if (system(cmd) != 0)
            print_message("no log of the copy\n");
        kill(twin, SIGKILL);
        waitpid(twin, NULL, 0);
        fail_msg("the copy's join was not refused (seed says so %d, the copy was told %d)",
                 refused_seen, told);
    }
    /* still three members, the copy not among them */
    assert_true(wait_up(0, N, 5000));
    char copy_addr[64];
    snprintf(copy_addr, sizeof copy_addr, "127.0.0.1:%d", copy_port);
    assert_null(strstr(out, copy_addr));
    kill(twin, SIGKILL);
    waitpid(twin, NULL, 0);
    /* a new identity needs no check */
    assert_int_equal(dumpcmd("--restore '%s/bk2' '%s/other' --new-identity", dir, dir), 0);

    /* node 2 stopped (it leaves; Removed): its identity may come back */
    assert_int_equal(kill(pids[2], SIGTERM), 0);
    waitpid(pids[2], NULL, 0);
    pids[2] = 0;
    /* until node 0 sees it Removed (a Removed member leaves the view; Exiting still counts) */
    bool gone = false;
    for (int64_t end = now_ms() + 30000; !gone && now_ms() < end; usleep(100000)) {
        char args[128];
        snprintf(args, sizeof args, "--node tcp://127.0.0.1:%d --json members", ports[0]);
        gone = ttool_run(tool, args, out, OUT_CAP) == 0 && !strstr(out, node2) &&
               strstr(out, "\"converged\":true");
    }
    if (!gone) {
        dump_logs();
        fail_msg("node 2 did not leave: %s", out);
    }
    rc = dumpcmd("--restore '%s/bk2' '%s/copy' --keep-identity --cluster 127.0.0.1:%d", dir, dir,
                 ports[0]);
    if (rc != 0)
        fail_msg("after node 2 left: exit %d: %s", rc, out);
    assert_non_null(strstr(out, "no live member has it"));
    assert_non_null(strstr(out, id));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_disaster_recovery_from_backups, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_identity_refused_while_live, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
