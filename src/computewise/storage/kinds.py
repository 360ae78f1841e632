"""What a stored file is, from its name and the folders it sits in: the rules behind an audit's groups.

Rules go from the most specific to the least, first match wins:

    cache            a folder named __pycache__, .cache, cache, .ipynb_checkpoints, .pytest_cache; *.pyc, *.tmp
    checkpoint       a computewise.train manifest and its state file (recognised by the manifest, see
                     ``checkpoints``); *.ckpt anywhere; *.pt, *.pth, *.bin, *.safetensors in a folder
                     named checkpoint*, ckpt* or checkpoints
    exported model   *.onnx, *.safetensors, *.gguf, *.ggml, *.tflite, *.engine, *.mlmodel, *.pt, *.pth
                     (outside a checkpoint folder)
    dataset          *.parquet, *.csv, *.tsv, *.jsonl, *.npy, *.npz, *.arrow, *.feather, *.tfrecord,
                     *.h5, *.hdf5, *.tar (WebDataset shards), *.mds, images (*.jpg, *.jpeg, *.png, *.webp)
    log              *.log, *.out, *.err, TensorBoard event files, anything under wandb/, mlruns/,
                     runs/ or logs/
    other            the rest

The folder part is decided once per folder (``FolderContext``), so classifying a hundred thousand
files costs a suffix look-up each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["KINDS", "FolderContext", "Kind", "classify", "folder_context"]

Kind = Literal["checkpoint", "exported model", "dataset", "log", "cache", "other"]
KINDS: tuple[Kind, ...] = ("checkpoint", "exported model", "dataset", "log", "cache", "other")

_CACHE_FOLDERS = frozenset({"__pycache__", ".cache", "cache", ".ipynb_checkpoints", ".pytest_cache", ".mypy_cache"})
_LOG_FOLDERS = frozenset({"wandb", "mlruns", "runs", "logs", "lightning_logs", "tensorboard"})
_CACHE_SUFFIXES = frozenset({".pyc", ".tmp"})
_CHECKPOINT_STATE_SUFFIXES = frozenset({".pt", ".pth", ".bin", ".safetensors", ".ckpt"})
_MODEL_SUFFIXES = frozenset(
    {".onnx", ".safetensors", ".gguf", ".ggml", ".tflite", ".engine", ".mlmodel", ".pt", ".pth", ".torchscript"}
)
_DATASET_SUFFIXES = frozenset(
    {
        ".parquet", ".csv", ".tsv", ".jsonl", ".npy", ".npz", ".arrow", ".feather", ".tfrecord", ".h5", ".hdf5",
        ".tar", ".mds", ".jpg", ".jpeg", ".png", ".webp",
    }
)  # fmt: skip
_LOG_SUFFIXES = frozenset({".log", ".out", ".err"})


@dataclass(frozen=True)
class FolderContext:
    """What the folders above a file say about it, worked out once per folder."""

    cache: bool
    checkpoint: bool
    log: bool


def folder_context(parent: FolderContext | None, name: str) -> FolderContext:
    """The context of folder ``name`` inside a folder of context ``parent`` (None for the root)."""
    lowered = name.lower()
    above = parent or FolderContext(False, False, False)
    cache = above.cache or lowered in _CACHE_FOLDERS
    checkpoint = not cache and (above.checkpoint or lowered.startswith(("checkpoint", "ckpt")))
    return FolderContext(cache=cache, checkpoint=checkpoint, log=above.log or lowered in _LOG_FOLDERS)


def classify(name: str, context: FolderContext) -> Kind:
    """The kind of file ``name`` in a folder of ``context`` (manifest-recognised checkpoints are decided before)."""
    lowered = name.lower()
    dot = lowered.rfind(".")
    suffix = lowered[dot:] if dot > 0 else ""
    if context.cache or suffix in _CACHE_SUFFIXES:
        return "cache"
    if suffix == ".ckpt" or (context.checkpoint and suffix in _CHECKPOINT_STATE_SUFFIXES):
        return "checkpoint"
    if suffix in _MODEL_SUFFIXES:
        return "exported model"
    if suffix in _DATASET_SUFFIXES:
        return "dataset"
    if suffix in _LOG_SUFFIXES or lowered.startswith("events.out.tfevents") or context.log:
        return "log"
    return "other"
