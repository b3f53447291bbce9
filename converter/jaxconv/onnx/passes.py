"""Graph clean-up after lowering.

The generic work (constant folding, dead code, common subexpressions, Transpose/Reshape/Cast
chains, no-op Expand/Slice/Reshape) is onnxscript's optimizer, with a rule set that keeps IEEE
semantics: ``x + 0`` stays (it turns -0 into +0, which the lowerings rely on) and a Cast chain
only collapses when the middle type holds every value of the source exactly. The passes here are
the ones that need what only the lowering knows:

- ``drop_redundant_expands``: an Expand feeding an elementwise StableHLO op whose operands all
  have the result's shape (nodes the lowering marked ``same_shape_inputs``) is redundant, since
  ONNX broadcasting gives the same result.
- the graph outputs keep the signature's names.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from jaxconv.onnx import xla_division, xla_reassociation
from jaxconv.onnx.context import SAME_SHAPE_KEY, subgraph_inputs

__all__ = ["FOLD_MAX_ELEMENTS", "optimize", "clean_up", "drop_redundant_expands", "subgraph_inputs",
           "unique_value_names"]

FOLD_MAX_ELEMENTS = 1 << 16  # a folded constant may have at most this many elements
FOLD_INPUT_MAX_ELEMENTS = 1 << 20  # nor fold from inputs larger than this (a weight's Transpose still folds)
MERGE_MAX_ELEMENTS = 1 << 16  # equal initializers up to this size become one (per-layer copies of a mask)
_GROWING = frozenset({"Expand", "Tile", "ConstantOfShape"})


def optimize(model: ir.Model, opset: int) -> None:
    """Clean up a freshly lowered model in place: our passes, the fusion rewrites, onnxscript's optimizer."""
    drop_redundant_expands(model.graph)
    fold_weight_views(model.graph)
    xla_reassociation.fold_additions(model.graph)  # before add_chains sums the chains
    _apply_rewrites(model, opset)
    xla_division.rewrite(model.graph)  # after the rules that read a softmax's or a norm's Div
    xla_reassociation.rewrite(model.graph)  # after xla_division folds the reciprocals
    unique_value_names(model.graph)  # the rewrites' new values are named val_0, val_1, ... each time
    _strip_markers(model.graph)
    clean_up(model)
    _apply_rewrites(model, opset, after_clean_up=True)
    model.graph.sort()  # a rule that merges nodes (onnxscript's Slices -> Split) may place one after a reader
    _name_outputs_directly(model.graph)


def _apply_rewrites(model: ir.Model, opset: int, after_clean_up: bool = False) -> None:
    try:
        from jaxconv.onnx import rewrites
    except ModuleNotFoundError as e:
        if e.name != "jaxconv.onnx.rewrites":
            raise
        return
    if after_clean_up:
        rewrites.after_clean_up(model, opset)
    else:
        rewrites.apply(model, opset)


def _nodes(graph: ir.Graph) -> list[ir.Node]:
    return list(ir.traversal.RecursiveGraphIterator(graph))


def drop_redundant_expands(graph: ir.Graph) -> None:
    """Let ONNX broadcasting replace an Expand feeding an elementwise op whose other input has the full shape.

    Only nodes marked ``same_shape_inputs`` (the operands of an elementwise StableHLO op all have the
    result's shape) qualify, and one input that is not an Expand must remain.
    """
    for node in _nodes(graph):
        if node.metadata_props.get(SAME_SHAPE_KEY) != "1":
            continue
        expanded = [i is not None and _is_expand(i) for i in node.inputs]
        if all(expanded) or not any(expanded):
            continue
        for k, (value, is_expand) in enumerate(zip(node.inputs, expanded)):
            if is_expand:
                node.replace_input_with(k, value.producer().inputs[0])


def fold_weight_views(graph: ir.Graph) -> None:
    """Fold a Reshape or Squeeze of an initializer that nothing else reads into a new initializer (the same
    bytes), before the rewrites, which look for constant weights: a layer's slice of a stack of weights (a
    loop over layers lowered once per layer) is reshaped to the layer's shape. A view that adds axes (a
    broadcast's leading 1s) stays: the rules read it as the smaller constant broadcast, and so does ORT
    (its fused norms take a 1-D scale)."""
    for node in list(graph):
        if node.domain != "" or node.op_type not in ("Reshape", "Squeeze") or not node.inputs:
            continue
        data, out = node.inputs[0], node.outputs[0]
        if data is None or not data.is_initializer() or len(data.uses()) != 1 or data.is_graph_input():
            continue
        if data.const_value is None or data.is_graph_output() or out.is_graph_output():
            continue
        arr = _viewed(node, data.const_value.numpy())
        if arr is None or arr.ndim > len(data.const_value.shape):
            continue
        value = ir.Value(name=out.name, const_value=ir.tensor(arr), type=data.type, shape=ir.Shape(arr.shape))
        out.replace_all_uses_with(value)
        graph.remove(node, safe=True)
        graph.initializers.pop(data.name)
        graph.register_initializer(value)


def _viewed(node: ir.Node, arr: np.ndarray) -> np.ndarray | None:
    """``arr`` reshaped as the Reshape or Squeeze ``node`` reshapes it, when its operands are constants."""
    arg = node.inputs[1] if len(node.inputs) > 1 else None
    if arg is None or arg.const_value is None:
        return None
    dims = [int(d) for d in arg.const_value.numpy().reshape(-1)]
    try:
        if node.op_type == "Squeeze":
            return np.squeeze(arr, axis=tuple(dims))
        allowzero = node.attributes.get("allowzero")
        if allowzero is None or allowzero.as_int() == 0:
            dims = [arr.shape[k] if d == 0 and k < arr.ndim else d for k, d in enumerate(dims)]
        return arr.reshape(dims)
    except (ValueError, np.exceptions.AxisError):
        return None


def _is_expand(value: ir.Value) -> bool:
    producer = value.producer()
    return producer is not None and producer.op_type == "Expand" and producer.domain == "" and producer.inputs[0] is not None


def _strip_markers(graph: ir.Graph) -> None:
    for node in _nodes(graph):
        node.metadata_props.pop(SAME_SHAPE_KEY, None)


def _should_fold(node: ir.Node) -> bool | None:
    """Never fold a constant broadcast into a bigger tensor (it costs file size and memory, not time)."""
    if node.domain == "" and node.op_type in _GROWING:
        out = node.outputs[0]
        if out.shape is None or not out.shape.is_static():
            return False
        size = int(np.prod(out.shape.numpy()))
        first = node.inputs[0] if node.inputs else None
        source = first.const_value.size if first is not None and first.const_value is not None else 1
        if node.op_type == "ConstantOfShape" or size > max(16, 4 * source):
            return False
    return None


def _rules() -> list:
    """onnxscript's default rewrite rules (0.7), named one by one, less two that change IEEE results
    and one that cuts wrongly, one of them for assignments only.

    - ``x + 0 -> x`` would turn the lowering's -0 + 0 = +0 (Relu, XLA's max) back into -0.
    - ``Cast(Cast(x, f32), f16) -> Cast(x, f16)`` rounds once instead of twice, which can differ.
    - ``Slice(x, 0:k), Slice(x, k:n)`` on the last axis -> ``Split(x, num_outputs=2)`` for k = n // 2:
      for an odd n the Split cuts [k + 1, k], and it was placed after a reader of its first output
      (``jnp.linalg.inv``). ``rewrites/symbolic.py`` merges such Slices into a Split with their sizes.
    - ``Reshape -> MatMul -> Reshape`` -> ``MatMul`` checks shapes only (a batched rhs met the wrong rows):
      ``matmul_rules.py`` keeps it for a matrix rhs.
    - ``ScatterND(data, every row, updates) -> updates`` ignores ``reduction``: a one-row ``x.at[0].min(u)``
      returned ``u``. ``scatter_rules.py`` keeps it for plain assignment.

    ``x * 1``, ``x - 0`` and ``x / 1`` are exact for every float, -0 and NaN included. jaxconv's own:
    a lossless Cast round trip is ``x``; a Cast after a Transpose that a MatMul reads goes before it
    (``cast_rules.py``: a graph ONNX Runtime 1.32 crashes on); a Reshape to its input's shape written with a
    -1 for a symbolic size is ``x``, and a Reshape of an Unsqueeze or Squeeze reads its input (``reshape_rules.py``).
    """
    from onnxscript.rewriter.rules import common as c

    from jaxconv.onnx import matmul_rules as mr
    from jaxconv.onnx import minmax_rules as mm
    from jaxconv.onnx import reshape_rules as rr
    from jaxconv.onnx.cast_rules import cast_before_transpose_rule, lossless_cast_round_trip_rule
    from jaxconv.onnx.scatter_rules import whole_scatter_assignment_rule

    return [
        *c.mul_by_1_rule.commute(), c.sub_0_rule, c.div_by_1_rule, c.dropout_zero_rule, c.dropout_inference_rule,
        mr.one_reshape_matmul_reshape_rule, mr.two_reshapes_matmul_reshape_rule,  # only for a matrix rhs
        c.cast_constant_of_shape_rule, c.cast_constant_of_shape_without_value_rule,
        c.collapse_slice_rule, c.collapse_slice2_rule, c.materialize_reshape_shape_rule,
        mm.min_min_rule, mm.max_max_rule, mm.min_max_rule, mm.max_min_rule,  # bound names unique
        c.successive_clip_relu_rule, c.successive_relu_clip_rule, c.successive_relu_rule, c.successive_clip_rule,
        c.no_op_cast_rule, c.no_op_expand_rule, c.flatten_to_reshape_rule, c.reshape_reshape_rule,
        rr.inferred_same_shape_reshape_rule, rr.reshape_of_unsqueeze_rule, rr.reshape_of_squeeze_rule,
        c.no_op_transpose_rule, c.transpose_transpose_rule, c.unsqueeze_unsqueeze_rule,
        c.squeeze_reshape_1d_rule, c.no_op_dynamic_scatter_nd_rule, whole_scatter_assignment_rule,
        c.normalize_pad_format_conv_rule, c.normalize_pad_format_conv_integer_rule,
        c.fuse_pad_into_conv_rule, c.fuse_pad_into_conv_integer_rule,
        c.fuse_batchnorm_into_conv_rule, c.fuse_batchnorm_into_conv_transpose_rule, c.fuse_batchnorm_into_gemm_rule,
        c.remove_optional_bias_from_conv_rule, c.remove_optional_bias_from_conv_transpose_rule,
        c.remove_optional_bias_from_qlinear_conv_rule, c.remove_optional_bias_from_gemm_rule,
        lossless_cast_round_trip_rule, cast_before_transpose_rule,
    ]


def clean_up(model: ir.Model) -> None:
    """onnxscript's optimizer (constant folding, rewrite rules, dead code, CSE), with jaxconv's limits and rules.

    Its log messages (skipped folds, shape merges) are notes for onnxscript's developers: they
    stay quiet unless the user configures logging below WARNING for those packages.
    """
    with _quiet("onnxscript", "onnx_ir"):
        _clean_up(model)


@contextlib.contextmanager
def _quiet(*names: str) -> Iterator[None]:
    loggers = [logging.getLogger(n) for n in names]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        if lg.level == logging.NOTSET:
            lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)


def _clean_up(model: ir.Model) -> None:
    from onnxscript.optimizer import FOLDED_FROM_KEY

    declared = [(o.type, o.shape) for o in model.graph.outputs]
    loop = ir.passes.PassManager([
        _FoldPass(),
        _FoldSplitsPass(),
        _RewritePass(_rules()),
        common_passes.RemoveUnusedNodesPass(),
        _UniqueNamesPass(),  # a folded value becomes an initializer under its name: two val_0 would clash
    ], steps=2, early_stop=True)
    ir.passes.Sequential(
        loop,
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common_passes.LiftSubgraphInitializersToMainGraphPass(),
        common_passes.DeduplicateInitializersPass(size_limit=MERGE_MAX_ELEMENTS),  # then CSE merges their readers
        common_passes.CommonSubexpressionEliminationPass(),
        _SubgraphCsePass(),
        common_passes.RemoveUnusedNodesPass(),
        common_passes.NameFixPass(),
    )(model)
    unique_value_names(model.graph)
    for value in _values(model.graph):
        value.metadata_props.pop(FOLDED_FROM_KEY, None)
    _keep_output_types(model.graph, declared)
    drop_unread_initializers(model.graph)


def drop_unread_initializers(graph: ir.Graph) -> int:
    """Remove the initializers that no node of ``graph`` or of its subgraphs reads; returns how many.

    onnx_ir's dead-code pass keeps an initializer while any node reads it, also a node of a subgraph a
    rule took out of the model (an If or a Loop it replaced): an unrolled two-layer LSTM made LSTM ops
    kept its two concatenated weights in the file, read by nothing ORT runs."""
    live = {id(graph)} | {id(node.graph) for node in _nodes(graph)}  # graphs without nodes read nothing
    dropped = 0
    for value in list(graph.initializers.values()):
        if value.is_graph_input() or value.is_graph_output():
            continue
        if not any(use.node.graph is not None and id(use.node.graph) in live for use in value.uses()):
            assert value.name is not None
            del graph.initializers[value.name]
            dropped += 1
    return dropped



def _keep_output_types(graph: ir.Graph, declared: list[tuple[ir.TypeProtocol | None, ir.Shape | None]]) -> None:
    """Give each graph output back the type and shape it had before the clean-up where it lost them.

    Common-subexpression elimination keeps the first of two equal nodes and gives its value the graph
    output's name, not its shape: a scalar output then has no shape, which onnx.checker refuses
    ("Field 'shape' of 'type' is required").
    """
    if len(declared) != len(graph.outputs):
        return
    for value, (type_, shape) in zip(graph.outputs, declared):
        if value.type is None and type_ is not None:
            value.type = type_
        if value.shape is None and shape is not None:
            value.shape = shape


class _SubgraphCsePass(ir.passes.InPlacePass):
    """onnx_ir's common-subexpression elimination, which stops at If and Loop nodes, in every branch and body
    too, outer graphs first (so a body's captures of merged values are one value when its turn comes). A
    ``fori_loop`` body that reads six sequences at its counter computed the index six times a step."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in _subgraphs(model.graph):
            done = common_passes.CommonSubexpressionEliminationPass()(ir.Model(graph, ir_version=model.ir_version))
            modified = modified or done.modified
        return ir.passes.PassResult(model, modified)


def _subgraphs(graph: ir.Graph) -> list[ir.Graph]:
    """Every If branch and loop body under ``graph``, each before the ones nested in it."""
    found: list[ir.Graph] = []
    pending = [graph]
    while pending:
        for node in pending.pop(0):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    found.append(attr.value)
                    pending.append(attr.value)
                elif attr.type == ir.AttributeType.GRAPHS:
                    found.extend(attr.value)
                    pending.extend(attr.value)
    return found


class _FoldPass(ir.passes.InPlacePass):
    """onnxscript's constant folding (with ONNX shape inference per node) under jaxconv's size limits."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        from onnxscript.optimizer import fold_constants

        with np.errstate(all="ignore"):  # folding a masked branch (log(0) in T5's position buckets) is not an error
            result = fold_constants(model, onnx_shape_inference=True, input_size_limit=FOLD_INPUT_MAX_ELEMENTS,
                                    output_size_limit=FOLD_MAX_ELEMENTS, should_fold=_should_fold)
        return ir.passes.PassResult(model, result.modified)


class _FoldSplitsPass(ir.passes.InPlacePass):
    """A Split of a constant as constants: onnxscript's folding skips ops with several outputs (a rotary
    table looked up by positions and cut into sin and cos, once the positions' broadcast has gone)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for node in list(model.graph):
            if node.op_type != "Split" or node.domain not in ("", "ai.onnx") or not node.inputs:
                continue
            parts = _split_parts(node)
            if parts is None:
                continue
            for out, part in zip(node.outputs, parts):
                folded = _renamed(model.graph, ir.Value(name=f"{out.name or 'split'}_folded", type=out.type,
                                                        shape=ir.Shape(part.shape)))
                folded.const_value = ir.tensor(part, name=folded.name)
                model.graph.register_initializer(folded)
                out.replace_all_uses_with(folded, replace_graph_outputs=True)
            modified = True
        return ir.passes.PassResult(model, modified)


def _split_parts(node: ir.Node) -> list[np.ndarray] | None:
    """The parts of a Split whose input and sizes are constants, within the folding limits; else None."""
    x = node.inputs[0]
    arr = x.const_value.numpy() if x is not None and x.const_value is not None else None
    if arr is None or arr.size > FOLD_MAX_ELEMENTS or arr.ndim == 0:
        return None
    axis = node.attributes.get_int("axis", 0) % arr.ndim
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        sizes = node.inputs[1].const_value
        if sizes is None:
            return None
        bounds = np.cumsum(sizes.numpy())[:-1]
    elif "split" in node.attributes:  # opsets before 13
        bounds = np.cumsum(node.attributes.get_ints("split", []))[:-1]
    elif arr.shape[axis] % len(node.outputs) == 0:
        bounds = np.arange(1, len(node.outputs)) * (arr.shape[axis] // len(node.outputs))
    else:
        return None
    parts = np.split(arr, bounds, axis=axis)
    return parts if len(parts) == len(node.outputs) else None


def _renamed(graph: ir.Graph, value: ir.Value) -> ir.Value:
    """``value`` under a name no initializer of ``graph`` has yet."""
    base, k = value.name, 0
    while value.name is None or value.name in graph.initializers:
        k += 1
        value.name = f"{base}_{k}"
    return value


class _UniqueNamesPass(ir.passes.InPlacePass):
    """``unique_value_names`` as a pass."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, unique_value_names(model.graph))


class _RewritePass(ir.passes.InPlacePass):
    """onnxscript's RewritePass, trying only the rules whose every op occurs in the model.

    The rewriter tries each rule at each node; most rules concern ops our graphs rarely hold
    (Conv, BatchNormalization, ScatterND), and skipping them keeps the clean-up fast.
    """

    def __init__(self, rules) -> None:
        super().__init__()
        self.rules = [_rooted(r) for r in rules]
        self.needs = [_ops_of(r) for r in rules]

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        from onnxscript.rewriter import pattern

        present = {(n.domain, n.op_type) for n in _nodes(model.graph)}
        rules = [r for r, need in zip(self.rules, self.needs) if need <= present]
        count = pattern.RewriteRuleSet(rules).apply_to_model(model) if rules else 0
        return ir.passes.PassResult(model, bool(count))


class _RootedRule:
    """A rewrite rule that turns down, before its matcher starts, a node its pattern's root cannot match.

    onnxscript's rewriter tries every rule at every node; the matcher's first test is the root
    pattern node's op type and domain against the node's, after setting up a match. The same test
    done first gives the same rewrites for a tenth of the cost at the nodes that fail it.
    """

    def __init__(self, rule, root) -> None:
        self._rule, self._op, self._domain = rule, root.op, root.domain

    def __getattr__(self, name: str):
        return getattr(self._rule, name)

    def try_rewrite(self, model, graph_or_function, node, **kwargs):
        if not (self._op.matches(node.op_type) and self._domain.matches(node.domain)):
            return None
        return self._rule.try_rewrite(model, graph_or_function, node, **kwargs)


def _rooted(rule):
    """``rule`` as a ``_RootedRule`` when its matcher is onnxscript's simple one (it matches the root first)."""
    from onnxscript.rewriter._matcher import SimplePatternMatcher

    target = getattr(rule, "_target_pattern", None)  # onnxscript keeps both private: degrade to the rule
    if target is None or not target.has_single_output_node \
            or type(getattr(rule, "_matcher", None)) is not SimplePatternMatcher:
        return rule
    root = target.output_node
    if not (hasattr(root, "op") and hasattr(root, "domain")):
        return rule
    return _RootedRule(rule, root)


def _ops_of(rule) -> set[tuple[str, str]]:
    """(domain, op type) of every node in a rule's pattern; empty (always tried) when unknown."""
    target = getattr(rule, "_target_pattern", None)  # onnxscript keeps it private: degrade to trying the rule
    if target is None:
        return set()
    ops = set()
    for node in target:
        ident = node.op_identifier()
        if ident is not None:
            ops.add(tuple(ident[:2]))
    return ops


def _values(graph: ir.Graph) -> list[ir.Value]:
    out = list(graph.inputs) + list(graph.initializers.values())
    for node in _nodes(graph):
        out.extend(node.outputs)
    return out


def unique_value_names(graph: ir.Graph) -> bool:
    """Give every named value of ``graph`` and of its subgraphs a name no other value of the model has.

    onnx_ir's NameFixPass only keeps a subgraph's names apart from its enclosing graphs' names
    seen so far; a main-graph value after an If may still take a name used inside a branch, and
    ONNX Runtime refuses such a model (SSA form). The main graph's inputs and outputs keep their
    names; a subgraph value's name is free to change (branches and bodies bind by position).
    Unnamed values stay unnamed (NameFixPass names them). Returns whether a name changed.
    """
    used: set[str] = set()
    seen: set[int] = set()
    counter: dict[str, int] = {}
    renamed = False

    def claim(value: ir.Value) -> None:
        nonlocal renamed
        if id(value) in seen or not value.name:
            return
        seen.add(id(value))
        base = name = value.name
        while name in used:
            counter[base] = counter.get(base, 0) + 1
            name = f"{base}_{counter[base]}"
        renamed |= name != base
        value.name = name
        used.add(name)

    for value in [*graph.inputs, *graph.outputs]:
        claim(value)

    def enter(sub: ir.Graph | ir.Function) -> None:
        for value in sub.inputs:
            claim(value)
        if isinstance(sub, ir.Graph):
            for value in list(sub.initializers.values()):
                claim(value)

    enter(graph)
    for node in ir.traversal.RecursiveGraphIterator(graph, enter_graph=enter):
        for value in node.outputs:
            claim(value)
    return renamed


def _name_outputs_directly(graph: ir.Graph) -> None:
    """Drop an Identity in front of a graph output when its input can take the output's name.

    The input must be computed by a node of the same graph (not a graph input, a constant or an
    outer value) and not be a graph output itself. Subgraphs keep their Identities: they are how
    a body returns an outer value.
    """
    for node in list(graph):
        if node.op_type != "Identity" or node.domain != "" or not node.outputs[0].is_graph_output():
            continue
        src, out = node.inputs[0], node.outputs[0]
        if src is None or src.is_graph_output() or src.producer() is None or src.producer().graph is not graph:
            continue
        name = out.name
        index = [k for k, o in enumerate(graph.outputs) if o is out]
        if len(index) != 1:
            continue
        out.name = None
        src.name = name
        if src.type is None:
            src.type = out.type
        if out.shape is not None:
            src.shape = out.shape  # the signature's shape, symbolic dims named
        graph.outputs[index[0]] = src
        graph.remove(node, safe=True)

