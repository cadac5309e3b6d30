/* quorum_restart.pml — model 1 of issue 33: QUORUM INTERSECTION ACROSS RESTARTS (the frame).

   N members (3 by default; -DN=5), writes acknowledged at MAJORITY, reads at MAJORITY, one key
   whose value is the set of writes a replica holds (a grow-only merge, as every CRDT merge is
   for this purpose). Faults, within budgets: a member crashes and restarts with its store or
   empty; a member is cut off from everyone (both ways) and healed; the resolver removes a member
   (it counts no more: majorities shrink) and it joins again. Every step is atomic: a write, a
   read, a sync are each one step (a read answered by a set of members at one instant).

   THE RULE (ddata/replicator/replicator.c) is one macro group, chosen with -DRULE=...:
     RULE_OLD   the rule of 672634c: when the gate opens (the cluster forms, a restart, a join)
                a replica is CATCHING UP (catch_up_start) until it has synced with
                repl_catch_up_need = n - majority + 1 peers (repl_catch_up_check, repl_synced);
                while catching up its own copy does not count toward its MAJORITY reads, it asks
                that many peers, and it holds back its answers to peers' reads.
     RULE_NONE  no catching up: every replica counts its copy and answers at once.
     RULE_CAND  the candidate: only a replica that restarted empty or (re)joined catches up
                (a replica that kept its store and its membership holds every write it
                acknowledged); it needs n - majority + 1 synced peers (every majority that could
                have acknowledged a write it lacks meets them); catching-up replicas answer
                peers' reads, flagged: their answer is merged but not counted.
     RULE_AGE   (4) the code now, the age rule: repl_catch_up_done (O = counted peers older by
                up-number, oldest first; caught up once it synced with p/2 + 1 of every prefix
                o1..op), repl_catch_up_check, repl_synced (syncs with a peer that stopped
                counting no longer count), on_read (answers held back while catching up; syncs
                still answered), repl_start_read (a catching-up reader needs ceil(n/2) answers).
                Ages are ranks 1..N; every restart and rejoin is a new incarnation, the youngest.
   -DA2: the fault budget keeps A2 (a restart or removal only while no write whose counted set
   holds that member has lost one of the set already); the assertion is then the plain one.
   -DLIVE=2: liveness with the oldest MAJ counted members up and connected (empty restarts
   allowed). -DFORMED: the founders start caught up (a bound used for N = 5).
   Safety (assertion in read()): every MAJORITY read that completes returns every write
   acknowledged at MAJORITY before it, unless no member's store holds it any more (every holder
   restarted empty: lost for good, which no rule can help; or the holders were removed: the
   shrinking case docs/guarantees.md says is not covered).
   Liveness (LTL `live`, checked with weak fairness): once the faults are over, no member has
   restarted empty and a majority of the members is up and connected, some member's MAJORITY
   read completes.
*/

#ifndef N
#define N 3
#endif
#ifndef W
#define W 2 /* writes */
#endif
#ifndef FAULTS
#define FAULTS 3 /* crash/restart, cut/heal, remove/join events */
#endif
#define RULE_OLD 1
#define RULE_NONE 2
#define RULE_CAND 3
#define RULE_AGE 4
#ifndef RULE
#define RULE RULE_OLD
#endif
#define BIT(i) (1 << (i))
#ifndef LIVE
#define LIVE 1 /* 1: no member restarted empty and a majority up and connected; 2: the oldest MAJ */
#endif
#if RULE == RULE_AGE || LIVE == 2
#define AGES 1
#endif

bit up[N];          /* running */
bit cut[N];         /* cut off from everyone, both ways */
bit member[N];      /* counted (Up in the cluster); 0 after the resolver removed it */
byte has[N];        /* the writes this replica holds (bits) */
bit catching[N];    /* catching up (catch_up_start .. repl_catch_up_check) */
byte synced[N];     /* peers it synced with since (repl_synced) */
byte age[N];        /* RULE_AGE: membership's up-number of its incarnation, kept as a rank 1..N
                       (only the order matters): a new incarnation or a rejoin is the youngest */
byte cset[W];       /* -DA2: the members each write's coordinator counted (bits) */
bit gone[W];        /* -DA2: one of them has stopped counting since (removed, new incarnation) */
bit oldok;          /* the oldest MAJ counted members are up and connected (LIVE=2) */
byte acked;         /* writes acknowledged at MAJORITY */
byte nw;            /* writes issued */
byte faults;
bit emptied;        /* some member restarted empty */
bit quiet;          /* the faults are over */
bit readable;       /* the last read attempt completed */

/* counted members and the majority of them */
#define NMEM (member[0] + member[1] + member[2] + MORE_MEM)
#if N == 5
#define MORE_MEM (member[3] + member[4])
#define HELD (has[0] * member[0] | has[1] * member[1] | has[2] * member[2] | has[3] * member[3] | has[4] * member[4])
#define NUP (up[0]*!cut[0]*member[0] + up[1]*!cut[1]*member[1] + up[2]*!cut[2]*member[2] + \
             up[3]*!cut[3]*member[3] + up[4]*!cut[4]*member[4])
#else
#define MORE_MEM 0
#define HELD (has[0] * member[0] | has[1] * member[1] | has[2] * member[2])
#define NUP (up[0]*!cut[0]*member[0] + up[1]*!cut[1]*member[1] + up[2]*!cut[2]*member[2])
#endif
#if N == 5
#define CSET_MORE | member[3] * BIT(3) | member[4] * BIT(4)
#else
#define CSET_MORE
#endif
#define MAJ (NMEM / 2 + 1)
/* repl_catch_up_need */
#define NEED (NMEM - MAJ + 1)
/* i and j can talk */
#define TALK(i, j) (up[i] && up[j] && !cut[i] && !cut[j] && member[j])

/* --- THE RULE --------------------------------------------------------------------------- */
#if RULE == RULE_NONE
#define FORMS_CATCHING 0
#define STARTS_CATCHING(empty, joined) 0
#define SELF_COUNTS(i) 1
#define ANSWERS(j) 1
#define ANSWER_COUNTS(j) 1
#elif RULE == RULE_CAND
#define FORMS_CATCHING 0 /* nothing was acknowledged before the cluster formed */
#define STARTS_CATCHING(empty, joined) ((empty) || (joined))
#define SELF_COUNTS(i) (!catching[i])
#define ANSWERS(j) 1
#define ANSWER_COUNTS(j) (!catching[j])
#elif RULE == RULE_AGE
/* the code now: every gate opening catches up (catch_up_start; the oldest is done at once),
   catching-up replicas hold back their answers (on_read defers them) and do not count
   themselves; a catching-up reader needs NEED answers (repl_start_read's catch_up_extra) */
#define FORMS_CATCHING 1
#define STARTS_CATCHING(empty, joined) 1
#define SELF_COUNTS(i) (!catching[i])
#define ANSWERS(j) (!catching[j])
#define ANSWER_COUNTS(j) (!catching[j])
#else /* RULE_OLD, 672634c */
#define FORMS_CATCHING 1
#define STARTS_CATCHING(empty, joined) 1
#define SELF_COUNTS(i) (!catching[i])
#define ANSWERS(j) (!catching[j])
#define ANSWER_COUNTS(j) (!catching[j])
#endif
/* ------------------------------------------------------------------------------------------ */

#define popcount(x) (((x) & 1) + (((x) >> 1) & 1) + (((x) >> 2) & 1) + (((x) >> 3) & 1) + (((x) >> 4) & 1))

/* RULE_AGE: repl_catch_up_done. O = the counted peers older than k (age below k's), oldest
   first o1..om; done once for every p in 1..m, k synced with at least p/2 + 1 of o1..op
   (synced bits of peers that stopped counting are cleared, so they no longer count). Ages are a
   permutation of 1..N, so walking a = 1 .. age[k]-1 visits O oldest first. Sets catching[k] = 0
   when done (repl_catch_up_check). Uses the caller's chk_a, chk_m, chk_s, chk_j. */
inline check(k)
{
#if RULE == RULE_AGE
    if
    :: catching[k] ->
        chk_m = 0; chk_s = 0; chk_a = 1;
        do
        :: chk_a < age[k] ->
            chk_j = 0;
            do
            :: chk_j < N && age[chk_j] != chk_a -> chk_j++
            :: else -> break
            od;
            if
            :: chk_j != k && member[chk_j] ->
                chk_m++;
                chk_s = chk_s + ((synced[k] >> chk_j) & 1);
                if :: chk_s < chk_m / 2 + 1 -> chk_a = N + 1 /* not done */ :: else fi
            :: else
            fi;
            chk_a++
        :: else -> break
        od;
        if :: chk_a == age[k] -> catching[k] = 0; synced[k] = 0 :: else fi;
        chk_a = 0; chk_m = 0; chk_s = 0; chk_j = 0
    :: else
    fi
#else
    skip
#endif
}

/* A2 (-DA2): a fault that stops member i counting (a new incarnation, a removal) is allowed only
   if no write whose counted set holds i has lost a member of that set already */
#if W == 2
#define A2OK(i) (!((cset[0] >> (i)) & 1) || !gone[0]) && (!((cset[1] >> (i)) & 1) || !gone[1])
#else
#define A2OK(i) (!((cset[0] >> (i)) & 1) || !gone[0])
#endif
#ifdef A2
#define STOPOK(i) (!member[i] || (A2OK(i)))
#else
#define STOPOK(i) 1
#endif

/* member i stops counting as it was: a new incarnation (restart) or a removal */
inline stops(i)
{
#ifdef A2
    if :: member[i] && ((cset[0] >> i) & 1) -> gone[0] = 1; cset[0] = cset[0] & ~BIT(i) :: else fi;
#if W == 2
    if :: member[i] && ((cset[1] >> i) & 1) -> gone[1] = 1; cset[1] = cset[1] & ~BIT(i) :: else fi;
#endif
#endif
    /* the peers' syncs with it no longer count (caught_from holds the old node; repl_synced,
       and 672634c's repl_catch_up_check counted only caught_from peers still counted) */
    j = 0;
    do :: j < N -> synced[j] = synced[j] & ~BIT(i); j++ :: else -> break od;
    j = 0
}

/* member i becomes Up (again): a new up-number, the youngest (membership's leader) */
inline youngest(i)
{
#ifdef AGES
    j = 0;
    do :: j < N -> if :: age[j] > age[i] -> age[j]-- :: else fi; j++ :: else -> break od;
    age[i] = N; j = 0
#else
    skip
#endif
}

/* oldok: every counted member among the oldest MAJ is up and connected */
inline update_oldok()
{
#ifdef AGES
    oldok = 1; chk_m = 0; chk_a = 1;
    do
    :: chk_a <= N ->
        chk_j = 0;
        do :: chk_j < N && age[chk_j] != chk_a -> chk_j++ :: else -> break od;
        if
        :: member[chk_j] ->
            if :: chk_m < MAJ && !(up[chk_j] && !cut[chk_j]) -> oldok = 0 :: else fi;
            chk_m++
        :: else
        fi;
        chk_a++
    :: else -> break
    od;
    chk_a = 0; chk_m = 0; chk_j = 0
#else
    skip
#endif
}

/* A MAJORITY read at i (replicator.c: the read's quorum; a catching-up reader does not count
   itself). Completes when the counted answers reach MAJ; returns the merge of all answers. */
inline read(i, all)
{
    check(i);
    cnt = SELF_COUNTS(i);
    res = has[i];
    j = 0;
    do
    :: j < N ->
        if
        :: j != i && TALK(i, j) ->
            check(j) /* on_read: repl_catch_up_check before deferring */
        :: else
        fi;
        if
        :: j != i && TALK(i, j) && ANSWERS(j) ->
            /* the answers that arrive first: any subset (all of them for the probe) */
            if
            :: res = res | has[j]; cnt = cnt + ANSWER_COUNTS(j)
            :: !all -> skip
            fi
        :: else
        fi;
        j++
    :: else -> break
    od;
    if
#if RULE == RULE_AGE
    /* a catching-up reader needs NEED = ceil(n/2) answers (repl_catch_up_need) */
    :: (catching[i] && cnt >= NEED) || (!catching[i] && cnt >= MAJ) ->
#else
    :: cnt >= MAJ ->
#endif
        readable = 1;
        /* safety: every acknowledged write that some member's store still holds (one that every
           holder lost by restarting empty is lost for good, and one held only by members the
           resolver removed is the shrinking case docs/guarantees.md leaves out) */
#ifdef A2
        /* under A1-A3 (the fault budget keeps A2): every acknowledged write, no exception */
        assert((acked & res) == acked)
#else
        assert((acked & HELD & res) == (acked & HELD))
#endif
    :: else -> readable = 0
    fi;
    j = 0; cnt = 0; res = 0
}

proctype env()
{
    byte i, j, cnt, res, chk_a, chk_m, chk_s, chk_j;
    do
    /* a MAJORITY write at i: applied by i and every peer it reaches; acknowledged when those
       make a majority of the counted members (a member outside the cluster refuses) */
    :: atomic {
        nw < W ->
        select(i : 0 .. N - 1);
        if
        :: up[i] && member[i] ->
            cnt = 1;
            has[i] = has[i] | BIT(nw);
            j = 0;
            do
            :: j < N ->
                if :: j != i && TALK(i, j) -> has[j] = has[j] | BIT(nw); cnt++ :: else fi;
                j++
            :: else -> break
            od;
            if :: cnt >= MAJ -> acked = acked | BIT(nw) :: else fi;
#ifdef A2
            cset[nw] = member[0] * BIT(0) | member[1] * BIT(1) | member[2] * BIT(2) CSET_MORE;
#endif
            nw++
        :: else
        fi;
        i = 0; j = 0; cnt = 0
       }
    /* a MAJORITY read at any member */
    :: atomic {
        select(i : 0 .. N - 1);
        if :: up[i] && member[i] && !cut[i] -> read(i, 0) :: else fi;
        i = 0
       }
    /* faults */
    :: atomic {
        faults < FAULTS ->
        select(i : 0 .. N - 1);
        if
        :: up[i] -> up[i] = 0; faults++                       /* crash */
        :: !up[i] && STOPOK(i) -> up[i] = 1; faults++;         /* restart with its store */
           /* a store that had not finished catching up is still incomplete (RULE_CAND needs
              the catching-up state to survive a restart: SPIN found the hole without it) */
           catching[i] = STARTS_CATCHING(0, 0) || catching[i]; synced[i] = 0;
           stops(i); youngest(i)
        :: !up[i] && STOPOK(i) -> up[i] = 1; has[i] = 0; emptied = 1; faults++; /* restart empty */
           catching[i] = STARTS_CATCHING(1, 0); synced[i] = 0;
           stops(i); youngest(i)
        :: up[i] && STOPOK(i) -> faults++; /* crash and restart at once, with its store */
           catching[i] = STARTS_CATCHING(0, 0) || catching[i]; synced[i] = 0;
           stops(i); youngest(i)
        :: up[i] && STOPOK(i) -> has[i] = 0; emptied = 1; faults++; /* crash and restart at once, empty */
           catching[i] = STARTS_CATCHING(1, 0); synced[i] = 0;
           stops(i); youngest(i)
        :: !cut[i] -> cut[i] = 1; faults++
        :: cut[i] -> cut[i] = 0; faults++
        :: member[i] && (!up[i] || cut[i]) && NMEM > 2 && STOPOK(i) -> /* removed */
           stops(i); member[i] = 0; faults++
        :: !member[i] && up[i] && !cut[i] -> member[i] = 1; faults++; /* joins again */
           catching[i] = STARTS_CATCHING(0, 1); synced[i] = 0;
           stops(i); youngest(i)
        fi;
        update_oldok();
        i = 0
       }
    :: atomic { !quiet -> quiet = 1; faults = FAULTS } /* the faults are over */
    od
}

/* each replica's catch-up: sync with a peer (full state both ways, repl_synced), done once it
   has synced with NEED peers (repl_catch_up_check) */
#define ELIG(i, k) ((k) != (i) && TALK(i, k) && !(synced[i] & BIT(k)))
proctype syncer(byte i)
{
    byte j, chk_a, chk_m, chk_s, chk_j;
    do
    :: atomic {
        catching[i] && up[i] && member[i] && !cut[i] ->
        /* a peer not synced with yet (repl_catch_up_round asks all at once; any one answers
           first); choosing only among those keeps weak fairness meaningful (a select of any
           peer let a fair run pick a useless one for ever: spurious liveness trails) */
        if
        :: ELIG(i, 0) -> j = 0
        :: ELIG(i, 1) -> j = 1
        :: ELIG(i, 2) -> j = 2
#if N == 5
        :: ELIG(i, 3) -> j = 3
        :: ELIG(i, 4) -> j = 4
#endif
        :: else -> j = N
        fi;
        if
        :: j != i && j < N && TALK(i, j) && !(synced[i] & BIT(j)) ->
            has[i] = has[i] | has[j];
            has[j] = has[j] | has[i];
            synced[i] = synced[i] | BIT(j);
#if RULE == RULE_AGE
            check(i) /* repl_synced -> repl_catch_up_check */
#else
            if :: popcount(synced[i]) >= NEED -> catching[i] = 0; synced[i] = 0 :: else fi
#endif
        :: else
            /* a timer or a peer's removal: repl_catch_up_check (catch_up_fire, gossip_tick) */
#if RULE == RULE_AGE
            check(i)
#else
            if :: popcount(synced[i]) >= NEED -> catching[i] = 0; synced[i] = 0 :: else fi
#endif
        fi;
        j = 0
       }
    od
}

/* liveness probe: reads attempted at every member in turn */
proctype reader()
{
    byte i, j, cnt, res, chk_a, chk_m, chk_s, chk_j;
    do
    :: atomic {
        quiet ->
        readable = 0;
        i = 0;
        do
        :: i < N && !readable ->
            if :: up[i] && member[i] && !cut[i] -> read(i, 1) :: else fi;
            i++
        :: else -> break
        od;
        i = 0
       }
    od
}

#if LIVE == 2
#define fine (quiet && oldok)
#else
#define fine (quiet && !emptied && 2 * NUP > NMEM)
#endif
ltl live { [] ((fine) -> <> (readable || !fine)) }

init
{
    byte k, chk_a, chk_m, chk_j;
    atomic {
        k = 0;
        do
        :: k < N ->
            up[k] = 1; member[k] = 1;
#ifdef FORMED
            catching[k] = 0; /* a bound for N = 5: the founders caught up before anything */
#else
            catching[k] = FORMS_CATCHING; /* the cluster forms: every gate opens */
#endif
#ifdef AGES
            age[k] = k + 1; /* up-numbers in the order they became Up (A1) */
#endif
            k++
        :: else -> break
        od;
        update_oldok();
        run env();
        k = 0;
        do :: k < N -> run syncer(k); k++ :: else -> break od;
        run reader()
    }
}
