/*  cli.h — the flags every Shoal program answers the same way, tools, examples and the chaos
    programs alike:

      --help, -h    the usage on stdout, exit 0
      --version     one line "NAME VERSION" on stdout (SHOAL_VERSION, from ddata.h), exit 0
      --log-level LEVEL
                    error, warning, info (the default) or debug: the lines Shoal logs to stderr
                    (ddata.h, Logs). Taken out of argv before the program reads its own flags;
                    exported as SHOAL_LOG_LEVEL, so the children a program starts log alike, and
                    read from SHOAL_LOG_LEVEL when the flag is not given. A bad level: exit 2.
      --log-format text|json
                    text (the default) or one JSON object a line (ts, level, node, module, msg:
                    ddata.h, Logs); likewise taken out of argv, exported as SHOAL_LOG_FORMAT and
                    read from it. A bad format: exit 2.

    A usage error is each program's own: the usage on stderr, exit 2. Header-only, because the
    programs are single files and the library has no business printing usage.

      int main(int argc, char **argv)
      {
          int cli = cli_help_or_version(&argc, argv, "kvstore", usage);
          if (cli >= 0)
              return cli;
          ...
*/
#ifndef SHOAL_CLI_H
#define SHOAL_CLI_H

#include <stdarg.h>

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ddata.h"
#include "membership.h"
#include "sharding.h"

#define CLI_LOG_LEVEL_USAGE                                                                        \
    "every Shoal program: --log-level error|warning|info|debug (default info, or "                 \
    "SHOAL_LOG_LEVEL)\n"                                                                           \
    "                     --log-format text|json (default text, or SHOAL_LOG_FORMAT)\n"

/* Takes "--FLAG VALUE" out of argv (every occurrence before a "--"; the last wins): 1 and *value
   when present, 0 when absent, -1 when the flag has no value. */
static inline int cli_take_value(int *argc, char **argv, const char *flag, const char **value)
{
    int found = 0;
    for (int i = 1; i < *argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], flag) != 0)
            continue;
        if (i + 1 >= *argc)
            return -1;
        *value = argv[i + 1];
        found = 1;
        for (int k = i; k + 2 <= *argc; k++) /* argv[argc] (NULL) moves down too */
            argv[k] = argv[k + 2];
        *argc -= 2;
        i--;
    }
    return found;
}

/* Either flag anywhere before a "--" (none of the programs takes a value that starts with "--help"
   or "--version"): prints what it asks for and returns 0, the exit code. Then --log-level LEVEL
   (or SHOAL_LOG_LEVEL), removed from argv and *argc: 2 (the usage on stderr) for a bad level.
   -1 when the program goes on. `usage` writes the program's usage to the stream it is given. */
static inline int cli_help_or_version(int *argc, char **argv, const char *name,
                                      void (*usage)(FILE *))
{
    for (int i = 1; i < *argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            printf(CLI_LOG_LEVEL_USAGE);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("%s %s\n", name, SHOAL_VERSION);
            return 0;
        }
    }
    const char *level = getenv("SHOAL_LOG_LEVEL");
    int taken = cli_take_value(argc, argv, "--log-level", &level);
    if (taken < 0) {
        fprintf(stderr, "%s: --log-level takes error, warning, info or debug\n", name);
        usage(stderr);
        return 2;
    }
    bool flag = taken > 0;
    const char *format = getenv("SHOAL_LOG_FORMAT");
    int ftaken = cli_take_value(argc, argv, "--log-format", &format);
    if (ftaken < 0) {
        fprintf(stderr, "%s: --log-format takes text or json\n", name);
        usage(stderr);
        return 2;
    }
    if (format && *format) {
        shoal_log_format_t f;
        if (shoal_log_format_parse(format, &f) != 0) {
            fprintf(stderr, "%s: %s '%s': text or json\n", name,
                    ftaken ? "--log-format takes" : "SHOAL_LOG_FORMAT is", format);
            usage(stderr);
            return 2;
        }
        shoal_log_set_format(f);
        if (ftaken)
            setenv("SHOAL_LOG_FORMAT", f == SHOAL_LOG_JSON ? "json" : "text", 1);
    }
    if (level && *level) {
        shoal_log_level_t l;
        if (shoal_log_level_parse(level, &l) != 0) {
            fprintf(stderr, "%s: %s '%s': error, warning, info or debug\n", name,
                    flag ? "--log-level takes" : "SHOAL_LOG_LEVEL is", level);
            usage(stderr);
            return 2;
        }
        shoal_log_set_level(l);
        if (flag)
            setenv("SHOAL_LOG_LEVEL", shoal_log_level_name(l), 1);
    }
    return -1;
}

/* The programs that start a node and take --bind also take, anywhere before a "--":
     --allow-from CIDR  (repeatable) only these networks may connect to the node's listeners,
                        checked at the ZeroMQ handshake; replaces shoal/remote/artery/allow-from
     --insecure         a plain node may bind a non-loopback address open to any host
   (ddata.h, PROTECTED MODE). cli_node_access takes them out of argv; cli_node_access_apply puts
   them into the settings, after the configuration file's. */
#define CLI_NODE_ACCESS_USAGE                                                                      \
    "  --allow-from CIDR  only these networks may connect (repeatable; a plain node bound off\n"   \
    "                     loopback needs it, CURVE or --insecure)\n"                               \
    "  --insecure         a plain node off loopback takes connections from any host\n"

#define CLI_ALLOW_FROM_MAX 64
typedef struct {
    const char *allow_from[CLI_ALLOW_FROM_MAX];
    size_t n_allow_from;
    bool insecure;
} cli_node_access_t;

/* 0, or 2 (a message on stderr) for --allow-from without a value or past 64 of them. */
static inline int cli_node_access(int *argc, char **argv, const char *name, cli_node_access_t *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 1; i < *argc && strcmp(argv[i], "--") != 0; i++) {
        int take = 0;
        if (strcmp(argv[i], "--insecure") == 0) {
            out->insecure = true;
            take = 1;
        } else if (strcmp(argv[i], "--allow-from") == 0) {
            if (i + 1 >= *argc || out->n_allow_from == CLI_ALLOW_FROM_MAX) {
                fprintf(stderr, "%s: --allow-from takes a network (10.0.0.0/8), at most %d\n", name,
                        CLI_ALLOW_FROM_MAX);
                return 2;
            }
            out->allow_from[out->n_allow_from++] = argv[i + 1];
            take = 2;
        }
        if (!take)
            continue;
        for (int k = i; k + take <= *argc; k++) /* argv[argc] (NULL) moves down too */
            argv[k] = argv[k + take];
        *argc -= take;
        i--;
    }
    return 0;
}

static inline void cli_node_access_apply(const cli_node_access_t *a, shoal_system_settings_t *ss)
{
    if (a->n_allow_from) {
        ss->allow_from = a->allow_from;
        ss->n_allow_from = a->n_allow_from;
    }
    if (a->insecure)
        ss->insecure = true;
}

/* NODE ADDRESSES. Wherever a program names a node (--node, --bind, --seed, shoal-cluster join,
   the kvstore client's NODE) it takes any of
       HOST:PORT   tcp://HOST:PORT   [V6]:PORT   tcp://[V6]:PORT   PORT   ipc://PATH
   HOST an IP address or a host name, PORT 0..65535 in digits; a PORT alone is 127.0.0.1:PORT.
   A host name is resolved here, once, to its first IPv4 address (else its first IPv6 one): a
   node told `--bind tcp://localhost:2552` binds tcp://127.0.0.1:2552 and its node id records
   127.0.0.1:2552, the address peers dial (libzmq alone takes a name in a bind for a network
   interface and fails with "No such device"). A name that does not resolve but names a network
   interface ("lo", "eth0") is passed on as it is: libzmq binds that interface, as before.
   cli_node_address writes tcp://ADDRESS:PORT (or the ipc:// endpoint) into out: 0, or -1 with
   why (what was wrong and what was expected) for the caller to print after its flag's name. */
#define CLI_NODE_ADDRESS_EXPECTED                                                                  \
    "expected HOST:PORT or tcp://HOST:PORT (HOST an address or a name, PORT 0-65535)"

/* The first IPv4 address of host (else its first IPv6 one, in brackets when bracket is set), as
   a literal in lit. An address literal is its own answer. 0, or -1 with why. */
static inline int cli_resolve_host(const char *host, bool bracket, char *lit, size_t cap, char *why,
                                   size_t whylen)
{
    unsigned char buf[sizeof(struct in6_addr)];
    char text[INET6_ADDRSTRLEN] = "";
    bool v6 = false;
    if (inet_pton(AF_INET, host, buf) == 1) {
        snprintf(text, sizeof text, "%.45s", host);
    } else if (inet_pton(AF_INET6, host, buf) == 1) {
        snprintf(text, sizeof text, "%.45s", host);
        v6 = true;
    } else {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int g = getaddrinfo(host, NULL, &hints, &res);
        if (g != 0) {
            snprintf(why, whylen, "cannot resolve host '%.100s' (%.60s)", host, gai_strerror(g));
            return -1;
        }
        const struct addrinfo *pick = NULL;
        for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
            if (ai->ai_family == AF_INET)
                pick = ai;
        for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
            if (ai->ai_family == AF_INET6)
                pick = ai;
        if (pick && pick->ai_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)pick->ai_addr)->sin_addr,
                      text, sizeof text);
        else if (pick) {
            inet_ntop(AF_INET6,
                      &((const struct sockaddr_in6 *)(const void *)pick->ai_addr)->sin6_addr, text,
                      sizeof text);
            v6 = true;
        }
        freeaddrinfo(res);
        if (!pick) {
            snprintf(why, whylen, "host '%.100s' has no IPv4 or IPv6 address", host);
            return -1;
        }
    }
    if ((size_t)snprintf(lit, cap, v6 && bracket ? "[%s]" : "%s", text) >= cap) {
        snprintf(why, whylen, "host '%.100s' too long", host);
        return -1;
    }
    return 0;
}

/* PORT: digits only, 0..65535 (libzmq reads "99999" and "-1" as ports of its own choosing). */
static inline bool cli_port_ok(const char *port)
{
    size_t n = strlen(port);
    return n > 0 && n <= 5 && strspn(port, "0123456789") == n && strtoul(port, NULL, 10) <= 65535;
}

static inline int cli_node_address(const char *in, char *out, size_t cap, char *why, size_t whylen)
{
    char dummy[1];
    if (!why || !whylen) {
        why = dummy;
        whylen = sizeof dummy;
    }
    if (!in || !*in) {
        snprintf(why, whylen, "no address; " CLI_NODE_ADDRESS_EXPECTED);
        return -1;
    }
    if (strncmp(in, "ipc://", 6) == 0) {
        if (!in[6] || (size_t)snprintf(out, cap, "%s", in) >= cap) {
            snprintf(why, whylen, "'%.100s': ipc:// needs a path (of a sane length)", in);
            return -1;
        }
        return 0;
    }
    const char *s = strncmp(in, "tcp://", 6) == 0 ? in + 6 : in;
    char host[256];
    const char *port;
    if (s[0] == '[') { /* [v6]:port */
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':' || close == s + 1 || (size_t)(close - s - 1) >= sizeof host) {
            snprintf(why, whylen, "'%.100s': an IPv6 address goes in brackets, [::1]:PORT; %s", in,
                     CLI_NODE_ADDRESS_EXPECTED);
            return -1;
        }
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = 0;
        port = close + 2;
    } else {
        const char *colon = strrchr(s, ':');
        if (!colon && s == in && cli_port_ok(s)) { /* a port alone: this machine */
            snprintf(host, sizeof host, "127.0.0.1");
            port = s;
        } else if (!colon || colon == s) {
            snprintf(why, whylen, "'%.100s': no %s; %s", in, colon ? "host" : "port",
                     CLI_NODE_ADDRESS_EXPECTED);
            return -1;
        } else if (memchr(s, ':', (size_t)(colon - s))) {
            snprintf(why, whylen, "'%.100s': an IPv6 address goes in brackets, [::1]:PORT; %s", in,
                     CLI_NODE_ADDRESS_EXPECTED);
            return -1;
        } else if ((size_t)(colon - s) >= sizeof host) {
            snprintf(why, whylen, "'%.100s': host too long; %s", in, CLI_NODE_ADDRESS_EXPECTED);
            return -1;
        } else {
            memcpy(host, s, (size_t)(colon - s));
            host[colon - s] = 0;
            port = colon + 1;
        }
    }
    if (!cli_port_ok(port)) {
        snprintf(why, whylen, "'%.100s': port '%s' is not a number from 0 to 65535; %s", in, port,
                 CLI_NODE_ADDRESS_EXPECTED);
        return -1;
    }
    char lit[INET6_ADDRSTRLEN + 2], rwhy[200];
    if (cli_resolve_host(host, true, lit, sizeof lit, rwhy, sizeof rwhy) != 0) {
        if (s[0] != '[' && if_nametoindex(host) != 0) /* an interface: libzmq's */
            snprintf(lit, sizeof lit, "%.45s", host);
        else {
            snprintf(why, whylen, "'%.100s': %.150s; %s", in, rwhy, CLI_NODE_ADDRESS_EXPECTED);
            return -1;
        }
    }
    if ((size_t)snprintf(out, cap, "tcp://%s:%s", lit, port) >= cap) {
        snprintf(why, whylen, "'%.100s': too long", in);
        return -1;
    }
    return 0;
}

/* --http [HOST:]PORT with HOST an address or a host name (resolved as above: "localhost:8558"
   serves on 127.0.0.1:8558); writes ADDRESS:PORT for shoal_http_start_with into out. 0, or -1
   with why. */
#define CLI_HTTP_ADDRESS_EXPECTED                                                                  \
    "expected [HOST:]PORT (HOST an address or a name, 127.0.0.1 when absent; PORT 0-65535)"
static inline int cli_http_address(const char *in, char *out, size_t cap, char *why, size_t whylen)
{
    if (in && shoal_http_parse(in, NULL, 0, NULL) == 0) {
        if ((size_t)snprintf(out, cap, "%s", in) >= cap) {
            snprintf(why, whylen, "'%.100s': too long", in);
            return -1;
        }
        return 0;
    }
    const char *colon = in ? strrchr(in, ':') : NULL;
    char host[256], lit[INET6_ADDRSTRLEN + 2], rwhy[200];
    if (!colon || colon == in || in[0] == '[' || (size_t)(colon - in) >= sizeof host ||
        !cli_port_ok(colon + 1)) {
        snprintf(why, whylen, "'%.100s': %s", in ? in : "", CLI_HTTP_ADDRESS_EXPECTED);
        return -1;
    }
    memcpy(host, in, (size_t)(colon - in));
    host[colon - in] = 0;
    if (cli_resolve_host(host, true, lit, sizeof lit, rwhy, sizeof rwhy) != 0) {
        snprintf(why, whylen, "'%.100s': %.150s; %s", in, rwhy, CLI_HTTP_ADDRESS_EXPECTED);
        return -1;
    }
    if ((size_t)snprintf(out, cap, "%s:%s", lit, colon + 1) >= cap ||
        shoal_http_parse(out, NULL, 0, NULL) != 0) {
        snprintf(why, whylen, "'%.100s': %s", in, CLI_HTTP_ADDRESS_EXPECTED);
        return -1;
    }
    return 0;
}

/* A configuration file refused: the loader's message, which names the key; the file's path
   before it when the message does not name the file already. */
static inline void cli_config_refused(const char *name, const char *path, const char *err)
{
    if (!err || !*err)
        fprintf(stderr, "%s: %s: the configuration file is invalid\n", name, path ? path : "");
    else if (path && !strstr(err, path))
        fprintf(stderr, "%s: %s: %s\n", name, path, err);
    else
        fprintf(stderr, "%s: %s\n", name, err);
}

/* --config FILE for every program that starts a node: loads the ZPL file (docs/configuration.md)
   and lays it over the settings given (any may be NULL), as shoal-member does; the program's own
   flags go over it afterwards (every program: payments, session-judge, replicated-map, chaos-node,
   kvstore, counter-service; shoal-member its own way). The config, or NULL with the loader's
   message on stderr, the file named (the program exits 1). The strings the settings take live as
   long as the config: destroy it last. */
static inline shoal_config_t *cli_config_node(const char *name, const char *path,
                                              shoal_system_settings_t *ss,
                                              shoal_cluster_settings_t *cs,
                                              shoal_replicator_settings_t *rs,
                                              shoal_http_settings_t *hs)
{
    char err[512] = "";
    int code = 0;
    shoal_config_t *cfg = shoal_config_load(path, &code);
    if (!cfg)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (!cfg || (ss && shoal_config_system(cfg, ss, err, sizeof err) < 0) ||
        (cs && shoal_config_cluster(cfg, cs, err, sizeof err) < 0) ||
        (rs && shoal_config_replicator(cfg, rs, err, sizeof err) < 0) ||
        (hs && shoal_config_http(cfg, hs, err, sizeof err) < 0)) {
        cli_config_refused(name, path, err);
        shoal_config_destroy(&cfg);
        return NULL;
    }
    return cfg;
}

/* --config's caps (docs/configuration.md: shoal/cluster/distributed-data/max-keys and max-bytes,
   shoal/cluster/sharding/max-entities-per-node), applied once the program has made what they
   bound: its data replicator `rep` and its sharding `sh` (either may be NULL; cfg NULL: nothing).
   With sh, max-keys and max-bytes also cap the replicators sharding starts itself (its entities'
   states, remembered entities and coordinator state: shoal_sharding_set_replicator_limits),
   those of the types started later included.
   0, or -1 with the message on stderr, the file named (the program exits as for a refused file). */
static inline int cli_config_limits(const char *name, const char *path, const shoal_config_t *cfg,
                                    shoal_replicator_t *rep, shoal_sharding_t *sh)
{
    if (!cfg)
        return 0;
    char err[512] = "";
    shoal_replicator_limits_t lim = {0};
    uint64_t max_entities = 0;
    if (((rep || sh) && shoal_config_replicator_limits(cfg, &lim, err, sizeof err) < 0) ||
        (rep && shoal_replicator_set_limits(rep, &lim) < 0) ||
        (sh && (shoal_config_sharding_limits(cfg, &max_entities, err, sizeof err) < 0 ||
                shoal_sharding_set_max_entities(sh, max_entities) < 0 ||
                shoal_sharding_set_replicator_limits(sh, &lim) < 0))) {
        cli_config_refused(name, path, err);
        return -1;
    }
    return 0;
}

/* A usage error: the usage on stderr; returns 2, the exit code. */
static inline int cli_usage_error(void (*usage)(FILE *))
{
    usage(stderr);
    return 2;
}

/* A usage error that names what was wrong (the flag, the missing value, the bad word) on its own
   line before the usage: a usage alone leaves the user to guess which of their words it refused. */
static inline int __attribute__((format(printf, 2, 3)))
cli_refuse(void (*usage)(FILE *), const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return cli_usage_error(usage);
}

/* What SIGHUP asks of a node program (docs/operations.md, "Rotating keys and certificates"):
   the CURVE allow-list and the management endpoint's token and TLS files read again (`endpoint`
   may be NULL). One line on stdout says what was reloaded; a file that could not be used keeps
   what is in force (logged). Not from the node thread. */
static inline void cli_reload_line(const char *name, shoal_system_t *sys, shoal_metrics_t *endpoint,
                                   int keys, int http, char *line, size_t cap)
{
    if (shoal_system_secure(sys))
        snprintf(line, cap, "%s: reloaded: allow-list %s%d keys%s, endpoint %s", name,
                 keys < 0 ? "FAILED (" : "", keys < 0 ? 0 : keys, keys < 0 ? ")" : "",
                 endpoint ? (http < 0 ? "FAILED" : "ok") : "none");
    else
        snprintf(line, cap, "%s: reloaded: endpoint %s", name,
                 endpoint ? (http < 0 ? "FAILED" : "ok") : "none");
}

/* The reload itself: the line on stdout; 0, or -1 when a file could not be used (the reason in
   the log; what was in force stays). `line` (may be NULL) gets the same line. */
static inline int cli_reload_now(const char *name, shoal_system_t *sys, shoal_metrics_t *endpoint,
                                 char *line, size_t cap)
{
    int keys = shoal_system_allow_reload(sys);
    int http = endpoint ? shoal_http_reload(endpoint) : 0;
    char buf[256];
    cli_reload_line(name, sys, endpoint, keys, http, buf, sizeof buf);
    printf("%s\n", buf);
    fflush(stdout);
    if (line)
        snprintf(line, cap, "%s", buf);
    return (shoal_system_secure(sys) && keys < 0) || http < 0 ? -1 : 0;
}

static inline void cli_reload(const char *name, shoal_system_t *sys, shoal_metrics_t *endpoint)
{
    cli_reload_now(name, sys, endpoint, NULL, 0);
}

/* RELOAD AS AN ADMIN REQUEST (docs/operations.md, "Rotating keys and certificates";
   `shoal-cluster reload`): POST /reload on the management endpoint does what SIGHUP does, for
   an operator who has the endpoint (and its token) but no shell on the node. It is a POST route,
   so the endpoint's rules for writes hold: loopback clients only unless told otherwise, JSON
   content type, and the bearer token when there is one (401 without it: the token read before
   the reload).
   Without TLS the handler reloads at once, on the connection's thread (the allow-list and the
   token are thread-safe swaps), and answers 200 {"reloaded":LINE} or 500 {"error":LINE} when a
   file could not be used. With TLS the new certificate needs a new HTTP daemon, and the old one
   finishes its requests before it stops, this one included: the handler cannot wait for that,
   so it raises the program's SIGHUP flag (`requested`) and answers 202 {"reload":"requested"};
   the program's loop reloads right after (its stdout line says how it went). */
typedef struct {
    const char *name;
    shoal_system_t *sys;
    shoal_metrics_t *endpoint;
    bool tls;                         /* the endpoint speaks HTTPS */
    volatile sig_atomic_t *requested; /* the program's SIGHUP flag, read by its main loop */
} cli_reloader_t;

static inline void cli_reload_route_fn(shoal_system_t *sys, const shoal_http_request_t *req,
                                       shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    (void)req;
    cli_reloader_t *r = arg;
    if (r->tls) {
        *r->requested = 1;
        rep->status = 202;
        shoal_buf_printf(&rep->body,
                         "{\"reload\":\"requested\",\"note\":\"the node reloads right after "
                         "this answer (TLS: a new daemon takes the listening socket); its "
                         "stdout and log say how it went\"}");
        return;
    }
    char line[256];
    int rc = cli_reload_now(r->name, r->sys, r->endpoint, line, sizeof line);
    if (rc < 0) {
        shoal_http_error(rep, 500,
                         "%s (the reason is in the node's log; what was in force "
                         "stays)",
                         line);
        return;
    }
    shoal_buf_append(&rep->body, "{\"reloaded\":", 12);
    shoal_buf_json_string(&rep->body, line);
    shoal_buf_append(&rep->body, "}", 1);
}

/* Adds POST /reload to the endpoint (NULL: nothing). r must outlive the endpoint. */
static inline int cli_reload_route(cli_reloader_t *r)
{
    if (!r->endpoint)
        return 0;
    return shoal_http_route(r->endpoint, "/reload", SHOAL_HTTP_POST | SHOAL_HTTP_ANY_THREAD,
                            cli_reload_route_fn, r);
}

#endif
