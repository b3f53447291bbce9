"""StableHLO artifacts of a Program: readable text, portable bytecode, serialized jax.export."""

from __future__ import annotations

import os
from dataclasses import dataclass

from jaxconv.artifacts import atomic_files
from jaxconv.errors import ArtifactError
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
    """Write OUT.mlir, OUT.mlirbc and OUT.jaxexport (all three or none)."""
    base = base_path(out)
    paths = [base + s for s in SUFFIXES]
    exported = program.exported
    with atomic_files(paths) as tmps:
        with open(tmps[0], "w") as f:
            f.write(exported.mlir_module())
        with open(tmps[1], "wb") as f:
            f.write(exported.mlir_module_serialized)
        with open(tmps[2], "wb") as f:
            f.write(exported.serialize())
    return StableHLOArtifacts(*paths)


def load_exported(path: str):
    """Deserialize a ``.jaxexport`` file into a ``jax.export.Exported``."""
    from jax import export

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ArtifactError(f"cannot read {path}: {e.strerror}") from None
    try:
        return export.deserialize(bytearray(data))
    except Exception as e:
        raise ArtifactError(f"{path} is not a serialized jax.export artifact: {type(e).__name__}: {str(e)[:200]}") from None
