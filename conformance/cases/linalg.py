"""Contractions and convolutions; a few decompositions that need LAPACK on CPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from conformance.case import arg, case

T = {"float32": (1e-4, 1e-4)}

case("op.dot_general.matmul", jnp.matmul, arg("f32[4,5]"), arg("f32[5,3]"), family="dot_general", tol=T)
case("op.dot_general.matvec", jnp.matmul, arg("f32[4,5]"), arg("f32[5]"), family="dot_general", tol=T)
case("op.dot_general.vecdot", jnp.dot, arg("f32[7]"), arg("f32[7]"), family="dot_general", tol=T)
case("op.dot_general.batched", jnp.matmul, arg("f32[2,4,5]"), arg("f32[2,5,3]"), family="dot_general", tol=T)
case("op.dot_general.einsum_bhqk", lambda q, k: jnp.einsum("bqhd,bkhd->bhqk", q, k), arg("f32[2,3,2,4]"), arg("f32[2,5,2,4]"),
     family="dot_general", tol=T)
case("op.dot_general.einsum_transposed", lambda a, b: jnp.einsum("ij,kj->ik", a, b), arg("f32[3,4]"), arg("f32[5,4]"),
     family="dot_general", tol=T)
case("op.dot_general.i8_to_i32", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32), arg("i8[3,4]"), arg("i8[4,2]"),
     family="dot_general")
case("op.dot_general.bf16_to_f32", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.float32), arg("bf16[3,8]"),
     arg("bf16[8,2]"), family="dot_general", tol={"float32": (1e-3, 1e-3)})
case("op.dot_general.outer", jnp.outer, arg("f32[4]"), arg("f32[3]"), family="dot_general")

DN = ("NHWC", "HWIO", "NHWC")


def conv(x, w, stride=(1, 1), padding="SAME", dil=(1, 1), groups=1, lhs_dil=(1, 1), dn=DN):
    return lax.conv_general_dilated(x, w, stride, padding, lhs_dilation=lhs_dil, rhs_dilation=dil,
                                    dimension_numbers=dn, feature_group_count=groups)


CT = {"float32": (1e-4, 1e-4), "float16": (1e-2, 2e-2)}
case("op.convolution.nhwc", conv, arg("f32[2,8,8,3]"), arg("f32[3,3,3,4]"), family="convolution", tol=CT)
case("op.convolution.nchw", lambda x, w: conv(x, w, dn=("NCHW", "OIHW", "NCHW")), arg("f32[2,3,8,8]"), arg("f32[4,3,3,3]"),
     family="convolution", tol=CT)
case("op.convolution.strided_valid", lambda x, w: conv(x, w, (2, 2), "VALID"), arg("f32[1,9,9,2]"), arg("f32[3,3,2,4]"),
     family="convolution", tol=CT)
case("op.convolution.dilated", lambda x, w: conv(x, w, dil=(2, 2)), arg("f32[1,9,9,2]"), arg("f32[3,3,2,2]"),
     family="convolution", tol=CT)
case("op.convolution.grouped", lambda x, w: conv(x, w, groups=2), arg("f32[1,6,6,4]"), arg("f32[3,3,2,6]"),
     family="convolution", tol=CT)
case("op.convolution.depthwise", lambda x, w: conv(x, w, groups=4), arg("f32[1,6,6,4]"), arg("f32[3,3,1,4]"),
     family="convolution", tol=CT)
case("op.convolution.conv1d", lambda x, w: lax.conv_general_dilated(x, w, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")),
     arg("f32[2,10,3]"), arg("f32[3,3,5]"), family="convolution", tol=CT)
case("op.convolution.conv3d", lambda x, w: lax.conv_general_dilated(x, w, (1, 1, 1), "VALID",
     dimension_numbers=("NDHWC", "DHWIO", "NDHWC")), arg("f32[1,4,5,5,2]"), arg("f32[2,2,2,2,3]"), family="convolution", tol=CT)
case("op.convolution.transpose", lambda x, w: lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=DN),
     arg("f32[1,4,4,3]"), arg("f32[3,3,3,2]"), family="convolution", tol=CT)
case("op.convolution.asymmetric_pad", lambda x, w: conv(x, w, padding=((0, 2), (1, 0))), arg("f32[1,5,5,1]"),
     arg("f32[2,2,1,1]"), family="convolution", tol=CT)
case("op.convolution.f16", conv, arg("f16[1,6,6,2]"), arg("f16[3,3,2,2]"), family="convolution", tol=CT)
case("op.convolution.weight_grad", lambda x, w: jax.grad(lambda w_: jnp.sum(conv(x, w_, (2, 2)) ** 2))(w),
     arg("f32[2,6,6,2]"), arg("f32[3,3,2,3]"), family="convolution", tol={"float32": (1e-3, 1e-3)})

case("op.linalg.cholesky", lambda a: jnp.linalg.cholesky(a @ a.T + 4 * jnp.eye(4)), arg("f32[4,4]"), family="custom_call",
     tol={"float32": (1e-3, 1e-4)})
case("op.linalg.solve", lambda a, b: jnp.linalg.solve(a @ a.T + 4 * jnp.eye(4), b), arg("f32[4,4]"), arg("f32[4,2]"),
     family="custom_call", tol={"float32": (1e-3, 1e-4)})
case("op.linalg.inv", lambda a: jnp.linalg.inv(a @ a.T + 4 * jnp.eye(4)), arg("f32[4,4]"), family="custom_call",
     tol={"float32": (1e-3, 1e-4)})
case("op.linalg.det", lambda a: jnp.linalg.det(a + 3 * jnp.eye(3)), arg("f32[3,3]"), family="custom_call",
     tol={"float32": (1e-3, 1e-4)})
case("op.linalg.solve_triangular", lambda a, b: jax.scipy.linalg.solve_triangular(jnp.tril(a) + 4 * jnp.eye(4), b, lower=True),
     arg("f32[4,4]"), arg("f32[4,3]"), family="custom_call", tol={"float32": (1e-3, 1e-4)})
case("op.linalg.qr", lambda a: jnp.abs(jnp.linalg.qr(a)[1]), arg("f32[4,3]"), family="custom_call", tol={"float32": (1e-3, 1e-4)})
case("op.linalg.eigh", lambda a: jnp.linalg.eigh(a + a.T)[0], arg("f32[4,4]"), family="custom_call", tol={"float32": (1e-3, 1e-4)})
case("op.fft.rfft", lambda x: jnp.abs(jnp.fft.rfft(x)), arg("f32[2,8]"), family="fft", tol={"float32": (1e-4, 1e-4)})
case("op.complex.abs", lambda re, im: jnp.abs(lax.complex(re, im) * (1 + 2j)), arg("f32[5]"), arg("f32[5]"), family="complex")
