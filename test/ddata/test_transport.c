/*  test_transport.c — the transport's wire format without sockets: varints, frame headers,
    batches, sequence accounting, control frames, handshakes, endpoints, and their rejection of
    malformed input.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "prop.h"
#include "transport.h"

#include <string.h>

static void test_varint_round_trip_and_limits(void **state)
{
    (void)state;
    const uint64_t vals[] = {
        0, 1, 127, 128, 300, 16383, 16384, UINT32_MAX, (uint64_t)1 << 63, UINT64_MAX};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        uint8_t buf[10];
        size_t n = shoal_varint_put(buf, vals[i]);
        assert_int_equal(n, shoal_varint_len(vals[i]));
        const uint8_t *p = buf;
        uint64_t v = 0;
        assert_int_equal(shoal_varint_get(&p, buf + n, &v), 0);
        assert_int_equal(v, vals[i]);
        assert_ptr_equal(p, buf + n);
        /* every truncation fails */
        for (size_t cut = 0; cut < n; cut++) {
            p = buf;
            assert_int_equal(shoal_varint_get(&p, buf + cut, &v), SHOAL_EDECODE);
            assert_ptr_equal(p, buf);
        }
    }
    assert_int_equal(shoal_varint_len(UINT64_MAX), 10);
    /* 65 bits, and an 11-byte varint */
    uint8_t over[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    const uint8_t *p = over;
    uint64_t v;
    assert_int_equal(shoal_varint_get(&p, over + 10, &v), SHOAL_EDECODE);
    uint8_t eleven[11] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    p = eleven;
    assert_int_equal(shoal_varint_get(&p, eleven + 11, &v), SHOAL_EDECODE);
}

static void test_frame_header(void **state)
{
    (void)state;
    shoal_frame_t f;
    assert_int_equal(shoal_frame_parse((const uint8_t *)"\xa1\x05", 2, &f), 0);
    assert_int_equal(f.version, 1);
    assert_int_equal(f.type, SHOAL_FT_WHO);
    assert_int_equal(f.body_len, 0);
    assert_int_equal(shoal_frame_parse((const uint8_t *)"\xa1", 1, &f), SHOAL_EDECODE);
    assert_int_equal(shoal_frame_parse(NULL, 0, &f), SHOAL_EDECODE);
    assert_int_equal(shoal_frame_parse((const uint8_t *)"\x51\x05", 2, &f), SHOAL_EDECODE);
    assert_int_equal(shoal_frame_parse((const uint8_t *)"\xa0\x05", 2, &f), SHOAL_EVERSION);
    assert_int_equal(shoal_frame_parse((const uint8_t *)"\xa2\x05", 2, &f), SHOAL_EVERSION);
    assert_int_equal(shoal_frame_parse((const uint8_t *)"\xa1\x00", 2, &f), SHOAL_EDECODE);
    assert_int_equal(shoal_frame_parse((const uint8_t *)"\xa1\x08", 2, &f), 0); /* REPLY_PART */
    assert_int_equal(shoal_frame_parse((const uint8_t *)"\xa1\x09", 2, &f), SHOAL_EDECODE);
    shoal_buf_t b = {0};
    shoal_frame_write_empty(&b, 1, SHOAL_FT_WHO);
    assert_int_equal(b.len, 2);
    assert_memory_equal(b.data, "\xa1\x05", 2);
    shoal_buf_free(&b);
}

static void test_batch_round_trip(void **state)
{
    (void)state;
    const uint64_t firsts[] = {1, 127, 128, (uint64_t)1 << 40, UINT64_MAX - 3};
    for (size_t k = 0; k < sizeof firsts / sizeof firsts[0]; k++) {
        shoal_batch_t b = {0};
        shoal_batch_append(&b, firsts[k], 16, "abc", 3);
        shoal_batch_append(&b, 0, 0x7fff, NULL, 0); /* the seq of later records is implied */
        char big[300];
        memset(big, 'z', sizeof big);
        shoal_batch_append(&b, 0, 200, big, sizeof big);
        assert_int_equal(b.count, 3);
        assert_int_equal(shoal_batch_records(&b), shoal_record_size(16, 3) +
                                                      shoal_record_size(0x7fff, 0) +
                                                      shoal_record_size(200, 300));
        size_t len;
        const uint8_t *frame = shoal_batch_seal(&b, 1, &len);
        assert_true(len <= shoal_batch_frame_max(shoal_batch_records(&b)));
        assert_int_equal(len, 2 + shoal_varint_len(firsts[k]) + shoal_batch_records(&b));
        shoal_frame_t f;
        assert_int_equal(shoal_frame_parse(frame, len, &f), 0);
        assert_int_equal(f.type, SHOAL_FT_DATA);
        shoal_data_reader_t r;
        assert_int_equal(shoal_data_open(&f, &r), 0);
        assert_int_equal(r.first_seq, firsts[k]);
        assert_int_equal(r.count, 3);
        uint16_t kind;
        const uint8_t *d;
        size_t dl;
        assert_int_equal(shoal_data_next(&r, &kind, &d, &dl), 1);
        assert_int_equal(kind, 16);
        assert_int_equal(dl, 3);
        assert_memory_equal(d, "abc", 3);
        assert_int_equal(shoal_data_next(&r, &kind, &d, &dl), 1);
        assert_int_equal(kind, 0x7fff);
        assert_int_equal(dl, 0);
        assert_int_equal(shoal_data_next(&r, &kind, &d, &dl), 1);
        assert_int_equal(kind, 200);
        assert_int_equal(dl, 300);
        assert_memory_equal(d, big, 300);
        assert_int_equal(shoal_data_next(&r, &kind, &d, &dl), 0);
        /* every truncation of the frame is either a shorter valid frame or rejected */
        for (size_t cut = 2; cut < len; cut++) {
            shoal_frame_t g;
            assert_int_equal(shoal_frame_parse(frame, cut, &g), 0);
            shoal_data_reader_t r2;
            int rc = shoal_data_open(&g, &r2);
            if (rc == 0)
                assert_true(r2.count < 3);
            else
                assert_int_equal(rc, SHOAL_EDECODE);
        }
        shoal_batch_reset(&b);
        assert_int_equal(b.count, 0);
        assert_int_equal(shoal_batch_records(&b), 0);
        shoal_batch_free(&b);
    }
}

static void test_data_frame_rejections(void **state)
{
    (void)state;
    struct {
        const char *bytes;
        size_t len;
    } bad[] = {
        {"\xa1\x03", 2},                     /* no seq */
        {"\xa1\x03\x00\x10\x00", 5},         /* seq 0 */
        {"\xa1\x03\x01", 3},                 /* no record */
        {"\xa1\x03\x01\x10", 4},             /* no length */
        {"\xa1\x03\x01\x10\x05xx", 7},       /* length past the end */
        {"\xa1\x03\x01\x80\x80\x04\x00", 7}, /* kind 65536 */
        {"\xa1\x03\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x10\x00\x10\x00", 16}, /* seq overflow */
        {"\xa1\x04\x01\x10\x00", 5}, /* not a DATA frame */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        shoal_frame_t f;
        assert_int_equal(shoal_frame_parse((const uint8_t *)bad[i].bytes, bad[i].len, &f), 0);
        shoal_data_reader_t r;
        assert_int_equal(shoal_data_open(&f, &r), SHOAL_EDECODE);
    }
    /* the largest sequence that fits */
    shoal_frame_t f;
    const char ok[] = "\xa1\x03\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01\x10\x00";
    assert_int_equal(shoal_frame_parse((const uint8_t *)ok, sizeof ok - 1, &f), 0);
    shoal_data_reader_t r;
    assert_int_equal(shoal_data_open(&f, &r), 0);
    assert_int_equal(r.first_seq, UINT64_MAX - 1);
}

static void test_seq_accounting(void **state)
{
    (void)state;
    uint64_t exp = 1;
    shoal_seq_verdict_t v = shoal_seq_accept(&exp, 1, 5); /* 1..5 */
    assert_int_equal(v.skip, 0);
    assert_int_equal(v.missed, 0);
    assert_int_equal(exp, 6);
    v = shoal_seq_accept(&exp, 9, 2); /* 6,7,8 missed; 9,10 */
    assert_int_equal(v.missed, 3);
    assert_int_equal(v.skip, 0);
    assert_int_equal(exp, 11);
    v = shoal_seq_accept(&exp, 9, 2); /* the same frame again */
    assert_int_equal(v.skip, 2);
    assert_int_equal(v.missed, 0);
    assert_int_equal(exp, 11);
    v = shoal_seq_accept(&exp, 6, 3); /* a late frame after its gap was counted: dropped */
    assert_int_equal(v.skip, 3);
    assert_int_equal(exp, 11);
    v = shoal_seq_accept(&exp, 10, 4); /* overlaps: 10 seen, 11..13 new */
    assert_int_equal(v.skip, 1);
    assert_int_equal(v.missed, 0);
    assert_int_equal(exp, 14);
}

static void test_control_frames(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    shoal_frame_t f;
    shoal_ack_write(&b, 1, 123456789);
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    uint64_t seq;
    assert_int_equal(shoal_ack_parse(&f, &seq), 0);
    assert_int_equal(seq, 123456789);
    assert_int_equal(shoal_frame_parse(b.data, b.len - 1, &f), 0);
    assert_int_equal(shoal_ack_parse(&f, &seq), SHOAL_EDECODE);
    shoal_buf_append(&b, "x", 1); /* trailing bytes */
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    assert_int_equal(shoal_ack_parse(&f, &seq), SHOAL_EDECODE);

    shoal_buf_reset(&b);
    shoal_request_write(&b, 1, 42, 0x8001, "ping", 4);
    assert_true(b.len <= SHOAL_REQUEST_HEADER_MAX + 4);
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    uint64_t id;
    uint16_t kind;
    const uint8_t *d;
    size_t dl;
    assert_int_equal(shoal_request_parse(&f, &id, &kind, &d, &dl), 0);
    assert_int_equal(id, 42);
    assert_int_equal(kind, 0x8001);
    assert_int_equal(dl, 4);
    assert_memory_equal(d, "ping", 4);
    int status;
    assert_int_equal(shoal_reply_parse(&f, &id, &kind, &status, &d, &dl), SHOAL_EDECODE);

    shoal_buf_reset(&b);
    shoal_reply_write(&b, 1, UINT64_MAX, 0xffff, SHOAL_EKIND, NULL, 0);
    assert_true(b.len <= SHOAL_REQUEST_HEADER_MAX);
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    assert_int_equal(shoal_reply_parse(&f, &id, &kind, &status, &d, &dl), 0);
    assert_int_equal(id, UINT64_MAX);
    assert_int_equal(kind, 0xffff);
    assert_int_equal(status, SHOAL_EKIND);
    assert_int_equal(dl, 0);
    for (size_t cut = 2; cut < b.len; cut++) {
        assert_int_equal(shoal_frame_parse(b.data, cut, &f), 0);
        assert_int_equal(shoal_reply_parse(&f, &id, &kind, &status, &d, &dl), SHOAL_EDECODE);
    }

    /* a part of a reply too large for one frame: bytes 1000..1004 of 1005 */
    shoal_buf_reset(&b);
    shoal_reply_part_write(&b, 1, UINT64_MAX, 0x8001, 1005, 1000, "tail!", 5);
    assert_true(b.len <= SHOAL_REPLY_PART_HEADER_MAX + 5);
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    uint64_t total, offset;
    assert_int_equal(shoal_reply_part_parse(&f, &id, &kind, &total, &offset, &d, &dl), 0);
    assert_int_equal(id, UINT64_MAX);
    assert_int_equal(kind, 0x8001);
    assert_int_equal(total, 1005);
    assert_int_equal(offset, 1000);
    assert_int_equal(dl, 5);
    assert_memory_equal(d, "tail!", 5);
    assert_int_equal(shoal_reply_parse(&f, &id, &kind, &status, &d, &dl), SHOAL_EDECODE);
    for (size_t cut = 2; cut <= b.len - 5; cut++) { /* a header cut short, or no bytes at all */
        assert_int_equal(shoal_frame_parse(b.data, cut, &f), 0);
        assert_int_equal(shoal_reply_part_parse(&f, &id, &kind, &total, &offset, &d, &dl),
                         SHOAL_EDECODE);
    }
    /* bytes past the total it announces, an offset past it, a kind over 16 bits */
    const struct {
        uint64_t kind, total, offset;
        size_t len;
    } bad[] = {{0x8001, 1004, 1000, 5},
               {0x8001, 10, 11, 1},
               {0x10000, 10, 0, 1},
               {0x8001, UINT64_MAX, UINT64_MAX, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        shoal_buf_reset(&b);
        uint8_t head[2] = {0xa1, SHOAL_FT_REPLY_PART}, v[10];
        shoal_buf_append(&b, head, 2);
        const uint64_t fields[] = {7, bad[i].kind, bad[i].total, bad[i].offset};
        for (size_t k = 0; k < 4; k++)
            shoal_buf_append(&b, v, shoal_varint_put(v, fields[k]));
        shoal_buf_append(&b, "xxxxx", bad[i].len);
        assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
        assert_int_equal(shoal_reply_part_parse(&f, &id, &kind, &total, &offset, &d, &dl),
                         SHOAL_EDECODE);
    }
    shoal_buf_free(&b);
}

static void test_hello_round_trip_and_validation(void **state)
{
    (void)state;
    shoal_hello_t h = {0}, g;
    h.version_min = 1;
    h.version_max = 3;
    strcpy(h.from, "10.0.0.1:2552:7");
    strcpy(h.to_node, "10.0.0.2:2552:8");
    h.first_seq = 99;
    strcpy(h.to, "tcp://10.0.0.2:2552");
    shoal_buf_t b = {0};
    shoal_hello_write(&b, &h);
    shoal_frame_t f;
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    assert_int_equal(f.type, SHOAL_FT_HELLO);
    assert_int_equal(shoal_hello_parse(&f, &g), 0);
    assert_int_equal(g.version_min, 1);
    assert_int_equal(g.version_max, 3);
    assert_string_equal(g.from, h.from);
    assert_string_equal(g.to_node, h.to_node);
    assert_int_equal(g.first_seq, 99);
    assert_string_equal(g.to, h.to);
    assert_false(g.client);
    assert_int_equal(shoal_wire_version_pick(g.version_min, g.version_max), 1);
    assert_int_equal(shoal_wire_version_pick(2, 3), 0);
    /* the reply limit is a client's: a peer's is not kept (a peer is never sent replies) */
    h.max_reply_bytes = 1234;
    shoal_buf_reset(&b);
    shoal_hello_write(&b, &h);
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    assert_int_equal(shoal_hello_parse(&f, &g), 0);
    assert_int_equal(g.max_reply_bytes, 0);
    shoal_hello_t ch = {0};
    ch.client = true;
    ch.version_min = ch.version_max = 1;
    ch.max_reply_bytes = 64u << 20;
    strcpy(ch.to, "tcp://h:1");
    shoal_buf_reset(&b);
    shoal_hello_write(&b, &ch);
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    assert_int_equal(shoal_hello_parse(&f, &g), 0);
    assert_int_equal(g.max_reply_bytes, 64u << 20);

    struct {
        bool client;
        const char *from;
        uint32_t vmin, vmax;
        const char *to;
        int rc;
    } cases[] = {
        {true, NULL, 1, 1, "tcp://h:1", 0},
        {true, "10.0.0.1:2552:7", 1, 1, "tcp://h:1", SHOAL_EDECODE},  /* a client with an id */
        {false, NULL, 1, 1, "tcp://h:1", SHOAL_EDECODE},              /* a peer without one */
        {false, "10.0.0.1:2552:7", 2, 1, "tcp://h:1", SHOAL_EDECODE}, /* min > max */
        {false, "10.0.0.1:2552:7", 0, 1, "tcp://h:1", SHOAL_EDECODE}, /* version 0 */
        {false, "10.0.0.1:2552:7", 1, 1, "", SHOAL_EDECODE},          /* no address */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        shoal_hello_t c = {0};
        c.client = cases[i].client;
        strcpy(c.from, cases[i].from ? cases[i].from : "");
        c.version_min = cases[i].vmin;
        c.version_max = cases[i].vmax;
        strcpy(c.to, cases[i].to);
        shoal_buf_reset(&b);
        shoal_hello_write(&b, &c);
        assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
        assert_int_equal(shoal_hello_parse(&f, &g), cases[i].rc);
        if (cases[i].rc == 0) {
            assert_true(g.client);
            assert_string_equal(g.from, "");
            assert_string_equal(g.to_node, "");
            assert_int_equal(g.first_seq, 1); /* 0 on the wire means "from the start" */
        }
    }
    /* a malformed node id in the protobuf: field 3 (from) = "bad" */
    const uint8_t bad_id[] = {0xa1, 0x01, 0x08, 0x01, 0x10, 0x01, 0x1a, 0x03,
                              'b',  'a',  'd',  0x22, 0x03, 't',  'o',  'x'};
    assert_int_equal(shoal_frame_parse(bad_id, sizeof bad_id, &f), 0);
    assert_int_equal(shoal_hello_parse(&f, &g), SHOAL_ENODE);
    /* not protobuf at all */
    assert_int_equal(shoal_frame_parse((const uint8_t *)"\xa1\x01\xff\xff", 4, &f), 0);
    assert_int_equal(shoal_hello_parse(&f, &g), SHOAL_EDECODE);
    shoal_buf_free(&b);
}

/* The protocol range in the handshake (docs/protocol-versions.md): said only past 1, so a
   protocol-1 build writes 0.1.x's bytes; not said = 1..1; min > max is malformed. */
static void test_hello_protocol_range(void **state)
{
    (void)state;
    shoal_hello_t h = {0}, g;
    h.version_min = h.version_max = 1;
    strcpy(h.from, "10.0.0.1:2552:7");
    strcpy(h.to, "tcp://10.0.0.2:2552");
    h.first_seq = 1;
    shoal_buf_t plain = {0}, one = {0}, two = {0};
    shoal_hello_write(&plain, &h); /* as 0.1.x: no protocol said */
    h.protocol_min = h.protocol_max = 1;
    shoal_hello_write(&one, &h);
    assert_int_equal(one.len, plain.len);
    assert_memory_equal(one.data, plain.data, plain.len);
    shoal_frame_t f;
    assert_int_equal(shoal_frame_parse(plain.data, plain.len, &f), 0);
    assert_int_equal(shoal_hello_parse(&f, &g), 0);
    assert_int_equal(g.protocol_min, 1);
    assert_int_equal(g.protocol_max, 1);
    h.protocol_max = 2;
    shoal_hello_write(&two, &h);
    assert_true(two.len > plain.len);
    assert_int_equal(shoal_frame_parse(two.data, two.len, &f), 0);
    assert_int_equal(shoal_hello_parse(&f, &g), 0);
    assert_int_equal(g.protocol_min, 1);
    assert_int_equal(g.protocol_max, 2);
    h.protocol_min = 3; /* min > max */
    shoal_buf_reset(&two);
    shoal_hello_write(&two, &h);
    assert_int_equal(shoal_frame_parse(two.data, two.len, &f), 0);
    assert_int_equal(shoal_hello_parse(&f, &g), SHOAL_EDECODE);

    shoal_hello_reply_t r = {SHOAL_HELLO_OK, "h:1:2", 1, 4096, 1, 1}, rg;
    shoal_hello_reply_t r0 = {SHOAL_HELLO_OK, "h:1:2", 1, 4096, 0, 0};
    shoal_buf_t rb = {0}, rb0 = {0};
    shoal_hello_reply_write(&rb, &r);
    shoal_hello_reply_write(&rb0, &r0);
    assert_int_equal(rb.len, rb0.len);
    assert_memory_equal(rb.data, rb0.data, rb0.len);
    assert_int_equal(shoal_frame_parse(rb.data, rb.len, &f), 0);
    assert_int_equal(shoal_hello_reply_parse(&f, &rg), 0);
    assert_int_equal(rg.protocol_max, 1);
    r.protocol_max = 2;
    shoal_buf_reset(&rb);
    shoal_hello_reply_write(&rb, &r);
    assert_int_equal(shoal_frame_parse(rb.data, rb.len, &f), 0);
    assert_int_equal(shoal_hello_reply_parse(&f, &rg), 0);
    assert_int_equal(rg.protocol_min, 1);
    assert_int_equal(rg.protocol_max, 2);
    shoal_buf_free(&plain);
    shoal_buf_free(&one);
    shoal_buf_free(&two);
    shoal_buf_free(&rb);
    shoal_buf_free(&rb0);
}

static void test_hello_reply(void **state)
{
    (void)state;
    shoal_hello_reply_t r = {SHOAL_HELLO_OK, "h:1:2", 1, 4096}, g;
    shoal_buf_t b = {0};
    shoal_hello_reply_write(&b, &r);
    shoal_frame_t f;
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    assert_int_equal(shoal_hello_reply_parse(&f, &g), 0);
    assert_int_equal(g.status, SHOAL_HELLO_OK);
    assert_string_equal(g.node, "h:1:2");
    assert_int_equal(g.version, 1);
    assert_int_equal(g.max_frame_bytes, 4096);
    /* OK needs a node and a version we speak */
    shoal_hello_reply_t bad[] = {{SHOAL_HELLO_OK, "", 1, 0},
                                 {SHOAL_HELLO_OK, "h:1:2", 0, 0},
                                 {SHOAL_HELLO_OK, "h:1:2", 9, 0},
                                 {17, "h:1:2", 1, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        shoal_buf_reset(&b);
        shoal_hello_reply_write(&b, &bad[i]);
        assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
        assert_int_equal(shoal_hello_reply_parse(&f, &g), SHOAL_EDECODE);
    }
    /* a malformed node id (port 0) */
    shoal_hello_reply_t bad_id = {SHOAL_HELLO_OK, "h:0:2", 1, 0};
    shoal_buf_reset(&b);
    shoal_hello_reply_write(&b, &bad_id);
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    assert_int_equal(shoal_hello_reply_parse(&f, &g), SHOAL_ENODE);
    /* a refusal may come without a version */
    shoal_hello_reply_t no = {SHOAL_HELLO_QUARANTINED, "h:1:2", 0, 0};
    shoal_buf_reset(&b);
    shoal_hello_reply_write(&b, &no);
    assert_int_equal(shoal_frame_parse(b.data, b.len, &f), 0);
    assert_int_equal(shoal_hello_reply_parse(&f, &g), 0);
    assert_int_equal(g.status, SHOAL_HELLO_QUARANTINED);
    shoal_buf_free(&b);
}

static void test_endpoints(void **state)
{
    (void)state;
    char host[64];
    uint16_t port;
    assert_int_equal(shoal_endpoint_split("tcp://127.0.0.1:2552", host, sizeof host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 2552);
    assert_int_equal(shoal_endpoint_split("tcp://[::1]:9", host, sizeof host, &port), 0);
    assert_string_equal(host, "[::1]");
    assert_int_equal(port, 9);
    assert_int_equal(shoal_endpoint_split("ipc:///tmp/x.sock", host, sizeof host, &port), 0);
    assert_string_equal(host, "/tmp/x.sock");
    assert_int_equal(port, 1);
    const char *bad[] = {
        "",           "tcp://",    "tcp://h",     "tcp://:1",     "tcp://h:", "tcp://h:70000",
        "tcp://h:1x", "udp://h:1", "tcp://a b:1", "tcp://[::1:1", "ipc://"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(shoal_endpoint_split(bad[i], host, sizeof host, &port), SHOAL_EINVAL);
    assert_int_equal(shoal_endpoint_split("tcp://averyveryverylonghostname:1", host, 8, &port),
                     SHOAL_EINVAL);

    assert_true(shoal_endpoint_matches("tcp://127.0.0.1:5", "tcp://127.0.0.1:5"));
    assert_false(shoal_endpoint_matches("tcp://127.0.0.1:5", "tcp://127.0.0.1:6"));
    assert_false(shoal_endpoint_matches("tcp://127.0.0.1:5", "tcp://127.0.0.2:5"));
    assert_true(shoal_endpoint_matches("tcp://0.0.0.0:5", "tcp://10.1.1.1:5"));
    assert_true(shoal_endpoint_matches("tcp://127.0.0.1:5", "tcp://localhost:5"));
    assert_false(shoal_endpoint_matches("tcp://127.0.0.1:5", "ipc:///x"));
    assert_true(shoal_endpoint_matches("ipc:///x", "ipc:///x"));
    assert_false(shoal_endpoint_matches("ipc:///x", "ipc:///y"));
    assert_false(shoal_endpoint_matches(NULL, "tcp://h:1"));
}

static void test_strerror_names_node_errors(void **state)
{
    (void)state;
    const int codes[] = {SHOAL_EAGAIN, SHOAL_ENOTCONN, SHOAL_ETHREAD,  SHOAL_EDEADLK,
                         SHOAL_EBUSY,  SHOAL_ETIMEOUT, SHOAL_ESTOPPED, SHOAL_EIO,
                         SHOAL_EKIND,  SHOAL_EREFUSED};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        assert_string_not_equal(shoal_strerror(codes[i]), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varint_round_trip_and_limits),
        cmocka_unit_test(test_frame_header),
        cmocka_unit_test(test_batch_round_trip),
        cmocka_unit_test(test_data_frame_rejections),
        cmocka_unit_test(test_seq_accounting),
        cmocka_unit_test(test_control_frames),
        cmocka_unit_test(test_hello_round_trip_and_validation),
        cmocka_unit_test(test_hello_reply),
        cmocka_unit_test(test_hello_protocol_range),
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_strerror_names_node_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
