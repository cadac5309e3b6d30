/*  allocation.c — the shard allocation strategies; see allocation.h.

    Tables are small (tens of regions, up to some thousands of shards), so every pass is a scan
    or a sort of pointers; the only memory taken is scratch for sorted shard lists and the set of
    shards in progress, freed before returning.
*/
#include "allocation.h"

#include <limits.h>
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

/* ---------------------------------------------------------------------------------------------
 * Versions
 */

/* Three dotted numbers as Akka's Version, and a fourth for "1.2.3.4" rather than reading ".4"
   as a qualifier that would make it older than 1.2.3. */
#define VERSION_PARTS 4

typedef struct {
    uint32_t num[VERSION_PARTS];
    uint32_t commits;      /* sbt-dynver: commits since the tag */
    const char *qualifier; /* "" = a release */
} version_t;

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Saturates rather than wraps: an absurd number still compares as very large. */
static const char *parse_number(const char *p, uint32_t *out)
{
    uint32_t n = 0;
    for (; is_digit(*p); p++) {
        uint32_t d = (uint32_t)(*p - '0');
        n = n > (UINT32_MAX - d) / 10 ? UINT32_MAX : n * 10 + d;
    }
    *out = n;
    return p;
}

static void version_parse(const char *s, version_t *v)
{
    memset(v, 0, sizeof *v);
    v->qualifier = "";
    if (!s)
        return;
    const char *p = s;
    for (int i = 0; i < VERSION_PARTS && is_digit(*p); i++) {
        p = parse_number(p, &v->num[i]);
        if (*p == '.' && i + 1 < VERSION_PARTS && is_digit(p[1]))
            p++;
        else
            break;
    }
    if (*p == '-' || *p == '+') {
        const char *t = p + 1;
        /* dynver "1.2.3+10-1234abcd" (or with '-'): the count after the tag is a number, so ten
           commits are newer than three */
        if (is_digit(*t)) {
            uint32_t n;
            const char *q = parse_number(t, &n);
            if (*q == '-') {
                v->commits = n;
                t = q + 1;
            }
        }
        v->qualifier = t;
    } else {
        v->qualifier = p;
    }
}

int alloc_version_cmp(const char *a, const char *b)
{
    version_t x, y;
    version_parse(a, &x);
    version_parse(b, &y);
    for (int i = 0; i < VERSION_PARTS; i++)
        if (x.num[i] != y.num[i])
            return x.num[i] < y.num[i] ? -1 : 1;
    if (x.commits != y.commits)
        return x.commits < y.commits ? -1 : 1;
    bool xq = *x.qualifier != 0, yq = *y.qualifier != 0;
    if (xq != yq)
        return xq ? -1 : 1; /* "1.0.0-RC1" comes before "1.0.0" */
    int c = strcmp(x.qualifier, y.qualifier);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Regions
 */

static bool eligible(const shoal_alloc_region_t *r)
{
    return r->node && !r->leaving;
}

/* The count alone is enough to allocate: the coordinator fills the lists only when a strategy
   needs them (rebalance, custom), so a NULL list with a count is a region hosting that many. */
static size_t shard_count(const shoal_alloc_region_t *r)
{
    return r->n_shards;
}

/* How many entries of r->shards may be read. */
static size_t list_len(const shoal_alloc_region_t *r)
{
    return r->shards ? r->n_shards : 0;
}

static int region_pref_cmp(const shoal_alloc_region_t *a, const shoal_alloc_region_t *b)
{
    if (!a->node || !b->node)
        return (a->node == NULL) - (b->node == NULL); /* unusable entries last */
    if (a->leaving != b->leaving)
        return a->leaving ? 1 : -1;
    int c = alloc_version_cmp(b->app_version, a->app_version); /* newest first */
    if (c)
        return c;
    size_t na = shard_count(a), nb = shard_count(b);
    if (na != nb)
        return na < nb ? -1 : 1;
    return shoal_node_cmp(a->node, b->node);
}

static int region_pref_qsort(const void *a, const void *b)
{
    return region_pref_cmp(a, b);
}

void alloc_sort_regions(shoal_alloc_region_t *regions, size_t n)
{
    if (regions && n > 1)
        qsort(regions, n, sizeof *regions, region_pref_qsort);
}

int alloc_least_shards(const shoal_alloc_region_t *regions, size_t n)
{
    int best = -1;
    if (!regions || n > INT_MAX)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (regions[i].node && (best < 0 || region_pref_cmp(&regions[i], &regions[best]) < 0))
            best = (int)i;
    return best;
}

static bool any_eligible(const shoal_alloc_region_t *regions, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (eligible(&regions[i]))
            return true;
    return false;
}

/* Akka's isAGoodTimeToRebalance, the part decided by the table: no rolling update under way. */
static bool same_versions(const shoal_alloc_region_t *regions, size_t n)
{
    const char *first = NULL;
    bool have = false;
    for (size_t i = 0; i < n; i++) {
        if (!regions[i].node)
            continue;
        if (!have) {
            first = regions[i].app_version;
            have = true;
        } else if (alloc_version_cmp(first, regions[i].app_version) != 0) {
            return false;
        }
    }
    return true;
}

size_t alloc_address_len(const shoal_node_t *node)
{
    const char *id = shoal_node_id(node);
    if (!id)
        return 0;
    const char *last = strrchr(id, ':'); /* the uid follows the last colon */
    return last ? (size_t)(last - id) : 0;
}

bool alloc_address_is(const shoal_node_t *node, const char *address)
{
    size_t len = alloc_address_len(node);
    return address && len && strlen(address) == len &&
           memcmp(shoal_node_id(node), address, len) == 0;
}

static bool same_address(const shoal_node_t *a, const shoal_node_t *b)
{
    size_t la = alloc_address_len(a);
    return la && la == alloc_address_len(b) && memcmp(shoal_node_id(a), shoal_node_id(b), la) == 0;
}

/* The eligible region at address, the most preferred of several incarnations; -1 if none. */
static int region_at(const shoal_alloc_region_t *regions, size_t n, const char *address)
{
    int best = -1;
    if (!address)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (eligible(&regions[i]) && alloc_address_is(regions[i].node, address) &&
            (best < 0 || region_pref_cmp(&regions[i], &regions[best]) < 0))
            best = (int)i;
    return best;
}

/* ---------------------------------------------------------------------------------------------
 * Shard lists
 */

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The shards in progress, sorted and without NULLs or repeats, for bsearch. */
typedef struct {
    const char **ids;
    size_t n;
} shard_set_t;

static void shard_set_init(shard_set_t *set, const char *const *ids, size_t n)
{
    set->ids = xcalloc(n, sizeof *set->ids);
    set->n = 0;
    for (size_t i = 0; ids && i < n; i++)
        if (ids[i])
            set->ids[set->n++] = ids[i];
    qsort(set->ids, set->n, sizeof *set->ids, str_ptr_cmp);
    size_t k = 0;
    for (size_t i = 0; i < set->n; i++)
        if (k == 0 || strcmp(set->ids[k - 1], set->ids[i]) != 0)
            set->ids[k++] = set->ids[i];
    set->n = k;
}

static bool shard_set_has(const shard_set_t *set, const char *id)
{
    return set->n && bsearch(&id, set->ids, set->n, sizeof *set->ids, str_ptr_cmp) != NULL;
}

static void shard_set_free(shard_set_t *set)
{
    free(set->ids);
    set->ids = NULL;
    set->n = 0;
}

/* The region's shards not in `busy`, sorted by id, into scratch (room for shard_count(r)). */
static size_t movable_sorted(const shoal_alloc_region_t *r, const shard_set_t *busy,
                             const char **scratch)
{
    size_t k = 0;
    for (size_t i = 0; i < list_len(r); i++)
        if (r->shards[i] && !shard_set_has(busy, r->shards[i]))
            scratch[k++] = r->shards[i];
    qsort(scratch, k, sizeof *scratch, str_ptr_cmp);
    return k;
}

static size_t movable_count(const shoal_alloc_region_t *r, const shard_set_t *busy)
{
    size_t k = 0;
    for (size_t i = 0; i < list_len(r); i++)
        if (r->shards[i] && !shard_set_has(busy, r->shards[i]))
            k++;
    return k;
}

static size_t largest_region(const shoal_alloc_region_t *regions, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (shard_count(&regions[i]) > m)
            m = shard_count(&regions[i]);
    return m;
}

/* The eligible regions, sorted with cmp (qsort has no context argument, so each entry carries
   its region). */
typedef struct {
    const shoal_alloc_region_t *r;
    size_t idx; /* in the caller's table */
} region_ref_t;

typedef struct {
    region_ref_t *v;
    size_t n;
} region_list_t;

static int by_node_id(const void *a, const void *b)
{
    return shoal_node_cmp(((const region_ref_t *)a)->r->node, ((const region_ref_t *)b)->r->node);
}

static int by_load_desc(const void *a, const void *b)
{
    const shoal_alloc_region_t *x = ((const region_ref_t *)a)->r;
    const shoal_alloc_region_t *y = ((const region_ref_t *)b)->r;
    size_t nx = shard_count(x), ny = shard_count(y);
    if (nx != ny)
        return nx > ny ? -1 : 1;
    return shoal_node_cmp(x->node, y->node);
}

static void region_list_init(region_list_t *l, const shoal_alloc_region_t *regions, size_t n,
                             int (*cmp)(const void *, const void *))
{
    l->v = xcalloc(n, sizeof *l->v);
    l->n = 0;
    for (size_t i = 0; i < n; i++)
        if (eligible(&regions[i]))
            l->v[l->n++] = (region_ref_t){&regions[i], i};
    qsort(l->v, l->n, sizeof *l->v, cmp);
}

/* ---------------------------------------------------------------------------------------------
 * Least shards
 */

static size_t least_limit(const shoal_alloc_settings_t *s, size_t total)
{
    double rel = s->rebalance_relative_limit * (double)total;
    size_t r;
    if (!(rel > 0)) /* also NaN */
        r = 0;
    else if (rel >= (double)UINT32_MAX)
        r = UINT32_MAX;
    else
        r = (size_t)floor(rel + 0.5);
    if (r < 1)
        r = 1;
    return r < s->rebalance_absolute_limit ? r : s->rebalance_absolute_limit;
}

static size_t least_rebalance_new(const shoal_alloc_settings_t *s,
                                  const shoal_alloc_region_t *regions, size_t n,
                                  size_t n_in_progress, const char **out, size_t cap)
{
    if (n_in_progress > 0 || !same_versions(regions, n))
        return 0; /* one round at a time, as Akka */
    region_list_t l;
    region_list_init(&l, regions, n, by_load_desc);
    size_t total = 0;
    for (size_t i = 0; i < l.n; i++)
        total += shard_count(l.v[i].r);
    size_t k = 0;
    if (l.n == 0 || total == 0)
        goto done;
    size_t optimal = total / l.n + (total % l.n ? 1 : 0);
    size_t limit = least_limit(s, total);
    if (limit > cap)
        limit = cap;
    shard_set_t none = {NULL, 0};
    const char **scratch = xcalloc(largest_region(regions, n), sizeof *scratch);
    for (size_t i = 0; i < l.n && k < limit; i++) {
        const shoal_alloc_region_t *r = l.v[i].r;
        if (shard_count(r) <= optimal)
            break; /* sorted by load: the rest are at or below optimal */
        size_t m = movable_sorted(r, &none, scratch);
        size_t take = shard_count(r) - optimal;
        for (size_t j = 0; j < take && j < m && k < limit; j++)
            out[k++] = scratch[j];
    }
    if (k == 0) {
        /* phase 2: optimal was rounded up, so regions one below it are balanced; only a region
           two or more below is worth a move, one from each region at optimal */
        size_t below = 0;
        for (size_t i = 0; i < l.n; i++) {
            size_t c = shard_count(l.v[i].r);
            if (c + 1 < optimal)
                below += optimal - 1 - c;
        }
        if (below < limit)
            limit = below;
        for (size_t i = 0; i < l.n && k < limit; i++) {
            const shoal_alloc_region_t *r = l.v[i].r;
            if (shard_count(r) != optimal)
                continue;
            if (movable_sorted(r, &none, scratch) > 0)
                out[k++] = scratch[0];
        }
    }
    free(scratch);
done:
    free(l.v);
    return k;
}

static size_t least_rebalance_old(const shoal_alloc_settings_t *s,
                                  const shoal_alloc_region_t *regions, size_t n,
                                  const shard_set_t *busy, const char **out, size_t cap)
{
    if (busy->n >= s->max_simultaneous_rebalance || !same_versions(regions, n))
        return 0;
    int least = -1, most = -1;
    size_t most_free = 0;
    for (size_t i = 0; i < n; i++) {
        const shoal_alloc_region_t *r = &regions[i];
        if (!eligible(r))
            continue;
        if (least < 0 || shard_count(r) < shard_count(&regions[least]))
            least = (int)i;
        size_t f = movable_count(r, busy);
        if (most < 0 || f > most_free ||
            (f == most_free && shoal_node_cmp(r->node, regions[most].node) < 0)) {
            most = (int)i;
            most_free = f;
        }
    }
    if (least < 0 || most_free <= shard_count(&regions[least]))
        return 0;
    size_t diff = most_free - shard_count(&regions[least]);
    size_t threshold = s->rebalance_threshold;
    if (diff <= threshold)
        return 0;
    size_t take = diff - threshold < threshold ? diff - threshold : threshold;
    size_t room = s->max_simultaneous_rebalance - busy->n;
    if (take > room)
        take = room;
    if (take > cap)
        take = cap;
    const char **scratch = xcalloc(shard_count(&regions[most]), sizeof *scratch);
    size_t m = movable_sorted(&regions[most], busy, scratch);
    size_t k = 0;
    for (; k < take && k < m; k++)
        out[k] = scratch[k];
    free(scratch);
    return k;
}

/* ---------------------------------------------------------------------------------------------
 * Consistent (rendezvous) hashing
 */

uint64_t alloc_hrw_score(const char *shard, const shoal_node_t *node)
{
    size_t slen = shard ? strlen(shard) : 0, alen = alloc_address_len(node);
    char stack[SHOAL_SHARD_ID_MAX + 1 + SHOAL_NODE_ID_MAX];
    size_t len = slen + 1 + alen;
    /* a shard id longer than allowed is refused before it gets here; still, never overflow */
    char *buf = len <= sizeof stack ? stack : xcalloc(len, 1);
    if (slen)
        memcpy(buf, shard, slen);
    buf[slen] = 0; /* ids hold no NUL, so ("ab", "c:1") and ("a", "bc:1") hash apart */
    if (alen)
        memcpy(buf + slen + 1, shoal_node_id(node), alen);
    uint64_t h = XXH3_64bits(buf, len);
    if (buf != stack)
        free(buf);
    return h;
}

static int hashing_preferred(const char *shard, const shoal_alloc_region_t *regions, size_t n)
{
    int best = -1;
    uint64_t best_score = 0;
    for (size_t i = 0; i < n; i++) {
        if (!eligible(&regions[i]))
            continue;
        uint64_t sc = alloc_hrw_score(shard, regions[i].node);
        /* equal scores: another incarnation of the same address, or a 2^-64 collision */
        if (best < 0 || sc > best_score ||
            (sc == best_score && region_pref_cmp(&regions[i], &regions[best]) < 0)) {
            best = (int)i;
            best_score = sc;
        }
    }
    return best;
}

static size_t hashing_rebalance(const shoal_alloc_settings_t *s,
                                const shoal_alloc_region_t *regions, size_t n,
                                const shard_set_t *busy, const char **out, size_t cap)
{
    if (!same_versions(regions, n))
        return 0;
    size_t limit = cap;
    if (s->hashing_rebalance_limit > 0 && s->hashing_rebalance_limit < limit)
        limit = s->hashing_rebalance_limit;
    region_list_t l;
    region_list_init(&l, regions, n, by_node_id);
    const char **scratch = xcalloc(largest_region(regions, n), sizeof *scratch);
    size_t k = 0;
    for (size_t i = 0; i < l.n && k < limit; i++) {
        const shoal_alloc_region_t *r = l.v[i].r;
        size_t m = movable_sorted(r, busy, scratch);
        for (size_t j = 0; j < m && k < limit; j++) {
            int p = hashing_preferred(scratch[j], regions, n);
            /* another incarnation at the same address is the same member coming back: the
               shard is where it belongs */
            if (p >= 0 && (size_t)p != l.v[i].idx && !same_address(regions[p].node, r->node))
                out[k++] = scratch[j];
        }
    }
    free(scratch);
    free(l.v);
    return k;
}

/* ---------------------------------------------------------------------------------------------
 * External locations
 */

static int external_preferred(const alloc_ctx_t *ctx, const char *shard,
                              const shoal_alloc_region_t *regions, size_t n)
{
    if (!ctx->external || !shard)
        return -1;
    return region_at(regions, n, ctx->external(shard, ctx->external_arg));
}

static size_t external_rebalance(const alloc_ctx_t *ctx, const shoal_alloc_region_t *regions,
                                 size_t n, const shard_set_t *busy, const char **out, size_t cap)
{
    if (!ctx->external)
        return 0;
    region_list_t l;
    region_list_init(&l, regions, n, by_node_id);
    const char **scratch = xcalloc(largest_region(regions, n), sizeof *scratch);
    size_t k = 0;
    for (size_t i = 0; i < l.n && k < cap; i++) {
        const shoal_alloc_region_t *r = l.v[i].r;
        size_t m = movable_sorted(r, busy, scratch);
        for (size_t j = 0; j < m && k < cap; j++) {
            const char *where = ctx->external(scratch[j], ctx->external_arg);
            /* a location that is not a current member waits for it, as Akka does */
            if (where && !alloc_address_is(r->node, where) && region_at(regions, n, where) >= 0)
                out[k++] = scratch[j];
        }
    }
    free(scratch);
    free(l.v);
    return k;
}

/* ---------------------------------------------------------------------------------------------
 * Custom
 */

static int custom_allocate(const shoal_alloc_custom_t *c, const char *shard, int requester,
                           const shoal_alloc_region_t *regions, size_t n)
{
    if (!c->allocate)
        return alloc_least_shards(regions, n);
    int r = c->allocate(shard, requester, regions, n, c->arg);
    /* A strategy's bug must not strand the shard: an index out of range, a region without a
       node, or a leaving region while another could take it (the shard would be handed off again
       at once) falls back to least shards. */
    if (r < 0 || (size_t)r >= n || !regions[r].node ||
        (regions[r].leaving && any_eligible(regions, n)))
        return alloc_least_shards(regions, n);
    return r;
}

static size_t custom_rebalance(const shoal_alloc_custom_t *c, const shoal_alloc_region_t *regions,
                               size_t n, const char *const *in_progress, size_t n_in_progress,
                               const shard_set_t *busy, const char **out, size_t cap)
{
    if (!c->rebalance || cap == 0)
        return 0;
    /* a strategy that claims more than it wrote leaves NULLs, which are dropped below */
    memset(out, 0, cap * sizeof *out);
    size_t got = c->rebalance(regions, n, in_progress, n_in_progress, out, cap, c->arg);
    if (got > cap)
        got = cap;
    if (got == 0)
        return 0;
    /* every hosted shard, sorted, to check the answer against and to lend our own pointers:
       the strategy's strings may not live as long as the caller needs */
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (regions[i].node)
            total += shard_count(&regions[i]);
    const char **hosted = xcalloc(total, sizeof *hosted);
    size_t h = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; regions[i].node && j < list_len(&regions[i]); j++)
            if (regions[i].shards[j])
                hosted[h++] = regions[i].shards[j];
    qsort(hosted, h, sizeof *hosted, str_ptr_cmp);
    bool *taken = xcalloc(h, sizeof *taken);
    size_t k = 0;
    for (size_t i = 0; i < got; i++) {
        const char *id = out[i];
        if (!id || shard_set_has(busy, id))
            continue;
        const char **at = h ? bsearch(&id, hosted, h, sizeof *hosted, str_ptr_cmp) : NULL;
        if (!at)
            continue;
        size_t pos = (size_t)(at - hosted);
        while (pos > 0 && strcmp(hosted[pos - 1], id) == 0)
            pos--; /* one flag per id even when two regions claim it */
        if (taken[pos])
            continue;
        taken[pos] = true;
        out[k++] = hosted[pos];
    }
    free(taken);
    free(hosted);
    return k;
}

/* ---------------------------------------------------------------------------------------------
 * Entry points
 */

static bool usable(const alloc_ctx_t *ctx, const shoal_alloc_region_t *regions, size_t n)
{
    return ctx && ctx->s && regions && n > 0 && n <= INT_MAX;
}

int alloc_preferred(const alloc_ctx_t *ctx, const char *shard, const shoal_alloc_region_t *regions,
                    size_t n)
{
    if (!usable(ctx, regions, n) || !shard)
        return -1;
    switch (ctx->s->kind) {
    case SHOAL_ALLOC_CONSISTENT_HASHING:
        return hashing_preferred(shard, regions, n);
    case SHOAL_ALLOC_EXTERNAL:
        return external_preferred(ctx, shard, regions, n);
    default:
        return -1;
    }
}

int alloc_allocate(const alloc_ctx_t *ctx, const char *shard, int requester,
                   const shoal_alloc_region_t *regions, size_t n)
{
    if (!usable(ctx, regions, n))
        return -1;
    if (requester < 0 || (size_t)requester >= n)
        requester = -1;
    int r = -1;
    switch (ctx->s->kind) {
    case SHOAL_ALLOC_CONSISTENT_HASHING:
        r = shard ? hashing_preferred(shard, regions, n) : -1;
        break;
    case SHOAL_ALLOC_EXTERNAL:
        r = external_preferred(ctx, shard, regions, n);
        if (r < 0 && requester >= 0 && eligible(&regions[requester]))
            r = requester;
        break;
    case SHOAL_ALLOC_CUSTOM:
        return custom_allocate(&ctx->s->custom, shard, requester, regions, n);
    case SHOAL_ALLOC_LEAST_SHARDS:
    default:
        break;
    }
    if (r >= 0)
        return r;
    /* no eligible region (all leaving) or no answer: the first in preference order; among
       equally suitable ones (leaving, version, shard count) the requester's own, which saves the
       first message a hop and keeps the choice from hanging on address order (a region that
       registers is given a shard by the rebalance it triggers, and then ties with the one that
       was emptiest before it) */
    r = alloc_least_shards(regions, n);
    if (r >= 0 && requester >= 0 && regions[requester].node) {
        shoal_alloc_region_t a = regions[requester], b = regions[r];
        a.node = b.node; /* equal but for the address */
        if (region_pref_cmp(&a, &b) == 0)
            return requester;
    }
    return r;
}

size_t alloc_rebalance(const alloc_ctx_t *ctx, const shoal_alloc_region_t *regions, size_t n,
                       const char *const *in_progress, size_t n_in_progress, const char **out,
                       size_t cap)
{
    if (!usable(ctx, regions, n) || !out || cap == 0)
        return 0;
    if (!in_progress)
        n_in_progress = 0;
    const shoal_alloc_settings_t *s = ctx->s;
    shard_set_t busy;
    shard_set_init(&busy, in_progress, n_in_progress);
    size_t k = 0;
    switch (s->kind) {
    case SHOAL_ALLOC_LEAST_SHARDS:
        if (s->rebalance_absolute_limit > 0)
            k = least_rebalance_new(s, regions, n, busy.n, out, cap);
        else
            k = least_rebalance_old(s, regions, n, &busy, out, cap);
        break;
    case SHOAL_ALLOC_CONSISTENT_HASHING:
        k = hashing_rebalance(s, regions, n, &busy, out, cap);
        break;
    case SHOAL_ALLOC_EXTERNAL:
        k = external_rebalance(ctx, regions, n, &busy, out, cap);
        break;
    case SHOAL_ALLOC_CUSTOM:
        k = custom_rebalance(&s->custom, regions, n, in_progress, n_in_progress, &busy, out, cap);
        break;
    default:
        break;
    }
    shard_set_free(&busy);
    return k;
}
