"""Parse human quantities ("72h", "7.5B", "1.5e12", "$2.50") in one place, and format them back.

Binary units (GiB) and decimal units (GB) are kept apart on purpose: vendors quote HBM in GB
(decimal) on data sheets but the CUDA allocator reports GiB, and mixing them is a classic 7 % error.
"""

from __future__ import annotations

import math
import re

from computewise.errors import InputError

__all__ = [
    "GB",
    "GIB",
    "KIB",
    "MIB",
    "TB",
    "format_bytes",
    "format_count",
    "format_duration",
    "format_flops",
    "format_usd",
    "parse_bytes",
    "parse_count",
    "parse_duration_s",
    "parse_positive_int",
    "parse_usd",
]

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 1000**3
TB = 1000**4

_NUMBER = r"([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"

_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_DURATION_SUFFIX = {
    "": 1.0,
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


def _split(text: str, what: str, example: str) -> tuple[float, str]:
    match = re.fullmatch(_NUMBER + r"\s*([A-Za-z]*)", text.strip().replace("_", "").replace(",", ""))
    if not match:
        raise InputError(f"cannot read {text!r} as {what}", f"write it like {example}")
    return float(match.group(1)), match.group(2).lower()


def _require_positive(value: float, text: str, what: str) -> None:
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{what} must be positive, got {text!r}", f"give a number greater than zero for {what}")


def parse_count(text: str | float | int, what: str = "a count") -> float:
    """'7.5B', '7.5e9', '10B', '1e10', '125M', '300' -> float count (must be > 0)."""
    if isinstance(text, int | float):
        _require_positive(float(text), str(text), what)
        return float(text)
    number, suffix = _split(text, what, "7.5B, 7.5e9 or 125M")
    if suffix not in _COUNT_SUFFIX:
        raise InputError(f"unknown suffix {suffix!r} in {text!r} for {what}", "use K, M, B or T (e.g. 10B)")
    value = number * _COUNT_SUFFIX[suffix]
    _require_positive(value, text, what)
    return value


def parse_positive_int(text: str | int, what: str) -> int:
    """A whole positive number, also written '4k' or '1e3'."""
    value = parse_count(text, what)
    if value != int(value):
        raise InputError(f"{what} must be a whole number, got {text!r}", f"round {what} to an integer")
    return int(value)


def parse_duration_s(text: str | int | float, what: str = "a duration") -> float:
    """'72h', '3d', '90m', '500ms', '1.5e4' (seconds) -> seconds."""
    if isinstance(text, int | float):
        _require_positive(float(text), str(text), what)
        return float(text)
    number, suffix = _split(text, what, "72h, 3d, 90min or 3600")
    if suffix not in _DURATION_SUFFIX:
        raise InputError(f"unknown time unit {suffix!r} in {text!r} for {what}", "use ms, s, min, h, d or w")
    value = number * _DURATION_SUFFIX[suffix]
    _require_positive(value, text, what)
    return value


def parse_usd(text: str | int | float, what: str = "an amount") -> float:
    """'$2,500', '2500', '2.5k' -> US dollars."""
    if isinstance(text, int | float):
        _require_positive(float(text), str(text), what)
        return float(text)
    return parse_count(text.strip().lstrip("$").replace("usd", "").replace("USD", ""), what)


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
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _BYTE_UNITS:
        raise InputError(f"cannot read {what} {text!r} as an amount of memory", "write it like 16GB, 24GiB or 512MB")
    value = float(match.group(1)) * _BYTE_UNITS[unit]
    _require_positive(value, text, what)
    return value


def format_bytes(n_bytes: float) -> str:
    """Binary units, as the CUDA allocator and nvidia-smi report them."""
    for unit, size in (("TiB", 1024**4), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes:.0f} B"


def format_count(value: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def format_flops(flops: float) -> str:
    return f"{flops:.3e} FLOP"


def format_duration(seconds: float) -> str:
    if seconds >= 86400 * 2:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    return f"{seconds * 1000:.1f} ms"


def format_usd(usd: float) -> str:
    if abs(usd) >= 100:
        return f"${usd:,.0f}"
    if abs(usd) >= 1:
        return f"${usd:,.2f}"
    return f"${usd:.4f}"
