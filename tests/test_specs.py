"""The spec grammar: valid specs become ShapeDtypeStructs, invalid ones point at the bad character."""

import jax
import numpy as np
import pytest
from jax import export

from jaxconv.errors import SpecError
from jaxconv.specs import parse_spec, parse_tensor_spec, to_shape_dtype_structs


@pytest.mark.parametrize("text,dtype,dims", [
    ("f32[b,784]", "float32", ("b", 784)),
    ("f32[]", "float32", ()),
    ("bf16[2,3]", "bfloat16", (2, 3)),
    ("float32[4]", "float32", (4,)),
    ("i8[1]", "int8", (1,)),
    ("u64[batch, 3]", "uint64", ("batch", 3)),
    ("bool[7]", "bool", (7,)),
    ("c64[2]", "complex64", (2,)),
    ("c128[2]", "complex128", (2,)),
    ("f16[2*b]", "float16", ("2*b",)),
    (" i32[ 3 , n ] ", "int32", (3, "n")),
])
def test_valid_leaf_specs(text, dtype, dims):
    spec = parse_tensor_spec(text)
    assert spec.dtype == dtype
    assert spec.dims == dims


@pytest.mark.parametrize("text,column,words", [
    ("f33[3]", 1, "unknown dtype"),
    ("f32(3)", 4, "expected '['"),
    ("f32[3", 6, "missing ']'"),
    ("f32[3,,4]", 7, "expected a dimension"),
    ("f32[3]x", 7, "unexpected text"),
    ("f32[3;4]", 6, "unexpected character ';'"),
    ("f32[-3]", 5, "cannot be negative"),
    ("", 1, "expected a dtype"),
    ("f32[2b]", 5, "cannot start with a digit"),
])
def test_invalid_specs_point_at_the_character(text, column, words):
    with pytest.raises(SpecError) as info:
        parse_tensor_spec(text)
    message = str(info.value)
    assert f"at character {column}:" in message
    assert words in message
    assert "\n" not in message


def test_pytree_spec_from_json():
    tree = parse_spec('{"w": "f32[16,8]", "b": "f32[8]", "layers": ["i32[2]", "bool[]"]}')
    assert tree["w"].dims == (16, 8)
    assert tree["layers"][1].dtype == "bool"


def test_bad_json_pytree_spec():
    with pytest.raises(SpecError, match="bad JSON pytree spec"):
        parse_spec('{"w": "f32[16,8]",}')
    with pytest.raises(SpecError, match="leaves must be spec strings"):
        parse_spec('{"w": 3}')


def test_symbolic_names_are_shared_across_specs():
    a, b = to_shape_dtype_structs(["f32[b,4]", "f32[b,2*b]"])
    assert a.shape[0] == b.shape[0]
    assert export.is_symbolic_dim(a.shape[0])
    assert str(b.shape[1]) == "2*b"
    assert a.dtype == np.float32


def test_static_specs_and_existing_structs_pass_through():
    sds = jax.ShapeDtypeStruct((3,), np.int32)
    out = to_shape_dtype_structs(["u8[2,3]", sds])
    assert out[0].shape == (2, 3) and out[0].dtype == np.uint8
    assert out[1] is sds


def test_constraints_reach_jax_export():
    (x,) = to_shape_dtype_structs(["f32[b]"], constraints=["b >= 4"])
    assert x.shape[0] >= 4


def test_symbolic_expression_jax_rejects():
    with pytest.raises(SpecError, match="not accepted by jax.export"):
        to_shape_dtype_structs(["f32[b**2]"])
