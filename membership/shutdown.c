/*  shutdown.c — orderly shutdown in phases (Akka's coordinated shutdown).

    Phases run one after another; a phase starts its registered tasks (and membership's own step,
    if it has one) and ends when all of them called done, or when the phase timeout passes (a task
    that hangs must not keep a node from leaving). Membership's own steps:
      cluster-leave         ask to leave (unless downed) and wait until this member is Exiting
      cluster-exiting       stop the singletons hosted here (hand-over)
      cluster-exiting-done  wait until the Exiting status has converged (the leader then
                            removes this member) or it is Removed
      cluster-shutdown      stop heartbeats and gossip; the on_removed callbacks run
    A task's done token carries the phase generation, so a late done() of an abandoned task does
    not end a later phase.
*/
#include "cluster_internal.h"

typedef struct {
    shoal_cluster_t *c;
    uint64_t gen;
} token_t;

const char *shoal_phase_name(shoal_phase_t p)
{
    static const char *names[] = {"before-service-unbind",
                                  "service-unbind",
                                  "service-requests-done",
                                  "service-stop",
                                  "before-cluster-shutdown",
                                  "cluster-sharding-shutdown-region",
                                  "cluster-leave",
                                  "cluster-exiting",
                                  "cluster-exiting-done",
                                  "cluster-shutdown",
                                  "before-actor-system-terminate"};
    return (unsigned)p < SHOAL_PHASE_COUNT ? names[p] : "?";
}

static void next_phase(shoal_cluster_t *c);

static void phase_step_done(shoal_cluster_t *c, uint64_t gen)
{
    if (gen != c->phase_gen || !c->shutting_down || c->terminated)
        return;
    if (--c->phase_outstanding <= 0)
        next_phase(c);
}

static void task_done(void *arg)
{
    token_t *t = arg;
    phase_step_done(t->c, t->gen);
}

static void phase_timeout(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    c->t_phase = 0;
    shoal_warning("%s: shutdown phase %s timed out (%d step(s) not done): going on",
                  shoal_node_id(c->self), shoal_phase_name(c->phase), c->phase_outstanding);
    c->phase_outstanding = 0;
    next_phase(c);
}

/* Is membership's own step of the current phase done? */
static bool own_step_done(shoal_cluster_t *c)
{
    shoal_member_status_t st = cluster_self_status(c);
    switch (c->phase) {
    case SHOAL_PHASE_CLUSTER_LEAVE:
        return !st || st >= SHOAL_MEMBER_EXITING || c->shutdown_reason == SHOAL_SHUTDOWN_DOWNED ||
               c->shutdown_reason == SHOAL_SHUTDOWN_JOIN_FAILED;
    case SHOAL_PHASE_CLUSTER_EXITING_DONE:
        return !st || st >= SHOAL_MEMBER_DOWN || c->shutdown_reason == SHOAL_SHUTDOWN_DOWNED ||
               (st == SHOAL_MEMBER_EXITING && cstate_converged(c->state));
    case SHOAL_PHASE_CLUSTER_SHUTDOWN:
        /* a downed node keeps gossiping for a grace period: the decision that downed it (often
           its own, on a minority side) must reach the rest of its side, or they go on hosting
           what the majority is about to take over */
        return c->shutdown_reason != SHOAL_SHUTDOWN_DOWNED ||
               shoal_now_ms() >= c->downed_grace_until;
    default:
        return true;
    }
}

static void finish(shoal_cluster_t *c)
{
    if (c->t_phase > 0) {
        shoal_system_timer_cancel(c->sys, c->t_phase);
        c->t_phase = 0;
    }
    if (c->t_confirm > 0) {
        shoal_system_timer_cancel(c->sys, c->t_confirm);
        c->t_confirm = 0;
    }
    c->terminated = true;
    shoal_info("%s: cluster shutdown complete", shoal_node_id(c->self));
    if (!c->removed_called) {
        c->removed_called = true;
        for (size_t i = 0; i < c->n_on_removed; i++)
            c->on_removed[i].fn(c, c->on_removed[i].arg);
    }
    /* other threads learn of it last: shoal_cluster_shutdown_wait returns after on_removed */
    cluster_mark_terminated(c);
}

/* cluster-exiting-done: tell the others this member is done, again until it is removed (the
   leader removes an Exiting member only once it confirmed) */
static void confirm_tick(shoal_system_t *sys, void *arg)
{
    shoal_cluster_t *c = arg;
    if (c->phase != SHOAL_PHASE_CLUSTER_EXITING_DONE || c->terminated) {
        if (c->t_confirm > 0)
            shoal_system_timer_cancel(sys, c->t_confirm);
        c->t_confirm = 0;
        return;
    }
    cluster_confirm_exiting(c);
}

static void grace_over(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    c->t_grace = 0;
    shutdown_react(c);
}

static void next_phase(shoal_cluster_t *c)
{
    for (;;) {
        if (c->t_phase > 0) {
            shoal_system_timer_cancel(c->sys, c->t_phase);
            c->t_phase = 0;
        }
        c->phase++;
        c->phase_gen++;
        if (c->phase >= SHOAL_PHASE_COUNT) {
            finish(c);
            return;
        }
        /* membership's own step */
        switch (c->phase) {
        case SHOAL_PHASE_CLUSTER_LEAVE:
            if (c->shutdown_reason != SHOAL_SHUTDOWN_DOWNED &&
                c->shutdown_reason != SHOAL_SHUTDOWN_JOIN_FAILED) {
                shoal_member_status_t st = cluster_self_status(c);
                if (st && st < SHOAL_MEMBER_LEAVING)
                    cluster_do_leave(c, NULL);
            }
            break;
        case SHOAL_PHASE_CLUSTER_EXITING:
            singletons_stop_all(c);
            break;
        case SHOAL_PHASE_CLUSTER_EXITING_DONE:
            if (c->shutdown_reason != SHOAL_SHUTDOWN_DOWNED) {
                cluster_confirm_exiting(c);
                if (c->t_confirm <= 0)
                    c->t_confirm = shoal_system_timer(c->sys, c->s.gossip_interval_ms / 4 + 1, true,
                                                      confirm_tick, c);
            }
            break;
        case SHOAL_PHASE_CLUSTER_SHUTDOWN:
            if (c->hb) {
                hb_actor_set_peers(c->hb, NULL, 0, NULL, 0);
                hb_actor_pause(c->hb, true);
            }
            if (c->shutdown_reason == SHOAL_SHUTDOWN_DOWNED) {
                c->downed_grace_until = shoal_now_ms() + c->s.gossip_interval_ms;
                cluster_tell_everyone(c);
                c->t_grace =
                    shoal_system_timer(c->sys, c->s.gossip_interval_ms + 1, false, grace_over, c);
            }
            break;
        default:
            break;
        }
        int outstanding = own_step_done(c) ? 0 : 1;
        c->own_waiting = outstanding;
        uint64_t gen = c->phase_gen;
        size_t n_user = 0;
        for (size_t i = 0; i < c->n_tasks; i++)
            if (c->tasks[i].phase == (shoal_phase_t)c->phase)
                n_user++;
        c->phase_outstanding = outstanding + (int)n_user;
        if (c->phase_outstanding == 0)
            continue;
        shoal_info("%s: shutdown phase %s", shoal_node_id(c->self), shoal_phase_name(c->phase));
        c->t_phase = shoal_system_timer(c->sys, c->s.phase_timeout_ms, false, phase_timeout, c);
        for (size_t i = 0; i < c->n_tasks && gen == c->phase_gen; i++) {
            if (c->tasks[i].phase != (shoal_phase_t)c->phase)
                continue;
            token_t *t = malloc(sizeof *t);
            if (!t)
                abort();
            *t = (token_t){c, gen};
            c->tokens = realloc(c->tokens, (c->n_tokens + 1) * sizeof *c->tokens);
            if (!c->tokens)
                abort();
            c->tokens[c->n_tokens++] = t;
            c->tasks[i].fn(c, c->shutdown_reason, task_done, t, c->tasks[i].arg);
        }
        return; /* the rest happens in task_done / shutdown_react / phase_timeout */
    }
}

void shutdown_start(shoal_cluster_t *c, shoal_shutdown_reason_t why)
{
    if (c->shutting_down || c->terminated)
        return;
    c->shutting_down = true;
    c->shutdown_reason = why;
    c->phase = -1;
    shoal_info("%s: shutting down (%s)", shoal_node_id(c->self),
               why == SHOAL_SHUTDOWN_LEAVE     ? "leaving"
               : why == SHOAL_SHUTDOWN_DOWNED  ? "downed"
               : why == SHOAL_SHUTDOWN_REQUEST ? "requested"
                                               : "join failed");
    next_phase(c);
}

/* Attached by shoal_cluster_new before the cluster starts: the core starts a shutdown when this
   node is downed, leaves or fails to join, and tells it of every new state. */
void shutdown_attach(shoal_cluster_t *c)
{
    c->hooks.shutdown_start = shutdown_start;
    c->hooks.shutdown_react = shutdown_react;
}

void shutdown_react(shoal_cluster_t *c)
{
    if (!c->shutting_down || c->terminated || c->phase < 0 || c->phase >= SHOAL_PHASE_COUNT)
        return;
    if ((c->phase == SHOAL_PHASE_CLUSTER_LEAVE || c->phase == SHOAL_PHASE_CLUSTER_EXITING_DONE ||
         c->phase == SHOAL_PHASE_CLUSTER_SHUTDOWN) &&
        c->own_waiting && own_step_done(c)) {
        c->own_waiting = false;
        phase_step_done(c, c->phase_gen);
    }
}

void shutdown_free(shoal_cluster_t *c)
{
    for (size_t i = 0; i < c->n_tokens; i++)
        free(c->tokens[i]);
    free(c->tokens);
    for (size_t i = 0; i < c->n_tasks; i++)
        free(c->tasks[i].name);
    free(c->tasks);
}

typedef struct {
    shoal_cluster_t *c;
    shoal_phase_t phase;
    const char *name;
    shoal_task_fn *fn;
    void *arg;
} add_task_arg_t;

static int do_add_task(shoal_system_t *sys, void *arg)
{
    (void)sys;
    add_task_arg_t *a = arg;
    shoal_cluster_t *c = a->c;
    if (c->shutting_down)
        return SHOAL_ESTOPPED;
    c->tasks = realloc(c->tasks, (c->n_tasks + 1) * sizeof *c->tasks);
    if (!c->tasks)
        abort();
    char *name = strdup(a->name ? a->name : "task");
    if (!name)
        abort();
    c->tasks[c->n_tasks++] = (task_t){a->phase, name, a->fn, a->arg};
    return 0;
}

int shoal_cluster_add_task(shoal_cluster_t *c, shoal_phase_t phase, const char *name,
                           shoal_task_fn *fn, void *arg)
{
    if (!c || !fn || (unsigned)phase >= SHOAL_PHASE_COUNT)
        return SHOAL_EINVAL;
    add_task_arg_t a = {c, phase, name, fn, arg};
    return cluster_call(c, do_add_task, &a);
}

static int do_remove_task(shoal_system_t *sys, void *arg)
{
    (void)sys;
    add_task_arg_t *a = arg;
    shoal_cluster_t *c = a->c;
    size_t k = 0;
    for (size_t i = 0; i < c->n_tasks; i++) {
        if (c->tasks[i].fn == a->fn && c->tasks[i].arg == a->arg) {
            free(c->tasks[i].name);
            continue;
        }
        c->tasks[k++] = c->tasks[i];
    }
    int removed = (int)(c->n_tasks - k);
    c->n_tasks = k;
    return removed;
}

int shoal_cluster_remove_task(shoal_cluster_t *c, shoal_task_fn *fn, void *arg)
{
    if (!c || !fn)
        return SHOAL_EINVAL;
    add_task_arg_t a = {c, 0, NULL, fn, arg};
    return cluster_call(c, do_remove_task, &a);
}

static int do_shutdown(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shutdown_start(arg, SHOAL_SHUTDOWN_REQUEST);
    return 0;
}

int shoal_cluster_shutdown(shoal_cluster_t *c)
{
    if (!c)
        return SHOAL_EINVAL;
    return cluster_call(c, do_shutdown, c);
}

bool shoal_cluster_terminated(shoal_cluster_t *c)
{
    return c && atomic_load(&c->terminated_seen);
}

void cluster_mark_terminated(shoal_cluster_t *c)
{
    c->terminated = true;
    pthread_mutex_lock(&c->term_mu);
    atomic_store(&c->terminated_seen, true);
    pthread_cond_broadcast(&c->term_cv);
    pthread_mutex_unlock(&c->term_mu);
}

int shoal_cluster_shutdown_wait(shoal_cluster_t *c, uint32_t timeout_ms)
{
    if (!c)
        return SHOAL_EINVAL;
    if (shoal_system_on_thread(c->sys)) {
        /* the phases run on this thread: waiting here would stop them */
        shoal_error_detail_set(SHOAL_EDEADLK,
                               "shoal_cluster_shutdown_wait: not from the node "
                               "thread (the shutdown runs there); call shoal_cluster_shutdown and "
                               "shoal_cluster_on_removed instead");
        shoal_warning("%s", shoal_last_error_detail());
        return SHOAL_EDEADLK;
    }
    int rc = shoal_cluster_shutdown(c);
    if (rc < 0 && !shoal_cluster_terminated(c))
        return rc;
    struct timespec until = shoal_deadline_in(timeout_ms);
    pthread_mutex_lock(&c->term_mu);
    while (!atomic_load(&c->terminated_seen))
        if (pthread_cond_timedwait(&c->term_cv, &c->term_mu, &until) != 0)
            break;
    bool done = atomic_load(&c->terminated_seen);
    pthread_mutex_unlock(&c->term_mu);
    return done ? 0 : SHOAL_ETIMEOUT;
}
