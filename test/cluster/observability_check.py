#!/usr/bin/env python3
"""Checks for test_observability (the tests link no JSON library):

  observability_check.py grafana DASHBOARD.json METRICS.txt
      every metric name an `expr` of the dashboard uses (shoal_*, process_*) is a family of
      METRICS.txt (a live node's GET /metrics); prints the names checked. Exit 1 naming the
      missing ones, or when the dashboard has no expr at all.
  observability_check.py jsonlog LOG
      every line of LOG is one JSON object with string fields ts, level, node, module and msg,
      level one of error/warning/info/debug, and at least one line names its node and module.
      Exit 1 with the first bad line.
"""
import json
import re
import sys

NAME = re.compile(r'\b((?:shoal|process)_[a-zA-Z0-9_]+)')


def exprs(node, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == 'expr' and isinstance(v, str):
                out.append(v)
            else:
                exprs(v, out)
    elif isinstance(node, list):
        for v in node:
            exprs(v, out)
    return out


def grafana(dash_path, metrics_path):
    with open(dash_path) as f:
        dash = json.load(f)
    families = set()
    with open(metrics_path) as f:
        for line in f:
            if line.startswith('# TYPE '):
                fam, kind = line.split()[2], line.split()[3]
                families.add(fam)
                if kind == 'histogram':  # its samples: NAME_bucket, NAME_sum, NAME_count
                    families.update(fam + s for s in ('_bucket', '_sum', '_count'))
    found = exprs(dash, [])
    if not found:
        print('no expr in %s' % dash_path)
        return 1
    names = sorted({n for e in found for n in NAME.findall(e)})
    missing = [n for n in names if n not in families]
    print('%d exprs, %d metric names: %s' % (len(found), len(names), ' '.join(names)))
    if missing:
        print('not in /metrics: %s' % ' '.join(missing))
        return 1
    return 0


def jsonlog(path):
    named = 0
    n = 0
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            n += 1
            try:
                o = json.loads(line)
            except ValueError as e:
                print('line %d is not JSON (%s): %s' % (i, e, line.rstrip()))
                return 1
            if not isinstance(o, dict):
                print('line %d is not an object: %s' % (i, line.rstrip()))
                return 1
            for k in ('ts', 'level', 'node', 'module', 'msg'):
                if not isinstance(o.get(k), str):
                    print('line %d lacks %s: %s' % (i, k, line.rstrip()))
                    return 1
            if o['level'] not in ('error', 'warning', 'info', 'debug'):
                print('line %d: level %r' % (i, o['level']))
                return 1
            if o['node'] and o['module']:
                named += 1
    print('%d JSON lines, %d naming node and module' % (n, named))
    return 0 if n and named else 1


if __name__ == '__main__':
    if len(sys.argv) == 4 and sys.argv[1] == 'grafana':
        sys.exit(grafana(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 3 and sys.argv[1] == 'jsonlog':
        sys.exit(jsonlog(sys.argv[2]))
    print(__doc__)
    sys.exit(2)
