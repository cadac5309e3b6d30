/*  passivation.h — private to sharding/: which active entities of a shard to passivate, as a pure
    data structure. One passivator per active shard; the region tells it every message delivered
    through sharding (passivator_access), every entity that stopped for another reason
    (passivator_remove), its idle ticks (passivator_idle) and its share of the region's active
    entity limit (passivator_set_limit: the region's limit split evenly among its active shards).
    The passivator answers with the entities to passivate, through a callback. It keeps no clock,
    takes no lock and sends nothing: the region owns all of that, on its node thread.

    WHAT IS TRACKED. Every entity accessed since it was created or last forgotten, by id (a
    NUL-terminated string, copied). An evicted entity is forgotten before its callback runs: if it
    gets a message again it is a new entity (a miss). The accessed entity is never evicted by its
    own access; when the limit is 0 nothing is evicted for the limit (Shoal's "none"; the region
    must therefore give a shard at least 1 when the region has a limit, see passivator_set_limit).

    POLICIES (shoal_passivation_policy_t, semantics of Akka's replacement policies):
      NONE     tracks, never evicts (explicit passivation only; the idle timeout is ignored).
      IDLE     no limit; only the idle timeout evicts.
      LRU      plain (slru_levels <= 1): evicts the least recently accessed.
               Segmented (slru_levels 2..4): level 0 is probation; a repeat access promotes an
               entity one level up (the top level just refreshes its recency); a level over its
               size demotes its least recent entity to the most recent end of the level below.
               Evictions take the least recent entity of level 0, after demoting whatever the
               upper levels hold beyond their sizes. Level sizes: floor(proportion * limit) for
               the upper levels, the rest (at least 1) for level 0, as Akka's
               SegmentedLeastRecentlyUsed; proportions are normalized, all zeros = equal.
      MRU      evicts the most recently accessed entity other than the one just accessed (on a
               limit decrease: the most recent ones).
      LFU      evicts the least frequently accessed; ties go to the least recently accessed.
               With lfu_dynamic_aging, an eviction sets the age to the evicted entity's priority,
               and an entity's priority is its access count plus the age at its last access, so
               entities that were popular long ago become evictable (GDSF-style aging, as Akka).
               Frequency buckets: O(1) per access without aging; with aging an access walks past
               the distinct priorities it overtakes (usually none or one).
      TINYLFU  W-TinyLFU composite (Akka's default-strategy, Caffeine's design): a new entity
               enters an LRU admission window of floor(window_proportion * limit) entities (at
               least 1). The window's least recent entity, when pushed out, is a candidate for
               the main area, a segmented LRU (slru_levels/proportions when slru_levels >= 2,
               else 2 levels 20/80): while the main area has room it is admitted; when full it
               is admitted only if its estimated access frequency is strictly higher than that
               of the main area's victim (the least recent entity of its lowest non-empty
               level), and whichever loses is evicted. Frequencies come from a count-min sketch
               updated on every access: 4 rows of 4 * pow2(limit) 4-bit counters, every
               counter halved after 10 * limit increments so old popularity fades
               (Akka's frequency-sketch defaults: depth 4, counter-bits 4, width-multiplier 4,
               reset-multiplier 10). With hill_climbing, every adjust_multiplier * limit
               accesses the hit rate of the period is compared with the previous one: the
               window proportion moves by the step (first towards a smaller window) when the hit
               rate did not fall, the other way when it fell; the step then decays by
               step_decay, or restarts at initial_step when the hit rate changed by
               restart_threshold or more. The proportion stays within [window_min_proportion,
               window_max_proportion]. Resizing moves entities between window and main area
               (the window's least recent to the main area, or the main area's victims to the
               window), it never evicts.

    IDLE TIMEOUT. With idle_timeout_ms > 0 (any policy but NONE), passivator_idle evicts every
    entity whose last access is before now_ms - idle_timeout_ms. Accesses are kept in time order
    in one list, so this costs O(evicted + 1). Times should come from a monotonic clock; an
    access with a time before the previous access is recorded at the previous access's time (a
    clock going back never makes an entity look idle early).

    COST. O(1) per access (hash table with chaining + intrusive doubly-linked lists; the
    composite adds 4 sketch counters per access, 8 more per admission contest). No allocation for
    an access to an active entity, except with LFU, which may allocate a frequency bucket when no
    freed one is pooled (buckets are pooled, so in steady state it does not). A new entity costs
    one allocation (40 bytes + the id for NONE/IDLE/LRU/MRU, 72 + the id for the others); the
    hash table doubles as it grows and never shrinks.

    CALLBACKS. passivate_fn runs after the call has finished changing the passivator, once per
    evicted entity, in eviction order; entity_id is valid only during the callback. The callback
    may call any passivator function on this passivator except passivator_destroy (with its own
    callback for any evictions that causes).

    BAD INPUT. A NULL passivator or id is ignored (false / nothing), a NULL id is counted in
    bad_input; a NULL callback drops the notifications but still evicts. Settings are sanitized in
    passivator_new (out-of-range values fall back to Akka's defaults, see passivation.c);
    an unknown policy makes passivator_new return NULL.
*/
#ifndef SHOAL_SHARDING_PASSIVATION_H
#define SHOAL_SHARDING_PASSIVATION_H

#include "sharding.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct passivator passivator_t;

/* Called for each entity the policy evicts (the region then passivates it). */
typedef void(passivate_fn)(const char *entity_id, void *arg);

/* limit = active entities allowed (0 = none: only idle timeout, or nothing). s is copied
   (s->active_entity_limit is not read: the region passes the shard's share as limit). NULL for
   a NULL s or an unknown policy. */
passivator_t *passivator_new(const shoal_passivation_settings_t *s, size_t limit);
/* NULL-safe; nulls *p. Calls no callback. */
void passivator_destroy(passivator_t **p);

/* Run-time limit change (Akka: split evenly among a region's active shards); evicts down to it.
   0 = no limit (nothing evicted); a region with a limit smaller than its number of active shards
   should give each shard 1 rather than 0. */
void passivator_set_limit(passivator_t *p, size_t limit, passivate_fn *fn, void *arg);

/* An entity got a message through sharding at time now_ms (creates it if new); evicts as needed
   (never the one accessed). Returns true when it was already active (a "hit"). */
bool passivator_access(passivator_t *p, const char *entity_id, int64_t now_ms, passivate_fn *fn,
                       void *arg);

/* The entity stopped for another reason: forget it (no callback). Unknown ids are ignored. */
void passivator_remove(passivator_t *p, const char *entity_id);

/* Idle timeout: evicts every entity not accessed since now_ms - idle_timeout_ms. */
void passivator_idle(passivator_t *p, int64_t now_ms, passivate_fn *fn, void *arg);

/* Active entities tracked. */
size_t passivator_size(const passivator_t *p);

/* True when the entity is tracked as active. */
bool passivator_contains(const passivator_t *p, const char *entity_id);

typedef struct {
    uint64_t hits;         /* accesses to an active entity */
    uint64_t misses;       /* accesses that created one */
    uint64_t evicted;      /* passivated for the limit (includes rejected) */
    uint64_t idle_evicted; /* passivated by the idle timeout */
    uint64_t rejected;     /* TINYLFU: window candidates the frequency filter kept out */
    uint64_t bad_input;    /* calls with a NULL entity id */
    size_t limit;          /* current limit, 0 = none */
    size_t window_limit;   /* TINYLFU: current admission window size */
    size_t window_size;    /* TINYLFU: entities in the window now */
} passivator_stats_t;

/* Counters since passivator_new (all zero for a NULL p). */
void passivator_stats(const passivator_t *p, passivator_stats_t *out);

/* For tests: walks every structure and checks it against the others (sizes, links, levels,
   buckets in priority order, times in order, hash table). 0 when consistent, else a negative
   number naming the first broken check. O(n). */
int passivator_check(const passivator_t *p);

/* For tests: the estimated access frequency the TINYLFU admission filter sees for an id (0 for
   other policies). */
unsigned passivator_frequency(const passivator_t *p, const char *entity_id);

#endif
