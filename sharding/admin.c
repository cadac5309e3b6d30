/*  admin.c — sharding's requests over a client connection (sharding.h: SHOAL_KIND_SHARDING_*),
    which the shoal-cluster tool sends: the shard map, a rebalance round, moving and pinning a
    shard, unpinning it.

    Each request is answered from a worker thread of its own: the shard map waits for every
    region's entity counts and an action waits for the coordinator's answer, and the node thread
    must never wait. The worker posts the answer back to the node thread, which sends it.
    Operators' requests are rare, so a thread each costs nothing that matters; every wait has a
    deadline, so a worker always ends, and shoal_sharding_destroy waits for those in progress
    before the regions go.

    Requests and replies are membership's admin messages (proto/cluster.proto): AdminRequest's
    target is the entity type, its args the shard and the member; AdminReply has the status and
    the text (the JSON map, or the coordinator's words).
*/
#include <stdlib.h>
#include <string.h>

#include "sharding_internal.h"
#include "cluster.pb-c.h"

typedef struct {
    shoal_sharding_t *sh;
    shoal_system_t *sys;
    shoal_reply_to_t to;
    uint16_t kind;
    char *type, *shard, *member;
    int status;
    shoal_buf_t text;
} job_t;

static void job_free(job_t *j)
{
    free(j->type);
    free(j->shard);
    free(j->member);
    shoal_buf_free(&j->text);
    free(j);
}

static void send_reply(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind, int status,
                       const char *text)
{
    Shoal__Cluster__AdminReply r = SHOAL__CLUSTER__ADMIN_REPLY__INIT;
    r.status = status;
    r.text = (char *)(text ? text : "");
    size_t len = shoal__cluster__admin_reply__get_packed_size(&r);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        abort();
    shoal__cluster__admin_reply__pack(&r, buf);
    shoal_system_reply(sys, to, kind, buf, len);
    free(buf);
}

/* Node thread: the worker's answer goes out. */
static int answer(shoal_system_t *sys, void *arg)
{
    job_t *j = arg;
    send_reply(sys, &j->to, j->kind, j->status, shoal_buf_cstr(&j->text));
    job_free(j);
    return 0;
}

static void work(job_t *j)
{
    shoal_sharding_t *sh = j->sh;
    if (j->kind == SHOAL_KIND_SHARDING_SHARDS) {
        j->status = sharding_shards_json(sh, j->type, &j->text);
        if (j->status == SHOAL_ENOTYPE) {
            shoal_buf_reset(&j->text);
            shoal_buf_printf(&j->text, "no entity type %s on this node", j->type);
        } else if (j->status < 0) {
            shoal_buf_reset(&j->text);
            shoal_buf_printf(&j->text, "%s", shoal_strerror(j->status));
        }
        return;
    }
    shoal_region_t *r = shoal_region_find(sh, j->type);
    if (!r) {
        j->status = SHOAL_ENOTYPE;
        shoal_buf_printf(&j->text, "no entity type %s on this node", j->type);
        return;
    }
    char msg[1024] = "";
    if (j->kind == SHOAL_KIND_SHARDING_REBALANCE)
        j->status = shoal_region_rebalance(r, 0, msg, sizeof msg);
    else if (j->kind == SHOAL_KIND_SHARDING_MOVE)
        j->status = shoal_region_move_shard(r, j->shard, j->member, 0, msg, sizeof msg);
    else
        j->status = shoal_region_unpin_shard(r, j->shard, 0, msg, sizeof msg);
    shoal_buf_printf(&j->text, "%s", msg);
}

static void *worker(void *arg)
{
    job_t *j = arg;
    shoal_sharding_t *sh = j->sh;
    work(j);
    if (shoal_system_post(j->sys, answer, j) < 0)
        job_free(j); /* the node stopped: nobody to answer */
    pthread_mutex_lock(&sh->admin_mu);
    sh->admin_jobs--;
    pthread_cond_broadcast(&sh->admin_cv);
    pthread_mutex_unlock(&sh->admin_mu);
    return NULL;
}

static char *arg_copy(const Shoal__Cluster__AdminRequest *m, size_t i)
{
    char *s = strdup(i < m->n_args && m->args[i] ? m->args[i] : "");
    if (!s)
        abort();
    return s;
}

static void on_request(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                       const uint8_t *data, size_t len, void *arg)
{
    shoal_sharding_t *sh = arg;
    Shoal__Cluster__AdminRequest *m = shoal__cluster__admin_request__unpack(NULL, len, data);
    if (!m) {
        send_reply(sys, to, kind, SHOAL_EDECODE, "malformed request");
        return;
    }
    const char *type = m->target ? m->target : "";
    const char *shard = m->n_args > 0 && m->args[0] ? m->args[0] : "";
    const char *member = m->n_args > 1 && m->args[1] ? m->args[1] : "";
    const char *bad = NULL;
    if (strlen(type) > 200 || (kind != SHOAL_KIND_SHARDING_SHARDS && !*type))
        bad = "an entity type is needed";
    else if ((kind == SHOAL_KIND_SHARDING_MOVE || kind == SHOAL_KIND_SHARDING_UNPIN) &&
             (!*shard || strlen(shard) > SHOAL_SHARD_ID_MAX))
        bad = "a shard id (1 to 64 bytes) is needed";
    else if (kind == SHOAL_KIND_SHARDING_MOVE && (!*member || strlen(member) > SHOAL_NODE_ID_MAX))
        bad = "a member (host:port or host:port:uid) is needed";
    if (bad) {
        send_reply(sys, to, kind, SHOAL_EINVAL, bad);
        shoal__cluster__admin_request__free_unpacked(m, NULL);
        return;
    }
    job_t *j = calloc(1, sizeof *j);
    if (!j)
        abort();
    j->sh = sh;
    j->sys = sys;
    j->to = *to;
    j->kind = kind;
    j->type = strdup(type);
    if (!j->type)
        abort();
    j->shard = arg_copy(m, 0);
    j->member = arg_copy(m, 1);
    shoal__cluster__admin_request__free_unpacked(m, NULL);

    pthread_mutex_lock(&sh->admin_mu);
    bool closed = sh->admin_closed;
    if (!closed)
        sh->admin_jobs++;
    pthread_mutex_unlock(&sh->admin_mu);
    if (closed) {
        send_reply(sys, to, kind, SHOAL_ESTOPPED, "sharding is stopping on this node");
        job_free(j);
        return;
    }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, worker, j);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        shoal_warning("%s: sharding: no thread for a client request (%s)", shoal_node_id(sh->self),
                     strerror(rc));
        send_reply(sys, to, kind, SHOAL_EAGAIN, "the node cannot start a thread for it now");
        job_free(j);
        pthread_mutex_lock(&sh->admin_mu);
        sh->admin_jobs--;
        pthread_mutex_unlock(&sh->admin_mu);
    }
}

static const uint16_t kinds[] = {SHOAL_KIND_SHARDING_SHARDS, SHOAL_KIND_SHARDING_REBALANCE,
                                 SHOAL_KIND_SHARDING_MOVE, SHOAL_KIND_SHARDING_UNPIN};

void sharding_admin_register(shoal_sharding_t *sh)
{
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        shoal_system_register_request(sh->sys, kinds[i], on_request, sh);
}

void sharding_admin_close(shoal_sharding_t *sh)
{
    pthread_mutex_lock(&sh->admin_mu);
    sh->admin_closed = true;
    while (sh->admin_jobs)
        pthread_cond_wait(&sh->admin_cv, &sh->admin_mu);
    pthread_mutex_unlock(&sh->admin_mu);
}

void sharding_admin_unregister(shoal_sharding_t *sh)
{
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        shoal_system_register_request(sh->sys, kinds[i], NULL, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Client side
 */
static int request(shoal_client_t *cl, uint16_t kind, const char *type, const char *shard,
                   const char *member, shoal_buf_t *text)
{
    if (!cl)
        return SHOAL_EINVAL;
    Shoal__Cluster__AdminRequest q = SHOAL__CLUSTER__ADMIN_REQUEST__INIT;
    q.target = (char *)(type ? type : "");
    char *args[2] = {(char *)(shard ? shard : ""), (char *)(member ? member : "")};
    q.args = args;
    q.n_args = member ? 2 : shard ? 1 : 0;
    size_t len = shoal__cluster__admin_request__get_packed_size(&q);
    uint8_t buf[1024];
    if (len > sizeof buf)
        return SHOAL_EINVAL;
    shoal__cluster__admin_request__pack(&q, buf);
    uint16_t rkind = 0;
    shoal_buf_t raw = {0};
    int rc = shoal_client_request(cl, kind, buf, len, &rkind, &raw, 0);
    if (text)
        shoal_buf_reset(text);
    if (rc == 0 || raw.len) {
        Shoal__Cluster__AdminReply *r =
            shoal__cluster__admin_reply__unpack(NULL, raw.len, raw.data ? raw.data : buf);
        if (r) {
            rc = r->status;
            if (text && r->text)
                shoal_buf_append(text, r->text, strlen(r->text));
            shoal__cluster__admin_reply__free_unpacked(r, NULL);
        } else if (rc == 0) {
            rc = SHOAL_EDECODE;
        }
    }
    shoal_buf_free(&raw);
    return rc;
}

int shoal_client_sharding_shards(shoal_client_t *cl, const char *type, shoal_buf_t *text)
{
    return request(cl, SHOAL_KIND_SHARDING_SHARDS, type, NULL, NULL, text);
}

int shoal_client_sharding_rebalance(shoal_client_t *cl, const char *type, shoal_buf_t *text)
{
    return request(cl, SHOAL_KIND_SHARDING_REBALANCE, type, NULL, NULL, text);
}

int shoal_client_sharding_move(shoal_client_t *cl, const char *type, const char *shard,
                               const char *member, shoal_buf_t *text)
{
    return request(cl, SHOAL_KIND_SHARDING_MOVE, type, shard, member, text);
}

int shoal_client_sharding_unpin(shoal_client_t *cl, const char *type, const char *shard,
                                shoal_buf_t *text)
{
    return request(cl, SHOAL_KIND_SHARDING_UNPIN, type, shard, NULL, text);
}
