/*  shards.c — see shards.h. */
#include "shards.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "members.h"

tsnode_t tsn[TS_MAX];
/* node ids by index, kept after a node is destroyed (interned: valid for the process) */
static const shoal_node_t *ids_by_index[TS_MAX];

void tshard_settings(shoal_sharding_settings_t *s)
{
    shoal_sharding_settings_fast(s);
    uint32_t k = (uint32_t)tscale();
    /* timeouts, not intervals: a slow build must not look like a stuck handoff or a lost
       coordinator, but retries and rebalance rounds keep their pace */
    s->handoff_timeout_ms *= k;
    s->shard_start_timeout_ms *= k;
    s->waiting_for_state_timeout_ms *= k;
    s->updating_state_timeout_ms *= k;
    s->shard_region_query_timeout_ms *= k;
    s->stop_message = TSHARD_STOP;
    s->stop_message_len = strlen(TSHARD_STOP);
}

/* --- the table -------------------------------------------------------------------------------- */
typedef struct {
    int live[TS_MAX];
} tshard_rec_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static zhashx_t *recs;   /* "type/id" -> trec_t */
static zhashx_t *shards; /* "type/shard" -> tshard_rec_t */
static int double_entity, double_shard, paused_receipts;
static int dl[TS_MAX][SHOAL_DL_REASONS];
static int moves_to[TS_MAX];

static void free_item(void **item)
{
    free(*item);
    *item = NULL;
}

static zhashx_t *new_table(void)
{
    zhashx_t *h = zhashx_new();
    zhashx_set_destructor(h, free_item);
    return h;
}

/* lock held; *created tells a new item (zeroed) */
static void *table_item(zhashx_t **h, const char *type, const char *id, size_t size, bool *created)
{
    if (!*h)
        *h = new_table();
    char key[SHOAL_ENTITY_ID_MAX + 64];
    snprintf(key, sizeof key, "%s/%s", type, id);
    void *it = zhashx_lookup(*h, key);
    if (created)
        *created = !it;
    if (!it) {
        it = calloc(1, size);
        if (!it)
            abort();
        zhashx_insert(*h, key, it);
    }
    return it;
}

/* lock held */
static trec_t *rec_of(const char *type, const char *id)
{
    bool created;
    trec_t *r = table_item(&recs, type, id, sizeof(trec_t), &created);
    if (created) {
        r->node = -1;
        r->tell_reply_rc = 1;
        r->release_rc = 1;
    }
    return r;
}

void trec_reset(void)
{
    pthread_mutex_lock(&lock);
    zhashx_destroy(&recs);
    zhashx_destroy(&shards);
    double_entity = double_shard = paused_receipts = 0;
    memset(dl, 0, sizeof dl);
    memset(moves_to, 0, sizeof moves_to);
    pthread_mutex_unlock(&lock);
}

trec_t trec_get(const char *type, const char *id)
{
    pthread_mutex_lock(&lock);
    trec_t out = *rec_of(type, id);
    pthread_mutex_unlock(&lock);
    return out;
}

long trec_last(const char *type, const char *id, const char *sender)
{
    trec_t r = trec_get(type, id);
    for (int k = 0; k < r.n_senders; k++)
        if (strcmp(r.senders[k].name, sender) == 0)
            return r.senders[k].last;
    return 0;
}

ttotals_t trec_totals(void)
{
    ttotals_t t = {0};
    pthread_mutex_lock(&lock);
    t.double_entity = double_entity;
    t.double_shard = double_shard;
    t.paused_receipts = paused_receipts;
    if (recs)
        for (trec_t *r = zhashx_first(recs); r; r = zhashx_next(recs)) {
            t.order_errors += r->order_errors;
            t.entities_started += r->starts;
            t.entities_live += r->live;
        }
    pthread_mutex_unlock(&lock);
    return t;
}

int trec_live_on(const char *type, int node)
{
    int n = 0;
    size_t tl = strlen(type);
    pthread_mutex_lock(&lock);
    if (recs)
        for (trec_t *r = zhashx_first(recs); r; r = zhashx_next(recs)) {
            const char *key = zhashx_cursor(recs);
            if (r->live > 0 && r->node == node && strncmp(key, type, tl) == 0 && key[tl] == '/')
                n += r->live;
        }
    pthread_mutex_unlock(&lock);
    return n;
}

void tshard_pick_ids(const char *prefix, uint32_t number_of_shards, size_t n, char (*ids)[32])
{
    assert_true(n <= number_of_shards);
    char(*taken)[SHOAL_SHARD_ID_MAX + 1] = calloc(n, sizeof *taken);
    size_t found = 0;
    for (unsigned k = 0; found < n && k < 1000000; k++) {
        char id[32], shard[SHOAL_SHARD_ID_MAX + 1];
        snprintf(id, sizeof id, "%s%u", prefix, k);
        shoal_sharding_default_shard_id(id, number_of_shards, shard);
        bool dup = false;
        for (size_t j = 0; j < found && !dup; j++)
            dup = strcmp(taken[j], shard) == 0;
        if (dup)
            continue;
        snprintf(taken[found], sizeof taken[found], "%s", shard);
        snprintf(ids[found], 32, "%s", id);
        found++;
    }
    free(taken);
    assert_int_equal(found, n);
}

/* --- the counter type ------------------------------------------------------------------------- */
typedef struct {
    char type[64];
    char id[SHOAL_ENTITY_ID_MAX + 1];
    char shard[SHOAL_SHARD_ID_MAX + 1];
    int node;
    int inc; /* this incarnation's number, from 1 */
    bool stubborn;
    shoal_sender_t held;
} tent_t;

static void *c_start(shoal_entity_t *e, void *type_arg)
{
    tcounter_arg_t *a = type_arg;
    tent_t *t = calloc(1, sizeof *t);
    if (!t)
        abort();
    snprintf(t->type, sizeof t->type, "%s", shoal_region_type_name(shoal_entity_region(e)));
    snprintf(t->id, sizeof t->id, "%s", shoal_entity_id(e));
    snprintf(t->shard, sizeof t->shard, "%s", shoal_entity_shard(e));
    t->node = a->node;
    pthread_mutex_lock(&lock);
    trec_t *r = rec_of(t->type, t->id);
    if (r->live > 0)
        double_entity++;
    r->live++;
    r->starts++;
    r->node = t->node;
    t->inc = r->starts;
    tshard_rec_t *s = table_item(&shards, t->type, t->shard, sizeof(tshard_rec_t), NULL);
    for (int m = 0; m < TS_MAX; m++)
        if (m != t->node && s->live[m] > 0) {
            double_shard++;
            fprintf(stderr, "shards: shard %s/%s started on node %d while live on node %d\n",
                    t->type, t->shard, t->node, m);
        }
    s->live[t->node]++;
    pthread_mutex_unlock(&lock);
    return t;
}

static void c_stop(shoal_entity_t *e, void *state, void *type_arg)
{
    (void)e;
    (void)type_arg;
    tent_t *t = state;
    pthread_mutex_lock(&lock);
    trec_t *r = rec_of(t->type, t->id);
    r->live--;
    r->stops++;
    tshard_rec_t *s = table_item(&shards, t->type, t->shard, sizeof(tshard_rec_t), NULL);
    s->live[t->node]--;
    pthread_mutex_unlock(&lock);
    free(t);
}

/* lock held */
static void numbered(tent_t *t, trec_t *r, const char *sender, size_t sender_len, long seq)
{
    int k = 0;
    while (k < r->n_senders && !(strlen(r->senders[k].name) == sender_len &&
                                 memcmp(r->senders[k].name, sender, sender_len) == 0))
        k++;
    if (k == r->n_senders) {
        if (k == TREC_SENDERS || sender_len >= sizeof r->senders[k].name) {
            r->order_errors++;
            return;
        }
        memcpy(r->senders[k].name, sender, sender_len);
        r->senders[k].name[sender_len] = 0;
        r->n_senders++;
    }
    if (seq != r->senders[k].last + 1) {
        r->order_errors++;
        fprintf(stderr, "shards: %s/%s got %s:%ld after %ld\n", t->type, t->id, r->senders[k].name,
                seq, r->senders[k].last);
    }
    r->senders[k].last = seq;
    r->senders[k].count++;
    r->messages++;
    if (r->n_log < TREC_LOG)
        r->inc_log[r->n_log++] = t->inc;
}

static void c_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *type_arg)
{
    (void)type_arg;
    tent_t *t = state;
    char m[512];
    if (len >= sizeof m)
        len = sizeof m - 1;
    memcpy(m, msg, len);
    m[len] = 0;
    const char *body = m;
    const char *bar = strchr(m, '|');
    if (bar)
        body = bar + 1;
    if (strcmp(body, TSHARD_STOP) != 0 && t->node >= 0 && t->node < TS_MAX && tsn[t->node].cl &&
        shoal_cluster_paused(tsn[t->node].cl)) {
        pthread_mutex_lock(&lock);
        paused_receipts++;
        pthread_mutex_unlock(&lock);
        fprintf(stderr, "shards: %s/%s got '%s' on node %d while it was paused\n", t->type, t->id,
                m, t->node);
    }
    char reply[512];
    if (strcmp(body, TSHARD_STOP) == 0) {
        pthread_mutex_lock(&lock);
        rec_of(t->type, t->id)->stop_msgs++;
        pthread_mutex_unlock(&lock);
        if (!t->stubborn)
            shoal_entity_stop(e);
    } else if (strcmp(body, "get") == 0) {
        pthread_mutex_lock(&lock);
        trec_t *r = rec_of(t->type, t->id);
        int n = snprintf(reply, sizeof reply, "%d", r->messages);
        for (int k = 0; k < r->n_senders && n < (int)sizeof reply; k++)
            n += snprintf(reply + n, sizeof reply - (size_t)n, " %s:%ld", r->senders[k].name,
                          r->senders[k].last);
        pthread_mutex_unlock(&lock);
        shoal_entity_reply(e, reply, strlen(reply));
    } else if (strcmp(body, "whoami") == 0) {
        snprintf(reply, sizeof reply, "%d %d", t->node, t->inc);
        shoal_entity_reply(e, reply, strlen(reply));
    } else if (strcmp(body, "hold") == 0) {
        t->held = shoal_entity_sender(e);
    } else if (strcmp(body, "release") == 0) {
        int rc = shoal_region_reply(shoal_entity_region(e), &t->held, "released", 8);
        pthread_mutex_lock(&lock);
        rec_of(t->type, t->id)->release_rc = rc;
        pthread_mutex_unlock(&lock);
    } else if (strcmp(body, "tellreply") == 0) {
        int rc = shoal_entity_reply(e, "x", 1);
        pthread_mutex_lock(&lock);
        rec_of(t->type, t->id)->tell_reply_rc = rc;
        pthread_mutex_unlock(&lock);
    } else if (strcmp(body, "passivate") == 0) {
        shoal_entity_passivate(e);
    } else if (strcmp(body, "stubborn") == 0) {
        t->stubborn = true;
    } else if (strncmp(body, "fwd:", 4) == 0) {
        char *to = (char *)body + 4;
        char *rest = strchr(to, ':');
        if (rest) {
            *rest++ = 0;
            shoal_region_tell(shoal_entity_region(e), to, rest, strlen(rest));
        }
    } else {
        const char *colon = strrchr(body, ':');
        char *end = NULL;
        long seq = colon ? strtol(colon + 1, &end, 10) : 0;
        pthread_mutex_lock(&lock);
        trec_t *r = rec_of(t->type, t->id);
        if (colon && end && *end == 0 && seq > 0)
            numbered(t, r, body, (size_t)(colon - body), seq);
        else
            r->order_errors++; /* nothing the tests send */
        pthread_mutex_unlock(&lock);
    }
}

static const shoal_entity_fns_t counter_fns = {
    .start = c_start,
    .receive = c_receive,
    .stop = c_stop,
};

const shoal_entity_fns_t *tcounter_fns(void)
{
    return &counter_fns;
}

/* The saver: each message becomes the entity's saved state, "saved" answered once it is. */
static void *saver_start(shoal_entity_t *e, void *arg)
{
    (void)e;
    (void)arg;
    return (void *)&saver_start; /* any non-NULL state */
}

static void saver_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)state;
    (void)arg;
    shoal_entity_save_reply(e, msg, len, "saved", 5);
}

static void saver_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)state;
    (void)arg;
}

static const shoal_entity_fns_t saver_fns = {saver_start, saver_receive, saver_stop, NULL};

const shoal_entity_fns_t *tsaver_fns(void)
{
    return &saver_fns;
}

/* --- nodes ------------------------------------------------------------------------------------ */
shoal_region_t *tsnode_region(int i, const char *type, const shoal_sharding_settings_t *s,
                              bool proxy)
{
    shoal_sharding_settings_t d;
    if (!s) {
        tshard_settings(&d);
        s = &d;
    }
    int err = 0;
    tsn[i].arg.node = i;
    shoal_region_t *r =
        proxy ? shoal_region_start_proxy(tsn[i].sh, type, s, &err)
              : shoal_region_start(tsn[i].sh, type, s, &counter_fns, &tsn[i].arg, &err);
    if (!r)
        fail_msg("node %d: region %s did not start: %s", i, type, shoal_strerror(err));
    if (strcmp(type, TSHARD_TYPE) == 0)
        tsn[i].r = r;
    return r;
}

void tsnode_start(int i, const tsnode_opts_t *o)
{
    tsnode_opts_t none = {0};
    if (!o)
        o = &none;
    shoal_cluster_settings_t cs;
    if (o->cluster)
        cs = *o->cluster;
    else
        tmember_settings(&cs);
    if (o->app_version)
        cs.app_version = o->app_version;
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    char endpoint[64] = "tcp://127.0.0.1:0";
    if (o->port)
        snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", o->port);
    ss.endpoint = endpoint;
    int err = 0;
    tsn[i].sys = shoal_system_new(&ss, &err);
    assert_non_null(tsn[i].sys);
    __atomic_store_n(&ids_by_index[i], shoal_system_self(tsn[i].sys), __ATOMIC_SEQ_CST);
    tsn[i].cl = shoal_cluster_new(tsn[i].sys, &cs, &err);
    assert_non_null(tsn[i].cl);
    tsn[i].sh = shoal_sharding_new(tsn[i].cl, &err);
    if (!tsn[i].sh)
        fail_msg("node %d: sharding did not start: %s", i, shoal_strerror(err));
    if (!o->no_region)
        tsnode_region(i, TSHARD_TYPE, o->sharding, o->proxy);
    if (o->no_join) {
        return;
    } else if (o->seed < 0 || o->seed == i) {
        assert_int_equal(shoal_cluster_join(tsn[i].cl, NULL, 0), 0);
    } else {
        const char *seed = shoal_system_endpoint(tsn[o->seed].sys);
        assert_int_equal(shoal_cluster_join(tsn[i].cl, &seed, 1), 0);
    }
}

shoal_replicator_t *tsnode_durable_replicator(int i, const char *dir, shoal_durable_t **durable)
{
    static const char *keys[] = {"shard-*"};
    shoal_durable_settings_t ds;
    shoal_durable_settings_default(&ds);
    ds.dir = dir;
    ds.nosync = true; /* the process keeps running: the page cache is enough */
    char err[256];
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    *durable = shoal_durable_open(&ds, &open_err);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (!*durable)
        fail_msg("node %d: durable store: %s", i, err);
    shoal_replicator_settings_t rs;
    tmember_data_settings(&rs);
    rs.durable_keys = keys;
    rs.n_durable_keys = 1;
    rs.store = shoal_durable_store(*durable, "");
    assert_non_null(rs.store);
    int e = 0;
    shoal_replicator_t *rep = shoal_replicator_new(tsn[i].sys, &rs, &e);
    if (!rep)
        fail_msg("node %d: replicator: %s", i, shoal_strerror(e));
    assert_int_equal(shoal_cluster_follow(tsn[i].cl, rep), 0);
    return rep;
}

void tsnode_start_cluster(int n, const tsnode_opts_t *o)
{
    for (int i = 0; i < n; i++) {
        tsnode_opts_t oi = o ? *o : (tsnode_opts_t){0};
        oi.seed = 0;
        tsnode_start(i, &oi);
        tsn[i].arg.node = i;
        if (i == 0)
            tsnode_wait_up(1u, 15000);
    }
    tsnode_wait_up((1u << n) - 1, 20000);
}

void tsnode_stop(int i)
{
    shoal_sharding_destroy(&tsn[i].sh);
    shoal_cluster_destroy(&tsn[i].cl);
    shoal_system_destroy(&tsn[i].sys);
    tsn[i].r = NULL;
}

void tsnode_crash(int i)
{
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(tsn[i].sys, NULL, &cut), 0);
    tsnode_stop(i);
}

static tsender_t *senders[8]; /* started and not yet freed */

int tsnode_teardown(void **state)
{
    (void)state;
    for (int k = 0; k < 8; k++)
        tsender_free(&senders[k]);
    for (int i = 0; i < TS_MAX; i++)
        tsnode_stop(i);
    memset(tsn, 0, sizeof tsn);
    trec_reset();
    return 0;
}

int tsnode_index(const shoal_node_t *node)
{
    for (int i = 0; i < TS_MAX; i++)
        if (node && __atomic_load_n(&ids_by_index[i], __ATOMIC_SEQ_CST) == node)
            return i;
    return -1;
}

typedef struct {
    unsigned mask;
} up_arg_t;

static bool in_mask(unsigned mask, const shoal_node_t *node)
{
    int i = tsnode_index(node);
    return i >= 0 && ((mask >> i) & 1) && tsn[i].sys;
}

static bool all_up(void *arg)
{
    unsigned mask = ((up_arg_t *)arg)->mask;
    size_t want = (size_t)__builtin_popcount(mask);
    for (int i = 0; i < TS_MAX; i++) {
        if (!((mask >> i) & 1) || !tsn[i].cl)
            continue;
        shoal_cluster_view_t v;
        if (shoal_cluster_view(tsn[i].cl, &v) != 0)
            return false;
        bool ok = v.converged && v.n_members == want;
        for (size_t k = 0; ok && k < v.n_members; k++)
            ok = v.members[k].status == SHOAL_MEMBER_UP && v.members[k].reachable &&
                 in_mask(mask, v.members[k].node);
        shoal_cluster_view_free(&v);
        if (!ok)
            return false;
    }
    return true;
}

void tsnode_wait_up(unsigned mask, int timeout_ms)
{
    up_arg_t a = {mask};
    if (wait_until(all_up, &a, timeout_ms))
        return;
    for (int i = 0; i < TS_MAX; i++) {
        if (!((mask >> i) & 1) || !tsn[i].cl)
            continue;
        shoal_cluster_view_t v;
        if (shoal_cluster_view(tsn[i].cl, &v) != 0)
            continue;
        shoal_buf_t b = {0};
        shoal_cluster_view_json(&v, &b);
        fprintf(stderr, "node %d: %s\n", i, shoal_buf_cstr(&b));
        shoal_buf_free(&b);
        shoal_cluster_view_free(&v);
    }
    fail_msg("nodes 0x%x did not converge with everyone Up", mask);
}

int tsnode_oldest(int viewer)
{
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(tsn[viewer].cl, &v), 0);
    const shoal_node_t *oldest = NULL;
    uint64_t lowest = UINT64_MAX;
    for (size_t k = 0; k < v.n_members; k++)
        if (v.members[k].status == SHOAL_MEMBER_UP && v.members[k].up_number < lowest) {
            lowest = v.members[k].up_number;
            oldest = v.members[k].node;
        }
    shoal_cluster_view_free(&v);
    int i = tsnode_index(oldest);
    assert_true(i >= 0);
    return i;
}

typedef struct {
    unsigned mask;
    int asker;
    size_t regions;
} reg_arg_t;

static bool registered(void *arg)
{
    reg_arg_t *a = arg;
    for (int i = 0; i < TS_MAX; i++)
        if (((a->mask >> i) & 1) && tsn[i].r && !shoal_sharding_healthy(tsn[i].sh, NULL, 0))
            return false;
    const shoal_node_t **nodes = NULL;
    size_t n = 0;
    if (shoal_region_current_regions(tsn[a->asker].r, 1000u * (uint32_t)tscale(), &nodes, &n) != 0)
        return false;
    free(nodes);
    return n == a->regions;
}

void tsnode_wait_registered(unsigned mask, int asker, size_t regions, int timeout_ms)
{
    reg_arg_t a = {mask, asker, regions};
    if (!wait_until(registered, &a, timeout_ms))
        fail_msg("regions 0x%x did not all register (%zu expected at node %d's coordinator)", mask,
                 regions, asker);
}

int tsnode_shard_count(int i)
{
    shoal_region_state_t st;
    if (!tsn[i].r || shoal_region_state(tsn[i].r, false, &st) != 0)
        return -1;
    int n = (int)st.n_shards;
    shoal_region_state_free(&st);
    return n;
}

/* --- dead letters and moves ------------------------------------------------------------------- */
static void on_dead_letter(shoal_region_t *r, shoal_dead_letter_t reason, const char *entity_id,
                           const void *msg, size_t len, void *arg)
{
    (void)r;
    int i = (int)(intptr_t)arg;
    pthread_mutex_lock(&lock);
    if ((unsigned)reason < SHOAL_DL_REASONS)
        dl[i][reason]++;
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "shards: node %d: dead letter %s for %s (%zu bytes: %.*s)\n", i,
            shoal_dead_letter_name(reason), entity_id ? entity_id : "-", len,
            (int)(len < 40 ? len : 40), msg ? (const char *)msg : "");
}

void tdl_watch(int i)
{
    assert_true(shoal_region_on_dead_letter(tsn[i].r, on_dead_letter, (void *)(intptr_t)i) > 0);
}

int tdl_count(int node, shoal_dead_letter_t reason)
{
    pthread_mutex_lock(&lock);
    int n = dl[node][reason];
    pthread_mutex_unlock(&lock);
    return n;
}

int tdl_total(void)
{
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < TS_MAX; i++)
        for (int k = 0; k < SHOAL_DL_REASONS; k++)
            n += dl[i][k];
    pthread_mutex_unlock(&lock);
    return n;
}

static void on_moved(shoal_region_t *r, const char *shard, const shoal_node_t *from,
                     const shoal_node_t *to, void *arg)
{
    (void)r;
    (void)shard;
    (void)from;
    (void)arg;
    int i = tsnode_index(to);
    pthread_mutex_lock(&lock);
    if (i >= 0)
        moves_to[i]++;
    pthread_mutex_unlock(&lock);
}

void tmoves_watch(int i)
{
    assert_true(shoal_region_on_shard_moved(tsn[i].r, on_moved, NULL) > 0);
}

int tmoves_to(int node)
{
    pthread_mutex_lock(&lock);
    int n = moves_to[node];
    pthread_mutex_unlock(&lock);
    return n;
}

/* --- asks ------------------------------------------------------------------------------------- */
static void task_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    task_t *t = arg;
    pthread_mutex_lock(&lock);
    t->calls++;
    t->status = status;
    if (len >= sizeof t->reply)
        len = sizeof t->reply - 1;
    if (reply)
        memcpy(t->reply, reply, len);
    else
        len = 0;
    t->reply[len] = 0;
    pthread_mutex_unlock(&lock);
}

int task_ask(shoal_region_t *r, const char *id, const char *msg, uint32_t timeout_ms, task_t *t)
{
    pthread_mutex_lock(&lock);
    memset(t, 0, sizeof *t);
    pthread_mutex_unlock(&lock);
    return shoal_region_ask(r, id, msg, strlen(msg), timeout_ms, task_done, t);
}

task_t task_get(const task_t *t)
{
    pthread_mutex_lock(&lock);
    task_t out = *t;
    pthread_mutex_unlock(&lock);
    return out;
}

/* --- senders ---------------------------------------------------------------------------------- */
static void *sender_main(void *arg)
{
    tsender_t *s = arg;
    char msg[64];
    while (!__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) {
        for (size_t k = 0; k < s->n_ids; k++) {
            long seq = s->sent[k] + 1;
            int n = snprintf(msg, sizeof msg, "%s:%ld", s->name, seq);
            int rc = shoal_region_tell(s->r, s->ids[k], msg, (size_t)n);
            if (rc == 0)
                s->sent[k] = seq;
            else if (rc == SHOAL_EBUFFER)
                s->refused++; /* not accepted: the same seq goes again next round */
            else {
                s->errors++;
                s->last_error = rc;
            }
        }
        __atomic_add_fetch(&s->rounds, 1, __ATOMIC_SEQ_CST);
        if (s->pause_us) {
            struct timespec ts = {0, (long)s->pause_us * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

tsender_t *tsender_start(shoal_region_t *r, const char *name, char (*ids)[32], size_t n_ids,
                         int pause_us)
{
    tsender_t *s = calloc(1, sizeof *s);
    s->r = r;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ids = calloc(n_ids, sizeof *s->ids);
    memcpy(s->ids, ids, n_ids * sizeof *ids);
    s->n_ids = n_ids;
    s->pause_us = pause_us;
    s->sent = calloc(n_ids, sizeof *s->sent);
    assert_int_equal(pthread_create(&s->th, NULL, sender_main, s), 0);
    s->running = true;
    for (int k = 0; k < 8; k++)
        if (!senders[k]) {
            senders[k] = s;
            break;
        }
    return s;
}

bool tsender_wait_rounds(tsender_t *s, long rounds, int timeout_ms)
{
    long until = __atomic_load_n(&s->rounds, __ATOMIC_SEQ_CST) + rounds;
    int64_t end = shoal_now_ms() + (int64_t)timeout_ms * tscale();
    while (__atomic_load_n(&s->rounds, __ATOMIC_SEQ_CST) < until) {
        if (shoal_now_ms() > end)
            return false;
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL);
    }
    return true;
}

void tsender_stop(tsender_t *s)
{
    if (s->running) {
        __atomic_store_n(&s->stop, 1, __ATOMIC_SEQ_CST);
        pthread_join(s->th, NULL);
        s->running = false;
    }
}

void tsender_free(tsender_t **s_p)
{
    tsender_t *s = *s_p;
    if (!s)
        return;
    tsender_stop(s);
    for (int k = 0; k < 8; k++)
        if (senders[k] == s)
            senders[k] = NULL;
    free(s->ids);
    free(s->sent);
    free(s);
    *s_p = NULL;
}

typedef struct {
    const tsender_t *s;
    const char *type;
} all_received_t;

static bool all_received(void *arg)
{
    all_received_t *a = arg;
    for (size_t k = 0; k < a->s->n_ids; k++) {
        trec_t r = trec_get(a->type, a->s->ids[k]);
        long last = 0, count = 0;
        for (int j = 0; j < r.n_senders; j++)
            if (strcmp(r.senders[j].name, a->s->name) == 0) {
                last = r.senders[j].last;
                count = r.senders[j].count;
            }
        if (last != a->s->sent[k] || count != a->s->sent[k])
            return false;
    }
    return true;
}

bool tsender_all_received(const tsender_t *s, const char *type, int timeout_ms)
{
    all_received_t a = {s, type};
    if (wait_until(all_received, &a, timeout_ms))
        return true;
    for (size_t k = 0; k < s->n_ids; k++) {
        long last = trec_last(type, s->ids[k], s->name);
        if (last != s->sent[k])
            fprintf(stderr, "shards: %s/%s: sender %s sent %ld, last received %ld\n", type,
                    s->ids[k], s->name, s->sent[k], last);
    }
    return false;
}
