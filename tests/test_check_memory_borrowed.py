"""The check of a model with big weights: ONNX Runtime borrows the buffers the file was written from
(jaxconv.runtimes.onnx_borrowed), and a file whose bytes differ from them still fails the check."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.errors import ArtifactError, MismatchError
from jaxconv.onnx import convert, stream
from jaxconv.program import trace
from jaxconv.runtimes import onnx_borrowed, onnxrt
from jaxconv.runtimes.onnx_borrowed import borrowed_model

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_RNG = np.random.default_rng(3)
_W = [_RNG.standard_normal((512, 512), dtype=np.float32) / 24 for _ in range(2)]  # 1 MiB each: payloads
_B = np.linspace(-1, 1, 512, dtype=np.float32)  # small: stays in the file's proto


def _fn(x):
    for w in _W:
        x = jnp.tanh(x @ w + _B)
    return x


@pytest.fixture
def borrow_all(monkeypatch):
    """Every model borrows (the line is 256 MiB), and the runners the check loads are recorded."""
    monkeypatch.setattr(onnx_borrowed, "BORROW_BYTES", 0)
    runners = []
    load = onnxrt.OnnxRunner._load

    def recording(self, threads, spins):
        load(self, threads, spins)
        runners.append(self)

    monkeypatch.setattr(onnxrt.OnnxRunner, "_load", recording)
    return runners


def _saved(path: str) -> stream.Parts:
    parts = convert.program_to_parts(trace(_fn, ["f32[2,512]"], hoist_constants=True))
    stream.save(parts, path)
    return parts


def _buffers(parts: stream.Parts) -> dict[str, np.ndarray]:
    return {n: np.frombuffer(stream.raw_bytes(t), np.uint8) for n, t in parts.payloads.items()}


def _corrupting_save(monkeypatch, corrupt):
    """``stream.save`` calling ``corrupt(path)`` once the file is written, as a faulty writer or disk does."""
    save = stream.save

    def faulty(parts, path):
        large = save(parts, path)
        corrupt(path)
        return large

    monkeypatch.setattr(stream, "save", faulty)


def _flip_byte_of(path: str, weight: np.ndarray) -> None:
    """Flip one bit in the middle of ``weight``'s bytes where the file holds them."""
    with open(path, "r+b") as f:
        data = f.read()
        start = data.find(weight.tobytes()[:256])
        assert start >= 0
        f.seek(start + weight.nbytes // 2)
        byte = f.read(1)
        f.seek(start + weight.nbytes // 2)
        f.write(bytes([byte[0] ^ 0x01]))


def test_the_check_runs_onnx_runtime_on_the_callers_own_buffers(tmp_path, borrow_all):
    reports: list = []
    jaxconv.to_onnx(_fn, "f32[2,512]", path=str(tmp_path / "m.onnx"), report_to=reports)
    assert reports[0].ok and reports[0].rows
    (runner,) = borrow_all
    assert len(runner.borrowed) == 2
    assert all(any(np.shares_memory(b, w) for w in _W) for b in runner.borrowed)
    x = _RNG.standard_normal((2, 512), dtype=np.float32)
    want = np.tanh(np.tanh(x @ _W[0] + _B) @ _W[1] + _B)
    np.testing.assert_allclose(runner.run([x])[0], want, rtol=1e-4, atol=1e-5)


def test_a_model_without_a_path_is_checked_with_borrowed_weights_too(borrow_all):
    reports: list = []
    model = jaxconv.to_onnx(_fn, "f32[2,512]", report_to=reports)
    assert reports[0].ok and len(model.graph.initializer) >= 3
    assert len(borrow_all) == 1
    assert all(any(np.shares_memory(b, w) for w in _W) for b in borrow_all[0].borrowed)


def test_a_loop_body_and_its_weights_are_borrowed_as_written(tmp_path, borrow_all):
    """A scan becomes a Loop (or LSTM) whose body is a subgraph: the field-by-field reader keeps it as written."""
    import jax

    def fn(xs):
        def step(h, x):
            h = jnp.tanh(h @ _W[0] + x)
            return h, h @ _W[1]

        return jax.lax.scan(step, jnp.zeros((2, 512), jnp.float32), xs)

    reports: list = []
    jaxconv.to_onnx(fn, "f32[5,2,512]", path=str(tmp_path / "m.onnx"), report_to=reports)
    assert reports[0].ok and len(reports[0].rows) >= 2
    assert borrow_all and borrow_all[0].borrowed


def test_small_models_keep_the_plain_load(tmp_path, monkeypatch):
    runners = []
    load = onnxrt.OnnxRunner._load
    monkeypatch.setattr(onnxrt.OnnxRunner, "_load", lambda self, threads, spins: (load(self, threads, spins), runners.append(self)))
    jaxconv.to_onnx(_fn, "f32[2,512]", path=str(tmp_path / "m.onnx"))
    assert runners and runners[0].borrowed == []


def test_a_flipped_weight_bit_in_the_file_fails_the_check(tmp_path, borrow_all, monkeypatch):
    _corrupting_save(monkeypatch, lambda path: _flip_byte_of(path, _W[1]))
    with pytest.raises(ArtifactError, match="initializer .* differs from the weights it was written from"):
        jaxconv.to_onnx(_fn, "f32[2,512]", path=str(tmp_path / "m.onnx"))


def test_a_flipped_bit_in_external_data_fails_the_check(tmp_path, borrow_all, monkeypatch):
    monkeypatch.setattr(convert, "EXTERNAL_DATA_BYTES", 1 << 20)
    _corrupting_save(monkeypatch, lambda path: _flip_byte_of(path + ".data", _W[0]))
    with pytest.raises(ArtifactError, match=r"in m\.onnx\.data differs from the weights"):
        jaxconv.to_onnx(_fn, "f32[2,512]", path=str(tmp_path / "m.onnx"))


def test_external_data_as_written_borrows_and_checks(tmp_path, borrow_all, monkeypatch):
    monkeypatch.setattr(convert, "EXTERNAL_DATA_BYTES", 1 << 20)
    reports: list = []
    jaxconv.to_onnx(_fn, "f32[2,512]", path=str(tmp_path / "m.onnx"), report_to=reports)
    assert os.path.exists(tmp_path / "m.onnx.data") and reports[0].ok
    assert len(borrow_all[0].borrowed) == 3  # the bias moved to the data file too


def test_the_graph_comes_from_the_file(tmp_path, borrow_all, monkeypatch):
    """A file whose graph differs from the one converted (its weights intact) fails on the numbers:
    ONNX Runtime gets the graph as written, not the converter's proto."""

    def retype(path):
        model = onnx.load(path)
        for node in model.graph.node:
            if node.op_type == "Tanh":
                node.op_type = "Sigmoid"
        onnx.save(model, path)

    _corrupting_save(monkeypatch, retype)
    with pytest.raises(MismatchError, match="WRONG"):
        jaxconv.to_onnx(_fn, "f32[2,512]", path=str(tmp_path / "m.onnx"))
    assert borrow_all and len(borrow_all[0].borrowed) == 2


def test_the_type_and_shape_come_from_the_file(tmp_path):
    """The initializer's dims are the file's: a file declaring [256,1024] for a [512,512] buffer of the
    same bytes gives ONNX Runtime a [256,1024] weight, and the graph then fails to load or run."""
    path = str(tmp_path / "m.onnx")
    parts = _saved(path)
    model = onnx.load(path)
    name = next(t.name for t in model.graph.initializer if len(t.raw_data) == _W[0].nbytes)
    for t in model.graph.initializer:
        if t.name == name:
            t.dims[:] = [256, 1024]
    onnx.save(model, path)
    buffers = _buffers(parts)
    borrowed = borrowed_model(path, buffers)
    assert borrowed is not None
    light = onnx.ModelProto.FromString(borrowed.model)
    assert list(next(t for t in light.graph.initializer if t.name == name).dims) == [256, 1024]
    with pytest.raises(ArtifactError):
        runner = onnxrt.OnnxRunner(path, weights=buffers)
        runner.run([np.zeros((2, 512), np.float32)])


def test_the_borrowed_proto_is_the_file_less_the_borrowed_data(tmp_path):
    path = str(tmp_path / "m.onnx")
    parts = _saved(path)
    buffers = _buffers(parts)
    borrowed = borrowed_model(path, buffers)
    assert borrowed is not None and len(borrowed.names) == 2
    light = onnx.ModelProto.FromString(borrowed.model)
    written = onnx.load(path)
    for t in written.graph.initializer:
        if t.name in buffers:
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
    for t in light.graph.initializer:
        if t.name in buffers:
            entries = {e.key: e.value for e in t.external_data}
            assert entries["length"] == str(buffers[t.name].nbytes) and entries["location"] in borrowed.names
            del t.external_data[:]
    assert light == written


def test_a_file_it_does_not_expect_is_left_to_onnx_runtime(tmp_path):
    path = str(tmp_path / "m.onnx")
    parts = _saved(path)
    assert borrowed_model(path, {}) is None  # no buffer for any initializer
    assert borrowed_model(path, {"other": np.zeros(4, np.uint8)}) is None
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 3)
    assert borrowed_model(path, _buffers(parts)) is None


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads peak RSS from Linux's /proc")
def test_a_borrowing_session_adds_a_fraction_of_the_weights_to_peak_memory(tmp_path):
    """ONNX Runtime's session of a file with 128 MiB of weights: a copy of them (and a prepacked copy)
    when it loads the file; a fraction when it borrows the caller's buffers."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {HERE!r})
        import numpy as np, onnx
        from test_memory import _matmul_chain
        from jaxconv.runtimes.onnxrt import OnnxRunner

        def status(key):
            return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key)) * 1024

        rng = np.random.default_rng(0)
        ws = [rng.standard_normal((2048, 2048), dtype=np.float32) / 45 for _ in range(8)]  # 128 MiB
        path = {str(tmp_path / "m.onnx")!r}
        onnx.save(_matmul_chain(ws), path)
        x = rng.standard_normal((2, 2048), dtype=np.float32)
        OnnxRunner(_matmul_chain([w[:8, :8] for w in ws]).SerializeToString()).run([x[:, :8]])  # loads ORT
        for borrow in (True, False):
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS
            before = status("VmRSS")
            weights = {{f"w{{i}}": w.reshape(-1).view(np.uint8) for i, w in enumerate(ws)}}
            runner = OnnxRunner(path, weights=weights if borrow else None)
            y = runner.run([x])[0]
            print((status("VmHWM") - before) / (8 * 2048 * 2048 * 4), len(runner.borrowed))
            del runner
    """)
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "converter")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    (borrowed, n), (plain, m) = [line.split() for line in proc.stdout.strip().splitlines()[-2:]]
    print(f"peak growth / weights: borrowed {borrowed}, plain {plain}")
    assert int(n) == 8 and int(m) == 0
    assert float(borrowed) < 0.2
    assert float(plain) > 0.9
