/*  state.h — private to membership/: the cluster state value (custom ddata type "ClusterState",
    tag 100) and the pure functions over it (convergence, leader, reachability).

    The value is a join-semilattice (see membership.h, THE CLUSTER STATE):
      members      sorted by node (shoal_node_cmp); merge per node: status max, up_number the
                   lowest non-zero, the descriptive fields (roles, app version, heartbeat endpoint,
                   public key) are written once by the joining node; if two records ever disagree
                   the one whose fields compare lower (canonical bytes) wins, so merge stays a
                   join.
      reach rows   one per observer: {version, sorted set of subjects it cannot reach}; merge
                   keeps the row with the higher version (equal versions: the lower canonical
                   bytes, deterministic). Only the observer writes its row.
      vclock       a VersionVector; every local change raises the writer's entry.
      seen         node -> VersionVector (what that node had seen); merge pointwise max. Marking
                   seen does not raise the clock.
    Encoding is canonical protobuf (proto/membership.proto), decode validates everything (sorted,
    unique, statuses in range, sizes bounded) and never crashes.
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
} cmember_t;

typedef struct {
    const shoal_node_t *observer;
    uint64_t version;
    const shoal_node_t **unreachable; /* sorted by shoal_node_cmp, unique */
    size_t n;
} creach_row_t;

typedef struct {
    const shoal_node_t *node;
    shoal_crdt_t *vv; /* VersionVector */
} cseen_t;

typedef struct {
    shoal_crdt_t base; /* type = &cstate_type */
    cmember_t *members;
    size_t n_members, members_cap;
    creach_row_t *rows;
    size_t n_rows, rows_cap;
    cseen_t *seen;
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
/* Moves a member to a status (only forward in the precedence order; SHOAL_ESTATE otherwise,
   SHOAL_ENOTMEMBER for an unknown node); raises the clock. */
int cstate_set_status(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                      shoal_member_status_t status);
/* Sets the up-number of a member (only when it has none); raises the clock. */
int cstate_set_up_number(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                         uint64_t up_number);

/* Reachability: replaces the observer's row with this set (sorted or not; deduplicated), raising
   the row version and the observer's clock entry. No-op (0, nothing raised) if the set is the
   same. */
int cstate_set_unreachable(cstate_t *s, const shoal_node_t *observer,
                           const shoal_node_t *const *subjects, size_t n);
const creach_row_t *cstate_row(const cstate_t *s, const shoal_node_t *observer);
/* True when some observer that is a member not Down/Removed/Exiting lists `node` unreachable. */
bool cstate_is_unreachable(const cstate_t *s, const shoal_node_t *node);
/* Observers (members not Down/Removed) that list `node` unreachable, up to cap. */
size_t cstate_observers_of(const cstate_t *s, const shoal_node_t *node,
                           const shoal_node_t **out, size_t cap);

/* Seen */
void cstate_mark_seen(cstate_t *s, const shoal_node_t *node); /* seen[node] = clock */
bool cstate_seen_by(const cstate_t *s, const shoal_node_t *node); /* seen[node] >= clock */
size_t cstate_seen_count(const cstate_t *s); /* members (not Removed) that have seen */

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
