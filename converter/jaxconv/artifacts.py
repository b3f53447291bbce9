"""Write artifacts atomically: to a temporary path beside the target, then rename."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator

from jaxconv.errors import UsageError


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
            raise UsageError(f"cannot create output folder {parent}: {e.strerror}") from None
    if not os.access(parent, os.W_OK):
        raise UsageError(f"output folder {parent} is not writable")
    return parent


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[str]:
    """Yield a temporary file path; on success it replaces ``path``, on error it is removed."""
    parent = prepare_parent(path)
    if os.path.isdir(path):
        raise UsageError(f"output {path} is a folder; give a file path")
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


@contextlib.contextmanager
def atomic_dir(path: str) -> Iterator[str]:
    """Yield a temporary folder; on success it replaces ``path``, on error it is removed."""
    parent = prepare_parent(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"output {path} exists and is not a folder")
    tmp = tempfile.mkdtemp(prefix=".jaxconv-", dir=parent)
    try:
        yield tmp
        _publish_mode(tmp, folder=True)
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def write_bytes(path: str, data: bytes) -> None:
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
