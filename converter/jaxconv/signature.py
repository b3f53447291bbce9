"""The input/output contract shared by every target: flat names, dtypes, shapes, pytree paths."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


@dataclass(frozen=True)
class TensorInfo:
    """One flat input or output.

    Attributes:
        name: the name every target uses (``x``, ``params_dense_kernel``, ``output_0``).
        dtype: numpy dtype name.
        shape: ints and symbolic dimension strings (``b``, ``2*b``).
        path: the pytree path (``params['dense']['kernel']``, ``result[1]``).
    """

    name: str
    dtype: str
    shape: tuple[int | str, ...]
    path: str

    @property
    def symbolic(self) -> bool:
        return any(not isinstance(d, int) for d in self.shape)


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]

    def to_json(self) -> dict[str, Any]:
        def enc(t: TensorInfo) -> dict[str, Any]:
            return {"name": t.name, "dtype": t.dtype, "shape": [d if isinstance(d, int) else str(d) for d in t.shape], "path": t.path}

        return {"inputs": [enc(t) for t in self.inputs], "outputs": [enc(t) for t in self.outputs]}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Signature":
        def dec(d: dict[str, Any]) -> TensorInfo:
            return TensorInfo(d["name"], d["dtype"], tuple(d["shape"]), d.get("path", ""))

        return Signature(tuple(dec(d) for d in data["inputs"]), tuple(dec(d) for d in data["outputs"]))


_NON_WORD = re.compile(r"[^0-9A-Za-z_]+")


def _key_text(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def sanitize(name: str) -> str:
    """A name safe for every target (letters, digits, underscores; no leading digit)."""
    out = _NON_WORD.sub("_", name).strip("_") or "arg"
    return f"_{out}" if out[0].isdigit() else out


def _dim(d: Any) -> int | str:
    return int(d) if isinstance(d, (int, np.integer)) else str(d)


def input_infos(arg_specs: Sequence[Any], param_names: Sequence[str] | None) -> tuple[TensorInfo, ...]:
    """Flat inputs named after parameters, with pytree leaves as ``param_key_subkey``."""
    import jax

    out: list[TensorInfo] = []
    used: set[str] = set()
    for i, spec in enumerate(arg_specs):
        base = param_names[i] if param_names and i < len(param_names) else f"arg{i}"
        leaves = jax.tree_util.tree_flatten_with_path(spec)[0]
        for path, leaf in leaves:
            parts = [base] + [_key_text(k) for k in path]
            name = sanitize("_".join(parts))
            unique, k = name, 1
            while unique in used:
                unique, k = f"{name}_{k}", k + 1
            used.add(unique)
            out.append(TensorInfo(unique, np.dtype(leaf.dtype).name, tuple(_dim(d) for d in leaf.shape),
                                  base + jax.tree_util.keystr(path)))
    return tuple(out)


def output_infos(out_avals: Sequence[Any], out_tree: Any) -> tuple[TensorInfo, ...]:
    """Flat outputs ``output_0``... with the pytree path of each in ``path``."""
    import jax

    placeholders = jax.tree_util.tree_unflatten(out_tree, list(range(len(out_avals))))
    paths = {leaf: "result" + jax.tree_util.keystr(p) for p, leaf in jax.tree_util.tree_flatten_with_path(placeholders)[0]}
    return tuple(TensorInfo(f"output_{i}", np.dtype(a.dtype).name, tuple(_dim(d) for d in a.shape), paths.get(i, f"result[{i}]"))
                 for i, a in enumerate(out_avals))
