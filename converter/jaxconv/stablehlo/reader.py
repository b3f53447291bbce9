"""Read StableHLO (portable bytecode or text) into jaxconv's pure-Python IR.

This is the only place in jaxconv that imports ``jaxlib.mlir``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from typing import Any, Iterator

import numpy as np

from jaxconv.errors import ArtifactError, ModuleParseError
from jaxconv.stablehlo import ir as hir

_ELEMENT_TYPES = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "complex<f32>": "complex64", "complex<f64>": "complex128",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2",
    "i4": "int4", "ui4": "uint4", "index": "int64",
}

_TERMINATORS = {"stablehlo.return", "func.return"}


@functools.lru_cache(maxsize=1)
def _mlir():
    from jaxlib.mlir import ir
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext
    from jaxlib.mlir.dialects import chlo, mhlo, sdy
    from jaxlib.mlir.dialects import stablehlo as shlo

    return ir, shlo, chlo, sdy, mhlo, _jax_mlir_ext


def make_context():
    """An MLIR context with every dialect a JAX export can contain."""
    ir, shlo, chlo, sdy, mhlo, ext = _mlir()
    registry = ir.DialectRegistry()
    ext.register_dialects(registry)
    ctx = ir.Context()
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    shlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    sdy.register_dialect(ctx)
    mhlo.register_mhlo_dialect(ctx)
    return ctx


@contextlib.contextmanager
def _silenced_stderr() -> Iterator[None]:
    """Discard what C++ code writes to file descriptor 2 inside the block."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def read_module(data: bytes | str) -> hir.Module:
    """Parse a StableHLO module from portable-artifact bytes, MLIR bytecode, or text.

    Raises:
        ArtifactError: the data is not a module the bindings can read.
    """
    ir, shlo, *_ = _mlir()
    ctx = make_context()
    if _mentions_quantized(data):
        _load_quant_dialect(ctx)
    with ctx, ir.Location.unknown():
        try:
            if isinstance(data, bytes) and data[:4] == b"ML\xefR":
                try:
                    with _silenced_stderr():  # the deserializer also prints its diagnostics
                        module = shlo.deserialize_portable_artifact(ctx, data)
                except Exception:
                    module = ir.Module.parse(data)
            else:
                module = ir.Module.parse(data)
        except Exception as e:
            raise parse_error(e) from e
        legalize_chlo(module)
        try:
            return _legalize_quantized(_Reader().module(module))
        except TypeError as e:
            if "complex" in str(e) or "unknown element type" in str(e):
                from jaxconv.errors import UnsupportedError

                raise UnsupportedError("the module holds complex constants: ONNX Runtime has no complex tensor type") from e
            raise


_QUANT_PREFIX = "!quant.uniform<"


def _mentions_quantized(data: bytes | str) -> bool:
    if isinstance(data, bytes):
        return data[:4] != b"ML\xefR" and _QUANT_PREFIX.encode() in data
    return _QUANT_PREFIX in data


@functools.lru_cache(maxsize=1)
def _quant_artifact() -> bytes:
    """A portable artifact holding a quantized type (serialized by the bindings' own context)."""
    _, shlo, *_ = _mlir()
    text = ("module {\n  func.func @main(%x: tensor<f32>) -> tensor<!quant.uniform<i8:f32, 1.0>> {\n"
            "    %0 = stablehlo.uniform_quantize %x : (tensor<f32>) -> tensor<!quant.uniform<i8:f32, 1.0>>\n"
            "    return %0 : tensor<!quant.uniform<i8:f32, 1.0>>\n  }\n}\n")
    return shlo.serialize_portable_artifact_str(text, shlo.get_minimum_version())


def _load_quant_dialect(ctx) -> None:
    """Load the ``quant`` dialect into ``ctx``: jaxlib registers no Python binding for it, but reading
    a portable artifact that holds a quantized type loads it, after which text parses with it."""
    ir, shlo, *_ = _mlir()
    try:
        with ctx, ir.Location.unknown(), _silenced_stderr():
            shlo.deserialize_portable_artifact(ctx, _quant_artifact())
    except Exception as e:  # noqa: BLE001  (reported as what it means for the module)
        from jaxconv.errors import UnsupportedError

        raise UnsupportedError(f"quantized types (!quant.uniform): these MLIR bindings cannot load the quant "
                               f"dialect ({_first_line(e)})") from e


def _first_line(e: BaseException) -> str:
    lines = [t.strip() for t in str(e).splitlines() if t.strip()]
    return (lines[0] if lines else type(e).__name__)[:200]


def _legalize_quantized(module: hir.Module) -> hir.Module:
    """Rewrite quantized ops into plain ones (quant_math) when the module has quantized values."""
    from jaxconv.stablehlo.quant_types import is_quant

    for fn in module.functions.values():
        values = list(fn.body.args) + [v for op in hir.walk_ops(fn.body) for v in op.results]
        if any(is_quant(v.type.dtype) for v in values):
            from jaxconv.stablehlo import quant_math  # a big module, imported only for quantized modules

            quant_math.legalize(module)
            break
    return module


_LOCATION = re.compile(r'loc\("[^"]*":(\d+):(\d+)\)')


def parse_error(e: BaseException) -> ModuleParseError:
    """A ModuleParseError with the first diagnostic's message, line and column."""
    for diag in getattr(e, "error_diagnostics", None) or ():
        m = _LOCATION.fullmatch(str(diag.location))
        line, column = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        message = str(diag.message).strip().splitlines()
        return ModuleParseError(message[0] if message else "parse error", line, column)
    lines = [t for t in str(e).strip().splitlines() if t and not t.startswith("Unable to parse")]
    return ModuleParseError(lines[0][:300] if lines else type(e).__name__)


def legalize_chlo(module) -> None:
    """Expand CHLO ops (chlo.erf, chlo.top_k, chlo.lgamma, ...) into plain StableHLO, as XLA does.

    jax.export already does this (keeping a few as named stablehlo.composite ops); modules from
    ``jax.jit(...).lower()`` or other frontends may still hold raw CHLO.
    """
    from jaxlib.mlir import passmanager

    _, shlo, *_ = _mlir()
    has_chlo = False

    def find(op):
        nonlocal has_chlo
        if op.name.startswith("chlo."):
            has_chlo = True
        return _mlir()[0].WalkResult.ADVANCE

    module.operation.walk(find)
    if not has_chlo:
        return
    shlo.register_stablehlo_passes()
    try:
        passmanager.PassManager.parse("builtin.module(func.func(chlo-legalize-to-stablehlo))").run(module.operation)
    except Exception as e:
        raise ArtifactError(f"cannot expand CHLO ops into StableHLO: {str(e).strip().splitlines()[0][:200]}") from e


class _Reader:
    def __init__(self) -> None:
        self.values: dict[Any, hir.Value] = {}

    def module(self, module) -> hir.Module:
        ir, *_ = _mlir()
        functions: dict[str, hir.Function] = {}
        for op in module.body.operations:
            if op.operation.name != "func.func":
                continue
            fn = self.function(op)
            functions[fn.name] = fn
        attrs = {name: decode_attr(attr) for name, attr in module.operation.attributes.items()}
        return hir.Module(functions=functions, attrs=attrs)

    def function(self, op) -> hir.Function:
        ir, *_ = _mlir()
        operation = op.operation
        name = ir.StringAttr(operation.attributes["sym_name"]).value
        vis = "public"
        if "sym_visibility" in operation.attributes:
            vis = ir.StringAttr(operation.attributes["sym_visibility"]).value
        block = operation.regions[0].blocks[0]
        body = self.block(block)
        arg_attrs = _dict_list(operation, "arg_attrs", len(body.args))
        result_attrs = _dict_list(operation, "res_attrs", len(body.returns))
        arg_locs = [_location_text(a.location) for a in block.arguments]
        return hir.Function(name=name, body=body, visibility=vis, arg_attrs=arg_attrs,
                            result_attrs=result_attrs, arg_locations=arg_locs)

    def block(self, block) -> hir.Block:
        args = []
        for a in block.arguments:
            v = hir.Value(tensor_type(a.type))
            self.values[a] = v
            args.append(v)
        ops: list[hir.Op] = []
        returns: list[hir.Value] = []
        for op in block.operations:
            operation = op.operation
            if operation.name in _TERMINATORS:
                returns = [self.values[o] for o in operation.operands]
                continue
            ops.append(self.op(operation))
        return hir.Block(args=args, ops=ops, returns=returns)

    def op(self, operation) -> hir.Op:
        operands = [self.values[o] for o in operation.operands]
        regions = [self.block(r.blocks[0]) for r in operation.regions if len(r.blocks)]
        results = []
        for r in operation.results:
            v = hir.Value(tensor_type(r.type))
            self.values[r] = v
            results.append(v)
        if operation.name == "stablehlo.constant" and "complex<" in str(operation.results[0].type):
            # the bindings cannot hand out a complex DenseElementsAttr: read it from the op's text
            ty = tensor_type(operation.results[0].type)
            text = str(operation)
            attrs = {"value": _parse_dense_text(text[text.index("dense<"):], numpy_dtype(ty.dtype),
                                                tuple(int(d) for d in ty.shape))}
        else:
            attrs = {name: decode_attr(attr) for name, attr in operation.attributes.items()}
        if operation.name == "stablehlo.constant" and "value" not in attrs:
            attrs["value"] = constant_value(operation)
        return hir.Op(name=operation.name, operands=operands, results=results, attrs=attrs,
                      regions=regions, location=_location_text(operation.location))

def _dict_list(operation, key: str, n: int) -> list[dict[str, Any]]:
    if key not in operation.attributes:
        return [{} for _ in range(n)]
    out = []
    for d in operation.attributes[key]:
        out.append({na.name: decode_attr(na.attr) for na in d})
    return out


def _location_text(loc) -> str:
    try:
        return str(loc)
    except Exception:
        return ""


def tensor_type(t) -> hir.TensorType:
    """Convert an MLIR type to a TensorType (tokens become dtype 'token')."""
    ir, *_ = _mlir()
    if isinstance(t, ir.RankedTensorType):
        shape = tuple(None if t.is_dynamic_dim(i) else t.get_dim_size(i) for i in range(t.rank))
        return hir.TensorType(element_dtype(t.element_type), shape)
    text = str(t)
    if "token" in text:
        return hir.TensorType("token", ())
    return hir.TensorType(text, ())


def element_dtype(et) -> str:
    text = str(et)
    if text in _ELEMENT_TYPES:
        return _ELEMENT_TYPES[text]
    return text


def decode_attr(attr) -> Any:
    """Decode an MLIR attribute into plain Python (ints, floats, strs, tuples, arrays, dicts).

    Attributes with no plain form keep their MLIR text.
    """
    ir, shlo, *_ = _mlir()
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return int(attr.value)
    if isinstance(attr, ir.FloatAttr):
        return float(attr.value)
    if isinstance(attr, ir.StringAttr):
        return attr.value
    if isinstance(attr, ir.FlatSymbolRefAttr):
        return attr.value
    if isinstance(attr, (ir.DenseI64ArrayAttr, ir.DenseI32ArrayAttr, ir.DenseBoolArrayAttr)):
        return tuple(attr)
    if isinstance(attr, ir.DenseElementsAttr):
        return dense_value(attr)
    if isinstance(attr, ir.ArrayAttr):
        return [decode_attr(a) for a in attr]
    if isinstance(attr, ir.DictAttr):
        return {na.name: decode_attr(na.attr) for na in attr}
    if isinstance(attr, ir.TypeAttr):
        return str(attr.value)
    for cls, fields in _STABLEHLO_ATTRS:
        klass = getattr(shlo, cls, None)
        if klass is not None and klass.isinstance(attr):
            wrapped = klass(attr)
            if fields is None:
                return wrapped.value
            plain = {f: _plain(getattr(wrapped, f)) for f in fields}
            record = hir.DIMENSION_NUMBERS.get(cls)
            return record(**plain) if record is not None else plain
    return str(attr)


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(v)
    return v


_STABLEHLO_ATTRS: list[tuple[str, tuple[str, ...] | None]] = [
    ("DotDimensionNumbers", ("lhs_batching_dimensions", "rhs_batching_dimensions",
                             "lhs_contracting_dimensions", "rhs_contracting_dimensions")),
    ("ConvDimensionNumbers", ("input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions",
                              "kernel_input_feature_dimension", "kernel_output_feature_dimension",
                              "kernel_spatial_dimensions", "output_batch_dimension",
                              "output_feature_dimension", "output_spatial_dimensions")),
    ("GatherDimensionNumbers", ("offset_dims", "collapsed_slice_dims", "operand_batching_dims",
                                "start_indices_batching_dims", "start_index_map", "index_vector_dim")),
    ("ScatterDimensionNumbers", ("update_window_dims", "inserted_window_dims", "input_batching_dims",
                                 "scatter_indices_batching_dims", "scattered_dims_to_operand_dims",
                                 "index_vector_dim")),
    ("ComparisonDirectionAttr", None),
    ("ComparisonTypeAttr", None),
    ("PrecisionAttr", None),
    ("FftTypeAttr", None),
    ("RngAlgorithmAttr", None),
    ("RngDistributionAttr", None),
    ("TransposeAttr", None),
    ("OutputOperandAlias", ("output_tuple_indices", "operand_index", "operand_tuple_indices")),
]

_NP = {
    "float16": np.float16, "float32": np.float32, "float64": np.float64, "bool": np.bool_,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "complex64": np.complex64, "complex128": np.complex128,
}


def numpy_dtype(name: str) -> np.dtype:
    """numpy dtype for a TensorType dtype name (bfloat16 through ml_dtypes)."""
    if name in _NP:
        return np.dtype(_NP[name])
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


def constant_value(operation) -> np.ndarray:
    """The value of a ``stablehlo.constant`` as a numpy array of its exact dtype."""
    return dense_value(operation.attributes["value"])


def dense_value(attr) -> np.ndarray:
    """Decode a DenseElementsAttr, including bf16, complex, NaN/Inf bit patterns and hex blobs
    (a quantized one as its storage integers)."""
    ty = tensor_type(attr.type)
    if ty.dtype.startswith(_QUANT_PREFIX):
        from jaxconv.stablehlo.quant_types import parse

        ty = hir.TensorType(parse(ty.dtype).carrier, ty.shape)
    dtype = numpy_dtype(ty.dtype)
    shape = tuple(int(d) for d in ty.shape)
    if ty.dtype in ("float16", "float32", "float64", "bool") or ty.dtype.startswith(("int", "uint")):
        try:
            arr = np.array(attr)
            if arr.dtype != dtype:
                arr = arr.astype(dtype)
            return np.broadcast_to(arr.reshape(-1)[0], shape).copy() if arr.size == 1 else arr.reshape(shape)
        except Exception:
            pass
    return _parse_dense_text(str(attr), dtype, shape)


_HEX_BLOB = re.compile(r'dense<"0x([0-9A-Fa-f]*)">')


def _parse_dense_text(text: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    m = _HEX_BLOB.search(text)
    if m:
        raw = bytes.fromhex(m.group(1))
        arr = np.frombuffer(raw, dtype)
        return np.broadcast_to(arr[0], shape).copy() if arr.size == 1 and int(np.prod(shape)) != 1 else arr.reshape(shape).copy()
    end = text.rindex("> :") if "> :" in text else text.rindex(">")
    body = text[text.index("dense<") + 6: end]
    if dtype.kind == "c":
        part = np.float32 if dtype == np.complex64 else np.float64
        pairs = re.findall(r"\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)", body)
        vals = [complex(_scalar(r, part), _scalar(i, part)) for r, i in pairs]
    else:
        tokens = [t for t in re.split(r"[\[\],\s]+", body) if t]
        vals = [_scalar(t, dtype) for t in tokens]
    arr = np.array(vals, dtype=dtype if dtype.kind != "V" and dtype.name != "bfloat16" else np.float32).astype(dtype)
    if arr.size == 1:
        return np.broadcast_to(arr.reshape(-1)[0], shape).copy()
    return arr.reshape(shape)


def _scalar(token: str, dtype) -> Any:
    dtype = np.dtype(dtype)
    if token in ("true", "false"):
        return token == "true"
    if token.lower().startswith("0x"):
        bits = int(token, 16)
        uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
        return np.array([bits], dtype=uint).view(dtype)[0]
    if dtype.kind in "iub":
        return int(token)
    return float(token)
