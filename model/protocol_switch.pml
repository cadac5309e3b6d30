/* protocol_switch.pml — model 3 of issue 33: THE PROTOCOL SWITCH (docs/protocol-versions.md).

   K = 3 nodes (-DK=4), each of one build: speaks[i] = its highest protocol version (1: 0.1.x or this
   release's build, 2: a build with protocol 2), chosen at the start. Node 0 founds the cluster;
   the others join through any member (a seed), within a budget of events (joins, crashes).
   Every node has its own view of the member records (status and protocol_max), spread by gossip
   with any delay (a push of one view to one node is one step, in any order).
   What it mirrors:
   - update_protocol / cstate_protocol (react.c, state.c): a node's version = its own build's
     max, lowered to the lowest protocol_max of the records in its view in any status but
     Removed (Joining and Down count); a node in no cluster is at 1;
   - the join refusal (on_init_join, on_join, refuse_protocol): a seed refuses a joiner whose
     range (1..speaks) does not hold the seed's version; otherwise adds it Joining with the
     protocol_max of its Join — which a seed of max 1 (0.1.x: on_join does not read the field)
     records as absent (1); the joiner then rewrites its own record once (update_protocol's
     protocol_rewritten);
   - re-encoding: a node of max 1 decodes and re-encodes the state without the field, so its view
     and what it gossips carry 1 for everyone; the merge keeps the higher protocol_max and the
     later status (Joining < Up < Down < Removed);
   - the guard of send_seen_status: the V2 GossipStatus only when the sender's version is >= 2
     and the peer's handshake said >= 2 (shoal_system_peer_protocol); a status is sent to the
     members of the sender's view and, as a reply, to any node that sent one (a node the sender
     may not know yet: a joiner let in by a stale seed).
   The leader's duties (Joining -> Up, a dead member Down, a Down member Removed) are done by any
   member on its tick (more interleavings than one leader). A leave is a crash followed by the
   removal (the version sees only "not Removed" and "Removed").
   Safety: no node is sent a V2 message unless it speaks 2 (assertion at the send).
   Liveness (LTL `live`, weak fairness): once the events are over and no node of max 1 is alive,
   every live member's version reaches 2.
   Known-bad variants: -DNOHS (the guard without the handshake check: safety), -DNOREWRITE (no
   rewrite of a record a max-1 seed wrote without the field: liveness). -DNOJOIN (Joining members
   not counted in the version) is still safe: the handshake check alone keeps every send safe.
*/

#ifndef K
#define K 3 /* nodes (-DK=4) */
#endif
#ifndef EVENTS
#define EVENTS 4 /* joins and crashes */
#endif
#define NONE 0
#define JOINING 1
#define UP 2
#define DOWN 3
#define REMOVED 4

byte st[K * K];  /* st[i*K+j]: node i's view of node j's status */
byte pm[K * K];  /* pm[i*K+j]: node i's view of node j's protocol_max (1 = absent) */
byte speaks[K];  /* the build's highest version */
bit alive[K];
bit rewritten[K];
byte events;
bit quiet;
bit allv2;       /* every live member's version is 2 (liveness) */
bit noold;       /* no node of max 1 is alive */

#define ST(i, j) st[(i) * K + (j)]
#define PM(i, j) pm[(i) * K + (j)]
#define ISMEM(i) (alive[i] && ST(i, i) >= JOINING && ST(i, i) <= UP)
#ifdef NOJOIN
#define COUNTS(s) ((s) == UP || (s) == DOWN)
#else
#define COUNTS(s) ((s) >= JOINING && (s) <= DOWN)
#endif

/* cstate_protocol as update_protocol calls it: into vv */
inline version(i, vv)
{
    if
    :: ST(i, i) == NONE -> vv = 1
    :: else ->
        vv = speaks[i];
        k = 0;
        do
        :: k < K ->
            if :: COUNTS(ST(i, k)) && PM(i, k) < vv -> vv = PM(i, k) :: else fi;
            k++
        :: else -> break
        od;
        k = 0
    fi
}

/* i pushes its view to j: the GossipStatus (its format by the guard) and the state (merge) */
inline gossip(i, j)
{
    version(i, v);
#ifdef NOHS
    if :: v >= 2 -> assert(speaks[j] >= 2) :: else fi;
#else
    if :: v >= 2 && speaks[j] >= 2 -> assert(speaks[j] >= 2) :: else fi;
#endif
    v = 0;
    if
    :: ST(i, j) != NONE || ST(j, i) != NONE -> /* the state reaches a node it concerns */
        k = 0;
        do
        :: k < K ->
            if :: ST(i, k) > ST(j, k) -> ST(j, k) = ST(i, k) :: else fi;
            /* the field survives only if both sides decode it (a node of max 1 drops it) */
            if
            :: speaks[i] >= 2 && speaks[j] >= 2 && PM(i, k) > PM(j, k) -> PM(j, k) = PM(i, k)
            :: else
            fi;
            k++
        :: else -> break
        od;
        k = 0
    :: else
    fi
}

#define TALKS(i, j) ((i) != (j) && alive[i] && alive[j] && ST(i, i) >= JOINING && ST(i, i) <= DOWN && \
                     ((ST(i, j) >= JOINING && ST(i, j) <= DOWN) || (ST(j, i) >= JOINING && ST(j, i) <= DOWN)))

inline update_flags()
{
    allv2 = 1; noold = 1; m = 0;
    do
    :: m < K ->
        if :: alive[m] && speaks[m] == 1 -> noold = 0 :: else fi;
        if
        :: alive[m] && ST(m, m) >= JOINING && ST(m, m) <= UP ->
            version(m, v);
            if :: v < 2 -> allv2 = 0 :: else fi;
            v = 0
        :: else
        fi;
        m++
    :: else -> break
    od;
    m = 0
}

proctype env()
{
    byte i, j, k, m, v;
    do
    /* a join: j asks seed i (InitJoin, Join) */
    :: atomic {
        events < EVENTS ->
        select(i : 0 .. K - 1); select(j : 0 .. K - 1);
        if
        :: i != j && alive[i] && alive[j] && ST(i, i) == UP && ST(j, j) == NONE && ST(i, j) == NONE ->
            events++;
            version(i, v);
            if
            :: v > speaks[j] -> skip /* refused (refuse_protocol) */
            :: else ->
                ST(i, j) = JOINING;
                PM(i, j) = (speaks[i] >= 2 -> speaks[j] : 1);
                /* the welcome: i's state pushed to j, which finds itself in it */
                k = 0;
                do
                :: k < K ->
                    ST(j, k) = ST(i, k);
                    PM(j, k) = (speaks[i] >= 2 && speaks[j] >= 2 -> PM(i, k) : 1);
                    k++
                :: else -> break
                od;
                k = 0
            fi;
            v = 0
        :: else
        fi;
        update_flags();
        i = 0; j = 0
       }
    /* a crash (or a leave: the member then goes Down and Removed) */
    :: atomic {
        events < EVENTS ->
        select(i : 0 .. K - 1);
        if :: alive[i] -> alive[i] = 0; events++ :: else fi;
        update_flags();
        i = 0
       }
    /* one gossip push, in any order (delay) */
    :: atomic {
        select(i : 0 .. K - 1); select(j : 0 .. K - 1);
        if :: TALKS(i, j) -> gossip(i, j) :: else fi;
        update_flags();
        i = 0; j = 0
       }
    :: atomic { !quiet -> quiet = 1; events = EVENTS }
    od
}

/* a member's tick: the rewrite of its own record, the leader's duties, a gossip round */
proctype node(byte i)
{
    byte j, k, m, v;
    do
    :: atomic {
        alive[i] && ST(i, i) >= JOINING && ST(i, i) <= UP ->
        if
#ifndef NOREWRITE
        :: !rewritten[i] && PM(i, i) < speaks[i] -> PM(i, i) = speaks[i]; rewritten[i] = 1
#endif
        :: else
        fi;
        j = 0;
        do
        :: j < K ->
            if
            :: ST(i, j) == JOINING && alive[j] -> ST(i, j) = UP
            :: ST(i, j) >= JOINING && ST(i, j) <= UP && !alive[j] -> ST(i, j) = DOWN
            :: ST(i, j) == DOWN -> ST(i, j) = REMOVED
            :: else
            fi;
            j++
        :: else -> break
        od;
        j = 0;
        do
        :: j < K -> if :: TALKS(i, j) -> gossip(i, j) :: else fi; j++
        :: else -> break
        od;
        j = 0;
        update_flags()
       }
    od
}

ltl live { [] ((quiet && noold) -> <> allv2) }

init
{
    byte j, k, m, v;
    atomic {
        k = 0;
        do
        :: k < K -> select(j : 1 .. 2); speaks[k] = j; alive[k] = 1; k++
        :: else -> break
        od;
        k = 0;
        do :: k < K * K -> pm[k] = 1; k++ :: else -> break od;
        ST(0, 0) = UP; PM(0, 0) = speaks[0]; rewritten[0] = 1;
        j = 0; k = 0;
        update_flags();
        run env();
        k = 0;
        do :: k < K -> run node(k); k++ :: else -> break od;
        k = 0
    }
}
