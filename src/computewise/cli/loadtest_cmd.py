"""``computewise loadtest URL``: open-loop load at a fixed rate, or the highest rate that meets a p99 SLO."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from computewise.cli.common import JsonOption, bounded_float, emit_json

if TYPE_CHECKING:
    from computewise.specs.loadtest import LoadResult

EXIT_NO_RATE = 1
"""--find-max found no rate within the SLO, not even the first one tried."""
EXIT_NO_ANSWER = 1
"""Not one request got a successful answer: a dead port or a refusing server is a failure, not a result."""
_PROBE_DURATION = "10s"


def loadtest(
    url: Annotated[str, typer.Argument(help="Endpoint to load, e.g. http://127.0.0.1:8000/v1/models/NAME/infer.")],
    rate: Annotated[
        float,
        typer.Option(
            parser=bounded_float("--rate"),
            help="Requests per second offered (Poisson arrivals); with --find-max, the first rate.",
        ),
    ] = 10.0,
    duration: Annotated[
        str | None,
        typer.Option(
            help="How long to offer load: 30s, 2min (default 30s). "
            f"With --find-max, the length of each probe (default {_PROBE_DURATION})."
        ),
    ] = None,
    payload: Annotated[
        Path | None,
        typer.Option(
            help="Request body: a JSON object, a JSON list of objects sent round-robin, or .jsonl with one object "
            "a line. Without it, GET requests."
        ),
    ] = None,
    timeout_s: Annotated[
        float,
        typer.Option(
            "--timeout-s",
            parser=bounded_float("--timeout-s"),
            help="Give up on a request this many seconds after its send time.",
        ),
    ] = 10.0,
    token: Annotated[str | None, typer.Option(help="Bearer token for a server started with --token.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the arrival times: the same seed, the same schedule.")] = 0,
    find_max: Annotated[
        bool, typer.Option("--find-max", help="Search the highest rate meeting --slo-p99-ms (ramp, then bisect).")
    ] = False,
    slo_p99_ms: Annotated[
        float | None,
        typer.Option(
            "--slo-p99-ms",
            parser=bounded_float("--slo-p99-ms"),
            help="p99 latency target for --find-max, in milliseconds.",
        ),
    ] = None,
    max_rate: Annotated[
        float,
        typer.Option(parser=bounded_float("--max-rate"), help="Highest rate --find-max tries, requests per second."),
    ] = 10000.0,
    repeat_ratio: Annotated[
        float,
        typer.Option(
            "--repeat-ratio",
            parser=bounded_float("--repeat-ratio"),
            help="Share of requests that repeat a body sent earlier (drawn with --seed): load for a prediction "
            "cache. The rest go through --payload in order.",
        ),
    ] = 0.0,
    as_json: JsonOption = False,
) -> None:
    """Offer Poisson-arrival load that does not slow down with the server; report latency as users see it."""

    from computewise.errors import InputError
    from computewise.report.serve import LoadProgressView, print_load_result, probe_line
    from computewise.serve.eventloop import run_fast
    from computewise.serve.loadtest import find_max_rate, load_payloads, run_load
    from computewise.specs.loadtest import LoadtestRun
    from computewise.units import parse_duration_s

    if find_max and slo_p99_ms is None:
        raise InputError("--find-max needs --slo-p99-ms", "e.g. --find-max --slo-p99-ms 100")
    if slo_p99_ms is not None and not find_max:
        raise InputError("--slo-p99-ms only applies to --find-max", "add --find-max, or drop --slo-p99-ms")
    if find_max and max_rate < rate:
        raise InputError(f"--max-rate {max_rate:g} is below --rate {rate:g}", "--rate is where the search starts")
    default_duration = "30s" if not find_max else _PROBE_DURATION
    duration_s = parse_duration_s(duration if duration is not None else default_duration, "--duration")
    payloads = load_payloads(payload) if payload is not None else []
    stderr = Console(stderr=True)
    if slo_p99_ms is not None:
        with LoadProgressView(stderr) as view:
            best, probes = find_max_rate(
                url,
                payloads,
                slo_p99_ms,
                duration_s,
                rate,
                max_rate,
                timeout_s=timeout_s,
                seed=seed,
                token=token,
                on_progress=view.update,
                on_probe=lambda result, passed: stderr.print(probe_line(result, passed), highlight=False),
                repeat_ratio=repeat_ratio,
            )
        _report_max(url, slo_p99_ms, best, probes, as_json, stderr)
        if best is None:
            sys.exit(EXIT_NO_RATE)
        return
    with LoadProgressView(stderr) as view:
        result = run_fast(
            run_load(
                url,
                payloads,
                rate,
                duration_s,
                timeout_s,
                seed=seed,
                token=token,
                on_progress=view.update,
                repeat_ratio=repeat_ratio,
            )
        )
    data = LoadtestRun(url, result).to_dict()
    if as_json:
        emit_json(data)
    else:
        print_load_result(data, Console())
    if result.ok == 0:
        kinds = ", ".join(f"{kind} x{count}" for kind, count in result.error_kinds.items()) or "all rejected"
        stderr.print(
            f"[bold red]error:[/] no request succeeded ({escape(kinds)}): is the server up at {escape(url)}?",
            highlight=False,
        )
        sys.exit(EXIT_NO_ANSWER)


def _report_max(
    url: str, slo_p99_ms: float, best: float | None, probes: list[LoadResult], as_json: bool, stderr: Console
) -> None:
    from computewise.report.serve import print_load_result, rate_spread_pairs
    from computewise.report.terminal import print_pairs
    from computewise.specs.loadtest import MaxRateSearch, Probe

    search = MaxRateSearch(url, slo_p99_ms, best, tuple(Probe(p, p.meets(slo_p99_ms)) for p in probes))
    best_probe = search.best
    if as_json:
        emit_json(search.to_dict())
    elif best_probe is not None:
        console = Console()
        console.print(f"highest rate within p99 <= {slo_p99_ms:g} ms: [bold]{best:.1f} requests/s[/]")
        print_pairs(rate_spread_pairs(search.spread.to_dict()), console)
        print_load_result({"url": url, **best_probe.to_dict()}, console)
    if best is None:
        first = probes[0].rate_rps if probes else 0.0
        stderr.print(
            f"no rate met p99 <= {slo_p99_ms:g} ms, not even {first:g} requests/s: lower --rate or raise --slo-p99-ms",
            highlight=False,
        )
