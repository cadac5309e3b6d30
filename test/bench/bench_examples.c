/*  bench_examples.c — the examples' throughput with a node change in the middle (issue 9):
    runs the release examples next to this program (build/bin) with --bench, each of which prints
    its own BENCH line with a baseline measured in the same run:
      payments_settled_per_s  payments settled per second over a run of 2,000 with one of three
                              payment nodes killed (SIGKILL) halfway; baseline: stateless ask
                              round trips through the same cluster (256 in flight), same run
      judge_events_per_s      game events judged per second (read from Redis Streams, routed to
                              judge entities, state saved) while a node joins and another leaves;
                              baseline: raw XADD + XREAD of the same Redis in the same run
    The examples' own summaries go to stderr; a failed example makes this program fail.
*/
#include "bench.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int run(const char *dir, const char *cmd)
{
    char line[8192];
    snprintf(line, sizeof line, "'%s/%s 2>/dev/null", dir, cmd);
    char *sp = strchr(line + 1, ' ');
    if (sp) {
        memmove(sp + 1, sp, strlen(sp) + 1);
        *sp = '\'';
    }
    FILE *p = popen(line, "r");
    if (!p)
        return 1;
    char buf[1024];
    while (fgets(buf, sizeof buf, p)) {
        if (!strncmp(buf, "BENCH ", 6))
            fputs(buf, stdout);
        else
            fprintf(stderr, "  %s", buf);
    }
    return pclose(p) != 0;
}

int main(void)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return 1;
    self[n] = 0;
    const char *dir = dirname(self);
    int rc = run(dir, "payments --payments 2000 --bench");
    rc |= run(dir, "session-judge --games 500 --events-per-game 200 --bench");
    if (rc)
        bench_note("an example failed: see its summary above");
    return rc;
}
