/*  cli.h — the flags every Shoal program answers the same way, tools, examples and the chaos
    programs alike:

      --help, -h    the usage on stdout, exit 0
      --version     one line "NAME VERSION" on stdout (SHOAL_VERSION, from ddata.h), exit 0
      --log-level LEVEL
                    error, warning, info (the default) or debug: the lines Shoal logs to stderr
                    (ddata.h, Logs). Taken out of argv before the program reads its own flags;
                    exported as SHOAL_LOG_LEVEL, so the children a program starts log alike, and
                    read from SHOAL_LOG_LEVEL when the flag is not given. A bad level: exit 2.

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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddata.h"

#define CLI_LOG_LEVEL_USAGE                                                                        \
    "every Shoal program: --log-level error|warning|info|debug (default info, or SHOAL_LOG_LEVEL)\n"

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
    bool flag = false;
    for (int i = 1; i < *argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--log-level") != 0)
            continue;
        if (i + 1 >= *argc) {
            fprintf(stderr, "%s: --log-level takes error, warning, info or debug\n", name);
            usage(stderr);
            return 2;
        }
        level = argv[i + 1];
        flag = true;
        for (int k = i; k + 2 <= *argc; k++) /* argv[argc] (NULL) moves down too */
            argv[k] = argv[k + 2];
        *argc -= 2;
        i--;
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
static inline void cli_reload(const char *name, shoal_system_t *sys, shoal_metrics_t *endpoint)
{
    int keys = shoal_system_allow_reload(sys);
    int http = endpoint ? shoal_http_reload(endpoint) : 0;
    if (shoal_system_secure(sys))
        printf("%s: reloaded: allow-list %s%d keys%s, endpoint %s\n", name,
               keys < 0 ? "FAILED (" : "", keys < 0 ? 0 : keys, keys < 0 ? ")" : "",
               endpoint ? (http < 0 ? "FAILED" : "ok") : "none");
    else
        printf("%s: reloaded: endpoint %s\n", name,
               endpoint ? (http < 0 ? "FAILED" : "ok") : "none");
    fflush(stdout);
}

#endif
