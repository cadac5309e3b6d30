/*  fuzz_decode.c — libFuzzer target for the value decoders.

    Built once per decoder with -DFUZZ_TARGET=<name>: "envelope" feeds the bytes to
    shoal_crdt_decode as they are; any other name wraps them as the payload of an envelope of that
    type, so the fuzzer works on the type's own decoder directly. A value that decodes must encode,
    decode again to the same bytes, render, and merge with itself.
*/
#include "ddata.h"
#include "ddata.pb-c.h"
#include "sharding.h"

#include <stdlib.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

static const char *const names[][2] = {
    {"version_vector", "VersionVector"}, {"gcounter", "GCounter"}, {"pncounter", "PNCounter"},
    {"gset", "GSet"}, {"orset", "ORSet"}, {"orset_delta", "ORSetDelta"}, {"ormap", "ORMap"},
    {"ormultimap", "ORMultiMap"}, {"lwwregister", "LWWRegister"}, {"lwwmap", "LWWMap"},
    {"pncountermap", "PNCounterMap"}, {"flag", "Flag"}, {"ormap_delta", "ORMapDelta"},
    {"estate", "EntityStateMap"},
};

static uint32_t target_tag(void)
{
    const char *t = STR(FUZZ_TARGET);
    shoal_sharding_register_types(); /* sharding's EntityStateMap, for it and the envelope */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(t, names[i][0]) == 0)
            return shoal_type_tag(shoal_type_by_name(names[i][1]));
    return 0; /* envelope */
}

static void exercise(const shoal_crdt_t *v)
{
    shoal_buf_t a = {0}, b = {0};
    if (shoal_crdt_encode(v, &a) != 0)
        abort();
    shoal_crdt_t *again = NULL;
    if (shoal_crdt_decode(a.data, a.len, &again) != 0)
        abort(); /* what decodes must re-encode to something decodable */
    if (shoal_crdt_encode(again, &b) != 0 || a.len != b.len || memcmp(a.data, b.data, a.len))
        abort(); /* canonical: one value, one encoding */
    shoal_buf_t r = {0};
    shoal_crdt_render(again, &r);
    shoal_crdt_t *m = shoal_crdt_clone(v);
    if (shoal_crdt_merge(m, again) != 0)
        abort();
    shoal_crdt_destroy(&m);
    shoal_crdt_destroy(&again);
    shoal_buf_free(&a);
    shoal_buf_free(&b);
    shoal_buf_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint32_t tag = (uint32_t)-1;
    if (tag == (uint32_t)-1)
        tag = target_tag();
    shoal_crdt_t *v = NULL;
    if (tag == 0) {
        if (shoal_crdt_decode(data, size, &v) == 0)
            exercise(v);
    } else {
        Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
        env.type = tag;
        env.version = 1;
        env.payload.data = (uint8_t *)data;
        env.payload.len = size;
        size_t n = shoal__ddata__value__get_packed_size(&env);
        uint8_t *buf = malloc(n ? n : 1);
        shoal__ddata__value__pack(&env, buf);
        if (shoal_crdt_decode(buf, n, &v) == 0)
            exercise(v);
        free(buf);
    }
    shoal_crdt_destroy(&v);
    return 0;
}
