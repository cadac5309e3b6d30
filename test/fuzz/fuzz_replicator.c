/*  fuzz_replicator.c — libFuzzer target for every replicator message decoder and the client
    requests. The first byte picks the message kind; the rest is the message. A real node and
    replicator (with a few keys, so merges, reads and digest comparisons have something to work
    on) handle it on their own thread, as they would a message from a peer.

    The node keeps what inputs write; after FRESH_EVERY inputs it is replaced by a new one, so
    that its state (and the time an input takes) stays bounded over a long run.
*/
#include "replicator_internal.h"

#include <stdlib.h>

#define FRESH_EVERY 20000

static shoal_system_t *sys;
static shoal_replicator_t *rep;
static const shoal_node_t *peer;
static unsigned long inputs;

typedef struct {
    const uint8_t *data;
    size_t len;
} input_t;

static int seed_value(shoal_crdt_t *v, void *arg)
{
    (void)arg;
    return shoal_gcounter_increment(v, shoal_system_self(sys), 3);
}

static void seeded(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)status;
    (void)key;
    (void)arg;
}

static int setup(shoal_system_t *s, void *arg)
{
    (void)arg;
    shoal_consistency_t l = {0};
    const char *keys[] = {"a", "b", "counter"};
    for (int i = 0; i < 3; i++)
        shoal_replicator_update(rep, keys[i], shoal_gcounter_new(), &l, seed_value, NULL, seeded,
                                NULL);
    shoal_replicator_add_peer(rep, peer, true, 1);
    (void)s;
    return 0;
}

static int loaded(shoal_system_t *s, void *arg)
{
    (void)s;
    (void)arg;
    return (int)shoal_replicator_replica_count(rep);
}

static int feed(shoal_system_t *s, void *arg)
{
    input_t *in = arg;
    uint8_t sel = in->data[0];
    if (sel & 0x80) {
        shoal_reply_to_t to = {{1, 2, 3, 4, 5}, 5, 7};
        repl_client_dispatch(s, &to, (uint16_t)(0x8001 + (sel & 0x7f) % 6), in->data + 1, in->len - 1);
    } else {
        repl_dispatch(rep, peer, (uint16_t)(K_READ + sel % (K_LAST - K_READ + 1)), in->data + 1,
                      in->len - 1);
    }
    return 0;
}

/* The node must stop before czmq's own exit handler tears the context down. */
static void stop_node(void)
{
    shoal_replicator_destroy(&rep);
    shoal_system_destroy(&sys);
}

static void start_node(void)
{
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err;
    sys = shoal_system_new(&ss, &err);
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    rep = shoal_replicator_new(sys, &rs, &err);
    peer = shoal_node_intern("127.0.0.1:9:42");
    if (!sys || !rep)
        abort();
    /* let the replicator finish loading, then give it some keys */
    while (shoal_system_call(sys, loaded, NULL) == 0)
        ;
    shoal_system_call(sys, setup, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sys) {
        start_node();
        atexit(stop_node);
    } else if (++inputs % FRESH_EVERY == 0) {
        stop_node();
        start_node();
    }
    if (size < 1)
        return 0;
    input_t in = {data, size};
    shoal_system_call(sys, feed, &in);
    return 0;
}
