"""A catalogue of the ways a user gets a file, a spec, a dtype, a function or an output wrong.

Each case runs the CLI and expects one line on stderr naming the problem, the exit code of its
error class (errors.py), no traceback, and nothing written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jaxconv.cli import main
from jaxconv.errors import ArtifactError, FileLoadError, ModuleParseError, SpecError, TraceError, UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SOURCES = {
    "ok.py": "def f(x):\n    return x + 1\n",
    "returns_none.py": "def f(x):\n    y = x * 2\n",
    "returns_empty.py": "def f(x):\n    return ()\n",
    "returns_nones.py": "def f(x):\n    return {'a': None, 'b': [None]}\n",
    "returns_str.py": "def f(x):\n    return 'done'\n",
    "python_if.py": "def f(x):\n    if x > 0:\n        return x\n    return -x\n",
    "to_numpy.py": "import numpy as np\n\n\ndef f(x):\n    return np.asarray(x) + 1\n",
    "kw_only.py": "def f(x, *, scale):\n    return x * scale\n",
    "matmul.py": "def f(a, b):\n    return a @ b\n",
    "debug_print.py": "import jax\n\n\ndef f(x):\n    y = x * 2\n    jax.debug.print('y={y}', y=y)\n    return y\n",
    "debug_callback.py": "import jax\n\n\ndef f(x):\n    jax.debug.callback(print, x)\n    return x + 1\n",
    "pure_callback.py": textwrap.dedent("""\
        import jax
        import numpy as np


        def f(x):
            return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        """),
    "io_callback.py": textwrap.dedent("""\
        import jax
        from jax.experimental import io_callback


        def f(x):
            y = jax.numpy.cos(x)
            return io_callback(lambda a: a, jax.ShapeDtypeStruct(x.shape, x.dtype), y)
        """),
    "nested_callback.py": textwrap.dedent("""\
        import jax


        def f(x):
            def body(i, a):
                jax.debug.print('i={i}', i=i)
                return a + 1
            return jax.lax.fori_loop(0, 3, body, x)
        """),
    "static_jit.py": textwrap.dedent("""\
        from functools import partial

        import jax


        @partial(jax.jit, static_argnums=1)
        def f(x, n):
            return x * n
        """),
    "traced_size.py": "import jax.numpy as jnp\n\n\ndef f(x, n):\n    return x + jnp.zeros(n)\n",
    "add.py": "def f(x, y):\n    return x + y\n",
    "reshape.py": "def f(x):\n    return x.reshape(2, -1)\n",
    "exits.py": "import sys\nsys.exit(3)\n",
    "bad_import.py": "import not_a_module_xyz\n\n\ndef f(x):\n    return x\n",
    "raises.py": "x = 1\nraise ValueError('boom')\n",
    "no_function.py": "W = 3\n",
    "two_functions.py": "def f(x):\n    return x\n\n\ndef g(x):\n    return x\n",
    "syntax.py": "def f(x):\n    return (x\n",
}

MLIR = {
    "unknown_op.mlir": ("func.func @main(%arg0: tensor<3xf32>) -> tensor<3xf32> {\n"
                        "  %0 = stablehlo.add %arg0, %arg0 : tensor<3xf32>\n"
                        "  %1 = stablehlo.bogus %0 : tensor<3xf32>\n"
                        "  return %1 : tensor<3xf32>\n}\n"),
    "type_error.mlir": ("func.func @main(%arg0: tensor<3xf32>) -> tensor<3xf32> {\n"
                        "  %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n"
                        "  return %0 : tensor<3xf32>\n}\n"),
    "garbage.mlir": "this is not MLIR (((\n",
}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in SOURCES.items():
        (tmp_path / name).write_text(text)
    for name, text in MLIR.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "binary.py").write_bytes(b"\x00\xff\xfe")
    (tmp_path / "bytecode.mlirbc").write_bytes(b"ML\xefRnot really bytecode")
    np.savez(tmp_path / "wrong_shape.npz", x=np.zeros(4, np.float32))
    np.savez(tmp_path / "wrong_dtype.npz", x=np.zeros(3, np.int64))
    np.savez(tmp_path / "wrong_name.npz", y=np.zeros(3, np.float32))
    np.savez(tmp_path / "extra_names.npz", x=np.zeros(3, np.float32), z=np.zeros(3), w=np.zeros(1))
    np.savez(tmp_path / "extra_positional.npz", np.zeros(3, np.float32), np.zeros(3, np.float32))
    (tmp_path / "not_npz.npz").write_text("hello")
    return tmp_path


def _run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _expect(folder, capsys, args, error, *words):
    before = sorted(os.listdir(folder))
    code, _, err = _run(args, capsys)
    assert code == error.exit_code, err
    assert err.startswith("jaxconv: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err
    for w in words:
        assert w in err, err
    assert sorted(os.listdir(folder)) == before  # nothing written, no staging left


def _onnx(src, *specs, extra=()):
    return ["to-onnx", src, "--specs", *(specs or ("f32[3]",)), "-o", "out.onnx", *extra]


# ---------------------------------------------------------------- functions

@pytest.mark.parametrize("src, returned", [("returns_none.py", "None"), ("returns_empty.py", "()"),
                                           ("returns_nones.py", "{'a': None, 'b': [None]}")])
def test_function_returning_no_arrays(folder, capsys, src, returned):
    _expect(folder, capsys, _onnx(src), TraceError, f"function f ({folder / src}:1) returns no arrays",
            f"it returned {returned}")


@pytest.mark.parametrize("src, words", [
    ("returns_str.py", ("returned a value of type <class 'str'>",)),
    ("python_if.py", ("python_if.py:2", "truth value")),
    ("to_numpy.py", ("to_numpy.py:5", "TracerArrayConversionError")),
    ("kw_only.py", ("keyword-only argument: 'scale'",)),
])
def test_function_that_does_not_trace(folder, capsys, src, words):
    _expect(folder, capsys, _onnx(src), TraceError, "tracing f failed", *words)


@pytest.mark.parametrize("src, specs, words", [
    ("matmul.py", ("f32[3,4]", "f32[5,6]"), ("matmul.py:2", "contracting dimensions")),
    ("add.py", ("f32[b]", "f32[c]"), ("add.py:2", "incompatible shapes for broadcasting: (b,), (c,)")),
    ("reshape.py", ("f32[b]",), ("reshape.py:2", "Cannot divide evenly")),
    ("traced_size.py", ("f32[3]", "i32[]"), ("traced_size.py:5", "concrete values")),
    ("static_jit.py", ("f32[3]", "i32[]"), ("static_jit.py:8", "a static argument of jax.jit received a spec")),
])
def test_specs_that_do_not_fit_the_function(folder, capsys, src, specs, words):
    _expect(folder, capsys, _onnx(src, *specs), TraceError, *words)


@pytest.mark.parametrize("src, name, line", [
    ("debug_print.py", "jax.debug.print", 6), ("debug_callback.py", "jax.debug.callback", 5),
    ("pure_callback.py", "jax.pure_callback", 6), ("io_callback.py", "io_callback", 7),
    ("nested_callback.py", "jax.debug.print", 6),
])
@pytest.mark.parametrize("spec", ["f32[3]", "f32[b]"])
def test_host_callbacks_name_their_line(folder, capsys, src, name, line, spec):
    _expect(folder, capsys, _onnx(src, spec), TraceError, "f calls back into Python, which jax.export cannot serialize",
            f"{name} at {folder / src}:{line}")


EQX_MODEL = textwrap.dedent("""\
    import equinox as eqx
    import jax.numpy as jnp


    def f(x):
        y = jnp.sin(x)
        y = eqx.error_if(y, y > 2, "too big")
        return y * 2
""")


def test_equinox_error_checks_suggest_eqx_on_error(folder, capsys):
    pytest.importorskip("equinox")
    (folder / "eqx_model.py").write_text(EQX_MODEL)
    _expect(folder, capsys, _onnx("eqx_model.py"), TraceError, f"equinox error check (jax.pure_callback) at "
            f"{folder / 'eqx_model.py'}:7", "EQX_ON_ERROR=nan")


def test_equinox_with_eqx_on_error_nan_converts(tmp_path):
    pytest.importorskip("equinox")
    (tmp_path / "eqx_model.py").write_text(EQX_MODEL)
    env = dict(os.environ, EQX_ON_ERROR="nan", PYTHONPATH=os.path.join(ROOT, "converter"))
    command = ["to-onnx", "eqx_model.py", "--specs", "f32[5]", "-o", "m.onnx"]
    r = subprocess.run([sys.executable, "-m", "jaxconv", *command],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m.onnx").exists()


# ---------------------------------------------------------------- files

@pytest.mark.parametrize("src, words", [
    ("exits.py", ("exits.py:2", "SystemExit")),
    ("bad_import.py", ("bad_import.py:1", "No module named 'not_a_module_xyz'")),
    ("raises.py", ("raises.py:2", "ValueError: boom")),
    ("syntax.py", ("syntax.py:",)),
    ("no_function.py", ("defines no public top-level function",)),
    ("no_function.py:W", ("is a int, not a callable",)),
    ("two_functions.py", ("defines 2 public functions (f, g)",)),
    ("missing.py", ("file not found",)),
    (".", ("is a folder",)),
    ("ok.py:g", ("has no function 'g'",)),
])
def test_file_or_function_not_usable(folder, capsys, src, words):
    _expect(folder, capsys, _onnx(src), FileLoadError, *words)


def test_binary_file_is_not_python_source(folder, capsys):
    _expect(folder, capsys, _onnx("binary.py"), FileLoadError, "binary.py is not a Python source file",
            "null bytes")
    assert "None" not in _run(_onnx("binary.py"), capsys)[2]


# ---------------------------------------------------------------- specs

@pytest.mark.parametrize("specs, words", [
    (["f33[3]"], ("unknown dtype 'f33'",)),
    (["f32[-1]"], ("cannot be negative",)),
    (["f32"], ("expected '['",)),
    ([""], ("expected a dtype",)),
    (["f32[2b]"], ("2*b",)),
    (["f32[3"], ("bad spec 'f32[3'",)),
    (['{"w": f32[3]}'], ("bad JSON pytree spec",)),
])
def test_bad_specs(folder, capsys, specs, words):
    _expect(folder, capsys, _onnx("ok.py", *specs), SpecError, *words)


def test_bad_constraint(folder, capsys):
    _expect(folder, capsys, _onnx("ok.py", "f32[b]", extra=("--constraint", "b >")), SpecError,
            "bad --constraint 'b >'")


@pytest.mark.parametrize("constraints, words", [
    (("b >= 5", "b <= 2"), ("--constraint 'b <= 2' contradicts 'b >= 5'", "no value of b")),
    (("b == 3", "b >= 5"), ("--constraint 'b >= 5' contradicts 'b == 3'", "no value of b")),
    (("b == 3", "b == 4"), ("--constraint 'b == 4' contradicts 'b == 3'",)),
    (("5 <= b", "2 >= b"), ("--constraint '2 >= b' contradicts '5 <= b'",)),
    (("b <= 0",), ("--constraint 'b <= 0' leaves no value of b", "at least 1")),
    (("b == 3", "2*b <= 4"), ("--constraints contradict each other", "2*b <= 4")),
])
def test_contradictory_constraints(folder, capsys, constraints, words):
    extra = [a for c in constraints for a in ("--constraint", c)]
    _expect(folder, capsys, _onnx("ok.py", "f32[b]", extra=extra), SpecError, *words)


def test_spec_count(folder, capsys):
    _expect(folder, capsys, _onnx("ok.py", "f32[3]", "i32[2]"), UsageError, "takes 1 positional argument(s) (x)")


def test_zero_size_input_converts(folder, capsys):
    code, _, err = _run(["to-onnx", "ok.py", "--specs", "f32[0]", "-o", "z.onnx"], capsys)
    assert code == 0, err
    assert os.path.getsize(folder / "z.onnx") > 0


# ---------------------------------------------------------------- StableHLO files

@pytest.mark.parametrize("src, words", [
    ("unknown_op.mlir", ("unknown_op.mlir:3:8: not a readable StableHLO module: "
                         "custom op 'stablehlo.bogus' is unknown",)),
    ("type_error.mlir", ("type_error.mlir:2:",)),
    ("garbage.mlir", ("garbage.mlir:1:1: ",)),
    ("bytecode.mlirbc", ("bytecode.mlirbc: not a readable StableHLO module",)),
])
def test_unparsable_stablehlo_names_file_and_line(folder, capsys, src, words):
    _expect(folder, capsys, ["to-onnx", src, "-o", "out.onnx"], ModuleParseError, *words)
    assert ModuleParseError.exit_code == ArtifactError.exit_code


def test_stablehlo_diagnostics_do_not_leak_to_stderr(folder):
    """The bytecode reader prints its own diagnostics from C++; only jaxconv's line may reach stderr."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "converter"))
    r = subprocess.run([sys.executable, "-m", "jaxconv", "to-onnx", "bytecode.mlirbc", "-o", "out.onnx"], cwd=folder,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == ModuleParseError.exit_code
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("jaxconv: error: bytecode.mlirbc"), r.stderr


# ---------------------------------------------------------------- outputs

@pytest.mark.parametrize("args, words", [
    (["to-onnx", "ok.py", "--specs", "f32[3]", "-o", ""], ("output path is empty",)),
    (["to-onnx", "ok.py", "--specs", "f32[3]", "-o", "new/"], ("names a folder",)),
    (["to-onnx", "ok.py", "--specs", "f32[3]", "-o", "."], ("is a folder",)),
    (["to-tflite", "ok.py", "--specs", "f32[3]", "-o", "."], ("is a folder",)),
    (["to-stablehlo", "ok.py", "--specs", "f32[3]", "-o", "."], ("is a folder; give a base path such as ./f",)),
    (["to-stablehlo", "ok.py", "--specs", "f32[3]", "-o", "new/"], ("is a folder; give a base path such as new/f",)),
    (["to-onnx", "ok.py", "--specs", "f32[3]", "-o", "ok.py"], ("is the input file",)),
    (["to-cpp", "ok.py", "--specs", "f32[3]", "-o", ""], ("output folder path is empty",)),
    (["to-cpp", "ok.py", "--specs", "f32[3]", "-o", "ok.py"], ("is the input file",)),
    (["to-cpp", "ok.py", "--specs", "f32[3]", "-o", "wrong_name.npz"], ("exists and is not a folder",)),
])
def test_bad_outputs(folder, capsys, args, words):
    _expect(folder, capsys, args, UsageError, *words)
    assert (folder / "ok.py").read_text() == SOURCES["ok.py"]


@pytest.mark.parametrize("command", ["to-onnx", "to-tflite"])
def test_an_output_that_cannot_be_a_file_is_refused_before_any_work(folder, capsys, command):
    """The output is refused before the file is loaded (and before TensorFlow is asked for): a missing
    file and a folder as the output give the folder's error, not the file's after loading it."""
    _expect(folder, capsys, [command, "missing.py", "--specs", "f32[3]", "-o", "."], UsageError, "is a folder")
    _expect(folder, capsys, ["saved-model-to-onnx", "missing_dir", "-o", "."], UsageError, "is a folder")


# ---------------------------------------------------------------- --inputs for check

@pytest.fixture
def onnx_file(folder, capsys):
    assert _run(["to-onnx", "ok.py", "--specs", "f32[3]", "-o", "ok.onnx", "--no-check"], capsys)[0] == 0
    return "ok.onnx"


@pytest.mark.parametrize("npz, words", [
    ("wrong_shape.npz", ("'x'", "[4]", "[3]")),
    ("wrong_dtype.npz", ("'x'", "int64")),
    ("wrong_name.npz", ("no array named 'x'",)),
    ("extra_names.npz", ("extra_names.npz has array(s) 'w', 'z' that match no input", "inputs: x")),
    ("extra_positional.npz", ("extra_positional.npz has array(s) 'arr_1' that match no input", "inputs: x")),
    ("not_npz.npz", ("not_npz.npz",)),
    ("absent.npz", ("absent.npz",)),
])
def test_bad_inputs_file(folder, capsys, onnx_file, npz, words):
    _expect(folder, capsys, ["check", onnx_file, "ok.py", "--specs", "f32[3]", "--inputs", npz], UsageError, *words)


@pytest.mark.parametrize("artifact, words", [("absent.onnx", ("artifact not found",)),
                                             ("ok.py", ("unknown artifact type .py",)),
                                             ("wrong_name.npz", ("unknown artifact type .npz",))])
def test_bad_artifact_to_check(folder, capsys, artifact, words):
    _expect(folder, capsys, ["check", artifact, "ok.py", "--specs", "f32[3]"], ArtifactError, *words)


@pytest.mark.parametrize("name, words", [("bad.onnx", ("bad.onnx",)), ("bad.jaxexport", ("bad.jaxexport",)),
                                         ("truncated.onnx", ("truncated.onnx",))])
@pytest.mark.parametrize("command", ["inspect", "check"])
def test_corrupt_artifacts(folder, capsys, onnx_file, name, words, command):
    if name == "truncated.onnx":
        (folder / name).write_bytes((folder / onnx_file).read_bytes()[:100])
    else:
        (folder / name).write_bytes(b"garbage")
    args = ["inspect", name] if command == "inspect" else ["check", name, "ok.py", "--specs", "f32[3]"]
    _expect(folder, capsys, args, ArtifactError, *words)


def test_check_with_more_specs_than_the_artifact_takes(folder, capsys, onnx_file):
    (folder / "two.py").write_text("def f(x, y):\n    return x + y\n")
    _expect(folder, capsys, ["check", onnx_file, "two.py", "--specs", "f32[3]", "f32[3]"], ArtifactError,
            "takes 1 inputs, got 2")


@pytest.mark.parametrize("spec, words", [
    ("f32[4]", ("input 'x'", "float32[3]", "given float32[4]")),
    ("i32[3]", ("input 'x'", "float32[3]", "given int32[3]")),
    ("f32[3,1]", ("input 'x'", "float32[3]", "given float32[3,1]")),
    ("f32[]", ("input 'x'", "float32[3]", "given float32[]")),
])
def test_check_with_specs_that_do_not_fit_the_artifact(folder, capsys, onnx_file, spec, words):
    _expect(folder, capsys, ["check", onnx_file, "ok.py", "--specs", spec], ArtifactError, *words)


def test_check_with_specs_that_do_not_fit_a_symbolic_artifact(folder, capsys):
    (folder / "two.py").write_text("def f(x, y):\n    return x.sum() * y.sum()\n")
    assert _run(["to-onnx", "two.py", "--specs", "f32[b]", "f32[b]", "-o", "two.onnx", "--no-check"], capsys)[0] == 0
    _expect(folder, capsys, ["check", "two.onnx", "two.py", "--specs", "f32[b]", "f32[b,2]"], ArtifactError,
            "input 'y'", "float32[b]", "given float32[")
