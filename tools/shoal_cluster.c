/*  shoal-cluster — the operator tool of a Shoal cluster (like `serf members` / `serf force-leave`
    or Akka Management's cluster HTTP routes): asks one running member over a client connection.

      shoal-cluster [--node ENDPOINT] [--json] [--timeout MS] members
      shoal-cluster [--node ENDPOINT] [--timeout MS] join SEED_ENDPOINT
      shoal-cluster [--node ENDPOINT] [--timeout MS] leave [MEMBER]
      shoal-cluster [--node ENDPOINT] [--timeout MS] down MEMBER
      shoal-cluster [--node ENDPOINT] [--timeout MS] forget ID

    --node     the member to ask (default tcp://127.0.0.1:2552)
    --json     `members` prints the node's view as JSON, as the node renders it
    --timeout  how long to wait for the node, in ms (default 3000)
    --help     the usage on stdout; --version: "shoal-cluster VERSION"
    MEMBER is a node id host:port:uid, or host:port for the live incarnation there; `leave`
    without MEMBER makes the asked node itself leave. `forget ID` drops a durable identity that
    will never return from the kept membership (majorities count the kept identities across a
    restart of every node; see `members --json`, "kept"), on the asked node and every member it
    reaches.

    Exit codes: 0 ok; 1 the node answered with an error; 2 usage error; 3 the node could not be
    reached in time.
*/
#include "cli.h"
#include "membership.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_ANSWERED_ERROR 1
#define EXIT_USAGE 2
#define EXIT_UNREACHABLE 3

static void usage(FILE *f)
{
    fprintf(f, "usage: shoal-cluster [--node ENDPOINT] [--json] [--timeout MS] COMMAND\n"
               "       shoal-cluster --help | --version\n"
               "  members              the members as the node sees them\n"
               "  join SEED_ENDPOINT   make the node join the cluster of that seed\n"
               "  leave [MEMBER]       a member (default: the node itself) leaves gracefully\n"
               "  down MEMBER          mark a member Down (it is removed and must restart)\n"
               "  forget ID            drop a durable identity that will never return from the\n"
               "                       kept membership (majorities stop counting it)\n"
               "MEMBER is host:port:uid or host:port. Default node tcp://127.0.0.1:2552.\n");
}

/* ---------------------------------------------------------------------------------------------
 * A small reader for the node's JSON view: the tool only needs the flat fields it renders, and the
   node's JSON is machine-made (admin.c), but a reply is still input from the network: every read
   is bounded and a malformed reply is an error, never a crash.
 */
typedef struct {
    const char *p, *end;
} json_t;

static void skip_ws(json_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static bool eat(json_t *j, char ch)
{
    skip_ws(j);
    if (j->p < j->end && *j->p == ch) {
        j->p++;
        return true;
    }
    return false;
}

/* A string into out (truncated to cap-1; escapes \" \\ and \u00XX decoded). */
static bool read_str(json_t *j, char *out, size_t cap)
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
static bool skip_value(json_t *j, int depth)
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
static bool read_scalar(json_t *j, char *out, size_t cap)
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
} row_t;

typedef struct {
    char self[SHOAL_NODE_ID_MAX + 1], leader[SHOAL_NODE_ID_MAX + 1], converged[8], version[32];
    char in_cluster[8], joining[8], outside_since[32]; /* set only for a node in no cluster */
    char discovery[512]; /* what seed discovery waits for, when the node finds its seeds by DNS */
    row_t *rows;
    size_t n_rows;
} view_t;

static bool read_member(json_t *j, row_t *r)
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
    json_t j = {text, text + len};
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
    printf("node %s  leader %s  converged %s  version %s  members %zu\n", v->self,
           *v->leader && strcmp(v->leader, "null") != 0 ? v->leader : "(none)",
           strcmp(v->converged, "true") == 0 ? "yes" : "no", v->version, v->n_rows);
    int aw = 7;
    for (size_t i = 0; i < v->n_rows; i++) {
        int l = (int)strlen(v->rows[i].address);
        if (l > aw)
            aw = l;
    }
    printf("  %-*s  %-20s  %-9s  %5s  %-9s  %s\n", aw, "ADDRESS", "UID", "STATUS", "AGE",
           "REACHABLE", "ROLES");
    for (size_t i = 0; i < v->n_rows; i++) {
        const row_t *r = &v->rows[i];
        printf("%c %-*s  %-20s  %-9s  %5s  %-9s  %s\n", strcmp(r->leader, "true") == 0 ? '*' : ' ',
               aw, r->address, uid_of(r->node), r->status,
               strcmp(r->up_number, "0") == 0 ? "-" : r->up_number,
               strcmp(r->reachable, "true") == 0 ? "yes" : "NO", *r->roles ? r->roles : "-");
    }
    printf("(* = leader; AGE = up-number, lower is older)\n");
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

int main(int argc, char **argv)
{
    const char *node = "tcp://127.0.0.1:2552";
    bool json = false;
    long timeout_ms = 3000;
    int cli = cli_help_or_version(argc, argv, "shoal-cluster", usage);
    if (cli >= 0)
        return cli;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--node") == 0 && i + 1 < argc) {
            node = argv[++i];
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
    const char *arg = i < argc ? argv[i++] : NULL;
    int max_args = strcmp(cmd, "members") == 0 ? 0 : 1;
    bool needs_arg =
        strcmp(cmd, "join") == 0 || strcmp(cmd, "down") == 0 || strcmp(cmd, "forget") == 0;
    if (strcmp(cmd, "members") != 0 && strcmp(cmd, "join") != 0 && strcmp(cmd, "leave") != 0 &&
        strcmp(cmd, "down") != 0 && strcmp(cmd, "forget") != 0) {
        fprintf(stderr, "shoal-cluster: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((arg && max_args == 0) || i < argc || (needs_arg && !arg)) {
        fprintf(stderr, "shoal-cluster: %s takes %s\n", cmd,
                max_args == 0 ? "no argument" : needs_arg ? "one argument" : "at most one argument");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(cmd, "join") == 0 && strncmp(arg, "tcp://", 6) != 0 &&
        strncmp(arg, "ipc://", 6) != 0) {
        fprintf(stderr, "shoal-cluster: join takes a seed endpoint tcp://host:port, not '%s'\n",
                arg);
        return EXIT_USAGE;
    }

    int rc = 0;
    shoal_client_t *cl = shoal_client_new(node, (uint32_t)timeout_ms, &rc);
    if (!cl) {
        if (rc == SHOAL_EINVAL) {
            fprintf(stderr, "shoal-cluster: --node takes an endpoint tcp://host:port, not '%s'\n",
                    node);
            return EXIT_USAGE;
        }
        if (rc == SHOAL_EREFUSED) {
            fprintf(stderr, "shoal-cluster: the node at %s refused the connection\n", node);
            return EXIT_ANSWERED_ERROR;
        }
        fprintf(stderr, "shoal-cluster: cannot reach node at %s (%s)\n", node, shoal_strerror(rc));
        return EXIT_UNREACHABLE;
    }

    int code = 0;
    char what[512];
    if (strcmp(cmd, "members") == 0) {
        shoal_buf_t text = {0};
        rc = shoal_client_cluster_view(cl, &text);
        if (rc < 0) {
            snprintf(what, sizeof what, "%s%s%s", shoal_strerror(rc), text.len ? ": " : "",
                     text.len ? shoal_buf_cstr(&text) : "");
            code = fail_request(node, what, rc);
        } else if (json) {
            printf("%s\n", shoal_buf_cstr(&text));
        } else {
            view_t v;
            if (!parse_view(shoal_buf_cstr(&text), text.len, &v)) {
                fprintf(stderr, "shoal-cluster: %s: malformed view from the node\n", node);
                code = EXIT_ANSWERED_ERROR;
            } else {
                print_table(&v);
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
