"""JSON documents from their types: one converter, one reader and one JSON Schema per frozen dataclass.

A result class inherits ``Jsonable`` and gets ``to_dict`` (its JSON value) and ``from_dict`` (read
back, every field checked) from its field types, so the layout is written once, as the type, and
``docs/schemas`` is generated from the same type (``computewise.specs.schemas``) instead of being
kept in step by hand. Fields are written in their order, by type: a nested dataclass as an object,
a tuple or list as a list, ``dict[str, X]`` as an object, ``X | None`` as the value or null (``X | Y``
read as the first of them that fits), ``Literal`` as its value; numbers, strings and booleans as they
are; ``Any`` is free-form JSON, written and read as it is (the schema says nothing of it).

What a hand-written ``to_dict`` did differently is said where the field is declared, so the bytes
stay what readers already parse:

- ``json_field(...)`` in ``field(metadata=...)``: a description for the schema, a JSON name other
  than the attribute's, a key left out when None or empty, a rounding, a key read but written by a
  property, a nested class's keys written in place of its own (``inline``), and JSON-Schema keywords
  (``minimum``, ``enum``, ``min_items``... written snake_case);
- ``@json_property(...)`` instead of ``@property``: a derived figure written beside the fields
  (after the key ``after`` names, else at the end), never read back;
- ``json_layout: ClassVar[Layout]``: the keys (fields and properties, by attribute) in another order,
  some gathered in nested objects (``("time", ("time_s", "step_s"))``), as flat values are often
  written grouped; a field it leaves out is neither written nor read (without a default, the class is
  written only: ``from_dict`` refuses it by name, as a view of live objects is never read back);
- ``json_document: ClassVar[Document]`` on a class printed as a whole document: it is written
  with ``schema_version`` first, refused when newer, and its schema gets a title and ``$id``;
  ``json_description`` describes a class inside one, ``json_constraints`` adds the schema keywords
  that tie keys together (``oneOf``, ``if``/``then``).

A class that checks more than its fields' types (low <= median <= high) overrides ``from_dict``,
calling ``super().from_dict`` first; the reader uses that override wherever the class is nested.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import (
    Any,
    ClassVar,
    Generic,
    Literal,
    Self,
    TypeAlias,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)

from computewise.errors import InputError
from computewise.specs.document import SCHEMA_VERSION, require_object, wrong_value

__all__ = [
    "Document",
    "JsonProperty",
    "Jsonable",
    "document_schema",
    "json_field",
    "json_property",
    "schema_text",
]

_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_SCHEMA_BASE = "https://computewise.dev/schemas/"
_VERSION_SCHEMA = {
    "const": SCHEMA_VERSION,
    "description": "Layout version of this document; a reader refuses a newer one by name. Absent in files "
    "written before versions existed (read as 1).",
}
_PRIMITIVES: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}

Owner = TypeVar("Owner")
Value = TypeVar("Value")


@dataclass(frozen=True)
class Document:
    """A class printed as a whole document: its schema file's name (``docs/schemas/<file>.schema.json``),
    the command that prints it, and what it is, for the schema's readers."""

    file: str
    command: str  # after ``computewise``: a verb and the flags that print it, e.g. "estimate train --json"
    description: str

    @property
    def title(self) -> str:
        """The schema's title, and the name a reading error gives the document."""
        return f"computewise {self.command}"


@dataclass(frozen=True)
class _Json:
    """How one field or derived property differs from the default writing (see ``json_field``)."""

    name: str | None = None
    description: str | None = None
    omit_empty: bool = False
    digits: int | None = None
    written: bool = True
    inline: bool = False
    without: tuple[str, ...] = ()  # an inline class's keys left out
    schema: tuple[tuple[str, object], ...] = ()


def _meta(
    name: str | None,
    description: str | None,
    omit_empty: bool,
    digits: int | None,
    schema: dict[str, object],
    written: bool = True,
    inline: bool = False,
    without: tuple[str, ...] = (),
) -> _Json:
    camel = tuple((re.sub(r"_([a-z])", lambda m: m.group(1).upper(), key), value) for key, value in schema.items())
    return _Json(name, description, omit_empty, digits, written, inline, without, camel)


def json_field(
    *,
    name: str | None = None,
    description: str | None = None,
    omit_empty: bool = False,
    digits: int | None = None,
    written: bool = True,
    inline: bool = False,
    without: tuple[str, ...] = (),
    **schema: object,
) -> dict[str, Any]:
    """``field(metadata=...)`` for a field written other than plainly: ``name`` its JSON key, ``omit_empty``
    leaves the key out when the value is None or empty, ``digits`` rounds a number, ``written=False`` reads
    the key but leaves writing it to a ``json_property`` of that name, ``inline`` writes a nested class's
    keys in place of its own (``without`` those named: the nested class reads them as their defaults);
    ``schema`` adds JSON-Schema keywords (``minimum=0``, ``enum=[...]``,
    ``min_items=1``)."""
    return {"json": _meta(name, description, omit_empty, digits, schema, written, inline, without)}


class JsonProperty(Generic[Owner, Value]):
    """A read-only property that is also written into the JSON (made by ``json_property``)."""

    def __init__(self, getter: Callable[[Owner], Value], meta: _Json, after: str | None) -> None:
        self.getter = getter
        self.meta = meta
        self.after = after
        self.__doc__ = getter.__doc__

    @overload
    def __get__(self, instance: None, owner: type[Owner]) -> Self: ...

    @overload
    def __get__(self, instance: Owner, owner: type[Owner]) -> Value: ...

    def __get__(self, instance: Owner | None, owner: type[Owner]) -> Self | Value:
        return self if instance is None else self.getter(instance)


def json_property(
    *,
    after: str | None = None,
    name: str | None = None,
    description: str | None = None,
    omit_empty: bool = False,
    digits: int | None = None,
    **schema: object,
) -> Callable[[Callable[[Owner], Value]], JsonProperty[Owner, Value]]:
    """``@property`` for a derived figure the JSON carries: written after the key ``after`` (else last)."""

    def wrap(getter: Callable[[Owner], Value]) -> JsonProperty[Owner, Value]:
        return JsonProperty(getter, _meta(name, description, omit_empty, digits, schema), after)

    return wrap


@dataclass(frozen=True)
class _Key:
    """One key of a class's JSON: its attribute, its type and how it is written."""

    attribute: str
    type: Any
    meta: _Json
    field: dataclasses.Field[Any] | None  # None: a derived property

    @property
    def name(self) -> str:
        return self.meta.name or self.attribute


@dataclass(frozen=True)
class _Group:
    """A JSON object of its own inside a class's JSON, holding some of its keys (``json_layout``)."""

    name: str
    nodes: tuple[_Key | _Group, ...]


Layout: TypeAlias = tuple[Union[str, tuple[str, "Layout"]], ...]  # noqa: UP007  # a recursive alias needs Union
_TREES: dict[type, tuple[_Key | _Group, ...]] = {}


def _tree(cls: type) -> tuple[_Key | _Group, ...]:
    """The JSON of a dataclass in the order it is written: fields, derived properties placed after theirs;
    or, where the class has a ``json_layout``, its keys in that layout's order and groups (a field it leaves
    out is neither written nor read: without a default, ``from_dict`` refuses the class by name)."""
    if cls not in _TREES:
        keys = _keys(cls)
        layout: Layout | None = getattr(cls, "json_layout", None)
        _TREES[cls] = keys if layout is None else _arranged(layout, {k.attribute: k for k in keys})
    return _TREES[cls]


def _arranged(layout: Layout, keys: dict[str, _Key]) -> tuple[_Key | _Group, ...]:
    """``layout``'s keys taken out of ``keys``, grouped as it says."""
    return tuple(
        keys.pop(entry) if isinstance(entry, str) else _Group(entry[0], _arranged(entry[1], keys)) for entry in layout
    )


def _keys(cls: type) -> tuple[_Key, ...]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    hints = get_type_hints(cls)
    keys = [_Key(f.name, hints[f.name], f.metadata.get("json", _Json()), f) for f in dataclasses.fields(cls)]
    for klass in reversed(cls.__mro__):
        for attribute, value in vars(klass).items():
            if isinstance(value, JsonProperty):
                kind = get_type_hints(value.getter)["return"]
                key = _Key(attribute, kind, value.meta, None)
                anchor = [k.name for k in keys].index(value.after) + 1 if value.after else len(keys)
                keys.insert(anchor, key)
    return tuple(keys)


def _leaves(nodes: tuple[_Key | _Group, ...]) -> list[_Key]:
    return [leaf for node in nodes for leaf in (_leaves(node.nodes) if isinstance(node, _Group) else [node])]


class Jsonable:
    """A frozen dataclass whose JSON value, reading and schema come from its field types (see the module)."""

    json_document: ClassVar[Document | None] = None
    json_description: ClassVar[str | None] = None  # for the schema of a class that is not a document
    json_layout: ClassVar[Layout | None] = None  # keys in other groups and order than the fields'
    json_constraints: ClassVar[Mapping[str, object]] = {}  # schema keywords across keys (oneOf, if/then)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"schema_version": SCHEMA_VERSION} if self.json_document is not None else {}
        return data | _write(self, _tree(type(self)))

    @classmethod
    def from_dict(cls, data: object, source: str = "") -> Self:
        """The value ``to_dict`` wrote, every field checked: a malformed one is an ``InputError`` naming it
        (and ``source``, the file it came from; the document's title when not said)."""
        document = cls.json_document
        value: Self = _read_object(cls, data, source or (document.title if document else cls.__name__), "")
        return value


def _write(instance: object, nodes: tuple[_Key | _Group, ...]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for node in nodes:
        if isinstance(node, _Group):
            data[node.name] = _write(instance, node.nodes)
            continue
        value = getattr(instance, node.attribute)
        if not node.meta.written or (node.meta.omit_empty and (value is None or value in ((), [], {}, ""))):
            continue
        if node.meta.digits is not None and isinstance(value, float):
            value = round(value, node.meta.digits)
        if node.meta.inline:
            data.update((k, v) for k, v in _to_json(value).items() if k not in node.meta.without)
        else:
            data[node.name] = _to_json(value)
    return data


def _to_json(value: object) -> Any:
    if isinstance(value, Jsonable):  # a document inside another has no schema_version of its own: the top's holds
        return _write(value, _tree(type(value)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_to_json(item) for item in value]
    if isinstance(value, Mapping):
        return {str(k): _to_json(v) for k, v in value.items()}
    return value


# Reading back


def _read_object(cls: type[Any], data: object, source: str, where: str) -> Any:
    document = getattr(cls, "json_document", None)
    mapping = (
        require_object(data, document.title, source)
        if isinstance(document, Document)
        else _expect(data, Mapping, where, "a JSON object", source)
    )
    unread = _unread(cls)
    if unread:  # a view written from live objects (a request, a session): a programming error to read it
        raise TypeError(f"{cls.__name__} is written, never read back: its JSON leaves out {', '.join(unread)}")
    values: dict[str, Any] = {}
    _read_nodes(_tree(cls), mapping, source, where, values)
    return cls(**values)


def _unread(cls: type) -> list[str]:
    """The fields ``cls`` needs that its JSON does not carry (left out of its layout, without a default)."""
    read = {key.attribute for key in _leaves(_tree(cls)) if key.field is not None}
    return [f.name for f in dataclasses.fields(cls) if f.init and f.name not in read and not _has_default(f)]


def _read_nodes(
    nodes: tuple[_Key | _Group, ...], mapping: Mapping[str, Any], source: str, where: str, values: dict[str, Any]
) -> None:
    """Read ``nodes`` from ``mapping`` into ``values``: the groups' objects first (a document of another
    shape is told by its shape), then the values."""
    prefix = f"{where}." if where else ""
    groups = [(g, _expect(mapping.get(g.name), Mapping, prefix + g.name, "a JSON object", source))
              for g in nodes if isinstance(g, _Group)]  # fmt: skip
    for key in nodes:
        if isinstance(key, _Group) or key.field is None or not key.field.init:
            continue
        if key.meta.inline:
            values[key.attribute] = _read(key.type, mapping, source, where)
            continue
        if key.name not in mapping and _has_default(key.field):
            continue
        values[key.attribute] = _read(key.type, mapping.get(key.name), source, prefix + key.name)
    for group, inner in groups:
        _read_nodes(group.nodes, inner, source, prefix + group.name, values)


def _has_default(spec: dataclasses.Field[Any]) -> bool:
    return spec.default is not dataclasses.MISSING or spec.default_factory is not dataclasses.MISSING


def _read(kind: Any, value: object, source: str, where: str) -> Any:
    if kind is Any:  # free-form JSON (a delivery's response, a framework's own stats): taken as it is
        return value
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(kind) if a is not type(None)]
        if value is None and len(options) < len(get_args(kind)):
            return None
        for option in options[:-1]:  # ``int | str``: the first type that reads it
            try:
                return _read(option, value, source, where)
            except InputError:
                continue
        return _read(options[-1], value, source, where)
    if origin is Literal:
        if value not in get_args(kind):
            choices = ", ".join(repr(a) for a in get_args(kind))
            raise wrong_value(source, where, f"one of {choices}", value)
        return value
    if origin in (tuple, list):
        items = _expect(value, list, where, "a JSON list", source)
        read = [_read(get_args(kind)[0], item, source, f"{where}[{i}]") for i, item in enumerate(items)]
        return tuple(read) if origin is tuple else read
    if origin is dict:
        mapping = _expect(value, Mapping, where, "a JSON object", source)
        return {str(k): _read(get_args(kind)[1], v, source, f"{where}.{k}") for k, v in mapping.items()}
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise wrong_value(source, where, "a number", value)
        return float(value)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong_value(source, where, "a whole number", value)
        return value
    if kind is bool:
        return _expect(value, bool, where, "true or false", source)
    if kind is str:
        return _expect(value, str, where, "a string", source)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if issubclass(kind, Jsonable) and _own_reader(kind):  # it checks more than its fields' types
            inner = f"{source}: {where}" if where else source  # its errors name where it sits
            return kind.from_dict(_expect(value, Mapping, where, "a JSON object", source), inner)
        return _read_object(kind, value, source, where)
    raise TypeError(f"{where}: no JSON reading for {kind!r}")


def _own_reader(kind: type[Jsonable]) -> bool:
    return kind.from_dict.__func__ is not Jsonable.from_dict.__func__  # type: ignore[attr-defined]


def _expect(value: object, kind: type[Any], where: str, what: str, source: str) -> Any:
    if not isinstance(value, kind):
        raise wrong_value(source, where, what, value)
    return value


# The schema


def document_schema(*classes: type[Jsonable]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the documents ``classes`` write: one class's, or one of several
    classes' where one command prints two shapes (they share one ``Document``; each is a ``$defs`` entry).
    A class used twice is a ``$defs`` entry too."""
    documents = {kind.json_document for kind in classes}
    document = documents.pop() if len(documents) == 1 else None
    if document is None:
        names = ", ".join(kind.__name__ for kind in classes)
        raise TypeError(f"{names}: not one document (each needs the same json_document)")
    several = len(classes) > 1
    uses: dict[type, int] = {kind: 2 for kind in classes} if several else {}  # each shape is a $defs entry
    for kind in classes:
        _count(kind, uses)
    shared = {kind for kind, count in uses.items() if count > 1}
    defs = {
        _def_name(kind): _versioned(_object_schema(kind, shared, inline=True)) if kind in classes else
        _object_schema(kind, shared, inline=True)
        for kind in sorted(shared, key=_def_name)
    }  # fmt: skip
    head: dict[str, Any] = {
        "$schema": _SCHEMA_DIALECT,
        "$id": f"{_SCHEMA_BASE}{document.file}.schema.json",
        "title": document.title,
        "description": document.description,
    }
    if several:
        return head | {"oneOf": [{"$ref": f"#/$defs/{_def_name(kind)}"} for kind in classes], "$defs": defs}
    (kind,) = classes
    body = _versioned(_object_schema(kind, shared, inline=True))
    head |= {"type": "object", "required": body["required"]}
    if defs:
        head["$defs"] = defs
    head["properties"] = body["properties"]
    return head | dict(kind.json_constraints)


def _versioned(body: dict[str, Any]) -> dict[str, Any]:
    """A document's object schema: ``schema_version`` first among its keys."""
    return body | {
        "required": ["schema_version", *body["required"]],
        "properties": {"schema_version": _VERSION_SCHEMA, **body["properties"]},
    }


def schema_text(*classes: type[Jsonable]) -> str:
    """The schema as committed in ``docs/schemas``: two-space indents, a final newline."""
    import json

    return json.dumps(document_schema(*classes), indent=2, ensure_ascii=False) + "\n"


def _count(kind: type, uses: dict[type, int]) -> None:
    """How often each dataclass appears in the tree under ``kind`` (a key of one counts once per key)."""
    for inner in _nested(kind):
        uses[inner] = uses.get(inner, 0) + 1
        if uses[inner] == 1:
            _count(inner, uses)


def _nested(kind: type) -> list[type]:
    """The dataclasses directly inside ``kind``'s keys (through lists, unions and mappings)."""
    found: list[type] = []
    for key in _written(_leaves(_tree(kind))):
        stack = [key.type]
        while stack:
            current = stack.pop()
            if isinstance(current, type) and dataclasses.is_dataclass(current):
                found.append(current)
            else:
                stack.extend(reversed(get_args(current)))
    return found


def _written(keys: list[_Key]) -> list[_Key]:
    return [k for k in keys if k.meta.written]


def _def_name(kind: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind.__name__).lower()


def _object_schema(kind: type, shared: set[type], inline: bool = False) -> dict[str, Any]:
    if kind in shared and not inline:
        return {"$ref": f"#/$defs/{_def_name(kind)}"}
    if not issubclass(kind, Jsonable):
        raise TypeError(f"{kind.__name__} is written by its own to_dict: convert it to Jsonable first")
    head = {"description": kind.json_description} if kind.json_description else {}
    return head | _nodes_schema(_tree(kind), shared) | dict(kind.json_constraints)


def _nodes_schema(nodes: tuple[_Key | _Group, ...], shared: set[type]) -> dict[str, Any]:
    required: list[str] = []
    properties: dict[str, Any] = {}
    for node in nodes:
        if isinstance(node, _Group):
            required.append(node.name)
            properties[node.name] = _nodes_schema(node.nodes, shared)
        elif node.meta.inline:  # the nested class's keys, in its place
            inner = _object_schema(node.type, shared, inline=True)
            required.extend(k for k in inner["required"] if k not in node.meta.without)
            properties.update((k, v) for k, v in inner["properties"].items() if k not in node.meta.without)
        elif node.meta.written:
            required.extend([] if node.meta.omit_empty else [node.name])
            properties[node.name] = _key_schema(node, shared)
    return {"type": "object", "required": required, "properties": properties}


def _key_schema(key: _Key, shared: set[type]) -> dict[str, Any]:
    kind = key.type
    if key.meta.omit_empty and get_origin(kind) in (Union, types.UnionType):  # None is left out, never null
        kind = Union[tuple(a for a in get_args(kind) if a is not type(None))]  # noqa: UP007
    schema = {**_type_schema(kind, shared), **dict(key.meta.schema)}
    if key.meta.description:
        schema["description"] = key.meta.description
    return schema


def _type_schema(kind: Any, shared: set[type]) -> dict[str, Any]:
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(kind) if a is not type(None)]
        if len(options) == len(get_args(kind)):
            return {"anyOf": [_type_schema(a, shared) for a in options]}
        inner = _type_schema(options[0] if len(options) == 1 else Union[tuple(options)], shared)  # noqa: UP007
        if set(inner) == {"type"} and isinstance(inner["type"], str):
            return {"type": [inner["type"], "null"]}
        if set(inner) == {"enum"}:
            return {"enum": [*inner["enum"], None]}
        return {"oneOf": [{"type": "null"}, inner]}
    if origin is Literal:
        return {"enum": list(get_args(kind))}
    if origin in (tuple, list):
        return {"type": "array", "items": _type_schema(get_args(kind)[0], shared)}
    if origin is dict:
        values = _type_schema(get_args(kind)[1], shared)
        return {"type": "object", "additionalProperties": values} if values else {"type": "object"}
    if kind is Any:
        return {}
    if kind in _PRIMITIVES:
        return {"type": _PRIMITIVES[kind]}
    if kind is type(None):  # a key that is always null in this shape (an untimed estimate's seconds)
        return {"type": "null"}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _object_schema(kind, shared)
    raise TypeError(f"no JSON Schema for {kind!r}")
