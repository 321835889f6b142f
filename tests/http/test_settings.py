"""Configuration: defaults, env vars, flags, and one-line failures at start."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from proxy.http import serve
from proxy.settings import Settings, SettingsError, load_settings

from .conftest import REPO_ROOT


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_are_stream_friendly() -> None:
    s = Settings()
    assert s.port == 9000
    assert s.read_timeout >= 300, "a short read timeout cuts long streams"
    assert s.policy_enabled is True
    assert s.admin_token is None


def test_env_vars_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHESCOUT_UPSTREAM_URL", "http://10.0.0.1:8000/")
    monkeypatch.setenv("CACHESCOUT_READ_TIMEOUT", "42")
    monkeypatch.setenv("CACHESCOUT_ADMIN_TOKEN", "s3cret")
    s = load_settings()
    assert s.upstream_url == "http://10.0.0.1:8000"
    assert s.read_timeout == 42
    assert s.admin_token is not None and s.admin_token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(s)


def test_flags_beat_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHESCOUT_PORT", "9100")
    monkeypatch.setenv("CACHESCOUT_READ_TIMEOUT", "42")
    s = serve.settings_from_args(parse(["--port", "9200", "--no-policy", "--set", "readiness_cache_seconds=7"]))
    assert (s.port, s.read_timeout, s.policy_enabled, s.readiness_cache_seconds) == (9200, 42, False, 7)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"upstream_url": "localhost:8000"}, "upstream_url"),
        ({"upstream_url": "ftp://x"}, "upstream_url"),
        ({"upstream_url": "http://host:notaport"}, "upstream_url"),
        ({"connect_timeout": -1}, "connect_timeout"),
        ({"read_timeout": 0}, "read_timeout"),
        ({"port": 70000}, "port"),
        ({"log_level": "loud"}, "log_level"),
        ({"max_connections": 0}, "max_connections"),
    ],
)
def test_bad_values_fail_in_one_line(kwargs: dict, needle: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(**kwargs)
    message = str(err.value)
    assert "\n" not in message
    assert needle in message and f"CACHESCOUT_{needle.upper()}" in message


def test_set_accepts_json_for_dict_fields() -> None:
    if "policy_overrides" not in Settings.model_fields:
        pytest.skip("no dict-typed setting defined (policy settings block absent)")
    s = serve.settings_from_args(parse(["--set", 'policy_overrides={"cooldown_s": 2}']))
    assert s.policy_overrides == {"cooldown_s": 2}
    with pytest.raises(SettingsError, match="not JSON"):
        serve.settings_from_args(parse(["--set", "policy_overrides={oops"]))


def test_uvicorn_kwargs_keep_engine_headers_and_grace() -> None:
    kw = serve.uvicorn_kwargs(Settings(port=9100, shutdown_grace_seconds=7))
    assert (kw["port"], kw["server_header"], kw["date_header"], kw["timeout_graceful_shutdown"]) == (
        9100,
        False,
        False,
        7,
    )


def test_unknown_set_name_is_rejected() -> None:
    with pytest.raises(SettingsError, match="unknown setting"):
        serve.settings_from_args(parse(["--set", "no_such_field=1"]))


def test_cli_bad_config_exits_with_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--read-timeout", "-5"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "read_timeout" in lines[0], proc.stderr


async def test_removed_policy_settings_start_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26 removed the planner filters warm_too_early / warm_too_late / warm_too_big and the
    settings only they read: a deployment that still names them (CACHESCOUT_POLICY_OVERRIDES, also
    in disabled_pieces) starts with the policy built, the names ignored, and one warning."""
    import logging

    import httpx

    from proxy.runtime import policy_config

    from .conftest import proxied

    monkeypatch.setattr(policy_config, "_warned", set())
    monkeypatch.setenv(
        "CACHESCOUT_POLICY_OVERRIDES",
        '{"warm_max_cache_share": 0.75, "warm_lifetime_share": 0.0, "min_lead_s": 0.2,'
        ' "disabled_pieces": "warm_too_early,cooldown,warm_too_big"}',
    )
    overrides = load_settings().policy_overrides
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"ok"))
    with caplog.at_level(logging.WARNING, logger="cachescout.policy_config"):
        async with proxied(transport, policy_enabled=True, engine="none", policy_overrides=overrides) as (client, app):
            assert (await client.post("/v1/completions", content=b"{}")).status_code == 200
            live = app.state.live  # type: ignore[attr-defined]
            assert live is not None, "the policy failed to build: the proxy forwards without it"
            cfg = live.config
            assert cfg.disabled_pieces == ("cooldown",) and cfg.min_lead_s == 0.2  # still a setting
            assert not hasattr(cfg, "warm_max_cache_share")
    warnings = [r.getMessage() for r in caplog.records if r.name == "cachescout.policy_config"]
    assert len(warnings) == 1, warnings  # once, though the settings are read more than once at start
    for name in ("warm_max_cache_share", "warm_lifetime_share", "warm_too_early", "warm_too_big"):
        assert name in warnings[0]
    assert "cooldown" not in warnings[0] and "min_lead_s" not in warnings[0]
