/*  bench_remember.c — remembered entities and the memory of idle entities, on this machine, in
    this run (issue 8, "Benchmarks").

    Hosts are separate processes, as in bench_sharding.c: this program started again as
    `bench_remember --host SEED|-` (fork + exec of /proc/self/exe), one node per process with the
    roles "shard" and "plain" and a region of two entity types:
      "rem"    role "shard", remember-entities on (recovery strategy "all"), 100 shards
      "plain"  role "plain", remember-entities off, passivation NONE, 100 shards
    (two roles, so each type has a replicator of its own: a role has one per node). Both use
    shoal_sharding_settings_fast with the rebalance interval raised to 10 min, so that no shard
    moves while a figure runs (the figures are about remembering, not rebalancing). The shard id
    of an entity id "<shard>.<n>" is <shard> (the text before the first '.'), so a figure puts its
    entities exactly where it needs them. A host takes line commands on stdin and answers on
    stdout with lines starting with '@' (its node logs go to stderr, discarded unless
    BENCH_REMEMBER_VERBOSE is set). This process is node A: a member without either role, so its
    regions are proxies; its main thread calls the public API. Fast membership settings
    (shoal_cluster_settings_fast: heartbeat 200 ms, acceptable pause 1 s, stable-after 2 s).

    remember_new_entities: 3 hosts and A. A's main thread calls shoal_region_start_entity on its
      "rem" proxy for N = 100,000 new ids spread evenly over the 100 shards (a refused call,
      SHOAL_EBUFFER, is retried after a yield), as fast as it can; the clock stops when the sum of
      entities_started of "rem" over the hosts (each read stamped with the host's monotonic
      clock) has grown by N: a remembered entity starts only once the write that remembers it
      (WriteMajority, so on all 3 hosts with majority-min-cap 5) has completed. Baseline: the same with the type "plain" (no
      remembering) in the same cluster, taken in turns; ratio = remembered / plain. Each window
      has 100 shards of its own ("g<k>-<i>", allocated before), so every window starts from empty
      remembered sets; one more window into the first group's shards (1,000 ids remembered in
      each already) is a note. Target >= 100,000/s.
    remember_recover_100k: in the same cluster, a shard "bigK" on a host X that does not run the
      coordinator of "rem" gets 100,000 remembered entities (from A, as above), then X is killed
      (SIGKILL). ms from the kill until a survivor runs all of them again (the shard's entity
      count in shoal_region_state of either survivor, polled every few ms). A note gives when the
      shard was hosted again (re-homed) and the part after that. Baseline: ms from the same kill
      until A saw X Removed, as bench_sharding's coordinator_failover does (a removed region's
      shards are reallocated only after that, plus down-removal-margin).
    entities_per_gib: one host alone; its command thread starts 1,000,000 "plain" entities (8 bytes
      of state each, 100 shards of 10,000, passivation NONE) with shoal_region_start_entity, in
      chunks of 50,000 each waited for; RSS (/proc/self/statm) read before the first and after the
      last. Value = entities / ΔRSS in GiB. No baseline (Akka advertises about 2.5 million actors
      per GB of heap: a note). Target >= 5,000,000.

    A figure that cannot be measured prints a note with the reason and the program goes on; the
    exit code is then 1. BENCH_REMEMBER_ONLY=create,recover,memory runs only those parts
    (recover needs the cluster of create, so it runs create's setup without its figure). Each
    measuring window is printed on stderr in CLOCK_MONOTONIC seconds, so that a profile (perf
    record -k CLOCK_MONOTONIC) can be cut to it. Every host is killed (SIGKILL) at the end of
    its figure, on exit, on a fatal signal, on the overall time limit, and with this process
    (PR_SET_PDEATHSIG).
*/
#include "bench.h"
#include "sharding.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REM_TYPE       "rem"
#define PLAIN_TYPE     "plain"
#define REM_ROLE       "shard"
#define PLAIN_ROLE     "plain"
#define N_SHARDS       100
#define N_HOSTS        3
#define CREATE_N       100000
#define RECOVER_N      100000
#define MEM_N          1000000
#define MEM_CHUNK      50000
#define REPS           2 /* windows per creation rate, taken in turns with the baseline's */
#define BIG_PROBES     8 /* candidate shards for the recovery figure */
#define TIME_LIMIT_S   180
#define CMD_TIMEOUT_MS 10000

static int failures;
static char self_path[PATH_MAX];

static void sleep_ms(double ms)
{
    long ns = (long)(ms * 1e6);
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void window_mark(const char *figure, double t0, double t1)
{
    fprintf(stderr, "bench_remember: window %s %.6f,%.6f\n", figure, t0, t1);
}

static void fail_note(const char *figure, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail_note(const char *figure, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    bench_note("%s: not measured: %s", figure, why);
    failures++;
}

/* ---------------------------------------------------------------------------------------------
 * Entities and the settings every node shares
 */
static void *entity_start(shoal_entity_t *e, void *arg)
{
    (void)e;
    (void)arg;
    uint64_t *n = calloc(1, sizeof *n);
    if (!n)
        abort();
    return n;
}

static void entity_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)arg;
    (void)msg;
    (void)len;
    uint64_t *n = state;
    (*n)++;
    if (shoal_entity_sender(e).ask_id)
        shoal_entity_reply(e, n, sizeof *n);
}

static void entity_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)arg;
    free(state);
}

static const shoal_entity_fns_t entity_fns = {
    .start = entity_start, .receive = entity_receive, .stop = entity_stop};

/* "<shard>.<n>" -> "<shard>": the figures choose their shards; ids without a '.' hash. */
static void shard_of(const char *entity_id, uint32_t number_of_shards, char *out, void *arg)
{
    (void)arg;
    const char *dot = strchr(entity_id, '.');
    size_t n = dot ? (size_t)(dot - entity_id) : 0;
    if (!dot || n == 0 || n > SHOAL_SHARD_ID_MAX) {
        shoal_sharding_default_shard_id(entity_id, number_of_shards, out);
        return;
    }
    memcpy(out, entity_id, n);
    out[n] = 0;
}

static void type_settings(shoal_sharding_settings_t *s, bool remember)
{
    shoal_sharding_settings_fast(s);
    s->role = remember ? REM_ROLE : PLAIN_ROLE;
    s->number_of_shards = N_SHARDS;
    s->rebalance_interval_ms = 600000;
    s->shard_id = shard_of;
    s->remember_entities = remember;
    s->passivation.policy = SHOAL_PASSIVATE_NONE;
    s->passivation.idle_timeout_ms = 0;
}

/* ---------------------------------------------------------------------------------------------
 * A node: system, membership, sharding, the regions of both types
 */
typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *c;
    shoal_sharding_t *sh;
    shoal_region_t *rem, *plain;
} node_t;

static const char *const host_roles[] = {REM_ROLE, PLAIN_ROLE};

typedef struct {
    shoal_cluster_t *c;
    shoal_cluster_fn *fn;
} up_ctx_t;

static int register_up(shoal_system_t *sys, void *arg)
{
    (void)sys;
    up_ctx_t *x = arg;
    return shoal_cluster_on_up(x->c, x->fn, NULL);
}

/* seed NULL: form a new cluster. host: the roles (regions hosting entities), else proxies. */
static int node_start(node_t *n, const char *seed, bool host, shoal_cluster_fn *on_up)
{
    memset(n, 0, sizeof *n);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 0;
    if (!(n->sys = shoal_system_new(&ss, &err)))
        return err ? err : -1;
    shoal_cluster_settings_t cs;
    shoal_cluster_settings_fast(&cs);
    if (host) {
        cs.roles = host_roles;
        cs.n_roles = 2;
    }
    if (!(n->c = shoal_cluster_new(n->sys, &cs, &err)) || !(n->sh = shoal_sharding_new(n->c, &err)))
        return err ? err : -1;
    shoal_sharding_settings_t rs, ps;
    type_settings(&rs, true);
    type_settings(&ps, false);
    if (host) {
        n->rem = shoal_region_start(n->sh, REM_TYPE, &rs, &entity_fns, NULL, &err);
        if (n->rem)
            n->plain = shoal_region_start(n->sh, PLAIN_TYPE, &ps, &entity_fns, NULL, &err);
    } else {
        n->rem = shoal_region_start_proxy(n->sh, REM_TYPE, &rs, &err);
        if (n->rem)
            n->plain = shoal_region_start_proxy(n->sh, PLAIN_TYPE, &ps, &err);
    }
    if (!n->rem || !n->plain)
        return err ? err : -1;
    if (on_up) {
        up_ctx_t x = {n->c, on_up};
        int rc = shoal_system_call(n->sys, register_up, &x);
        if (rc != 0)
            return rc;
    }
    const char *seeds[1] = {seed ? seed : shoal_system_endpoint(n->sys)};
    return shoal_cluster_join(n->c, seeds, 1);
}

static void node_stop(node_t *n)
{
    shoal_sharding_destroy(&n->sh);
    shoal_cluster_destroy(&n->c);
    shoal_system_destroy(&n->sys);
}

static shoal_region_t *region_of(node_t *n, const char *type)
{
    return strcmp(type, REM_TYPE) == 0 ? n->rem : strcmp(type, PLAIN_TYPE) == 0 ? n->plain : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The host process: bench_remember --host SEED|-
 */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    pthread_mutex_lock(&out_lock);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
}

static void host_on_up(shoal_cluster_t *c, void *arg)
{
    (void)c;
    (void)arg;
    say("@up %.6f", bench_now());
}

/* Resident bytes of this process. */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* n idle "plain" entities in this process, RSS before and after (entities_per_gib). Chunks are
   waited for, so the messages in flight (freed, but kept by malloc) stay a small part. */
static void host_mem(node_t *n, uint64_t total)
{
    shoal_region_stats_t st;
    if (shoal_region_stats(n->plain, &st) != 0) {
        say("@mem fail stats");
        return;
    }
    uint64_t base = st.entities;
    /* the shards first, so their tables are not what is counted */
    char id[64];
    for (uint32_t s = 0; s < N_SHARDS; s++) {
        snprintf(id, sizeof id, "%u.w", s);
        if (shoal_region_start_entity(n->plain, id) != 0) {
            say("@mem fail warm-up start");
            return;
        }
    }
    double deadline = bench_now() + 20;
    while (shoal_region_stats(n->plain, &st) == 0 && st.entities < base + N_SHARDS) {
        if (bench_now() > deadline) {
            say("@mem fail warm-up: %" PRIu64 " entities", st.entities - base);
            return;
        }
        sleep_ms(2);
    }
    base = st.entities;
    uint64_t before = rss_bytes();
    double t0 = bench_now();
    uint64_t refused = 0;
    for (uint64_t k = 0; k < total;) {
        uint64_t end = k + MEM_CHUNK < total ? k + MEM_CHUNK : total;
        for (; k < end; k++) {
            snprintf(id, sizeof id, "%" PRIu64 ".%" PRIu64, k % N_SHARDS, k);
            int rc;
            while ((rc = shoal_region_start_entity(n->plain, id)) == SHOAL_EBUFFER) {
                refused++;
                sched_yield();
            }
            if (rc != 0) {
                say("@mem fail start_entity: %s", shoal_strerror(rc));
                return;
            }
        }
        deadline = bench_now() + 30;
        while (shoal_region_stats(n->plain, &st) == 0 && st.entities < base + end) {
            if (bench_now() > deadline) {
                say("@mem fail timeout: %" PRIu64 " of %" PRIu64 " entities", st.entities - base,
                    end);
                return;
            }
            sleep_ms(1);
        }
    }
    double ms = (bench_now() - t0) * 1000;
    uint64_t after = rss_bytes();
    malloc_trim(0);
    uint64_t trimmed = rss_bytes();
    say("@mem ok %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %.0f %" PRIu64,
        st.entities - base, before, after, trimmed, ms, refused);
}

static int host_main(const char *seed)
{
    node_t n;
    int rc = node_start(&n, strcmp(seed, "-") == 0 ? NULL : seed, true, host_on_up);
    if (rc != 0) {
        say("@ready fail %s", shoal_strerror(rc));
        return 1;
    }
    say("@ready %s %s", shoal_system_endpoint(n.sys), shoal_node_id(shoal_system_self(n.sys)));
    char line[256], type[32], shard[SHOAL_SHARD_ID_MAX + 1];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        shoal_region_stats_t st;
        unsigned long long count = 0;
        shoal_region_t *r;
        if (sscanf(line, "stats %31s", type) == 1 && (r = region_of(&n, type))) {
            if (shoal_region_stats(r, &st) != 0) {
                say("@stats fail");
                continue;
            }
            say("@stats %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                " %" PRIu64 " %.6f",
                st.shards, st.entities, st.entities_started, st.entities_recovered,
                st.remember_writes, st.remember_failures, st.allocations, bench_now());
        } else if (sscanf(line, "shard %31s %64s", type, shard) == 2 && (r = region_of(&n, type))) {
            /* the entities of one shard here (-1: not hosted here) */
            shoal_region_state_t rs;
            if (shoal_region_state(r, false, &rs) != 0) {
                say("@shard fail");
                continue;
            }
            long long have = -1;
            for (size_t i = 0; i < rs.n_shards; i++)
                if (strcmp(rs.shards[i].id, shard) == 0)
                    have = (long long)rs.shards[i].n_entities;
            shoal_region_state_free(&rs);
            say("@shard %lld %.6f", have, bench_now());
        } else if (strcmp(line, "healthy") == 0) {
            say("@healthy %d", shoal_sharding_healthy(n.sh, NULL, 0) ? 1 : 0);
        } else if (sscanf(line, "mem %llu", &count) == 1) {
            host_mem(&n, count);
        } else if (strcmp(line, "quit") == 0) {
            break;
        } else {
            say("@error unknown command '%s'", line);
        }
    }
    /* the parent is gone or done with us: the cluster does not need an orderly exit */
    fflush(stdout);
    _exit(0);
}

/* ---------------------------------------------------------------------------------------------
 * Hosts as seen from here
 */
typedef struct {
    pid_t pid;
    int wfd, rfd;
    char buf[8192];
    size_t len;
    bool reaped;
    double up_at; /* its on-up callback, its clock (monotonic: the same as ours) */
    char endpoint[128];
    char node_id[192];
} host_t;

static pid_t all_pids[32];
static volatile sig_atomic_t n_pids;

static void kill_hosts(void)
{
    for (int i = 0; i < n_pids; i++)
        if (all_pids[i] > 0)
            kill(all_pids[i], SIGKILL);
}

static void on_fatal_signal(int sig)
{
    kill_hosts();
    static const char msg[] = "bench_remember: stopped (signal or time limit); hosts killed\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(128 + sig);
}

static const char *host_fate(host_t *h, char *buf, size_t cap)
{
    int st = 0;
    if (h->pid <= 0 || h->reaped || waitpid(h->pid, &st, WNOHANG) != h->pid) {
        snprintf(buf, cap, "still running");
        return buf;
    }
    h->reaped = true;
    if (WIFSIGNALED(st))
        snprintf(buf, cap, "died of signal %d (BENCH_REMEMBER_VERBOSE=1 shows its stderr)",
                 WTERMSIG(st));
    else
        snprintf(buf, cap, "exited with %d", WEXITSTATUS(st));
    return buf;
}

static void host_kill(host_t *h)
{
    if (h->pid <= 0)
        return;
    if (!h->reaped) {
        kill(h->pid, SIGKILL);
        waitpid(h->pid, NULL, 0);
    }
    for (int i = 0; i < n_pids; i++)
        if (all_pids[i] == h->pid)
            all_pids[i] = 0;
    h->pid = 0;
    close(h->wfd);
    close(h->rfd);
}

static bool host_line(host_t *h, char *line, size_t cap, double deadline)
{
    for (;;) {
        char *nl = memchr(h->buf, '\n', h->len);
        if (nl) {
            size_t l = (size_t)(nl - h->buf);
            size_t c = l < cap - 1 ? l : cap - 1;
            memcpy(line, h->buf, c);
            line[c] = 0;
            memmove(h->buf, nl + 1, h->len - l - 1);
            h->len -= l + 1;
            if (strncmp(line, "@up ", 4) == 0)
                h->up_at = strtod(line + 4, NULL);
            return true;
        }
        if (h->len == sizeof h->buf)
            h->len = 0; /* a runaway line: drop it */
        double left = deadline - bench_now();
        if (left <= 0)
            return false;
        struct pollfd p = {h->rfd, POLLIN, 0};
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return false;
        ssize_t r = read(h->rfd, h->buf + h->len, sizeof h->buf - h->len);
        if (r <= 0)
            return false;
        h->len += (size_t)r;
    }
}

static bool host_expect(host_t *h, const char *prefix, char *line, size_t cap, int timeout_ms)
{
    double deadline = bench_now() + timeout_ms / 1000.0;
    size_t pl = strlen(prefix);
    while (host_line(h, line, cap, deadline))
        if (strncmp(line, prefix, pl) == 0)
            return true;
    return false;
}

static bool host_cmd(host_t *h, const char *cmd, const char *prefix, char *line, size_t cap,
                     int timeout_ms)
{
    char c[160];
    int l = snprintf(c, sizeof c, "%s\n", cmd);
    if (write(h->wfd, c, (size_t)l) != l)
        return false;
    return host_expect(h, prefix, line, cap, timeout_ms);
}

typedef struct {
    uint64_t shards, entities, started, recovered, rwrites, rfailures, allocations;
    double at;
} hstats_t;

static bool host_stats_of(host_t *h, const char *type, hstats_t *s)
{
    char line[256], cmd[64];
    snprintf(cmd, sizeof cmd, "stats %s", type);
    return host_cmd(h, cmd, "@stats ", line, sizeof line, CMD_TIMEOUT_MS) &&
           sscanf(line + 7,
                  "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                  " %" SCNu64 " %lf",
                  &s->shards, &s->entities, &s->started, &s->recovered, &s->rwrites,
                  &s->rfailures, &s->allocations, &s->at) == 8;
}

/* Entities of `shard` of "rem" on the host (-1: not hosted there), stamped with its clock. */
static bool host_shard_count(host_t *h, const char *shard, long long *n, double *at)
{
    char line[256], cmd[128];
    snprintf(cmd, sizeof cmd, "shard " REM_TYPE " %s", shard);
    return host_cmd(h, cmd, "@shard ", line, sizeof line, CMD_TIMEOUT_MS) &&
           sscanf(line + 7, "%lld %lf", n, at) == 2;
}

static bool host_spawn(host_t *h, const char *seed)
{
    memset(h, 0, sizeof *h);
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        return false;
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return false;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        perror("bench_remember: fork");
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        return false;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(in[0], 0);
        dup2(out[1], 1);
        if (!getenv("BENCH_REMEMBER_VERBOSE")) {
            int devnull = open("/dev/null", O_WRONLY);
            if (devnull >= 0)
                dup2(devnull, 2);
        }
        char *argv[] = {self_path, "--host", (char *)(seed ? seed : "-"), NULL};
        execv(self_path, argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    h->pid = pid;
    h->wfd = in[1];
    h->rfd = out[0];
    if (n_pids < (int)(sizeof all_pids / sizeof all_pids[0]))
        all_pids[n_pids++] = pid;
    char line[512] = "(nothing)";
    if (!host_expect(h, "@ready ", line, sizeof line, CMD_TIMEOUT_MS) ||
        sscanf(line + 7, "%127s %191s", h->endpoint, h->node_id) != 2) {
        fprintf(stderr, "bench_remember: a host did not start: %s\n", line);
        host_kill(h);
        return false;
    }
    return true;
}

static bool host_wait_up(host_t *h, int timeout_ms)
{
    char line[128];
    double deadline = bench_now() + timeout_ms / 1000.0;
    while (h->up_at <= 0)
        if (!host_line(h, line, sizeof line, deadline))
            return false;
    return true;
}

static bool host_wait_healthy(host_t *h, int timeout_ms)
{
    double deadline = bench_now() + timeout_ms / 1000.0;
    char line[128];
    while (bench_now() < deadline) {
        if (host_cmd(h, "healthy", "@healthy ", line, sizeof line, CMD_TIMEOUT_MS) &&
            strcmp(line, "@healthy 1") == 0)
            return true;
        sleep_ms(20);
    }
    return false;
}

/* ---------------------------------------------------------------------------------------------
 * A cluster of hosts with node A (this process, the proxies)
 */
typedef struct {
    host_t h[N_HOSTS];
    int n;
    node_t a;
    bool a_started;
} cluster_t;

static int count_up(node_t *a)
{
    shoal_cluster_view_t v;
    if (shoal_cluster_view(a->c, &v) != 0)
        return -1;
    int up = 0;
    for (size_t i = 0; i < v.n_members; i++)
        up += v.members[i].status == SHOAL_MEMBER_UP;
    if (!v.converged)
        up = 0;
    shoal_cluster_view_free(&v);
    return up;
}

static void cluster_stop(cluster_t *cl)
{
    for (int i = 0; i < cl->n; i++)
        host_kill(&cl->h[i]);
    if (cl->a_started)
        node_stop(&cl->a);
    cl->a_started = false;
    cl->n = 0;
}

static bool cluster_start(cluster_t *cl, int n, const char *figure)
{
    memset(cl, 0, sizeof *cl);
    for (int i = 0; i < n; i++) {
        if (!host_spawn(&cl->h[i], i ? cl->h[0].endpoint : NULL)) {
            fail_note(figure, "host %d did not start", i + 1);
            cluster_stop(cl);
            return false;
        }
        cl->n++;
        if (i == 0 && !host_wait_up(&cl->h[0], 15000)) {
            fail_note(figure, "host 1 not Up within 15 s");
            cluster_stop(cl);
            return false;
        }
    }
    int rc = node_start(&cl->a, cl->h[0].endpoint, false, NULL);
    cl->a_started = rc == 0 || cl->a.sys;
    if (rc != 0) {
        fail_note(figure, "node A did not start: %s", shoal_strerror(rc));
        cluster_stop(cl);
        return false;
    }
    double deadline = bench_now() + 20;
    while (count_up(&cl->a) != n + 1 || !shoal_sharding_healthy(cl->a.sh, NULL, 0)) {
        if (bench_now() > deadline) {
            fail_note(figure, "the cluster of %d hosts and A not Up and registered within 20 s",
                      n);
            cluster_stop(cl);
            return false;
        }
        sleep_ms(20);
    }
    for (int i = 0; i < n; i++)
        if (!host_wait_healthy(&cl->h[i], 10000)) {
            fail_note(figure, "host %d's regions not registered within 10 s", i + 1);
            cluster_stop(cl);
            return false;
        }
    return true;
}

/* Sum of entities_started of `type` over the live hosts; *at = the latest reading's clock. */
static bool started_sum(cluster_t *cl, const char *type, uint64_t *sum, double *at)
{
    *sum = 0;
    *at = 0;
    for (int i = 0; i < cl->n; i++) {
        if (cl->h[i].pid <= 0)
            continue;
        hstats_t s;
        if (!host_stats_of(&cl->h[i], type, &s))
            return false;
        *sum += s.started;
        if (s.at > *at)
            *at = s.at;
    }
    return true;
}

/* Waits until the sum of entities_started of `type` reaches want; false when it stops growing
   for 12 s (longer than shard-failure-backoff, after which a failed write is retried), or after
   60 s. *at: the clock of the reading that saw it. */
static bool wait_started(cluster_t *cl, const char *type, uint64_t want, double *at,
                         uint64_t *got)
{
    double deadline = bench_now() + 60, last_change = bench_now();
    uint64_t last = 0;
    for (;;) {
        if (!started_sum(cl, type, got, at))
            return false;
        if (*got >= want)
            return true;
        if (*got != last) {
            last = *got;
            last_change = bench_now();
        }
        if (bench_now() > deadline || bench_now() - last_change > 12)
            return false;
        sleep_ms(2);
    }
}

/* Starts ids "<shard>.<tag><k>" for k < n from A's main thread as fast as it can. With
   shard == NULL the ids go round robin over the 100 shards "g<group>-<i>". Returns the
   SHOAL_EBUFFER refusals, or -1 on another error. */
static int64_t start_many(shoal_region_t *r, int group, const char *shard, const char *tag,
                          uint64_t n)
{
    int64_t refused = 0;
    char id[96];
    for (uint64_t k = 0; k < n; k++) {
        if (shard)
            snprintf(id, sizeof id, "%s.%s%" PRIu64, shard, tag, k);
        else
            snprintf(id, sizeof id, "g%d-%" PRIu64 ".%s%" PRIu64, group, k % N_SHARDS, tag, k);
        int rc;
        while ((rc = shoal_region_start_entity(r, id)) == SHOAL_EBUFFER) {
            refused++;
            sched_yield();
        }
        if (rc != 0) {
            fprintf(stderr, "bench_remember: start_entity %s: %s\n", id, shoal_strerror(rc));
            return -1;
        }
    }
    return refused;
}

/* ---------------------------------------------------------------------------------------------
 * New remembered entities against plain ones
 */
typedef struct {
    double rate, send_s;
    int64_t refused;
    uint64_t writes, failures;
} create_run_t;

static uint64_t rwrites_sum(cluster_t *cl, uint64_t *failures_out)
{
    uint64_t w = 0, f = 0;
    for (int i = 0; i < cl->n; i++) {
        hstats_t s;
        if (cl->h[i].pid > 0 && host_stats_of(&cl->h[i], REM_TYPE, &s)) {
            w += s.rwrites;
            f += s.rfailures;
        }
    }
    if (failures_out)
        *failures_out = f;
    return w;
}

/* Entities started per second into the shards of `group`, counted where they start. */
static bool create_measure(cluster_t *cl, const char *type, int group, const char *tag,
                           create_run_t *run)
{
    const char *fig = "remember_new_entities";
    bool rem = strcmp(type, REM_TYPE) == 0;
    shoal_region_t *r = rem ? cl->a.rem : cl->a.plain;
    memset(run, 0, sizeof *run);
    uint64_t base, got, f0 = 0, w0 = rem ? rwrites_sum(cl, &f0) : 0;
    double at;
    if (!started_sum(cl, type, &base, &at)) {
        fail_note(fig, "a host does not answer");
        return false;
    }
    double t0 = bench_now();
    run->refused = start_many(r, group, NULL, tag, CREATE_N);
    run->send_s = bench_now() - t0;
    if (run->refused < 0) {
        fail_note(fig, "start_entity failed for %s (see stderr)", type);
        return false;
    }
    if (!wait_started(cl, type, base + CREATE_N, &at, &got)) {
        uint64_t f1 = 0;
        if (rem)
            rwrites_sum(cl, &f1);
        fail_note(fig, "%s: %" PRIu64 " of %d entities started; %" PRIu64 " remember writes "
                  "failed", type, got - base, CREATE_N, f1 - f0);
        return false;
    }
    char name[64];
    snprintf(name, sizeof name, "%s_%s_g%d%s", fig, type, group, tag);
    window_mark(name, t0, at);
    run->rate = CREATE_N / (at - t0);
    if (rem) {
        uint64_t f1;
        run->writes = rwrites_sum(cl, &f1) - w0;
        run->failures = f1 - f0;
    }
    return true;
}

/* Every shard of `group` of both types gets its home (one entity each) before any clock
   starts. */
static bool create_warm(cluster_t *cl, int group)
{
    static const char *const types[2] = {REM_TYPE, PLAIN_TYPE};
    for (int t = 0; t < 2; t++) {
        shoal_region_t *r = t == 0 ? cl->a.rem : cl->a.plain;
        uint64_t base, got;
        double at;
        if (!started_sum(cl, types[t], &base, &at))
            return false;
        char id[32];
        for (int s = 0; s < N_SHARDS; s++) {
            snprintf(id, sizeof id, "g%d-%d.w", group, s);
            if (shoal_region_start_entity(r, id) != 0)
                return false;
        }
        if (!wait_started(cl, types[t], base + N_SHARDS, &at, &got)) {
            fprintf(stderr, "bench_remember: warm-up of %s: %" PRIu64 " of %d started\n",
                    types[t], got - base, N_SHARDS);
            return false;
        }
    }
    return true;
}

/* Each window goes to 100 shards of its own (group k), so that every window starts from empty
   remembered sets, as the first did; one more window into group 0, whose sets then hold 1,000
   ids per shard, shows what a larger set costs (a note). */
static void bench_create(cluster_t *cl, bool report_it)
{
    const char *fig = "remember_new_entities";
    if (!create_warm(cl, 0)) {
        fail_note(fig, "warm-up: not every shard got a home");
        return;
    }
    if (!report_it)
        return;
    double best_rem = -1, best_plain = -1;
    double rem_rates[REPS];
    uint64_t all_failures = 0;
    create_run_t run, best_run = {0};
    for (int k = 0; k < REPS; k++) {
        if (k > 0 && !create_warm(cl, k)) {
            fail_note(fig, "warm-up of group %d: not every shard got a home", k);
            return;
        }
        if (!create_measure(cl, PLAIN_TYPE, k, "c", &run))
            return;
        if (run.rate > best_plain)
            best_plain = run.rate;
        if (!create_measure(cl, REM_TYPE, k, "c", &run))
            return;
        rem_rates[k] = run.rate;
        all_failures += run.failures;
        if (run.rate > best_rem) {
            best_rem = run.rate;
            best_run = run;
        }
    }
    create_run_t refill;
    bool refilled = create_measure(cl, REM_TYPE, 0, "f", &refill);
    bench_report(fig, best_rem, "ops/s", best_plain);
    char windows[128] = "";
    for (int k = 0; k < REPS; k++)
        snprintf(windows + strlen(windows), sizeof windows - strlen(windows), "%s%.0f",
                 k ? ", " : "", rem_rates[k]);
    bench_note("%s: %d hosts + A (proxy), %d new ids per window from A's main thread "
               "(shoal_region_start_entity) over 100 shards allocated before (each window its "
               "own 100), counted when started on the hosts, i.e. after the write that remembers "
               "them (WriteMajority); best of %d windows (%s /s) taken in turns with the "
               "baseline's; baseline = the same with remember-entities off (plain creation), "
               "ratio = remembered / plain; in the best window: %.2f s of sending, %" PRId64
               " SHOAL_EBUFFER retries, %" PRIu64 " remember writes (%.0f ids per write); %" PRIu64
               " writes failed in all windows (a failed write is retried after "
               "shard-failure-backoff, 10 s); target >= 100000/s",
               fig, N_HOSTS, CREATE_N, REPS, windows, best_run.send_s, best_run.refused,
               best_run.writes, best_run.writes ? (double)CREATE_N / (double)best_run.writes : 0.0,
               all_failures);
    if (refilled)
        bench_note("%s: %d more into shards that already remember 1,000 ids each: %.0f /s "
                   "(%" PRIu64 " writes, %" PRIu64 " failed)",
                   fig, CREATE_N, refill.rate, refill.writes, refill.failures);
}

/* ---------------------------------------------------------------------------------------------
 * Recovery of a shard of 100,000 remembered entities after a SIGKILL of its host
 */
typedef struct {
    const char *victim; /* node id */
    _Atomic double down_at, removed_at;
    int sub;
} watch_t;

static void on_event(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg)
{
    (void)c;
    watch_t *w = arg;
    if (!ev->member || strcmp(shoal_node_id(ev->member->node), w->victim) != 0)
        return;
    if (ev->kind == SHOAL_EV_MEMBER_DOWNED && atomic_load(&w->down_at) == 0)
        atomic_store(&w->down_at, bench_now());
    if (ev->kind == SHOAL_EV_MEMBER_REMOVED && atomic_load(&w->removed_at) == 0)
        atomic_store(&w->removed_at, bench_now());
}

typedef struct {
    node_t *a;
    watch_t *w;
} watch_ctx_t;

static int watch_on(shoal_system_t *sys, void *arg)
{
    (void)sys;
    watch_ctx_t *x = arg;
    x->w->sub = shoal_cluster_subscribe(x->a->c, on_event, x->w);
    return x->w->sub > 0 ? 0 : x->w->sub;
}

static int watch_off(shoal_system_t *sys, void *arg)
{
    (void)sys;
    watch_ctx_t *x = arg;
    return shoal_cluster_unsubscribe(x->a->c, x->w->sub);
}

/* The host that hosts `shard` of "rem" (-1: none yet, -2: a host does not answer). */
static int host_of_shard(cluster_t *cl, const char *shard)
{
    for (int i = 0; i < cl->n; i++) {
        long long n;
        double at;
        if (cl->h[i].pid <= 0)
            continue;
        if (!host_shard_count(&cl->h[i], shard, &n, &at))
            return -2;
        if (n >= 0)
            return i;
    }
    return -1;
}

static void bench_recover(cluster_t *cl)
{
    const char *fig = "remember_recover_100k";
    int coord = -1;
    for (int i = 0; i < cl->n; i++) {
        hstats_t s;
        if (host_stats_of(&cl->h[i], REM_TYPE, &s) && s.allocations > 0)
            coord = i;
    }
    bool coord_assumed = coord < 0;
    if (coord_assumed)
        coord = 0; /* the oldest member, where the singleton starts */
    /* a shard on a host without the coordinator, so the figure is the shard's, not a failover */
    char shard[32] = "";
    int victim = -1;
    for (int k = 0; k < BIG_PROBES && victim < 0; k++) {
        snprintf(shard, sizeof shard, "big%d", k);
        char id[48];
        snprintf(id, sizeof id, "%s.probe", shard);
        if (shoal_region_start_entity(cl->a.rem, id) != 0) {
            fail_note(fig, "probe start_entity refused");
            return;
        }
        double deadline = bench_now() + 10;
        int at = -1;
        while ((at = host_of_shard(cl, shard)) == -1 && bench_now() < deadline)
            sleep_ms(5);
        if (at < 0) {
            fail_note(fig, "shard %s got no home within 10 s", shard);
            return;
        }
        if (at != coord)
            victim = at;
    }
    if (victim < 0) {
        fail_note(fig, "every probe shard landed on the coordinator's host");
        return;
    }
    host_t *x = &cl->h[victim];
    hstats_t s0;
    if (!host_stats_of(x, REM_TYPE, &s0)) {
        fail_note(fig, "host %d does not answer", victim + 1);
        return;
    }
    /* 100,000 remembered entities in the shard; the probe was remembered before (it started) */
    long long have = 0;
    double at = 0, t0 = bench_now();
    int64_t refused = start_many(cl->a.rem, 0, shard, "e", RECOVER_N);
    if (refused < 0) {
        fail_note(fig, "start_entity failed (see stderr)");
        return;
    }
    uint64_t want = s0.started + RECOVER_N;
    hstats_t s1 = s0;
    double deadline = bench_now() + 60;
    while (host_stats_of(x, REM_TYPE, &s1) && s1.started < want && bench_now() < deadline)
        sleep_ms(5);
    if (s1.started < want) {
        fail_note(fig, "%" PRIu64 " of %d entities of shard %s remembered within 60 s",
                  s1.started - s0.started, RECOVER_N, shard);
        return;
    }
    double fill_s = s1.at - t0;
    if (!host_shard_count(x, shard, &have, &at) || have != RECOVER_N + 1) {
        fail_note(fig, "shard %s holds %lld entities, not %d", shard, have, RECOVER_N + 1);
        return;
    }
    watch_t w = {.victim = x->node_id};
    watch_ctx_t wx = {&cl->a, &w};
    shoal_system_call(cl->a.sys, watch_on, &wx);
    double t_kill = bench_now();
    host_kill(x);
    /* poll the survivors: when one hosts the shard again, and when it runs all of them */
    double t_home = 0, t_done = 0;
    int home = -1;
    long long last = -1;
    deadline = t_kill + 60;
    while (!t_done && bench_now() < deadline) {
        for (int i = 0; i < cl->n && !t_done; i++) {
            if (cl->h[i].pid <= 0 || (home >= 0 && i != home))
                continue;
            long long n;
            if (!host_shard_count(&cl->h[i], shard, &n, &at))
                continue;
            if (n < 0)
                continue;
            if (home < 0) {
                home = i;
                t_home = at;
            }
            last = n;
            if (n >= RECOVER_N + 1)
                t_done = at;
        }
        if (!t_done)
            sleep_ms(home >= 0 ? 1 : 5);
    }
    window_mark(fig, t_kill, t_done ? t_done : bench_now());
    deadline = bench_now() + 20;
    while (atomic_load(&w.removed_at) == 0 && bench_now() < deadline)
        sleep_ms(10);
    shoal_system_call(cl->a.sys, watch_off, &wx);
    double down = atomic_load(&w.down_at), removed = atomic_load(&w.removed_at);
    hstats_t hs = {0};
    if (home >= 0)
        host_stats_of(&cl->h[home], REM_TYPE, &hs);
    if (!t_done) {
        fail_note(fig, "after 60 s shard %s %s (%lld entities)", shard,
                  home < 0 ? "had no home" : "ran only part of its entities", last);
        return;
    }
    double base = removed > 0 ? (removed - t_kill) * 1000 : 0;
    bench_report(fig, (t_done - t_kill) * 1000, "ms", base);
    bench_note("%s: shard %s with %d remembered entities on host %d (not the coordinator's, host "
               "%d%s), SIGKILL; re-homed on host %d after %.0f ms, all %d running %.0f ms after "
               "that (recovery \"all\": the shard reads its 5 keys, then starts them in batches "
               "per tick); baseline = until A saw the host Removed (%s); marked Down after %.0f "
               "ms; the new home recovered %" PRIu64 " entities in all; filling the shard took "
               "%.0f ms (%.0f remembered/s into one shard, %" PRId64 " SHOAL_EBUFFER retries); "
               "fast membership (stable-after 2 s), down-removal-margin = stable-after",
               fig, shard, RECOVER_N + 1, victim + 1, coord + 1,
               coord_assumed ? ", assumed: no host reported allocations" : "", home + 1,
               (t_home - t_kill) * 1000, RECOVER_N + 1, (t_done - t_home) * 1000,
               removed > 0 ? "measured" : "not seen within 20 s: no baseline",
               down > 0 ? (down - t_kill) * 1000 : -1.0, hs.recovered, fill_s * 1000,
               RECOVER_N / fill_s, refused);
}

/* ---------------------------------------------------------------------------------------------
 * Idle entities per GiB of RSS
 */
static void bench_memory(void)
{
    const char *fig = "entities_per_gib";
    host_t h;
    if (!host_spawn(&h, NULL)) {
        fail_note(fig, "the host did not start");
        return;
    }
    if (!host_wait_up(&h, 15000) || !host_wait_healthy(&h, 10000)) {
        fail_note(fig, "the host not Up and registered");
        host_kill(&h);
        return;
    }
    char cmd[64], line[256] = "(no answer)";
    snprintf(cmd, sizeof cmd, "mem %d", MEM_N);
    bool ok = host_cmd(&h, cmd, "@mem ", line, sizeof line, 90000);
    char fate[128];
    host_fate(&h, fate, sizeof fate);
    host_kill(&h);
    uint64_t n = 0, before = 0, after = 0, trimmed = 0, refused = 0;
    double ms = 0;
    if (!ok || sscanf(line, "@mem ok %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %lf %" SCNu64,
                      &n, &before, &after, &trimmed, &ms, &refused) != 6) {
        fail_note(fig, "%s (host %s)", ok ? line : "no answer within 90 s", fate);
        return;
    }
    if (after <= before) {
        fail_note(fig, "RSS did not grow (%" PRIu64 " -> %" PRIu64 " bytes)", before, after);
        return;
    }
    double gib = 1024.0 * 1024.0 * 1024.0;
    bench_report(fig, (double)n / ((double)(after - before) / gib), "entities/GiB", 0);
    bench_note("%s: %" PRIu64 " idle entities (8-byte state, ids of ~10 bytes, 100 shards, "
               "passivation NONE, remember off) in one node: RSS %.1f -> %.1f MiB, %.0f bytes "
               "per entity; after malloc_trim %.1f MiB (%.3g entities/GiB); started in %.0f ms "
               "(%.0f/s, from a non-node thread in chunks of %d); no same-run baseline (Akka "
               "advertises ~2.5 million actors per GB of heap); target >= 5e6",
               fig, n, before / 1048576.0, after / 1048576.0, (double)(after - before) / (double)n,
               trimmed / 1048576.0,
               trimmed > before ? (double)n / ((double)(trimmed - before) / gib) : 0.0, ms,
               (double)n / (ms / 1000), MEM_CHUNK);
}

/* ---------------------------------------------------------------------------------------------
 */
static bool find_self(void)
{
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n <= 0)
        return false;
    self_path[n] = 0;
    return true;
}

static bool part(const char *name)
{
    const char *only = getenv("BENCH_REMEMBER_ONLY");
    return !only || strstr(only, name) != NULL;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--host") == 0)
        return host_main(argv[2]);
    if (argc > 1) {
        fprintf(stderr, "usage: bench_remember (the hosts it starts run bench_remember --host "
                        "SEED_ENDPOINT|-)\n");
        return 2;
    }
    double start = bench_now();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    atexit(kill_hosts);
    alarm(TIME_LIMIT_S);
    if (!find_self()) {
        fprintf(stderr, "bench_remember: cannot find its own program\n");
        return 1;
    }

    if (part("create") || part("recover")) {
        cluster_t cl;
        if (cluster_start(&cl, N_HOSTS, "remember_new_entities")) {
            bench_create(&cl, part("create"));
            if (part("recover"))
                bench_recover(&cl);
            cluster_stop(&cl);
        }
    }
    if (part("memory"))
        bench_memory();

    kill_hosts();
    bench_note("bench_remember: %.1f s", bench_now() - start);
    return failures ? 1 : 0;
}
