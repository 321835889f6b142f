"""Runtime hints at the edge, the reading half: the endpoint's batch shape, hint fields on forwarded
requests, sources and principals (who sent a hint), and stripping the fields for engines that reject
them. `proxy.runtime.hint_inputs` is the endpoint's logic over these; its docstring has the shapes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.core.hint_actions import Hint
from proxy.core.hints import HINT_KINDS, source_id

HINTS_PATH = "/v1/cachescout/hints"
AUTH_HEADERS = ("authorization", "x-api-key")
MAX_SALT = 4096  # a batch's cache_salt (the tenant its hints are about)
UNAUTHORIZED = "unauthorized"  # cachescout_hints_total{kind="invalid", outcome=...}: a batch not read
RATE_LIMITED = "rate_limited"  # ... a batch over hints_max_per_s, not applied
SOURCE_HEADER = "x-cachescout-source"
AGENT_HEADER = "x-cachescout-agent"
MAX_BATCH = 64
MAX_STR = 256
MAX_BRANCH_IDS = 64
PROPOSAL_KEYS = ("agent_hints", "agent_hint")  # top-level request fields (SGLang / vLLM proposals)
_KIND_ALIASES = {"type", "kind", "event"}
_TTL_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


class HintError(ValueError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _str(v: object, name: str, required: bool = False) -> str | None:
    if v is None:
        if required:
            raise HintError(f"'{name}' is required", name)
        return None
    if not isinstance(v, str) or not v or len(v) > MAX_STR:
        raise HintError(f"'{name}' must be a non-empty string of at most {MAX_STR} characters", name)
    return v


def _num(v: object, name: str, lo: float = 0.0, hi: float = 1e7) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise HintError(f"'{name}' must be a number in [{lo:g}, {hi:g}]", name)
    return float(v)


def parse_ttl(v: object, name: str = "ttl") -> float | None:
    """Seconds from a number or Dynamo/Anthropic shorthand ("300", "5m", "1h")."""
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return _num(v, name, 0.0, 86_400.0)
    if isinstance(v, str) and v:
        unit = _TTL_UNITS.get(v[-1])
        try:
            return float(v[:-1]) * unit if unit is not None else float(v)
        except ValueError:
            pass
    raise HintError(f"'{name}' must be seconds or a shorthand like '5m' / '1h'", name)


def parse_hint(obj: object, where: str = "hint") -> Hint:
    if not isinstance(obj, Mapping):
        raise HintError(f"{where} must be an object", where)
    kind = next((obj[k] for k in _KIND_ALIASES if k in obj), None)
    if kind not in HINT_KINDS:
        raise HintError(f"{where}.type must be one of {', '.join(HINT_KINDS)}", f"{where}.type")
    sid = _str(
        obj.get("session_id", obj.get("parent_session_id")),
        f"{where}.session_id",
        required=kind not in ("pin", "retain") or obj.get("agent") is None,
    )
    expected = _num(obj.get("expected_duration_s"), f"{where}.expected_duration_s")
    ms = _num(obj.get("expected_duration_ms", obj.get("expected_tool_duration_ms")), f"{where}.expected_duration_ms")
    if expected is None and ms is not None:
        expected = ms / 1000.0
    ids = obj.get("branch_ids", ())
    if not isinstance(ids, (list, tuple)) or len(ids) > MAX_BRANCH_IDS:
        raise HintError(f"{where}.branch_ids must be a list of at most {MAX_BRANCH_IDS} strings", f"{where}.branch_ids")
    branch_ids = tuple(_str(b, f"{where}.branch_ids") for b in ids)
    branches = _num(obj.get("branches"), f"{where}.branches", 0, 4096)
    if kind == "fanout" and not branches and not branch_ids:
        raise HintError(f"{where}: fanout needs 'branches' or 'branch_ids'", f"{where}.branches")
    agent = _str(obj.get("agent", obj.get("agent_id")), f"{where}.agent", required=kind == "next_agent")
    p = _num(obj.get("probability"), f"{where}.probability", 0.0, 1.0)
    ttl = parse_ttl(obj.get("ttl_s", obj.get("ttl")), f"{where}.ttl_s")
    return Hint(kind, sid, expected, int(branches or 0), branch_ids, agent, 1.0 if p is None else p, ttl)  # type: ignore[arg-type]


def parse_batch(data: object) -> list[Hint]:
    items = data.get("hints") if isinstance(data, Mapping) and "hints" in data else data
    if isinstance(items, Mapping):
        items = [items]
    if not isinstance(items, list) or not items:
        raise HintError('body must be a hint object, a list of them, or {"hints": [...]}', "hints")
    if len(items) > MAX_BATCH:
        raise HintError(f"at most {MAX_BATCH} hints per request", "hints")
    return [parse_hint(h, f"hints[{i}]") for i, h in enumerate(items)]


def _bearer(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def source_of(headers: Mapping[str, str], tenant: str = "") -> str:
    src = headers.get(SOURCE_HEADER)
    return source_id(_bearer(headers), src[:MAX_STR] if src else None, tenant)


_PRINCIPALS: dict[str, str] = {}  # header value -> principal (bounded: cleared when full)


def principal_of(headers: Mapping[str, str]) -> str:
    """The caller's credential as a short hash (``""`` without one): what scopes its hints."""
    value = next((v for n in AUTH_HEADERS if (v := headers.get(n))), None)
    if not value:
        return ""
    p = _PRINCIPALS.get(value)
    if p is None:
        if len(_PRINCIPALS) >= 1024:
            _PRINCIPALS.clear()
        p = _PRINCIPALS[value] = "p" + hashlib.sha256(value.encode("latin-1", "replace")).hexdigest()[:16]
    return p


def batch_salt(data: object) -> str:
    """The tenant a batch is about: its ``cache_salt`` (as on model calls), "" without one."""
    salt = data.get("cache_salt") if isinstance(data, Mapping) else None
    if salt is None:
        return ""
    if not isinstance(salt, str) or len(salt) > MAX_SALT:
        raise HintError(f"'cache_salt' must be a string of at most {MAX_SALT} characters", "cache_salt")
    return salt


@dataclass(frozen=True, slots=True)
class RequestHints:
    """What a forwarded request says about itself (all optional)."""

    agent: str | None = None
    expected_tool_s: float | None = None  # → tool_started if the response ends in tool_calls
    discard: bool = False  # → session_ended after the response
    ttl_s: float | None = None  # → retain (directive)
    children: tuple[str, ...] = ()  # → fanout


def _proposals(body: Mapping) -> list[Mapping]:
    out = [body[k] for k in PROPOSAL_KEYS if isinstance(body.get(k), Mapping)]
    nv = body.get("nvext")
    if isinstance(nv, Mapping) and isinstance(nv.get("agent_hints"), Mapping):
        out.append(nv["agent_hints"])
    return out


def request_hints(body: Mapping, headers: Mapping[str, str]) -> RequestHints | None:
    """None when the request carries none of the fields (the common case: a few dict lookups)."""
    agent = headers.get(AGENT_HEADER)
    meta = body.get("metadata")
    props = _proposals(body) if ("agent_hints" in body or "agent_hint" in body or "nvext" in body) else []
    if agent is None and isinstance(meta, Mapping):
        agent = next((meta[k] for k in ("agent", "agent_id", "agent_name") if isinstance(meta.get(k), str)), None)
    if not props and agent is None:
        return None
    expected = ttl = None
    discard = False
    children: tuple[str, ...] = ()
    for p in props:
        if agent is None and isinstance(p.get("agent_id"), str):
            agent = p["agent_id"]
        try:
            ms = _num(p.get("expected_tool_duration_ms"), "expected_tool_duration_ms")
            if ms is not None:
                expected = ms / 1000.0
            cttl = _num(p.get("cache_ttl_ms"), "cache_ttl_ms", 0, 86_400_000)
            if cttl is not None:
                ttl = cttl / 1000.0
        except HintError:
            pass  # a malformed proposal field is the engine's to judge
        discard = discard or p.get("reuse_hint") == "discard"
        kids = p.get("children_step_ids")
        if isinstance(kids, list):
            children = tuple(k for k in kids[:MAX_BRANCH_IDS] if isinstance(k, str) and 0 < len(k) <= MAX_STR)
    nv = body.get("nvext")
    cc = nv.get("cache_control") if isinstance(nv, Mapping) else None
    if isinstance(cc, Mapping) and cc.get("ttl") is not None:
        try:
            ttl = parse_ttl(cc.get("ttl"))
        except HintError:
            pass
    if isinstance(agent, str) and not 0 < len(agent) <= MAX_STR:
        agent = None
    return RequestHints(agent, expected, discard, ttl, children)


def strip_fields(body: Mapping) -> dict | None:
    """The body without the proposal fields (operator opt-in), or None when it has none."""
    nv = body.get("nvext")
    nv_has = isinstance(nv, Mapping) and ("agent_hints" in nv or "cache_control" in nv)
    if not nv_has and not any(k in body for k in PROPOSAL_KEYS):
        return None
    out = {k: v for k, v in body.items() if k not in PROPOSAL_KEYS}
    if nv_has and isinstance(nv, Mapping):
        rest = {k: v for k, v in nv.items() if k not in ("agent_hints", "cache_control")}
        if rest:
            out["nvext"] = rest
        else:
            out.pop("nvext", None)
    return out
