/* shard_owner.pml — model 2 of issue 33: ONE OWNER PER SHARD.

   Three members (0, 1, 2: index = address order = up-number order, 0 the oldest), one shard,
   the split-brain resolver on with keep-majority, and THE FENCE (membership/membership.h,
   sharding/sharding.h "A PARTITION ONE SIDE NOTICES LATER"). Time is a tick counter; one tick is
   one heartbeat interval. The network may change up to MAXCUTS times, each time to any of the 64
   sets of directed links (one-way cuts, two-way cuts, a cut between two members only, heals).

   Safety (the assertion `one_host`): never two live hosts of the shard. No member crashes here
   (a crashed host is not live, so crashes only remove hosts); what is left is the race the fence
   exists for: the side the resolver keeps reallocating a shard while the member that hosted it is
   still running it behind a cut.

   Each tick runs, in this order (a few atomic/d_step blocks of the one process, so no other
   interleaving exists; the nondeterministic choices are the network change and the heartbeat
   phases, the detectors' verdict delays and the coordinator's choice of a new home):
     1. the network may change (net_change); each member's heartbeat of this tick went out
        before or after the change (its phase: `early`), so two members' last contacts can
        differ by up to one heartbeat interval;
     2. heartbeats (membership/heartbeat.c: the ping/pong loop; a pong sets
        target_t.last_contact, read by the fence, and feeds phi_heartbeat);
     3. failure detectors (heartbeat.c evaluate(), phi.c phi_value): i marks j unreachable once
        the silence exceeds the mean interval (H) + acceptable-heartbeat-pause, at the latest
        PROBE ticks later (indirect probes delay the verdict); a pong lifts it;
     4. gossip of Down decisions, one hop per tick along working links (membership/gossip.c);
     5. the leader of each side (the lowest member nobody it hears of marks unreachable) runs
        the resolver (membership/sbr.c sbr_decide: keep_majority, indirectly connected members,
        cover_flaky_links) once its picture has been unchanged for stable-after ticks, and its
        downs take effect at once (leader_actions: Down, then Removed);
     6. the coordinator (sharding/coordinator.c coordinator_tick: a region Down or Removed is
        terminated after down-removal-margin, region_terminated then allocates its shards
        anew with a WriteMajority, and the new home hears HostShard; a region that learns of a
        newer allocation elsewhere stops its copy: region.c learn_home);
     7. the assertion;
     8. every member's fence (membership/reach.c node_tick -> fence_update -> side_kept) and its
        region's tick (region.c region_tick: stop every shard when fenced or when this node
        knows it is Down).
   Steps 5-6 come before 8 in a tick: a reallocation in the same tick as the fence counts as an
   overlap (the fence must come strictly first). The fence is judged once per tick, at its end:
   the code's node tick (100-250 ms) and region tick (100 ms) are at least that prompt when a
   tick is a heartbeat interval of 200 ms or more.

   Parameters (ticks; cpp -D on the spin command line):
     AP   acceptable-heartbeat-pause     SA   stable-after
     FA   fence-after                    FM   fence-margin (only in the check below)
     DRM  down-removal-margin as the coordinator uses it (0 in the settings = SA)
     PROBE  the longest delay of a verdict past H + AP by indirect probes
     MAXCUTS  network changes
   The defaults are Akka's timings in seconds (heartbeat 1 s, pause 3 s, stable-after 20 s,
   fence-after = pause + stable-after / 2 = 13 s, margin 1 s, down-removal-margin = 20 s); they
   make a large state space, so `scons model` (model/run.sh) runs the same shape scaled down:
   pause 1, stable-after 4, fence-after 3, margin 1. The printf lines (MSC:) only show in a
   replayed trail (spin -t).
*/

#ifndef AP
#define AP 3
#endif
#ifndef SA
#define SA 20
#endif
#ifndef FM
#define FM 1
#endif
#ifndef FA
#define FA (AP + SA / 2)
#endif
#ifndef DRM
#define DRM SA
#endif
#ifndef PROBE
#define PROBE 1
#endif
#ifndef MAXCUTS
#define MAXCUTS 2
#endif
#define H 1
#define N 3
/* ages saturate here: past every threshold the model reads */
#define AGEMAX (FA + H + AP + PROBE + 2)
#define L(i, j) ((i) * N + (j))
#define BIT(i) (1 << (i))

bit link[9];       /* link[L(i,j)]: what i sends reaches j */
bit old[9];        /* the links before this tick's change */
byte age[9];       /* ticks since i's last pong from j (target_t.last_contact) */
bit rec[9];        /* i's detector has marked j unreachable (a reachability record i -> j) */
bit early[3];      /* this tick, i's heartbeat went out before the network change */
byte kd[3];        /* the members i knows are Down (or Removed) */
short pic[3];      /* the records i hears of, as i's resolver last saw them */
byte stable[3];    /* ticks i's picture has been unchanged (stable-after) */
bit fenced[3];     /* cluster_t.fenced */
bit hosting[3];    /* the region hosts the shard */
byte hep[3];       /* the newest allocation epoch the region knows */
byte gone[3];      /* coordinator on i: ticks since the owner's region was seen Down */
byte owner;        /* the coordinator's allocation (WriteMajority state) */
byte epoch;
byte cuts;

/* a directed path src -> dst among the links (gossip relays whole states) */
#define PATH(s, d) ((s) == (d) || link[L(s, d)] || \
                    (link[L(s, 0)] && link[L(0, d)]) || (link[L(s, 1)] && link[L(1, d)]) || \
                    (link[L(s, 2)] && link[L(2, d)]))
/* the record o -> j as node x hears of it: o's gossip reaches x, neither end is Down for x */
#define KNOWN(x, o, j) (rec[L(o, j)] && PATH(o, x) && !(kd[x] & BIT(o)) && !(kd[x] & BIT(j)))

#define one_host (hosting[0] + hosting[1] + hosting[2] <= 1)

/* The resolver's picture at x: the 9 bits of KNOWN(x, ., .). */
inline picture(x, p)
{
    p = 0;
    o = 0;
    do
    :: o < N ->
        j = 0;
        do
        :: j < N -> if :: o != j && KNOWN(x, o, j) -> p = p | (1 << L(o, j)) :: else fi; j++
        :: else -> break
        od;
        o++
    :: else -> break
    od
}

/* sbr.c sbr_decide with keep_majority, from x's picture p (x is its side's leader). Sets downs. */
inline decide(x, p)
{
    unr = 0; obs = 0;
    o = 0;
    do
    :: o < N ->
        j = 0;
        do
        :: j < N ->
            if
            :: o != j && (p & (1 << L(o, j))) -> unr = unr | BIT(j); obs = obs | BIT(o)
            :: else
            fi;
            j++
        :: else -> break
        od;
        o++
    :: else -> break
    od;
    /* indirectly connected: also an observer (its gossip reaches us) or self */
    ind = unr & (obs | BIT(x));
    clean = unr & ~ind;
    /* cover_flaky_links: flaky records are those whose subject is indirectly connected; the
       member on most uncovered flaky records goes first, ties the younger (higher index) */
    cover = 0;
    do
    :: true ->
        best = N; bestc = 0;
        j = 0;
        do
        :: j < N ->
            cnt = 0;
            o = 0;
            do
            :: o < N ->
                if
                :: o != j && !(cover & BIT(o)) && !(cover & BIT(j)) ->
                    /* records o -> j and j -> o that are flaky and uncovered */
                    if :: (p & (1 << L(o, j))) && (ind & BIT(j)) -> cnt++ :: else fi;
                    if :: (p & (1 << L(j, o))) && (ind & BIT(o)) -> cnt++ :: else fi
                :: else
                fi;
                o++
            :: else -> break
            od;
            if :: cnt > 0 && cnt >= bestc -> best = j; bestc = cnt :: else fi;
            j++
        :: else -> break
        od;
        if
        :: best < N -> cover = cover | BIT(best)
        :: else -> break
        fi
    od;
    if
    :: clean == 0 -> downs = cover /* SBR_DOWN_INDIRECT */
    :: else ->
        /* counted: Up members not known Down; self's side is everyone not cleanly cut off */
        sside = 0; oside = 0; lowest = N;
        j = 0;
        do
        :: j < N ->
            if
            :: !(kd[x] & BIT(j)) ->
                if :: clean & BIT(j) -> oside++ :: else -> sside++ fi;
                if :: lowest == N -> lowest = j :: else fi
            :: else
            fi;
            j++
        :: else -> break
        od;
        if
        :: sside > oside || (sside == oside && !(clean & BIT(lowest))) -> downs = clean | cover
        :: else -> downs = (7 & ~kd[x] & ~clean) | cover /* this side goes */
        fi
    fi
}

active proctype world()
{
    byte i, j, o, k, p, cnt, best, bestc, sside, oside, lowest;
    byte unr, obs, ind, clean, cover, downs, heard, n;
    short pnow;
    bit changed, kept, lowest_heard, ok;

    /* shoal_cluster_fence_check, as shoal_sharding_new applies it: settings that break it are
       refused by the code, so only settings it accepts are worth checking */
    assert(FA + FM <= AP + SA);
    /* all links up, the shard on some member at epoch 1 */
    atomic {
        i = 0;
        do :: i < 9 -> link[i] = 1; i++ :: else -> break od;
        if :: owner = 0 :: owner = 1 :: owner = 2 fi;
        epoch = 1; hosting[owner] = 1; hep[owner] = 1;
        cuts = MAXCUTS
    }
end_tick:
    do
    :: atomic {
        /* 1. the network (the transport's fault injection: shoal_system_fault) */
        i = 0;
        do :: i < 9 -> old[i] = link[i]; i++ :: else -> break od;
        early[0] = 0; early[1] = 0; early[2] = 0;
        changed = 0;
        if
        :: cuts > 0 ->
            if
            :: skip
            :: cuts--; changed = 1;
               if :: link[L(0,1)] = 0 :: link[L(0,1)] = 1 fi;
               if :: link[L(0,2)] = 0 :: link[L(0,2)] = 1 fi;
               if :: link[L(1,0)] = 0 :: link[L(1,0)] = 1 fi;
               if :: link[L(1,2)] = 0 :: link[L(1,2)] = 1 fi;
               if :: link[L(2,0)] = 0 :: link[L(2,0)] = 1 fi;
               if :: link[L(2,1)] = 0 :: link[L(2,1)] = 1 fi;
               if :: early[0] = 1 :: skip fi;
               if :: early[1] = 1 :: skip fi;
               if :: early[2] = 1 :: skip fi;
               printf("MSC: tick: links 01=%d 02=%d 10=%d 12=%d 20=%d 21=%d, early %d%d%d\n",
                      link[1], link[2], link[3], link[5], link[6], link[7], early[0], early[1], early[2])
            fi
        :: else
        fi
       };
       d_step {

        /* 2. heartbeats: i's ping reaches j and j's pong comes back */
        i = 0;
        do
        :: i < N ->
            j = 0;
            do
            :: j < N ->
                if
                :: i != j && !(kd[i] & BIT(j)) &&
                   ((early[i] && old[L(i, j)] && old[L(j, i)]) ||
                    (!early[i] && link[L(i, j)] && link[L(j, i)])) ->
                    age[L(i, j)] = 0
                :: else
                fi;
                j++
            :: else -> break
            od;
            i++
        :: else -> break
        od;

        i = 0; j = 0
       };
       atomic {
        /* 3. failure detectors (evaluate: phi past mean + acceptable pause, then probes) */
        i = 0;
        do
        :: i < 9 ->
            if
            :: i / N == i % N -> skip /* self */
            :: age[i] == 0 -> rec[i] = 0 /* heard again: reachable */
            :: age[i] > H + AP + PROBE && !rec[i] -> rec[i] = 1; printf("MSC: %d marks %d unreachable\n", i / N, i % N)
            :: age[i] > H + AP && age[i] <= H + AP + PROBE && !rec[i] -> if :: rec[i] = 1; printf("MSC: %d marks %d unreachable\n", i / N, i % N) :: skip fi
            :: else
            fi;
            i++
        :: else -> break
        od;
        rec[L(0, 0)] = 0; rec[L(1, 1)] = 0; rec[L(2, 2)] = 0;
        i = 0
       };
       d_step {

        /* 4. gossip of Down/Removed, one hop per tick */
        o = kd[0]; p = kd[1]; k = kd[2];
        if :: link[L(1, 0)] -> o = o | kd[1] :: else fi;
        if :: link[L(2, 0)] -> o = o | kd[2] :: else fi;
        if :: link[L(0, 1)] -> p = p | kd[0] :: else fi;
        if :: link[L(2, 1)] -> p = p | kd[2] :: else fi;
        if :: link[L(0, 2)] -> k = k | kd[0] :: else fi;
        if :: link[L(1, 2)] -> k = k | kd[1] :: else fi;
        kd[0] = o; kd[1] = p; kd[2] = k;

        /* 5. resolvers: the leader of x's view is the lowest member x does not know Down and
           hears of no record against (membership/leader.c leader_actions; sbr.c sbr_decide) */
        i = 0;
        do
        :: i < N ->
            if
            :: !(kd[i] & BIT(i)) ->
                picture(i, pnow);
                if
                :: pnow != pic[i] -> pic[i] = pnow; stable[i] = 0
                :: else -> if :: stable[i] < SA -> stable[i]++ :: else fi
                fi;
                /* leader: the lowest member not Down and not the subject of a record x hears of */
                lowest = N;
                j = 0;
                do
                :: j < N ->
                    if
                    :: lowest == N && !(kd[i] & BIT(j)) &&
                       !(pnow & ((1 << L(0, j)) | (1 << L(1, j)) | (1 << L(2, j)))) -> lowest = j
                    :: else
                    fi;
                    j++
                :: else -> break
                od;
                if
                :: lowest == i && pnow != 0 && stable[i] >= SA ->
                    decide(i, pnow);
                    printf("MSC: leader %d downs %d (picture %d)\n", i, downs, pnow);
                    kd[i] = kd[i] | downs
                :: else
                fi
            :: else
            fi;
            i++
        :: else -> break
        od;

        i = 0; j = 0; o = 0; p = 0; k = 0; lowest = 0; pnow = 0;
        unr = 0; obs = 0; ind = 0; clean = 0; cover = 0; downs = 0; best = 0; bestc = 0; cnt = 0;
        sside = 0; oside = 0
       };
       atomic {
        /* 6. the coordinator: a singleton on the oldest member this node does not know Down;
           it stops while its node is fenced (singletons_react) */
        i = 0;
        do
        :: i < N ->
            lowest = N;
            j = 0;
            do
            :: j < N -> if :: lowest == N && !(kd[i] & BIT(j)) -> lowest = j :: else fi; j++
            :: else -> break
            od;
            if
            :: lowest == i && !fenced[i] ->
                /* coordinator_tick: a region Down or Removed, terminated after the margin */
                if
                :: kd[i] & BIT(owner) -> if :: gone[i] < DRM + 1 -> gone[i]++ :: else fi
                :: else -> gone[i] = 0
                fi;
                if
                :: gone[i] > DRM ->
                    /* region_terminated -> allocate anew: a WriteMajority (2 of 3) of the
                       coordinator's state; the new home is any member it does not know Down */
                    ok = 0;
                    j = 0;
                    do
                    :: j < N ->
                        if
                        :: j != i && !(kd[i] & BIT(j)) && link[L(i, j)] && link[L(j, i)] -> ok = 1
                        :: else
                        fi;
                        j++
                    :: else -> break
                    od;
                    if
                    :: ok ->
                        k = N;
                        if
                        :: owner != 0 && !(kd[i] & BIT(0)) -> k = 0
                        :: owner != 1 && !(kd[i] & BIT(1)) -> k = 1
                        :: owner != 2 && !(kd[i] & BIT(2)) -> k = 2
                        :: else
                        fi;
                        if
                        :: k < N -> owner = k; epoch++; gone[0] = 0; gone[1] = 0; gone[2] = 0;
                           printf("MSC: coordinator on %d allocates the shard to %d (epoch %d)\n", i, k, epoch)
                        :: else
                        fi
                    :: else
                    fi
                :: else
                fi;
                /* HostShard to the owner (resent each tick until started: shard-start-timeout),
                   the allocation told to every region it reaches (learn_home) */
                j = 0;
                do
                :: j < N ->
                    if
                    :: (j == i || link[L(i, j)]) && hep[j] < epoch ->
                        hep[j] = epoch;
                        hosting[j] = 0 /* a newer allocation elsewhere: stop this copy */
                    :: else
                    fi;
                    if
                    :: (j == i || link[L(i, j)]) && j == owner && !hosting[j] && hep[j] == epoch &&
                       !fenced[j] && !(kd[j] & BIT(j)) -> hosting[j] = 1; /* shard_host */
                       printf("MSC: %d hosts the shard (epoch %d)\n", j, epoch)
                    :: else
                    fi;
                    j++
                :: else -> break
                od
            :: else
            fi;
            i++
        :: else -> break
        od;

        /* 7. never two live hosts */
        assert(one_host);
        i = 0; j = 0; k = 0; lowest = 0; ok = 0
       };
       d_step {

        /* 8. the fence (fence_update/side_kept, keep-majority) and region_tick */
        i = 0;
        do
        :: i < N ->
            heard = 0; n = 0; lowest_heard = 1; lowest = i;
            j = 0;
            do
            :: j < N ->
                if
                :: j != i && !(kd[i] & BIT(j)) ->
                    n++;
                    ok = (age[L(i, j)] <= FA);
                    heard = heard + ok;
                    if :: j < lowest -> lowest = j; lowest_heard = ok :: else fi
                :: else
                fi;
                j++
            :: else -> break
            od;
            kept = (n == 0 || 2 * (1 + heard) > 1 + n || (2 * (1 + heard) == 1 + n && lowest_heard));
#ifdef NOFENCE
            kept = 1; /* known-bad variant: no fence at all */
#endif
            fenced[i] = !(kd[i] & BIT(i)) && !kept;
            if
            :: hosting[i] && (fenced[i] || (kd[i] & BIT(i))) -> hosting[i] = 0; /* region_stop_all */
               printf("MSC: %d stops the shard (fenced %d, knows it is down %d)\n", i, fenced[i], (kd[i] >> i) & 1)
            :: else
            fi;
            i++
        :: else -> break
        od;

        /* time passes */
        i = 0;
        do :: i < 9 -> if :: age[i] < AGEMAX -> age[i]++ :: else fi; i++ :: else -> break od;
        printf("MSC: -- tick (ages 01=%d 02=%d 10=%d 12=%d 20=%d 21=%d, fenced %d%d%d, hosting %d%d%d)\n",
               age[1], age[2], age[3], age[5], age[6], age[7], fenced[0], fenced[1], fenced[2],
               hosting[0], hosting[1], hosting[2]);
        i = 0; j = 0; heard = 0; n = 0; lowest = 0; lowest_heard = 0; ok = 0; kept = 0
       }
    od
}

