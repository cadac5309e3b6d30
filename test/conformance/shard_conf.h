/*  shard_conf.h — small helpers the sharding specs of the conformance suite share (static, in
    each file that includes it): which node answers an entity, and the regions a coordinator
    knows. Built on test/common/shards.h.
*/
#ifndef SHOAL_TEST_SHARD_CONF_H
#define SHOAL_TEST_SHARD_CONF_H

#include "shards.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A short pause between two looks at a condition (10 ms), so a polling loop does not spin. */
static inline bool sc_nap(void)
{
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
    return true;
}

/* The node index whose entity answers "whoami" for id, asked through node `via` (-1 on error:
   the ask timed out or failed). */
static inline int sc_home(int via, const char *type, const char *id, uint32_t timeout_ms)
{
    (void)type;
    shoal_buf_t b = {0};
    int rc = shoal_region_ask_sync(tsn[via].r, id, "whoami", 6, timeout_ms, &b);
    int node = rc == 0 ? atoi(shoal_buf_cstr(&b)) : -1;
    shoal_buf_free(&b);
    return node;
}

/* The number of regions node `via`'s coordinator knows (-1 on error). */
static inline int sc_regions(int via)
{
    const shoal_node_t **nodes = NULL;
    size_t n = 0;
    if (shoal_region_current_regions(tsn[via].r, 2000u * (uint32_t)tscale(), &nodes, &n) != 0)
        return -1;
    free(nodes);
    return (int)n;
}

/* Starts nodes 0..n-1: node 0 first, alone and Up (the oldest: the coordinator's host), then
   the others through it. */
static inline void sc_start_nodes(int n, const tsnode_opts_t *o)
{
    tsnode_opts_t oi = o ? *o : (tsnode_opts_t){0};
    oi.seed = 0;
    tsnode_start(0, &oi);
    tsnode_wait_up(1u, 15000);
    for (int i = 1; i < n; i++)
        tsnode_start(i, &oi);
    tsnode_wait_up((1u << n) - 1, 20000);
}

#endif
