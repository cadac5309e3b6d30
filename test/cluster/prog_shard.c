/*  prog_shard.c — a sharding member in its own process, for tests that SIGKILL members or cut
    them off: prog_shard PORT SEED_PORT EVENTS_FILE [shards=N] [stop_delay=MS] [stable=MS].
    SEED_PORT 0 forms a new cluster. It runs membership (test settings) and one entity type,
    SHARDPROCS_TYPE, whose entities count the messages they get and answer "ping" with where
    they run. Every entity start and stop is appended to EVENTS_FILE; the test drives it with the
    commands of shardprocs.h. stop_delay makes an entity take that long to obey the stop message,
    so a handoff lasts long enough to be caught in the middle. SIGTERM: orderly shutdown (hands
    the shards off), exit 0; downed or removed: exit 0 once its cluster part stopped.
*/
#include "members.h"
#include "shardprocs.h"
#include "sharding.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t term_asked;
static int events_fd = -1;
static uint32_t stop_delay_ms;
static int self_port;
static shoal_system_t *sys;
static shoal_cluster_t *cluster;
static shoal_sharding_t *sharding;
static shoal_region_t *region;

static void on_term(int sig)
{
    (void)sig;
    term_asked = 1;
}

/* ---------------------------------------------------------------------------------------------
 * Events
 */
static void log_event(const char *what, const char *eid, const char *shard)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[SHOAL_ENTITY_ID_MAX + SHOAL_SHARD_ID_MAX + 64];
    int n = snprintf(line, sizeof line, "%lld %d %s %s %s\n",
                     (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, (int)getpid(), what, eid,
                     shard);
    /* one write per line: O_APPEND keeps the lines of all processes whole */
    if (write(events_fd, line, (size_t)n) != n)
        fprintf(stderr, "prog_shard: events file: %s\n", strerror(errno));
}

/* ---------------------------------------------------------------------------------------------
 * Entities (node thread)
 */
typedef struct ent {
    struct ent *next, *prev;
    shoal_entity_t *e;
    char id[SHOAL_ENTITY_ID_MAX + 1];
    uint64_t count;
    bool stopping; /* got the stop message, stops after stop_delay */
} ent_t;

static ent_t *live;
static int n_stopping; /* read by the command thread */

/* A delayed stop waiting for its timer (freed at exit when the node stopped first). */
typedef struct delayed {
    struct delayed *next, *prev;
    char id[SHOAL_ENTITY_ID_MAX + 1];
} delayed_t;
static delayed_t *delayed;

static void *ent_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    ent_t *x = calloc(1, sizeof *x);
    if (!x)
        abort();
    x->e = e;
    snprintf(x->id, sizeof x->id, "%s", shoal_entity_id(e));
    x->next = live;
    if (live)
        live->prev = x;
    live = x;
    log_event("start", x->id, shoal_entity_shard(e));
    return x;
}

static void ent_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)arg;
    ent_t *x = state;
    log_event("stop", x->id, shoal_entity_shard(e));
    if (x->stopping)
        __atomic_sub_fetch(&n_stopping, 1, __ATOMIC_SEQ_CST);
    if (x->prev)
        x->prev->next = x->next;
    else
        live = x->next;
    if (x->next)
        x->next->prev = x->prev;
    free(x);
}

static void delayed_stop(shoal_system_t *s, void *arg)
{
    (void)s;
    delayed_t *d = arg;
    if (d->prev)
        d->prev->next = d->next;
    else
        delayed = d->next;
    if (d->next)
        d->next->prev = d->prev;
    /* the entity may have been stopped by force meanwhile, and a new incarnation started */
    for (ent_t *x = live; x; x = x->next)
        if (x->stopping && strcmp(x->id, d->id) == 0) {
            shoal_entity_stop(x->e);
            break;
        }
    free(d);
}

static void ent_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)arg;
    ent_t *x = state;
    if (len == strlen(SHARDPROCS_STOP_MSG) && memcmp(msg, SHARDPROCS_STOP_MSG, len) == 0) {
        if (!stop_delay_ms || x->stopping) {
            if (!x->stopping)
                shoal_entity_stop(e);
            return;
        }
        delayed_t *d = calloc(1, sizeof *d);
        if (!d)
            abort();
        snprintf(d->id, sizeof d->id, "%s", x->id);
        if (shoal_system_timer(sys, stop_delay_ms, false, delayed_stop, d) < 0) {
            free(d);
            shoal_entity_stop(e);
            return;
        }
        d->next = delayed;
        if (delayed)
            delayed->prev = d;
        delayed = d;
        x->stopping = true;
        __atomic_add_fetch(&n_stopping, 1, __ATOMIC_SEQ_CST);
        return;
    }
    x->count++;
    if (len == 4 && memcmp(msg, "ping", 4) == 0) {
        char reply[64];
        int n = snprintf(reply, sizeof reply, "%d %d %llu", (int)getpid(), self_port,
                         (unsigned long long)x->count);
        shoal_entity_reply(e, reply, (size_t)n);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Commands: the request handler queues them, the main thread runs them (some block), replies go
 * out on the node thread
 */
typedef struct cmd {
    struct cmd *next;
    shoal_reply_to_t to;
    char text[];
} cmd_t;

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static cmd_t *qhead, *qtail;

static void on_request(shoal_system_t *s, const shoal_reply_to_t *to, uint16_t kind,
                       const uint8_t *data, size_t len, void *arg)
{
    (void)s;
    (void)kind;
    (void)arg;
    cmd_t *c = malloc(sizeof *c + len + 1);
    if (!c)
        abort();
    c->next = NULL;
    c->to = *to;
    memcpy(c->text, data, len);
    c->text[len] = 0;
    pthread_mutex_lock(&qlock);
    if (qtail)
        qtail->next = c;
    else
        qhead = c;
    qtail = c;
    pthread_cond_signal(&qcond);
    pthread_mutex_unlock(&qlock);
}

typedef struct {
    shoal_reply_to_t to;
    shoal_buf_t *text;
} reply_t;

static int reply_on_node(shoal_system_t *s, void *arg)
{
    reply_t *r = arg;
    shoal_system_reply(s, &r->to, SHARDPROCS_KIND_CMD, r->text->data, r->text->len);
    return 0;
}

static void reply(const shoal_reply_to_t *to, shoal_buf_t *text)
{
    reply_t r = {*to, text};
    shoal_system_call(sys, reply_on_node, &r);
}

/* A batch of asks answered in one reply by whichever completion comes last. */
typedef struct batch batch_t;
typedef struct {
    batch_t *b;
    char eid[SHOAL_ENTITY_ID_MAX + 1];
    char result[96];
} slot_t;
struct batch {
    shoal_reply_to_t to;
    int pending; /* asks not done, plus one held by the issuing thread */
    size_t n;
    slot_t slots[];
};

static void batch_reply_on_node(batch_t *b)
{
    shoal_buf_t out = {0};
    for (size_t i = 0; i < b->n; i++)
        shoal_buf_printf(&out, "%s %s\n", b->slots[i].eid, b->slots[i].result);
    shoal_system_reply(sys, &b->to, SHARDPROCS_KIND_CMD, out.data, out.len);
    shoal_buf_free(&out);
    free(b);
}

static int batch_reply_call(shoal_system_t *s, void *arg)
{
    (void)s;
    batch_reply_on_node(arg);
    return 0;
}

static void ask_done(shoal_region_t *r, int status, const void *data, size_t len, void *arg)
{
    (void)r;
    slot_t *sl = arg;
    if (status == 0)
        snprintf(sl->result, sizeof sl->result, "ok %.*s", (int)(len < 80 ? len : 80),
                 (const char *)data);
    else
        snprintf(sl->result, sizeof sl->result, "err %d", status);
    if (__atomic_sub_fetch(&sl->b->pending, 1, __ATOMIC_SEQ_CST) == 0)
        batch_reply_on_node(sl->b);
}

static void cmd_ask(const shoal_reply_to_t *to, char *args)
{
    char *save = NULL;
    char *tok = strtok_r(args, " ", &save);
    uint32_t timeout = tok ? (uint32_t)strtoul(tok, NULL, 10) : 0;
    size_t cap = 0;
    for (const char *p = save; p && *p; p++)
        cap += *p == ' ';
    cap += 1;
    batch_t *b = calloc(1, sizeof *b + cap * sizeof(slot_t));
    if (!b)
        abort();
    b->to = *to;
    b->pending = 1;
    while ((tok = strtok_r(NULL, " ", &save)) && b->n < cap) {
        slot_t *sl = &b->slots[b->n++];
        sl->b = b;
        snprintf(sl->eid, sizeof sl->eid, "%s", tok);
        __atomic_add_fetch(&b->pending, 1, __ATOMIC_SEQ_CST);
        int rc = shoal_region_ask(region, sl->eid, "ping", 4, timeout ? timeout : 1000, ask_done,
                                  sl);
        if (rc != 0) {
            snprintf(sl->result, sizeof sl->result, "err %d", rc);
            __atomic_sub_fetch(&b->pending, 1, __ATOMIC_SEQ_CST);
        }
    }
    if (__atomic_sub_fetch(&b->pending, 1, __ATOMIC_SEQ_CST) == 0)
        shoal_system_call(sys, batch_reply_call, b);
}

static void cmd_view(shoal_buf_t *out)
{
    shoal_cluster_view_t v;
    if (shoal_cluster_view(cluster, &v) != 0) {
        shoal_buf_printf(out, "err no view\n");
        return;
    }
    shoal_buf_printf(out, "self %s %d %d\n", shoal_node_id(v.self),
                     (int)shoal_cluster_self_status(cluster), v.may_act ? 1 : 0);
    shoal_buf_printf(out, "leader %s\n", v.leader ? shoal_node_id(v.leader) : "-");
    shoal_buf_printf(out, "converged %d\n", v.converged ? 1 : 0);
    for (size_t i = 0; i < v.n_members; i++)
        shoal_buf_printf(out, "member %s %u %d %llu %d\n", shoal_node_id(v.members[i].node),
                         (unsigned)shoal_node_port(v.members[i].node), (int)v.members[i].status,
                         (unsigned long long)v.members[i].up_number,
                         v.members[i].reachable ? 1 : 0);
    shoal_cluster_view_free(&v);
}

static void cmd_stats(shoal_buf_t *out)
{
    shoal_region_stats_t st;
    if (shoal_region_stats(region, &st) != 0) {
        shoal_buf_printf(out, "err no stats\n");
        return;
    }
    uint64_t dead = 0;
    for (int i = 0; i < SHOAL_DL_REASONS; i++)
        dead += st.dead_letters[i];
#define S(f) shoal_buf_printf(out, #f " %llu\n", (unsigned long long)st.f)
    S(shards);
    S(entities);
    S(shards_started);
    S(shards_stopped);
    S(shards_refused_stale);
    S(entities_forced);
    S(handoffs);
    S(home_requests);
    S(asks_timed_out);
    S(allocations);
    S(rebalance_rounds);
    S(shards_moved);
    S(state_reads);
    S(state_writes);
    S(state_write_retries);
#undef S
    shoal_buf_printf(out, "dead_letters %llu\n", (unsigned long long)dead);
    shoal_buf_printf(out, "stopping %d\n", __atomic_load_n(&n_stopping, __ATOMIC_SEQ_CST));
}

static void run(cmd_t *c)
{
    shoal_buf_t out = {0};
    char *save = NULL;
    char *verb = strtok_r(c->text, " ", &save);
    if (!verb) {
        shoal_buf_printf(&out, "err empty\n");
    } else if (strcmp(verb, "ask") == 0) {
        cmd_ask(&c->to, save);
        return; /* the last completion answers */
    } else if (strcmp(verb, "view") == 0) {
        cmd_view(&out);
    } else if (strcmp(verb, "healthy") == 0) {
        shoal_buf_printf(&out, "%d\n", shoal_sharding_healthy(sharding, NULL, 0) ? 1 : 0);
    } else if (strcmp(verb, "tell") == 0) {
        int ok = 0, refused = 0;
        for (char *t; (t = strtok_r(NULL, " ", &save));)
            *(shoal_region_tell(region, t, "inc", 3) == 0 ? &ok : &refused) += 1;
        shoal_buf_printf(&out, "ok %d %d\n", ok, refused);
    } else if (strcmp(verb, "state") == 0) {
        shoal_region_state_t st;
        if (shoal_region_state(region, false, &st) == 0) {
            for (size_t i = 0; i < st.n_shards; i++)
                shoal_buf_printf(&out, "shard %s %zu\n", st.shards[i].id,
                                 st.shards[i].n_entities);
            shoal_region_state_free(&st);
        }
    } else if (strcmp(verb, "stats") == 0) {
        cmd_stats(&out);
    } else if (strcmp(verb, "cut") == 0) {
        shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .cut = true};
        int rc = 0;
        for (char *t; (t = strtok_r(NULL, " ", &save));) {
            char ep[64];
            snprintf(ep, sizeof ep, "tcp://127.0.0.1:%s", t);
            if (rc == 0)
                rc = shoal_system_fault(sys, ep, &f);
        }
        shoal_buf_printf(&out, rc == 0 ? "ok\n" : "err %d\n", rc);
    } else if (strcmp(verb, "heal") == 0) {
        shoal_buf_printf(&out, "ok %d\n", shoal_system_heal(sys));
    } else {
        shoal_buf_printf(&out, "err unknown command %s\n", verb);
    }
    reply(&c->to, &out);
    shoal_buf_free(&out);
}

static cmd_t *next_cmd(void)
{
    pthread_mutex_lock(&qlock);
    if (!qhead) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 20 * 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&qcond, &qlock, &dl);
    }
    cmd_t *c = qhead;
    if (c) {
        qhead = c->next;
        if (!qhead)
            qtail = NULL;
    }
    pthread_mutex_unlock(&qlock);
    return c;
}

static int register_cmd(shoal_system_t *s, void *arg)
{
    (void)arg;
    return shoal_system_register_request(s, SHARDPROCS_KIND_CMD, on_request, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: prog_shard PORT SEED_PORT EVENTS_FILE [shards=N] "
                        "[stop_delay=MS] [stable=MS]\n");
        return 2;
    }
    uint32_t shards = 40, stable = 0;
    for (int i = 4; i < argc; i++) {
        if (strncmp(argv[i], "shards=", 7) == 0)
            shards = (uint32_t)atoi(argv[i] + 7);
        else if (strncmp(argv[i], "stop_delay=", 11) == 0)
            stop_delay_ms = (uint32_t)atoi(argv[i] + 11);
        else if (strncmp(argv[i], "stable=", 7) == 0)
            stable = (uint32_t)atoi(argv[i] + 7);
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    events_fd = open(argv[3], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (events_fd < 0) {
        fprintf(stderr, "prog_shard: %s: %s\n", argv[3], strerror(errno));
        return 1;
    }
    self_port = atoi(argv[1]);
    char ep[64], seed[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%s", argv[1]);
    if (strcmp(argv[2], "0") == 0)
        snprintf(seed, sizeof seed, "%s", ep);
    else
        snprintf(seed, sizeof seed, "tcp://127.0.0.1:%s", argv[2]);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = ep;
    int err = 0;
    sys = shoal_system_new(&ss, &err);
    if (!sys) {
        fprintf(stderr, "prog_shard: cannot start on %s: %s\n", ep, shoal_strerror(err));
        return 1;
    }
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    if (stable)
        cs.stable_after_ms = stable;
    cluster = shoal_cluster_new(sys, &cs, &err);
    sharding = cluster ? shoal_sharding_new(cluster, &err) : NULL;
    shoal_sharding_settings_t s;
    shoal_sharding_settings_fast(&s);
    s.number_of_shards = shards;
    s.stop_message = SHARDPROCS_STOP_MSG;
    s.stop_message_len = strlen(SHARDPROCS_STOP_MSG);
    shoal_entity_fns_t fns = {.start = ent_start, .receive = ent_receive, .stop = ent_stop};
    region = sharding ? shoal_region_start(sharding, SHARDPROCS_TYPE, &s, &fns, NULL, &err)
                      : NULL;
    if (!region || shoal_system_call(sys, register_cmd, NULL) != 0) {
        fprintf(stderr, "prog_shard: %s\n", shoal_strerror(err));
        return 1;
    }
    const char *seeds[1] = {seed};
    shoal_cluster_join(cluster, seeds, 1);
    printf("READY %s\n", shoal_node_id(shoal_system_self(sys)));
    fflush(stdout);
    bool shutting_down = false;
    int64_t give_up = 0;
    while (!shoal_cluster_terminated(cluster)) {
        if (term_asked && !shutting_down) {
            shutting_down = true;
            shoal_cluster_shutdown(cluster);
            give_up = shoal_now_ms() + 30000;
        }
        if (shutting_down && shoal_now_ms() > give_up)
            break;
        cmd_t *c = next_cmd();
        if (c) {
            run(c);
            free(c);
        }
    }
    shoal_sharding_destroy(&sharding);
    shoal_cluster_destroy(&cluster);
    shoal_system_destroy(&sys);
    for (cmd_t *c = qhead, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    for (delayed_t *d = delayed, *n; d; d = n) {
        n = d->next;
        free(d);
    }
    close(events_fd);
    return 0;
}
