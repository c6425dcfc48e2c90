#!/usr/bin/env python3
"""Fails if the files of any crate of the workspace import each other in a cycle.

The crates are every library and binary target of the workspace's members (the root
Cargo.toml's `[workspace] members` and the root package): `src/lib.rs`, `src/main.rs`,
`src/bin/*.rs`, `src/bin/*/main.rs` and the paths `[lib]` and `[[bin]]` name. A crate's
files are those its root reaches by `mod name;` declarations.

Each file is a module; `mod.rs`, `lib.rs` and `main.rs` only declare their folder's.
An edge a -> b is any path to b's module in a's code (`use`, a qualified path such as
`super::store::Store` or `crate::cluster::format::log::LogError`, or a path through a
module `use` bound, as `store::Store` after `use super::store;`), outside comments,
strings and its `#[cfg(test)] mod tests`. A path to one of a's own ancestors is no
edge: a module's file may declare children, and they may use what it defines.

Prints each cycle (a strongly connected set of files, with its edges) and their count;
exits 1 if there is any.
"""
import os
import re
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11: the few keys read here, by hand
    tomllib = None

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def manifest(path):
    """A Cargo.toml: `package`, `workspace.members`, `lib.path` and `bin[].path` at least."""
    with open(path, "rb") as f:
        if tomllib:
            return tomllib.load(f)
        text = f.read().decode()
    out, table = {}, None
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if m := re.fullmatch(r"\[\[(\w+)\]\]", line):
            table = {}
            out.setdefault(m.group(1), []).append(table)
        elif m := re.fullmatch(r"\[([\w.-]+)\]", line):
            table = out.setdefault(m.group(1).split(".")[0], {})
            for part in m.group(1).split(".")[1:]:
                table = table.setdefault(part, {})
        elif table is not None and (m := re.fullmatch(r'(\w+)\s*=\s*"([^"]*)"', line)):
            table[m.group(1)] = m.group(2)
        elif table is not None and (m := re.fullmatch(r"(\w+)\s*=\s*(true|false)", line)):
            table[m.group(1)] = m.group(2) == "true"
        elif table is not None and (m := re.fullmatch(r"(\w+)\s*=\s*\[(.*)\]", line)):
            table[m.group(1)] = re.findall(r'"([^"]*)"', m.group(2))
    return out


def packages():
    """The directories of the workspace's packages (the root package first)."""
    root = manifest(os.path.join(REPO, "Cargo.toml"))
    out = ["."] if "package" in root else []
    for m in root.get("workspace", {}).get("members", []):
        out.append(m)
    return out


def crate_roots(pkg):
    """The root files (repo-relative) of the library and binary targets of a package."""
    toml = manifest(os.path.join(REPO, pkg, "Cargo.toml"))
    roots = []

    def add(rel):
        path = os.path.normpath(os.path.join(pkg, rel))
        if os.path.isfile(os.path.join(REPO, path)) and path not in roots:
            roots.append(path)

    add(toml.get("lib", {}).get("path", "src/lib.rs"))
    for b in toml.get("bin", []):
        if "path" in b:
            add(b["path"])
    if toml.get("package", {}).get("autobins", True):
        add("src/main.rs")
        bin_dir = os.path.join(REPO, pkg, "src", "bin")
        if os.path.isdir(bin_dir):
            for f in sorted(os.listdir(bin_dir)):
                add(os.path.join("src", "bin", f) if f.endswith(".rs") else os.path.join("src", "bin", f, "main.rs"))
    return roots


SPECIAL = re.compile(r"""//|/\*|(?<!\w)b?r(#*)"|"|'""")
STRING_REST = re.compile(r'(?:\\.|[^"\\])*"', re.S)
CHAR = re.compile(r"'(?:\\u\{[0-9a-fA-F]*\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'")
COMMENT_MARK = re.compile(r"/\*|\*/")


def strip(text):
    """The code of a file without comments and with every string and char literal emptied
    (line breaks kept)."""
    out, i = [], 0
    while m := SPECIAL.search(text, i):
        out.append(text[i : m.start()])
        token, at = m.group(0), m.start()
        if token == "//":
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
        elif token == "/*":
            depth, end = 0, len(text)
            for mark in COMMENT_MARK.finditer(text, at):
                depth += 1 if mark.group(0) == "/*" else -1
                if depth == 0:
                    end = mark.end()
                    break
        elif token == "'":
            c = CHAR.match(text, at)
            if not c:  # a lifetime or a label
                out.append("'")
                i = at + 1
                continue
            end = c.end()
        elif token == '"':
            rest = STRING_REST.match(text, at + 1)
            end = rest.end() if rest else len(text)
        else:  # a raw string
            close = text.find('"' + m.group(1), m.end())
            end = len(text) if close < 0 else close + 1 + len(m.group(1))
        blank = "" if token in ("//", "/*") else ("' '" if token == "'" else '""')
        out.append(blank + "\n" * text.count("\n", at, end))
        i = end
    out.append(text[i:])
    return "".join(out)


TESTS = re.compile(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{")


def without_tests(code):
    """The code less its `#[cfg(test)] mod tests { .. }` blocks."""
    while m := TESTS.search(code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        code = code[: m.start()] + code[i:]
    return code


DECL = re.compile(r'^((?:[ \t]*#\[[^\]]*\][ \t]*\n?)*)[ \t]*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', re.M)


def crate_modules(root):
    """{module path: repo-relative file} of the crate whose root file is `root`."""
    mods = {}

    def walk(name, rel, declares_folder):
        mods[name] = rel
        raw = open(os.path.join(REPO, rel)).read()
        code = without_tests(strip(raw))
        here = os.path.dirname(rel)
        folder = here if declares_folder else os.path.join(here, os.path.basename(rel)[:-3])
        for attrs, child in DECL.findall(code):
            if child == "tests" and "cfg(test)" in attrs:
                continue
            p = re.search(r'#\[path\s*=\s*"([^"]*)"\][^;]*?\bmod\s+' + child + r"\s*;", raw)
            if p:
                walk(name + (child,), os.path.normpath(os.path.join(here, p.group(1))), True)
                continue
            flat, nested = os.path.join(folder, child + ".rs"), os.path.join(folder, child, "mod.rs")
            if os.path.isfile(os.path.join(REPO, flat)):
                walk(name + (child,), flat, False)
            elif os.path.isfile(os.path.join(REPO, nested)):
                walk(name + (child,), nested, True)

    walk((), root, True)
    return mods


def resolve(me, path, mods):
    """The module a path (list of segments) names, from module `me`, or None."""
    if path[0] in ("crate", "$crate"):
        base, rest = (), path[1:]
    elif path[0] == "super":
        base, rest = me[:-1], path[1:]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
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


def use_paths(tree):
    """Every path of a use tree (`a::{b, c::{d, e as f}}`) as (segments, the name it binds)."""
    tree = tree.strip()
    if not tree:
        return []
    brace = tree.find("{")
    if brace < 0:
        path, _, alias = tree.partition(" as ")
        segs = [s.strip() for s in path.split("::")]
        return [(segs, alias.strip() or segs[-1])]
    prefix = [s.strip() for s in tree[:brace].rstrip().removesuffix("::").split("::") if s.strip()]
    depth, items, start = 0, [], brace + 1
    for i in range(brace, len(tree)):
        ch = tree[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                items.append(tree[start:i])
                break
        elif ch == "," and depth == 1:
            items.append(tree[start:i])
            start = i + 1
    out = []
    for item in items:
        for segs, alias in use_paths(item):
            out.append((prefix + segs, prefix[-1] if segs == ["self"] and alias == "self" and prefix else alias))
    return out


def edges_of(me, rel, mods):
    code = without_tests(strip(open(os.path.join(REPO, rel)).read()))
    paths, aliases = [], {}
    for tree in re.findall(r"\buse\s+([^;]*);", code):
        for segs, alias in use_paths(tree):
            if not segs or not segs[0]:
                continue
            paths.append(segs)
            # `use super::store;` binds a module: `store::log::Log` below is a path into it.
            whole = [s for s in segs if s != "self"]
            t = resolve(me, whole, mods)
            if len(whole) > 1 and t is not None and resolve(me, whole[:-1], mods) != t and alias.isidentifier():
                aliases[alias] = t
    paths += [p.split("::") for p in re.findall(r"(?<![\w:])(\$?crate|super|self)((?:::\w+)+)", code) for p in ["".join(p)]]
    out = set()
    for p in paths:
        t = resolve(me, p, mods)
        if t is not None and me[: len(t)] != t:
            out.add(t)
    for alias, base in aliases.items():
        for rest in re.findall(r"(?<![\w:])" + re.escape(alias) + r"((?:::\w+)+)", code):
            t = base
            segs = rest.split("::")[1:]
            for i in range(len(segs) + 1):
                if base + tuple(segs[:i]) in mods:
                    t = base + tuple(segs[:i])
            if me[: len(t)] != t:
                out.add(t)
    return out


def cycles(edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return comps


def main():
    found, files, crates, seen = 0, 0, 0, set()
    for pkg in packages():
        for root in crate_roots(pkg):
            mods = crate_modules(root)
            crates += 1
            files += len(mods)
            seen.update(mods.values())
            edges = {m: set() for m in mods}
            for m, rel in mods.items():
                base = os.path.basename(rel)
                if m == () or base == "mod.rs":
                    continue  # declares its folder's module: its uses are its children's
                edges[m] = edges_of(m, rel, mods)
            for comp in cycles(edges):
                found += 1
                print(f"import cycle {found} in the crate of {root}, among {len(comp)} files: " + ", ".join(mods[m] for m in comp))
                for a in comp:
                    for b in sorted(edges[a] & set(comp)):
                        print(f"  {mods[a]} -> {mods[b]}")
    for pkg in packages():
        src = os.path.join(REPO, pkg, "src")
        for folder, _, names in os.walk(src):
            for f in sorted(names):
                rel = os.path.relpath(os.path.join(folder, f), REPO)
                if f.endswith(".rs") and rel not in seen:
                    print(f"note: {rel} is in no crate (no `mod` declares it): not checked")
    print(f"{found} import cycle(s) among {files} files of {crates} crates of the workspace")
    if found:
        print("files must import each other without cycles (issue 13, issue 37): move the shared type down a layer, or return an effect instead of calling back")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
