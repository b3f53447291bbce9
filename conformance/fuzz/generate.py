"""Generate a random program from a seed, and its input sets (normal, edge, mixed).

The same seed always gives the same program and the same inputs: the generator uses only
``random.Random(seed)`` for structure and ``numpy.random.default_rng(seed)`` for values.
"""

from __future__ import annotations

import random
from typing import Sequence

import numpy as np

from conformance.fuzz.layers import layers
from conformance.fuzz.ops import MAKERS as OP_MAKERS
from conformance.fuzz.ops import kind_of
from conformance.fuzz.program import FLOATS, SIGNED, UNSIGNED, WIDE, FuzzProgram, Step, Value, infer_types

MAX_ELEMENTS = 2048
INPUT_SETS = ("normal", "edge", "mixed")
FAMILIES = ("mixed", "random", "model")
MODEL_EVERY = 4
# The share of edge values per input set; a model program mixes its rows, so a few edge values reach
# every output: its sets hold fewer, or every output would be NaN.
EDGE_SHARE = {"edge": 0.85, "mixed": 0.25}
MODEL_EDGE_SHARE = {"edge": 0.1, "mixed": 0.01}
# ops.py's makers, and layers.py's forms of the rewrites ops.forms does not reach (a step in five or so)
MAKERS = OP_MAKERS + ((layers, 12.0),)


class Builder:
    """The program under construction plus the choices makers need."""

    def __init__(self, rng: random.Random, x64: bool) -> None:
        self.rng = rng
        self.program = FuzzProgram(x64=x64)
        self.dtypes = [d for d in FLOATS + SIGNED + UNSIGNED + ("bool",) if x64 or d not in WIDE]

    def type(self, v: int) -> Value:
        return self.program.types[v]

    def index_dtype(self) -> str:
        return self.rng.choice(["int32", "int32", "int64" if self.program.x64 else "int32", "uint8", "int8"])

    def random_shape(self) -> tuple[int, ...]:
        rank = self.rng.choices([0, 1, 2, 3, 4], weights=[0.15, 0.3, 0.3, 0.18, 0.07])[0]
        return tuple(0 if self.rng.random() < 0.03 else self.rng.choice([1, 2, 2, 3, 4, 5]) for _ in range(rank))

    def fresh(self, shape: tuple[int, ...], dtype: str, role: str = "") -> int:
        v = self.program.new_id()
        self.program.types[v] = Value(tuple(shape), dtype, role)
        self.program.inputs.append(v)
        return v

    def pick(self, kinds: str = "fib", min_rank: int = 0, max_rank: int = 9, shape: tuple[int, ...] | None = None,
             rank: int | None = None) -> int | None:
        """An existing value (recent ones more likely) matching the filters, or None."""
        ids = [v for v, t in self.program.types.items()
               if kind_of(t.dtype) in kinds and min_rank <= len(t.shape) <= max_rank and not t.role
               and (shape is None or t.shape == shape) and (rank is None or len(t.shape) == rank)]
        if not ids:
            return None
        weights = [1.0 + 3.0 * (k / len(ids)) for k in range(len(ids))]
        return self.rng.choices(ids, weights=weights)[0]

    def partner(self, v: int, scalar_ok: bool) -> int:
        """A second operand of ``v``'s type: an existing value of the same shape, a scalar, or a new input."""
        t = self.type(v)
        r = self.rng.random()
        if r < 0.45:
            same = [u for u, s in self.program.types.items()
                    if u != v and s.dtype == t.dtype and s.shape == t.shape and not s.role]
            if same:
                return self.rng.choice(same)
        if scalar_ok and r < 0.6:
            return self.fresh((), t.dtype)
        return self.fresh(t.shape, t.dtype)


def generate(seed: int, min_ops: int = 2, max_ops: int = 8, family: str = "mixed",
             kinds: Sequence[str] | None = None, symbolic: bool = False) -> FuzzProgram:
    """A random program of ``min_ops``..``max_ops`` steps; deterministic for ``seed`` and ``family``.

    ``family`` mixed: one seed in four (``seed % 4 == 3``) gives a model-shaped program
    (``models.generate_model``, of one of ``kinds``: default every kind), the others a random one;
    ``model``: always a model; ``random``: never. ``symbolic``: a model's batch is a symbolic size.
    """
    if family == "model" or (family == "mixed" and seed % MODEL_EVERY == MODEL_EVERY - 1):
        from conformance.fuzz.models import generate_model

        return generate_model(seed, kinds, symbolic)
    rng = random.Random(seed)
    b = Builder(rng, x64=rng.random() < 0.25)
    for _ in range(rng.choice([1, 1, 2])):
        b.fresh(b.random_shape(), rng.choice(b.dtypes))
    want = rng.randint(min_ops, max_ops)
    makers = [m for m, _ in MAKERS]
    weights = [w for _, w in MAKERS]
    tries = 0
    while len(b.program.steps) < want and tries < want * 15:
        tries += 1
        saved = b.program.copy()
        made = rng.choices(makers, weights=weights)[0](b)
        if made is None:
            b.program = saved
            continue
        op, args, expr = made
        step = Step(op, tuple(args), expr, b.program.new_id())
        candidate = b.program.copy()
        candidate.steps.append(step)
        candidate.outputs = [step.out]
        typed = _typed_last(candidate)
        if typed is None or typed.size > MAX_ELEMENTS or any(b.program.types[i].size > MAX_ELEMENTS for i in b.program.inputs):
            b.program = saved
            continue
        b.program.steps.append(step)
        b.program.types[step.out] = typed
    if not b.program.steps:
        x = b.program.inputs[0]
        op, expr = ("not", "~{0}") if b.type(x).dtype == "bool" else ("neg", "-{0}")
        b.program.steps.append(Step(op, (x,), expr, b.program.new_id()))
        b.program.types[b.program.steps[-1].out] = b.type(x)
    b.program.outputs = _sinks(b.program, rng)
    return b.program


def _typed_last(program: FuzzProgram) -> Value | None:
    """Type of the last step, inferring only that step (earlier ones are already typed)."""
    last = program.steps[-1]
    single = FuzzProgram(inputs=list(last.args), steps=[last], outputs=[last.out],
                         types={a: program.types[a] for a in last.args}, x64=program.x64)
    single.inputs = list(dict.fromkeys(last.args))
    typed = infer_types(single)
    return None if typed is None else typed.types[last.out]


def _sinks(program: FuzzProgram, rng: random.Random) -> list[int]:
    used = {a for s in program.steps for a in s.args}
    sinks = [s.out for s in program.steps if s.out not in used]
    last = program.steps[-1].out
    if last not in sinks:
        sinks.append(last)
    if len(sinks) > 3:
        sinks = sorted(rng.sample(sinks[:-1], 2)) + [last]
    return sinks


def specials(dtype: str) -> list:
    """Edge values for ``dtype``: signed zeros, infinities, NaN, extremes, subnormals; integer extremes."""
    from conformance.case import np_dtype

    dt = np_dtype(dtype)
    if dtype == "bool":
        return [False, True]
    if dtype in SIGNED or dtype in UNSIGNED:
        info = np.iinfo(dt)
        vals = [info.min, info.max, 0, 1, 2, info.max - 1, info.max // 2 + 1]
        if dtype in SIGNED:
            vals += [-1, -2, info.min + 1]
        return vals
    import ml_dtypes

    info = ml_dtypes.finfo(dt)
    tiny, big = float(info.tiny), float(info.max)
    sub = float(info.smallest_subnormal)
    return [0.0, -0.0, np.inf, -np.inf, np.nan, big, -big, tiny, -tiny, sub, -sub, 1.0, -1.0, 0.5, -2.5,
            float(info.eps), big / 4, np.sqrt(big), -np.sqrt(big), 1 / np.sqrt(big)]


def input_values(program: FuzzProgram, kind: str, seed: int) -> list[np.ndarray]:
    """One array per input of ``program`` for input set ``kind`` (normal, edge or mixed)."""
    rng = np.random.default_rng([seed, INPUT_SETS.index(kind) if kind in INPUT_SETS else 9])
    shares = MODEL_EDGE_SHARE if program.family == "model" else EDGE_SHARE
    return [make_array(program.types[i], kind, rng, shares) for i in program.inputs]


def make_array(t: Value, kind: str, rng: np.random.Generator, shares: dict[str, float] = EDGE_SHARE) -> np.ndarray:
    from conformance.case import np_dtype

    dt = np_dtype(t.dtype)
    shape = t.shape
    if t.role:
        role, extent = t.role.split(":")
        return _indices(role, int(extent), t.dtype, shape, kind, rng).astype(dt)
    if t.dtype == "bool":
        return rng.random(shape) < 0.5
    if t.dtype in FLOATS:
        normal = rng.standard_normal(shape) * rng.choice([1.0, 3.0])
    elif t.dtype in SIGNED:
        normal = rng.integers(-8, 9, size=shape)
    else:
        normal = rng.integers(0, 17, size=shape)
    if kind == "normal":
        return np.asarray(normal).astype(dt)
    pool = np.array(specials(t.dtype), dtype=object)
    special = pool[rng.integers(0, len(pool), size=shape)] if shape else pool[rng.integers(0, len(pool))]
    mask = rng.random(shape) < shares.get(kind, 0.25)
    values = np.where(mask, special, np.asarray(normal).astype(object))
    return _cast(values, dt, t.dtype)


def _cast(values: np.ndarray, dt: np.dtype, dtype: str) -> np.ndarray:
    if dtype in FLOATS:
        return np.asarray(values, dtype=np.float64).astype(dt)
    return np.array([int(v) for v in np.ravel(values)], dtype=dt).reshape(np.shape(values))


def _indices(role: str, extent: int, dtype: str, shape: tuple[int, ...], kind: str, rng: np.random.Generator) -> np.ndarray:
    """Index values: mostly in range (negative ones too), with out-of-range and extreme ones in edge sets."""
    from conformance.case import np_dtype

    info = np.iinfo(np_dtype(dtype))
    n = int(np.prod(shape)) if shape else 1
    if role == "unique":
        pool = list(rng.permutation(max(extent, 1))[: extent]) + [extent + k for k in range(n)]
        if kind != "normal":
            pool = [extent + 5, *pool]
        if n > len(pool):
            pool += [extent + 10 + k for k in range(n - len(pool))]
        chosen = np.array(pool[:n], dtype=np.int64)
        chosen = np.minimum(chosen, info.max)
        if kind == "edge" and n > 1:
            chosen[-1] = info.max
        return rng.permutation(chosen).reshape(shape)
    low = max(-extent, int(info.min))
    values = rng.integers(low, max(extent, 1), size=n)
    if kind != "normal":
        extremes = np.array([v for v in (info.min, info.max, extent, -extent - 1, -1, 0) if info.min <= v <= info.max])
        mask = rng.random(n) < (0.7 if kind == "edge" else 0.25)
        values = np.where(mask, extremes[rng.integers(0, len(extremes), size=n)], values)
    return values.reshape(shape)

