/*  sbr.h — private to membership/: the split-brain resolver's decision, a pure function of the
    members and the reachability records as one node sees them (tested on tables).

    Members counted: those not Joining, WeaklyUp, Exiting, Down or Removed (as Akka); with a role,
    only members having it count toward the decision, but every member of the losing side is
    downed.
    Indirectly connected members (a node that is both an observer and a subject of unreachable
    records, or an unreachable member that has seen the current state through someone) are
    handled on their own: a vertex cover of their flaky links is downed, never every member (see
    sbr.c); the strategy decides between the cleanly separated rest.

      keep-majority  the side with more counted members stays; a tie keeps the side holding the
                     lowest address among the counted members.
      keep-oldest    the side with the oldest counted member stays; with down_if_alone, an
                     oldest alone on its side (and the other side has more than one) is downed
                     instead.
      static-quorum  the side with at least quorum counted members stays; if neither or both
                     (more than 2*quorum-1 counted), all are downed.
      down-all       every member is downed.
*/
#ifndef SHOAL_MEMBERSHIP_SBR_H
#define SHOAL_MEMBERSHIP_SBR_H

#include "membership.h"

typedef struct {
    const shoal_node_t *node;
    shoal_member_status_t status;
    uint64_t up_number; /* 0 = not yet Up */
    bool has_role;      /* has the strategy's role (true when the strategy has none) */
    bool seen_current;  /* has seen the current state version (indirect connection evidence) */
} sbr_member_t;

typedef struct {
    const shoal_node_t *observer;
    const shoal_node_t *subject;
} sbr_record_t; /* `observer` cannot reach `subject` (live observers only) */

typedef struct {
    shoal_sbr_strategy_t strategy;
    uint32_t static_quorum_size;
    bool down_if_alone;
} sbr_config_t;

typedef enum {
    SBR_NO_DECISION = 0,
    SBR_DOWN_UNREACHABLE = 1,  /* this side stays */
    SBR_DOWN_REACHABLE = 2,    /* this side goes (self included) */
    SBR_DOWN_INDIRECT = 3,     /* only the indirectly connected go */
    SBR_DOWN_ALL = 4,
} sbr_decision_t;

/* Decides for the side of `self`. Writes the nodes to down (members not already Down/Removed)
   into to_down (cap >= n_members) and their count into *n_down. */
sbr_decision_t sbr_decide(const sbr_config_t *cfg, const sbr_member_t *members, size_t n_members,
                          const sbr_record_t *records, size_t n_records, const shoal_node_t *self,
                          const shoal_node_t **to_down, size_t *n_down);
const char *sbr_decision_name(sbr_decision_t d);

#endif
