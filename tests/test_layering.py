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


def jaxconv_modules(path):
    """The jaxconv modules a file imports (``from jaxconv.onnx import dtypes`` is ``jaxconv.onnx.dtypes``)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if root(a.name) == "jaxconv"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and root(node.module or "") == "jaxconv":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                base = os.path.join(ROOT, "converter", *sub.split("."))
                is_module = os.path.exists(base + ".py") or os.path.isdir(base)
                found.add(sub if is_module else node.module)
    return found


# What each layer may import of jaxconv, as prefixes (a module itself or anything below it).
# stablehlo/ reads and rewrites StableHLO for every target: no target's package, no ONNX library.
# onnx/rewrites/ are clean-up passes on the lowered onnx_ir graph: they never reach back into the
# lowering (onnx/ops, context, registry, driver) or StableHLO, and need no jax.
# onnx/ops/ (the lowering rules) never run the rewrites, which run after the whole graph is lowered.
# _scale_chain.py is shared by stablehlo/ and onnx/rewrites/: it imports nothing of jaxconv.
LAYERS = {
    "stablehlo/": {
        "forbidden": ("jaxconv.onnx", "jaxconv.tf", "jaxconv.runtimes", "jaxconv.cpp", "jaxconv.api",
                      "jaxconv.verify"),
        "libraries": ("onnx", "onnx_ir", "onnxruntime", "onnxscript"),
    },
    "onnx/rewrites/": {
        "allowed": ("jaxconv.onnx.rewrites", "jaxconv.onnx.dtypes", "jaxconv.onnx.passes",
                    "jaxconv.onnx.thread_count", "jaxconv._scale_chain"),
        "libraries": ("jax", "jaxlib"),
    },
    "onnx/ops/": {"forbidden": ("jaxconv.onnx.rewrites", "jaxconv.onnx.passes")},
    "_scale_chain.py": {"allowed": ()},
    # scan_params.py: a scan equation's operand counts, whichever JAX traced it; nothing of jaxconv.
    "scan_params.py": {"allowed": ()},
    # edge_loops.py: the loop rule of both checks, on a jaxpr and on an ONNX model; scan's counts only.
    "edge_loops.py": {"allowed": ("jaxconv.scan_params",)},
    # loop_caps.py: the capped copies of a program and an ONNX model; the loop rule and scan's counts only.
    "loop_caps.py": {"allowed": ("jaxconv.edge_loops", "jaxconv.scan_params")},
    # The check's parts below verify.py (which runs them): jax.jit's references, and what is known of
    # XLA's results on edge values; neither reaches back into verify.
    "references.py": {"allowed": ("jaxconv.compare", "jaxconv.jit_reference")},
    "rounding_noise.py": {"allowed": ("jaxconv.compare", "jaxconv.jit_reference")},
    "known_differences.py": {"allowed": ("jaxconv.compare", "jaxconv.references")},
    "excess_precision.py": {"allowed": ("jaxconv.compare", "jaxconv.known_differences")},
    "nan_choices.py": {"allowed": ("jaxconv.compare", "jaxconv.known_differences")},
    # jaxpr_rebind.py: a program re-evaluated with some ops computed by a rule; nothing of jaxconv.
    "jaxpr_rebind.py": {"allowed": ()},
    "vector_signs.py": {"allowed": ("jaxconv.compare", "jaxconv.references", "jaxconv.known_differences",
                                    "jaxconv.jaxpr_rebind")},
    "lapack_hangs.py": {"allowed": ("jaxconv.known_differences", "jaxconv.jaxpr_rebind")},
    "judging.py": {"allowed": ("jaxconv.compare", "jaxconv.references", "jaxconv.known_differences",
                               "jaxconv.excess_precision", "jaxconv.nan_choices", "jaxconv.vector_signs",
                               "jaxconv.check_context", "jaxconv.check_inputs", "jaxconv.rounding_noise")},
    "check_context.py": {"allowed": ("jaxconv.jit_reference",)},
    # proto_wire.py: protobuf's wire format for the readers and writers of model files; nothing of
    # jaxconv, and no protobuf library (it reads what they would load whole).
    "onnx/proto_wire.py": {"allowed": (), "libraries": ("onnx", "onnx_ir", "google", "numpy")},
}


def _under(name, prefixes):
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layer_imports(layer):
    rules = LAYERS[layer]
    files = [(rel, path) for rel, path in ALL if rel.startswith(layer)]
    assert files, f"no source under {layer}"
    found = []
    for rel, path in files:
        for name in sorted(jaxconv_modules(path)):
            if "allowed" in rules and not _under(name, rules["allowed"]):
                allowed = ", ".join(rules["allowed"]) or "nothing of jaxconv"
                found.append(f"{rel} imports {name} (allowed: {allowed})")
            if _under(name, rules.get("forbidden", ())):
                found.append(f"{rel} imports {name}")
        libraries = rules.get("libraries", ())
        found += [f"{rel} imports {name}" for name, _ in imports(path) if root(name) in libraries]
    assert found == [], f"{layer} breaks its layering rule (see LAYERS):\n" + "\n".join(found)


def test_a_layering_rule_catches_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from jaxconv.onnx import dtypes\nfrom jaxconv.onnx.ops import shape\nimport jax.numpy\n")
    assert jaxconv_modules(str(bad)) == {"jaxconv.onnx.dtypes", "jaxconv.onnx.ops.shape"}
    assert not _under("jaxconv.onnx.ops.shape", LAYERS["onnx/rewrites/"]["allowed"])
    assert _under("jaxconv.onnx.dtypes", LAYERS["onnx/rewrites/"]["allowed"])
    assert _under("jaxconv.onnx.rewrites._match", LAYERS["onnx/ops/"]["forbidden"])
    assert not _under("jaxconv.onnxish", ("jaxconv.onnx",))
    assert [n for n, _ in imports(str(bad)) if root(n) in LAYERS["onnx/rewrites/"]["libraries"]] == ["jax.numpy"]


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
