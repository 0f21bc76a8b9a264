"""The optional C extension `sharestate._native`.

`module` is the extension, or None when it is not built or `SHARESTATE_PURE_PYTHON=1`;
every caller has a pure-Python path that gives identical results.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON_ENV = "SHARESTATE_PURE_PYTHON"


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        return importlib.import_module("sharestate._native")
    except ImportError:
        return None


module: ModuleType | None = _load()
