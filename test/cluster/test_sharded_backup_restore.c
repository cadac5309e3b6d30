/*  test_sharded_backup_restore.c — disaster recovery of a sharded service from backups, on real
    processes (docs/operations.md, "Backup, restore and disaster recovery", the sharded steps):
    three counter-service nodes (release build/bin/counter-service, --data-dir: one LMDB
    environment per node holding the entities' states, the remembered entities, the
    coordinator's state and the kept membership) give entities values with `ask add` (an ask is
    answered once the state is saved at MAJORITY: acknowledged); each node's data directory is
    backed up while it runs (`ddata-dump --backup`); one more value is acknowledged after the
    backups (the backups do not cover it); every node is killed with SIGKILL and every data
    directory deleted; the backups are restored (`--keep-identity`) and the nodes started again.
    Then, before any message reaches them, the remembered entities run again by themselves (the
    regions' entity counts), and every value acknowledged before the backups is read back with
    `ask get` (the one after them is not: it reads as it was at the backups).
    Two variants: every node's backup restored, and a majority's only (two of three; the third
    node starts on an empty directory, a new identity, and its lost identity, still kept, is
    dropped with `shoal-cluster forget`). Writes on loopback reach every replica, so the majority
    variant shows the runbook's steps work, not that two backups alone held every value.
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
#define ENT     9 /* entities of type account, e0..e8 */

static char cs[4096], tool[4096], dump[4096], dir[64];
static char *out;
static int ports[N];
static pid_t pids[N];

#define now_ms ttool_now_ms

static void start(int i)
{
    char bind[64], data[128], seeds[N][64], log[128];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", ports[i]);
    snprintf(data, sizeof data, "%s/cs%d", dir, i);
    snprintf(log, sizeof log, "%s/cs%d.log", dir, i);
    for (int k = 0; k < N; k++)
        snprintf(seeds[k], sizeof seeds[k], "tcp://127.0.0.1:%d", ports[k]);
    pids[i] = ttool_spawn(cs,
                          (char *const[]){cs, "node", "--bind", bind, "--seed", seeds[0], "--seed",
                                          seeds[1], "--seed", seeds[2], "--data-dir", data,
                                          "--shards", "12", "--fast", NULL},
                          log);
    assert_true(pids[i] > 0);
}

static void kill_node(int i)
{
    ttool_kill(&pids[i]);
}

#define cscmd(...)   ttool_runf(cs, out, OUT_CAP, __VA_ARGS__)
#define dumpcmd(...) ttool_runf(dump, out, OUT_CAP, __VA_ARGS__)
#define toolcmd(...) ttool_runf(tool, out, OUT_CAP, __VA_ARGS__)

static void dump_logs(void)
{
    ttool_tail_logs(dir, "cs", N, 20);
}

/* shoal-cluster check through node i finds three members Up and every region registered */
static bool wait_up(int i, int timeout_ms)
{
    for (int64_t end = now_ms() + timeout_ms; now_ms() < end; usleep(200000))
        if (toolcmd("--node tcp://127.0.0.1:%d check", ports[i]) >= 0 &&
            strstr(out, "3 members Up") && strstr(out, "2 entity types"))
            return true;
    return false;
}

/* The entities running in account's regions, summed over the REGION table of
   `shoal-cluster shards account` through node i; -1 when it cannot be read. */
static long running_entities(int i)
{
    if (toolcmd("--node tcp://127.0.0.1:%d shards account", ports[i]) != 0)
        return -1;
    const char *p = strstr(out, "\n  REGION");
    if (!p)
        return -1;
    long sum = 0;
    for (p = strchr(p + 1, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
        char name[200], answered[16];
        long shards, entities;
        if (sscanf(p + 1, " %199s %ld %ld %15s", name, &shards, &entities, answered) != 4)
            break;
        sum += entities;
    }
    return sum;
}

/* the value entity e of account holds after the acknowledged adds: 10 * (e + 1), plus e for
   every second entity (two adds) */
static long want_value(int e)
{
    return 10L * (e + 1) + (e % 2 ? e : 0);
}

static int setup(void **state)
{
    (void)state;
    out = calloc(1, OUT_CAP);
    if (!ttool_find("counter-service", cs, sizeof cs) ||
        !ttool_find("shoal-cluster", tool, sizeof tool) ||
        !ttool_find("ddata-dump", dump, sizeof dump))
        fail_msg("build/bin/counter-service, shoal-cluster or ddata-dump is missing: scons check "
                 "builds them");
    snprintf(dir, sizeof dir, "/tmp/shoal-shbackup-XXXXXX");
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

/* ask account e MSG through node `via` until it answers (a shard may be between homes just
   after a start); the reply's value, or fails */
static long ask(int via, int e, const char *msg)
{
    int rc = -1;
    for (int64_t end = now_ms() + 15000; now_ms() < end; usleep(200000)) {
        rc = cscmd("--node tcp://127.0.0.1:%d --timeout 5000 ask account e%d %s", ports[via], e,
                   msg);
        if (rc == 0)
            break;
    }
    long v = 0;
    if (rc != 0 || sscanf(out, "%ld (account e%*d", &v) != 1) {
        dump_logs();
        fail_msg("ask account e%d %s through node %d: exit %d: %s", e, msg, via, rc, out);
    }
    return v;
}

/* restored: how many nodes get their backup back (N, or a majority: the last node then starts
   on an empty directory) */
static void disaster_recovery(int restored)
{
    for (int i = 0; i < N; i++)
        start(i);
    if (!wait_up(0, 30000)) {
        dump_logs();
        fail_msg("the three counter-service nodes did not come Up: %s", out);
    }
    /* acknowledged values, through every node; every second entity gets a second add through
       another node */
    for (int e = 0; e < ENT; e++) {
        char msg[32];
        snprintf(msg, sizeof msg, "add %d", 10 * (e + 1));
        long v = ask(e % N, e, msg);
        if (e % 2) {
            snprintf(msg, sizeof msg, "add %d", e);
            v = ask((e + 1) % N, e, msg);
        }
        assert_int_equal(v, want_value(e));
    }
    /* hot backups, one per node, while the nodes run */
    for (int i = 0; i < N; i++) {
        int rc = dumpcmd("--backup '%s/bk%d' '%s/cs%d'", dir, i, dir, i);
        if (rc != 0)
            fail_msg("backup of node %d: exit %d: %s", i, rc, out);
        assert_non_null(strstr(out, "backup of "));
        /* the copy holds the sharded service's keys: entity states and remembered entities */
        assert_int_equal(dumpcmd("'%s/bk%d'", dir, i), 0);
        assert_null(strstr(out, "UNDECODABLE"));
        assert_non_null(strstr(out, "kept-membership"));
    }
    /* acknowledged after the backups: not covered */
    long after = ask(1, 0, "add 1000");
    assert_int_equal(after, want_value(0) + 1000);
    long running = running_entities(0);
    if (running != ENT)
        fail_msg("before the disaster %ld entities run, not %d: %s", running, ENT, out);

    /* the disaster: every node killed, every data directory gone */
    for (int i = 0; i < N; i++)
        kill_node(i);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/cs0' '%s/cs1' '%s/cs2'", dir, dir, dir);
    assert_int_equal(system(cmd), 0);

    for (int i = 0; i < restored; i++) {
        int rc = dumpcmd("--restore '%s/bk%d' '%s/cs%d' --keep-identity --cluster-stopped", dir, i,
                         dir, i);
        if (rc != 0)
            fail_msg("restore of node %d: exit %d: %s", i, rc, out);
        assert_non_null(strstr(out, "kept"));
    }
    for (int i = 0; i < N; i++)
        start(i);
    if (!wait_up(0, 40000)) {
        dump_logs();
        fail_msg("the restored nodes did not come Up: %s", out);
    }
    /* a member without a backup came back with a new identity: its lost one is still kept
       (counted for majorities) until it is forgotten, as the runbook says */
    for (int i = restored; i < N; i++) {
        char lost[40] = "", manifest[128];
        snprintf(manifest, sizeof manifest, "%s/bk%d/shoal-backup", dir, i);
        FILE *f = fopen(manifest, "r");
        assert_non_null(f);
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "node-id: %32[0-9a-f]", lost) == 1)
                break;
        fclose(f);
        assert_int_equal(strlen(lost), 32);
        assert_int_equal(toolcmd("--node tcp://127.0.0.1:%d --json members", ports[0]), 0);
        const char *kept = strstr(out, "\"kept\":[");
        assert_non_null(kept);
        if (!strstr(kept, lost) || strstr(kept, lost) > strchr(kept, ']'))
            fail_msg("the lost identity %s is not kept: %s", lost, out);
        if (toolcmd("--node tcp://127.0.0.1:%d forget %s", ports[1], lost) != 0)
            fail_msg("forget %s: %s", lost, out);
        bool gone = false;
        for (int64_t end = now_ms() + 10000; now_ms() < end && !gone; usleep(200000))
            gone = toolcmd("--node tcp://127.0.0.1:%d --json members", ports[0]) == 0 &&
                   !strstr(out, lost);
        if (!gone)
            fail_msg("%s still kept after forget: %s", lost, out);
    }
    /* the remembered entities run again without a message */
    running = -1;
    for (int64_t end = now_ms() + 20000; now_ms() < end && running != ENT; usleep(200000))
        running = running_entities(1);
    if (running != ENT) {
        dump_logs();
        fail_msg("after the restore %ld remembered entities run by themselves, not %d: %s", running,
                 ENT, out);
    }
    /* every acknowledged value the backups cover, through every node */
    for (int e = 0; e < ENT; e++)
        for (int via = 0; via < N; via++) {
            long have = ask(via, e, "get");
            if (have != want_value(e)) {
                dump_logs();
                fail_msg("after the restore (%d of %d backups) account e%d reads %ld through "
                         "node %d, acknowledged %ld before the backups",
                         restored, N, e, have, via, want_value(e));
            }
        }
}

static void test_restore_every_node(void **state)
{
    (void)state;
    disaster_recovery(N);
}

static void test_restore_a_majority(void **state)
{
    (void)state;
    disaster_recovery(N / 2 + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_restore_every_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_a_majority, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
