/*  tools.c — see tools.h. */
#include "tools.h"
#include "procs.h"

#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

bool ttool_find(const char *name, char *path, size_t cap)
{
    char self[4000];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        /* build/<variant>/bin/test_x: check, vg, ... */
        char *bin = strstr(self, "/build/");
        char *slash = bin ? strchr(bin + 7, '/') : NULL;
        if (bin && slash && strncmp(slash, "/bin/", 5) == 0) {
            *bin = 0;
            snprintf(path, cap, "%s/build/bin/%s", self, name);
            if (access(path, X_OK) == 0)
                return true;
        }
    }
    snprintf(path, cap, "build/bin/%s", name);
    return access(path, X_OK) == 0;
}

void ttool_tree_file(const char *rel, char *out, size_t cap)
{
    char self[4000];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    char *build = strstr(self, "/build/");
    if (build) {
        *build = 0;
        snprintf(out, cap, "%s/%s", self, rel);
    } else {
        snprintf(out, cap, "%s", rel);
    }
}

bool ttool_source_root(const char *name, char *root, size_t cap)
{
    char any[PATH_MAX];
    if (!ttool_find(name, any, sizeof any)) {
        fprintf(stderr,
                "build/bin/%s is missing: the target that runs this test must build the "
                "release programs\n",
                name);
        return false;
    }
    char *cut = strncmp(any, "build/bin/", 10) == 0 ? any : strstr(any, "/build/bin/");
    if (!cut)
        return false;
    *cut = 0;
    char real[PATH_MAX];
    if (!realpath(any[0] ? any : ".", real) || strlen(real) >= cap)
        return false;
    snprintf(root, cap, "%s", real);
    return true;
}

/* Runs a shell command line, its stdout into out (NUL-terminated, cut at cap-1 bytes). */
static int run_shell(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = 0;
    for (;;) {
        size_t r = fread(out + n, 1, cap - 1 - n, p);
        if (r == 0)
            break;
        n += r;
        if (n == cap - 1) { /* keep draining so the program is not killed by SIGPIPE */
            char sink[256];
            while (fread(sink, 1, sizeof sink, p) > 0)
                ;
            break;
        }
    }
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int ttool_run(const char *path, const char *args, char *out, size_t cap)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", path, args);
    return run_shell(cmd, out, cap);
}

int ttool_run_stream(const char *path, const char *args, int fd, char *out, size_t cap)
{
    char cmd[8192];
    const char *keep = fd == 2 ? "2>&1 >/dev/null" : "2>/dev/null";
    snprintf(cmd, sizeof cmd, "'%s' %s %s", path, args, keep);
    return run_shell(cmd, out, cap);
}

int ttool_spawn(const char *path, char *const argv[], const char *log)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return (int)pid;
    tproc_die_with_parent();
    int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : open("/dev/null", O_WRONLY);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    execv(path, argv);
    _exit(127);
}

int ttool_runf(const char *path, char *out, size_t cap, const char *fmt, ...)
{
    char args[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return ttool_run(path, args, out, cap);
}

void ttool_kill(int *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

long long ttool_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ttool_members_up(const char *json, int *all, bool *converged)
{
    int up = 0, n = 0;
    for (const char *p = json; (p = strstr(p, "\"status\":\"Up\"")); p++)
        up++;
    for (const char *p = json; (p = strstr(p, "\"status\":")); p++)
        n++;
    if (all)
        *all = n;
    if (converged)
        *converged = strstr(json, "\"converged\":true") != NULL;
    return up;
}

void ttool_tail_logs(const char *dir, const char *prefix, int n, int lines)
{
    for (int i = 0; i < n; i++) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "echo '--- %s%d.log' >&2; tail -n %d '%s/%s%d.log' >&2", prefix,
                 i, lines, dir, prefix, i);
        if (system(cmd) != 0)
            break;
    }
}
