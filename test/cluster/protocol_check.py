#!/usr/bin/env python3
"""protocol_check.py — the protocol negotiation across builds (docs/protocol-versions.md), run by
test_protocol_procs: three chaos-node processes, two of the normal build (protocol 1..1) and one
of the SHOAL_PROTOCOL_NEXT variant (1..2, GossipStatus in a changed format at 2).

  protocol_check.py NORMAL_CHAOS_NODE NEXT_CHAOS_NODE [--timeout S]

Checked, each with a deadline (never a fixed sleep):
  1. mixed, the cluster runs at 1: every node says protocol_version 1, the variant sends no
     format-2 status, no node counts a message of unknown kind once it is in the cluster (see
     settle) and none logs the variant's kind;
  2. the normal nodes are replaced by the variant one at a time (SIGTERM, restart on the same
     data directory): the cluster stays at 1 while a normal member is in it, reaches 2 only
     after the last one is gone, and then format 2 is used (counter > 0);
  3. a normal node joining the cluster at 2 is refused with an error naming both versions (and
     the seeds count it), never let in;
  4. with every member restarted with the pin shoal/cluster/protocol-version = 1
     (--protocol-version 1), the cluster runs at 1 and the same normal node is let in.
Exit 0 when all hold; 1 with the failed check on stderr.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

TIMEOUT = 60.0


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


def fail(msg):
    sys.stderr.write('protocol_check: FAILED: %s\n' % msg)
    raise SystemExit(1)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode()
    except Exception:
        return None


def until(what, fn, timeout=None):
    deadline = time.monotonic() + (timeout or TIMEOUT)
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    fail('timed out waiting for: %s' % what)


class Node:
    def __init__(self, tmp, index, seeds):
        self.index = index
        self.port = free_port()
        self.http = free_port()
        self.data = os.path.join(tmp, 'data%d' % index)
        self.log = os.path.join(tmp, 'log%d' % index)
        self.err = os.path.join(tmp, 'stderr%d' % index)
        self.seeds = seeds
        self.proc = None
        self.prog = None
        self.unknown_base = None
        os.makedirs(self.data, exist_ok=True)

    @property
    def endpoint(self):
        return 'tcp://127.0.0.1:%d' % self.port

    def start(self, prog, pin=0):
        self.prog = prog
        self.unknown_base = None
        args = [prog, '--index', str(self.index), '--bind', self.endpoint, '--data', self.data,
                '--log', self.log, '--timing', 'fast', '--shards', '10', '--http',
                '127.0.0.1:%d' % self.http]
        for s in self.seeds:
            args += ['--seed', s]
        if pin:
            args += ['--protocol-version', str(pin)]
        self.errf = open(self.err, 'ab')
        self.proc = subprocess.Popen(args, stdout=self.errf, stderr=self.errf)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def members(self):
        t = get('http://127.0.0.1:%d/cluster/members' % self.http)
        try:
            return json.loads(t) if t else None
        except ValueError:
            return None

    def metric(self, name):
        t = get('http://127.0.0.1:%d/metrics' % self.http)
        if t is None:
            return None
        for line in t.splitlines():
            if line.startswith(name + ' '):
                return float(line.split()[-1])
        return 0.0

    def stderr_text(self):
        with open(self.err, 'rb') as f:
            return f.read().decode(errors='replace')


def up_view(nodes, n):
    """Every node of `nodes` sees n members Up (and only them, none Removed left aside)."""
    views = []
    for nd in nodes:
        v = nd.members()
        if not v:
            return None
        ups = [m for m in v['members'] if m['status'] == 'Up']
        if len(ups) != n or len(v['members']) != n:
            return None
        views.append(v)
    return views


UNKNOWN = 'shoal_node_frames_dropped_total{reason="unknown_kind"}'
V2_SENT = 'shoal_cluster_gossip_status_format_total{format="2",dir="sent"}'
V2_RECV = 'shoal_cluster_gossip_status_format_total{format="2",dir="received"}'
REFUSED = 'shoal_cluster_protocol_joins_refused_total'


def settle(nodes):
    """Takes each (re)started node's count of messages of unknown kind once it is in the cluster.
    Until then a node may drop a peer's InitJoin (kind 1024) that reached it before its membership
    registered its kinds: a start-up race of every release (0.1.x too), not a version's doing."""
    for nd in nodes:
        if nd.unknown_base is None:
            nd.unknown_base = nd.metric(UNKNOWN)


def no_unknown(nodes):
    settle(nodes)
    for nd in nodes:
        if nd.metric(UNKNOWN) != nd.unknown_base:
            fail('node %d counted a message of unknown kind while in the cluster' % nd.index)
        if 'unknown kind 1032' in nd.stderr_text():
            fail('node %d dropped the variant\'s format-2 gossip status (kind 1032)' % nd.index)


def main():
    global TIMEOUT
    argv = sys.argv[1:]
    if '--timeout' in argv:
        i = argv.index('--timeout')
        TIMEOUT = float(argv[i + 1])
        del argv[i:i + 2]
    normal, nxt = argv
    tmp = tempfile.mkdtemp(prefix='shoal-proto-')
    nodes = []
    late = None
    try:
        for i in range(3):
            nodes.append(Node(tmp, i, []))
        seeds = [n.endpoint for n in nodes]
        for n in nodes:
            n.seeds = seeds
        nodes[0].start(normal)
        nodes[1].start(normal)
        nodes[2].start(nxt)
        views = until('3 members Up (2 normal, 1 variant)', lambda: up_view(nodes, 3))
        # 1. mixed: at 1
        for v in views:
            if v.get('protocol_version') != 1:
                fail('mixed cluster not at 1: %s' % v.get('protocol_version'))
            protos = sorted(m.get('protocol') for m in v['members'])
            if protos != [1, 1, 2]:
                fail('members\' protocols %s, expected [1, 1, 2]' % protos)
        # a few gossip rounds at 1: no format 2 anywhere, nothing of unknown kind
        # the variant's own gossip rounds each start with a status (sent at format 1 here), and
        # its peers' rounds send it some: either way more than 3 exchanged at format 1
        until('gossip status exchanged', lambda: nodes[2].metric(
            'shoal_cluster_gossip_status_format_total{format="1",dir="received"}') + nodes[2].metric(
            'shoal_cluster_gossip_status_format_total{format="1",dir="sent"}') > 3)
        if nodes[2].metric(V2_SENT) != 0:
            fail('the variant sent format 2 while the cluster ran at 1')
        no_unknown(nodes)
        print('mixed 2 normal + 1 variant: cluster at 1, format 2 sent 0, unknown kinds 0')

        # 2. replace the normal nodes one at a time
        for i in (0, 1):
            nodes[i].stop()
            live = [n for n in nodes if n.proc]
            if i == 1:
                # the last normal member gone: the two variants move to 2
                until('cluster at 2 after the last normal member left',
                      lambda: all((n.members() or {}).get('protocol_version') == 2 for n in live))
                for n in live:
                    v = n.members()
                    if any(m.get('protocol') != 2 for m in v['members']
                           if m['status'] != 'Removed'):
                        fail('cluster at 2 while a member speaks 1: %s' % v)
            nodes[i].start(nxt)
            views = until('3 Up after replacing node %d' % i, lambda: up_view(nodes, 3))
            if i == 0:
                for v in views:
                    if v.get('protocol_version') != 1:
                        fail('cluster moved to %s with a normal member left'
                             % v.get('protocol_version'))
                if nodes[2].metric(V2_SENT) != 0:
                    fail('format 2 sent while a normal member was in the cluster')
            no_unknown(nodes)
        until('every node at 2', lambda: all(
            (n.members() or {}).get('protocol_version') == 2 for n in nodes))
        until('format 2 sent and received',
              lambda: all(n.metric(V2_SENT) > 0 and n.metric(V2_RECV) > 0 for n in nodes))
        no_unknown(nodes)
        print('all variant: cluster at 2 only after the last normal member left; format 2 used')

        # 3. a normal node joining the cluster at 2 is refused, naming both versions
        late = Node(tmp, 3, seeds)
        late.start(normal)
        pat = re.compile(r'refused: this node speaks protocol 1\.\.1, the cluster runs at 2')
        until('the normal joiner told it is refused', lambda: pat.search(late.stderr_text()))
        until('a seed counted the refusal', lambda: sum(n.metric(REFUSED) for n in nodes) > 0)
        v = nodes[0].members()
        if len(v['members']) != 3:
            fail('the refused node got in: %s' % v)
        late.stop()
        no_unknown(nodes)
        print('normal joiner at 2: refused (%s)' % pat.search(late.stderr_text()).group(0))

        # 4. the pin: every member restarted with protocol-version 1, the cluster runs at 1
        for i in range(3):
            nodes[i].stop()
            nodes[i].start(nxt, pin=1)
            until('3 Up after pinning node %d' % i, lambda: up_view(nodes, 3))
            settle(nodes)
        until('every node at 1 with the pin', lambda: all(
            (n.members() or {}).get('protocol_version') == 1 for n in nodes))
        late.start(normal)
        until('the normal joiner let in at 1', lambda: up_view(nodes + [late], 4))
        no_unknown(nodes + [late])
        print('pinned to 1: the normal joiner is let in; unknown kinds 0')
        late.stop()
        print('protocol_check: OK')
        return 0
    finally:
        for n in nodes + ([late] if late else []):
            n.stop(signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
