#!/usr/bin/env python3
"""Shoal's chaos suite: node processes under a seeded nemesis, a concurrent workload, a checker.

  tools/chaos.py [--bin build/bin] [--time SECONDS] [--nodes N] [--seed S] [--net auto|netns|loopback]
                 [--out build/chaos] [--smoke]

Each node is its own process (build/bin/chaos-node: membership with keep-majority, the default
replicator in an LMDB store, sharding with the entity type `acct` keeping entity state and
remembered entities). With --net netns (the default when the kernel allows it) every node lives
in a network namespace chaos-nI with a veth pair on the bridge chaosbr0 (10.77.0.I/24, this host
10.77.0.254), and the nemesis makes partitions and packet loss with iptables DROP rules inside
the namespaces (the `statistic` match for a fraction). Without namespaces or iptables, or with
--net loopback, the nodes listen on 127.0.0.1 and the same faults come from the transport's
fault injection (chaos.h, CHAOS_KIND_FAULT); the suite says which it uses. Either way it also
SIGKILLs nodes and restarts them on their data directory, pauses them with SIGSTOP/SIGCONT,
restarts some under libfaketime with a skewed wall clock (the monotonic clock left alone), and
adds the transport's delay and duplication (the kernel here has no netem). Nodes that the
cluster stopped (downed by the split-brain resolver) are restarted as new incarnations.

Meanwhile build/bin/chaos-client writes GCounter increments and ORSet adds with WriteMajority,
removes, LWWMap puts, and sends messages to the entities through at-least-once producers,
logging every outcome. At the end the suite heals everything, waits for convergence and checks:
  - every acknowledged increment is counted, and no more than were attempted;
  - every acknowledged ORSet add that was not removed is present, no acknowledged remove came
    back, nothing is present that was never added; LWWMap values are values that were put;
  - every replica of every key is byte-identical (digests of the workload's keys, and
    `ddata-dump --compare` over every key, sharding's included);
  - no two incarnations of an entity processed messages in overlapping CLOCK_MONOTONIC spans;
  - every acknowledged entity message is in the entity's stored state, and no message was
    processed twice (two processings both saved);
  - after SIGKILL of every node and a restart, every remembered entity runs again;
  - no node process crashed (a signal we did not send, a sanitizer report).
It prints a summary and writes OUT/report.json; exit status 1 on any violation, 2 when the run
itself could not be made (setup), 0 otherwise. Namespaces, the bridge and the iptables rules are
removed at the end, on Ctrl-C and on failure, and stale ones of a crashed run at the start.

--smoke: the short, seeded run inside `scons check`: 3 nodes of the sanitized build over loopback
with the transport's fault injection, generous timers, 30 seconds, one fault of each kind.
"""
import argparse
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

NS_PREFIX = 'chaos-n'
BRIDGE = 'chaosbr0'
VETH_PREFIX = 'chaosv'
SUBNET = '10.77.0.'
HOST_IP = SUBNET + '254'
NODE_PORT = 2552
LOCK_FILE = '/run/shoal-chaos.lock'  # held by a namespace run: one at a time on a machine
FAKETIME_LIBS = ['/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1',
                 '/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1',
                 '/usr/lib/faketime/libfaketimeMT.so.1']


def log(msg):
    print('chaos: ' + msg, flush=True)


def mono_ns():
    return time.monotonic_ns()  # CLOCK_MONOTONIC, the clock the nodes log with


def run(cmd, check=False, quiet=True, timeout=30):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        # a tool being rebuilt, a paused node that never answers: a failed attempt
        if check:
            raise RuntimeError('%s: %s' % (' '.join(cmd), e))
        p = subprocess.CompletedProcess(cmd, 127, b'', str(e).encode())
    if check and p.returncode != 0:
        raise RuntimeError('%s: exit %d: %s' % (' '.join(cmd), p.returncode,
                                                p.stderr.decode(errors='replace').strip()))
    if not quiet and p.returncode != 0:
        log('%s: exit %d: %s' % (' '.join(cmd), p.returncode, p.stderr.decode(errors='replace').strip()))
    return p


def wait_until(cond, deadline_s, step=0.25):
    """Polls cond() until it holds or deadline_s seconds have passed; returns its last value."""
    until = time.monotonic() + deadline_s
    while True:
        v = cond()
        if v or time.monotonic() >= until:
            return v
        time.sleep(step)


# ------------------------------------------------------------------------------------------------
# The network: namespaces + bridge + iptables, or loopback + the transport's fault injection
# ------------------------------------------------------------------------------------------------

_allow_from_cache = {}


def takes_allow_from(prog):
    """Whether a chaos-node build knows --allow-from (its --help says so)."""
    if prog not in _allow_from_cache:
        try:
            out = subprocess.run([prog, '--help'], capture_output=True, text=True,
                                 timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ''
        _allow_from_cache[prog] = '--allow-from' in out
    return _allow_from_cache[prog]

class Net:
    def __init__(self, mode, n, bindir):
        self.mode, self.n, self.bindir = mode, n, bindir
        self.ports = {}

    # --- netns ---
    @staticmethod
    def probe():
        """Why namespaces cannot be used here, or None when they can."""
        if os.geteuid() != 0:
            return 'not root'
        if not shutil.which('ip') or not shutil.which('iptables'):
            return 'ip or iptables missing (sh tools/install-deps.sh installs iproute2 and iptables)'
        ns = NS_PREFIX + 'probe'
        try:
            run(['ip', 'netns', 'del', ns])
            run(['ip', 'netns', 'add', ns], check=True)
            run(['ip', 'netns', 'exec', ns, 'iptables', '-A', 'INPUT', '-m', 'statistic', '--mode',
                 'random', '--probability', '0.1', '-j', 'DROP'], check=True)
            run(['ip', 'link', 'add', BRIDGE + 'p', 'type', 'bridge'], check=True)
            run(['ip', 'link', 'del', BRIDGE + 'p'])
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            return str(e)
        finally:
            run(['ip', 'netns', 'del', ns])
        return None

    @staticmethod
    def cleanup_stale():
        """Removes what a crashed run left: namespaces (their processes first), veths, bridge."""
        if os.geteuid() != 0 or not shutil.which('ip'):
            return
        out = run(['ip', 'netns', 'list']).stdout.decode()
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ''
            if name.startswith(NS_PREFIX):
                pids = run(['ip', 'netns', 'pids', name]).stdout.decode().split()
                for pid in pids:  # a previous run's chaos-node, left in its namespace
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                run(['ip', 'netns', 'del', name])
        links = run(['ip', '-o', 'link', 'show']).stdout.decode()
        for line in links.splitlines():
            parts = line.split(':')
            if len(parts) > 1:
                name = parts[1].strip().split('@')[0]
                if name.startswith(VETH_PREFIX) or name.startswith(BRIDGE):
                    run(['ip', 'link', 'del', name])

    def ip(self, i):
        return SUBNET + str(i)

    def ns(self, i):
        return NS_PREFIX + str(i)

    def endpoint(self, i):
        if self.mode == 'netns':
            return 'tcp://%s:%d' % (self.ip(i), NODE_PORT)
        return 'tcp://127.0.0.1:%d' % self.ports[i]

    def setup(self):
        if self.mode == 'loopback':
            socks = []
            for i in range(1, self.n + 1):  # free ports, held together so they differ
                s = socket.socket()
                s.bind(('127.0.0.1', 0))
                socks.append(s)
                self.ports[i] = s.getsockname()[1]
            for s in socks:
                s.close()
            return
        run(['ip', 'link', 'add', BRIDGE, 'type', 'bridge'], check=True)
        run(['ip', 'addr', 'add', HOST_IP + '/24', 'dev', BRIDGE], check=True)
        run(['ip', 'link', 'set', BRIDGE, 'up'], check=True)
        for i in range(1, self.n + 1):
            ns, veth = self.ns(i), VETH_PREFIX + str(i)
            run(['ip', 'netns', 'add', ns], check=True)
            run(['ip', 'link', 'add', veth, 'type', 'veth', 'peer', 'name', veth + 'p'], check=True)
            run(['ip', 'link', 'set', veth + 'p', 'netns', ns], check=True)
            run(['ip', 'link', 'set', veth, 'master', BRIDGE], check=True)
            run(['ip', 'link', 'set', veth, 'up'], check=True)
            x = ['ip', 'netns', 'exec', ns]
            run(x + ['ip', 'link', 'set', 'lo', 'up'], check=True)
            run(x + ['ip', 'link', 'set', veth + 'p', 'name', 'eth0'], check=True)
            run(x + ['ip', 'addr', 'add', self.ip(i) + '/24', 'dev', 'eth0'], check=True)
            run(x + ['ip', 'link', 'set', 'eth0', 'up'], check=True)
            # the chaos chain: the suite's DROP rules; traffic with this host (the clients) and
            # loopback never goes through it
            ipt = x + ['iptables']
            run(ipt + ['-N', 'CHAOS'], check=True)
            run(ipt + ['-A', 'INPUT', '-i', 'lo', '-j', 'ACCEPT'], check=True)
            run(ipt + ['-A', 'INPUT', '-s', HOST_IP, '-j', 'ACCEPT'], check=True)
            run(ipt + ['-A', 'INPUT', '-j', 'CHAOS'], check=True)
            run(ipt + ['-A', 'OUTPUT', '-o', 'lo', '-j', 'ACCEPT'], check=True)
            run(ipt + ['-A', 'OUTPUT', '-d', HOST_IP, '-j', 'ACCEPT'], check=True)
            run(ipt + ['-A', 'OUTPUT', '-j', 'CHAOS'], check=True)
        for i in range(1, self.n + 1):  # every namespace reaches this host and the others
            for j in (None, 1 if i != 1 else 2):
                target = HOST_IP if j is None else self.ip(j)
                if run(['ip', 'netns', 'exec', self.ns(i), 'ping', '-c', '1', '-W', '2', target]
                       ).returncode != 0 and shutil.which('ping'):
                    raise RuntimeError('namespace %s cannot reach %s' % (self.ns(i), target))

    def teardown(self):
        if self.mode != 'netns':
            return
        for i in range(1, self.n + 1):
            run(['ip', 'netns', 'del', self.ns(i)])
            run(['ip', 'link', 'del', VETH_PREFIX + str(i)])
        run(['ip', 'link', 'del', BRIDGE])

    def prefix(self, i):
        return ['ip', 'netns', 'exec', self.ns(i)] if self.mode == 'netns' else []

    # --- faults ---
    def client_fault(self, i, spec):
        return run([os.path.join(self.bindir, 'chaos-client'), 'fault', self.endpoint(i), spec],
                   timeout=15).returncode == 0

    def cut(self, pairs, alive):
        """Cuts both directions between every (a, b)."""
        for a, b in pairs:
            if self.mode == 'netns':
                for x, y in ((a, b), (b, a)):
                    ipt = ['ip', 'netns', 'exec', self.ns(x), 'iptables', '-A', 'CHAOS']
                    run(ipt + ['-s', self.ip(y), '-j', 'DROP'], check=True)
                    run(ipt + ['-d', self.ip(y), '-j', 'DROP'], check=True)
            else:
                for x, y in ((a, b), (b, a)):
                    if x in alive:
                        self.client_fault(x, 'both 1 0 0 0 %s' % self.endpoint(y))

    def cut_one_way(self, x, others, direction, alive):
        """Drops what node x sends to the others ('out') or receives from them ('in'): the
        partition one side notices later than the other (its detector's indirect probes)."""
        for y in others:
            if self.mode == 'netns':
                ipt = ['ip', 'netns', 'exec', self.ns(x), 'iptables', '-A', 'CHAOS']
                run(ipt + (['-d', self.ip(y)] if direction == 'out' else ['-s', self.ip(y)]) +
                    ['-j', 'DROP'], check=True)
            elif x in alive:
                self.client_fault(x, '%s 1 0 0 0 %s' % (direction, self.endpoint(y)))

    def loss(self, p, alive):
        for i in range(1, self.n + 1):
            if self.mode == 'netns':
                run(['ip', 'netns', 'exec', self.ns(i), 'iptables', '-A', 'CHAOS', '-m', 'statistic',
                     '--mode', 'random', '--probability', '%.3f' % p, '-j', 'DROP'], check=True)
            elif i in alive:
                self.client_fault(i, 'both 0 %.3f 0 0 *' % p)

    def delay_dup(self, delay_ms, dup, alive):
        """The transport's own delay and duplication (no netem here), in both modes."""
        for i in alive:
            self.client_fault(i, 'both 0 0 %.3f %d *' % (dup, delay_ms))

    def heal(self, alive):
        if self.mode == 'netns':
            for i in range(1, self.n + 1):
                run(['ip', 'netns', 'exec', self.ns(i), 'iptables', '-F', 'CHAOS'], check=True)
        for i in alive:
            self.client_fault(i, 'heal')


# ------------------------------------------------------------------------------------------------
# The node processes
# ------------------------------------------------------------------------------------------------
class Nodes:
    def __init__(self, net, args, out):
        self.net, self.args, self.out = net, args, out
        self.procs = {}      # index -> Popen
        self.paused = set()
        self.skew = {}       # index -> seconds of wall-clock skew (faketime) in force
        self.expected_exit = set()
        self.exits = []      # (index, returncode, expected)
        self.starts = {i: 0 for i in range(1, args.nodes + 1)}
        self.ended = {}      # pid -> CLOCK_MONOTONIC ns when the process was killed or seen gone
        self.faketime = next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)
        self.bins = {}       # index -> the chaos-node's build directory (upgrade, mixed modes)
        self.mixed = None    # --mixed: (rng, the previous release's build/bin)

    def data(self, i):
        return os.path.join(self.out, 'data%d' % i)

    def logfile(self, i):
        return os.path.join(self.out, 'node%d.log' % i)

    def start(self, i, form=False, skew=None):
        eps = [self.net.endpoint(j) for j in range(1, self.args.nodes + 1)]
        own = self.net.endpoint(i)
        others = [e for e in eps if e != own]
        # every node gets the same seed list, as a deployment would: node 1 is the first seed.
        # Restarted behind a partition it does not form a second cluster, since its kept
        # membership (the identities in its data directory) needs a majority of the members to
        # answer that they are in no cluster first; and after the resolver downed everyone, it
        # forms the one cluster the others join. (`form` is kept for the schedule's readers.)
        seeds = eps
        if self.mixed and self.starts[i] > 0 and self.mixed[0].random() < 0.3:
            # a restart that switches build: an upgrade or a rollback in the middle of the faults
            was = self.bins.get(i, self.args.bin)
            self.bins[i] = self.args.bin if was == self.mixed[1] else self.mixed[1]
            log('    node %d restarts as %s' % (i, self.bins[i]))
        cmd = self.net.prefix(i)
        env = dict(os.environ)
        if skew is not None:
            self.skew[i] = skew
        if self.skew.get(i) and self.faketime:
            cmd += ['env', 'LD_PRELOAD=' + self.faketime, 'FAKETIME=%+ds' % self.skew[i],
                    'FAKETIME_DONT_FAKE_MONOTONIC=1']
        prog = os.path.join(self.bins.get(i, self.args.bin), 'chaos-node')
        cmd += [prog, '--index', str(i), '--bind', own,
                '--data', self.data(i), '--log', self.logfile(i), '--timing', self.args.timing]
        if not own.startswith('tcp://127.') and takes_allow_from(prog):
            # a plain node off loopback refuses to start unless told who may connect (issue 36,
            # protected mode); builds from before it neither refuse nor know the flag
            cmd += ['--allow-from', SUBNET + '0/24']
        for s in seeds:
            cmd += ['--seed', s]
        with open(os.path.join(self.out, 'node%d.out' % i), 'ab') as f:
            self.procs[i] = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                             start_new_session=True)
        self.starts[i] += 1
        self.paused.discard(i)

    def alive(self):
        return {i for i, p in self.procs.items() if p and p.poll() is None}

    def kill(self, i):
        p = self.procs.get(i)
        if p and p.poll() is None:
            self.expected_exit.add(i)
            self.ended[p.pid] = mono_ns()
            os.kill(p.pid, signal.SIGKILL)  # a paused process dies too (SIGKILL needs no SIGCONT)
            p.wait()
            self.reap(i)
        self.paused.discard(i)

    def stop(self, i, timeout=60):
        """SIGTERM: the node leaves gracefully and exits 0 (what an operator's rolling restart
        does). Returns the exit code, or None if it had to be killed after the timeout."""
        p = self.procs.get(i)
        if not p or p.poll() is not None:
            return None
        self.expected_exit.add(i)
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(i)
            return None
        self.reap(i)
        return p.returncode

    def pause(self, i):
        p = self.procs.get(i)
        if p and p.poll() is None:
            os.kill(p.pid, signal.SIGSTOP)
            self.paused.add(i)

    def resume(self, i):
        p = self.procs.get(i)
        if p and p.poll() is None and i in self.paused:
            os.kill(p.pid, signal.SIGCONT)
        self.paused.discard(i)

    def reap(self, i):
        p = self.procs.get(i)
        if p and p.poll() is not None:
            self.ended.setdefault(p.pid, mono_ns())
            expected = i in self.expected_exit
            self.exits.append((i, p.returncode, expected))
            self.expected_exit.discard(i)
            self.procs[i] = None
            return p.returncode, expected
        return None

    def reap_all(self):
        """Exited nodes (not killed by us): their exit codes."""
        gone = []
        for i in list(self.procs):
            r = self.reap(i)
            if r:
                gone.append((i, r[0]))
        return gone

    def stop_all(self):
        for i in list(self.procs):
            self.kill(i)


# ------------------------------------------------------------------------------------------------
# The nemesis schedule
# ------------------------------------------------------------------------------------------------
def make_schedule(rng, n, total_s, smoke, nemesis=2, stretch=1.0):
    """[(start_s, kind, params, duration_s)], drawn from the seed and printed before the run.
    stretch multiplies how long each fault lasts (not what is drawn, so a seed gives the same
    faults): 3 under default timings, where a cut must outlast stable-after (20 s) and the
    fence (13 s) to make the resolver and the fence act."""
    if smoke:
        # one fault of each kind, mild enough for a sanitized build on 2 cores to ride out
        return [
            (2, 'delay-dup', {'delay_ms': 20, 'dup': 0.05}, 4),
            (7, 'loss', {'p': 0.03}, 4),
            (12, 'isolate', {'node': 3}, 3),
            (17, 'kill', {'node': 2, 'down': 2}, 0),
            (24, 'pause', {'node': 3}, 2),
        ]
    # one-way: a node cut in one direction (the side that learns of it later must not keep its
    # shards: the fence); seed-restart: the first seed killed and restarted with its own
    # endpoint first in its seed list (it must join the running cluster, not form a second);
    # lone-restart: every node killed, the first seed restarted alone for a while (its majority
    # writes must be refused: the kept membership), then the others
    kinds = ['halves', 'bridge', 'isolate', 'loss', 'kill', 'pause', 'skew', 'delay-dup',
             'one-way', 'seed-restart', 'lone-restart']
    weights = [3, 2, 3, 2, 3, 2, 1, 1, 3, 1, 1]
    if nemesis == 1:  # the faults before these three: --nemesis 1 replays a seed recorded then
        kinds, weights = kinds[:8], weights[:8]
    sched, t = [], 3.0
    while t < total_s - 5:
        kind = rng.choices(kinds, weights)[0]
        dur = rng.uniform(3, 12)
        nodes = list(range(1, n + 1))
        rng.shuffle(nodes)
        if kind == 'halves':
            k = n // 2
            p = {'a': sorted(nodes[:k]), 'b': sorted(nodes[k:])}
        elif kind == 'bridge':
            rest = nodes[1:]
            k = max(1, len(rest) // 2)
            p = {'bridge': nodes[0], 'a': sorted(rest[:k]), 'b': sorted(rest[k:])}
        elif kind == 'isolate':
            p = {'node': nodes[0]}
        elif kind == 'loss':
            p = {'p': round(rng.uniform(0.05, 0.3), 3)}
        elif kind == 'kill':
            p = {'node': nodes[0], 'down': round(rng.uniform(0.5, 8), 1)}
            dur = 0
        elif kind == 'pause':
            p = {'node': nodes[0]}
            dur = rng.uniform(1, 10)
        elif kind == 'skew':
            p = {'node': nodes[0], 'skew': rng.choice([-1, 1]) * rng.randint(5, 120)}
            dur = 0
        elif kind == 'one-way':
            p = {'node': nodes[0], 'dir': rng.choice(['out', 'in'])}
        elif kind == 'seed-restart':
            p = {'node': 1, 'down': round(rng.uniform(0.5, 4), 1)}
            dur = 0
        elif kind == 'lone-restart':
            p = {'node': 1}
            dur = rng.uniform(3, 8)
        else:
            p = {'delay_ms': rng.randint(5, 80), 'dup': round(rng.uniform(0.01, 0.2), 3)}
        dur *= stretch
        sched.append((round(t, 1), kind, p, round(dur, 1)))
        t += dur + rng.uniform(2, 8)
    return sched


def mono_ms():
    return time.monotonic_ns() // 1000000  # chaos-client's t0/t1 are CLOCK_MONOTONIC ms


def rolling_upgrade(args, nodes, cluster_ok, view, endpoint, tick, violations, count):
    """Replaces every node, one at a time, as an operator upgrades: SIGTERM (a graceful leave,
    exit 0), then the new build on the same data directory, and on to the next only once all
    members are Up and converged again; then the last node is rolled back to the old build and
    forward again. Returns the steps with their CLOCK_MONOTONIC windows (ms) for the checks."""
    n = args.nodes
    plan = [(i, args.bin, 'upgrade') for i in range(1, n + 1)]
    if not args.expect_protocol:
        # (past a protocol switch a rollback is refused at join, as it must be without the pin:
        # test_protocol_procs checks that; an --expect-protocol run ends at the switch)
        plan += [(n, args.upgrade_from, 'rollback'), (n, args.bin, 'upgrade')]
    deadline = 60 if args.timing == 'fast' else 120

    def steady(seconds):  # load on a whole cluster between two steps
        wait_until(lambda: tick() and False, seconds, 0.2)

    def incarnation(i):
        """Node i's member id (host:port:uid) as node i itself reports it."""
        v = view(i) or {}
        addr = endpoint(i)[len('tcp://'):]
        return next((m['node'] for m in v.get('members', []) if m.get('address') == addr), None)

    def back(i, before):
        """Every node lists node i's new incarnation (not the one stopped) as Up, converged."""
        tick()
        if not cluster_ok():
            return False
        now = incarnation(i)
        return now is not None and now != before and all(
            any(m.get('node') == now and m.get('status') == 'Up'
                for m in (view(j) or {}).get('members', [])) for j in range(1, n + 1))

    steady(3)
    steps = []
    for i, to, kind in plan:
        count(kind)
        before = incarnation(i)
        t_stop = mono_ms()
        code = nodes.stop(i)
        t_left = mono_ms()
        if code != 0:
            violations.append({'kind': 'no-graceful-leave', 'node': i, 'detail':
                               'chaos-node %d exited with %s on SIGTERM (0 expected: a graceful '
                               'leave)' % (i, code)})
        nodes.bins[i] = to
        nodes.start(i)
        ok = wait_until(lambda: back(i, before), deadline, 0.5)
        t_up = mono_ms()
        log('  %s of node %d: left in %.1f s, back Up in %.1f s (%s)' % (
            kind, i, (t_left - t_stop) / 1e3, (t_up - t_left) / 1e3, to))
        if not ok:
            log('    (not back: see the node logs)')
        if not ok:
            violations.append({'kind': 'not-back-after-%s' % kind, 'node': i, 'detail':
                               'the cluster was not %d Up members again %d s after node %d '
                               'restarted as %s' % (n, deadline, i, to)})
        # the cluster's protocol version: the lowest its members speak, on every member's view
        # (a node of a release before protocol versions shows none: 1 for the tools)
        protos = set()
        for j in range(1, n + 1):
            v = view(j) or {}
            ms = v.get('members', [])
            want = min((m.get('protocol', 1) for m in ms), default=1)
            got = v.get('protocol_version', 1)
            protos.add(got)
            if ms and got != want:
                violations.append({'kind': 'protocol-version', 'node': j, 'detail':
                                   'after the %s of node %d, node %d runs at protocol %s while '
                                   'its members speak at least %s' % (kind, i, j, got, want)})
        steps.append({'node': i, 'kind': kind, 'build': to, 'stop_ms': t_stop, 'left_ms': t_left,
                      'up_ms': t_up, 'ok': bool(ok), 'protocol': sorted(protos)})
        steady(3)
    # the previous release's operator tools against the upgraded nodes (this tree's tools ran
    # against the old nodes all along: cluster_ok)
    eps = [endpoint(j) for j in range(1, n + 1)]
    tools = {}
    for name, cmd in (('shoal-cluster members', ['shoal-cluster', '--node', eps[0], '--json',
                                                 'members']),
                      ('ddata-dump --compare', ['ddata-dump', '--compare'] + eps)):
        # under the workload replicas may differ for a moment: --compare is asked again
        p = None

        def tool_ok():
            nonlocal p
            p = run([os.path.join(args.upgrade_from, cmd[0])] + cmd[1:], timeout=60)
            return p.returncode == 0
        wait_until(tool_ok, 20, 1.0)
        tools[name] = p.returncode
        if p.returncode != 0:
            violations.append({'kind': 'old-tool-failed', 'detail': 'the previous release\'s %s '
                               'failed against the upgraded nodes: exit %d: %s' % (
                                   name, p.returncode, p.stderr.decode(errors='replace')[-300:])})
    log('  the previous release\'s tools against the upgraded cluster: %s' %
        ', '.join('%s exit %d' % kv for kv in tools.items()))
    if args.expect_protocol:
        # the cluster moves to the new version only once its last old member is gone: below it
        # after every step that left an old member (all but the last upgrade of each pass), at it
        # after the last
        for k, st in enumerate(steps):
            all_new = k == n - 1 or k == len(steps) - 1
            want_at = st['protocol'] == [args.expect_protocol]
            if all_new != want_at:
                violations.append({'kind': 'protocol-switch', 'node': st['node'], 'detail':
                                   'after the %s of node %d the cluster ran at %s (expected %s%d)'
                                   % (st['kind'], st['node'], st['protocol'],
                                      '' if all_new else 'below ', args.expect_protocol)})
        log('  protocol versions after each step: %s' % ' '.join(
            str(st['protocol']) for st in steps))
    return {'steps': steps, 'old_tools': tools}


def check_upgrade(upgrade, ops, violations):
    """During each replacement (from its SIGTERM until every member is Up again) every MAJORITY
    operation through a member that is not the one replaced must succeed; their latencies."""
    majority_ops = ('inc', 'add', 'put', 'remove')
    for st in upgrade['steps']:
        lat, failed = [], []
        for o in ops:
            if o['op'] in majority_ops and o['node'] != st['node'] and \
                    st['stop_ms'] <= o['t0'] <= st['up_ms']:
                lat.append(o['t1'] - o['t0'])
                if not o['ok']:
                    failed.append(o)
        lat.sort()

        def pct(q):
            return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
        st['majority_ops'] = len(lat)
        st['majority_failed'] = len(failed)
        st['majority_ms'] = {'p50': pct(0.5), 'p99': pct(0.99), 'max': lat[-1] if lat else None}
        log('  %s of node %d: %d MAJORITY operations through the other members, %d failed, '
            'latency p50 %s ms, p99 %s ms, max %s ms' % (
                st['kind'], st['node'], len(lat), len(failed), pct(0.5), pct(0.99),
                lat[-1] if lat else None))
        if failed:
            violations.append({'kind': 'majority-failed-during-upgrade', 'node': st['node'],
                               'detail': '%d of %d MAJORITY operations through members not being '
                               'replaced failed during the %s of node %d' % (
                                   len(failed), len(lat), st['kind'], st['node']),
                               'evidence': [json.dumps(o) for o in failed[:4]]})


def pairs_between(a, b):
    return [(x, y) for x in a for y in b]


# ------------------------------------------------------------------------------------------------
# The checker
# ------------------------------------------------------------------------------------------------
def read_ops(path):
    ops = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        ops.append(json.loads(line))
                    except ValueError:
                        pass
    return ops


def read_entity_logs(out, n):
    ev = []
    for i in range(1, n + 1):
        path = os.path.join(out, 'node%d.log' % i)
        if not os.path.exists(path):
            continue
        with open(path, errors='replace') as f:
            for line in f:
                w = line.split()
                if w:
                    ev.append((i, w, line.rstrip('\n')))
    return ev


def check_data(ops, snap, violations):
    """Counters, sets and maps against the acknowledged operations."""
    nodes = [x for x in snap['nodes'] if x.get('ok')]
    if not nodes:
        violations.append({'kind': 'unreadable', 'detail': 'no node answered the final read'})
        return {}
    ref = nodes[0]['keys']
    res = {}
    for key, v in sorted(ref.items()):
        if 'missing' in v:
            continue
        if key.startswith('chaos-c-'):
            acked = sum(o['n'] for o in ops if o['op'] == 'inc' and o['key'] == key and o['ok'])
            tried = sum(o['n'] for o in ops if o['op'] == 'inc' and o['key'] == key)
            res[key] = {'value': v['value'], 'acked': acked, 'attempted': tried}
            if v['value'] < acked:
                violations.append({'kind': 'lost-increment', 'key': key, 'detail':
                                   'value %d < %d acknowledged WriteMajority increments' %
                                   (v['value'], acked)})
            if v['value'] > tried:
                violations.append({'kind': 'phantom-increment', 'key': key, 'detail':
                                   'value %d > %d attempted increments' % (v['value'], tried)})
        elif key.startswith('chaos-s-'):
            present = set(v['elems'])
            added = {o['elem'] for o in ops if o['op'] == 'add' and o['key'] == key}
            acked = {o['elem'] for o in ops if o['op'] == 'add' and o['key'] == key and o['ok']}
            rm_tried = {o['elem'] for o in ops if o['op'] == 'remove' and o['key'] == key}
            rm_acked = {o['elem'] for o in ops if o['op'] == 'remove' and o['key'] == key and o['ok']}
            lost = sorted(acked - rm_tried - present)
            back = sorted(rm_acked & present)
            phantom = sorted(present - added)
            res[key] = {'size': len(present), 'acked_adds': len(acked), 'removes_acked': len(rm_acked)}
            if lost:
                violations.append({'kind': 'lost-add', 'key': key, 'detail':
                                   '%d acknowledged adds missing: %s' % (len(lost), lost[:10])})
            if back:
                violations.append({'kind': 'removed-element-back', 'key': key, 'detail':
                                   '%d elements present after an acknowledged remove: %s' %
                                   (len(back), back[:10])})
            if phantom:
                violations.append({'kind': 'phantom-element', 'key': key, 'detail': str(phantom[:10])})
        elif key == 'chaos-m':
            puts = {}
            for o in ops:
                if o['op'] == 'put':
                    puts.setdefault(o['mkey'], set()).add(o['value'])
            bad = {k: val for k, val in v['entries'].items() if val not in puts.get(k, set())}
            res[key] = {'entries': len(v['entries'])}
            if bad:
                violations.append({'kind': 'lww-unknown-value', 'key': key, 'detail': str(bad)})
    # every replica byte-identical
    for x in nodes[1:]:
        for key, v in ref.items():
            w = x['keys'].get(key, {})
            if v.get('digest') != w.get('digest'):
                violations.append({'kind': 'replicas-differ', 'key': key, 'detail':
                                   '%s: %s, %s: %s' % (nodes[0]['ep'], v.get('digest', v.get('missing')),
                                                       x['ep'], w.get('digest', w.get('missing')))})
    return res


def check_entities(ops, ev, snap, violations, ended):
    spans = {}     # entity -> inc -> [start, end, node]
    proc = {}      # (entity, msg) -> [(inc, line)]
    saved = {}     # (entity, inc, msg) -> status
    starts = {}    # entity -> [mono]
    dups = 0
    for node, w, line in ev:
        k = w[0]
        if k == 'PROC' and len(w) == 6:
            ent, inc, msg, t0, t1 = w[1], w[2], w[3], int(w[4]), int(w[5])
            s = spans.setdefault(ent, {}).setdefault(inc, [t0, t1, node, line, line])
            if t0 < s[0]:
                s[0], s[3] = t0, line
            if t1 > s[1]:
                s[1], s[4] = t1, line
            proc.setdefault((ent, msg), []).append((inc, line))
        elif k == 'DUP' and len(w) == 5:
            dups += 1
            ent, inc, t = w[1], w[2], int(w[4])
            s = spans.setdefault(ent, {}).setdefault(inc, [t, t, node, line, line])
            if t < s[0]:
                s[0], s[3] = t, line
            if t > s[1]:
                s[1], s[4] = t, line
        elif k == 'SAVED' and len(w) == 6:
            saved[(w[1], w[2], w[3])] = int(w[4])
        elif k == 'START' and len(w) == 5:
            starts.setdefault(w[1], []).append(int(w[4]))
    # Lifetimes: START to STOP, or to the end of the process when it died without a STOP
    # (SIGKILL: the moment the suite killed it). Two incarnations whose lifetimes overlap may not
    # both process a message inside the overlap: that is two instances of one entity at work.
    life = {}      # (entity, inc) -> [start, end]
    work = {}      # (entity, inc) -> [(t, line)]
    for node, w, line in ev:
        if w[0] == 'START' and len(w) == 5:
            life[(w[1], w[2])] = [int(w[4]), None]
        elif w[0] == 'STOP' and len(w) == 4 and (w[1], w[2]) in life:
            life[(w[1], w[2])][1] = int(w[3])
        elif w[0] == 'PROC' and len(w) == 6:
            work.setdefault((w[1], w[2]), []).append((int(w[4]), line))
        elif w[0] == 'DUP' and len(w) == 5:
            work.setdefault((w[1], w[2]), []).append((int(w[4]), line))
    for key, lv in life.items():
        if lv[1] is None:
            pid = int(key[1].split('.')[1])
            lv[1] = ended.get(pid, 1 << 62)
    by_entity = {}
    for (ent, inc), lv in life.items():
        by_entity.setdefault(ent, []).append((lv[0], lv[1], inc))
    overlaps = 0
    for ent, lst in by_entity.items():
        lst.sort()
        for x in range(len(lst)):
            for y in range(x + 1, len(lst)):
                a, b = lst[x], lst[y]
                lo, hi = max(a[0], b[0]), min(a[1], b[1])
                if lo >= hi:
                    continue
                wa = [(t, l) for t, l in work.get((ent, a[2]), []) if lo <= t <= hi]
                wb = [(t, l) for t, l in work.get((ent, b[2]), []) if lo <= t <= hi]
                if wa and wb:
                    overlaps += 1
                    if overlaps <= 20:
                        violations.append({'kind': 'entity-overlap', 'entity': ent, 'detail':
                                           'incarnations %s and %s were both alive from %d to %d ns '
                                           'and both processed messages then' % (a[2], b[2], lo, hi),
                                           'evidence': [l for _, l in (wa[:2] + wb[:2])]})
    twice = 0
    reprocessed = 0
    for (ent, msg), lst in proc.items():
        ok = [(inc, line) for inc, line in lst if saved.get((ent, inc, msg)) == 0]
        if len(lst) > 1:
            reprocessed += 1
        if len(ok) > 1:
            twice += 1
            violations.append({'kind': 'processed-twice', 'entity': ent, 'detail':
                               'message %s processed and saved by %d incarnations' % (msg, len(ok)),
                               'evidence': [line for _, line in ok]})
    missing = 0
    acked_sends = [o for o in ops if o['op'] == 'send' and o['ok']]
    states = snap.get('entities', {})
    for ent, st in states.items():
        if 'ids' not in st:
            violations.append({'kind': 'entity-unreadable', 'entity': ent, 'detail': st.get('err')})
            continue
        if len(st['ids']) != len(set(st['ids'])):
            violations.append({'kind': 'state-duplicate-id', 'entity': ent,
                               'detail': 'a message id twice in the stored state'})
    for o in acked_sends:
        st = states.get(o['entity'], {})
        if 'ids' in st and o['msg'] not in set(st['ids']):
            missing += 1
            if missing <= 20:
                violations.append({'kind': 'acked-message-lost', 'entity': o['entity'], 'detail':
                                   'acknowledged message %s (through node %d) not in the stored state'
                                   % (o['msg'], o['node'])})
    return {'incarnations': len(life), 'overlaps': overlaps,
            'processed_twice': twice, 'reprocessed_after_failed_save': reprocessed - twice,
            'duplicates_skipped': dups, 'acked_sends': len(acked_sends),
            'acked_missing_from_state': missing, 'entities_started': sorted(starts)}


# ------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bin', default='build/bin')
    ap.add_argument('--time', type=int, default=600)
    ap.add_argument('--nodes', type=int, default=5)
    ap.add_argument('--seed', type=int, default=None)
    ap.add_argument('--net', choices=['auto', 'netns', 'loopback'], default='auto')
    ap.add_argument('--tools', default=None,
                    help='where ddata-dump and shoal-cluster are (default: --bin)')
    ap.add_argument('--out', default='build/chaos')
    ap.add_argument('--workers', type=int, default=4)
    ap.add_argument('--entities', type=int, default=16)
    ap.add_argument('--timing', choices=['fast', 'generous', 'default'], default=None,
                    help='fast (the default): the tests\' timings; generous: for sanitized builds; '
                         'default: the library\'s default (Akka\'s) timings, faults stretched 3x')
    ap.add_argument('--nemesis', type=int, choices=[1, 2], default=2,
                    help='2: every fault kind (default); 1: the kinds before one-way, seed-restart '
                         'and lone-restart were added, to replay a seed recorded with them')
    ap.add_argument('--smoke', action='store_true')
    ap.add_argument('--converge-timeout', type=int, default=None)
    ap.add_argument('--mixed', default=None, metavar='DIR',
                    help='mixed versions under the nemesis: some nodes start as the chaos-node of '
                         'DIR (a previous release\'s build/bin), and a restart switches a node\'s '
                         'build with probability 0.3 (scons chaos CHAOS_MIXED=1)')
    ap.add_argument('--upgrade-from', default=None, metavar='DIR',
                    help='a rolling upgrade instead of the nemesis: the nodes start as the '
                         'chaos-node of DIR (a previous release\'s build/bin, tools/releases.py), '
                         'then each is stopped (SIGTERM) and started again as --bin\'s on its data '
                         'directory, one at a time; one is then rolled back and forward again')
    ap.add_argument('--expect-protocol', type=int, default=None, metavar='N',
                    help='with --upgrade-from: the cluster must run at protocol N once every node '
                         'runs --bin, and below N while any old node is a member')
    args = ap.parse_args()
    if args.smoke:
        args.net, args.time, args.nodes = 'loopback', 30, 3
        args.seed = 42 if args.seed is None else args.seed
        args.timing = args.timing or 'generous'
        args.workers = 3
        args.entities = 8
    args.timing = args.timing or 'fast'
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1 << 31)
    if args.mixed and not os.access(os.path.join(args.mixed, 'chaos-node'), os.X_OK):
        log('%s/chaos-node is missing: build the release with tools/releases.py build' % args.mixed)
        return 2
    if args.upgrade_from:
        # no partitions to make: loopback, and the machine's namespaces stay free
        args.net = 'loopback' if args.net == 'auto' else args.net
        old = os.path.join(args.upgrade_from, 'chaos-node')
        if not os.access(old, os.X_OK):
            log('%s is missing: build the release with tools/releases.py build' % old)
            return 2
    if not (2 <= args.nodes <= 9):
        log('--nodes takes 2 to 9')
        return 2
    converge_timeout = args.converge_timeout or (120 if args.timing == 'fast' else 180)
    # the operator tools come from --tools (default: --bin); the sanitized smoke's --bin holds
    # only the chaos programs, its tools are the release ones
    tools = args.tools or args.bin
    dump = os.path.join(tools, 'ddata-dump')
    cluster_tool = os.path.join(tools, 'shoal-cluster')
    for path in [os.path.join(args.bin, b) for b in ('chaos-node', 'chaos-client')] + [dump, cluster_tool]:
        if not os.access(path, os.X_OK):
            log('%s is missing: build it with scons (scons chaos does)' % path)
            return 2
    rng = random.Random(args.seed)
    log('seed %d (replay: tools/chaos.py --seed %d --time %d --nodes %d%s)' %
        (args.seed, args.seed, args.time, args.nodes, (' --smoke' if args.smoke else '') +
         (' --nemesis 1' if args.nemesis == 1 else '')))

    mode = args.net
    lock = None
    if mode in ('auto', 'netns') and os.geteuid() == 0:
        # the namespaces, bridge and rules are machine-wide: one run at a time owns them, and only
        # that run removes what a crashed run left (a loopback run, the smoke, never touches them)
        try:
            lock = open(LOCK_FILE, 'w')
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            if mode == 'netns':
                log('another chaos run holds %s: wait for it, or use --net loopback' % LOCK_FILE)
                return 2
            log('another chaos run owns the namespaces (%s): this one uses loopback' % LOCK_FILE)
            mode, lock = 'loopback', None
        if lock:
            Net.cleanup_stale()
    if mode in ('auto', 'netns'):
        why = Net.probe()
        if why:
            if mode == 'netns':
                log('network namespaces unavailable: %s' % why)
                return 2
            log('network namespaces or iptables unavailable (%s): falling back to loopback with '
                'the transport\'s fault injection' % why)
            mode = 'loopback'
        else:
            mode = 'netns'
    if mode == 'netns':
        log('network: %d namespaces on bridge %s, partitions and loss by iptables in the '
            'namespaces; delay and duplication by the transport (no netem)' % (args.nodes, BRIDGE))
    else:
        log('network: loopback; partitions, loss, delay and duplication by the transport\'s '
            'fault injection')

    out = args.out
    run_dir = os.path.join(out, 'run')
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    net = Net(mode, args.nodes, args.bin)
    nodes = Nodes(net, argparse.Namespace(**vars(args)), run_dir)
    client = None
    report = {'seed': args.seed, 'network': mode, 'nodes': args.nodes, 'time_s': args.time,
              'timing': args.timing, 'build': args.bin, 'smoke': args.smoke, 'faults': {},
              'violations': []}
    violations = report['violations']
    faults = report['faults']

    def count(kind):
        faults[kind] = faults.get(kind, 0) + 1

    interrupted = []

    def on_signal(sig, frame):
        interrupted.append(sig)
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, on_signal)
    rc = 2
    try:
        net.setup()
        eps = [net.endpoint(i) for i in range(1, args.nodes + 1)]
        if args.mixed:
            mixed_rng = random.Random(args.seed ^ 0x5eed)
            nodes.mixed = (mixed_rng, args.mixed)
            old_ones = sorted(mixed_rng.sample(range(1, args.nodes + 1), (args.nodes + 1) // 2))
            log('mixed versions: nodes %s start as %s, the others as %s' % (
                old_ones, args.mixed, args.bin))
            for i in old_ones:
                nodes.bins[i] = args.mixed
        for i in range(1, args.nodes + 1):
            if args.upgrade_from:
                nodes.bins[i] = args.upgrade_from
            nodes.start(i, form=(i == 1))

        def info(i):
            p = run([os.path.join(args.bin, 'chaos-client'), 'info', net.endpoint(i)], timeout=15)
            d = {}
            for line in p.stdout.decode(errors='replace').splitlines()[1:]:
                k, _, v = line.partition(' ')
                d[k] = v
            return d if p.returncode == 0 else None

        def view(i):
            p = run([cluster_tool, '--node', net.endpoint(i), '--json', '--timeout', '3000',
                     'members'], timeout=15)
            try:
                return json.loads(p.stdout.decode()) if p.returncode == 0 else None
            except ValueError:
                return None

        def cluster_ok():
            for i in range(1, args.nodes + 1):
                v = view(i)
                if not v or not v.get('converged'):
                    return False
                ms = v.get('members', [])
                up = [m for m in ms if m.get('status') == 'Up' and m.get('reachable', True)]
                if len(up) != args.nodes or len(ms) != args.nodes:
                    return False
            return True

        t0 = time.monotonic()
        if not wait_until(cluster_ok, 60 if args.timing == 'fast' else 90, 0.5):
            raise RuntimeError('the %d nodes did not come Up together within the deadline' % args.nodes)
        log('%d nodes Up in %.1f s: %s' % (args.nodes, time.monotonic() - t0, ' '.join(eps)))

        sched = [] if args.upgrade_from else make_schedule(
            rng, args.nodes, args.time, args.smoke, args.nemesis,
            3.0 if args.timing == 'default' else 1.0)
        log('nemesis schedule (%d faults):' % len(sched))
        for s in sched:
            log('  +%5.1fs %-9s %s%s' % (s[0], s[1], json.dumps(s[2], sort_keys=True),
                                          ' for %.1fs' % s[3] if s[3] else ''))
        report['schedule'] = [{'at_s': s[0], 'kind': s[1], 'params': s[2], 'for_s': s[3]}
                              for s in sched]

        ops_path = os.path.join(run_dir, 'ops.jsonl')
        client = subprocess.Popen([os.path.join(args.bin, 'chaos-client'), 'run', '--nodes',
                                   ','.join(eps), '--duration', str(args.time), '--log', ops_path,
                                   '--workers', str(args.workers), '--entities', str(args.entities),
                                   '--run-id', 's%d' % args.seed, '--seed', str(args.seed)],
                                  stdout=open(os.path.join(run_dir, 'client.out'), 'wb'),
                                  stderr=subprocess.STDOUT)
        start = time.monotonic()
        pending_restart = {}   # node -> monotonic time to restart it
        active = None          # (kind, params, until)
        restarts_by_cluster = 0
        unexpected = []

        def tick():
            nonlocal restarts_by_cluster
            now = time.monotonic()
            for i, code in nodes.reap_all():
                # the cluster stopped it (downed: exit 3) or it died: restart as a new incarnation
                if code != 3:
                    unexpected.append((i, code))
                    violations.append({'kind': 'node-crashed', 'node': i, 'detail':
                                       'chaos-node %d exited with %d (see %s/node%d.out)' %
                                       (i, code, run_dir, i)})
                else:
                    restarts_by_cluster += 1
                    log('  node %d stopped by the cluster (downed): restarting it' % i)
                    if args.upgrade_from:
                        violations.append({'kind': 'downed-during-upgrade', 'node': i, 'detail':
                                           'chaos-node %d was downed by the cluster during the '
                                           'rolling upgrade (see %s/node%d.out)' % (i, run_dir, i)})
                pending_restart[i] = now + 1.0
            for i, at in list(pending_restart.items()):
                if now >= at:
                    del pending_restart[i]
                    nodes.start(i)

        def end_active():
            nonlocal active
            if not active:
                return
            kind, p, _ = active
            if kind in ('halves', 'bridge', 'isolate', 'loss', 'delay-dup', 'one-way'):
                net.heal(nodes.alive())
            elif kind == 'lone-restart':
                for j in range(1, args.nodes + 1):
                    if j != p['node'] and j not in nodes.alive():
                        nodes.start(j)
            elif kind == 'pause':
                nodes.resume(p['node'])
            active = None

        if args.upgrade_from:
            report['upgrade'] = rolling_upgrade(args, nodes, cluster_ok, view, net.endpoint, tick,
                                                violations, count)
            if time.monotonic() - start > args.time:
                violations.append({'kind': 'upgrade-outlasted-the-workload', 'detail':
                                   'the rolling upgrade took %.0f s, longer than --time %d: its '
                                   'last steps ran without load' % (time.monotonic() - start,
                                                                    args.time)})
        idx = 0
        while time.monotonic() - start < args.time:
            tick()
            el = time.monotonic() - start
            if active and time.monotonic() >= active[2]:
                end_active()
            if not active and idx < len(sched) and el >= sched[idx][0]:
                _, kind, p, dur = sched[idx]
                idx += 1
                count(kind)
                log('  +%5.1fs %s %s' % (el, kind, json.dumps(p, sort_keys=True)))
                alive = nodes.alive()
                allnodes = list(range(1, args.nodes + 1))
                if kind == 'halves':
                    net.cut(pairs_between(p['a'], p['b']), alive)
                elif kind == 'bridge':
                    net.cut(pairs_between(p['a'], p['b']), alive)
                elif kind == 'isolate':
                    net.cut(pairs_between([p['node']], [j for j in allnodes if j != p['node']]), alive)
                elif kind == 'loss':
                    net.loss(p['p'], alive)
                elif kind == 'delay-dup':
                    net.delay_dup(p['delay_ms'], p['dup'], alive)
                elif kind == 'kill':
                    nodes.kill(p['node'])
                    pending_restart[p['node']] = time.monotonic() + p['down']
                elif kind == 'pause':
                    nodes.pause(p['node'])
                elif kind == 'one-way':
                    net.cut_one_way(p['node'], [j for j in allnodes if j != p['node']], p['dir'],
                                    alive)
                elif kind == 'seed-restart':
                    nodes.kill(p['node'])
                    pending_restart.pop(p['node'], None)
                    time.sleep(p['down'])
                    nodes.start(p['node'], form=True)
                elif kind == 'lone-restart':
                    for j in allnodes:
                        nodes.kill(j)
                        pending_restart.pop(j, None)
                    nodes.start(p['node'], form=True)
                elif kind == 'skew':
                    if not nodes.faketime:
                        log('    libfaketime missing (Debian package faketime): restart without skew')
                    nodes.kill(p['node'])
                    nodes.skew[p['node']] = p['skew']
                    pending_restart[p['node']] = time.monotonic() + 0.5
                if dur:
                    active = (kind, p, time.monotonic() + dur)
            time.sleep(0.1)
        end_active()
        net.heal(nodes.alive())
        for i in list(nodes.paused):
            nodes.resume(i)
        log('nemesis over after %.0f s: healed; waiting for the workload to finish' %
            (time.monotonic() - start))
        try:
            client.wait(timeout=60)
            if client.returncode != 0:
                violations.append({'kind': 'client-crashed', 'detail': 'chaos-client exited with %d '
                                   '(see %s/client.out)' % (client.returncode, run_dir)})
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()
            violations.append({'kind': 'client-stuck', 'detail': 'the workload did not finish'})

        # restart whatever is down, then wait for one converged cluster and equal replicas
        def settle():
            tick()
            for i in range(1, args.nodes + 1):
                if nodes.procs.get(i) is None and i not in pending_restart:
                    nodes.start(i)
            return not pending_restart and len(nodes.alive()) == args.nodes

        wait_until(settle, 30, 0.5)
        t1 = time.monotonic()
        snap = None
        dump_out = ''

        def converged():
            nonlocal snap, dump_out
            settle()
            if not cluster_ok():
                return False
            p = run([os.path.join(args.bin, 'chaos-client'), 'check', '--nodes', ','.join(eps)],
                    timeout=60)
            try:
                s = json.loads(p.stdout.decode())
            except ValueError:
                return False
            ns = s['nodes']
            if not all(x.get('ok') for x in ns):
                return False
            if any(x['keys'] != ns[0]['keys'] for x in ns[1:]):
                return False
            d = run([dump, '--compare'] + eps, timeout=60)
            dump_out = d.stdout.decode(errors='replace')
            return d.returncode == 0

        ok = wait_until(converged, converge_timeout, 1.0)
        report['converge_s'] = round(time.monotonic() - t1, 1)
        if ok:
            log('converged in %.1f s: one cluster of %d Up members, every replica of every key '
                'equal (ddata-dump --compare: %s)' % (time.monotonic() - t1, args.nodes,
                                                      (dump_out.strip().splitlines() or ['?'])[-1]))
        else:
            violations.append({'kind': 'no-convergence', 'detail': 'cluster or replicas not '
                               'converged %d s after healing' % converge_timeout,
                               'evidence': dump_out.strip().splitlines()[-30:]})
        # the final read: data and entity states (until every entity answers, with a deadline)
        def read_until_every_entity_answers(empty):
            """The data and every entity's state as chaos-client reads them, retried until each
            entity answers or the deadline passes (then what was last read)."""
            snap = empty

            def answered():
                nonlocal snap
                tick()
                p = run([os.path.join(args.bin, 'chaos-client'), 'check', '--nodes', ','.join(eps),
                         '--entities', str(args.entities)], timeout=300)
                try:
                    snap = json.loads(p.stdout.decode())
                except ValueError:
                    return False
                return all('ids' in st for st in snap['entities'].values())

            wait_until(answered, converge_timeout, 1.0)
            return snap

        snap = read_until_every_entity_answers({'nodes': [], 'entities': {}})
        with open(os.path.join(run_dir, 'final.json'), 'w') as f:
            json.dump(snap, f)
        ops = read_ops(ops_path)
        report['data'] = check_data(ops, snap, violations)
        if args.upgrade_from:
            check_upgrade(report['upgrade'], ops, violations)

        # every node SIGKILLed, then restarted: the remembered entities must all run again.
        # Not in the smoke, which must stay within its 30 seconds under the sanitizers;
        # `scons chaos` runs it every time, and test_entity_state's full-restart test covers
        # it in `scons check`.
        if args.smoke:
            log('full restart: not in the smoke (scons chaos runs it)')
            report['remembered'] = {'skipped': 'smoke'}
            ents = check_entities(ops, read_entity_logs(run_dir, args.nodes), snap, violations, nodes.ended)
            ents['acked_missing_after_full_restart'] = None
        else:
            restart_mark = mono_ns()
            nodes.stop_all()
            count('full-restart')
            for i in range(1, args.nodes + 1):
                nodes.start(i, form=(i == 1))
            ev_before = read_entity_logs(run_dir, args.nodes)
            remembered = sorted({w[1] for _, w, _ in ev_before if w[0] == 'START'})

            def all_restarted():
                tick()
                ev = read_entity_logs(run_dir, args.nodes)
                back = {w[1] for _, w, _ in ev if w[0] == 'START' and int(w[4]) > restart_mark}
                return set(remembered) <= back

            t2 = time.monotonic()
            ok = wait_until(all_restarted, converge_timeout, 0.5)
            ev = read_entity_logs(run_dir, args.nodes)
            back = {w[1] for _, w, _ in ev if w[0] == 'START' and int(w[4]) > restart_mark}
            report['remembered'] = {'entities': len(remembered), 'running_again': len(set(remembered) & back),
                                    'seconds': round(time.monotonic() - t2, 1)}
            if not ok:
                violations.append({'kind': 'remembered-not-restarted', 'detail':
                                   '%d of %d remembered entities did not start within %d s of a full '
                                   'restart: %s' % (len(set(remembered) - back), len(remembered),
                                                    converge_timeout, sorted(set(remembered) - back)[:20])})
            else:
                log('full restart: all %d remembered entities running again after %.1f s' %
                    (len(remembered), time.monotonic() - t2))
            ents = check_entities(ops, ev, snap, violations, nodes.ended)
            # the entities' durable state after the full restart: every acknowledged message still
            # there (the stores were loaded from LMDB; nothing of it lived only in memory)
            snap2 = read_until_every_entity_answers({'entities': {}})
            with open(os.path.join(run_dir, 'after-restart.json'), 'w') as f:
                json.dump(snap2, f)
            lost_after, unavailable, lost_in = 0, set(), set()
            for o in ops:
                if o['op'] != 'send' or not o['ok']:
                    continue
                st = snap2['entities'].get(o['entity'], {})
                if 'ids' not in st:
                    unavailable.add(o['entity'])
                elif o['msg'] not in st['ids']:
                    lost_after += 1
                    lost_in.add(o['entity'])
            ents['acked_missing_after_full_restart'] = lost_after
            report['remembered']['answering'] = sum(
                1 for e in remembered if 'ids' in snap2['entities'].get(e, {}))
            ents['unavailable_after_full_restart'] = len(unavailable)
            stale = []
            for i in range(1, args.nodes + 1):
                try:
                    with open(os.path.join(run_dir, 'node%d.out' % i), errors='replace') as f:
                        stale += [l.strip() for l in f if 'fencing its entity state failed (-33)' in l]
                except OSError:
                    pass
            why = ('; %d shard starts refused by a stored entity-state fence (SHOAL_ESTALE)' %
                   len(stale)) if stale else ''
            if lost_after:
                ex = sorted(lost_in)[:3]
                violations.append({'kind': 'state-lost-after-full-restart', 'detail':
                                   '%d acknowledged entity messages not in the stored state after '
                                   'every node restarted from its data directory' % lost_after,
                                   'evidence': ['%s: %s' % (e, json.dumps(snap2['entities'].get(e))[:200])
                                                for e in ex]})
            if unavailable:
                violations.append({'kind': 'state-unavailable-after-full-restart', 'detail':
                                   '%d entities with acknowledged messages did not answer with their '
                                   'state within %d s of the full restart: %s%s' % (
                                       len(unavailable), converge_timeout, sorted(unavailable)[:10], why),
                                   'evidence': ['%s: %s' % (e, json.dumps(snap2['entities'].get(e)))
                                                for e in sorted(unavailable)[:2]] + stale[:3]})
            tick()

        # totals
        by = {}
        for o in ops:
            b = by.setdefault(o['op'], {'attempted': 0, 'acknowledged': 0})
            b['attempted'] += 1
            b['acknowledged'] += 1 if o['ok'] else 0
        report['operations'] = by
        report['acknowledged'] = sum(b['acknowledged'] for b in by.values())
        report['attempted'] = sum(b['attempted'] for b in by.values())
        report['entities'] = {k: v for k, v in ents.items() if k != 'entities_started'}
        report['node_exits'] = [{'node': i, 'code': c, 'by_suite': e} for i, c, e in nodes.exits]
        report['restarts_after_downing'] = restarts_by_cluster
        report['skewed_nodes'] = {str(k): v for k, v in nodes.skew.items() if v}
        report['faults_injected'] = sum(faults.values())

        log('operations: %d attempted, %d acknowledged (%s)' % (
            report['attempted'], report['acknowledged'],
            ', '.join('%s %d/%d' % (k, v['acknowledged'], v['attempted']) for k, v in sorted(by.items()))))
        log('faults: %d injected (%s); %d nodes downed by the cluster and restarted; clocks skewed: %s'
            % (report['faults_injected'], ', '.join('%s %d' % kv for kv in sorted(faults.items())),
               restarts_by_cluster, report['skewed_nodes'] or 'none'))
        for k, v in sorted(report['data'].items()):
            log('  %s: %s' % (k, json.dumps(v, sort_keys=True)))
        log('entities: %d incarnations, %d overlapping, %d messages processed twice, %d processed '
            'again after a failed save, %d duplicates skipped, %d acknowledged sends, %d missing '
            'from the stored state' % (ents['incarnations'], ents['overlaps'], ents['processed_twice'],
                                       ents['reprocessed_after_failed_save'],
                                       ents['duplicates_skipped'], ents['acked_sends'],
                                       ents['acked_missing_from_state']))
        if not args.smoke:
            log('remembered entities: %d of %d started again after a full restart, %d answering '
                'with their state' % (report['remembered']['running_again'],
                                      report['remembered']['entities'],
                                      report['remembered'].get('answering', 0)))
        rc = 1 if violations else 0
    except KeyboardInterrupt:
        log('interrupted: cleaning up')
        report['error'] = 'interrupted'
        rc = 2
    except (RuntimeError, OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        log('run failed: %s' % e)
        report['error'] = str(e)
        rc = 2
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish cleaning even on a second Ctrl-C
        if client and client.poll() is None:
            client.kill()
            client.wait()
        nodes.stop_all()
        net.teardown()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    report['violation_count'] = len(violations)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, 'report.json'), 'w') as f:
        json.dump(report, f, indent=1, sort_keys=True)
    for v in violations[:50]:
        log('VIOLATION %s: %s%s' % (v['kind'], (v.get('entity') or v.get('key') or '') and
                                    (v.get('entity') or v.get('key')) + ': ', v['detail']))
        for e in v.get('evidence', [])[:6]:
            log('    %s' % e)
    if rc == 0:
        log('OK: %d operations acknowledged, %d faults injected, 0 violations (seed %d); report %s' %
            (report['acknowledged'], report['faults_injected'], args.seed,
             os.path.join(out, 'report.json')))
    elif rc == 1:
        log('FAILED: %d violations (seed %d); report %s' % (len(violations), args.seed,
                                                           os.path.join(out, 'report.json')))
    return rc


if __name__ == '__main__':
    sys.exit(main())
