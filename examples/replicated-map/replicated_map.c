/*  replicated-map — a replicated key-value map (an LWWMap under one key) shared by node processes,
    with a chosen consistency.

      replicated-map node NODE [PEER ...] [--http [HOST:]PORT] [--config FILE]
                                                    run a node at NODE until Ctrl-C
                                                    (--http: its management endpoint, with
                                                    /metrics and /cluster/replicators)
      replicated-map put  PORT KEY VALUE [CONS]     write through the node at PORT (or at
                                                    HOST:PORT, tcp://HOST:PORT: every command)
      replicated-map get  PORT [KEY] [CONS]         read (the whole map, or one key)
      replicated-map del  PORT KEY [CONS]           remove a key
      replicated-map wait PORT N                    wait (10 s at most) until the node has N peers
      replicated-map --help | --version
    CONS: local | majority | all | N (WriteTo/ReadFrom N nodes); default majority. Timeout 3 s.

    NODE, PEER and the commands' PORT: a PORT alone (127.0.0.1:PORT), HOST:PORT or
    tcp://HOST:PORT (HOST an address or a name, resolved: the node id records the address; cli.h,
    NODE ADDRESSES). --config FILE: a ZPL settings file (docs/configuration.md; the sections
    shoal/remote, shoal/cluster/distributed-data and shoal/management/http) read before the
    flags, which win over it; the node keeps the default replicator (role "") the commands use.

    Nodes find each other through the PEERs given; each one's replicator counts the others as
    peers once their handshake is done. The commands are clients: they do not join the cluster.
*/
#include "cli.h"
#include "ddata.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAP_KEY "map"

static volatile sig_atomic_t stop;
static shoal_replicator_t *rep;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void on_peer(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
                    const shoal_node_t *old, uint64_t count, void *arg)
{
    (void)sys;
    (void)count;
    (void)arg;
    if (ev == SHOAL_PEER_RESTARTED && old)
        shoal_replicator_node_removed(rep, old);
    if (ev == SHOAL_PEER_UP || ev == SHOAL_PEER_RESTARTED) {
        shoal_replicator_add_peer(rep, node, true, shoal_node_port(node));
        fprintf(stderr, "replicated-map: peer %s\n", shoal_node_id(node));
    }
}

typedef struct {
    int n;
    char **ports;
} peers_t;

static int connect_peers(shoal_system_t *sys, void *arg)
{
    peers_t *p = arg;
    shoal_system_on_peer(sys, on_peer, NULL);
    for (int i = 0; i < p->n; i++) {
        char ep[300], why[400];
        if (cli_node_address(p->ports[i], ep, sizeof ep, why, sizeof why) != 0) {
            fprintf(stderr, "replicated-map: PEER %s\n", why); /* checked by main: not here */
            continue;
        }
        int rc = shoal_system_connect(sys, ep);
        if (rc < 0)
            fprintf(stderr, "replicated-map: cannot connect to %s: %s\n", ep, shoal_strerror(rc));
    }
    return 0;
}

/* ep: the node's endpoint (cli_node_address's); config: --config FILE or NULL, under the flags */
static int run_node(const char *ep, int n_peers, char **peers, const char *http, const char *config)
{
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    shoal_http_settings_t hs;
    shoal_http_settings_default(&hs);
    shoal_config_t *cfg = NULL;
    if (config && !(cfg = cli_config_node("replicated-map", config, &ss, NULL, &rs, &hs)))
        return 1;
    ss.endpoint = ep;
    rs.role = ""; /* the replicator the commands talk to */
    int err = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    if (!sys) {
        fprintf(stderr, "replicated-map: cannot start a node on %s: %s\n", ep, shoal_strerror(err));
        shoal_config_destroy(&cfg);
        return 1;
    }
    rep = shoal_replicator_new(sys, &rs, &err);
    if (rep && cli_config_limits("replicated-map", config, cfg, rep, NULL) < 0) {
        shoal_replicator_destroy(&rep);
        shoal_system_destroy(&sys);
        shoal_config_destroy(&cfg);
        return 1;
    }
    if (!rep) {
        fprintf(stderr, "replicated-map: replicator: %s\n", shoal_strerror(err));
        shoal_system_destroy(&sys);
        shoal_config_destroy(&cfg);
        return 1;
    }
    shoal_metrics_t *endpoint = http ? shoal_http_start_with(sys, http, &hs, &err) : NULL;
    if (http && !endpoint) {
        fprintf(stderr, "replicated-map: cannot serve HTTP on %s: %s\n", http, shoal_strerror(err));
        shoal_replicator_destroy(&rep);
        shoal_system_destroy(&sys);
        shoal_config_destroy(&cfg);
        return 1;
    }
    peers_t p = {n_peers, peers};
    shoal_system_call(sys, connect_peers, &p);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    printf("node %s ready\n", shoal_node_id(shoal_system_self(sys)));
    fflush(stdout);
    while (!stop)
        usleep(50000);
    shoal_metrics_stop(&endpoint);
    shoal_replicator_destroy(&rep);
    shoal_system_destroy(&sys);
    shoal_config_destroy(&cfg);
    return 0;
}

static int parse_consistency(const char *s, shoal_consistency_t *c)
{
    memset(c, 0, sizeof *c);
    c->timeout_ms = 3000;
    if (!s || strcmp(s, "majority") == 0)
        c->level = SHOAL_MAJORITY;
    else if (strcmp(s, "local") == 0)
        c->level = SHOAL_LOCAL;
    else if (strcmp(s, "all") == 0)
        c->level = SHOAL_ALL;
    else if (atoi(s) > 0) {
        c->level = SHOAL_FROM_N;
        c->n = (uint32_t)atoi(s);
    } else {
        fprintf(stderr, "replicated-map: consistency is local, majority, all or a number\n");
        return -1;
    }
    return 0;
}

static int print_entry(const void *key, size_t len, const shoal_crdt_t *value, void *arg)
{
    (void)value;
    const shoal_crdt_t *map = arg;
    size_t vlen = 0;
    const void *v = shoal_lwwmap_get(map, key, len, &vlen);
    printf("%.*s = %.*s\n", (int)len, (const char *)key, (int)vlen, (const char *)v);
    return 0;
}

static int client_command(int argc, char **argv)
{
    const char *cmd = argv[1];
    /* a port on 127.0.0.1, or HOST:PORT / tcp://HOST:PORT (cli.h, NODE ADDRESSES) */
    char ep[300], why[400];
    if (cli_node_address(argv[2], ep, sizeof ep, why, sizeof why) != 0) {
        fprintf(stderr, "replicated-map: NODE %s (or a port on 127.0.0.1)\n", why);
        return 2;
    }
    int err = 0;
    shoal_client_t *c = shoal_client_new(ep, 3000, &err);
    if (!c) {
        fprintf(stderr, "replicated-map: cannot reach %s: %s\n", ep, shoal_strerror(err));
        return 1;
    }
    int rc = 0;
    shoal_consistency_t cons;
    if (strcmp(cmd, "put") == 0 && argc >= 5) {
        if (parse_consistency(argc > 5 ? argv[5] : NULL, &cons) < 0)
            rc = SHOAL_EINVAL;
        else {
            shoal_client_op_t op = {.type = "LWWMap",
                                    .op = "put",
                                    .key2 = argv[3],
                                    .key2_len = strlen(argv[3]),
                                    .value = argv[4],
                                    .value_len = strlen(argv[4])};
            rc = shoal_client_update(c, "", MAP_KEY, &cons, &op);
        }
    } else if (strcmp(cmd, "del") == 0 && argc >= 4) {
        if (parse_consistency(argc > 4 ? argv[4] : NULL, &cons) < 0)
            rc = SHOAL_EINVAL;
        else {
            shoal_client_op_t op = {
                .type = "LWWMap", .op = "remove", .key2 = argv[3], .key2_len = strlen(argv[3])};
            rc = shoal_client_update(c, "", MAP_KEY, &cons, &op);
        }
    } else if (strcmp(cmd, "wait") == 0 && argc >= 4) {
        /* a majority is counted among the peers a node knows: wait until it knows them all */
        int want = atoi(argv[3]), have = -1;
        shoal_buf_t text = {0};
        for (int i = 0; i < 200 && have < want; i++) {
            rc = shoal_client_stats(c, "", &text);
            const char *p = rc == 0 ? strstr(shoal_buf_cstr(&text), "node_peers ") : NULL;
            have = p ? atoi(p + strlen("node_peers ")) : -1;
            if (have < want)
                usleep(50000);
        }
        shoal_buf_free(&text);
        if (have < want)
            rc = SHOAL_ETIMEOUT;
    } else if (strcmp(cmd, "get") == 0) {
        const char *key = argc > 3 && argv[3][0] ? argv[3] : NULL; /* "" = the whole map */
        if (parse_consistency(argc > 4 ? argv[4] : NULL, &cons) < 0)
            rc = SHOAL_EINVAL;
        else {
            shoal_crdt_t *map = NULL;
            rc = shoal_client_get(c, "", MAP_KEY, &cons, &map);
            if (rc == SHOAL_ENOTFOUND) {
                rc = key ? SHOAL_ENOTFOUND : 0; /* an empty map */
            } else if (rc == 0 && key) {
                size_t vlen = 0;
                const void *v = shoal_lwwmap_get(map, key, strlen(key), &vlen);
                if (v)
                    printf("%s = %.*s\n", key, (int)vlen, (const char *)v);
                else
                    rc = SHOAL_ENOTFOUND;
            } else if (rc == 0) {
                shoal_ormap_foreach(map, print_entry, map);
            }
            shoal_crdt_destroy(&map);
        }
    } else {
        fprintf(stderr, "replicated-map: unknown command or missing arguments (see --help)\n");
        rc = SHOAL_EINVAL;
    }
    shoal_client_destroy(&c);
    if (rc < 0) {
        fprintf(stderr, "replicated-map: %s: %s\n", cmd, shoal_strerror(rc));
        return rc == SHOAL_ETIMEOUT ? 3 : 1;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: replicated-map node NODE [PEER ...] [--http [HOST:]PORT] [--config FILE]\n"
               "       replicated-map put PORT KEY VALUE [local|majority|all|N]\n"
               "       replicated-map get PORT [KEY] [local|majority|all|N]\n"
               "       replicated-map del PORT KEY [local|majority|all|N]\n"
               "       replicated-map wait PORT N\n"
               "       replicated-map --help | --version\n"
               "  NODE, PEER, PORT: PORT (on 127.0.0.1), HOST:PORT or tcp://HOST:PORT;\n"
               "  --config FILE: settings under the flags\n");
}

int main(int argc, char **argv)
{
    int cli = cli_help_or_version(&argc, argv, "replicated-map", usage);
    if (cli >= 0)
        return cli;
    if (argc < 3) {
        if (argc < 2)
            fprintf(stderr, "replicated-map: no command given\n");
        else if (argv[1][0] == '-')
            fprintf(stderr, "replicated-map: unknown option '%s'\n", argv[1]);
        else
            fprintf(stderr, "replicated-map: '%s' needs its arguments\n", argv[1]);
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "node") == 0) {
        /* --http SPEC and --config FILE may come anywhere after NODE; the other arguments are
           peers */
        const char *http = NULL, *config = NULL;
        static char http_buf[300], node_buf[300];
        char why[400];
        int n = 0;
        for (int i = 3; i < argc; i++) {
            if (strcmp(argv[i], "--config") == 0) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "replicated-map: --config takes a FILE\n");
                    return 2;
                }
                config = argv[++i];
            } else if (strcmp(argv[i], "--http") != 0) {
                char peer[300];
                if (cli_node_address(argv[i], peer, sizeof peer, why, sizeof why) != 0) {
                    fprintf(stderr, "replicated-map: PEER %s\n", why);
                    return 2;
                }
                argv[3 + n++] = argv[i];
            } else if (i + 1 < argc && cli_http_address(argv[i + 1], http_buf, sizeof http_buf, why,
                                                        sizeof why) == 0) {
                http = http_buf;
                i++;
            } else {
                fprintf(stderr, "replicated-map: --http %s\n",
                        i + 1 < argc ? why : "takes [HOST:]PORT");
                return 2;
            }
        }
        if (cli_node_address(argv[2], node_buf, sizeof node_buf, why, sizeof why) != 0) {
            fprintf(stderr, "replicated-map: NODE %s\n", why);
            return 2;
        }
        return run_node(node_buf, n, argv + 3, http, config);
    }
    if (strcmp(argv[1], "put") != 0 && strcmp(argv[1], "get") != 0 && strcmp(argv[1], "del") != 0 &&
        strcmp(argv[1], "wait") != 0) {
        fprintf(stderr, "replicated-map: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    return client_command(argc, argv);
}
