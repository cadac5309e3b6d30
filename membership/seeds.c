/*  seeds.c — the join process: cluster_do_join, the seed list's rules and seed discovery's
    (Akka Cluster Bootstrap's) on when to form a cluster, and the retry timer that drives them
    while joining.
*/
#include "cluster_internal.h"

int cluster_do_join(shoal_cluster_t *c, const char *const *seeds, size_t n)
{
    if (cstate_member(c->state, c->self) || c->terminated)
        return SHOAL_ESTATE;
    if (c->discovering) {
        /* an explicit join replaces discovery */
        c->discovering = false;
        disc_stop(c->disc);
    }
    set_seeds(c, seeds, n, false);
    bool only_self = n == 0 || (n == 1 && is_seed_self(c, seeds[0]));
    if (only_self) {
        form_alone(c, n ? "this node is its only seed" : "told to form one");
        return 0;
    }
    c->joining = true;
    join_retry_arm(c);
    c->join_started = shoal_now_ms();
    c->join_logged = 0;
    char list[512] = "";
    size_t used = 0;
    for (size_t i = 0; i < c->n_seeds && used < sizeof list - 1; i++)
        used +=
            (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "", c->seeds[i]);
    shoal_info("%s: joining a cluster through its seeds %s%s", shoal_node_id(c->self), list,
               is_seed_self(c, c->seeds[0]) ? " (the first seed: this node forms the cluster if "
                                              "no other seed is in one)"
                                            : "");
    send_init_join(c);
    return 0;
}

/* Seed discovery (SEED DISCOVERY in membership.h): the resolver's latest contact points become
   the seed list (the lowest address first); answers already given by contact points still in it
   stand, but any change restarts stable-margin. */
static void discovery_take(shoal_cluster_t *c, int64_t now)
{
    char **eps = NULL;
    size_t n = 0;
    if (!disc_take(c->disc, &c->disc_gen, &eps, &n, c->disc_why, sizeof c->disc_why))
        return;
    bool same = n == c->n_seeds;
    for (size_t i = 0; same && i < n; i++)
        same = strcmp(eps[i], c->seeds[i]) == 0;
    if (!same) {
        set_seeds(c, (const char *const *)eps, n, true);
        c->disc_changed = now;
        char list[400] = "";
        size_t used = 0;
        for (size_t i = 0; i < n && used < sizeof list - 1; i++)
            used += (size_t)snprintf(list + used, sizeof list - used, " %s", eps[i]);
        shoal_info("%s: %s gives %zu contact point(s):%s", shoal_node_id(c->self), c->s.discovery,
                   n, list);
        send_init_join(c);
    }
    disc_free_list(eps, n);
}

/* Akka Cluster Bootstrap's rules on the contact points; true when this node formed the cluster.
   Joining a contact point that is in a cluster is the seeds' path (on_init_join_ack). */
static bool discovery_tick(shoal_cluster_t *c, int64_t now)
{
    discovery_take(c, now);
    size_t others = 0, nacked = 0;
    bool self_found = false;
    for (size_t i = 0; i < c->n_seeds; i++) {
        if (is_seed_self(c, c->seeds[i])) {
            self_found = true;
            continue;
        }
        others++;
        nacked += c->seed_nacked[i];
    }
    size_t need = c->s.required_contact_point_nr ? c->s.required_contact_point_nr : 1;
    size_t kept = zhash_size(c->voters);
    int64_t stable_for = now - c->disc_changed;
    bool lowest = c->n_seeds && is_seed_self(c, c->seeds[0]);
    bool starved = c->n_seeds < need || c->n_seeds == 0;
    char *st = c->disc_status;
    size_t stlen = sizeof c->disc_status;
    if (c->disc_gen == 0)
        snprintf(st, stlen, "resolving %s", c->s.discovery);
    else if (starved)
        snprintf(st, stlen, "waiting for contact points: %s gives %zu%s, %zu needed%s%s",
                 c->s.discovery, c->n_seeds,
                 self_found && c->n_seeds == 1 ? " (this node alone)" : "", need,
                 c->disc_why[0] ? "; " : "", c->disc_why);
    else if (c->join_contact)
        snprintf(st, stlen, "joining through %s, a contact point in a cluster",
                 shoal_node_id(c->join_contact));
    else if (!lowest)
        snprintf(st, stlen,
                 "%zu contact points, none in a cluster yet: %s, the lowest address, "
                 "forms it",
                 c->n_seeds, c->seeds[0]);
    else if (nacked < others)
        snprintf(st, stlen,
                 "%zu contact points: %zu of the %zu others answered that they are in no "
                 "cluster (all must before this node, the lowest address, forms one)",
                 c->n_seeds, nacked, others);
    else if (kept && 2 * (nacked + 1) <= kept)
        snprintf(st, stlen,
                 "the lowest address of %zu contact points waits to form a cluster: "
                 "%zu of the %zu kept members answered that they are in no cluster (a majority is "
                 "needed, so that a node cut off does not form a second cluster)",
                 c->n_seeds, nacked + 1, kept);
    else if (stable_for < (int64_t)c->s.stable_margin_ms)
        snprintf(st, stlen,
                 "%zu contact points, none in a cluster: forming one once the set has "
                 "been stable for stable-margin (%lld of %u ms)",
                 c->n_seeds, (long long)stable_for, c->s.stable_margin_ms);
    else {
        char why[160];
        snprintf(why, sizeof why,
                 "the lowest address of %zu contact points, none in a cluster, "
                 "stable for %lld ms",
                 c->n_seeds, (long long)stable_for);
        form_alone(c, why);
        return true;
    }
    /* rate-limited: at once when the name gives too little, else after 2 s; then every 10 s */
    bool due = c->disc_logged ? now - c->disc_logged >= 10000
                              : (starved && c->disc_gen) || now - c->join_started >= 2000;
    if (due) {
        c->disc_logged = now;
        shoal_warning("%s: in no cluster: %s", shoal_node_id(c->self), st);
    }
    return false;
}

/* The seed list's rules (JOINING in membership.h); true when the node formed a cluster. */
static bool seeds_tick(shoal_cluster_t *c, int64_t now)
{
    /* the first seed forms the cluster when no other seed answered in time; with a kept
       membership, only once enough seeds answered that they are in no cluster to make a
       majority of it with this node: a first seed restarted behind a partition then waits for
       the partition to heal and joins the cluster there, instead of forming a second one */
    if (c->n_seeds && is_seed_self(c, c->seeds[0]) && !c->join_contact &&
        now - c->join_started >= (int64_t)c->s.seed_node_timeout_ms) {
        size_t kept = zhash_size(c->voters), nacked = 0;
        for (size_t i = 0; i < c->n_seeds; i++)
            nacked += c->seed_nacked[i];
        if (kept == 0 || 2 * (nacked + 1) > kept) {
            form_alone(c, kept ? "a majority of the kept membership is in no cluster after "
                                 "seed-node-timeout"
                               : "no other seed is in a cluster after seed-node-timeout");
            return true;
        }
        if (!c->join_logged || now - c->join_logged >= 10000) {
            c->join_logged = now;
            shoal_warning("%s: the first seed waits to form a cluster: %zu of the %zu kept members "
                          "answered that they are in no cluster (a majority is needed, so that a "
                          "seed cut off does not form a second cluster)",
                          shoal_node_id(c->self), nacked + 1, kept);
        }
    }
    /* say how joining goes: after 2 s, then every 10 s, which seeds answered and how */
    if ((!c->join_logged && now - c->join_started >= 2000) ||
        (c->join_logged && now - c->join_logged >= 10000)) {
        c->join_logged = now;
        char silent[400] = "", nacked[400] = "";
        size_t ns = 0, nn = 0;
        for (size_t i = 0; i < c->n_seeds; i++) {
            if (is_seed_self(c, c->seeds[i]))
                continue;
            if (c->seed_nacked[i] && nn < sizeof nacked - 1)
                nn += (size_t)snprintf(nacked + nn, sizeof nacked - nn, " %s", c->seeds[i]);
            else if (!c->seed_known[i] && ns < sizeof silent - 1)
                ns += (size_t)snprintf(silent + ns, sizeof silent - ns, " %s", c->seeds[i]);
        }
        shoal_warning("%s: still in no cluster after %lld s: %s%s%s%s%s", shoal_node_id(c->self),
                      (long long)((now - c->join_started) / 1000),
                      c->join_contact ? "a seed answered, waiting to be let in" : "joining",
                      ns ? "; no answer from" : "", silent, nn ? "; in no cluster either:" : "",
                      nacked);
    }
    return false;
}

static void retry_tick(shoal_system_t *sys, void *arg);

/* Joining asks its seeds again every 100 ms at most (retry_tick); the timer runs only while
   joining. */
void join_retry_arm(shoal_cluster_t *c)
{
    if (c->t_retry <= 0) {
        int id = shoal_system_timer(c->sys, 100, true, retry_tick, c);
        c->t_retry = id > 0 ? id : 0;
    }
}

static void retry_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    if (!c->joining || cstate_member(c->state, c->self) || c->terminated) {
        /* a member (or a node that stopped) has nothing to retry: the timer stops until a join
           starts again (join_retry_arm), so an idle member is not woken for it */
        if (c->t_retry > 0)
            shoal_system_timer_cancel(c->sys, c->t_retry);
        c->t_retry = 0;
        return;
    }
    int64_t now = shoal_now_ms();
    if (c->discovering) {
        if (discovery_tick(c, now))
            return;
    } else if (seeds_tick(c, now))
        return;
    if (c->s.shutdown_after_unsuccessful_join_ms &&
        now - c->join_started >= (int64_t)c->s.shutdown_after_unsuccessful_join_ms) {
        shoal_error("%s: could not join any seed node: shutting down", shoal_node_id(c->self));
        c->joining = false;
        cluster_shutdown_start(c, SHOAL_SHUTDOWN_JOIN_FAILED);
        return;
    }
    /* no seed answered yet (they may still be starting): ask again soon (a fifth of the gossip
       interval; an InitJoin is a few bytes), as Akka's join process does; a seed that answered but
       never let us in is given up after retry-unsuccessful-join-after */
    int64_t ask_again = c->s.gossip_interval_ms / 5 < 100 ? 100 : c->s.gossip_interval_ms / 5;
    if (ask_again > (int64_t)c->s.seed_node_timeout_ms)
        ask_again = c->s.seed_node_timeout_ms;
    if ((!c->join_contact && now - c->join_last_try >= ask_again) ||
        now - c->join_last_try >= (int64_t)c->s.retry_unsuccessful_join_after_ms) {
        c->join_contact = NULL;
        send_init_join(c);
    }
}
