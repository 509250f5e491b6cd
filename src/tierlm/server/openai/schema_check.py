"""The finished output checked against the schemas it was asked to match.

A schema may hold keywords no grammar enforces (a number's ``minimum``,
``multipleOf``, ``uniqueItems``, ``not``...): the request is accepted, as
OpenAI accepts it, the grammar enforces what it can, and the whole output is
validated here with ``jsonschema`` (formats included). A value that breaks
its schema is still returned, as the model wrote it, and the answer says so:
``tierlm.schema_errors`` (the non-streamed answer's ``tierlm`` object, the
streamed answer's last choice chunk), one ``{"where", "message"}`` per
violation, and a warning in the log. A cut answer (``finish_reason:
"length"``) is not checked: it is not a whole value.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["schema_errors"]

logger = logging.getLogger("tierlm.server")


def schema_errors(
    extra: Mapping[str, Any], content: str | None, calls: Sequence[tuple[str, str]]
) -> list[dict[str, str]]:
    """Violations of ``extra``'s schemas by the ``content`` (JSON text, under a
    ``json_schema`` response format) and the ``calls`` (name, arguments)."""
    errors: list[dict[str, str]] = []
    response = extra.get("response_format")
    if content and isinstance(response, Mapping) and response.get("type") == "json_schema":
        schema = (response.get("json_schema") or {}).get("schema")
        if isinstance(schema, Mapping):
            errors += _check(schema, content, "content")
    schemas = {
        tool["function"]["name"]: tool["function"].get("parameters")
        for tool in extra.get("tools") or ()
    }
    for i, (name, arguments) in enumerate(calls):
        schema = schemas.get(name)
        if isinstance(schema, Mapping):
            errors += _check(schema, arguments or "{}", f"tool_calls[{i}].function.arguments")
    if errors:
        logger.warning("the output breaks its schema: %s", errors)
    return errors


def _check(schema: Mapping[str, Any], text: str, where: str) -> list[dict[str, str]]:
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - the server extra installs it
        return []
    try:
        value = json.loads(text)
    except ValueError as exc:
        return [{"where": where, "message": f"not JSON: {exc}"}]
    try:
        cls = jsonschema.validators.validator_for(schema)
        validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        found = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    except jsonschema.SchemaError as exc:
        return [{"where": where, "message": f"the schema is invalid: {exc.message}"}]
    return [
        {"where": where + "".join(f"[{p!r}]" for p in error.path), "message": error.message}
        for error in found
    ]
