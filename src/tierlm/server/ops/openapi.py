"""``GET /openapi.json``: an OpenAPI 3.1 document of every endpoint, so that
tools (schemathesis, client generators, tests/server/test_fuzz.py) can drive
the gateway from its own description.

The request bodies' schemas are the pydantic request models' JSON schemas:
the models that validate the requests, so the document cannot drift from
them. Every route of the app is listed; one this module has no entry for
(``OPERATIONS``) still appears, described by its endpoint's docstring.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tierlm.server.ollama import schemas as ollama
from tierlm.server.openai.batch.create import BatchCreate
from tierlm.server.openai.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from tierlm.server.openai.responses_request import ResponsesRequest
from tierlm.server.ops.scheduler_api import ForegroundRequest

__all__ = ["OPERATIONS", "Operation", "openapi_document", "routes"]

Auth = Literal["none", "key", "admin"]
_REF = "#/components/schemas/{model}"


@dataclass(frozen=True, slots=True)
class Operation:
    """What the document says of one endpoint."""

    summary: str
    auth: Auth = "key"
    body: type[BaseModel] | None = None
    nullable: bool = False
    """The body may also be ``null`` (``PUT /v1/scheduler/foreground`` clears)."""
    form: Mapping[str, Any] | None = None
    """A form body's schema (the dashboard's login) instead of JSON."""
    multipart: bool = False
    """The form is ``multipart/form-data`` (a file upload)."""
    scheduling: bool = False
    """Takes the scheduling headers (``X-Tierlm-Class``...)."""
    query: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    stream: bool = False
    """Answers server-sent events (``text/event-stream``), possibly without end."""


_PAGE = {"after": {"type": "string"}, "limit": {"type": "string", "pattern": "^[0-9]+$"}}
# The Batch API (docs/gateway.md "Batches").
BATCH_OPERATIONS: dict[tuple[str, str], Operation] = {
    ("POST", "/v1/files"): Operation(
        "Upload a batch's input file (a JSONL of requests, purpose 'batch').",
        form={
            "type": "object",
            "properties": {
                "purpose": {"type": "string", "enum": ["batch"]},
                "file": {"type": "string", "format": "binary"},
            },
            "required": ["purpose", "file"],
        },
        multipart=True,
    ),
    ("GET", "/v1/files"): Operation(
        "The key's files, newest first.",
        query={**_PAGE, "purpose": {"type": "string"}, "order": {"enum": ["asc", "desc"]}},
    ),
    ("GET", "/v1/files/{file_id}"): Operation("One file."),
    ("DELETE", "/v1/files/{file_id}"): Operation("Delete a file."),
    ("GET", "/v1/files/{file_id}/content"): Operation("A file's content (JSONL)."),
    ("POST", "/v1/batches"): Operation(
        "A batch of requests from an uploaded file, run as background jobs.",
        body=BatchCreate,
        scheduling=True,
    ),
    ("GET", "/v1/batches"): Operation("The key's batches, newest first.", query=_PAGE),
    ("GET", "/v1/batches/{batch_id}"): Operation("One batch, its status and request counts."),
    ("POST", "/v1/batches/{batch_id}/cancel"): Operation("Cancel a batch."),
    ("GET", "/v1/scheduler/batches"): Operation(
        "Every running batch's progress, and the last finished ones.", auth="admin"
    ),
}

_HEADERS = {
    "X-Tierlm-Class": "The task class (chat, extract, nataraj, gana, or one configured).",
    "X-Tierlm-Producer": "Who is asking, for fairness in the fair pool.",
    "X-Tierlm-Subject": "What the job is about, matched against the foreground's subject.",
    "X-Tierlm-Deadline": "Seconds from now, or an RFC 3339 time with a zone.",
}

OPERATIONS: dict[tuple[str, str], Operation] = {
    ("POST", "/v1/chat/completions"): Operation(
        "A chat completion, streamed or not (OpenAI's).", body=ChatRequest, scheduling=True
    ),
    ("POST", "/v1/completions"): Operation(
        "A text completion, streamed or not (OpenAI's).", body=CompletionRequest, scheduling=True
    ),
    ("POST", "/v1/responses"): Operation(
        "A response, streamed or not (OpenAI's Responses API).",
        body=ResponsesRequest,
        scheduling=True,
    ),
    ("GET", "/v1/responses/{response_id}"): Operation("A stored response."),
    ("POST", "/v1/embeddings"): Operation(
        "Embeddings, on the embedding lane (OpenAI's).", body=EmbeddingRequest
    ),
    ("GET", "/v1/models"): Operation("The models served."),
    ("GET", "/v1/models/{model}"): Operation("One model."),
    ("POST", "/v1/models/{model}/load"): Operation(
        "Load the model now, once no job runs.", auth="admin"
    ),
    ("POST", "/v1/models/{model}/unload"): Operation(
        "Unload the model, once no job runs.", auth="admin"
    ),
    ("GET", "/health"): Operation("Liveness.", auth="none"),
    ("PUT", "/v1/scheduler/foreground"): Operation(
        "Set (or clear, with null) the foreground class and subject.",
        auth="admin",
        body=ForegroundRequest,
        nullable=True,
    ),
    ("GET", "/v1/scheduler/state"): Operation("The scheduler's state.", auth="admin"),
    ("GET", "/v1/scheduler/routing"): Operation(
        "The routing stats a router in front of many gateways places requests by.",
        auth="admin",
    ),
    ("POST", "/v1/scheduler/pause"): Operation(
        "Stop dispatching; preempt a running background job.",
        auth="admin",
        query={"wait": {"type": "string", "enum": ["true", "false"]}},
    ),
    ("POST", "/v1/scheduler/resume"): Operation("Resume dispatching.", auth="admin"),
    ("GET", "/metrics"): Operation("Prometheus metrics.", auth="admin"),
    ("GET", "/dashboard"): Operation("The dashboard's page (or its login form).", auth="none"),
    ("POST", "/dashboard/login"): Operation(
        "The login form: an admin key, kept in an HttpOnly cookie.",
        auth="none",
        form={
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
        },
    ),
    ("GET", "/dashboard/state"): Operation("The dashboard's state, once.", auth="admin"),
    ("GET", "/dashboard/events"): Operation(
        "The dashboard's state, pushed as server-sent events.", auth="admin", stream=True
    ),
    ("GET", "/openapi.json"): Operation("This document.", auth="none"),
    **BATCH_OPERATIONS,
    # Ollama's native API (server/ollama, docs/gateway.md "Ollama apps").
    ("GET", "/"): Operation("Ollama's discovery: 'Ollama is running'.", auth="none"),
    ("GET", "/api/version"): Operation("The Ollama API version followed.", auth="none"),
    ("GET", "/api/tags"): Operation("The models served (Ollama's)."),
    ("GET", "/api/ps"): Operation("The loaded model and its keep-alive (Ollama's)."),
    ("POST", "/api/show"): Operation(
        "One model's details (Ollama's).", body=ollama.OllamaShowRequest
    ),
    ("POST", "/api/chat"): Operation(
        "A chat, streamed as NDJSON by default (Ollama's).",
        body=ollama.OllamaChatRequest,
        scheduling=True,
    ),
    ("POST", "/api/generate"): Operation(
        "A generation, streamed as NDJSON by default (Ollama's).",
        body=ollama.OllamaGenerateRequest,
        scheduling=True,
    ),
    ("POST", "/api/embed"): Operation("Embeddings (Ollama's).", body=ollama.OllamaEmbedRequest),
    ("POST", "/api/embeddings"): Operation(
        "One embedding (Ollama's legacy endpoint).", body=ollama.OllamaEmbeddingsRequest
    ),
}

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


_OLLAMA_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}


def _path(route: Route) -> str:
    # Starlette's "{model:path}" is OpenAPI's "{model}".
    parts = [p.split(":")[0] + "}" if ":" in p else p for p in route.path.split("/")]
    return "/".join(parts)


def _operation(method: str, path: str, route: Route, schemas: Mapping[str, Any]) -> dict[str, Any]:
    spec = OPERATIONS.get((method, path))
    if spec is None:
        doc = inspect.getdoc(route.endpoint) or f"{method} {path}"
        spec = Operation(doc.split("\n\n")[0].replace("\n", " "))
    op: dict[str, Any] = {"summary": spec.summary, "operationId": _operation_id(method, path)}
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in route.param_convertors
    ]
    parameters += [
        {"name": name, "in": "query", "required": False, "schema": dict(schema)}
        for name, schema in spec.query.items()
    ]
    if spec.scheduling:
        parameters += [_header(name, text) for name, text in _HEADERS.items()]
    if parameters:
        op["parameters"] = parameters
    if spec.body is not None:
        schema = schemas[spec.body.__name__]
        if spec.nullable:
            schema = {"anyOf": [schema, {"type": "null"}]}
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    elif spec.form is not None:
        media = "multipart/form-data" if spec.multipart else "application/x-www-form-urlencoded"
        content = {media: {"schema": dict(spec.form)}}
        op["requestBody"] = {"required": True, "content": content}
    ok = "text/event-stream" if spec.stream else "application/json"
    if path.startswith("/api/"):
        error = {"description": "An error, in Ollama's format.", "content": _json(_OLLAMA_ERROR)}
    else:
        error = {"description": "An error, in OpenAI's format.", "content": _json(_ERROR)}
    op["responses"] = {"200": {"description": "OK", "content": {ok: {}}}, "default": error}
    if spec.auth != "none":
        op["security"] = [{"bearer": []}]
        op["x-tierlm-auth"] = spec.auth
    return op


def _header(name: str, text: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": text,
        "schema": {"type": "string"},
    }


def _json(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": dict(schema)}}


def _operation_id(method: str, path: str) -> str:
    words = [w.strip("{}") for w in path.strip("/").replace(".", "_").split("/") if w]
    return "_".join([method.lower(), *words]) or method.lower()


def openapi_document(app_routes: Iterable[BaseRoute], version: str) -> dict[str, Any]:
    """The document of ``app_routes`` (the app's routes)."""
    models = [op.body for op in OPERATIONS.values() if op.body is not None]
    _, definitions = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
    schemas = definitions.get("$defs", {})
    paths: dict[str, dict[str, Any]] = {}
    for route in app_routes:
        if not isinstance(route, Route):
            continue
        path = _path(route)
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                paths.setdefault(path, {})[method.lower()] = _operation(
                    method, path, route, {k: {"$ref": _REF.format(model=k)} for k in schemas}
                )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tierlm gateway",
            "version": version,
            "description": "OpenAI-compatible gateway with tiered scheduling, and Ollama's "
            "native API (docs/gateway.md).",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


async def openapi_json(request: Request) -> Response:
    """This document."""
    document = getattr(request.app.state, "openapi", None)
    if document is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            release = version("tierlm")
        except PackageNotFoundError:
            release = "0"
        document = openapi_document(request.app.routes, release)
        request.app.state.openapi = document
    return JSONResponse(document)


def routes() -> list[BaseRoute]:
    return [Route("/openapi.json", openapi_json, methods=["GET"])]
