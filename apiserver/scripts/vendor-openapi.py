#!/usr/bin/env python3
"""Vendors Kubernetes' published OpenAPI documents into openapi/, for the embedded API server.

    scripts/vendor-openapi.py OPENAPI_SPEC_DIR VERSION

OPENAPI_SPEC_DIR is a Kubernetes tree's `api/openapi-spec` (`swagger.json` and `v3/`), such as
`../shared/kube/v1.36.2/src/api/openapi-spec` beside the repository:

    scripts/vendor-openapi.py ../shared/kube/v1.36.2/src/api/openapi-spec v1.36.2

It keeps the group versions the embedded server serves (GROUP_VERSIONS): their OpenAPI v3
documents whole, and of the v2 document (swagger.json) their paths and the definitions those
reach. Each is written minified (no whitespace), with the version in openapi/README.md. The
server answers /openapi/v2 and /openapi/v3/... from these files (and adds each
CustomResourceDefinition's schema while it exists).
"""

import json
import os
import re
import sys

# (path prefix in v2, the v3 document's file name stem)
GROUP_VERSIONS = [
    ("/api/v1/", "api__v1"),
    ("/apis/apps/v1/", "apis__apps__v1"),
    ("/apis/batch/v1/", "apis__batch__v1"),
    ("/apis/autoscaling/v1/", "apis__autoscaling__v1"),
    ("/apis/coordination.k8s.io/v1/", "apis__coordination.k8s.io__v1"),
    ("/apis/events.k8s.io/v1/", "apis__events.k8s.io__v1"),
    ("/apis/apiextensions.k8s.io/v1/", "apis__apiextensions.k8s.io__v1"),
    ("/apis/admissionregistration.k8s.io/v1/", "apis__admissionregistration.k8s.io__v1"),
    ("/apis/rbac.authorization.k8s.io/v1/", "apis__rbac.authorization.k8s.io__v1"),
    ("/apis/authentication.k8s.io/v1/", "apis__authentication.k8s.io__v1"),
    ("/apis/authorization.k8s.io/v1/", "apis__authorization.k8s.io__v1"),
]


def minified(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def refs(value, out):
    """Every `$ref` target under value, as a definition name."""
    if isinstance(value, dict):
        for key, child in value.items():
            if key == "$ref" and isinstance(child, str):
                out.add(child.rsplit("/", 1)[-1])
            else:
                refs(child, out)
    elif isinstance(value, list):
        for child in value:
            refs(child, out)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    spec, version = sys.argv[1], sys.argv[2]
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "openapi")
    os.makedirs(os.path.join(out, "v3"), exist_ok=True)
    for _, stem in GROUP_VERSIONS:
        with open(os.path.join(spec, "v3", f"{stem}_openapi.json")) as f:
            document = json.load(f)
        with open(os.path.join(out, "v3", f"{stem}.json"), "w") as f:
            f.write(minified(document))

    with open(os.path.join(spec, "swagger.json")) as f:
        swagger = json.load(f)
    prefixes = tuple(prefix for prefix, _ in GROUP_VERSIONS)
    paths = {p: v for p, v in swagger["paths"].items() if p.startswith(prefixes)}
    wanted, queue = set(), set()
    refs(paths, queue)
    while queue:
        name = queue.pop()
        if name in wanted or name not in swagger["definitions"]:
            continue
        wanted.add(name)
        refs(swagger["definitions"][name], queue)
    swagger["paths"] = paths
    swagger["definitions"] = {n: d for n, d in swagger["definitions"].items() if n in wanted}
    with open(os.path.join(out, "v2.json"), "w") as f:
        f.write(minified(swagger))

    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(
            "# Kubernetes' OpenAPI documents\n\n"
            f"The OpenAPI documents of Kubernetes {version} for the group versions the embedded API\n"
            "server serves, copied minified from the Kubernetes tree's `api/openapi-spec` by\n"
            "`scripts/vendor-openapi.py` (its docs say which): `v3/<group version>.json` whole, and\n"
            "`v2.json`, the v2 document's paths of those group versions and the definitions they\n"
            "reach. `src/testing/openapi.rs` serves them at `/openapi/v2` and `/openapi/v3`.\n"
            "Copyright The Kubernetes Authors, Apache License 2.0.\n"
        )


if __name__ == "__main__":
    main()
