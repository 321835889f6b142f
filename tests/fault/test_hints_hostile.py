"""The hints surface against hostile callers (issue 22), on the real `cachescout serve` over sockets.

Each case of the issue's table that concerns hints: hints from a caller the engine rejects, a
cross-tenant release, an agent-name hijack, hint floods (next_agent, fanout: RSS), the pending-check
table after 700 sources (the calibration bound), a directive source named only in a header, and
`hints_strip_fields` on bodies over 256 KiB. The engine (`hostile_upstream.py`) accepts the keys
`good` (tenant A, cache_salt "tenant-a") and `good-b` (tenant B, "tenant-b"); `bad` gets 401.
Every case prints a `MEASURE` line (run with -s) with the figures the report quotes.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import httpx
import pytest

from proxy.core.hints import source_id

from .conftest import livez_probe, proxy

pytestmark = pytest.mark.sockets

CHAT = "/v1/chat/completions"
HINTS = "/v1/cachescout/hints"
A = {"authorization": "Bearer good"}
B = {"authorization": "Bearer good-b"}
BAD = {"authorization": "Bearer bad"}
SALT_A, SALT_B = "tenant-a", "tenant-b-longer"  # distinct lengths: distinct tags in /debug/state
SYSTEM = {"coder": "You write the code for the fault suite. " * 25, "planner": "You plan the fault suite. " * 25}


def body(sid: str, text: str, salt: str | None, agent: str = "coder", **extra) -> dict:
    out = {
        "model": "m",
        "user": sid,
        "max_tokens": 8,
        "messages": [{"role": "system", "content": SYSTEM[agent]}, {"role": "user", "content": text}],
        **extra,
    }
    if salt:
        out["cache_salt"] = salt
    return out


def call(c: httpx.Client, px, sid: str, text: str, headers: dict, salt: str | None, **kw) -> int:
    agent = kw.pop("agent", "coder")
    h = {**headers, **kw.pop("extra_headers", {})}
    return c.post(px.url + CHAT, json=body(sid, text, salt, agent, **kw), headers=h).status_code


def hint(c: httpx.Client, px, headers: dict, *items: dict, salt: str | None = None) -> httpx.Response:
    payload: dict = {"hints": list(items)}
    if salt is not None:
        payload["cache_salt"] = salt
    return c.post(px.url + HINTS, json=payload, headers=headers)


def outcomes(r: httpx.Response) -> list[str]:
    return [x["outcome"] for x in r.json().get("results", [])] if r.status_code == 200 else [str(r.status_code)]


def hints_state(px) -> dict:
    time.sleep(0.3)  # deferred observations and a plan tick
    return px.state()["hints"]


def measure(case: str, **figures) -> None:
    print(f"MEASURE {case}: " + json.dumps(figures, sort_keys=True))


# --- who may send hints --------------------------------------------------------------------------------
def test_hints_from_a_caller_the_engine_rejects_count_for_nothing(engine_url, tmp_path):
    """Before: a source with no valid key earned standing 0.91 from tenant A's own requests and the
    proxy warmed A's prefix. Now: 401 for every batch, no source record, no plan."""
    with proxy(engine_url, tmp_path, engine="vllm") as px, httpx.Client(timeout=30) as c:
        assert call(c, px, "a1", "start", A, SALT_A) == 200
        answers = []
        for k in range(12):
            for who in (BAD, {}):  # a wrong key, and none at all
                answers += outcomes(
                    hint(
                        c,
                        px,
                        {**who, "x-cachescout-source": "planner"},
                        {"type": "tool_started", "session_id": "a1"},
                        salt=SALT_A,
                    )
                )
                answers += outcomes(hint(c, px, who, {"type": "tool_started", "session_id": "a1"}))
            assert call(c, px, "a1", f"resume {k}", A, SALT_A) == 200  # A's traffic "confirms" the claim
            assert call(c, px, "x", "no", BAD, SALT_A) == 401  # the engine rejects the attacker's calls
        st = hints_state(px)
        standing = max((s["fact_standing"] for s in st["sources"].values()), default=None)
        measure("rejected_caller", accepted=answers.count("accepted"), answers=len(answers), standing=standing)
        assert answers == ["401"] * len(answers)
        assert st["sources"] == {} and st["active_plans"] == 0 and st["open_checks"] == 0
        metrics = c.get(px.url + "/metrics").text
        assert 'cachescout_hints_total{kind="invalid",outcome="unauthorized"} 48.0' in metrics


def test_no_tenant_can_release_another_tenants_session(engine_url, tmp_path):
    """Before: after one confirmed claim, tenant B's session_ended (and a reuse_hint: discard) dropped
    tenant A's session. Now: B releases only its own sessions, whatever salt or id it names."""
    with proxy(engine_url, tmp_path, engine="vllm") as px, httpx.Client(timeout=30) as c:
        assert call(c, px, "shared", "A's work", A, SALT_A) == 200
        assert call(c, px, "plain", "A's unsalted work", A, None) == 200
        assert call(c, px, "b1", "B's work", B, SALT_B) == 200
        for k in range(3):  # B earns a record on its own session: its facts come true
            assert outcomes(hint(c, px, B, {"type": "tool_started", "session_id": "b1"}, salt=SALT_B)) == ["accepted"]
            assert call(c, px, "b1", f"B resumes {k}", B, SALT_B) == 200
        sessions0 = px.state()["stats"]["sessions"]
        said = []
        for salt in (SALT_A, SALT_B, None):  # A's salt, its own, none: A's sessions are never B's
            for sid in ("shared", "plain"):
                said += outcomes(hint(c, px, B, {"type": "session_ended", "session_id": sid}, salt=salt))
        hinted = {"agent_hints": {"reuse_hint": "discard"}}
        assert call(c, px, "shared", "B says discard", B, SALT_B, **hinted) == 200  # B's own (tenant-b, shared)
        st = hints_state(px)
        sessions = px.state()["stats"]["sessions"]
        measure(
            "cross_tenant_release",
            released_sessions=st["released_sessions"],
            sessions_before=sessions0,
            sessions_after=sessions,
            b_answers=said,
        )
        assert st["released_sessions"] == 1  # B's own session, from its discard, and nothing of A's
        assert sessions == sessions0  # A's two stay; B's "shared" came and went
        for _ in range(2):  # A's sessions are alive: A's own hints still act on them
            r = hint(c, px, A, {"type": "tool_started", "session_id": "shared"}, salt=SALT_A)
            assert outcomes(r) == ["accepted"]
        assert hints_state(px)["active_plans"] >= 1


def test_agent_names_cannot_be_hijacked_across_tenants(engine_url, tmp_path):
    """Before: tenant B rebound the name `coder`; tenant A's trusted pin then touched B's anchor.
    Now: names are bound per tenant and credential; A's pin is on A's agent."""
    op_a = source_id(api_key="good", tenant=SALT_A)
    with (
        proxy(engine_url, tmp_path, "engine=vllm", f"hints_directive_sources={op_a}", engine="vllm") as px,
        httpx.Client(timeout=30) as c,
    ):
        named = {"extra_headers": {"x-cachescout-agent": "coder"}}
        for k in range(3):
            assert call(c, px, f"a{k}", f"A {k}", A, SALT_A, agent="coder", **named) == 200
        for k in range(3):  # B binds the same name later, to its own (different) prompt
            assert call(c, px, f"b{k}", f"B {k}", B, SALT_B, agent="planner", **named) == 200
        time.sleep(0.3)
        agents = px.state()["agents"]
        r = hint(c, px, A, {"type": "pin", "agent": "coder", "ttl_s": 60}, salt=SALT_A)
        assert r.status_code == 200 and outcomes(r) == ["accepted"], r.text
        pinned = hints_state(px)["pinned_agents"]
        tenant_of = {a["id"]: a["tenant"] for a in agents}
        measure(
            "agent_name_hijack",
            pinned_tenants=[tenant_of.get(p) for p in pinned],
            tenants=sorted(set(tenant_of.values())),
        )
        assert len(tenant_of) >= 2 and len(set(tenant_of.values())) == 2  # both tenants' agents known
        assert len(pinned) == 1 and tenant_of[pinned[0]] == f"salt:{len(SALT_A)}c"  # A's agent, not B's
        r = hint(c, px, B, {"type": "pin", "agent": "coder", "ttl_s": 60}, salt=SALT_A)  # B is not listed
        assert r.status_code == 403


def test_directive_sources_named_only_in_a_header_are_never_trusted(engine_url, tmp_path):
    """Before: listing a header-named source let anyone who sent the name pin (10/10 forgeries got
    200). Now: only keyed ids count; the header-named id in the setting is ignored."""
    named_only = source_id(source="ops")
    keyed = source_id(api_key="good", source="ops", tenant=SALT_A)
    with (
        proxy(engine_url, tmp_path, f"hints_directive_sources={named_only},{keyed}", engine="vllm") as px,
        httpx.Client(timeout=30) as c,
    ):
        assert call(c, px, "keep", "keep me", A, SALT_A) == 200
        assert call(c, px, "bk", "B", B, SALT_B) == 200
        forged = []
        for k in range(10):
            who = (BAD, {}, B)[k % 3]  # a wrong key, none, another tenant's key: all send the name
            r = hint(c, px, {**who, "x-cachescout-source": "ops"}, {"type": "pin", "session_id": "keep"}, salt=SALT_A)
            forged.append(r.status_code)
        r = hint(
            c, px, {**A, "x-cachescout-source": "ops"}, {"type": "pin", "session_id": "keep", "ttl_s": 30}, salt=SALT_A
        )
        measure("header_named_directive", forged_statuses=forged, keyed_status=r.status_code)
        assert 200 not in forged and set(forged) <= {401, 403}
        assert r.status_code == 200 and outcomes(r) == ["accepted"]
        assert "not derived from an API key ignored" in px.log_text()


# --- floods: every table bounded in bytes ---------------------------------------------------------------
def _flood(px, seconds: float, batches, concurrency: int = 8) -> dict[int, int]:
    """POSTs batches (header dict, JSON body) from a generator for at most ``seconds``."""
    codes: dict[int, int] = {}

    async def run() -> None:
        stop = time.monotonic() + seconds
        it = iter(batches)
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as c:

            async def worker() -> None:
                while time.monotonic() < stop:
                    try:
                        headers, payload = next(it)
                    except StopIteration:
                        return
                    r = await c.post(px.url + HINTS, content=payload, headers=headers)
                    codes[r.status_code] = codes.get(r.status_code, 0) + 1

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    asyncio.run(run())
    return codes


def _fanout_batch(k: int, per: int = 3) -> bytes:
    ids = [f"branch-{k}-{j}-" + "x" * 230 for j in range(64)]  # 64 ids x ~240 chars: the most a hint holds
    return json.dumps(
        {
            "cache_salt": SALT_A,
            "hints": [{"type": "fanout", "session_id": f"f{k}-{i}", "branch_ids": ids} for i in range(per)],
        }
    ).encode()


def _next_agent_batch(k: int) -> bytes:
    return json.dumps(
        {
            "cache_salt": SALT_A,
            "hints": [
                {"type": "next_agent", "session_id": f"n{k}-{i}-" + "s" * 200, "agent": "a" * 250, "probability": 1.0}
                for i in range(64)
            ],
        }
    ).encode()


@pytest.mark.parametrize("kind", ["next_agent", "fanout"])
def test_hint_floods_without_credentials_keep_memory_flat(engine_url, tmp_path, kind):
    """Before (30 s): next_agent RSS 79 -> 775 MB, fanout 79 -> 2,145 MB, /livez p99 195 ms.
    Now: no credential, no read: 401 before parsing; RSS flat."""
    make = _next_agent_batch if kind == "next_agent" else _fanout_batch
    with proxy(engine_url, tmp_path, engine="vllm") as px:
        rss0 = px.rss_mb()
        gen = (
            ({"x-cachescout-source": f"src-{k}", "content-type": "application/json"}, make(k)) for k in range(100_000)
        )
        with livez_probe(px.url, tmp_path) as lat:
            codes = _flood(px, 6.0, gen)
        rss = px.rss_mb()
        st = hints_state(px)
        p99 = statistics.quantiles(lat, n=100)[98] * 1000 if len(lat) > 10 else None
        measure(f"flood_no_credentials_{kind}", codes=codes, rss0=round(rss0), rss=round(rss), livez_p99_ms=p99)
        assert set(codes) == {401} and st["sources"] == {}
        assert rss < 300 and rss - rss0 < 60, (rss0, rss)


@pytest.mark.parametrize("kind", ["next_agent", "fanout"])
def test_hint_floods_with_a_valid_key_stay_within_the_byte_budgets(engine_url, tmp_path, kind):
    """The same floods from a caller the engine accepts, rotating 1,000 source names: every hint
    table stays within its byte budget and RSS < 300 MB."""
    make = _next_agent_batch if kind == "next_agent" else _fanout_batch
    with (
        proxy(engine_url, tmp_path, "hints_max_per_s=1000000", engine="vllm") as px,  # no rate limit: fill the tables
        httpx.Client(timeout=30) as c,
    ):
        assert call(c, px, "seed", "hello", A, SALT_A) == 200
        rss0 = px.rss_mb()
        gen = (
            ({**A, "x-cachescout-source": f"src-{k % 1000}", "content-type": "application/json"}, make(k))
            for k in range(100_000)
        )
        with livez_probe(px.url, tmp_path) as lat:
            codes = _flood(px, 6.0, gen)
        rss = px.rss_mb()
        st = hints_state(px)
        p99 = statistics.quantiles(lat, n=100)[98] * 1000 if len(lat) > 10 else None
        measure(
            f"flood_valid_key_{kind}",
            codes=codes,
            rss0=round(rss0),
            rss=round(rss),
            livez_p99_ms=p99,
            table_bytes=st.get("bytes"),
            open_checks=st.get("open_checks"),
            awaiting_checks=st["awaiting_checks"],
            sources=len(st["sources"]),
        )
        assert codes.get(200, 0) > 50
        b = st["bytes"]
        assert b["sources"] <= 1 << 20 and b["checks"] <= 4 << 20
        assert max(b["plans"], b["pins"], b["names"], b["owners"], b["offered"]) <= 1 << 20
        assert st["awaiting_checks"] == st["open_checks"]
        assert rss < 300, (rss0, rss)


def test_the_calibration_bound_holds_after_700_sources(engine_url, tmp_path):
    """Before: 700 sources in 2 s filled the pending-check table to 8,192, it stayed at 6,135 after
    every deadline (evicted sources' checks never subtracted), and then a lying source was accepted
    40/40 (16 before). Now: the count equals the open checks, and the liar drives at most 16."""
    # ~115 source records (256 KiB): sources are forgotten with checks open however loaded the box is
    settings = ("hints_max_per_s=1000000", "hints_sources_max_bytes=262144")
    with proxy(engine_url, tmp_path, *settings, engine="vllm") as px, httpx.Client(timeout=30) as c:
        assert call(c, px, "seed", "hello", A, SALT_A) == 200
        for k in range(12):
            assert call(c, px, f"t{k}", "target", A, SALT_A) == 200
        payloads = (
            (
                {**A, "x-cachescout-source": f"src-{k}", "content-type": "application/json"},
                json.dumps(
                    {
                        "cache_salt": SALT_A,
                        "hints": [{"type": "tool_started", "session_id": f"t{(k + i) % 12}"} for i in range(8)]
                        + [{"type": "session_ended", "session_id": f"t{(k + i) % 12}-e{i}"} for i in range(8)],
                    }
                ).encode(),
            )
            for k in range(700)
        )
        codes = _flood(px, 10.0, payloads)
        st = hints_state(px)
        filled = (st["awaiting_checks"], st.get("open_checks"), len(st["sources"]))
        liar = {**A, "x-cachescout-source": "liar"}
        said = []
        for k in range(40):
            said += outcomes(hint(c, px, liar, {"type": "tool_started", "session_id": f"ghost-{k}"}, salt=SALT_A))
        st = hints_state(px)
        measure(
            "pending_after_700_sources",
            codes=codes,
            filled_awaiting_open_sources=filled,
            liar_accepted=said.count("accepted"),
            after=(st["awaiting_checks"], st.get("open_checks")),
            bytes=st.get("bytes"),
        )
        assert codes.get(200, 0) >= 200 and set(codes) == {200}  # of 700 offered in <= 10 s (fewer on a loaded box)
        assert filled[2] < codes[200]  # sources were forgotten, with their checks
        assert filled[0] == filled[1] and st["awaiting_checks"] == st["open_checks"]
        assert said.count("accepted") <= 16  # max_unchecked: the liar's hints await their checks
        assert st["bytes"]["checks"] <= 4 << 20


def test_one_credential_is_rate_limited(engine_url, tmp_path):
    """hints_max_per_s (default 1,000) per credential: a burst over it gets 429 before its body is
    parsed and applies nothing."""
    with proxy(engine_url, tmp_path, "hints_max_per_s=500", engine="vllm") as px, httpx.Client(timeout=30) as c:
        assert call(c, px, "seed", "hello", A, SALT_A) == 200
        batch = [{"type": "tool_started", "session_id": f"r{i}"} for i in range(64)]
        codes = [hint(c, px, A, *batch, salt=SALT_A).status_code for _ in range(20)]
        st = hints_state(px)
        measure("rate_limit", codes={k: codes.count(k) for k in set(codes)})
        assert codes[:8] == [200] * 8 and 429 in codes  # 500 tokens: 8 batches of 64 (into debt), then 429
        applied = sum(t["hints"] for s in st["sources"].values() for t in s["kinds"].values())
        assert applied == 64 * codes.count(200)
        r = hint(c, px, A, *batch, salt=SALT_A)
        assert r.status_code in (200, 429) and (
            r.status_code == 200 or r.json()["error"]["code"] == "rate_limit_exceeded"
        )


# --- hints_strip_fields on every body the policy reads ---------------------------------------------------
def test_strip_fields_applies_to_bodies_over_256_kib(engine_url, tmp_path):
    """Before: bodies > 256 KiB kept the fields. Now: every body the policy reads (up to
    policy_max_body_bytes, 4 MiB) is stripped; larger ones pass byte for byte (documented)."""
    with proxy(engine_url, tmp_path, "hints_strip_fields=true", engine="vllm") as px, httpx.Client(timeout=60) as c:
        results = {}
        for size in (1_000, 300_000, 3_000_000, 6_000_000):
            data = body(
                "big",
                "x" * size,
                SALT_A,
                agent_hints={"reuse_hint": "keep"},
                nvext={"cache_control": {"ttl": "5m"}, "keep": 1},
            )
            raw = json.dumps(data).encode()
            got = c.post(px.url + "/echo", content=raw, headers={"content-type": "application/json"}).content
            results[size] = got == raw
            if size <= 4 * 1024 * 1024:
                echoed = json.loads(got)
                assert "agent_hints" not in echoed and echoed["nvext"] == {"keep": 1}, size
                assert echoed["messages"] == data["messages"]
        measure("strip_fields", forwarded_unchanged_by_size=results)
        assert results == {1_000: False, 300_000: False, 3_000_000: False, 6_000_000: True}
        assert px.state()["observer"]["stripped"] == 3
