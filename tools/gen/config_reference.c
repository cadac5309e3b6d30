/*  config_reference.c — writes docs/configuration.md, the configuration reference, from the
    loader's key table itself (ddata/config.c, cfg_keys: every key, whether Akka has it, its
    default as a file writes it, what it means), so that the reference cannot drift from what
    the loader accepts.

      build/gen-bin/config-reference > docs/configuration.md     (what `scons docs` runs)

    Before it prints anything it checks every default the table states of a number, duration,
    size, on/off, decimal or choice (strings, hosts, lists and rows with a `*` are not checked)
    against the settings structs' own defaults (shoal_*_settings_default): each key is loaded
    alone at its stated
    default through shoal_config_parse and the five fillers (node, replicator, cluster,
    sharding, durable), and the filled structs must equal the untouched defaults byte for byte.
    A stated default that differs (or that the loader refuses) is named on stderr and the exit
    status is 1, so a stale default fails `scons check` (test_docs runs this and compares its
    output with docs/configuration.md).
*/
#include "internal.h"
#include "durable.h"
#include "membership.h"
#include "sharding.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sections of the reference, in order; a key goes to the longest prefix it has. */
static const struct {
    const char *prefix;
    const char *title;
    const char *intro;
} sections[] = {
    {"shoal/", "The process",
     "Applied by `shoal_config_system` to the whole process (ddata.h, Logs)."},
    {"shoal/remote/artery/", "The node",
     "`shoal_config_system` fills `shoal_system_settings_t` (ddata.h) from these."},
    {"shoal/cluster/distributed-data/", "Distributed data (the replicator)",
     "`shoal_config_replicator` fills `shoal_replicator_settings_t` (ddata.h); "
     "`shoal_config_durable` fills `shoal_durable_settings_t` (durable.h) from `durable/lmdb/`."},
    {"shoal/cluster/", "Cluster membership",
     "`shoal_config_cluster` fills `shoal_cluster_settings_t` (membership.h)."},
    {"shoal/cluster/failure-detector/", "Failure detector",
     "`shoal_config_cluster` (membership.h): the phi-accrual detector on the heartbeat actor."},
    {"shoal/cluster/split-brain-resolver/", "Split-brain resolver and the fence",
     "`shoal_config_cluster` (membership.h)."},
    {"shoal/coordinated-shutdown/", "Coordinated shutdown", "`shoal_config_cluster` (membership.h)."},
    {"shoal/management/cluster/bootstrap/contact-point-discovery/", "Seed discovery by DNS",
     "`shoal_config_cluster` (membership.h, SEED DISCOVERY): Akka Management's Cluster Bootstrap "
     "keys."},
    {"shoal/management/http/", "The management endpoint",
     "`shoal_config_http` fills `shoal_http_settings_t` (ddata.h, HARDENING); the programs' "
     "`--http-*` flags override it (docs/security.md, \"The management endpoint\")."},
    {"shoal/cluster/sharding/", "Cluster sharding",
     "`shoal_config_sharding` fills `shoal_sharding_settings_t` (sharding.h)."},
    {"shoal/cluster/sharding/passivation/", "Sharding: passivation",
     "`<name>` is a strategy section of the file (`passivation/strategy` names it); each takes "
     "every key below."},
    {"shoal/cluster/sharding/distributed-data/", "Sharding: its replicator",
     "Akka's settings of sharding's own replicator (`shoal_sharding_settings_t.replicator_settings`"
     ", used when `shoal_sharding_settings_t.replicator` is NULL). As in Akka, each key falls back "
     "to the same key of `shoal/cluster/distributed-data/`, except those sharding overrides "
     "(durable `shard-*` keys, max-delta-elements 5, prefer-oldest on: Akka's; "
     "notify-subscribers-interval 50 ms, gossip at the cluster's interval and deltas at a fifth of "
     "it: Shoal's). `majority-min-cap` is sharding's own."},
};
#define N_SECTIONS (sizeof sections / sizeof sections[0])

static size_t section_of(const char *path)
{
    size_t best = 0, best_len = 0;
    for (size_t s = 0; s < N_SECTIONS; s++) {
        size_t n = strlen(sections[s].prefix);
        if (n > best_len && strncmp(path, sections[s].prefix, n) == 0)
            best = s, best_len = n;
    }
    return best;
}

/* A table cell: '|' would end the cell, '<' open an HTML tag, '*' start emphasis. */
static void cell(const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", stdout);
        else if (*s == '<')
            fputs("&lt;", stdout);
        else if (*s == '*')
            fputs("\\*", stdout);
        else
            putchar(*s);
    }
}

/* akka.cluster.sharding.number-of-shards for shoal/cluster/sharding/number-of-shards; a '*'
   segment is <name>. */
static void akka_name(const char *path)
{
    fputs("`akka", stdout);
    for (const char *p = path + strlen("shoal"); *p; p++) {
        if (*p == '/')
            putchar('.');
        else if (*p == '*')
            fputs("<name>", stdout);
        else
            putchar(*p);
    }
    putchar('`');
}

static void relative_key(const char *path, const char *prefix)
{
    fputc('`', stdout);
    for (const char *p = path + strlen(prefix); *p; p++) {
        if (*p == '*')
            fputs("<name>", stdout);
        else
            putchar(*p);
    }
    fputc('`', stdout);
}

/* ---------------------------------------------------------------------------------------------
 * The check of the stated defaults
 */
typedef struct {
    shoal_system_settings_t sys;
    shoal_replicator_settings_t rep;
    shoal_cluster_settings_t cl;
    shoal_sharding_settings_t sh;
    shoal_durable_settings_t du;
} all_settings_t;

static void defaults(all_settings_t *a)
{
    memset(a, 0, sizeof *a); /* padding too, for the byte comparison */
    shoal_system_settings_default(&a->sys);
    shoal_replicator_settings_default(&a->rep);
    shoal_cluster_settings_default(&a->cl);
    shoal_sharding_settings_default(&a->sh);
    shoal_durable_settings_default(&a->du);
}

/* ZPL for one key: each path segment a section 4 spaces deeper, the last one `name = value`. */
static void zpl_of(const char *path, const char *value, char *out, size_t cap)
{
    size_t len = 0, depth = 0;
    const char *seg = path;
    while (seg && *seg) {
        const char *slash = strchr(seg, '/');
        int n = slash ? (int)(slash - seg) : (int)strlen(seg);
        len += (size_t)snprintf(out + len, cap - len, "%*s%.*s%s%s%s\n", (int)(4 * depth), "", n,
                                seg, slash ? "" : " = \"", slash ? "" : value, slash ? "" : "\"");
        depth++;
        seg = slash ? slash + 1 : NULL;
    }
}

static bool checked_kind(const shoal_config_key_doc_t *k)
{
    if (!k->dflt || strchr(k->path, '*'))
        return false;
    if (strcmp(k->kind, "string") == 0) /* only the numbers written as strings (majority-plus) */
        return strspn(k->dflt, "0123456789") == strlen(k->dflt);
    return strcmp(k->kind, "duration") == 0 || strcmp(k->kind, "size") == 0 ||
           strcmp(k->kind, "on/off") == 0 || strcmp(k->kind, "number") == 0 ||
           strcmp(k->kind, "decimal") == 0 || strcmp(k->kind, "choice") == 0;
}

/* 0 when the stated default of key k, loaded alone, leaves every settings struct as its
   *_settings_default made it. */
static int check_default(const shoal_config_key_doc_t *k)
{
    char text[1024], err[512] = "";
    int code = 0;
    zpl_of(k->path, k->dflt, text, sizeof text);
    shoal_config_t *cfg = shoal_config_parse(text, &code);
    if (!cfg) {
        fprintf(stderr, "config-reference: %s: the stated default '%s' does not load: %s\n",
                k->path, k->dflt, shoal_last_error_detail());
        return 1;
    }
    all_settings_t want, got;
    defaults(&want);
    defaults(&got);
    int rc = shoal_config_system(cfg, &got.sys, err, sizeof err);
    if (rc == 0)
        rc = shoal_config_replicator(cfg, &got.rep, err, sizeof err);
    if (rc == 0)
        rc = shoal_config_cluster(cfg, &got.cl, err, sizeof err);
    if (rc == 0)
        rc = shoal_config_sharding(cfg, &got.sh, err, sizeof err);
    if (rc == 0)
        rc = shoal_config_durable(cfg, &got.du, err, sizeof err);
    shoal_config_destroy(&cfg);
    if (rc != 0) {
        fprintf(stderr, "config-reference: %s = %s: refused by a filler: %s\n", k->path, k->dflt,
                err);
        return 1;
    }
    const char *differs = memcmp(&want.sys, &got.sys, sizeof want.sys)   ? "shoal_system_settings_t"
                          : memcmp(&want.rep, &got.rep, sizeof want.rep) ? "shoal_replicator_settings_t"
                          : memcmp(&want.cl, &got.cl, sizeof want.cl)    ? "shoal_cluster_settings_t"
                          : memcmp(&want.sh, &got.sh, sizeof want.sh)    ? "shoal_sharding_settings_t"
                          : memcmp(&want.du, &got.du, sizeof want.du)    ? "shoal_durable_settings_t"
                                                                         : NULL;
    if (differs) {
        fprintf(stderr,
                "config-reference: %s: the stated default '%s' is not the default of %s "
                "(correct the row in ddata/config.c)\n",
                k->path, k->dflt, differs);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        fprintf(stderr, "usage: %s > docs/configuration.md\n", argv[0]);
        return 2;
    }
    shoal_log_set_level(SHOAL_LOG_ERROR);
    shoal_config_key_doc_t k;
    int bad = 0;
    size_t n = 0;
    for (; shoal_config_key_doc(n, &k); n++)
        if (checked_kind(&k))
            bad += check_default(&k);
    if (bad) {
        fprintf(stderr, "config-reference: %d stated default(s) wrong: nothing written\n", bad);
        return 1;
    }

    printf("# Configuration reference\n\n"
           "<!-- Generated by tools/gen/config_reference.c from the loader's key table "
           "(ddata/config.c): do not edit.\n"
           "     `scons docs` writes it; `scons check` (test_docs) fails when it differs. -->\n\n"
           "Every key Shoal's configuration loader knows (%zu), with its Akka name, its type, its "
           "default and what it means. The format is ZPL (czmq's zconfig): one section or key per "
           "line, each level indented by 4 spaces, `name = value`; a key's path is its sections "
           "joined by `/`, Akka's reference path with `akka.` replaced by `shoal/` and dots by "
           "slashes. [examples/shoal.cfg](../examples/shoal.cfg) is a sample file with every "
           "section and its common keys; `shoal_config_load` reads a file and the fillers "
           "(`shoal_config_system`, `shoal_config_replicator`, `shoal_config_cluster`, "
           "`shoal_config_sharding`, `shoal_config_durable`) change only what it sets, over the "
           "defaults.\n\n"
           "Values: durations `2 s`, `500 ms`, `10 minutes`, `1 d` (a plain number is "
           "milliseconds; `off` where the type says so); sizes `256 KiB`, `64 MiB` (a plain "
           "number is bytes); on/off also `true`/`false`, `yes`/`no`; lists `a, b` or "
           "`[\"a\", \"b\"]`. An unknown key or a bad value fails the load with a message naming "
           "the key. Keys that mean something only on the JVM are accepted and ignored, so that an "
           "Akka file loads; a key Shoal cannot honour as written is refused, naming it. A "
           "default of \"—\" means unset, or given in the meaning. Every default stated "
           "here was checked against the settings structs when this page was generated.\n",
           n);
    for (size_t s = 0; s < N_SECTIONS; s++) {
        printf("\n## %s: `%.*s`\n\n", sections[s].title, (int)strlen(sections[s].prefix) - 1,
               sections[s].prefix);
        if (sections[s].intro[0])
            printf("%s\n\n", sections[s].intro);
        printf("| key | Akka name | type | default | meaning |\n| --- | --- | --- | --- | --- |\n");
        for (size_t i = 0; shoal_config_key_doc(i, &k); i++) {
            if (section_of(k.path) != s)
                continue;
            fputs("| ", stdout);
            relative_key(k.path, sections[s].prefix);
            fputs(" | ", stdout);
            if (k.shoal_own)
                fputs("— (Shoal's own)", stdout);
            else
                akka_name(k.path);
            fputs(" | ", stdout);
            if (k.choices) {
                for (const char *c = k.choices; *c; c++)
                    fputs(*c == '|' ? ", " : (char[]){*c, 0}, stdout);
            } else
                fputs(k.kind, stdout);
            if (k.off)
                fputs(", off", stdout);
            fputs(" | ", stdout);
            if (k.dflt) {
                putchar('`');
                cell(k.dflt);
                putchar('`');
            } else
                fputs("—", stdout);
            fputs(" | ", stdout);
            cell(k.doc);
            fputs(" |\n", stdout);
        }
    }
    return 0;
}
