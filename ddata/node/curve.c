/*  curve.c — CURVE security for a node's sockets and a client's: the node's certificate, the
    allow-list of member keys, and the process's ZAP handler.

    ZeroMQ asks one authentication handler per context (inproc://zeromq.zap.01) about every
    CURVE connection, and every node of the process shares one context. So the handler is ours,
    process-wide, and routes by ZAP domain: each node's server sockets carry a domain of their
    own ("shoal-<n>"), registered here with that node's allow-list, so two nodes of one process
    can admit different keys. A domain it does not know is refused.

    An allow-list is a directory of public certificates in czmq's zcert format (what
    shoal-keygen writes). A certificate may say where its owner listens (metadata `endpoint`):
    that is how a node finds the server key of a seed it has never met. Members learned later
    (membership's records) add their keys with shoal_curve_learn. The directory is re-read when
    it changes (checked at most once a second) or on shoal_system_allow_reload: a key removed
    from it is refused from the next connection on.

    NETWORK RULES (--allow-from CIDR, issue 36). The same handler also serves a plain node told
    which networks may connect: shoal_curve_plain_new registers a domain with no keys, whose
    server sockets set only ZMQ_ZAP_DOMAIN, so that libzmq asks ZAP about NULL-mechanism
    connections too (it does so only when the socket has a domain). A connection from an address
    outside the list is refused at the handshake, before a byte of Shoal's protocol is read; a
    CURVE node given the list applies it on top of the keys. Refusals are counted with the key
    refusals (auth_refused) and logged at the 1st, 2nd, 4th, 8th... refusal.

    Thread-safety: a shoal_curve_t is read by its node thread, the heartbeat actor and the ZAP
    thread; its list sits behind a mutex, everything else is set before it is shared.
*/
#include "curve.h"

#include <czmq.h>
#include <dirent.h>
#include <errno.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#define ZAP_ENDPOINT   "inproc://zeromq.zap.01"
#define RELOAD_CHECK_MS 1000

typedef struct {
    uint8_t key[32];
    char *endpoint;   /* where the key's owner listens ("" if the certificate does not say) */
    bool learned;     /* from a member record or a handshake, not from the directory */
    int64_t mtime_ns; /* the certificate file's, for the newest of two naming one endpoint */
} allowed_t;

struct shoal_curve {
    char who[96];           /* for logs: the node id or "client" */
    uint8_t public_key[32], secret_key[32];
    char public_txt[41];
    char *allow_dir;
    char domain[32];
    bool registered;
    pthread_mutex_t lock;   /* guards the list and the directory's signature */
    allowed_t *allowed;
    size_t nallowed, allowed_cap;
    uint64_t dir_sig;       /* names, sizes and mtimes of the directory at the last load */
    bool loaded;            /* the first load is not logged (clients would say it every time) */
    int64_t next_check_ms;
    atomic_uint_fast64_t refused; /* keys the ZAP handler refused for this node */
    atomic_uint_fast64_t admitted;
    atomic_uint_fast64_t no_key; /* connections not made for want of a server key */
    atomic_uint_fast64_t generation; /* loads of the directory */
    bool plain;                      /* no keys: a NULL-mechanism domain with network rules only */
    shoal_cidr_t *nets; /* networks allowed to connect (none: any), read under zap_lock */
    size_t nnets;
};

/* ---------------------------------------------------------------------------------------------
 * The allow-list directory
 */
static bool is_secret_file(const char *name)
{
    size_t n = strlen(name);
    return n >= 7 && strcmp(name + n - 7, "_secret") == 0;
}

/* A cheap fingerprint of the directory: a change of any name, size or mtime changes it. */
static uint64_t dir_signature(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint64_t sig = 1469598103934665603ULL;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0)
            continue;
        uint64_t h = 1469598103934665603ULL;
        for (const char *p = e->d_name; *p; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ULL;
        h ^= (uint64_t)st.st_size * 0x9E3779B97F4A7C15ULL;
        h ^= (uint64_t)st.st_mtim.tv_sec * 1000003ULL + (uint64_t)st.st_mtim.tv_nsec;
        sig += h * 0xff51afd7ed558ccdULL; /* order-independent: readdir's order is not stable */
    }
    closedir(d);
    return sig ? sig : 1;
}

/* A certificate is a few hundred bytes of ZPL. Read here and parsed from memory: zconfig_load
   leaks its file object when the parse fails, and a directory may hold anything. */
static zconfig_t *load_small_zpl(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    bool too_big = !feof(f);
    fclose(f);
    if (too_big || memchr(buf, 0, n))
        return NULL;
    buf[n] = 0;
    return zconfig_str_load(buf);
}

static void list_free(allowed_t *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(a[i].endpoint);
    free(a);
}

/* Reads every public certificate of `dir`. Files that are not certificates are skipped with a
   warning (a stray file must not empty the list); secret files are skipped, with a warning, since
   they do not belong in a list that is shared. */
static int load_dir(const char *who, const char *dir, allowed_t **out, size_t *nout)
{
    DIR *d = opendir(dir);
    if (!d) {
        shoal_error("%s: cannot read the allow-list directory %s: %s", who, dir, strerror(errno));
        return SHOAL_EKEY;
    }
    allowed_t *list = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (is_secret_file(e->d_name)) {
            shoal_warning("%s: %s/%s is a secret key: skipped (an allow-list holds public keys)", who,
                         dir, e->d_name);
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        zconfig_t *cfg = load_small_zpl(path);
        const char *pub = cfg ? zconfig_get(cfg, "/curve/public-key", NULL) : NULL;
        uint8_t key[32];
        if (!pub || strlen(pub) != 40 || !zmq_z85_decode(key, pub)) {
            shoal_warning("%s: %s is not a public certificate: skipped", who, path);
            zconfig_destroy(&cfg);
            continue;
        }
        const char *ep = zconfig_get(cfg, "/metadata/endpoint", "");
        SHOAL_GROW(list, cap, n + 1);
        memcpy(list[n].key, key, 32);
        list[n].endpoint = strdup(ep ? ep : "");
        list[n].learned = false;
        list[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        n++;
        zconfig_destroy(&cfg);
    }
    closedir(d);
    *out = list;
    *nout = n;
    return 0;
}

/* Replaces the directory's part of the list, keeping the keys learned from member records.
   Called with the lock held. */
static void adopt(shoal_curve_t *c, allowed_t *fresh, size_t nfresh)
{
    size_t learned = 0;
    for (size_t i = 0; i < c->nallowed; i++)
        learned += c->allowed[i].learned;
    size_t n = nfresh + learned;
    fresh = shoal_realloc(fresh, (n + 1) * sizeof *fresh);
    for (size_t i = 0; i < c->nallowed; i++)
        if (c->allowed[i].learned) {
            fresh[nfresh++] = c->allowed[i];
            c->allowed[i].endpoint = NULL; /* moved */
        }
    list_free(c->allowed, c->nallowed);
    c->allowed = fresh;
    c->nallowed = n;
    c->allowed_cap = n + 1;
}

int shoal_curve_reload(shoal_curve_t *c)
{
    if (!c || !c->allow_dir)
        return SHOAL_EINVAL;
    uint64_t sig = dir_signature(c->allow_dir);
    allowed_t *fresh = NULL;
    size_t n = 0;
    int rc = load_dir(c->who, c->allow_dir, &fresh, &n);
    if (rc != 0)
        return rc; /* an unreadable directory keeps the list in force rather than opening up */
    pthread_mutex_lock(&c->lock);
    size_t before = c->nallowed;
    adopt(c, fresh, n);
    c->dir_sig = sig;
    atomic_fetch_add(&c->generation, 1);
    size_t after = c->nallowed;
    bool reloaded = c->loaded;
    c->loaded = true;
    pthread_mutex_unlock(&c->lock);
    if (reloaded)
        shoal_info("%s: allow-list %s reloaded: %zu keys (was %zu)", c->who, c->allow_dir, after,
                  before);
    return (int)n;
}

void shoal_curve_tick(shoal_curve_t *c, int64_t now_ms)
{
    if (!c || !c->allow_dir || now_ms < c->next_check_ms)
        return;
    c->next_check_ms = now_ms + RELOAD_CHECK_MS;
    uint64_t sig = dir_signature(c->allow_dir);
    pthread_mutex_lock(&c->lock);
    bool changed = sig != c->dir_sig;
    pthread_mutex_unlock(&c->lock);
    if (changed)
        shoal_curve_reload(c);
}

/* Only the directory admits: a key learned from a member record tells where a member listens,
   it does not let anyone in (a key taken off the list must stay out). Called with the lock held. */
static bool key_allowed_locked(const shoal_curve_t *c, const uint8_t key[32])
{
    for (size_t i = 0; i < c->nallowed; i++)
        if (!c->allowed[i].learned && memcmp(c->allowed[i].key, key, 32) == 0)
            return true;
    return false;
}

static bool key_allowed(shoal_curve_t *c, const uint8_t key[32])
{
    pthread_mutex_lock(&c->lock);
    bool ok = key_allowed_locked(c, key);
    pthread_mutex_unlock(&c->lock);
    return ok;
}

int shoal_curve_learn(shoal_curve_t *c, const char *endpoint, const uint8_t key[32])
{
    if (!c || !endpoint || !key)
        return SHOAL_EINVAL;
    pthread_mutex_lock(&c->lock);
    allowed_t *hit = NULL;
    for (size_t i = 0; i < c->nallowed; i++)
        if (strcmp(c->allowed[i].endpoint, endpoint) == 0 && c->allowed[i].learned)
            hit = &c->allowed[i];
    if (!hit) {
        SHOAL_GROW(c->allowed, c->allowed_cap, c->nallowed + 1);
        hit = &c->allowed[c->nallowed++];
        hit->endpoint = strdup(endpoint);
        hit->learned = true;
        hit->mtime_ns = 0;
    }
    memcpy(hit->key, key, 32);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* How good a candidate for the server key of an endpoint is. During a key rotation (docs/
   operations.md, "Rotating keys and certificates") the directory holds the node's old and new
   certificates, both naming its endpoint, while the node runs one of them: what it is running is
   known from what it last said itself (its handshake's authenticated key, its member record: the
   learned key), so a learned key still on the list comes first; then the directory's newest
   certificate (the new one is copied in last); a learned key that left the list last (so that
   shoal_curve_server_revoked sees it). */
static int key_rank(const shoal_curve_t *c, const allowed_t *a)
{
    if (a->learned)
        return key_allowed_locked(c, a->key) ? 3 : 1;
    return 2;
}

/* The server key for a connection to `endpoint`: an exact name first, then an equivalent address
   (shoal_endpoint_matches: the same port, a wildcard or a host name); among the keys that name
   it, the best by key_rank. */
static bool server_key(shoal_curve_t *c, const char *endpoint, uint8_t out[32])
{
    const allowed_t *best = NULL;
    pthread_mutex_lock(&c->lock);
    for (int pass = 0; pass < 2 && !best; pass++)
        for (size_t i = 0; i < c->nallowed; i++) {
            const allowed_t *a = &c->allowed[i];
            if (!a->endpoint[0])
                continue;
            bool match = pass == 0 ? strcmp(a->endpoint, endpoint) == 0
                                   : shoal_endpoint_matches(a->endpoint, endpoint);
            if (!match)
                continue;
            int r = key_rank(c, a), br = best ? key_rank(c, best) : 0;
            if (r > br || (r == br && r == 2 && a->mtime_ns > best->mtime_ns))
                best = a;
        }
    if (best)
        memcpy(out, best->key, 32);
    pthread_mutex_unlock(&c->lock);
    return best != NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Networks (CIDR rules)
 */
/* An address as ZAP gives it ("127.0.0.2", "::1", "::ffff:10.0.0.1"): IPv4 (v4-mapped included)
   as AF_INET, else AF_INET6. */
static bool parse_addr(const char *txt, int *family, uint8_t out[16])
{
    struct in6_addr a6;
    memset(out, 0, 16);
    if (inet_pton(AF_INET, txt, out) == 1) {
        *family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, txt, &a6) != 1)
        return false;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
        *family = AF_INET;
        memcpy(out, a6.s6_addr + 12, 4);
        return true;
    }
    *family = AF_INET6;
    memcpy(out, a6.s6_addr, 16);
    return true;
}

int shoal_cidr_parse(const char *txt, shoal_cidr_t *out)
{
    if (!txt || !out || !txt[0] || strlen(txt) > 64)
        return SHOAL_EINVAL;
    char a[72];
    snprintf(a, sizeof a, "%s", txt);
    char *slash = strchr(a, '/');
    long bits = -1;
    if (slash) {
        *slash = 0;
        char *end = NULL;
        if (!slash[1] || slash[1] < '0' || slash[1] > '9')
            return SHOAL_EINVAL;
        bits = strtol(slash + 1, &end, 10);
        if (*end)
            return SHOAL_EINVAL;
    }
    if (!parse_addr(a, &out->family, out->addr))
        return SHOAL_EINVAL;
    long max = out->family == AF_INET ? 32 : 128;
    if (bits < 0)
        bits = max;
    if (bits > max)
        return SHOAL_EINVAL;
    out->bits = (unsigned)bits;
    return 0;
}

bool shoal_cidr_match(const shoal_cidr_t *net, const char *address)
{
    int family;
    uint8_t a[16];
    if (!parse_addr(address, &family, a) || family != net->family)
        return false;
    unsigned full = net->bits / 8, rest = net->bits % 8;
    if (memcmp(a, net->addr, full) != 0)
        return false;
    if (!rest)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[full] & mask) == (net->addr[full] & mask);
}

/* Called with zap_lock held. */
static bool address_allowed(const shoal_curve_t *c, const char *address)
{
    if (!c->nnets)
        return true;
    for (size_t i = 0; i < c->nnets; i++)
        if (shoal_cidr_match(&c->nets[i], address))
            return true;
    return false;
}

/* ---------------------------------------------------------------------------------------------
 * The ZAP handler: one thread per process, domains registered by nodes.
 */
static pthread_mutex_t zap_lock = PTHREAD_MUTEX_INITIALIZER;
static shoal_curve_t **zap_domains;
static size_t zap_n, zap_cap;
static uint64_t zap_next_domain;
static bool zap_started;

static void zap_reply(void *rep, const char *version, size_t vlen, zmq_msg_t *request_id,
                      const char *status, const char *text, const char *user)
{
    zmq_send(rep, version, vlen, ZMQ_SNDMORE);
    zmq_send(rep, zmq_msg_data(request_id), zmq_msg_size(request_id), ZMQ_SNDMORE);
    zmq_send(rep, status, strlen(status), ZMQ_SNDMORE);
    zmq_send(rep, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(rep, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(rep, "", 0, 0);
}

/* One ZAP request (RFC 27): version, request id, domain, address, identity, mechanism, then the
   mechanism's credentials (CURVE: the client's 32-byte public key). */
static void zap_serve(void *rep)
{
    zmq_msg_t part[7];
    int n = 0;
    bool more = true;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, rep, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < 7)
            part[n++] = m;
        else
            zmq_msg_close(&m);
    }
    if (n < 6) { /* not a ZAP request: REP still owes an answer */
        for (int i = 0; i < n; i++)
            zmq_msg_close(&part[i]);
        zmq_send(rep, "", 0, 0);
        return;
    }
    char domain[64] = "", address[64] = "", mech[16] = "";
    size_t dl = zmq_msg_size(&part[2]), al = zmq_msg_size(&part[3]), ml = zmq_msg_size(&part[5]);
    memcpy(domain, zmq_msg_data(&part[2]), dl < sizeof domain - 1 ? dl : sizeof domain - 1);
    memcpy(address, zmq_msg_data(&part[3]), al < sizeof address - 1 ? al : sizeof address - 1);
    memcpy(mech, zmq_msg_data(&part[5]), ml < sizeof mech - 1 ? ml : sizeof mech - 1);

    const char *status = "400", *text = "not on the allow-list";
    char user[41] = "";
    pthread_mutex_lock(&zap_lock);
    shoal_curve_t *c = NULL;
    for (size_t i = 0; i < zap_n && !c; i++)
        if (strcmp(zap_domains[i]->domain, domain) == 0)
            c = zap_domains[i];
    if (!c) {
        text = "unknown domain";
        shoal_warning("shoal: ZAP request for unknown domain '%s' from %s: refused", domain, address);
    } else if (!address_allowed(c, address)) {
        text = "address not allowed";
        uint64_t k = atomic_fetch_add(&c->refused, 1) + 1;
        if ((k & (k - 1)) == 0)
            shoal_warning("%s: refused a connection from %s: not in the networks of allow-from "
                          "(%" PRIu64 " refused so far)",
                          c->who, address, k);
    } else if (c->plain) {
        if (strcmp(mech, "NULL") == 0) {
            status = "200";
            text = "OK";
            atomic_fetch_add(&c->admitted, 1);
        } else {
            text = "plain transport";
            atomic_fetch_add(&c->refused, 1);
        }
    } else if (strcmp(mech, "CURVE") != 0 || n < 7 || zmq_msg_size(&part[6]) != 32) {
        text = "CURVE required";
        uint64_t k = atomic_fetch_add(&c->refused, 1) + 1;
        if ((k & (k - 1)) == 0)
            shoal_warning("%s: refused a %s connection from %s: CURVE required (%" PRIu64
                         " refused so far)",
                         c->who, mech, address, k);
    } else {
        const uint8_t *key = zmq_msg_data(&part[6]);
        zmq_z85_encode(user, key, 32);
        if (key_allowed(c, key)) {
            status = "200";
            text = "OK";
            atomic_fetch_add(&c->admitted, 1);
        } else {
            uint64_t k = atomic_fetch_add(&c->refused, 1) + 1;
            if ((k & (k - 1)) == 0)
                shoal_warning("%s: refused a connection from %s: key %s is not on the allow-list "
                             "(%" PRIu64 " refused so far)",
                             c->who, address, user, k);
            user[0] = 0;
        }
    }
    pthread_mutex_unlock(&zap_lock);
    zap_reply(rep, zmq_msg_data(&part[0]), zmq_msg_size(&part[0]), &part[1], status, text, user);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&part[i]);
}

static void *zap_thread(void *arg)
{
    void *rep = arg;
    for (;;) {
        zmq_pollitem_t it = {rep, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&it, 1, -1);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            break; /* ETERM: the context is ending with the process */
        }
        if (it.revents & ZMQ_POLLIN)
            zap_serve(rep);
    }
    zmq_close(rep);
    return NULL;
}

/* Starts the handler once; the socket is bound here, before any CURVE server socket exists,
   because libzmq admits every client when no handler is bound. Called with zap_lock held. */
static int zap_start(void)
{
    if (zap_started)
        return 0;
    void *rep = zmq_socket(shoal_zmq_context(), ZMQ_REP);
    if (!rep)
        return SHOAL_EIO;
    int linger = 0;
    zmq_setsockopt(rep, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(rep, ZAP_ENDPOINT) != 0) {
        shoal_error("shoal: cannot bind the ZAP handler (%s): is another one running in this "
                   "process?",
                   zmq_strerror(errno));
        zmq_close(rep);
        return SHOAL_EIO;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, zap_thread, rep) != 0) {
        zmq_close(rep);
        return SHOAL_EIO;
    }
    pthread_detach(t);
    zap_started = true;
    return 0;
}

/* Gives c a ZAP domain of its own and puts it in the table the process's one ZAP handler
   answers from (starting the handler first if needed): a server's CURVE rules, or a plain
   node's allow-list. */
static int zap_register(shoal_curve_t *c)
{
    pthread_mutex_lock(&zap_lock);
    int rc = zap_start();
    if (rc == 0) {
        snprintf(c->domain, sizeof c->domain, "shoal-%" PRIu64, ++zap_next_domain);
        SHOAL_GROW(zap_domains, zap_cap, zap_n + 1);
        zap_domains[zap_n++] = c;
        c->registered = true;
    }
    pthread_mutex_unlock(&zap_lock);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Certificates and sockets
 */
int shoal_curve_new(const char *who, const char *cert_file, const char *allow_dir, bool server,
                    shoal_curve_t **out)
{
    *out = NULL;
    if (!cert_file || !allow_dir)
        return SHOAL_EINVAL;
    if (!zmq_has("curve")) {
        shoal_error("%s: this libzmq was built without CURVE", who);
        return SHOAL_EKEY;
    }
    zcert_t *cert = zcert_load(cert_file); /* reads cert_file + "_secret" when it exists */
    if (!cert) {
        shoal_error("%s: cannot read the certificate %s (make one with shoal-keygen)", who,
                   cert_file);
        return SHOAL_EKEY;
    }
    static const uint8_t zero[32];
    if (memcmp(zcert_secret_key(cert), zero, 32) == 0) {
        shoal_error("%s: %s holds no secret key (%s_secret is missing)", who, cert_file, cert_file);
        zcert_destroy(&cert);
        return SHOAL_EKEY;
    }
    shoal_curve_t *c = shoal_calloc(1, sizeof *c);
    snprintf(c->who, sizeof c->who, "%s", who);
    memcpy(c->public_key, zcert_public_key(cert), 32);
    memcpy(c->secret_key, zcert_secret_key(cert), 32);
    memcpy(c->public_txt, zcert_public_txt(cert), 41);
    zcert_destroy(&cert);
    c->allow_dir = strdup(allow_dir);
    pthread_mutex_init(&c->lock, NULL);
    int rc = shoal_curve_reload(c);
    if (rc < 0) {
        shoal_curve_destroy(&c);
        return rc;
    }
    c->next_check_ms = shoal_now_ms() + RELOAD_CHECK_MS;
    if (server) {
        rc = zap_register(c);
        if (rc != 0) {
            shoal_curve_destroy(&c);
            return rc;
        }
    }
    *out = c;
    return 0;
}

int shoal_curve_plain_new(const char *who, shoal_curve_t **out)
{
    *out = NULL;
    shoal_curve_t *c = shoal_calloc(1, sizeof *c);
    snprintf(c->who, sizeof c->who, "%s", who ? who : "shoal");
    c->plain = true;
    pthread_mutex_init(&c->lock, NULL);
    int rc = zap_register(c);
    if (rc != 0) {
        shoal_curve_destroy(&c);
        return rc;
    }
    *out = c;
    return 0;
}

int shoal_curve_allow_from(shoal_curve_t *c, const char *const *cidrs, size_t n)
{
    if (!c || (n && !cidrs))
        return SHOAL_EINVAL;
    shoal_cidr_t *nets = n ? shoal_calloc(n, sizeof *nets) : NULL;
    for (size_t i = 0; i < n; i++)
        if (shoal_cidr_parse(cidrs[i], &nets[i]) != 0) {
            free(nets);
            return SHOAL_EINVAL;
        }
    pthread_mutex_lock(&zap_lock);
    free(c->nets);
    c->nets = nets;
    c->nnets = n;
    pthread_mutex_unlock(&zap_lock);
    return 0;
}

void shoal_curve_rename(shoal_curve_t *c, const char *who)
{
    if (c && who)
        snprintf(c->who, sizeof c->who, "%s", who);
}

void shoal_curve_destroy(shoal_curve_t **cp)
{
    if (!cp || !*cp)
        return;
    shoal_curve_t *c = *cp;
    if (c->registered) {
        pthread_mutex_lock(&zap_lock); /* the handler reads the node's list under this lock */
        for (size_t i = 0; i < zap_n; i++)
            if (zap_domains[i] == c) {
                zap_domains[i] = zap_domains[--zap_n];
                break;
            }
        if (zap_n == 0) {
            free(zap_domains);
            zap_domains = NULL;
            zap_cap = 0;
        }
        pthread_mutex_unlock(&zap_lock);
    }
    list_free(c->allowed, c->nallowed);
    free(c->nets);
    free(c->allow_dir);
    pthread_mutex_destroy(&c->lock);
    explicit_bzero(c->secret_key, sizeof c->secret_key);
    free(c);
    *cp = NULL;
}

int shoal_curve_server(shoal_curve_t *c, void *sock)
{
    int one = 1;
    if (c->plain) /* NULL mechanism: the domain alone makes libzmq ask ZAP */
        return zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, c->domain, strlen(c->domain)) != 0 ? SHOAL_EIO
                                                                                       : 0;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, c->secret_key, 32) != 0 ||
        zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, c->domain, strlen(c->domain)) != 0)
        return SHOAL_EIO;
    return 0;
}

int shoal_curve_client(shoal_curve_t *c, void *sock, const char *endpoint)
{
    uint8_t server[32];
    if (!server_key(c, endpoint, server)) {
        uint64_t k = atomic_fetch_add(&c->no_key, 1) + 1;
        if ((k & (k - 1)) == 0) /* 1st, 2nd, 4th...: heartbeats retry every second */
            shoal_warning("%s: no public key known for %s: add its certificate (with `endpoint` "
                         "metadata, see shoal-keygen) to %s (%" PRIu64 " times)",
                         c->who, endpoint, c->allow_dir, k);
        return SHOAL_EKEY;
    }
    if (c->allow_dir && !key_allowed(c, server)) {
        uint64_t k = atomic_fetch_add(&c->no_key, 1) + 1;
        if ((k & (k - 1)) == 0)
            shoal_warning("%s: the key known for %s is not on the allow-list %s: not connecting "
                         "(%" PRIu64 " times)", c->who, endpoint, c->allow_dir, k);
        return SHOAL_EKEY;
    }
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server, 32) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, c->public_key, 32) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, c->secret_key, 32) != 0)
        return SHOAL_EIO;
    return 0;
}

const char *shoal_curve_public_txt(const shoal_curve_t *c)
{
    return c ? c->public_txt : NULL;
}

bool shoal_curve_server_revoked(shoal_curve_t *c, const char *endpoint)
{
    uint8_t key[32];
    return c && c->allow_dir && endpoint && server_key(c, endpoint, key) && !key_allowed(c, key);
}

bool shoal_curve_allows_z85(shoal_curve_t *c, const char *z85)
{
    uint8_t key[32];
    if (!c || !z85 || strlen(z85) != 40 || !zmq_z85_decode(key, z85))
        return false;
    return key_allowed(c, key);
}

void shoal_curve_count_refused(shoal_curve_t *c)
{
    atomic_fetch_add(&c->refused, 1);
}

uint64_t shoal_curve_generation(const shoal_curve_t *c)
{
    return c ? atomic_load(&((shoal_curve_t *)c)->generation) : 0;
}

void shoal_curve_counts(shoal_curve_t *c, uint64_t *admitted, uint64_t *refused, uint64_t *keys)
{
    *admitted = atomic_load(&c->admitted);
    *refused = atomic_load(&c->refused);
    pthread_mutex_lock(&c->lock);
    *keys = 0;
    for (size_t i = 0; i < c->nallowed; i++)
        *keys += !c->allowed[i].learned;
    pthread_mutex_unlock(&c->lock);
}
