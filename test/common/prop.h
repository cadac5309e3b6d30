/*  prop.h — the property harness for replicated values.

    Any type reachable through the shoal_crdt_* vtable can be run through it (the membership
    state will be): describe how to make an empty value and how to apply one random local
    mutation, and the harness checks, over thousands of seeded cases:
      - merge laws on random values that share a history: commutative, idempotent, absorbing
        (a ⊔ (a ⊔ b) = a ⊔ b), and associative where the type claims a strict join;
      - convergence: 3–5 replicas doing random operations while exchanging full states (any
        order, duplicated) and deltas (in each origin's order, duplicated) end with identical
        values and identical bytes;
      - the delta law: the state before an operation merged with the operation's delta (sent
        through encode/decode) equals the state after it;
      - serialization round trips, of values and deltas, to the same bytes.
    The seed comes from SHOAL_SEED (or the clock) and is printed with every failure, so
    `SHOAL_SEED=<n> build/check/bin/test_x` replays it. SHOAL_PROP_CASES scales the case counts.
*/
#ifndef SHOAL_TEST_PROP_H
#define SHOAL_TEST_PROP_H

#include "ddata.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t s[2];
} prop_rng_t;

void prop_rng_init(prop_rng_t *rng, uint64_t seed);
uint64_t prop_next(prop_rng_t *rng);
/* Uniform in [0, n), n > 0. */
uint64_t prop_below(prop_rng_t *rng, uint64_t n);
/* True with probability num/den. */
bool prop_chance(prop_rng_t *rng, unsigned num, unsigned den);

/* The base seed of this run: SHOAL_SEED or the clock; printed once. */
uint64_t prop_seed(void);
/* Case counts are multiplied by SHOAL_PROP_CASES / 100 (default 100 = as written). */
int prop_cases(int cases);

/* Node i of a small fixed pool ("127.0.0.1:<2551+i>:<i+1>"), i < 8. */
const shoal_node_t *prop_node(int i);

typedef struct {
    const char *name;
    /* An empty value of the type. */
    shoal_crdt_t *(*create)(void);
    /* One random local mutation at replica `self`, recording its delta. Keep the element/key
       universe small so that operations collide (concurrent add/remove of one element). */
    void (*random_op)(shoal_crdt_t *value, const shoal_node_t *self, prop_rng_t *rng);
    /* Delta exchange alone makes replicas converge (no full-state round needed at the end). */
    bool deltas_converge;
    /* Merge is associative on every value (false only for the map types, see ddata.h). */
    bool strict_assoc;
} prop_type_t;

/* Each check fails the current cmocka test with the seed and a rendering of the values. */
void prop_check_merge_laws(const prop_type_t *t, int cases);
void prop_check_convergence(const prop_type_t *t, int cases);
void prop_check_delta_law(const prop_type_t *t, int cases);
void prop_check_roundtrip(const prop_type_t *t, int cases);
/* All four. */
void prop_check_all(const prop_type_t *t, int cases);

/* Asserts a and b are equal values with identical encodings; `what` names the check. */
void prop_assert_same(const shoal_crdt_t *a, const shoal_crdt_t *b, const char *what,
                      uint64_t seed);
/* Bad input for v's type decoder: `rounds` random payloads and `rounds` random one-byte
   corruptions of v's own payload, each wrapped in an envelope of v's type. Every one must decode
   to an error or to a value that round-trips canonically; never a crash (ASan/UBSan watch). */
void prop_check_corruption(const shoal_crdt_t *v, int rounds);

/* Encodes then decodes v (asserting success); the caller owns the result. */
shoal_crdt_t *prop_roundtrip(const shoal_crdt_t *v);

#endif
