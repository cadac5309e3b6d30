/*  producer.c — the producer side of at-least-once delivery to sharded entities.

    Per entity a producer numbers its messages 1, 2, ... and keeps those not yet confirmed, in
    order. Each goes as an ask flagged ENV_RELIABLE (u8 producer id len | id | u64 seq | msg);
    the entity side (state.c) processes only the next number, answers a repeat it has stored with
    a confirmation, and confirms a new one once the save that follows it is acknowledged.
    Confirmations are cumulative (the entity processes in order). When the first unconfirmed
    message of an entity is not confirmed within resend_ms (timeout, lost connection, a shard on
    the move, or "out of order" from the entity), everything unconfirmed for that entity goes
    again, in order (go-back-N): a window of at most `window` messages, so a slow entity slows
    its producer instead of growing its memory.

    The numbering of an entity restarts only with a new producer id, so the producer keeps the
    next number of every entity it has sent to (a few dozen bytes each).
*/
#include <string.h>

#include "sharding_internal.h"

typedef struct pmsg {
    struct pmsg *next;
    uint64_t seq;
    int64_t sent_at; /* 0: send again at the next tick */
    size_t len;      /* framed */
    uint8_t data[];  /* u8 id len | id | u64 seq | msg */
} pmsg_t;

typedef struct {
    uint64_t next_seq;
    pmsg_t *head, *tail;
    size_t n;
    char eid[]; /* the table's key */
} pent_t;

struct shoal_producer {
    shoal_region_t *r;
    shoal_system_t *sys; /* outlives the region */
    char id[SHOAL_PRODUCER_ID_MAX + 1];
    uint8_t idlen;
    shoal_producer_settings_t s;
    shoal_delivered_fn *fn;
    void *arg;
    pthread_mutex_t mu;
    zhashx_t *ents;     /* eid -> pent_t (under mu) */
    size_t pending;     /* unconfirmed messages (under mu) */
    size_t bytes;       /* their payloads */
    int outstanding;    /* asks whose done has not run yet (under mu) */
    bool dead;          /* destroyed: the last done frees it */
    bool region_gone;
    struct shoal_producer *next; /* the region's list (node thread) */
};

typedef struct {
    shoal_producer_t *p;
    uint64_t seq;
    char eid[];
} ack_ctx_t;

void shoal_producer_settings_default(shoal_producer_settings_t *s)
{
    s->window = 100;
    s->resend_ms = 1000;
    s->max_bytes = 64u << 20;
}

static void pent_free(void **item)
{
    pent_t *e = *item;
    if (!e)
        return;
    for (pmsg_t *m = e->head; m;) {
        pmsg_t *n = m->next;
        free(m);
        m = n;
    }
    free(e);
    *item = NULL;
}

static void producer_free(shoal_producer_t *p)
{
    zhashx_destroy(&p->ents);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void ack_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg);

static int send_one(shoal_producer_t *p, const char *eid, uint64_t seq, const void *data,
                    size_t len)
{
    size_t el = strlen(eid);
    ack_ctx_t *x = malloc(sizeof *x + el + 1);
    if (!x)
        abort();
    x->p = p;
    x->seq = seq;
    memcpy(x->eid, eid, el + 1);
    int rc = region_ask_flags(p->r, eid, ENV_RELIABLE, data, len, p->s.resend_ms, ack_done, x);
    if (rc < 0) {
        /* not accepted (buffer full, stopping): the tick sends it again */
        free(x);
        return rc;
    }
    return 0;
}

/* Everything unconfirmed of the entity, again, in order. Node thread, mu not held. */
typedef struct {
    char *eid;
    uint64_t seq;
    size_t len;
    uint8_t *data;
} resend_t;

static void resend_all(shoal_producer_t *p, resend_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (send_one(p, v[i].eid, v[i].seq, v[i].data, v[i].len) < 0) {
            pthread_mutex_lock(&p->mu);
            p->outstanding--;
            pthread_mutex_unlock(&p->mu);
        }
        free(v[i].data);
        free(v[i].eid);
    }
    free(v);
}

/* Collects the entity's queue for a resend (mu held). */
static size_t collect(shoal_producer_t *p, pent_t *e, int64_t now, resend_t **v, size_t *n,
                      size_t *cap)
{
    size_t k = 0;
    for (pmsg_t *m = e->head; m; m = m->next) {
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 16;
            *v = realloc(*v, *cap * sizeof **v);
            if (!*v)
                abort();
        }
        resend_t *x = &(*v)[(*n)++];
        x->eid = strdup(e->eid);
        x->data = malloc(m->len);
        if (!x->eid || !x->data)
            abort();
        memcpy(x->data, m->data, m->len);
        x->len = m->len;
        x->seq = m->seq;
        m->sent_at = now;
        p->outstanding++;
        k++;
    }
    return k;
}

static void ack_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    ack_ctx_t *x = arg;
    shoal_producer_t *p = x->p;
    pthread_mutex_lock(&p->mu);
    p->outstanding--;
    if (p->dead) {
        bool last = p->outstanding == 0;
        pthread_mutex_unlock(&p->mu);
        free(x);
        if (last)
            producer_free(p);
        return;
    }
    pent_t *e = zhashx_lookup(p->ents, x->eid);
    pmsg_t *done = NULL, **tail = &done;
    if (e && status == 0) {
        /* cumulative: everything up to it is processed */
        while (e->head && e->head->seq <= x->seq) {
            pmsg_t *m = e->head;
            e->head = m->next;
            if (!e->head)
                e->tail = NULL;
            e->n--;
            p->pending--;
            p->bytes -= m->len;
            m->next = NULL;
            *tail = m;
            tail = &m->next;
        }
    } else if (e && e->head && e->head->seq == x->seq) {
        e->head->sent_at = 0; /* the first unconfirmed failed: all of them again, next tick */
    } else if (e && status == SHOAL_EAGAIN && e->head) {
        e->head->sent_at = 0; /* the entity misses an earlier one */
    }
    pthread_mutex_unlock(&p->mu);
    for (pmsg_t *m = done; m;) {
        pmsg_t *next = m->next;
        bool mine = m->seq == x->seq;
        p->fn(p, x->eid, m->seq, 0, mine ? reply : NULL, mine ? len : 0, p->arg);
        free(m);
        m = next;
    }
    free(x);
}

/* The region's tick (shoal_region_t.producers_tick): resends what waited too long. */
static void producers_tick(shoal_region_t *r, int64_t now)
{
    for (shoal_producer_t *p = r->producers; p; p = p->next) {
        resend_t *v = NULL;
        size_t n = 0, cap = 0;
        pthread_mutex_lock(&p->mu);
        for (pent_t *e = zhashx_first(p->ents); e; e = zhashx_next(p->ents))
            if (e->head && (e->head->sent_at == 0 || now - e->head->sent_at >= p->s.resend_ms))
                collect(p, e, now, &v, &n, &cap);
        pthread_mutex_unlock(&p->mu);
        if (n)
            resend_all(p, v, n);
        else
            free(v);
    }
}

static void producers_region_stopped(shoal_region_t *r);

static int link_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_producer_t *p = arg;
    if (p->r->stopped)
        return SHOAL_ESTOPPED;
    p->next = p->r->producers;
    p->r->producers = p;
    p->r->producers_tick = producers_tick;
    p->r->producers_stopped = producers_region_stopped;
    return 0;
}

shoal_producer_t *shoal_producer_new(shoal_region_t *r, const char *producer_id,
                                     const shoal_producer_settings_t *s, shoal_delivered_fn *fn,
                                     void *arg, int *err)
{
    int e = 0;
    size_t idlen = producer_id ? strlen(producer_id) : 0;
    if (!r || !fn || idlen == 0 || idlen > SHOAL_PRODUCER_ID_MAX || !r->s.entity_state)
        e = SHOAL_EINVAL;
    if (e) {
        if (err)
            *err = e;
        return NULL;
    }
    shoal_producer_t *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    p->r = r;
    p->sys = r->sys;
    memcpy(p->id, producer_id, idlen + 1);
    p->idlen = (uint8_t)idlen;
    shoal_producer_settings_default(&p->s);
    if (s) {
        if (s->window)
            p->s.window = s->window;
        if (s->resend_ms)
            p->s.resend_ms = s->resend_ms;
        if (s->max_bytes)
            p->s.max_bytes = s->max_bytes;
    }
    p->fn = fn;
    p->arg = arg;
    pthread_mutex_init(&p->mu, NULL);
    p->ents = zhashx_new();
    zhashx_set_destructor(p->ents, pent_free);
    int rc = shoal_system_on_thread(r->sys) ? link_on_node(r->sys, p)
                                            : shoal_system_call(r->sys, link_on_node, p);
    if (rc < 0) {
        producer_free(p);
        if (err)
            *err = rc;
        return NULL;
    }
    if (err)
        *err = 0;
    return p;
}

int shoal_producer_send(shoal_producer_t *p, const char *entity_id, const void *msg, size_t len,
                        uint64_t *seq_out)
{
    size_t el = entity_id ? strlen(entity_id) : 0;
    if (!p || el == 0 || el > SHOAL_ENTITY_ID_MAX || (len && !msg))
        return SHOAL_EINVAL;
    size_t flen = 1 + p->idlen + 8 + len; /* wire_reliable's frame */
    pthread_mutex_lock(&p->mu);
    if (p->dead || p->region_gone) {
        pthread_mutex_unlock(&p->mu);
        return SHOAL_ESTOPPED;
    }
    pent_t *e = zhashx_lookup(p->ents, entity_id);
    if (e && (e->n >= p->s.window || p->bytes + flen > p->s.max_bytes)) {
        pthread_mutex_unlock(&p->mu);
        return SHOAL_EBUFFER;
    }
    if (!e) {
        e = calloc(1, sizeof *e + el + 1);
        if (!e)
            abort();
        memcpy(e->eid, entity_id, el + 1);
        zhashx_insert(p->ents, e->eid, e);
        /* the table copies keys by default: look it up again for the stored one */
        e = zhashx_lookup(p->ents, entity_id);
    }
    pmsg_t *m = malloc(sizeof *m + flen);
    if (!m)
        abort();
    m->next = NULL;
    m->seq = ++e->next_seq;
    m->sent_at = shoal_now_ms();
    m->len = flen;
    shoal_buf_t frame = {0};
    wire_reliable(&frame, p->id, p->idlen, m->seq, msg, len);
    memcpy(m->data, frame.data, flen);
    shoal_buf_free(&frame);
    if (e->tail)
        e->tail->next = m;
    else
        e->head = m;
    e->tail = m;
    e->n++;
    p->pending++;
    p->bytes += flen;
    p->outstanding++;
    uint64_t seq = m->seq;
    if (seq_out)
        *seq_out = seq;
    bool node = shoal_system_on_thread(p->r->sys);
    int rc;
    if (node) {
        /* on the node thread a local entity may answer inside the call: without the lock, and
           from a copy (the answer frees the message) */
        uint8_t *copy = malloc(flen);
        if (!copy)
            abort();
        memcpy(copy, m->data, flen);
        pthread_mutex_unlock(&p->mu);
        rc = send_one(p, entity_id, seq, copy, flen);
        free(copy);
    } else {
        /* queued for the node thread, which cannot confirm it before this returns */
        rc = send_one(p, entity_id, seq, m->data, flen);
        pthread_mutex_unlock(&p->mu);
    }
    if (rc < 0) {
        pthread_mutex_lock(&p->mu);
        p->outstanding--;
        pthread_mutex_unlock(&p->mu);
        /* accepted all the same: it waits in the window and goes at the next resend */
    }
    return 0;
}

size_t shoal_producer_pending(shoal_producer_t *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->mu);
    size_t n = p->pending;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static void unlink_producer(shoal_producer_t *p)
{
    for (shoal_producer_t **q = &p->r->producers; *q; q = &(*q)->next)
        if (*q == p) {
            *q = p->next;
            break;
        }
}

/* Gives up everything unconfirmed (node thread). */
static void give_up(shoal_producer_t *p)
{
    pthread_mutex_lock(&p->mu);
    zhashx_t *ents = p->ents;
    p->ents = zhashx_new();
    zhashx_set_destructor(p->ents, pent_free);
    p->pending = 0;
    p->bytes = 0;
    pthread_mutex_unlock(&p->mu);
    for (pent_t *e = zhashx_first(ents); e; e = zhashx_next(ents))
        for (pmsg_t *m = e->head; m; m = m->next)
            p->fn(p, e->eid, m->seq, SHOAL_ESTOPPED, NULL, 0, p->arg);
    zhashx_destroy(&ents);
}

static int destroy_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_producer_t *p = arg;
    if (!p->region_gone)
        unlink_producer(p);
    give_up(p);
    pthread_mutex_lock(&p->mu);
    p->dead = true;
    bool last = p->outstanding == 0;
    pthread_mutex_unlock(&p->mu);
    if (last)
        producer_free(p);
    return 0;
}

void shoal_producer_destroy(shoal_producer_t **pp)
{
    if (!pp || !*pp)
        return;
    shoal_producer_t *p = *pp;
    *pp = NULL;
    if (shoal_system_on_thread(p->sys) ||
        shoal_system_call(p->sys, destroy_on_node, p) == SHOAL_ESTOPPED) {
        /* on the node thread, or the node has stopped (nothing runs there any more) */
        destroy_on_node(p->sys, p);
    }
}

/* The region stopped (shoal_region_t.producers_stopped): every producer gives up. */
static void producers_region_stopped(shoal_region_t *r)
{
    for (shoal_producer_t *p = r->producers; p; p = p->next) {
        pthread_mutex_lock(&p->mu);
        p->region_gone = true;
        pthread_mutex_unlock(&p->mu);
        give_up(p);
    }
    r->producers = NULL;
}
