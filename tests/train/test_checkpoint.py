"""CheckpointStore on a real file system: atomic saves (a real kill mid-write), checksums, fallbacks, retention."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from computewise.errors import CheckpointError  # noqa: E402
from computewise.train.checkpoint import CheckpointStore, CorruptCheckpointWarning, capture_rng, restore_rng  # noqa: E402

pytestmark = pytest.mark.torch


def _state(value: float, size: int = 1000) -> dict[str, object]:
    return {"weights": torch.full((size,), value), "step_note": f"value {value}", "rng": capture_rng()}


def _files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_a_saved_checkpoint_loads_back_with_a_manifest_naming_its_checksum(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    path = store.save(_state(1.5), step=200, metric=0.25)

    assert path == tmp_path / "ckpt" / "step-00000200.pt"
    assert _files(tmp_path / "ckpt") == ["step-00000200.json", "step-00000200.pt"]  # no temporary left behind
    manifest = json.loads((tmp_path / "ckpt" / "step-00000200.json").read_text())
    assert manifest["step"] == 200 and manifest["metric"] == 0.25
    assert manifest["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert manifest["size_bytes"] == path.stat().st_size

    loaded = store.load_latest()
    assert loaded is not None and loaded.step == 200 and loaded.skipped == ()
    assert torch.equal(loaded.state["weights"], torch.full((1000,), 1.5))
    assert loaded.state["step_note"] == "value 1.5"


def test_a_checksum_mismatch_falls_back_to_the_previous_checkpoint_and_says_so(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(_state(1.0), step=100)
    newest = store.save(_state(2.0), step=200)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit in the tensor data: same size, still unpicklable
    newest.write_bytes(bytes(data))

    with pytest.warns(CorruptCheckpointWarning) as warned:
        loaded = store.load_latest()

    assert loaded is not None and loaded.step == 100 and loaded.skipped == ("step-00000200",)
    assert torch.equal(loaded.state["weights"], torch.full((1000,), 1.0))
    assert [str(w.message) for w in warned] == [
        "checkpoint step-00000200 is corrupt (checksum mismatch); falling back to step-00000100"
    ]


def test_truncated_unfinished_and_unreadable_checkpoints_are_never_loaded(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=10)
    for step in (100, 200, 300, 400):
        store.save(_state(float(step)), step=step)
    with open(tmp_path / "step-00000400.pt", "r+b") as stream:  # a partial write
        stream.truncate(100)
    (tmp_path / "step-00000300.json").unlink()  # killed between the two renames
    (tmp_path / "step-00000200.json").write_text("{not json")
    # A state file of the wrong kind whose manifest matches it: the checksum passes, unpickling does not.
    bogus = tmp_path / "step-00000500.pt"
    bogus.write_bytes(b"not a torch file")
    manifest = json.loads((tmp_path / "step-00000100.json").read_text())
    manifest.update(step=500, file=bogus.name, sha256=hashlib.sha256(b"not a torch file").hexdigest(), size_bytes=16)
    (tmp_path / "step-00000500.json").write_text(json.dumps(manifest))

    with pytest.warns(CorruptCheckpointWarning) as warned:
        loaded = store.load_latest()

    assert loaded is not None and loaded.step == 100
    messages = [str(w.message) for w in warned]
    assert messages[0].startswith("checkpoint step-00000500 is corrupt (cannot be read: ")
    assert messages[1:] == [
        "checkpoint step-00000400 is corrupt (size mismatch: 100 bytes, the manifest says "
        f"{manifest_size(tmp_path, 400)}); falling back to step-00000100",
        "checkpoint step-00000300 is corrupt (incomplete (no manifest: the save did not finish)); "
        "falling back to step-00000100",
        "checkpoint step-00000200 is corrupt (its manifest cannot be read (JSONDecodeError)); "
        "falling back to step-00000100",
    ]


def manifest_size(directory: Path, step: int) -> int:
    return int(json.loads((directory / f"step-{step:08d}.json").read_text())["size_bytes"])


def test_with_no_valid_checkpoint_left_it_says_training_starts_over(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    assert store.load_latest() is None  # an empty directory is not an error
    path = store.save(_state(1.0), step=10)
    path.write_bytes(b"garbage")
    with pytest.warns(CorruptCheckpointWarning, match="no valid checkpoint is left"):
        assert store.load_latest() is None


class _FailsToSerialize:
    """Raises while torch.save serializes it, as a full disk would."""

    def __reduce__(self) -> tuple[object, ...]:
        raise OSError(28, "No space left on device")


def test_a_save_that_fails_midway_leaves_the_previous_checkpoints_untouched(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(_state(1.0), step=1)
    before = _files(tmp_path)

    with pytest.raises(OSError, match="No space left"):
        store.save({"weights": torch.ones(10), "late": _FailsToSerialize()}, step=2)

    assert _files(tmp_path) == before
    loaded = store.load_latest()
    assert loaded is not None and loaded.step == 1


def test_a_process_killed_while_writing_leaves_the_previous_checkpoint_loadable(tmp_path: Path) -> None:
    """A real SIGKILL in the middle of a large torch.save: the old checkpoint is intact, the new one absent."""
    script = textwrap.dedent(
        """
        import sys, torch
        from computewise.train.checkpoint import CheckpointStore
        torch.set_num_threads(1)
        store = CheckpointStore(sys.argv[1])
        store.save({"weights": torch.ones(10)}, step=1)
        print("saved", flush=True)
        store.save({"weights": torch.randn(64_000_000)}, step=2)  # 256 MB: a second or more to write
        print("finished", flush=True)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "saved"
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".tmp-step-00000002-*.pt")) and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    assert not (tmp_path / "step-00000002.json").exists()
    store = CheckpointStore(tmp_path)
    loaded = store.load_latest()
    assert loaded is not None and loaded.step == 1
    assert torch.equal(loaded.state["weights"], torch.ones(10))
    store.save({"weights": torch.zeros(3)}, step=3)  # the next save clears the dead one's temporary file
    assert _files(tmp_path) == [
        "step-00000001.json",
        "step-00000001.pt",
        "step-00000003.json",
        "step-00000003.pt",
    ]


def test_it_keeps_the_last_n_and_the_best(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=2)
    for step, metric in zip(range(1, 7), [5.0, 1.0, 4.0, 3.0, 6.0, 7.0], strict=True):
        store.save(_state(float(step), size=10), step=step, metric=metric)
    assert [info.step for info in store.checkpoints()] == [2, 5, 6]
    best = store.best()
    assert best is not None and best.step == 2 and best.metric == 1.0

    higher = CheckpointStore(tmp_path / "higher", keep_last=1)
    for step, metric in [(1, 0.5), (2, 0.9), (3, 0.7)]:
        higher.save(_state(0.0, size=10), step=step, metric=metric, higher_is_better=True)
    assert [info.step for info in higher.checkpoints()] == [2, 3]

    plain = CheckpointStore(tmp_path / "plain", keep_last=2, keep_best=False)
    for step, metric in [(1, 0.1), (2, 0.9), (3, 0.7)]:
        plain.save(_state(0.0, size=10), step=step, metric=metric)
    assert [info.step for info in plain.checkpoints()] == [2, 3]
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == [
        "step-00000002.json",
        "step-00000002.pt",
        "step-00000003.json",
        "step-00000003.pt",
    ]


def test_an_unwritable_directory_is_an_error_with_a_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(CheckpointError, match="is not writable") as raised:
        CheckpointStore(blocker / "ckpt").check_writable()
    assert raised.value.hint is not None and "checkpoint_dir" in raised.value.hint

    if os.geteuid() != 0:  # root writes anywhere, so permissions only bite other users
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(CheckpointError, match="is not writable"):
            CheckpointStore(locked).check_writable()

    fine = CheckpointStore(tmp_path / "new" / "nested")
    fine.check_writable()
    assert (tmp_path / "new" / "nested").is_dir() and _files(tmp_path / "new" / "nested") == []
    with pytest.raises(CheckpointError, match="keep_last"):
        CheckpointStore(tmp_path, keep_last=0)


def test_rng_streams_come_back_exactly() -> None:
    state = capture_rng()
    expected = (random.random(), float(np.random.rand()), torch.rand(3))
    random.random(), np.random.rand(), torch.rand(5)  # drift away
    restore_rng(state)
    again = (random.random(), float(np.random.rand()), torch.rand(3))
    assert expected[:2] == again[:2] and torch.equal(expected[2], again[2])


def test_rng_states_survive_a_weights_only_round_trip(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save({"rng": capture_rng()}, step=1)
    expected = (random.random(), float(np.random.rand()), torch.rand(2))
    loaded = store.load_latest()
    assert loaded is not None
    restore_rng(loaded.state["rng"])
    again = (random.random(), float(np.random.rand()), torch.rand(2))
    assert expected[:2] == again[:2] and torch.equal(expected[2], again[2])


def test_a_copied_directory_still_verifies(tmp_path: Path) -> None:
    """Manifests name files relative to their directory, so a checkpoint directory can be moved."""
    CheckpointStore(tmp_path / "a").save(_state(3.0), step=7)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    loaded = CheckpointStore(tmp_path / "b").load_latest()
    assert loaded is not None and loaded.path == tmp_path / "b" / "step-00000007.pt"


def test_the_manifest_names_the_run_that_wrote_it_and_older_manifests_still_load(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=5)
    store.save(_state(1.0), step=1, run_id=42)
    store.save(_state(2.0), step=2)
    assert json.loads((tmp_path / "step-00000001.json").read_text())["run_id"] == 42
    assert json.loads((tmp_path / "step-00000002.json").read_text())["run_id"] is None
    # A manifest from before run ids: the key is absent, and the checkpoint still lists and loads.
    old = tmp_path / "step-00000002.json"
    record = json.loads(old.read_text())
    del record["run_id"]
    old.write_text(json.dumps(record))
    assert [(info.step, info.run_id) for info in store.checkpoints()] == [(1, 42), (2, None)]
    loaded = store.load_latest()
    assert loaded is not None and loaded.step == 2 and loaded.info.run_id is None


def test_fit_records_its_ledger_run_in_every_manifest_and_null_untracked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real fits of tiny_gpt: a tracked one against a real SQLite ledger, an untracked one beside it."""
    from computewise.ledger import Ledger
    from computewise.train.config import TrainConfig
    from computewise.train.fit import fit

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))  # examples.tiny_gpt
    from examples.tiny_gpt import setup

    gpt = {"samples": 32, "global_batch": 4, "n_embd": 32, "block_size": 16}
    config = TrainConfig(micro_batch_size=4)
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tracked = fit(setup(dict(gpt)), config, max_steps=4, checkpoint_dir=tmp_path / "tracked",
                      checkpoint_every_steps=2, keep_last=5, db=db)  # fmt: skip
        untracked = fit(setup(dict(gpt)), config, max_steps=4, checkpoint_dir=tmp_path / "untracked",
                        checkpoint_every_steps=2, keep_last=5, track=False)  # fmt: skip
    finally:
        torch.set_num_threads(threads)

    assert tracked.run_id is not None and untracked.run_id is None
    with Ledger.open(db) as ledger:
        assert ledger.run(tracked.run_id).status == "succeeded"  # the id names a real run of that ledger
    for directory, expected in ((tmp_path / "tracked", tracked.run_id), (tmp_path / "untracked", None)):
        manifests = sorted(directory.glob("step-*.json"))
        assert [path.name for path in manifests] == ["step-00000002.json", "step-00000004.json"]
        assert [json.loads(path.read_text())["run_id"] for path in manifests] == [expected, expected]
        assert [info.run_id for info in CheckpointStore(directory).checkpoints()] == [expected, expected]
