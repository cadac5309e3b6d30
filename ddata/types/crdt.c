/*  crdt.c — what every type shares: the registry of type tags, dispatch through the vtable,
    the self-describing envelope (proto/ddata.proto, message Value), digests.

    Envelope decoding checks in order, before anything is trusted: total size, the envelope
    itself, the type tag, the format version; only then does the type decode its payload.
*/
#include "internal.h"

#include <pthread.h>
#include <xxhash.h>

static const shoal_type_t *const registry[] = {
    &shoal_type_version_vector, &shoal_type_gcounter,    &shoal_type_pncounter,
    &shoal_type_gset,           &shoal_type_orset,       &shoal_type_ormap,
    &shoal_type_ormultimap,     &shoal_type_lwwregister, &shoal_type_lwwmap,
    &shoal_type_pncountermap,   &shoal_type_flag,        &shoal_type_orset_delta,
    &shoal_type_ormap_delta,
};
#define REGISTRY_SIZE (sizeof registry / sizeof registry[0])

/* Registered custom types: appended under the lock, read without it. A slot is written before
   the count that publishes it (release), and a reader loads the count first (acquire). */
static const shoal_type_t *custom[SHOAL_TYPES_MAX_CUSTOM];
static size_t n_custom;
static pthread_mutex_t custom_lock = PTHREAD_MUTEX_INITIALIZER;

const shoal_type_t *shoal_type_by_tag(uint32_t tag)
{
    for (size_t i = 0; i < REGISTRY_SIZE; i++)
        if (registry[i]->tag == tag)
            return registry[i];
    size_t n = __atomic_load_n(&n_custom, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++)
        if (custom[i]->tag == tag)
            return custom[i];
    return NULL;
}

const shoal_type_t *shoal_type_by_name(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < REGISTRY_SIZE; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    size_t n = __atomic_load_n(&n_custom, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++)
        if (strcmp(custom[i]->name, name) == 0)
            return custom[i];
    return NULL;
}

int shoal_type_register(const shoal_type_t *t)
{
    if (!t || !t->name || !*t->name || t->tag < SHOAL_TYPE_TAG_CUSTOM || !t->destroy ||
        !t->clone || !t->merge || !t->encode_payload || !t->decode_payload || !t->render ||
        (t->delta_type && (!t->delta || !t->take_delta || !t->merge_delta)) ||
        (t->has_pruning && (!t->modified_by || !t->needs_pruning_from || !t->prune ||
                            !t->prune_cleanup)))
        return SHOAL_EINVAL;
    pthread_mutex_lock(&custom_lock);
    int rc = 0;
    const shoal_type_t *by_tag = shoal_type_by_tag(t->tag), *by_name = shoal_type_by_name(t->name);
    if (by_tag == t && by_name == t)
        rc = 0; /* already registered */
    else if (by_tag || by_name || n_custom == SHOAL_TYPES_MAX_CUSTOM)
        rc = SHOAL_EINVAL;
    else {
        custom[n_custom] = t;
        __atomic_store_n(&n_custom, n_custom + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&custom_lock);
    return rc;
}

const shoal_type_t *shoal_type_of_delta(const shoal_type_t *delta, bool *is_delta)
{
    const shoal_type_t *owner = NULL;
    size_t owners = 0;
    size_t n = __atomic_load_n(&n_custom, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < REGISTRY_SIZE + n; i++) {
        const shoal_type_t *t = i < REGISTRY_SIZE ? registry[i] : custom[i - REGISTRY_SIZE];
        if (delta && t != delta && t->delta_type == delta) {
            owner = t;
            owners++;
        }
    }
    if (is_delta)
        *is_delta = owners > 0;
    return owners == 1 ? owner : NULL;
}

const char *shoal_type_name(const shoal_type_t *type)
{
    return type ? type->name : "(none)";
}

uint32_t shoal_type_tag(const shoal_type_t *type)
{
    return type ? type->tag : 0;
}

bool shoal_type_has_delta(const shoal_type_t *type)
{
    return type && type->delta_type;
}

bool shoal_type_delta_causal(const shoal_type_t *type)
{
    return type && type->delta_causal;
}

bool shoal_type_has_pruning(const shoal_type_t *type)
{
    return type && type->has_pruning;
}

shoal_crdt_t *shoal_crdt_new(const shoal_type_t *type)
{
    return type && type->create ? type->create() : NULL;
}

void shoal_crdt_destroy(shoal_crdt_t **self_p)
{
    if (self_p && *self_p) {
        (*self_p)->type->destroy(*self_p);
        *self_p = NULL;
    }
}

shoal_crdt_t *shoal_crdt_clone(const shoal_crdt_t *self)
{
    return self ? self->type->clone(self) : NULL;
}

const shoal_type_t *shoal_crdt_type(const shoal_crdt_t *self)
{
    return self ? self->type : NULL;
}

int shoal_crdt_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    if (!self || !other)
        return SHOAL_EINVAL;
    if (self->type != other->type)
        return SHOAL_ETYPE;
    if (self == other)
        return 0;
    return self->type->merge(self, other);
}

const shoal_crdt_t *shoal_crdt_delta(const shoal_crdt_t *self)
{
    return self && self->type->delta ? self->type->delta(self) : NULL;
}

shoal_crdt_t *shoal_crdt_take_delta(shoal_crdt_t *self)
{
    return self && self->type->take_delta ? self->type->take_delta(self) : NULL;
}

void shoal_crdt_reset_delta(shoal_crdt_t *self)
{
    shoal_crdt_t *d = shoal_crdt_take_delta(self);
    shoal_crdt_destroy(&d);
}

int shoal_crdt_merge_delta(shoal_crdt_t *self, const shoal_crdt_t *delta)
{
    if (!self || !delta)
        return SHOAL_EINVAL;
    if (delta->type == self->type)
        return self == delta ? 0 : self->type->merge(self, delta);
    if (!self->type->delta_type || delta->type != self->type->delta_type)
        return SHOAL_ETYPE;
    return self->type->merge_delta(self, delta);
}

int shoal_crdt_encode_envelope(const shoal_crdt_t *self, shoal_buf_t *scratch,
                               Shoal__Ddata__Value *env)
{
    shoal__ddata__value__init(env);
    shoal_buf_reset(scratch);
    int rc = self->type->encode_payload(self, scratch);
    if (rc < 0)
        return rc;
    env->type = self->type->tag;
    env->version = self->type->format_version;
    env->payload.data = scratch->data;
    env->payload.len = scratch->len;
    return 0;
}

int shoal_crdt_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    if (!self || !out)
        return SHOAL_EINVAL;
    shoal_buf_t scratch = {0};
    Shoal__Ddata__Value env;
    int rc = shoal_crdt_encode_envelope(self, &scratch, &env);
    if (rc == 0)
        shoal_pb_pack(&env.base, out);
    shoal_buf_free(&scratch);
    return rc;
}

int shoal_crdt_decode_depth(const void *data, size_t len, int depth, shoal_crdt_t **out)
{
    if (!out || (!data && len))
        return SHOAL_EINVAL;
    *out = NULL;
    if (len > SHOAL_DECODE_MAX)
        return SHOAL_ETOOBIG;
    if (depth > SHOAL_DECODE_MAX_DEPTH)
        return SHOAL_ETOOBIG;
    Shoal__Ddata__Value *env = shoal__ddata__value__unpack(NULL, len, data);
    if (!env)
        return SHOAL_EDECODE;
    int rc;
    const shoal_type_t *type = shoal_type_by_tag(env->type);
    if (!type || !type->decode_payload)
        rc = SHOAL_EVERSION;
    else if (env->version == 0 || env->version > type->format_version)
        rc = SHOAL_EVERSION;
    else
        rc = type->decode_payload(env->payload.data, env->payload.len, depth, out);
    shoal__ddata__value__free_unpacked(env, NULL);
    if (rc < 0)
        *out = NULL;
    return rc;
}

int shoal_crdt_decode(const void *data, size_t len, shoal_crdt_t **out)
{
    return shoal_crdt_decode_depth(data, len, 0, out);
}

bool shoal_crdt_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    if (a == b)
        return true;
    if (!a || !b || a->type != b->type)
        return false;
    if (a->type->equal)
        return a->type->equal(a, b);
    shoal_buf_t x = {0}, y = {0};
    bool eq = shoal_crdt_encode(a, &x) == 0 && shoal_crdt_encode(b, &y) == 0 && x.len == y.len &&
              (x.len == 0 || memcmp(x.data, y.data, x.len) == 0);
    shoal_buf_free(&x);
    shoal_buf_free(&y);
    return eq;
}

int shoal_crdt_digest(const shoal_crdt_t *self, uint8_t digest[16])
{
    shoal_buf_t b = {0};
    int rc = shoal_crdt_encode(self, &b);
    if (rc == 0) {
        XXH128_hash_t h = XXH3_128bits(b.data, b.len);
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, h);
        memcpy(digest, c.digest, 16);
    }
    shoal_buf_free(&b);
    return rc;
}

int shoal_crdt_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    if (!self || !out)
        return SHOAL_EINVAL;
    return self->type->render(self, out);
}

size_t shoal_crdt_modified_by(const shoal_crdt_t *self, const shoal_node_t **nodes, size_t cap)
{
    if (!self || !self->type->modified_by)
        return 0;
    return self->type->modified_by(self, nodes, cap);
}

bool shoal_crdt_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed)
{
    if (!self || !removed || !self->type->needs_pruning_from)
        return false;
    return self->type->needs_pruning_from(self, removed);
}

void shoal_crdt_prune_bounds(const shoal_crdt_t *v, const shoal_node_t *removed,
                             const shoal_node_t *into, uint64_t *into_max, uint64_t *removed_max)
{
    if (v && v->type->prune_bounds)
        v->type->prune_bounds(v, removed, into, into_max, removed_max);
}

int shoal_crdt_prune_with(shoal_crdt_t *v, const shoal_node_t *removed,
                          const shoal_prune_plan_t *plan, bool owner)
{
    if (!v)
        return 0;
    if (plan->span && v->type->prune_apply)
        return v->type->prune_apply(v, removed, plan, owner);
    if (owner)
        return v->type->prune ? v->type->prune(v, removed, plan->into) : 0;
    return v->type->prune_cleanup ? v->type->prune_cleanup(v, removed) : 0;
}

int shoal_crdt_prune(shoal_crdt_t *self, const shoal_node_t *removed, const shoal_node_t *into,
                     shoal_prune_plan_t *plan)
{
    if (!self || !removed || !into || removed == into)
        return SHOAL_EINVAL;
    uint64_t into_max = 0, removed_max = 0;
    shoal_crdt_prune_bounds(self, removed, into, &into_max, &removed_max);
    shoal_prune_plan_t p = {.into = into};
    if (removed_max) {
        if (into_max >= UINT64_MAX - removed_max)
            return SHOAL_EOVERFLOW; /* the block would not fit in into's counters */
        p.base = into_max + 1;
        p.span = removed_max;
    }
    int rc = shoal_crdt_prune_with(self, removed, &p, true);
    if (rc == 0 && plan)
        *plan = p;
    return rc;
}

int shoal_crdt_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed,
                             const shoal_prune_plan_t *plan)
{
    if (!self || !removed || (plan && plan->span && (!plan->into || plan->into == removed ||
                                                     plan->base == 0 ||
                                                     plan->base - 1 > UINT64_MAX - plan->span)))
        return SHOAL_EINVAL;
    shoal_prune_plan_t none = {0};
    return shoal_crdt_prune_with(self, removed, plan && plan->span ? plan : &none, false);
}
