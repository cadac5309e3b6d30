/*  tools.h — tests that run the release programs (build/bin/shoal-cluster, ddata-dump, ...) the
    way an operator does, through the shell, and read what they print.
*/
#ifndef SHOAL_TEST_TOOLS_H
#define SHOAL_TEST_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

/* build/<variant>/bin/test_x -> build/bin/<name> (the path does not depend on the directory the
   test runs in); false when the program is missing (the tests fail then, naming it: the target
   that runs them must build it). */
bool ttool_find(const char *name, char *path, size_t cap);
/* The source tree (an absolute path): the directory that holds build/bin/<name>, the release
   program the test needs; false, with a message naming the program, when it is missing. */
bool ttool_source_root(const char *name, char *root, size_t cap);
/* A file of the source tree by its path in the tree ("test/cluster/x.py"), from this binary's
   path (build/<variant>/bin/test_x), whichever directory the test runs in; relative to the
   current directory when the binary is elsewhere. */
void ttool_tree_file(const char *rel, char *out, size_t cap);
/* Runs "path args" with stderr merged into stdout; the output, NUL-terminated and cut at cap-1
   bytes, goes to out. Returns the exit code, or -1 when the shell did not exit normally. */
int ttool_run(const char *path, const char *args, char *out, size_t cap);
/* ttool_run keeping only one stream: fd 1, stdout (stderr thrown away), or 2, stderr (stdout thrown
   away), to tell where a program writes. */
int ttool_run_stream(const char *path, const char *args, int fd, char *out, size_t cap);
/* ttool_run with the arguments formatted like printf. */
int ttool_runf(const char *path, char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Starts `path` with argv (argv[0] included, NULL-terminated) in the background, its stdout and
   stderr appended to `log` (NULL: /dev/null). The child's pid; the caller kills and reaps it. */
int ttool_spawn(const char *path, char *const argv[], const char *log);
/* SIGKILL to *pid (when > 0), reaped, *pid set to 0. */
void ttool_kill(int *pid);
/* The monotonic clock in ms, for the tests' deadlines. */
long long ttool_now_ms(void);
/* `shoal-cluster --json members` output: how many members are Up (*all: how many members,
   when not NULL), and whether the view says it converged. */
int ttool_members_up(const char *json, int *all, bool *converged);
/* For a failing test: the last `lines` lines of dir/<prefix><i>.log, i in [0, n), to stderr. */
void ttool_tail_logs(const char *dir, const char *prefix, int n, int lines);

#endif
