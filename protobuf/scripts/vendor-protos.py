#!/usr/bin/env python3
"""Vendors Kubernetes' .proto files, and how Go encodes their fields in JSON, into protos/.

    protobuf/scripts/vendor-protos.py KUBERNETES_TREE VERSION

KUBERNETES_TREE is a Kubernetes source tree (or the part of one holding
`staging/src/k8s.io/{api,apimachinery,apiextensions-apiserver}`), such as `../shared/kube/v1.36.2/src`
beside the repository, which protos/ is vendored from (run from the repository's root):

    protobuf/scripts/vendor-protos.py ../shared/kube/v1.36.2/src v1.36.2

VERSION is the tree's Kubernetes version, recorded in protos/go-json.txt.

ctrlkit-protobuf (this crate) decodes and encodes protobuf bodies from these files, compiled
into the committed kubernetes.fds (rewrite it afterwards: see the crate docs). Protobuf says
nothing of what Go's JSON encoding then does with a field, which a client must reproduce to
read what the real server answers in JSON (and the embedded server to store it), so this script
also reads the Go types (the `json` and `protobuf` struct tags) and writes protos/go-json.txt,
one line per field whose JSON differs from "the proto name, present when set on the wire":

    MESSAGE FIELD omitempty   a non-pointer Go field with `omitempty`: Go writes it on the
                              wire even when empty, and leaves it out of JSON when it is ""
                              0 or false (a struct, a message on the wire, is never left
                              out: `targetPort: 0`, a RawExtension's `0`, a null Time)
    MESSAGE FIELD omitzero    a field with `omitzero` (Go 1.24): left out of JSON when its
                              Go value is zero (`metav1.Time` by its IsZero: the empty
                              message), pointer or not
    MESSAGE FIELD inline      the field's message is inlined into its parent in JSON
    MESSAGE FIELD json=NAME   the JSON name differs from the proto name

Comments are dropped from the copied .proto files (they are the Go types' documentation, and
would make the copies ten times larger); the license header is kept.
"""

import os
import re
import sys

PACKAGES = [
    "api/core/v1",
    "api/apps/v1",
    "api/batch/v1",
    "api/coordination/v1",
    "api/events/v1",
    "api/autoscaling/v1",
    # The other groups client-go reads in protobuf, in the GA and beta versions k8s-openapi
    # 0.29's latest feature has types for (and apiserverinternal, alpha only).
    "api/admissionregistration/v1",
    "api/admissionregistration/v1beta1",
    "api/apiserverinternal/v1alpha1",
    "api/authentication/v1",
    "api/authorization/v1",
    "api/autoscaling/v2",
    "api/certificates/v1",
    "api/certificates/v1beta1",
    "api/coordination/v1beta1",
    "api/discovery/v1",
    "api/flowcontrol/v1",
    "api/networking/v1",
    "api/node/v1",
    "api/policy/v1",
    "api/rbac/v1",
    "api/resource/v1",
    "api/resource/v1beta1",
    "api/resource/v1beta2",
    "api/scheduling/v1",
    "api/scheduling/v1beta1",
    "api/storage/v1",
    "api/storagemigration/v1beta1",
    "apimachinery/pkg/apis/meta/v1",
    "apimachinery/pkg/runtime",
    "apimachinery/pkg/runtime/schema",
    "apimachinery/pkg/util/intstr",
    "apimachinery/pkg/api/resource",
    "apiextensions-apiserver/pkg/apis/apiextensions/v1",
]

STRUCT = re.compile(r"^(?:type\s+|\t)(\w+)\s+struct\s*{\s*$")
FIELD = re.compile(r"^\s*(?:(\w+)\s+)?([\w.*\[\]]+)\s+`([^`]*)`")
TAG = re.compile(r'(\w+):"([^"]*)"')


def proto_package(proto_text):
    return re.search(r"^package\s+([\w.]+)\s*;", proto_text, re.M).group(1)


def strip_comments(text):
    lines = text.splitlines()
    header = []
    for line in lines:
        if not line.startswith("//") and not line.startswith("/*") and not header[-1:] == ["*/"]:
            if line.strip() == "" and header:
                break
        header.append(line)
        if line.strip() == "*/":
            break
    body = []
    for line in lines[len(header):]:
        stripped = line.strip()
        if stripped.startswith("//"):
            continue
        if stripped == "" and body and body[-1].strip() == "":
            continue
        body.append(line.rstrip())
    return "\n".join(header + body).rstrip() + "\n"


def go_fields(directory):
    """Yields (struct, proto_name, json_name, pointer, omitempty, omitzero) for every tagged
    field."""
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".go") or name.endswith("_test.go") or name.startswith("zz_"):
            continue
        if name == "generated.pb.go":
            continue
        struct = None
        with open(os.path.join(directory, name)) as f:
            for line in f:
                m = STRUCT.match(line)
                if m:
                    struct = m.group(1)
                    continue
                if struct and line.startswith(("}", "\t}")) and line.strip() == "}":
                    struct = None
                    continue
                if not struct:
                    continue
                m = FIELD.match(line)
                if not m:
                    continue
                tags = dict(TAG.findall(m.group(3)))
                if "protobuf" not in tags or "json" not in tags:
                    continue
                proto_name = next(
                    (p[5:] for p in tags["protobuf"].split(",") if p.startswith("name=")), None
                )
                json_parts = tags["json"].split(",")
                yield (
                    struct,
                    proto_name,
                    json_parts[0],
                    m.group(2).startswith("*"),
                    "omitempty" in json_parts[1:],
                    "omitzero" in json_parts[1:],
                )


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tree, version = sys.argv[1], sys.argv[2]
    staging = os.path.join(tree, "staging/src/k8s.io")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "protos")
    rules = []
    for package in PACKAGES:
        source = os.path.join(staging, package)
        with open(os.path.join(source, "generated.proto")) as f:
            proto = f.read()
        target = os.path.join(out, "k8s.io", package)
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, "generated.proto"), "w") as f:
            f.write(strip_comments(proto))
        prefix = proto_package(proto)
        messages = set(re.findall(r"^message\s+(\w+)\s*{", proto, re.M))
        for struct, proto_name, json_name, pointer, omitempty, omitzero in go_fields(source):
            if struct not in messages or not proto_name:
                continue
            message = f"{prefix}.{struct}"
            if json_name == "":
                rules.append(f"{message} {proto_name} inline")
                continue
            if json_name != proto_name:
                rules.append(f"{message} {proto_name} json={json_name}")
            if omitempty and not pointer:
                rules.append(f"{message} {proto_name} omitempty")
            if omitzero:
                rules.append(f"{message} {proto_name} omitzero")
    with open(os.path.join(out, "go-json.txt"), "w") as f:
        f.write(f"# Generated by scripts/vendor-protos.py from the Go types of Kubernetes {version}.\n")
        f.write("# MESSAGE FIELD omitempty|omitzero|inline|json=NAME (see the script's docs).\n")
        f.write("\n".join(sorted(set(rules))) + "\n")


if __name__ == "__main__":
    main()
