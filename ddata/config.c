/*  config.c — settings from ZPL configuration files (czmq's zconfig).

    The key paths are Akka's (Pekko's reference.conf with "pekko." replaced by "shoal/" and dots
    by slashes), so an operator who knows Akka finds the same names; Shoal's own settings live
    beside them in the same sections. Everything is driven by one table, `cfg_keys`: one row per
    key path with how its value is parsed (duration, size, bool, number, string, list, expiry
    map), the largest value its field can hold, and the setter that writes it into a settings
    struct. Loading parses and checks every value at once, so a bad file fails at load with a
    message naming the key, and filling settings later cannot fail.

    Filling OVERWRITES only the fields the file sets: the caller starts from the defaults
    (shoal_*_settings_default) and the file changes what it names, as HOCON layers a file over
    reference.conf.

    Why a pre-check before zconfig: zconfig_chunk_load only logs a syntax error and returns NULL
    (no line, no reason for the caller). So the text is first checked line by line with zconfig's
    own grammar rules, which gives a message with the line number. It also refuses lines over
    1024 bytes, which newer czmq versions cut silently (4.2.1 keeps them), so that a file means
    the same with every czmq; and it bounds the number of entries, because zconfig frees a tree
    by recursing over siblings and walks sibling lists once per line.

    shoal_config_system may add a composed endpoint string to the config it is given (const as
    far as the caller is concerned): like a value, a config is used by one thread at a time.
*/
#include "internal.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

/* Bounds on what a configuration may be: far above any real file, low enough that zconfig's
   recursion and quadratic sibling walks stay cheap. */
#define CFG_MAX_TEXT    (1u << 20)
#define CFG_MAX_ENTRIES 4096
#define CFG_MAX_LINE    1024 /* newer zconfig's line buffer */

/* When only one of canonical hostname and port is set and the caller's endpoint is not
   tcp://host:port, the other part is Akka's classic default. */
#define CFG_DEFAULT_HOST "127.0.0.1"
#define CFG_DEFAULT_PORT 2552

/* ---------------------------------------------------------------------------------------------
 * The key table
 */
typedef enum {
    K_DURATION, /* milliseconds: "2 s", "500ms", "10 minutes", "1 d", plain number = ms */
    K_SIZE,     /* bytes: "256 KiB", "100 MiB", "1 GB", plain number = bytes */
    K_BOOL,     /* on/off, true/false, yes/no */
    K_UINT,     /* a plain decimal number */
    K_STRING,   /* any text (zconfig has already removed the quotes) */
    K_HOST,     /* a host name or address for tcp:// */
    K_LIST,     /* comma-separated strings, or ["a", "b"]; '*' only at the end (a prefix) */
    K_EXPIRY,   /* a map of key-or-prefix* -> duration, as children or "k = d, p* = d" */
    K_ANY_TREE, /* a JVM-only section: anything under it is accepted and ignored */
    K_DOUBLE,   /* a decimal number "8", "0.8", "12.5" (no sign, no exponent); max bounds it */
    K_CHOICE,   /* one word of the row's `choices` ("a|b|c") */
} cfg_kind_t;

#define CFG_OFF      1u /* "off" is accepted and stored as 0 (Akka's `off`) */
#define CFG_POSITIVE 2u /* 0 is refused: an interval or limit of 0 makes no sense */
/* K_DURATION: "on" is accepted too (Akka's "on" = a derived duration); the reader tells it apart
   with shoal_config_get */
#define CFG_ON 4u

/* Which settings struct a row fills. A new group (membership, sharding) adds a target here, its
   rows below, and a shoal_config_<group>() that calls fill(cfg, CFG_<GROUP>, out). */
typedef enum {
    CFG_KEPT = 0,   /* parsed, checked and kept in the config object; no settings field (yet) */
    CFG_SYSTEM,     /* shoal_system_settings_t */
    CFG_REPLICATOR, /* shoal_replicator_settings_t */
    /* membership/ reads its rows (CFG_KEPT) through the public getters (shoal_config_duration
       etc.): ddata.h cannot know shoal_cluster_settings_t. */
} cfg_target_t;

typedef struct cfg_value cfg_value_t;
typedef void(cfg_setter_fn)(void *settings, size_t offset, const cfg_value_t *v);

typedef struct {
    const char *path; /* full key path, "shoal/..." */
    cfg_kind_t kind;
    unsigned flags; /* CFG_OFF, CFG_POSITIVE */
    uint64_t max;   /* largest number the field holds (K_DURATION, K_SIZE, K_UINT) */
    cfg_target_t target;
    cfg_setter_fn *set;  /* NULL for CFG_KEPT rows */
    size_t offset;       /* of the field in the target struct, for the generic setters */
    const char *choices; /* K_CHOICE: the accepted words, "a|b|c" */
    /* Descriptive only (the configuration reference, docs/configuration.md, is generated from
       these by tools/gen/config_reference.c; nothing else reads them): */
    bool shoal_own;      /* CFG_SHOAL: Shoal's own key; CFG_AKKA: Akka has it at the same path */
    const char *dflt;    /* the default as a file would write it; NULL: none, or see doc */
    const char *doc;     /* what the key means, and whether Shoal applies it */
} cfg_key_t;

#define CFG_AKKA  false
#define CFG_SHOAL true

/* A parsed value. */
struct cfg_value {
    bool set;
    bool on;      /* K_DURATION with CFG_ON: the value is "on" (num is 0) */
    uint64_t num; /* K_DURATION (ms), K_SIZE (bytes), K_UINT, K_BOOL (0/1) */
    double dbl;   /* K_DOUBLE */
    char *str;    /* K_STRING, K_HOST, K_CHOICE */
    char *raw;    /* the value as written (trimmed), for shoal_config_get */
    char **list;  /* K_LIST items; K_EXPIRY patterns (expiry[i].pattern == list[i]) */
    size_t n, cap;
    shoal_expiry_t *expiry; /* K_EXPIRY */
    size_t expiry_cap;
};

static void set_u32(void *s, size_t off, const cfg_value_t *v)
{
    uint32_t x = (uint32_t)v->num;
    memcpy((char *)s + off, &x, sizeof x);
}

static void set_u64(void *s, size_t off, const cfg_value_t *v)
{
    uint64_t x = v->num;
    memcpy((char *)s + off, &x, sizeof x);
}

static void set_size(void *s, size_t off, const cfg_value_t *v)
{
    size_t x = (size_t)v->num;
    memcpy((char *)s + off, &x, sizeof x);
}

static void set_int(void *s, size_t off, const cfg_value_t *v)
{
    int x = (int)v->num;
    memcpy((char *)s + off, &x, sizeof x);
}

static void set_bool(void *s, size_t off, const cfg_value_t *v)
{
    bool x = v->num != 0;
    memcpy((char *)s + off, &x, sizeof x);
}

static void set_str(void *s, size_t off, const cfg_value_t *v)
{
    const char *x = v->str;
    memcpy((char *)s + off, &x, sizeof x);
}

static void set_allow_from(void *s, size_t off, const cfg_value_t *v)
{
    (void)off;
    shoal_system_settings_t *x = s;
    x->allow_from = (const char *const *)v->list;
    x->n_allow_from = v->n;
}

static void set_durable_keys(void *s, size_t off, const cfg_value_t *v)
{
    (void)off;
    shoal_replicator_settings_t *r = s;
    r->durable_keys = (const char *const *)v->list;
    r->n_durable_keys = v->n;
}

static void set_expire_keys(void *s, size_t off, const cfg_value_t *v)
{
    (void)off;
    shoal_replicator_settings_t *r = s;
    r->expire_keys = v->expiry;
    r->n_expire_keys = v->n;
}

/* offsetof(T, f), and a compile error unless field f of T has exactly type `type`: a row can
   never write a field with the wrong setter. */
#define FIELD(T, f, type)                                                                          \
    (offsetof(T, f) + 0 * sizeof(char[_Generic(((T *)0)->f, type : 1, default : -1)]))

#define DD     "shoal/cluster/distributed-data/"
#define ARTERY "shoal/remote/artery/"
/* Every row macro ends with the descriptive fields: (CFG_AKKA | CFG_SHOAL, default, doc). */
#define REP(path, kind, flags, max, field, type, setter, ...)                                      \
    {                                                                                              \
        DD path, kind, flags, max, CFG_REPLICATOR, setter,                                         \
            FIELD(shoal_replicator_settings_t, field, type), NULL, __VA_ARGS__                     \
    }
#define REP_MS32(path, flags, field, ...)                                                          \
    REP(path, K_DURATION, flags, UINT32_MAX, field, uint32_t, set_u32, __VA_ARGS__)
#define REP_MS64(path, flags, field, ...)                                                          \
    REP(path, K_DURATION, flags, UINT64_MAX, field, uint64_t, set_u64, __VA_ARGS__)
#define REP_U32(path, flags, field, ...)                                                           \
    REP(path, K_UINT, flags, UINT32_MAX, field, uint32_t, set_u32, __VA_ARGS__)
#define REP_SIZE(path, flags, field, ...)                                                          \
    REP(path, K_SIZE, flags, SIZE_MAX, field, size_t, set_size, __VA_ARGS__)
#define REP_BOOL(path, field, ...) REP(path, K_BOOL, 0, 1, field, bool, set_bool, __VA_ARGS__)
#define SYS(path, kind, flags, max, field, type, setter, ...)                                      \
    {                                                                                              \
        ARTERY path, kind, flags, max, CFG_SYSTEM, setter,                                         \
            FIELD(shoal_system_settings_t, field, type), NULL, __VA_ARGS__                         \
    }
/* A row another module reads with the getters (kept): its bound, and its choice words. */
#define KEPT_MAX(path, kind, flags, max, ...)                                                      \
    {                                                                                              \
        path, kind, flags, max, CFG_KEPT, NULL, 0, NULL, __VA_ARGS__                               \
    }
#define KEEP(path, kind, flags, ...) KEPT_MAX(path, kind, flags, UINT64_MAX, __VA_ARGS__)
/* Membership's rows (kept; membership/config.c reads them with the getters): the bound is the
   largest value its uint32_t field holds. */
#define CLUSTER "shoal/cluster/"
#define FD      CLUSTER "failure-detector/"
#define SBR     CLUSTER "split-brain-resolver/"
#define CS      "shoal/coordinated-shutdown/"
#define BOOT    "shoal/management/cluster/bootstrap/contact-point-discovery/"
#define HTTP    "shoal/management/http/"
#define KEPT32(path, kind, flags, ...) KEPT_MAX(path, kind, flags, UINT32_MAX, __VA_ARGS__)
/* Sharding's rows (kept; sharding/config.c reads them): a '*' segment of SH_STRAT is a
   passivation strategy's section, whatever its name. */
#define SH       CLUSTER "sharding/"
#define SH_LSA   SH "least-shard-allocation-strategy/"
#define SH_DD    SH "distributed-data/"
/* Descriptions of the keys of sharding's own replicator (sharding/config.c fills
   shoal_sharding_settings_t.replicator_settings): one that falls back to distributed-data's key
   as Akka's section does, one that sharding overrides, one the JVM alone has. */
#define SH_DD_DOC(key)                                                                             \
    "Sharding's own replicator (replicator_settings), as shoal/cluster/distributed-data/" key      \
    ", whose value it takes when this one is not set."
#define SH_DD_OVERRIDE(key, value)                                                                 \
    "Sharding's own replicator (replicator_settings), as shoal/cluster/distributed-data/" key      \
    "; sharding overrides that one: " value " unless set here."
#define SH_DD_LMDB                                                                                 \
    "Accepted, not used: the LMDB store is the program's (shoal_config_durable reads "            \
    "shoal/cluster/distributed-data/durable/lmdb/; give the store in replicator_settings.store)."
#define SH_DD_JVM                                                                                  \
    "JVM only (an actor, class or dispatcher name): accepted and ignored, so that Akka files "   \
    "load."
/* Akka's persistence mode of sharding's state: its keys load and do nothing */
#define SH_PERSISTENCE "Persistence mode only: accepted and ignored."
#define SH_PASS  SH "passivation/"
#define SH_STRAT SH_PASS "*/"
#define KEPT_CHOICE(path, words, ...)                                                              \
    {                                                                                              \
        path, K_CHOICE, 0, 0, CFG_KEPT, NULL, 0, words, __VA_ARGS__                                \
    }
/* Akka's replacement policies; "off" and "none" both mean no policy */
#define PASS_POLICIES "least-recently-used|most-recently-used|least-frequently-used|off|none"

/* Every key Shoal knows. Rows keep Akka's order within a section; Shoal's own keys follow.
   To add settings (membership under shoal/cluster/..., sharding under shoal/cluster/sharding/...):
   add rows here with their full paths — a path's parent sections become known automatically —
   using the REP/SYS-style macros for a new target (FIELD checks each field's type at compile
   time), then a fill function at the bottom of this file. Keys that mean nothing in Shoal but
   appear in Akka files go in as KEEP rows (checked, then ignored) so that such files load.
   Every row ends with its descriptive fields (CFG_AKKA or CFG_SHOAL, the default as a file
   writes it or NULL, what it means): `scons docs` turns them into docs/configuration.md, and
   test_docs fails until it is regenerated or when a stated default is not the real one. */
static const cfg_key_t cfg_keys[] = {
    /* Akka's loglevel: the process's log level (ddata.h, Logs), set by shoal_config_system; Akka
       writes it in capitals. OFF is not offered: errors are always written. */
    KEPT_CHOICE("shoal/loglevel", "error|warning|info|debug|ERROR|WARNING|INFO|DEBUG", CFG_AKKA,
        "info",
        "Log level of the process: error, warning, info or debug (Akka's capitals too). Applied "
        "by shoal_config_system unless --log-level or SHOAL_LOG_LEVEL chose one; changed at run "
        "time by POST /loglevel."),
    /* The node: shoal/remote/artery/... -> shoal_system_settings_t. hostname and port make the
       endpoint together (see shoal_config_system), so they are kept rather than set alone. */
    KEEP(ARTERY "canonical/hostname", K_HOST, 0, CFG_AKKA, NULL,
        "Host of the node's endpoint (what peers dial; part of the node id). With port it makes "
        "shoal_system_settings_t.endpoint; alone, the port comes from the caller's endpoint."),
    {ARTERY "canonical/port", K_UINT, 0, 65535, CFG_KEPT, NULL, 0, NULL, CFG_AKKA, NULL,
        "Port of the node's endpoint (0: an ephemeral port). With hostname it makes the endpoint;"
        " alone, the host comes from the caller's endpoint (else 127.0.0.1)."},
    SYS("advanced/maximum-frame-size", K_SIZE, CFG_POSITIVE, SIZE_MAX, max_frame_bytes, size_t,
        set_size, CFG_AKKA, "256 KiB",
        "Largest frame a node sends or accepts, checked before decoding; larger replicator "
        "messages and client replies go in chunks."),
    SYS("advanced/outbound-message-queue-size", K_UINT, CFG_POSITIVE, INT_MAX, peer_send_hwm, int,
        set_int, CFG_AKKA, "1000",
        "Frames queued per peer (ZMQ_SNDHWM) before a send fails with SHOAL_EAGAIN."),
    /* Shoal's own: CURVE (ddata.h, SECURITY); a path is read when the node starts */
    SYS("curve/certificate", K_STRING, 0, 0, curve_cert, const char *, set_str, CFG_SHOAL, NULL,
        "The node's CURVE certificate (zcert; the secret in <file>_secret). Unset: "
        "SHOAL_CURVE_CERT, else a plain transport (development only)."),
    SYS("curve/allow-list", K_STRING, 0, 0, curve_allow_dir, const char *, set_str, CFG_SHOAL, NULL,
        "Directory of the public certificates allowed to connect (re-read when it changes). "
        "Unset: SHOAL_CURVE_ALLOW."),
    /* Shoal's own: connections each listener of the node keeps (ddata.h, LISTENERS) */
    SYS("max-inbound-connections", K_UINT, CFG_POSITIVE, UINT32_MAX, max_inbound_connections,
        uint32_t, set_u32, CFG_SHOAL, "1024",
        "Connections each listener of the node (its ROUTER, the heartbeat ROUTER) keeps; one more"
        " is closed at once and counted."),
    /* Shoal's own: who may connect (ddata.h, PROTECTED MODE) */
    SYS("allow-from", K_LIST, 0, 0, allow_from, const char *const *, set_allow_from, CFG_SHOAL,
        NULL,
        "Networks allowed to connect to the node's listeners (CIDR: 10.0.0.0/8, 192.168.1.7, "
        "fd00::/8), checked at the handshake. A plain node bound to a non-loopback address "
        "refuses to start without it (or --insecure)."),

    /* Distributed data: shoal/cluster/distributed-data/... -> shoal_replicator_settings_t */
    /* the replicator actor's name: no actors here */
    KEEP(DD "name", K_STRING, 0, CFG_AKKA, NULL,
        "JVM only (an actor, class or dispatcher name): accepted and ignored, so that Akka files "
        "load."),
    REP("role", K_STRING, 0, 0, role, const char *, set_str, CFG_AKKA, NULL,
        "Role of the replicator: its peers are the members having it. Unset: \"\" (every member)."),
    REP_MS32("gossip-interval", CFG_POSITIVE, gossip_interval_ms, CFG_AKKA, "2 s",
        "Interval of full-state anti-entropy (digest comparison with one peer)."),
    REP_MS32("notify-subscribers-interval", CFG_POSITIVE, notify_subscribers_interval_ms,
        CFG_AKKA, "500 ms",
        "Subscribers are notified of changes in batches on this interval."),
    KEEP(DD "log-data-size-exceeding", K_SIZE, CFG_OFF, CFG_AKKA, NULL,
        "Akka's warning threshold for large values: accepted and ignored."),
    REP_U32("max-delta-elements", CFG_POSITIVE, max_delta_elements, CFG_AKKA, "500",
        "Most keys in one delta or gossip message."),
    /* Shoal's own: LIMITS (ddata.h), read by shoal_config_replicator_limits */
    KEEP(DD "max-keys", K_UINT, 0, CFG_SHOAL, "0",
        "Most keys (not deleted) a local write may bring the replica to; one more is refused "
        "with SHOAL_ELIMIT and counted. 0: no cap."),
    KEEP(DD "max-bytes", K_SIZE, CFG_OFF, CFG_SHOAL, "off",
        "Most bytes (the values' encoded sizes) a local write may bring the replica to; past it "
        "the write is refused with SHOAL_ELIMIT and counted. off: no cap."),
    /* JVM executor */
    KEEP(DD "use-dispatcher", K_STRING, 0, CFG_AKKA, NULL,
        "JVM only (an actor, class or dispatcher name): accepted and ignored, so that Akka files "
        "load."),
    REP_MS32("pruning-interval", CFG_OFF | CFG_POSITIVE, pruning_interval_ms, CFG_AKKA, "120 s",
        "How often removed nodes' data is pruned from values (off: never)."),
    REP_MS32("max-pruning-dissemination", CFG_POSITIVE, max_pruning_dissemination_ms,
        CFG_AKKA, "300 s",
        "Longest a pruning round waits for its marker to reach every peer."),
    REP_MS64("pruning-marker-time-to-live", CFG_POSITIVE, pruning_marker_ttl_ms, CFG_AKKA, "6 h",
        "How long pruning markers are kept, so old state arriving late is cleaned."),
    /* no serializer cache */
    KEEP(DD "serializer-cache-time-to-live", K_DURATION, 0, CFG_AKKA, NULL,
        "Akka's serializer cache: accepted and ignored (none here)."),
    REP_BOOL("prefer-oldest", prefer_oldest, CFG_AKKA, "off",
        "Default of shoal_consistency_t.prefer_oldest: majority and from-n operations ask the "
        "oldest nodes first."),
    REP_BOOL("delta-crdt/enabled", delta_enabled, CFG_AKKA, "on",
        "Propagate deltas between gossip rounds (off: full state only)."),
    REP_U32("delta-crdt/max-delta-size", CFG_POSITIVE, max_delta_size, CFG_AKKA, "50",
        "A key whose pending deltas span more updates ships full state instead."),
    REP("expire-keys-after-inactivity", K_EXPIRY, CFG_POSITIVE, UINT64_MAX, expire_keys,
        const shoal_expiry_t *, set_expire_keys, CFG_AKKA, NULL,
        "Keys or prefixes (key-*) dropped after this long without access: children `key = "
        "duration`, or inline \"k = 10 minutes, p* = 2 minutes\"."),
    REP("durable/keys", K_LIST, 0, 0, durable_keys, const char *const *, set_durable_keys,
        CFG_AKKA, NULL,
        "Keys (or prefixes ending in *) written to the durable store: comma-separated or [\"a\", "
        "\"b\"]. Unset: none."),
    REP_MS64("durable/pruning-marker-time-to-live", CFG_POSITIVE,
             durable_pruning_marker_ttl_ms, CFG_AKKA, "10 d",
        "Pruning markers of durable keys live this long; a store whose newest write is older is "
        "not gossiped until it has synced with a peer."),
    KEEP(DD "durable/store-actor-class", K_STRING, 0, CFG_AKKA, NULL,
        "JVM only (an actor, class or dispatcher name): accepted and ignored, so that Akka files "
        "load."),
    KEEP(DD "durable/use-dispatcher", K_STRING, 0, CFG_AKKA, NULL,
        "JVM only (an actor, class or dispatcher name): accepted and ignored, so that Akka files "
        "load."),
    /* a JVM dispatcher definition */
    KEEP(DD "durable/pinned-store", K_ANY_TREE, 0, CFG_AKKA, NULL,
        "JVM only (an actor, class or dispatcher name): accepted and ignored, so that Akka files "
        "load."),
    /* the LMDB store's: durable/config.c (shoal_config_durable) reads them with the getters */
    KEEP(DD "durable/lmdb/dir", K_STRING, 0, CFG_AKKA, NULL,
        "The LMDB store's directory (shoal_config_durable: shoal_durable_settings_t.dir), used as "
        "written: Akka's suffix for a dir ending in ddata is not added, one environment serves "
        "every role of the node and its lock refuses a second node. Empty is refused."),
    KEPT_MAX(DD "durable/lmdb/map-size", K_SIZE, CFG_POSITIVE, SIZE_MAX, CFG_AKKA, "100 MiB",
        "Initial LMDB map size (shoal_config_durable: shoal_durable_settings_t.map_size); the map "
        "doubles on demand up to map_max."),
    KEPT32(DD "durable/lmdb/write-behind-interval", K_DURATION, CFG_OFF, CFG_AKKA, "off",
        "off: every write is committed before it is acknowledged; a duration batches writes, one"
        " per key, acknowledging them at once, a window of loss on a crash (shoal_config_durable:"
        " shoal_durable_settings_t.write_behind_ms)."),
    /* Shoal's own */
    REP_MS32("delta-interval", CFG_POSITIVE, delta_interval_ms, CFG_SHOAL, "400 ms",
        "How often pending deltas are sent to a rotating slice of peers."),
    REP_MS64("tombstone-time-to-live", CFG_POSITIVE, tombstone_ttl_ms, CFG_SHOAL, "1 d",
        "Deleted keys are collected after this (once every peer holds the tombstone); the name is"
        " then refused for as long. Akka keeps tombstones for ever."),
    REP_SIZE("compress-above", 0, compress_above_bytes, CFG_SHOAL, "32 KiB",
        "Replicator messages above this size are zlib-compressed."),
    REP_SIZE("max-reassembly-size", CFG_POSITIVE, max_reassembly_bytes, CFG_SHOAL, "64 MiB",
        "Largest chunked message a replicator puts back together."),
    REP_U32("max-pending-operations", CFG_POSITIVE, max_pending_ops, CFG_SHOAL, "100000",
        "Operations in flight on a replicator before new ones fail with SHOAL_EBUSY."),

    /* Membership: shoal/cluster/... -> shoal_cluster_settings_t (membership.h). A '*' segment
       stands for any one name: role/<role-name>/min-nr-of-members. */
    KEEP(CLUSTER "seed-nodes", K_LIST, 0, CFG_AKKA, NULL,
        "Endpoints tcp://host:port to join through; give every node the same list. Only the first"
        " may form a new cluster. Unset: wait for a join."),
    KEPT32(CLUSTER "seed-node-timeout", K_DURATION, CFG_POSITIVE, CFG_AKKA, "5 s",
        "How long the first seed waits for the other seeds' answers before it forms a cluster."),
    KEPT32(CLUSTER "retry-unsuccessful-join-after", K_DURATION, CFG_POSITIVE, CFG_AKKA, "10 s",
        "A join that got no answer is tried again after this."),
    KEPT32(CLUSTER "shutdown-after-unsuccessful-join-seed-nodes", K_DURATION,
           CFG_OFF | CFG_POSITIVE, CFG_AKKA, "off",
        "Shut the node down when it has not joined after this long (off: keep trying)."),
    /* read by sharding (sharding/config.c): off = 0 = the split-brain resolver's stable-after */
    KEPT32(CLUSTER "down-removal-margin", K_DURATION, CFG_OFF, CFG_AKKA, "off",
        "Shards of a downed member are reallocated this long after its removal (off: the "
        "split-brain resolver's stable-after). Read by sharding."),
    /* JVM class; Shoal's SBR is built in */
    KEEP(CLUSTER "downing-provider-class", K_STRING, 0, CFG_AKKA, NULL,
        "JVM class: accepted and ignored (the split-brain resolver is built in)."),
    KEPT32(CLUSTER "allow-weakly-up-members", K_DURATION, CFG_ON | CFG_OFF | CFG_POSITIVE,
        CFG_AKKA, "7 s",
        "Joining members become WeaklyUp after this without convergence (on: 7 s, off: never)."),
    KEEP(CLUSTER "roles", K_LIST, 0, CFG_AKKA, NULL,
        "Roles of this node (comma-separated). Unset: none."),
    KEPT32(CLUSTER "role/*/min-nr-of-members", K_UINT, 0, CFG_AKKA, NULL,
        "Members of role <name> needed before members of it are moved to Up."),
    KEEP(CLUSTER "app-version", K_STRING, 0, CFG_AKKA, "0.0.0",
        "Version of the application; allocation prefers the newest, and rebalancing waits while "
        "versions differ."),
    KEPT32(CLUSTER "min-nr-of-members", K_UINT, CFG_POSITIVE, CFG_AKKA, "1",
        "Members needed before the leader moves Joining members to Up."),
    KEPT32(CLUSTER "protocol-version", K_UINT, 0, CFG_SHOAL, "0",
        "Highest protocol version this node announces and sends at; 0: as high as every member "
        "speaks. Pin the previous release's on every member to keep a rollback possible "
        "(docs/protocol-versions.md)."),
    KEPT32(CLUSTER "gossip-interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, "1 s",
        "Interval of membership gossip rounds."),
    KEPT32(CLUSTER "gossip-time-to-live", K_DURATION, CFG_POSITIVE, CFG_AKKA, "2 s",
        "Gossip later than this (beyond the sender's fastest) is dropped by the receiver."),
    KEPT32(CLUSTER "leader-actions-interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, "1 s",
        "How often the leader moves members (Joining to Up, Exiting to Removed...)."),
    {CLUSTER "gossip-different-view-probability", K_DOUBLE, 0, 1, CFG_KEPT, NULL, 0, NULL,
        CFG_AKKA, "0.8",
        "Probability of gossiping to a member that has not seen this version."},
    KEPT32(CLUSTER "reduce-gossip-different-view-probability", K_UINT, 0, CFG_AKKA, "400",
        "Above this many members that probability is lowered."),
    /* JVM class: phi accrual is built in */
    KEEP(FD "implementation-class", K_STRING, 0, CFG_AKKA, NULL,
        "JVM class: accepted and ignored (phi accrual is built in)."),
    KEPT32(FD "heartbeat-interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, "1 s",
        "Interval of heartbeats to the members this node monitors."),
    KEPT32(FD "threshold", K_DOUBLE, CFG_POSITIVE, CFG_AKKA, "8",
        "Phi above which a member is suspected unreachable."),
    KEPT32(FD "max-sample-size", K_UINT, CFG_POSITIVE, CFG_AKKA, "1000",
        "Heartbeat intervals kept per monitored member."),
    KEPT32(FD "min-std-deviation", K_DURATION, CFG_POSITIVE, CFG_AKKA, "100 ms",
        "Least standard deviation assumed by the phi calculation."),
    KEPT32(FD "acceptable-heartbeat-pause", K_DURATION, 0, CFG_AKKA, "3 s",
        "Heartbeats may be missing this long before phi rises (GC-like pauses)."),
    KEPT32(FD "monitored-by-nr-of-members", K_UINT, CFG_POSITIVE, CFG_AKKA, "5",
        "Members that monitor each member (on a hashed ring)."),
    KEPT32(FD "expected-response-after", K_DURATION, CFG_POSITIVE, CFG_AKKA, "1 s",
        "The first heartbeat to a new member is expected within this."),
    /* Shoal's own */
    KEPT32(FD "indirect-probes", K_UINT, 0, CFG_SHOAL, "3",
        "Members asked to probe a suspect before it is marked unreachable (SWIM; 0: none)."),
    KEPT32(FD "loop-stall-bound", K_DURATION, CFG_POSITIVE, CFG_SHOAL, "20 s",
        "The heartbeat actor stops answering when the node loop has not ticked for this long, so "
        "a wedged node is detected."),
    KEEP(FD "heartbeat-endpoint", K_STRING, 0, CFG_SHOAL, NULL,
        "Endpoint of the heartbeat socket. Unset: the node's host and an ephemeral port."),
    /* Split-brain resolver; Akka's lease-majority is not offered (no leases) */
    {SBR "active-strategy", K_CHOICE, 0, 0, CFG_KEPT, NULL, 0,
     "keep-majority|keep-oldest|static-quorum|down-all|off", CFG_AKKA, "keep-majority",
        "Split-brain resolver: keep-majority, keep-oldest, static-quorum, down-all, or off (no "
        "automatic downing). On by default, unlike Akka."},
    KEPT32(SBR "stable-after", K_DURATION, 0, CFG_AKKA, "20 s",
        "The unreachable set must be stable this long before the resolver decides."),
    KEPT32(SBR "down-all-when-unstable", K_DURATION, CFG_ON | CFG_OFF | CFG_POSITIVE,
        CFG_AKKA, "on",
        "Down every member when the unreachable set keeps changing for this long (on: 3/4 of "
        "stable-after, at least 4 s; off: never)."),
    /* >= 1 checked when it is active */
    KEPT32(SBR "static-quorum/quorum-size", K_UINT, 0, CFG_AKKA, NULL,
        "static-quorum: members the surviving side needs (required when that strategy is active)."),
    KEEP(SBR "static-quorum/role", K_STRING, 0, CFG_AKKA, NULL,
        "static-quorum: count only members of this role."),
    KEEP(SBR "keep-majority/role", K_STRING, 0, CFG_AKKA, NULL,
        "keep-majority: count only members of this role."),
    KEEP(SBR "keep-oldest/down-if-alone", K_BOOL, 0, CFG_AKKA, "on",
        "keep-oldest: down the oldest member instead when it is alone on its side."),
    KEEP(SBR "keep-oldest/role", K_STRING, 0, CFG_AKKA, NULL,
        "keep-oldest: the oldest member of this role."),
    /* Shoal's own: the fence (membership.h, THE FENCE); fence-after 0 = derived */
    KEPT32(SBR "fence-after", K_DURATION, 0, CFG_SHOAL, "0",
        "A node without heartbeat replies from the side it would lose to for this long stops "
        "hosting shards and singletons (0: acceptable-heartbeat-pause + stable-after / 2)."),
    KEPT32(SBR "fence-margin", K_DURATION, 0, CFG_SHOAL, "1 s",
        "fence-after + fence-margin must be at most acceptable-heartbeat-pause + stable-after; "
        "sharding refuses to start otherwise."),
    /* Coordinated shutdown */
    KEPT32(CS "default-phase-timeout", K_DURATION, CFG_POSITIVE, CFG_AKKA, "5 s",
        "Timeout of each phase of the orderly shutdown."),
    /* Seed discovery (membership.h, SEED DISCOVERY): Akka Management's Cluster Bootstrap keys;
       discover (the name, "dns:NAME:PORT" or "srv:NAME") and resolver are Shoal's own, checked
       by membership/config.c */
    KEEP(BOOT "discover", K_STRING, 0, CFG_SHOAL, NULL,
        "Seed discovery by DNS instead of seed-nodes: dns:NAME:PORT (A/AAAA records) or srv:NAME "
        "(SRV records)."),
    KEPT32(BOOT "required-contact-point-nr", K_UINT, CFG_POSITIVE, CFG_AKKA, "2",
        "Contact points needed before the lowest one may form a new cluster."),
    KEPT32(BOOT "stable-margin", K_DURATION, 0, CFG_AKKA, "5 s",
        "The set of contact points must be stable this long before a cluster is formed."),
    KEPT32(BOOT "interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, "1 s",
        "How often the name is resolved."),
    KEEP(BOOT "resolver", K_STRING, 0, CFG_SHOAL, NULL,
        "Nameserver IPv4:PORT. Unset: SHOAL_DNS_RESOLVER, else the system's."),
    /* The management endpoint (ddata.h, HARDENING; docs/security.md): read by shoal_config_http
       (ddata/metrics.c) */
    KEEP(HTTP "hosts", K_LIST, 0, CFG_SHOAL, NULL,
        "Names the Host header of a request to the management endpoint may carry besides the "
        "address the connection came in on and localhost (the names a proxy or an operator uses "
        "for it; as --http-host)."),
    KEEP(HTTP "token-file", K_STRING, 0, CFG_SHOAL, NULL,
        "A file whose first line is a bearer token every POST must send (Authorization: Bearer); "
        "as --http-token-file."),
    KEEP(HTTP "token-for-reads", K_BOOL, 0, CFG_SHOAL, "off",
        "Every GET but /health/... needs the token too (as --http-token-reads)."),
    KEEP(HTTP "tls-certificate", K_STRING, 0, CFG_SHOAL, NULL,
        "PEM certificate (chain) file: the endpoint speaks HTTPS only; with tls-key (as "
        "--http-tls-cert)."),
    KEEP(HTTP "tls-key", K_STRING, 0, CFG_SHOAL, NULL,
        "PEM private key file of tls-certificate (as --http-tls-key)."),
    KEPT32(HTTP "request-timeout", K_DURATION, CFG_POSITIVE, CFG_SHOAL, "5 s",
        "A request must arrive whole within this of its connection (or of the end of the "
        "previous request on it); a slower one is closed."),
    KEPT32(HTTP "max-connections", K_UINT, CFG_POSITIVE, CFG_SHOAL, "64",
        "Connections the management endpoint holds at once; past it the oldest one still "
        "sending its request is closed."),
    KEPT32(HTTP "max-connections-per-address", K_UINT, CFG_POSITIVE, CFG_SHOAL, "16",
        "Connections from one address at once; past it the oldest one from there still sending "
        "its request is closed."),

    /* Sharding: shoal/cluster/sharding/... (sharding/config.c reads these rows with the getters
       into shoal_sharding_settings_t, its passivation and its replicator_settings).
       Persistence-mode, event-sourced-store and JVM keys are checked and ignored: Shoal keeps
       sharding's state in ddata. */
    KEPT32(SH "number-of-shards", K_UINT, CFG_POSITIVE, CFG_AKKA, "1000",
        "Shards per entity type; the same on every node (checked at registration)."),
    /* an actor name */
    KEEP(SH "guardian-name", K_STRING, 0, CFG_AKKA, NULL,
        "JVM only (an actor, class or dispatcher name): accepted and ignored, so that Akka files "
        "load."),
    KEEP(SH "role", K_STRING, 0, CFG_AKKA, NULL,
        "Role of the members that host the type's entities. Unset: \"\" (every member)."),
    KEEP(SH "remember-entities", K_BOOL, 0, CFG_AKKA, "off",
        "Entities running when their shard stops (rebalance, crash, restart of the cluster) are "
        "started again (remember_entities); automatic passivation is then off."),
    KEPT_CHOICE(SH "remember-entities-store", "ddata|eventsourced", CFG_AKKA, NULL,
        "ddata is the only store here; eventsourced is accepted and ignored."),
    /* Akka's, deprecated */
    KEPT32(SH "passivate-idle-entity-after", K_DURATION, CFG_OFF, CFG_AKKA, NULL,
        "Akka's deprecated idle timeout: when set it wins over passivation/strategy (a warning "
        "if both are), making the idle strategy with this timeout (passivation.idle_timeout_ms);"
        " off: no automatic passivation."),
    /* Passivation. strategy names a section under passivation: default-idle-strategy,
       default-strategy or one of the file's own; each section takes every key of
       strategy-defaults (Akka reads a strategy with strategy-defaults as its fallback), hence
       the '*' rows. Akka's "none" is spelt "off" here, and an interval of "default" is
       written by leaving interval out (half the timeout). */
    /* checked against the sections by sharding/ */
    KEEP(SH_PASS "strategy", K_STRING, 0, CFG_AKKA, "default-idle-strategy",
        "default-idle-strategy, default-strategy (W-TinyLFU, limit 100000), off, none, or a "
        "section under passivation: its keys over strategy-defaults make "
        "shoal_sharding_settings_t.passivation anew. Unset: the file's default-idle-strategy or "
        "strategy-defaults section, if any, applies; else the caller's passivation stays."),
    /* Akka's */
    KEPT32(SH_PASS "stop-timeout", K_DURATION, CFG_POSITIVE, CFG_AKKA, "10 s",
        "An entity that does not stop after its stop message is stopped by force after this "
        "(passivation.stop_timeout_ms; not part of a strategy)."),
    KEPT32(SH_STRAT "idle-entity/timeout", K_DURATION, CFG_OFF | CFG_POSITIVE, CFG_AKKA, NULL,
        "Passivate an entity after this long without a message (passivation.idle_timeout_ms); off"
        " (strategy-defaults) = none, 120 s in default-idle-strategy. Applies with any policy."),
    KEPT32(SH_STRAT "idle-entity/interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, NULL,
        "How often idleness is checked (passivation.idle_interval_ms); left out: half the "
        "timeout (Akka's default)."),
    KEPT32(SH_STRAT "active-entity-limit", K_UINT, CFG_OFF | CFG_POSITIVE, CFG_AKKA, NULL,
        "Active entities per region, split among its shards (passivation.active_entity_limit);"
        " off = none, and then the replacement and admission keys do nothing (Akka). A limit "
        "without a replacement policy is refused."),
    KEPT_CHOICE(SH_STRAT "replacement/policy", PASS_POLICIES, CFG_AKKA, NULL,
        "least-recently-used, most-recently-used, least-frequently-used, or off "
        "(passivation.policy LRU, MRU, LFU). With an admission window it must be a segmented "
        "least-recently-used (W-TinyLFU's main area)."),
    KEPT32(SH_STRAT "replacement/least-recently-used/segmented/levels", K_UINT,
           CFG_OFF | CFG_POSITIVE, CFG_AKKA, NULL,
        "Segments of the LRU (passivation.slru_levels), at most 4; off or 1: plain LRU."),
    KEEP(SH_STRAT "replacement/least-recently-used/segmented/proportions", K_LIST, 0,
        CFG_AKKA, NULL,
        "Sizes of the segments, fractions, one per segment (passivation.slru_proportions); empty"
        " = equal segments."),
    /* no settings */
    KEEP(SH_STRAT "replacement/most-recently-used", K_ANY_TREE, 0, CFG_AKKA, NULL,
        "Section without settings: accepted."),
    KEEP(SH_STRAT "replacement/least-frequently-used/dynamic-aging", K_BOOL, 0, CFG_AKKA, NULL,
        "LFU with dynamic aging (passivation.lfu_dynamic_aging)."),
    KEPT_MAX(SH_STRAT "admission/window/proportion", K_DOUBLE, 0, 1, CFG_AKKA, NULL,
        "W-TinyLFU: initial size of the admission window, a fraction of the limit "
        "(passivation.window_proportion, 0.01)."),
    KEPT_MAX(SH_STRAT "admission/window/minimum-proportion", K_DOUBLE, 0, 1, CFG_AKKA, NULL,
        "W-TinyLFU: smallest window (passivation.window_min_proportion, 0.01)."),
    KEPT_MAX(SH_STRAT "admission/window/maximum-proportion", K_DOUBLE, 0, 1, CFG_AKKA, NULL,
        "W-TinyLFU: largest window (passivation.window_max_proportion, 1.0)."),
    KEPT_CHOICE(SH_STRAT "admission/window/optimizer", "hill-climbing|off|none", CFG_AKKA, NULL,
        "hill-climbing or off (passivation.hill_climbing)."),
    KEPT_MAX(SH_STRAT "admission/window/hill-climbing/adjust-multiplier", K_DOUBLE, CFG_POSITIVE,
             UINT32_MAX, CFG_AKKA, NULL,
        "Hill climbing: adjust every limit x this accesses (passivation.adjust_multiplier, "
        "10.0)."),
    KEPT_MAX(SH_STRAT "admission/window/hill-climbing/initial-step", K_DOUBLE, CFG_POSITIVE, 1,
        CFG_AKKA, NULL,
        "Hill climbing: first step (passivation.initial_step, 0.0625)."),
    KEPT_MAX(SH_STRAT "admission/window/hill-climbing/restart-threshold", K_DOUBLE, 0, 1,
        CFG_AKKA, NULL,
        "Hill climbing: a hit-rate change that restarts climbing (passivation.restart_threshold, "
        "0.05)."),
    KEPT_MAX(SH_STRAT "admission/window/hill-climbing/step-decay", K_DOUBLE, CFG_POSITIVE, 1,
        CFG_AKKA, NULL,
        "Hill climbing: step multiplier per step (passivation.step_decay, 0.98)."),
    KEPT_CHOICE(SH_STRAT "admission/window/policy", PASS_POLICIES, CFG_AKKA, NULL,
        "least-recently-used (an admission window: passivation.policy TINYLFU) or off; Shoal's "
        "window is a plain LRU, so other policies are refused."),
    KEPT32(SH_STRAT "admission/window/least-recently-used/segmented/levels", K_UINT,
           CFG_OFF | CFG_POSITIVE, CFG_AKKA, NULL,
        "Segments of the window's LRU: off or 1 (Shoal's window is a plain LRU; more is refused "
        "when the window is used)."),
    KEEP(SH_STRAT "admission/window/least-recently-used/segmented/proportions", K_LIST, 0,
        CFG_AKKA, NULL,
        "Sizes of the window's LRU segments: checked, of no use with a plain LRU window."),
    /* no settings */
    KEEP(SH_STRAT "admission/window/most-recently-used", K_ANY_TREE, 0, CFG_AKKA, NULL,
        "Section without settings: accepted."),
    KEEP(SH_STRAT "admission/window/least-frequently-used/dynamic-aging", K_BOOL, 0, CFG_AKKA, NULL,
        "LFU window with dynamic aging: of no use, an LFU window being refused."),
    KEPT_CHOICE(SH_STRAT "admission/filter", "frequency-sketch|off|none", CFG_AKKA, NULL,
        "frequency-sketch or off. A window and this filter go together (W-TinyLFU, "
        "passivation.policy TINYLFU); one without the other is refused."),
    KEPT32(SH_STRAT "admission/frequency-sketch/depth", K_UINT, CFG_POSITIVE, CFG_AKKA, NULL,
        "Count-min sketch depth: 4, Akka's default, built into Shoal's sketch; another value is "
        "refused."),
    KEPT_CHOICE(SH_STRAT "admission/frequency-sketch/counter-bits", "2|4|8|16|32|64",
        CFG_AKKA, NULL,
        "Count-min sketch counter bits: 4, Akka's default, built into Shoal's sketch; another "
        "value is refused."),
    KEPT32(SH_STRAT "admission/frequency-sketch/width-multiplier", K_UINT, CFG_POSITIVE,
        CFG_AKKA, NULL,
        "Count-min sketch width, limit x this: 4, Akka's default, built into Shoal's sketch; "
        "another value is refused."),
    KEPT_MAX(SH_STRAT "admission/frequency-sketch/reset-multiplier", K_DOUBLE, CFG_POSITIVE,
             UINT32_MAX, CFG_AKKA, NULL,
        "Count-min sketch counters halved every limit x this accesses: 10, Akka's default, built "
        "into Shoal's sketch; another value is refused."),
    KEPT32(SH "coordinator-failure-backoff", K_DURATION, 0, CFG_AKKA, NULL,
        "Akka's wait before a region asks a new coordinator: accepted, not used (regions register"
        " again at once with a new term)."),
    KEPT32(SH "retry-interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, "2 s",
        "Regions retry registration and home requests on this interval."),
    KEPT32(SH "buffer-size", K_UINT, CFG_POSITIVE, CFG_AKKA, "100000",
        "Messages a region buffers (for shards whose home is unknown or moving); past it a tell "
        "fails with SHOAL_EBUFFER."),
    /* Shoal's own: LIMITS (sharding.h), read by shoal_config_sharding_limits */
    KEEP(SH "max-entities-per-node", K_UINT, 0, CFG_SHOAL, "0",
        "Most entities (every type) this node runs at once; a message that would start one more "
        "is refused (an ask gets SHOAL_ELIMIT, a tell is dropped) and counted. 0: no cap."),
    KEPT32(SH "handoff-timeout", K_DURATION, CFG_POSITIVE, CFG_AKKA, "60 s",
        "Longest a handoff may take; stragglers are stopped by force after it, less 5 s."),
    KEPT32(SH "shard-start-timeout", K_DURATION, CFG_POSITIVE, CFG_AKKA, "10 s",
        "A shard that has not started after this is retried."),
    KEPT32(SH "shard-failure-backoff", K_DURATION, 0, CFG_AKKA, "10 s",
        "Wait before a failed remembered-entities (or entity-state) write is retried "
        "(shard_failure_backoff_ms)."),
    KEPT32(SH "entity-restart-backoff", K_DURATION, 0, CFG_AKKA, "10 s",
        "With remember-entities, an entity that stopped without passivating is started again "
        "after this, or at its next message (entity_restart_backoff_ms)."),
    KEPT32(SH "rebalance-interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, "10 s",
        "Interval of rebalance rounds (also at once when a region registers, and again after a "
        "round that moved shards)."),
    KEEP(SH "journal-plugin-id", K_STRING, 0, CFG_AKKA, NULL, SH_PERSISTENCE),
    KEEP(SH "snapshot-plugin-id", K_STRING, 0, CFG_AKKA, NULL, SH_PERSISTENCE),
    KEPT_CHOICE(SH "state-store-mode", "ddata|persistence", CFG_AKKA, NULL,
        "ddata is the only mode here; persistence is accepted and ignored."),
    KEEP(SH "snapshot-after", K_UINT, 0, CFG_AKKA, NULL, SH_PERSISTENCE),
    KEEP(SH "keep-nr-of-batches", K_UINT, 0, CFG_AKKA, NULL, SH_PERSISTENCE),
    KEPT32(SH_LSA "rebalance-absolute-limit", K_UINT, 0, CFG_AKKA, "20",
        "Most shards moved per round by the newer algorithm (0 selects Akka's older one; Akka's "
        "default is 0)."),
    KEPT_MAX(SH_LSA "rebalance-relative-limit", K_DOUBLE, CFG_POSITIVE, 1, CFG_AKKA, "0.1",
        "... and at most this fraction of all shards."),
    /* Akka takes 0, with which the older algorithm moves a shard back and forth every round */
    KEPT32(SH_LSA "rebalance-threshold", K_UINT, CFG_POSITIVE, CFG_AKKA, "1",
        "Older algorithm: rebalance when the most and least loaded regions differ by more than "
        "this."),
    /* 0: the older one never moves */
    KEPT32(SH_LSA "max-simultaneous-rebalance", K_UINT, 0, CFG_AKKA, "3",
        "Older algorithm: shards moving at once."),
    KEPT32(SH "external-shard-allocation-strategy/client-timeout", K_DURATION, CFG_POSITIVE,
        CFG_AKKA, NULL,
        "Akka's timeout of the external strategy's client: accepted, not used "
        "(shoal_external_allocate takes a timeout)."),
    KEPT32(SH "waiting-for-state-timeout", K_DURATION, CFG_POSITIVE, CFG_AKKA, "2 s",
        "Timeout of the new coordinator's read of its state (retried)."),
    KEPT32(SH "updating-state-timeout", K_DURATION, CFG_POSITIVE, CFG_AKKA, "5 s",
        "Timeout of the coordinator's writes of its state (retried)."),
    KEPT32(SH "shard-region-query-timeout", K_DURATION, CFG_POSITIVE, CFG_AKKA, "3 s",
        "Timeout of cluster-wide queries (stats, current regions) and operator actions."),
    KEPT_CHOICE(SH "entity-recovery-strategy", "all|constant", CFG_AKKA, "all",
        "How remembered entities are started again: all at once, or constant, a batch per "
        "interval (recovery_constant_rate)."),
    KEPT32(SH "entity-recovery-constant-rate-strategy/frequency", K_DURATION, CFG_POSITIVE,
        CFG_AKKA, "100 ms",
        "constant: interval between batches (recovery_frequency_ms)."),
    KEPT32(SH "entity-recovery-constant-rate-strategy/number-of-entities", K_UINT, CFG_POSITIVE,
        CFG_AKKA, "5",
        "constant: entities per batch (recovery_number_of_entities)."),
    KEEP(SH "event-sourced-remember-entities-store/max-updates-per-write", K_UINT, 0,
        CFG_AKKA, NULL,
        "Event-sourced store only: accepted and ignored."),
    /* Shoal's entity state (sharding/state.c): no Akka counterpart */
    KEEP(SH "entity-state/enabled", K_BOOL, 0, CFG_SHOAL, "off",
        "Entities keep their state in the role's replicator (shoal_entity_save); also needed by "
        "reminders and producers."),
    KEPT32(SH "entity-state/write-timeout", K_DURATION, CFG_POSITIVE, CFG_SHOAL, "5 s",
        "Timeout of a save (WriteMajority)."),
    KEEP(SH "entity-state/write-all", K_BOOL, 0, CFG_SHOAL, "off",
        "Save with WriteAll instead of WriteMajority."),
    KEPT32(SH "entity-state/write-majority-plus", K_UINT, 0, CFG_SHOAL, "0",
        "Nodes added to the majority of a save."),
    KEPT32(SH "entity-state/tombstone-ttl", K_DURATION, CFG_POSITIVE, CFG_SHOAL, "10 d",
        "A deleted state is forgotten at its shard's next move after this."),
    /* The coordinator's singleton: Akka's cluster.singleton keys (role is not used while
       coordinator-singleton-role-override is on) */
    KEEP(SH "coordinator-singleton/singleton-name", K_STRING, 0, CFG_AKKA, NULL,
        "JVM only (an actor, class or dispatcher name): accepted and ignored, so that Akka files "
        "load."),
    KEEP(SH "coordinator-singleton/role", K_STRING, 0, CFG_AKKA, NULL,
        "Akka's role of the coordinator singleton: not used (the coordinator runs on the oldest "
        "member of the type's role)."),
    KEPT32(SH "coordinator-singleton/hand-over-retry-interval", K_DURATION, CFG_POSITIVE,
        CFG_AKKA, NULL,
        "Akka's singleton hand-over retry: accepted, not used."),
    KEPT32(SH "coordinator-singleton/min-number-of-hand-over-retries", K_UINT, CFG_POSITIVE,
        CFG_AKKA, NULL,
        "Akka's singleton hand-over retries: accepted, not used."),
    /* refused unless empty */
    KEEP(SH "coordinator-singleton/use-lease", K_STRING, 0, CFG_AKKA, NULL,
        "Leases are not supported: refused unless empty."),
    KEPT32(SH "coordinator-singleton/lease-retry-interval", K_DURATION, CFG_POSITIVE,
        CFG_AKKA, NULL,
        "Leases are not supported: accepted and ignored."),
    /* Akka's */
    KEEP(SH "coordinator-singleton/lease-name", K_STRING, 0, CFG_AKKA, NULL,
        "Leases are not supported: accepted and ignored."),
    KEEP(SH "coordinator-singleton-role-override", K_BOOL, 0, CFG_AKKA, NULL,
        "Akka's switch for the singleton's role: accepted, always on here."),
    /* write/read-majority-plus: a number or "all" (sharding/config.c parses it) */
    KEEP(SH "coordinator-state/write-majority-plus", K_STRING, 0, CFG_AKKA, "3",
        "Nodes added to the majority of the coordinator's state writes (a number, or all)."),
    KEEP(SH "coordinator-state/read-majority-plus", K_STRING, 0, CFG_AKKA, "5",
        "Nodes added to the majority of a new coordinator's state read (a number, or all)."),
    /* Sharding's own replicator: every distributed-data key, with the same checks (role is not
       used: the sharding role is), plus majority-min-cap; sharding/config.c layers them over
       distributed-data's as Akka's fallback does */
    KEPT32(SH_DD "majority-min-cap", K_UINT, 0, CFG_AKKA, "5",
        "Majorities of sharding's state writes and reads count at least this many nodes."),
    KEEP(SH_DD "name", K_STRING, 0, CFG_AKKA, NULL,
        SH_DD_JVM),
    KEEP(SH_DD "role", K_STRING, 0, CFG_AKKA, NULL,
        "Akka ignores it for sharding's replicator, and so does Shoal: the type's role "
        "(shoal/cluster/sharding/role) is used. Accepted."),
    KEPT32(SH_DD "gossip-interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_OVERRIDE("gossip-interval", "the cluster's gossip interval")),
    KEPT32(SH_DD "notify-subscribers-interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_OVERRIDE("notify-subscribers-interval", "50 ms")),
    KEEP(SH_DD "log-data-size-exceeding", K_SIZE, CFG_OFF, CFG_AKKA, NULL,
        "Accepted and ignored, as shoal/cluster/distributed-data/log-data-size-exceeding."),
    KEPT32(SH_DD "max-delta-elements", K_UINT, CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_OVERRIDE("max-delta-elements", "5 (Akka's)")),
    KEEP(SH_DD "use-dispatcher", K_STRING, 0, CFG_AKKA, NULL,
        SH_DD_JVM),
    KEPT32(SH_DD "pruning-interval", K_DURATION, CFG_OFF | CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_DOC("pruning-interval")),
    KEPT32(SH_DD "max-pruning-dissemination", K_DURATION, CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_DOC("max-pruning-dissemination")),
    KEEP(SH_DD "pruning-marker-time-to-live", K_DURATION, CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_DOC("pruning-marker-time-to-live")),
    KEEP(SH_DD "serializer-cache-time-to-live", K_DURATION, 0, CFG_AKKA, NULL,
        "Akka's serializer cache: accepted and ignored (none here)."),
    KEEP(SH_DD "prefer-oldest", K_BOOL, 0, CFG_AKKA, NULL,
        SH_DD_OVERRIDE("prefer-oldest", "on (Akka's)")),
    KEEP(SH_DD "delta-crdt/enabled", K_BOOL, 0, CFG_AKKA, NULL,
        SH_DD_DOC("delta-crdt/enabled")),
    KEPT32(SH_DD "delta-crdt/max-delta-size", K_UINT, CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_DOC("delta-crdt/max-delta-size")),
    KEEP(SH_DD "expire-keys-after-inactivity", K_EXPIRY, CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_DOC("expire-keys-after-inactivity")),
    KEEP(SH_DD "durable/keys", K_LIST, 0, CFG_AKKA, NULL,
        SH_DD_OVERRIDE("durable/keys", "shard-* (Akka's)")),
    KEEP(SH_DD "durable/pruning-marker-time-to-live", K_DURATION, CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_DOC("durable/pruning-marker-time-to-live")),
    KEEP(SH_DD "durable/store-actor-class", K_STRING, 0, CFG_AKKA, NULL,
        SH_DD_JVM),
    KEEP(SH_DD "durable/use-dispatcher", K_STRING, 0, CFG_AKKA, NULL,
        SH_DD_JVM),
    KEEP(SH_DD "durable/pinned-store", K_ANY_TREE, 0, CFG_AKKA, NULL,
        SH_DD_JVM),
    KEEP(SH_DD "durable/lmdb/dir", K_STRING, 0, CFG_AKKA, NULL,
        SH_DD_LMDB),
    KEEP(SH_DD "durable/lmdb/map-size", K_SIZE, CFG_POSITIVE, CFG_AKKA, NULL,
        SH_DD_LMDB),
    KEEP(SH_DD "durable/lmdb/write-behind-interval", K_DURATION, CFG_OFF, CFG_AKKA, NULL,
        SH_DD_LMDB),
    KEPT32(SH_DD "delta-interval", K_DURATION, CFG_POSITIVE, CFG_SHOAL, NULL,
        SH_DD_OVERRIDE("delta-interval", "a fifth of the gossip interval")),
    KEEP(SH_DD "tombstone-time-to-live", K_DURATION, CFG_POSITIVE, CFG_SHOAL, NULL,
        SH_DD_DOC("tombstone-time-to-live")),
    KEPT_MAX(SH_DD "compress-above", K_SIZE, 0, SIZE_MAX, CFG_SHOAL, NULL,
        SH_DD_DOC("compress-above")),
    KEPT_MAX(SH_DD "max-reassembly-size", K_SIZE, CFG_POSITIVE, SIZE_MAX, CFG_SHOAL, NULL,
        SH_DD_DOC("max-reassembly-size")),
    KEPT32(SH_DD "max-pending-operations", K_UINT, CFG_POSITIVE, CFG_SHOAL, NULL,
        SH_DD_DOC("max-pending-operations")),
    /* JVM executor */
    KEEP(SH "use-dispatcher", K_STRING, 0, CFG_AKKA, NULL,
        "JVM only (an actor, class or dispatcher name): accepted and ignored, so that Akka files "
        "load."),
    /* refused unless empty: Shoal has no leases */
    KEEP(SH "use-lease", K_STRING, 0, CFG_AKKA, NULL,
        "Leases are not supported: refused unless empty."),
    KEEP(SH "lease-retry-interval", K_DURATION, CFG_POSITIVE, CFG_AKKA, NULL,
        "Leases are not supported: accepted and ignored."),
    KEEP(SH "verbose-debug-logging", K_BOOL, 0, CFG_AKKA, NULL,
        "Akka's debug switch: accepted and ignored (see the log level)."),
    KEEP(SH "fail-on-invalid-entity-state-transition", K_BOOL, 0, CFG_AKKA, NULL,
        "Akka's check: accepted and ignored."),
    KEEP(SH "healthcheck/names", K_LIST, 0, CFG_AKKA, NULL,
        "Akka's health check: accepted, not used (shoal_sharding_healthy takes the names)."),
    KEPT32(SH "healthcheck/timeout", K_DURATION, CFG_POSITIVE, CFG_AKKA, NULL,
        "Akka's health check timeout: accepted, not used."),
    KEPT32(SH "healthcheck/disabled-after", K_DURATION, 0, CFG_AKKA, NULL,
        "Akka's health check: accepted, not used."),
    /* Shoal's own */
    KEPT_CHOICE(SH "allocation-strategy", "least-shards|consistent-hashing|external",
        CFG_SHOAL, "least-shards",
        "least-shards, consistent-hashing (rendezvous hashing on member address) or external "
        "(shoal_external_allocate)."),
    KEPT32(SH "consistent-hashing-allocation-strategy/rebalance-limit", K_UINT, 0, CFG_SHOAL, "0",
        "consistent-hashing: most shards moved per round (0: no limit)."), /* 0: none */
};

#define N_KEYS (sizeof cfg_keys / sizeof cfg_keys[0])

/* The descriptive side of row i, for the generator of docs/configuration.md. */
bool shoal_config_key_doc(size_t i, shoal_config_key_doc_t *out)
{
    static const char *const kinds[] = {
        [K_DURATION] = "duration", [K_SIZE] = "size",     [K_BOOL] = "on/off",
        [K_UINT] = "number",       [K_STRING] = "string", [K_HOST] = "host",
        [K_LIST] = "list",         [K_EXPIRY] = "map",    [K_ANY_TREE] = "section",
        [K_DOUBLE] = "decimal",    [K_CHOICE] = "choice",
    };
    if (i >= N_KEYS || !out)
        return false;
    const cfg_key_t *k = &cfg_keys[i];
    *out = (shoal_config_key_doc_t){
        .path = k->path,
        .kind = kinds[k->kind],
        .choices = k->choices,
        .off = (k->flags & CFG_OFF) != 0,
        .shoal_own = k->shoal_own,
        .dflt = k->dflt,
        .doc = k->doc,
    };
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * The config object
 */
typedef struct {
    char **v;
    size_t n, cap;
} cfg_strs_t;

/* A value of a row with a '*' segment, under the name the file gave: one per role section. */
typedef struct {
    size_t row;
    char *path; /* the full path as written, e.g. shoal/cluster/role/backend/min-nr-of-members */
    cfg_value_t v;
} cfg_instance_t;

/* Memory handed out by a const config (composed endpoints, shoal_config_alloc, section name
   arrays), freed with it. */
typedef struct {
    void **v;
    size_t n, cap;
} cfg_blocks_t;

struct shoal_config {
    cfg_value_t values[N_KEYS]; /* by row of cfg_keys (unused for rows with a '*' segment) */
    cfg_instance_t *inst;       /* values of '*' rows, in file order */
    size_t n_inst, cap_inst;
    /* Endpoints composed by shoal_config_system from one of hostname/port and the caller's
       endpoint; behind a pointer so that a const config can still own what it hands out. */
    cfg_strs_t *composed;
    cfg_blocks_t *blocks;
};

static bool path_has_wildcard(const char *path)
{
    return strstr(path, "/*/") != NULL || strcmp(path + strlen(path) - 2, "/*") == 0;
}

/* An index of the table, built once: every lookup of a setting (a hundred or more per loaded
   file) would otherwise compare the path with each of the table's rows. Exact rows are sorted by
   path for a binary search; the rows with a '*' segment are few and are matched in turn. */
static struct {
    pthread_once_t once;
    bool wild[N_KEYS];
    uint16_t exact[N_KEYS]; /* rows without '*', by path */
    size_t n_exact;
    uint16_t wild_rows[N_KEYS]; /* rows with '*', in table order */
    size_t n_wild;
} key_index = {.once = PTHREAD_ONCE_INIT};

_Static_assert(N_KEYS < UINT16_MAX, "rows are indexed by uint16_t");

static int cmp_row_path(const void *a, const void *b)
{
    const uint16_t *x = a, *y = b;
    int c = strcmp(cfg_keys[*x].path, cfg_keys[*y].path);
    return c != 0 ? c : (*x > *y) - (*x < *y); /* equal paths: first row first */
}

static void build_key_index(void)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        key_index.wild[i] = path_has_wildcard(cfg_keys[i].path);
        if (key_index.wild[i])
            key_index.wild_rows[key_index.n_wild++] = (uint16_t)i;
        else
            key_index.exact[key_index.n_exact++] = (uint16_t)i;
    }
    qsort(key_index.exact, key_index.n_exact, sizeof key_index.exact[0], cmp_row_path);
}

static bool has_wildcard(const cfg_key_t *k)
{
    pthread_once(&key_index.once, build_key_index);
    return key_index.wild[k - cfg_keys];
}

/* The first exact row whose path is path, or N_KEYS. */
static size_t exact_row(const char *path)
{
    pthread_once(&key_index.once, build_key_index);
    size_t lo = 0, hi = key_index.n_exact;
    while (lo < hi) { /* lower bound: the first row not below path */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(cfg_keys[key_index.exact[mid]].path, path) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < key_index.n_exact && strcmp(cfg_keys[key_index.exact[lo]].path, path) == 0)
        return key_index.exact[lo];
    return N_KEYS;
}

/* How a path stands to a table path, segment by segment (a '*' segment of the table path matches
   any one non-empty segment). */
typedef enum {
    M_NONE,
    M_EQUAL,
    M_SECTION, /* the path is a proper parent of the table path */
    M_BELOW,   /* the table path is a proper parent of the path; *rest is what follows it */
} match_t;

static match_t match_path(const char *k, const char *path, const char **rest)
{
    const char *a = k, *b = path;
    while (true) {
        const char *ae = strchr(a, '/'), *be = strchr(b, '/');
        size_t al = ae ? (size_t)(ae - a) : strlen(a), bl = be ? (size_t)(be - b) : strlen(b);
        bool same = (al == 1 && a[0] == '*' && bl > 0) || (al == bl && memcmp(a, b, al) == 0);
        if (!same)
            return M_NONE;
        if (!ae && !be)
            return M_EQUAL;
        if (!be)
            return M_SECTION;
        if (!ae) {
            *rest = be + 1;
            return M_BELOW;
        }
        a = ae + 1;
        b = be + 1;
    }
}

/* The value of a key by its full path, with its row in *key; NULL (and *key NULL) when the
   path is no key of the table. A known key the file does not set gives an unset value. */
static const cfg_value_t *lookup(const shoal_config_t *cfg, const char *path, const cfg_key_t **key)
{
    static const cfg_value_t unset;
    const char *rest = NULL;
    *key = NULL;
    size_t exact = exact_row(path);
    /* a row with a '*' segment before the exact row in the table wins, as a scan would find it */
    for (size_t w = 0; w < key_index.n_wild && key_index.wild_rows[w] < exact; w++) {
        size_t i = key_index.wild_rows[w];
        if (match_path(cfg_keys[i].path, path, &rest) == M_EQUAL) {
            *key = &cfg_keys[i];
            for (size_t j = 0; j < cfg->n_inst; j++)
                if (strcmp(cfg->inst[j].path, path) == 0)
                    return &cfg->inst[j].v;
            return &unset;
        }
    }
    if (exact == N_KEYS)
        return NULL;
    *key = &cfg_keys[exact];
    return &cfg->values[exact];
}

/* The parsed value of a row by path (an unset value for a path not in the table). */
static const cfg_value_t *value_of(const shoal_config_t *cfg, const char *path)
{
    static const cfg_value_t unset;
    const cfg_key_t *k;
    const cfg_value_t *v = lookup(cfg, path, &k);
    return v ? v : &unset;
}

/* A zeroed block that lives as long as cfg. */
static void *keep_block(const shoal_config_t *cfg, size_t size)
{
    cfg_blocks_t *b = cfg->blocks;
    SHOAL_GROW(b->v, b->cap, b->n + 1);
    b->v[b->n] = shoal_calloc(1, size);
    return b->v[b->n++];
}

static void value_free(cfg_value_t *v)
{
    free(v->str);
    free(v->raw);
    for (size_t i = 0; i < v->n; i++)
        free(v->list[i]);
    free(v->list);
    free(v->expiry);
    memset(v, 0, sizeof *v);
}

void shoal_config_destroy(shoal_config_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_config_t *cfg = *self_p;
    for (size_t i = 0; i < N_KEYS; i++)
        value_free(&cfg->values[i]);
    for (size_t i = 0; i < cfg->n_inst; i++) {
        value_free(&cfg->inst[i].v);
        free(cfg->inst[i].path);
    }
    free(cfg->inst);
    for (size_t i = 0; i < cfg->blocks->n; i++)
        free(cfg->blocks->v[i]);
    free(cfg->blocks->v);
    free(cfg->blocks);
    for (size_t i = 0; i < cfg->composed->n; i++)
        free(cfg->composed->v[i]);
    free(cfg->composed->v);
    free(cfg->composed);
    free(cfg);
    *self_p = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Error messages
 */
int shoal_config_error(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return SHOAL_EINVAL;
}

/* The loader writes many messages; the short name keeps them on one line each. */
#define fail shoal_config_error

/* A value as it may appear in a message: printable ASCII, others as \xNN, long ones cut. */
#define QUOTE_CAP 80
static const char *quote(char out[QUOTE_CAP], const char *s, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 8 >= QUOTE_CAP) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f)
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, QUOTE_CAP - o, "\\x%02x", c);
    }
    out[o] = '\0';
    return out;
}

/* ---------------------------------------------------------------------------------------------
 * Values
 */
static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The value without surrounding white space (quoted values keep what was inside the quotes). */
static void trim(const char **s, size_t *len)
{
    while (*len && is_space(**s))
        (*s)++, (*len)--;
    while (*len && is_space((*s)[*len - 1]))
        (*len)--;
}

typedef enum { NUM_OK, NUM_SYNTAX, NUM_RANGE, NUM_FRACTION } num_status_t;

/* "12" or "1.25" then an optional unit of `units` (matched exactly after optional blanks), as
   round(mantissa * num / (den * 10^fraction_digits)) — which must be a whole number. An empty
   unit is the unit of units[0]. */
typedef struct {
    const char *name;
    uint64_t num, den;
} cfg_unit_t;

static num_status_t parse_quantity(const char *s, size_t len, const cfg_unit_t *units,
                                   uint64_t *out)
{
    size_t i = 0;
    uint64_t mant = 0, scale = 1;
    bool any = false, overflow = false;
    while (i < len && is_digit(s[i])) {
        if (__builtin_mul_overflow(mant, 10, &mant) ||
            __builtin_add_overflow(mant, (uint64_t)(s[i] - '0'), &mant))
            overflow = true;
        i++, any = true;
    }
    if (!any)
        return NUM_SYNTAX;
    if (i < len && s[i] == '.') {
        i++;
        any = false;
        while (i < len && is_digit(s[i])) {
            if (__builtin_mul_overflow(mant, 10, &mant) ||
                __builtin_add_overflow(mant, (uint64_t)(s[i] - '0'), &mant) ||
                __builtin_mul_overflow(scale, 10, &scale))
                overflow = true;
            i++, any = true;
        }
        if (!any)
            return NUM_SYNTAX;
    }
    while (i < len && (s[i] == ' ' || s[i] == '\t'))
        i++;
    const char *unit = s + i;
    size_t ulen = len - i;
    const cfg_unit_t *u = NULL;
    if (ulen == 0)
        u = &units[0];
    else
        for (const cfg_unit_t *k = units; k->name; k++)
            if (strlen(k->name) == ulen && memcmp(k->name, unit, ulen) == 0) {
                u = k;
                break;
            }
    if (!u)
        return NUM_SYNTAX;
    if (overflow)
        return NUM_RANGE;
    uint64_t top, bottom;
    if (__builtin_mul_overflow(mant, u->num, &top))
        return NUM_RANGE;
    if (__builtin_mul_overflow(scale, u->den, &bottom)) {
        /* so many decimals that the divisor overflows: exact only for a zero value */
        if (top != 0)
            return NUM_FRACTION;
        bottom = 1;
    }
    if (top % bottom)
        return NUM_FRACTION;
    *out = top / bottom;
    return NUM_OK;
}

/* HOCON's duration units (case-sensitive, like HOCON), in milliseconds; plain numbers are ms. */
static const cfg_unit_t duration_units[] = {
    {"ms", 1, 1},
    {"milli", 1, 1},
    {"millis", 1, 1},
    {"millisecond", 1, 1},
    {"milliseconds", 1, 1},
    {"ns", 1, 1000000},
    {"nano", 1, 1000000},
    {"nanos", 1, 1000000},
    {"nanosecond", 1, 1000000},
    {"nanoseconds", 1, 1000000},
    {"us", 1, 1000},
    {"micro", 1, 1000},
    {"micros", 1, 1000},
    {"microsecond", 1, 1000},
    {"microseconds", 1, 1000},
    {"s", 1000, 1},
    {"second", 1000, 1},
    {"seconds", 1000, 1},
    {"m", 60000, 1},
    {"minute", 60000, 1},
    {"minutes", 60000, 1},
    {"h", 3600000, 1},
    {"hour", 3600000, 1},
    {"hours", 3600000, 1},
    {"d", 86400000, 1},
    {"day", 86400000, 1},
    {"days", 86400000, 1},
    {NULL, 0, 0},
};

/* Byte sizes: Akka's files use KiB/MiB; SI kB/MB/GB are accepted too. HOCON's single letters
   (k, K, M, G: powers of two) are refused on purpose, being easy to misread as SI. */
static const cfg_unit_t size_units[] = {
    {"B", 1, 1},
    {"b", 1, 1},
    {"byte", 1, 1},
    {"bytes", 1, 1},
    {"kB", 1000, 1},
    {"kilobyte", 1000, 1},
    {"kilobytes", 1000, 1},
    {"KiB", 1024, 1},
    {"kibibyte", 1024, 1},
    {"kibibytes", 1024, 1},
    {"MB", 1000000, 1},
    {"megabyte", 1000000, 1},
    {"megabytes", 1000000, 1},
    {"MiB", 1048576, 1},
    {"mebibyte", 1048576, 1},
    {"mebibytes", 1048576, 1},
    {"GB", 1000000000, 1},
    {"gigabyte", 1000000000, 1},
    {"gigabytes", 1000000000, 1},
    {"GiB", 1073741824, 1},
    {"gibibyte", 1073741824, 1},
    {"gibibytes", 1073741824, 1},
    {NULL, 0, 0},
};

static const cfg_unit_t no_units[] = {{"", 1, 1}, {NULL, 0, 0}};

static bool word_is(const char *s, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(s, word, len) == 0;
}

/* A number-valued kind: checks the syntax, "off", zero and the field's range. */
static int parse_number(const cfg_key_t *k, const char *path, const char *s, size_t len,
                        uint64_t *out, char *err, size_t errlen)
{
    char q[QUOTE_CAP];
    const char *what = k->kind == K_DURATION ? "a duration"
                       : k->kind == K_SIZE   ? "a size"
                                             : "a whole number";
    const char *example = k->kind == K_DURATION ? " (e.g. 500 ms, 2 s, 10 minutes, 1 d)"
                          : k->kind == K_SIZE   ? " (e.g. 4096, 256 KiB, 100 MiB, 1 GB)"
                                                : "";
    if ((k->flags & CFG_OFF) && word_is(s, len, "off")) {
        *out = 0;
        return 0;
    }
    const cfg_unit_t *units = k->kind == K_DURATION ? duration_units
                              : k->kind == K_SIZE   ? size_units
                                                    : no_units;
    uint64_t v = 0;
    switch (parse_quantity(s, len, units, &v)) {
    case NUM_OK:
        break;
    case NUM_SYNTAX:
        return fail(err, errlen, "%s: '%s' is not %s%s%s", path, quote(q, s, len), what,
                    (k->flags & CFG_ON)    ? ", on nor off"
                    : (k->flags & CFG_OFF) ? " nor off"
                                           : "",
                    example);
    case NUM_FRACTION:
        return fail(err, errlen, "%s: '%s' is not a whole number of %s", path, quote(q, s, len),
                    k->kind == K_DURATION ? "milliseconds"
                    : k->kind == K_SIZE   ? "bytes"
                                          : "units");
    case NUM_RANGE:
        return fail(err, errlen, "%s: '%s' is too large", path, quote(q, s, len));
    }
    if (v == 0 && (k->flags & CFG_POSITIVE))
        return fail(err, errlen, "%s: '%s' must be more than zero%s", path, quote(q, s, len),
                    (k->flags & CFG_OFF) ? " (off disables it)" : "");
    if (v > k->max)
        return fail(err, errlen, "%s: '%s' is too large (at most %" PRIu64 "%s)", path,
                    quote(q, s, len), k->max,
                    k->kind == K_DURATION ? " ms"
                    : k->kind == K_SIZE   ? " bytes"
                                          : "");
    *out = v;
    return 0;
}

static int parse_bool(const char *path, const char *s, size_t len, uint64_t *out, char *err,
                      size_t errlen)
{
    static const char *const yes[] = {"on", "true", "yes"}, *const no[] = {"off", "false", "no"};
    for (size_t i = 0; i < 3; i++) {
        if (word_is(s, len, yes[i])) {
            *out = 1;
            return 0;
        }
        if (word_is(s, len, no[i])) {
            *out = 0;
            return 0;
        }
    }
    char q[QUOTE_CAP];
    return fail(err, errlen, "%s: '%s' is not a boolean (on, off, true, false, yes or no)", path,
                quote(q, s, len));
}

/* A host for tcp://host:port: a name, an IPv4 address or an IPv6 address (bracketed or not). */
static int parse_host(const char *path, const char *s, size_t len, char **out, char *err,
                      size_t errlen)
{
    char q[QUOTE_CAP];
    if (len == 0)
        return fail(err, errlen, "%s: the host name is empty", path);
    if (len > SHOAL_NODE_ID_MAX - 30)
        return fail(err, errlen, "%s: '%s' is too long for a host name", path, quote(q, s, len));
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '.' ||
                  c == '-' || c == '_' || c == ':' || c == '[' || c == ']';
        if (!ok)
            return fail(err, errlen, "%s: '%s' is not a host name or address", path,
                        quote(q, s, len));
    }
    bool bracketed = s[0] == '[';
    if (bracketed != (s[len - 1] == ']') || (bracketed && len < 3) ||
        memchr(s + bracketed, '[', len - bracketed) ||
        (memchr(s, ']', len) && memchr(s, ']', len) != s + len - 1))
        return fail(err, errlen, "%s: '%s' is not a host name or address", path, quote(q, s, len));
    /* an IPv6 address goes into tcp:// and node ids in brackets */
    if (!bracketed && memchr(s, ':', len)) {
        *out = shoal_malloc(len + 3);
        (*out)[0] = '[';
        memcpy(*out + 1, s, len);
        (*out)[len + 1] = ']';
        (*out)[len + 2] = '\0';
    } else {
        *out = shoal_malloc(len + 1);
        memcpy(*out, s, len);
        (*out)[len] = '\0';
    }
    return 0;
}

/* A key name or prefix: not empty, '*' only as the last character. */
static int check_pattern(const char *path, const char *s, size_t len, char *err, size_t errlen)
{
    char q[QUOTE_CAP];
    if (len == 0)
        return fail(err, errlen, "%s: empty key name in the list", path);
    const char *star = memchr(s, '*', len);
    if (star && star != s + len - 1)
        return fail(err, errlen, "%s: '%s': '*' may only end a key (a prefix)", path,
                    quote(q, s, len));
    return 0;
}

/* Removes one pair of matching quotes around a list item. */
static void unquote(const char **s, size_t *len)
{
    if (*len >= 2 && ((*s)[0] == '"' || (*s)[0] == '\'') && (*s)[*len - 1] == (*s)[0]) {
        (*s)++;
        *len -= 2;
        trim(s, len);
    }
}

/* Drops HOCON list brackets: `["a", "b"]` reads like `a, b`. */
static void unbracket(const char **s, size_t *len)
{
    if (*len >= 2 && (*s)[0] == '[' && (*s)[*len - 1] == ']') {
        (*s)++;
        *len -= 2;
        trim(s, len);
    }
}

static char *strndup_checked(const char *s, size_t len)
{
    char *d = shoal_malloc(len + 1);
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

static void list_push(cfg_value_t *v, const char *s, size_t len)
{
    SHOAL_GROW(v->list, v->cap, v->n + 1);
    v->list[v->n++] = strndup_checked(s, len);
}

static int parse_list(const char *path, const char *s, size_t len, cfg_value_t *v, char *err,
                      size_t errlen)
{
    unbracket(&s, &len);
    if (len == 0)
        return 0; /* an empty list */
    const char *end = s + len;
    while (true) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *item = s;
        size_t ilen = (size_t)((comma ? comma : end) - s);
        trim(&item, &ilen);
        unquote(&item, &ilen);
        if (check_pattern(path, item, ilen, err, errlen))
            return SHOAL_EINVAL;
        list_push(v, item, ilen);
        if (!comma)
            return 0;
        s = comma + 1;
    }
}

/* One expiry entry: pattern -> duration. Duplicate patterns are refused (which would win?). */
static int add_expiry(const cfg_key_t *k, const char *path, cfg_value_t *v, const char *pat,
                      size_t plen, const char *dur, size_t dlen, char *err, size_t errlen)
{
    char q[QUOTE_CAP];
    if (check_pattern(path, pat, plen, err, errlen))
        return SHOAL_EINVAL;
    for (size_t i = 0; i < v->n; i++)
        if (strlen(v->list[i]) == plen && memcmp(v->list[i], pat, plen) == 0)
            return fail(err, errlen, "%s: '%s' is given twice", path, quote(q, pat, plen));
    /* the message names the entry: path/pattern */
    shoal_buf_t epath = {0};
    shoal_buf_printf(&epath, "%s/", path);
    shoal_buf_append(&epath, pat, plen);
    uint64_t ms = 0;
    cfg_key_t entry = *k;
    entry.kind = K_DURATION;
    int rc = parse_number(&entry, shoal_buf_cstr(&epath), dur, dlen, &ms, err, errlen);
    shoal_buf_free(&epath);
    if (rc)
        return rc;
    list_push(v, pat, plen);
    size_t cap = v->expiry_cap;
    SHOAL_GROW(v->expiry, cap, v->n);
    v->expiry_cap = cap;
    v->expiry[v->n - 1].after_ms = ms;
    /* list may have moved: point every entry at its pattern again */
    for (size_t i = 0; i < v->n; i++)
        v->expiry[i].pattern = v->list[i];
    return 0;
}

/* The inline form "key-1 = 10 minutes, cache-* = 2 minutes" (ZPL names cannot hold '*'). */
static int parse_expiry_inline(const cfg_key_t *k, const char *path, cfg_value_t *v, const char *s,
                               size_t len, char *err, size_t errlen)
{
    char q[QUOTE_CAP];
    if (len >= 2 && s[0] == '{' && s[len - 1] == '}') {
        s++, len -= 2;
        trim(&s, &len);
    }
    if (len == 0)
        return 0;
    const char *end = s + len;
    while (true) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *item_end = comma ? comma : end;
        const char *eq = memchr(s, '=', (size_t)(item_end - s));
        if (!eq)
            return fail(err, errlen, "%s: '%s' is not 'key = duration'", path,
                        quote(q, s, (size_t)(item_end - s)));
        const char *pat = s, *dur = eq + 1;
        size_t plen = (size_t)(eq - s), dlen = (size_t)(item_end - dur);
        trim(&pat, &plen);
        unquote(&pat, &plen);
        trim(&dur, &dlen);
        if (add_expiry(k, path, v, pat, plen, dur, dlen, err, errlen))
            return SHOAL_EINVAL;
        if (!comma)
            return 0;
        s = comma + 1;
    }
}

/* A decimal number without sign or exponent ("8", "0.8", "12.5"), within [0, k->max] and above
   0 with CFG_POSITIVE. Parsed by hand: strtod follows the C locale's decimal point. */
static int parse_double(const cfg_key_t *k, const char *path, const char *s, size_t len,
                        double *out, char *err, size_t errlen)
{
    char q[QUOTE_CAP];
    size_t i = 0;
    double v = 0, scale = 1;
    bool digits = false;
    while (i < len && is_digit(s[i]))
        v = v * 10 + (s[i++] - '0'), digits = true;
    if (digits && i < len && s[i] == '.') {
        i++;
        bool frac = false;
        while (i < len && is_digit(s[i])) {
            scale /= 10;
            v += (s[i++] - '0') * scale;
            frac = true;
        }
        digits = frac;
    }
    if (!digits || i != len)
        return fail(err, errlen, "%s: '%s' is not a number (e.g. 8, 0.8, 12.5)", path,
                    quote(q, s, len));
    if (v == 0 && (k->flags & CFG_POSITIVE))
        return fail(err, errlen, "%s: '%s' must be more than zero", path, quote(q, s, len));
    if (!(v <= (double)k->max))
        return fail(err, errlen, "%s: '%s' is too large (at most %" PRIu64 ")", path,
                    quote(q, s, len), k->max);
    *out = v;
    return 0;
}

/* One of the row's words "a|b|c". */
static int parse_choice(const cfg_key_t *k, const char *path, const char *s, size_t len, char **out,
                        char *err, size_t errlen)
{
    char q[QUOTE_CAP];
    for (const char *c = k->choices; c && *c;) {
        const char *bar = strchr(c, '|');
        size_t clen = bar ? (size_t)(bar - c) : strlen(c);
        if (clen == len && memcmp(c, s, len) == 0) {
            *out = strndup_checked(s, len);
            return 0;
        }
        c += clen + (bar != NULL);
    }
    shoal_buf_t words = {0};
    for (const char *c = k->choices; c && *c; c++)
        shoal_buf_append(&words, *c == '|' ? ", " : c, *c == '|' ? 2 : 1);
    fail(err, errlen, "%s: '%s' is not one of %s", path, quote(q, s, len), shoal_buf_cstr(&words));
    shoal_buf_free(&words);
    return SHOAL_EINVAL;
}

/* Parses a leaf's value into v (which is empty). */
static int parse_value(const cfg_key_t *k, const char *path, const char *value, cfg_value_t *v,
                       char *err, size_t errlen)
{
    const char *s = value ? value : "";
    size_t len = strlen(s);
    trim(&s, &len);
    switch (k->kind) {
    case K_DURATION:
        if ((k->flags & CFG_ON) && word_is(s, len, "on")) {
            v->on = true;
            return 0;
        }
        return parse_number(k, path, s, len, &v->num, err, errlen);
    case K_SIZE:
    case K_UINT:
        return parse_number(k, path, s, len, &v->num, err, errlen);
    case K_DOUBLE:
        return parse_double(k, path, s, len, &v->dbl, err, errlen);
    case K_CHOICE:
        return parse_choice(k, path, s, len, &v->str, err, errlen);
    case K_BOOL:
        return parse_bool(path, s, len, &v->num, err, errlen);
    case K_STRING:
        v->str = strndup_checked(s, len);
        return 0;
    case K_HOST:
        return parse_host(path, s, len, &v->str, err, errlen);
    case K_LIST:
        return parse_list(path, s, len, v, err, errlen);
    case K_EXPIRY:
        return parse_expiry_inline(k, path, v, s, len, err, errlen);
    case K_ANY_TREE:
        return 0;
    }
    return fail(err, errlen, "%s: internal error: unknown kind", path);
}

/* ---------------------------------------------------------------------------------------------
 * ZPL syntax check, with zconfig's rules (zconfig_chunk_load: s_collect_level, s_collect_name,
 * s_collect_value, s_verify_eoln), so that its failures get a line and a reason.
 */
static bool is_namechar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '$' ||
           c == '-' || c == '_' || c == '@' || c == '.' || c == '&' || c == '+' || c == '/';
}

/* Nothing but blanks, or a comment, from p to the end of the line. */
static bool rest_is_blank(const char *p, const char *end)
{
    while (p < end && is_space(*p))
        p++;
    return p == end || *p == '#';
}

static int check_zpl(const char *text, size_t len, char *err, size_t errlen)
{
    char q[QUOTE_CAP];
    const char *p = text, *end = text + len;
    int prev_level = -1; /* level of the last entry: an entry may go at most one deeper */
    size_t entries = 0;
    for (unsigned lineno = 1; p < end; lineno++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *line = p, *lend = eol ? eol : end;
        p = eol ? eol + 1 : end;
        if (lend - line > CFG_MAX_LINE)
            return fail(err, errlen, "line %u: longer than %d characters", lineno, CFG_MAX_LINE);
        while (lend > line && is_space(lend[-1]))
            lend--;
        const char *s = line;
        while (s < lend && *s == ' ')
            s++;
        if ((s - line) % 4)
            return fail(err, errlen, "line %u: indent by multiples of 4 spaces", lineno);
        int level = (int)((s - line) / 4);
        const char *name = s;
        while (s < lend && is_namechar(*s))
            s++;
        if (s == name) {
            /* blank or comment line */
            if (!rest_is_blank(s, lend))
                return fail(err, errlen, "line %u: %s'%s'", lineno,
                            *s == '\t' ? "indent with spaces, not tabs: " : "invalid syntax: ",
                            quote(q, s, (size_t)(lend - s)));
            continue;
        }
        if (name[0] == '/' || s[-1] == '/')
            return fail(err, errlen, "line %u: a name cannot start or end with '/'", lineno);
        if (level > prev_level + 1)
            return fail(err, errlen, "line %u: indented deeper than the section it is in", lineno);
        if (++entries > CFG_MAX_ENTRIES)
            return fail(err, errlen, "line %u: more than %d entries", lineno, CFG_MAX_ENTRIES);
        prev_level = level;
        while (s < lend && is_space(*s))
            s++;
        if (s < lend && *s == '=') {
            s++;
            while (s < lend && is_space(*s))
                s++;
            if (s < lend && (*s == '"' || *s == '\'')) {
                const char *close = memchr(s + 1, *s, (size_t)(lend - s - 1));
                if (!close)
                    return fail(err, errlen, "line %u: missing closing %c", lineno, *s);
                if (!rest_is_blank(close + 1, lend))
                    return fail(err, errlen, "line %u: text after the closing quote: '%s'", lineno,
                                quote(q, close + 1, (size_t)(lend - close - 1)));
            }
        } else if (!rest_is_blank(s, lend)) {
            return fail(err, errlen,
                        "line %u: invalid syntax: '%s' (expected 'name = value'; names are "
                        "letters, digits and $-_@.&+/)",
                        lineno, quote(q, name, (size_t)(lend - name)));
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Walking the tree
 */
typedef struct {
    shoal_config_t *cfg;
    char *err;
    size_t errlen;
} walk_t;

/* What a key path is in the table. */
typedef enum { P_UNKNOWN, P_SECTION, P_KEY, P_INSIDE } place_t;

/* P_KEY: *row is the path's row; P_INSIDE: the path is below an expiry map or an ignored tree
   (*row), *rest is the remainder after its '/'; P_SECTION: the path is a parent of some row. */
static place_t place_of(const char *path, size_t *row, const char **rest)
{
    place_t found = P_UNKNOWN;
    for (size_t i = 0; i < N_KEYS; i++) {
        const char *below = NULL;
        switch (match_path(cfg_keys[i].path, path, &below)) {
        case M_EQUAL:
            *row = i;
            return P_KEY;
        case M_SECTION:
            found = P_SECTION;
            break;
        case M_BELOW:
            if (cfg_keys[i].kind == K_EXPIRY || cfg_keys[i].kind == K_ANY_TREE) {
                *row = i;
                *rest = below;
                return P_INSIDE;
            }
            break;
        case M_NONE:
            break;
        }
    }
    return found;
}

/* Where a key's value goes: its row's, or for a row with a '*' segment the instance of this
   path (made on first sight). */
static cfg_value_t *value_slot(shoal_config_t *cfg, size_t row, const char *path)
{
    if (!has_wildcard(&cfg_keys[row]))
        return &cfg->values[row];
    for (size_t j = 0; j < cfg->n_inst; j++)
        if (strcmp(cfg->inst[j].path, path) == 0)
            return &cfg->inst[j].v;
    SHOAL_GROW(cfg->inst, cfg->cap_inst, cfg->n_inst + 1);
    cfg_instance_t *in = &cfg->inst[cfg->n_inst++];
    memset(in, 0, sizeof *in);
    in->row = row;
    in->path = strndup_checked(path, strlen(path));
    return &in->v;
}

static bool has_value(zconfig_t *node)
{
    const char *v = zconfig_value(node);
    if (!v)
        return false;
    size_t len = strlen(v);
    trim(&v, &len);
    return len > 0;
}

static int walk_node(walk_t *w, zconfig_t *node, shoal_buf_t *path);

static int walk_children(walk_t *w, zconfig_t *node, shoal_buf_t *path)
{
    size_t keep = path->len;
    for (zconfig_t *c = zconfig_child(node); c; c = zconfig_next(c)) {
        path->len = keep;
        if (keep)
            shoal_buf_append(path, "/", 1);
        const char *name = zconfig_name(c);
        shoal_buf_append(path, name, strlen(name));
        int rc = walk_node(w, c, path);
        if (rc)
            return rc;
    }
    path->len = keep;
    return 0;
}

static int walk_node(walk_t *w, zconfig_t *node, shoal_buf_t *path)
{
    char q[QUOTE_CAP];
    const char *p = shoal_buf_cstr(path);
    const char *value = zconfig_value(node) ? zconfig_value(node) : "";
    if (strncmp(p, "shoal", 5) != 0 || (p[5] != '\0' && p[5] != '/')) {
        const char *slash = strchr(p, '/');
        size_t top = slash ? (size_t)(slash - p) : strlen(p);
        return fail(w->err, w->errlen, "unknown section '%s' at the top level (use shoal)",
                    quote(q, p, top));
    }
    size_t row = 0;
    const char *rest = NULL;
    switch (place_of(p, &row, &rest)) {
    case P_UNKNOWN:
        return fail(w->err, w->errlen, "unknown setting %s%s", p,
                    strchr(zconfig_name(node), '.') ? " (nest sections or use '/', not '.')" : "");
    case P_SECTION:
        if (has_value(node))
            return fail(w->err, w->errlen, "%s is a section, not a setting (given '%s')%s", p,
                        quote(q, value, strlen(value)),
                        strchr(zconfig_name(node), '.') ? " (nest sections or use '/', not '.')"
                                                        : "");
        return walk_children(w, node, path);
    case P_INSIDE: {
        const cfg_key_t *k = &cfg_keys[row];
        if (k->kind == K_ANY_TREE)
            return 0;
        /* an expiry entry written with slashes: .../expire-keys-after-inactivity/key-1 = 1 m */
        if (zconfig_child(node))
            return fail(w->err, w->errlen, "%s takes a duration, not a section", p);
        w->cfg->values[row].set = true;
        return add_expiry(k, k->path, &w->cfg->values[row], rest, strlen(rest), value,
                          strlen(value), w->err, w->errlen);
    }
    case P_KEY:
        break;
    }
    const cfg_key_t *k = &cfg_keys[row];
    if (k->kind == K_ANY_TREE)
        return 0;
    cfg_value_t *v = value_slot(w->cfg, row, p);
    if (k->kind == K_EXPIRY) {
        /* a section of entries, an inline value, or both; entries accumulate */
        v->set = true;
        if (parse_value(k, p, value, v, w->err, w->errlen))
            return SHOAL_EINVAL;
        for (zconfig_t *c = zconfig_child(node); c; c = zconfig_next(c)) {
            const char *name = zconfig_name(c);
            const char *cv = zconfig_value(c) ? zconfig_value(c) : "";
            if (zconfig_child(c))
                return fail(w->err, w->errlen, "%s/%s takes a duration, not a section", p, name);
            if (add_expiry(k, p, v, name, strlen(name), cv, strlen(cv), w->err, w->errlen))
                return SHOAL_EINVAL;
        }
        return 0;
    }
    if (zconfig_child(node))
        return fail(w->err, w->errlen, "%s is a setting, not a section", p);
    if (v->set)
        return fail(w->err, w->errlen, "%s is set twice", p);
    if (parse_value(k, p, value, v, w->err, w->errlen)) {
        value_free(v);
        return SHOAL_EINVAL;
    }
    const char *raw = value;
    size_t rlen = strlen(raw);
    trim(&raw, &rlen);
    v->raw = strndup_checked(raw, rlen);
    v->set = true;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 */
static shoal_config_t *config_new(void)
{
    shoal_config_t *cfg = shoal_calloc(1, sizeof *cfg);
    cfg->composed = shoal_calloc(1, sizeof *cfg->composed);
    cfg->blocks = shoal_calloc(1, sizeof *cfg->blocks);
    return cfg;
}

static shoal_config_t *parse_text(const char *text, size_t len, char *err, size_t errlen)
{
    if (len > CFG_MAX_TEXT) {
        fail(err, errlen, "configuration larger than %u bytes", CFG_MAX_TEXT);
        return NULL;
    }
    if (check_zpl(text, len, err, errlen))
        return NULL;
    zconfig_t *root = zconfig_str_load(text);
    if (!root) {
        /* the pre-check should have caught it; never accept what zconfig refused */
        fail(err, errlen, "not a valid ZPL configuration");
        return NULL;
    }
    shoal_config_t *cfg = config_new();
    walk_t w = {cfg, err, errlen};
    shoal_buf_t path = {0};
    int rc = walk_children(&w, root, &path);
    shoal_buf_free(&path);
    zconfig_destroy(&root);
    if (rc) {
        shoal_config_destroy(&cfg);
        return NULL;
    }
    if (err && errlen)
        err[0] = '\0';
    return cfg;
}

/* The constructors' convention (ddata.h, THE DETAIL OF A FAILURE): NULL with the code in *err
   and the message, naming the file, line and key, as this thread's detail. */
static shoal_config_t *config_result(shoal_config_t *cfg, int code, const char *why, int *err)
{
    if (err)
        *err = cfg ? 0 : code;
    if (cfg)
        shoal_error_detail_clear();
    else
        shoal_error_detail_set(code, "%s", why);
    return cfg;
}

shoal_config_t *shoal_config_parse(const char *text, int *err)
{
    char why[512] = "";
    if (!text)
        return config_result(NULL, SHOAL_EINVAL, "no configuration text", err);
    shoal_config_t *cfg = parse_text(text, strlen(text), why, sizeof why);
    return config_result(
        cfg, strstr(why, "configuration larger than") ? SHOAL_ETOOBIG : SHOAL_EINVAL, why, err);
}

static shoal_config_t *load_file(const char *path, int *code, char *err, size_t errlen);

shoal_config_t *shoal_config_load(const char *path, int *err)
{
    char why[768] = "";
    int code = SHOAL_EINVAL;
    shoal_config_t *cfg = load_file(path, &code, why, sizeof why);
    return config_result(cfg, code, why, err);
}

static shoal_config_t *load_file(const char *path, int *code, char *err, size_t errlen)
{
    if (!path) {
        fail(err, errlen, "no configuration file name");
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        *code = SHOAL_EIO;
        fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    shoal_buf_t text = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && text.len <= CFG_MAX_TEXT)
        shoal_buf_append(&text, chunk, n);
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    shoal_config_t *cfg = NULL;
    if (read_errno) {
        *code = SHOAL_EIO;
        fail(err, errlen, "%s: cannot read: %s", path, strerror(read_errno));
    } else if (text.len > CFG_MAX_TEXT) {
        *code = SHOAL_ETOOBIG;
        fail(err, errlen, "%s: larger than %u bytes", path, CFG_MAX_TEXT);
    } else if (memchr(shoal_buf_cstr(&text), '\0', text.len)) {
        *code = SHOAL_EDECODE;
        fail(err, errlen, "%s: not a text file (contains a NUL byte)", path);
    } else {
        cfg = parse_text(shoal_buf_cstr(&text), text.len, err, errlen);
        if (!cfg && err && errlen) {
            /* prefix the file name */
            char inner[512];
            snprintf(inner, sizeof inner, "%s", err);
            snprintf(err, errlen, "%s: %s", path, inner);
        }
    }
    shoal_buf_free(&text);
    return cfg;
}

/* ---------------------------------------------------------------------------------------------
 * Filling settings
 */
static void fill(const shoal_config_t *cfg, cfg_target_t target, void *out)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (cfg_keys[i].target == target && cfg->values[i].set)
            cfg_keys[i].set(out, cfg_keys[i].offset, &cfg->values[i]);
}

/* Host and port of a tcp://host:port endpoint; false if it is not one. */
static bool split_endpoint(const char *ep, const char **host, size_t *hlen, unsigned *port)
{
    if (!ep || strncmp(ep, "tcp://", 6) != 0)
        return false;
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon || colon == h || !colon[1] || strlen(colon + 1) > 5)
        return false;
    unsigned p = 0;
    for (const char *d = colon + 1; *d; d++) {
        if (!is_digit(*d))
            return false;
        p = p * 10 + (unsigned)(*d - '0');
    }
    if (p > 65535)
        return false;
    *host = h;
    *hlen = (size_t)(colon - h);
    *port = p;
    return true;
}

static const char *keep_composed(const shoal_config_t *cfg, const char *s)
{
    cfg_strs_t *c = cfg->composed;
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->v[i], s) == 0)
            return c->v[i];
    SHOAL_GROW(c->v, c->cap, c->n + 1);
    c->v[c->n] = strndup_checked(s, strlen(s));
    return c->v[c->n++];
}

int shoal_config_system(const shoal_config_t *cfg, shoal_system_settings_t *out, char *err,
                        size_t errlen)
{
    if (!cfg || !out)
        return fail(err, errlen, "shoal_config_system: NULL argument");
    fill(cfg, CFG_SYSTEM, out);
    shoal_log_level_t level;
    const cfg_value_t *lv = value_of(cfg, "shoal/loglevel");
    if (lv->set && shoal_log_level_parse(lv->str, &level) == 0)
        shoal_log_level_default(level);
    const cfg_value_t *host = value_of(cfg, ARTERY "canonical/hostname");
    const cfg_value_t *port = value_of(cfg, ARTERY "canonical/port");
    if (host->set || port->set) {
        /* the part the file leaves out comes from the caller's endpoint */
        const char *h = CFG_DEFAULT_HOST;
        size_t hlen = strlen(h);
        unsigned p = CFG_DEFAULT_PORT;
        split_endpoint(out->endpoint, &h, &hlen, &p);
        if (host->set)
            h = host->str, hlen = strlen(host->str);
        if (port->set)
            p = (unsigned)port->num;
        shoal_buf_t ep = {0};
        shoal_buf_printf(&ep, "tcp://%.*s:%u", (int)hlen, h, p);
        out->endpoint = keep_composed(cfg, shoal_buf_cstr(&ep));
        shoal_buf_free(&ep);
    }
    if (err && errlen)
        err[0] = '\0';
    return 0;
}

int shoal_config_replicator(const shoal_config_t *cfg, shoal_replicator_settings_t *out, char *err,
                            size_t errlen)
{
    if (!cfg || !out)
        return fail(err, errlen, "shoal_config_replicator: NULL argument");
    fill(cfg, CFG_REPLICATOR, out);
    /* Akka derives the delta propagation interval from gossip-interval (a fifth of it); a file
       that changes only gossip-interval keeps that relation */
    if (value_of(cfg, DD "gossip-interval")->set && !value_of(cfg, DD "delta-interval")->set)
        out->delta_interval_ms = out->gossip_interval_ms / 5 ? out->gossip_interval_ms / 5 : 1;
    if (err && errlen)
        err[0] = '\0';
    return 0;
}

int shoal_config_replicator_limits(const shoal_config_t *cfg, shoal_replicator_limits_t *out,
                                   char *err, size_t errlen)
{
    if (!cfg || !out)
        return fail(err, errlen, "shoal_config_replicator_limits: NULL argument");
    memset(out, 0, sizeof *out);
    size_t bytes = 0;
    int rc = shoal_config_uint(cfg, DD "max-keys", &out->max_keys, err, errlen);
    if (rc >= 0)
        rc = shoal_config_size(cfg, DD "max-bytes", &bytes, err, errlen);
    if (rc < 0)
        return rc;
    out->max_bytes = bytes;
    if (err && errlen)
        err[0] = '\0';
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Reading single settings (for modules above ddata, whose settings structs ddata cannot know).
 * Values were parsed and checked against their row at load, so a getter only checks that the
 * caller asks for the row's kind: a mismatch is a programming error, reported naming the key.
 */
const char *shoal_config_get(const shoal_config_t *cfg, const char *path)
{
    if (!cfg || !path)
        return NULL;
    const cfg_key_t *k;
    const cfg_value_t *v = lookup(cfg, path, &k);
    if (!v || !v->set)
        return NULL;
    return v->raw ? v->raw : "";
}

/* 1 and *v when the file sets path, 0 when not, SHOAL_EINVAL when path is not a key of kind. */
static int read_kind(const shoal_config_t *cfg, const char *path, cfg_kind_t kind, const char *what,
                     const cfg_value_t **v, char *err, size_t errlen)
{
    if (!cfg || !path)
        return fail(err, errlen, "shoal_config_get: NULL argument");
    const cfg_key_t *k;
    const cfg_value_t *val = lookup(cfg, path, &k);
    if (!val)
        return fail(err, errlen, "%s: no such setting", path);
    if (k->kind != kind)
        return fail(err, errlen, "%s: not %s setting", path, what);
    if (!val->set)
        return 0;
    *v = val;
    return 1;
}

int shoal_config_duration(const shoal_config_t *cfg, const char *path, uint64_t *ms, char *err,
                          size_t errlen)
{
    const cfg_value_t *v = NULL;
    int rc = read_kind(cfg, path, K_DURATION, "a duration", &v, err, errlen);
    if (rc != 1)
        return rc;
    if (v->on)
        return fail(err, errlen, "%s: 'on' is not a duration (check shoal_config_get first)", path);
    *ms = v->num;
    return 1;
}

int shoal_config_size(const shoal_config_t *cfg, const char *path, size_t *bytes, char *err,
                      size_t errlen)
{
    const cfg_value_t *v = NULL;
    int rc = read_kind(cfg, path, K_SIZE, "a size", &v, err, errlen);
    if (rc != 1)
        return rc;
    /* every size row is bounded by SIZE_MAX or less; checked so that a wider row cannot wrap */
    if (v->num > SIZE_MAX)
        return fail(err, errlen, "%s: '%s' is too large", path, v->raw ? v->raw : "");
    *bytes = (size_t)v->num;
    return 1;
}

int shoal_config_expiry(const shoal_config_t *cfg, const char *path, const shoal_expiry_t **items,
                        size_t *n, char *err, size_t errlen)
{
    const cfg_value_t *v = NULL;
    int rc = read_kind(cfg, path, K_EXPIRY, "an expiry map", &v, err, errlen);
    if (rc == 1) {
        *items = v->expiry;
        *n = v->n;
    }
    return rc;
}

int shoal_config_uint(const shoal_config_t *cfg, const char *path, uint64_t *out, char *err,
                      size_t errlen)
{
    const cfg_value_t *v = NULL;
    int rc = read_kind(cfg, path, K_UINT, "a whole-number", &v, err, errlen);
    if (rc == 1)
        *out = v->num;
    return rc;
}

int shoal_config_double(const shoal_config_t *cfg, const char *path, double *out, char *err,
                        size_t errlen)
{
    const cfg_value_t *v = NULL;
    int rc = read_kind(cfg, path, K_DOUBLE, "a decimal", &v, err, errlen);
    if (rc == 1)
        *out = v->dbl;
    return rc;
}

int shoal_config_bool(const shoal_config_t *cfg, const char *path, bool *out, char *err,
                      size_t errlen)
{
    const cfg_value_t *v = NULL;
    int rc = read_kind(cfg, path, K_BOOL, "a boolean", &v, err, errlen);
    if (rc == 1)
        *out = v->num != 0;
    return rc;
}

int shoal_config_list(const shoal_config_t *cfg, const char *path, const char *const **items,
                      size_t *n, char *err, size_t errlen)
{
    const cfg_value_t *v = NULL;
    int rc = read_kind(cfg, path, K_LIST, "a list", &v, err, errlen);
    if (rc == 1) {
        *items = (const char *const *)v->list;
        *n = v->n;
    }
    return rc;
}

size_t shoal_config_sections(const shoal_config_t *cfg, const char *parent,
                             const char *const **names)
{
    *names = NULL;
    if (!cfg || !parent)
        return 0;
    size_t plen = strlen(parent), n = 0;
    const char **out = NULL;
    for (size_t i = 0; i < cfg->n_inst; i++) {
        const char *p = cfg->inst[i].path;
        if (!cfg->inst[i].v.set || strncmp(p, parent, plen) != 0 || p[plen] != '/')
            continue;
        const char *name = p + plen + 1, *slash = strchr(name, '/');
        size_t len = slash ? (size_t)(slash - name) : strlen(name);
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = strlen(out[j]) == len && memcmp(out[j], name, len) == 0;
        if (seen)
            continue;
        if (!out) /* at most one name per instance */
            out = keep_block(cfg, (cfg->n_inst + 1) * sizeof *out);
        char *copy = keep_block(cfg, len + 1);
        memcpy(copy, name, len);
        out[n++] = copy;
    }
    *names = out;
    return n;
}

void *shoal_config_alloc(const shoal_config_t *cfg, size_t size)
{
    return cfg ? keep_block(cfg, size) : NULL;
}

/* A uint32_t row: the loader bounds these keys to UINT32_MAX; checked again because a key whose
   bound is wider would otherwise wrap silently. */
static int read_u32(const shoal_config_t *cfg, const shoal_cfg_field_t *row, uint32_t *out,
                    char *err, size_t errlen)
{
    uint64_t v = 0;
    int rc = row->kind == SHOAL_CFG_MS32 ? shoal_config_duration(cfg, row->path, &v, err, errlen)
                                         : shoal_config_uint(cfg, row->path, &v, err, errlen);
    if (rc != 1)
        return rc;
    if (v > UINT32_MAX)
        return fail(err, errlen, "%s: '%s' is too large", row->path,
                    shoal_config_get(cfg, row->path));
    *out = (uint32_t)v;
    return 1;
}

static int read_row(const shoal_config_t *cfg, const shoal_cfg_field_t *row, char *at, char *err,
                    size_t errlen)
{
    int rc = 0;
    switch (row->kind) {
    case SHOAL_CFG_MS32:
    case SHOAL_CFG_U32: {
        uint32_t v = 0;
        if ((rc = read_u32(cfg, row, &v, err, errlen)) == 1)
            memcpy(at, &v, sizeof v);
        break;
    }
    case SHOAL_CFG_DOUBLE: {
        double v = 0;
        if ((rc = shoal_config_double(cfg, row->path, &v, err, errlen)) == 1)
            memcpy(at, &v, sizeof v);
        break;
    }
    case SHOAL_CFG_BOOL: {
        bool v = false;
        if ((rc = shoal_config_bool(cfg, row->path, &v, err, errlen)) == 1)
            memcpy(at, &v, sizeof v);
        break;
    }
    default:
        return fail(err, errlen, "%s: unknown field kind %d", row->path ? row->path : "(null)",
                    (int)row->kind);
    }
    return rc < 0 ? rc : 0;
}

int shoal_config_fields(const shoal_config_t *cfg, const shoal_cfg_field_t *rows, size_t n,
                        void *settings, char *err, size_t errlen)
{
    if (!cfg || (n && (!rows || !settings)))
        return fail(err, errlen, "shoal_config_fields: NULL argument");
    for (size_t i = 0; i < n; i++) {
        int rc = read_row(cfg, &rows[i], (char *)settings + rows[i].offset, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The management endpoint's keys (ddata.h, HARDENING): here rather than in metrics.c, which the
   layers keep from the configuration. */
int shoal_config_http(const shoal_config_t *cfg, shoal_http_settings_t *out, char *err,
                      size_t errlen)
{
    if (!cfg || !out)
        return shoal_config_error(err, errlen, "shoal_config_http: NULL argument");
    const char *const *items = NULL;
    size_t n = 0;
    int rc = shoal_config_list(cfg, HTTP "hosts", &items, &n, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        if (n > SHOAL_HTTP_HOSTS_MAX)
            return shoal_config_error(err, errlen, HTTP "hosts: at most %d names",
                                      SHOAL_HTTP_HOSTS_MAX);
        out->n_hosts = 0;
        for (size_t i = 0; i < n; i++)
            out->hosts[out->n_hosts++] = items[i];
    }
    const char *v;
    if ((v = shoal_config_get(cfg, HTTP "token-file")) != NULL)
        out->token_file = v;
    if ((v = shoal_config_get(cfg, HTTP "tls-certificate")) != NULL)
        out->tls_cert_file = v;
    if ((v = shoal_config_get(cfg, HTTP "tls-key")) != NULL)
        out->tls_key_file = v;
    bool b;
    if ((rc = shoal_config_bool(cfg, HTTP "token-for-reads", &b, err, errlen)) < 0)
        return rc;
    if (rc == 1)
        out->token_for_reads = b;
    uint64_t x;
    if ((rc = shoal_config_duration(cfg, HTTP "request-timeout", &x, err, errlen)) < 0)
        return rc;
    if (rc == 1)
        out->request_timeout_ms = (uint32_t)x;
    if ((rc = shoal_config_uint(cfg, HTTP "max-connections", &x, err, errlen)) < 0)
        return rc;
    if (rc == 1)
        out->max_connections = (uint32_t)x;
    if ((rc = shoal_config_uint(cfg, HTTP "max-connections-per-address", &x, err, errlen)) < 0)
        return rc;
    if (rc == 1)
        out->max_per_address = (uint32_t)x;
    return 0;
}
