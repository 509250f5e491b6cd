"""What the gateway's pydantic schemas (its settings and its requests) share:
the base model, the markers fields carry, and a walk over a schema.

A field's type, default, bounds and docstring are declared once, on the model;
everything else is derived from there: the command-line flags (``Flag``), the
error messages (``Expect``, ``Required`` and the bounds), the configuration
reference in docs/gateway.md. ``locate`` follows a pydantic error location
through a schema to the field it names, as a reader would write it
(``backend.models.qwen.path``, ``messages[0].content``): union tags dropped,
aliases used.
"""

from __future__ import annotations

import collections.abc
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, Tag, ValidationInfo
from pydantic.fields import FieldInfo
from pydantic.functional_validators import AfterValidator

__all__ = [
    "Entry",
    "Expect",
    "FieldError",
    "Flag",
    "Loc",
    "PathField",
    "Required",
    "Schema",
    "Site",
    "every_field",
    "fields_of",
    "is_member_root",
    "literal_values",
    "locate",
    "members",
    "relative_path",
    "step",
]

Loc = tuple[str | int, ...]


class Schema(BaseModel):
    """Base of every gateway schema: immutable, strict types (``"80"`` is not a
    port), finite numbers, and unknown fields rejected (a typo is an error, never
    silently ignored). A field's docstring is its description."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
        validate_by_name=True,
        validate_by_alias=True,
    )


@dataclass(frozen=True, slots=True)
class Flag:
    """The ``tierlm serve`` flag that sets this field (its help is the docstring)."""

    name: str
    metavar: str | None = None


@dataclass(frozen=True, slots=True)
class Expect:
    """What an invalid value is told it must be: ``must be {text}, got ...``."""

    text: str


@dataclass(frozen=True, slots=True)
class Required:
    """The message for a required field left out (instead of "required")."""

    text: str


class FieldError(ValueError):
    """A validator's error about a field: ``path`` is relative to the model
    whose validator raises it; ``code``/``reason`` label an API error."""

    def __init__(
        self, message: str, *path: str | int, code: str | None = None, reason: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path: Loc = path
        self.code = code
        self.reason = reason


def relative_path(value: Path, info: ValidationInfo) -> Path:
    """``~`` expanded; a relative path is relative to ``base_dir`` in the
    validation context (the config file's directory), else to the working directory."""
    path = value.expanduser()
    base = (info.context or {}).get("base_dir")
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return path


PathField = Annotated[Path, Field(strict=False), AfterValidator(relative_path)]
"""A path, given as a string."""


@dataclass(frozen=True, slots=True)
class Site:
    """Where a location points in a schema."""

    path: Loc
    """As a reader writes it: aliases, no union tags."""
    type: Any
    """The bare type there (``Annotated`` and ``| None`` stripped)."""
    metadata: tuple[Any, ...] = ()
    """Markers and constraints (``Flag``, ``Expect``, ``annotated_types.Ge``...)."""
    model: type[BaseModel] | None = None
    """The model owning the field there (the parent of an unknown field)."""
    discriminator: str | None = None
    """The field a discriminated union there is told apart by."""
    field: FieldInfo | None = None
    """The model field there, if it is one."""

    def marker(self, kind: type[Any]) -> Any:
        """The outermost marker of ``kind`` (the field's own over its type's)."""
        return next((m for m in reversed(self.metadata) if isinstance(m, kind)), None)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _unwrap(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """Strip ``Annotated`` and ``X | None``; the bare type and the metadata met."""
    metadata: tuple[Any, ...] = ()
    while True:
        if get_origin(tp) is Annotated:
            tp, *extra = get_args(tp)
            for item in extra:  # a Field(gt=0) inside: its constraints
                metadata += (item, *item.metadata) if isinstance(item, FieldInfo) else (item,)
        elif _is_union(tp) and type(None) in get_args(tp):
            rest = [a for a in get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return Union[tuple(rest)], metadata  # noqa: UP007 (built from a tuple)
            tp = rest[0]
        else:
            return tp, metadata


def _field_site(model: type[BaseModel], parent: Loc, name: str, field: FieldInfo) -> Site:
    bare, metadata = _unwrap(field.annotation)
    discriminator = field.discriminator if isinstance(field.discriminator, str) else None
    return Site(
        (*parent, field.alias or name),
        bare,
        metadata + tuple(field.metadata),
        model,
        discriminator,
        field,
    )


def fields_of(model: type[BaseModel], parent: Loc = ()) -> Iterator[tuple[FieldInfo, Site]]:
    """Each field of ``model`` with its site (``parent`` prefixes the paths)."""
    for name, field in model.model_fields.items():
        yield field, _field_site(model, parent, name, field)


def members(site: Site) -> list[tuple[str | None, Site]]:
    """The members of a union at ``site`` (with their tags), or the site itself."""
    if not _is_union(site.type):
        return [(None, site)]
    result: list[tuple[str | None, Site]] = []
    for member in get_args(site.type):
        bare, metadata = _unwrap(member)
        tag = next((m.tag for m in metadata if isinstance(m, Tag)), None)
        if tag is None and site.discriminator is not None and _is_model(bare):
            values = literal_values(bare.model_fields[site.discriminator].annotation)
            tag = str(values[0]) if values else None
        result.append((tag, Site(site.path, bare, site.metadata + metadata, site.model)))
    return result


_SEQUENCES = (list, tuple, collections.abc.Sequence)


def is_member_root(root: type[BaseModel], loc: Sequence[str | int]) -> bool:
    """Whether ``loc`` ends at a member of an undiscriminated union (an error
    there says the value is not that member's type, whatever it is)."""
    if not loc:
        return False
    parent = locate(root, loc[:-1])
    if not _is_union(parent.type):
        return False
    here = step(parent, loc[-1])
    return here is not parent and here.path == parent.path


def _label(tp: Any) -> str:
    """How pydantic names a union member in an error's location: ``str``, ``list[str]``."""
    origin = get_origin(tp)
    if origin is None:
        return getattr(tp, "__name__", str(tp))
    args = ", ".join(_label(_unwrap(arg)[0]) for arg in get_args(tp))
    return f"{getattr(origin, '__name__', str(origin))}[{args}]"


def _has_field(model: type[BaseModel], item: str | int) -> bool:
    return any(item in (name, f.alias) for name, f in model.model_fields.items())


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def literal_values(tp: Any) -> tuple[Any, ...]:
    """The values of a ``Literal`` type (through ``Annotated``), else ()."""
    bare, _ = _unwrap(tp)
    return get_args(bare) if get_origin(bare) is Literal else ()


def step(site: Site, item: str | int) -> Site:
    """One step of ``locate``."""
    tp = site.type
    if _is_union(tp):
        options = members(site)
        for tag, member in options:
            if tag == item:
                return member
        for _, member in options:  # a path written without the tag (a validator's)
            if _is_model(member.type) and _has_field(member.type, item):
                return step(member, item)
        for _, member in options:  # an undiscriminated union's member, by pydantic's label
            if item == _label(member.type):
                return member
        for _, member in options:  # an index, written without the label (a validator's)
            if isinstance(item, int) and get_origin(member.type) in _SEQUENCES:
                return step(member, item)
        return site
    if _is_model(tp):
        for name, field in tp.model_fields.items():
            if item in (name, field.alias):
                return _field_site(tp, site.path, name, field)
        return Site((*site.path, item), Any, (), tp)
    origin = get_origin(tp)
    if origin in (dict, collections.abc.Mapping):
        bare, metadata = _unwrap(get_args(tp)[1])
        return Site((*site.path, item), bare, metadata, site.model)
    if origin in (list, tuple, collections.abc.Sequence):
        bare, metadata = _unwrap(get_args(tp)[0])
        return Site((*site.path, item), bare, metadata, site.model)
    return Site((*site.path, item), Any, (), site.model)


@dataclass(frozen=True, slots=True)
class Entry:
    """One field of a schema, wherever it is (``every_field``)."""

    site: Site
    """Its site; in the path, a table's entries are ``*``, a list's items ``[]``."""
    field: FieldInfo
    when: tuple[tuple[str, str], ...]
    """The union members it belongs to: (discriminator, tag) pairs, outermost first."""


def every_field(root: type[BaseModel]) -> Iterator[Entry]:
    """Every field of ``root`` and of the models below it (through tables,
    lists and each member of a union), depth first, in declaration order."""
    yield from _entries(Site((), root), ())


def _entries(site: Site, when: tuple[tuple[str, str], ...]) -> Iterator[Entry]:
    for tag, member in members(site):
        cond = (*when, (site.discriminator, tag)) if tag and site.discriminator else when
        bare = member.type
        origin = get_origin(bare)
        if _is_model(bare):
            for field, child in fields_of(bare, member.path):
                yield Entry(child, field, cond)
                yield from _entries(child, cond)
        elif origin in (dict, collections.abc.Mapping, list, tuple, collections.abc.Sequence):
            item, metadata = _unwrap(get_args(bare)[-1 if origin is not tuple else 0])
            key = "*" if origin in (dict, collections.abc.Mapping) else "[]"
            yield from _entries(Site((*member.path, key), item, metadata), cond)


def locate(root: type[BaseModel], loc: Sequence[str | int]) -> Site:
    """The site a pydantic error location (``error["loc"]``) points to."""
    site = Site((), root)
    for item in loc:
        site = step(site, item)
    return site
