"""The default check through the command line: wrong artifacts fail, correct ones pass on every input set,
undecided outputs warn (or fail with --strict), bad --inputs and huge checks stop before anything is written."""

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from cli_support import run_cli
from jaxconv.errors import FileLoadError, MismatchError, UsageError


def edit_constant(path, old, new):
    """Replace every float initializer whose values are all ``old`` by ``new`` (a wrong artifact)."""
    model = onnx.load(path)
    edited = 0
    for init in model.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.size and a.dtype.kind == "f" and np.all(a == old):
            init.CopyFrom(numpy_helper.from_array(np.full_like(a, new), init.name))
            edited += 1
    for node in model.graph.node:
        for attr in node.attribute:
            if node.op_type == "Constant" and attr.name == "value":
                a = numpy_helper.to_array(attr.t)
                if a.size and a.dtype.kind == "f" and np.all(a == old):
                    attr.t.CopyFrom(numpy_helper.from_array(np.full_like(a, new), attr.t.name))
                    edited += 1
    assert edited, f"no constant {old} in the model"
    onnx.save(model, path)


def test_exp_overflow_does_not_hide_a_wrong_constant(tmp_path, capsys, user_file):
    """exp(100*x) * 3 with the 3.0 edited to 3.3: elements overflow in float32 but not in float64."""
    path = user_file("import jax.numpy as jnp\ndef f(x):\n    return jnp.exp(100 * x) * 3\n")
    out = str(tmp_path / "f.onnx")
    assert run_cli(["to-onnx", path, "--specs", "f32[16]", "-o", out], capsys)[0] == 0
    assert run_cli(["check", out, path, "--specs", "f32[16]"], capsys)[0] == 0
    edit_constant(out, 3.0, 3.3)
    code, stdout, err = run_cli(["check", out, path, "--specs", "f32[16]"], capsys)
    assert code == MismatchError.exit_code, stdout
    assert "WRONG" in err and "output_0" in err and "MISMATCH" in stdout


def test_one_large_element_does_not_hide_wrong_small_ones(tmp_path, capsys, user_file):
    """where(x < 100, 3x, 2.5x) edited to 3.3x, on the user's inputs [1, 2, 0.5, 1e7+1]."""
    path = user_file("import jax.numpy as jnp\ndef f(x):\n    return jnp.where(x < 100, 3 * x, 2.5 * x)\n")
    out = str(tmp_path / "f.onnx")
    assert run_cli(["to-onnx", path, "--specs", "f32[4]", "-o", out], capsys)[0] == 0
    edit_constant(out, 3.0, 3.3)
    npz = str(tmp_path / "x.npz")
    np.savez(npz, x=np.array([1, 2, 0.5, 1e7 + 1], np.float32))
    code, stdout, err = run_cli(["check", out, path, "--specs", "f32[4]", "--inputs", npz], capsys)
    assert code == MismatchError.exit_code
    assert "on given inputs" in err and "3 of 4 elements differ" in err


def test_every_input_set_shows_in_the_table(tmp_path, capsys, user_file):
    path = user_file("import jax.numpy as jnp\ndef f(x, n):\n    return jnp.tanh(x) * n[:, None], n * 2\n")
    out = str(tmp_path / "f.onnx")
    code, stdout, err = run_cli(["to-onnx", path, "--specs", "f32[b,3]", "i32[b]", "-o", out], capsys)
    assert code == 0, err
    rows = [line.split() for line in stdout.splitlines() if line.startswith("output_")]
    assert [(r[1], r[3]) for r in rows if r[0] == "output_0"] == [
        ("random", "[2,"), ("random", "[5,"), ("random", "[1,"), ("edge", "[5,"), ("edge", "[5,")]  # + pairs
    assert len(rows) == 10 and all(r[-1] == "ok" for r in rows), stdout


def test_check_sizes_flag_picks_the_symbolic_sizes(tmp_path, capsys, user_file):
    path = user_file("def f(x):\n    return x * 2\n")
    code, stdout, err = run_cli(["to-onnx", path, "--specs", "f32[b]", "-o", str(tmp_path / "f.onnx"),
                                 "--check-sizes", "3"], capsys)
    assert code == 0, err
    shapes = {line.split()[3] for line in stdout.splitlines() if line.startswith("output_")}
    assert shapes == {"[3]"}


def test_an_edge_set_a_while_loop_does_not_end_on_is_skipped_with_a_note(tmp_path, capsys, user_file):
    """The loop runs edge values in capped copies (``loop_caps``); the two sets with NaN (which keeps
    ``not (sum >= 100)`` true) reach the cap in jax.jit, and are left out with a note naming the loop."""
    path = user_file("""
        import jax.numpy as jnp
        from jax import lax
        def f(x):
            return lax.while_loop(lambda c: ~(jnp.abs(c).sum() >= 100.0), lambda c: c * 2.0 + 1.0, x)
    """)
    code, stdout, err = run_cli(["to-onnx", path, "--specs", "f32[3]", "-o", str(tmp_path / "w.onnx")], capsys)
    assert code == 0, err
    notes = [line for line in stdout.splitlines() if line.startswith("note: an edge set skipped")]
    assert len(notes) == 2 and all("jax.jit's while loop was still running after 100000 trips" in n for n in notes), stdout
    assert [line.split()[1] for line in stdout.splitlines() if line.startswith("output_")] == ["random", "edge"], stdout


@pytest.mark.parametrize("case", ["shape", "dtype", "rank"])
def test_inputs_of_the_wrong_shape_or_dtype_are_a_usage_error(case, tmp_path, capsys, user_file):
    path = user_file("import jax.numpy as jnp\ndef f(x, n):\n    return jnp.sin(x) * n\n")
    out = str(tmp_path / "f.onnx")
    assert run_cli(["to-onnx", path, "--specs", "f32[4]", "f32[]", "-o", out, "--no-check"], capsys)[0] == 0
    x = {"shape": np.zeros(5, np.float32), "dtype": np.zeros(4, np.int32), "rank": np.zeros((4, 1), np.float32)}[case]
    npz = str(tmp_path / "in.npz")
    np.savez(npz, x=x, n=np.float32(3))
    before = sorted(os.listdir(tmp_path))
    code, stdout, err = run_cli(["check", out, path, "--specs", "f32[4]", "f32[]", "--inputs", npz], capsys)
    assert code == UsageError.exit_code
    assert err.startswith("jaxconv: error: ") and err.count("\n") == 1, err
    given = {"shape": "float32[5]", "dtype": "int32[4]", "rank": "float32[4,1]"}[case]
    assert f"input 'x' is {given}, the function takes float32[4]" in err
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("command", ["to-onnx", "to-stablehlo", "to-cpp"])
def test_a_check_too_large_for_memory_is_refused_before_writing(command, tmp_path, capsys, user_file, monkeypatch):
    monkeypatch.delenv("JAXCONV_CHECK_MAX_BYTES", raising=False)
    path = user_file("def f(x):\n    return x * 2\n")
    out = str(tmp_path / "out" / "big")
    code, stdout, err = run_cli([command, path, "--specs", "f32[100000,100000,100000]", "-o", out], capsys)
    assert code == UsageError.exit_code, err
    assert err.startswith("jaxconv: error: ") and err.count("\n") == 1, err
    assert "over the limit of 2 GiB" in err and "--no-check" in err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "out") or not os.listdir(tmp_path / "out")


def test_smaller_check_sizes_get_under_the_limit(tmp_path, capsys, user_file, monkeypatch):
    monkeypatch.setenv("JAXCONV_CHECK_MAX_BYTES", "50000")
    path = user_file("def f(x):\n    return x * 2\n")
    out = tmp_path / "f.onnx"
    code, _, err = run_cli(["to-onnx", path, "--specs", "f32[b,2000]", "-o", str(out)], capsys)
    assert code == UsageError.exit_code and "--check-sizes" in err
    assert not out.exists()
    code, _, err = run_cli(["to-onnx", path, "--specs", "f32[b,2000]", "-o", str(out), "--check-sizes", "1,2"], capsys)
    assert code == 0, err
    assert out.exists()


def test_example_inputs_in_the_file_are_the_first_input_set(tmp_path, capsys, user_file):
    path = user_file("""
        import numpy as np
        import jax.numpy as jnp

        def model(params, x):
            return jnp.tanh(x @ params["w"])

        def example_inputs():
            return {"w": np.full((3, 2), 0.5, np.float32)}, np.ones((7, 3), np.float32)
    """)
    code, stdout, err = run_cli(["to-onnx", path, "--specs", '{"w": "f32[3,2]"}', "f32[b,3]",
                                 "-o", str(tmp_path / "m.onnx")], capsys)
    assert code == 0, err
    rows = [line.split() for line in stdout.splitlines() if line.startswith("output_")]
    assert rows[0][1] == "example" and rows[0][3] == "[7,"


@pytest.mark.parametrize("body, exc, words", [
    ("return np.ones((7, 4), np.float32),", UsageError, "input 'x' is float32[7,4], the function takes float32[b,3]"),
    ("return 1, 2", UsageError, "returns 2 argument(s); the function takes 1"),
    ("raise RuntimeError('no data here')", FileLoadError, "example_inputs() in"),
])
def test_bad_example_inputs(body, exc, words, tmp_path, capsys, user_file):
    path = user_file(f"""
        import numpy as np

        def f(x):
            return x * 2

        def example_inputs():
            {body}
    """)
    out = tmp_path / "f.onnx"
    code, _, err = run_cli(["to-onnx", path, "--specs", "f32[b,3]", "-o", str(out)], capsys)
    assert code == exc.exit_code, err
    assert words in err and err.count("\n") == 1
    assert not out.exists()


def _undecided(monkeypatch):
    """jax.jit and JAX op by op disagree by 1e-3, float64 is unavailable, the artifact is 2e-3 off."""
    from jaxconv import references
    from jaxconv.runtimes import onnxrt

    real_run, real_reference = onnxrt.OnnxRunner.run, references.reference_outputs
    monkeypatch.setattr(onnxrt.OnnxRunner, "run", lambda self, inputs: [o + np.float32(2e-3) for o in real_run(self, inputs)])
    monkeypatch.setattr(references, "float64_outputs", lambda fn, specs, flat: (None, "RuntimeError: no float64 here"))
    monkeypatch.setattr(references, "eager_outputs",
                        lambda fn, specs, flat: [o + np.float32(1e-3) for o in real_reference(fn, specs, flat)])


def test_undecided_passes_with_a_warning(tmp_path, capsys, user_file, monkeypatch):
    _undecided(monkeypatch)
    path = user_file("def f(x):\n    return x + 1\n")
    code, stdout, err = run_cli(["to-onnx", path, "--specs", "f32[3]", "-o", str(tmp_path / "f.onnx")], capsys)
    assert code == 0, err
    assert "UNDECIDED" in stdout
    assert "warning:" in err and "cannot decide" in err and "--strict" in err and "no float64 here" in err


def test_strict_makes_undecided_fail(tmp_path, capsys, user_file, monkeypatch):
    _undecided(monkeypatch)
    path = user_file("def f(x):\n    return x + 1\n")
    out = tmp_path / "f.onnx"
    code, stdout, err = run_cli(["to-onnx", path, "--specs", "f32[3]", "-o", str(out), "--strict"], capsys)
    assert code == MismatchError.exit_code
    assert "cannot decide output output_0" in err and "(--strict)" in err
    assert out.exists()  # like a mismatch, the artifact stays for inspection


def test_the_api_refuses_a_huge_check_before_writing(tmp_path, monkeypatch):
    import jaxconv

    monkeypatch.delenv("JAXCONV_CHECK_MAX_BYTES", raising=False)
    out = tmp_path / "big.onnx"
    with pytest.raises(UsageError, match="over the limit"):
        jaxconv.to_onnx(lambda x: x * 2, "f32[100000,100000,100000]", path=str(out))
    assert not out.exists() and not os.listdir(tmp_path)
    jaxconv.to_onnx(lambda x: x * 2, "f32[100000,100000,100000]", path=str(out), check=False)
    assert out.exists()


CNN_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "cnn.py")
CNN_SPECS = ['{"conv1": "f32[3,3,1,8]", "conv2": "f32[3,3,8,16]", "dense": "f32[784,10]", "bias": "f32[10]"}',
             "f32[b,28,28,1]"]


def test_the_cnn_example_is_undecided_only_where_xla_drops_nan_in_max_pooling(tmp_path, capsys):
    """On edge values XLA's max pooling drops NaN at this size, the ONNX keeps it: undecided with the
    reason, not a mismatch; --strict fails; a wrong constant in the ONNX still fails."""
    out = str(tmp_path / "cnn.onnx")
    code, stdout, err = run_cli(["to-onnx", CNN_FILE, "--specs", *CNN_SPECS, "-o", out], capsys)
    assert code == 0, err
    edge = [line for line in stdout.splitlines() if line.startswith("output_0") and line.split()[1] == "edge"]
    assert len(edge) == 2 and "UNDECIDED" in edge[0] and edge[1].split()[-1] == "ok", stdout  # two edge sets
    assert "XLA on the CPU drops NaN in max pooling depending on the tensor size" in edge[0]
    assert "NaN in the artifact where jax.jit has a number" in edge[0]
    assert "MISMATCH" not in stdout and "warning:" in err and "max pooling" in err
    code, _, err = run_cli(["check", out, CNN_FILE, "--specs", *CNN_SPECS, "--strict"], capsys)
    assert code == MismatchError.exit_code and "cannot decide output output_0 on edge inputs" in err
    good = onnx.load(out)
    _edit_float_scalar(out, good, np.isnan, 0.0)  # the pooling guard writes 0, not NaN, for a window with NaN
    code, stdout, err = run_cli(["check", out, CNN_FILE, "--specs", *CNN_SPECS], capsys)
    assert code == MismatchError.exit_code, stdout
    assert "WRONG" in err and "on edge inputs" in err and "UNDECIDED" not in stdout
    wrong = onnx.ModelProto()
    wrong.CopyFrom(good)
    wrong.graph.initializer.append(numpy_helper.from_array(np.array(1.001, np.float32), "planted"))
    final = wrong.graph.output[0].name  # the logits scaled by 1.001: wrong on every input set
    producer = next(n for n in wrong.graph.node if final in n.output)
    producer.output[list(producer.output).index(final)] = "unscaled"
    wrong.graph.node.append(onnx.helper.make_node("Mul", ["unscaled", "planted"], [final]))
    onnx.save(wrong, out)
    code, stdout, err = run_cli(["check", out, CNN_FILE, "--specs", *CNN_SPECS], capsys)
    assert code == MismatchError.exit_code, stdout
    assert "WRONG" in err and "on random inputs" in err


def _edit_float_scalar(path, model, pick, new):
    """Save ``model`` to ``path`` with every float scalar initializer for which ``pick`` holds set to ``new``."""
    edited = onnx.ModelProto()
    edited.CopyFrom(model)
    count = 0
    for init in edited.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.size == 1 and a.dtype.kind == "f" and pick(a).all():
            init.CopyFrom(numpy_helper.from_array(np.full_like(a, new), init.name))
            count += 1
    assert count
    onnx.save(edited, path)
