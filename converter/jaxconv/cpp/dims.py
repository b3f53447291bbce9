"""Symbolic dimensions (``b``, ``2*b``, ``floordiv(b + 1, 2)``) as C++ expressions."""

from __future__ import annotations

import ast
from typing import Mapping, Sequence

from jaxconv.errors import UnsupportedError

# Checked arithmetic of templates/jaxconv_dims.h: an overflow throws instead of wrapping.
_NS = "jaxconv_dims::"
_BINOPS = {ast.Add: _NS + "add", ast.Sub: _NS + "sub", ast.Mult: _NS + "mul"}
_CALLS = {"floordiv": _NS + "floordiv", "mod": _NS + "mod", "max": _NS + "max", "min": _NS + "min"}


def is_symbol(dim: int | str) -> bool:
    """Whether ``dim`` is one bare symbolic name (its size can be read from an input's shape)."""
    return isinstance(dim, str) and dim.strip().isidentifier()


def symbols(dims: Sequence[int | str]) -> list[str]:
    """Names used by the symbolic dimensions, in order of first use."""
    out: list[str] = []
    for d in dims:
        if isinstance(d, str):
            for node in ast.walk(_parse(d)):
                if isinstance(node, ast.Name) and node.id not in _CALLS and node.id not in out:
                    out.append(node.id)
    return out


def _parse(text: str) -> ast.expr:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise UnsupportedError(f"symbolic dimension {text!r} cannot be written in C++") from e


def cpp_expr(dim: int | str, idents: Mapping[str, str]) -> str:
    """``dim`` as a checked C++ ``int64_t`` expression over the dimension variables named in ``idents``.

    Raises:
        UnsupportedError: the expression uses something other than + - *, integers, names and
            floordiv/mod/max/min.
    """
    if isinstance(dim, int):
        return str(dim)

    def emit(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return f"int64_t{{{node.value}}}"
        if isinstance(node, ast.Name) and node.id in idents:
            return idents[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return f"{_NS}neg({emit(node.operand)})"
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return f"{_BINOPS[type(node.op)]}({emit(node.left)}, {emit(node.right)})"
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS
                and len(node.args) == 2 and not node.keywords):
            return f"{_CALLS[node.func.id]}({emit(node.args[0])}, {emit(node.args[1])})"
        raise UnsupportedError(f"symbolic dimension {dim!r} cannot be written in C++ "
                               f"(at {ast.unparse(node)!r})")

    return emit(_parse(dim))


def shape_text(dims: Sequence[int | str]) -> str:
    """``[b, 784]``: the shape as documented in comments and error messages."""
    return "[" + ", ".join(str(d) for d in dims) + "]"
