/*  counter-service — a sharded service to run as a cluster and drive by hand from the shell: two
    entity types, "counter" and "account", whose entities each keep a number, saved as their
    entity state (so it survives a move of their shard, a crash of their node, and with
    --data-dir a restart of every node).

      counter-service node --bind tcp://HOST:PORT [--seed ENDPOINT]... [--data-dir DIR]
                           [--http [HOST:]PORT] [--shards N] [--config FILE] [--fast]
                           [--allow-from CIDR]... [--insecure]
    An ENDPOINT is HOST:PORT or tcp://HOST:PORT, HOST an address or a name (resolved: the node id
    records the address); --config FILE: a ZPL settings file (shoal/remote/..., shoal/cluster/...,
    shoal/cluster/sharding/... with its distributed-data, shoal/management/http/...) read before
    the flags, which override it (--shards over number-of-shards).
      counter-service [--node ENDPOINT] [--timeout MS] tell TYPE ENTITY MESSAGE...
      counter-service [--node ENDPOINT] [--timeout MS] ask TYPE ENTITY MESSAGE...
      counter-service --help | --version

    node: one member. Give every node the same seed list: the first seed forms the cluster (a
    node whose only seed is itself forms it at once), the others join through it. --data-dir
    keeps the entities' states, the remembered entities and the kept membership in LMDB there
    (without it they live in memory, on a majority of the members). --http serves the management
    endpoint (health probes, /metrics, /cluster/shards, the dashboard at /). --shards: the
    number-of-shards of both types (the file's, else 100; every member must have the same). --fast:
   short timings (rebalance every second instead of 10 s), for demos and tests. SIGINT/SIGTERM: the
   node leaves the cluster gracefully (its shards are handed off first), exit 0.

    tell / ask: the message (the words after ENTITY, joined by spaces) to entity ENTITY of type
    TYPE, through the member at --node (default tcp://127.0.0.1:4001), whichever member hosts
    it: the member routes it through sharding. tell prints "told"; ask prints the entity's reply.

    THE ENTITY. Messages: "add N" (N a whole number, may be negative) adds N to its value, saves
    it, and (to an ask) replies once the save is acknowledged by a majority; "get" replies its
    value. A reply reads "VALUE (TYPE ENTITY, shard SHARD, on HOST:PORT)", the value first, so
    `cut -d' ' -f1` takes it; a message it does not know gets "error: ...".

    Exit codes: 0 ok; 1 the node or the entity answered with an error; 2 usage error; 3 the node
    could not be reached in time (or the entity did not answer in time).

    The client requests are this program's own kinds on the node's client socket (0xc001 tell,
    0xc002 ask; Shoal's own are below 0x8300): "TYPE\0ENTITY\0MESSAGE", answered "0 TEXT" or
    "CODE TEXT" (a negative SHOAL_E* code).
*/
#include "cli.h"
#include "durable.h"
#include "membership.h"
#include "sharding.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KIND_TELL 0xc001u
#define KIND_ASK  0xc002u

#define EXIT_ANSWERED_ERROR 1
#define EXIT_USAGE          2
#define EXIT_UNREACHABLE    3

#define MAX_SEEDS        16
#define MAX_MESSAGE      1024
#define ASK_TIMEOUT_MS   5000
#define SHUTDOWN_WAIT_MS 30000

static const char *const types[] = {"counter", "account"};
#define N_TYPES (sizeof types / sizeof *types)

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: counter-service node --bind tcp://HOST:PORT [--seed ENDPOINT]... [--data-dir DIR]\n"
        "                            [--http [HOST:]PORT] [--shards N] [--config FILE] [--fast]\n"
        "       counter-service [--node ENDPOINT] [--timeout MS] tell TYPE ENTITY MESSAGE...\n"
        "       counter-service [--node ENDPOINT] [--timeout MS] ask TYPE ENTITY MESSAGE...\n"
        "       counter-service --help | --version\n"
        "TYPE is counter or account; MESSAGE is \"add N\" or \"get\". Default node\n"
        "tcp://127.0.0.1:4001. An ENDPOINT: HOST:PORT or tcp://HOST:PORT (HOST an address or a\n"
        "name).\n" CLI_NODE_ACCESS_USAGE);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * The entity (node thread): its state is its value, as decimal text
 */
typedef struct {
    int64_t value;
} counter_t;

static void *counter_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    counter_t *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    size_t len = 0;
    const char *s = shoal_entity_stored(e, &len);
    if (s && len && len < 32) {
        char b[32];
        memcpy(b, s, len);
        b[len] = 0;
        c->value = strtoll(b, NULL, 10);
    }
    return c;
}

static char self_address[SHOAL_NODE_ID_MAX + 1]; /* host:port of this process's node */

static void counter_reply_text(shoal_entity_t *e, const counter_t *c, char *out, size_t cap)
{
    snprintf(out, cap, "%" PRId64 " (%s %s, shard %s, on %s)", c->value,
             shoal_region_type_name(shoal_entity_region(e)), shoal_entity_id(e),
             shoal_entity_shard(e), self_address);
}

static void counter_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)arg;
    counter_t *c = state;
    char m[MAX_MESSAGE + 1], reply[SHOAL_NODE_ID_MAX + SHOAL_ENTITY_ID_MAX + 128];
    if (len > MAX_MESSAGE)
        len = MAX_MESSAGE;
    memcpy(m, msg, len);
    m[len] = 0;
    bool asked = shoal_entity_sender(e).ask_id != 0;
    if (strcmp(m, "get") == 0) {
        counter_reply_text(e, c, reply, sizeof reply);
        shoal_entity_reply(e, reply, strlen(reply));
        return;
    }
    if (strncmp(m, "add ", 4) == 0) {
        char *end;
        errno = 0;
        long long n = strtoll(m + 4, &end, 10);
        if (!errno && end != m + 4 && !*end && n > -1000000000000LL && n < 1000000000000LL) {
            c->value += n;
            char saved[32];
            int sl = snprintf(saved, sizeof saved, "%" PRId64, c->value);
            counter_reply_text(e, c, reply, sizeof reply);
            /* the answer waits for the save: an acknowledged add survives a move or a crash */
            if (asked)
                shoal_entity_save_reply(e, saved, (size_t)sl, reply, strlen(reply));
            else
                shoal_entity_save(e, saved, (size_t)sl, NULL, NULL);
            return;
        }
    }
    if (asked) {
        snprintf(reply, sizeof reply, "error: %s %s does not know '%.64s' (add N, or get)",
                 shoal_region_type_name(shoal_entity_region(e)), shoal_entity_id(e), m);
        shoal_entity_reply(e, reply, strlen(reply));
    }
}

static void counter_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)arg;
    free(state);
}

static const shoal_entity_fns_t counter_fns = {counter_start, counter_receive, counter_stop, NULL};

/* ---------------------------------------------------------------------------------------------
 * The node's client requests (node thread)
 */
static shoal_sharding_t *sharding;

static void answer(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind, int status,
                   const char *text, size_t len)
{
    char head[16];
    int hl = snprintf(head, sizeof head, "%d ", status);
    char *buf = malloc((size_t)hl + len + 1);
    if (!buf)
        abort();
    memcpy(buf, head, (size_t)hl);
    memcpy(buf + hl, text, len);
    shoal_system_reply(sys, to, kind, buf, (size_t)hl + len);
    free(buf);
}

typedef struct {
    shoal_system_t *sys;
    shoal_reply_to_t to;
} ask_t;

static void ask_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    ask_t *a = arg;
    if (status == 0)
        answer(a->sys, &a->to, KIND_ASK, 0, reply, len);
    else {
        char why[128];
        int n = snprintf(why, sizeof why, "no answer from the entity: %s", shoal_strerror(status));
        answer(a->sys, &a->to, KIND_ASK, status, why, (size_t)n);
    }
    free(a);
}

static void on_request(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                       const uint8_t *data, size_t len, void *arg)
{
    (void)arg;
    /* "TYPE\0ENTITY\0MESSAGE" */
    const char *type = (const char *)data, *eid = NULL, *msg = NULL;
    const uint8_t *z1 = len ? memchr(data, 0, len) : NULL;
    const uint8_t *z2 = z1 ? memchr(z1 + 1, 0, len - (size_t)(z1 + 1 - data)) : NULL;
    size_t msg_len = 0;
    if (z2) {
        eid = (const char *)z1 + 1;
        msg = (const char *)z2 + 1;
        msg_len = len - (size_t)(z2 + 1 - data);
    }
    char why[256];
    int n;
    if (!z2 || !*type || !*eid || strlen(eid) > SHOAL_ENTITY_ID_MAX || !msg_len ||
        msg_len > MAX_MESSAGE) {
        n = snprintf(why, sizeof why,
                     "malformed request (TYPE, ENTITY of 1 to %d bytes, a "
                     "MESSAGE of 1 to %d bytes)",
                     SHOAL_ENTITY_ID_MAX, MAX_MESSAGE);
        answer(sys, to, kind, SHOAL_EINVAL, why, (size_t)n);
        return;
    }
    shoal_region_t *r = shoal_region_find(sharding, type);
    if (!r) {
        n = snprintf(why, sizeof why, "no entity type '%.64s' here (counter or account)", type);
        answer(sys, to, kind, SHOAL_ENOTYPE, why, (size_t)n);
        return;
    }
    int rc;
    if (kind == KIND_TELL) {
        rc = shoal_region_tell(r, eid, msg, msg_len);
        n = snprintf(why, sizeof why, "%s", rc == 0 ? "told" : shoal_strerror(rc));
        answer(sys, to, kind, rc, why, (size_t)n);
        return;
    }
    ask_t *a = malloc(sizeof *a);
    if (!a)
        abort();
    a->sys = sys;
    a->to = *to;
    rc = shoal_region_ask(r, eid, msg, msg_len, ASK_TIMEOUT_MS, ask_done, a);
    if (rc < 0) {
        free(a);
        n = snprintf(why, sizeof why, "%s", shoal_strerror(rc));
        answer(sys, to, kind, rc, why, (size_t)n);
    }
}

static void on_up(shoal_cluster_t *c, void *arg)
{
    (void)arg;
    shoal_system_t *sys = shoal_cluster_system(c);
    printf("counter-service: %s up at %s\n", shoal_node_id(shoal_system_self(sys)),
           shoal_system_endpoint(sys));
    fflush(stdout);
}

static int setup_on_node(shoal_system_t *sys, void *arg)
{
    if (shoal_system_register_request(sys, KIND_TELL, on_request, NULL) < 0 ||
        shoal_system_register_request(sys, KIND_ASK, on_request, NULL) < 0)
        return SHOAL_EINVAL;
    return shoal_cluster_on_up(arg, on_up, NULL) < 0 ? SHOAL_EINVAL : 0;
}

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested; /* SIGHUP: cli_reload */

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload_requested = 1;
    else
        stop_requested = 1;
}

static cli_node_access_t node_access; /* --allow-from, --insecure (cli.h) */

static int run_node(int argc, char **argv)
{
    const char *bind = NULL, *data = NULL, *http = NULL, *config_path = NULL;
    char awhy[400];
    const char *seeds[MAX_SEEDS];
    size_t n_seeds = 0;
    bool fast = false;
    long shards = 0; /* 0: the file's number-of-shards, else 100 */
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        bool takes_value = !strcmp(a, "--bind") || !strcmp(a, "--seed") ||
                           !strcmp(a, "--data-dir") || !strcmp(a, "--http") ||
                           !strcmp(a, "--shards") || !strcmp(a, "--config");
        if (takes_value && i + 1 >= argc) {
            fprintf(stderr, "counter-service: %s needs a value\n", a);
            return EXIT_USAGE;
        }
        if (!strcmp(a, "--bind")) {
            bind = argv[++i];
        } else if (!strcmp(a, "--config")) {
            config_path = argv[++i];
        } else if (!strcmp(a, "--data-dir")) {
            data = argv[++i];
        } else if (!strcmp(a, "--seed")) {
            if (n_seeds == MAX_SEEDS) {
                fprintf(stderr, "counter-service: at most %d seeds\n", MAX_SEEDS);
                return EXIT_USAGE;
            }
            seeds[n_seeds++] = argv[++i];
        } else if (!strcmp(a, "--http")) {
            static char http_buf[300];
            if (cli_http_address(argv[++i], http_buf, sizeof http_buf, awhy, sizeof awhy) != 0) {
                fprintf(stderr, "counter-service: --http %s\n", awhy);
                return EXIT_USAGE;
            }
            http = http_buf;
        } else if (!strcmp(a, "--shards")) {
            char *end;
            errno = 0;
            shards = strtol(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || shards < 1 || shards > 100000) {
                fprintf(stderr,
                        "counter-service: --shards takes a number from 1 to 100000, not "
                        "'%s'\n",
                        argv[i]);
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--fast")) {
            fast = true;
        } else {
            fprintf(stderr, "counter-service: unknown option '%s'\n", a);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!bind) {
        fprintf(stderr, "counter-service: node needs --bind tcp://HOST:PORT\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    /* HOST:PORT or tcp://HOST:PORT, a host name resolved (cli.h, NODE ADDRESSES) */
    static char bind_buf[300], seed_buf[MAX_SEEDS][300];
    if (cli_node_address(bind, bind_buf, sizeof bind_buf, awhy, sizeof awhy) != 0) {
        fprintf(stderr, "counter-service: --bind %s\n", awhy);
        return EXIT_USAGE;
    }
    bind = bind_buf;
    for (size_t i = 0; i < n_seeds; i++) {
        if (cli_node_address(seeds[i], seed_buf[i], sizeof seed_buf[i], awhy, sizeof awhy) != 0) {
            fprintf(stderr, "counter-service: --seed %s\n", awhy);
            return EXIT_USAGE;
        }
        seeds[i] = seed_buf[i];
    }
    /* Settings: defaults (or the fast ones), then --config FILE, then the flags. */
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    shoal_cluster_settings_t cs;
    if (fast)
        shoal_cluster_settings_fast(&cs);
    else
        shoal_cluster_settings_default(&cs);
    shoal_http_settings_t hs;
    shoal_http_settings_default(&hs);
    shoal_config_t *cfg = NULL;
    if (config_path &&
        !(cfg = cli_config_node("counter-service", config_path, &ss, &cs, NULL, &hs)))
        return EXIT_ANSWERED_ERROR;
    if (n_seeds == 0 && (cs.n_seed_nodes || cs.discovery)) {
        /* the file's seeds or discovery */
    } else {
        if (n_seeds == 0)
            seeds[n_seeds++] = bind; /* no seed: it forms a cluster of its own */
        cs.seed_nodes = seeds;
        cs.n_seed_nodes = n_seeds;
        cs.discovery = NULL;
    }

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);

    /* the store first: a corrupt or foreign environment stops us before we join anything */
    shoal_durable_t *durable = NULL;
    if (data) {
        shoal_durable_settings_t ds;
        shoal_durable_settings_default(&ds);
        ds.dir = data;
        int open_err;
        durable = shoal_durable_open(&ds, &open_err);
        if (!durable) {
            fprintf(stderr, "counter-service: cannot open the store: %s\n",
                    shoal_last_error_detail());
            shoal_config_destroy(&cfg);
            return EXIT_ANSWERED_ERROR;
        }
    }
    ss.endpoint = bind;
    cli_node_access_apply(&node_access, &ss);
    int rc = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &rc);
    if (!sys) {
        fprintf(stderr, "counter-service: cannot start a node at %s: %s\n", bind,
                shoal_strerror(rc));
        shoal_durable_close(&durable);
        shoal_config_destroy(&cfg);
        return EXIT_ANSWERED_ERROR;
    }
    /* host:port, what shoal-cluster move takes, for the entities' replies */
    snprintf(self_address, sizeof self_address, "%s", shoal_node_id(shoal_system_self(sys)));
    char *uid = strrchr(self_address, ':');
    if (uid && uid != strchr(self_address, ':'))
        *uid = 0;
    if (durable) { /* the kept membership (membership.h, KEPT MEMBERSHIP) */
        cs.durable_id = shoal_durable_node_id(durable);
        cs.store = shoal_durable_store(durable, SHOAL_CLUSTER_STORE_ROLE);
    }
    shoal_cluster_t *c = shoal_cluster_new(sys, &cs, &rc);
    sharding = c ? shoal_sharding_new(c, &rc) : NULL;

    /* sharding's replicator (coordinator state, entity states, remembered entities): durable
       keys "shard-*" in the store when there is one */
    shoal_replicator_settings_t rs;
    shoal_sharding_replicator_settings_default(&rs);
    if (durable)
        rs.store = shoal_durable_store(durable, "");
    shoal_sharding_settings_t s;
    if (fast)
        shoal_sharding_settings_fast(&s);
    else
        shoal_sharding_settings_default(&s);
    /* --config FILE's shoal/cluster/sharding (and its distributed-data) over the defaults */
    s.replicator_settings = &rs;
    if (cfg) {
        char cerr[512] = "";
        uint32_t default_shards = s.number_of_shards;
        s.number_of_shards = 0;
        if (shoal_config_sharding(cfg, &s, cerr, sizeof cerr) < 0) {
            cli_config_refused("counter-service", config_path, cerr);
            shoal_sharding_destroy(&sharding);
            shoal_cluster_destroy(&c);
            shoal_system_destroy(&sys);
            shoal_durable_close(&durable);
            shoal_config_destroy(&cfg);
            return EXIT_ANSWERED_ERROR;
        }
        if (!shards && s.number_of_shards)
            shards = s.number_of_shards;
        s.number_of_shards = default_shards;
        if (s.replicator_settings != &rs) { /* the file's, with the store kept */
            shoal_store_t *store = rs.store;
            rs = *s.replicator_settings;
            rs.store = store;
        }
    }
    if (sharding && cli_config_limits("counter-service", config_path, cfg, NULL, sharding) < 0) {
        shoal_sharding_destroy(&sharding);
        shoal_cluster_destroy(&c);
        shoal_system_destroy(&sys);
        shoal_durable_close(&durable);
        shoal_config_destroy(&cfg);
        return EXIT_ANSWERED_ERROR;
    }
    if (!shards)
        shards = 100;
    s.number_of_shards = (uint32_t)shards;
    s.entity_state = true;
    s.remember_entities = true;
    s.replicator_settings = &rs;
    bool regions = sharding != NULL;
    for (size_t k = 0; regions && k < N_TYPES; k++)
        regions = shoal_region_start(sharding, types[k], &s, &counter_fns, NULL, &rc) != NULL;
    if (regions)
        rc = shoal_system_call(sys, setup_on_node, c);
    shoal_metrics_t *endpoint = NULL;
    if (regions && rc == 0 && http) {
        endpoint = shoal_http_start_with(sys, http, &hs, &rc);
        if (endpoint && durable)
            shoal_durable_metrics(durable, endpoint);
    }
    /* POST /reload: SIGHUP as an admin request (cli.h, RELOAD AS AN ADMIN REQUEST) */
    static cli_reloader_t reloader;
    reloader = (cli_reloader_t){"counter-service", sys, endpoint, hs.tls_cert_file != NULL,
                                &reload_requested};
    cli_reload_route(&reloader);
    if (!regions || rc < 0 || (http && !endpoint)) {
        fprintf(stderr, "counter-service: cannot start %s: %s\n",
                !c                  ? "membership"
                : !sharding         ? "sharding"
                : !regions          ? "the entity types"
                : http && !endpoint ? "the HTTP endpoint"
                                    : "the client requests",
                shoal_strerror(rc));
        shoal_metrics_stop(&endpoint);
        shoal_sharding_destroy(&sharding);
        shoal_cluster_destroy(&c);
        shoal_system_destroy(&sys);
        shoal_durable_close(&durable);
        shoal_config_destroy(&cfg);
        return EXIT_ANSWERED_ERROR;
    }
    const char *self = shoal_node_id(shoal_system_self(sys));
    fprintf(stderr,
            "counter-service: %s listening at %s (types counter and account, %ld shards)%s%s\n",
            self, bind, shards, data ? ", data in " : "", data ? data : "");

    /* until a signal, or until the cluster stops this node (downed, removed, join failed) */
    while (!stop_requested && !shoal_cluster_terminated(c)) {
        if (reload_requested) {
            reload_requested = 0;
            cli_reload("counter-service", sys, endpoint);
        }
        sleep_ms(100);
    }
    int exit_code = 0;
    if (stop_requested) {
        fprintf(stderr, "counter-service: %s leaving the cluster\n", self);
        if (shoal_cluster_shutdown_wait(c, SHUTDOWN_WAIT_MS) != 0)
            fprintf(stderr,
                    "counter-service: %s: shutdown not finished after %d s, stopping "
                    "anyway\n",
                    self, SHUTDOWN_WAIT_MS / 1000);
    } else {
        fprintf(stderr, "counter-service: %s: the cluster stopped this node\n", self);
        exit_code = EXIT_ANSWERED_ERROR;
    }
    shoal_metrics_stop(&endpoint);
    shoal_sharding_destroy(&sharding);
    shoal_cluster_destroy(&c);
    shoal_system_destroy(&sys);
    shoal_durable_close(&durable);
    shoal_config_destroy(&cfg);
    return exit_code;
}

/* ---------------------------------------------------------------------------------------------
 * tell, ask
 */
static int run_client(const char *node, long timeout_ms, bool ask, const char *type,
                      const char *eid, int n_words, char **words)
{
    char req[3 * MAX_MESSAGE];
    size_t tl = strlen(type), el = strlen(eid), len = tl + 1 + el + 1;
    if (tl == 0 || tl > 200 || el == 0 || el > SHOAL_ENTITY_ID_MAX) {
        fprintf(stderr,
                "counter-service: TYPE and ENTITY must not be empty (ENTITY at most %d "
                "bytes)\n",
                SHOAL_ENTITY_ID_MAX);
        return EXIT_USAGE;
    }
    memcpy(req, type, tl + 1);
    memcpy(req + tl + 1, eid, el + 1);
    for (int i = 0; i < n_words; i++) {
        size_t wl = strlen(words[i]);
        if (len + wl + 1 > tl + el + 2 + MAX_MESSAGE) {
            fprintf(stderr, "counter-service: the message is longer than %d bytes\n", MAX_MESSAGE);
            return EXIT_USAGE;
        }
        if (i)
            req[len++] = ' ';
        memcpy(req + len, words[i], wl);
        len += wl;
    }
    int err = 0;
    shoal_client_t *cl = shoal_client_new(node, (uint32_t)timeout_ms, &err);
    if (!cl) {
        if (err == SHOAL_EINVAL) {
            fprintf(stderr, "counter-service: --node takes an endpoint tcp://host:port, not '%s'\n",
                    node);
            return EXIT_USAGE;
        }
        const char *why = shoal_last_error_detail();
        fprintf(stderr, "counter-service: cannot reach node at %s (%s%s%s)\n", node,
                shoal_strerror(err), *why ? ": " : "", why);
        return err == SHOAL_EREFUSED ? EXIT_ANSWERED_ERROR : EXIT_UNREACHABLE;
    }
    uint16_t kind = 0;
    shoal_buf_t reply = {0};
    int rc = shoal_client_request(cl, ask ? KIND_ASK : KIND_TELL, req, len, &kind, &reply,
                                  (uint32_t)timeout_ms + (ask ? ASK_TIMEOUT_MS : 0));
    shoal_client_destroy(&cl);
    int code = 0;
    if (rc == SHOAL_EKIND) {
        fprintf(stderr, "counter-service: %s is not a counter-service node\n", node);
        code = EXIT_ANSWERED_ERROR;
    } else if (rc < 0) {
        fprintf(stderr, "counter-service: cannot reach node at %s (%s)\n", node,
                shoal_strerror(rc));
        code = EXIT_UNREACHABLE;
    } else {
        const char *text = shoal_buf_cstr(&reply);
        char *end;
        long status = strtol(text, &end, 10);
        if (end == text || *end != ' ') {
            fprintf(stderr, "counter-service: %s: malformed answer\n", node);
            code = EXIT_ANSWERED_ERROR;
        } else if (status == SHOAL_ETIMEOUT) {
            fprintf(stderr, "counter-service: %s\n", end + 1);
            code = EXIT_UNREACHABLE;
        } else if (status < 0) {
            fprintf(stderr, "counter-service: %s\n", end + 1);
            code = EXIT_ANSWERED_ERROR;
        } else if (strncmp(end + 1, "error: ", 7) == 0) {
            fprintf(stderr, "counter-service: %s\n", end + 1);
            code = EXIT_ANSWERED_ERROR;
        } else {
            printf("%s\n", end + 1);
        }
    }
    shoal_buf_free(&reply);
    return code;
}

int main(int argc, char **argv)
{
    int cli = cli_help_or_version(&argc, argv, "counter-service", usage);
    if (cli >= 0)
        return cli;
    if (argc >= 2 && strcmp(argv[1], "node") == 0) {
        if (cli_node_access(&argc, argv, "counter-service", &node_access) != 0)
            return EXIT_USAGE;
        return run_node(argc, argv);
    }
    const char *node = "tcp://127.0.0.1:4001";
    long timeout_ms = 3000;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--node") == 0 && i + 1 < argc) {
            /* HOST:PORT or tcp://HOST:PORT, a host name resolved (cli.h, NODE ADDRESSES) */
            static char node_buf[300];
            char awhy[400];
            if (cli_node_address(argv[++i], node_buf, sizeof node_buf, awhy, sizeof awhy) != 0) {
                fprintf(stderr, "counter-service: --node %s\n", awhy);
                return EXIT_USAGE;
            }
            node = node_buf;
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            char *end;
            timeout_ms = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || timeout_ms <= 0 || timeout_ms > 3600000) {
                fprintf(stderr,
                        "counter-service: --timeout takes milliseconds (1..3600000), not "
                        "'%s'\n",
                        argv[i]);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "counter-service: %s '%s'\n",
                    strcmp(argv[i], "--node") == 0 || strcmp(argv[i], "--timeout") == 0
                        ? "missing value for"
                        : "unknown option",
                    argv[i]);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (i >= argc) {
        fprintf(stderr, "counter-service: no command (node, tell or ask)\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[i++];
    bool ask = strcmp(cmd, "ask") == 0;
    if (!ask && strcmp(cmd, "tell") != 0) {
        fprintf(stderr, "counter-service: unknown command '%s' (node, tell or ask)\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    if (argc - i < 3) {
        fprintf(stderr, "counter-service: %s takes TYPE ENTITY MESSAGE\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    return run_client(node, timeout_ms, ask, argv[i], argv[i + 1], argc - i - 2, argv + i + 2);
}
