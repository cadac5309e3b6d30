/*  test_client_replies.c — client replies larger than a frame (issue 19, section 6).

    A replicated LWWMap of 4,000 keys of 64-byte values (about 280 KB encoded, over the node's
    256 KiB frame limit) is read through the client API at LOCAL, as kvstore reads its map: the
    reply comes back whole, in parts under the frame limit. A client whose reply limit is below
    the map's size gets SHOAL_ETOOBIG with a reason at once, not a timeout, and the node counts
    it; so does a client of the older wire that cannot reassemble parts. A reply whose client
    disconnected while the node worked on it is counted and shows in the metrics. Real nodes on
    loopback; waits have deadlines, never fixed sleeps.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "client.pb-c.h"
#include "ddata.h"
#include "transport.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>

#define MAP_KEY   "kv"
#define MAP_KEYS  4000
#define VALUE_LEN 64
#define K_GET     0x8001 /* replicator_client.c: the client Get request */

static tcluster_t cl;
/* what a test has open: a failed assertion jumps past its own cleanup, and a socket left open
   would keep the process from exiting (zmq_ctx_term waits for it) */
static shoal_client_t *client;
static void *raw_sock;

static int teardown(void **state)
{
    shoal_client_destroy(&client);
    if (raw_sock)
        zmq_close(raw_sock);
    raw_sock = NULL;
    return tcluster_teardown(state);
}

/* The value of map key i: 64 bytes that differ per key, so a misplaced part shows. */
static void value_of(int i, char out[VALUE_LEN + 1])
{
    int n = snprintf(out, VALUE_LEN + 1, "value-%04d-", i);
    for (int j = n; j < VALUE_LEN; j++)
        out[j] = (char)('a' + (i * 7 + j) % 26);
    out[VALUE_LEN] = 0;
}

typedef struct {
    const shoal_node_t *self;
} fill_t;

static int fill(shoal_crdt_t *map, void *arg)
{
    fill_t *f = arg;
    for (int i = 0; i < MAP_KEYS; i++) {
        char key[16], value[VALUE_LEN + 1];
        snprintf(key, sizeof key, "k%04d", i);
        value_of(i, value);
        int rc = shoal_lwwmap_put(map, f->self, key, strlen(key), value, VALUE_LEN, NULL, NULL);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Writes the map on node 0 (WriteAll: every node holds it) and returns its encoded size. */
static size_t write_map(void)
{
    fill_t f = {shoal_system_self(cl.sys[0])};
    shoal_consistency_t all = c_all(5000);
    assert_int_equal(
        shoal_replicator_update_sync(cl.rep[0], MAP_KEY, shoal_lwwmap_new(), &all, fill, &f), 0);
    shoal_crdt_t *v = NULL;
    shoal_consistency_t local = c_local();
    assert_int_equal(shoal_replicator_get_sync(cl.rep[cl.n - 1], MAP_KEY, NULL, &local, &v), 0);
    assert_non_null(v);
    shoal_buf_t enc = {0};
    assert_int_equal(shoal_crdt_encode(v, &enc), 0);
    size_t len = enc.len;
    shoal_buf_free(&enc);
    shoal_crdt_destroy(&v);
    return len;
}

static shoal_client_t *client_of(int i)
{
    int err = 1;
    client = shoal_client_new(shoal_system_endpoint(cl.sys[i]), 5000, &err);
    assert_non_null(client);
    assert_int_equal(err, 0);
    return client;
}

static shoal_system_stats_t stats_of(int i)
{
    shoal_system_stats_t st;
    assert_int_equal(shoal_system_stats(cl.sys[i], &st), 0);
    return st;
}

/* Every key of the map, with its value, byte for byte. */
static void check_map(const shoal_crdt_t *map)
{
    assert_non_null(map);
    assert_ptr_equal(shoal_crdt_type(map), shoal_type_by_name("LWWMap"));
    for (int i = 0; i < MAP_KEYS; i++) {
        char key[16], want[VALUE_LEN + 1];
        snprintf(key, sizeof key, "k%04d", i);
        value_of(i, want);
        size_t vlen = 0;
        const void *v = shoal_lwwmap_get(map, key, strlen(key), &vlen);
        assert_non_null(v);
        assert_int_equal(vlen, VALUE_LEN);
        assert_memory_equal(v, want, VALUE_LEN);
    }
}

/* The case: the map is over the frame limit, and a LOCAL get through the client API on
   the node that did not write it (it came by replication) returns it whole. Without parts the
   node dropped the reply in silence and the client timed out. */
static void test_large_map_read_whole(void **state)
{
    (void)state;
    tcluster_start(&cl, 2, NULL);
    size_t encoded = write_map();
    assert_true(encoded > 256 * 1024); /* more than a frame */
    shoal_client_t *c = client_of(1);
    shoal_consistency_t local = c_local();
    shoal_crdt_t *map = NULL;
    int64_t t0 = shoal_now_ms();
    assert_int_equal(shoal_client_get(c, "", MAP_KEY, &local, &map), 0);
    assert_true(shoal_now_ms() - t0 < 3000);
    check_map(map);
    shoal_crdt_t *there = NULL;
    assert_int_equal(shoal_replicator_get_sync(cl.rep[1], MAP_KEY, NULL, &local, &there), 0);
    assert_true(shoal_crdt_equal(map, there));
    shoal_crdt_destroy(&there);
    shoal_crdt_destroy(&map);
    assert_string_equal(shoal_client_error(c), "");
    shoal_system_stats_t st = stats_of(1);
    assert_int_equal(st.replies_in_parts, 1);
    assert_true(st.reply_parts >= 2);
    assert_int_equal(st.replies_dropped_gone + st.replies_dropped_full + st.replies_too_big, 0);
    /* again, and small replies in between: the client keeps no state of the last reply */
    shoal_client_op_t op = {.type = "LWWMap", .op = "put", .key2 = "k0001", .key2_len = 5,
                            .value = "changed", .value_len = 7};
    assert_int_equal(shoal_client_update(c, "", MAP_KEY, &local, &op), 0);
    assert_int_equal(shoal_client_get(c, "", MAP_KEY, &local, &map), 0);
    size_t vlen = 0;
    const void *v = shoal_lwwmap_get(map, "k0001", 5, &vlen);
    assert_int_equal(vlen, 7);
    assert_memory_equal(v, "changed", 7);
    assert_non_null(shoal_lwwmap_get(map, "k3999", 5, &vlen));
    shoal_crdt_destroy(&map);
    assert_int_equal(stats_of(1).replies_in_parts, 2);
    shoal_client_destroy(&client);
    tcluster_stop(&cl);
}

/* A reply over the client's reply limit: SHOAL_ETOOBIG at once, with the reason, and counted on
   the node; the same client reads it once its limit allows. */
static void test_reply_over_the_client_limit(void **state)
{
    (void)state;
    tcluster_start(&cl, 1, NULL);
    write_map();
    shoal_client_t *c = client_of(0);
    assert_int_equal(shoal_client_set_max_reply(c, 0), SHOAL_EINVAL);
    assert_int_equal(shoal_client_set_max_reply(c, (size_t)1 << 31), SHOAL_EINVAL);
    assert_int_equal(shoal_client_set_max_reply(c, 64 * 1024), 0);
    shoal_consistency_t local = c_local();
    shoal_crdt_t *map = NULL;
    int64_t t0 = shoal_now_ms();
    assert_int_equal(shoal_client_get(c, "", MAP_KEY, &local, &map), SHOAL_ETOOBIG);
    assert_true(shoal_now_ms() - t0 < 2000 * tscale()); /* answered, not timed out (5 s) */
    assert_null(map);
    print_message("client error: %s\n", shoal_client_error(c));
    assert_non_null(strstr(shoal_client_error(c), "over this client's limit of 65536 bytes"));
    shoal_system_stats_t st = stats_of(0);
    assert_int_equal(st.replies_too_big, 1);
    assert_int_equal(st.replies_in_parts, 0);
    /* small replies still fit */
    shoal_buf_t text = {0};
    assert_int_equal(shoal_client_stats(c, "", &text), 0);
    assert_non_null(strstr(shoal_buf_cstr(&text), "node_replies_too_big 1\n"));
    shoal_buf_free(&text);
    /* raised again: the node is told, and the map comes whole */
    assert_int_equal(shoal_client_set_max_reply(c, 64u << 20), 0);
    assert_int_equal(shoal_client_get(c, "", MAP_KEY, &local, &map), 0);
    check_map(map);
    shoal_crdt_destroy(&map);
    assert_int_equal(stats_of(0).replies_in_parts, 1);
    assert_int_equal(stats_of(0).replies_too_big, 1);
    shoal_client_destroy(&client);
    tcluster_stop(&cl);
}

/* A raw DEALER that handshakes as a client of the older wire: no max_reply_bytes in its Hello,
   so it cannot take parts. */
typedef struct {
    void *sock;
} raw_client_t;

static void raw_close(raw_client_t *r)
{
    zmq_close(r->sock);
    r->sock = raw_sock = NULL;
}

static void raw_connect(raw_client_t *r, const char *endpoint, uint64_t max_reply)
{
    r->sock = raw_sock = zmq_socket(shoal_zmq_context(), ZMQ_DEALER);
    assert_non_null(r->sock);
    int zero = 0;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal(zmq_connect(r->sock, endpoint), 0);
    shoal_hello_t h = {0};
    h.version_min = h.version_max = 1;
    h.client = true;
    h.first_seq = 1;
    h.max_reply_bytes = max_reply;
    snprintf(h.to, sizeof h.to, "%s", endpoint);
    shoal_buf_t b = {0};
    shoal_hello_write(&b, &h);
    assert_int_equal(zmq_send(r->sock, b.data, b.len, 0), (int)b.len);
    shoal_buf_free(&b);
    uint8_t buf[512];
    int timeout = 5000 * tscale();
    zmq_setsockopt(r->sock, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    int n = zmq_recv(r->sock, buf, sizeof buf, 0);
    assert_true(n > 2);
    shoal_frame_t f;
    shoal_hello_reply_t hr;
    assert_int_equal(shoal_frame_parse(buf, (size_t)n, &f), 0);
    assert_int_equal(shoal_hello_reply_parse(&f, &hr), 0);
    assert_int_equal(hr.status, SHOAL_HELLO_OK);
}

/* Sends a Get of the map at `level` (with the timeout) as request `id`. */
static void raw_get(raw_client_t *r, uint64_t id, uint32_t level, uint32_t timeout_ms)
{
    Shoal__Client__Consistency cons = SHOAL__CLIENT__CONSISTENCY__INIT;
    cons.level = level;
    cons.timeout_ms = timeout_ms;
    Shoal__Client__Get g = SHOAL__CLIENT__GET__INIT;
    g.role = "";
    g.key = MAP_KEY;
    g.read = &cons;
    uint8_t body[256];
    size_t len = shoal__client__get__pack(&g, body);
    shoal_buf_t b = {0};
    shoal_request_write(&b, 1, id, K_GET, body, len);
    assert_int_equal(zmq_send(r->sock, b.data, b.len, 0), (int)b.len);
    shoal_buf_free(&b);
}

/* An older client asks for a map over the frame limit: it is answered SHOAL_ETOOBIG in one REPLY
   frame it understands, never sent parts it would skip while waiting for its timeout. */
static void test_older_client_is_told_too_big(void **state)
{
    (void)state;
    tcluster_start(&cl, 1, NULL);
    write_map();
    raw_client_t r;
    raw_connect(&r, shoal_system_endpoint(cl.sys[0]), 0);
    raw_get(&r, 7, 0, 0);
    zmq_msg_t m;
    zmq_msg_init(&m);
    assert_true(zmq_msg_recv(&m, r.sock, 0) > 0);
    shoal_frame_t f;
    assert_int_equal(shoal_frame_parse(zmq_msg_data(&m), zmq_msg_size(&m), &f), 0);
    assert_int_equal(f.type, SHOAL_FT_REPLY);
    uint64_t id;
    uint16_t kind;
    int status;
    const uint8_t *d;
    size_t dl;
    assert_int_equal(shoal_reply_parse(&f, &id, &kind, &status, &d, &dl), 0);
    assert_int_equal(id, 7);
    assert_int_equal(status, SHOAL_ETOOBIG);
    zmq_msg_close(&m);
    assert_int_equal(stats_of(0).replies_too_big, 1);
    /* the same client, announcing a limit, is sent the map in parts under the frame limit */
    raw_close(&r);
    raw_connect(&r, shoal_system_endpoint(cl.sys[0]), 64u << 20);
    raw_get(&r, 8, 0, 0);
    uint64_t got = 0, total = 0, parts = 0;
    do {
        zmq_msg_init(&m);
        assert_true(zmq_msg_recv(&m, r.sock, 0) > 0);
        assert_true(zmq_msg_size(&m) <= 256 * 1024);
        assert_int_equal(shoal_frame_parse(zmq_msg_data(&m), zmq_msg_size(&m), &f), 0);
        assert_int_equal(f.type, SHOAL_FT_REPLY_PART);
        uint64_t offset;
        assert_int_equal(shoal_reply_part_parse(&f, &id, &kind, &total, &offset, &d, &dl), 0);
        assert_int_equal(id, 8);
        assert_int_equal(offset, got);
        got += dl;
        parts++;
        zmq_msg_close(&m);
    } while (got < total);
    assert_true(parts >= 2);
    assert_int_equal(stats_of(0).reply_parts, parts);
    raw_close(&r);
    tcluster_stop(&cl);
}

typedef struct {
    int i;
    uint64_t n;
} gone_want_t;

static bool replies_gone(void *arg)
{
    gone_want_t *w = arg;
    return stats_of(w->i).replies_dropped_gone >= w->n;
}

typedef struct {
    shoal_buf_t text;
} collect_t;

static int collect(shoal_system_t *sys, void *arg)
{
    return shoal_metrics_collect(sys, &((collect_t *)arg)->text);
}

/* The client asks for a majority read the node cannot answer before its timeout (its peer is
   cut off), and disconnects: the answer that comes later has nowhere to go. It is counted, by
   reason, in the node's stats and metrics, instead of vanishing. */
static void test_reply_to_a_gone_client_is_counted(void **state)
{
    (void)state;
    tcluster_start(&cl, 2, NULL);
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(cl.sys[0], NULL, &cut), 0);
    assert_int_equal(shoal_system_fault(cl.sys[1], NULL, &cut), 0);
    raw_client_t r;
    raw_connect(&r, shoal_system_endpoint(cl.sys[0]), 64u << 20);
    raw_get(&r, 1, 2 /* majority */, 300 * (uint32_t)tscale());
    /* the request is in the node's hands before the client leaves */
    shoal_replicator_stats_t rs;
    for (int64_t deadline = shoal_now_ms() + 5000 * tscale();; zclock_sleep(5)) {
        assert_int_equal(shoal_replicator_stats(cl.rep[0], &rs), 0);
        if (rs.gets >= 1)
            break;
        assert_true(shoal_now_ms() < deadline);
    }
    raw_close(&r);
    gone_want_t w = {0, 1};
    assert_true(wait_until(replies_gone, &w, 5000));
    shoal_system_stats_t st = stats_of(0);
    assert_int_equal(st.replies_dropped_gone, 1);
    assert_int_equal(st.replies_dropped_full + st.replies_too_big, 0);
    collect_t m = {{0}};
    assert_int_equal(shoal_system_call(cl.sys[0], collect, &m), 0);
    const char *text = shoal_buf_cstr(&m.text);
    assert_non_null(strstr(text, "# TYPE shoal_node_replies_dropped_total counter\n"));
    assert_non_null(strstr(text, "shoal_node_replies_dropped_total{reason=\"client_gone\"} 1\n"));
    assert_non_null(strstr(text, "shoal_node_replies_dropped_total{reason=\"too_big\"} 0\n"));
    assert_non_null(strstr(text, "shoal_node_replies_in_parts_total 0\n"));
    shoal_buf_free(&m.text);
    shoal_system_heal(cl.sys[0]);
    shoal_system_heal(cl.sys[1]);
    tcluster_stop(&cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_large_map_read_whole, teardown),
        cmocka_unit_test_teardown(test_reply_over_the_client_limit, teardown),
        cmocka_unit_test_teardown(test_older_client_is_told_too_big, teardown),
        cmocka_unit_test_teardown(test_reply_to_a_gone_client_is_counted, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
