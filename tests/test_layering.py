"""Layering rules, checked by scanning every import in the converter's source."""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "converter", "jaxconv")


def imports(path):
    """(module name, is_top_level) for every import in the file."""
    tree = ast.parse(open(path).read(), path)
    top = set(id(n) for n in tree.body)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in top))
    return found


def sources():
    for folder, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                yield os.path.relpath(path, PKG).replace(os.sep, "/"), path


ALL = list(sources())


def root(name):
    return name.split(".")[0]


@pytest.mark.parametrize("rel,path", ALL, ids=[r for r, _ in ALL])
def test_import_rules(rel, path):
    for name, _ in imports(path):
        if name.startswith(("jaxlib.mlir", "jax.extend.mlir", "jax._src.interpreters.mlir", "jax._src.lib")):
            assert rel.startswith("stablehlo/"), f"{rel} imports {name}: only stablehlo/ may touch MLIR"
        if root(name) in ("tensorflow", "tf2onnx", "keras", "tf_keras"):
            assert rel.startswith(("tf/", "runtimes/")), f"{rel} imports {name}: TensorFlow belongs in tf/ and runtimes/"
        if root(name) == "ai_edge_litert":
            assert rel.startswith(("tf/", "runtimes/")) or rel == "inspection.py", f"{rel} imports {name}"
        assert root(name) not in ("conformance", "tests"), f"{rel} imports {name}: the converter never imports {root(name)}"
        if rel.startswith("onnx/ops/"):
            assert root(name) not in ("jax", "jaxlib"), f"{rel} imports {name}: lowerings work on the pure IR only"


@pytest.mark.parametrize("rel", ["__init__.py", "cli.py", "errors.py", "__main__.py"])
def test_start_up_path_has_no_heavy_top_level_imports(rel):
    heavy = {"jax", "jaxlib", "tensorflow", "onnx", "onnxruntime", "numpy", "ai_edge_litert", "tf2onnx"}
    for name, top in imports(os.path.join(PKG, rel)):
        assert not (top and root(name) in heavy), f"{rel} imports {name} at module level (slows `jaxconv --help`)"


def test_no_not_implemented_stubs():
    for rel, path in ALL:
        assert "NotImplementedError" not in open(path).read(), f"{rel}: unsupported means unregistered, not a stub"


def test_errors_keep_their_cause():
    """``raise X(...) from None`` hides the ONNX Runtime, onnx.checker or MLIR error from ``--debug``.

    Only re-raising an error caught earlier, with a later failure of a fallback as the context, may drop it.
    """
    allowed = {("onnx/ops/sort.py", "direct")}
    found = []
    for rel, path in ALL:
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.Raise) and isinstance(node.cause, ast.Constant) and node.cause.value is None:
                raised = node.exc.id if isinstance(node.exc, ast.Name) else None
                if (rel, raised) not in allowed:
                    found.append(f"{rel}:{node.lineno}")
    assert found == [], "raise ... from None (chain the cause: from e): " + ", ".join(found)
