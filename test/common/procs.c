/*  procs.c — see procs.h. */
#include "procs.h"

#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

int tfree_port(void)
{
    /* below the kernel's ephemeral range (32768-60999): a port from there could be handed to
       another socket (a heartbeat actor, an outgoing connection) before the process that is to
       bind it starts, or while it restarts */
    static unsigned next;
    if (!next)
        next = 20000 + (unsigned)(getpid() * 7919u % 12000u);
    for (int tries = 0; tries < 12000; tries++) {
        int port = (int)next;
        next = next >= 32000 ? 20000 : next + 1;
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0)
            return 0;
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)port);
        int ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
        close(s);
        if (ok)
            return port;
    }
    return 0;
}

#define MAX_PEERS 16

pid_t tproc_spawn(const char *prog, int port, const int *peers, int n_peers, bool small_quarantine,
                  FILE **out)
{
    if (n_peers < 0 || n_peers > MAX_PEERS)
        return -1;
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        tproc_die_with_parent();
        dup2(fd[1], 1);
        close(fd[0]);
        if (small_quarantine) {
            const char *asan = getenv("ASAN_OPTIONS");
            char opts[1024];
            snprintf(opts, sizeof opts, "%s%squarantine_size_mb=8", asan ? asan : "",
                     asan && *asan ? ":" : "");
            setenv("ASAN_OPTIONS", opts, 1);
        }
        char args[MAX_PEERS + 1][16];
        char *argv[MAX_PEERS + 3];
        snprintf(args[0], sizeof args[0], "%d", port);
        argv[0] = (char *)prog;
        argv[1] = args[0];
        for (int i = 0; i < n_peers; i++) {
            snprintf(args[i + 1], sizeof args[i + 1], "%d", peers[i]);
            argv[i + 2] = args[i + 1];
        }
        argv[n_peers + 2] = NULL;
        execv(prog, argv);
        _exit(127);
    }
    close(fd[1]);
    *out = fdopen(fd[0], "r");
    return pid;
}

int tproc_start_mesh(const char *prog, int n, bool small_quarantine, int *ports, pid_t *pids,
                     FILE **outs)
{
    if (n < 1 || n > MAX_PEERS + 1)
        return -1;
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return -1;
    self[len] = 0;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dirname(self), prog);
    for (int i = 0; i < n; i++)
        if (!(ports[i] = tfree_port()))
            return -1;
    for (int i = 0; i < n; i++) {
        int peers[MAX_PEERS], k = 0;
        for (int j = 0; j < n; j++)
            if (j != i)
                peers[k++] = ports[j];
        if ((pids[i] = tproc_spawn(path, ports[i], peers, n - 1, small_quarantine, &outs[i])) < 0)
            return -1;
    }
    for (int i = 0; i < n; i++) {
        /* the node logs to stdout too: skip to its READY line */
        char line[512];
        bool ready = false;
        while (!ready && fgets(line, sizeof line, outs[i]))
            ready = strncmp(line, "READY ", 6) == 0;
        if (!ready)
            return -1;
    }
    return 0;
}

long tproc_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

void tproc_kill_all(pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGCONT);
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0; /* go on: remove what can be removed */
}

void trm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void tproc_die_with_parent(void)
{
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* the parent went before the call took effect */
        _exit(1);
}
