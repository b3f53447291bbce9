"""A small, read-only, pure-Python view of a StableHLO module.

The reader (``stablehlo.reader``) builds it from the MLIR bindings; everything else in
jaxconv (the ONNX lowering above all) works on these classes and never touches MLIR.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Iterator

_ids = itertools.count()


@dataclass(frozen=True)
class TensorType:
    """Type of a value.

    Attributes:
        dtype: numpy-style name (``float32``, ``bfloat16``, ``int8``, ``bool``, ``complex64``),
            or ``token`` for StableHLO tokens.
        shape: dimensions, None for a dynamic (``?``) one.
    """

    dtype: str
    shape: tuple[int | None, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    def __str__(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"


@dataclass(eq=False)
class Value:
    """An SSA value: a function/block argument or an op result."""

    type: TensorType
    id: int = field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return f"%{self.id}:{self.type}"


@dataclass(eq=False)
class Block:
    """A region body: arguments, ops, and the values its terminator returns."""

    args: list[Value]
    ops: list["Op"]
    returns: list[Value]


@dataclass(eq=False)
class Op:
    """One operation.

    Attributes:
        name: full op name, e.g. ``stablehlo.add``.
        operands, results: SSA values.
        attrs: decoded attributes (ints, floats, strs, bools, tuples, numpy arrays, dicts, and the
            dimension-numbers records above).
        regions: bodies (reduce, sort, while, case, ...), one Block each.
        location: MLIR location text, e.g. ``model.py:12``; "" when unknown.
    """

    name: str
    operands: list[Value]
    results: list[Value]
    attrs: dict[str, Any]
    regions: list[Block]
    location: str = ""

    @property
    def short_name(self) -> str:
        return self.name.split(".", 1)[-1]

    def __repr__(self) -> str:
        return f"Op({self.name}, {self.operands} -> {self.results})"


class _Record(Mapping[str, Any]):
    """A dimension-numbers record; also a read-only mapping of its fields, for code that reads it as a dict."""

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> Any:
        """``value`` as this record (a record is returned as it is; a mapping of the fields is converted)."""
        return value if isinstance(value, cls) else cls(**{k: value[k] for k in cls._names()})


@dataclass(frozen=True, eq=False)
class DotDimensionNumbers(_Record):
    """``stablehlo.dot_general``'s ``dot_dimension_numbers``, fields named as in the StableHLO spec."""

    lhs_batching_dimensions: tuple[int, ...]
    rhs_batching_dimensions: tuple[int, ...]
    lhs_contracting_dimensions: tuple[int, ...]
    rhs_contracting_dimensions: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class ConvDimensionNumbers(_Record):
    """``stablehlo.convolution``'s ``dimension_numbers``: where batch, feature and spatial axes are."""

    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: tuple[int, ...]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: tuple[int, ...]
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class GatherDimensionNumbers(_Record):
    """``stablehlo.gather``'s ``dimension_numbers`` (and ``dynamic_gather``'s)."""

    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    operand_batching_dims: tuple[int, ...]
    start_indices_batching_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    index_vector_dim: int


@dataclass(frozen=True, eq=False)
class ScatterDimensionNumbers(_Record):
    """``stablehlo.scatter``'s ``scatter_dimension_numbers``."""

    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    input_batching_dims: tuple[int, ...]
    scatter_indices_batching_dims: tuple[int, ...]
    scattered_dims_to_operand_dims: tuple[int, ...]
    index_vector_dim: int


DIMENSION_NUMBERS: dict[str, type[_Record]] = {
    "DotDimensionNumbers": DotDimensionNumbers, "ConvDimensionNumbers": ConvDimensionNumbers,
    "GatherDimensionNumbers": GatherDimensionNumbers, "ScatterDimensionNumbers": ScatterDimensionNumbers,
}


@dataclass(eq=False)
class Function:
    """A ``func.func``: the ops of its single block plus signature metadata."""

    name: str
    body: Block
    visibility: str = "public"
    arg_attrs: list[dict[str, Any]] = field(default_factory=list)
    result_attrs: list[dict[str, Any]] = field(default_factory=list)
    arg_locations: list[str] = field(default_factory=list)


@dataclass(eq=False)
class Module:
    """All functions of a module by name, and module attributes."""

    functions: dict[str, Function]
    attrs: dict[str, Any] = field(default_factory=dict)

    def entry(self, name: str | None = None) -> Function:
        """The function that becomes a graph: ``name``, else ``main``, else the only public one."""
        if name is not None:
            if name not in self.functions:
                raise KeyError(name)
            return self.functions[name]
        if "main" in self.functions:
            return self.functions["main"]
        public = [f for f in self.functions.values() if f.visibility == "public"]
        if len(public) == 1:
            return public[0]
        raise KeyError("main")


def walk_ops(block: Block) -> Iterator[Op]:
    """Every op in ``block`` and, recursively, in the regions of its ops (pre-order)."""
    for op in block.ops:
        yield op
        for region in op.regions:
            yield from walk_ops(region)


_FILE_LINE = re.compile(r'"([^"]+?)":(\d+)')


_OWN_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def short_location(loc: str) -> str:
    """Reduce an MLIR location to ``file.py:LINE`` of the innermost frame outside jaxconv itself."""
    for path, line in _FILE_LINE.findall(loc):
        if not os.path.abspath(path).startswith(_OWN_PACKAGE):
            return f"{path}:{line}"
    return ""
