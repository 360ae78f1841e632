"""The ``tune`` report: the fastest configuration, what it beats, what the search measured, what it is worth.

Reads the typed ``TuneResult`` (``--json`` is its ``to_dict``, written by the CLI). The trials table is
built once as strings (:func:`tune_grid`); it lists the trials best first (longest measurement, then
fastest step), then the failed ones with their status, so the reader meets the contenders before the
misses. A LoRA rank search adds a table of the ranks (throughput, memory, price, quality, verdict).
``--json`` has every trial and every pruned configuration.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from computewise.report.rows import Grid, plural
from computewise.report.table import print_table
from computewise.report.terminal import print_pairs
from computewise.train.config import TrainConfig
from computewise.tune.growth import Growth
from computewise.tune.ranks import RankSearch
from computewise.tune.savings import Measured
from computewise.tune.search import TrialRecord, TuneResult
from computewise.units import format_bytes, format_count, format_duration, format_usd

__all__ = ["config_label", "print_tune", "rank_grid", "tune_grid"]

MAX_TRIAL_ROWS = 12  # contenders shown; failures are always shown, the rest are one --json away
_HEADERS = ("#", "stage", "steps", "configuration", "step", "samples/s", "peak memory", "estimate", "status")
_NUMERIC = frozenset({0, 2, 4, 5, 6, 7})
_RANK_HEADERS = (
    "rank",
    "trial",
    "samples/s",
    "tokens/s",
    "peak memory",
    "estimate",
    "$ / 1M tokens",
    "quality",
    "verdict",
)


def config_label(config: TrainConfig) -> str:
    """A configuration in a few words: precision and micro-batch, then only the switches that are on."""
    parts = [
        str(config.precision),
        f"micro {config.micro_batch_size}" if config.micro_batch_size else "no accumulation",
    ]
    switches = (
        (config.activation_checkpointing, "checkpointing"),
        (config.compile, "compile"),
        (config.channels_last, "channels-last"),
        (config.fused_optimizer, "fused"),
        (config.pin_memory, "pinned"),
    )
    parts += [label for on, label in switches if on]
    if config.loader_workers:
        parts.append(plural(config.loader_workers, "worker"))
    return ", ".join(parts)


def _trial_label(trial: TrialRecord) -> str:
    """The configuration, after the LoRA rank it trained in a rank search."""
    label = config_label(trial.config)
    return label if trial.lora_rank is None else f"rank {trial.lora_rank}, {label}"


def _rank(trial: TrialRecord) -> tuple[int, float]:
    median = trial.result.median_step_s
    return (-trial.steps, median if median is not None else float("inf"))


def _ordered(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    measured = sorted((t for t in trials if t.result.status == "ok"), key=_rank)[:MAX_TRIAL_ROWS]
    failed = [t for t in trials if t.result.status != "ok"]
    return measured + failed


def _stage(trial: TrialRecord) -> str:
    return f"rung {(trial.rung or 0) + 1}" if trial.stage == "halving" else str(trial.stage)


def _opt_bytes(value: float | None) -> str:
    return format_bytes(value) if value is not None else ""


def _opt_rate(value: float | None) -> str:
    return f"{value:,.1f}" if value is not None else ""


def _row(trial: TrialRecord) -> tuple[str, ...]:
    median = trial.result.median_step_s
    return (
        str(trial.number),
        _stage(trial),
        str(trial.steps),
        _trial_label(trial),
        format_duration(median) if median is not None else "",
        _opt_rate(trial.result.samples_per_s),
        _opt_bytes(trial.result.peak_memory_bytes),
        _opt_bytes(trial.estimate.total_bytes),
        trial.result.status,
    )


def _failure_lines(trials: Sequence[TrialRecord]) -> list[str]:
    """Why each failed trial failed, first line of its message, below the table where it has room."""
    return [
        f"trial {t.number} ({_trial_label(t)}): {t.result.status}: {(t.result.message or '').splitlines()[0]}"
        for t in trials
        if t.result.status != "ok"
    ]


def tune_grid(trials: Sequence[TrialRecord]) -> Grid:
    """The trials worth reading: the best measured ones first, then every failure."""
    # "#", steps and status stay whole; the estimate and the stage give way first on a narrow terminal.
    return Grid(
        _HEADERS, tuple(_row(trial) for trial in _ordered(trials)), _NUMERIC, whole=frozenset({8}), drop_order=(7, 1)
    )


def rank_grid(search: RankSearch) -> Grid:
    """Each LoRA rank's fastest trial, its price per million tokens, its quality and why it was (not) picked."""
    rows = []
    for outcome in search.outcomes:
        m = outcome.measured
        usd = outcome.usd_per_million_tokens
        rows.append(
            (
                str(m.rank),
                str(m.trial) if m.trial is not None else "",
                _opt_rate(m.samples_per_s),
                format_count(m.tokens_per_s) if m.tokens_per_s else "",
                _opt_bytes(m.peak_memory_bytes),
                _opt_bytes(m.estimated_memory_bytes),
                format_usd(usd) if usd is not None else "",
                f"{m.quality:.4g}" if m.quality is not None else "",
                outcome.verdict,
            )
        )
    return Grid(_RANK_HEADERS, tuple(rows), frozenset({0, 1, 2, 3, 4, 5, 6, 7}), drop_order=(5, 1, 3))


def _throughput(figures: Measured) -> str:
    text = f"{figures.samples_per_s or 0.0:,.1f} samples/s"
    if figures.tokens_per_s:
        text += f", {format_count(figures.tokens_per_s)} tokens/s"
    return f"{text} ({format_duration(figures.median_step_s or 0.0)} a step)"


def _times(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "not measured"


def _setup(result: TuneResult) -> list[tuple[str, str]]:
    model, capacity, rungs = result.profile, result.capacity, result.rungs
    options = result.options
    steps = " -> ".join(f"{rung.candidates} x {rung.steps}" for rung in rungs)
    tokens = f", {model.tokens_per_sample} tokens a sample" if model.tokens_per_sample else ""
    configs = len(result.pruning.kept) + len(result.pruning.dropped)
    return [
        (
            "model",
            f"{model.name}, {format_count(model.params)} parameters, global batch {model.global_batch_size}{tokens}",
        ),
        ("device", f"{result.device}: {result.device_name}, {plural(result.threads, 'thread')}"),
        ("memory", f"{format_bytes(capacity.bytes)} ({capacity.source})"),
        (
            "search",
            f"{plural(configs, 'configuration')}, {len(result.pruning.dropped)} pruned before any trial; "
            f"halving over {rungs[0].candidates} (trials x measured steps: {steps}, eta {options.eta})"
            + (f", then torch.compile on the best {options.compile_finalists}" if result.staged_compile else ""),
        ),
    ]


def _best(result: TuneResult) -> list[tuple[str, str]]:
    worth = result.worth
    best = worth.best
    rows = [
        ("best", config_label(best.config)),
        ("throughput", _throughput(best)),
        ("vs naive", _vs(best, worth.baseline, worth.speedup_vs_baseline)),
        ("vs largest batch", _vs(best, worth.largest_batch, worth.speedup_vs_largest_batch)),
    ]
    if best.mfu is not None and result.peak is not None:
        accelerator, how = result.peak
        rows.append(("MFU", f"{_percent(best.mfu)} of {accelerator.name} ({how})"))
    else:
        rows.append(("MFU", result.mfu_note))
    rows.append(
        (
            "memory",
            f"{_opt_bytes(best.peak_memory_bytes)} measured ({best.peak_memory_kind}), "
            f"{format_bytes(best.estimated_memory_bytes)} estimated",
        )
    )
    if result.growth is not None:
        rows.append(("micro-batch growth", _growth(result.growth)))
    if result.diagnosis is not None:
        rows.extend(("limited by", limit) for limit in result.diagnosis.limits)
    if result.lora is not None:
        rows.append(("LoRA rank", _rank_choice(result.lora)))
    return rows


def _rank_choice(search: RankSearch) -> str:
    """The rank picked and the rule that picked it, so a small rank is never a silent default."""
    return (
        f"{search.picked}: the cheapest of {plural(len(search.outcomes), 'rank')} whose quality is within "
        f"{search.tolerance:.1%} of rank {search.reference}'s ({search.metric}, "
        f"{'higher' if search.higher_is_better else 'lower'} is better)"
    )


def _growth(growth: Growth) -> str:
    """The sizes growth went through and why it stopped: ``8 -> 16 -> 32 (does-not-fit); stopped: memory model``."""
    steps = [
        f"{point.micro}" + ("" if point.outcome == "measured" else f" ({point.outcome})") for point in growth.points
    ]
    return f"{' -> '.join(steps)}; stopped: {growth.stopped}; fastest {growth.best}"


def _percent(fraction: float) -> str:
    """Two significant digits: a tiny model on a big chip reads 0.012 %, not 0.0 %."""
    return f"{fraction * 100:.2g} %"


def _vs(best: Measured, reference: Measured | None, factor: float | None) -> str:
    if reference is None:
        return "not measured"
    if reference.trial == best.trial:
        return f"the same configuration ({config_label(reference.config)})"
    return f"{_times(factor)} ({config_label(reference.config)}: {reference.samples_per_s or 0.0:,.1f} samples/s)"


def _worth(result: TuneResult) -> list[tuple[str, str]]:
    worth, price = result.worth, result.price
    rows = [
        (
            "tuning",
            f"{format_duration(result.wall_s)} ({plural(len(result.trials), 'trial')}, "
            f"{format_duration(result.trial_s)} in trials), {format_usd(worth.tuning_cost_usd)} at "
            f"{format_usd(price.hourly_usd)}/h",
        )
    ]
    plan = worth.plan
    if plan is not None:
        basis = "--run-hours" if plan.basis == "run-hours" else "--tokens"
        rows.append(
            (
                "planned run",
                f"{format_duration(plan.naive_hours * 3600)} naive ({basis}) -> "
                f"{format_duration(plan.tuned_hours * 3600)} tuned: "
                f"saves {format_duration(plan.saved_hours * 3600)}, "
                f"{format_usd(plan.saved_usd)} ({format_usd(plan.net_saved_usd)} after the tuning)",
            )
        )
    if worth.break_even_hours is not None:
        rows.append(
            (
                "break-even",
                f"runs longer than {format_duration(worth.break_even_hours * 3600)} (at naive speed) repay the tuning",
            )
        )
    elif worth.baseline is not None:
        rows.append(("break-even", "never: the naive configuration is as fast as any tried"))
    rows.append(("price", price.explanation))
    return rows


def _pruned(result: TuneResult) -> list[str]:
    reasons = Counter("do not fit" if why.startswith("needs ") else why for _, _, why in result.pruning.dropped)
    return [f"{count} x {reason}" for reason, count in reasons.most_common()]


def _print_trials(result: TuneResult, console: Console) -> None:
    grid = tune_grid(result.trials)
    best = str(result.best.number)
    styles = ["bold green" if row[0] == best else "red" if row[-1] != "ok" else "" for row in grid.rows]
    print_table(grid, console, row_styles=styles)
    for line in _failure_lines(result.trials):
        console.print(Text(line, style="red"))
    shown = len(grid.rows)
    if shown < len(result.trials):
        console.print(Text(f"{plural(len(result.trials) - shown, 'more trial')} in --json", style="dim"))


def _print_ranks(search: RankSearch, console: Console) -> None:
    grid = rank_grid(search)
    picked = str(search.picked)
    print_table(grid, console, row_styles=["bold green" if row[0] == picked else "" for row in grid.rows])


def print_tune(result: TuneResult, console: Console) -> None:
    """Setup, the trials (and ranks) tables, pruning and notes, then the verdict: the configuration and its worth."""
    console.print(Text(f"computewise tune: {result.entry}", style="bold"))
    print_pairs(_setup(result), console)
    console.print()
    _print_trials(result, console)
    if result.lora is not None:
        console.print()
        _print_ranks(result.lora, console)
    pruned = _pruned(result)
    if pruned:
        console.print(Text("pruned before any trial: " + "; ".join(pruned), style="dim"))
    for note in result.notes:
        console.print(Text(f"note: {note}", style="dim"))
    console.print()
    print_pairs(_best(result), console)
    print_pairs(_worth(result), console)
    if result.options.out is not None:
        console.print(
            Text(f"wrote the best configuration to {result.options.out} (computewise.train.load_config reads it)")
        )
