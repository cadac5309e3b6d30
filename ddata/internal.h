/*  internal.h — private to ddata/: the type vtable, allocation wrappers, and the small
    containers the types share (sorted node maps, a byte-string hash map, canonical encoding
    helpers). Nothing here is part of the public API.
*/
#ifndef SHOAL_DDATA_INTERNAL_H
#define SHOAL_DDATA_INTERNAL_H

#include "ddata.h"
#include "ddata.pb-c.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Allocation: failure aborts in one place (STYLE: return codes are for real failures).
 */
void *shoal_malloc(size_t n);
void *shoal_calloc(size_t count, size_t size);
void *shoal_realloc(void *p, size_t n);
void *shoal_memdup(const void *p, size_t n);
/* Grows *arr (of *cap elements of size `size`) to hold at least `need`. */
void shoal_grow(void **arr, size_t *cap, size_t need, size_t size);
#define SHOAL_GROW(arr, cap, need) shoal_grow((void **)&(arr), &(cap), (need), sizeof *(arr))

/* The type vtable (struct shoal_type) is public: ddata.h, CUSTOM TYPES. */

extern const shoal_type_t shoal_type_version_vector;
extern const shoal_type_t shoal_type_gcounter;
extern const shoal_type_t shoal_type_pncounter;
extern const shoal_type_t shoal_type_gset;
extern const shoal_type_t shoal_type_orset;
extern const shoal_type_t shoal_type_orset_delta;
extern const shoal_type_t shoal_type_ormap;
extern const shoal_type_t shoal_type_ormultimap;
extern const shoal_type_t shoal_type_lwwmap;
extern const shoal_type_t shoal_type_pncountermap;
extern const shoal_type_t shoal_type_ormap_delta;
extern const shoal_type_t shoal_type_lwwregister;
extern const shoal_type_t shoal_type_flag;

/* True when id[0..len) is a well-formed node id, without interning it (network input that
   may be refused should not grow the process-wide table). */
bool shoal_node_id_valid(const char *id, size_t len);

/* The node's dot floor: the highest dot counter this process has issued for it or decoded for
   it (node_id.c). Raised, never lowered, by shoal_node_dot_witness. Thread-safe. */
uint64_t shoal_node_dot_floor(const shoal_node_t *node);
void shoal_node_dot_witness(const shoal_node_t *node, uint64_t counter);

/* ORSet values of maps that drop a removed key's value (orset.c, "Re-created sets"): a value the
   map creates, or decodes, is marked so that its next local add draws a dot above the adding
   node's dot floor and claims every dot of that node below it. Pending until that add. */
void shoal_orset_mark_recreated(shoal_crdt_t *set);
bool shoal_orset_recreated(const shoal_crdt_t *set);

/* The registered type whose delta type is `delta`, when `delta` is a type of its own (not a
   value of the state type, as GCounter's deltas are) and exactly one type has it (the ORMap
   types share theirs: NULL). *is_delta (may be NULL) says whether any type has it as its delta
   type. The replicator uses it to apply a delta to a key it does not hold yet. Thread-safe. */
const shoal_type_t *shoal_type_of_delta(const shoal_type_t *delta, bool *is_delta);

/* True when v is non-NULL and of type t. */
static inline bool shoal_is(const shoal_crdt_t *v, const shoal_type_t *t)
{
    return v && v->type == t;
}

/* Decodes an envelope at a nesting depth (maps decode their values with depth + 1). */
/* Pruning's building blocks for values that nest others (maps): the highest counters of two
   nodes anywhere in v, and one plan applied as its owner or as another replica (a plan with span
   0 folds, as owner, or drops, otherwise). */
void shoal_crdt_prune_bounds(const shoal_crdt_t *v, const shoal_node_t *removed,
                             const shoal_node_t *into, uint64_t *into_max, uint64_t *removed_max);
int shoal_crdt_prune_with(shoal_crdt_t *v, const shoal_node_t *removed,
                          const shoal_prune_plan_t *plan, bool owner);
int shoal_crdt_decode_depth(const void *data, size_t len, int depth, shoal_crdt_t **out);
/* Encodes a value into a protobuf-c Value envelope whose payload points into `scratch`
   (which must outlive the envelope). Used by the maps for their nested values. */
int shoal_crdt_encode_envelope(const shoal_crdt_t *self, shoal_buf_t *scratch,
                               Shoal__Ddata__Value *env);

/* Packs any protobuf-c message onto the end of out. */
void shoal_pb_pack(const ProtobufCMessage *msg, shoal_buf_t *out);

/* Protobuf varints (base 128, least significant group first), for the encoders that write their
   wire format directly: shoal_varint_put writes v at p (at most 10 bytes) and returns how many. */
static inline size_t shoal_varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline size_t shoal_varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static inline void shoal_buf_append_varint(shoal_buf_t *out, uint64_t v)
{
    uint8_t b[10];
    shoal_buf_append(out, b, shoal_varint_put(b, v));
}

/* ---------------------------------------------------------------------------------------------
 * Canonical order of byte strings: memcmp on the common prefix, then the shorter first.
 */
static inline int shoal_bytes_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

uint64_t shoal_hash_bytes(const void *data, size_t len);

/* An endpoint "tcp://NAME:PORT" as "tcp://ADDRESS:PORT" in out: 1 resolved; 0 nothing to resolve
   (an address literal, an ipc:// path, a bracketed or malformed one); -1 the name does not
   resolve (or out is too small). */
int shoal_endpoint_resolve_host(const char *endpoint, char *out, size_t cap);

/* ---------------------------------------------------------------------------------------------
 * Sorted node map: node -> uint64, ascending by node id. The state of VersionVector and
 * GCounter, and the compact part of ORSet's causal context. Clusters have tens to hundreds of
 * nodes, so a sorted array with a pointer scan beats any tree here.
 */
typedef struct {
    const shoal_node_t *node;
    uint64_t value;
} shoal_nm_entry_t;

typedef struct {
    shoal_nm_entry_t *e;
    size_t n, cap;
} shoal_nodemap_t;

void shoal_nm_free(shoal_nodemap_t *m);
void shoal_nm_copy(shoal_nodemap_t *dst, const shoal_nodemap_t *src);
/* 0 when absent. */
uint64_t shoal_nm_get(const shoal_nodemap_t *m, const shoal_node_t *node);
/* Index of node or -1. */
ptrdiff_t shoal_nm_find(const shoal_nodemap_t *m, const shoal_node_t *node);
/* Sets node's value (value 0 removes the entry). */
void shoal_nm_set(shoal_nodemap_t *m, const shoal_node_t *node, uint64_t value);
void shoal_nm_remove(shoal_nodemap_t *m, const shoal_node_t *node);
/* m[node] = max(m[node], other[node]) for every node. Returns true if m changed. */
bool shoal_nm_merge_max(shoal_nodemap_t *m, const shoal_nodemap_t *other);
bool shoal_nm_equal(const shoal_nodemap_t *a, const shoal_nodemap_t *b);
/* Encodes as parallel arrays (node ids, values), as VersionVector and GCounter do. The arrays
   point into m and are allocated with shoal_malloc; free with shoal_nm_pb_free. */
void shoal_nm_to_pb(const shoal_nodemap_t *m, size_t *n, char ***nodes, uint64_t **values);
void shoal_nm_pb_free(char **nodes, uint64_t *values);
/* Decodes parallel arrays: ids well-formed and strictly ascending, values > 0. */
int shoal_nm_from_pb(shoal_nodemap_t *m, size_t n_nodes, char *const *nodes, size_t n_values,
                     const uint64_t *values);
/* Renders as {node=value, ...}. */
void shoal_nm_render(const shoal_nodemap_t *m, shoal_buf_t *out);

/* ---------------------------------------------------------------------------------------------
 * Node table for encodings that refer to nodes many times: collect, sort, then index.
 */
typedef struct {
    const shoal_node_t **nodes;
    size_t n, cap;
} shoal_nodetab_t;

void shoal_nodetab_add(shoal_nodetab_t *t, const shoal_node_t *node);
/* Sorts and removes duplicates; call once after the adds. */
void shoal_nodetab_finish(shoal_nodetab_t *t);
/* Index of node in a finished table (it must be there). */
uint32_t shoal_nodetab_index(const shoal_nodetab_t *t, const shoal_node_t *node);
void shoal_nodetab_free(shoal_nodetab_t *t);
/* Decodes a node table: ids well-formed, strictly ascending. */
int shoal_nodetab_from_pb(shoal_nodetab_t *t, size_t n, char *const *ids);

/* ---------------------------------------------------------------------------------------------
 * Byte-string hash map: key bytes -> void *. Keys are copied into the map. Iteration order is
 * unspecified: encoders sort.
 *
 * Compact layout (as CPython's dict): the entries sit densely in `slots`, in insertion order, and
 * a separate open-addressing index of 32-bit positions finds them. An iteration, a sort or an
 * encode of a large map then reads n entries, not a table sized for the load factor (a 100k-key
 * map with 32-byte slots at load 3/8 was 8 MiB to stream for 3 MiB of entries), and the keys,
 * allocated in insertion order, are read close to in order. A removed entry stays in `slots` as
 * a hole (key NULL, hash kept), which the index treats as a tombstone, until the next compaction
 * (an insert into a full `slots` with many holes, or an index rehash). An insert may move the
 * entries: slot pointers are valid until the next upsert into the same map.
 */
typedef struct {
    uint8_t *key;
    size_t klen;
    uint64_t hash; /* never 0 for an entry (real hashes are forced nonzero) */
    void *value;
} shoal_hslot_t;

typedef struct {
    shoal_hslot_t *slots; /* entries in insertion order; removed ones are holes (key NULL) */
    size_t cap;           /* entries in slots, live or holes: the bound of an iteration */
    size_t n;             /* live entries */
    size_t used;          /* index positions in use: live entries and tombstones */
    size_t alloc;         /* room in slots */
    uint32_t *index;      /* position in slots + 1; 0 = empty. Open addressing, linear probing */
    size_t index_cap;     /* power of two, or 0 */
    /* The canonical order as last sorted (a memo, not part of the map's value): the positions of
       the entries live then, in key order; entries at positions >= order_mark came later. NULL
       for small maps and after a compaction (positions move). */
    uint32_t *order;
    size_t order_n;
    size_t order_mark;
} shoal_hmap_t;

void shoal_hmap_free(shoal_hmap_t *h); /* frees keys, not values */
/* Makes room for n entries in an empty map, so that filling it never rehashes. */
void shoal_hmap_reserve(shoal_hmap_t *h, size_t n);
void *shoal_hmap_get(const shoal_hmap_t *h, const void *key, size_t klen);
/* Slot for key, inserting it with value NULL when absent (*inserted tells). */
shoal_hslot_t *shoal_hmap_upsert(shoal_hmap_t *h, const void *key, size_t klen, bool *inserted);
/* Removes key; returns its value (or NULL). */
void *shoal_hmap_remove(shoal_hmap_t *h, const void *key, size_t klen);
/* Removes the entry of a live slot found by iteration, without hashing the key again (the slot
   stays a hole, so an iteration in progress goes on). */
void shoal_hmap_kill(shoal_hmap_t *h, shoal_hslot_t *s);
/* Live slots sorted in canonical key order (an array the caller frees). A map of many keys
   remembers the order it found, so the next call sorts only the keys inserted since and merges
   them in (a large set changed by a few elements between two encodes costs a copy, not a sort). */
shoal_hslot_t **shoal_hmap_sorted(const shoal_hmap_t *h);
/* Iteration: for (i = 0; i < h->cap; i++) if (SHOAL_HSLOT_LIVE(&h->slots[i])) ... */
#define SHOAL_HSLOT_LIVE(s) ((s)->hash != 0 && (s)->key != NULL)

/* One log line per reason per interval at most: a flood of bad frames or connections must not
   become a flood of lines. A zeroed limiter lets its first line through. */
typedef struct {
    int64_t last;        /* shoal_now_ms of the last line let through */
    uint64_t suppressed; /* lines held back since */
    bool used;
} shoal_ratelimit_t;
/* True when a line may go now; *suppressed then gets how many were held back since the last
   one (the line says so) and the count starts again. */
bool shoal_ratelimit_pass(shoal_ratelimit_t *r, int64_t interval_ms, uint64_t *suppressed);

/* A row of the configuration loader's key table as the reference documentation shows it
   (ddata/config.c; tools/gen/config_reference.c writes docs/configuration.md from it). */
typedef struct {
    const char *path;    /* "shoal/cluster/gossip-interval"; a '*' segment stands for any name */
    const char *kind;    /* "duration", "size", "on/off", "number", "decimal", "string", ... */
    const char *choices; /* kind "choice": the words, "a|b|c" */
    bool off;            /* "off" is accepted */
    bool shoal_own;      /* Shoal's own key (else Akka's, at the same path) */
    const char *dflt;    /* the default as a file writes it, or NULL */
    const char *doc;     /* what it means */
} shoal_config_key_doc_t;
/* Row i of the table (false past the last row). */
bool shoal_config_key_doc(size_t i, shoal_config_key_doc_t *out);

#endif
