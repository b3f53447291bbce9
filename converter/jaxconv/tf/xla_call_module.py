"""Read one TensorFlow ``XlaCallModule`` op (what jax2tf writes) and lower its StableHLO to ONNX.

The op holds a serialized StableHLO module (attribute ``module``) and how to call its ``main``:

- ``version``: the calling convention. From version 9 on (jax2tf writes 9 and 10), ``main``
  computes the dimension variables from its arguments' shapes itself (``get_dimension_size``) and
  passes them to the wrapped function as arguments marked ``jax.global_constant = "b"``.
- ``dim_args_spec`` (older modules): ``main`` takes the dimension values as its first arguments,
  each spec ``"i.d"`` naming the op input ``i`` and its dimension ``d`` that gives the value.
- ``platforms``: a module lowered for several platforms takes the platform's index as its first
  argument (``jax.global_constant = "_platform_index"``). jaxconv picks ``CPU`` (else the first).
- Token arguments and results (``!stablehlo.token``, ordered effects; ``has_token_input_output``):
  the op's TF inputs and outputs have none; tokens carry no data, so each one is a dummy value
  inside the graph and token results are dropped.
- ``function_list``: TF functions the module calls back (jax2tf's ``call_tf``); not convertible.

Nothing here imports TensorFlow: the TF side (``tf2onnx_handler``) reads the attributes and calls
``lower_call_module``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from jaxconv.errors import UnsupportedError
from jaxconv.stablehlo import ir as hir

PLATFORM_INDEX = "_platform_index"
_DIM_SPEC = re.compile(r"^(\d+)\.(\d+)$")
ENTRY = "jaxconv_xla_call_module"


@dataclass(frozen=True)
class CallModule:
    """The attributes of one ``XlaCallModule`` op that decide how its module is called.

    Attributes:
        module: the serialized StableHLO module (portable artifact bytecode, or text).
        version: the op's ``version`` attribute.
        platforms: the ``platforms`` attribute (``CPU``, ``CUDA``, ...).
        dim_args_spec: the older form's dimension arguments, ``"input.dimension"`` each.
        has_token_input_output: the ``has_token_input_output`` attribute.
        function_list: names of the TF functions the module calls (``call_tf``).
        name: the op's node name, for messages.
    """

    module: bytes
    version: int = 10
    platforms: tuple[str, ...] = ("CPU",)
    dim_args_spec: tuple[str, ...] = ()
    has_token_input_output: bool = False
    function_list: tuple[str, ...] = ()
    name: str = "XlaCallModule"


@dataclass
class LoweredCall:
    """An ``XlaCallModule`` as an ONNX model whose inputs and outputs are the op's, in order.

    Attributes:
        model: the ONNX model; inputs ``input_0...``, outputs ``output_0...``.
        dim_names: per op input, the name of each symbolic dimension that the module names
            (``{0: {0: "b"}}``: input 0's dimension 0 is the dimension variable ``b``).
        platform: the platform whose lowering was taken.
    """

    model: Any
    dim_names: dict[int, dict[int, str]] = field(default_factory=dict)
    platform: str = "CPU"


def pick_platform(platforms: Sequence[str]) -> int:
    """The index of the CPU lowering in ``platforms``; the first platform when there is none."""
    lowered = [p.lower() for p in platforms]
    return lowered.index("cpu") if "cpu" in lowered else 0


def _parse_dim_spec(spec: str, n_inputs: int, where: str) -> tuple[int, int]:
    m = _DIM_SPEC.match(spec.strip())
    if not m or int(m.group(1)) >= n_inputs:
        raise UnsupportedError(f"{where}: dim_args_spec entry {spec!r} does not name an input dimension "
                               f"(expected 'INPUT.DIM' with INPUT below {n_inputs})")
    return int(m.group(1)), int(m.group(2))


@dataclass
class _Layout:
    """How ``main``'s arguments map to the op's inputs."""

    platform_arg: int | None = None
    dim_args: dict[int, tuple[int, int]] = field(default_factory=dict)  # main arg -> (op input, dimension)
    tokens: list[int] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)  # main arg of each op input, in order


def _layout(call: CallModule, main: hir.Function, n_inputs: int | None) -> _Layout:
    """Classify ``main``'s arguments: platform index, dimension arguments, tokens, op inputs."""
    out = _Layout()
    args = main.body.args
    rest = list(range(len(args)))
    marked = [i for i in rest if main.arg_attrs[i].get("jax.global_constant") == PLATFORM_INDEX] \
        if main.arg_attrs else []
    if marked:
        out.platform_arg = marked[0]
    elif len(call.platforms) > 1 and rest:
        out.platform_arg = rest[0]
    if out.platform_arg is not None:
        rest.remove(out.platform_arg)
    out.tokens = [i for i in rest if args[i].type.dtype == "token"]
    rest = [i for i in rest if i not in out.tokens]
    if call.dim_args_spec:
        count = n_inputs if n_inputs is not None else len(rest) - len(call.dim_args_spec)
        for i, spec in zip(rest, call.dim_args_spec):
            out.dim_args[i] = _parse_dim_spec(spec, count, call.name)
        rest = rest[len(call.dim_args_spec):]
    out.inputs = rest
    if n_inputs is not None and len(rest) != n_inputs:
        raise UnsupportedError(f"{call.name}: the module's main takes {len(rest)} array arguments, the op "
                               f"has {n_inputs} inputs (version {call.version}, platforms "
                               f"{', '.join(call.platforms)})")
    return out


def dimension_names(main: hir.Function, module: hir.Module) -> dict[int, dict[int, str]]:
    """Per ``main`` argument, the dimension expression each of its symbolic dimensions holds.

    From version 9 on, ``main`` reads a dimension with ``get_dimension_size`` and passes the
    dimension variable it computes from it to the wrapped function, whose argument says
    ``jax.global_constant = "b"``. A dimension ``2*b + 1`` reaches ``b`` through a subtraction and
    jax's ``divmod`` helper (or a division); those are followed, and the dimension is named
    ``2*b+1``, an expression ``check``'s sizes understand.
    """
    # value id -> (main arg, dimension, f, o): the value is (dimension - o) / f
    source: dict[int, tuple[int, int, int, int]] = {}
    constants: dict[int, int] = {}
    arg_index = {v.id: i for i, v in enumerate(main.body.args)}
    names: dict[int, dict[int, str]] = {}
    for op in main.body.ops:
        operands = [v.id for v in op.operands]
        if op.name == "stablehlo.constant" and np.ndim(op.attrs.get("value")) == 0:
            value = np.asarray(op.attrs["value"])
            if value.dtype.kind in "iu":
                constants[op.results[0].id] = int(value)
        elif op.name == "stablehlo.get_dimension_size" and operands[0] in arg_index:
            source[op.results[0].id] = (arg_index[operands[0]], int(op.attrs.get("dimension", 0)), 1, 0)
        elif op.name in ("stablehlo.convert", "stablehlo.reshape") and operands[0] in source:
            source[op.results[0].id] = source[operands[0]]
        elif op.name in _ARITHMETIC and len(operands) == 2 and operands[0] in source \
                and operands[1] in constants:
            arg, dim, f, o = source[operands[0]]
            c = constants[operands[1]]
            if op.name == "stablehlo.subtract":
                source[op.results[0].id] = (arg, dim, f, o + c * f)
            elif op.name == "stablehlo.add":
                source[op.results[0].id] = (arg, dim, f, o - c * f)
            elif c > 0 and (op.name == "stablehlo.divide" or op.attrs.get("callee") == "divmod"):
                source[op.results[0].id] = (arg, dim, f * c, o)
        if op.name == "func.call":
            _name_call_arguments(op, module, source, names)
    return names


_ARITHMETIC = ("stablehlo.subtract", "stablehlo.add", "stablehlo.divide", "func.call")


def _name_call_arguments(op: hir.Op, module: hir.Module, source: dict[int, tuple[int, int, int, int]],
                         names: dict[int, dict[int, str]]) -> None:
    """Name the dimensions whose variables a call passes to arguments marked ``jax.global_constant``."""
    callee = module.functions.get(op.attrs.get("callee", ""))
    if callee is None:
        return
    for k, v in enumerate(op.operands):
        name = callee.arg_attrs[k].get("jax.global_constant") if k < len(callee.arg_attrs) else None
        if isinstance(name, str) and name and name != PLATFORM_INDEX and v.id in source:
            arg, dim, f, o = source[v.id]
            text = (f"{f}*{name}" if f != 1 else name) + (f"+{o}" if o > 0 else f"{o}" if o < 0 else "")
            names.setdefault(arg, {}).setdefault(dim, text)


def _value(dtype: str, shape: tuple[int | None, ...] = ()) -> hir.Value:
    return hir.Value(hir.TensorType(dtype, shape))


def entry_function(call: CallModule, module: hir.Module, main: hir.Function, layout: _Layout,
                   platform: int) -> hir.Function:
    """A function taking only the op's inputs that supplies ``main``'s other arguments and drops tokens."""
    args = [_value(main.body.args[i].type.dtype, main.body.args[i].type.shape) for i in layout.inputs]
    by_main = dict(zip(layout.inputs, args))
    ops: list[hir.Op] = []
    operands: list[hir.Value] = []
    for i, arg in enumerate(main.body.args):
        if i in by_main:
            operands.append(by_main[i])
        elif i == layout.platform_arg:
            v = _value(arg.type.dtype, arg.type.shape)
            value = np.array(platform, np.dtype(arg.type.dtype))
            ops.append(hir.Op("stablehlo.constant", [], [v], {"value": value}, []))
            operands.append(v)
        elif i in layout.dim_args:
            source, dim = layout.dim_args[i]
            size = _value("int32")
            ops.append(hir.Op("stablehlo.get_dimension_size", [args[source]], [size], {"dimension": dim}, []))
            if arg.type.dtype != "int32" or arg.type.shape:
                converted = _value(arg.type.dtype)
                ops.append(hir.Op("stablehlo.convert", [size], [converted], {}, []))
                size = converted
                if arg.type.shape:
                    reshaped = _value(arg.type.dtype, arg.type.shape)
                    ops.append(hir.Op("stablehlo.reshape", [size], [reshaped], {}, []))
                    size = reshaped
            operands.append(size)
        else:  # a token: carries no data, so any value stands for it
            v = _value("bool", (0,))
            ops.append(hir.Op("stablehlo.constant", [], [v], {"value": np.zeros((0,), np.bool_)}, []))
            operands.append(v)
    results = [_value(r.type.dtype, r.type.shape) for r in main.body.returns]
    ops.append(hir.Op("func.call", operands, results, {"callee": main.name}, []))
    returns = [r for r in results if r.type.dtype != "token"]
    return hir.Function(name=ENTRY, body=hir.Block(args=args, ops=ops, returns=returns), visibility="private")


def lower_call_module(call: CallModule, opset: int, n_inputs: int | None = None,
                      input_names: Sequence[str] | None = None) -> LoweredCall:
    """Lower the module of one ``XlaCallModule`` op to an ONNX model taking the op's inputs.

    Args:
        opset: the ONNX opset of the model (18..28).
        n_inputs: the op's number of inputs, when known (checked against the module).
        input_names: graph input names (default ``input_0...``).

    Raises:
        UnsupportedError: TF callbacks, a calling convention that does not fit the module, or
            ops/dtypes the lowering cannot convert (every one of them, in one message).
        ArtifactError: the module does not parse.
    """
    from jaxconv.onnx.driver import GraphIO, lower_module
    from jaxconv.stablehlo.reader import read_module

    if call.function_list:
        raise UnsupportedError(f"{call.name}: the module calls back into TensorFlow functions "
                               f"({', '.join(call.function_list)}; jax2tf's call_tf), which have no ONNX "
                               "form here")
    module = read_module(call.module)
    try:
        main = module.entry("main")
    except KeyError as e:
        raise UnsupportedError(f"{call.name}: the module has no main function "
                               f"(functions: {', '.join(module.functions) or 'none'})") from e
    layout = _layout(call, main, n_inputs)
    platform = pick_platform(call.platforms) if call.platforms else 0
    entry = entry_function(call, module, main, layout, platform)
    module.functions[ENTRY] = entry
    named = dimension_names(main, module)
    dim_names: dict[int, dict[int, str]] = {}
    for k, i in enumerate(layout.inputs):
        dim_names[k] = dict(named.get(i, {}))
    for source, dim in layout.dim_args.values():  # the older form: name the dimension after its spec
        dim_names.setdefault(source, {}).setdefault(dim, f"d{source}_{dim}")
    names = list(input_names or [f"input_{k}" for k in range(len(entry.body.args))])
    inputs = []
    for k, v in enumerate(entry.body.args):
        dims = tuple(d if d is not None else dim_names.get(k, {}).get(j, f"{names[k]}_d{j}")
                     for j, d in enumerate(v.type.shape))
        inputs.append(GraphIO(names[k], v.type.dtype, dims, k))
    outputs = [GraphIO(f"output_{k}", v.type.dtype,
                       tuple(d if d is not None else f"output_{k}_d{j}" for j, d in enumerate(v.type.shape)))
               for k, v in enumerate(entry.body.returns)]
    model = lower_module(module, inputs=inputs, outputs=outputs, entry=ENTRY, opset=opset, graph_name=ENTRY)
    return LoweredCall(model, {k: d for k, d in dim_names.items() if d},
                       call.platforms[platform] if call.platforms else "CPU")
