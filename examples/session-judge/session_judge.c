/*  session-judge — game events read from a partitioned log (Redis Streams) and routed by game to
    judge entities, while judge nodes come and go (the seeds' session-routing article).

      session-judge [--games G] [--events E] [--partitions P] [--short] [--bench] [--keep]
      session-judge --node --bind EP --seed EP --redis PORT     one judge node (started by the run)

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
    ignored, a skipped number is a gap), flags a player who stands still right after being
    attacked, and keeps all this as its entity state (saved before it answers), so a judge that
    moves to another node goes on from where it was. It also keeps its history: each incarnation
    (node, first and last event time on CLOCK_MONOTONIC, events), from which the summary shows
    that no game was judged by two incarnations at once.

    THE RUN: the driver (a member with the role "client", proxies only) starts redis-server on a
    free port in a temp directory and three judge nodes; while the events flow it starts a fourth
    node and asks the first one to leave (graceful: its shards and readers hand off), so that
    partitions and games move between nodes. At the end: every game's judge saw all its events in
    order (0 gaps, 0 reorders), no two incarnations of one judge overlapped, the moves are listed.
*/
#include "sharding.h"

#include <hiredis/hiredis.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROLE "judge"
#define HIST_MAX 8

static volatile sig_atomic_t stop;
static shoal_region_t *judge_r, *reader_r;
static int redis_port;
static int node_index; /* this judge node's number (1..), for the histories */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
typedef struct {
    int node;
    long inc;
    int64_t first, last;
    long events;
} hist_t;

typedef struct {
    long last, dups, gaps, flags, events;
    int attacked; /* player just attacked, -1: none */
    hist_t hist[HIST_MAX];
    int n_hist;
    long inc; /* this incarnation */
} judge_t;

static long next_inc;

static void judge_text(const judge_t *j, shoal_buf_t *b)
{
    shoal_buf_reset(b);
    shoal_buf_printf(b, "%ld %ld %ld %ld %ld %d %d", j->last, j->dups, j->gaps, j->flags,
                     j->events, j->attacked, j->n_hist);
    for (int i = 0; i < j->n_hist; i++)
        shoal_buf_printf(b, " %d:%ld:%lld:%lld:%ld", j->hist[i].node, j->hist[i].inc,
                         (long long)j->hist[i].first, (long long)j->hist[i].last,
                         j->hist[i].events);
}

static void judge_parse(judge_t *j, const char *s)
{
    int off = 0;
    if (sscanf(s, "%ld %ld %ld %ld %ld %d %d%n", &j->last, &j->dups, &j->gaps, &j->flags,
               &j->events, &j->attacked, &j->n_hist, &off) != 7) {
        memset(j, 0, sizeof *j);
        j->attacked = -1;
        return;
    }
    if (j->n_hist < 0 || j->n_hist > HIST_MAX)
        j->n_hist = 0;
    s += off;
    for (int i = 0; i < j->n_hist; i++) {
        long long a, b;
        int n = 0;
        if (sscanf(s, " %d:%ld:%lld:%lld:%ld%n", &j->hist[i].node, &j->hist[i].inc, &a, &b,
                   &j->hist[i].events, &n) != 5) {
            j->n_hist = i;
            break;
        }
        j->hist[i].first = a;
        j->hist[i].last = b;
        s += n;
    }
}

static void *judge_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    judge_t *j = calloc(1, sizeof *j);
    j->attacked = -1;
    size_t len = 0;
    const char *s = shoal_entity_stored(e, &len);
    if (s && len) {
        char *c = malloc(len + 1);
        memcpy(c, s, len);
        c[len] = 0;
        judge_parse(j, c);
        free(c);
    }
    j->inc = ++next_inc * 100 + node_index; /* unique per node process */
    return j;
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
    int player, victim;
    char action[32];
    shoal_buf_t b = {0};
    if (sscanf(m, "ev:%ld:%d:%31s", &seq, &player, action) == 3) {
        if (seq <= j->last) {
            j->dups++; /* read again after a reader moved: already judged */
            shoal_entity_reply(e, "ok", 2);
            return;
        }
        if (seq > j->last + 1)
            j->gaps += seq - j->last - 1;
        j->last = seq;
        j->events++;
        if (sscanf(action, "attack:%d", &victim) == 1)
            j->attacked = victim;
        else if (!strcmp(action, "still") && player == j->attacked)
            j->flags++, j->attacked = -1; /* stood still under attack */
        else if (!strcmp(action, "move") && player == j->attacked)
            j->attacked = -1;
        int64_t now = mono_ms();
        hist_t *h = j->n_hist ? &j->hist[j->n_hist - 1] : NULL;
        if (!h || h->inc != j->inc) {
            if (j->n_hist == HIST_MAX) {
                memmove(&j->hist[0], &j->hist[1], (HIST_MAX - 1) * sizeof *h);
                j->n_hist--;
            }
            h = &j->hist[j->n_hist++];
            h->node = node_index;
            h->inc = j->inc;
            h->first = now;
            h->events = 0;
        }
        h->last = now;
        h->events++;
        judge_text(j, &b);
        shoal_entity_save_reply(e, b.data, b.len, "ok", 2);
    } else if (!strcmp(m, "report")) {
        judge_text(j, &b);
        shoal_entity_reply(e, b.data, b.len);
    }
    shoal_buf_free(&b);
}

static void judge_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)arg;
    free(state);
}

/* ---------------------------------------------------------------------------------------------
 * A reader of one partition: a daemon worker with a thread of its own
 */
typedef struct {
    int partition;
    volatile int stop;
    pthread_t th;
} reader_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending, failed;
} batch_t;

static void batch_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r, (void)reply, (void)len;
    batch_t *b = arg;
    pthread_mutex_lock(&b->mu);
    if (status != 0)
        b->failed++;
    if (--b->pending == 0)
        pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static const char *field(redisReply *kv, const char *name)
{
    for (size_t i = 0; i + 1 < kv->elements; i += 2)
        if (kv->element[i]->type == REDIS_REPLY_STRING && !strcmp(kv->element[i]->str, name))
            return kv->element[i + 1]->str;
    return NULL;
}

static void *reader_main(void *arg)
{
    reader_t *rd = arg;
    redisContext *c = redisConnect("127.0.0.1", redis_port);
    if (!c || c->err) {
        fprintf(stderr, "session-judge: reader %d: redis: %s\n", rd->partition,
                c ? c->errstr : "no memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    char last[64] = "0-0";
    redisReply *r = redisCommand(c, "GET offset:%d", rd->partition);
    if (r && r->type == REDIS_REPLY_STRING)
        snprintf(last, sizeof last, "%s", r->str);
    freeReplyObject(r);
    r = redisCommand(c, "RPUSH readers %d:%d:%lld:%s", rd->partition, node_index,
                     (long long)mono_ms(), last);
    freeReplyObject(r);
    batch_t b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    while (!rd->stop) {
        r = redisCommand(c, "XREAD COUNT 200 BLOCK 100 STREAMS events:%d %s", rd->partition, last);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
            freeReplyObject(r);
            if (c->err)
                break;
            continue;
        }
        redisReply *entries = r->element[0]->element[1];
        char newest[64] = "";
        b.pending = 1; /* held until every ask is out */
        b.failed = 0;
        for (size_t i = 0; i < entries->elements; i++) {
            redisReply *ent = entries->element[i];
            const char *game = field(ent->element[1], "game"), *seq = field(ent->element[1], "seq");
            const char *player = field(ent->element[1], "player");
            const char *action = field(ent->element[1], "action");
            snprintf(newest, sizeof newest, "%s", ent->element[0]->str);
            if (!game || !seq || !player || !action)
                continue; /* not an event of ours: skipped, counted nowhere */
            char m[128];
            int n = snprintf(m, sizeof m, "ev:%s:%s:%s", seq, player, action);
            pthread_mutex_lock(&b.mu);
            b.pending++;
            pthread_mutex_unlock(&b.mu);
            if (shoal_region_ask(judge_r, game, m, (size_t)n, 10000, batch_done, &b) != 0)
                batch_done(judge_r, SHOAL_EBUFFER, NULL, 0, &b);
        }
        batch_done(judge_r, 0, NULL, 0, &b);
        pthread_mutex_lock(&b.mu);
        while (b.pending > 0)
            pthread_cond_wait(&b.cv, &b.mu);
        int failed = b.failed;
        pthread_mutex_unlock(&b.mu);
        freeReplyObject(r);
        if (failed) {
            /* some judge did not answer (moving): the batch again, from the committed offset */
            sleep_ms(100);
            continue;
        }
        if (newest[0] && !rd->stop) {
            snprintf(last, sizeof last, "%s", newest);
            freeReplyObject(redisCommand(c, "SET offset:%d %s", rd->partition, last));
        }
    }
    redisFree(c);
    free(rd);
    return NULL;
}

static void *reader_start(shoal_entity_t *e, void *arg)
{
    (void)arg;
    reader_t *rd = calloc(1, sizeof *rd);
    rd->partition = atoi(shoal_entity_id(e));
    if (pthread_create(&rd->th, NULL, reader_main, rd) != 0) {
        free(rd);
        return NULL;
    }
    pthread_detach(rd->th);
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
    if (rd)
        rd->stop = 1; /* the thread ends after its batch and frees rd */
}

static const shoal_entity_fns_t judge_fns = {judge_start, judge_receive, judge_stop, NULL};
static const shoal_entity_fns_t reader_fns = {reader_start, reader_receive, reader_stop, NULL};

/* ---------------------------------------------------------------------------------------------
 * Nodes
 */
typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
    shoal_sharding_t *sh;
} node_t;

static int partitions = 8;

static int node_start(node_t *n, const char *bind, const char *seed, bool judge)
{
    memset(n, 0, sizeof *n);
    static const char *const judge_roles[] = {ROLE}, *const client_roles[] = {"client"};
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = bind;
    int err = 0;
    n->sys = shoal_system_new(&ss, &err);
    if (!n->sys)
        return -1;
    shoal_cluster_settings_t cs;
    shoal_cluster_settings_fast(&cs);
    cs.roles = judge ? judge_roles : client_roles;
    cs.n_roles = 1;
    n->cl = shoal_cluster_new(n->sys, &cs, &err);
    n->sh = n->cl ? shoal_sharding_new(n->cl, &err) : NULL;
    if (!n->sh)
        return -1;
    shoal_sharding_settings_t s;
    shoal_sharding_settings_fast(&s);
    s.role = ROLE;
    s.number_of_shards = 40;
    s.entity_state = true;
    s.passivation.idle_timeout_ms = 0;
    judge_r = shoal_region_start(n->sh, "judge", &s, &judge_fns, NULL, &err);
    shoal_sharding_settings_fast(&s);
    s.role = ROLE;
    s.passivation.idle_timeout_ms = 0;
    reader_r = shoal_daemon_start(n->sh, "reader", (uint32_t)partitions, &s, &reader_fns, NULL,
                                  500, &err);
    if (!judge_r || !reader_r) {
        fprintf(stderr, "session-judge: regions: %s\n", shoal_strerror(err));
        return -1;
    }
    return judge ? shoal_cluster_join(n->cl, &seed, 1) : shoal_cluster_join(n->cl, NULL, 0);
}

static void node_stop(node_t *n, bool leave)
{
    if (leave && n->cl) {
        /* graceful: the shards (and the readers) hand off first */
        shoal_cluster_shutdown(n->cl);
        for (int i = 0; i < 300 && !shoal_cluster_terminated(n->cl); i++)
            sleep_ms(50);
    }
    shoal_sharding_destroy(&n->sh);
    shoal_cluster_destroy(&n->cl);
    shoal_system_destroy(&n->sys);
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int run_node(const char *bind, const char *seed)
{
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    node_t n;
    if (node_start(&n, bind, seed, true) != 0) {
        fprintf(stderr, "session-judge: node %s did not start\n", bind);
        return 1;
    }
    while (!stop && !shoal_cluster_terminated(n.cl))
        sleep_ms(100);
    node_stop(&n, stop != 0);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The driver
 */
static char self_path[4096];

static pid_t spawn(const char *log, char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *f = freopen(log, "a", stderr);
        f = freopen(log, "a", stdout);
        (void)f;
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static pid_t spawn_node(int idx, int port, const char *seed, const char *dir)
{
    char bind[64], log[300], rp[16], ix[16];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/node%d.log", dir, idx);
    snprintf(rp, sizeof rp, "%d", redis_port);
    snprintf(ix, sizeof ix, "%d", idx);
    char parts[16];
    snprintf(parts, sizeof parts, "%d", partitions);
    char *argv[] = {self_path, "--node", "--bind", bind, "--seed", (char *)seed, "--redis", rp,
                    "--index", ix, "--partitions", parts, NULL};
    return spawn(log, argv);
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
        if (!r || r->type != REDIS_REPLY_ARRAY || !r->elements) {
            freeReplyObject(r);
            break;
        }
        redisReply *es = r->element[0]->element[1];
        got += (int)es->elements;
        snprintf(last, sizeof last, "%s", es->element[es->elements - 1]->element[0]->str);
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
    volatile long written;
} writer_t;

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    unsigned seed = 12345;
    int *next = calloc((size_t)w->games, sizeof *next);
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
                               partition_of(game, (unsigned)partitions), game, seq, player,
                               action);
            burst++;
        }
        for (int i = 0; i < burst; i++) {
            void *r = NULL;
            if (redisGetReply(w->c, &r) == REDIS_OK)
                freeReplyObject(r);
        }
        __atomic_store_n(&w->written, k, __ATOMIC_SEQ_CST);
        if (w->pause_ms)
            sleep_ms(w->pause_ms);
    }
    free(next);
    return NULL;
}

static bool judges_registered(void)
{
    const shoal_node_t **nodes = NULL;
    size_t n = 0;
    if (shoal_region_current_regions(judge_r, 1000, &nodes, &n) != 0)
        return false;
    free(nodes);
    return n == 3;
}

static int run_driver(int games, int events, int duration_ms, bool bench, bool keep)
{
    if (readlink("/proc/self/exe", self_path, sizeof self_path - 1) < 0)
        return 1;
    char dir[] = "/tmp/shoal-judge-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    int base = 20000 + (int)(getpid() % 11000);
    redis_port = base + 9;
    char rport[16], log[300];
    snprintf(rport, sizeof rport, "%d", redis_port);
    snprintf(log, sizeof log, "%s/redis.log", dir);
    char *rargv[] = {"redis-server", "--port", rport, "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", dir, NULL};
    pid_t redis = spawn(log, rargv);
    redisContext *c = NULL;
    for (int i = 0; i < 100; i++) {
        c = redisConnect("127.0.0.1", redis_port);
        if (c && !c->err)
            break;
        if (c)
            redisFree(c);
        c = NULL;
        sleep_ms(50);
    }
    if (!c) {
        fprintf(stderr, "session-judge: redis-server did not start (is it installed? "
                        "sh tools/install-deps.sh) — see %s\n", log);
        kill(redis, SIGKILL);
        return 1;
    }
    printf("redis-server on port %d: the log is %d streams events:0..%d\n", redis_port,
           partitions, partitions - 1);
    double base_rate = bench ? redis_baseline(c, 20000) : 0;
    char seed[64];
    snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", base);
    node_t drv;
    if (node_start(&drv, seed, seed, false) != 0)
        return 1;
    pid_t kids[5] = {0};
    for (int i = 1; i <= 3; i++)
        kids[i] = spawn_node(i, base + i, seed, dir);
    if (!wait_members(&drv, 4, 30000)) {
        fprintf(stderr, "session-judge: the judge nodes did not come up (logs in %s)\n", dir);
        return 1;
    }
    int64_t until_reg = mono_ms() + 30000;
    while (!judges_registered() && mono_ms() < until_reg)
        sleep_ms(50);
    printf("judge nodes 1, 2, 3 Up; %d readers (a sharded daemon process) and the judges of %d "
           "games spread over them\n",
           partitions, games);
    long total = (long)games * events;
    writer_t w = {c, games, events, bench ? 0 : (int)(duration_ms * 100L / total), 0};
    pthread_t wt;
    int64_t t0 = mono_ms();
    pthread_create(&wt, NULL, writer_main, &w);
    bool added = false, left = false;
    int64_t t_join = 0, t_leave = 0;
    while (__atomic_load_n(&w.written, __ATOMIC_SEQ_CST) < total) {
        long done = __atomic_load_n(&w.written, __ATOMIC_SEQ_CST);
        if (!added && done >= total / 4) {
            kids[4] = spawn_node(4, base + 4, seed, dir);
            added = true;
            t_join = mono_ms();
            printf("after %ld events: judge node 4 starts and joins\n", done);
        }
        if (added && !left && done >= total / 2 && wait_members(&drv, 5, 1)) {
            kill(kids[1], SIGTERM); /* graceful leave: its shards and readers hand off */
            left = true;
            t_leave = mono_ms();
            printf("after %ld events: judge node 1 leaves (SIGTERM: graceful shutdown)\n", done);
        }
        sleep_ms(20);
    }
    pthread_join(wt, NULL);
    if (!left) {
        wait_members(&drv, 5, 30000);
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
            caught_up = empty || (o && o->type == REDIS_REPLY_STRING &&
                                  !strcmp(o->str, a->element[0]->element[0]->str));
            freeReplyObject(a);
            freeReplyObject(o);
        }
        if (!caught_up)
            sleep_ms(50);
    }
    int64_t t_judged = mono_ms();
    int status = 0;
    waitpid(kids[1], &status, 0);
    /* the judges' reports */
    long seen = 0, dups = 0, gaps = 0, flags = 0, incomplete = 0, overlaps = 0, moved = 0;
    long from_to[6][6] = {{0}};
    for (int g = 0; g < games; g++) {
        char game[32];
        snprintf(game, sizeof game, "game-%d", g);
        shoal_buf_t b = {0};
        int rc = -1;
        for (int tries = 0; tries < 20 && rc != 0; tries++)
            rc = shoal_region_ask_sync(judge_r, game, "report", 6, 3000, &b);
        if (rc != 0) {
            incomplete++;
            continue;
        }
        shoal_buf_append(&b, "", 1);
        judge_t j;
        memset(&j, 0, sizeof j);
        judge_parse(&j, (char *)b.data);
        shoal_buf_free(&b);
        seen += j.events;
        dups += j.dups;
        gaps += j.gaps;
        flags += j.flags;
        if (j.last != events)
            incomplete++;
        for (int i = 1; i < j.n_hist; i++) {
            if (j.hist[i].first <= j.hist[i - 1].last)
                overlaps++; /* two incarnations judged at once */
            if (j.hist[i].node != j.hist[i - 1].node) {
                if (i == 1 || j.hist[i - 1].node != j.hist[i - 2].node)
                    moved++;
                if (j.hist[i - 1].node < 6 && j.hist[i].node < 6)
                    from_to[j.hist[i - 1].node][j.hist[i].node]++;
            }
        }
    }
    /* where the readers ran */
    redisReply *rl = redisCommand(c, "LRANGE readers 0 -1");
    printf("readers: %zu starts of the %d partition readers:", rl ? rl->elements : 0, partitions);
    for (size_t i = 0; rl && i < rl->elements; i++) {
        int p, nd;
        if (sscanf(rl->element[i]->str, "%d:%d", &p, &nd) == 2)
            printf(" %d@node%d", p, nd);
    }
    printf("\n");
    freeReplyObject(rl);
    printf("events: %ld written, %ld judged, %ld read twice and ignored (readers that moved "
           "start again from the committed offset)\n",
           total, seen, dups);
    printf("order: %ld gaps, %ld games incomplete, %ld overlapping judge incarnations\n", gaps,
           incomplete, overlaps);
    printf("moves: %ld game judges moved:", moved);
    for (int a = 0; a < 6; a++)
        for (int b2 = 0; b2 < 6; b2++)
            if (from_to[a][b2])
                printf(" node%d->node%d %ld", a, b2, from_to[a][b2]);
    printf("\nrule: %ld players flagged for standing still under attack\n", flags);
    double secs = (t_judged - t0) / 1000.0;
    printf("time: %.1f s to write, %.1f s until judged (%.0f events/s); node 4 joined at +%.1f s, "
           "node 1 left at +%.1f s\n",
           (t_written - t0) / 1000.0, secs, total / secs, (t_join - t0) / 1000.0,
           (t_leave - t0) / 1000.0);
    if (bench)
        printf("BENCH name=judge_events_per_s value=%.1f unit=ops/s baseline=%.1f ratio=%.4f\n",
               total / secs, base_rate, base_rate > 0 ? total / secs / base_rate : 0);
    bool ok = caught_up && seen == total && gaps == 0 && incomplete == 0 && overlaps == 0 &&
              moved > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    node_stop(&drv, false);
    for (int i = 2; i <= 4; i++)
        if (kids[i]) {
            kill(kids[i], SIGTERM);
            waitpid(kids[i], NULL, 0);
        }
    redisFree(c);
    kill(redis, SIGTERM);
    waitpid(redis, NULL, 0);
    if (ok) {
        printf("OK: every game judged by one judge at a time, in order, with nothing missing, "
               "while partitions and games moved between nodes\n");
        if (!keep) {
            char cmd[300];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            if (system(cmd) != 0)
                fprintf(stderr, "session-judge: could not remove %s\n", dir);
        }
    } else {
        printf("FAIL: see above (logs in %s)%s\n", dir,
               moved ? "" : " — no judge moved, the run did not show a move");
    }
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    int games = 200, events = 100, duration_ms = 15000;
    bool node = false, bench = false, keep = false;
    const char *bind = NULL, *seed = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--node"))
            node = true;
        else if (!strcmp(argv[i], "--short"))
            games = 60, events = 60, duration_ms = 6000;
        else if (!strcmp(argv[i], "--bench"))
            bench = true;
        else if (!strcmp(argv[i], "--keep"))
            keep = true;
        else if (!strcmp(argv[i], "--games") && i + 1 < argc)
            games = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--events") && i + 1 < argc)
            events = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--partitions") && i + 1 < argc)
            partitions = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bind") && i + 1 < argc)
            bind = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = argv[++i];
        else if (!strcmp(argv[i], "--redis") && i + 1 < argc)
            redis_port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--index") && i + 1 < argc)
            node_index = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: session-judge [--games G] [--events E] [--partitions P] "
                            "[--short] [--bench] [--keep]\n");
            return 2;
        }
    }
    if (partitions < 1 || partitions > 64 || games < 1 || events < 1) {
        fprintf(stderr, "session-judge: --partitions 1..64, --games and --events >= 1\n");
        return 2;
    }
    if (node)
        return bind && seed && redis_port ? run_node(bind, seed) : 2;
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines out before a fork copies the buffer */
    return run_driver(games, events, duration_ms, bench, keep);
}
