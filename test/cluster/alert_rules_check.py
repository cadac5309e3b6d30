#!/usr/bin/env python3
"""Checks of docs/alerts/shoal-rules.yml for test_alert_rules (no YAML library needed: the rules
file is ours, and its exprs are either one line or a folded block under `expr: >-`).

  alert_rules_check.py RULES.yml METRICS.txt OPERATIONS.md
      1. `promtool check rules RULES.yml` and `promtool test rules` on its .test.yml pass;
      2. every metric name an expr uses (shoal_*, process_*) is a family of METRICS.txt (a live
         node's GET /metrics), so no alert waits on a series that never exists;
      3. every alert has a runbook_url "docs/operations.md#ANCHOR" whose ANCHOR is a heading of
         OPERATIONS.md ("Runbook: NAME" -> runbook-name, as GitHub makes anchors);
      4. every alert is tested (named in an alert_rule_test of the .test.yml) and fires there at
         least once (a non-empty exp_alerts), so no alert is only ever tested quiet.
      Prints what it checked; exit 1 naming the first failures.
"""
import re
import subprocess
import sys

NAME = re.compile(r'\b((?:shoal|process)_[a-zA-Z0-9_]+)')


def rules(path):
    """[(alert, expr, runbook_url)] from the rules file."""
    out = []
    lines = open(path).read().split('\n')
    i = 0
    alert = None
    expr = url = None
    while i < len(lines):
        line = lines[i]
        m = re.match(r'\s*- alert:\s*(\S+)', line)
        if m:
            if alert:
                out.append((alert, expr, url))
            alert, expr, url = m.group(1), None, None
        m = re.match(r'(\s*)expr:\s*(.*)$', line)
        if m and alert:
            indent, rest = len(m.group(1)), m.group(2).strip()
            if rest in ('>-', '>', '|', '|-'):
                body = []
                while i + 1 < len(lines) and (not lines[i + 1].strip() or
                                              len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent):
                    i += 1
                    body.append(lines[i].strip())
                expr = ' '.join(body)
            else:
                expr = rest
        m = re.match(r'\s*runbook_url:\s*"?([^"]*)"?\s*$', line)
        if m and alert:
            url = m.group(1)
        i += 1
    if alert:
        out.append((alert, expr, url))
    return out


def anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces -."""
    h = heading.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')


def main(rules_path, metrics_path, ops_path):
    bad = []
    test_path = re.sub(r'\.yml$', '.test.yml', rules_path)
    for cmd in (['promtool', 'check', 'rules', rules_path], ['promtool', 'test', 'rules', test_path]):
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print('$ %s: exit %d\n%s' % (' '.join(cmd), p.returncode, p.stdout.strip()))
        if p.returncode != 0:
            bad.append('%s failed' % ' '.join(cmd))

    families = set()
    for line in open(metrics_path):
        if line.startswith('# TYPE '):
            families.add(line.split()[2])
    found = rules(rules_path)
    if not found:
        bad.append('no alert in %s' % rules_path)
    names = set()
    for alert, expr, _ in found:
        if not expr:
            bad.append('%s: no expr' % alert)
            continue
        used = set(NAME.findall(expr))
        if not used:
            bad.append('%s: its expr names no metric' % alert)
        for n in sorted(used - families):
            bad.append('%s: %s is not in /metrics' % (alert, n))
        names |= used
    print('%d alerts, %d metric names, all checked against /metrics (%d families): %s' %
          (len(found), len(names), len(families), ' '.join(sorted(names))))

    anchors = set()
    for line in open(ops_path):
        m = re.match(r'#+\s+(.*)$', line)
        if m:
            anchors.add(anchor(m.group(1)))
    for alert, _, url in found:
        want = 'docs/operations.md#runbook-' + alert.lower()
        if url != want:
            bad.append('%s: runbook_url %r, not %r' % (alert, url, want))
        elif url.split('#', 1)[1] not in anchors:
            bad.append('%s: docs/operations.md has no heading "Runbook: %s"' % (alert, alert))

    text = open(test_path).read()
    for alert, _, _ in found:
        fires = re.search(r'alertname:\s*%s\s*\n\s*exp_alerts:\s*\n\s*- exp_labels' % alert, text)
        if not fires:
            bad.append('%s: no test in %s where it fires' % (alert, test_path))
    for b in bad:
        print('FAIL: ' + b)
    return 1 if bad else 0


if __name__ == '__main__':
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
