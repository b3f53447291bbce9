"""The ``jaxconv`` command: to-stablehlo | to-saved-model | to-tflite | to-onnx | check | bench | inspect | list-ops."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Callable, Iterator, Sequence

from jaxconv.errors import ArtifactError, CheckWarning, JaxconvError, JaxconvWarning, UsageError

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that staged artifacts are removed on the way out."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM raises _Terminated (main thread only); the old handler comes back after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _add_function_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE[:NAME]", help="Python file defining the function (FILE:NAME picks one)")
    p.add_argument("--fn", dest="fn_name", metavar="NAME", help="function to convert (any callable in the file)")
    p.add_argument("--specs", nargs="+", metavar="SPEC", default=[],
                   help="one spec per positional argument: f32[b,784], i32[], or JSON of specs for a pytree")
    p.add_argument("--constraint", dest="constraints", action="append", default=[], metavar="EXPR",
                   help="symbolic dimension constraint for jax.export, e.g. 'b >= 2' (repeatable)")


def _add_check_args(p: argparse.ArgumentParser, *, optional: bool = True) -> None:
    if optional:
        p.add_argument("--no-check", action="store_true",
                       help="skip running the artifact against jax.jit (a StableHLO module: loading it in ORT)")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default depends on dtype)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default depends on dtype)")
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 9) when the check cannot decide an output, or a TF target differs on edge values only")
    p.add_argument("--check-sizes", metavar="N,M", help="sizes of symbolic dimensions for the check (default 2,5,1)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxconv",
        description="Convert jitted JAX functions to StableHLO, TF SavedModel, TFLite and ONNX; every artifact is checked against jax.jit.")
    parser.add_argument("--debug", action="store_true", default=bool(os.environ.get("JAXCONV_DEBUG")),
                        help="show tracebacks (also JAXCONV_DEBUG=1)")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("to-stablehlo", help="write OUT.mlir, OUT.mlirbc and OUT.jaxexport")
    _add_function_args(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="base path of the three files")
    p.add_argument("--platforms", default="cpu", help="comma-separated jax.export platforms, e.g. cpu,cuda")
    _add_check_args(p)

    p = sub.add_parser("to-saved-model", help="TF SavedModel via jax2tf (serving_default signature)")
    _add_function_args(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--overwrite", action="store_true", help="replace DIR even if it holds files jaxconv did not write")
    p.add_argument("--route", choices=["xla", "tf-ops", "auto"], default="auto",
                   help="xla: jax2tf's XlaCallModule; tf-ops: plain TF ops from jaxconv's ONNX; auto (default): "
                        "tf-ops for LAPACK calls or when the xla model does not run")
    _add_check_args(p)

    p = sub.add_parser("to-tflite", help="TFLite flatbuffer")
    _add_function_args(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.tflite")
    p.add_argument("--allow-flex", action="store_true", help="allow TF select (flex) ops")
    p.add_argument("--quantize", choices=["float16", "dynamic-range"], help="post-training quantization")
    p.add_argument("--route", choices=["xla", "tf-ops", "auto"], default="auto",
                   help="xla: jax2tf's XlaCallModule; tf-ops: plain TF ops from jaxconv's ONNX; auto (default): "
                        "xla, else tf-ops when xla fails to convert, run or match jax.jit (with --no-check: "
                        "fails to convert or run once; nothing is compared)")
    _add_check_args(p)

    p = sub.add_parser("to-onnx", help="ONNX via jaxconv's StableHLO lowering (FILE may be .py, .mlir or .mlirbc)")
    p.add_argument("file", metavar="FILE[:NAME]", help="Python file, or a StableHLO module (.mlir/.mlirbc)")
    p.add_argument("--fn", dest="fn_name", metavar="NAME", help="function to convert")
    p.add_argument("--specs", nargs="+", metavar="SPEC", default=[], help="one spec per positional argument")
    p.add_argument("--constraint", dest="constraints", action="append", default=[], metavar="EXPR")
    p.add_argument("--entry", metavar="FUNC", help="for a StableHLO module: the function that becomes the graph")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx")
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (default 21; 18..28)")
    _add_check_args(p)

    p = sub.add_parser("check", help="run an artifact against jax.jit and print per-output errors")
    p.add_argument("artifact", help=".onnx, .tflite, .jaxexport or SavedModel folder")
    _add_function_args(p)
    p.add_argument("--inputs", metavar="X.npz", help="inputs by name (default: seeded random)")
    p.add_argument("--seed", type=int, default=0)
    _add_check_args(p, optional=False)

    p = sub.add_parser("bench", help="time the function's ONNX in ONNX Runtime against jax.jit",
                       description="Convert the function to ONNX in memory (or take --onnx), check once that "
                                   "ONNX Runtime's outputs match jax.jit's, then time both alternately in "
                                   "this process and print the medians as a Markdown table (ratios below 1: "
                                   "ORT is faster).")
    _add_function_args(p)
    p.add_argument("--inputs", metavar="X.npz",
                   help="inputs by name (default: the file's example_inputs(), else seeded random)")
    p.add_argument("--sizes", metavar="NAME=N,...", help="symbolic dimension sizes of random inputs: b=8")
    p.add_argument("--onnx", metavar="MODEL.onnx", help="time this model instead of converting the function")
    p.add_argument("--opset", type=int, default=None, help="ONNX opset of the conversion (default 21)")
    p.add_argument("--threads", type=int, metavar="N", help="ORT intra-op threads (default: what the model records, else one per core)")
    p.add_argument("--iters", type=int, default=100, metavar="N", help="rotations at most (default 100)")
    p.add_argument("--budget", type=float, default=3.0, metavar="S",
                   help="seconds per contender, about (default 3)")
    p.add_argument("--spin", action="store_true",
                   help="also time ORT's own default (spinning threads), in a rotation of its own")
    p.add_argument("--profile", metavar="DIR",
                   help="write ORT's profile of 10 calls on 1 thread to DIR; print the top kernels")
    p.add_argument("--json", metavar="OUT.json", help="also write the figures as JSON")

    p = sub.add_parser("to-cpp", help="model.onnx + NAME.h/.cc + CMake package: a C++ library on ONNX Runtime")
    _add_function_args(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--name", help="class and library name, with namespaces: foo::bar::Mlp (default: the function name)")
    p.add_argument("--embed", action="store_true", help="embed the model bytes in the library")
    p.add_argument("--c-api", action="store_true", help='also generate an extern "C" API (NAME_c.h) for C, Rust, Go')
    p.add_argument("--overwrite", action="store_true", help="replace DIR even if it holds files jaxconv did not write")
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (default 21)")
    _add_check_args(p)

    p = sub.add_parser("cpp-runtime", help="ONNX Runtime headers + library (from the onnxruntime wheel) for to-cpp builds")
    p.add_argument("dest", nargs="?", default="onnxruntime", metavar="DEST", help="folder to fill (default: ./onnxruntime)")
    p.add_argument("--headers", metavar="DIR", help="ONNX Runtime headers to use (default: system, else Debian's)")

    p = sub.add_parser("saved-model-to-onnx",
                       help="a SavedModel (jax2tf's, or TF around JAX) to ONNX, one model per signature",
                       description="Convert with tf2onnx, jaxconv's lowering taking every XlaCallModule; "
                                   "the check compares each model with the SavedModel run by TensorFlow "
                                   "(not jax.jit).")
    p.add_argument("saved_model", metavar="DIR", help="SavedModel folder")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx",
                   help="output file; without --signature each signature goes to OUT_<signature>.onnx")
    p.add_argument("--signature", metavar="NAME", help="convert this signature only, to OUT.onnx")
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (default and highest: 18, what tf2onnx writes)")
    _add_check_args(p)

    p = sub.add_parser("inspect", help="inputs, outputs, op histogram, size and producer of an artifact")
    p.add_argument("artifact")

    p = sub.add_parser("list-ops", help="StableHLO ops, custom-call targets and composites the ONNX lowering supports")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table (docs/ops.md)")
    return parser


def _load_program(args: argparse.Namespace, hoist_constants: bool = False):
    from jaxconv.loading import load_function
    from jaxconv.program import require_specs, trace

    loaded = load_function(args.file, args.fn_name)
    _freeze_imports()
    require_specs(args.specs)
    if getattr(args, "output", None):
        from jaxconv.artifacts import check_not_input

        check_not_input(args.output, loaded.path)
    platforms = tuple(p.strip() for p in getattr(args, "platforms", "cpu").split(",") if p.strip())
    program = trace(loaded.fn, args.specs, name=loaded.name, param_names=loaded.param_names,
                    constraints=args.constraints, platforms=platforms, source_path=loaded.path,
                    hoist_constants=hoist_constants)
    for bound in program.assumed:
        print(f"jaxconv: warning: {bound.text()}", file=sys.stderr)
    _configure_check(args, loaded, program)
    return program


def _configure_check(args: argparse.Namespace, loaded: Any, program: Any) -> None:
    """The check's example inputs, sizes and strictness; refuses, before anything is written, a check too big for memory."""
    if getattr(args, "no_check", False):
        return
    from jaxconv import check_context, check_inputs, verify
    from jaxconv.loading import EXAMPLE_INPUTS

    sizes = check_inputs.parse_sizes(args.check_sizes) if args.check_sizes else None
    with program.jax_scope():
        examples = loaded.examples()
    flat = None if examples is None else tuple(check_inputs.flatten_examples(
        examples, program.arg_specs, program.signature, f"{EXAMPLE_INPUTS}() in {os.path.basename(loaded.path)}"))
    check_context.set_check_options(sizes=sizes, strict=args.strict, examples=flat, release_compiled=True)
    verify.require_checkable(program.signature, program.constraints)


def _print_reports(reports: list) -> None:
    for r in reports:
        print(r.table())
        if r.warning():
            print(f"jaxconv: {r.warning()}", file=sys.stderr)


def cmd_to_stablehlo(args: argparse.Namespace) -> int:
    from jaxconv import api
    from jaxconv.stablehlo.export import SUFFIXES, base_path

    platforms = [p.strip() for p in args.platforms.split(",") if p.strip()]
    known = {"cpu", "cuda", "rocm", "tpu"}
    bad = [p for p in platforms if p not in known]
    if bad or not platforms:
        raise UsageError(f"unknown platform(s) {', '.join(bad) or '(none)'} in --platforms; use cpu, cuda, rocm or tpu")
    program = _load_program(args)
    reports: list = []
    try:
        api.to_stablehlo(program, path=args.output, check=not args.no_check, rtol=args.rtol, atol=args.atol, report_to=reports)
    finally:
        _print_reports(reports)
    base = base_path(args.output)
    print("wrote " + ", ".join(base + s for s in SUFFIXES))
    return 0


def cmd_to_onnx(args: argparse.Namespace) -> int:
    from jaxconv import api
    from jaxconv.artifacts import check_file_path

    check_file_path(args.output)  # before the conversion's work
    ext = os.path.splitext(args.file)[1].lower()
    if ext in (".mlir", ".mlirbc"):
        return _stablehlo_file_to_onnx(args)
    if args.entry:
        raise UsageError("--entry applies to StableHLO modules (.mlir/.mlirbc); for a Python file use --fn or FILE:NAME")
    program = _load_program(args, hoist_constants=True)  # weights stay the caller's arrays, not module copies
    program.keep_module = False  # converted once: to_onnx frees the exported module before the check
    import jax

    jax.clear_caches()  # the export's lowered module and constants: the size of the weights, twice over
    reports: list = []
    import warnings

    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", JaxconvWarning)
            model = api.to_onnx(program, path=args.output, opset=args.opset, check=not args.no_check,
                                rtol=args.rtol, atol=args.atol, report_to=reports, keep_weights=False)
    finally:
        _print_reports(reports)
    for w in said:  # jaxconv's own in its words (the check's are in its table); a library's as Python shows it
        if issubclass(w.category, CheckWarning):
            continue
        if issubclass(w.category, JaxconvWarning):
            print(f"jaxconv: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    data = args.output + ".data"
    beside = f"; weights in {data}, keep it beside the model" if any(
        e.key == "location" and e.value == os.path.basename(data) for t in model.graph.initializer
        for e in t.external_data) else ""
    opset = model.opset_import[0].version
    print(f"wrote {args.output} (opset {opset}, {len(model.graph.node)} nodes{beside})")
    return 0


def _stablehlo_file_to_onnx(args: argparse.Namespace) -> int:
    from jaxconv.onnx import convert

    if not os.path.exists(args.file):
        raise UsageError(f"file not found: {args.file}")
    from jaxconv.errors import ModuleParseError

    try:
        model = convert.stablehlo_file_to_onnx(args.file, args.entry, args.opset)
    except ModuleParseError as e:
        raise e.at(args.file) from e
    convert.validate(model)
    if args.no_check:
        convert.save(model, args.output)
        loaded = ""
    else:  # no JAX function to compare with, but a model ORT cannot load is no model
        convert.save(model, args.output, before_publish=_loads_in_onnx_runtime(args.output))
        loaded = "; loads in ONNX Runtime"
    print(f"wrote {args.output} (opset {model.opset_import[0].version}, {len(model.graph.node)} nodes{loaded}; "
          "no JAX function to check against)")
    return 0


def _loads_in_onnx_runtime(output: str) -> Callable[[str], None]:
    """A check that ONNX Runtime loads the model written for ``output``: ArtifactError (exit 8) if not."""
    from jaxconv.runtimes.onnxrt import OnnxRunner

    def check(path: str) -> None:
        try:
            OnnxRunner(path, quiet=True)
        except ArtifactError as e:  # in the output's name, not the temporary file's
            raise ArtifactError(str(e).replace(path, output)) from e
    return check


def cmd_to_saved_model(args: argparse.Namespace) -> int:
    from jaxconv import api

    program = _load_program(args)
    reports: list = []
    try:
        api.to_saved_model(program, path=args.output, check=not args.no_check, rtol=args.rtol, atol=args.atol,
                           report_to=reports, overwrite=args.overwrite, route=args.route)
    finally:
        _print_reports(reports)
    print(f"wrote {args.output}")
    return 0


def cmd_to_tflite(args: argparse.Namespace) -> int:
    from jaxconv import api
    from jaxconv.artifacts import check_file_path

    check_file_path(args.output)  # before the conversion's work (and before TensorFlow is asked for)
    program = _load_program(args)
    reports: list = []
    try:
        data = api.to_tflite(program, path=args.output, allow_flex=args.allow_flex, quantize=args.quantize,
                             check=not args.no_check, rtol=args.rtol, atol=args.atol, report_to=reports,
                             route=args.route)
    finally:
        _print_reports(reports)
    if args.no_check:
        from jaxconv.runtimes.tflite import read_route

        how = " (auto: it converted and ran once in LiteRT on random inputs)" if args.route == "auto" else ""
        print(f"route {read_route(data)}{how}; not compared with jax.jit (--no-check)")
    print(f"wrote {args.output}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from jaxconv import api
    from jaxconv.runtimes import artifact_kind

    artifact_kind(args.artifact)
    program = _load_program(args)
    report = api.check(args.artifact, program, inputs=args.inputs, seed=args.seed, rtol=args.rtol, atol=args.atol)
    _print_reports([report])
    from jaxconv.verify import raise_on_mismatch

    raise_on_mismatch(report)
    return 0


def _bench_sizes(text: str | None, names: Sequence[str]) -> dict[str, int]:
    """``b=8,n=3`` -> {"b": 8, "n": 3} for --sizes, checked against the symbolic dimension names."""
    sizes: dict[str, int] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, _, value = part.partition("=")
        try:
            sizes[key.strip()] = int(value)
        except ValueError as e:
            raise UsageError(f"--sizes {text!r}: give NAME=SIZE pairs, e.g. b=8,n=3") from e
        if sizes[key.strip()] < 1:
            raise UsageError(f"--sizes {text!r}: sizes must be at least 1")
    unknown = [k for k in sizes if k not in names]
    if unknown:
        raise UsageError(f"--sizes {text!r}: {', '.join(unknown)} is not a symbolic dimension of the specs "
                         f"(they have {', '.join(names) or 'none'})")
    missing = [n for n in names if n not in sizes]
    if missing:
        raise UsageError(f"symbolic dimension(s) {', '.join(missing)} need a size for the benchmark's "
                         f"inputs: give --sizes {','.join(f'{n}=8' for n in missing)} or --inputs X.npz")
    return sizes


def _shape_text(dtype: str, shape: Sequence[Any]) -> str:
    return f"{dtype}[{','.join(map(str, shape))}]"


def _bench_onnx_file(path: str, signature: Any) -> tuple[int, float]:
    """(nodes, MB on disk) of --onnx, once its inputs are the specs' (count, dtype, rank, fixed sizes).

    Raises:
        ArtifactError: the file is not an ONNX model.
        UsageError: its inputs differ from the specs'.
    """
    import onnx

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:
        why = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ArtifactError(f"{path} is not an ONNX model: {why}") from e
    from jaxconv.cpp.onnx_io import onnx_signature

    try:
        inputs = onnx_signature(model).inputs  # complex inputs as complex, not their (re, im) layout
    except (JaxconvError, KeyError, ValueError) as e:  # a layout the metadata contradicts, an untyped input
        raise ArtifactError(f"{path}: cannot read its inputs: {e}") from e
    if len(inputs) != len(signature.inputs):
        given, want = ", ".join(i.name for i in inputs), ", ".join(t.name for t in signature.inputs)
        raise UsageError(f"{path} takes {len(inputs)} input(s) ({given}); "
                         f"the specs give {len(signature.inputs)} ({want})")
    for i, t in zip(inputs, signature.inputs):
        fixed = [(a, b) for a, b in zip(i.shape, t.shape) if isinstance(a, int) and isinstance(b, int)]
        if i.dtype != t.dtype or len(i.shape) != len(t.shape) or any(a != b for a, b in fixed):
            raise UsageError(f"{path}: input {i.name!r} is {_shape_text(i.dtype, i.shape)}, "
                             f"the specs give {t.name!r} {_shape_text(t.dtype, t.shape)}")
    files = {path} | {os.path.join(os.path.dirname(path), e.value) for t in model.graph.initializer
                      for e in t.external_data if e.key == "location"}
    return len(model.graph.node), sum(os.path.getsize(f) for f in files if os.path.isfile(f)) / 2**20


def _bench_source(program: Any, opset: int | None, workdir: str) -> tuple[Any, int, float]:
    """(the model for ORT, nodes, MB): bytes, or a file in ``workdir`` beyond protobuf's 2 GB."""
    import onnx

    from jaxconv import api

    model = api.to_onnx(program, opset=opset, check=False)
    nodes, size = len(model.graph.node), model.ByteSize()
    if size <= 2**31 - 2**24:
        return model.SerializeToString(), nodes, size / 2**20
    path = os.path.join(workdir, f"{program.name}.onnx")
    onnx.save(model, path, save_as_external_data=True)
    return path, nodes, size / 2**20


def cmd_bench(args: argparse.Namespace) -> int:
    import json
    import tempfile

    from jaxconv import benchmark, check_inputs
    from jaxconv.judging import judge_set
    from jaxconv.onnx.thread_count import read_record, recorded
    from jaxconv.references import reference_outputs
    from jaxconv.runtimes.onnxrt import OnnxRunner, default_threads, spins_during_run

    for flag, value in (("--iters", args.iters), ("--threads", args.threads)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value}: give a count of at least 1")
    if not args.budget > 0:
        raise UsageError(f"--budget {args.budget}: give seconds above 0")
    if args.inputs and args.sizes:
        raise UsageError("--sizes sizes random inputs; with --inputs the arrays give the sizes")
    if args.inputs and not os.path.isfile(args.inputs):
        raise UsageError(f"file not found: {args.inputs}")
    if args.onnx and not os.path.isfile(args.onnx):
        raise ArtifactError(f"artifact not found: {args.onnx}")
    if args.onnx and args.opset is not None:
        raise UsageError("--opset applies to the conversion; --onnx takes the model as it is")
    from jaxconv.loading import EXAMPLE_INPUTS, load_function
    from jaxconv.program import require_specs, trace

    loaded = load_function(args.file, args.fn_name)
    _freeze_imports()
    require_specs(args.specs)
    program = trace(loaded.fn, args.specs, name=loaded.name, param_names=loaded.param_names,
                    constraints=args.constraints, source_path=loaded.path, hoist_constants=True)
    signature = program.signature
    with tempfile.TemporaryDirectory() as workdir, program.jax_scope():
        examples = None if args.inputs or args.sizes else loaded.examples()
        if args.inputs:
            inputs, what = check_inputs.load_inputs(args.inputs, signature), args.inputs
        elif examples is not None:
            source = f"{EXAMPLE_INPUTS}() in {os.path.basename(loaded.path)}"
            inputs = check_inputs.flatten_examples(examples, program.arg_specs, signature, source)
            what = f"{EXAMPLE_INPUTS}()"
        else:
            sizes = _bench_sizes(args.sizes, check_inputs.dim_names(signature))
            inputs, what = check_inputs.random_set(signature, sizes, seed=0).arrays, "random"
        model: Any
        if args.onnx:
            nodes, size_mb = _bench_onnx_file(args.onnx, signature)
            model = args.onnx
        else:
            model, nodes, size_mb = _bench_source(program, args.opset, workdir)
        expected = reference_outputs(program.fn, program.arg_specs, inputs)
        runner = OnnxRunner(model)
        actual = runner.run(inputs)
        # the check's verdicts (float64 and the other references where jax.jit is off), on this one set
        rows = judge_set(runner, program.fn, program.arg_specs, signature, inputs, expected, actual, None, None,
                         what)
        del expected, actual
        result = benchmark.measure(
            program.name, benchmark.jit_call(program.fn, program.arg_specs, inputs), model, inputs,
            nodes=nodes, size_mb=size_mb, max_abs=max((r.max_abs for r in rows), default=0.0),
            mismatches=[f"{r.name} differs from jax.jit (max abs error {r.max_abs:.3g}): {r.note}"
                        for r in rows if not r.ok],
            threads=args.threads or recorded(model, [getattr(a, "shape", ()) for a in inputs]) or default_threads(),
            iters=args.iters, budget_s=args.budget,
            spin=args.spin, profile=os.path.join(args.profile, program.name) if args.profile else None)
        spins = spins_during_run(read_record(model), result.threads, [getattr(a, "shape", ()) for a in inputs])
    spin_text = "during each run, stopped after it" if spins else "off"
    print(f"Machine: {benchmark.machine()}")
    print(f"Inputs: {what}; ORT: jaxconv's session options (spinning {spin_text}), "
          f"{result.threads or 'ORT-chosen'} thread(s); 1t: one thread\n")
    print(result.table())
    for note in result.notes:
        print(f"- {note}")
    if result.trace:
        kernels = ", ".join(f"{k} {v:.0%}" for k, v in result.kernels)
        print(f"\nprofile (1 thread, {result.trace}): {kernels}")
    for m in result.mismatches:
        print(f"jaxconv: warning: {m}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": benchmark.machine(), "specs": list(args.specs), "onnx": args.onnx,
                       "inputs": what, **result.to_json()}, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0


def cmd_to_cpp(args: argparse.Namespace) -> int:
    from jaxconv.cpp.project import write_project

    program = _load_program(args)
    reports: list = []
    try:
        written = write_project(program, args.output, name=args.name, embed=args.embed, c_api=args.c_api,
                                opset=args.opset, check=not args.no_check, rtol=args.rtol, atol=args.atol,
                                overwrite=args.overwrite, report_to=reports)
    finally:
        _print_reports(reports)
    print(f"wrote {', '.join(written)}")
    return 0


def cmd_cpp_runtime(args: argparse.Namespace) -> int:
    from jaxconv.cpp.runtime import prepare

    dest = prepare(args.dest, headers=args.headers)
    print(dest)  # the last line: ORT=$(jaxconv cpp-runtime DEST)
    return 0


def cmd_saved_model_to_onnx(args: argparse.Namespace) -> int:
    from jaxconv import check_context, check_inputs
    from jaxconv.artifacts import check_file_path

    check_file_path(args.output)  # before TensorFlow is imported
    from jaxconv.tf.saved_model_to_onnx import saved_model_to_onnx

    sizes = check_inputs.parse_sizes(args.check_sizes) if args.check_sizes else None
    check_context.set_check_options(sizes=sizes, strict=args.strict)
    reports: list = []
    try:
        converted = saved_model_to_onnx(args.saved_model, args.output, args.signature, args.opset,
                                        check=not args.no_check, rtol=args.rtol, atol=args.atol, report_to=reports)
    finally:
        _print_reports(reports)
    for c in converted.values():
        print(f"wrote {c.path} (signature {c.signature}, opset {c.model.opset_import[0].version}, "
              f"{len(c.model.graph.node)} nodes, {c.modules} XlaCallModule lowered)")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from jaxconv.inspection import inspect_artifact

    print(inspect_artifact(args.artifact))
    return 0


def cmd_list_ops(args: argparse.Namespace) -> int:
    from jaxconv.onnx.registry import ops_markdown, ops_text

    print(ops_markdown() if args.markdown else ops_text(), end="")
    return 0


COMMANDS = {
    "to-stablehlo": cmd_to_stablehlo, "to-onnx": cmd_to_onnx, "to-saved-model": cmd_to_saved_model,
    "to-tflite": cmd_to_tflite, "to-cpp": cmd_to_cpp, "cpp-runtime": cmd_cpp_runtime, "check": cmd_check,
    "inspect": cmd_inspect, "list-ops": cmd_list_ops,
    "saved-model-to-onnx": cmd_saved_model_to_onnx, "bench": cmd_bench,
}


def _freeze_at_exit() -> None:
    """Spare the interpreter's last full collection at exit (``gc.freeze`` first, from ``atexit``).

    A converting process holds jax's, onnx's and the model's objects; the final collection walks
    them all (0.1-0.2 s) to free memory the process is giving back whole. Idempotent.
    """
    import atexit
    import gc

    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


@contextlib.contextmanager
def _thawed_after() -> Iterator[None]:
    """Objects frozen by the command (``_freeze_imports``) back in the collector's reach when it ends."""
    import gc

    frozen_before = gc.get_freeze_count()
    try:
        yield
    finally:
        if not frozen_before:  # a caller's own frozen objects stay frozen
            gc.unfreeze()


def _freeze_imports() -> None:
    """Keep what is alive now (jax, the user's modules and weights) out of the cycle collector's walks.

    Each full collection while tracing and converting would walk them all, a tenth of a second
    each; ``main`` thaws them when the command ends, so a caller's process collects them as before.
    """
    import gc

    if not gc.get_freeze_count():
        gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from jaxconv import __version__

        print(f"jaxconv {__version__}")
        return 0
    if not args.command:
        parser.print_help()
        return 2
    try:
        from jaxconv.check_context import check_options

        _freeze_at_exit()
        import warnings

        warnings.filterwarnings("ignore", category=CheckWarning)  # printed with the check's table
        with check_options(), _terminate_as_interrupt(), _thawed_after():
            return COMMANDS[args.command](args)
    except JaxconvError as e:
        if args.debug:
            raise
        print(f"jaxconv: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        terminated = isinstance(e, _Terminated)
        print(f"jaxconv: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except Exception as e:  # an internal bug: say so on one line
        if args.debug:
            raise
        print(f"jaxconv: internal error: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
