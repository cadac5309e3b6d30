/*  hostile.h — hostile clients at the socket level, for the tests of what a listener holds for a
    stranger (ddata.h, LISTENERS): raw TCP connections that speak just enough ZMTP to reach
    libzmq's decoder, and this process's resident memory. No cmocka here.
*/
#ifndef SHOAL_TEST_HOSTILE_H
#define SHOAL_TEST_HOSTILE_H

#include <stdbool.h>
#include <stddef.h>

/* Resident memory of this process in bytes (/proc/self/statm), -1 if unreadable. */
long thostile_rss(void);

typedef struct {
    bool connected;  /* the TCP connection was made */
    bool closed;     /* the listener closed or reset it before the deadline */
    size_t sent;     /* bytes of the announced frame the kernel took from us */
    long rss_growth; /* the most this process's RSS grew meanwhile, in bytes */
} thostile_t;

/* Connects to `endpoint` (tcp://a.b.c.d:port), sends a ZMTP 3.0 greeting (NULL mechanism, as a
   client) and then the header of a frame announcing 2^31 bytes (long-frame flag 0x02, 8-byte
   big-endian size), then streams up to `stream` bytes of its body, and waits up to deadline_ms
   in all for the listener to close the connection, sampling this process's RSS throughout.
   Closes its end before returning. */
void thostile_huge_frame(const char *endpoint, size_t stream, int deadline_ms, thostile_t *out);

/* Connects to `endpoint` from `source` (an address of this machine, e.g. "127.0.0.2"; NULL: the
   kernel's choice), speaks ZMTP 3.0 as a NULL-mechanism DEALER (greeting, READY) and sends one
   multipart message of `part`-byte parts that never ends (each part says MORE), up to `stream`
   bytes, until the listener closes the connection or deadline_ms pass, sampling this process's
   RSS (the node's, when it runs here). Closes its end before returning. */
void thostile_endless_multipart(const char *endpoint, const char *source, size_t part,
                                size_t stream, int deadline_ms, thostile_t *out);

/* A raw connection to `endpoint` that sends a ZMTP 3.0 greeting asking for `mechanism` ("NULL",
   "CURVE", ...; NULL: sends nothing at all). The descriptor, or -1. */
int thostile_open(const char *endpoint, const char *mechanism);
/* True when the listener closed (or reset) fd within timeout_ms; anything it sent is read and
   dropped. */
bool thostile_wait_closed(int fd, int timeout_ms);

#endif
