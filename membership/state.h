/*  state.h — private to membership/: the cluster state value (custom ddata type "ClusterState",
    tag 100, format version 2) and the pure functions over it (convergence, leader, reachability).

    The value is a join-semilattice (see membership.h, THE CLUSTER STATE):
      members      sorted by node (shoal_node_cmp); merge per node: status max, up_number the
                   lowest non-zero, the descriptive fields (roles, app version, heartbeat endpoint,
                   public key, protocol_max) are written once by the joining node; if two records
                   ever disagree the one whose fields compare lower (canonical bytes) wins, so
                   merge stays a join. protocol_max comes last in that order and a higher one
                   compares lower: a record that carries it wins over the same record without it
                   (a 0.1.x node decodes the state without the field and sends it back so).
      reach rows   one per observer that cannot reach someone: {version, sorted set of subjects};
                   only the observer writes its row, and its version is the observer's clock
                   entry after that write (a dot). An observer that reaches everyone again drops
                   its row; the clock remembers the drop: a row whose version the other side's
                   clock already covers, and which that side no longer holds, was dropped there
                   and is dropped by the merge (the causal-context rule of delta CRDTs). So rows
                   exist only for observers that see someone unreachable now (Akka keeps records
                   only for non-reachable subjects).
      vclock       a VersionVector; every local change raises the writer's entry.
      seen         the set of nodes that have seen this very clock (Akka's Gossip.seen): a local
                   change clears it (the writer then marks itself), marking seen does not raise
                   the clock. Clock and seen merge as one lattice ordered by (clock, then seen
                   set): equal clocks union their sets, a strictly newer clock's set wins, and
                   concurrent clocks merge to a clock nobody has seen yet (the empty set). This
                   is a join (the least upper bound in that order), so merge stays commutative,
                   associative and idempotent, and the seen set costs one index per member
                   instead of one vector clock per member (N² before).
    Marking seen means "this node holds the content of this clock": the content is a function of
    the clock because every change raises it (a merge of concurrent states gives the same
    content wherever it happens).
    Encoding is canonical protobuf (proto/membership.proto), decode validates everything (sorted,
    unique, statuses in range, sizes bounded) and never crashes. Format 1 (a seen table of one
    clock per node) still decodes: a node whose clock covers the state's is in the seen set.
*/
#ifndef SHOAL_MEMBERSHIP_STATE_H
#define SHOAL_MEMBERSHIP_STATE_H

#include "membership.h"

#define CSTATE_TAG 100
#define CSTATE_MAX_MEMBERS 5000
#define CSTATE_MAX_ROLES 64
#define CSTATE_MAX_STRING 256 /* role, app version, heartbeat endpoint, durable id */

typedef struct {
    const shoal_node_t *node;
    uint8_t status; /* shoal_member_status_t */
    uint64_t up_number;
    char **roles; /* sorted, unique */
    size_t n_roles;
    char *app_version;
    char *hb_endpoint;
    uint8_t *pubkey;
    size_t pubkey_len;
    char *durable_id; /* the identity its data directory keeps ("" = none): the same node across
                         restarts, whatever its address and incarnation */
    uint32_t protocol_max; /* the highest protocol version the member speaks; 0 = not said = 1
                              (0.1.x records, and builds whose highest is 1, which write none) */
} cmember_t;

typedef struct {
    const shoal_node_t *observer;
    uint64_t version;
    const shoal_node_t **unreachable; /* sorted by shoal_node_cmp, unique */
    size_t n;
} creach_row_t;

typedef struct {
    shoal_crdt_t base; /* type = &cstate_type */
    cmember_t *members;
    size_t n_members, members_cap;
    creach_row_t *rows;
    size_t n_rows, rows_cap;
    const shoal_node_t **seen; /* sorted by shoal_node_cmp, unique, members only */
    size_t n_seen, seen_cap;
    shoal_crdt_t *vclock;
} cstate_t;

extern const shoal_type_t cstate_type;
/* Registers the type with ddata (idempotent). */
int cstate_register(void);

cstate_t *cstate_new(void);
void cstate_destroy(cstate_t **self_p);
cstate_t *cstate_clone(const cstate_t *s);

/* Member records */
const cmember_t *cstate_member(const cstate_t *s, const shoal_node_t *node);
/* Adds a Joining member (no-op if the node is already there); raises writer's clock entry. */
int cstate_add_member(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                      const char *const *roles, size_t n_roles, const char *app_version,
                      const char *hb_endpoint, const uint8_t *pubkey, size_t pubkey_len,
                      const char *durable_id);
/* Raises a member's protocol_max to `protocol_max` (a value of 1 or below is "not said"); only
   the member itself writes it (from its Join, or its own record again when the record it finds
   lacks it: it joined through a 0.1.x seed, which drops the field). No-op (0, nothing raised)
   when the record already says as much; SHOAL_ENOTMEMBER for an unknown node. */
int cstate_set_protocol_max(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                            uint32_t protocol_max);
/* The cluster's protocol version (docs/protocol-versions.md): the lowest protocol_max (not said
   = 1) of the members not Removed, capped by `self_max` (this build's highest) and by `pin` when
   it is not 0 (shoal/cluster/protocol-version); never below 1. */
uint32_t cstate_protocol(const cstate_t *s, uint32_t self_max, uint32_t pin);
/* A member's protocol_max as a version (not said = 1). */
static inline uint32_t cmember_protocol(const cmember_t *m)
{
    return m && m->protocol_max > 1 ? m->protocol_max : 1;
}
/* Moves a member to a status (only forward in the precedence order; SHOAL_ESTATE otherwise,
   SHOAL_ENOTMEMBER for an unknown node); raises the clock. */
int cstate_set_status(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                      shoal_member_status_t status);
/* Sets the up-number of a member (only when it has none); raises the clock. */
int cstate_set_up_number(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                         uint64_t up_number);

/* Reachability: replaces the observer's row with this set (sorted or not; deduplicated), raising
   the observer's clock entry (the row's version is that entry); an empty set drops the row. No-op
   (0, nothing raised) if the set is the same. */
int cstate_set_unreachable(cstate_t *s, const shoal_node_t *observer,
                           const shoal_node_t *const *subjects, size_t n);
const creach_row_t *cstate_row(const cstate_t *s, const shoal_node_t *observer);
/* True when some observer that is a member not Down/Removed/Exiting lists `node` unreachable. */
bool cstate_is_unreachable(const cstate_t *s, const shoal_node_t *node);
/* Observers (members not Down/Removed) that list `node` unreachable, up to cap. */
size_t cstate_observers_of(const cstate_t *s, const shoal_node_t *node,
                           const shoal_node_t **out, size_t cap);

/* Seen: `node` (a member; others are ignored) has seen the current clock. */
void cstate_mark_seen(cstate_t *s, const shoal_node_t *node);
bool cstate_seen_by(const cstate_t *s, const shoal_node_t *node); /* in the seen set */
size_t cstate_seen_count(const cstate_t *s); /* members (not Removed) that have seen */

/* Digest-only gossip (membership's GossipStatus): a 16-byte digest of the clock, and the seen
   set as a bitset over the member list (bit i = members[i], little-endian within a byte). Two
   states with the same clock digest have the same members, so the bitset means the same on
   both. cstate_seen_bits fills ceil(n_members / 8) bytes of `out` (cap at least that). */
void cstate_clock_digest(const cstate_t *s, uint8_t out[16]);
size_t cstate_seen_bits(const cstate_t *s, uint8_t *out, size_t cap);
/* Merges a peer's seen bitset into s, whose clock digest the caller found equal to the peer's:
   the same as merging the peer's state. SHOAL_EDECODE if the bitset's length does not match the
   member list or it names a bit past the last member (nothing changed then). *added: how many
   nodes were added; *missing: how many of s's seen nodes the peer's set lacks. */
int cstate_merge_seen_bits(cstate_t *s, const uint8_t *bits, size_t len, size_t *added,
                           size_t *missing);

/* Pure decisions, every node computes the same */
bool cstate_converged(const cstate_t *s);
/* The leader among members having `role` (NULL or "" = every member), as `self` computes it:
   the first in address order among reachable members that are Up or Leaving, else among the
   reachable ones not Down/Removed (`self` counts as reachable). Every node of one side computes
   the same. */
const shoal_node_t *cstate_leader(const cstate_t *s, const char *role, const shoal_node_t *self);
/* The oldest Up member having `role` (lowest up-number, then address), or NULL. */
const shoal_node_t *cstate_oldest(const cstate_t *s, const char *role);
bool cmember_has_role(const cmember_t *m, const char *role);
/* Sum of the clock's entries (display only). */
uint64_t cstate_version_sum(const cstate_t *s);

#endif
