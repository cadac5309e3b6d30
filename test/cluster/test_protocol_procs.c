/*  test_protocol_procs.c — the protocol negotiation across two builds, in separate processes: the
    check's release chaos-node (protocol 1..1) and the SHOAL_PROTOCOL_NEXT variant's
    (build/next/bin/chaos-node, 1..2, one message in a changed format at 2). A cluster cannot mix
    builds in one process, so test/cluster/protocol_check.py starts, replaces and queries the
    processes (over their management endpoints) and this test runs it: mixed at 1 with no format
    2 and no message of unknown kind, 2 only after the last normal member left, format 2 then
    used, a normal joiner refused at 2 naming both versions, and let in once every member is
    pinned to 1 (docs/protocol-versions.md).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools.h"


static void mixed_builds_negotiate(void **state)
{
    (void)state;
    char root[4000], cmd[12400];
    ttool_tree_file(".", root, sizeof root);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '%s/test/cluster/protocol_check.py' '%s/build/bin/chaos-node' "
             "'%s/build/next/bin/chaos-node' --timeout %d 2>&1",
             root, root, root, 40 * tscale());
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[4096];
    while (fgets(line, sizeof line, p))
        fputs(line, stdout);
    int status = pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("protocol_check.py failed (exit %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mixed_builds_negotiate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
