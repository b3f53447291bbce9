"""The generated project's files: fixed C++ shipped as is, and ``@KEY@`` templates filled in.

Every file lives in ``templates/`` (package data). Fixed files (``npy.h``, ``jaxconv_ort.h``,
``example_support.h``) are real C++ that the tests compile with warnings as errors; the generated
parts (``*.in``) differ per model only where a ``@KEY@`` placeholder stands.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Mapping

_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")
FIXED_FILES = ("jaxconv_dims.h", "jaxconv_ort.h", "npy.h", "example_support.h")


def text(name: str) -> str:
    """The packaged file ``templates/<name>``."""
    return resources.files("jaxconv.cpp").joinpath("templates", name).read_text(encoding="utf-8")


def render(name: str, values: Mapping[str, str]) -> str:
    """``templates/<name>`` with each ``@KEY@`` replaced by ``values[KEY]``.

    Raises:
        KeyError: a placeholder without a value, or a value without a placeholder (a generator bug).
    """
    source = text(name)
    used = set(_PLACEHOLDER.findall(source))
    missing, unused = used - set(values), set(values) - used
    if missing or unused:
        raise KeyError(f"template {name}: no value for {sorted(missing)}, "
                       f"no placeholder for {sorted(unused)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], source)
