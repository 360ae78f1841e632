"""MODEL as the user names it, turned into something every variant builder can start from.

Three shapes are accepted:

- a Hugging Face model directory (``config.json`` + weights + tokenizer): an encoder becomes a
  sentence embedder (the pooling of its sentence-transformers config, mean by default), a
  ``*ForSequenceClassification`` model a classifier returning logits; inputs are sentences;
- ``package.module:function`` returning ``(nn.Module, example_inputs)``: a tensor, a tuple of
  tensors (positional) or a dict of tensors (keyword), the first axis being examples;
- an ``.onnx`` file: only ONNX Runtime variants; inputs from an ``.npz`` whose names match the
  graph, or sentences when a tokenizer sits beside the file.

Anything unreadable or mismatched raises ``ModelConfigError`` (exit 2) before any work starts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from computewise.errors import ComputewiseError, InputError, MissingExtraError, ModelConfigError
from computewise.optimize.feeds import Batch, Feed, TensorFeed, TextFeed, read_texts
from computewise.system.entrypoints import import_entry_point

__all__ = ["TASKS", "FusionHint", "ModelSource", "call_entry_point", "load_source"]

TASKS = ("embedding", "classifier", "regressor")

# Hugging Face model types whose attention ONNX Runtime's transformer optimizer knows how to fuse.
_FUSABLE = {
    "bert": "bert",
    "roberta": "bert",
    "distilbert": "bert",
    "xlm-roberta": "bert",
    "electra": "bert",
    "mpnet": "bert",
    "gpt2": "gpt2",
    "bart": "bart",
    "t5": "t5",
    "vit": "vit",
}


@dataclass(frozen=True)
class FusionHint:
    """What ONNX Runtime's transformer optimizer needs to fuse attention: the family and the shape."""

    model_type: str
    num_heads: int
    hidden_size: int


@dataclass
class ModelSource:
    """The model, its sample inputs and how to rebuild it for export."""

    description: str
    kind: str  # "hf" | "entry-point" | "onnx"
    feed: Feed
    task: str
    module: Any = None  # the FP32 nn.Module in eval mode; None for an ONNX file
    export_module: Callable[[], Any] | None = None  # a fresh copy built for ONNX export
    onnx_path: Path | None = None
    positional: bool = False
    fusion: FusionHint | None = None
    tokenizer_dir: Path | None = None
    max_length: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def is_text(self) -> bool:
        return isinstance(self.feed, TextFeed)


def load_source(model: str, inputs: Path | None, task: str | None, max_length: int | None = None) -> ModelSource:
    """Resolve MODEL (directory, ``.onnx`` file or entry point) and its sample inputs."""
    if task is not None and task not in TASKS:
        raise InputError(f"unknown task {task!r}", f"use one of {', '.join(TASKS)}")
    if inputs is not None and not inputs.is_file():  # before the model loads, and before a reader blames the format
        raise InputError(
            f"--inputs {inputs}: {'it is a directory' if inputs.is_dir() else 'no such file'}",
            "check the path: --inputs takes sentences (.txt, one per line, or .jsonl) or arrays (.npz)",
        )
    path = Path(model)
    if path.is_dir():
        return _hugging_face(path, inputs, task, max_length)
    if path.suffix == ".onnx":
        if not path.is_file():
            raise ModelConfigError(f"ONNX file {path} does not exist", "check the path")
        return _onnx_file(path, inputs, task, max_length)
    if ":" in model and not path.exists():
        return _entry_point(model, inputs, task)
    raise ModelConfigError(
        f"cannot tell what model {model!r} is",
        "give a Hugging Face model directory, an .onnx file, or package.module:function",
    )


def _torch() -> Any:
    try:
        import torch
    except ImportError as error:
        raise MissingExtraError("torch", "optimize", "optimizing a PyTorch model") from error
    return torch


def _tokenizer_feed(directory: Path, inputs: Path | None, max_length: int | None) -> tuple[TextFeed, int]:
    if inputs is None:
        raise InputError(
            f"{directory} is a text model and needs sample sentences",
            "pass --inputs sentences.txt (one sentence per line, a few hundred like your traffic)",
        )
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except (OSError, ValueError) as error:
        raise ModelConfigError(f"cannot load the tokenizer in {directory}: {error}", "check the model files") from error
    limit = max_length or _sentence_transformers_max_length(directory) or 512
    limit = min(limit, int(getattr(tokenizer, "model_max_length", limit) or limit))
    probe = tokenizer(["a"], return_tensors="np")
    names = tuple(name for name in ("input_ids", "attention_mask", "token_type_ids") if name in probe)

    def tokenize(texts: list[str]) -> Batch:
        encoded = tokenizer(texts, padding="longest", truncation=True, max_length=limit, return_tensors="np")
        return {name: np.asarray(encoded[name], dtype=np.int64) for name in names}

    return TextFeed(read_texts(inputs), tokenize, names), limit


def _sentence_transformers_max_length(directory: Path) -> int | None:
    config = directory / "sentence_bert_config.json"
    if not config.is_file():
        return None
    try:
        value = json.loads(config.read_text()).get("max_seq_length")
    except ValueError:
        return None
    return int(value) if isinstance(value, int) else None


def _pooling(directory: Path) -> tuple[str, bool]:
    """(mean|cls, normalize) from a sentence-transformers layout; plain encoders get mean, unnormalized."""
    mode, normalize = "mean", False
    modules_file = directory / "modules.json"
    if modules_file.is_file():
        try:
            modules = json.loads(modules_file.read_text())
        except ValueError as error:
            raise ModelConfigError(f"{modules_file} is not valid JSON: {error}") from error
        for module in modules:
            kind = str(module.get("type", ""))
            if kind.endswith("Normalize"):
                normalize = True
            if kind.endswith("Pooling"):
                pooling_file = directory / str(module.get("path", "")) / "config.json"
                if pooling_file.is_file() and json.loads(pooling_file.read_text()).get("pooling_mode_cls_token"):
                    mode = "cls"
    return mode, normalize


def _hugging_face(directory: Path, inputs: Path | None, task: str | None, max_length: int | None) -> ModelSource:
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ModelConfigError(
            f"{directory} has no config.json, so it is not a Hugging Face model directory",
            "point at the directory holding config.json and the weights",
        )
    try:
        config = json.loads(config_file.read_text())
    except ValueError as error:
        raise ModelConfigError(f"{config_file} is not valid JSON: {error}") from error
    architectures = " ".join(config.get("architectures") or [])
    is_classifier = "ForSequenceClassification" in architectures
    resolved_task = task or ("classifier" if is_classifier else "embedding")
    feed, limit = _tokenizer_feed(directory, inputs, max_length)
    pooling, normalize = _pooling(directory)
    torch = _torch()

    def build(attention: str) -> Any:
        import transformers

        transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # we show our own
        loader = transformers.AutoModelForSequenceClassification if is_classifier else transformers.AutoModel
        try:
            backbone = loader.from_pretrained(str(directory), attn_implementation=attention)
        except Exception as error:  # safetensors, torch and transformers each raise their own types
            raise ModelConfigError(f"cannot load the model in {directory}: {error}", "check the weights") from error
        return _TextModel(torch, backbone.eval(), is_classifier, pooling, normalize).eval()

    model_type = str(config.get("model_type", ""))
    fusion = None
    if model_type in _FUSABLE and "num_attention_heads" in config and "hidden_size" in config:
        fusion = FusionHint(_FUSABLE[model_type], int(config["num_attention_heads"]), int(config["hidden_size"]))
    notes = [] if is_classifier else [f"embedding = {pooling} pooling{' + L2 normalize' if normalize else ''}"]
    return ModelSource(
        description=str(directory),
        kind="hf",
        feed=feed,
        task=resolved_task,
        module=build("sdpa"),
        # ONNX Runtime fuses attention it can recognise: the eager formulation exports as plain MatMul/Softmax.
        export_module=lambda: build("eager"),
        fusion=fusion,
        tokenizer_dir=directory,
        max_length=limit,
        notes=notes,
    )


def _TextModel(torch: Any, backbone: Any, is_classifier: bool, pooling: str, normalize: bool) -> Any:
    """A module from token arrays to one vector per sentence, so pooling is part of every variant."""

    class TextModel(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.backbone = backbone

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            output = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **extra)
            if is_classifier:
                return output.logits
            hidden = output.last_hidden_state
            if pooling == "cls":
                pooled = hidden[:, 0]
            else:
                weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1) if normalize else pooled

    return TextModel()


def call_entry_point(spec: str, function: Any, returns: str) -> Any:
    """``function()``, with a user's setup that raises or is not callable told as a ``ModelConfigError``.

    The entry point is the user's code: its failure is an answer about their model (which entry point,
    what it raised), not a computewise crash, so it gets an ``error:`` line and exit 2, as ``tune`` gives.
    ``returns`` says what the function should return, for the hint.
    """
    if not callable(function):
        raise ModelConfigError(
            f"the model entry point {spec} is not callable (it is {type(function).__name__})",
            f"point at a function that takes no arguments and returns {returns}",
        )
    try:
        return function()
    except ComputewiseError:
        raise
    except Exception as failure:
        raise ModelConfigError(
            f"the model entry point {spec} raised {type(failure).__name__}: {failure}",
            f"fix the error in {spec} (run it alone in Python to see the traceback); it should return {returns}",
        ) from failure


def _entry_point(spec: str, inputs: Path | None, task: str | None) -> ModelSource:
    function = import_entry_point(spec, "the model", ModelConfigError)
    torch = _torch()
    returned = call_entry_point(spec, function, "(nn.Module, example_inputs)")
    if not (isinstance(returned, tuple) and len(returned) == 2 and isinstance(returned[0], torch.nn.Module)):
        raise ModelConfigError(
            f"{spec} must return (nn.Module, example_inputs), got {type(returned).__name__}",
            "return the model and a batch of example inputs (tensor, tuple or dict of tensors)",
        )
    module, examples = returned
    positional = not isinstance(examples, dict)
    if isinstance(examples, torch.Tensor):
        examples = (examples,)
    named = examples if isinstance(examples, dict) else {f"input_{i}": value for i, value in enumerate(examples)}
    if not named or not all(isinstance(value, torch.Tensor) for value in named.values()):
        raise ModelConfigError(f"{spec} returned example inputs that are not tensors", "return tensors")
    arrays = {name: value.detach().cpu().numpy() for name, value in named.items()}
    feed: Feed = TensorFeed(arrays)
    if inputs is not None:
        feed = TensorFeed(_read_npz(inputs, tuple(arrays)))
    _check_examples(feed, spec)
    return ModelSource(
        description=spec,
        kind="entry-point",
        feed=feed,
        task=task or _guess_task(module, feed, positional),
        module=module.eval(),
        export_module=lambda: module.eval(),
        positional=positional,
    )


def _read_npz(path: Path, expected: tuple[str, ...] | None) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read inputs {path}: {error}", "give an .npz made by numpy.savez") from error
    if expected is not None and set(arrays) != set(expected):
        raise ModelConfigError(
            f"inputs {path} hold arrays {sorted(arrays)}, the model takes {list(expected)}",
            "name the arrays in the .npz after the model's inputs",
        )
    return {name: arrays[name] for name in (expected or tuple(arrays))}


def _check_examples(feed: Feed, origin: str) -> None:
    if len(feed) < 8:
        raise InputError(
            f"{origin} gives {len(feed)} examples; the search needs at least 8",
            "return or pass a few hundred examples like the traffic the model will serve",
        )


def _guess_task(module: Any, feed: Feed, positional: bool) -> str:
    """Regressor for one output per example, embedding for unit-norm rows, classifier otherwise."""
    from computewise.optimize.predictors import TorchPredictor

    output = TorchPredictor(module, positional)(feed.batch(range(min(8, len(feed)))))
    return _task_of(output)


def _task_of(output: np.ndarray) -> str:
    if output.ndim == 1 or output.shape[-1] == 1:
        return "regressor"
    norms = np.linalg.norm(output.reshape(len(output), -1), axis=1)
    return "embedding" if np.allclose(norms, 1.0, atol=1e-3) else "classifier"


def _onnx_file(path: Path, inputs: Path | None, task: str | None, max_length: int | None) -> ModelSource:
    try:
        import onnx
    except ImportError as error:
        raise MissingExtraError("onnx", "optimize", "optimizing an ONNX model") from error
    try:
        graph = onnx.load(str(path), load_external_data=True).graph
    except Exception as error:  # onnx raises DecodeError, OSError, ValueError... for a bad file
        raise ModelConfigError(f"cannot read ONNX model {path}: {error}", "re-export the model") from error
    initializers = {item.name for item in graph.initializer}
    graph_inputs = tuple(item.name for item in graph.input if item.name not in initializers)
    tokenizer_here = (path.parent / "tokenizer.json").is_file() or (path.parent / "tokenizer_config.json").is_file()
    if inputs is None:
        raise InputError(
            f"{path} needs sample inputs",
            f"pass --inputs examples.npz with arrays named {', '.join(graph_inputs)}"
            + (" or --inputs sentences.txt" if tokenizer_here else ""),
        )
    feed: Feed
    limit = None
    if inputs.suffix == ".npz":
        feed = TensorFeed(_read_npz(inputs, graph_inputs))
    elif tokenizer_here:
        feed, limit = _tokenizer_feed(path.parent, inputs, max_length)
        missing = set(graph_inputs) - set(feed.input_names)
        if missing:
            raise ModelConfigError(f"{path} takes {sorted(missing)}, which its tokenizer does not produce")
    else:
        raise InputError(f"inputs for {path} must be an .npz", f"save arrays named {', '.join(graph_inputs)}")
    _check_examples(feed, str(inputs))
    source = ModelSource(
        description=str(path),
        kind="onnx",
        feed=feed,
        task=task or "classifier",
        onnx_path=path,
        tokenizer_dir=path.parent if isinstance(feed, TextFeed) else None,
        max_length=limit,
    )
    if task is None:
        from computewise.optimize.predictors import OrtPredictor, ort_session

        session = ort_session(str(path), ["CPUExecutionProvider"], threads=1)
        source.task = _task_of(OrtPredictor(session)(feed.batch(range(min(8, len(feed))))))
    return source
