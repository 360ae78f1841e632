"""Tensor-parallel communication overlapped with the GEMMs (``--tp-overlap``: Transformer Engine's userbuffers).

Each block's all-gather and reduce-scatter is exchanged in tp chunks while the block's GEMMs compute the
chunk before. Large GEMMs hide the collectives but for a chunk; small ones, cut into tp chunks, run below
their whole rate and cost more than the overlap saves, which is why NVIDIA turns it on for its Llama 3
70B and 405B recipes and not for small models. The published NVIDIA rows that ran it are in
``tests/estimate/test_accuracy.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

from computewise.catalog import Catalog
from computewise.estimate import Assumptions
from computewise.estimate.single import estimate_train
from computewise.models import preset
from computewise.specs import Parallelism, TrainJob

CLI = [sys.executable, "-m", "computewise.cli.app"]
JOB = TrainJob(tokens=1e9, seq_len=4096, micro_batch=1, global_batch=256, framework="megatron")


def _tp_s(
    catalog: Catalog, assumptions: Assumptions, model: str, gpus: int, tp: int, pp: int, job: TrainJob, overlap: bool
) -> float:
    layout = Parallelism(dp=gpus // (tp * pp), tp=tp, pp=pp, zero=1, sequence_parallel=True, tp_overlap=overlap)
    train = estimate_train(preset(model), catalog.accelerator("h100-sxm"), gpus, job, layout, catalog, assumptions)
    return train.step_breakdown_s["tensor_parallel"]


def test_large_gemms_hide_all_but_a_chunk(catalog: Catalog, assumptions: Assumptions) -> None:
    """Llama 3 70B at TP 8 and 8,192 tokens: the blocks' GEMMs outlast their collectives, so a chunk of each
    shows, plus what the GEMMs lose in chunks of 1,024 rows: well under the exposed collectives, never under a
    chunk of each."""
    job = replace(JOB, seq_len=8192)
    exposed = _tp_s(catalog, assumptions, "llama-3-70b", 64, 8, 4, job, overlap=False)
    overlapped = _tp_s(catalog, assumptions, "llama-3-70b", 64, 8, 4, job, overlap=True)
    assert exposed / 8 <= overlapped < 0.6 * exposed


def test_small_gemms_cut_into_chunks_cost_more_than_they_hide(catalog: Catalog, assumptions: Assumptions) -> None:
    exposed = _tp_s(catalog, assumptions, "gpt2", 8, 4, 1, JOB, overlap=False)
    overlapped = _tp_s(catalog, assumptions, "gpt2", 8, 4, 1, JOB, overlap=True)
    assert overlapped > exposed


def test_without_tensor_parallelism_there_is_nothing_to_overlap(catalog: Catalog, assumptions: Assumptions) -> None:
    h100, model = catalog.accelerator("h100-sxm"), preset("llama-3-8b")
    job = replace(JOB, global_batch=64)
    plain = estimate_train(model, h100, 8, job, Parallelism(dp=8, zero=1), catalog, assumptions)
    asked = estimate_train(model, h100, 8, job, Parallelism(dp=8, zero=1, tp_overlap=True), catalog, assumptions)
    assert asked.step_breakdown_s == plain.step_breakdown_s


def test_the_overlap_is_in_the_json_and_the_layout_line() -> None:
    command = [*CLI, "estimate", "train", "--model", "llama-3-70b", "--gpu", "h100", "--gpus", "64", "--tp", "8"]
    command += ["--zero", "1", "--sequence-parallel", "--framework", "megatron", "--tp-overlap"]
    document = json.loads(subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120).stdout)
    assert document["layout"]["tp_overlap"] is True
    text = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    assert "TP overlapped" in text.replace("\n", " ")
