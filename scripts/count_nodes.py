"""Lower every non-slow conformance case to ONNX and print the total node count.

    python scripts/count_nodes.py                    # trace, lower, count
    python scripts/count_nodes.py --cache /tmp/shlo  # keep the traced modules; later runs reuse them
    python scripts/count_nodes.py -k model --per-case
    python scripts/count_nodes.py --cache /tmp/shlo --without zeros,shapes   # what two rewrite rules save

Nodes inside Loop/If/Scan bodies count too. Tracing dominates the run time, so ``--cache`` stores
each case's serialized StableHLO and signature, and a second run only lowers (this is how before
and after figures of a graph change compare the same modules).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def count(graph) -> int:
    """Nodes of an onnx GraphProto, subgraphs included."""
    import onnx

    total = 0
    for node in graph.node:
        total += 1
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                total += count(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                total += sum(count(g) for g in attr.graphs)
    return total


def traced(case, cache: str | None):
    """(module bytes, inputs, outputs, name) of one case, from the cache when there."""
    path = os.path.join(cache, case.name + ".pkl") if cache else None
    if path and os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    import jax

    from conformance.targets import _trace
    from jaxconv.onnx.driver import GraphIO

    with jax.enable_x64(case.x64):
        program = _trace(case, "cpu")
    position = {flat: k for k, flat in enumerate(program.kept_inputs)}
    inputs = [GraphIO(t.name, t.dtype, t.shape, position.get(i)) for i, t in enumerate(program.signature.inputs)]
    outputs = [GraphIO(t.name, t.dtype, t.shape) for t in program.signature.outputs]
    item = (bytes(program.exported.mlir_module_serialized), inputs, outputs, program.name)
    if path:
        with open(path, "wb") as f:
            pickle.dump(item, f)
    return item


def _switch_off(rules: list[str]) -> None:
    """Make the named rewrite rules fire nowhere (each module's ``rewrite`` returns 0)."""
    import importlib

    for rule in rules:
        try:
            module = importlib.import_module(f"jaxconv.onnx.rewrites.{rule}")
        except ModuleNotFoundError:
            raise SystemExit(f"count_nodes.py: no rewrite rule {rule!r} in jaxconv.onnx.rewrites") from None
        module.rewrite = lambda *args, **kwargs: 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-k", default="", help="comma-separated substrings of case names")
    parser.add_argument("--cache", help="folder for traced modules (created when missing)")
    parser.add_argument("--per-case", action="store_true", help="print one line per case")
    parser.add_argument("--without", default="", help="comma-separated rewrite rules (jaxconv.onnx.rewrites "
                        "modules, e.g. zeros,layout) to switch off")
    args = parser.parse_args()
    _switch_off([r for r in args.without.split(",") if r])
    from conformance.case import load_all
    from jaxconv.onnx.driver import lower_module
    from jaxconv.stablehlo.reader import read_module

    if args.cache:
        os.makedirs(args.cache, exist_ok=True)
    keys = [k for k in args.k.split(",") if k]
    cases = [c for name, c in sorted(load_all().items()) if not c.slow and (not keys or any(k in name for k in keys))]
    total, failed, lower_s = 0, [], 0.0
    for case in cases:
        try:
            data, inputs, outputs, name = traced(case, args.cache)
        except Exception as e:  # noqa: BLE001  (a case that does not trace is reported, not counted)
            failed.append(f"{case.name}: trace: {type(e).__name__}: {e}"[:200])
            continue
        start = time.process_time()
        try:
            model = lower_module(read_module(data), inputs=inputs, outputs=outputs, graph_name=name)
        except Exception as e:  # noqa: BLE001
            failed.append(f"{case.name}: lower: {type(e).__name__}: {e}"[:200])
            continue
        lower_s += time.process_time() - start
        n = count(model.graph)
        total += n
        if args.per_case:
            print(f"{case.name}\t{n}")
    for line in failed:
        print("failed:", line, file=sys.stderr)
    print(f"{len(cases) - len(failed)} cases lowered, {len(failed)} failed; {total} nodes; lowering {lower_s:.1f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
