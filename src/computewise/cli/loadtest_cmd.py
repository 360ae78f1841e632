"""``computewise loadtest URL``: open-loop load at a fixed rate, or the highest rate that meets a p99 SLO."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from computewise.cli.common import JsonOption, bounded_float, emit_json
from computewise.errors import InputError
from computewise.specs.loadtest import LoadtestRun, MaxRateSearch

if TYPE_CHECKING:
    from computewise.serve.loadtest import LoadRequest

EXIT_NO_RATE = 1
"""--find-max found no rate within the SLO, not even the first one tried."""
EXIT_NO_ANSWER = 1
"""Not one request got a successful answer: a dead port or a refusing server is a failure, not a result."""
_PROBE_DURATION = "10s"
_DEFAULT_MAX_RATE = 10000.0
# What to check when every request got one HTTP status: the usual cause of each.
_STATUS_FIXES = {
    400: 'check the --payload bodies: the server refused them as malformed (e.g. {"inputs": [...]})',
    401: "give the server's token with --token (a server started with --token refuses requests without it)",
    403: "give the server's token with --token, and check that it is the right one",
    404: "check the URL: the model name and path (GET /v1/models on the server lists what it serves)",
    405: "check the method: without --payload the load test sends GET; give --payload FILE to POST",
    413: "send smaller --payload bodies, or start the server with a larger --max-body-bytes",
    422: "check the --payload bodies: the server read them but refused the inputs (the message names the field)",
}

# The flags, one type each, so the verb's signature reads in a screen.
_Url = Annotated[str, typer.Argument(help="Endpoint to load, e.g. http://127.0.0.1:8000/v1/models/NAME/infer.")]
_Rate = Annotated[
    float,
    typer.Option(
        parser=bounded_float("--rate"),
        help="Requests per second offered (Poisson arrivals); with --find-max, the first rate.",
    ),
]
_Duration = Annotated[
    str | None,
    typer.Option(
        help="How long to offer load: 30s, 2min (default 30s). "
        f"With --find-max, the length of each probe (default {_PROBE_DURATION})."
    ),
]
_Payload = Annotated[
    Path | None,
    typer.Option(
        help="Request body: a JSON object, a JSON list of objects sent round-robin, or .jsonl with one object "
        "a line. Without it, GET requests."
    ),
]
_TimeoutS = Annotated[
    float,
    typer.Option(
        "--timeout-s",
        parser=bounded_float("--timeout-s"),
        help="Give up on a request this many seconds after its send time.",
    ),
]
_Token = Annotated[str | None, typer.Option(help="Bearer token for a server started with --token.")]
_Seed = Annotated[int, typer.Option(help="Seed of the arrival times: the same seed, the same schedule.")]
_FindMax = Annotated[
    bool, typer.Option("--find-max", help="Search the highest rate meeting --slo-p99-ms (ramp, then bisect).")
]
_SloP99Ms = Annotated[
    float | None,
    typer.Option(
        "--slo-p99-ms",
        parser=bounded_float("--slo-p99-ms"),
        help="p99 latency target for --find-max, in milliseconds.",
    ),
]
_MaxRate = Annotated[
    float | None,
    typer.Option(
        parser=bounded_float("--max-rate"),
        help=f"Highest rate --find-max tries, requests per second (default {_DEFAULT_MAX_RATE:g}).",
    ),
]
_RepeatRatio = Annotated[
    float,
    typer.Option(
        "--repeat-ratio",
        parser=bounded_float("--repeat-ratio"),
        help="Share of requests that repeat a body sent earlier (drawn with --seed): load for a prediction "
        "cache. The rest go through --payload in order.",
    ),
]


def loadtest(
    url: _Url,
    rate: _Rate = 10.0,
    duration: _Duration = None,
    payload: _Payload = None,
    timeout_s: _TimeoutS = 10.0,
    token: _Token = None,
    seed: _Seed = 0,
    find_max: _FindMax = False,
    slo_p99_ms: _SloP99Ms = None,
    max_rate: _MaxRate = None,
    repeat_ratio: _RepeatRatio = 0.0,
    as_json: JsonOption = False,
) -> None:
    """Offer Poisson-arrival load that does not slow down with the server; report latency as users see it."""
    from computewise.report.serve import LoadProgressView, probe_line
    from computewise.serve.loadtest import load_test

    request = _request(url, rate, duration, payload, timeout_s, token, seed, find_max, slo_p99_ms, max_rate,
                       repeat_ratio)  # fmt: skip
    stderr = Console(stderr=True)
    with LoadProgressView(stderr) as view:
        result = load_test(
            request, view.update, lambda probe, passed: stderr.print(probe_line(probe, passed), highlight=False)
        )
    if isinstance(result, MaxRateSearch):
        _report_max(result, as_json, stderr)
    else:
        _report_run(result, as_json, stderr)


def _request(
    url: str,
    rate: float,
    duration: str | None,
    payload: Path | None,
    timeout_s: float,
    token: str | None,
    seed: int,
    find_max: bool,
    slo_p99_ms: float | None,
    max_rate: float | None,
    repeat_ratio: float,
) -> LoadRequest:
    """The flags as a typed request; --find-max and --slo-p99-ms go together, and the search starts at --rate."""
    from computewise.serve.loadtest import LoadRequest, load_payloads
    from computewise.units import parse_duration_s

    if find_max and slo_p99_ms is None:
        raise InputError("--find-max needs --slo-p99-ms", "e.g. --find-max --slo-p99-ms 100")
    if slo_p99_ms is not None and not find_max:
        raise InputError("--slo-p99-ms only applies to --find-max", "add --find-max, or drop --slo-p99-ms")
    if max_rate is not None and not find_max:
        raise InputError("--max-rate only applies to --find-max", "add --find-max, or drop --max-rate")
    if repeat_ratio > 0 and payload is None:
        raise InputError(
            "--repeat-ratio needs --payload: without it every request is the same GET, so repeats mean nothing",
            "give --payload FILE with the bodies to send, or drop --repeat-ratio",
        )
    max_rate = _DEFAULT_MAX_RATE if max_rate is None else max_rate
    if find_max and max_rate < rate:
        raise InputError(f"--max-rate {max_rate:g} is below --rate {rate:g}", "--rate is where the search starts")
    default_duration = "30s" if not find_max else _PROBE_DURATION
    duration_s = parse_duration_s(duration if duration is not None else default_duration, "--duration")
    payloads = load_payloads(payload) if payload is not None else []
    return LoadRequest(url, payloads, rate, duration_s, timeout_s, token, seed, repeat_ratio, slo_p99_ms, max_rate)


def _report_run(run: LoadtestRun, as_json: bool, stderr: Console) -> None:
    """One run's document or table; exit 1 when not one request was answered."""
    from computewise.report.serve import print_load_result

    if as_json:
        emit_json(run.to_dict())
    else:
        print_load_result(run, Console())
    result = run.result
    if result.ok == 0:
        kinds = ", ".join(f"{kind} x{count}" for kind, count in result.error_kinds.items()) or "all rejected"
        stderr.print(f"[bold red]error:[/] no request succeeded ({escape(kinds)})", highlight=False, soft_wrap=True)
        hint = _no_answer_hint(result.error_kinds, result.rejected, run.url)
        stderr.print(f"[bold]To fix:[/] {escape(hint)}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_NO_ANSWER)


def _no_answer_hint(error_kinds: dict[str, int], rejected: int, url: str) -> str:
    """What to do when nothing succeeded, from how the requests failed.

    A server that answered every request with a status is up: asking whether it is would send the user
    to the wrong place. Each status seen gets its own fix; only failures without one (a refused connection,
    a timeout) point at the server itself.
    """
    statuses = sorted(int(kind.split()[1]) for kind in error_kinds if kind.startswith("http ") and kind[5:].isdigit())
    fixes = [f"HTTP {status}: {_STATUS_FIXES.get(status, 'see the server log for why')}" for status in statuses]
    if rejected and not error_kinds:
        fixes.append("HTTP 429: the server shed every request as overloaded; lower --rate")
    if len(statuses) < len(error_kinds) or not fixes:
        fixes.append(f"check that the server is up at {url} (start it, or fix the host and port)")
    return "; ".join(fixes)


def _report_max(search: MaxRateSearch, as_json: bool, stderr: Console) -> None:
    """The search's document, or the highest rate, its bracket and its probe; exit 1 when no rate met the SLO."""
    from computewise.report.serve import print_load_result, rate_spread_pairs
    from computewise.report.terminal import print_pairs

    best_probe = search.best
    if as_json:
        emit_json(search.to_dict())
    elif best_probe is not None:
        console = Console()
        console.print(
            f"highest rate within p99 <= {search.slo_p99_ms:g} ms: [bold]{search.max_rate_rps:.1f} requests/s[/]"
        )
        print_pairs(rate_spread_pairs(search.spread), console)
        print_load_result(LoadtestRun(search.url, best_probe), console)
    if search.max_rate_rps is None:
        first = search.probes[0].result.rate_rps if search.probes else 0.0
        stderr.print(
            f"no rate met p99 <= {search.slo_p99_ms:g} ms, not even {first:g} requests/s: lower --rate or raise "
            "--slo-p99-ms",
            highlight=False,
        )
        sys.exit(EXIT_NO_RATE)
