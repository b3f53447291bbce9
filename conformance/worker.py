"""Entry points run inside pool workers (one import of JAX/TF/ORT per worker)."""

from __future__ import annotations

from typing import Any

_quiet = False


def _quiet_runtimes() -> None:
    """ONNX Runtime logs kernel errors and libraries warn on stderr; the results already carry them."""
    global _quiet
    if not _quiet:
        _quiet = True
        import warnings

        warnings.simplefilter("ignore")
        try:
            import onnxruntime

            onnxruntime.set_default_logger_severity(4)
        except ImportError:
            pass


def run_case_task(task: tuple[str, str, str, bool]) -> dict[str, Any]:
    """Run one (case, target, device) cell; returns its JSON record (unclassified)."""
    from conformance.case import load_all
    from conformance.targets import run_cell

    _quiet_runtimes()
    name, target, device, with_ops = task
    return run_cell(load_all()[name], target, device, with_ops=with_ops).to_json()


def run_testdata_task(path: str) -> dict[str, Any]:
    """Run one StableHLO test-data file; returns its JSON record."""
    from conformance.testdata import run_file

    _quiet_runtimes()
    return run_file(path).to_json()
