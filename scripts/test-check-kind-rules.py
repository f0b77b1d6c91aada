#!/usr/bin/env python3
"""Self-test of check-kind-rules.py: each fixture adds a kind rule to a copy of SRC_DIR (the
ways a review found to slip one past the check) and expects the check to fail naming each
added line; the copy unchanged must pass.

    scripts/test-check-kind-rules.py SRC_DIR      (apiserver/src)

Exits 1, listing the fixtures the check missed, if any.
"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check-kind-rules.py")

PRED = "fn injected(rt: &ResourceType) -> bool { %s }"
IS_LEASE = 'impl ResourceType { fn is_lease(&self) -> bool { self.plural == "leases" } }'

# name -> [(file, line appended, whether the check must name that line)]
FIXTURES = {
    "comparison": [("http/list.rs", PRED % 'rt.plural == "pods"', True)],
    "match on kind": [("http/list.rs", PRED % 'match rt.kind.as_str() { "Pod" => true, _ => false }', True)],
    "matches!": [("http/list.rs", PRED % 'matches!(rt.plural.as_str(), "pods" | "services")', True)],
    "a kind only kinds.rs names": [("http/list.rs", PRED % 'rt.plural == "csidrivers"', True)],
    "in registry/, not a group folder": [("registry/gc.rs", PRED % 'rt.plural == "jobs"', True)],
    "predicate defined in a group folder, called elsewhere": [
        ("registry/coordination/lease.rs", IS_LEASE, False),
        ("http/rest.rs", PRED % "rt.is_lease()", True),
    ],
    "non-bool kind method in resources.rs": [
        ("model/resources.rs",
         'impl ResourceType { fn grace(&self) -> Option<i64> { (self.plural == "pods").then_some(30) } }',
         True),
        ("registry/delete.rs", "fn injected(rt: &ResourceType) -> Option<i64> { rt.grace() }", True),
    ],
    "kind method matching on the plural": [
        ("model/resources.rs",
         'impl ResourceType { fn labels(&self) -> &[&str] { match self.plural.as_str() '
         '{ "pods" => &["a"], _ => &[] } } }', True),
        ("http/list.rs", "fn injected(rt: &ResourceType) -> usize { rt.labels().len() }", True),
    ],
    "compared tuple": [("http/list.rs", PRED % '(rt.group.as_str(), rt.plural.as_str()) == ("", "pods")', True)],
    "if let tuple": [("http/list.rs", PRED % 'if let ("", "pods") = (rt.group.as_str(), rt.plural.as_str()) '
                      '{ true } else { false }', True)],
    "tuple in a closure": [("http/list.rs", PRED % '[rt].iter().any(|r| ("", "pods") == '
                            '(r.group.as_str(), r.plural.as_str()))', True)],
    "array contains": [("http/list.rs", PRED % '["pods", "services"].contains(&rt.plural.as_str())', True)],
    "const": [("http/list.rs", 'const POD: &str = "pods"; ' + PRED % "rt.plural == POD", True)],
    ".eq": [("http/list.rs", PRED % 'rt.plural.eq("pods")', True)],
    "predicate as a function pointer": [
        ("registry/coordination/lease.rs", IS_LEASE, False),
        ("http/rest.rs", "fn injected(rts: &[ResourceType]) -> bool { rts.iter().any(ResourceType::is_lease) }",
         True),
    ],
    "free predicate of an Arc": [
        ("registry/core/pod.rs", 'fn is_pod(rt: &Arc<ResourceType>) -> bool { rt.plural == "pods" }', False),
        ("registry/generic.rs", "fn injected(rt: &Arc<ResourceType>) -> bool { is_pod(rt) }", True),
    ],
    "a new rule in an exempt file (route.rs)": [("http/route.rs", PRED % 'rt.plural == "leases"', True)],
    "a new rule in an exempt file (hooks.rs)": [("admission/hooks.rs", PRED % 'rt.plural == "pods"', True)],
    "a registry folder that is no group": [("registry/store/x.rs", PRED % 'rt.plural == "pods"', True)],
    "a group is_builtin_group names": [("http/list.rs", PRED % 'rt.group == "policy"', True)],
}


def run(src):
    done = subprocess.run([sys.executable, CHECK, src], capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    missed = []
    with tempfile.TemporaryDirectory() as tmp:
        clean = os.path.join(tmp, "clean")
        shutil.copytree(sys.argv[1], clean)
        code, out = run(clean)
        if code != 0:
            print(f"the unchanged tree fails the check:\n{out}")
            return 1
        for k, (name, additions) in enumerate(FIXTURES.items()):
            src = os.path.join(tmp, f"f{k}")
            shutil.copytree(clean, src)
            wanted = []
            for rel, line, named in additions:
                path = os.path.join(src, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
                if text and not text.endswith("\n"):
                    text += "\n"
                number = text.count("\n") + 1
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text + line + "\n")
                if named:
                    wanted.append(f"{path}:{number}: {line.strip()}")
            code, out = run(src)
            absent = [w for w in wanted if w not in out.splitlines()]
            if code != 1 or absent:
                missed.append(f"{name}: exit {code}, not named: {absent}\n{out}")
            else:
                print(f"flagged: {name}")
    for m in missed:
        print(f"MISSED {m}")
    print(f"{len(FIXTURES) - len(missed)} of {len(FIXTURES)} fixtures flagged")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
