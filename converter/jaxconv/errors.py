"""One exception hierarchy for jaxconv; every class carries the CLI exit code it maps to."""

from __future__ import annotations


class JaxconvWarning(UserWarning):
    """What jaxconv chose for the user and says so: an opset raised, a symbolic bound assumed."""


class CheckWarning(JaxconvWarning):
    """The check passed an artifact with outputs it cannot decide, or that differ on edge values only on a
    TF target: ``--strict`` (``check_options(strict=True)``) fails them."""


class JaxconvError(Exception):
    """Base class of every error jaxconv reports to a user.

    Attributes:
        exit_code: process exit status the CLI uses for this error.
    """

    exit_code = 1


class UsageError(JaxconvError):
    """Wrong command-line use: missing argument, bad flag value, wrong number of specs."""

    exit_code = 2


class SpecError(UsageError):
    """A shape/dtype spec that does not parse; the message points at the bad character."""

    exit_code = 3


class FileLoadError(JaxconvError):
    """The user's file is missing, does not import, or has no such function."""

    exit_code = 4


class TraceError(JaxconvError):
    """The function failed to trace or export with the given specs."""

    exit_code = 5


class UnsupportedError(JaxconvError):
    """The program uses ops, dtypes or attributes a target cannot represent."""

    exit_code = 6


class OpsetRequired(UnsupportedError):
    """A construct needs a newer ONNX opset than the model is being built for.

    Attributes:
        needed: the lowest opset that has it.
        what: the construct, in words.
    """

    def __init__(self, message: str, needed: int, what: str) -> None:
        super().__init__(message)
        self.needed = needed
        self.what = what


class ConversionError(JaxconvError):
    """A converter (ours, TFLite's, tf2onnx) failed for another reason."""

    exit_code = 7


class ArtifactError(JaxconvError):
    """An artifact cannot be read, loaded, or run."""

    exit_code = 8


class ModuleParseError(ArtifactError):
    """A StableHLO module (text or bytecode) that does not parse.

    Attributes:
        detail: the parser's message.
        line: 1-based line of the first error, 0 when unknown (bytecode).
        column: 1-based column of the first error, 0 when unknown.
    """

    def __init__(self, detail: str, line: int = 0, column: int = 0, source: str | None = None) -> None:
        self.detail, self.line, self.column, self.source = detail, line, column, source
        where = source or "the module"
        if line:
            where += f":{line}:{column}" if source else f" (line {line}, column {column})"
        super().__init__(f"{where}: not a readable StableHLO module: {detail}")

    def at(self, source: str) -> "ModuleParseError":
        """The same error naming the file it came from."""
        return ModuleParseError(self.detail, self.line, self.column, source)


class MismatchError(JaxconvError):
    """An artifact ran but its outputs differ from jax.jit beyond tolerance."""

    exit_code = 9


class MissingDependencyError(JaxconvError):
    """An optional package (TensorFlow, LiteRT, ...) is not installed."""

    exit_code = 10
