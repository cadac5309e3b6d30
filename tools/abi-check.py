#!/usr/bin/env python3
"""abi-check.py — libshoal's public ABI against the releases it must stay compatible with.

    python3 tools/abi-check.py [check]     (what `scons abi` runs after `scons`)
    python3 tools/abi-check.py exports     only the first check below
    python3 tools/abi-check.py selftest    shows that a changed signature fails and an announced
                                           one passes

check:
  1. build/lib/libshoal.so.<version> exports exactly the functions the four public headers
     declare (ddata/ddata.h, membership/membership.h, sharding/sharding.h, durable/durable.h):
     nothing internal leaks, nothing public is hidden (a definition compiled without its header
     would be).
  2. For each release in compat/releases ("NAME COMMIT" lines): its tree is taken from git history
     (git archive) into build/releases/NAME, its shared library built there with its own SConstruct
     (kept between runs: a commit's build does not change), and abidiff (Debian: abigail-tools)
     compares the two libraries from their DWARF (-g), restricted to the release's public ABI: the
     functions its four public headers declare (the symbol list, -w) and the types those headers
     define (--hf1/--hf2). A release before 0.2.0 exported every internal function too; they are
     not its public ABI, so their removal is not a break.
     A change abidiff reports (a public function removed, its parameters or return type changed,
     a public type's layout changed) fails the check unless it is announced: either the SONAME
     changed (SHOAL_SOVERSION in ddata/ddata.h: a break the loader sees), or
     compat/abi-suppressions names it (libabigail's suppression format; every section there must
     follow a "# reason:" comment, and CHANGELOG.md lists the change). Additions never fail.

Exit 0 when every check passes, 1 when one fails (the abidiff report is printed), 2 when a tool
or a build is missing or fails. docs/compatibility.md describes the promise this checks.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import releases  # noqa: E402  (tools/releases.py: the releases of compat/releases, built)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
MODULES = ('ddata', 'membership', 'sharding', 'durable')
RELEASES = 'compat/releases'
SUPPRESSIONS = 'compat/abi-suppressions'
# the public function whose signature the self-test changes, and how (header and definition)
SELFTEST_FN = 'shoal_durable_last_error'
SELFTEST_FROM = 'char *buf, size_t len)'
SELFTEST_TO = 'char *buf, unsigned len)'


class Failure(Exception):
    """A check failed (exit 1)."""


class ToolError(Exception):
    """A tool or a build failed (exit 2)."""


def log(msg):
    print('abi-check: ' + msg, flush=True)


def public_headers(tree):
    return [os.path.join(tree, m, m + '.h') for m in MODULES]


def version(tree):
    with open(os.path.join(tree, 'ddata/ddata.h')) as f:
        text = f.read()
    return '.'.join(re.search(r'#define SHOAL_VERSION_%s\s+(\d+)' % p, text).group(1)
                    for p in ('MAJOR', 'MINOR', 'PATCH'))


def lib_path(tree):
    return os.path.join(tree, 'build/lib/libshoal.so.' + version(tree))


def run(cmd, **kw):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, **kw)
    except FileNotFoundError:
        raise ToolError('%s not found (sh tools/install-deps.sh installs it)' % cmd[0])


def declared_functions(tree):
    """The functions the tree's four public headers declare, as gcc sees them (-aux-info lists
    every prototype with the file that declares it; no C parser of our own)."""
    headers = [os.path.realpath(h) for h in public_headers(tree)]
    with tempfile.TemporaryDirectory() as tmp:
        tu = os.path.join(tmp, 'public.c')
        with open(tu, 'w') as f:
            f.writelines('#include "%s"\n' % h for h in headers)
        aux = os.path.join(tmp, 'aux.txt')
        cmd = ['gcc', '-std=c11', '-D_GNU_SOURCE', '-fsyntax-only', '-aux-info', aux, tu]
        cmd += ['-I' + os.path.join(tree, m) for m in MODULES]
        r = run(cmd)
        if r.returncode != 0:
            raise ToolError('the public headers of %s do not compile:\n%s' % (tree, r.stdout))
        names = set()
        with open(aux) as f:
            for line in f:
                m = re.match(r'/\* (.*?):\d+:\w+ \*/ extern .*?\b([A-Za-z_]\w*) \(', line)
                if m and os.path.realpath(m.group(1)) in headers:
                    names.add(m.group(2))
    if not names:
        raise ToolError('no function found in the public headers of %s' % tree)
    return names


def exported_symbols(lib):
    r = run(['nm', '-D', '--defined-only', lib])
    if r.returncode != 0:
        raise ToolError('nm %s: %s' % (lib, r.stdout))
    return {line.split()[-1] for line in r.stdout.splitlines() if line.strip()}


def soname(lib):
    r = run(['readelf', '-d', lib])
    m = re.search(r'\(SONAME\).*\[(.*)\]', r.stdout)
    if not m:
        raise ToolError('%s has no SONAME' % lib)
    return m.group(1)


def check_exports(tree, lib):
    declared = declared_functions(tree)
    exported = exported_symbols(lib)
    leaked = sorted(exported - declared)
    hidden = sorted(declared - exported)
    for name in leaked:
        log('%s exports %s, which no public header declares' % (lib, name))
    for name in hidden:
        log('%s does not export %s, which a public header declares' % (lib, name))
    if leaked or hidden:
        raise Failure('the exported symbols are not the public API')
    log('%s exports the %d functions of the public headers, nothing else' % (lib, len(exported)))


def read_releases(path):
    try:
        return releases.releases(path)
    except releases.ListError as e:
        raise ToolError(str(e))


def check_suppressions(path):
    """Every section of the suppression file follows a "# reason:" comment: an accepted break
    says why, in the file CI reads."""
    if not os.path.exists(path):
        return False
    sections = 0
    reason = False
    with open(path) as f:
        for n, line in enumerate(f, 1):
            s = line.strip()
            if s.startswith('# reason:'):
                reason = True
            elif s.startswith('['):
                if not reason:
                    raise ToolError('%s:%d: the section has no "# reason:" comment before it'
                                    % (path, n))
                reason = False
                sections += 1
    return sections > 0


def jobs():
    return os.environ.get('SHOAL_JOBS', '2')


def build_release(name, commit):
    """The release's tree, built once in build/releases/NAME from git history (tools/releases.py,
    which scons upgrade shares)."""
    if releases.build(name, commit) != 0:
        raise ToolError('the release %s could not be built (see above)' % name)
    return releases.release_dir(name)


def build_lib(tree):
    target = os.path.relpath(lib_path(tree), tree)
    r = run(['nice', 'scons', '-j' + jobs(), target], cwd=tree)
    if r.returncode != 0:
        raise ToolError('building %s in %s failed:\n%s' % (target, tree, r.stdout[-4000:]))


LEAF_TYPE = re.compile(r"^'(?:struct|union|enum|class|typedef) [^']* at ([^':]+):\d+:\d+' changed:")
SUMMARY = re.compile(r'summary: (\d+) Removed, (\d+) Changed')


def abidiff(old_tree, old_lib, new_tree, new_lib, suppressions):
    """abidiff's verdict and report, restricted to the old tree's public ABI: its exit code (0 when
    nothing public changed, else 4) and the report's parts that matter.

    abidiff runs in leaf mode (each changed type once, with the interfaces it reaches) on the
    functions the release's public headers declare (the symbol list, -w). Of the changed types,
    those defined in a public header count (a settings struct that grew, a stats struct a
    function fills); the private structs behind opaque handles (struct shoal_node, shoal_system...)
    may change freely. (--hf1/--hf2 cannot tell them apart: abidiff matched no type of the
    headers as given, dropped every type change, and a grown public struct passed unseen.)"""
    public = {os.path.basename(h) for h in public_headers(old_tree)}
    with tempfile.NamedTemporaryFile('w', suffix='.symbols') as wl:
        # the symbol list: only these functions are compared (added ones cannot break anything)
        wl.write('[abi_whitelist]\n')
        wl.writelines('  %s\n' % s for s in sorted(declared_functions(old_tree)))
        wl.flush()
        cmd = ['abidiff', '--no-added-syms', '--leaf-changes-only', '--impacted-interfaces',
               '-w', wl.name]
        if suppressions and check_suppressions(suppressions):
            cmd += ['--suppressions', suppressions]
        r = run(cmd + [old_lib, new_lib])
    if r.returncode & 3:  # 1: error, 2: usage
        raise ToolError('abidiff failed (%d):\n%s' % (r.returncode, r.stdout))
    kept, keep, breaks = [], True, 0
    for line in r.stdout.splitlines():
        m = LEAF_TYPE.match(line)
        if m:
            keep = os.path.basename(m.group(1)) in public
            breaks += keep
        elif line and not line.startswith(' '):
            keep = True  # summaries, removed or changed functions and variables
            s = SUMMARY.search(line)
            if s and 'leaf types' not in line:
                breaks += int(s.group(1)) + int(s.group(2))
        if keep:
            kept.append(line)
    return (4 if breaks else 0), '\n'.join(kept)


def compare(name, old_tree, new_tree, suppressions):
    old_lib, new_lib = lib_path(old_tree), lib_path(new_tree)
    rc, report = abidiff(old_tree, old_lib, new_tree, new_lib, suppressions)
    if rc == 0:
        log('%s: the public ABI is unchanged (additions aside)' % name)
        return
    print(report)
    old_so, new_so = soname(old_lib), soname(new_lib)
    if old_so != new_so:
        log('%s: the ABI changed, announced by the SONAME (%s -> %s)'
            % (name, old_so, new_so))
        return
    raise Failure('%s: the public ABI changed and %s is still %s: raise '
                  'SHOAL_SOVERSION (ddata/ddata.h), or name the change in %s with its reason '
                  '(docs/compatibility.md)' % (name, os.path.basename(new_lib), new_so,
                                               SUPPRESSIONS))


def cmd_exports(args):
    check_exports(ROOT, lib_path(ROOT))


def cmd_check(args):
    lib = lib_path(ROOT)
    if not os.path.exists(lib):
        raise ToolError('%s is missing: run scons first' % lib)
    check_exports(ROOT, lib)
    for name, commit in read_releases(os.path.join(ROOT, RELEASES)):
        compare(name + ' -> this tree', build_release(name, commit), ROOT,
                os.path.join(ROOT, SUPPRESSIONS))


def cmd_selftest(args):
    """The first release of compat/releases against a copy of itself with one public signature
    changed (SELFTEST_FN): the check must refuse it, and accept it once a suppression names it.
    The copy keeps the release's objects, so only what includes durable.h is rebuilt."""
    name, commit = read_releases(os.path.join(ROOT, RELEASES))[0]
    old = build_release(name, commit)
    new = os.path.join(ROOT, 'build/abi-selftest')
    shutil.rmtree(new, ignore_errors=True)
    shutil.copytree(old, new, symlinks=True)
    changed = 0
    for rel in ['durable/durable.h'] + sorted(os.listdir(os.path.join(new, 'durable'))):
        path = os.path.join(new, rel if '/' in rel else 'durable/' + rel)
        if not path.endswith(('.c', '.h')):
            continue
        text = open(path).read()
        pat = re.compile(r'(\b%s\(shoal_durable_t \*\w+, )%s' % (SELFTEST_FN, re.escape(SELFTEST_FROM)))
        text, n = pat.subn(lambda m: m.group(1) + SELFTEST_TO, text)
        if n:
            changed += n
            with open(path, 'w') as f:
                f.write(text)
    if changed < 2:  # the declaration and the definition
        raise ToolError('selftest: %s(..., %s not found in %s' % (SELFTEST_FN, SELFTEST_FROM, new))
    build_lib(new)
    try:
        compare(name + ' (unchanged)', old, old, None)
        try:
            compare(name + ' -> a copy with %s changed' % SELFTEST_FN, old, new, None)
        except Failure as e:
            log('selftest: refused as it should be (%s)' % e)
        else:
            raise Failure('selftest: a changed signature of %s passed the check' % SELFTEST_FN)
        with tempfile.NamedTemporaryFile('w', suffix='.suppr') as s:
            s.write('# reason: the self-test announces its own change\n'
                    '[suppress_function]\n  name = %s\n' % SELFTEST_FN)
            s.flush()
            compare(name + ' -> the same copy, the change announced', old, new, s.name)
        # a public settings struct that grows (a field added at its end): the library then fills
        # or reads more than an old program's struct holds
        hdr = os.path.join(new, 'durable/durable.h')
        text = open(hdr).read()
        grown = text.replace('} shoal_durable_settings_t;',
                             '    uint32_t selftest_field;\n} shoal_durable_settings_t;', 1)
        if grown == text:
            raise ToolError('selftest: shoal_durable_settings_t not found in %s' % hdr)
        with open(hdr, 'w') as f:
            f.write(grown)
        build_lib(new)
        try:
            compare(name + ' -> a copy whose shoal_durable_settings_t grew', old, new, None)
        except Failure as e:
            log('selftest: refused as it should be (%s)' % e)
        else:
            raise Failure('selftest: a grown public struct passed the check')
        log('selftest: passed')
    finally:
        shutil.rmtree(new, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('mode', nargs='?', default='check', choices=('check', 'exports', 'selftest'))
    args = ap.parse_args()
    os.chdir(ROOT)
    try:
        {'check': cmd_check, 'exports': cmd_exports, 'selftest': cmd_selftest}[args.mode](args)
    except Failure as e:
        log('FAILED: %s' % e)
        return 1
    except ToolError as e:
        log('error: %s' % e)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
