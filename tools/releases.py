#!/usr/bin/env python3
"""The previous releases of Shoal, built from this repository's git history.

  tools/releases.py list              NAME COMMIT DIR, one line per release in compat/releases
  tools/releases.py build [NAME...]   builds each release (all by default) in build/releases/NAME

A release's tree is exported with `git archive` (no work tree of git's, nothing shared with this
tree's build) and built there with its own SConstruct: the release library (build/lib) and the
programs a mixed cluster runs (build/bin: chaos-node, chaos-client, kvstore, shoal-member,
shoal-cluster, ddata-dump). A release already built from the same commit is kept (the marker
build/releases/NAME/.built holds its commit), so `scons upgrade` and `scons abi` build each once.

Exit status: 0, or 1 when a release cannot be built (its commit is not in this clone's history:
a shallow clone; or its build failed), with the reason on stderr.
"""
import os
import re
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(TOP, 'compat', 'releases')
PROGRAMS = ['chaos-node', 'chaos-client', 'kvstore', 'shoal-member', 'shoal-cluster', 'ddata-dump']


class ListError(Exception):
    """compat/releases has a line that is not NAME COMMIT."""


def releases(path=LIST):
    """[(name, commit)] from compat/releases, oldest first."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not re.fullmatch(r'[0-9a-f]{40}', parts[1]) or \
                    not re.fullmatch(r'[A-Za-z0-9._-]+', parts[0]):
                raise ListError('%s:%d: want "NAME COMMIT" (the full 40-hex commit)' % (path, n))
            out.append((parts[0], parts[1]))
    return out


def release_dir(name):
    return os.path.join(TOP, 'build', 'releases', name)


def build(name, commit):
    d = release_dir(name)
    marker = os.path.join(d, '.built')
    if os.path.exists(marker) and open(marker).read().strip() == commit:
        return 0
    if subprocess.call(['git', '-C', TOP, 'cat-file', '-e', commit + '^{commit}'],
                       stderr=subprocess.DEVNULL) != 0:
        sys.stderr.write('releases: %s (%s) is not in this clone\'s history: a shallow clone? '
                         '(git fetch --unshallow)\n' % (name, commit))
        return 1
    subprocess.call(['rm', '-rf', d])
    os.makedirs(d)
    sys.stdout.write('releases: building %s (%s) in %s\n' % (name, commit[:12], d))
    sys.stdout.flush()
    archive = subprocess.Popen(['git', '-C', TOP, 'archive', commit], stdout=subprocess.PIPE)
    rc = subprocess.call(['tar', '-x', '-C', d], stdin=archive.stdout)
    if archive.wait() != 0 or rc != 0:
        sys.stderr.write('releases: could not export %s\n' % commit)
        return 1
    targets = ['build/bin/' + p for p in PROGRAMS] + ['build/lib']
    with open(os.path.join(d, 'build.log'), 'w') as log:
        rc = subprocess.call(['scons', '-Q', '-j', str(os.cpu_count() or 2)] + targets, cwd=d,
                             stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.stderr.write('releases: the build of %s failed: see %s/build.log\n' % (name, d))
        return 1
    with open(marker, 'w') as f:
        f.write(commit + '\n')
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] not in ('list', 'build'):
        sys.stderr.write(__doc__)
        return 2
    try:
        known = releases()
    except ListError as e:
        sys.stderr.write('releases: %s\n' % e)
        return 2
    if argv[1] == 'list':
        for name, commit in known:
            print(name, commit, release_dir(name))
        return 0
    wanted = argv[2:] or [n for n, _ in known]
    rc = 0
    for name in wanted:
        commit = dict(known).get(name)
        if not commit:
            sys.stderr.write('releases: %s is not in compat/releases\n' % name)
            return 2
        rc |= build(name, commit)
    return rc


if __name__ == '__main__':
    sys.exit(main(sys.argv))
