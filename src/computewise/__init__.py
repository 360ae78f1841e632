"""computewise: plan, measure and cut the compute cost of ML training and inference.

The package root stays import-light (the CLI must start in well under 0.3 s); import the
layers you need, e.g. ``from computewise.estimate import estimate_train``. ``computewise.track``
is the one name served from the root, imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from computewise.monitor.track import current_tracker, track

__version__ = "0.1.0"

__all__ = ["__version__", "current_tracker", "track"]

_LAZY = {"current_tracker": "computewise.monitor.track", "track": "computewise.monitor.track"}


def __getattr__(name: str) -> Any:
    """``computewise.track`` and friends, imported on first use so the root pulls in neither SQLAlchemy nor torch."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
