"""`cachescout serve`: run the proxy under uvicorn.

One worker on purpose: the learned agent/transition state lives in this process, and several
workers would each learn a fragment. uvloop and httptools are used when installed (uvicorn's
"auto"). uvicorn's own `server`/`date` headers are off so that the engine's come through unchanged.

Flags default to None so that `CACHESCOUT_*` env vars (then the Settings defaults) apply; a flag
given on the command line wins. `--set name=value` reaches any Settings field, including the ones
other areas append, without a flag of its own.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import typing

from proxy.settings import Settings, SettingsError, load_settings

FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--upstream", "upstream_url", str, "engine base URL, e.g. http://127.0.0.1:8000"),
    ("--host", "host", str, "bind address (default 127.0.0.1)"),
    ("--port", "port", int, "bind port (default 9000)"),
    ("--connect-timeout", "connect_timeout", float, "seconds to connect upstream (default 5)"),
    ("--read-timeout", "read_timeout", float, "max seconds between upstream bytes (default 600)"),
    ("--write-timeout", "write_timeout", float, "seconds to send a body upstream (default 60)"),
    ("--pool-timeout", "pool_timeout", float, "seconds to wait for a pooled connection (default 30)"),
    ("--max-connections", "max_connections", int, "upstream connection pool size (default 512)"),
    ("--max-keepalive-connections", "max_keepalive_connections", int, "idle upstream connections kept (default 128)"),
    (
        "--upstream-keepalive",
        "upstream_keepalive_s",
        float,
        "idle seconds before an upstream connection is dropped, below the engine's 5 s (default 4)",
    ),
    ("--max-body-bytes", "max_body_bytes", int, "largest request body, 413 above (default 64 MiB)"),
    ("--log-level", "log_level", str, "critical|error|warning|info|debug|trace (default info)"),
    ("--upstream-transport", "upstream_transport", str, "aiohttp (default, faster) | httpx"),
    (
        "--session-priority",
        "session_priority",
        str,
        "off (default) | continue | las: set `priority` on client requests without one (changes the engine's "
        "order; only when the engine schedules by priority)",
    ),
    ("--engine-priority-scheduling", "engine_priority_scheduling", str, "auto (probe, default) | on | off"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, dest, type_, help_text in FLAGS:
        parser.add_argument(flag, dest=dest, type=type_, default=None, help=help_text)
    parser.add_argument(
        "--no-policy",
        dest="policy_enabled",
        action="store_const",
        const=False,
        default=None,
        help="plain pass-through proxy: do not learn or warm anything",
    )
    parser.add_argument(
        "--set",
        dest="extra_settings",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set any Settings field (repeatable), e.g. --set readiness_cache_seconds=5",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request (costs CPU)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Flags > env > defaults. Raises SettingsError (one line) on any bad value."""
    values: dict[str, object] = {}
    for item in getattr(args, "extra_settings", []) or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SettingsError(f"invalid configuration: --set expects NAME=VALUE, got {item!r}")
        values[name.strip()] = _decode_complex(name.strip(), value)
    for _flag, dest, _type, _help in FLAGS:  # a flag given wins; an absent one leaves --set alone
        if getattr(args, dest, None) is not None:
            values[dest] = getattr(args, dest)
    if getattr(args, "policy_enabled", None) is not None:
        values["policy_enabled"] = args.policy_enabled
    unknown = [k for k in values if k not in Settings.model_fields]
    if unknown:
        raise SettingsError(f"invalid configuration: unknown setting(s) {', '.join(sorted(unknown))}")
    return load_settings(**values)


def _decode_complex(name: str, value: str) -> object:
    """`--set policy_overrides={"cooldown_s": 2}`: dict/list fields take JSON, as their env vars do."""
    field = Settings.model_fields.get(name)
    if field is None:
        return value
    annotation = field.annotation
    if annotation in (dict, list) or typing.get_origin(annotation) in (dict, list):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise SettingsError(f"invalid configuration: --set {name}: not JSON ({exc})") from None
    return value


def uvicorn_kwargs(settings: Settings, access_log: bool = False) -> dict:
    """How the proxy is served; shared by `serve` and anything that embeds the proxy (demo, tests).
    The client-facing limits (`Settings.server_*`, see proxy/http/server_limits.py) ride on a
    subclass of uvicorn's httptools protocol; without httptools, h11's header-size cap stands in."""
    try:
        from proxy.http.server_limits import ServerLimits, limited_protocol

        http: object = limited_protocol(ServerLimits.from_settings(settings))
    except ImportError:  # no httptools: h11 bounds the header block itself
        http = "h11"
    return {
        "host": settings.host,
        "port": settings.port,
        "loop": "auto",  # uvloop when installed
        "http": http,
        "h11_max_incomplete_event_size": settings.server_max_header_bytes + settings.server_max_request_line_bytes,
        "timeout_keep_alive": settings.server_keep_alive_s,
        "log_level": settings.log_level,
        "access_log": access_log,
        "server_header": False,  # the engine's Server/Date headers pass through; do not add ours
        "date_header": False,
        "lifespan": "on",
        "timeout_graceful_shutdown": settings.shutdown_grace_seconds,
    }


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"cachescout serve: {exc}", file=sys.stderr)
        return 2

    import uvicorn

    from proxy.http.app import create_app

    level = settings.log_level.upper() if settings.log_level != "trace" else "DEBUG"
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.log_level not in ("debug", "trace"):
        # httpx logs every request at INFO: noise, and CPU on the hot path.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    from proxy.http.server_limits import raise_fd_limit

    raise_fd_limit()
    from proxy.http.allocator import set_mmap_threshold

    set_mmap_threshold(settings.malloc_mmap_threshold_bytes)
    app = create_app(settings)
    logging.getLogger("cachescout.serve").info(
        "cachescout proxy on http://%s:%d -> %s (policy %s)",
        settings.host,
        settings.port,
        settings.upstream_url,
        "on" if settings.policy_enabled else "off",
    )
    uvicorn.run(app, workers=1, **uvicorn_kwargs(settings, access_log=bool(getattr(args, "access_log", False))))
    return 0
