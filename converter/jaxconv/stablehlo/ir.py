"""A small, read-only, pure-Python view of a StableHLO module.

The reader (``stablehlo.reader``) builds it from the MLIR bindings; everything else in
jaxconv (the ONNX lowering above all) works on these classes and never touches MLIR.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
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
        attrs: decoded attributes (ints, floats, strs, bools, tuples, numpy arrays, dicts).
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
