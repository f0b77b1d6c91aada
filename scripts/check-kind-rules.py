#!/usr/bin/env python3
"""Finds kind-specific rules outside the embedded API server's strategies.

    scripts/check-kind-rules.py SRC_DIR      (apiserver/src)

kube-apiserver keeps what one kind does in that kind's `strategy.go` under
`pkg/registry/<group>/<kind>/`; the generic store, the handlers and storage never ask which
kind they hold. The embedded server does the same: a kind's rules are hooks of its `Strategy`
(`registry/strategy.rs`), implemented in `registry/<group>/`. This check reads the names of the
served kinds from the resource table (`model/resources.rs`: every group, kind and plural given
as a literal to `ResourceType::new` or to a closure that calls it), and the groups and plurals
that have a strategy but are not served by default (every string literal of
`registry/kinds.rs`, the registration table), and flags, in every other file, code that
branches on one:

- a comparison (`==`, `!=`) with one of those names as a string literal, or the literal as a
  match arm, an alternative (`|`), in a slice pattern or inside `matches!(...)`;
- a `match` on `.group.as_str()`, `.plural.as_str()` or `.kind.as_str()`;
- a call of a kind predicate: a `fn x(&self) -> bool` of `ResourceType`, or a free
  `fn x(_: &ResourceType) -> bool`. `is_builtin` (Kubernetes' own kinds against custom
  resources) is allowed everywhere, as is the field `from_definition`: each names a class of
  kinds, not a kind.

The core group (`""`, `group.is_empty()`) is the `/api` against `/apis` split, not a kind,
and is not flagged. Files under `registry/<group>/` (the strategies) are allowed, and so are
the files of EXEMPT below, each for the reason printed. An exemption that matches nothing
fails too, so the list stays short and true. Tests (`#[cfg(test)]` items and modules) are
left out.

Prints each hit as `path:line: code` and exits 1 if there is one; 0 otherwise.
"""

import importlib.util
import os
import re
import sys

# File (relative to SRC_DIR) -> why it may name kinds.
EXEMPT = {
    "model/resources.rs": "the resource table: it defines the kinds and which groups are built in",
    "http/route.rs": "routing: a path's `namespaces/NS` segment scopes the request to a namespace "
    "(kube's request info resolver), unless a namespace's own subresource follows",
    "admission/hooks.rs": "admission's namespace selector: a namespace is matched by its own "
    "labels, any other object by its namespace's (kube's namespace matcher)",
    "auth/rbac.rs": "RBAC's own kinds: a binding's roleRef (Role, ClusterRole) and its kind "
    "(RoleBinding), as kube's RBAC authorizer reads them",
}

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("check_cycles", os.path.join(HERE, "check-cycles.py"))
cycles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cycles)

STRING = r'"((?:[^"\\]|\\.)*)"'


def split_args(text):
    """The top-level comma-separated arguments of `text` (what is inside a call's parens)."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:k].strip())
            start = k + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def call_args(code, open_paren):
    """The text inside the parens that open at `open_paren`, and the index after them."""
    depth = 0
    for k in range(open_paren, len(code)):
        if code[k] == "(":
            depth += 1
        elif code[k] == ")":
            depth -= 1
            if depth == 0:
                return code[open_paren + 1:k], k + 1
    return code[open_paren + 1:], len(code)


def kind_names(table):
    """Every group, kind and plural the resource table (its comments blanked) names."""
    names = set()
    # `ResourceType::new(group, version, kind, plural, namespaced)`: positions 0, 2, 3.
    wanted = (0, 2, 3)
    closures = {}  # closure name -> {its parameter: the position it fills}
    for m in re.finditer(r"let\s+(\w+)\s*=\s*\|([^|]*)\|\s*\{?\s*ResourceType::new\(", table):
        params = [p.split(":")[0].strip() for p in m.group(2).split(",")]
        args, _ = call_args(table, m.end() - 1)
        fills = {a: k for k, a in enumerate(split_args(args)) if k in wanted}
        closures[m.group(1)] = [fills.get(p) for p in params]
    for m in re.finditer(r"ResourceType::new\(", table):
        args, _ = call_args(table, m.end() - 1)
        for k, arg in enumerate(split_args(args)):
            literal = re.fullmatch(STRING, arg)
            if k in wanted and literal:
                names.add(literal.group(1))
    for closure, fills in closures.items():
        for m in re.finditer(r"\b%s\(" % re.escape(closure), table):
            args, _ = call_args(table, m.end() - 1)
            for position, arg in zip(fills, split_args(args)):
                literal = re.fullmatch(STRING, arg)
                if position is not None and literal:
                    names.add(literal.group(1))
    names.discard("")  # the core group: /api against /apis, not a kind
    return names


def predicates(table, files):
    """The kind predicates: `ResourceType`'s `fn x(&self) -> bool` but `is_builtin`, and free
    functions of a `&ResourceType` alone that answer a bool, anywhere in the crate."""
    found = set(re.findall(r"fn\s+(\w+)\s*\(\s*&self\s*\)\s*->\s*bool", table))
    for code in files.values():
        found |= set(re.findall(r"fn\s+(\w+)\s*\(\s*\w+\s*:\s*&ResourceType\s*\)\s*->\s*bool", code))
    return found - {"is_builtin"}


def hits(code, names, preds):
    """(offset, why) of each kind rule in `code` (comments and tests blanked, strings kept)."""
    lit = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    quoted = r'"(?:%s)"' % lit
    patterns = [
        (r"[!=]=\s*&?\s*" + quoted, "compares with a kind's name"),
        (quoted + r"\s*[!=]=", "compares with a kind's name"),
        (quoted + r"(?:\s*\)|\s*,\s*" + STRING + r"\s*\))?\s*(?:=>|\bif\b)", "a kind's name as a match arm"),
        (quoted + r"\s*\|(?!\|)", "a kind's name as a pattern alternative"),
        (r"(?<!\|)\|\s*" + quoted, "a kind's name as a pattern alternative"),
        (r"\[\s*" + quoted + r"\s*,[^\]]*\]\s*(?:=>|\bif\b)", "a kind's name in a slice pattern"),
        (r"\bmatch\s*\(?\s*[\w.]*\.(?:group|plural|kind)\.as_str\(\)", "a match on a group, plural or kind"),
    ]
    if preds:
        calls = r"(?<!fn )(?<![\w])(?:%s)\s*\(" % "|".join(sorted(preds))
        patterns.append((calls, "calls a kind predicate"))
    out = []
    for pattern, why in patterns:
        out.extend((m.start(), why) for m in re.finditer(pattern, code))
    for m in re.finditer(r"\bmatches!\s*\(", code):
        inside, _ = call_args(code, m.end() - 1)
        found = re.search(quoted, inside)
        if found:
            out.append((m.end() + found.start(), "a kind's name inside matches!"))
    return out


def test_only_files(src, files):
    """Files that are modules declared under `#[cfg(test)]` (`#[cfg(test)] mod tests;`)."""
    out = set()
    for rel, code in files.items():
        parent = os.path.dirname(rel)
        if os.path.basename(rel) not in ("mod.rs", "lib.rs"):
            parent = rel[:-3]
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
            for candidate in (f"{m.group(1)}.rs", f"{m.group(1)}/mod.rs"):
                out.add(os.path.normpath(os.path.join(parent, candidate)))
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src = sys.argv[1]
    raw = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    raw[os.path.relpath(path, src)] = f.read()
    masked = {rel: cycles.blank(code) for rel, code in raw.items()}
    if "model/resources.rs" not in raw:
        print(f"{src}/model/resources.rs not found: no resource table to read kinds from")
        return 2
    names = kind_names(cycles.blank(raw["model/resources.rs"], keep_strings=True))
    registered = cycles.blank(raw.get("registry/kinds.rs", ""), keep_strings=True)
    names |= {n for n in re.findall(STRING, registered) if n}
    preds = predicates(masked["model/resources.rs"], masked)
    skip = test_only_files(src, masked)
    per_file, failed = {}, False
    for rel in sorted(raw):
        parts = rel.split(os.sep)
        if rel in skip or (parts[0] == "registry" and len(parts) > 2):
            continue
        code = cycles.blank(raw[rel], keep_strings=True)
        for start, end in cycles.test_item_spans(masked[rel]):
            code = code[:start] + re.sub(r"[^\n]", " ", code[start:end]) + code[end:]
        lines = raw[rel].split("\n")
        found = sorted({code.count("\n", 0, at) for at, _ in hits(code, names, preds)})
        per_file[rel] = [(n + 1, lines[n].strip()) for n in found]
    for rel, reason in sorted(EXEMPT.items()):
        count = len(per_file.get(rel, []))
        if count:
            print(f"exempt: {rel} ({count} line{'s' if count > 1 else ''}): {reason}")
        else:
            print(f"stale exemption: {rel} names no kind (or is gone): drop it from EXEMPT")
            failed = True
    total = 0
    for rel, found in per_file.items():
        if rel in EXEMPT:
            continue
        for line, text in found:
            print(f"{os.path.join(src, rel)}:{line}: {text[:100]}")
            total += 1
    if total:
        print(
            f"{total} kind rule{'s' if total > 1 else ''} outside the strategies: move each into a "
            "hook of `registry::Strategy`, implemented in registry/<group>/ (see this script's docs)"
        )
        failed = True
    else:
        print(f"{src}: no kind rule outside the strategies and the exemptions above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
