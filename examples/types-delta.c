/*  types-delta.c — replicated data types without a network: two replicas of a shopping cart (an
    ORSet) change their own copies, ship each other deltas as bytes, and end equal.

      cc -o types-delta types-delta.c $(pkg-config --cflags --libs shoal)
      ./types-delta

    This is what the replicator does for you between nodes (docs/types.md): a mutation records
    a delta, the delta is encoded (self-describing, canonical bytes), decoded on the other side
    and merged. Merge is a join, so the order and repetition of deltas do not matter: the
    replicas end with the same value and the same digest.

    Exit 0 when both carts hold {tea, milk} with equal digests; 1 otherwise. test_install builds
    and runs this file against the staged `scons install`.
*/
#include <shoal/ddata.h>

#include <stdio.h>
#include <string.h>

/* Takes the pending delta of `from`, encodes it, decodes the bytes and merges them into `to`:
   the trip a delta makes between two nodes. */
static int ship_delta(shoal_crdt_t *from, shoal_crdt_t *to)
{
    shoal_crdt_t *delta = shoal_crdt_take_delta(from); /* ours to free; NULL: nothing changed */
    shoal_buf_t wire = {0};
    shoal_crdt_t *received = NULL;
    int rc = delta ? shoal_crdt_encode(delta, &wire) : SHOAL_EINVAL;
    if (rc == 0)
        rc = shoal_crdt_decode(wire.data, wire.len, &received);
    if (rc == 0)
        rc = shoal_crdt_merge_delta(to, received);
    shoal_crdt_destroy(&received);
    shoal_buf_free(&wire);
    shoal_crdt_destroy(&delta);
    return rc;
}

int main(void)
{
    /* node ids are host:port:uid; interned, so they compare by pointer */
    const shoal_node_t *a = shoal_node_intern("10.0.0.1:2552:1");
    const shoal_node_t *b = shoal_node_intern("10.0.0.2:2552:2");
    shoal_crdt_t *cart_a = shoal_orset_new(), *cart_b = shoal_orset_new();

    shoal_orset_add(cart_a, a, "tea", 3);  /* each replica changes its own copy... */
    shoal_orset_add(cart_b, b, "milk", 4);
    int rc = ship_delta(cart_a, cart_b);   /* ...and ships what changed to the other */
    if (rc == 0)
        rc = ship_delta(cart_b, cart_a);

    uint8_t da[16], db[16];
    bool same = rc == 0 && shoal_crdt_equal(cart_a, cart_b) && shoal_orset_size(cart_a) == 2 &&
                shoal_orset_contains(cart_a, "tea", 3) && shoal_orset_contains(cart_a, "milk", 4) &&
                shoal_crdt_digest(cart_a, da) == 0 && shoal_crdt_digest(cart_b, db) == 0 &&
                memcmp(da, db, sizeof da) == 0;
    if (rc != 0)
        fprintf(stderr, "types-delta: %s\n", shoal_strerror(rc));
    else if (!same)
        fprintf(stderr, "types-delta: the replicas differ\n");
    else
        printf("both replicas: {tea, milk}, equal digests\n");
    shoal_crdt_destroy(&cart_a);
    shoal_crdt_destroy(&cart_b);
    return same ? 0 : 1;
}
