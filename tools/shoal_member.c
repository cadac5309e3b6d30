/*  shoal-member — a cluster member agent (like `serf agent`): runs one Shoal node that joins a
    cluster, serves the operator tool (shoal-cluster) and the replicator's client requests, and
    prints one line per cluster event.

      shoal-member [--bind ENDPOINT] [--seed ENDPOINT]... [--discover NAME]
                   [--role NAME]... [--config FILE] [--http [HOST:]PORT] [--fast] [--quiet]
                   [--http-host NAME]... [--http-token-file PATH] [--http-token-reads]
                   [--http-tls-cert PATH --http-tls-key PATH]

    ENDPOINT   HOST:PORT | tcp://HOST:PORT (HOST an address or a name: a name is resolved to its
               first IPv4 address, else IPv6, which the node binds and its node id records;
               [V6]:PORT for IPv6; cli.h, NODE ADDRESSES), or ipc://PATH for --bind
    --bind     where the node listens (default 127.0.0.1:2552)
    --seed     a seed node's endpoint, repeatable; list this node's own endpoint first to let it
               form a new cluster when no other seed answers. Without seeds the node waits for
               `shoal-cluster join SEED`.
    --discover find the seeds by DNS instead (membership.h, SEED DISCOVERY): dns:NAME:PORT (A/AAAA
               records, one port) or srv:_shoal._tcp.NAME (SRV records); the nameserver is the
               system's, or SHOAL_DNS_RESOLVER=IPv4:PORT. Bind on the address the name gives.
    --role     a role of this member, repeatable
    --config   a ZPL settings file (shoal/remote/..., shoal/cluster/..., shoal/management/http/...);
               the options here override what it sets; its seed-nodes may name hosts too
    --http     serve the management endpoint (docs/operations.md: /cluster/members,
               /health/ready, /health/alive, /metrics, ...) on HOST:PORT; HOST defaults to
               127.0.0.1. Off without it.
    --http-host  a name the endpoint answers to besides its address and localhost (the Host
               header; a DNS-rebound page's name is refused), repeatable
    --http-token-file  a file whose first line is the bearer token every POST must send;
               --http-token-reads: every GET but /health/... too
    --http-tls-cert, --http-tls-key  PEM files: the endpoint speaks HTTPS only
               (docs/security.md, "The management endpoint"; the file's shoal/management/http/
               keys do the same, the flags override them)
    --fast     short timings (gossip and heartbeats 200 ms, stable-after 2 s), for tests
    --quiet    no event lines
    --help     this usage on stdout; --version: "shoal-member VERSION"

    SIGHUP reloads the CURVE allow-list and the endpoint's token file and TLS certificate and key
    (docs/operations.md, "Rotating keys and certificates"); so does POST /reload on the
    endpoint (`shoal-cluster reload`, cli.h).
    SIGINT or SIGTERM leaves the cluster gracefully (coordinated shutdown) and exits 0 once the
    shutdown has run (15 s at most). A member downed or removed by the cluster exits too, with 3.
    Exit codes (docs/deployment.md): 0 left the cluster (a signal, `shoal-cluster leave`) or shut
    down, 1 the node could not start (bind failure, bad config file) or its join failed for good,
    2 bad arguments, 3 downed or removed by the cluster (so that a supervisor's
    Restart=on-failure starts it again: a downed node must come back as a new incarnation).

    Under a service manager (systemd's Type=notify, docs/deployment.md): with NOTIFY_SOCKET set
    it sends READY=1 once the node is Up and /health/ready's checks hold ("cluster" and
    "majority", the same functions), STATUS= with the member state whenever it changes,
    STOPPING=1 when it leaves, and WATCHDOG=1 from the node thread every WATCHDOG_USEC/2.
*/
#include "cli.h"
#include "cluster_internal.h" /* cluster_ready: /health/ready's "cluster" check */
#include "membership.h"
#include "replicator_internal.h" /* http_majority_served: its "majority" check */

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST 64
#define SHUTDOWN_WAIT_MS 15000
#define EXIT_DOWNED      3   /* 1: could not start or join, 2: bad arguments */
#define READY_CHECK_MS   250 /* how often the node thread re-checks readiness */

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested; /* SIGHUP: the allow-list, token, TLS files */

/* Why the coordinated shutdown ran, recorded by its last phase (0: it did not run). Read by the
   main thread after shoal_cluster_terminated, which orders it after the write (node thread). */
static volatile int shutdown_reason;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload_requested = 1;
    else
        stop_requested = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shoal-member [--bind ENDPOINT] [--seed ENDPOINT]... [--discover NAME]\n"
            "                    [--role NAME]... [--config FILE] [--http [HOST:]PORT] [--fast]\n"
            "                    [--quiet] [--allow-from CIDR]... [--insecure]\n"
            "                    [--http-host NAME]... [--http-token-file PATH]\n"
            "                    [--http-token-reads] [--http-tls-cert PATH --http-tls-key PATH]\n"
            "       shoal-member --help | --version\n"
            "       ENDPOINT: HOST:PORT | tcp://HOST:PORT (HOST an address or a name)\n"
            "       NAME: dns:HOST:PORT or srv:_shoal._tcp.HOST\n"
            "       --config FILE: settings under the flags, which win over it\n"
            CLI_NODE_ACCESS_USAGE);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop_requested)
        ;
}

/* ---------------------------------------------------------------------------------------------
 * The service manager's notifications (sd_notify(3)), the protocol written out: one datagram of
 * "KEY=VALUE" lines to the AF_UNIX socket that NOTIFY_SOCKET names ('@' first: the abstract
 * namespace). Written here rather than linked from libsystemd so that shoal-member needs nothing
 * of systemd where it does not run under it (containers, other supervisors); systemd documents
 * the protocol as stable. Nothing is sent without NOTIFY_SOCKET.
 */
static int notify_fd = -1;
static struct sockaddr_un notify_addr;
static socklen_t notify_len;

static void notify_open(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || (path[0] != '/' && path[0] != '@'))
        return;
    size_t n = strlen(path);
    if (n < 2 || n >= sizeof notify_addr.sun_path) {
        fprintf(stderr, "shoal-member: NOTIFY_SOCKET '%s': not a socket path, ignored\n", path);
        return;
    }
    notify_addr.sun_family = AF_UNIX;
    memcpy(notify_addr.sun_path, path, n);
    if (path[0] == '@')
        notify_addr.sun_path[0] = '\0';
    notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (notify_fd < 0)
        fprintf(stderr, "shoal-member: NOTIFY_SOCKET: %s\n", strerror(errno));
}

/* Any thread: one datagram, never blocking the node thread (a manager that stopped reading
   loses the message, as with sd_notify). */
static void notify(const char *msg)
{
    if (notify_fd >= 0 && sendto(notify_fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT,
                                 (struct sockaddr *)&notify_addr, notify_len) < 0)
        fprintf(stderr, "shoal-member: NOTIFY_SOCKET: %s\n", strerror(errno));
}

/* WATCHDOG_USEC (and WATCHDOG_PID, when set, this process) -> the period in ms, 0 for none. */
static int64_t watchdog_ms(void)
{
    const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    if (notify_fd < 0 || !usec || (pid && strtol(pid, NULL, 10) != (long)getpid()))
        return 0;
    long long us = strtoll(usec, NULL, 10);
    return us > 0 ? (us + 999) / 1000 : 0;
}

typedef struct {
    shoal_cluster_t *cluster;
    int timer; /* service_tick's, 0 when none */
    int64_t watchdog_ms, last_watchdog;
    bool ready_sent;
    char status[256]; /* the last STATUS= sent */
} service_t;

/* Node thread, every READY_CHECK_MS (or half the watchdog period, if shorter): the watchdog's
   keep-alive comes from the thread whose stall it must catch; READY=1 once both of /health/ready's
   built-in checks hold; STATUS= when the member state changes. */
static void service_tick(shoal_system_t *sys, void *arg)
{
    service_t *s = arg;
    int64_t now = shoal_now_ms();
    if (s->watchdog_ms && now - s->last_watchdog >= s->watchdog_ms / 2) {
        notify("WATCHDOG=1");
        s->last_watchdog = now;
    }
    shoal_buf_t why = {0};
    bool ready = cluster_ready(s->cluster, &why) && http_majority_served(sys, &why);
    char status[256];
    if (ready)
        snprintf(status, sizeof status, "%s: up, ready (serves MAJORITY)",
                 shoal_node_id(shoal_system_self(sys)));
    else
        snprintf(status, sizeof status, "%s: not ready: %s", shoal_node_id(shoal_system_self(sys)),
                 why.len ? shoal_buf_cstr(&why) : "starting");
    shoal_buf_free(&why);
    if (ready && !s->ready_sent) {
        char msg[300];
        snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s", status);
        notify(msg);
        s->ready_sent = true;
        snprintf(s->status, sizeof s->status, "%s", status);
    } else if (strcmp(status, s->status) != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "STATUS=%s", status);
        notify(msg);
        snprintf(s->status, sizeof s->status, "%s", status);
    }
}

/* Node thread: no tick after this, so the cluster it asks may be destroyed. */
static int service_stop(shoal_system_t *sys, void *arg)
{
    service_t *s = arg;
    if (s->timer > 0)
        shoal_system_timer_cancel(sys, s->timer);
    s->timer = 0;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Node-thread callbacks
 */
static void on_event(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg)
{
    (void)c;
    (void)arg;
    const char *name = shoal_cluster_event_name(ev->kind);
    switch (ev->kind) {
    case SHOAL_EV_SNAPSHOT_BEGIN:
    case SHOAL_EV_SNAPSHOT_END:
        printf("shoal-member: %s\n", name);
        break;
    case SHOAL_EV_LEADER_CHANGED:
        printf("shoal-member: %s %s\n", name, ev->leader ? shoal_node_id(ev->leader) : "(none)");
        break;
    case SHOAL_EV_ROLE_LEADER_CHANGED:
        printf("shoal-member: %s role=%s %s\n", name, ev->role ? ev->role : "",
               ev->leader ? shoal_node_id(ev->leader) : "(none)");
        break;
    case SHOAL_EV_CONVERGENCE:
        printf("shoal-member: %s %s\n", name, ev->converged ? "converged" : "not-converged");
        break;
    default:
        if (ev->member && ev->member->node)
            printf("shoal-member: %s %s status=%s\n", name, shoal_node_id(ev->member->node),
                   shoal_member_status_name(ev->member->status));
        else
            printf("shoal-member: %s\n", name);
        break;
    }
    fflush(stdout);
}

static void on_up(shoal_cluster_t *c, void *arg)
{
    (void)arg;
    printf("shoal-member: %s up\n", shoal_node_id(shoal_system_self(shoal_cluster_system(c))));
    fflush(stdout);
}

static void on_removed(shoal_cluster_t *c, void *arg)
{
    (void)arg;
    printf("shoal-member: %s removed\n", shoal_node_id(shoal_system_self(shoal_cluster_system(c))));
    fflush(stdout);
}

/* The last phase: remembers why the shutdown ran, for the exit message and code. */
static void record_reason(shoal_cluster_t *c, shoal_shutdown_reason_t why,
                          shoal_task_done_fn *done, void *done_arg, void *arg)
{
    (void)c;
    (void)arg;
    shutdown_reason = (int)why;
    done(done_arg);
}

typedef struct {
    shoal_cluster_t *cluster;
    bool quiet;
    service_t *service; /* NULL without NOTIFY_SOCKET */
} setup_t;

static int setup_on_node(shoal_system_t *sys, void *arg)
{
    setup_t *s = arg;
    int rc = 0;
    if (s->service) {
        uint32_t every = READY_CHECK_MS;
        if (s->service->watchdog_ms && s->service->watchdog_ms / 4 < every)
            every = (uint32_t)(s->service->watchdog_ms / 4 > 0 ? s->service->watchdog_ms / 4 : 1);
        rc = shoal_system_timer(sys, every, true, service_tick, s->service);
        if (rc > 0)
            s->service->timer = rc;
    }
    if (rc >= 0)
        rc = shoal_cluster_on_up(s->cluster, on_up, NULL);
    if (rc >= 0)
        rc = shoal_cluster_on_removed(s->cluster, on_removed, NULL);
    if (rc >= 0 && !s->quiet)
        rc = shoal_cluster_subscribe(s->cluster, on_event, NULL);
    return rc < 0 ? rc : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Main
 */
static const char *reason_text(int why)
{
    switch (why) {
    case SHOAL_SHUTDOWN_LEAVE: return "left the cluster";
    case SHOAL_SHUTDOWN_DOWNED: return "downed or removed by the cluster";
    case SHOAL_SHUTDOWN_REQUEST: return "shut down";
    case SHOAL_SHUTDOWN_JOIN_FAILED: return "could not join (no seed answered)";
    default: return "terminated";
    }
}

static bool need_arg(int argc, char **argv, int i)
{
    if (i + 1 < argc)
        return true;
    fprintf(stderr, "shoal-member: %s needs a value\n", argv[i]);
    usage(stderr);
    return false;
}

int main(int argc, char **argv)
{
    const char *bind = NULL, *config_path = NULL, *discover = NULL, *http = NULL;
    const char *seeds[MAX_LIST], *roles[MAX_LIST];
    size_t n_seeds = 0, n_roles = 0;
    bool fast = false, quiet = false;
    shoal_http_settings_t http_flags; /* what the command line says, laid over the file's */
    shoal_http_settings_default(&http_flags);
    http_flags.request_timeout_ms = http_flags.max_connections = http_flags.max_per_address = 0;
    int cli = cli_help_or_version(&argc, argv, "shoal-member", usage);
    if (cli >= 0)
        return cli;
    cli_node_access_t access;
    if (cli_node_access(&argc, argv, "shoal-member", &access) != 0)
        return cli_usage_error(usage);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char ferr[200];
        int f = shoal_http_flag(&http_flags, argc, argv, &i, ferr, sizeof ferr);
        if (f < 0) {
            fprintf(stderr, "shoal-member: %s\n", ferr);
            return 2;
        }
        if (f == 1)
            continue;
        if (strcmp(a, "--bind") == 0) {
            if (!need_arg(argc, argv, i))
                return 2;
            bind = argv[++i];
        } else if (strcmp(a, "--seed") == 0 || strcmp(a, "--role") == 0) {
            if (!need_arg(argc, argv, i))
                return 2;
            bool seed = a[2] == 's';
            size_t *n = seed ? &n_seeds : &n_roles;
            if (*n == MAX_LIST) {
                fprintf(stderr, "shoal-member: at most %d %ss\n", MAX_LIST, a + 2);
                return 2;
            }
            (seed ? seeds : roles)[(*n)++] = argv[++i];
        } else if (strcmp(a, "--discover") == 0) {
            if (!need_arg(argc, argv, i))
                return 2;
            discover = argv[++i];
        } else if (strcmp(a, "--config") == 0) {
            if (!need_arg(argc, argv, i))
                return 2;
            config_path = argv[++i];
        } else if (strcmp(a, "--http") == 0) {
            if (!need_arg(argc, argv, i))
                return 2;
            static char http_buf[300];
            char why[400];
            if (cli_http_address(argv[++i], http_buf, sizeof http_buf, why, sizeof why) != 0) {
                fprintf(stderr, "shoal-member: --http %s\n", why);
                return 2;
            }
            http = http_buf;
        } else if (strcmp(a, "--fast") == 0) {
            fast = true;
        } else if (strcmp(a, "--quiet") == 0) {
            quiet = true;
        } else {
            fprintf(stderr, "shoal-member: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    /* HOST:PORT or tcp://HOST:PORT, a host name resolved (cli.h, NODE ADDRESSES) */
    static char bind_buf[300], seed_buf[MAX_LIST][300];
    char why[400];
    if (bind && cli_node_address(bind, bind_buf, sizeof bind_buf, why, sizeof why) != 0) {
        fprintf(stderr, "shoal-member: --bind %s\n", why);
        return 2;
    }
    if (bind)
        bind = bind_buf;
    for (size_t i = 0; i < n_seeds; i++) {
        if (cli_node_address(seeds[i], seed_buf[i], sizeof seed_buf[i], why, sizeof why) != 0) {
            fprintf(stderr, "shoal-member: --seed %s\n", why);
            return 2;
        }
        seeds[i] = seed_buf[i];
    }
    if (discover) {
        char err[300];
        if (shoal_discovery_check(discover, getenv("SHOAL_DNS_RESOLVER"), err, sizeof err) < 0) {
            fprintf(stderr, "shoal-member: --discover: %s\n", err);
            return 2;
        }
        if (n_seeds) {
            fprintf(stderr, "shoal-member: --discover finds the seeds: give no --seed with it\n");
            return 2;
        }
    }

    /* Settings: defaults (or the fast ones), then the file, then the command line. */
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:2552";
    shoal_cluster_settings_t cs;
    if (fast)
        shoal_cluster_settings_fast(&cs);
    else
        shoal_cluster_settings_default(&cs);
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    shoal_http_settings_t hs;
    shoal_http_settings_default(&hs);
    shoal_config_t *cfg = NULL;
    if (config_path) {
        char err[512] = "";
        int code = 0;
        cfg = shoal_config_load(config_path, &code);
        if (!cfg)
            snprintf(err, sizeof err, "%s", shoal_last_error_detail());
        if (!cfg || shoal_config_system(cfg, &ss, err, sizeof err) < 0 ||
            shoal_config_cluster(cfg, &cs, err, sizeof err) < 0 ||
            shoal_config_replicator(cfg, &rs, err, sizeof err) < 0 ||
            shoal_config_http(cfg, &hs, err, sizeof err) < 0) {
            /* the loader's messages name the file; a section's (a bad value) gets it here */
            cli_config_refused("shoal-member", config_path, err);
            shoal_config_destroy(&cfg);
            return 1;
        }
    }
    if (bind)
        ss.endpoint = bind;
    if (n_seeds) {
        cs.seed_nodes = seeds;
        cs.n_seed_nodes = n_seeds;
        cs.discovery = NULL; /* the command line's seeds replace the file's discovery */
    }
    if (discover) {
        cs.discovery = discover;
        cs.seed_nodes = NULL; /* and its discovery replaces the file's seeds */
        cs.n_seed_nodes = 0;
    }
    if (n_roles) {
        cs.roles = roles;
        cs.n_roles = n_roles;
    }
    rs.role = ""; /* the default data replicator, whatever the file says */

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigaction(SIGHUP, &sa, NULL);

    int rc = 0;
    cli_node_access_apply(&access, &ss);
    shoal_system_t *sys = shoal_system_new(&ss, &rc);
    if (!sys) {
        fprintf(stderr, "shoal-member: cannot start a node at %s: %s\n", ss.endpoint,
                shoal_strerror(rc));
        shoal_config_destroy(&cfg);
        return 1;
    }
    shoal_replicator_t *rep = shoal_replicator_new(sys, &rs, &rc);
    if (rep && cli_config_limits("shoal-member", config_path, cfg, rep, NULL) < 0) {
        shoal_replicator_destroy(&rep);
        shoal_system_destroy(&sys);
        shoal_config_destroy(&cfg);
        return 1;
    }
    /* shoal/cluster/protocol-version: the pin lives on the system (ddata.h, THE PIN) */
    uint64_t pin = 0;
    if (cfg && shoal_config_uint(cfg, "shoal/cluster/protocol-version", &pin, NULL, 0) > 0)
        shoal_system_pin_protocol(sys, (uint32_t)pin);
    shoal_cluster_t *c = rep ? shoal_cluster_new(sys, &cs, &rc) : NULL;
    if (!rep || !c) {
        fprintf(stderr, "shoal-member: cannot start %s: %s\n", rep ? "membership" : "the replicator",
                shoal_strerror(rc));
        shoal_replicator_destroy(&rep);
        shoal_system_destroy(&sys);
        shoal_config_destroy(&cfg);
        return 1;
    }
    const char *self = shoal_node_id(shoal_system_self(sys));
    notify_open();
    service_t service = {.cluster = c, .watchdog_ms = watchdog_ms()};
    setup_t setup = {c, quiet, notify_fd >= 0 ? &service : NULL};
    if ((rc = shoal_cluster_follow(c, rep)) < 0 ||
        (rc = shoal_cluster_add_task(c, SHOAL_PHASE_BEFORE_TERMINATE, "shoal-member-exit",
                                     record_reason, NULL)) < 0 ||
        (rc = shoal_system_call(sys, setup_on_node, &setup)) < 0) {
        fprintf(stderr, "shoal-member: cannot set up %s: %s\n", self, shoal_strerror(rc));
        shoal_system_call(sys, service_stop, &service);
        shoal_cluster_destroy(&c);
        shoal_replicator_destroy(&rep);
        shoal_system_destroy(&sys);
        shoal_config_destroy(&cfg);
        return 1;
    }
    if (http_flags.n_hosts) {
        memcpy(hs.hosts, http_flags.hosts, sizeof hs.hosts);
        hs.n_hosts = http_flags.n_hosts;
    }
    if (http_flags.token_file)
        hs.token_file = http_flags.token_file;
    if (http_flags.token_for_reads)
        hs.token_for_reads = true;
    if (http_flags.tls_cert_file)
        hs.tls_cert_file = http_flags.tls_cert_file;
    if (http_flags.tls_key_file)
        hs.tls_key_file = http_flags.tls_key_file;
    shoal_metrics_t *endpoint = http ? shoal_http_start_with(sys, http, &hs, &rc) : NULL;
    if (http && !endpoint) {
        fprintf(stderr, "shoal-member: cannot serve HTTP on %s: %s\n", http, shoal_strerror(rc));
        shoal_system_call(sys, service_stop, &service);
        shoal_cluster_destroy(&c);
        shoal_replicator_destroy(&rep);
        shoal_system_destroy(&sys);
        shoal_config_destroy(&cfg);
        return 1;
    }
    /* POST /reload: SIGHUP as an admin request (cli.h, RELOAD AS AN ADMIN REQUEST) */
    static cli_reloader_t reloader;
    reloader = (cli_reloader_t){"shoal-member", sys, endpoint, hs.tls_cert_file != NULL,
                                &reload_requested};
    cli_reload_route(&reloader);
    printf("shoal-member: %s listening at %s\n", self, shoal_system_endpoint(sys));
    if (endpoint)
        printf("shoal-member: management endpoint on port %u\n",
               (unsigned)shoal_metrics_port(endpoint));
    if (cs.discovery)
        printf("shoal-member: finding the seeds through %s\n", cs.discovery);
    else if (cs.n_seed_nodes == 0)
        printf("shoal-member: no seed nodes: waiting for `shoal-cluster --node %s join SEED`\n",
               shoal_system_endpoint(sys));
    fflush(stdout);

    /* The main thread only watches for a signal and for the cluster having stopped this node. */
    bool by_signal = false;
    while (!shoal_cluster_terminated(c)) {
        if (stop_requested) {
            by_signal = true;
            break;
        }
        if (reload_requested) {
            reload_requested = 0;
            cli_reload("shoal-member", sys, endpoint);
        }
        sleep_ms(500); /* a signal cuts it short */
    }
    int exit_code = 0;
    notify("STOPPING=1");
    if (by_signal) {
        printf("shoal-member: %s leaving\n", self);
        fflush(stdout);
        /* a second signal does not cut the leave short */
        if (shoal_cluster_shutdown_wait(c, SHUTDOWN_WAIT_MS) != 0)
            fprintf(stderr, "shoal-member: %s: shutdown not finished after %d s, stopping\n",
                    self, SHUTDOWN_WAIT_MS / 1000);
    } else if (shutdown_reason == SHOAL_SHUTDOWN_JOIN_FAILED) {
        exit_code = 1;
    } else if (shutdown_reason == SHOAL_SHUTDOWN_DOWNED) {
        exit_code = EXIT_DOWNED;
    }
    printf("shoal-member: %s stopped: %s\n", self,
           by_signal && !shutdown_reason ? "shut down" : reason_text(shutdown_reason));
    fflush(stdout);
    shoal_metrics_stop(&endpoint);
    shoal_system_call(sys, service_stop, &service); /* its tick reads the cluster */
    shoal_cluster_destroy(&c);
    shoal_replicator_destroy(&rep);
    shoal_system_destroy(&sys);
    shoal_config_destroy(&cfg);
    if (notify_fd >= 0)
        close(notify_fd);
    return exit_code;
}
