/*  passivation.c — the passivation replacement policies; see passivation.h.

    One entry per active entity, found through a chained hash table and threaded on two intrusive
    doubly-linked lists: the recency list (every policy: time order of the last access, which is
    LRU order, MRU order read backwards, and the idle timeout's order) and the policy's own list
    (a segmented LRU level, the composite's window, or an LFU frequency bucket). Policies that
    need only the recency list (NONE, IDLE, plain LRU, MRU) get entries without the second link,
    since with the default idle strategy every entity of the node has an entry.

    Evicted entries are detached at once and queued; their callbacks run when the call has
    finished, so a callback sees (and may change) a consistent passivator.
*/
#include "passivation.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        abort(); /* allocation failure aborts, as in ddata */
    return p;
}

static void *xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        abort();
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * Entries and intrusive lists
 */
typedef struct pentry pentry_t;
typedef struct bucket bucket_t;

typedef struct {
    pentry_t *prev, *next;
} link_t;

struct pentry {
    pentry_t *hnext; /* hash chain; once evicted, the chain of pending callbacks */
    link_t r;        /* recency list */
    int64_t last_ms; /* last access (never before the previous entry's, see passivator_access) */
    uint64_t hash;   /* XXH3 of the id: table slot and sketch counters */
};

typedef enum { AREA_NONE = 0, AREA_WINDOW, AREA_MAIN } area_t;

/* Follows the entry for the policies with a list of their own; the id follows it. */
typedef struct {
    link_t q;          /* its level, window or frequency bucket */
    bucket_t *bucket;  /* LFU: its frequency bucket */
    uint32_t accesses; /* LFU: accesses while active, saturating */
    uint8_t level;     /* segmented LRU level (composite: in the main area) */
    uint8_t area;      /* composite: area_t */
} pext_t;

typedef struct {
    pentry_t *head, *tail; /* head = least recent */
    size_t n;
} list_t;

#define RLINK offsetof(pentry_t, r)
#define QLINK (sizeof(pentry_t) + offsetof(pext_t, q))

static link_t *lnk(pentry_t *e, size_t off)
{
    return (link_t *)(void *)((char *)e + off);
}

static pext_t *ext(pentry_t *e)
{
    return (pext_t *)(void *)(e + 1);
}

static void list_append(list_t *l, pentry_t *e, size_t off)
{
    link_t *k = lnk(e, off);
    k->prev = l->tail;
    k->next = NULL;
    if (l->tail)
        lnk(l->tail, off)->next = e;
    else
        l->head = e;
    l->tail = e;
    l->n++;
}

static void list_unlink(list_t *l, pentry_t *e, size_t off)
{
    link_t *k = lnk(e, off);
    if (k->prev)
        lnk(k->prev, off)->next = k->next;
    else
        l->head = k->next;
    if (k->next)
        lnk(k->next, off)->prev = k->prev;
    else
        l->tail = k->prev;
    k->prev = k->next = NULL;
    l->n--;
}

static void list_to_back(list_t *l, pentry_t *e, size_t off)
{
    if (l->tail != e) {
        list_unlink(l, e, off);
        list_append(l, e, off);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Segmented LRU: LRU with slru_levels >= 2, and the composite's main area
 */
#define SLRU_MAX_LEVELS 4 /* the length of slru_proportions in the settings */

typedef struct {
    list_t seg[SLRU_MAX_LEVELS];  /* level 0 = probation */
    size_t size[SLRU_MAX_LEVELS]; /* each level's share of the total (SIZE_MAX = no limit) */
    double prop[SLRU_MAX_LEVELS]; /* normalized proportions */
    unsigned levels;
    size_t n;
} slru_t;

/* Akka's split: the upper levels get floor(proportion * total) and level 0 the rest, so the
   levels add up to the total exactly. Level 0 keeps at least 1 when the total allows, otherwise
   a new entity would be the least recent of an over-full probation and evicted by its own
   access. */
static void slru_sizes(slru_t *s, size_t total)
{
    if (total == SIZE_MAX) {
        for (unsigned l = 0; l < s->levels; l++)
            s->size[l] = SIZE_MAX;
        return;
    }
    size_t upper = 0;
    for (unsigned l = 1; l < s->levels; l++) {
        double want = s->prop[l] * (double)total;
        size_t sz = want >= (double)total ? total : (size_t)want;
        if (sz > total - upper)
            sz = total - upper;
        s->size[l] = sz;
        upper += sz;
    }
    s->size[0] = total - upper;
    if (s->size[0] == 0 && total > 0) {
        for (unsigned l = s->levels - 1; l > 0; l--) {
            if (s->size[l] > 0) {
                s->size[l]--;
                s->size[0] = 1;
                break;
            }
        }
    }
}

static void slru_insert(slru_t *s, pentry_t *e)
{
    ext(e)->level = 0;
    list_append(&s->seg[0], e, QLINK);
    s->n++;
}

static void slru_unlink(slru_t *s, pentry_t *e)
{
    list_unlink(&s->seg[ext(e)->level], e, QLINK);
    s->n--;
}

/* Demotes a level's excess, least recent first, to the most recent end of the level below. */
static void slru_adjust(slru_t *s, unsigned l)
{
    while (s->seg[l].n > s->size[l]) {
        pentry_t *d = s->seg[l].head;
        list_unlink(&s->seg[l], d, QLINK);
        ext(d)->level = (uint8_t)(l - 1);
        list_append(&s->seg[l - 1], d, QLINK);
    }
}

/* From the top down, so that what one level demotes is counted by the next. */
static void slru_settle(slru_t *s)
{
    for (unsigned l = s->levels - 1; l > 0; l--)
        slru_adjust(s, l);
}

static void slru_touch(slru_t *s, pentry_t *e)
{
    unsigned l = ext(e)->level;
    if (l + 1 >= s->levels) {
        list_to_back(&s->seg[l], e, QLINK);
        return;
    }
    list_unlink(&s->seg[l], e, QLINK);
    ext(e)->level = (uint8_t)(l + 1);
    list_append(&s->seg[l + 1], e, QLINK);
    slru_adjust(s, l + 1);
}

/* The entity to evict: the least recent of the lowest non-empty level once the upper levels are
   within their sizes (then that is level 0 whenever the total is over its limit). */
static pentry_t *slru_victim(slru_t *s)
{
    slru_settle(s);
    for (unsigned l = 0; l < s->levels; l++)
        if (s->seg[l].head)
            return s->seg[l].head;
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The passivator
 */
typedef enum {
    KIND_NONE,
    KIND_IDLE,
    KIND_LRU,
    KIND_SLRU,
    KIND_MRU,
    KIND_LFU,
    KIND_TINYLFU,
} kind_t;

/* LFU: the entities of one priority, least recently accessed first. */
struct bucket {
    bucket_t *prev, *next; /* ascending priority */
    uint64_t priority;
    list_t entries;
};

/* Akka's frequency-sketch defaults (depth 4 is built into the code): each row has
   4 * pow2(limit) counters, and after 10 * limit increments they are halved, so a counter holds
   2.5 increments on average when halved: sparse enough for the minimum of four to be close. */
#define SKETCH_DEPTH            4
#define SKETCH_WIDTH_MULTIPLIER 4
#define SKETCH_RESET_MULTIPLIER 10
#define SKETCH_MIN_WIDTH        64 /* 4 words a row: tiny limits do not collide on everything */

/* Akka's default-strategy main area: 20% probation, 80% protected. */
static const double TINYLFU_MAIN_PROPORTIONS[2] = {0.2, 0.8};

typedef struct {
    pentry_t *head, *tail;
} pending_t;

struct passivator {
    shoal_passivation_settings_t s; /* sanitized copy */
    kind_t kind;
    size_t limit;  /* 0 = none */
    size_t id_off; /* where an entry's id starts */
    size_t n;      /* entities tracked */

    pentry_t **table;
    size_t table_mask;

    list_t recency;

    slru_t main; /* SLRU; the composite's main area */

    /* LFU */
    bucket_t *lfu_low, *lfu_high, *bucket_pool;
    uint64_t age;

    /* composite */
    list_t window;
    size_t window_limit, main_limit;
    double window_prop;
    uint64_t *sketch;      /* SKETCH_DEPTH rows of sketch_width four-bit counters, 16 a word */
    size_t sketch_width;   /* counters per row, a power of two */
    unsigned sketch_shift; /* 64 - log2(width) */
    uint64_t sketch_additions, sketch_reset_at;
    uint64_t climb_accesses, climb_hits;
    double climb_prev_rate, climb_step;

    passivator_stats_t stats;
};

static char *entry_id(const passivator_t *p, pentry_t *e)
{
    return (char *)e + p->id_off;
}

/* ---------------------------------------------------------------------------------------------
 * Hash table
 */
static pentry_t *table_find(const passivator_t *p, const char *id, uint64_t h)
{
    for (pentry_t *e = p->table[h & p->table_mask]; e; e = e->hnext)
        if (e->hash == h && strcmp(entry_id(p, e), id) == 0)
            return e;
    return NULL;
}

static void table_grow(passivator_t *p)
{
    size_t cap = (p->table_mask + 1) * 2;
    pentry_t **t = xcalloc(cap, sizeof *t);
    for (size_t i = 0; i <= p->table_mask; i++) {
        pentry_t *e = p->table[i];
        while (e) {
            pentry_t *next = e->hnext;
            size_t slot = e->hash & (cap - 1);
            e->hnext = t[slot];
            t[slot] = e;
            e = next;
        }
    }
    free(p->table);
    p->table = t;
    p->table_mask = cap - 1;
}

static void table_insert(passivator_t *p, pentry_t *e)
{
    if (p->n + 1 > p->table_mask + 1) /* load factor at most 1: chains stay short */
        table_grow(p);
    size_t slot = e->hash & p->table_mask;
    e->hnext = p->table[slot];
    p->table[slot] = e;
}

static void table_remove(passivator_t *p, pentry_t *e)
{
    pentry_t **pp = &p->table[e->hash & p->table_mask];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    e->hnext = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * LFU frequency buckets
 */
static bucket_t *bucket_insert_after(passivator_t *p, bucket_t *after, uint64_t priority)
{
    bucket_t *b = p->bucket_pool;
    if (b)
        p->bucket_pool = b->next;
    else
        b = xmalloc(sizeof *b);
    memset(b, 0, sizeof *b);
    b->priority = priority;
    b->prev = after;
    b->next = after ? after->next : p->lfu_low;
    if (b->next)
        b->next->prev = b;
    else
        p->lfu_high = b;
    if (after)
        after->next = b;
    else
        p->lfu_low = b;
    return b;
}

static void bucket_release(passivator_t *p, bucket_t *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        p->lfu_low = b->next;
    if (b->next)
        b->next->prev = b->prev;
    else
        p->lfu_high = b->prev;
    b->next = p->bucket_pool;
    p->bucket_pool = b;
}

/* Appends e to the bucket of `priority`, looking from `from` (a bucket of priority <= it, or NULL
   for the lowest) upwards. Without aging the bucket is from's successor or a new one; with aging
   new entities start at 1 + age where the walk ends at once (no active entity is below the
   age), and an accessed one passes only the priorities between its old and its new one. */
static void lfu_place(passivator_t *p, pentry_t *e, bucket_t *from, uint64_t priority)
{
    bucket_t *cur = from;
    bucket_t *next = cur ? cur->next : p->lfu_low;
    while (next && next->priority <= priority) {
        cur = next;
        next = next->next;
    }
    if (!cur || cur->priority != priority)
        cur = bucket_insert_after(p, cur, priority);
    ext(e)->bucket = cur;
    list_append(&cur->entries, e, QLINK);
}

static uint64_t lfu_priority(const passivator_t *p, const pext_t *x)
{
    return p->s.lfu_dynamic_aging ? (uint64_t)x->accesses + p->age : x->accesses;
}

static void lfu_insert(passivator_t *p, pentry_t *e)
{
    pext_t *x = ext(e);
    x->accesses = 1;
    lfu_place(p, e, NULL, lfu_priority(p, x));
}

static void lfu_touch(passivator_t *p, pentry_t *e)
{
    pext_t *x = ext(e);
    bucket_t *old = x->bucket;
    if (x->accesses < UINT32_MAX)
        x->accesses++;
    list_unlink(&old->entries, e, QLINK);
    lfu_place(p, e, old, lfu_priority(p, x));
    if (!old->entries.n)
        bucket_release(p, old);
}

static void lfu_unlink(passivator_t *p, pentry_t *e)
{
    bucket_t *b = ext(e)->bucket;
    list_unlink(&b->entries, e, QLINK);
    ext(e)->bucket = NULL;
    if (!b->entries.n)
        bucket_release(p, b);
}

/* ---------------------------------------------------------------------------------------------
 * Count-min sketch with 4-bit counters (the composite's admission filter)
 */
static const uint64_t SKETCH_SEEDS[4] = {
    0x9e3779b97f4a7c15ULL,
    0xc2b2ae3d27d4eb4fULL,
    0x165667b19e3779f9ULL,
    0xd6e8feb86659fd93ULL,
};

/* The counter of row `row` for hash h, as an index into the whole array. Multiplicative hashing
   of the (already mixed) id hash, one odd multiplier per row, keeping the top bits: independent
   enough columns from one 64-bit hash at any width. */
static size_t sketch_index(const passivator_t *p, uint64_t h, int row)
{
    return (size_t)row * p->sketch_width + (size_t)((h * SKETCH_SEEDS[row]) >> p->sketch_shift);
}

static unsigned sketch_counter(const passivator_t *p, size_t i)
{
    return (unsigned)(p->sketch[i >> 4] >> ((i & 15) << 2)) & 0xfu;
}

static unsigned sketch_frequency(const passivator_t *p, uint64_t h)
{
    unsigned f = 15;
    for (int row = 0; row < SKETCH_DEPTH; row++) {
        unsigned c = sketch_counter(p, sketch_index(p, h, row));
        if (c < f)
            f = c;
    }
    return f;
}

/* Halving every counter keeps the sketch a picture of recent popularity: a once-hot entity
   stops blocking newcomers after a few reset periods. Halving truncates odd counters, half an
   increment each, which the count of additions follows (as TinyLFU's reset does). */
static void sketch_halve(passivator_t *p)
{
    uint64_t odd = 0;
    for (size_t w = 0; w < SKETCH_DEPTH * p->sketch_width / 16; w++) {
        odd += (uint64_t)__builtin_popcountll(p->sketch[w] & 0x1111111111111111ULL);
        p->sketch[w] = (p->sketch[w] >> 1) & 0x7777777777777777ULL;
    }
    uint64_t lost = odd / SKETCH_DEPTH; /* additions touch one counter per row */
    p->sketch_additions = p->sketch_additions > lost ? (p->sketch_additions - lost) / 2 : 0;
}

static void sketch_increment(passivator_t *p, uint64_t h)
{
    bool added = false;
    for (int row = 0; row < SKETCH_DEPTH; row++) {
        size_t i = sketch_index(p, h, row);
        if (sketch_counter(p, i) < 15) {
            p->sketch[i >> 4] += 1ULL << ((i & 15) << 2);
            added = true;
        }
    }
    if (added && ++p->sketch_additions >= p->sketch_reset_at)
        sketch_halve(p);
}

/* Sized for the limit; a new size starts from zero counts (as Akka's updateCapacity). */
static void sketch_size(passivator_t *p, size_t limit)
{
    size_t base = limit ? limit : 1;
    size_t pow2 = 1;
    while (pow2 < base && pow2 < ((size_t)1 << 36))
        pow2 <<= 1;
    size_t want = pow2 * SKETCH_WIDTH_MULTIPLIER;
    if (want < SKETCH_MIN_WIDTH)
        want = SKETCH_MIN_WIDTH;
    p->sketch_reset_at = (uint64_t)base * SKETCH_RESET_MULTIPLIER;
    if (want == p->sketch_width)
        return;
    free(p->sketch);
    p->sketch = xcalloc(SKETCH_DEPTH * want / 16, sizeof *p->sketch);
    p->sketch_width = want;
    unsigned bits = 0;
    while (((size_t)1 << bits) < want)
        bits++;
    p->sketch_shift = 64 - bits;
    p->sketch_additions = 0;
}

/* ---------------------------------------------------------------------------------------------
 * Eviction
 */

/* Takes e out of every structure; the entry itself lives on until its callback has run. */
static void detach(passivator_t *p, pentry_t *e)
{
    switch (p->kind) {
    case KIND_SLRU:
        slru_unlink(&p->main, e);
        break;
    case KIND_LFU:
        lfu_unlink(p, e);
        break;
    case KIND_TINYLFU:
        if (ext(e)->area == AREA_WINDOW)
            list_unlink(&p->window, e, QLINK);
        else if (ext(e)->area == AREA_MAIN)
            slru_unlink(&p->main, e);
        ext(e)->area = AREA_NONE;
        break;
    default:
        break;
    }
    list_unlink(&p->recency, e, RLINK);
    table_remove(p, e);
    p->n--;
}

static void evict(passivator_t *p, pending_t *pend, pentry_t *e)
{
    detach(p, e);
    e->hnext = NULL;
    if (pend->tail)
        pend->tail->hnext = e;
    else
        pend->head = e;
    pend->tail = e;
}

static void evict_for_limit(passivator_t *p, pending_t *pend, pentry_t *e)
{
    p->stats.evicted++;
    evict(p, pend, e);
}

static void notify(const passivator_t *p, pending_t *pend, passivate_fn *fn, void *arg)
{
    size_t id_off = p->id_off; /* p is not read after the first callback */
    pentry_t *e = pend->head;
    pend->head = pend->tail = NULL;
    while (e) {
        pentry_t *next = e->hnext;
        if (fn)
            fn((const char *)e + id_off, arg);
        free(e);
        e = next;
    }
}

/* LFU: the least frequent, least recent entity goes; with aging its priority becomes the age. */
static void lfu_evict_one(passivator_t *p, pending_t *pend)
{
    bucket_t *b = p->lfu_low;
    if (p->s.lfu_dynamic_aging)
        p->age = b->priority;
    evict_for_limit(p, pend, b->entries.head);
}

/* ---------------------------------------------------------------------------------------------
 * The composite
 */

/* The window gets floor(proportion * limit) but at least 1: with an empty window a new entity
   would be its own window victim and could be refused by the filter on its first access. */
static void composite_limits(passivator_t *p)
{
    if (!p->limit) {
        p->window_limit = p->main_limit = SIZE_MAX;
        slru_sizes(&p->main, SIZE_MAX);
        return;
    }
    double want = p->window_prop * (double)p->limit;
    size_t w = want >= (double)p->limit ? p->limit : (size_t)want;
    if (w < 1)
        w = 1;
    p->window_limit = w;
    p->main_limit = p->limit - w;
    slru_sizes(&p->main, p->main_limit);
}

/* A window victim asks to enter the main area; the loser of the frequency contest goes. */
static void admit(passivator_t *p, pending_t *pend, pentry_t *cand)
{
    ext(cand)->area = AREA_NONE;
    if (p->main.n < p->main_limit) {
        ext(cand)->area = AREA_MAIN;
        slru_insert(&p->main, cand);
        return;
    }
    pentry_t *victim = slru_victim(&p->main);
    if (victim && sketch_frequency(p, cand->hash) > sketch_frequency(p, victim->hash)) {
        evict_for_limit(p, pend, victim);
        ext(cand)->area = AREA_MAIN;
        slru_insert(&p->main, cand);
        return;
    }
    p->stats.rejected++;
    evict_for_limit(p, pend, cand);
}

/* Moves entities between window and main area to the new proportion; evicts nothing. */
static void resize_window(passivator_t *p, double prop)
{
    size_t old = p->window_limit;
    p->window_prop = prop;
    composite_limits(p);
    if (p->window_limit > old) {
        while (p->main.n > p->main_limit) {
            pentry_t *e = slru_victim(&p->main);
            slru_unlink(&p->main, e);
            ext(e)->area = AREA_WINDOW;
            list_append(&p->window, e, QLINK);
        }
    } else if (p->window_limit < old) {
        while (p->window.n > p->window_limit) {
            pentry_t *e = p->window.head;
            list_unlink(&p->window, e, QLINK);
            ext(e)->area = AREA_MAIN;
            slru_insert(&p->main, e);
        }
    }
    slru_settle(&p->main);
}

/* Hill climbing (Akka's HillClimbingAdmissionOptimizer, after Caffeine): one step per period of
   adjust_multiplier * limit accesses, in the direction that last did not lower the hit rate. */
static void climb(passivator_t *p, bool hit)
{
    if (!p->s.hill_climbing || !p->limit)
        return;
    p->climb_accesses++;
    if (hit)
        p->climb_hits++;
    if ((double)p->climb_accesses < p->s.adjust_multiplier * (double)p->limit)
        return;
    double rate = (double)p->climb_hits / (double)p->climb_accesses;
    double delta = rate - p->climb_prev_rate;
    double step = delta >= 0 ? p->climb_step : -p->climb_step;
    double direction = step >= 0 ? 1.0 : -1.0;
    p->climb_step = fabs(delta) >= p->s.restart_threshold ? p->s.initial_step * direction
                                                          : step * p->s.step_decay;
    p->climb_prev_rate = rate;
    p->climb_accesses = p->climb_hits = 0;
    double prop = p->window_prop + step;
    if (prop < p->s.window_min_proportion)
        prop = p->s.window_min_proportion;
    if (prop > p->s.window_max_proportion)
        prop = p->s.window_max_proportion;
    if (prop != p->window_prop)
        resize_window(p, prop);
}

/* ---------------------------------------------------------------------------------------------
 * Settings
 */
static bool finite_in(double v, double lo, double hi)
{
    return isfinite(v) && v >= lo && v <= hi;
}

/* Akka's defaults stand in for values it would refuse at configuration time. */
static void sanitize(shoal_passivation_settings_t *s)
{
    if (s->slru_levels > SLRU_MAX_LEVELS)
        s->slru_levels = SLRU_MAX_LEVELS;
    if (!finite_in(s->window_proportion, 0.0, 1.0))
        s->window_proportion = 0.01;
    if (!finite_in(s->window_min_proportion, 0.0, 1.0))
        s->window_min_proportion = 0.01;
    if (!finite_in(s->window_max_proportion, 0.0, 1.0))
        s->window_max_proportion = 1.0;
    if (s->window_min_proportion > s->window_max_proportion)
        s->window_max_proportion = s->window_min_proportion;
    if (!finite_in(s->adjust_multiplier, 1e-9, 1e9))
        s->adjust_multiplier = 10.0;
    if (!finite_in(s->initial_step, 1e-9, 1.0))
        s->initial_step = 0.0625;
    if (!finite_in(s->restart_threshold, 0.0, 1.0))
        s->restart_threshold = 0.05;
    if (!finite_in(s->step_decay, 1e-9, 1.0))
        s->step_decay = 0.98;
}

/* Normalized proportions; any negative or non-finite value, or all zeros, means equal levels. */
static void slru_init(slru_t *s, unsigned levels, const double *prop)
{
    memset(s, 0, sizeof *s);
    s->levels = levels;
    double sum = 0;
    bool ok = true;
    for (unsigned l = 0; l < levels; l++) {
        if (!finite_in(prop[l], 0.0, 1e9))
            ok = false;
        else
            sum += prop[l];
    }
    for (unsigned l = 0; l < levels; l++)
        s->prop[l] = ok && sum > 0 ? prop[l] / sum : 1.0 / levels;
}

passivator_t *passivator_new(const shoal_passivation_settings_t *s, size_t limit)
{
    if (!s)
        return NULL;
    kind_t kind;
    switch (s->policy) {
    case SHOAL_PASSIVATE_NONE:
        kind = KIND_NONE;
        break;
    case SHOAL_PASSIVATE_IDLE:
        kind = KIND_IDLE;
        break;
    case SHOAL_PASSIVATE_LRU:
        kind = s->slru_levels > 1 ? KIND_SLRU : KIND_LRU;
        break;
    case SHOAL_PASSIVATE_MRU:
        kind = KIND_MRU;
        break;
    case SHOAL_PASSIVATE_LFU:
        kind = KIND_LFU;
        break;
    case SHOAL_PASSIVATE_TINYLFU:
        kind = KIND_TINYLFU;
        break;
    default:
        return NULL;
    }
    passivator_t *p = xcalloc(1, sizeof *p);
    p->s = *s;
    sanitize(&p->s);
    p->kind = kind;
    p->limit = limit;
    bool extended = kind == KIND_SLRU || kind == KIND_LFU || kind == KIND_TINYLFU;
    p->id_off = sizeof(pentry_t) + (extended ? sizeof(pext_t) : 0);
    p->table_mask = 15;
    p->table = xcalloc(p->table_mask + 1, sizeof *p->table);
    if (kind == KIND_SLRU) {
        slru_init(&p->main, p->s.slru_levels, p->s.slru_proportions);
        slru_sizes(&p->main, limit ? limit : SIZE_MAX);
    } else if (kind == KIND_TINYLFU) {
        if (p->s.slru_levels > 1)
            slru_init(&p->main, p->s.slru_levels, p->s.slru_proportions);
        else
            slru_init(&p->main, 2, TINYLFU_MAIN_PROPORTIONS);
        p->window_prop = p->s.window_proportion;
        composite_limits(p);
        sketch_size(p, limit);
        /* Akka starts towards a smaller window: most workloads favour frequency */
        p->climb_step = -p->s.initial_step;
    }
    return p;
}

void passivator_destroy(passivator_t **pp)
{
    if (!pp || !*pp)
        return;
    passivator_t *p = *pp;
    for (pentry_t *e = p->recency.head; e;) {
        pentry_t *next = e->r.next;
        free(e);
        e = next;
    }
    for (bucket_t *b = p->lfu_low; b;) {
        bucket_t *next = b->next;
        free(b);
        b = next;
    }
    for (bucket_t *b = p->bucket_pool; b;) {
        bucket_t *next = b->next;
        free(b);
        b = next;
    }
    free(p->table);
    free(p->sketch);
    free(p);
    *pp = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Operations
 */
static bool limit_based(const passivator_t *p)
{
    return p->kind != KIND_NONE && p->kind != KIND_IDLE;
}

void passivator_set_limit(passivator_t *p, size_t limit, passivate_fn *fn, void *arg)
{
    if (!p)
        return;
    pending_t pend = {NULL, NULL};
    p->limit = limit;
    switch (p->kind) {
    case KIND_LRU:
        while (limit && p->n > limit)
            evict_for_limit(p, &pend, p->recency.head);
        break;
    case KIND_MRU:
        while (limit && p->n > limit)
            evict_for_limit(p, &pend, p->recency.tail);
        break;
    case KIND_SLRU:
        slru_sizes(&p->main, limit ? limit : SIZE_MAX);
        slru_settle(&p->main);
        while (limit && p->n > limit)
            evict_for_limit(p, &pend, slru_victim(&p->main));
        break;
    case KIND_LFU:
        while (limit && p->n > limit)
            lfu_evict_one(p, &pend);
        break;
    case KIND_TINYLFU:
        composite_limits(p);
        if (limit)
            sketch_size(p, limit);
        /* an over-full main area first fills any room the window has, so that no more than
           size - limit entities go */
        while (p->main.n > p->main_limit && p->window.n < p->window_limit) {
            pentry_t *e = slru_victim(&p->main);
            slru_unlink(&p->main, e);
            ext(e)->area = AREA_WINDOW;
            list_append(&p->window, e, QLINK);
        }
        while (p->window.n > p->window_limit) {
            pentry_t *cand = p->window.head;
            list_unlink(&p->window, cand, QLINK);
            admit(p, &pend, cand);
        }
        slru_settle(&p->main);
        while (p->main.n > p->main_limit)
            evict_for_limit(p, &pend, slru_victim(&p->main));
        break;
    default:
        break;
    }
    notify(p, &pend, fn, arg);
}

static void touch(passivator_t *p, pentry_t *e)
{
    switch (p->kind) {
    case KIND_SLRU:
        slru_touch(&p->main, e);
        break;
    case KIND_LFU:
        lfu_touch(p, e);
        break;
    case KIND_TINYLFU:
        if (ext(e)->area == AREA_WINDOW)
            list_to_back(&p->window, e, QLINK);
        else
            slru_touch(&p->main, e);
        break;
    default:
        break;
    }
}

static pentry_t *create(passivator_t *p, const char *id, size_t len, uint64_t h)
{
    pentry_t *e = xmalloc(p->id_off + len + 1);
    memset(e, 0, p->id_off);
    e->hash = h;
    memcpy(entry_id(p, e), id, len + 1);
    table_insert(p, e);
    p->n++;
    switch (p->kind) {
    case KIND_SLRU:
        slru_insert(&p->main, e);
        break;
    case KIND_LFU:
        lfu_insert(p, e);
        break;
    case KIND_TINYLFU:
        ext(e)->area = AREA_WINDOW;
        list_append(&p->window, e, QLINK);
        break;
    default:
        break;
    }
    return e;
}

/* Evictions after e (the accessed entity, now the most recent) joined. */
static void enforce_limit(passivator_t *p, pending_t *pend, pentry_t *e)
{
    switch (p->kind) {
    case KIND_LRU:
        while (p->limit && p->n > p->limit && p->recency.head != e)
            evict_for_limit(p, pend, p->recency.head);
        break;
    case KIND_MRU:
        while (p->limit && p->n > p->limit && e->r.prev)
            evict_for_limit(p, pend, e->r.prev);
        break;
    case KIND_SLRU:
        while (p->limit && p->n > p->limit) {
            pentry_t *v = slru_victim(&p->main);
            if (v == e) /* only with a broken level split; never evict the accessed one */
                break;
            evict_for_limit(p, pend, v);
        }
        break;
    case KIND_TINYLFU:
        while (p->window.n > p->window_limit && p->window.head != e) {
            pentry_t *cand = p->window.head;
            list_unlink(&p->window, cand, QLINK);
            admit(p, pend, cand);
        }
        break;
    default:
        break;
    }
}

bool passivator_access(passivator_t *p, const char *entity_id, int64_t now_ms, passivate_fn *fn,
                       void *arg)
{
    if (!p)
        return false;
    if (!entity_id) {
        p->stats.bad_input++;
        return false;
    }
    size_t len = strlen(entity_id);
    uint64_t h = XXH3_64bits(entity_id, len);
    pending_t pend = {NULL, NULL};
    if (p->kind == KIND_TINYLFU)
        sketch_increment(p, h);
    /* the recency list stays in time order, so the idle scan can stop at the first recent one */
    if (p->recency.tail && now_ms < p->recency.tail->last_ms)
        now_ms = p->recency.tail->last_ms;
    pentry_t *e = table_find(p, entity_id, h);
    bool hit = e != NULL;
    if (hit) {
        p->stats.hits++;
        e->last_ms = now_ms;
        list_to_back(&p->recency, e, RLINK);
        touch(p, e);
    } else {
        p->stats.misses++;
        /* LFU evicts first (Akka): with aging, the newcomer's priority counts the new age */
        if (p->kind == KIND_LFU)
            while (p->limit && p->n >= p->limit)
                lfu_evict_one(p, &pend);
        e = create(p, entity_id, len, h);
        e->last_ms = now_ms;
        list_append(&p->recency, e, RLINK);
        enforce_limit(p, &pend, e);
    }
    if (p->kind == KIND_TINYLFU)
        climb(p, hit);
    notify(p, &pend, fn, arg);
    return hit;
}

void passivator_remove(passivator_t *p, const char *entity_id)
{
    if (!p)
        return;
    if (!entity_id) {
        p->stats.bad_input++;
        return;
    }
    pentry_t *e = table_find(p, entity_id, XXH3_64bits(entity_id, strlen(entity_id)));
    if (!e)
        return;
    detach(p, e);
    free(e);
}

void passivator_idle(passivator_t *p, int64_t now_ms, passivate_fn *fn, void *arg)
{
    if (!p || p->kind == KIND_NONE || !p->s.idle_timeout_ms)
        return;
    int64_t timeout = p->s.idle_timeout_ms;
    if (now_ms < INT64_MIN + timeout)
        return;
    int64_t before = now_ms - timeout;
    pending_t pend = {NULL, NULL};
    while (p->recency.head && p->recency.head->last_ms < before) {
        p->stats.idle_evicted++;
        evict(p, &pend, p->recency.head);
    }
    notify(p, &pend, fn, arg);
}

size_t passivator_size(const passivator_t *p)
{
    return p ? p->n : 0;
}

bool passivator_contains(const passivator_t *p, const char *entity_id)
{
    if (!p || !entity_id)
        return false;
    return table_find(p, entity_id, XXH3_64bits(entity_id, strlen(entity_id))) != NULL;
}

void passivator_stats(const passivator_t *p, passivator_stats_t *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!p)
        return;
    *out = p->stats;
    out->limit = p->limit;
    if (p->kind == KIND_TINYLFU) {
        out->window_limit = p->window_limit;
        out->window_size = p->window.n;
    }
}

unsigned passivator_frequency(const passivator_t *p, const char *entity_id)
{
    if (!p || !entity_id || p->kind != KIND_TINYLFU)
        return 0;
    return sketch_frequency(p, XXH3_64bits(entity_id, strlen(entity_id)));
}

/* ---------------------------------------------------------------------------------------------
 * Consistency check (tests)
 */

/* Links both ways, the count, and (when want >= 0) every entry's level or area. */
static int check_list(const list_t *l, size_t off, int level, int area)
{
    size_t n = 0;
    pentry_t *prev = NULL;
    for (pentry_t *e = l->head; e; e = lnk(e, off)->next) {
        if (lnk(e, off)->prev != prev)
            return -1;
        if (level >= 0 && ext(e)->level != level)
            return -2;
        if (area >= 0 && ext(e)->area != area)
            return -3;
        prev = e;
        if (++n > l->n)
            return -4;
    }
    if (prev != l->tail || n != l->n)
        return -5;
    return 0;
}

static int check_slru(const slru_t *s, int area)
{
    size_t total = 0;
    for (unsigned l = 0; l < s->levels; l++) {
        int rc = check_list(&s->seg[l], QLINK, (int)l, area);
        if (rc)
            return rc - 10;
        total += s->seg[l].n;
    }
    return total == s->n ? 0 : -20;
}

int passivator_check(const passivator_t *p)
{
    if (!p)
        return -100;
    int rc = check_list(&p->recency, RLINK, -1, -1);
    if (rc)
        return rc - 100;
    if (p->recency.n != p->n)
        return -101;
    size_t in_table = 0;
    for (size_t i = 0; i <= p->table_mask; i++)
        for (pentry_t *e = p->table[i]; e; e = e->hnext) {
            if ((e->hash & p->table_mask) != i)
                return -102;
            in_table++;
        }
    if (in_table != p->n)
        return -103;
    for (pentry_t *e = p->recency.head; e; e = e->r.next) {
        if (table_find(p, entry_id(p, e), e->hash) != e)
            return -104;
        if (e->r.next && e->r.next->last_ms < e->last_ms)
            return -105;
    }
    if (limit_based(p) && p->limit && p->n > p->limit)
        return -106;
    switch (p->kind) {
    case KIND_SLRU:
        rc = check_slru(&p->main, -1);
        if (rc)
            return rc - 200;
        if (p->main.n != p->n)
            return -201;
        break;
    case KIND_LFU: {
        size_t total = 0;
        bucket_t *prev = NULL;
        for (bucket_t *b = p->lfu_low; b; b = b->next) {
            if (b->prev != prev || (prev && prev->priority >= b->priority) || !b->entries.n)
                return -300;
            if (p->s.lfu_dynamic_aging && b->priority < p->age)
                return -301;
            rc = check_list(&b->entries, QLINK, -1, -1);
            if (rc)
                return rc - 310;
            for (pentry_t *e = b->entries.head; e; e = ext(e)->q.next) {
                if (ext(e)->bucket != b)
                    return -302;
                if (!p->s.lfu_dynamic_aging && ext(e)->accesses != b->priority)
                    return -303;
            }
            total += b->entries.n;
            prev = b;
        }
        if (prev != p->lfu_high || total != p->n)
            return -304;
        break;
    }
    case KIND_TINYLFU:
        rc = check_list(&p->window, QLINK, -1, AREA_WINDOW);
        if (rc)
            return rc - 400;
        rc = check_slru(&p->main, AREA_MAIN);
        if (rc)
            return rc - 410;
        if (p->window.n + p->main.n != p->n)
            return -401;
        if (p->limit && (p->window.n > p->window_limit || p->main.n > p->main_limit ||
                         p->window_limit + p->main_limit != p->limit || p->window_limit < 1))
            return -402;
        break;
    default:
        break;
    }
    return 0;
}
