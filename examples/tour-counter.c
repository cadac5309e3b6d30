/*  tour-counter.c — the tour, part 2: a sharded counter on a 3-node cluster in one process.

      cc -o tour-counter tour-counter.c $(pkg-config --cflags --libs shoal)
      ./tour-counter

    Three nodes form a cluster (membership: node 1 is the seed of all three), run sharding, and
    start the entity type "counter" on every node. A counter is an entity: it is created on its
    first message, lives on whichever node hosts its shard, and keeps its total as entity state
    (saved with WriteMajority in the replicator, so it survives the entity moving or its node
    crashing). An ask "+N" adds N and is answered with the new total once the save is
    acknowledged. main asks through different nodes: the region of each node routes the message
    to wherever the entity lives.

    THREADS. Entity callbacks run on the node thread of the node hosting the entity and must not
    block. main uses the calls documented as safe from any thread (ask_sync, self_status,
    shutdown_wait). Stop: an orderly shutdown of each node (its shards are handed off,
    it leaves the cluster), waited for with a deadline, then sharding, membership and the node.

    Exit 0 when every answer was the expected total; 1 otherwise, with the reason on stderr.
    test_install builds and runs this file against the staged `scons install`.
*/
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include <shoal/sharding.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NODES 3

/* The entity's state in memory: its total, read from the stored state when it starts. */
static void *counter_start(shoal_entity_t *e, void *type_arg)
{
    (void)type_arg;
    int64_t *total = calloc(1, sizeof *total);
    size_t len = 0;
    const void *stored = shoal_entity_stored(e, &len);
    if (total && stored && len == sizeof *total)
        memcpy(total, stored, sizeof *total);
    return total;
}

/* "+N": add N, save the total, answer with it once the save is acknowledged. */
static void counter_receive(shoal_entity_t *e, void *state, const void *msg, size_t len,
                            void *type_arg)
{
    (void)type_arg;
    int64_t *total = state;
    char text[32];
    if (len < 2 || len >= sizeof text || ((const char *)msg)[0] != '+')
        return; /* not ours: ignored */
    memcpy(text, msg, len);
    text[len] = 0;
    *total += strtoll(text + 1, NULL, 10);
    char reply[32];
    int n = snprintf(reply, sizeof reply, "%lld", (long long)*total);
    shoal_entity_save_reply(e, total, sizeof *total, reply, (size_t)n);
}

static void counter_stop(shoal_entity_t *e, void *state, void *type_arg)
{
    (void)e;
    (void)type_arg;
    free(state);
}

/* Waits until every node sees itself Up, for at most `seconds`. */
static int all_up(shoal_cluster_t *const *clusters, int seconds)
{
    for (int tick = 0; tick < seconds * 20; tick++) {
        int up = 0;
        for (int i = 0; i < NODES; i++)
            up += shoal_cluster_self_status(clusters[i]) == SHOAL_MEMBER_UP;
        if (up == NODES)
            return 1;
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    return 0;
}

/* One ask through node `via`'s region; checks the answer. */
static int ask(shoal_region_t *const *regions, int via, const char *counter, const char *add,
               long long want)
{
    shoal_buf_t reply = {0};
    int err = shoal_region_ask_sync(regions[via], counter, add, strlen(add), 5000, &reply);
    char text[32] = "";
    if (err == 0 && reply.len < sizeof text)
        memcpy(text, reply.data, reply.len); /* the reply's bytes, not a C string */
    long long got = strtoll(text, NULL, 10);
    if (err != 0)
        fprintf(stderr, "tour-counter: %s %s via node %d: %s\n", counter, add, via + 1,
                shoal_strerror(err));
    else if (got != want)
        fprintf(stderr, "tour-counter: %s %s via node %d: %lld, expected %lld\n", counter, add,
                via + 1, got, want);
    else
        printf("%s %s via node %d -> %lld\n", counter, add, via + 1, got);
    shoal_buf_free(&reply);
    return err == 0 && got == want;
}

int main(void)
{
    shoal_system_t *nodes[NODES] = {0};
    shoal_cluster_t *clusters[NODES] = {0};
    shoal_sharding_t *shardings[NODES] = {0};
    shoal_region_t *regions[NODES] = {0};
    const char *seed = NULL;
    int err = 0, rc = 1, i;

    for (i = 0; i < NODES; i++) {
        shoal_system_settings_t ss;
        shoal_system_settings_default(&ss);
        ss.endpoint = "tcp://127.0.0.1:0";
        if (!(nodes[i] = shoal_system_new(&ss, &err)))
            goto fail;
        if (i == 0)
            seed = shoal_system_endpoint(nodes[0]); /* node 1 forms the cluster */

        shoal_cluster_settings_t cs;
        shoal_cluster_settings_default(&cs);
        cs.seed_nodes = &seed;
        cs.n_seed_nodes = 1;
        if (!(clusters[i] = shoal_cluster_new(nodes[i], &cs, &err)))
            goto fail;

        if (!(shardings[i] = shoal_sharding_new(clusters[i], &err)))
            goto fail;
        shoal_sharding_settings_t s;
        shoal_sharding_settings_default(&s);
        s.entity_state = true; /* each counter keeps its total in the replicator */
        const shoal_entity_fns_t fns = {counter_start, counter_receive, counter_stop, NULL};
        if (!(regions[i] = shoal_region_start(shardings[i], "counter", &s, &fns, NULL, &err)))
            goto fail;
    }
    if (!all_up(clusters, 30)) {
        fprintf(stderr, "tour-counter: the three nodes did not come Up within 30 s\n");
        goto out;
    }

    /* the same counters, asked through different nodes */
    rc = !(ask(regions, 0, "apples", "+5", 5) && ask(regions, 1, "apples", "+2", 7) &&
           ask(regions, 2, "pears", "+1", 1) && ask(regions, 2, "apples", "+0", 7));
    goto out;

fail:
    fprintf(stderr, "tour-counter: starting node %d: %s\n", i + 1, shoal_strerror(err));
out:
    /* orderly shutdown, one node after the other (newest first): its shards are handed off to
       the others, it leaves the cluster; shoal_cluster_shutdown_wait returns when it is done */
    for (i = NODES - 1; i >= 0; i--)
        if (clusters[i])
            shoal_cluster_shutdown_wait(clusters[i], 30000);
    for (i = NODES - 1; i >= 0; i--) {
        shoal_sharding_destroy(&shardings[i]); /* its regions with it */
        shoal_cluster_destroy(&clusters[i]);
        shoal_system_destroy(&nodes[i]);
    }
    return rc;
}
