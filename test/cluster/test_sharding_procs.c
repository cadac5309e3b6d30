/*  test_sharding_procs.c — cluster sharding with every member in its own process (prog_shard),
    where a SIGKILL or a partition is the point: the host of shards killed, the coordinator's
    host killed, the coordinator killed in the middle of a handoff, seven members shrinking to
    three across two coordinator failovers, and a 2|3 partition settled by the split-brain
    resolver (with the coordinator on either side).

    The test process is no member: it starts the members, drives them with the commands of
    shardprocs.h (asks and tells go through the members' regions), and kills them. Every member
    appends its entity starts and stops to one events file; after each scenario the test reads
    it and checks AT MOST ONE OWNER: no entity id, and no shard id, was live in two processes at
    once. An entity is live in a process from its start line to its stop line; a killed
    member's open intervals end when the test reaped it (a bound later than the real death, so
    the check errs toward finding overlaps); a member that exited by itself must have stopped
    every entity first.

    Members use membership's test settings (tmember_settings: keep-majority with stable-after
    2 s, scaled by tscale) and shoal_sharding_settings_fast; the removal margin is the default
    (stable-after). TEST_FILTER selects one test. A failed test keeps its directory under /tmp
    (events file, each member's stderr) and prints where it is; SHARDPROCS_KEEP=1 keeps it for
    a passed one too.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "shardprocs.h"
#include "sharding.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXK 7
#define NSHARDS 40 /* below 64: a shard set is a bit mask */
#define EID_MAX 16

typedef struct {
    pid_t pid; /* 0: not running */
    pid_t was; /* the pid it had */
    int port;
    bool killed;
    bool exited; /* stopped by itself */
    int status;  /* waitpid status once exited */
    shoal_client_t *cl;
} kid_t;

static kid_t kids[MAXK];
static char workdir[PATH_MAX];
static char events[PATH_MAX + 16];
static bool passed;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t deadline_after(int ms)
{
    return shoal_now_ms() + (int64_t)ms * tscale();
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Members
 */
static void append_event(pid_t pid, const char *what)
{
    char line[96];
    int n = snprintf(line, sizeof line, "%lld %d %s - -\n", (long long)now_ns(), (int)pid, what);
    int fd = open(events, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, line, (size_t)n), n);
    close(fd);
}

static void make_workdir(void)
{
    snprintf(workdir, sizeof workdir, "/tmp/shoal-shardprocs-XXXXXX");
    assert_non_null(mkdtemp(workdir));
    snprintf(events, sizeof events, "%s/events", workdir);
    passed = false;
}

/* Starts member i: prog_shard PORT SEED EVENTS opts (space-separated). seed 0: forms the
   cluster. */
static void spawn(int i, int seed, const char *opts)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = 0;
    char prog[PATH_MAX + 16];
    snprintf(prog, sizeof prog, "%s/prog_shard", dirname(self));
    if (!kids[i].port)
        kids[i].port = tfree_port();
    assert_true(kids[i].port > 0);
    char err_path[PATH_MAX + 32];
    snprintf(err_path, sizeof err_path, "%s/member%d.err", workdir, i);
    char port[16], seedp[16], optbuf[256];
    snprintf(port, sizeof port, "%d", kids[i].port);
    snprintf(seedp, sizeof seedp, "%d", seed);
    snprintf(optbuf, sizeof optbuf, "%s", opts ? opts : "");
    char *argv[16] = {prog, port, seedp, events};
    int argc = 4;
    char *save = NULL;
    for (char *t = strtok_r(optbuf, " ", &save); t && argc < 15; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        tproc_die_with_parent();
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 1);
        int errfd = open(err_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (errfd >= 0)
            dup2(errfd, 2);
        execv(prog, argv);
        _exit(127);
    }
    kids[i].pid = kids[i].was = pid;
    kids[i].killed = kids[i].exited = false;
}

static void drop_client(int i)
{
    shoal_client_destroy(&kids[i].cl);
}

/* SIGKILL; the member's open intervals end now (after it is certainly dead). */
static void kill_member(int i)
{
    assert_true(kids[i].pid > 0);
    kill(kids[i].pid, SIGKILL);
    waitpid(kids[i].pid, NULL, 0);
    append_event(kids[i].pid, "killed");
    kids[i].pid = 0;
    kids[i].killed = true;
    drop_client(i);
}

/* Notes members that exited by themselves. */
static void reap(void)
{
    for (int i = 0; i < MAXK; i++) {
        int st = 0;
        if (kids[i].pid > 0 && waitpid(kids[i].pid, &st, WNOHANG) == kids[i].pid) {
            append_event(kids[i].pid, "exited");
            kids[i].pid = 0;
            kids[i].exited = true;
            kids[i].status = st;
            drop_client(i);
        }
    }
}

static void print_tail(const char *path, int lines)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    size_t start = n;
    for (int k = 0; start > 0 && k <= lines; start--)
        if (buf[start - 1] == '\n')
            k++;
    fprintf(stderr, "---- %s (last %d lines)\n%s\n", path, lines, buf + start);
}

static void remove_workdir(void)
{
    DIR *d = opendir(workdir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", workdir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(workdir);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < MAXK; i++) {
        if (kids[i].pid > 0) {
            kill(kids[i].pid, SIGCONT);
            kill(kids[i].pid, SIGKILL);
            waitpid(kids[i].pid, NULL, 0);
        }
        drop_client(i);
    }
    if (workdir[0]) {
        if (passed && !getenv("SHARDPROCS_KEEP")) {
            remove_workdir();
        } else if (passed) {
            fprintf(stderr, "kept %s (SHARDPROCS_KEEP)\n", workdir);
        } else {
            for (int i = 0; i < MAXK; i++)
                if (kids[i].was) {
                    char p[PATH_MAX + 32];
                    snprintf(p, sizeof p, "%s/member%d.err", workdir, i);
                    fprintf(stderr, "member %d: pid %d port %d%s%s\n", i, (int)kids[i].was,
                            kids[i].port, kids[i].killed ? " killed" : "",
                            kids[i].exited ? " exited" : "");
                    print_tail(p, 25);
                }
            fprintf(stderr, "kept %s (events, members' stderr)\n", workdir);
        }
    }
    memset(kids, 0, sizeof kids);
    workdir[0] = 0;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Commands (shardprocs.h)
 */
/* Sends a command to member i; the reply text in out. 0 or an error (timeouts included). */
static int cmd(int i, char *out, size_t cap, uint32_t timeout_ms, const char *fmt, ...)
{
    out[0] = 0;
    if (kids[i].pid <= 0)
        return SHOAL_ENOTCONN;
    if (!kids[i].cl) {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", kids[i].port);
        int err = 0;
        kids[i].cl = shoal_client_new(ep, 2000 * (uint32_t)tscale(), &err);
        if (!kids[i].cl)
            return err ? err : SHOAL_ENOTCONN;
    }
    static char text[1 << 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    shoal_buf_t reply = {0};
    uint16_t kind = 0;
    int rc = shoal_client_request(kids[i].cl, SHARDPROCS_KIND_CMD, text, strlen(text), &kind,
                                  &reply, timeout_ms);
    if (rc == 0)
        snprintf(out, cap, "%s", shoal_buf_cstr(&reply));
    else
        drop_client(i); /* a late reply must not be taken for the next one */
    shoal_buf_free(&reply);
    return rc;
}

typedef struct {
    char id[128];
    int port, status, reachable;
    unsigned long long up;
} vmember_t;

typedef struct {
    int self_status;
    bool may_act, converged;
    int n;
    vmember_t m[16];
} view_t;

static bool get_view(int i, view_t *v)
{
    static char out[8192];
    memset(v, 0, sizeof *v);
    if (cmd(i, out, sizeof out, 2000, "view") != 0)
        return false;
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        int a, b;
        char id[128];
        if (sscanf(l, "self %127s %d %d", id, &a, &b) == 3) {
            v->self_status = a;
            v->may_act = b;
        } else if (sscanf(l, "converged %d", &a) == 1) {
            v->converged = a;
        } else if (v->n < 16) {
            vmember_t *m = &v->m[v->n];
            if (sscanf(l, "member %127s %d %d %llu %d", m->id, &m->port, &m->status, &m->up,
                       &m->reachable) == 5)
                v->n++;
        }
    }
    return true;
}

static int kid_at_port(int port)
{
    for (int i = 0; i < MAXK; i++)
        if (kids[i].port == port)
            return i;
    return -1;
}

typedef struct {
    int via;          /* whose view */
    unsigned members; /* exactly these kids, Up, reachable, converged */
} members_cond_t;

static bool members_are(void *arg)
{
    members_cond_t *c = arg;
    view_t v;
    if (!get_view(c->via, &v) || !v.converged)
        return false;
    unsigned seen = 0;
    for (int k = 0; k < v.n; k++) {
        int i = kid_at_port(v.m[k].port);
        if (i < 0 || v.m[k].status != SHOAL_MEMBER_UP || !v.m[k].reachable)
            return false;
        seen |= 1u << i;
    }
    return seen == c->members;
}

static void wait_members(int via, unsigned members, int timeout_ms)
{
    members_cond_t c = {via, members};
    if (!wait_until(members_are, &c, timeout_ms)) {
        static char out[8192];
        cmd(via, out, sizeof out, 2000, "view");
        fail_msg("member %d does not see exactly the members 0x%x Up and converged:\n%s", via,
                 members, out);
    }
}

/* True while member i still lists the member at `port` (not removed yet). */
static bool lists_member(int i, int port)
{
    view_t v;
    if (!get_view(i, &v))
        return false;
    for (int k = 0; k < v.n; k++)
        if (v.m[k].port == port)
            return true;
    return false;
}

/* The kid of the oldest Up member in member i's view: the coordinator's host. */
static int oldest(int i)
{
    view_t v;
    assert_true(get_view(i, &v));
    int best = -1;
    unsigned long long up = 0;
    for (int k = 0; k < v.n; k++)
        if (v.m[k].status == SHOAL_MEMBER_UP && v.m[k].up && (best < 0 || v.m[k].up < up)) {
            best = kid_at_port(v.m[k].port);
            up = v.m[k].up;
        }
    assert_true(best >= 0);
    return best;
}

static long long stat_of(int i, const char *name)
{
    static char out[4096];
    if (cmd(i, out, sizeof out, 2000, "stats") != 0)
        return -1;
    size_t nl = strlen(name);
    for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, name, nl) == 0 && l[nl] == ' ')
            return atoll(l + nl + 1);
    return -1;
}

static bool healthy(void *arg)
{
    char out[64];
    return cmd(*(int *)arg, out, sizeof out, 2000, "healthy") == 0 && out[0] == '1';
}

static void wait_healthy(int i, int timeout_ms)
{
    if (!wait_until(healthy, &i, timeout_ms))
        fail_msg("member %d: its region did not register with the coordinator", i);
}

/* The coordinator runs at member i (it read its state there). */
static bool coordinator_at(void *arg)
{
    return stat_of(*(int *)arg, "state_reads") > 0;
}

/* The shards member i hosts now, as a mask (shard ids are the default decimal ones). */
static uint64_t shard_mask(int i)
{
    static char out[8192];
    assert_int_equal(cmd(i, out, sizeof out, 2000, "state"), 0);
    uint64_t m = 0;
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        int shard;
        size_t n;
        if (sscanf(l, "shard %d %zu", &shard, &n) == 2 && shard >= 0 && shard < NSHARDS)
            m |= 1ull << shard;
    }
    return m;
}

static void cut_off(int i, const int *from, int n)
{
    char ports[256] = "", out[64];
    size_t len = 0;
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(ports + len, sizeof ports - len, " %d", kids[from[k]].port);
    assert_int_equal(cmd(i, out, sizeof out, 2000, "cut%s", ports), 0);
    assert_string_equal(out, "ok\n");
}

/* ---------------------------------------------------------------------------------------------
 * Entities
 */
typedef struct {
    char eid[EID_MAX];
    int shard;
    bool ok;
    int pid, port;
    unsigned long long count;
} ent_t;

/* n entity ids whose shard is in [lo, hi), numbered from *next on. */
static void pick(ent_t *e, int n, int lo, int hi, int *next)
{
    for (int k = 0; k < n;) {
        char id[EID_MAX], shard[SHOAL_SHARD_ID_MAX + 1];
        snprintf(id, sizeof id, "e%d", (*next)++);
        shoal_sharding_default_shard_id(id, NSHARDS, shard);
        int s = atoi(shard);
        if (s < lo || s >= hi)
            continue;
        memset(&e[k], 0, sizeof e[k]);
        snprintf(e[k].eid, sizeof e[k].eid, "%s", id);
        e[k].shard = s;
        k++;
    }
}

/* Asks every entity of e (again and again, round robin over the members in via) until each
   answered or the deadline passed (at least once); true when all answered. */
static bool ask_all(const int *via, int nvia, ent_t *e, int n, int timeout_ms, int ask_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    uint32_t per_ask = (uint32_t)(ask_ms * tscale());
    static char out[1 << 16];
    for (int round = 0;; round++) {
        int left = 0;
        for (int k = 0; k < n; k++)
            left += !e[k].ok;
        if (!left)
            return true;
        if (round && shoal_now_ms() > deadline)
            return false;
        if (round)
            pause_ms(100);
        int m = via[round % nvia];
        /* up to 50 entities per command, all in flight at once */
        for (int k = 0; k < n;) {
            char list[50 * EID_MAX + 1] = "";
            size_t len = 0;
            int idx[50], c = 0;
            for (; k < n && c < 50; k++)
                if (!e[k].ok) {
                    len += (size_t)snprintf(list + len, sizeof list - len, " %s", e[k].eid);
                    idx[c++] = k;
                }
            if (!c)
                break;
            if (cmd(m, out, sizeof out, per_ask + 3000 * (uint32_t)tscale(), "ask %u%s",
                    per_ask, list) != 0)
                continue;
            char *save = NULL;
            int j = 0;
            for (char *l = strtok_r(out, "\n", &save); l && j < c;
                 l = strtok_r(NULL, "\n", &save), j++) {
                ent_t *x = &e[idx[j]];
                char id[EID_MAX + 8];
                int pid, port;
                unsigned long long count;
                if (sscanf(l, "%23s ok %d %d %llu", id, &pid, &port, &count) == 4 &&
                    strcmp(id, x->eid) == 0) {
                    x->ok = true;
                    x->pid = pid;
                    x->port = port;
                    x->count = count;
                }
            }
        }
    }
}

static void reset_answers(ent_t *e, int n)
{
    for (int k = 0; k < n; k++) {
        e[k].ok = false;
        e[k].pid = 0;
    }
}

static void must_answer(const int *via, int nvia, ent_t *e, int n, int timeout_ms, int ask_ms,
                        const char *what)
{
    reset_answers(e, n);
    if (!ask_all(via, nvia, e, n, timeout_ms, ask_ms)) {
        int missing = 0;
        char list[512] = "";
        size_t len = 0;
        for (int k = 0; k < n; k++)
            if (!e[k].ok) {
                missing++;
                if (len < sizeof list - 40)
                    len += (size_t)snprintf(list + len, sizeof list - len, " %s(shard %d)",
                                            e[k].eid, e[k].shard);
            }
        fail_msg("%s: %d of %d entities did not answer:%s", what, missing, n, list);
    }
}

static void tell_all(int via, const ent_t *e, int n)
{
    static char list[1 << 14], out[128];
    size_t len = 0;
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(list + len, sizeof list - len, " %s", e[k].eid);
    assert_int_equal(cmd(via, out, sizeof out, 2000, "tell%s", list), 0);
    char expect[64];
    snprintf(expect, sizeof expect, "ok %d 0\n", n);
    assert_string_equal(out, expect);
}

/* Waits until member `who` sees exactly the members `members` Up and converged, asking for
   every entity of e all along (one member of via after the other). Shards are allocated on
   demand: only traffic makes the survivors take a shard over as early as the coordinator lets
   them, which is when a second owner would show. */
static void settle_with_traffic(const int *via, int nvia, ent_t *e, int n, int who,
                                unsigned members, int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    members_cond_t c = {who, members};
    for (int round = 0; !members_are(&c); round++) {
        if (shoal_now_ms() > deadline)
            wait_members(who, members, 0); /* fails with the view */
        reset_answers(e, n);
        ask_all(via + round % nvia, 1, e, n, 0, 500);
    }
}

static int kid_of_pid(int pid)
{
    for (int i = 0; i < MAXK; i++)
        if (kids[i].was == pid)
            return i;
    return -1;
}

/* Every answer came from one of the members in `alive` (a mask of kids). */
static void hosts_within(const ent_t *e, int n, unsigned alive)
{
    for (int k = 0; k < n; k++) {
        int i = kid_of_pid(e[k].pid);
        if (i < 0 || !(alive & (1u << i)))
            fail_msg("entity %s answered from pid %d (member %d), not a live member", e[k].eid,
                     e[k].pid, i);
    }
}

/* ---------------------------------------------------------------------------------------------
 * At most one owner: the events file
 */
typedef struct {
    char key[EID_MAX + 8];  /* entity id */
    int shard;
    int pid;
    int64_t from, to; /* INT64_MAX: still live */
} interval_t;

typedef struct {
    interval_t *iv;
    size_t n, cap;
} ivec_t;

static void ivec_push(ivec_t *v, const interval_t *x)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 256;
        v->iv = realloc(v->iv, v->cap * sizeof *v->iv);
        assert_non_null(v->iv);
    }
    v->iv[v->n++] = *x;
}

static int by_key(const void *a, const void *b)
{
    const interval_t *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->from > y->from) - (x->from < y->from);
}

static int by_shard(const void *a, const void *b)
{
    const interval_t *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard - y->shard;
    return (x->from > y->from) - (x->from < y->from);
}

static void report(char *out, size_t cap, size_t *len, int *count, const char *fmt, ...)
{
    (*count)++;
    if (*count > 12 || *len >= cap - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len += (size_t)n < cap - *len ? (size_t)n : cap - *len - 1;
}

/* Overlaps between intervals of different processes within groups of equal key (sorted so). */
static void overlaps(const ivec_t *v, bool shards, char *out, size_t cap, size_t *len, int *count)
{
    for (size_t a = 0; a < v->n;) {
        size_t b = a;
        while (b < v->n && (shards ? v->iv[b].shard == v->iv[a].shard
                                   : strcmp(v->iv[b].key, v->iv[a].key) == 0))
            b++;
        for (size_t i = a; i < b; i++)
            for (size_t j = i + 1; j < b && v->iv[j].from < v->iv[i].to; j++) {
                const interval_t *x = &v->iv[i], *y = &v->iv[j];
                if (x->pid == y->pid)
                    continue;
                if (shards)
                    report(out, cap, len, count,
                           "shard %d live in pid %d (from %lld, entity %s) and pid %d (from "
                           "%lld, entity %s)\n",
                           x->shard, x->pid, (long long)x->from, x->key, y->pid,
                           (long long)y->from, y->key);
                else
                    report(out, cap, len, count,
                           "entity %s live in pid %d [%lld, %lld] and pid %d [%lld, %lld]\n",
                           x->key, x->pid, (long long)x->from, (long long)x->to, y->pid,
                           (long long)y->from, (long long)y->to);
            }
        a = b;
    }
}

/* Reads the events file; returns the number of violations (described in out) and the number of
   entity intervals seen in *n_intervals. */
static int check_owners(const char *path, char *out, size_t cap, size_t *n_intervals)
{
    FILE *f = fopen(path, "r");
    out[0] = 0;
    *n_intervals = 0;
    if (!f) {
        snprintf(out, cap, "cannot read %s: %s\n", path, strerror(errno));
        return 1;
    }
    ivec_t open_iv = {0}, done = {0};
    size_t len = 0;
    int count = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        long long t;
        int pid;
        char what[16], eid[EID_MAX + 8], shard[SHOAL_SHARD_ID_MAX + 1];
        if (sscanf(line, "%lld %d %15s %23s %64s", &t, &pid, what, eid, shard) != 5) {
            report(out, cap, &len, &count, "malformed line: %s", line);
            continue;
        }
        if (strcmp(what, "start") == 0) {
            for (size_t i = 0; i < open_iv.n; i++)
                if (open_iv.iv[i].pid == pid && strcmp(open_iv.iv[i].key, eid) == 0)
                    report(out, cap, &len, &count, "entity %s started twice in pid %d\n", eid,
                           pid);
            interval_t x = {.shard = atoi(shard), .pid = pid, .from = t, .to = INT64_MAX};
            snprintf(x.key, sizeof x.key, "%s", eid);
            ivec_push(&open_iv, &x);
        } else if (strcmp(what, "stop") == 0) {
            size_t i = 0;
            while (i < open_iv.n && !(open_iv.iv[i].pid == pid && strcmp(open_iv.iv[i].key, eid) == 0))
                i++;
            if (i == open_iv.n) {
                report(out, cap, &len, &count, "entity %s stopped in pid %d, never started\n",
                       eid, pid);
                continue;
            }
            open_iv.iv[i].to = t;
            ivec_push(&done, &open_iv.iv[i]);
            open_iv.iv[i] = open_iv.iv[--open_iv.n];
        } else if (strcmp(what, "killed") == 0 || strcmp(what, "exited") == 0) {
            for (size_t i = 0; i < open_iv.n;) {
                if (open_iv.iv[i].pid != pid) {
                    i++;
                    continue;
                }
                if (what[0] == 'e')
                    report(out, cap, &len, &count,
                           "pid %d exited by itself with entity %s (shard %d) not stopped\n",
                           pid, open_iv.iv[i].key, open_iv.iv[i].shard);
                open_iv.iv[i].to = t;
                ivec_push(&done, &open_iv.iv[i]);
                open_iv.iv[i] = open_iv.iv[--open_iv.n];
            }
        } else {
            report(out, cap, &len, &count, "unknown event: %s", line);
        }
    }
    fclose(f);
    for (size_t i = 0; i < open_iv.n; i++)
        ivec_push(&done, &open_iv.iv[i]); /* still live (to = INT64_MAX) */
    *n_intervals = done.n;
    if (done.n) {
        qsort(done.iv, done.n, sizeof *done.iv, by_key);
        overlaps(&done, false, out, cap, &len, &count);
        qsort(done.iv, done.n, sizeof *done.iv, by_shard);
        overlaps(&done, true, out, cap, &len, &count);
    }
    free(open_iv.iv);
    free(done.iv);
    return count;
}

static void check_single_owner(void)
{
    reap();
    static char out[8192];
    size_t n = 0;
    int bad = check_owners(events, out, sizeof out, &n);
    if (bad) {
        fprintf(stderr, "at most one owner violated:\n%s", out);
        fail_msg("at most one owner violated: %d findings in %zu entity intervals (the first "
                 "ones above; events in %s)",
                 bad, n, events);
    }
    assert_true(n > 0); /* the scenario ran entities at all */
}

/* Members that were not killed are still running (none crashed or was downed). */
static void none_died(void)
{
    reap();
    for (int i = 0; i < MAXK; i++)
        if (kids[i].exited)
            fail_msg("member %d exited (status 0x%x) though nobody killed or cut it", i,
                     kids[i].status);
}

/* ---------------------------------------------------------------------------------------------
 * Scenarios
 */
/* Member 0 forms the cluster (the oldest member: it runs the coordinator), then the others
   join; returns once all are Up and every region registered. */
static void start_cluster(int n, const char *opts)
{
    make_workdir();
    spawn(0, 0, opts);
    wait_members(0, 1u, 15000);
    for (int i = 1; i < n; i++)
        spawn(i, kids[0].port, opts);
    wait_members(0, (1u << n) - 1, 20000);
    for (int i = 0; i < n; i++)
        wait_healthy(i, 10000);
    int zero = 0;
    assert_true(wait_until(coordinator_at, &zero, 5000));
}

static unsigned mask_of(const int *k, int n)
{
    unsigned m = 0;
    for (int i = 0; i < n; i++)
        m |= 1u << k[i];
    return m;
}

/* The checker itself: it finds an entity live twice, a shard live twice through different
   entities, a killed member's open interval, and an exit with a live entity; clean handovers
   pass. */
static void test_owner_check_finds_overlaps(void **state)
{
    (void)state;
    make_workdir();
    FILE *f = fopen(events, "w");
    assert_non_null(f);
    fputs("100 1 start a 5\n"
          "150 2 start a 5\n" /* a in pid 1 and pid 2: entity and shard overlap */
          "200 1 stop a 5\n"
          "300 2 stop a 5\n"
          "400 3 start b 7\n"
          "440 4 start c 7\n" /* shard 7 in pid 3 (b, until killed) and pid 4 (c) */
          "450 3 killed - -\n"
          "500 4 stop c 7\n"
          "600 5 start d 8\n"
          "700 5 stop d 8\n"
          "701 6 start d 8\n" /* a clean move */
          "800 6 stop d 8\n"
          "900 7 start x 9\n"
          "950 7 exited - -\n", /* exited with x live */
          f);
    fclose(f);
    char out[4096];
    size_t n = 0;
    int bad = check_owners(events, out, sizeof out, &n);
    assert_int_equal(n, 7);
    assert_int_equal(bad, 4);
    assert_non_null(strstr(out, "entity a live in pid 1"));
    assert_non_null(strstr(out, "shard 5 live in pid 1"));
    assert_non_null(strstr(out, "shard 7 live in pid 3"));
    assert_non_null(strstr(out, "pid 7 exited by itself with entity x"));
    assert_null(strstr(out, "entity d"));
    passed = true;
}

/* SIGKILL of a member hosting shards: once it is downed (keep-majority: 2 of 3 stay) and the
   removal margin passed, its shards get homes on the survivors and its entities answer there;
   the survivors' shards stay where they were. */
static void test_kill_shard_host(void **state)
{
    (void)state;
    start_cluster(3, "");
    static ent_t e[90];
    int next = 0;
    pick(e, 90, 0, NSHARDS, &next);
    int all[] = {0, 1, 2};
    must_answer(all, 3, e, 90, 20000, 2000, "before the kill");
    uint64_t lost = shard_mask(2), kept0 = shard_mask(0), kept1 = shard_mask(1);
    int on_victim = 0;
    for (int k = 0; k < 90; k++)
        on_victim += e[k].pid == kids[2].was;
    assert_true(on_victim > 0 && lost != 0);
    assert_int_equal(lost & (kept0 | kept1), 0);

    kill_member(2);
    int live[] = {0, 1};
    settle_with_traffic(live, 2, e, 90, 0, 0x3, 30000);
    must_answer(live, 2, e, 90, 30000, 2000, "after the kill");
    hosts_within(e, 90, 0x3);
    uint64_t m0 = shard_mask(0), m1 = shard_mask(1);
    assert_int_equal(m0 & m1, 0);
    assert_int_equal(m0 & kept0, kept0);
    assert_int_equal(m1 & kept1, kept1);
    assert_int_equal((m0 | m1) & lost, lost);
    check_single_owner();
    none_died();
    passed = true;
}

/* SIGKILL of the coordinator's member. During the outage shards with known homes keep
   answering (through regions that know the homes) and tells to new shards wait in the buffers;
   once the member is downed and removed the next oldest runs the coordinator, recovers the
   state from the replicator (the survivors' shards keep their homes), the buffered tells reach
   their entities and new shards get homes. */
static void test_kill_coordinator(void **state)
{
    (void)state;
    start_cluster(3, "");
    static ent_t known[60], fresh[20];
    int next = 0;
    pick(known, 60, 0, 30, &next);
    pick(fresh, 20, 30, NSHARDS, &next); /* shards nobody asked for yet */
    int v1[] = {1}, v2[] = {2};
    /* both survivors-to-be learn every home */
    must_answer(v1, 1, known, 60, 20000, 2000, "through member 1");
    must_answer(v2, 1, known, 60, 20000, 2000, "through member 2");
    uint64_t m1 = shard_mask(1), m2 = shard_mask(2);
    static ent_t on_live[60];
    int n_live = 0;
    for (int k = 0; k < 60; k++)
        if (known[k].pid != kids[0].was)
            on_live[n_live++] = known[k];
    assert_true(n_live > 0 && m1 && m2);

    kill_member(0);
    /* the outage: the coordinator is gone and its member not even removed yet */
    must_answer(v1, 1, on_live, n_live, 3000, 1000, "known shards through member 1, outage");
    must_answer(v2, 1, on_live, n_live, 3000, 1000, "known shards through member 2, outage");
    tell_all(1, fresh, 20);
    assert_true(lists_member(1, kids[0].port));

    int live[] = {1, 2};
    settle_with_traffic(live, 2, on_live, n_live, 1, 0x6, 30000);
    int next_coord = oldest(1); /* members 1 and 2 came Up together: either may be older */
    assert_true(wait_until(coordinator_at, &next_coord, 15000));
    wait_healthy(1, 10000);
    wait_healthy(2, 10000);
    /* the survivors' shards did not move */
    uint64_t n1 = shard_mask(1), n2 = shard_mask(2);
    assert_int_equal(n1 & m1, m1);
    assert_int_equal(n2 & m2, m2);
    /* new shards get homes, and the tells buffered during the outage got there first (asked
       through the region that buffered them: its messages keep their order) */
    must_answer(v1, 1, fresh, 20, 30000, 2000, "new shards after the failover");
    for (int k = 0; k < 20; k++)
        if (fresh[k].count < 2)
            fail_msg("entity %s: count %llu: the tell buffered during the outage was lost",
                     fresh[k].eid, fresh[k].count);
    must_answer(live, 2, known, 60, 30000, 2000, "every entity after the failover");
    hosts_within(known, 60, 0x6);
    assert_int_equal(shard_mask(1) & shard_mask(2), 0);
    check_single_owner();
    none_died();
    passed = true;
}

static bool handing_off(void *arg)
{
    return stat_of(*(int *)arg, "stopping") > 0;
}

/* The coordinator's member killed while a rebalance hands shards over: member 2 joins a cluster
   whose 40 shards sit on members 0 and 1, and member 0 is killed at a moment when member 1 is
   in the middle of handing a shard off (its entities obey the stop message only after 400 ms).
   Nobody runs a shard twice, and afterwards every entity answers on the survivors. */
static void test_coordinator_killed_mid_handoff(void **state)
{
    (void)state;
    start_cluster(2, "stop_delay=400");
    static ent_t e[120];
    int next = 0;
    pick(e, 120, 0, NSHARDS, &next);
    int all[] = {0, 1};
    must_answer(all, 2, e, 120, 20000, 2000, "before the rebalance");
    spawn(2, kids[0].port, "stop_delay=400");
    wait_members(0, 0x7, 20000);
    int one = 1;
    if (!wait_until(handing_off, &one, 20000))
        fail_msg("member 1 never handed a shard off (coordinator: %lld rebalance rounds, %lld "
                 "moved)",
                 stat_of(0, "rebalance_rounds"), stat_of(0, "shards_moved"));
    long long moved = stat_of(0, "shards_moved"), rounds = stat_of(0, "rebalance_rounds");
    kill_member(0);
    print_message("coordinator killed after %lld rebalance rounds, %lld shards moved, member 1 "
                  "handing off\n",
                  rounds, moved);
    int live[] = {1, 2};
    settle_with_traffic(live, 2, e, 120, 1, 0x6, 30000);
    must_answer(live, 2, e, 120, 40000, 2000, "after the coordinator's death");
    hosts_within(e, 120, 0x6);
    assert_int_equal(shard_mask(1) & shard_mask(2), 0);
    check_single_owner();
    none_died();
    passed = true;
}

/* Seven members shrink to three while shards are being allocated, in two steps of two SIGKILLs
   (four at once would leave a minority, which keep-majority downs). Each step kills the
   coordinator's member right after tells to new shards were sent, so allocations are in flight
   when it dies, and the next coordinator reads the state from a smaller cluster: 5 members,
   then 3. With a plain majority write (4 of 7) an allocation could live only on members that
   are dead by the time the third coordinator reads from a majority of the 3 survivors (2), and
   the shard would be handed out twice; write-majority-plus, the regions reporting what they
   host when they register, and the wait for them before allocating anything new must prevent
   that. Every entity answers at the end, on the survivors, and no shard ran twice. */
static void test_seven_shrink_to_three(void **state)
{
    (void)state;
    start_cluster(7, "");
    static ent_t e[140];
    int next = 0;
    pick(e, 100, 0, 24, &next);
    pick(e + 100, 20, 24, 32, &next);
    pick(e + 120, 20, 32, NSHARDS, &next);
    int all[] = {0, 1, 2, 3, 4, 5, 6};
    must_answer(all, 7, e, 100, 20000, 2000, "seven members");

    /* step 1: the coordinator's member (0) and member 6 */
    tell_all(3, e + 100, 20);
    kill_member(0);
    kill_member(6);
    int five[] = {1, 2, 3, 4, 5};
    settle_with_traffic(five, 5, e, 120, 3, 0x3e, 40000);
    int c1 = oldest(3);
    assert_true(wait_until(coordinator_at, &c1, 15000));
    must_answer(five, 5, e, 120, 30000, 2000, "five members");

    /* step 2: the new coordinator's member and one more */
    int other = c1 == 5 ? 4 : 5;
    tell_all(3, e + 120, 20);
    kill_member(c1);
    kill_member(other);
    unsigned alive = 0x3e & ~(1u << c1) & ~(1u << other);
    int three[3], n3 = 0;
    for (int i = 0; i < MAXK; i++)
        if (alive & (1u << i))
            three[n3++] = i;
    assert_int_equal(n3, 3);
    settle_with_traffic(three, 3, e, 140, three[0], alive, 40000);
    must_answer(three, 3, e, 140, 40000, 2000, "three members");
    hosts_within(e, 140, alive);
    assert_int_equal(shard_mask(three[0]) & shard_mask(three[1]), 0);
    assert_int_equal(shard_mask(three[0]) & shard_mask(three[2]), 0);
    assert_int_equal(shard_mask(three[1]) & shard_mask(three[2]), 0);
    check_single_owner();
    none_died();
    passed = true;
}

/* A 2|3 partition (the transport cut both ways between the sides). Keep-majority downs the
   minority: its members stop their shards and shut down; the majority removes them and, after
   the removal margin, gives their shards homes of its own. Nobody runs a shard twice at any
   time, and every entity answers on the majority. */
static void partition(const int *minority, const int *majority)
{
    start_cluster(5, "");
    static ent_t e[100];
    int next = 0;
    pick(e, 100, 0, NSHARDS, &next);
    int all[] = {0, 1, 2, 3, 4};
    must_answer(all, 5, e, 100, 20000, 2000, "before the partition");
    uint64_t minority_shards = shard_mask(minority[0]) | shard_mask(minority[1]);
    assert_true(minority_shards != 0);
    for (int k = 0; k < 2; k++)
        cut_off(minority[k], majority, 3);
    for (int k = 0; k < 3; k++)
        cut_off(majority[k], minority, 2);
    settle_with_traffic(majority, 3, e, 100, majority[0], mask_of(majority, 3), 60000);
    int64_t deadline = deadline_after(30000);
    for (int round = 0; !(kids[minority[0]].exited && kids[minority[1]].exited); round++) {
        if (shoal_now_ms() > deadline)
            fail_msg("the minority did not stop (members %d: %s, %d: %s)", minority[0],
                     kids[minority[0]].exited ? "stopped" : "running", minority[1],
                     kids[minority[1]].exited ? "stopped" : "running");
        reset_answers(e, 100);
        ask_all(majority + round % 3, 1, e, 100, 0, 500);
        reap();
    }
    for (int k = 0; k < 2; k++)
        if (!WIFEXITED(kids[minority[k]].status) || WEXITSTATUS(kids[minority[k]].status) != 0)
            fail_msg("member %d of the minority exited with status 0x%x", minority[k],
                     kids[minority[k]].status);
    must_answer(majority, 3, e, 100, 40000, 2000, "on the majority");
    hosts_within(e, 100, mask_of(majority, 3));
    uint64_t got = 0;
    for (int k = 0; k < 3; k++) {
        uint64_t m = shard_mask(majority[k]);
        assert_int_equal(got & m, 0);
        got |= m;
    }
    assert_int_equal(got & minority_shards, minority_shards);
    check_single_owner();
    for (int k = 0; k < 3; k++)
        assert_true(kids[majority[k]].pid > 0);
    passed = true;
}

static void test_partition_coordinator_in_minority(void **state)
{
    (void)state;
    const int minority[] = {0, 4}, majority[] = {1, 2, 3};
    partition(minority, majority);
}

static void test_partition_coordinator_in_majority(void **state)
{
    (void)state;
    const int minority[] = {3, 4}, majority[] = {0, 1, 2};
    partition(minority, majority);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_owner_check_finds_overlaps, teardown),
        cmocka_unit_test_teardown(test_kill_shard_host, teardown),
        cmocka_unit_test_teardown(test_kill_coordinator, teardown),
        cmocka_unit_test_teardown(test_coordinator_killed_mid_handoff, teardown),
        cmocka_unit_test_teardown(test_seven_shrink_to_three, teardown),
        cmocka_unit_test_teardown(test_partition_coordinator_in_minority, teardown),
        cmocka_unit_test_teardown(test_partition_coordinator_in_majority, teardown),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
