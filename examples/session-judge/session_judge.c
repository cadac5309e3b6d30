/*  session-judge — game events read from a partitioned log (Redis Streams) and routed by game to
    judge entities, while judge nodes come and go (the seeds' session-routing article).

      session-judge [--games G] [--events-per-game E] [--partitions P] [--nodes K]
                    [--base-port B] [--short] [--bench] [--keep]
      session-judge --node --bind EP [--seed EP] --redis PORT --index I --partitions P --dir DIR
                    [--http [HOST:]PORT] [--config FILE]      one judge node (started by the run;
                                                              --http: its management endpoint,
                                                              docs/operations.md)
    EP: HOST:PORT or tcp://HOST:PORT (HOST an address or a name, resolved: the node id records
    the address; cli.h, NODE ADDRESSES). --config FILE: a ZPL settings file (docs/configuration.md;
    the sections shoal/remote, shoal/cluster, shoal/cluster/sharding and shoal/management/http)
    read before the flags, which win over it. The node keeps its role "judge" (the file's roles
    are added to it) and its types' shard counts; --seed replaces the file's seeds or discovery,
    and without --seed the file must name them.
      session-judge --help | --version

    THE LOG. Game servers (here: a thread of the driver) append each game's events — game id,
    sequence number, player, action — to a Redis stream `events:<p>`, p = hash(game) mod P, so one
    game stays in one partition and in order. Redis Streams has no consumer-group rebalancing
    across partitions, so the judge cluster assigns partitions itself: one READER per partition,
    the workers "0".."P-1" of a sharded daemon process, placed by sharding and moved when nodes
    come and go. A reader runs its own thread: it reads its stream from the partition's committed
    offset (`offset:<p>` in Redis), asks each event's judge (entity type "judge", entity id = the
    game) and commits the offset only once every judge of the batch has answered; a reader that
    moves starts again from the committed offset, so an event may come twice, never not at all.

    THE JUDGE of a game checks that it sees every sequence number in order (a repeat is counted and
    ignored, a skipped number is a gap, a skipped number that comes later is a reorder), flags a
    player who stands still right after being attacked, and keeps all this as its entity state
    (saved before it answers), so a judge that moves to another node goes on from where it was.

    THE WITNESSES. Each judge node appends to <dir>/node<i>.events, independently of the judges'
    state: one line per judge incarnation when it stops (node, first and last event time on
    CLOCK_MONOTONIC in µs, the sequence numbers it judged), and the shard-moved events it saw while
    it ran the coordinator (they are raised on the coordinator's node only, so every node listens
    and the driver merges). From the incarnation lines the driver checks that no two incarnations
    of one game's judge judged at overlapping times — two judges of one game at once would each
    keep a state of their own, so the surviving state could not show it.

    THE RUN: the driver (a member with the role "client", proxies only) starts redis-server on a
    free port in a temp directory and K judge nodes (3); while the events flow it starts node K+1
    and asks node 1 to leave (graceful: its shards and readers hand off), so that partitions and
    games move between nodes. At the end: every game's judge saw all its events in order (0 gaps,
    0 reorders), no two incarnations of one judge overlapped, the moves are listed. Exit 0 only
    when every check holds.

    PORTS: the driver's node on 127.0.0.1:B, judge node i (1..K+1) on B + i, redis-server on
    B + 20; each node's heartbeat takes an ephemeral port besides. --base-port gives B (refused
    when one of those ports is taken); without it the driver looks for a free block of 25 from
    20000 on, starting at one derived from its process id.
*/
#include "cli.h"
#include "sharding.h"

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROLE           "judge"
#define MAX_NODES      8     /* judge nodes at the start (--nodes); one more joins */
#define ASK_TIMEOUT_MS 10000 /* a judge in handoff answers late, not never */

static volatile sig_atomic_t stop;
static shoal_region_t *judge_r, *reader_r;
static int redis_port;
static int node_index;   /* this judge node's number (1..), for the witnesses */
static FILE *events_out; /* <dir>/node<i>.events (judge nodes) */

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t mono_ms(void)
{
    return mono_us() / 1000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static unsigned partition_of(const char *game, unsigned parts)
{
    unsigned h = 2166136261u;
    for (const char *p = game; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h % parts;
}

/* ---------------------------------------------------------------------------------------------
 * The judge of one game
 */
#define SKIPPED_MAX 8 /* skipped numbers remembered, to tell a late one (reorder) from a repeat */

typedef struct {
    /* stored (the entity state, as text) */
    long last, dups, gaps, reorders, flags, events;
    int attacked; /* player just attacked, -1: none */
    int n_skipped;
    long skipped[SKIPPED_MAX];
    /* this incarnation only: its witness line */
    char game[SHOAL_ENTITY_ID_MAX + 1];
    long inc;
    int64_t first_us, last_us;
    long lo, hi, judged;
} judge_t;

static long next_inc;

static void judge_text(const judge_t *j, shoal_buf_t *b)
{
    shoal_buf_reset(b);
    shoal_buf_printf(b, "%ld %ld %ld %ld %ld %ld %d %d", j->last, j->dups, j->gaps, j->reorders,
                     j->flags, j->events, j->attacked, j->n_skipped);
    for (int i = 0; i < j->n_skipped; i++)
        shoal_buf_printf(b, " %ld", j->skipped[i]);
}

/* A state that does not parse (not ours, damaged) starts the judge afresh: counted as events
   again, it shows in the summary instead of crashing the node. */
static bool judge_parse(judge_t *j, const char *s)
{
    int off = 0;
    if (sscanf(s, "%ld %ld %ld %ld %ld %ld %d %d%n", &j->last, &j->dups, &j->gaps, &j->reorders,
               &j->flags, &j->events, &j->attacked, &j->n_skipped, &off) != 8 ||
        j->n_skipped < 0 || j->n_skipped > SKIPPED_MAX)
        goto bad;
    s += off;
    for (int i = 0; i < j->n_skipped; i++) {
        int n = 0;
        if (sscanf(s, " %ld%n", &j->skipped[i], &n) != 1)
            goto bad;
        s += n;
    }
    return true;
bad:
    j->last = j->dups = j->gaps = j->reorders = j->flags = j->events = 0;
    j->attacked = -1;
    j->n_skipped = 0;
    return false;
}

static void *judge_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    judge_t *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->attacked = -1;
    size_t len = 0;
    const char *s = shoal_entity_stored(e, &len);
    if (s && len) {
        char *c = malloc(len + 1);
        if (c) {
            memcpy(c, s, len);
            c[len] = 0;
            if (!judge_parse(j, c))
                fprintf(stderr, "session-judge: judge %s: stored state unreadable, starts afresh\n",
                        shoal_entity_id(e));
            free(c);
        }
    }
    snprintf(j->game, sizeof j->game, "%s", shoal_entity_id(e));
    j->inc = ++next_inc * 100 + node_index; /* unique in the run: node numbers are < 100 */
    return j;
}

static void judge_event(shoal_entity_t *e, judge_t *j, long seq, int player, const char *action)
{
    shoal_buf_t b = {0};
    if (seq <= j->last) {
        for (int i = 0; i < j->n_skipped; i++)
            if (j->skipped[i] == seq) {
                /* a number skipped earlier comes now: out of order */
                j->skipped[i] = j->skipped[--j->n_skipped];
                j->reorders++;
                judge_text(j, &b);
                shoal_entity_save_reply(e, b.data, b.len, "ok", 2);
                shoal_buf_free(&b);
                return;
            }
        j->dups++; /* read again after a reader moved: already judged */
        shoal_entity_reply(e, "ok", 2);
        return;
    }
    for (long s = j->last + 1; s < seq; s++) {
        j->gaps++;
        if (j->n_skipped < SKIPPED_MAX)
            j->skipped[j->n_skipped++] = s;
    }
    j->last = seq;
    j->events++;
    int victim;
    if (sscanf(action, "attack:%d", &victim) == 1)
        j->attacked = victim;
    else if (!strcmp(action, "still") && player == j->attacked)
        j->flags++, j->attacked = -1; /* stood still under attack */
    else if (!strcmp(action, "move") && player == j->attacked)
        j->attacked = -1;
    int64_t now = mono_us();
    if (!j->judged)
        j->first_us = now, j->lo = seq;
    j->last_us = now;
    j->hi = seq;
    j->judged++;
    judge_text(j, &b);
    shoal_entity_save_reply(e, b.data, b.len, "ok", 2);
    shoal_buf_free(&b);
}

static void judge_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)arg;
    judge_t *j = state;
    char m[128];
    size_t n = len < sizeof m - 1 ? len : sizeof m - 1;
    memcpy(m, msg, n);
    m[n] = 0;
    long seq;
    int player;
    char action[32];
    if (!j) {
        shoal_entity_reply(e, "no memory", 9);
    } else if (sscanf(m, "ev:%ld:%d:%31s", &seq, &player, action) == 3 && seq > 0) {
        judge_event(e, j, seq, player, action);
    } else if (!strcmp(m, "report")) {
        shoal_buf_t b = {0};
        judge_text(j, &b);
        shoal_entity_reply(e, b.data, b.len);
        shoal_buf_free(&b);
    } else {
        shoal_entity_reply(e, "bad message", 11); /* the asker is not left waiting */
    }
}

static void judge_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e, (void)arg;
    judge_t *j = state;
    if (j && j->judged && events_out)
        fprintf(events_out, "judge %s %ld %d %lld %lld %ld %ld %ld\n", j->game, j->inc, node_index,
                (long long)j->first_us, (long long)j->last_us, j->lo, j->hi, j->judged);
    free(j);
}

/* ---------------------------------------------------------------------------------------------
 * A reader of one partition: a daemon worker with a thread of its own
 */
typedef struct {
    int partition;
    atomic_int stop; /* set on the node thread by reader_stop */
    atomic_int refs; /* the entity and the thread: either may end first, the last frees */
} reader_t;

static void reader_release(reader_t *rd)
{
    if (atomic_fetch_sub(&rd->refs, 1) == 1)
        free(rd);
}

static atomic_int readers_running; /* reader threads alive on this node */
static atomic_int readers_halt;    /* the node is going: every reader thread ends */

static bool reader_halted(reader_t *rd)
{
    return atomic_load(&rd->stop) || atomic_load(&readers_halt);
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, failed;
} batch_t;

static void batch_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    batch_t *b = arg;
    pthread_mutex_lock(&b->mu);
    if (status != 0 || len != 2 || memcmp(reply, "ok", 2) != 0)
        b->failed++;
    if (--b->pending == 0)
        pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static const char *field(const redisReply *kv, const char *name)
{
    if (!kv || kv->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < kv->elements; i += 2)
        if (kv->element[i]->type == REDIS_REPLY_STRING && !strcmp(kv->element[i]->str, name) &&
            kv->element[i + 1]->type == REDIS_REPLY_STRING)
            return kv->element[i + 1]->str;
    return NULL;
}

/* The entries of an XREAD reply for one stream ([[name, [[id, [k, v, ...]], ...]]]), or NULL. */
static const redisReply *stream_entries(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1)
        return NULL;
    const redisReply *s = r->element[0];
    if (s->type != REDIS_REPLY_ARRAY || s->elements < 2 || s->element[1]->type != REDIS_REPLY_ARRAY)
        return NULL;
    return s->element[1];
}

static redisContext *redis_open(int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && !c->err && redisSetTimeout(c, tv) == REDIS_OK)
        return c;
    if (c)
        redisFree(c);
    return NULL;
}

/* Sends one XREAD batch to the judges and waits for every answer; true when all said ok. An ask
   refused at once ends the batch there: the later events of its game must not overtake it. */
static bool judge_batch(const redisReply *entries, char *newest, size_t cap)
{
    batch_t b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1,
                 0}; /* 1: held until every ask is out */
    for (size_t i = 0; i < entries->elements; i++) {
        const redisReply *ent = entries->element[i];
        if (ent->type != REDIS_REPLY_ARRAY || ent->elements < 2 ||
            ent->element[0]->type != REDIS_REPLY_STRING)
            continue;
        snprintf(newest, cap, "%s", ent->element[0]->str);
        const redisReply *kv = ent->element[1];
        const char *game = field(kv, "game"), *seq = field(kv, "seq");
        const char *player = field(kv, "player"), *action = field(kv, "action");
        if (!game || !seq || !player || !action)
            continue; /* not an event of ours: skipped */
        char m[128];
        int n = snprintf(m, sizeof m, "ev:%s:%s:%s", seq, player, action);
        if (n < 0 || (size_t)n >= sizeof m)
            continue;
        pthread_mutex_lock(&b.mu);
        b.pending++;
        pthread_mutex_unlock(&b.mu);
        if (shoal_region_ask(judge_r, game, m, (size_t)n, ASK_TIMEOUT_MS, batch_done, &b) != 0) {
            batch_done(judge_r, SHOAL_EBUFFER, NULL, 0, &b);
            break;
        }
    }
    pthread_mutex_lock(&b.mu);
    b.pending--; /* every ask is out: the hold goes */
    while (b.pending > 0)
        pthread_cond_wait(&b.cv, &b.mu);
    int failed = b.failed;
    pthread_mutex_unlock(&b.mu);
    pthread_mutex_destroy(&b.mu);
    pthread_cond_destroy(&b.cv);
    return failed == 0;
}

static void *reader_main(void *arg)
{
    reader_t *rd = arg;
    redisContext *c = NULL;
    char last[64] = "";
    while (!reader_halted(rd)) {
        if (!c) {
            /* (re)connect, and start from the committed offset */
            if (!(c = redis_open(redis_port))) {
                fprintf(stderr, "session-judge: reader %d: cannot reach redis on port %d\n",
                        rd->partition, redis_port);
                sleep_ms(200);
                continue;
            }
            redisReply *r = redisCommand(c, "GET offset:%d", rd->partition);
            snprintf(last, sizeof last, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "0-0");
            freeReplyObject(r);
            freeReplyObject(redisCommand(c, "RPUSH readers %d:%d:%lld:%s", rd->partition,
                                         node_index, (long long)mono_ms(), last));
        }
        redisReply *r =
            redisCommand(c, "XREAD COUNT 200 BLOCK 100 STREAMS events:%d %s", rd->partition, last);
        const redisReply *entries = stream_entries(r);
        if (!entries || entries->elements == 0) {
            freeReplyObject(r);
            if (c->err) {
                redisFree(c);
                c = NULL;
            }
            continue;
        }
        char newest[64] = "";
        bool ok = judge_batch(entries, newest, sizeof newest);
        freeReplyObject(r);
        if (!ok) {
            /* some judge did not answer (moving, buffer full): the batch again from the committed
               offset; the judges ignore what they have seen */
            sleep_ms(100);
            continue;
        }
        /* a halted reader is no longer the partition's: the new one owns the offset */
        if (newest[0] && !reader_halted(rd)) {
            snprintf(last, sizeof last, "%s", newest);
            freeReplyObject(redisCommand(c, "SET offset:%d %s", rd->partition, last));
        }
    }
    if (c)
        redisFree(c);
    reader_release(rd);
    atomic_fetch_sub(&readers_running, 1);
    return NULL;
}

static void *reader_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    reader_t *rd = calloc(1, sizeof *rd);
    if (!rd)
        return NULL;
    rd->partition = atoi(shoal_entity_id(e));
    atomic_init(&rd->stop, 0);
    atomic_init(&rd->refs, 2);
    atomic_fetch_add(&readers_running, 1);
    pthread_t th;
    if (pthread_create(&th, NULL, reader_main, rd) != 0) {
        atomic_fetch_sub(&readers_running, 1);
        free(rd);
        fprintf(stderr, "session-judge: reader %s: no thread\n", shoal_entity_id(e));
        return NULL;
    }
    pthread_detach(th);
    return rd;
}

static void reader_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)e, (void)state, (void)msg, (void)len, (void)arg;
}

static void reader_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e, (void)arg;
    reader_t *rd = state;
    if (rd) {
        atomic_store(&rd->stop, 1); /* the thread ends after its batch (≤ 100 ms when idle) */
        reader_release(rd);
    }
}

static const shoal_entity_fns_t judge_fns = {judge_start, judge_receive, judge_stop, NULL};
static const shoal_entity_fns_t reader_fns = {reader_start, reader_receive, reader_stop, NULL};

/* shard-moved events come on the coordinator's node only: each node writes what it sees */
static void on_shard_moved(shoal_region_t *r, const char *shard, const shoal_node_t *from,
                           const shoal_node_t *to, void *arg)
{
    (void)arg;
    if (events_out)
        fprintf(events_out, "moved %s %s %d %d %lld\n", shoal_region_type_name(r), shard,
                from ? shoal_node_port(from) : 0, to ? shoal_node_port(to) : 0,
                (long long)mono_us());
}

/* ---------------------------------------------------------------------------------------------
 * Nodes
 */
typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
    shoal_sharding_t *sh;
    shoal_metrics_t *http; /* --http: the management endpoint */
} node_t;

static int partitions = 8;

/* --config FILE (node mode): loaded by run_node, laid over the defaults in node_start */
static shoal_config_t *node_cfg;
static const char *node_cfg_path;

static int cfg_refused(const char *err)
{
    cli_config_refused("session-judge", node_cfg_path, err);
    return -1;
}

/* fast defaults, the program's tuning, the file over them */
static int type_settings(shoal_sharding_settings_t *s)
{
    shoal_sharding_settings_fast(s);
    s->passivation.idle_timeout_ms = 0;
    char err[512] = "";
    if (node_cfg && shoal_config_sharding(node_cfg, s, err, sizeof err) < 0)
        return cfg_refused(err);
    s->role = ROLE; /* what the readers and judges need, whatever the file says */
    return 0;
}

static int node_start(node_t *n, const char *bind, const char *seed, bool judge)
{
    memset(n, 0, sizeof *n);
    static const char *const judge_roles[] = {ROLE}, *const client_roles[] = {"client"};
    char cerr[512] = "";
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    if (node_cfg && shoal_config_system(node_cfg, &ss, cerr, sizeof cerr) < 0)
        return cfg_refused(cerr);
    ss.endpoint = bind;
    int err = 0;
    n->sys = shoal_system_new(&ss, &err);
    if (!n->sys) {
        fprintf(stderr, "session-judge: cannot start a node at %s: %s\n", bind,
                shoal_strerror(err));
        return -1;
    }
    shoal_cluster_settings_t cs;
    shoal_cluster_settings_fast(&cs);
    if (node_cfg && shoal_config_cluster(node_cfg, &cs, cerr, sizeof cerr) < 0)
        return cfg_refused(cerr);
    /* the node's own role first, the file's after it */
    const char *roles[65] = {judge ? judge_roles[0] : client_roles[0]};
    size_t n_roles = 1;
    for (size_t i = 0; i < cs.n_roles && n_roles < 65; i++)
        if (strcmp(cs.roles[i], roles[0]) != 0)
            roles[n_roles++] = cs.roles[i];
    cs.roles = roles;
    cs.n_roles = n_roles;
    if (seed || !judge) { /* --seed (or the driver forming the cluster) replaces the file's */
        cs.seed_nodes = NULL;
        cs.n_seed_nodes = 0;
        cs.discovery = NULL;
    }
    n->cl = shoal_cluster_new(n->sys, &cs, &err);
    n->sh = n->cl ? shoal_sharding_new(n->cl, &err) : NULL;
    if (!n->sh) {
        fprintf(stderr, "session-judge: cannot start %s: %s\n", n->cl ? "sharding" : "membership",
                shoal_strerror(err));
        return -1;
    }
    if (cli_config_limits("session-judge", node_cfg_path, node_cfg, NULL, n->sh) < 0)
        return -1;
    shoal_sharding_settings_t s;
    if (type_settings(&s) != 0)
        return -1;
    s.number_of_shards = 40;
    s.entity_state = true;
    judge_r = shoal_region_start(n->sh, "judge", &s, &judge_fns, NULL, &err);
    type_settings(&s);
    reader_r =
        shoal_daemon_start(n->sh, "reader", (uint32_t)partitions, &s, &reader_fns, NULL, 500, &err);
    if (!judge_r || !reader_r) {
        fprintf(stderr, "session-judge: regions: %s\n", shoal_strerror(err));
        return -1;
    }
    if (judge) {
        shoal_region_on_shard_moved(judge_r, on_shard_moved, NULL);
        shoal_region_on_shard_moved(reader_r, on_shard_moved, NULL);
    }
    if (judge && !seed) /* the seeds or discovery of --config FILE, set going by cluster_new */
        return 0;
    return judge ? shoal_cluster_join(n->cl, &seed, 1) : shoal_cluster_join(n->cl, NULL, 0);
}

/* 0, or -1 when reader threads were still running (the regions are then left alive: a thread
   asking through a freed region would crash the node; the process ends anyway) */
static int node_stop(node_t *n, bool leave)
{
    if (leave && n->cl) {
        /* graceful: the shards (and the readers) hand off first */
        shoal_cluster_shutdown_wait(n->cl, 15000);
    }
    /* the reader threads ask through judge_r: they end before it goes (an ask in flight ends at
       its timeout at the latest, answered on the node thread, which still runs) */
    atomic_store(&readers_halt, 1);
    int64_t until = mono_ms() + ASK_TIMEOUT_MS + 2000;
    while (atomic_load(&readers_running) > 0 && mono_ms() < until)
        sleep_ms(20);
    if (atomic_load(&readers_running) > 0) {
        fprintf(stderr, "session-judge: %d reader threads did not end\n",
                atomic_load(&readers_running));
        return -1;
    }
    shoal_metrics_stop(&n->http);
    shoal_sharding_destroy(&n->sh);
    shoal_cluster_destroy(&n->cl);
    shoal_system_destroy(&n->sys);
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* One judge node. config: --config FILE or NULL; its settings go under the flags'. */
static int run_node(const char *bind, const char *seed, const char *dir, const char *http,
                    const char *config)
{
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    shoal_http_settings_t hs;
    shoal_http_settings_default(&hs);
    node_cfg_path = config;
    if (config && !(node_cfg = cli_config_node("session-judge", config, NULL, NULL, NULL, &hs)))
        return 1;
    if (!seed) {
        shoal_cluster_settings_t cs;
        shoal_cluster_settings_default(&cs);
        char err[512] = "";
        if (node_cfg && shoal_config_cluster(node_cfg, &cs, err, sizeof err) < 0) {
            cfg_refused(err);
            shoal_config_destroy(&node_cfg);
            return 1;
        }
        if (!cs.n_seed_nodes && !cs.discovery) {
            fprintf(stderr, "session-judge: --node needs --seed EP (or seed-nodes or discovery in "
                            "--config FILE)\n");
            shoal_config_destroy(&node_cfg);
            return 2;
        }
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/node%d.events", dir, node_index);
    if (!(events_out = fopen(path, "a"))) {
        fprintf(stderr, "session-judge: cannot write %s\n", path);
        shoal_config_destroy(&node_cfg);
        return 1;
    }
    setvbuf(events_out, NULL, _IOLBF, 0);
    node_t n;
    if (node_start(&n, bind, seed, true) != 0) {
        fprintf(stderr, "session-judge: node %s did not start\n", bind);
        return 1; /* the process ends: the config's strings may stay with the half-started node */
    }
    int err = 0;
    if (http && !(n.http = shoal_http_start_with(n.sys, http, &hs, &err))) {
        fprintf(stderr, "session-judge: cannot serve HTTP on %s: %s\n", http, shoal_strerror(err));
        node_stop(&n, false);
        return 1;
    }
    fprintf(stderr, "session-judge: %s listening at %s\n", shoal_node_id(shoal_system_self(n.sys)),
            bind);
    while (!stop && !shoal_cluster_terminated(n.cl))
        sleep_ms(100);
    int rc = node_stop(&n, stop != 0) == 0 ? 0 : 1;
    if (rc == 0)
        shoal_config_destroy(&node_cfg); /* else the regions still use its strings */
    fclose(events_out);
    events_out = NULL;
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The driver
 */
static char self_path[4096];
static char run_dir[] = "/tmp/shoal-judge-XXXXXX";

static pid_t spawn(const char *log, char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *f = freopen(log, "a", stderr);
        f = freopen(log, "a", stdout);
        (void)f;
        execvp(argv[0], argv);
        fprintf(stderr, "session-judge: cannot run %s\n", argv[0]);
        _exit(127);
    }
    return pid;
}

static pid_t spawn_node(int idx, int port, const char *seed)
{
    char bind[64], log[300], rp[16], ix[16], parts[16];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/node%d.log", run_dir, idx);
    snprintf(rp, sizeof rp, "%d", redis_port);
    snprintf(ix, sizeof ix, "%d", idx);
    snprintf(parts, sizeof parts, "%d", partitions);
    char *argv[] = {self_path,      "--node",  "--bind", bind,      "--seed",
                    (char *)seed,   "--redis", rp,       "--index", ix,
                    "--partitions", parts,     "--dir",  run_dir,   NULL};
    return spawn(log, argv);
}

/* Waits up to ms for pid to exit; SIGKILL after that. The exit code, or -1. */
static int wait_exit(pid_t pid, int ms)
{
    int st = 0;
    int64_t until = mono_ms() + ms;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (mono_ms() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_ms(20);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int members_up(node_t *n)
{
    shoal_cluster_view_t v;
    if (shoal_cluster_view(n->cl, &v) != 0)
        return 0;
    int up = 0;
    for (size_t k = 0; k < v.n_members; k++)
        up += v.members[k].status == SHOAL_MEMBER_UP;
    if (!v.converged)
        up = -1;
    shoal_cluster_view_free(&v);
    return up;
}

static bool wait_members(node_t *n, int want, int ms)
{
    int64_t until = mono_ms() + ms;
    while (members_up(n) != want)
        if (mono_ms() > until)
            return false;
        else
            sleep_ms(50);
    return true;
}

/* true when nothing listens on 127.0.0.1:port (another run, another test) */
static bool port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* Raw Redis Streams throughput on this machine, now: XADD pipelined, then XREAD in batches. */
static double redis_baseline(redisContext *c, int n)
{
    int64_t t0 = mono_ms();
    for (int i = 0; i < n; i++)
        redisAppendCommand(c, "XADD baseline * game g%d seq %d player 1 action move", i % 50, i);
    for (int i = 0; i < n; i++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK)
            return -1;
        freeReplyObject(r);
    }
    char last[64] = "0-0";
    int got = 0;
    while (got < n) {
        redisReply *r = redisCommand(c, "XREAD COUNT 200 STREAMS baseline %s", last);
        const redisReply *es = stream_entries(r);
        if (!es || !es->elements) {
            freeReplyObject(r);
            break;
        }
        got += (int)es->elements;
        const redisReply *lastent = es->element[es->elements - 1];
        if (lastent->type == REDIS_REPLY_ARRAY && lastent->elements > 0 &&
            lastent->element[0]->type == REDIS_REPLY_STRING)
            snprintf(last, sizeof last, "%s", lastent->element[0]->str);
        freeReplyObject(r);
    }
    double secs = (mono_ms() - t0) / 1000.0;
    freeReplyObject(redisCommand(c, "DEL baseline"));
    return secs > 0 ? got / secs : -1;
}

typedef struct {
    redisContext *c;
    int games, events;
    int pause_ms; /* after each burst of 100: spreads the writes over the run (0: flat out) */
    atomic_long written;
    atomic_long failed; /* XADDs Redis did not acknowledge */
} writer_t;

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    unsigned seed = 12345;
    int *next = calloc((size_t)w->games, sizeof *next);
    if (!next) {
        atomic_store(&w->failed, 1);
        atomic_store(&w->written, (long)w->games * w->events);
        return NULL;
    }
    long total = (long)w->games * w->events;
    for (long k = 0; k < total;) {
        /* a burst of 100 events over random games, pipelined, then a breath */
        int burst = 0;
        for (; burst < 100 && k < total; k++) {
            int g = (int)(rand_r(&seed) % (unsigned)w->games);
            while (next[g] >= w->events)
                g = (g + 1) % w->games;
            int seq = ++next[g];
            char game[32], action[32];
            snprintf(game, sizeof game, "game-%d", g);
            int player = (int)(rand_r(&seed) % 4), a = (int)(rand_r(&seed) % 10);
            if (a < 3)
                snprintf(action, sizeof action, "attack:%d", (player + 1) % 4);
            else if (a < 5)
                snprintf(action, sizeof action, "still");
            else
                snprintf(action, sizeof action, "move");
            redisAppendCommand(w->c, "XADD events:%u * game %s seq %d player %d action %s",
                               partition_of(game, (unsigned)partitions), game, seq, player, action);
            burst++;
        }
        for (int i = 0; i < burst; i++) {
            redisReply *r = NULL;
            if (redisGetReply(w->c, (void **)&r) != REDIS_OK || !r || r->type == REDIS_REPLY_ERROR)
                atomic_fetch_add(&w->failed, 1);
            freeReplyObject(r);
        }
        atomic_store(&w->written, k);
        if (w->pause_ms)
            sleep_ms(w->pause_ms);
    }
    free(next);
    return NULL;
}

static size_t judges_registered(void)
{
    const shoal_node_t **nodes = NULL;
    size_t n = 0;
    if (shoal_region_current_regions(judge_r, 1000, &nodes, &n) != 0)
        return 0;
    free(nodes);
    return n;
}

/* A judge incarnation's witness line. */
typedef struct {
    int game, node;
    int64_t first, last;
    long lo, hi, judged;
} rec_t;

static int rec_cmp(const void *a, const void *b)
{
    const rec_t *x = a, *y = b;
    if (x->game != y->game)
        return x->game < y->game ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

typedef struct {
    long judge_incs, overlaps, moves, games_moved, rejudged, rec_gaps, rec_missing;
    long from_to[MAX_NODES + 2][MAX_NODES + 2];
    long shard_moves[2]; /* judge, reader */
    long shard_from_to[2][MAX_NODES + 2][MAX_NODES + 2];
    bool read_ok;
} witness_t;

/* Reads every node's witness file: judge incarnations and shard-moved events. */
static void read_witnesses(witness_t *w, int nodes, int games, int events, int base,
                           int64_t until_us)
{
    memset(w, 0, sizeof *w);
    w->read_ok = true;
    size_t n = 0, cap = 1024;
    rec_t *recs = malloc(cap * sizeof *recs);
    if (!recs) {
        w->read_ok = false;
        return;
    }
    for (int i = 1; i <= nodes; i++) {
        char path[300], line[512];
        snprintf(path, sizeof path, "%s/node%d.events", run_dir, i);
        FILE *f = fopen(path, "r");
        if (!f) {
            w->read_ok = false;
            continue;
        }
        while (fgets(line, sizeof line, f)) {
            rec_t r;
            long inc;
            long long a, b;
            char type[64], shard[64];
            int from, to;
            long long at;
            if (sscanf(line, "judge game-%d %ld %d %lld %lld %ld %ld %ld", &r.game, &inc, &r.node,
                       &a, &b, &r.lo, &r.hi, &r.judged) == 8) {
                if (r.game < 0 || r.game >= games || r.node < 1 || r.node > nodes)
                    continue;
                r.first = a, r.last = b;
                if (n == cap) {
                    rec_t *m = realloc(recs, 2 * cap * sizeof *recs);
                    if (!m)
                        break;
                    recs = m, cap *= 2;
                }
                recs[n++] = r;
            } else if (sscanf(line, "moved %63s %63s %d %d %lld", type, shard, &from, &to, &at) ==
                           5 &&
                       at <= until_us) {
                /* (the moves of the final shutdown, when every node leaves, are not the run's) */
                int t = !strcmp(type, "reader");
                int fi = from - base, ti = to - base; /* node i listens on base + i; 0: none */
                fi = fi >= 1 && fi <= nodes ? fi : 0;
                ti = ti >= 1 && ti <= nodes ? ti : 0;
                w->shard_moves[t]++;
                w->shard_from_to[t][fi][ti]++;
            }
        }
        fclose(f);
    }
    qsort(recs, n, sizeof *recs, rec_cmp);
    w->judge_incs = (long)n;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        long next = 1;
        int64_t busy_until = INT64_MIN;
        bool moved = false;
        for (; j < n && recs[j].game == recs[i].game; j++) {
            const rec_t *r = &recs[j];
            if (r->first <= busy_until)
                w->overlaps++; /* judged while an earlier incarnation was still judging */
            if (r->last > busy_until)
                busy_until = r->last;
            if (r->lo > next)
                w->rec_gaps += r->lo - next;
            else if (r->lo < next)
                w->rejudged += (r->hi < next ? r->hi + 1 : next) - r->lo;
            if (r->hi + 1 > next)
                next = r->hi + 1;
            if (j > i && recs[j - 1].node != r->node) {
                w->moves++;
                w->from_to[recs[j - 1].node][r->node]++;
                moved = true;
            }
        }
        if (next != events + 1)
            w->rec_missing++;
        w->games_moved += moved;
        i = j;
    }
    /* games without any line judged nothing (or their node's file is missing) */
    int *seen = calloc((size_t)games, sizeof *seen);
    if (seen) {
        for (size_t i = 0; i < n; i++)
            seen[recs[i].game] = 1;
        for (int g = 0; g < games; g++)
            w->rec_missing += !seen[g];
        free(seen);
    }
    free(recs);
}

static void print_from_to(long m[MAX_NODES + 2][MAX_NODES + 2])
{
    for (int a = 0; a < MAX_NODES + 2; a++)
        for (int b = 0; b < MAX_NODES + 2; b++)
            if (m[a][b]) {
                char fa[16] = "-", tb[16] = "-";
                if (a)
                    snprintf(fa, sizeof fa, "node%d", a);
                if (b)
                    snprintf(tb, sizeof tb, "node%d", b);
                printf(" %s->%s %ld", fa, tb, m[a][b]);
            }
}

static int run_driver(int games, int events, int nodes, int duration_ms, int base_port, bool bench,
                      bool keep)
{
    ssize_t sl = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (sl < 0)
        return 1;
    self_path[sl] = 0;
    if (!mkdtemp(run_dir)) {
        perror("session-judge: mkdtemp");
        return 1;
    }
    /* ports: the driver on base, judge node i on base + i, redis on base + 20; blocks of 25 (runs
       started together have neighbouring pids: their blocks must not overlap) */
    int base = 0;
    for (int tries = 0; tries < (base_port ? 1 : 50) && !base; tries++) {
        int b = base_port ? base_port : 20000 + 25 * (int)((getpid() + tries * 7) % 440);
        bool ok = port_free(b + 20);
        for (int i = 0; i <= nodes + 1 && ok; i++)
            ok = port_free(b + i);
        if (ok)
            base = b;
    }
    if (!base && base_port) {
        fprintf(stderr, "session-judge: --base-port %d: a port of %d..%d or %d is in use\n",
                base_port, base_port, base_port + nodes + 1, base_port + 20);
        rmdir(run_dir);
        return 1;
    }
    if (!base) {
        fprintf(stderr, "session-judge: no free ports between 20000 and 31000\n");
        rmdir(run_dir);
        return 1;
    }
    printf("ports: the driver on 127.0.0.1:%d, judge nodes on %d..%d, redis-server on %d\n", base,
           base + 1, base + nodes + 1, base + 20);
    redis_port = base + 20;
    char rport[16], log[300];
    snprintf(rport, sizeof rport, "%d", redis_port);
    snprintf(log, sizeof log, "%s/redis.log", run_dir);
    char *rargv[] = {"redis-server", "--port", rport,   "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no",     "--dir", run_dir,  NULL};
    pid_t redis = spawn(log, rargv);
    redisContext *c = NULL;
    for (int i = 0; i < 100 && !c; i++) {
        if (!(c = redis_open(redis_port))) {
            int st;
            if (waitpid(redis, &st, WNOHANG) == redis) {
                redis = -1; /* exited: not installed (127), or could not start */
                break;
            }
            sleep_ms(50);
        }
    }
    if (!c) {
        fprintf(stderr,
                "session-judge: redis-server did not start (is it installed? "
                "sh tools/install-deps.sh installs it) — see %s\n",
                log);
        if (redis > 0) {
            kill(redis, SIGKILL);
            waitpid(redis, NULL, 0);
        }
        return 1;
    }
    printf("redis-server on port %d: the log is %d streams events:0..%d\n", redis_port, partitions,
           partitions - 1);
    double base_rate = bench ? redis_baseline(c, 20000) : 0;
    char seed[64];
    snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", base);
    pid_t kids[MAX_NODES + 2] = {0};
    int joiner = nodes + 1; /* the node that joins mid-run */
    node_t drv;
    bool ok = false;
    long total = (long)games * events;
    if (node_start(&drv, seed, seed, false) != 0) {
        fprintf(stderr, "session-judge: the driver's node did not start\n");
        goto out;
    }
    for (int i = 1; i <= nodes; i++)
        kids[i] = spawn_node(i, base + i, seed);
    if (!wait_members(&drv, nodes + 1, 30000)) {
        fprintf(stderr, "session-judge: the judge nodes did not come up (logs in %s)\n", run_dir);
        goto out;
    }
    int64_t until_reg = mono_ms() + 30000;
    while (judges_registered() != (size_t)nodes && mono_ms() < until_reg)
        sleep_ms(50);
    printf("judge nodes 1..%d Up; %d readers (a sharded daemon process) and the judges of %d "
           "games spread over them\n",
           nodes, partitions, games);
    writer_t w = {c, games, events, bench ? 0 : (int)(duration_ms * 100L / total), 0, 0};
    pthread_t wt;
    int64_t t0 = mono_ms();
    if (pthread_create(&wt, NULL, writer_main, &w) != 0)
        goto out;
    bool added = false, left = false;
    int64_t t_join = 0, t_leave = 0;
    while (atomic_load(&w.written) < total) {
        long done = atomic_load(&w.written);
        if (!added && done >= total / 4) {
            kids[joiner] = spawn_node(joiner, base + joiner, seed);
            added = true;
            t_join = mono_ms();
            printf("after %ld events: judge node %d starts and joins\n", done, joiner);
        }
        if (added && !left && done >= total / 2 && wait_members(&drv, nodes + 2, 1)) {
            kill(kids[1], SIGTERM); /* graceful leave: its shards and readers hand off */
            left = true;
            t_leave = mono_ms();
            printf("after %ld events: judge node 1 leaves (SIGTERM: graceful shutdown)\n", done);
        }
        sleep_ms(20);
    }
    pthread_join(wt, NULL);
    if (!added) {
        kids[joiner] = spawn_node(joiner, base + joiner, seed);
        added = true;
        t_join = mono_ms();
        printf("after all events: judge node %d starts and joins\n", joiner);
    }
    if (!left) {
        wait_members(&drv, nodes + 2, 30000);
        kill(kids[1], SIGTERM);
        left = true;
        t_leave = mono_ms();
        printf("after all events: judge node 1 leaves (SIGTERM: graceful shutdown)\n");
    }
    int64_t t_written = mono_ms();
    /* judged: every partition's committed offset reached its stream's last entry */
    int64_t until = mono_ms() + 120000;
    bool caught_up = false;
    while (!caught_up && mono_ms() < until) {
        caught_up = true;
        for (int p = 0; p < partitions && caught_up; p++) {
            redisReply *a = redisCommand(c, "XREVRANGE events:%d + - COUNT 1", p);
            redisReply *o = redisCommand(c, "GET offset:%d", p);
            bool empty = !a || a->type != REDIS_REPLY_ARRAY || a->elements == 0;
            const redisReply *id = empty ? NULL : a->element[0];
            caught_up =
                empty || (o && o->type == REDIS_REPLY_STRING && id->type == REDIS_REPLY_ARRAY &&
                          id->elements > 0 && id->element[0]->type == REDIS_REPLY_STRING &&
                          !strcmp(o->str, id->element[0]->str));
            freeReplyObject(a);
            freeReplyObject(o);
        }
        if (!caught_up)
            sleep_ms(50);
    }
    int64_t t_judged = mono_ms();
    int leaver_rc = wait_exit(kids[1], 30000);
    kids[1] = 0;
    /* the judges' reports (their stored state) */
    long seen = 0, dups = 0, gaps = 0, reorders = 0, flags = 0, incomplete = 0;
    for (int g = 0; g < games; g++) {
        char game[32];
        snprintf(game, sizeof game, "game-%d", g);
        shoal_buf_t b = {0};
        int rc = -1;
        for (int tries = 0; tries < 20 && rc != 0; tries++)
            rc = shoal_region_ask_sync(judge_r, game, "report", 6, 3000, &b);
        judge_t j;
        memset(&j, 0, sizeof j);
        if (rc == 0)
            shoal_buf_append(&b, "", 1);
        if (rc != 0 || !judge_parse(&j, (char *)b.data)) {
            incomplete++;
            shoal_buf_free(&b);
            continue;
        }
        shoal_buf_free(&b);
        seen += j.events;
        dups += j.dups;
        gaps += j.gaps;
        reorders += j.reorders;
        flags += j.flags;
        if (j.last != events)
            incomplete++;
    }
    /* the other nodes leave too, so that their judges write their witness lines */
    for (int i = 2; i <= joiner; i++)
        if (kids[i])
            kill(kids[i], SIGTERM);
    bool nodes_ok = leaver_rc == 0;
    if (leaver_rc != 0)
        printf("judge node 1 exited with %d after leaving (-1: by a signal or not in 30 s; see "
               "%s/node1.log)\n",
               leaver_rc, run_dir);
    for (int i = 2; i <= joiner; i++)
        if (kids[i]) {
            int rc = wait_exit(kids[i], 30000);
            kids[i] = 0;
            if (rc != 0) {
                nodes_ok = false;
                printf("judge node %d exited with %d (-1: by a signal or not in 30 s; see "
                       "%s/node%d.log)\n",
                       i, rc, run_dir, i);
            }
        }
    witness_t wit;
    read_witnesses(&wit, joiner, games, events, base, t_judged * 1000);
    /* where the readers ran: partitions whose reader started on another node than before */
    redisReply *rl = redisCommand(c, "LRANGE readers 0 -1");
    int last_node[64] = {0};
    long reader_moves = 0;
    size_t n_starts = rl && rl->type == REDIS_REPLY_ARRAY ? rl->elements : 0, n_run = 0;
    for (size_t i = 0; i < n_starts; i++) {
        int p, nd;
        long long at;
        if (rl->element[i]->type == REDIS_REPLY_STRING &&
            sscanf(rl->element[i]->str, "%d:%d:%lld", &p, &nd, &at) == 3 && p >= 0 && p < 64 &&
            at <= t_judged) {
            n_run++;
            reader_moves += last_node[p] && last_node[p] != nd;
            last_node[p] = nd;
        }
    }
    printf("readers: %zu starts of the %d partition readers, %ld on another node than the "
           "partition's reader before:",
           n_run, partitions, reader_moves);
    for (size_t i = 0; i < n_starts; i++) {
        int p, nd;
        long long at;
        if (rl->element[i]->type == REDIS_REPLY_STRING &&
            sscanf(rl->element[i]->str, "%d:%d:%lld", &p, &nd, &at) == 3 && at <= t_judged)
            printf(" %d@node%d", p, nd);
    }
    printf("\n");
    freeReplyObject(rl);
    long write_failures = atomic_load(&w.failed);
    printf("events: %ld written (%ld not acknowledged by Redis), %ld judged, %ld read twice and "
           "ignored (readers that moved start again from the committed offset)\n",
           total, write_failures, seen, dups);
    printf("order: %ld gaps, %ld reorders, %ld games incomplete\n", gaps, reorders, incomplete);
    printf("judges: %ld incarnations, %ld overlapping in time (one game judged by two at once); "
           "%ld moves between nodes (%ld games):",
           wit.judge_incs, wit.overlaps, wit.moves, wit.games_moved);
    print_from_to(wit.from_to);
    printf("\nwitness lines: %ld numbers missing, %ld games incomplete, %ld events judged again "
           "after a failed save%s\n",
           wit.rec_gaps, wit.rec_missing, wit.rejudged,
           wit.read_ok ? "" : " (a node's witness file is missing)");
    printf("shard moves (shard-moved events until all was judged): judge %ld:", wit.shard_moves[0]);
    print_from_to(wit.shard_from_to[0]);
    printf("; reader %ld:", wit.shard_moves[1]);
    print_from_to(wit.shard_from_to[1]);
    printf("\nrule: %ld players flagged for standing still under attack\n", flags);
    double secs = (t_judged - t0) / 1000.0;
    printf("time: %.1f s to write, %.1f s until judged (%.0f events/s); node %d joined at +%.1f s, "
           "node 1 left at +%.1f s\n",
           (t_written - t0) / 1000.0, secs, total / secs, joiner, (t_join - t0) / 1000.0,
           (t_leave - t0) / 1000.0);
    if (bench)
        printf("BENCH name=judge_events_per_s value=%.1f unit=ops/s baseline=%.1f ratio=%.4f\n",
               total / secs, base_rate, base_rate > 0 ? total / secs / base_rate : 0);
    ok = caught_up && write_failures == 0 && seen == total && gaps == 0 && reorders == 0 &&
         incomplete == 0 && nodes_ok && wit.read_ok && wit.overlaps == 0 && wit.rec_gaps == 0 &&
         wit.rec_missing == 0 && wit.moves > 0 && reader_moves > 0;
    if (!caught_up)
        printf("not every partition's committed offset reached its stream's end in 120 s\n");
out:
    node_stop(&drv, false);
    for (int i = 1; i <= joiner; i++)
        if (kids[i]) {
            kill(kids[i], SIGTERM);
            wait_exit(kids[i], 30000);
        }
    redisFree(c);
    kill(redis, SIGTERM);
    waitpid(redis, NULL, 0);
    if (ok) {
        printf("OK: every game judged by one judge at a time, in order, with nothing missing, "
               "while partitions and games moved between nodes\n");
        if (!keep) {
            char cmd[300];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", run_dir);
            if (system(cmd) != 0)
                fprintf(stderr, "session-judge: could not remove %s\n", run_dir);
        }
    } else {
        printf("FAIL: see above (logs in %s)\n", run_dir);
    }
    return ok ? 0 : 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: session-judge [--games G] [--events-per-game E] [--partitions P] [--nodes K]\n"
            "                     [--base-port B] [--short] [--bench] [--keep]\n"
            "       session-judge --node --bind EP [--seed EP] --redis PORT --index I\n"
            "                     --partitions P --dir DIR [--http [HOST:]PORT] [--config FILE]\n"
            "  EP: HOST:PORT or tcp://HOST:PORT; --config FILE: settings under the flags\n"
            "       session-judge --help | --version\n");
}

/* A whole decimal number in [lo, hi], else false. */
static bool number(const char *s, long lo, long hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv)
{
    int cli = cli_help_or_version(&argc, argv, "session-judge", usage);
    if (cli >= 0)
        return cli;
    int games = 200, events = 100, nodes = 3, duration_ms = 15000, base_port = 0;
    bool node = false, bench = false, keep = false;
    const char *bind = NULL, *seed = NULL, *dir = NULL, *http = NULL, *config = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool good = true;
        if (!strcmp(a, "--node"))
            node = true;
        else if (!strcmp(a, "--short"))
            games = 60, events = 60, duration_ms = 6000;
        else if (!strcmp(a, "--bench"))
            bench = true;
        else if (!strcmp(a, "--keep"))
            keep = true;
        else if (!v)
            good = false;
        else if (!strcmp(a, "--games"))
            good = number(v, 1, 100000, &games), i++;
        else if (!strcmp(a, "--events-per-game") || !strcmp(a, "--events"))
            good = number(v, 1, 1000000, &events), i++;
        else if (!strcmp(a, "--partitions"))
            good = number(v, 1, 64, &partitions), i++;
        else if (!strcmp(a, "--nodes"))
            good = number(v, 2, MAX_NODES, &nodes), i++;
        else if (!strcmp(a, "--bind"))
            bind = v, i++;
        else if (!strcmp(a, "--seed"))
            seed = v, i++;
        else if (!strcmp(a, "--dir"))
            dir = v, i++;
        else if (!strcmp(a, "--http"))
            http = v, i++;
        else if (!strcmp(a, "--config"))
            config = v, i++;
        else if (!strcmp(a, "--base-port")) /* B + 20 (redis) still a port */
            good = number(v, 1, 65535 - 20, &base_port), i++;
        else if (!strcmp(a, "--redis"))
            good = number(v, 1, 65535, &redis_port), i++;
        else if (!strcmp(a, "--index"))
            good = number(v, 1, MAX_NODES + 1, &node_index), i++;
        else
            good = false;
        if (!good) {
            fprintf(stderr,
                    "session-judge: bad option or value: %s%s%s (--games 1..100000, "
                    "--events-per-game 1..1000000, --partitions 1..64, --nodes 2..%d, "
                    "--base-port 1..65515)\n",
                    a, v ? " " : "", v ? v : "", MAX_NODES);
            usage(stderr);
            return 2;
        }
    }
    /* HOST:PORT or tcp://HOST:PORT, a host name resolved (cli.h, NODE ADDRESSES) */
    static char bind_buf[300], seed_buf[300], http_buf[300];
    char awhy[400];
    if (bind && cli_node_address(bind, bind_buf, sizeof bind_buf, awhy, sizeof awhy) != 0)
        return fprintf(stderr, "%s: --bind %s\n", "session-judge", awhy), 2;
    if (seed && cli_node_address(seed, seed_buf, sizeof seed_buf, awhy, sizeof awhy) != 0)
        return fprintf(stderr, "%s: --seed %s\n", "session-judge", awhy), 2;
    if (http && cli_http_address(http, http_buf, sizeof http_buf, awhy, sizeof awhy) != 0)
        return fprintf(stderr, "%s: --http %s\n", "session-judge", awhy), 2;
    bind = bind ? bind_buf : NULL;
    seed = seed ? seed_buf : NULL;
    http = http ? http_buf : NULL;
    if ((long)games * events > 100000000L) {
        fprintf(stderr, "session-judge: --games x --events-per-game at most 100,000,000\n");
        return 2;
    }
    if (node) {
        if (!bind || !dir || !redis_port || !node_index) {
            fprintf(stderr, "session-judge --node needs --bind --dir --redis --index (and --seed "
                            "or a --config FILE naming the seeds)\n");
            return 2;
        }
        return run_node(bind, seed, dir, http, config);
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines out before a fork copies the buffer */
    return run_driver(games, events, nodes, duration_ms, base_port, bench, keep);
}
