"""``/v1/files``: OpenAI's Files API, for the Batch API's input and output files.

- ``POST /v1/files``: multipart, as the openai client sends it: ``purpose``
  (``batch``: the one purpose taken here) and ``file`` (a JSONL of requests),
  at most ``batches.max_file_bytes``; committed to the store before the answer;
- ``GET /v1/files`` (``purpose``, ``limit``, ``order``, ``after``), ``GET
  /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``.

Each file belongs to the API key that uploaded it (the batch's key for output
files): another key gets 404, as for a file that does not exist. A key holds
at most ``batches.max_bytes_per_key`` of files, its own share of the disk.

Memory stays bounded whatever the size (docs/design.md §9): the multipart
parser spools an upload to a temporary file, which is copied into the store a
chunk at a time, and a download is streamed a chunk at a time (8 concurrent
downloads of a 90 MB file grew the gateway by 950 MiB when each was read
whole). A full disk is a 507 saying so (``store_errors``), on an upload as
on any write; a DELETE works on a full disk (``data_dir.Reserve``).
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from tierlm.server.edge.errors import APIError
from tierlm.server.openai.batch.lines import new_file
from tierlm.server.openai.batch.service import BatchService
from tierlm.server.openai.batch.store import FileRecord, KeyStorageFull
from tierlm.server.openai.batch.store_errors import store_error

__all__ = ["file_object", "listing", "not_found", "owner_of", "page", "routes", "service_of"]

UPLOAD_PURPOSES = ("batch",)
# The room a multipart body takes around its file (boundaries, part headers).
MULTIPART_OVERHEAD = 64 << 10
MAX_FILENAME = 255
DOWNLOAD_CHUNK = 256 << 10
"""Bytes a download reads and sends at a time: 8 downloads hold 2 MiB."""


def file_object(record: FileRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": record.created_at,
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


def service_of(request: Request) -> tuple[BatchService, str]:
    """The service, and the owner (the key's name, "" without keys) of the request."""
    service: BatchService = request.app.state.batches
    principal = service.gateway.keys.authenticate(request)
    return service, owner_of(principal.name)


def owner_of(name: str | None) -> str:
    return name or ""


def not_found(kind: str, ident: str, param: str) -> APIError:
    return APIError(404, f"{param}: no {kind} {ident!r}", param=param, code="not_found")


def page(request: Request, default: int, most: int) -> tuple[str | None, int]:
    """``after`` and ``limit`` of a list request (400 naming a bad one)."""
    query = request.query_params
    raw = query.get("limit", str(default))
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise APIError(
            400, f"limit: must be an integer from 1 to {most}, got {raw!r}", param="limit"
        )
    return query.get("after") or None, int(raw)


def listing(data: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """OpenAI's cursor page: ``data`` holds up to ``limit + 1`` items."""
    more, data = len(data) > limit, data[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": more,
    }


async def upload(request: Request) -> Response:
    service, owner = service_of(request)
    limit = service.settings.max_file_bytes
    form = await _form(request)
    try:
        unknown = sorted(set(form) - {"purpose", "file"})
        if unknown:
            raise APIError(
                400, f"{unknown[0]}: unknown field (fields: purpose, file)", param=unknown[0]
            )
        purpose = form.get("purpose")
        if purpose not in UPLOAD_PURPOSES:
            raise APIError(
                400,
                f"purpose: must be one of {', '.join(UPLOAD_PURPOSES)}, got {purpose!r}",
                param="purpose",
            )
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise APIError(
                400, "file: missing; send the JSONL file as a multipart part", param="file"
            )
        size = upload.size if upload.size is not None else _spooled_size(upload)
        if size > limit:
            raise APIError(
                413,
                f"file: larger than the limit of {limit} bytes (batches.max_file_bytes)",
                param="file",
                code="file_too_large",
            )
        name = (upload.filename or "upload.jsonl")[:MAX_FILENAME]
        record = new_file(owner, name, str(purpose), size)
        store = await service.store()
        upload.file.seek(0)
        most = service.settings.max_bytes_per_key
        try:
            await service.call(store.add_file, record, upload.file.read, most)
        except KeyStorageFull as exc:
            raise APIError(
                413,
                f"file: this key's files hold {exc.held} bytes; with these {size} the key "
                f"would pass its share of {most} bytes (batches.max_bytes_per_key); delete "
                "files it no longer needs",
                param="file",
                code="key_storage_full",
            ) from None
    finally:
        await form.close()
    return JSONResponse(file_object(record))


async def _form(request: Request) -> FormData:
    """The multipart form, its file spooled to a temporary file; a full
    temporary disk is a 507 saying so, not a 500."""
    try:
        return await request.form(max_files=1, max_fields=4)
    except OSError as exc:
        raise store_error(exc, Path(tempfile.gettempdir())) from None


def _spooled_size(upload: UploadFile) -> int:
    upload.file.seek(0, 2)
    return upload.file.tell()


async def list_files(request: Request) -> Response:
    service, owner = service_of(request)
    after, limit = page(request, 10000, 10000)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError(400, f"order: must be asc or desc, got {order!r}", param="order")
    purpose = request.query_params.get("purpose") or None
    store = await service.store()
    found = await service.call(store.list_files, owner, purpose, after, limit + 1, order == "desc")
    return JSONResponse(listing([file_object(f) for f in found], limit))


async def _record(request: Request) -> tuple[BatchService, str, FileRecord]:
    service, owner = service_of(request)
    file_id = request.path_params["file_id"]
    store = await service.store()
    record = await service.call(store.get_file, file_id, owner)
    if record is None:
        raise not_found("file", file_id, "file_id")
    return service, owner, record


async def get_file(request: Request) -> Response:
    _, _, record = await _record(request)
    return JSONResponse(file_object(record))


async def file_content(request: Request) -> Response:
    service, owner, record = await _record(request)
    store = await service.store()
    reader = await service.call(store.open_file, record.id, owner)
    if reader is None:  # deleted meanwhile
        raise not_found("file", record.id, "file_id")

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await service.call(reader.read, DOWNLOAD_CHUNK):
                yield chunk
        finally:
            await service.call(reader.close)

    return StreamingResponse(
        chunks(),
        media_type="application/jsonl",
        headers={"Content-Length": str(record.bytes)},
    )


async def delete_file(request: Request) -> Response:
    service, owner, record = await _record(request)
    store = await service.store()
    await service.call(store.delete_file, record.id, owner)
    return JSONResponse({"id": record.id, "object": "file", "deleted": True})


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/files", upload, methods=["POST"]),
        Route("/v1/files", list_files, methods=["GET"]),
        Route("/v1/files/{file_id}", get_file, methods=["GET"]),
        Route("/v1/files/{file_id}", delete_file, methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", file_content, methods=["GET"]),
    ]
