/*  test_http.c — the management endpoint (ddata.h, METRICS AND THE MANAGEMENT ENDPOINT) as an
    operator and a kubelet use it: real nodes, real HTTP over loopback sockets.

    cluster_routes: three members with sharding in this process, an endpoint each. Every route
      (the dashboard page and the recent events too) answers with valid JSON (python3's json) or Prometheus text that `promtool check metrics`
      accepts; /health/ready is 503 naming the reason while a node is in no cluster and 200 once
      it is Up and its entity type registered; the shard map agrees with the placement calls;
      POST .../down is refused to a client off loopback (and on a read-only endpoint) and
      accepted from loopback, after which the member is downed.
    bad_requests: an unknown path, a bad method, a huge URL, a body over the limit, garbage:
      each a clear 4xx, and the endpoint still answers.
    alive_follows_the_node_loop: a node whose loop is stuck answers /health/alive 503 within the
      probe's deadline (the request does not hang), and 200 once the loop runs again; a bare
      ddata node serves no cluster routes.
    every_binary_passes_promtool: each shipped node program (shoal-member, kvstore, replicated-map,
      payments, session-judge, chaos-node), started with --http, serves /metrics that promtool
      accepts and answers /health/alive.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "http.h"
#include "members.h"
#include "procs.h"
#include "shards.h"
#include "tools.h"

#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_MS 20000

static shoal_metrics_t *ep[TS_MAX + 1];

static int teardown(void **state)
{
    for (int i = 0; i <= TS_MAX; i++)
        shoal_metrics_stop(&ep[i]);
    return tsnode_teardown(state);
}

/* Starts node i without joining, with an endpoint on an ephemeral loopback port. */
static uint16_t start_node(int i)
{
    tsnode_opts_t o = {.no_join = true};
    tsnode_start(i, &o);
    int err = 0;
    ep[i] = shoal_http_start(tsn[i].sys, "127.0.0.1:0", &err);
    assert_non_null(ep[i]);
    return shoal_metrics_port(ep[i]);
}

typedef struct {
    uint16_t port;
    const char *path;
    int status;
    const char *needle; /* NULL: any body */
} want_t;

static bool answers(void *arg)
{
    want_t *w = arg;
    thttp_resp_t r;
    bool ok = thttp_get(w->port, w->path, &r) && r.status == w->status &&
              (!w->needle || strstr(r.body, w->needle));
    thttp_free(&r);
    return ok;
}

static void wait_answer(uint16_t port, const char *path, int status, const char *needle)
{
    want_t w = {port, path, status, needle};
    if (!wait_until(answers, &w, DEADLINE_MS)) {
        thttp_resp_t r;
        thttp_get(port, path, &r);
        fail_msg("GET %s: wanted %d with '%s', got %d: %s", path, status, needle ? needle : "",
                 r.status, r.body ? r.body : "(nothing)");
    }
}

/* GET path: the status must be `status` and the body valid JSON; returns the response. */
static void get_json(uint16_t port, const char *path, int status, thttp_resp_t *r)
{
    assert_true(thttp_get(port, path, r));
    if (r->status != status)
        fail_msg("GET %s: %d, wanted %d: %s", path, r->status, status, r->body);
    assert_string_equal(r->content_type, "application/json");
    if (!thttp_json_ok(r->body))
        fail_msg("GET %s: not JSON: %s", path, r->body);
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}


/* ---------------------------------------------------------------------------------------------
 * cluster_routes
 */
/* The home a region's placement call gives for an entity (or, with `shard`, a shard id). */
typedef struct {
    shoal_region_t *r;
    const char *id;
    bool shard;
    const shoal_node_t *home;
} placement_t;

static bool placement_known(void *arg)
{
    placement_t *p = arg;
    p->home = p->shard ? shoal_region_shard_home(p->r, p->id)
                       : shoal_region_entity_home(p->r, p->id);
    return p->home != NULL;
}

static void cluster_routes(void **state)
{
    (void)state;
    uint16_t port[3];
    port[0] = start_node(0);

    /* in no cluster: alive, not ready, and the reason says why */
    wait_answer(port[0], "/health/alive", 200, "\"alive\":true");
    thttp_resp_t r;
    get_json(port[0], "/health/ready", 503, &r);
    assert_non_null(strstr(r.body, "\"check\":\"cluster\""));
    assert_non_null(strstr(r.body, "in no cluster"));
    thttp_free(&r);

    /* the cluster forms: 503 -> 200 on every node as it becomes Up and registers its type */
    assert_int_equal(shoal_cluster_join(tsn[0].cl, NULL, 0), 0);
    const char *seed = shoal_system_endpoint(tsn[0].sys);
    for (int i = 1; i < 3; i++) {
        port[i] = start_node(i);
        get_json(port[i], "/health/ready", 503, &r);
        thttp_free(&r);
        assert_int_equal(shoal_cluster_join(tsn[i].cl, &seed, 1), 0);
    }
    tsnode_wait_up(0x7, DEADLINE_MS);
    tsnode_wait_registered(0x7, 0, 3, DEADLINE_MS);
    for (int i = 0; i < 3; i++)
        wait_answer(port[i], "/health/ready", 200, "\"checks\":[\"cluster\",\"sharding\",\"majority\"]");

    /* members: the view shoal-cluster --json members prints, every member Up */
    for (int i = 0; i < 3; i++) {
        get_json(port[i], "/cluster/members", 200, &r);
        assert_int_equal(count(r.body, "\"status\":\"Up\""), 3);
        assert_non_null(strstr(r.body, shoal_node_id(shoal_system_self(tsn[i].sys))));
        thttp_free(&r);
    }

    /* entities, then the shard map: homes as the placement calls say, entity counts, the
       coordinator on the oldest member */
    static const char *const ids[] = {"e1", "e2", "e3", "e4", "e5", "e6"};
    for (size_t k = 0; k < 6; k++) {
        char msg[32];
        snprintf(msg, sizeof msg, "t:%d", 1);
        assert_int_equal(shoal_region_tell(tsn[0].r, ids[k], msg, strlen(msg)), 0);
    }
    for (size_t k = 0; k < 6; k++) {
        char shard[SHOAL_SHARD_ID_MAX + 1], want[256];
        shoal_region_shard_of(tsn[0].r, ids[k], shard);
        placement_t by_entity = {tsn[1].r, ids[k], false, NULL};
        assert_true(wait_until(placement_known, &by_entity, 10000));
        const shoal_node_t *home = by_entity.home;
        /* another member learns the allocation by gossip: wait for it there too */
        placement_t by_shard = {tsn[2].r, shard, true, NULL};
        assert_true(wait_until(placement_known, &by_shard, 10000));
        assert_ptr_equal(home, by_shard.home);
        snprintf(want, sizeof want, "{\"id\":\"%s\",\"home\":\"%s\",\"entities\":", shard,
                 shoal_node_id(home));
        wait_answer(port[1], "/cluster/shards/" TSHARD_TYPE, 200, want);
    }
    const shoal_node_t *co = shoal_region_coordinator(tsn[2].r);
    assert_non_null(co);
    assert_ptr_equal(co, shoal_system_self(tsn[tsnode_oldest(2)].sys));
    get_json(port[2], "/cluster/shards/" TSHARD_TYPE, 200, &r);
    char want[256];
    snprintf(want, sizeof want, "\"coordinator\":\"%s\"", shoal_node_id(co));
    assert_non_null(strstr(r.body, want));
    assert_int_equal(count(r.body, "\"answered\":true"), 3);
    assert_null(strstr(r.body, "\"entities\":null")); /* every home reported its shards */
    thttp_free(&r);
    get_json(port[0], "/cluster/shards", 200, &r);
    assert_non_null(strstr(r.body, "{\"types\":[{\"type\":\"" TSHARD_TYPE "\""));
    thttp_free(&r);
    get_json(port[0], "/cluster/shards/no-such-type", 404, &r);
    assert_non_null(strstr(r.body, "no entity type no-such-type"));
    thttp_free(&r);

    /* the dashboard page, and the events it lists */
    assert_true(thttp_get(port[0], "/", &r));
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/html; charset=utf-8");
    assert_non_null(strstr(r.body, "<title>Shoal</title>"));
    thttp_free(&r);
    get_json(port[0], "/cluster/events", 200, &r);
    assert_true(count(r.body, "\"event\":\"member-up\"") >= 2); /* nodes 1 and 2 came up */
    thttp_free(&r);

    /* replicators: roles, keys with type and digest (the coordinator's state among them) */
    get_json(port[0], "/cluster/replicators", 200, &r);
    assert_non_null(strstr(r.body, "\"role\":\"__system\""));
    assert_non_null(strstr(r.body, "{\"key\":\"coord-" TSHARD_TYPE "\",\"type\":\"LWWMap\","
                                   "\"digest\":\""));
    thttp_free(&r);

    /* metrics: every family promtool accepts, the cluster and sharding ones among them */
    for (int i = 0; i < 3; i++) {
        assert_true(thttp_get(port[i], "/metrics", &r));
        assert_int_equal(r.status, 200);
        const char *bad = thttp_promtool(r.body);
        if (bad)
            fail_msg("node %d: promtool check metrics: %s", i, bad);
        assert_non_null(strstr(r.body, "shoal_cluster_members{status=\"up\"} 3\n"));
        assert_non_null(strstr(r.body, "shoal_sharding_tells_total{type=\"" TSHARD_TYPE "\"}"));
        thttp_free(&r);
    }

    /* POST down: refused off loopback and on a read-only endpoint, accepted from loopback */
    char path[128];
    const char *victim = shoal_node_id(shoal_system_self(tsn[2].sys));
    snprintf(path, sizeof path, "/cluster/members/%s", victim);
    char outside[64];
    if (thttp_outside_address(outside, sizeof outside)) {
        char spec[80];
        snprintf(spec, sizeof spec, "%s:0", outside);
        int err = 0;
        ep[TS_MAX] = shoal_http_start(tsn[0].sys, spec, &err);
        assert_non_null(ep[TS_MAX]);
        assert_true(thttp_post(outside, shoal_metrics_port(ep[TS_MAX]), outside, path, "down",
                               &r));
        if (r.status != 403)
            fail_msg("POST down from %s: %d %s", outside, r.status, r.body);
        assert_non_null(strstr(r.body, "loopback clients only"));
        thttp_free(&r);
        shoal_metrics_stop(&ep[TS_MAX]);
    } else {
        print_message("no address off loopback here: the read-only check stands in for it\n");
    }
    assert_int_equal(shoal_metrics_set_writes(ep[0], SHOAL_HTTP_WRITES_NONE), 0);
    assert_true(thttp_post(NULL, port[0], NULL, path, "down", &r));
    assert_int_equal(r.status, 403);
    thttp_free(&r);
    assert_int_equal(shoal_metrics_set_writes(ep[0], SHOAL_HTTP_WRITES_LOOPBACK), 0);
    assert_true(thttp_post(NULL, port[0], NULL, path, "reboot", &r));
    assert_int_equal(r.status, 400);
    thttp_free(&r);
    assert_true(thttp_post(NULL, port[0], NULL, "/cluster/members/127.0.0.1:1", "down", &r));
    assert_int_equal(r.status, 404);
    thttp_free(&r);
    assert_true(thttp_post(NULL, port[0], NULL, path, "down\n", &r));
    if (r.status != 202)
        fail_msg("POST down: %d %s", r.status, r.body);
    assert_non_null(strstr(r.body, "\"action\":\"down\""));
    thttp_free(&r);
    /* downed, then removed: gone from the others' view */
    char gone[160];
    snprintf(gone, sizeof gone, "\"node\":\"%s\"", victim);
    for (int i = 0; i < 2; i++) {
        bool removed = false;
        for (int t = 0; t < 400 && !removed; t++) {
            thttp_resp_t m;
            removed = thttp_get(port[i], "/cluster/members", &m) && m.status == 200 &&
                      !strstr(m.body, gone);
            thttp_free(&m);
            if (!removed)
                usleep(50000 * (useconds_t)tscale());
        }
        assert_true(removed);
    }
}

/* ---------------------------------------------------------------------------------------------
 * bad_requests
 */
static void expect_405(uint16_t port, const char *req, const char *allow)
{
    thttp_resp_t r;
    assert_true(thttp_raw(NULL, port, NULL, req, strlen(req), &r));
    if (r.status != 405 || strcmp(r.allow, allow) != 0)
        fail_msg("%s: %d, Allow '%s' (wanted 405, '%s')", req, r.status, r.allow, allow);
    thttp_free(&r);
}

static void bad_requests(void **state)
{
    (void)state;
    uint16_t port = start_node(0);
    assert_int_equal(shoal_cluster_join(tsn[0].cl, NULL, 0), 0);
    thttp_resp_t r;

    get_json(port, "/no/such/path", 404, &r);
    assert_non_null(strstr(r.body, "/cluster/members"));
    thttp_free(&r);

    /* methods a route does not take: 405 naming those it does */
    expect_405(port, "DELETE /cluster/members HTTP/1.0\r\n\r\n", "GET, HEAD");
    expect_405(port, "POST /health/ready HTTP/1.0\r\nContent-Length: 1\r\n\r\nx", "GET, HEAD");
    expect_405(port, "DELETE /cluster/members/x HTTP/1.0\r\n\r\n", "GET, HEAD, POST");

    /* a 70 KB URL, a 5 KB body, a request of garbage */
    size_t n = 70000;
    char *big = malloc(n + 64);
    memcpy(big, "GET /", 5);
    memset(big + 5, 'a', n);
    size_t len = 5 + n;
    len += (size_t)sprintf(big + len, " HTTP/1.0\r\n\r\n");
    assert_true(thttp_raw(NULL, port, NULL, big, len, &r));
    assert_true(r.status == 414 || r.status == 431);
    thttp_free(&r);
    free(big);
    char *body = malloc(5001);
    memset(body, 'x', 5000);
    body[5000] = 0;
    assert_true(thttp_post(NULL, port, NULL, "/cluster/members/x", body, &r));
    assert_int_equal(r.status, 413);
    thttp_free(&r);
    free(body);
    static const char garbage[] = "\x01\xff GARBAGE\r\n\r\n";
    thttp_raw(NULL, port, NULL, garbage, sizeof garbage - 1, &r);
    assert_true(r.status == 0 || (r.status >= 400 && r.status < 500));
    thttp_free(&r);
    static const char no_slash[] = "GET metrics HTTP/1.0\r\n\r\n";
    thttp_raw(NULL, port, NULL, no_slash, sizeof no_slash - 1, &r);
    assert_true(r.status >= 400 && r.status < 500);
    thttp_free(&r);

    /* and the endpoint is still there */
    wait_answer(port, "/health/alive", 200, NULL);
    wait_answer(port, "/health/ready", 200, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * alive_follows_the_node_loop
 */
static int stall(shoal_system_t *sys, void *arg)
{
    (void)sys;
    usleep((useconds_t)(*(int *)arg) * 1000);
    return 0;
}

static void alive_follows_the_node_loop(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 1, NULL); /* a node with a replicator: ddata alone */
    shoal_system_t *sys = c.sys[0];
    int err = 0;
    shoal_metrics_t *m = shoal_http_start(sys, "0", &err);
    assert_non_null(m);
    uint16_t port = shoal_metrics_port(m);

    assert_int_equal(thttp_status(port, "/health/alive"), 200);
    assert_int_equal(thttp_status(port, "/health/ready"), 200); /* no checks: ddata alone */
    assert_int_equal(thttp_status(port, "/cluster/members"), 404);
    thttp_resp_t r;
    get_json(port, "/cluster/replicators", 200, &r);
    assert_non_null(strstr(r.body, "{\"role\":\"\",\"replicas\":1"));
    thttp_free(&r);

    /* the loop stuck for 3 s: the probe answers 503 in about a second, the node still stuck */
    static int ms = 3000;
    assert_int_equal(shoal_system_post(sys, stall, &ms), 0);
    int64_t t0 = shoal_now_ms();
    get_json(port, "/health/alive", 503, &r);
    assert_non_null(strstr(r.body, "node loop did not answer within 1000 ms"));
    assert_true(shoal_now_ms() - t0 < 2500);
    thttp_free(&r);
    /* stopping the endpoint now waits for the abandoned probe's job, then frees it */
    shoal_metrics_stop(&m);
    m = shoal_http_start(sys, "0", &err);
    assert_non_null(m);
    wait_answer(shoal_metrics_port(m), "/health/alive", 200, NULL);

    shoal_metrics_stop(&m);
    tcluster_stop(&c);
}

/* ---------------------------------------------------------------------------------------------
 * every_binary_passes_promtool
 */
typedef struct {
    const char *name;
    const char *fmt; /* arguments; %1$d node port, %2$d HTTP port, %3$s scratch directory */
    const char *family; /* a family this program must serve */
} prog_t;

static bool metrics_with(void *arg)
{
    want_t *w = arg;
    thttp_resp_t r;
    bool ok = thttp_get(w->port, "/metrics", &r) && r.status == 200 && strstr(r.body, w->needle);
    thttp_free(&r);
    return ok;
}

static void every_binary_passes_promtool(void **state)
{
    (void)state;
    static const prog_t progs[] = {
        {"shoal-member",
         "--bind tcp://127.0.0.1:%1$d --seed tcp://127.0.0.1:%1$d --fast --quiet --http %2$d",
         "shoal_cluster_members{status=\"up\"} 1"},
        {"kvstore",
         "node --bind tcp://127.0.0.1:%1$d --new-cluster --data %3$s/kv --fast --http "
         "127.0.0.1:%2$d",
         "shoal_durable_puts_total"},
        {"replicated-map", "node %1$d --http %2$d", "shoal_replicator_keys{role=\"\"}"},
        {"payments",
         "--node --bind tcp://127.0.0.1:%1$d --seed tcp://127.0.0.1:%1$d --data %3$s/pay "
         "--http %2$d",
         "shoal_sharding_tells_total{type=\"payment\"}"},
        {"session-judge",
         "--node --bind tcp://127.0.0.1:%1$d --seed tcp://127.0.0.1:%1$d --redis 1 --index 1 "
         "--partitions 2 --dir %3$s --http %2$d",
         "shoal_sharding_tells_total{type=\"judge\"}"},
        {"chaos-node",
         "--index 1 --bind tcp://127.0.0.1:%1$d --data %3$s/chaos --log %3$s/chaos.log --http "
         "%2$d",
         "shoal_sharding_tells_total{type=\"acct\"}"},
    };
    char dir[] = "/tmp/shoal-http-bins-XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (size_t i = 0; i < sizeof progs / sizeof *progs; i++) {
        char path[4200];
        if (!ttool_find(progs[i].name, path, sizeof path))
            fail_msg("%s is not built (build/bin/%s)", progs[i].name, progs[i].name);
        int node_port = tfree_port(), http_port = tfree_port();
        while (http_port == node_port)
            http_port = tfree_port();
        char args[1024], log[4300];
        snprintf(args, sizeof args, progs[i].fmt, node_port, http_port, dir);
        snprintf(log, sizeof log, "%s/%s.log", dir, progs[i].name);
        char *argv[32];
        int argc = 0;
        argv[argc++] = path;
        for (char *tok = strtok(args, " "); tok && argc < 31; tok = strtok(NULL, " "))
            argv[argc++] = tok;
        argv[argc] = NULL;
        int pid = ttool_spawn(path, argv, log);
        assert_true(pid > 0);
        want_t w = {(uint16_t)http_port, "/metrics", 200, progs[i].family};
        bool up = wait_until(metrics_with, &w, DEADLINE_MS);
        thttp_resp_t r = {0};
        bool got = up && thttp_get((uint16_t)http_port, "/metrics", &r);
        const char *bad = got ? thttp_promtool(r.body) : NULL;
        int alive = thttp_status((uint16_t)http_port, "/health/alive");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (!up) {
            char cmd[4400], out[4096] = "";
            snprintf(cmd, sizeof cmd, "tail -20 %s", log);
            FILE *p = popen(cmd, "r");
            if (p) {
                size_t n = fread(out, 1, sizeof out - 1, p);
                out[n] = 0;
                pclose(p);
            }
            fail_msg("%s --http %d: no /metrics with %s; its log:\n%s", progs[i].name, http_port,
                     progs[i].family, out);
        }
        if (bad)
            fail_msg("%s: promtool check metrics: %s", progs[i].name, bad);
        assert_int_equal(alive, 200);
        thttp_free(&r);
        print_message("%s: /metrics passes promtool\n", progs[i].name);
    }
    trm_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(cluster_routes, teardown),
        cmocka_unit_test_teardown(bad_requests, teardown),
        cmocka_unit_test_teardown(alive_follows_the_node_loop, tcluster_teardown),
        cmocka_unit_test(every_binary_passes_promtool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
