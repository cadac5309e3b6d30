/*  test_cli.c — what every shipped program answers before it does anything: the release builds of
    the tools (tools/NAME.c), the examples (examples/<name>/) and the chaos programs, found from the
    source tree so that a new program is checked without being listed here.

    --help: the usage ("usage: NAME ...") on stdout, nothing on stderr, exit 0. --version: exactly
    "NAME SHOAL_VERSION\n" on stdout, exit 0. An unknown flag: nothing on stdout, the usage on
    stderr after a line naming the flag, exit 2. Each has a man page, docs/man/NAME.1.scd built into build/man/NAME.1, that
    names every flag its --help shows and renders with man(1) (when man is installed) with the
    sections NAME, SYNOPSIS, DESCRIPTION, OPTIONS, EXIT STATUS and SEE ALSO. And shoal-keygen:
    makes a missing DIR with its parents and labels what it prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "procs.h"
#include "tools.h"

#include <ctype.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_PROGS 32
#define OUT_CAP   65536

static char root[4096]; /* the repository: build/bin/<prog> is root/build/bin/<prog> */
static char progs[MAX_PROGS][64];
static int n_progs;

static void add_prog(const char *name)
{
    assert_true(n_progs < MAX_PROGS);
    snprintf(progs[n_progs++], sizeof progs[0], "%s", name);
}

/* The shipped programs, named as SConstruct names them: tools/shoal_member.c -> shoal-member,
   examples/kvstore/kvstore.c -> kvstore, test/chaos/chaos_node.c -> chaos-node. */
static int group_setup(void **state)
{
    (void)state;
    char any[4096];
    if (!ttool_find("shoal-cluster", any, sizeof any)) {
        fprintf(stderr, "build/bin/shoal-cluster is missing: the target that runs this test must "
                        "build the release programs\n");
        return -1;
    }
    char *cut = strncmp(any, "build/bin/", 10) == 0 ? any : strstr(any, "/build/bin/");
    if (!cut)
        return -1;
    *cut = 0;
    snprintf(root, sizeof root, "%s", any[0] ? any : "."); /* "build/bin/...": run from the root */

    const char *patterns[] = {"tools/*.c", "examples/*/*.c", "test/chaos/chaos_*.c"};
    for (size_t p = 0; p < sizeof patterns / sizeof *patterns; p++) {
        char pat[4200];
        snprintf(pat, sizeof pat, "%s/%s", root, patterns[p]);
        glob_t g;
        if (glob(pat, 0, NULL, &g) != 0)
            return -1;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char name[64];
            const char *path = g.gl_pathv[i], *base = strrchr(path, '/') + 1;
            if (p == 1) { /* examples/<name>/...: the directory's name */
                const char *dir_end = base - 1, *dir = dir_end - 1;
                while (*dir != '/')
                    dir--;
                snprintf(name, sizeof name, "%.*s", (int)(dir_end - dir - 1), dir + 1);
            } else {
                snprintf(name, sizeof name, "%.*s", (int)(strlen(base) - 2), base);
                for (char *c = name; *c; c++)
                    *c = *c == '_' ? '-' : *c;
            }
            add_prog(name);
        }
        globfree(&g);
    }
    /* four tools, five examples, two chaos programs at the time of writing */
    return n_progs >= 11 ? 0 : -1;
}

static void must_contain(const char *out, const char *what, const char *prog)
{
    if (!strstr(out, what)) {
        print_message("%s: expected \"%s\" in:\n%s\n", prog, what, out);
        fail();
    }
}

static void prog_path(const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s/build/bin/%s", root, name);
    if (access(path, X_OK) != 0) {
        print_message("%s is missing: the target that runs this test must build it\n", path);
        fail();
    }
}

static void test_help(void **state)
{
    (void)state;
    static char out[OUT_CAP];
    for (int i = 0; i < n_progs; i++) {
        char path[4200], want[128];
        prog_path(progs[i], path, sizeof path);
        for (int form = 0; form < 2; form++) {
            const char *flag = form ? "-h" : "--help";
            assert_int_equal(ttool_run_stream(path, flag, 1, out, sizeof out), 0);
            snprintf(want, sizeof want, "usage: %s", progs[i]);
            if (strncmp(out, want, strlen(want)) != 0) {
                print_message("%s %s: stdout does not start with \"%s\":\n%s\n", progs[i], flag,
                              want, out);
                fail();
            }
            must_contain(out, "--version", progs[i]);
            assert_int_equal(ttool_run_stream(path, flag, 2, out, sizeof out), 0);
            if (out[0]) {
                print_message("%s %s wrote to stderr:\n%s\n", progs[i], flag, out);
                fail();
            }
        }
    }
}

static void test_version(void **state)
{
    (void)state;
    static char out[OUT_CAP];
    for (int i = 0; i < n_progs; i++) {
        char path[4200], want[128];
        prog_path(progs[i], path, sizeof path);
        assert_int_equal(ttool_run_stream(path, "--version", 1, out, sizeof out), 0);
        snprintf(want, sizeof want, "%s %s\n", progs[i], SHOAL_VERSION);
        if (strcmp(out, want) != 0) {
            print_message("%s --version: \"%s\", not \"%s\"\n", progs[i], out, want);
            fail();
        }
    }
}

/* An unknown flag is a usage error for every program: exit 2, the usage on stderr only. */
static void test_unknown_flag(void **state)
{
    (void)state;
    static char out[OUT_CAP];
    for (int i = 0; i < n_progs; i++) {
        char path[4200];
        prog_path(progs[i], path, sizeof path);
        assert_int_equal(ttool_run_stream(path, "--no-such-flag", 1, out, sizeof out), 2);
        if (out[0]) {
            print_message("%s --no-such-flag wrote to stdout:\n%s\n", progs[i], out);
            fail();
        }
        assert_int_equal(ttool_run_stream(path, "--no-such-flag", 2, out, sizeof out), 2);
        must_contain(out, "usage:", progs[i]);
        /* and names the word it refused: a usage alone leaves the user to guess */
        must_contain(out, "--no-such-flag", progs[i]);
        /* --log-level is every program's: a bad level is a usage error too */
        assert_int_equal(ttool_run_stream(path, "--log-level loud", 2, out, sizeof out), 2);
        must_contain(out, "--log-level", progs[i]);
    }
}

static bool read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return true;
}

/* Every flag the usage shows ("--bind", "--seed", ...) is in the page's source. */
static void flags_documented(const char *prog, const char *usage, const char *scd)
{
    for (const char *p = strstr(usage, "--"); p; p = strstr(p, "--")) {
        size_t n = 2;
        while (isalnum((unsigned char)p[n]) || p[n] == '-')
            n++;
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)(n < sizeof flag ? n : sizeof flag - 1), p);
        p += n;
        if (n == 2)
            continue;
        char bold[70];
        snprintf(bold, sizeof bold, "*%s*", flag);
        if (!strstr(scd, bold)) {
            print_message("%s: the usage shows %s, docs/man/%s.1.scd does not document it\n", prog,
                          flag, prog);
            fail();
        }
    }
}

static void test_man_pages(void **state)
{
    (void)state;
    static char usage[OUT_CAP], scd[OUT_CAP], page[OUT_CAP], out[OUT_CAP];
    char probe[16];
    bool have_man = ttool_run("/bin/sh", "-c 'command -v man'", probe, sizeof probe) == 0;
    const char *sections[] = {"NAME",    "SYNOPSIS",    "DESCRIPTION",
                              "OPTIONS", "EXIT STATUS", "SEE ALSO"};
    for (int i = 0; i < n_progs; i++) {
        char path[4200], src[4200], man[4200];
        prog_path(progs[i], path, sizeof path);
        assert_int_equal(ttool_run_stream(path, "--help", 1, usage, sizeof usage), 0);
        snprintf(src, sizeof src, "%s/docs/man/%s.1.scd", root, progs[i]);
        snprintf(man, sizeof man, "%s/build/man/%s.1", root, progs[i]);
        if (!read_file(src, scd, sizeof scd) || !read_file(man, page, sizeof page)) {
            print_message("%s: %s or %s is missing (every shipped program has a man page)\n",
                          progs[i], src, man);
            fail();
        }
        flags_documented(progs[i], usage, scd);
        must_contain(scd, "*--help*", progs[i]);
        must_contain(scd, "*--version*", progs[i]);
        for (size_t s = 0; s < sizeof sections / sizeof *sections; s++) {
            char sh[64];
            snprintf(sh, sizeof sh, ".SH %s", sections[s]);
            must_contain(page, sh, progs[i]);
        }
        if (!have_man)
            continue;
        /* rendered as a reader sees it; groff's warnings (bad requests, lines it cannot fit)
           go to stderr, which must stay empty */
        char args[4300];
        snprintf(args, sizeof args, "-l '%s'", man);
        setenv("MANWIDTH", "80", 1);
        setenv("LC_ALL", "C", 1);
        assert_int_equal(ttool_run_stream("man", args, 2, out, sizeof out), 0);
        if (out[0]) {
            print_message("man -l %s warned:\n%s\n", man, out);
            fail();
        }
        assert_int_equal(ttool_run_stream("man", args, 1, out, sizeof out), 0);
        for (size_t s = 0; s < sizeof sections / sizeof *sections; s++)
            must_contain(out, sections[s], progs[i]);
        must_contain(out, progs[i], progs[i]);
    }
}

/* shoal-keygen DIR: DIR's missing parents are made, and each line it prints says what it is. */
static void test_keygen(void **state)
{
    (void)state;
    static char out[OUT_CAP];
    char path[4200], tmp[] = "/tmp/shoal-test-cli-XXXXXX", args[256];
    prog_path("shoal-keygen", path, sizeof path);
    assert_non_null(mkdtemp(tmp));
    snprintf(args, sizeof args, "'%s/a/b/keys' --name n1", tmp);
    assert_int_equal(ttool_run_stream(path, args, 1, out, sizeof out), 0);
    must_contain(out, "public key: ", "shoal-keygen");
    must_contain(out, "public certificate: ", "shoal-keygen");
    must_contain(out, "secret certificate: ", "shoal-keygen");
    char cert[300];
    snprintf(cert, sizeof cert, "%s/a/b/keys/n1.cert_secret", tmp);
    struct stat st;
    assert_int_equal(stat(cert, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* the same pair again is refused; --force replaces it */
    assert_int_equal(ttool_run(path, args, out, sizeof out), 1);
    snprintf(args, sizeof args, "'%s/a/b/keys' --name n1 --force", tmp);
    assert_int_equal(ttool_run(path, args, out, sizeof out), 0);
    trm_tree(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),         cmocka_unit_test(test_version),
        cmocka_unit_test(test_unknown_flag), cmocka_unit_test(test_man_pages),
        cmocka_unit_test(test_keygen),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
