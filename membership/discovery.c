/*  discovery.c — the contact-point resolver of seed discovery (see discovery.h).

    One thread per resolver. It sleeps on a condition variable between queries, so disc_stop and
    disc_destroy wake it at once; a query under way is bounded by the resolver's timeout
    (RES_RETRANS_S x RES_RETRY per nameserver), which is what disc_destroy may wait.
*/
#include "discovery.h"

#include "ddata.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <resolv.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A contact point lookup that takes longer than a couple of seconds is as good as failed: the
   next one comes an interval later. 1 s per try, 2 tries. */
#define RES_RETRANS_S 1
#define RES_RETRY     2
/* More contact points than this in one name is not a cluster Shoal forms by DNS: the lowest
   MAX_POINTS are kept. All the answer's records are collected (up to MAX_COLLECT, more than an
   8 KiB answer holds) and sorted first, so that every node keeps the same ones whatever order
   its nameserver answers in (issue 36: cut before sorting, nodes kept different subsets and
   never agreed on the lowest address). */
#define MAX_POINTS  256
#define MAX_COLLECT 4096

typedef enum { FORM_DNS = 1, FORM_SRV = 2 } form_t;

typedef struct {
    form_t form;
    char name[NS_MAXDNAME];
    unsigned port; /* FORM_DNS */
} spec_t;

/* A contact point while being collected: address bytes, family and port, for sorting. */
typedef struct {
    int family;
    uint8_t addr[16];
    unsigned port;
} point_t;

struct disc {
    spec_t spec;
    bool has_resolver;
    struct sockaddr_in resolver;
    uint32_t interval_ms;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_bool stop; /* written under mu (the condition variable); read without it between
                         queries, so a stop does not wait for the rest of a round */
    /* the mailbox (under mu) */
    uint64_t gen;
    char **eps;
    size_t n;
    char why[200];
};

static int fail(char *err, size_t errlen, const char *fmt, const char *arg)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, arg);
    return SHOAL_EINVAL;
}

/* A DNS name: labels of letters, digits, '-' and '_' (SRV owners start with _service._proto). */
static bool is_dns_name(const char *s, size_t len)
{
    if (len == 0 || len >= NS_MAXDNAME)
        return false;
    size_t label = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '.') {
            if (label == 0 && i + 1 != len) /* an empty label; a final dot is an absolute name */
                return false;
            label = 0;
        } else if (isalnum(ch) || ch == '-' || ch == '_') {
            if (++label > 63)
                return false;
        } else
            return false;
    }
    return true;
}

static int parse_port(const char *s, unsigned *out)
{
    if (!*s || strlen(s) > 5)
        return -1;
    unsigned p = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        p = p * 10 + (unsigned)(*s - '0');
    }
    if (p < 1 || p > 65535)
        return -1;
    *out = p;
    return 0;
}

static int parse(const char *spec, spec_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return fail(err, errlen, "%sdiscovery: empty name (dns:NAME:PORT or srv:NAME)", "");
    if (strncmp(spec, "dns:", 4) == 0) {
        const char *name = spec + 4, *colon = strrchr(name, ':');
        if (!colon)
            return fail(err, errlen, "discovery '%s': dns:NAME:PORT needs a port", spec);
        if (!is_dns_name(name, (size_t)(colon - name)))
            return fail(err, errlen, "discovery '%s': not a DNS name", spec);
        if (parse_port(colon + 1, &out->port) < 0)
            return fail(err, errlen, "discovery '%s': the port must be 1..65535", spec);
        out->form = FORM_DNS;
        memcpy(out->name, name, (size_t)(colon - name));
        return 0;
    }
    if (strncmp(spec, "srv:", 4) == 0) {
        const char *name = spec + 4;
        if (!is_dns_name(name, strlen(name)))
            return fail(err, errlen, "discovery '%s': not a DNS name (srv:_service._tcp.NAME)",
                        spec);
        out->form = FORM_SRV;
        snprintf(out->name, sizeof out->name, "%s", name);
        return 0;
    }
    return fail(err, errlen, "discovery '%s': expected dns:NAME:PORT or srv:NAME", spec);
}

int disc_check(const char *spec, char *err, size_t errlen)
{
    spec_t s;
    return parse(spec, &s, err, errlen);
}

static int parse_resolver(const char *r, struct sockaddr_in *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *colon = r ? strrchr(r, ':') : NULL;
    char host[INET_ADDRSTRLEN];
    unsigned port = 0;
    if (!colon || (size_t)(colon - r) >= sizeof host)
        return fail(err, errlen, "resolver '%s': expected IPv4:PORT", r ? r : "");
    memcpy(host, r, (size_t)(colon - r));
    host[colon - r] = '\0';
    out->sin_family = AF_INET;
    if (inet_pton(AF_INET, host, &out->sin_addr) != 1 || parse_port(colon + 1, &port) < 0)
        return fail(err, errlen, "resolver '%s': expected IPv4:PORT", r);
    out->sin_port = htons((uint16_t)port);
    return 0;
}

int disc_check_resolver(const char *resolver, char *err, size_t errlen)
{
    struct sockaddr_in sa;
    return parse_resolver(resolver, &sa, err, errlen);
}

/* ---------------------------------------------------------------------------------------------
 * Queries (resolver thread)
 */
typedef struct {
    const disc_t *d;
    point_t pts[MAX_COLLECT];
    size_t n;
    char why[200];
} found_t;

static void add_point(found_t *f, int family, const uint8_t *addr, unsigned port)
{
    if (f->n == MAX_COLLECT)
        return;
    point_t *p = &f->pts[f->n++];
    memset(p, 0, sizeof *p);
    p->family = family;
    memcpy(p->addr, addr, family == AF_INET ? 4 : 16);
    p->port = port;
}

static const char *herror_name(int h)
{
    switch (h) {
    case HOST_NOT_FOUND: return "no such name (NXDOMAIN)";
    case NO_DATA: return "no records of that type";
    case TRY_AGAIN: return "no answer from the nameserver";
    default: return "the lookup failed";
    }
}

/* One query; the answer's records of `type` are handed to `each`. false with f->why when the
   query failed (an empty answer is not a failure of the query). */
typedef void (rr_fn)(res_state st, ns_msg *msg, ns_rr *rr, found_t *f, unsigned port);

static bool query(res_state st, const char *name, int type, rr_fn *each, found_t *f,
                  unsigned port)
{
    if (atomic_load(&f->d->stop))
        return false; /* stopping: the rest of the round is not wanted */
    unsigned char answer[8192];
    int len = res_nsearch(st, name, ns_c_in, type, answer, sizeof answer);
    if (len < 0) {
        /* the first failure names the name; a silent nameserver outranks an empty answer */
        if (!f->why[0] || st->res_h_errno == TRY_AGAIN)
            snprintf(f->why, sizeof f->why, "%s: %s", name, herror_name(st->res_h_errno));
        return false;
    }
    ns_msg msg;
    if (ns_initparse(answer, len > (int)sizeof answer ? (int)sizeof answer : len, &msg) < 0) {
        snprintf(f->why, sizeof f->why, "%s: a malformed answer", name);
        return false;
    }
    for (int i = 0; i < ns_msg_count(msg, ns_s_an); i++) {
        ns_rr rr;
        if (ns_parserr(&msg, ns_s_an, i, &rr) < 0)
            break;
        if ((int)ns_rr_type(rr) == type && ns_rr_class(rr) == ns_c_in)
            each(st, &msg, &rr, f, port);
    }
    return true;
}

static void on_addr(res_state st, ns_msg *msg, ns_rr *rr, found_t *f, unsigned port)
{
    (void)st;
    (void)msg;
    if (ns_rr_type(*rr) == ns_t_a && ns_rr_rdlen(*rr) == 4)
        add_point(f, AF_INET, ns_rr_rdata(*rr), port);
    else if (ns_rr_type(*rr) == ns_t_aaaa && ns_rr_rdlen(*rr) == 16)
        add_point(f, AF_INET6, ns_rr_rdata(*rr), port);
}

/* A and AAAA of `name`, with `port`; true when either query succeeded. */
static bool resolve_host(res_state st, const char *name, unsigned port, found_t *f)
{
    bool a = query(st, name, ns_t_a, on_addr, f, port);
    bool aaaa = query(st, name, ns_t_aaaa, on_addr, f, port);
    return a || aaaa;
}

/* SRV rdata: priority, weight, port (2 bytes each), then the target's (compressed) name. */
static void on_srv(res_state st, ns_msg *msg, ns_rr *rr, found_t *f, unsigned port)
{
    (void)port;
    const unsigned char *rd = ns_rr_rdata(*rr);
    if (ns_rr_rdlen(*rr) < 7)
        return;
    unsigned srv_port = ns_get16(rd + 4);
    char target[NS_MAXDNAME];
    if (dn_expand(ns_msg_base(*msg), ns_msg_end(*msg), rd + 6, target, sizeof target) < 0 ||
        srv_port == 0 || !target[0] || strcmp(target, ".") == 0)
        return;
    resolve_host(st, target, srv_port, f);
}

static int cmp_point(const void *a, const void *b)
{
    const point_t *x = a, *y = b;
    if (x->family != y->family)
        return x->family == AF_INET ? -1 : 1;
    int c = memcmp(x->addr, y->addr, x->family == AF_INET ? 4 : 16);
    if (c)
        return c;
    return (x->port > y->port) - (x->port < y->port);
}

/* Resolves once; the contact points sorted and without duplicates. */
static void resolve(disc_t *d, found_t *f)
{
    memset(f, 0, sizeof *f);
    f->d = d;
    struct __res_state st;
    memset(&st, 0, sizeof st);
    if (res_ninit(&st) < 0) {
        snprintf(f->why, sizeof f->why, "the resolver could not start (/etc/resolv.conf)");
        return;
    }
    st.retrans = RES_RETRANS_S;
    st.retry = RES_RETRY;
    if (d->has_resolver) {
        st.nscount = 1;
        st.nsaddr_list[0] = d->resolver;
    }
    if (d->spec.form == FORM_DNS)
        resolve_host(&st, d->spec.name, d->spec.port, f);
    else
        query(&st, d->spec.name, ns_t_srv, on_srv, f, 0);
    res_nclose(&st);
    qsort(f->pts, f->n, sizeof f->pts[0], cmp_point);
    size_t w = 0;
    for (size_t i = 0; i < f->n; i++)
        if (w == 0 || cmp_point(&f->pts[w - 1], &f->pts[i]) != 0)
            f->pts[w++] = f->pts[i];
    f->n = w < MAX_POINTS ? w : MAX_POINTS; /* sorted, then cut */
    if (f->n)
        f->why[0] = '\0';
    else if (!f->why[0])
        snprintf(f->why, sizeof f->why, "%.150s: no addresses", d->spec.name);
}

static char *endpoint(const point_t *p)
{
    char host[INET6_ADDRSTRLEN], ep[INET6_ADDRSTRLEN + 32];
    inet_ntop(p->family, p->addr, host, sizeof host);
    snprintf(ep, sizeof ep, p->family == AF_INET ? "tcp://%s:%u" : "tcp://[%s]:%u", host, p->port);
    char *s = strdup(ep);
    if (!s)
        abort();
    return s;
}

static void *run(void *arg)
{
    disc_t *d = arg;
    found_t *f = malloc(sizeof *f);
    if (!f)
        abort();
    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        pthread_mutex_unlock(&d->mu);
        resolve(d, f);
        char **eps = f->n ? calloc(f->n, sizeof *eps) : NULL;
        if (f->n && !eps)
            abort();
        for (size_t i = 0; i < f->n; i++)
            eps[i] = endpoint(&f->pts[i]);
        pthread_mutex_lock(&d->mu);
        disc_free_list(d->eps, d->n);
        d->eps = eps;
        d->n = f->n;
        snprintf(d->why, sizeof d->why, "%s", f->why);
        d->gen++;
        /* the condition variable runs on CLOCK_MONOTONIC (disc_new): a clock step does not
           stretch or skip the interval */
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += d->interval_ms / 1000;
        until.tv_nsec += (long)(d->interval_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!d->stop && pthread_cond_timedwait(&d->cv, &d->mu, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&d->mu);
    free(f);
    return NULL;
}

disc_t *disc_new(const char *spec, const char *resolver, uint32_t interval_ms, int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    disc_t *d = calloc(1, sizeof *d);
    if (!d)
        abort();
    if (parse(spec, &d->spec, NULL, 0) < 0 ||
        (resolver && parse_resolver(resolver, &d->resolver, NULL, 0) < 0)) {
        free(d);
        *err = SHOAL_EINVAL;
        return NULL;
    }
    d->has_resolver = resolver != NULL;
    d->interval_ms = interval_ms ? interval_ms : 1000;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&d->mu, NULL);
    if (pthread_create(&d->thread, NULL, run, d) != 0) {
        disc_destroy(&d);
        *err = SHOAL_EIO; /* no thread: the process is out of resources */
        return NULL;
    }
    d->started = true;
    *err = 0;
    return d;
}

void disc_stop(disc_t *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void disc_destroy(disc_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    disc_t *d = *self_p;
    *self_p = NULL;
    disc_stop(d);
    if (d->started)
        pthread_join(d->thread, NULL);
    disc_free_list(d->eps, d->n);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

bool disc_take(disc_t *d, uint64_t *gen, char ***eps, size_t *n, char *why, size_t whylen)
{
    pthread_mutex_lock(&d->mu);
    bool news = d->gen > *gen;
    if (news) {
        *gen = d->gen;
        *n = d->n;
        *eps = d->n ? calloc(d->n, sizeof **eps) : NULL;
        if (d->n && !*eps)
            abort();
        for (size_t i = 0; i < d->n; i++)
            if (!((*eps)[i] = strdup(d->eps[i])))
                abort();
        if (why && whylen)
            snprintf(why, whylen, "%s", d->why);
    }
    pthread_mutex_unlock(&d->mu);
    return news;
}

void disc_free_list(char **eps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(eps[i]);
    free(eps);
}
