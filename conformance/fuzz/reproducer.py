"""Write a minimised failure as a standalone Python file: the function, its inputs, jax's output.

Running the file converts the function with jaxconv, runs the artifact, compares it with
jax.jit and exits 1 while they still differ (or the converter still fails), 0 once fixed.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np

from conformance.fuzz.minimise import Failure
from conformance.fuzz.program import FLOATS, WEIGHTS

_MAIN = '''
def _differs(e, a):
    """Why ``a`` is not ``e`` (NaN places, inf signs, zero signs, dtype tolerance), or ''."""
    e, a = np.asarray(e), np.asarray(a)
    if e.shape != a.shape or e.dtype != a.dtype:
        return f"shape/dtype {a.dtype}{list(a.shape)} != {e.dtype}{list(e.shape)}"
    tol = {"float64": (1e-9, 1e-12), "float32": (1e-4, 1e-6), "float16": (1e-2, 1e-4), "bfloat16": (2e-2, 1e-3)}
    if e.dtype.name not in tol:
        bad = e != a
    else:
        rtol, atol = tol[e.dtype.name]
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        with np.errstate(all="ignore"):
            bad = (np.isnan(e64) != np.isnan(a64)) | ((e64 == 0) & (a64 == 0) & (np.signbit(e64) != np.signbit(a64)))
            bad |= ~np.isnan(e64) & ~np.isnan(a64) & (e64 != a64) & ~(np.abs(e64 - a64) <= atol + rtol * np.abs(e64))
    if not bad.any():
        return ""
    i = tuple(int(k) for k in np.argwhere(bad)[0]) if e.ndim else ()
    return f"{int(bad.sum())} element(s) differ, first at {list(i)}: expected {e[i]!r}, got {a[i]!r}"


def _run(target):
    import tempfile

    import jaxconv

    if target == "onnx":
        from jaxconv.runtimes.onnxrt import OnnxRunner

        return OnnxRunner(jaxconv.to_onnx(f, *SPECS, check=False, opset=OPSET).SerializeToString())
    if target == "tflite":
        from jaxconv.runtimes.tflite import TFLiteRunner

        return TFLiteRunner(jaxconv.to_tflite(f, *SPECS, check=False))
    from jaxconv.runtimes.tf import SavedModelRunner

    path = tempfile.mkdtemp(prefix="repro-")
    jaxconv.to_saved_model(f, *SPECS, path=path + "/saved", check=False)
    return SavedModelRunner(path + "/saved")


if __name__ == "__main__":
    try:
        runner = _run(TARGET)
    except Exception as e:  # noqa: BLE001
        print(f"conversion failed: {type(e).__name__}: {e}")
        sys.exit(1 if type(e).__name__ != "UnsupportedError" else 0)
    if CRASH:
        print("converts now")
        sys.exit(0)
    expected = [np.asarray(o) for o in jax.jit(f)(*INPUTS)]
    try:
        got = runner.run(INPUTS)
    except Exception as e:  # noqa: BLE001
        print(f"running the {TARGET} artifact failed: {type(e).__name__}: {e}")
        sys.exit(1)
    problems = [f"output {k}: {why}" for k, (e, a) in enumerate(zip(expected, got)) if (why := _differs(e, a))]
    print("\\n".join(problems) or f"{TARGET} matches jax.jit")
    sys.exit(1 if problems else 0)
'''


def literal(a: np.ndarray) -> str:
    """A Python expression that rebuilds ``a`` exactly (NaN sign included)."""
    a = np.asarray(a)
    dtype = a.dtype.name
    if dtype in FLOATS:
        items = [_float(float(x)) for x in a.astype(np.float64).reshape(-1)]
    elif dtype == "bool":
        items = [str(bool(x)) for x in a.reshape(-1)]
    else:
        items = [str(int(x)) for x in a.reshape(-1)]
    return f"_a([{', '.join(items)}], {dtype!r}, {tuple(a.shape)})"


def _float(x: float) -> str:
    if math.isnan(x):
        return "-nan" if math.copysign(1.0, x) < 0 else "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)


def slug(klass: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", klass.replace("/", "__"))


def write(failure: Failure, klass: str, verdict: str, description: str, target: str, folder: str, origin: str) -> str:
    """Write ``folder/<class>/<origin>.py``; returns the path."""
    program = failure.program
    os.makedirs(os.path.join(folder, slug(klass)), exist_ok=True)
    path = os.path.join(folder, slug(klass), f"{origin}.py")
    specs = [program.types[i].spec for i in program.inputs]
    lines = [
        f'"""jaxconv fuzz reproducer: {klass} ({verdict}).',
        "",
        description,
        f"Found by scripts/fuzz.py ({origin}, target {target}).",
        f"Run: python {os.path.basename(path)}   (exits 1 while {target} differs from jax.jit, 0 when fixed)",
        '"""',
        "import sys",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "import numpy as np",
        "from jax import lax",
        "",
        f"jax.config.update('jax_enable_x64', {program.uses_x64()})",
        "nan, inf = float('nan'), float('inf')",
        "",
        "",
        "def _a(values, dtype, shape):",
        "    import ml_dtypes",
        "",
        "    dt = np.dtype(ml_dtypes.bfloat16) if dtype == 'bfloat16' else np.dtype(dtype)",
        "    if dt.kind == 'f' or dtype == 'bfloat16':",
        "        return np.array(values, np.float64).astype(dt).reshape(shape)",
        "    return np.array(values, dt).reshape(shape)",
        "",
        "",
        *([WEIGHTS.strip(), "", ""] if "_w(" in program.source() else []),
        program.source().rstrip(),
        "",
        "",
        f"TARGET = {target!r}",
        f"OPSET = {program.opset!r}",
        f"CRASH = {failure.status == 'crash'}",
        f"SPECS = {specs!r}",
        "INPUTS = [",
        *[f"    {literal(a)}," for a in failure.inputs],
        "]",
        "EXPECTED = [  # jax.jit(f)(*INPUTS) when this file was written",
        *[f"    {literal(a)}," for a in failure.expected],
        "]",
        f"GOT = [  # what {target} returned",
        *[f"    {literal(a)}," for a in failure.actual],
        "]",
    ]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n" + _MAIN)
    return path
