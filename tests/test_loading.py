"""Picking the function out of a user's file."""

import textwrap

import pytest

from jaxconv.errors import FileLoadError
from jaxconv.loading import load_function, split_target


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_single_public_function_is_picked(tmp_path):
    path = write(tmp_path, "one.py", """
        import jax.numpy as jnp
        def _helper(x):
            return x
        def model(x, y):
            return _helper(x) + y
    """)
    loaded = load_function(path)
    assert loaded.name == "model"
    assert loaded.param_names == ("x", "y")
    assert loaded.fn(1, 2) == 3


def test_ambiguous_file_lists_candidates(tmp_path):
    path = write(tmp_path, "two.py", "def a(x): return x\ndef b(x): return x\n")
    with pytest.raises(FileLoadError, match=r"2 public functions \(a, b\).*:NAME or --fn NAME"):
        load_function(path)


def test_colon_and_fn_pick(tmp_path):
    path = write(tmp_path, "two.py", "def a(x): return x\ndef b(x): return -x\n")
    assert load_function(f"{path}:b").fn(2) == -2
    assert load_function(path, "a").fn(2) == 2
    with pytest.raises(FileLoadError, match="two function names"):
        load_function(f"{path}:a", "b")


def test_any_callable_attribute_and_jitted_functions(tmp_path):
    path = write(tmp_path, "jitted.py", """
        import jax
        @jax.jit
        def f(x):
            return x * 2
        class Model:
            def __call__(self, x):
                return x + 1
        model = Model()
    """)
    assert load_function(path).name == "f"
    assert load_function(path, "model").fn(1) == 2


def test_missing_function_lists_candidates(tmp_path):
    path = write(tmp_path, "m.py", "def f(x): return x\n")
    with pytest.raises(FileLoadError, match="has no function 'g'; candidates: f"):
        load_function(path, "g")


def test_not_callable(tmp_path):
    path = write(tmp_path, "m.py", "def f(x): return x\nW = 3\n")
    with pytest.raises(FileLoadError, match="is a int, not a callable"):
        load_function(path, "W")


def test_missing_file(tmp_path):
    with pytest.raises(FileLoadError, match="file not found"):
        load_function(str(tmp_path / "nope.py"))


def test_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad.py", "def f(x):\n    return x +\n")
    with pytest.raises(FileLoadError, match=r"syntax error in .*bad.py:2"):
        load_function(path)


def test_import_error_names_the_line(tmp_path):
    path = write(tmp_path, "imp.py", "import os\nimport no_such_module_xyz\n")
    with pytest.raises(FileLoadError, match=r"importing .* failed at .*imp.py:2: ModuleNotFoundError"):
        load_function(path)


def test_file_folder_is_on_sys_path(tmp_path):
    write(tmp_path, "helpers_mod.py", "SCALE = 3\n")
    path = write(tmp_path, "main_mod.py", "from helpers_mod import SCALE\ndef f(x):\n    return x * SCALE\n")
    assert load_function(path).fn(2) == 6


def test_no_public_function(tmp_path):
    path = write(tmp_path, "empty.py", "X = 1\n")
    with pytest.raises(FileLoadError, match="defines no public top-level function"):
        load_function(path)


def test_split_target():
    assert split_target("model.py:f") == ("model.py", "f")
    assert split_target("model.py") == ("model.py", None)
    assert split_target("C:/x/model.py") == ("C:/x/model.py", None)
