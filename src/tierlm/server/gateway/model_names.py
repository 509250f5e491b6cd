"""A model name as an unmodified app sends it, read as the served model and,
when it carries one, a class (docs/gateway.md "Ollama apps": naming the
class in the model).

Apps written for Ollama or OpenAI send one thing we can steer without
changing them: the model's name, typed into their settings. So a name may
carry what ``X-Tierlm-Class`` says (docs/design.md §4.11: an app that names
a class says what it is, and is not judged by its pacing):

- ``smollm2-135m@gana`` (any class; ``@background``: the class programs
  are served in, ``[people] program_class``, or the first fair class the key
  may use): the model, in that class, exactly as if the header were sent,
  so the key's rules hold (403 for a class it may not use);
- ``smollm2-135m:latest`` (and ``smollm2-135m@gana:latest``): Ollama's
  default tag, which Ollama apps add to a name without one, is the model.

A name that does not end in a served model, a known class or ``:latest``
is left as it is (a 404 names it). Applied by each surface before
``intake.admit`` (``with_class``): admission itself reads headers only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from starlette.datastructures import Headers

from tierlm.core.classes import TaskClass
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.auth import Principal
from tierlm.server.gateway.gateway import Gateway
from tierlm.server.gateway.metadata import CLASS_HEADER

__all__ = [
    "BACKGROUND",
    "LATEST",
    "Named",
    "class_alias",
    "read_name",
    "resolve",
    "served_names",
    "with_class",
]

LATEST = ":latest"
"""Ollama's default tag: ``llama3`` is ``llama3:latest``."""
BACKGROUND = "background"
"""The class alias for "a program's work": the fair pool (module docstring)."""


@dataclass(frozen=True, slots=True)
class Named:
    model: str
    """The served model's id (or the name as sent, when it names none)."""
    class_name: str | None = None
    """The class the name carries (``@gana``), None when it carries none;
    ``BACKGROUND`` is resolved per key (``class_alias``)."""


def _untagged(name: str, served: Collection[str]) -> str:
    if name not in served and name.endswith(LATEST) and name[: -len(LATEST)] in served:
        return name[: -len(LATEST)]
    return name


def read_name(
    name: str, served: Collection[str], classes: Collection[str], any_model: bool = False
) -> Named:
    """``name`` as the model and class it names (module docstring); with
    ``any_model`` (an upstream that takes any name) any base is a model."""
    model = _untagged(name, served)
    if model in served:
        return Named(model)
    base, at, alias = name.removesuffix(LATEST).rpartition("@")
    if not at or not base or (alias not in classes and alias != BACKGROUND):
        return Named(model)
    base = _untagged(base, served)
    if base in served or any_model:
        return Named(base, alias)
    return Named(model)


def class_alias(
    alias: str, principal: Principal, classes: Mapping[str, TaskClass], program_class: str | None
) -> str:
    """The class ``alias`` names for this key: itself, or for ``background``
    the program class if the key may use it, else the first fair class it may
    use (as ``people.People`` serves a program), else ``program_class`` (whose
    403 then says which classes the key has)."""
    if alias != BACKGROUND:
        return alias
    if program_class is not None and program_class in principal.classes:
        return program_class
    fair = sorted(name for name, c in classes.items() if c.fair and name in principal.classes)
    if fair:
        return fair[0]
    return program_class or BACKGROUND


def with_class(headers: Headers, class_name: str | None, model: str) -> Headers:
    """``headers`` with ``X-Tierlm-Class: class_name`` (None: as they are); 400
    if they name another class already."""
    if class_name is None:
        return headers
    sent = headers.get(CLASS_HEADER)
    if sent is not None:
        if sent.strip() == class_name:
            return headers
        raise APIError(
            400,
            f"model: {model!r} names class {class_name!r}, but {CLASS_HEADER} names "
            f"{sent.strip()!r}; name one",
            param="model",
        )
    raw = [*headers.raw, (CLASS_HEADER.lower().encode(), class_name.encode())]
    return Headers(raw=raw)


def served_names(gateway: Gateway) -> list[str]:
    """The models a name may end in: the chat models and the embedding model."""
    served = list(gateway.model_ids)
    if gateway.embedding_model is not None and gateway.embedding_model not in served:
        served.append(gateway.embedding_model)
    return served


def resolve(
    gateway: Gateway, principal: Principal, headers: Headers, name: str
) -> tuple[str, Headers]:
    """The served model ``name`` names, and the headers admission then reads
    (with the class the name carries: ``with_class``)."""
    classes = gateway.settings.classes
    named = read_name(name, served_names(gateway), classes, any_model=gateway.passthrough)
    if named.class_name is None:
        return named.model, headers
    class_name = class_alias(named.class_name, principal, classes, gateway.people.program_class)
    return named.model, with_class(headers, class_name, name)
