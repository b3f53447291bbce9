"""Serialize JAX exports with stablehlo.composite ops replaced by calls of their decompositions.

TensorFlow 2.21 (XlaCallModule and the TFLite converter) cannot read ``vhlo.composite_v2``; the
TF targets serialize inside ``composites_as_calls()``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


@contextlib.contextmanager
def composites_as_calls() -> Iterator[None]:
    """Inside the block, jax.export serializes each ``stablehlo.composite`` as a call to its decomposition.

    JAX keeps CHLO ops without a StableHLO equivalent (``erf``, ``sinh``, ``top_k``, ...) as
    ``stablehlo.composite`` ops, serialized as ``vhlo.composite_v2``, which TensorFlow 2.21's
    ``XlaCallModule`` cannot read and its TFLite converter cannot legalize. A ``func.call`` of the
    decomposition computes the same thing with plain StableHLO ops.

    This wraps ``jax._src.export._export._module_to_bytecode``, a private function: the one place
    between JAX's lowering and the serialized bytes. Without it the block changes nothing
    (tests/test_tf_targets.py then fails on the SavedModel of ``jnp.sinh``).
    """
    try:
        from jax._src.export import _export
    except ImportError:
        _export = None
    original = getattr(_export, "_module_to_bytecode", None)
    if original is None:
        yield
        return

    def serialize(module: Any) -> bytes:
        return _decompose_composites(original(module), original)

    _export._module_to_bytecode = serialize
    try:
        yield
    finally:
        _export._module_to_bytecode = original


def _decompose_composites(serialized: bytes, serialize: Any) -> bytes:
    """The portable artifact with every ``stablehlo.composite`` replaced by a call of its decomposition."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import _jax
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func

    with jax_mlir.make_ir_context(), ir.Location.unknown():
        module = _jax.mlir.deserialize_portable_artifact(serialized)
        composites: list[Any] = []

        def visit(op: Any) -> Any:
            if op.name == "stablehlo.composite":
                composites.append(op)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        if not composites:
            return serialized
        for op in composites:
            with ir.InsertionPoint(op), op.location:
                call = func.CallOp([r.type for r in op.results], op.attributes["decomposition"], list(op.operands))
            for old, new in zip(op.results, call.results):
                old.replace_all_uses_with(new)
            op.erase()
        return serialize(module)
