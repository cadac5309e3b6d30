/*  state.c — the cluster state value (custom ddata type "ClusterState", tag 100) and the pure
    decisions over it: convergence, leader, oldest, reachability. See state.h and membership.h.

    Every part of the value is kept sorted (members, rows and seen by node, roles by bytes,
    unreachable subjects by node), so merge is a linear merge-join and the encoding is canonical
    without a sort at encode time (except the node table, see proto/membership.proto).

    Why each merge rule keeps the whole thing a join (commutative, associative, idempotent):
    every field merges by a max (or min) in a total order — status by precedence, up-number by
    "lowest non-zero", descriptive fields by the field-wise order below, reachability rows by
    (version, then the lower subject list), clocks pointwise. A max in a total order is a join.
    Two parts need more than a max:
      - reachability rows are dots under the clock's causal context: a row present on one side
        only survives unless the other side's clock covers its version (then the other side saw
        it and dropped it). With the invariant "a row's version <= its observer's clock entry",
        which every write keeps and decode checks, this is the join of delta CRDTs' dot stores.
      - (clock, seen) is one lattice ordered lexicographically: clock first (partial order), then
        the seen set by inclusion among equal clocks. The least upper bound of two elements is
        the union for equal clocks, the newer element when one clock dominates, and (merged
        clock, {}) when they are concurrent — exactly merge_clock_and_seen.
    The cost of a merge is linear in the members (the seen set is at most one pointer per
    member): merging two 1,000-member states takes well under a millisecond.
*/
#include "state.h"

#include "membership.pb-c.h"

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation per digest */
#include <xxhash.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CSTATE_MAX_PUBKEY 64
/* Nodes the encoding's table may hold: members plus writers/observers/seen nodes that are not
   (or no longer) members; a safety net for decode, not a cluster-size limit. */
#define CSTATE_MAX_NODES (2 * CSTATE_MAX_MEMBERS)

#define CS(x) ((cstate_t *)(x))
#define CCS(x) ((const cstate_t *)(x))

/* ---------------------------------------------------------------------------------------------
 * Small helpers
 */
static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort(); /* allocation failure aborts, as in ddata */
    return q;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        abort();
    return p;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s);
    char *d = xrealloc(NULL, n + 1);
    memcpy(d, s, n + 1);
    return d;
}

static void grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 4;
    while (c < need)
        c *= 2;
    *arr = xrealloc(*arr, c * elem);
    *cap = c;
}
#define GROW(arr, cap, need) grow((void **)&(arr), &(cap), (need), sizeof *(arr))

static int node_cmp_p(const void *a, const void *b)
{
    return shoal_node_cmp(*(const shoal_node_t *const *)a, *(const shoal_node_t *const *)b);
}

static int str_cmp_p(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Index of the first element of a sorted node-keyed array whose node is >= `node`. The arrays
   hold structs whose first field is the node pointer (cmember_t, creach_row_t), or are arrays
   of node pointers (the seen set). */
static size_t lower_bound(const void *arr, size_t n, size_t elem, const shoal_node_t *node)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const shoal_node_t *k = *(const shoal_node_t *const *)((const char *)arr + mid * elem);
        if (shoal_node_cmp(k, node) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static ptrdiff_t find_keyed(const void *arr, size_t n, size_t elem, const shoal_node_t *node)
{
    size_t i = lower_bound(arr, n, elem, node);
    if (i < n && *(const shoal_node_t *const *)((const char *)arr + i * elem) == node)
        return (ptrdiff_t)i;
    return -1;
}

static bool nodes_contain(const shoal_node_t *const *arr, size_t n, const shoal_node_t *node)
{
    return find_keyed(arr, n, sizeof *arr, node) >= 0;
}

static bool status_valid(uint32_t st)
{
    return st >= SHOAL_MEMBER_JOINING && st <= SHOAL_MEMBER_REMOVED;
}

static const char *status_name(uint8_t st)
{
    static const char *const names[] = {"?",       "Joining", "WeaklyUp", "Up",
                                        "Leaving", "Exiting", "Down",     "Removed"};
    return st < sizeof names / sizeof names[0] ? names[st] : "?";
}

/* ---------------------------------------------------------------------------------------------
 * Member records
 */
static void member_free_desc(cmember_t *m)
{
    for (size_t i = 0; i < m->n_roles; i++)
        free(m->roles[i]);
    free(m->roles);
    free(m->app_version);
    free(m->hb_endpoint);
    free(m->pubkey);
    free(m->durable_id);
    m->roles = NULL;
    m->n_roles = 0;
    m->app_version = m->hb_endpoint = m->durable_id = NULL;
    m->pubkey = NULL;
    m->pubkey_len = 0;
    m->protocol_max = 0;
}

static void member_copy_desc(cmember_t *dst, const cmember_t *src)
{
    dst->n_roles = src->n_roles;
    dst->roles = xcalloc(src->n_roles, sizeof *dst->roles);
    for (size_t i = 0; i < src->n_roles; i++)
        dst->roles[i] = xstrdup(src->roles[i]);
    dst->app_version = xstrdup(src->app_version ? src->app_version : "");
    dst->hb_endpoint = xstrdup(src->hb_endpoint ? src->hb_endpoint : "");
    dst->durable_id = xstrdup(src->durable_id ? src->durable_id : "");
    dst->protocol_max = src->protocol_max > 1 ? src->protocol_max : 0;
    dst->pubkey_len = src->pubkey_len;
    dst->pubkey = NULL;
    if (src->pubkey_len) {
        dst->pubkey = xrealloc(NULL, src->pubkey_len);
        memcpy(dst->pubkey, src->pubkey, src->pubkey_len);
    }
}

static void member_copy(cmember_t *dst, const cmember_t *src)
{
    dst->node = src->node;
    dst->status = src->status;
    dst->up_number = src->up_number;
    member_copy_desc(dst, src);
}

/* The total order of descriptive fields that decides which record wins when two disagree
   (roles as a list, then app version, heartbeat endpoint, public key). Any total order makes
   the merge a join; this one is intrinsic to the record, so every replica picks the same. */
static int bytes_cmp(const void *a, size_t al, const void *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c;
    return al < bl ? -1 : al > bl ? 1 : 0;
}

static int member_desc_cmp(const cmember_t *a, const cmember_t *b)
{
    for (size_t i = 0; i < a->n_roles && i < b->n_roles; i++) {
        int c = strcmp(a->roles[i], b->roles[i]);
        if (c)
            return c;
    }
    if (a->n_roles != b->n_roles)
        return a->n_roles < b->n_roles ? -1 : 1;
    int c = strcmp(a->app_version, b->app_version);
    if (c)
        return c;
    c = strcmp(a->hb_endpoint, b->hb_endpoint);
    if (c)
        return c;
    c = strcmp(a->durable_id, b->durable_id);
    if (c)
        return c;
    c = bytes_cmp(a->pubkey, a->pubkey_len, b->pubkey, b->pubkey_len);
    if (c)
        return c;
    /* last, and reversed: the record that says the higher protocol wins (the lower compares
       first), so a record a 0.1.x node sent back without the field loses to the one with it */
    uint32_t pa = cmember_protocol(a), pb = cmember_protocol(b);
    return pa > pb ? -1 : pa < pb ? 1 : 0;
}

bool cmember_has_role(const cmember_t *m, const char *role)
{
    if (!m)
        return false;
    if (!role || !*role)
        return true;
    return bsearch(&role, m->roles, m->n_roles, sizeof *m->roles, str_cmp_p) != NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Reachability rows and seen entries
 */
static void row_free(creach_row_t *r)
{
    free(r->unreachable);
    r->unreachable = NULL;
    r->n = 0;
}

static void row_copy(creach_row_t *dst, const creach_row_t *src)
{
    dst->observer = src->observer;
    dst->version = src->version;
    dst->n = src->n;
    dst->unreachable = xcalloc(src->n, sizeof *dst->unreachable);
    if (src->n)
        memcpy(dst->unreachable, src->unreachable, src->n * sizeof *src->unreachable);
}

/* Order of the subject lists of two rows with the same version (node by node, then the shorter
   first): deterministic, so merge stays commutative even if two such rows ever meet. */
static int row_content_cmp(const creach_row_t *a, const creach_row_t *b)
{
    for (size_t i = 0; i < a->n && i < b->n; i++) {
        int c = shoal_node_cmp(a->unreachable[i], b->unreachable[i]);
        if (c)
            return c;
    }
    return a->n < b->n ? -1 : a->n > b->n ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Life cycle
 */
static shoal_crdt_t *cs_create(void)
{
    cstate_t *s = xcalloc(1, sizeof *s);
    s->base.type = &cstate_type;
    s->vclock = shoal_vv_new();
    return &s->base;
}

cstate_t *cstate_new(void)
{
    return CS(cs_create());
}

static void cs_destroy(shoal_crdt_t *self)
{
    cstate_t *s = CS(self);
    for (size_t i = 0; i < s->n_members; i++)
        member_free_desc(&s->members[i]);
    free(s->members);
    for (size_t i = 0; i < s->n_rows; i++)
        row_free(&s->rows[i]);
    free(s->rows);
    free(s->seen);
    shoal_crdt_destroy(&s->vclock);
    free(s);
}

void cstate_destroy(cstate_t **self_p)
{
    if (self_p && *self_p) {
        cs_destroy(&(*self_p)->base);
        *self_p = NULL;
    }
}

static shoal_crdt_t *cs_clone(const shoal_crdt_t *self)
{
    const cstate_t *s = CCS(self);
    cstate_t *c = CS(cs_create());
    GROW(c->members, c->members_cap, s->n_members);
    for (size_t i = 0; i < s->n_members; i++)
        member_copy(&c->members[i], &s->members[i]);
    c->n_members = s->n_members;
    GROW(c->rows, c->rows_cap, s->n_rows);
    for (size_t i = 0; i < s->n_rows; i++)
        row_copy(&c->rows[i], &s->rows[i]);
    c->n_rows = s->n_rows;
    GROW(c->seen, c->seen_cap, s->n_seen);
    if (s->n_seen)
        memcpy(c->seen, s->seen, s->n_seen * sizeof *s->seen);
    c->n_seen = s->n_seen;
    shoal_crdt_destroy(&c->vclock);
    c->vclock = shoal_crdt_clone(s->vclock);
    return &c->base;
}

cstate_t *cstate_clone(const cstate_t *s)
{
    return s ? CS(cs_clone(&s->base)) : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Merge
 */
static void merge_members(cstate_t *s, const cstate_t *o)
{
    size_t cap = 0, n = 0;
    cmember_t *out = NULL;
    GROW(out, cap, s->n_members + o->n_members);
    size_t i = 0, j = 0;
    while (i < s->n_members || j < o->n_members) {
        int c = i == s->n_members ? 1
                : j == o->n_members ? -1
                                    : shoal_node_cmp(s->members[i].node, o->members[j].node);
        if (c < 0) {
            out[n++] = s->members[i++]; /* moved, not copied */
        } else if (c > 0) {
            member_copy(&out[n++], &o->members[j++]);
        } else {
            cmember_t m = s->members[i++];
            const cmember_t *b = &o->members[j++];
            if (b->status > m.status)
                m.status = b->status;
            if (b->up_number && (!m.up_number || b->up_number < m.up_number))
                m.up_number = b->up_number;
            if (member_desc_cmp(b, &m) < 0) {
                member_free_desc(&m);
                member_copy_desc(&m, b);
            }
            out[n++] = m;
        }
    }
    free(s->members);
    s->members = out;
    s->n_members = n;
    s->members_cap = cap;
}

/* Whether a row held by one side only survives the merge: unless the other side's clock covers
   its version (that side saw this row and its observer dropped it since). */
static bool row_survives(const creach_row_t *r, const shoal_crdt_t *other_clock)
{
    return shoal_vv_get(other_clock, r->observer) < r->version;
}

/* Before the clocks are merged: the rule needs each side's own clock. */
static void merge_rows(cstate_t *s, const cstate_t *o)
{
    size_t cap = 0, n = 0;
    creach_row_t *out = NULL;
    GROW(out, cap, s->n_rows + o->n_rows);
    size_t i = 0, j = 0;
    while (i < s->n_rows || j < o->n_rows) {
        int c = i == s->n_rows   ? 1
                : j == o->n_rows ? -1
                                 : shoal_node_cmp(s->rows[i].observer, o->rows[j].observer);
        if (c < 0) {
            creach_row_t r = s->rows[i++];
            if (row_survives(&r, o->vclock))
                out[n++] = r;
            else
                row_free(&r);
        } else if (c > 0) {
            if (row_survives(&o->rows[j], s->vclock))
                row_copy(&out[n++], &o->rows[j]);
            j++;
        } else {
            creach_row_t r = s->rows[i++];
            const creach_row_t *b = &o->rows[j++];
            if (b->version > r.version || (b->version == r.version && row_content_cmp(b, &r) < 0)) {
                row_free(&r);
                row_copy(&r, b);
            }
            out[n++] = r;
        }
    }
    free(s->rows);
    s->rows = out;
    s->n_rows = n;
    s->rows_cap = cap;
}

/* The union of two sorted node sets into s's. */
static void seen_union(cstate_t *s, const shoal_node_t *const *b, size_t nb)
{
    size_t cap = 0, n = 0;
    const shoal_node_t **out = NULL;
    GROW(out, cap, s->n_seen + nb);
    size_t i = 0, j = 0;
    while (i < s->n_seen || j < nb) {
        int c = i == s->n_seen ? 1 : j == nb ? -1 : shoal_node_cmp(s->seen[i], b[j]);
        if (c <= 0) {
            out[n++] = s->seen[i++];
            if (c == 0)
                j++;
        } else {
            out[n++] = b[j++];
        }
    }
    free(s->seen);
    s->seen = out;
    s->n_seen = n;
    s->seen_cap = cap;
}

static void seen_assign(cstate_t *s, const shoal_node_t *const *b, size_t nb)
{
    GROW(s->seen, s->seen_cap, nb);
    if (nb)
        memcpy(s->seen, b, nb * sizeof *b);
    s->n_seen = nb;
}

/* (clock, seen) as one lattice: see the top of this file. */
static int merge_clock_and_seen(cstate_t *s, const cstate_t *o)
{
    switch (shoal_vv_compare(s->vclock, o->vclock)) {
    case SHOAL_VV_SAME:
        seen_union(s, (const shoal_node_t *const *)o->seen, o->n_seen);
        return 0;
    case SHOAL_VV_AFTER:
        return 0; /* ours is newer: theirs adds nothing */
    case SHOAL_VV_BEFORE:
        seen_assign(s, (const shoal_node_t *const *)o->seen, o->n_seen);
        break;
    default: /* concurrent: the merged clock is one nobody has seen yet */
        s->n_seen = 0;
        break;
    }
    return shoal_crdt_merge(s->vclock, o->vclock);
}

static int cs_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    cstate_t *s = CS(self);
    const cstate_t *o = CCS(other);
    merge_members(s, o);
    merge_rows(s, o);
    return merge_clock_and_seen(s, o);
}

static bool cs_equal(const shoal_crdt_t *a_, const shoal_crdt_t *b_)
{
    const cstate_t *a = CCS(a_), *b = CCS(b_);
    if (a->n_members != b->n_members || a->n_rows != b->n_rows || a->n_seen != b->n_seen)
        return false;
    for (size_t i = 0; i < a->n_members; i++) {
        const cmember_t *x = &a->members[i], *y = &b->members[i];
        if (x->node != y->node || x->status != y->status || x->up_number != y->up_number ||
            member_desc_cmp(x, y) != 0)
            return false;
    }
    for (size_t i = 0; i < a->n_rows; i++) {
        const creach_row_t *x = &a->rows[i], *y = &b->rows[i];
        if (x->observer != y->observer || x->version != y->version || row_content_cmp(x, y))
            return false;
    }
    if (a->n_seen && memcmp(a->seen, b->seen, a->n_seen * sizeof *a->seen) != 0)
        return false;
    return shoal_crdt_equal(a->vclock, b->vclock);
}

/* ---------------------------------------------------------------------------------------------
 * Local changes
 */
static bool is_state(const cstate_t *s)
{
    return s && s->base.type == &cstate_type;
}

/* Every local change raises the writer's clock entry; checked before changing anything so a
   change is never applied without its clock raise. */
static int clock_can_raise(const cstate_t *s, const shoal_node_t *writer)
{
    return shoal_vv_get(s->vclock, writer) == UINT64_MAX ? SHOAL_EOVERFLOW : 0;
}

/* A local change: a new clock that nobody has seen yet (the writer marks itself afterwards, as
   Akka's onlySeen(self)). */
static int clock_raise(cstate_t *s, const shoal_node_t *writer)
{
    s->n_seen = 0;
    return shoal_vv_increment(s->vclock, writer);
}

const cmember_t *cstate_member(const cstate_t *s, const shoal_node_t *node)
{
    if (!is_state(s) || !node)
        return NULL;
    ptrdiff_t i = find_keyed(s->members, s->n_members, sizeof *s->members, node);
    return i >= 0 ? &s->members[i] : NULL;
}

static cmember_t *member_mut(cstate_t *s, const shoal_node_t *node)
{
    return (cmember_t *)cstate_member(s, node);
}

int cstate_set_protocol_max(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                            uint32_t protocol_max)
{
    if (!is_state(s) || !writer || !node)
        return SHOAL_EINVAL;
    cmember_t *m = member_mut(s, node);
    if (!m)
        return SHOAL_ENOTMEMBER;
    if (protocol_max <= cmember_protocol(m))
        return 0; /* the merge keeps the higher: a lower one would never stick */
    int rc = clock_can_raise(s, writer);
    if (rc < 0)
        return rc;
    m->protocol_max = protocol_max;
    return clock_raise(s, writer);
}

uint32_t cstate_protocol(const cstate_t *s, uint32_t self_max, uint32_t pin)
{
    uint32_t v = self_max > 1 ? self_max : 1;
    if (pin && pin < v)
        v = pin;
    for (size_t i = 0; s && i < s->n_members; i++)
        if (s->members[i].status != SHOAL_MEMBER_REMOVED && cmember_protocol(&s->members[i]) < v)
            v = cmember_protocol(&s->members[i]);
    return v;
}

int cstate_add_member(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                      const char *const *roles, size_t n_roles, const char *app_version,
                      const char *hb_endpoint, const uint8_t *pubkey, size_t pubkey_len,
                      const char *durable_id)
{
    if (!is_state(s) || !writer || !node || (n_roles && !roles) || (pubkey_len && !pubkey))
        return SHOAL_EINVAL;
    if (n_roles > CSTATE_MAX_ROLES || pubkey_len > CSTATE_MAX_PUBKEY)
        return SHOAL_ETOOBIG;
    for (size_t i = 0; i < n_roles; i++) {
        if (!roles[i] || !*roles[i])
            return SHOAL_EINVAL;
        if (strlen(roles[i]) > CSTATE_MAX_STRING)
            return SHOAL_ETOOBIG;
    }
    if (!app_version)
        app_version = "";
    if (!hb_endpoint)
        hb_endpoint = "";
    if (!durable_id)
        durable_id = "";
    if (strlen(app_version) > CSTATE_MAX_STRING || strlen(hb_endpoint) > CSTATE_MAX_STRING ||
        strlen(durable_id) > CSTATE_MAX_STRING)
        return SHOAL_ETOOBIG;
    size_t pos = lower_bound(s->members, s->n_members, sizeof *s->members, node);
    if (pos < s->n_members && s->members[pos].node == node)
        return 0; /* already a member (or a tombstone): nothing to add */
    if (s->n_members >= CSTATE_MAX_MEMBERS)
        return SHOAL_ETOOBIG;
    int rc = clock_can_raise(s, writer);
    if (rc < 0)
        return rc;

    cmember_t m = {.node = node, .status = SHOAL_MEMBER_JOINING};
    m.roles = xcalloc(n_roles, sizeof *m.roles);
    for (size_t i = 0; i < n_roles; i++)
        m.roles[i] = (char *)roles[i];
    qsort(m.roles, n_roles, sizeof *m.roles, str_cmp_p);
    for (size_t i = 0; i < n_roles; i++) /* deduplicated, then owned copies */
        if (m.n_roles == 0 || strcmp(m.roles[m.n_roles - 1], m.roles[i]) != 0)
            m.roles[m.n_roles++] = m.roles[i];
    for (size_t i = 0; i < m.n_roles; i++)
        m.roles[i] = xstrdup(m.roles[i]);
    m.app_version = xstrdup(app_version);
    m.hb_endpoint = xstrdup(hb_endpoint);
    m.durable_id = xstrdup(durable_id);
    if (pubkey_len) {
        m.pubkey = xrealloc(NULL, pubkey_len);
        memcpy(m.pubkey, pubkey, pubkey_len);
        m.pubkey_len = pubkey_len;
    }
    GROW(s->members, s->members_cap, s->n_members + 1);
    memmove(&s->members[pos + 1], &s->members[pos], (s->n_members - pos) * sizeof *s->members);
    s->members[pos] = m;
    s->n_members++;
    return clock_raise(s, writer);
}

int cstate_set_status(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                      shoal_member_status_t status)
{
    if (!is_state(s) || !writer || !node || !status_valid((uint32_t)status))
        return SHOAL_EINVAL;
    cmember_t *m = member_mut(s, node);
    if (!m)
        return SHOAL_ENOTMEMBER;
    if ((uint8_t)status < m->status)
        return SHOAL_ESTATE; /* merge takes the max: a backwards move would be undone anyway */
    if ((uint8_t)status == m->status)
        return 0;
    int rc = clock_can_raise(s, writer);
    if (rc < 0)
        return rc;
    m->status = (uint8_t)status;
    return clock_raise(s, writer);
}

int cstate_set_up_number(cstate_t *s, const shoal_node_t *writer, const shoal_node_t *node,
                         uint64_t up_number)
{
    if (!is_state(s) || !writer || !node || up_number == 0)
        return SHOAL_EINVAL;
    cmember_t *m = member_mut(s, node);
    if (!m)
        return SHOAL_ENOTMEMBER;
    /* Only a member that is (or was) Up has an age; decode relies on it (up_number != 0 implies
       status >= Up, which merge preserves since status only grows). */
    if (m->status < SHOAL_MEMBER_UP)
        return SHOAL_ESTATE;
    if (m->up_number == up_number)
        return 0;
    if (m->up_number)
        return SHOAL_ESTATE;
    int rc = clock_can_raise(s, writer);
    if (rc < 0)
        return rc;
    m->up_number = up_number;
    return clock_raise(s, writer);
}

/* ---------------------------------------------------------------------------------------------
 * Reachability
 */
int cstate_set_unreachable(cstate_t *s, const shoal_node_t *observer,
                           const shoal_node_t *const *subjects, size_t n)
{
    if (!is_state(s) || !observer || (n && !subjects))
        return SHOAL_EINVAL;
    if (n > CSTATE_MAX_MEMBERS)
        return SHOAL_ETOOBIG;
    for (size_t i = 0; i < n; i++)
        if (!subjects[i])
            return SHOAL_EINVAL;
    const shoal_node_t **set = xcalloc(n, sizeof *set);
    if (n)
        memcpy(set, subjects, n * sizeof *set);
    qsort(set, n, sizeof *set, node_cmp_p);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || set[k - 1] != set[i])
            set[k++] = set[i];

    size_t pos = lower_bound(s->rows, s->n_rows, sizeof *s->rows, observer);
    creach_row_t *row = pos < s->n_rows && s->rows[pos].observer == observer ? &s->rows[pos] : NULL;
    bool same = row ? row->n == k && (k == 0 || !memcmp(row->unreachable, set, k * sizeof *set))
                    : k == 0;
    int rc = same ? 0 : clock_can_raise(s, observer);
    if (same || rc < 0) {
        free(set);
        return rc;
    }
    rc = clock_raise(s, observer);
    if (rc < 0) {
        free(set);
        return rc;
    }
    if (k == 0) {
        /* reaches everyone again: the row goes; the raised clock entry tells merges that it went */
        row_free(row);
        memmove(&s->rows[pos], &s->rows[pos + 1], (s->n_rows - pos - 1) * sizeof *s->rows);
        s->n_rows--;
        free(set);
        return 0;
    }
    if (!row) {
        GROW(s->rows, s->rows_cap, s->n_rows + 1);
        memmove(&s->rows[pos + 1], &s->rows[pos], (s->n_rows - pos) * sizeof *s->rows);
        s->n_rows++;
        row = &s->rows[pos];
        *row = (creach_row_t){.observer = observer};
    }
    free(row->unreachable);
    row->unreachable = set;
    row->n = k;
    row->version = shoal_vv_get(s->vclock, observer); /* the write's dot */
    return 0;
}

const creach_row_t *cstate_row(const cstate_t *s, const shoal_node_t *observer)
{
    if (!is_state(s) || !observer)
        return NULL;
    ptrdiff_t i = find_keyed(s->rows, s->n_rows, sizeof *s->rows, observer);
    return i >= 0 ? &s->rows[i] : NULL;
}

/* Whose word counts: an observer that is a member and still watching. A Down, Removed or
   Exiting observer's row is stale (it no longer runs failure detection for the cluster). */
static bool observer_counts(const cstate_t *s, const shoal_node_t *observer)
{
    const cmember_t *m = cstate_member(s, observer);
    return m && m->status != SHOAL_MEMBER_DOWN && m->status != SHOAL_MEMBER_REMOVED &&
           m->status != SHOAL_MEMBER_EXITING;
}

bool cstate_is_unreachable(const cstate_t *s, const shoal_node_t *node)
{
    if (!is_state(s) || !node)
        return false;
    for (size_t i = 0; i < s->n_rows; i++)
        if (nodes_contain(s->rows[i].unreachable, s->rows[i].n, node) &&
            observer_counts(s, s->rows[i].observer))
            return true;
    return false;
}

size_t cstate_observers_of(const cstate_t *s, const shoal_node_t *node, const shoal_node_t **out,
                           size_t cap)
{
    if (!is_state(s) || !node || (cap && !out))
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < s->n_rows && n < cap; i++)
        if (nodes_contain(s->rows[i].unreachable, s->rows[i].n, node) &&
            observer_counts(s, s->rows[i].observer))
            out[n++] = s->rows[i].observer;
    return n;
}

/* The sorted, unique set of every node some counting observer reports unreachable: computed
   once so that decisions over all members stay O(N log N). Caller frees. */
static const shoal_node_t **unreachable_set(const cstate_t *s, size_t *n_out)
{
    size_t total = 0;
    for (size_t i = 0; i < s->n_rows; i++)
        total += s->rows[i].n;
    const shoal_node_t **set = xcalloc(total, sizeof *set);
    size_t n = 0;
    for (size_t i = 0; i < s->n_rows; i++) {
        if (!s->rows[i].n || !observer_counts(s, s->rows[i].observer))
            continue;
        memcpy(&set[n], s->rows[i].unreachable, s->rows[i].n * sizeof *set);
        n += s->rows[i].n;
    }
    qsort(set, n, sizeof *set, node_cmp_p);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || set[k - 1] != set[i])
            set[k++] = set[i];
    *n_out = k;
    return set;
}

/* ---------------------------------------------------------------------------------------------
 * Seen
 */
void cstate_mark_seen(cstate_t *s, const shoal_node_t *node)
{
    if (!is_state(s) || !node || !cstate_member(s, node))
        return;
    size_t pos = lower_bound(s->seen, s->n_seen, sizeof *s->seen, node);
    if (pos < s->n_seen && s->seen[pos] == node)
        return;
    GROW(s->seen, s->seen_cap, s->n_seen + 1);
    memmove(&s->seen[pos + 1], &s->seen[pos], (s->n_seen - pos) * sizeof *s->seen);
    s->seen[pos] = node;
    s->n_seen++;
}

bool cstate_seen_by(const cstate_t *s, const shoal_node_t *node)
{
    if (!is_state(s) || !node)
        return false;
    if (shoal_vv_size(s->vclock) == 0)
        return true; /* everyone has seen the empty state */
    return find_keyed(s->seen, s->n_seen, sizeof *s->seen, node) >= 0;
}

void cstate_clock_digest(const cstate_t *s, uint8_t out[16])
{
    XXH3_state_t st;
    XXH3_state_t *h = &st;
    XXH3_INITSTATE(h);
    XXH3_128bits_reset(h);
    for (size_t i = 0; is_state(s) && i < shoal_vv_size(s->vclock); i++) {
        const shoal_node_t *node = NULL;
        uint64_t c = 0;
        shoal_vv_entry(s->vclock, i, &node, &c);
        const char *id = shoal_node_id(node);
        XXH3_128bits_update(h, id, strlen(id) + 1);
        uint8_t le[8];
        for (int b = 0; b < 8; b++)
            le[b] = (uint8_t)(c >> (8 * b));
        XXH3_128bits_update(h, le, sizeof le);
    }
    XXH128_canonical_t d;
    XXH128_canonicalFromHash(&d, XXH3_128bits_digest(h));
    memcpy(out, d.digest, 16);
}

size_t cstate_seen_bits(const cstate_t *s, uint8_t *out, size_t cap)
{
    size_t len = is_state(s) ? (s->n_members + 7) / 8 : 0;
    if (!out || cap < len)
        return len;
    memset(out, 0, len);
    /* both lists are in node order: one pass */
    for (size_t i = 0, k = 0; i < s->n_members && k < s->n_seen; i++) {
        if (s->members[i].node != s->seen[k])
            continue;
        out[i / 8] |= (uint8_t)(1u << (i % 8));
        k++;
    }
    return len;
}

int cstate_merge_seen_bits(cstate_t *s, const uint8_t *bits, size_t len, size_t *added,
                           size_t *missing)
{
    if (added)
        *added = 0;
    if (missing)
        *missing = 0;
    if (!is_state(s) || (len && !bits))
        return SHOAL_EINVAL;
    if (len != (s->n_members + 7) / 8)
        return SHOAL_EDECODE;
    if (s->n_members % 8 && (bits[len - 1] >> (s->n_members % 8)))
        return SHOAL_EDECODE; /* a bit past the last member */
    const shoal_node_t **theirs = xcalloc(s->n_members, sizeof *theirs);
    size_t n = 0, lack = 0;
    for (size_t i = 0, k = 0; i < s->n_members; i++) {
        bool have = k < s->n_seen && s->seen[k] == s->members[i].node;
        if (have)
            k++;
        if (bits[i / 8] & (1u << (i % 8)))
            theirs[n++] = s->members[i].node;
        else if (have)
            lack++;
    }
    size_t before = s->n_seen;
    seen_union(s, theirs, n);
    free(theirs);
    if (added)
        *added = s->n_seen - before;
    if (missing)
        *missing = lack;
    return 0;
}

size_t cstate_seen_count(const cstate_t *s)
{
    if (!is_state(s))
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < s->n_members; i++)
        if (s->members[i].status != SHOAL_MEMBER_REMOVED && cstate_seen_by(s, s->members[i].node))
            n++;
    return n;
}

/* ---------------------------------------------------------------------------------------------
 * Decisions
 */
bool cstate_converged(const cstate_t *s)
{
    if (!is_state(s) || s->n_members == 0)
        return false;
    size_t nu;
    const shoal_node_t **unreach = unreachable_set(s, &nu);
    bool ok = true;
    for (size_t i = 0; i < s->n_members && ok; i++) {
        const cmember_t *m = &s->members[i];
        bool must_see = m->status == SHOAL_MEMBER_UP || m->status == SHOAL_MEMBER_LEAVING;
        /* An unreachable member blocks unless it is on its way out (Down, Exiting) or gone:
           the leader must not act on a state such a member may not know. */
        if (!must_see && m->status != SHOAL_MEMBER_DOWN && m->status != SHOAL_MEMBER_EXITING &&
            m->status != SHOAL_MEMBER_REMOVED && nodes_contain(unreach, nu, m->node))
            must_see = true;
        if (must_see && !cstate_seen_by(s, m->node))
            ok = false;
    }
    free(unreach);
    return ok;
}

const shoal_node_t *cstate_leader(const cstate_t *s, const char *role, const shoal_node_t *self)
{
    if (!is_state(s))
        return NULL;
    size_t nu;
    const shoal_node_t **unreach = unreachable_set(s, &nu);
    const shoal_node_t *up = NULL, *joining = NULL, *exiting = NULL;
    for (size_t i = 0; i < s->n_members && !up; i++) {
        const cmember_t *m = &s->members[i];
        if (m->status == SHOAL_MEMBER_DOWN || m->status == SHOAL_MEMBER_REMOVED ||
            !cmember_has_role(m, role))
            continue;
        if (m->node != self && nodes_contain(unreach, nu, m->node))
            continue;
        switch (m->status) {
        case SHOAL_MEMBER_UP:
        case SHOAL_MEMBER_LEAVING:
            up = m->node; /* members are in address order: the first one wins */
            break;
        case SHOAL_MEMBER_JOINING:
        case SHOAL_MEMBER_WEAKLY_UP:
            if (!joining)
                joining = m->node;
            break;
        default: /* Exiting */
            if (!exiting)
                exiting = m->node;
            break;
        }
    }
    free(unreach);
    return up ? up : joining ? joining : exiting;
}

const shoal_node_t *cstate_oldest(const cstate_t *s, const char *role)
{
    if (!is_state(s))
        return NULL;
    const cmember_t *best = NULL;
    uint64_t best_age = 0;
    for (size_t i = 0; i < s->n_members; i++) {
        const cmember_t *m = &s->members[i];
        if (m->status != SHOAL_MEMBER_UP || !cmember_has_role(m, role))
            continue;
        /* An Up member without its number yet is the youngest; address order breaks ties
           (members are in address order, so the first one met wins a tie). */
        uint64_t age = m->up_number ? m->up_number : UINT64_MAX;
        if (!best || age < best_age) {
            best = m;
            best_age = age;
        }
    }
    return best ? best->node : NULL;
}

uint64_t cstate_version_sum(const cstate_t *s)
{
    if (!is_state(s))
        return 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < shoal_vv_size(s->vclock); i++) {
        uint64_t c = 0;
        shoal_vv_entry(s->vclock, i, NULL, &c);
        sum = sum > UINT64_MAX - c ? UINT64_MAX : sum + c;
    }
    return sum;
}

/* ---------------------------------------------------------------------------------------------
 * Encoding
 */
typedef struct {
    const shoal_node_t **v;
    size_t n, cap;
} node_table_t;

static void table_add(node_table_t *t, const shoal_node_t *node)
{
    GROW(t->v, t->cap, t->n + 1);
    t->v[t->n++] = node;
}

static void table_add_vv(node_table_t *t, const shoal_crdt_t *vv)
{
    for (size_t i = 0; i < shoal_vv_size(vv); i++) {
        const shoal_node_t *node = NULL;
        shoal_vv_entry(vv, i, &node, NULL);
        table_add(t, node);
    }
}

static uint32_t table_index(const node_table_t *t, const shoal_node_t *node)
{
    return (uint32_t)lower_bound(t->v, t->n, sizeof *t->v, node);
}

/* Fills a Clock (its arrays allocated; NULL when the vector is empty, as canonical form wants). */
static Shoal__Membership__Clock *clock_to_pb(const node_table_t *t, const shoal_crdt_t *vv,
                                             Shoal__Membership__Clock *msg)
{
    size_t n = shoal_vv_size(vv);
    if (!n)
        return NULL;
    shoal__membership__clock__init(msg);
    msg->n_nodes = msg->n_counters = n;
    msg->nodes = xcalloc(n, sizeof *msg->nodes);
    msg->counters = xcalloc(n, sizeof *msg->counters);
    for (size_t i = 0; i < n; i++) {
        const shoal_node_t *node = NULL;
        shoal_vv_entry(vv, i, &node, &msg->counters[i]);
        msg->nodes[i] = table_index(t, node);
    }
    return msg;
}

static void clock_pb_free(Shoal__Membership__Clock *msg)
{
    if (msg) {
        free(msg->nodes);
        free(msg->counters);
    }
}

static int cs_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const cstate_t *s = CCS(self);
    node_table_t t = {0};
    for (size_t i = 0; i < s->n_members; i++)
        table_add(&t, s->members[i].node);
    for (size_t i = 0; i < s->n_rows; i++) {
        table_add(&t, s->rows[i].observer);
        for (size_t k = 0; k < s->rows[i].n; k++)
            table_add(&t, s->rows[i].unreachable[k]);
    }
    table_add_vv(&t, s->vclock);
    /* the seen set holds members only: already in the table */
    if (t.n)
        qsort(t.v, t.n, sizeof *t.v, node_cmp_p);
    size_t k = 0;
    for (size_t i = 0; i < t.n; i++)
        if (k == 0 || t.v[k - 1] != t.v[i])
            t.v[k++] = t.v[i];
    t.n = k;

    Shoal__Membership__ClusterState msg = SHOAL__MEMBERSHIP__CLUSTER_STATE__INIT;
    msg.n_nodes = t.n;
    msg.nodes = xcalloc(t.n, sizeof *msg.nodes);
    for (size_t i = 0; i < t.n; i++)
        msg.nodes[i] = (char *)shoal_node_id(t.v[i]);

    Shoal__Membership__Member *mem = xcalloc(s->n_members, sizeof *mem);
    msg.n_members = s->n_members;
    msg.members = xcalloc(s->n_members, sizeof *msg.members);
    for (size_t i = 0; i < s->n_members; i++) {
        const cmember_t *m = &s->members[i];
        shoal__membership__member__init(&mem[i]);
        mem[i].node = table_index(&t, m->node);
        mem[i].status = m->status;
        mem[i].up_number = m->up_number;
        mem[i].n_roles = m->n_roles;
        mem[i].roles = m->roles;
        mem[i].app_version = m->app_version;
        mem[i].heartbeat_endpoint = m->hb_endpoint;
        mem[i].durable_id = m->durable_id;
        mem[i].public_key.data = m->pubkey;
        mem[i].public_key.len = m->pubkey_len;
        mem[i].protocol_max = m->protocol_max > 1 ? m->protocol_max : 0; /* 1 is not written */
        msg.members[i] = &mem[i];
    }

    Shoal__Membership__Reachability *rows = xcalloc(s->n_rows, sizeof *rows);
    msg.n_reachability = s->n_rows;
    msg.reachability = xcalloc(s->n_rows, sizeof *msg.reachability);
    for (size_t i = 0; i < s->n_rows; i++) {
        const creach_row_t *r = &s->rows[i];
        shoal__membership__reachability__init(&rows[i]);
        rows[i].observer = table_index(&t, r->observer);
        rows[i].version = r->version;
        rows[i].n_unreachable = r->n;
        rows[i].unreachable = xcalloc(r->n, sizeof *rows[i].unreachable);
        for (size_t j = 0; j < r->n; j++)
            rows[i].unreachable[j] = table_index(&t, r->unreachable[j]);
        msg.reachability[i] = &rows[i];
    }

    Shoal__Membership__Clock clock;
    msg.clock = clock_to_pb(&t, s->vclock, &clock);

    msg.n_seen_by = s->n_seen;
    msg.seen_by = xcalloc(s->n_seen, sizeof *msg.seen_by);
    for (size_t i = 0; i < s->n_seen; i++)
        msg.seen_by[i] = table_index(&t, s->seen[i]);

    size_t len = shoal__membership__cluster_state__get_packed_size(&msg);
    shoal_buf_reserve(out, len);
    out->len += shoal__membership__cluster_state__pack(&msg, out->data + out->len);

    free(msg.seen_by);
    clock_pb_free(msg.clock);
    for (size_t i = 0; i < s->n_rows; i++)
        free(rows[i].unreachable);
    free(rows);
    free(msg.reachability);
    free(mem);
    free(msg.members);
    free(msg.nodes);
    free(t.v);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Decoding: everything validated, nothing trusted
 */
typedef struct {
    const shoal_node_t **nodes;
    size_t n;
    bool *used;
} decode_table_t;

static int table_ref(decode_table_t *t, uint32_t idx, const shoal_node_t **out)
{
    if (idx >= t->n)
        return SHOAL_EDECODE;
    t->used[idx] = true;
    *out = t->nodes[idx];
    return 0;
}

static int clock_from_pb(decode_table_t *t, const Shoal__Membership__Clock *msg,
                         shoal_crdt_t **out)
{
    *out = shoal_vv_new();
    if (!msg)
        return 0;
    if (msg->n_nodes != msg->n_counters)
        return SHOAL_EDECODE;
    if (msg->n_nodes > CSTATE_MAX_NODES)
        return SHOAL_ETOOBIG;
    for (size_t i = 0; i < msg->n_nodes; i++) {
        const shoal_node_t *node;
        if (i > 0 && msg->nodes[i] <= msg->nodes[i - 1])
            return SHOAL_EDECODE; /* table order = node order: strictly ascending indexes */
        if (table_ref(t, msg->nodes[i], &node) < 0 || msg->counters[i] == 0)
            return SHOAL_EDECODE;
        shoal_vv_witness(*out, node, msg->counters[i]);
    }
    return 0;
}

static int check_string(const char *str, size_t max, bool nonempty)
{
    size_t n = str ? strlen(str) : 0;
    if (nonempty && n == 0)
        return SHOAL_EDECODE;
    return n > max ? SHOAL_ETOOBIG : 0;
}

static int member_from_pb(decode_table_t *t, const Shoal__Membership__Member *pm, cmember_t *m)
{
    int rc = table_ref(t, pm->node, &m->node);
    if (rc < 0)
        return rc;
    if (!status_valid(pm->status))
        return SHOAL_EDECODE;
    m->status = (uint8_t)pm->status;
    m->up_number = pm->up_number;
    if (m->up_number && m->status < SHOAL_MEMBER_UP)
        return SHOAL_EDECODE; /* an age is only given when a member goes Up */
    if (pm->n_roles > CSTATE_MAX_ROLES)
        return SHOAL_ETOOBIG;
    for (size_t i = 0; i < pm->n_roles; i++) {
        if ((rc = check_string(pm->roles[i], CSTATE_MAX_STRING, true)) < 0)
            return rc;
        if (i > 0 && strcmp(pm->roles[i - 1], pm->roles[i]) >= 0)
            return SHOAL_EDECODE;
    }
    if ((rc = check_string(pm->app_version, CSTATE_MAX_STRING, false)) < 0 ||
        (rc = check_string(pm->heartbeat_endpoint, CSTATE_MAX_STRING, false)) < 0 ||
        (rc = check_string(pm->durable_id, CSTATE_MAX_STRING, false)) < 0)
        return rc;
    if (pm->public_key.len > CSTATE_MAX_PUBKEY || (pm->public_key.len && !pm->public_key.data))
        return pm->public_key.len > CSTATE_MAX_PUBKEY ? SHOAL_ETOOBIG : SHOAL_EDECODE;
    cmember_t src = {
        .roles = pm->roles,
        .n_roles = pm->n_roles,
        .app_version = pm->app_version,
        .hb_endpoint = pm->heartbeat_endpoint,
        .durable_id = pm->durable_id,
        .pubkey = pm->public_key.data,
        .pubkey_len = pm->public_key.len,
        .protocol_max = pm->protocol_max,
    };
    member_copy_desc(m, &src);
    return 0;
}

static int row_from_pb(decode_table_t *t, const Shoal__Membership__Reachability *pr,
                       const shoal_crdt_t *clock, creach_row_t *r)
{
    int rc = table_ref(t, pr->observer, &r->observer);
    if (rc < 0)
        return rc;
    if (pr->version == 0)
        return SHOAL_EDECODE; /* a row exists only once its observer wrote it */
    if (pr->version > shoal_vv_get(clock, r->observer))
        return SHOAL_EDECODE; /* its write raised the observer's clock entry to its version */
    r->version = pr->version;
    if (pr->n_unreachable > CSTATE_MAX_MEMBERS)
        return SHOAL_ETOOBIG;
    r->unreachable = xcalloc(pr->n_unreachable, sizeof *r->unreachable);
    for (size_t i = 0; i < pr->n_unreachable; i++) {
        if (i > 0 && pr->unreachable[i] <= pr->unreachable[i - 1])
            return SHOAL_EDECODE;
        if ((rc = table_ref(t, pr->unreachable[i], &r->unreachable[i])) < 0)
            return rc;
        r->n = i + 1;
    }
    return 0;
}

static int cs_decode_msg(const Shoal__Membership__ClusterState *msg, cstate_t *s)
{
    if (msg->n_nodes > CSTATE_MAX_NODES || msg->n_members > CSTATE_MAX_MEMBERS ||
        msg->n_reachability > CSTATE_MAX_NODES || msg->n_seen > CSTATE_MAX_NODES)
        return SHOAL_ETOOBIG;
    decode_table_t t = {.n = msg->n_nodes};
    t.nodes = xcalloc(t.n, sizeof *t.nodes);
    t.used = xcalloc(t.n, sizeof *t.used);
    int rc = 0;
    for (size_t i = 0; i < t.n && rc == 0; i++) {
        const char *id = msg->nodes[i] ? msg->nodes[i] : "";
        size_t len = strlen(id);
        t.nodes[i] = len <= SHOAL_NODE_ID_MAX ? shoal_node_intern_n(id, len) : NULL;
        if (!t.nodes[i])
            rc = SHOAL_ENODE;
        else if (i > 0 && shoal_node_cmp(t.nodes[i - 1], t.nodes[i]) >= 0)
            rc = SHOAL_EDECODE;
    }

    GROW(s->members, s->members_cap, msg->n_members);
    for (size_t i = 0; i < msg->n_members && rc == 0; i++) {
        if (i > 0 && msg->members[i]->node <= msg->members[i - 1]->node)
            rc = SHOAL_EDECODE;
        else {
            s->members[i] = (cmember_t){0};
            s->n_members = i + 1; /* counted first: freed with the state on error */
            rc = member_from_pb(&t, msg->members[i], &s->members[i]);
        }
    }

    if (rc == 0) {
        shoal_crdt_destroy(&s->vclock);
        rc = clock_from_pb(&t, msg->clock, &s->vclock);
    }

    GROW(s->rows, s->rows_cap, msg->n_reachability);
    for (size_t i = 0; i < msg->n_reachability && rc == 0; i++) {
        if (i > 0 && msg->reachability[i]->observer <= msg->reachability[i - 1]->observer)
            rc = SHOAL_EDECODE;
        else {
            s->rows[s->n_rows] = (creach_row_t){0};
            s->n_rows++;
            rc = row_from_pb(&t, msg->reachability[i], s->vclock, &s->rows[s->n_rows - 1]);
            if (rc == 0 && s->rows[s->n_rows - 1].n == 0)
                row_free(&s->rows[--s->n_rows]); /* format 1 kept empty rows: not any more */
        }
    }

    if (msg->n_seen && msg->n_seen_by)
        rc = rc ? rc : SHOAL_EDECODE; /* one format or the other */
    if (msg->n_seen > CSTATE_MAX_NODES || msg->n_seen_by > CSTATE_MAX_MEMBERS)
        rc = rc ? rc : SHOAL_ETOOBIG;
    /* format 2: the seen set, members only */
    GROW(s->seen, s->seen_cap, msg->n_seen_by);
    for (size_t i = 0; i < msg->n_seen_by && rc == 0; i++) {
        const shoal_node_t *node;
        if (i > 0 && msg->seen_by[i] <= msg->seen_by[i - 1])
            rc = SHOAL_EDECODE;
        else if ((rc = table_ref(&t, msg->seen_by[i], &node)) == 0 && !cstate_member(s, node))
            rc = SHOAL_EDECODE;
        else if (rc == 0)
            s->seen[s->n_seen++] = node;
    }
    /* format 1: a table of clocks; the nodes whose clock covers the state's have seen it */
    for (size_t i = 0; i < msg->n_seen && rc == 0; i++) {
        const shoal_node_t *node;
        shoal_crdt_t *vv = NULL;
        if (i > 0 && msg->seen[i]->node <= msg->seen[i - 1]->node)
            rc = SHOAL_EDECODE;
        else if ((rc = table_ref(&t, msg->seen[i]->node, &node)) == 0 &&
                 (rc = clock_from_pb(&t, msg->seen[i]->clock, &vv)) == 0) {
            shoal_vv_order_t o = shoal_vv_compare(vv, s->vclock);
            if ((o == SHOAL_VV_SAME || o == SHOAL_VV_AFTER) && cstate_member(s, node)) {
                GROW(s->seen, s->seen_cap, s->n_seen + 1);
                s->seen[s->n_seen++] = node;
            }
        }
        shoal_crdt_destroy(&vv);
    }

    /* canonical: the table holds exactly the nodes something refers to */
    for (size_t i = 0; i < t.n && rc == 0; i++)
        if (!t.used[i])
            rc = SHOAL_EDECODE;
    free(t.nodes);
    free(t.used);
    return rc;
}

static int cs_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    Shoal__Membership__ClusterState *msg =
        shoal__membership__cluster_state__unpack(NULL, len, data);
    if (!msg)
        return SHOAL_EDECODE;
    cstate_t *s = CS(cs_create());
    int rc = cs_decode_msg(msg, s);
    shoal__membership__cluster_state__free_unpacked(msg, NULL);
    if (rc < 0) {
        cs_destroy(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Rendering: ClusterState{members=[a:1:1 Up#1 (r1,r2) "1.0", ...], unreachable={obs@v2:[x]},
 * clock=VersionVector{...}, seen={a:1:1, ...}}
 */
static int cs_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    const cstate_t *s = CCS(self);
    shoal_buf_printf(out, "ClusterState{members=[");
    for (size_t i = 0; i < s->n_members; i++) {
        const cmember_t *m = &s->members[i];
        shoal_buf_printf(out, "%s%s %s", i ? ", " : "", shoal_node_id(m->node),
                         status_name(m->status));
        if (m->up_number)
            shoal_buf_printf(out, "#%llu", (unsigned long long)m->up_number);
        if (m->n_roles) {
            shoal_buf_printf(out, " (");
            for (size_t r = 0; r < m->n_roles; r++) {
                if (r)
                    shoal_buf_printf(out, ",");
                shoal_buf_append_quoted(out, m->roles[r], strlen(m->roles[r]));
            }
            shoal_buf_printf(out, ")");
        }
        if (m->app_version && *m->app_version) {
            shoal_buf_printf(out, " v");
            shoal_buf_append_quoted(out, m->app_version, strlen(m->app_version));
        }
        if (m->hb_endpoint && *m->hb_endpoint) {
            shoal_buf_printf(out, " hb=");
            shoal_buf_append_quoted(out, m->hb_endpoint, strlen(m->hb_endpoint));
        }
        if (m->pubkey_len)
            shoal_buf_printf(out, " key(%zu bytes)", m->pubkey_len);
        if (m->durable_id && *m->durable_id) {
            shoal_buf_printf(out, " id=");
            shoal_buf_append_quoted(out, m->durable_id, strlen(m->durable_id));
        }
        if (m->protocol_max > 1)
            shoal_buf_printf(out, " protocol=%u", (unsigned)m->protocol_max);
    }
    shoal_buf_printf(out, "], unreachable={");
    for (size_t i = 0; i < s->n_rows; i++) {
        const creach_row_t *r = &s->rows[i];
        shoal_buf_printf(out, "%s%s@v%llu:[", i ? ", " : "", shoal_node_id(r->observer),
                         (unsigned long long)r->version);
        for (size_t k = 0; k < r->n; k++)
            shoal_buf_printf(out, "%s%s", k ? ", " : "", shoal_node_id(r->unreachable[k]));
        shoal_buf_printf(out, "]");
    }
    shoal_buf_printf(out, "}, clock=");
    shoal_crdt_render(s->vclock, out);
    shoal_buf_printf(out, ", seen={");
    for (size_t i = 0; i < s->n_seen; i++)
        shoal_buf_printf(out, "%s%s", i ? ", " : "", shoal_node_id(s->seen[i]));
    shoal_buf_printf(out, "}}");
    return 0;
}

const shoal_type_t cstate_type = {
    .name = "ClusterState",
    .tag = CSTATE_TAG,
    .format_version = 2, /* 2: the seen set and rows of unreachability only (reads 1) */
    .delta_type = NULL,  /* the state is gossiped whole, as Akka's Gossip is */
    .delta_causal = false,
    .has_pruning = false, /* removed members stay as tombstones so they cannot come back */
    .create = cs_create,
    .destroy = cs_destroy,
    .clone = cs_clone,
    .merge = cs_merge,
    .equal = cs_equal,
    .encode_payload = cs_encode,
    .decode_payload = cs_decode,
    .render = cs_render,
    .modified_by = NULL,
};

int cstate_register(void)
{
    return shoal_type_register(&cstate_type);
}
