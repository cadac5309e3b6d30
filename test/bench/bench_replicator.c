/*  bench_replicator.c — the replicator: local writes, their cost in instructions, majority writes
    across three node processes, and a new node catching up on 100,000 keys.

    write_local_gcounter / write_local_orset: updates per second with SHOAL_LOCAL consistency on one
    node without peers, issued ON the node thread by a posted function that issues a batch and posts
    itself again (the _sync facade would measure the thread handoff instead), spread over 1,000
    keys. Baseline: the CRDT alone, the same mutation on 1,000 plain values with delta capture and
    take_delta (shoal_gcounter_increment / shoal_orset_add). ORSet adds cycle through 10 elements
    per key, so every key's set stays at 10 elements.

    write_local_gcounter_instructions: instructions per local GCounter update, measured under
    callgrind (this binary re-executed as `valgrind --tool=callgrind ... <self> --instr N` for two
    N; the difference of the totals over the difference of N cancels start-up). Baseline: the same
    method for the raw increment + take_delta. Target: <= 2,000 instructions per update.

    write_majority_w{1,16,256}: WriteMajority updates per second across three node processes (this
    binary re-executed as `--node PORT PEERPORT...` twice; the third node runs in this process and
    drives the load on its node thread with 1, 16 or 256 updates in flight over 1,000 GCounter
    keys, timeout 5 s; replicator defaults with gossip 2 s). Baseline, same windows: raw ZeroMQ,
    one DEALER from this process to each of two echo processes (`--echo PORT`, a ROUTER that sends
    every message back); a "write" sends 64 bytes to both and completes on the first reply.
    Target: ratio >= 0.5 at 256 in flight.

    catch_up_100k_keys: milliseconds from starting node B until its replicator holds the 100,000
    GCounter keys that node A (same process) wrote locally before; both gossip every 200 ms (the
    figure depends on it). Target < 5,000 ms.

    BENCH_REPLICATOR_ONLY=local,instr,majority,catchup runs only the parts named.

    Every wait has a deadline; a failure prints a message on stderr, kills the child processes
    (SIGKILL) and exits nonzero. Children also die with this process (PR_SET_PDEATHSIG).
*/
#include "bench.h"
#include "ddata.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NKEYS          1000
#define BATCH          1000
#define ORSET_ELEMS    10
#define MAJ_TIMEOUT_MS 5000
#define WINDOW_S       2.0
#define WARMUP_S       0.3
#define RAW_MSG_BYTES  64
#define CATCHUP_KEYS   100000
#define INSTR_N1       2000
#define INSTR_N2       12000

static const char *self_exe;

/* ---------------------------------------------------------------------------------------------
 * Failure handling and child processes
 */
#define MAX_CHILDREN 8
static volatile pid_t children[MAX_CHILDREN];

static void kill_children(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        pid_t p = children[i];
        if (p > 0) {
            kill(p, SIGKILL);
            waitpid(p, NULL, 0);
            children[i] = 0;
        }
    }
}

/* Node threads may be running: leave without atexit handlers (czmq's would wait for them). */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_replicator: FAILED: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    kill_children();
    _exit(1);
}

static void on_fatal_signal(int sig)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
    _exit(128 + sig);
}

static void pause_ms(double ms)
{
    long ns = (long)(ms * 1e6);
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
}

typedef struct {
    pid_t pid;
    int out_fd; /* the child's stdout (or stderr for valgrind), -1 if not captured */
    char buf[65536];
    size_t len;
} child_t;

/* Starts argv[0] with argv; the child's stdout (capture_fd = 1) or stderr (2) goes to a pipe. */
static void child_start(child_t *c, char *const argv[], int capture_fd)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        fail("pipe: %s", strerror(errno));
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    if (pid == 0) {
        /* async-signal-safe calls only until exec */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        dup2(fds[1], capture_fd);
        if (capture_fd == 2) {
            int dn = open("/dev/null", O_WRONLY);
            if (dn >= 0)
                dup2(dn, 1);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    c->pid = pid;
    c->out_fd = fds[0];
    c->len = 0;
    c->buf[0] = 0;
    int i = 0;
    while (i < MAX_CHILDREN && children[i] != 0)
        i++;
    if (i == MAX_CHILDREN) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail("too many child processes");
    }
    children[i] = pid;
}

/* Reads what the child wrote until `needle` appears in it, EOF, or the deadline. Returns true when
   the needle was found (or, with needle NULL, on EOF). */
static bool child_wait_for(child_t *c, const char *needle, double deadline)
{
    for (;;) {
        if (needle && strstr(c->buf, needle))
            return true;
        double left = deadline - bench_now();
        if (left <= 0 || c->out_fd < 0)
            return false;
        struct pollfd p = {c->out_fd, POLLIN, 0};
        int rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            continue;
        if (c->len + 1 >= sizeof c->buf) /* keep the tail */
            c->len = 0;
        ssize_t n = read(c->out_fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(c->out_fd);
            c->out_fd = -1;
            return needle == NULL;
        }
        c->len += (size_t)n;
        c->buf[c->len] = 0;
    }
}

static void child_kill(child_t *c)
{
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        for (int i = 0; i < MAX_CHILDREN; i++)
            if (children[i] == c->pid)
                children[i] = 0;
        c->pid = 0;
    }
    if (c->out_fd >= 0) {
        close(c->out_fd);
        c->out_fd = -1;
    }
}

/* Waits for the child to exit by itself; returns its wait status, or -1 (killed) past the
   deadline. */
static int child_reap(child_t *c, double deadline)
{
    int status = -1;
    for (;;) {
        pid_t p = waitpid(c->pid, &status, WNOHANG);
        if (p == c->pid)
            break;
        if (bench_now() > deadline) {
            child_kill(c);
            return -1;
        }
        pause_ms(10);
    }
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == c->pid)
            children[i] = 0;
    c->pid = 0;
    if (c->out_fd >= 0) {
        close(c->out_fd);
        c->out_fd = -1;
    }
    return status;
}

/* Free TCP ports on 127.0.0.1 (bound together, so they differ, then released). */
static void free_ports(int n, uint16_t *ports)
{
    int socks[8];
    for (int i = 0; i < n; i++) {
        socks[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = 0;
        socklen_t al = sizeof a;
        if (socks[i] < 0 || bind(socks[i], (struct sockaddr *)&a, sizeof a) != 0 ||
            getsockname(socks[i], (struct sockaddr *)&a, &al) != 0)
            fail("cannot find a free port: %s", strerror(errno));
        ports[i] = ntohs(a.sin_port);
    }
    for (int i = 0; i < n; i++)
        close(socks[i]);
}

static uint16_t parse_port(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0 || v < 1 || v > 65535) {
        fprintf(stderr, "bench_replicator: bad port '%s'\n", s);
        exit(2);
    }
    return (uint16_t)v;
}

static char (*make_keys(size_t n, const char *prefix))[24]
{
    char (*keys)[24] = malloc(n * sizeof *keys);
    if (!keys)
        abort();
    for (size_t i = 0; i < n; i++)
        snprintf(keys[i], sizeof keys[i], "%s-%06zu", prefix, i);
    return keys;
}

/* ---------------------------------------------------------------------------------------------
 * Nodes in this process
 */
typedef struct {
    shoal_system_t *sys;
    shoal_replicator_t *rep;
    _Atomic int peers_up;
} node_t;

static void node_on_peer(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
                         const shoal_node_t *old, uint64_t count, void *arg)
{
    (void)sys;
    (void)count;
    node_t *n = arg;
    if (ev == SHOAL_PEER_RESTARTED && old)
        shoal_replicator_remove_peer(n->rep, old);
    if (ev == SHOAL_PEER_UP || ev == SHOAL_PEER_RESTARTED) {
        shoal_replicator_add_peer(n->rep, node, true, shoal_node_port(node));
        atomic_fetch_add(&n->peers_up, 1);
    }
}

static int node_listen(shoal_system_t *sys, void *arg)
{
    return shoal_system_on_peer(sys, node_on_peer, arg);
}

static int call_connect(shoal_system_t *sys, void *arg)
{
    return shoal_system_connect(sys, arg);
}

typedef struct {
    shoal_replicator_t *rep;
    size_t count;
    shoal_replicator_stats_t st;
} query_t;

static int query_fn(shoal_system_t *sys, void *arg)
{
    (void)sys;
    query_t *q = arg;
    q->count = shoal_replicator_replica_count(q->rep);
    return shoal_replicator_stats(q->rep, &q->st);
}

static query_t node_query(node_t *n)
{
    query_t q = {.rep = n->rep};
    int rc = shoal_system_call(n->sys, query_fn, &q);
    if (rc != 0)
        fail("replicator stats: %s", shoal_strerror(rc));
    return q;
}

/* A node with a replicator; waits until the replicator has loaded (replica count > 0). */
static void node_start(node_t *n, const char *endpoint, uint32_t gossip_ms, uint32_t delta_ms)
{
    memset(n, 0, sizeof *n);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = endpoint;
    int err = 0;
    n->sys = shoal_system_new(&ss, &err);
    if (!n->sys)
        fail("cannot start a node on %s: %s", endpoint, shoal_strerror(err));
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    rs.gossip_interval_ms = gossip_ms;
    rs.delta_interval_ms = delta_ms;
    n->rep = shoal_replicator_new(n->sys, &rs, &err);
    if (!n->rep)
        fail("cannot start a replicator: %s", shoal_strerror(err));
    int rc = shoal_system_call(n->sys, node_listen, n);
    if (rc != 0)
        fail("on_peer: %s", shoal_strerror(rc));
    double deadline = bench_now() + 10;
    while (node_query(n).count == 0) {
        if (bench_now() > deadline)
            fail("replicator did not finish loading within 10 s");
        pause_ms(1);
    }
}

/* Systems are destroyed only at the end: the replicator remembers, by address, the systems it
   has registered its message handlers on and never forgets one, so a new system that malloc
   places where a destroyed one was would get no handlers (its peers' replicator messages are
   dropped as "unknown kind"). Keeping every system alive until exit avoids the reuse. */
static shoal_system_t *parked[8];

static void node_stop(node_t *n)
{
    shoal_replicator_destroy(&n->rep);
    for (size_t i = 0; i < sizeof parked / sizeof parked[0]; i++)
        if (!parked[i]) {
            parked[i] = n->sys;
            n->sys = NULL;
            return;
        }
    shoal_system_destroy(&n->sys);
}

static void nodes_destroy(void)
{
    for (size_t i = 0; i < sizeof parked / sizeof parked[0]; i++)
        shoal_system_destroy(&parked[i]);
}

/* ---------------------------------------------------------------------------------------------
 * Local writes, issued on the node thread in batches
 */
typedef struct {
    const shoal_node_t *self;
    const char *elem;
    size_t len;
} orset_arg_t;

typedef struct {
    node_t *node;
    const shoal_node_t *self;
    bool orset;
    shoal_crdt_t *initial;
    char (*keys)[24];
    size_t nkeys;
    orset_arg_t elems[ORSET_ELEMS];
    char elem_names[ORSET_ELEMS][16];
    /* node thread */
    uint64_t issued, done, todo;
    uint64_t errors;
    int first_err;
    bool finished;
    sem_t sem;
} local_t;

static int modify_gcounter(shoal_crdt_t *value, void *arg)
{
    return shoal_gcounter_increment(value, arg, 1);
}

static int modify_orset(shoal_crdt_t *value, void *arg)
{
    orset_arg_t *a = arg;
    return shoal_orset_add(value, a->self, a->elem, a->len);
}

static void local_finish(local_t *l)
{
    if (!l->finished) {
        l->finished = true;
        sem_post(&l->sem);
    }
}

static void local_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    local_t *l = arg;
    l->done++;
    if (status != 0 && l->errors++ == 0)
        l->first_err = status;
    if (l->done == l->todo && l->issued == l->todo)
        local_finish(l);
}

static int local_batch(shoal_system_t *sys, void *arg)
{
    local_t *l = arg;
    static const shoal_consistency_t wc = {.level = SHOAL_LOCAL};
    uint64_t end = l->issued + BATCH < l->todo ? l->issued + BATCH : l->todo;
    while (l->issued < end) {
        uint64_t i = l->issued;
        void *marg = l->orset ? (void *)&l->elems[(i / l->nkeys) % ORSET_ELEMS] : (void *)l->self;
        int rc = shoal_replicator_update_typed(
            l->node->rep, l->keys[i % l->nkeys], shoal_crdt_type(l->initial), &wc,
            l->orset ? modify_orset : modify_gcounter, marg, local_done, l);
        if (rc != 0) {
            if (l->errors++ == 0)
                l->first_err = rc;
            local_finish(l);
            return 0;
        }
        l->issued++;
    }
    if (l->issued < l->todo) {
        int rc = shoal_system_post(sys, local_batch, l); /* next loop turn */
        if (rc != 0) {
            if (l->errors++ == 0)
                l->first_err = rc;
            local_finish(l);
        }
    } else if (l->done == l->todo) {
        local_finish(l);
    }
    return 0;
}

static void local_init(local_t *l, node_t *n, bool orset, size_t nkeys, const char *prefix)
{
    memset(l, 0, sizeof *l);
    l->node = n;
    l->self = shoal_system_self(n->sys);
    l->orset = orset;
    l->initial = orset ? shoal_orset_new() : shoal_gcounter_new();
    l->keys = make_keys(nkeys, prefix);
    l->nkeys = nkeys;
    for (int i = 0; i < ORSET_ELEMS; i++) {
        snprintf(l->elem_names[i], sizeof l->elem_names[i], "member-%d", i);
        l->elems[i] = (orset_arg_t){l->self, l->elem_names[i], strlen(l->elem_names[i])};
    }
    sem_init(&l->sem, 0, 0);
}

static void local_free(local_t *l)
{
    shoal_crdt_destroy(&l->initial);
    free(l->keys);
    sem_destroy(&l->sem);
}

/* Issues n more updates on the node thread and waits for them all. The node thread is idle
   between runs; the post orders these writes before it reads them, and sem_wait orders its writes
   before ours. */
static void local_run(local_t *l, uint64_t n, double timeout_s)
{
    l->todo = l->issued + n;
    l->finished = false;
    int rc = shoal_system_post(l->node->sys, local_batch, l);
    if (rc != 0)
        fail("post: %s", shoal_strerror(rc));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)timeout_s;
    while (sem_timedwait(&l->sem, &ts) != 0) {
        if (errno == EINTR)
            continue;
        fail("local updates: %" PRIu64 " of %" PRIu64 " done after %.0f s", l->done, l->todo,
             timeout_s);
    }
    if (l->errors)
        fail("local update failed (%" PRIu64 " errors): %s", l->errors,
             shoal_strerror(l->first_err));
}

static void local_rate_fn(void *arg, size_t n)
{
    local_run(arg, n, 60);
}

/* ---------------------------------------------------------------------------------------------
 * The CRDT alone: the same mutations on plain values
 */
typedef struct {
    const shoal_node_t *self;
    bool orset;
    shoal_crdt_t *values[NKEYS];
    char elem_names[ORSET_ELEMS][16];
    size_t elem_lens[ORSET_ELEMS];
    uint64_t i;
} raw_crdt_t;

static void raw_crdt_init(raw_crdt_t *b, const shoal_node_t *self, bool orset)
{
    memset(b, 0, sizeof *b);
    b->self = self;
    b->orset = orset;
    for (int k = 0; k < NKEYS; k++)
        b->values[k] = orset ? shoal_orset_new() : shoal_gcounter_new();
    for (int e = 0; e < ORSET_ELEMS; e++) {
        snprintf(b->elem_names[e], sizeof b->elem_names[e], "member-%d", e);
        b->elem_lens[e] = strlen(b->elem_names[e]);
    }
}

static void raw_crdt_free(raw_crdt_t *b)
{
    for (int k = 0; k < NKEYS; k++)
        shoal_crdt_destroy(&b->values[k]);
}

static void raw_crdt_fn(void *arg, size_t n)
{
    raw_crdt_t *b = arg;
    for (size_t j = 0; j < n; j++, b->i++) {
        shoal_crdt_t *v = b->values[b->i % NKEYS];
        int rc;
        if (b->orset) {
            size_t e = (b->i / NKEYS) % ORSET_ELEMS;
            rc = shoal_orset_add(v, b->self, b->elem_names[e], b->elem_lens[e]);
        } else {
            rc = shoal_gcounter_increment(v, b->self, 1);
        }
        if (rc != 0)
            fail("raw CRDT update: %s", shoal_strerror(rc));
        shoal_crdt_t *d = shoal_crdt_take_delta(v);
        bench_sink((uintptr_t)d);
        shoal_crdt_destroy(&d);
    }
}

/* ---------------------------------------------------------------------------------------------
 * 1. Local writes
 */
static void bench_local(void)
{
    node_t n;
    node_start(&n, "tcp://127.0.0.1:0", 2000, 400);
    const char *names[2] = {"write_local_gcounter", "write_local_orset"};
    for (int orset = 0; orset <= 1; orset++) {
        local_t *l = malloc(sizeof *l);
        local_init(l, &n, orset, NKEYS, orset ? "os" : "gc");
        double rate = bench_rate(local_rate_fn, l, 0.5, 3);
        query_t q = node_query(&n);
        raw_crdt_t *b = malloc(sizeof *b);
        raw_crdt_init(b, l->self, orset);
        double raw = bench_rate(raw_crdt_fn, b, 0.5, 3);
        raw_crdt_free(b);
        free(b);
        bench_report(names[orset], rate, "ops/s", raw);
        bench_note("%s: %.0f ns per SHOAL_LOCAL update on the node thread (%d keys%s, %" PRIu64
                   " keys live); the CRDT alone (%s + take_delta): %.0f ns",
                   names[orset], 1e9 / rate, NKEYS, orset ? ", 10 elements per set" : "",
                   q.st.keys, orset ? "shoal_orset_add" : "shoal_gcounter_increment", 1e9 / raw);
        local_free(l);
        free(l);
    }
    node_stop(&n);
}

/* ---------------------------------------------------------------------------------------------
 * 2. Instructions per update under callgrind
 */
static int instr_child(bool raw, uint64_t n)
{
    if (raw) {
        raw_crdt_t *b = malloc(sizeof *b);
        raw_crdt_init(b, shoal_node_make("127.0.0.1", 1, 1), false);
        raw_crdt_fn(b, n);
        raw_crdt_free(b);
        free(b);
        return 0;
    }
    node_t nd;
    node_start(&nd, "tcp://127.0.0.1:0", 2000, 400);
    local_t *l = malloc(sizeof *l);
    local_init(l, &nd, false, NKEYS, "gc");
    local_run(l, n, 600);
    local_free(l);
    free(l);
    node_stop(&nd);
    nodes_destroy();
    return 0;
}

static const char *find_in_path(const char *prog, char *buf, size_t cap)
{
    const char *path = getenv("PATH");
    if (!path)
        return NULL;
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        if (len > 0) {
            snprintf(buf, cap, "%.*s/%s", (int)len, path, prog);
            if (access(buf, X_OK) == 0)
                return buf;
        }
        path += len;
        if (*path == ':')
            path++;
    }
    return NULL;
}

static double callgrind_total(const char *valgrind, const char *mode, uint64_t n)
{
    char nbuf[32];
    snprintf(nbuf, sizeof nbuf, "%" PRIu64, n);
    char *argv[] = {(char *)valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null",
                    (char *)self_exe, (char *)mode, nbuf, NULL};
    child_t *c = malloc(sizeof *c);
    child_start(c, argv, 2);
    double deadline = bench_now() + 90;
    child_wait_for(c, NULL, deadline); /* until EOF */
    int status = child_reap(c, deadline + 5);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("valgrind %s %s did not complete (status %d); its output:\n%s", mode, nbuf, status,
             c->buf);
    const char *p = strstr(c->buf, "Collected :");
    if (!p)
        fail("no 'Collected :' in valgrind's output:\n%s", c->buf);
    p += strlen("Collected :");
    while (*p == ' ')
        p++;
    char digits[32];
    size_t k = 0;
    for (; *p && k + 1 < sizeof digits; p++)
        if (*p >= '0' && *p <= '9')
            digits[k++] = *p;
        else if (*p != ',')
            break;
    digits[k] = 0;
    free(c);
    if (k == 0)
        fail("cannot parse valgrind's instruction count");
    return strtod(digits, NULL);
}

static void bench_instructions(void)
{
    char vbuf[PATH_MAX];
    const char *valgrind = find_in_path("valgrind", vbuf, sizeof vbuf);
    if (!valgrind) {
        bench_note("skipped write_local_gcounter_instructions: valgrind is not on PATH");
        return;
    }
    double t0 = bench_now();
    double s1 = callgrind_total(valgrind, "--instr", INSTR_N1);
    double s2 = callgrind_total(valgrind, "--instr", INSTR_N2);
    double r1 = callgrind_total(valgrind, "--instr-raw", INSTR_N1);
    double r2 = callgrind_total(valgrind, "--instr-raw", INSTR_N2);
    double shoal = (s2 - s1) / (INSTR_N2 - INSTR_N1);
    double raw = (r2 - r1) / (INSTR_N2 - INSTR_N1);
    bench_report("write_local_gcounter_instructions", shoal, "instructions", raw);
    bench_note("callgrind, (X(%d) - X(%d)) / %d updates over %d keys: %.0f instructions per "
               "SHOAL_LOCAL update (target <= 2,000), %.0f for increment + take_delta alone "
               "(%.1f s under valgrind)",
               INSTR_N2, INSTR_N1, INSTR_N2 - INSTR_N1, NKEYS, shoal, raw, bench_now() - t0);
}

/* ---------------------------------------------------------------------------------------------
 * 3. Majority writes across three processes
 */
static volatile sig_atomic_t child_stop;

static void child_on_term(int sig)
{
    (void)sig;
    child_stop = 1;
}

static shoal_replicator_t *child_rep;
static size_t child_expect;
static bool child_mesh;

static void child_on_peer(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
                          const shoal_node_t *old, uint64_t count, void *arg)
{
    (void)sys;
    (void)count;
    (void)arg;
    if (!child_rep)
        return;
    if (ev == SHOAL_PEER_RESTARTED && old)
        shoal_replicator_remove_peer(child_rep, old);
    if (ev == SHOAL_PEER_UP || ev == SHOAL_PEER_RESTARTED)
        shoal_replicator_add_peer(child_rep, node, true, shoal_node_port(node));
    if (!child_mesh && shoal_replicator_replica_count(child_rep) >= child_expect) {
        child_mesh = true;
        printf("MESH\n");
        fflush(stdout);
    }
}

typedef struct {
    int n;
    char **ports;
} child_peers_t;

static int child_setup(shoal_system_t *sys, void *arg)
{
    child_peers_t *p = arg;
    int rc = shoal_system_on_peer(sys, child_on_peer, NULL);
    for (int i = 0; rc == 0 && i < p->n; i++) {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%u", parse_port(p->ports[i]));
        rc = shoal_system_connect(sys, ep);
    }
    return rc;
}

/* --node PORT PEERPORT...: a node with the default replicator (gossip 2 s); prints READY, then
   MESH once every peer counts, and runs until killed. */
static int node_child(int argc, char **argv)
{
    signal(SIGTERM, child_on_term);
    signal(SIGINT, child_on_term);
    zsys_init();
    zsys_set_logstream(stderr);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%u", parse_port(argv[0]));
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = ep;
    int err = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    if (!sys) {
        fprintf(stderr, "bench_replicator --node: cannot start on %s: %s\n", ep,
                shoal_strerror(err));
        return 1;
    }
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    rs.gossip_interval_ms = 2000;
    child_rep = shoal_replicator_new(sys, &rs, &err);
    if (!child_rep) {
        fprintf(stderr, "bench_replicator --node: replicator: %s\n", shoal_strerror(err));
        return 1;
    }
    child_expect = (size_t)argc; /* the peers and this node */
    child_peers_t p = {argc - 1, argv + 1};
    int rc = shoal_system_call(sys, child_setup, &p);
    if (rc != 0) {
        fprintf(stderr, "bench_replicator --node: setup: %s\n", shoal_strerror(rc));
        return 1;
    }
    printf("READY %s\n", shoal_node_id(shoal_system_self(sys)));
    fflush(stdout);
    while (!child_stop && getppid() != 1)
        usleep(20000);
    shoal_replicator_destroy(&child_rep);
    shoal_system_destroy(&sys);
    return 0;
}

/* --echo PORT: a raw ZeroMQ ROUTER that sends every message back to its sender. */
static int echo_child(const char *port)
{
    signal(SIGTERM, child_on_term);
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    int zero = 0, rcvtimeo = 200;
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(router, ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%u", parse_port(port));
    if (zmq_bind(router, ep) != 0) {
        fprintf(stderr, "bench_replicator --echo: cannot bind %s: %s\n", ep, zmq_strerror(errno));
        return 1;
    }
    printf("READY\n");
    fflush(stdout);
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    while (!child_stop && getppid() != 1) {
        if (zmq_msg_recv(&id, router, 0) < 0)
            continue; /* timeout or signal: check whether to stop */
        if (zmq_msg_recv(&body, router, 0) < 0)
            continue;
        zmq_msg_send(&id, router, ZMQ_SNDMORE);
        zmq_msg_send(&body, router, 0);
    }
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    zmq_close(router);
    zmq_ctx_term(ctx);
    return 0;
}

/* The load on the in-process node: `window` WriteMajority updates in flight. */
typedef struct {
    node_t *node;
    const shoal_node_t *self;
    shoal_crdt_t *initial;
    char (*keys)[24];
    shoal_consistency_t wc;
    /* node thread */
    unsigned window, inflight;
    bool running;
    uint64_t next;
    /* read by the main thread */
    _Atomic uint64_t completed;
    _Atomic unsigned inflight_pub;
    _Atomic uint64_t failures;
    _Atomic int first_err;
} maj_t;

static void maj_done(shoal_replicator_t *r, int status, const char *key, void *arg);

static int maj_issue(maj_t *m)
{
    m->inflight++;
    atomic_store_explicit(&m->inflight_pub, m->inflight, memory_order_relaxed);
    int rc = shoal_replicator_update_typed(m->node->rep, m->keys[m->next++ % NKEYS],
                                           shoal_crdt_type(m->initial), &m->wc, modify_gcounter,
                                           (void *)m->self, maj_done, m);
    if (rc != 0) {
        m->inflight--;
        atomic_store_explicit(&m->inflight_pub, m->inflight, memory_order_relaxed);
        m->running = false;
        if (atomic_fetch_add(&m->failures, 1) == 0)
            atomic_store(&m->first_err, rc);
    }
    return rc;
}

static void maj_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    maj_t *m = arg;
    m->inflight--;
    if (status == 0) {
        atomic_fetch_add_explicit(&m->completed, 1, memory_order_relaxed);
    } else {
        m->running = false; /* stop at the first failure (also bounds recursion) */
        if (atomic_fetch_add(&m->failures, 1) == 0)
            atomic_store(&m->first_err, status);
    }
    atomic_store_explicit(&m->inflight_pub, m->inflight, memory_order_relaxed);
    if (m->running)
        maj_issue(m);
}

static int maj_start(shoal_system_t *sys, void *arg)
{
    (void)sys;
    maj_t *m = arg;
    m->running = true;
    while (m->running && m->inflight < m->window)
        if (maj_issue(m) != 0)
            return 0;
    return 0;
}

static int maj_stop(shoal_system_t *sys, void *arg)
{
    (void)sys;
    ((maj_t *)arg)->running = false;
    return 0;
}

static void maj_check(maj_t *m, const char *what)
{
    if (atomic_load(&m->failures))
        fail("%s: %" PRIu64 " WriteMajority updates failed, first: %s", what,
             atomic_load(&m->failures), shoal_strerror(atomic_load(&m->first_err)));
}

static void maj_drain(maj_t *m)
{
    int rc = shoal_system_call(m->node->sys, maj_stop, m);
    if (rc != 0)
        fail("stop: %s", shoal_strerror(rc));
    double deadline = bench_now() + MAJ_TIMEOUT_MS / 1000.0 + 3;
    while (atomic_load(&m->inflight_pub) != 0) {
        if (bench_now() > deadline)
            fail("WriteMajority: %u updates still in flight %.0f s after stopping",
                 atomic_load(&m->inflight_pub), MAJ_TIMEOUT_MS / 1000.0 + 3);
        pause_ms(1);
    }
    maj_check(m, "WriteMajority");
}

/* Runs `window` updates in flight for the warm-up and a measuring window; returns updates/s. */
static double maj_window(maj_t *m, unsigned window)
{
    m->window = window;
    int rc = shoal_system_call(m->node->sys, maj_start, m);
    if (rc != 0)
        fail("start: %s", shoal_strerror(rc));
    pause_ms(WARMUP_S * 1000);
    uint64_t c0 = atomic_load(&m->completed);
    double t0 = bench_now();
    pause_ms(WINDOW_S * 1000);
    uint64_t c1 = atomic_load(&m->completed);
    double t1 = bench_now();
    /* CLOCK_MONOTONIC seconds: a profile (perf record -k CLOCK_MONOTONIC) can be cut to it */
    fprintf(stderr, "bench_replicator: window write_majority_w%u %.6f,%.6f\n", window, t0, t1);
    maj_check(m, "WriteMajority");
    maj_drain(m);
    if (c1 == c0)
        fail("WriteMajority: no update completed in %.1f s with %u in flight", WINDOW_S, window);
    return (double)(c1 - c0) / (t1 - t0);
}

/* One update with the given level, waited for (the mesh probe). */
typedef struct {
    maj_t *m;
    shoal_consistency_t c;
    _Atomic int status; /* 1 = pending */
} probe_t;

static void probe_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    atomic_store(&((probe_t *)arg)->status, status);
}

static int probe_start(shoal_system_t *sys, void *arg)
{
    (void)sys;
    probe_t *p = arg;
    return shoal_replicator_update_typed(p->m->node->rep, "probe", shoal_crdt_type(p->m->initial),
                                         &p->c, modify_gcounter, (void *)p->m->self, probe_done,
                                         p);
}

static int probe_write(maj_t *m, shoal_level_t level)
{
    probe_t *p = calloc(1, sizeof *p); /* leaked on a timeout: the node may still complete it */
    p->m = m;
    p->c = (shoal_consistency_t){.level = level, .timeout_ms = 1000};
    atomic_store(&p->status, 1);
    int rc = shoal_system_call(m->node->sys, probe_start, p);
    if (rc != 0)
        return rc;
    double deadline = bench_now() + 3;
    while ((rc = atomic_load(&p->status)) == 1) {
        if (bench_now() > deadline)
            return SHOAL_ETIMEOUT;
        pause_ms(1);
    }
    free(p);
    return rc;
}

/* Raw ZeroMQ: a DEALER to each echo process; a write goes to both, done on the first reply. */
typedef struct {
    void *ctx, *d[2];
    uint32_t gen[256];
    bool busy[256];
    uint64_t completed;
    unsigned inflight;
} raw_zmq_t;

static void raw_send(raw_zmq_t *z, unsigned slot)
{
    uint8_t msg[RAW_MSG_BYTES] = {0};
    z->gen[slot]++;
    z->busy[slot] = true;
    memcpy(msg, &slot, 4);
    memcpy(msg + 4, &z->gen[slot], 4);
    for (int i = 0; i < 2; i++)
        if (zmq_send(z->d[i], msg, sizeof msg, 0) != RAW_MSG_BYTES)
            fail("raw zmq send: %s", zmq_strerror(errno));
    z->inflight++;
}

/* Handles replies until `until`; issues a new write for each completion while `refill`. */
static void raw_pump(raw_zmq_t *z, double until, bool refill)
{
    zmq_pollitem_t items[2] = {{z->d[0], 0, ZMQ_POLLIN, 0}, {z->d[1], 0, ZMQ_POLLIN, 0}};
    while (bench_now() < until && (refill || z->inflight > 0)) {
        int rc = zmq_poll(items, 2, 10);
        if (rc < 0 && errno != EINTR)
            fail("zmq_poll: %s", zmq_strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (!(items[i].revents & ZMQ_POLLIN))
                continue;
            uint8_t msg[RAW_MSG_BYTES];
            int n;
            while ((n = zmq_recv(z->d[i], msg, sizeof msg, ZMQ_DONTWAIT)) >= 0) {
                uint32_t slot, gen;
                if (n != RAW_MSG_BYTES)
                    continue;
                memcpy(&slot, msg, 4);
                memcpy(&gen, msg + 4, 4);
                if (slot >= 256 || !z->busy[slot] || z->gen[slot] != gen)
                    continue; /* the second reply, or one from an earlier window */
                z->busy[slot] = false;
                z->inflight--;
                z->completed++;
                if (refill)
                    raw_send(z, slot);
            }
        }
    }
}

static double raw_window(raw_zmq_t *z, unsigned window)
{
    for (unsigned s = 0; s < window; s++)
        raw_send(z, s);
    raw_pump(z, bench_now() + WARMUP_S, true);
    uint64_t c0 = z->completed;
    double t0 = bench_now();
    raw_pump(z, t0 + WINDOW_S, true);
    uint64_t c1 = z->completed;
    double t1 = bench_now();
    raw_pump(z, bench_now() + 5, false);
    if (z->inflight)
        fail("raw zmq: %u requests unanswered after 5 s", z->inflight);
    if (c1 == c0)
        fail("raw zmq: no reply in %.1f s", WINDOW_S);
    return (double)(c1 - c0) / (t1 - t0);
}

static void bench_majority(void)
{
    /* the node in this process first: the children need its port */
    node_t n;
    node_start(&n, "tcp://127.0.0.1:0", 2000, 400);
    uint16_t self_port = shoal_node_port(shoal_system_self(n.sys));
    uint16_t ports[4];
    free_ports(4, ports); /* two nodes, two echo servers */
    char pbuf[4][8], sbuf[8];
    for (int i = 0; i < 4; i++)
        snprintf(pbuf[i], sizeof pbuf[i], "%u", ports[i]);
    snprintf(sbuf, sizeof sbuf, "%u", self_port);
    child_t *kids = calloc(4, sizeof *kids);
    char *argv0[] = {(char *)self_exe, "--node", pbuf[0], sbuf, pbuf[1], NULL};
    char *argv1[] = {(char *)self_exe, "--node", pbuf[1], sbuf, pbuf[0], NULL};
    char *argv2[] = {(char *)self_exe, "--echo", pbuf[2], NULL};
    char *argv3[] = {(char *)self_exe, "--echo", pbuf[3], NULL};
    child_start(&kids[0], argv0, 1);
    child_start(&kids[1], argv1, 1);
    child_start(&kids[2], argv2, 1);
    child_start(&kids[3], argv3, 1);
    double deadline = bench_now() + 15;
    for (int i = 0; i < 4; i++)
        if (!child_wait_for(&kids[i], "READY", deadline))
            fail("child %s %s did not start (output: '%s')", i < 2 ? "--node" : "--echo", pbuf[i],
                 kids[i].buf);
    for (int i = 0; i < 2; i++) {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%s", pbuf[i]);
        int rc = shoal_system_call(n.sys, call_connect, ep);
        if (rc != 0)
            fail("connect %s: %s", ep, shoal_strerror(rc));
    }

    /* all three see each other: both children count 3 nodes, so do we, and writes succeed */
    maj_t *m = calloc(1, sizeof *m);
    m->node = &n;
    m->self = shoal_system_self(n.sys);
    m->initial = shoal_gcounter_new();
    m->keys = make_keys(NKEYS, "mj");
    m->wc = (shoal_consistency_t){.level = SHOAL_MAJORITY, .timeout_ms = MAJ_TIMEOUT_MS};
    for (int i = 0; i < 2; i++)
        if (!child_wait_for(&kids[i], "MESH", deadline))
            fail("node child on port %s did not see both peers within 15 s", pbuf[i]);
    while (node_query(&n).count < 3) {
        if (bench_now() > deadline)
            fail("the node in this process does not count 3 nodes after 15 s");
        pause_ms(5);
    }
    int rc;
    while ((rc = probe_write(m, SHOAL_MAJORITY)) != 0 || (rc = probe_write(m, SHOAL_ALL)) != 0) {
        if (bench_now() > deadline)
            fail("no WriteMajority / WriteAll succeeded within 15 s: %s", shoal_strerror(rc));
        pause_ms(50);
    }
    double mesh_s = 15 - (deadline - bench_now());

    /* raw ZeroMQ */
    raw_zmq_t *z = calloc(1, sizeof *z);
    z->ctx = zmq_ctx_new();
    int zero = 0;
    for (int i = 0; i < 2; i++) {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%s", pbuf[2 + i]);
        z->d[i] = zmq_socket(z->ctx, ZMQ_DEALER);
        zmq_setsockopt(z->d[i], ZMQ_LINGER, &zero, sizeof zero);
        if (zmq_connect(z->d[i], ep) != 0)
            fail("raw zmq connect %s: %s", ep, zmq_strerror(errno));
    }
    /* both echo servers answer before measuring */
    for (int i = 0; i < 2; i++) {
        uint8_t ping[RAW_MSG_BYTES] = {0xff}, pong[RAW_MSG_BYTES];
        int rcvtimeo = 5000;
        zmq_setsockopt(z->d[i], ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
        if (zmq_send(z->d[i], ping, sizeof ping, 0) != RAW_MSG_BYTES ||
            zmq_recv(z->d[i], pong, sizeof pong, 0) != RAW_MSG_BYTES)
            fail("raw zmq: echo server on port %s does not answer within 5 s", pbuf[2 + i]);
    }

    static const unsigned windows[3] = {1, 16, 256};
    static const char *names[3] = {"write_majority_w1", "write_majority_w16",
                                   "write_majority_w256"};
    double shoal_rate[3], raw_rate[3];
    for (int w = 0; w < 3; w++) {
        raw_rate[w] = raw_window(z, windows[w]);
        shoal_rate[w] = maj_window(m, windows[w]);
        bench_report(names[w], shoal_rate[w], "ops/s", raw_rate[w]);
    }
    query_t q = node_query(&n);
    bench_note("WriteMajority over 3 node processes (2 children + this one), %d GCounter keys, "
               "timeout %d ms, gossip 2 s; mesh up in %.2f s; %.1f s windows after %.1f s warm-up",
               NKEYS, MAJ_TIMEOUT_MS, mesh_s, WINDOW_S, WARMUP_S);
    for (int w = 0; w < 3; w++)
        bench_note("  %3u in flight: shoal %.0f/s (%.1f us each), raw zmq first-of-2 echo %.0f/s "
                   "(%.1f us each), ratio %.3f%s",
                   windows[w], shoal_rate[w], 1e6 / shoal_rate[w], raw_rate[w], 1e6 / raw_rate[w],
                   shoal_rate[w] / raw_rate[w], windows[w] == 256 ? " (target >= 0.5)" : "");
    bench_note("  replicator: %" PRIu64 " updates, %" PRIu64 " write timeouts, %" PRIu64
               " deltas sent, %" PRIu64 " gossip rounds",
               q.st.updates, q.st.write_timeouts, q.st.deltas_sent, q.st.gossip_rounds);

    for (int i = 0; i < 2; i++)
        zmq_close(z->d[i]);
    zmq_ctx_term(z->ctx);
    free(z);
    for (int i = 0; i < 4; i++)
        child_kill(&kids[i]);
    free(kids);
    shoal_crdt_destroy(&m->initial);
    node_stop(&n);
    free(m->keys);
    free(m);
}

/* ---------------------------------------------------------------------------------------------
 * 4. Catch-up of a new node
 */
static void bench_catch_up(void)
{
    node_t *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    node_start(a, "tcp://127.0.0.1:0", 200, 40);
    local_t *l = malloc(sizeof *l);
    local_init(l, a, false, CATCHUP_KEYS, "cu");
    local_run(l, CATCHUP_KEYS, 60);
    query_t qa = node_query(a);
    if (qa.st.keys != CATCHUP_KEYS)
        fail("node A holds %" PRIu64 " keys, not %d", qa.st.keys, CATCHUP_KEYS);

    double t0 = bench_now();
    node_start(b, "tcp://127.0.0.1:0", 200, 40);
    int rc = shoal_system_call(a->sys, call_connect, (void *)shoal_system_endpoint(b->sys));
    if (rc == 0)
        rc = shoal_system_call(b->sys, call_connect, (void *)shoal_system_endpoint(a->sys));
    if (rc != 0)
        fail("connect: %s", shoal_strerror(rc));
    double deadline = t0 + 75;
    double t_peers = 0;
    query_t qb;
    for (;;) {
        qb = node_query(b);
        if (!t_peers && qb.count >= 2 && node_query(a).count >= 2)
            t_peers = bench_now();
        if (qb.st.keys >= CATCHUP_KEYS)
            break;
        if (bench_now() > deadline)
            fail("catch-up: node B holds %" PRIu64 " of %d keys after 75 s", qb.st.keys,
                 CATCHUP_KEYS);
        pause_ms(20);
    }
    double ms = (bench_now() - t0) * 1000;
    bench_report("catch_up_100k_keys", ms, "ms", 0);
    bench_note("catch-up: new node B received %d GCounter keys in %.0f ms (target < 5,000 ms) "
               "from start, peers added after %.0f ms; gossip interval 200 ms (delta 40 ms) on "
               "both, so the figure depends on it; B: %" PRIu64 " full-state values, %" PRIu64
               " gossip rounds, %" PRIu64 " status sent, %" PRIu64 " chunks received",
               CATCHUP_KEYS, ms, t_peers ? (t_peers - t0) * 1000 : -1.0,
               qb.st.full_state_received, qb.st.gossip_rounds, qb.st.status_sent,
               qb.st.chunks_received);
    node_stop(b);
    local_free(l);
    free(l);
    node_stop(a);
    free(a);
    free(b);
}

/* BENCH_REPLICATOR_ONLY=local,instr,majority,catchup runs only the parts named (to repeat one
   figure, e.g. write_majority_w256, without the rest: tools/bench-series.py) */
static bool part(const char *name)
{
    const char *only = getenv("BENCH_REPLICATOR_ONLY");
    if (!only || !*only)
        return true;
    size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)); p += n)
        if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return true;
    return false;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--node") == 0)
        return node_child(argc - 2, argv + 2);
    if (argc == 3 && strcmp(argv[1], "--echo") == 0)
        return echo_child(argv[2]);
    if (argc == 3 && (strcmp(argv[1], "--instr") == 0 || strcmp(argv[1], "--instr-raw") == 0)) {
        zsys_init();
        zsys_set_logstream(stderr);
        return instr_child(strcmp(argv[1], "--instr-raw") == 0, strtoull(argv[2], NULL, 10));
    }
    if (argc != 1) {
        fprintf(stderr, "usage: bench_replicator [--node PORT PEERPORT... | --echo PORT | "
                        "--instr N | --instr-raw N]\n");
        return 2;
    }

    static char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        fail("cannot find this program's path: %s", strerror(errno));
    exe[len] = 0;
    self_exe = exe;
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);
    signal(SIGHUP, on_fatal_signal);
    signal(SIGPIPE, SIG_IGN);
    atexit(kill_children);
    zsys_init();
    zsys_set_logstream(stderr); /* stdout carries the BENCH lines */

    double t0 = bench_now();
    if (part("local"))
        bench_local();
    if (part("instr"))
        bench_instructions();
    if (part("majority"))
        bench_majority();
    if (part("catchup"))
        bench_catch_up();
    kill_children();
    nodes_destroy();
    bench_note("bench_replicator: %.1f s", bench_now() - t0);
    return 0;
}
