#!/usr/bin/env python3
"""function_lengths.py LIMIT [--allow FILE] SOURCE...: every function body in the C++ SOURCEs
(at namespace or class scope) longer than LIMIT lines, from the first line of its signature to
its closing brace, one line each: "path:line: N lines: name (signature...)". Exit 1 when one
is reported. A wrapped signature, lambdas, initialiser braces, comments and string literals
(raw ones too) are handled by matching braces on the text with comments and literals blanked.

--allow FILE: lines "path name N" (# comments): that function may be up to N lines (a
ratchet for the functions longer than LIMIT that are still to be split: a listed function
that grows, or one longer than LIMIT that is not listed, is reported; a listed one that is
now short enough is reported too, so that the list only shrinks). Used by
layout_rules_test.sh."""
import re, sys

CONTROL = re.compile(r'^\s*(if|for|while|switch|catch|do|else|try|return)\b')
SCOPE = re.compile(r'\b(namespace|class|struct|union|enum)\b')

def strip(text):
    """The text with comments and string/char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i-1].isalnum() or text[i-1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c); i += 1; continue
            end = ')' + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c in '"\'':
            if c == "'" and i > 0 and text[i-1].isalnum() and i + 1 < n and text[i+1].isalnum():
                out.append(c); i += 1; continue   # digit separator 1'000
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(c + ' ' * (j - i - 2) + c if j - i >= 2 else text[i:j]); i = j
        else:
            out.append(c); i += 1
    return ''.join(out)

def functions(path):
    """(first line, last line, signature) of every function body at namespace or class scope."""
    text = strip(open(path).read())
    stack = []            # scope kinds: 'ns', 'fn', 'blk'
    stmt_start = None     # offset where the current statement began
    stmt = []
    line = 1
    starts = {}           # depth -> (line, signature) of an open function
    found = []
    for i, c in enumerate(text):
        if c == '\n':
            line += 1
        if c == '{':
            s = ''.join(stmt).strip()
            inside_fn = any(k != 'ns' for k in stack)
            if (not inside_fn and ')' in s and not CONTROL.match(s) and not s.endswith('=')
                    and not re.search(r'=\s*$', s) and not SCOPE.match(s)):
                kind = 'fn'
                first = line - s.count('\n')
                starts[len(stack)] = (first, ' '.join(s.split())[:70])
            elif not inside_fn and (SCOPE.search(s.split('(')[0]) or s.startswith('extern') or s == ''):
                kind = 'ns'
            else:
                kind = 'blk'
            stack.append(kind)
            stmt = []
        elif c == '}':
            kind = stack.pop() if stack else 'blk'
            if kind == 'fn':
                first, sig = starts.pop(len(stack))
                found.append((first, line, sig))
            stmt = []
        elif c == ';':
            stmt = []
        else:
            if stmt or not c.isspace():
                stmt.append(c)
            # a preprocessor line is not part of the statement
            if c == '\n' and ''.join(stmt).lstrip().startswith('#'):
                stmt = []
    return found


def name_of(signature):
    """The function's qualified name: the identifier (with ::) before the first '('."""
    m = re.search(r'([A-Za-z_~][A-Za-z0-9_:~]*(?:operator\S*)?)\s*\(', signature)
    return m.group(1) if m else signature


def main(argv):
    limit = int(argv[1])
    args = argv[2:]
    allowed = {}
    if args[:1] == ['--allow']:
        for raw in open(args[1]):
            raw = raw.split('#')[0].split()
            if raw:
                allowed[(raw[0], raw[1])] = int(raw[2])
        args = args[2:]
    bad = []
    seen = set()
    for f in args:
        for first, last, sig in functions(f):
            n = last - first + 1
            key = (f, name_of(sig))
            cap = allowed.get(key)
            if key in allowed:
                seen.add(key)
                if n > cap:
                    bad.append(f'{f}:{first}: {n} lines: {key[1]} (listed at {cap}: it grew)')
                elif n <= limit:
                    bad.append(f'{f}:{first}: {n} lines: {key[1]} (listed, now short: remove it from the list)')
            elif n > limit:
                bad.append(f'{f}:{first}: {n} lines: {key[1]} ({sig})')
    for key in sorted(set(allowed) - seen):
        if key[0] in args:
            bad.append(f'{key[0]}: {key[1]} is listed but not found (renamed or removed: update the list)')
    print('\n'.join(bad), end='\n' if bad else '')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
