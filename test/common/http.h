/*  http.h — a raw HTTP/1.0 client over a TCP socket, for the tests of the management endpoint
    (test_metrics, test_http): what Prometheus, a kubelet or curl send, with nothing in between
    (libcurl is not a dependency), so the tests also send what no library would (a request line
    of garbage, a 70 KB URL).
*/
#ifndef SHOAL_TEST_HTTP_H
#define SHOAL_TEST_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int status;
    char content_type[128];
    char allow[64];
    char *body; /* NUL-terminated */
    char *raw;
} thttp_resp_t;

void thttp_free(thttp_resp_t *r);
/* Sends `req` (len bytes) to host:port (an IPv4 literal; NULL = 127.0.0.1), from the local
   address `from` when not NULL, and reads until the server closes. False when nothing parseable
   came back (a connection refused included). */
bool thttp_raw(const char *host, uint16_t port, const char *from, const char *req, size_t len,
               thttp_resp_t *out);
/* GET path on 127.0.0.1:port. */
bool thttp_get(uint16_t port, const char *path, thttp_resp_t *out);
/* POST body to path on host:port from `from` (both may be NULL: loopback), as application/json
   (what the endpoint wants of a POST: ddata.h, HARDENING). */
bool thttp_post(const char *host, uint16_t port, const char *from, const char *path,
                const char *body, thttp_resp_t *out);
/* The status of GET path (-1: no answer). */
int thttp_status(uint16_t port, const char *path);
/* True when `text` parses as JSON (python3's json module; the tests link no JSON library). */
bool thttp_json_ok(const char *text);
/* Runs `promtool check metrics` on text: NULL when it passes, else its complaint (static). */
const char *thttp_promtool(const char *text);

/* A local IPv4 address that is not loopback (the machine's own interface), or false: what a
   probe dialling the pod's address connects to on a wildcard bind. */
bool thttp_outside_address(char *out, size_t cap);

#endif
