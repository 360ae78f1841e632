"""Spend anomalies: a day whose spend is far above what the trailing days make normal, flagged that same day.

Each day is scored against the days before it with a robust z-score (Iglewicz and Hoaglin, "How to
Detect and Handle Outliers", 1993: the modified z-score 0.6745 (x - median) / MAD, outlier above 3.5),
taken on the logarithm of spend because spend varies by factors, not by dollars::

    y_j       = ln(spend_j + $1)                      the $1 keeps cents and empty days from looking like surges
    history   = y over the ``window`` days before day i (14), weekend offset removed when known
    expected  = median(history) + weekend offset of day i
    scale     = max(MAD(history), rel_floor x (1 + 3 / n))            n = days of history, rel_floor = 0.1
    score     = 0.6745 x (y_i - expected) / scale;   flagged when score > threshold (3.5)

Why log: day-to-day noise in dollars is right-skewed (a busy day is +50 %, a quiet one never -150 %), so
a dollar MAD understates the upside and ordinary busy days score as surges; on log-dollars the noise
is symmetric and a score means the same for a $50/day and a $5,000/day team.

Why the floor: with a few days of history, or a flat one, the MAD is zero or tiny and every wobble
would look infinite. The floor says what is never a surge however calm the history, and it widens
while the median itself rests on few days: with 14, 3, 2 or 1 days of history a day must exceed
1.9x, 2.8x, 3.7x or 7.9x its expected spend (e^(3.5 / 0.6745 x floor)). So a 10x surge on the second
day of a group's history is flagged that day, and ordinary noise is not.

Why the weekend offset: ML spend dips at weekends. When the weekday of the first day is given and the
last 28 days hold at least two workdays and two weekend days (UTC Saturday, Sunday), each class's
offset is its median minus the overall median; days are compared after removing it, so a surge on
a quiet Sunday is judged against Sundays. Two classes rather than seven weekdays: four samples per
weekday make offsets noisy enough to double the false alarms. Only rises are flagged: a drop in
spend is not a cost risk.

``detect`` is a pure function on a daily series; ``spend_anomalies`` builds daily spend per tag group
from the ledger (accrual, ``account.spend``; a group's history starts on its first day with spend,
so a new team is not a surge) and scores every day since ``since_s``. Today counts with its spend so
far, not extrapolated: a surge shows as soon as it has cost more than the threshold allows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar

from computewise.account.periods import DAY_S, day_start_s, iso_day, iso_utc
from computewise.account.spend import PricedRun, overlapping, priced_runs
from computewise.account.tags import NO_TAG, TagGroup, parse_group_keys
from computewise.errors import InputError
from computewise.ledger import Ledger
from computewise.specs.codec import Document, Jsonable, Layout, json_field, json_property

__all__ = ["Anomaly", "AnomalyReport", "GroupSpend", "SpendAnomaly", "detect", "history_start_s", "spend_anomalies"]

_MAD_TO_Z = 0.6745  # the MAD of a normal distribution is 0.6745 standard deviations
_SHORT_HISTORY_DAYS = 3.0  # the floor widens by (1 + 3 / n) while the history holds n days
_PROFILE_WINDOWS = 2  # weekend offsets look back two windows (28 days)
_MIN_PER_CLASS = 2


@dataclass(frozen=True)
class Anomaly:
    """Day ``index`` of a series: its spend, the spend expected from its history, and the robust score."""

    index: int
    value: float
    expected: float
    score: float


def detect(
    series: Sequence[float],
    *,
    weekday0: int | None = None,
    window: int = 14,
    threshold: float = 3.5,
    rel_floor: float = 0.1,
    abs_floor_usd: float = 1.0,
) -> list[Anomaly]:
    """Days of ``series`` (daily spend in USD, consecutive days, oldest first) scored above ``threshold``.

    Day 0 has no history and is never flagged. ``weekday0`` is the weekday of ``series[0]``
    (0 = Monday, as ``datetime.weekday``); None leaves out the weekend offset. Formulas: module docstring.
    """
    if window < 1 or not threshold > 0 or not rel_floor >= 0 or not abs_floor_usd > 0:
        raise InputError(
            f"anomaly settings out of range (window {window} days, threshold {threshold})",
            "use a window of at least 1 day and a positive threshold (defaults: 14 days, 3.5)",
        )
    if any(not math.isfinite(v) or v < 0 for v in series):
        raise ValueError("daily spend must be finite and non-negative")
    logs = [math.log(v + abs_floor_usd) for v in series]
    weekend = None if weekday0 is None else [(weekday0 + k) % 7 >= 5 for k in range(len(logs))]
    found = []
    for i in range(1, len(logs)):
        offsets = _weekend_offsets(logs, weekend, i, window)
        history = [logs[j] - offsets[_cls(weekend, j)] for j in range(max(0, i - window), i)]
        median = statistics.median(history)
        mad = statistics.median(abs(v - median) for v in history)
        expected = median + offsets[_cls(weekend, i)]
        scale = max(mad, rel_floor * (1.0 + _SHORT_HISTORY_DAYS / len(history)))
        score = _MAD_TO_Z * (logs[i] - expected) / scale
        if score > threshold:
            expected_usd = max(0.0, math.exp(expected) - abs_floor_usd)
            found.append(Anomaly(index=i, value=float(series[i]), expected=expected_usd, score=score))
    return found


def _cls(weekend: list[bool] | None, j: int) -> int:
    return int(weekend is not None and weekend[j])


def _weekend_offsets(logs: Sequence[float], weekend: list[bool] | None, i: int, window: int) -> tuple[float, float]:
    """(workday, weekend) offsets from the last ``2 x window`` days; zeros until both classes have two days."""
    if weekend is None:
        return (0.0, 0.0)
    start = max(0, i - _PROFILE_WINDOWS * window)
    classes: tuple[list[float], list[float]] = ([], [])
    for j in range(start, i):
        classes[int(weekend[j])].append(logs[j])
    if min(len(c) for c in classes) < _MIN_PER_CLASS:
        return (0.0, 0.0)
    overall = statistics.median(logs[start:i])
    return (statistics.median(classes[0]) - overall, statistics.median(classes[1]) - overall)


@dataclass(frozen=True)
class SpendAnomaly(TagGroup, Jsonable):
    """A flagged day of one group's spend."""

    json_description: ClassVar[str] = "A day of one group's spend far above what its trailing days make normal."
    json_layout: ClassVar[Layout] = ("labels", "day", "day_start_s", "spend_usd", "expected_usd", "score", "ratio")

    group: tuple[tuple[str, str], ...]
    day_start_s: float
    spend_usd: float = field(metadata=json_field(description="The day's accrued spend, in US dollars."))
    expected_usd: float = field(metadata=json_field(description="The spend the trailing window makes normal."))
    score: float = field(metadata=json_field(description="The robust z-score; flagged above the threshold."))

    @json_property(description="The day's spend over the expected one; null when nothing was expected.")
    def ratio(self) -> float | None:
        return self.spend_usd / self.expected_usd if self.expected_usd > 0 else None

    @json_property(description="The day, YYYY-MM-DD (UTC).")
    def day(self) -> str:
        return iso_day(self.day_start_s)


@dataclass(frozen=True)
class GroupSpend(TagGroup, Jsonable):
    """One group's spend per day, oldest first (the report's ``days``)."""

    json_layout: ClassVar[Layout] = ("labels", "daily_usd")

    group: tuple[tuple[str, str], ...]
    daily_usd: tuple[float, ...]


@dataclass(frozen=True)
class AnomalyReport(Jsonable):
    """Daily spend per group from ``first_day_s`` to today, and the anomalies found since ``since_s``."""

    json_document: ClassVar[Document] = Document(
        "cost-anomalies",
        "cost anomalies --json",
        "Each group's spend per day and the days whose spend jumps above the group's recent normal "
        "(account.anomalies.AnomalyReport): robust z-scores on the median and MAD of a trailing window.",
    )
    json_layout: ClassVar[Layout] = (
        "by", "since", "since_s", "now_s", "window", "threshold", "method", "days", "group_spend", "anomalies",
    )  # fmt: skip

    by: tuple[str, ...] = field(metadata=json_field(description="The tag keys grouped by; empty: all runs as one."))
    since_s: float = field(metadata=json_field(description="Start of the days reported, Unix seconds (UTC)."))
    now_s: float = field(metadata=json_field(description="When the report was made, Unix seconds."))
    window: int = field(
        metadata=json_field(name="window_days", description="Trailing days each day is judged against.", minimum=1)
    )
    threshold: float = field(metadata=json_field(description="The robust z-score above which a day is flagged."))
    first_day_s: float  # not written: ``days`` names each day
    series: tuple[tuple[tuple[tuple[str, str], ...], tuple[float, ...]], ...]  # written as ``group_spend``
    anomalies: tuple[SpendAnomaly, ...]

    @json_property(description="since_s in ISO 8601 UTC: anomalies are those of the days since then.")
    def since(self) -> str:
        return iso_utc(self.since_s)

    @json_property()
    def method(self) -> str:
        """How a day is scored (the module docstring)."""
        return (
            "robust z = 0.6745 (ln(spend + $1) - expected) / max(MAD, floor) over the trailing window, "
            "weekend offset removed"
        )

    @json_property(description="The days of every series' daily_usd, YYYY-MM-DD (UTC), oldest first.")
    def days(self) -> list[str]:
        count = len(self.series[0][1]) if self.series else 0
        return [iso_day(self.first_day_s + k * DAY_S) for k in range(count)]

    @json_property(name="series", description="Each group's spend per day, groups sorted by their tag values.")
    def group_spend(self) -> tuple[GroupSpend, ...]:
        return tuple(GroupSpend(group, daily) for group, daily in self.series)

    def csv_rows(self) -> list[list[str]]:
        """A header then one row per anomaly."""
        keys = list(self.by) or ["group"]
        out = [[*keys, "day", "spend_usd", "expected_usd", "score"]]
        for a in self.anomalies:
            labels = [dict(a.group).get(k, NO_TAG) for k in self.by] if self.by else ["all"]
            out.append(
                [*labels, iso_day(a.day_start_s), f"{a.spend_usd:.2f}", f"{a.expected_usd:.2f}", f"{a.score:.2f}"]
            )
        return out


def spend_anomalies(
    ledger: Ledger,
    by: Sequence[str],
    since_s: float | None,
    now_s: float,
    *,
    window: int = 14,
    threshold: float = 3.5,
    already_priced: Sequence[PricedRun] | None = None,
) -> AnomalyReport:
    """Anomalous days since ``since_s`` (default: the last 30 days) in each ``by`` group's daily spend.

    ``already_priced``: runs priced (``priced_runs``) over a window that starts at or before
    ``history_start_s(since_s, now_s, window)``, from a page that prices once for several views.
    """
    keys = parse_group_keys(by)
    since = now_s - 30 * DAY_S if since_s is None else min(since_s, now_s)
    first_day_s = history_start_s(since_s, now_s, window)
    days = math.floor((now_s - first_day_s) / DAY_S) + 1
    spend: dict[tuple[tuple[str, str], ...], list[float]] = {}
    if already_priced is None:
        runs = priced_runs(ledger, first_day_s, now_s, now_s)
    else:
        runs = overlapping(already_priced, first_day_s, now_s)
    for priced in runs:
        group = tuple((key, priced.run.tags.get(key, NO_TAG)) for key in keys)
        daily = spend.setdefault(group, [0.0] * days)
        first = max(0, math.floor((priced.run.started_at_s - first_day_s) / DAY_S))
        last = min(days - 1, math.floor((priced.end_s - first_day_s) / DAY_S))
        for k in range(first, last + 1):
            day_from_s = first_day_s + k * DAY_S
            daily[k] += priced.cost.cost_usd * priced.share(day_from_s, day_from_s + DAY_S)
    found: list[SpendAnomaly] = []
    for group, daily in spend.items():
        start = next((k for k, v in enumerate(daily) if v > 0), len(daily))
        for anomaly in detect(
            daily[start:], weekday0=_weekday(first_day_s + start * DAY_S), window=window, threshold=threshold
        ):
            day_s = first_day_s + (start + anomaly.index) * DAY_S
            if day_s + DAY_S > since:
                found.append(SpendAnomaly(group, day_s, anomaly.value, anomaly.expected, anomaly.score))
    found.sort(key=lambda a: (a.day_start_s, -a.score))
    return AnomalyReport(
        by=keys,
        since_s=since,
        now_s=now_s,
        window=window,
        threshold=threshold,
        first_day_s=first_day_s,
        series=tuple(sorted((group, tuple(daily)) for group, daily in spend.items())),
        anomalies=tuple(found),
    )


def history_start_s(since_s: float | None, now_s: float, window: int = 14) -> float:
    """The first day ``spend_anomalies`` reads: two windows before the first day it scores (weekend offsets)."""
    since = now_s - 30 * DAY_S if since_s is None else min(since_s, now_s)
    return day_start_s(since) - _PROFILE_WINDOWS * window * DAY_S


def _weekday(t_s: float) -> int:
    return datetime.fromtimestamp(t_s, UTC).weekday()
