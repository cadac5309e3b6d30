#!/usr/bin/env python3
"""Runs Shoal's test binaries (cmocka) and fuzz targets, two at a time, and prints one closing
line, "N passed, N failed", that CI reads. Exit status 1 if anything failed.

  run-tests.py --test=BIN ... [--fuzz=BIN ... --fuzz-runs=N | --fuzz-time=SECONDS]
               [--bench-smoke=BIN ...]
               [--wrap="valgrind --error-exitcode=99 ..."]

A test binary counts its cmocka cases; a fuzz target counts as one case, and so does a
benchmark's smoke run (the sanitized build on a few keys: a benchmark drives the library from
other threads the way applications do, and once hung on its own use-after-return). Each binary has a
deadline (SHOAL_TEST_TIMEOUT seconds, default 900); output of failures is printed in full.

With --fuzz-time (scons fuzz) every run is appended to test/fuzz/executions.tsv (date, target,
seconds, executions, result), and the executions each target has reached across all the runs
recorded there are printed at the end: the corpus and its ledger grow together in the repo.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument('--test', action='append', default=[])
ap.add_argument('--fuzz', action='append', default=[])
ap.add_argument('--bench-smoke', action='append', default=[],
                help='a sanitized benchmark run with SHOAL_BENCH_QUICK=1; one case')
ap.add_argument('--fuzz-runs', type=int, default=0)
ap.add_argument('--fuzz-time', type=int, default=0)
ap.add_argument('--jobs', type=int, default=int(os.environ.get('SHOAL_TEST_JOBS', '2')))
ap.add_argument('--wrap', default='', help='command prefix for test binaries (scons valgrind)')
args = ap.parse_args()
timeout = int(os.environ.get('SHOAL_TEST_TIMEOUT', '900'))

env = dict(os.environ)
env.setdefault('ASAN_OPTIONS', 'detect_leaks=1:abort_on_error=0:strict_string_checks=1')
env.setdefault('UBSAN_OPTIONS', 'print_stacktrace=1:halt_on_error=1')


def run_test(path):
    t0 = time.time()
    try:
        p = subprocess.run(args.wrap.split() + [path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, env=env)
        out, rc = p.stdout.decode(errors='replace'), p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b'').decode(errors='replace') + '\nTIMEOUT after %ds\n' % timeout, -1
    passed = sum(int(m) for m in re.findall(r'^\[  PASSED  \] (\d+) test', out, re.M))
    failed = sum(int(m) for m in re.findall(r'^\[  FAILED  \] (\d+) test', out, re.M))
    if rc != 0 and failed == 0:
        failed = 1  # crashed, sanitizer report or timeout: count the binary as a failure
    return path, passed, failed, out, rc, time.time() - t0


LEDGER = os.path.join('test', 'fuzz', 'executions.tsv')
ledger_lock = threading.Lock()


def ledger_add(name, secs, execs, rc, timed_out=False):
    with ledger_lock:
        new = not os.path.exists(LEDGER)
        with open(LEDGER, 'a') as f:
            if new:
                f.write('# date\ttarget\tseconds\texecutions\tresult\n')
            f.write('%s\t%s\t%.0f\t%d\t%s\n' % (time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
                                                 name, secs, execs, 'ok' if rc == 0 else
                                                 'timeout' if timed_out else
                                                 'crash (exit %d)' % rc))


def ledger_totals():
    totals, crashes = {}, {}
    if os.path.exists(LEDGER):
        for line in open(LEDGER):
            f = line.rstrip('\n').split('\t')
            if line.startswith('#') or len(f) < 5:
                continue
            totals[f[1]] = totals.get(f[1], 0) + int(f[3])
            crashes[f[1]] = crashes.get(f[1], 0) + f[4].startswith('crash')
    return totals, crashes


def run_bench_smoke(path):
    t0 = time.time()
    benv = dict(env, SHOAL_BENCH_QUICK='1')
    # a completion that wakes a waiting thread whose stack the callback still uses is caught here
    benv['ASAN_OPTIONS'] = benv['ASAN_OPTIONS'] + ':detect_stack_use_after_return=1'
    try:
        p = subprocess.run([path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, env=benv)
        out, rc = p.stdout.decode(errors='replace'), p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b'').decode(errors='replace') + '\nTIMEOUT after %ds\n' % timeout, -1
    ok = rc == 0 and 'BENCH name=' in out
    return path, int(ok), int(not ok), out, rc, time.time() - t0, 'bench smoke'


def run_fuzz(path):
    name = os.path.basename(path)[len('fuzz_'):]
    seeds = os.path.join('test', 'fuzz', 'corpus', name)
    t0 = time.time()
    if args.fuzz_time:
        # scons fuzz: grow the corpus in the repo
        os.makedirs(seeds, exist_ok=True)
        cmd = [path, '-max_total_time=%d' % args.fuzz_time, '-print_final_stats=1', seeds]
        tmp = None
    else:
        # smoke inside check: new inputs go to a scratch directory, the repo stays untouched
        tmp = tempfile.mkdtemp(prefix='shoal-fuzz-')
        cmd = [path, '-runs=%d' % args.fuzz_runs, '-print_final_stats=1', tmp]
        if os.path.isdir(seeds):
            cmd.append(seeds)
    timed_out = False
    try:
        # a timed run gets its own time and a margin for loading and merging the corpus
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=max(timeout, args.fuzz_time + 300), env=env)
        out, rc = p.stdout.decode(errors='replace'), p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b'').decode(errors='replace') + '\nTIMEOUT\n', -1
        timed_out = True
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    execs = re.findall(r'stat::number_of_executed_units:\s*(\d+)', out)
    if not execs:  # killed: the last status line says how far it got
        execs = re.findall(r'^#(\d+)\s', out, re.M)
    summary = '%s executions' % (execs[-1] if execs else '?')
    if args.fuzz_time:
        ledger_add(name, time.time() - t0, int(execs[-1]) if execs else 0, rc, timed_out)
    return path, (1 if rc == 0 else 0), (0 if rc == 0 else 1), out, rc, time.time() - t0, summary


total_pass = total_fail = 0
with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
    futs = ([ex.submit(run_test, t) for t in args.test] +
            [ex.submit(run_bench_smoke, b) for b in args.bench_smoke] +
            [ex.submit(run_fuzz, f) for f in args.fuzz])
    for fut in concurrent.futures.as_completed(futs):
        r = fut.result()
        path, passed, failed, out, rc, secs = r[:6]
        extra = (' (' + r[6] + ')') if len(r) > 6 else ''
        total_pass += passed
        total_fail += failed
        status = 'ok' if failed == 0 else 'FAILED (exit %d)' % rc
        print('%-40s %s: %d passed, %d failed, %.1fs%s' %
              (os.path.basename(path), status, passed, failed, secs, extra), flush=True)
        if failed:
            print(out[-20000:], flush=True)

if args.fuzz_time:
    totals, crashes = ledger_totals()
    print('executions across the runs in %s:' % LEDGER)
    for name in sorted(totals):
        print('  %-16s %12d%s' % (name, totals[name],
                                  '  (%d runs crashed)' % crashes[name] if crashes[name] else ''))
print('%d passed, %d failed' % (total_pass, total_fail))
sys.exit(1 if total_fail else 0)
