/*  follow.c — the data replicators that follow the members (shoal_cluster_follow): their peers,
    ages, votes and quorum gates; the system replicator's peers (feed_replicators, which react.c
    calls on every new state); forgetting a kept identity (cluster_do_forget).
*/
#include "cluster_internal.h"
#include "cluster.pb-c.h"

/* ---------------------------------------------------------------------------------------------
 * Replicators follow the members
 */

static void feed_followers(shoal_cluster_t *c);

int cluster_do_forget(shoal_cluster_t *c, const char *durable_id, bool tell)
{
    if (!durable_id || !*durable_id)
        return SHOAL_EINVAL;
    if (tell) {
        Shoal__Cluster__AdminRequest q = SHOAL__CLUSTER__ADMIN_REQUEST__INIT;
        q.target = (char *)durable_id;
        const cstate_t *st = c->state;
        for (size_t i = 0; i < st->n_members; i++)
            if (st->members[i].node != c->self && st->members[i].status < SHOAL_MEMBER_DOWN)
                cluster_send(c, st->members[i].node, K_FORGET, &q.base);
    }
    if (!zhash_lookup(c->voters, durable_id))
        return SHOAL_ENOTFOUND;
    shoal_warning("%s: identity %s forgotten: majorities no longer count it",
                  shoal_node_id(c->self), durable_id);
    zhash_delete(c->voters, durable_id);
    voters_save(c);
    feed_followers(c);
    return 0;
}

/* The quorum gate of a data replicator: MAJORITY and ALL count the members of the cluster, so they
   run only while this node is a full member of one. */
static void gate_one(shoal_cluster_t *c, follower_t *f)
{
    const cmember_t *me = cstate_member(c->state, c->self);
    bool full = me && (me->status == SHOAL_MEMBER_UP || me->status == SHOAL_MEMBER_LEAVING ||
                       me->status == SHOAL_MEMBER_EXITING);
    char why[96];
    if (me)
        snprintf(why, sizeof why, "this node is %s", shoal_member_status_name(me->status));
    else
        snprintf(why, sizeof why, "this node is in no cluster%s",
                 c->was_member ? " (any more)" : " yet");
    /* its up-number: the catch-up rule waits only for members older than this node */
    shoal_replicator_set_age(f->r, full ? me->up_number : 0);
    shoal_replicator_set_quorum_gate(f->r, full, why);
}

static void follow_one(shoal_cluster_t *c, follower_t *f)
{
    const cstate_t *st = c->state;
    gate_one(c, f);
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        if (m->node == c->self)
            continue;
        const char *id = shoal_node_id(m->node);
        uintptr_t told = (uintptr_t)zhash_lookup(f->told, id);
        bool role = cmember_has_role(m, f->role);
        uintptr_t want = 0;
        if (role && (m->status == SHOAL_MEMBER_UP || m->status == SHOAL_MEMBER_LEAVING))
            want = 1 | 2 | ((uintptr_t)m->up_number << 2);
        else if (role && (m->status == SHOAL_MEMBER_JOINING ||
                          m->status == SHOAL_MEMBER_WEAKLY_UP || m->status == SHOAL_MEMBER_EXITING))
            want = 1;
        if (m->status == SHOAL_MEMBER_REMOVED) {
            if (told != 3) { /* 3 never encodes a peer (counted implies an age field) */
                shoal_replicator_node_removed(f->r, m->node);
                zhash_update(f->told, id, (void *)(uintptr_t)3);
            }
            continue;
        }
        if (want != told) {
            if (want)
                shoal_replicator_add_peer(f->r, m->node, want & 2, m->up_number);
            else if (told)
                shoal_replicator_remove_peer(f->r, m->node);
        }
        if (want & 2) /* counted: does its identity vote (the kept membership can change alone) */
            shoal_replicator_peer_votes(f->r, m->node,
                                        m->durable_id && *m->durable_id &&
                                            zhash_lookup(c->voters, m->durable_id));
        if (want == told)
            continue;
        if (want)
            zhash_update(f->told, id, (void *)want);
        else
            zhash_delete(f->told, id);
    }
    shoal_replicator_set_voters(f->r, zhash_size(c->voters),
                                c->s.durable_id && zhash_lookup(c->voters, c->s.durable_id));
}

static void feed_followers(shoal_cluster_t *c)
{
    for (size_t i = 0; i < c->n_followers; i++)
        follow_one(c, &c->followers[i]);
}

void feed_replicators(shoal_cluster_t *c)
{
    /* the system replicator: every member not Removed (Down members too, until removed, so
       their removal reaches them) */
    const cstate_t *st = c->state;
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        if (m->node == c->self)
            continue;
        if (m->status == SHOAL_MEMBER_REMOVED) {
            shoal_replicator_remove_peer(c->sysrepl, m->node);
            continue;
        }
        shoal_replicator_add_peer(c->sysrepl, m->node, true, m->up_number);
        char ep[300];
        endpoint_of(m->node, ep, sizeof ep);
        if (m->pubkey_len == 32) { /* CURVE: the member's server key, to reach it */
            char z85[41];
            if (zmq_z85_encode(z85, m->pubkey, 32))
                shoal_system_learn_key(c->sys, ep, z85);
        }
        shoal_system_connect(c->sys, ep);
    }
    voters_update(c);
    feed_followers(c);
}

typedef struct {
    shoal_cluster_t *c;
    shoal_replicator_t *r;
} follow_arg_t;

static int do_follow(shoal_system_t *sys, void *arg)
{
    (void)sys;
    follow_arg_t *a = arg;
    shoal_cluster_t *c = a->c;
    for (size_t i = 0; i < c->n_followers; i++)
        if (c->followers[i].r == a->r)
            return 0;
    c->followers = realloc(c->followers, (c->n_followers + 1) * sizeof *c->followers);
    if (!c->followers)
        abort();
    follower_t *f = &c->followers[c->n_followers++];
    memset(f, 0, sizeof *f);
    f->r = a->r;
    f->role = strdup(shoal_replicator_role(a->r));
    f->told = zhash_new();
    follow_one(c, f);
    return 0;
}

int shoal_cluster_follow(shoal_cluster_t *c, shoal_replicator_t *r)
{
    if (!c || !r || shoal_replicator_system(r) != c->sys)
        return SHOAL_EINVAL;
    follow_arg_t a = {c, r};
    return cluster_call(c, do_follow, &a);
}

static int do_unfollow(shoal_system_t *sys, void *arg)
{
    (void)sys;
    follow_arg_t *a = arg;
    shoal_cluster_t *c = a->c;
    for (size_t i = 0; i < c->n_followers; i++)
        if (c->followers[i].r == a->r) {
            shoal_replicator_clear_quorum_gate(a->r);
            free(c->followers[i].role);
            zhash_destroy(&c->followers[i].told);
            c->followers[i] = c->followers[--c->n_followers];
            return 0;
        }
    return SHOAL_ENOTFOUND;
}

int shoal_cluster_unfollow(shoal_cluster_t *c, shoal_replicator_t *r)
{
    if (!c || !r)
        return SHOAL_EINVAL;
    follow_arg_t a = {c, r};
    return cluster_call(c, do_unfollow, &a);
}
