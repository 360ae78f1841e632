"""What the server runs: an exported artifact, a Python entry point, or an echo, behind one interface.

A ``ModelRunner`` turns one JSON input into a model item (``validate``), says how long an item is
(``length``, the token count the batch cost model needs) and runs a list of items in one blocking
call (``run``). The batcher calls ``run`` from a worker thread, never on the event loop.

``validate`` is the wall between the network and the model: everything a client can send wrongly
(a number where text belongs, 63 floats where the model takes 64, a lone UTF-16 surrogate the
tokenizer cannot encode) is refused here as ``InvalidInput`` naming the place inside the input,
so a bad request gets a 422 and never a 500 from a model that choked on it.

Runners:

- an artifact directory written by ``computewise optimize --out``: text models (the artifact carries
  a tokenizer; items are strings, padded to the longest of the batch) or tensor models (items are
  nested lists of the shape in the manifest's input signature, stacked into one array);
- ``package.module:function``: ``function()`` is called once at load and returns the model, a
  callable from a list of inputs to a list of outputs (loading happens once, not per request);
- ``echo``: returns its inputs, to measure what the server itself costs.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from computewise.errors import InputError, InvalidInput, ModelConfigError
from computewise.optimize.artifact import MANIFEST_NAME, Artifact, load_artifact
from computewise.optimize.source import call_entry_point
from computewise.system.entrypoints import import_entry_point

__all__ = [
    "ArtifactRunner",
    "EchoRunner",
    "EntryPointRunner",
    "ModelRunner",
    "cache_identity",
    "load_runner",
    "model_name",
]

_DEFAULT_MAX_TOKENS = 512  # what the tokenizer truncates to when the manifest names no max_length
_FLOAT32_MAX = 3.4028234663852886e38
_INT64_LIMIT = 2**63 - 1


class ModelRunner(Protocol):
    """A model the batcher can feed: validation, item length, one blocking call per batch."""

    name: str
    kind: str  # "text" | "tensor" | "echo"

    def validate(self, item: Any) -> Any:
        """One JSON input -> the item ``run`` takes; raises ``InvalidInput``."""
        ...

    def length(self, item: Any) -> int:
        """Token count of a text item (what padding is paid on); 1 for anything else."""
        ...

    def run(self, items: list[Any]) -> list[Any]:
        """One JSON-ready output per item, in order; blocking (called from a worker thread)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What ``GET /v1/models`` shows about this model."""
        ...


def _is_number(value: Any) -> bool:
    # bool is an int subclass in Python, but ``true`` is not a number a client meant to send.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_nested(value: Any, shape: list[int | None], integral: bool, path: str) -> None:
    """``value`` is a nested list of ``shape`` (None: any size) holding numbers, else InvalidInput at ``path``."""
    if not shape:
        if not _is_number(value):
            raise InvalidInput(f"expected a number, got {type(value).__name__}", path)
        if integral and not (isinstance(value, int) or value.is_integer()):
            raise InvalidInput(f"expected an integer, got {value}", path)
        # Past these bounds the value would become inf (float32) or wrap around (int64) inside the model.
        limit = _INT64_LIMIT if integral else _FLOAT32_MAX
        if not (isinstance(value, int) or math.isfinite(value)) or abs(value) > limit:
            raise InvalidInput(f"{value} is out of the model's range (+-{limit:.4g})", path)
        return
    size = shape[0]
    if not isinstance(value, list):
        wanted = f"a list of {size}" if size is not None else "a list"
        raise InvalidInput(f"expected {wanted} (shape {_shape_text(shape)}), got {type(value).__name__}", path)
    if size is not None and len(value) != size:
        raise InvalidInput(f"expected {size} elements (shape {_shape_text(shape)}), got {len(value)}", path)
    if size is None and not value:
        raise InvalidInput(f"expected a non-empty list (shape {_shape_text(shape)})", path)
    for index, element in enumerate(value):
        _check_nested(element, shape[1:], integral, f"{path}[{index}]")


def _shape_text(shape: list[int | None]) -> str:
    return "[" + ", ".join("?" if size is None else str(size) for size in shape) + "]"


class ArtifactRunner:
    """An artifact exported by ``computewise optimize``: its ONNX graph or TorchScript program, plus its manifest.

    Text artifacts take strings; a batch is tokenized together and padded to its longest string,
    which is why ``length`` (tokens after truncation) matters to the batcher. Tensor artifacts take
    one example per item, shaped as the manifest's input signature without the batch axis; several
    graph inputs come as an object keyed by input name.
    """

    def __init__(self, artifact: Artifact, name: str) -> None:
        self.artifact = artifact
        self.name = name
        self.kind = "text" if artifact.tokenizer is not None else "tensor"
        # Hugging Face fast tokenizers switch padding on and off in place per call: ``length`` (on the event
        # loop) gets its own copy so that it never reconfigures the one a worker thread is tokenizing with.
        self._counter = copy.deepcopy(artifact.tokenizer)
        self._max_tokens = artifact.manifest.max_length or _DEFAULT_MAX_TOKENS
        self._inputs: list[tuple[str, list[int | None], bool]] = []
        if self.kind == "tensor":
            for signature in artifact.manifest.inputs:
                dims = [size if isinstance(size, int) and size > 0 else None for size in signature.shape[1:]]
                self._inputs.append((signature.name, dims, "int" in signature.dtype))
            if not self._inputs:
                raise ModelConfigError(
                    f"{artifact.directory}/{MANIFEST_NAME} lists no model inputs", "re-export the artifact"
                )

    def validate(self, item: Any) -> Any:
        if self.kind == "text":
            return self._validate_text(item)
        if len(self._inputs) == 1:
            _name, shape, integral = self._inputs[0]
            _check_nested(item, shape, integral, "")
            return item
        if not isinstance(item, dict):
            names = ", ".join(name for name, _shape, _integral in self._inputs)
            raise InvalidInput(f"expected an object with the model inputs {names}, got {type(item).__name__}")
        unknown = sorted(set(item) - {name for name, _shape, _integral in self._inputs})
        if unknown:
            raise InvalidInput(f"the model has no input named {unknown[0]!r}", str(unknown[0]))
        for name, shape, integral in self._inputs:
            if name not in item:
                raise InvalidInput(f"missing model input {name!r}", name)
            _check_nested(item[name], shape, integral, name)
        return item

    def _validate_text(self, item: Any) -> str:
        if not isinstance(item, str):
            raise InvalidInput(f"expected a string, got {type(item).__name__}")
        if not item.strip():
            raise InvalidInput("expected a non-empty string")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate ("\ud800") is valid JSON but no text
            raise InvalidInput(f"the string is not valid Unicode text: {error.reason}") from None
        return item

    def length(self, item: Any) -> int:
        if self.kind != "text":
            return 1
        ids = self._counter(item, truncation=True, max_length=self._max_tokens)["input_ids"]
        return len(ids)

    def run(self, items: list[Any]) -> list[Any]:
        import numpy as np

        if self.kind == "text":
            outputs = self.artifact.predict(list(items))
        elif len(self._inputs) == 1:
            name, _shape, _integral = self._inputs[0]
            outputs = self.artifact.predict({name: np.asarray(items)})
        else:
            outputs = self.artifact.predict(
                {name: np.asarray([item[name] for item in items]) for name, _shape, _integral in self._inputs}
            )
        result: list[Any] = np.asarray(outputs).tolist()
        return result

    def describe(self) -> dict[str, Any]:
        manifest = self.artifact.manifest
        return {
            "name": self.name,
            "kind": self.kind,
            "artifact": str(self.artifact.directory),
            "variant": manifest.variant,
            "task": manifest.task,
            "source": manifest.source,
            "inputs": [signature.to_dict() for signature in manifest.inputs],
            "outputs": [signature.to_dict() for signature in manifest.outputs] or None,  # null: a TorchScript program
            "max_tokens": self._max_tokens if self.kind == "text" else None,
            "batch_invariant": manifest.batch_invariant,
        }


class _OpaqueInputs:
    """A runner that does not look into its inputs: each is taken as the client sent it and counts 1 toward
    a batch's padded length, since there are no tokens to pad."""

    def validate(self, item: Any) -> Any:
        return item

    def length(self, item: Any) -> int:
        return 1


class EntryPointRunner(_OpaqueInputs):
    """``package.module:function``: ``function()`` returns the model, a callable list -> list.

    Inputs are handed over as the client sent them (any JSON value): the function owns their
    meaning, so only it can refuse one, and such a refusal fails that request alone.
    """

    kind = "tensor"

    def __init__(self, spec: str, predict: Callable[[list[Any]], list[Any]], name: str) -> None:
        self.spec = spec
        self.name = name
        self._predict = predict

    def run(self, items: list[Any]) -> list[Any]:
        outputs = self._predict(list(items))
        if not isinstance(outputs, list | tuple) or len(outputs) != len(items):
            got = f"{len(outputs)} outputs" if isinstance(outputs, list | tuple) else type(outputs).__name__
            raise ModelConfigError(
                f"{self.spec} returned {got} for {len(items)} inputs", "return a list with one output per input"
            )
        return list(outputs)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "entry_point": self.spec}


class EchoRunner(_OpaqueInputs):
    """Returns each input unchanged: the server's own overhead, with no model in the way."""

    kind = "echo"

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, items: list[Any]) -> list[Any]:
        return list(items)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind}


def cache_identity(runner: ModelRunner) -> str:
    """What names this model's outputs in the prediction cache (``serve.cache``), or ``InputError`` saying why
    its outputs may not be cached.

    The rule is batch invariance: a cached output is the one the input got in whatever batch it
    first ran in, so it may be reused only where an input's output does not depend on its batch
    neighbours. ``computewise optimize`` measures that per variant (each input alone against the
    same input inside a padded batch: cosine >= 0.9999, ``optimize.quality.INVARIANCE_COSINE``) and
    records it in the manifest as ``batch_invariant``. An artifact measured invariant is cached;
    its cached answers then differ from a fresh one by float rounding only (on the MiniLM ort
    artifact: under 1e-5 absolute per embedding value, ``tests/serve/test_serve_cache.py``). One
    measured variant-dependent (dynamic INT8 quantizes activations with a scale taken from the
    whole batch) or not measured is refused. An echo is invariant by construction; an entry point
    is refused, since nothing tells what its function does with a batch.

    The identity of an artifact is the SHA-256 of its model file (checked at load) and of its
    tokenizer files, so another export never shares entries.
    """
    if isinstance(runner, EchoRunner):
        return "echo"
    if isinstance(runner, ArtifactRunner):
        manifest = runner.artifact.manifest
        invariant = manifest.batch_invariant
        variant = manifest.variant
        if invariant is not True:
            reason = (
                "its output for an input depends on the other inputs of its batch"
                if invariant is False
                else "its batch invariance was not measured"
            )
            raise InputError(
                f"cannot cache the {variant} variant: {reason} (manifest batch_invariant: {invariant}), "
                "so a cached answer could differ from the one the model gives now",
                "serve a batch-invariant variant (`computewise optimize MODEL --batch-invariant`), "
                "or drop --cache-size",
            )
        digest = hashlib.sha256(manifest.sha256.encode())
        tokenizer = runner.artifact.directory / (manifest.tokenizer or "")
        if manifest.tokenizer and tokenizer.is_dir():
            for path in sorted(tokenizer.iterdir()):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()
    spec = runner.spec if isinstance(runner, EntryPointRunner) else runner.name
    raise InputError(
        f"cannot cache {spec}: nothing tells whether its outputs depend on the other inputs of a batch",
        "export the model with computewise optimize (which measures batch invariance) and serve the artifact, "
        "or drop --cache-size",
    )


def _load_entry_point(spec: str, name: str) -> EntryPointRunner:
    factory = import_entry_point(spec, "the model", ModelConfigError)
    predict = call_entry_point(spec, factory, "the model, a function from a list of inputs to a list of outputs")
    if not callable(predict):
        raise ModelConfigError(
            f"{spec}() returned {type(predict).__name__}, not a callable",
            "return the model as a function from a list of inputs to a list of outputs",
        )
    return EntryPointRunner(spec, predict, name)


def model_name(target: str) -> str:
    """The name ``load_runner`` gives ``target`` in URLs, without loading it: the directory name, the module
    name, or "echo". Raises ``InputError`` for a target that is none of the three."""
    if target == "echo":
        return "echo"
    path = Path(target)
    if path.is_dir():
        return path.resolve().name
    module_name, colon, function_name = target.partition(":")
    if colon and module_name and function_name and not path.exists():
        return module_name.rpartition(".")[2]
    raise InputError(
        f"cannot serve {target!r}: it is neither an artifact directory, package.module:function, nor 'echo'",
        "export a model with computewise optimize MODEL --out DIR and serve DIR",
    )


def load_runner(target: str, name: str | None = None, threads: int | None = None) -> ModelRunner:
    """The runner for ``target``: an artifact directory, ``package.module:function`` or ``echo``.

    ``name`` is the model's name in URLs (default: ``model_name(target)``); ``threads`` the ONNX
    Runtime intra-op threads of an artifact (default: every usable CPU).
    """
    name = name or model_name(target)
    if target == "echo":
        return EchoRunner(name)
    if Path(target).is_dir():
        return ArtifactRunner(load_artifact(target, threads), name)
    return _load_entry_point(target, name)
