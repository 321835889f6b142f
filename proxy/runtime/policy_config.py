"""The one place `Settings` become the policy core's `PolicyConfig` and the executor's limits.

Why one function: the live proxy, the replay evaluator and the demo's proxy must run the same
policy, or the replay's figures say nothing about production. Engine truth that the live proxy
learns at run time (cache capacity, prefill rate) is an argument here, so the replay passes its
simulated engine's values where the live proxy would measure them.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from proxy.core.config import PolicyConfig, removed_names
from proxy.runtime.executor import ExecutorLimits

if TYPE_CHECKING:
    from proxy.settings import Settings

Scalar = bool | int | float | str  # a PolicyConfig field's value
log = logging.getLogger("cachescout.policy_config")
_warned: set[str] = set()  # removed names already warned about (one warning per name per process)


def policy_config(
    settings: Settings,
    *,
    capacity_tokens: int | None = None,
    prefill_tokens_per_s: float | None = None,
    retain: bool | None = None,
    reload: tuple[float, float] | None = None,
    host_tier_tokens: int | None = None,
) -> PolicyConfig:
    """PolicyConfig from Settings: the executor-facing knobs, the operator's overrides, engine truth.

    `max_concurrent` (actions the planner may have unanswered) is twice the executor's workers so a
    worker never idles waiting for the planner's next tick; `action_ttl_s` and `max_engine_waiting`
    are the executor's own limits, so the planner never emits what the executor would drop."""
    overrides: dict[str, Scalar] = {
        "action_ttl_s": float(settings.action_ttl),
        "max_concurrent": int(settings.action_concurrency) * 2,
        "max_engine_waiting": int(settings.action_max_waiting),
    }
    if settings.policy_r_min is not None:
        overrides["r_min"] = float(settings.policy_r_min)
    if settings.host_tier_tokens:
        overrides["host_tier_tokens"] = int(settings.host_tier_tokens)
    if host_tier_tokens:
        overrides["host_tier_tokens"] = int(host_tier_tokens)
    if reload is not None:  # a host tier's load price: (tokens/s, latency s)
        overrides["reload_tokens_per_s"], overrides["reload_latency_s"] = float(reload[0]), float(reload[1])
    share = settings.warmup_prefill_share
    if share is not None:
        overrides["warmup_share"] = float(share)
    if capacity_tokens is not None:
        overrides["residency_capacity_tokens"] = int(capacity_tokens)
    if prefill_tokens_per_s:
        overrides["prefill_tokens_per_s"] = float(prefill_tokens_per_s)
    if retain is not None:
        overrides["retain_enabled"] = bool(retain)
    overrides.update(settings.policy_overrides)  # unknown names raise, removed ones are dropped
    warn_removed(overrides)
    cfg = PolicyConfig()
    known = {f.name for f in dataclasses.fields(PolicyConfig)}
    typed = {k: _cast(getattr(cfg, k), v) for k, v in overrides.items() if k in known}
    return cfg.with_overrides(**{**overrides, **typed})


def warn_removed(overrides: dict[str, Scalar]) -> None:
    """One warning per removed setting or piece a deployment still names (PolicyConfig drops them:
    config.REMOVED_SETTINGS / REMOVED_PIECES), so an old configuration starts and says what to delete."""
    fresh = [n for n in removed_names(overrides) if n not in _warned]
    if fresh:
        _warned.update(fresh)
        log.warning(
            "policy overrides (CACHESCOUT_POLICY_OVERRIDES / --scout-set) name removed settings or planner "
            "pieces, ignored: %s (issue 26: they earned nothing on the headroom grid, docs/policy.md)",
            ", ".join(fresh),
        )


def executor_limits(settings: Settings) -> ExecutorLimits:
    """The live executor's rules (queue bound, workers, yield-to-traffic thresholds).

    Its waiting-queue limit is the planner's `max_engine_waiting` of the same settings (one value:
    `action_max_waiting`, or a `policy_overrides` entry for `max_engine_waiting` where an operator
    set one), so the two can never disagree."""
    return ExecutorLimits(
        queue_size=settings.action_queue_size,
        concurrency=settings.action_concurrency,
        max_inflight=settings.action_max_inflight,
        max_waiting=policy_config(settings).max_engine_waiting,
    )


def _cast(default: object, value: Scalar) -> Scalar:
    """`value` as the type of the field's default (JSON/env overrides arrive as bool, float or str)."""
    if isinstance(default, bool):
        if isinstance(value, (bool, int, float)):
            return bool(value)
        return str(value).lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    if isinstance(default, str):
        return str(value)
    return value
