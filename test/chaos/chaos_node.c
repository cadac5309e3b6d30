/*  chaos-node — one node of the chaos suite (tools/chaos.py), run as its own process.

      chaos-node --index I --bind tcp://HOST:PORT [--seed ENDPOINT]... [--discover NAME]
                 --data DIR --log FILE [--timing fast|generous|default] [--shards N]
                 [--fault "DIR CUT DROP DUP DELAY PEER|*"] [--http [HOST:]PORT]
                 [--protocol-version N] [--config FILE]
      chaos-node --help | --version

    Addresses: HOST:PORT or tcp://HOST:PORT (HOST an address or a name, resolved: the node id
    records the address; cli.h, NODE ADDRESSES). --config FILE: a ZPL settings file
    (docs/configuration.md; shoal/remote, shoal/cluster, shoal/cluster/distributed-data,
    shoal/cluster/sharding, shoal/management/http) over the --timing defaults and under the flags,
    which win over it; its seeds or discovery apply when no --seed or --discover is given. The node
    keeps its replicator's role, durable keys and store, and its type's entity state and
    remember-entities.

    A member of the cluster (joins through its seeds, or the contact points --discover finds by
    DNS, membership.h's SEED DISCOVERY; split-brain resolver keep-majority, the
    default), with the default replicator kept in an LMDB store in DIR (durable keys "chaos-*"
    and sharding's "shard-*"), and sharding with one entity type, "acct", with entity state and
    remember-entities on. It serves, as a node, the replicator's client requests (the workload's
    GCounter / ORSet / LWWMap operations and reads) and the requests of chaos.h: a message sent to
    an entity through this node's at-least-once producer (answered only once the entity confirmed
    it), an entity's state, fault injection on the transport, and a few counters.

    Every entity writes to the log FILE (O_APPEND, one write per line, so a SIGKILL loses nothing
    that was written; CLOCK_MONOTONIC is the same clock for every process of the machine):
      START  entity incarnation origin mono_ns
      PROC   entity incarnation msgid start_ns end_ns     a message processed (receive entered /
                                                          left, its save issued)
      SAVED  entity incarnation msgid status mono_ns      that save acknowledged (0) or failed
      DUP    entity incarnation msgid mono_ns             a message already in its state: skipped
      STOP   entity incarnation mono_ns
      NODE   index node-id pid mono_ns                    this process started
    An incarnation ("I.PID.N") is unique per entity start. The entity's state is the list of the
    message ids it processed (and its duplicate count), saved with shoal_entity_save before the
    message is confirmed, so a message delivered again is recognised and skipped.

    Exit: 0 after SIGTERM/SIGINT (graceful leave), 3 when the cluster stopped this node (downed,
    removed: it must restart as a new incarnation to join again), 1 when it cannot start.
*/
#include "chaos.h"
#include "cli.h"
#include "durable.h"
#include "sharding.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SEEDS            16
#define STATE_ASK_TIMEOUT_MS 5000

static volatile sig_atomic_t stop_requested;
static int log_fd = -1;
static int node_index;
static unsigned long incarnations;
static shoal_region_t *region;
static shoal_producer_t *producer;
static shoal_cluster_t *cluster;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One line per write(2): lines of concurrent processes (O_APPEND) never interleave. */
static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (write(log_fd, line, (size_t)n) != n)
        fprintf(stderr, "chaos-node: log write: %s\n", strerror(errno));
}

/* ---------------------------------------------------------------------------------------------
 * The entity: its state is "\nID\nID...\n" (the message ids processed) and a duplicate count.
 * Stored as "chaos1 DUPS N" + the ids.
 */
typedef struct {
    char inc[48];
    shoal_buf_t ids; /* always starts with '\n'; each id followed by '\n' */
    uint64_t n, dups;
} acct_t;

static void acct_encode(const acct_t *a, shoal_buf_t *out)
{
    shoal_buf_printf(out, "chaos1 %" PRIu64 " %" PRIu64, a->dups, a->n);
    shoal_buf_append(out, a->ids.data, a->ids.len);
}

static void *acct_start(shoal_entity_t *e, void *type_arg)
{
    (void)type_arg;
    acct_t *a = calloc(1, sizeof *a);
    if (!a)
        abort();
    snprintf(a->inc, sizeof a->inc, "%d.%ld.%lu", node_index, (long)getpid(), ++incarnations);
    shoal_buf_init(&a->ids);
    size_t len = 0;
    const char *s = shoal_entity_stored(e, &len);
    const char *nl = s ? memchr(s, '\n', len) : NULL;
    if (s && nl && sscanf(s, "chaos1 %" SCNu64 " %" SCNu64, &a->dups, &a->n) == 2)
        shoal_buf_append(&a->ids, nl, len - (size_t)(nl - s));
    else
        shoal_buf_append(&a->ids, "\n", 1);
    log_line("START %s %s %d %" PRIu64, shoal_entity_id(e), a->inc, shoal_entity_state_origin(e),
             mono_ns());
    return a;
}

typedef struct {
    char entity[SHOAL_ENTITY_ID_MAX + 1];
    char inc[48];
    char msgid[128];
} save_ctx_t;

static void acct_saved(shoal_entity_t *e, void *state, int status, void *arg)
{
    (void)e, (void)state;
    save_ctx_t *sc = arg;
    log_line("SAVED %s %s %s %d %" PRIu64, sc->entity, sc->inc, sc->msgid, status, mono_ns());
    free(sc);
}

static bool acct_has(const acct_t *a, const char *id, size_t len)
{
    char pat[136];
    if (len + 2 >= sizeof pat)
        return false;
    pat[0] = '\n';
    memcpy(pat + 1, id, len);
    pat[len + 1] = '\n';
    return memmem(a->ids.data, a->ids.len, pat, len + 2) != NULL;
}

static void acct_receive(shoal_entity_t *e, void *state, const void *msg, size_t len,
                         void *type_arg)
{
    (void)type_arg;
    acct_t *a = state;
    uint64_t t0 = mono_ns();
    const char *m = msg;
    if (len > 2 && len < 2 + 120 && !memcmp(m, "m:", 2)) {
        const char *id = m + 2;
        size_t idlen = len - 2;
        if (acct_has(a, id, idlen)) {
            a->dups++;
            log_line("DUP %s %s %.*s %" PRIu64, shoal_entity_id(e), a->inc, (int)idlen, id, t0);
            shoal_entity_reply(e, "dup", 3);
            return;
        }
        shoal_buf_append(&a->ids, id, idlen);
        shoal_buf_append(&a->ids, "\n", 1);
        a->n++;
        shoal_buf_t b;
        shoal_buf_init(&b);
        acct_encode(a, &b);
        save_ctx_t *sc = calloc(1, sizeof *sc);
        if (!sc)
            abort();
        snprintf(sc->entity, sizeof sc->entity, "%s", shoal_entity_id(e));
        snprintf(sc->inc, sizeof sc->inc, "%s", a->inc);
        snprintf(sc->msgid, sizeof sc->msgid, "%.*s", (int)idlen, id);
        /* the log line's fields are copied first: a save that fails at once restarts the entity
           inside the call, and `a` is gone when it returns */
        char ent[SHOAL_ENTITY_ID_MAX + 1], inc[48], mid[128];
        memcpy(ent, sc->entity, sizeof ent);
        memcpy(inc, sc->inc, sizeof inc);
        memcpy(mid, sc->msgid, sizeof mid);
        /* the reply rides with the confirmation, which waits for the save */
        shoal_entity_reply(e, "ok", 2);
        int rc = shoal_entity_save(e, b.data, b.len, acct_saved, sc);
        shoal_buf_free(&b);
        if (rc != 0) {
            log_line("SAVED %s %s %s %d %" PRIu64, ent, inc, mid, rc, mono_ns());
            free(sc);
        }
        log_line("PROC %s %s %s %" PRIu64 " %" PRIu64, ent, inc, mid, t0, mono_ns());
    } else if (len == 5 && !memcmp(m, "state", 5)) {
        shoal_buf_t b;
        shoal_buf_init(&b);
        shoal_buf_printf(&b, "ok %" PRIu64 " %" PRIu64, a->dups, a->n);
        shoal_buf_append(&b, a->ids.data, a->ids.len);
        shoal_entity_reply(e, b.data, b.len);
        shoal_buf_free(&b);
    } else {
        shoal_entity_reply(e, "err unknown message", 19);
    }
}

static void acct_stop(shoal_entity_t *e, void *state, void *type_arg)
{
    (void)type_arg;
    acct_t *a = state;
    log_line("STOP %s %s %" PRIu64, shoal_entity_id(e), a->inc, mono_ns());
    shoal_buf_free(&a->ids);
    free(a);
}

static const shoal_entity_fns_t acct_fns = {acct_start, acct_receive, acct_stop, NULL};

/* ---------------------------------------------------------------------------------------------
 * Requests
 */
static void reply_text(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void reply_text(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                       const char *fmt, ...)
{
    char b[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    shoal_system_reply(sys, to, kind, b,
                       n < 0                  ? 0
                       : (size_t)n < sizeof b ? (size_t)n
                                              : sizeof b - 1);
}

/* Sends waiting for their entity's confirmation (node thread only). */
typedef struct pending {
    struct pending *next;
    char entity[SHOAL_ENTITY_ID_MAX + 1];
    uint64_t seq;
    shoal_reply_to_t to;
} pending_t;
static pending_t *pending;
static shoal_system_t *node_sys;

static void delivered(shoal_producer_t *p, const char *entity_id, uint64_t seq, int status,
                      const void *reply, size_t len, void *arg)
{
    (void)p, (void)arg;
    for (pending_t **pp = &pending; *pp; pp = &(*pp)->next) {
        pending_t *q = *pp;
        if (q->seq != seq || strcmp(q->entity, entity_id) != 0)
            continue;
        *pp = q->next;
        if (status == 0)
            reply_text(node_sys, &q->to, CHAOS_KIND_SEND, "ok %.*s", (int)(len < 64 ? len : 64),
                       (const char *)reply);
        else
            reply_text(node_sys, &q->to, CHAOS_KIND_SEND, "err %s", shoal_strerror(status));
        free(q);
        return;
    }
}

static void on_send(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                    const uint8_t *data, size_t len, void *arg)
{
    (void)arg;
    const char *nl = memchr(data, '\n', len);
    size_t elen = nl ? (size_t)(nl - (const char *)data) : 0;
    size_t mlen = nl ? len - elen - 1 : 0;
    if (!nl || elen == 0 || elen > SHOAL_ENTITY_ID_MAX || mlen == 0 || mlen > 120) {
        reply_text(sys, to, kind, "err malformed");
        return;
    }
    pending_t *q = calloc(1, sizeof *q);
    if (!q)
        abort();
    memcpy(q->entity, data, elen);
    char msg[128];
    memcpy(msg, "m:", 2);
    memcpy(msg + 2, nl + 1, mlen);
    q->to = *to;
    int rc = shoal_producer_send(producer, q->entity, msg, mlen + 2, &q->seq);
    if (rc != 0) {
        reply_text(sys, to, kind, "err %s", shoal_strerror(rc));
        free(q);
        return;
    }
    q->next = pending;
    pending = q;
}

static void state_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    shoal_reply_to_t *to = arg;
    if (status == 0)
        shoal_system_reply(node_sys, to, CHAOS_KIND_STATE, reply, len);
    else
        reply_text(node_sys, to, CHAOS_KIND_STATE, "err %s", shoal_strerror(status));
    free(to);
}

static void on_state(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                     const uint8_t *data, size_t len, void *arg)
{
    (void)arg;
    char entity[SHOAL_ENTITY_ID_MAX + 1];
    if (len == 0 || len > SHOAL_ENTITY_ID_MAX || memchr(data, 0, len)) {
        reply_text(sys, to, kind, "err malformed");
        return;
    }
    memcpy(entity, data, len);
    entity[len] = 0;
    shoal_reply_to_t *copy = malloc(sizeof *copy);
    if (!copy)
        abort();
    *copy = *to;
    int rc = shoal_region_ask(region, entity, "state", 5, STATE_ASK_TIMEOUT_MS, state_done, copy);
    if (rc != 0) {
        reply_text(sys, to, kind, "err %s", shoal_strerror(rc));
        free(copy);
    }
}

static int parse_fault(const char *text, shoal_fault_t *f, char *peer, size_t peerlen)
{
    char dir[8], p[256];
    int cut = 0;
    unsigned delay = 0;
    memset(f, 0, sizeof *f);
    if (sscanf(text, "%7s %d %lf %lf %u %255s", dir, &cut, &f->drop, &f->duplicate, &delay, p) != 6)
        return -1;
    if (!strcmp(dir, "in"))
        f->dir = SHOAL_FAULT_IN;
    else if (!strcmp(dir, "out"))
        f->dir = SHOAL_FAULT_OUT;
    else if (!strcmp(dir, "both"))
        f->dir = SHOAL_FAULT_BOTH;
    else
        return -1;
    if (f->drop < 0 || f->drop > 1 || f->duplicate < 0 || f->duplicate > 1)
        return -1;
    f->cut = cut != 0;
    f->delay_ms = delay;
    snprintf(peer, peerlen, "%s", p);
    return 0;
}

static void on_fault(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                     const uint8_t *data, size_t len, void *arg)
{
    (void)arg;
    char text[320];
    if (len >= sizeof text) {
        reply_text(sys, to, kind, "err malformed");
        return;
    }
    memcpy(text, data, len);
    text[len] = 0;
    int rc;
    if (!strcmp(text, "heal")) {
        rc = shoal_system_heal(sys);
    } else {
        shoal_fault_t f;
        char peer[256];
        if (parse_fault(text, &f, peer, sizeof peer) != 0) {
            reply_text(sys, to, kind, "err malformed fault '%s'", text);
            return;
        }
        rc = shoal_system_fault(sys, strcmp(peer, "*") ? peer : NULL, &f);
    }
    if (rc == 0)
        reply_text(sys, to, kind, "ok");
    else
        reply_text(sys, to, kind, "err %s", shoal_strerror(rc));
}

static void on_info(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                    const uint8_t *data, size_t len, void *arg)
{
    (void)data, (void)len, (void)arg;
    shoal_region_stats_t st;
    memset(&st, 0, sizeof st);
    shoal_region_stats(region, &st);
    shoal_member_status_t s = shoal_cluster_self_status(cluster);
    reply_text(sys, to, kind,
               "ok\nnode %s\nstatus %s\nmay_act %d\nentities %" PRIu64 "\nshards %" PRIu64
               "\nreliable_processed %" PRIu64 "\nreliable_duplicates %" PRIu64
               "\nstate_save_failures %" PRIu64 "\nstate_stale_refused %" PRIu64
               "\nentities_recovered %" PRIu64 "\nproducer_pending %zu\n",
               shoal_node_id(shoal_system_self(sys)), s ? shoal_member_status_name(s) : "none",
               shoal_cluster_may_act(cluster), st.entities, st.shards, st.reliable_processed,
               st.reliable_duplicates, st.state_save_failures, st.state_stale_refused,
               st.entities_recovered, shoal_producer_pending(producer));
}

static void on_up(shoal_cluster_t *c, void *arg)
{
    (void)arg;
    shoal_system_t *sys = shoal_cluster_system(c);
    printf("chaos-node %d: %s up\n", node_index, shoal_node_id(shoal_system_self(sys)));
    fflush(stdout);
}

static int setup_on_node(shoal_system_t *sys, void *arg)
{
    (void)arg;
    node_sys = sys;
    if (shoal_system_register_request(sys, CHAOS_KIND_SEND, on_send, NULL) < 0 ||
        shoal_system_register_request(sys, CHAOS_KIND_STATE, on_state, NULL) < 0 ||
        shoal_system_register_request(sys, CHAOS_KIND_FAULT, on_fault, NULL) < 0 ||
        shoal_system_register_request(sys, CHAOS_KIND_INFO, on_info, NULL) < 0)
        return SHOAL_EINVAL;
    return shoal_cluster_on_up(cluster, on_up, NULL) < 0 ? SHOAL_EINVAL : 0;
}

static int apply_fault(shoal_system_t *sys, void *arg)
{
    shoal_fault_t f;
    char peer[256];
    if (parse_fault(arg, &f, peer, sizeof peer) != 0)
        return SHOAL_EINVAL;
    return shoal_system_fault(sys, strcmp(peer, "*") ? peer : NULL, &f);
}

/* ---------------------------------------------------------------------------------------------
 * Settings. "fast": the tests' timings (failure detection ~1-2 s, stable-after 2 s), for the
 * release build in namespaces. "generous": slower detection and longer margins, so a sanitized
 * build on a busy 2-core machine is not taken for dead (the smoke inside scons check).
 * "default": Akka's (and Shoal's) default timings untouched (heartbeat 1 s, acceptable pause 3 s,
 * stable-after 20 s, the fence at pause + stable-after / 2), the way a deployment runs; the
 * nemesis stretches its faults to match (tools/chaos.py).
 */
typedef enum { TIMING_FAST, TIMING_GENEROUS, TIMING_DEFAULT } timing_t;

static void cluster_timing(shoal_cluster_settings_t *cs, timing_t t)
{
    if (t == TIMING_DEFAULT) {
        shoal_cluster_settings_default(cs);
        return;
    }
    shoal_cluster_settings_fast(cs);
    if (t == TIMING_GENEROUS) {
        cs->heartbeat_interval_ms = 500;
        cs->acceptable_heartbeat_pause_ms = 6000;
        cs->expected_response_after_ms = 2000;
        cs->stable_after_ms = 6000;
        cs->seed_node_timeout_ms = 3000;
        cs->retry_unsuccessful_join_after_ms = 2000;
        cs->gossip_time_to_live_ms = 6000;
    } else {
        cs->acceptable_heartbeat_pause_ms = 2000;
        cs->stable_after_ms = 3000;
    }
}

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: chaos-node --index I --bind tcp://HOST:PORT [--seed ENDPOINT]... "
               "[--discover dns:HOST:PORT|srv:NAME] --data DIR --log FILE "
               "[--timing fast|generous|default] [--shards N] "
               "[--fault \"DIR CUT DROP DUP DELAY PEER|*\"] [--http [HOST:]PORT] "
               "[--protocol-version N] [--config FILE] [--allow-from CIDR]... [--insecure]\n"
               "  addresses: HOST:PORT or tcp://HOST:PORT; --config FILE: settings under the "
               "flags\n"
               "       chaos-node --help | --version\n" CLI_NODE_ACCESS_USAGE);
}

int main(int argc, char **argv)
{
    const char *bind = NULL, *data = NULL, *logpath = NULL, *timing = "fast", *fault = NULL;
    const char *discover = NULL, *http = NULL, *config_path = NULL;
    const char *seeds[MAX_SEEDS];
    size_t n_seeds = 0;
    unsigned shards = 0;       /* 0: the file's number-of-shards, else 20 */
    unsigned protocol_pin = 0; /* shoal/cluster/protocol-version: 0 = as high as all speak */
    int cli = cli_help_or_version(&argc, argv, "chaos-node", usage);
    if (cli >= 0)
        return cli;
    cli_node_access_t access;
    if (cli_node_access(&argc, argv, "chaos-node", &access) != 0)
        return cli_usage_error(usage);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            return cli_refuse(usage, "chaos-node: '%s' without a value (every option takes one)",
                              a);
        const char *v = argv[++i];
        if (!strcmp(a, "--index"))
            node_index = atoi(v);
        else if (!strcmp(a, "--bind"))
            bind = v;
        else if (!strcmp(a, "--seed") && n_seeds < MAX_SEEDS)
            seeds[n_seeds++] = v;
        else if (!strcmp(a, "--discover"))
            discover = v;
        else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--log"))
            logpath = v;
        else if (!strcmp(a, "--timing"))
            timing = v;
        else if (!strcmp(a, "--shards")) {
            shards = (unsigned)atoi(v);
            if (shards == 0)
                return cli_refuse(usage, "chaos-node: --shards must be at least 1");
        } else if (!strcmp(a, "--config"))
            config_path = v;
        else if (!strcmp(a, "--fault"))
            fault = v;
        else if (!strcmp(a, "--protocol-version"))
            protocol_pin = (unsigned)atoi(v);
        else if (!strcmp(a, "--http"))
            http = v;
        else
            return cli_refuse(usage, "chaos-node: unknown option or bad value: '%s %s'", a, v);
    }
    if (!bind || !data || !logpath)
        return cli_refuse(usage, "chaos-node: --bind, --data and --log are required");
    /* HOST:PORT or tcp://HOST:PORT, a host name resolved (cli.h, NODE ADDRESSES) */
    static char bind_buf[300], seed_buf[MAX_SEEDS][300], http_buf[300];
    char awhy[400];
    if (cli_node_address(bind, bind_buf, sizeof bind_buf, awhy, sizeof awhy) != 0)
        return cli_refuse(usage, "chaos-node: --bind %s", awhy);
    bind = bind_buf;
    for (size_t k = 0; k < n_seeds; k++) {
        if (cli_node_address(seeds[k], seed_buf[k], sizeof seed_buf[k], awhy, sizeof awhy) != 0)
            return cli_refuse(usage, "chaos-node: --seed %s", awhy);
        seeds[k] = seed_buf[k];
    }
    if (http && cli_http_address(http, http_buf, sizeof http_buf, awhy, sizeof awhy) != 0)
        return cli_refuse(usage, "chaos-node: --http %s", awhy);
    if (http)
        http = http_buf;
    if (strcmp(timing, "fast") && strcmp(timing, "generous") && strcmp(timing, "default"))
        return cli_refuse(usage, "chaos-node: --timing is fast, generous or default, not '%s'",
                          timing);
    timing_t tm = !strcmp(timing, "generous")  ? TIMING_GENEROUS
                  : !strcmp(timing, "default") ? TIMING_DEFAULT
                                               : TIMING_FAST;
    /* Settings: the timing's, then --config FILE, then the flags. */
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    shoal_cluster_settings_t cs;
    cluster_timing(&cs, tm);
    shoal_http_settings_t hs;
    shoal_http_settings_default(&hs);
    shoal_sharding_settings_t s;
    if (tm == TIMING_DEFAULT)
        shoal_sharding_settings_default(&s);
    else
        shoal_sharding_settings_fast(&s);
    s.passivation.idle_timeout_ms = 0;
    if (tm == TIMING_GENEROUS) {
        s.state_write_timeout_ms = 4000;
        s.handoff_timeout_ms = 10000;
        s.shard_start_timeout_ms = 5000;
    } else if (tm == TIMING_FAST) {
        s.state_write_timeout_ms = 3000;
    }
    shoal_config_t *cfg = NULL; /* lives as long as the process: the settings point into it */
    if (config_path) {
        char cerr[512] = "";
        uint32_t default_shards = s.number_of_shards;
        s.number_of_shards = 0;
        if (!(cfg = cli_config_node("chaos-node", config_path, &ss, &cs, &rs, &hs)))
            return 1;
        if (shoal_config_sharding(cfg, &s, cerr, sizeof cerr) < 0) {
            cli_config_refused("chaos-node", config_path, cerr);
            return 1;
        }
        if (!shards && s.number_of_shards)
            shards = s.number_of_shards; /* the file's */
        s.number_of_shards = default_shards;
    }
    if (!shards)
        shards = 20;
    if (!n_seeds && !discover && (cs.n_seed_nodes || cs.discovery)) {
        /* the file's seeds or discovery */
    } else if (discover) {
        char why[300];
        if (n_seeds ||
            shoal_discovery_check(discover, getenv("SHOAL_DNS_RESOLVER"), why, sizeof why) < 0) {
            fprintf(stderr, "chaos-node: --discover: %s\n",
                    n_seeds ? "give no --seed with it" : why);
            return 2;
        }
    } else if (n_seeds == 0)
        seeds[n_seeds++] = bind;
    if (n_seeds || discover) { /* the flags' seeds or discovery replace the file's */
        cs.seed_nodes = seeds;
        cs.n_seed_nodes = n_seeds;
        cs.discovery = discover;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    log_fd = open(logpath, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (log_fd < 0) {
        fprintf(stderr, "chaos-node: cannot open %s: %s\n", logpath, strerror(errno));
        return 1;
    }

    /* The store first: a refused store stops us before we join anything. Immediate commits
       without fsync: a SIGKILL loses nothing the kernel was given (the suite kills processes,
       not the machine), and the node thread does not wait for the disk. */
    shoal_durable_settings_t ds;
    shoal_durable_settings_default(&ds);
    ds.dir = data;
    ds.nosync = true;
    char err[512] = "";
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    shoal_durable_t *durable = shoal_durable_open(&ds, &open_err);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (!durable) {
        fprintf(stderr, "chaos-node: cannot open the store: %s\n", err);
        return 1;
    }
    ss.endpoint = bind;
    cli_node_access_apply(&access, &ss);
    int rc = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &rc);
    if (!sys) {
        fprintf(stderr, "chaos-node: cannot start a node at %s: %s\n", bind, shoal_strerror(rc));
        shoal_durable_close(&durable);
        return 1;
    }
    log_line("NODE %d %s %ld %" PRIu64, node_index, shoal_node_id(shoal_system_self(sys)),
             (long)getpid(), mono_ns());
    if (fault && (rc = shoal_system_call(sys, apply_fault, (void *)fault)) != 0) {
        fprintf(stderr, "chaos-node: --fault '%s': %s\n", fault, shoal_strerror(rc));
        shoal_system_destroy(&sys);
        shoal_durable_close(&durable);
        return 2;
    }
    static const char *const durable_keys[] = {"chaos-*", "shard-*"};
    rs.role = "";
    rs.durable_keys = durable_keys;
    rs.n_durable_keys = 2;
    rs.store = shoal_durable_store(durable, "");
    cs.durable_id = shoal_durable_node_id(durable);
    cs.store = shoal_durable_store(durable, SHOAL_CLUSTER_STORE_ROLE);

    shoal_replicator_t *rep = rs.store ? shoal_replicator_new(sys, &rs, &rc) : NULL;
    uint64_t file_pin = 0;
    if (!protocol_pin && cfg &&
        shoal_config_uint(cfg, "shoal/cluster/protocol-version", &file_pin, NULL, 0) > 0)
        protocol_pin = (unsigned)file_pin;
    shoal_system_pin_protocol(sys, protocol_pin);
    cluster = rep ? shoal_cluster_new(sys, &cs, &rc) : NULL;
    shoal_sharding_t *sh = NULL;
    if (cluster && shoal_cluster_follow(cluster, rep) == 0)
        sh = shoal_sharding_new(cluster, &rc);
    if (sh && cli_config_limits("chaos-node", config_path, cfg, rep, sh) < 0)
        return 1;
    if (sh) {
        s.number_of_shards = shards;
        s.entity_state = true;
        s.remember_entities = true;
        s.replicator = rep;
        region = shoal_region_start(sh, CHAOS_TYPE, &s, &acct_fns, NULL, &rc);
    }
    if (region) {
        char pid[SHOAL_PRODUCER_ID_MAX + 1];
        /* a fresh producer id per process: its numbers start again at 1 */
        snprintf(pid, sizeof pid, "n%d-%s", node_index, shoal_node_id(shoal_system_self(sys)));
        shoal_producer_settings_t ps;
        shoal_producer_settings_default(&ps);
        ps.resend_ms = 500;
        producer = shoal_producer_new(region, pid, &ps, delivered, NULL, &rc);
    }
    if (!producer || (rc = shoal_system_call(sys, setup_on_node, NULL)) != 0) {
        fprintf(stderr, "chaos-node: cannot start: %s\n", shoal_strerror(rc));
        _exit(1); /* half-built: nothing to keep, the store is consistent at every commit */
    }
    shoal_metrics_t *endpoint = http ? shoal_http_start_with(sys, http, &hs, &rc) : NULL;
    if (http && !endpoint) {
        fprintf(stderr, "chaos-node: cannot serve HTTP on %s: %s\n", http, shoal_strerror(rc));
        _exit(1);
    }
    if (endpoint)
        shoal_durable_metrics(durable, endpoint);
    fprintf(stderr, "chaos-node %d: %s at %s, data in %s\n", node_index,
            shoal_node_id(shoal_system_self(sys)), bind, data);

    while (!stop_requested && !shoal_cluster_terminated(cluster))
        sleep_ms(50);
    int exit_code = 0;
    if (stop_requested) {
        shoal_cluster_shutdown(cluster);
        for (int waited = 0; !shoal_cluster_terminated(cluster) && waited < 15000; waited += 50)
            sleep_ms(50);
    } else {
        fprintf(stderr, "chaos-node %d: the cluster stopped this node (downed or removed)\n",
                node_index);
        exit_code = 3;
    }
    shoal_metrics_stop(&endpoint);
    shoal_producer_destroy(&producer);
    shoal_sharding_destroy(&sh);
    shoal_cluster_destroy(&cluster);
    shoal_replicator_destroy(&rep);
    shoal_system_destroy(&sys);
    shoal_durable_close(&durable);
    shoal_config_destroy(&cfg);
    while (pending) {
        pending_t *q = pending;
        pending = q->next;
        free(q);
    }
    close(log_fd);
    return exit_code;
}
