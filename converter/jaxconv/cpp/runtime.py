"""``jaxconv cpp-runtime DEST``: ONNX Runtime's headers and library in one folder, for C++ builds.

The library is the installed onnxruntime wheel's; the wheel ships no headers, so they come from
``headers`` (or ``ORT_INCLUDE_DIR``), a system install, or Debian's ``libonnxruntime-dev`` package
(downloaded into a throw-away apt state; the one step that needs the network). The work is done by
the packaged ``get_onnxruntime.sh``, which the repository's ``scripts/get_onnxruntime.sh`` runs too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources

from jaxconv.errors import MissingDependencyError, UsageError


def prepare(dest: str, headers: str | None = None) -> str:
    """Fill ``dest`` with include/ and lib/ (the layout of ONNX Runtime's release archives).

    Returns:
        The absolute path of ``dest``.

    Raises:
        UsageError: ``headers`` has no onnxruntime_cxx_api.h.
        MissingDependencyError: the headers or the library cannot be had (the script's message).
    """
    if headers is not None and not os.path.isfile(os.path.join(headers, "onnxruntime_cxx_api.h")):
        raise UsageError(f"--headers {headers} has no onnxruntime_cxx_api.h")
    env = {**os.environ, "PYTHON": sys.executable}
    if headers is not None:
        env["ORT_INCLUDE_DIR"] = os.path.abspath(headers)
    script = resources.files("jaxconv.cpp").joinpath("get_onnxruntime.sh")
    with resources.as_file(script) as path:
        r = subprocess.run(["bash", str(path), os.path.abspath(dest)], env=env, capture_output=True,
                           text=True)
    if r.returncode != 0:
        errors = [line for line in r.stderr.splitlines() if "error:" in line]
        message = errors[-1].split("error:", 1)[1].strip() if errors else (r.stderr.strip() or "failed")
        raise MissingDependencyError(f"cannot prepare ONNX Runtime in {dest}: {message}")
    return r.stdout.strip().splitlines()[-1]
