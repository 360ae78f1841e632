"""Parse human quantities ("72h", "7.5B", "1.5e12", "$2.50") in one place, and format them back.

Binary units (GiB) and decimal units (GB) are kept apart on purpose: vendors quote HBM in GB
(decimal) on data sheets but the CUDA allocator reports GiB, and mixing them is a classic 7 % error.
"""

from __future__ import annotations

import math
import re

from computewise.errors import InputError
from computewise.limits import Limit, limit_for

__all__ = [
    "GB",
    "GIB",
    "KIB",
    "MIB",
    "TB",
    "check_range",
    "describe_range",
    "format_bytes",
    "format_count",
    "format_duration",
    "format_flops",
    "format_usd",
    "parse_bits_per_s",
    "parse_bytes",
    "parse_count",
    "parse_duration_s",
    "parse_flag_number",
    "parse_positive_int",
    "parse_usd",
    "plural",
]

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 1000**3
TB = 1000**4

_NUMBER = r"([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"

_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_DURATION_SUFFIX = {
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 604800.0,
    "week": 604800.0,
    "weeks": 604800.0,
}


def _split(text: str, what: str, example: str, limit: Limit | None = None) -> tuple[float, str]:
    match = re.fullmatch(_NUMBER + r"\s*([A-Za-z]*)", text.strip().replace("_", "").replace(",", ""))
    if not match:
        raise _unreadable(text, what, example, limit)
    return float(match.group(1)), match.group(2).lower()


def _unreadable(text: str, what: str, example: str, limit: Limit | None = None) -> InputError:
    """An empty or malformed value; for a flag, the hint says what range it takes."""
    limit = limit or limit_for(what)
    if limit is None:
        return InputError(f"cannot read {text!r} as {what}", f"write it like {example}")
    wanted = f"give {what} {describe_range(limit)}, e.g. {what} {limit.example}"
    if not text.strip():
        return InputError(f"{what} is empty", wanted)
    return InputError(f"cannot read {what} {text!r}: write it like {example}", wanted)


def _require_positive(value: float, text: str, what: str) -> None:
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{what} must be positive, got {text!r}", f"give a number greater than zero for {what}")


def _check(value: float, text: str, what: str, limit: Limit | None = None) -> None:
    """A flag's value must lie in its range (``limits.FLAG_LIMITS``); any other quantity must be positive."""
    limit = limit or limit_for(what)
    if limit is None:
        _require_positive(value, text, what)
        return
    if not (math.isfinite(value) and limit.low <= value <= limit.high):
        raise InputError(f"{what} must be {describe_range(limit)} ({limit.why}), got {text!r}", _example(what, limit))
    if limit.integer and value != int(value):
        raise InputError(f"{what} must be a whole number, got {text!r}", _example(what, limit))


def _example(what: str, limit: Limit) -> str:
    return f"e.g. {what} {limit.example}" if what.startswith("--") else f"e.g. {what} = {limit.example}"


def check_range(value: float, what: str, limit: Limit) -> float:
    """``value`` if it lies in ``limit``, else ``InputError``: how library objects (``TrainJob``) refuse nonsense."""
    _check(value, f"{value:g}", what, limit)
    return value


def describe_range(limit: Limit) -> str:
    """'between 1 and 1e15', 'between 1 s and 10 years', 'between $0.01 and $10,000,000,000 an hour'."""
    show = {"count": _show_number, "duration": _show_duration, "usd": _show_usd, "bytes": _show_bytes}[limit.kind]
    unit = f" {limit.unit}" if limit.unit else ""
    return f"between {show(limit.low)} and {show(limit.high)}{unit}"


def _show_number(value: float) -> str:
    return f"{value:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _show_duration(seconds: float) -> str:
    year_s = 365.0 * 86400.0
    for unit, size in (("years", year_s), ("days", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size * (2 if size >= 86400 else 1):
            return f"{_show_number(round(seconds / size, 3))} {unit}"
    return f"{_show_number(round(seconds * 1000, 3))} ms"


def _show_usd(usd: float) -> str:
    return "$" + f"{usd:,.4f}".rstrip("0").rstrip(".")


def _show_bytes(n_bytes: float) -> str:
    for unit, size in (("TB", TB), ("GB", GB), ("MB", 1000**2), ("kB", 1000)):
        if n_bytes >= size:
            return f"{_show_number(n_bytes / size)} {unit}"
    return f"{_show_number(n_bytes)} B"


def parse_count(text: str | float | int, what: str = "a count") -> float:
    """'7.5B', '7.5e9', '10B', '1e10', '125M', '300' -> float count (must be > 0)."""
    return _count(text, what, "7.5B, 7.5e9 or 125M")


def _count(text: str | float | int, what: str, example: str) -> float:
    if isinstance(text, bool):  # an int to Python, never a count to a user
        raise InputError(f"{what} must be a number, got {text!r}", f"write it like {example}")
    if isinstance(text, int | float):
        _check(float(text), str(text), what)
        return float(text)
    number, suffix = _split(text, what, example)
    if suffix not in _COUNT_SUFFIX:
        raise InputError(f"unknown suffix {suffix!r} in {text!r} for {what}", f"write it like {example}")
    value = number * _COUNT_SUFFIX[suffix]
    _check(value, text, what)
    return value


def parse_flag_number(text: str | float | int, flag: str, limit: Limit | None = None) -> float:
    """A flag typed as a plain number ('8000', '2.5', '1e3', '2k'), checked against its range (which may hold 0)."""
    limit = limit or limit_for(flag)
    if limit is None:
        raise ValueError(f"{flag} has no entry in computewise.limits.FLAG_LIMITS")
    if isinstance(text, str):
        number, suffix = _split(text, flag, limit.example, limit)
        if suffix not in _COUNT_SUFFIX:
            raise _unreadable(text, flag, limit.example, limit)
        value = number * _COUNT_SUFFIX[suffix]
    else:
        value = float(text)
    _check(value, str(text), flag, limit)
    return value


def parse_positive_int(text: str | int, what: str) -> int:
    """A whole positive number, also written '4k' or '1e3'."""
    value = parse_count(text, what)
    if value != int(value):
        raise InputError(f"{what} must be a whole number, got {text!r}", f"round {what} to an integer")
    return int(value)


def parse_duration_s(text: str | int | float, what: str = "a duration") -> float:
    """'72h', '3d', '90m', '500ms' -> seconds; a number from code is already seconds.

    Typed text needs its unit: ``--deadline 7`` means a week to one user and 7 seconds to another, and
    either reading silently gives the other a wrong answer."""
    if isinstance(text, int | float):
        _check(float(text), str(text), what)
        return float(text)
    number, suffix = _split(text, what, "72h, 3d or 90min")
    if not suffix:
        shown = text.strip()
        raise InputError(f"{what} {shown!r} has no unit", _unit_hint(number, shown, what))
    if suffix not in _DURATION_SUFFIX:
        raise InputError(f"unknown time unit {suffix!r} in {text!r} for {what}", "use ms, s, min, h, d or w")
    value = number * _DURATION_SUFFIX[suffix]
    _check(value, text, what)
    return value


def _unit_hint(number: float, shown: str, what: str) -> str:
    """The spellings of a unitless ``number`` that would be accepted ('write 7min or 7s'), or, when none would
    (``--interval 0``), the range: a suggestion that is refused next is worse than none."""
    limit = limit_for(what)
    accepted = [f"{shown}{unit}" for unit in ("d", "h", "min", "s") if _accepts(number * _DURATION_SUFFIX[unit], limit)]
    if len(accepted) > 1:
        return f"write {', '.join(accepted[:-1])} or {accepted[-1]}"
    if accepted:
        return f"write {accepted[0]}"
    if limit is None:
        return f"give {what} greater than zero with its unit, e.g. 72h"
    return f"give {what} {describe_range(limit)} with its unit, {_example(what, limit)}"


def _accepts(value: float, limit: Limit | None) -> bool:
    """Whether ``_check`` would take ``value``."""
    if limit is None:
        return math.isfinite(value) and value > 0
    whole = not limit.integer or value == int(value)
    return math.isfinite(value) and limit.low <= value <= limit.high and whole


def parse_usd(text: str | int | float, what: str = "an amount") -> float:
    """'$2,500', '2500', '2.5k' -> US dollars."""
    return _count(_strip_dollars(text) if isinstance(text, str) else text, what, "2500, 7.50, $7.50 or $2.5k")


def _strip_dollars(text: str) -> str:
    stripped = text.strip()
    for currency in ("usd", "USD", "$"):
        stripped = stripped.removeprefix(currency).removesuffix(currency).strip()
    return stripped


_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "kib": KIB,
    "mb": 1000**2,
    "mib": MIB,
    "gb": GB,
    "gib": GIB,
    "tb": TB,
    "tib": 1024**4,
}


def parse_bytes(text: str, what: str = "an amount of memory") -> float:
    """'16GB' (decimal), '16GiB' (binary), '512MB', '2e9' -> bytes."""
    # A sign is read, so that "-1GB" is refused as out of range rather than as unreadable.
    match = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _BYTE_UNITS:
        if limit_for(what) is not None:
            raise _unreadable(text, what, "16GB, 24GiB or 512MB")
        raise InputError(f"cannot read {what} {text!r} as an amount of memory", "write it like 16GB, 24GiB or 512MB")
    value = float(match.group(1)) * _BYTE_UNITS[unit]
    _check(value, text, what)
    return value


_BIT_RATE_UNITS = {"": 1.0, "bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12}


def parse_bits_per_s(text: str, what: str = "a link speed") -> float:
    """'20Mbps', '1.5 Gbps', '500kbps', '2e7' (bits per second) -> bits per second, decimal as links are sold.

    Network links are quoted in bits (20 Mbps is 2.5 MB/s); bytes per second are not accepted, so a
    factor of 8 cannot slip in unnoticed.
    """
    match = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]*)\s*", text)
    unit = match.group(2).lower().replace("/s", "ps").replace("bitps", "bps") if match else ""
    if match is None or unit not in _BIT_RATE_UNITS or "B" in match.group(2):  # MB/s is bytes, not bits
        raise _unreadable(text, what, "20Mbps, 1Gbps or 500kbps (bits per second)")
    value = float(match.group(1)) * _BIT_RATE_UNITS[unit]
    _check(value, text, what)
    return value


def format_bytes(n_bytes: float) -> str:
    """Binary units, as the CUDA allocator and nvidia-smi report them."""
    for unit, size in (("TiB", 1024**4), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes:.0f} B"


def format_count(value: float) -> str:
    """Three significant digits: ``7.5B``, ``300M``, ``1.23K``; from a thousand trillion on, ``1e15`` or
    ``4.2e16``, as ``--tokens`` is typed (never ``1e+03T``).

    The unit is chosen on the rounded value, so 999.96 trillion reads ``1e15``, not ``1e+03T``."""
    rounded = float(f"{value:.3g}")
    if abs(rounded) >= 1e15:
        mantissa, exponent = f"{rounded:.2e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(rounded) >= size:
            return f"{rounded / size:g}{unit}"
    return f"{rounded:g}"


def format_flops(flops: float) -> str:
    return f"{flops:.3e} FLOP"


def format_duration(seconds: float) -> str:
    """One decimal in the largest unit the value reaches (days from 2 d). The unit is chosen on the
    rounded value, so 59.99 s reads "1.0 min", never "60.0 s"."""
    for unit, size_s, from_units in (("d", 86400.0, 2.0), ("h", 3600.0, 1.0), ("min", 60.0, 1.0), ("s", 1.0, 1.0)):
        if round(seconds / size_s, 1) >= from_units:
            return f"{seconds / size_s:.1f} {unit}"
    return f"{seconds * 1000:.1f} ms"


def format_usd(usd: float) -> str:
    """Whole dollars from $100, cents from $1, four decimals below; the sign before the dollar sign.

    The precision is chosen on the rounded amount, so 99.999 reads "$100", like 100 itself.
    """
    sign, amount = ("-" if usd < 0 else ""), abs(usd)
    if round(amount, 2) >= 100:
        return f"{sign}${amount:,.0f}"
    if round(amount, 4) >= 1:
        return f"{sign}${amount:,.2f}"
    return f"{sign}${amount:.4f}"


def format_usd_or(usd: float | None, missing: str = "-") -> str:
    """``format_usd``, or ``missing`` where there is no price (a table cell: "-", or a word that says why)."""
    return missing if usd is None else format_usd(usd)


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 replica``, ``2 replicas``, ``12,000 files``; ``many`` for the irregular ones
    (``plural(n, "process", "processes")``). Every "N things" the tool prints goes through here, so none reads
    "1 GPUs" or "1 rounds"."""
    return f"{count:,} {noun if count == 1 else many or noun + 's'}"
