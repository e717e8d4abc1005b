#!/usr/bin/env python3
"""tests/comment_share.py [--max PCT] [--max-lines FILE=N ...] PATH... — how much of C/CUDA
source is comment, by characters: the text of // and /* */ comments (markers included) over
every character that is not indentation or a line break. Prints one line a file and a total
per PATH argument (a folder counts its *.c, *.h, *.cu, *.cuh). With --max, exits 1 when a
total is above PCT; --max-lines FILE=N also fails a file longer than N lines. Strings and
character literals are skipped, so an asm string's "//" is code."""
import os
import sys

EXTS = ('.c', '.h', '.cu', '.cuh')


def shares(text):
    """(comment chars, counted chars) of one file."""
    comment = counted = 0
    i, n = 0, len(text)
    state = 'code'
    at_line_start = True
    while i < n:
        ch = text[i]
        if ch == '\n':
            at_line_start = True
            if state == 'line':
                state = 'code'
            i += 1
            continue
        if at_line_start and ch in ' \t':
            i += 1
            continue
        at_line_start = False
        counted += 1
        if state == 'code':
            if text.startswith('//', i):
                state = 'line'
                comment += 1
            elif text.startswith('/*', i):
                state = 'block'
                comment += 2
                counted += 1
                i += 2
                continue
            elif ch in '"\'':
                state = ch
        elif state in ('line', 'block'):
            comment += 1
            if state == 'block' and text.startswith('*/', i):
                comment += 1
                counted += 1
                state = 'code'
                i += 2
                continue
        else:  # inside a string or character literal
            if ch == '\\':
                counted += 1
                i += 2
                continue
            if ch == state:
                state = 'code'
        i += 1
    return comment, counted


def files_of(path):
    if os.path.isfile(path):
        return [path]
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(EXTS))


def main(argv):
    limit, max_lines, paths = None, {}, []
    it = iter(argv)
    for a in it:
        if a == '--max':
            limit = float(next(it))
        elif a == '--max-lines':
            f, _, nlines = next(it).partition('=')
            max_lines[os.path.normpath(f)] = int(nlines)
        else:
            paths.append(a)
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    status = 0
    for path in paths:
        tc = tn = 0
        for f in files_of(path):
            text = open(f, encoding='utf-8').read()
            c, n = shares(text)
            tc, tn = tc + c, tn + n
            lines = text.count('\n')
            print(f'{f}: {100.0 * c / max(n, 1):5.1f}% comment, {lines} lines')
            cap = max_lines.get(os.path.normpath(f))
            if cap is not None and lines > cap:
                print(f'{f}: {lines} lines, over the {cap} allowed')
                status = 1
        share = 100.0 * tc / max(tn, 1)
        print(f'{path}: {share:.1f}% comment ({tc} of {tn} characters)')
        if limit is not None and share > limit:
            print(f'{path}: over the {limit:g}% allowed')
            status = 1
    return status


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
