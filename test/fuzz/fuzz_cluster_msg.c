/*  fuzz_cluster_msg.c — libFuzzer target for membership's own messages (proto/cluster.proto):
    what a joining node, a singleton's old host, an operator's tool or a member's digest-only
    gossip (GossipStatus) sends. The first byte picks
    the message; decoding never crashes and what decodes packs again.
*/
#include "cluster.pb-c.h"

#include <stdlib.h>
#include <string.h>

/* Packing what was unpacked must not crash or overrun. (Re-unpacking is not asserted:
   protobuf-c keeps unknown fields, including a field number 0 that it then refuses to read
   back; nodes never re-send what they received.) */
static void repack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        abort();
    if (protobuf_c_message_pack(m, buf) != n)
        abort();
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const ProtobufCMessageDescriptor *const descs[] = {
        &shoal__cluster__init_join__descriptor,     &shoal__cluster__init_join_ack__descriptor,
        &shoal__cluster__join__descriptor,          &shoal__cluster__hand_over_done__descriptor,
        &shoal__cluster__admin_request__descriptor, &shoal__cluster__admin_reply__descriptor,
        &shoal__cluster__gossip_status__descriptor,
    };
    const ProtobufCMessageDescriptor *d = descs[data[0] % (sizeof descs / sizeof descs[0])];
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
    if (!m)
        return 0;
    repack(m);
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
