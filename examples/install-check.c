/*  install-check.c — a first program against an installed Shoal: one node, one replicator, one
    replicated set, written and read back from the main thread.

      cc -o install-check install-check.c $(pkg-config --cflags --libs shoal)
      ./install-check

    The node binds an ephemeral port on loopback (port 0), so two runs never collide. main is not
    the node thread, so it uses the replicator's _sync calls (they run the operation on the node
    thread and wait for it); the modify function runs on the node thread. LOCAL reads and writes
    need no peers: this node is the only replica. Stop in reverse order of creation: the
    replicator, then the node.

    `scons check` installs Shoal into a staging directory under build/ and builds this file there
    with nothing but `pkg-config --cflags --libs shoal` (and once with `--static` against
    libshoal.a), then runs it (test/tools/test_install.c). Exit 0 when the set read back holds
    what was added; 1 otherwise, with the reason on stderr.
*/
#include <shoal/ddata.h>

#include <stdio.h>

/* The modify function of the update: runs on the node thread with the key's value (the initial
   value itself when the key is new). A value's changes are attributed to a node: this one. */
static int add_tea(shoal_crdt_t *cart, void *sys)
{
    return shoal_orset_add(cart, shoal_system_self(sys), "tea", 3);
}

int main(void)
{
    int err = 0;
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    if (!sys) { /* the code, and in words why */
        fprintf(stderr, "install-check: the node did not start: %s: %s\n", shoal_strerror(err),
                shoal_last_error_detail());
        return 1;
    }
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    shoal_replicator_t *r = shoal_replicator_new(sys, &rs, &err);
    if (!r) {
        fprintf(stderr, "install-check: no replicator: %s\n", shoal_strerror(err));
        shoal_system_destroy(&sys);
        return 1;
    }

    const shoal_consistency_t local = {.level = SHOAL_LOCAL};
    /* the update takes the initial value and sets `cart` to NULL: nothing to free here */
    shoal_crdt_t *cart = shoal_orset_new();
    err = shoal_replicator_update_take_sync(r, "cart", &cart, &local, add_tea, sys);
    if (err == 0)
        err = shoal_replicator_get_sync(r, "cart", shoal_type_by_name("ORSet"), &local, &cart);
    int rc = 1;
    if (err != 0)
        fprintf(stderr, "install-check: cart: %s\n", shoal_strerror(err));
    else if (!shoal_orset_contains(cart, "tea", 3) || shoal_orset_size(cart) != 1)
        fprintf(stderr, "install-check: the cart read back does not hold exactly \"tea\"\n");
    else {
        printf("node %s at %s: cart = {tea}\n", shoal_node_id(shoal_system_self(sys)),
               shoal_system_endpoint(sys));
        rc = 0;
    }
    shoal_crdt_destroy(&cart);
    shoal_replicator_destroy(&r);
    shoal_system_destroy(&sys);
    return rc;
}
