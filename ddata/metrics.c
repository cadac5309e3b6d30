/*  metrics.c — the management endpoint of a node: /metrics, the health probes, the replicators,
    and the routes upper layers provide (see ddata.h, METRICS AND THE MANAGEMENT ENDPOINT).

    libmicrohttpd gives each connection a thread. A request is copied into a JOB (method, path,
    body, query arguments) that the node thread runs through shoal_system_post while the
    connection's thread waits for it with a deadline; the job is shared by the two threads
    (a reference each), so a node that answers late writes into the job, never into a stack that
    is gone, and the last one out frees it. Whatever a late job may still touch (the endpoint, the
    handlers' arguments) outlives it: stop and withdraw post a barrier behind it before freeing.
*/
#include "replicator_internal.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <errno.h>
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
#include <time.h>
#include <dirent.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#define JSON_TYPE "application/json"

/* Why these bounds: the POST routes take one word ("leave", "down"), so 4 KiB is generous; a
   node thread busy for 5 s is broken for an operator's purposes (its heartbeats stop sooner);
   a liveness probe must answer well inside a kubelet's default 1 s timeout... of its own, so the
   node gets 1 s, and the probe's own timeout should be set above it (docs/operations.md). */
#define BODY_MAX         4096
#define PARAMS_MAX       16
#define CALL_TIMEOUT_MS  5000
#define ALIVE_TIMEOUT_MS 1000

/* Why these caps (docs/security.md): a whole request takes a well-behaved client milliseconds,
   so 5 s is generous and bounds what a slow sender holds; 64 connections (threads) are far more
   than probes, Prometheus and an operator need at once, and 16 from one address leave room for
   the others. MHD's own limit is higher so that connections being closed to make room do not
   shut the door on the one they make room for. */
#define REQUEST_TIMEOUT_MS 5000
#define MAX_CONNECTIONS    64
#define MAX_PER_ADDRESS    16
#define MHD_SLACK          32
#define REAP_EVERY_MS      200

enum { REFUSE_HOST, REFUSE_ORIGIN, REFUSE_TYPE, REFUSE_TOKEN, REFUSE_N };
static const char *const refuse_names[REFUSE_N] = {"host", "origin", "content_type", "token"};
enum { CLOSE_DEADLINE, CLOSE_ADDRESS_CAP, CLOSE_CAP, CLOSE_N };
static const char *const close_names[CLOSE_N] = {"deadline", "address_cap", "cap"};

/* A connection as the caps see it. */
typedef struct crec {
    struct crec *prev, *next;
    int fd; /* a dup of the connection's socket: shutdown() through it can never reach a
               descriptor MHD closed and the process reused */
    struct sockaddr_storage peer, local;
    int64_t since_ms; /* the start of the request it is sending (accept, or the previous end) */
    bool busy;        /* whole, and in a handler: the handler's own deadline applies */
    bool closing;     /* shut down by the caps; gone once MHD notices */
} crec_t;

typedef struct {
    shoal_metrics_fn *fn;
    void *arg;
} collector_t;

typedef struct {
    char *path; /* exact, or a prefix when it ends in '/' */
    size_t len;
    unsigned flags;
    uint32_t timeout_ms;
    shoal_http_fn *fn;
    void *arg;
} route_t;

typedef struct {
    char *name;
    shoal_ready_fn *fn;
    void *arg;
} check_t;

struct shoal_metrics {
    shoal_system_t *sys;
    struct MHD_Daemon *daemon;
    uint16_t port;
    shoal_http_writes_t writes;
    /* the lists: added from any thread, read by requests and on the node thread */
    pthread_mutex_t lock;
    collector_t *collectors;
    size_t n_collectors, cap_collectors;
    route_t *routes;
    size_t n_routes, cap_routes;
    check_t *checks;
    size_t n_checks, cap_checks;
    /* held (read) by each request while it runs a handler; withdraw takes it (write) to know that
       no request still uses what it took off the lists */
    pthread_rwlock_t use;
    struct shoal_metrics *next; /* the live endpoints (registry below) */
    /* hardening (ddata.h, HARDENING): fixed at start */
    char *hosts[SHOAL_HTTP_HOSTS_MAX];
    size_t n_hosts;
    char *token; /* NULL: none; read under lock (shoal_http_reload swaps it) */
    bool token_for_reads;
    bool tls;
    /* for shoal_http_reload: the files named at start, the PEMs in force, the daemon's flags */
    char *token_file, *tls_cert_file, *tls_key_file, *cert, *key;
    unsigned mhd_flags;
    uint32_t request_timeout_ms, max_connections, max_per_address;
    /* the connections, oldest first, and the counters: guarded by cmu (taken by the accepting
       thread, the connections' threads, the reaper and /metrics; never while holding lock) */
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    struct crec *oldest, *newest;
    bool stopping;
    pthread_t reaper;
    bool reaper_started;
    uint64_t refused[REFUSE_N];
    uint64_t closed[CLOSE_N];
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
    {"oversized", NODE(dropped_oversized)},           {"malformed", NODE(dropped_malformed)},
    {"unknown_kind", NODE(dropped_unknown_kind)},     {"quarantined", NODE(dropped_quarantined)},
    {"not_handshaken", NODE(dropped_not_handshaken)}, {"fault", NODE(dropped_fault)},
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
    {"shoal_replicator_catch_ups_total", "counter",
     "Times the replica caught up with its peers after its node became a full member.",
     REPL(catch_ups)},
    {"shoal_replicator_reads_deferred_total", "counter",
     "Peers' reads held until this replica caught up.", REPL(reads_deferred)},
    {"shoal_replicator_reads_deferred_dropped_total", "counter",
     "Peers' reads dropped while catching up (too many held).", REPL(reads_deferred_dropped)},
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

/* ---------------------------------------------------------------------------------------------
 * What every Prometheus target has: process_* (the names client libraries use, read from /proc as
 * they do) and the build. A reading that fails leaves its family out rather than reporting 0.
 */
static bool proc_stat(double *cpu_s, double *start_s, uint64_t *vsize, uint64_t *rss)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    /* the command name (field 2) may hold spaces and ')': the fields start after the last ')' */
    const char *p = strrchr(buf, ')');
    if (!p)
        return false;
    unsigned long long utime = 0, stime = 0, start = 0, vs = 0;
    long long pages = 0;
    /* fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14)
       stime(15) cutime cstime priority nice threads itrealvalue starttime(22) vsize(23) rss(24) */
    if (sscanf(p + 2,
               "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
               "%llu %llu %lld",
               &utime, &stime, &start, &vs, &pages) != 5)
        return false;
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (tick <= 0 || page <= 0)
        return false;
    *cpu_s = (double)(utime + stime) / (double)tick;
    *vsize = vs;
    *rss = pages > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    /* starttime counts ticks since boot: the boot time (btime) makes it an epoch instant */
    *start_s = -1;
    FILE *f = fopen("/proc/stat", "re");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long btime;
            if (sscanf(line, "btime %llu", &btime) == 1) {
                *start_s = (double)btime + (double)start / (double)tick;
                break;
            }
        }
        fclose(f);
    }
    return true;
}

static void process_metrics(shoal_buf_t *out)
{
    double cpu, start;
    uint64_t vsize, rss;
    if (proc_stat(&cpu, &start, &vsize, &rss)) {
        shoal_metrics_family(out, "process_cpu_seconds_total", "counter",
                             "Total user and system CPU time spent in seconds.");
        shoal_buf_printf(out, "process_cpu_seconds_total %.2f\n", cpu);
        shoal_metrics_family(out, "process_resident_memory_bytes", "gauge",
                             "Resident memory size in bytes.");
        shoal_buf_printf(out, "process_resident_memory_bytes %" PRIu64 "\n", rss);
        shoal_metrics_family(out, "process_virtual_memory_bytes", "gauge",
                             "Virtual memory size in bytes.");
        shoal_buf_printf(out, "process_virtual_memory_bytes %" PRIu64 "\n", vsize);
        if (start >= 0) {
            shoal_metrics_family(out, "process_start_time_seconds", "gauge",
                                 "Start time of the process since unix epoch in seconds.");
            shoal_buf_printf(out, "process_start_time_seconds %.2f\n", start);
        }
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        uint64_t fds = 0;
        for (struct dirent *e = readdir(d); e; e = readdir(d))
            fds += e->d_name[0] != '.';
        closedir(d);
        shoal_metrics_family(out, "process_open_fds", "gauge", "Number of open file descriptors.");
        /* less the one opendir held */
        shoal_buf_printf(out, "process_open_fds %" PRIu64 "\n", fds ? fds - 1 : 0);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        shoal_metrics_family(out, "process_max_fds", "gauge",
                             "Maximum number of open file descriptors.");
        if (rl.rlim_cur == RLIM_INFINITY)
            shoal_buf_printf(out, "process_max_fds +Inf\n");
        else
            shoal_buf_printf(out, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }
}

static void build_metrics(shoal_buf_t *out)
{
    shoal_metrics_family(out, "shoal_build_info", "gauge",
                         "Always 1: the library's version and the protocol versions this build "
                         "speaks (docs/protocol-versions.md).");
    shoal_buf_printf(out,
                     "shoal_build_info{version=\"%s\",protocol_min=\"%u\",protocol_max=\"%u\"} 1\n",
                     SHOAL_VERSION, (unsigned)SHOAL_PROTOCOL_MIN, (unsigned)SHOAL_PROTOCOL_MAX);
}

int shoal_metrics_collect(shoal_system_t *sys, shoal_buf_t *out)
{
    if (!sys || !out)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(sys))
        return shoal_wrong_thread(__func__, "shoal_system_call");

    shoal_system_stats_t ns;
    int rc = shoal_system_stats(sys, &ns);
    if (rc < 0)
        return rc;
    process_metrics(out);
    build_metrics(out);
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
    /* latency histograms (issue 40; ddata/histogram.h): a label set per role and consistency
       level that has seen an operation */
    static const char *const levels[4] = {"local", "from_n", "majority", "all"};
    static const char *const lat_name[2] = {"shoal_replicator_read_seconds",
                                            "shoal_replicator_write_seconds"};
    static const char *const lat_help[2] = {
        "Reads (Get) from the start of their round to completion, timeouts included, by "
        "consistency level.",
        "Writes (Update, Delete) from the start of their round (after the local update and, for "
        "a durable key, the local store) to completion, timeouts included, by consistency level."};
    shoal_buf_t labels = {0};
    for (int w = 0; w < 2; w++) {
        shoal_metrics_family(out, lat_name[w], "histogram", lat_help[w]);
        for (size_t j = 0; j < n; j++)
            for (int l = 0; l < 4; l++) {
                const shoal_hist_t *h = w ? &reps[j]->lat->write[l] : &reps[j]->lat->read[l];
                if (!h->count)
                    continue;
                shoal_buf_reset(&labels);
                shoal_buf_printf(&labels, "role=\"");
                shoal_metrics_label_value(&labels, shoal_replicator_role(reps[j]));
                shoal_buf_printf(&labels, "\",consistency=\"%s\"", levels[l]);
                shoal_hist_prometheus(out, lat_name[w], shoal_buf_cstr(&labels), h);
            }
    }
    shoal_buf_free(&labels);
    repl_limits_metrics(reps, n, out); /* LIMITS (ddata.h) */
    /* one figure for the node, not one per peer or role: the alert asks whether any member's
       clock is off, and a sample per peer would grow with the cluster */
    int64_t skew_ms = 0;
    if (!repl_clock_skew_ms(reps, n, &skew_ms))
        skew_ms = 0;
    shoal_metrics_family(out, "shoal_node_clock_skew_seconds", "gauge",
                         "The largest wall-clock offset between this node and a peer it had "
                         "replicator pushes from in the last 30 to 60 s, estimated from the "
                         "pushes' send times (off by at most the quickest one-way delay); 0 "
                         "when none.");
    shoal_buf_printf(out, "shoal_node_clock_skew_seconds %.3f\n", (double)skew_ms / 1000.0);
    free(rs);
    free(reps);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Providers and live endpoints: process-wide, keyed by node, so that an upper layer started
 * before or after the endpoint lands on it either way. Lock order: reg_lock, then an endpoint's
 * lock.
 */
typedef struct {
    shoal_system_t *sys;
    shoal_http_provider_fn *fn;
    void *arg;
} provider_t;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static provider_t *providers;
static size_t n_providers, cap_providers;
static shoal_metrics_t *live;

static int barrier_fn(shoal_system_t *sys, void *arg)
{
    (void)sys;
    (void)arg;
    return 0;
}

/* Calls and posts run in order: once this returns, every job posted before it has run (or the node
   has stopped, and they never will). */
static void node_barrier(shoal_system_t *sys)
{
    if (!shoal_system_on_thread(sys))
        (void)shoal_system_call(sys, barrier_fn, NULL);
}

int shoal_http_provide(shoal_system_t *sys, shoal_http_provider_fn *fn, void *arg)
{
    if (!sys || !fn)
        return SHOAL_EINVAL;
    pthread_mutex_lock(&reg_lock);
    SHOAL_GROW(providers, cap_providers, n_providers + 1);
    providers[n_providers++] = (provider_t){sys, fn, arg};
    for (shoal_metrics_t *m = live; m; m = m->next)
        if (m->sys == sys)
            fn(m, arg);
    pthread_mutex_unlock(&reg_lock);
    return 0;
}

void shoal_http_withdraw(shoal_system_t *sys, void *arg)
{
    if (!sys)
        return;
    pthread_mutex_lock(&reg_lock);
    size_t k = 0;
    for (size_t i = 0; i < n_providers; i++)
        if (providers[i].sys != sys || providers[i].arg != arg)
            providers[k++] = providers[i];
    n_providers = k;
    bool any = false;
    for (shoal_metrics_t *m = live; m; m = m->next) {
        if (m->sys != sys)
            continue;
        any = true;
        pthread_mutex_lock(&m->lock);
        k = 0;
        for (size_t i = 0; i < m->n_routes; i++)
            if (m->routes[i].arg == arg)
                free(m->routes[i].path);
            else
                m->routes[k++] = m->routes[i];
        m->n_routes = k;
        k = 0;
        for (size_t i = 0; i < m->n_checks; i++)
            if (m->checks[i].arg == arg)
                free(m->checks[i].name);
            else
                m->checks[k++] = m->checks[i];
        m->n_checks = k;
        k = 0;
        for (size_t i = 0; i < m->n_collectors; i++)
            if (m->collectors[i].arg != arg)
                m->collectors[k++] = m->collectors[i];
        m->n_collectors = k;
        pthread_mutex_unlock(&m->lock);
        /* requests that found a route before it went: wait for them to finish */
        pthread_rwlock_wrlock(&m->use);
        pthread_rwlock_unlock(&m->use);
    }
    pthread_mutex_unlock(&reg_lock);
    if (any)
        node_barrier(sys); /* and for what they left to the node thread */
}

/* ---------------------------------------------------------------------------------------------
 * Jobs: a request handed to the node thread, with a deadline on the waiting side
 */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool done;
    shoal_metrics_t *m;
    shoal_http_fn *fn;
    void *arg;
    shoal_http_request_t req;
    char *method, *path, *body;
    size_t n_params;
    char *names[PARAMS_MAX], *values[PARAMS_MAX];
    shoal_http_reply_t rep;
} job_t;

static void job_release(job_t *j)
{
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last)
        return;
    free(j->method);
    free(j->path);
    free(j->body);
    for (size_t i = 0; i < j->n_params; i++) {
        free(j->names[i]);
        free(j->values[i]);
    }
    shoal_buf_free(&j->rep.body);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static int job_run(shoal_system_t *sys, void *arg)
{
    job_t *j = arg;
    j->fn(sys, &j->req, &j->rep, j->arg);
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_release(j);
    return 0;
}

/* Runs the job on the node thread and waits up to timeout_ms: 0, SHOAL_ETIMEOUT, or the post's
   error (SHOAL_ESTOPPED, SHOAL_EBUSY). The reply is in j->rep on 0. */
static int job_call(job_t *j, uint32_t timeout_ms)
{
    j->refs = 2;
    int rc = shoal_system_post(j->m->sys, job_run, j);
    if (rc < 0) {
        j->refs = 1;
        return rc;
    }
    struct timespec until = shoal_deadline_in(timeout_ms);
    pthread_mutex_lock(&j->mu);
    int w = 0;
    while (!j->done && w != ETIMEDOUT)
        w = pthread_cond_timedwait(&j->cv, &j->mu, &until);
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    return done ? 0 : SHOAL_ETIMEOUT;
}

/* ---------------------------------------------------------------------------------------------
 * Replies
 */
static void __attribute__((format(printf, 3, 0)))
verror(shoal_http_reply_t *rep, unsigned status, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    rep->status = status;
    rep->content_type = JSON_TYPE;
    shoal_buf_reset(&rep->body);
    shoal_buf_printf(&rep->body, "{\"error\":");
    shoal_buf_json_string(&rep->body, msg);
    shoal_buf_printf(&rep->body, "}\n");
}

void shoal_http_error(shoal_http_reply_t *rep, unsigned status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(rep, status, fmt, ap);
    va_end(ap);
}

const char *shoal_http_param(const shoal_http_request_t *req, const char *name)
{
    if (!req || !name)
        return NULL;
    for (size_t i = 0; i < req->n_params; i++)
        if (strcmp(req->param_names[i], name) == 0)
            return req->param_values[i];
    return NULL;
}

static enum MHD_Result send_reply(struct MHD_Connection *conn, shoal_http_reply_t *rep,
                                  const char *allow)
{
    unsigned status = rep->status ? rep->status : MHD_HTTP_OK;
    /* the buffer goes to MHD as it is (freed with free(), which is what shoal_buf uses) */
    size_t len = rep->body.len;
    void *body = rep->body.data;
    rep->body = (shoal_buf_t){0};
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, body ? body : (void *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            rep->content_type ? rep->content_type : JSON_TYPE);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *allow,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *allow,
                                  const char *fmt, ...)
{
    shoal_http_reply_t rep = {0};
    va_list ap;
    va_start(ap, fmt);
    verror(&rep, status, fmt, ap);
    va_end(ap);
    return send_reply(conn, &rep, allow);
}

/* ---------------------------------------------------------------------------------------------
 * Built-in routes (node thread)
 */
/* The endpoint's own counters: what the hardening refused and closed (ddata.h, HARDENING). */
static void endpoint_metrics(shoal_metrics_t *m, shoal_buf_t *out)
{
    pthread_mutex_lock(&m->cmu);
    uint64_t refused[REFUSE_N], closed[CLOSE_N], open = 0;
    memcpy(refused, m->refused, sizeof refused);
    memcpy(closed, m->closed, sizeof closed);
    for (const struct crec *r = m->oldest; r; r = r->next)
        open++;
    pthread_mutex_unlock(&m->cmu);
    shoal_metrics_family(out, "shoal_http_requests_refused_total", "counter",
                         "Requests to the management endpoint refused before any route, by "
                         "reason (host: a Host not its own; origin: a POST from another origin; "
                         "content_type: a POST not application/json; token: no or a wrong bearer "
                         "token).");
    for (int i = 0; i < REFUSE_N; i++)
        sample_label(out, "shoal_http_requests_refused_total", "reason", refuse_names[i],
                     refused[i]);
    shoal_metrics_family(out, "shoal_http_connections_closed_total", "counter",
                         "Connections to the management endpoint closed before their request was "
                         "whole, by reason (deadline: the whole-request deadline passed; "
                         "address_cap, cap: room made for a newer connection).");
    for (int i = 0; i < CLOSE_N; i++)
        sample_label(out, "shoal_http_connections_closed_total", "reason", close_names[i],
                     closed[i]);
    shoal_metrics_family(out, "shoal_http_connections_open", "gauge",
                         "Connections open on the management endpoint.");
    sample(out, "shoal_http_connections_open", open);
}

/* The whole of /metrics: the built-in part, then the collectors, then the endpoint's own (m NULL:
   a node without an endpoint, the built-in part alone). Node thread. */
static int exposition(shoal_metrics_t *m, shoal_system_t *sys, shoal_buf_t *out)
{
    int rc = shoal_metrics_collect(sys, out);
    if (rc < 0 || !m)
        return rc;
    /* a copy, so a collector may add another without deadlocking on the list lock */
    pthread_mutex_lock(&m->lock);
    size_t n = m->n_collectors;
    collector_t *list = n ? shoal_memdup(m->collectors, n * sizeof *list) : NULL;
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; i < n; i++)
        list[i].fn(sys, out, list[i].arg);
    free(list);
    endpoint_metrics(m, out);
    return 0;
}

static void route_metrics(shoal_system_t *sys, const shoal_http_request_t *req,
                          shoal_http_reply_t *rep, void *arg)
{
    (void)req;
    int rc = exposition(arg, sys, &rep->body);
    if (rc < 0) {
        shoal_buf_reset(&rep->body);
        shoal_http_error(rep, MHD_HTTP_SERVICE_UNAVAILABLE, "node unavailable: %s",
                         shoal_strerror(rc));
        return;
    }
    rep->content_type = CONTENT_TYPE;
}

/* The client's metrics request (ddata-dump --metrics) gets the text /metrics would serve: the
   replicator's client handler reaches it through repl_exposition_hook (it sits below this file).
   The endpoint found stays valid while this runs: shoal_metrics_stop waits for the node thread
   (node_barrier) before freeing it, and this runs on the node thread. */
static int node_exposition(shoal_system_t *sys, shoal_buf_t *out)
{
    pthread_mutex_lock(&reg_lock);
    shoal_metrics_t *m = live;
    while (m && m->sys != sys)
        m = m->next;
    pthread_mutex_unlock(&reg_lock);
    return exposition(m, sys, out);
}

__attribute__((constructor)) static void install_exposition_hook(void)
{
    repl_exposition_hook = node_exposition;
}

/* GET /loglevel: the process's level and format; POST /loglevel {"level":"debug"} sets the level
   (of the whole process: every node in it logs through one logger). */
static void route_loglevel(shoal_system_t *sys, const shoal_http_request_t *req,
                           shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    (void)arg;
    rep->content_type = JSON_TYPE;
    if (strcmp(req->method, MHD_HTTP_METHOD_POST) == 0) {
        /* {"level":"debug"} or a bare "debug": the first string after "level", else the body's */
        const char *p = strstr(req->body, "\"level\"");
        p = p ? strchr(p + 7, '"') : strchr(req->body, '"');
        char word[16] = "";
        const char *end = p ? strchr(p + 1, '"') : NULL;
        if (end && (size_t)(end - p - 1) < sizeof word)
            memcpy(word, p + 1, (size_t)(end - p - 1)), word[end - p - 1] = 0;
        shoal_log_level_t l;
        if (!*word || shoal_log_level_parse(word, &l) != 0) {
            shoal_http_error(rep, MHD_HTTP_BAD_REQUEST,
                             "body: {\"level\":\"error|warning|info|debug\"}");
            return;
        }
        shoal_log_level_t was = shoal_log_get_level();
        shoal_log_set_level(l);
        shoal_log(was > l ? was : l, "log level %s -> %s (POST /loglevel)",
                  shoal_log_level_name(was), shoal_log_level_name(l));
    }
    shoal_buf_printf(&rep->body, "{\"level\":\"%s\",\"format\":\"%s\"}\n",
                     shoal_log_level_name(shoal_log_get_level()),
                     shoal_log_get_format() == SHOAL_LOG_JSON ? "json" : "text");
}

static void route_alive(shoal_system_t *sys, const shoal_http_request_t *req,
                        shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    (void)req;
    (void)arg;
    /* answering at all is the point: the node thread took the job within the deadline */
    shoal_buf_printf(&rep->body, "{\"alive\":true}\n");
}

/* The last readiness check, built in: every replicator on the node would take a MAJORITY read or
   write now, as far as members go (quorum_refused in replicator.c asks the same without counting).
   A node Up in a cluster whose kept membership is not back (restarted alone with --new-cluster,
   or the first back after a full restart) passes the cluster check and fails this one: readiness
   is "this node serves MAJORITY" (docs/operations.md). */
bool http_majority_served(shoal_system_t *sys, shoal_buf_t *reason)
{
    shoal_replicator_t **reps = NULL;
    size_t n = repl_all(sys, &reps);
    shoal_consistency_t maj = {.level = SHOAL_MAJORITY};
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        shoal_replicator_t *r = reps[i];
        const char *role = shoal_replicator_role(r);
        int need = repl_voters_needed(r, &maj);
        size_t have = repl_voter_peers(r);
        if (r->gated && !r->quorum_ok) {
            shoal_buf_printf(
                reason, "replicator '%s' refuses MAJORITY: this node is not a full member", role);
            ok = false;
        } else if (need > 0 && have < (size_t)need) {
            shoal_buf_printf(reason,
                             "replicator '%s' refuses MAJORITY: %zu of the %zu members of the kept "
                             "membership are here, %zu needed",
                             role, have + (r->self_votes ? 1 : 0), r->n_voters,
                             r->n_voters / 2 + 1);
            ok = false;
        }
    }
    free(reps);
    return ok;
}

static void route_ready(shoal_system_t *sys, const shoal_http_request_t *req,
                        shoal_http_reply_t *rep, void *arg)
{
    (void)req;
    shoal_metrics_t *m = arg;
    pthread_mutex_lock(&m->lock);
    size_t n = m->n_checks;
    check_t *list = n ? shoal_memdup(m->checks, n * sizeof *list) : NULL;
    for (size_t i = 0; i < n; i++)
        list[i].name = shoal_memdup(list[i].name, strlen(list[i].name) + 1);
    pthread_mutex_unlock(&m->lock);
    shoal_buf_t reason = {0};
    size_t failed = n;
    for (size_t i = 0; i < n && failed == n; i++)
        if (!list[i].fn(sys, &reason, list[i].arg))
            failed = i;
    bool majority = failed < n || http_majority_served(sys, &reason);
    shoal_buf_t *out = &rep->body;
    if (failed < n || !majority) {
        rep->status = MHD_HTTP_SERVICE_UNAVAILABLE;
        shoal_buf_printf(out, "{\"ready\":false,\"check\":");
        shoal_buf_json_string(out, failed < n ? list[failed].name : "majority");
        shoal_buf_printf(out, ",\"reason\":");
        shoal_buf_json_string(out, reason.len ? shoal_buf_cstr(&reason) : "not ready");
        shoal_buf_printf(out, "}\n");
    } else {
        shoal_buf_printf(out, "{\"ready\":true,\"checks\":[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                shoal_buf_append(out, ",", 1);
            shoal_buf_json_string(out, list[i].name);
        }
        shoal_buf_printf(out, "%s\"majority\"]}\n", n ? "," : "");
    }
    for (size_t i = 0; i < n; i++)
        free(list[i].name);
    free(list);
    shoal_buf_free(&reason);
}

typedef struct {
    shoal_replicator_t *rep;
    shoal_buf_t *out;
    size_t n;
} keys_ctx_t;

static int key_json(const char *key, const shoal_type_t *type, void *arg)
{
    keys_ctx_t *x = arg;
    shoal_buf_t *out = x->out;
    shoal_buf_printf(out, "%s{\"key\":", x->n++ ? "," : "");
    shoal_buf_json_string(out, key);
    shoal_buf_printf(out, ",\"type\":");
    shoal_buf_json_string(out, type ? type->name : "");
    const shoal_crdt_t *v = shoal_replicator_peek(x->rep, key);
    uint8_t d[16];
    if (v && shoal_crdt_digest(v, d) == 0) {
        shoal_buf_printf(out, ",\"digest\":\"");
        for (int i = 0; i < 16; i++)
            shoal_buf_printf(out, "%02x", d[i]);
        shoal_buf_printf(out, "\"");
    }
    shoal_buf_printf(out, "}");
    return 0;
}

static void route_replicators(shoal_system_t *sys, const shoal_http_request_t *req,
                              shoal_http_reply_t *rep, void *arg)
{
    (void)req;
    (void)arg;
    shoal_replicator_t **reps = NULL;
    size_t n = repl_all(sys, &reps);
    if (n)
        qsort(reps, n, sizeof *reps, by_role);
    shoal_buf_t *out = &rep->body;
    shoal_buf_printf(out, "{\"node\":");
    shoal_buf_json_string(out, shoal_node_id(shoal_system_self(sys)));
    shoal_buf_printf(out, ",\"replicators\":[");
    for (size_t i = 0; i < n; i++) {
        shoal_replicator_stats_t st;
        shoal_replicator_stats(reps[i], &st);
        shoal_buf_printf(out, "%s{\"role\":", i ? "," : "");
        shoal_buf_json_string(out, shoal_replicator_role(reps[i]));
        shoal_buf_printf(out, ",\"replicas\":%zu,\"tombstones\":%" PRIu64 ",\"keys\":[",
                         shoal_replicator_replica_count(reps[i]), st.tombstones);
        keys_ctx_t x = {reps[i], out, 0};
        shoal_replicator_keys(reps[i], key_json, &x);
        shoal_buf_printf(out, "]}");
    }
    shoal_buf_printf(out, "]}\n");
    free(reps);
}

/* ---------------------------------------------------------------------------------------------
 * Connections: the whole-request deadline and the caps (ddata.h, HARDENING)
 *
 * libmicrohttpd's timeout is an idle timeout (every byte restarts it) and 0.9.75 has no deadline
 * for a whole request, so Shoal keeps its own: each connection is recorded when it is accepted,
 * and a connection that is still sending its request past the deadline, or the oldest such one
 * when a cap is reached, is shut down through a duplicate of its descriptor; its thread sees the
 * end of the stream and MHD closes it. A connection whose request is whole is not touched while
 * its handler runs (the handler's wait is bounded), nor one answering (MHD's idle timeout covers a
 * client that stops reading; the deadline starts again once the answer is queued).
 */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return false;
}

/* cmu held */
static void close_conn(shoal_metrics_t *m, crec_t *r, int why)
{
    if (r->closing)
        return;
    r->closing = true;
    m->closed[why]++;
    shutdown(r->fd, SHUT_RDWR);
}

/* The oldest connection still sending its request (from `peer` when not NULL), or NULL. cmu held */
static crec_t *oldest_sending(shoal_metrics_t *m, const struct sockaddr_storage *peer)
{
    for (crec_t *r = m->oldest; r; r = r->next)
        if (!r->busy && !r->closing && (!peer || same_address(&r->peer, peer)))
            return r;
    return NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    shoal_metrics_t *m = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        crec_t *r = *socket_context;
        if (!r)
            return;
        pthread_mutex_lock(&m->cmu);
        if (r->prev)
            r->prev->next = r->next;
        else
            m->oldest = r->next;
        if (r->next)
            r->next->prev = r->prev;
        else
            m->newest = r->prev;
        pthread_mutex_unlock(&m->cmu);
        if (r->fd >= 0)
            close(r->fd);
        free(r);
        *socket_context = NULL;
        return;
    }
    if (toe != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    crec_t *r = shoal_calloc(1, sizeof *r);
    r->fd = -1;
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (fi)
        r->fd = fcntl(fi->connect_fd, F_DUPFD_CLOEXEC, 0);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ai && ai->client_addr)
        memcpy(&r->peer, ai->client_addr,
               ai->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                      : sizeof(struct sockaddr_in));
    socklen_t len = sizeof r->local;
    if (r->fd < 0 || getsockname(r->fd, (struct sockaddr *)&r->local, &len) != 0)
        memset(&r->local, 0, sizeof r->local);
    r->since_ms = mono_ms();
    *socket_context = r;

    pthread_mutex_lock(&m->cmu);
    r->prev = m->newest;
    if (m->newest)
        m->newest->next = r;
    else
        m->oldest = r;
    m->newest = r;
    size_t open = 0, here = 0;
    for (crec_t *o = m->oldest; o; o = o->next)
        if (!o->closing) {
            open++;
            here += same_address(&o->peer, &r->peer);
        }
    /* the oldest incomplete request makes room: the newcomer itself when every other one from
       there is whole (a probe's request is whole as soon as it arrives) */
    if (here > m->max_per_address) {
        crec_t *v = oldest_sending(m, &r->peer);
        close_conn(m, v ? v : r, CLOSE_ADDRESS_CAP);
    } else if (open > m->max_connections) {
        crec_t *v = oldest_sending(m, NULL);
        close_conn(m, v ? v : r, CLOSE_CAP);
    }
    if (r->fd < 0 && !r->closing) { /* cannot watch it: do not keep it */
        r->closing = true;
        m->closed[CLOSE_CAP]++;
        pthread_mutex_unlock(&m->cmu);
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
        return;
    }
    pthread_mutex_unlock(&m->cmu);
}

static void *reap(void *arg)
{
    shoal_metrics_t *m = arg;
    pthread_mutex_lock(&m->cmu);
    while (!m->stopping) {
        int64_t now = mono_ms();
        for (crec_t *r = m->oldest; r; r = r->next)
            if (!r->busy && !r->closing && now - r->since_ms > (int64_t)m->request_timeout_ms)
                close_conn(m, r, CLOSE_DEADLINE);
        struct timespec until = shoal_deadline_in(REAP_EVERY_MS);
        pthread_cond_timedwait(&m->ccv, &m->cmu, &until);
    }
    pthread_mutex_unlock(&m->cmu);
    return NULL;
}

static crec_t *rec_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* busy: the request is whole and a handler runs; not busy: the clock starts again */
static void set_busy(shoal_metrics_t *m, struct MHD_Connection *conn, bool busy)
{
    crec_t *r = rec_of(conn);
    if (!r)
        return;
    pthread_mutex_lock(&m->cmu);
    r->busy = busy;
    r->since_ms = mono_ms();
    pthread_mutex_unlock(&m->cmu);
}

static void refuse_count(shoal_metrics_t *m, int why)
{
    pthread_mutex_lock(&m->cmu);
    m->refused[why]++;
    pthread_mutex_unlock(&m->cmu);
}

/* ---------------------------------------------------------------------------------------------
 * Who may ask: Host, Origin, content type, token (ddata.h, HARDENING)
 */
/* The host part of an authority ("name:port", "[v6]:port", "1.2.3.4"), into out; false when it
   does not parse. */
static bool host_part(const char *auth, char *out, size_t cap)
{
    const char *end;
    if (auth[0] == '[') {
        end = strchr(auth, ']');
        if (!end || (end[1] && end[1] != ':'))
            return false;
        auth++;
    } else {
        end = strchr(auth, ':');
        if (end && strchr(end + 1, ':'))
            return false; /* a bare v6 literal is not a valid Host */
        if (!end)
            end = auth + strlen(auth);
    }
    size_t n = (size_t)(end - auth);
    if (n == 0 || n >= cap)
        return false;
    memcpy(out, auth, n);
    out[n] = 0;
    if (n > 1 && out[n - 1] == '.') /* "localhost." is localhost */
        out[n - 1] = 0;
    return true;
}

static bool ip_equal(const char *host, const struct sockaddr_storage *ss)
{
    unsigned char a[sizeof(struct in6_addr)];
    if (ss->ss_family == AF_INET) {
        return inet_pton(AF_INET, host, a) == 1 &&
               memcmp(a, &((const struct sockaddr_in *)ss)->sin_addr, 4) == 0;
    }
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *l = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        if (inet_pton(AF_INET6, host, a) == 1)
            return memcmp(a, l, sizeof *l) == 0;
        /* a dual-stack socket sees IPv4 clients as ::ffff:a.b.c.d */
        return IN6_IS_ADDR_V4MAPPED(l) && inet_pton(AF_INET, host, a) == 1 &&
               memcmp(a, l->s6_addr + 12, 4) == 0;
    }
    return false;
}

/* Whether an authority names this endpoint as reached through this connection. */
static bool own_authority(shoal_metrics_t *m, const crec_t *r, const char *auth)
{
    char host[256];
    if (!host_part(auth, host, sizeof host))
        return false;
    if (strcasecmp(host, "localhost") == 0)
        return true;
    for (size_t i = 0; i < m->n_hosts; i++)
        if (strcasecmp(host, m->hosts[i]) == 0)
            return true;
    return r && ip_equal(host, &r->local);
}

/* "application/json", whatever its parameters ("; charset=utf-8") */
static bool json_type(const char *ct)
{
    if (!ct)
        return false;
    while (*ct == ' ')
        ct++;
    static const char want[] = "application/json";
    size_t n = sizeof want - 1;
    if (strncasecmp(ct, want, n) != 0)
        return false;
    ct += n;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == 0 || *ct == ';';
}

/* Same origin: Origin is http:// or https:// followed by exactly the Host the request names. */
static bool own_origin(const char *origin, const char *host)
{
    const char *rest = NULL;
    if (strncasecmp(origin, "http://", 7) == 0)
        rest = origin + 7;
    else if (strncasecmp(origin, "https://", 8) == 0)
        rest = origin + 8;
    return rest && host && strcasecmp(rest, host) == 0;
}

static bool token_ok(shoal_metrics_t *m, struct MHD_Connection *conn)
{
    const char *a =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!a || strncasecmp(a, "Bearer ", 7) != 0)
        return false;
    a += 7;
    while (*a == ' ')
        a++;
    size_t n = strlen(a), t = strlen(m->token);
    /* compare in time that does not depend on where they differ */
    unsigned char diff = (unsigned char)(n != t);
    for (size_t i = 0; i < t; i++)
        diff |= (unsigned char)(m->token[i] ^ (i < n ? a[i] : 0));
    return diff == 0;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *allow,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* MHD_YES/MHD_NO once a refusal has been queued, or -1 when the request may go on. */
static int screen(shoal_metrics_t *m, struct MHD_Connection *conn, const char *url, unsigned want,
                  bool host_only)
{
    crec_t *r = rec_of(conn);
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (host_only && host && !own_authority(m, r, host)) {
        refuse_count(m, REFUSE_HOST);
        return send_error(conn, MHD_HTTP_FORBIDDEN, NULL,
                          "Host '%.100s' is not this endpoint: use its address, or add the name "
                          "(--http-host NAME, shoal/management/http/hosts)",
                          host);
    }
    if (host_only)
        return -1;
    if (want == SHOAL_HTTP_POST) {
        const char *origin =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
        if (origin && !own_origin(origin, host)) {
            refuse_count(m, REFUSE_ORIGIN);
            return send_error(conn, MHD_HTTP_FORBIDDEN, NULL,
                              "POST from a page of another origin (%.100s) refused", origin);
        }
        const char *ct =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!json_type(ct)) {
            refuse_count(m, REFUSE_TYPE);
            return send_error(conn, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL,
                              "POST needs Content-Type: application/json (not '%.60s')",
                              ct ? ct : "");
        }
    }
    pthread_mutex_lock(&m->lock);
    bool needs_token = m->token && (want == SHOAL_HTTP_POST ||
                                    (m->token_for_reads && strncmp(url, "/health/", 8) != 0));
    bool refused = needs_token && !token_ok(m, conn);
    pthread_mutex_unlock(&m->lock);
    if (refused) {
        refuse_count(m, REFUSE_TOKEN);
        shoal_http_reply_t rep = {0};
        shoal_http_error(&rep, MHD_HTTP_UNAUTHORIZED,
                         "this endpoint needs 'Authorization: Bearer TOKEN' (--http-token-file)");
        size_t len = rep.body.len;
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(len, rep.body.data, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            shoal_buf_free(&rep.body);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, JSON_TYPE);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"shoal\"");
        enum MHD_Result res = MHD_queue_response(conn, MHD_HTTP_UNAUTHORIZED, resp);
        MHD_destroy_response(resp);
        return res;
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Requests
 */
typedef struct {
    shoal_buf_t body;
    bool too_big;
} conn_t;

static bool is_loopback(const struct sockaddr *sa)
{
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

static enum MHD_Result take_param(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    (void)kind;
    job_t *j = cls;
    if (j->n_params == PARAMS_MAX || !key)
        return MHD_NO;
    j->names[j->n_params] = shoal_memdup(key, strlen(key) + 1);
    value = value ? value : "";
    j->values[j->n_params] = shoal_memdup(value, strlen(value) + 1);
    j->n_params++;
    return MHD_YES;
}

/* A path ending in '/' is a prefix ("/cluster/members/"), except "/" itself: the page there is
   not the answer to every unknown path. */
static bool is_prefix(const route_t *r)
{
    return r->len > 1 && r->path[r->len - 1] == '/';
}

static bool route_matches(const route_t *r, const char *path)
{
    return is_prefix(r) ? strncmp(path, r->path, r->len) == 0 : strcmp(path, r->path) == 0;
}

/* The route for path (longest match wins), copied out of the list; false when none. */
static bool find_route(shoal_metrics_t *m, const char *path, route_t *out, shoal_buf_t *allow)
{
    bool found = false;
    size_t best = 0;
    unsigned methods = 0;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_routes; i++) {
        const route_t *r = &m->routes[i];
        if (!route_matches(r, path) || r->len < best)
            continue;
        if (r->len > best)
            methods = 0;
        best = r->len;
        methods |= r->flags;
        *out = *r;
        found = true;
    }
    pthread_mutex_unlock(&m->lock);
    if (methods & SHOAL_HTTP_GET)
        shoal_buf_printf(allow, "GET, HEAD");
    if (methods & SHOAL_HTTP_POST)
        shoal_buf_printf(allow, "%sPOST", allow->len ? ", " : "");
    return found;
}

/* The same path may have a GET route and a POST route: pick the one for this method. */
static bool route_for_method(shoal_metrics_t *m, const char *path, unsigned method, route_t *out)
{
    bool found = false;
    size_t best = 0;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_routes; i++) {
        const route_t *r = &m->routes[i];
        if (route_matches(r, path) && (r->flags & method) && r->len >= best) {
            best = r->len;
            *out = *r;
            found = true;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return found;
}

static void list_routes(shoal_metrics_t *m, shoal_buf_t *out)
{
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_routes; i++)
        shoal_buf_printf(out, "%s%s", i ? " " : "", m->routes[i].path);
    pthread_mutex_unlock(&m->lock);
}

static enum MHD_Result dispatch(shoal_metrics_t *m, struct MHD_Connection *conn, const char *url,
                                const char *method, conn_t *c)
{
    unsigned want;
    if (strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0)
        want = SHOAL_HTTP_GET;
    else if (strcmp(method, MHD_HTTP_METHOD_POST) == 0)
        want = SHOAL_HTTP_POST;
    else
        want = 0;
    if (!url || url[0] != '/')
        return send_error(conn, MHD_HTTP_BAD_REQUEST, NULL, "bad request target");
    /* a foreign Host learns nothing, not even the routes; the rest once the route is known */
    int screened = screen(m, conn, url, want, true);
    if (screened >= 0)
        return (enum MHD_Result)screened;
    route_t r = {0};
    shoal_buf_t allow = {0};
    if (!find_route(m, url, &r, &allow)) {
        shoal_buf_t routes = {0};
        list_routes(m, &routes);
        enum MHD_Result res =
            send_error(conn, MHD_HTTP_NOT_FOUND, NULL, "not found: %.200s (routes: %s)", url,
                       shoal_buf_cstr(&routes));
        shoal_buf_free(&routes);
        shoal_buf_free(&allow);
        return res;
    }
    if (!want || !route_for_method(m, url, want, &r)) {
        enum MHD_Result res = send_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, shoal_buf_cstr(&allow),
                                         "method %.32s not allowed on %.200s", method, url);
        shoal_buf_free(&allow);
        return res;
    }
    shoal_buf_free(&allow);
    if ((screened = screen(m, conn, url, want, false)) >= 0)
        return (enum MHD_Result)screened;
    if (c->too_big)
        return send_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, NULL, "body over %d bytes", BODY_MAX);

    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    bool loopback = ci && is_loopback(ci->client_addr);
    if (want == SHOAL_HTTP_POST) {
        pthread_mutex_lock(&m->lock);
        shoal_http_writes_t who = m->writes;
        pthread_mutex_unlock(&m->lock);
        if (who == SHOAL_HTTP_WRITES_NONE)
            return send_error(conn, MHD_HTTP_FORBIDDEN, NULL,
                              "this endpoint is read-only (POST refused)");
        if (who == SHOAL_HTTP_WRITES_LOOPBACK && !loopback)
            return send_error(conn, MHD_HTTP_FORBIDDEN, NULL,
                              "POST is for loopback clients only (shoal_metrics_set_writes)");
    }

    job_t *j = shoal_calloc(1, sizeof *j);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->m = m;
    j->fn = r.fn;
    j->arg = r.arg;
    j->method = shoal_memdup(method, strlen(method) + 1);
    j->path = shoal_memdup(url, strlen(url) + 1);
    const char *body = c->body.len ? shoal_buf_cstr(&c->body) : "";
    j->body = shoal_memdup(body, c->body.len + 1);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, take_param, j);
    j->req = (shoal_http_request_t){
        .method = j->method,
        .path = j->path,
        .rest = j->path + (is_prefix(&r) ? r.len : strlen(j->path)),
        .body = j->body,
        .body_len = c->body.len,
        .loopback = loopback,
        .n_params = j->n_params,
        .param_names = (const char *const *)j->names,
        .param_values = (const char *const *)j->values,
    };

    int rc = 0;
    if (r.flags & SHOAL_HTTP_ANY_THREAD) {
        j->refs = 1;
        r.fn(m->sys, &j->req, &j->rep, r.arg);
    } else {
        rc = job_call(j, r.timeout_ms);
    }
    enum MHD_Result res;
    if (rc == SHOAL_ETIMEOUT)
        res = send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, NULL,
                         "node loop did not answer within %u ms", (unsigned)r.timeout_ms);
    else if (rc < 0)
        res = send_error(conn, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, "node unavailable: %s",
                         shoal_strerror(rc));
    else
        res = send_reply(conn, &j->rep, NULL);
    job_release(j);
    return res;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    shoal_metrics_t *m = cls;
    conn_t *c = *con_cls;
    if (!c) { /* headers only so far: answer once the body (if any) is read */
        *con_cls = shoal_calloc(1, sizeof *c);
        return MHD_YES;
    }
    if (*upload_data_size) { /* bounded: past BODY_MAX the rest is read and dropped (413) */
        if (c->body.len + *upload_data_size > BODY_MAX)
            c->too_big = true;
        else
            shoal_buf_append(&c->body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    set_busy(m, conn, true);
    pthread_rwlock_rdlock(&m->use);
    enum MHD_Result res = dispatch(m, conn, url, method, c);
    pthread_rwlock_unlock(&m->use);
    set_busy(m, conn, false); /* the answer, and the next request, within the deadline again */
    return res;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    set_busy(cls, conn, false); /* a kept-alive connection's next request: a new deadline */
    conn_t *c = *con_cls;
    if (c) {
        shoal_buf_free(&c->body);
        free(c);
        *con_cls = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = 0;
    /* connections the caps or the deadline closed, and clients that hung up, are counted
       (shoal_http_connections_closed_total): a line each would let a flood fill the log */
    if (strstr(line, "closed") || strstr(line, "closure"))
        return;
    shoal_warning("http: %s", line);
}

/* ---------------------------------------------------------------------------------------------
 * The endpoint
 */
static int add_route(shoal_metrics_t *m, const char *path, unsigned flags, uint32_t timeout_ms,
                     shoal_http_fn *fn, void *arg)
{
    if (!m || !path || path[0] != '/' || !fn || !(flags & (SHOAL_HTTP_GET | SHOAL_HTTP_POST)))
        return SHOAL_EINVAL;
    pthread_mutex_lock(&m->lock);
    size_t len = strlen(path);
    size_t i = 0;
    unsigned methods = flags & (SHOAL_HTTP_GET | SHOAL_HTTP_POST);
    while (i < m->n_routes &&
           !(strcmp(m->routes[i].path, path) == 0 &&
             (m->routes[i].flags & (SHOAL_HTTP_GET | SHOAL_HTTP_POST)) == methods))
        i++;
    if (i == m->n_routes) {
        SHOAL_GROW(m->routes, m->cap_routes, m->n_routes + 1);
        m->n_routes++;
        m->routes[i].path = shoal_memdup(path, len + 1);
    }
    m->routes[i].len = len;
    m->routes[i].flags = flags;
    m->routes[i].timeout_ms = timeout_ms;
    m->routes[i].fn = fn;
    m->routes[i].arg = arg;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int shoal_http_route(shoal_metrics_t *m, const char *path, unsigned flags, shoal_http_fn *fn,
                     void *arg)
{
    return add_route(m, path, flags, CALL_TIMEOUT_MS, fn, arg);
}

int shoal_http_ready_check(shoal_metrics_t *m, const char *name, shoal_ready_fn *fn, void *arg)
{
    if (!m || !name || !fn)
        return SHOAL_EINVAL;
    pthread_mutex_lock(&m->lock);
    SHOAL_GROW(m->checks, m->cap_checks, m->n_checks + 1);
    m->checks[m->n_checks++] = (check_t){shoal_memdup(name, strlen(name) + 1), fn, arg};
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int shoal_metrics_set_writes(shoal_metrics_t *m, shoal_http_writes_t who)
{
    if (!m || (who != SHOAL_HTTP_WRITES_LOOPBACK && who != SHOAL_HTTP_WRITES_ANY &&
               who != SHOAL_HTTP_WRITES_NONE))
        return SHOAL_EINVAL;
    pthread_mutex_lock(&m->lock);
    m->writes = who;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

void shoal_http_settings_default(shoal_http_settings_t *s)
{
    if (!s)
        return;
    memset(s, 0, sizeof *s);
    s->request_timeout_ms = REQUEST_TIMEOUT_MS;
    s->max_connections = MAX_CONNECTIONS;
    s->max_per_address = MAX_PER_ADDRESS;
}

/* A whole small file (a token, a PEM certificate or key), NUL-terminated; NULL with a warning. */
static char *read_small(const char *path, const char *what)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        shoal_warning("http: cannot read the %s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    shoal_buf_t b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len < (1u << 20))
        shoal_buf_append(&b, chunk, n);
    fclose(f);
    char *out = shoal_memdup(shoal_buf_cstr(&b), b.len + 1);
    shoal_buf_free(&b);
    return out;
}

static void free_endpoint(shoal_metrics_t *m)
{
    for (size_t i = 0; i < m->n_routes; i++)
        free(m->routes[i].path);
    for (size_t i = 0; i < m->n_checks; i++)
        free(m->checks[i].name);
    for (size_t i = 0; i < m->n_hosts; i++)
        free(m->hosts[i]);
    char *secrets[] = {m->token, m->cert, m->key};
    for (size_t i = 0; i < 3; i++)
        if (secrets[i]) {
            explicit_bzero(secrets[i], strlen(secrets[i]));
            free(secrets[i]);
        }
    free(m->token_file);
    free(m->tls_cert_file);
    free(m->tls_key_file);
    free(m->routes);
    free(m->checks);
    free(m->collectors);
    pthread_cond_destroy(&m->ccv);
    pthread_mutex_destroy(&m->cmu);
    pthread_rwlock_destroy(&m->use);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* The first line of a token file, without trailing blanks; NULL (with a warning) when it cannot
   be read or is empty. */
static char *read_token(const char *path)
{
    char *t = read_small(path, "token file");
    if (!t)
        return NULL;
    t[strcspn(t, "\r\n")] = 0;
    size_t n = strlen(t);
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
        t[--n] = 0;
    if (n == 0) {
        shoal_warning("http: the token file %s is empty", path);
        free(t);
        return NULL;
    }
    return t;
}

/* The daemon of m: on `sa` (start) or on an open listening socket (listen_fd >= 0: a reload
   taking over the one the old daemon listened on, so the port never closes), with these PEMs
   when m->tls. */
static struct MHD_Daemon *open_daemon(shoal_metrics_t *m, const struct sockaddr *sa, int listen_fd,
                                      const char *cert, const char *key)
{
    /* MHD's idle timeout in whole seconds, at least the request deadline (which is Shoal's) */
    unsigned idle_s = (m->request_timeout_ms + 999) / 1000;
    struct MHD_OptionItem opts[] = {
        {listen_fd >= 0 ? MHD_OPTION_LISTEN_SOCKET : MHD_OPTION_SOCK_ADDR, listen_fd, (void *)sa},
        {m->tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, (void *)key},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cert},
        {MHD_OPTION_END, 0, NULL},
    };
    /* each connection is a thread with 64 KiB for its request line and headers; the caps and the
       whole-request deadline are Shoal's (on_connection, reap) */
    return MHD_start_daemon(
        m->mhd_flags, 0, NULL, NULL, on_request, m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, m, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        m, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(m->max_connections + MHD_SLACK),
        MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
        MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
}

/* Takes what the settings name into m: the token's first line, the names; the PEMs into out. */
static int take_settings(shoal_metrics_t *m, const shoal_http_settings_t *s, char **cert,
                         char **key)
{
    m->request_timeout_ms = s->request_timeout_ms ? s->request_timeout_ms : REQUEST_TIMEOUT_MS;
    m->max_connections = s->max_connections ? s->max_connections : MAX_CONNECTIONS;
    m->max_per_address = s->max_per_address ? s->max_per_address : MAX_PER_ADDRESS;
    m->token_for_reads = s->token_for_reads;
    for (size_t i = 0; i < s->n_hosts && i < SHOAL_HTTP_HOSTS_MAX; i++)
        if (s->hosts[i] && s->hosts[i][0])
            m->hosts[m->n_hosts++] = shoal_memdup(s->hosts[i], strlen(s->hosts[i]) + 1);
    if (s->token_file) {
        m->token = read_token(s->token_file);
        if (!m->token)
            return SHOAL_EINVAL;
        m->token_file = shoal_memdup(s->token_file, strlen(s->token_file) + 1);
    }
    if (!s->tls_cert_file != !s->tls_key_file) {
        shoal_warning("http: TLS needs both a certificate and a key");
        return SHOAL_EINVAL;
    }
    if (s->tls_cert_file) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            shoal_warning("http: this libmicrohttpd was built without TLS");
            return SHOAL_EINVAL;
        }
        *cert = read_small(s->tls_cert_file, "certificate");
        *key = read_small(s->tls_key_file, "key");
        if (!*cert || !*key)
            return SHOAL_EINVAL;
        m->tls = true;
        m->tls_cert_file = shoal_memdup(s->tls_cert_file, strlen(s->tls_cert_file) + 1);
        m->tls_key_file = shoal_memdup(s->tls_key_file, strlen(s->tls_key_file) + 1);
    }
    return 0;
}

static shoal_metrics_t *start_endpoint(shoal_system_t *sys, const char *bind_address, uint16_t port,
                                       const shoal_http_settings_t *settings, int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    *err = 0;
    if (!sys) {
        *err = SHOAL_EINVAL;
        return NULL;
    }
    shoal_http_settings_t defaults;
    shoal_http_settings_default(&defaults);
    const shoal_http_settings_t *s = settings ? settings : &defaults;
    const char *addr = bind_address ? bind_address : "127.0.0.1";
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    /* a thread per connection: a request waiting on the node must not hold up /health/alive;
       poll(), not select(): a process with more than FD_SETSIZE descriptors open (a flood on the
       node's ports) must still be answered */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_USE_ITC; /* ITC: for a reload */
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
        shoal_warning("http: '%s' is not an IP address", addr);
        *err = SHOAL_EINVAL;
        return NULL;
    }

    shoal_metrics_t *m = shoal_calloc(1, sizeof *m);
    m->sys = sys;
    pthread_mutex_init(&m->lock, NULL);
    pthread_rwlock_init(&m->use, NULL);
    pthread_mutex_init(&m->cmu, NULL);
    pthread_cond_init(&m->ccv, NULL);
    char *cert = NULL, *key = NULL;
    int rc = take_settings(m, s, &cert, &key);
    if (rc < 0) {
        free(cert);
        free(key);
        free_endpoint(m);
        *err = rc;
        return NULL;
    }
    if (m->tls)
        flags |= MHD_USE_TLS;
    add_route(m, "/metrics", SHOAL_HTTP_GET, CALL_TIMEOUT_MS, route_metrics, m);
    add_route(m, "/health/alive", SHOAL_HTTP_GET, ALIVE_TIMEOUT_MS, route_alive, m);
    add_route(m, "/health/ready", SHOAL_HTTP_GET, CALL_TIMEOUT_MS, route_ready, m);
    add_route(m, "/cluster/replicators", SHOAL_HTTP_GET, CALL_TIMEOUT_MS, route_replicators, m);
    add_route(m, "/loglevel", SHOAL_HTTP_GET | SHOAL_HTTP_POST | SHOAL_HTTP_ANY_THREAD,
              CALL_TIMEOUT_MS, route_loglevel, m);
    m->mhd_flags = flags;
    m->daemon = open_daemon(m, (struct sockaddr *)&ss, -1, cert, key);
    m->cert = cert; /* kept for a reload that fails (shoal_http_reload) */
    m->key = key;
    if (!m->daemon) {
        shoal_warning("http: cannot listen on %s port %u%s", addr, (unsigned)port,
                      m->tls ? " (or the TLS certificate or key is not valid PEM)" : "");
        free_endpoint(m);
        *err = SHOAL_EIO;
        return NULL;
    }
    m->reaper_started = pthread_create(&m->reaper, NULL, reap, m) == 0;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info ? info->port : port;
    pthread_mutex_lock(&reg_lock);
    m->next = live;
    live = m;
    for (size_t i = 0; i < n_providers; i++)
        if (providers[i].sys == sys)
            providers[i].fn(m, providers[i].arg);
    pthread_mutex_unlock(&reg_lock);
    return m;
}

shoal_metrics_t *shoal_metrics_start(shoal_system_t *sys, const char *bind_address, uint16_t port,
                                     int *err)
{
    return start_endpoint(sys, bind_address, port, NULL, err);
}

int shoal_http_parse(const char *spec, char *host, size_t cap, uint16_t *port)
{
    if (!spec)
        return SHOAL_EINVAL;
    const char *p = spec, *colon = NULL;
    char h[INET6_ADDRSTRLEN] = "127.0.0.1";
    if (spec[0] == '[') { /* [v6]:port */
        const char *close = strchr(spec, ']');
        if (!close || close[1] != ':' || (size_t)(close - spec - 1) >= sizeof h)
            return SHOAL_EINVAL;
        memcpy(h, spec + 1, (size_t)(close - spec - 1));
        h[close - spec - 1] = 0;
        p = close + 2;
    } else if ((colon = strrchr(spec, ':')) != NULL) {
        if ((size_t)(colon - spec) >= sizeof h || colon == spec)
            return SHOAL_EINVAL;
        memcpy(h, spec, (size_t)(colon - spec));
        h[colon - spec] = 0;
        p = colon + 1;
    }
    if (!*p || strlen(p) > 5 || strspn(p, "0123456789") != strlen(p))
        return SHOAL_EINVAL;
    unsigned long v = strtoul(p, NULL, 10);
    if (v > 65535)
        return SHOAL_EINVAL;
    unsigned char tmp[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, h, tmp) != 1 && inet_pton(AF_INET6, h, tmp) != 1)
        return SHOAL_EINVAL;
    if (host) {
        if (strlen(h) >= cap)
            return SHOAL_EINVAL;
        strcpy(host, h);
    }
    if (port)
        *port = (uint16_t)v;
    return 0;
}

shoal_metrics_t *shoal_http_start_with(shoal_system_t *sys, const char *spec,
                                       const shoal_http_settings_t *s, int *err)
{
    char host[INET6_ADDRSTRLEN];
    uint16_t port;
    if (shoal_http_parse(spec, host, sizeof host, &port) < 0) {
        shoal_warning("http: '%s' is not [HOST:]PORT (HOST an IP address)", spec ? spec : "");
        if (err)
            *err = SHOAL_EINVAL;
        return NULL;
    }
    return start_endpoint(sys, host, port, s, err);
}

shoal_metrics_t *shoal_http_start(shoal_system_t *sys, const char *spec, int *err)
{
    return shoal_http_start_with(sys, spec, NULL, err);
}

/* shoal_config_error's twin: the configuration loader sits above the metrics endpoint in
   tools/layers.txt, so this layer cannot call it */
static int flag_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int flag_error(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return SHOAL_EINVAL;
}

int shoal_http_flag(shoal_http_settings_t *s, int argc, char *const *argv, int *i, char *err,
                    size_t errlen)
{
    if (!s || !argv || !i || *i < 0 || *i >= argc)
        return flag_error(err, errlen, "shoal_http_flag: bad arguments");
    const char *a = argv[*i];
    static const char *const with_value[] = {"--http-host", "--http-token-file", "--http-tls-cert",
                                             "--http-tls-key"};
    if (strcmp(a, "--http-token-reads") == 0) {
        s->token_for_reads = true;
        return 1;
    }
    size_t k = 0;
    while (k < 4 && strcmp(a, with_value[k]) != 0)
        k++;
    if (k == 4)
        return 0;
    if (*i + 1 >= argc || !argv[*i + 1][0])
        return flag_error(err, errlen, "%s needs a value", a);
    const char *v = argv[++*i];
    switch (k) {
    case 0:
        if (s->n_hosts == SHOAL_HTTP_HOSTS_MAX)
            return flag_error(err, errlen, "--http-host: at most %d names", SHOAL_HTTP_HOSTS_MAX);
        s->hosts[s->n_hosts++] = v;
        break;
    case 1:
        s->token_file = v;
        break;
    case 2:
        s->tls_cert_file = v;
        break;
    default:
        s->tls_key_file = v;
        break;
    }
    return 1;
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
    bool have = false;
    for (size_t i = 0; i < m->n_collectors && !have; i++)
        have = m->collectors[i].fn == fn && m->collectors[i].arg == arg;
    if (!have) { /* a provider's collector and an explicit call for the same part count once */
        SHOAL_GROW(m->collectors, m->cap_collectors, m->n_collectors + 1);
        m->collectors[m->n_collectors].fn = fn;
        m->collectors[m->n_collectors].arg = arg;
        m->n_collectors++;
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int shoal_http_reload(shoal_metrics_t *m)
{
    if (!m)
        return SHOAL_EINVAL;
    int rc = 0;
    if (m->token_file) {
        char *t = read_token(m->token_file);
        if (!t) {
            shoal_warning("http: the token file %s could not be read: the token in force stays",
                          m->token_file);
            rc = SHOAL_EINVAL;
        } else {
            pthread_mutex_lock(&m->lock);
            char *old = m->token;
            m->token = t;
            pthread_mutex_unlock(&m->lock);
            explicit_bzero(old, strlen(old));
            free(old);
            shoal_info("http: token reloaded from %s", m->token_file);
        }
    }
    if (!m->tls || !m->daemon)
        return rc;
    char *cert = read_small(m->tls_cert_file, "certificate");
    char *key = read_small(m->tls_key_file, "key");
    /* libmicrohttpd reads the PEMs at start only: a new daemon takes over the old one's listening
       socket (the port never closes, the backlog waits), and the old one finishes the
       connections it has (MHD_stop_daemon waits for them) */
    MHD_socket fd = cert && key ? MHD_quiesce_daemon(m->daemon) : MHD_INVALID_SOCKET;
    struct MHD_Daemon *d = NULL;
    if (cert && key && fd == MHD_INVALID_SOCKET) {
        shoal_warning(
            "http: cannot hand the listening socket over: the certificate in force stays");
        rc = SHOAL_EIO;
    } else if (fd != MHD_INVALID_SOCKET) {
        /* a daemon that fails to start closes the socket it was given: the new pair is tried
           on a duplicate, so the one in force can take the socket back */
        int dupfd = dup(fd);
        d = dupfd >= 0 ? open_daemon(m, NULL, dupfd, cert, key) : NULL;
        bool taken = d != NULL;
        if (!d) /* not valid PEM: the pair in force again, on the same socket */
            d = open_daemon(m, NULL, fd, m->cert, m->key);
        else {
            explicit_bzero(m->cert, strlen(m->cert));
            explicit_bzero(m->key, strlen(m->key));
            free(m->cert);
            free(m->key);
            m->cert = cert;
            m->key = key;
            cert = key = NULL;
            shoal_info("http: TLS certificate and key reloaded from %s and %s", m->tls_cert_file,
                       m->tls_key_file);
        }
        struct MHD_Daemon *old = m->daemon;
        m->daemon = d;
        MHD_stop_daemon(old);
        if (taken) /* the new daemon listens on the duplicate */
            close(fd);
        if (!d) {
            shoal_error("http: the endpoint could not be started again on port %u: it is closed",
                        (unsigned)m->port);
            rc = SHOAL_EIO;
        }
    }
    if ((cert || key) && rc != SHOAL_EIO) { /* not taken: unreadable, or not valid PEM */
        shoal_warning("http: the TLS certificate %s or key %s is not usable: the pair in force "
                      "stays",
                      m->tls_cert_file, m->tls_key_file);
        if (!rc)
            rc = SHOAL_EINVAL;
    }
    if (cert)
        explicit_bzero(cert, strlen(cert));
    if (key)
        explicit_bzero(key, strlen(key));
    free(cert);
    free(key);
    return rc;
}

void shoal_metrics_stop(shoal_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_metrics_t *m = *self_p;
    *self_p = NULL;
    pthread_mutex_lock(&reg_lock);
    for (shoal_metrics_t **pp = &live; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    pthread_mutex_lock(&m->cmu);
    m->stopping = true;
    pthread_cond_signal(&m->ccv);
    pthread_mutex_unlock(&m->cmu);
    if (m->reaper_started)
        pthread_join(m->reaper, NULL);
    if (m->daemon)
        MHD_stop_daemon(m->daemon);
    node_barrier(m->sys); /* jobs abandoned past their deadline still point at m */
    free_endpoint(m);
}
