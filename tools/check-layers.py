#!/usr/bin/env python3
"""check-layers.py — the library's layers, as tools/layers.txt states them, checked against the
code: which object file defines each symbol and which object files use it (nm), so a call that
climbs a layer fails here, not in a reader's head.

    python3 tools/check-layers.py [--spec tools/layers.txt] [--objdir build/release/obj]

The spec names layers, bottom first. A line is

    NAME = PATH... [-> LOWER...]

where a PATH is a source file (ddata/util.c) or a folder's files (ddata/types/*.c), and the
arrow lists the layers NAME may call besides itself; what those may call, NAME may too. Every
source of the four modules belongs to exactly one layer, the arrows form no cycle, and every use
of a symbol defined in another layer's file follows an arrow. Calls inside a layer are free;
a layer that is one file makes the order between files exact. Exit 0 when the code keeps the
spec, 1 with one line per broken rule (the caller, the callee and the symbols), 2 on a bad spec
or a missing object.
"""
import argparse
import collections
import fnmatch
import glob
import os
import re
import subprocess
import sys

MODULES = ('ddata', 'membership', 'durable', 'sharding')


def sources():
    """Every library source file, as SConstruct globs them (a module and its subfolders)."""
    out = []
    for m in MODULES:
        out += glob.glob('%s/*.c' % m) + glob.glob('%s/*/*.c' % m)
    return sorted(out)


def spec_error(msg):
    print(msg)
    sys.exit(2)


def parse_spec(path):
    layers = collections.OrderedDict()  # name -> (patterns, lower names)
    with open(path) as f:
        text = f.read()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        m = re.match(r'^(\S+)\s*=\s*([^>]*?)\s*(?:->\s*(.*))?$', line)
        if not m or not m.group(2):
            spec_error('%s:%d: expected "NAME = PATH... [-> LOWER...]"' % (path, n))
        name, pats, lower = m.group(1), m.group(2).split(), (m.group(3) or '').split()
        if name in layers:
            spec_error('%s:%d: layer %s is named twice' % (path, n, name))
        for low in lower:
            if low not in layers:
                # bottom first: an arrow may only point at a layer already stated, which also
                # keeps the arrows free of cycles
                spec_error('%s:%d: %s -> %s: %s is not stated above it' %
                                 (path, n, name, low, low))
        layers[name] = (pats, lower)
    return layers


def reachable(layers):
    """name -> every layer it may call (itself, its arrows, and theirs)."""
    out = {}
    for name, (_, lower) in layers.items():  # bottom first, so the lower sets are complete
        s = {name}
        for low in lower:
            s |= out[low]
        out[name] = s
    return out


def owner_of(layers, srcs, spec):
    owner, bad = {}, []
    for src in srcs:
        # a pattern's wildcard stays inside its folder: ddata/*.c is not ddata/types/crdt.c
        hits = [name for name, (pats, _) in layers.items()
                if any(os.path.dirname(src) == os.path.dirname(p) and
                       fnmatch.fnmatchcase(os.path.basename(src), os.path.basename(p))
                       for p in pats)]
        if len(hits) != 1:
            bad.append('%s: %s' % (src, 'in no layer of ' + spec if not hits
                                   else 'in several layers: ' + ', '.join(hits)))
        else:
            owner[src] = hits[0]
    return owner, bad


def symbols(obj):
    """(defined, undefined) global symbols of an object file."""
    out = subprocess.run(['nm', '-g', obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == 'U':
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in 'TDBRCVWGS':
            defined.add(parts[2])
    return defined, used


def main(argv):
    ap = argparse.ArgumentParser(description='check the library against tools/layers.txt')
    ap.add_argument('--spec', default='tools/layers.txt')
    ap.add_argument('--objdir', default='build/release/obj')
    a = ap.parse_args(argv)

    layers = parse_spec(a.spec)
    srcs = sources()
    owner, problems = owner_of(layers, srcs, a.spec)
    if problems:
        print('\n'.join(problems))
        return 2
    may = reachable(layers)

    where, uses = {}, {}
    for src in srcs:
        obj = os.path.join(a.objdir, src[:-2] + '.o')
        if not os.path.exists(obj):
            print('%s: no object (build the library first: scons build/lib)' % obj)
            return 2
        defined, used = symbols(obj)
        for s in defined:
            where[s] = src
        uses[src] = used

    broken = collections.defaultdict(set)
    for src, used in uses.items():
        for s in used:
            callee = where.get(s)
            if callee and owner[callee] not in may[owner[src]]:
                broken[(src, callee)].add(s)
    for (src, callee), syms in sorted(broken.items()):
        print('%s (%s) uses %s (%s), which it may not: %s' %
              (src, owner[src], callee, owner[callee], ', '.join(sorted(syms))))
    if broken:
        print('%d uses climb a layer of %s' % (sum(len(v) for v in broken.values()), a.spec))
        return 1
    print('check-layers: %d files in %d layers keep %s' % (len(srcs), len(layers), a.spec))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
