"""The clean-up's rewrite rules turn down a node their pattern's root cannot match before the matcher runs,
and rewrite exactly what onnxscript's own rule set rewrites."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper

from jaxconv.onnx import passes


def _model() -> onnx.ModelProto:
    """x * 1, a Transpose pair that cancels, Relu twice and a Cast to the same type: each a rule's pattern."""
    nodes = [
        helper.make_node("Mul", ["x", "one"], ["a"]),
        helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0]),
        helper.make_node("Transpose", ["b"], ["c"], perm=[1, 0]),
        helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("Relu", ["d"], ["e"]),
        helper.make_node("Cast", ["e"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["f", "zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]), helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_rooted_rules_rewrite_what_the_plain_rules_rewrite():
    plain, rooted = ir.serde.deserialize_model(_model()), ir.serde.deserialize_model(_model())
    unrooted = passes._RewritePass(passes._rules())
    unrooted.rules = passes._rules()  # onnxscript's rule objects as they are, tried at every node
    assert not any(isinstance(r, passes._RootedRule) for r in unrooted.rules)
    unrooted(plain)
    passes._RewritePass(passes._rules())(rooted)
    got, want = ir.serde.serialize_model(rooted), ir.serde.serialize_model(plain)
    assert got.SerializeToString() == want.SerializeToString()
    assert len(got.graph.node) < len(_model().graph.node)  # rules did fire
    x = np.array([[-1.5, 0.0, 2.0], [3.0, -0.0, -4.0]], np.float32)
    run = ort.InferenceSession(got.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(run, np.maximum(x, 0))


def test_a_rooted_rule_never_starts_its_matcher_at_another_op():
    rule = next(r for r in passes._rules() if getattr(r, "name", "") and "Relu" in str(r._target_pattern.output_node))
    wrapped = passes._rooted(rule)
    assert isinstance(wrapped, passes._RootedRule)
    calls = []

    class Spy:
        def __getattr__(self, name):
            return getattr(rule, name)

        def try_rewrite(self, *args, **kwargs):
            calls.append(args[2].op_type)
            return rule.try_rewrite(*args, **kwargs)

    wrapped._rule = Spy()
    model = ir.serde.deserialize_model(_model())
    for node in list(model.graph):
        wrapped.try_rewrite(model, model.graph, node)
    assert calls and set(calls) == {"Relu"}
    assert wrapped.remove_nodes == rule.remove_nodes  # everything else is the rule's own


def test_rules_without_a_simple_root_stay_as_they_are():
    class Opaque:
        pass

    rule = Opaque()
    assert passes._rooted(rule) is rule
