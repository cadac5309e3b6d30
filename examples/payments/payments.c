/*  payments — payment flows as sharded entities that survive a node being killed (the seeds'
    payment-flow resiliency article).

      payments [--payments N] [--nodes N] [--rate R] [--base-port P] [--short] [--bench]
               [--keep]                             the whole run (the driver)
      payments --node --bind EP [--seed EP] --data DIR [--http [HOST:]PORT] [--config FILE]
                                                    one payment node (the driver starts them;
                                                    --http serves its management endpoint,
                                                    docs/operations.md)
    EP: HOST:PORT or tcp://HOST:PORT (HOST an address or a name, resolved: the node id records
    the address; cli.h, NODE ADDRESSES). --config FILE: a ZPL settings file (docs/configuration.md;
    the sections shoal/remote, shoal/cluster, shoal/cluster/distributed-data,
    shoal/cluster/sharding and shoal/management/http) read before the flags, which win over it.
    The node keeps its role "pay" (the file's roles are added to it), its entity types' shard
    counts, and its replicator's role, durable keys and store; --seed replaces the file's seeds
    or discovery, and without --seed the file must name them.
      payments --help | --version

    THE FLOW of a payment is an entity of type "payment" (entity id = payment id) whose every step
    is stored as its entity state in the role's replicator, durable in LMDB on each node:
      received -> validated -> sanctions-checked -> settling -> settled   (or failed)
    On "pay:<amount>" it stores "received", then validates and stores "validated", asks the
    sanctions service (entity type "sanctions", stateless) and schedules two reminders (durable
    timers): "retry" every second (asks again, or re-sends the settlement, after a crash lost a
    message) and "deadline" (a payment whose sanctions answer has not come by then fails). On
    "sanctions-ok" it stores "checked", then "settling", and sends the settlement to the ledger
    with at-least-once delivery; the ledger (type "ledger", one entity per account group) records
    each payment id once (its set of settled ids is its state) and answers "settled-ack", upon
    which the flow stores "settled". Requests reach the flows from the driver's node through
    sharding with at-least-once delivery (a producer), and sanctions answers from whichever node
    runs the sanctions entity: nobody addresses a node.

    THE RUN: the driver is a member of the cluster itself (role "client": it hosts nothing, its
    regions are proxies) and starts N node processes (role "pay", 3 by default). It first touches
    every ledger, every sanctions checker and one id of every payment shard, so that all three
    types are placed while every node is up, and picks the node to kill: the one hosting the most
    ledger shards. Then it sends the payments, R a second (400; --short: 400 payments at 200 a
    second; --bench: as fast as the producer takes them); one in 25 is a payment the sanctions
    service never answers (its deadline must fail it). Once half of the requests are confirmed,
    some of that node's own among them (up to 40, or half of its flows), it kills that node with
   SIGKILL: the split-brain resolver (keep-majority) downs it, its shards move to the survivors,
   which read the flows' (and ledgers') stored states and go on. A thread keeps asking 40 of its
   flows (confirmed before the kill) for their status: the first answer of the last one is how long
   the killed node's flows were unavailable, and each must answer with a stored step. At the end it
   checks: every payment reached a final state (none stuck); every settled payment is in exactly one
   ledger exactly once, no other payment is in any, and the totals are right; the payments that
   failed are exactly those the sanctions service ignored. Exit 0 only then. --bench adds a BENCH
   line: payments settled per second (first request to last settlement, the kill included) beside
   stateless ask round trips through the same cluster, measured before the payments.

    PORTS: the driver's node listens on 127.0.0.1:P, payment node i (1..N) on P + i; each node's
    heartbeat takes an ephemeral port besides. --base-port gives P (a firewall, a second run
    beside the first); without it P is derived from the process id (20000..30999), so runs
    started together rarely collide and a collision fails the start with a clear message.
*/
#include "cli.h"
#include "durable.h"
#include "sharding.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROLE          "pay"
#define LEDGERS       8
#define PAY_SHARDS    30
#define BLOCKED_EVERY 25 /* payment k with k % 25 == 7: the sanctions service never answers */
#define DEADLINE_MS   15000
#define RETRY_MS      1000

static volatile sig_atomic_t stop;
static shoal_region_t *payments_r, *ledger_r, *sanctions_r;
static shoal_producer_t *settle_p; /* this node's producer of settlements */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool is_blocked(const char *pid)
{
    const char *d = strrchr(pid, '-');
    return d && atol(d + 1) % BLOCKED_EVERY == 7;
}

static void ledger_of(const char *pid, char *out, size_t cap)
{
    unsigned h = 0;
    for (const char *p = pid; *p; p++)
        h = h * 31u + (unsigned char)*p;
    snprintf(out, cap, "ledger-%u", h % LEDGERS);
}

/* ---------------------------------------------------------------------------------------------
 * The payment flow
 */
typedef enum {
    P_NEW,
    P_RECEIVED,
    P_VALIDATED,
    P_CHECKED,
    P_SETTLING,
    P_SETTLED,
    P_FAILED
} pstate_t;
static const char *const pnames[] = {"new",      "received", "validated", "checked",
                                     "settling", "settled",  "failed"};

typedef struct {
    pstate_t st;
    long amount;
    char why[32];
} flow_t;

static void flow_text(const flow_t *f, char *out, size_t cap, size_t *len)
{
    *len =
        (size_t)snprintf(out, cap, "%s %ld %s", pnames[f->st], f->amount, f->why[0] ? f->why : "-");
}

static void *flow_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    flow_t *f = calloc(1, sizeof *f);
    size_t len = 0;
    const char *s = shoal_entity_stored(e, &len);
    if (s && len < 96) {
        char b[96], name[16];
        memcpy(b, s, len);
        b[len] = 0;
        if (sscanf(b, "%15s %ld %31s", name, &f->amount, f->why) == 3) {
            for (int i = 0; i < 7; i++)
                if (!strcmp(name, pnames[i]))
                    f->st = (pstate_t)i;
            if (!strcmp(f->why, "-"))
                f->why[0] = 0;
        }
    }
    return f;
}

static void flow_save(shoal_entity_t *e, flow_t *f)
{
    char b[96];
    size_t len;
    flow_text(f, b, sizeof b, &len);
    shoal_entity_save(e, b, len, NULL, NULL);
}

static void ask_sanctions(shoal_entity_t *e)
{
    char m[300], sid[32];
    snprintf(m, sizeof m, "check:%s", shoal_entity_id(e));
    ledger_of(shoal_entity_id(e), sid, sizeof sid); /* any spread will do: 8 checkers */
    memcpy(sid, "checker", 7);
    shoal_region_tell(sanctions_r, sid, m, strlen(m));
}

static void send_settlement(shoal_entity_t *e, flow_t *f)
{
    char m[300], led[32];
    snprintf(m, sizeof m, "settle:%s:%ld", shoal_entity_id(e), f->amount);
    ledger_of(shoal_entity_id(e), led, sizeof led);
    /* a full window: the retry reminder sends it again */
    shoal_producer_send(settle_p, led, m, strlen(m), NULL);
}

static void flow_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)arg;
    flow_t *f = state;
    char m[128];
    size_t n = len < sizeof m - 1 ? len : sizeof m - 1;
    memcpy(m, msg, n);
    m[n] = 0;
    const char *rem = shoal_entity_reminder(e);
    if (rem) {
        if (!strcmp(rem, "deadline") && (f->st == P_VALIDATED || f->st == P_RECEIVED)) {
            f->st = P_FAILED;
            snprintf(f->why, sizeof f->why, "sanctions-timeout");
            flow_save(e, f);
            shoal_entity_cancel_reminder(e, "retry");
        } else if (!strcmp(rem, "retry") && f->st != P_SETTLED && f->st != P_FAILED) {
            if (f->st == P_VALIDATED)
                ask_sanctions(e);
            else if (f->st == P_SETTLING || f->st == P_CHECKED)
                send_settlement(e, f);
            shoal_entity_remind(e, "retry", RETRY_MS, "retry", 5, NULL, NULL);
        }
        return;
    }
    long amount;
    if (sscanf(m, "pay:%ld", &amount) == 1) {
        if (f->st != P_NEW) {
            shoal_entity_reply(e, "duplicate", 9); /* the same payment id twice: once only */
            return;
        }
        f->amount = amount;
        f->st = P_RECEIVED;
        flow_save(e, f); /* the producer's confirmation rides on the first save */
        if (amount <= 0 || amount > 1000000) {
            f->st = P_FAILED;
            snprintf(f->why, sizeof f->why, "invalid-amount");
        } else {
            f->st = P_VALIDATED;
            ask_sanctions(e);
            shoal_entity_remind(e, "deadline", DEADLINE_MS, "deadline", 8, NULL, NULL);
            shoal_entity_remind(e, "retry", RETRY_MS, "retry", 5, NULL, NULL);
        }
        flow_save(e, f);
        shoal_entity_reply(e, "accepted", 8);
    } else if (!strcmp(m, "sanctions-ok")) {
        if (f->st != P_VALIDATED)
            return; /* a repeat, or too late: the deadline failed it */
        f->st = P_CHECKED;
        flow_save(e, f);
        shoal_entity_cancel_reminder(e, "deadline");
        f->st = P_SETTLING;
        flow_save(e, f);
        send_settlement(e, f);
    } else if (!strcmp(m, "settled-ack")) {
        if (f->st != P_SETTLING && f->st != P_CHECKED)
            return;
        f->st = P_SETTLED;
        flow_save(e, f);
        shoal_entity_cancel_reminder(e, "retry");
    } else if (!strcmp(m, "status")) {
        char b[96];
        size_t l;
        flow_text(f, b, sizeof b, &l);
        shoal_entity_reply(e, b, l);
    }
}

static void free_state(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)arg;
    free(state);
}

/* ---------------------------------------------------------------------------------------------
 * The sanctions service: answers every payment but the blocked ones
 */
static void *nothing_start(shoal_entity_t *e, void *arg)
{
    (void)e;
    (void)arg;
    return NULL;
}

static void sanctions_receive(shoal_entity_t *e, void *state, const void *msg, size_t len,
                              void *arg)
{
    (void)state;
    (void)arg;
    if (len == 4 && !memcmp(msg, "ping", 4)) {
        shoal_entity_reply(e, "pong", 4); /* the driver's baseline: a round trip, no state */
        return;
    }
    char pid[256];
    if (len < 7 || len - 6 >= sizeof pid || memcmp(msg, "check:", 6) != 0)
        return;
    memcpy(pid, (const char *)msg + 6, len - 6);
    pid[len - 6] = 0;
    if (!is_blocked(pid))
        shoal_region_tell(payments_r, pid, "sanctions-ok", 12);
}

/* ---------------------------------------------------------------------------------------------
 * The ledger: each payment id once; its state is "<count> <sum> <dups> <id> <id> ..."
 */
typedef struct {
    long count, sum, dups;
    shoal_buf_t ids; /* " id id id " */
} ledger_t;

static void *ledger_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    ledger_t *l = calloc(1, sizeof *l);
    size_t len = 0;
    const char *s = shoal_entity_stored(e, &len);
    if (s && len) {
        char *b = malloc(len + 1);
        memcpy(b, s, len);
        b[len] = 0;
        int off = 0;
        if (sscanf(b, "%ld %ld %ld%n", &l->count, &l->sum, &l->dups, &off) == 3)
            shoal_buf_printf(&l->ids, "%s ", b + off);
        free(b);
    }
    if (!l->ids.len)
        shoal_buf_append(&l->ids, " ", 1);
    return l;
}

static void ledger_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)arg;
    ledger_t *l = state;
    char m[300];
    size_t n = len < sizeof m - 1 ? len : sizeof m - 1;
    memcpy(m, msg, n);
    m[n] = 0;
    char pid[256];
    long amount;
    if (sscanf(m, "settle:%255[^:]:%ld", pid, &amount) == 2) {
        char needle[260];
        snprintf(needle, sizeof needle, " %s ", pid);
        shoal_buf_append(&l->ids, "", 1);
        bool seen = strstr((char *)l->ids.data, needle) != NULL;
        l->ids.len--;
        if (seen) {
            l->dups++; /* a settlement sent again (after a crash): recorded once */
        } else {
            l->count++;
            l->sum += amount;
            shoal_buf_printf(&l->ids, "%s ", pid);
        }
        shoal_buf_t b = {0};
        shoal_buf_printf(&b, "%ld %ld %ld", l->count, l->sum, l->dups);
        shoal_buf_append(&b, l->ids.data, l->ids.len);
        shoal_entity_save(e, b.data, b.len, NULL, NULL);
        shoal_buf_free(&b);
        shoal_region_tell(payments_r, pid, "settled-ack", 11);
    } else if (!strcmp(m, "count")) {
        char b[96];
        int bl = snprintf(b, sizeof b, "%ld %ld %ld", l->count, l->sum, l->dups);
        shoal_entity_reply(e, b, (size_t)bl);
    } else if (!strcmp(m, "totals")) {
        shoal_buf_t b = {0};
        shoal_buf_printf(&b, "%ld %ld %ld", l->count, l->sum, l->dups);
        shoal_buf_append(&b, l->ids.data, l->ids.len);
        shoal_entity_reply(e, b.data, b.len);
        shoal_buf_free(&b);
    }
}

static void ledger_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)arg;
    ledger_t *l = state;
    shoal_buf_free(&l->ids);
    free(l);
}

static void settled(shoal_producer_t *p, const char *eid, uint64_t seq, int status,
                    const void *reply, size_t len, void *arg)
{
    (void)p, (void)eid, (void)seq, (void)status, (void)reply, (void)len, (void)arg;
}

static const shoal_entity_fns_t flow_fns = {flow_start, flow_receive, free_state, NULL};
static const shoal_entity_fns_t ledger_fns = {ledger_start, ledger_receive, ledger_stop, NULL};
static const shoal_entity_fns_t sanctions_fns = {nothing_start, sanctions_receive, NULL, NULL};

/* ---------------------------------------------------------------------------------------------
 * A node (the driver is one too, without the role)
 */
typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
    shoal_replicator_t *rep;
    shoal_durable_t *durable;
    shoal_sharding_t *sh;
    shoal_metrics_t *http; /* --http: the management endpoint */
} node_t;

/* --config FILE (node mode): loaded by run_node, laid over the defaults in node_start */
static shoal_config_t *node_cfg;
static const char *node_cfg_path;

/* The file's section over a settings struct: 0, or -1 with the loader's message (naming the file
   and the key) on stderr. */
static int cfg_refused(const char *err)
{
    cli_config_refused("payments", node_cfg_path, err);
    return -1;
}

static int type_settings(shoal_sharding_settings_t *s, uint32_t shards, bool state,
                         shoal_replicator_t *rep)
{
    shoal_sharding_settings_fast(s);
    s->state_write_timeout_ms = 3000;
    s->passivation.idle_timeout_ms = 0;
    char err[512] = "";
    if (node_cfg && shoal_config_sharding(node_cfg, s, err, sizeof err) < 0)
        return cfg_refused(err);
    /* what the flows need, whatever the file says */
    s->role = ROLE;
    s->number_of_shards = shards;
    s->entity_state = state;
    s->replicator = rep;
    return 0;
}

static int node_start(node_t *n, const char *bind, const char *seed, const char *data, bool pay)
{
    memset(n, 0, sizeof *n);
    static const char *const pay_roles[] = {ROLE}, *const client_roles[] = {"client"};
    static const char *const durable_keys[] = {"shard-*"};
    char cerr[512] = "";
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    if (node_cfg && shoal_config_system(node_cfg, &ss, cerr, sizeof cerr) < 0)
        return cfg_refused(cerr);
    ss.endpoint = bind;
    int err = 0;
    n->sys = shoal_system_new(&ss, &err);
    if (!n->sys) {
        fprintf(stderr, "payments: cannot start a node at %s: %s\n", bind, shoal_strerror(err));
        return -1;
    }
    shoal_cluster_settings_t cs;
    shoal_cluster_settings_fast(&cs);
    if (node_cfg && shoal_config_cluster(node_cfg, &cs, cerr, sizeof cerr) < 0)
        return cfg_refused(cerr);
    /* the node's own role first, the file's after it */
    const char *roles[65] = {pay ? pay_roles[0] : client_roles[0]};
    size_t n_roles = 1;
    for (size_t i = 0; i < cs.n_roles && n_roles < 65; i++)
        if (strcmp(cs.roles[i], roles[0]) != 0)
            roles[n_roles++] = cs.roles[i];
    cs.roles = roles;
    cs.n_roles = n_roles;
    if (seed || !pay) { /* --seed (or the driver forming the cluster) replaces the file's */
        cs.seed_nodes = NULL;
        cs.n_seed_nodes = 0;
        cs.discovery = NULL;
    }
    n->cl = shoal_cluster_new(n->sys, &cs, &err);
    if (!n->cl) {
        fprintf(stderr, "payments: cannot start membership: %s\n", shoal_strerror(err));
        return -1;
    }
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    if (node_cfg && shoal_config_replicator(node_cfg, &rs, cerr, sizeof cerr) < 0)
        return cfg_refused(cerr);
    rs.role = ROLE;
    rs.durable_keys = durable_keys;
    rs.n_durable_keys = 1;
    if (pay && data) {
        mkdir(data, 0755);
        shoal_durable_settings_t ds;
        shoal_durable_settings_default(&ds);
        ds.dir = data;
        /* many small steps a second: one LMDB commit per 100 ms, not per step (a step lives on
           the other nodes meanwhile: WriteMajority acknowledged it) */
        ds.write_behind_ms = 100;
        int open_err;
        n->durable = shoal_durable_open(&ds, &open_err);
        if (!n->durable) {
            fprintf(stderr, "payments: store: %s\n", shoal_last_error_detail());
            return -1;
        }
        rs.store = shoal_durable_store(n->durable, ROLE);
    }
    if (pay) {
        n->rep = shoal_replicator_new(n->sys, &rs, &err);
        if (!n->rep || shoal_cluster_follow(n->cl, n->rep) != 0)
            return -1;
    }
    n->sh = shoal_sharding_new(n->cl, &err);
    if (!n->sh || cli_config_limits("payments", node_cfg_path, node_cfg, n->rep, n->sh) < 0)
        return -1;
    shoal_sharding_settings_t s;
    if (type_settings(&s, PAY_SHARDS, true, n->rep) != 0)
        return -1;
    payments_r = shoal_region_start(n->sh, "payment", &s, &flow_fns, NULL, &err);
    type_settings(&s, LEDGERS, true, n->rep);
    ledger_r = shoal_region_start(n->sh, "ledger", &s, &ledger_fns, NULL, &err);
    type_settings(&s, 16, false, n->rep);
    sanctions_r = shoal_region_start(n->sh, "sanctions", &s, &sanctions_fns, NULL, &err);
    if (!payments_r || !ledger_r || !sanctions_r) {
        fprintf(stderr, "payments: regions: %s\n", shoal_strerror(err));
        return -1;
    }
    if (pay) {
        char pid[64];
        snprintf(pid, sizeof pid, "settle-%s-%ld", strlen(bind) > 16 ? bind + 16 : bind,
                 (long)getpid());
        shoal_producer_settings_t ps;
        shoal_producer_settings_default(&ps);
        ps.resend_ms = 500;
        settle_p = shoal_producer_new(ledger_r, pid, &ps, settled, NULL, &err);
        if (!settle_p)
            return -1;
    }
    /* the driver forms the cluster; the payment nodes join through it (or through the seeds or
       discovery of --config FILE, which shoal_cluster_new has set going) */
    if (pay && !seed)
        return 0;
    return pay ? shoal_cluster_join(n->cl, &seed, 1) : shoal_cluster_join(n->cl, NULL, 0);
}

static void node_stop(node_t *n)
{
    shoal_metrics_stop(&n->http);
    shoal_producer_destroy(&settle_p);
    shoal_sharding_destroy(&n->sh);
    shoal_cluster_destroy(&n->cl);
    shoal_replicator_destroy(&n->rep);
    shoal_system_destroy(&n->sys);
    shoal_durable_close(&n->durable);
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* One payment node. config: --config FILE or NULL; its settings go under the flags'. */
static int run_node(const char *bind, const char *seed, const char *data, const char *http,
                    const char *config)
{
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the driver */
    shoal_http_settings_t hs;
    shoal_http_settings_default(&hs);
    node_cfg_path = config;
    if (config && !(node_cfg = cli_config_node("payments", config, NULL, NULL, NULL, &hs)))
        return 1;
    if (!seed) {
        shoal_cluster_settings_t cs;
        shoal_cluster_settings_default(&cs);
        char err[512] = "";
        if (node_cfg && shoal_config_cluster(node_cfg, &cs, err, sizeof err) < 0) {
            cfg_refused(err);
            shoal_config_destroy(&node_cfg);
            return 1;
        }
        if (!cs.n_seed_nodes && !cs.discovery) {
            fprintf(stderr, "payments: --node needs --seed EP (or seed-nodes or discovery in "
                            "--config FILE)\n");
            shoal_config_destroy(&node_cfg);
            return 2;
        }
    }
    node_t n;
    if (node_start(&n, bind, seed, data, true) != 0) {
        fprintf(stderr, "payments: node %s did not start\n", bind);
        node_stop(&n);
        shoal_config_destroy(&node_cfg);
        return 1;
    }
    int err = 0;
    if (http && !(n.http = shoal_http_start_with(n.sys, http, &hs, &err))) {
        fprintf(stderr, "payments: cannot serve HTTP on %s: %s\n", http, shoal_strerror(err));
        node_stop(&n);
        shoal_config_destroy(&node_cfg);
        return 1;
    }
    fprintf(stderr, "payments: %s listening at %s\n", shoal_node_id(shoal_system_self(n.sys)),
            bind);
    while (!stop && !shoal_cluster_terminated(n.cl))
        sleep_ms(100);
    node_stop(&n);
    shoal_config_destroy(&node_cfg);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The driver
 */
#define MAX_NODES   7
#define PROBES      40  /* flows of the killed node asked for their status until they answer */
#define PING_WINDOW 256 /* asks in flight for the baseline */

static int n_total;       /* payments in this run */
static int64_t t_start;   /* when the first payment was sent */
static int *confirmed_at; /* per payment: ms after t_start its request was confirmed, -1 = not */
static int n_confirmed;
static char *on_victim; /* per payment: 1 when its shard is on the node to kill (all: unknown) */
static int n_victim_confirmed; /* confirmed requests of those */

/* "pay-K" -> K, -1 when it is not one of this run's payments */
static int payment_index(const char *pid)
{
    if (strncmp(pid, "pay-", 4) != 0)
        return -1;
    char *end;
    errno = 0;
    long k = strtol(pid + 4, &end, 10);
    if (errno || end == pid + 4 || *end || k < 0 || k >= n_total)
        return -1;
    return (int)k;
}

static void delivered(shoal_producer_t *p, const char *eid, uint64_t seq, int status,
                      const void *reply, size_t len, void *arg)
{
    (void)p, (void)seq, (void)reply, (void)len, (void)arg;
    if (status != 0)
        return; /* given up: only when the producer is destroyed, at the end */
    int k = payment_index(eid), unset = -1;
    /* count a payment once, whatever the producer does */
    if (k >= 0 && __atomic_compare_exchange_n(&confirmed_at[k], &unset, (int)(now_ms() - t_start),
                                              false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        if (on_victim && on_victim[k])
            __atomic_add_fetch(&n_victim_confirmed, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&n_confirmed, 1, __ATOMIC_SEQ_CST);
    }
}

static int members_up(node_t *n)
{
    shoal_cluster_view_t v;
    if (shoal_cluster_view(n->cl, &v) != 0)
        return 0;
    int up = 0;
    for (size_t k = 0; k < v.n_members; k++)
        up += v.members[k].status == SHOAL_MEMBER_UP;
    if (!v.converged)
        up = 0;
    shoal_cluster_view_free(&v);
    return up;
}

static int status_of(const char *pid, char *out, size_t cap, uint32_t timeout_ms)
{
    shoal_buf_t b = {0};
    int rc = shoal_region_ask_sync(payments_r, pid, "status", 6, timeout_ms, &b);
    if (rc == 0) {
        size_t n = b.len < cap - 1 ? b.len : cap - 1;
        memcpy(out, b.data, n);
        out[n] = 0;
    }
    shoal_buf_free(&b);
    return rc;
}

/* The ledgers' settled payments (count, sum, repeats ignored), -1 when one does not answer. */
static long ledgers_count(long *sum, long *dups, uint32_t timeout_ms)
{
    long count = 0, s = 0, d = 0;
    for (int k = 0; k < LEDGERS; k++) {
        char lid[32];
        snprintf(lid, sizeof lid, "ledger-%d", k);
        shoal_buf_t b = {0};
        int rc = shoal_region_ask_sync(ledger_r, lid, "count", 5, timeout_ms, &b);
        long c = 0, cs = 0, cd = 0;
        bool ok = rc == 0 && sscanf(shoal_buf_cstr(&b), "%ld %ld %ld", &c, &cs, &cd) == 3;
        shoal_buf_free(&b);
        if (!ok)
            return -1;
        count += c, s += cs, d += cd;
    }
    if (sum)
        *sum = s;
    if (dups)
        *dups = d;
    return count;
}

/* --- the killed node: when the driver saw it go, and when its flows answered again --- */
static const shoal_node_t *victim_node;
static int64_t t_kill, t_unreachable, t_removed;

static void on_member(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg)
{
    (void)c, (void)arg;
    const shoal_node_t *v = __atomic_load_n(&victim_node, __ATOMIC_ACQUIRE);
    if (!v || !ev->member || ev->member->node != v)
        return;
    int64_t zero = 0, *at = NULL;
    if (ev->kind == SHOAL_EV_UNREACHABLE)
        at = &t_unreachable;
    else if (ev->kind == SHOAL_EV_MEMBER_DOWNED || ev->kind == SHOAL_EV_MEMBER_REMOVED)
        at = &t_removed;
    if (at) /* the first time only */
        __atomic_compare_exchange_n(at, &zero, now_ms(), false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static int subscribe_members(shoal_system_t *sys, void *arg)
{
    (void)sys;
    return shoal_cluster_subscribe(arg, on_member, NULL);
}

typedef struct {
    char pid[32];
    int64_t back; /* first answer after the kill (0: none yet) */
    int inflight;
    char state[16]; /* the step it answered with */
} probe_t;
static probe_t probes[PROBES];
static int n_probes;

static void probe_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    probe_t *pr = arg;
    if (status == 0 && !__atomic_load_n(&pr->back, __ATOMIC_ACQUIRE)) {
        size_t n = len < sizeof pr->state - 1 ? len : sizeof pr->state - 1;
        memcpy(pr->state, reply, n);
        pr->state[n] = 0;
        char *sp = strchr(pr->state, ' ');
        if (sp)
            *sp = 0;
        __atomic_store_n(&pr->back, now_ms(), __ATOMIC_RELEASE);
    }
    __atomic_store_n(&pr->inflight, 0, __ATOMIC_RELEASE);
}

/* Asks the probed flows for their status, each with one ask in flight at a time, until every one
   has answered (or 90 s): an answer is the moment that flow was available again. A thread of its
   own, so that the driver's sending does not delay the measurement. */
static void *probe_main(void *arg)
{
    (void)arg;
    while (now_ms() - t_kill < 90000) {
        int left = 0;
        for (int i = 0; i < n_probes; i++) {
            probe_t *pr = &probes[i];
            if (__atomic_load_n(&pr->back, __ATOMIC_ACQUIRE))
                continue;
            left++;
            if (__atomic_load_n(&pr->inflight, __ATOMIC_ACQUIRE))
                continue;
            __atomic_store_n(&pr->inflight, 1, __ATOMIC_RELEASE);
            if (shoal_region_ask(payments_r, pr->pid, "status", 6, 1000, probe_done, pr) != 0)
                __atomic_store_n(&pr->inflight, 0, __ATOMIC_RELEASE);
        }
        if (!left)
            break;
        sleep_ms(20);
    }
    /* the answers still in flight complete on the node thread: wait for them */
    for (int i = 0; i < n_probes; i++)
        while (__atomic_load_n(&probes[i].inflight, __ATOMIC_ACQUIRE))
            sleep_ms(5);
    return NULL;
}

/* --- the baseline: stateless ask round trips through the same cluster --- */
static pthread_mutex_t ping_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ping_cv = PTHREAD_COND_INITIALIZER;
static int ping_inflight, ping_ok;

static void ping_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r, (void)arg;
    pthread_mutex_lock(&ping_mu);
    ping_inflight--;
    ping_ok += status == 0 && len == 4 && !memcmp(reply, "pong", 4);
    pthread_cond_signal(&ping_cv);
    pthread_mutex_unlock(&ping_mu);
}

/* n asks to the sanctions checkers (no state, no save), at most PING_WINDOW in flight: answered
   asks per second, or 0 when some failed */
static double ask_rate(int n)
{
    int64_t t = now_ms();
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&ping_mu);
        while (ping_inflight >= PING_WINDOW)
            pthread_cond_wait(&ping_cv, &ping_mu); /* every ask completes: done runs once */
        ping_inflight++;
        pthread_mutex_unlock(&ping_mu);
        char cid[32];
        snprintf(cid, sizeof cid, "checker%d", i % LEDGERS);
        if (shoal_region_ask(sanctions_r, cid, "ping", 4, 5000, ping_done, NULL) != 0) {
            pthread_mutex_lock(&ping_mu);
            ping_inflight--;
            pthread_mutex_unlock(&ping_mu);
        }
    }
    pthread_mutex_lock(&ping_mu);
    while (ping_inflight > 0)
        pthread_cond_wait(&ping_cv, &ping_mu);
    int ok = ping_ok;
    pthread_mutex_unlock(&ping_mu);
    int64_t ms = now_ms() - t;
    printf("baseline: %d stateless asks (%d answered) in %lld ms, at most %d in flight\n", n, ok,
           (long long)ms, PING_WINDOW);
    return ok == n ? n / ((ms > 0 ? ms : 1) / 1000.0) : 0;
}

/* --- which node hosts what --- */
typedef struct {
    int pay, ledger, sanctions;
} hosted_t;

/* Adds each payment node's shard count of r's type to hosted (the field at `field`); keeps the
   stats in *keep when keep is not NULL. Nodes are told apart by port (base + 1 + index). */
static int count_shards(shoal_region_t *r, int base, int n_nodes, hosted_t *hosted, size_t field,
                        shoal_sharding_stats_t *keep)
{
    shoal_sharding_stats_t st;
    int rc = -1;
    for (int attempt = 0; attempt < 3 && rc != 0; attempt++)
        rc = shoal_region_cluster_stats(r, 3000, &st);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < st.n_regions; i++) {
        int idx = (int)shoal_node_port(st.regions[i].region) - base - 1;
        if (idx >= 0 && idx < n_nodes && !st.regions[i].failed)
            *(int *)((char *)&hosted[idx] + field) += (int)st.regions[i].n_shards;
    }
    if (keep)
        *keep = st;
    else
        shoal_sharding_stats_free(&st);
    return 0;
}

static char self_path[4096];

static pid_t spawn_node(int port, const char *seed, const char *data, const char *log)
{
    pid_t pid = fork();
    if (pid == 0) {
        char bind[64];
        snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
        FILE *f = freopen(log, "a", stderr);
        (void)f;
        execl(self_path, self_path, "--node", "--bind", bind, "--seed", seed, "--data", data,
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* The node to kill, chosen before the payments start (its shards are placed by then, see the
   warm-up): the one hosting the most ledger shards (then sanctions, then payment shards), so that
   every kind of entity loses its home. */
typedef struct {
    int index;         /* 0-based; the output counts from 1 */
    bool known;        /* the stats answered */
    hosted_t hosted;   /* what it hosts */
    char **pay_shards; /* its payment shards */
    size_t n_pay_shards;
} victim_t;

static void plan_victim(int base, int n_nodes, victim_t *v)
{
    hosted_t hosted[MAX_NODES];
    memset(hosted, 0, sizeof hosted);
    memset(v, 0, sizeof *v);
    shoal_sharding_stats_t pst = {0};
    v->known = count_shards(ledger_r, base, n_nodes, hosted, offsetof(hosted_t, ledger), NULL) == 0;
    v->known = v->known && count_shards(sanctions_r, base, n_nodes, hosted,
                                        offsetof(hosted_t, sanctions), NULL) == 0;
    v->known = v->known &&
               count_shards(payments_r, base, n_nodes, hosted, offsetof(hosted_t, pay), &pst) == 0;
    v->index = n_nodes - 1;
    for (int i = n_nodes - 1; v->known && i >= 0; i--) {
        const hosted_t *a = &hosted[i], *b = &hosted[v->index];
        if (a->ledger > b->ledger ||
            (a->ledger == b->ledger &&
             (a->sanctions > b->sanctions || (a->sanctions == b->sanctions && a->pay > b->pay))))
            v->index = i;
    }
    v->hosted = hosted[v->index];
    for (size_t i = 0; v->known && i < pst.n_regions; i++) {
        const shoal_region_state_t *r = &pst.regions[i];
        if ((int)shoal_node_port(r->region) - base - 1 != v->index)
            continue;
        __atomic_store_n(&victim_node, r->region, __ATOMIC_RELEASE);
        v->pay_shards = calloc(r->n_shards + 1, sizeof *v->pay_shards);
        for (size_t j = 0; j < r->n_shards; j++)
            v->pay_shards[v->n_pay_shards++] = strdup(r->shards[j].id);
    }
    if (v->known)
        shoal_sharding_stats_free(&pst);
}

static void victim_free(victim_t *v)
{
    for (size_t j = 0; j < v->n_pay_shards; j++)
        free(v->pay_shards[j]);
    free(v->pay_shards);
}

/* Which payments' flows live on the victim (every one when its shards are unknown), before the
   first is sent: the kill waits for some of them to be confirmed, and the probes are chosen
   among those. Returns how many there are. */
static int mark_victim_flows(const victim_t *v, int n_payments)
{
    on_victim = calloc((size_t)n_payments, 1);
    if (!on_victim)
        abort();
    int n = 0;
    for (int k = 0; k < n_payments; k++) {
        char pid[32], shard[SHOAL_SHARD_ID_MAX + 1];
        snprintf(pid, sizeof pid, "pay-%d", k);
        shoal_region_shard_of(payments_r, pid, shard);
        bool mine = !v->known;
        for (size_t j = 0; j < v->n_pay_shards && !mine; j++)
            mine = !strcmp(v->pay_shards[j], shard);
        on_victim[k] = mine;
        n += mine;
    }
    return n;
}

/* The probes: flows on the victim whose request was confirmed before the kill, spread over the
   payments sent so far. */
static void pick_probes(int sent)
{
    int *cand = malloc(sizeof *cand * (size_t)(sent + 1)), nc = 0;
    for (int k = 0; k <= sent; k++)
        if (on_victim[k] && __atomic_load_n(&confirmed_at[k], __ATOMIC_SEQ_CST) >= 0)
            cand[nc++] = k;
    n_probes = nc < PROBES ? nc : PROBES;
    for (int i = 0; i < n_probes; i++)
        snprintf(probes[i].pid, sizeof probes[i].pid, "pay-%d",
                 cand[(int)((long)i * nc / n_probes)]);
    free(cand);
}

/* Kills the victim once half of the requests, some of its own among them, are confirmed (flows
   at every step then), says what it hosted, and starts the clock of its flows' unavailability. */
static void kill_victim(const victim_t *v, int sent, const pid_t *kids)
{
    kill(kids[v->index], SIGKILL);
    waitpid(kids[v->index], NULL, 0);
    t_kill = now_ms();
    int confirmed = __atomic_load_n(&n_confirmed, __ATOMIC_SEQ_CST);
    pick_probes(sent);
    printf("after %d requests confirmed: payment node %d killed with SIGKILL", confirmed,
           v->index + 1);
    if (v->known)
        printf("; it hosted %d payment, %d ledger and %d sanctions shards\n", v->hosted.pay,
               v->hosted.ledger, v->hosted.sanctions);
    else
        printf("; which shards it hosted is unknown (the stats query failed)\n");
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int run_driver(int n_payments, int n_nodes, int rate, int base, bool bench, bool keep)
{
    if (readlink("/proc/self/exe", self_path, sizeof self_path - 1) < 0)
        return 1;
    char dir[] = "/tmp/shoal-payments-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    n_total = n_payments;
    confirmed_at = malloc(sizeof *confirmed_at * (size_t)n_payments);
    for (int k = 0; k < n_payments; k++)
        confirmed_at[k] = -1;
    if (base == 0)
        base = 20000 + (int)(getpid() % 11000);
    char seed[64];
    snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", base);
    printf("ports: the driver on 127.0.0.1:%d, payment nodes on %d..%d\n", base, base + 1,
           base + n_nodes);
    node_t drv;
    if (node_start(&drv, seed, seed, NULL, false) != 0) {
        fprintf(stderr,
                "payments: the driver's node did not start on port %d (in use? "
                "--base-port P takes P..P+%d)\n",
                base, n_nodes);
        return 1;
    }
    /* membership events come on the node thread */
    if (shoal_system_call(drv.sys, subscribe_members, drv.cl) <= 0) {
        fprintf(stderr, "payments: cannot follow the cluster's members\n");
        return 1;
    }
    pid_t kids[MAX_NODES];
    for (int i = 0; i < n_nodes; i++) {
        char data[300], log[300];
        snprintf(data, sizeof data, "%s/node%d", dir, i + 1);
        snprintf(log, sizeof log, "%s/node%d.log", dir, i + 1);
        kids[i] = spawn_node(base + 1 + i, seed, data, log);
    }
    int64_t until = now_ms() + 30000;
    while (members_up(&drv) < n_nodes + 1 && now_ms() < until)
        sleep_ms(50);
    const char *types[] = {"payment", "ledger", "sanctions"};
    while (!shoal_sharding_healthy(drv.sh, types, 3) && now_ms() < until)
        sleep_ms(50);
    /* touch every ledger and checker, so that their shards are placed while every node is up
       (the kill then takes some of them too) */
    bool warm = false;
    while (!warm && now_ms() < until) {
        warm = ledgers_count(NULL, NULL, 2000) == 0;
        for (int i = 0; warm && i < LEDGERS; i++) {
            char cid[32];
            shoal_buf_t b = {0};
            snprintf(cid, sizeof cid, "checker%d", i);
            warm = shoal_region_ask_sync(sanctions_r, cid, "ping", 4, 2000, &b) == 0;
            shoal_buf_free(&b);
        }
    }
    /* and one flow id of every payment shard (a status ask stores nothing), so that the
       victim's shards are known before the payments start */
    for (uint32_t sh = 0; warm && sh < PAY_SHARDS; sh++) {
        char id[32], shard[SHOAL_SHARD_ID_MAX + 1], want[16], st[96];
        snprintf(want, sizeof want, "%u", sh);
        bool found = false;
        for (int j = 0; j < 100000 && !found; j++) {
            snprintf(id, sizeof id, "warm-%d", j);
            shoal_region_shard_of(payments_r, id, shard);
            found = !strcmp(shard, want);
        }
        warm = !found || status_of(id, st, sizeof st, 5000) == 0;
    }
    if (members_up(&drv) < n_nodes + 1 || !warm) {
        fprintf(stderr, "payments: the %d nodes did not come up (logs in %s)\n", n_nodes, dir);
        for (int i = 0; i < n_nodes; i++)
            kill(kids[i], SIGKILL);
        return 1;
    }
    printf("cluster: the driver (role client) and %d payment nodes (role pay), LMDB under %s\n",
           n_nodes, dir);
    double base_rate = bench ? ask_rate(n_payments > 20000 ? n_payments : 20000) : 0;
    victim_t victim;
    plan_victim(base, n_nodes, &victim);
    /* the kill waits for half of all requests confirmed and, among them, some of the victim's
       own (unpaced, its flows may be confirmed later than the others'): its probes need them */
    int victim_flows = mark_victim_flows(&victim, n_payments);
    /* 0 only when the victim hosts no flow at all (the run then fails for having no probes) */
    int victim_want = victim_flows / 2 < PROBES ? victim_flows / 2 : PROBES;
    if (victim_want < 1 && victim_flows > 0)
        victim_want = 1;
    bool killed = false;
    int err = 0;
    shoal_producer_settings_t ps;
    shoal_producer_settings_default(&ps);
    ps.resend_ms = 700;
    shoal_producer_t *p =
        shoal_producer_new(payments_r, "driver-requests", &ps, delivered, NULL, &err);
    if (!p)
        return 1;
    pthread_t prober;
    bool probing = false;
    int kill_at = n_payments / 2;
    long expect_sum = 0;
    int expect_blocked = 0;
    t_start = now_ms();
    for (int k = 0; k < n_payments; k++) {
        /* payments arrive over time (rate a second), so that some are on their way at the kill */
        int64_t due = rate > 0 ? t_start + (int64_t)k * 1000 / rate : 0;
        if (due > now_ms())
            sleep_ms((int)(due - now_ms()));
        char pid[32], m[32];
        snprintf(pid, sizeof pid, "pay-%d", k);
        long amount = 100 + (k * 37) % 900;
        snprintf(m, sizeof m, "pay:%ld", amount);
        if (is_blocked(pid))
            expect_blocked++;
        else
            expect_sum += amount;
        int rc;
        while ((rc = shoal_producer_send(p, pid, m, strlen(m), NULL)) == SHOAL_EBUFFER)
            sleep_ms(1);
        if (rc != 0) {
            fprintf(stderr, "payments: send: %s\n", shoal_strerror(rc));
            return 1;
        }
        if (!killed && __atomic_load_n(&n_confirmed, __ATOMIC_SEQ_CST) >= kill_at &&
            __atomic_load_n(&n_victim_confirmed, __ATOMIC_SEQ_CST) >= victim_want) {
            kill_victim(&victim, k, kids);
            killed = true;
        }
    }
    /* unpaced, sending only queues in the producer: the kill waits here for its confirmations */
    until = now_ms() + 60000;
    while (!killed && now_ms() < until &&
           (__atomic_load_n(&n_confirmed, __ATOMIC_SEQ_CST) < kill_at ||
            __atomic_load_n(&n_victim_confirmed, __ATOMIC_SEQ_CST) < victim_want))
        sleep_ms(1);
    if (!killed)
        kill_victim(&victim, n_payments - 1, kids);
    probing = n_probes > 0 && pthread_create(&prober, NULL, probe_main, NULL) == 0;
    until = now_ms() + 90000;
    while (shoal_producer_pending(p) > 0 && now_ms() < until)
        sleep_ms(20);
    int64_t t_confirmed = now_ms();
    /* every settlement in a ledger (the failed ones never get there) */
    int64_t t_settled = 0;
    until = now_ms() + DEADLINE_MS + 60000;
    while (!t_settled && now_ms() < until) {
        if (ledgers_count(NULL, NULL, 500) >= n_payments - expect_blocked)
            t_settled = now_ms();
        else
            sleep_ms(50);
    }
    /* every flow final: settled, or failed at its deadline */
    char *final = calloc((size_t)n_payments, 1);
    int settled = 0, failed = 0, stuck = 0, wrong_fail = 0, unanswered = 0;
    until = now_ms() + DEADLINE_MS + 60000;
    for (int k = 0; k < n_payments; k++) {
        char pid[32], st[96] = "";
        snprintf(pid, sizeof pid, "pay-%d", k);
        for (;;) {
            int rc = status_of(pid, st, sizeof st, 2000);
            bool is_final = rc == 0 && (!strncmp(st, "settled", 7) || !strncmp(st, "failed", 6));
            if (is_final || now_ms() > until) {
                if (rc != 0)
                    unanswered++;
                break;
            }
            sleep_ms(100);
        }
        if (!strncmp(st, "settled", 7)) {
            settled++;
            final[k] = 'S';
            if (is_blocked(pid))
                wrong_fail++;
        } else if (!strncmp(st, "failed", 6)) {
            failed++;
            final[k] = 'F';
            if (!is_blocked(pid))
                wrong_fail++;
        } else {
            stuck++;
            if (stuck <= 5)
                fprintf(stderr, "payments: %s is stuck: %s\n", pid, st[0] ? st : "(no answer)");
        }
    }
    int64_t t_final = now_ms();
    /* the ledgers' ids, payment by payment: each settled payment exactly once, no other */
    long ledger_count = 0, ledger_sum = 0, ledger_dups = 0;
    int ledger_errors = 0, doubles = 0, unknown_ids = 0, missing = 0, extra = 0;
    unsigned char *seen = calloc((size_t)n_payments, 1);
    for (int k = 0; k < LEDGERS; k++) {
        char lid[32];
        snprintf(lid, sizeof lid, "ledger-%d", k);
        shoal_buf_t b = {0};
        if (shoal_region_ask_sync(ledger_r, lid, "totals", 6, 5000, &b) != 0) {
            ledger_errors++;
            shoal_buf_free(&b);
            continue;
        }
        char *text = (char *)shoal_buf_cstr(&b);
        long c = 0, s = 0, d = 0;
        int off = 0;
        if (sscanf(text, "%ld %ld %ld%n", &c, &s, &d, &off) != 3) {
            ledger_errors++;
            shoal_buf_free(&b);
            continue;
        }
        ledger_count += c, ledger_sum += s, ledger_dups += d;
        char *save = NULL;
        for (char *t = strtok_r(text + off, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
            int i = payment_index(t);
            if (i < 0)
                unknown_ids++;
            else if (seen[i]++ == 1)
                doubles++;
        }
        shoal_buf_free(&b);
    }
    for (int k = 0; k < n_payments; k++) {
        missing += final[k] == 'S' && seen[k] != 1;
        extra += final[k] != 'S' && seen[k] != 0;
    }
    /* the probed flows of the killed node: when each answered again, from which step */
    int probes_back = 0, lost = 0;
    int64_t back_ms[PROBES];
    if (probing)
        pthread_join(prober, NULL);
    for (int i = 0; i < n_probes; i++) {
        int64_t b = __atomic_load_n(&probes[i].back, __ATOMIC_ACQUIRE);
        if (!b)
            continue;
        back_ms[probes_back++] = b - t_kill;
        if (!strcmp(probes[i].state, "new")) {
            lost++; /* confirmed before the kill, yet without a stored step */
            fprintf(stderr, "payments: %s came back without its stored state\n", probes[i].pid);
        }
    }
    qsort(back_ms, (size_t)probes_back, sizeof *back_ms, cmp_i64);
    printf("payments: %d sent from the driver's node (at-least-once), %d confirmed\n", n_payments,
           n_confirmed);
    printf("final: %d settled, %d failed (sanctions deadline), %d stuck, %d unanswered\n", settled,
           failed, stuck, unanswered);
    printf("ledgers: %ld payments, total %ld (expected %d, %ld), %ld repeated settlements "
           "ignored, %d ids in two ledgers\n",
           ledger_count, ledger_sum, n_payments - expect_blocked, expect_sum, ledger_dups, doubles);
    printf("per payment: %d settled ones not in the ledgers exactly once, %d others in a ledger, "
           "%d unknown ids\n",
           missing, extra, unknown_ids);
    {
        if (probes_back == n_probes && n_probes > 0)
            printf("unavailable: the killed node's flows (%d probed) answered again %lld ms after "
                   "the kill (median %lld ms), %d without their stored state",
                   n_probes, (long long)back_ms[n_probes - 1], (long long)back_ms[n_probes / 2],
                   lost);
        else
            printf("unavailable: %d of the killed node's %d probed flows never answered again",
                   n_probes - probes_back, n_probes);
        printf("; node %d seen unreachable at +%lld ms, removed at +%lld ms\n", victim.index + 1,
               (long long)(t_unreachable ? t_unreachable - t_kill : -1),
               (long long)(t_removed ? t_removed - t_kill : -1));
    }
    printf("time: %.1f s until every request was confirmed, %.1f s until every settlement, "
           "%.1f s until all final (%d s sanctions deadline)\n",
           (t_confirmed - t_start) / 1000.0, t_settled ? (t_settled - t_start) / 1000.0 : -1.0,
           (t_final - t_start) / 1000.0, DEADLINE_MS / 1000);
    bool ok = stuck == 0 && unanswered == 0 && wrong_fail == 0 && n_confirmed == n_payments &&
              settled == n_payments - expect_blocked && failed == expect_blocked &&
              ledger_count == settled && ledger_sum == expect_sum && doubles == 0 && missing == 0 &&
              extra == 0 && unknown_ids == 0 && ledger_errors == 0 && t_settled > 0 &&
              n_probes > 0 && probes_back == n_probes && lost == 0;
    if (bench) {
        /* settled per second from the first request to the last settlement, the kill included;
           baseline: stateless ask round trips through the same cluster, before the payments */
        double settled_rate = t_settled > t_start ? settled / ((t_settled - t_start) / 1000.0) : 0;
        printf("BENCH name=payments_settled_per_s value=%.1f unit=ops/s baseline=%.1f "
               "ratio=%.4f\n",
               settled_rate, base_rate, base_rate > 0 ? settled_rate / base_rate : 0);
    }
    free(final);
    free(seen);
    shoal_producer_destroy(&p);
    node_stop(&drv);
    for (int i = 0; i < n_nodes; i++)
        if (i != victim.index) {
            kill(kids[i], SIGTERM);
            waitpid(kids[i], NULL, 0);
        }
    if (ok) {
        printf("OK: every payment settled exactly once or failed at its deadline; none stuck; "
               "the killed node's flows resumed from their stored state\n");
        if (!keep) {
            char cmd[400];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            if (system(cmd) != 0)
                fprintf(stderr, "payments: could not remove %s\n", dir);
        }
    } else {
        printf("FAIL: see above (node logs in %s)\n", dir);
    }
    victim_free(&victim);
    free(confirmed_at);
    free(on_victim);
    return ok ? 0 : 1;
}

/* A whole decimal number in [lo, hi], or a message and false. */
static bool number_arg(const char *opt, const char *text, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "payments: %s takes a number between %ld and %ld, not \"%s\"\n", opt, lo,
                hi, text);
        return false;
    }
    *out = (int)v;
    return true;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: payments [--payments N] [--nodes N] [--rate R] [--base-port P] [--short]\n"
               "                [--bench] [--keep]\n"
               "       payments --node --bind EP [--seed EP] --data DIR [--http [HOST:]PORT]\n"
               "                [--config FILE]\n"
               "  EP: HOST:PORT or tcp://HOST:PORT; --config FILE: settings under the flags\n"
               "       payments --help | --version\n");
}

int main(int argc, char **argv)
{
    int cli = cli_help_or_version(&argc, argv, "payments", usage);
    if (cli >= 0)
        return cli;
    int n = 2000, nodes = 3, rate = -1, base = 0;
    bool node = false, quick = false, bench = false, keep = false;
    const char *bind = NULL, *seed = NULL, *data = NULL, *http = NULL, *config = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--node"))
            node = true;
        else if (!strcmp(argv[i], "--short"))
            quick = true, n = 400;
        else if (!strcmp(argv[i], "--bench"))
            bench = true;
        else if (!strcmp(argv[i], "--keep"))
            keep = true;
        else if (!strcmp(argv[i], "--payments") && i + 1 < argc) {
            if (!number_arg("--payments", argv[++i], 50, 1000000, &n))
                return 2;
        } else if (!strcmp(argv[i], "--rate") && i + 1 < argc) {
            /* 0: unpaced */
            if (!number_arg("--rate", argv[++i], 0, 1000000, &rate))
                return 2;
        } else if (!strcmp(argv[i], "--nodes") && i + 1 < argc) {
            /* three at least: keep-majority keeps the side with two of three when one is killed */
            if (!number_arg("--nodes", argv[++i], 3, MAX_NODES, &nodes))
                return 2;
        } else if (!strcmp(argv[i], "--base-port") && i + 1 < argc) {
            /* the driver on P, the nodes above it: P + MAX_NODES still a port */
            if (!number_arg("--base-port", argv[++i], 1, 65535 - MAX_NODES, &base))
                return 2;
        } else if (!strcmp(argv[i], "--bind") && i + 1 < argc)
            bind = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = argv[++i];
        else if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i];
        else if (!strcmp(argv[i], "--http") && i + 1 < argc) {
            http = argv[++i];
        } else {
            fprintf(stderr, "payments: unknown option or missing value: '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    /* HOST:PORT or tcp://HOST:PORT, a host name resolved (cli.h, NODE ADDRESSES) */
    static char bind_buf[300], seed_buf[300], http_buf[300];
    char awhy[400];
    if (bind && cli_node_address(bind, bind_buf, sizeof bind_buf, awhy, sizeof awhy) != 0)
        return fprintf(stderr, "%s: --bind %s\n", "payments", awhy), 2;
    if (seed && cli_node_address(seed, seed_buf, sizeof seed_buf, awhy, sizeof awhy) != 0)
        return fprintf(stderr, "%s: --seed %s\n", "payments", awhy), 2;
    if (http && cli_http_address(http, http_buf, sizeof http_buf, awhy, sizeof awhy) != 0)
        return fprintf(stderr, "%s: --http %s\n", "payments", awhy), 2;
    bind = bind ? bind_buf : NULL;
    seed = seed ? seed_buf : NULL;
    http = http ? http_buf : NULL;
    if (node) {
        if (!bind) {
            fprintf(stderr, "payments: --node needs --bind EP\n");
            usage(stderr);
            return 2;
        }
        return run_node(bind, seed, data, http, config);
    }
    if (rate < 0) /* not given: 400 a second (the short run 200), the benchmark unpaced */
        rate = bench ? 0 : quick ? 200 : 400;
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines out before a fork copies the buffer */
    return run_driver(n, nodes, rate, base, bench, keep);
}
