/*  durable-counter.c — a durable key: a counter kept in LMDB survives a restart of its node.

      cc -o durable-counter durable-counter.c $(pkg-config --cflags --libs shoal)
      ./durable-counter

    A node with one replicator whose key "visits" is durable: the replicator's store is the
    LMDB store of durable/durable.h, in a data directory (here a fresh one under /tmp). The
    program counts one visit, stops the node (replicator, node, then the store), starts it
    again on the same directory and reads the counter back: the replicator loads the store
    before it serves. A real node would also have peers; durability is per node.

    Exit 0 when the restarted node read visits = 1; 1 otherwise. test_install builds and runs
    this file against the staged `scons install`.
*/
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <shoal/durable.h>

#include <stdio.h>
#include <stdlib.h>

static int one_visit(shoal_crdt_t *counter, void *sys)
{
    return shoal_gcounter_increment(counter, shoal_system_self(sys), 1);
}

/* Starts a node whose replicator keeps "visits" in the store of d, runs fn on it, stops it. */
static int run_node(shoal_durable_t *d, int (*fn)(shoal_replicator_t *, shoal_system_t *))
{
    int err = 0;
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    if (!sys)
        return err;

    static const char *const durable_keys[] = {"visits"}; /* names, or prefixes ending in '*' */
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    rs.durable_keys = durable_keys;
    rs.n_durable_keys = 1;
    rs.store = shoal_durable_store(d, rs.role); /* owned by d */
    shoal_replicator_t *r = rs.store ? shoal_replicator_new(sys, &rs, &err) : NULL;
    if (r)
        err = fn(r, sys);
    shoal_replicator_destroy(&r);
    shoal_system_destroy(&sys);
    return err;
}

static int count_visit(shoal_replicator_t *r, shoal_system_t *sys)
{
    const shoal_consistency_t local = {.level = SHOAL_LOCAL};
    /* a missing key starts as an empty counter; returns once the store has committed the write */
    return shoal_replicator_update_typed_sync(r, "visits", shoal_type_by_name("GCounter"), &local,
                                              one_visit, sys);
}

static int read_visits(shoal_replicator_t *r, shoal_system_t *sys)
{
    (void)sys;
    const shoal_consistency_t local = {.level = SHOAL_LOCAL};
    shoal_crdt_t *counter = NULL;
    int err = shoal_replicator_get_sync(r, "visits", shoal_type_by_name("GCounter"), &local,
                                        &counter);
    if (err == 0 && shoal_gcounter_value(counter) != 1)
        err = SHOAL_EINVAL;
    shoal_crdt_destroy(&counter);
    return err;
}

int main(void)
{
    char dir[] = "/tmp/durable-counter-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    int err = 0;
    for (int start = 0; start < 2 && err == 0; start++) {
        shoal_durable_settings_t ds;
        shoal_durable_settings_default(&ds);
        ds.dir = dir;
        shoal_durable_t *d = shoal_durable_open(&ds, &err); /* NULL: err and the detail say why */
        if (!d) {
            fprintf(stderr, "durable-counter: %s: %s\n", shoal_strerror(err),
                    shoal_last_error_detail());
            break;
        }
        err = run_node(d, start == 0 ? count_visit : read_visits);
        shoal_durable_close(&d); /* after the replicator that used its store */
    }
    if (err == 0)
        printf("restarted on %s: visits = 1\n", dir);
    else
        fprintf(stderr, "durable-counter: %s\n", shoal_strerror(err));
    char rm[sizeof dir + 16];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0)
        fprintf(stderr, "durable-counter: could not remove %s\n", dir);
    return err == 0 ? 0 : 1;
}
