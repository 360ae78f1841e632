"""What ``computewise loadtest URL --json`` writes and ``plan serve --loadtest`` reads, as typed values.

The load tester (``serve.loadtest``) measures; the serving planner (``plan.serve``) sits below it and
must not import it, so the document they share lives here, under both: ``serve`` builds these
values and the CLI prints their ``to_dict``; ``plan serve`` gets them back through ``read_loadtest``.

Two documents: ``LoadtestRun`` (one rate, ``loadtest --json``) and ``MaxRateSearch`` (``loadtest
--find-max --slo-p99-ms X --json``: every probe, whether it met the SLO, and the highest rate that did).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Self

from computewise.errors import InputError
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property
from computewise.specs.document import (
    require_object,
)

__all__ = ["LoadResult", "LoadtestRun", "MaxRateSearch", "Probe", "RateSpread", "read_loadtest"]

_DOCUMENT = "`computewise loadtest URL --json`"
# Both documents share one schema (docs/schemas/loadtest.schema.json): one of the two.
_LOADTEST = Document(
    "loadtest",
    "loadtest URL --json",
    "A load test: one rate (LoadtestRun, the result's fields at the top level) or --find-max (MaxRateSearch). "
    "`plan serve --loadtest` reads either.",
)
_PERCENTILE = "Over the 2xx answers; null when none came back."
_NULL_IN_OLDER = frozenset({"wall_s", "repeat_ratio"})  # read as their defaults


@dataclass(frozen=True)
class LoadResult(Jsonable):
    """What one open-loop run measured; rates are fractions of ``sent``."""

    json_description: ClassVar[str] = "What one open-loop run measured; rates are fractions of sent."

    rate_rps: float = field(metadata=json_field(minimum=0, description="The offered rate, requests per second."))
    duration_s: float = field(metadata=json_field(minimum=0))
    sent: int = field(metadata=json_field(minimum=0))
    ok: int = field(metadata=json_field(minimum=0, description="Answers with a 2xx status."))
    rejected: int = field(metadata=json_field(minimum=0, description="Answers with 429: the server shed load."))
    errors: int = field(metadata=json_field(minimum=0))
    throughput_rps: float = field(metadata=json_field(minimum=0))
    p50_ms: float | None = field(metadata=json_field(description=_PERCENTILE))
    p95_ms: float | None = field(metadata=json_field(description=_PERCENTILE))
    p99_ms: float | None = field(metadata=json_field(description=_PERCENTILE))
    max_ms: float | None = field(metadata=json_field(description=_PERCENTILE))
    error_rate: float = field(metadata=json_field(minimum=0, maximum=1))
    rejection_rate: float = field(metadata=json_field(minimum=0, maximum=1))
    wall_s: float = field(
        default=0.0,
        metadata=json_field(minimum=0, description="The run's wall time, the wait for late answers included."),
    )
    error_kinds: dict[str, int] = field(default_factory=dict)
    repeat_ratio: float = field(
        default=0.0,
        metadata=json_field(
            minimum=0, maximum=1, description="Share of the requests that repeated an earlier body (--repeat-ratio)."
        ),
    )

    def meets(self, slo_p99_ms: float, max_error_rate: float = 0.01, max_rejection_rate: float = 0.01) -> bool:
        """The server sustained this rate: p99 within the SLO, errors and rejections under their ceilings."""
        return (
            self.ok > 0
            and self.p99_ms is not None
            and self.p99_ms <= slo_p99_ms
            and self.error_rate < max_error_rate
            and self.rejection_rate < max_rejection_rate
        )

    @classmethod
    def from_dict(cls, data: object, source: str = "loadtest result") -> Self:
        """Read back; older files lack ``wall_s``, ``error_kinds`` and ``repeat_ratio``, or hold null for two."""
        data = require_object(data, _DOCUMENT, source)
        return super().from_dict({k: v for k, v in data.items() if v is not None or k not in _NULL_IN_OLDER}, source)


@dataclass(frozen=True)
class LoadtestRun(Jsonable):
    """``loadtest --json`` at one rate: the URL and what the run measured (its fields at the top level)."""

    json_document: ClassVar[Document] = _LOADTEST
    json_description: ClassVar[str] = "`loadtest --json`: one rate, the result's fields beside the URL."

    url: str
    result: LoadResult = field(metadata=json_field(inline=True))


@dataclass(frozen=True)
class Probe(Jsonable):
    """One probe of ``--find-max``: what it measured and whether that met the SLO."""

    result: LoadResult = field(metadata=json_field(inline=True))
    meets_slo: bool


@dataclass(frozen=True)
class RateSpread(Jsonable):
    """How far to trust a ``--find-max`` answer: the bracket the true capacity lies in, and the lowest rate's probes.

    ``low_rps`` met the SLO (the answer), ``high_rps`` is the lowest rate above it that missed (None:
    none did, the capacity may be higher still); the capacity lies between. ``lowest_probes`` is how
    many probes ran at the first rate (more than one: it failed and was retried) and ``lowest_passed``
    how many of them met the SLO.
    """

    json_description: ClassVar[str] = (
        "The capacity lies between low_rps (met the SLO) and high_rps (the lowest rate above it that missed; "
        "null: none did); the first rate's probes (more than one: it failed and was retried)."
    )

    low_rps: float | None
    high_rps: float | None
    lowest_probes: int = field(metadata=json_field(minimum=0))
    lowest_passed: int = field(metadata=json_field(minimum=0))

    @json_property(description="(high_rps - low_rps) / low_rps")
    def relative(self) -> float | None:
        """(high - low) / low: the width of the bracket as a share of the answer."""
        if self.low_rps is None or self.high_rps is None:
            return None
        return (self.high_rps - self.low_rps) / self.low_rps


@dataclass(frozen=True)
class MaxRateSearch(Jsonable):
    """``loadtest --find-max --json``: the highest rate within the p99 SLO (None: not even the first), every probe."""

    json_document: ClassVar[Document] = _LOADTEST
    json_description: ClassVar[str] = "`loadtest --find-max --json`: every probe and the highest rate within the SLO."
    json_layout: ClassVar[Layout] = ("url", "slo_p99_ms", "max_rate_rps", "best", "spread", "probes")

    url: str
    slo_p99_ms: float = field(metadata=json_field(exclusive_minimum=0))
    max_rate_rps: float | None = field(
        metadata=json_field(description="Highest rate that met the SLO; null when not even the first did.")
    )
    probes: tuple[Probe, ...]

    @json_property()
    def spread(self) -> RateSpread:
        """The bracket and the lowest rate's probes, read off the probes themselves."""
        first = self.probes[0].result.rate_rps if self.probes else None
        lowest = [p for p in self.probes if p.result.rate_rps == first]
        above = [p.result.rate_rps for p in self.probes if not p.meets_slo]
        if self.max_rate_rps is not None:
            above = [rate for rate in above if rate > self.max_rate_rps]
        return RateSpread(
            low_rps=self.max_rate_rps,
            high_rps=min(above, default=None),
            lowest_probes=len(lowest),
            lowest_passed=sum(p.meets_slo for p in lowest),
        )

    @json_property(description="The last probe at max_rate_rps: the measurement the capacity stands on.")
    def best(self) -> LoadResult | None:
        """The last probe run at ``max_rate_rps``: the measurement the capacity stands on."""
        return next(
            (p.result for p in reversed(self.probes) if p.meets_slo and p.result.rate_rps == self.max_rate_rps), None
        )


def read_loadtest(data: object, source: str = "loadtest result") -> LoadtestRun | MaxRateSearch:
    """Either document, told apart by ``max_rate_rps`` (only ``--find-max`` writes it)."""
    document = require_object(data, _DOCUMENT, source)
    if "max_rate_rps" in document:
        return MaxRateSearch.from_dict(document, source)
    if "throughput_rps" in document:
        return LoadtestRun.from_dict(document, source)
    raise InputError(
        f"{source}: no 'max_rate_rps' or 'throughput_rps' field; this is not a loadtest result",
        f"pass the JSON of {_DOCUMENT} or `computewise loadtest URL --find-max --slo-p99-ms X --json`",
    )
