/*  test_docs.c — the documentation cannot drift from the code.

      - docs/configuration.md is exactly what build/gen-bin/config-reference prints (the
        generator walks the loader's key table and checks every default it states against the
        settings structs; it exits 1 on a stale default);
      - every ```c block of README.md and every docs page is a verbatim excerpt of a program
        examples/<name>.c (tools/check-snippets.py), which test_install builds against the staged
        install and runs; and the checker does refuse a block that is not;
      - the library keeps the layers of tools/layers.txt (tools/check-layers.py, over the release
        objects' symbols), and the checker does refuse a use that climbs;
      - examples/shoal.cfg, the sample configuration, loads with shoal_config_load and fills the
        five settings structs with what it says.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "durable.h"
#include "sharding.h"
#include "tools.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[PATH_MAX - 64]; /* the source tree */

static int group_setup(void **state)
{
    (void)state;
    return ttool_source_root("shoal-cluster", root, sizeof root) ? 0 : -1;
}

/* The whole output of a shell command run in the source tree (stderr apart), its exit code in
   *rc. Free the result. */
static char *run(const char *cmd, int *rc)
{
    char full[PATH_MAX + 512];
    snprintf(full, sizeof full, "cd '%s' && %s", root, cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t r;
    while ((r = fread(buf + len, 1, cap - 1 - len, p)) > 0) {
        len += r;
        if (len == cap - 1) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    buf[len] = 0;
    int st = pclose(p);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return buf;
}

static char *slurp(const char *rel)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("%s cannot be read", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void test_configuration_reference_is_current(void **state)
{
    (void)state;
    int rc = 0;
    char *printed = run("build/gen-bin/config-reference", &rc);
    if (rc != 0)
        fail_msg("build/gen-bin/config-reference exited %d (a stated default is wrong: see its "
                 "message above)",
                 rc);
    char *committed = slurp("docs/configuration.md");
    if (strcmp(printed, committed) != 0) {
        size_t i = 0;
        while (printed[i] && printed[i] == committed[i])
            i++;
        size_t line = 1;
        for (size_t j = 0; j < i; j++)
            line += printed[j] == '\n';
        fail_msg("docs/configuration.md differs from what the key table gives from line %zu on: "
                 "run `scons docs` and commit the result",
                 line);
    }
    /* and it is the reference of every key: the table has well over a hundred rows */
    size_t rows = 0;
    for (const char *p = printed; (p = strstr(p, "\n| `")); p++)
        rows++;
    assert_true(rows > 150);
    free(printed);
    free(committed);
}

static void test_snippets_are_excerpts_of_examples(void **state)
{
    (void)state;
    int rc = 0;
    char *out = run("python3 tools/check-snippets.py 2>&1", &rc);
    if (rc != 0)
        fail_msg("tools/check-snippets.py:\n%s", out);
    assert_non_null(strstr(out, " not excerpts of examples/*.c"));
    free(out);
}

/* The checker itself: a block that is not an excerpt, a block without its mark, and a faithful
   excerpt (indented differently) in one file. */
static void test_snippet_checker_refuses_what_is_not_an_excerpt(void **state)
{
    (void)state;
    char dir[] = "/tmp/shoal-test-docs-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/t.md", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("From [examples/tour-map.c](examples/tour-map.c):\n\n"
          "```c\n"
          "  for (int i = 0; i < NODES; i++) {\n"
          "      if ((err = add_peers(nodes, reps[i], i)) < 0) {\n"
          "```\n\n"
          "From `examples/tour-map.c`:\n\n"
          "```c\n"
          "shoal_replicator_update(r, \"cart\", shoal_orset_new(), &maj, add, item, done, ctx);\n"
          "```\n\n"
          "No mark:\n\n"
          "```c\n"
          "int main(void) { return 0; }\n"
          "```\n",
          f);
    fclose(f);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "python3 tools/check-snippets.py '%s' 2>&1", path);
    int rc = 0;
    char *out = run(cmd, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "t.md:10: this C snippet is not a verbatim excerpt"));
    assert_non_null(strstr(out, "t.md:16: the paragraph before a C snippet must name"));
    assert_non_null(strstr(out, "3 C snippets checked in 1 files, 2 not excerpts"));
    free(out);
    unlink(path);
    rmdir(dir);
}

/* The layers of tools/layers.txt hold in the library's objects (tools/check-layers.py reads which
   object defines and which uses each symbol). */
static void test_layers_hold(void **state)
{
    (void)state;
    int rc = 0;
    char *out = run("python3 tools/check-layers.py 2>&1", &rc);
    if (rc != 0)
        fail_msg("tools/check-layers.py:\n%s", out);
    assert_non_null(strstr(out, " keep tools/layers.txt"));
    free(out);
}

/* The checker itself: the same spec with the data types' arrow to the base taken away must fail
   and name a use that now climbs; a spec that leaves a file out, or points at a layer above, is
   refused. */
static void test_layer_checker_refuses_a_climb(void **state)
{
    (void)state;
    char dir[] = "/tmp/shoal-test-layers-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[2 * PATH_MAX + 512], spec[PATH_MAX];
    snprintf(spec, sizeof spec, "%s/layers.txt", dir);
    int rc = 0;

    snprintf(cmd, sizeof cmd,
             "sed 's|^\\(ddata-types *= *ddata/types/\\*\\.c\\) *->.*|\\1|' tools/layers.txt > '%s' && "
             "python3 tools/check-layers.py --spec '%s' 2>&1", spec, spec);
    char *out = run(cmd, &rc);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "ddata/types/crdt.c (ddata-types) uses ddata/util.c (ddata-base)"));
    assert_non_null(strstr(out, " uses climb a layer of "));
    free(out);

    snprintf(cmd, sizeof cmd,
             "grep -v '^sharding/producer.c ' tools/layers.txt > '%s' && "
             "python3 tools/check-layers.py --spec '%s' 2>&1", spec, spec);
    out = run(cmd, &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "sharding/producer.c: in no layer of "));
    free(out);

    snprintf(cmd, sizeof cmd,
             "printf 'a = ddata/util.c -> b\\nb = ddata/log.c\\n' > '%s' && "
             "python3 tools/check-layers.py --spec '%s' 2>&1", spec, spec);
    out = run(cmd, &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "a -> b: b is not stated above it"));
    free(out);

    unlink(spec);
    rmdir(dir);
}

static void test_sample_configuration_loads(void **state)
{
    (void)state;
    char path[PATH_MAX + 64], err[512] = "";
    int code = 0;
    snprintf(path, sizeof path, "%s/examples/shoal.cfg", root);
    shoal_config_t *cfg = shoal_config_load(path, &code);
    if (!cfg)
        fail_msg("examples/shoal.cfg: %s", shoal_last_error_detail());

    shoal_system_settings_t sys;
    shoal_system_settings_default(&sys);
    assert_int_equal(shoal_config_system(cfg, &sys, err, sizeof err), 0);
    assert_string_equal(sys.endpoint, "tcp://10.0.0.1:2552");
    assert_int_equal(sys.max_frame_bytes, 256 * 1024);
    assert_int_equal(sys.max_inbound_connections, 1024);

    shoal_replicator_settings_t rep;
    shoal_replicator_settings_default(&rep);
    assert_int_equal(shoal_config_replicator(cfg, &rep, err, sizeof err), 0);
    assert_int_equal(rep.gossip_interval_ms, 2000);
    assert_int_equal(rep.delta_interval_ms, 400);
    assert_int_equal(rep.n_durable_keys, 1);
    assert_string_equal(rep.durable_keys[0], "cart-*");

    shoal_cluster_settings_t cl;
    shoal_cluster_settings_default(&cl);
    assert_int_equal(shoal_config_cluster(cfg, &cl, err, sizeof err), 0);
    assert_int_equal(cl.n_seed_nodes, 3);
    assert_string_equal(cl.seed_nodes[0], "tcp://10.0.0.1:2552");
    assert_string_equal(cl.seed_nodes[2], "tcp://10.0.0.3:2552");
    assert_int_equal(cl.n_roles, 1);
    assert_string_equal(cl.roles[0], "backend");
    assert_int_equal(cl.min_nr_of_members, 3);
    assert_int_equal(cl.acceptable_heartbeat_pause_ms, 3000);
    assert_true(cl.threshold == 8.0);
    assert_int_equal(cl.sbr_strategy, SHOAL_SBR_KEEP_MAJORITY);
    assert_int_equal(cl.stable_after_ms, 20000);
    assert_int_equal(cl.phase_timeout_ms, 5000);
    assert_int_equal(shoal_cluster_fence_check(&cl, err, sizeof err), 0);

    shoal_sharding_settings_t sh;
    shoal_sharding_settings_default(&sh);
    assert_int_equal(shoal_config_sharding(cfg, &sh, err, sizeof err), 0);
    assert_string_equal(sh.role, "backend");
    assert_int_equal(sh.number_of_shards, 1000);
    assert_true(sh.entity_state);
    assert_int_equal(sh.write_majority_plus, 3);
    assert_int_equal(sh.read_majority_plus, 5);
    assert_int_equal(sh.allocation.rebalance_absolute_limit, 20);
    assert_false(sh.remember_entities);
    assert_int_equal(sh.passivation.policy, SHOAL_PASSIVATE_IDLE);
    assert_int_equal(sh.passivation.idle_timeout_ms, 120000);

    shoal_durable_settings_t du;
    shoal_durable_settings_default(&du);
    assert_int_equal(shoal_config_durable(cfg, &du, err, sizeof err), 0);
    assert_string_equal(du.dir, "/var/lib/shoal/n1");
    assert_int_equal(du.map_size, 100 * 1024 * 1024);
    assert_int_equal(du.write_behind_ms, 0);
    shoal_config_destroy(&cfg);

    /* and a sample with a key misspelt is refused, naming it */
    char *text = slurp("examples/shoal.cfg");
    char *at = strstr(text, "stable-after");
    assert_non_null(at);
    memcpy(at, "stable-aftre", 12);
    cfg = shoal_config_parse(text, &code);
    assert_null(cfg);
    assert_int_equal(code, SHOAL_EINVAL); /* an unknown key: a wrong use, named */
    assert_non_null(strstr(shoal_last_error_detail(), "stable-aftre"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_configuration_reference_is_current),
        cmocka_unit_test(test_snippets_are_excerpts_of_examples),
        cmocka_unit_test(test_snippet_checker_refuses_what_is_not_an_excerpt),
        cmocka_unit_test(test_layers_hold),
        cmocka_unit_test(test_layer_checker_refuses_a_climb),
        cmocka_unit_test(test_sample_configuration_loads),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
