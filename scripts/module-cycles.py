#!/usr/bin/env python3
"""Reports module cycles in Basalt's crates (or the source folders given as arguments); `make
lint` fails when one exists. In the crates of `FOLDER_CHECKED` it also fails on cycles between
top-level folders (each module folded into its top-level folder, or into `services/<x>` for the
services), on imports running up a floor (the floors a crate's `lib.rs` declares in a
`//! Floors` block: `//! - <n>: <folder> <folder> ...`, higher floors above; unnamed folders
are floor 0), and on RocksDB named outside `storage/`.

Every source file is a module (a folder's `mod.rs` is the folder's own module). A module
depends on another when its code names it by path: `crate::a::b`, `super::x`, `self::x`, or a
child module `x::` it declares. The longest path naming a module file is the dependency.
Declaring a child (`mod x;`) and re-exporting from it (`pub use x::...`) are not dependencies;
unit tests (`#[cfg(test)] mod tests { ... }`) and comments are ignored.
"""
import os
import re
import sys

CRATES = ["cluster/src", "node/src", "client/src", "bench/src", "jepsen/src"]
# Crates whose folders are checked too.
FOLDER_CHECKED = ["cluster/src", "node/src"]
# Folders that group modules of one floor: each child counts as a folder of its own.
GROUPING = {"services"}


def strip(text):
    """The text without comments, `pub use` lines and `#[cfg(test)]` modules."""
    out, depth, skip_at, cfg_test = [], 0, None, False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("//"):
            continue
        line = re.sub(r"//.*$", "", line)
        if skip_at is None and s.startswith("#[cfg(test)]"):
            cfg_test = True
            continue
        if skip_at is None and cfg_test and re.match(r"(pub(\(\w+\))?\s+)?mod\s+\w+\s*\{", s):
            skip_at = depth
            depth += line.count("{") - line.count("}")
            cfg_test = False
            if depth <= skip_at:
                skip_at = None
            continue
        cfg_test = False
        depth += line.count("{") - line.count("}")
        if skip_at is not None:
            if depth <= skip_at:
                skip_at = None
            continue
        if re.match(r"pub(\([\w:]+\))?\s+use\s", s):
            continue
        out.append(line)
    return "\n".join(out)


def module_paths(src):
    """Module path (tuple of names) -> file, for every .rs file under src."""
    mods = {}
    for d, _, files in os.walk(src):
        rel = os.path.relpath(d, src)
        base = () if rel == "." else tuple(rel.split(os.sep))
        for f in files:
            if not f.endswith(".rs"):
                continue
            if f == "lib.rs" or (f == "main.rs" and () not in mods):
                # A crate with both is a library and its binary: the library is the root.
                mods[()] = os.path.join(d, f)
            elif f == "mod.rs":
                mods[base] = os.path.join(d, f)
            else:
                mods[base + (f[:-3],)] = os.path.join(d, f)
    return mods


def resolve(segs, mods):
    """The longest prefix of segs that is a module (never the crate root)."""
    for n in range(len(segs), 0, -1):
        if tuple(segs[:n]) in mods:
            return tuple(segs[:n])
    return None


def expand(path_text):
    """`a::{b, c::d}` -> [[a, b], [a, c, d]] (one level of braces is enough here)."""
    m = re.match(r"([\w:]*?)::\{([^{}]*)\}", path_text)
    if not m:
        return [[p for p in path_text.split("::") if p]]
    head = [p for p in m.group(1).split("::") if p]
    return [head + [p for p in item.strip().split("::") if p] for item in m.group(2).split(",") if item.strip()]


def deps_of(mod, text, mods):
    found = set()
    children = {k[-1] for k in mods if len(k) == len(mod) + 1 and k[: len(mod)] == mod}
    for m in re.finditer(r"(?<!pub\()(?<!pub\(in )\b(crate|super|self)((?:::\w+)*(?:::\{[^{}]*\})?)", text):
        kind, rest = m.group(1), m.group(2).lstrip(":")
        for segs in expand(rest) if rest else [[]]:
            if kind == "crate":
                base = []
            elif kind == "super":
                # super of a file module is its folder's module; of a mod.rs, the folder's parent.
                is_folder = os.path.basename(mods[mod]) == "mod.rs"
                base = list(mod[:-1]) if not is_folder else list(mod[:-1])
                while segs and segs[0] == "super":
                    segs = segs[1:]
                    base = base[:-1]
            else:
                base = list(mod)
            target = resolve(base + segs, mods)
            if target is not None and target != mod and target != ():
                found.add(target)
    for m in re.finditer(r"(?<![:\w])(\w+)::", text):
        if m.group(1) in children:
            found.add(mod + (m.group(1),))
    return found


def cycles(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
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
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            strong(v)
    return out


def fold(mod):
    """The top-level folder a module belongs to (`services/<x>` for the services)."""
    if not mod:
        return ()
    return mod[:2] if mod[0] in GROUPING and len(mod) > 1 else mod[:1]


def floors_of(lib_text):
    """Folder name -> floor, from the `//! Floors` block of a crate root (an item's indented
    lines go on with its list)."""
    floors, inside, last = {}, False, None
    for line in lib_text.splitlines():
        s = line.strip()
        if not s.startswith("//!"):
            inside = False
            continue
        raw = s[3:]
        body = raw.strip()
        if body.startswith("Floors"):
            inside = True
            continue
        m = re.match(r"-\s*(\d+):\s*(.*)$", body)
        if inside and m:
            last = int(m.group(1))
            names = m.group(2)
        elif inside and last is not None and raw.startswith("   ") and body:
            names = body
        else:
            inside = inside and not body
            continue
        for name in names.replace("`", "").replace(",", " ").split():
            floors[name] = last
    return floors


def folder_problems(crate, src, mods, graph):
    """Folder cycles, imports running up a floor, RocksDB outside storage: one line each."""
    name = lambda m: "::".join(m) or "crate"
    out = []
    folded, via = {}, {}
    for a, bs in graph.items():
        fa = fold(a)
        if fa == ():
            continue
        folded.setdefault(fa, set())
        for b in bs:
            fb = fold(b)
            if fb not in ((), fa):
                folded[fa].add(fb)
                via.setdefault((fa, fb), []).append(f"{name(a)} -> {name(b)}")
    for comp in cycles(folded):
        edges = [e for a in comp for b in sorted(folded[a]) if b in comp for e in via[(a, b)][:2]]
        out.append(f"{crate}: folder cycle among {', '.join(name(c) for c in comp)}:\n    "
                   + "\n    ".join(edges))
    with open(mods[()], encoding="utf-8") as fh:
        floors = floors_of(fh.read())
    floor = lambda m: floors.get(m[0], 0) if m else 99
    for a, bs in graph.items():
        for b in bs:
            if a and floor(b) > floor(a):
                out.append(f"{crate}: {name(a)} (floor {floor(a)}) imports {name(b)} (floor {floor(b)}), above it")
    for mod, path in mods.items():
        if mod and mod[0] == "storage":
            continue
        with open(path, encoding="utf-8") as fh:
            if re.search(r"\brocksdb::", strip(fh.read())):
                out.append(f"{crate}: {name(mod)} names rocksdb outside storage/")
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    total = 0
    for crate in sys.argv[1:] or CRATES:
        src = os.path.join(root, crate)
        if not os.path.isdir(src):
            continue
        mods = module_paths(src)
        graph = {}
        for mod, path in mods.items():
            with open(path, encoding="utf-8") as fh:
                graph[mod] = deps_of(mod, strip(fh.read()), mods)
        name = lambda m: "::".join(m) or "crate"
        for comp in cycles(graph):
            total += 1
            edges = [f"{name(a)} -> {name(b)}" for a in comp for b in sorted(graph[a]) if b in comp]
            print(f"{crate}: cycle among {', '.join(name(c) for c in comp)}:\n    " + "\n    ".join(edges))
        if crate in FOLDER_CHECKED:
            for problem in folder_problems(crate, src, mods, graph):
                total += 1
                print(problem)
    if total:
        print(f"{total} module cycle(s) or floor problem(s)")
        sys.exit(1)
    print("no module cycles" + (", no folder cycles or imports up a floor in " + ", ".join(FOLDER_CHECKED) if FOLDER_CHECKED else ""))


if __name__ == "__main__":
    main()
