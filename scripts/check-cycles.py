#!/usr/bin/env python3
"""Finds import cycles between the modules of a Rust crate.

    scripts/check-cycles.py SRC_DIR [--top-level | --layers] [--print-edges]

Reads every `.rs` file under SRC_DIR (the crate's `src/`), one module per file (`lib.rs` is the
crate root, `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`), and draws an edge from a
module to each module whose items it names: in `use` declarations (groups and globs included)
and in paths written inline (`crate::a::f()`, `super::b::C`). A name that a module re-exports
(`pub use b::C;`, `pub(crate) use ...`) leads to the module that defines it, so a parent that
re-exports its children is not a cycle; a child that names an item *defined* in its parent is
an edge to the parent. `mod x;` declarations are not edges. Tests (`#[cfg(test)]` items) are
left out, as the layering is about the code that ships.

With `--top-level`, modules are grouped by their first segment (`cache::informer` is `cache`)
and only edges between groups count.

With `--layers`, checks the folders' layering instead: the crate's `lib.rs` names the layers
in lines `// layer N: a, b, c` (top-level modules, the crate root's own items in the highest
layer), and a module may import only modules of its own layer or below, edges grouped by first
segment as with `--top-level`. Each upward edge is printed; a top-level module in no layer, or
no layer line at all, fails too.

With `--print-edges`, first prints every edge (`a -> b  (the path that draws it)`), sorted, so
a layer table can be checked against the code.

Prints each cycle (a strongly connected component of more than one module) with the edges
that close it, and exits 1 if there is one; 0 otherwise.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def blank(code, keep_strings=False):
    """`code` with its comments (and, unless `keep_strings`, the contents of its string and
    char literals) turned into spaces, newlines kept: the same length, so positions and line
    numbers still point into the file."""
    out, i, n = [], 0, len(code)
    while i < n:
        c, literal = code[i], True
        if code.startswith("//", i):
            j, literal = code.find("\n", i), False
            j = n if j < 0 else j
        elif code.startswith("/*", i):
            depth, j, literal = 1, i + 2, False
            while j < n and depth:
                if code.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif code.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
        elif c == "r" and re.match(r'r#*"', code[i:i + 10]) and (i == 0 or not code[i - 1].isalnum()):
            hashes = re.match(r'r(#*)"', code[i:]).group(1)
            end = code.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and code[j] != '"':
                j += 2 if code[j] == "\\" else 1
            j = min(j + 1, n)
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", code[i:i + 12]):
            m = re.match(r"'(\\[^']*|[^\\'])'", code[i:])
            j = i + (len(m.group(0)) if m else 1)
        else:
            out.append(c)
            i += 1
            continue
        text = code[i:j]
        if not literal:
            out.append(re.sub(r"[^\n]", " ", text))
        elif keep_strings or len(text) < 2:
            out.append(text)
        else:  # the quotes (and a raw string's `r`) kept, the contents blanked
            out.append(text[0] + re.sub(r"[^\n]", " ", text[1:-1]) + text[-1])
        i = j
    return "".join(out)


def strip(code):
    """Code without comments, string and char literals (their contents could look like paths)."""
    return blank(code)


def braced(code, at):
    """The index after the `}` matching the first `{` at or after `at` (code blanked); the
    code's end when there is none."""
    depth, j = 0, code.find("{", at)
    if j < 0:
        return len(code)
    while j < len(code):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(code)


def test_item_spans(code):
    """The (start, end) of each item marked `#[cfg(test)]` (a module, a function, a use) in
    `code`, whose comments and literals are blanked (see `blank`)."""
    spans, i = [], 0
    while True:
        m = re.compile(r"#\[cfg\(test\)\]").search(code, i)
        if not m:
            return spans
        i = m.end()
        # The item ends at its first `;` before any `{`, or at the `}` matching its first `{`.
        brace, semi = code.find("{", i), code.find(";", i)
        if semi >= 0 and (brace < 0 or semi < brace):
            spans.append((m.start(), semi + 1))
            i = semi + 1
            continue
        end = braced(code, brace)
        spans.append((m.start(), end))
        i = end


def drop_test_items(code):
    """Removes each item marked `#[cfg(test)]` (a module, a function, a use)."""
    kept, at = [], 0
    for start, end in test_item_spans(code):
        kept.append(code[at:start])
        at = end
    kept.append(code[at:])
    return "".join(kept)


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` -> [['a','b'], ['a','c','d'], ['a','c','e']] (renames dropped)."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", tree)
    tree = re.sub(r"\s+", "", tree)

    def split_top(s):
        parts, depth, start = [], 0, 0
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        return [p for p in parts if p]

    def expand(s):
        if "{" in s:
            k = s.index("{")
            prefix = [p for p in s[:k].split("::") if p]
            inner = s[k + 1:s.rindex("}")]
            return [prefix + rest for part in split_top(inner) for rest in expand(part)]
        return [[p for p in s.split("::") if p]]

    return expand(tree)


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # module path (tuple) -> code
        for root, _, names in os.walk(src):
            for name in names:
                if not name.endswith(".rs"):
                    continue
                rel = os.path.relpath(os.path.join(root, name), src)[:-3].split(os.sep)
                if rel == ["lib"] or rel == ["main"]:
                    module = ()
                elif rel[-1] == "mod":
                    module = tuple(rel[:-1])
                else:
                    module = tuple(rel)
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    code = drop_test_items(strip(f.read()))
                self.files[module] = code
        # Modules whose `mod x;` is missing (a file left over) still count: harmless.
        self.exports = {m: self.parse_exports(m, code) for m, code in self.files.items()}

    def uses(self, code):
        """Each `use` declaration's paths, and the code without them."""
        paths = []
        for m in re.finditer(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
            paths.extend((m.group(0).lstrip().startswith("pub"), p)
                         for p in expand_use_tree(m.group(1)))
        rest = re.sub(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", ";", code)
        return paths, rest

    def parse_exports(self, module, code):
        """Names a module re-exports: name -> the path it re-exports (as written)."""
        exports = {}
        paths, _ = self.uses(code)
        for public, path in paths:
            if public and path and path[-1] != "*":
                exports[path[-1]] = path
            elif public and path and path[-1] == "*":
                exports.setdefault("*", []).append(path[:-1])
        return exports

    def absolute(self, module, path):
        """The path from the crate root, or None for another crate's."""
        head = path[0]
        if head == "crate":
            return list(path[1:])
        if head == "self":
            return list(module) + list(path[1:])
        if head == "super":
            base, rest = list(module), list(path)
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            return base + rest
        if tuple(module) + (head,) in self.files:  # a child module, named from its parent
            return list(module) + list(path)
        return None

    def resolve(self, module, path, seen=None):
        """The module that defines what `path` (written in `module`) names."""
        path = self.absolute(module, path)
        if path is None:
            return None
        seen = seen or set()
        # The longest prefix that is a module of a file.
        k = len(path)
        while k > 0 and tuple(path[:k]) not in self.files:
            k -= 1
        target, rest = tuple(path[:k]), path[k:]
        if not rest or (target, rest[0]) in seen:
            return target
        seen.add((target, rest[0]))
        exported = self.exports.get(target, {}).get(rest[0])
        if exported:
            via = self.resolve(target, exported[:-1] + [exported[-1]], seen)
            if via is not None:
                return via
        return target

    def edges(self):
        edges = {}
        for module, code in self.files.items():
            paths, rest = self.uses(code)
            found = [p for _, p in paths]
            for m in re.finditer(r"\b((?:crate|super|self)(?:::" + IDENT + ")+)", rest):
                found.append(m.group(1).split("::"))
            for path in found:
                if path and path[-1] == "*":
                    path = path[:-1]
                if not path:
                    continue
                target = self.resolve(module, path)
                if target is None or target == module:
                    continue
                # A module naming its own ancestor's re-export of itself is no edge.
                edges.setdefault(module, {}).setdefault(target, "::".join(path))
        return edges


def cycles(edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(edges) | {t for ts in edges.values() for t in ts}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def name(module):
    return "::".join(module) or "crate"


def read_layers(src):
    """Top-level module name -> its layer, from `// layer N: a, b` lines in SRC/lib.rs."""
    layers = {}
    with open(os.path.join(src, "lib.rs"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*//\s*layer\s+(\d+):\s*(.+)$", line)
            if m:
                for module in re.findall(IDENT, m.group(2)):
                    layers[module] = int(m.group(1))
    return layers


def check_layers(src, files, edges):
    """Prints each upward edge and each module in no layer; 1 if there is one, else 0."""
    layers = read_layers(src)
    if not layers:
        print(f"{src}/lib.rs names no layer (`// layer N: a, b`)")
        return 1
    top = max(layers.values())
    failed = False
    modules = {m[0] for m in files if m}
    for module in sorted(m for m in modules if m not in layers):
        print(f"{src}: top-level module `{module}` is in no layer of lib.rs")
        failed = True
    for a in sorted(edges):
        for b, via in sorted(edges[a].items()):
            la = layers.get(a[0], top) if a else top
            lb = layers.get(b[0], top) if b else top
            if a[:1] != b[:1] and lb > la:
                print(f"upward import: {name(a)} (layer {la}) -> {name(b)} (layer {lb})  ({via})")
                failed = True
    if not failed:
        print(f"{src}: every module imports only its own layer or below")
    return 1 if failed else 0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    crate = Crate(args[0])
    edges = crate.edges()
    if "--layers" in sys.argv:
        return check_layers(args[0], crate.files, edges)
    if "--top-level" in sys.argv:
        grouped = {}
        for a, targets in edges.items():
            for b, via in targets.items():
                ga, gb = a[:1], b[:1]
                if ga != gb and ga and gb:
                    grouped.setdefault(ga, {}).setdefault(gb, f"{name(a)} uses {via}")
        edges = grouped
    if "--print-edges" in sys.argv:
        for a in sorted(edges):
            for b, via in sorted(edges[a].items()):
                print(f"{name(a)} -> {name(b)}  ({via})")
    found = cycles(edges)
    what = "top-level modules" if "--top-level" in sys.argv else "modules"
    for component in found:
        members = set(component)
        print(f"cycle among the {what} of {args[0]}: {{{', '.join(name(m) for m in component)}}}")
        for a in component:
            for b, via in sorted(edges.get(a, {}).items()):
                if b in members:
                    print(f"  {name(a)} -> {name(b)}  ({via})")
    if not found:
        print(f"{args[0]}: no import cycle among its {what}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
