/*  crdt-tour — three replicas of a small shop, in one process, talking only through bytes.

    Each replica changes its own copy while "partitioned" (no exchange), then they ship their
    deltas to each other as encoded bytes, in a different order at each replica, one delta twice.
    The tour prints what each replica sees before and after, and checks that the three end with
    identical values and identical digests (exit status 1 if they do not). It takes no arguments
    but --help and --version (anything else: exit 2).

    Until the replicator and the cluster exist, this is Shoal's main demo: the data types alone.
*/
#include "cli.h"
#include "ddata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define R 3

typedef struct {
    const char *name;
    const shoal_node_t *node;
    shoal_crdt_t *cart;     /* ORSet: items in the cart */
    shoal_crdt_t *visits;   /* GCounter: page views */
    shoal_crdt_t *stock;    /* PNCounterMap: item -> units in stock */
    shoal_crdt_t *prices;   /* LWWMap: item -> price */
    shoal_buf_t outbox[4];  /* encoded deltas, one per value */
} replica_t;

static void die(const char *what, int rc)
{
    fprintf(stderr, "crdt-tour: %s: %s\n", what, shoal_strerror(rc));
    exit(2);
}

static void check(int rc, const char *what)
{
    if (rc < 0)
        die(what, rc);
}

static void show(const char *label, shoal_crdt_t *v)
{
    shoal_buf_t b = {0};
    shoal_crdt_render(v, &b);
    printf("    %-8s %s\n", label, shoal_buf_cstr(&b));
    shoal_buf_free(&b);
}

static void show_replica(replica_t *r)
{
    printf("  %s (%s)\n", r->name, shoal_node_id(r->node));
    show("cart", r->cart);
    show("visits", r->visits);
    show("stock", r->stock);
    show("prices", r->prices);
}

static shoal_crdt_t **values(replica_t *r, int i)
{
    shoal_crdt_t **v[] = {&r->cart, &r->visits, &r->stock, &r->prices};
    return v[i];
}

/* Takes each value's pending delta and encodes it into the outbox. */
static void pack_deltas(replica_t *r)
{
    for (int i = 0; i < 4; i++) {
        shoal_buf_reset(&r->outbox[i]);
        shoal_crdt_t *d = shoal_crdt_take_delta(*values(r, i));
        if (d) {
            check(shoal_crdt_encode(d, &r->outbox[i]), "encode delta");
            shoal_crdt_destroy(&d);
        }
    }
}

static void receive(replica_t *to, replica_t *from)
{
    for (int i = 0; i < 4; i++) {
        shoal_buf_t *b = &from->outbox[i];
        if (!b->len)
            continue;
        shoal_crdt_t *d = NULL;
        check(shoal_crdt_decode(b->data, b->len, &d), "decode delta");
        check(shoal_crdt_merge_delta(*values(to, i), d), "apply delta");
        shoal_crdt_destroy(&d);
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: crdt-tour\n"
               "       crdt-tour --help | --version\n"
               "Three replicas of a small shop converge through encoded deltas; exit 1 if they\n"
               "do not end identical.\n");
}

int main(int argc, char **argv)
{
    int cli = cli_help_or_version(&argc, argv, "crdt-tour", usage);
    if (cli >= 0)
        return cli;
    if (argc > 1) {
        fprintf(stderr, "crdt-tour: unknown argument '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    replica_t r[R] = {{.name = "lisbon"}, {.name = "oslo"}, {.name = "quito"}};
    for (int i = 0; i < R; i++) {
        r[i].node = shoal_node_make("127.0.0.1", (uint16_t)(2551 + i), 1000 + (uint64_t)i);
        r[i].cart = shoal_orset_new();
        r[i].visits = shoal_gcounter_new();
        r[i].stock = shoal_pncountermap_new();
        r[i].prices = shoal_lwwmap_new();
    }

    /* A shared starting point: lisbon stocks the shop and everyone learns it. */
    check(shoal_pncountermap_add(r[0].stock, r[0].node, "tea", 3, 10), "stock");
    check(shoal_pncountermap_add(r[0].stock, r[0].node, "cups", 4, 4), "stock");
    check(shoal_lwwmap_put(r[0].prices, r[0].node, "tea", 3, "4.50", 4, NULL, NULL), "price");
    check(shoal_orset_add(r[0].cart, r[0].node, "tea", 3), "cart");
    pack_deltas(&r[0]);
    receive(&r[1], &r[0]);
    receive(&r[2], &r[0]);

    /* Partitioned: each replica acts alone. */
    check(shoal_orset_remove(r[0].cart, r[0].node, "tea", 3), "cart");  /* lisbon drops tea */
    check(shoal_orset_add(r[1].cart, r[1].node, "tea", 3), "cart");     /* oslo re-adds it */
    check(shoal_orset_add(r[2].cart, r[2].node, "cups", 4), "cart");
    for (int i = 0; i < R; i++)
        check(shoal_gcounter_increment(r[i].visits, r[i].node, (uint64_t)(i + 1) * 10), "visit");
    check(shoal_pncountermap_add(r[1].stock, r[1].node, "tea", 3, -2), "sell");
    check(shoal_pncountermap_add(r[2].stock, r[2].node, "tea", 3, -1), "sell");
    check(shoal_lwwmap_put(r[1].prices, r[1].node, "tea", 3, "4.75", 4, NULL, NULL), "price");
    check(shoal_lwwmap_put(r[2].prices, r[2].node, "cups", 4, "2.00", 4, NULL, NULL), "price");

    printf("While partitioned, each replica sees only its own changes:\n");
    for (int i = 0; i < R; i++)
        show_replica(&r[i]);

    for (int i = 0; i < R; i++)
        pack_deltas(&r[i]);
    /* Healed: deltas cross as bytes, in a different order at each replica, one twice. */
    receive(&r[0], &r[2]);
    receive(&r[0], &r[1]);
    receive(&r[1], &r[0]);
    receive(&r[1], &r[2]);
    receive(&r[1], &r[0]); /* a duplicate changes nothing */
    receive(&r[2], &r[1]);
    receive(&r[2], &r[0]);

    printf("\nAfter exchanging deltas (oslo's re-add of tea wins over lisbon's remove, which had "
           "not seen it):\n");
    for (int i = 0; i < R; i++)
        show_replica(&r[i]);

    int bad = 0;
    for (int v = 0; v < 4; v++) {
        uint8_t d0[16], di[16];
        check(shoal_crdt_digest(*values(&r[0], v), d0), "digest");
        for (int i = 1; i < R; i++) {
            check(shoal_crdt_digest(*values(&r[i], v), di), "digest");
            if (memcmp(d0, di, 16) != 0) {
                printf("MISMATCH: value %d differs between %s and %s\n", v, r[0].name, r[i].name);
                bad = 1;
            }
        }
    }
    bool tea = shoal_orset_contains(r[0].cart, "tea", 3);
    int64_t tea_stock = 0;
    shoal_pncountermap_get(r[0].stock, "tea", 3, &tea_stock);
    if (!tea || tea_stock != 7 || shoal_gcounter_value(r[0].visits) != 60) {
        printf("MISMATCH: expected tea in the cart, 7 tea in stock and 60 visits\n");
        bad = 1;
    }
    printf("\n%s: all %d replicas hold identical values (same digests)\n", bad ? "FAIL" : "OK", R);
    for (int i = 0; i < R; i++) {
        for (int v = 0; v < 4; v++) {
            shoal_crdt_destroy(values(&r[i], v));
            shoal_buf_free(&r[i].outbox[v]);
        }
    }
    return bad;
}
