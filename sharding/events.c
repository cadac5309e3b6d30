/*  events.c — shard allocations, moves and pins in the node's recent cluster events
    (shoal_cluster_note_event: GET /cluster/events, `shoal-cluster events`).

    Every node, not only the coordinator's, sees them: each region subscribes to its type's
    coordinator state ("coord-<type>", THE COORDINATOR'S STATE) in its replica and compares each
    notification with the homes and pins it saw before. The first notification is the state as
    the node found it: the baseline, not news. Events:
      shard-allocated   a shard got its first home          (node = the home)
      shard-moved       a shard's home changed              (node = the new home, "from")
      shard-deallocated a shard has no home any more        ("from")
      shard-pinned      an operator pinned a shard          ("member" = the address)
      shard-unpinned    the pin was dropped
    Notifications come on the replicator's notify interval, not per message, so this costs one
    walk of the state per change of the coordinator's state.
*/
#include <string.h>

#include "sharding_internal.h"

/* sh->event_homes keys: "s\t<type>\t<shard>" (home node id) and "p\t<type>\t<shard>" (pin) */
typedef struct {
    shoal_region_t *r;
    bool baseline;
} walk_t;

static void note(shoal_region_t *r, const char *event, const shoal_node_t *node, const char *shard,
                 const char *k2, const char *v2)
{
    const char *fields[] = {"type", r->name, "shard", shard, k2, v2};
    shoal_cluster_note_event(r->sh->c, event, node, fields, k2 ? 6 : 4);
}

static int entry(const void *key, size_t klen, const shoal_crdt_t *value, void *arg)
{
    walk_t *w = arg;
    shoal_region_t *r = w->r;
    const char *k = key;
    if (klen < 3 || klen - 2 > SHOAL_SHARD_ID_MAX || (memcmp(k, "s/", 2) && memcmp(k, "p/", 2)))
        return 0;
    char shard[SHOAL_SHARD_ID_MAX + 1];
    memcpy(shard, k + 2, klen - 2);
    shard[klen - 2] = 0;
    size_t vlen = 0;
    const char *v = shoal_lwwreg_value(value, &vlen);
    char val[SHOAL_NODE_ID_MAX + 1];
    snprintf(val, sizeof val, "%.*s", v ? (int)vlen : 0, v ? v : "");
    char hkey[SHOAL_SHARD_ID_MAX + 260];
    snprintf(hkey, sizeof hkey, "%c\t%s\t%s", k[0], r->name, shard);
    const char *old = zhashx_lookup(r->sh->event_homes, hkey);
    if (old && strcmp(old, val) == 0)
        return 0;
    if (!w->baseline) {
        if (k[0] == 's') {
            const shoal_node_t *home = *val ? shoal_node_intern(val) : NULL;
            if (!old || !*old) {
                if (home)
                    note(r, "shard-allocated", home, shard, NULL, NULL);
            } else if (home) {
                note(r, "shard-moved", home, shard, "from", old);
            } else {
                note(r, "shard-deallocated", NULL, shard, "from", old);
            }
        } else if (*val) {
            note(r, "shard-pinned", NULL, shard, "member", val);
        } else if (old && *old) {
            note(r, "shard-unpinned", NULL, shard, NULL, NULL);
        }
    }
    char *copy = strdup(val);
    if (!copy)
        abort();
    zhashx_update(r->sh->event_homes, hkey, copy);
    return 0;
}

static void changed(shoal_replicator_t *rep, shoal_change_t change, const char *key,
                    const shoal_crdt_t *value, void *arg)
{
    (void)rep;
    (void)key;
    shoal_region_t *r = arg;
    if (r->stopped || change != SHOAL_CHANGED || !value ||
        shoal_crdt_type(value) != shoal_type_by_name("LWWMap"))
        return;
    walk_t w = {r, !r->events_baseline};
    r->events_baseline = true;
    shoal_ormap_foreach(value, entry, &w);
}

void sharding_events_start(shoal_region_t *r)
{
    shoal_sharding_t *sh = r->sh;
    if (!sh->event_homes) {
        sh->event_homes = zhashx_new();
        zhashx_set_destructor(sh->event_homes, (zhashx_destructor_fn *)zstr_free);
    }
    char key[256];
    snprintf(key, sizeof key, "coord-%s", r->name);
    int id = shoal_replicator_subscribe(r->rep, key, changed, r);
    r->events_sub = id > 0 ? id : 0;
}

void sharding_events_stop(shoal_region_t *r)
{
    if (r->events_sub > 0)
        shoal_replicator_unsubscribe(r->rep, r->events_sub);
    r->events_sub = 0;
}
