/*  allocation.h — private to sharding/: the shard allocation strategies, as pure functions of
    the regions and the shards they host now. The coordinator calls them on its node thread; they
    keep no state, allocate only scratch memory, and never modify their inputs (except
    alloc_sort_regions, which sorts in place).

    WHICH REGIONS COUNT. A region is ELIGIBLE when it has a node and is not leaving. No strategy
    allocates to a leaving region while an eligible one exists, and no rebalance moves the shards
    of a leaving region or moves a shard to one: graceful shutdown hands those off by itself, and
    a rebalance racing it would only move the same shards twice.

    PREFERENCE ORDER (Akka's ShardSuitabilityOrdering, plus a tie-break so the order is total):
    not leaving, then the newest app version, then the fewest shards, then the lower node id. The
    least-shards strategy allocates to the first region in this order, so during a rolling update
    new shards go to the new version's members even when they already hold more shards (they would
    only have to move again when the old members leave), as in Akka.

    A GOOD TIME TO REBALANCE (least shards and consistent hashing, as Akka's
    isAGoodTimeToRebalance): every region runs the same app version. During a rolling update
    nothing is rebalanced; the leaving members' shards move by handoff. (Akka also waits while a
    member is joining or unreachable: that is the coordinator's to check, it is not in the input.)

    LEAST SHARDS, rebalance. With rebalance_absolute_limit > 0 (Akka 2.6.10's algorithm): nothing
    while a rebalance is in progress; over the eligible regions, optimal = ceil(total / regions)
    and limit = min(absolute, max(1, round(relative * total))). Phase 1 takes (count - optimal)
    shards from every region above optimal, most loaded first, up to limit. When phase 1 finds
    nothing, phase 2 looks for regions two or more below optimal (optimal is rounded up, so one
    below is as good as it gets); if there are any, it takes one shard from each region holding
    exactly optimal, up to min(that shortfall, limit). Applied round after round (each moved shard
    going to the least-loaded region) this ends with max - min <= 1. With absolute limit 0 (the
    older, deprecated algorithm): while fewer than max_simultaneous_rebalance shards are moving,
    diff = (most shards not in progress) - (fewest shards); when diff > threshold, take
    min(diff - threshold, threshold, max_simultaneous - in progress) shards from the most loaded.
    Shards are always picked in shard id order, so a round is a function of its input.
    (Akka's relative limit truncates relative * total; Shoal rounds it.)

    CONSISTENT HASHING is rendezvous (highest random weight) hashing: a shard belongs to the
    eligible region with the highest alloc_hrw_score(shard, node), the XXH3_64 (seed 0) of the
    shard id's bytes, one NUL byte, then the member's address "host:port" (the node id without
    its uid: a restarted member gets its shards back). Adding a region takes about 1/n of the
    shards, all to the new region; removing one moves only its own shards. Rebalance moves shards
    not on their region, up to hashing_rebalance_limit (0 = no limit), skipping shards in
    progress (other shards may move meanwhile: the moves are independent).

    EXTERNAL: the location written for a shard (host:port, asked through ctx->external) wins when
    it names an eligible region; otherwise the requester, when eligible; otherwise least shards.
    Rebalance moves shards whose location names another eligible region, skipping shards in
    progress. No version check: the locations are an operator's explicit wish.

    CUSTOM: the callbacks of shoal_alloc_custom_t, with their results checked (see
    alloc_allocate and alloc_rebalance).

    A region table may list several incarnations of one address (a restarted member before the
    old one is removed): among equal candidates the preference order decides.
*/
#ifndef SHOAL_SHARDING_ALLOCATION_H
#define SHOAL_SHARDING_ALLOCATION_H

#include "sharding.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* External allocation locations: shard -> "host:port" of the member it should live on, or NULL. */
typedef const char *(alloc_external_fn)(const char *shard, void *arg);

typedef struct {
    const shoal_alloc_settings_t *s;
    alloc_external_fn *external; /* for SHOAL_ALLOC_EXTERNAL; NULL = no locations */
    void *external_arg;
} alloc_ctx_t;

/* Sorts regions into preference order in place (see above). NULL-safe. */
void alloc_sort_regions(shoal_alloc_region_t *regions, size_t n);

/* Index (< n) of the region for a new shard, or -1 when there is no region with a node (n == 0).
   requester: index of the asking region, or -1 (a proxy asked; out-of-range values count as -1).
   Never picks a leaving region while a non-leaving one exists. A custom strategy's answer that
   is out of range, has no node, or is a leaving region while an eligible one exists is replaced
   by the least-shards choice. */
int alloc_allocate(const alloc_ctx_t *ctx, const char *shard, int requester,
                   const shoal_alloc_region_t *regions, size_t n);

/* Shards to move this round, written to out (pointers borrowed from the regions' shard lists),
   at most cap; returns how many. Every result is hosted by a region, distinct and not in
   `in_progress`. A custom strategy's answer is filtered to that (unknown, repeated or in-progress
   ids and NULLs are dropped, in its order otherwise). */
size_t alloc_rebalance(const alloc_ctx_t *ctx, const shoal_alloc_region_t *regions, size_t n,
                       const char *const *in_progress, size_t n_in_progress, const char **out,
                       size_t cap);

/* For consistent hashing and external: the region a shard belongs to (index), or -1 (no eligible
   region; external: no location, or it names no eligible region; other strategies: always). */
int alloc_preferred(const alloc_ctx_t *ctx, const char *shard, const shoal_alloc_region_t *regions,
                    size_t n);

/* Akka-style version comparison: <0, 0, >0. Dotted numbers ("1.10.0" > "1.9.3", missing parts
   are 0, so "1.2" == "1.2.0"), then sbt-dynver's commit count ("1.0.0+3-abcdef" > "1.0.0"),
   then the qualifier: a version without one is newer ("1.0.0" > "1.0.0-RC1"), two qualifiers
   compare as bytes. NULL and "" are "0.0.0". Never fails: text that is not a number is read as
   a qualifier. */
int alloc_version_cmp(const char *a, const char *b);

/* The rendezvous score of a shard on a member (see CONSISTENT HASHING). */
uint64_t alloc_hrw_score(const char *shard, const shoal_node_t *node);

/* Length of the member address "host:port" that starts the node id (0 for NULL). */
size_t alloc_address_len(const shoal_node_t *node);
/* True when address ("host:port") is the node's member address. */
bool alloc_address_is(const shoal_node_t *node, const char *address);

/* The least-shards choice (the first region in preference order), or -1 without regions. */
int alloc_least_shards(const shoal_alloc_region_t *regions, size_t n);

#endif
