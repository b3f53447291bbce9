"""Graph rewrites that give ONNX Runtime the forms its fused kernels expect.

The lowering emits exact, general graphs; the rules here turn parts of them into forms ORT runs
faster without changing the numbers:

- ``unrolled_steps``: straight-line copies of one recurrence step (a Python loop over time steps,
  ``hk.static_unroll``, ``lax.scan(unroll=True)``) folded into the Loop ``lax.scan`` lowers to, first, so
  that every rule below reads it as a scan (on symbolic inputs after ``symbolic.name_dims``, which gives
  the copies' row reads constant bounds);
- ``unrolled_bodies``: a Loop body of k copies of one step (``lax.scan(unroll=k)``, ``nnx.RNN(unroll=k)``)
  folded into one step over k times the trips, so that the rules below read it as a scan too;
- ``zero_bias``: an Add of a constant of zeros that does not broadcast dropped, as XLA drops it;
- ``symbolic``: Expands that broadcasting makes redundant, found through symbolic dimensions;
- ``keepdims``: ``Unsqueeze`` of a reduction's result folded into the reduction (``keepdims=1``);
- ``softmax``: jax.nn.softmax / log_softmax as the Softmax / LogSoftmax ops;
- ``activations``: jax.nn.gelu's tanh form as Gelu (opset 20), ``max(x, 0)`` as Relu (+0.0 kept) and
  jax.nn.leaky_relu's select as LeakyRelu, so ORT fuses them into the Conv or Gemm before; later,
  ``negated_products``: a SiLU's or a sigmoid's Neg of a product by a constant weight (a MatMul's, a Conv's with
  its bias, after ``conv_affine`` too) folded into the weight;
- ``activations`` also: jax.nn.hard_swish (Keras' ``* (1 / 6)`` too) as HardSwish (opset 14) for the Conv;
- ``broadcasts``: constants broadcast to full size cut back to the shape that carries their values;
- ``pooling``: max pooling's NaN/-inf guard behind an ``If`` that runs it only where the input's sum is NaN
  or -inf (a ``Greater`` than -inf); last,
  ``pool_chains``: the pools on ``[N, C, H, W]`` itself, one such If for a chain of conv and pool layers;
- ``conv_pads`` (``after_clean_up``: onnxscript's rules would fold its Pad back): a Conv's padding as an
  explicit Pad where its constant weights hold an infinity or a NaN (ORT's blocked-layout Conv skips padded
  places, so a padded zero times an infinite weight gave no NaN);
- ``batched_chains`` (``after_clean_up`` too): identical elementwise chains over small tensors (an optimizer's
  update of each parameter) run once over their concatenation, a Split giving each its part;
- ``shapes``: integer shape arithmetic and mask broadcasts in fewer nodes;
- ``zeros``: signed-zero fixes that provably change nothing dropped; ``ReduceSum / n`` as ReduceMean;
- ``squeezes``: Squeeze/Unsqueeze pairs of the same axes cancelled (jnp.take's index checks);
- ``unit_scale``: a Mul by ones that only broadcasts dropped where its readers broadcast anyway;
- ``range_checks``: an integer ``lo <= x & x <= hi`` as ``Clip(x, lo, hi) == x``;
- ``layer_norm``: a layer norm over the last axis (two-pass or ``jnp.var``'s, or Flax's one-pass variance;
  divided by the square root or times its reciprocal) as the LayerNormalization op (opset 17); a post-norm
  residual Add before it as Sum (no SkipLayerNormalization); behind an overflow guard unless bounded, the guard
  reading one test of the graph's float inputs where their bound proves it (``_input_guard``, as ``mask_min``'s
  and ``masked_softmax``'s tests do);
- ``keras_norm``: Keras' layer norm (``x * inv - mean * inv``: the mean folded into an offset) as that op too;
- ``rms_norm``: an RMS norm over the last axis in the form ORT fuses (``Pow(x, 2)``, a Div, a scale);
- ``one_hot_rows``: a product of one-hot rows by a constant table (an embedding looked up the accelerators'
  way) as a Gather of the table's rows;
- ``split_matmul``: a MatMul by a constant (and a constant bias) whose result is only split by columns, or
  reshaped into heads and split per head (GPT-NeoX's, BLOOM's q/k/v), as one MatMul per part;
- ``attention``: a scaled dot-product attention block between head Transposes as the Attention op
  (opset 23), behind a guard that runs today's nodes where the scores could be non-finite or huge;
- ``attention_heads``: q, k and v split into heads by a Reshape and a Transpose computed head-major, by one
  MatMul with the weight laid out per head (three Transposes of four per layer go), heads first
  ([h, b, t, dh]) where every reader up to the merge treats the leading axes as batch axes;
- ``mask_min``: an attention mask's Where with a fill at or below -1e4 as a Min where every input is above the fill (If);
- ``einsum_order``: a MatMul between Transposes and Reshapes that merge free axes (grouped-query attention's
  einsums) planned again, either operand on the left, so the fewest elements are transposed; on symbolic
  sizes too, read through the run-time shape arithmetic of the Reshape targets (``_dim_products``);
- ``matmul_order``: a MatMul between Transposes computed with its operands swapped where Transposes go;
- ``broadcast_matmul_order``: the same for a MatMul with a broadcast operand (a mixture of experts'
  ``einsum('th,ehm->etm')``, traced with the weights on the left);
- ``expert_sum``: a mixture of experts' routing-weighted sum of every expert's
  ``act(x @ gate[e]) * (x @ up[e]) @ down[e]`` as 2-D MatMuls by the experts' weights side by side
  (hidden units [t, e * m], each expert's block scaled by its weight, one product over ``e * m``): no
  batched products, no sum pass; reassociated;
- ``expert_columns``: a MatMul of [t, h] rows by constant [e, h, m] weights as one MatMul by the
  weights side by side ([h, e * m], which ORT prepacks), a Reshape and a Transpose, where ``2 t <= h``;
- ``expert_split``: a batched MatMul by constant [e, m, h] weights (the experts' second product) as a Split,
  one 2-D MatMul per expert (prepacked) and a Concat, where ``8 t <= m`` and ``t * m * h >= 2 ** 22``;
- ``layout``: Transposes pushed through layout-blind ops until they cancel, so consecutive conv and
  pool layers stay NCHW;
- ``strided_slices``: ``x[..., ::2]`` and ``x[..., 1::2]`` (interleaved rotary embeddings) as one Split of pairs;
- ``reshape_chains`` (in ``squeezes``): a Reshape of an Unsqueeze, Squeeze or Reshape as one Reshape of
  the value before them, or that value where the shape comes back to it;
- ``head_merge``: a Transpose of the axes a Reshape merges into a MatMul's contracted axis done as far as
  the leading axes need, the weight's rows reordered instead;
- ``early_transposes``: a Transpose after Pads, Slices and Concats of one tensor (a padded NHWC image)
  moved before them, onto that smaller tensor (where the Conv then takes the Pad as its own padding);
- ``transposes``: a Transpose that ORT runs on its slow path only because of size-1 axes as a one-axis move;
- ``rotary``: a rotary embedding's ``rotate_half`` Neg folded into the sine table, the tables laid out whole;
- ``tri_masks``: a Where that fills a triangle (a causal mask) as Trilu, and a Sub for a fill other than +0;
- ``where_consts``: a Where's constant operands (a mask's fill) cut back to the shape that carries them;
- ``sum_pool``: sum pooling's one-channel Conv of ones over every plane as a depthwise Conv over the channels,
  and a mean pool (those sums divided by the window size) as one AveragePool;
- ``conv_affine``: a Sub of a constant in a Conv's affine chain (batch norm after a biased Conv) as an Add,
  and the chain's constant Muls and Adds folded into the Conv's weights and bias where ORT's own Conv+Mul
  and Conv+Add fusions would fold them (the same bits);
- ``row_slices``: a Slice of rows (a classifier's first token) moved up through the row-wise ops before it,
  so the last layer computes only the rows read;
- ``gather_matmul``: a product of gathered rows by a constant matrix (a graph network's ``nodes[senders] @ w``)
  as the gather of the table's product, where the indices outnumber the table's rows;
- ``product_scale``: a Mul by a one-element constant after a Reshape of a MatMul's product (q's scale once
  split into heads) moved next to the product, where ORT folds it into the MatMul's alpha;
- ``scan_last_row``: a Scan's stacked output read only at its last row (``ys[-1]``, ``nn.RNN(...)[:, -1]``)
  where each row is the step's new carry, as the final carry (the Scan stops stacking it);
- ``k_blocks``: a MatMul by a constant whose left operand's rows are a multiple of 4 KiB (a feed-forward
  down-projection from width 1024, 2048, ...), which ORT's GEMM runs slowly, computed in column blocks
  of that operand's elementwise producers and summed;
- ``add_chains``: a chain of float additions (the feed-forward blocks' partial sums, the residual, the
  bias) as one Sum of them in the same order;
- ``weighted_sums``: a sum over rows weighted by one number a row (masked mean pooling, attention pooling)
  as a MatMul of the weights by the rows;
- ``column_sums``: a long float sum over middle axes (an NHWC activation's spatial axes) summed in blocks of
  rows where they lie, instead of Transposed last and padded;
- ``broadcast_spans``: a small operand broadcast along a short run of last axes (a group norm's statistics)
  expanded along them, so ORT's elementwise kernels run on long runs;
- ``gather_fill``: jnp.take's fill for out-of-range indices as an extra row of a constant table that the
  indices point at, instead of a Where over the whole lookup;
- ``repeat_gathers``: jnp.repeat's Expand of a new axis merged into the one before it as a Gather of that
  axis (ORT's Expand copies in short runs);
- ``kv_broadcast``: grouped-query attention's repeated key/value heads (jnp.repeat's Expands, before
  ``repeat_gathers`` reads them, or a Gather) left to the MatMul's broadcast of its batch axes instead of
  copied, on a symbolic batch too;
- ``sort_zeros``: a float top-k's pass that orders -0.0 after +0.0 (a full TopK of the axis)
  behind an If that runs it only where the input holds a -0.0;
- ``nan_reduce``: a float max/min reduction's NaN propagation (an IsNaN pass, its reduction, a Where) behind
  an If that runs it only where the input holds a NaN;
- ``reshape_scale``: an elementwise op between a Reshape and the Reshape back as the op alone (axes
  regrouped to be scaled), so the layout rule and ORT can cancel the Transposes around it;
- ``weight_first``: a vmapped ``W @ x`` (Equinox's Linear) between Transposes as ``x @ Wᵀ``;
- ``loop_weight_first``: a vmapped ``W @ hᵀ`` in a loop body (Equinox's RNN cells) as ``h @ Wᵀ``;
- ``loop_fission``: a Loop whose carries fall into layers that feed one another forward (stacked RNN
  cells in one scan step, ``hk.DeepRNN``) as one Loop a layer, so that the rules below read each one;
- ``loops``: loop-invariant nodes and a scan's input projection moved out of Loop bodies;
- ``scan``: a Loop with a fixed trip count and scan outputs as a Scan (after the RNN-cell rules);
- ``scan_rows``: a Scan body's per-row work in fewer nodes: a row's scale done before the Scan, a
  sigmoid's negation in the weights' columns, the gates that share a sigmoid run it once (columns
  permuted), ``(a + b) + c`` as one Sum;
- ``lstm``: a scan whose body is the standard LSTM cell as the ONNX LSTM op;
- ``gru``: a scan whose body is a GRU cell (either reset form, flax's GRUCell and hk.GRU too) as the ONNX GRU
  op where each step's products are small enough for ORT to run on one thread, or up to 8x that size where
  the model records one intra-op thread (larger, the Scan is faster);
- ``pointwise_conv``: a 1x1 Conv to fewer than 16 channels as a MatMul over the pixels (ORT's blocked Conv
  computes 16);
- ``conv_1d``: a 1-D Conv with constant weights as a 2-D one over a height of 1 (ORT's blocked kernels),
  its Squeezes moved down through elementwise ops and Pads until they meet the next Conv's Unsqueeze;
- ``axis_products``: a MatMul by a constant matrix that maps one axis of a tensor (a bilinear resize's
  weights) computed on that axis without the Transposes around it; ``layout`` moves Transposes through it;
- ``nearest_resize``: nearest-neighbour upsampling by whole factors (``jnp.repeat`` of spatial axes, Keras'
  UpSampling2D) as one Resize, run in NCHW between convolutions (``layout`` moves the Transposes through
  it); one that stays NHWC goes back to Gathers;
- ``clamps``: a select that clamps at a constant (jax.nn.hard_tanh, ``where(x > c, c, x)``) as Min or Max;
- ``select_gathers``: a select between two computed values on a comparison of data (a piecewise function, a
  Huber loss) as a GatherElements from the two stacked (ORT's Where branches on every element);
- ``where_products``: a Where of a constant and data on a comparison of data (a ReLU's gradient) as a
  product by the condition's 0/1 mask, behind an If that runs the Where only where the data holds a NaN
  or an infinity (ORT's Where branches on every element);
- ``masked_softmax``: a Softmax behind an attention mask with its input raised to ``max - 64`` where lower
  and those outputs zeroed, so that ORT's exp makes no subnormals (each an assist on Intel CPUs); where the mask
  is read whole, zeroed by a product with its kept places behind a test instead of a second comparison, and
  that product left to a reader that zeroes the same places again (keras' ``where(mask, p, 0)``: ``_rezeroing``);
- ``constant_targets`` (in ``symbolic``): on symbolic inputs, Reshape and Expand targets computed from ``Shape``
  as constants (0 or 1 where an entry repeats the input's dim, one -1), after every rule that reads them;
- ``dense_bias``: a big product's bias Add kept out of ORT's Gemm (a Gemm without C, or the bias at the
  product's rank) on models that do not record one thread, where the Gemm's one-thread bias and activation
  passes cost more than the Add and Relu on two;
- ``scalar_ranks``: a scalar operand of an elementwise op whose output ends in an axis of 1 given the
  output's rank (ORT broadcasts a scalar against such an operand one element per call), last.

``apply`` runs every rule on an ``onnx_ir.Model`` in place, in every graph (Loop/If bodies too).
"""

from __future__ import annotations

import onnx_ir as ir
import onnx_ir.passes.common  # noqa: F401  (ir.passes.common below)

from jaxconv.onnx import thread_count
from jaxconv.onnx.rewrites import (
    _match,
    activations,
    add_chains,
    attention,
    attention_heads,
    axis_products,
    batched_chains,
    broadcast_matmul_order,
    broadcast_spans,
    broadcasts,
    clamps,
    column_sums,
    conv_1d,
    conv_affine,
    conv_pads,
    dense_bias,
    early_transposes,
    einsum_order,
    expert_columns,
    expert_split,
    expert_sum,
    gather_fill,
    gather_matmul,
    gru,
    head_merge,
    k_blocks,
    keepdims,
    keras_norm,
    kv_broadcast,
    layer_norm,
    layout,
    loop_fission,
    loop_weight_first,
    loops,
    lstm,
    mask_min,
    masked_softmax,
    matmul_order,
    nan_reduce,
    nearest_resize,
    one_hot_rows,
    pointwise_conv,
    pooling,
    product_scale,
    range_checks,
    repeat_gathers,
    reshape_scale,
    rms_norm,
    rotary,
    row_slices,
    scalar_ranks,
    scan_last_row,
    scan_rows,
    select_gathers,
    shapes,
    softmax,
    sort_zeros,
    split_matmul,
    squeezes,
    strided_slices,
    sum_pool,
    symbolic,
    transposes,
    tri_masks,
    unit_scale,
    unrolled_bodies,
    unrolled_steps,
    weight_first,
    weighted_sums,
    where_consts,
    where_products,
    zero_bias,
    zeros,
)

HEADS_ON_ONE_THREAD = False  # attention_heads also for models that will record one intra-op thread


def after_clean_up(model: ir.Model, opset: int) -> dict[str, int]:
    """The rules that run on the cleaned-up graph, whose rules would undo them (onnxscript folds a Pad into
    the Conv it feeds) or that need its folded constants and shared scalars (``batched_chains``); returns
    how many times each fired."""
    return {"conv_pads": conv_pads.rewrite(model.graph, opset),
            "batched_chains": batched_chains.rewrite(model.graph)}


def apply(model: ir.Model, opset: int) -> dict[str, int]:
    """Rewrites ``model`` in place into forms ONNX Runtime runs faster.

    Args:
        model: The model to rewrite.
        opset: The default-domain opset the model targets; rules that need a
            newer op (e.g. Gelu, opset 20) are skipped below it.

    Returns:
        How many times each rule fired.
    """
    fired = {"zero_bias": 0, "symbolic": 0, "keepdims": 0, "softmax": 0, "activations": 0, "broadcasts": 0,
             "loops": 0, "pooling": 0, "zeros": 0, "shapes": 0, "layout": 0, "lstm": 0, "gru": 0,
             "matmul_order": 0, "squeezes": 0, "unit_scale": 0, "range_checks": 0,
             "reshape_scale": 0, "weight_first": 0}
    _infer_shapes(model)
    symbolic_inputs = _symbolic_inputs(model.graph)
    if symbolic_inputs:  # the step copies' row reads, their bounds computed from Shape
        for graph in list(_match.all_graphs(model.graph)):
            fired["symbolic"] += symbolic.name_dims(graph)
    fired["unrolled_steps"] = unrolled_steps.rewrite(model.graph)  # first: its Loop's body is a graph below
    fired["unrolled_bodies"] = unrolled_bodies.rewrite(model.graph)  # the same: the raw lowering's copies
    for graph in list(_match.all_graphs(model.graph)):
        fired["zero_bias"] += zero_bias.rewrite(graph)
        fired["symbolic"] += symbolic.rewrite(graph)
        fired["keepdims"] += keepdims.rewrite(graph)
        fired["softmax"] += softmax.rewrite(graph)
        fired["activations"] += activations.rewrite(graph, opset)
        fired["broadcasts"] += broadcasts.rewrite(graph)
        fired["pooling"] += pooling.rewrite(graph)
        fired["zeros"] += zeros.rewrite(graph, opset, subgraph=graph is not model.graph)
        fired["shapes"] += shapes.rewrite(graph)
        fired["matmul_order"] += matmul_order.rewrite(graph)
        fired["squeezes"] += squeezes.rewrite(graph)
        fired["unit_scale"] += unit_scale.rewrite(graph)
        fired["range_checks"] += range_checks.rewrite(graph)
        fired["reshape_scale"] += reshape_scale.rewrite(graph)
        fired["weight_first"] += weight_first.rewrite(graph)
    fired["layer_norm"] = layer_norm.rewrite(model.graph, opset)
    fired["keras_norm"] = keras_norm.rewrite(model.graph, opset)
    fired["one_hot_rows"] = one_hot_rows.rewrite(model.graph)  # before the rules that read MatMuls
    fired["split_matmul"] = split_matmul.rewrite(model.graph)
    if opset >= attention.MIN_OPSET:  # the rule follows single readers: the replaced nodes go first
        ir.passes.common.RemoveUnusedNodesPass()(model)
    fired["attention"] = attention.rewrite(model.graph, opset)
    # Head-major projections cost more than the Transposes they save on one thread (1.02-1.08x the CPU
    # time of the zoo's transformers, which record one thread) and gain on two (0.98x): only there.
    one_thread = thread_count.recommend(
        model, skip_unknown=True, symbolic_sizes=thread_count.RECORD_SIZES) == 1  # as the driver's record
    heads = HEADS_ON_ONE_THREAD or not one_thread
    fired["attention_heads"] = attention_heads.rewrite(model.graph) if heads else 0
    fired["mask_min"] = mask_min.rewrite(model.graph)
    fired["einsum_order"] = einsum_order.rewrite(model.graph)  # before layout: the Transpose after the split
    fired["broadcast_matmul_order"] = broadcast_matmul_order.rewrite(model.graph)
    fired["expert_sum"] = expert_sum.rewrite(model.graph)  # after broadcast_matmul_order's swap
    fired["expert_columns"] = expert_columns.rewrite(model.graph)  # after expert_sum: the products it leaves
    fired["expert_split"] = expert_split.rewrite(model.graph)
    for graph in list(_match.all_graphs(model.graph)):  # again: reshape_scale leaves Muls by ones bare
        fired["unit_scale"] += unit_scale.rewrite(graph)
    fired["loop_fission"] = loop_fission.rewrite(model.graph)  # before loops: one Loop a layer
    fired["loop_weight_first"] = loop_weight_first.rewrite(model.graph)  # before loops: it hoists x @ Wᵀ
    fired["loops"] = loops.rewrite(model.graph)
    fired["lstm"] = lstm.rewrite(model.graph)
    fired["gru"] = gru.rewrite(model.graph)
    fired["rms_norm"] = rms_norm.rewrite(model.graph)  # after unit_scale: its scale of ones stays
    fired["scan"] = loops.to_scan(model.graph)
    fired["scan_rows"] = scan_rows.rewrite(model.graph)
    fired["axis_products"] = axis_products.rewrite(model.graph)  # before layout, which moves Transposes through them
    fired["layout"] = layout.rewrite(model.graph)
    fired["strided_slices"] = strided_slices.rewrite(model.graph)
    fired["reshape_chains"] = squeezes.reshape_chains(model.graph)
    fired["head_merge"] = head_merge.rewrite(model.graph)
    fired["early_transposes"] = early_transposes.rewrite(model.graph)  # after layout; before transposes, which
    # takes the size-1 axes out of the permutations it leaves
    fired["transposes"] = transposes.rewrite(model.graph)
    if symbolic_inputs:  # again: the rules above leave Expands to run-time shapes (a mask's fill, a padding
        # mask of ones, positions broadcast over the batch); before rotary, which reads the tables those
        # positions look up, and tri_masks, which reads the mask they hide; rms_norm's Muls by ones stay
        for graph in list(_match.all_graphs(model.graph)):
            fired["symbolic"] += symbolic.rewrite(graph, keep_unit_muls=True)
    fired["rotary"] = rotary.rewrite(model.graph)
    fired["negated_products"] = activations.negated_products(model.graph)  # after split_matmul's parts
    fired["tri_masks"] = tri_masks.rewrite(model.graph)
    fired["where_consts"] = where_consts.rewrite(model.graph)
    fired["sum_pool"] = sum_pool.rewrite(model.graph)
    fired["conv_affine"] = conv_affine.rewrite(model.graph)
    fired["negated_products"] += activations.negated_products(model.graph)  # a Conv's, with the affine folded in
    fired["row_slices"] = row_slices.rewrite(model.graph, opset)
    fired["scan_last_row"] = scan_last_row.rewrite(model.graph)  # after row_slices moved the row's Slice up
    fired["gather_matmul"] = gather_matmul.rewrite(model.graph)
    fired["k_blocks"] = k_blocks.rewrite(model.graph)  # after row_slices: a few rows need no blocks
    fired["add_chains"] = add_chains.rewrite(model.graph)  # after k_blocks: its Sums
    fired["weighted_sums"] = weighted_sums.rewrite(model.graph)  # before column_sums, which reads such sums
    fired["column_sums"] = column_sums.rewrite(model.graph)  # after layout: Transposes it keeps
    fired["sort_zeros"] = sort_zeros.rewrite(model.graph)
    fired["kv_broadcast"] = kv_broadcast.rewrite(model.graph)  # before repeat_gathers: the Expands it copies
    fired["nearest_resize"] = nearest_resize.rewrite(model.graph)  # after kv_broadcast: its repeats are no copies
    if fired["nearest_resize"]:  # the upsampling's NHWC Transposes through the Resize, then what stays NHWC
        fired["layout"] += layout.rewrite(model.graph)
        fired["nearest_resize"] -= nearest_resize.spread(model.graph)
    fired["pointwise_conv"] = pointwise_conv.rewrite(model.graph)  # after the layout passes: its Transposes gone
    fired["conv_1d"] = conv_1d.rewrite(model.graph)  # after pointwise_conv: the MatMuls it makes stay
    fired["repeat_gathers"] = repeat_gathers.rewrite(model.graph)
    fired["gather_fill"] = gather_fill.rewrite(model.graph)
    fired["broadcast_spans"] = broadcast_spans.rewrite(model.graph)
    fired["nan_reduce"] = nan_reduce.rewrite(model.graph)
    fired["pool_chains"] = pooling.chains(model.graph)  # last: after the layout rules
    fired["clamps"] = clamps.rewrite(model.graph)  # before where_products, which would guard them
    fired["select_gathers"] = select_gathers.rewrite(model.graph)  # after activations read the float selects
    fired["where_products"] = where_products.rewrite(model.graph)  # after every rule that reads a Where
    fired["masked_softmax"] = masked_softmax.rewrite(model.graph)  # after the rules that make its masks
    if symbolic_inputs:  # after every rule that reads the run-time shape arithmetic
        fired["constant_targets"] = symbolic.constant_targets(model.graph)
    fired["dense_bias"] = 0 if one_thread else dense_bias.rewrite(model.graph)  # after the rules reading MatMuls
    fired["product_scale"] = product_scale.rewrite(model.graph)  # after the rules that read a scale where it is
    fired["scalar_ranks"] = scalar_ranks.rewrite(model.graph)  # last: the rules above read scalars as scalars
    if any(fired.values()):
        ir.passes.common.RemoveUnusedNodesPass()(model)
    return fired


def _symbolic_inputs(graph: ir.Graph) -> bool:
    """Whether an input of ``graph`` has a dimension that is not a number (a symbolic size)."""
    return any(v.shape is not None and not all(isinstance(d, int) for d in v.shape) for v in graph.inputs)


def _infer_shapes(model: ir.Model) -> None:
    """Fill in value shapes where ONNX shape inference can (the rules check broadcasting with them).

    onnx_ir's ShapeInferencePass reads the inferred model back whole (a second model, a third of
    a conversion's time); only the inferred types are needed, so they are read from the proto's
    value_info and set on the values of the same names.
    """
    import onnx

    try:
        from onnx_ir.passes.common._c_api_utils import call_onnx_api
    except ImportError:  # a newer onnx_ir: its pass, slower
        call_onnx_api = None

    def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
        try:
            return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)
        except Exception:  # onnx's data propagation takes a float Unsqueeze of constants for a 1-D shape
            return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=False)

    try:
        if call_onnx_api is None:
            ir.passes.common.ShapeInferencePass()(model)
            return
        proto = call_onnx_api(infer, model)
    except Exception:  # shapes are a help, not a need: rules that lack one do not fire
        return
    types: dict[str, onnx.TypeProto] = {}
    _collect_types(proto.graph, types)
    for graph in _match.all_graphs(model.graph):
        for node in graph:
            for value in node.outputs:
                found = types.get(value.name) if value.name else None
                if found is None or not found.HasField("tensor_type"):
                    continue
                shape = ir.serde.deserialize_type_proto_for_shape(found)
                if shape is not None and shape != value.shape:
                    value.shape = shape
                if value.dtype is None and found.tensor_type.elem_type:
                    value.dtype = ir.DataType(found.tensor_type.elem_type)


def _collect_types(graph, types: dict) -> None:
    """Name -> TypeProto of every value_info and output in ``graph`` and its subgraphs."""
    import onnx

    for info in (*graph.value_info, *graph.output):
        types[info.name] = info.type
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _collect_types(attr.g, types)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _collect_types(g, types)
