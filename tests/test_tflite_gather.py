"""TFLite gathers with out-of-range indices give what jax.jit gives (XLA clamps; TFLite's GATHER_ND would fail)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv import api
from jaxconv.cli import main
from jaxconv.stablehlo.clamped_gather import gathers_clamped

pytestmark = pytest.mark.tf
pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

TABLE = np.arange(24, dtype=np.float32).reshape(6, 4)
INDICES = np.array([-200, -7, -3, -1, 0, 5, 6, 130], dtype=np.int32)


def _window(t, i):
    dnums = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,))
    return lax.gather(t, i[:, None], dnums, slice_sizes=(2, 3), mode="promise_in_bounds")


FUNCTIONS = {
    "index": (lambda t, i: t[i], "i32[8]"),
    "index_symbolic": (lambda t, i: t[i] * 2.0, "i32[n]"),
    "take_clip": (lambda t, i: jnp.take(t, i, axis=0, mode="clip"), "i32[8]"),
    "take_fill": (lambda t, i: jnp.take(t, i, axis=1, mode="fill", fill_value=-1.0), "i32[8]"),
    "two_axes": (lambda t, i: t[i, i[::-1]], "i32[8]"),
    "take_along_axis": (lambda t, i: jnp.take_along_axis(t, jnp.broadcast_to(i[:, None], (8, 4)), axis=0), "i32[8]"),
    "vmap_rows": (lambda t, i: jax.vmap(lambda row, k: row[k])(jnp.concatenate([t, t[:2]]), i), "i32[8]"),
    "window": (_window, "i32[8]"),
    "unsigned": (lambda t, i: t[i.astype(jnp.uint32)], "i32[8]"),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_out_of_range_gather_matches_jax(name):
    from jaxconv.runtimes.tflite import TFLiteRunner

    fn, spec = FUNCTIONS[name]
    data = api.to_tflite(fn, "f32[6,4]", spec, check=False)
    got = TFLiteRunner(data).run([TABLE, INDICES])[0]
    want = np.asarray(jax.jit(fn)(TABLE, INDICES))
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_gathers_are_clamped_only_inside_the_block():
    def f(t, i):
        return t[i]

    def clamps() -> int:
        exported = jax.export.export(jax.jit(f), platforms=("cpu",))(jax.ShapeDtypeStruct((6, 4), np.float32),
                                                                    jax.ShapeDtypeStruct((8,), np.int32))
        return exported.mlir_module().count("stablehlo.clamp")

    before = clamps()
    with gathers_clamped():
        inside = clamps()
    assert inside == before + 1
    assert clamps() == before


def test_cli_tflite_check_on_out_of_range_indices(tmp_path, capsys):
    src = tmp_path / "emb.py"
    src.write_text("def lookup(table, ids):\n    return table[ids]\n")
    lite = str(tmp_path / "emb.tflite")
    assert main(["to-tflite", str(src), "--specs", "f32[6,4]", "i32[8]", "-o", lite, "--no-check"]) == 0
    npz = tmp_path / "in.npz"
    np.savez(npz, table=TABLE, ids=INDICES)
    code = main(["check", lite, str(src), "--specs", "f32[6,4]", "i32[8]", "--inputs", str(npz)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "output_0" in out and "MISMATCH" not in out
