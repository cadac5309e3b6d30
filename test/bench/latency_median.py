#!/usr/bin/env python3
"""latency_median.py — the medians of several bench_latency runs, for docs/performance.md.

    python3 test/bench/latency_median.py OUT.dat RUN1.dat RUN2.dat ...

Each RUN is a data file of bench_latency (SHOAL_BENCH_LATENCY_DAT): one block per path, one line
per load: path load_pct offered_per_s p50_us p99_us p999_us raw_p50_us raw_p99_us raw_p999_us.
Writes OUT.dat in the same format (every column the median over the runs, per path and load;
test/bench/latency.gp plots it), then prints a Markdown table of the 50% and 90% loads with the
ratios to raw and the spread (min-max) of the path's p99, and the issue's targets met or missed.
"""
import statistics
import sys

COLS = ['offered', 'p50', 'p99', 'p999', 'raw50', 'raw99', 'raw999']


def load(path):
    rows = {}
    order = []
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w or w[0].startswith('#'):
                continue
            key = (w[0], int(w[1]))
            if w[0] not in order:
                order.append(w[0])
            rows[key] = [float(x) for x in w[2:9]]
    return order, rows


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    out, runs = sys.argv[1], [load(p) for p in sys.argv[2:]]
    order = []
    for o, _ in runs:
        order += [p for p in o if p not in order]
    med, spread = {}, {}
    with open(out, 'w') as f:
        f.write('# medians of %d runs: path load_pct offered_per_s p50_us p99_us p999_us '
                'raw_p50_us raw_p99_us raw_p999_us\n' % len(runs))
        for p in order:
            for load_pct in (25, 50, 75, 90):
                vals = [r[(p, load_pct)] for _, r in runs if (p, load_pct) in r]
                if not vals:
                    continue
                m = [statistics.median(v[i] for v in vals) for i in range(len(COLS))]
                med[(p, load_pct)] = m
                spread[(p, load_pct)] = (min(v[2] for v in vals), max(v[2] for v in vals))
                f.write('%s %d %.0f %s\n' % (p, load_pct, m[0], ' '.join('%.0f' % x for x in m[1:])))
            f.write('\n\n')
    print('| path | load | offered/s | p50 µs (raw) | p99 µs (raw) | p99 ratio | p99 min–max | '
          'p99.9 µs (raw) | p99.9 ratio |')
    print('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
    for p in order:
        for load_pct in (50, 90):
            m = med.get((p, load_pct))
            if not m:
                continue
            lo, hi = spread[(p, load_pct)]
            print('| %s | %d%% | %.0f | %.0f (%.0f) | %.0f (%.0f) | %.2f | %.0f–%.0f | %.0f (%.0f) | %.2f |'
                  % (p, load_pct, m[0], m[1], m[4], m[2], m[5], m[2] / max(m[5], 1), lo, hi, m[3],
                     m[6], m[3] / max(m[6], 1)))
    print()
    for p in order:
        a, b = med.get((p, 50)), med.get((p, 90))
        if not a or not b:
            continue
        notes = []
        if p in ('ask', 'wmaj3', 'wmaj5'):
            r = a[2] / max(a[5], 1)
            notes.append('p99 %.2fx raw at 50%% (<= 3: %s)' % (r, 'met' if r <= 3 else 'MISSED'))
        r = a[3] / max(a[6], 1)
        notes.append('p99.9 %.2fx raw at 50%% (<= 10: %s)' % (r, 'met' if r <= 10 else 'MISSED'))
        g = b[2] / max(a[2], 1)
        notes.append('p99 90%%/50%% %.2fx (<= 2: %s)' % (g, 'met' if g <= 2 else 'MISSED'))
        print('- %s: %s' % (p, '; '.join(notes)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
