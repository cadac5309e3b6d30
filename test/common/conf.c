/*  conf.c — see conf.h. */
#include "conf.h"

#include "cluster.h"
#include "members.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

cmem_t cm[CM_MAX];
static bool own_store[CM_MAX];

void cm_cluster_settings(shoal_cluster_settings_t *s)
{
    tmember_settings(s);
    s->sbr_strategy = SHOAL_SBR_OFF;
}

void cm_start(int i, const cm_opts_t *o)
{
    cm_opts_t none = {0};
    if (!o)
        o = &none;
    shoal_cluster_settings_t cs;
    if (o->cluster)
        cs = *o->cluster;
    else
        cm_cluster_settings(&cs);
    shoal_replicator_settings_t rs;
    if (o->rep)
        rs = *o->rep;
    else
        tmember_data_settings(&rs);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = o->endpoint ? o->endpoint : "tcp://127.0.0.1:0";
    if (o->max_frame_bytes)
        ss.max_frame_bytes = o->max_frame_bytes;
    int err = 0;
    /* a restart on an address just left finds ZeroMQ still closing the old listener */
    for (int64_t end = shoal_now_ms() + 5000;
         !(cm[i].sys = shoal_system_new(&ss, &err)) && shoal_now_ms() < end;) {
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    assert_non_null(cm[i].sys);
    cm[i].cl = shoal_cluster_new(cm[i].sys, &cs, &err);
    assert_non_null(cm[i].cl);
    own_store[i] = !o->store;
    cm[i].store = o->store ? o->store : shoal_memstore_new();
    rs.store = cm[i].store;
    cm[i].rep = shoal_replicator_new(cm[i].sys, &rs, &err);
    assert_non_null(cm[i].rep);
    assert_int_equal(shoal_cluster_follow(cm[i].cl, cm[i].rep), 0);
    if (o->rep2) {
        shoal_replicator_settings_t r2 = *o->rep2;
        cm[i].rep2 = shoal_replicator_new(cm[i].sys, &r2, &err);
        assert_non_null(cm[i].rep2);
        assert_int_equal(shoal_cluster_follow(cm[i].cl, cm[i].rep2), 0);
    }
}

void cm_join(int i, int seed)
{
    if (seed == i) {
        assert_int_equal(shoal_cluster_join(cm[i].cl, NULL, 0), 0);
        return;
    }
    const char *ep = shoal_system_endpoint(cm[seed].sys);
    assert_int_equal(shoal_cluster_join(cm[i].cl, &ep, 1), 0);
}

void cm_stop(int i)
{
    if (!cm[i].sys)
        return;
    shoal_cluster_destroy(&cm[i].cl);
    shoal_replicator_destroy(&cm[i].rep2);
    shoal_replicator_destroy(&cm[i].rep);
    shoal_system_destroy(&cm[i].sys);
    if (own_store[i])
        shoal_memstore_destroy(&cm[i].store);
    memset(&cm[i], 0, sizeof cm[i]);
    own_store[i] = false;
}

int cm_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < CM_MAX; i++)
        cm_stop(i);
    return 0;
}

/* --- conditions --------------------------------------------------------------------------------
 */
typedef struct {
    unsigned mask;
} up_arg_t;

static bool view_all_up(unsigned mask, const shoal_cluster_view_t *v)
{
    size_t want = 0;
    for (int j = 0; j < CM_MAX; j++)
        if ((mask >> j) & 1)
            want++;
    if (!v->converged || v->n_members != want)
        return false;
    for (int j = 0; j < CM_MAX; j++) {
        if (!((mask >> j) & 1))
            continue;
        const shoal_member_t *m = shoal_cluster_view_member(v, shoal_system_self(cm[j].sys));
        if (!m || m->status != SHOAL_MEMBER_UP || !m->reachable)
            return false;
    }
    return true;
}

static bool all_up(void *arg)
{
    up_arg_t *a = arg;
    for (int i = 0; i < CM_MAX; i++) {
        if (!((a->mask >> i) & 1))
            continue;
        if (!cm[i].cl)
            return false;
        shoal_cluster_view_t v;
        if (shoal_cluster_view(cm[i].cl, &v) != 0)
            return false;
        bool ok = view_all_up(a->mask, &v);
        shoal_cluster_view_free(&v);
        if (!ok)
            return false;
    }
    return true;
}

void cm_wait_up(unsigned mask, int timeout_ms)
{
    up_arg_t a = {mask};
    if (wait_until(all_up, &a, timeout_ms))
        return;
    for (int i = 0; i < CM_MAX; i++) {
        if (!((mask >> i) & 1) || !cm[i].cl)
            continue;
        shoal_cluster_view_t v;
        if (shoal_cluster_view(cm[i].cl, &v) != 0)
            continue;
        shoal_buf_t b = {0};
        shoal_cluster_view_json(&v, &b);
        fprintf(stderr, "node %d: %s\n", i, shoal_buf_cstr(&b));
        shoal_buf_free(&b);
        shoal_cluster_view_free(&v);
    }
    fail_msg("nodes 0x%x did not converge with everyone Up", mask);
}

typedef struct {
    int i, j;
    shoal_member_status_t status;
    bool reachable;
    const shoal_node_t *node;
} member_arg_t;

static bool member_is(void *arg)
{
    member_arg_t *a = arg;
    shoal_cluster_view_t v;
    if (!cm[a->i].cl || shoal_cluster_view(cm[a->i].cl, &v) != 0)
        return false;
    const shoal_member_t *m = shoal_cluster_view_member(&v, a->node);
    bool ok = a->status ? (m && m->status == a->status && m->reachable == a->reachable) : !m;
    shoal_cluster_view_free(&v);
    return ok;
}

bool cm_wait_member(int i, int j, shoal_member_status_t status, bool reachable, int timeout_ms)
{
    member_arg_t a = {i, j, status, reachable, shoal_system_self(cm[j].sys)};
    return wait_until(member_is, &a, timeout_ms);
}

typedef struct {
    unsigned mask;
    int n;
} rc_arg_t;

static bool replicas_are(void *arg)
{
    rc_arg_t *a = arg;
    for (int i = 0; i < CM_MAX; i++)
        if (((a->mask >> i) & 1) && shoal_replicator_replica_count_sync(cm[i].rep) != a->n)
            return false;
    return true;
}

void cm_wait_replicas(unsigned mask, int n, int timeout_ms)
{
    rc_arg_t a = {mask, n};
    if (!wait_until(replicas_are, &a, timeout_ms))
        fail_msg("nodes 0x%x do not all count %d replicas", mask, n);
}

static bool full_count_is(void *arg)
{
    int n = *(const int *)arg;
    for (int i = 0; i < n; i++)
        if (shoal_replicator_replica_count_sync(cm[i].rep2) != n)
            return false;
    return true;
}

void cm_start_delta_and_full(int n)
{
    static const char *roles[] = {"full"};
    shoal_cluster_settings_t cs;
    cm_cluster_settings(&cs);
    cs.roles = roles;
    cs.n_roles = 1;
    shoal_replicator_settings_t full;
    tmember_data_settings(&full);
    full.role = "full";
    full.delta_enabled = false;
    cm_opts_t o = {.cluster = &cs, .rep2 = &full};
    for (int i = 0; i < n; i++) {
        cm_start(i, &o);
        cm_join(i, 0);
    }
    cm_wait_up((1u << n) - 1, 20000);
    if (!wait_until(full_count_is, &n, 15000))
        fail_msg("the replicators of role \"full\" do not all count %d replicas", n);
    cm_wait_replicas((1u << n) - 1, n, 15000);
}

static void fault_pair(int a, int b, bool cut)
{
    shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .cut = cut};
    assert_int_equal(shoal_system_fault(cm[a].sys, shoal_system_endpoint(cm[b].sys), &f), 0);
    assert_int_equal(shoal_system_fault(cm[b].sys, shoal_system_endpoint(cm[a].sys), &f), 0);
}

void cm_cut(int a, int b)
{
    fault_pair(a, b, true);
}

void cm_pass(int a, int b)
{
    fault_pair(a, b, false);
}

/* --- operations --------------------------------------------------------------------------------
 */
typedef struct {
    const shoal_node_t *self;
    int64_t n;
    const char *elems;
} op_arg_t;

static const shoal_node_t *self_of(shoal_replicator_t *r)
{
    return shoal_system_self(shoal_replicator_system(r));
}

static int incr_modify(shoal_crdt_t *v, void *arg)
{
    op_arg_t *a = arg;
    return shoal_gcounter_increment(v, a->self, (uint64_t)a->n);
}

int cm_incr(shoal_replicator_t *r, const char *key, uint64_t n, shoal_consistency_t c)
{
    op_arg_t a = {self_of(r), (int64_t)n, NULL};
    return shoal_replicator_update_sync(r, key, shoal_gcounter_new(), &c, incr_modify, &a);
}

int cm_gcounter(shoal_replicator_t *r, const char *key, shoal_consistency_t c, uint64_t *v)
{
    shoal_crdt_t *x = NULL;
    int st = shoal_replicator_get_sync(r, key, NULL, &c, &x);
    *v = x && shoal_type_tag(shoal_crdt_type(x)) == SHOAL_GCOUNTER ? shoal_gcounter_value(x) : 0;
    shoal_crdt_destroy(&x);
    return st;
}

static int pn_modify(shoal_crdt_t *v, void *arg)
{
    op_arg_t *a = arg;
    return shoal_pncounter_add(v, a->self, a->n);
}

int cm_pncounter_add(shoal_replicator_t *r, const char *key, int64_t n, shoal_consistency_t c)
{
    op_arg_t a = {self_of(r), n, NULL};
    return shoal_replicator_update_sync(r, key, shoal_pncounter_new(), &c, pn_modify, &a);
}

int cm_pncounter(shoal_replicator_t *r, const char *key, shoal_consistency_t c, int64_t *v)
{
    shoal_crdt_t *x = NULL;
    int st = shoal_replicator_get_sync(r, key, NULL, &c, &x);
    *v = 0;
    if (x && shoal_type_tag(shoal_crdt_type(x)) == SHOAL_PNCOUNTER)
        shoal_pncounter_value(x, v);
    shoal_crdt_destroy(&x);
    return st;
}

/* Calls fn on each comma-separated element of a->elems. */
static int each_elem(op_arg_t *a, shoal_crdt_t *v,
                     int (*fn)(shoal_crdt_t *v, const shoal_node_t *self, const char *e, size_t n))
{
    for (const char *p = a->elems; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        int rc = fn(v, a->self, p, n);
        if (rc != 0)
            return rc;
        p += n + (end ? 1 : 0);
    }
    return 0;
}

static int add_one(shoal_crdt_t *v, const shoal_node_t *self, const char *e, size_t n)
{
    if (shoal_type_tag(shoal_crdt_type(v)) == SHOAL_GSET)
        return shoal_gset_add(v, e, n);
    return shoal_orset_add(v, self, e, n);
}

static int remove_one(shoal_crdt_t *v, const shoal_node_t *self, const char *e, size_t n)
{
    int rc = shoal_orset_remove(v, self, e, n);
    return rc == SHOAL_ENOTFOUND ? 0 : rc;
}

static int add_modify(shoal_crdt_t *v, void *arg)
{
    return each_elem(arg, v, add_one);
}

static int remove_modify(shoal_crdt_t *v, void *arg)
{
    return each_elem(arg, v, remove_one);
}

int cm_set_add(shoal_replicator_t *r, const char *key, shoal_type_tag_t type, const char *elems,
               shoal_consistency_t c)
{
    op_arg_t a = {self_of(r), 0, elems};
    shoal_crdt_t *init = type == SHOAL_GSET ? shoal_gset_new() : shoal_orset_new();
    return shoal_replicator_update_sync(r, key, init, &c, add_modify, &a);
}

int cm_set_remove(shoal_replicator_t *r, const char *key, const char *elems, shoal_consistency_t c)
{
    op_arg_t a = {self_of(r), 0, elems};
    return shoal_replicator_update_sync(r, key, shoal_orset_new(), &c, remove_modify, &a);
}

typedef struct {
    char items[64][64];
    int n;
} elems_t;

static int collect(const void *elem, size_t len, void *arg)
{
    elems_t *e = arg;
    if (e->n < 64) {
        size_t k = len < 63 ? len : 63;
        memcpy(e->items[e->n], elem, k);
        e->items[e->n][k] = '\0';
        e->n++;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(a, b);
}

int cm_set_get(shoal_replicator_t *r, const char *key, shoal_consistency_t c, char *out, size_t cap)
{
    shoal_crdt_t *x = NULL;
    int st = shoal_replicator_get_sync(r, key, NULL, &c, &x);
    out[0] = '\0';
    if (!x)
        return st;
    elems_t e = {.n = 0};
    if (shoal_type_tag(shoal_crdt_type(x)) == SHOAL_GSET)
        shoal_gset_foreach(x, collect, &e);
    else if (shoal_type_tag(shoal_crdt_type(x)) == SHOAL_ORSET)
        shoal_orset_foreach(x, collect, &e);
    qsort(e.items, (size_t)e.n, sizeof e.items[0], cmp_str);
    size_t len = 0;
    for (int k = 0; k < e.n; k++)
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", k ? "," : "",
                                e.items[k]);
    shoal_crdt_destroy(&x);
    return st;
}

typedef struct {
    shoal_replicator_t *r;
    const char *key;
    const char *want_s;
    uint64_t want_u;
    int64_t want_i;
} wait_arg_t;

static bool set_is(void *arg)
{
    wait_arg_t *a = arg;
    char got[1024];
    return cm_set_get(a->r, a->key, c_local(), got, sizeof got) == 0 && strcmp(got, a->want_s) == 0;
}

bool cm_wait_set(shoal_replicator_t *r, const char *key, const char *want, int timeout_ms)
{
    wait_arg_t a = {r, key, want, 0, 0};
    return wait_until(set_is, &a, timeout_ms);
}

static bool gcounter_is(void *arg)
{
    wait_arg_t *a = arg;
    uint64_t v = 0;
    return cm_gcounter(a->r, a->key, c_local(), &v) == 0 && v == a->want_u;
}

bool cm_wait_gcounter(shoal_replicator_t *r, const char *key, uint64_t want, int timeout_ms)
{
    wait_arg_t a = {r, key, NULL, want, 0};
    return wait_until(gcounter_is, &a, timeout_ms);
}

static bool pncounter_is(void *arg)
{
    wait_arg_t *a = arg;
    int64_t v = 0;
    return cm_pncounter(a->r, a->key, c_local(), &v) == 0 && v == a->want_i;
}

bool cm_wait_pncounter(shoal_replicator_t *r, const char *key, int64_t want, int timeout_ms)
{
    wait_arg_t a = {r, key, NULL, 0, want};
    return wait_until(pncounter_is, &a, timeout_ms);
}

static bool deleted_is(void *arg)
{
    wait_arg_t *a = arg;
    shoal_crdt_t *x = NULL;
    shoal_consistency_t l = c_local();
    int st = shoal_replicator_get_sync(a->r, a->key, NULL, &l, &x);
    shoal_crdt_destroy(&x);
    return st == SHOAL_EDELETED;
}

bool cm_wait_deleted(shoal_replicator_t *r, const char *key, int timeout_ms)
{
    wait_arg_t a = {r, key, NULL, 0, 0};
    return wait_until(deleted_is, &a, timeout_ms);
}

/* --- subscriptions -----------------------------------------------------------------------------
 */
static void on_change(shoal_replicator_t *r, shoal_change_t change, const char *key,
                      const shoal_crdt_t *value, void *arg)
{
    (void)r;
    cm_sub_t *s = arg;
    pthread_mutex_lock(&s->mu);
    if (s->n < CM_EVMAX) {
        s->ev[s->n].change = change;
        snprintf(s->ev[s->n].key, sizeof s->ev[s->n].key, "%s", key);
        s->ev[s->n].value = value && change == SHOAL_CHANGED ? shoal_crdt_clone(value) : NULL;
        s->n++;
    }
    pthread_mutex_unlock(&s->mu);
}

int cm_subscribe(shoal_replicator_t *r, const char *key_or_prefix, cm_sub_t *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->id = shoal_replicator_subscribe_sync(r, key_or_prefix, on_change, s);
    assert_true(s->id > 0);
    return s->id;
}

void cm_unsubscribe(shoal_replicator_t *r, cm_sub_t *s)
{
    if (s->id > 0)
        shoal_replicator_unsubscribe_sync(r, s->id);
    s->id = 0;
}

int cm_sub_count(cm_sub_t *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

typedef struct {
    cm_sub_t *s;
    int n;
} sub_wait_t;

static bool sub_has(void *arg)
{
    sub_wait_t *w = arg;
    return cm_sub_count(w->s) >= w->n;
}

bool cm_sub_wait(cm_sub_t *s, int n, int timeout_ms)
{
    sub_wait_t w = {s, n};
    return wait_until(sub_has, &w, timeout_ms);
}

shoal_change_t cm_sub_event(cm_sub_t *s, int k, char *key, size_t cap, uint64_t *v)
{
    pthread_mutex_lock(&s->mu);
    assert_true(k < s->n);
    shoal_change_t ch = s->ev[k].change;
    if (key)
        snprintf(key, cap, "%s", s->ev[k].key);
    if (v)
        *v = s->ev[k].value && shoal_type_tag(shoal_crdt_type(s->ev[k].value)) == SHOAL_GCOUNTER
                 ? shoal_gcounter_value(s->ev[k].value)
                 : 0;
    pthread_mutex_unlock(&s->mu);
    return ch;
}

void cm_sub_render(cm_sub_t *s, int k, char *out, size_t cap)
{
    pthread_mutex_lock(&s->mu);
    assert_true(k < s->n);
    shoal_buf_t b = {0};
    if (s->ev[k].value)
        shoal_crdt_render(s->ev[k].value, &b);
    snprintf(out, cap, "%s", s->ev[k].value ? shoal_buf_cstr(&b) : "");
    shoal_buf_free(&b);
    pthread_mutex_unlock(&s->mu);
}

void cm_sub_free(cm_sub_t *s)
{
    for (int k = 0; k < s->n && k < CM_EVMAX; k++)
        shoal_crdt_destroy(&s->ev[k].value);
    s->n = 0;
}

/* --- membership events and views ---------------------------------------------------------------
 */
static void on_event(shoal_cluster_t *c, const shoal_cluster_event_t *e, void *arg)
{
    (void)c;
    cm_events_t *ev = arg;
    if (e->member && e->member->node != ev->subject)
        return;
    pthread_mutex_lock(&ev->mu);
    if ((int)e->kind >= 0 && e->kind <= SHOAL_EV_CONVERGENCE)
        ev->count[e->kind]++;
    pthread_mutex_unlock(&ev->mu);
}

void cm_events_subscribe(int i, const shoal_node_t *subject, cm_events_t *ev)
{
    memset(ev, 0, sizeof *ev);
    pthread_mutex_init(&ev->mu, NULL);
    ev->subject = subject;
    ev->id = shoal_cluster_subscribe_sync(cm[i].cl, on_event, ev);
    assert_true(ev->id > 0);
}

int cm_events_count(cm_events_t *ev, shoal_cluster_event_kind_t kind)
{
    pthread_mutex_lock(&ev->mu);
    int n = ev->count[kind];
    pthread_mutex_unlock(&ev->mu);
    return n;
}

typedef struct {
    cm_events_t *ev;
    shoal_cluster_event_kind_t kind;
} ev_wait_t;

static bool ev_seen(void *arg)
{
    ev_wait_t *w = arg;
    return cm_events_count(w->ev, w->kind) > 0;
}

bool cm_events_wait(cm_events_t *ev, shoal_cluster_event_kind_t kind, int timeout_ms)
{
    ev_wait_t w = {ev, kind};
    return wait_until(ev_seen, &w, timeout_ms);
}

bool cm_view(int i, cm_view_t *out)
{
    memset(out, 0, sizeof *out);
    shoal_cluster_view_t v;
    if (!cm[i].cl || shoal_cluster_view(cm[i].cl, &v) != 0)
        return false;
    out->leader = v.leader;
    out->n_members = (int)v.n_members;
    out->converged = v.converged;
    for (size_t k = 0; k < v.n_members; k++)
        out->n_unreachable += !v.members[k].reachable;
    shoal_cluster_view_free(&v);
    return true;
}

shoal_member_status_t cm_status_of(int i, const shoal_node_t *node)
{
    shoal_cluster_view_t v;
    if (!cm[i].cl || shoal_cluster_view(cm[i].cl, &v) != 0)
        return 0;
    const shoal_member_t *m = shoal_cluster_view_member(&v, node);
    shoal_member_status_t st = m ? m->status : 0;
    shoal_cluster_view_free(&v);
    return st;
}
