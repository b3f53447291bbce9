"""Run a serialized ``jax.export`` artifact without the original Python function."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from jaxconv.errors import ArtifactError


class JaxExportRunner:
    kind = "jaxexport"

    def __init__(self, path_or_exported: Any) -> None:
        if isinstance(path_or_exported, str):
            from jaxconv.stablehlo.export import load_exported

            self.exported = load_exported(path_or_exported)
        else:
            self.exported = path_or_exported
        self.x64 = takes_x64(self.exported)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        import jax

        n = len(self.exported.in_avals)
        if len(inputs) != n:
            raise ArtifactError(f"the artifact takes {n} inputs, got {len(inputs)}")
        args, kwargs = jax.tree_util.tree_unflatten(self.exported.in_tree, list(inputs))
        from jaxconv.program import x64_scope

        try:
            with x64_scope(self.x64):
                out = self.exported.call(*args, **kwargs)
        except Exception as e:
            raise ArtifactError(f"running the jax.export artifact failed: {type(e).__name__}: {str(e).strip()[:300]}") from e
        return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def takes_x64(exported: Any) -> bool:
    """Whether the artifact takes or returns 64-bit values (JAX narrows them to 32 bits without x64)."""
    avals = list(exported.in_avals) + list(exported.out_avals)
    return any(np.dtype(a.dtype).name in ("float64", "int64", "uint64", "complex128") for a in avals)
