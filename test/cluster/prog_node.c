/*  prog_node — one Shoal node with a replicator, as its own process, for tests that kill and
    restart processes. Usage: prog_node PORT [PEER_PORT ...]
    Binds tcp://127.0.0.1:PORT, connects to the peers on 127.0.0.1, adds each as a counted peer of
    the default replicator once its handshake is done, serves client requests, prints
    "READY <node id>" on stdout, and runs until killed (SIGTERM stops it cleanly).
*/
#include "ddata.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static shoal_replicator_t *rep;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static void on_peer(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
                    const shoal_node_t *old, uint64_t count, void *arg)
{
    (void)sys;
    (void)count;
    (void)arg;
    if (!rep)
        return;
    if (ev == SHOAL_PEER_RESTARTED && old)
        shoal_replicator_remove_peer(rep, old);
    if (ev == SHOAL_PEER_UP || ev == SHOAL_PEER_RESTARTED)
        shoal_replicator_add_peer(rep, node, true, shoal_node_port(node));
}

typedef struct {
    int n;
    char **ports;
} peers_t;

static int setup(shoal_system_t *sys, void *arg)
{
    peers_t *p = arg;
    shoal_system_on_peer(sys, on_peer, NULL);
    for (int i = 0; i < p->n; i++) {
        char ep[64];
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%s", p->ports[i]);
        shoal_system_connect(sys, ep);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: prog_node PORT [PEER_PORT ...]\n");
        return 2;
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%s", argv[1]);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = ep;
    int err = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    if (!sys) {
        fprintf(stderr, "prog_node: cannot start on %s: %s\n", ep, shoal_strerror(err));
        return 1;
    }
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    rs.gossip_interval_ms = 200;
    rs.delta_interval_ms = 50;
    rep = shoal_replicator_new(sys, &rs, &err);
    if (!rep) {
        fprintf(stderr, "prog_node: replicator: %s\n", shoal_strerror(err));
        return 1;
    }
    peers_t p = {argc - 2, argv + 2};
    shoal_system_call(sys, setup, &p);
    printf("READY %s\n", shoal_node_id(shoal_system_self(sys)));
    fflush(stdout);
    while (!stop)
        usleep(20000);
    shoal_replicator_destroy(&rep);
    shoal_system_destroy(&sys);
    return 0;
}
