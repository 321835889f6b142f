"""`build_live`: the running policy of one proxy — observer, executor, adapter, scraper, state file.

The app's lifespan calls `build_live(...)` (sync, no I/O), then `await start()`; `stop()` at
shutdown. Everything that talks to the engine happens in `start()` or later, so a proxy whose
engine is not up yet still starts: the adapter then keeps its default capabilities and switches
off whatever fails at run time, with a logged reason. Learned state is saved to `state_path` on
stop and restored on start, so a restart does not forget who follows whom.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

from proxy.core.config import PolicyConfig
from proxy.core.policy import ScoutPolicy
from proxy.core.session_close import CloseParams
from proxy.engines.base import CAP_SESSION_CACHE, EngineSnapshot, HttpEngineAdapter, WarmResult, warm_spec
from proxy.engines.lmcache import LmcacheClient
from proxy.engines.select import NoEngineAdapter, build_adapter
from proxy.engines.sglang import SglangAdapter
from proxy.runtime.executor import ActionExecutor
from proxy.runtime.hint_inputs import build_hint_service
from proxy.runtime.introspection import describe_policy, plain_data
from proxy.runtime.kv_events import KvEvent, KvEventSubscriber
from proxy.runtime.live_policy import LivePolicyObserver
from proxy.runtime.policy_config import executor_limits, policy_config
from proxy.runtime.prefill import PrefillRate
from proxy.runtime.reload_price import ReloadPrice
from proxy.runtime.scraper import EngineScraper
from proxy.runtime.session_lane import SessionLane
from proxy.runtime.sglang_sessions import SessionCacheDriver, default_engine_id
from proxy.runtime.state_file import harden_observer as _harden
from proxy.runtime.state_file import load_learned_state, save_learned_state, tenant_tag
from proxy.runtime.switchback import SelfEvaluation, switchback_config, yield_config

if TYPE_CHECKING:
    from proxy.core.actions import Action
    from proxy.observability.metrics import ProxyMetrics
    from proxy.settings import Settings

log = logging.getLogger("cachescout.live")


class LiveRuntime:
    def __init__(
        self,
        settings: Settings,
        client: httpx.AsyncClient,
        metrics: ProxyMetrics | None,
        clock: Callable[[], float],
        config: PolicyConfig | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.metrics = metrics
        self.clock = clock
        self.config = config or policy_config(settings)
        self.policy = ScoutPolicy(self.config)
        self.observer = LivePolicyObserver(
            self.policy,
            metrics,
            clock,
            block_chars=self.config.block_chars,
            chars_per_token=self.config.chars_per_token,
        )
        self.hints = build_hint_service(settings, self.policy, metrics)  # runtime hints (issue 16)
        self.observer.hints = self.hints
        if self.hints is not None:
            self.hints.after_submit = lambda: self.observer.plan(self.clock())
        self.observer.strip_hint_fields = settings.hints_strip_fields
        key = settings.engine_api_key.get_secret_value() if settings.engine_api_key is not None else None
        self._api_key = key
        self.adapter: HttpEngineAdapter = NoEngineAdapter(client, settings.upstream_url, key)
        self.executor = ActionExecutor(
            self.adapter,
            metrics,
            clock,
            executor_limits(settings),
            # the slack lane: the engine keeps actions behind its own queue, so its length is no reason to wait
            load=lambda: (
                self.observer.inflight,
                self.scraper.waiting if self.scraper and not self.adapter.priority_lane else 0,
            ),
            on_result=self._on_result,
        )
        self.observer.executor = self.executor
        _harden(self.observer, settings)
        self.scraper: EngineScraper | None = None
        self.kv_events: KvEventSubscriber | None = None
        self._tick: asyncio.Task | None = None
        self._capacity: int | None = None
        self.prefill = PrefillRate()
        self.reload = ReloadPrice(settings.host_tier_tokens)
        self.observer.prefill = self.prefill
        self.executor.prefill = self.prefill
        self.budget: dict[str, str | float] = {"source": "core default prefill_tokens_per_s"}
        self._prev_queries: float | None = None
        self._prev_prefill: tuple[float, float] | None = None
        self.state_loaded: str | None = None
        self.lmcache = LmcacheClient(client, settings.lmcache_url) if settings.lmcache_url else None
        self._side_tasks: set[asyncio.Task] = set()
        # self-evaluation: switchback windows and per-signal yield veto actions through one planner hook
        self.selfeval = SelfEvaluation(
            switchback_config(settings),
            yield_config(settings),
            metrics,
            clock,
            seed=settings.switchback_seed,
            turnover_s=lambda: self.policy.residency.lifetime_s(),
        )
        self.policy.planner.action_gate = self.selfeval.gate
        self.observer.selfeval = self.selfeval

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        self.state_loaded = load_learned_state(self.policy, s, self.config.snapshot_max_bytes)
        self.adapter = await build_adapter(
            s.engine,
            self.client,
            s.upstream_url,
            self._api_key,
            model=s.engine_model,
            kv_hints=s.kv_hints,
            request_priority=s.request_priority,
            priority_scheduling=s.engine_priority_scheduling,
            priority_header=s.engine_priority_header,
        )
        self.executor.adapter = self.adapter
        self.observer.role_is_first_output = self.adapter.role_chunk_is_first_output  # times prefill
        self._wire_lanes()
        log.info(
            "cache policy on: engine=%s capabilities=%s disabled=%s",
            self.adapter.name,
            ",".join(sorted(self.adapter.capabilities)) or "-",
            self.adapter.disabled or "-",
        )
        if s.kv_hints or s.request_priority:
            # Opt-in exception to byte-exact forwarding: the observer's rewrite_body adds the adapter's
            # hints (only when the engine has the capability; otherwise request_extras is empty).
            self.observer.extras_for = self.adapter.request_extras
            self.observer.rewrite_enabled = True
            log.info(
                "engine hints on forwarded requests: kv_hints=%s request_priority=%s", s.kv_hints, s.request_priority
            )
        self._wire_session_cache()
        self.scraper = EngineScraper(self.adapter, self.metrics, s.scrape_interval, on_snapshot=self._on_snapshot)
        self.scraper.own = lambda: self.observer.inflight + self.executor.sending
        self.observer.engine_waiting = lambda: self.scraper.waiting if self.scraper else 0
        self.observer.engine_external = lambda: self.scraper.external if self.scraper else 0
        await self.executor.start()
        await self.scraper.start()
        if s.kv_events_endpoint:
            self.kv_events = KvEventSubscriber(s.kv_events_endpoint, on_event=self._on_kv_event)
            await self.kv_events.start()
        self.selfeval.tick(self.clock())
        self._tick = asyncio.create_task(self._tick_loop(), name="cachescout-plan-tick")

    def _wire_lanes(self) -> None:
        """The slack lane follows the adapter's capability; the session lane (opt-in) is built here
        and acts only while that capability holds (docs/live.md "Priority lanes")."""
        adapter, s = self.adapter, self.settings
        self.observer.lane_active = lambda: self.adapter.priority_lane
        self.observer.engine_priority = lambda rank: self.adapter.engine_priority(rank)
        self.observer.priority_by_header = lambda: self.adapter.priority_by_header
        self.observer.session_header = s.session_header
        # the engine knows a conversation by the id the proxy forwarded it with, else by the client's own
        tags = self.observer.tags
        self.policy.residency.engine_session_of = lambda key: tags.tag_of(key) or key[1]
        if s.session_priority != "off":
            self.observer.session_lane = SessionLane(s.session_priority, s.session_priority_ageing_s, self.clock())
        log.info(
            "priority lanes: engine scheduling=%s slack_lane=%s session_lane=%s",
            adapter.scheduling.get("policy"),
            adapter.priority_lane,
            s.session_priority if adapter.priority_lane else f"{s.session_priority} (inactive: no priority policy)",
        )

    def _wire_session_cache(self) -> None:
        """Opt-in `sglang_sessions`: on an SGLang server whose probe found the session radix cache,
        tag forwarded requests with the proxy's sessions and close finished ones (docs/sglang-sessions.md).
        Enables the observer's body rewrite (the one added field)."""
        s, adapter = self.settings, self.adapter
        if not s.sglang_sessions:
            return
        if not isinstance(adapter, SglangAdapter) or CAP_SESSION_CACHE not in adapter.capabilities:
            log.warning("sglang_sessions: inactive (engine %s without the session radix cache)", adapter.name)
            return
        adapter.session_tags = True
        idle = s.sglang_session_default_idle_s
        params = CloseParams(
            quantile=s.sglang_session_close_quantile,
            default_idle_s=idle,
            min_idle_s=min(CloseParams().min_idle_s, idle),
        )
        tags = self.observer.tags

        def engine_id(tenant: str, key: str) -> str:
            # the id X-Session-ID carries for this conversation where the tag book has bound one, so
            # SGLang's session and the router's affinity name the same thing
            return tags.tag_of((tenant, key)) or default_engine_id(tenant, key)

        self.observer.session_cache = SessionCacheDriver(adapter, params, engine_id=engine_id)
        log.info("sglang_sessions: tagging forwarded requests with session_id; closing finished sessions")

    async def stop(self) -> None:
        if self._tick is not None:
            self._tick.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._tick
            self._tick = None
        await self.executor.stop()
        self.observer.offload.close()
        if self.scraper is not None:
            await self.scraper.stop()
        if self.kv_events is not None:
            await self.kv_events.stop()
        save_learned_state(self.policy, self.settings.state_path)

    async def settle(self, timeout: float = 5.0) -> bool:
        """Wait until every client response was observed (and planned from) and the actions it
        queued have run. Tests and notebooks call this between steps of a scripted workload."""
        ok = await self._observed(timeout)
        await self.executor.drain(timeout)
        return ok and not self.executor.pending()

    async def quiesce(self, timeout: float = 5.0) -> bool:
        """Stop starting warmups and wait until no client request, deferred observation or warmup
        is still in progress: after this the engine's counters and the proxy's agree exactly."""
        observed = await self._observed(timeout)
        return await self.executor.quiesce(timeout) and observed

    async def _observed(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not self.observer.settled and loop.time() < end:
            await asyncio.sleep(0.005)
        return self.observer.settled

    async def _tick_loop(self) -> None:
        interval = float(self.settings.policy_plan_interval)
        while True:
            await asyncio.sleep(interval)
            try:
                self.selfeval.tick(self.clock())
                self.observer.plan(self.clock())
                self.observer.update_gauges()
                if self.observer.session_cache is not None:
                    self.observer.session_cache.tick(self.clock())
            except Exception:
                if self.metrics is not None:
                    self.metrics.policy_errors_total.inc()
                log.debug("plan tick failed", exc_info=True)

    def _on_result(self, action: Action, result: WarmResult, now: float) -> None:
        self.observer.note_action(action, result, now)  # yield: before the shadow moves
        self.observer.on_action_result(action, result, now)
        lm = self.lmcache
        if lm is None or not result.ok or lm.disabled or action.priority < lm.pin_min_priority:
            return
        spec = warm_spec(action)
        ids = spec and (spec.token_ids or self.adapter.tokens.get(spec.key))
        if ids:  # pin the anchor in the offload tier too, off the executor's path
            task = asyncio.get_running_loop().create_task(lm.maybe_pin(ids, action.priority))
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)

    # -- engine truth ---------------------------------------------------------------------------------
    def _on_snapshot(self, snap: EngineSnapshot) -> None:
        """Each scrape (the first runs at start): engine capacity -> the residency shadow; counters
        that went backwards (engine restarted) -> the shadow is cleared; prefill time -> the rate
        the warmup budget follows. The waiting queue reaches the core through `observer.load()`."""
        new_capacity: int | None = None
        capacity = snap.capacity_tokens or (
            snap.capacity_blocks * snap.block_size if snap.capacity_blocks and snap.block_size else None
        )
        if capacity:
            # The shadow counts the views' estimated tokens (characters / chars_per_token); the engine
            # counts its tokenizer's: convert with the calibrated ratio (engine tokens per view token).
            ratio = self.observer.token_ratio or 1.0
            capacity = int(capacity / max(0.05, ratio))
            if self._capacity is None or abs(capacity - self._capacity) > 0.05 * self._capacity:
                self._capacity = new_capacity = capacity
        usage = self._kv_events_usage(snap)
        if usage is None:
            usage = snap.kv_usage
        cleared = False
        if snap.prefix_queries is not None:
            if self._prev_queries is not None and snap.prefix_queries < self._prev_queries:
                cleared = True  # counters restarted: so did the engine's cache
            self._prev_queries = snap.prefix_queries
        if new_capacity is not None or usage is not None or cleared:
            self.policy.residency.on_engine_truth(capacity_tokens=new_capacity, usage_ratio=usage, cleared=cleared)
        if snap.prefill_seconds is not None and snap.prompt_tokens is not None:
            self.prefill.add_engine_totals(snap.prompt_tokens - (snap.prefix_hits or 0.0), snap.prefill_seconds)
        if snap.prefill_seconds is not None:
            # share of wall time the engine spent prefilling since the last scrape: the price of
            # engine time a warm takes from traffic (core economics)
            now = self.clock()
            prev = self._prev_prefill
            if prev is not None and now > prev[0] and snap.prefill_seconds >= prev[1]:
                self.observer.utilisation = min(1.0, (snap.prefill_seconds - prev[1]) / (now - prev[0]))
            self._prev_prefill = (now, snap.prefill_seconds)
        self._apply_prefill_rate()
        self._apply_reload_price(snap)

    def _apply_reload_price(self, snap: EngineSnapshot) -> None:
        """Engine truth about its host tier -> the core's reload price (a load, not a recompute) and a
        shadow of the tier (its size in the views' tokens, like the GPU capacity above)."""
        self.reload.add(snap)
        over = self.reload.overrides()
        cfg = self.policy.config
        changed: dict[str, float] = {}
        rate = over.get("reload_tokens_per_s")
        if rate and abs(rate - cfg.reload_tokens_per_s) > 0.1 * max(cfg.reload_tokens_per_s, 1.0):
            changed["reload_tokens_per_s"] = rate
        tokens = over.get("host_tier_tokens")
        if tokens:
            tokens = int(tokens / max(0.05, self.observer.token_ratio or 1.0))
            if abs(tokens - cfg.host_tier_tokens) > 0.05 * max(cfg.host_tier_tokens, 1):
                changed["host_tier_tokens"] = tokens
        if not changed:
            return
        cfg = self.policy.engine_truth(**changed)
        log.info(
            "engine host tier: reload %.0f tokens/s, %d tokens modelled", cfg.reload_tokens_per_s, cfg.host_tier_tokens
        )

    def _on_kv_event(self, ev: KvEvent) -> None:
        """Engine block ids are not the views' ids: only a full clear maps onto the shadow directly
        (stored/removed events feed the subscriber's own token-keyed residency and the usage figure).
        Stored events with a session id and every GPU removal feed the core's residency by session
        (`core/session_residency.py`: which blocks of a conversation are resident, exactly), in the
        views' token units (the calibrated engine-tokens-per-view-token ratio)."""
        res = self.policy.residency
        if ev.kind == "cleared":
            res.on_engine_truth(cleared=True)
            res.sessions.cleared()
        elif ev.medium not in (None, "GPU", "gpu"):
            return
        elif ev.kind == "stored" and ev.session_id:
            per = ev.block_size or (len(ev.token_ids) // max(1, len(ev.block_hashes)))
            ratio = self.observer.token_ratio or 1.0
            res.sessions.stored(ev.session_id, ev.block_hashes, max(1, round(per / max(0.05, ratio))))
        elif ev.kind == "removed" and res.sessions and res.sessions.removed(ev.block_hashes):
            res.epoch += 1  # a conversation lost blocks: the planner's "resident" memos are stale

    def _kv_events_usage(self, snap: EngineSnapshot) -> float | None:
        """Share of the engine's blocks holding cached prefixes, counted from KV events (exact, unlike
        the scraped usage gauge, which counts blocks held by running requests)."""
        sub = self.kv_events
        if sub is None or sub.messages == 0 or not snap.capacity_blocks:
            return None
        return min(1.0, len(sub.residency.resident) / snap.capacity_blocks)

    def _apply_prefill_rate(self) -> None:
        """The measured prefill rate becomes the core's `prefill_tokens_per_s`: its "can a warm
        finish before the demand" test and, unless the operator fixed `warmup_tokens_per_s`, its
        auto warmup budget (`warmup_share` × rate). The core's config is frozen: a changed copy is
        swapped into the policy and its planner (the planner re-reads it at every refill)."""
        rate = self.prefill.tokens_per_s()
        cfg = self.policy.config
        if rate is not None and abs(rate - cfg.prefill_tokens_per_s) > 0.1 * cfg.prefill_tokens_per_s:
            cfg = self.policy.engine_truth(prefill_tokens_per_s=rate)
            log.info(
                "engine prefill rate %.0f tokens/s (%s): warmup budget %.0f tokens/s, burst %.0f",
                rate,
                self.prefill.source,
                *cfg.warm_budget(),
            )
        if rate is not None:
            refill, burst = cfg.warm_budget()
            self.budget = {
                "source": f"measured ({self.prefill.source})",
                "measured_prefill_tokens_per_s": round(rate),
                "prefill_tokens_per_s": round(cfg.prefill_tokens_per_s),
                "warmup_share": cfg.warmup_share,
                "fixed": bool(cfg.warmup_tokens_per_s),
                "warmup_tokens_per_s": round(refill),
                "warmup_burst_tokens": round(burst),
            }

    # -- introspection ----------------------------------------------------------------------------------
    def engine_info(self) -> dict[str, object]:
        info = self.adapter.info()
        info["scrape"] = self.scraper.info() if self.scraper is not None else None
        info["kv_events"] = self.kv_events.info() if self.kv_events is not None else None
        info["executor"] = dict(self.executor.stats)
        info["lmcache"] = self.lmcache.info() if self.lmcache is not None else None
        info["host_tier"] = self.reload.info()
        info["warmup_budget"] = dict(self.budget)
        info["shadow_capacity_tokens"] = self._capacity
        cache = self.observer.session_cache
        info["sglang_sessions"] = cache.info() if cache is not None else {"mode": "off"}
        lane = self.observer.session_lane
        info["session_lane"] = (
            dict(lane.info(), active=self.adapter.priority_lane) if lane is not None else {"mode": "off"}
        )
        return info

    def debug_state(self) -> dict[str, object]:
        stats = self.policy.stats()
        plain = plain_data(stats)
        assert isinstance(plain, dict), "PolicyStats is a dataclass"
        plain["predictability_by_tenant"] = {tenant_tag(k): v for k, v in stats.predictability_by_tenant.items()}
        out: dict[str, object] = {"stats": plain}
        out.update(describe_policy(self.policy, self.clock()))
        out["pending_actions"] = self.executor.pending()
        out["recent_actions"] = list(self.executor.recent)[-20:]
        # why the planner did or did not act: its recent decisions with the figures each stage compared
        out["decisions"] = self.policy.planner.decisions.rows(self.clock())
        out["observer"] = dict(self.observer.counts, inflight=self.observer.inflight)
        out["state_loaded_from"] = self.state_loaded
        out["self_evaluation"] = self.selfeval.describe()
        if self.hints is not None:
            out["hints"] = self.hints.driver.report()
        return out


def build_live(
    settings: Settings, client: httpx.AsyncClient, metrics: ProxyMetrics | None, clock: Callable[[], float]
) -> LiveRuntime | None:
    """The live policy for `create_app`; None when the policy is switched off."""
    if not settings.policy_enabled:
        return None
    return LiveRuntime(settings, client, metrics, clock)
