/*  gossip_model.c — see gossip_model.h. */
#include "gossip_model.h"

#include "cluster.pb-c.h"
#include "cluster_internal.h"
#include "heartbeat.h"
#include "replicator.pb-c.h"
#include "replicator_internal.h"
#include "transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Largest TCP segment on loopback (MTU 65536 minus the IPv4 and TCP headers). */
#define LOOPBACK_MSS 65483
/* The Chunk message's fields around its data (role, transfer, index, total, kind, size). */
#define CHUNK_FIELDS 40

const shoal_node_t *gossip_model_node(int i)
{
    char id[96];
    snprintf(id, sizeof id, "10.%d.%d.%d:2552:%llu", 1 + i / 65536, (i / 256) % 256, i % 256,
             (unsigned long long)(0x9e3779b97f4a7c15ULL * (unsigned long long)(i + 1)));
    return shoal_node_intern(id);
}

static void member_endpoint(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "tcp://10.%d.%d.%d:2553", 1 + i / 65536, (i / 256) % 256, i % 256);
}

static void member_durable_id(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "%016llx%016llx", (unsigned long long)i * 0x2545F4914F6CDD1DULL,
             (unsigned long long)i * 0x9E3779B97F4A7C15ULL);
}

cstate_t *gossip_model_state(int n)
{
    cstate_register();
    cstate_t *s = cstate_new();
    const shoal_node_t *leader = gossip_model_node(0);
    const char *roles[] = {"backend"};
    for (int i = 0; i < n; i++) {
        char ep[64], did[40];
        member_endpoint(i, ep, sizeof ep);
        member_durable_id(i, did, sizeof did);
        const shoal_node_t *m = gossip_model_node(i);
        if (cstate_add_member(s, m, m, roles, 1, "1.0.0", ep, NULL, 0, did) != 0) {
            fprintf(stderr, "gossip_model: cannot add member %d\n", i);
            exit(1);
        }
    }
    for (int i = 0; i < n; i++) {
        cstate_set_status(s, leader, gossip_model_node(i), SHOAL_MEMBER_UP);
        cstate_set_up_number(s, leader, gossip_model_node(i), (uint64_t)i + 1);
    }
    for (int i = 0; i < n; i++)
        cstate_mark_seen(s, gossip_model_node(i));
    return s;
}

static size_t segments_bytes(size_t payload)
{
    size_t segs = (payload + LOOPBACK_MSS - 1) / LOOPBACK_MSS;
    return payload + (segs ? segs : 1) * GOSSIP_MODEL_SEGMENT_HEADERS;
}

/* ZMTP 3: one flags byte and a 1-byte size below 256 bytes, an 8-byte size above. */
static size_t zmtp_frame(size_t body)
{
    return body + (body < 256 ? 2 : 9);
}

size_t gossip_model_wire_bytes(uint16_t kind, size_t len)
{
    uint8_t *payload = calloc(len ? len : 1, 1);
    if (!payload)
        abort();
    shoal_batch_t b = {0};
    shoal_batch_append(&b, 1, kind, payload, len);
    size_t frame = 0;
    shoal_batch_seal(&b, SHOAL_WIRE_VERSION_MAX, &frame);
    shoal_batch_free(&b);
    free(payload);
    return segments_bytes(zmtp_frame(frame));
}

size_t gossip_model_raw_wire_bytes(size_t len)
{
    return segments_bytes(zmtp_frame(len));
}

gossip_model_idle_t gossip_model_idle(int n, int data_replicators)
{
    gossip_model_idle_t m = {0};
    shoal_cluster_settings_t cs;
    shoal_cluster_settings_default(&cs);
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);

    /* heartbeats, with this cluster's names (bench_membership's members on loopback) */
    const char *node_ep = "tcp://127.0.0.1:21234";
    const char *node_id = "127.0.0.1:21234:12345678901234567890";
    hb_msg_t ping = {.type = HB_PING, .seq = 1000, .a = node_ep, .a_len = strlen(node_ep)};
    hb_msg_t pong = {.type = HB_PONG, .seq = 1000, .a = node_id, .a_len = strlen(node_id)};
    uint8_t buf[600];
    m.ping_bytes = gossip_model_raw_wire_bytes(hb_encode(&ping, buf, sizeof buf));
    m.pong_bytes = gossip_model_raw_wire_bytes(hb_encode(&pong, buf, sizeof buf));
    m.monitored =
        n - 1 < (int)cs.monitored_by_nr_of_members ? n - 1 : (int)cs.monitored_by_nr_of_members;
    double hb_per_s = 1000.0 / (double)cs.heartbeat_interval_ms;
    m.heartbeat_b_per_s = hb_per_s * m.monitored *
                          (double)(m.ping_bytes + m.pong_bytes + GOSSIP_MODEL_SEGMENT_HEADERS);

    /* the replicators' digest status: one to one peer per gossip interval, ACKed alone */
    uint8_t root[16] = {0};
    Shoal__Replicator__Status st = SHOAL__REPLICATOR__STATUS__INIT;
    st.root.data = root;
    st.root.len = sizeof root;
    st.bucket_count = N_BUCKETS;
    st.role = SYSTEM_ROLE;
    st.n_keys = 1;
    size_t sys_status =
        gossip_model_wire_bytes(K_STATUS, shoal__replicator__status__get_packed_size(&st));
    st.role = "";
    st.n_keys = 0;
    size_t data_status =
        gossip_model_wire_bytes(K_STATUS, shoal__replicator__status__get_packed_size(&st));
    m.status_bytes = sys_status;
    m.status_b_per_s = 1000.0 / (double)cs.gossip_interval_ms *
                           (double)(sys_status + GOSSIP_MODEL_SEGMENT_HEADERS) +
                       data_replicators * 1000.0 / (double)rs.gossip_interval_ms *
                           (double)(data_status + GOSSIP_MODEL_SEGMENT_HEADERS);
    m.total_b_per_s = m.heartbeat_b_per_s + m.status_b_per_s;
    return m;
}

void gossip_model_change_bytes(const cstate_t *state, size_t *full, size_t *status)
{
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    /* the whole state as a push: a Write with the envelope, compressed and sent as one chunk
       above compress-above (the replicator's send_bytes) */
    shoal_buf_t value = {0};
    if (shoal_crdt_encode(&state->base, &value) != 0) {
        fprintf(stderr, "gossip_model: cannot encode the state\n");
        exit(1);
    }
    Shoal__Replicator__DataEnvelope env = SHOAL__REPLICATOR__DATA_ENVELOPE__INIT;
    env.value.data = value.data;
    env.value.len = value.len;
    Shoal__Replicator__Write w = SHOAL__REPLICATOR__WRITE__INIT;
    w.role = SYSTEM_ROLE;
    w.key = CLUSTER_KEY;
    w.envelope = &env;
    w.sent_unix_ms = 1767225600000ull;
    size_t wlen = shoal__replicator__write__get_packed_size(&w);
    uint8_t *packed = malloc(wlen);
    if (!packed)
        abort();
    shoal__replicator__write__pack(&w, packed);
    if (rs.compress_above_bytes && wlen > rs.compress_above_bytes) {
        uLongf zlen = compressBound(wlen);
        uint8_t *z = malloc(zlen);
        if (!z)
            abort();
        if (compress2(z, &zlen, packed, wlen, 1) == Z_OK && zlen < wlen)
            *full = gossip_model_wire_bytes(K_CHUNK, zlen + CHUNK_FIELDS);
        else
            *full = gossip_model_wire_bytes(K_WRITE, wlen);
        free(z);
    } else {
        *full = gossip_model_wire_bytes(K_WRITE, wlen);
    }
    free(packed);
    shoal_buf_free(&value);

    uint8_t digest[16];
    cstate_clock_digest(state, digest);
    size_t nb = cstate_seen_bits(state, NULL, 0);
    uint8_t *bits = calloc(nb ? nb : 1, 1);
    if (!bits)
        abort();
    cstate_seen_bits(state, bits, nb);
    Shoal__Cluster__GossipStatus gs = SHOAL__CLUSTER__GOSSIP_STATUS__INIT;
    gs.clock_digest.data = digest;
    gs.clock_digest.len = sizeof digest;
    gs.seen.data = bits;
    gs.seen.len = nb;
    gs.clock_sum = cstate_version_sum(state);
    *status = gossip_model_wire_bytes(K_GOSSIP_STATUS,
                                      shoal__cluster__gossip_status__get_packed_size(&gs));
    free(bits);
}
