/*  view.c — what the regions and the coordinator know of the cluster and of each other: who is
    reachable, who was removed, a node's member record (from the cluster view sharding.c keeps
    from membership's events), and the node's regions by type hash or name.

    Lookups only: sharding.c owns these tables and changes them; every file above reads them here.
    The node-thread lookups skip stopped regions; shoal_region_find and shoal_sharding_type_names
    serve other threads, under the regions lock.
*/
#include <stdlib.h>
#include <string.h>

#include "sharding_internal.h"

/* ---------------------------------------------------------------------------------------------
 * The cluster
 */
bool sharding_removed(shoal_sharding_t *sh, const shoal_node_t *node)
{
    return sh->n_removed && zhashx_lookup(sh->removed_set, shoal_node_id(node)) != NULL;
}

/* On every send: the common case (nobody unreachable or removed) costs two loads. */
bool sharding_reachable(shoal_sharding_t *sh, const shoal_node_t *node)
{
    if (zhashx_size(sh->unreachable) && zhashx_lookup(sh->unreachable, shoal_node_id(node)))
        return false;
    return !sharding_removed(sh, node);
}

const shoal_member_t *sharding_member(shoal_sharding_t *sh, const shoal_node_t *node)
{
    return sh->have_view ? shoal_cluster_view_member(&sh->view, node) : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The node's regions
 */
shoal_region_t *sharding_region_by_hash(shoal_sharding_t *sh, uint32_t type_hash)
{
    for (size_t i = 0; i < sh->n_regions; i++)
        if (sh->regions[i]->type_hash == type_hash && !sh->regions[i]->stopped)
            return sh->regions[i];
    return NULL;
}

shoal_region_t *sharding_region_by_name(shoal_sharding_t *sh, const char *name)
{
    for (size_t i = 0; i < sh->n_regions; i++)
        if (strcmp(sh->regions[i]->name, name) == 0 && !sh->regions[i]->stopped)
            return sh->regions[i];
    return NULL;
}

shoal_region_t *shoal_region_find(shoal_sharding_t *sh, const char *type_name)
{
    if (!sh || !type_name)
        return NULL;
    pthread_mutex_lock(&sh->lock);
    shoal_region_t *r = NULL;
    for (size_t i = 0; i < sh->n_regions && !r; i++)
        if (strcmp(sh->regions[i]->name, type_name) == 0)
            r = sh->regions[i];
    pthread_mutex_unlock(&sh->lock);
    return r;
}

size_t shoal_sharding_type_names(shoal_sharding_t *sh, const char ***names)
{
    *names = NULL;
    if (!sh)
        return 0;
    pthread_mutex_lock(&sh->lock);
    size_t n = sh->n_regions;
    if (n) {
        *names = calloc(n, sizeof **names);
        if (!*names)
            abort();
        for (size_t i = 0; i < n; i++)
            (*names)[i] = sh->regions[i]->name;
    }
    pthread_mutex_unlock(&sh->lock);
    return n;
}
