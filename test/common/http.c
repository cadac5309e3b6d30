/*  http.c — the raw HTTP client of the endpoint tests (see http.h). */
#include "http.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "cluster.h"

void thttp_free(thttp_resp_t *r)
{
    free(r->raw);
    memset(r, 0, sizeof *r);
}

static void header(const char *head, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line; line = strstr(line + 2, "\r\n"))
        if (strncasecmp(line + 2, name, n) == 0 && line[2 + n] == ':') {
            const char *v = line + 3 + n;
            while (*v == ' ')
                v++;
            size_t len = strcspn(v, "\r");
            snprintf(out, cap, "%.*s", (int)len, v);
        }
}

bool thttp_raw(const char *host, uint16_t port, const char *from, const char *req, size_t len,
               thttp_resp_t *out)
{
    memset(out, 0, sizeof *out);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct timeval tv = {10 * tscale(), 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (from) {
        struct sockaddr_in local = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, from, &local.sin_addr) != 1 ||
            bind(fd, (struct sockaddr *)&local, sizeof local) != 0) {
            close(fd);
            return false;
        }
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host ? host : "127.0.0.1", &sa.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return false;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server may answer (and close) before it has read everything */
        off += (size_t)n;
    }
    size_t cap = 4096, got = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (got + 1 >= cap)
            buf = realloc(buf, cap *= 2);
        ssize_t n = recv(fd, buf + got, cap - got - 1, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = 0;
    out->raw = buf;
    if (sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1)
        return false;
    char *end = strstr(buf, "\r\n\r\n");
    if (!end)
        return false;
    *end = 0;
    out->body = end + 4;
    header(buf, "Content-Type", out->content_type, sizeof out->content_type);
    header(buf, "Allow", out->allow, sizeof out->allow);
    return true;
}

bool thttp_get(uint16_t port, const char *path, thttp_resp_t *out)
{
    char req[4096];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
    return thttp_raw(NULL, port, NULL, req, (size_t)n, out);
}

bool thttp_post(const char *host, uint16_t port, const char *from, const char *path,
                const char *body, thttp_resp_t *out)
{
    char req[8192];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     path, strlen(body), body);
    return thttp_raw(host, port, from, req, (size_t)n, out);
}

int thttp_status(uint16_t port, const char *path)
{
    thttp_resp_t r;
    int status = thttp_get(port, path, &r) ? r.status : -1;
    thttp_free(&r);
    return status;
}

/* Writes text to a scratch file and runs `cmd < file`; the exit code, its output in out. */
static int run_on(const char *text, const char *cmd, char *out, size_t cap)
{
    char path[] = "/tmp/shoal-http-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    bool ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    if (!ok) {
        unlink(path);
        return -1;
    }
    char line[512];
    snprintf(line, sizeof line, "%s < %s 2>&1", cmd, path);
    FILE *p = popen(line, "r");
    size_t got = 0;
    if (p) {
        size_t n;
        while (got + 1 < cap && (n = fread(out + got, 1, cap - 1 - got, p)) > 0)
            got += n;
    }
    out[got] = 0;
    int rc = p ? pclose(p) : -1;
    unlink(path);
    return rc;
}

bool thttp_json_ok(const char *text)
{
    char out[1024];
    return run_on(text, "python3 -c 'import json,sys; json.load(sys.stdin)'", out,
                  sizeof out) == 0;
}

const char *thttp_promtool(const char *text)
{
    static char out[4096];
    int rc = run_on(text, "promtool check metrics", out, sizeof out);
    return rc == 0 ? NULL : out[0] ? out : "promtool did not run (is `prometheus` installed?)";
}

bool thttp_outside_address(char *out, size_t cap)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
            continue;
        struct in_addr a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        if ((ntohl(a.s_addr) >> 24) == 127)
            continue;
        found = inet_ntop(AF_INET, &a, out, (socklen_t)cap) != NULL;
    }
    freeifaddrs(ifs);
    return found;
}
