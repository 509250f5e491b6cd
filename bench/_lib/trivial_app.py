"""The baseline of bench/gateway_load.py's loop-lag phase: uvicorn serving a
trivial Starlette app, under the same clients as the gateway.

``POST /v1/chat/completions`` reads and parses the JSON body, then streams
``max_tokens`` OpenAI-shaped chunks ``--interval`` seconds apart and
``[DONE]``: no scheduler, no validation, no queue, so what its event loop lags
is what uvicorn, h11, Starlette and asyncio cost under that many streams on
this machine. Its loop is measured by the gateway's own probe
(``tierlm.server.gateway.loop_lag.LoopLagProbe``) on ``/metrics``, read the same
way as the gateway's. uvicorn runs as the gateway runs it: h11, the loop uvicorn
picks (uvloop when installed), no access log.

    python bench/_lib/trivial_app.py --port N [--interval 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tierlm.server.gateway.loop_lag import LoopLagProbe

REGISTRY = CollectorRegistry()
INTERVAL = 0.1  # seconds between chunks; the bench sets it (--interval)


async def chat(request: Request) -> Response:
    body = json.loads(await request.body())
    tokens = int(body.get("max_tokens") or 16)

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(tokens):
            await asyncio.sleep(INTERVAL)
            delta = {"choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}
            yield f"data: {json.dumps(delta)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream")


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    probe = LoopLagProbe(REGISTRY)
    probe.start()
    yield
    await probe.aclose()


app = Starlette(
    routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/health", health),
        Route("/metrics", metrics),
    ],
    lifespan=lifespan,
)


def main() -> None:
    global INTERVAL
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval", type=float, default=INTERVAL)
    args = parser.parse_args()
    INTERVAL = args.interval
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        http="h11",
        log_level="warning",
        access_log=False,
        server_header=False,
    )


if __name__ == "__main__":
    main()
