"""jaxconv's conformance suite.

Cases are declared once (``conformance/cases/``: a function, seeded argument generators,
optional symbolic dimensions, per-dtype tolerances, tags) and expand over targets
(stablehlo, saved-model, tflite, onnx) x devices (cpu, gpu). Known limitations are explicit
rows with a reason and the failure they expect (``limitations.py``) and are strict: a limited
cell that fails another way, or passes, fails the run. A second suite runs the StableHLO test data
(openxla/stablehlo) through the ONNX lowering.

Run ``python -m conformance`` from the repository root; see ``--help``.
"""

from conformance.case import Arg, Case, Tree, arg, case, load_all
from conformance.limitations import LIMITATIONS
from conformance.results import CellResult

__all__ = ["Arg", "Case", "CellResult", "LIMITATIONS", "Tree", "arg", "case", "load_all"]
