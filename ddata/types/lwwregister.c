/*  lwwregister.c — LWWRegister: a last-writer-wins register of bytes.

    A written register holds (value, timestamp, writer node). Merge keeps the greater of the two
    in one total order of written states:
      1. the greater timestamp;
      2. on equal timestamps, the lower writer node id (Akka's rule);
      3. on equal timestamp and writer with different bytes — which a correct writer never
         produces, but a buggy clock or a replayed write can — the byte-wise greater value
         (shoal_bytes_cmp), so that merge stays a true join (commutative and associative) and
         replicas cannot disagree.
    A register never written is the bottom of that order: timestamp INT64_MIN, no writer, no
    value; merging it with anything gives the other. INT64_MIN is therefore reserved and is not
    accepted as the timestamp of a write.

    A local write is the merge of the register with the written state: it takes effect only if
    it wins. With the default clock it always does (the clock never returns less than current + 1,
    so two writes in one microsecond still move forward); with the reverse clock (counting down)
    only the first write of an empty register does, which is "first write wins"; with the
    caller's clock (an epoch, a sequence number) a write with a lower clock is ignored. Making the
    write a merge keeps every state change an inflation, which the replicator relies on (Akka
    instead replaces the value locally whatever the timestamp, and lets the next merge undo it).

    No delta: the full state is as small as any delta would be (Akka's LWWRegister has none).
    No pruning: the writer id is only a tie-breaker, not per-node state that grows (Akka's
    LWWRegister is not RemovedNodePruning either).
*/
#include "internal.h"

#include <inttypes.h>
#include <time.h>

typedef struct {
    shoal_crdt_t base;
    uint8_t *value; /* NULL when never written */
    size_t len;
    int64_t timestamp;          /* INT64_MIN when never written */
    const shoal_node_t *writer; /* NULL when never written */
} lwwreg_t;

#define LR(x)  ((lwwreg_t *)(x))
#define CLR(x) ((const lwwreg_t *)(x))

static shoal_crdt_t *lr_create(void)
{
    lwwreg_t *r = shoal_calloc(1, sizeof *r);
    r->base.type = &shoal_type_lwwregister;
    r->timestamp = INT64_MIN;
    return &r->base;
}

shoal_crdt_t *shoal_lwwreg_new(void)
{
    return lr_create();
}

static void lr_destroy(shoal_crdt_t *self)
{
    free(LR(self)->value);
    free(self);
}

/* Replaces the state. value may point into the register's own value: copy before freeing. */
static void assign(lwwreg_t *r, const shoal_node_t *writer, int64_t timestamp, const void *value,
                   size_t len)
{
    uint8_t *copy = shoal_memdup(value, len);
    free(r->value);
    r->value = copy;
    r->len = len;
    r->timestamp = timestamp;
    r->writer = writer;
}

static shoal_crdt_t *lr_clone(const shoal_crdt_t *self)
{
    shoal_crdt_t *c = lr_create();
    if (CLR(self)->writer)
        assign(LR(c), CLR(self)->writer, CLR(self)->timestamp, CLR(self)->value, CLR(self)->len);
    return c;
}

/* True when the written state (writer, timestamp, value) beats r's state in the order above. */
static bool beats(const shoal_node_t *writer, int64_t timestamp, const void *value, size_t len,
                  const lwwreg_t *r)
{
    if (!r->writer)
        return true; /* anything written beats the never-written register */
    if (timestamp != r->timestamp)
        return timestamp > r->timestamp;
    if (writer != r->writer)
        return shoal_node_cmp(writer, r->writer) < 0;
    return shoal_bytes_cmp(value, len, r->value, r->len) > 0;
}

static int lr_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    const lwwreg_t *o = CLR(other);
    if (o->writer && beats(o->writer, o->timestamp, o->value, o->len, LR(self)))
        assign(LR(self), o->writer, o->timestamp, o->value, o->len);
    return 0;
}

static bool lr_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    const lwwreg_t *x = CLR(a), *y = CLR(b);
    return x->writer == y->writer && x->timestamp == y->timestamp &&
           shoal_bytes_cmp(x->value, x->len, y->value, y->len) == 0;
}

/* ---------------------------------------------------------------------------------------------
 * Clocks
 */
static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t shoal_lww_clock_default(int64_t current_timestamp, const void *value, size_t len, void *arg)
{
    (void)value;
    (void)len;
    (void)arg;
    if (current_timestamp == INT64_MAX)
        return INT64_MAX; /* cannot move forward any more; ties are then broken as in merge */
    int64_t now = now_us();
    return now > current_timestamp + 1 ? now : current_timestamp + 1;
}

int64_t shoal_lww_clock_reverse(int64_t current_timestamp, const void *value, size_t len, void *arg)
{
    (void)value;
    (void)len;
    (void)arg;
    int64_t neg_now = -now_us();
    /* INT64_MIN is the never-written register: current - 1 would overflow, and there is no
       earlier write to stay below */
    if (current_timestamp == INT64_MIN)
        return neg_now;
    return neg_now < current_timestamp - 1 ? neg_now : current_timestamp - 1;
}

/* ---------------------------------------------------------------------------------------------
 * Writes and reads
 */
static int write_at(shoal_crdt_t *r, const shoal_node_t *self, const void *value, size_t len,
                    int64_t timestamp)
{
    if (timestamp == INT64_MIN)
        return SHOAL_EINVAL; /* reserved for the never-written register */
    if (!value)
        value = "";
    if (beats(self, timestamp, value, len, LR(r)))
        assign(LR(r), self, timestamp, value, len);
    return 0;
}

int shoal_lwwreg_set(shoal_crdt_t *r, const shoal_node_t *self, const void *value, size_t len,
                     shoal_clock_fn *clock, void *clock_arg)
{
    if (!shoal_is(r, &shoal_type_lwwregister))
        return SHOAL_ETYPE;
    if (!self || (!value && len))
        return SHOAL_EINVAL;
    if (!clock)
        clock = shoal_lww_clock_default;
    int64_t ts = clock(LR(r)->timestamp, value, len, clock_arg);
    return write_at(r, self, value, len, ts);
}

int shoal_lwwreg_set_at(shoal_crdt_t *r, const shoal_node_t *self, const void *value, size_t len,
                        int64_t timestamp)
{
    if (!shoal_is(r, &shoal_type_lwwregister))
        return SHOAL_ETYPE;
    if (!self || (!value && len))
        return SHOAL_EINVAL;
    return write_at(r, self, value, len, timestamp);
}

const void *shoal_lwwreg_value(const shoal_crdt_t *r, size_t *len)
{
    if (!shoal_is(r, &shoal_type_lwwregister)) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = CLR(r)->len;
    return CLR(r)->value ? (const void *)CLR(r)->value : "";
}

int64_t shoal_lwwreg_timestamp(const shoal_crdt_t *r)
{
    return shoal_is(r, &shoal_type_lwwregister) ? CLR(r)->timestamp : INT64_MIN;
}

const shoal_node_t *shoal_lwwreg_writer(const shoal_crdt_t *r)
{
    return shoal_is(r, &shoal_type_lwwregister) ? CLR(r)->writer : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Encoding. Canonical form: the never-written register is the empty message; a written one
 * always carries its node, and its timestamp and value unless they are 0 / empty (proto3
 * omits defaults). Decode accepts exactly these forms.
 */
static int lr_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const lwwreg_t *r = CLR(self);
    Shoal__Ddata__LWWRegister msg = SHOAL__DDATA__LWWREGISTER__INIT;
    if (r->writer) {
        msg.node = (char *)shoal_node_id(r->writer);
        msg.timestamp = r->timestamp;
        msg.value.data = r->value;
        msg.value.len = r->len;
    }
    shoal_pb_pack(&msg.base, out);
    return 0;
}

static int lr_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    Shoal__Ddata__LWWRegister *msg = shoal__ddata__lwwregister__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    int rc = 0;
    shoal_crdt_t *r = lr_create();
    if (!msg->node || !msg->node[0]) {
        /* no writer: only the never-written register, which has nothing else */
        if (msg->timestamp != 0 || msg->value.len != 0)
            rc = SHOAL_EDECODE;
    } else {
        const shoal_node_t *writer = shoal_node_intern(msg->node);
        if (!writer)
            rc = SHOAL_ENODE;
        else if (msg->timestamp == INT64_MIN)
            rc = SHOAL_EDECODE; /* reserved for the never-written register */
        else
            assign(LR(r), writer, msg->timestamp, msg->value.len ? msg->value.data : (void *)"",
                   msg->value.len);
    }
    shoal__ddata__lwwregister__free_unpacked(msg, NULL);
    if (rc < 0) {
        lr_destroy(r);
        return rc;
    }
    *out = r;
    return 0;
}

static int lr_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const lwwreg_t *r = CLR(self);
    if (!r->writer) {
        shoal_buf_printf(out, "LWWRegister()");
        return 0;
    }
    shoal_buf_append(out, "LWWRegister(", 12);
    shoal_buf_append_quoted(out, r->value, r->len);
    shoal_buf_printf(out, " @%" PRId64 " by %s)", r->timestamp, shoal_node_id(r->writer));
    return 0;
}

const shoal_type_t shoal_type_lwwregister = {
    .name = "LWWRegister",
    .tag = SHOAL_LWWREGISTER,
    .format_version = 1,
    .delta_type = NULL,
    .has_pruning = false,
    .create = lr_create,
    .destroy = lr_destroy,
    .clone = lr_clone,
    .merge = lr_merge,
    .equal = lr_equal,
    .encode_payload = lr_encode,
    .decode_payload = lr_decode,
    .render = lr_render,
};
