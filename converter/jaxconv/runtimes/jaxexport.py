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
        enable_x64_for(self.exported)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        import jax

        n = len(self.exported.in_avals)
        if len(inputs) != n:
            raise ArtifactError(f"the artifact takes {n} inputs, got {len(inputs)}")
        args, kwargs = jax.tree_util.tree_unflatten(self.exported.in_tree, list(inputs))
        try:
            out = self.exported.call(*args, **kwargs)
        except Exception as e:
            raise ArtifactError(f"running the jax.export artifact failed: {type(e).__name__}: {str(e).strip()[:300]}") from None
        return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def enable_x64_for(exported: Any) -> None:
    """Switch on jax_enable_x64 when the artifact takes 64-bit inputs (JAX drops them to 32 bits otherwise)."""
    wide = [a for a in list(exported.in_avals) + list(exported.out_avals) if np.dtype(a.dtype).itemsize == 8 and np.dtype(a.dtype).kind in "fiu"]
    wide += [a for a in list(exported.in_avals) + list(exported.out_avals) if np.dtype(a.dtype).kind == "c" and np.dtype(a.dtype).itemsize == 16]
    if wide:
        import jax

        jax.config.update("jax_enable_x64", True)
