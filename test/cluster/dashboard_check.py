#!/usr/bin/env python3
"""Drives the dashboard (GET / of the management endpoint) in headless Chromium through Selenium,
as test_dashboard asks: the page must show every member Up and the shard map of TYPE with its
coordinator marked; then it prints KILL (test_dashboard crashes VICTIM) and, without a reload,
the page must mark VICTIM unreachable, then drop it once the cluster has removed it.

  dashboard_check.py URL VICTIM_NODE_ID TYPE MEMBERS [--screenshot PNG] [--timeout SECONDS]

Exit 0 when every step is seen in time, 1 with what the page showed, 2 when Chromium, its driver
or Selenium is missing (Debian: chromium chromium-driver python3-selenium).
"""
import argparse
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument('url')
ap.add_argument('victim')
ap.add_argument('type')
ap.add_argument('members', type=int)
ap.add_argument('--screenshot')
ap.add_argument('--timeout', type=float, default=60)
args = ap.parse_args()

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError as e:
    print('dashboard_check: python3-selenium is missing (%s)' % e)
    sys.exit(2)

opts = webdriver.ChromeOptions()
opts.binary_location = '/usr/bin/chromium'
for a in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
          '--window-size=1280,1000', '--no-first-run', '--disable-extensions'):
    opts.add_argument(a)
try:
    driver = webdriver.Chrome(service=Service('/usr/bin/chromedriver'), options=opts)
except Exception as e:  # a missing binary or driver: say which
    print('dashboard_check: cannot start headless chromium: %s' % e)
    sys.exit(2)


def wait(what, script):
    """Polls a JavaScript predicate on the live page until it is true or the deadline passes."""
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        try:
            if driver.execute_script(script):
                print('dashboard_check: %s' % what, flush=True)
                return
        except Exception:
            pass
        time.sleep(0.2)
    print('dashboard_check: timed out waiting for %s; the page shows:\n%s'
          % (what, driver.execute_script('return document.body.innerText')), flush=True)
    driver.quit()
    sys.exit(1)


try:
    driver.get(args.url + '?interval=300')
    # a marker that a reload would lose: every later step must happen in this same page
    driver.execute_script('window.__noReload = 1')
    wait('%d members, all Up' % args.members,
         'const r = document.querySelectorAll("#members tbody tr");'
         'return r.length === %d && [...r].every(tr => tr.cells[1].textContent === "Up");'
         % args.members)
    wait('a leader marked', 'return [...document.querySelectorAll("#members .flag")]'
         '.some(f => f.textContent === "leader");')
    wait('the shard map of %s with its coordinator' % args.type,
         'const t = document.querySelector("table.shardmap[data-type=\'%s\']");'
         'return t && t.querySelectorAll(".shard").length > 0 && '
         '[...t.querySelectorAll(".flag")].some(f => f.textContent === "coordinator");'
         % args.type)
    wait('rates computed', 'return document.getElementById("rates").textContent.includes("tells:");')
    if args.screenshot:
        driver.save_screenshot(args.screenshot)
    print('KILL', flush=True)
    row = 'document.querySelector("#members tbody tr[data-node=\'%s\']")' % args.victim
    wait('the killed member marked unreachable',
         'const r = %s; return window.__noReload === 1 && r && r.className === "unreachable";'
         % row)
    wait('the killed member removed',
         'return window.__noReload === 1 && !%s && '
         'document.querySelectorAll("#members tbody tr").length === %d;'
         % (row, args.members - 1))
    wait('its removal among the recent events',
         'return [...document.querySelectorAll("#events td")]'
         '.some(td => td.textContent === "member-removed");')
finally:
    driver.quit()
print('dashboard_check: ok', flush=True)
