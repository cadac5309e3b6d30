/*  admin.c — views of the cluster for programs and operators: snapshots (shoal_cluster_view),
    their JSON, and the admin requests that the shoal-cluster tool sends over a client connection
    (view, join, leave, down).
*/
#include "cluster_internal.h"
#include "cluster.pb-c.h"

#include <time.h>

/* What a view owns: one block per string, freed together. */
typedef struct {
    char **strs;
    size_t n;
    const char ***role_arrays;
    size_t n_role_arrays;
    char **roles_of_leaders; /* parallel to role_leaders */
    const shoal_node_t **role_leaders;
    size_t n_role_leaders;
} view_priv_t;

static char *keep(view_priv_t *p, const char *s)
{
    char *d = strdup(s ? s : "");
    p->strs = realloc(p->strs, (p->n + 1) * sizeof *p->strs);
    if (!d || !p->strs)
        abort();
    p->strs[p->n++] = d;
    return d;
}

int cluster_view_fill(shoal_cluster_t *c, shoal_cluster_view_t *out)
{
    memset(out, 0, sizeof *out);
    const cstate_t *st = c->state;
    view_priv_t *p = calloc(1, sizeof *p);
    out->members = calloc(st->n_members + 1, sizeof *out->members);
    if (!p || !out->members)
        abort();
    out->priv = p;
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        if (m->status == SHOAL_MEMBER_REMOVED)
            continue;
        shoal_member_t *v = &out->members[out->n_members++];
        cluster_member_view(st, m, v);
        const char **roles = calloc(m->n_roles + 1, sizeof *roles);
        p->role_arrays = realloc(p->role_arrays, (p->n_role_arrays + 1) * sizeof *p->role_arrays);
        if (!roles || !p->role_arrays)
            abort();
        p->role_arrays[p->n_role_arrays++] = roles;
        for (size_t r = 0; r < m->n_roles; r++)
            roles[r] = keep(p, m->roles[r]);
        v->roles = roles;
        v->app_version = keep(p, v->app_version);
        v->heartbeat_endpoint = keep(p, v->heartbeat_endpoint);
        v->durable_id = keep(p, v->durable_id);
        /* role leaders, computed now (the state is not kept by the view) */
        for (size_t r = 0; r < m->n_roles; r++) {
            bool have = false;
            for (size_t k = 0; k < p->n_role_leaders && !have; k++)
                have = strcmp(p->roles_of_leaders[k], m->roles[r]) == 0;
            if (have)
                continue;
            p->roles_of_leaders =
                realloc(p->roles_of_leaders, (p->n_role_leaders + 1) * sizeof(char *));
            p->role_leaders =
                realloc(p->role_leaders, (p->n_role_leaders + 1) * sizeof *p->role_leaders);
            if (!p->roles_of_leaders || !p->role_leaders)
                abort();
            p->roles_of_leaders[p->n_role_leaders] = keep(p, m->roles[r]);
            p->role_leaders[p->n_role_leaders++] = cstate_leader(st, m->roles[r], c->self);
        }
    }
    out->self = c->self;
    out->leader = cstate_leader(st, NULL, c->self);
    out->converged = cstate_converged(st);
    out->may_act = cluster_may_act(c);
    out->state_version = cstate_version_sum(st);
    if (zhash_size(c->voters)) {
        const char **kept = calloc(zhash_size(c->voters) + 1, sizeof *kept);
        p->role_arrays = realloc(p->role_arrays, (p->n_role_arrays + 1) * sizeof *p->role_arrays);
        if (!kept || !p->role_arrays)
            abort();
        p->role_arrays[p->n_role_arrays++] = kept; /* freed with the views' arrays */
        for (void *x = zhash_first(c->voters); x; x = zhash_next(c->voters))
            kept[out->n_kept++] = keep(p, zhash_cursor(c->voters));
        out->kept = kept;
    }
    if (!cstate_member(st, c->self) || cluster_self_status(c) == SHOAL_MEMBER_REMOVED) {
        out->outside_since_ms = c->outside_since_wall;
        out->joining = c->joining;
        if (c->discovering)
            out->discovery = keep(p, c->disc_status);
    }
    return 0;
}

static int do_view(shoal_system_t *sys, void *arg)
{
    (void)sys;
    void **a = arg;
    return cluster_view_fill(a[0], a[1]);
}

int shoal_cluster_view(shoal_cluster_t *c, shoal_cluster_view_t *out)
{
    if (!c || !out)
        return SHOAL_EINVAL;
    void *a[2] = {c, out};
    return cluster_call(c, do_view, a);
}

void shoal_cluster_view_free(shoal_cluster_view_t *v)
{
    if (!v)
        return;
    view_priv_t *p = v->priv;
    if (p) {
        for (size_t i = 0; i < p->n; i++)
            free(p->strs[i]);
        free(p->strs);
        for (size_t i = 0; i < p->n_role_arrays; i++)
            free(p->role_arrays[i]);
        free(p->role_arrays);
        free(p->roles_of_leaders);
        free(p->role_leaders);
        free(p);
    }
    free(v->members);
    memset(v, 0, sizeof *v);
}

const shoal_member_t *shoal_cluster_view_member(const shoal_cluster_view_t *v,
                                                const shoal_node_t *node)
{
    if (!v || !node)
        return NULL;
    for (size_t i = 0; i < v->n_members; i++)
        if (v->members[i].node == node)
            return &v->members[i];
    return NULL;
}

const shoal_node_t *shoal_cluster_view_role_leader(const shoal_cluster_view_t *v, const char *role)
{
    if (!v)
        return NULL;
    if (!role || !*role)
        return v->leader;
    const view_priv_t *p = v->priv;
    for (size_t i = 0; p && i < p->n_role_leaders; i++)
        if (strcmp(p->roles_of_leaders[i], role) == 0)
            return p->role_leaders[i];
    return NULL;
}

/* One member's record as JSON (with c, node thread: its protocol version too). */
static void member_json(const shoal_cluster_view_t *v, shoal_cluster_t *c, const shoal_member_t *m,
                        shoal_buf_t *out)
{
    shoal_buf_append(out, "{\"node\":", 8);
    shoal_buf_json_string(out, shoal_node_id(m->node));
    char addr[300];
    snprintf(addr, sizeof addr, "%s:%u", shoal_node_host(m->node),
             (unsigned)shoal_node_port(m->node));
    shoal_buf_append(out, ",\"address\":", 11);
    shoal_buf_json_string(out, addr);
    shoal_buf_append(out, ",\"status\":", 10);
    shoal_buf_json_string(out, shoal_member_status_name(m->status));
    shoal_buf_printf(out, ",\"up_number\":%llu,\"reachable\":%s,\"leader\":%s,\"roles\":[",
                     (unsigned long long)m->up_number, m->reachable ? "true" : "false",
                     m->node == v->leader ? "true" : "false");
    for (size_t r = 0; r < m->n_roles; r++) {
        if (r)
            shoal_buf_append(out, ",", 1);
        shoal_buf_json_string(out, m->roles[r]);
    }
    shoal_buf_append(out, "],\"app_version\":", 16);
    shoal_buf_json_string(out, m->app_version);
    shoal_buf_append(out, ",\"heartbeat\":", 13);
    shoal_buf_json_string(out, m->heartbeat_endpoint);
    if (c)
        shoal_buf_printf(out, ",\"protocol\":%u",
                         (unsigned)cmember_protocol(cstate_member(c->state, m->node)));
    if (m->durable_id && *m->durable_id) {
        shoal_buf_append(out, ",\"id\":", 6);
        shoal_buf_json_string(out, m->durable_id);
    }
    shoal_buf_append(out, "}", 1);
}

/* With c (node thread), the protocol versions too: the cluster's and each member's. */
static void view_json(const shoal_cluster_view_t *v, shoal_cluster_t *c, shoal_buf_t *out)
{
    shoal_buf_append(out, "{\"self\":", 8);
    shoal_buf_json_string(out, v->self ? shoal_node_id(v->self) : "");
    shoal_buf_append(out, ",\"leader\":", 10);
    if (v->leader)
        shoal_buf_json_string(out, shoal_node_id(v->leader));
    else
        shoal_buf_append(out, "null", 4);
    shoal_buf_printf(out, ",\"converged\":%s,\"may_act\":%s,\"version\":%llu,",
                     v->converged ? "true" : "false", v->may_act ? "true" : "false",
                     (unsigned long long)v->state_version);
    if (c)
        shoal_buf_printf(out, "\"protocol_version\":%u,", (unsigned)c->protocol);
    if (v->outside_since_ms) {
        time_t t = (time_t)(v->outside_since_ms / 1000);
        struct tm tm;
        char when[32];
        gmtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        shoal_buf_printf(out, "\"in_cluster\":false,\"joining\":%s,\"outside_since\":\"%s\",",
                         v->joining ? "true" : "false", when);
        if (v->discovery) {
            shoal_buf_append(out, "\"discovery\":", 12);
            shoal_buf_json_string(out, v->discovery);
            shoal_buf_append(out, ",", 1);
        }
    }
    if (v->n_kept) {
        shoal_buf_append(out, "\"kept\":[", 8);
        for (size_t i = 0; i < v->n_kept; i++) {
            if (i)
                shoal_buf_append(out, ",", 1);
            shoal_buf_json_string(out, v->kept[i]);
        }
        shoal_buf_append(out, "],", 2);
    }
    shoal_buf_append(out, "\"members\":[", 11);
    for (size_t i = 0; i < v->n_members; i++) {
        if (i)
            shoal_buf_append(out, ",", 1);
        member_json(v, c, &v->members[i], out);
    }
    shoal_buf_append(out, "]}", 2);
}

void shoal_cluster_view_json(const shoal_cluster_view_t *v, shoal_buf_t *out)
{
    if (v && out)
        view_json(v, NULL, out);
}

void cluster_view_json(shoal_cluster_t *c, const shoal_cluster_view_t *v, shoal_buf_t *out)
{
    if (v && out)
        view_json(v, c, out);
}

/* Akka Management's GET /cluster/members/{address}: the member by node id or host:port (as the
   POST route and shoal-cluster take it); a removed member is no member (404), as there. */
void cluster_member_route(shoal_system_t *sys, const shoal_http_request_t *req,
                          shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    if (!req->rest[0]) {
        shoal_http_error(rep, 400, "name the member: GET /cluster/members/<host:port or node id>");
        return;
    }
    const shoal_node_t *node = cluster_find_in(c->state, req->rest);
    shoal_cluster_view_t v;
    cluster_view_fill(c, &v);
    const shoal_member_t *m = node ? shoal_cluster_view_member(&v, node) : NULL;
    if (!m)
        shoal_http_error(rep, 404, "no member %.200s", req->rest);
    else {
        member_json(&v, c, m, &rep->body);
        shoal_buf_append(&rep->body, "\n", 1);
    }
    shoal_cluster_view_free(&v);
}

/* ---------------------------------------------------------------------------------------------
 * Admin requests (node side)
 */
static void reply(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind, int status,
                  const char *text)
{
    Shoal__Cluster__AdminReply r = SHOAL__CLUSTER__ADMIN_REPLY__INIT;
    r.status = status;
    r.text = (char *)(text ? text : "");
    size_t len = shoal__cluster__admin_reply__get_packed_size(&r);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        abort();
    shoal__cluster__admin_reply__pack(&r, buf);
    shoal_system_reply(sys, to, kind, buf, len);
    free(buf);
}

static void on_admin(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                     const uint8_t *data, size_t len, void *arg)
{
    shoal_cluster_t *c = arg;
    Shoal__Cluster__AdminRequest *m = shoal__cluster__admin_request__unpack(NULL, len, data);
    if (!m) {
        reply(sys, to, kind, SHOAL_EDECODE, "malformed request");
        return;
    }
    const char *target = m->target ? m->target : "";
    int rc = 0;
    char msg[400] = "";
    switch (kind) {
    case SHOAL_KIND_CLUSTER_VIEW: {
        shoal_cluster_view_t v;
        cluster_view_fill(c, &v);
        shoal_buf_t json = {0};
        cluster_view_json(c, &v, &json);
        reply(sys, to, kind, 0, shoal_buf_cstr(&json));
        shoal_buf_free(&json);
        shoal_cluster_view_free(&v);
        shoal__cluster__admin_request__free_unpacked(m, NULL);
        return;
    }
    case SHOAL_KIND_CLUSTER_JOIN:
        if (strncmp(target, "tcp://", 6) != 0) {
            rc = SHOAL_EINVAL;
            snprintf(msg, sizeof msg, "a seed is an endpoint tcp://host:port, not '%.300s'",
                     target);
            break;
        }
        rc = cluster_do_join(c, &target, 1);
        if (rc == SHOAL_ESTATE)
            snprintf(msg, sizeof msg, "%s is already a member", shoal_node_id(c->self));
        break;
    case SHOAL_KIND_CLUSTER_LEAVE:
    case SHOAL_KIND_CLUSTER_DOWN: {
        const shoal_node_t *n = *target ? cluster_find_in(c->state, target) : c->self;
        if (!n) {
            rc = SHOAL_ENOTMEMBER;
            snprintf(msg, sizeof msg, "no member '%.300s'", target);
            break;
        }
        rc = kind == SHOAL_KIND_CLUSTER_LEAVE ? cluster_do_leave(c, n) : cluster_do_down(c, n);
        if (rc < 0)
            snprintf(msg, sizeof msg, "%s: %s", shoal_node_id(n), shoal_strerror(rc));
        else
            snprintf(msg, sizeof msg, "%s", shoal_node_id(n));
        break;
    }
    case SHOAL_KIND_CLUSTER_EVENTS: {
        char *end = NULL;
        unsigned long long since = strtoull(target, &end, 10);
        if (*target && *end) {
            reply(sys, to, kind, SHOAL_EINVAL, "events since a sequence number");
            shoal__cluster__admin_request__free_unpacked(m, NULL);
            return;
        }
        shoal_buf_t json = {0};
        cluster_events_json(c, since, &json);
        reply(sys, to, kind, 0, shoal_buf_cstr(&json));
        shoal_buf_free(&json);
        shoal__cluster__admin_request__free_unpacked(m, NULL);
        return;
    }
    case SHOAL_KIND_CLUSTER_FORGET:
        rc = cluster_do_forget(c, target, true);
        if (rc == SHOAL_ENOTFOUND)
            snprintf(msg, sizeof msg, "identity '%.300s' is not in this node's kept membership",
                     target);
        else if (rc == 0)
            snprintf(msg, sizeof msg, "identity %.300s forgotten (the members reached were told)",
                     target);
        break;
    default:
        rc = SHOAL_EKIND;
    }
    if (rc < 0 && !*msg)
        snprintf(msg, sizeof msg, "%s", shoal_strerror(rc));
    reply(sys, to, kind, rc, msg);
    shoal__cluster__admin_request__free_unpacked(m, NULL);
}

/* The request kinds served here: registered together, withdrawn together (a request arriving
   after the cluster is destroyed must find no handler). */
static const uint16_t admin_kinds[] = {SHOAL_KIND_CLUSTER_VIEW,   SHOAL_KIND_CLUSTER_JOIN,
                                       SHOAL_KIND_CLUSTER_LEAVE,  SHOAL_KIND_CLUSTER_DOWN,
                                       SHOAL_KIND_CLUSTER_FORGET, SHOAL_KIND_CLUSTER_EVENTS};

void admin_register(shoal_cluster_t *c)
{
    for (size_t i = 0; i < sizeof admin_kinds / sizeof *admin_kinds; i++)
        shoal_system_register_request(c->sys, admin_kinds[i], on_admin, c);
}

void admin_withdraw(shoal_cluster_t *c)
{
    for (size_t i = 0; i < sizeof admin_kinds / sizeof *admin_kinds; i++)
        shoal_system_register_request(c->sys, admin_kinds[i], NULL, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Admin requests (client side)
 */
static int admin_request(shoal_client_t *cl, uint16_t kind, const char *target, shoal_buf_t *text)
{
    if (!cl)
        return SHOAL_EINVAL;
    Shoal__Cluster__AdminRequest q = SHOAL__CLUSTER__ADMIN_REQUEST__INIT;
    q.target = (char *)(target ? target : "");
    size_t len = shoal__cluster__admin_request__get_packed_size(&q);
    uint8_t buf[1024];
    if (len > sizeof buf)
        return SHOAL_ETOOBIG;
    shoal__cluster__admin_request__pack(&q, buf);
    uint16_t rkind = 0;
    shoal_buf_t raw = {0};
    int rc = shoal_client_request(cl, kind, buf, len, &rkind, &raw, 0);
    if (rc == 0) {
        Shoal__Cluster__AdminReply *r =
            shoal__cluster__admin_reply__unpack(NULL, raw.len, raw.data);
        if (!r)
            rc = SHOAL_EDECODE;
        else {
            rc = r->status;
            if (text) {
                shoal_buf_reset(text);
                if (r->text)
                    shoal_buf_append(text, r->text, strlen(r->text));
            }
            shoal__cluster__admin_reply__free_unpacked(r, NULL);
        }
    }
    shoal_buf_free(&raw);
    return rc;
}

int shoal_client_cluster_view(shoal_client_t *cl, shoal_buf_t *json)
{
    return admin_request(cl, SHOAL_KIND_CLUSTER_VIEW, NULL, json);
}

int shoal_client_cluster_join(shoal_client_t *cl, const char *seed_endpoint)
{
    return admin_request(cl, SHOAL_KIND_CLUSTER_JOIN, seed_endpoint, NULL);
}

int shoal_client_cluster_leave(shoal_client_t *cl, const char *member)
{
    return admin_request(cl, SHOAL_KIND_CLUSTER_LEAVE, member, NULL);
}

int shoal_client_cluster_down(shoal_client_t *cl, const char *member)
{
    return admin_request(cl, SHOAL_KIND_CLUSTER_DOWN, member, NULL);
}

int shoal_client_cluster_forget(shoal_client_t *cl, const char *durable_id, shoal_buf_t *text)
{
    return admin_request(cl, SHOAL_KIND_CLUSTER_FORGET, durable_id, text);
}

int shoal_client_cluster_events(shoal_client_t *cl, uint64_t since, shoal_buf_t *json)
{
    char s[32];
    snprintf(s, sizeof s, "%llu", (unsigned long long)since);
    return admin_request(cl, SHOAL_KIND_CLUSTER_EVENTS, s, json);
}
