/*  prop.c — the property harness (see prop.h). */
#include "prop.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ddata.pb-c.h"

void prop_rng_init(prop_rng_t *rng, uint64_t seed)
{
    /* splitmix64 to spread the seed over both words */
    for (int i = 0; i < 2; i++) {
        seed += 0x9e3779b97f4a7c15ull;
        uint64_t z = seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        rng->s[i] = z ^ (z >> 31);
    }
    if (!rng->s[0] && !rng->s[1])
        rng->s[0] = 1;
}

uint64_t prop_next(prop_rng_t *rng)
{
    /* xorshift128+ */
    uint64_t s1 = rng->s[0];
    const uint64_t s0 = rng->s[1];
    rng->s[0] = s0;
    s1 ^= s1 << 23;
    rng->s[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return rng->s[1] + s0;
}

uint64_t prop_below(prop_rng_t *rng, uint64_t n)
{
    return n ? prop_next(rng) % n : 0;
}

bool prop_chance(prop_rng_t *rng, unsigned num, unsigned den)
{
    return prop_below(rng, den) < num;
}

uint64_t prop_seed(void)
{
    static uint64_t seed;
    static bool have;
    if (!have) {
        const char *s = getenv("SHOAL_SEED");
        if (s && *s)
            seed = strtoull(s, NULL, 0);
        else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
        }
        have = true;
        printf("prop: seed %llu (replay with SHOAL_SEED=%llu)\n", (unsigned long long)seed,
               (unsigned long long)seed);
    }
    return seed;
}

int prop_cases(int cases)
{
    const char *s = getenv("SHOAL_PROP_CASES");
    long pct = s && *s ? strtol(s, NULL, 10) : 100;
    long n = (long)cases * pct / 100;
    return n < 1 ? 1 : (int)n;
}

const shoal_node_t *prop_node(int i)
{
    static const shoal_node_t *nodes[8];
    if (i < 0 || i >= 8)
        return NULL;
    if (!nodes[i])
        nodes[i] = shoal_node_make("127.0.0.1", (uint16_t)(2551 + i), (uint64_t)i + 1);
    return nodes[i];
}

static void render_to(const shoal_crdt_t *v, shoal_buf_t *b)
{
    if (!v) {
        shoal_buf_printf(b, "(null)");
        return;
    }
    if (shoal_crdt_render(v, b) < 0)
        shoal_buf_printf(b, "(render failed)");
}

void prop_assert_same(const shoal_crdt_t *a, const shoal_crdt_t *b, const char *what,
                      uint64_t seed)
{
    shoal_buf_t x = {0}, y = {0};
    int ra = shoal_crdt_encode(a, &x), rb = shoal_crdt_encode(b, &y);
    bool same = ra == 0 && rb == 0 && x.len == y.len && memcmp(x.data, y.data, x.len) == 0 &&
                shoal_crdt_equal(a, b);
    if (!same) {
        shoal_buf_t ra_s = {0}, rb_s = {0};
        render_to(a, &ra_s);
        render_to(b, &rb_s);
        print_error("%s: values differ (case seed %llu, replay with SHOAL_SEED=%llu)\n  a = %s\n"
                    "  b = %s\n  encodings %zu and %zu bytes, equal() = %d\n",
                    what, (unsigned long long)seed, (unsigned long long)prop_seed(),
                    shoal_buf_cstr(&ra_s), shoal_buf_cstr(&rb_s), x.len, y.len,
                    (int)shoal_crdt_equal(a, b));
        shoal_buf_free(&ra_s);
        shoal_buf_free(&rb_s);
        shoal_buf_free(&x);
        shoal_buf_free(&y);
        fail();
    }
    shoal_buf_free(&x);
    shoal_buf_free(&y);
}

/* The encoders that write protobuf's wire format themselves (not through protobuf-c) must give
   the bytes protobuf-c packs from the same message, the canonical form digests compare: packing
   what protobuf-c unpacked from them gives them back. */
static void assert_protobuf_canonical(const shoal_buf_t *b)
{
    Shoal__Ddata__Value *env = shoal__ddata__value__unpack(NULL, b->len, b->data);
    assert_non_null(env);
    const ProtobufCMessageDescriptor *payload = NULL;
    if (env->type == SHOAL__DDATA__VALUE_TYPE__ORSET)
        payload = &shoal__ddata__orset__descriptor;
    if (payload) {
        ProtobufCMessage *m = protobuf_c_message_unpack(payload, NULL, env->payload.len,
                                                        env->payload.data);
        assert_non_null(m);
        size_t n = protobuf_c_message_get_packed_size(m);
        assert_int_equal(n, env->payload.len);
        uint8_t *again = malloc(n ? n : 1);
        assert_int_equal(protobuf_c_message_pack(m, again), n);
        if (n && memcmp(again, env->payload.data, n) != 0)
            fail_msg("a %s payload is not in protobuf-c's canonical form", payload->name);
        free(again);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    shoal__ddata__value__free_unpacked(env, NULL);
}

shoal_crdt_t *prop_roundtrip(const shoal_crdt_t *v)
{
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(v, &b), 0);
    assert_protobuf_canonical(&b);
    shoal_crdt_t *out = NULL;
    int rc = shoal_crdt_decode(b.data, b.len, &out);
    if (rc != 0) {
        shoal_buf_t r = {0};
        render_to(v, &r);
        print_error("decode of an encoding failed: %s\n  value = %s\n", shoal_strerror(rc),
                    shoal_buf_cstr(&r));
        shoal_buf_free(&r);
    }
    assert_int_equal(rc, 0);
    assert_non_null(out);
    shoal_buf_t c = {0};
    assert_int_equal(shoal_crdt_encode(out, &c), 0);
    assert_int_equal(b.len, c.len);
    assert_memory_equal(b.data, c.data, b.len);
    shoal_buf_free(&b);
    shoal_buf_free(&c);
    return out;
}

static shoal_crdt_t *merged(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    shoal_crdt_t *m = shoal_crdt_clone(a);
    assert_int_equal(shoal_crdt_merge(m, b), 0);
    shoal_crdt_reset_delta(m);
    return m;
}

/* Three replicas with a shared history: random operations and random full-state merges. */
static void random_family(const prop_type_t *t, prop_rng_t *rng, shoal_crdt_t *v[3])
{
    for (int i = 0; i < 3; i++)
        v[i] = t->create();
    int steps = 1 + (int)prop_below(rng, 24);
    for (int s = 0; s < steps; s++) {
        int i = (int)prop_below(rng, 3);
        if (prop_chance(rng, 1, 4)) {
            int j = (int)prop_below(rng, 3);
            if (j != i)
                assert_int_equal(shoal_crdt_merge(v[i], v[j]), 0);
        } else {
            t->random_op(v[i], prop_node(i), rng);
        }
    }
    for (int i = 0; i < 3; i++)
        shoal_crdt_reset_delta(v[i]);
}

void prop_check_merge_laws(const prop_type_t *t, int cases)
{
    uint64_t base = prop_seed() ^ 0x1111;
    for (int c = 0; c < prop_cases(cases); c++) {
        uint64_t seed = base + (uint64_t)c;
        prop_rng_t rng;
        prop_rng_init(&rng, seed);
        shoal_crdt_t *v[3];
        random_family(t, &rng, v);
        shoal_crdt_t *ab = merged(v[0], v[1]), *ba = merged(v[1], v[0]);
        prop_assert_same(ab, ba, "merge is commutative", seed);
        shoal_crdt_t *aa = merged(v[0], v[0]);
        prop_assert_same(aa, v[0], "merge is idempotent", seed);
        shoal_crdt_t *a_ab = merged(v[0], ab);
        prop_assert_same(a_ab, ab, "merge absorbs (a ⊔ (a ⊔ b) = a ⊔ b)", seed);
        if (t->strict_assoc) {
            shoal_crdt_t *ab_c = merged(ab, v[2]);
            shoal_crdt_t *bc = merged(v[1], v[2]);
            shoal_crdt_t *a_bc = merged(v[0], bc);
            prop_assert_same(ab_c, a_bc, "merge is associative", seed);
            shoal_crdt_destroy(&ab_c);
            shoal_crdt_destroy(&bc);
            shoal_crdt_destroy(&a_bc);
        }
        shoal_crdt_destroy(&ab);
        shoal_crdt_destroy(&ba);
        shoal_crdt_destroy(&aa);
        shoal_crdt_destroy(&a_ab);
        for (int i = 0; i < 3; i++)
            shoal_crdt_destroy(&v[i]);
    }
}

void prop_check_delta_law(const prop_type_t *t, int cases)
{
    shoal_crdt_t *probe = t->create();
    bool has_delta = shoal_type_has_delta(shoal_crdt_type(probe));
    shoal_crdt_destroy(&probe);
    if (!has_delta)
        return;
    uint64_t base = prop_seed() ^ 0x2222;
    for (int c = 0; c < prop_cases(cases); c++) {
        uint64_t seed = base + (uint64_t)c;
        prop_rng_t rng;
        prop_rng_init(&rng, seed);
        shoal_crdt_t *v[3];
        random_family(t, &rng, v);
        int who = (int)prop_below(&rng, 3);
        shoal_crdt_t *before = shoal_crdt_clone(v[who]);
        int ops = 1 + (int)prop_below(&rng, 4); /* several ops: their deltas form a group */
        for (int k = 0; k < ops; k++)
            t->random_op(v[who], prop_node(who), &rng);
        shoal_crdt_t *d = shoal_crdt_take_delta(v[who]);
        assert_null(shoal_crdt_delta(v[who]));
        if (d) {
            shoal_crdt_t *sent = prop_roundtrip(d);
            assert_int_equal(shoal_crdt_merge_delta(before, sent), 0);
            /* a duplicate changes nothing */
            assert_int_equal(shoal_crdt_merge_delta(before, sent), 0);
            shoal_crdt_destroy(&sent);
            shoal_crdt_destroy(&d);
        }
        shoal_crdt_reset_delta(before);
        prop_assert_same(before, v[who], "state ⊔ delta(op) = op(state)", seed);
        shoal_crdt_destroy(&before);
        for (int i = 0; i < 3; i++)
            shoal_crdt_destroy(&v[i]);
    }
}

void prop_check_roundtrip(const prop_type_t *t, int cases)
{
    uint64_t base = prop_seed() ^ 0x3333;
    for (int c = 0; c < prop_cases(cases); c++) {
        uint64_t seed = base + (uint64_t)c;
        prop_rng_t rng;
        prop_rng_init(&rng, seed);
        shoal_crdt_t *v[3];
        random_family(t, &rng, v);
        for (int i = 0; i < 3; i++) {
            shoal_crdt_t *r = prop_roundtrip(v[i]);
            prop_assert_same(r, v[i], "decode(encode(v)) = v", seed);
            uint8_t d1[16], d2[16];
            assert_int_equal(shoal_crdt_digest(r, d1), 0);
            assert_int_equal(shoal_crdt_digest(v[i], d2), 0);
            assert_memory_equal(d1, d2, 16);
            shoal_buf_t txt = {0};
            assert_int_equal(shoal_crdt_render(r, &txt), 0);
            assert_true(txt.len > 0);
            shoal_buf_free(&txt);
            shoal_crdt_destroy(&r);
            /* deltas round trip too */
            t->random_op(v[i], prop_node(i), &rng);
            const shoal_crdt_t *d = shoal_crdt_delta(v[i]);
            if (d) {
                shoal_crdt_t *rd = prop_roundtrip(d);
                prop_assert_same(rd, d, "decode(encode(delta)) = delta", seed);
                shoal_crdt_destroy(&rd);
            }
            shoal_crdt_destroy(&v[i]);
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Convergence: replicas with delta logs.
 */
#define MAXR 5

typedef struct {
    shoal_crdt_t **d; /* deltas in the order this origin produced them */
    size_t n, cap;
} delta_log_t;

static void log_push(delta_log_t *l, shoal_crdt_t *d)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->d = realloc(l->d, l->cap * sizeof *l->d);
        assert_non_null(l->d);
    }
    l->d[l->n++] = d;
}

void prop_check_convergence(const prop_type_t *t, int cases)
{
    uint64_t base = prop_seed() ^ 0x4444;
    for (int c = 0; c < prop_cases(cases); c++) {
        uint64_t seed = base + (uint64_t)c;
        prop_rng_t rng;
        prop_rng_init(&rng, seed);
        int n = 3 + (int)prop_below(&rng, 3);
        shoal_crdt_t *r[MAXR];
        delta_log_t log[MAXR] = {{0}};
        size_t next[MAXR][MAXR] = {{0}}; /* next[to][from]: next delta index to deliver */
        for (int i = 0; i < n; i++)
            r[i] = t->create();
        int steps = 10 + (int)prop_below(&rng, 60);
        for (int s = 0; s < steps; s++) {
            int i = (int)prop_below(&rng, (uint64_t)n), j = (int)prop_below(&rng, (uint64_t)n);
            unsigned what = (unsigned)prop_below(&rng, 10);
            if (what < 5) {
                t->random_op(r[i], prop_node(i), &rng);
                shoal_crdt_t *d = shoal_crdt_take_delta(r[i]);
                if (d)
                    log_push(&log[i], d);
            } else if (what < 8 && i != j) {
                /* deliver the next few deltas of origin j to i, in j's order; sometimes again */
                size_t k = 1 + prop_below(&rng, 3);
                while (k-- && next[i][j] < log[j].n) {
                    shoal_crdt_t *sent = prop_roundtrip(log[j].d[next[i][j]]);
                    assert_int_equal(shoal_crdt_merge_delta(r[i], sent), 0);
                    if (prop_chance(&rng, 1, 5)) /* duplicated */
                        assert_int_equal(shoal_crdt_merge_delta(r[i], sent), 0);
                    shoal_crdt_destroy(&sent);
                    next[i][j]++;
                }
                if (next[i][j] > 0 && prop_chance(&rng, 1, 5)) { /* an old one, redelivered */
                    size_t old = prop_below(&rng, next[i][j]);
                    assert_int_equal(shoal_crdt_merge_delta(r[i], log[j].d[old]), 0);
                }
            } else if (i != j) {
                /* full state of j to i (any order, any number of times) */
                shoal_crdt_t *sent = prop_roundtrip(r[j]);
                assert_int_equal(shoal_crdt_merge(r[i], sent), 0);
                shoal_crdt_destroy(&sent);
            }
            /* merging in other replicas' states or deltas is not a local change to ship */
            assert_null(shoal_crdt_delta(r[i]));
        }
        /* every remaining delta to every replica, in each origin's order */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (i != j)
                    for (; next[i][j] < log[j].n; next[i][j]++)
                        assert_int_equal(shoal_crdt_merge_delta(r[i], log[j].d[next[i][j]]), 0);
        if (!t->deltas_converge) {
            /* anti-entropy rounds, as the replicator runs them, until nothing changes */
            for (int round = 0; round < 2 * n; round++)
                for (int i = 0; i < n; i++)
                    for (int j = 0; j < n; j++)
                        if (i != j)
                            assert_int_equal(shoal_crdt_merge(r[i], r[j]), 0);
        }
        for (int i = 1; i < n; i++)
            prop_assert_same(r[0], r[i], "replicas converge", seed);
        for (int i = 0; i < n; i++) {
            for (size_t k = 0; k < log[i].n; k++)
                shoal_crdt_destroy(&log[i].d[k]);
            free(log[i].d);
            shoal_crdt_destroy(&r[i]);
        }
    }
}

void prop_check_all(const prop_type_t *t, int cases)
{
    prop_check_roundtrip(t, cases);
    prop_check_delta_law(t, cases);
    prop_check_merge_laws(t, cases);
    prop_check_convergence(t, cases);
}

/* Wraps a payload in an envelope of the given type tag and decodes it. */
static int decode_as(uint32_t tag, const uint8_t *payload, size_t len, shoal_crdt_t **out)
{
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = tag;
    env.version = 1;
    env.payload.data = (uint8_t *)payload;
    env.payload.len = len;
    shoal_buf_t b = {0};
    shoal_buf_reserve(&b, shoal__ddata__value__get_packed_size(&env));
    b.len = shoal__ddata__value__pack(&env, b.data);
    int rc = shoal_crdt_decode(b.data, b.len, out);
    shoal_buf_free(&b);
    return rc;
}

static void check_decoded(int rc, shoal_crdt_t **out)
{
    assert_true(rc <= 0);
    if (rc == 0) {
        shoal_crdt_t *again = prop_roundtrip(*out);
        shoal_crdt_destroy(&again);
    } else {
        assert_null(*out);
    }
    shoal_crdt_destroy(out);
}

void prop_check_corruption(const shoal_crdt_t *v, int rounds)
{
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(v, &b), 0);
    Shoal__Ddata__Value *env = shoal__ddata__value__unpack(NULL, b.len, b.data);
    assert_non_null(env);
    uint32_t tag = env->type;
    size_t plen = env->payload.len;
    uint8_t *copy = malloc(plen ? plen : 1);
    prop_rng_t rng;
    prop_rng_init(&rng, prop_seed() ^ 0x5555);
    uint8_t junk[64];
    for (int i = 0; i < prop_cases(rounds); i++) {
        shoal_crdt_t *out = NULL;
        size_t n = prop_below(&rng, sizeof junk);
        for (size_t k = 0; k < n; k++)
            junk[k] = (uint8_t)prop_next(&rng);
        check_decoded(decode_as(tag, junk, n, &out), &out);
        if (plen) {
            memcpy(copy, env->payload.data, plen);
            copy[prop_below(&rng, plen)] ^= (uint8_t)(1 + prop_below(&rng, 255));
            check_decoded(decode_as(tag, copy, plen, &out), &out);
        }
    }
    free(copy);
    shoal__ddata__value__free_unpacked(env, NULL);
    shoal_buf_free(&b);
}
