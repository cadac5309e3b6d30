#!/usr/bin/env python3
"""Every C snippet of the documentation is code that is compiled and run.

  tools/check-snippets.py [FILE.md ...]      (default: README.md and docs/*.md)

Each ```c block of the markdown files must be a verbatim excerpt of one of the single-file
programs examples/*.c, which test_install builds against the staged `scons install` and runs:
its lines, with their common indentation removed, must equal consecutive lines of the program
with theirs removed. The paragraph right before the block says which program (a "marked
excerpt"): it names examples/<name>.c, as a link or in backquotes (the last one it names). Exit 0 when every block is such an excerpt;
1 otherwise, naming each file and line of a block that is not. Run from the source tree's root;
test_docs runs it in `scons check`.
"""
import glob
import os
import re
import sys
import textwrap

FENCE = re.compile(r'^(\s*)```(\w*)\s*$')
MARK = re.compile(r'examples/([A-Za-z0-9_.-]+\.c)')


def blocks(path):
    """(line number, language, lines, the line before the block) of every fenced block."""
    with open(path) as f:
        lines = f.read().split('\n')
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i, m.group(2), []
        i += 1
        while i < len(lines) and not re.match(r'^\s*```\s*$', lines[i]):
            body.append(lines[i])
            i += 1
        # the paragraph right before the fence (its lines up to the blank line above it)
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        para = []
        while j >= 0 and lines[j].strip() and not lines[j].lstrip().startswith('```'):
            para.insert(0, lines[j])
            j -= 1
        before = ' '.join(para)
        out.append((start + 1, lang, body, before))
        i += 1
    return out


def dedent(lines):
    return textwrap.dedent('\n'.join(lines)).split('\n')


def is_excerpt(snippet, program):
    """True when snippet (dedented) equals consecutive lines of program (dedented the same way)."""
    n = len(snippet)
    if n == 0:
        return False
    for k in range(len(program) - n + 1):
        if program[k].strip() != snippet[0].strip():
            continue
        if dedent(program[k:k + n]) == snippet:
            return True
    return False


def main(argv):
    files = argv[1:] or ['README.md'] + sorted(glob.glob('docs/*.md'))
    programs = {}
    for p in sorted(glob.glob('examples/*.c')):
        with open(p) as f:
            programs[os.path.basename(p)] = f.read().split('\n')
    bad = checked = 0
    for md in files:
        for line, lang, body, before in blocks(md):
            if lang != 'c':
                continue
            checked += 1
            snippet = dedent(body)
            while snippet and not snippet[-1].strip():
                snippet.pop()
            marks = MARK.findall(before)
            mark = marks[-1] if marks else None  # the last program the paragraph names
            if not mark:
                print('%s:%d: the paragraph before a C snippet must name the program it is an '
                      'excerpt of (examples/<name>.c)' % (md, line))
                bad += 1
            elif mark not in programs:
                print('%s:%d: examples/%s is not one of the programs test_install builds '
                      '(examples/*.c)' % (md, line, mark))
                bad += 1
            elif not is_excerpt(snippet, programs[mark]):
                print('%s:%d: this C snippet is not a verbatim excerpt of examples/%s (copy the '
                      'lines again from the program)' % (md, line, mark))
                bad += 1
    print('%d C snippets checked in %d files, %d not excerpts of examples/*.c'
          % (checked, len(files), bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
