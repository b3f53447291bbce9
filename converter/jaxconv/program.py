"""Program: a user function traced once with jax.export, shared by every target."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Sequence

from jaxconv.errors import TraceError, UsageError
from jaxconv.signature import Signature, input_infos, output_infos
from jaxconv.symbolic_bounds import (
    COMPARISONS,
    Assumed,
    comparison,
    implied,
    inconclusive_line,
    jax_constraint,
    unfiltered_tracebacks,
)
from jaxconv.symbolic_bounds import hint as symbolic_hint


@dataclass
class Program:
    """A traced function.

    Attributes:
        fn: the user's callable.
        name: function name (used for artifact names).
        arg_specs: one ShapeDtypeStruct pytree per positional argument.
        exported: the ``jax.export.Exported`` (CPU unless other platforms were asked for).
        signature: flat input/output names shared by every target.
        source_path: the user's file, for error messages.
        constraints: symbolic-dimension constraints used.
        keep_module: False when the caller converts this Program once and uses it no more (the CLI):
            ``to_onnx`` then sets ``exported`` to None once the ONNX model is built, freeing the
            serialized module, which holds a copy of every closed-over weight, before the check.
        x64: the specs hold a 64-bit dtype, so JAX ran (and must run again, for jax2tf or the check)
            with ``jax_enable_x64``; ``jax_scope()`` switches it on for that code only.
        constants: closed-over arrays hoisted out of the module (``trace(..., hoist_constants=True)``):
            the module takes them as its first flat arguments, before the function's inputs. They are
            the caller's own buffers, not copies; the ONNX lowering makes them initializers.
        assumed: constraints jaxconv added (also in ``constraints``) because the function only traces
            under them (``symbolic_bounds``): ``min(128, s)`` broadcast against ``s`` (a 128-position
            buffer sliced to the sequence) needs ``s <= 128``, where JAX itself fails on a larger size.
    """

    fn: Callable[..., Any]
    name: str
    arg_specs: list[Any]
    exported: Any
    signature: Signature
    source_path: str | None = None
    constraints: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ("cpu",)
    keep_module: bool = True
    x64: bool = False
    constants: tuple[Any, ...] = ()
    assumed: tuple[Assumed, ...] = ()

    def jax_scope(self) -> ContextManager[Any]:
        """A context in which JAX keeps this program's 64-bit dtypes (see ``x64_scope``)."""
        return x64_scope(self.x64)

    @property
    def kept_inputs(self) -> tuple[int, ...]:
        """Indices of flat inputs the exported module still takes (jax.export drops unused ones)."""
        n = len(self.constants)
        return tuple(sorted(i - n for i in self.exported.module_kept_var_idx if i >= n))

    @property
    def kept_constants(self) -> tuple[int, ...]:
        """Indices into ``constants`` of those the exported module takes, in argument order."""
        n = len(self.constants)
        return tuple(sorted(i for i in self.exported.module_kept_var_idx if i < n))


def x64_scope(on: bool) -> ContextManager[Any]:
    """``jax.enable_x64(True)`` when ``on`` (JAX narrows 64-bit dtypes to 32 bits otherwise), else nothing.

    JAX's global flag is left as the caller set it: a program with 32-bit specs runs under the
    caller's setting, one with 64-bit specs under x64 for the scope only.
    """
    if not on:
        return contextlib.nullcontext()
    import jax

    return jax.enable_x64(True)


def trace(fn: Callable[..., Any], specs: Sequence[Any], *, name: str | None = None,
          param_names: Sequence[str] | None = None, constraints: Sequence[str] = (),
          platforms: Sequence[str] = ("cpu",), source_path: str | None = None,
          hoist_constants: bool = False) -> Program:
    """Export ``fn`` with jax.export for the given specs.

    Args:
        specs: spec strings, parsed specs, or ShapeDtypeStruct pytrees; one per positional argument.
        constraints: jax.export's symbolic constraints, plus strict comparisons (``s > 64``), which the
            program keeps as jax.export takes them (``s >= 65``; ``symbolic_bounds.jax_constraint``).
        hoist_constants: export closed-over arrays of ``HOIST_BYTES`` and more as module arguments
            (``Program.constants``) instead of embedding them: jax.export copies embedded constants
            into the module and again into its serialized bytes. Only the ONNX target reads such a
            program; the StableHLO, SavedModel and TFLite targets need the constants embedded.

    Raises:
        SpecError: a spec does not parse.
        UsageError: the number of specs does not match the function.
        TraceError: tracing or exporting fails; the message names the user's file:line.
    """
    from jaxconv.specs import needs_x64, parse_spec, to_shape_dtype_structs

    parsed = [parse_spec(s) if isinstance(s, str) else s for s in specs]
    x64 = needs_x64(parsed)
    _check_constraints(constraints)
    constraints = tuple(jax_constraint(c) for c in constraints)
    assumed: list[Assumed] = []
    first_error: TraceError | None = None
    with x64_scope(x64):
        while True:
            given = (*constraints, *(a.constraint for a in assumed))
            arg_specs = to_shape_dtype_structs(parsed, given)
            try:
                with unfiltered_tracebacks():
                    program = _export(fn, arg_specs, x64, name=name, param_names=param_names, constraints=given,
                                      platforms=platforms, source_path=source_path, hoist=hoist_constants)
            except TraceError as e:
                first_error = first_error or e
                bound = implied(e.__cause__)
                if bound is None:
                    raise  # nothing to assume (after an assumption: the next problem in the function)
                if bound.constraint in given or len(assumed) >= _MAX_ASSUMED or not _parses(bound.constraint):
                    raise first_error  # the assumption did not help: the first error, with its hint
                assumed.append(bound)
                continue
            program.assumed = tuple(assumed)
            return program


def _export(fn: Callable[..., Any], arg_specs: list[Any], x64: bool, *, name: str | None,
            param_names: Sequence[str] | None, constraints: Sequence[str], platforms: Sequence[str],
            source_path: str | None, hoist: bool = False) -> Program:
    """``trace`` once the specs are ShapeDtypeStructs, inside the x64 scope they need."""
    import jax
    from jax import export

    from jaxconv.key_inputs import as_key_data, key_data_outputs, key_impl
    from jaxconv.loading import positional_params, required_positional
    from jaxconv.specs import check_spec_count

    fn_name = name or getattr(fn, "__name__", None) or "fn"
    if param_names is None:
        param_names = positional_params(fn)
    if param_names is not None:
        check_spec_count(len(arg_specs), param_names, required_positional(fn), fn_name)
        param_names = tuple(param_names)[:len(arg_specs)]
    fn, arg_specs = as_key_data(fn, arg_specs)

    def exported_of(fn: Callable[..., Any]) -> tuple[Any, tuple[Any, ...]]:
        jitted = fn if hasattr(fn, "lower") and hasattr(fn, "trace") else jax.jit(fn)
        try:
            if hoist:
                return _export_hoisted(jitted, arg_specs, tuple(platforms))
            return export.export(jitted, platforms=tuple(platforms))(*arg_specs), ()
        except Exception as e:
            from jaxconv.callbacks import callback_message, callbacks_of

            found = callbacks_of(jitted, arg_specs, source_path)  # export fails on callbacks in several ways
            if found:
                raise TraceError(callback_message(fn_name, found)) from e
            raise TraceError(_trace_message(fn_name, e, source_path)) from e

    exported, constants = exported_of(fn)
    if any(key_impl(aval) is not None for aval in exported.out_avals):  # (rare: traced again)
        fn = key_data_outputs(fn)
        exported, constants = exported_of(fn)
    if not exported.out_avals:
        raise TraceError(_no_outputs_message(fn, fn_name, exported.out_tree))
    signature = Signature(input_infos(arg_specs, param_names), output_infos(exported.out_avals, exported.out_tree))
    return Program(fn=fn, name=fn_name, arg_specs=list(arg_specs), exported=exported, signature=signature,
                   source_path=source_path, constraints=tuple(constraints), platforms=tuple(platforms),
                   x64=x64, constants=constants)


HOIST_BYTES = 1 << 16
"""Closed-over arrays of this many bytes and more become module arguments with ``hoist_constants``;
smaller ones stay embedded, where the lowering may fold them."""

_HOISTED_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "bool", "int8", "int16", "int32",
                             "int64", "uint8", "uint16", "uint32", "uint64"})


def _export_hoisted(jitted: Any, arg_specs: list[Any],
                    platforms: tuple[str, ...]) -> tuple[Any, tuple[Any, ...]]:
    """jax.export of ``jitted`` with its big closed-over constants as leading arguments.

    The function is traced once to a jaxpr; its constants are the caller's buffers (numpy views or
    jax arrays). The exported function evaluates that jaxpr with the big constants passed in, so the
    module holds their shapes only. Returns the Exported and the hoisted constants in argument order.
    """
    import jax
    import numpy as np
    from jax import export
    from jax.core import eval_jaxpr

    traced = jitted.trace(*arg_specs)
    closed = traced.jaxpr
    big = [i for i, c in enumerate(closed.consts) if _hoistable(c)]
    hoisted = tuple(closed.consts[i] for i in big)
    out_tree = traced.out_tree

    def hoisted_fn(consts, *args):
        values = list(closed.consts)
        for i, c in zip(big, consts):
            values[i] = c
        flat = jax.tree_util.tree_leaves(args)
        return jax.tree_util.tree_unflatten(out_tree, eval_jaxpr(closed.jaxpr, values, *flat))

    hoisted_fn.__name__ = getattr(jitted, "__name__", "fn")
    specs = [jax.ShapeDtypeStruct(np.shape(c), c.dtype, weak_type=_weak_type(c)) for c in hoisted]
    exported = export.export(jax.jit(hoisted_fn), platforms=platforms)(specs, *arg_specs)
    return exported, tuple(np.asarray(c) for c in hoisted)


def _hoistable(c: Any) -> bool:
    dtype = getattr(c, "dtype", None)
    return (dtype is not None and getattr(dtype, "name", "") in _HOISTED_DTYPES
            and int(getattr(c, "nbytes", 0)) >= HOIST_BYTES)


def _weak_type(c: Any) -> bool:
    aval = getattr(c, "aval", None)
    return bool(getattr(aval, "weak_type", False))


def _trace_message(fn_name: str, e: BaseException, source_path: str | None) -> str:
    import traceback

    where = ""
    frames = traceback.extract_tb(e.__traceback__)
    if source_path is not None:
        mine = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(source_path)]
        if mine:
            where = f" at {mine[-1].filename}:{mine[-1].lineno}"
    first = _first_line(str(e))
    hint = ""
    if "ShapeDtypeStruct" in first:  # jit(static_argnums=...) passed a spec through as a Python value
        hint = (" (a static argument of jax.jit received a spec: jaxconv passes every argument as an array; "
                "fix static values with functools.partial or a wrapper function)")
    elif "custom calls whose targets have no compatibility guarantees" in first:
        hint = _refused_custom_calls(str(e))
    else:
        hint = symbolic_hint(inconclusive_line(e) or first)
    return f"tracing {fn_name} failed{where}: {type(e).__name__}: {first}{hint}"


_WRAPPER_LINES = re.compile(r"Exception encountered when calling .*|.*:")
"""A first line that only introduces the error after it: Keras wraps every layer's error as "Exception
encountered when calling X.call().", then a blank line and the real one; a line ending in a colon."""


def _first_line(message: str) -> str:
    """The first line of ``message``; when it only wraps the error below it (``_WRAPPER_LINES``), followed by
    the first line that says something (``... when calling X.call(): In arange with ...``). Terminal
    colours (Keras makes the cause bold) are dropped."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", message).splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    if _WRAPPER_LINES.fullmatch(first) is None:
        return first
    cause = next((line for line in lines[1:] if _WRAPPER_LINES.fullmatch(line) is None), None)
    return first if cause is None else f"{first.rstrip('.:')}: {cause}"


def _refused_custom_calls(message: str) -> str:
    """The custom calls jax.export names in ``message`` (its examples), each with what computes it: jax.export
    refuses them for every target (e.g. ``jax.scipy.linalg.qr(pivoting=True)``'s ``lapack_sgeqp3_ffi``)."""
    from jaxconv.onnx.registry import unsupported_target_reason

    targets = sorted(set(re.findall(r"stablehlo\.custom_call @([\w.]+)", message)))
    if not targets:
        return ""
    named = "; ".join(f"@{t}: {unsupported_target_reason(t)}" for t in targets)
    return f" ({named}; jax.export refuses {'it' if len(targets) == 1 else 'them'} for every target)"


_MAX_ASSUMED = 4


def _parses(constraint: str) -> bool:
    from jaxconv.errors import SpecError

    try:
        _check_constraints((constraint,))
    except SpecError:
        return False
    return True


def _check_constraints(constraints: Sequence[str]) -> None:
    """Raise SpecError naming the first ``--constraint`` that does not make one comparison, or that jax.export
    cannot parse (a strict one as ``jax_constraint`` writes it)."""
    from jax import export

    from jaxconv.errors import SpecError

    for c in constraints:
        if comparison(c) is None:
            raise SpecError(f"bad --constraint {c!r}: it must compare two integer expressions with one of "
                            f"{COMPARISONS}")
        try:
            export.SymbolicScope((jax_constraint(c),))
        except Exception as e:  # jax raises ValueError with its own text
            text = str(e).strip().splitlines()
            raise SpecError(f"bad --constraint {c!r}: {text[0] if text else type(e).__name__}") from e


def _no_outputs_message(fn: Callable[..., Any], fn_name: str, out_tree: Any) -> str:
    """Say that ``fn`` returned no arrays, what it returned, and where it is defined."""
    import jax

    try:
        returned = repr(jax.tree_util.tree_unflatten(out_tree, []))
    except Exception:  # an unusual tree: show its structure
        returned = str(out_tree)
    if len(returned) > 60:
        returned = returned[:57] + "..."
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return (f"function {fn_name}{where} returns no arrays (it returned {returned}); "
            "a converted function must return at least one array")


def require_specs(specs: Sequence[Any]) -> None:
    if not specs:
        raise UsageError("no --specs given: pass one spec per positional argument, e.g. --specs f32[b,784]")
