"""Tags and scopes as users type them: ``--tag team=nlp``, ``--by team``, ``--scope team=nlp,project=x``.

Runs carry free-form ``key=value`` tags; reports group by keys and budgets select runs by a scope
(every named tag must match, or ``all``). They are parsed here, once, so that ``run``, ``cost`` and
``budget`` accept and reject exactly the same spellings. A scope is stored in canonical form (keys
sorted) so ``project=x,team=nlp`` and ``team=nlp,project=x`` are the same budget.

A tag value may hold ``=`` (``experiment=lr=3e-4``: a pair splits at its first ``=``) but not a comma:
a scope lists its pairs with commas, so ``--tag team=a,b`` would make a run no budget could name.
It is refused where the tag is typed, rather than stored and left out of every scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from computewise.errors import InputError
from computewise.specs.codec import json_property

__all__ = [
    "ALL_SCOPE",
    "NO_TAG",
    "Scope",
    "TagGroup",
    "parse_group_keys",
    "parse_scope",
    "parse_tag",
    "parse_tags",
]

NO_TAG = "(none)"
"""The group value of a run that lacks the grouping key."""

ALL_SCOPE = "all"

_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,254}")
_MAX_VALUE_CHARS = 1024
_KEY_HINT = "tag keys are letters, digits and _ . : / - (e.g. team, project, experiment)"


def _check_key(key: str, text: str) -> str:
    if not _KEY.fullmatch(key):
        raise InputError(f"bad tag key {key!r} in {text!r}", _KEY_HINT)
    return key


def _check_value(value: str, key: str, text: str) -> str:
    if not value:
        raise InputError(f"tag {key!r} has an empty value in {text!r}", f"write it as {key}=VALUE")
    if "," in value:
        raise InputError(
            f"the value of tag {key!r} holds a comma ({value!r}): budget scopes list tags with commas, "
            "so no budget could name it",
            f"write it without commas, e.g. {key}={value.replace(',', '-')}, or use one tag per value",
        )
    if len(value) > _MAX_VALUE_CHARS or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InputError(
            f"the value of tag {key!r} is too long or holds control characters",
            f"keep tag values printable and under {_MAX_VALUE_CHARS} characters",
        )
    return value


def parse_tag(text: str) -> tuple[str, str]:
    """``"team=nlp"`` -> ``("team", "nlp")``; the value may itself contain ``=``, never a comma."""
    key, sep, value = text.partition("=")
    if not sep:
        raise InputError(f"cannot read tag {text!r}", "write tags as KEY=VALUE, e.g. --tag team=nlp")
    key = key.strip()
    return _check_key(key, text), _check_value(value.strip(), key, text)


def parse_tags(items: Iterable[str]) -> dict[str, str]:
    """Repeated ``--tag KEY=VALUE`` options; the same key twice with different values is an error."""
    tags: dict[str, str] = {}
    for item in items:
        key, value = parse_tag(item)
        if tags.get(key, value) != value:
            raise InputError(f"tag {key!r} given twice ({tags[key]!r} and {value!r})", f"keep one --tag {key}=...")
        tags[key] = value
    return tags


def parse_group_keys(items: Sequence[str]) -> tuple[str, ...]:
    """``--by team --by project`` or ``--by team,project`` -> ``("team", "project")``, order kept."""
    keys: list[str] = []
    for item in items:
        for part in item.split(","):
            key = part.strip()
            _check_key(key, item)
            if key in keys:
                raise InputError(f"--by {key} given twice", "name each tag key once")
            keys.append(key)
    return tuple(keys)


@dataclass(frozen=True)
class Scope:
    """The runs a budget covers: those whose tags include every pair in ``tags`` (none: all runs)."""

    tags: tuple[tuple[str, str], ...]

    @property
    def text(self) -> str:
        """Canonical spelling, as stored in the ledger: ``all`` or ``k1=v1,k2=v2`` with keys sorted."""
        return ",".join(f"{key}={value}" for key, value in self.tags) or ALL_SCOPE

    def matches(self, run_tags: Mapping[str, str]) -> bool:
        return all(run_tags.get(key) == value for key, value in self.tags)

    def as_dict(self) -> dict[str, str]:
        return dict(self.tags)


class TagGroup:
    """A figure of one group of runs, ``group`` its ``(key, value)`` pairs in the ``--by`` order: kept as pairs
    so groups sort and compare, written in JSON as one object (``{"team": "nlp"}``) by ``labels``."""

    group: tuple[tuple[str, str], ...]

    @json_property(name="group", description="The group's value of each grouping key ({} where none is named).")
    def labels(self) -> dict[str, str]:
        return dict(self.group)


def parse_scope(text: str) -> Scope:
    """``all``, ``team=nlp`` or ``team=nlp,project=x`` (all must match); values cannot hold commas."""
    cleaned = text.strip()
    if cleaned.lower() == ALL_SCOPE:
        return Scope(())
    if not cleaned:
        raise InputError("empty budget scope", "give --scope team=nlp, --scope team=nlp,project=x or --scope all")
    pairs: dict[str, str] = {}
    for part in cleaned.split(","):
        if "=" not in part:
            raise InputError(
                f"cannot read {part.strip()!r} in scope {text!r}",
                "write the scope as KEY=VALUE[,KEY=VALUE...] or all, e.g. --scope team=nlp "
                "(commas separate tags: a tag value cannot hold one)",
            )
        key, value = parse_tag(part)
        if key in pairs:
            raise InputError(f"scope {text!r} names {key!r} twice", "a run has one value per tag; name each key once")
        pairs[key] = value
    return Scope(tuple(sorted(pairs.items())))
