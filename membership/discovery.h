/*  discovery.h — private to membership/: the contact-point resolver of seed discovery.

    Seed discovery (membership.h, DISCOVERY) needs the addresses behind one DNS name, again and
    again, while the node waits to join. A DNS query can take seconds (a dead nameserver, retries),
    and the node loop must never block, so the queries run on a small thread of their own: every
    interval it resolves the name and leaves the result (the contact points as sorted endpoints, or
    why there are none) in a mailbox guarded by a mutex. The node thread takes the latest result
    from its own timer (disc_take): it never waits for DNS, only for that mutex, which the resolver
    holds for a copy.

    Forms of the name (the --discover flag, shoal/management/cluster/bootstrap/
    contact-point-discovery/discover):
      dns:NAME:PORT   the A and AAAA records of NAME, each with PORT (a headless service whose
                      pods all listen on one port)
      srv:NAME        the SRV records of NAME (e.g. _shoal._tcp.shoal.default.svc.cluster.local),
                      each target's A/AAAA records with the record's port
    The queries go through glibc's resolver (res_nsearch on a private res_state, so search domains
    and ndots of /etc/resolv.conf apply), to the nameserver of /etc/resolv.conf, or to the one named
    by `resolver` ("IPv4:port"; tests point it at a dnsmasq on an unprivileged port).

    Contact points are endpoints "tcp://ADDR:PORT" (IPv6: "tcp://[ADDR]:PORT"), sorted by address
    bytes then port, so "the lowest address" is the first, the same on every node.
*/
#ifndef SHOAL_MEMBERSHIP_DISCOVERY_H
#define SHOAL_MEMBERSHIP_DISCOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct disc disc_t;

/* 0 when `spec` is a valid name in one of the forms above; SHOAL_EINVAL with the reason in err. */
int disc_check(const char *spec, char *err, size_t errlen);
/* 0 when `resolver` is "IPv4:port"; SHOAL_EINVAL with the reason in err. */
int disc_check_resolver(const char *resolver, char *err, size_t errlen);

/* Starts resolving `spec` every interval_ms (the first query at once). resolver NULL: the
   system's nameserver. NULL with *err (SHOAL_EINVAL) for a bad spec or resolver. */
disc_t *disc_new(const char *spec, const char *resolver, uint32_t interval_ms, int *err);
/* Tells the thread to stop resolving (the node joined); does not wait. Any thread. */
void disc_stop(disc_t *d);
/* Stops the thread (waits for a query under way, at most the resolver's timeout) and frees.
   NULL-safe. Not from the node thread while a query could be slow: call disc_stop there. */
void disc_destroy(disc_t **self_p);

/* The latest result, if newer than *gen: true, *gen updated, *eps (a malloc'd array of malloc'd
   strings; the caller frees both) and *n set, and why = "" or what went wrong (NXDOMAIN, no
   answer from the nameserver...) when there are no contact points. false: nothing new. */
bool disc_take(disc_t *d, uint64_t *gen, char ***eps, size_t *n, char *why, size_t whylen);
/* Frees what disc_take handed out. */
void disc_free_list(char **eps, size_t n);

#endif
