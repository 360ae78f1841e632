"""Where ModelSpecs come from: presets, Hugging Face config.json, a bare parameter count, a trace.

``resolve_model`` is the front door for user input. Nothing here imports torch or numpy at
import time; ``trace_module`` imports torch when called.
"""

from computewise.models.hf_config import from_hf_config
from computewise.models.infer import from_param_count
from computewise.models.presets import preset, preset_names
from computewise.models.resolve import resolve_model
from computewise.models.trace import TraceMeasurement, measure_module, trace_module

__all__ = [
    "TraceMeasurement",
    "from_hf_config",
    "from_param_count",
    "measure_module",
    "preset",
    "preset_names",
    "resolve_model",
    "trace_module",
]
