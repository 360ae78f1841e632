"""The committed schemas are the ones their types generate, and the converter writes, reads and describes alike.

The real documents are validated against these files where they are made (tests/data, tests/storage,
tests/cli/test_json_documents.py...); here a small document of every shape the converter knows is
written, validated against its own generated schema, read back, and refused when a field is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import jsonschema
import pytest

from computewise.errors import InputError
from computewise.specs.codec import (
    Document,
    Jsonable,
    Layout,
    document_schema,
    json_field,
    json_property,
    schema_text,
)
from computewise.specs.schemas import documents, main

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


@pytest.mark.parametrize("file", sorted(documents()))
def test_every_generated_schema_is_committed_byte_for_byte(file: str) -> None:
    committed = (SCHEMAS / file).read_text(encoding="utf-8")
    assert committed == schema_text(*documents()[file]), f"run: python -m computewise.specs.schemas ({file})"


def test_the_check_mode_finds_a_stale_schema_and_writing_fixes_it(tmp_path: Path) -> None:
    for file in documents():
        (tmp_path / file).write_text((SCHEMAS / file).read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["--out", str(tmp_path), "--check"]) == 0
    stale = tmp_path / sorted(documents())[0]
    stale.write_text("{}\n", encoding="utf-8")
    assert main(["--out", str(tmp_path), "--check"]) == 1
    assert stale.read_text(encoding="utf-8") == "{}\n"  # --check writes nothing
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--out", str(tmp_path), "--check"]) == 0


@dataclass(frozen=True)
class Part(Jsonable):
    name: str
    share: float = field(metadata=json_field(minimum=0, maximum=1, description="Of the whole."))


@dataclass(frozen=True)
class Toy(Jsonable):
    json_document: ClassVar[Document] = Document("toy", "toy --json", "A document of every shape.")

    count: int = field(metadata=json_field(minimum=1))
    kind: Literal["a", "b"]
    parts: tuple[Part, ...]
    biggest: Part | None
    by_name: dict[str, float]
    note: str | None = field(default=None, metadata=json_field(omit_empty=True))
    seconds: float = field(default=0.0, metadata=json_field(name="elapsed_s", digits=2))
    tags: tuple[str, ...] = ()

    @json_property(after="count", description="count, doubled")
    def double(self) -> int:
        return 2 * self.count


TOY = Toy(3, "a", (Part("x", 0.25), Part("y", 0.75)), Part("y", 0.75), {"x": 1.5}, seconds=1.23456, tags=("t",))


def test_a_document_is_written_in_field_order_with_its_derived_keys_and_validates_against_its_schema() -> None:
    data = TOY.to_dict()
    assert list(data) == [
        "schema_version",
        "count",
        "double",
        "kind",
        "parts",
        "biggest",
        "by_name",
        "elapsed_s",
        "tags",
    ]
    assert data["double"] == 6
    assert data["elapsed_s"] == 1.23  # rounded; "note" left out while None
    assert data["parts"] == [{"name": "x", "share": 0.25}, {"name": "y", "share": 0.75}]
    schema = document_schema(Toy)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(json.loads(json.dumps(data)))
    jsonschema.Draft202012Validator(schema).validate({**data, "note": "n", "biggest": None})
    assert "note" not in schema["required"]
    assert schema["$defs"]["part"]["properties"]["share"] == {
        "type": "number", "minimum": 0, "maximum": 1, "description": "Of the whole."
    }  # fmt: skip
    assert schema["properties"]["biggest"] == {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/part"}]}
    assert not jsonschema.Draft202012Validator(schema).is_valid({**data, "kind": "c"})


def test_a_document_reads_back_equal_and_a_key_added_later_takes_its_default() -> None:
    written = TOY.to_dict()
    assert Toy.from_dict(json.loads(json.dumps(written))) == Toy(**{**TOY.__dict__, "seconds": 1.23})
    older = {k: v for k, v in written.items() if k not in ("tags", "elapsed_s", "schema_version")}
    assert Toy.from_dict(older).tags == ()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"count": "3"}, "toy.json: count must be a whole number, got '3'"),
        ({"count": True}, "toy.json: count must be a whole number, got True"),
        ({"kind": "c"}, "toy.json: kind must be one of 'a', 'b', got 'c'"),
        ({"parts": [{"name": "x", "share": None}]}, "toy.json: parts[0].share must be a number, got nothing"),
        ({"by_name": {"x": "fast"}}, "toy.json: by_name.x must be a number, got 'fast'"),
        ({"biggest": []}, "toy.json: biggest must be a JSON object, got list"),
        ({"schema_version": 2}, "toy.json: computewise toy --json has schema_version 2"),
    ],
)
def test_a_malformed_field_is_refused_by_its_path(change: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Toy.from_dict({**TOY.to_dict(), **change}, "toy.json")


@dataclass(frozen=True)
class Grouped(Jsonable):
    """Flat attributes written in nested objects, in another order than declared."""

    json_document: ClassVar[Document] = Document("grouped", "grouped", "Grouped keys.")
    json_layout: ClassVar[Layout] = ("gpus", ("cost", ("usd", ("per", ("hourly",)))), ("time", ("seconds",)))
    seconds: float
    usd: float | None
    hourly: float = field(default=0.0, metadata=json_field(name="usd_per_hour"))
    gpus: int = 1
    memo: str = ""  # not in the layout: neither written nor read


def test_a_layout_groups_flat_fields_and_reads_the_groups_before_their_values() -> None:
    value = Grouped(2.5, None, 4.0, gpus=8, memo="kept here")
    data = value.to_dict()
    groups = {"cost": {"usd": None, "per": {"usd_per_hour": 4.0}}, "time": {"seconds": 2.5}}
    assert data == {"schema_version": 1, "gpus": 8, **groups}
    assert list(data) == ["schema_version", "gpus", "cost", "time"]
    assert Grouped.from_dict(data) == Grouped(2.5, None, 4.0, gpus=8)
    schema = document_schema(Grouped)
    jsonschema.Draft202012Validator(schema).validate(data)
    assert not jsonschema.Draft202012Validator(schema).is_valid({**data, "time": {}})
    # The shape is checked before any value: a "time" that is not an object is named, not "seconds".
    with pytest.raises(InputError, match=r"g\.json: time must be a JSON object, got 3"):
        Grouped.from_dict({"cost": {"usd": "x", "per": {}}, "time": 3}, "g.json")
    with pytest.raises(InputError, match=r"g\.json: cost\.usd must be a number, got 'x'"):
        Grouped.from_dict({"cost": {"usd": "x", "per": {}}, "time": {"seconds": 1}}, "g.json")


def test_a_layout_that_drops_a_field_is_written_without_it_and_reading_it_back_is_refused_by_name() -> None:
    @dataclass(frozen=True)
    class Lost(Jsonable):
        json_layout: ClassVar[Layout] = ("a",)
        a: int
        b: int

    assert Lost(1, 2).to_dict() == {"a": 1}
    with pytest.raises(TypeError, match="Lost is written, never read back: its JSON leaves out b"):
        Lost.from_dict({"a": 1, "b": 2})


@dataclass(frozen=True)
class Ordered(Jsonable):
    low: float
    high: float

    @classmethod
    def from_dict(cls, data: object, source: str = "") -> Ordered:
        read = super().from_dict(data, source)
        if read.low > read.high:
            raise InputError(f"{source}: low > high", "swap them")
        return read


@dataclass(frozen=True)
class Holder(Jsonable):
    spans: tuple[Ordered, ...]


def test_a_nested_class_with_its_own_reader_is_read_by_it() -> None:
    assert Holder.from_dict({"spans": [{"low": 1, "high": 2}]}) == Holder((Ordered(1.0, 2.0),))
    with pytest.raises(InputError, match=r"h\.json: spans\[1\]: low > high"):
        Holder.from_dict({"spans": [{"low": 1, "high": 2}, {"low": 3, "high": 2}]}, "h.json")


@dataclass(frozen=True)
class Flat(Jsonable):
    json_document: ClassVar[Document] = Document("flat", "flat", "A part's keys at the top level.")

    label: str
    part: Part = field(metadata=json_field(inline=True))
    done: bool = False


def test_an_inline_field_writes_reads_and_describes_its_keys_in_place() -> None:
    value = Flat("l", Part("x", 0.5), done=True)
    data = value.to_dict()
    assert list(data) == ["schema_version", "label", "name", "share", "done"]
    assert Flat.from_dict(data) == value
    schema = document_schema(Flat)
    assert schema["required"] == ["schema_version", "label", "name", "share", "done"]
    jsonschema.Draft202012Validator(schema).validate(data)
    with pytest.raises(InputError, match="share must be a number"):
        Flat.from_dict({**data, "share": "half"})


_BOTH = Document("both", "both --json", "One command, two shapes.")


@dataclass(frozen=True)
class Single(Jsonable):
    json_document: ClassVar[Document] = _BOTH
    json_description: ClassVar[str] = "One run."

    part: Part


@dataclass(frozen=True)
class Search(Jsonable):
    json_document: ClassVar[Document] = _BOTH

    best: Part | None
    tried: tuple[Part, ...]


def test_classes_sharing_a_document_get_one_schema_that_is_one_of_them() -> None:
    schema = document_schema(Single, Search)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["oneOf"] == [{"$ref": "#/$defs/single"}, {"$ref": "#/$defs/search"}]
    assert sorted(schema["$defs"]) == ["part", "search", "single"]  # Part is used by both: one entry
    assert schema["$defs"]["single"]["description"] == "One run."
    assert schema["$defs"]["search"]["required"] == ["schema_version", "best", "tried"]
    validator = jsonschema.Draft202012Validator(schema)
    single = Single(Part("x", 0.5)).to_dict()
    search = Search(None, (Part("x", 0.5),)).to_dict()
    validator.validate(single)
    validator.validate(search)
    assert not validator.is_valid({"schema_version": 1, "tried": []})  # neither shape whole
    assert not validator.is_valid({**single, "part": {"name": "x"}})
    with pytest.raises(TypeError, match="Single, Toy: not one document"):
        document_schema(Single, Toy)


@dataclass(frozen=True)
class Measured(Jsonable):
    name: str
    series: tuple[float, ...] = ()
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Shown(Jsonable):
    json_document: ClassVar[Document] = Document("shown", "shown --json", "A summary without its series.")

    run: str
    measured: Measured = field(metadata=json_field(inline=True, without=("series",)))
    raw: Any = None


def test_an_inline_class_can_leave_keys_out_and_any_is_free_form_json() -> None:
    value = Shown("r1", Measured("m", (1.0, 2.0), {"steps": [1, {"loss": 0.5}]}), raw=[1, "two", None])
    data = value.to_dict()
    assert data == {
        "schema_version": 1, "run": "r1", "name": "m", "stats": {"steps": [1, {"loss": 0.5}]}, "raw": [1, "two", None]
    }  # fmt: skip
    assert Shown.from_dict(data) == Shown("r1", Measured("m", (), {"steps": [1, {"loss": 0.5}]}), [1, "two", None])
    schema = document_schema(Shown)
    assert schema["required"] == ["schema_version", "run", "name", "stats", "raw"]
    assert "series" not in schema["properties"]
    assert schema["properties"]["stats"] == {"type": "object"} and schema["properties"]["raw"] == {}
    jsonschema.Draft202012Validator(schema).validate(data)
    assert not jsonschema.Draft202012Validator(schema).is_valid({**data, "stats": []})


@dataclass(frozen=True)
class Signature(Jsonable):
    json_document: ClassVar[Document] = Document("signature", "signature", "Axes named or sized.")

    shape: tuple[int | str | None, ...]


def test_a_union_of_types_reads_as_the_first_that_fits_and_its_schema_allows_each() -> None:
    assert Signature.from_dict({"shape": ["batch", 3, None]}) == Signature(("batch", 3, None))
    with pytest.raises(InputError, match=r"s\.json: shape\[1\] must be a string, got 2\.5"):
        Signature.from_dict({"shape": [1, 2.5]}, "s.json")
    items = document_schema(Signature)["properties"]["shape"]["items"]
    assert items == {"oneOf": [{"type": "null"}, {"anyOf": [{"type": "integer"}, {"type": "string"}]}]}


@dataclass(frozen=True)
class Page(Jsonable):
    json_document: ClassVar[Document] = Document("page", "page --json", "A document that holds another.")

    signature: Signature
    flat: Flat = field(metadata=json_field(inline=True))


def test_a_document_inside_another_is_written_without_its_own_version() -> None:
    page = Page(Signature((1, "batch")), Flat("l", Part("x", 0.5)))
    data = page.to_dict()
    flat = {"label": "l", "name": "x", "share": 0.5, "done": False}
    assert data == {"schema_version": 1, "signature": {"shape": [1, "batch"]}, **flat}
    assert Signature((1, "batch")).to_dict()["schema_version"] == 1  # on its own, it has one
    assert Page.from_dict(data) == page
    jsonschema.Draft202012Validator(document_schema(Page)).validate(data)
