/*  metrics.c — the Prometheus endpoint of a node (see ddata.h, METRICS).

    libmicrohttpd runs its own polling thread; a scrape hops onto the node thread with
    shoal_system_call, so every collector sees node-thread state consistently and nothing here
    needs a lock but the collector list. The text is built into one buffer and handed to MHD,
    which frees it when the response has been sent.
*/
#include "replicator_internal.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct {
    shoal_metrics_fn *fn;
    void *arg;
} collector_t;

struct shoal_metrics {
    shoal_system_t *sys;
    struct MHD_Daemon *daemon;
    uint16_t port;
    pthread_mutex_t lock; /* the collector list: added from any thread, read on the node thread */
    collector_t *collectors;
    size_t n_collectors, cap_collectors;
};

/* ---------------------------------------------------------------------------------------------
 * Text helpers
 */
void shoal_metrics_family(shoal_buf_t *out, const char *name, const char *type, const char *help)
{
    /* HELP text escapes backslash and newline only (exposition format 0.0.4) */
    shoal_buf_printf(out, "# HELP %s ", name);
    for (const char *p = help ? help : ""; *p; p++) {
        if (*p == '\\')
            shoal_buf_append(out, "\\\\", 2);
        else if (*p == '\n')
            shoal_buf_append(out, "\\n", 2);
        else
            shoal_buf_append(out, p, 1);
    }
    shoal_buf_printf(out, "\n# TYPE %s %s\n", name, type);
}

void shoal_metrics_label_value(shoal_buf_t *out, const char *value)
{
    for (const char *p = value ? value : ""; *p; p++) {
        if (*p == '\\')
            shoal_buf_append(out, "\\\\", 2);
        else if (*p == '"')
            shoal_buf_append(out, "\\\"", 2);
        else if (*p == '\n')
            shoal_buf_append(out, "\\n", 2);
        else
            shoal_buf_append(out, p, 1);
    }
}

static void sample(shoal_buf_t *out, const char *name, uint64_t v)
{
    shoal_buf_printf(out, "%s %" PRIu64 "\n", name, v);
}

static void sample_label(shoal_buf_t *out, const char *name, const char *label, const char *value,
                         uint64_t v)
{
    shoal_buf_printf(out, "%s{%s=\"", name, label);
    shoal_metrics_label_value(out, value);
    shoal_buf_printf(out, "\"} %" PRIu64 "\n", v);
}

/* ---------------------------------------------------------------------------------------------
 * Built-in collectors: the node and its replicators
 */
typedef struct {
    const char *name, *type, *help;
    size_t off;
} field_t;

#define NODE(f) offsetof(shoal_system_stats_t, f)
static const field_t node_fields[] = {
    {"shoal_node_frames_received_total", "counter", "Frames received.", NODE(frames_in)},
    {"shoal_node_frames_sent_total", "counter", "Frames sent.", NODE(frames_out)},
    {"shoal_node_bytes_received_total", "counter", "Bytes received in frames.", NODE(bytes_in)},
    {"shoal_node_bytes_sent_total", "counter", "Bytes sent in frames.", NODE(bytes_out)},
    {"shoal_node_messages_received_total", "counter", "Messages handed to handlers.",
     NODE(messages_in)},
    {"shoal_node_messages_sent_total", "counter", "Messages accepted by send or reply.",
     NODE(messages_out)},
    {"shoal_node_message_gaps_total", "counter", "Messages missed in gaps of sequence numbers.",
     NODE(gaps)},
    {"shoal_node_messages_lost_unacked_total", "counter",
     "Messages never acknowledged when a connection died.", NODE(lost_unacked)},
    {"shoal_node_messages_duplicate_total", "counter", "Messages received twice and dropped.",
     NODE(duplicates)},
    {"shoal_node_handshakes_total", "counter", "Handshakes accepted or completed.",
     NODE(handshakes)},
    {"shoal_node_handshakes_refused_total", "counter", "Handshakes this node refused.",
     NODE(handshakes_refused)},
    {"shoal_node_peers", "gauge", "Outbound peers connected now.", NODE(peers)},
    {"shoal_node_auth_admitted_total", "counter", "CURVE connections the allow-list admitted.",
     NODE(auth_admitted)},
    {"shoal_node_auth_refused_total", "counter",
     "CURVE connections refused: key not on the allow-list, or not CURVE.", NODE(auth_refused)},
    {"shoal_node_handshakes_failed_total", "counter",
     "ZeroMQ handshakes that failed on the node's socket (refused keys, plain clients, garbage).",
     NODE(handshakes_failed)},
    {"shoal_node_handshakes_mismatched_total", "counter",
     "Handshakes on the node's socket that asked for another security mechanism (CURVE vs "
     "plain).",
     NODE(handshakes_mismatched)},
    {"shoal_node_handshakes_incomplete_total", "counter",
     "Connections to the node's socket closed or timed out before completing the ZeroMQ "
     "handshake.",
     NODE(handshakes_incomplete)},
    {"shoal_node_connections_refused_total", "counter",
     "Connections the node's socket closed at once: max_inbound_connections were open.",
     NODE(connections_refused)},
    {"shoal_node_connections_open", "gauge", "Connections open on the node's socket.",
     NODE(connections_open)},
    {"shoal_node_allow_list_keys", "gauge", "Keys on the CURVE allow-list (0 when plain).",
     NODE(allow_keys)},
    {"shoal_node_replies_in_parts_total", "counter",
     "Client replies over the frame limit sent in parts.", NODE(replies_in_parts)},
    {"shoal_node_reply_parts_sent_total", "counter", "Frames of client replies sent in parts.",
     NODE(reply_parts)},
};

typedef struct {
    const char *reason;
    size_t off;
} reason_t;

static const reason_t frame_drops[] = {
    {"oversized", NODE(dropped_oversized)},
    {"malformed", NODE(dropped_malformed)},
    {"unknown_kind", NODE(dropped_unknown_kind)},
    {"quarantined", NODE(dropped_quarantined)},
    {"not_handshaken", NODE(dropped_not_handshaken)},
    {"fault", NODE(dropped_fault)},
};
static const reason_t reply_drops[] = {
    {"client_gone", NODE(replies_dropped_gone)},
    {"queue_full", NODE(replies_dropped_full)},
    {"too_big", NODE(replies_too_big)},
};
static const reason_t send_failures[] = {
    {"queue_full", NODE(send_eagain)},
    {"not_connected", NODE(send_notconn)},
    {"wrong_incarnation", NODE(dropped_wrong_incarnation)},
};

#define REPL(f) offsetof(shoal_replicator_stats_t, f)
static const field_t repl_fields[] = {
    {"shoal_replicator_keys", "gauge", "Keys with a value.", REPL(keys)},
    {"shoal_replicator_tombstones", "gauge", "Deleted keys remembered as tombstones.",
     REPL(tombstones)},
    {"shoal_replicator_gets_total", "counter", "Get operations.", REPL(gets)},
    {"shoal_replicator_updates_total", "counter", "Update operations.", REPL(updates)},
    {"shoal_replicator_deletes_total", "counter", "Delete operations.", REPL(deletes)},
    {"shoal_replicator_deltas_sent_total", "counter", "Deltas sent.", REPL(deltas_sent)},
    {"shoal_replicator_deltas_received_total", "counter", "Deltas received.",
     REPL(deltas_received)},
    {"shoal_replicator_delta_gaps_total", "counter", "Deltas refused for a gap in their numbers.",
     REPL(delta_gaps)},
    {"shoal_replicator_full_state_sent_total", "counter", "Full states sent.",
     REPL(full_state_sent)},
    {"shoal_replicator_full_state_received_total", "counter", "Full states received.",
     REPL(full_state_received)},
    {"shoal_replicator_gossip_rounds_total", "counter", "Gossip (anti-entropy) rounds.",
     REPL(gossip_rounds)},
    {"shoal_replicator_status_sent_total", "counter", "Digest status messages sent.",
     REPL(status_sent)},
    {"shoal_replicator_digests_compared_total", "counter", "Key digests compared with a peer's.",
     REPL(digests_compared)},
    {"shoal_replicator_chunks_sent_total", "counter", "Chunks of large transfers sent.",
     REPL(chunks_sent)},
    {"shoal_replicator_chunks_received_total", "counter", "Chunks of large transfers received.",
     REPL(chunks_received)},
    {"shoal_replicator_write_timeouts_total", "counter", "Writes that timed out.",
     REPL(write_timeouts)},
    {"shoal_replicator_read_timeouts_total", "counter", "Reads that timed out.",
     REPL(read_timeouts)},
    {"shoal_replicator_no_quorum_total", "counter",
     "MAJORITY and ALL reads and writes refused: the node was not a full member of a cluster.",
     REPL(no_quorum)},
    {"shoal_replicator_store_failures_total", "counter", "Durable store failures.",
     REPL(store_failures)},
    {"shoal_replicator_store_retries_total", "counter",
     "Writes of durable keys retried after the store failed.", REPL(store_retries)},
    {"shoal_replicator_pruning_performed_total", "counter", "Prunings of removed nodes performed.",
     REPL(pruning_performed)},
    {"shoal_replicator_tombstones_collected_total", "counter", "Tombstones collected.",
     REPL(tombstones_collected)},
};
static const reason_t repl_drops[] = {
    {"malformed", REPL(dropped_malformed)},
    {"wrong_type", REPL(dropped_wrong_type)},
    {"collected_key", REPL(dropped_collected_key)},
    {"stale", REPL(dropped_stale)},
    {"refused", REPL(writes_refused)},
};

static uint64_t at(const void *stats, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)stats + off, sizeof v);
    return v;
}

static int by_role(const void *a, const void *b)
{
    return strcmp(shoal_replicator_role(*(shoal_replicator_t *const *)a),
                  shoal_replicator_role(*(shoal_replicator_t *const *)b));
}

int shoal_metrics_collect(shoal_system_t *sys, shoal_buf_t *out)
{
    if (!sys || !out)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(sys))
        return SHOAL_ETHREAD;

    shoal_system_stats_t ns;
    int rc = shoal_system_stats(sys, &ns);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < sizeof node_fields / sizeof *node_fields; i++) {
        shoal_metrics_family(out, node_fields[i].name, node_fields[i].type, node_fields[i].help);
        sample(out, node_fields[i].name, at(&ns, node_fields[i].off));
    }
    shoal_metrics_family(out, "shoal_node_frames_dropped_total", "counter",
                         "Frames dropped before delivery, by reason.");
    for (size_t i = 0; i < sizeof frame_drops / sizeof *frame_drops; i++)
        sample_label(out, "shoal_node_frames_dropped_total", "reason", frame_drops[i].reason,
                     at(&ns, frame_drops[i].off));
    shoal_metrics_family(out, "shoal_node_sends_failed_total", "counter",
                         "Sends refused, by reason.");
    for (size_t i = 0; i < sizeof send_failures / sizeof *send_failures; i++)
        sample_label(out, "shoal_node_sends_failed_total", "reason", send_failures[i].reason,
                     at(&ns, send_failures[i].off));
    shoal_metrics_family(out, "shoal_node_replies_dropped_total", "counter",
                         "Client replies that did not reach their client whole, by reason "
                         "(too_big: over the client's reply limit, answered SHOAL_ETOOBIG).");
    for (size_t i = 0; i < sizeof reply_drops / sizeof *reply_drops; i++)
        sample_label(out, "shoal_node_replies_dropped_total", "reason", reply_drops[i].reason,
                     at(&ns, reply_drops[i].off));

    /* by kind class: a sample per direction for every class that has seen traffic */
    uint64_t cmsgs[2][256], cbytes[2][256];
    if (shoal_system_class_stats(sys, cmsgs, cbytes) == 0) {
        static const char *const help[2] = {
            "Messages by direction and kind class (kind >> 8; 0x00xx replicator, 0x04xx "
            "membership, 0x05xx sharding, 0x80xx data clients, 0x81xx cluster clients).",
            "Payload bytes of messages by direction and kind class (see "
            "shoal_node_messages_total)."};
        static const char *const name[2] = {"shoal_node_messages_total",
                                            "shoal_node_message_bytes_total"};
        static const char *const dir[2] = {"received", "sent"};
        for (int f = 0; f < 2; f++) {
            shoal_metrics_family(out, name[f], "counter", help[f]);
            for (int d = 0; d < 2; d++)
                for (int c = 0; c < 256; c++)
                    if (cmsgs[0][c] || cmsgs[1][c])
                        shoal_buf_printf(out,
                                         "%s{direction=\"%s\",kind=\"0x%02xxx\"} %" PRIu64 "\n",
                                         name[f], dir[d], c, f == 0 ? cmsgs[d][c] : cbytes[d][c]);
        }
    }

    /* replicators: one family per counter, one sample per role (a family must be contiguous) */
    shoal_replicator_t **reps = NULL;
    size_t n = repl_all(sys, &reps);
    if (n == 0)
        return 0;
    qsort(reps, n, sizeof *reps, by_role);
    shoal_replicator_stats_t *rs = shoal_calloc(n, sizeof *rs);
    for (size_t j = 0; j < n; j++)
        shoal_replicator_stats(reps[j], &rs[j]);
    for (size_t i = 0; i < sizeof repl_fields / sizeof *repl_fields; i++) {
        shoal_metrics_family(out, repl_fields[i].name, repl_fields[i].type, repl_fields[i].help);
        for (size_t j = 0; j < n; j++)
            sample_label(out, repl_fields[i].name, "role", shoal_replicator_role(reps[j]),
                         at(&rs[j], repl_fields[i].off));
    }
    shoal_metrics_family(out, "shoal_replicator_messages_dropped_total", "counter",
                         "Replicator messages dropped, by reason.");
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < sizeof repl_drops / sizeof *repl_drops; i++) {
            shoal_buf_printf(out, "shoal_replicator_messages_dropped_total{role=\"");
            shoal_metrics_label_value(out, shoal_replicator_role(reps[j]));
            shoal_buf_printf(out, "\",reason=\"%s\"} %" PRIu64 "\n", repl_drops[i].reason,
                             at(&rs[j], repl_drops[i].off));
        }
    free(rs);
    free(reps);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The endpoint
 */
typedef struct {
    shoal_metrics_t *m;
    shoal_buf_t text;
} gather_t;

static int gather(shoal_system_t *sys, void *arg)
{
    gather_t *g = arg;
    int rc = shoal_metrics_collect(sys, &g->text);
    if (rc < 0)
        return rc;
    /* a copy, so a collector may add another without deadlocking on the list lock */
    pthread_mutex_lock(&g->m->lock);
    size_t n = g->m->n_collectors;
    collector_t *list = n ? shoal_memdup(g->m->collectors, n * sizeof *list) : NULL;
    pthread_mutex_unlock(&g->m->lock);
    for (size_t i = 0; i < n; i++)
        list[i].fn(sys, &g->text, list[i].arg);
    free(list);
    return 0;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *body,
                             size_t len, bool copy, const char *allow)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, (void *)body, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        if (!copy)
            free((void *)body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            status == MHD_HTTP_OK ? CONTENT_TYPE : "text/plain; charset=utf-8");
    if (allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    (void)upload_data;
    static int seen;
    shoal_metrics_t *m = cls;
    if (*con_cls == NULL) { /* headers only so far: answer once the body (if any) is read */
        *con_cls = &seen;
        return MHD_YES;
    }
    if (*upload_data_size) { /* a body nobody asked for: discard it */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        static const char msg[] = "method not allowed\n";
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, msg, sizeof msg - 1, true, "GET, HEAD");
    }
    if (!url || strcmp(url, "/metrics") != 0) {
        static const char msg[] = "not found: try /metrics\n";
        return reply(conn, MHD_HTTP_NOT_FOUND, msg, sizeof msg - 1, true, NULL);
    }
    gather_t g = {m, {0}};
    int rc = shoal_system_call(m->sys, gather, &g);
    if (rc < 0) {
        shoal_buf_free(&g.text);
        char msg[96];
        int len = snprintf(msg, sizeof msg, "node unavailable (%d)\n", rc);
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, msg, (size_t)len, true, NULL);
    }
    /* hand the buffer itself to MHD (freed with free(), which is what shoal_buf uses) */
    size_t len = g.text.len;
    char *body = (char *)g.text.data;
    if (!body)
        return reply(conn, MHD_HTTP_OK, "", 0, true, NULL);
    return reply(conn, MHD_HTTP_OK, body, len, false, NULL);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = 0;
    zsys_warning("metrics: %s", line);
}

shoal_metrics_t *shoal_metrics_start(shoal_system_t *sys, const char *bind_address, uint16_t port,
                                     int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    *err = 0;
    if (!sys) {
        *err = SHOAL_EINVAL;
        return NULL;
    }
    const char *addr = bind_address ? bind_address : "127.0.0.1";
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
    } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        flags |= MHD_USE_IPv6;
    } else {
        zsys_warning("metrics: '%s' is not an IP address", addr);
        *err = SHOAL_EINVAL;
        return NULL;
    }

    shoal_metrics_t *m = shoal_calloc(1, sizeof *m);
    m->sys = sys;
    pthread_mutex_init(&m->lock, NULL);
    /* connection limits keep a slow or hostile scraper from tying up the endpoint */
    m->daemon = MHD_start_daemon(flags, port, NULL, NULL, on_request, m,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
                                 MHD_OPTION_END);
    if (!m->daemon) {
        zsys_warning("metrics: cannot listen on %s port %u", addr, (unsigned)port);
        pthread_mutex_destroy(&m->lock);
        free(m);
        *err = SHOAL_EIO;
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info ? info->port : port;
    return m;
}

uint16_t shoal_metrics_port(const shoal_metrics_t *m)
{
    return m ? m->port : 0;
}

int shoal_metrics_add(shoal_metrics_t *m, shoal_metrics_fn *fn, void *arg)
{
    if (!m || !fn)
        return SHOAL_EINVAL;
    pthread_mutex_lock(&m->lock);
    SHOAL_GROW(m->collectors, m->cap_collectors, m->n_collectors + 1);
    m->collectors[m->n_collectors].fn = fn;
    m->collectors[m->n_collectors].arg = arg;
    m->n_collectors++;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

void shoal_metrics_stop(shoal_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_metrics_t *m = *self_p;
    *self_p = NULL;
    MHD_stop_daemon(m->daemon);
    pthread_mutex_destroy(&m->lock);
    free(m->collectors);
    free(m);
}
