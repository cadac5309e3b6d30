/*  test_sharding_more.c — sharding, part two, end to end with real member nodes over loopback in
    this process: explicit passivation with messages in flight, the idle timeout, the active-entity
    limit (LRU and W-TinyLFU), remembered entities after a crash and after a restart of every node
    (LMDB), a 10,000-entity shard recovering elsewhere without a shard restart, a failing store,
    StopShards and the sharded daemon process.

    Every node here has a replicator of its own (role "", durable keys "shard-*") passed to
    sharding as settings.replicator, so that the tests can read the remembered-entity keys and
    give the replicator a store (memory with injected failures, or LMDB that outlives the node).
    Entities record what they receive in test/common/shards.h's table, which also checks at every
    start that no entity and no shard is alive twice; some tests add a timed event log. Deadlines
    are scaled by tscale().
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "durable.h"
#include "members.h"
#include "shards.h"
#include "sharding_internal.h" /* region_send_home: a coordinator's message, forged */

#define T TSHARD_TYPE
#define REMEMBER_KEYS 5 /* ORSets per shard (sharding/remember.c) */

/* --- nodes with a replicator of their own ----------------------------------------------------- */
typedef struct {
    shoal_replicator_t *rep;
    shoal_durable_t *durable;
    shoal_store_t *mem; /* a memory store (owned), for fault injection */
    int port;           /* 0: ephemeral */
    shoal_region_t *daemon;
} xnode_t;

static xnode_t xn[TS_MAX];
static char tmp_root[64]; /* a mkdtemp directory for LMDB environments ("" = none yet) */
static tsender_t *senders[4];
static int dead_letters; /* of the regions watched with count_dead_letter */

typedef struct {
    bool lmdb;             /* an LMDB store under tmp_root/node<i> */
    bool memstore;         /* a memory store */
    uint32_t min_members;  /* min-nr-of-members (0: 1) */
    bool fixed_ports;      /* bind a port below the ephemeral range, kept for restarts */
} xopts_t;

static void node_dir(int i, char *out, size_t cap)
{
    if (!tmp_root[0]) {
        snprintf(tmp_root, sizeof tmp_root, "/tmp/shoal-shmore-XXXXXX");
        if (!mkdtemp(tmp_root))
            fail_msg("mkdtemp failed");
    }
    snprintf(out, cap, "%s/node%d", tmp_root, i);
}

static bool port_bindable(void *arg)
{
    int port = *(int *)arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* as the transport binds */
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* Node i: membership (joining through seed, or forming when seed == i), sharding, and its own
   replicator following the cluster; no region yet. */
static void xnode_start(int i, int seed, const xopts_t *o)
{
    /* a node destroyed a moment ago may still hold its port (sockets close asynchronously) */
    if (xn[i].port && !wait_until(port_bindable, &xn[i].port, 5000))
        fail_msg("node %d: port %d stays taken", i, xn[i].port);
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    if (o->min_members)
        cs.min_nr_of_members = o->min_members;
    tsnode_opts_t to = {.cluster = &cs, .no_region = true, .seed = seed, .port = xn[i].port};
    tsnode_start(i, &to);
    tsn[i].arg.node = i;

    if (o->lmdb) {
        char dir[PATH_MAX];
        node_dir(i, dir, sizeof dir);
        xn[i].rep = tsnode_durable_replicator(i, dir, &xn[i].durable);
        return;
    }
    static const char *durable[] = {"shard-*"};
    shoal_replicator_settings_t rs;
    tmember_data_settings(&rs);
    rs.durable_keys = durable;
    rs.n_durable_keys = 1;
    if (o->memstore) {
        xn[i].mem = shoal_memstore_new();
        rs.store = xn[i].mem;
    }
    int err = 0;
    xn[i].rep = shoal_replicator_new(tsn[i].sys, &rs, &err);
    if (!xn[i].rep)
        fail_msg("node %d: replicator: %s", i, shoal_strerror(err));
    assert_int_equal(shoal_cluster_follow(tsn[i].cl, xn[i].rep), 0);
}

/* A region of `type` on node i, on the node's replicator. */
static shoal_region_t *xregion(int i, const char *type, const shoal_sharding_settings_t *s,
                               const shoal_entity_fns_t *fns)
{
    shoal_sharding_settings_t rs = *s;
    rs.replicator = xn[i].rep;
    int err = 0;
    shoal_region_t *r = shoal_region_start(tsn[i].sh, type, &rs, fns, &tsn[i].arg, &err);
    if (!r)
        fail_msg("node %d: region %s did not start: %s", i, type, shoal_strerror(err));
    if (strcmp(type, T) == 0)
        tsn[i].r = r;
    return r;
}

/* Destroys node i: a crash (cut from every peer first, nothing more gets out) or a plain stop;
   never a leave. Sharding, membership, then the replicator and its store, then the system. */
static void xnode_stop(int i, bool crash)
{
    if (!tsn[i].sys)
        return;
    if (crash) {
        shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
        assert_int_equal(shoal_system_fault(tsn[i].sys, NULL, &cut), 0);
    }
    shoal_sharding_destroy(&tsn[i].sh);
    shoal_cluster_destroy(&tsn[i].cl);
    shoal_replicator_destroy(&xn[i].rep);
    shoal_durable_close(&xn[i].durable);
    shoal_memstore_destroy(&xn[i].mem);
    tsnode_stop(i);
    xn[i].daemon = NULL;
}

/* Nodes 0..n-1: node 0 forms the cluster (Up alone first, so it is the oldest: the
   coordinators' host, unless min_members holds everyone back), the others join through it;
   then a region of T with the counter callbacks on each. */
static void xstart(int n, const shoal_sharding_settings_t *s, const xopts_t *o)
{
    xopts_t none = {0};
    if (!o)
        o = &none;
    for (int i = 0; i < n; i++)
        if (o->fixed_ports && !xn[i].port)
            xn[i].port = tfree_port();
    xnode_start(0, 0, o);
    if (o->min_members <= 1)
        tsnode_wait_up(1u, 15000);
    for (int i = 1; i < n; i++)
        xnode_start(i, 0, o);
    unsigned mask = (1u << n) - 1;
    tsnode_wait_up(mask, 20000);
    for (int i = 0; i < n; i++)
        xregion(i, T, s, tcounter_fns());
    tsnode_wait_registered(mask, 0, (size_t)n, 15000);
}


static int teardown(void **state)
{
    for (size_t k = 0; k < sizeof senders / sizeof senders[0]; k++)
        tsender_free(&senders[k]);
    for (int i = 0; i < TS_MAX; i++)
        xnode_stop(i, false);
    memset(xn, 0, sizeof xn);
    if (tmp_root[0])
        trm_tree(tmp_root);
    tmp_root[0] = 0;
    __atomic_store_n(&dead_letters, 0, __ATOMIC_SEQ_CST);
    return tsnode_teardown(state);
}

static tsender_t *sender_start(shoal_region_t *r, const char *name, char (*ids)[32], size_t n,
                               int pause_us)
{
    tsender_t *s = tsender_start(r, name, ids, n, pause_us);
    for (size_t k = 0; k < sizeof senders / sizeof senders[0]; k++)
        if (!senders[k]) {
            senders[k] = s;
            return s;
        }
    fail_msg("too many senders");
    return NULL;
}

/* --- helpers ---------------------------------------------------------------------------------- */
static shoal_region_stats_t stats_of(shoal_region_t *r)
{
    shoal_region_stats_t st;
    assert_int_equal(shoal_region_stats(r, &st), 0);
    return st;
}

static int tell(shoal_region_t *r, const char *id, const char *msg)
{
    return shoal_region_tell(r, id, msg, strlen(msg));
}

static void assert_no_breach(void)
{
    ttotals_t t = trec_totals();
    assert_int_equal(t.double_entity, 0);
    assert_int_equal(t.double_shard, 0);
    assert_int_equal(t.order_errors, 0);
}

/* The node hosting `shard` of `type` by the regions' own states (-1: none, -2: several). */
static int host_of(const char *type, const char *shard)
{
    int host = -1;
    for (int i = 0; i < TS_MAX; i++) {
        shoal_region_t *r = tsn[i].sh ? shoal_region_find(tsn[i].sh, type) : NULL;
        shoal_region_state_t st;
        if (!r || shoal_region_state(r, false, &st) != 0)
            continue;
        for (size_t k = 0; k < st.n_shards; k++)
            if (strcmp(st.shards[k].id, shard) == 0)
                host = host == -1 ? i : -2;
        shoal_region_state_free(&st);
    }
    return host;
}

typedef struct {
    const char *type;
    char (*ids)[32];
    size_t n;
    int live;       /* every entity has this many live incarnations */
    int min_starts; /* and started at least this often */
    int not_node;   /* and (live) not on this node (-1: anywhere) */
} live_arg_t;

static bool all_live(void *arg)
{
    live_arg_t *a = arg;
    for (size_t k = 0; k < a->n; k++) {
        trec_t r = trec_get(a->type, a->ids[k]);
        if (r.live != a->live || r.starts < a->min_starts ||
            (a->live && a->not_node >= 0 && r.node == a->not_node))
            return false;
    }
    return true;
}

static void wait_live(live_arg_t a, int timeout_ms, const char *what)
{
    if (wait_until(all_live, &a, timeout_ms))
        return;
    size_t shown = 0;
    for (size_t k = 0; k < a.n && shown < 10; k++) {
        trec_t r = trec_get(a.type, a.ids[k]);
        if (r.live != a.live || r.starts < a.min_starts ||
            (a.live && a.not_node >= 0 && r.node == a.not_node)) {
            fprintf(stderr, "%s/%s: live %d, starts %d, node %d\n", a.type, a.ids[k], r.live,
                    r.starts, r.node);
            shown++;
        }
    }
    fail_msg("%s", what);
}

/* True when `id` is in one of the remembered-entity ORSets of its shard, read from node i's
   replicator with `c` (the keys "shard-<type>-<shard>-<k>"). */
static bool remembered_in_keys(int i, const char *type, const char *shard, const char *id,
                               const shoal_consistency_t *c)
{
    bool found = false;
    for (int k = 0; k < REMEMBER_KEYS && !found; k++) {
        char key[256];
        snprintf(key, sizeof key, "shard-%s-%s-%d", type, shard, k);
        shoal_crdt_t *v = NULL;
        int rc = shoal_replicator_get_sync(xn[i].rep, key, shoal_type_by_name("ORSet"), c, &v);
        if (rc == 0 && v)
            found = shoal_orset_contains(v, id, strlen(id));
        shoal_crdt_destroy(&v);
    }
    return found;
}

/* True when the GSet "shard-<type>-all-shards" on node i (local) holds `shard`. */
static bool shard_noted(int i, const char *type, const char *shard)
{
    char key[256];
    snprintf(key, sizeof key, "shard-%s-all-shards", type);
    shoal_consistency_t local = c_local();
    shoal_crdt_t *v = NULL;
    bool found = false;
    if (shoal_replicator_get_sync(xn[i].rep, key, shoal_type_by_name("GSet"), &local, &v) == 0 &&
        v)
        found = shoal_gset_contains(v, shard, strlen(shard));
    shoal_crdt_destroy(&v);
    return found;
}

/* --- an event log with times (entities of the counter type that also log) --------------------- */
#define XEV_MAX 32768
typedef struct {
    int64_t at;
    char kind; /* 's' start, 'r' receive, 'x' stop */
    char id[32];
    char msg[32];
} xev_t;

static pthread_mutex_t xev_lock = PTHREAD_MUTEX_INITIALIZER;
static xev_t xev[XEV_MAX];
static int n_xev;

static void xev_add(char kind, const char *id, const void *msg, size_t len)
{
    pthread_mutex_lock(&xev_lock);
    if (n_xev < XEV_MAX) {
        xev_t *e = &xev[n_xev++];
        e->at = shoal_now_ms();
        e->kind = kind;
        snprintf(e->id, sizeof e->id, "%s", id);
        if (len >= sizeof e->msg)
            len = sizeof e->msg - 1;
        if (msg)
            memcpy(e->msg, msg, len);
        e->msg[msg ? len : 0] = 0;
    }
    pthread_mutex_unlock(&xev_lock);
}

/* Index of the first event of `kind` for `id` (with message `msg` unless NULL) at or after
   `from`; -1 when none. *at gets its time. */
static int xev_find(int from, char kind, const char *id, const char *msg, int64_t *at)
{
    int found = -1;
    pthread_mutex_lock(&xev_lock);
    for (int k = from; k < n_xev && found < 0; k++)
        if (xev[k].kind == kind && strcmp(xev[k].id, id) == 0 && (!msg || !strcmp(xev[k].msg, msg)))
            found = k;
    if (found >= 0 && at)
        *at = xev[found].at;
    pthread_mutex_unlock(&xev_lock);
    return found;
}

static void xev_reset(void)
{
    pthread_mutex_lock(&xev_lock);
    n_xev = 0;
    pthread_mutex_unlock(&xev_lock);
}

static void *lg_start(shoal_entity_t *e, void *arg)
{
    xev_add('s', shoal_entity_id(e), NULL, 0);
    return tcounter_fns()->start(e, arg);
}

static void lg_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    xev_add('r', shoal_entity_id(e), msg, len);
    tcounter_fns()->receive(e, state, msg, len, arg);
}

static void lg_stop(shoal_entity_t *e, void *state, void *arg)
{
    xev_add('x', shoal_entity_id(e), NULL, 0);
    tcounter_fns()->stop(e, state, arg);
}

static const shoal_entity_fns_t logged_fns = {
    .start = lg_start,
    .receive = lg_receive,
    .stop = lg_stop,
};

typedef struct {
    const char *type, *id;
    int starts; /* at least */
} starts_arg_t;

static bool started_again(void *arg)
{
    starts_arg_t *a = arg;
    trec_t r = trec_get(a->type, a->id);
    return r.starts >= a->starts && r.live == 1;
}

static void count_dead_letter(shoal_region_t *r, shoal_dead_letter_t reason, const char *entity_id,
                              const void *msg, size_t len, void *arg)
{
    (void)r;
    (void)arg;
    __atomic_add_fetch(&dead_letters, 1, __ATOMIC_SEQ_CST);
    fprintf(stderr, "dead letter %s for %s (%.*s)\n", shoal_dead_letter_name(reason),
            entity_id ? entity_id : "-", (int)(len < 40 ? len : 40), msg ? (const char *)msg : "");
}

/* --- 1: explicit passivation with messages in flight ------------------------------------------ */

/* An entity passivates itself (the stop message comes back to it) while a thread on the other
   node keeps telling it numbered messages: what arrives until it has stopped waits and goes to
   the next incarnation. Three times it stops at once; once it ignores the stop message and is
   stopped by force after the stop timeout, nothing delivered to it meanwhile. Every message
   arrives exactly once, in order, over five incarnations. */
static void test_explicit_passivation_in_flight(void **state)
{
    (void)state;
    xev_reset();
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 10;
    s.passivation.policy = SHOAL_PASSIVATE_NONE;
    s.passivation.stop_timeout_ms = 300;
    xstart(2, &s, NULL);
    shoal_region_t *r[2];
    for (int i = 0; i < 2; i++)
        r[i] = xregion(i, "logged", &s, &logged_fns);
    tsnode_wait_registered(0x3, 0, 2, 15000);
    for (int i = 0; i < 2; i++)
        assert_true(shoal_region_on_dead_letter(r[i], count_dead_letter, NULL) > 0);

    char ids[1][32] = {"p"};
    tsender_t *snd = sender_start(r[1], "a", ids, 1, 1000);
    starts_arg_t a = {"logged", "p", 1};
    assert_true(wait_until(started_again, &a, 10000));
    /* passivate twice at once, then once stubbornly (stopped by force), then once more */
    const char *rounds[4][2] = {{"passivate", NULL}, {"passivate", NULL},
                                {"stubborn", "passivate"}, {"passivate", NULL}};
    for (int k = 0; k < 4; k++) {
        assert_true(tsender_wait_rounds(snd, 50, 10000)); /* messages flow meanwhile */
        a.starts = trec_get("logged", "p").starts + 1;
        for (int j = 0; j < 2 && rounds[k][j]; j++)
            assert_int_equal(tell(r[0], "p", rounds[k][j]), 0);
        if (!wait_until(started_again, &a, 10000))
            fail_msg("round %d: no new incarnation (starts %d)", k,
                     trec_get("logged", "p").starts);
    }
    assert_true(tsender_wait_rounds(snd, 50, 10000));
    tsender_stop(snd);
    assert_true(tsender_all_received(snd, "logged", 10000));

    trec_t p = trec_get("logged", "p");
    assert_int_equal(p.starts, 5);
    assert_int_equal(p.stops, 4);
    assert_int_equal(p.stop_msgs, 4);
    assert_int_equal(p.messages, snd->sent[0]);
    assert_true(snd->sent[0] >= 250);
    uint64_t forced = stats_of(r[0]).entities_forced + stats_of(r[1]).entities_forced;
    assert_int_equal(forced, 1);
    /* the stubborn incarnation: between its stop message and its forced stop (a stop timeout
       later) nothing was delivered to it; what came meanwhile waited for the next one */
    int64_t stop_msg_at = 0, stopped_at = 0;
    int i_stubborn = xev_find(0, 'r', "p", "stubborn", NULL);
    assert_true(i_stubborn >= 0);
    int i_stop_msg = xev_find(i_stubborn, 'r', "p", TSHARD_STOP, &stop_msg_at);
    int i_stopped = xev_find(i_stop_msg, 'x', "p", NULL, &stopped_at);
    assert_true(i_stop_msg > i_stubborn && i_stopped > i_stop_msg);
    int i_next = xev_find(i_stop_msg + 1, 'r', "p", NULL, NULL);
    assert_true(i_next > i_stopped);
    assert_true(stopped_at - stop_msg_at >= 300);
    assert_true(xev_find(i_stopped, 's', "p", NULL, NULL) > i_stopped);
    assert_int_equal(__atomic_load_n(&dead_letters, __ATOMIC_SEQ_CST), 0);
    assert_no_breach();
}

/* --- 2: idle passivation ---------------------------------------------------------------------- */

/* idle-entity.timeout 500 ms: an entity told once is passivated no sooner than 500 ms after its
   message; one told every 100 ms is not, until its messages stop. */
static void test_idle_passivation(void **state)
{
    (void)state;
    xev_reset();
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 10;
    s.passivation.policy = SHOAL_PASSIVATE_IDLE;
    s.passivation.idle_timeout_ms = 500;
    xstart(1, &s, NULL);
    shoal_region_t *r = xregion(0, "idle", &s, &logged_fns);

    assert_int_equal(tell(r, "lazy", "a:1"), 0);
    char busy[1][32] = {"busy"};
    tsender_t *snd = sender_start(r, "b", busy, 1, 100 * 1000);
    char lazy_id[1][32] = {"lazy"};
    live_arg_t gone = {"idle", lazy_id, 1, 0, 1, -1};
    wait_live(gone, 5000, "the idle entity was not passivated");
    int64_t got_at = 0, stopped_at = 0;
    assert_true(xev_find(0, 'r', "lazy", "a:1", &got_at) >= 0);
    assert_true(xev_find(0, 'x', "lazy", NULL, &stopped_at) >= 0);
    assert_true(stopped_at - got_at >= 500);
    trec_t lazy = trec_get("idle", "lazy");
    assert_int_equal(lazy.starts, 1);
    assert_int_equal(lazy.stop_msgs, 1); /* passivated: the stop message came */

    /* the busy one keeps running a while longer (ten more of its messages) */
    assert_true(tsender_wait_rounds(snd, 10, 5000));
    trec_t b = trec_get("idle", "busy");
    assert_int_equal(b.starts, 1);
    assert_int_equal(b.live, 1);
    assert_int_equal(b.stops, 0);
    assert_int_equal(stats_of(r).passivations, 1);

    /* quiet now: it goes too */
    tsender_stop(snd);
    assert_true(tsender_all_received(snd, "idle", 5000));
    live_arg_t busy_gone = {"idle", busy, 1, 0, 1, -1};
    wait_live(busy_gone, 5000, "the busy entity was not passivated once quiet");
    assert_int_equal(stats_of(r).passivations, 2);
    assert_no_breach();
}

/* --- 3b: settings from a configuration file take effect --------------------------------------- */

/* The file of the next test: its config outlives the node, whose replicator keeps the expiry
   patterns it points to (destroyed by file_teardown after the nodes). */
static shoal_config_t *file_cfg;
static shoal_client_t *file_client; /* closed here too, so a failed test does not leave it */

static int file_teardown(void **state)
{
    shoal_client_destroy(&file_client);
    int rc = teardown(state);
    shoal_config_destroy(&file_cfg);
    return rc;
}

/* The keys of node 0's replicator of role "" (sharding's own), from its stats, or -1. */
static long replicator_keys(shoal_client_t *c)
{
    static const char name[] = "replicator_keys ";
    shoal_buf_t text = {0};
    long keys = -1;
    if (shoal_client_stats(c, "", &text) == 0) {
        const char *all = shoal_buf_cstr(&text), *line = strstr(all, name);
        if (line && (line == all || line[-1] == '\n'))
            keys = strtol(line + sizeof name - 1, NULL, 10);
    }
    shoal_buf_free(&text);
    return keys;
}

typedef struct {
    shoal_client_t *c;
    long want;
} keys_arg_t;

static bool replicator_keys_are(void *arg)
{
    keys_arg_t *a = arg;
    return replicator_keys(a->c) == a->want;
}

/* Nothing set in C: a file filled by shoal_config_sharding over the test's settings. Its
   passivation strategy (a section of its own, idle timeout 300 ms) passivates an entity told
   once; its settings of sharding's own replicator (expire-keys-after-inactivity for "tmp-*")
   make that replicator drop a key nobody touches, while a key of another name stays. */
static void test_file_settings_take_effect(void **state)
{
    (void)state;
    int code = 0;
    file_cfg =
        shoal_config_parse("shoal\n"
                           "    cluster\n"
                           "        sharding\n"
                           "            passivation\n"
                           "                strategy = quick\n"
                           "                quick\n"
                           "                    idle-entity\n"
                           "                        timeout = 300 ms\n"
                           "                        interval = 50 ms\n"
                           "            distributed-data\n"
                           "                expire-keys-after-inactivity = \"tmp-* = 400 ms\"\n",
                           &code);
    if (!file_cfg)
        fail_msg("%s", shoal_last_error_detail());
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 10;
    s.passivation.policy = SHOAL_PASSIVATE_NONE; /* what the file must replace */
    s.passivation.idle_timeout_ms = 0;
    char err[256];
    assert_int_equal(shoal_config_sharding(file_cfg, &s, err, sizeof err), 0);
    assert_null(s.replicator); /* sharding starts its own, with replicator_settings */

    tsnode_opts_t o = {.sharding = &s, .seed = 0};
    tsnode_start(0, &o);
    tsnode_wait_up(1u, 15000);
    tsnode_wait_registered(1u, 0, 1, 15000);

    int64_t told_at = shoal_now_ms();
    assert_int_equal(tell(tsn[0].r, "lazy", "a:1"), 0);
    char lazy[1][32] = {"lazy"};
    wait_live((live_arg_t){T, lazy, 1, 1, 1, -1}, 5000, "the entity did not start");
    wait_live((live_arg_t){T, lazy, 1, 0, 1, -1}, 5000,
              "the file's idle timeout did not passivate the entity");
    assert_true(shoal_now_ms() - told_at >= 300);
    trec_t rec = trec_get(T, "lazy");
    assert_int_equal(rec.starts, 1);
    assert_int_equal(rec.stop_msgs, 1); /* passivated: the stop message came */
    assert_int_equal(stats_of(tsn[0].r).passivations, 1);

    /* sharding's replicator, through a client of the node: written once, tmp-x is dropped
       400 ms later (the keys count falls by one without reading it, a read being an access);
       keep-x stays */
    int e = 0;
    file_client = shoal_client_new(shoal_system_endpoint(tsn[0].sys), 5000, &e);
    shoal_client_t *c = file_client;
    if (!c)
        fail_msg("client: %s", shoal_strerror(e));
    shoal_consistency_t local = {0};
    shoal_client_op_t inc = {.type = "GCounter", .op = "increment", .n = 1};
    long before = replicator_keys(c);
    assert_true(before >= 0);
    assert_int_equal(shoal_client_update(c, "", "keep-x", &local, &inc), 0);
    assert_int_equal(shoal_client_update(c, "", "tmp-x", &local, &inc), 0);
    keys_arg_t dropped = {c, before + 1};
    if (!wait_until(replicator_keys_are, &dropped, 5000))
        fail_msg("the file's expire-keys-after-inactivity did not drop tmp-x (keys %ld, want %ld)",
                 replicator_keys(c), before + 1);
    shoal_crdt_t *v = NULL;
    assert_int_equal(shoal_client_get(c, "", "tmp-x", &local, &v), SHOAL_ENOTFOUND);
    assert_int_equal(shoal_client_get(c, "", "keep-x", &local, &v), 0);
    assert_non_null(v);
    shoal_crdt_destroy(&v);
    shoal_client_destroy(&file_client);
    assert_no_breach();
}

/* --- 3: the active-entity limit --------------------------------------------------------------- */
typedef struct {
    const char *type;
    int node, want;
} count_arg_t;

static bool live_count_is(void *arg)
{
    count_arg_t *a = arg;
    return trec_live_on(a->type, a->node) == a->want;
}

typedef struct {
    const char *type;
    char (*ids)[32];
    int n;
} messaged_arg_t;

static bool all_messaged(void *arg)
{
    messaged_arg_t *a = arg;
    for (int k = 0; k < a->n; k++)
        if (trec_get(a->type, a->ids[k]).messages != 1)
            return false;
    return true;
}

/* Touches ids "<prefix>0".."<prefix>(n-1)" once each, in order (one sender: delivered in this
   order), and waits until every one got its message (it may have been passivated since). */
static void touch(shoal_region_t *r, const char *type, const char *prefix, int n)
{
    char ids[64][32];
    assert_true(n <= 64);
    for (int k = 0; k < n; k++) {
        snprintf(ids[k], 32, "%s%d", prefix, k);
        assert_int_equal(tell(r, ids[k], "a:1"), 0);
    }
    messaged_arg_t a = {type, ids, n};
    if (!wait_until(all_messaged, &a, 5000))
        fail_msg("%s: not every entity got its message", type);
}

/* One shard, limit 10. LRU: after 20 entities, the 10 most recent run; the limit lowered to 5 at
   run time leaves the 5 most recent. W-TinyLFU on the same accesses: never more than the limit,
   and every entity that went was passivated (counted). */
static void test_limit_passivation(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 1;
    s.passivation.policy = SHOAL_PASSIVATE_LRU;
    s.passivation.idle_timeout_ms = 0;
    s.passivation.active_entity_limit = 10;
    xstart(1, &s, NULL);
    shoal_region_t *lru = xregion(0, "lru", &s, tcounter_fns());
    shoal_sharding_settings_t ts = s;
    ts.passivation.policy = SHOAL_PASSIVATE_TINYLFU;
    shoal_region_t *tiny = xregion(0, "tinylfu", &ts, tcounter_fns());

    touch(lru, "lru", "e", 20);
    assert_int_equal(trec_live_on("lru", 0), 10);
    for (int k = 0; k < 20; k++) {
        char id[32];
        snprintf(id, sizeof id, "e%d", k);
        trec_t r = trec_get("lru", id);
        assert_int_equal(r.starts, 1);
        assert_int_equal(r.live, k >= 10);
        assert_int_equal(r.stop_msgs, k < 10); /* passivated with the stop message */
    }
    assert_int_equal(stats_of(lru).passivations, 10);

    assert_int_equal(shoal_region_set_active_entity_limit(lru, 5), 0);
    count_arg_t five = {"lru", 0, 5};
    assert_true(wait_until(live_count_is, &five, 5000)); /* at once, in fact */
    for (int k = 10; k < 20; k++) {
        char id[32];
        snprintf(id, sizeof id, "e%d", k);
        assert_int_equal(trec_get("lru", id).live, k >= 15);
    }
    assert_int_equal(stats_of(lru).passivations, 15);

    touch(tiny, "tinylfu", "t", 20);
    int live = trec_live_on("tinylfu", 0);
    assert_true(live >= 1 && live <= 10);
    assert_int_equal(stats_of(tiny).passivations, (uint64_t)(20 - live));
    assert_int_equal(shoal_region_set_active_entity_limit(tiny, 5), 0);
    live = trec_live_on("tinylfu", 0);
    assert_true(live >= 1 && live <= 5);
    assert_int_equal(stats_of(tiny).passivations, (uint64_t)(20 - live));
    assert_int_equal(trec_totals().entities_live, 5 + live);
    assert_no_breach();
}

/* --- 4: remembered entities after a crash ----------------------------------------------------- */

/* Three nodes, remember-entities on, 40 entities started without a message. One of them, on the
   node about to crash, passivates (and is forgotten: gone from its shard's ORSet). The node is
   destroyed without leaving; the split-brain resolver downs it; every entity it hosted runs again
   on a survivor without a message, except the passivated one. */
static void test_remembered_after_crash(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 10;
    s.remember_entities = true;
    xstart(3, &s, NULL);

    char ids[40][32];
    for (int k = 0; k < 40; k++) {
        snprintf(ids[k], 32, "r%d", k);
        assert_int_equal(shoal_region_start_entity(tsn[0].r, ids[k]), 0);
    }
    wait_live((live_arg_t){T, ids, 40, 1, 1, -1}, 15000, "remembered entities did not start");

    /* the victim: the non-oldest node with most entities; the passivated one shares its shard
       with another entity of the victim, so its absence later is not a matter of timing */
    int oldest = tsnode_oldest(0);
    int on[3] = {0, 0, 0};
    for (int k = 0; k < 40; k++)
        on[trec_get(T, ids[k]).node]++;
    int victim = -1;
    for (int i = 0; i < 3; i++)
        if (i != oldest && (victim < 0 || on[i] > on[victim]))
            victim = i;
    char moved[40][32];
    size_t n_moved = 0;
    int passivated = -1;
    char pshard[SHOAL_SHARD_ID_MAX + 1] = "";
    for (int k = 0; k < 40; k++) {
        if (trec_get(T, ids[k]).node != victim)
            continue;
        char sk[SHOAL_SHARD_ID_MAX + 1];
        shoal_region_shard_of(tsn[0].r, ids[k], sk);
        for (int j = 0; j < 40 && passivated < 0; j++) {
            char sj[SHOAL_SHARD_ID_MAX + 1];
            shoal_region_shard_of(tsn[0].r, ids[j], sj);
            if (j != k && strcmp(sj, sk) == 0) {
                passivated = k;
                snprintf(pshard, sizeof pshard, "%s", sk);
            }
        }
        if (passivated != k)
            memcpy(moved[n_moved++], ids[k], sizeof ids[k]);
    }
    assert_true(passivated >= 0);
    assert_true(n_moved >= 2);

    /* the keys: the passivated entity is remembered in its shard's ORSets, its shard in the
       all-shards GSet; once passivated it is forgotten (read with ReadMajority) */
    shoal_consistency_t maj = c_majority(2000u * (uint32_t)tscale());
    assert_true(remembered_in_keys(0, T, pshard, ids[passivated], &maj));
    assert_true(shard_noted(0, T, pshard));
    assert_int_equal(tell(tsn[0].r, ids[passivated], "passivate"), 0);
    live_arg_t pgone = {T, &ids[passivated], 1, 0, 1, -1};
    wait_live(pgone, 10000, "the entity did not passivate");
    for (int tries = 0; remembered_in_keys(0, T, pshard, ids[passivated], &maj); tries++) {
        if (tries > 200 * tscale())
            fail_msg("the passivated entity stayed remembered");
        usleep(20000);
    }

    uint64_t recovered0 = 0;
    for (int i = 0; i < 3; i++)
        if (i != victim)
            recovered0 += stats_of(tsn[i].r).entities_recovered;
    xnode_stop(victim, true);

    wait_live((live_arg_t){T, moved, n_moved, 1, 2, victim}, 20000,
              "the crashed node's remembered entities did not come back");
    uint64_t recovered = 0;
    for (int i = 0; i < 3; i++)
        if (i != victim)
            recovered += stats_of(tsn[i].r).entities_recovered;
    assert_true(recovered - recovered0 >= n_moved);
    trec_t p = trec_get(T, ids[passivated]);
    assert_int_equal(p.live, 0);
    assert_int_equal(p.starts, 1);
    /* nobody sent a message: only StartEntity and the passivate */
    assert_int_equal(trec_totals().entities_live, 39);
    assert_no_breach();
}

/* --- 5: remembered entities after a restart of every node ------------------------------------- */

/* Three nodes with LMDB stores; 20 remembered entities, one passivated. Every node is destroyed
   (no leave) and started again as a new incarnation on the same port and directory: every
   remembered entity runs again without a message, the passivated one does not. */
static void test_remembered_after_full_restart(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 10;
    s.remember_entities = true;
    xopts_t o = {.lmdb = true, .min_members = 3, .fixed_ports = true};
    xstart(3, &s, &o);

    char ids[20][32];
    for (int k = 0; k < 20; k++) {
        snprintf(ids[k], 32, "d%d", k);
        assert_int_equal(shoal_region_start_entity(tsn[k % 3].r, ids[k]), 0);
    }
    wait_live((live_arg_t){T, ids, 20, 1, 1, -1}, 15000, "remembered entities did not start");
    assert_int_equal(tell(tsn[0].r, ids[19], "passivate"), 0);
    wait_live((live_arg_t){T, &ids[19], 1, 0, 1, -1}, 10000, "the entity did not passivate");

    /* every node's own copy has what must survive: each shard noted, each entity remembered but
       the passivated one (the writes are WriteMajority with min-cap 5: all three stores) */
    shoal_consistency_t local = c_local();
    for (int tries = 0;; tries++) {
        bool ok = true;
        for (int i = 0; i < 3 && ok; i++)
            for (int k = 0; k < 20 && ok; k++) {
                char sh[SHOAL_SHARD_ID_MAX + 1];
                shoal_region_shard_of(tsn[0].r, ids[k], sh);
                ok = shard_noted(i, T, sh) &&
                     remembered_in_keys(i, T, sh, ids[k], &local) == (k != 19);
            }
        if (ok)
            break;
        if (tries > 200 * tscale())
            fail_msg("the remembered entities did not reach every store");
        usleep(20000);
    }

    for (int i = 2; i >= 0; i--)
        xnode_stop(i, false);
    assert_int_equal(trec_totals().entities_live, 0);

    /* new incarnations, same ports and directories; no message to any entity */
    for (int i = 0; i < 3; i++)
        xnode_start(i, 0, &o);
    tsnode_wait_up(0x7, 20000);
    for (int i = 0; i < 3; i++)
        xregion(i, T, &s, tcounter_fns());
    wait_live((live_arg_t){T, ids, 19, 1, 2, -1}, 20000,
              "remembered entities did not run again after the restart");
    trec_t p = trec_get(T, ids[19]);
    assert_int_equal(p.starts, 1);
    assert_int_equal(p.live, 0);
    uint64_t recovered = 0;
    for (int i = 0; i < 3; i++)
        recovered += stats_of(tsn[i].r).entities_recovered;
    assert_true(recovered >= 19);
    assert_no_breach();
}

/* --- 6: a 10,000-entity shard recovers elsewhere ---------------------------------------------- */
static const shoal_node_t *alloc_target;

/* The shard goes to alloc_target while it is a candidate, else to the first candidate. */
static int to_target(const char *shard, int requester, const shoal_alloc_region_t *regions,
                     size_t n, void *arg)
{
    (void)shard;
    (void)requester;
    (void)arg;
    for (size_t i = 0; i < n; i++)
        if (regions[i].node == alloc_target)
            return (int)i;
    return 0;
}

#define BIG 10000

/* One shard with 10,000 remembered entities on a node that crashes: a survivor starts the shard
   once (shards_started grows by exactly one over the survivors, none stopped), recovers all
   10,000 without a message and without a failed remember read or write. */
static void test_recover_ten_thousand(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 1;
    s.remember_entities = true;
    s.allocation.kind = SHOAL_ALLOC_CUSTOM;
    s.allocation.custom.allocate = to_target;
    xstart(3, &s, NULL);
    int host = tsnode_oldest(0) == 1 ? 2 : 1;
    alloc_target = shoal_system_self(tsn[host].sys);

    char(*ids)[32] = calloc(BIG, sizeof *ids);
    assert_non_null(ids);
    for (int k = 0; k < BIG; k++) {
        snprintf(ids[k], 32, "big%d", k);
        int rc;
        while ((rc = shoal_region_start_entity(tsn[host].r, ids[k])) == SHOAL_EBUFFER)
            usleep(1000);
        assert_int_equal(rc, 0);
    }
    live_arg_t all = {T, ids, BIG, 1, 1, -1};
    if (!wait_until(all_live, &all, 60000)) {
        free(ids);
        fail_msg("10,000 remembered entities did not start (%d live)", trec_live_on(T, host));
    }
    assert_int_equal(trec_live_on(T, host), BIG);

    shoal_region_stats_t before[3];
    for (int i = 0; i < 3; i++)
        before[i] = stats_of(tsn[i].r);
    xnode_stop(host, true);

    all.min_starts = 2;
    all.not_node = host;
    bool back = wait_until(all_live, &all, 40000);
    free(ids);
    int newhost = -1;
    for (int i = 0; i < 3; i++)
        if (i != host && trec_live_on(T, i) > 0)
            newhost = newhost < 0 ? i : -2;
    if (!back)
        fail_msg("the shard did not recover on a survivor (%d and %d live)",
                 trec_live_on(T, (host + 1) % 3), trec_live_on(T, (host + 2) % 3));
    assert_true(newhost >= 0);
    assert_int_equal(trec_live_on(T, newhost), BIG);
    uint64_t started = 0, stopped = 0;
    for (int i = 0; i < 3; i++) {
        if (i == host)
            continue;
        shoal_region_stats_t st = stats_of(tsn[i].r);
        started += st.shards_started - before[i].shards_started;
        stopped += st.shards_stopped - before[i].shards_stopped;
        assert_int_equal(st.remember_failures, before[i].remember_failures);
        if (i == newhost)
            assert_int_equal(st.entities_recovered - before[i].entities_recovered, BIG);
    }
    assert_int_equal(started, 1);
    assert_int_equal(stopped, 0);
    assert_no_breach();
}

/* --- 7: a failing store ----------------------------------------------------------------------- */
typedef struct {
    shoal_store_t *store;
    int count;
} fail_arg_t;

static int fail_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    fail_arg_t *a = arg;
    shoal_memstore_fail(a->store, a->count);
    return 0;
}

/* The shard's node's store fails its next 3 writes: a new remembered entity's write fails
   (counted), the shard keeps delivering to its running entity meanwhile, and after the retry
   (shard-failure-backoff 300 ms) the new entity starts and gets its waiting messages, in order,
   once each. */
static void test_failing_store(void **state)
{
    (void)state;
    xev_reset();
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 1;
    s.remember_entities = true;
    s.shard_failure_backoff_ms = 300;
    xopts_t o = {.memstore = true};
    xstart(2, &s, &o);
    shoal_region_t *r[2];
    for (int i = 0; i < 2; i++)
        r[i] = xregion(i, "logged", &s, &logged_fns);
    tsnode_wait_registered(0x3, 0, 2, 15000);

    assert_int_equal(tell(r[0], "old", "o:1"), 0);
    char old[1][32] = {"old"};
    live_arg_t old_up = {"logged", old, 1, 1, 1, -1};
    wait_live(old_up, 10000, "the first entity did not start");
    int host = trec_get("logged", "old").node;
    char shard[SHOAL_SHARD_ID_MAX + 1];
    shoal_region_shard_of(r[0], "old", shard);
    /* its shard noted and itself remembered: nothing else of this shard is left to write */
    for (int tries = 0; !shard_noted(host, "logged", shard); tries++) {
        if (tries > 200 * tscale())
            fail_msg("the shard was not noted");
        usleep(20000);
    }
    shoal_region_stats_t before = stats_of(r[host]);

    fail_arg_t f = {xn[host].mem, 3};
    assert_int_equal(shoal_system_call(tsn[host].sys, fail_on_node, &f), 0);
    /* one sender (this thread, through one region): the new entity's messages, then one for the
       running entity, which must not wait behind the failed write */
    assert_int_equal(tell(r[0], "new", "n:1"), 0);
    assert_int_equal(tell(r[0], "new", "n:2"), 0);
    assert_int_equal(tell(r[0], "old", "o:2"), 0);
    assert_int_equal(tell(r[0], "new", "n:3"), 0);

    char fresh[1][32] = {"new"};
    wait_live((live_arg_t){"logged", fresh, 1, 1, 1, -1}, 15000,
              "the new entity did not start after the failed write");
    for (int tries = 0; trec_last("logged", "new", "n") != 3; tries++) {
        if (tries > 500 * tscale())
            fail_msg("the new entity's messages did not arrive (last %ld)",
                     trec_last("logged", "new", "n"));
        usleep(10000);
    }
    int64_t o2_at = 0, start_at = 0;
    int o2 = xev_find(0, 'r', "old", "o:2", &o2_at);
    int started = xev_find(0, 's', "new", NULL, &start_at);
    assert_true(o2 >= 0 && started >= 0);
    assert_true(o2 < started); /* the running entity did not wait */
    assert_true(xev_find(started, 'r', "new", "n:1", NULL) > started);

    shoal_region_stats_t after = stats_of(r[host]);
    assert_true(after.remember_failures > before.remember_failures);
    assert_true(after.remember_writes > before.remember_writes + 1); /* written again */
    assert_int_equal(after.shards_stopped, before.shards_stopped);
    trec_t n = trec_get("logged", "new");
    assert_int_equal(n.starts, 1);
    assert_int_equal(n.messages, 3);
    trec_t od = trec_get("logged", "old");
    assert_int_equal(od.starts, 1);
    assert_int_equal(od.messages, 2);
    shoal_consistency_t maj = c_majority(2000u * (uint32_t)tscale());
    assert_true(remembered_in_keys(host, "logged", shard, "new", &maj));
    assert_no_breach();
}

/* --- 8: StopShards ---------------------------------------------------------------------------- */
static bool hosted_nowhere(void *arg)
{
    const char *shard = arg;
    shoal_sharding_stats_t st;
    if (shoal_region_cluster_stats(tsn[0].r, 2000u * (uint32_t)tscale(), &st) != 0)
        return false;
    bool found = false, failed = false;
    for (size_t i = 0; i < st.n_regions; i++) {
        failed |= st.regions[i].failed;
        for (size_t k = 0; k < st.regions[i].n_shards; k++)
            found |= strcmp(st.regions[i].shards[k].id, shard) == 0;
    }
    bool ok = st.n_regions == 2 && !failed && !found;
    shoal_sharding_stats_free(&st);
    return ok;
}

/* StopShards from the node that does not host the shard: its entities get the stop message and
   stop, no region hosts it any more, and the next message allocates it again. */
static void test_stop_shards(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 10;
    xstart(2, &s, NULL);
    tdl_watch(0);
    tdl_watch(1);

    /* three entities of one shard, and one of another that must not be touched */
    char ids[4][32] = {"", "", "", ""};
    char shard[SHOAL_SHARD_ID_MAX + 1];
    shoal_region_shard_of(tsn[0].r, "s0", shard);
    int n = 0;
    for (int k = 0; n < 3 && k < 1000; k++) {
        char id[32], sk[SHOAL_SHARD_ID_MAX + 1];
        snprintf(id, sizeof id, "s%d", k);
        shoal_region_shard_of(tsn[0].r, id, sk);
        if (strcmp(sk, shard) == 0)
            snprintf(ids[n++], 32, "%s", id);
        else if (!ids[3][0])
            snprintf(ids[3], 32, "%s", id);
    }
    assert_int_equal(n, 3);
    assert_true(ids[3][0] != 0);
    for (int k = 0; k < 4; k++)
        assert_int_equal(tell(tsn[k % 2].r, ids[k], "a:1"), 0);
    wait_live((live_arg_t){T, ids, 4, 1, 1, -1}, 10000, "entities did not start");
    int host = host_of(T, shard);
    assert_true(host >= 0);

    const char *which[1] = {shard};
    assert_int_equal(shoal_region_stop_shards(tsn[1 - host].r, which, 1), 0);
    wait_live((live_arg_t){T, ids, 3, 0, 1, -1}, 10000, "the shard's entities did not stop");
    for (int k = 0; k < 3; k++) {
        trec_t r = trec_get(T, ids[k]);
        assert_int_equal(r.stops, 1);
        assert_int_equal(r.stop_msgs, 1); /* handed off: the stop message came */
    }
    if (!wait_until(hosted_nowhere, shard, 10000))
        fail_msg("shard %s is still hosted (host %d)", shard, host_of(T, shard));
    trec_t other = trec_get(T, ids[3]);
    assert_int_equal(other.live, 1);
    assert_int_equal(other.starts, 1);

    /* the next message allocates it again */
    assert_int_equal(tell(tsn[0].r, ids[0], "a:2"), 0);
    for (int tries = 0; trec_last(T, ids[0], "a") != 2; tries++) {
        if (tries > 500 * tscale())
            fail_msg("the message after StopShards did not arrive");
        usleep(10000);
    }
    assert_int_equal(trec_get(T, ids[0]).starts, 2);
    assert_true(host_of(T, shard) >= 0);
    assert_int_equal(tdl_total(), 0);
    assert_no_breach();
}

/* --- 9: the sharded daemon process ------------------------------------------------------------ */
#define DAEMON "daemon"

typedef struct {
    int n;      /* workers "0".."n-1" run, one incarnation each */
    int not_node;
    int upto;   /* and workers n..upto-1 run nowhere */
} workers_arg_t;

static bool workers_are(void *arg)
{
    workers_arg_t *a = arg;
    for (int k = 0; k < a->upto; k++) {
        char id[16];
        snprintf(id, sizeof id, "%d", k);
        trec_t r = trec_get(DAEMON, id);
        if (k < a->n && (r.live != 1 || (a->not_node >= 0 && r.node == a->not_node)))
            return false;
        if (k >= a->n && r.live != 0)
            return false;
    }
    return true;
}

static void wait_workers(int n, int not_node, int upto, int timeout_ms, const char *what)
{
    workers_arg_t a = {n, not_node, upto};
    if (wait_until(workers_are, &a, timeout_ms))
        return;
    for (int k = 0; k < upto; k++) {
        char id[16];
        snprintf(id, sizeof id, "%d", k);
        trec_t r = trec_get(DAEMON, id);
        fprintf(stderr, "worker %s: live %d, starts %d, node %d\n", id, r.live, r.starts, r.node);
    }
    fail_msg("%s", what);
}

typedef struct {
    int n_nodes;
    uint32_t want;
} known_arg_t;

static bool workers_known(void *arg)
{
    known_arg_t *a = arg;
    for (int i = 0; i < a->n_nodes; i++)
        if (xn[i].daemon && shoal_daemon_workers(xn[i].daemon) != a->want)
            return false;
    return true;
}

static bool any_restarted(void *arg)
{
    int *starts = arg;
    for (int k = 2; k < 6; k++) {
        char id[16];
        snprintf(id, sizeof id, "%d", k);
        if (trec_get(DAEMON, id).starts != starts[k])
            return true;
    }
    return false;
}

/* Four workers on three nodes, keep-alive 300 ms: each runs exactly once in the cluster; a node
   hosting some crashes and they run again on the survivors; rescaled to 6, six run; rescaled to
   2, workers 2..5 stop and stay stopped. */
/* What node C's coordinator would send: a BeginHandOff of `shard` (no owner to fence) to node
   `to`'s region, or (shard NULL) a message of a newer term. On C's node thread. */
typedef struct {
    int c, to;
    const char *shard;
    uint64_t term;
} forge_t;

static int forge_send(shoal_system_t *sys, void *arg)
{
    (void)sys;
    forge_t *f = arg;
    const shoal_node_t *to = shoal_system_self(tsn[f->to].sys);
    if (f->shard)
        return region_send_home(tsn[f->c].r, to, SHOAL__SHARDING__CONTROL__KIND__BEGIN_HANDOFF,
                                f->shard, NULL, 1, f->term, NULL, 0);
    Shoal__Sharding__Control m = SHOAL__SHARDING__CONTROL__INIT;
    m.kind = SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES;
    m.type_name = (char *)T;
    m.term = f->term;
    return region_send_control(tsn[f->c].r, to, &m);
}

/* A handoff its coordinator never finishes (the coordinator fenced itself mid-handoff and came
   back as a new term on the same node: chaos seed 1827442800) must not strand the shard: a region
   that saw the BeginHandOff buffers the shard's messages, and once a newer coordinator term
   speaks it registers again and asks where the shard is. Before, it buffered for ever: every ask
   timed out. (The handoff timeout is long here, so only the term can unblock it.) */
static void test_abandoned_handoff_does_not_strand_the_shard(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.handoff_timeout_ms = 600000;
    xstart(2, &s, NULL);
    char ids[1][32] = {"h0"};
    assert_int_equal(tell(tsn[0].r, ids[0], "a:1"), 0);
    wait_live((live_arg_t){T, ids, 1, 1, 1, -1}, 10000, "the entity did not start");
    char shard[SHOAL_SHARD_ID_MAX + 1];
    shoal_region_shard_of(tsn[0].r, ids[0], shard);
    /* x: the node that does not host the shard (a host delivers to its own shard directly) */
    int host = host_of(T, shard), c = tsnode_oldest(0);
    assert_true(host >= 0);
    int x = 1 - host;
    shoal_buf_t reply;
    shoal_buf_init(&reply);
    /* x learns the home first: an answer to a GetShardHome of its own arriving after the forged
       BeginHandOff would end that handoff, as the coordinator's word does */
    assert_int_equal(shoal_region_ask_sync(tsn[x].r, ids[0], "get", 3, 5000, &reply), 0);
    forge_t f = {c, x, shard, 0};
    assert_int_equal(shoal_system_call(tsn[c].sys, forge_send, &f), 0);
    int rc = 0;
    int64_t end = shoal_now_ms() + 5000;
    do /* the forged BeginHandOff arrives: from then on node x buffers */
        rc = shoal_region_ask_sync(tsn[x].r, ids[0], "get", 3, 500, &reply);
    while (rc == 0 && shoal_now_ms() < end);
    print_message("node %d's ask during the abandoned handoff: %s\n", x, shoal_strerror(rc));
    assert_int_not_equal(rc, 0);
    /* a newer coordinator term speaks */
    forge_t t = {c, x, NULL, UINT64_C(1) << 40};
    assert_int_equal(shoal_system_call(tsn[c].sys, forge_send, &t), 0);
    end = shoal_now_ms() + 10000 * tscale();
    do
        rc = shoal_region_ask_sync(tsn[x].r, ids[0], "get", 3, 1000, &reply);
    while (rc != 0 && shoal_now_ms() < end);
    print_message("after a newer term: %s (%s)\n", shoal_strerror(rc), shoal_buf_cstr(&reply));
    assert_int_equal(rc, 0);
    shoal_buf_free(&reply);
    assert_no_breach();
}

static void test_daemon_process(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    xstart(3, &s, NULL);
    int err = 0;
    for (int i = 0; i < 3; i++) {
        shoal_sharding_settings_t ds = s;
        ds.replicator = xn[i].rep;
        xn[i].daemon =
            shoal_daemon_start(tsn[i].sh, DAEMON, 4, &ds, tcounter_fns(), &tsn[i].arg, 300, &err);
        if (!xn[i].daemon)
            fail_msg("node %d: daemon did not start: %s", i, shoal_strerror(err));
    }
    wait_workers(4, -1, 8, 15000, "four workers did not start");
    assert_int_equal(shoal_daemon_workers(xn[0].daemon), 4);

    /* a node (not the coordinators' host) with workers crashes */
    int oldest = tsnode_oldest(0), victim = -1;
    for (int i = 0; i < 3; i++) {
        int mine = 0;
        for (int k = 0; k < 4; k++) {
            char id[16];
            snprintf(id, sizeof id, "%d", k);
            mine += trec_get(DAEMON, id).node == i;
        }
        if (i != oldest && mine > 0 && victim < 0)
            victim = i;
    }
    assert_true(victim >= 0);
    xnode_stop(victim, true);
    wait_workers(4, victim, 8, 20000, "the crashed node's workers did not run again elsewhere");
    int alive = victim == 0 ? 1 : 0;

    assert_int_equal(shoal_daemon_rescale(xn[alive].daemon, 6), 0);
    wait_workers(6, victim, 8, 10000, "rescaled to 6: six workers did not run");
    known_arg_t six = {3, 6};
    assert_true(wait_until(workers_known, &six, 10000));

    assert_int_equal(shoal_daemon_rescale(xn[alive].daemon, 2), 0);
    known_arg_t two = {3, 2};
    assert_true(wait_until(workers_known, &two, 10000));
    wait_workers(2, victim, 8, 10000, "rescaled to 2: workers 2..5 did not stop");
    /* and they stay stopped through several keep-alive rounds */
    int starts[6] = {0};
    for (int k = 2; k < 6; k++) {
        char id[16];
        snprintf(id, sizeof id, "%d", k);
        starts[k] = trec_get(DAEMON, id).starts;
    }
    assert_false(wait_until(any_restarted, starts, 400));
    wait_workers(2, victim, 8, 1000, "workers changed after the rescale to 2");
    assert_no_breach();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_explicit_passivation_in_flight, teardown),
        cmocka_unit_test_teardown(test_idle_passivation, teardown),
        cmocka_unit_test_teardown(test_limit_passivation, teardown),
        cmocka_unit_test_teardown(test_file_settings_take_effect, file_teardown),
        cmocka_unit_test_teardown(test_remembered_after_crash, teardown),
        cmocka_unit_test_teardown(test_remembered_after_full_restart, teardown),
        cmocka_unit_test_teardown(test_recover_ten_thousand, teardown),
        cmocka_unit_test_teardown(test_failing_store, teardown),
        cmocka_unit_test_teardown(test_stop_shards, teardown),
        cmocka_unit_test_teardown(test_daemon_process, teardown),
        cmocka_unit_test_teardown(test_abandoned_handoff_does_not_strand_the_shard, teardown),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
