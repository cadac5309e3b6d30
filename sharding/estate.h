/*  estate.h — the EntityStateMap replicated type (estate.c), internal to sharding/.

    One value per shard: a fence (max-register of owner epochs) and entries key -> (epoch, seq,
    deleted, deleted_unix_ms, data); per key the larger (epoch, seq) wins a merge. Registered as
    the custom type ESTATE_TAG (ddata.h, CUSTOM TYPES); every mutation below also goes into the
    pending delta (shoal_crdt_delta / shoal_crdt_take_delta), itself an EntityStateMap.
*/
#ifndef SHOAL_ESTATE_H
#define SHOAL_ESTATE_H
#include "ddata.h"

#define ESTATE_TAG      101
#define ESTATE_KEY_MAX  300
#define ESTATE_DATA_MAX (16u << 20)

/* One entry; data points into the map (valid until the map changes), NULL when len is 0. */
typedef struct {
    uint64_t epoch, seq;
    bool deleted;
    int64_t deleted_unix_ms;
    const uint8_t *data;
    size_t len;
} estate_entry_t;

extern const shoal_type_t estate_type;
/* shoal_type_register; idempotent. */
int estate_register(void);
shoal_crdt_t *estate_new(void);
/* 0 for anything that is not an EntityStateMap. */
uint64_t estate_fence(const shoal_crdt_t *m);
/* fence = max(fence, epoch); records delta. */
int estate_raise_fence(shoal_crdt_t *m, uint64_t epoch);
/* Writes key -> (epoch, seq, data) if (epoch, seq) is larger than what the key holds, else
   SHOAL_ESTALE. Key 1..ESTATE_KEY_MAX bytes (SHOAL_EINVAL), data at most ESTATE_DATA_MAX
   (SHOAL_ETOOBIG). Records delta. */
int estate_put(shoal_crdt_t *m, const void *key, size_t klen, uint64_t epoch, uint64_t seq,
               const void *data, size_t len);
/* A tombstone at (epoch, seq), same rules as estate_put. */
int estate_delete(shoal_crdt_t *m, const void *key, size_t klen, uint64_t epoch, uint64_t seq,
                  int64_t now_unix_ms);
/* 0 and *out (pointers into m, valid until m changes) or SHOAL_ENOTFOUND. Deleted entries are
   found (out->deleted). */
int estate_get(const shoal_crdt_t *m, const void *key, size_t klen, estate_entry_t *out);
/* In key order (memcmp, the shorter first); fn returns nonzero to stop (that value is returned).
   fn must not change m. */
int estate_foreach(const shoal_crdt_t *m,
                   int (*fn)(const void *key, size_t klen, const estate_entry_t *e, void *arg),
                   void *arg);
/* Keys starting with prefix only (for reminders: prefix "\x01<entity id>\x00"). */
int estate_foreach_prefix(const shoal_crdt_t *m, const void *prefix, size_t plen,
                          int (*fn)(const void *key, size_t klen, const estate_entry_t *e,
                                    void *arg),
                          void *arg);
/* Entries, deleted ones included. */
size_t estate_count(const shoal_crdt_t *m);
/* The new owner of a shard (epoch E) adopts everything it read: every entry older than E is
   re-written as (E, 0) keeping its data/deleted flag, so any write an older owner makes later
   loses to it; such deleted entries whose deleted_unix_ms < drop_deleted_before_unix_ms are
   dropped instead (tombstone GC, local: replicas that still hold one may bring it back).
   Also raises the fence to E. Records everything into the delta. Returns the number of
   entries re-stamped. */
size_t estate_restamp(shoal_crdt_t *m, uint64_t epoch, int64_t drop_deleted_before_unix_ms);
/* Would merging `incoming` into `current` (current may be NULL) accept all of incoming's entries
   as a write of the current owner? 0, or SHOAL_ESTALE when some entry of incoming has epoch <
   current's fence and is not one current holds already, identical (the writer is a stale
   owner). The type's admit hook (ddata.h). */
int estate_admit(const shoal_crdt_t *current, const shoal_crdt_t *incoming);
/* Approximate memory held (close to the serialized size), for stats. */
size_t estate_bytes(const shoal_crdt_t *m);
#endif
