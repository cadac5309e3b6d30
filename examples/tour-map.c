/*  tour-map.c — the tour, part 1: three nodes in one process share a replicated map.

      cc -o tour-map tour-map.c $(pkg-config --cflags --libs shoal)
      ./tour-map

    Each node is a shoal_system_t (one event-loop thread, its own ZeroMQ sockets, an ephemeral
    port on loopback) with one replicator. The replicators are told each other as peers (a static
    peer list: ddata on its own, without membership). Node 1 writes colour = blue into the LWWMap
    "settings" with WriteMajority; node 3 reads it with ReadMajority. Two majorities of three
    nodes share a node, so the read sees the write.

    THREADS. main is not a node thread. The _sync calls (connect, add_peer, update, get) run the
    operation on the node thread and wait for it. The modify function of an update runs on the
    node thread.

    Exit 0 when node 3 read colour = blue; 1 otherwise, with the reason on stderr. test_install
    builds and runs this file against the staged `scons install` (docs/install.md).
*/
#include <shoal/ddata.h>

#include <stdio.h>
#include <string.h>

#define NODES 3

/* Connects node i to the other nodes; they become peers of its replicator that count toward
   majorities (age j: node 1 is the oldest). */
static int add_peers(shoal_system_t *const *nodes, shoal_replicator_t *rep, int i)
{
    for (int j = 0; j < NODES; j++) {
        if (j == i)
            continue;
        int rc = shoal_system_connect_sync(nodes[i], shoal_system_endpoint(nodes[j]));
        if (rc == 0)
            rc = shoal_replicator_add_peer_sync(rep, shoal_system_self(nodes[j]), true,
                                                (uint64_t)j);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The modify function: the map's change is attributed to the writing node. */
static int put_blue(shoal_crdt_t *map, void *sys)
{
    return shoal_lwwmap_put(map, shoal_system_self(sys), "colour", 6, "blue", 4, NULL, NULL);
}

int main(void)
{
    shoal_system_t *nodes[NODES] = {0};
    shoal_replicator_t *reps[NODES] = {0};
    shoal_crdt_t *map = NULL;
    int err = 0, rc = 1;

    /* start three nodes, each with the default replicator (role "") */
    for (int i = 0; i < NODES; i++) {
        shoal_system_settings_t ss;
        shoal_system_settings_default(&ss);
        ss.endpoint = "tcp://127.0.0.1:0"; /* port 0: an ephemeral port */
        nodes[i] = shoal_system_new(&ss, &err);
        if (!nodes[i]) {
            fprintf(stderr, "tour-map: node %d did not start: %s\n", i + 1, shoal_strerror(err));
            goto out;
        }
        shoal_replicator_settings_t rs;
        shoal_replicator_settings_default(&rs);
        reps[i] = shoal_replicator_new(nodes[i], &rs, &err);
        if (!reps[i]) {
            fprintf(stderr, "tour-map: no replicator: %s\n", shoal_strerror(err));
            goto out;
        }
    }
    for (int i = 0; i < NODES; i++) {
        if ((err = add_peers(nodes, reps[i], i)) < 0) {
            fprintf(stderr, "tour-map: peers: %s\n", shoal_strerror(err));
            goto out;
        }
    }

    /* write on node 1: acknowledged once 2 of the 3 nodes hold it */
    const shoal_consistency_t majority = {.level = SHOAL_MAJORITY, .timeout_ms = 5000};
    /* the update takes the map a missing key starts from, and sets `start` to NULL */
    shoal_crdt_t *start = shoal_lwwmap_new();
    err = shoal_replicator_update_take_sync(reps[0], "settings", &start, &majority, put_blue,
                                            nodes[0]);
    if (err != 0) {
        fprintf(stderr, "tour-map: write on node 1: %s\n", shoal_strerror(err));
        goto out;
    }

    /* read on node 3: a copy of the map, ours to free */
    err = shoal_replicator_get_sync(reps[2], "settings", shoal_type_by_name("LWWMap"), &majority,
                                    &map);
    size_t len = 0;
    const void *colour = err == 0 ? shoal_lwwmap_get(map, "colour", 6, &len) : NULL;
    if (err != 0)
        fprintf(stderr, "tour-map: read on node 3: %s\n", shoal_strerror(err));
    else if (!colour || len != 4 || memcmp(colour, "blue", 4) != 0)
        fprintf(stderr, "tour-map: node 3 read no colour = blue\n");
    else {
        printf("node 3 (%s) read colour = blue\n", shoal_system_endpoint(nodes[2]));
        rc = 0;
    }

out:
    /* stop in reverse order of creation: replicators, then nodes (both NULL-safe) */
    shoal_crdt_destroy(&map);
    for (int i = NODES - 1; i >= 0; i--) {
        shoal_replicator_destroy(&reps[i]);
        shoal_system_destroy(&nodes[i]);
    }
    return rc;
}
