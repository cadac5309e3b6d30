/*  chaos-client — the chaos suite's workload driver and reader (tools/chaos.py runs it).

      chaos-client run --nodes EP,EP,... --duration SECONDS --log FILE [--workers W]
                       [--entities E] [--run-id ID] [--seed N] [--pause-ms MS]
          W worker threads (4), each a client of every node, until SECONDS have passed: GCounter
          increments (WriteMajority), ORSet adds (WriteMajority) and removes of its own earlier
          adds (through the node that acknowledged the add), LWWMap puts (WriteMajority), and
          messages to the entities acct-0..acct-(E-1) through a node's at-least-once producer.
          Every operation's outcome is one JSON line in FILE ("ok": true only when it was
          ACKNOWLEDGED: the consistency level reached, or the entity's confirmation received).
      chaos-client check --nodes EP,EP,... [--entities E]
          Reads every workload key from every node with ReadLocal and prints one JSON document:
          per node and key the digest (XXH3-128 of the canonical encoding) and the value; with
          --entities, each entity's stored state (its processed message ids) asked through the
          first node that answers.
      chaos-client fault EP SPEC          the transport's fault injection on one node ("heal", or
                                          "DIR CUT DROP DUP DELAY_MS PEER|*", see chaos.h)
      chaos-client info EP                the node's counters (chaos.h, CHAOS_KIND_INFO)
      chaos-client --help | --version

    Exit: 0 ok, 1 a request failed, 2 usage.
*/
#include "chaos.h"
#include "cli.h"
#include "membership.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_NODES 16
#define REQUEST_TIMEOUT_MS 6000
#define WRITE_TIMEOUT_MS 3000

static const char *nodes[MAX_NODES];
static int n_nodes;
static int n_entities = 16;
static const char *run_id = "r";
static uint64_t deadline_ms;
static int pause_ms = 20;
static FILE *oplog;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_ulong acked, attempted;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int split_nodes(char *list)
{
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","))
        if (n_nodes < MAX_NODES)
            nodes[n_nodes++] = tok;
    return n_nodes;
}

/* JSON string of bytes (escaping what is not printable ASCII). */
static void json_str(shoal_buf_t *b, const void *data, size_t len)
{
    const unsigned char *p = data;
    shoal_buf_append(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '"' || p[i] == '\\')
            shoal_buf_printf(b, "\\%c", p[i]);
        else if (p[i] < 0x20 || p[i] > 0x7e)
            shoal_buf_printf(b, "\\u%04x", p[i]);
        else
            shoal_buf_append(b, &p[i], 1);
    }
    shoal_buf_append(b, "\"", 1);
}

/* ---------------------------------------------------------------------------------------------
 * run
 */
typedef struct {
    int index;
    unsigned seed;
    shoal_client_t *cl[MAX_NODES];
    /* its adds acknowledged and not removed yet: element and the node that acknowledged it */
    struct {
        char elem[64];
        int set, node;
    } added[64];
    int n_added;
    unsigned long n;
} worker_t;

static unsigned rnd(worker_t *w, unsigned n)
{
    return (unsigned)rand_r(&w->seed) % n;
}

static shoal_client_t *client_of(worker_t *w, int node)
{
    if (!w->cl[node]) {
        int rc = 0;
        w->cl[node] = shoal_client_new(nodes[node], REQUEST_TIMEOUT_MS, &rc);
    }
    return w->cl[node];
}

/* After a failure the node may have restarted or be paused: a fresh connection next time. */
static void client_failed(worker_t *w, int node, int rc)
{
    if (rc == SHOAL_ETIMEOUT || rc == SHOAL_EIO || rc == SHOAL_ESTOPPED || rc == SHOAL_EREFUSED ||
        rc == SHOAL_ENOTCONN)
        shoal_client_destroy(&w->cl[node]);
}

static void log_op(worker_t *w, const char *op, int node, bool ok, const char *err,
                   uint64_t t0, const char *fields)
{
    atomic_fetch_add(&attempted, 1);
    if (ok)
        atomic_fetch_add(&acked, 1);
    pthread_mutex_lock(&log_mu);
    fprintf(oplog, "{\"w\":%d,\"op\":\"%s\",\"node\":%d,\"ok\":%s,\"err\":\"%s\",\"t0\":%" PRIu64
                   ",\"t1\":%" PRIu64 ",%s}\n",
            w->index, op, node + 1, ok ? "true" : "false", err ? err : "", t0, now_ms(), fields);
    fflush(oplog);
    pthread_mutex_unlock(&log_mu);
}

static int update(worker_t *w, int node, const char *key, const shoal_client_op_t *op)
{
    shoal_client_t *c = client_of(w, node);
    if (!c)
        return SHOAL_EIO;
    shoal_consistency_t maj = {.level = SHOAL_MAJORITY, .timeout_ms = WRITE_TIMEOUT_MS};
    int rc = shoal_client_update(c, "", key, &maj, op);
    if (rc != 0)
        client_failed(w, node, rc);
    return rc;
}

static void op_increment(worker_t *w, int node)
{
    char key[32], f[128];
    snprintf(key, sizeof key, "chaos-c-%u", rnd(w, CHAOS_COUNTERS));
    shoal_client_op_t op = {.type = "GCounter", .op = "increment", .n = 1};
    uint64_t t0 = now_ms();
    int rc = update(w, node, key, &op);
    snprintf(f, sizeof f, "\"key\":\"%s\",\"n\":1", key);
    log_op(w, "inc", node, rc == 0, rc ? shoal_strerror(rc) : NULL, t0, f);
}

static void op_add(worker_t *w, int node)
{
    char key[32], elem[64], f[192];
    int set = (int)rnd(w, CHAOS_SETS);
    snprintf(key, sizeof key, "chaos-s-%d", set);
    snprintf(elem, sizeof elem, "%s-w%d-%lu", run_id, w->index, ++w->n);
    shoal_client_op_t op = {.type = "ORSet", .op = "add", .elem = elem, .elem_len = strlen(elem)};
    uint64_t t0 = now_ms();
    int rc = update(w, node, key, &op);
    snprintf(f, sizeof f, "\"key\":\"%s\",\"elem\":\"%s\"", key, elem);
    log_op(w, "add", node, rc == 0, rc ? shoal_strerror(rc) : NULL, t0, f);
    if (rc == 0 && w->n_added < (int)(sizeof w->added / sizeof w->added[0])) {
        snprintf(w->added[w->n_added].elem, sizeof w->added[0].elem, "%s", elem);
        w->added[w->n_added].set = set;
        w->added[w->n_added].node = node;
        w->n_added++;
    }
}

static void op_remove(worker_t *w)
{
    if (w->n_added == 0)
        return;
    int i = (int)rnd(w, (unsigned)w->n_added);
    char key[32], elem[64], f[192];
    int node = w->added[i].node; /* the node that has seen the add: the remove observes it */
    snprintf(key, sizeof key, "chaos-s-%d", w->added[i].set);
    snprintf(elem, sizeof elem, "%s", w->added[i].elem);
    w->added[i] = w->added[--w->n_added];
    shoal_client_op_t op = {.type = "ORSet", .op = "remove", .elem = elem,
                            .elem_len = strlen(elem)};
    uint64_t t0 = now_ms();
    int rc = update(w, node, key, &op);
    snprintf(f, sizeof f, "\"key\":\"%s\",\"elem\":\"%s\"", key, elem);
    log_op(w, "remove", node, rc == 0, rc ? shoal_strerror(rc) : NULL, t0, f);
}

static void op_put(worker_t *w, int node)
{
    char mkey[16], value[64], f[192];
    snprintf(mkey, sizeof mkey, "k%u", rnd(w, CHAOS_MAP_KEYS));
    snprintf(value, sizeof value, "%s-w%d-%lu", run_id, w->index, ++w->n);
    shoal_client_op_t op = {.type = "LWWMap", .op = "put", .key2 = mkey, .key2_len = strlen(mkey),
                            .value = value, .value_len = strlen(value)};
    uint64_t t0 = now_ms();
    int rc = update(w, node, CHAOS_MAP, &op);
    snprintf(f, sizeof f, "\"key\":\"%s\",\"mkey\":\"%s\",\"value\":\"%s\"", CHAOS_MAP, mkey,
             value);
    log_op(w, "put", node, rc == 0, rc ? shoal_strerror(rc) : NULL, t0, f);
}

static void op_send(worker_t *w, int node)
{
    char entity[32], msgid[64], f[192], req[128];
    snprintf(entity, sizeof entity, "acct-%u", rnd(w, (unsigned)n_entities));
    snprintf(msgid, sizeof msgid, "%s-w%d-%lu", run_id, w->index, ++w->n);
    int len = snprintf(req, sizeof req, "%s\n%s", entity, msgid);
    uint64_t t0 = now_ms();
    shoal_client_t *c = client_of(w, node);
    int rc = c ? 0 : SHOAL_EIO;
    shoal_buf_t reply;
    shoal_buf_init(&reply);
    uint16_t kind = 0;
    if (c)
        rc = shoal_client_request(c, CHAOS_KIND_SEND, req, (size_t)len, &kind, &reply,
                                  REQUEST_TIMEOUT_MS);
    if (rc != 0)
        client_failed(w, node, rc);
    const char *text = rc == 0 ? shoal_buf_cstr(&reply) : "";
    bool ok = rc == 0 && !strncmp(text, "ok", 2);
    char err[96];
    snprintf(err, sizeof err, "%s", rc ? shoal_strerror(rc) : ok ? "" : text);
    for (char *p = err; *p; p++)
        if (*p == '"' || *p == '\\' || *p < 0x20)
            *p = ' ';
    snprintf(f, sizeof f, "\"entity\":\"%s\",\"msg\":\"%s\",\"dup\":%s", entity, msgid,
             ok && strstr(text, "dup") ? "true" : "false");
    log_op(w, "send", node, ok, ok ? NULL : err, t0, f);
    shoal_buf_free(&reply);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    while (now_ms() < deadline_ms) {
        int node = (int)rnd(w, (unsigned)n_nodes);
        unsigned r = rnd(w, 100);
        if (r < 30)
            op_increment(w, node);
        else if (r < 50)
            op_add(w, node);
        else if (r < 58)
            op_remove(w);
        else if (r < 70)
            op_put(w, node);
        else
            op_send(w, node);
        sleep_ms(pause_ms); /* pacing: a steady load, not a flood */
    }
    for (int i = 0; i < n_nodes; i++)
        shoal_client_destroy(&w->cl[i]);
    return NULL;
}

static int run_mode(int workers, int duration_s, const char *logpath, unsigned seed)
{
    oplog = fopen(logpath, "a");
    if (!oplog) {
        perror(logpath);
        return 2;
    }
    deadline_ms = now_ms() + (uint64_t)duration_s * 1000u;
    worker_t *w = calloc((size_t)workers, sizeof *w);
    pthread_t *th = calloc((size_t)workers, sizeof *th);
    if (!w || !th)
        abort();
    for (int i = 0; i < workers; i++) {
        w[i].index = i;
        w[i].seed = seed * 7919u + (unsigned)i;
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < workers; i++)
        pthread_join(th[i], NULL);
    fclose(oplog);
    printf("chaos-client: %lu operations, %lu acknowledged\n", (unsigned long)attempted,
           (unsigned long)acked);
    free(w);
    free(th);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * check
 */
static void hex(shoal_buf_t *b, const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        shoal_buf_printf(b, "%02x", d[i]);
}

static int elem_json(const void *elem, size_t len, void *arg)
{
    shoal_buf_t *b = arg;
    if (b->data[b->len - 1] != '[')
        shoal_buf_append(b, ",", 1);
    json_str(b, elem, len);
    return 0;
}

typedef struct {
    shoal_buf_t *b;
    const shoal_crdt_t *map;
    bool first;
} entries_t;

static int entry_json(const void *key, size_t len, const shoal_crdt_t *value, void *arg)
{
    (void)value;
    entries_t *e = arg;
    size_t vlen = 0;
    const void *v = shoal_lwwmap_get(e->map, key, len, &vlen);
    if (!e->first)
        shoal_buf_append(e->b, ",", 1);
    e->first = false;
    json_str(e->b, key, len);
    shoal_buf_append(e->b, ":", 1);
    json_str(e->b, v ? v : "", v ? vlen : 0);
    return 0;
}

static void key_json(shoal_buf_t *b, shoal_client_t *c, const char *key, bool *first)
{
    shoal_consistency_t local = {.level = SHOAL_LOCAL};
    shoal_crdt_t *v = NULL;
    int rc = shoal_client_get(c, "", key, &local, &v);
    shoal_buf_printf(b, "%s\"%s\":{", *first ? "" : ",", key);
    *first = false;
    if (rc != 0 || !v) {
        shoal_buf_printf(b, "\"missing\":\"%s\"}", rc ? shoal_strerror(rc) : "none");
        return;
    }
    uint8_t d[16];
    shoal_crdt_digest(v, d);
    shoal_buf_append(b, "\"digest\":\"", 10);
    hex(b, d, sizeof d);
    shoal_buf_printf(b, "\",\"type\":\"%s\",", shoal_type_name(shoal_crdt_type(v)));
    const char *t = shoal_type_name(shoal_crdt_type(v));
    if (!strcmp(t, "GCounter")) {
        shoal_buf_printf(b, "\"value\":%" PRIu64, shoal_gcounter_value(v));
    } else if (!strcmp(t, "ORSet")) {
        shoal_buf_append(b, "\"elems\":[", 9);
        shoal_orset_foreach(v, elem_json, b);
        shoal_buf_append(b, "]", 1);
    } else if (!strcmp(t, "LWWMap")) {
        entries_t e = {b, v, true};
        shoal_buf_append(b, "\"entries\":{", 11);
        shoal_ormap_foreach(v, entry_json, &e);
        shoal_buf_append(b, "}", 1);
    } else {
        shoal_buf_append(b, "\"value\":null", 12);
    }
    shoal_buf_append(b, "}", 1);
    shoal_crdt_destroy(&v);
}

static int check_mode(bool entities)
{
    shoal_buf_t b;
    shoal_buf_init(&b);
    shoal_buf_append(&b, "{\"nodes\":[", 10);
    shoal_client_t *cl[MAX_NODES] = {0};
    for (int i = 0; i < n_nodes; i++) {
        int rc = 0;
        cl[i] = shoal_client_new(nodes[i], REQUEST_TIMEOUT_MS, &rc);
        shoal_buf_printf(&b, "%s{\"ep\":\"%s\",", i ? "," : "", nodes[i]);
        if (!cl[i]) {
            shoal_buf_printf(&b, "\"ok\":false,\"err\":\"%s\"}", shoal_strerror(rc));
            continue;
        }
        shoal_buf_append(&b, "\"ok\":true,\"keys\":{", 18);
        bool first = true;
        char key[32];
        for (int k = 0; k < CHAOS_COUNTERS; k++) {
            snprintf(key, sizeof key, "chaos-c-%d", k);
            key_json(&b, cl[i], key, &first);
        }
        for (int k = 0; k < CHAOS_SETS; k++) {
            snprintf(key, sizeof key, "chaos-s-%d", k);
            key_json(&b, cl[i], key, &first);
        }
        key_json(&b, cl[i], CHAOS_MAP, &first);
        shoal_buf_append(&b, "}}", 2);
    }
    shoal_buf_append(&b, "],\"entities\":{", 14);
    for (int e = 0; entities && e < n_entities; e++) {
        char entity[32];
        snprintf(entity, sizeof entity, "acct-%d", e);
        shoal_buf_printf(&b, "%s\"%s\":", e ? "," : "", entity);
        bool done = false, giveup = false;
        char last[128] = "no node answered";
        for (int i = 0; i < n_nodes && !done && !giveup; i++) {
            if (!cl[i])
                continue;
            shoal_buf_t reply;
            shoal_buf_init(&reply);
            uint16_t kind = 0;
            int rc = shoal_client_request(cl[i], CHAOS_KIND_STATE, entity, strlen(entity), &kind,
                                          &reply, 7000);
            const char *t = rc == 0 ? shoal_buf_cstr(&reply) : "";
            uint64_t dups = 0, n = 0;
            if (rc == 0 && sscanf(t, "ok %" SCNu64 " %" SCNu64, &dups, &n) == 2) {
                shoal_buf_printf(&b, "{\"node\":%d,\"dups\":%" PRIu64 ",\"n\":%" PRIu64
                                     ",\"ids\":[",
                                 i, dups, n);
                const char *p = strchr(t, '\n');
                bool first = true;
                while (p && p[1]) {
                    const char *q = strchr(p + 1, '\n');
                    if (!q)
                        break;
                    if (!first)
                        shoal_buf_append(&b, ",", 1);
                    first = false;
                    json_str(&b, p + 1, (size_t)(q - p - 1));
                    p = q;
                }
                shoal_buf_append(&b, "]}", 2);
                done = true;
            } else {
                snprintf(last, sizeof last, "%s", rc ? shoal_strerror(rc) : t);
                if (rc == 0) {
                    giveup = true; /* the entity's shard did not answer: another node's ask
                                      would not either (the shard lives in one place) */
                } else {
                    shoal_client_destroy(&cl[i]);
                    int e2 = 0;
                    cl[i] = shoal_client_new(nodes[i], REQUEST_TIMEOUT_MS, &e2);
                }
            }
            shoal_buf_free(&reply);
        }
        if (!done) {
            shoal_buf_append(&b, "{\"err\":", 7);
            json_str(&b, last, strlen(last));
            shoal_buf_append(&b, "}", 1);
        }
    }
    shoal_buf_append(&b, "}}\n", 3);
    fwrite(b.data, 1, b.len, stdout);
    shoal_buf_free(&b);
    for (int i = 0; i < n_nodes; i++)
        shoal_client_destroy(&cl[i]);
    return 0;
}

static int simple_request(const char *ep, uint16_t kind, const char *text)
{
    int rc = 0;
    shoal_client_t *c = shoal_client_new(ep, REQUEST_TIMEOUT_MS, &rc);
    if (!c) {
        fprintf(stderr, "chaos-client: %s: %s\n", ep, shoal_strerror(rc));
        return 1;
    }
    shoal_buf_t reply;
    shoal_buf_init(&reply);
    uint16_t rk = 0;
    rc = shoal_client_request(c, kind, text, strlen(text), &rk, &reply, REQUEST_TIMEOUT_MS);
    int ex = 1;
    if (rc != 0) {
        fprintf(stderr, "chaos-client: %s: %s\n", ep, shoal_strerror(rc));
    } else {
        printf("%s\n", shoal_buf_cstr(&reply));
        ex = strncmp(shoal_buf_cstr(&reply), "ok", 2) ? 1 : 0;
    }
    shoal_buf_free(&reply);
    shoal_client_destroy(&c);
    return ex;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: chaos-client run --nodes EP,EP,... --duration SECONDS --log FILE "
               "[--workers W] [--entities E] [--run-id ID] [--seed N] [--pause-ms MS]\n"
               "       chaos-client check --nodes EP,EP,... [--entities E]\n"
               "       chaos-client fault EP SPEC\n"
               "       chaos-client info EP\n"
               "       chaos-client --help | --version\n");
}

int main(int argc, char **argv)
{
    int cli = cli_help_or_version(&argc, argv, "chaos-client", usage);
    if (cli >= 0)
        return cli;
    if (argc < 2)
        return cli_usage_error(usage);
    const char *mode = argv[1];
    if (!strcmp(mode, "fault") && argc == 4)
        return simple_request(argv[2], CHAOS_KIND_FAULT, argv[3]);
    if (!strcmp(mode, "info") && argc == 3)
        return simple_request(argv[2], CHAOS_KIND_INFO, "");
    if (strcmp(mode, "run") && strcmp(mode, "check"))
        return cli_refuse(usage, "chaos-client: unknown mode or option '%s' (or wrong arguments)",
                          mode);
    int workers = 4, duration = 0;
    unsigned seed = 1;
    const char *logpath = NULL;
    bool entities = false;
    char *list = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            return cli_refuse(usage, "chaos-client: '%s' without a value (every option takes one)", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--nodes"))
            list = strdup(v);
        else if (!strcmp(a, "--duration"))
            duration = atoi(v);
        else if (!strcmp(a, "--log"))
            logpath = v;
        else if (!strcmp(a, "--workers"))
            workers = atoi(v);
        else if (!strcmp(a, "--entities"))
            n_entities = atoi(v), entities = true;
        else if (!strcmp(a, "--run-id"))
            run_id = v;
        else if (!strcmp(a, "--seed"))
            seed = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--pause-ms"))
            pause_ms = atoi(v);
        else
            return cli_refuse(usage, "chaos-client: unknown option or bad value: '%s %s'", a, v);
    }
    if (!list || split_nodes(list) == 0)
        return cli_refuse(usage, "chaos-client: --nodes LIST is required (comma-separated)");
    if (n_entities <= 0)
        return cli_refuse(usage, "chaos-client: --entities must be at least 1");
    int ex;
    if (!strcmp(mode, "run") && duration > 0 && logpath && workers > 0 && workers <= 64)
        ex = run_mode(workers, duration, logpath, seed);
    else if (!strcmp(mode, "check"))
        ex = check_mode(entities);
    else
        ex = cli_refuse(usage, "chaos-client: run needs --duration > 0, --log and 1..64 --workers");
    free(list);
    return ex;
}
