"""The default check on a whole training step: a Flax transformer's loss gradient and AdamW update.

The gradient alone and the update alone pass the check. Composed, Adam's normalisation (``mu / sqrt(nu)``
on the check's random state, where ``nu`` may be tiny) magnifies the gradient's float32 rounding: one
element of 4,096 of a head-split kernel lands 9.5e-5 from the float64 value where jax.jit lands 3.8e-5, and
the check calls the model wrong. Known, not fixed: the check does not yet weigh how an output's
conditioning magnifies rounding it cannot avoid."""

from __future__ import annotations

import os
import sys

import pytest

import jaxconv
from jaxconv.errors import MismatchError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))


def _model(name: str):
    import zoo_models

    return zoo_models.build(name)


@pytest.mark.parametrize("name", ["train_mlp_adam", "train_cnn_sgd", "opt_adafactor"])
def test_training_steps_and_updates_pass_the_default_check(name):
    m = _model(name)
    jaxconv.to_onnx(m.fn, *m.specs)  # raises MismatchError on a wrong output


@pytest.mark.xfail(raises=MismatchError, strict=True,
                   reason="Adam's normalisation magnifies the gradient's rounding past the check's tolerance")
def test_a_transformer_adamw_step_passes_the_default_check():
    m = _model("train_transformer_adamw")
    jaxconv.to_onnx(m.fn, *m.specs)
