"""scan_counts reads a scan equation's consts and carries whichever JAX traced it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv.scan_params import scan_counts


def _scan_eqn(fn, *args):
    [eqn] = [e for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns if e.primitive.name == "scan"]
    return eqn


def test_counts_of_a_traced_scan_split_its_operands_as_its_body_reads_them():
    def fn(w, b, c0, h0, xs):
        def step(carry, x):
            c, h = carry
            return (c * w + x, h + b), c

        return lax.scan(step, (c0, h0), xs)

    w, b, c0, h0, xs = (jnp.full((3,), v, jnp.float32) for v in (2.0, 1.0, 0.5, 0.0, 1.0))
    eqn = _scan_eqn(fn, w, b, c0, h0, jnp.stack([xs] * 4))
    consts, carries = scan_counts(eqn.params)
    assert carries == 2
    body = eqn.params["jaxpr"].jaxpr
    assert len(body.invars) == consts + carries + 1  # the body reads consts, carries, then one x per step
    assert len(eqn.invars) == consts + carries + 1


class _Packed:
    """A FlatTree as JAX 0.11 packs a scan's operands (consts, carry, xs) in ``ft_in``."""

    def __init__(self, *groups):
        self.groups = groups

    def unpack(self):
        return tuple(list(range(n)) for n in self.groups)


def test_counts_of_an_operand_tree_as_jax_0_11_packs_it():
    assert scan_counts({"ft_in": _Packed(3, 2, 1), "length": 4}) == (3, 2)
    assert scan_counts({"num_consts": np.int64(1), "num_carry": 0, "length": 4}) == (1, 0)
    with pytest.raises(KeyError, match="neither num_consts nor ft_in .params: jaxpr, length"):
        scan_counts({"jaxpr": None, "length": 4})
