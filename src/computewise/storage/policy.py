"""The retention policy a user writes in YAML, read into a checked value; a bad key names itself.

    # policy.yaml
    keep_last: 3                  # checkpoints of each run kept whatever their age (at least 1)
    archive:
      after_days: 30              # untouched this long: move to a colder class
      to: aws:s3-glacier-ir       # a class of catalog/data/storage_prices.csv
      folder: .computewise-archive  # local disks only: where "colder" lives (relative to the audited folder)
      kinds: [checkpoint, exported model, dataset, log, cache, other]
    delete:
      after_days: 180             # untouched this long: delete
      kinds: [checkpoint, log, cache]

What no policy can switch off (``storage.apply`` enforces it): the newest and the best checkpoint of
every run stay, a path a running run uses is never touched, anything tagged ``keep`` (a ``NAME.keep``
marker beside it, or ``.keep`` in a folder above it) stays. Age is time since the last modification:
last access is not trusted for deciding, because reading a file (this audit's hashing included) moves
it, and ``noatime`` mounts do not keep it at all.
"""

from __future__ import annotations

import difflib
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

from computewise.errors import InputError
from computewise.specs.codec import Jsonable, Layout, json_field
from computewise.storage.inventory import ARCHIVE_FOLDER
from computewise.storage.kinds import KINDS, Kind

__all__ = ["DEFAULT_DELETE_KINDS", "ArchiveRule", "DeleteRule", "Policy", "read_policy"]

DEFAULT_DELETE_KINDS: tuple[Kind, ...] = ("checkpoint", "log", "cache")
_MAX_DAYS = 36_500.0  # a hundred years: past that a number of days is a typo
_MAX_KEEP_LAST = 1_000_000
_TOP_KEYS = ("keep_last", "archive", "delete")
_ARCHIVE_KEYS = ("after_days", "to", "folder", "kinds")
_DELETE_KEYS = ("after_days", "kinds")
_EXAMPLE = "e.g.\nkeep_last: 3\narchive: {after_days: 30, to: aws:s3-glacier-ir}\ndelete: {after_days: 180}"


@dataclass(frozen=True)
class ArchiveRule(Jsonable):
    after_days: float
    to: str
    folder: str
    kinds: tuple[Kind, ...]


@dataclass(frozen=True)
class DeleteRule(Jsonable):
    after_days: float
    kinds: tuple[Kind, ...]


@dataclass(frozen=True)
class Policy(Jsonable):
    """A checked policy, with the file it came from and that file's SHA-256 (recorded with each apply)."""

    json_layout: ClassVar[Layout] = ("source", "sha256", "keep_last", "archive", "delete")

    keep_last: int = field(metadata=json_field(minimum=1))
    archive: ArchiveRule | None
    delete: DeleteRule | None
    source: str
    sha256: str


def read_policy(path: Path) -> Policy:
    """Read and check ``path``; every problem is an ``InputError`` naming the key and how to fix it."""
    import yaml

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"policy file {path} does not exist", f"write a retention policy there, {_EXAMPLE}") from None
    except OSError as error:
        raise InputError(
            f"cannot read policy file {path}: {error.strerror or error}", "check the path and its permissions"
        ) from error
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        raise InputError(f"policy file {path} is not valid YAML: {error}", _EXAMPLE) from error
    if not isinstance(data, Mapping):
        raise InputError(f"policy file {path} must hold a mapping of keys, got {type(data).__name__}", _EXAMPLE)
    where = str(path)
    _known_keys(data, _TOP_KEYS, where, "")
    keep_last = _whole(data.get("keep_last", 1), where, "keep_last", 1, _MAX_KEEP_LAST)
    archive = _archive(data.get("archive"), where)
    delete = _delete(data.get("delete"), where)
    if archive is None and delete is None:
        raise InputError(
            f"{where}: the policy neither archives nor deletes anything", "add an archive: or delete: section"
        )
    if archive is not None and delete is not None and delete.after_days <= archive.after_days:
        raise InputError(
            f"{where}: delete.after_days ({delete.after_days:g}) must be more than archive.after_days "
            f"({archive.after_days:g}), or nothing would ever be archived",
            "raise delete.after_days, or remove the archive: section",
        )
    return Policy(keep_last, archive, delete, where, hashlib.sha256(raw).hexdigest())


def _known_keys(data: Mapping[Any, Any], known: tuple[str, ...], where: str, section: str) -> None:
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            name = f"{section}.{key}" if section else str(key)
            raise InputError(
                f"{where}: unknown key {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
                f"the keys{' of ' + section if section else ''} are: {', '.join(known)}",
            )


def _section(value: object, where: str, name: str, keys: tuple[str, ...]) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: {name} must be a mapping of {', '.join(keys)}", _EXAMPLE)
    _known_keys(value, keys, where, name)
    if "after_days" not in value:
        raise InputError(
            f"{where}: {name}.after_days is missing", f"say after how many days, e.g. {name}: {{after_days: 30}}"
        )
    return cast("Mapping[str, Any]", value)


def _archive(value: object, where: str) -> ArchiveRule | None:
    section = _section(value, where, "archive", _ARCHIVE_KEYS)
    if section is None:
        return None
    target = section.get("to")
    if not isinstance(target, str) or ":" not in target:
        raise InputError(
            f"{where}: archive.to must name a storage class as cloud:class, got {target!r}",
            "e.g. archive: {to: aws:s3-glacier-ir}; list them in src/computewise/catalog/data/storage_prices.csv",
        )
    folder = section.get("folder", ARCHIVE_FOLDER)
    if not isinstance(folder, str) or not folder.strip():
        raise InputError(f"{where}: archive.folder must be a folder path, got {folder!r}", "e.g. folder: /mnt/cold")
    return ArchiveRule(
        after_days=_days(section["after_days"], where, "archive.after_days"),
        to=target.strip().lower(),
        folder=folder,
        kinds=_kinds(section.get("kinds"), where, "archive.kinds", KINDS),
    )


def _delete(value: object, where: str) -> DeleteRule | None:
    section = _section(value, where, "delete", _DELETE_KEYS)
    if section is None:
        return None
    return DeleteRule(
        after_days=_days(section["after_days"], where, "delete.after_days"),
        kinds=_kinds(section.get("kinds"), where, "delete.kinds", DEFAULT_DELETE_KINDS),
    )


def _days(value: object, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{where}: {name} must be a number of days, got {value!r}", f"e.g. {name.split('.')[-1]}: 30")
    if value < 0 or value > _MAX_DAYS:
        raise InputError(
            f"{where}: {name} must be between 0 and {_MAX_DAYS:g} days, got {value:g}",
            f"give a positive age, e.g. {name.split('.')[-1]}: 30",
        )
    return float(value)


def _whole(value: object, where: str, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError(
            f"{where}: {name} must be a whole number from {low} to {high}, got {value!r}",
            f"e.g. {name}: 3 (the newest checkpoint of a run is always kept, so at least 1)",
        )
    return value


def _kinds(value: object, where: str, name: str, default: tuple[Kind, ...]) -> tuple[Kind, ...]:
    if value is None:
        return default
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: {name} must be a list of kinds", f"e.g. {name.split('.')[-1]}: [checkpoint, log]")
    kinds: list[Kind] = []
    for item in value:
        match = next((kind for kind in KINDS if kind == str(item).strip().lower()), None)
        if match is None:
            close = difflib.get_close_matches(str(item), KINDS, n=1)
            raise InputError(
                f"{where}: {name} has unknown kind {item!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
                f"kinds are: {', '.join(KINDS)}",
            )
        kinds.append(match)
    return tuple(dict.fromkeys(kinds))
