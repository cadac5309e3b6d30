/*  ormap.c — ORMap (byte-string keys -> values of one CRDT type), its specializations
    ORMultiMap (ORSet values), LWWMap (LWWRegister values) and PNCounterMap (PNCounter values),
    and ORMapDelta, the delta type of all four.

    STATE. The keys are an ORSet (add wins over a concurrent remove that did not observe the add);
    every present key has exactly one value, the value type's empty value until modified. An
    update adds the key again (a new dot, so an update concurrent with a removal of the key keeps
    the key: the update wins, as in Akka) and modifies the value in place. A removal removes the
    key and drops its value, so a key removed then added again starts from an empty value.
    Full-state merge joins the key sets, then each present key's values, and drops the values of
    keys no longer present. Dropping values is what makes the merge commutative and idempotent but
    not always associative when a removal races with an update (a ⊔ b may drop a value that c
    still holds in full); replicas converge after the replicator's anti-entropy (ddata.h, MERGE).

    ORMULTIMAP WITH VALUE DELTAS keeps a tombstone per removed key: removal first clears the
    key's set (recording that clear as the key's value delta), then removes the key but keeps the
    cleared set, whose causal context remembers the removed dots. Pekko's
    ORMultiMap.emptyWithValueDeltas clears and keeps the set too, but garbage-collects every
    tombstone whose set has no elements at each merge, so the removed dots are forgotten by any
    replica that merged since: a removal relayed through a third replica (A removes k, B merges
    A, C merges B) reaches C without them, C keeps its own copy of k's set, and a later add to k
    brings the removed elements back. Shoal keeps the tombstone until it equals the empty value
    (no context left), so the relayed removal holds (docs/types.md, test_ormap_dots.c). Values are then never dropped: merge and delta application are pointwise joins
    (keys ORSet × key -> ORSet), so in this mode merge is a true join (associative) and deltas
    alone make replicas converge, byte for byte — which plain dropping cannot give: a replica
    that dropped the set and then received a concurrent add of the key would hold the new element
    without the removed dots in its context, and differ from the replica that applied the clear.
    The price is one small tombstone (an empty set with its context) per removed key, encoded in
    ORMap.removed_keys/removed_values. A tombstone equal to the empty value is not stored, so the
    encoding stays canonical.

    DELTAS. A map's pending delta (ORMapDelta) is the keys' ORSet delta plus one entry per key
    whose value changed: the value's own delta when the map propagates value deltas (generic ORMap
    of a type with deltas, PNCounterMap, ORMultiMap with value_deltas), otherwise a copy of the
    whole new value (LWWMap, ORMultiMap by default: Akka's choice, a full set is self-contained).
    So an update ships a delta whose size depends on the change, not on the map. Applying a delta
    joins the keys, merges each entry into the key's value (existing or empty) when the key is
    present (always, for tombstoning ORMultiMaps), and drops the values of keys left absent.
    A removal also lists its key (removed_keys), and drops the key's pending entry: when a key is
    removed and updated again before the delta is taken, the group says "k added, entry = the new
    value", and a receiver would merge that into its old value. So a receiver first applies, alone,
    what the keys delta has seen removed of the listed keys, drops the value of each key that
    leaves absent (its incarnation was wholly observed by the removal at the origin), then applies
    the rest: state ⊔ delta(ops) = ops(state) holds for any sequence of local operations.
    Deltas merge into a delta group in their origin's order, older ⊔ newer: the newer delta's
    removals drop the older delta's entries for those keys, as they did at the origin.

    delta_causal is true for every map type: value deltas must not be applied out of their
    origin's order. Example with PNCounterMap: node A adds 5 to k, removes k, adds 1 to k (a new
    incarnation, from zero). In order, a replica ends with k = 1; if the first delta arrives last
    it is merged into the new incarnation (k present again) and gives k = 5. The same happens with
    full values (an old set merged into a re-added key brings back removed elements) except for
    tombstoning ORMultiMaps, whose deltas are joins and could go in any order; the flag is per
    type, so ORMultiMap keeps it too.

    RE-CREATED SETS. A map that drops a removed key's value (every map but the tombstoning
    ORMultiMap) marks the ORSet values it creates or decodes, so that the first local add to one
    draws its dot above every dot of that node an earlier incarnation of the key's set may still
    carry elsewhere (orset.c, "Re-created sets"); that first change is shipped as the whole set,
    whose context carries the claim, even where the map otherwise ships ORSet deltas.

    PRUNING delegates to the keys ORSet and to every value (tombstones included).
    Generic ORMap values cannot be maps: a map value type would need its own value type to create
    empty values, which a type descriptor does not carry.
*/
#include "internal.h"

#include <inttypes.h>

typedef struct {
    shoal_crdt_t base;
    const shoal_type_t *value_type;
    bool value_deltas;   /* ORMultiMap's flag as given (encoded) */
    bool ship_deltas;    /* pending entries are value deltas, not full values */
    bool retain;         /* tombstones: ORMultiMap with value_deltas */
    shoal_crdt_t *keys;  /* ORSet */
    shoal_hmap_t values; /* key -> shoal_crdt_t *: every present key, plus tombstones */
    shoal_crdt_t *delta; /* pending ORMapDelta, or NULL */
} ormap_t;

typedef struct {
    shoal_crdt_t base;
    const shoal_type_t *value_type;
    shoal_crdt_t *keys;   /* ORSetDelta, or NULL */
    shoal_hmap_t entries; /* key -> value delta or full value */
    /* Keys the keys delta speaks about (a key set, see hmap_mark): the keys whose presence
       applying the delta may change. Derived from the keys delta, so it is not encoded. */
    shoal_hmap_t touched;
    /* Keys removed by the changes (a key set), for maps that drop removed values: see
       delta_merge and map_merge_delta. */
    shoal_hmap_t removed_keys;
} ormap_delta_t;

#define M(x) ((ormap_t *)(x))
#define CM(x) ((const ormap_t *)(x))
#define D(x) ((ormap_delta_t *)(x))
#define CD(x) ((const ormap_delta_t *)(x))

static const char empty_key[1] = "";

static bool is_map(const shoal_crdt_t *v)
{
    return v && (v->type == &shoal_type_ormap || v->type == &shoal_type_ormultimap ||
                 v->type == &shoal_type_lwwmap || v->type == &shoal_type_pncountermap);
}

/* A type a generic ORMap can hold: creatable, not a map, not a delta type. */
static bool value_type_ok(const shoal_type_t *t)
{
    return t && t->create && !t->is_map && t->tag != SHOAL_ORSET_DELTA &&
           t->tag != SHOAL_ORMAP_DELTA && shoal_type_by_tag(t->tag) == t;
}

/* The value type a map type requires, or NULL for the generic ORMap (any value_type_ok). */
static const shoal_type_t *required_value_type(const shoal_type_t *map_type)
{
    if (map_type == &shoal_type_ormultimap)
        return &shoal_type_orset;
    if (map_type == &shoal_type_lwwmap)
        return &shoal_type_lwwregister;
    if (map_type == &shoal_type_pncountermap)
        return &shoal_type_pncounter;
    return NULL;
}

/* True when v equals its type's empty value. */
static bool is_bottom(const shoal_crdt_t *v)
{
    shoal_crdt_t *e = v->type->create();
    bool b = shoal_crdt_equal(v, e);
    shoal_crdt_destroy(&e);
    return b;
}

static void free_values(shoal_hmap_t *h)
{
    for (size_t i = 0; i < h->cap; i++)
        if (SHOAL_HSLOT_LIVE(&h->slots[i])) {
            shoal_crdt_t *v = h->slots[i].value;
            shoal_crdt_destroy(&v);
        }
    shoal_hmap_free(h);
}

static void copy_values(shoal_hmap_t *dst, const shoal_hmap_t *src)
{
    for (size_t i = 0; i < src->cap; i++) {
        const shoal_hslot_t *s = &src->slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        bool ins;
        shoal_hslot_t *d = shoal_hmap_upsert(dst, s->key, s->klen, &ins);
        d->value = shoal_crdt_clone(s->value);
    }
}

/* Replaces (or inserts) key's value in h, destroying the previous one. Takes v. */
static void hmap_put_value(shoal_hmap_t *h, const void *key, size_t len, shoal_crdt_t *v)
{
    bool ins;
    shoal_hslot_t *s = shoal_hmap_upsert(h, key, len, &ins);
    if (!ins) {
        shoal_crdt_t *old = s->value;
        shoal_crdt_destroy(&old);
    }
    s->value = v;
}

static void hmap_drop_value(shoal_hmap_t *h, const void *key, size_t len)
{
    shoal_crdt_t *v = shoal_hmap_remove(h, key, len);
    shoal_crdt_destroy(&v);
}

/* Key sets (touched, removed_keys) are hash maps whose values are this non-NULL mark, so that
   shoal_hmap_get tells membership. */
static char mark;

static void hmap_mark(shoal_hmap_t *h, const void *key, size_t len)
{
    bool ins;
    shoal_hslot_t *s = shoal_hmap_upsert(h, key, len, &ins);
    s->value = &mark;
}

static void copy_marks(shoal_hmap_t *dst, const shoal_hmap_t *src)
{
    for (size_t i = 0; i < src->cap; i++)
        if (SHOAL_HSLOT_LIVE(&src->slots[i]))
            hmap_mark(dst, src->slots[i].key, src->slots[i].klen);
}

/* Appends a length-delimited field (an embedded message given as its bytes). */
static void put_bytes_field(shoal_buf_t *out, uint32_t field, const uint8_t *data, size_t len)
{
    uint8_t hdr[20];
    size_t n = 0;
    uint64_t x = ((uint64_t)field << 3) | 2;
    do {
        hdr[n] = (uint8_t)(x & 0x7f);
        x >>= 7;
        hdr[n++] |= x ? 0x80 : 0;
    } while (x);
    x = len;
    do {
        hdr[n] = (uint8_t)(x & 0x7f);
        x >>= 7;
        hdr[n++] |= x ? 0x80 : 0;
    } while (x);
    shoal_buf_append(out, hdr, n);
    shoal_buf_append(out, data, len);
}

/* Values encoded as Value envelopes into one shared buffer: payloads are pointed at once the
   buffer stops moving (envs_fix). */
typedef struct {
    Shoal__Ddata__Value *env;
    Shoal__Ddata__Value **ptr;
    size_t *off;
    size_t n;
    shoal_buf_t buf;
} envs_t;

static void envs_init(envs_t *e, size_t cap)
{
    e->env = shoal_calloc(cap ? cap : 1, sizeof *e->env);
    e->ptr = shoal_calloc(cap ? cap : 1, sizeof *e->ptr);
    e->off = shoal_calloc(cap ? cap : 1, sizeof *e->off);
    e->n = 0;
    shoal_buf_init(&e->buf);
}

static int envs_add(envs_t *e, const shoal_crdt_t *v)
{
    Shoal__Ddata__Value *env = &e->env[e->n];
    shoal__ddata__value__init(env);
    size_t off = e->buf.len;
    int rc = v->type->encode_payload(v, &e->buf);
    if (rc < 0)
        return rc;
    env->type = v->type->tag;
    env->version = v->type->format_version;
    env->payload.len = e->buf.len - off;
    e->off[e->n] = off;
    e->ptr[e->n] = env;
    e->n++;
    return 0;
}

static void envs_fix(envs_t *e)
{
    for (size_t i = 0; i < e->n; i++)
        e->env[i].payload.data = e->buf.data ? e->buf.data + e->off[i] : NULL;
}

static void envs_free(envs_t *e)
{
    free(e->env);
    free(e->ptr);
    free(e->off);
    shoal_buf_free(&e->buf);
}

/* Decodes a nested Value envelope that must be of type `a` or `b`, at nesting level depth. */
static int decode_nested(const Shoal__Ddata__Value *env, int depth, const shoal_type_t *a,
                         const shoal_type_t *b, shoal_crdt_t **out)
{
    *out = NULL;
    if (depth > SHOAL_DECODE_MAX_DEPTH)
        return SHOAL_ETOOBIG;
    const shoal_type_t *t = shoal_type_by_tag(env->type);
    if (!t)
        return SHOAL_EVERSION;
    if (t != a && t != b)
        return SHOAL_EDECODE;
    if (env->version == 0 || env->version > t->format_version)
        return SHOAL_EVERSION;
    shoal_crdt_t *v = NULL;
    int rc = t->decode_payload(env->payload.data, env->payload.len, depth, &v);
    if (rc < 0) {
        shoal_crdt_destroy(&v);
        return rc;
    }
    if (!v)
        return SHOAL_EDECODE;
    *out = v;
    return 0;
}

/* Decodes an embedded ORSet message (full state or delta layout) with the given type. */
static int decode_keys(const Shoal__Ddata__ORSet *msg, const shoal_type_t *type, int depth,
                       shoal_crdt_t **out)
{
    shoal_buf_t b = {0};
    shoal_pb_pack(&msg->base, &b);
    shoal_crdt_t *k = NULL;
    int rc = type->decode_payload(b.data, b.len, depth, &k);
    shoal_buf_free(&b);
    if (rc < 0) {
        shoal_crdt_destroy(&k);
        return rc;
    }
    if (!k)
        return SHOAL_EDECODE;
    *out = k;
    return 0;
}

/* =============================================================================================
 * ORMapDelta
 */
static ormap_delta_t *delta_alloc(const shoal_type_t *value_type)
{
    ormap_delta_t *d = shoal_calloc(1, sizeof *d);
    d->base.type = &shoal_type_ormap_delta;
    d->value_type = value_type;
    return d;
}

static void delta_destroy(shoal_crdt_t *self)
{
    ormap_delta_t *d = D(self);
    shoal_crdt_destroy(&d->keys);
    free_values(&d->entries);
    shoal_hmap_free(&d->touched);
    shoal_hmap_free(&d->removed_keys);
    free(d);
}

static shoal_crdt_t *delta_clone(const shoal_crdt_t *self)
{
    const ormap_delta_t *s = CD(self);
    ormap_delta_t *d = delta_alloc(s->value_type);
    d->keys = shoal_crdt_clone(s->keys);
    copy_values(&d->entries, &s->entries);
    copy_marks(&d->touched, &s->touched);
    copy_marks(&d->removed_keys, &s->removed_keys);
    return &d->base;
}

static void touch(ormap_delta_t *d, const void *key, size_t len)
{
    hmap_mark(&d->touched, key, len);
}

/* *into := *into ⊔ d (two ORSet deltas), taking d. */
static int join_orset_delta(shoal_crdt_t **into, shoal_crdt_t *d)
{
    if (!*into) {
        *into = d;
        return 0;
    }
    int rc = shoal_crdt_merge(*into, d);
    shoal_crdt_destroy(&d);
    return rc;
}

/* From a keys delta (ORSetDelta), the delta of just what it has seen removed of the keys in
   `which`, without its live dots: applied alone to a replica's keys, it removes a key exactly
   when every dot the replica holds for it was observed and removed at the origin. Built on the
   ORSet wire layout (proto/ddata.proto), the one view of a delta's dots outside orset.c.
   *out is NULL when none of those keys has seen anything. */
static int removal_probe(const shoal_crdt_t *kd, const shoal_hmap_t *which, shoal_crdt_t **out)
{
    *out = NULL;
    shoal_buf_t b = {0};
    int rc = kd->type->encode_payload(kd, &b);
    if (rc < 0) {
        shoal_buf_free(&b);
        return rc;
    }
    Shoal__Ddata__ORSet *in = shoal__ddata__orset__unpack(NULL, b.len, b.data);
    shoal_buf_free(&b);
    if (!in)
        return SHOAL_EDECODE;
    size_t n = in->n_elements, ns = in->n_seen_node;
    if (in->n_seen_count != n || in->n_seen_counter != ns) {
        shoal__ddata__orset__free_unpacked(in, NULL);
        return SHOAL_EDECODE;
    }
    Shoal__Ddata__ORSet pr = SHOAL__DDATA__ORSET__INIT;
    pr.elements = shoal_calloc(n ? n : 1, sizeof *pr.elements);
    pr.dot_count = shoal_calloc(n ? n : 1, sizeof *pr.dot_count);
    pr.seen_count = shoal_calloc(n ? n : 1, sizeof *pr.seen_count);
    pr.seen_node = shoal_calloc(ns ? ns : 1, sizeof *pr.seen_node);
    pr.seen_counter = shoal_calloc(ns ? ns : 1, sizeof *pr.seen_counter);
    pr.nodes = shoal_calloc(in->n_nodes ? in->n_nodes : 1, sizeof *pr.nodes);
    uint32_t *remap = shoal_calloc(in->n_nodes ? in->n_nodes : 1, sizeof *remap);
    bool *used = shoal_calloc(in->n_nodes ? in->n_nodes : 1, sizeof *used);
    size_t at = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        size_t cnt = in->seen_count[k];
        if (cnt > ns - at) {
            rc = SHOAL_EDECODE;
            break;
        }
        const ProtobufCBinaryData *e = &in->elements[k];
        if (cnt && shoal_hmap_get(which, e->len ? (const void *)e->data : empty_key, e->len)) {
            for (size_t j = at; j < at + cnt; j++) {
                if (in->seen_node[j] >= in->n_nodes) {
                    rc = SHOAL_EDECODE;
                    break;
                }
                used[in->seen_node[j]] = true;
            }
            pr.elements[pr.n_elements] = *e;
            pr.seen_count[pr.n_elements] = (uint32_t)cnt;
            pr.n_elements++;
            for (size_t j = at; j < at + cnt; j++) {
                pr.seen_node[pr.n_seen_node] = in->seen_node[j]; /* remapped below */
                pr.seen_counter[pr.n_seen_node++] = in->seen_counter[j];
            }
        }
        at += cnt;
    }
    if (rc == 0 && pr.n_elements) {
        /* the node table of the probe holds exactly the nodes it refers to, in the same order */
        for (size_t i = 0; i < in->n_nodes; i++)
            if (used[i]) {
                remap[i] = (uint32_t)pr.n_nodes;
                pr.nodes[pr.n_nodes++] = in->nodes[i];
            }
        for (size_t j = 0; j < pr.n_seen_node; j++)
            pr.seen_node[j] = remap[pr.seen_node[j]];
        pr.n_dot_count = pr.n_seen_count = pr.n_elements;
        pr.n_seen_counter = pr.n_seen_node;
        shoal_pb_pack(&pr.base, &b);
        rc = shoal_type_orset_delta.decode_payload(b.data, b.len, 0, out);
        shoal_buf_free(&b);
    }
    free(remap);
    free(used);
    free(pr.elements);
    free(pr.dot_count);
    free(pr.seen_count);
    free(pr.seen_node);
    free(pr.seen_counter);
    free(pr.nodes);
    shoal__ddata__orset__free_unpacked(in, NULL);
    if (rc < 0)
        shoal_crdt_destroy(out);
    return rc;
}

/* The join of two entries for one key, each a value delta or a full value; a full value wins as
   the representation. Takes a, returns the result (a or a new value). */
static shoal_crdt_t *entry_join(shoal_crdt_t *a, const shoal_crdt_t *b, int *rc)
{
    if (a->type == b->type) {
        *rc = shoal_crdt_merge(a, b);
        return a;
    }
    if (!b->type->delta_type || b->type->delta_type != a->type) {
        /* a is the full value (or the types are unrelated, which merge_delta reports) */
        *rc = shoal_crdt_merge_delta(a, b);
        shoal_crdt_reset_delta(a);
        return a;
    }
    shoal_crdt_t *c = shoal_crdt_clone(b);
    shoal_crdt_reset_delta(c);
    *rc = shoal_crdt_merge_delta(c, a);
    if (*rc < 0) {
        shoal_crdt_destroy(&c);
        return a;
    }
    shoal_crdt_reset_delta(c);
    shoal_crdt_destroy(&a);
    return c;
}

/* Joins entry e (owned) into d's entry for key. */
static int entry_merge_in(ormap_delta_t *d, const void *key, size_t len, shoal_crdt_t *e)
{
    bool ins;
    shoal_hslot_t *s = shoal_hmap_upsert(&d->entries, key, len, &ins);
    if (ins) {
        s->value = e;
        return 0;
    }
    int rc = 0;
    s->value = entry_join(s->value, e, &rc);
    shoal_crdt_destroy(&e);
    return rc;
}

/* A delta group: self := self then other, for consecutive deltas of one origin (self the older).
   A key the newer delta removed loses the older delta's entry, as it lost its value at the
   origin; the rest is a join. */
static int delta_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    ormap_delta_t *d = D(self);
    const ormap_delta_t *o = CD(other);
    if (d->value_type != o->value_type)
        return SHOAL_ETYPE;
    int rc = 0;
    for (size_t i = 0; i < o->removed_keys.cap; i++) {
        const shoal_hslot_t *s = &o->removed_keys.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        hmap_drop_value(&d->entries, s->key, s->klen);
        hmap_mark(&d->removed_keys, s->key, s->klen);
    }
    if (o->keys) {
        if (d->keys)
            rc = shoal_crdt_merge(d->keys, o->keys);
        else
            d->keys = shoal_crdt_clone(o->keys);
        if (rc < 0)
            return rc;
    }
    for (size_t i = 0; i < o->entries.cap; i++) {
        const shoal_hslot_t *s = &o->entries.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        rc = entry_merge_in(d, s->key, s->klen, shoal_crdt_clone(s->value));
        if (rc < 0)
            return rc;
    }
    for (size_t i = 0; i < o->touched.cap; i++) {
        const shoal_hslot_t *s = &o->touched.slots[i];
        if (SHOAL_HSLOT_LIVE(s))
            touch(d, s->key, s->klen);
    }
    return 0;
}

static int delta_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const ormap_delta_t *d = CD(self);
    /* The message is written as three parts in field order — value_type, the keys delta's own
       payload as field 2, then the entries — which is exactly what packing one message would
       give, without unpacking the ORSet payload into protobuf-c structures first. */
    Shoal__Ddata__ORMapDelta head = SHOAL__DDATA__ORMAP_DELTA__INIT;
    head.value_type = d->value_type->tag;
    shoal_pb_pack(&head.base, out);
    int rc = 0;
    if (d->keys) {
        shoal_buf_t kb = {0};
        rc = d->keys->type->encode_payload(d->keys, &kb);
        if (rc == 0)
            put_bytes_field(out, 2, kb.data, kb.len);
        shoal_buf_free(&kb);
        if (rc < 0)
            return rc;
    }
    size_t n = d->entries.n, nr = d->removed_keys.n;
    shoal_hslot_t **sorted = shoal_hmap_sorted(&d->entries);
    shoal_hslot_t **rsorted = shoal_hmap_sorted(&d->removed_keys);
    envs_t envs;
    envs_init(&envs, n);
    ProtobufCBinaryData *keys = shoal_calloc(n ? n : 1, sizeof *keys);
    ProtobufCBinaryData *rkeys = shoal_calloc(nr ? nr : 1, sizeof *rkeys);
    for (size_t i = 0; i < n && rc == 0; i++) {
        keys[i].data = sorted[i]->key;
        keys[i].len = sorted[i]->klen;
        rc = envs_add(&envs, sorted[i]->value);
    }
    for (size_t i = 0; i < nr; i++) {
        rkeys[i].data = rsorted[i]->key;
        rkeys[i].len = rsorted[i]->klen;
    }
    if (rc == 0) {
        envs_fix(&envs);
        Shoal__Ddata__ORMapDelta tail = SHOAL__DDATA__ORMAP_DELTA__INIT;
        tail.n_value_keys = n;
        tail.value_keys = keys;
        tail.n_value_deltas = n;
        tail.value_deltas = envs.ptr;
        tail.n_removed_keys = nr;
        tail.removed_keys = rkeys;
        shoal_pb_pack(&tail.base, out);
    }
    free(keys);
    free(rkeys);
    envs_free(&envs);
    free(sorted);
    free(rsorted);
    return rc;
}

static int delta_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    Shoal__Ddata__ORMapDelta *msg = shoal__ddata__ormap_delta__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    int rc = 0;
    ormap_delta_t *d = NULL;
    const shoal_type_t *vt = shoal_type_by_tag(msg->value_type);
    if (!vt) {
        rc = SHOAL_EVERSION;
        goto done;
    }
    if (!value_type_ok(vt)) {
        rc = SHOAL_EDECODE;
        goto done;
    }
    d = delta_alloc(vt);
    if (msg->keys) {
        rc = decode_keys(msg->keys, &shoal_type_orset_delta, depth + 1, &d->keys);
        if (rc < 0)
            goto done;
        for (size_t i = 0; i < msg->keys->n_elements; i++)
            touch(d, msg->keys->elements[i].len ? msg->keys->elements[i].data
                                                : (const uint8_t *)empty_key,
                  msg->keys->elements[i].len);
    }
    /* removed keys: strictly ascending, each one of the keys delta's elements (also in order) */
    for (size_t i = 0, j = 0; i < msg->n_removed_keys; i++) {
        const ProtobufCBinaryData *k = &msg->removed_keys[i];
        const void *kp = k->len ? (const void *)k->data : empty_key;
        if (i > 0 && shoal_bytes_cmp(msg->removed_keys[i - 1].data,
                                     msg->removed_keys[i - 1].len, kp, k->len) >= 0) {
            rc = SHOAL_EDECODE;
            goto done;
        }
        int c = 1;
        while (msg->keys && j < msg->keys->n_elements &&
               (c = shoal_bytes_cmp(msg->keys->elements[j].data, msg->keys->elements[j].len, kp,
                                    k->len)) < 0)
            j++;
        if (c != 0) {
            rc = SHOAL_EDECODE;
            goto done;
        }
        hmap_mark(&d->removed_keys, kp, k->len);
    }
    if (msg->n_value_keys != msg->n_value_deltas) {
        rc = SHOAL_EDECODE;
        goto done;
    }
    for (size_t i = 0; i < msg->n_value_keys; i++) {
        const ProtobufCBinaryData *k = &msg->value_keys[i];
        const void *kp = k->len ? (const void *)k->data : empty_key;
        if (i > 0 && shoal_bytes_cmp(msg->value_keys[i - 1].data, msg->value_keys[i - 1].len,
                                     kp, k->len) >= 0) {
            rc = SHOAL_EDECODE;
            goto done;
        }
        shoal_crdt_t *v = NULL;
        rc = decode_nested(msg->value_deltas[i], depth + 1, vt,
                           vt->delta_type ? vt->delta_type : vt, &v);
        if (rc < 0)
            goto done;
        hmap_put_value(&d->entries, kp, k->len, v);
    }
done:
    shoal__ddata__ormap_delta__free_unpacked(msg, NULL);
    if (rc < 0) {
        if (d)
            delta_destroy(&d->base);
        return rc;
    }
    *out = &d->base;
    return 0;
}

static int delta_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const ormap_delta_t *d = CD(self);
    shoal_buf_printf(out, "ORMapDelta<%s>{keys: ", d->value_type->name);
    if (d->keys)
        shoal_crdt_render(d->keys, out);
    else
        shoal_buf_printf(out, "none");
    if (d->removed_keys.n) {
        shoal_hslot_t **r = shoal_hmap_sorted(&d->removed_keys);
        shoal_buf_printf(out, ", removed: ");
        for (size_t i = 0; i < d->removed_keys.n; i++) {
            shoal_buf_printf(out, i ? ", " : "");
            shoal_buf_append_quoted(out, r[i]->key, r[i]->klen);
        }
        free(r);
    }
    shoal_hslot_t **sorted = shoal_hmap_sorted(&d->entries);
    for (size_t i = 0; i < d->entries.n; i++) {
        shoal_buf_printf(out, ", ");
        shoal_buf_append_quoted(out, sorted[i]->key, sorted[i]->klen);
        shoal_buf_printf(out, " -> ");
        shoal_crdt_render(sorted[i]->value, out);
    }
    free(sorted);
    shoal_buf_printf(out, "}");
    return 0;
}

static bool delta_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed);
static int delta_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed);
static int delta_prune_apply(shoal_crdt_t *self, const shoal_node_t *removed,
                             const shoal_prune_plan_t *plan, bool owner);

const shoal_type_t shoal_type_ormap_delta = {
    .name = "ORMapDelta",
    .tag = SHOAL_ORMAP_DELTA,
    .format_version = 1,
    .delta_type = NULL,
    .delta_causal = false,
    .has_pruning = false,
    .is_map = false,
    .create = NULL,
    .needs_pruning_from = delta_needs_pruning_from,
    .prune_cleanup = delta_prune_cleanup,
    .prune_apply = delta_prune_apply,
    .destroy = delta_destroy,
    .clone = delta_clone,
    .merge = delta_merge,
    .equal = NULL, /* canonical encodings */
    .encode_payload = delta_encode,
    .decode_payload = delta_decode,
    .render = delta_render,
};

/* =============================================================================================
 * The maps
 */
static ormap_t *map_alloc(const shoal_type_t *map_type, const shoal_type_t *value_type,
                          bool value_deltas)
{
    ormap_t *m = shoal_calloc(1, sizeof *m);
    m->base.type = map_type;
    m->value_type = value_type;
    m->value_deltas = map_type == &shoal_type_ormultimap && value_deltas;
    m->retain = m->value_deltas;
    if (map_type == &shoal_type_ormultimap)
        m->ship_deltas = m->value_deltas;
    else
        m->ship_deltas = value_type->delta_type != NULL;
    m->keys = shoal_orset_new();
    return m;
}

shoal_crdt_t *shoal_ormap_new(const shoal_type_t *value_type)
{
    if (!value_type_ok(value_type))
        return NULL;
    return &map_alloc(&shoal_type_ormap, value_type, false)->base;
}

shoal_crdt_t *shoal_ormultimap_new(bool value_deltas)
{
    return &map_alloc(&shoal_type_ormultimap, &shoal_type_orset, value_deltas)->base;
}

shoal_crdt_t *shoal_lwwmap_new(void)
{
    return &map_alloc(&shoal_type_lwwmap, &shoal_type_lwwregister, false)->base;
}

shoal_crdt_t *shoal_pncountermap_new(void)
{
    return &map_alloc(&shoal_type_pncountermap, &shoal_type_pncounter, false)->base;
}

static void map_destroy(shoal_crdt_t *self)
{
    ormap_t *m = M(self);
    shoal_crdt_destroy(&m->keys);
    free_values(&m->values);
    shoal_crdt_destroy(&m->delta);
    free(m);
}

static shoal_crdt_t *map_clone(const shoal_crdt_t *self)
{
    const ormap_t *s = CM(self);
    ormap_t *m = map_alloc(self->type, s->value_type, s->value_deltas);
    shoal_crdt_destroy(&m->keys);
    m->keys = shoal_crdt_clone(s->keys);
    copy_values(&m->values, &s->values);
    m->delta = shoal_crdt_clone(s->delta);
    return &m->base;
}

/* A new empty value for a key. An ORSet of a map that drops removed values is marked
   re-created (orset.c): this replica may have dropped an earlier incarnation of the key's set,
   whose dots another replica still holds, so its next local add must draw above them. */
static shoal_crdt_t *new_value(const ormap_t *m)
{
    shoal_crdt_t *v = m->value_type->create();
    if (!m->retain)
        shoal_orset_mark_recreated(v); /* a no-op for other value types */
    return v;
}

static bool present(const ormap_t *m, const void *key, size_t len)
{
    return shoal_orset_contains(m->keys, key, len);
}

/* Restores the invariants for one key after its presence may have changed: a present key has a
   value; an absent key has none, or (tombstoning maps) only a value other than the empty one. */
static void settle_key(ormap_t *m, const void *key, size_t len)
{
    shoal_crdt_t *v = shoal_hmap_get(&m->values, key, len);
    if (present(m, key, len)) {
        if (!v)
            hmap_put_value(&m->values, key, len, new_value(m));
    } else if (v && (!m->retain || is_bottom(v))) {
        hmap_drop_value(&m->values, key, len);
    }
}

static int ensure_value_cb(const void *key, size_t len, void *arg)
{
    ormap_t *m = arg;
    if (!len)
        key = empty_key;
    if (!shoal_hmap_get(&m->values, key, len))
        hmap_put_value(&m->values, key, len, new_value(m));
    return 0;
}

/* settle_key for every key. */
static void settle_all(ormap_t *m)
{
    shoal_orset_foreach(m->keys, ensure_value_cb, m);
    for (size_t i = 0; i < m->values.cap; i++) {
        shoal_hslot_t *s = &m->values.slots[i];
        if (!SHOAL_HSLOT_LIVE(s) || present(m, s->key, s->klen))
            continue;
        if (!m->retain || is_bottom(s->value))
            hmap_drop_value(&m->values, s->key, s->klen); /* leaves a tombstone slot: safe */
    }
}

static int map_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    ormap_t *m = M(self);
    const ormap_t *o = CM(other);
    if (m->value_type != o->value_type || m->value_deltas != o->value_deltas)
        return SHOAL_ETYPE;
    int rc = shoal_crdt_merge(m->keys, o->keys);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < o->values.cap; i++) {
        const shoal_hslot_t *s = &o->values.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        if (!m->retain && !present(m, s->key, s->klen))
            continue;
        shoal_crdt_t *v = shoal_hmap_get(&m->values, s->key, s->klen);
        if (!v) {
            v = new_value(m);
            hmap_put_value(&m->values, s->key, s->klen, v);
        }
        rc = shoal_crdt_merge(v, s->value);
        if (rc < 0)
            break;
    }
    settle_all(m);
    return rc;
}

static int map_merge_delta(shoal_crdt_t *self, const shoal_crdt_t *delta)
{
    ormap_t *m = M(self);
    const ormap_delta_t *d = CD(delta);
    if (d->value_type != m->value_type)
        return SHOAL_ETYPE;
    int rc = 0;
    if (d->removed_keys.n && d->keys && !m->retain) {
        /* The removals first, alone: a removed key they leave absent was, at the origin,
           removed with everything of it this replica holds, so its value goes before any newer
           entry for the key (a re-add in the same group) is merged into it. The probe is part
           of `keys`, so applying `keys` after it gives the same key set as alone. */
        shoal_crdt_t *probe = NULL;
        rc = removal_probe(d->keys, &d->removed_keys, &probe);
        if (rc < 0)
            return rc;
        if (probe) {
            rc = shoal_crdt_merge_delta(m->keys, probe);
            shoal_crdt_destroy(&probe);
            if (rc < 0)
                return rc;
            shoal_crdt_reset_delta(m->keys);
            for (size_t i = 0; i < d->removed_keys.cap; i++) {
                const shoal_hslot_t *s = &d->removed_keys.slots[i];
                if (SHOAL_HSLOT_LIVE(s) && !present(m, s->key, s->klen))
                    hmap_drop_value(&m->values, s->key, s->klen);
            }
        }
    }
    if (d->keys) {
        rc = shoal_crdt_merge_delta(m->keys, d->keys);
        if (rc < 0)
            return rc;
        shoal_crdt_reset_delta(m->keys);
    }
    for (size_t i = 0; i < d->entries.cap; i++) {
        const shoal_hslot_t *s = &d->entries.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        if (!m->retain && !present(m, s->key, s->klen))
            continue;
        shoal_crdt_t *v = shoal_hmap_get(&m->values, s->key, s->klen);
        if (!v) {
            v = new_value(m);
            hmap_put_value(&m->values, s->key, s->klen, v);
        }
        rc = shoal_crdt_merge_delta(v, s->value);
        shoal_crdt_reset_delta(v);
        if (rc < 0)
            break;
        settle_key(m, s->key, s->klen);
    }
    for (size_t i = 0; i < d->touched.cap; i++) {
        const shoal_hslot_t *s = &d->touched.slots[i];
        if (SHOAL_HSLOT_LIVE(s))
            settle_key(m, s->key, s->klen);
    }
    return rc;
}

static const shoal_crdt_t *map_delta(const shoal_crdt_t *self)
{
    return CM(self)->delta;
}

static shoal_crdt_t *map_take_delta(shoal_crdt_t *self)
{
    shoal_crdt_t *d = M(self)->delta;
    M(self)->delta = NULL;
    return d;
}

static bool map_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    const ormap_t *x = CM(a), *y = CM(b);
    if (x->value_type != y->value_type || x->value_deltas != y->value_deltas ||
        x->values.n != y->values.n || !shoal_crdt_equal(x->keys, y->keys))
        return false;
    for (size_t i = 0; i < x->values.cap; i++) {
        const shoal_hslot_t *s = &x->values.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        const shoal_crdt_t *w = shoal_hmap_get(&y->values, s->key, s->klen);
        if (!w || !shoal_crdt_equal(s->value, w))
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Local changes
 */
static ormap_delta_t *pending(ormap_t *m)
{
    if (!m->delta)
        m->delta = &delta_alloc(m->value_type)->base;
    return D(m->delta);
}

/* Moves the keys ORSet's pending delta (of a change to `key`) into the map's; a removal that
   drops the key's value is also listed (ORMapDelta.removed_keys). */
static void record_keys_delta(ormap_t *m, const void *key, size_t len, bool removal)
{
    ormap_delta_t *d = pending(m);
    touch(d, key, len);
    shoal_crdt_t *kd = shoal_crdt_take_delta(m->keys);
    if (!kd)
        return;
    if (removal && !m->retain)
        hmap_mark(&d->removed_keys, key, len);
    (void)join_orset_delta(&d->keys, kd); /* two ORSet deltas: a delta group */
}

/* Records the change of key's value v (which carries its own pending delta) and leaves v with
   no pending delta. `whole`: ship the whole value even where the map ships value deltas (a
   re-created ORSet's first add claims dots that no ORSetDelta can carry, orset.c). */
static void record_value(ormap_t *m, const void *key, size_t len, shoal_crdt_t *v, bool whole)
{
    ormap_delta_t *d = pending(m);
    if (m->ship_deltas && !whole) {
        shoal_crdt_t *vd = shoal_crdt_take_delta(v);
        if (vd)
            (void)entry_merge_in(d, key, len, vd);
        return;
    }
    shoal_crdt_reset_delta(v);
    hmap_put_value(&d->entries, key, len, shoal_crdt_clone(v));
}

const shoal_type_t *shoal_ormap_value_type(const shoal_crdt_t *m)
{
    return is_map(m) ? CM(m)->value_type : NULL;
}

int shoal_ormap_update(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t len,
                       shoal_modify_fn *modify, void *arg)
{
    if (!m)
        return SHOAL_EINVAL;
    if (!is_map(m))
        return SHOAL_ETYPE;
    if (!self || !modify || (!key && len))
        return SHOAL_EINVAL;
    if (!key)
        key = empty_key;
    ormap_t *map = M(m);
    /* modify works on a copy, committed only on success: a failed update changes nothing */
    const shoal_crdt_t *old = shoal_hmap_get(&map->values, key, len);
    shoal_crdt_t *v = old ? shoal_crdt_clone(old) : new_value(map);
    shoal_crdt_reset_delta(v);
    bool recreated = shoal_orset_recreated(v);
    int rc = modify(v, arg);
    if (rc != 0) {
        shoal_crdt_destroy(&v);
        return rc;
    }
    rc = shoal_orset_add(map->keys, self, key, len);
    if (rc < 0) {
        shoal_crdt_reset_delta(map->keys);
        shoal_crdt_destroy(&v);
        return rc;
    }
    record_keys_delta(map, key, len, false);
    record_value(map, key, len, v, recreated && !shoal_orset_recreated(v));
    hmap_put_value(&map->values, key, len, v);
    return 0;
}

int shoal_ormap_remove(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t len)
{
    if (!m)
        return SHOAL_EINVAL;
    if (!is_map(m))
        return SHOAL_ETYPE;
    if (!self || (!key && len))
        return SHOAL_EINVAL;
    if (!key)
        key = empty_key;
    ormap_t *map = M(m);
    if (!present(map, key, len))
        return SHOAL_ENOTFOUND;
    if (!map->retain) {
        int rc = shoal_orset_remove(map->keys, self, key, len);
        if (rc < 0)
            return rc;
        record_keys_delta(map, key, len, true);
        hmap_drop_value(&map->values, key, len);
        /* the removal wins locally: a value change still pending for the key is not shipped */
        if (map->delta)
            hmap_drop_value(&D(map->delta)->entries, key, len);
        return 0;
    }
    /* Tombstoning ORMultiMap: clear the set (a copy, committed once the key removal succeeded),
       ship the clear as the key's value delta, keep the cleared set. */
    shoal_crdt_t *v = shoal_crdt_clone(shoal_hmap_get(&map->values, key, len));
    shoal_crdt_reset_delta(v);
    int rc = shoal_orset_clear(v, self);
    if (rc == 0)
        rc = shoal_orset_remove(map->keys, self, key, len);
    if (rc < 0) {
        shoal_crdt_destroy(&v);
        shoal_crdt_reset_delta(map->keys);
        return rc;
    }
    record_keys_delta(map, key, len, true);
    record_value(map, key, len, v, false);
    hmap_put_value(&map->values, key, len, v);
    settle_key(map, key, len);
    return 0;
}

const shoal_crdt_t *shoal_ormap_get(const shoal_crdt_t *m, const void *key, size_t len)
{
    if (!is_map(m) || (!key && len))
        return NULL;
    if (!key)
        key = empty_key;
    if (!present(CM(m), key, len))
        return NULL;
    return shoal_hmap_get(&CM(m)->values, key, len);
}

size_t shoal_ormap_size(const shoal_crdt_t *m)
{
    return is_map(m) ? shoal_orset_size(CM(m)->keys) : 0;
}

/* The present keys' slots in key order (count in *n); the caller frees the array. */
static shoal_hslot_t **present_sorted(const ormap_t *m, size_t *n)
{
    shoal_hslot_t **v = shoal_hmap_sorted(&m->values);
    size_t k = 0;
    for (size_t i = 0; i < m->values.n; i++)
        if (!m->retain || present(m, v[i]->key, v[i]->klen))
            v[k++] = v[i];
    *n = k;
    return v;
}

int shoal_ormap_foreach(const shoal_crdt_t *m, shoal_entry_fn *fn, void *arg)
{
    if (!m || !fn)
        return SHOAL_EINVAL;
    if (!is_map(m))
        return SHOAL_ETYPE;
    size_t n;
    shoal_hslot_t **v = present_sorted(CM(m), &n);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = fn(v[i]->key, v[i]->klen, v[i]->value, arg);
    free(v);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Encoding
 */
static int map_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const ormap_t *m = CM(self);
    /* Written in field order as three parts (see delta_encode). */
    Shoal__Ddata__ORMap head = SHOAL__DDATA__ORMAP__INIT;
    head.value_type = m->value_type->tag;
    shoal_pb_pack(&head.base, out);
    shoal_buf_t kb = {0};
    int rc = m->keys->type->encode_payload(m->keys, &kb);
    if (rc == 0)
        put_bytes_field(out, 2, kb.data, kb.len);
    shoal_buf_free(&kb);
    if (rc < 0)
        return rc;

    size_t n = m->values.n;
    shoal_hslot_t **sorted = shoal_hmap_sorted(&m->values);
    envs_t live, dead;
    envs_init(&live, n);
    envs_init(&dead, n);
    ProtobufCBinaryData *dead_keys = shoal_calloc(n ? n : 1, sizeof *dead_keys);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!m->retain || present(m, sorted[i]->key, sorted[i]->klen)) {
            rc = envs_add(&live, sorted[i]->value);
        } else {
            dead_keys[dead.n].data = sorted[i]->key;
            dead_keys[dead.n].len = sorted[i]->klen;
            rc = envs_add(&dead, sorted[i]->value);
        }
    }
    if (rc == 0) {
        envs_fix(&live);
        envs_fix(&dead);
        Shoal__Ddata__ORMap tail = SHOAL__DDATA__ORMAP__INIT;
        tail.n_values = live.n;
        tail.values = live.ptr;
        tail.value_deltas = m->value_deltas;
        tail.n_removed_keys = dead.n;
        tail.removed_keys = dead_keys;
        tail.n_removed_values = dead.n;
        tail.removed_values = dead.ptr;
        shoal_pb_pack(&tail.base, out);
    }
    free(dead_keys);
    envs_free(&live);
    envs_free(&dead);
    free(sorted);
    return rc;
}

typedef struct {
    ormap_t *m;
    Shoal__Ddata__ORMap *msg;
    size_t i;
    int depth;
    int rc;
} decode_ctx_t;

/* Present keys come in key order: pair each with the next Value. */
static int decode_value_cb(const void *key, size_t len, void *arg)
{
    decode_ctx_t *c = arg;
    if (c->i >= c->msg->n_values) {
        c->rc = SHOAL_EDECODE;
        return 1;
    }
    shoal_crdt_t *v = NULL;
    c->rc = decode_nested(c->msg->values[c->i++], c->depth + 1, c->m->value_type,
                          c->m->value_type, &v);
    if (c->rc < 0)
        return 1;
    if (!c->m->retain) /* as new_value: whoever encoded it may have dropped the key's set */
        shoal_orset_mark_recreated(v);
    hmap_put_value(&c->m->values, len ? key : empty_key, len, v);
    return 0;
}

static int map_decode(const shoal_type_t *map_type, const uint8_t *data, size_t len, int depth,
                      shoal_crdt_t **out)
{
    Shoal__Ddata__ORMap *msg = shoal__ddata__ormap__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    int rc = 0;
    ormap_t *m = NULL;
    const shoal_type_t *vt = shoal_type_by_tag(msg->value_type);
    const shoal_type_t *want = required_value_type(map_type);
    if (!vt) {
        rc = SHOAL_EVERSION;
        goto done;
    }
    if (want ? vt != want : !value_type_ok(vt)) {
        rc = SHOAL_EDECODE;
        goto done;
    }
    if (msg->value_deltas && map_type != &shoal_type_ormultimap) {
        rc = SHOAL_EDECODE;
        goto done;
    }
    m = map_alloc(map_type, vt, msg->value_deltas);
    if (msg->keys) {
        shoal_crdt_destroy(&m->keys);
        rc = decode_keys(msg->keys, &shoal_type_orset, depth + 1, &m->keys);
        if (rc < 0) {
            m->keys = shoal_orset_new();
            goto done;
        }
        if (m->keys->type != &shoal_type_orset) {
            rc = SHOAL_EDECODE;
            goto done;
        }
    }
    decode_ctx_t ctx = {.m = m, .msg = msg, .depth = depth};
    shoal_orset_foreach(m->keys, decode_value_cb, &ctx);
    if (ctx.rc < 0) {
        rc = ctx.rc;
        goto done;
    }
    if (ctx.i != msg->n_values || m->values.n != msg->n_values) {
        rc = SHOAL_EDECODE;
        goto done;
    }
    if ((msg->n_removed_keys || msg->n_removed_values) && !m->retain) {
        rc = SHOAL_EDECODE;
        goto done;
    }
    if (msg->n_removed_keys != msg->n_removed_values) {
        rc = SHOAL_EDECODE;
        goto done;
    }
    for (size_t i = 0; i < msg->n_removed_keys; i++) {
        const ProtobufCBinaryData *k = &msg->removed_keys[i];
        const void *kp = k->len ? (const void *)k->data : empty_key;
        if ((i > 0 && shoal_bytes_cmp(msg->removed_keys[i - 1].data, msg->removed_keys[i - 1].len,
                                      kp, k->len) >= 0) ||
            present(m, kp, k->len)) {
            rc = SHOAL_EDECODE;
            goto done;
        }
        shoal_crdt_t *v = NULL;
        rc = decode_nested(msg->removed_values[i], depth + 1, vt, vt, &v);
        if (rc < 0)
            goto done;
        hmap_put_value(&m->values, kp, k->len, v);
        if (is_bottom(v)) { /* never stored: not canonical */
            rc = SHOAL_EDECODE;
            goto done;
        }
    }
done:
    shoal__ddata__ormap__free_unpacked(msg, NULL);
    if (rc < 0) {
        if (m)
            map_destroy(&m->base);
        return rc;
    }
    *out = &m->base;
    return 0;
}

static int ormap_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    return map_decode(&shoal_type_ormap, data, len, depth, out);
}

static int ormultimap_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    return map_decode(&shoal_type_ormultimap, data, len, depth, out);
}

static int lwwmap_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    return map_decode(&shoal_type_lwwmap, data, len, depth, out);
}

static int pncountermap_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    return map_decode(&shoal_type_pncountermap, data, len, depth, out);
}

/* ---------------------------------------------------------------------------------------------
 * Rendering
 */
static int render_elem_cb(const void *elem, size_t len, void *arg)
{
    shoal_buf_t *out = arg;
    if (out->len && out->data[out->len - 1] != '{')
        shoal_buf_printf(out, ", ");
    shoal_buf_append_quoted(out, elem, len);
    return 0;
}

/* A value as the specialized maps show it: bytes, a number, a set. */
static void render_value(const shoal_crdt_t *v, shoal_buf_t *out)
{
    if (v->type == &shoal_type_lwwregister) {
        size_t len = 0;
        const void *p = shoal_lwwreg_value(v, &len);
        shoal_buf_append_quoted(out, p, len);
    } else if (v->type == &shoal_type_pncounter) {
        int64_t x;
        if (shoal_pncounter_value(v, &x) == 0)
            shoal_buf_printf(out, "%" PRId64, x);
        else
            shoal_buf_printf(out, "%" PRIu64 " - %" PRIu64, shoal_pncounter_increments(v),
                             shoal_pncounter_decrements(v));
    } else if (v->type == &shoal_type_orset) {
        shoal_buf_printf(out, "{");
        shoal_orset_foreach(v, render_elem_cb, out);
        shoal_buf_printf(out, "}");
    } else {
        shoal_crdt_render(v, out);
    }
}

static int map_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const ormap_t *m = CM(self);
    if (self->type == &shoal_type_ormap)
        shoal_buf_printf(out, "ORMap<%s>{", m->value_type->name);
    else
        shoal_buf_printf(out, "%s{", self->type->name);
    size_t n = m->values.n;
    shoal_hslot_t **sorted = shoal_hmap_sorted(&m->values);
    bool first = true, any_dead = false;
    for (size_t i = 0; i < n; i++) {
        if (m->retain && !present(m, sorted[i]->key, sorted[i]->klen)) {
            any_dead = true;
            continue;
        }
        shoal_buf_printf(out, first ? "" : ", ");
        first = false;
        shoal_buf_append_quoted(out, sorted[i]->key, sorted[i]->klen);
        shoal_buf_printf(out, " -> ");
        if (self->type == &shoal_type_ormap)
            shoal_crdt_render(sorted[i]->value, out);
        else
            render_value(sorted[i]->value, out);
    }
    if (any_dead) {
        /* tombstones, with their causal contexts: what makes two replicas differ */
        shoal_buf_printf(out, "; removed: ");
        first = true;
        for (size_t i = 0; i < n; i++) {
            if (present(m, sorted[i]->key, sorted[i]->klen))
                continue;
            shoal_buf_printf(out, first ? "" : ", ");
            first = false;
            shoal_buf_append_quoted(out, sorted[i]->key, sorted[i]->klen);
            shoal_buf_printf(out, " -> ");
            shoal_crdt_render(sorted[i]->value, out);
        }
    }
    free(sorted);
    shoal_buf_printf(out, "}");
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Pruning: the keys and every value
 */
static int node_ptr_cmp(const void *a, const void *b)
{
    return shoal_node_cmp(*(const shoal_node_t *const *)a, *(const shoal_node_t *const *)b);
}

static void collect_nodes(const shoal_crdt_t *v, const shoal_node_t ***all, size_t *n,
                          size_t *cap)
{
    size_t k = shoal_crdt_modified_by(v, NULL, 0);
    if (!k)
        return;
    SHOAL_GROW(*all, *cap, *n + k);
    size_t got = shoal_crdt_modified_by(v, *all + *n, k);
    *n += got < k ? got : k;
}

static size_t map_modified_by(const shoal_crdt_t *self, const shoal_node_t **nodes, size_t cap)
{
    const ormap_t *m = CM(self);
    const shoal_node_t **all = NULL;
    size_t n = 0, acap = 0;
    collect_nodes(m->keys, &all, &n, &acap);
    for (size_t i = 0; i < m->values.cap; i++)
        if (SHOAL_HSLOT_LIVE(&m->values.slots[i]))
            collect_nodes(m->values.slots[i].value, &all, &n, &acap);
    size_t u = 0;
    if (n) {
        qsort(all, n, sizeof *all, node_ptr_cmp);
        for (size_t i = 0; i < n; i++)
            if (u == 0 || all[u - 1] != all[i])
                all[u++] = all[i];
    }
    for (size_t i = 0; i < u && i < cap; i++)
        nodes[i] = all[i];
    free(all);
    return u;
}

static bool map_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed)
{
    const ormap_t *m = CM(self);
    if (shoal_crdt_needs_pruning_from(m->keys, removed))
        return true;
    for (size_t i = 0; i < m->values.cap; i++)
        if (SHOAL_HSLOT_LIVE(&m->values.slots[i]) &&
            shoal_crdt_needs_pruning_from(m->values.slots[i].value, removed))
            return true;
    return false;
}

/* The keys ORSet and every value (tombstones included) follow one plan: its base lies above
   `into`'s counters in all of them, so that the owner's reservation holds in each. */
static void map_prune_bounds(const shoal_crdt_t *self, const shoal_node_t *removed,
                             const shoal_node_t *into, uint64_t *into_max, uint64_t *removed_max)
{
    const ormap_t *m = CM(self);
    shoal_crdt_prune_bounds(m->keys, removed, into, into_max, removed_max);
    for (size_t i = 0; i < m->values.cap; i++)
        if (SHOAL_HSLOT_LIVE(&m->values.slots[i]))
            shoal_crdt_prune_bounds(m->values.slots[i].value, removed, into, into_max,
                                    removed_max);
}

static int map_prune_apply(shoal_crdt_t *self, const shoal_node_t *removed,
                           const shoal_prune_plan_t *plan, bool owner)
{
    ormap_t *m = M(self);
    int rc = shoal_crdt_prune_with(m->keys, removed, plan, owner);
    shoal_crdt_reset_delta(m->keys);
    for (size_t i = 0; i < m->values.cap && rc == 0; i++) {
        shoal_hslot_t *s = &m->values.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        rc = shoal_crdt_prune_with(s->value, removed, plan, owner);
        shoal_crdt_reset_delta(s->value);
    }
    if (rc == 0 && m->delta)
        rc = delta_prune_apply(m->delta, removed, plan, false);
    settle_all(m); /* keys may have gone, tombstones may have become empty */
    return rc;
}

static int map_prune(shoal_crdt_t *self, const shoal_node_t *removed, const shoal_node_t *into)
{
    uint64_t into_max = 0, removed_max = 0;
    map_prune_bounds(self, removed, into, &into_max, &removed_max);
    shoal_prune_plan_t p = {.into = into};
    if (removed_max) {
        if (into_max >= UINT64_MAX - removed_max)
            return SHOAL_EOVERFLOW;
        p.base = into_max + 1;
        p.span = removed_max;
    }
    return map_prune_apply(self, removed, &p, true);
}

static int map_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed)
{
    shoal_prune_plan_t none = {0};
    return map_prune_apply(self, removed, &none, false);
}

/* A delta (the keys delta and each entry, value delta or full value) is cleaned like a state:
   a removal it carries that saw the removed node's dots must cover their re-homed copies. */
static bool delta_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed)
{
    const ormap_delta_t *d = CD(self);
    if (shoal_crdt_needs_pruning_from(d->keys, removed))
        return true;
    for (size_t i = 0; i < d->entries.cap; i++)
        if (SHOAL_HSLOT_LIVE(&d->entries.slots[i]) &&
            shoal_crdt_needs_pruning_from(d->entries.slots[i].value, removed))
            return true;
    return false;
}

static int delta_prune_apply(shoal_crdt_t *self, const shoal_node_t *removed,
                             const shoal_prune_plan_t *plan, bool owner)
{
    (void)owner; /* a delta reserves nothing: its origin's state did */
    ormap_delta_t *d = D(self);
    int rc = shoal_crdt_prune_with(d->keys, removed, plan, false);
    for (size_t i = 0; i < d->entries.cap && rc == 0; i++)
        if (SHOAL_HSLOT_LIVE(&d->entries.slots[i]))
            rc = shoal_crdt_prune_with(d->entries.slots[i].value, removed, plan, false);
    return rc;
}

static int delta_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed)
{
    shoal_prune_plan_t none = {0};
    return delta_prune_apply(self, removed, &none, false);
}

#define MAP_TYPE(var, tname, ttag, decoder)                                                        \
    const shoal_type_t var = {                                                                     \
        .name = tname,                                                                             \
        .tag = ttag,                                                                               \
        .format_version = 1,                                                                       \
        .delta_type = &shoal_type_ormap_delta,                                                     \
        .delta_causal = true,                                                                      \
        .has_pruning = true,                                                                       \
        .is_map = true,                                                                            \
        .create = NULL,                                                                            \
        .destroy = map_destroy,                                                                    \
        .clone = map_clone,                                                                        \
        .merge = map_merge,                                                                        \
        .delta = map_delta,                                                                        \
        .take_delta = map_take_delta,                                                              \
        .merge_delta = map_merge_delta,                                                            \
        .equal = map_equal,                                                                        \
        .encode_payload = map_encode,                                                              \
        .decode_payload = decoder,                                                                 \
        .render = map_render,                                                                      \
        .modified_by = map_modified_by,                                                            \
        .needs_pruning_from = map_needs_pruning_from,                                              \
        .prune = map_prune,                                                                        \
        .prune_cleanup = map_prune_cleanup,                                                        \
        .prune_bounds = map_prune_bounds,                                                          \
        .prune_apply = map_prune_apply,                                                            \
    }

MAP_TYPE(shoal_type_ormap, "ORMap", SHOAL_ORMAP, ormap_decode);
MAP_TYPE(shoal_type_ormultimap, "ORMultiMap", SHOAL_ORMULTIMAP, ormultimap_decode);
MAP_TYPE(shoal_type_lwwmap, "LWWMap", SHOAL_LWWMAP, lwwmap_decode);
MAP_TYPE(shoal_type_pncountermap, "PNCounterMap", SHOAL_PNCOUNTERMAP, pncountermap_decode);

/* =============================================================================================
 * The specializations' own API: thin modify functions over shoal_ormap_update.
 */
typedef struct {
    const shoal_node_t *self;
    const void *data;
    size_t len;
    shoal_clock_fn *clock;
    void *clock_arg;
    int64_t n;
} op_arg_t;

static int orset_add_op(shoal_crdt_t *v, void *arg)
{
    op_arg_t *a = arg;
    return shoal_orset_add(v, a->self, a->data, a->len);
}

/* Removes the element if the set holds it (removeBinding of an absent element still updates
   the key). */
static int orset_remove_op(shoal_crdt_t *v, void *arg)
{
    op_arg_t *a = arg;
    int rc = shoal_orset_remove(v, a->self, a->data, a->len);
    return rc == SHOAL_ENOTFOUND ? 0 : rc;
}

static int lwwreg_set_op(shoal_crdt_t *v, void *arg)
{
    op_arg_t *a = arg;
    return shoal_lwwreg_set(v, a->self, a->data, a->len, a->clock, a->clock_arg);
}

static int pncounter_add_op(shoal_crdt_t *v, void *arg)
{
    op_arg_t *a = arg;
    return shoal_pncounter_add(v, a->self, a->n);
}

int shoal_ormultimap_add(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t klen,
                         const void *elem, size_t elen)
{
    if (!m)
        return SHOAL_EINVAL;
    if (!shoal_is(m, &shoal_type_ormultimap))
        return SHOAL_ETYPE;
    if (!elem && elen)
        return SHOAL_EINVAL;
    op_arg_t a = {.self = self, .data = elem ? elem : empty_key, .len = elen};
    return shoal_ormap_update(m, self, key, klen, orset_add_op, &a);
}

int shoal_ormultimap_remove_binding(shoal_crdt_t *m, const shoal_node_t *self, const void *key,
                                    size_t klen, const void *elem, size_t elen)
{
    if (!m)
        return SHOAL_EINVAL;
    if (!shoal_is(m, &shoal_type_ormultimap))
        return SHOAL_ETYPE;
    if (!self || (!key && klen) || (!elem && elen))
        return SHOAL_EINVAL;
    /* As Pekko's removeBinding: the key is always updated (a new dot, so a concurrent removal
       of the key does not win over it), whether or not its set held the element, and a key
       whose set is left empty goes, so an empty set does not linger under a key. */
    op_arg_t a = {.self = self, .data = elem ? elem : empty_key, .len = elen};
    int rc = shoal_ormap_update(m, self, key, klen, orset_remove_op, &a);
    if (rc != 0)
        return rc;
    const shoal_crdt_t *set = shoal_ormap_get(m, key, klen);
    if (set && shoal_orset_size(set) == 0)
        rc = shoal_ormap_remove(m, self, key, klen);
    return rc;
}

const shoal_crdt_t *shoal_ormultimap_get(const shoal_crdt_t *m, const void *key, size_t klen)
{
    return shoal_is(m, &shoal_type_ormultimap) ? shoal_ormap_get(m, key, klen) : NULL;
}

int shoal_lwwmap_put(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t klen,
                     const void *value, size_t vlen, shoal_clock_fn *clock, void *clock_arg)
{
    if (!m)
        return SHOAL_EINVAL;
    if (!shoal_is(m, &shoal_type_lwwmap))
        return SHOAL_ETYPE;
    if (!value && vlen)
        return SHOAL_EINVAL;
    op_arg_t a = {.self = self, .data = value ? value : empty_key, .len = vlen, .clock = clock,
                  .clock_arg = clock_arg};
    return shoal_ormap_update(m, self, key, klen, lwwreg_set_op, &a);
}

const void *shoal_lwwmap_get(const shoal_crdt_t *m, const void *key, size_t klen, size_t *vlen)
{
    if (vlen)
        *vlen = 0;
    if (!shoal_is(m, &shoal_type_lwwmap))
        return NULL;
    const shoal_crdt_t *r = shoal_ormap_get(m, key, klen);
    if (!r)
        return NULL;
    size_t len = 0;
    const void *p = shoal_lwwreg_value(r, &len);
    if (vlen)
        *vlen = len;
    return p ? p : empty_key; /* a present key always has a value, if only an empty one */
}

int shoal_pncountermap_add(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t klen,
                           int64_t n)
{
    if (!m)
        return SHOAL_EINVAL;
    if (!shoal_is(m, &shoal_type_pncountermap))
        return SHOAL_ETYPE;
    op_arg_t a = {.self = self, .n = n};
    return shoal_ormap_update(m, self, key, klen, pncounter_add_op, &a);
}

int shoal_pncountermap_get(const shoal_crdt_t *m, const void *key, size_t klen, int64_t *value)
{
    if (!m || !value)
        return SHOAL_EINVAL;
    if (!shoal_is(m, &shoal_type_pncountermap))
        return SHOAL_ETYPE;
    const shoal_crdt_t *c = shoal_ormap_get(m, key, klen);
    if (!c)
        return SHOAL_ENOTFOUND;
    return shoal_pncounter_value(c, value);
}
