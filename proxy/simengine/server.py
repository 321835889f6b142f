"""The simulated engine as an OpenAI-compatible HTTP server (vLLM's surface, SGLang's extras).

Why: the demo, the tests and users without a GPU need an upstream whose prefix cache behaves like
vLLM's and whose hit rate is ground truth. Routes: /v1/chat/completions, /v1/completions (text or
token-id prompt), streaming or not; /v1/responses and /v1/messages (converted to chat as vLLM does,
non-streaming: `api_routes.py`); /v1/models, /tokenize, /detokenize, /reset_prefix_cache (vLLM),
/flush_cache and /generate (SGLang), /health, /version, /metrics (its own registry, real engines' names),
and with a host tier (`cpu_blocks > 0`) the LMCache controller's `/lookup` and `/pin` on it (token ids
in, matched prefix tokens per instance out), so the proxy's LMCache client runs against the sim; with
`request_log > 0`, /debug/requests (the last N requests: arrival, whether it carried
`X-CacheScout-Warmup`, a digest of its `X-Session-ID`, its block hashes and cached tokens), which the
multi-replica tests use to check where a router sent each warmup and each request. No prompt text is kept.

`create_sim_app(config, clock=None)` builds an app; `app.state.sim` is the `SimService` (tests read
the block pool through it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from proxy.cachemodel.block_hash import chain_hashes
from proxy.simengine import api_routes as api
from proxy.simengine import openai_io as io
from proxy.simengine.engine import EngineRequest
from proxy.simengine.generation import plan_output
from proxy.simengine.service import Pending, SimConfig, SimService
from proxy.simengine.tool_stream import ToolCallStream


def _error(exc: io.ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


async def _json(request: Request):
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise io.ApiError(f"Invalid JSON body: {exc}") from exc


def create_sim_app(config: SimConfig | None = None, clock: Callable[[], float] | None = None) -> FastAPI:
    config = config or SimConfig()
    sim = SimService(config, clock)
    max_len = config.effective_max_model_len
    created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await sim.close()

    app = FastAPI(
        title="CacheScout simulated engine", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )
    app.state.sim = sim
    requests_seen: deque[tuple[float, bool, str | None, EngineRequest]] = deque(maxlen=max(1, config.request_log))

    def _log_request(request: Request, pending: Pending) -> None:
        if config.request_log > 0:  # cached_tokens is known only after admission: read at /debug time
            sid = request.headers.get("x-session-id")
            requests_seen.append(
                (
                    time.time(),
                    request.headers.get("x-cachescout-warmup") == "1",
                    hashlib.sha256(sid.encode()).hexdigest()[:12] if sid else None,
                    pending.req,
                )
            )

    if config.request_log > 0:

        @app.get("/debug/requests")
        async def debug_requests():
            return {
                "requests": [
                    {
                        "t": t,
                        "warmup": w,
                        "session": sess,
                        "hashes": list(r.hashes),
                        "prompt_tokens": r.prompt_len,
                        "cached_tokens": r.cached_tokens,
                        # the engine's virtual clock (s): when it arrived, was first scheduled, gave
                        # its first token, finished (None: not yet)
                        "arrival": r.arrival,
                        "admitted_at": r.admitted_at,
                        "first_token_at": r.first_token_at,
                        "finished_at": r.finished_at,
                    }
                    for t, w, sess, r in requests_seen
                ]
            }

    @app.exception_handler(io.ApiError)
    async def _api_error(_request: Request, exc: io.ApiError):
        return _error(exc)

    @app.exception_handler(Exception)
    async def _internal(_request: Request, exc: Exception):  # pragma: no cover - last resort
        return _error(io.ApiError(f"internal error: {type(exc).__name__}: {exc}", 500))

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/version")
    async def version():
        return {"version": "cachescout-sim"}

    @app.get("/v1/models")
    async def models():
        return io.models_body(config.model, max_len, created)

    @app.get("/metrics")
    async def metrics():
        sim.metrics.refresh()
        return Response(generate_latest(sim.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await _json(request)
        io.check_model(body, config.model, required=False)
        return io.tokenize_body(body, sim.tokenizer, max_len)

    @app.post("/detokenize")
    async def detokenize(request: Request):
        body = await _json(request)
        io.check_model(body, config.model, required=False)
        return io.detokenize_body(body, sim.tokenizer)

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache():
        if not sim.reset_cache():
            raise io.ApiError("Failed to reset prefix cache: requests are running", 503)
        return Response(status_code=200)

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache():
        if sim.busy() or not sim.reset_cache():
            return PlainTextResponse(
                "Cache not flushed. Please check backend logs for more details. "
                "(When there are running or waiting requests, the operation will "
                "not be performed.)",
                status_code=400,
            )
        return PlainTextResponse(
            "Cache flushed.\nPlease check backend logs for more details. (When there are "
            "running or waiting requests, the operation will not be performed.)"
        )

    async def completions(request: Request, kind: str):
        return await _complete(await _json(request), kind, request=request)

    def _request_extras(body: object, request: Request | None, job: io.Job) -> tuple[int, str | None]:
        """(priority, session id) as vLLM 0.32 reads them: `X-Vllm-Priority` overrides the body's
        `priority` (vLLM docs/serving/openai_compatible_server.md, "Extra HTTP Headers": "Its value
        must be an integer and overrides the priority value in the JSON request body"); the session
        id from the body's `session_id`, the `X-Session-ID` header or `vllm_xargs.session_id`."""
        headers = request.headers if request is not None else {}
        return io.header_priority(headers, job.priority), io.request_session_id(body, headers)

    async def _complete(body, kind: str, shape=None, request: Request | None = None):
        """``shape(job, out, n_out, req)``: the response body of a converted API (Responses/Messages)."""
        io.check_model(body, config.model)
        job = io.parse_job(kind, body, sim.tokenizer, max_len)
        out = plan_output(
            sim.tokenizer,
            job.prompt_ids,
            job.max_tokens,
            output_tokens=config.output_tokens,
            output_jitter=config.output_jitter,
            seed=config.seed,
            tools=job.tools,
            tool_choice=job.tool_choice,
            tool_call_share=config.tool_call_share,
            ignore_eos=job.ignore_eos,
            min_tokens=job.min_tokens or 0,
        )
        priority, session_id = _request_extras(body, request, job)
        try:
            pending = sim.submit(job.prompt_ids, out, job.salt, priority, session_id, radix_session=job.session_id)
        except ValueError as exc:
            raise io.ApiError(str(exc)) from exc
        if request is not None:
            _log_request(request, pending)
        rid = io.new_id(kind)
        if job.stream:
            return StreamingResponse(_stream(sim, job, pending, rid), media_type="text/event-stream")
        try:
            n_out = await _wait_done(pending)
        finally:
            sim.abort(pending)  # no-op when finished; frees blocks if the client left
        r = pending.req
        if shape is not None:
            return shape(out, n_out, r.prompt_len, r.cached_tokens)
        u = io.usage(r.prompt_len, n_out, r.cached_tokens, config.prompt_tokens_details)
        return io.full_response(job, rid, config.model, out, n_out, u)

    async def _stream(sim: SimService, job: io.Job, pending: Pending, rid: str) -> AsyncIterator[bytes]:
        out, created_s, sent = pending.output, int(time.time()), 0
        calls = ToolCallStream(out) if out.tool_call is not None else None

        def frame(chunk: dict) -> bytes:
            return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

        # The role-only chunk leaves with the engine's first output (prefill done, first token
        # sampled), as vLLM's `chat_completion_stream_generator` sends it under `if first_iteration:`
        # inside `async for res in result_generator`; an engine failure before it is the first frame.
        role_due = job.kind == "chat"
        try:
            while True:
                item = await pending.queue.get()
                if isinstance(item, Exception):
                    yield frame(io.ApiError(f"engine failure: {item}", 500).body())
                    return
                if role_due:
                    role_due = False
                    yield frame(
                        io.stream_chunk(job, rid, config.model, created_s, delta={"role": "assistant", "content": ""})
                    )
                done = item is None
                upto = len(out.ids) if done else item
                if calls is not None:  # the name as soon as it is generated, then the arguments
                    for d in calls.advance(upto, done):
                        yield frame(io.stream_chunk(job, rid, config.model, created_s, delta={"tool_calls": [d]}))
                else:
                    text = "".join(out.pieces[sent:upto])
                    if text and not (done and upto == sent):
                        yield frame(io.stream_chunk(job, rid, config.model, created_s, text=text))
                sent = upto
                if done:
                    break
            last: dict | None = {} if job.kind == "chat" else None
            yield frame(
                io.stream_chunk(job, rid, config.model, created_s, delta=last, text="", finish=out.finish_reason)
            )
            if job.include_usage:
                r = pending.req
                u = io.usage(r.prompt_len, r.generated, r.cached_tokens, config.prompt_tokens_details)
                yield frame(io.stream_chunk(job, rid, config.model, created_s, u=u, empty_choices=True))
            yield b"data: [DONE]\n\n"
        finally:
            sim.abort(pending)

    @app.post("/generate")
    async def generate(request: Request):
        """SGLang's native API (non-streaming): {text | input_ids, sampling_params, priority?}."""
        body = await _json(request)
        job = io.parse_generate(body, sim.tokenizer, max_len)
        out = plan_output(
            sim.tokenizer,
            job.prompt_ids,
            job.max_tokens,
            output_tokens=config.output_tokens,
            output_jitter=config.output_jitter,
            seed=config.seed,
            ignore_eos=job.ignore_eos,
            min_tokens=job.min_tokens,
        )
        # SGLang accepts a priority without priority scheduling (abort_on_priority_when_disabled is
        # off by default); only vLLM's API refuses it, so /generate passes it through as 0 there.
        prio = 0 if sim.engine.refuses_priority else job.priority
        try:
            pending = sim.submit(job.prompt_ids, out, job.salt, prio, job.session_id, radix_session=job.session_id)
        except ValueError as exc:
            raise io.ApiError(str(exc)) from exc
        try:
            n_out = await _wait_done(pending)
        finally:
            sim.abort(pending)
        r = pending.req
        return {
            "text": "".join(out.pieces[:n_out]),
            "output_ids": list(out.ids[:n_out]),
            "meta_info": {
                "id": io.new_id("completion"),
                "prompt_tokens": r.prompt_len,
                "completion_tokens": n_out,
                "cached_tokens": r.cached_tokens,
                "finish_reason": {"type": out.finish_reason},
            },
        }

    if sim.engine.host is not None:
        _add_lmcache_routes(app, sim)
    if sim.engine.sessions is not None:
        _add_session_routes(app, sim, config)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await completions(request, "chat")

    @app.post("/v1/completions")
    async def completion(request: Request):
        return await completions(request, "completion")

    store = api.ResponseStore()

    @app.post("/v1/responses")
    async def responses(request: Request):
        """OpenAI Responses API, rendered through the chat path as vLLM does (non-streaming)."""
        chat = api.responses_chat_body(await _json(request), store)
        return await _complete(
            chat,
            "chat",
            lambda out, n, p, c: api.responses_body(chat, out, n, p, c, config.model, store),
            request=request,
        )

    @app.post("/v1/messages")
    async def messages(request: Request):
        """Anthropic Messages API, rendered through the chat path as vLLM does (non-streaming)."""
        chat = api.messages_chat_body(await _json(request))
        return await _complete(
            chat, "chat", lambda out, n, p, c: api.messages_body(out, n, p, c, config.model), request=request
        )

    return app


LMCACHE_INSTANCE = "sim-0"
LMCACHE_LOCATION = "LocalCPUBackend"


def _add_session_routes(app: FastAPI, sim: SimService, config: SimConfig) -> None:
    """SGLang's session surface, served only with `session_radix_cache` on (the sim then answers
    as an SGLang server does for these paths): `/open_session` and `/close_session` take
    `{"session_id": ...}` (`OpenSessionReqInput` / `CloseSessionReqInput`), and `/get_server_info`
    reports the flags the SGLang adapter probes."""

    def _sid(body: object) -> str:
        sid = body.get("session_id") if isinstance(body, dict) else None
        if not isinstance(sid, str) or not sid:
            raise io.ApiError("'session_id' must be a non-empty string", param="session_id")
        return sid

    @app.post("/open_session")
    async def open_session(request: Request):
        sid = _sid(await _json(request))
        sim.engine.open_session(sid)
        return JSONResponse(sid)

    @app.api_route("/close_session", methods=["GET", "POST"])
    async def close_session(request: Request):
        sim.engine.close_session(_sid(await _json(request)))  # unknown / closed ids: a no-op, as SGLang
        return Response(status_code=200)  # SGLang's http_server answers an empty 200

    @app.get("/get_server_info")
    async def get_server_info():
        return {
            "enable_session_radix_cache": True,
            "radix_eviction_policy": config.eviction,
            "enable_priority_scheduling": config.scheduling_policy == "sglang",
            "schedule_low_priority_values_first": config.low_priority_values_first,
            "served_model_name": config.model,
            "page_size": config.block_size,
            "max_total_num_tokens": config.capacity_blocks * config.block_size,
        }


def _add_lmcache_routes(app: FastAPI, sim: SimService) -> None:
    """LMCache controller shape: `POST /lookup {"tokens"}` -> {"event_id", "layout_info": {instance:
    [location, matched_tokens]}}; `POST /pin {"tokens", "instance_id", "location"}` -> {"event_id",
    "num_tokens"}. Tokens hash like the engine's blocks (no cache_salt: LMCache keys are unsalted),
    and a match is the leading run of whole blocks resident in the host tier."""
    host = sim.engine.host
    assert host is not None, "added only for an engine with a host tier"
    bs = sim.config.block_size
    events = iter(range(1, 1 << 62))

    async def _tokens(request: Request) -> list[int]:
        body = await _json(request)
        toks = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(toks, list) or not all(isinstance(t, int) for t in toks):
            raise io.ApiError("'tokens' must be a list of token ids")
        return toks

    @app.post("/lookup")
    async def lookup(request: Request):
        hashes = chain_hashes(await _tokens(request), bs, None)
        matched = host.match(hashes) * bs
        return {"event_id": f"lookup-{next(events)}", "layout_info": {LMCACHE_INSTANCE: [LMCACHE_LOCATION, matched]}}

    @app.post("/pin")
    async def pin(request: Request):
        hashes = chain_hashes(await _tokens(request), bs, None)
        n = host.match(hashes)
        host.pin(hashes[:n])
        return {"event_id": f"pin-{next(events)}", "num_tokens": n * bs}


async def _wait_done(p: Pending) -> int:
    while True:
        item = await p.queue.get()
        if isinstance(item, Exception):
            raise io.ApiError(f"engine failure: {item}", 500)
        if item is None:
            return p.req.generated
