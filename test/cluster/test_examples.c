/*  test_examples.c — the seeds' applications in their short form, run as a user runs them
    (build/bin/<example>, a release build, which `scons check` builds too), their summaries read.

    payments --short: 400 payment flows on three node processes, the one hosting the most ledger
    shards killed with SIGKILL once half of the requests are confirmed; every payment must end
    settled exactly once (each id in one ledger once, totals equal) or failed at its sanctions
    deadline (exactly the ones the simulated sanctions service ignores), none stuck, and the
    killed node's flows must answer again from their stored state.
    (session-judge has a test of its own: test_session_judge.c.)
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"

#define OUT_CAP (8u << 20)

static char *out;

static void must_contain(const char *text, const char *want)
{
    if (!strstr(text, want)) {
        const char *tail = strlen(text) > 4000 ? text + strlen(text) - 4000 : text;
        print_message("expected \"%s\" in the output, whose end is:\n%s\n", want, tail);
        fail();
    }
}

static void test_payments(void **state)
{
    (void)state;
    char path[4096];
    if (!ttool_find("payments", path, sizeof path))
        fail_msg("build/bin/payments is missing: scons check builds the examples");
    int rc = ttool_run(path, "--short", out, OUT_CAP);
    must_contain(out, "payments: 400 sent from the driver's node (at-least-once), 400 confirmed");
    must_contain(out, "final: 384 settled, 16 failed (sanctions deadline), 0 stuck, 0 unanswered");
    must_contain(out, "ledgers: 384 payments, total 207356 (expected 384, 207356)");
    must_contain(out, ", 0 ids in two ledgers");
    must_contain(out, " killed with SIGKILL; it hosted ");
    must_contain(out, "per payment: 0 settled ones not in the ledgers exactly once, 0 others in a "
                      "ledger, 0 unknown ids");
    must_contain(out, "(40 probed) answered again ");
    must_contain(out, ", 0 without their stored state");
    must_contain(out, "\nOK: every payment settled exactly once");
    assert_int_equal(rc, 0);
}

int main(void)
{
    out = calloc(1, OUT_CAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_payments),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(out);
    return rc;
}
