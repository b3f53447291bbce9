"""``jaxconv inspect``: describe any artifact (inputs, outputs, op histogram, size, producer)."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

from jaxconv.errors import ArtifactError
from jaxconv.runtimes import artifact_kind


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return os.path.getsize(path)


def _fmt_io(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        shape = ",".join(str(d) for d in r["shape"])
        path = f"  ({r['path']})" if r.get("path") else ""
        layout = f"  as {r['layout']}" if r.get("layout") else ""
        out.append(f"  {r['name']:<24} {r['dtype']:<9} [{shape}]{path}{layout}")
    return out


def _histogram(counter: Counter) -> list[str]:
    return [f"  {name:<32} {n}" for name, n in counter.most_common()]


def describe(path: str) -> dict[str, Any]:
    """A dict with kind, size, inputs, outputs (name, dtype, shape, path), ops and producer."""
    kind = artifact_kind(path)
    info: dict[str, Any] = {"path": path, "kind": kind, "size_bytes": _size(path)}
    if kind == "onnx":
        info.update(_describe_onnx(path))
    elif kind in ("jaxexport", "stablehlo"):
        info.update(_describe_stablehlo(path, kind))
    elif kind == "tflite":
        info.update(_describe_tflite(path))
    elif kind == "saved-model":
        info.update(_describe_saved_model(path))
    return info


def _describe_onnx(path: str) -> dict[str, Any]:
    import onnx

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:
        raise ArtifactError(f"{path} is not a readable ONNX model: {str(e)[:200]}") from e
    meta = {p.key: p.value for p in model.metadata_props}
    paths: dict[str, str] = {}
    if "jaxconv.signature" in meta:
        sig = json.loads(meta["jaxconv.signature"])
        paths = {r["name"]: r.get("path", "") for r in sig["inputs"] + sig["outputs"]}
    from jaxconv.onnx.complex_layout import complex_io

    complex_in, complex_out = complex_io(model)
    stored_as = {**complex_in, **complex_out}  # complex: (re, im) pairs on a trailing axis of 2

    def io(values) -> list[dict[str, Any]]:
        rows = []
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in t.shape.dim]
            row = {"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
                   if t.elem_type != onnx.TensorProto.BFLOAT16 else "bfloat16", "shape": dims, "path": paths.get(v.name, "")}
            if v.name in stored_as:
                row.update(dtype=stored_as[v.name], shape=dims[:-1], layout=f"{row['dtype']}[{','.join(map(str, dims))}] (re, im)")
            rows.append(row)
        return rows

    ops: Counter = Counter()

    def count(graph) -> None:
        for n in graph.node:
            ops[n.op_type] += 1
            for a in n.attribute:
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    count(g)

    count(model.graph)
    return {"inputs": io(model.graph.input), "outputs": io(model.graph.output), "ops": dict(ops),
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "versions": {"opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None),
                         "ir_version": model.ir_version}}


def _describe_stablehlo(path: str, kind: str) -> dict[str, Any]:
    from jaxconv.signature import input_infos, output_infos, sanitize
    from jaxconv.stablehlo import ir as hir
    from jaxconv.stablehlo.reader import read_module

    info: dict[str, Any] = {}
    if kind == "jaxexport":
        from jaxconv.stablehlo.export import load_exported

        exp = load_exported(path)
        import jax

        specs = jax.tree_util.tree_unflatten(exp.in_tree, list(exp.in_avals))
        args, kwargs = specs
        ins = input_infos(list(args), None)
        located = _names_from_locations(exp)
        if located:
            ins = tuple(type(t)(sanitize(located[i]), t.dtype, t.shape, located[i]) if i in located else t
                        for i, t in enumerate(ins))
        outs = output_infos(exp.out_avals, exp.out_tree)
        info["inputs"] = [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "path": t.path} for t in ins]
        info["outputs"] = [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "path": t.path} for t in outs]
        info["versions"] = {"platforms": list(exp.platforms), "calling_convention": exp.calling_convention_version}
        data = exp.mlir_module_serialized
        info["producer"] = f"jax.export ({exp.fun_name})"
    else:
        with open(path, "rb") as f:
            data = f.read()
        info["producer"] = "StableHLO module"
    module = read_module(data if isinstance(data, bytes) and data[:4] == b"ML\xefR" else
                         (data.decode("utf-8", "replace") if isinstance(data, bytes) else data))
    ops: Counter = Counter()
    for fn in module.functions.values():
        for op in hir.walk_ops(fn.body):
            ops[op.name] += 1
    info["ops"] = dict(ops)
    if "inputs" not in info:
        entry = module.entry()
        info["inputs"] = [{"name": f"arg{i}", "dtype": a.type.dtype, "shape": ["?" if d is None else d for d in a.type.shape]}
                          for i, a in enumerate(entry.body.args)]
        info["outputs"] = [{"name": f"output_{i}", "dtype": v.type.dtype, "shape": ["?" if d is None else d for d in v.type.shape]}
                           for i, v in enumerate(entry.body.returns)]
    return info


def _names_from_locations(exp: Any) -> dict[int, str]:
    """Flat input index -> pytree path, read from the argument locations jax.export records (loc("x"))."""
    import re

    from jaxconv.stablehlo.reader import read_module

    module = read_module(exp.mlir_module_serialized)
    fn = module.functions.get("_wrapped_jax_export_main") or module.functions.get("main")
    if fn is None:
        return {}
    locs = [loc for loc, attrs in zip(fn.arg_locations, fn.arg_attrs) if "jax.global_constant" not in attrs]
    kept = sorted(exp.module_kept_var_idx)
    out = {}
    for flat, loc in zip(kept, locs):
        m = re.fullmatch(r'loc\("([^"]+)"\)', loc)
        if m:
            out[flat] = m.group(1)
    return out


def _describe_tflite(path: str) -> dict[str, Any]:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as e:
        raise ArtifactError(f"inspecting .tflite needs ai-edge-litert: {e}") from e
    try:
        interp = Interpreter(model_path=path)
    except Exception as e:
        raise ArtifactError(f"{path} is not a readable TFLite model: {str(e)[:200]}") from e
    sigs = interp.get_signature_list()
    key = next(iter(sigs), None)
    info: dict[str, Any] = {"producer": "TFLite", "versions": {"signatures": list(sigs)}}
    details = {d["name"]: d for d in interp.get_input_details() + interp.get_output_details()}
    if key is not None:
        runner = interp.get_signature_runner(key)
        ins = runner.get_input_details()
        outs = runner.get_output_details()
        def described(details: dict) -> list[dict]:
            return [{"name": n, "dtype": d["dtype"].__name__,
                     "shape": [int(x) if x >= 0 else "?" for x in d["shape_signature"]]} for n, d in details.items()]

        info["inputs"], info["outputs"] = described(ins), described(outs)
    else:
        info["inputs"] = info["outputs"] = []
    del details
    from jaxconv.runtimes.tflite import read_route, read_signature

    if read_route(path):
        info["route"] = read_route(path)
    signature = read_signature(path)
    if signature is not None:
        data = signature.to_json()
        info["inputs"], info["outputs"] = data["inputs"], data["outputs"]
    ops: Counter = Counter()
    try:
        for op in interp._get_ops_details():  # noqa: SLF001  (the only op listing LiteRT offers)
            ops[op["op_name"]] += 1
    except Exception:
        pass
    info["ops"] = dict(ops)
    return info


def _describe_saved_model(path: str) -> dict[str, Any]:
    sig_file = os.path.join(path, "jaxconv_signature.json")
    info: dict[str, Any] = {"producer": "TF SavedModel (jax2tf)"}
    if os.path.exists(sig_file):
        with open(sig_file) as f:
            sig = json.load(f)
        info["inputs"], info["outputs"] = sig["inputs"], sig["outputs"]
    else:
        info["inputs"] = info["outputs"] = []
    from jaxconv.tf.saved_model import describe_ops, read_route

    if read_route(path):
        info["route"] = read_route(path)
        if info["route"] == "tf-ops":
            info["producer"] = "TF SavedModel (plain TF ops from jaxconv's ONNX)"
    info["ops"] = describe_ops(path)
    return info


def inspect_artifact(path: str) -> str:
    """Human-readable description of an artifact."""
    info = describe(path)
    lines = [f"{info['path']}: {info['kind']}, {info['size_bytes']:,} bytes, produced by {info.get('producer', '?')}"]
    if info.get("route"):
        lines.append(f"route: {info['route']}")
    if info.get("versions"):
        lines.append("versions: " + ", ".join(f"{k}={v}" for k, v in info["versions"].items()))
    lines.append("inputs:")
    lines += _fmt_io(info.get("inputs", []))
    lines.append("outputs:")
    lines += _fmt_io(info.get("outputs", []))
    ops = Counter(info.get("ops", {}))
    lines.append(f"ops ({sum(ops.values())}):")
    lines += _histogram(ops)
    return "\n".join(lines)
