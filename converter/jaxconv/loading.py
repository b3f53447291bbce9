"""Import a user's Python file by path and pick the function to convert."""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from jaxconv.errors import FileLoadError

EXAMPLE_INPUTS = "example_inputs"  # a top-level function returning example arguments for the check


@dataclass(frozen=True)
class LoadedFunction:
    """A user function picked from a file.

    Attributes:
        fn: the callable (possibly already jitted).
        name: its attribute name in the module.
        path: absolute path of the file it came from.
        param_names: names of its positional parameters, or None when unknown.
        example_inputs: the file's top-level ``example_inputs`` function, or None.
    """

    fn: Callable[..., Any]
    name: str
    path: str
    param_names: tuple[str, ...] | None
    example_inputs: Callable[[], Any] | None = None

    def examples(self) -> Any | None:
        """Call the file's ``example_inputs()``: the example arguments, as the function takes them.

        Raises:
            FileLoadError: ``example_inputs`` is not callable without arguments, or raises.
        """
        if self.example_inputs is None:
            return None
        try:
            return self.example_inputs()
        except BaseException as e:  # the user's code may raise anything
            if isinstance(e, KeyboardInterrupt):
                raise
            raise FileLoadError(f"{EXAMPLE_INPUTS}() in {self.path} failed{user_frame(e, self.path)}: "
                                f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}") from e


def split_target(target: str) -> tuple[str, str | None]:
    """Split ``FILE:NAME`` into (FILE, NAME); a plain FILE gives (FILE, None)."""
    head, sep, tail = target.rpartition(":")
    if sep and tail and tail.isidentifier() and head and not os.path.exists(target):
        return head, tail
    return target, None


def import_file(path: str) -> Any:
    """Import ``path`` as a module with its own folder first on sys.path.

    Raises:
        FileLoadError: the file is missing, is not Python, or fails while importing.
    """
    if not os.path.exists(path):
        raise FileLoadError(f"file not found: {path}")
    if os.path.isdir(path):
        raise FileLoadError(f"{path} is a folder; give the Python file that defines the function")
    abspath = os.path.abspath(path)
    folder = os.path.dirname(abspath)
    stem = os.path.splitext(os.path.basename(abspath))[0]
    module_name = f"_jaxconv_user_{stem}_{abs(hash(abspath)) & 0xFFFFFF:x}"
    spec = importlib.util.spec_from_file_location(module_name, abspath)
    if spec is None or spec.loader is None:
        raise FileLoadError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(module_name, None)
        if "null bytes" in str(e.msg):
            raise FileLoadError(f"{path} is not a Python source file: it contains null bytes") from e
        where = f"{e.filename or path}:{e.lineno}" if e.lineno else (e.filename or path)
        raise FileLoadError(f"syntax error in {where}: {e.msg}") from e
    except BaseException as e:  # the user's module may raise anything, even SystemExit
        sys.modules.pop(module_name, None)
        where = user_frame(e, abspath)
        raise FileLoadError(f"importing {path} failed{where}: {type(e).__name__}: {e}") from e
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def user_frame(exc: BaseException, abspath: str) -> str:
    """Return ' at FILE:LINE' for the deepest traceback frame inside the user's file, or ''."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == abspath]
    if not frames:
        return ""
    last = frames[-1]
    return f" at {last.filename}:{last.lineno}"


def public_functions(module: Any) -> list[str]:
    """Public top-level callables defined in ``module`` itself (functions and jitted functions).

    ``example_inputs`` is not a candidate: it gives the check its example arguments.
    """
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or name == EXAMPLE_INPUTS or inspect.isclass(value) or inspect.ismodule(value) or not callable(value):
            continue
        inner = inspect.unwrap(value) if hasattr(value, "__wrapped__") else value
        if inspect.isfunction(inner) and getattr(inner, "__module__", None) == module.__name__:
            names.append(name)
    return names


def positional_params(fn: Callable[..., Any]) -> tuple[str, ...] | None:
    """Names of the positional parameters, those with defaults too (a spec may bind them), or None for
    ``*args`` functions or unknown signatures."""
    params = _positional(fn)
    return None if params is None else tuple(p.name for p in params)


def required_positional(fn: Callable[..., Any]) -> int | None:
    """How many positional parameters have no default, or None for ``*args`` functions or unknown signatures."""
    params = _positional(fn)
    return None if params is None else sum(p.default is p.empty for p in params)


def _positional(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        sig = inspect.signature(inspect.unwrap(fn) if hasattr(fn, "__wrapped__") else fn)
    except (TypeError, ValueError):
        return None
    out = []
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            out.append(p)
    return out


def load_function(target: str, fn_name: str | None = None) -> LoadedFunction:
    """Load the function named by ``FILE``, ``FILE:NAME`` or ``fn_name``.

    With no name, a file with exactly one public top-level function uses it.

    Raises:
        FileLoadError: with the list of candidates when the choice is missing or ambiguous.
    """
    path, colon_name = split_target(target)
    if colon_name and fn_name and colon_name != fn_name:
        raise FileLoadError(f"two function names given: {colon_name!r} (in {target}) and --fn {fn_name!r}")
    name = fn_name or colon_name
    module = import_file(path)
    candidates = public_functions(module)
    if name is None:
        if len(candidates) == 1:
            name = candidates[0]
        elif not candidates:
            raise FileLoadError(f"{path} defines no public top-level function; define one or name a callable with FILE:NAME")
        else:
            raise FileLoadError(
                f"{path} defines {len(candidates)} public functions ({', '.join(candidates)}); pick one with {path}:NAME or --fn NAME")
    if not hasattr(module, name):
        hint = f"; candidates: {', '.join(candidates)}" if candidates else ""
        raise FileLoadError(f"{path} has no function {name!r}{hint}")
    fn = getattr(module, name)
    if not callable(fn):
        raise FileLoadError(f"{path}:{name} is a {type(fn).__name__}, not a callable")
    examples = getattr(module, EXAMPLE_INPUTS, None)
    if examples is not None and not callable(examples):
        raise FileLoadError(f"{path}: {EXAMPLE_INPUTS} is a {type(examples).__name__}; make it a function that returns "
                            "the example arguments")
    return LoadedFunction(fn=fn, name=name, path=os.path.abspath(path), param_names=positional_params(fn),
                          example_inputs=examples)
