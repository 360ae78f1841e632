"""What users type for accounting: tags, --by, scopes, --alert-at, --since, webhook URLs; and UTC periods."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from accounting_runs import DAY_S, HOUR_S, NOW_S

from computewise.account.alerts import parse_webhook_url
from computewise.account.budgets import parse_alert_at
from computewise.account.periods import (
    day_start_s,
    iso_day,
    iso_utc,
    month_period,
    month_start_s,
    next_month_start_s,
    parse_later_s,
    parse_time_s,
)
from computewise.account.tags import Scope, parse_group_keys, parse_scope, parse_tag, parse_tags
from computewise.errors import InputError


def _utc(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


def test_tags_parse_and_reject_with_hints() -> None:
    assert parse_tag("team=nlp") == ("team", "nlp")
    assert parse_tag(" experiment = lr=3e-4 ") == ("experiment", "lr=3e-4")
    assert parse_tags(["team=nlp", "project=x", "team=nlp"]) == {"team": "nlp", "project": "x"}
    for bad, message in [
        ("team", "cannot read tag"),
        ("=nlp", "bad tag key"),
        ("te am=nlp", "bad tag key"),
        ("team=", "empty value"),
        ("team=a\nb", "control characters"),
    ]:
        with pytest.raises(InputError, match=message) as info:
            parse_tag(bad)
        assert info.value.hint
    with pytest.raises(InputError, match="given twice"):
        parse_tags(["team=nlp", "team=cv"])


def test_group_keys_accept_repeats_and_commas() -> None:
    assert parse_group_keys(["team", "project"]) == ("team", "project")
    assert parse_group_keys(["team,project"]) == ("team", "project")
    assert parse_group_keys([]) == ()
    with pytest.raises(InputError, match="given twice"):
        parse_group_keys(["team", "team"])
    with pytest.raises(InputError, match="bad tag key"):
        parse_group_keys(["team,"])


def test_scopes_are_canonical_and_match_every_tag() -> None:
    scope = parse_scope("team=nlp,project=x")
    assert scope == parse_scope(" project=x , team=nlp ")
    assert scope.text == "project=x,team=nlp"
    assert scope.matches({"team": "nlp", "project": "x", "user": "ana"})
    assert not scope.matches({"team": "nlp"})
    assert not scope.matches({"team": "nlp", "project": "y"})
    everything = parse_scope("ALL")
    assert everything == Scope(()) and everything.text == "all" and everything.matches({})
    for bad, message in [
        ("", "empty budget scope"),
        ("team", "cannot read"),
        ("team=nlp,", "cannot read"),
        ("team=nlp,team=cv", "twice"),
        ("team=", "empty value"),
    ]:
        with pytest.raises(InputError, match=message) as info:
            parse_scope(bad)
        assert info.value.hint


def test_alert_thresholds_are_sorted_unique_and_in_range() -> None:
    assert parse_alert_at("50,80,100") == (50.0, 80.0, 100.0)
    assert parse_alert_at("100%, 50 ,75.5") == (50.0, 75.5, 100.0)
    assert parse_alert_at([120, 90]) == (90.0, 120.0)
    assert parse_alert_at("1000") == (1000.0,)
    for bad, message in [
        ("", "no alert thresholds"),
        ("50,,80", "cannot read"),
        ("fifty", "cannot read"),
        ("0", "out of range"),
        ("-10", "out of range"),
        ("1001", "out of range"),
        ("nan", "out of range"),
        ("50,80,50", "given twice"),
    ]:
        with pytest.raises(InputError, match=message) as info:
            parse_alert_at(bad)
        assert info.value.hint


def test_since_accepts_durations_dates_and_words() -> None:
    assert parse_time_s("30d", NOW_S) == NOW_S - 30 * DAY_S
    assert parse_time_s("12h", NOW_S) == NOW_S - 12 * HOUR_S
    assert parse_time_s("2w", NOW_S) == NOW_S - 14 * DAY_S
    assert parse_time_s("today", NOW_S) == _utc(2025, 3, 20)
    assert parse_time_s("month", NOW_S) == _utc(2025, 3, 1)
    assert parse_time_s("2025-03-01", NOW_S) == _utc(2025, 3, 1)
    assert parse_time_s("2025-03-01T06:30", NOW_S) == _utc(2025, 3, 1, 6, 30)
    assert parse_time_s("2025-03-01T06:30:00+02:00", NOW_S) == _utc(2025, 3, 1, 4, 30)
    assert parse_time_s("2025-03-01T06:30:00Z", NOW_S) == _utc(2025, 3, 1, 6, 30)
    for bad in ("yesterday-ish", "30 parsecs", "-3d", "0d", "2025-02-30"):
        with pytest.raises(InputError) as info:
            parse_time_s(bad, NOW_S)
        assert info.value.hint


def test_times_outside_1970_to_9998_and_durations_over_100_years_are_refused() -> None:
    assert parse_time_s("1970-01-01", NOW_S) == 0.0
    assert parse_time_s("9998-12-31T23:59", NOW_S) == _utc(9998, 12, 31, 23, 59)
    assert parse_time_s("36500d", _utc(2075, 1, 1)) == _utc(2075, 1, 1) - 36500 * DAY_S
    for bad, what, says in [
        ("99999999d", "--since", "more than 100 years"),
        ("1e30d", "--until", "more than 100 years"),
        ("20000w", "--since", "more than 100 years"),
        ("36000d", "--since", "between 1970-01-01 and 9998-12-31"),  # 1926: before any record
        ("0001-01-01", "--since", "between 1970-01-01 and 9998-12-31"),
        ("0001-01-01T00:00+05:00", "--since", "between 1970-01-01 and 9998-12-31"),
        ("9999-12-31T23:00-12:00", "--until", "between 1970-01-01 and 9998-12-31"),
        ("1969-12-31", "--since", "between 1970-01-01 and 9998-12-31"),
    ]:
        with pytest.raises(InputError, match=says) as info:
            parse_time_s(bad, NOW_S, what)
        assert what in info.value.message and bad in info.value.message and info.value.hint


def test_a_later_moment_counts_forward_and_refuses_the_past() -> None:
    assert parse_later_s("30d", NOW_S) == NOW_S + 30 * DAY_S
    assert parse_later_s("2025-04-01", NOW_S) == _utc(2025, 4, 1)
    assert parse_later_s("2025-03-20", NOW_S) == NOW_S  # today's date: now, never hours before it
    for bad, says in [
        ("1999-01-01", "in the past"),
        ("2025-03-19T23:59Z", "in the past"),
        ("1e30d", "more than 100 years"),
        ("9999-06-01", "between 1970-01-01 and 9998-12-31"),
        ("today", "cannot read"),
        ("-3d", "cannot read"),
    ]:
        with pytest.raises(InputError, match=says) as info:
            parse_later_s(bad, NOW_S, "--as-of")
        assert "--as-of" in info.value.message and info.value.hint


def test_tag_values_cannot_hold_commas_so_every_tag_can_be_a_scope() -> None:
    with pytest.raises(InputError, match="holds a comma") as info:
        parse_tags(["team=a,b"])
    assert "team=a-b" in (info.value.hint or "")
    assert parse_scope("experiment=lr=3e-4").as_dict() == {"experiment": "lr=3e-4"}  # '=' stays allowed
    with pytest.raises(InputError, match="cannot read 'b' in scope") as info:
        parse_scope("team=a,b")
    assert "cannot hold one" in (info.value.hint or "")


def test_periods_are_utc_calendar_months_and_days() -> None:
    assert month_period(NOW_S) == "2025-03"
    assert month_start_s(NOW_S) == _utc(2025, 3, 1)
    assert next_month_start_s(NOW_S) == _utc(2025, 4, 1)
    assert next_month_start_s(_utc(2024, 12, 31, 23, 59)) == _utc(2025, 1, 1)
    assert month_start_s(_utc(2025, 3, 1)) == _utc(2025, 3, 1)
    assert day_start_s(NOW_S) == _utc(2025, 3, 20)
    assert iso_day(NOW_S) == "2025-03-20"
    assert iso_utc(NOW_S) == "2025-03-20T12:00:00Z"


def test_webhook_urls_must_be_http_with_a_host() -> None:
    assert parse_webhook_url(" https://hooks.example.com/x ") == "https://hooks.example.com/x"
    assert parse_webhook_url("http://127.0.0.1:8080/hook") == "http://127.0.0.1:8080/hook"
    for bad in ("hooks.example.com/x", "ftp://example.com", "https://", "http://exa mple.com", "file:///etc/passwd"):
        with pytest.raises(InputError, match="webhook URL") as info:
            parse_webhook_url(bad)
        assert info.value.hint
