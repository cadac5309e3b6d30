/*  test_member_procs.c — membership with members in their own processes, where a crash, a pause
    or a restart is the point: SIGKILL of a member (unreachable, downed by keep-majority, removed,
    its data pruned, then restarted with a new uid on the same port and Up again), a rolling
    restart of four members (nobody downed, the cluster never downed whole), and a member paused
    with SIGSTOP for a few heartbeat pauses (not downed). An in-process member is the seed and the
    observer.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "members.h"

#include <arpa/inet.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#define MAXC 5

static shoal_system_t *psys;
static shoal_cluster_t *pcl;
static shoal_replicator_t *pdata;
static pid_t kids[MAXC];
static int kid_port[MAXC];
static int downed_events;

static void on_event(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg)
{
    (void)c;
    (void)arg;
    if (ev->kind == SHOAL_EV_MEMBER_DOWNED)
        __atomic_add_fetch(&downed_events, 1, __ATOMIC_SEQ_CST);
}

static int subscribe(shoal_system_t *sys, void *arg)
{
    (void)sys;
    return shoal_cluster_subscribe(arg, on_event, NULL);
}

static void start_observer(uint32_t stable_after_ms)
{
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 0;
    psys = shoal_system_new(&ss, &err);
    assert_non_null(psys);
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    if (stable_after_ms)
        cs.stable_after_ms = stable_after_ms;
    pcl = shoal_cluster_new(psys, &cs, &err);
    assert_non_null(pcl);
    shoal_replicator_settings_t rs;
    tmember_data_settings(&rs);
    pdata = shoal_replicator_new(psys, &rs, &err);
    assert_non_null(pdata);
    assert_int_equal(shoal_cluster_follow(pcl, pdata), 0);
    downed_events = 0;
    assert_true(shoal_system_call(psys, subscribe, pcl) > 0);
    assert_int_equal(shoal_cluster_join(pcl, NULL, 0), 0);
}

static int seed_port(void)
{
    const char *ep = shoal_system_endpoint(psys);
    return atoi(strrchr(ep, ':') + 1);
}

static void spawn(int i, uint32_t stable_after_ms)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = 0;
    char prog[PATH_MAX + 16];
    snprintf(prog, sizeof prog, "%s/prog_member", dirname(self));
    if (!kid_port[i])
        kid_port[i] = tfree_port();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        tproc_die_with_parent();
        char p[16], s[16], st[16];
        snprintf(p, sizeof p, "%d", kid_port[i]);
        snprintf(s, sizeof s, "%d", seed_port());
        snprintf(st, sizeof st, "%u", stable_after_ms);
        int devnull = open("/dev/null", 1);
        if (devnull >= 0)
            dup2(devnull, 1); /* its log goes to stderr; stdout is not needed */
        if (stable_after_ms)
            execl(prog, prog, p, s, st, (char *)NULL);
        else
            execl(prog, prog, p, s, (char *)NULL);
        _exit(127);
    }
    kids[i] = pid;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < MAXC; i++) {
        if (kids[i] > 0) {
            kill(kids[i], SIGCONT);
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
        }
        kids[i] = 0;
        kid_port[i] = 0;
    }
    shoal_cluster_destroy(&pcl);
    shoal_replicator_destroy(&pdata);
    shoal_system_destroy(&psys);
    return 0;
}

/* --- conditions on the observer's view ------------------------------------------------------- */
typedef struct {
    int up;             /* members Up, reachable, converged */
    int port;           /* a member at this port ... */
    const shoal_node_t *not_this; /* ... that is not this incarnation */
    const shoal_node_t *gone;     /* not in the view any more */
    const shoal_node_t *unreachable;
} cond_t;

static bool view_ok(void *arg)
{
    cond_t *c = arg;
    shoal_cluster_view_t v;
    if (shoal_cluster_view(pcl, &v) != 0)
        return false;
    bool ok = true;
    if (c->up) {
        int up = 0;
        for (size_t i = 0; i < v.n_members; i++)
            up += v.members[i].status == SHOAL_MEMBER_UP && v.members[i].reachable;
        ok = ok && up == c->up && (int)v.n_members == c->up && v.converged;
    }
    if (c->port) {
        bool found = false;
        for (size_t i = 0; i < v.n_members; i++)
            found = found || (shoal_node_port(v.members[i].node) == c->port &&
                              v.members[i].node != c->not_this &&
                              v.members[i].status == SHOAL_MEMBER_UP);
        ok = ok && found;
    }
    if (c->gone)
        ok = ok && !shoal_cluster_view_member(&v, c->gone);
    if (c->unreachable) {
        const shoal_member_t *m = shoal_cluster_view_member(&v, c->unreachable);
        ok = ok && m && !m->reachable;
    }
    shoal_cluster_view_free(&v);
    return ok;
}

static const shoal_node_t *member_at(int port)
{
    shoal_cluster_view_t v;
    const shoal_node_t *n = NULL;
    if (shoal_cluster_view(pcl, &v) != 0)
        return NULL;
    for (size_t i = 0; i < v.n_members; i++)
        if (shoal_node_port(v.members[i].node) == port && v.members[i].status <= SHOAL_MEMBER_UP)
            n = v.members[i].node;
    shoal_cluster_view_free(&v);
    return n;
}

static void wait_up(int n, int timeout_ms)
{
    cond_t c = {.up = n};
    if (!wait_until(view_ok, &c, timeout_ms)) {
        shoal_cluster_view_t v;
        shoal_cluster_view(pcl, &v);
        shoal_buf_t b = {0};
        shoal_cluster_view_json(&v, &b);
        fprintf(stderr, "observer: %s\n", shoal_buf_cstr(&b));
        shoal_buf_free(&b);
        shoal_cluster_view_free(&v);
        fail_msg("%d members did not come Up", n);
    }
}

static uint64_t hits(void)
{
    shoal_crdt_t *v = NULL;
    shoal_consistency_t local = {.level = SHOAL_LOCAL};
    if (shoal_replicator_get_sync(pdata, "hits", shoal_type_by_name("GCounter"), &local, &v) != 0)
        return 0;
    uint64_t n = shoal_gcounter_value(v);
    shoal_crdt_destroy(&v);
    return n;
}

static bool hits_are_3(void *arg)
{
    (void)arg;
    return hits() == 3;
}

/* pruning_performed summed over the observer and the members' replicators */
static uint64_t pruned_everywhere(void)
{
    shoal_replicator_stats_t st;
    uint64_t sum = 0;
    if (shoal_replicator_stats(pdata, &st) == 0)
        sum += st.pruning_performed;
    for (int i = 0; i < MAXC; i++) {
        if (kids[i] <= 0)
            continue;
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", kid_port[i]);
        int err;
        shoal_client_t *cl = shoal_client_new(ep, 2000, &err);
        if (!cl)
            continue;
        shoal_buf_t text = {0};
        if (shoal_client_stats(cl, "", &text) == 0) {
            const char *p = strstr(shoal_buf_cstr(&text), "pruning_performed ");
            if (p)
                sum += strtoull(p + 18, NULL, 10);
        }
        shoal_buf_free(&text);
        shoal_client_destroy(&cl);
    }
    return sum;
}

static bool pruned(void *arg)
{
    (void)arg;
    return pruned_everywhere() > 0;
}

/* SIGKILL -> unreachable -> downed (keep-majority) -> removed -> pruned; restart with a new uid
   on the same port -> Up again. */
static void test_kill_prune_restart(void **state)
{
    (void)state;
    start_observer(0);
    for (int i = 0; i < 3; i++)
        spawn(i, 0);
    wait_up(4, 20000);
    if (!wait_until(hits_are_3, NULL, 10000))
        fail_msg("hits = %llu, not 3", (unsigned long long)hits());
    const shoal_node_t *victim = member_at(kid_port[2]);
    assert_non_null(victim);
    kill(kids[2], SIGKILL);
    waitpid(kids[2], NULL, 0);
    kids[2] = 0;
    cond_t c = {.unreachable = victim};
    assert_true(wait_until(view_ok, &c, 15000));
    cond_t gone = {.gone = victim};
    assert_true(wait_until(view_ok, &gone, 30000));
    wait_up(3, 10000);
    /* its part of "hits" is folded into a survivor, not lost */
    assert_true(wait_until(pruned, NULL, 20000));
    assert_int_equal(hits(), 3);
    /* a new incarnation on the same port joins as a new member */
    spawn(2, 0);
    cond_t back = {.up = 4, .port = kid_port[2], .not_this = victim};
    assert_true(wait_until(view_ok, &back, 20000));
    assert_true(downed_events >= 1);
}

/* Leave, restart, join, one member at a time: nobody is downed. */
static void test_rolling_restart(void **state)
{
    (void)state;
    start_observer(0);
    for (int i = 0; i < 4; i++)
        spawn(i, 0);
    wait_up(5, 25000);
    for (int i = 0; i < 4; i++) {
        const shoal_node_t *old = member_at(kid_port[i]);
        assert_non_null(old);
        kill(kids[i], SIGTERM); /* graceful: leave, then exit */
        int status = 0;
        assert_int_equal(waitpid(kids[i], &status, 0), kids[i]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        kids[i] = 0;
        cond_t gone = {.gone = old};
        assert_true(wait_until(view_ok, &gone, 15000));
        spawn(i, 0);
        cond_t back = {.up = 5, .port = kid_port[i], .not_this = old};
        assert_true(wait_until(view_ok, &back, 20000));
    }
    assert_int_equal(__atomic_load_n(&downed_events, __ATOMIC_SEQ_CST), 0);
    assert_int_equal(shoal_cluster_self_status(pcl), SHOAL_MEMBER_UP);
}

/* A member paused (SIGSTOP) for three acceptable heartbeat pauses, well inside stable-after,
   comes back without anybody being downed. */
static void test_paused_member_not_downed(void **state)
{
    (void)state;
    shoal_cluster_settings_t s;
    tmember_settings(&s);
    uint32_t stable = s.acceptable_heartbeat_pause_ms * 6;
    start_observer(stable);
    for (int i = 0; i < 3; i++)
        spawn(i, stable);
    wait_up(4, 20000);
    const shoal_node_t *paused = member_at(kid_port[1]);
    kill(kids[1], SIGSTOP);
    cond_t c = {.unreachable = paused};
    assert_true(wait_until(view_ok, &c, 15000));
    struct timespec ts = {0, 0};
    int64_t pause_ms = (int64_t)s.acceptable_heartbeat_pause_ms * 3;
    ts.tv_sec = pause_ms / 1000;
    ts.tv_nsec = (pause_ms % 1000) * 1000000;
    nanosleep(&ts, NULL); /* the point of the test: the member stays stopped this long */
    kill(kids[1], SIGCONT);
    wait_up(4, 15000);
    assert_ptr_equal(member_at(kid_port[1]), paused);
    assert_int_equal(__atomic_load_n(&downed_events, __ATOMIC_SEQ_CST), 0);
}


/* A member restarted at once on the same address (a new uid) while its old incarnation is still
   a member: the join downs the old one, and the new one is let in once the old one is removed. */
static void test_new_incarnation_replaces_old(void **state)
{
    (void)state;
    start_observer(0);
    for (int i = 0; i < 3; i++)
        spawn(i, 0);
    wait_up(4, 20000);
    const shoal_node_t *old = member_at(kid_port[1]);
    assert_non_null(old);
    kill(kids[1], SIGKILL);
    waitpid(kids[1], NULL, 0);
    spawn(1, 0); /* before anyone noticed the old one is gone */
    cond_t gone = {.gone = old};
    assert_true(wait_until(view_ok, &gone, 30000));
    cond_t back = {.up = 4, .port = kid_port[1], .not_this = old};
    assert_true(wait_until(view_ok, &back, 20000));
    assert_true(__atomic_load_n(&downed_events, __ATOMIC_SEQ_CST) >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_kill_prune_restart, teardown),
        cmocka_unit_test_teardown(test_new_incarnation_replaces_old, teardown),
        cmocka_unit_test_teardown(test_rolling_restart, teardown),
        cmocka_unit_test_teardown(test_paused_member_not_downed, teardown),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
