#!/usr/bin/env python3
"""Writes the ONNX backend node test cases of the installed `onnx` package to a directory.

Each case becomes `OUT/test_x/model.onnx` with `OUT/test_x/test_data_set_N/input_J.pb` and
`output_J.pb` (serialised TensorProto), the layout of onnx/backend/test/data/node, which the pip
wheel does not ship. `xla-aot/tests/onnx_node.rs` runs them (see `tests/onnx/manifest.txt`).

    .venv/bin/pip install onnx==1.23.2
    .venv/bin/python scripts/onnx_node_tests.py [--out target/onnx-node] [--list]

`--list` prints every node test name (one a line) instead of writing the cases: the manifest must
name all of them. Tests whose inputs or outputs are not plain tensors (sequences, maps, optionals)
are written without data and listed; the manifest excludes them.
"""

import argparse
import os
import shutil
import sys
import warnings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="target/onnx-node", help="output directory")
    ap.add_argument("--list", action="store_true", help="print the test names and exit")
    args = ap.parse_args()

    warnings.simplefilter("ignore")
    import numpy as np  # noqa: F401  (onnx needs it)
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.case import node

    cases = sorted(node.collect_testcases(None), key=lambda c: c.name)
    if args.list:
        for c in cases:
            print(c.name)
        return 0

    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    written = 0
    for case in cases:
        d = os.path.join(args.out, case.name)
        os.makedirs(d)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        g = case.model.graph
        plain = all(v.type.HasField("tensor_type") for v in list(g.input) + list(g.output))
        if not plain:
            continue
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = os.path.join(d, f"test_data_set_{i}")
            os.makedirs(ds)
            for kind, values, infos in (("input", inputs, g.input), ("output", outputs, g.output)):
                for j, v in enumerate(values):
                    t = v if isinstance(v, onnx.TensorProto) else numpy_helper.from_array(
                        v, infos[j].name)
                    with open(os.path.join(ds, f"{kind}_{j}.pb"), "wb") as f:
                        f.write(t.SerializeToString())
        written += 1
    print(f"wrote {len(cases)} node tests ({written} with tensor data) to {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
