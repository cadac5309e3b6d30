/*  bench_membership.c — cluster membership against HashiCorp Serf, on this machine, in this run.

    Every Shoal node is a separate build/bin/shoal-member process (release); every Serf node a
    `serf agent` process. This program starts them, polls them (Shoal: shoal_client_cluster_view,
    the JSON view; Serf: its RPC protocol, msgpack over TCP, the `members` command that
    `serf members` uses, over one kept connection per agent, as Shoal's clients are kept) and
    kills them. Ratios are shoal / serf: below 1 is better.

    converge_{10,25}_nodes: ms from starting the first node until every node sees all N members
      Up and converged (Serf: all N "alive"). The first node starts alone (Shoal: --seed of its own
      endpoint, which forms the cluster; Serf: no -join); once its port accepts connections the
      others start with it as their seed (Shoal: --seed, Serf: -join). The _fast variants are
      the median of 3 clusters (see main).
    detect_unreachable_10_nodes: ms from SIGKILL of one member (the one with the highest address,
      never the leader) until every other member marks it unreachable (Serf: "failed").
    remove_after_kill_10_nodes (Shoal only; Serf keeps failed members listed for 24 h): until it is
      gone from every other member's view. The split-brain resolver's stable-after (20 s by
      default, 2 s fast) dominates it.
    Shoal's defaults (Akka's: gossip 1 s, heartbeats 1 s, acceptable pause 3 s) against Serf's
    default lan profile; the _fast variants: `shoal-member --fast` (200 ms, pause 1 s, stable-after
    2 s) against `serf agent -profile=local`.
    idle_rss_kb: VmRSS of an idle member (the median of the 10) of the converged 10-node cluster,
      defaults; baseline a Serf agent's in its 10-node cluster. Target <= 5 MB.
    gossip_bytes_per_s_{10,25}: bytes sent per second per member, idle and converged (defaults),
      over an 8 s window. When this program may enter a network namespace of its own (root, or
      CAP_SYS_ADMIN) both systems run there and the figure is the loopback interface's transmitted
      bytes (everything on the wire: gossip, heartbeats, probes, TCP/UDP and IP headers) divided by
      N, for Shoal and for Serf alike; the namespace also keeps other programs' traffic and ports
      out. Otherwise it is the nodes' own node_bytes_out counters (heartbeats, which go through
      their own socket, and headers not counted) without a baseline.

    gossip_bytes_per_s_N_model (N = 10, 25, 50, as measured in this run): the same figure from the
      messages' real sizes and the idle gossip schedule (test/bench/common/gossip_model.h), with
      the measured figure as its baseline: the ratio checks the model.
    gossip_bytes_per_s_1000_model: the model at 1,000 members (target <= 10 KB/s per member),
      which no machine of ours runs; what one membership change costs at 1,000 members is
      bench_cluster_state's gossip_bytes_per_change_1000.

    BENCH_MEMBERSHIP_POLL_MS sets the interval between polling rounds (default 20 ms; diagnosis),
    and each convergence line on stderr counts the views a member did not answer within 250 ms.

    Without serf on PATH the Shoal figures are printed without baselines (a note says so on
    stderr). Every wait has a deadline; a failed measurement is reported on stderr and makes the
    exit code 1, the others still run. Every child is killed (SIGKILL) on exit, on a signal, on the
    overall time limit, and with this process (PR_SET_PDEATHSIG).
*/
#include "bench.h"
#include "gossip_model.h"
#include "membership.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>
#include <arpa/inet.h>

#define MAXN 100
#define CONVERGE_DEADLINE_MS 60000
#define DETECT_DEADLINE_MS 60000
#define REMOVE_DEADLINE_MS 90000
#define SETTLE_MS 3000
#define BYTES_WINDOW_MS 8000
#define TIME_LIMIT_S 1200
#define POLL_MS 20 /* between polling rounds: fine enough, and light on 2 cores */

static int poll_ms = POLL_MS; /* BENCH_MEMBERSHIP_POLL_MS overrides it (diagnosis) */
static int view_failures;     /* views not answered within the client's timeout, or refused */

static int failures;

static void note_failure(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note_failure(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_membership: FAILED: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    failures++;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static double now_ms(void)
{
    return bench_now() * 1000.0;
}

/* ---------------------------------------------------------------------------------------------
 * Children: every one is recorded, so that any exit kills them all.
 */
static pid_t children[4 * MAXN + 8];
static volatile sig_atomic_t n_children;

static void kill_children(void)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
}

static void reap(pid_t pid)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] == pid) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            children[i] = 0;
        }
}

static void on_fatal_signal(int sig)
{
    kill_children();
    static const char msg[] = "bench_membership: stopped (signal or time limit); children killed\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(128 + sig);
}

static pid_t spawn(char *const argv[])
{
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        perror("bench_membership: fork");
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            if (!getenv("BENCH_MEMBERSHIP_VERBOSE")) {
                dup2(devnull, 1);
                dup2(devnull, 2);
            }
        }
        execv(argv[0], argv);
        _exit(127);
    }
    if (n_children < (int)(sizeof children / sizeof children[0]))
        children[n_children++] = pid;
    return pid;
}

/* ---------------------------------------------------------------------------------------------
 * Ports and the network
 */
static int port_cursor;

static bool port_free(int port)
{
    int types[2] = {SOCK_STREAM, SOCK_DGRAM}; /* Serf binds both on its port */
    for (int t = 0; t < 2; t++) {
        int s = socket(AF_INET, types[t], 0);
        if (s < 0)
            return false;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = bind(s, (struct sockaddr *)&sa, sizeof sa) == 0;
        close(s);
        if (!ok)
            return false;
    }
    return true;
}

static int next_port(void)
{
    for (int tries = 0; tries < 2000; tries++) {
        int p = port_cursor++;
        if (port_cursor > 32000)
            port_cursor = 20000;
        if (port_free(p))
            return p;
    }
    return -1;
}

static int tcp_connect(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(s);
        return -1;
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return s;
}

static bool wait_port(int port, int deadline_ms)
{
    double end = now_ms() + deadline_ms;
    while (now_ms() < end) {
        int s = tcp_connect(port);
        if (s >= 0) {
            close(s);
            return true;
        }
        sleep_ms(2);
    }
    return false;
}

/* A network namespace of our own with its loopback up: isolation from other programs' ports and
   traffic, and a loopback byte counter that only our nodes move. Must run before any thread. */
static bool private_network(void)
{
    if (getenv("BENCH_MEMBERSHIP_NO_NETNS"))
        return false;
    if (unshare(CLONE_NEWNET) != 0)
        return false;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
        fprintf(stderr, "bench_membership: new network namespace without a loopback\n");
        exit(1);
    }
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) {
        fprintf(stderr, "bench_membership: cannot bring the loopback up: %s\n", strerror(errno));
        exit(1);
    }
    close(s);
    return true;
}

/* Bytes transmitted on the loopback interface (of this network namespace). */
static long long lo_tx_bytes(void)
{
    FILE *f = fopen("/proc/net/dev", "r");
    if (!f)
        return -1;
    char line[512];
    long long tx = -1;
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ')
            p++;
        if (strncmp(p, "lo:", 3) != 0)
            continue;
        long long v[9];
        if (sscanf(p + 3, "%lld %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9)
            tx = v[8];
    }
    fclose(f);
    return tx;
}

/* A "Field:   123 kB" line of /proc/PID/<file> (status: VmRSS, RssAnon; smaps_rollup: Pss). */
static long proc_kb(pid_t pid, const char *file, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':')
            kb = strtol(line + fl + 1, NULL, 10);
    fclose(f);
    return kb;
}

/* ---------------------------------------------------------------------------------------------
 * Serf's RPC: msgpack maps over TCP. A request is a header {Command, Seq} and, for some
 * commands, a body; a response is a header {Seq, Error} and, for some, a body.
 */
typedef struct {
    uint8_t data[1 << 20];
    size_t len;
} rbuf_t;

static rbuf_t rpc_in;

static void mp_str(shoal_buf_t *b, const char *s)
{
    uint8_t h = (uint8_t)(0xa0 | strlen(s)); /* our strings are < 32 bytes */
    shoal_buf_append(b, &h, 1);
    shoal_buf_append(b, s, strlen(s));
}

static void mp_map(shoal_buf_t *b, int n)
{
    uint8_t h = (uint8_t)(0x80 | n);
    shoal_buf_append(b, &h, 1);
}

static void mp_uint(shoal_buf_t *b, uint32_t v)
{
    if (v < 128) {
        uint8_t h = (uint8_t)v;
        shoal_buf_append(b, &h, 1);
    } else {
        uint8_t h[5] = {0xce, (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8),
                        (uint8_t)v};
        shoal_buf_append(b, h, 5);
    }
}

typedef struct {
    char name[64], status[16];
} serf_member_t;

typedef struct {
    const uint8_t *p, *end;
    bool incomplete;
    /* what the walk collects */
    serf_member_t *members;
    int n_members, cap_members;
    char error[128];
    bool in_header;
} mp_reader_t;

static bool need(mp_reader_t *r, size_t n)
{
    if ((size_t)(r->end - r->p) < n) {
        r->incomplete = true;
        return false;
    }
    return true;
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Reads one value. A string comes back in (str, slen); containers are walked. depth 1 = the
   message map, 2 = Members, 3 = one member. Returns false on incomplete or malformed input. */
static bool mp_value(mp_reader_t *r, int depth, const char *key, const uint8_t **str,
                     size_t *slen);

static bool mp_container(mp_reader_t *r, int depth, uint64_t n, bool map)
{
    if (depth > 8)
        return false;
    if (map && depth == 3 && !r->in_header) {
        if (r->n_members == r->cap_members) {
            r->cap_members = r->cap_members ? 2 * r->cap_members : 32;
            r->members = realloc(r->members, (size_t)r->cap_members * sizeof *r->members);
            if (!r->members)
                abort();
        }
        memset(&r->members[r->n_members++], 0, sizeof *r->members);
    }
    for (uint64_t i = 0; i < n; i++) {
        char k[32] = "";
        if (map) {
            const uint8_t *ks = NULL;
            size_t kl = 0;
            if (!mp_value(r, depth + 1, NULL, &ks, &kl))
                return false;
            if (ks && kl < sizeof k) {
                memcpy(k, ks, kl);
                k[kl] = 0;
            }
        }
        const uint8_t *vs = NULL;
        size_t vl = 0;
        if (!mp_value(r, depth + 1, k, &vs, &vl))
            return false;
        if (!map || !vs)
            continue;
        if (depth == 1 && r->in_header && strcmp(k, "Error") == 0) {
            size_t m = vl < sizeof r->error - 1 ? vl : sizeof r->error - 1;
            memcpy(r->error, vs, m);
            r->error[m] = 0;
        }
        if (depth == 3 && !r->in_header && r->n_members) {
            serf_member_t *m = &r->members[r->n_members - 1];
            char *dst = strcmp(k, "Name") == 0 ? m->name : strcmp(k, "Status") == 0 ? m->status
                                                                                     : NULL;
            size_t cap = dst == m->name ? sizeof m->name : sizeof m->status;
            if (dst) {
                size_t c = vl < cap - 1 ? vl : cap - 1;
                memcpy(dst, vs, c);
                dst[c] = 0;
            }
        }
    }
    return true;
}

static bool mp_value(mp_reader_t *r, int depth, const char *key, const uint8_t **str,
                     size_t *slen)
{
    (void)key;
    *str = NULL;
    if (!need(r, 1))
        return false;
    uint8_t t = *r->p++;
    uint64_t n = 0;
    size_t w = 0;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
        return true; /* fixint, nil, bool */
    if ((t & 0xe0) == 0xa0 || t == 0xd9 || t == 0xda || t == 0xdb || t == 0xc4 || t == 0xc5 ||
        t == 0xc6) { /* str, bin */
        if ((t & 0xe0) == 0xa0)
            n = t & 0x1f;
        else {
            w = t == 0xd9 || t == 0xc4 ? 1 : t == 0xda || t == 0xc5 ? 2 : 4;
            if (!need(r, w))
                return false;
            n = be(r->p, (int)w);
            r->p += w;
        }
        if (!need(r, n))
            return false;
        *str = r->p;
        *slen = n;
        r->p += n;
        return true;
    }
    if ((t & 0xf0) == 0x90 || (t & 0xf0) == 0x80 || t == 0xdc || t == 0xdd || t == 0xde ||
        t == 0xdf) {
        bool map = (t & 0xf0) == 0x80 || t == 0xde || t == 0xdf;
        if ((t & 0xf0) == 0x90 || (t & 0xf0) == 0x80)
            n = t & 0x0f;
        else {
            w = t == 0xdc || t == 0xde ? 2 : 4;
            if (!need(r, w))
                return false;
            n = be(r->p, (int)w);
            r->p += w;
        }
        return mp_container(r, depth, n, map);
    }
    switch (t) {
    case 0xcc: case 0xd0: w = 1; break;
    case 0xcd: case 0xd1: w = 2; break;
    case 0xce: case 0xd2: case 0xca: w = 4; break;
    case 0xcf: case 0xd3: case 0xcb: w = 8; break;
    case 0xd4: w = 2; break; /* fixext: type + data */
    case 0xd5: w = 3; break;
    case 0xd6: w = 5; break;
    case 0xd7: w = 9; break;
    case 0xd8: w = 17; break;
    case 0xc7: case 0xc8: case 0xc9: {
        size_t lw = t == 0xc7 ? 1 : t == 0xc8 ? 2 : 4;
        if (!need(r, lw))
            return false;
        w = (size_t)be(r->p, (int)lw) + 1;
        r->p += lw;
        break;
    }
    default:
        return false;
    }
    if (!need(r, w))
        return false;
    r->p += w;
    return true;
}

typedef struct {
    int fd;
    uint32_t seq;
} serf_rpc_t;

/* Sends header (+ body) and reads the response header and, if `body`, one body. */
static int serf_call(serf_rpc_t *c, const char *command, bool send_version, bool body,
                     mp_reader_t *out)
{
    shoal_buf_t b = {0};
    mp_map(&b, 2);
    mp_str(&b, "Command");
    mp_str(&b, command);
    mp_str(&b, "Seq");
    mp_uint(&b, c->seq++);
    if (send_version) {
        mp_map(&b, 1);
        mp_str(&b, "Version");
        mp_uint(&b, 1);
    }
    ssize_t w = send(c->fd, b.data, b.len, MSG_NOSIGNAL);
    bool ok = w == (ssize_t)b.len;
    shoal_buf_free(&b);
    if (!ok)
        return -1;
    rpc_in.len = 0;
    double end = now_ms() + 3000;
    for (;;) {
        mp_reader_t r = {.p = rpc_in.data, .end = rpc_in.data + rpc_in.len, .in_header = true};
        const uint8_t *s;
        size_t sl;
        bool done = mp_value(&r, 1, NULL, &s, &sl);
        if (done && body) {
            r.in_header = false;
            done = mp_value(&r, 1, NULL, &s, &sl);
        }
        if (done) {
            *out = r;
            return r.error[0] ? -2 : 0;
        }
        free(r.members);
        if (!r.incomplete)
            return -1; /* malformed */
        int left = (int)(end - now_ms());
        struct pollfd pfd = {c->fd, POLLIN, 0};
        if (left <= 0 || poll(&pfd, 1, left) <= 0 || rpc_in.len == sizeof rpc_in.data)
            return -1;
        ssize_t n = recv(c->fd, rpc_in.data + rpc_in.len, sizeof rpc_in.data - rpc_in.len, 0);
        if (n <= 0)
            return -1;
        rpc_in.len += (size_t)n;
    }
}

static bool serf_connect(serf_rpc_t *c, int rpc_port)
{
    c->fd = tcp_connect(rpc_port);
    c->seq = 0;
    if (c->fd < 0)
        return false;
    mp_reader_t r;
    if (serf_call(c, "handshake", true, false, &r) != 0) {
        close(c->fd);
        c->fd = -1;
        return false;
    }
    free(r.members);
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Clusters of processes
 */
typedef enum { SHOAL, SERF } system_kind_t;

typedef struct {
    system_kind_t kind;
    bool fast;
    bool cold; /* every node at once, the same two seeds (nodes 0 and 1), as a deployment does */
    int n;
    pid_t pid[MAXN];
    int port[MAXN], rpc_port[MAXN];
    bool dead[MAXN];
    shoal_client_t *cl[MAXN];
    serf_rpc_t rpc[MAXN];
} procs_t;

static char shoal_member_path[PATH_MAX];
static char serf_path[PATH_MAX];

static const char *sys_name(const procs_t *p)
{
    return p->kind == SHOAL ? "shoal" : "serf";
}

static pid_t start_node(procs_t *p, int i)
{
    char bind[64], seed[64], node[16], rpc[64], join[64];
    if (p->kind == SHOAL) {
        snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", p->port[i]);
        char seed2[64];
        snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", p->port[0]);
        snprintf(seed2, sizeof seed2, "tcp://127.0.0.1:%d", p->port[1]);
        char *argv[10] = {shoal_member_path, "--bind", bind, "--seed", seed, "--quiet"};
        int a = 6;
        if (p->cold && p->n > 1) {
            argv[a++] = "--seed";
            argv[a++] = seed2;
        }
        if (p->fast)
            argv[a++] = "--fast";
        argv[a] = NULL;
        return spawn(argv);
    }
    snprintf(node, sizeof node, "-node=n%d", i);
    snprintf(bind, sizeof bind, "-bind=127.0.0.1:%d", p->port[i]);
    snprintf(rpc, sizeof rpc, "-rpc-addr=127.0.0.1:%d", p->rpc_port[i]);
    snprintf(join, sizeof join, "-join=127.0.0.1:%d", p->port[0]);
    char *argv[12];
    int a = 0;
    argv[a++] = serf_path;
    argv[a++] = "agent";
    argv[a++] = node;
    argv[a++] = bind;
    argv[a++] = rpc;
    argv[a++] = "-log-level=err";
    argv[a++] = p->fast ? "-profile=local" : "-profile=lan";
    if (i > 0 && p->cold) { /* node 0 may not listen yet: Serf's way to keep trying */
        snprintf(join, sizeof join, "-retry-join=127.0.0.1:%d", p->port[0]);
        argv[a++] = join;
        argv[a++] = "-retry-interval=1s";
    } else if (i > 0) {
        argv[a++] = join;
    }
    argv[a] = NULL;
    return spawn(argv);
}

static void procs_stop(procs_t *p)
{
    for (int i = 0; i < p->n; i++) {
        shoal_client_destroy(&p->cl[i]);
        if (p->kind == SERF && p->rpc[i].fd >= 0)
            close(p->rpc[i].fd);
        p->rpc[i].fd = -1;
        if (p->pid[i] > 0)
            reap(p->pid[i]);
        p->pid[i] = 0;
    }
}

/* Starts the first node, waits until it accepts connections, then the others; cold: all at
   once. */
static bool procs_start(procs_t *p, system_kind_t kind, int n, bool fast, bool cold)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->n = n;
    p->fast = fast;
    p->cold = cold;
    for (int i = 0; i < n; i++) {
        p->rpc[i].fd = -1;
        p->port[i] = next_port();
        p->rpc_port[i] = kind == SERF ? next_port() : 0;
        if (p->port[i] < 0 || p->rpc_port[i] < 0) {
            note_failure("no free port");
            return false;
        }
    }
    for (int i = 0; i < n; i++) {
        p->pid[i] = start_node(p, i);
        if (p->pid[i] < 0)
            return false;
        if (i == 0 && !cold && !wait_port(kind == SHOAL ? p->port[0] : p->rpc_port[0], 10000)) {
            note_failure("%s: the first node did not start listening", sys_name(p));
            return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * What a node sees
 */
static int count(const char *s, const char *what)
{
    int k = 0;
    for (const char *q = s; (q = strstr(q, what)) != NULL; q += strlen(what))
        k++;
    return k;
}

/* The JSON object of the member at 127.0.0.1:port in a Shoal view: [*start, *end), or false. */
static bool shoal_member_obj(const char *json, int port, const char **start, const char **end)
{
    char key[64];
    snprintf(key, sizeof key, "\"address\":\"127.0.0.1:%d\"", port);
    const char *s = strstr(json, key);
    if (!s)
        return false;
    const char *e = strchr(s, '}');
    *start = s;
    *end = e ? e : s + strlen(s);
    return true;
}

static bool shoal_view(procs_t *p, int i, shoal_buf_t *json)
{
    if (!p->cl[i]) {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", p->port[i]);
        int err = 0;
        p->cl[i] = shoal_client_new(ep, 250, &err); /* short: a slow answer is polled again */
        if (!p->cl[i])
            return false;
    }
    shoal_buf_reset(json);
    if (shoal_client_cluster_view(p->cl[i], json) != 0) {
        view_failures++;
        shoal_client_destroy(&p->cl[i]); /* reconnect next time */
        return false;
    }
    return true;
}

static bool serf_members(procs_t *p, int i, mp_reader_t *out)
{
    if (p->rpc[i].fd < 0 && !serf_connect(&p->rpc[i], p->rpc_port[i]))
        return false;
    if (serf_call(&p->rpc[i], "members", false, true, out) != 0) {
        close(p->rpc[i].fd);
        p->rpc[i].fd = -1;
        return false;
    }
    return true;
}

typedef enum { WANT_CONVERGED, WANT_UNREACHABLE, WANT_REMOVED } want_t;

/* Does node i see what we wait for? victim: the killed node's index. */
static bool node_sees(procs_t *p, int i, want_t want, int victim)
{
    if (p->kind == SHOAL) {
        static shoal_buf_t json;
        if (!shoal_view(p, i, &json))
            return false;
        const char *j = shoal_buf_cstr(&json);
        if (want == WANT_CONVERGED)
            return strstr(j, "\"converged\":true") && count(j, "\"node\":\"") == p->n &&
                   count(j, "\"status\":\"Up\"") == p->n;
        const char *s, *e;
        if (!shoal_member_obj(j, p->port[victim], &s, &e))
            return true; /* gone: removed (so it was found unreachable) */
        if (want == WANT_REMOVED)
            return false;
        char tmp[1024];
        size_t len = (size_t)(e - s) < sizeof tmp - 1 ? (size_t)(e - s) : sizeof tmp - 1;
        memcpy(tmp, s, len);
        tmp[len] = 0;
        return strstr(tmp, "\"reachable\":false") || strstr(tmp, "\"status\":\"Down\"");
    }
    mp_reader_t r;
    if (!serf_members(p, i, &r))
        return false;
    bool yes = false;
    if (want == WANT_CONVERGED) {
        int alive = 0;
        for (int m = 0; m < r.n_members; m++)
            alive += strcmp(r.members[m].status, "alive") == 0;
        yes = alive == p->n && r.n_members == p->n;
    } else {
        char name[16];
        snprintf(name, sizeof name, "n%d", victim);
        for (int m = 0; m < r.n_members; m++)
            if (strcmp(r.members[m].name, name) == 0)
                yes = strcmp(r.members[m].status, "failed") == 0 ||
                      strcmp(r.members[m].status, "left") == 0;
    }
    free(r.members);
    return yes;
}

/* On a failed wait: what the nodes that did not make it see (stderr), for the diagnosis. */
static void dump_views(procs_t *p, const bool *done)
{
    for (int i = 0; i < p->n; i++) {
        if (done[i])
            continue;
        if (p->kind == SHOAL) {
            shoal_buf_t json = {0};
            fprintf(stderr, "  node %d (port %d): %s\n", i, p->port[i],
                    shoal_view(p, i, &json) ? shoal_buf_cstr(&json) : "(no answer)");
            shoal_buf_free(&json);
            continue;
        }
        mp_reader_t r;
        if (!serf_members(p, i, &r)) {
            fprintf(stderr, "  n%d: (no answer)\n", i);
            continue;
        }
        fprintf(stderr, "  n%d sees %d members:", i, r.n_members);
        for (int m = 0; m < r.n_members; m++)
            fprintf(stderr, " %s=%s", r.members[m].name, r.members[m].status);
        fprintf(stderr, "\n");
        free(r.members);
    }
}

/* Polls every live node until each sees `want` (conditions that, once met, stay met); returns
   the ms from t0 until the last one did, or -1 at the deadline. */
static double wait_all(procs_t *p, want_t want, int victim, double t0, int deadline_ms)
{
    bool done[MAXN] = {false};
    int left = 0;
    for (int i = 0; i < p->n; i++)
        if (!p->dead[i])
            left++;
        else
            done[i] = true;
    double end = t0 + deadline_ms;
    while (left > 0) {
        for (int i = 0; i < p->n; i++)
            if (!done[i] && node_sees(p, i, want, victim)) {
                done[i] = true;
                left--;
            }
        if (left == 0)
            break;
        if (now_ms() > end) {
            dump_views(p, done);
            return -1;
        }
        sleep_ms(poll_ms);
    }
    return now_ms() - t0;
}

/* ---------------------------------------------------------------------------------------------
 * Measurements
 */
typedef struct {
    double converge_ms, detect_ms, remove_ms, rss_kb, bytes_per_s;
    double anon_kb, pss_kb; /* the private part of the RSS, and the RSS with shared pages divided */
    double file_kb;         /* RssFile: shared library pages mapped */
    double wakeups_per_s;   /* a member's voluntary context switches, all threads (median) */
    double cpu_pct;         /* the whole idle cluster's CPU, % of one core */
} figures_t;

/* A process's voluntary context switches over all its threads (each wake-up from a wait is one)
   and its CPU time in clock ticks (utime + stime of every thread). */
static void proc_idle_counters(pid_t pid, long long *switches, long long *ticks)
{
    char path[96], line[256];
    *switches = 0;
    *ticks = 0;
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/status", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
                *switches += strtoll(line + 24, NULL, 10);
        fclose(f);
    }
    closedir(d);
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f && fgets(line, sizeof line, f)) {
        /* fields after the command (which may hold spaces): state is field 3, utime 14, stime 15 */
        char *p = strrchr(line, ')');
        long long ut = 0, st = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &ut,
                        &st) == 2)
            *ticks = ut + st;
    }
    if (f)
        fclose(f);
}

static bool netns;

/* Bytes sent per second per node, over a window while idle. */
static double idle_bytes_per_s(procs_t *p)
{
    if (netns) {
        long long b0 = lo_tx_bytes();
        double t0 = now_ms();
        sleep_ms(BYTES_WINDOW_MS);
        long long b1 = lo_tx_bytes();
        double secs = (now_ms() - t0) / 1000.0;
        if (b0 < 0 || b1 < b0)
            return -1;
        return (double)(b1 - b0) / secs / p->n;
    }
    if (p->kind != SHOAL)
        return -1;
    /* node counters: read once before and once after the window (the client's own request is
       not in the window) */
    long long before = 0, after = 0;
    double t0 = 0;
    for (int pass = 0; pass < 2; pass++) {
        long long sum = 0;
        for (int i = 0; i < p->n; i++) {
            shoal_buf_t text = {0};
            if (!p->cl[i] || (shoal_client_stats(p->cl[i], "__system", &text) != 0 &&
                              shoal_client_stats(p->cl[i], "", &text) != 0)) {
                shoal_buf_free(&text);
                return -1;
            }
            const char *s = strstr(shoal_buf_cstr(&text), "node_bytes_out ");
            if (s)
                sum += strtoll(s + 15, NULL, 10);
            shoal_buf_free(&text);
        }
        if (pass == 0) {
            before = sum;
            t0 = now_ms();
            sleep_ms(BYTES_WINDOW_MS);
        } else {
            after = sum;
        }
    }
    return (double)(after - before) / ((now_ms() - t0) / 1000.0) / p->n;
}

static long median_kb(procs_t *p, const char *file, const char *field)
{
    long v[MAXN];
    int k = 0;
    for (int i = 0; i < p->n; i++)
        if (!p->dead[i] && (v[k] = proc_kb(p->pid[i], file, field)) > 0)
            k++;
    if (!k)
        return -1;
    for (int a = 1; a < k; a++)
        for (int b = a; b > 0 && v[b - 1] > v[b]; b--) {
            long t = v[b];
            v[b] = v[b - 1];
            v[b - 1] = t;
        }
    return v[k / 2];
}

/* One cluster: converge; then, as asked, RSS and idle bytes; then kill one node and time its
   detection (and removal, Shoal). */
static figures_t run(system_kind_t kind, int n, bool fast, bool idle_figures, bool kill_one,
                     bool cold)
{
    figures_t f = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    procs_t p;
    const char *label = kind == SHOAL ? (fast ? "shoal --fast" : "shoal defaults")
                                      : (fast ? "serf -profile=local" : "serf lan");
    double t0 = now_ms();
    if (!procs_start(&p, kind, n, fast, cold)) {
        procs_stop(&p);
        return f;
    }
    /* a deadline that grows with the cluster: 100 members on 2 cores take longer to start */
    int deadline_ms = n > 50 ? CONVERGE_DEADLINE_MS * 3 : CONVERGE_DEADLINE_MS;
    f.converge_ms = wait_all(&p, WANT_CONVERGED, -1, t0, deadline_ms);
    if (f.converge_ms < 0) {
        note_failure("%s, %d nodes: not converged within %d s", label, n,
                     deadline_ms / 1000);
        procs_stop(&p);
        return f;
    }
    fprintf(stderr,
            "bench_membership: %s, %d nodes%s: converged in %.0f ms (%d views unanswered "
            "within 250 ms or refused)\n",
            label, n, cold ? " started at once" : "", f.converge_ms, view_failures);
    view_failures = 0;
    if (idle_figures) {
        sleep_ms(SETTLE_MS);
        f.rss_kb = (double)median_kb(&p, "status", "VmRSS");
        f.anon_kb = (double)median_kb(&p, "status", "RssAnon");
        f.pss_kb = (double)median_kb(&p, "smaps_rollup", "Pss");
        f.file_kb = (double)median_kb(&p, "status", "RssFile");
        /* wake-ups and CPU over the same idle window as the bytes */
        long long sw0[MAXN], tk0[MAXN], sw1, tk1;
        for (int i = 0; i < n; i++)
            proc_idle_counters(p.pid[i], &sw0[i], &tk0[i]);
        double w0 = now_ms();
        f.bytes_per_s = idle_bytes_per_s(&p);
        double secs = (now_ms() - w0) / 1000.0;
        double rate[MAXN], ticks = 0;
        for (int i = 0; i < n; i++) {
            proc_idle_counters(p.pid[i], &sw1, &tk1);
            rate[i] = (double)(sw1 - sw0[i]) / secs;
            ticks += (double)(tk1 - tk0[i]);
        }
        for (int a = 1; a < n; a++)
            for (int b = a; b > 0 && rate[b - 1] > rate[b]; b--) {
                double t = rate[b];
                rate[b] = rate[b - 1];
                rate[b - 1] = t;
            }
        f.wakeups_per_s = rate[n / 2];
        f.cpu_pct = ticks / (double)sysconf(_SC_CLK_TCK) / secs * 100.0;
    }
    if (kill_one) {
        int victim = n - 1;
        double tk = now_ms();
        reap(p.pid[victim]);
        p.pid[victim] = 0;
        p.dead[victim] = true;
        f.detect_ms = wait_all(&p, WANT_UNREACHABLE, victim, tk, DETECT_DEADLINE_MS);
        if (f.detect_ms < 0)
            note_failure("%s, %d nodes: the killed node not unreachable everywhere within %d s",
                         label, n, DETECT_DEADLINE_MS / 1000);
        else if (kind == SHOAL) {
            f.remove_ms = wait_all(&p, WANT_REMOVED, victim, tk, REMOVE_DEADLINE_MS);
            if (f.remove_ms < 0)
                note_failure("%s, %d nodes: the killed node not removed everywhere within %d s",
                             label, n, REMOVE_DEADLINE_MS / 1000);
        }
    }
    procs_stop(&p);
    return f;
}

/* Median convergence (fast timings) of 3 clusters, `first` being one already measured (-2: none).
   -1 if any failed. */
static double median_converge(system_kind_t kind, int n, double first)
{
    double v[3];
    int k = 0;
    if (first != -2)
        v[k++] = first;
    while (k < 3)
        v[k++] = run(kind, n, true, false, false, false).converge_ms;
    for (int i = 0; i < 3; i++)
        if (v[i] < 0)
            return -1;
    for (int a = 1; a < 3; a++)
        for (int b = a; b > 0 && v[b - 1] > v[b]; b--) {
            double t = v[b];
            v[b] = v[b - 1];
            v[b - 1] = t;
        }
    bench_note("converge_%d_nodes_fast, %s: %.0f / %.0f / %.0f ms, median %.0f", n,
               kind == SHOAL ? "shoal" : "serf", v[0], v[1], v[2], v[1]);
    return v[1];
}

/* BENCH_MEMBERSHIP_ONLY=10,25,cold,fast runs only the parts named (10: the 10-node default-timing
   cluster and its idle figures; 25: the 25-node one; cold: the all-at-once starts of 10, 25, 50
   and 100 nodes, or one of them as cold10, cold25, cold50, cold100; fast: the fast-timing
   convergence) */
static bool part(const char *name)
{
    const char *only = getenv("BENCH_MEMBERSHIP_ONLY");
    if (!only || !*only)
        return true;
    size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)); p += n)
        if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return true;
    return false;
}

static void report(const char *name, double value, const char *unit, double baseline)
{
    if (value < 0)
        return; /* failed, said on stderr */
    bench_report(name, value, unit, baseline > 0 ? baseline : 0);
}

/* The idle model at n members beside the figure measured at n (only when measured on the
   loopback of a private namespace: the model counts what that counts). shoal-member runs one
   data replicator beside the system one. */
static void report_model(int n, double measured)
{
    if (!netns || measured <= 0)
        return;
    char name[48];
    snprintf(name, sizeof name, "gossip_bytes_per_s_%d_model", n);
    report(name, gossip_model_idle(n, 1).total_b_per_s, "B/s", measured);
}

static bool find_serf(void)
{
    const char *env = getenv("SERF");
    if (env && access(env, X_OK) == 0) {
        snprintf(serf_path, sizeof serf_path, "%s", env);
        return true;
    }
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/local/bin:/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(serf_path, sizeof serf_path, "%s/serf", d);
        if (access(serf_path, X_OK) == 0)
            return true;
    }
    return false;
}

static bool find_shoal_member(void)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return false;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash)
        return false;
    *slash = 0;
    if ((size_t)snprintf(shoal_member_path, sizeof shoal_member_path, "%s/shoal-member", self) >=
        sizeof shoal_member_path)
        return false;
    return access(shoal_member_path, X_OK) == 0;
}

int main(int argc, char **argv)
{
    double start = bench_now();
    /* before any thread: the namespace is per thread until threads inherit it */
    netns = private_network();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    atexit(kill_children);
    alarm(TIME_LIMIT_S);
    signal(SIGPIPE, SIG_IGN);
    /* below the kernel's ephemeral range (32768-60999), where the heartbeat actors' and clients'
       own ports come from: a node port chosen there could be taken before its node starts */
    port_cursor = 20000 + (int)(getpid() * 7919 % 12000);
    const char *pm = getenv("BENCH_MEMBERSHIP_POLL_MS");
    if (pm && atoi(pm) > 0)
        poll_ms = atoi(pm);

    if (!find_shoal_member()) {
        fprintf(stderr, "bench_membership: shoal-member not found next to this program (build "
                        "it with `scons`)\n");
        return 1;
    }
    bool serf = find_serf();
    if (!serf)
        fprintf(stderr, "bench_membership: serf is not installed (apt-get install serf, or "
                        "sh tools/install-deps.sh): Shoal's figures are printed without "
                        "baselines\n");
    if (argc == 5 && strcmp(argv[1], "--converge") == 0) {
        /* diagnosis: bench_membership --converge shoal|serf N fast|default */
        bool use_serf = strcmp(argv[2], "serf") == 0;
        if (use_serf && !serf)
            return 1;
        figures_t f = run(use_serf ? SERF : SHOAL, atoi(argv[3]) > 1 && atoi(argv[3]) <= MAXN ?
                          atoi(argv[3]) : 10, strcmp(argv[4], "fast") == 0, false, false, false);
        return f.converge_ms < 0;
    }
    if (argc == 4 && strcmp(argv[1], "--cold") == 0) {
        /* diagnosis: bench_membership --cold shoal|serf N: one all-at-once start with default
           timings, convergence only (no idle window, no kill) */
        bool use_serf = strcmp(argv[2], "serf") == 0;
        if (use_serf && !serf)
            return 1;
        int n = atoi(argv[3]) > 1 && atoi(argv[3]) <= MAXN ? atoi(argv[3]) : 10;
        figures_t f = run(use_serf ? SERF : SHOAL, n, false, false, false, true);
        return f.converge_ms < 0;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: bench_membership [--converge shoal|serf N fast|default] "
                        "[--cold shoal|serf N]\n");
        return 2;
    }
    bench_note("membership: shoal-member processes vs %s; %s", serf ? serf_path : "(no serf)",
               netns ? "private network namespace, gossip bytes = loopback tx bytes / N"
                     : "shared network, gossip bytes = Shoal's node_bytes_out (no baseline)");

    figures_t none = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    /* defaults: 10 nodes with idle figures and a kill; 25 nodes with idle bytes */
    figures_t s10 = part("10") ? run(SHOAL, 10, false, true, true, false) : none;
    figures_t b10 = serf && part("10") ? run(SERF, 10, false, true, true, false) : none;
    report("converge_10_nodes", s10.converge_ms, "ms", b10.converge_ms);
    report("detect_unreachable_10_nodes", s10.detect_ms, "ms", b10.detect_ms);
    report("remove_after_kill_10_nodes", s10.remove_ms, "ms", 0);
    if (part("10"))
        bench_note("remove_after_kill_10_nodes: detection plus stable-after (20 s by default) of the "
                   "split-brain resolver, then the leader's Down -> Removed");
    report("idle_rss_kb", s10.rss_kb, "kB", b10.rss_kb);
    if (part("10"))
        bench_note("idle_rss_kb: median VmRSS of the 10 members of a converged idle cluster; target "
                   "<= 5120 kB");
    if (part("10"))
        bench_note("  of which private (RssAnon): shoal %.0f kB, serf %.0f kB; PSS (shared library "
                   "pages divided among their users): shoal %.0f kB, serf %.0f kB",
                   s10.anon_kb, b10.anon_kb, s10.pss_kb, b10.pss_kb);
    report("gossip_bytes_per_s_10", s10.bytes_per_s, "B/s", netns ? b10.bytes_per_s : 0);
    report("idle_rss_anon_kb", s10.anon_kb, "kB", b10.anon_kb);
    report("idle_rss_file_kb", s10.file_kb, "kB", b10.file_kb);
    report("idle_wakeups_per_s", s10.wakeups_per_s, "/s", b10.wakeups_per_s);
    if (part("10"))
        bench_note("idle_wakeups_per_s: median over the 10 idle members of the voluntary context "
                   "switches per second of all of a member's threads (/proc), in the window of "
                   "gossip_bytes_per_s_10; target <= serf's");
    report("idle_cpu_pct_10", s10.cpu_pct, "%", b10.cpu_pct);

    figures_t s25 = part("25") ? run(SHOAL, 25, false, true, false, false) : none;
    figures_t b25 = serf && part("25") ? run(SERF, 25, false, true, false, false) : none;
    report("converge_25_nodes", s25.converge_ms, "ms", b25.converge_ms);
    report("gossip_bytes_per_s_25", s25.bytes_per_s, "B/s", netns ? b25.bytes_per_s : 0);
    report("idle_cpu_pct_25", s25.cpu_pct, "%", b25.cpu_pct);
    report_model(10, s10.bytes_per_s);
    report_model(25, s25.bytes_per_s);
    if (part("25"))
        bench_note("idle_cpu_pct_N: the whole idle cluster's CPU (utime + stime of every member), %% "
                   "of one core, in the same window; target <= serf's");

    /* fast timings against Serf's local profile. Convergence is the median of 3 clusters: Serf's
       local profile retransmits a join's broadcast only twice, so on a busy machine a member
       sometimes misses one and learns it only at the next push-pull, 15 s later; one sample
       would make the ratio a coin toss. */
    /* cold starts with default timings: N nodes at once, the same two seeds, as a deployment
       starts them; their idle figures; a kill at 50 and 100 */
    static const int cold_n[] = {10, 25, 50};
    double detect10 = s10.detect_ms;
    for (size_t k = 0; k < sizeof cold_n / sizeof cold_n[0]; k++) {
        int n = cold_n[k];
        char name[32];
        snprintf(name, sizeof name, "cold%d", n);
        if (!part(name) && !part("cold"))
            continue;
        bool kill = n == 50;
        figures_t sc = run(SHOAL, n, false, n == 50, kill, true);
        figures_t bc = serf ? run(SERF, n, false, n == 50, kill, true) : none;
        snprintf(name, sizeof name, "converge_cold_%d_nodes", n);
        report(name, sc.converge_ms, "ms", bc.converge_ms);
        if (n == 50) {
            report("idle_cpu_pct_50", sc.cpu_pct, "%", bc.cpu_pct);
            report("gossip_bytes_per_s_50", sc.bytes_per_s, "B/s", netns ? bc.bytes_per_s : 0);
            report("detect_unreachable_50_nodes", sc.detect_ms, "ms", bc.detect_ms);
            report_model(50, sc.bytes_per_s);
        }
    }
    {
        gossip_model_idle_t m = gossip_model_idle(1000, 1);
        report("gossip_bytes_per_s_1000_model", m.total_b_per_s, "B/s", 0);
        bench_note("gossip_bytes_per_s_1000_model: an idle member of 1,000 (target <= 10240 B/s): "
                   "heartbeats %.0f B/s (pings of %zu B, pongs of %zu B on the wire, to and from "
                   "%d members), the replicators' digest status %.0f B/s (%zu B); checked by "
                   "gossip_bytes_per_s_N_model against the measured N; a change costs "
                   "gossip_bytes_per_change_1000 (bench_cluster_state) on top",
                   m.heartbeat_b_per_s, m.ping_bytes, m.pong_bytes, m.monitored, m.status_b_per_s,
                   m.status_bytes);
    }
    if (part("cold100") || part("cold")) {
        figures_t sc = run(SHOAL, 100, false, true, true, true);
        report("converge_cold_100_nodes", sc.converge_ms, "ms", 0);
        report("idle_cpu_pct_100", sc.cpu_pct, "%", 0);
        report("idle_wakeups_per_s_100", sc.wakeups_per_s, "/s", 0);
        report("gossip_bytes_per_s_100", sc.bytes_per_s, "B/s", 0);
        report("detect_unreachable_100_nodes", sc.detect_ms, "ms", detect10);
        bench_note("the 100-node figures: shoal-member processes only (100 Serf agents are not "
                   "run); detect_unreachable_100_nodes's baseline is the 10-node figure "
                   "(target <= 2x); idle_cpu_pct_100 target <= 25%%");
    }
    if (!part("fast")) {
        kill_children();
        bench_note("bench_membership: %.1f s", bench_now() - start);
        return failures ? 1 : 0;
    }
    figures_t f10 = run(SHOAL, 10, true, false, true, false);
    figures_t g10 = serf ? run(SERF, 10, true, false, true, false) : none;
    double c10 = median_converge(SHOAL, 10, f10.converge_ms);
    double d10 = serf ? median_converge(SERF, 10, g10.converge_ms) : -1;
    report("converge_10_nodes_fast", c10, "ms", d10);
    report("detect_unreachable_10_nodes_fast", f10.detect_ms, "ms", g10.detect_ms);
    report("remove_after_kill_10_nodes_fast", f10.remove_ms, "ms", 0);
    double c25 = median_converge(SHOAL, 25, -2);
    double d25 = serf ? median_converge(SERF, 25, -2) : -1;
    report("converge_25_nodes_fast", c25, "ms", d25);

    kill_children();
    bench_note("bench_membership: %.1f s", bench_now() - start);
    return failures ? 1 : 0;
}
