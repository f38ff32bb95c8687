"""docs/native-ops.md: every aten overload torchneuron runs natively, by family and
kind, read off the registry (``torchneuron.native_ops()``).

    torchneuron ops [--out docs/native-ops.md] [--check]

``--check`` exits 1 when the file differs from what the registry says now (CI keeps
the page true).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

KIND_DOC = {
    "lowered": "a lowering in ops/ (one cached executable per call signature)",
    "variant": "the in-place / out= form of a lowered functional overload",
    "eager": "an eager kernel in kernels/ (host reads, data-dependent shapes, copies, routing)",
    "compile-only": "a lowering used inside compiled and decomposed graphs only (views, "
                    "allocations)",
    "decomposed": "PyTorch's decomposition traced into one executable (found at first use)",
}


def render(natives: dict, layouts: dict | None = None) -> str:
    by_family = collections.defaultdict(lambda: collections.defaultdict(list))
    for name, n in natives.items():
        if n.kind != "decomposed":  # run-time discoveries depend on what ran
            by_family[n.family][n.kind].append(name)
    kinds = [k for k in KIND_DOC if k != "decomposed"]
    total = collections.Counter(n.kind for n in natives.values() if n.kind != "decomposed")
    L = ["# Native ops", "",
         "Generated from the registry by `torchneuron ops` (tests/test_native_ops.py keeps it "
         "true). Kinds:", ""]
    L += [f"- **{k}**: {d}" for k, d in KIND_DOC.items()]
    L += ["", "Ops that are none of these run through the CPU fallback "
          "(`torchneuron.fallback_stats()`); ops PyTorch decomposes itself "
          "(CompositeImplicitAutograd) run as their decomposition.", "",
          "| family | " + " | ".join(kinds) + " | total |",
          "|---|" + "---:|" * (len(kinds) + 1)]
    for fam in sorted(by_family):
        row = [len(by_family[fam][k]) for k in kinds]
        L.append(f"| {fam} | " + " | ".join(str(v) for v in row) + f" | {sum(row)} |")
    L.append("| **all** | " + " | ".join(str(total[k]) for k in kinds)
             + f" | {sum(total.values())} |")
    for fam in sorted(by_family):
        L += ["", f"## {fam}", ""]
        for k in kinds:
            names = sorted(by_family[fam][k])
            if names:
                L.append(f"- {k} ({len(names)}): " + ", ".join(f"`{n.split('::', 1)[1]}`"
                                                           for n in names))
    if layouts:
        L += ["", "## Sparse layouts", "",
              "Kernels for sparse tensors on the device (their own dispatch keys; "
              "src/torchneuron/kernels/sparse.py). Metadata and allocation ops redispatch to "
              "PyTorch's device-generic SparseMeta / SparseCsrMeta kernels; the rest are "
              "compositions of the native dense ops above.", ""]
        for key, names in layouts.items():
            L.append(f"- {key} ({len(names)}): " + ", ".join(f"`{n.split('::', 1)[1]}`"
                                                           for n in names))
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    import torchneuron

    from .conformance import checkout

    root = checkout()
    p = argparse.ArgumentParser(prog="torchneuron ops", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(root, "docs", "native-ops.md") if root else "-",
                   help="where to write the page (default: docs/native-ops.md in a source "
                        "checkout, standard output for an installed wheel; - for standard output)")
    p.add_argument("--check", action="store_true", help="fail if the page is out of date")
    args = p.parse_args(argv)
    if args.check and args.out == "-":
        p.error("--check needs the page to compare with: --out PATH")
    from torchneuron import dispatch

    text = render(torchneuron.native_ops(), dispatch.layout_kernels())
    if args.out == "-":
        sys.stdout.write(text)
        return 0
    if args.check:
        with open(args.out) as f:
            if f.read() != text:
                print(f"{args.out} is out of date: run `torchneuron ops`", file=sys.stderr)
                return 1
        return 0
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
