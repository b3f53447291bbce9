"""A fuzz program: a straight-line list of JAX expressions over numbered values.

Values are numbered; some are inputs (the function's parameters, in order), the others are
the results of steps. Each step is one Python expression over earlier values (``{0}``,
``{1}`` name its arguments), so a program renders to readable source, runs under
``jax.jit``, and can be edited by the minimiser: a step can be replaced by an input that
holds the value jax computed for it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

SHORT = {
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "bool",
}
FLOATS = ("float16", "bfloat16", "float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
WIDE = frozenset({"float64", "int64", "uint64"})
BATCH = "b"  # the symbolic batch size's name in a symbolic-batch program's specs
WEIGHTS = '''
def _w(seed, shape, dtype, scale=1.0, edge=0.0):
    """A closed-over weight: seeded normal values times scale, a share edge of them edge values."""
    import ml_dtypes

    r = np.random.default_rng(seed)
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    a = r.standard_normal(shape) * scale
    if edge:
        info = ml_dtypes.finfo(dt)
        pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, float(info.max), -float(info.max), float(info.tiny),
                         float(info.smallest_subnormal), -float(info.smallest_subnormal), 1e30, -1e-30])
        a = np.where(r.random(shape) < edge, pool[r.integers(0, len(pool), shape)], a)
    with np.errstate(over="ignore"):  # 1e30 in a half float is inf: one more edge value
        return a.astype(dt)
'''
PRELUDE = "import jax\nimport jax.numpy as jnp\nimport numpy as np\nfrom jax import lax\n" + WEIGHTS
# the weights with their subnormal values flushed to zeros of the same sign, as XLA on the CPU reads them
FLUSHED_WEIGHTS = '''
_w_kept = _w


def _w(seed, shape, dtype, scale=1.0, edge=0.0):
    import ml_dtypes

    a = _w_kept(seed, shape, dtype, scale, edge)
    wide = a.astype(np.float64)
    sub = (wide != 0) & (np.abs(wide) < float(ml_dtypes.finfo(a.dtype).tiny))
    return np.where(sub, np.copysign(0.0, wide), wide).astype(a.dtype)
'''


@dataclass(frozen=True)
class Value:
    """Shape and dtype of one value; ``role`` tells the input generator what an input is for.

    Roles: ``""`` (data), ``index:N`` (indices into an axis of extent N), ``unique:N``
    (distinct indices, for scatter-set). ``batch_axis``: the axis an input of a symbolic-batch program
    holds its batch on (exported as the symbolic size ``b``, shared by every such input).
    """

    shape: tuple[int, ...]
    dtype: str
    role: str = ""
    batch_axis: int | None = None

    @property
    def spec(self) -> str:
        dims = [BATCH if k == self.batch_axis else str(d) for k, d in enumerate(self.shape)]
        return f"{SHORT[self.dtype]}[{','.join(dims)}]"

    def with_batch(self, size: int) -> "Value":
        """This input's type at batch ``size`` (itself where it has no batch axis)."""
        if self.batch_axis is None:
            return self
        shape = list(self.shape)
        shape[self.batch_axis] = size
        return dataclasses.replace(self, shape=tuple(shape))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


@dataclass(frozen=True)
class Step:
    """``v{out} = expr.format(*(v{a} for a in args))``; ``op`` names it for classification."""

    op: str
    args: tuple[int, ...]
    expr: str
    out: int


@dataclass
class FuzzProgram:
    """Inputs (value ids, in parameter order), steps, outputs; ``types`` holds every value's type."""

    inputs: list[int] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    types: dict[int, Value] = field(default_factory=dict)
    x64: bool = False
    family: str = ""  # "model" for conformance.fuzz.models' programs
    opset: int | None = None  # the ONNX opset to convert at (None: jaxconv's default)
    flushed_weights: bool = False  # the closed-over weights' subnormals read as zeros (FLUSHED_WEIGHTS)

    def copy(self) -> "FuzzProgram":
        return FuzzProgram(list(self.inputs), list(self.steps), list(self.outputs), dict(self.types), self.x64,
                           self.family, self.opset, self.flushed_weights)

    def new_id(self) -> int:
        return max(self.types, default=-1) + 1

    def source(self, name: str = "f") -> str:
        """The program as a Python function definition."""
        lines = [f"def {name}({', '.join(f'v{i}' for i in self.inputs)}):"]
        for s in self.steps:
            lines.append(f"    v{s.out} = " + s.expr.format(*(f"v{a}" for a in s.args)))
        outs = ", ".join(f"v{o}" for o in self.outputs)
        lines.append(f"    return ({outs},)")
        return "\n".join(lines) + "\n"

    def function(self) -> Callable[..., Any]:
        """The program as a callable (the source executed with jax, jnp, lax and np in scope)."""
        scope: dict[str, Any] = {}
        prelude = PRELUDE + (FLUSHED_WEIGHTS if self.flushed_weights else "")
        exec(compile(prelude + self.source(), "<fuzz-program>", "exec"), scope)  # noqa: S102
        return scope["f"]

    def specs(self) -> list[Any]:
        """The inputs' ShapeDtypeStructs; a symbolic-batch program's batch axes are the symbolic size ``b``."""
        import jax

        from conformance.case import np_dtype

        batch = jax.export.symbolic_shape(BATCH)[0] if self.batch_size() is not None else None

        def shape(t: Value) -> tuple[Any, ...]:
            return tuple(batch if k == t.batch_axis else d for k, d in enumerate(t.shape))

        return [jax.ShapeDtypeStruct(shape(self.types[i]), np_dtype(self.types[i].dtype)) for i in self.inputs]

    def batch_size(self) -> int | None:
        """The batch a symbolic-batch program's types are drawn at; None for a static program."""
        sizes = {self.types[i].shape[self.types[i].batch_axis] for i in self.inputs
                 if self.types[i].batch_axis is not None}
        return sizes.pop() if sizes else None

    def at_batch(self, size: int) -> "FuzzProgram":
        """The program with its inputs at batch ``size``, its steps' types inferred again."""
        out = self.copy()
        for i in self.inputs:
            out.types[i] = self.types[i].with_batch(size)
        return infer_types(out) or out

    def ops(self) -> list[str]:
        return [s.op for s in self.steps]

    def uses_x64(self) -> bool:
        return self.x64 or any(v.dtype in WIDE for v in self.types.values())

    def prune(self) -> "FuzzProgram":
        """Drop steps no output depends on (inputs stay: they are the function's parameters)."""
        live = set(self.outputs)
        kept: list[Step] = []
        for s in reversed(self.steps):
            if s.out in live:
                kept.append(s)
                live.update(s.args)
        out = self.copy()
        out.steps = list(reversed(kept))
        return out

    def drop_unused_inputs(self) -> tuple["FuzzProgram", list[int]]:
        """Remove inputs nothing reads; returns the program and the positions kept."""
        used = set(self.outputs)
        for s in self.steps:
            used.update(s.args)
        keep = [k for k, i in enumerate(self.inputs) if i in used]
        out = self.copy()
        out.inputs = [self.inputs[k] for k in keep]
        return out, keep


def infer_types(program: FuzzProgram) -> FuzzProgram | None:
    """Recompute every step's type with jax.eval_shape; None when the program no longer traces."""
    import jax

    with jax.enable_x64(program.uses_x64()):
        return _infer_types(program)


def _infer_types(program: FuzzProgram) -> FuzzProgram | None:
    import jax

    from conformance.case import np_dtype

    types = {i: program.types[i] for i in program.inputs}
    for s in program.steps:
        scope: dict[str, Any] = {}
        params = [f"a{k}" for k in range(len(s.args))]
        src = PRELUDE + f"def g({', '.join(params)}):\n    return " + s.expr.format(*params) + "\n"
        try:
            exec(compile(src, "<fuzz-step>", "exec"), scope)  # noqa: S102
            args = [jax.ShapeDtypeStruct(types[a].shape, np_dtype(types[a].dtype)) for a in s.args]
            out = jax.eval_shape(scope["g"], *args)
        except Exception:  # noqa: BLE001  (a step that does not trace makes the candidate invalid)
            return None
        if not hasattr(out, "shape") or out.dtype.name not in SHORT:
            return None
        types[s.out] = Value(tuple(int(d) for d in out.shape), out.dtype.name)
    result = dataclasses.replace(program.copy(), types=types)
    return result
