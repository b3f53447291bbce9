"""The check's input sets: edge values, symbolic sizes, user inputs checked against the signature, the size limit."""

import math

import ml_dtypes
import numpy as np
import pytest

from jaxconv.check_inputs import (
    check_bytes,
    edge_set,
    edge_values,
    flatten_examples,
    load_inputs,
    max_check_bytes,
    parse_sizes,
    require_small_enough,
    size_sets,
)
from jaxconv.errors import UsageError
from jaxconv.program import trace


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_float_edge_values_hold_every_special_value(dtype):
    v = edge_values(dtype)
    assert v.dtype.name == dtype
    f = v.astype(np.float64)
    fi = ml_dtypes.finfo(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.finfo(dtype)
    assert np.any((f == 0) & ~np.signbit(f)) and np.any((f == 0) & np.signbit(f))
    assert np.any(f == np.inf) and np.any(f == -np.inf) and np.any(np.isnan(f))
    assert np.any(f == float(fi.max)) and np.any(f == -float(fi.max))
    assert np.any(np.abs(f) == float(fi.tiny))
    sub = (f != 0) & (np.abs(f) < float(fi.tiny))
    assert sub.sum() >= 2 and np.any(sub & np.signbit(f)) and np.any(sub & ~np.signbit(f))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint64"])
def test_integer_edge_values_hold_the_extremes(dtype):
    v = [int(x) for x in edge_values(dtype)]
    info = np.iinfo(dtype)
    assert {info.min, info.max, 0, 1} <= set(v)
    if info.min < 0:
        assert -1 in v


def _program(fn, *specs, constraints=()):
    return trace(fn, list(specs), constraints=constraints)


def test_symbolic_sizes_are_2_5_and_1_but_never_0():
    p = _program(lambda x: x * 2, "f32[b,3]")
    assert size_sets(p.signature, (2, 5, 1)) == [{"b": 2}, {"b": 5}, {"b": 1}]
    assert size_sets(p.signature, (0, 2)) == [{"b": 2}]  # jax.export assumes every dimension >= 1


def test_size_1_only_where_no_constraint_mentions_the_dimension():
    p = _program(lambda x: x * 2, "f32[b,3]", constraints=["b >= 4"])
    assert size_sets(p.signature, (2, 5, 1), p.constraints) == [{"b": 4}, {"b": 7}]


def test_upper_bounds_keep_every_size_inside_the_constraints():
    p = _program(lambda x: x * 2, "f32[b,3]", constraints=["b <= 3"])
    assert size_sets(p.signature, (2, 5, 1), p.constraints) == [{"b": 2}, {"b": 3}]
    p = _program(lambda x: x * 2, "f32[b,3]", constraints=["b >= 3", "b <= 4"])
    assert size_sets(p.signature, (2, 5, 1), p.constraints) == [{"b": 3}, {"b": 4}]


def test_cli_check_respects_an_upper_bound(tmp_path):
    import subprocess
    import sys

    src = tmp_path / "bounded.py"
    src.write_text("def f(x):\n    if isinstance(x.shape[0], int) and x.shape[0] > 3:\n"
                   "        raise ValueError('b must be at most 3')\n    return x * 2\n")
    out = tmp_path / "bounded.onnx"
    r = subprocess.run([sys.executable, "-m", "jaxconv", "to-onnx", str(src), "--specs", "f32[b,3]",
                        "--constraint", "b <= 3", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.exists()


def test_static_shapes_give_one_set():
    p = _program(lambda x: x * 2, "f32[3]")
    assert size_sets(p.signature, (2, 5, 1)) == [{}]


def test_edge_set_mixes_every_edge_value_into_larger_inputs():
    p = _program(lambda x, n: x * n[:, None], "f32[b,40]", "i32[b]")
    s = edge_set(p.signature, {"b": 5}, seed=0)
    x, n = s.arrays
    assert x.shape == (5, 40) and n.shape == (5,)
    assert np.isnan(x).any() and np.isinf(x).any() and (np.isfinite(x) & (np.abs(x) > 0)).sum() > 100
    assert np.iinfo(np.int32).min in n and np.iinfo(np.int32).max in n
    assert s.label == "edge"


def test_npz_inputs_are_checked_against_the_signature(tmp_path):
    p = _program(lambda x, y: x + y, "f32[b,3]", "f32[b,3]")
    path = str(tmp_path / "in.npz")
    np.savez(path, x=np.zeros((2, 3), np.float32), y=np.zeros((2, 3), np.float32))
    assert [a.shape for a in load_inputs(path, p.signature)] == [(2, 3), (2, 3)]
    np.savez(path, x=np.zeros((2, 4), np.float32), y=np.zeros((2, 3), np.float32))
    with pytest.raises(UsageError, match=r"input 'x' is float32\[2,4\], the function takes float32\[b,3\]"):
        load_inputs(path, p.signature)
    np.savez(path, x=np.zeros((2, 3), np.float32), y=np.zeros((4, 3), np.float32))
    with pytest.raises(UsageError, match=r"input 'y' is float32\[4,3\], the function takes float32\[b,3\] \(with b=2\)"):
        load_inputs(path, p.signature)
    np.savez(path, x=np.zeros((2, 3), np.float64), y=np.zeros((2, 3), np.float32))
    with pytest.raises(UsageError, match=r"input 'x' is float64\[2,3\], the function takes float32\[b,3\]"):
        load_inputs(path, p.signature)


def test_example_arguments_are_flattened_as_the_function_takes_them():
    p = _program(lambda params, x: x @ params["w"] + params["b"], '{"w": "f32[3,2]", "b": "f32[2]"}', "f32[b,3]")
    params = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
    flat = flatten_examples((params, np.ones((4, 3), np.float32)), p.arg_specs, p.signature)
    assert [a.shape for a in flat] == [(2,), (3, 2), (4, 3)]  # pytree leaves in key order, then x
    with pytest.raises(UsageError, match="returns 1 argument"):
        flatten_examples(params, p.arg_specs, p.signature)
    with pytest.raises(UsageError, match="structured as"):
        flatten_examples(({"w": params["w"]}, np.ones((4, 3), np.float32)), p.arg_specs, p.signature)
    one = _program(lambda x: x * 2, "f32[3]")
    assert flatten_examples(np.ones(3, np.float32), one.arg_specs, one.signature)[0].shape == (3,)


def test_check_bytes_come_from_the_largest_set_and_the_limit_is_configurable(monkeypatch):
    p = _program(lambda x: x * 2, "f32[b,1000]")
    sets = size_sets(p.signature, (2, 5))
    assert check_bytes(p.signature, sets) == 2 * 5 * 1000 * 4
    monkeypatch.setenv("JAXCONV_CHECK_MAX_BYTES", "39999")
    with pytest.raises(UsageError, match=r"over the limit .*JAXCONV_CHECK_MAX_BYTES.*--no-check.*--check-sizes"):
        require_small_enough(p.signature, sets)
    monkeypatch.setenv("JAXCONV_CHECK_MAX_BYTES", "40000")
    require_small_enough(p.signature, sets)
    monkeypatch.setenv("JAXCONV_CHECK_MAX_BYTES", "4G")
    assert max_check_bytes() == 4 * 2**30
    monkeypatch.setenv("JAXCONV_CHECK_MAX_BYTES", "lots")
    with pytest.raises(UsageError, match="is not a size"):
        max_check_bytes()


def test_huge_static_input_is_refused_without_a_sizes_hint(monkeypatch):
    monkeypatch.delenv("JAXCONV_CHECK_MAX_BYTES", raising=False)
    p = _program(lambda x: x * 2, "f32[100000,100000,100000]")
    assert check_bytes(p.signature, [{}]) == 2 * 4 * math.prod([100000] * 3)
    with pytest.raises(UsageError) as info:
        require_small_enough(p.signature, [{}])
    assert "--no-check" in str(info.value) and "--check-sizes" not in str(info.value)


@pytest.mark.parametrize("text", ["", "a", "0,2", "2,-1"])
def test_bad_check_sizes(text):
    with pytest.raises(UsageError, match="--check-sizes"):
        parse_sizes(text)
    assert parse_sizes("1, 3") == (1, 3)


def test_a_static_zero_size_dimension_beside_a_symbolic_one_keeps_every_size():
    p = _program(lambda x: x * 2, "f32[b,0]")
    assert size_sets(p.signature, (2, 5, 1)) == [{"b": 2}, {"b": 5}, {"b": 1}]


def test_bfloat16_subnormals_are_flushed_like_float32_ones_but_float16_ones_are_not():
    """XLA on the CPU: bf16 1e-39 / itself is NaN (read as 0/0); f16 1e-7 / itself is 1."""
    import jax

    from jaxconv.check_inputs import flush_subnormals

    b = np.array([1e-39, -1e-39, 1.0], ml_dtypes.bfloat16)
    assert np.isnan(np.asarray(jax.jit(lambda x: x / x)(b), np.float32)[0])
    (flushed,) = flush_subnormals([b])
    assert list(flushed.astype(np.float32)) == [0.0, 0.0, 1.0] and np.signbit(flushed.astype(np.float32)[1])
    h = np.array([1e-7, 1.0], np.float16)
    assert np.asarray(jax.jit(lambda x: x / x)(h))[0] == 1
    assert flush_subnormals([h]) is None
