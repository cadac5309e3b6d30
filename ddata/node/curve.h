/*  curve.h — private to ddata/: CURVE certificates, allow-lists and the process's ZAP handler
    (curve.c), used by the node (system.c) and the client (client.c). The public face is the
    settings' curve_cert / curve_allow_dir and shoal_system_secure_socket in ddata.h.
*/
#ifndef SHOAL_CURVE_H
#define SHOAL_CURVE_H

#include "internal.h"
#include "transport.h"

typedef struct shoal_curve shoal_curve_t;

/* Loads the certificate (cert_file, its secret part from cert_file + "_secret") and the
   allow-list directory. `server`: the caller will bind server sockets, so the process's ZAP
   handler is started and a domain registered for this allow-list. SHOAL_EKEY (logged) when the
   certificate or the directory cannot be read. */
int shoal_curve_new(const char *who, const char *cert_file, const char *allow_dir, bool server,
                    shoal_curve_t **out);
void shoal_curve_destroy(shoal_curve_t **c);
/* A plain node's network rules (PROTECTED MODE, ddata.h): a ZAP domain without keys, admitting
   NULL-mechanism connections from the networks shoal_curve_allow_from sets. Its server sockets
   (shoal_curve_server) get only the domain. */
int shoal_curve_plain_new(const char *who, shoal_curve_t **out);
/* Only connections from these networks (CIDR text, "10.0.0.0/8", "::1", a bare address is /32 or
   /128) pass the ZAP handler; n == 0: any address. SHOAL_EINVAL for a malformed rule (the rules
   in force stay). */
int shoal_curve_allow_from(shoal_curve_t *c, const char *const *cidrs, size_t n);
typedef struct {
    int family; /* AF_INET (v4-mapped IPv6 included) or AF_INET6 */
    uint8_t addr[16];
    unsigned bits;
} shoal_cidr_t;
int shoal_cidr_parse(const char *txt, shoal_cidr_t *out);
/* Whether `address` (text, as ZAP gives it) lies in `net`. */
bool shoal_cidr_match(const shoal_cidr_t *net, const char *address);
/* The name used in logs (a node learns its id after binding). */
void shoal_curve_rename(shoal_curve_t *c, const char *who);

/* Makes `sock` a CURVE server that asks the ZAP handler about this allow-list. Before bind. */
int shoal_curve_server(shoal_curve_t *c, void *sock);
/* Makes `sock` a CURVE client of the node at `endpoint`; SHOAL_EKEY (logged) when no public key
   is known for it, or when the known one is not on the allow-list (a node talks only to keys
   that may talk to it). Before connect. */
int shoal_curve_client(shoal_curve_t *c, void *sock, const char *endpoint);

/* Re-reads the directory now; the number of keys it holds, or SHOAL_EKEY (the list in force
   stays). */
int shoal_curve_reload(shoal_curve_t *c);
/* Re-reads the directory when it changed (looks at most once a second). */
void shoal_curve_tick(shoal_curve_t *c, int64_t now_ms);
/* Remembers the server key of a member at `endpoint` (from its member record): used to connect,
   never to admit. */
int shoal_curve_learn(shoal_curve_t *c, const char *endpoint, const uint8_t key[32]);

const char *shoal_curve_public_txt(const shoal_curve_t *c);
/* Whether the server key known for `endpoint` has left the list (false when none is known). */
bool shoal_curve_server_revoked(shoal_curve_t *c, const char *endpoint);
/* Whether the key a connection authenticated with (its ZAP User-Id, Z85) is on the list now. */
bool shoal_curve_allows_z85(shoal_curve_t *c, const char *z85);
/* Counts a connection refused after it was admitted (its key left the list). */
void shoal_curve_count_refused(shoal_curve_t *c);
/* Grows at every load of the directory: connections admitted before it must be checked again. */
uint64_t shoal_curve_generation(const shoal_curve_t *c);

/* Connections admitted and refused by the ZAP handler for this allow-list, and keys on it. */
void shoal_curve_counts(shoal_curve_t *c, uint64_t *admitted, uint64_t *refused, uint64_t *keys);

#endif
