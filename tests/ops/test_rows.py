"""The op test rows (``conformance.case.op_row`` in ``conformance/cases/op_*.py``), one pytest case per
row and opset, run through the conformance suite's own cell runner on the ONNX target, and the
lowering coverage: every registered lowering is exercised by a row (or named in ``PLAIN_TESTS``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from conformance.case import Case, load_all, load_op_rows
from conformance.targets import ops_of, run_cell

ROWS = load_op_rows()
ONNX_ROWS = [c for c in ROWS.values() if c.runs_on("onnx")]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The StableHLO ops each row lowered in this process (filled by test_row, read by the coverage test).
LOWERED: dict[str, list[str]] = {}

# Registered lowerings that no row exercises, each with the plain test that compares it (a file, or
# file::function): ops a row cannot express (a hand-written module, a quantized type, a JAX lowering
# swapped in while the test runs). A row that starts covering one makes its entry stale (the test says so).
PLAIN_TESTS: dict[str, str] = {
    "chlo.erfc": "tests/test_erfc_gelu.py::test_exact_gelu_float32_is_one_gelu_node",  # made from jax's inline erfc
    "stablehlo.cholesky": "tests/ops/test_linalg.py::test_cholesky",
    "stablehlo.dynamic_pad": "tests/ops/test_dynamic_pad.py::test_dynamic_pad_edges_from_operands",
    "stablehlo.get_tuple_element": "tests/ops/test_tuple.py::test_tuples_of_tuples_convert",
    "stablehlo.if": "tests/ops/test_control.py::test_stablehlo_if",
    "stablehlo.triangular_solve": "tests/ops/test_linalg.py::test_triangular_solve",
    "stablehlo.tuple": "tests/ops/test_tuple.py::test_tuples_of_tuples_convert",
    "stablehlo.uniform_dequantize": "tests/test_quantized.py",
    "stablehlo.uniform_quantize": "tests/test_quantized.py",
}


def _ids(case: Case, opset: int | None) -> str:
    return case.name if opset is None else f"{case.name}@opset{opset}"


PARAMS = [pytest.param(c, o, id=_ids(c, o), marks=[pytest.mark.slow] if c.slow else [])
          for c in ONNX_ROWS for o in c.opsets]


@pytest.mark.parametrize("case,opset", PARAMS)
def test_row(case: Case, opset: int | None) -> None:
    result = run_cell(case, "onnx", "cpu", with_ops=True, opset=opset)
    LOWERED[case.name] = list(result.ops or [])
    assert result.ok, f"{case.name} ({case.expect}) stopped at {result.stage}: {result.error}"


def test_rows_are_not_in_the_conformance_suite() -> None:
    """Op rows are pytest's; the suite (and its committed report) holds the ``case`` declarations only."""
    suite = load_all()
    assert ROWS and suite
    assert not set(ROWS) & set(suite)
    assert all(not c.suite for c in ROWS.values()) and all(c.suite for c in suite.values())


def _row_ops(case: Case) -> list[str]:
    """The StableHLO ops of ``case`` (from its run in this process, else traced now)."""
    if case.name not in LOWERED:
        import jax

        from conformance.targets import _trace

        with jax.enable_x64(case.x64):
            LOWERED[case.name] = ops_of(_trace(case, "cpu"))
    return LOWERED[case.name]


def _plain_test_exists(where: str) -> bool:
    path, _, name = where.partition("::")
    full = os.path.join(ROOT, path)
    return os.path.exists(full) and (not name or f"def {name}(" in open(full).read())


def test_every_registered_lowering_has_a_row() -> None:
    """Runs after the rows (module order); alone, it traces every row (about a minute)."""
    from jaxconv.onnx.registry import all_lowerings

    seen: set[str] = set()
    for case in ONNX_ROWS:
        seen.update(_row_ops(case))
    registered = set(all_lowerings())
    missing = sorted(registered - seen - set(PLAIN_TESTS))
    assert not missing, "registered lowerings no op row exercises: " + ", ".join(missing)
    stale = sorted(op for op in PLAIN_TESTS if op in seen or op not in registered)
    assert not stale, "PLAIN_TESTS entries a row now covers (or no longer registered): " + ", ".join(stale)
    absent = sorted(w for w in set(PLAIN_TESTS.values()) if not _plain_test_exists(w))
    assert not absent, "PLAIN_TESTS names tests that do not exist: " + ", ".join(absent)


def test_exact_expectation_reads_every_element() -> None:
    from conformance.expect import mismatch

    e = np.array([0.0, -0.0, np.nan, 1.5, 0.0], np.float32)
    assert mismatch(e, e.copy(), "exact", None, True, "out") is None
    assert "1 mismatches, first at 1" in mismatch(e, np.array([0.0, 0.0, np.nan, 1.5, 0.0], np.float32), "exact",
                                                  None, True, "out")
    assert mismatch(e, np.array([0.0, 0.0, np.nan, 1.5, 0.0], np.float32), "exact", None, False, "out") is None
    assert "first at 2" in mismatch(e, np.array([0.0, -0.0, 1.0, 1.5, 0.0], np.float32), "exact", None, True, "out")
    assert "first at 3" in mismatch(e, np.array([0.0, -0.0, np.nan, np.nextafter(np.float32(1.5), 2), 0.0], np.float32),
                                    "exact", None, True, "out")
    tiny = np.float32(1e-40)  # XLA flushes this result to +0; ONNX Runtime keeps it
    assert mismatch(e, np.array([0.0, -0.0, np.nan, 1.5, tiny], np.float32), "exact", None, True, "out") is None
    assert "dtype" in mismatch(e, e.astype(np.float64), "exact", None, True, "out")
    assert "shape" in mismatch(e, e[:4], "exact", None, True, "out")
    neg_nan = np.array([np.nan, -0.0], np.float32)
    neg_nan[0] = -neg_nan[0]
    assert mismatch(np.array([np.nan, -0.0], np.float32), neg_nan, "exact", None, True, "out") is None
    assert "bytes: 1 mismatches, first at 0" in mismatch(np.array([np.nan, -0.0], np.float32), neg_nan, "bits", None,
                                                          True, "out")
    assert mismatch(neg_nan, neg_nan.copy(), "bits", None, True, "out") is None
    assert "first at 0" in mismatch(np.array([3, 4], np.int8), np.array([2, 4], np.int8), "allclose", (1.0, 1.0), True, "o")


def test_allclose_expectation_keeps_nan_places_and_zero_signs() -> None:
    from conformance.expect import mismatch

    e = np.array([1.0, np.nan, 0.0], np.float32)
    assert mismatch(e, np.array([1.0001, np.nan, 0.0], np.float32), "allclose", (1e-3, 0.0), True, "out") is None
    assert mismatch(e, np.array([1.01, np.nan, 0.0], np.float32), "allclose", (1e-3, 0.0), True, "out") is not None
    assert mismatch(e, np.array([1.0, 2.0, 0.0], np.float32), "allclose", (1e-3, 0.0), True, "out") is not None
    assert "sign of zero" in mismatch(e, np.array([1.0, np.nan, -0.0], np.float32), "allclose", (1e-3, 0.0), True, "out")
    assert mismatch(e, np.array([1.0, np.nan, -0.0], np.float32), "allclose", (1e-3, 0.0), False, "out") is None


def test_the_cell_runner_applies_a_rows_expectation() -> None:
    """``exact`` and ``allclose`` rows are judged by ``conformance.expect``, ``close`` ones by verify.compare."""
    from conformance.case import Case
    from conformance.targets import _compare_outputs

    e = [np.array([0.0, 1.0], np.float32)]
    signed = [np.array([-0.0, 1.0], np.float32)]
    off = [np.array([0.0, 1.0 + 1e-6], np.float32)]

    def row(**kw) -> Case:
        return Case(name="probe", fn=abs, args=(), family="abs", examples=((e[0],),), targets=("onnx",), suite=False, **kw)

    assert _compare_outputs(row(expect="exact"), e, e)[3] == []
    assert "first at 0" in _compare_outputs(row(expect="exact"), e, signed)[3][0]
    assert _compare_outputs(row(expect="exact", signed_zeros=False), e, signed)[3] == []
    assert "first at 1" in _compare_outputs(row(expect="exact"), e, off)[3][0]
    assert _compare_outputs(row(expect="allclose", tol={"*": (1e-5, 0.0)}), e, off)[3] == []
    assert _compare_outputs(row(expect="allclose", tol={"*": (1e-8, 0.0)}), e, off)[3] != []
    assert _compare_outputs(row(), e, off)[0] == []  # close: the default float32 tolerance
    assert _compare_outputs(row(), e, [np.array([0.0, 2.0], np.float32)])[0] != []


def test_op_row_checks_its_expectation() -> None:
    from conformance.case import op_row

    with pytest.raises(ValueError, match="expect must be one of"):
        op_row("probe.bad", abs, np.zeros(2, np.float32), expect="bitwise")
    with pytest.raises(ValueError, match="needs tol"):
        op_row("probe.bad", abs, np.zeros(2, np.float32), expect="allclose")
