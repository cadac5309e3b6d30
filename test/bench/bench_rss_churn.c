/*  bench_rss_churn.c — the resident memory of a node before and after a long run of churn.

      bench_rss_churn [SECONDS]      (or BENCH_RSS_CHURN_SECONDS; default 60, the figure
                                      is 600: BENCH name=rss_churn_10min)

    Every node is a build/bin/shoal-member process (release, --fast timings: gossip and heartbeats
    200 ms, stable-after 2 s). Node A (measured) forms the cluster, node B joins and stays; three
    churners join on fixed ports and, every 1.5 s, one of them changes: a stopped one starts again
    (a new incarnation on the same port), a running one leaves gracefully (SIGTERM) or is killed
    (SIGKILL; the split-brain resolver downs and removes it). Two writer threads keep writing
    through A and B: WriteMajority GCounter increments over 64 keys and WriteLocal LWWMap puts of
    256-byte values over 32 keys x 64 entries, so the data set itself stays the same size and any
    growth is the node's own.

    Printed: VmRSS of A (and B) after a warm-up of a tenth of the run (at least 20 s) and at the
    end, the peak, a sample per tenth of the run, and the operations done:
      BENCH name=rss_churn_<10min|Ns> value=<kB at the end> unit=kB baseline=<kB after warm-up>
    The ratio (end / after warm-up) near 1 means the node does not grow under churn.

    Children die with this process (PR_SET_PDEATHSIG) and are killed on exit.
*/
#include "bench.h"
#include "ddata.h"
#include "membership.h"
#include "procs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHURNERS 3
#define NODES (2 + CHURNERS)

static char member_bin[PATH_MAX + 32];
static int ports[NODES];
static pid_t pids[NODES];
static atomic_bool running = true;

static void kill_all(void)
{
    tproc_kill_all(pids, NODES);
}

static void on_signal(int sig)
{
    (void)sig;
    for (int i = 0; i < NODES; i++)
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
    _exit(1);
}

static pid_t start_member(int i)
{
    char bind_ep[64], seed_a[64], seed_b[64];
    snprintf(bind_ep, sizeof bind_ep, "tcp://127.0.0.1:%d", ports[i]);
    snprintf(seed_a, sizeof seed_a, "tcp://127.0.0.1:%d", ports[0]);
    snprintf(seed_b, sizeof seed_b, "tcp://127.0.0.1:%d", ports[1]);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0 && !getenv("BENCH_RSS_CHURN_VERBOSE")) {
            dup2(null, 1);
            dup2(null, 2);
        }
        if (i == 0)
            execl(member_bin, member_bin, "--bind", bind_ep, "--seed", bind_ep, "--fast", "--quiet",
                  (char *)NULL);
        else
            execl(member_bin, member_bin, "--bind", bind_ep, "--seed", seed_a, "--seed", seed_b,
                  "--fast", "--quiet", (char *)NULL);
        _exit(127);
    }
    return pid;
}

typedef struct {
    int node;
    pthread_t th;
    atomic_ullong maj_ok, maj_failed, local_ok, local_failed;
} writer_t;

static void *write_loop(void *arg)
{
    writer_t *w = arg;
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ports[w->node]);
    int err = 0;
    shoal_client_t *c = shoal_client_new(ep, 5000, &err);
    if (!c) {
        fprintf(stderr, "bench_rss_churn: client to %s: %s\n", ep, shoal_strerror(err));
        return NULL;
    }
    shoal_consistency_t maj = {.level = SHOAL_MAJORITY, .timeout_ms = 2000};
    shoal_consistency_t local = {.level = SHOAL_LOCAL};
    shoal_client_op_t incr = {.type = "GCounter", .op = "increment", .n = 1};
    char value[256];
    for (uint64_t k = 0; atomic_load(&running); k++) {
        char key[32], entry[32];
        if (k % 8 == 0) {
            snprintf(key, sizeof key, "count-%d", (int)(k / 8 % 64));
            if (shoal_client_update(c, "", key, &maj, &incr) == 0)
                atomic_fetch_add(&w->maj_ok, 1);
            else
                atomic_fetch_add(&w->maj_failed, 1);
        } else {
            snprintf(key, sizeof key, "map-%d", (int)(k % 32));
            snprintf(entry, sizeof entry, "e%d", (int)(k / 32 % 64));
            memset(value, 'a' + (int)(k % 26), sizeof value);
            snprintf(value, 32, "%d:%llu", w->node, (unsigned long long)k);
            shoal_client_op_t put = {.type = "LWWMap", .op = "put", .key2 = entry,
                                     .key2_len = strlen(entry), .value = value,
                                     .value_len = sizeof value};
            if (shoal_client_update(c, "", key, &local, &put) == 0)
                atomic_fetch_add(&w->local_ok, 1);
            else
                atomic_fetch_add(&w->local_failed, 1);
        }
    }
    shoal_client_destroy(&c);
    return NULL;
}

/* Members A sees Up now (its JSON view), -1 when it does not answer. */
static int members_up(void)
{
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ports[0]);
    int err = 0, n = -1;
    shoal_client_t *c = shoal_client_new(ep, 2000, &err);
    shoal_buf_t view = {0};
    if (c && shoal_client_cluster_view(c, &view) == 0) {
        n = 0;
        for (const char *p = shoal_buf_cstr(&view); (p = strstr(p, "\"status\":\"Up\"")); p++)
            n++;
    }
    shoal_buf_free(&view);
    shoal_client_destroy(&c);
    return n;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* One churn step: a stopped churner starts again, or a running one leaves or is killed. */
static void churn(unsigned *seed, uint64_t *starts, uint64_t *leaves, uint64_t *kills)
{
    int i = 2 + (int)(rand_r(seed) % CHURNERS);
    if (pids[i] > 0) {
        int st;
        if (waitpid(pids[i], &st, WNOHANG) == pids[i]) { /* it left on its own (downed) */
            pids[i] = 0;
        } else if (rand_r(seed) % 2) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
            (*kills)++;
            return;
        } else {
            kill(pids[i], SIGTERM); /* graceful leave; reaped when it is picked again */
            (*leaves)++;
            return;
        }
    }
    if (pids[i] == 0) {
        pids[i] = start_member(i);
        (*starts)++;
    }
}

int main(int argc, char **argv)
{
    const char *e = getenv("BENCH_RSS_CHURN_SECONDS");
    int seconds = argc > 1 ? atoi(argv[1]) : e ? atoi(e) : 60;
    if (seconds <= 0) {
        fprintf(stderr, "usage: bench_rss_churn [SECONDS > 0]\n");
        return 2;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = 0;
    snprintf(member_bin, sizeof member_bin, "%s/shoal-member", dirname(self));
    if (access(member_bin, X_OK) != 0) {
        fprintf(stderr, "bench_rss_churn: %s not found (scons builds it)\n", member_bin);
        return 1;
    }
    atexit(kill_all);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < NODES; i++)
        ports[i] = tfree_port();

    pids[0] = start_member(0);
    pids[1] = start_member(1);
    for (int i = 2; i < NODES; i++)
        pids[i] = start_member(i);
    /* writes go through once the cluster is up: a majority write through A succeeds */
    {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ports[0]);
        int err = 0;
        shoal_client_t *c = shoal_client_new(ep, 2000, &err);
        shoal_consistency_t maj = {.level = SHOAL_MAJORITY, .timeout_ms = 2000};
        shoal_client_op_t incr = {.type = "GCounter", .op = "increment", .n = 1};
        double deadline = bench_now() + 60;
        int rc = -1;
        while (c && rc != 0 && bench_now() < deadline) {
            rc = shoal_client_update(c, "", "up", &maj, &incr);
            if (rc != 0)
                sleep_s(0.2);
        }
        shoal_client_destroy(&c);
        if (rc != 0) {
            fprintf(stderr, "bench_rss_churn: the cluster did not come up in 60 s\n");
            return 1;
        }
    }
    writer_t w[2] = {{.node = 0}, {.node = 1}};
    for (int i = 0; i < 2; i++)
        pthread_create(&w[i].th, NULL, write_loop, &w[i]);

    unsigned seed = (unsigned)getpid();
    uint64_t starts = 0, leaves = 0, kills = 0;
    double warm = seconds / 10.0 < 20 ? 20 : seconds / 10.0;
    double t0 = bench_now(), next_churn = t0 + 1.5;
    while (bench_now() < t0 + warm) {
        sleep_s(0.1);
        if (bench_now() >= next_churn) {
            churn(&seed, &starts, &leaves, &kills);
            next_churn += 1.5;
        }
    }
    long before[2] = {tproc_rss_kb(pids[0]), tproc_rss_kb(pids[1])}, peak[2] = {before[0], before[1]};
    bench_note("rss_churn: after %.0f s of warm-up: A %ld kB, B %ld kB; churning for %d s", warm,
               before[0], before[1], seconds);
    double start = bench_now(), next_sample = start + seconds / 10.0;
    int tenth = 1;
    while (bench_now() < start + seconds) {
        sleep_s(0.1);
        if (bench_now() >= next_churn) {
            churn(&seed, &starts, &leaves, &kills);
            next_churn += 1.5;
        }
        for (int i = 0; i < 2; i++) {
            long r = tproc_rss_kb(pids[i]);
            if (r < 0) {
                fprintf(stderr, "bench_rss_churn: node %c is gone\n", 'A' + i);
                return 1;
            }
            if (r > peak[i])
                peak[i] = r;
        }
        if (bench_now() >= next_sample && tenth < 10) {
            bench_note("rss_churn: %d/10: A %ld kB, B %ld kB; %d members Up; %llu starts, "
                       "%llu leaves, %llu kills",
                       tenth, tproc_rss_kb(pids[0]), tproc_rss_kb(pids[1]), members_up(), (unsigned long long)starts,
                       (unsigned long long)leaves, (unsigned long long)kills);
            tenth++;
            next_sample += seconds / 10.0;
        }
    }
    long after[2] = {tproc_rss_kb(pids[0]), tproc_rss_kb(pids[1])};
    atomic_store(&running, false);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i].th, NULL);
    uint64_t maj_ok = w[0].maj_ok + w[1].maj_ok, maj_failed = w[0].maj_failed + w[1].maj_failed;
    uint64_t local_ok = w[0].local_ok + w[1].local_ok;
    uint64_t local_failed = w[0].local_failed + w[1].local_failed;
    bench_note("rss_churn: %d s: A %ld -> %ld kB (peak %ld), B %ld -> %ld kB (peak %ld); "
               "%llu starts, %llu graceful leaves, %llu SIGKILLs; writes: %llu WriteMajority ok "
               "(%llu failed, while a killed member was not yet removed), %llu WriteLocal ok "
               "(%llu failed)",
               seconds, before[0], after[0], peak[0], before[1], after[1], peak[1],
               (unsigned long long)starts, (unsigned long long)leaves, (unsigned long long)kills,
               (unsigned long long)maj_ok, (unsigned long long)maj_failed,
               (unsigned long long)local_ok, (unsigned long long)local_failed);
    char name[64];
    if (seconds % 60 == 0)
        snprintf(name, sizeof name, "rss_churn_%dmin", seconds / 60);
    else
        snprintf(name, sizeof name, "rss_churn_%ds", seconds);
    bench_report(name, (double)after[0], "kB", (double)before[0]);
    return local_ok > 0 && maj_ok > 0 ? 0 : 1;
}
