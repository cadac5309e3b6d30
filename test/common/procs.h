/*  procs.h — nodes run as child processes, for the tests and benchmarks that kill, pause or
    measure them (test_kill, test_stalled_peer, bench_rss_churn): free ports, a child with its
    stdout on a pipe, its RSS, and killing the lot; and removing their scratch directories. No
    cmocka here, so benchmarks link it too.
*/
#ifndef SHOAL_TEST_PROCS_H
#define SHOAL_TEST_PROCS_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

/* A TCP port on 127.0.0.1 that was free a moment ago, below the ephemeral range (for processes
   that bind it, and bind it again when restarted); 0 if none. */
int tfree_port(void);
/* In a forked child: dies with the test process (SIGKILL when its parent goes), so a test that
   fails or is killed at its deadline leaves no node running (and holding the runner's pipe). */
void tproc_die_with_parent(void);

/* Starts `prog <port> <peer port>...` with its stdout on a pipe (*out, to read its READY line
   and its log). small_quarantine: ASan keeps at most 8 MB of freed blocks back in the child, so
   they do not read as growth of its RSS. -1 when fork or pipe fail. */
pid_t tproc_spawn(const char *prog, int port, const int *peers, int n_peers, bool small_quarantine,
                  FILE **out);

/* n nodes of `prog` (a program beside this test binary, like prog_node) on fresh ports, each told
   the others' ports, waited for until each has printed its READY line: ports[], pids[] and
   outs[] filled. 0, or -1 (what started is in pids[], for tproc_kill_all). */
int tproc_start_mesh(const char *prog, int n, bool small_quarantine, int *ports, pid_t *pids,
                     FILE **outs);

/* VmRSS of a process in kB, -1 when it is gone. */
long tproc_rss_kb(pid_t pid);

/* SIGCONT (a paused child must be able to die), SIGKILL and reap each child; zeroes the slots. */
void tproc_kill_all(pid_t *pids, int n);

/* Removes the directory tree at `dir` (a test's scratch directory), what it can of it. */
void trm_tree(const char *dir);

#endif
