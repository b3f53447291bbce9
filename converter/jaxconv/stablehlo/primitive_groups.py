"""Find jax primitives that ``jax.export`` writes inline as many ops, and put one op back in their place.

``jax.export`` keeps ``chlo.erf`` as a ``stablehlo.composite`` but expands ``lax.erfc`` (the core of
the exact ``jax.nn.gelu``) into about sixty StableHLO ops: a rational approximation with an
``exponential``, an ``abs`` and three ``select``s. Every one of those ops carries the location of
the primitive, ``loc("jit(f)/erfc"(...))``. ``collapse_erfc`` finds such a group, checks that it is
exactly the decomposition jax writes for ``lax.erfc`` on that dtype (the same DAG of ops, attributes
and constant values as a reference export, made once per dtype), and replaces it by one synthetic
``chlo.erfc`` op. A group that differs in any way is left as it is: correct, only slower.

Only groups whose result is scaled by their own input are collapsed (``k * x * erfc(c * x)`` with
``|c| >= 1/2`` and ``|k| <= 1``, the exact GELU): there the lowering's ``1 - erf(z)`` is within
float32's tolerance everywhere (its absolute error, about 1e-7, is multiplied by at most 8 where
erfc is small). Under jax.grad, jax.jvp or a Jacobian the GELU's derivative reads the erfc too, as
``t * k * erfc(c * x)`` plus the product rule's other term ``t * k * x * c * -2/sqrt(pi) *
exp(-(c * x)^2)`` (``t`` the tangent or cotangent): the erfc's error is then at most 1.2e-7 times
``|t|``, and the exp term is ``2 * (c * x)^2`` times the erfc term in the tail (measured on 2M float32
points in [-20, 20]: 1.5e-7 from the float64 derivative, jax.jit's own error 1.3e-7). A bare erfc
keeps its decomposition, which is accurate in relative terms in the tail (``1 - erf(5)`` is 0 in
float32 where erfc(5) is 1.5e-12; ``log(ndtr(x))`` would become -inf), and so does one that reaches
an output by any other way.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Collection, Iterable

import numpy as np

from jaxconv._scale_chain import Kind, scaled_chain
from jaxconv.stablehlo import ir as hir
from jaxconv.stablehlo.reader import numpy_dtype

ERFC = "chlo.erfc"
_NAME = re.compile(r'loc\("([^"]*)"')
_BROADCASTS = ("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim")
# ops that only compute the shape operand of a dynamic broadcast (symbolic shapes)
_SHAPE_OPS = frozenset({"stablehlo.get_dimension_size", "stablehlo.reshape", "stablehlo.concatenate",
                        "stablehlo.convert", "stablehlo.constant"})
_MIN_ARG_SCALE, _MAX_OUT_SCALE = 0.5, 1.0
_MAX_STEPS = 8  # ops between the erfc and the product or sum that makes it exact
# ops that pass a value on unchanged (into a bigger shape)
_VIEW_OPS = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.reshape"})
_SCALING_OPS: dict[str, Kind] = {"stablehlo.negate": "neg", "stablehlo.multiply": "mul",
                                  "stablehlo.divide": "div"}
# scalars hand-written code computes at run time (``x / jnp.sqrt(2.0)``), folded for the scale check
_SCALAR_FOLDS = {"stablehlo.sqrt": np.sqrt, "stablehlo.convert": lambda a: a}


def primitive_of(location: str) -> str:
    """The jax primitive an op came from: the last part of its location's name (``jit(f)/erfc`` -> erfc)."""
    m = _NAME.match(location)
    return m.group(1).rsplit("/", 1)[-1] if m else ""


def collapse_erfc(module: hir.Module, dtypes: Collection[str]) -> int:
    """Replace, in place, each scaled ``lax.erfc`` decomposition on one of ``dtypes`` by a ``chlo.erfc`` op.

    Args:
        module: the module, changed in place (every function, nested regions too).
        dtypes: the operand dtypes to collapse (the others keep their decomposition).

    Returns:
        How many groups were replaced.
    """
    count = 0
    for fn in module.functions.values():
        if any('erfc"' in op.location for op in hir.walk_ops(fn.body)):
            count += _Collapser(fn, dtypes).run()
    return count


class _Collapser:
    """One function's erfc groups, found block by block."""

    def __init__(self, fn: hir.Function, dtypes: Collection[str]) -> None:
        self.fn, self.dtypes = fn, dtypes
        self.producer: dict[hir.Value, hir.Op] = {}
        self.users: dict[hir.Value, list[hir.Op]] = {}
        self.returned: set[hir.Value] = set()
        self.constant_keys: dict[hir.Value, Any] = {}
        self._index(fn.body)

    def _index(self, block: hir.Block) -> None:
        self.returned.update(block.returns)
        for op in block.ops:
            for v in op.results:
                self.producer[v] = op
            for v in op.operands:
                self.users.setdefault(v, []).append(op)
            for region in op.regions:
                self._index(region)

    def run(self) -> int:
        count, dead = 0, set()
        for block in _blocks(self.fn.body):
            members = [op for op in block.ops
                       if op.name != "stablehlo.constant" and primitive_of(op.location) == "erfc"]
            if not members:
                continue
            replaced: dict[int, hir.Op | None] = {}
            for group in _components(members, self.producer):
                new = self._collapse(group)
                if new is None:
                    continue
                root = self.producer[new.results[0]]
                replaced.update({id(op): None for op in group})
                replaced[id(root)] = new
                dead.update(v for op in group for v in op.operands)
                count += 1
            if replaced:
                block.ops = [replaced.get(id(op), op) for op in block.ops]
                block.ops = [op for op in block.ops if op is not None]
        if count:
            self._drop_unused_constants(dead)
        return count

    def _collapse(self, group: list[hir.Op]) -> hir.Op | None:
        """The ``chlo.erfc`` op standing for ``group``, or None when it is not the exact decomposition."""
        members = {id(op) for op in group}
        outside = [v for op in group for v in op.results
                   if v in self.returned or any(id(u) not in members for u in self.users.get(v, ()))]
        if len(outside) != 1:
            return None
        (result,) = outside
        visited: set[int] = set()
        found = _Canonical(self, members, visited).key_of(result)
        if found is None:
            return None
        key, x = found
        if x is None or x.type.dtype not in self.dtypes or result.type.dtype != x.type.dtype:
            return None
        for op in group:
            if id(op) not in visited and (op.name not in _SHAPE_OPS or any(
                    v.type.dtype.startswith(("float", "bfloat")) for v in op.results)):
                return None
        if not self._reads_exact(result, x) or key != reference_key(x.type.dtype):
            return None
        root = self.producer[result]
        return hir.Op(name=ERFC, operands=[x], results=[result], attrs={}, regions=[], location=root.location)

    def _reads_exact(self, value: hir.Value, x: hir.Value, scale: float = 1.0, depth: int = 0) -> bool:
        """True when every reader of ``value`` (``scale * erfc(x)``) uses it in one of the exact forms.

        The forward GELU ``k * v * erfc(c * v)`` (``x = c * v``, ``|c| >= 1/2``, ``|k| <= 1``), or its
        derivative under jax.grad, jax.jvp or a Jacobian: ``erfc(x)`` times constants and other values
        (the cotangent or tangent), through broadcasts and negations, added to the product rule's other
        term (``_product_rule_term``).
        """
        readers = self.users.get(value, [])
        if not readers or value in self.returned or depth > _MAX_STEPS:
            return False
        for op in readers:
            if op.name in _VIEW_OPS and op.operands[0] is value:
                exact = self._reads_exact(op.results[0], x, scale, depth + 1)
            elif op.name == "stablehlo.negate":
                exact = self._reads_exact(op.results[0], x, -scale, depth + 1)
            elif op.name == "stablehlo.multiply":
                other = op.operands[1] if op.operands[0] is value else op.operands[0]
                constant = self.scalar(other)
                if constant is not None:
                    exact = self._reads_exact(op.results[0], x, scale * constant, depth + 1)
                else:
                    exact = (self._times_input(other, x, scale)
                             or self._reads_exact(op.results[0], x, scale, depth + 1))
            elif op.name in ("stablehlo.add", "stablehlo.subtract"):
                other = op.operands[1] if op.operands[0] is value else op.operands[0]
                exact = self._product_rule_term(other, x)
            else:
                exact = False
            if not exact:
                return False
        return True

    def _times_input(self, other: hir.Value, x: hir.Value, scale: float) -> bool:
        """True when ``x = c * v`` and ``other = k * v`` with ``|c| >= 1/2`` and ``|scale * k| <= 1``."""
        factors = dict(self._scaled_chain(other))
        return any(v in factors and abs(c) >= _MIN_ARG_SCALE and abs(scale * factors[v]) <= _MAX_OUT_SCALE
                   for v, c in self._scaled_chain(x))

    def _product_rule_term(self, value: hir.Value, x: hir.Value) -> bool:
        """True when ``value`` is a product, through negations and broadcasts, with the factors
        ``exp(-(x * x))`` and ``v`` where ``x = c * v``, ``|c| >= 1/2``: the other term jax's product rule
        makes of ``d(v * erfc(c * v))`` (erfc's derivative is ``-2/sqrt(pi) * exp(-x * x)``)."""
        inputs = {v for v, c in self._scaled_chain(x) if abs(c) >= _MIN_ARG_SCALE}
        gaussian = factor = False
        stack, seen = [value], 0
        while stack and seen < 4 * _MAX_STEPS:
            v = stack.pop()
            op = self.producer.get(v)
            if v in inputs:
                factor = True
            elif op is not None and op.name == "stablehlo.exponential":
                gaussian |= self._is_minus_square(op.operands[0], x)
            elif op is not None and op.name in ("stablehlo.multiply", "stablehlo.negate"):
                stack.extend(op.operands)
            elif op is not None and op.name in _VIEW_OPS:
                stack.append(op.operands[0])
            seen += 1
        return gaussian and factor

    def _is_minus_square(self, value: hir.Value, x: hir.Value) -> bool:
        """True when ``value = -(x * x)``."""
        neg = self.producer.get(value)
        if neg is None or neg.name != "stablehlo.negate":
            return False
        square = self.producer.get(neg.operands[0])
        return (square is not None and square.name == "stablehlo.multiply"
                and all(u is x for u in square.operands))

    def _scaled_chain(self, value: hir.Value) -> list[tuple[hir.Value, float]]:
        """Each ``(v, c)`` with ``value = c * v`` through negations and multiplications/divisions by
        constants, nearest first."""
        return scaled_chain(value, self._scaling_op, self.scalar)

    def _scaling_op(self, value: hir.Value) -> tuple[Kind, list[hir.Value]] | None:
        op = self.producer.get(value)
        kind = _SCALING_OPS.get(op.name) if op is not None else None
        return (kind, op.operands) if op is not None and kind is not None else None

    def constant_key(self, value: hir.Value) -> Any:
        """A hashable key of a constant value (``("c", dtype, scalar)`` for a splat), or None."""
        if value in self.constant_keys:
            return self.constant_keys[value]
        key = None
        op = self.producer.get(value)
        if op is not None and op.name == "stablehlo.constant":
            key = _array_key(np.asarray(op.attrs["value"]), value.type.dtype)
        elif op is not None and op.name in _BROADCASTS:
            inner = self.constant_key(op.operands[0])
            key = inner if inner is not None and not isinstance(inner[2], bytes) else None
        elif op is not None and op.name in _SCALAR_FOLDS and value.type.rank == 0:
            inner = self.constant_key(op.operands[0])
            if inner is not None and not isinstance(inner[2], bytes):
                with np.errstate(all="ignore"):
                    folded = _SCALAR_FOLDS[op.name](np.asarray(inner[2], numpy_dtype(inner[1])))
                key = _array_key(np.asarray(folded, numpy_dtype(value.type.dtype)), value.type.dtype)
        self.constant_keys[value] = key
        return key

    def scalar(self, value: hir.Value) -> float | None:
        key = self.constant_key(value)
        return float(key[2]) if key is not None and not isinstance(key[2], bytes) else None

    def _drop_unused_constants(self, candidates: Iterable[hir.Value]) -> None:
        """Remove the constants only the replaced groups read (their big splats would become initializers)."""
        self.users = {}
        self.returned = set()
        self._index(self.fn.body)
        unused = {id(self.producer[v]) for v in candidates
                  if v in self.producer and self.producer[v].name == "stablehlo.constant"
                  and not self.users.get(v) and v not in self.returned}
        if unused:
            for block in _blocks(self.fn.body):
                block.ops = [op for op in block.ops if id(op) not in unused]


class _Canonical:
    """Keys of values computed by a group, equal exactly when the DAGs compute the same thing the same way."""

    def __init__(self, owner: _Collapser, members: set[int], visited: set[int]) -> None:
        self.owner, self.members, self.visited = owner, members, visited
        self.x: hir.Value | None = None
        self.memo: dict[hir.Value, int] = {}
        self.failed = False

    def key_of(self, value: hir.Value) -> tuple[int, hir.Value | None] | None:
        key = self._key(value)
        return None if self.failed else (key, self.x)

    def _key(self, value: hir.Value) -> int:
        if value in self.memo:
            return self.memo[value]
        key = self._compute(value)
        self.memo[value] = key
        return key

    def _compute(self, value: hir.Value) -> int:
        constant = self.owner.constant_key(value)
        op = self.owner.producer.get(value)
        if constant is not None:
            if op is not None and id(op) in self.members:
                self.visited.add(id(op))
            return _intern(constant)
        if op is None or id(op) not in self.members:
            if self.x is None:
                self.x = value
            elif value is not self.x:
                self.failed = True
            return _intern(("x",))
        self.visited.add(id(op))
        operands = tuple(self._key(v) for v in op.operands)
        return _intern((op.name, _attrs_key(op.attrs), tuple(r.type.dtype for r in op.results),
                        op.results.index(value), operands))


_INTERNED: dict[Any, int] = {}


def _intern(key: Any) -> int:
    found = _INTERNED.get(key)
    if found is None:
        found = _INTERNED[key] = len(_INTERNED)
    return found


def _array_key(arr: np.ndarray, dtype: str) -> Any:
    flat = arr.reshape(-1)
    if flat.size and (flat.size == 1 or bool(np.all(flat == flat[0]))):
        return ("c", dtype, flat[0].item())
    return ("c", dtype, arr.shape, arr.tobytes())


def _attrs_key(attrs: dict[str, Any]) -> Any:
    out = []
    for name, value in sorted(attrs.items()):
        if isinstance(value, np.ndarray):
            value = (value.shape, value.tobytes())
        elif isinstance(value, (list, dict)):
            value = repr(value)
        out.append((name, value))
    return tuple(out)


def _blocks(block: hir.Block) -> Iterable[hir.Block]:
    yield block
    for op in block.ops:
        for region in op.regions:
            yield from _blocks(region)


def _components(members: list[hir.Op], producer: dict[hir.Value, hir.Op]) -> list[list[hir.Op]]:
    """``members`` split into groups connected by the values they pass each other, in block order."""
    parent = {id(op): id(op) for op in members}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for op in members:
        for v in op.operands:
            p = producer.get(v)
            if p is not None and id(p) in parent:
                parent[find(id(p))] = find(id(op))
    groups: dict[int, list[hir.Op]] = {}
    for op in members:
        groups.setdefault(find(id(op)), []).append(op)
    return list(groups.values())


@functools.lru_cache(maxsize=None)
def reference_key(dtype: str) -> int | None:
    """The key of ``lax.erfc``'s decomposition on ``dtype`` as this jax exports it (None if it cannot)."""
    try:
        import jax
        from jax import lax

        from jaxconv.program import x64_scope
        from jaxconv.stablehlo.reader import read_module

        with x64_scope(dtype == "float64"):
            exported = jax.export.export(jax.jit(lax.erfc))(jax.ShapeDtypeStruct((2,), numpy_dtype(dtype)))
        fn = read_module(exported.mlir_module_serialized).entry()
    except Exception:  # noqa: BLE001  (no reference: nothing is collapsed)
        return None
    if len(fn.body.args) != 1 or len(fn.body.returns) != 1:
        return None
    collapser = _Collapser(fn, ())
    members = {id(op) for op in fn.body.ops if primitive_of(op.location) == "erfc"}
    found = _Canonical(collapser, members, set()).key_of(fn.body.returns[0])
    if found is None or found[1] is not fn.body.args[0]:
        return None
    return found[0]
