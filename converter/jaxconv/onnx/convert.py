"""Entry points of the ONNX target: a traced Program or a StableHLO file to an ONNX model."""

from __future__ import annotations

import functools
import json
import os
from typing import Any, BinaryIO, Callable, Sequence

import onnx

from jaxconv.errors import UsageError
from jaxconv.onnx import proto_wire
from jaxconv.onnx.driver import DEFAULT_OPSET, MIN_OPSET, GraphIO, lower_module
from jaxconv.onnx.stream import Parts, staged_with_data
from jaxconv.program import Program

MAX_OPSET = 28


def check_opset(opset: int | None) -> int:
    """Validate --opset; None means $JAXCONV_OPSET, else the default (21)."""
    if opset is None:
        env = os.environ.get("JAXCONV_OPSET", "").strip()
        if not env:
            return DEFAULT_OPSET
        if not env.isdigit():
            raise UsageError(f"JAXCONV_OPSET={env!r} is not an opset number")
        opset = int(env)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UsageError(f"--opset {opset} is out of range: jaxconv emits opsets {MIN_OPSET}..{MAX_OPSET}")
    return opset


def program_to_onnx(program: Program, opset: int | None = None) -> onnx.ModelProto:
    """Lower a traced program; graph inputs/outputs follow the program's signature."""
    return program_to_parts(program, opset).full()


def program_to_parts(program: Program, opset: int | None = None) -> Parts:
    """``program_to_onnx`` as a light model plus its big initializers' tensors (see ``stream``).

    Closed-over weights hoisted out of the module (``Program.constants``) stay the caller's arrays:
    writing the parts with ``stream.save`` copies no weight in memory.
    """
    from jaxconv.onnx.driver import paused_gc

    chosen = _opset_chosen(opset)
    opset = check_opset(opset)
    with paused_gc():  # reading, lowering and serializing make objects that live on, little garbage
        parts = _program_to_parts(program, opset, raise_opset=not chosen)
    _collect_graph_cycles(parts)
    return parts


def _opset_chosen(opset: int | None) -> bool:
    """Whether the user chose the opset (``--opset`` or ``$JAXCONV_OPSET``) rather than taking the default."""
    return opset is not None or bool(os.environ.get("JAXCONV_OPSET", "").strip())


def lower_at_needed_opset(lower: Any, opset: int, raise_opset: bool) -> Any:
    """``lower(opset=opset)``; where a construct needs a newer opset (``OpsetRequired``) and the opset is the
    default, ``lower`` again at the opset it needs (up to ``MAX_OPSET``), with a warning naming why:
    ``jnp.searchsorted``, ``jnp.interp`` and ``jnp.histogram`` compare floats in total order, which reads
    their bits with BitCast (opset 26)."""
    import warnings

    from jaxconv.errors import JaxconvWarning, OpsetRequired

    while True:
        try:
            model = lower(opset=opset)
        except OpsetRequired as e:
            if not raise_opset or e.needed > MAX_OPSET or e.needed <= opset:
                raise
            opset = e.needed
            warnings.warn(f"built for ONNX opset {opset} rather than the default {DEFAULT_OPSET}: {e.what} needs it "
                          f"(choose one with --opset)", JaxconvWarning, stacklevel=5)  # the caller of to_onnx
            continue
        return model


def _program_to_parts(program: Program, opset: int, raise_opset: bool = False) -> Parts:
    from jaxconv.onnx.driver import lower_to_ir
    from jaxconv.onnx.stream import split
    from jaxconv.stablehlo.reader import read_module

    module = read_module(program.exported.mlir_module_serialized)
    kept = program.kept_inputs
    hoisted = program.kept_constants  # the module's leading arguments (see Program.constants)
    constants = {k: program.constants[i] for k, i in enumerate(hoisted)}
    position = {flat: len(hoisted) + k for k, flat in enumerate(kept)}
    inputs = [GraphIO(t.name, t.dtype, t.shape, position.get(i)) for i, t in enumerate(program.signature.inputs)]
    outputs = [GraphIO(t.name, t.dtype, t.shape) for t in program.signature.outputs]
    meta = {"jaxconv.signature": json.dumps(program.signature.to_json()), "jaxconv.function": program.name}
    if not program.keep_module:
        program.exported = None  # the module read holds the constants now: one copy of the weights fewer
    lower = functools.partial(lower_to_ir, module, inputs=inputs, outputs=outputs, graph_name=program.name,
                              metadata=meta, constants=constants)
    model = lower_at_needed_opset(lower, opset, raise_opset)
    del lower, module, constants
    parts = split(model)
    del model
    return parts


COLLECT_BYTES = 32 << 20


def _collect_graph_cycles(parts: Parts) -> None:
    """Free the onnx_ir model the lowering built, now serialized, when its weights are big.

    Its nodes and values refer to each other, so it waits for Python's cycle collector, and with
    it the module's copy of any weights not hoisted: held through the check. A collection costs a
    tenth of a second with jax loaded, so small models leave it to Python.
    """
    import gc

    if parts.payload_bytes + sum(t.ByteSize() for t in parts.model.graph.initializer) >= COLLECT_BYTES:
        gc.collect()


def stablehlo_file_to_onnx(path: str, entry: str | None = None, opset: int | None = None) -> onnx.ModelProto:
    """Lower a ``.mlir``/``.mlirbc`` module from any frontend; ``entry``'s arguments become inputs."""
    from jaxconv.artifacts import read_bytes
    from jaxconv.stablehlo.reader import read_module

    chosen = _opset_chosen(opset)
    opset = check_opset(opset)
    data = read_bytes(path)
    module = read_module(data if data[:4] in (b"ML\xefR",) else data.decode("utf-8", "replace"))
    try:
        fn = module.entry(entry)
    except KeyError as e:
        names = ", ".join(module.functions) or "none"
        raise UsageError(f"{path} has no function {entry or 'main'!r} (functions: {names}); pick one with --entry") from e
    inputs = []
    for i, arg in enumerate(fn.body.args):
        name = _arg_name(fn, i)
        dims = tuple(d if d is not None else f"d{i}_{k}" for k, d in enumerate(arg.type.shape))
        inputs.append(GraphIO(name, arg.type.dtype, dims, i))
    outputs = [GraphIO(f"output_{i}", v.type.dtype, tuple(d if d is not None else f"r{i}_{k}" for k, d in enumerate(v.type.shape)))
               for i, v in enumerate(fn.body.returns)]
    graph_name = os.path.splitext(os.path.basename(path))[0]
    lower = functools.partial(lower_module, module, inputs=inputs, outputs=outputs, entry=fn.name, graph_name=graph_name)
    return lower_at_needed_opset(lower, opset, not chosen)


def _arg_name(fn, i: int) -> str:
    import re

    from jaxconv.signature import sanitize

    loc = fn.arg_locations[i] if i < len(fn.arg_locations) else ""
    m = re.fullmatch(r'loc\("([^"]+)"\)', loc)
    return sanitize(m.group(1)) if m else f"arg{i}"


EXTERNAL_DATA_BYTES = 2_000_000_000  # protobuf's limit is 2 GiB; stay below it


def is_large(model: onnx.ModelProto, extra_bytes: int = 0) -> bool:
    """True when the model (plus ``extra_bytes`` held apart) must keep its weights in an external data file.

    The size is summed one graph entry at a time (an upper bound): ``ModelProto.ByteSize()``
    serializes the whole model, a transient copy of every weight.
    """
    graph_fields = model.graph.ListFields()
    size = sum(x.ByteSize() + 16 for _, value in graph_fields if hasattr(value, "extend") for x in value)
    size += sum(len(value) + 16 for _, value in graph_fields if isinstance(value, (str, bytes)))
    size += sum(x.ByteSize() + 16 for field, value in model.ListFields() if field.name != "graph"
                for x in (value if hasattr(value, "extend") else [value]) if hasattr(x, "ByteSize"))
    return size + extra_bytes + 4096 > EXTERNAL_DATA_BYTES


def write_model(model: onnx.ModelProto, f: BinaryIO,
                initializers: Sequence[tuple[int, Any]] | None = None) -> None:
    """Write the bytes of ``model.SerializeToString()`` one initializer at a time.

    Serializing the whole model builds its bytes in a growing buffer and copies them out: up to
    three times the weights at once. Protobuf writes fields in field-number order, so the same
    bytes are the fields before the graph's initializers, each initializer, then the rest.

    Args:
        initializers: ``(size, write)`` per initializer, to write them some other way (``stream``):
            ``write(f)`` writes that many bytes of the serialized TensorProto.
    """
    graph = model.graph
    head, tail = onnx.GraphProto(), onnx.GraphProto()
    for field, value in graph.ListFields():
        if field.name != "initializer":
            copy_proto_field(graph, head if field.number < _INITIALIZER_FIELD else tail, field.name)
    tensors = initializers if initializers is not None else [
        (t.ByteSize(), lambda out, t=t: out.write(t.SerializeToString())) for t in graph.initializer]
    graph_size = head.ByteSize() + tail.ByteSize()
    graph_size += sum(len(proto_wire.len_key(_INITIALIZER_FIELD, n)) + n for n, _ in tensors)
    before, after = onnx.ModelProto(), onnx.ModelProto()
    for field, _ in model.ListFields():
        if field.name != "graph":
            copy_proto_field(model, before if field.number < _GRAPH_FIELD else after, field.name)
    f.write(before.SerializeToString())
    if model.HasField("graph"):
        f.write(proto_wire.len_key(_GRAPH_FIELD, graph_size))
        f.write(head.SerializeToString())
        for n, write in tensors:
            f.write(proto_wire.len_key(_INITIALIZER_FIELD, n))
            write(f)
        f.write(tail.SerializeToString())
    f.write(after.SerializeToString())


_GRAPH_FIELD = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_INITIALIZER_FIELD = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number


def copy_proto_field(src, dst, name: str) -> None:
    """Field ``name`` of protobuf message ``src`` copied into ``dst`` (repeated, message or scalar)."""
    value = getattr(src, name)
    if hasattr(value, "extend"):
        getattr(dst, name).extend(value)
    elif hasattr(value, "CopyFrom"):
        getattr(dst, name).CopyFrom(value)
    else:
        setattr(dst, name, value)


def copy_proto_fields(src, dst, skip: str) -> None:
    """Every set field of protobuf message ``src`` but ``skip`` copied into ``dst``."""
    for field, _ in src.ListFields():
        if field.name != skip:
            copy_proto_field(src, dst, field.name)


def save(model: onnx.ModelProto, path: str, before_publish: Callable[[str], None] | None = None) -> None:
    """Save atomically; large models get their weights in PATH.data beside the file.

    Both files are written into a temporary folder next to ``path`` and then renamed, so a
    failure leaves neither behind.

    Args:
        before_publish: called with the written model's temporary path (its data beside it) before
            the rename; an error it raises leaves no file behind.
    """
    from jaxconv.artifacts import atomic_file

    if not is_large(model):
        with atomic_file(path) as tmp:
            with open(tmp, "wb") as f:
                write_model(model, f)
            if before_publish is not None:
                before_publish(tmp)
        return
    with staged_with_data(path) as (model_path, data_path):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # save_model moves tensors out of the proto it is given
        onnx.save_model(copy, model_path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(data_path), size_threshold=1024)
        if before_publish is not None:
            before_publish(model_path)


def validate(model: onnx.ModelProto, path: str | None = None) -> None:
    """onnx.checker (full check, with shape inference); large models are checked from ``path``."""
    from jaxconv.errors import ConversionError

    if is_large(model):
        if path is not None:
            validate_file(path)
        return
    target = model
    try:
        if isinstance(target, onnx.ModelProto):
            target = _without_large_initializers(target)
        onnx.checker.check_model(target, full_check=True)
    except Exception as e:
        raise ConversionError(f"the ONNX model does not pass onnx.checker: {str(e).strip().splitlines()[0][:300]}") from e


def validate_file(path: str) -> None:
    """onnx.checker (full check) of a saved model, reading its external data from beside it."""
    from jaxconv.errors import ConversionError

    try:
        onnx.checker.check_model(path, full_check=True)
    except Exception as e:
        first = str(e).strip().splitlines()[0][:300]
        raise ConversionError(f"the ONNX model does not pass onnx.checker: {first}") from e


LARGE_INITIALIZER_BYTES = 1 << 20


def _without_large_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers of 1 MiB and more are graph inputs of the same type.

    onnx.checker serializes the proto it is given and its shape inference copies it again: on a
    model of closed-over weights that is twice their bytes at least. Big weights feed no shape
    computation, so the graph is checked without them and each of them is checked on its own,
    one at a time.
    """
    from onnx import helper

    graph = model.graph
    if not any(_held_apart(t) or t.ByteSize() >= LARGE_INITIALIZER_BYTES for t in graph.initializer):
        return model
    light = onnx.ModelProto()
    copy_proto_fields(model, light, skip="graph")
    copy_proto_fields(graph, light.graph, skip="initializer")
    inputs = {i.name for i in graph.input}
    for t in graph.initializer:
        if _held_apart(t) or t.ByteSize() >= LARGE_INITIALIZER_BYTES:
            if not _held_apart(t):  # a payload's data is a numpy array's, of its type and dims by construction
                onnx.checker.check_tensor(t)
            if t.name not in inputs:
                light.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            light.graph.initializer.append(t)
    return light


def _held_apart(t: onnx.TensorProto) -> bool:
    from jaxconv.onnx.stream import _is_payload

    return _is_payload(t)
