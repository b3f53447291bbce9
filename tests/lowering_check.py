"""Test helper: lower a JAX function to ONNX and compare ONNX Runtime with jax.jit on given inputs.

Op comparisons are rows (``conformance.case.op_row``, run by ``tests/ops/test_rows.py``, which also
checks that every registered lowering is exercised); this helper serves the plain tests that look
at more than the numbers (error messages, graph structure, metadata).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np


def _spec_of(a: Any) -> Any:
    import jax

    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), a)


def x64_for(*args: Any) -> Any:
    """A context in which JAX keeps the 64-bit dtypes among ``args`` (jaxconv scopes x64; it leaves no global on)."""
    from jaxconv.program import x64_scope
    from jaxconv.specs import needs_x64

    return x64_scope(needs_x64([_spec_of(a) for a in args]))


def record_ops(program: Any) -> set[str]:
    """Names of every StableHLO op the program's ONNX lowering walks."""
    from jaxconv.onnx.preflight import reachable_ops
    from jaxconv.stablehlo.reader import read_module

    module = read_module(program.exported.mlir_module_serialized)
    return {op.name for op in reachable_ops(module, module.entry())}


def assert_onnx_matches_jax(fn: Callable[..., Any], *args: Any, specs: Sequence[Any] | None = None,
                            opset: int | None = None, rtol: float | None = None, atol: float | None = None,
                            inputs_for_run: Sequence[Sequence[Any]] | None = None):
    """Export ``fn`` (specs default to the args' shapes), lower to ONNX, check with onnx.checker,
    run in ONNX Runtime on ``args`` (and on each extra flat input list in ``inputs_for_run``),
    and assert every output equals jax.jit(fn) within tolerance. Returns the ONNX model.
    """
    import jax

    from jaxconv.compare import compare
    from jaxconv.onnx.convert import program_to_onnx, validate
    from jaxconv.program import trace
    from jaxconv.references import reference_outputs
    from jaxconv.runtimes.onnxrt import OnnxRunner

    arg_specs = list(specs) if specs is not None else [_spec_of(a) for a in args]
    program = trace(fn, arg_specs)
    model = program_to_onnx(program, opset)
    validate(model)
    runner = OnnxRunner(model.SerializeToString())
    runs = [jax.tree_util.tree_leaves(list(args))] + [list(r) for r in (inputs_for_run or [])]
    for flat in runs:
        flat = [np.asarray(a) for a in flat]
        with program.jax_scope():
            expected = reference_outputs(fn, program.arg_specs, flat)
        actual = runner.run(flat)
        assert len(actual) == len(expected)
        for i, (e, a) in enumerate(zip(expected, actual)):
            result = compare(f"output_{i}", e, np.asarray(a), rtol, atol)
            assert result.ok, (f"output_{i} differs from jax.jit: max abs {result.max_abs:.3g}, max rel "
                               f"{result.max_rel:.3g} {result.note}\nexpected={e!r}\nactual={np.asarray(a)!r}")
    return model


def onnx_op_types(model: Any) -> list[str]:
    """Op types of the model's top-level nodes (for structural assertions)."""
    return [n.op_type for n in model.graph.node]


def assert_same_floats(got: np.ndarray, want: Any, rtol: float, atol: float) -> None:
    """``got`` has ``want``'s dtype and shape, its NaNs where ``want`` has them, values within the
    tolerances, and the sign of every zero of ``want``."""
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    exact_zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[exact_zero]), np.signbit(want[exact_zero]))


def convert_and_run(fn: Callable[..., Any], *inputs: np.ndarray, opset: int | None = None,
                    specs: Sequence[Any] | None = None, bodies: bool = False) -> tuple[Any, list[np.ndarray]]:
    """(op-type histogram of ``fn``'s ONNX, converted unchecked, its ONNX Runtime outputs on ``inputs``);
    ``bodies``: the histogram counts the nodes of If branches and loop bodies too."""
    import jax

    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    specs = specs or [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs]
    model = jaxconv.to_onnx(fn, *specs, opset=opset, check=False)
    return op_counts(model.graph, bodies), OnnxRunner(model.SerializeToString()).run(list(inputs))


def with_edge_values(x: np.ndarray) -> np.ndarray:
    """A copy of ``x`` (at least 34 elements) with NaN, +inf, -inf and -0.0 at four places."""
    x = x.copy()
    flat = x.reshape(-1)
    flat[[1, 7, 20, 33]] = [np.nan, np.inf, -np.inf, -0.0]
    return x


def op_counts(graph: Any, bodies: bool = True) -> Any:
    """Op types of an ONNX ``GraphProto``'s nodes, counted (with ``bodies``, those of its subgraphs too)."""
    import collections

    from onnx_graphs import op_types

    return collections.Counter(op_types(graph) if bodies else [n.op_type for n in graph.node])


def without_rule(rule: Any) -> Callable[..., tuple[Any, list[np.ndarray]]]:
    """``plain(monkeypatch, fn, *inputs, **kwargs)``: ``convert_and_run`` with ``rule`` (a module of
    ``jaxconv.onnx.rewrites``) turned off, to compare a graph with the rule against one without it."""
    def plain(monkeypatch: Any, fn: Callable[..., Any], *inputs: np.ndarray, **kwargs: Any) -> tuple[Any, list[np.ndarray]]:
        with monkeypatch.context() as patch:
            patch.setattr(rule, "rewrite", lambda *args, **kw: 0)
            return convert_and_run(fn, *inputs, **kwargs)
    return plain


def with_without_and_jax(plain: Callable[..., tuple[Any, list[np.ndarray]]], monkeypatch: Any,
                         fn: Callable[..., Any], x: np.ndarray) -> tuple[Any, list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """(op histogram with bodies, outputs with a rule, outputs without it (``plain`` from ``without_rule``),
    jax.jit's outputs) for ``fn`` on ``x``, with 64-bit dtypes kept where ``x`` is float64."""
    import jax

    with jax.enable_x64(x.dtype == np.float64):
        ops, got = convert_and_run(fn, x, bodies=True)
        _, without = plain(monkeypatch, fn, x)
        want = [np.asarray(jax.jit(fn)(x))]
    return ops, got, without, want


def assert_same_bits(got: Sequence[Any], want: Sequence[Any], nan_signs: bool = True) -> None:
    """Every output bit for bit the same (NaN payloads and zero signs included; with ``nan_signs=False``,
    NaNs in the same places, of either sign: ``(-b) * s`` and ``b * (-s)`` differ only there)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        if not nan_signs and g.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            g, w = np.where(np.isnan(g), np.nan, g), np.where(np.isnan(w), np.nan, w)
        bits = np.dtype(f"u{g.dtype.itemsize}")
        np.testing.assert_array_equal(g.view(bits), w.view(bits))


def sequence_inputs(shape: Sequence[int]) -> list[np.ndarray]:
    """float32 inputs for a scan over axis 0 of ``shape`` (at least [4, 2, 3]): normal values; the same
    with NaN, +inf and -inf at three steps and -0.0 in the first; all -0.0."""
    rng = np.random.default_rng(3)
    plain = rng.standard_normal(shape).astype(np.float32)
    edges = plain.copy()
    edges[1, 0, 0] = np.nan
    edges[2, 1, 1] = np.inf
    edges[3, 0, 2] = -np.inf
    edges[0] = -0.0
    return [plain, edges, np.full(shape, -0.0, np.float32)]


def without_unit_muls(monkeypatch: Any) -> None:
    """Turn off every rule that drops a float ``Mul`` by ones (``unit_scale``, and ``symbolic``'s own:
    ``_unit_mul`` and the Mul read through in ``_broadcast_source``), to compare with the graph that keeps it."""
    from jaxconv.onnx.rewrites import _match, symbolic, unit_scale

    through = symbolic._broadcast_source

    def expands_only(value: Any, keep_unit_muls: bool = False) -> Any:
        node = _match.producer(value)
        return None if node is not None and node.op_type == "Mul" else through(value, keep_unit_muls)

    monkeypatch.setattr(unit_scale, "rewrite", lambda graph: 0)
    monkeypatch.setattr(symbolic, "_unit_mul", lambda node, shapes: False)
    monkeypatch.setattr(symbolic, "_broadcast_source", expands_only)
