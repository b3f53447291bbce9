"""``jaxconv to-cpp``: write a CMake project (model.onnx, model.h/.cc, example) for a traced program."""

from __future__ import annotations

import os

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


def write_project(program: Program, out_dir: str, *, name: str | None = None, embed: bool = False,
                  opset: int | None = None, check: bool = True, rtol: float | None = None,
                  atol: float | None = None, overwrite: bool = False) -> list[str]:
    """Write a C++ project for ``program`` into ``out_dir`` (replaced as a whole, or left untouched on error).

    The folder gets model.onnx (checked against jax.jit unless ``check`` is False), model.h,
    model.cc, example.cc, npy.h, CMakeLists.txt, README.md, and with ``embed`` model_data.cc
    holding the model bytes (the library then needs no model file).

    Args:
        name: class and library name (default: the function's name).
        embed: compile the model into the library.
        opset: ONNX opset (default: jaxconv's).
        check: run the ONNX model and jax.jit on the same inputs and compare.
        overwrite: replace ``out_dir`` even when it holds files jaxconv did not write.

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
    from jaxconv.cpp import cmake, embed as embed_src, example, header, readme, source
    from jaxconv.cpp.model import build_model
    from jaxconv.cpp.npy import NPY_H

    try:
        model = build_model(program, name=name, embed=embed)
    except UnsupportedError as e:
        raise UnsupportedError(f"{out_dir} not written: {e}") from None
    texts = {
        "model.h": header.render(model),
        "model.cc": source.render(model),
        "example.cc": example.render(model),
        "npy.h": NPY_H,
        "CMakeLists.txt": cmake.render(model),
        "README.md": readme.render(model),
    }
    names = [ONNX_FILE] + (["model_data.cc"] if embed else []) + list(texts)
    with atomic_dir(out_dir, overwrite=overwrite, protect=(program.source_path,), earlier=EARLIER_OUTPUT) as tmp:
        reports: list = []
        onnx_path = os.path.join(tmp, ONNX_FILE)
        try:
            api.to_onnx(program, path=onnx_path, opset=opset, check=check, rtol=rtol, atol=atol, report_to=reports)
        except JaxconvError as e:
            raise _relabel(e, tmp, out_dir, reports) from None
        if embed:
            if os.path.exists(onnx_path + ".data"):
                raise UnsupportedError(f"{out_dir} not written: the model is over 2 GB (external data) and cannot be "
                                       "embedded; drop --embed")
            with open(onnx_path, "rb") as f:
                data = f.read()
            with open(os.path.join(tmp, "model_data.cc"), "w", encoding="ascii", newline="\n") as f:
                embed_src.write(model, data, f)
        for file_name, text in texts.items():
            _write_text(os.path.join(tmp, file_name), text)
        if os.path.exists(onnx_path + ".data"):
            names.insert(1, ONNX_FILE + ".data")
        _usual_permissions(tmp, names)
    return [os.path.join(out_dir, n) for n in names]
