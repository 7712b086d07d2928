#!/usr/bin/env python3
"""Import circles between the files of a crate.

Usage: scripts/import-circles.py [CRATE_DIR ...]   (default: every workspace member)

Each file of a crate's src/ is a node; a file points at the files whose items it names, by a
`use` or a path (`crate::a::b`, `super::x`, a child module's name). A name a module only
brings in with `use` (a re-export, or an import its children reach through `super::`) points
on to where it comes from, so a folder's mod.rs that re-exports its files is no hub. Unit-test
modules (`#[cfg(test)] mod tests`, `x_tests.rs`) are left out: they look at their module from
outside. A circle is a strongly connected component of more than one file; each is printed
with its edges, and the exit code is 1 if there is any. Between crates the compiler already
forbids circles; this holds the files of each crate to the same rule.
"""
import glob, os, re, sys
from collections import defaultdict

def strip_comments(src):
    """Comments, strings and character literals out, in one pass that knows which is which."""
    out = []; i = 0; n = len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); i = n if j < 0 else j
        elif src.startswith('/*', i):
            depth = 0
            while i < n:
                if src.startswith('/*', i): depth += 1; i += 2
                elif src.startswith('*/', i):
                    depth -= 1; i += 2
                    if depth == 0: break
                else: i += 1
        elif c == 'r' and re.match(r'r#*"', src[i:i+8]) and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            m = re.match(r'r(#*)"', src[i:]); hashes = m.group(1)
            j = src.find('"' + hashes, i + len(m.group(0)))
            out.append('""'); i = n if j < 0 else j + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            out.append('""'); i = j + 1
        elif c == "'":
            m = re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^'\\])'", src[i:])
            if m: out.append("' '"); i += len(m.group(0))
            else: out.append(c); i += 1
        else:
            out.append(c); i += 1
    return ''.join(out)

def strip_strings(src):
    return src

def strip_test_mods(src):
    out = []; i = 0
    pat = re.compile(r'#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*(\{|;)')
    while True:
        m = pat.search(src, i)
        if not m:
            out.append(src[i:]); break
        out.append(src[i:m.start()])
        if m.group(1) == ';':
            i = m.end(); continue
        depth = 1; j = m.end()
        while j < len(src) and depth:
            if src[j] == '{': depth += 1
            elif src[j] == '}': depth -= 1
            j += 1
        i = j
    return ''.join(out)

def crate_files(root):
    """module path (tuple) -> file, for src/ below root."""
    mods = {}
    src = os.path.join(root, 'src')
    for dp, dn, fn in os.walk(src):
        for f in fn:
            if not f.endswith('.rs'): continue
            p = os.path.join(dp, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel in (['main'], ['lib']): key = ()
            elif rel[-1] == 'mod': key = tuple(rel[:-1])
            else: key = tuple(rel)
            if f.endswith('_tests.rs') or (len(rel) > 1 and rel[0] == 'bin'): continue
            mods[key] = p
    return mods

def expand_use(tree):
    """'a::{b, c::{d, e}}' -> ['a::b', 'a::c::d', 'a::c::e']"""
    tree = tree.strip()
    i = tree.find('{')
    if i < 0:
        return [re.split(r'\s+as\s+', tree)[0].strip()]
    prefix = tree[:i]
    body = tree[i+1:tree.rfind('}')]
    parts = []; depth = 0; cur = ''
    for ch in body:
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur); cur = ''
        else: cur += ch
    parts.append(cur)
    res = []
    for p in parts:
        if p.strip():
            for e in expand_use(p): res.append(prefix + e)
    return res

def resolve(path, cur, mods, is_mod_file):
    segs = [s for s in path.split('::') if s]
    if not segs: return None
    if segs[0] == 'crate': b = []; segs = segs[1:]
    elif segs[0] in ('super', 'self'):
        b = list(cur)
        while segs and segs[0] in ('super', 'self'):
            if segs[0] == 'super': b = b[:-1]
            segs = segs[1:]
    elif tuple(list(cur) + [segs[0]]) in mods: b = list(cur)
    else: return None
    full = b + segs
    for n in range(len(full), -1, -1):
        k = tuple(full[:n])
        if k in mods:
            rest = full[n:]
            seen = getattr(resolve, 'depth', 0)
            if rest and seen < 8:
                target = graph.aliases.get(k, {}).get(rest[0])
                if target and target.split('::')[0] in ('crate', 'super', 'self') or (target and tuple(list(k) + [target.split('::')[0]]) in mods):
                    resolve.depth = seen + 1
                    try:
                        r = resolve('::'.join([target] + rest[1:]), k, mods, False)
                    finally:
                        resolve.depth = seen
                    if r is not None: return r
            return k
    return None

def graph(root):
    mods = crate_files(root)
    edges = defaultdict(set)
    texts = {k: strip_test_mods(strip_strings(strip_comments(open(p).read()))) for k, p in mods.items()}
    # The names each module brings in with `use` (re-exports and private imports alike): a path
    # through such a name goes on to where the name comes from, not to the module that imports it.
    aliases = {}
    for key, src in texts.items():
        amap = {}
        for m in re.finditer(r'\buse\s+([^;]+);', src):
            for u in expand_use(m.group(1)):
                parts = re.split(r'\s+as\s+', u)
                name = parts[1].strip() if len(parts) > 1 else parts[0].split('::')[-1].strip()
                amap[name] = parts[0].strip()
        aliases[key] = amap
    graph.aliases = aliases
    for key, p in mods.items():
        src = texts[key]
        paths = []
        for m in re.finditer(r'\buse\s+([^;]+);', src):
            paths += expand_use(m.group(1))
        paths += re.findall(r'(?<![\w:])\w+(?:::\w+)+', src)
        for pth in paths:
            t = resolve(pth, key, mods, False)
            if t is not None and t != key:
                edges[key].add(t)
    return mods, edges

def sccs(nodes, edges):
    index = {}; low = {}; stack = []; on = set(); out = []; c = [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        index[v] = low[v] = c[0]; c[0] += 1; stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(comp)
    for v in nodes:
        if v not in index: sc(v)
    return out

def members():
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(here)
    text = open(os.path.join(top, 'Cargo.toml')).read()
    block = re.search(r'members\s*=\s*\[(.*?)\]', text, re.S).group(1)
    out = []
    for m in re.findall(r'"([^"]+)"', block):
        out += sorted(glob.glob(os.path.join(top, m)))
    return [p for p in out if os.path.isdir(os.path.join(p, 'src'))]

def main():
    roots = sys.argv[1:] or members()
    bad = 0
    for root in roots:
        mods, edges = graph(root)
        for comp in sccs(list(mods), edges):
            if len(comp) > 1:
                bad += 1
                print(f'{os.path.relpath(root)}: circle of {len(comp)} files:')
                for k in sorted(comp):
                    print('   ', os.path.relpath(mods[k]), '->', ', '.join(sorted(os.path.relpath(mods[t]) for t in edges[k] if t in comp)))
    print(f'{bad} circle(s)')
    return 1 if bad else 0

if __name__ == '__main__':
    sys.exit(main())
