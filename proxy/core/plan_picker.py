"""The planner's last three stages: the pricer, the picker and the vetoes (mixed into ``Planner``).

    filtered candidate -> PRICER (economics.assess, in engine tokens; a host-tier load and a
    retain have their fixed prices) -> PICKER (best net value first, within the tick's action
    slots and the token bucket) -> VETOES (the runtime's ``action_gate``: observe-only windows
    of the switchback experiment, signals the yield ledger throttles) -> Action.

Why a mixin: the picker spends the planner's own budget state (bucket, in-flight actions,
last-acted times, emitted counts), and one tick's loop over its candidates stays one loop.
"""

from __future__ import annotations

from collections.abc import Callable

from .actions import RETAIN, TOUCH, Action
from .candidates import Candidate, Recorder
from .config import PolicyConfig
from .decisions import ACTED
from .economics import NOTHING, WAIT, Market, Prospect, Verdict, assess
from .plan_filters import FIRST, RESIDENCY, WARM, Filter, Look, enabled
from .residency import ResidencyShadow
from .sessions import SessionTracker

ACTION_GATE = "action_gate"  # the one outside veto's piece name (switchback + yield ledger)
VETO_NAMES = (ACTION_GATE,)

# one priced candidate: (net value, budget cost, kind, candidate, verdict, missing tokens)
Priced = tuple[float, float, str, Candidate, Verdict | None, float]


class Picker(Recorder):
    cfg: PolicyConfig
    residency: ResidencyShadow
    host_residency: ResidencyShadow | None
    sessions: SessionTracker
    dirty: dict[tuple[str, str], None]
    bucket: float
    inflight: dict[tuple[str, float], tuple[float, tuple[int, ...]]]
    last_acted: dict[str, float]
    _safe: dict[str, tuple[int, float]]
    emitted: dict[str, int]
    declined: int
    action_gate: Callable[[str, str, float], bool] | None
    _off: frozenset[str]
    _filters: tuple[tuple[Filter, ...], tuple[Filter, ...], tuple[Filter, ...]] = ((), (), ())

    @staticmethod
    def _enabled_filters(off: frozenset[str]) -> tuple[tuple[Filter, ...], tuple[Filter, ...], tuple[Filter, ...]]:
        """The filter registries minus the pieces switched off (read once per config)."""
        return enabled(FIRST, off), enabled(RESIDENCY, off), enabled(WARM, off)

    def _select(
        self, cands: list[Candidate], now: float, slots: int, busy: bool = False, market: Market | None = None
    ) -> list[Action]:
        """Filter each candidate, price what passes (the action the economics finds worth most:
        touch, warm, retain, or nothing), then pick the best net values within slots and budget."""
        res = self.residency
        m = market if market is not None else Market(capacity_tokens=float(res.capacity_tokens))
        x = Look(self.cfg, res, self.host_residency, now, busy, self.last_acted, self._safe)
        first, after, warm = self._filters
        priced: list[Priced] = []
        for c in cands:
            x.first(c)
            skip = None
            for f in first:
                skip = f(c, x)
                if skip is not None:
                    break
            if skip is not None:
                self._skip(skip, c, now)
                continue
            x.judge(c)
            for f in after:
                skip = f(c, x)
                if skip is not None:
                    break
            if skip is None and x.missing and not x.h_full:
                for f in warm:
                    skip = f(c, x)
                    if skip is not None:
                        break
            if skip is not None:
                self._skip(skip, c, now, None, None if skip == "resident" else x.missing)
                continue
            p = self._price(c, x, m)
            if p is not None:
                priced.append(p)
                x.seen.add(c.anchor_id)
        return self._pick(priced, now, slots)

    def _price(self, c: Candidate, x: Look, m: Market) -> Priced | None:
        """The pricer: a host-tier load is a touch at the load's price; a resident anchor that may
        be retained is a retain; everything else is what ``economics.assess`` finds worth most."""
        cfg, missing = self.cfg, x.missing
        if x.h_full:
            return (missing, cfg.reload_cost_tokens(missing), TOUCH, c, None, missing)
        if x.full and not x.near and x.retainable:
            return (float("inf"), 0.0, RETAIN, c, None, 0.0)
        v = assess(Prospect(x.total, missing, x.near or (bool(missing) and x.resident > 0), c.prob, c.lead, c.soon), m)
        if v.kind == WAIT:
            if c.session is not None and c.session in self.sessions.sessions:
                self.dirty[c.session] = None  # ask again at a tick when the engine has slack
            if v.cost > 0:  # priced: it pays once the clients decoding now are done
                self._skip("wait_for_decodes", c, x.now, v, missing)
            else:
                self._skip("wait_for_slack", c, x.now, None, missing)
            return None
        if v.kind == NOTHING or v.net <= 0:
            self.declined += 1
            self._skip("not_worth_it", c, x.now, v, missing)  # with the saving and cost it compared
            return None
        return (v.net, float(cfg.touch_cost_tokens) if v.kind == TOUCH else missing, v.kind, c, v, missing)

    def _pick(self, priced: list[Priced], now: float, slots: int) -> list[Action]:
        """The picker and the vetoes: best net value first, within slots and the token bucket,
        unless the outside veto (``action_gate``) holds the action back."""
        cfg = self.cfg
        priced.sort(key=lambda e: e[0], reverse=True)
        gate = self.action_gate if ACTION_GATE not in self._off else None
        actions: list[Action] = []
        for _net, cost, kind, c, verdict, lack in priced:
            if len(actions) >= slots:
                self._skip("no_slot", c, now, verdict, lack, kind)
                continue
            if cost > self.bucket:
                self._skip("budget", c, now, verdict, lack, kind)
                continue
            if gate is not None and not gate(c.reason, kind, now):
                self._skip("vetoed", c, now, verdict, lack, kind)
                continue
            self._skip(ACTED, c, now, verdict, lack, kind)
            self.bucket -= cost
            # session contexts get no engine priority unless asked: a priority outlives the pause
            prio = round(c.prob * cfg.retain_priority_scale) if cfg.retain_sessions or not c.context else 0
            action = Action(
                kind=kind,
                reason=c.reason,
                tenant=c.tenant,
                anchor_id=c.anchor_id,
                block_hashes=c.hashes,
                tokens=int(sum(c.block_tokens)),
                payload=c.payload,
                priority=prio,
                created=now,
                deadline=now + cfg.action_ttl_s,
                session=c.session,
            )
            self.last_acted[c.anchor_id] = now
            if kind != RETAIN:
                self.inflight[(c.anchor_id, now)] = (action.deadline, c.block_tokens)
            k = f"{kind}/{c.reason}"
            self.emitted[k] = self.emitted.get(k, 0) + 1
            actions.append(action)
        return actions
