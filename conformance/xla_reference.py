"""Expected values for StableHLO test data that carries none: XLA's own result at a concrete size.

``dynamic/`` files have ``?`` dimensions and scalar integer dimension arguments but no
``@expected``. Here ``@main`` is specialized to ``DYNAMIC_SIZE``: every scalar integer argument
becomes that constant, every ``?`` argument gets a static type (wrapped for StableHLO's shape
refinement, as ``jax.export`` does), the shapes are refined, and XLA on the CPU compiles and
runs the module on the same inputs the ONNX model got. When any step fails there is no
reference, and the file counts as "ran, no expectations".

This touches MLIR and XLA through jax's internal modules; the converter never does so outside
``jaxconv.stablehlo`` (conformance is not part of the converter).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

_MAIN = re.compile(r"func\.func public @main\((?P<args>.*?)\)(?P<rest>\s*->.*?)?\s*\{\s*\n")
_ARG = re.compile(r"(?P<name>%[\w.]+): (?P<type>tensor<(?:[^<>]|<[^<>]*>)*>)(?P<attrs> \{[^{}]*\})?")
_SCALAR_INT = re.compile(r"tensor<u?i(8|16|32|64)>")


def specialize(text: str, size: int) -> tuple[str, list[int]]:
    """``text`` with ``@main``'s scalar integer arguments set to ``size`` and its ``?`` dimensions too.

    Returns the new module text and the indices of the original arguments that remain arguments.

    Raises:
        ValueError: ``@main`` is not in the expected form.
    """
    m = _MAIN.search(text)
    if m is None:
        raise ValueError("no public @main")
    args = list(_ARG.finditer(m.group("args")))
    if len(args) != m.group("args").count("%"):
        raise ValueError("@main's arguments are not plain tensors")
    kept: list[str] = []
    prologue: list[str] = []
    indices: list[int] = []
    for i, a in enumerate(args):
        name, ty = a.group("name"), a.group("type")
        if _SCALAR_INT.fullmatch(ty):
            prologue.append(f"    {name} = stablehlo.constant dense<{size}> : {ty}\n")
            continue
        indices.append(i)
        if "?" not in ty:
            kept.append(f"{name}: {ty}")
            continue
        static = ty.replace("?", str(size))
        dims = re.findall(r"(\d+)x", static[len("tensor<"):-1])  # (not split("x"): complex<f32> holds an x)
        kept.append(f"{name}_static: {static}")
        shape_ty = f"tensor<{len(dims)}xi64>"
        prologue.append(f"    {name}_shape = stablehlo.constant dense<[{', '.join(dims)}]> : {shape_ty}\n")
        prologue.append(f"    {name} = stablehlo.custom_call @stablehlo.shape_refinement_operand_wrapper({name}_static, "
                        f"{name}_shape) {{indices_of_shape_operands = dense<1> : tensor<1xi64>}} : ({static}, {shape_ty}) "
                        f"-> {ty}\n")
    head = f"func.func public @main({', '.join(kept)}){m.group('rest') or ''} {{\n"
    return text[:m.start()] + head + "".join(prologue) + text[m.end():], indices


def run_with_xla(text: str, feeds: Sequence[np.ndarray], size: int) -> list[np.ndarray]:
    """Run the dynamic module ``text`` with XLA on the CPU, its dimensions all ``size``.

    ``feeds`` are the values for every ``@main`` argument (the scalar dimension arguments among
    them must equal ``size``); raises on any failure (there is then no reference).
    """
    import jax
    from jax._src import compiler, xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir

    special, indices = specialize(text, size)
    with mlir.make_ir_context():
        bytecode = mlir.module_to_bytecode(ir.Module.parse(special))
    refined = _jax.mlir.refine_polymorphic_shapes(bytecode, enable_shape_assertions=True, validate_static_shapes=True)
    backend = xla_bridge.get_backend("cpu")
    devices = _jax.DeviceList(tuple(backend.devices()[:1]))
    executable = backend.compile_and_load(refined, devices, compiler.get_compile_options(num_replicas=1, num_partitions=1))
    device = backend.devices()[0]
    with jax.enable_x64(True):  # device_put would narrow 64-bit inputs otherwise
        outputs = executable.execute([jax.device_put(np.asarray(feeds[i]), device) for i in indices])
    return [np.asarray(o) for o in outputs]


def reference(text: str, feeds: Sequence[np.ndarray], size: int) -> tuple[list[np.ndarray] | None, str]:
    """(XLA's outputs, "") or (None, why there are none)."""
    try:
        return run_with_xla(text, feeds, size), ""
    except Exception as e:  # noqa: BLE001  (no reference is a result, not an error)
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        return None, f"{type(e).__name__}: {first}"[:200]


__all__: list[Any] = ["reference", "run_with_xla", "specialize"]
