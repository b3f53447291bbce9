"""What the generated C++ needs to know about a traced program: names, types and shapes."""

from __future__ import annotations

from dataclasses import dataclass

from jaxconv.cpp import dims as cdims
from jaxconv.cpp.names import IdentAllocator, class_name
from jaxconv.cpp.types import CppType, cpp_type
from jaxconv.program import Program
from jaxconv.signature import TensorInfo


@dataclass(frozen=True)
class CppTensor:
    """One model input or output.

    Attributes:
        name: the ONNX graph name (same as the program signature's).
        ident: the C++ identifier (argument or struct member).
        type: its C++ type facts.
        dims: ints and symbolic dimension strings.
        path: the pytree path in the JAX function (``params['w1']``).
    """

    name: str
    ident: str
    type: CppType
    dims: tuple[int | str, ...]
    path: str

    @property
    def doc(self) -> str:
        """``float32[b, 784]``, with what the C++ element type holds when that is not obvious."""
        text = f"{self.type.dtype}{cdims.shape_text(self.dims)}"
        return f"{text} ({self.type.note})" if self.type.note else text


@dataclass(frozen=True)
class CppModel:
    """The generated API of one model.

    Attributes:
        cls: class name, also the library and CMake project name.
        function: the JAX function's name.
        inputs: in ONNX graph order (the signature's flat order).
        outputs: ``output_0``...
        symbols: symbolic dimension names, in order of first use by the inputs.
        symbol_idents: C++ parameter name of each symbol.
        embed: whether the model bytes are compiled into the library.
    """

    cls: str
    function: str
    inputs: tuple[CppTensor, ...]
    outputs: tuple[CppTensor, ...]
    symbols: tuple[str, ...]
    symbol_idents: dict[str, str]
    embed: bool

    def dim_expr(self, dim: int | str) -> str:
        return cdims.cpp_expr(dim, self.symbol_idents)

    @property
    def macro(self) -> str:
        """Prefix of the generated preprocessor macros (``MLP``)."""
        return self.cls.upper()


def _tensor(info: TensorInfo, kind: str, idents: IdentAllocator) -> CppTensor:
    return CppTensor(info.name, idents.take(info.name, "in_" if kind == "input" else "out_"),
                     cpp_type(info.dtype, f"{kind} {info.name}"), tuple(info.shape), info.path)


def build_model(program: Program, name: str | None = None, embed: bool = False) -> CppModel:
    """Describe ``program`` for code generation.

    Raises:
        UsageError: a bad ``name``.
        UnsupportedError: a dtype or symbolic dimension the C++ API cannot express.
    """
    cls = class_name(name, program.name)
    idents = IdentAllocator({cls, "run", "Tensor", "Outputs", "Impl", "impl_"})
    inputs = tuple(_tensor(t, "input", idents) for t in program.signature.inputs)
    names: list[str] = []
    for t in inputs:
        for s in cdims.symbols(t.dims):
            if s not in names:
                names.append(s)
    symbol_idents = {s: idents.take(s, "dim_") for s in names}
    out_idents = IdentAllocator({cls})
    outputs = tuple(_tensor(t, "output", out_idents) for t in program.signature.outputs)
    model = CppModel(cls, program.name, inputs, outputs, tuple(names), symbol_idents, embed)
    for t in inputs:
        for d in t.dims:
            model.dim_expr(d)  # every input dimension must be computable in C++
    return model
