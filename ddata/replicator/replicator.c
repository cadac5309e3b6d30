/*  replicator.c — the replicator's keys, local operations, envelopes, digests, subscriptions,
    expiry and storage. The protocol with peers is in replicator_net.c. See ddata.h, "THE
    REPLICATOR", for what it guarantees.

    Every key has an entry: its value (or a tombstone), its pruning markers, the delta numbers it
    has applied per origin, and the bookkeeping of the deltas this node made. Everything runs on the
    node thread; the _sync facade posts to it and waits.
*/
#include "replicator_internal.h"
#include "transport.h" /* shoal_varint_get */

#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <xxhash.h>
#include <czmq.h>

/* ---------------------------------------------------------------------------------------------
 * The replicators of each node, found by role when a message arrives.
 */
static pthread_mutex_t hub_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hub_entry {
    shoal_system_t *sys;
    shoal_replicator_t *r;
} *hub;
static size_t hub_n, hub_cap;

shoal_replicator_t *repl_find(shoal_system_t *sys, const char *role)
{
    shoal_replicator_t *found = NULL;
    pthread_mutex_lock(&hub_lock);
    for (size_t i = 0; i < hub_n; i++)
        if (hub[i].sys == sys && strcmp(hub[i].r->role, role ? role : "") == 0) {
            found = hub[i].r;
            break;
        }
    pthread_mutex_unlock(&hub_lock);
    return found;
}

size_t repl_all(shoal_system_t *sys, shoal_replicator_t ***out)
{
    size_t n = 0, cap = 0;
    shoal_replicator_t **list = NULL;
    pthread_mutex_lock(&hub_lock);
    for (size_t i = 0; i < hub_n; i++)
        if (hub[i].sys == sys) {
            SHOAL_GROW(list, cap, n + 1);
            list[n++] = hub[i].r;
        }
    pthread_mutex_unlock(&hub_lock);
    *out = list;
    return n;
}

static int hub_add(shoal_system_t *sys, shoal_replicator_t *r)
{
    int rc = 0;
    pthread_mutex_lock(&hub_lock);
    for (size_t i = 0; i < hub_n; i++)
        if (hub[i].sys == sys && strcmp(hub[i].r->role, r->role) == 0)
            rc = SHOAL_EINVAL;
    if (rc == 0) {
        SHOAL_GROW(hub, hub_cap, hub_n + 1);
        hub[hub_n].sys = sys;
        hub[hub_n].r = r;
        hub_n++;
    }
    pthread_mutex_unlock(&hub_lock);
    return rc;
}

static void hub_remove(shoal_replicator_t *r)
{
    pthread_mutex_lock(&hub_lock);
    for (size_t i = 0; i < hub_n; i++)
        if (hub[i].r == r) {
            hub[i] = hub[--hub_n];
            break;
        }
    pthread_mutex_unlock(&hub_lock);
}

/* ---------------------------------------------------------------------------------------------
 * Settings
 */
void shoal_replicator_settings_default(shoal_replicator_settings_t *s)
{
    memset(s, 0, sizeof *s);
    s->role = "";
    s->gossip_interval_ms = 2000;
    s->delta_interval_ms = 400;
    s->notify_subscribers_interval_ms = 500;
    s->max_delta_elements = 500;
    s->max_delta_size = 50;
    s->delta_enabled = true;
    s->pruning_interval_ms = 120000;
    s->max_pruning_dissemination_ms = 300000;
    s->pruning_marker_ttl_ms = 6ull * 3600 * 1000;
    s->durable_pruning_marker_ttl_ms = DURABLE_PRUNING_MARKER_TTL_MS;
    s->tombstone_ttl_ms = 24ull * 3600 * 1000;
    s->compress_above_bytes = 32 * 1024;
    s->max_reassembly_bytes = 64u * 1024 * 1024;
    s->max_pending_ops = 100000;
}

static bool pattern_match(const char *pattern, const char *key, size_t klen)
{
    size_t plen = strlen(pattern);
    if (plen && pattern[plen - 1] == '*')
        return klen >= plen - 1 && memcmp(pattern, key, plen - 1) == 0;
    return plen == klen && memcmp(pattern, key, klen) == 0;
}

bool repl_is_durable(const shoal_replicator_t *r, const char *key, size_t klen)
{
    for (size_t i = 0; i < r->s.n_durable_keys; i++)
        if (pattern_match(r->s.durable_keys[i], key, klen))
            return true;
    return false;
}

static uint64_t expiry_of(const shoal_replicator_t *r, const char *key, size_t klen)
{
    for (size_t i = 0; i < r->s.n_expire_keys; i++)
        if (pattern_match(r->s.expire_keys[i].pattern, key, klen))
            return r->s.expire_keys[i].after_ms;
    return 0;
}

uint64_t repl_random(shoal_replicator_t *r)
{
    /* splitmix64: peer choice needs no more */
    uint64_t z = (r->prng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------------------------------------
 * Entries
 */
entry_t *repl_entry(shoal_replicator_t *r, const char *key, size_t klen)
{
    return shoal_hmap_get(&r->entries, key, klen);
}

entry_t *repl_entry_create(shoal_replicator_t *r, const char *key, size_t klen,
                           const shoal_type_t *type)
{
    bool inserted;
    shoal_hslot_t *slot = shoal_hmap_upsert(&r->entries, key, klen, &inserted);
    if (!inserted)
        return slot->value;
    entry_t *e = shoal_calloc(1, sizeof *e);
    e->key = shoal_malloc(klen + 1);
    memcpy(e->key, key, klen);
    e->key[klen] = 0;
    e->klen = klen;
    e->type = type;
    e->dirty = true;
    e->bucket = (uint32_t)(XXH3_64bits(key, klen) % N_BUCKETS);
    e->durable = repl_is_durable(r, key, klen);
    repl_entry_touch(r, e);
    slot->value = e;
    r->n_dirty++;
    r->stats.keys++;
    return e;
}

static void xor16(uint8_t *a, const uint8_t *b)
{
    for (int i = 0; i < 16; i++)
        a[i] ^= b[i];
}

static void entry_free(entry_t *e)
{
    shoal_crdt_destroy(&e->value);
    for (size_t i = 0; i < e->n_pruning; i++)
        free(e->pruning[i].seen);
    free(e->pruning);
    free(e->tomb_seen);
    shoal_nm_free(&e->dv);
    for (size_t i = 0; i < e->n_deltas; i++)
        shoal_crdt_destroy(&e->deltas[i].delta);
    free(e->deltas);
    free(e->sent);
    free(e->key);
    free(e);
}

static void store_key(shoal_replicator_t *r, const char *key, size_t klen,
                      shoal_store_done_fn *done, void *arg);

/* Removes an entry without a tombstone (expiry, tombstone collection), from the store too. */
void repl_entry_drop(shoal_replicator_t *r, entry_t *e)
{
    if (e->in_bucket)
        xor16(r->buckets[e->bucket], e->contrib);
    if (e->dirty && r->n_dirty)
        r->n_dirty--;
    shoal_hmap_remove(&r->delta_keys, e->key, e->klen);
    shoal_hmap_remove(&r->changed_keys, e->key, e->klen);
    shoal_hmap_remove(&r->entries, e->key, e->klen);
    if (r->stats.keys)
        r->stats.keys--;
    repl_entry_bytes(r, e, 0);
    /* with the entry gone, the key's state to store is its absence */
    if (e->durable)
        store_key(r, e->key, e->klen, NULL, NULL);
    entry_free(e);
}

/* The value (or tombstone) or its pruning changed: the digest must be recomputed and subscribers
   told at the next notify tick. */
void repl_entry_changed(shoal_replicator_t *r, entry_t *e)
{
    if (!e->dirty) {
        e->dirty = true;
        r->n_dirty++;
    }
    if (!e->changed) {
        e->changed = true;
        bool ins;
        shoal_hmap_upsert(&r->changed_keys, e->key, e->klen, &ins)->value = e;
        repl_notify_arm(r);
    }
}

static void notify_tick(shoal_system_t *sys, void *arg);

/* Subscribers are told at the ticks of a grid of notify-subscribers-interval (Akka's
   notify-subscribers-interval), but the timer runs only while there is something to tell: an
   idle replicator costs no wake-ups (the cluster's own replicator ticks every 20 ms). The grid
   keeps the latency a periodic timer would give: the next tick, not a full interval later. */
void repl_notify_arm(shoal_replicator_t *r)
{
    if (r->t_notify > 0 || r->destroying)
        return;
    int64_t iv = r->s.notify_subscribers_interval_ms, now = shoal_now_ms();
    int64_t delay = iv - (now - r->notify_epoch) % iv;
    int id = shoal_system_timer(r->sys, (uint32_t)delay, false, notify_tick, r);
    r->t_notify = id > 0 ? id : 0;
}

peer_t *repl_peer(shoal_replicator_t *r, const shoal_node_t *node)
{
    for (size_t i = 0; i < r->n_peers; i++)
        if (r->peers[i].node == node)
            return &r->peers[i];
    return NULL;
}

int repl_voters_needed(const shoal_replicator_t *r, const shoal_consistency_t *c)
{
    if (!r->n_voters || (c->level != SHOAL_MAJORITY && c->level != SHOAL_ALL))
        return 0;
    int need = (int)(r->n_voters / 2 + 1) - (r->self_votes ? 1 : 0);
    return need > 0 ? need : 0;
}

size_t repl_voter_peers(const shoal_replicator_t *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_peers; i++)
        n += r->peers[i].counted && r->peers[i].voter;
    return n;
}

size_t repl_counted_nodes(const shoal_replicator_t *r)
{
    size_t n = 1;
    for (size_t i = 0; i < r->n_peers; i++)
        n += r->peers[i].counted;
    return n;
}

/* ---------------------------------------------------------------------------------------------
 * Envelopes and digests
 */
static void pruning_to_pb(const pruning_t *p, Shoal__Replicator__PruningState *pb)
{
    shoal__replicator__pruning_state__init(pb);
    pb->removed = (char *)shoal_node_id(p->removed);
    pb->owner = (char *)shoal_node_id(p->owner);
    pb->n_seen = p->n_seen;
    pb->seen = p->n_seen ? shoal_malloc(p->n_seen * sizeof(char *)) : NULL;
    for (size_t i = 0; i < p->n_seen; i++)
        pb->seen[i] = (char *)shoal_node_id(p->seen[i]);
    pb->performed = p->performed;
    pb->obsolete_at_ms = p->obsolete_at_ms;
    pb->plan_base = p->plan_base;
    pb->plan_span = p->plan_span;
}

void repl_envelope_to_pb(shoal_replicator_t *r, entry_t *e, Shoal__Replicator__DataEnvelope *pb,
                         shoal_buf_t *scratch)
{
    (void)r;
    shoal__replicator__data_envelope__init(pb);
    shoal_buf_reset(scratch);
    if (e->value && shoal_crdt_encode(e->value, scratch) == 0) {
        pb->value.data = scratch->data;
        pb->value.len = scratch->len;
    }
    pb->deleted = e->deleted;
    if (e->n_pruning) {
        pb->n_pruning = e->n_pruning;
        pb->pruning = shoal_malloc(e->n_pruning * sizeof *pb->pruning);
        for (size_t i = 0; i < e->n_pruning; i++) {
            pb->pruning[i] = shoal_malloc(sizeof **pb->pruning);
            pruning_to_pb(&e->pruning[i], pb->pruning[i]);
        }
    }
    if (e->dv.n)
        shoal_nm_to_pb(&e->dv, &pb->n_delta_nodes, &pb->delta_nodes, &pb->delta_seqs);
    pb->n_delta_seqs = pb->n_delta_nodes;
}

void repl_envelope_pb_free(Shoal__Replicator__DataEnvelope *pb)
{
    for (size_t i = 0; i < pb->n_pruning; i++) {
        free(pb->pruning[i]->seen);
        free(pb->pruning[i]);
    }
    free(pb->pruning);
    if (pb->n_delta_nodes)
        shoal_nm_pb_free(pb->delta_nodes, pb->delta_seqs);
}

/* Digest of what replicas must agree on: the value (or the tombstone) and the pruning markers.
   The delta numbers are each replica's own bookkeeping and stay out of it. */
/* The digest, and the encoded size (0 for a tombstone) in *len when not NULL. */
static void value_digest(const shoal_crdt_t *v, uint8_t out[16], uint64_t *len)
{
    XXH128_canonical_t c;
    if (!v) {
        XXH128_canonicalFromHash(&c, XXH3_128bits("\0deleted", 8));
        if (len)
            *len = 0;
    } else {
        shoal_buf_t b = {0};
        shoal_crdt_encode(v, &b);
        XXH128_canonicalFromHash(&c, XXH3_128bits(b.data, b.len));
        if (len)
            *len = b.len;
        shoal_buf_free(&b);
    }
    memcpy(out, c.digest, 16);
}

void repl_value_digest(const shoal_crdt_t *v, uint8_t out[16])
{
    value_digest(v, out, NULL);
}

void repl_entry_bytes(shoal_replicator_t *r, entry_t *e, uint64_t bytes)
{
    r->bytes = r->bytes >= e->bytes ? r->bytes - e->bytes : 0;
    e->bytes = bytes;
    r->bytes += bytes;
}

void repl_refresh_digest(shoal_replicator_t *r, entry_t *e)
{
    if (!e->dirty)
        return;
    uint8_t vd[16];
    uint64_t len;
    value_digest(e->deleted ? NULL : e->value, vd, &len);
    repl_entry_bytes(r, e, len); /* measured for free: the LIMITS' byte count */
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, vd, 16);
    for (size_t i = 0; i < e->n_pruning; i++) {
        const pruning_t *p = &e->pruning[i];
        XXH3_128bits_update(st, shoal_node_id(p->removed), strlen(shoal_node_id(p->removed)) + 1);
        XXH3_128bits_update(st, shoal_node_id(p->owner), strlen(shoal_node_id(p->owner)) + 1);
        XXH3_128bits_update(st, &p->performed, 1);
        if (p->performed && p->plan_span) {
            uint64_t plan[2] = {p->plan_base, p->plan_span};
            XXH3_128bits_update(st, plan, sizeof plan);
        }
        if (!p->performed)
            for (size_t j = 0; j < p->n_seen; j++)
                XXH3_128bits_update(st, shoal_node_id(p->seen[j]),
                                    strlen(shoal_node_id(p->seen[j])) + 1);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    memcpy(e->digest, c.digest, 16);
    /* the bucket holds the XOR of H(key, digest) over its keys: order-free and updated in O(1) */
    if (e->in_bucket)
        xor16(r->buckets[e->bucket], e->contrib);
    XXH3_state_t *kh = XXH3_createState();
    XXH3_128bits_reset(kh);
    XXH3_128bits_update(kh, e->key, e->klen + 1);
    XXH3_128bits_update(kh, e->digest, 16);
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(kh));
    XXH3_freeState(kh);
    memcpy(e->contrib, c.digest, 16);
    xor16(r->buckets[e->bucket], e->contrib);
    e->in_bucket = true;
    e->dirty = false;
    if (r->n_dirty)
        r->n_dirty--;
}

void repl_refresh_all_digests(shoal_replicator_t *r)
{
    if (!r->n_dirty)
        return;
    for (size_t i = 0; i < r->entries.cap; i++) {
        shoal_hslot_t *s = &r->entries.slots[i];
        if (SHOAL_HSLOT_LIVE(s) && ((entry_t *)s->value)->dirty)
            repl_refresh_digest(r, s->value);
    }
    r->n_dirty = 0;
}

void repl_root_digest(shoal_replicator_t *r, uint8_t out[16])
{
    repl_refresh_all_digests(r);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(r->buckets, sizeof r->buckets));
    memcpy(out, c.digest, 16);
}

/* ---------------------------------------------------------------------------------------------
 * Merging what peers send
 */
static const shoal_node_t *intern_str(const char *s)
{
    return s ? shoal_node_intern(s) : NULL;
}

static int pruning_from_pb(const Shoal__Replicator__PruningState *pb, pruning_t *p)
{
    memset(p, 0, sizeof *p);
    p->removed = intern_str(pb->removed);
    p->owner = intern_str(pb->owner);
    if (!p->removed || !p->owner)
        return SHOAL_ENODE;
    p->performed = pb->performed;
    p->obsolete_at_ms = pb->obsolete_at_ms;
    if (pb->plan_span && (!pb->performed || p->owner == p->removed || pb->plan_base == 0 ||
                          pb->plan_base - 1 > UINT64_MAX - pb->plan_span))
        return SHOAL_EDECODE; /* a block that does not fit, or a plan before the pruning */
    p->plan_base = pb->plan_base;
    p->plan_span = pb->plan_span;
    if (pb->n_seen > 4096)
        return SHOAL_ETOOBIG;
    p->seen = pb->n_seen ? shoal_malloc(pb->n_seen * sizeof *p->seen) : NULL;
    for (size_t i = 0; i < pb->n_seen; i++) {
        const shoal_node_t *n = intern_str(pb->seen[i]);
        if (!n || (i && shoal_node_cmp(p->seen[i - 1], n) >= 0)) {
            free(p->seen);
            p->seen = NULL;
            return n ? SHOAL_EDECODE : SHOAL_ENODE;
        }
        p->seen[p->n_seen++] = n;
    }
    return 0;
}

static bool seen_has(const pruning_t *p, const shoal_node_t *n)
{
    for (size_t i = 0; i < p->n_seen; i++)
        if (p->seen[i] == n)
            return true;
    return false;
}

static void seen_add(pruning_t *p, const shoal_node_t *n)
{
    if (seen_has(p, n))
        return;
    p->seen = shoal_realloc(p->seen, (p->n_seen + 1) * sizeof *p->seen);
    size_t pos = 0;
    while (pos < p->n_seen && shoal_node_cmp(p->seen[pos], n) < 0)
        pos++;
    memmove(&p->seen[pos + 1], &p->seen[pos], (p->n_seen - pos) * sizeof *p->seen);
    p->seen[pos] = n;
    p->n_seen++;
}

static pruning_t *pruning_find(entry_t *e, const shoal_node_t *removed)
{
    for (size_t i = 0; i < e->n_pruning; i++)
        if (e->pruning[i].removed == removed)
            return &e->pruning[i];
    return NULL;
}

pruning_t *repl_pruning_add(entry_t *e, const shoal_node_t *removed)
{
    e->pruning = shoal_realloc(e->pruning, (e->n_pruning + 1) * sizeof *e->pruning);
    size_t pos = 0;
    while (pos < e->n_pruning && shoal_node_cmp(e->pruning[pos].removed, removed) < 0)
        pos++;
    memmove(&e->pruning[pos + 1], &e->pruning[pos], (e->n_pruning - pos) * sizeof *e->pruning);
    memset(&e->pruning[pos], 0, sizeof e->pruning[pos]);
    e->pruning[pos].removed = removed;
    e->n_pruning++;
    return &e->pruning[pos];
}

/* Merges one incoming marker into the entry's markers (performed wins; two initializations keep
   the lower owner, seen sets united). Returns true if anything changed. */
static bool pruning_merge(entry_t *e, const pruning_t *in)
{
    pruning_t *p = pruning_find(e, in->removed);
    if (!p) {
        p = repl_pruning_add(e, in->removed);
        p->owner = in->owner;
        p->performed = in->performed;
        p->obsolete_at_ms = in->obsolete_at_ms;
        p->plan_base = in->plan_base;
        p->plan_span = in->plan_span;
        /* a performed marker has no seen set (a malformed one from a peer or a store may) */
        for (size_t i = 0; i < in->n_seen && !in->performed; i++)
            seen_add(p, in->seen[i]);
        return true;
    }
    if (p->performed) {
        if (!in->performed)
            return false;
        /* Two owners that both performed (designation changed mid-round) must still agree on
           one marker, or the digests never meet: the lower owner's, then the lower plan. */
        int c = in->owner == p->owner ? 0 : shoal_node_cmp(in->owner, p->owner);
        if (c == 0 && in->plan_base != p->plan_base)
            c = in->plan_base < p->plan_base ? -1 : 1;
        if (c == 0 && in->plan_span != p->plan_span)
            c = in->plan_span < p->plan_span ? -1 : 1;
        if (c < 0) {
            p->owner = in->owner;
            p->plan_base = in->plan_base;
            p->plan_span = in->plan_span;
            p->obsolete_at_ms = in->obsolete_at_ms;
            return true;
        }
        if (in->obsolete_at_ms > p->obsolete_at_ms)
            p->obsolete_at_ms = in->obsolete_at_ms; /* not part of the digest */
        return false;
    }
    if (in->performed) {
        p->performed = true;
        p->owner = in->owner;
        p->plan_base = in->plan_base;
        p->plan_span = in->plan_span;
        p->obsolete_at_ms = in->obsolete_at_ms;
        free(p->seen);
        p->seen = NULL;
        p->n_seen = 0;
        return true;
    }
    bool changed = false;
    if (p->owner != in->owner && shoal_node_cmp(in->owner, p->owner) < 0) {
        p->owner = in->owner;
        changed = true;
    }
    for (size_t i = 0; i < in->n_seen; i++)
        if (!seen_has(p, in->seen[i])) {
            seen_add(p, in->seen[i]);
            changed = true;
        }
    return changed;
}

void repl_tomb_seen_add(entry_t *e, const shoal_node_t *n)
{
    for (size_t i = 0; i < e->n_tomb_seen; i++)
        if (e->tomb_seen[i] == n)
            return;
    e->tomb_seen = shoal_realloc(e->tomb_seen, (e->n_tomb_seen + 1) * sizeof *e->tomb_seen);
    e->tomb_seen[e->n_tomb_seen++] = n;
}

static void make_tombstone(shoal_replicator_t *r, entry_t *e)
{
    shoal_crdt_destroy(&e->value);
    repl_entry_bytes(r, e, 0);
    e->deleted = true;
    e->deleted_at_ms = shoal_now_ms();
    for (size_t i = 0; i < e->n_deltas; i++)
        shoal_crdt_destroy(&e->deltas[i].delta);
    e->n_deltas = 0;
    shoal_hmap_remove(&r->delta_keys, e->key, e->klen);
    e->in_delta_set = false;
    r->stats.tombstones++;
    repl_entry_changed(r, e);
}

/* Cleans out of `v` the part of every node whose pruning was performed on this key: state that
   still holds a removed node (a peer's full state, a delta, or what a local modify merged in from
   a copy taken before the pruning) must not bring that node's part back. */
static void clean_pruned(const entry_t *e, shoal_crdt_t *v)
{
    for (size_t i = 0; v && i < e->n_pruning; i++) {
        const pruning_t *p = &e->pruning[i];
        shoal_prune_plan_t plan = {p->owner, p->plan_base, p->plan_span};
        if (p->performed && shoal_crdt_needs_pruning_from(v, p->removed))
            shoal_crdt_prune_cleanup(v, p->removed, &plan);
    }
}

static bool collected_refused(shoal_replicator_t *r, const char *key, size_t klen)
{
    void *v = shoal_hmap_get(&r->collected, key, klen);
    if (!v)
        return false;
    if ((int64_t)(intptr_t)v > shoal_now_ms())
        return true;
    shoal_hmap_remove(&r->collected, key, klen);
    return false;
}

int repl_merge_envelope(shoal_replicator_t *r, const char *key, size_t klen,
                        const Shoal__Replicator__DataEnvelope *pb, const shoal_node_t *from)
{
    if (collected_refused(r, key, klen)) {
        r->stats.dropped_collected_key++;
        return SHOAL_EDELETED;
    }
    entry_t *e = repl_entry(r, key, klen);
    if (pb->deleted) {
        if (!e)
            e = repl_entry_create(r, key, klen, NULL);
        if (from)
            repl_tomb_seen_add(e, from);
        if (!e->deleted) {
            make_tombstone(r, e);
            repl_entry_touch(r, e);
        }
        return 0;
    }
    if (e && e->deleted) {
        /* a deleted key stays deleted; the sender will learn it from our gossip */
        return 0;
    }
    shoal_crdt_t *in = NULL;
    int rc = shoal_crdt_decode(pb->value.data, pb->value.len, &in);
    if (rc < 0) {
        r->stats.dropped_malformed++;
        return rc;
    }
    if (e && e->type && e->type != in->type) {
        r->stats.dropped_wrong_type++;
        shoal_crdt_destroy(&in);
        return SHOAL_ETYPE;
    }
    /* decode the markers first: nothing changes if any is malformed */
    pruning_t *markers = pb->n_pruning ? shoal_calloc(pb->n_pruning, sizeof *markers) : NULL;
    for (size_t i = 0; i < pb->n_pruning && rc == 0; i++)
        rc = pruning_from_pb(pb->pruning[i], &markers[i]);
    shoal_nodemap_t dv = {0};
    if (rc == 0 && pb->n_delta_nodes)
        rc = shoal_nm_from_pb(&dv, pb->n_delta_nodes, pb->delta_nodes, pb->n_delta_seqs,
                              pb->delta_seqs);
    if (rc < 0) {
        r->stats.dropped_malformed++;
        goto cleanup;
    }
    bool created = false;
    if (!e) {
        e = repl_entry_create(r, key, klen, in->type);
        created = true;
    }
    if (!e->type)
        e->type = in->type;
    bool changed = created;
    for (size_t i = 0; i < pb->n_pruning; i++)
        changed |= pruning_merge(e, &markers[i]);
    /* An initialized marker we hold is one we have seen. */
    for (size_t i = 0; i < e->n_pruning; i++)
        if (!e->pruning[i].performed && !seen_has(&e->pruning[i], r->self)) {
            seen_add(&e->pruning[i], r->self);
            changed = true;
        }
    /* State that still holds a node whose pruning was performed is cleaned before it merges, on
       both sides, so the removed node's part cannot come back. */
    clean_pruned(e, in);
    clean_pruned(e, e->value);
    if (r->admitting && e->value && e->value->type->admit &&
        (rc = e->value->type->admit(e->value, in)) != 0) {
        r->stats.writes_refused++;
        goto cleanup;
    }
    if (!e->value) {
        e->value = in;
        in = NULL;
        changed = true;
    } else {
        /* A merge that changes nothing is common (gossip of equal state): compare digests rather
           than notifying for nothing. The digest is recomputed lazily anyway. */
        rc = shoal_crdt_merge(e->value, in);
        if (rc < 0)
            goto cleanup;
        changed = true;
    }
    shoal_nm_merge_max(&e->dv, &dv);
    repl_entry_touch(r, e);
    if (changed)
        repl_entry_changed(r, e);
cleanup:
    for (size_t i = 0; i < pb->n_pruning; i++)
        free(markers[i].seen);
    free(markers);
    shoal_nm_free(&dv);
    shoal_crdt_destroy(&in);
    return rc;
}

int repl_apply_delta(shoal_replicator_t *r, const shoal_node_t *origin,
                     const Shoal__Replicator__DeltaEntry *d)
{
    if (!d->key || d->from_seq == 0 || d->to_seq < d->from_seq) {
        r->stats.dropped_malformed++;
        return SHOAL_EDECODE;
    }
    size_t klen = strlen(d->key);
    if (collected_refused(r, d->key, klen)) {
        r->stats.dropped_collected_key++;
        return 0;
    }
    entry_t *e = repl_entry(r, d->key, klen);
    if (e && e->deleted)
        return 0;
    uint64_t have = e ? shoal_nm_get(&e->dv, origin) : 0;
    if (d->to_seq <= have)
        return 0; /* already applied (a duplicate, or it came with full state) */
    shoal_crdt_t *delta = NULL;
    int rc = shoal_crdt_decode(d->delta.data, d->delta.len, &delta);
    if (rc < 0) {
        r->stats.dropped_malformed++;
        return rc;
    }
    /* A delta is either a value of the key's type (GCounter's, PNCounter's and GSet's deltas,
       and a full state shipped when the deltas a peer misses are no longer kept) or a value of
       the type's own delta type (ORSet's, the maps', a registered type's), merged with the
       type's merge_delta. A key missing here is created empty for a delta of the second kind
       when exactly one type has that delta type (the maps share one: they need full state). */
    const shoal_type_t *dt = delta->type;
    bool is_delta_type = false;
    const shoal_type_t *owner = shoal_type_of_delta(dt, &is_delta_type);
    bool is_state;
    if (e && e->value)
        is_state = e->value->type == dt;
    else /* a type that is its own delta type (GCounter) is a key's value even if another
            type ships it as its deltas */
        is_state = !is_delta_type || dt->delta_type == dt;
    if (e && e->value && !is_state && e->value->type->delta_type != dt) {
        r->stats.dropped_wrong_type++;
        shoal_crdt_destroy(&delta);
        return SHOAL_ETYPE;
    }
    const shoal_type_t *state_type = e && e->value ? e->value->type : is_state ? dt : owner;
    bool causal = state_type ? shoal_type_delta_causal(state_type) : true;
    if (!is_state && causal && d->from_seq > have + 1) {
        r->stats.delta_gaps++;
        shoal_crdt_destroy(&delta);
        return SHOAL_EAGAIN;
    }
    if (!e || !e->value) {
        shoal_crdt_t *base = !is_state && owner ? shoal_crdt_new(owner) : NULL;
        if (!is_state && !base) {
            shoal_crdt_destroy(&delta);
            return SHOAL_EAGAIN; /* full state needed */
        }
        if (!e)
            e = repl_entry_create(r, d->key, klen, is_state ? dt : base->type);
        if (is_state) {
            e->value = delta;
            delta = NULL;
        } else {
            e->value = base;
        }
        if (!e->type)
            e->type = e->value->type;
    }
    if (delta && r->admitting && e->value->type->admit &&
        (rc = e->value->type->admit(e->value, delta)) != 0) {
        r->stats.writes_refused++;
        shoal_crdt_destroy(&delta);
        return rc;
    }
    if (delta) {
        /* clean the removed nodes' parts out of a delta that still carries them */
        clean_pruned(e, delta);
        rc = shoal_crdt_merge_delta(e->value, delta);
        shoal_crdt_destroy(&delta);
        if (rc < 0) {
            r->stats.dropped_malformed++;
            return rc;
        }
    }
    shoal_nm_set(&e->dv, origin, d->to_seq);
    repl_entry_touch(r, e);
    r->stats.deltas_received++;
    repl_entry_changed(r, e);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Storage. Every write goes through store_key, which writes the key's current state (its
 * envelope, or a deletion once the key has no entry) and numbers the write, so that the outcome
 * of a key's latest write alone decides whether the key counts as stored. A failed write leaves
 * the key in r->unstored, and the retry timer writes the current state of those keys again with
 * exponential backoff until the store takes them; meanwhile everything else goes on (reads,
 * writes of other keys, gossip), and a writer whose write failed has been told SHOAL_ESTORE.
 * Both stores of this tree call done before store() returns (write-behind acknowledges at
 * once), which is what lets a completion use its replicator pointer.
 */
typedef struct {
    shoal_replicator_t *r;
    char *key;
    size_t klen;
    uint64_t seq;
    shoal_store_done_fn *done;
    void *arg;
} store_wait_t;

static void retry_tick(shoal_system_t *sys, void *arg);

static void retry_schedule(shoal_replicator_t *r)
{
    if (!r->t_retry && !r->retrying && !r->destroying)
        r->t_retry = shoal_system_timer(r->sys, r->retry_backoff_ms, false, retry_tick, r);
}

static void store_settled(void *arg, int status)
{
    store_wait_t *w = arg;
    shoal_replicator_t *r = w->r;
    entry_t *e = repl_entry(r, w->key, w->klen);
    /* a deletion (no entry any more) or the entry's latest write decides for the key; an older
       write's outcome says nothing about what the store holds now */
    bool latest = !e || e->store_seq == w->seq;
    if (status < 0) {
        r->stats.store_failures++;
        if (latest) {
            if (!r->store_outage) {
                r->store_outage = true;
                shoal_warning("%s: replicator '%s': a write to the store failed (%s); writing again "
                             "with backoff (%d ms up to %d s) while reads and other keys are "
                             "served", shoal_node_id(r->self), r->role, shoal_strerror(status),
                             STORE_RETRY_MIN_MS, STORE_RETRY_MAX_MS / 1000);
            }
            bool ins;
            shoal_hmap_upsert(&r->unstored, w->key, w->klen, &ins)->value = (void *)1;
            retry_schedule(r);
        }
    } else if (latest) {
        shoal_hmap_remove(&r->unstored, w->key, w->klen);
        if (r->store_outage && !r->unstored.n) {
            shoal_info("%s: replicator '%s': the durable store works again; every durable key is "
                      "stored (%llu writes retried)", shoal_node_id(r->self), r->role,
                      (unsigned long long)r->outage_retries);
            r->store_outage = false;
            r->outage_retries = 0;
            r->retry_backoff_ms = STORE_RETRY_MIN_MS;
        }
    }
    if (w->done)
        w->done(w->arg, status);
    free(w->key);
    free(w);
}

/* Writes the current state of a durable key (no-op for others): the envelope with its write
   time appended (a protobuf field appended to a message is a field of it), or a deletion when
   the key has no entry. */
static void store_key(shoal_replicator_t *r, const char *key, size_t klen,
                      shoal_store_done_fn *done, void *arg)
{
    entry_t *e = repl_entry(r, key, klen);
    if (!r->s.store || !(e ? e->durable : repl_is_durable(r, key, klen))) {
        if (done)
            done(arg, 0);
        return;
    }
    store_wait_t *w = shoal_malloc(sizeof *w);
    w->r = r;
    w->key = shoal_memdup(key, klen);
    w->klen = klen;
    w->seq = ++r->store_seq;
    w->done = done;
    w->arg = arg;
    if (!e) {
        r->s.store->store(r->s.store->ctx, key, klen, NULL, 0, store_settled, w);
        return;
    }
    e->store_seq = w->seq;
    shoal_buf_t scratch = {0}, out = {0};
    Shoal__Replicator__DataEnvelope pb;
    repl_envelope_to_pb(r, e, &pb, &scratch);
    shoal_pb_pack(&pb.base, &out);
    repl_envelope_pb_free(&pb);
    shoal_buf_append_varint(&out, (uint64_t)STORED_AT_FIELD << 3); /* wire type 0: varint */
    shoal_buf_append_varint(&out, (uint64_t)wall_ms());
    r->s.store->store(r->s.store->ctx, key, klen, out.data, out.len, store_settled, w);
    shoal_buf_free(&scratch);
    shoal_buf_free(&out);
}

void repl_store_entry(shoal_replicator_t *r, entry_t *e, shoal_store_done_fn *done, void *arg)
{
    store_key(r, e->key, e->klen, done, arg);
}

/* Writes the unstored keys again, stopping at the first that fails (a store that still fails
   gets one write per pass, not one per key), and backs off while any is left. */
static void retry_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_t *r = arg;
    r->t_retry = 0;
    size_t n = r->unstored.n;
    if (!n)
        return;
    /* copies: each write settles, and may leave the set, before store() returns */
    shoal_hslot_t **slots = shoal_hmap_sorted(&r->unstored);
    char **keys = shoal_malloc(n * sizeof *keys);
    size_t *lens = shoal_malloc(n * sizeof *lens);
    for (size_t i = 0; i < n; i++) {
        keys[i] = shoal_memdup(slots[i]->key, slots[i]->klen);
        lens[i] = slots[i]->klen;
    }
    free(slots);
    r->retrying = true;
    for (size_t i = 0; i < n; i++) {
        r->stats.store_retries++;
        r->outage_retries++;
        store_key(r, keys[i], lens[i], NULL, NULL);
        if (shoal_hmap_get(&r->unstored, keys[i], lens[i]))
            break;
    }
    r->retrying = false;
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    free(lens);
    if (r->unstored.n) {
        r->retry_backoff_ms = r->retry_backoff_ms * 2 > STORE_RETRY_MAX_MS
                                  ? STORE_RETRY_MAX_MS
                                  : r->retry_backoff_ms * 2;
        retry_schedule(r);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 */
int repl_stored_at(const uint8_t *data, size_t len, int64_t *ms)
{
    /* a walk over the top-level fields of the protobuf wire format (groups are not used) */
    int found = 0;
    const uint8_t *p = data, *end = data + len;
    while (p < end) {
        uint64_t tag, v;
        if (shoal_varint_get(&p, end, &tag) != 0 || (tag >> 3) == 0)
            return SHOAL_EDECODE;
        switch (tag & 7) {
        case 0:
            if (shoal_varint_get(&p, end, &v) != 0)
                return SHOAL_EDECODE;
            if ((tag >> 3) == STORED_AT_FIELD) {
                *ms = (int64_t)v;
                found = 1;
            }
            break;
        case 1:
            if (end - p < 8)
                return SHOAL_EDECODE;
            p += 8;
            break;
        case 2:
            if (shoal_varint_get(&p, end, &v) != 0 || v > (uint64_t)(end - p))
                return SHOAL_EDECODE;
            p += v;
            break;
        case 5:
            if (end - p < 4)
                return SHOAL_EDECODE;
            p += 4;
            break;
        default:
            return SHOAL_EDECODE;
        }
    }
    return found;
}

int repl_load_entry(shoal_replicator_t *r, const char *key, size_t klen, const uint8_t *data,
                    size_t len, int64_t *stored_at_ms)
{
    *stored_at_ms = 0;
    if (klen == 0 || klen > 4096 || memchr(key, 0, klen))
        return SHOAL_EDECODE;
    Shoal__Replicator__DataEnvelope *pb = shoal__replicator__data_envelope__unpack(NULL, len, data);
    if (!pb)
        return SHOAL_EDECODE;
    char *k = shoal_malloc(klen + 1);
    memcpy(k, key, klen);
    k[klen] = 0;
    int rc = repl_merge_envelope(r, k, klen, pb, NULL);
    int64_t at;
    if (rc == 0 && repl_stored_at(data, len, &at) == 1)
        *stored_at_ms = at;
    shoal__replicator__data_envelope__free_unpacked(pb, NULL);
    free(k);
    return rc;
}

typedef struct {
    shoal_replicator_t *r;
    int loaded, failed;
    int64_t newest_ms; /* the newest write time among the entries, 0 when none carries one */
    int64_t wall_ms;
} load_ctx_t;

/* Write times this far ahead of the clock are taken for garbage (or a clock that jumped), not
   for a fresh store: a store that cannot be dated counts as old. */
#define STORED_AT_MAX_AHEAD_MS (24 * 3600 * 1000)

static void load_each(void *arg, const char *key, size_t klen, const void *data, size_t len)
{
    load_ctx_t *lc = arg;
    int64_t at = 0;
    int rc = repl_load_entry(lc->r, key, klen, data, len, &at);
    if (rc < 0) {
        lc->failed++;
        shoal_error("%s: replicator '%s': a stored key (%zu bytes, '%.*s') does not decode (%s); "
                   "skipped", shoal_node_id(lc->r->self), lc->r->role, klen,
                   (int)(klen > 200 ? 200 : klen), key, shoal_strerror(rc));
        return;
    }
    lc->loaded++;
    if (at > lc->newest_ms && at <= lc->wall_ms + STORED_AT_MAX_AHEAD_MS)
        lc->newest_ms = at;
}

static void run_pending(shoal_replicator_t *r)
{
    while (r->pending_head) {
        struct pending_call *p = r->pending_head;
        r->pending_head = p->next;
        if (!r->pending_head)
            r->pending_tail = NULL;
        p->fn(r, p->arg);
        free(p);
    }
}

static void load_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_t *r = arg;
    r->t_load = 0;
    if (r->s.store && r->s.store->load) {
        load_ctx_t lc = {r, 0, 0, 0, wall_ms()};
        int rc = r->s.store->load(r->s.store->ctx, load_each, &lc);
        if (rc < 0) {
            /* Serving as if empty would answer "not found" for data that exists and let gossip
               overwrite nothing with something else: stop instead (Akka's DurableDataSpec "stop
               Replicator if Load fails"). What loaded before the failure stays unserved. */
            r->load_failed = true;
            r->stats.store_failures++;
            shoal_error(
                "%s: replicator '%s': loading the durable store failed (%s): the "
                "replicator is stopped (every operation on it fails with SHOAL_ESTORE, "
                "it takes no part in gossip). Read the store with ddata-dump DIR (--salvage "
                "OUT keeps what is readable), replace or restore it, restart the node",
                shoal_node_id(r->self), r->role, shoal_strerror(rc));
            run_pending(r); /* what waited for the load fails now */
            return;
        }
        if (lc.loaded)
            shoal_info("%s: replicator '%s': loaded %d durable keys", shoal_node_id(r->self),
                      r->role, lc.loaded);
        /* loading is not a change to tell subscribers twice about: they get current values */
        if (lc.loaded &&
            (!lc.newest_ms || lc.wall_ms - lc.newest_ms > (int64_t)r->durable_marker_ttl_ms)) {
            r->unsynced = true;
            if (lc.newest_ms)
                shoal_warning("%s: replicator '%s': the store's newest write is %lld hours old, "
                             "older than the durable pruning markers live (%llu hours): its "
                             "values are not sent to peers until this node has synced with one",
                             shoal_node_id(r->self), r->role,
                             (long long)((lc.wall_ms - lc.newest_ms) / 3600000),
                             (unsigned long long)(r->durable_marker_ttl_ms / 3600000));
            else
                shoal_warning("%s: replicator '%s': the store's entries carry no write time, so "
                             "it may be older than the durable pruning markers live: its values "
                             "are not sent to peers until this node has synced with one",
                             shoal_node_id(r->self), r->role);
        }
    }
    r->loading = false;
    run_pending(r);
}

size_t repl_catch_up_need(const shoal_replicator_t *r)
{
    size_t n = repl_counted_nodes(r);
    return n < 2 ? 0 : n - (n / 2 + 1) + 1;
}

static bool caught_from(const shoal_replicator_t *r, const shoal_node_t *node)
{
    for (size_t i = 0; i < r->n_caught_from; i++)
        if (r->caught_from[i] == node)
            return true;
    return false;
}

/* A counted peer that may have been Up before this node: older, or as old (ties only arise
   outside membership), or any counted peer when this node's age is unknown. */
static bool older_peer(const shoal_replicator_t *r, const peer_t *p)
{
    return p->counted && (!r->self_age || p->age <= r->self_age);
}

typedef struct {
    uint64_t age;
    bool synced;
    const shoal_node_t *node;
} older_t;

/* Oldest first; within one age (an order not known) the unsynced first: the prefixes checked
   are then the worst of every order the tie allows. */
static int older_cmp(const void *a, const void *b)
{
    const older_t *x = a, *y = b;
    if (x->age != y->age)
        return x->age < y->age ? -1 : 1;
    if (x->synced != y->synced)
        return x->synced ? 1 : -1;
    return shoal_node_cmp(x->node, y->node);
}

/* THE CATCH-UP RULE; its argument is CATCHING UP in ddata.h. Every majority that acknowledged
   a write this replica may lack (one of a counted set from before this node was Up) had, among
   the members still here, an age-prefix of the older peers, plus at most one member that is
   gone (this node's earlier incarnation, say). A majority, floor(p/2) + 1, of each prefix of p
   meets every such majority in a member still here that held the write when synced with. */
bool repl_catch_up_done(const shoal_replicator_t *r)
{
    size_t m = 0;
    for (size_t i = 0; i < r->n_peers; i++)
        m += older_peer(r, &r->peers[i]);
    if (!m)
        return true;
    older_t small[32], *o = m <= 32 ? small : shoal_malloc(m * sizeof *o);
    size_t k = 0;
    for (size_t i = 0; i < r->n_peers; i++)
        if (older_peer(r, &r->peers[i]))
            o[k++] = (older_t){r->peers[i].age, caught_from(r, r->peers[i].node), r->peers[i].node};
    qsort(o, m, sizeof *o, older_cmp);
    bool done = true;
    size_t synced = 0;
    for (size_t p = 1; p <= m && done; p++) {
        synced += o[p - 1].synced;
        done = synced >= p / 2 + 1;
    }
    if (o != small)
        free(o);
    return done;
}

/* Ends catching up once the rule holds (peers synced with that stopped counting no longer
   count toward it). */
void repl_catch_up_check(shoal_replicator_t *r)
{
    if (!r->catching_up || !repl_catch_up_done(r))
        return;
    r->catching_up = false;
    size_t have = r->n_caught_from;
    free(r->caught_from);
    r->caught_from = NULL;
    r->n_caught_from = 0;
    r->stats.catch_ups++;
    if (have)
        shoal_info("%s: replicator '%s': caught up (synced with %zu of %zu peers): this replica "
                   "counts toward MAJORITY reads again",
                   shoal_node_id(r->self), r->role, have, repl_counted_nodes(r) - 1);
    repl_answer_deferred_reads(r, true);
    repl_catch_up_relieve_reads(r);
}

static void catch_up_fire(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_t *r = arg;
    r->t_catch_up = 0;
    repl_catch_up_check(r);
    repl_catch_up_round(r);
}

/* The gate opened: see `catching_up` in replicator_internal.h. */
static void catch_up_start(shoal_replicator_t *r)
{
    r->catching_up = true;
    free(r->caught_from);
    r->caught_from = NULL;
    r->n_caught_from = 0;
    if (r->self_age)
        shoal_info(
            "%s: replicator '%s': catching up: MAJORITY reads count this replica once it has "
            "synced with a majority of every age-prefix of the members older than its "
            "up-number %llu",
            shoal_node_id(r->self), r->role, (unsigned long long)r->self_age);
    else
        shoal_info(
            "%s: replicator '%s': catching up: MAJORITY reads count this replica once it has "
            "synced with a majority of every age-prefix of its counted peers (its own age "
            "is unknown)",
            shoal_node_id(r->self), r->role);
    /* not checked now: membership gives the peers right after opening the gate, and a check
       before that would find nothing to catch up with; the first round goes on the next turn */
    if (!r->t_catch_up)
        r->t_catch_up = shoal_system_timer(r->sys, 0, false, catch_up_fire, r);
}

void repl_synced(shoal_replicator_t *r, const shoal_node_t *peer)
{
    if (r->catching_up) {
        peer_t *p = repl_peer(r, peer);
        if (p && p->counted && !caught_from(r, peer)) {
            r->caught_from =
                shoal_realloc(r->caught_from, (r->n_caught_from + 1) * sizeof *r->caught_from);
            r->caught_from[r->n_caught_from++] = peer;
            shoal_debug("%s: replicator '%s': catching up: synced with %s (%zu peers so far, %zu "
                        "needed)",
                        shoal_node_id(r->self), r->role, shoal_node_id(peer), r->n_caught_from,
                        repl_catch_up_need(r));
        }
        repl_catch_up_check(r);
    }
    if (!r->unsynced)
        return;
    r->unsynced = false;
    shoal_info("%s: replicator '%s': synced with %s; its loaded values are shared again",
              shoal_node_id(r->self), r->role, shoal_node_id(peer));
}

/* Runs fn now, or after loading. */
static void when_loaded(shoal_replicator_t *r, void (*fn)(shoal_replicator_t *, void *), void *arg)
{
    if (!r->loading || r->load_failed) { /* a failed load: fn refuses at once */
        fn(r, arg);
        return;
    }
    struct pending_call *p = shoal_malloc(sizeof *p);
    p->fn = fn;
    p->arg = arg;
    p->next = NULL;
    if (r->pending_tail)
        r->pending_tail->next = p;
    else
        r->pending_head = p;
    r->pending_tail = p;
}

/* ---------------------------------------------------------------------------------------------
 * Subscriptions and expiry
 */
static bool sub_matches(const sub_t *s, const entry_t *e)
{
    if (s->prefix)
        return e->klen >= s->plen && memcmp(e->key, s->pattern, s->plen) == 0;
    return e->klen == s->plen && memcmp(e->key, s->pattern, s->plen) == 0;
}

static void notify_entry(shoal_replicator_t *r, entry_t *e, shoal_change_t ch, const sub_t *only)
{
    for (sub_t *s = r->subs; s; s = s->next) {
        if (only && s != only)
            continue;
        if (sub_matches(s, e))
            s->fn(r, ch, e->key, e->value, s->arg);
    }
}

/* A subscriber added since the last flush still waits to be told the current values. */
static bool subs_awaiting_initial(const shoal_replicator_t *r)
{
    for (const sub_t *s = r->subs; s; s = s->next)
        if (s->initial)
            return true;
    return false;
}

void shoal_replicator_flush(shoal_replicator_t *r)
{
    if (!r)
        return;
    if (!shoal_system_on_thread(r->sys)) {
        shoal_wrong_thread(__func__, "shoal_replicator_flush_sync");
        return;
    }
    if (r->loading)
        return;
    bool initial = subs_awaiting_initial(r);
    size_t n = r->changed_keys.n;
    if (!n && !initial)
        return;
    /* changed keys, in key order (deterministic; callbacks may change the set) */
    shoal_hslot_t **slots = shoal_hmap_sorted(&r->changed_keys);
    entry_t **list = shoal_malloc((n ? n : 1) * sizeof *list);
    for (size_t i = 0; i < n; i++)
        list[i] = slots[i]->value;
    free(slots);
    shoal_hmap_t done = r->changed_keys; /* kept as the set of keys notified in this flush */
    memset(&r->changed_keys, 0, sizeof r->changed_keys);
    for (size_t i = 0; i < n; i++) {
        entry_t *e = list[i];
        e->changed = false;
        repl_refresh_digest(r, e);
        if (e->notified && memcmp(e->notified_digest, e->digest, 16) == 0)
            continue; /* changed and changed back, or a merge that changed nothing */
        e->notified = true;
        memcpy(e->notified_digest, e->digest, 16);
        notify_entry(r, e, e->deleted ? SHOAL_DELETED : SHOAL_CHANGED, NULL);
    }
    free(list);
    /* new subscribers: the current value of every matching key they were not just told about */
    for (sub_t *s = r->subs; initial && s; s = s->next) {
        if (!s->initial)
            continue;
        s->initial = false;
        for (size_t i = 0; i < r->entries.cap; i++) {
            shoal_hslot_t *sl = &r->entries.slots[i];
            if (!SHOAL_HSLOT_LIVE(sl))
                continue;
            entry_t *e = sl->value;
            if (e->deleted || !e->value || !sub_matches(s, e) ||
                shoal_hmap_get(&done, e->key, e->klen))
                continue;
            notify_entry(r, e, SHOAL_CHANGED, s);
        }
    }
    shoal_hmap_free(&done);
}

static void notify_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_t *r = arg;
    r->t_notify = 0;
    shoal_replicator_flush(r);
    if (r->changed_keys.n || subs_awaiting_initial(r)) /* still loading, or callbacks changed keys */
        repl_notify_arm(r);
}

static void expire_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_t *r = arg;
    if (!r->s.n_expire_keys || r->loading)
        return;
    int64_t now = shoal_now_ms();
    entry_t **victims = NULL;
    size_t nv = 0, cap = 0;
    for (size_t i = 0; i < r->entries.cap; i++) {
        shoal_hslot_t *s = &r->entries.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        entry_t *e = s->value;
        uint64_t after = expiry_of(r, e->key, e->klen);
        if (after && !e->deleted && now - e->last_access_ms >= (int64_t)after) {
            SHOAL_GROW(victims, cap, nv + 1);
            victims[nv++] = e;
        }
    }
    for (size_t i = 0; i < nv; i++) {
        notify_entry(r, victims[i], SHOAL_EXPIRED, NULL);
        repl_entry_drop(r, victims[i]);
    }
    free(victims);
}

int shoal_replicator_subscribe(shoal_replicator_t *r, const char *key_or_prefix,
                               shoal_changed_fn *fn, void *arg)
{
    if (!r || !key_or_prefix || !fn)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_replicator_subscribe_sync");
    if (r->load_failed) { /* it would never be told anything */
        r->stats.store_failures++;
        return SHOAL_ESTORE;
    }
    sub_t *s = shoal_calloc(1, sizeof *s);
    s->id = ++r->next_sub_id;
    s->pattern = strdup(key_or_prefix);
    if (!s->pattern)
        abort();
    s->plen = strlen(key_or_prefix);
    if (s->plen && key_or_prefix[s->plen - 1] == '*') {
        s->prefix = true;
        s->plen--;
    }
    s->fn = fn;
    s->arg = arg;
    s->next = r->subs;
    r->subs = s;
    /* A new subscriber is told the current values at the next flush (not from inside this call,
       so it can finish setting up), and only it: the others have been told already. */
    s->initial = true;
    repl_notify_arm(r);
    return s->id;
}

int shoal_replicator_unsubscribe(shoal_replicator_t *r, int id)
{
    if (!r)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_replicator_unsubscribe_sync");
    for (sub_t **p = &r->subs; *p; p = &(*p)->next)
        if ((*p)->id == id) {
            sub_t *s = *p;
            *p = s->next;
            free(s->pattern);
            free(s);
            return 0;
        }
    return SHOAL_ENOTFOUND;
}

/* ---------------------------------------------------------------------------------------------
 * Creation
 */
typedef struct {
    const shoal_replicator_settings_t *s;
    shoal_replicator_t *r;
} create_args_t;

static int create_on_thread(shoal_system_t *sys, void *arg)
{
    create_args_t *a = arg;
    shoal_replicator_t *r = shoal_calloc(1, sizeof *r);
    r->sys = sys;
    r->s = *a->s;
    r->role = strdup(a->s->role ? a->s->role : "");
    if (!r->role)
        abort();
    r->s.role = r->role;
    r->self = shoal_system_self(sys);
    r->loading = true;
    r->prng = shoal_node_uid(r->self) ^ (uint64_t)shoal_now_ms();
    r->next_req = 1;
    r->next_transfer = 1;
    r->lat = shoal_calloc(1, sizeof *r->lat);
    r->retry_backoff_ms = STORE_RETRY_MIN_MS;
    r->skew_window_ms = REPL_SKEW_WINDOW_MS;
    r->durable_marker_ttl_ms = r->s.durable_pruning_marker_ttl_ms;
    if (!r->durable_marker_ttl_ms) /* settings not from shoal_replicator_settings_default */
        r->durable_marker_ttl_ms = DURABLE_PRUNING_MARKER_TTL_MS;
    int rc = hub_add(sys, r);
    if (rc < 0) {
        free(r->lat);
        free(r->role);
        free(r);
        return rc;
    }
    /* Registering is idempotent (the handlers find the replicator by role): doing it for every
       replicator, rather than remembering systems by pointer, stays right when a destroyed
       system's memory is reused by a new one. */
    repl_net_register(sys);
    repl_client_register(sys);
    r->t_load = shoal_system_timer(sys, 0, false, load_tick, r);
    r->t_gossip = shoal_system_timer(sys, r->s.gossip_interval_ms, true, repl_gossip_tick, r);
    if (r->s.delta_enabled)
        r->t_delta = shoal_system_timer(sys, r->s.delta_interval_ms, true, repl_delta_tick, r);
    r->notify_epoch = shoal_now_ms();
    if (r->s.pruning_interval_ms)
        r->t_prune = shoal_system_timer(sys, r->s.pruning_interval_ms, true, repl_prune_tick, r);
    if (r->s.n_expire_keys) {
        uint64_t shortest = UINT64_MAX;
        for (size_t i = 0; i < r->s.n_expire_keys; i++)
            if (r->s.expire_keys[i].after_ms < shortest)
                shortest = r->s.expire_keys[i].after_ms;
        uint32_t every = (uint32_t)(shortest / 4 < 10 ? 10 : shortest / 4 > 60000 ? 60000
                                                                                  : shortest / 4);
        r->t_expire = shoal_system_timer(sys, every, true, expire_tick, r);
    }
    a->r = r;
    return 0;
}

static bool settings_ok(const shoal_replicator_settings_t *s)
{
    return s && s->gossip_interval_ms > 0 && s->notify_subscribers_interval_ms > 0 &&
           (!s->delta_enabled || s->delta_interval_ms > 0) && s->max_delta_elements > 0 &&
           (s->n_durable_keys == 0 || s->durable_keys) &&
           (s->n_expire_keys == 0 || s->expire_keys);
}

shoal_replicator_t *shoal_replicator_new(shoal_system_t *sys, const shoal_replicator_settings_t *s,
                                         int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    shoal_error_detail_clear();
    if (!sys || !settings_ok(s)) {
        *err = shoal_error_detail_set(SHOAL_EINVAL, "shoal_replicator_new: %s",
                                      !sys ? "no node"
                                      : !s ? "no settings"
                                           : "settings not from shoal_replicator_settings_default "
                                             "(an interval of 0, or a list without its items)");
        return NULL;
    }
    create_args_t a = {s, NULL};
    int rc = shoal_system_on_thread(sys) ? create_on_thread(sys, &a)
                                         : shoal_system_call(sys, create_on_thread, &a);
    *err = rc;
    if (rc < 0 && !shoal_last_error_detail()[0])
        shoal_error_detail_set(rc, "shoal_replicator_new: role '%s': %s", s->role ? s->role : "",
                               rc == SHOAL_EINVAL
                                   ? "this node has a replicator of that role already"
                                   : shoal_strerror(rc));
    return rc < 0 ? NULL : a.r;
}

static void refusals_complete(shoal_replicator_t *r, int status);

static int destroy_on_thread(shoal_system_t *sys, void *arg)
{
    shoal_replicator_t *r = arg;
    int *timers[] = {&r->t_load,  &r->t_gossip, &r->t_delta, &r->t_notify,
                     &r->t_prune, &r->t_expire, &r->t_retry};
    for (size_t i = 0; i < sizeof timers / sizeof timers[0]; i++)
        if (*timers[i] > 0)
            shoal_system_timer_cancel(sys, *timers[i]);
    hub_remove(r);
    repl_client_watches_free(r);
    r->destroying = true;
    if (r->t_refused > 0)
        shoal_system_timer_cancel(sys, r->t_refused);
    if (r->t_catch_up > 0)
        shoal_system_timer_cancel(sys, r->t_catch_up);
    refusals_complete(r, SHOAL_ESTOPPED);
    if (r->unstored.n)
        shoal_error("%s: replicator '%s': stopping with %zu durable keys the store has not taken "
                   "(it kept failing): their last changes are not stored",
                   shoal_node_id(r->self), r->role, r->unstored.n);
    repl_ops_fail_all(r, SHOAL_ESTOPPED);
    while (r->pending_head) {
        /* operations queued while loading: run them now; they fail as stopping */
        r->loading = false;
        run_pending(r);
    }
    for (size_t i = 0; i < r->entries.cap; i++)
        if (SHOAL_HSLOT_LIVE(&r->entries.slots[i]))
            entry_free(r->entries.slots[i].value);
    shoal_hmap_free(&r->entries);
    shoal_hmap_free(&r->delta_keys);
    shoal_hmap_free(&r->changed_keys);
    shoal_hmap_free(&r->collected);
    shoal_hmap_free(&r->ops_by_req);
    repl_op_pool_free(r);
    shoal_hmap_free(&r->unstored);
    while (r->subs) {
        sub_t *s = r->subs;
        r->subs = s->next;
        free(s->pattern);
        free(s);
    }
    repl_reassembly_free(r);
    free(r->peers);
    free(r->caught_from);
    repl_answer_deferred_reads(r, false);
    free(r->removed);
    free(r->lat);
    free(r->role);
    free(r);
    return 0;
}

void shoal_replicator_destroy(shoal_replicator_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_replicator_t *r = *self_p;
    *self_p = NULL;
    if (shoal_system_on_thread(r->sys))
        destroy_on_thread(r->sys, r);
    else
        shoal_system_call(r->sys, destroy_on_thread, r);
}

shoal_system_t *shoal_replicator_system(shoal_replicator_t *r)
{
    return r ? r->sys : NULL;
}

const char *shoal_replicator_role(const shoal_replicator_t *r)
{
    return r ? r->role : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Peers
 */
int shoal_replicator_add_peer(shoal_replicator_t *r, const shoal_node_t *node, bool counted,
                              uint64_t age)
{
    if (!r || !node || node == r->self)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_replicator_add_peer_sync");
    peer_t *p = repl_peer(r, node);
    if (!p) {
        SHOAL_GROW(r->peers, r->cap_peers, r->n_peers + 1);
        p = &r->peers[r->n_peers++];
        memset(p, 0, sizeof *p);
        p->node = node;
        p->voter = false;
        p->skew_probe_ms = shoal_now_ms(); /* no probe before half a window (skew_probe) */
    }
    p->counted = counted;
    p->age = age;
    return 0; /* voter: unchanged (a new peer is none until shoal_replicator_peer_votes) */
}

int shoal_replicator_set_age(shoal_replicator_t *r, uint64_t age)
{
    if (!r)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_system_call");
    r->self_age = age;
    return 0;
}

int shoal_replicator_set_quorum_gate(shoal_replicator_t *r, bool open, const char *why)
{
    if (!r)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_system_call");
    if (r->gated && r->quorum_ok == open)
        return 0;
    if (open)
        catch_up_start(r);
    if (open)
        shoal_info("%s: replicator '%s': MAJORITY and ALL served (%s)", shoal_node_id(r->self),
                  r->role, why ? why : "a full member");
    else if (!r->gated) /* the state every followed replicator starts in: no alarm */
        shoal_info("%s: replicator '%s': MAJORITY and ALL refused with SHOAL_ENOQUORUM until this "
                  "node is a full member (%s)", shoal_node_id(r->self), r->role,
                  why ? why : "not a full member");
    else
        shoal_warning("%s: replicator '%s': MAJORITY and ALL refused with SHOAL_ENOQUORUM (%s)",
                     shoal_node_id(r->self), r->role, why ? why : "not a full member");
    r->gated = true;
    r->quorum_ok = open;
    return 0;
}

int shoal_replicator_clear_quorum_gate(shoal_replicator_t *r)
{
    if (!r)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_system_call");
    r->gated = false;
    return 0;
}

int shoal_replicator_set_voters(shoal_replicator_t *r, size_t n_voters, bool self_votes)
{
    if (!r)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_system_call");
    r->n_voters = n_voters;
    r->self_votes = self_votes;
    return 0;
}

int shoal_replicator_peer_votes(shoal_replicator_t *r, const shoal_node_t *node, bool voter)
{
    if (!r || !node)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_system_call");
    peer_t *p = repl_peer(r, node);
    if (!p)
        return SHOAL_ENOTFOUND;
    p->voter = voter;
    return 0;
}

static void refusals_complete(shoal_replicator_t *r, int status)
{
    struct refusal *q = r->refused_head;
    r->refused_head = NULL;
    /* completed in the order they were refused */
    struct refusal *rev = NULL;
    while (q) {
        struct refusal *next = q->next;
        q->next = rev;
        rev = q;
        q = next;
    }
    while (rev) {
        struct refusal *next = rev->next;
        if (rev->get_done)
            rev->get_done(r, status, rev->key, NULL, rev->arg);
        else
            rev->update_done(r, status, rev->key, rev->arg);
        free(rev->key);
        free(rev);
        rev = next;
    }
}

static void refusals_fire(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_t *r = arg;
    r->t_refused = 0;
    refusals_complete(r, SHOAL_ENOQUORUM);
}

/* Completes an operation with SHOAL_ENOQUORUM on the next loop turn. */
static void refuse_later(shoal_replicator_t *r, const char *key, shoal_get_done_fn *get_done,
                         shoal_update_done_fn *update_done, void *arg)
{
    struct refusal *q = shoal_calloc(1, sizeof *q);
    q->key = strdup(key);
    if (!q->key)
        abort();
    q->get_done = get_done;
    q->update_done = update_done;
    q->arg = arg;
    q->next = r->refused_head;
    r->refused_head = q;
    if (!r->t_refused)
        r->t_refused = shoal_system_timer(r->sys, 0, false, refusals_fire, r);
}

/* True (and counted) when MAJORITY/ALL cannot run now: the gate is closed, or fewer voters are
   peers than a majority of the kept membership needs (a node restarted before the others). */
static bool quorum_refused(shoal_replicator_t *r, const shoal_consistency_t *c, const char *op,
                           const char *key)
{
    if (c->level != SHOAL_MAJORITY && c->level != SHOAL_ALL)
        return false;
    bool gate = r->gated && !r->quorum_ok;
    int vneed = repl_voters_needed(r, c);
    if (!gate && (vneed == 0 || repl_voter_peers(r) >= (size_t)vneed))
        return false;
    r->stats.no_quorum++;
    /* the operator's question is "why": the gate, or which voters are missing */
    if (gate)
        shoal_debug("%s: replicator '%s': %s %s of '%s' refused (SHOAL_ENOQUORUM): this node is "
                    "not a full member of a cluster yet",
                    shoal_node_id(r->self), r->role, c->level == SHOAL_ALL ? "ALL" : "MAJORITY", op,
                    key);
    else
        shoal_debug("%s: replicator '%s': %s %s of '%s' refused (SHOAL_ENOQUORUM): %zu of the "
                    "kept membership's voters are peers, %d needed",
                    shoal_node_id(r->self), r->role, c->level == SHOAL_ALL ? "ALL" : "MAJORITY", op,
                    key, repl_voter_peers(r), vneed);
    return true;
}

int shoal_replicator_remove_peer(shoal_replicator_t *r, const shoal_node_t *node)
{
    if (!r || !node)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_replicator_remove_peer_sync");
    for (size_t i = 0; i < r->n_peers; i++)
        if (r->peers[i].node == node) {
            r->peers[i] = r->peers[--r->n_peers];
            return 0;
        }
    return SHOAL_ENOTFOUND;
}

int shoal_replicator_node_removed(shoal_replicator_t *r, const shoal_node_t *node)
{
    if (!r || !node || node == r->self)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_replicator_node_removed_sync");
    shoal_replicator_remove_peer(r, node);
    for (size_t i = 0; i < r->n_removed; i++)
        if (r->removed[i].node == node)
            return 0;
    SHOAL_GROW(r->removed, r->cap_removed, r->n_removed + 1);
    r->removed[r->n_removed].node = node;
    r->removed[r->n_removed].at_ms = shoal_now_ms();
    r->n_removed++;
    return 0;
}

const shoal_crdt_t *shoal_replicator_peek(shoal_replicator_t *r, const char *key)
{
    if (!r || !key)
        return NULL;
    if (!shoal_system_on_thread(r->sys)) {
        shoal_wrong_thread(__func__, "shoal_replicator_get_sync with SHOAL_LOCAL (a copy)");
        return NULL;
    }
    if (r->loading)
        return NULL;
    entry_t *e = repl_entry(r, key, strlen(key));
    return e && !e->deleted ? e->value : NULL;
}

size_t shoal_replicator_replica_count(shoal_replicator_t *r)
{
    if (!r)
        return 0;
    if (!shoal_system_on_thread(r->sys)) {
        shoal_wrong_thread(__func__, "shoal_replicator_replica_count_sync");
        return 0;
    }
    if (r->loading)
        return 0;
    return repl_counted_nodes(r);
}

int shoal_replicator_keys(shoal_replicator_t *r, shoal_key_fn *fn, void *arg)
{
    if (!r || !fn)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_replicator_keys_sync");
    if (r->load_failed) {
        r->stats.store_failures++;
        return SHOAL_ESTORE;
    }
    for (size_t i = 0; i < r->entries.cap; i++) {
        shoal_hslot_t *s = &r->entries.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        entry_t *e = s->value;
        if (e->deleted)
            continue;
        int rc = fn(e->key, e->type, arg);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct {
    shoal_replicator_t *r;
    shoal_replicator_stats_t *out;
} stats_arg_t;

static int stats_here(shoal_system_t *sys, void *arg)
{
    (void)sys;
    stats_arg_t *a = arg;
    *a->out = a->r->stats;
    return 0;
}

int shoal_replicator_stats(shoal_replicator_t *r, shoal_replicator_stats_t *out)
{
    if (!r || !out)
        return SHOAL_EINVAL;
    stats_arg_t a = {r, out};
    /* any thread: the counters are the node thread's, copied there */
    return shoal_system_on_thread(r->sys) ? stats_here(r->sys, &a)
                                          : shoal_system_call(r->sys, stats_here, &a);
}

/* ---------------------------------------------------------------------------------------------
 * Operations
 */
/* A key's length, or 0 when it is no key (NULL, empty, over 4096 bytes). */
static size_t key_len(const char *key)
{
    size_t n = key ? strnlen(key, 4097) : 0;
    return n <= 4096 ? n : 0;
}

static bool key_ok(const char *key)
{
    return key_len(key) != 0;
}

typedef struct {
    char *key;
    const shoal_type_t *type;
    shoal_consistency_t c;
    shoal_get_done_fn *done;
    void *arg;
} get_args_t;

static void get_now(shoal_replicator_t *r, void *arg)
{
    get_args_t *a = arg;
    if (r->destroying) {
        a->done(r, SHOAL_ESTOPPED, a->key, NULL, a->arg);
    } else if (r->load_failed) {
        r->stats.store_failures++;
        a->done(r, SHOAL_ESTORE, a->key, NULL, a->arg);
    } else if (quorum_refused(r, &a->c, "read", a->key)) {
        refuse_later(r, a->key, a->done, NULL, a->arg);
    } else {
        r->stats.gets++;
        repl_start_read(r, a->key, a->type, &a->c, a->done, a->arg);
    }
    free(a->key);
    free(a);
}

int shoal_replicator_get(shoal_replicator_t *r, const char *key, const shoal_type_t *type,
                         const shoal_consistency_t *c, shoal_get_done_fn *done, void *arg)
{
    if (!r || !key_ok(key) || !c || !done)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_replicator_get_sync");
    if (r->n_ops >= r->s.max_pending_ops)
        return SHOAL_EBUSY;
    get_args_t *a = shoal_malloc(sizeof *a);
    a->key = strdup(key);
    if (!a->key)
        abort();
    a->type = type;
    a->c = *c;
    a->done = done;
    a->arg = arg;
    when_loaded(r, get_now, a);
    return 0;
}

typedef struct {
    char *key;
    size_t klen; /* strlen(key), measured once when the call came */
    shoal_crdt_t *initial;
    const shoal_type_t *type; /* update_typed: a missing key starts as this type's empty value */
    shoal_consistency_t c;
    shoal_update_fn *modify;
    void *modify_arg;
    shoal_update_done_fn *done;
    void *arg;
    bool is_delete;
    bool borrowed; /* key belongs to the caller (run at once, not queued); initial is always
                      the operation's own */
} update_args_t;

typedef struct {
    shoal_replicator_t *r;
    char *key;
    shoal_crdt_t *delta;
    uint64_t delta_seq;
    shoal_consistency_t c;
    bool is_delete;
    shoal_update_done_fn *done;
    void *arg;
} after_store_t;

static void after_local_store(void *arg, int status)
{
    after_store_t *w = arg;
    shoal_replicator_t *r = w->r;
    entry_t *e = repl_entry(r, w->key, strlen(w->key));
    if (!e || r->destroying) {
        w->done(r, status < 0 ? SHOAL_ESTORE : SHOAL_ESTOPPED, w->key, w->arg);
    } else {
        repl_start_write(r, e, w->delta, w->delta_seq, &w->c, w->is_delete,
                         status < 0 ? SHOAL_ESTORE : 0, w->done, w->arg);
    }
    shoal_crdt_destroy(&w->delta);
    free(w->key);
    free(w);
}

/* Records a local delta (origin = this node) for propagation. */
static uint64_t record_delta(shoal_replicator_t *r, entry_t *e, shoal_crdt_t *delta)
{
    uint64_t seq = ++e->delta_seq;
    if (r->n_peers == 0) {
        /* nobody to send it to: everyone (no one) has it */
        e->base_seq = seq;
        shoal_nm_set(&e->dv, r->self, seq);
        return seq;
    }
    /* keep at most max_delta_size deltas: a peer further behind gets the full state */
    if (e->n_deltas >= r->s.max_delta_size && e->n_deltas) {
        shoal_crdt_destroy(&e->deltas[0].delta);
        memmove(&e->deltas[0], &e->deltas[1], (e->n_deltas - 1) * sizeof *e->deltas);
        e->n_deltas--;
    }
    SHOAL_GROW(e->deltas, e->cap_deltas, e->n_deltas + 1);
    e->deltas[e->n_deltas].seq = seq;
    e->deltas[e->n_deltas].delta = shoal_crdt_clone(delta);
    e->n_deltas++;
    shoal_nm_set(&e->dv, r->self, seq);
    if (!e->in_delta_set) {
        bool ins;
        shoal_hmap_upsert(&r->delta_keys, e->key, e->klen, &ins)->value = e;
        e->in_delta_set = true;
    }
    return seq;
}

static int limits_check(shoal_replicator_t *r, const char *key, const entry_t *e,
                        const shoal_crdt_t *work, uint64_t *size);

static void update_now(shoal_replicator_t *r, void *arg)
{
    update_args_t *a = arg;
    size_t klen = a->klen;
    int rc = 0;
    if (r->destroying) {
        rc = SHOAL_ESTOPPED;
        goto fail;
    }
    if (r->load_failed) {
        r->stats.store_failures++;
        rc = SHOAL_ESTORE;
        goto fail;
    }
    if (quorum_refused(r, &a->c, "write", a->key)) { /* refused before anything changes here */
        refuse_later(r, a->key, NULL, a->done, a->arg);
        goto done;
    }
    if (collected_refused(r, a->key, klen)) {
        rc = SHOAL_EDELETED;
        goto fail;
    }
    entry_t *e = repl_entry(r, a->key, klen);
    if (e && e->deleted) {
        rc = SHOAL_EDELETED;
        goto fail;
    }
    if (a->is_delete) {
        r->stats.deletes++;
        if (!e)
            e = repl_entry_create(r, a->key, klen, NULL);
        make_tombstone(r, e);
        repl_entry_touch(r, e);
        after_store_t *w = shoal_calloc(1, sizeof *w);
        *w = (after_store_t){r, strdup(a->key), NULL, 0, a->c, true, a->done, a->arg};
        repl_store_entry(r, e, after_local_store, w);
        goto done;
    }
    r->stats.updates++;
    if (e && e->type && e->type != a->type) {
        rc = SHOAL_ETYPE;
        goto fail;
    }
    /* modify a copy: a failing modify function leaves the key exactly as it was. A missing key
       starts from the caller's initial value itself (the call owns it: no copy), or from the
       type's empty value (update_typed) */
    shoal_crdt_t *work;
    if (e && e->value) {
        work = shoal_crdt_clone(e->value);
    } else if (a->initial) {
        work = a->initial;
        a->initial = NULL;
    } else {
        work = shoal_crdt_new(a->type);
    }
    shoal_crdt_reset_delta(work);
    int mrc = a->modify ? a->modify(work, a->modify_arg) : 0;
    if (mrc != 0) {
        shoal_crdt_destroy(&work);
        rc = SHOAL_EMODIFY;
        goto fail;
    }
    shoal_crdt_t *delta = shoal_crdt_take_delta(work);
    if (e) {
        /* the modify function may have merged in a copy taken before a pruning (Akka's
           ReplicatorPruningSpec "move data from removed node") */
        clean_pruned(e, work);
        clean_pruned(e, delta);
    }
    uint64_t size = UINT64_MAX; /* measured only while max-bytes is set */
    rc = limits_check(r, a->key, e, work, &size);
    if (rc != 0) {
        shoal_crdt_destroy(&work);
        shoal_crdt_destroy(&delta);
        goto fail;
    }
    if (!e)
        e = repl_entry_create(r, a->key, klen, work->type);
    if (!e->type)
        e->type = work->type;
    shoal_crdt_destroy(&e->value);
    e->value = work;
    if (size != UINT64_MAX)
        repl_entry_bytes(r, e, size);
    repl_entry_touch(r, e);
    uint64_t seq = 0;
    if (delta && r->s.delta_enabled)
        seq = record_delta(r, e, delta);
    repl_entry_changed(r, e);
    if (!e->durable || !r->s.store) {
        /* nothing to wait for: straight to the peers (no allocation on this path) */
        repl_start_write(r, e, delta, seq, &a->c, false, 0, a->done, a->arg);
        shoal_crdt_destroy(&delta);
        goto done;
    }
    after_store_t *w = shoal_calloc(1, sizeof *w);
    *w = (after_store_t){r, strdup(a->key), delta, seq, a->c, false, a->done, a->arg};
    repl_store_entry(r, e, after_local_store, w);
    goto done;
fail:
    a->done(r, rc, a->key, a->arg);
done:
    shoal_crdt_destroy(&a->initial); /* owned by the call, used or not */
    if (!a->borrowed) {
        free(a->key);
        free(a);
    }
}

/* ---------------------------------------------------------------------------------------------
 * LIMITS (ddata.h): caps on what local writes may grow the replica to
 */
int shoal_replicator_set_limits(shoal_replicator_t *r, const shoal_replicator_limits_t *l)
{
    if (!r || !l)
        return SHOAL_EINVAL;
    atomic_store(&r->max_keys, l->max_keys);
    atomic_store(&r->max_bytes, l->max_bytes);
    return 0;
}

int shoal_replicator_usage(shoal_replicator_t *r, uint64_t *keys, uint64_t *bytes)
{
    if (!r)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_system_call");
    if (keys)
        *keys = r->stats.keys - r->stats.tombstones;
    if (bytes)
        *bytes = r->bytes;
    return 0;
}

/* 0 when the write of `work` to key (entry e, NULL when new) stays within the caps, with the
   value's encoded size in *size when max_bytes is set; SHOAL_ELIMIT (counted, logged at the 1st,
   2nd, 4th... refusal) when not. */
static int limits_check(shoal_replicator_t *r, const char *key, const entry_t *e,
                        const shoal_crdt_t *work, uint64_t *size)
{
    uint64_t max_keys = atomic_load(&r->max_keys), max_bytes = atomic_load(&r->max_bytes);
    uint64_t live = r->stats.keys - r->stats.tombstones, *refused = NULL;
    char why[160] = "";
    if (max_keys && !e && live >= max_keys) {
        refused = &r->limit_refused_keys;
        snprintf(why, sizeof why, "it would be key %" PRIu64 " of at most %" PRIu64 " (max-keys)",
                 live + 1, max_keys);
    } else if (max_bytes) {
        shoal_buf_t b = {0};
        shoal_crdt_encode(work, &b);
        *size = b.len;
        shoal_buf_free(&b);
        uint64_t old = e ? e->bytes : 0;
        uint64_t after = (r->bytes >= old ? r->bytes - old : 0) + *size;
        if (after > max_bytes) {
            refused = &r->limit_refused_bytes;
            snprintf(why, sizeof why,
                     "its value of %" PRIu64 " bytes would make %" PRIu64 " of at most %" PRIu64
                     " (max-bytes)",
                     *size, after, max_bytes);
        }
    }
    if (!refused)
        return 0;
    uint64_t k = ++*refused;
    if ((k & (k - 1)) == 0)
        shoal_warning("%s: replicator '%s': write of '%.100s' refused with SHOAL_ELIMIT: %s "
                      "(%" PRIu64 " refused so far)",
                      shoal_node_id(r->self), r->role, key, why, k);
    return SHOAL_ELIMIT;
}

static void limits_label(shoal_buf_t *out, const char *role)
{
    for (const char *p = role; *p; p++) {
        if (*p == '\\' || *p == '"')
            shoal_buf_printf(out, "\\%c", *p);
        else if (*p == '\n')
            shoal_buf_printf(out, "\\n");
        else
            shoal_buf_append(out, p, 1);
    }
}

void repl_limits_metrics(shoal_replicator_t *const *reps, size_t n, shoal_buf_t *out)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"shoal_replicator_limit_refused_total", "counter",
         "Local writes refused with SHOAL_ELIMIT, by the limit they would pass (max-keys, "
         "max-bytes)."},
        {"shoal_replicator_max_keys", "gauge",
         "The replica's max-keys (0: no cap), compared with shoal_replicator_keys - "
         "shoal_replicator_tombstones."},
        {"shoal_replicator_bytes", "gauge",
         "Encoded sizes of the replica's values, as far as measured (values written here, and "
         "the others at their last digest)."},
        {"shoal_replicator_max_bytes", "gauge", "The replica's max-bytes (0: no cap)."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof *fam; f++) {
        shoal_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name,
                         fam[f].type);
        for (size_t j = 0; j < n; j++) {
            const shoal_replicator_t *r = reps[j];
            for (int l = 0; l < (f == 0 ? 2 : 1); l++) {
                shoal_buf_printf(out, "%s{role=\"", fam[f].name);
                limits_label(out, r->role);
                uint64_t v = f == 0   ? (l == 0 ? r->limit_refused_keys : r->limit_refused_bytes)
                             : f == 1 ? atomic_load(&((shoal_replicator_t *)r)->max_keys)
                             : f == 2 ? r->bytes
                                      : atomic_load(&((shoal_replicator_t *)r)->max_bytes);
                if (f == 0)
                    shoal_buf_printf(out, "\",limit=\"%s\"} %" PRIu64 "\n",
                                     l == 0 ? "keys" : "bytes", v);
                else
                    shoal_buf_printf(out, "\"} %" PRIu64 "\n", v);
            }
        }
    }
}

/* Takes ownership of initial (NULL for a delete, and for update_typed, which gives the type of a
   missing key's empty value instead): kept as the key's first value, or destroyed, on every
   path, errors included. */
static int start_update(shoal_replicator_t *r, const char *key, shoal_crdt_t *initial,
                        const shoal_type_t *type, const shoal_consistency_t *c,
                        shoal_update_fn *modify, void *modify_arg, shoal_update_done_fn *done,
                        void *arg, bool is_delete)
{
    int rc = 0;
    bool typed = !initial; /* update_typed (or a delete) */
    size_t klen = key_len(key);
    if (initial)
        type = shoal_crdt_type(initial);
    if (!r || !klen || !c || !done || (!is_delete && !type))
        rc = SHOAL_EINVAL;
    else if (!is_delete && (type->tag == SHOAL_ORSET_DELTA || type->tag == SHOAL_ORMAP_DELTA ||
                            (!initial && !type->create)))
        rc = SHOAL_ETYPE; /* a delta is no key's value; a type without an empty value needs one */
    else if (!shoal_system_on_thread(r->sys))
        rc = is_delete ? shoal_wrong_thread("shoal_replicator_delete", "shoal_replicator_delete_sync")
             : typed   ? shoal_wrong_thread("shoal_replicator_update_typed",
                                            "shoal_replicator_update_typed_sync")
                       : shoal_wrong_thread("shoal_replicator_update", "shoal_replicator_update_sync");
    else if (r->n_ops >= r->s.max_pending_ops)
        rc = SHOAL_EBUSY;
    if (rc < 0) {
        shoal_crdt_destroy(&initial);
        return rc;
    }
    if (!r->loading) {
        /* the common case runs now, on the caller's key: no copies */
        update_args_t now = {(char *)key, klen, initial,   type, *c,  modify, modify_arg,
                             done,        arg,  is_delete, true};
        update_now(r, &now);
        return 0;
    }
    update_args_t *a = shoal_calloc(1, sizeof *a);
    a->key = strdup(key);
    if (!a->key)
        abort();
    a->klen = klen;
    a->initial = initial;
    a->type = type;
    a->c = *c;
    a->modify = modify;
    a->modify_arg = modify_arg;
    a->done = done;
    a->arg = arg;
    a->is_delete = is_delete;
    when_loaded(r, update_now, a);
    return 0;
}

int shoal_replicator_update(shoal_replicator_t *r, const char *key, shoal_crdt_t *initial,
                            const shoal_consistency_t *c, shoal_update_fn *modify, void *modify_arg,
                            shoal_update_done_fn *done, void *arg)
{
    return start_update(r, key, initial, NULL, c, modify, modify_arg, done, arg, false);
}

/* update with the caller's pointer taken: NULL after the call, so a caller that destroys it
   afterwards (0.1.0's contract) destroys nothing */
int shoal_replicator_update_take(shoal_replicator_t *r, const char *key, shoal_crdt_t **initial_p,
                                 const shoal_consistency_t *c, shoal_update_fn *modify,
                                 void *modify_arg, shoal_update_done_fn *done, void *arg)
{
    shoal_crdt_t *initial = initial_p ? *initial_p : NULL;
    if (initial_p)
        *initial_p = NULL;
    return start_update(r, key, initial, NULL, c, modify, modify_arg, done, arg, false);
}

int shoal_replicator_update_typed(shoal_replicator_t *r, const char *key, const shoal_type_t *type,
                                  const shoal_consistency_t *c, shoal_update_fn *modify,
                                  void *modify_arg, shoal_update_done_fn *done, void *arg)
{
    return start_update(r, key, NULL, type, c, modify, modify_arg, done, arg, false);
}

int shoal_replicator_delete(shoal_replicator_t *r, const char *key, const shoal_consistency_t *c,
                            shoal_update_done_fn *done, void *arg)
{
    return start_update(r, key, NULL, NULL, c, NULL, NULL, done, arg, true);
}

/* ---------------------------------------------------------------------------------------------
 * The synchronous facade. The waiter is shared by the caller and the completion and freed by
 * whichever lets go last, so a caller that gives up (node stopping) leaves nothing dangling.
 */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool done;
    int status;
    shoal_crdt_t *value;
    /* the request */
    shoal_replicator_t *r;
    const char *key;
    const shoal_type_t *type;
    shoal_crdt_t *initial; /* the caller's, handed to update (which owns it from then on) */
    shoal_consistency_t c;
    shoal_update_fn *modify;
    void *modify_arg;
    int kind; /* 0 get, 1 update, 2 delete */
} waiter_t;

static void waiter_release(waiter_t *w)
{
    pthread_mutex_lock(&w->mu);
    bool last = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (last) {
        shoal_crdt_destroy(&w->value);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
    }
}

static void waiter_finish(waiter_t *w, int status, const shoal_crdt_t *value)
{
    pthread_mutex_lock(&w->mu);
    if (!w->done) {
        w->done = true;
        w->status = status;
        if (value)
            w->value = shoal_crdt_clone(value);
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    waiter_release(w);
}

static void sync_get_done(shoal_replicator_t *r, int status, const char *key,
                          const shoal_crdt_t *value, void *arg)
{
    (void)r;
    (void)key;
    waiter_finish(arg, status, status == 0 ? value : NULL);
}

static void sync_update_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    waiter_finish(arg, status, NULL);
}

static int sync_start(shoal_system_t *sys, void *arg)
{
    (void)sys;
    waiter_t *w = arg;
    int rc;
    if (w->kind == 0)
        rc = shoal_replicator_get(w->r, w->key, w->type, &w->c, sync_get_done, w);
    else if (w->kind == 1) {
        shoal_crdt_t *initial = w->initial;
        w->initial = NULL; /* update owns it now, whatever it returns */
        rc = initial ? shoal_replicator_update_take(w->r, w->key, &initial, &w->c, w->modify,
                                                    w->modify_arg, sync_update_done, w)
                     : shoal_replicator_update_typed(w->r, w->key, w->type, &w->c, w->modify,
                                                     w->modify_arg, sync_update_done, w);
    } else
        rc = shoal_replicator_delete(w->r, w->key, &w->c, sync_update_done, w);
    if (rc < 0)
        waiter_finish(w, rc, NULL);
    return 0;
}

/* Takes ownership of req->initial (an update's), on every path. */
static int sync_run(const waiter_t *req, shoal_crdt_t **out)
{
    if (shoal_system_on_thread(req->r->sys)) {
        shoal_crdt_t *initial = req->initial;
        shoal_crdt_destroy(&initial);
        return SHOAL_EDEADLK;
    }
    waiter_t *w = shoal_malloc(sizeof *w);
    *w = *req;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->refs = 2; /* the caller, and the completion */
    w->done = false;
    w->value = NULL;
    int rc = shoal_system_call(w->r->sys, sync_start, w);
    if (rc < 0) {
        /* sync_start never ran: the completion will not come, nor did update take initial */
        shoal_crdt_destroy(&w->initial);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return rc;
    }
    /* the operation's own timeout bounds the wait; a margin covers the node's scheduling */
    uint32_t wait_ms = (w->c.level == SHOAL_LOCAL ? 0 : w->c.timeout_ms) + 30000;
    struct timespec until = shoal_deadline_in(wait_ms);
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0)
            break;
    int status = w->done ? w->status : SHOAL_ETIMEOUT;
    if (w->done && out) {
        *out = w->value;
        w->value = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    waiter_release(w);
    return status;
}

int shoal_replicator_get_sync(shoal_replicator_t *r, const char *key, const shoal_type_t *type,
                              const shoal_consistency_t *c, shoal_crdt_t **out)
{
    if (out)
        *out = NULL;
    if (!r || !c)
        return SHOAL_EINVAL;
    waiter_t w = {.r = r, .key = key, .type = type, .c = *c, .kind = 0};
    return sync_run(&w, out);
}

int shoal_replicator_update_sync(shoal_replicator_t *r, const char *key, shoal_crdt_t *initial,
                                 const shoal_consistency_t *c, shoal_update_fn *modify,
                                 void *modify_arg)
{
    /* the same call: both take `initial`; only the caller's pointer is left alone here */
    return shoal_replicator_update_take_sync(r, key, &initial, c, modify, modify_arg);
}

int shoal_replicator_update_take_sync(shoal_replicator_t *r, const char *key,
                                      shoal_crdt_t **initial_p, const shoal_consistency_t *c,
                                      shoal_update_fn *modify, void *modify_arg)
{
    shoal_crdt_t *initial = initial_p ? *initial_p : NULL;
    if (initial_p)
        *initial_p = NULL;
    if (!r || !c) {
        shoal_crdt_destroy(&initial);
        return SHOAL_EINVAL;
    }
    waiter_t w = {.r = r, .key = key, .initial = initial, .c = *c, .modify = modify,
                  .modify_arg = modify_arg, .kind = 1};
    return sync_run(&w, NULL);
}

int shoal_replicator_update_typed_sync(shoal_replicator_t *r, const char *key,
                                       const shoal_type_t *type, const shoal_consistency_t *c,
                                       shoal_update_fn *modify, void *modify_arg)
{
    if (!r || !c || !type)
        return SHOAL_EINVAL;
    waiter_t w = {.r = r, .key = key, .type = type, .c = *c, .modify = modify,
                  .modify_arg = modify_arg, .kind = 1};
    return sync_run(&w, NULL);
}

int shoal_replicator_delete_sync(shoal_replicator_t *r, const char *key,
                                 const shoal_consistency_t *c)
{
    if (!r || !c)
        return SHOAL_EINVAL;
    waiter_t w = {.r = r, .key = key, .c = *c, .kind = 2};
    return sync_run(&w, NULL);
}

/* The other _sync twins: each runs its node-thread call inside shoal_system_call (the caller
   waits; SHOAL_EDEADLK on the node thread itself). */
typedef struct {
    shoal_replicator_t *r;
    const shoal_node_t *node;
    bool counted;
    uint64_t age;
    const char *key;
    shoal_changed_fn *fn;
    void *arg;
    int id;
    /* keys_sync: what the node thread collected */
    char **keys;
    const shoal_type_t **types;
    size_t n, cap;
} twin_t;

static int twin_add_peer(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_replicator_add_peer(t->r, t->node, t->counted, t->age);
}

int shoal_replicator_add_peer_sync(shoal_replicator_t *r, const shoal_node_t *node, bool counted,
                                   uint64_t age)
{
    if (!r || !node)
        return SHOAL_EINVAL;
    twin_t t = {.r = r, .node = node, .counted = counted, .age = age};
    return shoal_system_call(r->sys, twin_add_peer, &t);
}

static int twin_remove_peer(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_replicator_remove_peer(t->r, t->node);
}

int shoal_replicator_remove_peer_sync(shoal_replicator_t *r, const shoal_node_t *node)
{
    if (!r || !node)
        return SHOAL_EINVAL;
    twin_t t = {.r = r, .node = node};
    return shoal_system_call(r->sys, twin_remove_peer, &t);
}

static int twin_node_removed(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_replicator_node_removed(t->r, t->node);
}

int shoal_replicator_node_removed_sync(shoal_replicator_t *r, const shoal_node_t *node)
{
    if (!r || !node)
        return SHOAL_EINVAL;
    twin_t t = {.r = r, .node = node};
    return shoal_system_call(r->sys, twin_node_removed, &t);
}

static int twin_subscribe(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_replicator_subscribe(t->r, t->key, t->fn, t->arg);
}

int shoal_replicator_subscribe_sync(shoal_replicator_t *r, const char *key_or_prefix,
                                    shoal_changed_fn *fn, void *arg)
{
    if (!r || !key_or_prefix || !fn)
        return SHOAL_EINVAL;
    twin_t t = {.r = r, .key = key_or_prefix, .fn = fn, .arg = arg};
    return shoal_system_call(r->sys, twin_subscribe, &t);
}

static int twin_unsubscribe(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_replicator_unsubscribe(t->r, t->id);
}

int shoal_replicator_unsubscribe_sync(shoal_replicator_t *r, int id)
{
    if (!r)
        return SHOAL_EINVAL;
    twin_t t = {.r = r, .id = id};
    return shoal_system_call(r->sys, twin_unsubscribe, &t);
}

static int twin_flush(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_flush(((twin_t *)arg)->r);
    return 0;
}

int shoal_replicator_flush_sync(shoal_replicator_t *r)
{
    if (!r)
        return SHOAL_EINVAL;
    twin_t t = {.r = r};
    return shoal_system_call(r->sys, twin_flush, &t);
}

static int twin_replica_count(shoal_system_t *sys, void *arg)
{
    (void)sys;
    size_t n = shoal_replicator_replica_count(((twin_t *)arg)->r);
    return n > INT_MAX ? INT_MAX : (int)n;
}

int shoal_replicator_replica_count_sync(shoal_replicator_t *r)
{
    if (!r)
        return SHOAL_EINVAL;
    twin_t t = {.r = r};
    return shoal_system_call(r->sys, twin_replica_count, &t);
}

static int collect_key(const char *key, const shoal_type_t *type, void *arg)
{
    twin_t *t = arg;
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->keys = shoal_realloc(t->keys, t->cap * sizeof *t->keys);
        t->types = shoal_realloc(t->types, t->cap * sizeof *t->types);
    }
    t->keys[t->n] = strdup(key);
    if (!t->keys[t->n])
        abort();
    t->types[t->n++] = type;
    return 0;
}

static int twin_keys(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_replicator_keys(t->r, collect_key, t);
}

int shoal_replicator_keys_sync(shoal_replicator_t *r, shoal_key_fn *fn, void *arg)
{
    if (!r || !fn)
        return SHOAL_EINVAL;
    twin_t t = {.r = r};
    /* copied on the node thread, handed to fn here: fn may take its time, or call _sync
       functions, without holding up the node */
    int rc = shoal_system_call(r->sys, twin_keys, &t);
    for (size_t i = 0; i < t.n; i++) {
        if (rc == 0)
            rc = fn(t.keys[i], t.types[i], arg);
        free(t.keys[i]);
    }
    free(t.keys);
    free(t.types);
    return rc;
}

int64_t repl_wall_ms(void)
{
    return wall_ms();
}
