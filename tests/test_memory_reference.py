"""Peak memory of the check's jax.jit reference on a function that closes over big weights."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _peak_growth(call: str) -> float:
    """Peak RSS that ``call`` adds in a fresh process, over the 64 MiB of weights ``predict`` closes over."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "converter")!r})
        import jax, jax.numpy as jnp, numpy as np
        from jaxconv import references

        rng = np.random.default_rng(0)
        W = [rng.standard_normal((2048, 2048), dtype=np.float32) / 45 for _ in range(4)]  # 64 MiB

        def predict(x):
            for w in W:
                x = jnp.tanh(x @ w)
            return x

        x = np.ones((8, 2048), np.float32)
        jax.jit(lambda a: a + 1)(x)  # jax's own start-up, outside the measure

        def status(key):
            return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key)) * 1024

        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        before = status("VmRSS")
        {call}
        print((status("VmHWM") - before) / (4 * 2048 * 2048 * 4))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads peak RSS from Linux's /proc")
def test_reference_holds_one_copy_of_the_weights_where_jax_jit_embeds_several():
    embedded = _peak_growth("jax.jit(predict)(x).block_until_ready()")
    hoisted = _peak_growth("references.reference_outputs(predict, [jax.ShapeDtypeStruct(x.shape, x.dtype)], [x])")
    assert embedded > 2.0  # the executable's constants: what the reference no longer holds
    # numpy's big buffers are not 64-byte aligned: jax copied them whole (0.9-1.1x); jit_borrow rebuilds
    # one layer at a time inside the program (0.5x)
    assert hoisted < 0.6
