"""A minimal FastAPI + httpx pass-through: the yardstick for the proxy's CPU, and a byte recorder.

Why: issue 37's bound is "proxy CPU per request with a 400 KB body <= 2x a FastAPI+httpx
pass-through" — this is that pass-through, as plain as one is written (read the body, forward it,
stream the answer back), so the ratio says what the proxy's own work costs. With `record` it also
keeps the SHA-256 of every request body it forwards (GET /digests), so a benchmark can put it
between the proxy and the engine and check that the engine received exactly the bytes the client
sent (no byte changed). Digests only: no prompt text is kept.

Run: `python -m proxy.bench.passthrough --upstream URL --port P [--record]`.
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


def create_app(upstream: str, record: bool = False, max_digests: int = 1_000_000) -> FastAPI:
    app = FastAPI()
    client = httpx.AsyncClient(base_url=upstream.rstrip("/"), timeout=httpx.Timeout(600.0))
    digests: list[str] = []

    @app.get("/livez")
    async def livez() -> Response:
        return Response("ok")

    @app.get("/digests")
    async def get_digests() -> JSONResponse:
        return JSONResponse({"digests": digests})

    @app.api_route("/v1/{path:path}", methods=["GET", "POST"])
    async def forward(path: str, request: Request) -> Response:
        body = await request.body()
        if record and request.method == "POST" and len(digests) < max_digests:
            digests.append(hashlib.sha256(body).hexdigest())
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        req = client.build_request(request.method, "/v1/" + path, content=body, headers=headers)
        resp = await client.send(req, stream=True)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            finally:
                await resp.aclose()

        out_headers = {k: v for k, v in resp.headers.items() if k.lower() not in HOP}
        return StreamingResponse(chunks(), status_code=resp.status_code, headers=out_headers)

    return app


def main() -> None:  # pragma: no cover - a child process of the benchmarks
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    uvicorn.run(create_app(a.upstream, a.record), host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":  # pragma: no cover
    main()
