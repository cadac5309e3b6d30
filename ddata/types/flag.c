/*  flag.c — Flag: false, then true for ever.

    Merge is logical OR, the join of the two-element lattice false < true. Like Akka's Flag it has
    no delta (the full state is one bit: shipping it is as cheap as any delta) and no per-node
    state to prune.
*/
#include "internal.h"

typedef struct {
    shoal_crdt_t base;
    bool enabled;
} flag_t;

#define FL(x)  ((flag_t *)(x))
#define CFL(x) ((const flag_t *)(x))

static shoal_crdt_t *fl_create(void)
{
    flag_t *f = shoal_calloc(1, sizeof *f);
    f->base.type = &shoal_type_flag;
    return &f->base;
}

shoal_crdt_t *shoal_flag_new(void)
{
    return fl_create();
}

static void fl_destroy(shoal_crdt_t *self)
{
    free(self);
}

static shoal_crdt_t *fl_clone(const shoal_crdt_t *self)
{
    shoal_crdt_t *c = fl_create();
    FL(c)->enabled = CFL(self)->enabled;
    return c;
}

static int fl_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    FL(self)->enabled = FL(self)->enabled || CFL(other)->enabled;
    return 0;
}

static bool fl_equal(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    return CFL(a)->enabled == CFL(b)->enabled;
}

int shoal_flag_switch_on(shoal_crdt_t *f)
{
    if (!shoal_is(f, &shoal_type_flag))
        return SHOAL_ETYPE;
    FL(f)->enabled = true;
    return 0;
}

bool shoal_flag_enabled(const shoal_crdt_t *f)
{
    return shoal_is(f, &shoal_type_flag) && CFL(f)->enabled;
}

static int fl_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    Shoal__Ddata__Flag msg = SHOAL__DDATA__FLAG__INIT;
    msg.enabled = CFL(self)->enabled; /* false is omitted (proto3 default): an empty payload */
    shoal_pb_pack(&msg.base, out);
    return 0;
}

static int fl_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    Shoal__Ddata__Flag *msg = shoal__ddata__flag__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    shoal_crdt_t *f = fl_create();
    FL(f)->enabled = msg->enabled != 0;
    shoal__ddata__flag__free_unpacked(msg, NULL);
    *out = f;
    return 0;
}

static int fl_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    shoal_buf_printf(out, "Flag(%s)", CFL(self)->enabled ? "true" : "false");
    return 0;
}

const shoal_type_t shoal_type_flag = {
    .name = "Flag",
    .tag = SHOAL_FLAG,
    .format_version = 1,
    .delta_type = NULL,
    .has_pruning = false,
    .create = fl_create,
    .destroy = fl_destroy,
    .clone = fl_clone,
    .merge = fl_merge,
    .equal = fl_equal,
    .encode_payload = fl_encode,
    .decode_payload = fl_decode,
    .render = fl_render,
};
