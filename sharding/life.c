/*  life.c — a lifetime token for objects that replicator callbacks refer to.

    A region, a shard or a coordinator asks its replicator for reads and writes whose completions
    arrive later, possibly after the object is gone. Each request holds a reference to the
    object's life_t instead of the object; when the object goes (life_end) the token stays until
    the last completion releases it, and that completion finds obj NULL and does nothing.
    Node thread only: the count is not atomic.
*/
#include <stdlib.h>

#include "sharding_internal.h"

life_t *life_new(void *obj)
{
    life_t *l = calloc(1, sizeof *l);
    if (!l)
        abort();
    l->obj = obj;
    l->refs = 1;
    return l;
}

life_t *life_ref(life_t *l)
{
    l->refs++;
    return l;
}

void life_release(life_t *l)
{
    if (l && --l->refs == 0)
        free(l);
}

void life_end(life_t **l)
{
    if (!*l)
        return;
    (*l)->obj = NULL;
    life_release(*l);
    *l = NULL;
}
