"""``units``: human quantities read in one place and written back, and refused with the reason.

Expected values are written out as literals (16 GB = 16,000,000,000 bytes, 16 GiB = 17,179,869,184
bytes), not computed from the module's own constants, so a wrong constant fails here.
"""

from __future__ import annotations

import pytest

from computewise import limits
from computewise.errors import InputError
from computewise.units import (
    GB,
    GIB,
    check_range,
    describe_range,
    format_bytes,
    format_count,
    format_duration,
    format_usd,
    parse_bytes,
    parse_count,
    parse_duration_s,
    parse_flag_number,
    parse_positive_int,
    parse_usd,
    plural,
)

# -- bytes: decimal GB and binary GiB kept apart ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "n_bytes"),
    [
        ("16GB", 16_000_000_000),
        ("16 GiB", 17_179_869_184),
        ("16gib", 17_179_869_184),  # units are case-blind
        (" 16 GB ", 16_000_000_000),
        ("512MB", 512_000_000),
        ("512MiB", 536_870_912),
        ("1.5TiB", 1_649_267_441_664),
        ("2TB", 2_000_000_000_000),
        ("64kB", 64_000),
        ("2e9", 2_000_000_000),
        ("4096", 4096),
    ],
)
def test_memory_amounts_keep_decimal_and_binary_units_apart(text: str, n_bytes: int) -> None:
    assert parse_bytes(text) == n_bytes


def test_the_unit_constants_are_the_si_and_iec_ones() -> None:
    assert (GB, GIB) == (1_000_000_000, 1_073_741_824)


_WRITE_MEMORY = "write it like 16GB, 24GiB or 512MB"


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("lots", "cannot read an amount of memory 'lots'", _WRITE_MEMORY),
        ("16 parsecs", "cannot read an amount of memory '16 parsecs'", _WRITE_MEMORY),
        ("", "cannot read an amount of memory ''", _WRITE_MEMORY),
        (
            "0GB",
            "an amount of memory must be positive, got '0GB'",
            "give a number greater than zero for an amount of memory",
        ),
        (
            "-1GB",
            "an amount of memory must be positive, got '-1GB'",
            "give a number greater than zero for an amount of memory",
        ),
    ],
)
def test_unreadable_empty_or_zero_memory_is_refused_with_a_fix(text: str, message: str, hint: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_bytes(text)
    assert refused.value.message.startswith(message)
    assert refused.value.hint == hint


def test_a_memory_flag_is_held_to_its_range_in_decimal_units() -> None:
    with pytest.raises(InputError) as small:
        parse_bytes("1KB", "--memory")
    assert small.value.message == (
        "--memory must be between 1 MB and 100 TB (no machine has more than about 30 TB of memory), got '1KB'"
    )
    assert small.value.hint == "e.g. --memory 32GB"
    with pytest.raises(InputError) as empty:
        parse_bytes("", "--memory")
    assert (empty.value.message, empty.value.hint) == (
        "--memory is empty",
        "give --memory between 1 MB and 100 TB, e.g. --memory 32GB",
    )


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [
        (80_000_000_000, "74.5 GiB"),  # an "80 GB" HBM stack as the CUDA allocator counts it
        (17_179_869_184, "16.0 GiB"),
        (1_649_267_441_664, "1.5 TiB"),
        (1024, "1.0 KiB"),
        (1023, "1023 B"),
        (0, "0 B"),
        (-2_147_483_648, "-2.0 GiB"),
    ],
)
def test_bytes_are_shown_in_binary_units(n_bytes: float, text: str) -> None:
    assert format_bytes(n_bytes) == text


@pytest.mark.parametrize("n_bytes", [3.3e7, 8.1e10, 7.7e12, 1.2e14])
def test_shown_bytes_read_back_to_within_their_rounding(n_bytes: float) -> None:
    shown = format_bytes(n_bytes).replace(" ", "")
    assert parse_bytes(shown) == pytest.approx(n_bytes, rel=0.005)


# -- durations --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("72h", 259_200),
        ("3d", 259_200),
        ("1 day", 86_400),
        ("2w", 1_209_600),
        ("90min", 5400),
        ("90m", 5400),  # m is minutes, never months
        ("45s", 45),
        ("500ms", 0.5),
        ("1.5e4s", 15_000),
    ],
)
def test_durations_read_in_seconds(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds, rel=1e-12)


def test_a_number_is_already_seconds() -> None:
    assert parse_duration_s(3600) == 3600.0
    assert parse_duration_s(0.25) == 0.25


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        (
            "5 fortnights",
            "unknown time unit 'fortnights' in '5 fortnights' for a duration",
            "use ms, s, min, h, d or w",
        ),
        ("-3h", "a duration must be positive, got '-3h'", "give a number greater than zero for a duration"),
        ("0s", "a duration must be positive, got '0s'", "give a number greater than zero for a duration"),
        ("soon", "cannot read 'soon' as a duration", "write it like 72h, 3d or 90min"),
        ("7", "a duration '7' has no unit", "write 7d, 7h, 7min or 7s"),  # a week or 7 seconds?
        (" 3600 ", "a duration '3600' has no unit", "write 3600d, 3600h, 3600min or 3600s"),
    ],
)
def test_bad_durations_say_what_to_write(text: str, message: str, hint: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_duration_s(text)
    assert (refused.value.message, refused.value.hint) == (message, hint)


@pytest.mark.parametrize("text", ["0.5s", "11000d"])
def test_a_deadline_outside_its_range_names_the_range_and_why(text: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_duration_s(text, "--deadline")
    assert refused.value.message == (
        f"--deadline must be between 1 s and 10 years (a job longer than 10 years is not a plan), got '{text}'"
    )
    assert refused.value.hint == "e.g. --deadline 72h"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (267_840, "3.1 d"),
        (172_800, "2.0 d"),
        (86_400, "24.0 h"),  # days only from two days on: "1.0 d" hides 23 h vs 25 h
        (3600, "1.0 h"),
        (90, "1.5 min"),
        (1, "1.0 s"),
        (0.25, "250.0 ms"),
        (59.99, "1.0 min"),  # the unit follows the rounded value: never "60.0 s"
        (0.9999, "1.0 s"),
        (172_799, "2.0 d"),
    ],
)
def test_durations_are_shown_in_the_largest_sensible_unit(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


# -- counts and dollars -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("7.5B", 7_500_000_000),
        ("7.5e9", 7_500_000_000),
        ("125M", 125_000_000),
        ("10k", 10_000),
        ("15.6T", 15_600_000_000_000),
        ("1,000", 1000),
        ("1_000", 1000),
        ("300", 300),
    ],
)
def test_counts_read_with_suffixes_separators_and_exponents(text: str, value: float) -> None:
    assert parse_count(text) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("7.5X", "unknown suffix 'x' in '7.5X' for a count"),
        ("nan", "cannot read 'nan' as a count"),
        ("0", "a count must be positive, got '0'"),
        ("-5", "a count must be positive, got '-5'"),
        (float("nan"), "a count must be positive, got 'nan'"),
        (float("inf"), "a count must be positive, got 'inf'"),
        (True, "a count must be a number, got True"),
    ],
)
def test_bad_counts_are_refused(given: str | float, message: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_count(given)
    assert refused.value.message == message


def test_a_count_flag_is_held_to_its_range_and_to_whole_numbers() -> None:
    with pytest.raises(InputError) as huge:
        parse_count("1e30", "--tokens")
    assert huge.value.message == (
        "--tokens must be between 1 and 1e15 (the largest published training runs use about 4e13 tokens), got '1e30'"
    )
    assert huge.value.hint == "e.g. --tokens 10B"
    with pytest.raises(InputError) as fraction:
        parse_count("8.5", "--gpus")
    assert fraction.value.message == "--gpus must be a whole number, got '8.5'"
    assert parse_count("1e30") == 1e30  # a library quantity without a flag has no range, only a sign


def test_positive_ints_take_suffixes_but_not_fractions() -> None:
    assert parse_positive_int("4k", "steps") == 4000
    assert parse_positive_int(12, "steps") == 12
    with pytest.raises(InputError) as fraction:
        parse_positive_int("2.5", "steps")
    assert (fraction.value.message, fraction.value.hint) == (
        "steps must be a whole number, got '2.5'",
        "round steps to an integer",
    )


@pytest.mark.parametrize(
    ("formatted", "value"),
    [
        *((7.5e9, "7.5B"), (125e6, "125M"), (1234, "1.23K"), (2e12, "2T"), (15.6e12, "15.6T"), (999, "999")),
        *((1e15, "1e15"), (4.2e16, "4.2e16"), (999.96e12, "1e15"), (999_960, "1M"), (0.5, "0.5")),
    ],
)
def test_counts_are_shown_with_the_suffix_they_are_read_with(formatted: float, value: str) -> None:
    assert format_count(formatted) == value
    assert parse_count(value) == pytest.approx(formatted, rel=0.005)


@pytest.mark.parametrize(("text", "usd"), [("$2,500", 2500), ("2.5k", 2500), ("USD 7.50", 7.5), ("7.50 usd", 7.5)])
def test_dollar_amounts_read_with_or_without_the_currency(text: str, usd: float) -> None:
    assert parse_usd(text) == usd


def test_a_budget_below_a_cent_is_refused_in_dollars() -> None:
    with pytest.raises(InputError) as refused:
        parse_usd("$0.001", "--budget")
    assert refused.value.message.startswith("--budget must be between $0.01 and $10,000,000,000 ($10 billion ")
    assert refused.value.hint == "e.g. --budget 5000"


@pytest.mark.parametrize(
    ("usd", "text"),
    [
        *((4401.6, "$4,402"), (23.92, "$23.92"), (1, "$1.00"), (0.00351, "$0.0035")),
        *((99.999, "$100"), (0.99999, "$1.00"), (-250, "-$250"), (-0.01, "-$0.0100")),
    ],
)
def test_dollars_are_shown_to_the_precision_their_size_needs(usd: float, text: str) -> None:
    assert format_usd(usd) == text


def test_plural_picks_the_form_for_the_count() -> None:
    assert [plural(1, "replica"), plural(2, "replica"), plural(0, "process", "processes")] == [
        "1 replica",
        "2 replicas",
        "0 processes",
    ]
    assert plural(12000, "file") == "12,000 files"


# -- flags typed as plain numbers, and the range table ---------------------------------------------------


def test_a_plain_number_flag_takes_its_whole_range_including_zero() -> None:
    assert parse_flag_number("0", "--port") == 0  # 0 picks a free port: the range allows it
    assert parse_flag_number("2k", "--rate") == 2000
    with pytest.raises(InputError) as high:
        parse_flag_number("80000", "--port")
    assert high.value.message == (
        "--port must be between 0 and 65535 (TCP ports are 1 to 65535; 0 picks any free port), got '80000'"
    )
    for text, message in (("", "--port is empty"), ("abc", "cannot read --port 'abc': write it like 8000")):
        with pytest.raises(InputError) as refused:
            parse_flag_number(text, "--port")
        assert (refused.value.message, refused.value.hint) == (
            message,
            "give --port between 0 and 65535, e.g. --port 8000",
        )


def test_a_flag_missing_from_the_range_table_is_a_programming_error() -> None:
    with pytest.raises(ValueError) as missing:
        parse_flag_number("1", "--nope")
    assert str(missing.value) == "--nope has no entry in computewise.limits.FLAG_LIMITS"


def test_check_range_refuses_a_library_quantity_with_the_range_and_an_example() -> None:
    assert check_range(5, "micro_batch", limits.MICRO_BATCH) == 5
    for value, message in (
        (0, "micro_batch must be between 1 and 100000 sequences per device (no accelerator holds more than 1e5 "
            "samples at once), got '0'"),
        (float("nan"), "micro_batch must be between 1 and 100000 sequences per device (no accelerator holds more "
                       "than 1e5 samples at once), got 'nan'"),
        (2.5, "micro_batch must be a whole number, got '2.5'"),
    ):  # fmt: skip
        with pytest.raises(InputError) as refused:
            check_range(value, "micro_batch", limits.MICRO_BATCH)
        assert (refused.value.message, refused.value.hint) == (message, "e.g. micro_batch = 4")


@pytest.mark.parametrize(
    ("limit", "text"),
    [
        (limits.DEADLINE_S, "between 1 s and 10 years"),
        (limits.LATENCY_S, "between 0.1 ms and 1 h"),
        (limits.IDLE_S, "between 1 s and 30 days"),
        (limits.HOURLY_USD, "between $0.0001 and $1,000,000 an hour"),
        (limits.TOTAL_USD, "between $0.01 and $10,000,000,000"),
        (limits.MEMORY_BYTES, "between 1 MB and 100 TB"),
        (limits.TOKENS, "between 1 and 1e15"),
        (limits.SEQUENCE_TOKENS, "between 1 and 1e7 tokens"),
    ],
)
def test_ranges_are_described_in_the_units_of_their_kind(limit: limits.Limit, text: str) -> None:
    assert describe_range(limit) == text


@pytest.mark.parametrize("flag", sorted(limits.FLAG_LIMITS))
def test_every_flag_accepts_its_bounds_and_its_example_and_refuses_past_them(flag: str) -> None:
    """The range check is inclusive at both ends, and each flag's own example lies inside its range."""
    limit = limits.FLAG_LIMITS[flag]
    parse = {"duration": parse_duration_s, "bytes": parse_bytes}.get(limit.kind)
    unit = "s" if limit.kind == "duration" else ""  # a typed duration needs its unit

    def read(text: str) -> float:
        return parse(text, flag) if parse is not None else parse_flag_number(text, flag)

    assert limit.low <= read(limit.example) <= limit.high
    assert read(repr(limit.high) + unit) == limit.high
    if limit.low > 0:
        assert read(repr(limit.low) + unit) == limit.low
    with pytest.raises(InputError, match=f"^{flag} must be between"):
        read(repr(limit.high * 1.001) + unit)
