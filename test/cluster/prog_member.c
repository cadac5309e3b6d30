/*  prog_member.c — a cluster member in its own process, for tests that kill, pause and restart
    members: prog_member PORT SEED_PORT [STABLE_AFTER_MS]. SEED_PORT 0 forms a new cluster. Once
    Up it adds 1 to the GCounter "hits" (so its removal has something to prune) and prints
    "UP <node id>"; on SIGTERM it leaves gracefully and exits 0 once its cluster part is done.
*/
#include "members.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static int hit(shoal_crdt_t *v, void *arg)
{
    return shoal_gcounter_increment(v, arg, 1);
}

static void hit_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)arg;
    if (status != 0)
        fprintf(stderr, "prog_member: update of %s failed: %s\n", key, shoal_strerror(status));
}

static void on_up(shoal_cluster_t *c, void *arg)
{
    shoal_replicator_t *data = arg;
    shoal_consistency_t local = {.level = SHOAL_LOCAL};
    const shoal_node_t *self = shoal_system_self(shoal_cluster_system(c));
    shoal_replicator_update(data, "hits", shoal_gcounter_new(), &local, hit, (void *)self, hit_done,
                            NULL);
    printf("UP %s\n", shoal_node_id(self));
    fflush(stdout);
}

static int register_up(shoal_system_t *sys, void *arg)
{
    (void)sys;
    void **a = arg;
    return shoal_cluster_on_up(a[0], on_up, a[1]);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: prog_member PORT SEED_PORT [STABLE_AFTER_MS]\n");
        return 2;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    char ep[64], seed[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%s", argv[1]);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = ep;
    int err = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    if (!sys) {
        fprintf(stderr, "prog_member: cannot start on %s: %s\n", ep, shoal_strerror(err));
        return 1;
    }
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    if (argc > 3)
        cs.stable_after_ms = (uint32_t)atoi(argv[3]);
    const char *seeds[1] = {seed};
    if (strcmp(argv[2], "0") == 0)
        snprintf(seed, sizeof seed, "%s", ep);
    else
        snprintf(seed, sizeof seed, "tcp://127.0.0.1:%s", argv[2]);
    shoal_replicator_settings_t rs;
    tmember_data_settings(&rs);
    shoal_replicator_t *data = shoal_replicator_new(sys, &rs, &err);
    shoal_cluster_t *c = data ? shoal_cluster_new(sys, &cs, &err) : NULL;
    if (!c) {
        fprintf(stderr, "prog_member: %s\n", shoal_strerror(err));
        return 1;
    }
    shoal_cluster_follow(c, data);
    void *a[2] = {c, data};
    shoal_system_call(sys, register_up, a);
    shoal_cluster_join(c, seeds, 1);
    printf("READY %s\n", shoal_node_id(shoal_system_self(sys)));
    fflush(stdout);
    while (!stop && !shoal_cluster_terminated(c)) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    if (stop) {
        shoal_cluster_shutdown(c);
        for (int i = 0; i < 1500 && !shoal_cluster_terminated(c); i++) {
            struct timespec ts = {0, 20 * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    shoal_cluster_destroy(&c);
    shoal_replicator_destroy(&data);
    shoal_system_destroy(&sys);
    return 0;
}
