"""``jaxconv to-cpp``: write a CMake project (model.onnx, NAME.h/.cc, example, package files) for a model."""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Any

from jaxconv.cpp.model import CppModel
from jaxconv.errors import JaxconvError, MismatchError, UnsupportedError
from jaxconv.program import Program

ONNX_FILE = "model.onnx"
# What a project folder written before the marker file existed holds (see artifacts.foreign_entries).
EARLIER_OUTPUT = ("model.h", ONNX_FILE, ONNX_FILE + ".data", "model_data.cc", "model.cc", "example.cc", "npy.h",
                  "CMakeLists.txt", "README.md")


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def _relabel(e: JaxconvError, tmp: str, out_dir: str, reports: list) -> JaxconvError:
    """The same error class, naming ``out_dir`` instead of the temporary folder."""
    if isinstance(e, MismatchError) and reports:
        bad = [r for r in reports[-1].rows if not r.ok]
        if bad:
            first = bad[0]
            return MismatchError(
                f"{out_dir} not written: the ONNX model's output {first.name} differs from jax.jit "
                f"(max abs err {first.max_abs:.3g}, max rel err {first.max_rel:.3g}"
                f"{', ' + first.note if first.note else ''}); {len(bad)} of {len(reports[-1].rows)} output checks failed")
    text = str(e).replace(os.path.join(tmp, ONNX_FILE), os.path.join(out_dir, ONNX_FILE)).replace(tmp, out_dir)
    return type(e)(f"{out_dir} not written: {text}")


def _usual_permissions(folder: str, names: list[str]) -> None:
    """Temporary files are private (0600/0700); give the project the permissions of a normal checkout."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for n in names:
        os.chmod(os.path.join(folder, n), 0o666 & ~umask)


def project_texts(model: CppModel) -> dict[str, str]:
    """Every text file of the project except the model and its embedded bytes, by file name."""
    from jaxconv.cpp import c_api, cmake, example, header, readme, source, template

    c = model.cls
    texts = {f"{c}.h": header.render(model), f"{c}.cc": source.render(model),
             "example.cc": example.render(model)}
    if model.c_api:
        texts[f"{c}_c.h"] = c_api.render_header(model)
        texts[f"{c}_c.cc"] = c_api.render_source(model)
    texts.update({name: template.text(name) for name in template.FIXED_FILES})
    texts.update({"CMakeLists.txt": cmake.render(model), f"{c}Config.cmake": cmake.render_config(model),
                  f"{c}.pc": cmake.render_pc(model), "README.md": readme.render(model)})
    return texts


def _earlier_output(model: CppModel) -> tuple[str, ...]:
    """Top-level names an earlier unmarked project for ``model`` may hold: the old fixed names and
    the files named after the model that this version writes."""
    named = (f"{model.cls}_data.cc", f"{model.cls}_c.h", f"{model.cls}_c.cc")
    header = f"{model.cls}.h"  # the first name is the one that marks such a folder (artifacts.foreign_entries)
    return (header, *EARLIER_OUTPUT, *named, *project_texts(model))


def _finish(model: CppModel, tmp: str, out_dir: str) -> list[str]:
    """Write the sources next to ``tmp``/model.onnx; returns the file names, model.onnx first."""
    from jaxconv.cpp import embed as embed_src

    onnx_path = os.path.join(tmp, ONNX_FILE)
    _check_complex(model, onnx_path, out_dir)
    from jaxconv.onnx import thread_count

    record = thread_count.read_record(onnx_path)
    model = dataclasses.replace(model, threads=recorded_threads(record), spin_during_run=record.spin)
    names = [ONNX_FILE]
    if os.path.exists(onnx_path + ".data"):
        if model.embed:
            raise UnsupportedError(f"{out_dir} not written: the model is over 2 GB (external data) and "
                                   "cannot be embedded; drop --embed")
        names.append(ONNX_FILE + ".data")
    if model.embed:
        with open(onnx_path, "rb") as f:
            data = f.read()
        data_file = f"{model.cls}_data.cc"
        with open(os.path.join(tmp, data_file), "w", encoding="ascii", newline="\n") as f:
            embed_src.write(model, data, f)
        names.append(data_file)
    for file_name, text in project_texts(model).items():
        _write_text(os.path.join(tmp, file_name), text)
        names.append(file_name)
    _usual_permissions(tmp, names)
    return names


def recorded_threads(record: Any) -> int:
    """The intra-op thread count for the generated class's ``Options`` from the model's
    ``thread_count.Record``: the count it records; 1 where it records one by size (one thread serves its
    small sizes, and the class does not weigh each call); else 0, ONNX Runtime's default (one per core),
    as jaxconv's own sessions do."""
    if record.threads_always is not None:
        return record.threads_always
    return 1 if record.products else 0


def _check_complex(model: CppModel, onnx_path: str, out_dir: str) -> None:
    """The model's ``jaxconv.complex`` metadata must list the tensors the C++ API treats as complex."""
    if not model.complex:
        return
    import onnx

    from jaxconv.onnx.complex_layout import complex_io

    got = complex_io(onnx.load(onnx_path, load_external_data=False))
    if got != model.complex_io():
        raise UnsupportedError(f"{out_dir} not written: the ONNX model's jaxconv.complex metadata lists "
                               f"{got}, the signature has complex tensors {model.complex_io()}")


def write_project(program: Program, out_dir: str, *, name: str | None = None, embed: bool = False,
                  c_api: bool = False, opset: int | None = None, check: bool = True,
                  rtol: float | None = None, atol: float | None = None, overwrite: bool = False,
                  report_to: list | None = None) -> list[str]:
    """Write a C++ project for ``program`` into ``out_dir`` (replaced as a whole, or left untouched on error).

    The folder gets model.onnx (checked against jax.jit unless ``check`` is False), NAME.h and
    NAME.cc (the class), the fixed support headers, example.cc, CMakeLists.txt with install rules,
    NAMEConfig.cmake and NAME.pc (the installed package), README.md; with ``embed`` NAME_data.cc
    holding the model bytes (the library then needs no model file); with ``c_api`` NAME_c.h/.cc.

    Args:
        name: class and library name, with namespaces (``foo::bar::Mlp``; default: the function's name).
        embed: compile the model into the library.
        c_api: also generate an ``extern "C"`` API.
        opset: ONNX opset (default: jaxconv's).
        check: run the ONNX model and jax.jit on the same inputs and compare.
        overwrite: replace ``out_dir`` even when it holds files jaxconv did not write.
        report_to: receives the check's reports (the table the CLI prints).

    Returns:
        The written paths, model.onnx first.

    Raises:
        UsageError: bad ``name``, or an output folder that must not be replaced (see
            ``artifacts.check_output_dir``).
        UnsupportedError: a dtype or dimension the C++ API cannot express, or an op ONNX lacks.
        MismatchError: the ONNX model differs from jax.jit (nothing is written).
    """
    from jaxconv import api
    from jaxconv.artifacts import atomic_dir
    from jaxconv.cpp.model import build_model

    try:
        model = build_model(program, name=name, embed=embed, c_api=c_api)
    except UnsupportedError as e:
        raise UnsupportedError(f"{out_dir} not written: {e}") from e
    reports: list = [] if report_to is None else report_to
    protect = (program.source_path,)
    with atomic_dir(out_dir, overwrite=overwrite, protect=protect, earlier=_earlier_output(model)) as tmp:
        onnx_path = os.path.join(tmp, ONNX_FILE)
        try:
            api.to_onnx(program, path=onnx_path, opset=opset, check=check, rtol=rtol, atol=atol,
                        report_to=reports)
        except JaxconvError as e:
            raise _relabel(e, tmp, out_dir, reports) from e
        names = _finish(model, tmp, out_dir)
    return [os.path.join(out_dir, n) for n in names]


def write_project_for_onnx(onnx_path: str, out_dir: str, *, function: str, name: str | None = None,
                           embed: bool = False, c_api: bool = False, overwrite: bool = False) -> list[str]:
    """Write a C++ project for an existing ONNX model (copied as model.onnx; nothing to check it against).

    Its inputs and outputs come from the model; tensors listed in its ``jaxconv.complex`` metadata
    become ``std::complex`` buffers.
    """
    import onnx

    from jaxconv.artifacts import atomic_dir
    from jaxconv.cpp.model import model_from_signature
    from jaxconv.cpp.onnx_io import onnx_signature

    signature = onnx_signature(onnx.load(onnx_path, load_external_data=False))
    model = model_from_signature(signature, function, name=name, embed=embed, c_api=c_api)
    with atomic_dir(out_dir, overwrite=overwrite, earlier=_earlier_output(model)) as tmp:
        shutil.copyfile(onnx_path, os.path.join(tmp, ONNX_FILE))
        if os.path.exists(onnx_path + ".data"):
            shutil.copyfile(onnx_path + ".data", os.path.join(tmp, ONNX_FILE + ".data"))
        names = _finish(model, tmp, out_dir)
    return [os.path.join(out_dir, n) for n in names]
