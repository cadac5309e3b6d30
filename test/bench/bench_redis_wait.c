/*  bench_redis_wait.c — a durable sharded counter against Redis Cluster with WAIT (issue 22,
    "New figure, the comparison a user makes").

    Shoal: three nodes in this process (each its own node thread; release build), each with its
    own LMDB store (durable/durable.h) with write_behind_ms = 1000 — the loss window of Redis's
    appendfsync everysec; commits are fsynced — under the role's replicator that sharding uses.
    Type "ctr", entity state on, 100 shards, 1,000 counters "n0".."n999". An "inc" ask adds one to
    the entity's counter and is answered "ok" only once a save (shoal_entity_save: WriteMajority,
    2 of 3 nodes) holding that increment is acknowledged. An entity folds the increments that
    arrive while a save is in flight into its next save (group commit: one save in flight per
    entity, the next one carries everything received meanwhile), so no ask is answered before
    the save that includes it is acknowledged.

    Redis: a real Redis Cluster of 3 masters with one replica each (six redis-server processes on
    loopback ports, --cluster-enabled yes --appendonly yes --appendfsync everysec, in a temp dir,
    created with redis-cli --cluster create --cluster-replicas 1). Every INCR is followed by
    WAIT 1 0 on the same connection: the increment is answered once a replica has it. The driver
    is a cluster-aware hiredis loop in this thread (hiredis has no cluster client): the slot map
    from CLUSTER SLOTS, the CRC16 key slot computed here, one connection per master per client,
    a MOVED reply refreshes the map and sends the increment again.

    Both sides: 50 clients, client c increments the counters c, c + 50, ... (20 each) in turn,
    P = 1 (one increment outstanding per client) and P = 16 (16 outstanding per client), each for
    3 s (0.5 s under SHOAL_BENCH_QUICK), the best of 2 windows (1 under SHOAL_BENCH_QUICK) taken
    in turns with Redis's; each window is printed on stderr in CLOCK_MONOTONIC seconds for perf
    record -k CLOCK_MONOTONIC / perf report --time T0,T1. Shoal's clients ask through the region of node c % 3
    and send the next increment from the reply callback (node thread); Redis's clients are
    driven by one poll loop.
      durable_incr_vs_redis_wait_p1, _p16: acknowledged increments per second; value = Shoal,
      baseline = Redis, ratio = value / baseline (target >= 1.0).
    At the end: the sum of the Shoal counters read back through asks (each the entity's stored
    state) equals the increments acknowledged, and the sum of the Redis keys (GET) equals the
    INCRs acknowledged; a mismatch fails the bench (exit 1).

    Skipped (exit 0, no BENCH line) when redis-server or redis-cli is not installed. Every
    redis-server runs in one process group, killed at exit (atexit, and on SIGINT, SIGTERM,
    SIGHUP, SIGSEGV, SIGABRT, SIGBUS: the temp dir goes too), and each dies with this process
    (PR_SET_PDEATHSIG) if it is killed (SIGKILL leaves the temp dir, named on the first line).
*/
#include "bench.h"
#include "durable.h"
#include "procs.h"
#include "sharding.h"

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NODES 3
#define CLIENTS 50
#define COUNTERS 1000
#define PER_CLIENT (COUNTERS / CLIENTS)
#define PMAX 16
#define REDIS_N 6
#define MASTERS 3

static double window_s = 3.0;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_redis_wait: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* =============================================================================================
 * Redis processes
 */
static char tmpdir[256];
static volatile pid_t redis_pgid; /* 0: none started */
static pid_t redis_pids[REDIS_N];
static int redis_port[REDIS_N];

static void redis_kill_all(void)
{
    pid_t g = redis_pgid;
    if (g > 0) {
        kill(-g, SIGKILL);
        for (int i = 0; i < REDIS_N; i++)
            if (redis_pids[i] > 0)
                waitpid(redis_pids[i], NULL, 0);
        redis_pgid = 0;
    }
}

static void at_exit(void)
{
    redis_kill_all();
    if (tmpdir[0]) {
        trm_tree(tmpdir);
        tmpdir[0] = 0;
    }
}

/* Only async-signal-safe calls: kill the group, remove the temp dir with rm -rf in a child,
   then die of the signal. */
static void on_signal(int sig)
{
    pid_t g = redis_pgid;
    if (g > 0) {
        kill(-g, SIGKILL);
        for (int i = 0; i < REDIS_N; i++)
            if (redis_pids[i] > 0)
                waitpid(redis_pids[i], NULL, 0);
    }
    if (tmpdir[0]) {
        pid_t p = fork();
        if (p == 0) {
            char *const argv[] = {"rm", "-rf", tmpdir, NULL};
            execv("/bin/rm", argv);
            _exit(127);
        }
        if (p > 0)
            waitpid(p, NULL, 0);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static bool port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* Six ports p with p and its cluster bus port p + 10000 free, below the ephemeral range. */
static void pick_ports(void)
{
    unsigned seed = (unsigned)getpid() ^ (unsigned)(bench_now() * 1000);
    for (int attempt = 0; attempt < 200; attempt++) {
        int base = 12000 + (int)(rand_r(&seed) % 15000);
        bool ok = true;
        for (int i = 0; i < REDIS_N && ok; i++)
            ok = port_free(base + i) && port_free(base + i + 10000);
        if (ok) {
            for (int i = 0; i < REDIS_N; i++)
                redis_port[i] = base + i;
            return;
        }
    }
    die("no free block of ports for the Redis cluster");
}

/* Runs argv with stdout and stderr to `log`; in the Redis process group when group is true. */
static pid_t spawn(char *const argv[], const char *log, bool group)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        if (group)
            setpgid(0, redis_pgid ? redis_pgid : 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    if (group) {
        /* both sides set it: whichever runs first, the child is in the group before it execs */
        setpgid(pid, redis_pgid ? redis_pgid : pid);
        if (!redis_pgid)
            redis_pgid = pid;
    }
    return pid;
}

static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    char buf[1024];
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, path, prog);
        if (access(buf, X_OK) == 0)
            return true;
        path += n + (path[n] == ':');
    }
    return false;
}

static redisContext *redis_connect(int port, double seconds)
{
    double until = bench_now() + seconds;
    for (;;) {
        struct timeval tv = {2, 0};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err) {
            redisReply *r = redisCommand(c, "PING");
            bool ok = r && r->type == REDIS_REPLY_STATUS;
            if (r)
                freeReplyObject(r);
            if (ok)
                return c;
        }
        if (c)
            redisFree(c);
        if (bench_now() > until)
            return NULL;
        usleep(20000);
    }
}

/* The reply to a command as text (status, string or error), "" otherwise; into out. */
static void redis_text(redisContext *c, const char *cmd, char *out, size_t cap)
{
    out[0] = 0;
    redisReply *r = redisCommand(c, cmd);
    if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
              r->type == REDIS_REPLY_ERROR))
        snprintf(out, cap, "%.*s", (int)r->len, r->str);
    if (r)
        freeReplyObject(r);
}

static void redis_start(void)
{
    char tmpl[] = "/tmp/bench_redis_wait.XXXXXX";
    if (!mkdtemp(tmpl))
        die("mkdtemp: %s", strerror(errno));
    snprintf(tmpdir, sizeof tmpdir, "%s", tmpl);
    bench_note("redis: cluster in %s", tmpdir);
    pick_ports();
    for (int i = 0; i < REDIS_N; i++) {
        char dir[300], port[16], log[320], conf[64];
        snprintf(dir, sizeof dir, "%s/%d", tmpdir, redis_port[i]);
        if (mkdir(dir, 0755) != 0)
            die("mkdir %s: %s", dir, strerror(errno));
        snprintf(port, sizeof port, "%d", redis_port[i]);
        snprintf(log, sizeof log, "%s/redis.log", dir);
        snprintf(conf, sizeof conf, "nodes-%d.conf", redis_port[i]);
        char *argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", dir,
                        "--cluster-enabled", "yes", "--cluster-config-file", conf,
                        "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                        "--protected-mode", "no", "--daemonize", "no", NULL};
        redis_pids[i] = spawn(argv, log, true);
    }
    for (int i = 0; i < REDIS_N; i++) {
        redisContext *c = redis_connect(redis_port[i], 20);
        if (!c)
            die("redis-server on port %d did not answer (log: %s/%d/redis.log)", redis_port[i],
                tmpdir, redis_port[i]);
        redisFree(c);
    }
    char addr[REDIS_N][32];
    char *argv[REDIS_N + 8];
    int k = 0;
    argv[k++] = "redis-cli";
    argv[k++] = "--cluster";
    argv[k++] = "create";
    for (int i = 0; i < REDIS_N; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", redis_port[i]);
        argv[k++] = addr[i];
    }
    argv[k++] = "--cluster-replicas";
    argv[k++] = "1";
    argv[k++] = "--cluster-yes";
    argv[k] = NULL;
    char log[300];
    snprintf(log, sizeof log, "%s/cluster-create.log", tmpdir);
    pid_t p = spawn(argv, log, false);
    int st = 0;
    if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("redis-cli --cluster create failed (log: %s)", log);
    /* every node sees the cluster ok, every master has its replica online */
    double until = bench_now() + 60;
    for (;;) {
        int ok = 0, masters_with_replica = 0;
        for (int i = 0; i < REDIS_N; i++) {
            redisContext *c = redis_connect(redis_port[i], 5);
            if (!c)
                die("redis on port %d is gone", redis_port[i]);
            char buf[4096];
            redis_text(c, "CLUSTER INFO", buf, sizeof buf);
            ok += strstr(buf, "cluster_state:ok") != NULL;
            redis_text(c, "INFO replication", buf, sizeof buf);
            masters_with_replica += strstr(buf, "role:master") && strstr(buf, "state=online");
            redisFree(c);
        }
        if (ok == REDIS_N && masters_with_replica == MASTERS)
            break;
        if (bench_now() > until)
            die("the Redis cluster did not become ok with a replica per master (%d ok, %d)", ok,
                masters_with_replica);
        usleep(100000);
    }
}

/* =============================================================================================
 * The Redis driver: slots, connections, the poll loop
 */
static uint16_t crc16(const char *buf, size_t len) /* CRC16-CCITT (XModem), Redis's key hash */
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint8_t)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

static unsigned key_slot(const char *key, size_t len)
{
    /* a hash tag {...} hashes only what is inside (none of our keys has one; kept exact) */
    const char *open = memchr(key, '{', len);
    if (open) {
        const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
        if (close && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & 16383;
    }
    return crc16(key, len) & 16383;
}

static int master_port[MASTERS];
static uint8_t slot_master[16384]; /* index into master_port */
static unsigned long slot_refreshes;

/* The slot map from CLUSTER SLOTS of any node that answers. */
static void slots_refresh(void)
{
    slot_refreshes++;
    for (int i = 0; i < REDIS_N; i++) {
        redisContext *c = redis_connect(redis_port[i], 5);
        if (!c)
            continue;
        redisReply *r = redisCommand(c, "CLUSTER SLOTS");
        int n_masters = 0;
        int ports[MASTERS] = {0};
        bool ok = r && r->type == REDIS_REPLY_ARRAY;
        for (size_t k = 0; ok && k < r->elements; k++) {
            redisReply *e = r->element[k];
            if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
                e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2) {
                ok = false;
                break;
            }
            long long from = e->element[0]->integer, to = e->element[1]->integer;
            int port = (int)e->element[2]->element[1]->integer;
            int m = -1;
            for (int j = 0; j < n_masters; j++)
                if (ports[j] == port)
                    m = j;
            if (m < 0) {
                if (n_masters == MASTERS) {
                    ok = false;
                    break;
                }
                m = n_masters;
                ports[n_masters++] = port;
            }
            for (long long s = from; s <= to && s < 16384; s++)
                slot_master[s] = (uint8_t)m;
        }
        if (r)
            freeReplyObject(r);
        redisFree(c);
        if (ok && n_masters == MASTERS) {
            memcpy(master_port, ports, sizeof ports);
            return;
        }
    }
    die("CLUSTER SLOTS: no node gave a map of %d masters", MASTERS);
}

/* One increment in flight on a connection: INCR's reply, then WAIT's. */
typedef struct {
    int counter;
    bool incr_ok;  /* INCR answered with an integer */
    bool moved;    /* INCR answered MOVED/ASK: send it again after the refresh */
    int replies;   /* 0, 1 or 2 received */
} rop_t;

#define QCAP (2 * PMAX)
typedef struct {
    redisContext *c;
    int port;
    bool want_write;
    rop_t q[QCAP]; /* ring of ops in flight, in the order sent */
    int head, n;
} rconn_t;

typedef struct {
    rconn_t conn[MASTERS]; /* by master index */
    int inflight;
    unsigned next;          /* which of its counters next */
    int owed;               /* increments to send again (MOVED) */
} rclient_t;

static rclient_t rcl[CLIENTS];
static uint64_t redis_acked;      /* INCR + WAIT >= 1 both answered */
static uint64_t redis_failed;     /* an error reply, WAIT 0 */
static uint64_t redis_incr_ok;    /* INCRs that returned an integer (applied) */

static void rconn_open(rconn_t *k, int port)
{
    if (k->c)
        redisFree(k->c);
    memset(k, 0, sizeof *k);
    k->port = port;
    k->c = redisConnectNonBlock("127.0.0.1", port);
    if (!k->c || k->c->err)
        die("connect to redis %d: %s", port, k->c ? k->c->errstr : "out of memory");
    int one = 1;
    setsockopt(k->c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void rclients_open(void)
{
    for (int c = 0; c < CLIENTS; c++)
        for (int m = 0; m < MASTERS; m++)
            rconn_open(&rcl[c].conn[m], master_port[m]);
}

static void rclients_close(void)
{
    for (int c = 0; c < CLIENTS; c++)
        for (int m = 0; m < MASTERS; m++)
            if (rcl[c].conn[m].c) {
                redisFree(rcl[c].conn[m].c);
                rcl[c].conn[m].c = NULL;
            }
}

static int counter_of(int client, unsigned j)
{
    return client + CLIENTS * (int)(j % PER_CLIENT);
}

static void rsend(int client, int counter)
{
    char key[16];
    int klen = snprintf(key, sizeof key, "n%d", counter);
    rconn_t *k = &rcl[client].conn[slot_master[key_slot(key, (size_t)klen)]];
    if (k->n == QCAP)
        die("redis: client %d has more than %d increments on one connection", client, QCAP);
    rop_t *op = &k->q[(k->head + k->n++) % QCAP];
    memset(op, 0, sizeof *op);
    op->counter = counter;
    redisAppendCommand(k->c, "INCR %s", key);
    redisAppendCommand(k->c, "WAIT 1 0");
    int done = 0;
    if (redisBufferWrite(k->c, &done) != REDIS_OK)
        die("redis %d: write: %s", k->port, k->c->errstr);
    k->want_write = !done;
    rcl[client].inflight++;
}

static void rsend_next(int client)
{
    rsend(client, counter_of(client, rcl[client].next++));
}

/* A reply on connection k of client c: INCR's (noted) or WAIT's (completes the increment; the
   client sends its next one while sending). */
static void rreply(int client, rconn_t *k, redisReply *r, bool sending, bool *refresh)
{
    if (k->n == 0)
        die("redis %d: a reply with nothing in flight", k->port);
    rop_t *op = &k->q[k->head];
    if (op->replies == 0) {
        if (r->type == REDIS_REPLY_INTEGER) {
            op->incr_ok = true;
            redis_incr_ok++;
        } else if (r->type == REDIS_REPLY_ERROR &&
                   (strncmp(r->str, "MOVED", 5) == 0 || strncmp(r->str, "ASK", 3) == 0)) {
            op->moved = true;
            *refresh = true;
        } else {
            bench_note("redis: INCR answered %.*s", (int)r->len, r->str ? r->str : "?");
        }
        op->replies = 1;
        return;
    }
    /* WAIT's reply: the number of replicas that acknowledged the writes before it */
    bool waited = r->type == REDIS_REPLY_INTEGER && r->integer >= 1;
    bool moved = op->moved;
    if (op->incr_ok && waited)
        redis_acked++;
    else if (!moved)
        redis_failed++;
    k->head = (k->head + 1) % QCAP;
    k->n--;
    rcl[client].inflight--;
    if (moved)
        rcl[client].owed++; /* sent again once the map is fresh */
    else if (sending)
        rsend_next(client);
}

/* Runs the clients with p increments outstanding each for window_s (sending), then until every
   increment in flight is answered. Returns the increments acknowledged within the window. */
static uint64_t redis_run(int p, double *seconds)
{
    static struct pollfd pfd[CLIENTS * MASTERS];
    for (int c = 0; c < CLIENTS; c++) {
        rcl[c].next = 0;
        rcl[c].owed = 0;
    }
    uint64_t acked0 = redis_acked;
    double t0 = bench_now();
    for (int c = 0; c < CLIENTS; c++)
        for (int i = 0; i < p; i++)
            rsend_next(c);
    bool sending = true;
    uint64_t in_window = 0;
    double drain_until = 0;
    for (;;) {
        double now = bench_now();
        if (sending && now - t0 >= window_s) {
            sending = false;
            in_window = redis_acked - acked0;
            *seconds = now - t0;
            drain_until = now + 60;
        }
        int total = 0;
        for (int c = 0; c < CLIENTS; c++)
            total += rcl[c].inflight;
        if (!sending && total == 0)
            break;
        if (!sending && now > drain_until)
            die("redis: %d increments unanswered 60 s after the window", total);
        for (int c = 0; c < CLIENTS; c++)
            for (int m = 0; m < MASTERS; m++) {
                rconn_t *k = &rcl[c].conn[m];
                pfd[c * MASTERS + m].fd = k->c->fd;
                pfd[c * MASTERS + m].events = POLLIN | (k->want_write ? POLLOUT : 0);
                pfd[c * MASTERS + m].revents = 0;
            }
        int n = poll(pfd, CLIENTS * MASTERS, 100);
        if (n < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        bool refresh = false;
        for (int c = 0; c < CLIENTS && n > 0; c++)
            for (int m = 0; m < MASTERS; m++) {
                rconn_t *k = &rcl[c].conn[m];
                short re = pfd[c * MASTERS + m].revents;
                if (!re)
                    continue;
                if (re & POLLOUT) {
                    int done = 0;
                    if (redisBufferWrite(k->c, &done) != REDIS_OK)
                        die("redis %d: write: %s", k->port, k->c->errstr);
                    k->want_write = !done;
                }
                if (re & (POLLIN | POLLERR | POLLHUP)) {
                    if (redisBufferRead(k->c) != REDIS_OK)
                        die("redis %d: read: %s", k->port, k->c->errstr);
                    void *r = NULL;
                    while (k->n > 0) {
                        if (redisGetReply(k->c, &r) != REDIS_OK)
                            die("redis %d: %s", k->port, k->c->errstr);
                        if (!r)
                            break;
                        rreply(c, k, r, sending, &refresh);
                        freeReplyObject(r);
                    }
                }
            }
        if (refresh) {
            /* wait for every connection to be quiet, then reconnect to the new masters */
            bool quiet = true;
            for (int c = 0; c < CLIENTS; c++)
                quiet &= rcl[c].inflight == 0;
            if (quiet) {
                slots_refresh();
                rclients_close();
                rclients_open();
                for (int c = 0; c < CLIENTS; c++)
                    for (; rcl[c].owed > 0; rcl[c].owed--)
                        rsend_next(c);
            }
        }
    }
    return in_window;
}

/* The sum of every counter key (GET through the map). */
static uint64_t redis_sum(void)
{
    redisContext *c[MASTERS];
    for (int m = 0; m < MASTERS; m++)
        if (!(c[m] = redis_connect(master_port[m], 5)))
            die("redis %d: no connection for the read back", master_port[m]);
    uint64_t sum = 0;
    for (int i = 0; i < COUNTERS; i++) {
        char key[16];
        int klen = snprintf(key, sizeof key, "n%d", i);
        redisReply *r = redisCommand(c[slot_master[key_slot(key, (size_t)klen)]], "GET %s", key);
        if (!r)
            die("redis: GET %s failed", key);
        if (r->type == REDIS_REPLY_STRING)
            sum += strtoull(r->str, NULL, 10);
        else if (r->type != REDIS_REPLY_NIL)
            die("redis: GET %s answered type %d", key, r->type);
        freeReplyObject(r);
    }
    for (int m = 0; m < MASTERS; m++)
        redisFree(c[m]);
    return sum;
}

/* =============================================================================================
 * Shoal: three nodes, durable stores, the counter type
 */
static shoal_system_t *sys[NODES];
static shoal_cluster_t *cl[NODES];
static shoal_sharding_t *sh[NODES];
static shoal_durable_t *dur[NODES];
static shoal_replicator_t *rep[NODES];
static shoal_region_t *ctr[NODES];

typedef struct {
    uint64_t count;           /* in memory: every increment received */
    bool saving;              /* a save is in flight */
    shoal_sender_t *flight;   /* answered when the save in flight is acknowledged */
    size_t n_flight, cap_flight;
    shoal_sender_t *wait;     /* received since: go with the next save */
    size_t n_wait, cap_wait;
} counter_t;

static uint64_t saves_failed, saves_issued;

static void senders_push(shoal_sender_t **v, size_t *n, size_t *cap, shoal_sender_t s)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        *v = realloc(*v, *cap * sizeof **v);
        if (!*v)
            abort();
    }
    (*v)[(*n)++] = s;
}

static void counter_flush(shoal_entity_t *e, counter_t *x);

static void counter_saved(shoal_entity_t *e, void *state, int status, void *arg)
{
    (void)arg;
    counter_t *x = state;
    shoal_region_t *r = shoal_entity_region(e);
    const char *answer = status == 0 ? "ok" : "failed";
    for (size_t i = 0; i < x->n_flight; i++)
        shoal_region_reply(r, &x->flight[i], answer, strlen(answer));
    x->n_flight = 0;
    x->saving = false;
    if (status != 0) {
        /* the entity restarts from its stored state: what waits was not stored, say so */
        __atomic_add_fetch(&saves_failed, 1, __ATOMIC_RELAXED);
        for (size_t i = 0; i < x->n_wait; i++)
            shoal_region_reply(r, &x->wait[i], answer, strlen(answer));
        x->n_wait = 0;
        return;
    }
    if (x->n_wait)
        counter_flush(e, x);
}

/* One save of the counter as it is now, carrying every increment waiting. */
static void counter_flush(shoal_entity_t *e, counter_t *x)
{
    shoal_sender_t *t = x->flight;
    size_t tc = x->cap_flight;
    x->flight = x->wait;
    x->cap_flight = x->cap_wait;
    x->n_flight = x->n_wait;
    x->wait = t;
    x->cap_wait = tc;
    x->n_wait = 0;
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(x->count >> (8 * i));
    x->saving = true;
    __atomic_add_fetch(&saves_issued, 1, __ATOMIC_RELAXED);
    int rc = shoal_entity_save(e, b, sizeof b, counter_saved, NULL);
    if (rc != 0) {
        /* not issued: counter_saved will not run */
        x->saving = false;
        shoal_region_t *r = shoal_entity_region(e);
        for (size_t i = 0; i < x->n_flight; i++)
            shoal_region_reply(r, &x->flight[i], "failed", 6);
        x->n_flight = 0;
        __atomic_add_fetch(&saves_failed, 1, __ATOMIC_RELAXED);
    }
}

static uint64_t stored_count(shoal_entity_t *e)
{
    size_t n = 0;
    const uint8_t *d = shoal_entity_stored(e, &n);
    uint64_t v = 0;
    if (d && n == 8)
        for (int i = 0; i < 8; i++)
            v |= (uint64_t)d[i] << (8 * i);
    return v;
}

static void *counter_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    counter_t *x = calloc(1, sizeof *x);
    if (!x)
        abort();
    x->count = stored_count(e);
    return x;
}

static void counter_receive(shoal_entity_t *e, void *state, const void *msg, size_t len,
                            void *arg)
{
    (void)arg;
    counter_t *x = state;
    if (len == 3 && memcmp(msg, "inc", 3) == 0) {
        shoal_sender_t s = shoal_entity_sender(e);
        if (!s.ask_id)
            return;
        x->count++;
        senders_push(&x->wait, &x->n_wait, &x->cap_wait, s);
        if (!x->saving)
            counter_flush(e, x);
        return;
    }
    if (len == 3 && memcmp(msg, "get", 3) == 0) {
        /* the stored value: what the saves acknowledged so far left */
        char r[32];
        int k = snprintf(r, sizeof r, "%llu", (unsigned long long)stored_count(e));
        shoal_entity_reply(e, r, (size_t)k);
    }
}

static void counter_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)arg;
    counter_t *x = state;
    free(x->flight);
    free(x->wait);
    free(x);
}

static const shoal_entity_fns_t fns = {counter_start, counter_receive, counter_stop, NULL};

static bool all_up(void)
{
    return bench_all_up(cl, NODES);
}

static bool all_healthy(void)
{
    for (int i = 0; i < NODES; i++)
        if (!shoal_sharding_healthy(sh[i], NULL, 0))
            return false;
    return true;
}

static void wait_for(bool (*pred)(void), double seconds, const char *what)
{
    double until = bench_now() + seconds;
    while (!pred()) {
        if (bench_now() > until)
            die("%s", what);
        usleep(20000);
    }
}

static void shoal_start(void)
{
    for (int i = 0; i < NODES; i++) {
        char dir[320], err[512];
        snprintf(dir, sizeof dir, "%s/shoal-%d", tmpdir, i);
        shoal_durable_settings_t ds;
        shoal_durable_settings_default(&ds);
        ds.dir = dir;
        ds.write_behind_ms = 1000; /* appendfsync everysec's window; commits are fsynced */
        int open_err = 0;          /* the code; the words in shoal_last_error_detail() */
        dur[i] = shoal_durable_open(&ds, &open_err);
        if (open_err)
            snprintf(err, sizeof err, "%s", shoal_last_error_detail());
        if (!dur[i])
            die("durable store: %s", err);
        shoal_system_settings_t ss;
        shoal_system_settings_default(&ss);
        ss.endpoint = "tcp://127.0.0.1:0";
        int e = 0;
        sys[i] = shoal_system_new(&ss, &e);
        if (!sys[i])
            die("system: %s", shoal_strerror(e));
        shoal_cluster_settings_t cs;
        shoal_cluster_settings_fast(&cs);
        cl[i] = shoal_cluster_new(sys[i], &cs, &e);
        sh[i] = cl[i] ? shoal_sharding_new(cl[i], &e) : NULL;
        if (!sh[i])
            die("cluster or sharding: %s", shoal_strerror(e));
        /* the replicator sharding would start for the role (region.c), with the store */
        static const char *durable[] = {"shard-*"};
        shoal_replicator_settings_t rs;
        shoal_replicator_settings_default(&rs);
        rs.gossip_interval_ms = cs.gossip_interval_ms;
        rs.delta_interval_ms = rs.gossip_interval_ms / 5 ? rs.gossip_interval_ms / 5 : 1;
        rs.notify_subscribers_interval_ms = 50;
        rs.max_delta_elements = 5;
        rs.prefer_oldest = true;
        rs.durable_keys = durable;
        rs.n_durable_keys = 1;
        rs.store = shoal_durable_store(dur[i], "");
        if (!rs.store)
            die("no store");
        rep[i] = shoal_replicator_new(sys[i], &rs, &e);
        if (!rep[i])
            die("replicator: %s", shoal_strerror(e));
        if (shoal_cluster_follow(cl[i], rep[i]) != 0)
            die("follow");
        const char *seed = shoal_system_endpoint(sys[0]);
        if (shoal_cluster_join(cl[i], i ? &seed : NULL, i ? 1 : 0) != 0)
            die("join");
        if (i == 0) {
            double until = bench_now() + 20;
            while (shoal_cluster_self_status(cl[0]) != SHOAL_MEMBER_UP && bench_now() < until)
                usleep(20000);
        }
    }
    wait_for(all_up, 60, "the nodes did not come up");
    for (int i = 0; i < NODES; i++) {
        shoal_sharding_settings_t s;
        shoal_sharding_settings_fast(&s);
        s.number_of_shards = 100;
        s.rebalance_interval_ms = 600000; /* nothing moves unasked during the windows */
        s.entity_state = true;
        s.passivation.policy = SHOAL_PASSIVATE_NONE;
        s.passivation.idle_timeout_ms = 0;
        s.replicator = rep[i];
        int e = 0;
        ctr[i] = shoal_region_start(sh[i], "ctr", &s, &fns, NULL, &e);
        if (!ctr[i])
            die("region: %s", shoal_strerror(e));
    }
    wait_for(all_healthy, 30, "the regions did not register");
}

static void shoal_stop(void)
{
    for (int i = NODES - 1; i >= 0; i--) {
        shoal_sharding_destroy(&sh[i]);
        shoal_cluster_destroy(&cl[i]);
        shoal_replicator_destroy(&rep[i]);
        shoal_system_destroy(&sys[i]);
        shoal_durable_close(&dur[i]);
    }
}

/* --- the Shoal clients: the next ask from the reply callback ------------------------------- */
typedef struct {
    int id;
    int inflight;    /* atomics: callbacks run on the three node threads */
    unsigned next;
    int owed;        /* asks the callback could not send (SHOAL_EBUFFER): the main thread does */
} sclient_t;

static sclient_t scl[CLIENTS];
static int shoal_sending; /* atomic: read on the node threads */
static uint64_t shoal_acked, shoal_failed;

static void on_inc(shoal_region_t *r, int status, const void *reply, size_t len, void *arg);

static int ssend(sclient_t *c)
{
    char id[16];
    unsigned j = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED);
    snprintf(id, sizeof id, "n%d", counter_of(c->id, j));
    __atomic_add_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST);
    int rc = shoal_region_ask(ctr[c->id % NODES], id, "inc", 3, 30000, on_inc, c);
    if (rc != 0)
        __atomic_sub_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST);
    return rc;
}

static void on_inc(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    sclient_t *c = arg;
    if (status == 0 && len == 2 && memcmp(reply, "ok", 2) == 0)
        __atomic_add_fetch(&shoal_acked, 1, __ATOMIC_SEQ_CST);
    else
        __atomic_add_fetch(&shoal_failed, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&shoal_sending, __ATOMIC_SEQ_CST) && ssend(c) != 0)
        __atomic_add_fetch(&c->owed, 1, __ATOMIC_SEQ_CST);
    __atomic_sub_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST);
}

static int shoal_total_inflight(void)
{
    int t = 0;
    for (int c = 0; c < CLIENTS; c++)
        t += __atomic_load_n(&scl[c].inflight, __ATOMIC_SEQ_CST) +
             __atomic_load_n(&scl[c].owed, __ATOMIC_SEQ_CST);
    return t;
}

/* Sends what the callbacks owe (and the first p of each client). */
static void shoal_pay_owed(void)
{
    for (int c = 0; c < CLIENTS; c++)
        while (__atomic_load_n(&scl[c].owed, __ATOMIC_SEQ_CST) > 0) {
            int rc = ssend(&scl[c]);
            if (rc == SHOAL_EBUFFER)
                return; /* again at the next turn */
            if (rc != 0)
                die("ask: %s", shoal_strerror(rc));
            __atomic_sub_fetch(&scl[c].owed, 1, __ATOMIC_SEQ_CST);
        }
}

static uint64_t shoal_run(int p, double *seconds)
{
    for (int c = 0; c < CLIENTS; c++) {
        scl[c].id = c;
        scl[c].next = 0;
        scl[c].owed = 0;
    }
    uint64_t acked0 = __atomic_load_n(&shoal_acked, __ATOMIC_SEQ_CST);
    __atomic_store_n(&shoal_sending, 1, __ATOMIC_SEQ_CST);
    double t0 = bench_now();
    for (int c = 0; c < CLIENTS; c++)
        __atomic_add_fetch(&scl[c].owed, p, __ATOMIC_SEQ_CST);
    while (bench_now() - t0 < window_s) {
        shoal_pay_owed();
        usleep(1000);
    }
    __atomic_store_n(&shoal_sending, 0, __ATOMIC_SEQ_CST);
    *seconds = bench_now() - t0;
    uint64_t in_window = __atomic_load_n(&shoal_acked, __ATOMIC_SEQ_CST) - acked0;
    /* owed asks are not sent any more: the window is over */
    for (int c = 0; c < CLIENTS; c++)
        __atomic_store_n(&scl[c].owed, 0, __ATOMIC_SEQ_CST);
    double until = bench_now() + 60;
    while (shoal_total_inflight() > 0) {
        if (bench_now() > until)
            die("shoal: %d increments unanswered 60 s after the window", shoal_total_inflight());
        usleep(1000);
    }
    return in_window;
}

static uint64_t shoal_sum(void)
{
    uint64_t sum = 0;
    shoal_buf_t reply = {0};
    for (int i = 0; i < COUNTERS; i++) {
        char id[16];
        snprintf(id, sizeof id, "n%d", i);
        shoal_buf_reset(&reply);
        int rc = shoal_region_ask_sync(ctr[i % NODES], id, "get", 3, 30000, &reply);
        if (rc != 0)
            die("shoal: get %s: %s", id, shoal_strerror(rc));
        char b[32];
        size_t n = reply.len < sizeof b - 1 ? reply.len : sizeof b - 1;
        memcpy(b, reply.data, n);
        b[n] = 0;
        sum += strtoull(b, NULL, 10);
    }
    shoal_buf_free(&reply);
    return sum;
}

/* Every counter once (shards allocated, entities started, connections warm): not measured, but
   counted in the check at the end. */
static void shoal_warm(void)
{
    shoal_buf_t reply = {0};
    for (int i = 0; i < COUNTERS; i++) {
        char id[16];
        snprintf(id, sizeof id, "n%d", i);
        shoal_buf_reset(&reply);
        int rc = shoal_region_ask_sync(ctr[i % NODES], id, "inc", 3, 30000, &reply);
        if (rc == 0 && reply.len == 2 && memcmp(reply.data, "ok", 2) == 0)
            __atomic_add_fetch(&shoal_acked, 1, __ATOMIC_SEQ_CST);
        else
            die("shoal: the first inc of %s failed (%s)", id, shoal_strerror(rc));
    }
    shoal_buf_free(&reply);
}

/* CPU seconds: this process (every thread), this thread, a child (from /proc) */
static double cpu_of(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static double redis_cpu(void)
{
    double t = 0;
    for (int i = 0; i < REDIS_N; i++) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)redis_pids[i]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        /* after the name: state(3) ... utime(14) stime(15) */
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
            t += (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    return t;
}

int main(void)
{
    if (!on_path("redis-server") || !on_path("redis-cli")) {
        bench_note("bench_redis_wait: skipped: redis-server or redis-cli is not installed "
                   "(Debian packages redis-server, redis-tools; sh tools/install-deps.sh)");
        return 0;
    }
    if (getenv("SHOAL_BENCH_QUICK"))
        window_s = 0.5;
    signal(SIGPIPE, SIG_IGN);
    atexit(at_exit);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGSEGV, SIGABRT, SIGBUS};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        signal(sigs[i], on_signal);

    /* Redis first: the servers are forked before the node threads exist */
    redis_start();
    slots_refresh();
    rclients_open();
    shoal_start();
    shoal_warm();

    /* each rate is the best of `reps` windows, Shoal's and Redis's taken in turns, so that load
       from elsewhere on the machine (2 cores, shared) weighs on both sides of a ratio */
    static const int ps[] = {1, PMAX};
    int reps = getenv("SHOAL_BENCH_QUICK") ? 1 : 2;
    double shoal_rate[2] = {0, 0}, redis_rate[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        for (int rep_i = 0; rep_i < reps; rep_i++) {
            double ts = 0, tr = 0;
            double c0 = cpu_of(RUSAGE_SELF), w0 = bench_now();
            uint64_t ns = shoal_run(ps[k], &ts);
            double c1 = cpu_of(RUSAGE_SELF), r0 = redis_cpu(), d0 = cpu_of(RUSAGE_THREAD);
            double w1 = bench_now();
            uint64_t nr = redis_run(ps[k], &tr);
            double r1 = redis_cpu(), d1 = cpu_of(RUSAGE_THREAD);
            /* the windows in CLOCK_MONOTONIC seconds, so that a profile (perf record -k
               CLOCK_MONOTONIC) can be cut to one (perf report --time T0,T1) */
            fprintf(stderr, "bench_redis_wait: window shoal_p%d %.6f,%.6f\n", ps[k], w0, w0 + ts);
            fprintf(stderr, "bench_redis_wait: window redis_p%d %.6f,%.6f\n", ps[k], w1, w1 + tr);
            double sr = (double)ns / ts, rr = (double)nr / tr;
            bench_note("P=%d run %d: Shoal %.0f/s, Redis %.0f/s; CPU s per s (window and drain; "
                       "2 cores = 2.0): Shoal's three nodes and clients %.2f; Redis's six "
                       "servers %.2f, its driver thread %.2f",
                       ps[k], rep_i + 1, sr, rr, (c1 - c0) / (w1 - w0), (r1 - r0) / (bench_now() - w1),
                       (d1 - d0) / (bench_now() - w1));
            if (sr > shoal_rate[k])
                shoal_rate[k] = sr;
            if (rr > redis_rate[k])
                redis_rate[k] = rr;
        }
    bench_report("durable_incr_vs_redis_wait_p1", shoal_rate[0], "ops/s", redis_rate[0]);
    bench_note("P=1, 50 clients: Shoal %.0f increments/s (saved with WriteMajority to LMDB, "
               "write-behind 1 s), Redis Cluster %.0f INCR+WAIT 1 0/s (3 masters + 3 replicas, "
               "appendfsync everysec)",
               shoal_rate[0], redis_rate[0]);
    bench_report("durable_incr_vs_redis_wait_p16", shoal_rate[1], "ops/s", redis_rate[1]);
    bench_note("P=16, 50 clients: Shoal %.0f increments/s, Redis Cluster %.0f INCR+WAIT/s",
               shoal_rate[1], redis_rate[1]);

    /* the counters on both sides */
    int bad = 0;
    uint64_t ssum = shoal_sum();
    uint64_t sacked = __atomic_load_n(&shoal_acked, __ATOMIC_SEQ_CST);
    uint64_t sfailed = __atomic_load_n(&shoal_failed, __ATOMIC_SEQ_CST);
    bench_note("shoal: counters sum to %llu, %llu increments acknowledged, %llu failed; "
               "%llu saves (%.2f increments a save), %llu failed",
               (unsigned long long)ssum, (unsigned long long)sacked, (unsigned long long)sfailed,
               (unsigned long long)saves_issued,
               saves_issued ? (double)(sacked + sfailed) / (double)saves_issued : 0.0,
               (unsigned long long)saves_failed);
    /* a failed save may still have reached a replica: then the sum may hold it, never less */
    if (sfailed ? (ssum < sacked || ssum > sacked + sfailed) : ssum != sacked) {
        fprintf(stderr, "bench_redis_wait: shoal: the counters sum to %llu, %llu increments were "
                        "acknowledged (%llu failed)\n",
                (unsigned long long)ssum, (unsigned long long)sacked, (unsigned long long)sfailed);
        bad = 1;
    }
    uint64_t rsum = redis_sum();
    bench_note("redis: keys sum to %llu, %llu INCR+WAIT acknowledged, %llu INCRs applied, %llu "
               "failed, %lu slot map reads",
               (unsigned long long)rsum, (unsigned long long)redis_acked,
               (unsigned long long)redis_incr_ok, (unsigned long long)redis_failed,
               slot_refreshes);
    if (rsum != redis_incr_ok || redis_acked != redis_incr_ok) {
        fprintf(stderr, "bench_redis_wait: redis: the keys sum to %llu, %llu INCRs applied, %llu "
                        "acknowledged after WAIT\n",
                (unsigned long long)rsum, (unsigned long long)redis_incr_ok,
                (unsigned long long)redis_acked);
        bad = 1;
    }
    for (int i = 0; i < NODES; i++) {
        shoal_durable_stats_t ds;
        shoal_durable_stats(dur[i], &ds);
        bench_note("shoal node %d: LMDB %llu puts in %llu commits, %llu pending, %llu failures", i,
                   (unsigned long long)ds.puts, (unsigned long long)ds.commits,
                   (unsigned long long)ds.pending, (unsigned long long)ds.failures);
    }
    rclients_close();
    shoal_stop();
    return bad;
}
