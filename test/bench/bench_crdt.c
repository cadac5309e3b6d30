/*  bench_crdt.c — the replicated data types: update, delta and merge rates, encoding.

    Each figure sits beside a raw baseline measured in this run:
      - updates and delta applications beside the same operation on a plain, non-replicated
        hash set / counter (what the CRDT bookkeeping costs on top of storing the data);
      - merges beside the union of two plain hash sets of the same elements;
      - encode/decode beside protobuf-c pack/unpack of a bare message holding the same elements
        (a GSet message: repeated bytes), and sizes beside that message's size.
    Targets (issue: foundation): ORSet add with delta capture < 1 µs, a one-element delta applied
    in < 2 µs, two 100,000-element ORSets merged in < 50 ms.
*/
#include "bench.h"
#include "ddata.h"
#include "ddata.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define N100K 100000

static const shoal_node_t *node_a, *node_b;

static void elem_name(char *buf, size_t cap, size_t i, size_t *len)
{
    *len = (size_t)snprintf(buf, cap, "entity-%08zu", i);
}

/* ---------------------------------------------------------------------------------------------
 * The baseline: a plain open-addressing hash set of byte strings (no CRDT metadata).
 */
typedef struct {
    char **keys;
    size_t *lens;
    size_t cap, n;
} plain_set_t;

static void plain_init(plain_set_t *s, size_t cap)
{
    s->cap = 1;
    while (s->cap < cap * 2)
        s->cap <<= 1;
    s->keys = calloc(s->cap, sizeof *s->keys);
    s->lens = calloc(s->cap, sizeof *s->lens);
    s->n = 0;
}

static void plain_free(plain_set_t *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->keys[i]);
    free(s->keys);
    free(s->lens);
}

static void plain_grow(plain_set_t *s);

static void plain_add(plain_set_t *s, const char *k, size_t len)
{
    if ((s->n + 1) * 2 > s->cap)
        plain_grow(s);
    size_t i = XXH3_64bits(k, len) & (s->cap - 1);
    while (s->keys[i]) {
        if (s->lens[i] == len && memcmp(s->keys[i], k, len) == 0)
            return;
        i = (i + 1) & (s->cap - 1);
    }
    s->keys[i] = malloc(len + 1);
    memcpy(s->keys[i], k, len);
    s->lens[i] = len;
    s->n++;
}

static void plain_grow(plain_set_t *s)
{
    plain_set_t t;
    plain_init(&t, s->cap);
    for (size_t i = 0; i < s->cap; i++)
        if (s->keys[i]) {
            size_t j = XXH3_64bits(s->keys[i], s->lens[i]) & (t.cap - 1);
            while (t.keys[j])
                j = (j + 1) & (t.cap - 1);
            t.keys[j] = s->keys[i];
            t.lens[j] = s->lens[i];
            t.n++;
        }
    free(s->keys);
    free(s->lens);
    *s = t;
}

/* ---------------------------------------------------------------------------------------------
 * GCounter
 */
static void gcounter_update(void *arg, size_t n)
{
    shoal_crdt_t *c = arg;
    for (size_t i = 0; i < n; i++)
        shoal_gcounter_increment(c, node_a, 1);
    shoal_crdt_reset_delta(c);
}

typedef struct {
    const void *node;
    uint64_t v;
} plain_counter_entry_t;

static void plain_counter_update(void *arg, size_t n)
{
    plain_counter_entry_t *e = arg; /* 3 entries, found by pointer like a node map */
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 3; k++)
            if (e[k].node == node_a) {
                e[k].v++;
                break;
            }
        bench_sink(e[0].v);
    }
}

static void gcounter_delta_apply(void *arg, size_t n)
{
    shoal_crdt_t **cd = arg; /* [0] = replica, [1] = delta */
    for (size_t i = 0; i < n; i++)
        shoal_crdt_merge_delta(cd[0], cd[1]);
}

/* ---------------------------------------------------------------------------------------------
 * ORSet
 */
typedef struct {
    shoal_crdt_t *set;
    size_t next;
} orset_add_ctx_t;

static void orset_add(void *arg, size_t n)
{
    orset_add_ctx_t *c = arg;
    char buf[32];
    size_t len;
    for (size_t i = 0; i < n; i++) {
        elem_name(buf, sizeof buf, c->next++, &len);
        shoal_orset_add(c->set, node_a, buf, len);
        /* the replicator takes the delta every delta interval; here every 1,000 updates */
        if ((c->next & 1023) == 0)
            shoal_crdt_reset_delta(c->set);
    }
}

typedef struct {
    plain_set_t set;
    size_t next;
} plain_add_ctx_t;

static void plain_set_add(void *arg, size_t n)
{
    plain_add_ctx_t *c = arg;
    char buf[32];
    size_t len;
    for (size_t i = 0; i < n; i++) {
        elem_name(buf, sizeof buf, c->next++, &len);
        plain_add(&c->set, buf, len);
    }
}

typedef struct {
    shoal_crdt_t *replica;
    shoal_crdt_t **deltas;
    size_t n, next;
} delta_apply_ctx_t;

static void orset_delta_apply(void *arg, size_t n)
{
    delta_apply_ctx_t *c = arg;
    for (size_t i = 0; i < n; i++) {
        shoal_crdt_merge_delta(c->replica, c->deltas[c->next]);
        c->next = (c->next + 1) % c->n;
    }
}

typedef struct {
    shoal_buf_t *encoded;
    size_t n, next;
    shoal_crdt_t *replica;
} decode_apply_ctx_t;

static void orset_delta_decode_apply(void *arg, size_t n)
{
    decode_apply_ctx_t *c = arg;
    for (size_t i = 0; i < n; i++) {
        shoal_crdt_t *d = NULL;
        shoal_buf_t *b = &c->encoded[c->next];
        if (shoal_crdt_decode(b->data, b->len, &d) == 0) {
            shoal_crdt_merge_delta(c->replica, d);
            shoal_crdt_destroy(&d);
        }
        c->next = (c->next + 1) % c->n;
    }
}

static void pb_unpack_same(void *arg, size_t n)
{
    decode_apply_ctx_t *c = arg;
    for (size_t i = 0; i < n; i++) {
        shoal_buf_t *b = &c->encoded[c->next];
        Shoal__Ddata__Value *v = shoal__ddata__value__unpack(NULL, b->len, b->data);
        if (v) {
            Shoal__Ddata__GSet *g = shoal__ddata__gset__unpack(NULL, v->payload.len, v->payload.data);
            if (g)
                shoal__ddata__gset__free_unpacked(g, NULL);
            shoal__ddata__value__free_unpacked(v, NULL);
        }
        c->next = (c->next + 1) % c->n;
    }
}

static shoal_crdt_t *orset_of_range(const shoal_node_t *node, size_t from, size_t to)
{
    shoal_crdt_t *s = shoal_orset_new();
    char buf[32];
    size_t len;
    for (size_t i = from; i < to; i++) {
        elem_name(buf, sizeof buf, i, &len);
        shoal_orset_add(s, node, buf, len);
    }
    shoal_crdt_reset_delta(s);
    return s;
}

typedef struct {
    shoal_crdt_t *a, *b;
} merge_ctx_t;

static void orset_merge_once(void *arg)
{
    merge_ctx_t *m = arg;
    shoal_crdt_t *x = shoal_crdt_clone(m->a);
    double t0 = bench_now();
    shoal_crdt_merge(x, m->b);
    (void)t0;
    bench_sink((uintptr_t)shoal_orset_size(x));
    shoal_crdt_destroy(&x);
}

typedef struct {
    plain_set_t a, b;
} plain_merge_ctx_t;

static void plain_union_once(void *arg)
{
    plain_merge_ctx_t *m = arg;
    plain_set_t x;
    plain_init(&x, m->a.n + m->b.n);
    for (size_t i = 0; i < m->a.cap; i++)
        if (m->a.keys[i])
            plain_add(&x, m->a.keys[i], m->a.lens[i]);
    for (size_t i = 0; i < m->b.cap; i++)
        if (m->b.keys[i])
            plain_add(&x, m->b.keys[i], m->b.lens[i]);
    bench_sink(x.n);
    plain_free(&x);
}

/* The clone inside orset_merge_once is not part of the merge: measure it alone and subtract. */
static void orset_clone_once(void *arg)
{
    merge_ctx_t *m = arg;
    shoal_crdt_t *x = shoal_crdt_clone(m->a);
    bench_sink((uintptr_t)x);
    shoal_crdt_destroy(&x);
}

typedef struct {
    const shoal_crdt_t *v;
    shoal_buf_t out;
} encode_ctx_t;

static void encode_once(void *arg)
{
    encode_ctx_t *e = arg;
    shoal_buf_reset(&e->out);
    shoal_crdt_encode(e->v, &e->out);
}

/* The replicator's path: a value changed by one element, then encoded whole (for gossip, the
   store and the digest), rather than the same value encoded again. */
typedef struct {
    shoal_crdt_t *set;
    const shoal_node_t *node;
    size_t next;
    shoal_buf_t out;
} change_encode_ctx_t;

static void change_encode_once(void *arg)
{
    change_encode_ctx_t *c = arg;
    char buf[48];
    int len = snprintf(buf, sizeof buf, "entity-%08zu-new", c->next++ * 7919 % 100000);
    shoal_orset_add(c->set, c->node, buf, (size_t)len);
    shoal_crdt_reset_delta(c->set);
    shoal_buf_reset(&c->out);
    shoal_crdt_encode(c->set, &c->out);
}

static void decode_once(void *arg)
{
    encode_ctx_t *e = arg;
    shoal_crdt_t *v = NULL;
    if (shoal_crdt_decode(e->out.data, e->out.len, &v) != 0) {
        fprintf(stderr, "bench: decode failed\n");
        exit(1);
    }
    shoal_crdt_destroy(&v);
}

typedef struct {
    Shoal__Ddata__GSet msg;
    shoal_buf_t out;
} pb_ctx_t;

static void pb_pack_once(void *arg)
{
    pb_ctx_t *p = arg;
    size_t n = shoal__ddata__gset__get_packed_size(&p->msg);
    shoal_buf_reset(&p->out);
    shoal_buf_reserve(&p->out, n);
    p->out.len = shoal__ddata__gset__pack(&p->msg, p->out.data);
}

static void pb_unpack_once(void *arg)
{
    pb_ctx_t *p = arg;
    Shoal__Ddata__GSet *g = shoal__ddata__gset__unpack(NULL, p->out.len, p->out.data);
    bench_sink((uintptr_t)g);
    shoal__ddata__gset__free_unpacked(g, NULL);
}

static void bench_orset(void)
{
    /* add with delta capture */
    orset_add_ctx_t add = {shoal_orset_new(), 0};
    plain_add_ctx_t padd = {{0}, 0};
    plain_init(&padd.set, 16);
    double base = bench_rate(plain_set_add, &padd, 0.3, 3);
    double rate = bench_rate(orset_add, &add, 0.3, 3);
    bench_report("orset_add", rate, "ops/s", base);
    bench_note("orset_add: %.3f us per add with delta capture (target < 1 us), set size %zu",
               1e6 / rate, shoal_orset_size(add.set));
    shoal_crdt_destroy(&add.set);
    plain_free(&padd.set);

    /* one-element deltas applied to a 100k-element replica */
    enum { ND = 4096 };
    delta_apply_ctx_t da = {orset_of_range(node_a, 0, N100K), calloc(ND, sizeof(shoal_crdt_t *)),
                            ND, 0};
    shoal_crdt_t *origin = orset_of_range(node_b, 0, 0);
    shoal_buf_t *enc = calloc(ND, sizeof *enc);
    char buf[32];
    size_t len;
    for (size_t i = 0; i < ND; i++) {
        elem_name(buf, sizeof buf, N100K + i, &len);
        shoal_orset_add(origin, node_b, buf, len);
        da.deltas[i] = shoal_crdt_take_delta(origin);
        shoal_crdt_encode(da.deltas[i], &enc[i]);
    }
    plain_add_ctx_t pa2 = {{0}, N100K};
    plain_init(&pa2.set, N100K);
    for (size_t i = 0; i < N100K; i++) {
        elem_name(buf, sizeof buf, i, &len);
        plain_add(&pa2.set, buf, len);
    }
    base = bench_rate(plain_set_add, &pa2, 0.3, 3);
    rate = bench_rate(orset_delta_apply, &da, 0.3, 3);
    bench_report("orset_delta_apply", rate, "ops/s", base);
    bench_note("orset_delta_apply: %.3f us per one-element delta into a 100k set (target < 2 us)",
               1e6 / rate);
    decode_apply_ctx_t dda = {enc, ND, 0, da.replica};
    base = bench_rate(pb_unpack_same, &dda, 0.3, 3);
    rate = bench_rate(orset_delta_decode_apply, &dda, 0.3, 3);
    bench_report("orset_delta_decode_apply", rate, "ops/s", base);
    bench_note("orset_delta_decode_apply: %.3f us per encoded delta decoded and applied; baseline: "
               "protobuf-c unpack of the same bytes", 1e6 / rate);
    for (size_t i = 0; i < ND; i++) {
        shoal_crdt_destroy(&da.deltas[i]);
        shoal_buf_free(&enc[i]);
    }
    free(da.deltas);
    free(enc);
    shoal_crdt_destroy(&da.replica);
    shoal_crdt_destroy(&origin);
    plain_free(&pa2.set);

    /* merge of two 100k-element sets that overlap by half, built on two nodes */
    merge_ctx_t m = {orset_of_range(node_a, 0, N100K), orset_of_range(node_b, N100K / 2,
                                                                       N100K + N100K / 2)};
    plain_merge_ctx_t pm;
    plain_init(&pm.a, N100K);
    plain_init(&pm.b, N100K);
    for (size_t i = 0; i < N100K; i++) {
        elem_name(buf, sizeof buf, i, &len);
        plain_add(&pm.a, buf, len);
        elem_name(buf, sizeof buf, i + N100K / 2, &len);
        plain_add(&pm.b, buf, len);
    }
    double clone_ms = bench_time_ms(orset_clone_once, &m, 5);
    double merge_ms = bench_time_ms(orset_merge_once, &m, 5) - clone_ms;
    double union_ms = bench_time_ms(plain_union_once, &pm, 5);
    bench_report("orset_merge_100k", merge_ms, "ms", union_ms);
    bench_note("orset_merge_100k: two 100,000-element ORSets (half shared) in %.1f ms (target < "
               "50 ms); baseline: union of two plain hash sets", merge_ms);

    /* encode/decode of a 100k-element set, beside a bare protobuf message of the same elements */
    encode_ctx_t e = {m.a, {0}};
    pb_ctx_t p;
    shoal__ddata__gset__init(&p.msg);
    p.msg.n_elements = N100K;
    p.msg.elements = calloc(N100K, sizeof *p.msg.elements);
    char (*names)[32] = calloc(N100K, 32);
    for (size_t i = 0; i < N100K; i++) {
        elem_name(names[i], 32, i, &len);
        p.msg.elements[i].data = (uint8_t *)names[i];
        p.msg.elements[i].len = len;
    }
    p.out = (shoal_buf_t){0};
    double enc_ms = bench_time_ms(encode_once, &e, 5);
    double pb_enc_ms = bench_time_ms(pb_pack_once, &p, 5);
    bench_report("orset_encode_100k", enc_ms, "ms", pb_enc_ms);
    change_encode_ctx_t ce = {shoal_crdt_clone(m.a), node_a, 0, {0}};
    double ce_ms = bench_time_ms(change_encode_once, &ce, 5);
    bench_report("orset_encode_100k_after_add", ce_ms, "ms", pb_enc_ms);
    bench_note("orset_encode_100k_after_add: one element added, then the whole set encoded, as "
               "the replicator does after an update (orset_encode_100k encodes an unchanged set)");
    shoal_buf_free(&ce.out);
    shoal_crdt_destroy(&ce.set);
    double dec_ms = bench_time_ms(decode_once, &e, 5);
    double pb_dec_ms = bench_time_ms(pb_unpack_once, &p, 5);
    bench_report("orset_decode_100k", dec_ms, "ms", pb_dec_ms);
    bench_report("orset_serialized_bytes_100k", (double)e.out.len, "bytes", (double)p.out.len);
    bench_note("orset 100k: %zu bytes encoded (%.1f per element), bare elements message %zu bytes",
               e.out.len, (double)e.out.len / N100K, p.out.len);
    shoal_buf_free(&e.out);
    shoal_buf_free(&p.out);
    free(p.msg.elements);
    free(names);
    shoal_crdt_destroy(&m.a);
    shoal_crdt_destroy(&m.b);
    plain_free(&pm.a);
    plain_free(&pm.b);
}

/* ---------------------------------------------------------------------------------------------
 * LWWMap
 */
typedef struct {
    shoal_crdt_t *map;
    size_t next;
} lwwmap_ctx_t;

static void lwwmap_put(void *arg, size_t n)
{
    lwwmap_ctx_t *c = arg;
    char key[32];
    size_t len;
    static const char value[] = "region-127.0.0.1:2552";
    for (size_t i = 0; i < n; i++) {
        elem_name(key, sizeof key, c->next++ % 10000, &len);
        shoal_lwwmap_put(c->map, node_a, key, len, value, sizeof value - 1, NULL, NULL);
        if ((c->next & 1023) == 0)
            shoal_crdt_reset_delta(c->map);
    }
}

static void plain_map_put(void *arg, size_t n)
{
    plain_add_ctx_t *c = arg; /* keys only: a plain map put without the value copy is cheaper */
    char key[32];
    size_t len;
    for (size_t i = 0; i < n; i++) {
        elem_name(key, sizeof key, c->next++ % 10000, &len);
        plain_add(&c->set, key, len);
    }
}

static void bench_lwwmap(void)
{
    lwwmap_ctx_t c = {shoal_lwwmap_new(), 0};
    plain_add_ctx_t p = {{0}, 0};
    plain_init(&p.set, 16);
    double base = bench_rate(plain_map_put, &p, 0.3, 3);
    double rate = bench_rate(lwwmap_put, &c, 0.3, 3);
    bench_report("lwwmap_put", rate, "ops/s", base);
    bench_note("lwwmap_put: %.3f us per put with delta capture over 10,000 keys", 1e6 / rate);

    /* deltas of single puts applied to a 10k-key replica */
    enum { ND = 2048 };
    shoal_crdt_t *origin = shoal_lwwmap_new();
    delta_apply_ctx_t da = {shoal_crdt_clone(c.map), calloc(ND, sizeof(shoal_crdt_t *)), ND, 0};
    char key[32];
    size_t len;
    for (size_t i = 0; i < ND; i++) {
        elem_name(key, sizeof key, i * 7, &len);
        shoal_lwwmap_put(origin, node_b, key, len, "v", 1, NULL, NULL);
        da.deltas[i] = shoal_crdt_take_delta(origin);
    }
    rate = bench_rate(orset_delta_apply, &da, 0.3, 3);
    bench_report("lwwmap_delta_apply", rate, "ops/s", base);
    bench_note("lwwmap_delta_apply: %.3f us per one-key delta into a 10k-key map", 1e6 / rate);
    for (size_t i = 0; i < ND; i++)
        shoal_crdt_destroy(&da.deltas[i]);
    free(da.deltas);
    shoal_crdt_destroy(&da.replica);
    shoal_crdt_destroy(&origin);

    encode_ctx_t e = {c.map, {0}};
    double enc_ms = bench_time_ms(encode_once, &e, 5);
    double dec_ms = bench_time_ms(decode_once, &e, 5);
    bench_report("lwwmap_encode_10k", enc_ms, "ms", 0);
    bench_report("lwwmap_decode_10k", dec_ms, "ms", 0);
    bench_report("lwwmap_serialized_bytes_10k", (double)e.out.len, "bytes", 0);
    shoal_buf_free(&e.out);
    shoal_crdt_destroy(&c.map);
    plain_free(&p.set);
}

int main(void)
{
    node_a = shoal_node_intern("127.0.0.1:2551:1");
    node_b = shoal_node_intern("127.0.0.1:2552:2");
    const shoal_node_t *node_c = shoal_node_intern("127.0.0.1:2553:3");

    shoal_crdt_t *gc = shoal_gcounter_new();
    shoal_gcounter_increment(gc, node_b, 1);
    shoal_gcounter_increment(gc, node_c, 1);
    plain_counter_entry_t plain[3] = {{node_b, 0}, {node_c, 0}, {node_a, 0}};
    double base = bench_rate(plain_counter_update, plain, 0.3, 3);
    double rate = bench_rate(gcounter_update, gc, 0.3, 3);
    bench_report("gcounter_update", rate, "ops/s", base);
    bench_note("gcounter_update: %.1f ns per increment with delta capture (3-node counter)",
               1e9 / rate);
    shoal_crdt_t *other = shoal_gcounter_new();
    shoal_gcounter_increment(other, node_a, 5);
    shoal_crdt_t *pair[2] = {gc, shoal_crdt_take_delta(other)};
    rate = bench_rate(gcounter_delta_apply, pair, 0.3, 3);
    bench_report("gcounter_delta_apply", rate, "ops/s", base);
    shoal_crdt_destroy(&pair[1]);
    shoal_crdt_destroy(&other);
    shoal_crdt_destroy(&gc);

    bench_orset();
    bench_lwwmap();
    return 0;
}
