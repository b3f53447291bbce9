"""Peak memory of the ONNX checks and save on models with big weights, and scripts/bench_memory.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import helper

from jaxconv.errors import ConversionError
from jaxconv.onnx import convert

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _matmul_chain(weights: list[np.ndarray]) -> onnx.ModelProto:
    n = weights[0].shape[0]
    inits = [onnx.numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)]
    nodes, prev = [], "x"
    for i in range(len(weights)):
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, n])],
                              [helper.make_tensor_value_info(prev, onnx.TensorProto.FLOAT, [2, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_validate_checks_graphs_with_big_weights():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB: above the 1 MiB line
    model = _matmul_chain([w, w])
    convert.validate(model)
    bad = _matmul_chain([w, rng.standard_normal((1000, 1024)).astype(np.float32)])  # [2,1024] @ [1000,1024]
    with pytest.raises(ConversionError, match="onnx.checker"):
        convert.validate(bad)


def test_validate_checks_the_big_weights_themselves():
    model = _matmul_chain([np.ones((1024, 1024), np.float32)])
    model.graph.initializer[0].raw_data = b"\0" * (4 * 1024 * 1023)  # one row short of its dims
    with pytest.raises(ConversionError, match="onnx.checker"):
        convert.validate(model)


def test_is_large_never_underestimates_the_serialized_size(monkeypatch):
    model = _matmul_chain([np.ones((512, 512), np.float32), np.ones((512, 512), np.float32)])
    model.metadata_props.add(key="k", value="v" * 1000)
    size = len(model.SerializeToString())
    monkeypatch.setattr(convert, "EXTERNAL_DATA_BYTES", size - 1)
    assert convert.is_large(model)
    monkeypatch.setattr(convert, "EXTERNAL_DATA_BYTES", size + 8192)
    assert not convert.is_large(model)


def _peak_growth(action: str, after: str = "") -> float:
    """Peak RSS that ``action`` adds, over the weight bytes of an 8 x 2048 x 2048 float32 ``model``,
    measured in a fresh process (``convert``, ``onnx`` and ``model`` are in scope); ``after`` runs
    once the peak is read."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "converter")!r}); sys.path.insert(0, {HERE!r})
        import numpy as np, onnx
        from test_memory import _matmul_chain
        from jaxconv.onnx import convert

        def status(key):
            return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key)) * 1024

        rng = np.random.default_rng(0)
        model = _matmul_chain([rng.standard_normal((2048, 2048), dtype=np.float32) for _ in range(8)])  # 128 MiB
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        before = status("VmRSS")
    """) + textwrap.dedent(action) + textwrap.dedent("""
        print((status("VmHWM") - before) / (8 * 2048 * 2048 * 4))
    """) + textwrap.dedent(after)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads peak RSS from Linux's /proc")
def test_validate_adds_little_to_peak_memory():
    """ByteSize and onnx.checker on the whole proto peaked at 2x the weights; without them, a fraction."""
    assert _peak_growth("convert.validate(model)\n") < 0.5


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads peak RSS from Linux's /proc")
def test_bench_memory_prints_the_ratio():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_memory.py"), "--mb", "4"],
                          capture_output=True, text=True, check=True)
    row = proc.stdout.strip().splitlines()[-1].strip("|").split("|")
    weights, check, rss, ratio, alone, added = (c.strip() for c in row)
    assert weights == "4" and check == "no"
    assert float(ratio) == pytest.approx(float(rss) / float(weights), rel=0.05)
    assert 0 < float(alone) <= float(rss)
    assert float(added) == pytest.approx((float(rss) - float(alone)) / float(weights), abs=0.5)


def test_write_model_writes_the_serialized_bytes():
    import io

    model = _matmul_chain([np.arange(300 * 300, dtype=np.float32).reshape(300, 300)] * 2)
    model.graph.doc_string = "doc"
    model.graph.value_info.append(helper.make_tensor_value_info("h0", onnx.TensorProto.FLOAT, [2, 300]))
    model.metadata_props.add(key="k", value="v")
    model.producer_name = "p"
    for m in (model, onnx.ModelProto(), _without_weights(model)):
        buf = io.BytesIO()
        convert.write_model(m, buf)
        assert buf.getvalue() == m.SerializeToString()


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    light = onnx.ModelProto()
    light.CopyFrom(model)
    del light.graph.initializer[:]
    return light


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads peak RSS from Linux's /proc")
def test_save_adds_little_to_peak_memory(tmp_path):
    """SerializeToString of the whole model peaked at 2x the weights; one initializer at a time, a fraction."""
    path = str(tmp_path / "m.onnx")
    assert _peak_growth(f"convert.save(model, {path!r})\n", after=f"assert onnx.load({path!r}) == model\n") < 0.5


def _small_program():
    import jax.numpy as jnp

    from jaxconv.program import trace

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    return trace(lambda x: jnp.tanh(x @ w), ["f32[2,4]"])


def test_check_computes_every_reference_before_the_artifact_runs(monkeypatch):
    """The artifact's runtime loads its weights only once jax.jit is done compiling (they would add up)."""
    from jaxconv import verify
    from jaxconv.runtimes.onnxrt import OnnxRunner

    program = _small_program()
    runner = OnnxRunner(convert.program_to_onnx(program, None).SerializeToString())
    calls: list[str] = []
    reference, run = verify.reference_outputs, runner.run
    monkeypatch.setattr(verify, "reference_outputs", lambda *a: calls.append("jit") or reference(*a))
    monkeypatch.setattr(runner, "run", lambda flat: calls.append("run") or run(flat))
    report = verify.check_runner(runner, "a.onnx", program.fn, program.arg_specs, program.signature)
    assert report.ok and [r.inputs for r in report.rows] == ["random", "edge"]
    assert calls == ["jit", "jit", "run", "run"]


def test_release_compiled_clears_jax_caches_between_references_and_artifact(monkeypatch):
    import jax

    from jaxconv import verify
    from jaxconv.check_context import check_options
    from jaxconv.runtimes.onnxrt import OnnxRunner

    program = _small_program()
    runner = OnnxRunner(convert.program_to_onnx(program, None).SerializeToString())
    calls: list[str] = []
    run, clear = runner.run, jax.clear_caches
    monkeypatch.setattr(jax, "clear_caches", lambda: calls.append("clear") or clear())
    monkeypatch.setattr(runner, "run", lambda flat: calls.append("run") or run(flat))
    verify.check_runner(runner, "a.onnx", program.fn, program.arg_specs, program.signature)
    assert calls == ["run", "run"]  # off by default: a library caller keeps its compiled functions
    calls.clear()
    with check_options(release_compiled=True):
        report = verify.check_runner(runner, "a.onnx", program.fn, program.arg_specs, program.signature)
    assert report.ok and calls == ["clear", "run", "run"]


def test_deferred_onnx_runner_loads_on_first_run(tmp_path):
    from jaxconv.errors import ArtifactError
    from jaxconv.runtimes.onnxrt import OnnxRunner

    program = _small_program()
    path = str(tmp_path / "m.onnx")
    convert.save(convert.program_to_onnx(program, None), path)
    runner = OnnxRunner(path, defer=True)
    assert not hasattr(runner, "session")
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(runner.run([x])[0], np.asarray(program.fn(x)), rtol=1e-5, atol=1e-6)
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    bad = OnnxRunner(str(tmp_path / "bad.onnx"), defer=True)
    with pytest.raises(ArtifactError, match="ONNX Runtime cannot load .*bad.onnx"):
        bad.run([x])


def test_to_onnx_frees_the_exported_module_only_of_a_program_used_once(tmp_path):
    import jaxconv

    program = _small_program()
    jaxconv.to_onnx(program, path=str(tmp_path / "a.onnx"))
    assert program.exported is not None  # a caller's Program stays usable for other targets
    jaxconv.to_stablehlo(program, path=str(tmp_path / "a"))
    program.keep_module = False
    jaxconv.to_onnx(program, path=str(tmp_path / "b.onnx"))  # the check still runs (against jax.jit)
    assert program.exported is None


def test_to_onnx_without_path_checks_from_a_temporary_file(monkeypatch):
    """Not from SerializeToString(): that copy of the weights would be held through the check."""
    import jaxconv
    from jaxconv.runtimes import onnxrt

    sources: list = []
    init = onnxrt.OnnxRunner.__init__
    monkeypatch.setattr(onnxrt.OnnxRunner, "__init__", lambda self, src, **kw: sources.append(src) or init(self, src, **kw))
    program = _small_program()
    reports: list = []
    model = jaxconv.to_onnx(program, report_to=reports)
    assert len(sources) == 1 and isinstance(sources[0], str) and not os.path.exists(sources[0])
    assert reports[0].ok and reports[0].artifact == "model.onnx"
    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(onnxrt.OnnxRunner(model.SerializeToString()).run([x])[0], np.asarray(program.fn(x)),
                               rtol=1e-5, atol=1e-6)


def test_program_to_onnx_frees_the_lowered_graph_and_the_module_of_a_program_used_once():
    """The onnx_ir model holds a copy of the weights in reference cycles: it goes before the check."""
    import gc

    import jax.numpy as jnp
    import onnx_ir as ir

    from jaxconv.program import trace
    from jaxconv.specs import parse_spec

    w = np.random.default_rng(0).standard_normal((2, 2048, 2048), dtype=np.float32)  # 32 MiB

    def fn(x):
        return jnp.tanh(x @ w[0]) @ w[1]

    program = trace(fn, [parse_spec("f32[2,2048]")])
    program.keep_module = False
    kinds = (ir.Model, ir.Graph, ir.Node)
    gc.collect()
    before = {id(o) for o in gc.get_objects() if isinstance(o, kinds)}  # other tests' graphs
    gc.disable()  # only the conversion's own collection may free the model
    try:
        model = convert.program_to_onnx(program)
        alive = [o for o in gc.get_objects() if isinstance(o, kinds) and id(o) not in before]
    finally:
        gc.enable()
    assert program.exported is None and not alive
    assert len(model.graph.initializer) == 2
