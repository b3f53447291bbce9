"""What the generated C++ needs to know about a traced program: names, types and shapes."""

from __future__ import annotations

from dataclasses import dataclass

from jaxconv.cpp import dims as cdims
from jaxconv.cpp.names import IdentAllocator, class_name
from jaxconv.cpp.types import CppType, cpp_type
from jaxconv.errors import UnsupportedError
from jaxconv.program import Program
from jaxconv.signature import Signature, TensorInfo

# Identifiers the generated class declares itself; tensors and dimensions get other names.
_CLASS_MEMBERS = {"run", "Tensor", "Outputs", "Inputs", "Buffers", "Options", "In", "Out", "Impl", "impl_",
                  "run_impl", "num_inputs", "num_outputs", "input_names", "output_names", "output_shape_text",
                  "inputs", "outputs", "buffers", "options", "model_path"}


@dataclass(frozen=True)
class CppTensor:
    """One model input or output.

    Attributes:
        name: the ONNX graph name (same as the program signature's).
        ident: the C++ identifier (argument or struct member).
        type: its C++ type facts.
        dims: ints and symbolic dimension strings.
        path: the pytree path in the JAX function (``params['w1']``).
        exprs: each dimension as a C++ expression over the symbolic dimensions, or None when one
            cannot be computed before running (then the output's shape comes from the run).
    """

    name: str
    ident: str
    type: CppType
    dims: tuple[int | str, ...]
    path: str
    exprs: tuple[str, ...] | None

    @property
    def doc(self) -> str:
        """``float32[b, 784]``, with what the C++ element type holds when that is not obvious."""
        text = f"{self.type.dtype}{cdims.shape_text(self.dims)}"
        return f"{text} ({self.type.note})" if self.type.note else text

    @property
    def onnx_dims(self) -> tuple[int | str, ...]:
        """Its dimensions in the ONNX model: a complex tensor has a trailing (re, im) dimension of 2."""
        return self.dims + (2,) if self.type.pairs else self.dims

    @property
    def onnx_doc(self) -> str:
        """``float32[b, 784]`` as the ONNX model has it (complex64[4] is float32[4, 2])."""
        dtype = {"complex64": "float32", "complex128": "float64"}.get(self.type.dtype, self.type.dtype)
        return f"{dtype}{cdims.shape_text(self.onnx_dims)}"


@dataclass(frozen=True)
class CppModel:
    """The generated API of one model.

    Attributes:
        namespaces: the enclosing C++ namespaces (``("foo", "bar")`` for ``--name foo::bar::Mlp``).
        cls: class name, also the library, CMake package and file name.
        function: the JAX function's name.
        inputs: in ONNX graph order (the signature's flat order).
        outputs: ``output_0``...
        symbols: symbolic dimension names, in order of first use by the inputs.
        symbol_idents: C++ parameter name of each symbol.
        embed: whether the model bytes are compiled into the library.
        c_api: whether an ``extern "C"`` API (``NAME_c.h``) is generated too.
        threads: the intra-op thread count the generated ``Options`` default to: the one the ONNX model
            records (``onnx.thread_count``), 0 (ONNX Runtime's default, one per core) where it records none.
        spin_during_run: the generated ``Options``' default: whether the model records that its pool should
            spin during each run and stop after it (``thread_count.SPIN_KEY``).
    """

    namespaces: tuple[str, ...]
    cls: str
    function: str
    inputs: tuple[CppTensor, ...]
    outputs: tuple[CppTensor, ...]
    symbols: tuple[str, ...]
    symbol_idents: dict[str, str]
    embed: bool
    c_api: bool = False
    threads: int = 1
    spin_during_run: bool = False

    def dim_expr(self, dim: int | str) -> str:
        return cdims.cpp_expr(dim, self.symbol_idents)

    @property
    def macro(self) -> str:
        """Prefix of the generated preprocessor macros (``FOO_BAR_MLP``)."""
        return "_".join(self.namespaces + (self.cls,)).upper()

    @property
    def qualified(self) -> str:
        """``foo::bar::Mlp``."""
        return "::".join(self.namespaces + (self.cls,))

    @property
    def c_prefix(self) -> str:
        """Prefix of the C API's names (``foo_bar_Mlp``)."""
        return "_".join(self.namespaces + (self.cls,))

    @property
    def complex(self) -> bool:
        return any(t.type.pairs for t in self.inputs + self.outputs)

    def complex_io(self) -> tuple[dict[str, str], dict[str, str]]:
        """The complex inputs and outputs, as the ONNX model's ``jaxconv.complex`` metadata lists them."""
        return ({t.name: t.type.dtype for t in self.inputs if t.type.pairs},
                {t.name: t.type.dtype for t in self.outputs if t.type.pairs})


def _exprs(dims: tuple[int | str, ...], symbol_idents: dict[str, str]) -> tuple[str, ...] | None:
    try:
        return tuple(cdims.cpp_expr(d, symbol_idents) for d in dims)
    except UnsupportedError:
        return None


def _tensor(info: TensorInfo, kind: str, ident: str, symbol_idents: dict[str, str]) -> CppTensor:
    return CppTensor(info.name, ident, cpp_type(info.dtype, f"{kind} {info.name}"), tuple(info.shape),
                     info.path, _exprs(tuple(info.shape), symbol_idents))


def model_from_signature(signature: Signature, function: str, name: str | None = None, embed: bool = False,
                         c_api: bool = False) -> CppModel:
    """Describe a model with ``signature`` (complex dtypes in the (re, im) layout) for code generation.

    Raises:
        UsageError: a bad ``name``.
        UnsupportedError: a dtype or symbolic input dimension the C++ API cannot express.
    """
    namespaces, cls = class_name(name, function)
    idents = IdentAllocator({cls, *namespaces, *_CLASS_MEMBERS})
    in_idents = [idents.take(t.name, "in_") for t in signature.inputs]
    names: list[str] = []
    for t in signature.inputs:
        for s in cdims.symbols(t.shape):
            if s not in names:
                names.append(s)
    symbol_idents = {s: idents.take(s, "dim_") for s in names}
    inputs = tuple(_tensor(t, "input", i, symbol_idents) for t, i in zip(signature.inputs, in_idents))
    out_idents = IdentAllocator({cls, *namespaces, *_CLASS_MEMBERS})
    outputs = tuple(_tensor(t, "output", out_idents.take(t.name, "out_"), symbol_idents)
                    for t in signature.outputs)
    for tensor in inputs:
        if tensor.exprs is None:  # every input dimension must be computable in C++
            for d in tensor.dims:
                cdims.cpp_expr(d, symbol_idents)
    return CppModel(namespaces, cls, function, inputs, outputs, tuple(names), symbol_idents, embed, c_api)


def build_model(program: Program, name: str | None = None, embed: bool = False,
                c_api: bool = False) -> CppModel:
    """Describe ``program`` for code generation (see ``model_from_signature``)."""
    return model_from_signature(program.signature, program.name, name, embed, c_api)
