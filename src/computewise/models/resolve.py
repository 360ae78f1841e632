"""Turn whatever the user typed for ``--model`` into a ModelSpec."""

from __future__ import annotations

import os

from computewise.errors import InputError, ModelConfigError, UnknownNameError
from computewise.limits import MODEL_PARAMETERS
from computewise.models.hf_config import from_hf_config
from computewise.models.infer import from_param_count
from computewise.models.presets import preset
from computewise.specs.model import ModelSpec
from computewise.units import describe_range, parse_count

__all__ = ["resolve_model"]

_HINT = "give a preset name, a path to a Hugging Face config.json, or a parameter count such as 7.5B"


def resolve_model(text: str) -> ModelSpec:
    """A config.json path (or a directory holding one), a parameter count, or a preset name.

    Tried in that order: an existing file wins over a preset of the same name, and anything
    starting with a digit or a sign is a count ("7.5B", "1.3e9", "125M", "-7B"), so a bad count says
    what is wrong with it (its range, ``limits.FLAG_LIMITS["--model"]``) instead of "unknown model".
    """
    stripped = text.strip()
    if not stripped:
        raise InputError("no model given", _HINT)
    path = os.path.expanduser(stripped)
    if os.path.isfile(path) or os.path.isfile(os.path.join(path, "config.json")):
        return _within_range(from_hf_config(path), stripped)
    if stripped[0].isdigit() or stripped[0] in ".+-":
        try:
            return from_param_count(parse_count(stripped, "--model"))
        except InputError as error:
            raise InputError(f"cannot read {text!r} as a model: {error.message}", error.hint or _HINT) from error
    try:
        return preset(stripped)
    except UnknownNameError:
        if stripped.endswith(".json"):
            raise ModelConfigError(f"{stripped}: no such file", _HINT) from None
        if os.path.isdir(path):  # "unknown model" would blame the name; the folder is what lacks the config
            raise ModelConfigError(
                f"{stripped}: the folder has no config.json",
                "give the folder of a Hugging Face model (the one holding its config.json), the config.json itself, "
                "a preset name, or a parameter count such as 7.5B",
            ) from None
        raise


def _within_range(spec: ModelSpec, where: str) -> ModelSpec:
    """A config.json's model, held to the range a parameter count given as --model is (``MODEL_PARAMETERS``)."""
    if not MODEL_PARAMETERS.low <= spec.params <= MODEL_PARAMETERS.high:
        raise ModelConfigError(
            f"{where} describes {spec.params:.3g} parameters; a model must have "
            f"{describe_range(MODEL_PARAMETERS)} ({MODEL_PARAMETERS.why})",
            "check the config's sizes (hidden_size, num_hidden_layers, vocab_size, intermediate_size)",
        )
    return spec
