/*  baseline.c — raw ZeroMQ and Redis Cluster reference figures (see baseline.h). */
#include "baseline.h"
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* a message or reply that has not come within this on loopback never will: the run has failed */
#define ZMQ_STALL_MS 5000
/* how often a blocked sender or the echo thread looks whether the run is over */
#define ZMQ_RECHECK_MS 100
/* messages received before the one-way clock starts: the connection handshake and the first
   batches go through slower paths than the steady state being measured */
#define ONEWAY_WARMUP   20000
#define REQREP_WARMUP_S 0.2
#define RTT_WARMUP      200
#define MSG64           64

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Raw ZeroMQ: a ROUTER bound on an ephemeral loopback port, a DEALER connected to it
 */
typedef struct {
    void *ctx, *router, *dealer;
} zpair_t;

static void zpair_close(zpair_t *z)
{
    if (z->dealer)
        zmq_close(z->dealer);
    if (z->router)
        zmq_close(z->router);
    if (z->ctx)
        zmq_ctx_term(z->ctx);
    memset(z, 0, sizeof *z);
}

static int setopt_int(void *sock, int opt, int value)
{
    return zmq_setsockopt(sock, opt, &value, sizeof value);
}

/* hwm < 0 keeps libzmq's default high-water marks */
static int zpair_open(zpair_t *z, int router_rcvtimeo_ms, int dealer_sndtimeo_ms, int hwm)
{
    memset(z, 0, sizeof *z);
    char ep[128];
    size_t eplen = sizeof ep;
    if (!(z->ctx = zmq_ctx_new()) || !(z->router = zmq_socket(z->ctx, ZMQ_ROUTER)) ||
        !(z->dealer = zmq_socket(z->ctx, ZMQ_DEALER)))
        goto fail;
    if (setopt_int(z->router, ZMQ_LINGER, 0) || setopt_int(z->dealer, ZMQ_LINGER, 0) ||
        setopt_int(z->router, ZMQ_RCVTIMEO, router_rcvtimeo_ms) ||
        setopt_int(z->dealer, ZMQ_RCVTIMEO, ZMQ_STALL_MS) ||
        setopt_int(z->dealer, ZMQ_SNDTIMEO, dealer_sndtimeo_ms))
        goto fail;
    if (hwm >= 0 &&
        (setopt_int(z->router, ZMQ_SNDHWM, hwm) || setopt_int(z->router, ZMQ_RCVHWM, hwm) ||
         setopt_int(z->dealer, ZMQ_SNDHWM, hwm) || setopt_int(z->dealer, ZMQ_RCVHWM, hwm)))
        goto fail;
    if (zmq_bind(z->router, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(z->router, ZMQ_LAST_ENDPOINT, ep, &eplen) != 0 ||
        zmq_connect(z->dealer, ep) != 0)
        goto fail;
    return 0;
fail:
    fprintf(stderr, "baseline: zmq setup: %s\n", zmq_strerror(errno));
    zpair_close(z);
    return -1;
}

/* --- one way --------------------------------------------------------------------------------- */
typedef struct {
    void *router;
    double min_seconds;
    atomic_bool done;
    uint64_t counted; /* messages received after the warm-up, in `seconds` */
    double seconds;
    bool failed;
} oneway_t;

static void *oneway_receiver(void *arg)
{
    oneway_t *o = arg;
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    uint64_t n = 0;
    double t0 = 0;
    for (;;) {
        if (zmq_msg_recv(&id, o->router, 0) < 0 || zmq_msg_recv(&body, o->router, 0) < 0) {
            fprintf(stderr, "baseline: one-way receive: %s\n", zmq_strerror(errno));
            o->failed = true;
            break;
        }
        bench_sink(zmq_msg_size(&body));
        n++;
        if (n == ONEWAY_WARMUP) {
            t0 = bench_now();
        } else if (n > ONEWAY_WARMUP && (n & 1023) == 0) {
            double dt = bench_now() - t0;
            if (dt >= o->min_seconds) {
                o->counted = n - ONEWAY_WARMUP;
                o->seconds = dt;
                break;
            }
        }
    }
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    atomic_store(&o->done, true);
    return NULL;
}

double baseline_zmq_dealer_router_64b(double min_seconds)
{
    zpair_t z;
    /* default high-water marks: the sender is held back by TCP and libzmq as a real one is */
    if (zpair_open(&z, ZMQ_STALL_MS, ZMQ_RECHECK_MS, -1) != 0)
        return -1;
    oneway_t o = {.router = z.router, .min_seconds = min_seconds};
    pthread_t th;
    if (pthread_create(&th, NULL, oneway_receiver, &o) != 0) {
        zpair_close(&z);
        return -1;
    }
    static const uint8_t payload[MSG64];
    bool send_failed = false;
    while (!atomic_load_explicit(&o.done, memory_order_relaxed) && !send_failed) {
        for (int i = 0; i < 256; i++) {
            zmq_msg_t m;
            zmq_msg_init_size(&m, MSG64);
            memcpy(zmq_msg_data(&m), payload, MSG64);
            if (zmq_msg_send(&m, z.dealer, 0) < 0) {
                zmq_msg_close(&m);
                if (errno != EAGAIN) {
                    fprintf(stderr, "baseline: one-way send: %s\n", zmq_strerror(errno));
                    send_failed = true;
                }
                break; /* full for ZMQ_RECHECK_MS: the receiver may be done */
            }
        }
    }
    pthread_join(th, NULL);
    zpair_close(&z);
    if (o.failed || send_failed || o.seconds <= 0)
        return -1;
    return (double)o.counted / o.seconds;
}

/* --- request/reply: an echo thread on the ROUTER ---------------------------------------------- */
typedef struct {
    zpair_t z;
    pthread_t th;
    atomic_bool stop;
    bool failed;
} echo_t;

static void *echo_serve(void *arg)
{
    echo_t *e = arg;
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    while (!atomic_load_explicit(&e->stop, memory_order_relaxed)) {
        if (zmq_msg_recv(&id, e->z.router, 0) < 0) {
            if (errno == EAGAIN)
                continue;
            e->failed = true;
            break;
        }
        /* the body is part of the same message: it is there once the routing id is */
        if (zmq_msg_recv(&body, e->z.router, 0) < 0 ||
            zmq_msg_send(&id, e->z.router, ZMQ_SNDMORE) < 0 ||
            zmq_msg_send(&body, e->z.router, 0) < 0) {
            e->failed = true;
            break;
        }
    }
    if (e->failed)
        fprintf(stderr, "baseline: echo: %s\n", zmq_strerror(errno));
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    return NULL;
}

static int echo_open(echo_t *e)
{
    memset(e, 0, sizeof *e);
    /* no high-water mark: a ROUTER drops a reply it cannot queue, which would stall a large
       window; the window itself bounds what is queued */
    if (zpair_open(&e->z, ZMQ_RECHECK_MS, ZMQ_STALL_MS, 0) != 0)
        return -1;
    if (pthread_create(&e->th, NULL, echo_serve, e) != 0) {
        zpair_close(&e->z);
        return -1;
    }
    return 0;
}

static void echo_close(echo_t *e)
{
    atomic_store(&e->stop, true);
    pthread_join(e->th, NULL);
    zpair_close(&e->z);
}

static int client_send(echo_t *e, const void *buf, size_t len)
{
    if (zmq_send(e->z.dealer, buf, len, 0) != (int)len) {
        fprintf(stderr, "baseline: request send: %s\n", zmq_strerror(errno));
        return -1;
    }
    return 0;
}

static int client_recv(echo_t *e, void *buf, size_t cap)
{
    if (zmq_recv(e->z.dealer, buf, cap, 0) < 0) {
        fprintf(stderr, "baseline: reply receive: %s\n", zmq_strerror(errno));
        return -1;
    }
    return 0;
}

double baseline_zmq_reqrep_window(int window, size_t msg_bytes, double min_seconds)
{
    if (window < 1 || window > 65536)
        return -1;
    uint8_t *buf = calloc(1, msg_bytes ? msg_bytes : 1);
    if (!buf)
        return -1;
    echo_t e;
    if (echo_open(&e) != 0) {
        free(buf);
        return -1;
    }
    double rate = -1;
    int inflight = 0;
    for (; inflight < window; inflight++)
        if (client_send(&e, buf, msg_bytes) != 0)
            goto out;
    double warm_until = bench_now() + REQREP_WARMUP_S;
    while (bench_now() < warm_until) {
        if (client_recv(&e, buf, msg_bytes) != 0)
            goto out;
        inflight--;
        if (client_send(&e, buf, msg_bytes) != 0)
            goto out;
        inflight++;
    }
    uint64_t completed = 0;
    double t0 = bench_now(), dt = 0;
    for (;;) {
        if (client_recv(&e, buf, msg_bytes) != 0)
            goto out;
        inflight--;
        completed++;
        if ((dt = bench_now() - t0) >= min_seconds)
            break;
        if (client_send(&e, buf, msg_bytes) != 0)
            goto out;
        inflight++;
    }
    /* every request answered: a lost one would mean the figure counts a broken run */
    for (; inflight > 0; inflight--)
        if (client_recv(&e, buf, msg_bytes) != 0)
            goto out;
    rate = (double)completed / dt;
out:
    echo_close(&e);
    free(buf);
    return e.failed ? -1 : rate;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double baseline_zmq_rtt_us(int samples)
{
    if (samples < 1)
        return -1;
    double *us = malloc(sizeof *us * (size_t)samples);
    if (!us)
        return -1;
    echo_t e;
    if (echo_open(&e) != 0) {
        free(us);
        return -1;
    }
    double median = -1;
    uint8_t buf[MSG64] = {0};
    for (int i = 0; i < RTT_WARMUP; i++)
        if (client_send(&e, buf, sizeof buf) != 0 || client_recv(&e, buf, sizeof buf) != 0)
            goto out;
    for (int i = 0; i < samples; i++) {
        double t0 = bench_now();
        if (client_send(&e, buf, sizeof buf) != 0 || client_recv(&e, buf, sizeof buf) != 0)
            goto out;
        us[i] = (bench_now() - t0) * 1e6;
    }
    qsort(us, (size_t)samples, sizeof *us, cmp_double);
    median = samples % 2 ? us[samples / 2] : (us[samples / 2 - 1] + us[samples / 2]) / 2;
out:
    echo_close(&e);
    free(us);
    return e.failed ? -1 : median;
}

/* ---------------------------------------------------------------------------------------------
 * Redis Cluster
 */
#define REDIS_BUS_OFFSET 10000 /* Redis listens for its cluster bus on the client port + 10000 */
/* client ports from here up to PORT_LAST, so that the bus ports (30000-32767) also stay below
   the kernel's ephemeral range (32768-60999), where an outgoing connection could take one
   between our probe and the server's bind */
#define PORT_FIRST           20000
#define PORT_LAST            (32767 - REDIS_BUS_OFFSET)
#define PING_DEADLINE_S      10.0
#define CLUSTER_DEADLINE_S   30.0
#define CREATE_DEADLINE_S    30.0
#define BENCHMARK_DEADLINE_S 120.0
#define STOP_DEADLINE_S      5.0
#define POLL_MS              20

static void set_err(baseline_redis_t *rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_err(baseline_redis_t *rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rc->err, sizeof rc->err, fmt, ap);
    va_end(ap);
}

static bool port_free(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0)
        return false;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

/* A client port whose bus port is free too; successive calls never return the same port twice
   in a row of PORT_LAST - PORT_FIRST calls. Starts at a place that depends on the pid so that
   parallel runs rarely probe the same ports. 0 if none. */
static int free_port_pair(void)
{
    static int next;
    const int span = PORT_LAST - PORT_FIRST + 1;
    if (!next)
        next = PORT_FIRST + (int)((unsigned)getpid() * 7919u % (unsigned)span);
    for (int tries = 0; tries < span; tries++) {
        int port = next;
        next = next >= PORT_LAST ? PORT_FIRST : next + 1;
        if (port_free(port) && port_free(port + REDIS_BUS_OFFSET))
            return port;
    }
    return 0;
}

static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        char full[512];
        if (len > 0 && len < sizeof full - strlen(prog) - 2) {
            snprintf(full, sizeof full, "%.*s/%s", (int)len, path, prog);
            if (access(full, X_OK) == 0)
                return true;
        }
        path += len;
        if (*path == ':')
            path++;
    }
    return false;
}

/* Forks argv[0] (looked up on PATH) in `dir` (NULL: here) with stdin from /dev/null, stdout to
   out_fd (-1: /dev/null), stderr to /dev/null if quiet. The child dies with this process. */
static pid_t spawn(char *const argv[], const char *dir, int out_fd, bool quiet)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid; /* -1 on failure */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127); /* the parent died before prctl */
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd < 0 || (dir && chdir(dir) != 0))
        _exit(127);
    dup2(null_fd, 0);
    dup2(out_fd >= 0 ? out_fd : null_fd, 1);
    if (quiet)
        dup2(null_fd, 2);
    execvp(argv[0], argv);
    _exit(127);
}

/* Runs argv to completion and returns its exit status (-1: could not run it, killed by a signal,
   or still running at the deadline, when it is killed), with its stdout in out (NUL-terminated,
   cut at cap - 1 bytes; the rest is read and dropped so the child never blocks on the pipe). */
static int run_capture(char *const argv[], char *out, size_t cap, double timeout_s, bool quiet)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = spawn(argv, NULL, fds[1], quiet);
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    size_t len = 0;
    bool timed_out = false;
    double deadline = bench_now() + timeout_s;
    for (;;) {
        double left = deadline - bench_now();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        char chunk[4096];
        ssize_t n = read(fds[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* EOF: the child closed its stdout */
        size_t keep = cap > len + 1 ? cap - len - 1 : 0;
        if (keep > (size_t)n)
            keep = (size_t)n;
        memcpy(out + len, chunk, keep);
        len += keep;
    }
    close(fds[0]);
    if (cap)
        out[len] = '\0';
    if (timed_out) {
        fprintf(stderr, "baseline: %s still running after %.0f s: killed\n", argv[0], timeout_s);
        kill(pid, SIGKILL);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* The last line of a server's log, for a note on why it stopped. */
static void log_tail(const char *dir, char *line, size_t cap)
{
    char path[96], buf[1024];
    snprintf(path, sizeof path, "%s/redis.log", dir);
    line[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fseek(f, -(long)(sizeof buf - 1), SEEK_END) != 0)
        rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    const char *start = strrchr(buf, '\n');
    start = start ? start + 1 : buf;
    size_t len = strlen(start) < cap - 1 ? strlen(start) : cap - 1;
    memcpy(line, start, len);
    line[len] = '\0';
}

/* True if server i is still running; reaps it otherwise. */
static bool server_alive(baseline_redis_t *rc, int i)
{
    if (rc->pid[i] <= 0)
        return false;
    int status;
    if (waitpid(rc->pid[i], &status, WNOHANG) == 0)
        return true;
    rc->pid[i] = 0;
    return false;
}

static int remove_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        unlinkat(dirfd(d), ent->d_name, 0);
    }
    closedir(d);
    return rmdir(path);
}

void baseline_redis_cluster_stop(baseline_redis_t *rc)
{
    for (int i = 0; i < rc->n; i++)
        if (rc->pid[i] > 0)
            kill(rc->pid[i], SIGTERM);
    double deadline = bench_now() + STOP_DEADLINE_S;
    for (;;) {
        bool any = false;
        for (int i = 0; i < rc->n; i++)
            any |= server_alive(rc, i);
        if (!any || bench_now() >= deadline)
            break;
        pause_ms(10);
    }
    for (int i = 0; i < rc->n; i++) {
        if (rc->pid[i] <= 0)
            continue;
        fprintf(stderr, "baseline: redis-server on port %d ignored SIGTERM for %.0f s: killed\n",
                rc->port[i], STOP_DEADLINE_S);
        kill(rc->pid[i], SIGKILL);
        while (waitpid(rc->pid[i], NULL, 0) < 0 && errno == EINTR) {
        }
        rc->pid[i] = 0;
    }
    for (int i = 0; i < rc->n; i++)
        if (rc->dir[i][0] && remove_dir(rc->dir[i]) != 0)
            fprintf(stderr, "baseline: cannot remove %s: %s\n", rc->dir[i], strerror(errno));
    rc->n = 0;
}

/* Runs `redis-cli -p PORT args...` and reports whether its output contains `want`. */
static bool cli_says(int port, const char *want, const char *arg1, const char *arg2)
{
    char ps[16], out[4096];
    snprintf(ps, sizeof ps, "%d", port);
    char *argv[] = {"redis-cli", "-p", ps, (char *)arg1, (char *)arg2, NULL};
    return run_capture(argv, out, sizeof out, 5.0, true) == 0 && strstr(out, want) != NULL;
}

static int start_server(baseline_redis_t *rc, int i)
{
    snprintf(rc->dir[i], sizeof rc->dir[i], "/tmp/shoal-redis-XXXXXX");
    if (!mkdtemp(rc->dir[i])) {
        set_err(rc, "mkdtemp: %s", strerror(errno));
        rc->dir[i][0] = '\0';
        return BASELINE_EFAIL;
    }
    if (!(rc->port[i] = free_port_pair())) {
        set_err(rc, "no free port pair in %d-%d", PORT_FIRST, PORT_LAST);
        return BASELINE_EFAIL;
    }
    char ps[16];
    snprintf(ps, sizeof ps, "%d", rc->port[i]);
    /* persistence off (appendonly no, no save points): the figure is the request path alone,
       as Shoal's in-memory entities are measured without a journal */
    char *argv[] = {"redis-server",
                    "--port",
                    ps,
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--appendonly",
                    "no",
                    "--save",
                    "",
                    "--dir",
                    rc->dir[i],
                    "--logfile",
                    "redis.log",
                    "--daemonize",
                    "no",
                    NULL};
    if ((rc->pid[i] = spawn(argv, rc->dir[i], -1, false)) < 0) {
        rc->pid[i] = 0;
        set_err(rc, "fork: %s", strerror(errno));
        return BASELINE_EFAIL;
    }
    return 0;
}

static int wait_ping(baseline_redis_t *rc, int i)
{
    double deadline = bench_now() + PING_DEADLINE_S;
    while (!cli_says(rc->port[i], "PONG", "ping", NULL)) {
        if (!server_alive(rc, i)) {
            char last[160];
            log_tail(rc->dir[i], last, sizeof last);
            set_err(rc, "redis-server on port %d exited: %s", rc->port[i],
                    last[0] ? last : "(no log)");
            return BASELINE_EFAIL;
        }
        if (bench_now() >= deadline) {
            set_err(rc, "redis-server on port %d does not answer PING after %.0f s", rc->port[i],
                    PING_DEADLINE_S);
            return BASELINE_EFAIL;
        }
        pause_ms(POLL_MS);
    }
    return 0;
}

static int create_cluster(baseline_redis_t *rc)
{
    char addr[BASELINE_REDIS_MAX][32], out[8192];
    char *argv[BASELINE_REDIS_MAX + 8];
    int a = 0;
    argv[a++] = "redis-cli";
    argv[a++] = "--cluster";
    argv[a++] = "create";
    for (int i = 0; i < rc->n; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", rc->port[i]);
        argv[a++] = addr[i];
    }
    argv[a++] = "--cluster-replicas";
    argv[a++] = "0";
    argv[a++] = "--cluster-yes";
    argv[a] = NULL;
    int st = run_capture(argv, out, sizeof out, CREATE_DEADLINE_S, false);
    if (st != 0) {
        set_err(rc, "redis-cli --cluster create failed (status %d)", st);
        return BASELINE_EFAIL;
    }
    double deadline = bench_now() + CLUSTER_DEADLINE_S;
    for (int i = 0; i < rc->n; i++) {
        while (!cli_says(rc->port[i], "cluster_state:ok", "cluster", "info")) {
            if (bench_now() >= deadline) {
                set_err(rc, "node on port %d not cluster_state:ok after %.0f s", rc->port[i],
                        CLUSTER_DEADLINE_S);
                return BASELINE_EFAIL;
            }
            pause_ms(POLL_MS);
        }
    }
    return 0;
}

int baseline_redis_cluster_start(baseline_redis_t *rc, int n_masters)
{
    memset(rc, 0, sizeof *rc);
    if (n_masters < 1 || n_masters > BASELINE_REDIS_MAX) {
        set_err(rc, "n_masters %d out of 1..%d", n_masters, BASELINE_REDIS_MAX);
        return BASELINE_EFAIL;
    }
    static const char *const progs[] = {"redis-server", "redis-cli", "redis-benchmark"};
    for (size_t p = 0; p < sizeof progs / sizeof progs[0]; p++) {
        if (!on_path(progs[p])) {
            set_err(rc,
                    "%s not found: install the Debian packages redis-server and redis-tools "
                    "(sh tools/install-deps.sh)",
                    progs[p]);
            return BASELINE_EMISSING;
        }
    }
    int err = 0;
    for (int i = 0; i < n_masters && !err; i++) {
        rc->n = i + 1; /* counted before it can fail, so that stop cleans up its dir */
        err = start_server(rc, i);
    }
    for (int i = 0; i < rc->n && !err; i++)
        err = wait_ping(rc, i);
    if (!err)
        err = create_cluster(rc);
    if (err) {
        char why[sizeof rc->err];
        memcpy(why, rc->err, sizeof why);
        baseline_redis_cluster_stop(rc);
        memcpy(rc->err, why, sizeof why);
    }
    return err;
}

double baseline_redis_incr(const baseline_redis_t *rc, int clients, int pipeline, int requests)
{
    if (rc->n < 1 || clients < 1 || pipeline < 1 || requests < 1)
        return -1;
    char port[16], c[16], p[16], n[16], out[8192];
    snprintf(port, sizeof port, "%d", rc->port[0]);
    snprintf(c, sizeof c, "%d", clients);
    snprintf(p, sizeof p, "%d", pipeline);
    snprintf(n, sizeof n, "%d", requests);
    /* in cluster mode redis-benchmark spreads the clients over the masters; without -r all the
       requests sent to one master increment one key of its slots */
    char *argv[] = {"redis-benchmark",
                    "--cluster",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    port,
                    "-c",
                    c,
                    "-P",
                    p,
                    "-n",
                    n,
                    "-t",
                    "incr",
                    "--csv",
                    NULL};
    int st = run_capture(argv, out, sizeof out, BENCHMARK_DEADLINE_S, false);
    if (st != 0) {
        fprintf(stderr, "baseline: redis-benchmark failed (status %d)\n", st);
        return -1;
    }
    /* --csv: a header line, then "INCR","<rps>","<avg ms>",... The rate is requests over
       redis-benchmark's own clock, which in cluster mode (one event loop per master, each stopped
       by a 250 ms timer) stops on the first tick after the last reply: a run of T seconds reads
       up to 0.25 / T low, so callers run for a few seconds. */
    const char *row = strstr(out, "\"INCR\",\"");
    if (!row) {
        fprintf(stderr, "baseline: no INCR row in redis-benchmark's output:\n%s\n", out);
        return -1;
    }
    char *end;
    double rps = strtod(row + strlen("\"INCR\",\""), &end);
    if (end == row + strlen("\"INCR\",\"") || *end != '"' || rps <= 0) {
        fprintf(stderr, "baseline: cannot read the rate in redis-benchmark's row: %.80s\n", row);
        return -1;
    }
    return rps;
}
