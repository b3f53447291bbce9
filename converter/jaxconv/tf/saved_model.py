"""TF SavedModel: one ``serving_default`` signature with the program's flat names, by one of two routes.

- ``xla``: jax2tf's ``XlaCallModule`` (needs TF's XLA, and cannot run JAX's LAPACK custom calls);
- ``tf-ops``: jaxconv's ONNX lowering translated to plain TF ops (``tf.onnx_to_tf``): runs where XLA
  is missing (TF Serving builds without XLA, TF.js converters) and computes linear algebra with
  the lowering's own loops.

``auto`` (see ``first_route``) takes ``tf-ops`` for programs with LAPACK custom calls, else ``xla``;
the API falls back to ``tf-ops`` when the ``xla`` model does not run in TF. ``jaxconv_signature.json``
records the route under ``"route"``.

Also home of the TensorFlow set-up shared by the TF targets and runtimes: a quiet import and a
file-descriptor level capture of what TF's C++ code writes to stderr.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from typing import Any, Iterator

from jaxconv.errors import ConversionError, MissingDependencyError, UnsupportedError
from jaxconv.program import Program
from jaxconv.stablehlo.clamped_gather import gathers_clamped
from jaxconv.stablehlo.composites import composites_as_calls
from jaxconv.stablehlo.nan_reductions import reductions_keep_nan

SIGNATURE_FILE = "jaxconv_signature.json"
ROUTES = ("xla", "tf-ops", "auto")
SIGNATURE_KEY = "serving_default"
# What a SavedModel folder written before the marker file existed holds (see artifacts.foreign_entries).
EARLIER_OUTPUT = (SIGNATURE_FILE, "saved_model.pb", "fingerprint.pb", "variables", "assets")

_QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "GRPC_VERBOSITY": "ERROR", "GLOG_minloglevel": "3",
              "TF_ENABLE_ONEDNN_OPTS": "0"}


def import_tensorflow() -> Any:
    """Import TensorFlow without its log output.

    Raises:
        MissingDependencyError: TensorFlow is not installed.
    """
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    try:
        with quiet_stderr():
            import tensorflow as tf
    except ImportError as e:
        raise MissingDependencyError(
            f"TensorFlow is needed for this target ({e}); install it with: pip install 'jaxconv[tf]'") from e
    tf.get_logger().setLevel(logging.ERROR)
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:
        pass
    return tf


class CapturedText:
    """What was written to a file descriptor inside a ``quiet_stderr`` block (filled on exit)."""

    text: str = ""


@contextlib.contextmanager
def quiet_stderr() -> Iterator[CapturedText]:
    """Send everything written to fd 2 (C++ logging included) to a buffer for the block's duration."""
    captured = CapturedText()
    try:
        fd = os.dup(2)
    except OSError:  # no usable stderr: nothing to silence
        yield captured
        return
    with tempfile.TemporaryFile(mode="w+b") as buf:
        try:
            os.dup2(buf.fileno(), 2)
            yield captured
        finally:
            os.dup2(fd, 2)
            os.close(fd)
            buf.seek(0)
            captured.text = buf.read().decode("utf-8", "replace")


def polymorphic_shapes(program: Program) -> list[str]:
    """One jax2tf shape string per flat input, e.g. ``(b, 784)``."""
    out = []
    for t in program.signature.inputs:
        dims = ", ".join(str(d) for d in t.shape)
        out.append(f"({dims},)" if len(t.shape) == 1 else f"({dims})")
    return out


def tensor_specs(program: Program) -> list[Any]:
    """``tf.TensorSpec`` per flat input, named after the input, ``None`` for symbolic dims.

    Raises:
        UnsupportedError: an input dtype has no TensorFlow type.
    """
    tf = import_tensorflow()
    specs = []
    for t in program.signature.inputs:
        try:
            dtype = tf.as_dtype(_numpy_dtype(t.dtype))
        except TypeError as e:
            raise UnsupportedError(f"TensorFlow has no {t.dtype} type (input {t.name})") from e
        specs.append(tf.TensorSpec([d if isinstance(d, int) else None for d in t.shape], dtype, name=t.name))
    return specs


def _numpy_dtype(name: str) -> Any:
    import numpy as np

    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


def flat_function(program: Program) -> Any:
    """The user's function taking flat inputs and returning its flat outputs as a list."""
    import jax

    treedef = jax.tree_util.tree_structure(list(program.arg_specs))
    fn = program.fn

    def flat(*inputs: Any) -> list[Any]:
        args = jax.tree_util.tree_unflatten(treedef, list(inputs))
        return jax.tree_util.tree_leaves(fn(*args))

    flat.__name__ = program.name
    return flat


def tf_function(program: Program, *, clamp_gathers: bool = False) -> tuple[Any, Any]:
    """A ``tf.function`` serving the program (jax2tf, native serialization) and its concrete function.

    The function takes the flat inputs by name and returns ``{"output_0": ..., ...}``. The StableHLO
    inside is serialized for CPU whatever JAX's default backend is: TensorFlow's CPU build and the
    TFLite converter run it. Float max/min reductions carry an explicit NaN guard (both runtimes
    drop NaN there; see ``stablehlo.nan_reductions``).

    Args:
        clamp_gathers: write out the clamping of gather start indices that XLA does implicitly
            (for TFLite, whose GATHER_ND fails on out-of-range indices; see ``stablehlo.clamped_gather``).

    Raises:
        UnsupportedError: an input dtype has no TensorFlow type.
        ConversionError: jax2tf fails.
    """
    tf = import_tensorflow()
    from jax.experimental import jax2tf

    specs = tensor_specs(program)
    converted = jax2tf.convert(flat_function(program), polymorphic_shapes=polymorphic_shapes(program),
                               polymorphic_constraints=tuple(program.constraints), with_gradient=False,
                               native_serialization_platforms=("cpu",))
    n_out = len(program.signature.outputs)

    def serve(*inputs: Any) -> dict[str, Any]:
        outs = converted(*inputs)
        if len(outs) != n_out:
            raise ConversionError(f"jax2tf returned {len(outs)} outputs, the program has {n_out}")
        return {f"output_{i}": tf.identity(o) for i, o in enumerate(outs)}

    function = tf.function(serve, input_signature=specs, autograph=False)
    try:
        with quiet_stderr(), composites_as_calls(), reductions_keep_nan(), \
                gathers_clamped() if clamp_gathers else contextlib.nullcontext():
            concrete = function.get_concrete_function()
    except ConversionError:
        raise
    except Exception as e:
        raise ConversionError(f"jax2tf failed on {program.name}: {type(e).__name__}: {_first_line(e)}") from e
    return function, concrete


def module_for(program: Program, *, clamp_gathers: bool = False) -> tuple[Any, Any]:
    """A ``tf.Module`` to save or convert, and the serving concrete function (see ``tf_function``).

    The module holds no attribute for the function: saving it as one would trace jax2tf a second
    time and store the StableHLO twice; the function travels as the ``serving_default`` signature.
    """
    tf = import_tensorflow()
    _, concrete = tf_function(program, clamp_gathers=clamp_gathers)
    return tf.Module(), concrete


def first_route(program: Program, route: str) -> str:
    """The route to write first: ``route`` itself, or for ``auto`` ``tf-ops`` when the program holds
    custom calls TF cannot run (JAX's LAPACK ``lapack_*_ffi``), else ``xla``.

    Raises:
        UsageError: an unknown route.
    """
    from jaxconv.errors import UsageError

    if route not in ROUTES:
        raise UsageError(f"unknown SavedModel route {route!r}; use one of: {', '.join(ROUTES)}")
    if route != "auto":
        return route
    return "tf-ops" if "@lapack_" in program.exported.mlir_module() else "xla"


def write(program: Program, out_dir: str, *, overwrite: bool = False, route: str = "xla") -> None:
    """Write a SavedModel folder with one ``serving_default`` signature and ``jaxconv_signature.json``.

    The folder is built beside ``out_dir`` and renamed into place (see ``artifacts.atomic_dir``).

    Args:
        overwrite: replace ``out_dir`` even when it holds files jaxconv did not write.
        route: ``xla`` (jax2tf) or ``tf-ops`` (jaxconv's ONNX as plain TF ops).

    Raises:
        UnsupportedError: a dtype TensorFlow cannot hold.
        ConversionError: jax2tf or the SavedModel writer fails.
        UsageError: the output folder must not be replaced or cannot be written.
    """
    from jaxconv.artifacts import atomic_dir, check_output_dir

    guard = {"overwrite": overwrite, "protect": (program.source_path,), "earlier": EARLIER_OUTPUT}
    check_output_dir(out_dir, **guard)
    tf = import_tensorflow()
    if route == "tf-ops":
        from jaxconv.tf.onnx_to_tf import for_program

        module, concrete = tf.Module(), for_program(program)[2]
    else:
        module, concrete = module_for(program)
    with atomic_dir(out_dir, **guard) as tmp:
        try:
            with quiet_stderr():
                tf.saved_model.save(module, tmp, signatures={SIGNATURE_KEY: concrete})
        except Exception as e:
            raise ConversionError(f"writing the SavedModel failed: {type(e).__name__}: {_first_line(e)}") from e
        with open(os.path.join(tmp, SIGNATURE_FILE), "w") as f:
            json.dump({**program.signature.to_json(), "route": route}, f, indent=1)


def read_route(saved_model_dir: str) -> str:
    """The route a jaxconv SavedModel was written by (``xla`` or ``tf-ops``); '' when not recorded."""
    try:
        with open(os.path.join(saved_model_dir, SIGNATURE_FILE)) as f:
            return str(json.load(f).get("route", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def read_signature(saved_model_dir: str) -> Any:
    """The jaxconv Signature stored beside a SavedModel, or None when there is none."""
    from jaxconv.signature import Signature

    path = os.path.join(saved_model_dir, SIGNATURE_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return Signature.from_json(json.load(f))
    except (OSError, ValueError, KeyError, TypeError):
        return None


# Graph plumbing every SavedModel has; left out of op histograms.
_PLUMBING = frozenset({"Placeholder", "Identity", "IdentityN", "NoOp", "Const", "StatefulPartitionedCall",
                       "PartitionedCall", "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename",
                       "StringJoin", "StaticRegexFullMatch", "Select", "Pack", "VarHandleOp", "PreventGradient",
                       "ReadVariableOp", "AssignVariableOp"})


def describe_ops(saved_model_dir: str) -> dict[str, int]:
    """Op histogram of a SavedModel: its TF ops, and the StableHLO ops inside each ``XlaCallModule``.

    Raises:
        ArtifactError: ``saved_model.pb`` is missing or unreadable.
    """
    from collections import Counter

    from jaxconv.errors import ArtifactError

    import_tensorflow()
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    try:
        with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
            proto.ParseFromString(f.read())
    except Exception as e:
        raise ArtifactError(f"cannot read {saved_model_dir}/saved_model.pb: {_first_line(e)}") from e
    ops: Counter[str] = Counter()
    modules: set[bytes] = set()
    for meta in proto.meta_graphs:
        nodes = list(meta.graph_def.node)
        for fn in meta.graph_def.library.function:
            nodes.extend(fn.node_def)
        for node in nodes:
            if node.op == "XlaCallModule":
                module = node.attr["module"].s
                if module not in modules:
                    modules.add(module)
                    ops["XlaCallModule"] += 1
                    ops.update(_stablehlo_ops(module))
            elif node.op not in _PLUMBING:
                ops[node.op] += 1
    return dict(ops)


def _stablehlo_ops(module: bytes) -> dict[str, int]:
    from collections import Counter

    from jaxconv.stablehlo import ir as hir
    from jaxconv.stablehlo.reader import read_module

    try:
        parsed = read_module(module)
    except Exception:  # a module this jaxlib cannot read: count the call only
        return {}
    return dict(Counter(op.name for fn in parsed.functions.values() for op in hir.walk_ops(fn.body)
                        if op.name not in ("func.return", "stablehlo.return")))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
