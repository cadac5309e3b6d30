/*  memstore.c — the store in memory: what a replicator uses when no durable store is configured,
    and what tests use to exercise the storage contract (loading, acknowledgement after store,
    store failures) without a disk. Writes complete at once, on the caller's thread.
*/
#include "internal.h"

typedef struct {
    shoal_store_t base;
    shoal_hmap_t data; /* key -> shoal_buf_t * */
    int fail_next;
} memstore_t;

static int mem_load(void *ctx, shoal_store_each_fn *each, void *each_arg)
{
    memstore_t *m = ctx;
    shoal_hslot_t **slots = shoal_hmap_sorted(&m->data);
    size_t n = m->data.n;
    for (size_t i = 0; i < n; i++) {
        shoal_buf_t *b = slots[i]->value;
        each(each_arg, (const char *)slots[i]->key, slots[i]->klen, b->data, b->len);
    }
    free(slots);
    return 0;
}

static void mem_store(void *ctx, const char *key, size_t klen, const void *data, size_t len,
                      shoal_store_done_fn *done, void *done_arg)
{
    memstore_t *m = ctx;
    int status = 0;
    if (m->fail_next > 0) {
        m->fail_next--;
        status = SHOAL_ESTORE;
    } else if (!data) {
        shoal_buf_t *b = shoal_hmap_remove(&m->data, key, klen);
        if (b) {
            shoal_buf_free(b);
            free(b);
        }
    } else {
        bool ins;
        shoal_hslot_t *s = shoal_hmap_upsert(&m->data, key, klen, &ins);
        if (ins)
            s->value = shoal_calloc(1, sizeof(shoal_buf_t));
        shoal_buf_t *b = s->value;
        shoal_buf_reset(b);
        shoal_buf_append(b, data, len);
    }
    if (done)
        done(done_arg, status);
}

static void mem_close(void *ctx)
{
    (void)ctx;
}

shoal_store_t *shoal_memstore_new(void)
{
    memstore_t *m = shoal_calloc(1, sizeof *m);
    m->base.load = mem_load;
    m->base.store = mem_store;
    m->base.close = mem_close;
    m->base.ctx = m;
    return &m->base;
}

void shoal_memstore_fail(shoal_store_t *store, int count)
{
    if (store)
        ((memstore_t *)store->ctx)->fail_next = count;
}

size_t shoal_memstore_size(shoal_store_t *store)
{
    return store ? ((memstore_t *)store->ctx)->data.n : 0;
}

void shoal_memstore_destroy(shoal_store_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    memstore_t *m = (*self_p)->ctx;
    for (size_t i = 0; i < m->data.cap; i++)
        if (SHOAL_HSLOT_LIVE(&m->data.slots[i])) {
            shoal_buf_free(m->data.slots[i].value);
            free(m->data.slots[i].value);
        }
    shoal_hmap_free(&m->data);
    free(m);
    *self_p = NULL;
}
