"""Checkpoints that are either whole or ignored: atomic writes, checksums, keep last N and the best.

A checkpoint is two files in one directory: ``step-00000200.pt`` (``torch.save`` of the full
training state) and its manifest ``step-00000200.json`` (step, SHA-256, size, metric, time, and
``run_id``: the ledger run that wrote it, null when training was not tracked). The run id lets
``computewise storage`` tell apart the runs that shared a directory (a resumed training is a new
ledger run per attempt) and leave a still-running run's checkpoints alone; manifests written before
it existed have no ``run_id`` and read as null.

Writing, in an order chosen so that a kill at any instant leaves the previous checkpoints valid
and the new one either complete or recognisably incomplete:

1. ``torch.save`` into a hidden temporary file in the same directory (a rename is atomic only
   within one file system), hashing the bytes as they are written (one pass over a large state),
   then ``fsync`` so the data is on disk before any name points at it;
2. the manifest into its own temporary file, ``fsync``;
3. ``os.replace`` the state file, then the manifest, into place: the manifest is the commit
   record, so a state file without one is an unfinished save; ``fsync`` the directory so the
   renames themselves survive a power loss;
4. prune to the newest ``keep_last`` plus the best by metric.

Loading goes newest first and checks each candidate's size and checksum against its manifest
before unpickling it; anything that does not match, or cannot be read, is skipped with a
warning naming it and the checkpoint used instead. A corrupt file is never loaded.

One writer per directory (under torchrun only rank 0 writes); every rank may read.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import tempfile
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from computewise.errors import CheckpointError

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointInfo",
    "CheckpointStore",
    "CorruptCheckpointWarning",
    "LoadedCheckpoint",
    "capture_rng",
    "restore_rng",
]

# The manifest's format tag: a directory written by a future layout is refused, not misread.
CHECKPOINT_FORMAT = "computewise.checkpoint/1"
_NAME = re.compile(r"^step-(\d{8,})$")
_TEMPORARY_PREFIX = ".tmp-"
_READ_CHUNK_BYTES = 8 * 1024 * 1024


class CorruptCheckpointWarning(UserWarning):
    """A checkpoint was skipped because it is incomplete or does not match its checksum."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What a manifest says about one checkpoint (not yet verified against the file)."""

    name: str
    step: int
    path: Path
    sha256: str
    size_bytes: int
    metric: float | None
    higher_is_better: bool
    saved_at_s: float
    run_id: int | None = None  # the ledger run that wrote it; None untracked or from an older manifest


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A verified checkpoint's state, with the names of the newer ones skipped to reach it."""

    state: dict[str, Any]
    info: CheckpointInfo
    skipped: tuple[str, ...]

    @property
    def step(self) -> int:
        return self.info.step

    @property
    def path(self) -> Path:
        return self.info.path


class _HashingWriter:
    """A file-like sink for ``torch.save`` that hashes and counts every byte it passes on."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.digest = hashlib.sha256()
        self.size_bytes = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size_bytes += len(data)
        return self._stream.write(data)

    def flush(self) -> None:
        self._stream.flush()


class CheckpointStore:
    """The checkpoints of one run in ``directory``: atomic saves, verified loads, retention.

    ``keep_last`` newest checkpoints are kept, plus (``keep_best``) the one with the best metric
    among those saved with one, so the best model survives however long training goes on.
    """

    def __init__(self, directory: Path | str, keep_last: int = 3, keep_best: bool = True) -> None:
        if keep_last < 1:
            raise CheckpointError(
                f"keep_last must be >= 1, got {keep_last}", "keep at least the newest checkpoint to resume from"
            )
        self.directory = Path(directory)
        self.keep_last = keep_last
        self.keep_best = keep_best

    # -- writing --------------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Create the directory and write, sync and remove a probe file, before any training.

        Finding out at the first checkpoint, maybe hours in, would lose those hours; a unique
        probe name lets every rank check the same shared directory at once.
        """
        probe = self.directory / f"{_TEMPORARY_PREFIX}probe-{os.getpid()}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(probe, "wb") as stream:
                stream.write(b"computewise")
                stream.flush()
                os.fsync(stream.fileno())
            probe.unlink()
        except OSError as failure:
            raise CheckpointError(
                f"checkpoint directory {self.directory} is not writable: {failure.strerror or failure}",
                "pass a checkpoint_dir you can write to (an existing directory or one that can be created), "
                "or fix its permissions",
            ) from failure

    def save(
        self,
        state: dict[str, Any],
        step: int,
        metric: float | None = None,
        higher_is_better: bool = False,
        run_id: int | None = None,
    ) -> Path:
        """Write ``state`` as the checkpoint of ``step`` atomically and durably; returns its path.

        When this returns, the checkpoint is on disk under its final name and survives a crash;
        if the process dies before, the previous checkpoints are untouched. ``run_id`` is the ledger
        run doing the training, recorded in the manifest (None when it is not tracked).
        """
        import torch

        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        name = _checkpoint_name(step)
        self.directory.mkdir(parents=True, exist_ok=True)
        final, manifest = self.directory / f"{name}.pt", self.directory / f"{name}.json"
        temporaries: list[Path] = []
        try:
            state_temporary = self._temporary(name, ".pt", temporaries)
            with open(state_temporary, "wb") as stream:
                writer = _HashingWriter(stream)
                torch.save(state, cast("IO[bytes]", writer))  # it only needs write()
                stream.flush()
                os.fsync(stream.fileno())
            record = {
                "format": CHECKPOINT_FORMAT,
                "step": step,
                "file": final.name,
                "sha256": writer.digest.hexdigest(),
                "size_bytes": writer.size_bytes,
                "metric": metric,
                "higher_is_better": higher_is_better,
                "saved_at_s": time.time(),
                "run_id": run_id,
            }
            manifest_temporary = self._temporary(name, ".json", temporaries)
            with open(manifest_temporary, "w", encoding="utf-8") as text:
                json.dump(record, text, indent=2)
                text.flush()
                os.fsync(text.fileno())
            os.replace(state_temporary, final)
            os.replace(manifest_temporary, manifest)
            _fsync_directory(self.directory)
        except BaseException:
            for leftover in temporaries:
                leftover.unlink(missing_ok=True)
            raise
        self._prune(higher_is_better)
        return final

    def _temporary(self, name: str, suffix: str, made: list[Path]) -> Path:
        handle, path = tempfile.mkstemp(prefix=f"{_TEMPORARY_PREFIX}{name}-", suffix=suffix, dir=self.directory)
        os.close(handle)
        made.append(Path(path))
        return Path(path)

    def _prune(self, higher_is_better: bool) -> None:
        """Remove all but the newest ``keep_last`` and the best, and temporaries of interrupted saves.

        A manifest goes before its state file: an interrupted removal leaves a state file without
        a manifest, which loading already treats as unfinished, never a manifest without its data.
        """
        infos = self.checkpoints()
        keep = {info.name for info in infos[-self.keep_last :]}
        best = _best(infos, higher_is_better) if self.keep_best else None
        if best is not None:
            keep.add(best.name)
        for info in infos:
            if info.name not in keep:
                (self.directory / f"{info.name}.json").unlink(missing_ok=True)
                info.path.unlink(missing_ok=True)
        for leftover in self.directory.glob(f"{_TEMPORARY_PREFIX}step-*"):
            leftover.unlink(missing_ok=True)

    # -- reading --------------------------------------------------------------------------------

    def checkpoints(self) -> list[CheckpointInfo]:
        """Every checkpoint with a readable manifest, oldest first (the files are not verified here)."""
        if not self.directory.is_dir():
            return []
        infos = []
        for manifest in self.directory.glob("step-*.json"):
            info = self._read_manifest(manifest)
            if isinstance(info, CheckpointInfo):
                infos.append(info)
        return sorted(infos, key=lambda info: info.step)

    def best(self, higher_is_better: bool = False) -> CheckpointInfo | None:
        """The checkpoint with the best metric, among those saved with one."""
        return _best(self.checkpoints(), higher_is_better)

    def load_latest(self, map_location: Any = None) -> LoadedCheckpoint | None:
        """The newest checkpoint that is complete and matches its checksum; None when there is none.

        Each newer one skipped gets a ``CorruptCheckpointWarning`` naming it, why, and what is used
        instead, so a fallback to older weights is never silent.
        """
        skipped: list[tuple[str, str]] = []
        for name in self._candidates():
            info = self._read_manifest(self.directory / f"{name}.json")
            if isinstance(info, str):
                skipped.append((name, info))
                continue
            problem = _verify(info)
            if problem is None:
                try:
                    state = _load(info.path, map_location)
                except Exception as failure:
                    problem = f"cannot be read: {type(failure).__name__}: {_first_line(failure)}"
                else:
                    _warn_skipped(skipped, f"falling back to {name}")
                    return LoadedCheckpoint(state, info, tuple(skipped_name for skipped_name, _ in skipped))
            skipped.append((name, problem))
        _warn_skipped(skipped, "no valid checkpoint is left, so training starts from the beginning")
        return None

    def _candidates(self) -> list[str]:
        """Checkpoint names seen in the directory (with a manifest, a state file or both), newest first."""
        if not self.directory.is_dir():
            return []
        names = {path.stem for path in self.directory.glob("step-*") if path.suffix in (".pt", ".json")}
        steps = {name: match.group(1) for name in names if (match := _NAME.match(name))}
        return sorted(steps, key=lambda name: int(steps[name]), reverse=True)

    def _read_manifest(self, manifest: Path) -> CheckpointInfo | str:
        """The manifest's content, or why it cannot be trusted."""
        try:
            record = json.loads(manifest.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return "incomplete (no manifest: the save did not finish)"
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as failure:
            return f"its manifest cannot be read ({type(failure).__name__})"
        try:
            if record["format"] != CHECKPOINT_FORMAT:
                return f"unknown format {record['format']!r} (expected {CHECKPOINT_FORMAT!r})"
            metric, run_id = record["metric"], record.get("run_id")
            return CheckpointInfo(
                name=manifest.stem,
                step=int(record["step"]),
                path=self.directory / str(record["file"]),
                sha256=str(record["sha256"]),
                size_bytes=int(record["size_bytes"]),
                metric=None if metric is None else float(metric),
                higher_is_better=bool(record["higher_is_better"]),
                saved_at_s=float(record["saved_at_s"]),
                run_id=None if run_id is None else int(run_id),
            )
        except (KeyError, TypeError, ValueError) as failure:
            return f"its manifest is malformed ({type(failure).__name__}: {failure})"


def _checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def _best(infos: Iterable[CheckpointInfo], higher_is_better: bool) -> CheckpointInfo | None:
    scored = [info for info in infos if info.metric is not None and info.metric == info.metric]  # NaN never wins
    if not scored:
        return None
    pick = max if higher_is_better else min
    return pick(scored, key=lambda info: info.metric or 0.0)


def _verify(info: CheckpointInfo) -> str | None:
    """Why the state file does not match its manifest, or None when its size and SHA-256 do."""
    try:
        size_bytes = info.path.stat().st_size
        if size_bytes != info.size_bytes:
            return f"size mismatch: {size_bytes} bytes, the manifest says {info.size_bytes}"
        digest = hashlib.sha256()
        with open(info.path, "rb") as stream:
            while chunk := stream.read(_READ_CHUNK_BYTES):
                digest.update(chunk)
    except FileNotFoundError:
        return "its state file is missing"
    except OSError as failure:
        return f"its state file cannot be read ({failure.strerror or failure})"
    if digest.hexdigest() != info.sha256:
        return "checksum mismatch"
    return None


def _load(path: Path, map_location: Any) -> dict[str, Any]:
    import torch

    # weights_only: the state holds tensors and plain values only (capture_rng keeps it so), and
    # a checkpoint directory must not be a way to run code.
    state = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(state, dict):
        raise TypeError(f"it holds a {type(state).__name__}, not a dict of training state")
    return state


def _warn_skipped(skipped: list[tuple[str, str]], outcome: str) -> None:
    for name, reason in skipped:
        warnings.warn(f"checkpoint {name} is corrupt ({reason}); {outcome}", CorruptCheckpointWarning, stacklevel=3)


def _first_line(failure: BaseException) -> str:
    text = str(failure).strip()
    return text.splitlines()[0] if text else ""


def _fsync_directory(directory: Path) -> None:
    """Make renames in ``directory`` durable; a no-op where directories cannot be opened (Windows)."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


# -- random number generators -------------------------------------------------------------------


def capture_rng() -> dict[str, Any]:
    """The state of every random stream training may draw from: Python, NumPy, torch CPU and CUDA.

    Kept to tensors, ints, floats and tuples so a checkpoint loads with ``weights_only=True``.
    """
    import numpy as np
    import torch

    name, keys, position, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (str(name), [int(key) for key in keys], int(position), int(has_gauss), float(cached_gaussian)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the streams ``capture_rng`` saved (CUDA only when both then and now have it)."""
    import numpy as np
    import torch

    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(value) for value in internal), gauss))
    name, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensor.cpu() for tensor in state["cuda"]])
