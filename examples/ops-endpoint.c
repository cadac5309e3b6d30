/*  ops-endpoint.c — operating a node from C: Shoal's log lines into the application's own
    logging, and the management endpoint (metrics, health probes, the cluster as JSON).

      cc -o ops-endpoint ops-endpoint.c $(pkg-config --cflags --libs shoal)
      ./ops-endpoint

    The log handler gets every line Shoal writes at or above the level (here it prefixes them
    and counts them; an application would hand them to syslog or its own logger). The endpoint
    is started on an ephemeral port of 127.0.0.1 and asked GET /health/alive over a plain socket,
    as a liveness probe would (docs/operations.md lists the routes).

    Exit 0 when the handler saw the node's start line and the probe answered 200; 1 otherwise.
    test_install builds and runs this file against the staged `scons install`.
*/
#define _POSIX_C_SOURCE 200809L

#include <shoal/ddata.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Runs on the thread that logs (often a node's thread): it must not block long, nor log through
   Shoal. */
static void to_my_log(shoal_log_level_t level, const char *message, void *arg)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    int *lines = arg;
    __atomic_add_fetch(lines, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "[my-app %s] %s\n", names[level], message);
}

/* GET path on 127.0.0.1:port; the HTTP status, or -1. */
static int http_get(uint16_t port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char buf[512];
    int status = -1;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&to, sizeof to) == 0) {
        int n = snprintf(buf, sizeof buf, "GET %s HTTP/1.0\r\n\r\n", path);
        ssize_t got = write(fd, buf, (size_t)n) == n ? read(fd, buf, sizeof buf - 1) : -1;
        if (got > 0) {
            buf[got] = 0;
            sscanf(buf, "HTTP/1.%*d %d", &status);
        }
    }
    if (fd >= 0)
        close(fd);
    return status;
}

int main(void)
{
    static int lines = 0;
    shoal_log_set_level(SHOAL_LOG_INFO);
    shoal_log_set_handler(to_my_log, &lines); /* NULL: back to stderr */

    int err = 0, rc = 1;
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    shoal_metrics_t *m = sys ? shoal_http_start(sys, "127.0.0.1:0", &err) : NULL; /* [HOST:]PORT */
    if (!m) {
        fprintf(stderr, "ops-endpoint: %s\n", shoal_strerror(err));
    } else {
        int status = http_get(shoal_metrics_port(m), "/health/alive");
        printf("GET /health/alive on port %u: %d; %d log lines handled\n", shoal_metrics_port(m),
               status, __atomic_load_n(&lines, __ATOMIC_RELAXED));
        rc = status == 200 && __atomic_load_n(&lines, __ATOMIC_RELAXED) > 0 ? 0 : 1;
    }
    shoal_metrics_stop(&m); /* before the node (and what runs on it) is destroyed */
    shoal_system_destroy(&sys);
    shoal_log_set_handler(NULL, NULL);
    return rc;
}
