"""``--no-check`` with ``--route auto``: nothing is compared with jax.jit, and the output says so.

auto then converts ``xla``, runs it once in LiteRT on random inputs, and falls back to ``tf-ops``
only when conversion or that run fails.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv import api
from jaxconv.cli import main
from jaxconv.errors import ArtifactError

pytestmark = pytest.mark.tf
pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")


def exp_nan(x):
    return jnp.exp(x)  # TFLite's builtin exp gives 0 for NaN (the xla route); XLA keeps NaN


def sorts(x):
    return jnp.sort(x)  # the xla route's converter does not legalize stablehlo.sort


def empty(x):
    return jnp.exp(x) + 1.0


@pytest.fixture
def no_jax_jit(monkeypatch):
    """Fail the test if anything compares with jax.jit."""

    def refuse(*args, **kwargs):
        raise AssertionError("jax.jit was run although nothing is to be compared")

    monkeypatch.setattr("jaxconv.api.check_runner", refuse)
    monkeypatch.setattr("jaxconv.verify.check_runner", refuse)
    monkeypatch.setattr("jaxconv.verify.reference_outputs", refuse)


def test_with_the_check_auto_leaves_an_xla_model_that_differs():
    from jaxconv.runtimes.tflite import TFLiteRunner, read_route

    reports: list = []
    data = api.to_tflite(exp_nan, "f32[8]", report_to=reports)
    assert read_route(data) == "tf-ops" and reports[0].ok  # the edge check found exp(NaN) differing on xla
    x = np.array([np.nan, 0.0, 1.0, -1.0, 2.0, -2.0, np.inf, -np.inf], np.float32)
    np.testing.assert_allclose(TFLiteRunner(data).run([x])[0], np.asarray(jax.jit(exp_nan)(x)), rtol=1e-6)


def test_no_check_auto_compares_nothing_and_keeps_the_xla_model_that_runs(no_jax_jit):
    from jaxconv.runtimes.tflite import read_route

    assert read_route(api.to_tflite(exp_nan, "f32[8]", check=False)) == "xla"


def test_no_check_auto_falls_back_when_xla_does_not_convert(no_jax_jit):
    from jaxconv.runtimes.tflite import read_route

    assert read_route(api.to_tflite(sorts, "f32[5]", check=False)) == "tf-ops"


def test_no_check_auto_runs_the_model_once(monkeypatch, no_jax_jit):
    """The one run is real: a model LiteRT cannot run fails on both routes, naming why."""
    with pytest.raises(
        ArtifactError, match=r"Invalid tensor size.*the tf-ops route: LiteRT failed while running"
    ):
        api.to_tflite(empty, jax.ShapeDtypeStruct((0, 3), np.float32), check=False)
    ran: list = []
    from jaxconv.runtimes import tflite as runtime

    real = runtime.TFLiteRunner.run
    monkeypatch.setattr(
        runtime.TFLiteRunner, "run", lambda self, inputs: ran.append(inputs) or real(self, inputs)
    )
    api.to_tflite(exp_nan, "f32[8]", check=False)
    assert len(ran) == 1 and ran[0][0].shape == (8,)
    api.to_tflite(exp_nan, "f32[8]", check=False, route="xla")  # a forced route is not run at all
    assert len(ran) == 1


def test_cli_no_check_says_the_result_was_not_compared(tmp_path, capsys, no_jax_jit):
    src = tmp_path / "m.py"
    src.write_text("import jax.numpy as jnp\n\ndef f(x):\n    return jnp.sort(x) + 1\n")
    out = str(tmp_path / "m.tflite")
    assert main(["to-tflite", str(src), "--specs", "f32[5]", "-o", out, "--no-check"]) == 0
    text = capsys.readouterr().out
    assert "route tf-ops (auto: it converted and ran once in LiteRT on random inputs)" in text
    assert "not compared with jax.jit (--no-check)" in text
    assert (
        main(["to-tflite", str(src), "--specs", "f32[5]", "-o", out, "--no-check", "--route", "tf-ops"]) == 0
    )
    text = capsys.readouterr().out
    assert "route tf-ops; not compared with jax.jit (--no-check)" in text
