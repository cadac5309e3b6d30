/*  fuzz_sharding.c — libFuzzer target for sharding's messages: the hand-coded entity envelope and
    reply (sharding/wire.c) and the control messages (proto/sharding.proto) with the checks
    wire_parse_control makes. The first byte picks the decoder. What decodes must encode back to
    the same bytes (envelopes and replies have one encoding), and nothing may crash.
*/
#include <stdlib.h>
#include <string.h>

#include "sharding_internal.h"

static void envelope_round_trip(const uint8_t *data, size_t size)
{
    envelope_t e;
    if (wire_parse_envelope(data, size, &e) != 0)
        return;
    char shard[SHOAL_SHARD_ID_MAX + 1], eid[SHOAL_ENTITY_ID_MAX + 1], origin[256];
    memcpy(shard, e.shard, e.shard_len);
    shard[e.shard_len] = 0;
    memcpy(eid, e.eid, e.eid_len);
    eid[e.eid_len] = 0;
    const shoal_node_t *o = NULL;
    if (e.origin) {
        memcpy(origin, e.origin, e.origin_len);
        origin[e.origin_len] = 0;
        o = shoal_node_intern_n(e.origin, e.origin_len); /* as region_on_deliver does */
        if (!o || strcmp(shoal_node_id(o), origin) != 0)
            return; /* not a canonical node id: the receiver drops it */
    }
    shoal_buf_t b = {0};
    wire_envelope(&b, e.flags, e.type_hash, shard, eid, e.ask_id, o, e.payload, e.len);
    if (b.len != size || memcmp(b.data, data, size) != 0)
        abort();
    shoal_buf_free(&b);
}

static void reply_round_trip(const uint8_t *data, size_t size)
{
    uint32_t th;
    uint64_t id;
    int32_t status;
    const uint8_t *p;
    size_t plen;
    if (wire_parse_reply(data, size, &th, &id, &status, &p, &plen) != 0)
        return;
    shoal_buf_t b = {0};
    wire_reply(&b, th, id, status, p, plen);
    if (b.len != size || memcmp(b.data, data, size) != 0)
        abort();
    shoal_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 3) {
    case 0:
        envelope_round_trip(data + 1, size - 1);
        break;
    case 1:
        reply_round_trip(data + 1, size - 1);
        break;
    default: {
        Shoal__Sharding__Control *m = wire_parse_control(data + 1, size - 1);
        if (m) {
            size_t n = shoal__sharding__control__get_packed_size(m);
            uint8_t *buf = malloc(n ? n : 1);
            if (!buf || shoal__sharding__control__pack(m, buf) != n)
                abort();
            free(buf);
            wire_control_free(m);
        }
        break;
    }
    }
    return 0;
}
