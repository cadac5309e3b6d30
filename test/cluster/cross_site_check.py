#!/usr/bin/env python3
"""A web page from another origin tries to down members through the management endpoint, in a
real headless Chromium (Selenium, chromedriver), as test_http_hostile asks:

  cross_site_check.py PORT FETCH_VICTIM FORM_VICTIM [--timeout SECONDS]

The attacker's pages are served from http://127.0.0.2:<its own port>/, another origin than the
endpoint at 127.0.0.1:PORT. Both are loopback addresses, so Chromium's Private Network Access
rules (which hold back requests from a public or private page to a more private address) see a
local page asking a local address and let the request through: this is the operator's own
browser visiting a page the attacker controls on the same machine, or any page once it has been
rebound to a local address. The two pages:
  fetch: fetch('http://127.0.0.1:PORT/cluster/members/FETCH_VICTIM', {method: 'POST',
         mode: 'no-cors', body: 'down'}): a "simple" request (text/plain), sent with no preflight;
  form:  a form that submits itself (enctype text/plain) to
         http://evil.example:PORT/cluster/members/FORM_VICTIM?action=down, where Chromium resolves
         evil.example to 127.0.0.1 (--host-resolver-rules): the DNS-rebinding shape, with
         Host: evil.example:PORT.
The script prints what each request got back (the fetch's answer is opaque to the page; the form's
landing page shows the endpoint's answer) and exits 0 once both requests are answered; the test
then asks the node whether the victims were downed. Exit 1 when a step timed out, 2 when Chromium,
its driver or Selenium is missing (Debian: chromium chromium-driver python3-selenium).
"""
import argparse
import http.server
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument('port', type=int)
ap.add_argument('fetch_victim')
ap.add_argument('form_victim')
ap.add_argument('--timeout', type=float, default=30)
args = ap.parse_args()

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError as e:
    print('cross_site_check: python3-selenium is missing (%s)' % e)
    sys.exit(2)

target = 'http://127.0.0.1:%d' % args.port
rebound = 'http://evil.example:%d' % args.port
pages = {
    '/fetch': """<!doctype html><title>fetch</title><script>
fetch('%s/cluster/members/%s', {method: 'POST', mode: 'no-cors', body: 'down'})
  .then(() => { document.title = 'answered'; }, e => { document.title = 'refused: ' + e; });
</script>""" % (target, args.fetch_victim),
    '/form': """<!doctype html><title>form</title>
<form id=f method=POST enctype="text/plain" action="%s/cluster/members/%s?action=down">
<input type=hidden name=action value=down></form>
<script>document.getElementById('f').submit();</script>""" % (rebound, args.form_victim),
}


class Attacker(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = pages.get(self.path, 'no such page').encode()
        self.send_response(200 if self.path in pages else 404)
        self.send_header('Content-Type', 'text/html; charset=utf-8')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *a):
        pass


server = http.server.ThreadingHTTPServer(('127.0.0.2', 0), Attacker)
threading.Thread(target=server.serve_forever, daemon=True).start()
origin = 'http://127.0.0.2:%d' % server.server_address[1]

opts = webdriver.ChromeOptions()
opts.binary_location = '/usr/bin/chromium'
for a in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
          '--no-first-run', '--disable-extensions',
          '--host-resolver-rules=MAP evil.example 127.0.0.1'):
    opts.add_argument(a)
try:
    driver = webdriver.Chrome(service=Service('/usr/bin/chromedriver'), options=opts)
except Exception as e:
    print('cross_site_check: cannot start headless chromium: %s' % e)
    sys.exit(2)


def wait(what, pred):
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        try:
            if pred():
                return True
        except Exception:
            pass
        time.sleep(0.1)
    print('cross_site_check: timed out waiting for %s' % what, flush=True)
    return False


ok = True
try:
    driver.get(origin + '/fetch')
    if wait('the fetch to be answered', lambda: driver.title != 'fetch'):
        print('cross_site_check: fetch from %s: %s' % (origin, driver.title), flush=True)
    else:
        ok = False
    driver.get(origin + '/form')
    if wait('the form to land', lambda: driver.current_url.startswith(rebound)):
        wait('the landing page', lambda: driver.execute_script(
            'return document.readyState') == 'complete')
        text = driver.execute_script('return document.body ? document.body.innerText : ""')
        print('cross_site_check: form from %s landed on %s: %s'
              % (origin, driver.current_url, text.strip()[:300]), flush=True)
    else:
        ok = False
finally:
    driver.quit()
    server.shutdown()
sys.exit(0 if ok else 1)
