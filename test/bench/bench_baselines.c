/*  bench_baselines.c — the reference figures of baseline.h on their own, so that a reader of the
    sharding benchmarks sees what this machine does without Shoal in the way.

    baseline_zmq_tell_64b: raw libzmq one-way 64-byte messages per second, DEALER -> ROUTER.
    baseline_zmq_reqrep_w256: raw libzmq requests per second, 256 in flight, 64 bytes, echoed.
    baseline_zmq_rtt: median microseconds of one 64-byte request/reply.
    baseline_redis_incr_p1 / _p16: INCR per second on a 3-master Redis Cluster, redis-benchmark
    --cluster with 50 clients, unpipelined and 16 pipelined per client. Without Redis installed
    a note says so instead of these two figures.

    Each figure takes 1-3 s; the whole program well under 30 s. Exits nonzero if a measurement
    that could run failed.
*/
#include "baseline.h"
#include "bench.h"

#include <stdio.h>

#define ZMQ_SECONDS   1.5
#define RTT_SAMPLES   20000
#define REDIS_MASTERS 3
#define REDIS_CLIENTS 50
/* about 2.5 s each at the 100k and 850k INCR/s this kind of machine does; shorter runs read low
   (baseline_redis_incr) */
#define REDIS_REQUESTS_P1  250000
#define REDIS_REQUESTS_P16 2000000

static int report(const char *name, double value, const char *unit)
{
    if (value <= 0) {
        fprintf(stderr, "bench_baselines: %s failed\n", name);
        return 1;
    }
    bench_report(name, value, unit, 0);
    return 0;
}

int main(void)
{
    int failed = 0;
    failed |= report("baseline_zmq_tell_64b", baseline_zmq_dealer_router_64b(ZMQ_SECONDS), "ops/s");
    failed |= report("baseline_zmq_reqrep_w256", baseline_zmq_reqrep_window(256, 64, ZMQ_SECONDS),
                     "ops/s");
    failed |= report("baseline_zmq_rtt", baseline_zmq_rtt_us(RTT_SAMPLES), "us");

    baseline_redis_t rc;
    int err = baseline_redis_cluster_start(&rc, REDIS_MASTERS);
    if (err == BASELINE_EMISSING) {
        bench_note("baseline_redis_incr: skipped, %s", rc.err);
        return failed;
    }
    if (err != 0) {
        fprintf(stderr, "bench_baselines: redis cluster: %s\n", rc.err);
        return 1;
    }
    bench_note("redis cluster: %d masters, the first on port %d; redis-benchmark -c %d -t incr",
               rc.n, rc.port[0], REDIS_CLIENTS);
    failed |= report("baseline_redis_incr_p1",
                     baseline_redis_incr(&rc, REDIS_CLIENTS, 1, REDIS_REQUESTS_P1), "ops/s");
    failed |= report("baseline_redis_incr_p16",
                     baseline_redis_incr(&rc, REDIS_CLIENTS, 16, REDIS_REQUESTS_P16), "ops/s");
    baseline_redis_cluster_stop(&rc);
    return failed;
}
