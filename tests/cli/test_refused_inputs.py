"""Inputs that must be refused: every quantity flag of every verb, a mistyped ``--db``, markup in echoed input.

The range tests run the real entry point (``computewise.cli.app.main``) in this process, flag by flag,
so that ~150 refusals stay fast; each must exit 2 before the verb does anything, with a message
that names the flag, its range and why. The ``--db`` and loadtest tests run the CLI as a child
process, as a user would.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from computewise import limits
from computewise.cli.app import main  # noqa: TID251 (the real entry point, in-process)
from computewise.limits import FLAG_LIMITS, Limit
from computewise.units import describe_range, parse_duration_s

CLI = [sys.executable, "-m", "computewise.cli.app"]

_ESTIMATE_TRAIN = ("estimate", "train", "--model", "gpt2", "--gpu", "h100")
_ESTIMATE_INFER = ("estimate", "infer", "--model", "gpt2", "--gpu", "h100")
_ESTIMATE_COMM = ("estimate", "comm", "--gpu", "h100")
_PLAN_TRAIN = ("plan", "train", "--model", "gpt2")
_PLAN_INFER = ("plan", "infer", "--model", "gpt2", "--peak-rps", "1")
_PLAN_SERVE = ("plan", "serve", "--capacity-rps", "10", "--peak-rps", "5", "--hourly-usd", "1")
_PLAN_FEDERATED = (
    *("plan", "federated", "-m", "gpt2", "--clients", "10", "--client-device", "apple-m2", "--uplink", "20Mbps"),
    *("--rounds", "1", "--local-steps", "1"),
)
_SERVE = ("serve", "echo")
_DEPLOY = ("deploy", "echo", "--address", "127.0.0.1:9")
_LOADTEST = ("loadtest", "http://127.0.0.1:9/x")
_TUNE = ("tune", "examples.tiny_gpt:setup")
_SCALETEST = ("scaletest", "examples.tiny_gpt:setup")
_OPTIMIZE = ("optimize", "examples.digits:classifier")
_SUBMIT = ("submit", "--dry-run", "--name", "job")
_DISTILL = ("distill", "examples.digits:classifier", "--student", "width=0.5")

# (verb, flag, what follows the flag's value): every flag of every verb that takes a quantity.
QUANTITY_FLAGS: list[tuple[tuple[str, ...], str, tuple[str, ...]]] = [
    *((_ESTIMATE_TRAIN, flag, ()) for flag in ("--tokens", "--seq-len", "--gpus", "--micro-batch", "--global-batch")),
    *((_ESTIMATE_TRAIN, flag, ()) for flag in ("--tp", "--pp", "--cp", "--ep", "--virtual-stages", "--zero", "--mfu")),
    (_ESTIMATE_TRAIN, "--zero-group", ()),
    *((_ESTIMATE_TRAIN, flag, ("--method", "lora")) for flag in ("--lora-rank", "--lora-alpha")),
    *((_PLAN_TRAIN, flag, ("--method", "qlora")) for flag in ("--lora-rank", "--lora-alpha")),
    *((_ESTIMATE_INFER, flag, ()) for flag in ("--gpus", "--batch-size", "--input-len", "--output-len")),
    *((_ESTIMATE_COMM, flag, ()) for flag in ("--gpus", "--bytes", "--per-node")),
    *(
        (_PLAN_TRAIN, flag, ())
        for flag in ("--tokens", "--seq-len", "--global-batch", "--deadline", "--budget", "--top", "--max-gpus")
    ),
    *(
        (_PLAN_INFER, flag, ())
        for flag in (
            *("--peak-rps", "--mean-rps", "--input-len", "--output-len", "--max-latency", "--target-utilization"),
            "--top",
        )
    ),
    *(
        (_PLAN_SERVE, flag, ())
        for flag in (
            *("--capacity-rps", "--latency-ms", "--peak-rps", "--mean-rps", "--hourly-usd", "--gpus-per-replica"),
            *("--target-utilization", "--min-replicas", "--cold-start-s"),
        )
    ),
    *(
        (("run",), flag, ("--", "true"))
        for flag in (
            *("--interval", "--hourly-usd", "--prometheus-port", "--idle-minutes", "--idle-grace", "--gpus"),
            *("--cpus", "--nproc", "--max-restarts", "--max-preemptions"),
        )
    ),
    *(
        (_SUBMIT, flag, ("--", "true"))
        for flag in ("--gpus", "--cpus", "--nproc", "--memory", "--hourly-usd", "--max-restarts")
    ),
    *(
        (_SERVE, flag, ())
        for flag in (
            *("--port", "--max-batch-size", "--max-queue-delay-ms", "--slo-p99-ms", "--queue-limit", "--timeout-s"),
            *("--max-body-bytes", "--hourly-usd"),
        )
    ),
    *(
        (_DEPLOY, flag, ())
        for flag in (
            *("--port", "--max-batch-size", "--max-queue-delay-ms", "--queue-limit", "--timeout-s"),
            *("--max-body-bytes", "--replica-cpus"),
        )
    ),
    *((_LOADTEST, flag, ()) for flag in ("--rate", "--duration", "--timeout-s", "--max-rate")),
    (_LOADTEST, "--slo-p99-ms", ("--find-max",)),
    *(
        (_TUNE, flag, ())
        for flag in (
            *("--steps", "--eta", "--memory", "--run-hours", "--tokens", "--hourly-usd", "--threads"),
            *("--trial-timeout", "--time-budget"),
        )
    ),
    *(
        (_SCALETEST, flag, ())
        for flag in ("--nproc", "--steps", "--warmup-steps", "--threads", "--timeout", "--link-gb-per-s")
    ),
    *((_OPTIMIZE, flag, ()) for flag in ("--batch-sizes", "--time-budget", "--threads", "--max-length")),
    *((_DISTILL, flag, ()) for flag in ("--epochs", "--batch-size", "--learning-rate", "--held-out", "--threads")),
    (_PLAN_TRAIN, "--dataset-size", ("--data-region", "aws:us-east-1")),
    (("runs",), "--limit", ()),
    *((("cost", "anomalies"), flag, ()) for flag in ("--window", "--threshold")),
    (("budget", "set", "--scope", "all"), "--monthly-usd", ()),
    *(
        (("data", "bench", "train.parquet"), flag, ())
        for flag in ("--max-workers", "--time-per-config", "--batch-size", "--seq-len", "--global-batch", "--gpus")
    ),
    (("data", "bench", "train.parquet"), "--demand", ()),
    (("data", "convert", "in.csv", "out.parquet"), "--batch-size", ()),
    *((_PLAN_SERVE, flag, ()) for flag in ("--max-usd-per-hour", "--monthly-usd")),
    *((_SERVE, flag, ()) for flag in ("--cache-size", "--cache-ttl")),
    (_LOADTEST, "--repeat-ratio", ()),
    (_PLAN_SERVE, "--cache-hit-ratio", ()),
    (_PLAN_SERVE, "--alert-lead", ("--max-usd-per-hour", "2", "--monthly-usd", "100")),
    *(
        (_PLAN_FEDERATED, flag, ())
        for flag in (
            *("--clients", "--rounds", "--local-steps", "--participation", "--topk-ratio", "--local-batch"),
            *("--uplink", "--downlink", "--server-vcpus", "--mfu", "--hourly-usd"),
        )
    ),
]


def _limit(verb: tuple[str, ...], flag: str) -> Limit:
    """The range the flag is held to on this verb (GPUs of a job may be a fraction, or none)."""
    if flag == "--gpus" and verb[0] in ("run", "submit"):
        return limits.ACCELERATOR_SHARE
    return FLAG_LIMITS[flag]


def _main(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Exit code and stderr (whitespace collapsed: Rich wraps at 80 columns) of ``computewise ARGV``."""
    monkeypatch.setattr(sys, "argv", ["computewise", *argv])
    with pytest.raises(SystemExit) as done:
        main()
    return int(done.value.code or 0), " ".join(capsys.readouterr().err.split())


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory and a ledger location that must both stay empty: a refusal writes nothing."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("COMPUTEWISE_DB", str(work / "ledger.sqlite"))
    monkeypatch.setenv("COMPUTEWISE_FAKE_GPU", "")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))  # examples.*
    return work


@pytest.mark.parametrize("value", ["absurd", ""])
@pytest.mark.parametrize(
    ("verb", "flag", "after"), QUANTITY_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v
)
def test_every_quantity_flag_refuses_absurd_and_empty_values(
    verb: tuple[str, ...],
    flag: str,
    after: tuple[str, ...],
    value: str,
    sandbox: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = _limit(verb, flag)
    unit = "s" if limit.kind == "duration" else ""  # a typed duration needs its unit
    text = f"{limit.high * 1000:g}{unit}" if value == "absurd" else ""
    code, stderr = _main([*verb, flag, text, *after], capsys, monkeypatch)
    assert code == 2, stderr
    assert stderr.startswith(f"error: {flag} "), stderr
    assert describe_range(limit) in stderr, stderr
    if value == "absurd":
        assert limit.why in stderr, stderr
    assert list(sandbox.iterdir()) == [], "a refused flag must leave nothing behind"


def test_every_flag_in_the_table_is_exercised() -> None:
    """A new quantity flag gets a range (FLAG_LIMITS) and a line in QUANTITY_FLAGS, or this fails."""
    assert {flag for _, flag, _ in QUANTITY_FLAGS} | {"--model"} == set(FLAG_LIMITS)


DURATION_FLAGS = [
    (verb, flag, after)
    for verb, flag, after in QUANTITY_FLAGS
    if _limit(verb, flag).kind == "duration" and flag != "--idle-minutes"  # its name says minutes
]


@pytest.mark.parametrize(
    ("verb", "flag", "after"), DURATION_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v
)
def test_a_duration_without_its_unit_is_refused(
    verb: tuple[str, ...],
    flag: str,
    after: tuple[str, ...],
    sandbox: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--deadline 7`` was read as 7 seconds: a bare number is a week to one user and seconds to another."""
    code, stderr = _main([*verb, flag, "7", *after], capsys, monkeypatch)
    assert code == 2, stderr
    assert stderr.startswith(f"error: {flag} '7' has no unit To fix: write 7"), stderr
    assert list(sandbox.iterdir()) == []


def _suggested(hint: str) -> list[str]:
    """The spellings a 'write 7d, 7h, 7min or 7s' hint offers (none for a hint that names the range)."""
    if not hint.startswith("write "):
        return []
    return hint.removeprefix("write ").replace(" or ", ", ").split(", ")


@pytest.mark.parametrize("bare", ["0", "7", "5000", "-5"])
@pytest.mark.parametrize(
    ("verb", "flag", "after"), DURATION_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v
)
def test_a_unit_suggestion_is_a_value_the_flag_accepts(
    verb: tuple[str, ...],
    flag: str,
    after: tuple[str, ...],
    bare: str,
    sandbox: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run --interval 0`` suggested "write 0s", refused next as out of range: a hint offers only spellings
    that would be taken, or, when none would, names the range."""
    code, stderr = _main([*verb, flag, bare, *after], capsys, monkeypatch)
    assert code == 2, stderr
    hint = stderr.split(" To fix: ", 1)[1]
    suggested = _suggested(hint)
    for spelling in suggested:
        assert spelling.startswith(bare), hint
        parse_duration_s(spelling, flag)  # raises if the suggestion would be refused
    if not suggested:
        assert describe_range(_limit(verb, flag)) in hint, hint
    assert list(sandbox.iterdir()) == []


@pytest.mark.parametrize(
    ("flag", "bare", "hint"),
    [
        ("--interval", "0", "give --interval between 10 ms and 1 h with its unit, e.g. --interval 1s"),
        ("--interval", "7", "write 7min or 7s"),
        ("--idle-grace", "7", "write 7h, 7min or 7s"),
    ],
)
def test_run_interval_hints_name_only_accepted_values(
    flag: str, bare: str, hint: str, sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stderr = _main(["run", flag, bare, "--", "true"], capsys, monkeypatch)
    assert code == 2
    assert stderr == f"error: {flag} '{bare}' has no unit To fix: {hint}"
    assert list(sandbox.iterdir()) == []


def test_negative_idle_minutes_are_refused_for_their_range(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--idle-minutes -5`` suggested "-5min", itself out of range: a bare number there is minutes, signed or not."""
    code, stderr = _main(["run", "--idle-minutes", "-5", "--", "true"], capsys, monkeypatch)
    assert code == 2
    assert "has no unit" not in stderr and "write -5" not in stderr, stderr
    assert "--idle-minutes must be between 1 s and 30 days" in stderr, stderr
    assert stderr.endswith("To fix: e.g. --idle-minutes 15min"), stderr
    assert list(sandbox.iterdir()) == []


def test_every_duration_flag_is_checked_for_its_unit() -> None:
    assert {flag for _, flag, _ in DURATION_FLAGS} >= {"--deadline", "--max-latency", "--duration", "--alert-lead"}


def test_the_issue_example_tokens_1e30(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stderr = _main([*_ESTIMATE_TRAIN, "--tokens", "1e30"], capsys, monkeypatch)
    assert code == 2
    assert stderr.startswith(
        "error: --tokens must be between 1 and 1e15 (the largest published training runs use about 4e13 tokens), "
        "got '1e30'"
    )


def test_a_dollar_amount_is_explained_in_dollars(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stderr = _main([*_PLAN_TRAIN, "--budget", "lots"], capsys, monkeypatch)
    assert code == 2
    assert "write it like 2500, 7.50, $7.50 or $2.5k" in stderr and "7.5B" not in stderr


def test_a_negative_parameter_count_is_not_a_model_name(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stderr = _main(["estimate", "train", "--model", "-7B", "--gpu", "h100"], capsys, monkeypatch)
    assert code == 2
    assert "--model must be between 1 and 1e14 parameters" in stderr and "did you mean" not in stderr


@pytest.mark.parametrize(
    "verb", [_ESTIMATE_TRAIN, _PLAN_TRAIN, ("plan", "infer", "--model", "gpt2", "--peak-rps", "1")]
)
def test_a_mistyped_cloud_gets_the_same_did_you_mean_everywhere(
    verb: tuple[str, ...], sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stderr = _main([*verb, "--cloud", "awz"], capsys, monkeypatch)
    assert code == 2
    assert "error: unknown cloud 'awz'; did you mean 'aws', 'azure'?" in stderr


@pytest.mark.parametrize("verb", [_ESTIMATE_TRAIN, _PLAN_TRAIN, _PLAN_INFER, ("run", "--gpus", "0", "--cloud", "aws")])
def test_a_mistyped_region_gets_the_same_did_you_mean_everywhere(
    verb: tuple[str, ...], sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stderr = _main(
        [*verb, "--region", "us-est-1", *(("--", "true") if verb[0] == "run" else ())], capsys, monkeypatch
    )
    assert code == 2
    assert "unknown region 'us-est-1'; did you mean 'us-east-1'" in stderr
    assert not (sandbox / "ledger.sqlite").exists()


@pytest.mark.parametrize(
    ("place", "message", "hint"),
    [
        (
            "aws:us-east1",
            "unknown data region 'aws:us-east1'; did you mean 'aws:us-east-1'",
            "pick one of: aws:eu-west-1,",
        ),
        ("aws:mars", "unknown data region 'aws:mars'", "pick one of: aws:eu-west-1,"),
        ("aws", "--data-region 'aws' names a cloud, not a region", "one of aws:eu-west-1, aws:us-east-1"),
    ],
)
def test_a_data_region_the_catalog_does_not_know_is_refused_in_cloud_region_form(
    place: str,
    message: str,
    hint: str,
    sandbox: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A typo must not be planned as a faraway region: it would add egress and change the recommendation."""
    code, stderr = _main([*_PLAN_TRAIN, "--data-region", place, "--dataset-size", "2TB"], capsys, monkeypatch)
    assert code == 2
    assert stderr.startswith(f"error: {message}"), stderr
    assert hint in stderr.split("To fix: ", 1)[1], stderr


@pytest.mark.parametrize(
    ("argv", "message", "hint"),
    [
        (
            (*_ESTIMATE_TRAIN, "--sequence-parallel"),
            "--sequence-parallel needs tensor parallelism: it shards activations over the tp ranks, and --tp is 1",
            "use --tp 2 or more, or drop --sequence-parallel",
        ),
        (
            (*_ESTIMATE_TRAIN, "--gpus", "4", "--zero", "3", "--pp", "2"),
            "--zero 3 with --pp 2: ZeRO-3 gathers every stage's weights again for each micro-batch",
            "use --zero 2 or less with --pp, or --pp 1 with --zero 3",
        ),
        (
            (*_ESTIMATE_TRAIN, "--precision", "fp32", "--grad-reduce", "16-bit"),
            "a 16-bit gradient reduce needs 16-bit training, and fp32 keeps every value in fp32",
            "train in bf16, fp16 or fp8 (--precision), or reduce in fp32 (--grad-reduce auto)",
        ),
        ((*_PLAN_TRAIN, "--spot", "--no-spot"), "--spot and --no-spot contradict each other", "give only one of"),
        (("cost", "report", "--csv", "--json"), "--json and --csv contradict each other", "give only one of"),
        (("cost", "anomalies", "--json", "--csv"), "--json and --csv contradict each other", "give only one of"),
    ],
)
def test_contradicting_flags_are_refused(
    argv: tuple[str, ...],
    message: str,
    hint: str,
    sandbox: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As ``--virtual-stages`` without ``--pp`` is: the last flag typed must not silently win over the other."""
    code, stderr = _main(list(argv), capsys, monkeypatch)
    assert code == 2, stderr
    assert stderr.startswith(f"error: {message} To fix: {hint}"), stderr
    assert list(sandbox.iterdir()) == []


def test_an_unreachable_latency_is_blamed_on_the_latency(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["plan", "infer", "--model", "llama-3-8b", "--peak-rps", "10", "--max-latency", "1ms"]
    code, stderr = _main(argv, capsys, monkeypatch)
    assert code == 2
    assert "no accelerator meets the latency target of 1.0 ms: the fastest request takes" in stderr
    assert "does not fit" not in stderr and "raise --max-latency" in stderr


def test_echoed_input_is_never_read_as_markup_or_emoji(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stderr = _main(["serve", "nosuchmod.x:factory", "--port", "0"], capsys, monkeypatch)
    assert code == 2
    assert "nosuchmod.x:factory" in stderr and "\N{FACTORY}" not in stderr
    code, stderr = _main(["serve", "nosuchmod.x:[red]f", "--port", "0"], capsys, monkeypatch)
    assert code == 2 and "nosuchmod.x:[red]f" in stderr


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPUTEWISE_FAKE_GPU": ""}
    env.pop("COMPUTEWISE_DB", None)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False)


@pytest.mark.parametrize(
    "verb", [("runs",), ("runs", "show", "1"), ("cost", "report"), ("cost", "anomalies"), ("budget", "status")]
)
@pytest.mark.parametrize("where", ["missing/dir/x.db", "x.db"])
def test_reading_verbs_never_create_a_ledger(tmp_path: Path, verb: tuple[str, ...], where: str) -> None:
    done = _cli(*verb, "--db", f"sqlite:///{tmp_path / where}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"error: no ledger at {tmp_path / where}" in " ".join(done.stderr.split())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "verb",
    [("run",), ("budget", "set", "--scope", "all", "--monthly-usd", "5")],
)
def test_writing_verbs_create_a_ledger_file_but_never_its_directory(tmp_path: Path, verb: tuple[str, ...]) -> None:
    missing = tmp_path / "missing" / "dir" / "x.db"
    command = ("--", sys.executable, "-c", "pass") if verb == ("run",) else ()
    done = _cli(*verb, "--db", f"sqlite:///{missing}", *command, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    stderr = " ".join(done.stderr.split())
    assert f"the directory {missing.parent} does not exist" in stderr and f"mkdir -p {missing.parent}" in stderr
    assert list(tmp_path.iterdir()) == []
    created = tmp_path / "x.db"
    done = _cli(*verb, "--db", str(created), *command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert created.is_file()


def test_loadtest_against_a_closed_port_exits_1() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends: nothing listens there
    done = subprocess.run(
        [*CLI, "loadtest", f"http://127.0.0.1:{port}/x", "--rate", "20", "--duration", "1s", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert '"ok": 0' in done.stdout
    assert "error: no request succeeded (connect x" in " ".join(done.stderr.split())
