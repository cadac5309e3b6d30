/*  hostile.c — see hostile.h. */
#include "hostile.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

long thostile_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    long size = 0, resident = -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* tcp://a.b.c.d:port */
static bool parse(const char *endpoint, struct sockaddr_in *sa)
{
    char host[64];
    int port;
    if (!endpoint || sscanf(endpoint, "tcp://%63[^:]:%d", host, &port) != 2 || port <= 0 ||
        port > 65535)
        return false;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1;
}

/* The 64-byte ZMTP 3.0 greeting: signature (0xff, 8 bytes of padding, 0x7f), version 3.0, the
   mechanism name padded to 20 bytes, as-server 0, 31 bytes of filler. */
static void greeting(uint8_t g[64], const char *mechanism)
{
    memset(g, 0, 64);
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3;
    g[11] = 0;
    memcpy(g + 12, mechanism, strlen(mechanism) < 20 ? strlen(mechanism) : 20);
}

static bool send_all(int fd, const void *data, size_t len, int64_t deadline)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return false;
        struct pollfd pf = {fd, POLLOUT, 0};
        int left = (int)(deadline - now_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            return false;
    }
    return true;
}

int thostile_open(const char *endpoint, const char *mechanism)
{
    struct sockaddr_in sa;
    if (!parse(endpoint, &sa))
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (mechanism) {
        uint8_t g[64];
        greeting(g, mechanism);
        if (!send_all(fd, g, sizeof g, now_ms() + 5000)) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* Reads what is waiting: true once the peer has closed or reset the connection. */
static bool drained_to_close(int fd)
{
    uint8_t buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0)
            return true;
        if (n < 0)
            return errno != EAGAIN && errno != EINTR;
    }
}

bool thostile_wait_closed(int fd, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        if (drained_to_close(fd))
            return true;
        int left = (int)(deadline - now_ms());
        if (left <= 0)
            return false;
        struct pollfd pf = {fd, POLLIN, 0};
        poll(&pf, 1, left < 50 ? left : 50);
    }
}

void thostile_huge_frame(const char *endpoint, size_t stream, int deadline_ms, thostile_t *out)
{
    memset(out, 0, sizeof *out);
    int64_t deadline = now_ms() + deadline_ms;
    long rss0 = thostile_rss();
    int fd = thostile_open(endpoint, "NULL");
    if (fd < 0)
        return;
    out->connected = true;
    /* flags 0x02: a long frame (8-byte size), not a command, no more parts */
    uint8_t header[9] = {0x02};
    uint64_t size = UINT64_C(1) << 31;
    for (int i = 0; i < 8; i++)
        header[1 + i] = (uint8_t)(size >> (56 - 8 * i));
    static uint8_t chunk[64 * 1024];
    memset(chunk, 'x', sizeof chunk);
    bool ok = send_all(fd, header, sizeof header, deadline);
    while (ok && out->sent < stream && now_ms() < deadline) {
        if (drained_to_close(fd)) {
            out->closed = true;
            break;
        }
        size_t want = stream - out->sent < sizeof chunk ? stream - out->sent : sizeof chunk;
        ssize_t n = send(fd, chunk, want, MSG_NOSIGNAL);
        if (n > 0)
            out->sent += (size_t)n;
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
            ok = false; /* reset: read below */
        else {
            struct pollfd pf = {fd, POLLOUT | POLLIN, 0};
            poll(&pf, 1, 50);
        }
        long g = thostile_rss() - rss0;
        if (g > out->rss_growth)
            out->rss_growth = g;
    }
    /* the listener has it all, or has closed: wait for the close, watching memory */
    while (!out->closed && now_ms() < deadline) {
        if (drained_to_close(fd)) {
            out->closed = true;
            break;
        }
        struct pollfd pf = {fd, POLLIN, 0};
        poll(&pf, 1, 50);
        long g = thostile_rss() - rss0;
        if (g > out->rss_growth)
            out->rss_growth = g;
    }
    long g = thostile_rss() - rss0;
    if (g > out->rss_growth)
        out->rss_growth = g;
    close(fd);
}

void thostile_endless_multipart(const char *endpoint, const char *source, size_t part,
                                size_t stream, int deadline_ms, thostile_t *out)
{
    memset(out, 0, sizeof *out);
    int64_t deadline = now_ms() + deadline_ms;
    long rss0 = thostile_rss();
    struct sockaddr_in sa;
    if (!parse(endpoint, &sa) || part == 0 || part > 65536)
        return;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return;
    if (source) {
        struct sockaddr_in from = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, source, &from.sin_addr) != 1 ||
            bind(fd, (struct sockaddr *)&from, sizeof from) != 0) {
            close(fd);
            return;
        }
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    out->connected = true;
    uint8_t g[64];
    greeting(g, "NULL");
    /* READY: a short command (flags 0x04), "\5READY", Socket-Type = DEALER */
    static const uint8_t ready[] = {0x04, 28,  5,   'R', 'E', 'A', 'D', 'Y', 11,  'S',
                                    'o',  'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e',
                                    0,    0,   0,   6,   'D', 'E', 'A', 'L', 'E', 'R'};
    /* one part: flags 0x03 (MORE, a long frame: 8-byte size), then the body */
    static uint8_t frame[9 + 65536];
    frame[0] = 0x03;
    for (int i = 0; i < 8; i++)
        frame[1 + i] = (uint8_t)((uint64_t)part >> (56 - 8 * i));
    memset(frame + 9, 'x', part);
    bool ok = send_all(fd, g, sizeof g, deadline) && send_all(fd, ready, sizeof ready, deadline);
    size_t off = 0, flen = 9 + part;
    while (ok && out->sent < stream && now_ms() < deadline) {
        if (drained_to_close(fd)) {
            out->closed = true;
            break;
        }
        ssize_t n = send(fd, frame + off, flen - off, MSG_NOSIGNAL);
        if (n > 0) {
            out->sent += (size_t)n;
            off = (off + (size_t)n) % flen;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            out->closed = true; /* reset */
            break;
        } else {
            struct pollfd pf = {fd, POLLOUT | POLLIN, 0};
            poll(&pf, 1, 50);
        }
        long gr = thostile_rss() - rss0;
        if (gr > out->rss_growth)
            out->rss_growth = gr;
    }
    long gr = thostile_rss() - rss0;
    if (gr > out->rss_growth)
        out->rss_growth = gr;
    close(fd);
}
