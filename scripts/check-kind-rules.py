#!/usr/bin/env python3
"""Finds kind-specific rules outside the embedded API server's strategies.

    scripts/check-kind-rules.py SRC_DIR      (apiserver/src)

kube-apiserver keeps what one kind does in that kind's `strategy.go` under
`pkg/registry/<group>/<kind>/`; the generic store, the handlers and storage never ask which
kind they hold. The embedded server does the same: a kind's rules are hooks of its `Strategy`
(`registry/strategy.rs`), implemented in `registry/<group>/`.

The names it knows: every group, kind and plural given as a literal to `ResourceType::new` or
to a closure that calls it in the resource table (`model/resources.rs`); every string literal
of `registry/kinds.rs` (the kinds with a strategy that are not served by default); and the
groups `is_builtin_group` names. The core group (`""`, `group.is_empty()`) is the `/api`
against `/apis` split, not a kind, and is not a name. A `const` or `static` bound to one of
those literals (anywhere in the crate) stands for it.

What it flags, in every file but the group folders:

- a name compared: `==`/`!=` on either side, `.eq(..)`/`.ne(..)` with it as receiver or
  argument;
- a name as a pattern: a match arm (`"pods" =>`, `"pods" if`), an alternative (`|`), inside
  `matches!(...)`;
- a name inside a tuple or array (nested ones too) that is compared (`(g, p) == ("", "pods")`),
  used as a pattern (`if let ("", "pods") = ..`, `("", "pods") =>`, a slice pattern), or
  searched (`["pods", ..].contains(..)`, `.iter()`);
- a `match` on `.group.as_str()`, `.plural.as_str()` or `.kind.as_str()`;
- a kind method, defined in any file: a `&self` method of an `impl ResourceType` block that
  answers a bool (but `is_builtin`, Kubernetes' own kinds against custom resources, a class
  of kinds) or whose body has any of the above; flagged where it is defined outside a group
  folder, and wherever it is called (`rt.x(..)`) or named (`ResourceType::x`, as a function
  pointer). The field `from_definition` (a CRD's kinds) is allowed everywhere;
- a call of a free kind predicate: `fn x(_: &ResourceType) -> bool` (or `&Arc<ResourceType>`),
  anywhere in the crate, called or passed by name outside a group folder.

Not read: the test harness (`harness/`), a client of the server rather than the server (its
protobuf read-back check maps the kinds it reads back to k8s-openapi's types).

Allowed: the group folders, the `registry/<group>/` modules `registry/mod.rs` declares whose
name is a group's (its first label; `core` for the core group), and the hits EXEMPT below
names: each exemption gives a file, the function the hit must be in and a pattern its line
must match, and why. A kind rule elsewhere in an exempt file, or in the same function on
another line, is flagged; an exemption that matches nothing fails too, so the list stays short
and true. Tests (`#[cfg(test)]` items and modules) are left out.

What it does NOT catch (a reviewer must):

- a name the check does not know: a kind added to neither the table nor `kinds.rs`, or a name
  made at run time (`format!`, `concat!`, a prefix or suffix test such as `.ends_with("s")`,
  a name read from data);
- a name passed as a plain argument to a function that tests it out of sight
  (`is_kind(rt, "pods")`, `store.resource("", "v1", "pods")`): only compared, matched or
  searched literals are flagged;
- predicates of other shapes: a free function of other arguments (`is_pod(group, plural)`),
  a closure, a method of a trait implemented for something other than `ResourceType`, a
  `&self` method whose test is not a literal (`self.plural.len() == 4`);
- a name bound by `let` (`let pod = "pods"; rt.plural == pod`), or a `const` not of `&str`;
- rules on data rather than the type: branching on an object's `kind` field read from JSON
  is flagged only when compared with a known name.

Prints each hit as `path:line: code` and exits 1 if there is one; 0 otherwise.
"""

import importlib.util
import os
import re
import sys

# File (relative to SRC_DIR) -> [(the function a hit must be in, a pattern its line must match,
# why it may name kinds)].
EXEMPT = {
    "model/resources.rs": [
        ("is_builtin_group", r'matches!\(group, "apps" \| "batch"',
         "which groups are Kubernetes' own (against custom resources' groups), a class of kinds"),
    ],
    "http/route.rs": [
        ("route", r'\["namespaces", ns, plural, tail @ \.\.\]',
         "routing: a path's `namespaces/NS` segment scopes the request to a namespace "
         "(kube's request info resolver), unless a namespace's own subresource follows"),
    ],
    "admission/hooks.rs": [
        ("namespace_matches", r'attributes\.resource == "namespaces"',
         "admission's namespace selector: a namespace is matched by its own labels, any other "
         "object by its namespace's (kube's namespace matcher)"),
    ],
    "auth/rbac.rs": [
        ("decide", r'\("ClusterRole", _\) =>',
         "RBAC's own kinds: a binding's roleRef (ClusterRole), as kube's RBAC authorizer reads it"),
        ("decide", r'\("Role", Some\(ns\)\) if \*binding_kind == "RoleBinding"',
         "RBAC's own kinds: a Role is bound by a RoleBinding alone, as kube's RBAC authorizer has it"),
    ],
}
# `&self` methods of `ResourceType` that answer a bool and name a class of kinds, not a kind.
CLASS_METHODS = {"is_builtin"}

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


def functions(code):
    """(name, start, end) of every `fn` with a body in `code` (blanked), nested ones too."""
    out = []
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue
        out.append((m.group(1), m.start(), cycles.braced(code, m.end())))
    return out


def enclosing(fns, at):
    """The name of the innermost function of `fns` around offset `at`, or None."""
    inside = [(start, name) for name, start, end in fns if start <= at < end]
    return max(inside)[1] if inside else None


def builtin_groups(table):
    """The groups `is_builtin_group` names as literals (not its suffix test, `.k8s.io`)."""
    m = re.search(r"fn\s+is_builtin_group\b", table)
    if not m:
        return set()
    body = table[m.end():cycles.braced(table, m.end())]
    return {n for n in re.findall(STRING, body) if n and not n.startswith(".")}


def constants(files, names):
    """Names of `const`/`static` `&str`s bound to one of `names`, anywhere in the crate."""
    out = set()
    for code in files.values():
        for m in re.finditer(r"\b(?:const|static)\s+(\w+)\s*:\s*&\s*(?:'static\s+)?str\s*=\s*"
                             + STRING + r"\s*;", code):
            if m.group(2) in names:
                out.add(m.group(1))
    return out


def name_pattern(names, consts):
    """A regex for one of `names` as a string literal, or one of `consts`."""
    lit = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    alternatives = [r'"(?:%s)"' % lit]
    if consts:
        alternatives.append(r"\b(?:%s)\b" % "|".join(sorted(consts)))
    return "(?:%s)" % "|".join(alternatives)


# What may stand before or after a tuple or array that holds a name, making it a kind rule.
GROUP_BEFORE = re.compile(r"(?:[!=]=|\blet|\|(?!\|)|\bmatches!\s*\([^;]*,)\s*&?\s*$")
GROUP_AFTER = re.compile(
    r"^\s*(?:[!=]=|=>|=(?![=>])|\|(?!\|)|\bif\b|\.\s*(?:contains|iter|into_iter|eq|ne)\s*\()"
)


def in_groups(code, quoted):
    """Offsets of names inside a tuple or array (not a call's arguments, not an index) that is
    compared, a pattern or searched; nested groups count."""
    out = []
    for m in re.finditer(quoted, code):
        at = m.start()
        while True:
            opening = enclosing_group(code, at)
            if opening is None:
                break
            before = code[:opening].rstrip()
            keyword = re.search(r"\b(?:let|if|match|return|in|while|else|mut|ref|move)$", before)
            if before and not keyword and (before[-1].isalnum() or before[-1] in "_)]>?!"):
                break  # a call's arguments, an index, a macro: not a tuple or array
            close = matching(code, opening)
            # After a closure's `|x|` comes its body, not a pattern alternative.
            lead = not closure_body(before) and GROUP_BEFORE.search(code[max(0, opening - 200):opening])
            if lead or GROUP_AFTER.match(code[close:close + 40]):
                out.append(m.start())
                break
            at = opening
    return out


def closure_body(before):
    """Whether text `before` ends with a closure's parameters (`|b|`, `||`, `move |x|`), so
    that what follows is its body, not a pattern alternative."""
    if not before.endswith("|"):
        return False
    head = before[:-1]
    if head.endswith("|"):
        return True
    start = head.rfind("|")
    if start < 0 or any(ch in head[start:] for ch in ";{}"):
        return False
    lead = head[:start].rstrip()
    return not lead or lead[-1] in "(,=" or lead.endswith("move")


def enclosing_group(code, at):
    """The offset of the innermost `(` or `[` open around `at`, if inside the same statement."""
    depth = 0
    for k in range(at - 1, -1, -1):
        ch = code[k]
        if ch in ")]":
            depth += 1
        elif ch in "([":
            if depth == 0:
                return k
            depth -= 1
        elif ch in "{};" and depth == 0:
            return None
    return None


def matching(code, opening):
    """The index after the bracket that closes the one at `opening`."""
    depth = 0
    for k in range(opening, len(code)):
        if code[k] in "([{":
            depth += 1
        elif code[k] in ")]}":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(code)


def literal_hits(code, quoted):
    """(offset, why) of each test of a name in `code` (comments and tests blanked)."""
    patterns = [
        (r"[!=]=\s*&?\s*" + quoted, "compares with a kind's name"),
        (quoted + r"\s*[!=]=", "compares with a kind's name"),
        (r"\.\s*(?:eq|ne)\s*\(\s*&?\s*" + quoted, "compares with a kind's name"),
        (quoted + r"\s*\.\s*(?:eq|ne)\s*\(", "compares with a kind's name"),
        (quoted + r"\s*(?:=>|\bif\b)", "a kind's name as a match arm"),
        (quoted + r"\s*\|(?!\|)", "a kind's name as a pattern alternative"),
        (r"(?<!\|)\|\s*" + quoted, "a kind's name as a pattern alternative"),
        (r"\bmatch\s*\(?\s*[\w.]*\.(?:group|plural|kind)\.as_str\(\)", "a match on a group, plural or kind"),
    ]
    out = []
    for pattern, why in patterns:
        out.extend((m.start(), why) for m in re.finditer(pattern, code))
    out.extend((at, "a kind's name in a compared, matched or searched tuple or array")
               for at in in_groups(code, quoted))
    for m in re.finditer(r"\bmatches!\s*\(", code):
        inside, _ = call_args(code, m.end() - 1)
        found = re.search(quoted, inside)
        if found:
            out.append((m.end() + found.start(), "a kind's name inside matches!"))
    return out


def kind_methods(files, quoted):
    """`&self` methods of `impl ResourceType` blocks in any file that answer a bool (but
    CLASS_METHODS) or test a name, and free `fn x(_: &ResourceType) -> bool`s."""
    methods, free = set(), set()
    for code in files.values():
        for m in re.finditer(r"\bimpl\b(?:\s+[\w:<>]+\s+for)?\s+ResourceType\s*\{", code):
            block = code[m.end() - 1:cycles.braced(code, m.end() - 1)]
            for name, start, end in functions(block):
                head = block[start:block.find("{", start)]
                if not re.search(r"\(\s*&\s*self\b", head):
                    continue
                answers_bool = re.search(r"->\s*bool\s*$", head.strip())
                if (answers_bool and name not in CLASS_METHODS) or literal_hits(block[start:end], quoted):
                    methods.add(name)
        free |= set(re.findall(
            r"fn\s+(\w+)\s*\(\s*\w+\s*:\s*&\s*(?:Arc\s*<\s*)?ResourceType\s*>?\s*\)\s*->\s*bool", code))
    return methods, free


def call_hits(code, methods, free):
    """(offset, why) of each call or naming of a kind method or free predicate."""
    out = []
    if methods:
        alt = "|".join(sorted(methods))
        out.extend((m.start(), "calls a kind method of ResourceType")
                   for m in re.finditer(r"\.\s*(?:%s)\s*\(" % alt, code))
        out.extend((m.start(), "names a kind method of ResourceType")
                   for m in re.finditer(r"\bResourceType\s*::\s*(?:%s)\b" % alt, code))
    if free:
        alt = "|".join(sorted(free))
        out.extend((m.start(), "calls a kind predicate")
                   for m in re.finditer(r"(?<!fn )(?<![\w.:])(?:%s)\s*\(" % alt, code))
        out.extend((m.start(), "passes a kind predicate")
                   for m in re.finditer(r"[(,]\s*(?:%s)\s*[),]" % alt, code))
    return out


def group_folders(src, raw, names):
    """The `registry/<group>/` folders: modules `registry/mod.rs` declares, that are folders,
    named after a group (its first label; `core` for the core group)."""
    declared = re.findall(r"\bmod\s+(\w+)\s*;", cycles.blank(raw.get("registry/mod.rs", "")))
    groups = {n.split(".")[0] for n in names if "." in n or n.islower()} | {"core"}
    return {d for d in declared if d in groups and os.path.isdir(os.path.join(src, "registry", d))}


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
    if "model/resources.rs" not in raw:
        print(f"{src}/model/resources.rs not found: no resource table to read kinds from")
        return 2
    masked = {rel: cycles.blank(code) for rel, code in raw.items()}
    skip = test_only_files(src, masked)
    # Each file with its comments and test items blanked, string literals kept.
    code = {}
    for rel in raw:
        if rel in skip or rel.split(os.sep)[0] == "harness":
            continue
        text = cycles.blank(raw[rel], keep_strings=True)
        for start, end in cycles.test_item_spans(masked[rel]):
            text = text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]
        code[rel] = text
    table = code["model/resources.rs"]
    names = kind_names(table) | builtin_groups(table)
    names |= {n for n in re.findall(STRING, code.get("registry/kinds.rs", "")) if n}
    quoted = name_pattern(names, constants(code, names))
    methods, free = kind_methods(code, quoted)
    allowed = group_folders(src, raw, names)
    used = {(rel, k): 0 for rel, entries in EXEMPT.items() for k in range(len(entries))}
    total, failed = 0, False
    for rel in sorted(code):
        parts = rel.split(os.sep)
        if parts[0] == "registry" and len(parts) > 2 and parts[1] in allowed:
            continue
        text, lines = code[rel], raw[rel].split("\n")
        fns = functions(cycles.blank(raw[rel]))
        found = literal_hits(text, quoted) + call_hits(text, methods, free)
        for line in sorted({text.count("\n", 0, at) for at, _ in found}):
            at = min(a for a, _ in found if text.count("\n", 0, a) == line)
            exempt = [
                k for k, (fn, pattern, _) in enumerate(EXEMPT.get(rel, []))
                if enclosing(fns, at) == fn and re.search(pattern, lines[line])
            ]
            if exempt:
                used[(rel, exempt[0])] += 1
                continue
            print(f"{os.path.join(src, rel)}:{line + 1}: {lines[line].strip()}")
            total += 1
    for (rel, k), count in sorted(used.items()):
        fn, pattern, reason = EXEMPT[rel][k]
        if count:
            print(f"exempt: {rel}, fn {fn} ({count} line{'s' if count > 1 else ''}): {reason}")
        else:
            print(f"stale exemption: {rel}, fn {fn}, /{pattern}/ matches no kind rule: drop it")
            failed = True
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
