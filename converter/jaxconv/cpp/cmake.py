"""CMakeLists.txt, NAMEConfig.cmake and NAME.pc: build, install and find libNAME.so on ONNX Runtime."""

from __future__ import annotations

from jaxconv.cpp import template
from jaxconv.cpp.model import CppModel


def lib_sources(model: CppModel) -> list[str]:
    """The library's sources, in the project folder."""
    c = model.cls
    return [f"{c}.cc"] + ([f"{c}_data.cc"] if model.embed else []) + ([f"{c}_c.cc"] if model.c_api else [])


def installed_headers(model: CppModel) -> list[str]:
    c = model.cls
    return [f"{c}.h"] + ([f"{c}_c.h"] if model.c_api else [])


def render(model: CppModel) -> str:
    n = model.cls
    if model.embed:
        example_model, install_model, note = "", "", ""
    else:
        example_model = (f'target_compile_definitions({n}_example PRIVATE '
                         f'"JAXCONV_MODEL_PATH=\\"${{CMAKE_CURRENT_SOURCE_DIR}}/model.onnx\\"")\n')
        install_model = f"install(FILES model.onnx DESTINATION share/{n})\n"
        note = f" and share/{n}/model.onnx"
    return template.render("CMakeLists.txt.in", {
        "FUNCTION": model.function, "CLS": n, "LIB_SOURCES": " ".join(lib_sources(model)),
        "EXAMPLE_MODEL": example_model, "INSTALL_MODEL": install_model, "INSTALL_MODEL_NOTE": note,
        "HEADERS": " ".join(installed_headers(model)),
    })


def render_config(model: CppModel) -> str:
    n = model.cls
    model_file = "" if model.embed else f"${{_{n}_prefix}}/share/{n}/model.onnx"
    return template.render("Config.cmake.in", {
        "QUALIFIED": model.qualified, "FUNCTION": model.function, "CLS": n, "MODEL_FILE": model_file,
        "MODEL_FILE_CHECK": "" if model.embed else f' "{model_file}"',
    })


def render_pc(model: CppModel) -> str:
    return template.render("package.pc.in", {"QUALIFIED": model.qualified, "FUNCTION": model.function,
                                             "CLS": model.cls})
