/*  ddata.h — Shoal Distributed Data: replicated data types (delta-state CRDTs).

    This header is the whole public API of ddata/. This part covers the data types; the node and
    the replicator build on them.

    THE TYPES
    Every value is a `shoal_crdt_t`, an opaque object whose type is one of:
      VersionVector  node -> counter; compare gives before / after / same / concurrent.
      GCounter       grow-only counter.          PNCounter    increment and decrement.
      GSet           grow-only set of byte strings.
      ORSet          observed-remove set, add wins over a concurrent remove that did not observe it.
      ORMap          map from byte-string keys (an ORSet) to values of one CRDT type.
      ORMultiMap     ORMap of ORSets (optionally propagating value deltas).
      LWWRegister    last-writer-wins register of bytes.   LWWMap   ORMap of LWWRegisters.
      PNCounterMap   ORMap of PNCounters.         Flag     false, then true for ever.

    MERGE is a join: commutative, associative and idempotent, so replicas that exchange their
    states in any order, any number of times, end equal. One exception that Shoal shares with Akka
    on purpose: the map types drop a key's value when the key is removed, so when a removal races
    with an update of that key's value the merge is commutative and idempotent but not always
    associative; replicas still converge (the replicator's full-state anti-entropy completes it),
    and the property tests check that they do.

    DELTAS. A mutation records what it changed in the value's pending delta, itself a small value
    (of the type's delta type) that can be shipped instead of the full state and merged with
    `shoal_crdt_merge_delta`. Deltas merge with each other (a delta group) with `shoal_crdt_merge`.
    `shoal_type_delta_causal` says whether a type's deltas must be applied in the order their
    origin produced them; the replicator honours it with per-origin sequence numbers and asks for
    full state on a gap.

    PRUNING. Types with per-node state (counters, versions, dots) can fold a removed node's
    contribution into a surviving node: `shoal_crdt_prune` (keeps the value), then, once every
    replica has pruned, `shoal_crdt_prune_cleanup` drops what is left of the removed node so that
    old state merged back later cannot resurrect it. The replicator coordinates the rounds.

    SERIALIZATION. `shoal_crdt_encode` writes a self-describing envelope (type tag and format
    version, proto/ddata.proto) in a canonical form: the same value always gives the same bytes,
    so `shoal_crdt_digest` (XXH3-128 of those bytes) compares replicas. `shoal_crdt_decode`
    rejects malformed, inconsistent or oversized input with an error code, never a crash.

    NODE IDS are the cluster's unique addresses "host:port:uid" (the uid is new at every start).
    They are interned: `shoal_node_intern` returns one stable pointer per id for the life of the
    process, so types compare nodes by pointer.

    THREADS. A value belongs to one thread at a time; nothing here locks, except node interning,
    which is thread-safe.

    THE THREAD RULE (the same in membership.h, sharding.h and durable.h). A node is one thread
    (THE NODE, below) that owns all of its state without locks. Every public call is one of:
      - ANY THREAD: says "Any thread" (or "Thread-safe"); the values of this part (a
        shoal_crdt_t belongs to one thread at a time, like any C object) and the settings
        helpers are of this kind;
      - NODE THREAD: says "Node thread". It runs there: inside a callback Shoal runs (completions,
        subscriptions, timers, message handlers, entity callbacks) or inside shoal_system_call /
        shoal_system_post. Each has a `_sync` twin for every other thread (get -> get_sync,
        subscribe -> subscribe_sync, add_peer -> add_peer_sync, ...), which hands the call to
        the node thread and waits; the few calls only an upper layer makes (message handlers,
        timers, the quorum gate) name shoal_system_call as their way in. Called from another
        thread, a node-thread call fails with SHOAL_ETHREAD (or returns NULL / 0 / false when its
        type has no room for a code), logs "shoal_replicator_update: node thread only; from other
        threads use shoal_replicator_update_sync", and leaves that text in
        shoal_last_error_detail();
      - _sync: blocks; any thread but the node's own (SHOAL_EDEADLK there).
    Constructors and destructors (shoal_system_new/destroy, shoal_replicator_new/destroy, ...)
    run from any thread; shoal_system_destroy and the upper layers' destroys (cluster, sharding)
    never from the node thread. CALLBACKS RUN ON THE NODE THREAD
    and must not block, nor call _sync functions of their own node; the exceptions are said
    where they are: the log handler runs on the thread that logs, shoal_replicator_keys_sync's
    fn on the caller's thread, HTTP routes marked SHOAL_HTTP_ANY_THREAD on a connection's thread.

    ERRORS. Functions return 0 (or a count) on success and a negative SHOAL_E* code on failure;
    `shoal_strerror` names it. Constructors return NULL with the code in `int *err` (which may
    be NULL), and shoal_last_error_detail() says why in words (a configuration file's line, an
    LMDB message, a refused key). Allocation failure aborts the process.
*/
#ifndef SHOAL_DDATA_H
#define SHOAL_DDATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The public ABI: libshoal is compiled with -fvisibility=hidden (SConstruct), so libshoal.so
   exports exactly what the four public headers declare between this push and its pop; internal
   headers that include a public header go on declaring hidden symbols after the pop.
   tools/abi-check.py compares these exports with the previous release's (docs/compatibility.md). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* Version of libshoal and of every program built with it; the one place it is written (SConstruct
   reads these lines for the library's file name, the SONAME and shoal.pc; CHANGELOG.md names
   what each release changed). */
#define SHOAL_VERSION_MAJOR 0
#define SHOAL_VERSION_MINOR 2
#define SHOAL_VERSION_PATCH 0
/* The N of the SONAME libshoal.so.N: raised by one in a release that breaks the public ABI (a
   function removed or its signature, a public type's layout or a function's meaning changed).
   While the major version is 0 it counts those breaks on its own; from 1.0 on it equals
   SHOAL_VERSION_MAJOR (docs/compatibility.md, "The shared library"). */
#define SHOAL_SOVERSION 1

/* A name kept only for compatibility, for at least one release: the compiler says what replaces
   it (CHANGELOG.md says since when). A program migrating step by step may define
   SHOAL_NO_DEPRECATED_WARNINGS before including a Shoal header to silence the warnings. */
#if defined(__GNUC__) && !defined(SHOAL_NO_DEPRECATED_WARNINGS)
#define SHOAL_DEPRECATED(why) __attribute__((deprecated(why)))
#else
#define SHOAL_DEPRECATED(why)
#endif
#define SHOAL_VERSION_STR_(x) #x
#define SHOAL_VERSION_STR(x)  SHOAL_VERSION_STR_(x)
/* "MAJOR.MINOR.PATCH", as `--version` prints it. */
#define SHOAL_VERSION                                                                              \
    SHOAL_VERSION_STR(SHOAL_VERSION_MAJOR)                                                         \
    "." SHOAL_VERSION_STR(SHOAL_VERSION_MINOR) "." SHOAL_VERSION_STR(SHOAL_VERSION_PATCH)

/* ---------------------------------------------------------------------------------------------
 * Errors
 */
#define SHOAL_OK         0
#define SHOAL_EINVAL    -1  /* invalid argument or wrong use of the API */
#define SHOAL_ETYPE     -2  /* value is not of the type the call needs */
#define SHOAL_EDECODE   -3  /* malformed or inconsistent serialized input */
#define SHOAL_ETOOBIG   -4  /* input or value over a size limit */
#define SHOAL_EVERSION  -5  /* unknown type tag or newer format version */
#define SHOAL_EOVERFLOW -6  /* a counter would overflow 64 bits */
#define SHOAL_ENOTFOUND -7  /* no such key or element */
#define SHOAL_ENODE     -8  /* malformed node id */

/* Name of an error code; never NULL. */
const char *shoal_strerror(int code);

/* THE DETAIL OF A FAILURE. Every constructor (a call that returns a new object, or NULL with a
   SHOAL_E* code in *err) and every call refused for its thread (SHOAL_ETHREAD) leaves, in
   words, why it failed when the code does not say it all: the line and key of a configuration
   file ("shoal/cluster/gossip-interval: '2 parsecs' is not a duration"), LMDB's complaint about
   a data directory, a refused CURVE key, "shoal_replicator_update: node thread only; from other
   threads use shoal_replicator_update_sync". This is the one way to read it:
       shoal_config_t *cfg = shoal_config_load(path, &err);
       if (!cfg) fprintf(stderr, "%s: %s\n", shoal_strerror(err), shoal_last_error_detail());
   The text belongs to the calling thread (thread-local) and stays until that thread's next
   failing call or constructor; never NULL, "" when there is nothing to add. */
const char *shoal_last_error_detail(void);
/* For the layers above ddata and for custom code that follows the convention: sets this
   thread's detail (printf-style; NULL clears it) and returns `code`, so a constructor writes
       return *err = shoal_error_detail_set(SHOAL_EINVAL, "%s: no such file", path), NULL; */
int shoal_error_detail_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void shoal_error_detail_clear(void);
/* Sets the detail and logs it as an error line: a constructor's reason, said once for both. */
void shoal_error_detail_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The refusal of a node-thread call made from another thread (THREADS, at THE NODE): sets the
   detail to "<call>: node thread only; from other threads use <way_in>", logs it as a warning
   and returns SHOAL_ETHREAD. */
int shoal_wrong_thread(const char *call, const char *way_in);

/* ---------------------------------------------------------------------------------------------
 * Logs. Every line Shoal writes goes through shoal_log: a level (error, warning, info, debug), a
 * message that names the node it concerns, and one handler. The default handler writes
 *     "W: 2026-11-25T17:09:00.123+01:00 <message>\n"
 * to stderr: the level's letter, the local time in ISO 8601 with its offset from UTC, the
 * message; one write per line, so lines of several threads never mix. An application routes
 * Shoal's lines into its own logging with shoal_log_set_handler, which gets the level and the
 * message alone (its logging adds the time its own way). Lines below the level are not even
 * formatted; the level is info by default (debug lines are off), and every Shoal program takes
 * --log-level. Both calls are thread-safe and take effect at once for every node of the process.
 * Nothing hot logs per message.
 */
typedef enum {
    SHOAL_LOG_ERROR = 0,
    SHOAL_LOG_WARNING = 1,
    SHOAL_LOG_INFO = 2,
    SHOAL_LOG_DEBUG = 3,
} shoal_log_level_t;
typedef void (shoal_log_fn)(shoal_log_level_t level, const char *message, void *arg);
/* Lines at `level` and above (more severe) are written. */
void shoal_log_set_level(shoal_log_level_t level);
shoal_log_level_t shoal_log_get_level(void);
/* fn(level, message, arg) for each line, on the thread that logs (it must not block long, nor
   log through Shoal); NULL: the default handler (stderr). */
void shoal_log_set_handler(shoal_log_fn *fn, void *arg);
/* "error", "warning" (or "warn"), "info", "debug" -> the level: 0, or SHOAL_EINVAL. */
int shoal_log_level_parse(const char *name, shoal_log_level_t *out);
const char *shoal_log_level_name(shoal_log_level_t level);
/* The default handler's format: SHOAL_LOG_TEXT (the line above) or SHOAL_LOG_JSON, one object a
   line for log shippers:
     {"ts":"2026-11-25T17:09:00.123+01:00","level":"debug","node":"127.0.0.1:2552:1234",
      "module":"replicator","msg":"replicator 'r': MAJORITY write of k refused: ..."}
   node and module are read from the message's "NODE: MODULE ...: " start that Shoal's own lines
   have ("" when a line lacks it; msg is then the whole message). Every program takes
   --log-format text|json (tools/cli.h). SHOAL_EINVAL for another value. */
typedef enum { SHOAL_LOG_TEXT = 0, SHOAL_LOG_JSON = 1 } shoal_log_format_t;
int shoal_log_set_format(shoal_log_format_t format);
shoal_log_format_t shoal_log_get_format(void);
/* "text", "json" -> the format: 0, or SHOAL_EINVAL. */
int shoal_log_format_parse(const char *name, shoal_log_format_t *out);
/* The level a configuration file names (shoal/loglevel): taken unless shoal_log_set_level was
   called first (a --log-level flag or SHOAL_LOG_LEVEL wins over the file). */
void shoal_log_level_default(shoal_log_level_t level);
/* Formats and hands one line to the handler when level is enabled. */
void shoal_log(shoal_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The wall-clock instant ms (milliseconds since the epoch) as ISO 8601 local time with its UTC
   offset, "2026-11-25T17:09:00.123+01:00" (30 bytes with the NUL are enough). */
void shoal_log_time(int64_t ms, char *out, size_t cap);
/* The library's lines, one macro per level (the level is checked before any formatting). */
#define shoal_error(...) shoal_log(SHOAL_LOG_ERROR, __VA_ARGS__)
#define shoal_warning(...) shoal_log(SHOAL_LOG_WARNING, __VA_ARGS__)
#define shoal_info(...)                                                                            \
    (shoal_log_get_level() >= SHOAL_LOG_INFO ? shoal_log(SHOAL_LOG_INFO, __VA_ARGS__) : (void)0)
#define shoal_debug(...)                                                                           \
    (shoal_log_get_level() >= SHOAL_LOG_DEBUG ? shoal_log(SHOAL_LOG_DEBUG, __VA_ARGS__) : (void)0)

/* ---------------------------------------------------------------------------------------------
 * Growable byte buffer, used for encoding and rendering. Zero-initialize, or shoal_buf_init.
 */
typedef struct {
    uint8_t *data;
    size_t len;
    size_t cap;
} shoal_buf_t;

void shoal_buf_init(shoal_buf_t *buf);
void shoal_buf_free(shoal_buf_t *buf);
void shoal_buf_reset(shoal_buf_t *buf); /* len = 0, keeps the memory */
void shoal_buf_reserve(shoal_buf_t *buf, size_t extra);
void shoal_buf_append(shoal_buf_t *buf, const void *data, size_t len);
void shoal_buf_printf(shoal_buf_t *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends bytes as a quoted string, escaping what is not printable ASCII. */
void shoal_buf_append_quoted(shoal_buf_t *buf, const void *data, size_t len);
/* NUL-terminated view of the contents (the NUL is not counted in len). */
const char *shoal_buf_cstr(shoal_buf_t *buf);
/* Appends a C string as a JSON string (quotes, backslash and control characters escaped; NULL is
   ""). Bytes from 0x80 pass through: node ids, roles and keys are UTF-8 or ASCII. */
void shoal_buf_json_string(shoal_buf_t *buf, const char *s);

/* ---------------------------------------------------------------------------------------------
 * Node ids
 */
typedef struct shoal_node shoal_node_t;

#define SHOAL_NODE_ID_MAX 255

/* The unique interned node for `id` ("host:port:uid"; host may be a name, an IPv4 address or a
   bracketed IPv6 address; port 1..65535; uid a decimal 64-bit number). Returns NULL if the id is
   malformed. Thread-safe. The pointer stays valid until the process exits. */
const shoal_node_t *shoal_node_intern(const char *id);
/* Same, from a length-delimited string (need not be NUL-terminated). */
const shoal_node_t *shoal_node_intern_n(const char *id, size_t len);
/* Builds and interns "host:port:uid". */
const shoal_node_t *shoal_node_make(const char *host, uint16_t port, uint64_t uid);
const char *shoal_node_id(const shoal_node_t *node);
const char *shoal_node_host(const shoal_node_t *node);
uint16_t shoal_node_port(const shoal_node_t *node);
uint64_t shoal_node_uid(const shoal_node_t *node);
/* Total order of node ids (byte order of the id strings): the order used for canonical
   encoding and for tie-breaks ("the lower node id"). */
int shoal_node_cmp(const shoal_node_t *a, const shoal_node_t *b);

/* ---------------------------------------------------------------------------------------------
 * Values: the operations every type has
 */
typedef struct shoal_crdt shoal_crdt_t;
typedef struct shoal_type shoal_type_t;

/* Type tags: the ValueType numbers of proto/ddata.proto. */
typedef enum {
    SHOAL_VERSION_VECTOR = 1,
    SHOAL_GCOUNTER = 2,
    SHOAL_PNCOUNTER = 3,
    SHOAL_GSET = 4,
    SHOAL_ORSET = 5,
    SHOAL_ORMAP = 6,
    SHOAL_ORMULTIMAP = 7,
    SHOAL_LWWREGISTER = 8,
    SHOAL_LWWMAP = 9,
    SHOAL_PNCOUNTERMAP = 10,
    SHOAL_FLAG = 11,
    SHOAL_ORSET_DELTA = 12,
    SHOAL_ORMAP_DELTA = 13,
} shoal_type_tag_t;

/* Largest serialized value decode accepts; the replicator applies its own, smaller frame limits
   before decoding. */
#define SHOAL_DECODE_MAX (256u * 1024 * 1024)
/* Deepest nesting of values in values (maps of maps) that decode accepts. */
#define SHOAL_DECODE_MAX_DEPTH 8

/* The descriptor of a type tag, or NULL for an unknown tag. */
const shoal_type_t *shoal_type_by_tag(uint32_t tag);
/* The descriptor of a type by name ("ORSet", "GCounter", ...), or NULL. */
const shoal_type_t *shoal_type_by_name(const char *name);
const char *shoal_type_name(const shoal_type_t *type);
uint32_t shoal_type_tag(const shoal_type_t *type);
/* True when the type records deltas. */
bool shoal_type_has_delta(const shoal_type_t *type);
/* True when deltas of this type must be applied in the order of their origin. */
bool shoal_type_delta_causal(const shoal_type_t *type);
/* True when the type holds per-node state that pruning must fold away. */
bool shoal_type_has_pruning(const shoal_type_t *type);

/* A new empty value of a simple type (everything but the maps, which need a value type:
   use shoal_ormap_new and friends). NULL for a map type or a delta type. */
shoal_crdt_t *shoal_crdt_new(const shoal_type_t *type);
void shoal_crdt_destroy(shoal_crdt_t **self_p);
shoal_crdt_t *shoal_crdt_clone(const shoal_crdt_t *self);
const shoal_type_t *shoal_crdt_type(const shoal_crdt_t *self);

/* self := self ⊔ other. Both of one type (SHOAL_ETYPE otherwise). Does not touch self's pending
   delta: merging in other replicas' state is not a local change to ship. Two deltas of one type
   merge into a delta group the same way. */
int shoal_crdt_merge(shoal_crdt_t *self, const shoal_crdt_t *other);

/* The pending delta (borrowed; valid until the next mutation, reset or destroy), or NULL when
   there is none or the type has no deltas. */
const shoal_crdt_t *shoal_crdt_delta(const shoal_crdt_t *self);
/* Takes the pending delta out (the caller owns it) and resets it; NULL when there is none. */
shoal_crdt_t *shoal_crdt_take_delta(shoal_crdt_t *self);
void shoal_crdt_reset_delta(shoal_crdt_t *self);
/* self := self ⊔ delta, where delta is of self's delta type (or a full state of self's type). */
int shoal_crdt_merge_delta(shoal_crdt_t *self, const shoal_crdt_t *delta);

/* Equality of values (pending deltas are not part of the value). */
bool shoal_crdt_equal(const shoal_crdt_t *a, const shoal_crdt_t *b);
/* Appends the canonical self-describing encoding to out. */
int shoal_crdt_encode(const shoal_crdt_t *self, shoal_buf_t *out);
/* Decodes an encoding made by shoal_crdt_encode. On success *out is a new value. */
int shoal_crdt_decode(const void *data, size_t len, shoal_crdt_t **out);
/* XXH3-128 of the canonical encoding. */
int shoal_crdt_digest(const shoal_crdt_t *self, uint8_t digest[16]);
/* Appends a human-readable rendering (one line for small values), e.g. ORSet{"a", "b"}. */
int shoal_crdt_render(const shoal_crdt_t *self, shoal_buf_t *out);

/* Pruning of a removed node's contribution. */
/* Nodes that have contributed to the value (borrowed pointers). Returns how many there are,
   writing at most `cap` of them into `nodes`. */
size_t shoal_crdt_modified_by(const shoal_crdt_t *self, const shoal_node_t **nodes, size_t cap);
bool shoal_crdt_needs_pruning_from(const shoal_crdt_t *self, const shoal_node_t *removed);
/* How the replicas of a dot-based value (ORSet, and the maps built on it) re-home a removed
   node's dots, the same way everywhere: dot (removed, n) becomes (into, base + n - 1) for
   n <= span; a dot above the span (one the pruning node never saw) is dropped. The owner (the
   node that prunes, `into`) computes the plan over its whole value and reserves the block: its
   own counter jumps past base + span - 1, so no dot of its own ever collides with a mapped one.
   Every other replica, and every delta or old state that arrives later, applies the same plan
   (shoal_crdt_prune_cleanup): so a remove made at another replica before it learnt of the
   pruning, which saw (removed, n), also covers the owner's re-homed copy of that add. Dropping
   the removed node's dots instead (a plan with span 0, or none: counters, and pruning markers
   written before plans existed) would let the re-homed add win over that remove. */
typedef struct {
    const shoal_node_t *into;
    uint64_t base;
    uint64_t span; /* 0: nothing to re-home: the removed node's parts are dropped */
} shoal_prune_plan_t;

/* Folds removed's contribution into `into`, keeping the value. For a dot-based value, `plan`
   (may be NULL) receives what the other replicas must apply with shoal_crdt_prune_cleanup. */
int shoal_crdt_prune(shoal_crdt_t *self, const shoal_node_t *removed, const shoal_node_t *into,
                     shoal_prune_plan_t *plan);
/* After the owner pruned: re-homes removed's dots by the owner's plan (NULL or span 0: drops
   what is left of removed), so merging back old state, or a delta, that still holds its
   contribution cannot resurrect it, nor lose a remove that observed it. Works on values and on
   their deltas. */
int shoal_crdt_prune_cleanup(shoal_crdt_t *self, const shoal_node_t *removed,
                             const shoal_prune_plan_t *plan);

/* ---------------------------------------------------------------------------------------------
 * VersionVector
 */
typedef enum {
    SHOAL_VV_SAME = 0,
    SHOAL_VV_BEFORE = 1, /* a < b */
    SHOAL_VV_AFTER = 2,  /* a > b */
    SHOAL_VV_CONCURRENT = 3,
} shoal_vv_order_t;

shoal_crdt_t *shoal_vv_new(void);
/* Increments node's counter. */
int shoal_vv_increment(shoal_crdt_t *vv, const shoal_node_t *node);
/* Sets node's counter to max(current, counter). */
int shoal_vv_witness(shoal_crdt_t *vv, const shoal_node_t *node, uint64_t counter);
uint64_t shoal_vv_get(const shoal_crdt_t *vv, const shoal_node_t *node);
size_t shoal_vv_size(const shoal_crdt_t *vv);
/* The i-th entry in node order (i < size). */
int shoal_vv_entry(const shoal_crdt_t *vv, size_t i, const shoal_node_t **node, uint64_t *counter);
shoal_vv_order_t shoal_vv_compare(const shoal_crdt_t *a, const shoal_crdt_t *b);

/* ---------------------------------------------------------------------------------------------
 * GCounter and PNCounter
 */
shoal_crdt_t *shoal_gcounter_new(void);
int shoal_gcounter_increment(shoal_crdt_t *c, const shoal_node_t *self, uint64_t n);
uint64_t shoal_gcounter_value(const shoal_crdt_t *c);

shoal_crdt_t *shoal_pncounter_new(void);
/* Adds n (negative n decrements). */
int shoal_pncounter_add(shoal_crdt_t *c, const shoal_node_t *self, int64_t n);
/* The value as increments - decrements; SHOAL_EOVERFLOW if it does not fit in int64. */
int shoal_pncounter_value(const shoal_crdt_t *c, int64_t *value);
uint64_t shoal_pncounter_increments(const shoal_crdt_t *c);
uint64_t shoal_pncounter_decrements(const shoal_crdt_t *c);

/* ---------------------------------------------------------------------------------------------
 * GSet and ORSet: sets of byte strings
 */
/* Called once per element, in canonical (byte) order; return nonzero to stop. */
typedef int (shoal_elem_fn)(const void *elem, size_t len, void *arg);

shoal_crdt_t *shoal_gset_new(void);
int shoal_gset_add(shoal_crdt_t *s, const void *elem, size_t len);
bool shoal_gset_contains(const shoal_crdt_t *s, const void *elem, size_t len);
size_t shoal_gset_size(const shoal_crdt_t *s);
int shoal_gset_foreach(const shoal_crdt_t *s, shoal_elem_fn *fn, void *arg);

shoal_crdt_t *shoal_orset_new(void);
int shoal_orset_add(shoal_crdt_t *s, const shoal_node_t *self, const void *elem, size_t len);
/* Removes the element as this replica has observed it; SHOAL_ENOTFOUND if absent (no delta). */
int shoal_orset_remove(shoal_crdt_t *s, const shoal_node_t *self, const void *elem, size_t len);
/* Removes every element observed here. */
int shoal_orset_clear(shoal_crdt_t *s, const shoal_node_t *self);
bool shoal_orset_contains(const shoal_crdt_t *s, const void *elem, size_t len);
size_t shoal_orset_size(const shoal_crdt_t *s);
/* fn must not change the set. */
int shoal_orset_foreach(const shoal_crdt_t *s, shoal_elem_fn *fn, void *arg);

/* ---------------------------------------------------------------------------------------------
 * Flag
 */
shoal_crdt_t *shoal_flag_new(void);
int shoal_flag_switch_on(shoal_crdt_t *f);
bool shoal_flag_enabled(const shoal_crdt_t *f);

/* ---------------------------------------------------------------------------------------------
 * LWWRegister
 *
 * The value with the greater timestamp wins; equal timestamps are broken by the lower node id.
 * Where the timestamp comes from is the clock: the default wall clock (microseconds since the
 * epoch, and never behind the register's current timestamp + 1, so one register never goes
 * backwards even if the wall clock does), the reverse clock (counts down: the first write wins),
 * or the caller's own (an epoch, a sequence number: the sharding coordinator uses one).
 */
typedef int64_t (shoal_clock_fn)(int64_t current_timestamp, const void *value, size_t len,
                                 void *arg);
/* The default clock: max(now_us, current + 1). */
int64_t shoal_lww_clock_default(int64_t current_timestamp, const void *value, size_t len,
                                void *arg);
/* The reverse clock: min(-now_us, current - 1). */
int64_t shoal_lww_clock_reverse(int64_t current_timestamp, const void *value, size_t len,
                                void *arg);

shoal_crdt_t *shoal_lwwreg_new(void);
/* Sets the value with a timestamp from `clock` (NULL = default clock). A local write is a merge:
   it takes effect only if it wins against the current value (it always does with the default
   clock; with the reverse clock only the first write to an empty register sticks). INT64_MIN is
   reserved for "never written": SHOAL_EINVAL. */
int shoal_lwwreg_set(shoal_crdt_t *r, const shoal_node_t *self, const void *value, size_t len,
                     shoal_clock_fn *clock, void *clock_arg);
/* Sets the value with an explicit timestamp (a caller-supplied clock such as an epoch). The
   write takes effect only if it wins against the current value. */
int shoal_lwwreg_set_at(shoal_crdt_t *r, const shoal_node_t *self, const void *value, size_t len,
                        int64_t timestamp);
/* The value (borrowed, valid until the next change), its length, timestamp and writer. A register
   never written has len 0, timestamp INT64_MIN and writer NULL. */
const void *shoal_lwwreg_value(const shoal_crdt_t *r, size_t *len);
int64_t shoal_lwwreg_timestamp(const shoal_crdt_t *r);
const shoal_node_t *shoal_lwwreg_writer(const shoal_crdt_t *r);

/* ---------------------------------------------------------------------------------------------
 * Maps: ORMap and its specializations
 *
 * Keys are byte strings held in an ORSet (add wins); each present key has one value of the map's
 * value type. Updating a key's value goes through a modify function that mutates the value in
 * place (a new key starts from the type's empty value); the map records the key's addition and
 * the value's delta in its own delta.
 */
typedef int (shoal_modify_fn)(shoal_crdt_t *value, void *arg);
typedef int (shoal_entry_fn)(const void *key, size_t len, const shoal_crdt_t *value, void *arg);

shoal_crdt_t *shoal_ormap_new(const shoal_type_t *value_type);
const shoal_type_t *shoal_ormap_value_type(const shoal_crdt_t *m);
/* Applies modify to the key's value (created empty when absent). modify's nonzero return aborts
   the update, leaves the map as it was and is returned. Works on every map type. */
int shoal_ormap_update(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t len,
                       shoal_modify_fn *modify, void *arg);
/* Removes the key as observed here; SHOAL_ENOTFOUND if absent. Works on every map type. */
int shoal_ormap_remove(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t len);
/* The key's value (borrowed, valid until the next change of the map) or NULL. */
const shoal_crdt_t *shoal_ormap_get(const shoal_crdt_t *m, const void *key, size_t len);
size_t shoal_ormap_size(const shoal_crdt_t *m);
/* Entries in key order. */
int shoal_ormap_foreach(const shoal_crdt_t *m, shoal_entry_fn *fn, void *arg);

/* ORMultiMap: key -> set of byte strings. With value_deltas, updates ship ORSet deltas and a
   removed key's set is cleared first (so a concurrent re-add does not bring old elements back);
   without, updates ship the key's whole set (Akka's default). In both modes (and in an ORMap of
   ORSets) a set re-created under a removed key never issues a dot its predecessor carried: its
   first add draws above every dot of the node (docs/types.md). */
shoal_crdt_t *shoal_ormultimap_new(bool value_deltas);
int shoal_ormultimap_add(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t klen,
                         const void *elem, size_t elen);
/* Pekko's removeBinding: removes elem from key's set if there, always updating the key (a new
   dot: a concurrent removal of the key does not win over it), and removes the key when its set
   is left empty. 0 also when the set did not hold elem (the key is updated all the same). */
int shoal_ormultimap_remove_binding(shoal_crdt_t *m, const shoal_node_t *self, const void *key,
                                    size_t klen, const void *elem, size_t elen);
/* The key's ORSet (borrowed) or NULL. */
const shoal_crdt_t *shoal_ormultimap_get(const shoal_crdt_t *m, const void *key, size_t klen);

/* LWWMap: key -> bytes, last writer wins per key. */
shoal_crdt_t *shoal_lwwmap_new(void);
int shoal_lwwmap_put(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t klen,
                     const void *value, size_t vlen, shoal_clock_fn *clock, void *clock_arg);
/* The key's value (borrowed) or NULL. */
const void *shoal_lwwmap_get(const shoal_crdt_t *m, const void *key, size_t klen, size_t *vlen);

/* PNCounterMap: key -> PNCounter. */
shoal_crdt_t *shoal_pncountermap_new(void);
int shoal_pncountermap_add(shoal_crdt_t *m, const shoal_node_t *self, const void *key, size_t klen,
                           int64_t n);
/* The key's value; SHOAL_ENOTFOUND if absent. */
int shoal_pncountermap_get(const shoal_crdt_t *m, const void *key, size_t klen, int64_t *value);

/* =============================================================================================
 * CUSTOM TYPES
 *
 * A program (or an upper layer: membership's cluster state is one) may add its own replicated
 * type, as Akka's ReplicatedData allows: fill a `shoal_type_t` vtable and register it once. Every
 * value starts with a `shoal_crdt_t` header whose `type` points at the vtable. The contract is
 * the built-in types': merge is a join, encode is canonical (the same value gives the same
 * bytes), decode validates everything and never crashes. Tags below SHOAL_TYPE_TAG_CUSTOM are
 * the built-in types'; a registered type's values travel through the replicator, the stores and
 * the tools like any other.
 */
#define SHOAL_TYPE_TAG_CUSTOM 100
#define SHOAL_TYPES_MAX_CUSTOM 32

struct shoal_crdt {
    const shoal_type_t *type;
};

struct shoal_type {
    const char *name;
    uint32_t tag;            /* ValueType number */
    uint32_t format_version; /* of the payload; decode refuses newer ones */
    const shoal_type_t *delta_type; /* NULL: no deltas */
    bool delta_causal;
    bool has_pruning;
    bool is_map;                    /* created with a value type, not by create() */

    /* NULL for maps and delta types. A delta type of its own is registered too; a replica
       without the key creates its state type's empty value to merge a delta into. */
    shoal_crdt_t *(*create)(void);
    void (*destroy)(shoal_crdt_t *self);
    shoal_crdt_t *(*clone)(const shoal_crdt_t *self);
    int (*merge)(shoal_crdt_t *self, const shoal_crdt_t *other);

    const shoal_crdt_t *(*delta)(const shoal_crdt_t *self);
    shoal_crdt_t *(*take_delta)(shoal_crdt_t *self);
    /* delta is of delta_type (or of this type: a full state). */
    int (*merge_delta)(shoal_crdt_t *self, const shoal_crdt_t *delta);

    /* NULL: compare canonical encodings. */
    bool (*equal)(const shoal_crdt_t *a, const shoal_crdt_t *b);
    /* The type's own message (the envelope's payload), canonical. */
    int (*encode_payload)(const shoal_crdt_t *self, shoal_buf_t *out);
    /* depth = nesting level of this value (0 at the top), for map values. */
    int (*decode_payload)(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out);
    int (*render)(const shoal_crdt_t *self, shoal_buf_t *out);

    size_t (*modified_by)(const shoal_crdt_t *self, const shoal_node_t **nodes, size_t cap);
    bool (*needs_pruning_from)(const shoal_crdt_t *self, const shoal_node_t *removed);
    int (*prune)(shoal_crdt_t *self, const shoal_node_t *removed, const shoal_node_t *into);
    int (*prune_cleanup)(shoal_crdt_t *self, const shoal_node_t *removed);
    /* Optional, for dot-based types (see shoal_prune_plan_t): raise *into_max and *removed_max
       to the highest counters of those nodes anywhere in the value; then apply a plan, as its
       owner (also reserving the block) or as any other replica. Delta types may have
       needs_pruning_from, prune_cleanup and prune_apply without has_pruning. */
    void (*prune_bounds)(const shoal_crdt_t *self, const shoal_node_t *removed,
                         const shoal_node_t *into, uint64_t *into_max, uint64_t *removed_max);
    int (*prune_apply)(shoal_crdt_t *self, const shoal_node_t *removed,
                       const shoal_prune_plan_t *plan, bool owner);

    /* Optional. A replica asked to acknowledge a write (Update with WriteTo/Majority/All) first
       asks the type whether it takes `incoming` (a full value or a delta) on top of `current`:
       nonzero refuses it unmerged, and the writer's update fails at once with that status
       (SHOAL_ESTALE for a writer that lost its right to write, as sharding's entity state
       refuses an old shard owner). Gossip and read repair merge without asking: refusing them
       would break convergence. */
    int (*admit)(const shoal_crdt_t *current, const shoal_crdt_t *incoming);
};

/* Registers a type (the vtable must live for the process). Thread-safe; registering the same
   vtable again is a no-op. SHOAL_EINVAL: tag below SHOAL_TYPE_TAG_CUSTOM, tag or name taken by
   another type, missing functions, or the table is full. */
int shoal_type_register(const shoal_type_t *type);

/* =============================================================================================
 * THE NODE (shoal_system_t)
 *
 * A system is one running node: one event-loop thread (a czmq actor) that owns every socket,
 * timer and piece of state of the node — the transport, and the replicators and upper layers that
 * register on it. Several systems may run in one process (tests) or one per process.
 *
 * TRANSPORT. The node binds one ROUTER at its endpoint (tcp://host:port; ipc:// allowed) and keeps
 * one DEALER per peer, connected to the peer's ROUTER; the ROUTER only receives (and answers
 * handshakes, acks and client requests), the DEALER only sends (and reads those answers). Its id
 * is host:port:uid, the uid new at every start. A connection opens with a handshake (HELLO: wire
 * version range, the sender's node id, the address it meant to reach, peer or client) that the
 * receiver answers with its own id, so a DEALER learns its peer's uid; after it the sender is known
 * per connection and a message carries only a small header (kind, length). Messages to one peer
 * are batched into one frame per loop turn, up to the frame limit (as Artery and Redis pipelines
 * do). Every frame carries a per-connection sequence number; the receiver counts gaps and acks
 * what it has, so a sender learns what was not acknowledged when a connection dies (ZeroMQ drops
 * what it had queued then). ZMQ_IMMEDIATE keeps frames from queueing for a peer that is not
 * connected, and a send timeout of 0 surfaces a full queue as SHOAL_EAGAIN: nothing is lost in
 * silence. Frames are checked against the node's own size limit before anything is decoded (an
 * oversized or malformed frame is dropped, counted and logged; ZMQ_MAXMSGSIZE is only a higher
 * backstop). Frames to another incarnation, or from a quarantined uid, are dropped and counted.
 * An unknown address may always open a handshake as a client (tools, examples) and send requests
 * of the client/admin class; a node answers them without making the client a peer. A reply larger
 * than a frame is sent to the client in parts under the limit and reassembled by the client
 * library, up to the client's reply limit (64 MiB by default); past it the client is answered
 * SHOAL_ETOOBIG, and a reply that does not reach its client is counted and logged.
 *
 * THREADS (THE THREAD RULE at the top). shoal_system_new/destroy, shoal_system_call,
 * shoal_system_post, shoal_system_stats, the fault-injection calls, connect_sync and
 * disconnect_sync, and the getters said "Thread-safe" work from any thread. Everything else —
 * send, reply, timers, handler registration, peer listeners, connect, quarantine — is for code
 * running on the node thread (inside a handler, a timer, or a function passed to
 * shoal_system_call/post), and returns SHOAL_ETHREAD, naming the way in, when called from
 * elsewhere. Handlers, peer listeners and timers run on the node thread. shoal_system_call runs a
 * function on the node thread and waits for it; called from the node thread it returns
 * SHOAL_EDEADLK instead of deadlocking. Bytes handed to a handler are valid until the handler
 * returns. At most max_pending_calls calls/posts may wait for the node thread; past that they fail
 * with SHOAL_EBUSY (the caller outruns the node). shoal_system_destroy must not be called from the
 * node thread (it is refused and logged); posts still queued when a node stops are not run.
 *
 * DELIVERY. Sequence numbers count messages. A receiver hands every message of a connection to
 * its handler at most once and in send order: a frame seen again (a duplicate) is dropped and
 * counted, a jump is reported as SHOAL_PEER_GAP with the number of messages missed. A sender
 * holds at most two frames per peer (the batch being filled and one frame ZeroMQ refused);
 * when both are full send() fails with SHOAL_EAGAIN and nothing it accepted is dropped in silence:
 * what never got acknowledged is reported as SHOAL_PEER_LOST (only when the count is not 0) when
 * the peer restarts, is quarantined or disconnected. A new connection (reconnect, restart) is
 * handshaken again at once, so a restart is noticed even when nothing is being sent.
 * shoal_system_on_peer adds a listener (several may listen); registering a NULL handler for a
 * kind removes it.
 *
 * SECURITY. With curve_cert and curve_allow_dir set, every socket the node owns speaks CURVE
 * (ZeroMQ's encryption and authentication, libsodium underneath): its ROUTER is a CURVE server
 * that admits only keys whose public certificate is in the allow-list directory; its DEALERs
 * authenticate with the node's key and check the server key of the node they reach, taken from
 * the directory's certificate whose `endpoint` metadata names that endpoint (shoal-keygen writes
 * it) or learned from the member's record (shoal_system_learn_key). ZeroMQ asks one handler per
 * context; the process has one, which keeps each node's allow-list apart (ZAP domains), so
 * several nodes of one process admit different keys. A refused key, a client without CURVE and a
 * failed handshake are logged (rate-limited) and counted (auth_refused, handshakes_failed). The
 * directory is re-read when it changes (looked at once a second) or on shoal_system_allow_reload;
 * a key taken off it is refused from the next connection on. Upper layers that own sockets
 * (membership's heartbeat) secure them with shoal_system_secure_socket. Clients
 * (shoal_client_new) use SHOAL_CURVE_CERT and SHOAL_CURVE_ALLOW the same way.
 *
 * PROTECTED MODE (the plain transport, as Redis's). A plain node (no curve_cert) whose bound
 * address is not loopback refuses to start (SHOAL_EINVAL, the message names CURVE, allow_from and
 * insecure) unless told who may connect: with allow_from, only connections from those networks
 * pass the ZeroMQ handshake, on the node's ROUTER and on every socket secured with
 * shoal_system_secure_socket (the heartbeat's), whatever the bind address, loopback included;
 * others are refused before Shoal reads a byte from them, counted in auth_refused and logged
 * (the 1st, 2nd, 4th... refusal). `insecure` keeps the open behaviour. Loopback and ipc binds
 * need neither. A CURVE node given allow_from applies it on top of the keys.
 *
 * LISTENERS: MEMORY A STRANGER CAN MAKE A NODE HOLD. Every socket a node binds (this ROUTER,
 * membership's heartbeat ROUTER: shoal_listener_new below; the metrics endpoint) bounds what one
 * connection can make it buffer before anything is trusted, and how many connections it keeps:
 *   - ZMQ_MAXMSGSIZE: a frame announcing more is refused by libzmq when its header arrives (the
 *     connection is reset, before a byte of it is stored). The node's ROUTER takes
 *     max_frame_bytes + 64 KiB (peers and clients learn the node's limit in the handshake and
 *     never send more; a frame a little over it is dropped, counted and logged by the node's own
 *     check instead of resetting the connection); the heartbeat ROUTER 4 KiB (its largest message
 *     is under 800 bytes).
 *   - Connections: libzmq has no per-socket cap, so the node watches each listener's socket
 *     monitor. A connection that has not yet sent a message (a stranger that says nothing or
 *     cannot pass the CURVE / allow_from handshake) is pending: at most
 *     max(64, max_inbound_connections / 4) of them are kept, the oldest closed first when one
 *     more arrives, and each must finish the ZeroMQ handshake within 5 s (ZMQ_HANDSHAKE_IVL).
 *     Only connections that have sent a message count toward max_inbound_connections; one past
 *     it is closed at once. Both counted in connections_refused (evictions also in the
 *     listener's `evicted`), logged at most once a second. So strangers cannot take the slots
 *     of members and clients, and the descriptors they hold stay bounded.
 *   - Kernel socket buffers are the kernel's, not the process's, and are not counted here.
 * WORST CASE, per node, with the defaults (max_frame_bytes 256 KiB, max_inbound_connections
 * 1024), of what connections that have not completed the ZeroMQ handshake can make the process
 * hold — with CURVE that is everyone off the allow-list: per connection one partial frame plus
 * libzmq's own buffers (an 8 KiB read batch with its reference counts, an 8 KiB write batch, the
 * engine and session: 18 to 26 KiB measured with libzmq 4.3.4, 40 KiB allowed here), so
 *     node ROUTER       1024 x (320 KiB + 40 KiB) = 360 MiB    (377,487,360 bytes)
 *     heartbeat ROUTER  1024 x (  4 KiB + 40 KiB) =  44 MiB    ( 46,137,344 bytes)
 *     HTTP endpoint       64 x  68 KiB            = 4.25 MiB   (  4,456,448 bytes)
 *     total                                        ~ 408 MiB   (428,081,152 bytes)
 * and in general max_inbound_connections x (max_frame_bytes + 64 KiB + 4 KiB + 80 KiB) +
 * 4.25 MiB. (The HTTP endpoint's 64 connections: 64 KiB of request line and headers and a 4 KiB
 * body each; each also has a thread, whose stack is address space the kernel backs only as far
 * as it is used.)
 * Before this bound one connection to the heartbeat port could make the node allocate 2 GiB.
 * A connection past the handshake may in addition queue ZMQ_RCVHWM complete messages (1000
 * frames on the node's ROUTER, which the node drains every loop turn; 64 heartbeat messages).
 * One limit libzmq 4.3 does not offer at all: a frame's size is bounded, but not the number of
 * parts of a multipart message, which libzmq keeps until the last part arrives; a peer past the
 * handshake can grow one message without end that way (no bound: it holds what it sends). With
 * CURVE only members on the allow-list get past the handshake, with allow_from only those
 * networks (PROTECTED MODE); on a plain node with neither (loopback, or insecure) anyone does.
 *
 * FAULTS. shoal_system_fault replaces the fault set earlier for the same endpoint; a fault for
 * one endpoint overrides the NULL (every peer) fault in the directions it names. `cut` drops
 * every frame to and from that peer, handshakes and acks included; drop, duplicate and delay act
 * on data frames. Clients are never subject to faults.
 */
#define SHOAL_EAGAIN    -20 /* peer queue full: retry later or report */
#define SHOAL_ENOTCONN  -21 /* no connection (yet) to that peer, or not a peer */
#define SHOAL_ETHREAD   -22 /* called from a thread the call is not for */
#define SHOAL_EDEADLK   -23 /* a synchronous call from the node thread itself */
#define SHOAL_EBUSY     -24 /* too many calls pending for the node thread */
#define SHOAL_ETIMEOUT  -25 /* the operation did not complete in time */
#define SHOAL_ESTOPPED  -26 /* the node is stopping or stopped */
#define SHOAL_EIO       -27 /* socket error (bind, connect) */
#define SHOAL_EKIND     -28 /* no handler for that message kind (a client request's error reply) */
#define SHOAL_EREFUSED  -29 /* the node refused the handshake (wrong address, quarantined) */
#define SHOAL_EKEY      -34 /* CURVE: a certificate or allow-list cannot be read, or no public key
                               is known for the endpoint */

typedef struct shoal_system shoal_system_t;

typedef struct {
    /* Where to bind the ROUTER, e.g. "tcp://127.0.0.1:2552". Port 0 binds an ephemeral port
       (tests); the node id then carries the port actually bound. The host is what peers dial
       (it is the node id's host), so a wildcard (*, 0.0.0.0, ::) is refused, as is a port that
       is not 0..65535 in digits (shoal_endpoint_check_bind). A host name ("tcp://localhost:2552")
       is resolved to its first IPv4 address (else its first IPv6 one), which is bound and which
       the node id and shoal_system_endpoint record (127.0.0.1:2552); a name that does not resolve
       is left to libzmq, which takes it for a network interface. */
    const char *endpoint;
    /* The node's uid; 0 draws a random one (a new incarnation at every start). */
    uint64_t uid;
    /* Largest frame the node sends or accepts, checked before decoding. Akka's default
       maximum-frame-size is 256 KiB. */
    size_t max_frame_bytes;
    /* Frames a DEALER may queue for its peer (ZMQ_SNDHWM; a frame batches one loop turn's
       messages, up to max_frame_bytes); past it sends fail with SHOAL_EAGAIN. So a stalled peer
       costs this node at most peer_send_hwm x max_frame_bytes of queue (the defaults allow
       250 MiB in theory; test_stalled_peer sees a few MB, since the replicator merges a key's
       deltas per tick): lower it to bound memory more tightly. */
    int peer_send_hwm;
    /* How often a receiver acknowledges the sequence numbers it has seen. */
    uint32_t ack_interval_ms;
    /* How often an unanswered handshake is sent again. */
    uint32_t handshake_retry_ms;
    /* Bound on calls and posts waiting for the node thread. */
    uint32_t max_pending_calls;
    /* CURVE (see SECURITY below): the node's certificate (zcert format; the secret part is read
       from curve_cert + "_secret") and the allow-list directory of member public certificates.
       Both NULL: plain transport, for development (logged at start). Defaults come from the
       environment variables SHOAL_CURVE_CERT and SHOAL_CURVE_ALLOW. */
    const char *curve_cert;
    const char *curve_allow_dir;
    /* Connections each listener of the node (its ROUTER, membership's heartbeat ROUTER) keeps
       open at most; one accepted past it is closed at once (LISTENERS above). A member opens one
       to each listener of every other member, a client one: the default, 1024, is a cluster of
       1000 with room for tools. */
    uint32_t max_inbound_connections;
    /* Networks allowed to connect to every listener of the node (CIDR text: "10.0.0.0/8",
       "127.0.0.1/32", "fd00::/8"; a bare address is one host), checked at the ZeroMQ handshake
       by the process's ZAP handler (PROTECTED MODE below). NULL/0: any address. */
    const char *const *allow_from;
    size_t n_allow_from;
    /* A plain node bound to a non-loopback address without allow_from refuses to start unless
       this is set (PROTECTED MODE below). */
    bool insecure;
} shoal_system_settings_t;

void shoal_system_settings_default(shoal_system_settings_t *s);

/* Starts a node: binds, starts its thread. NULL on failure with *err set (SHOAL_EIO for a bind
   failure, SHOAL_EINVAL for bad settings, an endpoint among them: logged with the reason). */
shoal_system_t *shoal_system_new(const shoal_system_settings_t *s, int *err);
/* Stops the node thread, closes its sockets (linger 0) and frees it. NULL-safe. */
void shoal_system_destroy(shoal_system_t **self_p);
/* This node's id (host:port:uid). Thread-safe. */
const shoal_node_t *shoal_system_self(const shoal_system_t *sys);
/* The endpoint actually bound ("tcp://127.0.0.1:40123"). Thread-safe. */
const char *shoal_system_endpoint(const shoal_system_t *sys);
/* True when the caller runs on this node's thread. */
bool shoal_system_on_thread(const shoal_system_t *sys);

/* Runs fn(sys, arg) on the node thread and returns its result. */
typedef int (shoal_call_fn)(shoal_system_t *sys, void *arg);
int shoal_system_call(shoal_system_t *sys, shoal_call_fn *fn, void *arg);
/* Queues fn(sys, arg) to run on the node thread and returns at once. */
int shoal_system_post(shoal_system_t *sys, shoal_call_fn *fn, void *arg);

/* Message kinds: upper layers register a handler per kind (0..0x7fff peer messages,
   0x8000..0xffff client/admin requests). Kinds below 16 are the transport's own. */
#define SHOAL_KIND_CLIENT 0x8000u
typedef void (shoal_recv_fn)(shoal_system_t *sys, const shoal_node_t *from, uint16_t kind,
                             const uint8_t *data, size_t len, void *arg);
/* A client request's reply handle, valid until the handler returns (copy it to reply later). */
typedef struct {
    uint8_t routing_id[16];
    size_t routing_id_len;
    uint64_t request_id;
} shoal_reply_to_t;
typedef void (shoal_request_fn)(shoal_system_t *sys, const shoal_reply_to_t *reply_to,
                                uint16_t kind, const uint8_t *data, size_t len, void *arg);
/* Node thread (an upper layer registers inside shoal_system_call); the handler runs there. */
int shoal_system_register(shoal_system_t *sys, uint16_t kind, shoal_recv_fn *fn, void *arg);
int shoal_system_register_request(shoal_system_t *sys, uint16_t kind, shoal_request_fn *fn,
                                  void *arg);

/* Connects to a peer by endpoint ("tcp://127.0.0.1:2553"); the handshake then learns its id
   and reports SHOAL_PEER_UP. Idempotent. Node thread; from other threads the _sync twin. */
int shoal_system_connect(shoal_system_t *sys, const char *endpoint);
int shoal_system_connect_sync(shoal_system_t *sys, const char *endpoint);
/* Disconnects and forgets a peer. Node thread; from other threads the _sync twin. */
int shoal_system_disconnect(shoal_system_t *sys, const char *endpoint);
int shoal_system_disconnect_sync(shoal_system_t *sys, const char *endpoint);
/* Never accept frames from this incarnation again (a removed or downed node). Node thread. */
int shoal_system_quarantine(shoal_system_t *sys, const shoal_node_t *node);

typedef enum {
    SHOAL_PEER_UP = 1,        /* handshake done: `node` is reachable through its endpoint */
    SHOAL_PEER_RESTARTED = 2, /* a new incarnation answered at the endpoint; `old` was replaced */
    SHOAL_PEER_LOST = 3,      /* `count` messages sent to `node` were never acknowledged */
    SHOAL_PEER_GAP = 4,       /* `count` messages from `node` were missed (sequence gap) */
    SHOAL_PEER_QUARANTINED = 5, /* `node` quarantined this incarnation (it removed us): said in
                                   answer to a handshake or to frames it drops */
} shoal_peer_event_t;
typedef void (shoal_peer_fn)(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
                             const shoal_node_t *old, uint64_t count, void *arg);
/* Adds a listener; fn runs on the node thread. Node thread (from others: inside
   shoal_system_call). */
int shoal_system_on_peer(shoal_system_t *sys, shoal_peer_fn *fn, void *arg);
/* Removes a listener (an upper layer that stops before its node does). Node thread. */
int shoal_system_off_peer(shoal_system_t *sys, shoal_peer_fn *fn, void *arg);

/* Sends one message to a peer (by id; the uid must match the incarnation connected). Queued in
   the peer's batch and flushed at the end of the loop turn. SHOAL_ENOTCONN, SHOAL_EAGAIN,
   SHOAL_ETOOBIG (over the frame limit: the caller must chunk). Node thread. */
int shoal_system_send(shoal_system_t *sys, const shoal_node_t *to, uint16_t kind,
                      const void *data, size_t len);
/* Largest message shoal_system_send accepts (the frame limit less the frame's own header). */
size_t shoal_system_max_message_bytes(const shoal_system_t *sys);
/* Answers a client request. A reply over the frame limit goes in parts to a client that puts
   them back together (REPLIES LARGER THAN A FRAME, at shoal_client_t). SHOAL_ETOOBIG: over the
   client's reply limit (the client is answered SHOAL_ETOOBIG instead); SHOAL_ENOTCONN: the
   client is gone; SHOAL_EAGAIN: its queue is full. Each of these is counted and logged, so the
   caller need not answer again. Node thread. */
int shoal_system_reply(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                       const void *data, size_t len);

/* Timers on the node thread: set and cancelled there (from others: inside shoal_system_call or
   shoal_system_post), fn runs there. Returns a timer id (> 0) or an error. */
typedef void (shoal_timer_fn)(shoal_system_t *sys, void *arg);
int shoal_system_timer(shoal_system_t *sys, uint32_t interval_ms, bool repeat, shoal_timer_fn *fn,
                       void *arg);
int shoal_system_timer_cancel(shoal_system_t *sys, int timer_id);
/* Monotonic milliseconds, as the node's timers see them. */
int64_t shoal_now_ms(void);
/* The CLOCK_REALTIME instant ms from now, as pthread_cond_timedwait takes its deadline: for the
   threads that wait on the node with a bound. */
struct timespec shoal_deadline_in(uint64_t ms);

/* CURVE (SECURITY above). Makes a socket an upper layer owns a CURVE server (server: before
   bind) or a client of the node at `peer_node_endpoint` (before connect), with this node's key
   and allow-list. 0 without doing anything when the node runs plain; SHOAL_EKEY when no key is
   known for the peer. Thread-safe. */
int shoal_system_secure_socket(shoal_system_t *sys, void *zmq_sock, bool server,
                               const char *peer_node_endpoint);
/* True when the node runs CURVE. */
bool shoal_system_secure(const shoal_system_t *sys);

/* Checks an endpoint to bind a listener at: tcp://host:port whose host peers can dial (a
   wildcard — *, 0.0.0.0, ::, any spelling of the unspecified address — cannot be dialed, and it
   would become the node id's host) and whose port is 0..65535 in digits (0: an ephemeral port;
   star_port also admits libzmq's "*" for one), or ipc://path. libzmq itself binds
   "tcp://host:99999" on a port of its choosing and ":-1" on 65535. 0, or SHOAL_EINVAL with the
   reason in why (may be NULL). Thread-safe. */
int shoal_endpoint_check_bind(const char *endpoint, bool star_port, char *why, size_t why_len);

/* Guards a listening socket an upper layer owns (membership's heartbeat ROUTER) as the node
   guards its own ROUTER (LISTENERS above): sets ZMQ_MAXMSGSIZE to max_msg_bytes and ZMQ_RCVHWM to
   recv_hwm (> 0), watches the socket's monitor to close a connection accepted past the node's
   max_inbound_connections, and counts failed ZeroMQ handshakes by cause, logging each cause at
   most once a second with the node's id and `what` ("heartbeat"). Call it before binding, then
   shoal_listener_bound after. The guard belongs to the thread that owns the socket: that thread
   polls shoal_listener_socket for ZMQ_POLLIN, calls shoal_listener_drain, and destroys the guard
   before it closes the socket. NULL with *err (SHOAL_EINVAL, SHOAL_EIO) on failure. */
typedef struct shoal_listener shoal_listener_t;
typedef struct {
    uint64_t accepted; /* connections accepted */
    uint64_t open;     /* connections open now, as the monitor has told */
    /* closed by the guard: max_inbound_connections connections that had sent a message were
       open, or too many had sent nothing (evicted below) */
    uint64_t refused;
    /* connections that ended, for any reason: a peer leaving, a refusal, libzmq resetting one
       that announced a frame over ZMQ_MAXMSGSIZE (its monitor says no more than that it closed) */
    uint64_t closed;
    /* every failed ZeroMQ handshake, of which: the other side asked for another security
       mechanism (CURVE on a plain node, or plain on a CURVE node); its CURVE key was refused (not
       on the allow-list); malformed ZMTP (not a ZeroMQ peer, or a broken one); closed, or timed
       out, before the handshake was complete (a port scan, a health check, a client that sent
       nothing; not counted when the node closed it itself, refusing it) */
    uint64_t handshakes_failed;
    uint64_t handshakes_mismatched, handshakes_auth, handshakes_protocol, handshakes_incomplete;
    /* of `refused`: connections closed because more than max(64, max_inbound_connections / 4)
       had sent nothing yet (the oldest goes first) */
    uint64_t evicted;
} shoal_listener_stats_t;
shoal_listener_t *shoal_listener_new(shoal_system_t *sys, void *zmq_sock, const char *what,
                                     int64_t max_msg_bytes, int recv_hwm, int *err);
/* After a successful bind: learns the port (or ipc path) its connections are accepted on. */
int shoal_listener_bound(shoal_listener_t *l);
/* The monitor socket to poll for ZMQ_POLLIN. */
void *shoal_listener_socket(shoal_listener_t *l);
/* Handles the events waiting (a bounded number per call). */
void shoal_listener_drain(shoal_listener_t *l);
/* The owner calls it with the descriptor of every message it receives on the guarded socket
   (zmq_msg_get(msg, ZMQ_SRCFD)): a connection that has sent a message is past the ZMTP handshake
   (with CURVE or allow_from, authenticated) and counts toward max_inbound_connections; the
   others (pending) have their own cap, max(64, max_inbound_connections / 4), the oldest closed
   first, and 5 s to finish the ZMTP handshake (ZMQ_HANDSHAKE_IVL). */
void shoal_listener_seen(shoal_listener_t *l, int fd);
void shoal_listener_stats(const shoal_listener_t *l, shoal_listener_stats_t *out);
/* Stops the monitor and frees the guard; the socket itself stays open. NULL-safe. */
void shoal_listener_destroy(shoal_listener_t **self_p);

/* For the loops of threads that own many ZeroMQ sockets (the node's, membership's heartbeat
   actor): zmq_poll reads ZMQ_EVENTS of every socket it is given at every wake-up, two system calls
   each, so a loop over a socket per peer costs O(members) per wake-up. Such a loop waits on an
   epoll set over each socket's ZMQ_FD instead and reads shoal_zmq_events only for the sockets
   whose fd was readable, those it sent on since it last read them, and those a drain left
   messages on (a ZMQ_FD announces commands, not messages; libzmq's rules) — THE LOOP in
   system.c. shoal_zmq_fd: the socket's ZMQ_FD (-1 on error); shoal_zmq_events: its ZMQ_EVENTS
   (0 on error). */
int shoal_zmq_fd(void *zmq_sock);
int shoal_zmq_events(void *zmq_sock);
/* The node's public key (Z85, 40 characters), or NULL when plain. Thread-safe. */
const char *shoal_system_public_key(const shoal_system_t *sys);
/* Remembers the public key (Z85) of the member listening at `endpoint`, to connect to it; it
   does not admit that key. Thread-safe. */
int shoal_system_learn_key(shoal_system_t *sys, const char *endpoint, const char *public_z85);
/* Re-reads the allow-list directory now; the number of keys on it. Thread-safe. */
int shoal_system_allow_reload(shoal_system_t *sys);

/* Fault injection (tests): applies to frames between this node and `peer_endpoint` (NULL = every
   peer), on the node's every socket. drop and duplicate are probabilities in [0,1]. */
typedef enum { SHOAL_FAULT_IN = 1, SHOAL_FAULT_OUT = 2, SHOAL_FAULT_BOTH = 3 } shoal_fault_dir_t;
typedef struct {
    shoal_fault_dir_t dir;
    bool cut;         /* drop everything */
    double drop;      /* drop this fraction */
    double duplicate; /* deliver this fraction twice */
    uint32_t delay_ms;/* hold every frame this long */
} shoal_fault_t;
int shoal_system_fault(shoal_system_t *sys, const char *peer_endpoint, const shoal_fault_t *f);
/* Removes every fault. */
int shoal_system_heal(shoal_system_t *sys);
/* The fault in force between this node and `peer_endpoint` in one direction (SHOAL_FAULT_IN or
   SHOAL_FAULT_OUT), for sockets a node's upper layers own (membership's heartbeat actor), so a
   test's fault reaches them too. Thread-safe. */
int shoal_system_fault_get(shoal_system_t *sys, const char *peer_endpoint, shoal_fault_dir_t dir,
                           shoal_fault_t *out);

/* Counters since start. frames and bytes count every frame on the node's sockets, data and
   control; messages_in counts messages handed to handlers, messages_out those send() or reply()
   accepted. gaps, lost_unacked and duplicates count messages (the sums of the PEER_GAP and
   PEER_LOST counts, and of messages received twice and dropped). dropped_wrong_incarnation counts
   sends to another incarnation of a connected peer; send_notconn other sends without a peer.
   handshakes counts handshakes accepted (ROUTER) and completed (DEALER); handshakes_refused those
   this node refused. peers is the number of outbound peers connected now. */
typedef struct {
    uint64_t frames_in, frames_out, bytes_in, bytes_out, messages_in, messages_out;
    uint64_t dropped_oversized, dropped_malformed, dropped_unknown_kind, dropped_quarantined,
        dropped_wrong_incarnation, dropped_not_handshaken, dropped_fault;
    uint64_t send_eagain, send_notconn, gaps, lost_unacked, duplicates;
    uint64_t handshakes, peers;
    uint64_t handshakes_refused;
    /* CURVE: connections the allow-list admitted and refused, handshakes that failed at the
       ZeroMQ level on the ROUTER (a refused key, a client without CURVE, garbage, a connection
       closed before its handshake was complete), and the keys on the allow-list */
    uint64_t auth_admitted, auth_refused, handshakes_failed, allow_keys;
    /* The ROUTER's connections (shoal_listener_stats_t): refused past max_inbound_connections,
       open now; and, among handshakes_failed, those of another security mechanism and those
       closed or timed out before they were complete */
    uint64_t connections_refused, connections_open;
    uint64_t handshakes_mismatched, handshakes_incomplete;
    /* client replies: those sent in parts (replies_in_parts, in reply_parts frames), and those
       that did not reach their client whole, by reason: the client was gone (disconnected, or
       forgotten after a minute without a request), its queue was full (it stopped reading), or
       the reply was over what the client reassembles (it was answered SHOAL_ETOOBIG) */
    uint64_t replies_in_parts, reply_parts;
    uint64_t replies_dropped_gone, replies_dropped_full, replies_too_big;
} shoal_system_stats_t;
int shoal_system_stats(shoal_system_t *sys, shoal_system_stats_t *out);

/* PROTOCOL VERSION (docs/protocol-versions.md). The messages a node sends (message kinds and
   their formats, the cluster state, deltas, client requests) are versioned by one number, the
   protocol version, separate from the wire version of the framing (every frame keeps wire
   version 1). A build speaks SHOAL_PROTOCOL_MIN..SHOAL_PROTOCOL_MAX; protocol 1 is the messages
   exactly as 0.1.x (672634c) sends them. A node says its range in its handshake; a peer or
   client that says none speaks exactly 1. The version a system sends at is set by membership
   (the highest version every member speaks, see membership.h) or, without membership, by the
   program; until then it is SHOAL_PROTOCOL_MIN. A sender with a newer format asks
   shoal_system_protocol and never sends that format below its version.
   SHOAL_PROTOCOL_NEXT builds a test variant speaking one version more (one message changed). */
#define SHOAL_PROTOCOL_MIN 1u
#ifdef SHOAL_PROTOCOL_NEXT
#define SHOAL_PROTOCOL_MAX 2u
#else
#define SHOAL_PROTOCOL_MAX 1u
#endif
/* Sets the version the system sends at: SHOAL_EINVAL outside MIN..MAX (node thread). */
int shoal_system_set_protocol(shoal_system_t *sys, uint32_t version);
/* THE PIN (shoal/cluster/protocol-version; Kafka's inter.broker.protocol.version): the highest
   version this node announces to its cluster and so sends at, whatever its build speaks; 0 (the
   default) is the build's SHOAL_PROTOCOL_MAX. Operators pin every member to the previous
   release's version before an upgrade to keep a rollback possible after the last node is
   upgraded, and remove the pin (a restart of each member) once they are sure. Set it before
   shoal_cluster_new (any thread; a value above the build's is the build's). A function, not a
   settings field: a field would grow shoal_cluster_settings_t, the public ABI of 0.1.x. */
void shoal_system_pin_protocol(shoal_system_t *sys, uint32_t version);
/* The version this node announces: the pin, capped to SHOAL_PROTOCOL_MIN..MAX. */
uint32_t shoal_system_protocol_pin(const shoal_system_t *sys);
/* The version the system sends at now (any thread: a plain read of one word). */
uint32_t shoal_system_protocol(const shoal_system_t *sys);
/* The highest protocol version a connected peer said it speaks in its handshake (1 for a peer
   that said none), or 0 when `node` is not a connected peer (node thread). */
uint32_t shoal_system_peer_protocol(shoal_system_t *sys, const shoal_node_t *node);

/* A client of a node (tools, examples): a DEALER that handshakes as a client and sends requests.
   Not thread-safe: one thread per client.
   REPLIES LARGER THAN A FRAME. A reply over the node's frame limit (max_frame_bytes, 256 KiB by
   default: a replicated map of a few thousand entries) is sent in parts under the limit and put
   back together by the client, up to the client's reply limit (64 MiB by default, as the
   replicator's max_reassembly_bytes; shoal_client_set_max_reply). A larger reply is refused by
   the node with SHOAL_ETOOBIG, said at once rather than left to time out, and
   shoal_client_error says why. On the node every reply that does not reach its client whole (the
   client gone, its queue full, over its limit) is counted (replies_dropped_gone,
   replies_dropped_full, replies_too_big) and logged. */
typedef struct shoal_client shoal_client_t;
shoal_client_t *shoal_client_new(const char *endpoint, uint32_t timeout_ms, int *err);
/* A client that authenticates with CURVE: its certificate and the directory holding the node's
   public certificate (with `endpoint` metadata). shoal_client_new does this with the environment
   variables SHOAL_CURVE_CERT and SHOAL_CURVE_ALLOW when both are set. */
shoal_client_t *shoal_client_new_curve(const char *endpoint, uint32_t timeout_ms,
                                       const char *cert_file, const char *allow_dir, int *err);
void shoal_client_destroy(shoal_client_t **self_p);
/* When shoal_client_new(_curve) fails, shoal_last_error_detail() says why in words where the
   code does not say it all: a refused handshake (SHOAL_EREFUSED) says "the node runs CURVE: not
   a CURVE client (...)", "the node refused this client's CURVE key: key not on the allow-list
   (...)" or "the node does not run CURVE, this client does". A refused handshake ends the
   attempt at once, not at the timeout. */
/* Sends a request and waits for its reply (replaces reply's contents); the reply's status when
   the node answered with an error. SHOAL_ETOOBIG: the request is over the node's frame limit, or
   the reply over the client's reply limit; SHOAL_ETIMEOUT: no whole reply within timeout_ms (0:
   the client's timeout). */
int shoal_client_request(shoal_client_t *c, uint16_t kind, const void *data, size_t len,
                         uint16_t *reply_kind, shoal_buf_t *reply, uint32_t timeout_ms);
/* The largest reply the client puts back together from parts, 1 byte to 1 GiB (default 64 MiB).
   The node is told at the next request (a new handshake) and refuses larger replies with
   SHOAL_ETOOBIG. SHOAL_EINVAL out of range. */
int shoal_client_set_max_reply(shoal_client_t *c, size_t bytes);
/* The timeout of the client's later requests (0: the default, 3 s), for a caller that gave
   shoal_client_new a short one to learn soon whether a node answers at all (shoal-cluster probes
   for an HTTP server when the handshake does not complete in a second). */
void shoal_client_set_timeout(shoal_client_t *c, uint32_t timeout_ms);
/* Why the client's last request failed, in words, when the client knows more than the code says
   (a reply over its limit, a reply cut short): "" otherwise. Valid until the next request. */
const char *shoal_client_error(const shoal_client_t *c);

/* =============================================================================================
 * THE REPLICATOR
 *
 * A replicator keeps keys of any CRDT type replicated across a set of peer nodes. A node may run
 * several, one per role, each with its own peer set; the program (or, later, membership) tells a
 * replicator its peers. Everything here runs on the node thread, except what says otherwise:
 * new and destroy, stats, system and role, and the _sync twins, for any other thread.
 *
 * OPERATIONS. Get reads a key with a read consistency; Update applies a modify function to the
 * key's value (starting from an initial value when the key is missing) with a write consistency;
 * Delete leaves a tombstone (a deleted key stays deleted: later Get/Update/Delete say so).
 * Consistency levels: LOCAL; FROM_N (ReadFrom n / WriteTo n, n counting this node); MAJORITY
 * (floor(N/2)+1 of the N nodes including self, never fewer than min_cap, plus `plus` more, never
 * more than N — Akka's calculation, per operation); ALL. A write that does not reach enough nodes
 * in time reports SHOAL_ETIMEOUT but stays applied locally and is gossiped later; a level that
 * cannot be met with the current peers at all reports SHOAL_ETIMEOUT at once. A read merges the
 * replies with the local value, repairs the local replica and sends the merged value to the
 * replicas that answered with less. Reads see the node's own writes; a majority read after a
 * majority write sees the write (the two majorities overlap). Peers that receive data but do not
 * count toward majorities (membership's Joining and WeaklyUp members) are added uncounted.
 *
 * DISSEMINATION. Local updates of delta types accumulate per key; every delta interval the
 * replicator sends, to a rotating slice of peers, each key's deltas since what that peer was last
 * sent, numbered per (key, origin). A receiver applies a delta of a causal type only in order and
 * asks for full state on a gap. Every gossip interval it runs full-state anti-entropy with one
 * peer: digests of the keys (XXH3-128 of the canonical encoding) are folded into buckets, so two
 * replicas that agree exchange one small status message; where buckets differ, key digests are
 * compared and only the keys that differ are sent. Messages above the compression threshold are
 * compressed with zlib; a message above the node's frame limit (a large value) is sent in chunks
 * and reassembled, so no frame ever exceeds the limit.
 *
 * PRUNING. When a node leaves for good (shoal_replicator_node_removed), its contribution to every
 * key is folded into a surviving node in a coordinated round: the designated node (the lowest node
 * id among the replicator's nodes) marks each key "pruning initialized", the marker spreads by
 * gossip, and once every current peer has seen it the designated node prunes and marks it
 * "performed", writing its plan (shoal_prune_plan_t) into the marker; state and deltas arriving
 * later from a replica that still holds the removed node's part are cleaned by that plan
 * (shoal_crdt_prune_cleanup) before they are merged. Values do not change while pruning runs.
 *
 * TOMBSTONES of deleted keys are collected after tombstone_ttl_ms, but only once every current
 * peer has been seen holding them; the names of collected keys are then refused for another
 * tombstone_ttl_ms, so a replica that was away cannot gossip the key back.
 *
 * STORAGE. Values are kept through a store interface (shoal_store_t). Keys named durable (exact
 * names, or prefixes ending in '*') are written to the store, and an update of a durable key, or a
 * remote replica's acknowledgement of one, comes only after the store has it (SHOAL_ESTORE when
 * the store fails). On start the replicator loads the store before it serves: operations that
 * arrive meanwhile wait, replica count is 0, gossip is not answered. A load that fails (the store
 * is corrupt or unreadable) stops the replicator rather than serve as if empty: every operation
 * (get, update, delete, keys, subscribe) fails with SHOAL_ESTORE (counted in store_failures),
 * it answers no peer and sends no gossip, replica count stays 0; logged once as an error.
 */
#define SHOAL_EDELETED  -30 /* the key was deleted */
#define SHOAL_EMODIFY   -31 /* the modify function failed (the value is unchanged) */
#define SHOAL_ESTORE    -32 /* the durable store failed */
#define SHOAL_ESTALE    -33 /* a replica's admit check refused the write (a stale writer) */
#define SHOAL_ENOQUORUM -35 /* MAJORITY or ALL refused: this node is not a full member of a cluster
                               (not Up, Leaving or Exiting), or fewer voters (the kept membership)
                               are peers than a majority of them: no majority can be counted */
#define SHOAL_ELIMIT    -36 /* a configured limit is reached (LIMITS, here and in sharding.h) */

typedef enum {
    SHOAL_LOCAL = 0,
    SHOAL_FROM_N = 1, /* ReadFrom(n) / WriteTo(n) */
    SHOAL_MAJORITY = 2,
    SHOAL_ALL = 3,
} shoal_level_t;

typedef struct {
    shoal_level_t level;
    uint32_t n;          /* FROM_N: nodes including this one */
    uint32_t timeout_ms; /* all but LOCAL */
    uint32_t min_cap;    /* MAJORITY: at least this many nodes (Akka's minCap; default 0) */
    uint32_t plus;       /* MAJORITY: this many more than a majority (default 0) */
    bool prefer_oldest;  /* ask the oldest nodes first (Akka's prefer-oldest) */
} shoal_consistency_t;

/* A store of serialized values by key (bytes in, bytes out: the store knows no CRDT type). */
typedef void (shoal_store_done_fn)(void *arg, int status);
typedef void (shoal_store_each_fn)(void *arg, const char *key, size_t klen, const void *data,
                                   size_t len);
typedef struct {
    /* Calls each(key, bytes) for every stored entry, then returns 0 or an error. */
    int (*load)(void *ctx, shoal_store_each_fn *each, void *each_arg);
    /* Stores (data != NULL) or removes (data == NULL) a key; calls done(arg, status) when it is
       durable — on the node thread, possibly before returning. */
    void (*store)(void *ctx, const char *key, size_t klen, const void *data, size_t len,
                  shoal_store_done_fn *done, void *done_arg);
    void (*close)(void *ctx);
    void *ctx;
} shoal_store_t;

/* A store in memory (tests, and the default): behaves like a durable store within the process.
   shoal_memstore_fail makes its next `count` writes fail with SHOAL_ESTORE (fault injection). */
shoal_store_t *shoal_memstore_new(void);
void shoal_memstore_fail(shoal_store_t *store, int count);
size_t shoal_memstore_size(shoal_store_t *store);
void shoal_memstore_destroy(shoal_store_t **self_p);

typedef struct {
    const char *pattern; /* exact key, or a prefix ending in '*' */
    uint64_t after_ms;   /* dropped after this long without access */
} shoal_expiry_t;

typedef struct shoal_replicator shoal_replicator_t;

/* Chooses the gossip peer for a round among `n` candidates (the policy of the system replicator
   is membership's); NULL = uniformly at random. Returns an index < n, or n to skip the round. */
typedef size_t (shoal_gossip_choose_fn)(shoal_replicator_t *r, const shoal_node_t *const *peers,
                                        size_t n, void *arg);

typedef struct {
    const char *role;                        /* "" for the default replicator */
    uint32_t gossip_interval_ms;             /* gossip-interval, 2 s */
    uint32_t delta_interval_ms;              /* gossip-interval / 5, as Akka's delta propagation */
    uint32_t notify_subscribers_interval_ms; /* notify-subscribers-interval, 500 ms */
    uint32_t max_delta_elements;             /* max-delta-elements, 500 keys per message */
    uint32_t max_delta_size;                 /* delta-crdt.max-delta-size: keys whose pending
                                                deltas span more updates ship full state, 50 */
    bool delta_enabled;                      /* delta-crdt.enabled, on */
    uint32_t pruning_interval_ms;            /* pruning-interval, 120 s; 0 = off */
    uint32_t max_pruning_dissemination_ms;   /* max-pruning-dissemination, 300 s */
    uint64_t pruning_marker_ttl_ms;          /* pruning-marker-time-to-live, 6 h */
    uint64_t durable_pruning_marker_ttl_ms;  /* durable.pruning-marker-time-to-live, 10 d: the
                                                markers of durable keys; a store whose newest
                                                write is older is not gossiped until synced */
    uint64_t tombstone_ttl_ms;               /* deleted keys are collected after this, 1 day */
    size_t compress_above_bytes;             /* zlib above this size, 32 KiB */
    size_t max_reassembly_bytes;             /* largest chunked message accepted, 64 MiB */
    bool prefer_oldest;                      /* prefer-oldest default for operations */
    const char *const *durable_keys;         /* durable.keys: names or prefixes ending in '*' */
    size_t n_durable_keys;
    const shoal_expiry_t *expire_keys;       /* expire-keys-after-inactivity */
    size_t n_expire_keys;
    shoal_store_t *store;                    /* NULL: durable keys are kept in memory only */
    shoal_gossip_choose_fn *gossip_choose;   /* NULL: a random peer */
    void *gossip_choose_arg;
    uint32_t max_pending_ops;                /* operations in flight before SHOAL_EBUSY, 100000 */
    uint32_t gossip_ttl_ms;                  /* pushes later than this are dropped on receipt
                                                (membership's gossip-time-to-live; late beyond
                                                the fastest push seen from that sender, so the
                                                senders' wall clocks need not agree); 0 = off */
} shoal_replicator_settings_t;

void shoal_replicator_settings_default(shoal_replicator_settings_t *s);

/* Creates the replicator of s->role on the node (from any thread). NULL with *err on failure
   (SHOAL_EINVAL: a role already has a replicator on this node, or bad settings). */
shoal_replicator_t *shoal_replicator_new(shoal_system_t *sys, const shoal_replicator_settings_t *s,
                                         int *err);
void shoal_replicator_destroy(shoal_replicator_t **self_p);
shoal_system_t *shoal_replicator_system(shoal_replicator_t *r);
const char *shoal_replicator_role(const shoal_replicator_t *r);

/* Peers. `counted` = counts toward majorities; `age` orders peers for prefer-oldest (lower =
   older; membership's up-number). Node thread; from other threads the _sync twins below
   (membership, when it runs, keeps the peers of the replicators it follows itself). */
int shoal_replicator_add_peer(shoal_replicator_t *r, const shoal_node_t *node, bool counted,
                              uint64_t age);
int shoal_replicator_remove_peer(shoal_replicator_t *r, const shoal_node_t *node);
/* The node left for good: stop talking to it and prune its contribution to every key. */
int shoal_replicator_node_removed(shoal_replicator_t *r, const shoal_node_t *node);
/* Sends the full state of a key to one node now (which need not be a peer: a node that is
   joining), outside the gossip rounds; for an upper layer with its own dissemination policy
   (membership's gossip). The receiver merges it and, when its own state had something the push
   lacked, pushes its state back (push-pull). SHOAL_ENOTFOUND when the key has no value here. */
int shoal_replicator_push(shoal_replicator_t *r, const char *key, const shoal_node_t *to);
/* The local replica's value of a key (borrowed: valid until the node thread changes it), NULL
   when missing, deleted or not loaded yet. Node thread only; no copy, no round trip. */
const shoal_crdt_t *shoal_replicator_peek(shoal_replicator_t *r, const char *key);
/* QUORUM GATE. A replicator that follows a cluster is told by membership whether its node is a
   full member (Up, Leaving or Exiting): only then do MAJORITY and ALL, reads and writes, run. While
   the gate is closed (a node that has not joined, is Joining or WeaklyUp, Down, Removed, or was
   restarted and not yet let back in) they complete with SHOAL_ENOQUORUM without touching the local
   replica (on the next loop turn, never inside the call: a caller that retries from its
   completion does not recurse): a majority of the peers a lone node happens to know is not a majority of the cluster.
   Refusals are counted (no_quorum); each change of the gate is logged once, with `why`. LOCAL and
   FROM_N are unaffected. A replicator nobody gates (the ddata API over a static peer list) counts
   its configured peers, reachable or not, as before.
   CATCHING UP. When the gate opens (the node became a full member: new, or restarted), its replica
   may lack writes that a majority acknowledged before it counted (while the cluster was smaller,
   say, or by its own earlier incarnation, whose copy is gone). Until it has caught up, a MAJORITY
   read there does not count its own copy and needs N - (N/2 + 1) + 1 answers of the N counted
   nodes from peers that are not catching up (one more than usual when N is odd; a read under
   way when it catches up then needs the usual count only), and its peers'
   reads are held and answered once it has caught up (counted: catch_ups, reads_deferred,
   reads_deferred_dropped past 4096 held). Writes are unaffected. Syncing is an anti-entropy
   exchange (sent to every counted peer at once on the next loop turn and on every gossip tick);
   it gives this replica everything the peer held when it answered.
   THE RULE (repl_catch_up_done in replicator.c). Let O be the counted peers older than this node
   (age = membership's up-number, given by shoal_replicator_set_age; all counted peers when the
   age is unknown), oldest first, o_1..o_m. The replica has caught up once, for every p in 1..m,
   it has synced with at least floor(p/2) + 1 of o_1..o_p (peers synced with that stopped counting
   no longer count toward it). The oldest member (m = 0) is caught up at once; the second oldest
   needs the oldest; the third both older ones; the youngest of 5 the two oldest and one more of
   each larger prefix.
   THE ARGUMENT. Assumptions: (A1) a write's coordinator counts the members Up when it writes,
   and up-numbers grow in the order members become Up (so the counted set of any moment before
   this node was Up, restricted to members still here, is an age-prefix of O); (A2) between a
   write and a read at most one member of the write's counted set stops counting (removed, or
   restarted as a new incarnation: a different member); (A3) a replica that acknowledged a write
   keeps it for the life of its incarnation. Take a write W acknowledged by a majority Q of a
   counted set C, and a later MAJORITY read at R counting the set C'.
   (1) A member Y of C' that was not in C became Up after W (A1), so it synced after W, and the
   members of C still counted at its catch-up form an age-prefix P of its O, of p members, besides
   at most one gone member g (A2; perhaps Y's earlier life). Q has floor(|C|/2) + 1 of C, so at
   least ceil(p/2) of P whether |C| is p or p + 1; Y synced with floor(p/2) + 1 of P; ceil(p/2) +
   floor(p/2) + 1 = p + 1 > p, so they share a member that held W when Y synced with it: once
   caught up, Y holds W.
   (2) A read at R merges R's own copy (counted only once R has caught up) with the answers of
   peers that are not catching up (those hold theirs back). By (1) only members of C - Q may lack
   W among them: at most ceil(|C|/2) - 1, with |C| <= n + 1 for n = |C'| (A2). A caught-up R
   takes itself and floor(n/2) others: floor(n/2) + 1 > ceil((n+1)/2) - 1. A catching-up R takes
   ceil(n/2) others: if R is in Q its own copy has W; if R is in C - Q, at most ceil((n+1)/2) - 2
   others lack it; if R is not in C, |C| <= n and at most ceil(n/2) - 1 do. In every case a
   replica holding W is taken.
   Not covered: a stale coordinator's view (A1), a cluster that shrank by more than one member of
   C since W (the kept membership below covers a restart of every node), a replica that lost an
   acknowledged write without a new incarnation (a store without synced writes).
   Why ages: the founders of a cluster are not equal. Without min-nr-of-members the first seed is
   Up alone and acknowledges MAJORITY writes by itself, so every later member must sync with it;
   a member Up at the same time as another or after it (a younger up-number) cannot have
   acknowledged a write this node missed before it counted, so it is not waited for: with the
   youngest of three unreachable, the two others keep serving MAJORITY reads and writes (the rule
   of 672634c, N - (N/2 + 1) + 1 synced peers of any age, waited for it and, in the other
   direction, let four newcomers count after syncing only with each other). Node thread. */
int shoal_replicator_set_quorum_gate(shoal_replicator_t *r, bool open, const char *why);
/* This node's age: membership's up-number (lower = older; 0 = unknown, the default), which the
   catch-up rule above compares with its peers' ages. Membership sets it before opening the gate.
   Node thread. */
int shoal_replicator_set_age(shoal_replicator_t *r, uint64_t age);
/* Removes the gate (membership stops following the replicator). Node thread. */
int shoal_replicator_clear_quorum_gate(shoal_replicator_t *r);
/* VOTERS: the kept membership (membership's durable identities, see membership.h). With
   n_voters > 0, MAJORITY and ALL, reads and writes, need besides their usual answers a majority
   of the n_voters to have answered (this node counting when self_votes), from peers marked with
   shoal_replicator_peer_votes. So a majority acknowledged before a restart of every node and a
   majority read after it share a node, whatever the new cluster looks like. When fewer voters
   are peers than that majority, they complete with SHOAL_ENOQUORUM before anything changes.
   n_voters = 0 (the default) turns it off. Node thread. */
int shoal_replicator_set_voters(shoal_replicator_t *r, size_t n_voters, bool self_votes);
int shoal_replicator_peer_votes(shoal_replicator_t *r, const shoal_node_t *node, bool voter);
/* Nodes counted toward majorities, this one included; 0 while loading. Node thread (0 and a
   logged refusal elsewhere); from other threads shoal_replicator_replica_count_sync. */
size_t shoal_replicator_replica_count(shoal_replicator_t *r);

typedef void (shoal_get_done_fn)(shoal_replicator_t *r, int status, const char *key,
                                 const shoal_crdt_t *value, void *arg);
typedef void (shoal_update_done_fn)(shoal_replicator_t *r, int status, const char *key, void *arg);
/* The modify function of an update: changes `value` in place (for a missing key it is the
   update's `initial` value itself, for an existing key a copy of the current value); a nonzero
   return is a modify failure and leaves the key as it was. */
typedef int (shoal_update_fn)(shoal_crdt_t *value, void *arg);

/* Completions (done) run on the node thread, and may run before the call that started them
   returns (a LOCAL read or write, a write to a write-behind store, an error found at once): after
   the call, touch nothing that a completion may have released or handed to another thread.
   Get: done(status, value) with SHOAL_OK and the value (borrowed for the call), SHOAL_ENOTFOUND,
   SHOAL_ETIMEOUT, SHOAL_EDELETED, or SHOAL_ETYPE (the key holds another type; type NULL = any). */
int shoal_replicator_get(shoal_replicator_t *r, const char *key, const shoal_type_t *type,
                         const shoal_consistency_t *c, shoal_get_done_fn *done, void *arg);
/* Update: done(status) with SHOAL_OK, SHOAL_ETIMEOUT (applied locally, gossiped later),
   SHOAL_EMODIFY, SHOAL_EDELETED, SHOAL_ESTORE or SHOAL_ETYPE.
   THE CALL TAKES *initial_p AND SETS IT TO NULL, whatever it returns: the value becomes the key's
   first value when the key is missing, and is destroyed otherwise (and on every error,
   SHOAL_ETHREAD included). The caller's pointer is NULL after the call, so a program that still
   destroys it afterwards destroys nothing:
       shoal_crdt_t *cart = shoal_orset_new();
       shoal_replicator_update_take(r, "cart", &cart, &c, add_item, item, done, ctx);
   To start many updates from one template, pass a shoal_crdt_clone(template) each time. Node
   thread; from other threads use shoal_replicator_update_take_sync. */
int shoal_replicator_update_take(shoal_replicator_t *r, const char *key, shoal_crdt_t **initial_p,
                                 const shoal_consistency_t *c, shoal_update_fn *modify,
                                 void *modify_arg, shoal_update_done_fn *done, void *arg);
/* DEPRECATED, kept for compatibility: shoal_replicator_update_take with `initial` passed by value.
   It takes ownership of `initial` since the build of 2026-11-28 ("0.1.x-2026-11-28"); in 0.1.0
   the caller kept it, and a program written for 0.1.0 that destroys `initial` after the call
   frees it twice. Use shoal_replicator_update_take(..., &initial, ...), or
   shoal_replicator_update_typed when a missing key starts empty (CHANGELOG.md). */
SHOAL_DEPRECATED("takes ownership of initial since 0.1.x-2026-11-28: use "
                 "shoal_replicator_update_take(&initial) or shoal_replicator_update_typed")
int shoal_replicator_update(shoal_replicator_t *r, const char *key, shoal_crdt_t *initial,
                            const shoal_consistency_t *c, shoal_update_fn *modify, void *modify_arg,
                            shoal_update_done_fn *done, void *arg);
/* The same for a key whose missing value starts as the empty value of `type`
   (shoal_crdt_new(type)), made only when the key is missing: an update of an existing key
   allocates no initial value (a counter updated many times a second). Node thread; from other
   threads shoal_replicator_update_typed_sync. */
int shoal_replicator_update_typed(shoal_replicator_t *r, const char *key, const shoal_type_t *type,
                                  const shoal_consistency_t *c, shoal_update_fn *modify,
                                  void *modify_arg, shoal_update_done_fn *done, void *arg);
/* Delete: done(status) with SHOAL_OK, SHOAL_ETIMEOUT, SHOAL_EDELETED (already), SHOAL_ESTORE. */
int shoal_replicator_delete(shoal_replicator_t *r, const char *key, const shoal_consistency_t *c,
                            shoal_update_done_fn *done, void *arg);

typedef enum { SHOAL_CHANGED = 1, SHOAL_DELETED = 2, SHOAL_EXPIRED = 3 } shoal_change_t;
typedef void (shoal_changed_fn)(shoal_replicator_t *r, shoal_change_t change, const char *key,
                                const shoal_crdt_t *value, void *arg);
/* Subscribes to a key, or to every key with a prefix ("cart-*"). Notifications are batched on
   the notify interval (or sent at once by shoal_replicator_flush); a change that leaves the value
   equal notifies nothing; a new subscriber is told the current value. Returns an id > 0. fn runs
   on the node thread. Node thread; from other threads shoal_replicator_subscribe_sync (and
   unsubscribe_sync, flush_sync). flush elsewhere is refused and logged. */
int shoal_replicator_subscribe(shoal_replicator_t *r, const char *key_or_prefix,
                               shoal_changed_fn *fn, void *arg);
int shoal_replicator_unsubscribe(shoal_replicator_t *r, int id);
void shoal_replicator_flush(shoal_replicator_t *r);

/* Every live key (not deleted), in no particular order; stop by returning nonzero (that value is
   returned). fn runs inside the call, on the node thread. Node thread; from other threads
   shoal_replicator_keys_sync. */
typedef int (shoal_key_fn)(const char *key, const shoal_type_t *type, void *arg);
int shoal_replicator_keys(shoal_replicator_t *r, shoal_key_fn *fn, void *arg);

/* THE _sync TWINS, for every other thread (main, tools, tests): each hands its node-thread call
   to the node (shoal_system_call) and waits for the result; SHOAL_EDEADLK on the node thread
   itself, SHOAL_ESTOPPED once the node stops. Callbacks they register (subscribe_sync's fn) still
   run on the node thread.
   get_sync hands the caller a copy of the value in *out (NULL when not found; the caller
   destroys it); the wait is the operation's timeout plus 30 s. update_take_sync takes
   *initial_p and sets it to NULL as update_take does (every path); update_sync is deprecated as
   update is. */
int shoal_replicator_get_sync(shoal_replicator_t *r, const char *key, const shoal_type_t *type,
                              const shoal_consistency_t *c, shoal_crdt_t **out);
int shoal_replicator_update_take_sync(shoal_replicator_t *r, const char *key,
                                      shoal_crdt_t **initial_p, const shoal_consistency_t *c,
                                      shoal_update_fn *modify, void *modify_arg);
SHOAL_DEPRECATED("takes ownership of initial since 0.1.x-2026-11-28: use "
                 "shoal_replicator_update_take_sync(&initial) or "
                 "shoal_replicator_update_typed_sync")
int shoal_replicator_update_sync(shoal_replicator_t *r, const char *key, shoal_crdt_t *initial,
                                 const shoal_consistency_t *c, shoal_update_fn *modify,
                                 void *modify_arg);
int shoal_replicator_update_typed_sync(shoal_replicator_t *r, const char *key,
                                       const shoal_type_t *type, const shoal_consistency_t *c,
                                       shoal_update_fn *modify, void *modify_arg);
int shoal_replicator_delete_sync(shoal_replicator_t *r, const char *key,
                                 const shoal_consistency_t *c);
/* Peers, from other threads: for a program that keeps its own peer list (the ddata API without
   membership), typically from main after shoal_system_connect_sync. */
int shoal_replicator_add_peer_sync(shoal_replicator_t *r, const shoal_node_t *node, bool counted,
                                   uint64_t age);
int shoal_replicator_remove_peer_sync(shoal_replicator_t *r, const shoal_node_t *node);
int shoal_replicator_node_removed_sync(shoal_replicator_t *r, const shoal_node_t *node);
/* Subscribes from another thread: the id (> 0) or an error. fn runs on the node thread, as for
   shoal_replicator_subscribe; it must not block nor call _sync functions of this node. */
int shoal_replicator_subscribe_sync(shoal_replicator_t *r, const char *key_or_prefix,
                                    shoal_changed_fn *fn, void *arg);
/* Once it returns, fn is not running and is never called again for that id: arg may be freed. */
int shoal_replicator_unsubscribe_sync(shoal_replicator_t *r, int id);
int shoal_replicator_flush_sync(shoal_replicator_t *r);
/* The replica count (>= 0; 0 while loading), or a negative error. */
int shoal_replicator_replica_count_sync(shoal_replicator_t *r);
/* Every live key, as shoal_replicator_keys, but fn runs on the CALLING thread, over a copy of
   the key list taken on the node thread (keys changed meanwhile may be missing or gone). */
int shoal_replicator_keys_sync(shoal_replicator_t *r, shoal_key_fn *fn, void *arg);

typedef struct {
    uint64_t keys, tombstones, gets, updates, deletes;
    uint64_t deltas_sent, deltas_received, delta_gaps, full_state_sent, full_state_received;
    uint64_t gossip_rounds, status_sent, digests_compared, chunks_sent, chunks_received;
    uint64_t write_timeouts, read_timeouts, store_failures, pruning_performed, tombstones_collected;
    uint64_t dropped_malformed, dropped_wrong_type, dropped_collected_key, dropped_stale;
    uint64_t writes_refused; /* writes a type's admit check refused here */
    uint64_t store_retries; /* writes of durable keys retried after the store failed */
    uint64_t no_quorum;     /* MAJORITY/ALL reads and writes refused with SHOAL_ENOQUORUM */
    uint64_t catch_ups;     /* times this replica caught up after its gate opened */
    uint64_t reads_deferred, reads_deferred_dropped; /* peers' reads held while catching up */
} shoal_replicator_stats_t;
/* The counters. Any thread (copied on the node thread). */
int shoal_replicator_stats(shoal_replicator_t *r, shoal_replicator_stats_t *out);

/* LIMITS (off by default): caps on what local writes may grow a replica to. A write through
   this node (shoal_replicator_update*, a client's update) that would create a key past max_keys
   keys (deleted keys stop counting at once), or make the encoded sizes of the values reach past
   max_bytes, fails with SHOAL_ELIMIT and changes nothing; refusals are counted
   (shoal_replicator_limit_refused_total{limit="keys"|"bytes"}) and logged (1st, 2nd, 4th...).
   What replicas receive from their peers is never refused (that would stop them converging), so
   a replica may hold more than its caps when other nodes have larger ones: give every node the
   same. The byte count is as far as cheaply known: exact for the values written here (each such
   write is encoded once to be measured, only while max_bytes is set), and for the others from
   the last digest of their value (gossip computes it). 0 = no cap. Any thread; applies to the
   writes that start after it. Config: shoal/cluster/distributed-data/max-keys, max-bytes
   (shoal_config_replicator_limits). */
typedef struct {
    uint64_t max_keys;
    uint64_t max_bytes;
} shoal_replicator_limits_t;
int shoal_replicator_set_limits(shoal_replicator_t *r, const shoal_replicator_limits_t *limits);
/* The keys (not deleted) and the bytes (as above) a replica holds now. Node thread. */
int shoal_replicator_usage(shoal_replicator_t *r, uint64_t *keys, uint64_t *bytes);

/* Replicator requests over a client connection (tools, examples, tests): the serving node runs
   them on its replicator of `role` ("" = default). An update names an operation of the key's type
   (see proto/client.proto: increment, add, remove, put, set, switch-on, clear, remove-key, merge),
   which the node applies with its own node id as the writer. */
typedef struct {
    const char *type; /* type name of the key, for a missing key ("GCounter", "LWWMap", ...) */
    const char *op;
    int64_t n;
    const void *elem;
    size_t elem_len;
    const void *key2; /* the map key, for map types */
    size_t key2_len;
    const void *value; /* LWW value, or an encoded value for "merge" */
    size_t value_len;
} shoal_client_op_t;
int shoal_client_get(shoal_client_t *c, const char *role, const char *key,
                     const shoal_consistency_t *rc, shoal_crdt_t **out);
int shoal_client_update(shoal_client_t *c, const char *role, const char *key,
                        const shoal_consistency_t *wc, const shoal_client_op_t *op);
int shoal_client_delete(shoal_client_t *c, const char *role, const char *key,
                        const shoal_consistency_t *wc);
/* The counters of the node's replicator of `role` and of the node, one "name value" line each. */
int shoal_client_stats(shoal_client_t *c, const char *role, shoal_buf_t *text);
/* The text the node's GET /metrics serves (Prometheus exposition, the same families and names;
   the built-in part alone when the node runs no management endpoint): what ddata-dump --metrics
   prints. SHOAL_EVERSION: the node predates 0.3 (it answers shoal_client_stats' lines). */
int shoal_client_metrics(shoal_client_t *c, shoal_buf_t *text);
/* WATCH: a client's subscription to one key of the serving node's replicator (kvstore watch),
   by long polling. *session 0 opens a session on the node, subscribed to the key (its first
   event is the current value); each call then hands fn, oldest first, every change the node was
   notified of since the last call (change, and the value after it: NULL when deleted), waiting up
   to wait_ms (at most 30 s) for one when there is none, and sets *session. The client's own
   writes through that node are each an event (the node notifies them at once when it has
   watches), so a put followed by a delete is seen as two; changes that reach the node already
   merged are one. *missed (if not NULL) grows by the events the node dropped (it keeps 1024 per
   session). SHOAL_ENOTFOUND: the session is gone (the node restarted, or nobody asked for 60 s):
   set *session to 0 and ask again. */
typedef void (shoal_client_watch_fn)(shoal_change_t change, const shoal_crdt_t *value, void *arg);
int shoal_client_watch(shoal_client_t *c, const char *role, const char *key, uint64_t *session,
                       uint32_t wait_ms, shoal_client_watch_fn *fn, void *arg, uint64_t *missed);

/* =============================================================================================
 * CONFIGURATION FILES
 *
 * Settings load from a ZPL file (czmq's zconfig) whose key paths mirror Akka's reference
 * configuration with "pekko." replaced by "shoal/" and dots by slashes, e.g.
 *     shoal
 *         remote
 *             artery
 *                 canonical
 *                     hostname = "127.0.0.1"
 *                     port = 2552
 *         cluster
 *             distributed-data
 *                 gossip-interval = 2 s
 *                 durable
 *                     keys = "shard-*,counters"
 * Durations take Akka's forms ("2 s", "2s", "500 ms", "10 minutes", "1 d", "off" where Akka
 * allows it), sizes "256 KiB" / "100 MiB" / plain bytes, booleans on/off/true/false, lists are
 * comma-separated strings or ["a", "b"], decimals "0.8" / "8", choices one word of a fixed set.
 * Unknown keys and bad values are errors that name the key. Settings not in the file keep their
 * defaults. The config object owns every string the settings point to. Membership's keys
 * (shoal/cluster/..., .../failure-detector/..., .../split-brain-resolver/...,
 * shoal/coordinated-shutdown/...) are read by shoal_config_cluster (membership.h).
 */
typedef struct shoal_config shoal_config_t;

/* Loads and validates a file. Any thread. NULL on error with *err (err may be NULL):
   SHOAL_EINVAL a syntax error, an unknown key or a bad value; SHOAL_EIO the file cannot be opened
   or read; SHOAL_ETOOBIG over 1 MiB; SHOAL_EDECODE not a text file. shoal_last_error_detail()
   then names the file, and the line or the key and the problem:
       "app.cfg: line 7: indent by multiples of 4 spaces",
       "app.cfg: shoal/cluster/gossip-interval: '2 parsecs' is not a duration ...". */
shoal_config_t *shoal_config_load(const char *path, int *err);
/* Same, from ZPL text in memory (the detail without a file name). */
shoal_config_t *shoal_config_parse(const char *text, int *err);
void shoal_config_destroy(shoal_config_t **self_p);
/* Fills node settings: endpoint from shoal/remote/artery/canonical/{hostname,port} (as
   tcp://host:port), max_frame_bytes from shoal/remote/artery/advanced/maximum-frame-size,
   peer_send_hwm from .../advanced/outbound-message-queue-size, max_inbound_connections from
   shoal/remote/artery/max-inbound-connections (Shoal's own). Overwrites only what the file
   sets: initialize *out first (shoal_system_settings_default). When the file gives only one of
   hostname and port, the other comes from out->endpoint (if tcp://host:port; else 127.0.0.1 or
   2552). The endpoint string is owned by cfg. It also applies shoal/loglevel to the process
   (shoal_log_level_default: unless a flag or SHOAL_LOG_LEVEL chose the level). */
int shoal_config_system(const shoal_config_t *cfg, shoal_system_settings_t *out, char *err,
                        size_t errlen);
/* Fills replicator settings from shoal/cluster/distributed-data/... (the strings and arrays stay
   owned by cfg). Overwrites only what the file sets: initialize *out first
   (shoal_replicator_settings_default). expire-keys-after-inactivity is a section of
   `key = duration` entries and/or an inline value "key-1 = 10 minutes, cache-* = 2 minutes" (ZPL
   names cannot hold '*', so prefixes go inline). */
/* shoal/cluster/distributed-data/max-keys and max-bytes (unset or off: 0, no cap). 0 or
   SHOAL_EINVAL with a message in err. */
int shoal_config_replicator_limits(const shoal_config_t *cfg, shoal_replicator_limits_t *out,
                                   char *err, size_t errlen);
int shoal_config_replicator(const shoal_config_t *cfg, shoal_replicator_settings_t *out, char *err,
                            size_t errlen);

/* Reading one setting, for the modules above ddata (membership/, sharding/) that fill their own
   settings structs. `path` is a full key path ("shoal/cluster/gossip-interval"; a section whose
   name the file chooses, like shoal/cluster/role/<role-name>/..., by the name the file gives).
   Every value was parsed and checked when the file loaded (its kind, "off", zero and its range),
   so the typed getters only read it: each returns 1 and writes *out when the file sets path,
   0 (leaving *out alone) when it does not, and SHOAL_EINVAL with a message naming path in err
   when path is no known key or not one of that kind. Strings and arrays stay owned by cfg. */
/* The value as written (trimmed, without its quotes); NULL when the file does not set it. Also
   the way to read string and choice settings (active-strategy). */
const char *shoal_config_get(const shoal_config_t *cfg, const char *path);
/* Milliseconds; "off" is 0 where the key allows it. The keys that also take "on"
   (allow-weakly-up-members, down-all-when-unstable) give SHOAL_EINVAL for it: check
   shoal_config_get(...) for "on" first. */
int shoal_config_duration(const shoal_config_t *cfg, const char *path, uint64_t *ms, char *err,
                          size_t errlen);
int shoal_config_uint(const shoal_config_t *cfg, const char *path, uint64_t *out, char *err,
                      size_t errlen);
int shoal_config_double(const shoal_config_t *cfg, const char *path, double *out, char *err,
                        size_t errlen);
int shoal_config_bool(const shoal_config_t *cfg, const char *path, bool *out, char *err,
                      size_t errlen);
/* Bytes ("off" is 0 where the key allows it). */
int shoal_config_size(const shoal_config_t *cfg, const char *path, size_t *bytes, char *err,
                      size_t errlen);
/* An expiry map (expire-keys-after-inactivity), in file order. */
int shoal_config_expiry(const shoal_config_t *cfg, const char *path, const shoal_expiry_t **items,
                        size_t *n, char *err, size_t errlen);
/* The items in file order (*n may be 0: the file gives an empty list). */
int shoal_config_list(const shoal_config_t *cfg, const char *path, const char *const **items,
                      size_t *n, char *err, size_t errlen);
/* The names the file gives to the sections directly under `parent` that stand for any name
   ("shoal/cluster/role" -> the role names having settings), in file order, without repeats;
   returns how many (0 with *names NULL when none). */
size_t shoal_config_sections(const shoal_config_t *cfg, const char *parent,
                             const char *const **names);
/* `size` zeroed bytes that live as long as cfg (freed by shoal_config_destroy): for arrays a
   settings struct points to. Aborts when out of memory. */
void *shoal_config_alloc(const shoal_config_t *cfg, size_t size);

/* The plain settings of a filler as a table: each row names a key and where its value goes in
   the settings struct, so that a filler keeps only what needs more than one getter (on/off
   durations, lists, choices, checks across keys). The kind says the getter and the C type of
   the field: MS32 a duration as uint32_t milliseconds, U32 a whole number as uint32_t, DOUBLE a
   decimal as double, BOOL a boolean as bool. */
typedef enum {
    SHOAL_CFG_MS32 = 1,
    SHOAL_CFG_U32,
    SHOAL_CFG_DOUBLE,
    SHOAL_CFG_BOOL
} shoal_cfg_field_kind_t;

typedef struct {
    const char *path; /* full key path, as for the getters */
    shoal_cfg_field_kind_t kind;
    size_t offset; /* of the field in the settings struct */
} shoal_cfg_field_t;

/* A row for field `field` of struct `type_of_struct`; does not compile unless the field is
   exactly `c_type` (which must be the kind's type: uint32_t, uint32_t, double, bool). */
#define SHOAL_CFG_FIELD(type_of_struct, path, kind, field, c_type)                                 \
    {                                                                                              \
        (path), (kind),                                                                            \
            offsetof(type_of_struct, field) + SHOAL_CFG_TYPE_IS_(type_of_struct, field, c_type)    \
    }
/* 0, or a negative array size (a compile error) when the field is not exactly c_type. */
#define SHOAL_CFG_TYPE_IS_(type_of_struct, field, c_type)                                          \
    (0 * sizeof(char[_Generic(((type_of_struct *)0)->field, c_type : 1, default : -1)]))

/* Reads, in table order, every row the file sets into `settings` (at the row's offset); rows the
   file does not set leave their field alone. 0, or SHOAL_EINVAL with a message naming the key
   in err: a key that is no setting or not of the row's kind, or a value over UINT32_MAX for a
   uint32_t row. On error the rows before the failing one are already written, so fill a copy of
   the caller's struct. */
int shoal_config_fields(const shoal_config_t *cfg, const shoal_cfg_field_t *rows, size_t n,
                        void *settings, char *err, size_t errlen);
/* Writes the message into err (when err and errlen) and returns SHOAL_EINVAL: the fillers'
   errors read like the loader's ("<key>: '<value>' is ..."). */
int shoal_config_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------------------------------------
 * METRICS AND THE MANAGEMENT ENDPOINT. One optional HTTP endpoint per node (libmicrohttpd), off
 * unless started, bound to 127.0.0.1 unless told otherwise (it describes the cluster's internals
 * and, with POST routes, changes it). It serves
 *   GET /metrics          every counter of the node in the Prometheus text format (0.0.4);
 *   GET /health/alive     200 while the node loop answers within 1 s, else 503 (a liveness probe);
 *   GET /health/ready     200 when every readiness check passes, else 503 with the first reason
 *                         (a readiness probe; upper layers add checks, see below; the last one,
 *                         "majority", is built in: every replicator on the node would take a
 *                         MAJORITY read or write now, as far as members go);
 *   GET /cluster/replicators  each replicator's role, replica count, keys with type and digest;
 * and whatever routes the upper layers add (membership adds a dashboard page at /). membership/ and sharding/ PROVIDE theirs to the node
 * (shoal_http_provide), so shoal_http_start on a node gets every route of every layer running on
 * it, those started later included: ddata/ knows nothing of members or shards.
 *
 * THREADS. Each connection has a thread of its own (at most 64 connections), so a request that
 * waits does not hold up the others, /health/alive above all. A route runs either on the NODE
 * THREAD (SHOAL_HTTP_NODE: the endpoint hands it over with a bounded wait, 5 s, and answers 503
 * "node loop did not answer" past it; the node still runs it later and its answer is dropped), or
 * on the connection's thread (SHOAL_HTTP_ANY_THREAD), for handlers that wait on the cluster (a
 * cluster-wide query with its own timeout): those use only thread-safe calls. Readiness checks
 * and metric collectors run on the node thread. Nothing here is per message: HTTP is not hot.
 *
 * Strangers (a cross-site page, a rebound name, slow or many connections) are held off as
 * HARDENING below says; the connections are watched by poll(), not select(), so descriptors
 * above FD_SETSIZE are fine.
 *
 * BAD REQUESTS get a clear 4xx and never reach a handler: an unknown path 404 (naming the routes),
 * a method the route does not take 405 with Allow, a body over 4 KiB 413, a URL or headers over
 * the connection's 64 KiB 414/431 (libmicrohttpd). POST routes (SHOAL_HTTP_POST) answer only
 * clients on a loopback address (127.0.0.0/8, ::1) unless shoal_metrics_set_writes says
 * otherwise: 403 for the others.
 *
 * Metric names follow Prometheus conventions: counters end in _total, units are in the name
 * (shoal_node_bytes_received_total, shoal_durable_commit_seconds_total), causes are labels
 * (shoal_node_frames_dropped_total{reason="oversized"}, shoal_replicator_keys{role="..."}); every
 * family has # HELP and # TYPE (promtool check metrics passes). Built in: the node
 * (shoal_system_stats) and every replicator on it; membership/ and sharding/ add theirs through
 * their providers, durable/ with shoal_durable_metrics.
 */
typedef struct shoal_metrics shoal_metrics_t;
/* Appends metric families (with their # HELP and # TYPE lines) to out. Runs on the node thread. */
typedef void (shoal_metrics_fn)(shoal_system_t *sys, shoal_buf_t *out, void *arg);

/* Starts the endpoint on bind_address (an IPv4 or IPv6 literal; NULL = "127.0.0.1") and port
   (0 = ephemeral), with every route of every layer provided on sys. Any thread but the node's.
   NULL with *err (SHOAL_EINVAL: bad address, SHOAL_EIO: cannot bind/start). */
shoal_metrics_t *shoal_metrics_start(shoal_system_t *sys, const char *bind_address, uint16_t port,
                                     int *err);
/* The same from a "[HOST:]PORT" spec as --http takes it ("8558", "0.0.0.0:8558", "[::1]:8558";
   no host = 127.0.0.1): the one call that gives a node its endpoint. */
shoal_metrics_t *shoal_http_start(shoal_system_t *sys, const char *spec, int *err);
/* HARDENING against a stranger (docs/security.md, "The management endpoint"). Whoever reaches
   the port, or a web page in a browser that does, is held to these rules:
   - HOST: every request's Host header (when it has one: HTTP/1.0 clients may omit it) must name
     the endpoint: the address the connection came in on (so a probe or Prometheus dialling the
     pod's address is answered, on a wildcard bind too), "localhost", or one of `hosts`. Else 403:
     a DNS-rebound page sends its own name.
   - POST (a route that changes the cluster) needs Content-Type application/json (415 otherwise:
     a form or a no-cors fetch cannot send it without a CORS preflight, which the endpoint never
     grants), no Origin other than the endpoint's own (Origin must be http(s):// + Host; "null" is
     foreign), and with a token, "Authorization: Bearer TOKEN" (401).
   - TOKEN: the first line of token_file; with token_for_reads every GET but /health/... needs it.
   - TLS: with a certificate and key (PEM files) the endpoint speaks HTTPS only (GnuTLS, through
     libmicrohttpd).
   - CAPS: a request must arrive whole within request_timeout_ms of its connection (or of the end
     of the previous request on it); at most max_connections connections, max_per_address from
     one address; past a cap the oldest connection still sending its request is closed to make
     room, so a probe (whose request arrives at once) gets in even when an attacker shares its
     address. Refusals and closings are counted (shoal_http_requests_refused_total{reason},
     shoal_http_connections_closed_total{reason}). */
#define SHOAL_HTTP_HOSTS_MAX 16
typedef struct {
    const char *hosts[SHOAL_HTTP_HOSTS_MAX]; /* extra names for Host (borrowed until start) */
    size_t n_hosts;
    const char *token_file;    /* NULL: no token */
    bool token_for_reads;      /* GETs (but /health/...) need the token too */
    const char *tls_cert_file; /* both or neither: HTTPS */
    const char *tls_key_file;
    uint32_t request_timeout_ms; /* whole request (default 5000) */
    uint32_t max_connections;    /* default 64 */
    uint32_t max_per_address;    /* default 16 */
} shoal_http_settings_t;
void shoal_http_settings_default(shoal_http_settings_t *s);
/* shoal_http_start with settings (NULL = the defaults). SHOAL_EINVAL also for an unreadable or
   empty token file, or a certificate without a key. */
shoal_metrics_t *shoal_http_start_with(shoal_system_t *sys, const char *spec,
                                       const shoal_http_settings_t *s, int *err);
/* Overwrites what a configuration file sets under shoal/management/http/ (docs/configuration.md).
   0, or SHOAL_EINVAL with a message in err. The strings live as long as cfg. */
int shoal_config_http(const shoal_config_t *cfg, shoal_http_settings_t *out, char *err,
                      size_t errlen);
/* The endpoint's command-line flags, for every program that takes --http: --http-host NAME
   (repeatable), --http-token-file PATH, --http-token-reads, --http-tls-cert PATH, --http-tls-key
   PATH. At argv[*i]: 1 when it was one of them (*i moved past its value), 0 when not,
   SHOAL_EINVAL with a message in err (a missing value, too many names). */
int shoal_http_flag(shoal_http_settings_t *s, int argc, char *const *argv, int *i, char *err,
                    size_t errlen);
/* Parses a "[HOST:]PORT" spec into host (cap bytes; "127.0.0.1" when absent) and port (either
   may be NULL: a check of the spec alone). 0, or SHOAL_EINVAL (no port, a port not 0..65535 in
   digits, a host over cap or not an IP literal). */
int shoal_http_parse(const char *spec, char *host, size_t cap, uint16_t *port);
/* Reads the files the endpoint was started with again (docs/operations.md, "Rotating keys and
   certificates"): the token file's first line replaces the token, and with TLS the certificate
   and key replace the pair in force, for the connections opened from then on (libmicrohttpd
   reads PEMs at start only, so a new daemon takes over the listening socket: the port never
   closes, requests in progress finish on the old one, which this call waits for, 5 s at most).
   A file that cannot be read, an empty token or a pair that is not valid PEM keeps what is in
   force (SHOAL_EINVAL, logged); SHOAL_EIO when the listening socket could not be handed over.
   0 when there was nothing to reload. Not from the node thread, not with shoal_metrics_stop. */
int shoal_http_reload(shoal_metrics_t *m);
/* The port actually bound. */
uint16_t shoal_metrics_port(const shoal_metrics_t *m);
/* Adds a collector (thread-safe); collectors run after the built-in part, in registration order.
   The same fn and arg twice count once. arg must stay valid until shoal_metrics_stop (or until
   its provider is withdrawn). */
int shoal_metrics_add(shoal_metrics_t *m, shoal_metrics_fn *fn, void *arg);
/* Stops the endpoint (waits for requests in progress, and for node-thread work they left behind).
   Call before the node, and whatever the routes read, are destroyed; not from the node thread.
   NULL-safe. */
void shoal_metrics_stop(shoal_metrics_t **self_p);
/* The built-in part (node and replicators) as text, for tools. Node thread only (SHOAL_ETHREAD). */
int shoal_metrics_collect(shoal_system_t *sys, shoal_buf_t *out);
/* Helpers for collectors: a family's # HELP and # TYPE lines (type "counter" or "gauge"), and a
   label value escaped per the text format (backslash, double quote and newline). */
void shoal_metrics_family(shoal_buf_t *out, const char *name, const char *type, const char *help);
void shoal_metrics_label_value(shoal_buf_t *out, const char *value);

/* Who may use POST routes. */
typedef enum {
    SHOAL_HTTP_WRITES_LOOPBACK = 0, /* clients on a loopback address (the default) */
    SHOAL_HTTP_WRITES_ANY = 1,      /* anyone who reaches the endpoint (behind a proxy that checks) */
    SHOAL_HTTP_WRITES_NONE = 2,     /* nobody: a read-only endpoint */
} shoal_http_writes_t;
int shoal_metrics_set_writes(shoal_metrics_t *m, shoal_http_writes_t who);

/* A request as a route sees it (borrowed for the call). */
typedef struct {
    const char *method;    /* "GET", "HEAD" or "POST" */
    const char *path;      /* the URL path, percent-decoded */
    const char *rest;      /* the path after the route's prefix ("" for an exact route) */
    const char *body;      /* the request body, NUL-terminated ("" when none; at most 4 KiB) */
    size_t body_len;
    bool loopback;         /* the client is on a loopback address */
    size_t n_params;       /* the URL's query arguments, decoded */
    const char *const *param_names;
    const char *const *param_values;
} shoal_http_request_t;
/* The value of a query argument (?name=value), or NULL. */
const char *shoal_http_param(const shoal_http_request_t *req, const char *name);
/* What a route answers: status (0 = 200), content type (NULL = application/json) and body (the
   handler appends to it; the endpoint frees it). */
typedef struct {
    unsigned status;
    const char *content_type; /* a string literal */
    shoal_buf_t body;
} shoal_http_reply_t;
/* Sets status and a JSON body {"error": message}: the shape of every refusal. */
void shoal_http_error(shoal_http_reply_t *rep, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
typedef void (shoal_http_fn)(shoal_system_t *sys, const shoal_http_request_t *req,
                             shoal_http_reply_t *rep, void *arg);
/* Route flags: the methods (GET includes HEAD) and the thread the handler runs on. */
#define SHOAL_HTTP_GET        0x1u
#define SHOAL_HTTP_POST       0x2u
#define SHOAL_HTTP_NODE       0x0u /* on the node thread, through a bounded wait (the default) */
#define SHOAL_HTTP_ANY_THREAD 0x4u /* on the connection's thread: thread-safe calls only */
/* Adds a route. `path` is exact ("/cluster/members", "/"), or a prefix when it ends in '/'
   ("/cluster/members/": rest is what follows; "/" alone is exact); the longest match wins; a later route for the
   same path and methods replaces an earlier one. Thread-safe. */
int shoal_http_route(shoal_metrics_t *m, const char *path, unsigned flags, shoal_http_fn *fn,
                     void *arg);
/* A readiness check for /health/ready: true when ready, else false with the reason appended to
   `reason`. Node thread. Checks run in registration order; the first that fails is the answer. */
typedef bool (shoal_ready_fn)(shoal_system_t *sys, shoal_buf_t *reason, void *arg);
int shoal_http_ready_check(shoal_metrics_t *m, const char *name, shoal_ready_fn *fn, void *arg);

/* PROVIDERS: an upper layer's part of every endpoint of a node. fn(m, arg) adds its routes,
   checks and collectors (all with `arg`); it is called for the endpoints running now and for
   those started later. Thread-safe. */
typedef void (shoal_http_provider_fn)(shoal_metrics_t *m, void *arg);
int shoal_http_provide(shoal_system_t *sys, shoal_http_provider_fn *fn, void *arg);
/* Takes back the provider registered with arg, and from every running endpoint of sys each
   route, check and collector registered with arg; returns once no request uses them any more
   (node-thread work of abandoned requests included). Before destroying what arg points to; any
   thread but the node's. */
void shoal_http_withdraw(shoal_system_t *sys, void *arg);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
