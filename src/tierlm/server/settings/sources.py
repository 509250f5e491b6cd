"""Where the gateway's settings come from: a TOML file, ``TIERLM_*``
environment variables and ``tierlm serve``'s flags, all validated by one model
(``settings.ServerSettings``). Precedence: flags > environment > file > defaults.

An environment variable names a field by its path, sections and keys joined by
``__`` after the ``TIERLM_`` prefix (pydantic-settings' convention):
``TIERLM_SERVER__PORT=9000``, ``TIERLM_BACKEND__KIND=openai``; a table or a list
is JSON: ``TIERLM_SCHEDULER__WEIGHTS='{"indexer": 2}'``.

Every error names the field, and where its value came from when that was not
the file: ``--port (server.port): must be between 0 and 65535, got 99999``,
``TIERLM_SERVER__PORT (server.port): ...``.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_origin

from pydantic import TypeAdapter, ValidationError, create_model
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, SettingsError

from tierlm.server.settings.schema import Loc, Site, literal_values, members, step
from tierlm.server.settings.sections import ConfigError, ServerSettings
from tierlm.server.settings.validation import TOML_WORDS, Problem, dotted, first_problem

__all__ = [
    "ENV_PREFIX",
    "ConfigError",
    "ServerSettings",
    "load_settings",
    "settings_from_dict",
]

ENV_PREFIX = "TIERLM_"
_DELIMITER = "__"


class _EnvironmentBase(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=_DELIMITER)


# ServerSettings' sections as pydantic-settings reads them from the environment:
# by the names the file gives them (an aliased field would be read without the
# prefix). Only read, never validated: load_settings validates the merged layers.
_SECTIONS: dict[str, Any] = {
    (field.alias or name): (field.annotation, None)
    for name, field in ServerSettings.model_fields.items()
}
_Environment = create_model("_Environment", __base__=_EnvironmentBase, **_SECTIONS)

Origins = Mapping[Loc, str]


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    flags: Mapping[str, str] | None = None,
) -> ServerSettings:
    """Read ``config_file`` (TOML), then the environment, then ``overrides``
    (dotted paths -> values, from flags; ``keys`` add to the file's), and
    validate. ``flags`` maps dotted paths to the flag that set them, for error
    messages. Relative paths in the file are relative to it.

    Also refuses an embedder whose packages are not installed: these settings
    are about to be served.
    """
    data: dict[str, Any] = {}
    base_dir = Path.cwd()
    if config_file is not None:
        data, base_dir = _read_file(Path(config_file))
    environment, origins = _environment()
    _merge(data, environment)
    for path, value in (overrides or {}).items():
        if path == "keys":
            data["keys"] = [*data.get("keys", []), *value]
            continue
        *parents, last = path.split(".")
        table = data
        for part in parents:
            table = table.setdefault(part, {})
        table[last] = value  # a flag replaces the file's value (models included)
    origins.update({tuple(path.split(".")): flag for path, flag in (flags or {}).items()})
    _coerce_environment(data, origins)
    settings = _validate(data, base_dir, origins)
    reason = settings.embeddings.unavailable()
    if reason is not None:
        raise ConfigError(f"{_name(('embeddings', 'backend'), origins)}: {reason}")
    return settings


def settings_from_dict(
    raw: Mapping[str, Any],
    *,
    base_dir: str | os.PathLike[str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> ServerSettings:
    """Validate a parsed config (the TOML file's structure) into settings."""
    origins: dict[Loc, str] = {tuple(p.split(".")): flag for p, flag in (flags or {}).items()}
    return _validate(raw, Path(base_dir) if base_dir is not None else Path.cwd(), origins)


def _validate(data: Mapping[str, Any], base_dir: Path, origins: Origins) -> ServerSettings:
    try:
        return ServerSettings.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        problem = first_problem(exc, ServerSettings, TOML_WORDS)
        raise ConfigError(_message(problem, origins)) from None


def _message(problem: Problem, origins: Origins) -> str:
    return f"{_name(problem.path, origins)}: {problem.message}"


def _name(path: Loc, origins: Origins) -> str:
    """``--port (server.port)`` when a flag or a variable set it (or a table
    above it), else the path."""
    for end in range(len(path), 0, -1):
        origin = origins.get(path[:end])
        if origin is not None:
            return f"{origin} ({dotted(path)})"
    return dotted(path)


def _read_file(path: Path) -> tuple[dict[str, Any], Path]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); TOML files are UTF-8"
        ) from None
    try:
        return tomllib.loads(text), path.resolve().parent
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:
        # tomllib recurses per nesting level: a file nested thousands deep is
        # no configuration, and must not be a traceback.
        raise ConfigError(f"{path}: nested too deep to be a configuration") from None


def _environment() -> tuple[dict[str, Any], dict[Loc, str]]:
    """The ``TIERLM_*`` variables as a nested table, and each one's path."""
    try:
        values = EnvSettingsSource(_Environment)()
    except SettingsError as exc:
        raise ConfigError(f"{ENV_PREFIX}*: {exc.__cause__ or exc}") from None
    sections = {field.alias or name for name, field in ServerSettings.model_fields.items()}
    origins: dict[Loc, str] = {}
    for variable in os.environ:
        if variable.upper().startswith(ENV_PREFIX):
            path = tuple(variable[len(ENV_PREFIX) :].lower().split(_DELIMITER))
            if path[0] in sections:
                origins[path] = variable
    return values, origins


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """``layer`` over ``base``, table by table (as pydantic-settings merges sources)."""
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def _coerce_environment(data: dict[str, Any], origins: Origins) -> None:
    """An environment variable's text as its field's type ("9000" -> 9000): the
    models are strict, since a file's "9000" where a number is due is a mistake."""
    for path, origin in origins.items():
        if not origin.upper().startswith(ENV_PREFIX):
            continue
        parent = _table_at(data, path[:-1])
        key = str(path[-1])
        if parent is None or not isinstance(parent.get(key), str):
            continue
        bare = _site_of(data, path).type
        if bare is str or get_origin(bare) is not None or literal_values(bare):
            continue  # text, or a table/list pydantic-settings decoded from JSON
        # Left as text if it is not one: validation names the variable and the value.
        with contextlib.suppress(ValidationError, TypeError):
            parent[key] = TypeAdapter(bare).validate_python(parent[key])


def _table_at(data: Mapping[str, Any], path: Loc) -> dict[str, Any] | None:
    node: Any = data
    for item in path:
        node = node.get(item) if isinstance(node, Mapping) else None
    return node if isinstance(node, dict) else None


def _site_of(data: Mapping[str, Any], path: Loc) -> Site:
    """Where ``path`` points in the schema, a discriminated union's member
    picked by the value of its discriminator in ``data``."""
    site = Site((), ServerSettings)
    node: Any = data
    for item in path:
        options = members(site)
        if len(options) > 1:
            tag = node.get(site.discriminator) if isinstance(node, Mapping) else None
            site = next((m for t, m in options if t == tag), options[0][1])
        site = step(site, item)
        node = node.get(item) if isinstance(node, Mapping) else None
    return site
