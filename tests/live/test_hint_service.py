"""The hints endpoint's gate (issue 22), in process: only credentials the engine accepted, within
their TTL and rate; the batch's cache_salt is its tenant; directive sources must be keyed."""

from __future__ import annotations

import json
import logging

from proxy.core.hints import source_id
from proxy.core.policy import ScoutPolicy
from proxy.runtime.body_rewrite import parse_if_hinted
from proxy.runtime.hint_inputs import build_hint_service, hint_config, principal_of
from proxy.settings import Settings

KEY = {"authorization": "Bearer k1"}


def service(**kw):
    return build_hint_service(Settings(**kw), ScoutPolicy())


def post(svc, hints, headers=KEY, now=1.0, **extra):
    return svc.handle(json.dumps({"hints": hints, **extra}).encode(), headers, now)


def test_principals_are_hashes_of_the_credential():
    p = principal_of(KEY)
    assert p.startswith("p") and "k1" not in p and p == principal_of({"authorization": "Bearer k1"})
    assert principal_of({"x-api-key": "k1"}) != p and principal_of({}) == ""


def test_only_a_credential_the_engine_accepted_recently_may_send_hints():
    svc = service(hints_credential_ttl_s=60)
    status, body = post(svc, [{"type": "tool_started", "session_id": "s"}])
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert not svc.driver.trust.sources  # nothing read, nothing counted against a source
    svc.credential_seen({**KEY, "content-type": "application/json"}, 1.0)  # a 2xx model call
    assert post(svc, [{"type": "tool_started", "session_id": "s"}], now=2.0)[0] == 200
    assert post(svc, [{"type": "tool_started", "session_id": "s"}], headers={"authorization": "Bearer k2"})[0] == 401
    assert post(svc, [{"type": "tool_started", "session_id": "s"}], now=62.0)[0] == 401  # stale
    assert svc.counts["unauthorized"] == 3


def test_the_rate_limit_answers_429_before_parsing():
    svc = service(hints_max_per_s=100)
    svc.credential_seen(KEY, 0.0)
    batch = [{"type": "tool_started", "session_id": f"s{i}"} for i in range(64)]
    assert post(svc, batch, now=1.0)[0] == 200
    assert post(svc, batch, now=1.0)[0] == 200  # 36 tokens left: into debt (-28)
    status, body = svc.handle(b"{not json", KEY, 1.0)
    assert status == 429 and body["error"]["code"] == "rate_limit_exceeded"  # not a 400: never parsed
    assert post(svc, batch, now=2.0)[0] == 200  # refilled


def test_the_batch_cache_salt_is_its_tenant_and_part_of_the_source():
    svc = service()
    svc.credential_seen(KEY, 0.0)
    status, body = post(svc, [{"type": "tool_started", "session_id": "s"}], cache_salt="salt-1")
    assert status == 200 and body["source"] == source_id(api_key="k1", tenant="salt-1") != source_id(api_key="k1")
    assert post(svc, [{"type": "tool_started", "session_id": "s"}], cache_salt=7)[0] == 400


def test_directive_sources_named_only_by_a_header_are_ignored(caplog):
    keyed = source_id(api_key="k1", source="ops")
    with caplog.at_level(logging.WARNING, "cachescout.hints"):
        cfg = hint_config(Settings(hints_directive_sources=f"{source_id(source='ops')},anonymous,{keyed}"))
    assert cfg.directive_sources == frozenset({keyed})
    assert "not derived from an API key ignored" in caplog.text


def test_hint_fields_are_found_without_parsing_bodies_that_have_none():
    assert parse_if_hinted(b'{"messages": [], "model": "m"}') is None
    assert parse_if_hinted(b'{"agent_hints": {"reuse_hint": "discard"}}') == {"agent_hints": {"reuse_hint": "discard"}}
    assert parse_if_hinted(b'{"nvext": broken') is None
