/*  baseline.h — reference figures that Shoal's benchmarks are read against, measured in the same
    run on the same machine (bench.h: ratio = shoal / baseline holds on a noisy machine).

    Raw ZeroMQ (libzmq, no czmq), all over tcp://127.0.0.1 with an ephemeral port, both ends in
    this process on two threads:
      - one-way: a DEALER sends 64-byte messages, one zmq_msg_t each, to a ROUTER; counted at
        the receiver. What a transport costs that sends one ZeroMQ message per message.
      - request/reply: a DEALER keeps `window` requests in flight, a ROUTER thread sends every
        request straight back. What a request/reply layer (a shard region asking a coordinator,
        an entity answering an ask) costs at best with that many in flight.
      - round trip: the same with one request in flight, one sample per request, the median.

    Redis Cluster: n_masters `redis-server` processes (Debian package redis-server), cluster mode,
    no persistence, on loopback ports below the kernel's ephemeral range, joined by
    `redis-cli --cluster create`, and loaded by `redis-benchmark --cluster -t incr`: a sharded
    counter store whose client routes each key to its shard, the nearest off-the-shelf thing to
    sharded entities that each keep a counter. The servers die with this process
    (PR_SET_PDEATHSIG) if it dies before baseline_redis_cluster_stop.

    Every function returns a negative value on failure, with the reason on stderr (or in
    baseline_redis_t.err for baseline_redis_cluster_start); none exits the process.
*/
#ifndef SHOAL_BASELINE_H
#define SHOAL_BASELINE_H

#include <stddef.h>
#include <sys/types.h>

/* Messages per second, 64-byte payload, DEALER -> ROUTER one way, for at least min_seconds. */
double baseline_zmq_dealer_router_64b(double min_seconds);

/* Requests completed per second with `window` (1..65536) msg_bytes-byte requests in flight from
   a DEALER to an echoing ROUTER, for at least min_seconds after a short warm-up. */
double baseline_zmq_reqrep_window(int window, size_t msg_bytes, double min_seconds);

/* Median round-trip time in microseconds of one 64-byte request to an echoing ROUTER, over
   `samples` (>= 1) requests. */
double baseline_zmq_rtt_us(int samples);

#define BASELINE_REDIS_MAX 8

/* baseline_redis_cluster_start returns BASELINE_EMISSING when a Redis program is not installed
   (the bench then prints a note instead of a figure), BASELINE_EFAIL for anything else. */
#define BASELINE_EFAIL    (-1)
#define BASELINE_EMISSING (-2)

typedef struct {
    int n;                            /* servers started, so to be stopped */
    int port[BASELINE_REDIS_MAX];     /* client port; the cluster bus listens on port + 10000 */
    pid_t pid[BASELINE_REDIS_MAX];    /* 0 once the server has been reaped */
    char dir[BASELINE_REDIS_MAX][64]; /* the server's temp dir: its nodes.conf and redis.log */
    char err[256];                    /* why start failed, one line */
} baseline_redis_t;

/* Starts n_masters (1..BASELINE_REDIS_MAX; the cluster needs 3 or more) servers, each in its own
   temp dir, waits until each answers PING, creates a cluster of them with no replicas and waits
   until every node reports cluster_state:ok. Returns 0, or a negative code with rc->err set and
   nothing left running (no need to call stop then). */
int baseline_redis_cluster_start(baseline_redis_t *rc, int n_masters);

/* INCR requests per second that `redis-benchmark --cluster` reports with `clients` connections,
   `pipeline` requests pipelined per connection and `requests` in all, or a negative value. */
double baseline_redis_incr(const baseline_redis_t *rc, int clients, int pipeline, int requests);

/* Stops the servers (SIGTERM, then SIGKILL after a deadline), reaps them and removes their temp
   dirs. Safe on a zeroed struct and twice. */
void baseline_redis_cluster_stop(baseline_redis_t *rc);

#endif
