/*  shoal-cluster — the operator tool of a Shoal cluster (like `serf members` / `serf force-leave`
    or Akka Management's cluster HTTP routes): asks one running member over a client connection.

      shoal-cluster [--node ENDPOINT] [--json] [--timeout MS] members [--status S] [--role R]
      shoal-cluster [--node ENDPOINT] [--timeout MS] join SEED_ENDPOINT
      shoal-cluster [--node ENDPOINT] [--timeout MS] leave [MEMBER]
      shoal-cluster [--node ENDPOINT] [--timeout MS] down MEMBER
      shoal-cluster [--node ENDPOINT] [--timeout MS] forget ID
      shoal-cluster [--node ENDPOINT] [--json] [--timeout MS] shards [TYPE]
      shoal-cluster [--node ENDPOINT] [--json] [--timeout MS] check
      shoal-cluster [--node ENDPOINT] [--timeout MS] rebalance TYPE
      shoal-cluster [--node ENDPOINT] [--timeout MS] move TYPE SHARD MEMBER
      shoal-cluster [--node ENDPOINT] [--timeout MS] unpin TYPE SHARD
      shoal-cluster [--node ENDPOINT] [--json] [--timeout MS] events
      shoal-cluster [--timeout MS] reload HTTP [--token-file FILE]

    --node     the member to ask (default tcp://127.0.0.1:2552)
    --json     `members`, `shards` and `events` print JSON, as the node renders it (events: one
               object a line); `check` prints one object: "ok", "findings" (strings), the counts,
               and "stores" (each member's durable store: used and max bytes)
    --timeout  how long to wait for the node, in ms (default 3000)
    --help     the usage on stdout; --version: "shoal-cluster VERSION"
    MEMBER is a node id host:port:uid, or host:port for the live incarnation there; `leave`
    without MEMBER makes the asked node itself leave. `forget ID` drops a durable identity that
    will never return from the kept membership (majorities count the kept identities across a
    restart of every node; see `members --json`, "kept"), on the asked node and every member it
    reaches.

    shards: the shard map of each entity type (or of TYPE): every shard's home, its entities, its
    pin, and the node running the coordinator (as GET /cluster/shards on the management endpoint).
    check: every shard has one home (no shard hosted by two regions, or by one the coordinator did
    not allocate it to), no pin to a shard the type does not have (with the default shard ids:
    outside 0..number-of-shards-1), every member with the same number-of-shards per type, every
    member's region of every type is registered with its coordinator,
    every region answered, and the replicas of each key agree on every Up member (asked in turn;
    keys that differ are asked again for up to 3 s, as gossip may still be carrying a write): exit
    0, or 1 with the findings, as `redis-cli --cluster check`. It also shows each member's durable
    store, used bytes against map_max (shoal_durable_used_bytes / shoal_durable_map_max_bytes of
    the member's metrics, fetched with shoal_client_metrics; members without a store, or of 0.2,
    which do not send their metrics, are left out), a finding above 80%; and a finding for a
    member whose shoal_node_clock_skew_seconds is over 1 s (its wall clock that far from a
    peer's).
    members --status S, --role R: only the members of that status (up, weakly-up, joining,
    leaving, exiting, down, removed; any case, WeaklyUp too) and with that role (both: both).
    rebalance: a rebalance round of TYPE now. move: hands SHARD off to MEMBER through the
    coordinator (the ordered handoff) and pins it there, in the coordinator's state, until it is
    moved again or unpinned; waits (up to the timeout, at least 10 s) until the node sees it there;
    a shard the type does not have is refused, naming the range. unpin: drops the pin (the shard
    stays until a rebalance moves it); any id, so a pin to a shard that does not exist can go.
    events: prints the node's cluster and sharding events as they happen (member up, unreachable,
    removed, leader changes, shard allocated, moved, pinned) until interrupted, like `serf
    monitor`; it starts with the recent events the node kept.
    reload: what SIGHUP does to a node program (its CURVE allow-list, its management endpoint's
    token and TLS files read again: docs/operations.md, "Rotating keys and certificates"),
    asked over that endpoint: POST /reload to HTTP, the node's --http ([HOST:]PORT, HOST an
    address, default 127.0.0.1; or http://HOST:PORT), with the bearer token of --token-file
    FILE (its first line) when the endpoint has one. Plain HTTP only: for an HTTPS endpoint use
    curl (the command is in the error). The node's answer is printed; 401 (a wrong token), 403
    (a client not allowed to write) and 500 (a file that could not be used) exit 1.

    Exit codes: 0 ok; 1 the node answered with an error, or check found something; 2 usage error;
    3 the node could not be reached in time.
*/
#include "cli.h"
#include "membership.h"
#include "sharding.h"

#include "client.pb-c.h"

#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <errno.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_ANSWERED_ERROR 1
#define EXIT_USAGE 2
#define EXIT_UNREACHABLE 3

static void usage(FILE *f)
{
    fprintf(f, "usage: shoal-cluster [--node ENDPOINT] [--json] [--timeout MS] COMMAND\n"
               "       shoal-cluster --help | --version\n"
               "  members [--status S] [--role R]\n"
               "                       the members as the node sees them (only those of status S:\n"
               "                       up, weakly-up, joining, leaving, exiting, down, removed;\n"
               "                       with role R)\n"
               "  join SEED_ENDPOINT   make the node join the cluster of that seed\n"
               "  leave [MEMBER]       a member (default: the node itself) leaves gracefully\n"
               "  down MEMBER          mark a member Down (it is removed and must restart)\n"
               "  forget ID            drop a durable identity that will never return from the\n"
               "                       kept membership (majorities stop counting it)\n"
               "  shards [TYPE]        the shard map: each shard's home, entities and pin\n"
               "  check                every shard one home, every region registered, replicas\n"
               "                       equal, stores under 80%% of map_max, clocks within 1 s:\n"
               "                       exit 0, or 1 with the findings (--json: one object)\n"
               "  rebalance TYPE       a rebalance round now\n"
               "  move TYPE SHARD MEMBER  hand SHARD off to MEMBER and pin it there\n"
               "  unpin TYPE SHARD     drop the pin of SHARD\n"
               "  events               stream cluster and sharding events until interrupted\n"
               "  reload HTTP [--token-file FILE]\n"
               "                       what SIGHUP does (allow-list, endpoint token and TLS\n"
               "                       files), through the node's management endpoint HTTP\n"
               "                       ([HOST:]PORT, its --http): POST /reload\n"
               "MEMBER is host:port:uid or host:port. Default node tcp://127.0.0.1:2552.\n");
}

/* ---------------------------------------------------------------------------------------------
 * A small reader for the node's JSON view: the tool only needs the flat fields it renders, and the
   node's JSON is machine-made (admin.c), but a reply is still input from the network: every read
   is bounded and a malformed reply is an error, never a crash.
 */
typedef struct {
    const char *p, *end;
} jreader_t;

static void skip_ws(jreader_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static bool eat(jreader_t *j, char ch)
{
    skip_ws(j);
    if (j->p < j->end && *j->p == ch) {
        j->p++;
        return true;
    }
    return false;
}

/* A string into out (truncated to cap-1; escapes \" \\ and \u00XX decoded). */
static bool read_str(jreader_t *j, char *out, size_t cap)
{
    if (!eat(j, '"'))
        return false;
    size_t n = 0;
    while (j->p < j->end && *j->p != '"') {
        char ch = *j->p++;
        if (ch == '\\') {
            if (j->p >= j->end)
                return false;
            char e = *j->p++;
            if (e == 'u') {
                if (j->end - j->p < 4)
                    return false;
                char hex[5] = {j->p[0], j->p[1], j->p[2], j->p[3], 0};
                ch = (char)strtol(hex, NULL, 16);
                j->p += 4;
            } else {
                ch = e == 'n' ? '\n' : e == 't' ? '\t' : e;
            }
        }
        if (n + 1 < cap)
            out[n++] = ch;
    }
    if (cap)
        out[n] = 0;
    return eat(j, '"');
}

/* Skips any value (string, number, literal, array, object). */
static bool skip_value(jreader_t *j, int depth)
{
    if (depth > 16)
        return false;
    skip_ws(j);
    if (j->p >= j->end)
        return false;
    char ch = *j->p;
    if (ch == '"') {
        char tmp[2];
        return read_str(j, tmp, sizeof tmp);
    }
    if (ch == '[' || ch == '{') {
        char close = ch == '[' ? ']' : '}';
        j->p++;
        if (eat(j, close))
            return true;
        do {
            if (ch == '{') {
                char key[2];
                if (!read_str(j, key, sizeof key) || !eat(j, ':'))
                    return false;
            }
            if (!skip_value(j, depth + 1))
                return false;
        } while (eat(j, ','));
        return eat(j, close);
    }
    while (j->p < j->end && *j->p != ',' && *j->p != '}' && *j->p != ']' && *j->p != ' ')
        j->p++;
    return true;
}

/* A scalar as text (strings unquoted; null, true, false and numbers as written). */
static bool read_scalar(jreader_t *j, char *out, size_t cap)
{
    skip_ws(j);
    if (j->p < j->end && *j->p == '"')
        return read_str(j, out, cap);
    const char *s = j->p;
    if (!skip_value(j, 0))
        return false;
    size_t n = (size_t)(j->p - s);
    if (n >= cap)
        n = cap - 1;
    memcpy(out, s, n);
    out[n] = 0;
    return true;
}

typedef struct {
    char node[SHOAL_NODE_ID_MAX + 1], address[SHOAL_NODE_ID_MAX + 1], status[32];
    char up_number[32], reachable[8], leader[8], roles[512];
    char protocol[16]; /* the member's highest protocol version; "" (0.1.x nodes say none): 1 */
} row_t;

typedef struct {
    char self[SHOAL_NODE_ID_MAX + 1], leader[SHOAL_NODE_ID_MAX + 1], converged[8], version[32];
    char in_cluster[8], joining[8], outside_since[32]; /* set only for a node in no cluster */
    char discovery[512]; /* what seed discovery waits for, when the node finds its seeds by DNS */
    char protocol[16];   /* the cluster's protocol version; "" (0.1.x nodes say none): 1 */
    row_t *rows;
    size_t n_rows;
} view_t;

static bool read_member(jreader_t *j, row_t *r)
{
    memset(r, 0, sizeof *r);
    if (!eat(j, '{'))
        return false;
    if (eat(j, '}'))
        return true;
    do {
        char key[64];
        if (!read_str(j, key, sizeof key) || !eat(j, ':'))
            return false;
        bool ok = true;
        if (strcmp(key, "node") == 0)
            ok = read_scalar(j, r->node, sizeof r->node);
        else if (strcmp(key, "address") == 0)
            ok = read_scalar(j, r->address, sizeof r->address);
        else if (strcmp(key, "status") == 0)
            ok = read_scalar(j, r->status, sizeof r->status);
        else if (strcmp(key, "up_number") == 0)
            ok = read_scalar(j, r->up_number, sizeof r->up_number);
        else if (strcmp(key, "reachable") == 0)
            ok = read_scalar(j, r->reachable, sizeof r->reachable);
        else if (strcmp(key, "leader") == 0)
            ok = read_scalar(j, r->leader, sizeof r->leader);
        else if (strcmp(key, "protocol") == 0)
            ok = read_scalar(j, r->protocol, sizeof r->protocol);
        else if (strcmp(key, "roles") == 0) {
            if (!eat(j, '['))
                return false;
            if (!eat(j, ']')) {
                do {
                    char role[128];
                    if (!read_str(j, role, sizeof role))
                        return false;
                    size_t len = strlen(r->roles);
                    snprintf(r->roles + len, sizeof r->roles - len, "%s%s", len ? "," : "", role);
                } while (eat(j, ','));
                if (!eat(j, ']'))
                    return false;
            }
        } else
            ok = skip_value(j, 1);
        if (!ok)
            return false;
    } while (eat(j, ','));
    return eat(j, '}');
}

static bool parse_view(const char *text, size_t len, view_t *v)
{
    memset(v, 0, sizeof *v);
    jreader_t j = {text, text + len};
    if (!eat(&j, '{'))
        return false;
    if (eat(&j, '}'))
        return true;
    do {
        char key[64];
        if (!read_str(&j, key, sizeof key) || !eat(&j, ':'))
            return false;
        bool ok = true;
        if (strcmp(key, "self") == 0)
            ok = read_scalar(&j, v->self, sizeof v->self);
        else if (strcmp(key, "leader") == 0)
            ok = read_scalar(&j, v->leader, sizeof v->leader);
        else if (strcmp(key, "converged") == 0)
            ok = read_scalar(&j, v->converged, sizeof v->converged);
        else if (strcmp(key, "version") == 0)
            ok = read_scalar(&j, v->version, sizeof v->version);
        else if (strcmp(key, "in_cluster") == 0)
            ok = read_scalar(&j, v->in_cluster, sizeof v->in_cluster);
        else if (strcmp(key, "joining") == 0)
            ok = read_scalar(&j, v->joining, sizeof v->joining);
        else if (strcmp(key, "outside_since") == 0)
            ok = read_str(&j, v->outside_since, sizeof v->outside_since);
        else if (strcmp(key, "discovery") == 0)
            ok = read_str(&j, v->discovery, sizeof v->discovery);
        else if (strcmp(key, "protocol_version") == 0)
            ok = read_scalar(&j, v->protocol, sizeof v->protocol);
        else if (strcmp(key, "members") == 0) {
            if (!eat(&j, '['))
                return false;
            if (!eat(&j, ']')) {
                do {
                    row_t *rows = realloc(v->rows, (v->n_rows + 1) * sizeof *rows);
                    if (!rows)
                        abort();
                    v->rows = rows;
                    if (!read_member(&j, &v->rows[v->n_rows]))
                        return false;
                    v->n_rows++;
                } while (eat(&j, ','));
                if (!eat(&j, ']'))
                    return false;
            }
        } else
            ok = skip_value(&j, 1);
        if (!ok)
            return false;
    } while (eat(&j, ','));
    return eat(&j, '}');
}

/* "host:port:uid" -> "uid" (the last field), for the table's uid column. */
static const char *uid_of(const char *id)
{
    const char *colon = strrchr(id, ':');
    return colon ? colon + 1 : "";
}

static void print_table(const view_t *v)
{
    if (strcmp(v->in_cluster, "false") == 0) {
        struct tm tm = {0};
        long secs = -1;
        if (strptime(v->outside_since, "%Y-%m-%dT%H:%M:%SZ", &tm))
            secs = (long)(time(NULL) - timegm(&tm));
        printf("node %s is in no cluster since %s (%ld s): %s\n", v->self, v->outside_since, secs,
               v->discovery[0] ? v->discovery
               : strcmp(v->joining, "true") == 0
                   ? "joining through its seeds (its log says which answered)"
                   : "not joining (waiting to be joined: shoal-cluster join SEED)");
        if (v->n_rows == 0)
            return;
    }
    printf("node %s  leader %s  converged %s  version %s  protocol %s  members %zu\n", v->self,
           *v->leader && strcmp(v->leader, "null") != 0 ? v->leader : "(none)",
           strcmp(v->converged, "true") == 0 ? "yes" : "no", v->version,
           *v->protocol ? v->protocol : "1", v->n_rows);
    int aw = 7;
    for (size_t i = 0; i < v->n_rows; i++) {
        int l = (int)strlen(v->rows[i].address);
        if (l > aw)
            aw = l;
    }
    printf("  %-*s  %-20s  %-9s  %5s  %-9s  %5s  %s\n", aw, "ADDRESS", "UID", "STATUS", "AGE",
           "REACHABLE", "PROTO", "ROLES");
    for (size_t i = 0; i < v->n_rows; i++) {
        const row_t *r = &v->rows[i];
        printf("%c %-*s  %-20s  %-9s  %5s  %-9s  %5s  %s\n",
               strcmp(r->leader, "true") == 0 ? '*' : ' ', aw, r->address, uid_of(r->node),
               r->status, strcmp(r->up_number, "0") == 0 ? "-" : r->up_number,
               strcmp(r->reachable, "true") == 0 ? "yes" : "NO", *r->protocol ? r->protocol : "1",
               *r->roles ? r->roles : "-");
    }
    printf("(* = leader; AGE = up-number, lower is older; PROTO = the highest protocol version "
           "the member speaks)\n");
}

/* `members --status S --role R`: which members to show. A status is compared without case, '-'
   or '_' ("weakly-up", "WeaklyUp" and "weakly_up" are one); NULL: any. */
typedef struct {
    const char *status, *role;
} member_filter_t;

static const char *const member_statuses[] = {"up",      "weaklyup", "joining", "leaving",
                                              "exiting", "down",     "removed"};

static void status_key(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; *in && n + 1 < cap; in++)
        if (*in != '-' && *in != '_')
            out[n++] = (char)(*in >= 'A' && *in <= 'Z' ? *in - 'A' + 'a' : *in);
    out[n] = 0;
}

static bool status_known(const char *status)
{
    char k[32];
    status_key(status, k, sizeof k);
    for (size_t i = 0; i < sizeof member_statuses / sizeof *member_statuses; i++)
        if (strcmp(k, member_statuses[i]) == 0)
            return true;
    return false;
}

/* roles: the member's roles, comma-separated */
static bool member_shown(const member_filter_t *f, const char *status, const char *roles)
{
    if (f->status) {
        char a[32], b[32];
        status_key(f->status, a, sizeof a);
        status_key(status, b, sizeof b);
        if (strcmp(a, b) != 0)
            return false;
    }
    if (f->role) {
        size_t len = strlen(f->role);
        for (const char *p = roles; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
            if (strncmp(p, f->role, len) == 0 && (p[len] == ',' || p[len] == 0))
                return true;
        return false;
    }
    return true;
}

static bool filtering(const member_filter_t *f)
{
    return f->status || f->role;
}

/* Keeps the rows the filter shows; the number there were. */
static size_t filter_rows(view_t *v, const member_filter_t *f)
{
    size_t all = v->n_rows, k = 0;
    for (size_t i = 0; i < all; i++)
        if (member_shown(f, v->rows[i].status, v->rows[i].roles))
            v->rows[k++] = v->rows[i];
    v->n_rows = k;
    return all;
}

/* The node's view as JSON, with the protocol versions a node of 0.1.x does not say (it speaks
   protocol 1): "protocol_version" for the cluster and "protocol" on each member. */
static void print_view_json(const char *text, const member_filter_t *f)
{
    json_t *view = json_loads(text, 0, NULL);
    if (!json_is_object(view)) {
        json_decref(view);
        printf("%s\n", text); /* not ours to fix: shown as the node sent it */
        return;
    }
    if (!json_object_get(view, "protocol_version"))
        json_object_set_new(view, "protocol_version", json_integer(1));
    json_t *members = json_object_get(view, "members");
    size_t i;
    json_t *m;
    json_array_foreach(members, i, m)
    {
        if (json_is_object(m) && !json_object_get(m, "protocol"))
            json_object_set_new(m, "protocol", json_integer(1));
    }
    if (filtering(f) && json_is_array(members)) {
        for (size_t k = json_array_size(members); k-- > 0;) {
            m = json_array_get(members, k);
            char roles[512] = "";
            size_t r;
            json_t *role;
            json_array_foreach(json_object_get(m, "roles"), r, role)
            {
                size_t len = strlen(roles);
                snprintf(roles + len, sizeof roles - len, "%s%s", len ? "," : "",
                         json_string_value(role) ? json_string_value(role) : "");
            }
            const char *st = json_string_value(json_object_get(m, "status"));
            if (!member_shown(f, st ? st : "", roles))
                json_array_remove(members, k);
        }
    }
    char *out = json_dumps(view, JSON_COMPACT | JSON_PRESERVE_ORDER);
    printf("%s\n", out ? out : text);
    free(out);
    json_decref(view);
}

/* ---------------------------------------------------------------------------------------------
 * Main
 */
static int fail_request(const char *node, const char *what, int rc)
{
    if (rc == SHOAL_ETIMEOUT || rc == SHOAL_EIO || rc == SHOAL_ESTOPPED) {
        fprintf(stderr, "shoal-cluster: cannot reach node at %s (%s)\n", node, shoal_strerror(rc));
        return EXIT_UNREACHABLE;
    }
    fprintf(stderr, "shoal-cluster: %s: %s\n", node, what);
    return EXIT_ANSWERED_ERROR;
}


/* ---------------------------------------------------------------------------------------------
 * Shards, check, rebalance, move, unpin, events
 */
static const char *jstr(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

/* "host:port:uid" -> "host:port" (into out) */
static const char *address_of(const char *id, char *out, size_t cap)
{
    snprintf(out, cap, "%s", id);
    char *colon = strrchr(out, ':');
    if (colon && colon != strchr(out, ':'))
        *colon = 0;
    return out;
}

/* The types of a shards answer: its "types" array, or the one type it is. */
static json_t *types_of(json_t *root)
{
    json_t *types = json_object_get(root, "types");
    if (json_is_array(types))
        return json_incref(types);
    json_t *one = json_array();
    json_array_append(one, root);
    return one;
}

static void print_shards(json_t *root)
{
    json_t *types = types_of(root);
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t) {
        const char *co = jstr(t, "coordinator");
        json_t *shards = json_object_get(t, "shards");
        printf("%stype %s  coordinator %s  shards %zu%s\n", i ? "\n" : "", jstr(t, "type"),
               *co ? co : "(none known)", json_array_size(shards),
               json_is_true(json_object_get(t, "proxy")) ? "  (a proxy on this node)" : "");
        int hw = 4;
        size_t k;
        json_t *sh;
        json_array_foreach(shards, k, sh) {
            int l = (int)strlen(jstr(sh, "home"));
            hw = l > hw ? l : hw;
        }
        printf("  %-10s  %-*s  %8s  %s\n", "SHARD", hw, "HOME", "ENTITIES", "PINNED");
        json_array_foreach(shards, k, sh) {
            json_t *e = json_object_get(sh, "entities");
            char ents[32];
            if (json_is_integer(e))
                snprintf(ents, sizeof ents, "%lld", (long long)json_integer_value(e));
            else
                snprintf(ents, sizeof ents, "?");
            const char *home = jstr(sh, "home");
            const char *pin = jstr(sh, "pinned");
            printf("  %-10s  %-*s  %8s  %s\n", jstr(sh, "id"), hw, *home ? home : "-", ents,
                   *pin ? pin : "-");
        }
        json_t *regions = json_object_get(t, "regions");
        if (json_array_size(regions)) {
            printf("  %-*s  %6s  %8s  %s\n", hw + 12, "REGION", "SHARDS", "ENTITIES", "ANSWERED");
            json_t *g;
            json_array_foreach(regions, k, g) {
                printf("  %-*s  %6lld  %8lld  %s\n", hw + 12, jstr(g, "node"),
                       (long long)json_integer_value(json_object_get(g, "shards")),
                       (long long)json_integer_value(json_object_get(g, "entities")),
                       json_is_true(json_object_get(g, "answered")) ? "yes" : "NO");
            }
        }
        const char *err = jstr(t, "stats_error");
        if (*err)
            printf("  (entity counts missing: %s)\n", err);
    }
    json_decref(types);
}

/* A sharding request's failure, in words: the node runs no sharding, no such type, or its
   answer. */
static int sharding_failed(const char *node, int rc, shoal_buf_t *text)
{
    if (rc == SHOAL_EKIND) {
        fprintf(stderr, "shoal-cluster: %s runs no sharding\n", node);
        return EXIT_ANSWERED_ERROR;
    }
    char what[1024];
    snprintf(what, sizeof what, "%s", text->len ? shoal_buf_cstr(text) : shoal_strerror(rc));
    return fail_request(node, what, rc);
}

static int cmd_shards(shoal_client_t *cl, const char *node, const char *type, bool as_json)
{
    shoal_buf_t text = {0};
    int rc = shoal_client_sharding_shards(cl, type ? type : "", &text);
    int code = 0;
    if (rc < 0) {
        code = sharding_failed(node, rc, &text);
    } else if (as_json) {
        printf("%s\n", shoal_buf_cstr(&text));
    } else {
        json_error_t err;
        json_t *root = json_loadb(shoal_buf_cstr(&text), text.len, 0, &err);
        if (!root) {
            fprintf(stderr, "shoal-cluster: %s: malformed shard map from the node (%s)\n", node,
                    err.text);
            code = EXIT_ANSWERED_ERROR;
        } else {
            print_shards(root);
            json_decref(root);
        }
    }
    shoal_buf_free(&text);
    return code;
}

static int cmd_action(shoal_client_t *cl, const char *node, const char *cmd, const char *type,
                      const char *shard, const char *member)
{
    shoal_buf_t text = {0};
    int rc = strcmp(cmd, "rebalance") == 0 ? shoal_client_sharding_rebalance(cl, type, &text)
             : strcmp(cmd, "move") == 0   ? shoal_client_sharding_move(cl, type, shard, member,
                                                                       &text)
                                          : shoal_client_sharding_unpin(cl, type, shard, &text);
    int code = 0;
    if (rc < 0)
        code = sharding_failed(node, rc, &text);
    else
        printf("%s\n", shoal_buf_cstr(&text));
    shoal_buf_free(&text);
    return code;
}

/* After a move: the shard's home as the asked node sees it, until it is at `member`. */
static int wait_moved(shoal_client_t *cl, const char *node, const char *type, const char *shard,
                      const char *member, long wait_ms)
{
    char want[SHOAL_NODE_ID_MAX + 1];
    address_of(member, want, sizeof want);
    int64_t until = shoal_now_ms() + wait_ms;
    char home[SHOAL_NODE_ID_MAX + 1] = "";
    for (;;) {
        shoal_buf_t text = {0};
        int rc = shoal_client_sharding_shards(cl, type, &text);
        json_t *root = rc == 0 ? json_loadb(shoal_buf_cstr(&text), text.len, 0, NULL) : NULL;
        shoal_buf_free(&text);
        if (rc < 0 && rc != SHOAL_ETIMEOUT) {
            json_decref(root);
            return fail_request(node, shoal_strerror(rc), rc);
        }
        size_t i;
        json_t *sh;
        json_array_foreach(json_object_get(root, "shards"), i, sh) {
            if (strcmp(jstr(sh, "id"), shard) == 0)
                snprintf(home, sizeof home, "%s", jstr(sh, "home"));
        }
        json_decref(root);
        char at[SHOAL_NODE_ID_MAX + 1];
        if (*home && (strcmp(home, member) == 0 || strcmp(address_of(home, at, sizeof at), want) == 0)) {
            printf("shard %s of %s is on %s\n", shard, type, home);
            return 0;
        }
        if (shoal_now_ms() >= until)
            break;
        usleep(100 * 1000); /* an operator's poll of the node, not a test's wait */
    }
    fprintf(stderr, "shoal-cluster: shard %s of %s not on %s after %ld ms (home: %s); the pin "
                    "stands and the coordinator goes on\n",
            shard, type, member, wait_ms, *home ? home : "none");
    return EXIT_ANSWERED_ERROR;
}

/* ---- events ---- */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void print_event(json_t *e, bool as_json)
{
    if (as_json) {
        char *line = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (line)
            printf("%s\n", line);
        free(line);
        return;
    }
    printf("%s  %-20s", jstr(e, "at"), jstr(e, "event"));
    const char *n = jstr(e, "node");
    if (*n)
        printf("  %s", n);
    const char *key;
    json_t *v;
    json_object_foreach(e, key, v) {
        if (!strcmp(key, "seq") || !strcmp(key, "at") || !strcmp(key, "event") ||
            !strcmp(key, "node"))
            continue;
        if (json_is_string(v))
            printf("  %s=%s", key, json_string_value(v));
        else if (json_is_boolean(v))
            printf("  %s=%s", key, json_is_true(v) ? "true" : "false");
    }
    printf("\n");
}

static int cmd_events(shoal_client_t *cl, const char *node, bool as_json)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    setvbuf(stdout, NULL, _IOLBF, 0); /* each event as it comes, into a pipe too */
    uint64_t since = 0;
    while (!interrupted) {
        shoal_buf_t text = {0};
        int rc = shoal_client_cluster_events(cl, since, &text);
        if (rc < 0) {
            int code = interrupted ? 0 : fail_request(node, shoal_strerror(rc), rc);
            shoal_buf_free(&text);
            return code;
        }
        json_t *root = json_loadb(shoal_buf_cstr(&text), text.len, 0, NULL);
        shoal_buf_free(&text);
        if (!root) {
            fprintf(stderr, "shoal-cluster: %s: malformed events from the node\n", node);
            return EXIT_ANSWERED_ERROR;
        }
        json_int_t missed = json_integer_value(json_object_get(root, "missed"));
        if (missed > 0)
            printf("(%lld events missed: the node keeps the last 256)\n", (long long)missed);
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(root, "events"), i, e) {
            print_event(e, as_json);
        }
        json_int_t seq = json_integer_value(json_object_get(root, "seq"));
        if (seq > 0)
            since = (uint64_t)seq;
        json_decref(root);
        /* the node is asked for news 5 times a second: a line appears within 200 ms */
        for (int k = 0; k < 4 && !interrupted; k++)
            usleep(50 * 1000);
    }
    return 0;
}

/* ---- check ---- */
typedef struct {
    char **lines;
    size_t n;
} findings_t;

static void finding(findings_t *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void finding(findings_t *f, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    f->lines = realloc(f->lines, (f->n + 1) * sizeof *f->lines);
    if (!f->lines || !(f->lines[f->n] = strdup(line)))
        abort();
    f->n++;
}

/* Whether `id` is one of the default shard ids of a type of n shards ("0" .. n-1, as
   shoal_sharding_default_shard_id writes them). */
static bool default_shard_id(const char *id, json_int_t n)
{
    size_t len = strlen(id);
    return len > 0 && len <= 10 && strspn(id, "0123456789") == len && (id[0] != '0' || len == 1) &&
           (json_int_t)strtoull(id, NULL, 10) < n;
}

/* Shards with two homes, or hosted where the coordinator did not allocate them; regions that
   did not answer; pins not honoured; pins to shards the type does not have (left by an older
   build that took any id, or by a larger number-of-shards; a type with a custom shard id
   function has ids the node cannot know, so its pins are not judged). */
static size_t check_map(json_t *root, findings_t *f)
{
    json_t *types = types_of(root);
    size_t i, total = 0;
    json_t *t;
    json_array_foreach(types, i, t) {
        const char *type = jstr(t, "type");
        json_t *shards = json_object_get(t, "shards");
        json_t *regions = json_object_get(t, "regions");
        /* the shard ids it can have: known with the default ids (0: not known) */
        json_int_t n_ids = strcmp(jstr(t, "shard_ids"), "default") == 0
                               ? json_integer_value(json_object_get(t, "number_of_shards"))
                               : 0;
        total += json_array_size(shards);
        size_t k;
        json_t *g;
        json_array_foreach(regions, k, g) {
            if (!json_is_true(json_object_get(g, "answered")))
                finding(f, "%s: region %s did not answer", type, jstr(g, "node"));
        }
        json_t *sh;
        json_array_foreach(shards, k, sh) {
            const char *id = jstr(sh, "id"), *home = jstr(sh, "home"), *pin = jstr(sh, "pinned");
            char hosts[2048] = "";
            size_t n_hosts = 0, r;
            json_array_foreach(regions, r, g) {
                size_t h;
                json_t *x;
                json_array_foreach(json_object_get(g, "hosted"), h, x) {
                    if (strcmp(json_string_value(x) ? json_string_value(x) : "", id) != 0)
                        continue;
                    size_t len = strlen(hosts);
                    snprintf(hosts + len, sizeof hosts - len, "%s%s", n_hosts ? ", " : "",
                             jstr(g, "node"));
                    n_hosts++;
                    if (*home && strcmp(jstr(g, "node"), home) != 0)
                        finding(f, "%s: shard %s is hosted by %s but allocated to %s", type, id,
                                jstr(g, "node"), home);
                }
            }
            if (n_hosts > 1)
                finding(f, "%s: shard %s has %zu homes: %s", type, id, n_hosts, hosts);
            if (*pin && n_ids > 0 && !default_shard_id(id, n_ids)) {
                finding(f,
                        "%s: shard %s is pinned to %s, but %s has no shard %s: its shards are 0 "
                        "to %lld (number-of-shards %lld); drop the pin with `shoal-cluster unpin "
                        "%s %s`",
                        type, id, pin, type, id, (long long)n_ids - 1, (long long)n_ids, type, id);
                continue;
            }
            char at[SHOAL_NODE_ID_MAX + 1];
            if (*pin && *home && strcmp(address_of(home, at, sizeof at), pin) != 0)
                finding(f, "%s: shard %s is pinned to %s but allocated to %s", type, id, pin,
                        home);
        }
    }
    json_decref(types);
    return total;
}

/* The KEYS request (ddata/replicator/replicator_client.c): the keys of a role's replicator. */
#define K_CLIENT_KEYS 0x8004u
static int fetch_keys(shoal_client_t *c, const char *role, char ***keys, size_t *n)
{
    *keys = NULL;
    *n = 0;
    Shoal__Client__Keys req = SHOAL__CLIENT__KEYS__INIT;
    req.role = (char *)role;
    uint8_t buf[512];
    size_t len = shoal__client__keys__get_packed_size(&req);
    if (len > sizeof buf)
        return SHOAL_EINVAL;
    shoal__client__keys__pack(&req, buf);
    shoal_buf_t rep = {0};
    uint16_t kind = 0;
    int rc = shoal_client_request(c, K_CLIENT_KEYS, buf, len, &kind, &rep, 0);
    if (rc < 0) {
        shoal_buf_free(&rep);
        return rc;
    }
    Shoal__Client__Reply *r =
        shoal__client__reply__unpack(NULL, rep.len, rep.data ? rep.data : (uint8_t *)"");
    shoal_buf_free(&rep);
    if (!r)
        return SHOAL_EDECODE;
    rc = r->status;
    if (rc == 0 && r->n_keys) {
        *keys = calloc(r->n_keys, sizeof **keys);
        if (!*keys)
            abort();
        for (size_t i = 0; i < r->n_keys; i++)
            if (!((*keys)[i] = strdup(r->keys[i])))
                abort();
        *n = r->n_keys;
    }
    shoal__client__reply__free_unpacked(r, NULL);
    return rc;
}

typedef struct {
    char address[SHOAL_NODE_ID_MAX + 1];
    shoal_client_t *cl;
} peer_t;

/* The digest of a key on one member: "v" + hex, "deleted", "absent", or "error". */
static void key_state(shoal_client_t *cl, const char *role, const char *key, char *out,
                      size_t cap)
{
    shoal_consistency_t local = {.level = SHOAL_LOCAL};
    shoal_crdt_t *v = NULL;
    uint8_t d[16];
    int rc = shoal_client_get(cl, role, key, &local, &v);
    if (rc == 0 && v && shoal_crdt_digest(v, d) == 0) {
        size_t k = (size_t)snprintf(out, cap, "v");
        for (int i = 0; i < 16 && k + 2 < cap; i++, k += 2)
            snprintf(out + k, cap - k, "%02x", d[i]);
    } else if (rc == SHOAL_EDELETED) {
        snprintf(out, cap, "deleted");
    } else if (rc == SHOAL_ENOTFOUND || (rc == 0 && !v)) {
        snprintf(out, cap, "absent");
    } else {
        snprintf(out, cap, "error (%s)", shoal_strerror(rc));
    }
    shoal_crdt_destroy(&v);
}

/* Replicas of each key of `role` on the members that run its replicator: the keys that differ
   are asked again for up to 3 s (gossip may still carry a write), then reported. */
static size_t check_replicas(peer_t *peers, size_t n_peers, const char *role, findings_t *f)
{
    char **all = NULL;
    size_t n_all = 0;
    bool *runs = calloc(n_peers + 1, sizeof *runs);
    if (!runs)
        abort();
    size_t n_running = 0;
    for (size_t p = 0; p < n_peers; p++) {
        if (!peers[p].cl)
            continue;
        char **keys;
        size_t n;
        int rc = fetch_keys(peers[p].cl, role, &keys, &n);
        if (rc == SHOAL_ENOTFOUND)
            continue; /* no replicator of that role there */
        if (rc < 0) {
            finding(f, "replicas of role '%s': %s did not list its keys (%s)", role,
                    peers[p].address, shoal_strerror(rc));
            continue;
        }
        runs[p] = true;
        n_running++;
        for (size_t i = 0; i < n; i++) {
            bool have = false;
            for (size_t k = 0; k < n_all && !have; k++)
                have = strcmp(all[k], keys[i]) == 0;
            if (have) {
                free(keys[i]);
                continue;
            }
            all = realloc(all, (n_all + 1) * sizeof *all);
            if (!all)
                abort();
            all[n_all++] = keys[i];
        }
        free(keys);
    }
    size_t checked = 0;
    for (size_t k = 0; k < n_all && n_running > 1; k++) {
        char first[64], cur[64], who[SHOAL_NODE_ID_MAX + 200] = "";
        bool agree = false;
        int64_t until = shoal_now_ms() + 3000;
        for (;;) {
            agree = true;
            bool have_first = false;
            for (size_t p = 0; p < n_peers && agree; p++) {
                if (!runs[p])
                    continue;
                key_state(peers[p].cl, role, all[k], have_first ? cur : first, sizeof first);
                if (!have_first) {
                    have_first = true;
                } else if (strcmp(first, cur) != 0) {
                    agree = false;
                    snprintf(who, sizeof who, "%s (%s there, %s on the first)", peers[p].address,
                             cur, first);
                }
            }
            if (agree || shoal_now_ms() >= until)
                break;
            usleep(200 * 1000); /* gossip's next round */
        }
        checked++;
        if (!agree)
            finding(f, "replicas of role '%s': key %s differs on %s from the first member", role,
                    all[k], who);
    }
    for (size_t k = 0; k < n_all; k++)
        free(all[k]);
    free(all);
    free(runs);
    return checked;
}

/* A member's durable store, from its metrics (shoal_client_metrics): used bytes against map_max.
   A store is judged full above STORE_FULL_FRACTION of map_max (the ShoalStoreNearFull alert of
   docs/alerts/shoal-rules.yml says the same): room to raise map_max or free keys before a write
   fails with SHOAL_ESTORE. */
#define STORE_FULL_FRACTION 0.8
typedef struct {
    char address[SHOAL_NODE_ID_MAX + 1];
    double used, max;
} store_t;

/* The value of an unlabelled sample `name` of an exposition; false when it has none. */
static bool sample(const char *text, const char *name, double *out)
{
    size_t len = strlen(name);
    for (const char *p = text; (p = strstr(p, name)); p += len) {
        if ((p == text || p[-1] == '\n') && p[len] == ' ') {
            char *end = NULL;
            *out = strtod(p + len + 1, &end);
            return end && end != p + len + 1;
        }
    }
    return false;
}

/* A member whose wall clock is over CLOCK_SKEW_MAX_S from a peer's, as its gossip sees it
   (shoal_node_clock_skew_seconds), is a finding: the ShoalClockSkew alert's threshold (LWW
   registers and the gossip TTL use wall clocks). */
#define CLOCK_SKEW_MAX_S 1.0

/* The store of the member behind cl: true with *st filled when its metrics say used and max (a
   member without a store, or a 0.2 node, which does not send its metrics: false). *skew: the
   member's shoal_node_clock_skew_seconds, -1 when it has none. */
static bool store_of(shoal_client_t *cl, const char *address, store_t *st, double *skew)
{
    shoal_buf_t text = {0};
    *skew = -1;
    bool got = shoal_client_metrics(cl, &text) == 0 && text.len;
    if (got && !sample(shoal_buf_cstr(&text), "shoal_node_clock_skew_seconds", skew))
        *skew = -1;
    bool ok = got && sample(shoal_buf_cstr(&text), "shoal_durable_used_bytes", &st->used) &&
              sample(shoal_buf_cstr(&text), "shoal_durable_map_max_bytes", &st->max) &&
              st->max > 0;
    shoal_buf_free(&text);
    snprintf(st->address, sizeof st->address, "%s", address);
    return ok;
}

static int cmd_check(shoal_client_t *cl, const char *node, long timeout_ms, bool as_json)
{
    findings_t f = {0};
    shoal_buf_t text = {0};
    int rc = shoal_client_cluster_view(cl, &text);
    if (rc < 0) {
        int code = fail_request(node, shoal_strerror(rc), rc);
        shoal_buf_free(&text);
        return code;
    }
    json_t *view = json_loadb(shoal_buf_cstr(&text), text.len, 0, NULL);
    if (!view) {
        fprintf(stderr, "shoal-cluster: %s: malformed view from the node\n", node);
        shoal_buf_free(&text);
        return EXIT_ANSWERED_ERROR;
    }
    /* the members, each asked in turn */
    json_t *members = json_object_get(view, "members");
    size_t n_members = json_array_size(members);
    peer_t *peers = calloc(n_members + 1, sizeof *peers);
    char **roles = calloc(1, sizeof *roles);
    size_t n_roles = 1;
    if (!peers || !roles || !(roles[0] = strdup("")))
        abort();
    size_t i, n_peers = 0, n_up = 0;
    json_t *m;
    json_array_foreach(members, i, m) {
        const char *status = jstr(m, "status");
        if (strcmp(status, "Up") != 0 && strcmp(status, "WeaklyUp") != 0) {
            if (strcmp(status, "Joining") != 0 && strcmp(status, "Leaving") != 0)
                finding(&f, "member %s is %s", jstr(m, "node"), status);
            continue;
        }
        n_up++;
        if (!json_is_true(json_object_get(m, "reachable")))
            finding(&f, "member %s is unreachable from %s", jstr(m, "node"), node);
        size_t r;
        json_t *role;
        json_array_foreach(json_object_get(m, "roles"), r, role) {
            const char *name = json_string_value(role);
            bool have = !name;
            for (size_t k = 0; k < n_roles && !have; k++)
                have = strcmp(roles[k], name) == 0;
            if (have)
                continue;
            roles = realloc(roles, (n_roles + 1) * sizeof *roles);
            if (!roles || !(roles[n_roles] = strdup(name)))
                abort();
            n_roles++;
        }
        peer_t *p = &peers[n_peers++];
        snprintf(p->address, sizeof p->address, "%s", jstr(m, "address"));
        char ep[SHOAL_NODE_ID_MAX + 16];
        snprintf(ep, sizeof ep, "tcp://%s", p->address);
        int err = 0;
        p->cl = shoal_client_new(ep, (uint32_t)timeout_ms, &err);
        if (!p->cl)
            finding(&f, "member %s cannot be reached at %s (%s%s%s)", jstr(m, "node"), ep,
                    shoal_strerror(err), *shoal_last_error_detail() ? ": " : "",
                    shoal_last_error_detail());
    }
    /* every member's regions registered, and the map as each member's region sees it */
    size_t n_shards = 0, n_types = 0;
    bool any_sharding = false;
    json_t *shard_counts = json_object(); /* type -> {n, at}: every member must agree */
    for (size_t p = 0; p < n_peers; p++) {
        if (!peers[p].cl)
            continue;
        shoal_buf_t map = {0};
        rc = shoal_client_sharding_shards(peers[p].cl, "", &map);
        if (rc == SHOAL_EKIND) { /* no sharding on that member */
            shoal_buf_free(&map);
            continue;
        }
        json_t *root = rc == 0 ? json_loadb(shoal_buf_cstr(&map), map.len, 0, NULL) : NULL;
        if (!root) {
            finding(&f, "member %s did not give its shard map (%s)", peers[p].address,
                    rc < 0 ? shoal_strerror(rc) : "malformed");
            shoal_buf_free(&map);
            continue;
        }
        any_sharding = true;
        json_t *types = types_of(root);
        size_t k;
        json_t *t;
        json_array_foreach(types, k, t) {
            json_t *n = json_object_get(t, "number_of_shards");
            if (json_is_integer(n)) {
                const char *name = jstr(t, "type");
                json_t *seen = json_object_get(shard_counts, name);
                if (!seen)
                    json_object_set_new(
                        shard_counts, name,
                        json_pack("{s:I,s:s}", "n", json_integer_value(n), "at", peers[p].address));
                else if (json_integer_value(json_object_get(seen, "n")) != json_integer_value(n))
                    finding(&f, "%s: number-of-shards is %lld on %s but %lld on %s", name,
                            (long long)json_integer_value(n), peers[p].address,
                            (long long)json_integer_value(json_object_get(seen, "n")),
                            jstr(seen, "at"));
            }
            if (!json_is_true(json_object_get(t, "registered")))
                finding(&f, "%s: the region on %s is not registered with its coordinator (%s)",
                        jstr(t, "type"), peers[p].address,
                        *jstr(t, "coordinator") ? jstr(t, "coordinator") : "none known");
        }
        json_decref(types);
        /* the map itself once, as the asked node (or the first member) sees it */
        if (n_types == 0) {
            n_types = json_array_size(json_object_get(root, "types"));
            n_shards = check_map(root, &f);
        }
        json_decref(root);
        shoal_buf_free(&map);
    }
    json_decref(shard_counts);
    size_t n_keys = 0;
    for (size_t r = 0; r < n_roles; r++)
        n_keys += check_replicas(peers, n_peers, roles[r], &f);
    /* each member's durable store: how close to map_max */
    store_t *stores = calloc(n_peers + 1, sizeof *stores);
    if (!stores)
        abort();
    size_t n_stores = 0;
    for (size_t p = 0; p < n_peers; p++) {
        double skew = -1;
        if (!peers[p].cl)
            continue;
        bool has_store = store_of(peers[p].cl, peers[p].address, &stores[n_stores], &skew);
        if (skew > CLOCK_SKEW_MAX_S)
            finding(&f,
                    "%s and a peer have wall clocks %.1f s apart, as its gossip sees it "
                    "(shoal_node_clock_skew_seconds): check time sync (chrony, timedatectl) on "
                    "both (docs/operations.md, Runbook: ShoalClockSkew)",
                    peers[p].address, skew);
        if (!has_store)
            continue;
        const store_t *st = &stores[n_stores++];
        if (st->used > STORE_FULL_FRACTION * st->max)
            finding(&f,
                    "the durable store of %s is %.0f%% full: %.0f of %.0f bytes (map_max) used; "
                    "raise map_max or free keys before writes fail (docs/operations.md, Runbook: "
                    "ShoalStoreNearFull)",
                    st->address, 100 * st->used / st->max, st->used, st->max);
    }
    for (size_t p = 0; p < n_peers; p++)
        shoal_client_destroy(&peers[p].cl);
    for (size_t r = 0; r < n_roles; r++)
        free(roles[r]);
    free(roles);
    free(peers);
    json_decref(view);
    shoal_buf_free(&text);
    if (as_json) {
        json_t *o = json_object(), *fs = json_array(), *ss = json_array();
        for (size_t k = 0; k < f.n; k++)
            json_array_append_new(fs, json_string(f.lines[k]));
        for (size_t k = 0; k < n_stores; k++)
            json_array_append_new(ss, json_pack("{s:s,s:I,s:I,s:f}", "member", stores[k].address,
                                                "used_bytes", (json_int_t)stores[k].used,
                                                "map_max_bytes", (json_int_t)stores[k].max,
                                                "used_fraction", stores[k].used / stores[k].max));
        json_object_set_new(o, "ok", json_boolean(f.n == 0));
        json_object_set_new(o, "findings", fs);
        json_object_set_new(o, "members_up", json_integer((json_int_t)n_up));
        json_object_set_new(o, "sharding", json_boolean(any_sharding));
        json_object_set_new(o, "entity_types", json_integer((json_int_t)n_types));
        json_object_set_new(o, "shards", json_integer((json_int_t)n_shards));
        json_object_set_new(o, "keys", json_integer((json_int_t)n_keys));
        json_object_set_new(o, "stores", ss);
        char *out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        printf("%s\n", out ? out : "{}");
        free(out);
        json_decref(o);
    } else {
        for (size_t k = 0; k < n_stores; k++)
            printf("[STORE] %s: %.0f of %.0f bytes used (%.1f%% of map_max)\n",
                   stores[k].address, stores[k].used, stores[k].max,
                   100 * stores[k].used / stores[k].max);
        for (size_t k = 0; k < f.n; k++)
            printf("[ERR] %s\n", f.lines[k]);
    }
    free(stores);
    for (size_t k = 0; k < f.n; k++)
        free(f.lines[k]);
    free(f.lines);
    if (as_json)
        return f.n ? EXIT_ANSWERED_ERROR : 0;
    if (f.n) {
        printf("%zu finding%s\n", f.n, f.n == 1 ? "" : "s");
        return EXIT_ANSWERED_ERROR;
    }
    printf("[OK] %zu members Up; ", n_up);
    if (any_sharding)
        printf("%zu entity type%s, %zu shards, each with one home, every region registered; ",
               n_types, n_types == 1 ? "" : "s", n_shards);
    printf("%zu key%s agree%s on every replica\n", n_keys, n_keys == 1 ? "" : "s",
           n_keys == 1 ? "s" : "");
    return 0;
}

/* Whether an HTTP server answers at endpoint (tcp://ADDRESS:PORT): asked when the ZeroMQ
   handshake did not complete, since an HTTP server waits for a request line the handshake never
   sends, and the tool would only time out. One GET, a reply within ms. */
static bool answers_http(const char *endpoint, int ms)
{
    char host[300];
    const char *h = endpoint + 6, *colon = strrchr(h, ':');
    if (strncmp(endpoint, "tcp://", 6) != 0 || !colon || (size_t)(colon - h) >= sizeof host)
        return false;
    memcpy(host, h, (size_t)(colon - h));
    host[colon - h] = 0;
    if (host[0] == '[') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV},
                    *res = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
        return false;
    bool http = false;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        struct pollfd p = {fd, POLLOUT, 0};
        int c = connect(fd, res->ai_addr, res->ai_addrlen);
        if ((c == 0 || errno == EINPROGRESS) && poll(&p, 1, ms) == 1 && (p.revents & POLLOUT)) {
            static const char req[] = "GET /health/alive HTTP/1.0\r\n\r\n";
            char buf[8] = "";
            p.events = POLLIN;
            if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1) &&
                poll(&p, 1, ms) == 1 && recv(fd, buf, 5, 0) == 5)
                http = memcmp(buf, "HTTP/", 5) == 0;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return http;
}

/* `reload`: POST /reload to the management endpoint at spec ([HOST:]PORT or http://HOST:PORT),
   with the token of token_file. A small HTTP/1.0 client (the endpoint closes after the answer):
   the tool has no HTTP library, and this is one request. */
static int cmd_reload(const char *spec, const char *token_file, long timeout_ms)
{
    if (strncmp(spec, "https://", 8) == 0) {
        fprintf(stderr,
                "shoal-cluster: reload speaks plain HTTP; for an HTTPS endpoint: curl --cacert "
                "CERT -X POST -H 'Content-Type: application/json' -H \"Authorization: Bearer "
                "$(head -n1 TOKEN_FILE)\" -d '{}' %s/reload\n",
                spec);
        return EXIT_USAGE;
    }
    if (strncmp(spec, "http://", 7) == 0)
        spec += 7;
    char host[300], port_s[8];
    uint16_t port = 0;
    if (shoal_http_parse(spec, host, sizeof host, &port) != 0 || port == 0) {
        fprintf(stderr,
                "shoal-cluster: reload takes the node's management endpoint, [HOST:]PORT (HOST "
                "an address) or http://HOST:PORT, not '%s'\n",
                spec);
        return EXIT_USAGE;
    }
    char token[4096] = "";
    if (token_file) {
        FILE *f = fopen(token_file, "r");
        if (!f || !fgets(token, sizeof token, f)) {
            fprintf(stderr, "shoal-cluster: --token-file %s: %s\n", token_file,
                    f ? "empty" : strerror(errno));
            if (f)
                fclose(f);
            return EXIT_USAGE;
        }
        fclose(f);
        token[strcspn(token, "\r\n")] = 0;
    }
    snprintf(port_s, sizeof port_s, "%u", (unsigned)port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV},
                    *res = NULL;
    if (getaddrinfo(host, port_s, &hints, &res) != 0) {
        fprintf(stderr, "shoal-cluster: reload: bad address '%s'\n", host);
        return EXIT_USAGE;
    }
    char req[4600];
    bool v6 = strchr(host, ':') != NULL;
    int n = snprintf(req, sizeof req,
                     "POST /reload HTTP/1.0\r\nHost: %s%s%s:%u\r\nContent-Type: "
                     "application/json\r\nContent-Length: 2\r\n%s%s%sConnection: close\r\n\r\n{}",
                     v6 ? "[" : "", host, v6 ? "]" : "", (unsigned)port,
                     *token ? "Authorization: Bearer " : "", token, *token ? "\r\n" : "");
    explicit_bzero(token, sizeof token);
    static char buf[65536];
    size_t got = 0;
    bool sent = false;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        struct pollfd p = {fd, POLLOUT, 0};
        int c = connect(fd, res->ai_addr, res->ai_addrlen);
        if ((c == 0 || errno == EINPROGRESS) && poll(&p, 1, (int)timeout_ms) == 1 &&
            (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLHUP))) {
            sent = send(fd, req, (size_t)n, MSG_NOSIGNAL) == n;
            p.events = POLLIN;
            while (sent && got < sizeof buf - 1 && poll(&p, 1, (int)timeout_ms) == 1) {
                ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
                if (r <= 0)
                    break;
                got += (size_t)r;
            }
        }
        close(fd);
    }
    explicit_bzero(req, sizeof req);
    freeaddrinfo(res);
    buf[got] = 0;
    int status = 0;
    if (!sent || sscanf(buf, "HTTP/%*d.%*d %d", &status) != 1) {
        fprintf(stderr, "shoal-cluster: cannot reach the management endpoint at %s:%u%s\n",
                host, (unsigned)port,
                got ? " (it did not answer HTTP: an HTTPS endpoint? see --help)" : "");
        return EXIT_UNREACHABLE;
    }
    const char *body = strstr(buf, "\r\n\r\n");
    body = body ? body + 4 : "";
    /* the answer is {"reloaded":LINE}, {"reload":"requested",...} or {"error":...} */
    json_t *j = json_loads(body, 0, NULL);
    const char *line = j ? json_string_value(json_object_get(j, "reloaded")) : NULL;
    const char *err = j ? json_string_value(json_object_get(j, "error")) : NULL;
    int code = 0;
    if (status == 200 && line) {
        printf("%s\n", line);
    } else if (status == 202) {
        printf("reload requested (TLS: the node reloads right after its answer; its stdout and "
               "log say how it went)\n");
    } else {
        fprintf(stderr, "shoal-cluster: reload refused by %s:%u: HTTP %d%s%s%s\n", host,
                (unsigned)port, status, err || *body ? ": " : "", err ? err : body,
                status == 401   ? " (give the endpoint's token: --token-file FILE)"
                : status == 404 ? " (this program has no POST /reload: send it SIGHUP)"
                                : "");
        code = EXIT_ANSWERED_ERROR;
    }
    json_decref(j);
    return code;
}

int main(int argc, char **argv)
{
    /* SHOAL_NODE names the default node, as SERF_RPC_ADDR does for serf; --node overrides it */
    const char *env_node = getenv("SHOAL_NODE");
    const char *node = env_node && *env_node ? env_node : "tcp://127.0.0.1:2552";
    bool node_flag = false;
    bool json = false;
    long timeout_ms = 3000;
    int cli = cli_help_or_version(&argc, argv, "shoal-cluster", usage);
    if (cli >= 0)
        return cli;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--node") == 0 && i + 1 < argc) {
            node = argv[++i];
            node_flag = true;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
            char *end = NULL;
            timeout_ms = strtol(argv[++i], &end, 10);
            if (!end || *end || timeout_ms <= 0 || timeout_ms > 3600000) {
                fprintf(stderr, "shoal-cluster: --timeout takes milliseconds (1..3600000), not "
                                "'%s'\n", argv[i]);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "shoal-cluster: %s '%s'\n",
                    strcmp(a, "--node") == 0 || strcmp(a, "--timeout") == 0 ? "missing value for"
                                                                             : "unknown option",
                    a);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (i >= argc) {
        fprintf(stderr, "shoal-cluster: no command\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[i++];
    if (strcmp(cmd, "reload") == 0) {
        /* over the management endpoint, not the node's client connection: --node is not used */
        const char *spec = NULL, *token_file = NULL;
        for (; i < argc; i++) {
            if (strcmp(argv[i], "--token-file") == 0 && i + 1 < argc)
                token_file = argv[++i];
            else if (!spec && argv[i][0] != '-')
                spec = argv[i];
            else
                break;
        }
        if (!spec || i < argc) {
            fprintf(stderr, "shoal-cluster: reload takes HTTP (the node's --http endpoint, "
                            "[HOST:]PORT) and optionally --token-file FILE\n");
            usage(stderr);
            return EXIT_USAGE;
        }
        return cmd_reload(spec, token_file, timeout_ms);
    }
    /* each command's arguments: at least min, at most max */
    static const struct {
        const char *name;
        int min, max;
        const char *says;
    } cmds[] = {
        {"members", 0, 0, "no argument but --status S and --role R"},        {"join", 1, 1, "one argument"},
        {"leave", 0, 1, "at most one argument"}, {"down", 1, 1, "one argument"},
        {"forget", 1, 1, "one argument"},        {"shards", 0, 1, "at most one argument (TYPE)"},
        {"check", 0, 0, "no argument"},          {"rebalance", 1, 1, "one argument (TYPE)"},
        {"move", 3, 3, "three arguments (TYPE SHARD MEMBER)"},
        {"unpin", 2, 2, "two arguments (TYPE SHARD)"},
        {"events", 0, 0, "no argument"},
    };
    int which = -1;
    for (size_t k = 0; k < sizeof cmds / sizeof *cmds; k++)
        if (strcmp(cmd, cmds[k].name) == 0)
            which = (int)k;
    if (which < 0) {
        fprintf(stderr, "shoal-cluster: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    member_filter_t filter = {NULL, NULL};
    if (strcmp(cmd, "members") == 0) {
        for (; i < argc; i++) {
            const char *o = argv[i];
            bool st = strcmp(o, "--status") == 0, ro = strcmp(o, "--role") == 0;
            if (!st && !ro)
                break; /* an argument members does not take: said below */
            if (i + 1 >= argc) {
                fprintf(stderr, "shoal-cluster: missing value for '%s'\n", o);
                usage(stderr);
                return EXIT_USAGE;
            }
            const char *val = argv[++i];
            if (st && !status_known(val)) {
                fprintf(stderr,
                        "shoal-cluster: members --status takes up, weakly-up, joining, leaving, "
                        "exiting, down or removed, not '%s'\n",
                        val);
                return EXIT_USAGE;
            }
            if (st)
                filter.status = val;
            else
                filter.role = val;
        }
    }
    int n_args = argc - i;
    if (n_args < cmds[which].min || n_args > cmds[which].max) {
        fprintf(stderr, "shoal-cluster: %s takes %s\n", cmd, cmds[which].says);
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *arg = n_args > 0 ? argv[i] : NULL;
    const char *arg2 = n_args > 1 ? argv[i + 1] : NULL;
    const char *arg3 = n_args > 2 ? argv[i + 2] : NULL;
    bool sharding_cmd = strcmp(cmd, "shards") == 0 || strcmp(cmd, "rebalance") == 0 ||
                        strcmp(cmd, "move") == 0 || strcmp(cmd, "unpin") == 0;
    /* HOST:PORT or tcp://HOST:PORT, a host name resolved (cli.h, NODE ADDRESSES) */
    char node_buf[300], seed_buf[300], awhy[400];
    if (cli_node_address(node, node_buf, sizeof node_buf, awhy, sizeof awhy) != 0) {
        fprintf(stderr, "shoal-cluster: %s %s\n", node_flag ? "--node" : "SHOAL_NODE", awhy);
        return EXIT_USAGE;
    }
    node = node_buf;
    if (strcmp(cmd, "join") == 0) {
        if (cli_node_address(arg, seed_buf, sizeof seed_buf, awhy, sizeof awhy) != 0) {
            fprintf(stderr, "shoal-cluster: join SEED %s\n", awhy);
            return EXIT_USAGE;
        }
        arg = seed_buf;
    }
    /* a MEMBER is host:port[:uid]; tcp:// before it, as before a node, is taken off */
    if (arg && strncmp(arg, "tcp://", 6) == 0 &&
        (strcmp(cmd, "leave") == 0 || strcmp(cmd, "down") == 0))
        arg += 6;
    if (arg3 && strncmp(arg3, "tcp://", 6) == 0 && strcmp(cmd, "move") == 0)
        arg3 += 6;

    int rc = 0;
    /* a sharding request waits on the node for other members (entity counts, the coordinator's
       majority write) within their own deadlines: the tool waits for those too */
    long client_ms = sharding_cmd ? timeout_ms + 8000 : timeout_ms;
    /* the handshake gets a second at first: past it, a management endpoint given for the node
       (an HTTP server never answers a ZeroMQ handshake) is said at once rather than timed out */
    long first_ms = client_ms < 1000 ? client_ms : 1000;
    shoal_client_t *cl = shoal_client_new(node, (uint32_t)first_ms, &rc);
    if (!cl && rc != SHOAL_EINVAL && rc != SHOAL_EREFUSED && answers_http(node, 1000)) {
        fprintf(stderr,
                "shoal-cluster: %s answers HTTP: that is a management endpoint (--http); give "
                "the node's own address (its --bind, e.g. 127.0.0.1:2552)\n",
                node);
        return EXIT_USAGE;
    }
    if (!cl && rc != SHOAL_EINVAL && rc != SHOAL_EREFUSED && client_ms > first_ms)
        cl = shoal_client_new(node, (uint32_t)(client_ms - first_ms), &rc);
    if (cl)
        shoal_client_set_timeout(cl, (uint32_t)client_ms);
    if (!cl) {
        if (rc == SHOAL_EINVAL) {
            fprintf(stderr, "shoal-cluster: --node takes an endpoint tcp://host:port, not '%s'\n",
                    node);
            return EXIT_USAGE;
        }
        if (rc == SHOAL_EREFUSED) {
            const char *why = shoal_last_error_detail();
            fprintf(stderr, "shoal-cluster: the node at %s refused the connection%s%s\n", node,
                    *why ? ": " : "", why);
            return EXIT_ANSWERED_ERROR;
        }
        fprintf(stderr, "shoal-cluster: cannot reach node at %s (%s)\n", node, shoal_strerror(rc));
        return EXIT_UNREACHABLE;
    }

    int code = 0;
    char what[512];
    if (strcmp(cmd, "shards") == 0) {
        code = cmd_shards(cl, node, arg, json);
    } else if (strcmp(cmd, "check") == 0) {
        code = cmd_check(cl, node, timeout_ms, json);
    } else if (strcmp(cmd, "events") == 0) {
        code = cmd_events(cl, node, json);
    } else if (strcmp(cmd, "rebalance") == 0 || strcmp(cmd, "unpin") == 0) {
        code = cmd_action(cl, node, cmd, arg, arg2, NULL);
    } else if (strcmp(cmd, "move") == 0) {
        code = cmd_action(cl, node, cmd, arg, arg2, arg3);
        if (code == 0)
            code = wait_moved(cl, node, arg, arg2, arg3, timeout_ms > 10000 ? timeout_ms : 10000);
    } else if (strcmp(cmd, "members") == 0) {
        shoal_buf_t text = {0};
        rc = shoal_client_cluster_view(cl, &text);
        if (rc < 0) {
            snprintf(what, sizeof what, "%s%s%s", shoal_strerror(rc), text.len ? ": " : "",
                     text.len ? shoal_buf_cstr(&text) : "");
            code = fail_request(node, what, rc);
        } else if (json) {
            print_view_json(shoal_buf_cstr(&text), &filter);
        } else {
            view_t v;
            if (!parse_view(shoal_buf_cstr(&text), text.len, &v)) {
                fprintf(stderr, "shoal-cluster: %s: malformed view from the node\n", node);
                code = EXIT_ANSWERED_ERROR;
            } else {
                size_t all = filter_rows(&v, &filter);
                print_table(&v);
                if (filtering(&filter))
                    printf("(%zu of %zu members:%s%s%s%s)\n", v.n_rows, all,
                           filter.status ? " status " : "", filter.status ? filter.status : "",
                           filter.role ? " role " : "", filter.role ? filter.role : "");
            }
            free(v.rows);
        }
        shoal_buf_free(&text);
    } else if (strcmp(cmd, "forget") == 0) {
        shoal_buf_t text = {0};
        rc = shoal_client_cluster_forget(cl, arg, &text);
        snprintf(what, sizeof what, "%s", text.len ? shoal_buf_cstr(&text) : shoal_strerror(rc));
        if (rc < 0)
            code = fail_request(node, what, rc);
        else
            printf("%s\n", what);
        shoal_buf_free(&text);
    } else if (strcmp(cmd, "join") == 0) {
        rc = shoal_client_cluster_join(cl, arg);
        if (rc == SHOAL_ESTATE)
            snprintf(what, sizeof what, "already a member of a cluster");
        else
            snprintf(what, sizeof what, "join through %s: %s", arg, shoal_strerror(rc));
        if (rc < 0)
            code = fail_request(node, what, rc);
        else
            printf("joining through %s\n", arg);
    } else {
        bool leave = strcmp(cmd, "leave") == 0;
        rc = leave ? shoal_client_cluster_leave(cl, arg ? arg : "")
                   : shoal_client_cluster_down(cl, arg);
        if (rc == SHOAL_ENOTMEMBER)
            snprintf(what, sizeof what, "no such member '%s'", arg ? arg : "(self)");
        else if (rc == SHOAL_ESTATE)
            snprintf(what, sizeof what, "%s: not allowed in the member's current status",
                     arg ? arg : "(self)");
        else
            snprintf(what, sizeof what, "%s %s: %s", cmd, arg ? arg : "(self)", shoal_strerror(rc));
        if (rc < 0)
            code = fail_request(node, what, rc);
        else
            printf("%s %s: requested\n", leave ? "leave" : "down", arg ? arg : "(the node itself)");
    }
    shoal_client_destroy(&cl);
    return code;
}
