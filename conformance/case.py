"""How a case is declared: a function, its inputs, the targets, how outputs must agree with jax.jit.

One row type serves the conformance suite and the op tests (``tests/ops/test_rows.py``). A case is
declared once and expands over targets x devices (x opsets for ONNX). Its inputs are either seeded
numpy generators (``Arg``) whose shapes may use symbolic names (``("b", 4)``): the exported
artifact is then shape-polymorphic and every target runs at each size in ``Case.sizes``; or
example inputs (``examples``: concrete values, one tuple per run, edge values written out).

Rows declared with ``case`` belong to the conformance suite (``suite=True``: the report counts
them); rows declared with ``op_row`` are op tests that pytest runs (ONNX only by default).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

SHORT = {
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "bool",
    "complex64": "c64", "complex128": "c128",
}
LONG = {v: k for k, v in SHORT.items()}
WIDE = frozenset({"float64", "int64", "uint64", "complex128"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def np_dtype(name: str) -> np.dtype:
    """numpy dtype for a long or short dtype name (bfloat16 via ml_dtypes)."""
    name = LONG.get(name, name)
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


@dataclass(frozen=True)
class Arg:
    """A seeded generator of one array argument.

    Attributes:
        dtype: dtype name (``float32`` or ``f32``).
        shape: ints and symbolic names.
        kind: ``normal`` (floats), ``uniform`` in [low, high), ``int`` in [low, high],
            ``positive`` (|normal| + 0.1), ``bool``, ``values`` (cycle ``values`` over the shape),
            ``perm`` (a permutation of range(last dim) along the last axis).
        low, high: bounds for ``uniform``/``int``.
        values: for ``values``.
    """

    dtype: str
    shape: tuple[int | str, ...]
    kind: str = "default"
    low: float = -8
    high: float = 8
    values: tuple[Any, ...] = ()

    @property
    def long_dtype(self) -> str:
        return LONG.get(self.dtype, self.dtype)

    def spec(self) -> str:
        return f"{SHORT[self.long_dtype]}[{','.join(str(d) for d in self.shape)}]"

    def symbols(self) -> set[str]:
        out: set[str] = set()
        for d in self.shape:
            if isinstance(d, str):
                out.update(_NAME.findall(d))
        return out

    def concrete(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else int(eval(d, {"__builtins__": {}}, dict(sizes)))  # noqa: S307
                     for d in self.shape)

    def generate(self, rng: np.random.Generator, sizes: Mapping[str, int]) -> np.ndarray:
        shape = self.concrete(sizes)
        dt = np_dtype(self.long_dtype)
        kind = self.kind
        if kind == "default":
            kind = "bool" if dt == np.bool_ else ("int" if dt.kind in "iu" else "normal")
        if kind == "bool":
            return rng.random(shape) < 0.5
        if kind == "values":
            n = int(np.prod(shape))
            flat = np.resize(np.array(self.values, dtype=np.float64 if dt.kind == "f" or dt.name == "bfloat16" else None), n)
            return flat.reshape(shape).astype(dt)
        if kind == "perm":
            base = np.broadcast_to(np.arange(shape[-1]), shape).copy()
            return rng.permuted(base, axis=-1).astype(dt)
        if kind == "int":
            lo = max(self.low, 0) if dt.kind == "u" else self.low
            return rng.integers(int(lo), int(self.high) + 1, size=shape).astype(dt)
        if kind == "uniform":
            return rng.uniform(self.low, self.high, size=shape).astype(np.float32).astype(dt)
        if kind == "positive":
            return (np.abs(rng.standard_normal(shape)) + 0.1).astype(np.float32).astype(dt)
        if dt.kind == "c":  # both parts drawn
            return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
        return rng.standard_normal(shape).astype(np.float32).astype(dt)


@dataclass(frozen=True)
class Tree:
    """A pytree argument (model parameters): ``make(rng)`` returns numpy leaves, static shapes."""

    make: Callable[[np.random.Generator], Any]


@dataclass(frozen=True)
class Case:
    """One conformance case.

    Attributes:
        name: unique, dotted (``op.add.f32``, ``model.mlp``).
        fn: the function under test (jitted by the runner).
        args: one ``Arg``/``Tree`` per positional parameter.
        family: the StableHLO op family (or ``model``) it exercises.
        tags: free-form labels (``dtype``, ``symbolic``, ``edge``, ``model``, ``slow``).
        tol: per-dtype ``(rtol, atol)`` overrides of the default tolerances.
        sizes: values of the symbolic dimensions; each dict is one run.
        constraints: jax.export symbolic constraints.
        examples: concrete inputs instead of ``args``, one tuple (of arrays or pytrees) per run.
        arg_specs: specs to export with (``jax.ShapeDtypeStruct``, symbolic dims allowed); by default
            those of ``args`` or of the first example.
        expect: how outputs must agree with jax.jit: ``close`` (``jaxconv.compare.compare`` within
            ``tol``), ``exact`` (bit for bit: values, NaN places, signed zeros; an XLA-flushed
            subnormal result may be a subnormal of the same sign), ``bits`` (the bytes identical: NaN
            signs too) or ``allclose`` (``tol["*"]`` element by element, NaN places equal, signed
            zeros equal).
        signed_zeros: for ``exact``/``allclose``: the sign of a zero result must match.
        targets: the targets the row runs on (empty: every target); ``("onnx",)`` for ONNX-only.
        opsets: ONNX opsets the row runs at (``None``: the converter's default).
        suite: part of the conformance suite (and its report); else an op test that pytest runs.
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Arg | Tree, ...]
    family: str
    tags: frozenset[str] = frozenset()
    tol: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    sizes: tuple[Mapping[str, int], ...] = ()
    constraints: tuple[str, ...] = ()
    examples: tuple[tuple[Any, ...], ...] = ()
    arg_specs: tuple[Any, ...] | None = None
    expect: str = "close"
    signed_zeros: bool = True
    targets: tuple[str, ...] = ()
    opsets: tuple[int | None, ...] = (None,)
    suite: bool = True

    @property
    def symbolic(self) -> bool:
        return any(isinstance(a, Arg) and a.symbols() for a in self.args)

    @property
    def x64(self) -> bool:
        """Whether the case needs ``jax.enable_x64`` (64-bit inputs, specs or the ``x64`` tag)."""
        import jax

        if "x64" in self.tags or any(isinstance(a, Arg) and a.long_dtype in WIDE for a in self.args):
            return True
        leaves = jax.tree_util.tree_leaves([list(self.arg_specs or ()), [list(e) for e in self.examples]])
        return any(_x64_leaf(x) for x in leaves)

    def runs_on(self, target: str) -> bool:
        return not self.targets or target in self.targets

    @property
    def slow(self) -> bool:
        return "slow" in self.tags

    def size_sets(self) -> tuple[Mapping[str, int], ...]:
        if self.examples:
            return tuple({"example": i} for i in range(len(self.examples)))
        if not self.symbolic:
            return ({},)
        if self.sizes:
            return self.sizes
        names = sorted(set().union(*(a.symbols() for a in self.args if isinstance(a, Arg))))
        return ({n: 3 for n in names}, {n: 5 for n in names})

    def seed(self) -> int:
        return int.from_bytes(hashlib.sha256(self.name.encode()).digest()[:4], "little")

    def inputs(self, sizes: Mapping[str, int]) -> list[Any]:
        """Argument values (numpy arrays or pytrees of them) for one size set; deterministic."""
        if self.examples:
            return list(self.examples[sizes["example"]])
        rng = np.random.default_rng(self.seed())
        return [a.make(rng) if isinstance(a, Tree) else a.generate(rng, sizes) for a in self.args]

    def specs(self) -> list[Any]:
        """Specs for jaxconv.program.trace: strings for ``Arg``, ShapeDtypeStruct pytrees for ``Tree``."""
        import jax

        def spec_of(x: Any) -> Any:
            return jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype), x)

        if self.arg_specs is not None:
            return list(self.arg_specs)
        if self.examples:
            return [spec_of(x) for x in self.examples[0]]
        out: list[Any] = []
        rng = np.random.default_rng(self.seed())
        for a in self.args:
            if isinstance(a, Tree):
                out.append(spec_of(a.make(rng)))
            else:
                out.append(a.spec())
        return out


def _x64_leaf(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and np.dtype(dtype).name in WIDE


CASES: dict[str, Case] = {}


def register(case: Case) -> Case:
    """Add ``case`` to the suite; a duplicate name is a declaration error."""
    if case.name in CASES:
        raise ValueError(f"conformance case {case.name!r} declared twice")
    CASES[case.name] = case
    return case


def case(name: str, fn: Callable[..., Any], *args: Arg | Tree, family: str, tags: Iterable[str] = (),
         tol: Mapping[str, tuple[float, float]] | None = None, sizes: Sequence[Mapping[str, int]] = (),
         constraints: Sequence[str] = ()) -> Case:
    """Declare and register one case (see ``Case``)."""
    tagset = set(tags)
    if any(isinstance(a, Arg) and a.symbols() for a in args):
        tagset.add("symbolic")
    return register(Case(name=name, fn=fn, args=tuple(args), family=family, tags=frozenset(tagset),
                         tol=dict(tol or {}), sizes=tuple(sizes), constraints=tuple(constraints)))


EXPECTS = ("close", "exact", "bits", "allclose")


def op_row(name: str, fn: Callable[..., Any], *example: Any, runs: Sequence[Sequence[Any]] = (),
           specs: Sequence[Any] | None = None, expect: str = "close", signed_zeros: bool = True,
           tol: Mapping[str, tuple[float | None, float | None]] | tuple[float | None, float | None] | None = None,
           opsets: Sequence[int | None] = (None,), targets: Sequence[str] = ("onnx",), family: str = "",
           tags: Iterable[str] = (), suite: bool = False) -> Case:
    """Declare and register one op test row: ``fn`` on the concrete inputs ``example`` (and on each
    input tuple in ``runs``), compared with jax.jit as ``expect`` says, at each of ``opsets``.

    ``tol`` is ``(rtol, atol)`` for every output dtype, or a per-dtype mapping; ``specs`` exports with
    other specs than the example's (symbolic dimensions). See ``Case`` for the fields.
    """
    if expect not in EXPECTS:
        raise ValueError(f"op row {name!r}: expect must be one of {EXPECTS}, not {expect!r}")
    tols = {"*": tuple(tol)} if isinstance(tol, tuple) else dict(tol or {})
    if expect == "allclose" and "*" not in tols:
        raise ValueError(f"op row {name!r}: expect='allclose' needs tol=(rtol, atol)")
    return register(Case(name=name, fn=fn, args=(), family=family or name.split(".")[0], tags=frozenset(tags),
                         tol=tols, examples=(tuple(example),) + tuple(tuple(r) for r in runs),
                         arg_specs=None if specs is None else tuple(specs), expect=expect,
                         signed_zeros=signed_zeros, targets=tuple(targets), opsets=tuple(opsets), suite=suite))


def arg(spec: str, kind: str = "default", **kw: Any) -> Arg:
    """``arg("f32[3,4]")`` / ``arg("i32[b]", "int", low=0, high=5)``: an ``Arg`` from a spec string."""
    m = re.fullmatch(r"\s*([a-z0-9]+)\[(.*)\]\s*", spec)
    if not m:
        raise ValueError(f"bad case spec {spec!r}")
    dims: list[int | str] = []
    for d in filter(None, (p.strip() for p in m.group(2).split(","))):
        dims.append(int(d) if d.isdigit() else d)
    return Arg(LONG.get(m.group(1), m.group(1)), tuple(dims), kind, **kw)


def load_all() -> dict[str, Case]:
    """Import every case module (idempotent) and return the conformance suite by name."""
    import conformance.cases  # noqa: F401

    return {name: c for name, c in CASES.items() if c.suite}


def load_op_rows() -> dict[str, Case]:
    """Import every case module (idempotent) and return the op test rows (not in the suite) by name."""
    import conformance.cases  # noqa: F401

    return {name: c for name, c in CASES.items() if not c.suite}
