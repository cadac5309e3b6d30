/*  test_chaos_smoke.c — the chaos suite's seeded 30-second smoke inside `scons check`:
    tools/chaos.py --smoke runs three chaos-node processes of this (sanitized) build on loopback,
    with the transport's fault injection (delay and duplication, loss, one node cut off), a
    SIGKILL and restart on the same data directory and a SIGSTOP/SIGCONT pause, generous timers,
    under the concurrent workload of chaos-client; then heals and checks every acknowledged write,
    equal replicas, entity incarnations that never overlap, acknowledged entity messages in the
    stored state, nothing processed twice (see tools/chaos.py). Its summary ends with "OK: ...".
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OUT_CAP (4u << 20)

static void test_chaos_smoke(void **state)
{
    (void)state;
    if (access("tools/chaos.py", R_OK) != 0 || access("build/check/bin/chaos-node", X_OK) != 0)
        fail_msg("run from the repository root after scons built build/check/bin/chaos-node");
    /* the suite's own scratch directory, apart from a `scons chaos` run's build/chaos */
    FILE *p = popen("python3 tools/chaos.py --smoke --bin build/check/bin --tools build/bin "
                    "--out build/check/chaos-smoke 2>&1",
                    "r");
    assert_non_null(p);
    char *out = calloc(1, OUT_CAP);
    assert_non_null(out);
    size_t n = 0, got;
    while (n < OUT_CAP - 1 && (got = fread(out + n, 1, OUT_CAP - 1 - n, p)) > 0)
        n += got;
    int rc = pclose(p);
    if (rc != 0 || !strstr(out, "\nchaos: OK: ")) {
        print_message("%s\n", n > 20000 ? out + n - 20000 : out);
        free(out);
        fail_msg("tools/chaos.py --smoke exited %d", rc);
    }
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chaos_smoke),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
