"""TFLite and SavedModel routes: xla (jax2tf), tf-ops (plain TF ops from jaxconv's ONNX) and auto.

Every artifact here is checked against jax.jit (the API's check, or numbers compared directly).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv import api
from jaxconv.cli import main
from jaxconv.errors import UnsupportedError, UsageError

pytestmark = pytest.mark.tf
pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")


def sorts(x):
    return jnp.sort(x * 2, axis=1)  # stablehlo.sort: the xla route's converter does not legalize it


def bf16_mix(x, y):
    return jnp.tanh(x * y) + x


def plain(x):
    return x * 3.0 + 1.0


def test_auto_falls_back_to_tf_ops_and_records_it():
    from jaxconv.runtimes.tflite import TFLiteRunner, read_route

    reports: list = []
    data = api.to_tflite(sorts, "f32[3,5]", report_to=reports)
    assert read_route(data) == "tf-ops" and reports[0].ok
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    np.testing.assert_array_equal(TFLiteRunner(data).run([x])[0], np.sort(x * 2, axis=1))


def test_auto_keeps_xla_when_it_works():
    from jaxconv.runtimes.tflite import read_route

    assert read_route(api.to_tflite(plain, "f32[4]")) == "xla"


def test_forced_routes():
    from jaxconv.runtimes.tflite import read_route

    assert read_route(api.to_tflite(plain, "f32[4]", route="tf-ops")) == "tf-ops"
    with pytest.raises(UnsupportedError, match=r"TFLite cannot convert: stablehlo\.sort x1"):
        api.to_tflite(sorts, "f32[3,5]", route="xla")
    with pytest.raises(UsageError, match="unknown TFLite route 'fast'"):
        api.to_tflite(plain, "f32[4]", route="fast")


def test_bfloat16_through_tf_ops_is_checked(tmp_path):
    reports: list = []
    api.to_tflite(
        bf16_mix, "bf16[6]", "bf16[6]", path=str(tmp_path / "m.tflite"), route="tf-ops", report_to=reports
    )
    assert reports[0].ok and {row.dtype for row in reports[0].rows} == {"bfloat16"}


def f64_add(x):
    return x + 1.0


def test_float64_is_a_hard_limit_with_a_clear_message():
    with pytest.raises(UnsupportedError, match=r"TFLite has no float64 kernels: float64 in x, output_0"):
        api.to_tflite(f64_add, "f64[3]", route="tf-ops")


def cho_solve(a, b):
    import jax.scipy.linalg as sl

    return sl.cho_solve(sl.cho_factor(a @ a.T + 3 * jnp.eye(3)), b)


def inverse(a):
    return jnp.linalg.inv(a @ a.T + 3 * jnp.eye(3))


@pytest.mark.parametrize("fn, specs", [(cho_solve, ("f32[3,3]", "f32[3]")), (inverse, ("f32[3,3]",))])
def test_saved_model_of_lapack_calls_runs_as_tf_ops(fn, specs, tmp_path):
    from jaxconv.tf.saved_model import read_route

    reports: list = []
    path = api.to_saved_model(fn, *specs, path=str(tmp_path / "sm"), report_to=reports)  # auto
    assert read_route(path) == "tf-ops" and reports[0].ok, reports[0].table()


def test_cli_route_and_inspect(tmp_path, capsys):
    src = tmp_path / "m.py"
    src.write_text("import jax.numpy as jnp\n\ndef f(x):\n    return jnp.sort(x)\n")
    lite, sm = str(tmp_path / "m.tflite"), str(tmp_path / "sm")
    assert main(["to-tflite", str(src), "--specs", "f32[5]", "-o", lite]) == 0
    assert main(["to-saved-model", str(src), "--specs", "f32[5]", "-o", sm, "--route", "tf-ops"]) == 0
    capsys.readouterr()
    assert main(["inspect", lite]) == 0
    assert "route: tf-ops" in capsys.readouterr().out
    assert main(["inspect", sm]) == 0
    out = capsys.readouterr().out
    assert "route: tf-ops" in out and "XlaCallModule" not in out and "plain TF ops" in out


def test_no_check_auto_skips_a_check_over_the_memory_limit(monkeypatch):
    """--no-check with auto: a model too large to check is converted (xla first) without judging it."""
    from jaxconv.runtimes.tflite import read_route

    monkeypatch.setenv("JAXCONV_CHECK_MAX_BYTES", "16")
    assert read_route(api.to_tflite(plain, "f32[64]", check=False)) == "xla"
    with pytest.raises(UsageError, match="JAXCONV_CHECK_MAX_BYTES"):
        api.to_tflite(plain, "f32[64]")


def test_report_counts_cells_per_route():
    from conformance.report import route_table
    from conformance.results import CellResult

    cells = [
        CellResult("a", "tflite", "cpu", status="pass", route="xla"),
        CellResult("b", "tflite", "cpu", status="pass", route="tf-ops"),
        CellResult("c", "tflite", "cpu", status="xfail", route="tf-ops"),
        CellResult("d", "tflite", "cpu", status="xfail"),
        CellResult("e", "onnx", "cpu", status="pass"),
    ]
    rows = [line for line in route_table(cells) if line.startswith("| tflite")]
    assert rows == [
        "| tflite | cpu | none | 0 | 0 | 1 | 0 |",
        "| tflite | cpu | tf-ops | 1 | 0 | 1 | 0 |",
        "| tflite | cpu | xla | 1 | 0 | 0 | 0 |",
    ]
