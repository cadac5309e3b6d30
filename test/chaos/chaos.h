/*  chaos.h — what the chaos suite's node (chaos_node.c) and workload driver (chaos_client.c)
    share: the client/admin request kinds the node serves beside the replicator's own, and the
    replicated keys the workload writes. See tools/chaos.py for the suite.
*/
#ifndef SHOAL_CHAOS_H
#define SHOAL_CHAOS_H

/* Client/admin requests (transport kinds >= SHOAL_KIND_CLIENT), each answered with the same kind
   and a text reply that starts with "ok" or "err <reason>". */
#define CHAOS_KIND_SEND  0x8c01u /* "ENTITY\nMSGID": send "m:MSGID" to the entity through the
                                    node's at-least-once producer; the reply comes only after the
                                    entity confirmed it (its state, holding MSGID, saved) */
#define CHAOS_KIND_STATE 0x8c02u /* "ENTITY": asks the entity for its state; reply
                                    "ok DUPS N\nID\nID..." */
#define CHAOS_KIND_FAULT 0x8c03u /* "heal", or "DIR CUT DROP DUP DELAY_MS PEER|*" with DIR in|out|
                                    both: the transport's fault injection (shoal_system_fault) */
#define CHAOS_KIND_INFO  0x8c04u /* reply "ok" then "name value" lines: node id, member status,
                                    may-act, the region's counters */

/* The entity type, and the replicated keys the workload writes (all durable: "chaos-*"). */
#define CHAOS_TYPE "acct"
#define CHAOS_COUNTERS 4  /* GCounter "chaos-c-0".."chaos-c-3", WriteMajority increments */
#define CHAOS_SETS 2      /* ORSet "chaos-s-0", "chaos-s-1": adds (WriteMajority), removes */
#define CHAOS_MAP "chaos-m" /* LWWMap: puts of keys "k0".."k7" */
#define CHAOS_MAP_KEYS 8

#endif
