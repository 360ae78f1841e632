"""Energy counts the whole server a GPU needs, as the on-premises rows do, and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from computewise.catalog import Catalog
from computewise.estimate import Assumptions, estimate_infer, estimate_train
from computewise.models import preset
from computewise.specs import InferJob, Parallelism, TrainJob


def test_an_8_gpu_training_estimate_draws_what_the_owned_server_is_rated_for(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """8 x H100 at full load is the DGX H100's 10.2 kW (onprem.csv), not 8 x 700 W of GPUs alone."""
    h100 = catalog.accelerator("h100")
    job = TrainJob(tokens=1e9, seq_len=4096, micro_batch=1, global_batch=64)
    layout = Parallelism(dp=8, zero=3)  # sharded, so that it fits and is timed
    d = estimate_train(preset("llama-3-8b"), h100, 8, job, layout, catalog, assumptions).to_dict()
    energy, hours = d["energy"], d["time"]["seconds"] / 3600
    full_load_w = energy["kwh"] * 1000 / hours / energy["pue"] / assumptions.gpu_power_fraction_of_tdp
    server = next(row for row in catalog.onprem if row.accelerator == h100.slug and row.accelerator_count == 8)
    assert full_load_w == pytest.approx(server.server_power_w, rel=0.01)
    assert energy["counts"] == "whole server"
    assert any("energy counts the whole server" in note and "CPUs, memory" in note for note in d["notes"])


def test_a_device_that_is_the_machine_counts_its_own_power(catalog: Catalog, assumptions: Assumptions) -> None:
    """A phone or a CPU socket has no host server to add: its package power is the machine's."""
    phone = catalog.accelerator("apple-a17-pro")
    job = InferJob(batch=1, context_len=128, output_len=16, precision="fp16")
    d = estimate_infer(preset("gpt2"), phone, job, catalog, assumptions).to_dict()
    energy = d["energy"]
    assert energy["counts"] == "device"
    expected_kwh = phone.tdp_w * assumptions.gpu_power_fraction_of_tdp * d["time"]["seconds"] / 3.6e6
    assert energy["kwh"] == pytest.approx(expected_kwh * energy["pue"], rel=1e-6)


def test_cli_says_what_the_energy_counts() -> None:
    env = {**os.environ, "COLUMNS": "120"}
    args = (
        "estimate",
        "train",
        "--model",
        "llama-3-8b",
        "--gpus",
        "8",
        "--zero",
        "3",
        "--gpu",
        "h100",
        "--tokens",
        "1B",
    )
    text = subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert text.returncode == 0, text.stderr
    energy_line = next(line for line in text.stdout.splitlines() if line.strip().startswith("energy"))
    assert "whole server" in energy_line
    as_json = subprocess.run(
        [sys.executable, "-m", "computewise.cli.app", *args, "--json"], capture_output=True, text=True, timeout=120
    )
    assert json.loads(as_json.stdout)["energy"]["counts"] == "whole server"
