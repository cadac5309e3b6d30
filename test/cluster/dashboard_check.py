#!/usr/bin/env python3
"""Drives the dashboard (GET / of the management endpoint) in headless Chromium through Selenium,
as test_dashboard asks, against a live cluster under load:

  - the node serves membership/dashboard.html byte for byte (dashboard_page.h is not stale);
  - GET /cluster/members/<member> answers a member's record, 404 for an unknown one;
  - every member Up, the leader marked; the charts plot a line per member, and the values they
    plot (read back from the SVG: data-total, data-last) match each member's own /metrics: a
    counter the page shows lies between two scrapes of the member taken before and after it, a
    gauge (resident memory) within 30 %; the load shows as a rate above 0;
  - shards per member (the bars) equal each member's shoal_sharding_shards{type};
  - the pin (--pinned SHARD=ADDRESS) is a row naming the type and the shard; events are grouped;
  - a member's page (#/member/<address>) and the type's page (#/type/<TYPE>);
  - then it prints KILL (test_dashboard crashes VICTIM) and, without a reload, the victim's series
    must stop while the others' go on, its row turn unreachable, then go once it is removed.

  dashboard_check.py URL VICTIM_NODE_ID TYPE MEMBERS --member NODE_ID=METRICS_URL... [--page HTML]
      [--pinned SHARD=ADDRESS] [--artifacts DIR] [--screenshot PNG] [--timeout SECONDS]

Screenshots go to DIR/dashboard.png (before the crash; --screenshot PNG instead) and
DIR/dashboard-killed.png. Exit 0 when every step is seen in time, 1 with what the page showed, 2
when Chromium, its driver or Selenium is missing (Debian: chromium chromium-driver
python3-selenium).
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument('url')
ap.add_argument('victim')
ap.add_argument('type')
ap.add_argument('members', type=int)
ap.add_argument('--member', action='append', default=[])
ap.add_argument('--page')
ap.add_argument('--pinned')
ap.add_argument('--artifacts')
ap.add_argument('--screenshot')
ap.add_argument('--timeout', type=float, default=30)
args = ap.parse_args()
metrics_url = dict(m.split('=', 1) for m in args.member)


def fail(msg):
    print('dashboard_check: FAILED: %s' % msg, flush=True)
    try:
        print('the page shows:\n%s' % driver.execute_script('return document.body.innerText'))
        if args.artifacts:
            driver.save_screenshot(os.path.join(args.artifacts, 'dashboard-failed.png'))
        driver.quit()
    except Exception:
        pass
    sys.exit(1)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def scrape(node):
    """The member's /metrics as {family: sum over its label sets}."""
    status, body = get(metrics_url[node] + 'metrics')
    if status != 200:
        fail('GET %smetrics: %d' % (metrics_url[node], status))
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith('#'):
            continue
        series, value = line.rsplit(' ', 1)
        name = series.split('{', 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            pass
    out['__shards'] = {}
    for line in body.decode().splitlines():
        if line.startswith('shoal_sharding_shards{'):
            series, value = line.rsplit(' ', 1)
            out['__shards'][series.split('type="', 1)[1].split('"', 1)[0]] = float(value)
    return out


# ---- the routes, without a browser ----
if args.page:
    status, served = get(args.url)
    with open(args.page, 'rb') as f:
        if status != 200 or served != f.read():
            print('dashboard_check: FAILED: GET / is not %s byte for byte: run python3 '
                  'tools/embed-html.py membership/dashboard.html membership/dashboard_page.h '
                  'dashboard_page' % args.page)
            sys.exit(1)
    print('dashboard_check: the node serves %s' % os.path.basename(args.page), flush=True)
victim_addr = ':'.join(args.victim.split(':')[:2])
status, body = get(args.url + 'cluster/members/' + victim_addr)
rec = json.loads(body) if status == 200 else {}
if status != 200 or rec.get('node') != args.victim or rec.get('status') != 'Up' or \
        rec.get('reachable') is not True or not rec.get('up_number') or 'roles' in rec is False \
        or 'protocol' not in rec or 'app_version' not in rec:
    print('dashboard_check: FAILED: GET /cluster/members/%s: %d %s' % (victim_addr, status, body))
    sys.exit(1)
status, body = get(args.url + 'cluster/members/127.0.0.1:1')
if status != 404 or b'no member' not in body:
    print('dashboard_check: FAILED: GET /cluster/members/127.0.0.1:1: %d %s' % (status, body))
    sys.exit(1)
print('dashboard_check: GET /cluster/members/<member> answers the record, 404 for a stranger',
      flush=True)

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError as e:
    print('dashboard_check: python3-selenium is missing (%s)' % e)
    sys.exit(2)

opts = webdriver.ChromeOptions()
opts.binary_location = '/usr/bin/chromium'
for a in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
          '--window-size=1300,1500', '--no-first-run', '--disable-extensions'):
    opts.add_argument(a)
try:
    driver = webdriver.Chrome(service=Service('/usr/bin/chromedriver'), options=opts)
except Exception as e:  # a missing binary or driver: say which
    print('dashboard_check: cannot start headless chromium: %s' % e)
    sys.exit(2)


def wait(what, script, *a):
    """Polls a JavaScript predicate on the live page until it is true or the deadline passes."""
    deadline = time.time() + args.timeout
    last = None
    while time.time() < deadline:
        try:
            v = driver.execute_script(script, *a)
            if v:
                print('dashboard_check: %s' % what, flush=True)
                return v
        except Exception as e:
            last = e
        time.sleep(0.2)
    fail('timed out waiting for %s%s' % (what, ' (%s)' % last if last else ''))


def plotted(chart, node):
    """What the chart plots for node: its line's data attributes, or None."""
    return driver.execute_script(
        'const s = document.querySelector(`svg[data-chart="${arguments[0]}"]`);'
        'const l = s && [...s.querySelectorAll("polyline")].find(p => p.dataset.node === arguments[1]);'
        'return l ? {last: Number(l.dataset.last), t: Number(l.dataset.lastT),'
        ' total: l.dataset.total === undefined ? null : Number(l.dataset.total),'
        ' latest: Number(s.dataset.latestT)} : null;', chart, node)


NODES = list(metrics_url)
CHARTS = {'messages': ['shoal_node_messages_received_total'],
          'sharded': ['shoal_sharding_tells_total', 'shoal_sharding_asks_total'],
          'replicator': ['shoal_replicator_gets_total', 'shoal_replicator_updates_total'],
          'cpu': ['process_cpu_seconds_total']}
try:
    driver.get(args.url + '?interval=500')
    # a marker that a reload would lose: every later step must happen in this same page
    driver.execute_script('window.__noReload = 1')
    wait('%d members, all Up' % args.members,
         'const r = document.querySelectorAll("#members tbody tr");'
         'return r.length === %d && [...r].every(tr => tr.cells[1].textContent === "Up");'
         % args.members)
    wait('a leader marked', 'return [...document.querySelectorAll("#members .flag")]'
         '.some(f => f.textContent === "leader");')
    wait('a line per member on every chart',
         'return ["messages", "sharded", "replicator", "cpu", "memory"].every(c => {'
         ' const s = document.querySelector(`svg[data-chart="${c}"]`);'
         ' return s && s.querySelectorAll("polyline").length === %d; });' % args.members)

    # the values plotted against the members' own /metrics
    for node in NODES:
        before, t_before = scrape(node), time.time() * 1000
        # a gather that started after the first scrape
        wait('a gather after scraping %s' % node,
             'const s = document.querySelector(`svg[data-chart="messages"]`);'
             'return s && Number(s.dataset.latestT) > arguments[0];', t_before)
        got = {c: plotted(c, node) for c in list(CHARTS) + ['memory']}
        after = scrape(node)
        for c, fams in CHARTS.items():
            p = got[c]
            lo, hi = sum(before.get(f, 0) for f in fams), sum(after.get(f, 0) for f in fams)
            if p is None or p['total'] is None or not (lo <= p['total'] <= hi):
                fail('%s of %s: the page plots %s, its /metrics said %s then %s'
                     % (c, node, p, lo, hi))
        rss = (before['process_resident_memory_bytes'] + after['process_resident_memory_bytes']) / 2
        mib = got['memory']['last'] * 1048576
        if abs(mib - rss) > 0.3 * rss:
            fail('memory of %s: the page plots %.0f bytes, /metrics says %.0f' % (node, mib, rss))
        print('dashboard_check: %s: messages %d, tells+asks %d, reads+writes %d, cpu %.2f s, '
              'rss %.1f MiB: as its /metrics' % (node, got['messages']['total'],
                                                 got['sharded']['total'],
                                                 got['replicator']['total'], got['cpu']['total'],
                                                 got['memory']['last']), flush=True)
    first = NODES[0]
    wait('the load shown as rates above 0 (messages, sharded, replicator on the written node)',
         'const v = c => { const s = document.querySelector(`svg[data-chart="${c}"]`);'
         ' const l = s && [...s.querySelectorAll("polyline")].find(p => p.dataset.node === arguments[0]);'
         ' return l ? Number(l.dataset.last) : 0; };'
         'return v("messages") > 0 && v("sharded") > 0 && v("replicator") > 0;', first)

    # shards per member: the bars against each member's gauge
    deadline = time.time() + args.timeout
    while True:
        want = {n: scrape(n)['__shards'].get(args.type, 0) for n in NODES}
        bars = driver.execute_script(
            'const o = {}; for (const r of document.querySelectorAll('
            '`#shardbars rect[data-type="${arguments[0]}"]`)) o[r.dataset.node] = Number(r.dataset.value);'
            'return o;', args.type)
        if bars == want and sum(want.values()) > 0:
            print('dashboard_check: shards per member as the members count them: %s'
                  % sorted(want.values()), flush=True)
            break
        if time.time() > deadline:
            fail('shard bars %s, the members count %s' % (bars, want))
        time.sleep(0.3)

    if args.pinned:
        shard, where = args.pinned.split('=', 1)
        wait('the pin as a row naming %s and shard %s' % (args.type, shard),
             'const r = document.querySelector(`#pins tr[data-type="${arguments[0]}"][data-shard="${arguments[1]}"]`);'
             'return r && r.cells[0].textContent === arguments[0] && r.cells[1].textContent === arguments[1]'
             ' && r.cells[2].textContent === arguments[2];', args.type, shard, where)
    wait('events grouped by kind and member (one row each, with counts)',
         'const r = [...document.querySelectorAll("#events tbody tr")];'
         'const keys = r.map(x => x.dataset.event + "/" + x.dataset.node);'
         'return r.length > 0 && new Set(keys).size === keys.length &&'
         ' r.some(x => x.dataset.event === "member-up") && r.every(x => Number(x.dataset.count) >= 1);')

    if args.screenshot or args.artifacts:
        shot = args.screenshot or os.path.join(args.artifacts, 'dashboard.png')
        os.makedirs(os.path.dirname(os.path.abspath(shot)), exist_ok=True)
        driver.execute_script('window.scrollTo(0, 0)')
        driver.save_screenshot(shot)
        print('dashboard_check: screenshot %s' % shot, flush=True)

    # a member's own page, and the type's
    other = NODES[1]
    other_addr = ':'.join(other.split(':')[:2])
    driver.execute_script('location.hash = "#/member/" + arguments[0]', other_addr)
    wait('the member page of %s' % other_addr,
         'const s = document.querySelector("#m-record tr[data-field=status] td");'
         'const n = document.querySelector("#m-record tr[data-field=node] td");'
         'const c = document.querySelector(`#m-charts svg[data-chart="messages"]`);'
         'return s && s.textContent === "Up" && n.textContent === arguments[0] && c &&'
         ' [...c.querySelectorAll("polyline")].every(p => p.dataset.node === arguments[0]) &&'
         ' c.querySelectorAll("polyline").length === 1;', other)
    driver.execute_script('location.hash = "#/type/" + arguments[0]', args.type)
    wait('the page of type %s: its shards, bars and pin' % args.type,
         'return document.querySelectorAll("#t-shards tbody tr").length > 0 &&'
         ' document.querySelectorAll("#t-bars rect").length > 0 &&'
         ' (!arguments[0] || document.querySelectorAll("#t-pins tbody tr").length === 1);',
         bool(args.pinned))
    driver.execute_script('location.hash = "#/"')
    wait('back on the cluster page', 'return document.getElementById("view-cluster").classList.contains("on");')

    print('KILL', flush=True)
    row = 'document.querySelector("#members tbody tr[data-node=\'%s\']")' % args.victim
    wait('the killed member\'s series stopped while the others go on',
         'const s = document.querySelector(`svg[data-chart="messages"]`);'
         'if (!s || window.__noReload !== 1) return false;'
         'const latest = Number(s.dataset.latestT);'
         'const lines = [...s.querySelectorAll("polyline")];'
         'const v = lines.find(p => p.dataset.node === arguments[0]);'
         'const live = lines.filter(p => p.dataset.node !== arguments[0]);'
         'return v && Number(v.dataset.lastT) < latest - 1000 && live.length === %d &&'
         ' live.every(p => Number(p.dataset.lastT) === latest);' % (args.members - 1), args.victim)
    wait('the killed member marked unreachable',
         'const r = %s; return window.__noReload === 1 && r && r.className === "unreachable";'
         % row)
    if args.artifacts:
        driver.save_screenshot(os.path.join(args.artifacts, 'dashboard-killed.png'))
    wait('the killed member removed',
         'return window.__noReload === 1 && !%s && '
         'document.querySelectorAll("#members tbody tr").length === %d;'
         % (row, args.members - 1))
    wait('its removal among the events',
         'return [...document.querySelectorAll("#events tbody tr")]'
         '.some(tr => tr.dataset.event === "member-removed" && tr.dataset.node === arguments[0]);',
         args.victim)
finally:
    driver.quit()
print('dashboard_check: ok', flush=True)
