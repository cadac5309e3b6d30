/*  singleton.c — one instance of something in the cluster, on the oldest Up member of a role.

    Every node computes the same host from the state (cstate_oldest: lowest up-number among the Up
    members having the role). The host starts the singleton only when no older member of the role
    can still be running it: every older one is Removed, or told us it stopped (HandOverDone when
    it began leaving). A downed host is not trusted to have stopped until it is Removed (the
    split-brain resolver's side of it stops itself). A host stops the singleton as soon as it is
    no longer the oldest Up member, is leaving, frozen or shutting down, and then tells the new
    host. So two incarnations never run at once as long as a node learns of its own downing
    before the rest of the cluster removes it — the resolver's stable-after gives it that time.

    The term of an incarnation is the host's up-number: up-numbers are handed out in increasing
    order and the host is always the lowest one alive, so each new host has a larger term than
    every earlier one, and a stale incarnation's work can be fenced by comparing terms.
*/
#include "cluster_internal.h"
#include "cluster.pb-c.h"

struct shoal_singleton {
    shoal_cluster_t *c;
    char *name;
    char *role;
    shoal_singleton_start_fn *start;
    shoal_singleton_stop_fn *stop;
    void *arg;
    bool running;
    uint64_t term;
    const shoal_node_t **handed; /* older hosts that told us they stopped */
    size_t n_handed;
};

static bool handed_over(const shoal_singleton_t *s, const shoal_node_t *n)
{
    for (size_t i = 0; i < s->n_handed; i++)
        if (s->handed[i] == n)
            return true;
    return false;
}

/* True when no member older than self can still be running the singleton. */
static bool older_gone(const shoal_singleton_t *s, const cmember_t *me)
{
    const cstate_t *st = s->c->state;
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        if (m == me || m->status == SHOAL_MEMBER_REMOVED || !m->up_number ||
            m->up_number >= me->up_number || !cmember_has_role(m, s->role))
            continue;
        if (m->status != SHOAL_MEMBER_DOWN && handed_over(s, m->node))
            continue;
        return false;
    }
    return true;
}

static void stop_here(shoal_singleton_t *s, const shoal_node_t *new_host)
{
    if (!s->running)
        return;
    s->running = false;
    shoal_info("%s: singleton %s (term %llu) stopped here", shoal_node_id(s->c->self), s->name,
               (unsigned long long)s->term);
    if (s->stop)
        s->stop(s, s->arg);
    if (new_host && new_host != s->c->self) {
        Shoal__Cluster__HandOverDone h = SHOAL__CLUSTER__HAND_OVER_DONE__INIT;
        h.name = s->name;
        h.term = s->term;
        cluster_send(s->c, new_host, K_HANDOVER_DONE, &h.base);
    }
}

static void evaluate(shoal_singleton_t *s)
{
    shoal_cluster_t *c = s->c;
    const shoal_node_t *host = cstate_oldest(c->state, s->role);
    const cmember_t *me = cstate_member(c->state, c->self);
    bool should = host == c->self && me && cluster_may_host(c) && !c->shutting_down &&
                  me->status == SHOAL_MEMBER_UP && older_gone(s, me);
    if (s->running && !should) {
        stop_here(s, host);
    } else if (!s->running && should) {
        s->running = true;
        s->term = me->up_number;
        shoal_info("%s: singleton %s started here (term %llu)", shoal_node_id(c->self), s->name,
                   (unsigned long long)s->term);
        s->start(s, s->term, s->arg);
    } else if (!s->running && host && host != c->self && me && me->status >= SHOAL_MEMBER_LEAVING &&
               s->term) {
        /* we hosted it once and left: make sure the new host hears it (the message may have been
           lost, or the host changed since) */
        Shoal__Cluster__HandOverDone h = SHOAL__CLUSTER__HAND_OVER_DONE__INIT;
        h.name = s->name;
        h.term = s->term;
        cluster_send(c, host, K_HANDOVER_DONE, &h.base);
    }
}

void singletons_react(shoal_cluster_t *c)
{
    for (size_t i = 0; i < c->n_singletons; i++)
        evaluate(c->singletons[i]);
}

void singletons_on_handover(shoal_cluster_t *c, const shoal_node_t *from, const char *name)
{
    for (size_t i = 0; i < c->n_singletons; i++) {
        shoal_singleton_t *s = c->singletons[i];
        if (strcmp(s->name, name) != 0 || handed_over(s, from))
            continue;
        s->handed = realloc(s->handed, (s->n_handed + 1) * sizeof *s->handed);
        if (!s->handed)
            abort();
        s->handed[s->n_handed++] = from;
        evaluate(s);
    }
}

void singletons_stop_all(shoal_cluster_t *c)
{
    for (size_t i = 0; i < c->n_singletons; i++) {
        shoal_singleton_t *s = c->singletons[i];
        const shoal_node_t *host = cstate_oldest(c->state, s->role);
        stop_here(s, host);
    }
}

typedef struct {
    shoal_cluster_t *c;
    shoal_singleton_t *s;
} single_arg_t;

static int do_add(shoal_system_t *sys, void *arg)
{
    (void)sys;
    single_arg_t *a = arg;
    shoal_cluster_t *c = a->c;
    c->singletons = realloc(c->singletons, (c->n_singletons + 1) * sizeof *c->singletons);
    if (!c->singletons)
        abort();
    c->singletons[c->n_singletons++] = a->s;
    c->hooks.singletons_react = singletons_react; /* the core tells the singletons from now on */
    evaluate(a->s);
    return 0;
}

shoal_singleton_t *shoal_singleton_new(shoal_cluster_t *c, const char *name, const char *role,
                                       shoal_singleton_start_fn *start,
                                       shoal_singleton_stop_fn *stop, void *arg)
{
    if (!c || !name || !*name || !start)
        return NULL;
    shoal_singleton_t *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->c = c;
    s->name = strdup(name);
    s->role = strdup(role ? role : "");
    if (!s->name || !s->role)
        abort();
    s->start = start;
    s->stop = stop;
    s->arg = arg;
    single_arg_t a = {c, s};
    if (cluster_call(c, do_add, &a) < 0) {
        free(s->name);
        free(s->role);
        free(s);
        return NULL;
    }
    return s;
}

static int do_remove(shoal_system_t *sys, void *arg)
{
    (void)sys;
    single_arg_t *a = arg;
    shoal_cluster_t *c = a->c;
    stop_here(a->s, cstate_oldest(c->state, a->s->role));
    for (size_t i = 0; i < c->n_singletons; i++)
        if (c->singletons[i] == a->s) {
            c->singletons[i] = c->singletons[--c->n_singletons];
            break;
        }
    return 0;
}

void shoal_singleton_destroy(shoal_singleton_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_singleton_t *s = *self_p;
    *self_p = NULL;
    single_arg_t a = {s->c, s};
    cluster_call(s->c, do_remove, &a);
    free(s->handed);
    free(s->name);
    free(s->role);
    free(s);
}

/* The three queries read the node thread's state: from another thread through a call. */
typedef struct {
    const shoal_singleton_t *s;
    bool running;
    uint64_t term;
    const shoal_node_t *host;
} query_t;

static int do_query(shoal_system_t *sys, void *arg)
{
    (void)sys;
    query_t *q = arg;
    q->running = q->s->running;
    q->term = q->s->term;
    q->host = cstate_oldest(q->s->c->state, q->s->role);
    return 0;
}

static query_t query(const shoal_singleton_t *s)
{
    query_t q = {s, false, 0, NULL};
    if (s && cluster_call(s->c, do_query, &q) < 0)
        q = (query_t){s, false, 0, NULL};
    return q;
}

bool shoal_singleton_running(const shoal_singleton_t *s)
{
    return query(s).running;
}

uint64_t shoal_singleton_term(const shoal_singleton_t *s)
{
    return query(s).term;
}

const shoal_node_t *shoal_singleton_host(const shoal_singleton_t *s)
{
    return query(s).host;
}
