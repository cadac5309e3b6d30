/*  fuzz_stored.c — libFuzzer target for the stored-value path: bytes as they would come out of
    an LMDB environment (or any store), handed to the replicator's load path (repl_load_entry:
    the DataEnvelope, its value, its pruning markers and delta numbers, and the write time the
    replicator appends), then a pruning round over what was loaded. A corrupted or hostile store
    must give an error for the entry, never a crash.

    Input: the first byte chooses the key. With its top bit set the entry is merged into "seeded",
    a key made afresh for each input with a value and a performed pruning marker (so merging and
    cleaning have something to work on); otherwise the next (byte & 15) bytes are the key (NUL
    bytes included, which the load path must refuse). Entries are dropped afterwards, so every
    input starts from the same state. The rest is the stored value.
*/
#include "replicator_internal.h"

#include <stdlib.h>

static shoal_system_t *sys;
static shoal_replicator_t *rep;

typedef struct {
    const uint8_t *data;
    size_t len;
} input_t;

#define GONE "127.0.0.1:9:42"

/* "seeded": 3 from this node, and GONE's part pruned into it */
static void seed(void)
{
    entry_t *e = repl_entry_create(rep, "seeded", 6, &shoal_type_gcounter);
    e->value = shoal_gcounter_new();
    shoal_gcounter_increment(e->value, shoal_system_self(sys), 3);
    pruning_t *p = repl_pruning_add(e, shoal_node_intern(GONE));
    p->owner = shoal_system_self(sys);
    p->performed = true;
    p->obsolete_at_ms = repl_wall_ms() + 3600 * 1000;
    repl_entry_changed(rep, e);
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
    const char *key;
    size_t klen, off = 1;
    if (sel & 0x80) {
        key = "seeded";
        klen = 6;
        seed();
    } else {
        klen = sel & 15;
        if (in->len - off < klen)
            return 0;
        key = (const char *)in->data + off;
        off += klen;
    }
    const uint8_t *value = in->data + off;
    size_t len = in->len - off;
    int64_t at = 0;
    (void)repl_stored_at(value, len, &at);
    int rc = repl_load_entry(rep, key, klen, value, len, &at);
    if (rc == 0) {
        /* what a loaded entry goes through next: digests, the pruning round, subscribers */
        repl_refresh_all_digests(rep);
        repl_prune_tick(s, rep);
        shoal_replicator_flush(rep);
    }
    entry_t *e = repl_entry(rep, key, klen);
    if (e)
        repl_entry_drop(rep, e);
    return 0;
}

/* The node must stop before czmq's own exit handler tears the context down. */
static void stop_node(void)
{
    shoal_replicator_destroy(&rep);
    shoal_system_destroy(&sys);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sys) {
        shoal_system_settings_t ss;
        shoal_system_settings_default(&ss);
        ss.endpoint = "tcp://127.0.0.1:0";
        int err;
        sys = shoal_system_new(&ss, &err);
        shoal_replicator_settings_t rs;
        shoal_replicator_settings_default(&rs);
        static const char *const durable[] = {"*"};
        rs.durable_keys = durable; /* no store: durable keys are kept in memory only */
        rs.n_durable_keys = 1;
        rs.pruning_interval_ms = 0; /* the pruning round runs from feed, not from a timer */
        rep = shoal_replicator_new(sys, &rs, &err);
        if (!sys || !rep)
            abort();
        atexit(stop_node);
        while (shoal_system_call(sys, loaded, NULL) == 0)
            ;
    }
    if (size < 1)
        return 0;
    input_t in = {data, size};
    shoal_system_call(sys, feed, &in);
    return 0;
}
