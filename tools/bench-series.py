#!/usr/bin/env python3
"""bench-series.py — one bench figure N times beside its baseline, with the median and the spread,
so that a figure on a shared 2-core machine is a distribution, not one draw.

    python3 tools/bench-series.py [-n 5] [--cpus 0] [--bin build/bin] FIGURE

FIGURE is one of
    write_majority_w1, _w16, _w256   bench_replicator with BENCH_REPLICATOR_ONLY=majority; each run
                                     measures the raw ZeroMQ window and then Shoal's, back to back
    converge_cold_N (N = 2..100)     bench_membership --cold shoal N, then --cold serf N, in turns
                                     (N nodes started at once, default timings; Serf's lan profile)

--cpus LIST runs every run under `taskset -c LIST` (the bench and all its children inherit it),
Shoal's side and the baseline's alike: the two get the same CPU, so a ratio that still moves
with the machine's load is not CPU starvation alone.

Beside each run: the 1-minute load average before it (/proc/loadavg) and the CPU the rest of the
machine used during it ("others", in cores: busy time from /proc/stat less this series' own
children's CPU), which says how loaded a run was better than the load average does (the load
average counts this bench's own processes too: 100 members starting make it 20 by themselves).
converge_cold_N runs also print the CPU seconds each side used (the whole bench run: start,
convergence and the kill of every process).
Prints one line per run and a summary line per column: median and min-max. A convergence that
misses the bench's deadline counts as inf (above every other value, so the median still holds;
the run's ratio is then inf when Shoal's side failed, 0 when only the baseline's did) and makes
the exit code 1; write_majority runs that print no figure stop the series (exit 1).
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time


def busy_jiffies():
    with open('/proc/stat') as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal: all but idle and iowait
    return sum(v[:8]) - v[3] - v[4]


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def loadavg():
    with open('/proc/loadavg') as f:
        return float(f.read().split()[0])


def run(cmd, env, cpus):
    """Runs cmd; returns (stdout, stderr, CPU s of cmd and its children, others' cores, load
    before)."""
    if cpus is not None:
        cmd = ['taskset', '-c', cpus] + cmd
    load = loadavg()
    hz = os.sysconf('SC_CLK_TCK')
    b0, c0, t0 = busy_jiffies(), children_cpu_s(), time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b1, c1, t1 = busy_jiffies(), children_cpu_s(), time.monotonic()
    others = max(0.0, ((b1 - b0) / hz - (c1 - c0)) / (t1 - t0))
    return p.stdout, p.stderr, c1 - c0, others, load


def ratio(value, base):
    """value / base; a failed Shoal run is inf (ranked worst) even when the baseline failed too,
    a failed baseline alone 0 (ranked best)."""
    if value == float('inf'):
        return value
    return value / base


def spread(name, values, fmt):
    if not values:
        return '%s: no values' % name
    return '%s: median %s, min-max %s-%s (n=%d)' % (
        name, fmt % statistics.median(values), fmt % min(values), fmt % max(values), len(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('figure')
    ap.add_argument('-n', type=int, default=5, help='runs (default 5)')
    ap.add_argument('--cpus', help='taskset -c CPUS for every run, both sides')
    ap.add_argument('--bin', default='build/bin', help='where the bench programs are')
    a = ap.parse_args()

    rows = []  # (value, baseline, load, others)
    failed = 0
    m = re.fullmatch(r'write_majority_w(1|16|256)', a.figure)
    c = re.fullmatch(r'converge_cold_(\d+)(_nodes)?', a.figure)
    if not m and not (c and 2 <= int(c.group(1)) <= 100):
        ap.error('unknown figure %s (write_majority_wW or converge_cold_N)' % a.figure)
    print('# %s, %d runs%s; columns: shoal, baseline, ratio, load1 before, others (cores)' %
          (a.figure, a.n, ', taskset -c ' + a.cpus if a.cpus else ''))
    sys.stdout.flush()
    for i in range(a.n):
        if m:
            env = dict(os.environ, BENCH_REPLICATOR_ONLY='majority')
            out, err, _, others, load = run([a.bin + '/bench_replicator'], env, a.cpus)
            cpu = None
            line = re.search(r'^BENCH name=%s value=(\S+) unit=\S+ baseline=(\S+)' % a.figure, out,
                             re.M)
            if not line:
                sys.stderr.write(out + err)
                return 1
            value, base = float(line.group(1)), float(line.group(2))
        else:
            n = c.group(1)
            got, cpu = [], []
            others = 0.0
            load = loadavg()
            for kind in ('shoal', 'serf'):
                out, err, used, oth, _ = run([a.bin + '/bench_membership', '--cold', kind, n],
                                             dict(os.environ), a.cpus)
                cpu.append(used)
                ms = re.search(r'converged in (\d+) ms', err)
                if not ms:
                    # not converged by the bench's deadline: a value above every other, so the
                    # median still means something; the output says why
                    sys.stderr.write(out + err)
                    failed += 1
                got.append(float(ms.group(1)) if ms else float('inf'))
                others = max(others, oth)
            value, base = got
        rows.append((value, base, load, others))
        print('run %d: %.6g %.6g %.3f load1 %.2f others %.2f%s' %
              (i + 1, value, base, ratio(value, base), load, others,
               ' cpu s %.2f %.2f' % tuple(cpu) if cpu else ''))
        sys.stdout.flush()
    print(spread('shoal', [r[0] for r in rows], '%.6g'))
    print(spread('baseline', [r[1] for r in rows], '%.6g'))
    print(spread('ratio', [ratio(r[0], r[1]) for r in rows], '%.3f'))
    print(spread('load1', [r[2] for r in rows], '%.2f'))
    print(spread('others', [r[3] for r in rows], '%.2f'))
    if failed:
        print('%d measurement(s) failed (inf above: not converged by the deadline)' % failed)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
