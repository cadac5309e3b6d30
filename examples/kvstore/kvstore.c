/*  kvstore — a replicated key-value store: one LWWMap under the durable key "kv", kept by the
    default replicator of every member of a cluster and saved in LMDB, so a node that restarts
    finds its data where it left it and catches up on the rest by gossip.

      kvstore node --bind HOST:PORT [--seed HOST:PORT]... [--new-cluster] --data DIR
                   [--discover NAME] [--min-members N] [--http [HOST:]PORT] [--config FILE]
                   [--fast]
      kvstore put   NODE KEY VALUE [CONS]     write through the node at NODE
      kvstore get   NODE [KEY] [CONS]         read the whole map ("" or no KEY) or one key
      kvstore del   NODE KEY [CONS]           remove a key
      kvstore watch NODE [SECONDS]            print the node's map, then every change as the node
                                              is notified of it (a subscription; 0 = forever)
    NODE and every address: HOST:PORT or tcp://HOST:PORT (HOST an address or a name, resolved:
    the node id records the address), or a PORT alone on 127.0.0.1 (cli.h, NODE ADDRESSES).
    --config FILE: a ZPL settings file (shoal/remote/..., shoal/cluster/..., docs/configuration.md)
    read before the flags, which override it.
      kvstore --help | --version
    CONS: local | majority | all | N (WriteTo/ReadFrom N nodes); default majority, timeout 3 s.

    The node joins the cluster through its seeds. Give every node the same seed list: the first
    seed forms the cluster when every other seed answers that it is in no cluster (a cold start),
    or when none answers within seed-node-timeout; a seed that restarts asks the others first and
    joins their cluster. Without --seed the node waits to be joined (`shoal-cluster --node ENDPOINT
    join SEED`), unless --new-cluster tells it to form a new cluster alone. It prints
    one line when it is Up. --discover dns:NAME:PORT (or srv:_shoal._tcp.NAME) finds the seeds by
    DNS instead of a list (SEED DISCOVERY in membership.h; SHOAL_DNS_RESOLVER=IPv4:PORT names
    another nameserver than the system's): the lowest address of the nodes the name gives forms
    the cluster once two or more answer that they are in none. It prints
    one line when it is Up and runs until SIGINT or SIGTERM, which leave the cluster gracefully.
    --min-members N (Akka's min-nr-of-members): no member is moved to Up until N have joined, so
    a cluster started N at a time does not take majority writes while it has fewer. Majority and
    all are refused (exit 1, "no quorum") while the node is not Up: a node in no cluster has no
    majority to count.
    --http serves the node's management endpoint (members, health probes, replicators, metrics:
    docs/operations.md) on HOST:PORT, 127.0.0.1 when no HOST is given; off without it.
    The commands are clients of one node: they do not join the cluster.

    Exit codes: 0 ok; 1 refused, timed out (the consistency level was not reached in time: a write
    stays applied on the node and spreads by gossip), no such key, or the node could not start;
    2 usage; 3 the node is unreachable.
*/
#include "cli.h"
#include "durable.h"
#include "membership.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KV_KEY           "kv"
#define MAX_SEEDS        16
#define OP_TIMEOUT_MS    3000
#define SHUTDOWN_WAIT_MS 10000

enum { EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested; /* SIGHUP: cli_reload */

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload_requested = 1;
    else
        stop_requested = 1;
}

/* reload: SIGHUP asks a node for cli_reload (else it stops the process, as by default) */
static void catch_signals(bool reload)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (reload)
        sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL); /* a signal cuts it short: the callers re-check stop_requested */
}

static void usage(FILE *f)
{
    fprintf(
        f, "usage: kvstore node --bind HOST:PORT [--seed HOST:PORT]... [--new-cluster] --data DIR\n"
           "                    [--discover dns:HOST:PORT|srv:_shoal._tcp.HOST] [--min-members N]\n"
           "                    [--http [HOST:]PORT] [--config FILE] [--fast]\n"
           "                    [--allow-from CIDR]... [--insecure]\n"
           "       kvstore put NODE KEY VALUE [local|majority|all|N]\n"
           "       kvstore get NODE [KEY] [local|majority|all|N]\n"
           "       kvstore del NODE KEY [local|majority|all|N]\n"
           "       kvstore watch NODE [SECONDS]\n"
           "       kvstore --help | --version\n"
           "  NODE, HOST:PORT: HOST:PORT or tcp://HOST:PORT (HOST an address or a name), or PORT\n"
           "  alone (127.0.0.1)\n" CLI_NODE_ACCESS_USAGE);
}

/* ---------------------------------------------------------------------------------------------
 * The node
 */
static void on_up(shoal_cluster_t *c, void *arg)
{
    (void)arg;
    shoal_system_t *sys = shoal_cluster_system(c);
    printf("kvstore: %s up at %s\n", shoal_node_id(shoal_system_self(sys)),
           shoal_system_endpoint(sys));
    fflush(stdout);
}

static int setup_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    return shoal_cluster_on_up(arg, on_up, NULL) < 0 ? SHOAL_EINVAL : 0;
}

static cli_node_access_t node_access; /* --allow-from, --insecure (cli.h) */

static int run_node(int argc, char **argv)
{
    const char *bind = NULL, *data = NULL, *discover = NULL, *http = NULL, *config_path = NULL;
    static char bind_buf[300], seed_buf[MAX_SEEDS][300], http_buf[300];
    char why[400];
    const char *seeds[MAX_SEEDS];
    size_t n_seeds = 0;
    bool fast = false, new_cluster = false;
    unsigned long min_members = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        bool takes_value = !strcmp(a, "--bind") || !strcmp(a, "--seed") || !strcmp(a, "--data") ||
                           !strcmp(a, "--min-members") || !strcmp(a, "--discover") ||
                           !strcmp(a, "--http") || !strcmp(a, "--config");
        if (takes_value && i + 1 >= argc) {
            fprintf(stderr, "kvstore: %s needs a value\n", a);
            return EXIT_USAGE;
        }
        if (!strcmp(a, "--bind")) {
            bind = argv[++i];
        } else if (!strcmp(a, "--config")) {
            config_path = argv[++i];
        } else if (!strcmp(a, "--discover")) {
            discover = argv[++i];
        } else if (!strcmp(a, "--data")) {
            data = argv[++i];
        } else if (!strcmp(a, "--seed")) {
            if (n_seeds == MAX_SEEDS) {
                fprintf(stderr, "kvstore: at most %d seeds\n", MAX_SEEDS);
                return EXIT_USAGE;
            }
            seeds[n_seeds++] = argv[++i];
        } else if (!strcmp(a, "--min-members")) {
            char *end;
            errno = 0;
            min_members = strtoul(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || min_members < 1 || min_members > 1000) {
                fprintf(stderr, "kvstore: --min-members takes a number from 1 to 1000, not '%s'\n",
                        argv[i]);
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--http")) {
            if (cli_http_address(argv[++i], http_buf, sizeof http_buf, why, sizeof why) != 0) {
                fprintf(stderr, "kvstore: --http %s\n", why);
                return EXIT_USAGE;
            }
            http = http_buf;
        } else if (!strcmp(a, "--fast")) {
            fast = true;
        } else if (!strcmp(a, "--new-cluster")) {
            new_cluster = true;
        } else {
            fprintf(stderr, "kvstore: unknown option '%s'\n", a);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!bind || !data || !*data) {
        fprintf(stderr, "kvstore: node needs --bind ENDPOINT and --data DIR\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (cli_node_address(bind, bind_buf, sizeof bind_buf, why, sizeof why) != 0) {
        fprintf(stderr, "kvstore: --bind %s\n", why);
        return EXIT_USAGE;
    }
    bind = bind_buf;
    for (size_t i = 0; i < n_seeds; i++) {
        if (cli_node_address(seeds[i], seed_buf[i], sizeof seed_buf[i], why, sizeof why) != 0) {
            fprintf(stderr, "kvstore: --seed %s\n", why);
            return EXIT_USAGE;
        }
        seeds[i] = seed_buf[i];
    }
    if (new_cluster && n_seeds) {
        fprintf(stderr, "kvstore: --new-cluster forms a cluster alone: give it no --seed\n");
        return EXIT_USAGE;
    }
    if (discover) {
        if (shoal_discovery_check(discover, getenv("SHOAL_DNS_RESOLVER"), why, sizeof why) < 0) {
            fprintf(stderr, "kvstore: --discover: %s\n", why);
            return EXIT_USAGE;
        }
        if (n_seeds || new_cluster) {
            fprintf(stderr, "kvstore: --discover finds the seeds: give no --seed or --new-cluster "
                            "with it\n");
            return EXIT_USAGE;
        }
    }
    if (new_cluster)
        seeds[n_seeds++] = bind; /* its own endpoint as the only seed: it forms a cluster */

    /* Settings: defaults (or the fast ones), then --config FILE, then the flags. */
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    shoal_cluster_settings_t cs;
    if (fast)
        shoal_cluster_settings_fast(&cs);
    else
        shoal_cluster_settings_default(&cs);
    shoal_http_settings_t hs;
    shoal_http_settings_default(&hs);
    shoal_config_t *cfg = NULL;
    if (config_path && !(cfg = cli_config_node("kvstore", config_path, &ss, &cs, &rs, &hs)))
        return EXIT_REFUSED;

    catch_signals(true);

    /* The store first: a corrupt or foreign environment stops us before we join anything. */
    shoal_durable_settings_t ds;
    shoal_durable_settings_default(&ds);
    ds.dir = data;
    int open_err;
    shoal_durable_t *durable = shoal_durable_open(&ds, &open_err);
    if (!durable) {
        fprintf(stderr, "kvstore: cannot open the store: %s\n", shoal_last_error_detail());
        shoal_config_destroy(&cfg);
        return EXIT_REFUSED;
    }
    shoal_store_t *store = shoal_durable_store(durable, "");
    if (!store) {
        fprintf(stderr, "kvstore: cannot open the replicator's database in %s\n", data);
        shoal_durable_close(&durable);
        shoal_config_destroy(&cfg);
        return EXIT_REFUSED;
    }

    ss.endpoint = bind;
    cli_node_access_apply(&node_access, &ss);
    int rc = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &rc);
    if (!sys) {
        fprintf(stderr, "kvstore: cannot start a node at %s: %s\n", bind, shoal_strerror(rc));
        shoal_durable_close(&durable);
        shoal_config_destroy(&cfg);
        return EXIT_REFUSED;
    }
    static const char *const durable_keys[] = {KV_KEY};
    rs.role = "";
    rs.durable_keys = durable_keys;
    rs.n_durable_keys = 1;
    rs.store = store;
    if (n_seeds || discover ||
        !config_path) { /* the flags' seeds or discovery replace the file's */
        cs.seed_nodes = seeds;
        cs.n_seed_nodes = n_seeds;
        cs.discovery = discover;
    }
    if (min_members > 1 || !config_path)
        cs.min_nr_of_members = (uint32_t)min_members;
    /* the kept membership: majorities stay majorities of the same members across a restart of
       every node (see KEPT MEMBERSHIP in membership.h) */
    cs.durable_id = shoal_durable_node_id(durable);
    cs.store = shoal_durable_store(durable, SHOAL_CLUSTER_STORE_ROLE);

    shoal_replicator_t *rep = shoal_replicator_new(sys, &rs, &rc);
    if (rep && cli_config_limits("kvstore", config_path, cfg, rep, NULL) < 0) {
        shoal_replicator_destroy(&rep);
        shoal_system_destroy(&sys);
        shoal_durable_close(&durable);
        shoal_config_destroy(&cfg);
        return EXIT_REFUSED;
    }
    shoal_cluster_t *c = rep ? shoal_cluster_new(sys, &cs, &rc) : NULL;
    if (c && ((rc = shoal_cluster_follow(c, rep)) < 0 ||
              (rc = shoal_system_call(sys, setup_on_node, c)) < 0)) {
        shoal_cluster_destroy(&c);
    }
    shoal_metrics_t *endpoint = NULL;
    if (c && http) {
        endpoint = shoal_http_start_with(sys, http, &hs, &rc);
        if (endpoint)
            shoal_durable_metrics(durable, endpoint);
        else
            shoal_cluster_destroy(&c);
    }
    /* POST /reload: SIGHUP as an admin request (cli.h, RELOAD AS AN ADMIN REQUEST) */
    static cli_reloader_t reloader;
    reloader = (cli_reloader_t){"kvstore", sys, endpoint, hs.tls_cert_file != NULL,
                                &reload_requested};
    cli_reload_route(&reloader);
    if (!c) {
        fprintf(stderr, "kvstore: cannot start %s: %s\n",
                !rep                ? "the replicator"
                : http && !endpoint ? "the HTTP endpoint"
                                    : "membership",
                shoal_strerror(rc));
        shoal_replicator_destroy(&rep);
        shoal_system_destroy(&sys);
        shoal_durable_close(&durable);
        shoal_config_destroy(&cfg);
        return EXIT_REFUSED;
    }
    const char *self = shoal_node_id(shoal_system_self(sys));
    fprintf(stderr, "kvstore: %s listening at %s, data in %s\n", self, bind, data);
    if (discover)
        fprintf(stderr, "kvstore: finding the seeds through %s\n", discover);
    else if (n_seeds == 0)
        fprintf(stderr,
                "kvstore: no seed nodes: waiting to be joined (`shoal-cluster --node %s "
                "join SEED`), or start it with --new-cluster to form a cluster alone\n",
                bind);

    /* Until a signal, or until the cluster stops this node (downed, removed, join failed). */
    while (!stop_requested && !shoal_cluster_terminated(c)) {
        if (reload_requested) {
            reload_requested = 0;
            cli_reload("kvstore", sys, endpoint);
        }
        sleep_ms(100);
    }
    int exit_code = 0;
    if (stop_requested) {
        fprintf(stderr, "kvstore: %s leaving the cluster\n", self);
        if (shoal_cluster_shutdown_wait(c, SHUTDOWN_WAIT_MS) != 0)
            fprintf(stderr, "kvstore: %s: shutdown not finished after %d s, stopping anyway\n",
                    self, SHUTDOWN_WAIT_MS / 1000);
    } else {
        fprintf(stderr, "kvstore: %s: the cluster stopped this node\n", self);
        exit_code = EXIT_REFUSED;
    }
    /* The order matters: the endpoint reads the cluster and the store; the cluster uses the
       replicator, which uses the node and the store. */
    shoal_metrics_stop(&endpoint);
    shoal_cluster_destroy(&c);
    shoal_replicator_destroy(&rep);
    shoal_system_destroy(&sys);
    shoal_durable_close(&durable);
    fprintf(stderr, "kvstore: %s stopped\n", self);
    shoal_config_destroy(&cfg);
    return exit_code;
}

/* ---------------------------------------------------------------------------------------------
 * The client commands
 */
/* NODE: a port (127.0.0.1), HOST:PORT or tcp://HOST:PORT (cli.h, NODE ADDRESSES) */
static int parse_port(const char *s, char *ep, size_t len)
{
    char why[400];
    if (cli_node_address(s, ep, len, why, sizeof why) != 0) {
        fprintf(stderr, "kvstore: NODE %s (or a port on 127.0.0.1)\n", why);
        return -1;
    }
    return 0;
}

static int parse_consistency(const char *s, shoal_consistency_t *c)
{
    memset(c, 0, sizeof *c);
    c->timeout_ms = OP_TIMEOUT_MS;
    char *end = NULL;
    long n = s ? strtol(s, &end, 10) : 0;
    if (!s || !strcmp(s, "majority"))
        c->level = SHOAL_MAJORITY;
    else if (!strcmp(s, "local"))
        c->level = SHOAL_LOCAL;
    else if (!strcmp(s, "all"))
        c->level = SHOAL_ALL;
    else if (end != s && !*end && n > 0 && n < 1000) {
        c->level = SHOAL_FROM_N;
        c->n = (uint32_t)n;
    } else {
        fprintf(stderr, "kvstore: consistency is local, majority, all or a number, not '%s'\n", s);
        return -1;
    }
    return 0;
}

static int print_entry(const void *key, size_t len, const shoal_crdt_t *value, void *arg)
{
    (void)value;
    size_t vlen = 0;
    const void *v = shoal_lwwmap_get(arg, key, len, &vlen);
    printf("%.*s = %.*s\n", (int)len, (const char *)key, (int)vlen, v ? (const char *)v : "");
    return 0;
}

/* Reads the map; *out NULL (and 0) when the key was never written: an empty map. */
static int read_map(shoal_client_t *c, const shoal_consistency_t *cons, shoal_crdt_t **out)
{
    *out = NULL;
    int rc = shoal_client_get(c, "", KV_KEY, cons, out);
    if (rc == SHOAL_ENOTFOUND)
        return 0;
    if (rc == 0 && shoal_crdt_type(*out) != shoal_type_by_name("LWWMap")) {
        shoal_crdt_destroy(out);
        return SHOAL_ETYPE; /* someone else wrote another type under our key */
    }
    return rc;
}

/* Prints the difference between two maps (either may be NULL: empty): "- key" for a key gone,
   "+ key = value" for a new one, "~ key = value" for a changed one. */
static int removed_entry(const void *key, size_t len, const shoal_crdt_t *value, void *arg)
{
    (void)value;
    const shoal_crdt_t *new_map = arg;
    size_t nlen = 0;
    if (!new_map || !shoal_lwwmap_get(new_map, key, len, &nlen))
        printf("- %.*s\n", (int)len, (const char *)key);
    return 0;
}

typedef struct {
    const shoal_crdt_t *old_map, *new_map;
} added_t;

static int added_entry(const void *key, size_t len, const shoal_crdt_t *value, void *arg)
{
    (void)value;
    added_t *a = arg;
    size_t nlen = 0, olen = 0;
    const void *nv = shoal_lwwmap_get(a->new_map, key, len, &nlen);
    const void *ov = a->old_map ? shoal_lwwmap_get(a->old_map, key, len, &olen) : NULL;
    if (!ov || olen != nlen || (nlen && memcmp(ov, nv, nlen) != 0)) {
        printf("%c %.*s = %.*s\n", ov ? '~' : '+', (int)len, (const char *)key, (int)nlen,
               nv ? (const char *)nv : "");
    }
    return 0;
}

static void print_changes(const shoal_crdt_t *old_map, const shoal_crdt_t *new_map)
{
    if (old_map)
        shoal_ormap_foreach(old_map, removed_entry, (void *)new_map);
    if (new_map) {
        added_t a = {old_map, new_map};
        shoal_ormap_foreach(new_map, added_entry, &a);
    }
    fflush(stdout);
}

/* Each change the node is notified of, against the map seen before. */
typedef struct {
    shoal_crdt_t *seen;
    bool first;
} watch_state_t;

static void on_change(shoal_change_t change, const shoal_crdt_t *value, void *arg)
{
    watch_state_t *w = arg;
    const shoal_crdt_t *now =
        change == SHOAL_CHANGED && value && shoal_crdt_type(value) == shoal_type_by_name("LWWMap")
            ? value
            : NULL;
    if (w->first || (w->seen == NULL) != (now == NULL) ||
        (w->seen && now && !shoal_crdt_equal(w->seen, now)))
        print_changes(w->seen, now);
    w->first = false;
    shoal_crdt_destroy(&w->seen);
    w->seen = now ? shoal_crdt_clone(now) : NULL;
}

/* Subscribes to the map on the node (shoal_client_watch) and prints each change: the first event
   is the map as it is (+), then every put (+ or ~) and delete (-) through that node, each on its
   own, and what gossip brings from the others. */
static int watch(const char *ep, const char *seconds_arg)
{
    long seconds = 0;
    if (seconds_arg) {
        char *end = NULL;
        seconds = strtol(seconds_arg, &end, 10);
        if (end == seconds_arg || *end || seconds < 0) {
            fprintf(stderr, "kvstore: SECONDS is a number >= 0 (0 = until Ctrl-C), not '%s'\n",
                    seconds_arg);
            return EXIT_USAGE;
        }
    }
    int rc = 0;
    shoal_client_t *c = shoal_client_new(ep, OP_TIMEOUT_MS, &rc);
    if (!c) {
        fprintf(stderr, "kvstore: cannot reach %s: %s\n", ep, shoal_strerror(rc));
        return EXIT_UNREACHABLE;
    }
    catch_signals(false);
    watch_state_t w = {NULL, true};
    uint64_t session = 0, missed = 0, missed_told = 0;
    bool failing = false;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!stop_requested) {
        if (!c)
            c = shoal_client_new(ep, OP_TIMEOUT_MS, &rc);
        /* a poll of at most a second, so SECONDS and Ctrl-C are noticed */
        if (c)
            rc = shoal_client_watch(c, "", KV_KEY, &session, 1000, on_change, &w, &missed);
        if (rc == SHOAL_ENOTFOUND && session) {
            session = 0; /* the node restarted or dropped us: a new session starts from the map */
            continue;
        }
        if (rc < 0) {
            if (!failing)
                fprintf(stderr, "kvstore: watch %s: %s%s%s (retrying)\n", ep, shoal_strerror(rc),
                        c && *shoal_client_error(c) ? ": " : "", c ? shoal_client_error(c) : "");
            failing = true;
            session = 0;
            shoal_client_destroy(&c); /* a fresh connection after a failure: the node may be back */
            sleep_ms(500);
        } else {
            if (failing)
                fprintf(stderr, "kvstore: watch %s: reachable again\n", ep);
            failing = false;
            if (missed > missed_told) {
                fprintf(stderr, "kvstore: watch %s: %llu changes missed (not asked for in time)\n",
                        ep, (unsigned long long)(missed - missed_told));
                missed_told = missed;
            }
        }
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (seconds > 0 && t.tv_sec - t0.tv_sec >= seconds)
            break;
    }
    shoal_crdt_destroy(&w.seen);
    shoal_client_destroy(&c);
    return failing ? EXIT_REFUSED : 0;
}

static int client_command(int argc, char **argv)
{
    const char *cmd = argv[1];
    bool known =
        !strcmp(cmd, "put") || !strcmp(cmd, "get") || !strcmp(cmd, "del") || !strcmp(cmd, "watch");
    if (!known) {
        fprintf(stderr, "kvstore: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    int min = !strcmp(cmd, "put") ? 5 : !strcmp(cmd, "del") ? 4 : 3;
    int max = !strcmp(cmd, "put") ? 6 : !strcmp(cmd, "watch") ? 4 : 5;
    if (argc < min || argc > max) {
        fprintf(stderr, "kvstore: %s: wrong number of arguments\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    char ep[64];
    if (parse_port(argv[2], ep, sizeof ep) < 0)
        return EXIT_USAGE;
    if (!strcmp(cmd, "watch"))
        return watch(ep, argc > 3 ? argv[3] : NULL);

    const char *key = argc > 3 && argv[3][0] ? argv[3] : NULL;
    const char *level = argc > min ? argv[min] : NULL;
    if (!strcmp(cmd, "get"))
        level = argc > 4 ? argv[4] : NULL;
    shoal_consistency_t cons;
    if (parse_consistency(level, &cons) < 0)
        return EXIT_USAGE;
    if (!key && strcmp(cmd, "get") != 0) {
        fprintf(stderr, "kvstore: %s: the key must not be empty\n", cmd);
        return EXIT_USAGE;
    }

    int rc = 0;
    shoal_client_t *c = shoal_client_new(ep, OP_TIMEOUT_MS, &rc);
    if (!c) {
        fprintf(stderr, "kvstore: cannot reach %s: %s\n", ep, shoal_strerror(rc));
        return EXIT_UNREACHABLE;
    }
    if (!strcmp(cmd, "put") || !strcmp(cmd, "del")) {
        bool put = cmd[0] == 'p';
        /* A remove applies to what the serving replica has seen. A read at the same level first
           merges the other replicas' values into it (a read repairs the local replica), so a
           key written at majority is found by a delete at majority through any node. */
        if (!put && cons.level != SHOAL_LOCAL) {
            shoal_crdt_t *seen = NULL;
            rc = read_map(c, &cons, &seen);
            shoal_crdt_destroy(&seen);
            if (rc < 0)
                goto done;
        }
        shoal_client_op_t op = {.type = "LWWMap",
                                .op = put ? "put" : "remove",
                                .key2 = key,
                                .key2_len = strlen(key),
                                .value = put ? argv[4] : NULL,
                                .value_len = put ? strlen(argv[4]) : 0};
        rc = shoal_client_update(c, "", KV_KEY, &cons, &op);
        if (!put && (rc == SHOAL_EMODIFY || rc == SHOAL_ENOTFOUND)) {
            fprintf(stderr, "kvstore: del: no such key '%s'\n", key);
            shoal_client_destroy(&c);
            return EXIT_REFUSED;
        }
    } else {
        shoal_crdt_t *map = NULL;
        rc = read_map(c, &cons, &map);
        if (rc == 0 && key) {
            size_t vlen = 0;
            const void *v = map ? shoal_lwwmap_get(map, key, strlen(key), &vlen) : NULL;
            if (v) {
                printf("%s = %.*s\n", key, (int)vlen, (const char *)v);
            } else {
                fprintf(stderr, "kvstore: get: no such key '%s'\n", key);
                rc = SHOAL_ENOTFOUND;
            }
        } else if (rc == 0 && map) {
            shoal_ormap_foreach(map, print_entry, map);
        }
        shoal_crdt_destroy(&map);
        if (rc == SHOAL_ENOTFOUND) {
            shoal_client_destroy(&c);
            return EXIT_REFUSED;
        }
    }
done:;
    /* the client's own words, when it has more to say than the code (a reply over its limit) */
    char why[300] = "";
    if (*shoal_client_error(c))
        snprintf(why, sizeof why, ": %s", shoal_client_error(c));
    shoal_client_destroy(&c);
    if (rc == SHOAL_ETIMEOUT) {
        fprintf(stderr, "kvstore: %s: %s not reached within %d ms%s%s\n", cmd,
                level ? level : "majority", OP_TIMEOUT_MS,
                cmd[0] == 'g' ? "" : " (applied on the node, it spreads by gossip)", why);
        return EXIT_REFUSED;
    }
    if (rc < 0) {
        fprintf(stderr, "kvstore: %s: %s%s\n", cmd, shoal_strerror(rc), why);
        return EXIT_REFUSED;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int cli = cli_help_or_version(&argc, argv, "kvstore", usage);
    if (cli >= 0)
        return cli;
    if (cli_node_access(&argc, argv, "kvstore", &node_access) != 0)
        return cli_usage_error(usage);
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "node"))
        return run_node(argc, argv);
    return client_command(argc, argv);
}
