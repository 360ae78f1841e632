"""Hybrid sharding (``--zero-group``): ZeRO inside groups of ranks, replicas across them.

PyTorch FSDP's HYBRID_SHARD shards over a node's GPUs and replicates across nodes; MaxText on several
TPU slices shards (FSDP) over each slice and runs data parallelism across slices. Each device then holds
what ZeRO over one group would give it, and a group's gathers stay on the group's own links.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from computewise.catalog import Catalog
from computewise.estimate import Assumptions
from computewise.estimate.single import estimate_train
from computewise.models import preset
from computewise.specs import Parallelism, TrainJob

CLI = [sys.executable, "-m", "computewise.cli.app"]
JOB = TrainJob(tokens=1e9, seq_len=2048, micro_batch=1, global_batch=512, recompute="full")
STATES = ("weights", "gradients", "optimizer_states")


def test_a_device_holds_what_zero_over_its_group_gives_it(catalog: Catalog, assumptions: Assumptions) -> None:
    """Two v5e pods sharding within each pod hold, per chip, exactly what one pod sharding over itself does."""
    v5e, model = catalog.accelerator("tpu-v5e"), preset("llama-2-7b")
    hybrid = estimate_train(model, v5e, 512, JOB, Parallelism(dp=512, zero=3, zero_group=256), catalog, assumptions)
    one_pod = estimate_train(
        model, v5e, 256, replace(JOB, global_batch=256), Parallelism(dp=256, zero=3), catalog, assumptions
    )
    everywhere = estimate_train(model, v5e, 512, JOB, Parallelism(dp=512, zero=3), catalog, assumptions)
    for part in STATES:
        assert hybrid.memory_per_device[part] == pytest.approx(one_pod.memory_per_device[part])
        assert hybrid.memory_per_device[part] > everywhere.memory_per_device[part]


def test_one_group_of_every_rank_is_plain_zero(catalog: Catalog, assumptions: Assumptions) -> None:
    h100, model = catalog.accelerator("h100-sxm"), preset("llama-3-8b")
    plain = estimate_train(model, h100, 16, JOB, Parallelism(dp=16, zero=3), catalog, assumptions)
    whole = estimate_train(model, h100, 16, JOB, Parallelism(dp=16, zero=3, zero_group=16), catalog, assumptions)
    assert whole.memory_per_device == plain.memory_per_device
    assert whole.step_breakdown_s == plain.step_breakdown_s


def test_gathers_inside_a_node_beat_gathers_across_a_slow_network(catalog: Catalog, assumptions: Assumptions) -> None:
    """On two nodes joined by 1 GB/s, ZeRO-3 over all 16 GPUs gathers every layer's weights across the network
    each micro-batch; sharding within each node's NVLink moves only one all-reduce of a shard a step across it."""
    h100, model = catalog.accelerator("h100-sxm"), preset("llama-3-8b")
    slow = replace(catalog.offerings_for("h100-sxm")[0], network_bytes_per_s=1e9, fabric="")
    small = replace(catalog, offerings=(slow,))
    job = replace(JOB, global_batch=128)
    args = (model, h100, 16, job)
    everywhere = estimate_train(*args, Parallelism(dp=16, zero=3), small, assumptions)
    per_node = estimate_train(*args, Parallelism(dp=16, zero=3, zero_group=8), small, assumptions)
    assert everywhere.quote.devices_per_node == 8
    assert per_node.step_breakdown_s["data_parallel"] < 0.5 * everywhere.step_breakdown_s["data_parallel"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--zero", "3", "--zero-group", "3"], "--zero-group 3 needs ZeRO"),
        (["--zero", "0", "--zero-group", "256"], "--zero-group 256 needs ZeRO"),
        (["--zero", "3", "--zero-group", "-1"], "--zero-group"),
    ],
)
def test_a_group_that_cannot_shard_is_refused(flags: list[str], said: str) -> None:
    done = subprocess.run(
        [*CLI, "estimate", "train", "--model", "llama-2-7b", "--gpu", "tpu-v5e", "--gpus", "512", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "To fix" in done.stderr


def test_the_group_is_in_the_json_and_the_layout_line() -> None:
    command = [*CLI, "estimate", "train", "--model", "llama-2-7b", "--gpu", "tpu-v5e", "--gpus", "512"]
    command += ["--zero", "3", "--zero-group", "256", "--recompute", "full", "--seq-len", "2048"]
    document = json.loads(subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120).stdout)
    assert document["layout"]["zero_group"] == 256
    text = subprocess.run(command, capture_output=True, text=True, timeout=120, env=None).stdout
    assert "ZeRO-3 in groups of 256" in text.replace("\n", " ")
    assert "2 slices of 256" in text.replace("\n", " ")
