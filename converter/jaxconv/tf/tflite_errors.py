"""Turn the TFLite converter's error text into one line naming each op it could not convert.

The converter reports MLIR diagnostics such as::

    /home/me/model.py:12:8: error: 'vhlo.sort_v1' op is not part of the vhlo support yet.
    /home/me/model.py:12:8: note: called from
    ...
    /home/me/model.py:12:8: note: see current operation: %2 = "vhlo.sort_v1"(%arg0) ...

When the StableHLO inside jax2tf's ``XlaCallModule`` cannot even be read (composites from
``chlo.sinh``, LAPACK custom calls), it only says that ``tf.XlaCallModule`` is not a builtin; the
culprits are then found by scanning the program's StableHLO.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from jaxconv.errors import ConversionError, JaxconvError, UnsupportedError
from jaxconv.program import Program

_DIAG = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?::(?P<col>\d+))?: (?P<kind>error|note|warning): (?P<msg>.*)$")
_MLIR_LOC_DIAG = re.compile(r"^loc\((?P<loc>.*)\): error: (?P<msg>.*)$")
_QUOTED_OP = re.compile(r"'([A-Za-z_][\w]*\.[\w.$]+)'")
_OPERAND_TYPE = re.compile(r":\s*\(?tensor<(?:[^<>]*x)?([a-z]+\d*|complex<[a-z0-9]+>)>")  # <?x5xf64>: f64
_VERSIONED = re.compile(r"_v\d+$")
_GENERIC = ("failed while converting", "mhlo to TFLite legalization failed", "failed to deserialize")
_ELEMENT = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i1": "bool", "i8": "int8",
            "i16": "int16", "i32": "int32", "i64": "int64", "ui8": "uint8", "ui16": "uint16", "ui32": "uint32",
            "ui64": "uint64", "complex<f32>": "complex64", "complex<f64>": "complex128"}
UNREADABLE_MODULE = "'tf.XlaCallModule' op is neither a custom op nor a flex op"


@dataclass
class Diagnostic:
    """One ``error:`` from the converter with the frames of its ``called from`` notes."""

    message: str
    frames: list[tuple[str, int, int]] = field(default_factory=list)
    operation: str = ""
    code: str = ""


@dataclass(frozen=True)
class Failure:
    """An op that did not convert and where the user's code created it (``model.py:12`` or '')."""

    op: str
    where: str = ""
    needs_flex: bool = False


def parse_diagnostics(text: str) -> list[Diagnostic]:
    """Group the converter's MLIR diagnostics: each error with its notes."""
    out: list[Diagnostic] = []
    current: Diagnostic | None = None
    for raw in text.splitlines():
        line = raw.split("FlatBuffer.", 1)[1] if raw.startswith("Could not translate MLIR") else raw
        m = _DIAG.match(line)
        if m is None:
            continue
        frame = (m.group("file"), int(m.group("line")), int(m.group("col") or 0))
        msg = m.group("msg").strip()
        if m.group("kind") == "error":
            current = Diagnostic(msg, [frame] if frame[0] != "<unknown>" else [])
            out.append(current)
        elif current is not None and m.group("kind") == "note":
            if msg.startswith("called from"):
                current.frames.append(frame)
            elif msg.startswith("see current operation"):
                current.operation = msg.split(":", 1)[1].strip()
            elif msg.startswith("Error code:"):
                current.code = msg.split(":", 1)[1].strip()
    return out


def op_label(message: str, operation: str = "") -> str:
    """The op a diagnostic is about, as a StableHLO name where there is one (``stablehlo.sort``).

    Ops the converter had already legalized (``tfl.mul``) get the element type they failed on.
    """
    m = _QUOTED_OP.search(message)
    if m is None:
        return message.split(". ", 1)[0].rstrip(".")[:120]
    name = m.group(1)
    dialect, _, rest = name.partition(".")
    if dialect in ("vhlo", "mhlo", "stablehlo"):
        return "stablehlo." + _VERSIONED.sub("", rest)
    if dialect == "tfl":
        t = _OPERAND_TYPE.search(operation)
        if t and t.group(1) in _ELEMENT:
            return f"{name} on {_ELEMENT[t.group(1)]}"
    return name


def _is_library(path: str) -> bool:
    if path.startswith("<") or "site-packages" in path or "dist-packages" in path:
        return True
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    absolute = os.path.abspath(path)
    stdlib = os.path.dirname(os.__file__)
    return absolute.startswith(here + os.sep) or absolute.startswith(stdlib + os.sep) or absolute.startswith(
        sys.prefix + os.sep)


def display_path(path: str, line: int) -> str:
    """``path:line`` relative to the working folder when the file is below it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    return f"{path if rel.startswith('..') else rel}:{line}"


def user_location(frames: Sequence[tuple[str, int, int]], source_path: str | None) -> str:
    """The frame in the user's file (or else the first outside libraries) as ``file.py:LINE``."""
    if source_path:
        mine = os.path.abspath(source_path)
        for path, line, _ in frames:
            if os.path.abspath(path) == mine:
                return display_path(path, line)
    for path, line, _ in frames:
        if not _is_library(path):
            return display_path(path, line)
    return ""


def failures_from_text(text: str, source_path: str | None) -> tuple[list[Failure], bool]:
    """Failures named by the converter's message, and whether it could not read the module at all."""
    failures: list[Failure] = []
    unreadable = False
    seen: set[tuple[str, tuple[tuple[str, int, int], ...]]] = set()
    for d in parse_diagnostics(text):
        if d.message.startswith(_GENERIC):
            continue
        if d.message.startswith(UNREADABLE_MODULE):
            unreadable = True
            continue
        label = op_label(d.message, d.operation)
        key = (label, tuple(d.frames))
        if key in seen:
            continue
        seen.add(key)
        failures.append(Failure(label, user_location(d.frames, source_path), d.code == "ERROR_NEEDS_FLEX_OPS"))
    return failures, unreadable


def tf_ops_failures(text: str, locate: Callable[[str, str], list[str]]) -> list[Failure]:
    """The ops the converter rejected on the tf-ops route, each at the origins ``locate`` finds.

    Args:
        text: the converter's error text.
        locate: ``(op, element)`` -> ``stablehlo.add at model.py:3`` labels of where the translated
            op (``tf.AddV2``, on ``f64``) came from.
    """
    out: list[Failure] = []
    seen: set[tuple[str, str]] = set()
    for d in parse_diagnostics(text):
        if d.message.startswith(_GENERIC + (UNREADABLE_MODULE,)):
            continue
        quoted = _QUOTED_OP.search(d.message)
        typed = _OPERAND_TYPE.search(d.operation)
        element = typed.group(1) if typed else ""
        name = quoted.group(1) if quoted else ""
        if (name or d.message, element) in seen:
            continue
        seen.add((name or d.message, element))
        label = op_label(d.message, d.operation)
        if name.startswith("tf.") and _ELEMENT.get(element, "float32") not in _COMMON_DTYPES:
            label = f"{label} on {_ELEMENT[element]}"
        flex = d.code == "ERROR_NEEDS_FLEX_OPS"
        origins = locate(name, element) if name else []
        out.extend(Failure(label, w, flex) for w in origins or [""])
    return out


_COMMON_DTYPES = frozenset({"float32", "int32", "bool"})


def with_dtypes(program: Program, failures: list[Failure]) -> list[Failure]:
    """Name the unusual element types (``tfl.mul on float16``) of ops TFLite had already legalized."""
    pending = [f for f in failures if f.op.startswith("tfl.") and " on " not in f.op and f.where]
    if not pending:
        return failures
    from jaxconv.stablehlo import ir as hir
    from jaxconv.stablehlo.reader import read_module

    try:
        module = read_module(program.exported.mlir_module_serialized)
    except Exception:
        return failures
    found: dict[str, set[str]] = defaultdict(set)
    for fn in module.functions.values():
        for op in hir.walk_ops(fn.body):
            where = _short(op.location, program.source_path)
            found[where].update(v.type.dtype for v in list(op.operands) + list(op.results))
    out = []
    for f in failures:
        unusual = sorted(found.get(f.where, set()) - _COMMON_DTYPES - {"token"}) if f in pending else []
        out.append(Failure(f"{f.op} on {'/'.join(unusual)}", f.where, f.needs_flex) if unusual else f)
    return out


def failures_in_module(program: Program) -> list[Failure]:
    """Ops in the program's StableHLO that TFLite's converter cannot read from an XlaCallModule."""
    from jaxconv.stablehlo import ir as hir
    from jaxconv.stablehlo.reader import read_module

    module = read_module(program.exported.mlir_module_serialized)
    out: list[Failure] = []
    sites = call_sites(module)
    for name, fn in module.functions.items():
        for op in hir.walk_ops(fn.body):
            if op.name == "stablehlo.composite":
                label = f"stablehlo.composite {op.attrs.get('name')}"
            elif op.name == "stablehlo.custom_call" and op.attrs.get("call_target_name") != "shape_assertion":
                label = f"stablehlo.custom_call @{op.attrs.get('call_target_name')}"
            else:
                continue
            out.append(Failure(label, located(op.location, name, sites, program.source_path)))
    return out


def call_sites(module: object) -> dict[str, tuple[str, str]]:
    """callee -> (caller, location of the call) for the module's ``func.call`` ops."""
    from jaxconv.stablehlo import ir as hir

    out: dict[str, tuple[str, str]] = {}
    for name, fn in module.functions.items():  # type: ignore[attr-defined]
        for op in hir.walk_ops(fn.body):
            if op.name == "func.call" and op.attrs.get("callee"):
                out.setdefault(str(op.attrs["callee"]), (name, op.location))
    return out


def located(location: str, function: str, sites: dict[str, tuple[str, str]], source_path: str | None) -> str:
    """``model.py:12`` for an op; an op inside a private function (``loc("eigh")``, JAX's
    jnp.linalg wrappers) takes the user's line of the call into it."""
    where = _short(location, source_path)
    for _ in range(16):
        if where or function not in sites:
            break
        function, location = sites[function]
        where = _short(location, source_path)
    return where


def zero_size_failures(program: Program) -> list[Failure]:
    """The StableHLO ops with a zero-size result (LiteRT rejects zero-size tensors at run time:
    "Invalid tensor size")."""
    from jaxconv.stablehlo import ir as hir
    from jaxconv.stablehlo.reader import read_module

    out: list[Failure] = []
    try:
        module = read_module(program.exported.mlir_module_serialized)
    except Exception:  # a diagnosis aid only
        return out
    sites = call_sites(module)
    for name, fn in module.functions.items():
        for op in hir.walk_ops(fn.body):
            if op.name != "func.return" and any(0 in (r.type.shape or ()) for r in op.results
                                                 if isinstance(r.type, hir.TensorType)):
                out.append(Failure(op.name, located(op.location, name, sites, program.source_path)))
    return out


_TEXT_BLOCKERS = re.compile(r'stablehlo\.composite\s+"([^"]+)"|stablehlo\.custom_call\s+@([\w.$-]+)')


def failures_in_text(program: Program) -> list[Failure]:
    """Like failures_in_module from the module's text (no source lines)."""
    out = []
    for composite, target in _TEXT_BLOCKERS.findall(program.exported.mlir_module()):
        if composite:
            out.append(Failure(f"stablehlo.composite {composite}"))
        elif target != "shape_assertion":
            out.append(Failure(f"stablehlo.custom_call @{target}"))
    return out


def _short(location: str, source_path: str | None) -> str:
    frames = [(p, int(n), 0) for p, n in re.findall(r'"([^"]+?)":(\d+)', location)]
    return user_location(frames, source_path)


def failures_from_stderr(text: str, source_path: str | None) -> list[Failure]:
    """Errors the StableHLO reader inside the converter printed (``loc(...): error: ...``)."""
    out: list[Failure] = []
    for line in text.splitlines():
        m = _MLIR_LOC_DIAG.match(line.strip())
        if m is None or m.group("msg").startswith(_GENERIC + (UNREADABLE_MODULE,)):
            continue
        failure = Failure(op_label(m.group("msg")), _short(m.group("loc"), source_path))
        if failure not in out:
            out.append(failure)
    return out


def summarize(failures: Sequence[Failure]) -> str:
    """``stablehlo.sort x1 at model.py:12; stablehlo.composite chlo.sinh x2 at model.py:7, model.py:9``."""
    counts: Counter[str] = Counter()
    where: dict[str, list[str]] = defaultdict(list)
    for f in failures:
        counts[f.op] += 1
        if f.where and f.where not in where[f.op] and len(where[f.op]) < 3:
            where[f.op].append(f.where)
    parts = []
    for op, n in counts.items():
        at = f" at {', '.join(where[op])}" if where[op] else ""
        parts.append(f"{op} x{n}{at}")
    return "; ".join(parts)


def converter_error(program: Program, message: str, stderr: str, *, allow_flex: bool) -> JaxconvError:
    """The error to raise for a failed TFLite conversion.

    Args:
        program: the program being converted (its StableHLO is scanned when the converter could not read it).
        message: ``str()`` of the converter's exception.
        stderr: what the converter's C++ code wrote to stderr meanwhile.
        allow_flex: whether TF select ops were allowed.

    Returns:
        UnsupportedError naming the ops and source lines, or ConversionError when no op is to blame.
    """
    failures, unreadable = failures_from_text(message, program.source_path)
    failures = with_dtypes(program, failures)
    if unreadable:
        try:
            found = failures_in_module(program)
        except Exception:  # the scan is a diagnosis aid: fall back to the module text
            found = failures_in_text(program)
        failures = failures + (found or failures_from_stderr(stderr, program.source_path))
    if not failures:
        if unreadable:
            return UnsupportedError("TFLite cannot convert: its converter cannot read the StableHLO jax2tf produced "
                                    "for this function; convert to SavedModel or ONNX instead")
        first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "unknown error")
        return ConversionError(f"the TFLite converter failed: {first[:300]}")
    hint = "convert to SavedModel or ONNX instead"
    if any(f.op.startswith("stablehlo.custom_call @lapack_") for f in failures):
        hint = "a SavedModel cannot run JAX's LAPACK custom calls either; try ONNX"
    elif not allow_flex and all(f.needs_flex for f in failures):
        hint = "these are TF ops: retry with --allow-flex (allow_flex=True), or convert to SavedModel or ONNX"
    if unreadable:
        hint += " (the converter stops at these; other ops may fail once they are gone)"
    return UnsupportedError(f"TFLite cannot convert: {summarize(failures)}; {hint}")
