"""Runtime hints at the edge: the `POST /v1/cachescout/hints` body, hint fields on forwarded
requests, sources, limits, errors and metrics. The core (`proxy.core.hint_actions`) decides what a
hint does; this module only reads and validates.

Endpoint body (JSON, one object or a batch of at most ``MAX_BATCH``)::

    {"hints": [
      {"type": "tool_started", "session_id": "s1", "expected_duration_ms": 800},
      {"type": "tool_finished", "session_id": "s1"},
      {"type": "fanout", "session_id": "parent", "branches": 4, "branch_ids": ["b1", "b2"]},
      {"type": "next_agent", "session_id": "s1", "agent": "coder", "probability": 0.8},
      {"type": "session_ended", "session_id": "s1"},
      {"type": "pin", "session_id": "s1", "ttl_s": 300}           # operator-listed sources only
    ]}

Unknown fields are ignored (newer senders work with older proxies). The source is the hash of the
caller's API key (``Authorization: Bearer``), combined with ``X-CacheScout-Source`` when present;
the header alone without a key. Errors are OpenAI-style: 400 (bad JSON / shape, nothing applied),
401 (a credential the engine has not accepted), 403 (a directive from an unlisted or unkeyed
source, nothing applied), 413 (body too large), 503 (policy off).

Who may send hints (issue 22), the request path's rule: a hint counts only from a caller the engine
accepts. Hints riding on model calls are read only after that call's 2xx (the observer's rule);
the endpoint accepts a batch only when the caller's credential (its ``Authorization`` or
``x-api-key`` header, hashed: the *principal*) got a 2xx from the engine on a model call within
``hints_credential_ttl_s`` (and passed ``policy_client_auth_sha256`` when set). Everything a hint
names is scoped to the caller: its tenant (``cache_salt`` of the batch, as on model calls) and its
principal (``proxy.core.hint_scope``). Directives need a keyed source (``k…`` ids) the operator
listed; ids derived from a name alone are ignored in ``hints_directive_sources``.

Fields read from forwarded requests (the body is forwarded unchanged unless
``hints_strip_fields``): agent identity from ``X-CacheScout-Agent``, ``metadata.agent`` /
``metadata.agent_id`` / ``metadata.agent_name``, or ``agent_id`` inside the engines' proposal
objects — SGLang's/vLLM's ``agent_hints`` (``agent_id``, ``expected_tool_duration_ms``,
``reuse_hint``, ``cache_ttl_ms``, ``parent_step_id``/``children_step_ids``), vLLM's proposed
``agent_hint``, and Dynamo's ``nvext.agent_hints`` with ``nvext.cache_control``
(``{"type": "ephemeral", "ttl": "5m"}``). What they mean here: ``expected_tool_duration_ms`` →
``tool_started`` when this response ends in ``tool_calls``; ``reuse_hint: "discard"`` →
``session_ended`` after the response; ``children_step_ids`` → ``fanout``; a TTL → ``retain``
(operator-listed sources only; otherwise counted as refused, the request itself is unaffected).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from proxy.core.hint_actions import Hint, HintDriver
from proxy.core.hint_tables import ByteLRU
from proxy.core.hints import ACCEPTED, FACT, PREDICTION, REFUSED, SESSION_ENDED, HintConfig, keyed
from proxy.runtime.hint_parse import (
    HINTS_PATH,
    RATE_LIMITED,
    UNAUTHORIZED,
    HintError,
    RequestHints,
    batch_salt,
    parse_batch,
    parse_hint,
    principal_of,
    request_hints,
    source_of,
    strip_fields,
)

if TYPE_CHECKING:
    from proxy.core.policy import ScoutPolicy
    from proxy.observability.metrics import ProxyMetrics
    from proxy.settings import Settings

log = logging.getLogger("cachescout.hints")


def hint_config(settings: Settings) -> HintConfig:
    sources = [s.strip() for s in settings.hints_directive_sources.split(",") if s.strip()]
    unkeyed = [s for s in sources if not keyed(s)]
    if unkeyed:  # a name alone is forgeable by anyone who sends the header: never a directive source
        log.warning(
            "hints_directive_sources: %d id(s) not derived from an API key ignored (directive sources "
            "must be keyed: 'k…' ids)",
            len(unkeyed),
        )
    return HintConfig(
        directive_sources=frozenset(s for s in sources if keyed(s)),
        directive_cache_share=settings.hints_directive_cache_share,
        sources_max_bytes=settings.hints_sources_max_bytes,
        checks_max_bytes=settings.hints_checks_max_bytes,
        state_max_bytes=settings.hints_state_max_bytes,
    )


class HintService:
    """The endpoint's logic and the observer's request-field hints, over one HintDriver."""

    def __init__(
        self,
        driver: HintDriver,
        metrics: ProxyMetrics | None = None,
        max_body_bytes: int = 65536,
        credential_ttl_s: float = 900.0,
        max_per_s: float = 2000.0,
    ) -> None:
        self.driver = driver
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.credential_ttl_s = credential_ttl_s
        self.counts = {"batches": 0, "invalid": 0, "refused_batches": 0, UNAUTHORIZED: 0, RATE_LIMITED: 0}
        self.after_submit: Callable[[], object] | None = None  # LiveRuntime: plan at once, not on the next tick
        # principal -> when the engine last accepted (2xx) a model call with that credential
        self.accepted: ByteLRU[str, float] = ByteLRU(driver.cfg.state_max_bytes)
        # principal -> [hint tokens left, when refilled]: at most max_per_s hints per credential
        self.max_per_s = max_per_s
        self.buckets: ByteLRU[str, list[float]] = ByteLRU(driver.cfg.state_max_bytes)

    # -- who may send hints ---------------------------------------------------------------------------
    def credential_seen(self, headers: Mapping[str, str], now: float) -> None:
        """A model call with these headers got a 2xx from the engine (the observer calls this)."""
        p = principal_of(headers)
        seen = self.accepted.get(p)
        if seen is not None and now - seen < self.credential_ttl_s / 4:
            return  # fresh enough: not worth a write per request
        self.accepted.put(p, now, 80 + len(p))

    def within_rate(self, principal: str, now: float) -> bool:
        """Token bucket per credential: ``max_per_s`` hints a second, bursts of one second's worth.
        Checked before the body is parsed (at least one token left); ``spend`` then charges the
        batch's hints, possibly into debt, so an over-limit caller costs no parse."""
        b = self.buckets.get(principal)
        if b is None:
            b = [self.max_per_s, now]
            self.buckets.put(principal, b, 200 + len(principal))
        b[0] = min(self.max_per_s, b[0] + (now - b[1]) * self.max_per_s)
        b[1] = now
        return b[0] >= 1.0

    def spend(self, principal: str, n: int) -> None:
        b = self.buckets.get(principal)
        if b is not None:
            b[0] -= n

    def credential_ok(self, principal: str, now: float) -> bool:
        seen = self.accepted.get(principal)
        return seen is not None and now - seen <= self.credential_ttl_s

    def handle(self, raw: bytes, headers: Mapping[str, str], now: float) -> tuple[int, dict]:
        """(status, JSON body) for one POST; applies nothing unless the whole batch is acceptable."""
        if len(raw) > self.max_body_bytes:
            return 413, _err(
                f"hint body larger than {self.max_body_bytes} bytes", "invalid_request_error", "request_too_large"
            )
        principal = principal_of(headers)
        if not self.credential_ok(principal, now):
            self.counts[UNAUTHORIZED] += 1
            self._count("invalid", UNAUTHORIZED)
            return 401, _err(
                "hints are accepted only from a caller the engine accepts: send them with the "
                "credential (Authorization / x-api-key) of a model call that got a 2xx within "
                f"{self.credential_ttl_s:g} s",
                "invalid_request_error",
                "invalid_api_key",
            )
        if not self.within_rate(principal, now):
            self.counts[RATE_LIMITED] += 1
            self._count("invalid", RATE_LIMITED)
            return 429, _err(
                f"more than {self.max_per_s:g} hints a second from this credential (hints_max_per_s); nothing applied",
                "rate_limit_error",
                "rate_limit_exceeded",
            )
        try:
            data = json.loads(raw)
            hints = parse_batch(data)
            tenant = batch_salt(data)
        except (ValueError, RecursionError) as exc:
            self.counts["invalid"] += 1
            self._count("invalid", "invalid")
            param = exc.param if isinstance(exc, HintError) else None
            msg = str(exc) if isinstance(exc, HintError) else "body is not valid JSON"
            return 400, _err(msg, "invalid_request_error", "invalid_hint", param)
        self.spend(principal, len(hints))
        source = source_of(headers, tenant)
        refused = self.driver.refused(hints, source)
        if refused:
            self.counts["refused_batches"] += 1
            for i in refused:
                self.driver.trust.admit(source, hints[i].kind, now)
                self._count(hints[i].kind, REFUSED)
            return 403, _err(
                f"hints[{refused[0]}]: directives (pin/retain) are accepted only from sources the "
                f"operator lists in CACHESCOUT_HINTS_DIRECTIVE_SOURCES (keyed 'k…' ids only); this source is {source}",
                "permission_error",
                "directive_not_allowed",
                f"hints[{refused[0]}].type",
            )
        self.counts["batches"] += 1
        outcomes = self._submit(hints, source, now, tenant, principal)
        if self.after_submit is not None:
            self.after_submit()
        return 200, {
            "object": "cachescout.hints",
            "source": source,
            "results": [
                {"index": i, "type": h.kind, "outcome": o} for i, (h, o) in enumerate(zip(hints, outcomes, strict=True))
            ],
        }

    def _submit(self, hints: list[Hint], source: str, now: float, tenant: str, principal: str) -> list[str]:
        before = self.driver.released_tokens
        outcomes = self.driver.submit(hints, source, now, tenant, principal)
        for h, o in zip(hints, outcomes, strict=True):
            self._count(h.kind, o)
        released = self.driver.released_tokens - before
        if released and self.metrics is not None:
            self.metrics.hint_released_tokens_total.inc(released)
        return outcomes

    def _count(self, kind: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.hints_total.labels(kind, outcome).inc()

    # -- request fields (called from the observer's deferred work) ------------------------------------
    def on_request(
        self,
        req: RequestHints | None,
        headers: Mapping[str, str],
        tenant: str,
        session_id: str | None,
        agent_id: str | None,
        now: float,
    ) -> None:
        d = self.driver
        principal = principal_of(headers)
        if session_id:
            d.scope.own(tenant, session_id, principal)  # the engine accepted it: the session is theirs
        if req is None:
            if d.watching:
                d.observe(tenant, session_id, agent_id, None, now, principal)
            return
        d.observe(tenant, session_id, agent_id, req.agent, now, principal)
        if session_id and (req.children or req.ttl_s is not None):
            hints = []
            if req.children:
                hints.append(Hint("fanout", session_id, branches=len(req.children), branch_ids=req.children))
            if req.ttl_s is not None:
                hints.append(Hint("retain", session_id, ttl_s=req.ttl_s))
            source = source_of(headers, tenant)
            allowed = [h for h in hints if not d.refused([h], source)]
            for h in hints:
                if h not in allowed:
                    d.trust.admit(source, h.kind, now)
                    self._count(h.kind, REFUSED)
            if allowed:
                self._submit(allowed, source, now, tenant, principal)

    def on_response(
        self,
        req: RequestHints | None,
        headers: Mapping[str, str],
        session_id: str | None,
        finish: str | None,
        now: float,
        tenant: str = "",
    ) -> None:
        if req is None or not session_id:
            return
        hints = []
        if req.expected_tool_s is not None and finish == "tool_calls":
            hints.append(Hint("tool_started", session_id, expected_s=req.expected_tool_s))
        if req.discard:
            hints.append(Hint(SESSION_ENDED, session_id))
        if hints:
            self._submit(hints, source_of(headers, tenant), now, tenant, principal_of(headers))

    def update_gauges(self, top: int = 16) -> None:
        m = self.metrics
        if m is None:
            return
        srcs = self.driver.trust.sources
        if not srcs:
            return
        busiest = sorted(srcs.values(), key=lambda r: -sum(t.hints for t in r.kinds.values()))[:top]
        m.hint_source_standing.clear()
        for rec in busiest:
            label = rec.sid[:9]
            m.hint_source_standing.labels(label, FACT).set(rec.standing(FACT))
            m.hint_source_standing.labels(label, PREDICTION).set(rec.standing(PREDICTION))


def _err(message: str, type_: str, code: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


__all__ = [
    "ACCEPTED",
    "HINTS_PATH",
    "HintError",
    "HintService",
    "RequestHints",
    "hint_config",
    "parse_batch",
    "parse_hint",
    "principal_of",
    "request_hints",
    "source_of",
    "strip_fields",
]


def build_hint_service(
    settings: Settings, policy: ScoutPolicy, metrics: ProxyMetrics | None = None
) -> HintService | None:
    """The live proxy's hint service (None when ``hints_enabled`` is off). The driver attaches
    itself to the planner only when the first hint arrives, so a proxy that never receives one
    plans exactly as before."""
    if not settings.hints_enabled:
        return None
    driver = HintDriver(policy, hint_config(settings))
    driver.scope.strict = True  # live: a session whose owner is unknown is nobody's
    return HintService(
        driver, metrics, settings.hints_max_body_bytes, settings.hints_credential_ttl_s, settings.hints_max_per_s
    )
