/*  kept.c — the kept membership (KEPT MEMBERSHIP in membership.h): the durable identities that
    majorities count, loaded from and saved to the store, updated from the state (voters_update).
*/
#include "cluster_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Kept membership (see KEPT MEMBERSHIP in membership.h): one store key, "voters", holding
 * "shoal-voters 1\n" and one durable identity a line, sorted.
 */
#define VOTERS_KEY  "voters"
#define VOTERS_STEM "shoal-voters 1\n"

static void voters_each(void *arg, const char *key, size_t klen, const void *data, size_t len)
{
    shoal_cluster_t *c = arg;
    if (klen != strlen(VOTERS_KEY) || memcmp(key, VOTERS_KEY, klen) != 0)
        return;
    size_t stem = strlen(VOTERS_STEM);
    if (len < stem || memcmp(data, VOTERS_STEM, stem) != 0) {
        shoal_error("%s: the kept membership in the store does not read (%zu bytes): ignored",
                    shoal_node_id(c->self), len);
        return;
    }
    const char *p = (const char *)data + stem, *end = (const char *)data + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break;
        size_t n = (size_t)(nl - p);
        if (n > 0 && n <= CSTATE_MAX_STRING) {
            char id[CSTATE_MAX_STRING + 1];
            memcpy(id, p, n);
            id[n] = 0;
            zhash_update(c->voters, id, (void *)1);
        }
        p = nl + 1;
    }
}

void voters_load(shoal_cluster_t *c)
{
    if (!c->s.store)
        return;
    int rc = c->s.store->load(c->s.store->ctx, voters_each, c);
    if (rc < 0)
        shoal_error("%s: cannot read the kept membership: %s", shoal_node_id(c->self),
                    shoal_strerror(rc));
    else if (zhash_size(c->voters))
        shoal_info("%s: kept membership: %zu identities (majorities count them until the cluster "
                   "removes them)",
                   shoal_node_id(c->self), zhash_size(c->voters));
}

static int str_order(const char *a, const char *b)
{
    return strcmp(a, b);
}

static void voters_saved(void *arg, int status)
{
    shoal_cluster_t *c = arg;
    if (status < 0)
        shoal_error("%s: cannot store the kept membership: %s", shoal_node_id(c->self),
                    shoal_strerror(status));
}

void voters_save(shoal_cluster_t *c)
{
    if (!c->s.store)
        return;
    zlist_t *ids = zhash_keys(c->voters);
    zlist_sort(ids, (zlist_compare_fn *)str_order);
    shoal_buf_t b = {0};
    shoal_buf_append(&b, VOTERS_STEM, strlen(VOTERS_STEM));
    for (const char *id = zlist_first(ids); id; id = zlist_next(ids))
        shoal_buf_printf(&b, "%s\n", id);
    zlist_destroy(&ids);
    c->s.store->store(c->s.store->ctx, VOTERS_KEY, strlen(VOTERS_KEY), b.data, b.len, voters_saved,
                      c);
    shoal_buf_free(&b);
}

static bool status_counts(uint8_t status)
{
    return status == SHOAL_MEMBER_UP || status == SHOAL_MEMBER_LEAVING ||
           status == SHOAL_MEMBER_EXITING;
}

/* Members Up (or leaving) join the kept membership; an identity leaves it only when the cluster
   removed its member and no live incarnation carries it. */
void voters_update(shoal_cluster_t *c)
{
    if (!c->s.store && !c->s.durable_id)
        return;
    const cstate_t *st = c->state;
    bool changed = false;
    /* a state in which this node itself is downed or removed is the view of a cluster going
       away (a resolver that downed everyone): it removes no identity, or the restart after it
       would count majorities over what is left and two halves could each form a cluster */
    const cmember_t *me = cstate_member(st, c->self);
    bool dying = me && me->status >= SHOAL_MEMBER_DOWN;
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        if (!m->durable_id || !*m->durable_id || dying)
            continue;
        if (status_counts(m->status) && !zhash_lookup(c->voters, m->durable_id)) {
            zhash_update(c->voters, m->durable_id, (void *)1);
            changed = true;
        } else if (m->status == SHOAL_MEMBER_REMOVED && zhash_lookup(c->voters, m->durable_id)) {
            bool alive = false;
            for (size_t k = 0; k < st->n_members && !alive; k++)
                alive = st->members[k].status < SHOAL_MEMBER_DOWN && st->members[k].durable_id &&
                        strcmp(st->members[k].durable_id, m->durable_id) == 0;
            if (!alive) {
                shoal_info("%s: identity %s left the kept membership (%s removed by the cluster)",
                           shoal_node_id(c->self), m->durable_id, shoal_node_id(m->node));
                zhash_delete(c->voters, m->durable_id);
                changed = true;
            }
        }
    }
    if (changed)
        voters_save(c);
}
