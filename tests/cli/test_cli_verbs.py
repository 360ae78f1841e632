"""The real console script in a child process: JSON contracts, exit codes, no tracebacks, lazy imports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "computewise.cli.app"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_estimate_train_json_contract() -> None:
    result = run(
        "estimate",
        "train",
        "--model",
        "llama-3-8b",
        "--gpu",
        "h100",
        "--gpus",
        "8",
        "--tokens",
        "10B",
        "--seq-len",
        "4096",
        "--micro-batch",
        "1",
        "--zero",
        "3",
        "--recompute",
        "selective",
        "--pricing",
        "spot",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    parts = data["memory"]["per_device_bytes"]
    assert set(parts) == {
        *("weights", "gradients", "optimizer_states", "activations", "kv_cache", "overhead"),
        *("allocated_peak", "reserved_peak", "total"),
    }
    for path in (("compute", "flops"), ("time", "seconds"), ("cost", "usd"), ("energy", "kwh"), ("co2", "kg")):
        assert data[path[0]][path[1]] > 0
    assert data["cost"]["pricing"] == "spot"


def test_estimate_infer_json_contract() -> None:
    result = run(
        "estimate",
        "infer",
        "--model",
        "llama-2-7b",
        "--gpu",
        "a100",
        "--batch-size",
        "16",
        "--context-len",
        "2k",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["memory"]["per_device_bytes"]["kv_cache"] == 524_288 * 16 * (2000 + 256)
    assert data["memory"]["per_device_bytes"]["gradients"] == 0


def test_plan_train_json_contract(tmp_path: Path) -> None:
    html = tmp_path / "plan.html"
    result = run(
        "plan",
        "train",
        "--model",
        "gpt2",
        "--tokens",
        "1e9",
        "--deadline",
        "3d",
        "--max-gpus",
        "16",
        "--json",
        "--html",
        str(html),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= {"recommended", "pareto", "candidates", "rejected"}
    assert data["recommended"]["time"]["seconds"] <= 3 * 86400
    assert "per_device_bytes" in data["recommended"]["memory"]
    assert html.read_text().count("<svg") >= 2


def test_a_plan_that_takes_years_says_so_first() -> None:
    """Without --deadline the cheapest run wins however slow: one of 20 years must not pass without a word."""
    args = ("plan", "train", "--model", "llama-3-70b", "--tokens", "15T", "--max-gpus", "8")
    document = run(*args, "--json")
    assert document.returncode == 0, document.stderr
    warnings = json.loads(document.stdout)["warnings"]
    assert len(warnings) == 1 and re.match(r"the recommended run takes [1-9]\d\.\d years", warnings[0]), warnings
    table = run(*args)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    after_panel = " ".join(
        " ".join(lines[next(i for i, line in enumerate(lines) if line.startswith("╰")) + 1 :]).split()
    )
    assert after_panel.startswith(f"warning: {warnings[0]}"), table.stdout
    assert "raise --max-gpus" in warnings[0]
    # At --max-gpus's own ceiling, raising it is no advice: the deadline is.
    ceiling = run("plan", "train", "--model", "llama-3.1-405b", "--tokens", "15T", "--max-gpus", "1000000", "--json")
    (at_ceiling,) = json.loads(ceiling.stdout)["warnings"]
    assert "years" in at_ceiling and "--deadline" in at_ceiling and "--max-gpus" not in at_ceiling
    short = run("plan", "train", "--model", "gpt2", "--tokens", "1B", "--json")
    assert "warnings" not in json.loads(short.stdout)


def test_plan_infer_and_compare_onprem() -> None:
    infer = run("plan", "infer", "--model", "llama-3-8b", "--rps", "50", "--latency", "20s", "--json")
    assert infer.returncode == 0, infer.stderr
    option = json.loads(infer.stdout)["recommended"]
    assert option["replicas"] >= 1 and option["cost"]["usd_per_1000_requests"] > 0
    onprem = run("plan", "compare-onprem", "--json")
    assert onprem.returncode == 0, onprem.stderr
    rows = json.loads(onprem.stdout)["break_even"]  # one JSON object, like every --json
    assert rows and all(r["break_even_utilization"] > 0 for r in rows)


def test_plan_infer_refuses_token_flags_for_a_model_that_generates_none() -> None:
    """They were ignored: a CNN's image has a fixed length and an encoder writes nothing, as estimate infer says."""
    refused = run("plan", "infer", "--model", "resnet-50", "--rps", "10", "--input-len", "5", "--output-len", "7")
    assert refused.returncode == 2
    assert "generates no tokens, so --input-len/--context-len and --output-len do not apply" in refused.stderr
    assert "--batch" not in refused.stderr  # plan infer chooses the batch itself
    encoder = run("plan", "infer", "--model", "bert-base", "--rps", "10", "--input-len", "128", "--json")
    assert encoder.returncode == 0, encoder.stderr


def test_framework_follows_the_split_unless_given() -> None:
    def framework(*extra: str) -> str:
        result = run("estimate", "train", "--model", "llama-3-8b", "--gpu", "h100", "--json", *extra)
        assert result.returncode == 0, result.stderr
        return str(json.loads(result.stdout)["job"]["framework"])

    assert framework("--gpus", "8") == "pytorch"  # data parallel: DDP/FSDP under autocast
    assert framework("--gpus", "8", "--tp", "8") == "megatron"  # a split model runs on Megatron-style code
    assert framework("--gpus", "8", "--tp", "8", "--framework", "pytorch") == "pytorch"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("estimate", "train", "--model", "lama-3-8b", "--gpu", "h100"), "did you mean 'llama-3-8b'"),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h10O"), "did you mean"),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--gpus", "-4"), "--gpus must be between 1 and 1e6"),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--gpus", "0"), "--gpus must be between 1 and 1e6"),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--gpus", "8", "--tp", "3"), "does not divide"),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--gpus", "8", "--tp", "8"), "not divisible by tp"),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--tokens", "ten"), "cannot read --tokens 'ten'"),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--precision", "bf17"), "--precision must be"),
        (
            ("plan", "train", "--model", "llama-3-70b", "--tokens", "2T", "--deadline", "1h", "--max-gpus", "64"),
            "deadline removed the last candidates",
        ),
        (("plan", "train", "--model", "gpt2", "--budget", "-5"), "--budget must be between $0.01 and"),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--cp", "0"), "--cp must be between 1"),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--gpus", "2", "--ep", "2"), "mixture-of-experts"),
        (
            ("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--gpus", "2", "--virtual-stages", "2"),
            "needs pipeline parallelism",
        ),
        (
            (
                "estimate",
                "train",
                "--model",
                "llama-3-8b",
                "--gpu",
                "h100",
                "--gpus",
                "4",
                "--cp",
                "4",
                "--seq-len",
                "100",
            ),
            "not a multiple of 2*cp",
        ),
        (("estimate", "train", "--model", "gpt2", "--gpu", "h100", "--framework", "jax"), "--framework must be"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: tuple[str, ...], message: str) -> None:
    result = run(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_config_json_names_the_field(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "intermediate_size": 11008,
                "vocab_size": 32000,
            }
        )
    )
    result = run("estimate", "train", "--model", str(config), "--gpu", "a100")
    assert result.returncode == 2
    assert "num_hidden_layers" in result.stderr and "Traceback" not in result.stderr


def test_help_and_plan_do_not_import_torch() -> None:
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['computewise', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('computewise.cli.app', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    for args in (["--help"], ["plan", "train", "--model", "gpt2", "--json"]):
        result = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
