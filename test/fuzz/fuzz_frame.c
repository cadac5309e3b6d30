/*  fuzz_frame.c — libFuzzer target for the node transport's parsers (ddata/node/transport.h): the
    frame header, DATA batches with the receiver's sequence accounting, ACK, REQUEST, REPLY,
    REPLY_PART, and
    the protobuf handshake. These are exactly what a node runs on bytes from the network, with no
    socket in between.

    Whatever parses must re-encode to something that parses to the same fields (a DATA frame is
    rebuilt record by record with the batch writer), so the writers and readers agree.
*/
#include "transport.h"

#include <stdlib.h>
#include <string.h>

static void check_data(const shoal_frame_t *f)
{
    shoal_data_reader_t r;
    if (shoal_data_open(f, &r) != 0)
        return;
    shoal_data_reader_t again = r;
    shoal_batch_t b = {0};
    uint16_t kind;
    const uint8_t *d;
    size_t dl, n = 0;
    while (shoal_data_next(&r, &kind, &d, &dl) == 1) {
        shoal_batch_append(&b, r.first_seq, kind, d, dl);
        n++;
    }
    if (n != again.count || b.count != n)
        abort();
    size_t len;
    const uint8_t *frame = shoal_batch_seal(&b, f->version, &len);
    shoal_frame_t g;
    shoal_data_reader_t r2;
    if (shoal_frame_parse(frame, len, &g) != 0 || shoal_data_open(&g, &r2) != 0 ||
        r2.first_seq != again.first_seq || r2.count != again.count)
        abort();
    uint16_t k1, k2;
    const uint8_t *d1, *d2;
    size_t l1, l2;
    while (shoal_data_next(&again, &k1, &d1, &l1) == 1) {
        if (shoal_data_next(&r2, &k2, &d2, &l2) != 1 || k1 != k2 || l1 != l2 ||
            (l1 && memcmp(d1, d2, l1) != 0))
            abort();
    }
    /* the receiver's accounting against a few expectations */
    const uint64_t expect[] = {1, again.first_seq, again.first_seq + 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        uint64_t e = expect[i];
        shoal_seq_verdict_t v = shoal_seq_accept(&e, again.first_seq, again.count);
        if (v.skip > again.count || (v.skip && v.missed) || e < expect[i])
            abort();
    }
    shoal_batch_free(&b);
}

static void check_hello(const shoal_frame_t *f)
{
    shoal_hello_t h, h2;
    if (shoal_hello_parse(f, &h) != 0)
        return;
    shoal_buf_t b = {0};
    shoal_hello_write(&b, &h);
    shoal_frame_t g;
    if (shoal_frame_parse(b.data, b.len, &g) != 0 || shoal_hello_parse(&g, &h2) != 0 ||
        h.version_min != h2.version_min || h.version_max != h2.version_max ||
        h.client != h2.client || strcmp(h.from, h2.from) != 0 ||
        h.max_reply_bytes != h2.max_reply_bytes || (!h.client && h.max_reply_bytes) ||
        strcmp(h.to_node, h2.to_node) != 0 || h.first_seq != h2.first_seq ||
        strcmp(h.to, h2.to) != 0)
        abort();
    (void)shoal_endpoint_matches("tcp://127.0.0.1:2552", h.to);
    shoal_buf_free(&b);
}

static void check_hello_reply(const shoal_frame_t *f)
{
    shoal_hello_reply_t r, r2;
    if (shoal_hello_reply_parse(f, &r) != 0)
        return;
    shoal_buf_t b = {0};
    shoal_hello_reply_write(&b, &r);
    shoal_frame_t g;
    if (shoal_frame_parse(b.data, b.len, &g) != 0 || shoal_hello_reply_parse(&g, &r2) != 0 ||
        r.status != r2.status || strcmp(r.node, r2.node) != 0 || r.version != r2.version ||
        r.max_frame_bytes != r2.max_frame_bytes)
        abort();
    shoal_buf_free(&b);
}

static void check_small(const shoal_frame_t *f)
{
    shoal_buf_t b = {0};
    shoal_frame_t g;
    uint64_t seq, id, id2;
    uint16_t kind, kind2;
    const uint8_t *d, *d2;
    size_t dl, dl2;
    int status, status2;
    if (shoal_ack_parse(f, &seq) == 0) {
        shoal_ack_write(&b, f->version, seq);
        uint64_t seq2;
        if (shoal_frame_parse(b.data, b.len, &g) != 0 || shoal_ack_parse(&g, &seq2) != 0 ||
            seq != seq2)
            abort();
    }
    if (shoal_request_parse(f, &id, &kind, &d, &dl) == 0) {
        shoal_buf_reset(&b);
        shoal_request_write(&b, f->version, id, kind, d, dl);
        if (shoal_frame_parse(b.data, b.len, &g) != 0 ||
            shoal_request_parse(&g, &id2, &kind2, &d2, &dl2) != 0 || id != id2 || kind != kind2 ||
            dl != dl2 || (dl && memcmp(d, d2, dl) != 0))
            abort();
    }
    if (shoal_reply_parse(f, &id, &kind, &status, &d, &dl) == 0) {
        shoal_buf_reset(&b);
        shoal_reply_write(&b, f->version, id, kind, status, d, dl);
        if (shoal_frame_parse(b.data, b.len, &g) != 0 ||
            shoal_reply_parse(&g, &id2, &kind2, &status2, &d2, &dl2) != 0 || id != id2 ||
            kind != kind2 || status != status2 || dl != dl2 || (dl && memcmp(d, d2, dl) != 0))
            abort();
    }
    uint64_t total, offset, total2, offset2;
    if (shoal_reply_part_parse(f, &id, &kind, &total, &offset, &d, &dl) == 0) {
        if (dl == 0 || offset > total || dl > total - offset)
            abort();
        shoal_buf_reset(&b);
        shoal_reply_part_write(&b, f->version, id, kind, total, offset, d, dl);
        if (shoal_frame_parse(b.data, b.len, &g) != 0 ||
            shoal_reply_part_parse(&g, &id2, &kind2, &total2, &offset2, &d2, &dl2) != 0 ||
            id != id2 || kind != kind2 || total != total2 || offset != offset2 || dl != dl2 ||
            memcmp(d, d2, dl) != 0)
            abort();
    }
    shoal_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shoal_frame_t f;
    if (shoal_frame_parse(data, size, &f) != 0)
        return 0;
    switch (f.type) {
    case SHOAL_FT_DATA:
        check_data(&f);
        break;
    case SHOAL_FT_HELLO:
        check_hello(&f);
        break;
    case SHOAL_FT_HELLO_REPLY:
        check_hello_reply(&f);
        break;
    default:
        break;
    }
    /* every parser sees every frame: each must refuse what is not its own */
    check_small(&f);
    shoal_data_reader_t r;
    shoal_hello_t h;
    shoal_hello_reply_t hr;
    (void)shoal_data_open(&f, &r);
    (void)shoal_hello_parse(&f, &h);
    (void)shoal_hello_reply_parse(&f, &hr);
    return 0;
}
