"""The fuzzer's layer forms (conformance/fuzz/layers.py) and its ``wide`` model kind: the rewrites they reach.

A 150-program campaign never fired 29 of the ONNX rewrites: the random programs rarely take their forms,
and the model kinds rarely the sizes some need. ``layers`` draws each rule's form in the random programs
(small, with closed-over weights and the input sets' edge values); the ``wide`` model kind draws a
transformer layer at the sizes where the size-bound rules fire. Here each form makes valid programs, the
random programs draw them, and each rule fires on a generated program.
"""

from __future__ import annotations

import collections
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from conformance.fuzz import layers  # noqa: E402
from conformance.fuzz import run as fuzz_run  # noqa: E402
from conformance.fuzz.generate import generate, input_values  # noqa: E402
from conformance.fuzz.models import DRAWN, KINDS, generate_model  # noqa: E402

WIDE_RULES = ("attention_heads", "dense_bias", "select_gathers", "where_products", "expert_split")


def test_every_layer_form_makes_programs_jax_runs():
    """Each form, alone, traces for every seed tried and runs under jax.jit on its edge inputs; the forms that
    need weights close over constants (``_w``), and the attention form converts at opset 23."""
    for name in layers.FORMS:
        made = [p for p in (layers.program(name, seed) for seed in range(4)) if p is not None]
        assert len(made) == 4, name
        for seed, p in enumerate(made[:2]):
            assert p.inputs and len(p.steps) == 1, (name, p.source())
            fuzz_run.reference(p, input_values(p, "edge", seed))  # raises Invalid where jax rejects it
        if name not in ("clamps", "einsum_order", "kv_broadcast", "matmul_order", "weighted_sums", "column_sums",
                        "broadcast_spans", "repeat_gathers", "nearest_resize", "axis_products", "unit_scale"):
            assert all("_w(" in p.source() for p in made), name
        assert all(p.opset == (23 if name == "attention" else None) for p in made), name


def test_random_programs_draw_the_layer_forms_among_their_ops():
    """A step in five or so of the random programs is a layer form; every form is drawn within 200 programs,
    and a program holding the attention form is converted at opset 23."""
    ops: collections.Counter[str] = collections.Counter()
    steps = opset23 = 0
    for seed in range(200):
        p = generate(seed, family="random")
        ops.update(p.ops())
        steps += len(p.steps)
        opset23 += p.opset == 23
        assert p.opset == (23 if "attention" in p.ops() else None), p.ops()
    drawn = {op for name in layers.FORMS for op in ops if _form_of(op) == name}
    assert {_form_of(op) for op in drawn} == set(layers.FORMS), sorted(set(layers.FORMS) - {_form_of(op) for op in drawn})
    assert 0.1 < sum(ops[op] for op in drawn) / steps < 0.35
    assert opset23 > 0


def _form_of(op: str) -> str | None:
    """The form of ``layers.FORMS`` a step's op name comes from."""
    named = {"hard_tanh": "clamps", "clamp_where": "clamps", "clamp_where2": "clamps", "weight_grad": "einsum_order",
             "heads_grad": "einsum_order", "heads_vjp": "einsum_order", "gqa_scores": "einsum_order",
             "gqa_values": "einsum_order", "one_hot_rows": "one_hot_rows", "embed_take": "gather_fill",
             "gathered_product": "gather_matmul", "kv_scores": "kv_broadcast", "kv_values": "kv_broadcast",
             "kv_index": "kv_broadcast", "repeat_rows": "repeat_gathers", "upsample": "nearest_resize",
             "pointwise_conv": "pointwise_conv", "resize": "axis_products", "spatial_sum": "column_sums",
             "group_stats": "broadcast_spans", "vmap_linear": "weight_first", "einsum_values": "matmul_order",
             "weighted_rows": "weighted_sums", "merged_scale": "reshape_scale", "scaled_heads": "product_scale",
             "heads_out": "head_merge", "ones_mask": "unit_scale", "attention": "attention"}
    if op in named:
        return named[op]
    if op.startswith("cell_unrolled_"):
        return "unrolled_steps"
    if op.startswith("cell_scan_"):
        return "lstm" if "lstm" in op else "gru"
    return "loop_weight_first" if op.startswith("eqx_scan_") else None


@pytest.mark.parametrize("rule", list(layers.FORMS))
def test_each_layer_form_fires_its_rule(rule):
    """The form named after a rule, alone as a program, fires that rule for one of its first seeds (most fire
    for most seeds: a half float, an edge weight, a batch or head of one leave some to the lowering as it is)."""
    tried = []
    for seed in range(8):
        p = layers.program(rule, seed)
        if p is None:
            continue
        outcome = fuzz_run.evaluate(p, "onnx", seed)
        assert outcome.status in ("ok", "mismatch"), (outcome.status, outcome.detail, p.source())
        if outcome.rules.get(rule):
            return
        tried.append(p.ops()[0])
    pytest.fail(f"{rule} fired on none of {tried}")


def test_the_wide_kind_fires_the_size_bound_rules_and_is_drawn_twice_as_often():
    """One ``wide`` program (a transformer layer over 64-128 tokens of width 256, top-1 routed experts after
    it) fires every rule that needs its sizes; the model programs draw it twice as often as another kind."""
    p = generate_model(7, ["wide"])
    assert p.ops()[:3] == ["dense_q", "dense_k", "dense_v"] and p.opset is None and "'float32'" in p.source()
    outcome = fuzz_run.evaluate(p, "onnx", 7)
    assert outcome.status in ("ok", "mismatch"), (outcome.status, outcome.detail)
    assert all(outcome.rules.get(rule) for rule in WIDE_RULES), {r: outcome.rules.get(r) for r in WIDE_RULES}
    assert "wide" in KINDS and DRAWN.count("wide") == 2 and len(DRAWN) == len(KINDS) + 1


def test_a_softmax_xla_computes_with_a_fused_multiply_add_is_named_xla_fma():
    """softmax(s * c) of a huge score: XLA takes the max of s * c rounded and s * c - max as one FMA, so jax.jit
    gives NaN (exp of the product's rounding error) where the artifact, like jax without jit, gives 0.25 each.
    The experiment runs jax.jit without FMA instructions and names the difference; a wrong result keeps its kind."""
    import numpy as np

    from conformance.fuzz import known
    from conformance.fuzz.compare import compare_all
    from conformance.fuzz.driver import _relabel_xla_fma, class_of
    from conformance.fuzz.minimise import Failure
    from conformance.fuzz.program import FuzzProgram, Step, Value, infer_types

    p = infer_types(FuzzProgram(inputs=[0], steps=[Step("softmax", (0,), "jax.nn.softmax({0} * 0.707107, axis=-1)", 1)],
                                outputs=[1], types={0: Value((1, 4), "float32")}))
    inputs = [np.full((1, 4), 6.363963e29, np.float32)]
    expected = fuzz_run.reference(p, inputs)
    assert np.isnan(expected[0]).all()  # XLA's fused multiply-add; the softmax of four equal scores is 0.25 each
    right, wrong = [np.full((1, 4), 0.25, np.float32)], [np.full((1, 4), 0.5, np.float32)]
    named = _relabel_xla_fma(Failure(p, inputs, "mismatch", compare_all(expected, right), "", expected, right))
    assert named.diff.kind == "xla-fma" and known.match(class_of(named, "onnx")) is not None
    kept = _relabel_xla_fma(Failure(p, inputs, "mismatch", compare_all(expected, wrong), "", expected, wrong))
    assert kept.diff.kind == "nan"
