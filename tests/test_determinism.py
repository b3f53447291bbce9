"""The same input gives byte-identical ONNX, TFLite and StableHLO files, across runs and across processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Pytree input and output, symbolic batch, a loop, a cond, a gather and a reduction: many places where
# names, orders or constants could come out differently from one run to the next.
MODEL = textwrap.dedent("""\
    import jax
    import jax.numpy as jnp


    def f(params, x, idx):
        h = jnp.tanh(x @ params["w"] + params["b"])
        c = jax.lax.fori_loop(0, 3, lambda k, a: a * 0.5 + jnp.sin(a), h)
        picked = jnp.take(h, idx, axis=1)
        sign = jax.lax.cond(jnp.sum(x) > 0, lambda v: v + 1.0, lambda v: v - 1.0, jnp.cumsum(h, axis=-1))
        return {"loop": c, "picked": picked, "max": jnp.max(h, axis=0), "sign": sign, "count": jnp.sum(idx)}
""")
PARAMS = '{"w": "f32[4,8]", "b": "f32[8]", "extra": {"z": "f32[2]", "a": "i32[]"}}'
SPECS = [PARAMS, "f32[b,4]", "i32[3]"]
TFLITE_SPECS = [PARAMS, "f32[2,4]", "i32[3]"]


def _digests(folder: str) -> dict[str, str]:
    return {name: hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(folder)) if not name.endswith(".py")}


def _run(folder, hash_seed: str, commands: list[list[str]]) -> dict[str, str]:
    """Run CLI commands in one fresh process (its own hash seed) in ``folder``, on ``../model.py``."""
    os.makedirs(folder)
    with open(os.path.join(os.path.dirname(folder), "model.py"), "w") as f:
        f.write(MODEL)
    script = ("import sys, json; from jaxconv.cli import main\n"
              "for args in json.loads(sys.argv[1]):\n"
              "    rc = main(args)\n"
              "    if rc: sys.exit(rc)\n")
    import json

    env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=os.path.join(ROOT, "converter"))
    r = subprocess.run([sys.executable, "-c", script, json.dumps(commands)], cwd=folder, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return _digests(folder)


def test_onnx_and_stablehlo_identical_across_processes(tmp_path):
    commands = [["to-onnx", "../model.py", "--specs", *SPECS, "-o", "model.onnx", "--no-check"],
                ["to-stablehlo", "../model.py", "--specs", *SPECS, "-o", "model", "--no-check"]]
    first = _run(str(tmp_path / "one"), "1", commands)
    second = _run(str(tmp_path / "two"), "2", commands)
    assert sorted(first) == ["model.jaxexport", "model.mlir", "model.mlirbc", "model.onnx"]
    assert first == second


def test_onnx_identical_across_runs_in_one_process(tmp_path):
    from jaxconv.cli import main

    (tmp_path / "model.py").write_text(MODEL)
    paths = []
    for run in ("a", "b"):
        out = str(tmp_path / run / "model.onnx")
        assert main(["to-onnx", str(tmp_path / "model.py"), "--specs", *SPECS, "-o", out, "--no-check"]) == 0
        paths.append(out)
    assert open(paths[0], "rb").read() == open(paths[1], "rb").read()


@pytest.mark.tf
def test_tflite_identical_across_processes(tmp_path):
    pytest.importorskip("tensorflow")
    commands = [["to-tflite", "../model.py", "--specs", *TFLITE_SPECS, "-o", "model.tflite", "--no-check"]]
    assert _run(str(tmp_path / "one"), "3", commands) == _run(str(tmp_path / "two"), "4", commands)
