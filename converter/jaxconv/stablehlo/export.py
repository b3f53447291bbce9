"""StableHLO artifacts of a Program: readable text, portable bytecode, serialized jax.export."""

from __future__ import annotations

import os
from dataclasses import dataclass

from jaxconv.artifacts import atomic_files, read_bytes
from jaxconv.errors import ArtifactError, UsageError
from jaxconv.program import Program

SUFFIXES = (".mlir", ".mlirbc", ".jaxexport")


@dataclass(frozen=True)
class StableHLOArtifacts:
    text: str
    bytecode: str
    exported: str


def base_path(out: str) -> str:
    """``model.mlir`` / ``model.jaxexport`` / ``model`` all mean the base ``model``."""
    root, ext = os.path.splitext(out)
    return root if ext in SUFFIXES else out


def write(program: Program, out: str) -> StableHLOArtifacts:
    """Write OUT.mlir, OUT.mlirbc and OUT.jaxexport (all three or none).

    Raises:
        UsageError: ``out`` names a folder rather than a base path.
    """
    base = base_path(out)
    if out.endswith(("/", os.sep)) or os.path.isdir(out) or not os.path.basename(base):
        example = os.path.join(out, program.name)
        raise UsageError(f"output {out} is a folder; give a base path such as {example} "
                         f"(writes {os.path.basename(example)}.mlir, .mlirbc and .jaxexport)")
    paths = [base + s for s in SUFFIXES]
    exported, serialized = serializable(program)
    with atomic_files(paths) as tmps:
        with open(tmps[0], "w") as f:
            f.write(exported.mlir_module())
        with open(tmps[1], "wb") as f:
            f.write(exported.mlir_module_serialized)
        with open(tmps[2], "wb") as f:
            f.write(serialized)
    return StableHLOArtifacts(*paths)


def serializable(program: Program):
    """The Exported to save and its serialized bytes.

    jax.export can only serialize pytrees of standard containers (or registered types). For
    arguments or results built from other classes (Flax NNX state, Equinox modules) the function is
    exported again over its flat leaves, so the .jaxexport takes and returns flat arrays in the
    order of the signature (the names ``jaxconv inspect`` shows).
    """
    try:
        return program.exported, program.exported.serialize()
    except ValueError as e:
        if "unregistered type" not in str(e):
            raise
    flat = flat_export(program)
    return flat, flat.serialize()


def flat_export(program: Program):
    """Export ``program.fn`` as a function of its flattened arguments returning its flattened results."""
    import jax
    from jax import export

    leaves, treedef = jax.tree_util.tree_flatten(list(program.arg_specs))

    def flat_fn(*flat):
        args = jax.tree_util.tree_unflatten(treedef, list(flat))
        return tuple(jax.tree_util.tree_leaves(program.fn(*args)))

    flat_fn.__name__ = program.name
    return export.export(jax.jit(flat_fn), platforms=program.platforms)(*leaves)


def load_exported(path: str):
    """Deserialize a ``.jaxexport`` file into a ``jax.export.Exported``."""
    from jax import export

    data = read_bytes(path)
    try:
        return export.deserialize(bytearray(data))
    except Exception as e:
        raise ArtifactError(f"{path} is not a serialized jax.export artifact: {type(e).__name__}: {str(e)[:200]}") from e
