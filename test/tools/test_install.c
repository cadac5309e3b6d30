/*  test_install.c — Shoal as an application outside the repository sees it: installed, found with
    pkg-config, nothing else.

    `scons check` installs into build/stage (the same install_tree as `scons install PREFIX=...`,
    with a shoal.pc whose prefix is the staging directory), never into /usr/local, so that nothing
    left on the machine by an earlier install can make this pass; each test checks that what it
    used came from the staging directory. With PKG_CONFIG_PATH naming only the staged .pc:
      - the .pc: its prefix is the staging directory; Cflags -I$prefix/include (so
        `#include <shoal/ddata.h>` and nothing generic on the include path); no Requires (the
        static libs name shared system libraries, never an archive such as libprotokit.a);
      - the layout: include/ holds only shoal/, which holds the four public headers; lib/ the
        archive, the shared library and its links;
      - each public header compiles on its own, as C11 -pedantic and as C++, with every Shoal
        header it pulls in read from the staged include/shoal/;
      - every examples/<name>.c (single-file programs written for the docs: install-check.c first),
        copied out of the source tree, is built with `pkg-config --cflags --libs shoal` and run
        against the staged libshoal.so, then built with `pkg-config --static --libs` against
        libshoal.a and run again (exit 0 each time; the binary needs no libshoal.so);
      - the whole of libshoal.a links with nothing but what `pkg-config --static --libs` names (so
        Libs.private lists everything any object of the archive needs, not only what one program
        pulls in).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "procs.h"
#include "tools.h"

#include <dirent.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OUT_CAP 65536

static char root[PATH_MAX - 64]; /* the source tree */
static char stage[PATH_MAX]; /* root/build/stage: the prefix `scons check` installs into */
static char work[] = "/tmp/shoal-test-install-XXXXXX"; /* where the programs are built */
static char out[OUT_CAP];

/* Runs a shell command (printf-formatted) in the work directory, stderr merged into out.
   Returns its exit code, -1 when the shell did not exit normally. */
__attribute__((format(printf, 1, 2))) static int sh(const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof cmd);
    char full[16500];
    snprintf(full, sizeof full, "cd '%s' && { %s ; } 2>&1", work, cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t len = 0, r;
    while ((r = fread(out + len, 1, OUT_CAP - 1 - len, p)) > 0)
        len += r;
    out[len] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* sh, which must exit 0; prints the command's output when it does not. */
#define SH_OK(...)                                                                                 \
    do {                                                                                           \
        if (sh(__VA_ARGS__) != 0) {                                                                \
            print_message("failed: " __VA_ARGS__);                                                 \
            print_message("\n%s\n", out);                                                          \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

/* out without its trailing blanks (pkg-config ends its flags with a space and a newline) */
static const char *line(void)
{
    size_t n = strlen(out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        out[--n] = 0;
    return out;
}

static int group_setup(void **state)
{
    (void)state;
    if (!ttool_source_root("shoal-cluster", root, sizeof root))
        return -1;
    snprintf(stage, sizeof stage, "%s/build/stage", root);
    char pc[PATH_MAX + 32];
    snprintf(pc, sizeof pc, "%s/lib/pkgconfig/shoal.pc", stage);
    if (access(pc, R_OK) != 0) {
        fprintf(stderr, "%s is missing: scons check stages the install before it runs this test\n",
                pc);
        return -1;
    }
    if (!mkdtemp(work))
        return -1;
    /* the staged .pc first; nothing from the environment adds include or library paths */
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/lib/pkgconfig", stage);
    setenv("PKG_CONFIG_PATH", path, 1);
    const char *clear[] = {"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH",
                           "LD_LIBRARY_PATH", "CFLAGS", "LDFLAGS"};
    for (size_t i = 0; i < sizeof clear / sizeof *clear; i++)
        unsetenv(clear[i]);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    trm_tree(work);
    return 0;
}

static void test_pc_names_the_staged_prefix(void **state)
{
    (void)state;
    char want[PATH_MAX + 64];
    SH_OK("pkg-config --variable=prefix shoal");
    assert_string_equal(line(), stage);
    /* <shoal/ddata.h>: the include directory is the parent of shoal/ */
    SH_OK("pkg-config --cflags shoal");
    snprintf(want, sizeof want, "-I%s/include", stage);
    assert_string_equal(line(), want);
    SH_OK("pkg-config --libs shoal");
    snprintf(want, sizeof want, "-L%s/lib -lshoal", stage);
    assert_string_equal(line(), want);
    SH_OK("pkg-config --modversion shoal");
    assert_string_equal(line(), SHOAL_VERSION);
    /* no Requires: pkg-config --static would follow libzmq's .pc to norm's libprotokit.a */
    SH_OK("pkg-config --print-requires shoal; pkg-config --print-requires-private shoal");
    assert_string_equal(line(), "");
    SH_OK("pkg-config --static --libs shoal");
    const char *need[] = {" -lczmq", " -lzmq", " -llmdb", " -lmicrohttpd", " -lprotobuf-c",
                          " -lxxhash", " -lz", " -lresolv", " -lm", " -lpthread"};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++)
        if (!strstr(out, need[i]))
            fail_msg("pkg-config --static --libs shoal lacks %s: %s", need[i], out);
    char *save = NULL;
    for (char *w = strtok_r(out, " \n", &save); w; w = strtok_r(NULL, " \n", &save))
        if (strlen(w) > 2 && !strcmp(w + strlen(w) - 2, ".a"))
            fail_msg("pkg-config --static --libs shoal names an archive: %s", w);
}

static void test_layout(void **state)
{
    (void)state;
    /* include/ holds shoal/ only: nothing generic lands on an application's include path */
    SH_OK("ls -A '%s/include'", stage);
    assert_string_equal(line(), "shoal");
    SH_OK("ls -A '%s/include/shoal'", stage);
    assert_string_equal(line(), "ddata.h\ndurable.h\nmembership.h\nsharding.h");
    SH_OK("cd '%s/lib' && test -f libshoal.a && test -f libshoal.so." SHOAL_VERSION
          " && test \"$(readlink libshoal.so)\" = libshoal.so." SHOAL_VERSION
          " && test \"$(readlink libshoal.so.%d)\" = libshoal.so." SHOAL_VERSION,
          stage, SHOAL_SOVERSION);
    SH_OK("test -x '%s/bin/shoal-keygen' && test -f '%s/share/man/man1/shoal-keygen.1'", stage,
          stage);
}

/* Every Shoal header the compiler read (the -MD dependency list in work/t.d) is a staged one. */
static void read_only_staged_headers(const char *what)
{
    SH_OK("tr ' \\\\' '\\n\\n' < t.d | grep -E '\\.h$' | grep -E '(ddata|membership|durable|"
          "sharding)\\.h$' | sort -u");
    char *save = NULL;
    char prefix[PATH_MAX + 32];
    snprintf(prefix, sizeof prefix, "%s/include/shoal/", stage);
    int n = 0;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save), n++)
        if (strncmp(l, prefix, strlen(prefix)) != 0)
            fail_msg("%s read %s, not a header of the staged install", what, l);
    assert_true(n > 0);
}

static void test_each_header_compiles_alone(void **state)
{
    (void)state;
    const char *headers[] = {"ddata", "membership", "durable", "sharding"};
    for (size_t i = 0; i < sizeof headers / sizeof *headers; i++) {
        SH_OK("printf '#include <shoal/%s.h>\\nint main(void) { return 0; }\\n' > t.c",
              headers[i]);
        SH_OK("cc -std=c11 -pedantic -Wall -Wextra -Werror $(pkg-config --cflags shoal) -MD -MF t.d"
              " -c t.c -o t.o");
        read_only_staged_headers(headers[i]);
        SH_OK("c++ -x c++ -Wall -Wextra -Werror $(pkg-config --cflags shoal) -MD -MF t.d"
              " -c t.c -o t.o");
        read_only_staged_headers(headers[i]);
    }
}

/* A name kept only for compatibility warns in an application's build and names what replaces
   it: shoal_replicator_update_sync takes `initial` since 0.1.x-2026-11-28, and a program written
   for 0.1.0 (destroying `initial` afterwards) compiled without a word before (CHANGELOG.md). */
static void test_deprecated_names_warn(void **state)
{
    (void)state;
    SH_OK("printf '#include <shoal/ddata.h>\\nint f(shoal_replicator_t *r, shoal_crdt_t *v, "
          "const shoal_consistency_t *c) { return shoal_replicator_update_sync(r, \"k\", v, c, "
          "NULL, NULL); }\\n' > dep.c");
    if (sh("cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags shoal) -c dep.c -o dep.o") == 0)
        fail_msg("a call of the deprecated shoal_replicator_update_sync compiled without a warning");
    if (!strstr(out, "deprecated") || !strstr(out, "shoal_replicator_update_take_sync"))
        fail_msg("the warning does not name the replacement:\n%s", out);
    /* a program migrating step by step may silence it */
    SH_OK("cc -std=c11 -Wall -Wextra -Werror -DSHOAL_NO_DEPRECATED_WARNINGS "
          "$(pkg-config --cflags shoal) -c dep.c -o dep.o");
}

/* The single-file programs examples/<name>.c. */
static size_t examples(glob_t *g)
{
    char pat[PATH_MAX + 32];
    snprintf(pat, sizeof pat, "%s/examples/*.c", root);
    assert_int_equal(glob(pat, 0, NULL, g), 0);
    return g->gl_pathc;
}

/* Builds one example in the work directory as prog (link: the link flags), runs it, checks it
   exited 0 and, for install-check, what it printed. */
static void build_and_run(const char *src, const char *link, const char *how)
{
    SH_OK("cp '%s' prog.c && rm -f prog", src);
    SH_OK("cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags shoal) -MD -MF t.d -o prog "
          "prog.c %s",
          link);
    read_only_staged_headers(src);
    /* LD_LIBRARY_PATH: the staged lib/ (a program linked against libshoal.a must not need it) */
    if (sh("LD_LIBRARY_PATH='%s/lib' ./prog", stage) != 0)
        fail_msg("%s (%s) exited non-zero:\n%s", src, how, out);
    if (strstr(src, "/install-check.c") && !strstr(out, ": cart = {tea}\n"))
        fail_msg("%s (%s) printed:\n%s", src, how, out);
}

static void test_examples_against_the_shared_library(void **state)
{
    (void)state;
    glob_t g;
    assert_true(examples(&g) >= 1);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        build_and_run(g.gl_pathv[i], "$(pkg-config --libs shoal)", "shared");
        /* and it loads the staged libshoal.so, not one installed elsewhere */
        SH_OK("LD_LIBRARY_PATH='%s/lib' ldd ./prog | grep libshoal.so", stage);
        char want[PATH_MAX + 64];
        snprintf(want, sizeof want, "=> %s/lib/libshoal.so.%d ", stage, SHOAL_SOVERSION);
        if (!strstr(out, want))
            fail_msg("%s loads another libshoal: %s", g.gl_pathv[i], out);
    }
    globfree(&g);
}

/* `pkg-config --static --libs shoal` with -lshoal taken as the archive (ld picks the .so for
   -lshoal when both are there): libshoal.a and the shared system libraries it names. */
#define STATIC_LIBS "$(pkg-config --static --libs shoal | sed 's/-lshoal /-l:libshoal.a /')"

static void test_examples_against_the_archive(void **state)
{
    (void)state;
    glob_t g;
    assert_true(examples(&g) >= 1);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        build_and_run(g.gl_pathv[i], STATIC_LIBS, "static");
        if (sh("readelf -d prog | grep -F 'libshoal.so'") == 0)
            fail_msg("%s built against libshoal.a still needs %s", g.gl_pathv[i], out);
        if (sh("./prog") != 0)
            fail_msg("%s built against libshoal.a fails without the staged lib/:\n%s",
                     g.gl_pathv[i], out);
    }
    globfree(&g);
}

static void test_whole_archive_links_with_libs_private(void **state)
{
    (void)state;
    SH_OK("printf 'int main(void) { return 0; }\\n' > m.c");
    SH_OK("cc -o m m.c $(pkg-config --static --libs shoal | sed 's/-lshoal /-Wl,--whole-archive "
          "-l:libshoal.a -Wl,--no-whole-archive /')");
    SH_OK("./m");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pc_names_the_staged_prefix),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_each_header_compiles_alone),
        cmocka_unit_test(test_deprecated_names_warn),
        cmocka_unit_test(test_examples_against_the_shared_library),
        cmocka_unit_test(test_examples_against_the_archive),
        cmocka_unit_test(test_whole_archive_links_with_libs_private),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
