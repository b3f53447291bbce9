"""The one registry: ops, custom-call targets and composites, their conditions, and how misses are named."""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

from jaxconv.onnx import registry
from lowering_check import assert_onnx_matches_jax, onnx_op_types, x64_for


def test_every_construct_has_a_family_and_a_doc_line():
    entries = registry.every_construct()
    kinds = {e.kind for e in entries}
    assert kinds == {"op", "custom_call", "composite"}
    for e in entries:
        assert e.family and e.doc, e


@pytest.mark.parametrize("decorator", [registry.custom_call_target, registry.composite])
def test_registering_a_name_twice_fails(decorator):
    existing = "ApproxTopK" if decorator is registry.custom_call_target else "chlo.erf"
    registry.every_construct()  # the families are loaded
    with pytest.raises(ValueError, match="registered twice"):
        decorator(existing)(lambda ctx, op, inputs: [])


def test_lapack_targets_state_their_dtype_and_size_limit():
    for precision, dtype in (("s", "float32"), ("d", "float64")):
        for routine in ("potrf", "trsm", "getrf"):
            entry = registry.lookup_custom_call(f"lapack_{precision}{routine}_ffi")
            assert entry is not None and entry.conditions.startswith(f"{dtype}; static matrix sizes up to 256")


@pytest.mark.parametrize("target,words", [
    ("lapack_sgeev_ffi", "general eigendecomposition (LAPACK geev, from jnp.linalg.eig"),
    ("lapack_cheevd_ffi", "complex Hermitian eigendecomposition"),
    ("my_kernel", "custom call target 'my_kernel' has no ONNX equivalent"),
])
def test_an_unregistered_target_is_named_with_its_reason(target, words):
    assert registry.lookup_custom_call(target) is None
    assert words in registry.unsupported_target_reason(target)


X = np.linspace(-2.5, 2.5, 11)


def test_a_composite_within_its_conditions_is_one_onnx_op():
    model = assert_onnx_matches_jax(lambda x: jsp.erf(x), X.astype(np.float32))
    assert onnx_op_types(model) == ["Erf"]


def test_a_composite_outside_its_conditions_inlines_its_decomposition():
    with x64_for(X):
        model = assert_onnx_matches_jax(lambda x: jsp.erf(x) * jnp.float64(1.0), X)
    assert "Erf" not in onnx_op_types(model)
