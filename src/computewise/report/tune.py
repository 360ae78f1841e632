"""The ``tune`` report: the fastest configuration, what it beats, what the search measured, what it is worth.

Works on ``TuneResult.to_dict()`` only, so a ``--json`` file saved today renders the same
tomorrow. The trials table is built once as strings (:func:`tune_grid`); it lists the trials
best first (longest measurement, then fastest step), then the failed ones with their status,
so the reader meets the contenders before the misses. ``--json`` has every trial and every
pruned configuration.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.text import Text

from computewise.report.rows import Grid, plural
from computewise.report.table import print_table
from computewise.report.terminal import print_pairs
from computewise.units import format_bytes, format_count, format_duration, format_usd

__all__ = ["config_label", "print_tune", "tune_grid"]

MAX_TRIAL_ROWS = 12  # contenders shown; failures are always shown, the rest are one --json away
_HEADERS = ("#", "stage", "steps", "configuration", "step", "samples/s", "peak memory", "estimate", "status")
_NUMERIC = frozenset({0, 2, 4, 5, 6, 7})


def config_label(config: dict[str, Any]) -> str:
    """A configuration in a few words: precision and micro-batch, then only the switches that are on."""
    parts = [
        str(config["precision"]),
        f"micro {config['micro_batch_size']}" if config["micro_batch_size"] else "no accumulation",
    ]
    switches = (
        ("activation_checkpointing", "checkpointing"),
        ("compile", "compile"),
        ("channels_last", "channels-last"),
        ("fused_optimizer", "fused"),
        ("pin_memory", "pinned"),
    )
    parts += [label for key, label in switches if config.get(key)]
    workers = config.get("loader_workers") or 0
    if workers:
        parts.append(plural(workers, "worker"))
    return ", ".join(parts)


def _rank(trial: dict[str, Any]) -> tuple[int, float]:
    median = trial.get("median_step_s")
    return (-int(trial["steps"]), float(median) if median is not None else float("inf"))


def _ordered(d: dict[str, Any]) -> list[dict[str, Any]]:
    trials: list[dict[str, Any]] = d["trials"]
    measured = sorted((t for t in trials if t["status"] == "ok"), key=_rank)[:MAX_TRIAL_ROWS]
    failed = [t for t in trials if t["status"] != "ok"]
    return measured + failed


def _stage(trial: dict[str, Any]) -> str:
    return f"rung {trial['rung'] + 1}" if trial["stage"] == "halving" else str(trial["stage"])


def _opt_bytes(value: float | None) -> str:
    return format_bytes(value) if value is not None else ""


def _row(trial: dict[str, Any]) -> tuple[str, ...]:
    median = trial.get("median_step_s")
    samples = trial.get("samples_per_s")
    return (
        str(trial["number"]),
        _stage(trial),
        str(trial["steps"]),
        config_label(trial["config"]),
        format_duration(median) if median is not None else "",
        f"{samples:,.1f}" if samples is not None else "",
        _opt_bytes(trial.get("peak_memory_bytes")),
        _opt_bytes(trial.get("estimated_memory_bytes")),
        trial["status"],
    )


def _failure_lines(d: dict[str, Any]) -> list[str]:
    """Why each failed trial failed, first line of its message, below the table where it has room."""
    return [
        f"trial {t['number']} ({config_label(t['config'])}): {t['status']}: {(t.get('message') or '').splitlines()[0]}"
        for t in d["trials"]
        if t["status"] != "ok"
    ]


def tune_grid(d: dict[str, Any]) -> Grid:
    """The trials worth reading: the best measured ones first, then every failure."""
    # "#", steps and status stay whole; the estimate and the stage give way first on a narrow terminal.
    return Grid(
        _HEADERS, tuple(_row(trial) for trial in _ordered(d)), _NUMERIC, whole=frozenset({8}), drop_order=(7, 1)
    )


def _throughput(figures: dict[str, Any]) -> str:
    text = f"{figures['samples_per_s']:,.1f} samples/s"
    if figures.get("tokens_per_s"):
        text += f", {format_count(figures['tokens_per_s'])} tokens/s"
    return f"{text} ({format_duration(figures['median_step_s'])} a step)"


def _times(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "not measured"


def _setup(d: dict[str, Any]) -> list[tuple[str, str]]:
    model, device, search = d["model"], d["device"], d["search"]
    rungs = " -> ".join(f"{rung['candidates']} x {rung['steps']}" for rung in search["rungs"])
    eager = search["rungs"][0]["candidates"]
    tokens = f", {model['tokens_per_sample']} tokens a sample" if model.get("tokens_per_sample") else ""
    return [
        (
            "model",
            f"{model['name']}, {format_count(model['params'])} parameters, "
            f"global batch {model['global_batch_size']}{tokens}",
        ),
        ("device", f"{device['kind']}: {device['name']}, {plural(device['threads'], 'thread')}"),
        ("memory", f"{format_bytes(device['capacity_bytes'])} ({device['capacity_source']})"),
        (
            "search",
            f"{plural(search['configs'], 'configuration')}, {search['pruned']} pruned before any trial; "
            f"halving over {eager} (trials x measured steps: {rungs}, eta {search['eta']})"
            + (
                f", then torch.compile on the best {search['compile_finalists']}"
                if search.get("staged_compile")
                else ""
            ),
        ),
    ]


def _best(d: dict[str, Any]) -> list[tuple[str, str]]:
    best, speedup, mfu = d["best"], d["speedup"], d["mfu"]
    rows = [
        ("best", config_label(best["config"])),
        ("throughput", _throughput(best)),
        ("vs naive", _vs(d, d["baseline"], speedup["vs_baseline"])),
        ("vs largest batch", _vs(d, d["largest_batch"], speedup["vs_largest_batch"])),
    ]
    if best.get("mfu") is not None and mfu["peak"] is not None:
        rows.append(("MFU", f"{_percent(best['mfu'])} of {mfu['peak']['name']} ({mfu['peak']['how']})"))
    else:
        rows.append(("MFU", mfu["note"]))
    rows.append(
        (
            "memory",
            f"{_opt_bytes(best.get('peak_memory_bytes'))} measured ({best.get('peak_memory_kind')}), "
            f"{format_bytes(best['estimated_memory_bytes'])} estimated",
        )
    )
    growth = d["search"].get("growth")
    if growth is not None:
        rows.append(("micro-batch growth", _growth(growth)))
    diagnosis = d.get("diagnosis") or {}
    rows.extend(("limited by", limit) for limit in diagnosis.get("limits", ()))
    return rows


def _growth(growth: dict[str, Any]) -> str:
    """The sizes growth went through and why it stopped: ``8 -> 16 -> 32 (does-not-fit); stopped: memory model``."""
    steps = [
        f"{point['micro']}" + ("" if point["outcome"] == "measured" else f" ({point['outcome']})")
        for point in growth["points"]
    ]
    return f"{' -> '.join(steps)}; stopped: {growth['stopped']}; fastest {growth['best']}"


def _percent(fraction: float) -> str:
    """Two significant digits: a tiny model on a big chip reads 0.012 %, not 0.0 %."""
    return f"{fraction * 100:.2g} %"


def _vs(d: dict[str, Any], reference: dict[str, Any] | None, factor: float | None) -> str:
    if reference is None:
        return "not measured"
    if reference["trial"] == d["best"]["trial"]:
        return f"the same configuration ({config_label(reference['config'])})"
    return f"{_times(factor)} ({config_label(reference['config'])}: {reference['samples_per_s']:,.1f} samples/s)"


def _worth(d: dict[str, Any]) -> list[tuple[str, str]]:
    tuning = d["tuning"]
    rows = [
        (
            "tuning",
            f"{format_duration(tuning['wall_s'])} ({plural(tuning['trials'], 'trial')}, "
            f"{format_duration(tuning['trial_s'])} in trials), {format_usd(tuning['cost_usd'])} at "
            f"{format_usd(tuning['hourly_usd'])}/h",
        )
    ]
    plan = d.get("plan")
    if plan is not None:
        basis = "--run-hours" if plan["basis"] == "run-hours" else "--tokens"
        rows.append(
            (
                "planned run",
                f"{format_duration(plan['naive_hours'] * 3600)} naive ({basis}) -> "
                f"{format_duration(plan['tuned_hours'] * 3600)} tuned: "
                f"saves {format_duration(plan['saved_hours'] * 3600)}, "
                f"{format_usd(plan['saved_usd'])} ({format_usd(plan['net_saved_usd'])} after the tuning)",
            )
        )
    break_even = d.get("break_even_hours")
    if break_even is not None:
        rows.append(
            ("break-even", f"runs longer than {format_duration(break_even * 3600)} (at naive speed) repay the tuning")
        )
    elif d["baseline"] is not None:
        rows.append(("break-even", "never: the naive configuration is as fast as any tried"))
    rows.append(("price", tuning["price_explanation"]))
    return rows


def _pruned(d: dict[str, Any]) -> list[str]:
    reasons = Counter("do not fit" if item["reason"].startswith("needs ") else item["reason"] for item in d["pruned"])
    return [f"{count} x {reason}" for reason, count in reasons.most_common()]


def _print_trials(d: dict[str, Any], console: Console) -> None:
    grid = tune_grid(d)
    best = str(d["best"]["trial"])
    styles = ["bold green" if row[0] == best else "red" if row[-1] != "ok" else "" for row in grid.rows]
    print_table(grid, console, row_styles=styles)
    for line in _failure_lines(d):
        console.print(Text(line, style="red"))
    shown = len(grid.rows)
    if shown < len(d["trials"]):
        console.print(Text(f"{plural(len(d['trials']) - shown, 'more trial')} in --json", style="dim"))


def print_tune(d: dict[str, Any], console: Console) -> None:
    """Setup, the trials table, pruning and notes, then the verdict: the configuration and its worth."""
    console.print(Text(f"computewise tune: {d['entry']}", style="bold"))
    print_pairs(_setup(d), console)
    console.print()
    _print_trials(d, console)
    pruned = _pruned(d)
    if pruned:
        console.print(Text("pruned before any trial: " + "; ".join(pruned), style="dim"))
    for note in d["notes"]:
        console.print(Text(f"note: {note}", style="dim"))
    console.print()
    print_pairs(_best(d), console)
    print_pairs(_worth(d), console)
    if d.get("out"):
        console.print(Text(f"wrote the best configuration to {d['out']} (computewise.train.load_config reads it)"))
