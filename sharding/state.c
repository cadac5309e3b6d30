/*  state.c — entity state kept in the role's replicator, reminders (durable timers), and the
    entity side of at-least-once delivery.

    One key per shard, "shard-<type>-estate:<shard>", an EntityStateMap (estate.c): entity id ->
    (epoch, seq, bytes). The "shard-" prefix makes it durable wherever sharding's keys are.

    A SHARD STARTS (allocation epoch E) in three steps, its messages waiting meanwhile:
      1. FENCE: raise the key's fence to E (write level). From then on a replica that has it
         refuses a write stamped with an older epoch: an old owner cut off by a partition gets
         SHOAL_ESTALE instead of an acknowledgement.
      2. READ the key (read level, prefer-oldest): what every acknowledged write left.
      3. ADOPT: re-stamp every entry read as (E, 0), locally and to the others (write level, not
         waited for): whatever an older owner still manages to write (E' < E) now loses the
         merge, so it cannot overwrite a state the new owner started from.
    Then each entity starts with its entry, and its saves are stamped (E, 1), (E, 2), ...

    STORED BYTES of an entity: u8 version (1) | u8 flags (1: a hand-over snapshot) | u8 n |
    n x (u8 producer id len | id | u64 last seq LE) | the entity's own bytes. The producers' last
    numbers ride in the same write as the state they produced, so a repeat after a crash is
    recognised exactly when its effect was stored.

    REMINDERS are entries of the same key, "\x01<entity id>\x00<reminder id>" -> u64 due unix ms
    LE | message, so they move, survive and are read with the shard. The owner keeps a list of
    the shard's reminders and delivers the due ones (starting the entity); the entry is deleted
    after the receive that handled it, so a crash in between fires it again (at least once).
    Shards with state are allocated eagerly by the coordinator (after a crash of their node, and
    from shard-<type>-all-shards after a full stop), so a reminder fires with nobody sending.
*/
#include <string.h>

#include "sharding_internal.h"
#include "estate.h"

#define STORED_VERSION  1
#define STORED_HANDOVER 0x01
#define PRODUCERS_MAX   64
#define REMINDER_MARK   0x01

typedef struct {
    char id[SHOAL_PRODUCER_ID_MAX + 1];
    uint8_t len;
    uint64_t last;  /* processed (in memory; stored with the save that follows it) */
    uint64_t acked; /* stored (its save acknowledged) */
    uint64_t used;
} seen_t;

struct ent_state {
    uint64_t inc;          /* incarnation: a restart after a failed save makes a new one */
    int saves;             /* in flight (the length of `inflight`) */
    struct save *inflight; /* its saves not completed yet, every incarnation's (EXACTLY ONCE) */
    unsigned gen;          /* saves issued so far (did a callback save again?) */
    bool finish_pending;   /* it asked to stop while saves were in flight */
    uint8_t origin;        /* 0 none, 1 read, 2 hand-over */
    seen_t *seen;
    size_t n_seen;
    uint64_t clock;
    /* the reliable message being received */
    bool in_reliable;
    char cur_pid[SHOAL_PRODUCER_ID_MAX + 1];
    uint64_t cur_seq;
    const shoal_node_t *cur_origin;
    uint64_t cur_ask;
    shoal_buf_t reply;
    struct save *confirm_w; /* the last save carrying its confirmation (until that is done) */
    const char *reminder;   /* in receive of a reminder */
};

typedef struct reminder {
    char eid[SHOAL_ENTITY_ID_MAX + 1];
    char rid[SHOAL_REMINDER_ID_MAX + 1];
    int64_t due_ms;      /* unix ms */
    uint64_t epoch, seq; /* of its entry: a newer schedule of the same id replaces it */
    bool firing;
} reminder_t;

static uint64_t next_inc = 1;

int shoal_sharding_register_types(void)
{
    return estate_register();
}

/* Registered when the library loads, not only in shoal_sharding_new: a program that hands
   sharding its own replicator (settings.replicator, the usual way with a durable store) creates
   it first, and the replicator loads its store right then. Without the type known at that moment
   every stored entity state was skipped as undecodable, and a restart of the whole cluster lost
   them all (found by the chaos suite: tools/chaos.py, "state-lost-after-full-restart"). */
__attribute__((constructor)) static void register_types_at_load(void)
{
    shoal_sharding_register_types();
}

bool state_on(const shoal_region_t *r)
{
    return r->s.entity_state && !r->proxy;
}

bool state_eager(const shoal_region_t *r)
{
    return r->s.entity_state;
}

static void key_of(const shoal_region_t *r, const char *shard, char *out, size_t cap)
{
    snprintf(out, cap, "shard-%s-estate:%s", r->name, shard);
}

static shoal_consistency_t write_level(const shoal_region_t *r)
{
    shoal_consistency_t c = {r->s.state_write_all ? SHOAL_ALL : SHOAL_MAJORITY,
                             0,
                             r->s.state_write_timeout_ms,
                             0,
                             r->s.state_write_all ? 0 : r->s.state_write_majority_plus,
                             true};
    return c;
}

static shoal_consistency_t read_level(const shoal_region_t *r)
{
    shoal_consistency_t c = {r->s.state_write_all ? SHOAL_FROM_N : SHOAL_MAJORITY,
                             r->s.state_write_all ? 1 : 0,
                             r->s.state_write_timeout_ms,
                             r->s.majority_min_cap,
                             r->s.state_write_all ? 0 : r->s.read_majority_plus,
                             true};
    return c;
}

static uint32_t backoff_ms(const shoal_region_t *r)
{
    uint32_t b = r->s.shard_failure_backoff_ms;
    return b > 2000 ? 2000 : (b ? b : 200);
}

static int64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------------------------------------
 * Stored bytes
 */
typedef struct {
    uint8_t flags;
    const uint8_t *producers; /* n entries, raw */
    size_t n_producers, producers_len;
    const uint8_t *user;
    size_t user_len;
} stored_t;

static int stored_parse(const uint8_t *d, size_t len, stored_t *out)
{
    memset(out, 0, sizeof *out);
    if (len < 3 || d[0] != STORED_VERSION)
        return SHOAL_EDECODE;
    out->flags = d[1];
    size_t n = d[2], at = 3;
    out->producers = d + at;
    for (size_t i = 0; i < n; i++) {
        if (at >= len)
            return SHOAL_EDECODE;
        size_t l = d[at];
        if (l == 0 || l > SHOAL_PRODUCER_ID_MAX || at + 1 + l + 8 > len)
            return SHOAL_EDECODE;
        at += 1 + l + 8;
    }
    out->n_producers = n;
    out->producers_len = at - 3;
    out->user = d + at;
    out->user_len = len - at;
    return 0;
}

static void stored_build(shoal_buf_t *out, const struct ent_state *st, uint8_t flags,
                         const void *user, size_t len)
{
    shoal_buf_reset(out);
    uint8_t h[3] = {STORED_VERSION, flags, (uint8_t)(st ? st->n_seen : 0)};
    shoal_buf_append(out, h, 3);
    for (size_t i = 0; st && i < st->n_seen; i++) {
        uint8_t l = st->seen[i].len;
        shoal_buf_append(out, &l, 1);
        shoal_buf_append(out, st->seen[i].id, l);
        wire_put_u64(out, st->seen[i].last);
    }
    if (len)
        shoal_buf_append(out, user, len);
}

/* The entity's entry in the local replica (NULL: none, deleted, or not ours to read). */
static const shoal_crdt_t *shard_value(const shard_t *s)
{
    char key[SHOAL_SHARD_ID_MAX + 300];
    key_of(s->r, s->id, key, sizeof key);
    const shoal_crdt_t *v = shoal_replicator_peek(s->r->rep, key);
    return v && shoal_crdt_type(v) == &estate_type ? v : NULL;
}

static int shard_entry(const shard_t *s, const void *key, size_t klen, estate_entry_t *out);

static bool entity_stored(const shoal_entity_t *e, stored_t *out)
{
    estate_entry_t en;
    if (shard_entry(e->shard, e->id, strlen(e->id), &en) != 0 || en.deleted)
        return false;
    return stored_parse(en.data, en.len, out) == 0;
}

/* ---------------------------------------------------------------------------------------------
 * Writes: one update of the shard's key per save, stamped (epoch, next seq)
 */
typedef struct save {
    life_t *life;             /* the shard's */
    shoal_entity_t *e;        /* NULL: not an entity's save (adopt, reminder delete), or one
                                 completed already (its entity stopped by force) */
    struct save *prev, *next; /* in e->st->inflight while e is set */
    uint64_t inc;
    shoal_save_done_fn *done;
    void *arg;
    /* what to write */
    uint64_t epoch, seq;
    bool del;
    int64_t now;
    bool stale;
    size_t klen, len;
    uint8_t *key, *data;
    /* a reliable message confirmed by this save */
    bool confirm;
    char pid[SHOAL_PRODUCER_ID_MAX + 1];
    uint64_t cseq;
    const shoal_node_t *corigin;
    uint64_t cask;
    uint8_t *creply;
    size_t creply_len;
    /* shoal_entity_save_reply */
    bool answer;
    const shoal_node_t *ato;
    uint64_t aask;
    uint8_t *areply;
    size_t areply_len;
    bool answered;            /* the ask has its answer */
    int64_t started_us;       /* issued: for the region's save latency histogram */
    struct save *queued_next; /* in the shard's queue for the next write (group commit) */
    int modify_rc;            /* this save's own part of its batch's write failed */
} save_t;

static void save_free(save_t *w)
{
    life_release(w->life);
    free(w->key);
    free(w->data);
    free(w->creply);
    free(w->areply);
    free(w);
}

/* EXACTLY ONCE. An entity's save is on its entity's `inflight` list from issue() until its
   completion is told: by save_done when the replicator completes it (to the entity that issued
   it, or to its restarted incarnation: a restart keeps the list), or by saves_abandon when the
   entity is stopped by force first (SHOAL_ESTOPPED, before its stop callback). Whichever comes
   first takes it off the list and calls the callback; the other finds it detached. Before, a
   save whose entity restarted or was stopped by force (a zombie's entity, once its node learns
   that its shards moved) was dropped without a word (issue 31). */
static void save_attach(shoal_entity_t *e, save_t *w)
{
    struct ent_state *st = e->st;
    w->e = e;
    w->prev = NULL;
    w->next = st->inflight;
    if (st->inflight)
        st->inflight->prev = w;
    st->inflight = w;
    st->saves++;
}

static void save_detach(save_t *w)
{
    struct ent_state *st = w->e->st;
    if (w->prev)
        w->prev->next = w->next;
    else
        st->inflight = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    if (st->confirm_w == w)
        st->confirm_w = NULL;
    st->saves--;
    w->e = NULL;
}

static int save_modify(shoal_crdt_t *value, void *arg)
{
    save_t *w = arg;
    if (estate_fence(value) > w->epoch) {
        w->stale = true;
        return SHOAL_ESTALE;
    }
    int rc = w->del ? estate_delete(value, w->key, w->klen, w->epoch, w->seq, w->now)
                    : estate_put(value, w->key, w->klen, w->epoch, w->seq, w->data, w->len);
    if (rc == SHOAL_ESTALE)
        w->stale = true;
    return rc;
}

static void entity_restart(shoal_entity_t *e);
static void entity_callback(shoal_entity_t *e, shoal_save_done_fn *fn, int status, void *arg);
static void reminders_forget(shard_t *s, const char *eid, const char *rid);

static seen_t *seen_find(struct ent_state *st, const char *pid, size_t len)
{
    for (size_t i = 0; i < st->n_seen; i++)
        if (st->seen[i].len == len && memcmp(st->seen[i].id, pid, len) == 0)
            return &st->seen[i];
    return NULL;
}

static void save_done(shoal_replicator_t *rep, int status, const char *key, void *arg)
{
    (void)rep;
    (void)key;
    save_t *w = arg;
    shard_t *s = w->life->obj;
    if (status == SHOAL_EMODIFY && w->stale)
        status = SHOAL_ESTALE;
    if (!s) {
        /* the shard is gone; its entities went first, and completed their saves as they went */
        if (w->e)
            save_detach(w);
        save_free(w);
        return;
    }
    shoal_region_t *r = s->r;
    shoal_hist_record_since(&r->lat->save, w->started_us);
    if (status == 0) {
        r->stats.state_saves++;
    } else {
        r->stats.state_save_failures++;
        if (status == SHOAL_ESTALE)
            r->stats.state_stale_refused++;
        shoal_warning("%s: sharding %s: shard %s: a state write failed (%d)%s",
                      shoal_node_id(r->self), r->name, s->id, status,
                      status == SHOAL_ESTALE ? ": a newer owner of the shard exists" : "");
    }
    if (w->answer && !w->answered)
        region_send_reply(r, w->ato, w->aask, status, status == 0 ? w->areply : NULL,
                          status == 0 ? w->areply_len : 0);
    shoal_entity_t *e = w->e; /* on its list: the entity is alive (it completes them to go) */
    if (!e) {
        /* completed already (its entity was stopped by force): the write is in or not, and a
           producer's confirmation still goes when it is */
        if (w->confirm && status == 0)
            region_send_reply(r, w->corigin, w->cask, 0, w->creply, w->creply_len);
        save_free(w);
        return;
    }
    save_detach(w);
    struct ent_state *st = e->st;
    bool current = st->inc == w->inc; /* not a save of an incarnation before a restart */
    if (w->confirm && status == 0) {
        /* a restarted incarnation counts only its own saves as storing its producers' numbers */
        seen_t *p = current ? seen_find(st, w->pid, strlen(w->pid)) : NULL;
        if (p && w->cseq > p->acked)
            p->acked = w->cseq;
        region_send_reply(r, w->corigin, w->cask, 0, w->creply, w->creply_len);
    }
    unsigned gen = st->gen;
    uint64_t inc = st->inc;
    char eid[SHOAL_ENTITY_ID_MAX + 1];
    snprintf(eid, sizeof eid, "%s", e->id);
    shoal_save_done_fn *done = w->done;
    void *done_arg = w->arg;
    save_free(w);
    if (done)
        entity_callback(e, done, status, done_arg);
    /* the callback may have stopped it */
    e = shard_entity(s, eid);
    if (!e || !e->st || e->st->inc != inc)
        return;
    /* memory may hold what was not stored: start from what was. Not for a failed save of an
       incarnation before a restart: the restart already started from what is stored. */
    if (current && status != 0 && e->st->gen == gen && e->status == E_RUNNING)
        entity_restart(e);
    if (e->st->saves == 0 && e->st->finish_pending) {
        e->st->finish_pending = false;
        s->r->lifecycle->finish_now(e);
    }
}

/* The entity goes before its saves complete (stopped by force: a stale or downed copy, or a
   straggler past handoff-timeout): each save's callback runs now, while the entity still has its
   state, with `status`, and its ask (shoal_entity_save_reply) is answered so; the write itself
   goes on (its later completion finds the save detached). */
static void saves_abandon(shoal_entity_t *e, int status)
{
    shoal_region_t *r = e->shard->r;
    if (e->st->inflight)
        shoal_debug("%s: sharding %s: entity %s stopped with %d saves in flight: completed as "
                    "%d",
                    shoal_node_id(r->self), r->name, e->id, e->st->saves, status);
    save_t *w;
    while (e->st && (w = e->st->inflight)) {
        save_detach(w);
        if (w->answer && !w->answered) {
            w->answered = true;
            region_send_reply(r, w->ato, w->aask, status, NULL, 0);
        }
        shoal_save_done_fn *done = w->done;
        w->done = NULL;
        if (done)
            entity_callback(e, done, status, w->arg);
    }
}

/* GROUP COMMIT (issue 40, section 2). A shard's saves all write the same key, and each write is
   a quorum round of its own: with saves arriving faster than a round trip, most of the cost was
   rounds, not bytes. So a shard keeps at most WRITES_IN_FLIGHT writes of its key in flight; a
   save issued while they are all out waits in the shard's queue, and the next write (started
   when one completes, never on a timer) carries every save queued by then, in issue order, as
   one delta. Each save of a batch completes with the batch's status, except one whose own entry
   was refused (an older stamp than the key's: SHOAL_ESTALE), which fails alone. A save issued
   while a write slot is free goes at once, as before: nothing waits that did not have to. */
#define WRITES_IN_FLIGHT 2

typedef struct {
    life_t *life; /* the shard's */
    size_t n;
    save_t *w[]; /* in issue order */
} batch_t;

static int batch_modify(shoal_crdt_t *value, void *arg)
{
    batch_t *b = arg;
    int first = 0;
    size_t ok = 0;
    for (size_t i = 0; i < b->n; i++) {
        int rc = save_modify(value, b->w[i]);
        b->w[i]->modify_rc = rc;
        if (rc == 0)
            ok++;
        else if (!first)
            first = rc;
    }
    return ok ? 0 : first; /* nothing to write: the update fails as a single save's would */
}

static void batch_start(shard_t *s);

static void batch_done(shoal_replicator_t *rep, int status, const char *key, void *arg)
{
    batch_t *b = arg;
    /* the batch keeps its write slot while its saves complete: the saves their callbacks issue
       queue, and go together in the next write below */
    for (size_t i = 0; i < b->n; i++) {
        save_t *w = b->w[i];
        save_done(rep, status == 0 && w->modify_rc ? SHOAL_EMODIFY : status, key, w);
    }
    shard_t *s = b->life->obj; /* NULL: gone, or stopped by a completion */
    if (s) {
        s->state_writes--;
        if (s->state_queued && s->state_writes < WRITES_IN_FLIGHT)
            batch_start(s);
    }
    life_release(b->life);
    free(b);
}

/* Writes every queued save of the shard as one update. */
static void batch_start(shard_t *s)
{
    shoal_region_t *r = s->r;
    size_t n = 0;
    for (save_t *w = s->state_queued; w; w = w->queued_next)
        n++;
    batch_t *b = malloc(sizeof *b + n * sizeof(save_t *));
    if (!b)
        abort();
    b->life = life_ref(s->life);
    b->n = 0;
    for (save_t *w = s->state_queued; w; w = w->queued_next)
        b->w[b->n++] = w;
    s->state_queued = s->state_queued_tail = NULL;
    s->state_writes++;
    char key[SHOAL_SHARD_ID_MAX + 300];
    key_of(r, s->id, key, sizeof key);
    shoal_crdt_t *initial = estate_new();
    shoal_consistency_t c = write_level(r);
    int rc = shoal_replicator_update(r->rep, key, initial, &c, batch_modify, b, batch_done, b);
    if (rc < 0)
        batch_done(r->rep, rc, key, b);
}

/* THE OWNER'S VIEW of an entry: the newest write of `key` this shard issued, else the local
   replica's entry. A queued save is not in the local replica until its batch starts, yet every
   reader here (an entity's start, the re-save of a reliable message's numbers, a reminder's
   firing and the "scheduled again?" check after it) must see every save issued before it, as
   it did when each save was applied at once. Reading the replica alone broke the payments
   example: a "retry" reminder scheduled again in its own receive while the shard's writes were
   busy was taken for "not scheduled again", forgotten, and deleted by a write stamped after the
   new schedule, so it never fired again. The queue is short (the saves of one shard issued
   during one write's round trip). */
static int shard_entry(const shard_t *s, const void *key, size_t klen, estate_entry_t *out)
{
    const save_t *last = NULL;
    for (const save_t *w = s->state_queued; w; w = w->queued_next)
        if (w->klen == klen && memcmp(w->key, key, klen) == 0)
            last = w; /* issue order: the last one is the newest */
    if (last) {
        *out = (estate_entry_t){.epoch = last->epoch,
                                .seq = last->seq,
                                .deleted = last->del,
                                .deleted_unix_ms = last->del ? last->now : 0,
                                .data = last->del ? NULL : last->data,
                                .len = last->del ? 0 : last->len};
        return 0;
    }
    const shoal_crdt_t *v = shard_value(s);
    return v ? estate_get(v, key, klen, out) : SHOAL_ENOTFOUND;
}

static int issue(shard_t *s, save_t *w)
{
    w->life = life_ref(s->life);
    w->epoch = s->epoch;
    w->seq = ++s->state_seq;
    w->now = unix_ms();
    w->started_us = shoal_hist_now_us();
    if (w->e) {
        shoal_entity_t *e = w->e;
        w->inc = e->st->inc;
        e->st->gen++;
        save_attach(e, w); /* before the update: it may complete at once */
    }
    if (s->state_queued_tail)
        s->state_queued_tail->queued_next = w;
    else
        s->state_queued = w;
    s->state_queued_tail = w;
    if (s->state_writes < WRITES_IN_FLIGHT)
        batch_start(s);
    return 0;
}

static save_t *save_new(shoal_entity_t *e, const void *key, size_t klen)
{
    save_t *w = calloc(1, sizeof *w);
    if (!w)
        abort();
    w->e = e;
    w->key = malloc(klen);
    if (!w->key)
        abort();
    memcpy(w->key, key, klen);
    w->klen = klen;
    return w;
}

static void *dup_bytes(const void *p, size_t n)
{
    void *d = malloc(n ? n : 1);
    if (!d)
        abort();
    if (n)
        memcpy(d, p, n);
    return d;
}

/* Attaches the confirmation of the reliable message in hand to the save w (the last one issued
   in its receive). */
static void attach_confirm(struct ent_state *st, save_t *w)
{
    w->confirm = true;
    snprintf(w->pid, sizeof w->pid, "%s", st->cur_pid);
    w->cseq = st->cur_seq;
    w->corigin = st->cur_origin;
    w->cask = st->cur_ask;
    w->creply = dup_bytes(st->reply.data, st->reply.len);
    w->creply_len = st->reply.len;
    st->confirm_w = w;
}

static int entity_check(const shoal_entity_t *e)
{
    if (entity_wrong_thread(e, "shoal_entity_save, _remind, _delete_state"))
        return SHOAL_ETHREAD;
    if (!e || !e->st)
        return SHOAL_EINVAL;
    /* a handoff's hand-over and stop still write (this is the owner until ShardStopped); an
       entity stopped by force (a stale or downed copy) does not */
    if (e->forced)
        return SHOAL_ESTOPPED;
    return 0;
}

/* The write of the entity's own bytes (its producers' numbers in front), not issued yet: the
   caller fills in what happens when it is done, then issue(). NULL with *rc on bad use. */
static save_t *save_prepare(shoal_entity_t *e, uint8_t flags, const void *data, size_t len, int *rc)
{
    *rc = entity_check(e);
    if (*rc == 0 && len && !data)
        *rc = SHOAL_EINVAL;
    if (*rc == 0 && len > ESTATE_DATA_MAX - 4096)
        *rc = SHOAL_ETOOBIG;
    if (*rc < 0)
        return NULL;
    shoal_buf_t b = {0};
    stored_build(&b, e->st, flags, data, len);
    save_t *w = save_new(e, e->id, strlen(e->id));
    w->data = b.data; /* taken over */
    w->len = b.len;
    if (e->st->in_reliable)
        attach_confirm(e->st, w);
    return w;
}

static int save_user(shoal_entity_t *e, uint8_t flags, const void *data, size_t len,
                     shoal_save_done_fn *done, void *arg)
{
    int rc;
    save_t *w = save_prepare(e, flags, data, len, &rc);
    if (!w)
        return rc;
    w->done = done;
    w->arg = arg;
    return issue(e->shard, w);
}

int shoal_entity_save(shoal_entity_t *e, const void *data, size_t len, shoal_save_done_fn *done,
                      void *arg)
{
    return save_user(e, 0, data, len, done, arg);
}

int shoal_entity_save_reply(shoal_entity_t *e, const void *data, size_t len, const void *reply,
                            size_t rlen)
{
    if (entity_wrong_thread(e, __func__))
        return SHOAL_ETHREAD;
    if (!e || !e->sender.ask_id)
        return SHOAL_EINVAL;
    if (e->st && e->st->in_reliable) {
        /* the reply rides with the confirmation */
        shoal_buf_reset(&e->st->reply);
        if (rlen)
            shoal_buf_append(&e->st->reply, reply, rlen);
        return shoal_entity_save(e, data, len, NULL, NULL);
    }
    int rc;
    save_t *w = save_prepare(e, 0, data, len, &rc);
    if (!w)
        return rc;
    /* filled in before issue(): a failure there completes the save at once */
    w->answer = true;
    w->ato = e->sender.node;
    w->aask = e->sender.ask_id;
    w->areply = dup_bytes(reply, rlen);
    w->areply_len = rlen;
    return issue(e->shard, w);
}

const void *shoal_entity_stored(const shoal_entity_t *e, size_t *len)
{
    stored_t st;
    if (len)
        *len = 0;
    if (!e || !e->st || !entity_stored(e, &st) || st.user_len == 0)
        return NULL;
    if (len)
        *len = st.user_len;
    return st.user;
}

int shoal_entity_state_origin(const shoal_entity_t *e)
{
    return e && e->st ? e->st->origin : 0;
}

static void forget_reminders_of(shard_t *s, const char *eid);

int shoal_entity_delete_state(shoal_entity_t *e, shoal_save_done_fn *done, void *arg)
{
    int rc = entity_check(e);
    if (rc < 0)
        return rc;
    forget_reminders_of(e->shard, e->id);
    save_t *w = save_new(e, e->id, strlen(e->id));
    w->del = true;
    w->done = done;
    w->arg = arg;
    if (e->st->in_reliable) {
        /* the producers' numbers go with the state: a repeat after this is a new message */
        attach_confirm(e->st, w);
    }
    e->st->n_seen = 0;
    return issue(e->shard, w);
}

/* ---------------------------------------------------------------------------------------------
 * Entities
 */
void state_entity_created(shoal_entity_t *e)
{
    if (!state_on(e->shard->r))
        return;
    e->st = calloc(1, sizeof *e->st);
    if (!e->st)
        abort();
    e->st->inc = next_inc++;
}

static void load_seen(shoal_entity_t *e, const stored_t *sd)
{
    struct ent_state *st = e->st;
    free(st->seen);
    st->seen = NULL;
    st->n_seen = 0;
    if (!sd || !sd->n_producers)
        return;
    st->seen = calloc(sd->n_producers, sizeof *st->seen);
    if (!st->seen)
        abort();
    const uint8_t *p = sd->producers;
    for (size_t i = 0; i < sd->n_producers; i++) {
        seen_t *x = &st->seen[st->n_seen++];
        x->len = p[0];
        memcpy(x->id, p + 1, x->len);
        x->id[x->len] = 0;
        x->last = x->acked = wire_get_u64(p + 1 + x->len);
        x->used = ++st->clock;
        p += 1 + x->len + 8;
    }
}

void state_entity_starting(shoal_entity_t *e)
{
    if (!e->st)
        return;
    stored_t sd;
    bool have = entity_stored(e, &sd);
    load_seen(e, have ? &sd : NULL);
    e->st->origin = !have ? 0 : (sd.flags & STORED_HANDOVER) ? 2 : 1;
}

bool state_entity_hold(shoal_entity_t *e)
{
    if (!e->st || e->st->saves == 0)
        return false;
    if (e->forced) {
        saves_abandon(e, SHOAL_ESTOPPED); /* it goes now: its saves complete first */
        return false;
    }
    e->st->finish_pending = true;
    return true;
}

void state_entity_free(shoal_entity_t *e)
{
    if (!e->st)
        return;
    if (e->st->inflight) {
        /* not expected (an entity goes through state_entity_hold), but no save is left
           uncompleted, nor pointing at a freed entity: its state is gone already */
        e->state = NULL;
        saves_abandon(e, SHOAL_ESTOPPED);
    }
    free(e->st->seen);
    shoal_buf_free(&e->st->reply);
    free(e->st);
    e->st = NULL;
}

static void entity_callback(shoal_entity_t *e, shoal_save_done_fn *fn, int status, void *arg)
{
    shoal_region_t *r = e->shard->r;
    e->depth++;
    r->sh->depth++;
    fn(e, e->state, status, arg);
    r->sh->depth--;
    e->depth--;
}

/* Stop callback, then start again from the stored state (same entity object). */
static void entity_restart(shoal_entity_t *e)
{
    shoal_region_t *r = e->shard->r;
    shoal_info("%s: sharding %s: entity %s restarts from its stored state after a failed save",
               shoal_node_id(r->self), r->name, e->id);
    if (r->fns.stop) {
        r->sh->depth++;
        r->fns.stop(e, e->state, r->arg);
        r->sh->depth--;
    }
    e->state = NULL;
    /* saves still in flight belong to the old incarnation: they stay on the list, and their
       callbacks come to this one (EXACTLY ONCE) */
    e->st->inc = next_inc++;
    state_entity_starting(e);
    /* what it reads here may include the failed write: nothing counts as stored until a save
       of this incarnation is acknowledged (repeats are stored again, then confirmed) */
    for (size_t i = 0; i < e->st->n_seen; i++)
        e->st->seen[i].acked = 0;
    if (r->fns.start) {
        e->depth++;
        r->sh->depth++;
        e->state = r->fns.start(e, r->arg);
        r->sh->depth--;
        e->depth--;
    }
}

void state_handover(shoal_entity_t *e, const void *snap, size_t len)
{
    if (!e->st || !len)
        return;
    shoal_region_t *r = e->shard->r;
    if (save_user(e, STORED_HANDOVER, snap, len, NULL, NULL) == 0) {
        r->stats.handover_snapshots++;
        r->stats.handover_bytes += len;
    }
}

/* ---------------------------------------------------------------------------------------------
 * At-least-once delivery, the entity's side
 */
bool state_capture_reply(shoal_entity_t *e, const void *data, size_t len)
{
    if (!e->st || !e->st->in_reliable)
        return false;
    shoal_buf_reset(&e->st->reply);
    if (len)
        shoal_buf_append(&e->st->reply, data, len);
    return true;
}

static seen_t *seen_add(struct ent_state *st, const char *pid, size_t len)
{
    if (st->n_seen == PRODUCERS_MAX) {
        /* the least recently used producer is forgotten */
        size_t old = 0;
        for (size_t i = 1; i < st->n_seen; i++)
            if (st->seen[i].used < st->seen[old].used)
                old = i;
        st->seen[old] = st->seen[--st->n_seen];
    }
    seen_t *n = realloc(st->seen, (st->n_seen + 1) * sizeof *n);
    if (!n)
        abort();
    st->seen = n;
    seen_t *x = &st->seen[st->n_seen++];
    memset(x, 0, sizeof *x);
    memcpy(x->id, pid, len);
    x->len = (uint8_t)len;
    return x;
}

static void set_current(struct ent_state *st, const char *pid, size_t plen, uint64_t seq,
                        const shoal_node_t *origin, uint64_t ask_id)
{
    st->in_reliable = true;
    memcpy(st->cur_pid, pid, plen);
    st->cur_pid[plen] = 0;
    st->cur_seq = seq;
    st->cur_origin = origin;
    st->cur_ask = ask_id;
    shoal_buf_reset(&st->reply);
}

/* Saves the entity's stored bytes again with its producers' numbers as they are now. */
static void resave(shoal_entity_t *e)
{
    stored_t sd;
    bool have = entity_stored(e, &sd);
    /* copy: the save changes the value the pointers are into */
    void *user = have && sd.user_len ? dup_bytes(sd.user, sd.user_len) : NULL;
    save_user(e, have ? sd.flags : 0, user, have ? sd.user_len : 0, NULL, NULL);
    free(user);
}

void state_reliable_deliver(shoal_entity_t *e, const void *data, size_t len,
                            const shoal_node_t *origin, uint64_t ask_id)
{
    shoal_region_t *r = e->shard->r;
    reliable_t rm;
    if (!e->st || wire_parse_reliable(data, len, &rm) != 0) {
        region_dead_letter(r, SHOAL_DL_MALFORMED, e->id, data, len, origin, ask_id);
        return;
    }
    size_t plen = rm.plen;
    const char *pid = rm.producer;
    uint64_t seq = rm.seq;
    const uint8_t *msg = rm.msg;
    size_t mlen = rm.len;
    struct ent_state *st = e->st;
    seen_t *p = seen_find(st, pid, plen);
    uint64_t last = p ? p->last : 0;
    if (seq <= last) {
        r->stats.reliable_duplicates++;
        if (p && seq <= p->acked) {
            region_send_reply(r, origin, ask_id, 0, NULL, 0); /* processed and stored */
        } else if (st->saves == 0) {
            /* processed, but the save after it failed (it may be stored only here): store the
               state again, and confirm once that is in */
            set_current(st, pid, plen, seq, origin, ask_id);
            resave(e);
            st->in_reliable = false;
        }
        return;
    }
    if (seq != last + 1) {
        r->stats.reliable_out_of_order++;
        region_send_reply(r, origin, ask_id, SHOAL_EAGAIN, NULL, 0);
        return;
    }
    if (!p)
        p = seen_add(st, pid, plen);
    p->last = seq;
    p->used = ++st->clock;
    r->stats.reliable_processed++;
    set_current(st, pid, plen, seq, origin, ask_id);
    unsigned gen = st->gen;
    uint64_t inc = st->inc;
    shard_t *s = e->shard;
    char eid[SHOAL_ENTITY_ID_MAX + 1];
    snprintf(eid, sizeof eid, "%s", e->id);
    r->lifecycle->receive(e, msg, mlen, NULL, 0);
    e = shard_entity(s, eid);
    if (!e || !e->st || e->st->inc != inc)
        return; /* stopped inside: unconfirmed, the producer sends it again */
    st = e->st;
    if (st->gen == gen) {
        resave(e); /* receive saved nothing: the producer's number alone, the state as it is */
    } else if (st->confirm_w && st->reply.len) {
        /* a reply given after the save: the confirmation (not sent yet) carries it */
        struct save *w = st->confirm_w;
        free(w->creply);
        w->creply = dup_bytes(st->reply.data, st->reply.len);
        w->creply_len = st->reply.len;
    }
    st->in_reliable = false;
}

/* ---------------------------------------------------------------------------------------------
 * Reminders
 */
static size_t reminder_key(const char *eid, const char *rid, uint8_t *out)
{
    size_t a = strlen(eid), b = strlen(rid);
    out[0] = REMINDER_MARK;
    memcpy(out + 1, eid, a);
    out[1 + a] = 0;
    memcpy(out + 2 + a, rid, b);
    return 2 + a + b;
}

static void reminders_forget(shard_t *s, const char *eid, const char *rid)
{
    for (size_t i = 0; i < s->n_reminders; i++)
        if (strcmp(s->reminders[i].eid, eid) == 0 &&
            (!rid || strcmp(s->reminders[i].rid, rid) == 0)) {
            s->reminders[i] = s->reminders[--s->n_reminders];
            i--;
        }
}

static void forget_reminders_of(shard_t *s, const char *eid)
{
    /* their entries go too: deleted one by one (an entity has few) */
    for (size_t i = 0; i < s->n_reminders; i++) {
        reminder_t *m = &s->reminders[i];
        if (strcmp(m->eid, eid) != 0)
            continue;
        uint8_t key[ESTATE_KEY_MAX + 8];
        size_t klen = reminder_key(m->eid, m->rid, key);
        save_t *w = save_new(NULL, key, klen);
        w->del = true;
        issue(s, w);
    }
    reminders_forget(s, eid, NULL);
}

static reminder_t *reminder_add(shard_t *s, const char *eid, const char *rid)
{
    for (size_t i = 0; i < s->n_reminders; i++)
        if (strcmp(s->reminders[i].eid, eid) == 0 && strcmp(s->reminders[i].rid, rid) == 0)
            return &s->reminders[i];
    if (s->n_reminders == s->cap_reminders) {
        s->cap_reminders = s->cap_reminders ? 2 * s->cap_reminders : 8;
        s->reminders = realloc(s->reminders, s->cap_reminders * sizeof *s->reminders);
        if (!s->reminders)
            abort();
    }
    reminder_t *m = &s->reminders[s->n_reminders++];
    memset(m, 0, sizeof *m);
    snprintf(m->eid, sizeof m->eid, "%s", eid);
    snprintf(m->rid, sizeof m->rid, "%s", rid);
    return m;
}

static void note_all_shards(shard_t *s);

int shoal_entity_remind(shoal_entity_t *e, const char *reminder_id, uint64_t delay_ms,
                        const void *msg, size_t len, shoal_save_done_fn *done, void *arg)
{
    int rc = entity_check(e);
    if (rc < 0)
        return rc;
    size_t rl = reminder_id ? strlen(reminder_id) : 0;
    if (rl == 0 || rl > SHOAL_REMINDER_ID_MAX || (len && !msg) || delay_ms > (1ull << 40) ||
        len > ESTATE_DATA_MAX - 4096 || strlen(e->id) + rl + 2 > ESTATE_KEY_MAX)
        return SHOAL_EINVAL;
    shard_t *s = e->shard;
    uint8_t key[ESTATE_KEY_MAX + 8];
    size_t klen = reminder_key(e->id, reminder_id, key);
    save_t *w = save_new(e, key, klen);
    int64_t due = unix_ms() + (int64_t)delay_ms;
    shoal_buf_t b = {0};
    wire_put_u64(&b, (uint64_t)due);
    if (len)
        shoal_buf_append(&b, msg, len);
    w->data = b.data; /* taken over */
    w->len = b.len;
    w->done = done;
    w->arg = arg;
    reminder_t *m = reminder_add(s, e->id, reminder_id);
    m->due_ms = due;
    m->epoch = s->epoch;
    m->seq = s->state_seq + 1; /* the seq issue() gives it */
    m->firing = false;
    note_all_shards(s);
    return issue(s, w);
}

int shoal_entity_cancel_reminder(shoal_entity_t *e, const char *reminder_id)
{
    int rc = entity_check(e);
    if (rc < 0)
        return rc;
    if (!reminder_id || !*reminder_id || strlen(reminder_id) > SHOAL_REMINDER_ID_MAX)
        return SHOAL_EINVAL;
    reminders_forget(e->shard, e->id, reminder_id);
    uint8_t key[ESTATE_KEY_MAX + 8];
    size_t klen = reminder_key(e->id, reminder_id, key);
    save_t *w = save_new(NULL, key, klen);
    w->del = true;
    return issue(e->shard, w);
}

const char *shoal_entity_reminder(const shoal_entity_t *e)
{
    if (!e)
        return NULL;
    if (e->st && e->st->reminder)
        return e->st->reminder;
    return e->depth ? e->shard->r->timer_firing : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * In-memory timers (any type): a list per shard, checked every tick, dropped with the entity
 */
typedef struct mtimer {
    char eid[SHOAL_ENTITY_ID_MAX + 1];
    char id[SHOAL_REMINDER_ID_MAX + 1];
    int64_t due; /* monotonic ms */
    uint8_t *msg;
    size_t len;
} mtimer_t;

static void timer_remove(shard_t *s, size_t i)
{
    free(s->timers[i].msg);
    s->timers[i] = s->timers[--s->n_timers];
}

int shoal_entity_start_timer(shoal_entity_t *e, const char *timer_id, uint32_t delay_ms,
                             const void *msg, size_t len)
{
    size_t il = timer_id ? strlen(timer_id) : 0;
    if (entity_wrong_thread(e, __func__))
        return SHOAL_ETHREAD;
    if (!e || il == 0 || il > SHOAL_REMINDER_ID_MAX || (len && !msg))
        return SHOAL_EINVAL;
    if (e->status != E_RUNNING)
        return SHOAL_ESTOPPED;
    shard_t *s = e->shard;
    shoal_entity_cancel_timer(e, timer_id);
    if (s->n_timers == s->cap_timers) {
        s->cap_timers = s->cap_timers ? 2 * s->cap_timers : 8;
        s->timers = realloc(s->timers, s->cap_timers * sizeof *s->timers);
        if (!s->timers)
            abort();
    }
    mtimer_t *t = &s->timers[s->n_timers++];
    snprintf(t->eid, sizeof t->eid, "%s", e->id);
    snprintf(t->id, sizeof t->id, "%s", timer_id);
    t->due = shoal_now_ms() + delay_ms;
    t->msg = dup_bytes(msg, len);
    t->len = len;
    return 0;
}

int shoal_entity_cancel_timer(shoal_entity_t *e, const char *timer_id)
{
    if (!e || !timer_id)
        return SHOAL_EINVAL;
    if (entity_wrong_thread(e, __func__))
        return SHOAL_ETHREAD;
    shard_t *s = e->shard;
    for (size_t i = 0; i < s->n_timers; i++)
        if (!strcmp(s->timers[i].eid, e->id) && !strcmp(s->timers[i].id, timer_id)) {
            timer_remove(s, i);
            return 0;
        }
    return SHOAL_ENOTFOUND;
}

void timers_entity_gone(shoal_entity_t *e)
{
    shard_t *s = e->shard;
    for (size_t i = 0; i < s->n_timers; i++)
        if (!strcmp(s->timers[i].eid, e->id))
            timer_remove(s, i--);
}

void timers_tick(shard_t *s, int64_t now)
{
    for (size_t i = 0; i < s->n_timers && s->status == SH_ACTIVE;) {
        if (s->timers[i].due > now) {
            i++;
            continue;
        }
        mtimer_t t = s->timers[i]; /* the slot goes first: the receive may start it again */
        s->timers[i] = s->timers[--s->n_timers];
        shoal_entity_t *e = shard_entity(s, t.eid);
        if (e && e->status == E_RUNNING) {
            shoal_region_t *r = s->r;
            const char *outer = r->timer_firing;
            r->timer_firing = t.id;
            r->lifecycle->receive(e, t.msg, t.len, NULL, 0);
            r->timer_firing = outer;
        }
        free(t.msg);
        i = 0; /* the list may have changed under the receive */
    }
}

static int collect_reminder(const void *key, size_t klen, const estate_entry_t *en, void *arg)
{
    shard_t *s = arg;
    const uint8_t *k = key;
    if (en->deleted || en->len < 8)
        return 0;
    const uint8_t *nul = memchr(k + 1, 0, klen - 1);
    if (!nul)
        return 0;
    size_t el = (size_t)(nul - (k + 1)), rl = klen - 2 - el;
    if (el == 0 || el > SHOAL_ENTITY_ID_MAX || rl == 0 || rl > SHOAL_REMINDER_ID_MAX)
        return 0;
    char eid[SHOAL_ENTITY_ID_MAX + 1], rid[SHOAL_REMINDER_ID_MAX + 1];
    memcpy(eid, k + 1, el);
    eid[el] = 0;
    memcpy(rid, nul + 1, rl);
    rid[rl] = 0;
    reminder_t *m = reminder_add(s, eid, rid);
    m->due_ms = (int64_t)wire_get_u64(en->data);
    m->epoch = en->epoch;
    m->seq = en->seq;
    return 0;
}

static void fire(shard_t *s, size_t i)
{
    reminder_t m = s->reminders[i];
    shoal_region_t *r = s->r;
    uint8_t key[ESTATE_KEY_MAX + 8];
    size_t klen = reminder_key(m.eid, m.rid, key);
    estate_entry_t en;
    if (shard_entry(s, key, klen, &en) != 0 || en.deleted || en.len < 8) {
        reminders_forget(s, m.eid, m.rid); /* cancelled meanwhile */
        return;
    }
    shoal_entity_t *e = shard_entity(s, m.eid);
    if (e && e->status != E_RUNNING)
        return; /* stopping or starting: next tick */
    if (!e)
        e = r->lifecycle->get_or_start(s, m.eid);
    if (!e || !e->st || e->status != E_RUNNING)
        return;
    /* read again: a start that saved may have replaced the value en pointed into */
    if (shard_entry(s, key, klen, &en) != 0 || en.deleted || en.len < 8) {
        reminders_forget(s, m.eid, m.rid);
        return;
    }
    /* copy: the receive may change the value */
    size_t mlen = en.len - 8;
    uint8_t *msg = dup_bytes(en.data + 8, mlen);
    uint64_t epoch = en.epoch, seq = en.seq;
    r->stats.reminders_fired++;
    uint64_t inc = e->st->inc;
    e->st->reminder = m.rid;
    r->lifecycle->receive(e, msg, mlen, NULL, 0);
    free(msg);
    e = shard_entity(s, m.eid);
    if (e && e->st && e->st->inc == inc)
        e->st->reminder = NULL;
    /* handled: its entry goes, unless the receive scheduled the id again (a schedule still
       queued for the shard's next write counts: shard_entry) */
    if (shard_entry(s, key, klen, &en) == 0 && !en.deleted && en.epoch == epoch && en.seq == seq) {
        reminders_forget(s, m.eid, m.rid);
        save_t *w = save_new(NULL, key, klen);
        w->del = true;
        issue(s, w);
    }
}

void state_tick(shard_t *s, int64_t now)
{
    shoal_region_t *r = s->r;
    if (!state_on(r) || s->status != SH_ACTIVE)
        return;
    if (s->state_loading) {
        if (s->state_retry_at && now >= s->state_retry_at) {
            s->state_retry_at = 0;
            state_shard_started(s); /* again from the fence */
        }
        return;
    }
    if (!s->n_reminders)
        return;
    int64_t t = unix_ms();
    for (size_t i = 0; i < s->n_reminders && s->status == SH_ACTIVE; i++) {
        if (s->reminders[i].due_ms > t)
            continue;
        size_t before = s->n_reminders;
        fire(s, i);
        if (s->n_reminders < before)
            i--; /* the slot now holds another one */
    }
}

/* ---------------------------------------------------------------------------------------------
 * A shard starts: fence, read, adopt
 */
typedef struct {
    life_t *life;
    uint64_t epoch;
    uint64_t fenced_at; /* the stored fence that refused ours */
    bool stale;
} load_t;

static void load_failed(shard_t *s, const char *what, int status)
{
    shoal_region_t *r = s->r;
    r->stats.state_load_failures++;
    shoal_warning("%s: sharding %s: shard %s: %s its entity state failed (%d); retrying",
                  shoal_node_id(r->self), r->name, s->id, what, status);
    s->state_retry_at = shoal_now_ms() + backoff_ms(r);
}

static int fence_modify(shoal_crdt_t *value, void *arg)
{
    load_t *x = arg;
    if (estate_fence(value) > x->epoch) {
        x->stale = true;
        x->fenced_at = estate_fence(value);
        return SHOAL_ESTALE;
    }
    return estate_raise_fence(value, x->epoch);
}

typedef struct {
    uint64_t epoch, max_seq;
    bool newer;
} scan_t;

static int scan_entry(const void *key, size_t klen, const estate_entry_t *en, void *arg)
{
    (void)key;
    (void)klen;
    scan_t *x = arg;
    if (en->epoch > x->epoch)
        x->newer = true;
    else if (en->epoch == x->epoch && en->seq > x->max_seq)
        x->max_seq = en->seq;
    return 0;
}

static void adopt_done(shoal_replicator_t *rep, int status, const char *key, void *arg)
{
    (void)rep;
    (void)key;
    life_t *l = arg;
    shard_t *s = l->obj;
    if (s && status != 0 && status != SHOAL_ETIMEOUT)
        shoal_warning("%s: sharding %s: shard %s: adopting the stored states failed (%d)",
                      shoal_node_id(s->r->self), s->r->name, s->id, status);
    life_release(l);
}

typedef struct {
    uint64_t epoch;
    int64_t drop_before;
    size_t n;
} restamp_t;

static int restamp_modify(shoal_crdt_t *value, void *arg)
{
    restamp_t *x = arg;
    if (estate_fence(value) > x->epoch)
        return SHOAL_ESTALE;
    x->n = estate_restamp(value, x->epoch, x->drop_before);
    return 0;
}

static void loaded(shard_t *s)
{
    shoal_region_t *r = s->r;
    char key[SHOAL_SHARD_ID_MAX + 300];
    key_of(r, s->id, key, sizeof key);
    const shoal_crdt_t *v = shard_value(s);
    size_t n = 0;
    if (v) {
        scan_t sc = {s->epoch, 0, false};
        estate_foreach(v, scan_entry, &sc);
        if (sc.newer) {
            /* a newer owner wrote already: this copy is stale; the region learns it soon */
            load_failed(s, "adopting (a newer owner exists)", SHOAL_ESTALE);
            return;
        }
        if (sc.max_seq > s->state_seq)
            s->state_seq = sc.max_seq;
        n = estate_count(v);
        s->n_reminders = 0;
        const uint8_t mark = REMINDER_MARK;
        estate_foreach_prefix(v, &mark, 1, collect_reminder, s);
        if (s->n_reminders)
            note_all_shards(s);
        /* v is not valid after the update (the replicator swaps in the new value) */
        restamp_t x = {s->epoch, unix_ms() - (int64_t)r->s.state_tombstone_ttl_ms, 0};
        shoal_consistency_t c = write_level(r);
        life_t *l = life_ref(s->life);
        shoal_crdt_t *initial = estate_new();
        /* the key is here (we just read it): the modify runs at once, so x may live here */
        int rc =
            shoal_replicator_update(r->rep, key, initial, &c, restamp_modify, &x, adopt_done, l);
        if (rc < 0)
            adopt_done(r->rep, rc, key, l);
    }
    r->stats.state_loads++;
    s->state_loading = false;
    shoal_debug("%s: sharding %s: shard %s: entity state loaded (%zu entries, epoch %llx)",
                shoal_node_id(r->self), r->name, s->id, n, (unsigned long long)s->epoch);
    r->lifecycle->deliver_pending(s);
}

static void read_done(shoal_replicator_t *rep, int status, const char *key,
                      const shoal_crdt_t *value, void *arg)
{
    (void)rep;
    (void)key;
    (void)value;
    load_t *x = arg;
    shard_t *s = x->life->obj;
    life_release(x->life);
    free(x);
    if (!s || !s->state_loading || s->status != SH_ACTIVE)
        return;
    if (status != 0 && status != SHOAL_ENOTFOUND) {
        load_failed(s, "reading", status);
        return;
    }
    loaded(s); /* the read merged what it found into the local replica */
}

static void fence_done(shoal_replicator_t *rep, int status, const char *key, void *arg)
{
    load_t *x = arg;
    shard_t *s = x->life->obj;
    if (status == SHOAL_EMODIFY && x->stale)
        status = SHOAL_ESTALE;
    if (!s || !s->state_loading || s->status != SH_ACTIVE) {
        life_release(x->life);
        free(x);
        return;
    }
    if (status != 0) {
        uint64_t fenced_at = status == SHOAL_ESTALE ? x->fenced_at : 0;
        life_release(x->life);
        free(x);
        load_failed(s, "fencing", status);
        /* a newer owner, or a fence older than the coordinator's memory (every node restarted:
           epochs began again at term 1): the coordinator knows which */
        if (fenced_at)
            region_report_fenced(s->r, s->id, s->epoch, fenced_at);
        return;
    }
    shoal_consistency_t c = read_level(s->r);
    int rc = shoal_replicator_get(rep, key, &estate_type, &c, read_done, x);
    if (rc < 0)
        read_done(rep, rc, key, NULL, x);
}

void state_shard_started(shard_t *s)
{
    shoal_region_t *r = s->r;
    if (!state_on(r))
        return; /* (the type is registered by shoal_sharding_new) */
    if (!s->life)
        s->life = life_new(s);
    s->state_loading = true;
    char key[SHOAL_SHARD_ID_MAX + 300];
    key_of(r, s->id, key, sizeof key);
    load_t *x = calloc(1, sizeof *x);
    if (!x)
        abort();
    x->life = life_ref(s->life);
    x->epoch = s->epoch;
    shoal_crdt_t *initial = estate_new();
    shoal_consistency_t c = write_level(r);
    int rc = shoal_replicator_update(r->rep, key, initial, &c, fence_modify, x, fence_done, x);
    if (rc < 0)
        fence_done(r->rep, rc, key, x);
}

bool state_shard_waiting(const shard_t *s)
{
    return s->state_loading;
}

void state_shard_free(shard_t *s)
{
    /* saves still queued go as they would have before group commit (the shard's life ends
       here, so their completions find it gone, as for the writes in flight) */
    if (s->state_queued)
        batch_start(s);
    for (size_t i = 0; i < s->n_timers; i++)
        free(s->timers[i].msg);
    free(s->timers);
    s->timers = NULL;
    s->n_timers = s->cap_timers = 0;
    free(s->reminders);
    s->reminders = NULL;
    s->n_reminders = s->cap_reminders = 0;
}

/* ---------------------------------------------------------------------------------------------
 * The shard in shard-<type>-all-shards: allocated eagerly after a full stop
 */
static int gset_add(shoal_crdt_t *value, void *arg)
{
    return shoal_gset_add(value, arg, strlen(arg));
}

static void note_done(shoal_replicator_t *rep, int status, const char *key, void *arg)
{
    (void)rep;
    (void)key;
    life_t *l = arg;
    shard_t *s = l->obj;
    if (s && status != 0)
        s->state_noted = false; /* tried again with the next reminder or load */
    life_release(l);
}

static void note_all_shards(shard_t *s)
{
    if (s->state_noted || s->noted_here)
        return;
    s->state_noted = true;
    shoal_region_t *r = s->r;
    char key[256];
    snprintf(key, sizeof key, "shard-%s-all-shards", r->name);
    shoal_consistency_t c = write_level(r);
    life_t *l = life_ref(s->life);
    int rc =
        shoal_replicator_update(r->rep, key, shoal_gset_new(), &c, gset_add, s->id, note_done, l);
    if (rc < 0)
        note_done(r->rep, rc, key, l);
}
