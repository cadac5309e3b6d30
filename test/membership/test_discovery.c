/*  test_discovery.c — seed discovery by DNS (membership.h, SEED DISCOVERY) against a real
    resolver: a dnsmasq started here on 127.0.0.1 and an unprivileged port, answering for the test
    zone from a hosts file (reloaded with SIGHUP) and --srv-host records, and real nodes in this
    process bound on the loopback aliases 127.0.0.2-127.0.0.7 (Linux routes all of 127/8 to lo).

    Cases: a cold start of 3 (A records) and of 5 (SRV records) nodes from one name forms exactly
    one cluster; a node added to the name later joins it; a node restarted on a new address
    rejoins; a name that points at nothing, or at the node alone, leaves the node waiting and its
    view saying so; malformed names are refused with a reason. And the kvstore example as a user
    runs it (build/bin/kvstore, three processes, --discover and SHOAL_DNS_RESOLVER): its cluster
    forms by DNS, serves majority writes, and its lowest node, killed and restarted on its data
    directory (kept membership), rejoins that cluster instead of forming a second one; two nodes
    restarted while the name gives only them wait for their kept membership instead of forming a
    second cluster, and join the running one once the name gives one of its members.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "http.h"
#include "members.h"
#include "tools.h"
#include "config_words.h"
#include "discovery.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pwd.h>
#include <resolv.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXN 8
#define ZONE "shoal.test"
#define DNSMASQ "/usr/sbin/dnsmasq"

typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
    shoal_replicator_t *data;
} dnode_t;

static dnode_t nodes[MAXN];

/* the dnsmasq of the running test */
static pid_t dns_pid;
static int dns_port;
static char dns_dir[64];
static char dns_hosts[128];
static char resolver[32];
static int node_port; /* every node listens on this port, each on its own address */

/* --- the resolver ------------------------------------------------------------------------------ */

static void write_hosts(const char *const *lines, size_t n)
{
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.new", dns_hosts);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s\n", lines[i]);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, dns_hosts), 0); /* dnsmasq never reads half a file */
}

/* Answers of the test's dnsmasq for `name` (type A), as a count; -1 when it does not answer. */
static int dns_count(const char *name, int type)
{
    struct __res_state st;
    memset(&st, 0, sizeof st);
    if (res_ninit(&st) < 0)
        return -1;
    st.retrans = 1;
    st.retry = 1;
    st.nscount = 1;
    st.nsaddr_list[0].sin_family = AF_INET;
    st.nsaddr_list[0].sin_port = htons((uint16_t)dns_port);
    inet_pton(AF_INET, "127.0.0.1", &st.nsaddr_list[0].sin_addr);
    unsigned char answer[4096];
    int len = res_nquery(&st, name, ns_c_in, type, answer, sizeof answer);
    int h = st.res_h_errno;
    res_nclose(&st);
    if (len < 0)
        return h == HOST_NOT_FOUND || h == NO_DATA ? 0 : -1;
    ns_msg msg;
    if (ns_initparse(answer, len, &msg) < 0)
        return -1;
    return ns_msg_count(msg, ns_s_an);
}

typedef struct {
    const char *name;
    int type, want;
} dns_want_t;

static bool dns_answers(void *arg)
{
    dns_want_t *w = arg;
    return dns_count(w->name, w->type) == w->want;
}

/* Starts dnsmasq answering from the hosts file (already written) and `srv` --srv-host values;
   returns once it answers `probe` with `want` A records. */
static void dns_start(const char *const *srv, size_t n_srv, const char *probe, int want)
{
    if (access(DNSMASQ, X_OK) != 0)
        fail_msg("%s not found: install the Debian package dnsmasq-base (sh tools/install-deps.sh)",
                 DNSMASQ);
    struct passwd *pw = getpwuid(getuid());
    char user[80], port[32], hosts[160], srvs[8][200];
    snprintf(user, sizeof user, "--user=%s", pw ? pw->pw_name : "root");
    snprintf(hosts, sizeof hosts, "--addn-hosts=%s", dns_hosts);
    for (int attempt = 0; attempt < 5; attempt++) {
        dns_port = tfree_port();
        snprintf(port, sizeof port, "--port=%d", dns_port);
        char *argv[32];
        int a = 0;
        argv[a++] = DNSMASQ;
        argv[a++] = "--keep-in-foreground";
        argv[a++] = "--conf-file=/dev/null";
        argv[a++] = "--no-resolv";
        argv[a++] = "--no-hosts";
        argv[a++] = "--local=/" ZONE "/"; /* authoritative: NXDOMAIN for unknown names */
        argv[a++] = "--no-negcache";
        argv[a++] = "--cache-size=0";
        argv[a++] = "--listen-address=127.0.0.1";
        argv[a++] = "--bind-interfaces";
        argv[a++] = "--pid-file=";
        argv[a++] = "--log-facility=/dev/null";
        argv[a++] = user;
        argv[a++] = port;
        argv[a++] = hosts;
        for (size_t i = 0; i < n_srv && i < 8; i++) {
            snprintf(srvs[i], sizeof srvs[i], "--srv-host=%s", srv[i]);
            argv[a++] = srvs[i];
        }
        argv[a] = NULL;
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            tproc_die_with_parent();
            execv(DNSMASQ, argv);
            _exit(127);
        }
        dns_pid = pid;
        snprintf(resolver, sizeof resolver, "127.0.0.1:%d", dns_port);
        dns_want_t w = {probe, ns_t_a, want};
        if (wait_until(dns_answers, &w, 3000))
            return;
        /* the port was taken (UDP) or dnsmasq failed: try another */
        kill(dns_pid, SIGKILL);
        waitpid(dns_pid, NULL, 0);
        dns_pid = 0;
    }
    fail_msg("dnsmasq did not start");
}

/* The hosts file changed: dnsmasq reads it again on SIGHUP; wait until it answers the new set. */
static void dns_reload(const char *probe, int want)
{
    assert_int_equal(kill(dns_pid, SIGHUP), 0);
    dns_want_t w = {probe, ns_t_a, want};
    assert_true(wait_until(dns_answers, &w, 5000));
}

static void dns_stop(void)
{
    if (dns_pid > 0) {
        kill(dns_pid, SIGTERM);
        waitpid(dns_pid, NULL, 0);
    }
    dns_pid = 0;
}

/* --- nodes ------------------------------------------------------------------------------------- */

static void settings(shoal_cluster_settings_t *s, const char *discovery)
{
    tmember_settings(s);
    s->discovery = discovery;
    s->discovery_resolver = resolver;
    s->discovery_interval_ms = 300;
    s->stable_margin_ms = 1000;
}

/* Node i on 127.0.0.<host>:node_port, finding its seeds through `discovery`. */
static void start_node(int i, int host, const char *discovery)
{
    shoal_cluster_settings_t s;
    settings(&s, discovery);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.%d:%d", host, node_port);
    int rc = tmember_start(ep, &s, &nodes[i].sys, &nodes[i].cl, &nodes[i].data);
    if (rc != 0)
        fail_msg("node %d cannot start at %s: %s", i, ep, shoal_strerror(rc));
}

static void stop_node(int i)
{
    if (!nodes[i].sys)
        return;
    shoal_cluster_destroy(&nodes[i].cl);
    shoal_replicator_destroy(&nodes[i].data);
    shoal_system_destroy(&nodes[i].sys);
    memset(&nodes[i], 0, sizeof nodes[i]);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dns_dir, sizeof dns_dir, "/tmp/shoal-dns-XXXXXX");
    assert_non_null(mkdtemp(dns_dir));
    snprintf(dns_hosts, sizeof dns_hosts, "%s/hosts", dns_dir);
    write_hosts(NULL, 0);
    node_port = tfree_port();
    return 0;
}

#define KV_MAX 5
static pid_t kv_pids[KV_MAX]; /* the kvstore processes of the test_kvstore_ tests */
static char *out;         /* and what the programs it runs printed */

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < KV_MAX; i++)
        if (kv_pids[i] > 0) {
            kill(kv_pids[i], SIGKILL);
            waitpid(kv_pids[i], NULL, 0);
            kv_pids[i] = 0;
        }
    unsetenv("SHOAL_DNS_RESOLVER");
    free(out);
    out = NULL;
    for (int i = 0; i < MAXN; i++)
        stop_node(i);
    dns_stop();
    trm_tree(dns_dir);
    return 0;
}

/* --- conditions -------------------------------------------------------------------------------- */

typedef struct {
    const int *idx; /* the nodes that must agree */
    int n;
    int members; /* each sees this many members, all Up and reachable, converged */
} up_t;

static bool view_ok(const shoal_cluster_view_t *v, int members)
{
    size_t up = 0;
    for (size_t k = 0; k < v->n_members; k++)
        up += v->members[k].status == SHOAL_MEMBER_UP && v->members[k].reachable;
    return (int)up == members && v->n_members == (size_t)members && v->converged;
}

static bool all_up(void *arg)
{
    up_t *u = arg;
    for (int k = 0; k < u->n; k++) {
        shoal_cluster_view_t v;
        if (shoal_cluster_view(nodes[u->idx[k]].cl, &v) != 0)
            return false;
        bool ok = view_ok(&v, u->members);
        shoal_cluster_view_free(&v);
        if (!ok)
            return false;
    }
    return true;
}

static void dump_views(const int *idx, int n)
{
    for (int k = 0; k < n; k++) {
        shoal_cluster_view_t v;
        if (shoal_cluster_view(nodes[idx[k]].cl, &v) != 0)
            continue;
        shoal_buf_t b = {0};
        shoal_cluster_view_json(&v, &b);
        fprintf(stderr, "node %d: %s\n", idx[k], shoal_buf_cstr(&b));
        shoal_buf_free(&b);
        shoal_cluster_view_free(&v);
    }
}

/* Waits until the nodes idx[] all see `members` members Up, converged: one cluster of them. */
static void wait_one_cluster(const int *idx, int n, int members, int timeout_ms)
{
    up_t u = {idx, n, members};
    if (!wait_until(all_up, &u, timeout_ms)) {
        dump_views(idx, n);
        fail_msg("the nodes did not form one cluster of %d, all Up", members);
    }
    /* the same members everywhere: the first node's member list is everyone's */
    shoal_cluster_view_t v0;
    assert_int_equal(shoal_cluster_view(nodes[idx[0]].cl, &v0), 0);
    for (int k = 1; k < n; k++) {
        shoal_cluster_view_t v;
        assert_int_equal(shoal_cluster_view(nodes[idx[k]].cl, &v), 0);
        assert_int_equal(v.n_members, v0.n_members);
        for (size_t m = 0; m < v.n_members; m++)
            assert_ptr_equal(v.members[m].node, v0.members[m].node);
        shoal_cluster_view_free(&v);
    }
    shoal_cluster_view_free(&v0);
}

typedef struct {
    int i;
    const char *says;
} says_t;

/* Node i is in no cluster, and its view's discovery line contains `says`. */
static bool view_says(void *arg)
{
    says_t *s = arg;
    shoal_cluster_view_t v;
    if (shoal_cluster_view(nodes[s->i].cl, &v) != 0)
        return false;
    bool ok = v.n_members == 0 && v.joining && v.discovery && strstr(v.discovery, s->says);
    shoal_cluster_view_free(&v);
    return ok;
}

/* Nodes 0-2 on 127.0.0.2-4, and the name "dns:ZONE:node_port" giving those three: they form one
   cluster. disc receives the name. */
static void cold_start_3(char *disc, size_t cap)
{
    write_hosts((const char *[]){"127.0.0.2 " ZONE, "127.0.0.3 " ZONE, "127.0.0.4 " ZONE}, 3);
    dns_start(NULL, 0, ZONE, 3);
    snprintf(disc, cap, "dns:" ZONE ":%d", node_port);
    int64_t t0 = shoal_now_ms();
    for (int i = 0; i < 3; i++)
        start_node(i, 2 + i, disc);
    wait_one_cluster((const int[]){0, 1, 2}, 3, 3, 20000);
    print_message("cold start of 3 by DNS: one cluster, all Up in %lld ms\n",
                  (long long)(shoal_now_ms() - t0));
}

/* --- tests -------------------------------------------------------------------------------------- */

/* Three nodes whose one name (A records) gives all three: exactly one cluster, all Up. */
static void test_cold_start_3_by_a_records(void **state)
{
    (void)state;
    char disc[80];
    cold_start_3(disc, sizeof disc);
}

/* Five nodes whose SRV name gives all five (targets n2..n6 with their A records): one cluster. */
static void test_cold_start_5_by_srv_records(void **state)
{
    (void)state;
    const char *hosts[5];
    char lines[5][64], srv[5][128];
    const char *srvs[5];
    for (int i = 0; i < 5; i++) {
        snprintf(lines[i], sizeof lines[i], "127.0.0.%d n%d." ZONE, 2 + i, 2 + i);
        hosts[i] = lines[i];
        snprintf(srv[i], sizeof srv[i], "_shoal._tcp." ZONE ",n%d." ZONE ",%d", 2 + i, node_port);
        srvs[i] = srv[i];
    }
    write_hosts(hosts, 5);
    dns_start(srvs, 5, "n6." ZONE, 1);
    dns_want_t w = {"_shoal._tcp." ZONE, ns_t_srv, 5};
    assert_true(wait_until(dns_answers, &w, 3000));
    int64_t t0 = shoal_now_ms();
    for (int i = 0; i < 5; i++)
        start_node(i, 2 + i, "srv:_shoal._tcp." ZONE);
    wait_one_cluster((const int[]){0, 1, 2, 3, 4}, 5, 5, 30000);
    print_message("cold start of 5 by SRV: one cluster, all Up in %lld ms\n",
                  (long long)(shoal_now_ms() - t0));
}

/* A cluster formed by DNS; a fourth address is added to the name and its node joins; then a node
   restarts on a new address (the name follows it, as a pod's IP does) and rejoins. */
static void test_added_later_and_new_address(void **state)
{
    (void)state;
    char disc[80];
    cold_start_3(disc, sizeof disc);

    /* added later: the name gives a fourth address, whose node joins the running cluster */
    write_hosts((const char *[]){"127.0.0.2 " ZONE, "127.0.0.3 " ZONE, "127.0.0.4 " ZONE,
                                 "127.0.0.5 " ZONE},
                4);
    dns_reload(ZONE, 4);
    start_node(3, 5, disc);
    wait_one_cluster((const int[]){0, 1, 2, 3}, 4, 4, 20000);

    /* node 1 (127.0.0.3) dies and comes back on 127.0.0.6: it joins the cluster through the
       others, and the cluster downs its old incarnation (keep-majority) */
    stop_node(1);
    write_hosts((const char *[]){"127.0.0.2 " ZONE, "127.0.0.4 " ZONE, "127.0.0.5 " ZONE,
                                 "127.0.0.6 " ZONE},
                4);
    dns_reload(ZONE, 4);
    start_node(1, 6, disc);
    wait_one_cluster((const int[]){0, 1, 2, 3}, 4, 4, 40000);
}

/* A name that gives nothing leaves the node waiting, and its view (and JSON) says so; a name
   that gives this node alone too; a nameserver that does not answer too. None forms a cluster. */
static void test_name_points_at_nothing(void **state)
{
    (void)state;
    write_hosts((const char *[]){"127.0.0.2 alone." ZONE}, 1);
    dns_start(NULL, 0, "alone." ZONE, 1);
    char disc[80];
    snprintf(disc, sizeof disc, "dns:nothing." ZONE ":%d", node_port);
    start_node(0, 2, disc);
    says_t s = {0, "waiting for contact points: dns:nothing." ZONE};
    assert_true(wait_until(view_says, &s, 5000));
    s.says = "nothing." ZONE ": no such name (NXDOMAIN)";
    assert_true(wait_until(view_says, &s, 5000));
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(nodes[0].cl, &v), 0);
    shoal_buf_t b = {0};
    shoal_cluster_view_json(&v, &b);
    assert_non_null(strstr(shoal_buf_cstr(&b), "\"discovery\":\"waiting for contact points"));
    print_message("%s\n", shoal_buf_cstr(&b));
    shoal_buf_free(&b);
    shoal_cluster_view_free(&v);
    stop_node(0);

    /* the node alone */
    snprintf(disc, sizeof disc, "dns:alone." ZONE ":%d", node_port);
    start_node(0, 2, disc);
    s.says = "(this node alone)";
    assert_true(wait_until(view_says, &s, 5000));
    stop_node(0);

    /* a nameserver that does not answer: the node says why it has no contact points */
    dns_stop();
    start_node(0, 2, disc);
    s.says = "no answer from the nameserver";
    assert_true(wait_until(view_says, &s, 15000));
}

/* Issue 36 item 7: a name with more than 256 records. Every node must keep the same 256 (the
   lowest addresses), whatever order the nameserver answers in, or nodes never agree on the
   lowest address: sort, then cut. 300 records written highest first. */
static void test_more_than_256_records_sort_then_cut(void **state)
{
    (void)state;
    enum { N = 300 };
    static char lines[N + 1][64];
    const char *ptrs[N + 1];
    for (int i = 0; i < N; i++) {
        int k = N - 1 - i; /* highest first */
        snprintf(lines[i], sizeof lines[i], "127.1.%d.%d many." ZONE, k / 200, k % 200 + 1);
        ptrs[i] = lines[i];
    }
    snprintf(lines[N], sizeof lines[N], "127.0.0.2 alone." ZONE);
    ptrs[N] = lines[N];
    write_hosts(ptrs, N + 1);
    dns_start(NULL, 0, "alone." ZONE, 1);
    char spec[80];
    snprintf(spec, sizeof spec, "dns:many." ZONE ":%d", node_port);
    int err = 0;
    disc_t *d = disc_new(spec, resolver, 60000, &err);
    assert_non_null(d);
    uint64_t gen = 0;
    char **eps = NULL, why[200];
    size_t n = 0;
    int64_t deadline = shoal_now_ms() + 10000;
    while (!disc_take(d, &gen, &eps, &n, why, sizeof why) && shoal_now_ms() < deadline)
        usleep(20000);
    char lowest[64], last[64];
    snprintf(lowest, sizeof lowest, "tcp://127.1.0.1:%d", node_port);
    snprintf(last, sizeof last, "tcp://127.1.%d.%d:%d", 255 / 200, 255 % 200 + 1,
             node_port); /* the 256th lowest: k = 255 */
    print_message("%zu contact points, first %s, last %s\n", n, n ? eps[0] : "-",
                  n ? eps[n - 1] : "-");
    assert_int_equal(n, 256);
    assert_string_equal(eps[0], lowest);
    assert_string_equal(eps[255], last);
    disc_free_list(eps, n);
    disc_destroy(&d);
}

/* Malformed names and resolvers are refused with a reason, never resolved. */
static void test_bad_names_refused(void **state)
{
    (void)state;
    static const char *bad[] = {"",         "dns:",           "dns:" ZONE,  "dns:" ZONE ":0",
                                "dns:" ZONE ":70000", "dns:a b:1", "dns:" ZONE ":x",
                                "srv:",     "srv:a..b",       "http://x",   "dns::1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[300] = "";
        assert_int_equal(shoal_discovery_check(bad[i], NULL, err, sizeof err), SHOAL_EINVAL);
        assert_true(err[0]);
    }
    char err[300];
    assert_int_equal(shoal_discovery_check("dns:" ZONE ":7000", NULL, err, sizeof err), 0);
    assert_int_equal(shoal_discovery_check("srv:_shoal._tcp." ZONE, NULL, err, sizeof err), 0);
    assert_int_equal(shoal_discovery_check("dns:" ZONE ":7000", "localhost:53", err, sizeof err),
                     SHOAL_EINVAL);
    assert_int_equal(shoal_discovery_check("dns:" ZONE ":7000", "127.0.0.1", err, sizeof err),
                     SHOAL_EINVAL);
    /* membership refuses them too, and seed nodes together with discovery */
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int rc = 0;
    nodes[0].sys = shoal_system_new(&ss, &rc);
    assert_non_null(nodes[0].sys);
    shoal_cluster_settings_t s;
    tmember_settings(&s);
    s.discovery = "dns:" ZONE;
    assert_null(shoal_cluster_new(nodes[0].sys, &s, &rc));
    s.discovery = "dns:" ZONE ":7000";
    const char *seeds[] = {"tcp://127.0.0.1:1"};
    s.seed_nodes = seeds;
    s.n_seed_nodes = 1;
    assert_null(shoal_cluster_new(nodes[0].sys, &s, &rc));
}

/* The configuration file's keys (Akka Management's names) fill the settings; bad values name
   their key. */
static void test_config_keys(void **state)
{
    (void)state;
    static const char ok[] = "shoal\n"
                             "    management\n"
                             "        cluster\n"
                             "            bootstrap\n"
                             "                contact-point-discovery\n"
                             "                    discover = \"srv:_shoal._tcp." ZONE "\"\n"
                             "                    required-contact-point-nr = 3\n"
                             "                    stable-margin = 2 s\n"
                             "                    interval = 250 ms\n"
                             "                    resolver = \"127.0.0.1:5353\"\n";
    char err[512] = "";
    shoal_config_t *cfg = parse_words(ok, err, sizeof err);
    if (!cfg)
        fail_msg("%s", err);
    shoal_cluster_settings_t s;
    shoal_cluster_settings_default(&s);
    assert_int_equal(s.required_contact_point_nr, 2);
    assert_int_equal(s.stable_margin_ms, 5000);
    if (shoal_config_cluster(cfg, &s, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_string_equal(s.discovery, "srv:_shoal._tcp." ZONE);
    assert_int_equal(s.required_contact_point_nr, 3);
    assert_int_equal(s.stable_margin_ms, 2000);
    assert_int_equal(s.discovery_interval_ms, 250);
    assert_string_equal(s.discovery_resolver, "127.0.0.1:5353");
    shoal_config_destroy(&cfg);

    static const char bad[] = "shoal\n"
                              "    management\n"
                              "        cluster\n"
                              "            bootstrap\n"
                              "                contact-point-discovery\n"
                              "                    discover = \"dns:" ZONE "\"\n";
    cfg = parse_words(bad, err, sizeof err);
    assert_non_null(cfg);
    assert_int_equal(shoal_config_cluster(cfg, &s, err, sizeof err), SHOAL_EINVAL);
    assert_non_null(strstr(err, "contact-point-discovery/discover"));
    shoal_config_destroy(&cfg);
}

/* --- the kvstore example, by DNS --------------------------------------------------------------- */

#define OUT_CAP (1u << 20)

typedef struct {
    const char *tool;
    int host, members;
} kv_members_t;

/* `shoal-cluster members` of the kvstore on 127.0.0.<host> shows `members` members, all Up,
   converged. */
static bool kv_cluster_up(void *arg)
{
    kv_members_t *k = arg;
    struct timespec ts = {0, 200 * 1000000}; /* a tool run per poll: not every 5 ms */
    nanosleep(&ts, NULL);
    if (ttool_runf(k->tool, out, OUT_CAP, "--node tcp://127.0.0.%d:%d members", k->host,
                   node_port) != 0)
        return false;
    char want[32];
    snprintf(want, sizeof want, "members %d\n", k->members);
    int up = 0;
    for (const char *p = out; (p = strstr(p, "  Up ")); p++)
        up++;
    return strstr(out, "converged yes") && strstr(out, want) && up == k->members;
}

/* A kvstore on 127.0.0.<host>:node_port finding its seeds through disc; with its management
   endpoint on 127.0.0.1:http when http is not 0. */
static pid_t kv_start(const char *kv, int host, const char *disc, int http)
{
    char bind[64], data[160], log[160], hp[16];
    snprintf(bind, sizeof bind, "tcp://127.0.0.%d:%d", host, node_port);
    snprintf(data, sizeof data, "%s/kv%d", dns_dir, host);
    snprintf(log, sizeof log, "%s/kv%d.log", dns_dir, host);
    snprintf(hp, sizeof hp, "%d", http);
    pid_t pid = ttool_spawn(kv,
                            (char *const[]){(char *)kv, "node", "--bind", bind, "--discover",
                                            (char *)disc, "--data", data, "--fast",
                                            http ? "--http" : NULL, hp, NULL},
                            log);
    assert_true(pid > 0);
    return pid;
}

/* The kvstore tests' start: the programs found (kv and tool, PATH_MAX each), the name "kv.ZONE"
   giving hosts[0..n) (127.0.0.1 first: the kvstore commands talk to the node at
   127.0.0.1:PORT), SHOAL_DNS_RESOLVER set for the processes, and one kvstore per address, which
   must form one cluster. disc receives the discovery name. */
static void kv_cluster_start(const char *const *hosts, int n, char *kv, char *tool, char *disc,
                             size_t cap)
{
    if (!ttool_find("kvstore", kv, 4096) || !ttool_find("shoal-cluster", tool, 4096))
        fail_msg("build/bin/kvstore or shoal-cluster is missing: scons check builds them");
    out = calloc(1, OUT_CAP);
    assert_non_null(out);
    write_hosts(hosts, (size_t)n);
    dns_start(NULL, 0, "kv." ZONE, n);
    assert_int_equal(setenv("SHOAL_DNS_RESOLVER", resolver, 1), 0);
    snprintf(disc, cap, "dns:kv." ZONE ":%d", node_port);
    for (int i = 0; i < n; i++)
        kv_pids[i] = kv_start(kv, 1 + i, disc, 0);
    kv_members_t k = {tool, 1, n};
    if (!wait_until(kv_cluster_up, &k, 30000))
        fail_msg("the %d kvstore nodes did not form one cluster by DNS:\n%s", n, out);
}

static void test_kvstore_forms_by_dns(void **state)
{
    (void)state;
    char kv[4096], tool[4096], disc[80];
    kv_cluster_start((const char *[]){"127.0.0.1 kv." ZONE, "127.0.0.2 kv." ZONE,
                                      "127.0.0.3 kv." ZONE},
                     3, kv, tool, disc, sizeof disc);
    pid_t *pids = kv_pids;
    kv_members_t k = {tool, 3, 3};
    assert_true(wait_until(kv_cluster_up, &k, 10000));
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "put %d k v majority", node_port), 0);

    /* the lowest node dies and restarts on its data directory: it finds the others in a cluster
       and joins it (the README's recipe that broke when its first seed restarted) */
    kill(pids[0], SIGKILL);
    waitpid(pids[0], NULL, 0);
    pids[0] = kv_start(kv, 1, disc, 0);
    k.host = 1;
    if (!wait_until(kv_cluster_up, &k, 40000))
        fail_msg("the restarted kvstore did not rejoin:\n%s", out);
    k.host = 2;
    assert_true(wait_until(kv_cluster_up, &k, 20000));
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "get %d k majority", node_port), 0);
    assert_non_null(strstr(out, "k = v"));

    /* a node whose name gives nothing waits, and the operator tool says so */
    char none[80];
    snprintf(none, sizeof none, "dns:none." ZONE ":%d", node_port);
    int http = tfree_port();
    pids[3] = kv_start(kv, 4, none, http);
    int rc = -1;
    for (int i = 0; i < 100; i++) {
        rc = ttool_runf(tool, out, OUT_CAP, "--node tcp://127.0.0.4:%d members", node_port);
        if (rc == 0 && strstr(out, "waiting for contact points"))
            break;
        usleep(100000);
    }
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, " is in no cluster since "));
    assert_non_null(strstr(out, "waiting for contact points: dns:none." ZONE));
    print_message("%s", out);
    /* and its readiness probe too (the management endpoint, docs/operations.md) */
    thttp_resp_t r = {0};
    for (int i = 0; i < 50 && !thttp_get((uint16_t)http, "/health/ready", &r); i++)
        usleep(100000); /* the endpoint may start a moment after the node */
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "in no cluster (waiting for contact points: dns:none." ZONE));
    thttp_free(&r);

    /* a malformed --discover is refused before anything starts */
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "node --bind tcp://127.0.0.5:%d --data %s/x "
                                "--discover dns:kv." ZONE, node_port, dns_dir), 2);
    assert_non_null(strstr(out, "--discover: discovery 'dns:kv." ZONE "': dns:NAME:PORT needs a port"));
}

/* Kept membership holds with discovery: five kvstores form by DNS; two die, and come back while
   the name gives only the two of them (the other three cut off from their view, still a cluster
   of their own). They are in no cluster and answer so, the lower has the lowest address, the set
   is stable: without kept membership it would form a second cluster. It waits instead, saying
   that 2 of the 5 kept members answered; once the name gives a member of the running cluster
   again, both join it. */
static void test_kvstore_kept_membership_waits(void **state)
{
    (void)state;
    char kv[4096], tool[4096], disc[80];
    const char *five[] = {"127.0.0.1 kv." ZONE, "127.0.0.2 kv." ZONE, "127.0.0.3 kv." ZONE,
                          "127.0.0.4 kv." ZONE, "127.0.0.5 kv." ZONE};
    kv_cluster_start(five, 5, kv, tool, disc, sizeof disc);
    kv_members_t k = {tool, 1, 5};

    write_hosts(five, 2);
    dns_reload("kv." ZONE, 2);
    for (int i = 0; i < 2; i++) {
        kill(kv_pids[i], SIGKILL);
        waitpid(kv_pids[i], NULL, 0);
        kv_pids[i] = kv_start(kv, 1 + i, disc, 0);
    }
    bool waits = false;
    for (int64_t end = shoal_now_ms() + 10000 * tscale(); !waits && shoal_now_ms() < end;) {
        usleep(200000);
        waits = ttool_runf(tool, out, OUT_CAP, "--node tcp://127.0.0.1:%d members", node_port) ==
                    0 &&
                strstr(out, "waits to form a cluster: 2 of the 5 kept members answered");
    }
    if (!waits)
        fail_msg("the restarted lowest node does not wait for its kept membership:\n%s", out);
    print_message("%s", out);

    write_hosts(five, 3);
    dns_reload("kv." ZONE, 3);
    k.host = 1;
    if (!wait_until(kv_cluster_up, &k, 40000))
        fail_msg("the restarted nodes did not join the running cluster:\n%s", out);
    k.host = 4;
    assert_true(wait_until(kv_cluster_up, &k, 20000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_names_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_name_points_at_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_more_than_256_records_sort_then_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cold_start_3_by_a_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cold_start_5_by_srv_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_added_later_and_new_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kvstore_forms_by_dns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kvstore_kept_membership_waits, setup, teardown),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
