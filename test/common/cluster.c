/*  cluster.c — see cluster.h. */
#include "cluster.h"
#include "replicator_internal.h" /* K_WRITE: a forged push */
#include "replicator.pb-c.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

int tscale(void)
{
#if defined(SHOAL_VALGRIND)
    return 20;
#elif defined(SHOAL_SANITIZED)
    return 4;
#else
    return 1;
#endif
}

shoal_consistency_t c_local(void)
{
    shoal_consistency_t c = {0};
    c.level = SHOAL_LOCAL;
    return c;
}

shoal_consistency_t c_majority(uint32_t timeout_ms)
{
    shoal_consistency_t c = {0};
    c.level = SHOAL_MAJORITY;
    c.timeout_ms = timeout_ms * (uint32_t)tscale();
    return c;
}

shoal_consistency_t c_all(uint32_t timeout_ms)
{
    shoal_consistency_t c = {0};
    c.level = SHOAL_ALL;
    c.timeout_ms = timeout_ms * (uint32_t)tscale();
    return c;
}

shoal_consistency_t c_n(uint32_t n, uint32_t timeout_ms)
{
    shoal_consistency_t c = {0};
    c.level = SHOAL_FROM_N;
    c.n = n;
    c.timeout_ms = timeout_ms * (uint32_t)tscale();
    return c;
}

void tcluster_fast_settings(shoal_replicator_settings_t *s)
{
    shoal_replicator_settings_default(s);
    s->gossip_interval_ms = 200;
    s->delta_interval_ms = 50;
    s->notify_subscribers_interval_ms = 50;
    s->pruning_interval_ms = 300;
}

static bool elapsed(int64_t start, int ms)
{
    return shoal_now_ms() - start > (int64_t)ms * tscale();
}

bool wait_until(bool (*pred)(void *arg), void *arg, int timeout_ms)
{
    int64_t start = shoal_now_ms();
    for (;;) {
        if (pred(arg))
            return true;
        if (elapsed(start, timeout_ms))
            return pred(arg);
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL);
    }
}

typedef struct {
    tcluster_fn *fn;
    shoal_replicator_t *r;
    void *arg;
} on_node_t;

static int on_node_tramp(shoal_system_t *sys, void *arg)
{
    (void)sys;
    on_node_t *o = arg;
    return o->fn(o->r, o->arg);
}

int on_node(tcluster_t *c, int i, tcluster_fn *fn, void *arg)
{
    on_node_t o = {fn, c->rep[i], arg};
    return shoal_system_call(c->sys[i], on_node_tramp, &o);
}

typedef struct {
    tcluster_t *c;
    int i;
} peer_args_t;

static int add_peers(shoal_replicator_t *r, void *arg)
{
    peer_args_t *p = arg;
    for (int j = 0; j < p->c->n; j++)
        if (j != p->i && p->c->sys[j])
            shoal_replicator_add_peer(r, shoal_system_self(p->c->sys[j]), true, (uint64_t)j);
    return 0;
}

static int send_probe(shoal_system_t *sys, void *arg)
{
    /* a node is "up" for us once a send to it is accepted */
    const shoal_node_t *to = arg;
    return shoal_system_send(sys, to, 31, "", 0);
}

static void start_node(tcluster_t *c, int i)
{
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 0;
    c->sys[i] = shoal_system_new(&ss, &err);
    assert_non_null(c->sys[i]);
    c->store[i] = shoal_memstore_new();
    shoal_replicator_settings_t rs = c->settings;
    rs.store = c->store[i];
    c->rep[i] = shoal_replicator_new(c->sys[i], &rs, &err);
    assert_non_null(c->rep[i]);
}

static bool all_connected(void *arg)
{
    tcluster_t *c = arg;
    for (int i = 0; i < c->n; i++)
        for (int j = 0; j < c->n; j++)
            if (i != j && c->sys[i] && c->sys[j] &&
                shoal_system_call(c->sys[i], send_probe,
                                  (void *)shoal_system_self(c->sys[j])) != 0)
                return false;
    return true;
}

static int do_connect(shoal_system_t *sys, void *arg)
{
    return shoal_system_connect(sys, arg);
}

static tcluster_t *live[8];

static void track(tcluster_t *c, bool on)
{
    for (int i = 0; i < 8; i++)
        if (on ? live[i] == NULL : live[i] == c) {
            live[i] = on ? c : NULL;
            return;
        }
}

int tcluster_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 8; i++)
        if (live[i])
            tcluster_stop(live[i]);
    return 0;
}

void tcluster_start(tcluster_t *c, int n, const shoal_replicator_settings_t *s)
{
    memset(c, 0, sizeof *c);
    track(c, true);
    if (s)
        c->settings = *s;
    else
        tcluster_fast_settings(&c->settings);
    c->n = n;
    for (int i = 0; i < n; i++)
        start_node(c, i);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j)
                assert_int_equal(shoal_system_call(c->sys[i], do_connect,
                                                   (void *)shoal_system_endpoint(c->sys[j])),
                                 0);
    assert_true(wait_until(all_connected, c, 10000));
    for (int i = 0; i < n; i++) {
        peer_args_t p = {c, i};
        on_node(c, i, add_peers, &p);
    }
}

void tcluster_add(tcluster_t *c)
{
    int i = c->n++;
    start_node(c, i);
    for (int j = 0; j < c->n; j++)
        if (j != i && c->sys[j]) {
            shoal_system_call(c->sys[i], do_connect, (void *)shoal_system_endpoint(c->sys[j]));
            shoal_system_call(c->sys[j], do_connect, (void *)shoal_system_endpoint(c->sys[i]));
        }
    assert_true(wait_until(all_connected, c, 10000));
    for (int k = 0; k < c->n; k++)
        if (c->sys[k]) {
            peer_args_t p = {c, k};
            on_node(c, k, add_peers, &p);
        }
}

typedef struct {
    const shoal_node_t *node;
    bool removed;
} forget_arg_t;

static int forget(shoal_replicator_t *r, void *arg)
{
    forget_arg_t *f = arg;
    return f->removed ? shoal_replicator_node_removed(r, f->node)
                      : shoal_replicator_remove_peer(r, f->node);
}

void tcluster_kill(tcluster_t *c, int i, bool removed_for_good)
{
    forget_arg_t f = {shoal_system_self(c->sys[i]), removed_for_good};
    shoal_replicator_destroy(&c->rep[i]);
    shoal_system_destroy(&c->sys[i]);
    shoal_memstore_destroy(&c->store[i]);
    for (int j = 0; j < c->n; j++)
        if (c->sys[j])
            on_node(c, j, forget, &f);
}

void tcluster_stop(tcluster_t *c)
{
    track(c, false);
    for (int i = 0; i < c->n; i++) {
        shoal_replicator_destroy(&c->rep[i]);
        shoal_system_destroy(&c->sys[i]);
        shoal_memstore_destroy(&c->store[i]);
    }
}

static int incr_modify(shoal_crdt_t *v, void *arg)
{
    return shoal_gcounter_increment(v, shoal_node_intern(((const char **)arg)[0]),
                                    *(uint64_t *)((void **)arg)[1]);
}

int t_incr(tcluster_t *c, int i, const char *key, uint64_t n, const shoal_consistency_t *wc)
{
    const void *args[2] = {shoal_node_id(shoal_system_self(c->sys[i])), &n};
    int rc = shoal_replicator_update_sync(c->rep[i], key, shoal_gcounter_new(), wc, incr_modify,
                                          (void *)args);
    return rc;
}

int t_gcounter(tcluster_t *c, int i, const char *key, const shoal_consistency_t *rc,
               uint64_t *value)
{
    shoal_crdt_t *v = NULL;
    int st = shoal_replicator_get_sync(c->rep[i], key, NULL, rc, &v);
    *value = v ? shoal_gcounter_value(v) : 0;
    shoal_crdt_destroy(&v);
    return st;
}

void t_digest(tcluster_t *c, int i, const char *key, uint8_t out[16])
{
    memset(out, 0, 16);
    shoal_crdt_t *v = NULL;
    shoal_consistency_t l = c_local();
    if (shoal_replicator_get_sync(c->rep[i], key, NULL, &l, &v) == 0 && v)
        shoal_crdt_digest(v, out);
    shoal_crdt_destroy(&v);
}

bool t_converged(tcluster_t *c, const char *key)
{
    uint8_t first[16], d[16], zero[16] = {0};
    int k = -1;
    for (int i = 0; i < c->n; i++) {
        if (!c->sys[i])
            continue;
        t_digest(c, i, key, d);
        if (memcmp(d, zero, 16) == 0)
            return false;
        if (k < 0) {
            memcpy(first, d, 16);
            k = i;
        } else if (memcmp(first, d, 16) != 0) {
            return false;
        }
    }
    return true;
}

int64_t tcluster_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct {
    tcluster_t *c;
    const char *key;
    int64_t sent_unix_ms;
    bool pull_reply;
} forged_push_t;

static int forge_push(shoal_system_t *sys, void *arg)
{
    forged_push_t *f = arg;
    shoal_crdt_t *v = shoal_gcounter_new();
    shoal_gcounter_increment(v, shoal_system_self(sys), 5);
    shoal_buf_t enc = {0};
    assert_int_equal(shoal_crdt_encode(v, &enc), 0);
    Shoal__Replicator__DataEnvelope env = SHOAL__REPLICATOR__DATA_ENVELOPE__INIT;
    env.value.data = enc.data;
    env.value.len = enc.len;
    Shoal__Replicator__Write w = SHOAL__REPLICATOR__WRITE__INIT;
    w.role = (char *)"";
    w.key = (char *)f->key;
    w.envelope = &env;
    w.sent_unix_ms = (uint64_t)f->sent_unix_ms;
    w.pull_reply = f->pull_reply;
    size_t n = shoal__replicator__write__get_packed_size(&w);
    uint8_t *buf = malloc(n);
    shoal__replicator__write__pack(&w, buf);
    int rc = shoal_system_send(sys, shoal_system_self(f->c->sys[0]), K_WRITE, buf, n);
    free(buf);
    shoal_buf_free(&enc);
    shoal_crdt_destroy(&v);
    return rc;
}

int tcluster_forge_push(tcluster_t *c, int from, const char *key, int64_t sent_unix_ms,
                        bool pull_reply)
{
    forged_push_t f = {c, key, sent_unix_ms, pull_reply};
    return shoal_system_call(c->sys[from], forge_push, &f);
}
