"""The cycle collector around a conversion: paused while the graph is built, as it was afterwards,
and no full collection of the converting process's objects at exit."""

import gc
import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.errors import UnsupportedError
from jaxconv.onnx import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fn(x):
    return jnp.tanh(x) * 2.0 + 1.0


@pytest.mark.parametrize("enabled", [True, False])
def test_lowering_leaves_the_collector_as_it_found_it(enabled):
    seen = []
    real = driver.build_model

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        driver.build_model = spy
        model = jaxconv.to_onnx(_fn, "f32[3]", check=False)
        assert gc.isenabled() is enabled
    finally:
        driver.build_model = real
        (gc.enable if was else gc.disable)()
    assert seen == [False]  # the graph was built with the collector off
    assert [n.op_type for n in model.graph.node] == ["Tanh", "Mul", "Add"]


def test_a_failed_lowering_turns_the_collector_back_on():
    def bad(*args, **kwargs):
        raise UnsupportedError("cannot convert to ONNX: made up")

    real = driver.build_model
    assert gc.isenabled()
    driver.build_model = bad
    try:
        with pytest.raises(UnsupportedError, match="made up"):
            jaxconv.to_onnx(_fn, "f32[3]", check=False)
    finally:
        driver.build_model = real
    assert gc.isenabled()


def test_the_cli_spares_the_full_collection_at_exit(tmp_path):
    """The interpreter's last collection at exit finds the process's objects frozen, not ~10^5 to walk."""
    probe = textwrap.dedent(f"""
        import gc, os, sys
        from jaxconv.cli import main
        code = main(["list-ops"])
        import numpy  # objects made after the command, as a caller's would be
        sizes = []
        def seen(phase, info):
            if phase == "start" and info["generation"] == 2:
                sizes.append(len(gc.get_objects(generation=2)))
                with open({str(tmp_path / "sizes.txt")!r}, "a") as f:
                    f.write(str(sizes[-1]) + "\\n")
        gc.callbacks.append(seen)
        sys.exit(code)
    """)
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "converter")}
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    sizes = [int(s) for s in (tmp_path / "sizes.txt").read_text().split()]
    assert sizes, "no full collection at exit"
    assert max(sizes[-1:]) < 1000, sizes


def test_numbers_unchanged_by_the_pause():
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    model = jaxconv.to_onnx(_fn, "f32[3,4]", check=False)
    import onnxruntime as ort

    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.asarray(_fn(x)), rtol=1e-6, atol=1e-6)


def test_the_cli_freezes_the_loaded_objects_while_it_converts_and_thaws_them_after(tmp_path, monkeypatch):
    from jaxconv import cli, program

    seen = []
    real = program.trace

    def spy(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(program, "trace", spy)
    src = tmp_path / "f.py"
    src.write_text("import jax.numpy as jnp\n\ndef f(x):\n    return jnp.sin(x) + 1.0\n")
    assert gc.get_freeze_count() == 0
    code = cli.main(["to-onnx", f"{src}:f", "--specs", "f32[4]", "--no-check", "-o", str(tmp_path / "f.onnx")])
    assert code == 0
    assert seen and seen[0] > 1000  # jax and the loaded module were out of the collector's walks
    assert gc.get_freeze_count() == 0  # and back in them once the command returned
    assert (tmp_path / "f.onnx").stat().st_size > 0
