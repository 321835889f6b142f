"""The baseline the issue compares against: the obvious FastAPI + httpx pass-through proxy.

What most people would write first (and what LiteLLM-style proxies build on): a catch-all FastAPI
route, one shared httpx.AsyncClient with default transport, StreamingResponse over `aiter_raw`.
Used only by benchmarks/overhead.py.

    python benchmarks/minimal_passthrough.py --upstream http://127.0.0.1:8011 --port 8013
"""

from __future__ import annotations

import argparse
from contextlib import asynccontextmanager

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}


def build(upstream: str) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.client = httpx.AsyncClient(
            base_url=upstream,
            timeout=httpx.Timeout(600.0, connect=5.0),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=128),
        )
        yield
        await app.state.client.aclose()

    app = FastAPI(lifespan=lifespan)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def forward(path: str, request: Request):
        client: httpx.AsyncClient = request.app.state.client
        headers = [(k, v) for k, v in request.headers.items() if k not in HOP]
        req = client.build_request(
            request.method, "/" + path, params=request.query_params, headers=headers, content=await request.body()
        )
        resp = await client.send(req, stream=True)
        out = {k: v for k, v in resp.headers.items() if k not in HOP}
        return StreamingResponse(
            resp.aiter_raw(), status_code=resp.status_code, headers=out, background=BackgroundTask(resp.aclose)
        )

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build(args.upstream), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
