/*  dashboard.c — the page the management endpoint serves at / (see ddata.h, METRICS AND THE
    MANAGEMENT ENDPOINT; docs/operations.md) and the routes it reads beside the other layers':

    GET /                  the page: membership/dashboard.html, compiled in (dashboard_page.h,
                           written from it by tools/embed-html.py), no build step at run time and
                           nothing fetched from elsewhere. Hash routes in the one page: #/ the
                           cluster, #/member/<host:port>, #/type/<entity type>.
    GET /cluster/metrics   every member's figures, gathered by this node over the cluster, so the
                           page talks to one origin (below).
    GET /cluster/members/<member>  one member's record (admin.c, as Akka Management's route).

    GATHERING. /cluster/metrics asks each member that is not Down and that no one reports
    unreachable for the text its GET /metrics serves, over the client protocol (the request
    `ddata-dump --metrics` sends: shoal_client_metrics to the member's node endpoint, one thread
    per member so a slow one costs the request its timeout once, not once per member), and
    answers the samples of the families asked for (?family=a,b; default: what the page charts),
    every histogram family among them. A member without a management endpoint answers its
    built-in families only (node, replicators, process); one that does not answer within
    ?timeout_ms= (default 1000) is listed with "answered":false and why. Clients take CURVE keys
    from SHOAL_CURVE_CERT and SHOAL_CURVE_ALLOW (ddata.h), so on a CURVE cluster set those in the
    node's environment (its own certificate and allow-list will do: every member admits it).
    The route runs on the connection's thread: it waits on the members, never on the node loop.
*/
#include "cluster_internal.h"
#include "dashboard_page.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GATHER_TIMEOUT_MS     1000
#define GATHER_TIMEOUT_MAX_MS 5000
#define FAMILIES_MAX          64

/* What the page charts when ?family= does not say: throughput (messages, sharded tells and asks,
   replicator reads and writes), CPU and memory, shards and entities hosted, the version. */
static const char *const default_families[] = {
    "shoal_node_messages_received_total",
    "shoal_node_messages_sent_total",
    "shoal_node_bytes_received_total",
    "shoal_node_bytes_sent_total",
    "shoal_replicator_updates_total",
    "shoal_replicator_gets_total",
    "shoal_sharding_tells_total",
    "shoal_sharding_asks_total",
    "shoal_sharding_shards",
    "shoal_sharding_entities",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_open_fds",
    "process_start_time_seconds",
    "shoal_build_info",
};

typedef struct {
    const char *names[FAMILIES_MAX];
    size_t len[FAMILIES_MAX];
    size_t n;
} families_t;

/* One member asked. */
typedef struct {
    char node[300];
    char address[300];
    const char *status;
    bool reachable;
    bool ask; /* false: Down or unreachable, not asked */
    uint32_t timeout_ms;
    int rc;
    int64_t took_ms;
    char why[200];
    shoal_buf_t text;
    pthread_t thread;
    bool started;
} ask_t;

static int64_t gather_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *ask_member(void *arg)
{
    ask_t *a = arg;
    char endpoint[320];
    snprintf(endpoint, sizeof endpoint, "tcp://%s", a->address);
    int64_t t0 = shoal_now_ms();
    int err = 0;
    shoal_client_t *cl = shoal_client_new(endpoint, a->timeout_ms, &err);
    if (!cl) {
        a->rc = err ? err : SHOAL_EIO;
        const char *d = shoal_last_error_detail();
        snprintf(a->why, sizeof a->why, "%s%s%s", shoal_strerror(a->rc), d && *d ? ": " : "",
                 d ? d : "");
    } else {
        a->rc = shoal_client_metrics(cl, &a->text);
        if (a->rc < 0)
            snprintf(a->why, sizeof a->why, "%s", shoal_strerror(a->rc));
        shoal_client_destroy(&cl);
    }
    a->took_ms = shoal_now_ms() - t0;
    return NULL;
}

/* The family a sample line belongs to, when asked for: its name, or a histogram's base name
   (name_bucket, _sum, _count) when that base is a histogram of the text. */
static bool wanted(const families_t *f, const char *line, size_t name_len, const char *histos)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->len[i] == name_len && memcmp(f->names[i], line, name_len) == 0)
            return true;
    static const char *const parts[] = {"_bucket", "_sum", "_count"};
    for (size_t p = 0; p < 3; p++) {
        size_t pl = strlen(parts[p]);
        if (name_len <= pl || memcmp(line + name_len - pl, parts[p], pl) != 0)
            continue;
        /* histos holds " base1 base2 ": every histogram family of the text */
        size_t bl = name_len - pl;
        for (const char *h = strstr(histos, " "); h && h[1]; h = strchr(h + 1, ' '))
            if (strncmp(h + 1, line, bl) == 0 && h[1 + bl] == ' ')
                return true;
    }
    return false;
}

/* The samples of the families asked for, as a JSON object "series": value, then the histogram
   families of the text as "histograms": [...]. */
static void samples_json(const families_t *f, const char *text, shoal_buf_t *out)
{
    shoal_buf_t histos = {0};
    shoal_buf_append(&histos, " ", 1);
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        char name[200];
        if (n > 7 && strncmp(l, "# TYPE ", 7) == 0 && n < sizeof name + 7 &&
            sscanf(l + 7, "%199s histogram", name) == 1 && memmem(l, n, " histogram", 10))
            shoal_buf_printf(&histos, "%s ", name);
        l += n + (e != NULL);
    }
    shoal_buf_append(out, "{", 1);
    bool first = true;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        const char *sp = memrchr(l, ' ', n);
        size_t name_len = strcspn(l, "{ ");
        if (l[0] != '#' && sp && name_len <= n && wanted(f, l, name_len, shoal_buf_cstr(&histos))) {
            char num[64];
            size_t vl = n - (size_t)(sp + 1 - l);
            if (vl && vl < sizeof num) {
                memcpy(num, sp + 1, vl);
                num[vl] = 0;
                char *end;
                double d = strtod(num, &end);
                char *series = strndup(l, (size_t)(sp - l));
                if (!series)
                    abort();
                shoal_buf_append(out, first ? "" : ",", first ? 0 : 1);
                shoal_buf_json_string(out, series);
                /* JSON has no infinities: +Inf (process_max_fds, a bucket bound is in the key)
                   and NaN go as null */
                if (*end || d != d || d > 1e300 || d < -1e300)
                    shoal_buf_printf(out, ":null");
                else
                    shoal_buf_printf(out, ":%.17g", d);
                free(series);
                first = false;
            }
        }
        l += n + (e != NULL);
    }
    shoal_buf_append(out, "},\"histograms\":[", 16);
    first = true;
    for (const char *h = shoal_buf_cstr(&histos) + 1; *h;) {
        size_t bl = strcspn(h, " ");
        char *b = strndup(h, bl);
        if (!b)
            abort();
        shoal_buf_append(out, first ? "" : ",", first ? 0 : 1);
        shoal_buf_json_string(out, b);
        first = false;
        free(b);
        h += bl + (h[bl] == ' ');
    }
    shoal_buf_append(out, "]", 1);
    shoal_buf_free(&histos);
}

static void route_metrics(shoal_system_t *sys, const shoal_http_request_t *req,
                          shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    families_t f = {.n = 0};
    const char *fam = shoal_http_param(req, "family");
    char *fam_copy = NULL;
    if (fam && *fam) {
        fam_copy = strdup(fam);
        if (!fam_copy)
            abort();
        for (char *save = NULL, *t = strtok_r(fam_copy, ",", &save); t;
             t = strtok_r(NULL, ",", &save)) {
            if (f.n == FAMILIES_MAX) {
                shoal_http_error(rep, 400, "at most %d families in ?family=", FAMILIES_MAX);
                free(fam_copy);
                return;
            }
            f.names[f.n] = t;
            f.len[f.n++] = strlen(t);
        }
    } else
        for (size_t i = 0; i < sizeof default_families / sizeof *default_families; i++) {
            f.names[f.n] = default_families[i];
            f.len[f.n++] = strlen(default_families[i]);
        }
    uint32_t timeout = GATHER_TIMEOUT_MS;
    const char *t = shoal_http_param(req, "timeout_ms");
    if (t) {
        char *end = NULL;
        unsigned long v = strtoul(t, &end, 10);
        if (!*t || *end || v < 1 || v > GATHER_TIMEOUT_MAX_MS) {
            shoal_http_error(rep, 400, "timeout_ms takes 1..%d, not '%.40s'", GATHER_TIMEOUT_MAX_MS,
                             t);
            free(fam_copy);
            return;
        }
        timeout = (uint32_t)v;
    }
    shoal_cluster_view_t v;
    int rc = shoal_cluster_view(c, &v);
    if (rc < 0) {
        shoal_http_error(rep, 503, "no view of the cluster: %s", shoal_strerror(rc));
        free(fam_copy);
        return;
    }
    ask_t *asks = calloc(v.n_members + 1, sizeof *asks);
    if (!asks)
        abort();
    int64_t at = gather_wall_ms();
    for (size_t i = 0; i < v.n_members; i++) {
        const shoal_member_t *m = &v.members[i];
        ask_t *a = &asks[i];
        snprintf(a->node, sizeof a->node, "%s", shoal_node_id(m->node));
        const char *host = shoal_node_host(m->node);
        snprintf(a->address, sizeof a->address, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
                 (unsigned)shoal_node_port(m->node));
        a->status = shoal_member_status_name(m->status);
        a->reachable = m->reachable;
        a->timeout_ms = timeout;
        a->ask = m->reachable && m->status != SHOAL_MEMBER_DOWN;
        if (!a->ask)
            snprintf(a->why, sizeof a->why, "%s", m->reachable ? "down" : "unreachable");
        else if (pthread_create(&a->thread, NULL, ask_member, a) == 0)
            a->started = true;
        else
            ask_member(a); /* no thread to spare: ask it here */
    }
    for (size_t i = 0; i < v.n_members; i++)
        if (asks[i].started)
            pthread_join(asks[i].thread, NULL);
    shoal_buf_printf(&rep->body, "{\"self\":");
    shoal_buf_json_string(&rep->body, v.self ? shoal_node_id(v.self) : "");
    shoal_buf_printf(&rep->body, ",\"at_ms\":%lld,\"timeout_ms\":%u,\"members\":[", (long long)at,
                     (unsigned)timeout);
    for (size_t i = 0; i < v.n_members; i++) {
        ask_t *a = &asks[i];
        shoal_buf_printf(&rep->body, "%s{\"node\":", i ? "," : "");
        shoal_buf_json_string(&rep->body, a->node);
        shoal_buf_printf(&rep->body, ",\"address\":");
        shoal_buf_json_string(&rep->body, a->address);
        shoal_buf_printf(&rep->body, ",\"status\":");
        shoal_buf_json_string(&rep->body, a->status);
        bool answered = a->ask && a->rc >= 0;
        shoal_buf_printf(&rep->body, ",\"reachable\":%s,\"answered\":%s",
                         a->reachable ? "true" : "false", answered ? "true" : "false");
        if (a->ask)
            shoal_buf_printf(&rep->body, ",\"took_ms\":%lld", (long long)a->took_ms);
        if (answered) {
            shoal_buf_printf(&rep->body, ",\"samples\":");
            samples_json(&f, shoal_buf_cstr(&a->text), &rep->body);
        } else {
            shoal_buf_printf(&rep->body, ",\"error\":");
            shoal_buf_json_string(&rep->body, a->why);
        }
        shoal_buf_append(&rep->body, "}", 1);
        shoal_buf_free(&a->text);
    }
    shoal_buf_append(&rep->body, "]}\n", 3);
    free(asks);
    free(fam_copy);
    shoal_cluster_view_free(&v);
}

static void route_page(shoal_system_t *sys, const shoal_http_request_t *req,
                       shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    (void)req;
    (void)arg;
    rep->content_type = "text/html; charset=utf-8";
    shoal_buf_append(&rep->body, dashboard_page, sizeof dashboard_page - 1);
}

void cluster_http_dashboard(shoal_metrics_t *m, shoal_cluster_t *c)
{
    /* static content: no need to visit the node thread */
    shoal_http_route(m, "/", SHOAL_HTTP_GET | SHOAL_HTTP_ANY_THREAD, route_page, c);
    /* waits on the members (with its own timeout), never on the node loop */
    shoal_http_route(m, "/cluster/metrics", SHOAL_HTTP_GET | SHOAL_HTTP_ANY_THREAD, route_metrics,
                     c);
    /* the page's member view reads it; a route of its own for operators (Akka Management's) */
    shoal_http_route(m, "/cluster/members/", SHOAL_HTTP_GET, cluster_member_route, c);
}
