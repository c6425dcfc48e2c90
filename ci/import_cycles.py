#!/usr/bin/env python3
"""Fails if the files of dpu-app/src/cluster/ import each other in a cycle.

An edge a -> b is any path to b's module in a's code (`use`, or a qualified path such as
`super::store::Store` or `crate::cluster::format::log::LogError`), outside its
`#[cfg(test)]` module. Each file is a module; `mod.rs` only declares its folder's.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dpu-app", "src", "cluster")


def modules():
    out = {}
    for folder, _, files in os.walk(ROOT):
        rel = os.path.relpath(folder, ROOT)
        parts = [] if rel == "." else rel.split(os.sep)
        for f in files:
            if f.endswith(".rs"):
                name = parts + ([] if f == "mod.rs" else [f[:-3]])
                out[tuple(name)] = os.path.join(folder, f)
    return out


def code_of(path):
    text = open(path).read()
    cut = re.search(r"#\[cfg\(test\)\]\s*mod tests", text)
    text = text[: cut.start()] if cut else text
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def resolve(me, path, mods):
    """The module a path (list of segments) names, from module `me`."""
    if path[0] == "crate":
        if path[1:2] != ["cluster"]:
            return None
        base, rest = (), path[2:]
    elif path[0] == "super":
        base = list(me[:-1])
        rest = path[1:]
        while rest and rest[0] == "super":
            base = base[:-1]
            rest = rest[1:]
        base = tuple(base)
    elif path[0] == "self":
        base, rest = me, path[1:]
    else:
        return None
    best = None
    for i in range(len(rest) + 1):
        cand = tuple(base) + tuple(rest[:i])
        if cand in mods:
            best = cand
    return best


def main():
    mods = modules()
    edges = {m: set() for m in mods}
    for m, path in mods.items():
        if path.endswith("mod.rs"):
            continue
        code = code_of(path)
        # `use a::{b, c::d}` groups: expand one level.
        for prefix, group in re.findall(r"\b((?:crate|super|self)(?:::\w+)*)::\{([^}]*)\}", code):
            for item in group.split(","):
                item = item.strip()
                if item:
                    segs = prefix.split("::") + item.split(" ")[0].split("::")
                    t = resolve(m, segs, mods)
                    if t and t != m and t != m[:-1]:
                        edges[m].add(t)
        for p in re.findall(r"\b((?:crate|super|self)(?:::\w+)+)", code):
            t = resolve(m, p.split("::"), mods)
            if t and t != m and t != m[:-1] and t != ():
                edges[m].add(t)
    # Tarjan's strongly connected components.
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in mods:
        if v not in index:
            visit(v)
    name = lambda m: "/".join(m) + ".rs" if m else "mod.rs"
    if comps:
        for c in comps:
            print("import cycle among: " + ", ".join(sorted(name(m) for m in c)))
            for a in sorted(c):
                for b in sorted(edges[a] & set(c)):
                    print(f"  {name(a)} -> {name(b)}")
        print("cluster/ files must import each other without cycles (issue 13): move the shared type down a layer, or return an effect instead of calling back")
        return 1
    print(f"no import cycles among {len(mods)} files of dpu-app/src/cluster/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
