/*  replicator_net.c — the replicator's protocol with its peers: reads and writes with a
    consistency level, delta propagation, digest-based anti-entropy, pruning rounds, tombstone
    collection, and the chunking and compression that keep every message under the frame limit.

    Messages (proto/replicator.proto) carry the role, so one node's replicators share the node's
    transport. Every handler checks what it is given before trusting it; anything malformed is
    counted and dropped.

    Rates: deltas every delta interval (Akka: gossip interval / 5) to a rotating slice of peers
    (every peer while there are at most 10); anti-entropy with one peer every gossip interval;
    pruning and tombstone collection every pruning interval.
*/
#include "replicator_internal.h"

#include <czmq.h>
#include <xxhash.h>
#include <zlib.h>

/* Room left in a message for the chunk's own fields. */
#define CHUNK_OVERHEAD 256

/* ---------------------------------------------------------------------------------------------
 * Sending: compression above a threshold, chunks above the frame limit
 */
/* Wall-clock ms: pushes carry it so a receiver can drop stale ones (gossip TTL). */
static int64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t max_message(shoal_replicator_t *r)
{
    size_t m = shoal_system_max_message_bytes(r->sys);
    return m > 2 * CHUNK_OVERHEAD ? m : 2 * CHUNK_OVERHEAD;
}

static int send_bytes(shoal_replicator_t *r, const shoal_node_t *to, uint16_t kind,
                      const uint8_t *data, size_t len)
{
    bool compressed = false;
    uint8_t *z = NULL;
    if (len > r->s.compress_above_bytes && r->s.compress_above_bytes) {
        uLongf zlen = compressBound(len);
        z = shoal_malloc(zlen);
        if (compress2(z, &zlen, data, len, 1) == Z_OK && zlen < len) {
            data = z;
            len = zlen;
            compressed = true;
        }
    }
    size_t limit = max_message(r);
    int rc = 0;
    if (!compressed && len <= limit) {
        rc = shoal_system_send(r->sys, to, kind, data, len);
    } else {
        size_t piece = limit - CHUNK_OVERHEAD;
        uint32_t total = (uint32_t)((len + piece - 1) / piece);
        uint64_t transfer = r->next_transfer++;
        shoal_buf_t out = {0};
        for (uint32_t i = 0; i < total && rc == 0; i++) {
            Shoal__Replicator__Chunk c = SHOAL__REPLICATOR__CHUNK__INIT;
            c.role = r->role;
            c.transfer = transfer;
            c.index = i;
            c.total = total;
            c.kind = kind;
            c.compressed = compressed;
            c.size = len;
            size_t off = (size_t)i * piece;
            c.data.data = (uint8_t *)data + off;
            c.data.len = len - off < piece ? len - off : piece;
            shoal_buf_reset(&out);
            shoal_pb_pack(&c.base, &out);
            rc = shoal_system_send(r->sys, to, K_CHUNK, out.data, out.len);
        }
        r->stats.chunks_sent += total;
        shoal_buf_free(&out);
    }
    free(z);
    return rc;
}

int repl_send(shoal_replicator_t *r, const shoal_node_t *to, uint16_t kind,
              const ProtobufCMessage *msg)
{
    shoal_buf_t b = {0};
    shoal_pb_pack(msg, &b);
    int rc = send_bytes(r, to, kind, b.data ? b.data : (uint8_t *)"", b.len);
    shoal_buf_free(&b);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Consistency
 */
int repl_peers_needed(const shoal_replicator_t *r, const shoal_consistency_t *c)
{
    size_t n = repl_counted_nodes(r);
    size_t need;
    switch (c->level) {
    case SHOAL_LOCAL:
        return 0;
    case SHOAL_FROM_N:
        need = c->n ? c->n : 1;
        break;
    case SHOAL_MAJORITY: {
        size_t m = n / 2 + 1 + c->plus;
        if (m < c->min_cap)
            m = c->min_cap;
        need = m < n ? m : n;
        break;
    }
    case SHOAL_ALL:
        need = n;
        break;
    default:
        return -1;
    }
    if (need > n)
        return -1; /* cannot be met with these nodes: time out at once rather than hang */
    return (int)need - 1;
}

/* The counted peers to ask into o->targets (room made for them), oldest first when
   prefer_oldest, else in a random order; o->answered cleared for them. */
static void choose_targets(shoal_replicator_t *r, op_t *o, bool prefer_oldest)
{
    size_t cap = r->n_peers ? r->n_peers : 1;
    if (o->targets_cap < cap) {
        free(o->targets);
        free(o->answered);
        o->targets = shoal_malloc(cap * sizeof *o->targets);
        o->answered = shoal_malloc(cap * sizeof *o->answered);
        o->targets_cap = cap;
    }
    const shoal_node_t **t = o->targets;
    uint64_t small[32], *ages = cap <= 32 ? small : shoal_malloc(cap * sizeof *ages);
    size_t k = 0;
    for (size_t i = 0; i < r->n_peers; i++)
        if (r->peers[i].counted) {
            t[k] = r->peers[i].node;
            ages[k] = prefer_oldest ? r->peers[i].age : repl_random(r);
            k++;
        }
    /* insertion sort by age (or random key): peer sets are small */
    for (size_t i = 1; i < k; i++)
        for (size_t j = i; j > 0 && ages[j - 1] > ages[j]; j--) {
            uint64_t a = ages[j];
            ages[j] = ages[j - 1];
            ages[j - 1] = a;
            const shoal_node_t *x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    if (ages != small)
        free(ages);
    memset(o->answered, 0, cap * sizeof *o->answered);
    o->n_targets = k;
}

static op_t *op_find(shoal_replicator_t *r, uint64_t req)
{
    /* by request id: with hundreds of writes in flight every ack finds its op in O(1) */
    return shoal_hmap_get(&r->ops_by_req, &req, sizeof req);
}

/* THE POOL OF OPS. Every read and write is an op_t with its key, its targets, its answers and
   the encodings it sends: a handful of allocations and frees per WriteMajority, on the node
   thread that bounds the quorum paths. A finished op goes back to a pool with those buffers and
   the next op reuses them. The pool keeps at most OP_POOL_MAX ops (a window of writes in flight)
   and no encoding larger than OP_KEEP_BYTES, so what it holds stays small. Under
   AddressSanitizer a pooled op is poisoned: a use after it finished is still reported. */
#define OP_POOL_MAX   1024
#define OP_KEEP_BYTES 4096

#if defined(__SANITIZE_ADDRESS__)
#define OP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OP_ASAN 1
#endif
#endif
#ifdef OP_ASAN
#include <sanitizer/asan_interface.h>
#define OP_POISON(o)   ASAN_POISON_MEMORY_REGION((o), sizeof(op_t))
#define OP_UNPOISON(o) ASAN_UNPOISON_MEMORY_REGION((o), sizeof(op_t))
#else
#define OP_POISON(o)   ((void)(o))
#define OP_UNPOISON(o) ((void)(o))
#endif

static void op_free_all(op_t *o)
{
    free(o->targets);
    free(o->answered);
    free(o->reply_digest);
    shoal_buf_free(&o->full);
    shoal_buf_free(&o->delta);
    free(o->key);
    free(o);
}

/* A cleared op: from the pool with its buffers, or new. */
static op_t *op_alloc(shoal_replicator_t *r)
{
    op_t *o = r->op_pool;
    if (!o)
        return shoal_calloc(1, sizeof *o);
    OP_UNPOISON(o);
    r->op_pool = o->next_free;
    r->n_op_pool--;
    op_t keep = *o;
    memset(o, 0, sizeof *o);
    o->targets = keep.targets;
    o->answered = keep.answered;
    o->targets_cap = keep.targets_cap;
    o->key = keep.key;
    o->key_cap = keep.key_cap;
    o->full = keep.full;
    o->delta = keep.delta;
    shoal_buf_reset(&o->full);
    shoal_buf_reset(&o->delta);
    return o;
}

void repl_op_pool_free(shoal_replicator_t *r)
{
    while (r->op_pool) {
        op_t *o = r->op_pool;
        OP_UNPOISON(o);
        r->op_pool = o->next_free;
        op_free_all(o);
    }
    r->n_op_pool = 0;
}

static void op_unlink_free(shoal_replicator_t *r, op_t *o)
{
    shoal_hmap_remove(&r->ops_by_req, &o->req, sizeof o->req);
    if (o->timer > 0)
        shoal_system_timer_cancel(r->sys, o->timer);
    r->n_ops--;
    if (r->n_op_pool >= OP_POOL_MAX) {
        op_free_all(o);
        return;
    }
    free(o->reply_digest); /* reads only, sized by their targets */
    o->reply_digest = NULL;
    if (o->full.cap > OP_KEEP_BYTES)
        shoal_buf_free(&o->full);
    if (o->delta.cap > OP_KEEP_BYTES)
        shoal_buf_free(&o->delta);
    if (!o->key)
        o->key_cap = 0; /* handed over to the completion */
    o->next_free = r->op_pool;
    r->op_pool = o;
    r->n_op_pool++;
    OP_POISON(o);
}

static int target_index(const op_t *o, const shoal_node_t *from)
{
    for (size_t i = 0; i < o->n_sent; i++)
        if (o->targets[i] == from)
            return (int)i;
    return -1;
}

/* Latency histograms (r->lat): every completion counts, timeouts and failures included (they
   are the tail an operator looks for), from the start of the read or write round (after the
   local update and, for a durable key, the local store) to the completion. */
static shoal_hist_t *lat_of(shoal_replicator_t *r, bool read, shoal_level_t level)
{
    unsigned l = (unsigned)level <= SHOAL_ALL ? (unsigned)level : SHOAL_ALL;
    return read ? &r->lat->read[l] : &r->lat->write[l];
}

/* ---------------------------------------------------------------------------------------------
 * Reads
 */
static void read_complete(shoal_replicator_t *r, op_t *o, int status)
{
    entry_t *e = repl_entry(r, o->key, strlen(o->key));
    if (status == 0 && e && !e->deleted && e->value && o->reply_digest && !r->unsynced) {
        /* read repair: replicas that answered with less get the merged value */
        uint8_t mine[16];
        repl_value_digest(e->value, mine);
        Shoal__Replicator__Write w = SHOAL__REPLICATOR__WRITE__INIT;
        Shoal__Replicator__DataEnvelope env;
        shoal_buf_t scratch = {0};
        bool packed = false;
        for (size_t i = 0; i < o->n_sent; i++) {
            if (!o->answered[i] || memcmp(o->reply_digest[i], mine, 16) == 0)
                continue;
            if (!packed) {
                repl_envelope_to_pb(r, e, &env, &scratch);
                w.role = r->role;
                w.key = o->key;
                w.envelope = &env;
                packed = true;
            }
            repl_send(r, o->targets[i], K_WRITE, &w.base);
        }
        if (packed)
            repl_envelope_pb_free(&env);
        shoal_buf_free(&scratch);
    }
    if (status == SHOAL_ETIMEOUT)
        r->stats.read_timeouts++;
    if (e)
        repl_entry_touch(r, e);
    if (status == 0) {
        if (!e)
            status = SHOAL_ENOTFOUND;
        else if (e->deleted)
            status = SHOAL_EDELETED;
        else if (o->type && e->type != o->type)
            status = SHOAL_ETYPE;
        else if (!e->value)
            status = SHOAL_ENOTFOUND;
    }
    shoal_hist_record_since(lat_of(r, true, o->level), o->started_us);
    shoal_get_done_fn *done = o->get_done;
    void *arg = o->arg;
    char *key = o->key;
    o->key = NULL;
    op_unlink_free(r, o);
    done(r, status, key, status == 0 ? e->value : NULL, arg);
    free(key);
}

static void op_tick(shoal_system_t *sys, void *arg);

static op_t *op_new(shoal_replicator_t *r, op_kind_t kind, const char *key, int needed,
                    const shoal_consistency_t *c)
{
    op_t *o = op_alloc(r);
    o->r = r;
    o->req = r->next_req++;
    o->kind = kind;
    size_t klen = strlen(key);
    if (o->key_cap < klen + 1) {
        free(o->key);
        o->key = shoal_malloc(klen + 1);
        o->key_cap = klen + 1;
    }
    memcpy(o->key, key, klen + 1);
    o->needed = needed;
    o->started_us = shoal_hist_now_us();
    o->level = c->level;
    choose_targets(r, o, c->prefer_oldest || r->s.prefer_oldest);
    bool ins;
    shoal_hmap_upsert(&r->ops_by_req, &o->req, sizeof o->req, &ins)->value = o;
    r->n_ops++;
    /* One repeating timer per op (completing it cancels the timer, so a tick always finds its
       op): every fifth of the timeout it asks the unanswered peers again — a request or its
       answer can be lost (a connection not yet handshaken one way, a frame dropped), and reads
       and writes are idempotent at the receiver; with prefer-oldest the first resend also
       reaches the peers beyond the oldest — and the fifth tick is the deadline. Timeouts under
       100 ms get no resend, just the deadline. */
    uint32_t timeout = c->timeout_ms ? c->timeout_ms : 1;
    uint32_t step = timeout / 5 >= 20 ? timeout / 5 : timeout;
    o->ticks_left = timeout / step;
    o->timer = shoal_system_timer(r->sys, step, true, op_tick, o);
    return o;
}

/* With prefer-oldest, the oldest `needed` peers are asked first and the rest only if they do not
   all answer (after a fifth of the timeout, as a second chance); otherwise everyone at once. */
static size_t first_wave(const op_t *o, const shoal_consistency_t *c, bool prefer_oldest)
{
    (void)c;
    if (!prefer_oldest || o->voters_needed > 0) /* voters among them: everyone at once */
        return o->n_targets;
    return (size_t)o->needed < o->n_targets ? (size_t)o->needed : o->n_targets;
}

/* An answer from `from` toward the op; true when the op has all it needs. */
static bool op_answered(shoal_replicator_t *r, op_t *o, const shoal_node_t *from)
{
    --o->needed;
    if (o->voters_needed > 0) {
        const peer_t *p = repl_peer(r, from);
        if (p && p->voter)
            --o->voters_needed;
    }
    return o->needed <= 0 && o->voters_needed <= 0;
}

int repl_start_read(shoal_replicator_t *r, const char *key, const shoal_type_t *type,
                    const shoal_consistency_t *c, shoal_get_done_fn *done, void *arg)
{
    int needed = repl_peers_needed(r, c);
    int vneed = repl_voters_needed(r, c);
    int extra = 0;
    repl_catch_up_check(r);
    if (r->catching_up && c->level == SHOAL_MAJORITY && needed >= 0) {
        /* this replica may lack what a majority acknowledged before it counted: enough of the
           others to meet every such majority answer (one more than usual when N is odd) */
        size_t meet = repl_catch_up_need(r);
        if (meet > (size_t)needed) {
            extra = (int)meet - needed;
            needed = (int)meet;
        }
    }
    if (vneed > 0 && needed == 0)
        needed = vneed; /* a majority of the voters, however few nodes the cluster has now */
    entry_t *e = repl_entry(r, key, strlen(key));
    if (needed <= 0) {
        int status = 0;
        if (needed < 0)
            status = SHOAL_ETIMEOUT;
        else if (!e)
            status = SHOAL_ENOTFOUND;
        else if (e->deleted)
            status = SHOAL_EDELETED;
        else if (type && e->type != type)
            status = SHOAL_ETYPE;
        else if (!e->value)
            status = SHOAL_ENOTFOUND;
        if (e)
            repl_entry_touch(r, e);
        if (status == SHOAL_ETIMEOUT)
            r->stats.read_timeouts++;
        shoal_hist_record(lat_of(r, true, c->level), 0); /* answered here, at once */
        done(r, status, key, status == 0 ? e->value : NULL, arg);
        return 0;
    }
    op_t *o = op_new(r, OP_READ, key, needed, c);
    o->voters_needed = vneed;
    o->catch_up_extra = extra;
    o->type = type;
    o->get_done = done;
    o->arg = arg;
    o->reply_digest = shoal_calloc(o->n_targets ? o->n_targets : 1, 16);
    Shoal__Replicator__Read msg = SHOAL__REPLICATOR__READ__INIT;
    msg.role = r->role;
    msg.req = o->req;
    msg.key = (char *)key;
    size_t wave = first_wave(o, c, c->prefer_oldest || r->s.prefer_oldest);
    for (; o->n_sent < wave; o->n_sent++)
        repl_send(r, o->targets[o->n_sent], K_READ, &msg.base);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Writes
 */
static void write_complete(shoal_replicator_t *r, op_t *o, int status)
{
    if (status == SHOAL_ETIMEOUT)
        r->stats.write_timeouts++;
    if (status == 0 && o->local_status < 0)
        status = o->local_status;
    shoal_hist_record_since(lat_of(r, false, o->level), o->started_us);
    shoal_update_done_fn *done = o->update_done;
    void *arg = o->arg;
    char *key = o->key;
    o->key = NULL;
    op_unlink_free(r, o);
    done(r, status, key, arg);
    free(key);
}

/* Packs the full-state Write of the op's key as it is now (a later state includes the write,
   values only grow), once, for the peers that need it. */
static bool pack_full(shoal_replicator_t *r, op_t *o)
{
    if (o->full.len)
        return true;
    entry_t *e = repl_entry(r, o->key, strlen(o->key));
    if (!e || (!e->value && !e->deleted))
        return false;
    Shoal__Replicator__Write w = SHOAL__REPLICATOR__WRITE__INIT;
    w.role = r->role;
    w.req = o->req;
    w.key = e->key;
    Shoal__Replicator__DataEnvelope env;
    shoal_buf_t scratch = {0};
    repl_envelope_to_pb(r, e, &env, &scratch);
    w.envelope = &env;
    shoal_pb_pack(&w.base, &o->full);
    repl_envelope_pb_free(&env);
    shoal_buf_free(&scratch);
    return true;
}

static void send_write(shoal_replicator_t *r, op_t *o, const shoal_node_t *to, bool full)
{
    /* the delta when there is one; the full state when there is none or the peer asked for it */
    if (!full && o->delta.len)
        send_bytes(r, to, K_WRITE, o->delta.data, o->delta.len);
    else if (!r->unsynced && pack_full(r, o)) /* the full state carries loaded values */
        send_bytes(r, to, K_WRITE, o->full.data, o->full.len);
}

void repl_start_write(shoal_replicator_t *r, entry_t *e, const shoal_crdt_t *delta,
                      uint64_t delta_seq, const shoal_consistency_t *c, bool is_delete,
                      int local_status, shoal_update_done_fn *done, void *arg)
{
    int needed = repl_peers_needed(r, c);
    int vneed = repl_voters_needed(r, c);
    if (vneed > 0 && needed == 0)
        needed = vneed; /* a majority of the voters, however few nodes the cluster has now */
    /* answered here, at once */
    if (needed <= 0)
        shoal_hist_record(lat_of(r, false, c->level), 0);
    if (needed == 0) {
        done(r, local_status, e->key, arg);
        return;
    }
    if (needed < 0) {
        r->stats.write_timeouts++;
        done(r, local_status < 0 ? local_status : SHOAL_ETIMEOUT, e->key, arg);
        return;
    }
    op_t *o = op_new(r, OP_WRITE, e->key, needed, c);
    o->voters_needed = vneed;
    o->update_done = done;
    o->arg = arg;
    o->is_delete = is_delete;
    o->local_status = local_status;
    /* Prepare the message once: every target gets the same bytes. A delta goes when there is
       one (its size depends on the change, not on the value); the full state is packed only
       for peers that cannot apply the delta, or when there is no delta. */
    if (delta && delta_seq) {
        Shoal__Replicator__Write w = SHOAL__REPLICATOR__WRITE__INIT;
        w.role = r->role;
        w.req = o->req;
        w.key = e->key;
        Shoal__Replicator__DeltaEntry d = SHOAL__REPLICATOR__DELTA_ENTRY__INIT;
        shoal_buf_t scratch = {0};
        shoal_crdt_encode(delta, &scratch);
        d.key = e->key;
        d.delta.data = scratch.data;
        d.delta.len = scratch.len;
        d.from_seq = d.to_seq = delta_seq;
        w.delta = &d;
        shoal_pb_pack(&w.base, &o->delta);
        o->delta_seq = delta_seq;
        shoal_buf_free(&scratch);
    } else {
        pack_full(r, o);
    }
    size_t wave = first_wave(o, c, c->prefer_oldest || r->s.prefer_oldest);
    for (; o->n_sent < wave; o->n_sent++)
        send_write(r, o, o->targets[o->n_sent], false);
}

/* The deadline, or else: ask again the peers that have not answered, and (prefer-oldest) the
   ones not asked yet. */
static void op_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    op_t *o = arg;
    shoal_replicator_t *r = o->r;
    if (--o->ticks_left == 0) {
        if (o->kind == OP_READ)
            read_complete(r, o, SHOAL_ETIMEOUT);
        else
            write_complete(r, o, SHOAL_ETIMEOUT);
        return;
    }
    Shoal__Replicator__Read msg = SHOAL__REPLICATOR__READ__INIT;
    msg.role = r->role;
    msg.req = o->req;
    msg.key = o->key;
    o->n_sent = o->n_targets;
    for (size_t i = 0; i < o->n_targets; i++) {
        if (o->answered[i])
            continue;
        if (o->kind == OP_READ)
            repl_send(r, o->targets[i], K_READ, &msg.base);
        else
            send_write(r, o, o->targets[i], false);
    }
}

void repl_catch_up_relieve_reads(shoal_replicator_t *r)
{
    /* by request id: completing one may release others' slots (and reuse the op) */
    size_t n = 0;
    uint64_t *reqs = shoal_malloc((r->ops_by_req.n ? r->ops_by_req.n : 1) * sizeof *reqs);
    for (size_t i = 0; i < r->ops_by_req.cap; i++)
        if (SHOAL_HSLOT_LIVE(&r->ops_by_req.slots[i])) {
            op_t *o = r->ops_by_req.slots[i].value;
            if (o->kind == OP_READ && o->catch_up_extra > 0)
                reqs[n++] = o->req;
        }
    for (size_t i = 0; i < n; i++) {
        op_t *o = op_find(r, reqs[i]);
        if (!o || o->kind != OP_READ || o->catch_up_extra <= 0)
            continue;
        o->needed -= o->catch_up_extra;
        o->catch_up_extra = 0;
        if (o->needed <= 0 && o->voters_needed <= 0)
            read_complete(r, o, 0);
    }
    free(reqs);
}

void repl_ops_fail_all(shoal_replicator_t *r, int status)
{
    while (r->ops_by_req.n) {
        op_t *o = NULL;
        for (size_t i = 0; i < r->ops_by_req.cap && !o; i++)
            if (SHOAL_HSLOT_LIVE(&r->ops_by_req.slots[i]))
                o = r->ops_by_req.slots[i].value;
        if (o->kind == OP_READ)
            read_complete(r, o, status);
        else
            write_complete(r, o, status);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Reassembly of chunked messages
 */
void repl_reassembly_free(shoal_replicator_t *r)
{
    for (size_t i = 0; i < r->n_reasm; i++)
        shoal_buf_free(&r->reasm[i].data);
    free(r->reasm);
    r->reasm = NULL;
    r->n_reasm = r->cap_reasm = 0;
}

static void reasm_remove(shoal_replicator_t *r, size_t i)
{
    shoal_buf_free(&r->reasm[i].data);
    r->reasm[i] = r->reasm[--r->n_reasm];
}

static void reasm_expire(shoal_replicator_t *r)
{
    int64_t now = shoal_now_ms();
    for (size_t i = 0; i < r->n_reasm;)
        if (now - r->reasm[i].started_ms > 60000) {
            shoal_warning("%s: replicator '%s': dropped an incomplete chunked message from %s",
                         shoal_node_id(r->self), r->role, shoal_node_id(r->reasm[i].from));
            r->stats.dropped_malformed++;
            reasm_remove(r, i);
        } else {
            i++;
        }
}

/* ---------------------------------------------------------------------------------------------
 * Receiving
 */

static void on_chunk(shoal_replicator_t *r, const shoal_node_t *from,
                     const Shoal__Replicator__Chunk *c)
{
    if (c->total == 0 || c->index >= c->total || c->size > r->s.max_reassembly_bytes ||
        c->kind < K_READ || c->kind >= K_CHUNK) {
        r->stats.dropped_malformed++;
        return;
    }
    r->stats.chunks_received++;
    reassembly_t *ra = NULL;
    for (size_t i = 0; i < r->n_reasm; i++)
        if (r->reasm[i].from == from && r->reasm[i].transfer == c->transfer)
            ra = &r->reasm[i];
    if (!ra) {
        if (c->index != 0) {
            r->stats.dropped_malformed++; /* its start was lost */
            return;
        }
        SHOAL_GROW(r->reasm, r->cap_reasm, r->n_reasm + 1);
        ra = &r->reasm[r->n_reasm++];
        memset(ra, 0, sizeof *ra);
        ra->transfer = c->transfer;
        ra->from = from;
        ra->total = c->total;
        ra->kind = c->kind;
        ra->compressed = c->compressed;
        ra->size = c->size;
        ra->started_ms = shoal_now_ms();
    }
    size_t idx = (size_t)(ra - r->reasm);
    if (c->index != ra->got || c->total != ra->total || ra->data.len + c->data.len > ra->size) {
        r->stats.dropped_malformed++;
        reasm_remove(r, idx);
        return;
    }
    shoal_buf_append(&ra->data, c->data.data, c->data.len);
    ra->got++;
    if (ra->got < ra->total)
        return;
    reassembly_t done = *ra;
    r->reasm[idx] = r->reasm[--r->n_reasm];
    if (done.data.len != done.size) {
        r->stats.dropped_malformed++;
    } else if (done.compressed) {
        /* inflate with a bound: a hostile peer cannot make us allocate more than the limit */
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        shoal_buf_t out = {0};
        if (inflateInit(&zs) == Z_OK) {
            zs.next_in = done.data.data;
            zs.avail_in = (uInt)done.data.len;
            int zrc = Z_OK;
            while (zrc == Z_OK) {
                if (out.len >= r->s.max_reassembly_bytes) {
                    zrc = Z_MEM_ERROR;
                    break;
                }
                shoal_buf_reserve(&out, 64 * 1024);
                zs.next_out = out.data + out.len;
                zs.avail_out = (uInt)(out.cap - out.len - 1);
                zrc = inflate(&zs, Z_NO_FLUSH);
                out.len = (size_t)(zs.next_out - out.data);
            }
            inflateEnd(&zs);
            if (zrc == Z_STREAM_END)
                repl_dispatch(r, from, (uint16_t)done.kind, out.data, out.len);
            else
                r->stats.dropped_malformed++;
        }
        shoal_buf_free(&out);
    } else {
        repl_dispatch(r, from, (uint16_t)done.kind, done.data.data, done.data.len);
    }
    shoal_buf_free(&done.data);
}

static void answer_read(shoal_replicator_t *r, const shoal_node_t *from, uint64_t req,
                        const char *key)
{
    Shoal__Replicator__ReadResult res = SHOAL__REPLICATOR__READ_RESULT__INIT;
    res.role = r->role;
    res.req = req;
    entry_t *e = repl_entry(r, key, strlen(key));
    Shoal__Replicator__DataEnvelope env;
    shoal_buf_t scratch = {0};
    if (e && (e->value || e->deleted)) {
        repl_envelope_to_pb(r, e, &env, &scratch);
        res.found = true;
        res.envelope = &env;
    }
    repl_send(r, from, K_READ_RESULT, &res.base);
    if (res.found)
        repl_envelope_pb_free(&env);
    shoal_buf_free(&scratch);
}

/* Reads that arrived while this replica was catching up, answered once it has (a reader whose
   deadline passed meanwhile drops the late answer). Bounded: past the bound a read is dropped,
   counted, and the reader counts on its other peers or its deadline. */
#define DEFERRED_READS_MAX 4096

void repl_answer_deferred_reads(shoal_replicator_t *r, bool answer)
{
    for (size_t i = 0; i < r->n_deferred; i++) {
        if (answer && !r->catching_up && !r->unsynced)
            answer_read(r, r->deferred[i].from, r->deferred[i].req, r->deferred[i].key);
        free(r->deferred[i].key);
    }
    free(r->deferred);
    r->deferred = NULL;
    r->n_deferred = 0;
}

static void on_read(shoal_replicator_t *r, const shoal_node_t *from,
                    const Shoal__Replicator__Read *m)
{
    if (!m->key) {
        r->stats.dropped_malformed++;
        return;
    }
    /* an answer would share loaded values that may predate expired pruning markers: the reader
       counts on the other replicas (or its deadline) until this node has synced */
    if (r->unsynced)
        return;
    /* or miss writes a majority acknowledged before this replica counted: answered once it has
       caught up (a round trip or two) */
    repl_catch_up_check(r);
    if (r->catching_up) {
        if (r->n_deferred >= DEFERRED_READS_MAX) {
            r->stats.reads_deferred_dropped++;
            shoal_debug("%s: replicator '%s': catching up: read of '%s' from %s dropped (%d held)",
                        shoal_node_id(r->self), r->role, m->key, shoal_node_id(from),
                        DEFERRED_READS_MAX);
            return;
        }
        r->stats.reads_deferred++;
        shoal_debug("%s: replicator '%s': catching up: read of '%s' from %s held until caught up",
                    shoal_node_id(r->self), r->role, m->key, shoal_node_id(from));
        r->deferred = shoal_realloc(r->deferred, (r->n_deferred + 1) * sizeof *r->deferred);
        r->deferred[r->n_deferred].from = from;
        r->deferred[r->n_deferred].req = m->req;
        r->deferred[r->n_deferred].key = strdup(m->key);
        if (!r->deferred[r->n_deferred].key)
            abort();
        r->n_deferred++;
        return;
    }
    answer_read(r, from, m->req, m->key);
}

static void on_read_result(shoal_replicator_t *r, const shoal_node_t *from,
                           const Shoal__Replicator__ReadResult *m)
{
    op_t *o = op_find(r, m->req);
    if (!o || o->kind != OP_READ)
        return; /* late: the read completed already */
    int i = target_index(o, from);
    if (i < 0 || o->answered[i])
        return;
    o->answered[i] = true;
    memset(o->reply_digest[i], 0, 16);
    if (m->found && m->envelope) {
        /* what the peer had, to repair it if the merged value is more */
        shoal_crdt_t *v = NULL;
        if (m->envelope->deleted)
            repl_value_digest(NULL, o->reply_digest[i]);
        else if (shoal_crdt_decode(m->envelope->value.data, m->envelope->value.len, &v) == 0)
            repl_value_digest(v, o->reply_digest[i]);
        shoal_crdt_destroy(&v);
        /* merging the answer into the local replica is the local read repair */
        repl_merge_envelope(r, o->key, strlen(o->key), m->envelope, from);
    }
    if (op_answered(r, o, from))
        read_complete(r, o, 0);
}

typedef struct {
    shoal_replicator_t *r;
    shoal_system_t *sys;
    const shoal_node_t *to;
    uint64_t req;
    char *role;
} ack_ctx_t;

static void send_ack(shoal_replicator_t *r, const shoal_node_t *to, uint64_t req, int status,
                     bool need_full)
{
    Shoal__Replicator__WriteAck a = SHOAL__REPLICATOR__WRITE_ACK__INIT;
    a.role = r->role;
    a.req = req;
    a.status = status;
    a.need_full = need_full;
    repl_send(r, to, K_WRITE_ACK, &a.base);
}

static void ack_after_store(void *arg, int status)
{
    ack_ctx_t *a = arg;
    /* the replicator may be gone by the time a slow store answers */
    shoal_replicator_t *r = repl_find(a->sys, a->role);
    if (r == a->r) {
        if (a->req)
            send_ack(r, a->to, a->req, status < 0 ? SHOAL_ESTORE : 0, false);
    }
    free(a->role);
    free(a);
}

static int send_full_state_at(shoal_replicator_t *r, const shoal_node_t *to, entry_t *e,
                              uint64_t sent_unix_ms, bool pull_reply);

/* A push that waited too long (in queues, behind a busy loop) is stale news: dropped, the next
   round brings a fresher one (Akka's gossip-time-to-live). Its lateness is its age beyond the
   smallest age seen from that sender, not its age by this node's clock: wall clocks of a cluster
   differ (the chaos suite skews them by up to a minute), and a sender behind by more than the TTL
   had every push dropped, so that membership's push rounds never reached this node (chaos seed
   77123: a join never reached the leader, no convergence for minutes). */
static bool push_is_stale(shoal_replicator_t *r, const shoal_node_t *from, uint64_t sent_unix_ms)
{
    peer_t *p = repl_peer(r, from);
    if (!p)
        return false;
    int64_t lag = unix_ms() - (int64_t)sent_unix_ms;
    if (!p->push_lag_known || lag < p->push_lag_min) {
        p->push_lag_min = lag;
        p->push_lag_known = true;
    }
    if (lag - p->push_lag_min <= (int64_t)r->s.gossip_ttl_ms) {
        p->push_stale_run = 0;
        return false;
    }
    if (++p->push_stale_run >= 3) { /* a clock stepped (either one): measure from here */
        p->push_lag_min = lag;
        p->push_stale_run = 0;
        return false;
    }
    return true;
}

/* The clock offset estimate (shoal_node_clock_skew_seconds). A push's lag, this node's wall
   clock at receipt minus the sender's at sending, is the sender's offset (how far its clock is
   behind this one's) plus the push's one-way delay; the delay is never negative, so the smallest
   lag of a window is the offset plus the window's quickest delivery (well under a millisecond on
   a LAN, where a push waits in no queue). Windows sit on a grid of skew_window_ms; a window
   rolls when a sample or a reading finds it over. */
static void skew_roll(const shoal_replicator_t *r, peer_t *p, int64_t now)
{
    int64_t w = r->skew_window_ms > 0 ? r->skew_window_ms : REPL_SKEW_WINDOW_MS;
    int64_t age = now - p->skew_window_start_ms;
    if (age < w)
        return;
    /* the current window is over: it is the last completed one, unless a whole window with no
       push followed it (then the last completed one had none) */
    p->skew_last_ms = p->skew_cur_ms;
    p->skew_last_known = p->skew_cur_known && age < 2 * w;
    p->skew_cur_known = false;
    p->skew_window_start_ms = now - age % w;
}

void repl_skew_sample(shoal_replicator_t *r, const shoal_node_t *from, uint64_t sent_unix_ms)
{
    peer_t *p = repl_peer(r, from);
    if (!p || !sent_unix_ms)
        return;
    int64_t lag = unix_ms() - (int64_t)sent_unix_ms;
    skew_roll(r, p, shoal_now_ms());
    if (!p->skew_cur_known || lag < p->skew_cur_ms) {
        p->skew_cur_ms = lag;
        p->skew_cur_known = true;
    }
}

bool repl_peer_clock_offset(shoal_replicator_t *r, peer_t *p, int64_t now_ms, int64_t *offset_ms)
{
    skew_roll(r, p, now_ms);
    if (!p->skew_cur_known && !p->skew_last_known)
        return false;
    if (!p->skew_last_known)
        *offset_ms = p->skew_cur_ms;
    else if (!p->skew_cur_known)
        *offset_ms = p->skew_last_ms;
    else
        *offset_ms = p->skew_cur_ms < p->skew_last_ms ? p->skew_cur_ms : p->skew_last_ms;
    return true;
}

bool repl_clock_skew_ms(shoal_replicator_t *const *reps, size_t n, int64_t *skew_ms)
{
    int64_t now = shoal_now_ms(), worst = 0;
    bool heard = false;
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < reps[j]->n_peers; i++) {
            int64_t off;
            if (!repl_peer_clock_offset(reps[j], &reps[j]->peers[i], now, &off))
                continue;
            if (off < 0)
                off = -off;
            if (!heard || off > worst)
                worst = off;
            heard = true;
        }
    *skew_ms = worst;
    return heard;
}

static void on_write(shoal_replicator_t *r, const shoal_node_t *from,
                     const Shoal__Replicator__Write *m)
{
    if (!m->key || (!m->envelope && !m->delta)) {
        r->stats.dropped_malformed++;
        return;
    }
    /* measured on every stamped message, TTL or not, stale or not (a late one only raises the
       lag, which the minimum ignores) */
    if (m->sent_unix_ms)
        repl_skew_sample(r, from, m->sent_unix_ms);
    if (m->sent_unix_ms && r->s.gossip_ttl_ms && !m->req &&
        push_is_stale(r, from, m->sent_unix_ms)) {
        r->stats.dropped_stale++;
        return;
    }
    int rc;
    if (m->delta) {
        if (!m->delta->key || strcmp(m->delta->key, m->key) != 0) {
            r->stats.dropped_malformed++;
            return;
        }
        r->admitting = m->req != 0;
        rc = repl_apply_delta(r, from, m->delta);
        r->admitting = false;
        if (rc == SHOAL_EAGAIN) {
            if (m->req)
                send_ack(r, from, m->req, 0, true);
            return;
        }
    } else {
        r->stats.full_state_received++;
        r->admitting = m->req != 0;
        rc = repl_merge_envelope(r, m->key, strlen(m->key), m->envelope, from);
        r->admitting = false;
    }
    if (rc < 0) {
        if (m->req)
            send_ack(r, from, m->req, rc, false);
        return;
    }
    entry_t *e = repl_entry(r, m->key, strlen(m->key));
    if (e && e->deleted && !(m->envelope && m->envelope->deleted)) {
        if (m->req)
            send_ack(r, from, m->req, SHOAL_EDELETED, false);
        return;
    }
    /* push-pull: a pushed state that lacked something this replica has goes back to its sender
       at once (equal states end the exchange), so news spreads both ways in one round trip. An
       answer is not answered: whatever still differs is the next round's (the upper layer's
       gossip, or anti-entropy), not a volley of whole states between two replicas that keep
       changing */
    if (m->sent_unix_ms && !m->pull_reply && m->envelope && e && e->value && !r->unsynced) {
        uint8_t mine[16];
        repl_value_digest(e->value, mine);
        XXH128_canonical_t theirs;
        XXH128_canonicalFromHash(&theirs,
                                 XXH3_128bits(m->envelope->value.data, m->envelope->value.len));
        if (memcmp(mine, theirs.digest, 16) != 0)
            send_full_state_at(r, from, e, (uint64_t)unix_ms(), true);
    }
    ack_ctx_t *a = shoal_malloc(sizeof *a);
    a->r = r;
    a->sys = r->sys;
    a->to = from;
    a->req = m->req;
    a->role = strdup(r->role);
    if (!a->role)
        abort();
    if (e)
        repl_store_entry(r, e, ack_after_store, a);
    else
        ack_after_store(a, 0);
}

static void on_write_ack(shoal_replicator_t *r, const shoal_node_t *from,
                         const Shoal__Replicator__WriteAck *m)
{
    op_t *o = op_find(r, m->req);
    if (!o || o->kind != OP_WRITE)
        return;
    int i = target_index(o, from);
    if (i < 0 || o->answered[i])
        return;
    if (m->need_full) {
        send_write(r, o, from, true);
        return;
    }
    if (m->status != 0) {
        /* the peer could not take it (store failure, type conflict, deleted there): it does not
           count; it is not retried either, the deadline decides */
        o->answered[i] = true;
        if ((m->status == SHOAL_EDELETED || m->status == SHOAL_ESTALE) && o->needed > 0) {
            /* deleted there, or the writer lost its right to write: no replica will take it */
            write_complete(r, o, (int)m->status);
        }
        return;
    }
    o->answered[i] = true;
    if (o->is_delete) {
        entry_t *e = repl_entry(r, o->key, strlen(o->key));
        if (e && e->deleted)
            repl_tomb_seen_add(e, from);
    }
    if (op_answered(r, o, from))
        write_complete(r, o, 0);
}

/* ---------------------------------------------------------------------------------------------
 * Delta propagation
 */
static uint64_t sent_seq(const entry_t *e, const shoal_node_t *peer)
{
    for (size_t i = 0; i < e->n_sent; i++)
        if (e->sent[i].node == peer)
            return e->sent[i].seq;
    return e->base_seq;
}

static void set_sent_seq(entry_t *e, const shoal_node_t *peer, uint64_t seq)
{
    for (size_t i = 0; i < e->n_sent; i++)
        if (e->sent[i].node == peer) {
            e->sent[i].seq = seq;
            return;
        }
    SHOAL_GROW(e->sent, e->cap_sent, e->n_sent + 1);
    e->sent[e->n_sent].node = peer;
    e->sent[e->n_sent].seq = seq;
    e->n_sent++;
}

/* The deltas from `from` to the last, merged into one group, or NULL if some are no longer kept
   (the peer then gets the full state). */
static shoal_crdt_t *delta_group(const entry_t *e, uint64_t from)
{
    if (e->n_deltas == 0 || e->deltas[0].seq > from)
        return NULL;
    shoal_crdt_t *g = NULL;
    for (size_t i = 0; i < e->n_deltas; i++) {
        if (e->deltas[i].seq < from)
            continue;
        if (!g)
            g = shoal_crdt_clone(e->deltas[i].delta);
        else if (shoal_crdt_merge(g, e->deltas[i].delta) < 0) {
            shoal_crdt_destroy(&g);
            return NULL;
        }
    }
    return g;
}

static void flush_deltas(shoal_replicator_t *r, const shoal_node_t *to,
                         Shoal__Replicator__DeltaPropagation *msg, shoal_buf_t *bufs)
{
    if (!msg->n_entries)
        return;
    repl_send(r, to, K_DELTA, &msg->base);
    for (size_t i = 0; i < msg->n_entries; i++)
        shoal_buf_free(&bufs[i]);
    r->stats.deltas_sent += msg->n_entries;
    msg->n_entries = 0;
}

void repl_delta_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_t *r = arg;
    if (r->loading || !r->delta_keys.n || !r->n_peers)
        return;
    /* the slice of peers this round: all of them up to 10, else a rotating fifth */
    size_t slice = r->n_peers <= 10 ? r->n_peers : (r->n_peers + 4) / 5;
    shoal_hslot_t **keys = shoal_hmap_sorted(&r->delta_keys);
    size_t nkeys = r->delta_keys.n;
    size_t per_msg = r->s.max_delta_elements;
    Shoal__Replicator__DeltaEntry *entries = shoal_calloc(per_msg, sizeof *entries);
    Shoal__Replicator__DeltaEntry **ptrs = shoal_calloc(per_msg, sizeof *ptrs);
    shoal_buf_t *bufs = shoal_calloc(per_msg, sizeof *bufs);
    for (size_t s = 0; s < slice; s++) {
        const shoal_node_t *to = r->peers[(r->delta_cursor + s) % r->n_peers].node;
        Shoal__Replicator__DeltaPropagation msg = SHOAL__REPLICATOR__DELTA_PROPAGATION__INIT;
        msg.role = r->role;
        msg.entries = ptrs;
        for (size_t k = 0; k < nkeys; k++) {
            entry_t *e = keys[k]->value;
            uint64_t have = sent_seq(e, to);
            if (have >= e->delta_seq || e->deleted || !e->value)
                continue;
            shoal_crdt_t *g = delta_group(e, have + 1);
            if (!g && r->unsynced)
                continue; /* the full state carries loaded values: after the sync */
            size_t j = msg.n_entries;
            shoal__replicator__delta_entry__init(&entries[j]);
            entries[j].key = e->key;
            entries[j].from_seq = have + 1;
            entries[j].to_seq = e->delta_seq;
            if (g) {
                shoal_crdt_encode(g, &bufs[j]);
                shoal_crdt_destroy(&g);
            } else {
                shoal_crdt_encode(e->value, &bufs[j]); /* full state */
                r->stats.full_state_sent++;
            }
            entries[j].delta.data = bufs[j].data;
            entries[j].delta.len = bufs[j].len;
            ptrs[j] = &entries[j];
            msg.n_entries++;
            set_sent_seq(e, to, e->delta_seq);
            if (msg.n_entries == per_msg)
                flush_deltas(r, to, &msg, bufs);
        }
        flush_deltas(r, to, &msg, bufs);
    }
    r->delta_cursor = (r->delta_cursor + slice) % (r->n_peers ? r->n_peers : 1);
    /* keys every current peer has been sent up to their last delta leave the set */
    for (size_t k = 0; k < nkeys; k++) {
        entry_t *e = keys[k]->value;
        bool all = true;
        for (size_t p = 0; p < r->n_peers && all; p++)
            all = sent_seq(e, r->peers[p].node) >= e->delta_seq;
        if (all || e->deleted) {
            e->base_seq = e->delta_seq;
            e->n_sent = 0;
            for (size_t i = 0; i < e->n_deltas; i++)
                shoal_crdt_destroy(&e->deltas[i].delta);
            e->n_deltas = 0;
            e->in_delta_set = false;
            shoal_hmap_remove(&r->delta_keys, e->key, e->klen);
        }
    }
    free(keys);
    free(entries);
    free(ptrs);
    free(bufs);
}

/* A key's full state as a Write without acknowledgement; sent_unix_ms marks a push (0: not),
   pull_reply a push that answers one. */
static int send_full_state_at(shoal_replicator_t *r, const shoal_node_t *to, entry_t *e,
                              uint64_t sent_unix_ms, bool pull_reply)
{
    Shoal__Replicator__Write w = SHOAL__REPLICATOR__WRITE__INIT;
    Shoal__Replicator__DataEnvelope env;
    shoal_buf_t scratch = {0};
    repl_envelope_to_pb(r, e, &env, &scratch);
    w.role = r->role;
    w.key = e->key;
    w.envelope = &env;
    w.sent_unix_ms = sent_unix_ms;
    w.pull_reply = pull_reply;
    int rc = repl_send(r, to, K_WRITE, &w.base);
    r->stats.full_state_sent++;
    peer_t *p = sent_unix_ms && rc >= 0 ? repl_peer(r, to) : NULL;
    if (p)
        p->skew_probe_ms = shoal_now_ms(); /* a stamp it can measure: no probe due (skew_probe) */
    repl_envelope_pb_free(&env);
    shoal_buf_free(&scratch);
    return rc;
}

static void send_full_state(shoal_replicator_t *r, const shoal_node_t *to, entry_t *e)
{
    send_full_state_at(r, to, e, 0, false);
}

int shoal_replicator_push(shoal_replicator_t *r, const char *key, const shoal_node_t *to)
{
    if (!r || !key || !to)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_system_call");
    entry_t *e = repl_entry(r, key, strlen(key));
    if (!e || (!e->value && !e->deleted))
        return SHOAL_ENOTFOUND;
    if (r->unsynced)
        return SHOAL_EAGAIN;
    int rc = send_full_state_at(r, to, e, (uint64_t)unix_ms(), false);
    return rc < 0 ? rc : 0;
}

static void on_delta(shoal_replicator_t *r, const shoal_node_t *from,
                     const Shoal__Replicator__DeltaPropagation *m)
{
    const char **nack = NULL;
    size_t n_nack = 0;
    for (size_t i = 0; i < m->n_entries; i++) {
        const Shoal__Replicator__DeltaEntry *d = m->entries[i];
        int rc = repl_apply_delta(r, from, d);
        if (rc == SHOAL_EAGAIN) {
            nack = shoal_realloc(nack, (n_nack + 1) * sizeof *nack);
            nack[n_nack++] = d->key;
        } else if (rc == 0 && d->key) {
            entry_t *e = repl_entry(r, d->key, strlen(d->key));
            if (e && e->durable)
                repl_store_entry(r, e, NULL, NULL);
        }
    }
    if (n_nack) {
        Shoal__Replicator__DeltaNack n = SHOAL__REPLICATOR__DELTA_NACK__INIT;
        n.role = r->role;
        n.keys = (char **)nack;
        n.n_keys = n_nack;
        repl_send(r, from, K_DELTA_NACK, &n.base);
    }
    free(nack);
}

static void on_delta_nack(shoal_replicator_t *r, const shoal_node_t *from,
                          const Shoal__Replicator__DeltaNack *m)
{
    if (r->unsynced)
        return; /* the peer asks again on its next gap, or gets it by gossip once synced */
    for (size_t i = 0; i < m->n_keys; i++) {
        entry_t *e = m->keys[i] ? repl_entry(r, m->keys[i], strlen(m->keys[i])) : NULL;
        if (e && (e->value || e->deleted))
            send_full_state(r, from, e);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Anti-entropy: status -> buckets -> key digests -> gossip
 */
/* This replica's status: the root digest over its keys (root: 16 bytes the message points to). */
static void status_init(shoal_replicator_t *r, Shoal__Replicator__Status *st, uint8_t root[16])
{
    repl_root_digest(r, root);
    shoal__replicator__status__init(st);
    st->role = r->role;
    st->root.data = root;
    st->root.len = 16;
    st->n_keys = r->entries.n;
    st->bucket_count = N_BUCKETS;
}

/* Pushes are the only messages that carry a wall clock, and a quiet cluster sends none
   (membership pushes its state when it changes, and sends digest-only statuses otherwise): the
   clock offset estimate of a steady cluster would lapse a minute after its last change. So the
   gossip round's peer also gets one push when this node has sent it no stamped message for half
   a window (skew_window_ms / 2): every peer a node picks hears from it within each window. The
   key pushed is a small one (the smallest non-durable value of at most SKEW_PROBE_MAX_BYTES,
   among the first SKEW_PROBE_SCAN keys, so the cost stays bounded in a large replica); with none,
   no probe. Equal state merges as a no-op and is not answered (push-pull answers a difference
   only), so a probe costs one small message per peer per 15 s in a quiet cluster and nothing
   in a busy one, whose own pushes are the stamps. */
#define SKEW_PROBE_MAX_BYTES 4096
#define SKEW_PROBE_SCAN      64

static void skew_probe(shoal_replicator_t *r, const shoal_node_t *to)
{
    peer_t *p = repl_peer(r, to);
    int64_t w = r->skew_window_ms > 0 ? r->skew_window_ms : REPL_SKEW_WINDOW_MS;
    if (!p || r->unsynced || shoal_now_ms() - p->skew_probe_ms < w / 2)
        return;
    entry_t *best = NULL;
    for (size_t i = 0, seen = 0; i < r->entries.cap && seen < SKEW_PROBE_SCAN; i++) {
        if (!SHOAL_HSLOT_LIVE(&r->entries.slots[i]))
            continue;
        seen++;
        entry_t *e = r->entries.slots[i].value;
        if (!e->value || e->deleted || e->durable || !e->bytes ||
            e->bytes > SKEW_PROBE_MAX_BYTES)
            continue;
        if (!best || e->bytes < best->bytes)
            best = e;
    }
    if (best)
        send_full_state_at(r, to, best, (uint64_t)unix_ms(), false);
}

void repl_gossip_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_t *r = arg;
    reasm_expire(r);
    if (r->loading || !r->n_peers)
        return;
    size_t idx;
    const shoal_node_t **cands = shoal_malloc(r->n_peers * sizeof *cands);
    for (size_t i = 0; i < r->n_peers; i++)
        cands[i] = r->peers[i].node;
    if (r->s.gossip_choose)
        idx = r->s.gossip_choose(r, cands, r->n_peers, r->s.gossip_choose_arg);
    else
        idx = (size_t)(repl_random(r) % r->n_peers);
    const shoal_node_t *to = idx < r->n_peers ? cands[idx] : NULL;
    free(cands);
    repl_catch_up_check(r);
    if (r->catching_up) {
        repl_catch_up_round(r);
        return;
    }
    if (!to)
        return;
    uint8_t root[16];
    Shoal__Replicator__Status st;
    status_init(r, &st, root);
    repl_send(r, to, K_STATUS, &st.base);
    r->stats.gossip_rounds++;
    r->stats.status_sent++;
    skew_probe(r, to);
}

/* A status to every counted peer not synced with yet, at once: catching up takes one round, not
   one per peer; an equal root is answered, so that it counts too. */
void repl_catch_up_round(shoal_replicator_t *r)
{
    if (!r->catching_up || r->loading)
        return;
    uint8_t root[16];
    Shoal__Replicator__Status st;
    status_init(r, &st, root);
    st.reply_when_equal = true;
    r->stats.gossip_rounds++;
    for (size_t i = 0; i < r->n_peers; i++) {
        const peer_t *p = &r->peers[i];
        bool done = false;
        for (size_t k = 0; k < r->n_caught_from && !done; k++)
            done = r->caught_from[k] == p->node;
        if (p->counted && !done) {
            repl_send(r, p->node, K_STATUS, &st.base);
            r->stats.status_sent++;
        }
    }
}

static void on_status(shoal_replicator_t *r, const shoal_node_t *from,
                      const Shoal__Replicator__Status *m)
{
    if (m->root.len != 16 || m->bucket_count != N_BUCKETS) {
        r->stats.dropped_malformed++;
        return;
    }
    uint8_t root[16];
    repl_root_digest(r, root);
    r->stats.digests_compared++;
    if (memcmp(root, m->root.data, 16) == 0) {
        /* converged: one small message was the whole round. The sender holds everything we
           hold, our tombstones included. */
        repl_synced(r, from);
        if (m->reply_when_equal) { /* it is catching up: an empty Gossip says "in sync" */
            Shoal__Replicator__Gossip g = SHOAL__REPLICATOR__GOSSIP__INIT;
            g.role = r->role;
            repl_send(r, from, K_GOSSIP, &g.base);
        }
        if (r->stats.tombstones)
            for (size_t i = 0; i < r->entries.cap; i++) {
                shoal_hslot_t *s = &r->entries.slots[i];
                if (SHOAL_HSLOT_LIVE(s) && ((entry_t *)s->value)->deleted)
                    repl_tomb_seen_add(s->value, from);
            }
        return;
    }
    Shoal__Replicator__Buckets b = SHOAL__REPLICATOR__BUCKETS__INIT;
    b.role = r->role;
    b.bucket_count = N_BUCKETS;
    b.digests.data = (uint8_t *)r->buckets;
    b.digests.len = sizeof r->buckets;
    repl_send(r, from, K_BUCKETS, &b.base);
}

/* Sends the keys and digests of the given buckets. */
static void send_key_digests(shoal_replicator_t *r, const shoal_node_t *to, const uint32_t *bk,
                             size_t nb)
{
    bool want[N_BUCKETS] = {false};
    for (size_t i = 0; i < nb; i++)
        want[bk[i]] = true;
    Shoal__Replicator__KeyDigests kd = SHOAL__REPLICATOR__KEY_DIGESTS__INIT;
    kd.role = r->role;
    kd.bucket_count = N_BUCKETS;
    kd.buckets = (uint32_t *)bk;
    kd.n_buckets = nb;
    size_t cap = 0;
    char **keys = NULL;
    shoal_buf_t dig = {0};
    for (size_t i = 0; i < r->entries.cap; i++) {
        shoal_hslot_t *s = &r->entries.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        entry_t *e = s->value;
        if (!want[e->bucket])
            continue;
        repl_refresh_digest(r, e);
        SHOAL_GROW(keys, cap, kd.n_keys + 1);
        keys[kd.n_keys++] = e->key;
        shoal_buf_append(&dig, e->digest, 16);
    }
    kd.keys = keys;
    kd.digests.data = dig.data;
    kd.digests.len = dig.len;
    repl_send(r, to, K_KEY_DIGESTS, &kd.base);
    free(keys);
    shoal_buf_free(&dig);
}

static void on_buckets(shoal_replicator_t *r, const shoal_node_t *from,
                       const Shoal__Replicator__Buckets *m)
{
    if (m->bucket_count != N_BUCKETS || m->digests.len != sizeof r->buckets) {
        r->stats.dropped_malformed++;
        return;
    }
    repl_refresh_all_digests(r);
    uint32_t diff[N_BUCKETS];
    size_t nd = 0;
    for (uint32_t b = 0; b < N_BUCKETS; b++)
        if (memcmp(r->buckets[b], m->digests.data + 16 * b, 16) != 0)
            diff[nd++] = b;
    if (nd)
        send_key_digests(r, from, diff, nd);
}

/* Sends full state of `keys` (and asks for `want`), max_delta_elements per message. */
static void send_gossip(shoal_replicator_t *r, const shoal_node_t *to, entry_t **keys, size_t n,
                        char **want, size_t n_want)
{
    size_t per = r->s.max_delta_elements;
    size_t sent = 0;
    do {
        size_t k = n - sent < per ? n - sent : per;
        Shoal__Replicator__Gossip g = SHOAL__REPLICATOR__GOSSIP__INIT;
        g.role = r->role;
        g.n_keys = g.n_envelopes = k;
        g.keys = shoal_malloc((k ? k : 1) * sizeof *g.keys);
        g.envelopes = shoal_malloc((k ? k : 1) * sizeof *g.envelopes);
        Shoal__Replicator__DataEnvelope *envs = shoal_malloc((k ? k : 1) * sizeof *envs);
        shoal_buf_t *scratch = shoal_calloc(k ? k : 1, sizeof *scratch);
        for (size_t i = 0; i < k; i++) {
            entry_t *e = keys[sent + i];
            g.keys[i] = e->key;
            repl_envelope_to_pb(r, e, &envs[i], &scratch[i]);
            g.envelopes[i] = &envs[i];
        }
        if (sent + k >= n) { /* the wants ride with the last message */
            g.want = want;
            g.n_want = n_want;
        }
        if (k || g.n_want)
            repl_send(r, to, K_GOSSIP, &g.base);
        r->stats.full_state_sent += k;
        for (size_t i = 0; i < k; i++) {
            repl_envelope_pb_free(&envs[i]);
            shoal_buf_free(&scratch[i]);
        }
        free(scratch);
        free(envs);
        free(g.keys);
        free(g.envelopes);
        sent += k;
    } while (sent < n);
}

static bool is_tombstone_digest(const entry_t *e)
{
    return e->deleted && !e->dirty;
}

static void on_key_digests(shoal_replicator_t *r, const shoal_node_t *from,
                           const Shoal__Replicator__KeyDigests *m)
{
    if (m->bucket_count != N_BUCKETS || m->digests.len != 16 * m->n_keys ||
        m->n_buckets > N_BUCKETS) {
        r->stats.dropped_malformed++;
        return;
    }
    bool covered[N_BUCKETS] = {false};
    for (size_t i = 0; i < m->n_buckets; i++) {
        if (m->buckets[i] >= N_BUCKETS) {
            r->stats.dropped_malformed++;
            return;
        }
        covered[m->buckets[i]] = true;
    }
    /* theirs, by key: the value is the key's index in the message, plus one */
    shoal_hmap_t theirs = {0};
    for (size_t i = 0; i < m->n_keys; i++) {
        if (!m->keys[i])
            continue;
        bool ins;
        shoal_hmap_upsert(&theirs, m->keys[i], strlen(m->keys[i]), &ins)->value =
            (void *)(uintptr_t)(i + 1);
    }
    entry_t **send = NULL;
    size_t n_send = 0, cap_send = 0;
    char **want = NULL;
    size_t n_want = 0, cap_want = 0;
    for (size_t i = 0; i < r->entries.cap; i++) {
        shoal_hslot_t *s = &r->entries.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        entry_t *e = s->value;
        if (!covered[e->bucket])
            continue;
        repl_refresh_digest(r, e);
        uintptr_t idx = (uintptr_t)shoal_hmap_get(&theirs, e->key, e->klen);
        const uint8_t *d = idx ? m->digests.data + 16 * (idx - 1) : NULL;
        if (d && memcmp(d, e->digest, 16) == 0) {
            if (is_tombstone_digest(e))
                repl_tomb_seen_add(e, from);
            shoal_hmap_remove(&theirs, e->key, e->klen);
            continue;
        }
        SHOAL_GROW(send, cap_send, n_send + 1);
        send[n_send++] = e;
        if (d) {
            /* both differ: each needs the other's */
            SHOAL_GROW(want, cap_want, n_want + 1);
            want[n_want++] = e->key;
            shoal_hmap_remove(&theirs, e->key, e->klen);
        }
    }
    /* what they have and we lack */
    for (size_t i = 0; i < theirs.cap; i++) {
        shoal_hslot_t *s = &theirs.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        SHOAL_GROW(want, cap_want, n_want + 1);
        want[n_want++] = m->keys[(uintptr_t)s->value - 1];
    }
    r->stats.digests_compared += m->n_keys;
    if (r->unsynced) {
        /* the peer has nothing we lack: we are as synced as its gossip could make us. Else
           only ask: the peer's answer syncs us (on_gossip), and ours goes after it. */
        if (n_want == 0)
            repl_synced(r, from);
        else
            n_send = 0;
    }
    if (n_send || n_want)
        send_gossip(r, from, send, n_send, want, n_want);
    free(send);
    free(want);
    shoal_hmap_free(&theirs);
}

static void on_gossip(shoal_replicator_t *r, const shoal_node_t *from,
                      const Shoal__Replicator__Gossip *m)
{
    if (m->n_keys != m->n_envelopes) {
        r->stats.dropped_malformed++;
        return;
    }
    for (size_t i = 0; i < m->n_keys; i++) {
        if (!m->keys[i] || !*m->keys[i])
            continue;
        r->stats.full_state_received++;
        size_t klen = strlen(m->keys[i]);
        if (repl_merge_envelope(r, m->keys[i], klen, m->envelopes[i], from) == 0) {
            entry_t *e = repl_entry(r, m->keys[i], klen);
            if (e && e->durable)
                repl_store_entry(r, e, NULL, NULL);
        }
    }
    /* the peer's side of the exchange has arrived (perhaps empty: it had nothing we lack) */
    repl_synced(r, from);
    if (m->n_want) {
        entry_t **send = shoal_malloc(m->n_want * sizeof *send);
        size_t n = 0;
        for (size_t i = 0; i < m->n_want; i++) {
            entry_t *e = m->want[i] ? repl_entry(r, m->want[i], strlen(m->want[i])) : NULL;
            if (e)
                send[n++] = e;
        }
        if (n)
            send_gossip(r, from, send, n, NULL, 0);
        free(send);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Pruning and tombstone collection
 */
static bool is_designated(shoal_replicator_t *r)
{
    for (size_t i = 0; i < r->n_peers; i++)
        if (r->peers[i].counted && shoal_node_cmp(r->peers[i].node, r->self) < 0)
            return false;
    return true;
}

static bool seen_by_all_peers(shoal_replicator_t *r, const shoal_node_t *const *seen, size_t n)
{
    for (size_t p = 0; p < r->n_peers; p++) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = seen[i] == r->peers[p].node;
        if (!found)
            return false;
    }
    return true;
}

void repl_prune_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_replicator_t *r = arg;
    if (r->loading)
        return;
    bool designated = is_designated(r);
    int64_t now = shoal_now_ms(), wall = repl_wall_ms();
    entry_t **collect = NULL;
    size_t n_collect = 0, cap_collect = 0;
    for (size_t i = 0; i < r->entries.cap; i++) {
        shoal_hslot_t *s = &r->entries.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        entry_t *e = s->value;
        if (e->deleted) {
            if (now - e->deleted_at_ms >= (int64_t)r->s.tombstone_ttl_ms &&
                seen_by_all_peers(r, e->tomb_seen, e->n_tomb_seen)) {
                SHOAL_GROW(collect, cap_collect, n_collect + 1);
                collect[n_collect++] = e;
            }
            continue;
        }
        bool changed = false;
        /* start a round for every removed node the value still holds */
        if (designated && e->value)
            for (size_t k = 0; k < r->n_removed; k++) {
                const shoal_node_t *gone = r->removed[k].node;
                bool marked = false;
                for (size_t j = 0; j < e->n_pruning; j++)
                    marked |= e->pruning[j].removed == gone;
                if (!marked && shoal_crdt_needs_pruning_from(e->value, gone)) {
                    pruning_t *p = repl_pruning_add(e, gone);
                    p->owner = r->self;
                    p->seen = shoal_malloc(sizeof *p->seen);
                    p->seen[0] = r->self;
                    p->n_seen = 1;
                    changed = true;
                }
            }
        for (size_t j = 0; j < e->n_pruning;) {
            pruning_t *p = &e->pruning[j];
            if (!p->performed && p->owner == r->self &&
                seen_by_all_peers(r, p->seen, p->n_seen)) {
                shoal_prune_plan_t plan;
                if (e->value && shoal_crdt_prune(e->value, p->removed, r->self, &plan) == 0) {
                    p->performed = true;
                    p->plan_base = plan.base;
                    p->plan_span = plan.span;
                    /* a durable key's marker must outlive a node that is down with its store
                       for a while (Akka's durable pruning-marker-time-to-live) */
                    p->obsolete_at_ms = wall + (int64_t)(e->durable ? r->durable_marker_ttl_ms
                                                                    : r->s.pruning_marker_ttl_ms);
                    free(p->seen);
                    p->seen = NULL;
                    p->n_seen = 0;
                    r->stats.pruning_performed++;
                    changed = true;
                }
            } else if (p->performed && p->obsolete_at_ms < wall) {
                free(p->seen);
                memmove(p, p + 1, (e->n_pruning - j - 1) * sizeof *p);
                e->n_pruning--;
                changed = true;
                continue;
            }
            j++;
        }
        if (changed) {
            repl_entry_changed(r, e);
            if (e->durable)
                repl_store_entry(r, e, NULL, NULL);
        }
    }
    for (size_t i = 0; i < n_collect; i++) {
        entry_t *e = collect[i];
        bool ins;
        shoal_hmap_upsert(&r->collected, e->key, e->klen, &ins)->value =
            (void *)(intptr_t)(now + (int64_t)r->s.tombstone_ttl_ms);
        if (r->stats.tombstones)
            r->stats.tombstones--;
        r->stats.tombstones_collected++;
        repl_entry_drop(r, e);
    }
    free(collect);
    /* removed nodes are forgotten once no key holds them any more and the markers are gone */
}

/* ---------------------------------------------------------------------------------------------
 * Registration and dispatch
 */
#define UNPACK(T, t, data, len) shoal__replicator__##t##__unpack(NULL, len, data)

void repl_dispatch(shoal_replicator_t *r, const shoal_node_t *from, uint16_t kind,
                   const uint8_t *data, size_t len)
{
    /* while loading, nothing is answered: the peer's deadline or next round covers it */
    if (r->loading)
        return;
    switch (kind) {
    case K_READ: {
        Shoal__Replicator__Read *m = UNPACK(Read, read, data, len);
        if (m)
            on_read(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__read__free_unpacked(m, NULL);
        break;
    }
    case K_READ_RESULT: {
        Shoal__Replicator__ReadResult *m = UNPACK(ReadResult, read_result, data, len);
        if (m)
            on_read_result(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__read_result__free_unpacked(m, NULL);
        break;
    }
    case K_WRITE: {
        Shoal__Replicator__Write *m = UNPACK(Write, write, data, len);
        if (m)
            on_write(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__write__free_unpacked(m, NULL);
        break;
    }
    case K_WRITE_ACK: {
        Shoal__Replicator__WriteAck *m = UNPACK(WriteAck, write_ack, data, len);
        if (m)
            on_write_ack(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__write_ack__free_unpacked(m, NULL);
        break;
    }
    case K_DELTA: {
        Shoal__Replicator__DeltaPropagation *m = UNPACK(DeltaPropagation, delta_propagation,
                                                        data, len);
        if (m)
            on_delta(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__delta_propagation__free_unpacked(m, NULL);
        break;
    }
    case K_DELTA_NACK: {
        Shoal__Replicator__DeltaNack *m = UNPACK(DeltaNack, delta_nack, data, len);
        if (m)
            on_delta_nack(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__delta_nack__free_unpacked(m, NULL);
        break;
    }
    case K_STATUS: {
        Shoal__Replicator__Status *m = UNPACK(Status, status, data, len);
        if (m)
            on_status(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__status__free_unpacked(m, NULL);
        break;
    }
    case K_BUCKETS: {
        Shoal__Replicator__Buckets *m = UNPACK(Buckets, buckets, data, len);
        if (m)
            on_buckets(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__buckets__free_unpacked(m, NULL);
        break;
    }
    case K_KEY_DIGESTS: {
        Shoal__Replicator__KeyDigests *m = UNPACK(KeyDigests, key_digests, data, len);
        if (m)
            on_key_digests(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__key_digests__free_unpacked(m, NULL);
        break;
    }
    case K_GOSSIP: {
        Shoal__Replicator__Gossip *m = UNPACK(Gossip, gossip, data, len);
        if (m)
            on_gossip(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__gossip__free_unpacked(m, NULL);
        break;
    }
    case K_CHUNK: {
        Shoal__Replicator__Chunk *m = UNPACK(Chunk, chunk, data, len);
        if (m)
            on_chunk(r, from, m);
        else
            r->stats.dropped_malformed++;
        shoal__replicator__chunk__free_unpacked(m, NULL);
        break;
    }
    default:
        r->stats.dropped_malformed++;
    }
}

/* The role is field 1 of every replicator message: read it without decoding the rest. */
static bool peek_role(const uint8_t *data, size_t len, const char **role, size_t *rlen)
{
    if (len < 2 || data[0] != 0x0a) { /* field 1, length-delimited */
        *role = "";
        *rlen = 0;
        return true; /* proto3 omits an empty role */
    }
    size_t n = 0;
    int shift = 0;
    size_t i = 1;
    while (i < len && shift < 35) {
        n |= (size_t)(data[i] & 0x7f) << shift;
        if (!(data[i++] & 0x80))
            break;
        shift += 7;
    }
    if (i + n > len || n > 256)
        return false;
    *role = (const char *)data + i;
    *rlen = n;
    return true;
}

static void on_message(shoal_system_t *sys, const shoal_node_t *from, uint16_t kind,
                       const uint8_t *data, size_t len, void *arg)
{
    (void)arg;
    const char *role;
    size_t rlen;
    if (!peek_role(data, len, &role, &rlen))
        return;
    char rbuf[257];
    memcpy(rbuf, role, rlen);
    rbuf[rlen] = 0;
    shoal_replicator_t *r = repl_find(sys, rbuf);
    if (!r)
        return; /* no replicator of that role here (yet): gossip will come again */
    /* messages from nodes that are not peers (removed, or not yet added) are ignored, except
       reads and writes, which a client of the role may send */
    repl_dispatch(r, from, kind, data, len);
}

void repl_net_register(shoal_system_t *sys)
{
    for (uint16_t k = K_READ; k <= K_LAST; k++)
        shoal_system_register(sys, k, on_message, NULL);
}
