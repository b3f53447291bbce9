"""Write artifacts atomically: to a temporary path beside the target, then rename (``read_bytes`` reads one).

Output folders are replaced only when nothing of the user's would be lost: see ``check_output_dir``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Iterator, Sequence

from jaxconv.errors import ArtifactError, UsageError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish_mode(path: str, folder: bool) -> None:
    """mkstemp/mkdtemp create owner-only paths; give the artifact the permissions a plain open() would."""
    os.chmod(path, (0o777 if folder else 0o666) & ~_umask())


def prepare_parent(path: str) -> str:
    parent = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(parent):
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create output folder {parent}: {e.strerror}") from e
    if not os.access(parent, os.W_OK):
        raise UsageError(f"output folder {parent} is not writable")
    return parent


def check_file_path(path: str) -> None:
    """Refuse an output that cannot be a file (empty, a folder, a name ending in a separator), before any
    work is done for it."""
    if not path:
        raise UsageError("the output path is empty; give a file path")
    if os.path.isdir(path):
        raise UsageError(f"output {path} is a folder; give a file path")
    if path.endswith(("/", os.sep)):
        raise UsageError(f"output {path} names a folder (it ends with {path[-1]}); give a file path")


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[str]:
    """Yield a temporary file path; on success it replaces ``path``, on error it is removed."""
    check_file_path(path)
    parent = prepare_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=".jaxconv-", suffix=os.path.splitext(path)[1], dir=parent)
    os.close(fd)
    try:
        yield tmp
        _publish_mode(tmp, folder=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_files(paths: list[str]) -> Iterator[list[str]]:
    """Like atomic_file for several files that appear together or not at all."""
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(atomic_file(p)) for p in paths]
        yield tmps


MARKER_FILE = ".jaxconv-output"
"""Written into every output folder: lists the files jaxconv put there, so a later run may replace them."""


def _within(inner: str, outer: str) -> bool:
    """True when real path ``inner`` is ``outer`` or lies inside it."""
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def _entries(folder: str) -> set[str]:
    """Every file and folder under ``folder``, as paths relative to it (symbolic links are not followed)."""
    found: set[str] = set()
    for root, dirs, files in os.walk(folder):
        rel = os.path.relpath(root, folder)
        for name in dirs + files:
            found.add(name if rel == "." else os.path.join(rel, name))
    return found


def _recorded(folder: str) -> set[str] | None:
    """What the marker of an earlier jaxconv output lists, or None when there is no readable marker."""
    try:
        with open(os.path.join(folder, MARKER_FILE), encoding="utf-8") as f:
            data = json.load(f)
        return {str(p) for p in data["files"]} | {MARKER_FILE}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def foreign_entries(folder: str, earlier: Sequence[str] = ()) -> list[str]:
    """Entries of an existing folder that jaxconv did not write there (sorted); [] for an earlier jaxconv output.

    Args:
        earlier: for outputs written before the marker file existed: the top-level names such an
            output has, the first one required (e.g. ``jaxconv_signature.json`` of a SavedModel).
    """
    recorded = _recorded(folder)
    if recorded is not None:
        return sorted(_entries(folder) - recorded)
    names = sorted(os.listdir(folder))
    if earlier and earlier[0] in names:
        return sorted(set(names) - set(earlier))
    return names


def check_output_dir(path: str, *, overwrite: bool = False, protect: Sequence[str | None] = (),
                     earlier: Sequence[str] = ()) -> None:
    """Refuse an output folder whose replacement would lose something of the user's.

    Never allowed, even with ``overwrite``: the working folder or a folder holding it, the home
    folder or one holding it, and a folder holding any path in ``protect`` (the user's input
    file). Without ``overwrite``, an existing folder must be empty or an earlier jaxconv output
    (recognised by its marker file, or for older outputs by ``earlier``: see ``foreign_entries``)
    holding nothing jaxconv did not write.

    Raises:
        UsageError: the folder must not be replaced; the message says why and what to do.
    """
    if not path:
        raise UsageError("the output folder path is empty; give a new folder name, e.g. -o out/")
    real = os.path.realpath(path)
    guarded = [(os.path.realpath(os.getcwd()), "the working folder")]
    home = os.path.expanduser("~")
    if home and home != "~":
        guarded.append((os.path.realpath(home), "the home folder"))
    for kept, what in guarded:
        if _within(kept, real):
            where = "is" if kept == real else "holds"
            raise UsageError(f"output folder {path} {where} {what}; jaxconv replaces its output folder as a whole, "
                             "so give a new folder name, e.g. -o out/")
    for p in protect:
        if p and _within(os.path.realpath(p), real):
            raise UsageError(f"output folder {path} holds the input file {p}; give a new folder name")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise UsageError(f"output {path} exists and is not a folder")
    if not os.path.isdir(path) or overwrite:
        return
    foreign = foreign_entries(path, earlier)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UsageError(f"output folder {path} holds files jaxconv did not write ({shown}); choose another folder, "
                         "or pass --overwrite to replace the folder and everything in it")


def check_not_input(output: str, source: str | None) -> None:
    """Refuse an output file path that is the user's input file (folders: see ``check_output_dir``).

    Raises:
        UsageError: ``output`` is the input file.
    """
    if source and os.path.isfile(output) and os.path.samefile(output, source):
        raise UsageError(f"output {output} is the input file; give another output path")


def _write_marker(folder: str) -> None:
    from jaxconv import __version__

    files = sorted(_entries(folder))
    with open(os.path.join(folder, MARKER_FILE), "w", encoding="utf-8", newline="\n") as f:
        json.dump({"written_by": "jaxconv", "version": __version__, "files": files}, f, indent=1)
        f.write("\n")


def _swap_in(tmp: str, path: str, parent: str) -> None:
    """Rename ``tmp`` to ``path``; an existing ``path`` is renamed away first and deleted only afterwards."""
    if not os.path.isdir(path):
        os.replace(tmp, path)
        return
    old = tempfile.mkdtemp(prefix=".jaxconv-old-", dir=parent)
    os.replace(path, old)  # rename(2) replaces the empty folder ``old``
    try:
        os.replace(tmp, path)
    except BaseException:
        os.replace(old, path)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(path: str, *, overwrite: bool = False, protect: Sequence[str | None] = (),
               earlier: Sequence[str] = ()) -> Iterator[str]:
    """Yield a fresh staging folder beside ``path``; on success it replaces ``path``, on error it is removed.

    The staging folder gets a marker file listing what was written. ``path`` is checked with
    ``check_output_dir`` before and again just before the swap (files may appear meanwhile); an
    earlier ``path`` is renamed away, the new folder renamed in, and only then the old one deleted.

    Raises:
        UsageError: ``path`` must not be replaced (see ``check_output_dir``) or cannot be written.
    """
    check_output_dir(path, overwrite=overwrite, protect=protect, earlier=earlier)
    if os.path.islink(path):  # replace the folder the link points to, keep the link
        path = os.path.realpath(path)
    parent = prepare_parent(path)
    tmp = tempfile.mkdtemp(prefix=".jaxconv-", dir=parent)
    try:
        yield tmp
        _write_marker(tmp)
        _publish_mode(tmp, folder=True)
        check_output_dir(path, overwrite=overwrite, protect=protect, earlier=earlier)
        try:
            _swap_in(tmp, path, parent)
        except OSError as e:
            raise UsageError(f"cannot replace {path}: {e.strerror or e}") from e
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def read_bytes(path: str) -> bytes:
    """The bytes of an artifact file; ``ArtifactError`` naming it and why when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ArtifactError(f"cannot read {path}: {e.strerror}") from e


def write_bytes(path: str, data: bytes) -> None:
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
