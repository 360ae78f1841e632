"""Sample inputs and how they become batches: tokenized text or stacked tensors.

A ``Feed`` holds N examples and builds the model inputs for any subset of them. Text is padded
to the longest sentence *in the batch* (never to a fixed length); ``lengths`` lets the search sort
examples by token count so that a batch holds sentences of similar length, which halves the padding
work of mixed traffic. Tensor inputs have no length and are never reordered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from computewise.errors import InputError

__all__ = [
    "Batch",
    "Feed",
    "TensorFeed",
    "TextFeed",
    "batches_of",
    "read_texts",
    "split_indices",
]

Batch = dict[str, np.ndarray]


class Feed(Protocol):
    """N examples that can be batched in any order."""

    @property
    def input_names(self) -> tuple[str, ...]: ...

    def __len__(self) -> int: ...

    def batch(self, indices: Sequence[int]) -> Batch: ...

    def lengths(self) -> np.ndarray | None:
        """Per-example size for length-sorted batching, or None where order must not matter."""
        ...

    def subset(self, indices: Sequence[int]) -> Feed: ...

    def like(self, inputs: Any) -> Feed:
        """A feed of the same kind over the user's own inputs (what ``predict`` receives)."""
        ...


@dataclass(frozen=True)
class TextFeed:
    """Sentences and the tokenizer that turns a list of them into padded arrays."""

    texts: tuple[str, ...]
    tokenize: Callable[[list[str]], Batch]
    input_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.texts)

    def batch(self, indices: Sequence[int]) -> Batch:
        return self.tokenize([self.texts[i] for i in indices])

    def lengths(self) -> np.ndarray:
        mask = self.tokenize(list(self.texts))["attention_mask"]
        return np.asarray(mask.sum(axis=1), dtype=np.int64)

    def subset(self, indices: Sequence[int]) -> TextFeed:
        return TextFeed(tuple(self.texts[i] for i in indices), self.tokenize, self.input_names)

    def like(self, inputs: Any) -> TextFeed:
        if isinstance(inputs, str) or not all(isinstance(text, str) for text in inputs):
            raise InputError("predict() takes a list of strings for this text model")
        return TextFeed(tuple(inputs), self.tokenize, self.input_names)


@dataclass(frozen=True)
class TensorFeed:
    """Named arrays whose first axis is the example axis."""

    arrays: dict[str, np.ndarray]

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self.arrays)

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values())))

    def batch(self, indices: Sequence[int]) -> Batch:
        picked = np.asarray(indices, dtype=np.int64)
        return {name: array[picked] for name, array in self.arrays.items()}

    def lengths(self) -> None:
        return None

    def subset(self, indices: Sequence[int]) -> TensorFeed:
        return TensorFeed(self.batch(indices))

    def like(self, inputs: Any) -> TensorFeed:
        if isinstance(inputs, dict):
            arrays = {name: np.asarray(inputs[name]) for name in self.arrays}
        elif len(self.arrays) == 1:
            arrays = {next(iter(self.arrays)): np.asarray(inputs)}
        else:
            raise InputError(f"predict() takes a dict of arrays named {', '.join(self.arrays)}")
        for name, array in arrays.items():
            expected = self.arrays[name]
            if array.shape[1:] != expected.shape[1:]:
                raise InputError(
                    f"predict() input {name!r} has example shape {array.shape[1:]}, the model takes "
                    f"{expected.shape[1:]}"
                )
        return TensorFeed({name: array.astype(self.arrays[name].dtype, copy=False) for name, array in arrays.items()})


def batches_of(feed: Feed, batch_size: int, by_length: bool) -> list[list[int]]:
    """Example indices grouped into batches: arrival order, or sorted by length where that is valid."""
    lengths = feed.lengths() if by_length else None
    order = np.argsort(lengths, kind="stable").tolist() if lengths is not None else list(range(len(feed)))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def split_indices(count: int, calibration_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """A fixed shuffle cut into (calibration, held-aside evaluation) example indices.

    Calibration data tunes static quantization and ranks layer sensitivity; the held-aside rest
    judges every variant, so a selective-precision variant is never graded on the data that chose it.
    """
    order = np.random.default_rng(seed).permutation(count).tolist()
    cut = max(1, min(count - 1, round(count * calibration_fraction)))
    return sorted(order[:cut]), sorted(order[cut:])


def read_texts(path: Path) -> tuple[str, ...]:
    """Sentences from a text file (one per line) or JSON Lines (a ``text`` field per line)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(
            f"cannot read inputs {path}: {error}", "give a UTF-8 text file, one sentence per line"
        ) from error
    if path.suffix == ".jsonl":
        texts = []
        for number, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                texts.append(str(json.loads(line)["text"]))
            except (ValueError, KeyError, TypeError) as error:
                raise InputError(
                    f"{path}:{number}: not a JSON object with a 'text' field", 'write lines like {"text": "..."}'
                ) from error
    else:
        texts = [line.strip() for line in raw.splitlines() if line.strip()]
    if len(texts) < 8:
        raise InputError(
            f"{path} holds {len(texts)} sentences; the search needs at least 8",
            "give a few hundred sentences like the traffic the model will serve",
        )
    return tuple(texts)
