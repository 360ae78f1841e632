"""A BF16 PyTorch winner (what a CPU with AMX or AVX-512 BF16 chooses for MiniLM) exports a self-contained
TorchScript program that ``computewise serve`` answers from, wherever the directory is moved.

This CPU may have no BF16 units; the search is told it has (a ``Hardware`` value with the flag, the
one seam), so the BF16 path is built and run for real, emulated and slowly, on 32 sentences. The
moved artifact is then served by the real ``computewise serve`` process on 127.0.0.1 and its
answers are compared with the FP32 source model's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from computewise.optimize.artifact import write_artifact
from computewise.optimize.predictors import TorchPredictor
from computewise.optimize.quality import load_metric, parse_drop
from computewise.optimize.search import SearchOptions, SearchResult, run_search
from computewise.optimize.source import ModelSource
from computewise.system.hardware import detect_hardware

torch = pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.torch

QUESTIONS = ["A quiet morning by the lake.", "The server returned an error after the upgrade.", "Cats sleep a lot."]


@pytest.fixture(scope="module")
def bf16_search(minilm_source: ModelSource, tmp_path_factory: pytest.TempPathFactory) -> SearchResult:
    source = dataclasses.replace(minilm_source, feed=minilm_source.feed.subset(range(0, 128, 4)))
    metric = load_metric(None, source.task, parse_drop("1%"))
    here = detect_hardware(1)
    amx = dataclasses.replace(here, cpu_flags=here.cpu_flags | {"avx512_bf16", "amx_bf16"})
    options = SearchOptions(only=("pytorch-bf16",), batch_sizes=(1, 4), bench_items=8, threads=1)
    return run_search(source, metric, options, tmp_path_factory.mktemp("bf16-search"), hardware=amx)


def _serve(directory: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    ready_file, log = tmp_path / "ready.json", tmp_path / "serve.log"
    command = [
        sys.executable, "-m", "computewise.cli.app", "serve", str(directory), "--port", "0",
        "--db", f"sqlite:///{tmp_path / 'ledger.sqlite'}", "--ready-file", str(ready_file),
    ]  # fmt: skip
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    env.pop("COMPUTEWISE_SERVE_TOKEN", None)
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    deadline_s = time.monotonic() + 180
    while not ready_file.exists():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline_s, log.read_text()
        time.sleep(0.1)
    return process, json.loads(ready_file.read_text())["url"], log


def test_the_bf16_variant_is_a_program_that_serves_after_its_directory_moves(
    bf16_search: SearchResult, minilm_source: ModelSource, tmp_path: Path
) -> None:
    variant = bf16_search.variant("pytorch-bf16")
    assert variant.status == "ok", variant.reason
    assert variant.exportable and variant.built is not None and variant.built.format == "torchscript"
    out = write_artifact(bf16_search, variant, tmp_path / "minilm-bf16", forced=bf16_search.chosen is None)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["format"], manifest["dtype"], manifest["file"]) == ("torchscript", "bfloat16", "model.pt")
    assert Path(manifest["source"]).is_absolute()
    moved = Path(shutil.move(str(out), str(tmp_path / "elsewhere" / "minilm-bf16")))
    process, url, log = _serve(moved, tmp_path)
    try:
        response = httpx.post(f"{url}/v1/models/minilm-bf16/infer", json={"inputs": QUESTIONS}, timeout=120)
        assert response.status_code == 200, response.text
        served = np.asarray(response.json()["outputs"])
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    feed = minilm_source.feed.like(QUESTIONS)
    source_says = TorchPredictor(minilm_source.module, positional=False)(feed.batch(range(len(QUESTIONS))))
    cosine = (served * source_says).sum(axis=1) / (np.linalg.norm(served, axis=1) * np.linalg.norm(source_says, axis=1))
    assert served.shape == (3, 384)
    assert cosine.min() > 0.99, cosine  # BF16 rounding, not a different model
