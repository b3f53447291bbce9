"""C++ identifiers for generated code: the class/library name and one name per tensor or dimension."""

from __future__ import annotations

import re

from jaxconv.errors import UsageError

CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
while xor xor_eq NULL main std
""".split())

# Target names CMake or its generators reserve, and the runtime's own library name.
RESERVED_TARGETS = frozenset({"all", "clean", "help", "install", "test", "package", "edit_cache", "rebuild_cache",
                              "list_install_components", "onnxruntime"})

_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_NON_WORD = re.compile(r"[^0-9A-Za-z_]+")


def _reserved(name: str) -> bool:
    return name in CPP_KEYWORDS or name in RESERVED_TARGETS or name.endswith("_example")


def class_name(requested: str | None, function_name: str) -> tuple[tuple[str, ...], str]:
    """The namespaces and the class name: ``requested`` (``foo::bar::Mlp``, checked) or the function's
    name made valid. The class name is also the library, CMake package and file name.

    Raises:
        UsageError: a part of ``requested`` is not a plain C++ identifier or is reserved.
    """
    if requested is not None:
        parts = requested.split("::")
        for part in parts:
            if not _IDENT.fullmatch(part):
                raise UsageError(f"--name {requested!r} is not usable as a C++ class and library name: use "
                                 "letters, digits and underscores, starting with a letter, and :: between "
                                 "namespaces (foo::bar::Mlp)")
            if part in CPP_KEYWORDS or part.startswith("jaxconv_"):
                raise UsageError(f"--name {requested!r}: {part!r} is reserved in C++ or by jaxconv; "
                                 "pick another name")
        if _reserved(parts[-1]):
            raise UsageError(f"--name {requested!r} is reserved in C++ or CMake (or ends in _example); "
                             "pick another name")
        return tuple(parts[:-1]), parts[-1]
    name = _NON_WORD.sub("_", function_name).strip("_") or "model"
    if not name[0].isalpha():
        name = "model_" + name
    if _reserved(name) or name.startswith("jaxconv_"):
        name += "_model"
    return (), name


class IdentAllocator:
    """Hands out distinct C++ identifiers, avoiding keywords and names already taken."""

    def __init__(self, taken: set[str] | None = None) -> None:
        self._taken = set(taken or ())

    def take(self, wanted: str, prefix: str = "v_") -> str:
        """An identifier for ``wanted``: itself when valid and free, otherwise a close variant."""
        name = _NON_WORD.sub("_", wanted).strip("_") or "v"
        if not name[0].isalpha() or name in CPP_KEYWORDS or name.startswith("jc_"):
            name = prefix + name
        unique, k = name, 1
        while unique in self._taken or unique in CPP_KEYWORDS:
            unique, k = f"{name}_{k}", k + 1
        self._taken.add(unique)
        return unique


def cpp_string(text: str) -> str:
    """A C++ string literal for ``text`` (ASCII; other characters as UTF-8 octal escapes)."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif 32 <= byte < 127 and ch != "?":
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'
