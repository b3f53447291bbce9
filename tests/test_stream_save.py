"""ONNX files written from the weights' own buffers (jaxconv.onnx.stream) and the memory that saves."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import onnx
import onnx_ir as ir
import pytest

from jaxconv.onnx import convert, stream
from jaxconv.program import trace
from jaxconv.runtimes.onnxrt import OnnxRunner

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_RNG = np.random.default_rng(0)
_W = [_RNG.standard_normal((512, 512), dtype=np.float32) / 24 for _ in range(3)]  # 1 MiB each: payloads
_V = _RNG.standard_normal((512, 8)).astype(np.float16)  # small: stays in the proto


def _fn(x):
    for w in _W:
        x = jnp.tanh(x @ w)
    return (x.astype(jnp.float16) @ _V).astype(jnp.float32)


def _parts() -> stream.Parts:
    return convert.program_to_parts(trace(_fn, ["f32[2,512]"], hoist_constants=True))


def test_split_holds_the_big_weights_apart_as_the_callers_buffers():
    parts = _parts()
    assert len(parts.payloads) == 3 and parts.payload_bytes == 3 * _W[0].nbytes
    assert all(any(np.shares_memory(t.numpy(), w) for w in _W) for t in parts.payloads.values())
    assert parts.model.ByteSize() < _W[0].nbytes / 4


def test_streamed_file_is_the_serialized_whole_model(tmp_path):
    parts = _parts()
    full = parts.full()
    buf = io.BytesIO()
    stream.write_single(parts, buf)
    assert buf.getvalue() == full.SerializeToString()
    path = str(tmp_path / "m.onnx")
    assert stream.save(parts, path) is False
    with open(path, "rb") as f:
        assert f.read() == full.SerializeToString()
    assert not os.path.exists(path + ".data")
    weights = {onnx.numpy_helper.to_array(t).tobytes() for t in full.graph.initializer}
    assert {w.tobytes() for w in _W} <= weights


def test_full_model_matches_the_onnx_ir_serialization():
    from jaxconv.onnx.driver import lower_to_ir
    from jaxconv.stablehlo.reader import read_module

    program = trace(_fn, ["f32[2,512]"])  # constants embedded: the module holds them
    direct = ir.serde.serialize_model(lower_to_ir(
        read_module(program.exported.mlir_module_serialized),
        inputs=[convert.GraphIO("x", "float32", (2, 512), 0)],
        outputs=[convert.GraphIO("output_0", "float32", (2, 8))], graph_name="_fn",
        metadata={"jaxconv.signature": convert.json.dumps(program.signature.to_json()),
                  "jaxconv.function": "_fn"}))
    assert convert.program_to_onnx(program).SerializeToString() == direct.SerializeToString()


def test_large_model_gets_aligned_external_data_that_runs_and_checks(tmp_path, monkeypatch):
    parts = _parts()
    monkeypatch.setattr(convert, "EXTERNAL_DATA_BYTES", parts.payload_bytes // 2)
    path = str(tmp_path / "m.onnx")
    assert stream.save(parts, path) is True
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    light = onnx.load(path, load_external_data=False)
    fields = [{e.key: int(e.value) for e in t.external_data if e.key != "location"} for t in light.graph.initializer]
    big = [f["offset"] for f in fields if f.get("length", 0) >= stream.PAYLOAD_BYTES]
    assert len(big) == 3 and all(o % stream.ALIGNMENT == 0 for o in big)
    small = [f for f in fields if f and f["length"] < stream.PAYLOAD_BYTES]
    assert all(f["length"] >= stream.INLINE_EXTERNAL_BYTES and f["offset"] % 64 == 0 for f in small)
    assert os.path.getsize(path) < _W[0].nbytes / 4
    convert.validate_file(path)
    x = _RNG.standard_normal((2, 512), dtype=np.float32)
    got = OnnxRunner(path).run([x])[0]
    want = OnnxRunner(parts.full().SerializeToString()).run([x])[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, np.asarray(_fn(x)), rtol=1e-2, atol=1e-2)
    loaded = onnx.load(path)
    assert loaded.graph.initializer[0].raw_data == parts.full().graph.initializer[0].raw_data


def test_validate_refuses_a_light_model_with_a_broken_graph():
    from jaxconv.errors import ConversionError

    parts = _parts()
    convert.validate(parts.model)
    parts.model.graph.node[0].input[0] = "nowhere"
    with pytest.raises(ConversionError, match="onnx.checker"):
        convert.validate(parts.model)


def test_cli_names_the_data_file_of_a_large_model(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(textwrap.dedent("""
        import numpy as np
        import jax.numpy as jnp
        W = np.linspace(-1, 1, 512 * 512, dtype=np.float32).reshape(512, 512)

        def predict(x):
            return jnp.tanh(x @ W)
    """))
    code = textwrap.dedent(f"""
        import sys
        from jaxconv.onnx import convert
        convert.EXTERNAL_DATA_BYTES = 1 << 19
        from jaxconv.cli import main
        sys.argv = ["jaxconv", "to-onnx", {str(src) + ":predict"!r}, "-o", {str(tmp_path / "m.onnx")!r},
                    "--specs", "f32[2,512]"]
        sys.exit(main())
    """)
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "converter")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"weights in {tmp_path / 'm.onnx.data'}, keep it beside the model" in proc.stdout
    assert "ok" in proc.stdout.lower()  # the check ran on the file with its external data
    assert os.path.getsize(tmp_path / "m.onnx.data") >= 512 * 512 * 4


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads peak RSS from Linux's /proc")
def test_to_onnx_copies_no_weight_in_memory(tmp_path):
    """Peak RSS that converting adds over closed-over weights (128 MiB): jax.export's module, its bytes and
    the ModelProto each held a copy (2.9x of the weights in all, measured); a fraction is left."""
    code = textwrap.dedent(f"""
        import numpy as np, jax, jax.numpy as jnp
        import jaxconv
        from jaxconv.onnx import convert, passes, stream
        import onnxscript.optimizer, onnxruntime

        def status(key):
            return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key)) * 1024

        rng = np.random.default_rng(0)
        ws = [rng.standard_normal((2048, 2048), dtype=np.float32) for _ in range(8)]  # 128 MiB

        def fn(x):
            for w in ws:
                x = jnp.tanh(x @ w)
            return x

        jaxconv.to_onnx(lambda x: jnp.tanh(x @ ws[0][:8, :8]), "f32[2,8]", check=False)  # warm the code paths
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        before = status("VmRSS")
        model = jaxconv.to_onnx(fn, "f32[2,2048]", path={str(tmp_path / "m.onnx")!r}, check=False,
                                keep_weights=False)
        print((status("VmHWM") - before) / (8 * 2048 * 2048 * 4))
    """)
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "converter")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    growth = float(proc.stdout.strip().splitlines()[-1])
    assert growth < 0.5
    assert os.path.getsize(tmp_path / "m.onnx") > 8 * 2048 * 2048 * 4


def test_an_initializer_whose_tensor_has_another_name_is_written_under_the_values_name(tmp_path):
    """A rewrite may rename a value and leave its tensor's name behind (the LSTM rewrite does)."""
    w = np.linspace(-1, 1, 512 * 512, dtype=np.float32).reshape(512, 512)
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 512]))
    wv = ir.Value(name="weight", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([512, 512]),
                  const_value=ir.Tensor(w, name="old_name"))
    node = ir.Node("", "MatMul", [x, wv], num_outputs=1)
    node.outputs[0].name, node.outputs[0].dtype = "y", ir.DataType.FLOAT
    node.outputs[0].shape = ir.Shape([2, 512])
    graph = ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 21}, name="g")
    graph.register_initializer(wv)
    parts = stream.split(ir.Model(graph, ir_version=10))
    assert list(parts.payloads) == ["weight"]
    path = str(tmp_path / "m.onnx")
    stream.save(parts, path)
    loaded = onnx.load(path)
    assert [t.name for t in loaded.graph.initializer] == ["weight"]
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(loaded.graph.initializer[0]), w)
    xv = np.ones((2, 512), np.float32)
    np.testing.assert_allclose(OnnxRunner(path).run([xv])[0], xv @ w.astype(np.float64), rtol=1e-5, atol=1e-2)
