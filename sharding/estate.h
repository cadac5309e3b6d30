/*  estate.h — the EntityStateMap replicated type (estate.c), internal to sharding/. */
#ifndef SHOAL_ESTATE_H
#define SHOAL_ESTATE_H
#include "ddata.h"
#define ESTATE_TAG 101
#define ESTATE_KEY_MAX 300
#define ESTATE_DATA_MAX (16u << 20)
typedef struct { uint64_t epoch, seq; bool deleted; int64_t deleted_unix_ms; const uint8_t *data; size_t len; } estate_entry_t;
extern const shoal_type_t estate_type;
int estate_register(void);
shoal_crdt_t *estate_new(void);
uint64_t estate_fence(const shoal_crdt_t *m);
int estate_raise_fence(shoal_crdt_t *m, uint64_t epoch);
int estate_put(shoal_crdt_t *m, const void *key, size_t klen, uint64_t epoch, uint64_t seq, const void *data, size_t len);
int estate_delete(shoal_crdt_t *m, const void *key, size_t klen, uint64_t epoch, uint64_t seq, int64_t now_unix_ms);
int estate_get(const shoal_crdt_t *m, const void *key, size_t klen, estate_entry_t *out);
int estate_foreach(const shoal_crdt_t *m, int (*fn)(const void *key, size_t klen, const estate_entry_t *e, void *arg), void *arg);
int estate_foreach_prefix(const shoal_crdt_t *m, const void *prefix, size_t plen, int (*fn)(const void *key, size_t klen, const estate_entry_t *e, void *arg), void *arg);
size_t estate_count(const shoal_crdt_t *m);
size_t estate_restamp(shoal_crdt_t *m, uint64_t epoch, int64_t drop_deleted_before_unix_ms);
int estate_admit(const shoal_crdt_t *current, const shoal_crdt_t *incoming);
size_t estate_bytes(const shoal_crdt_t *m);
#endif
