"""The Runner interface every runtime implements."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class Runner(Protocol):
    """Runs one artifact on flat numpy inputs (in signature order) and returns flat outputs."""

    kind: str

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        ...
