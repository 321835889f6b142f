"""The planner's last three stages: the pricer, the picker and the vetoes.

    filtered candidate -> PRICER (economics.assess, in engine tokens; a host-tier load and a
    retain have their fixed prices) -> PICKER (best net value first, within the tick's action
    slots and the token bucket) -> VETOES (``Veto`` pieces; today ``ActionGate``, the runtime's
    gate: observe-only windows of the switchback experiment, signals the yield ledger throttles)
    -> Action.

Why a collaborator with its own state (``Spend``: the bucket, in-flight actions, last-acted times,
emitted counts): the picker spends it and the planner refills it; both hold the one ``Spend``,
and the picker records through the planner's ``Recorder``, so neither reads the other's privates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .actions import RETAIN, TOUCH, Action
from .candidates import Candidate, Recorder
from .config import PolicyConfig
from .decisions import ACTED
from .economics import NOTHING, WAIT, Market, Prospect, Verdict, assess
from .plan_filters import Look
from .plan_piece import PICKER, PRICER, VETO, Piece
from .sessions import SessionTracker

# what the two stages that are not pieces record (plan_registry adds them to the skip reasons)
PRICER_SKIPS = ("wait_for_slack", "wait_for_decodes", "not_worth_it")
PICKER_SKIPS = ("no_slot", "budget")

# one priced candidate: (net value, budget cost, kind, candidate, verdict, missing tokens)
Priced = tuple[float, float, str, Candidate, Verdict | None, float]
CandidateCheck = Callable[[Candidate, Look], "str | None"]


class Veto(Piece):
    """A veto piece: asked once per action about to be emitted; False holds it back (``vetoed``)."""

    kind = VETO
    skips = ("vetoed",)

    def allows(self, c: Candidate, kind: str, now: float) -> bool:
        return True


class ActionGate(Veto):
    """The runtime's gate (``hook``: (reason, kind, now) -> may it be emitted?), set by the live
    runtime and the replay (``Planner.action_gate``): observe-only windows of the switchback
    experiment, signals the yield ledger throttles (runtime/switchback.py)."""

    name = "action_gate"

    def __init__(self) -> None:
        self.hook: Callable[[str, str, float], bool] | None = None

    def allows(self, c: Candidate, kind: str, now: float) -> bool:
        hook = self.hook
        return hook is None or hook(c.reason, kind, now)


@dataclass(slots=True)
class Spend:
    """What acting spends and remembers: the warm token bucket, the unanswered actions, when each
    anchor was last acted on (the cooldown reads it), the emitted counts by ``kind/reason``."""

    bucket: float
    inflight: dict[tuple[str, float], tuple[float, tuple[int, ...]]] = field(default_factory=dict)
    last_acted: dict[str, float] = field(default_factory=dict)
    emitted: dict[str, int] = field(default_factory=dict)
    declined: int = 0  # candidates the economics found not worth acting on


@dataclass(slots=True)
class Phases:
    """The enabled filters' checks by phase, and the enabled vetoes (plan_registry.Pipeline)."""

    first: tuple[CandidateCheck, ...] = ()
    residency: tuple[CandidateCheck, ...] = ()
    warm: tuple[CandidateCheck, ...] = ()
    vetoes: tuple[Veto, ...] = ()
    by: dict[CandidateCheck, str] = field(default_factory=dict)  # check -> its piece's name


class Picker:
    """Filters, prices and picks one tick's candidates (``select``)."""

    def __init__(self, rec: Recorder, spend: Spend) -> None:
        self.rec = rec
        self.spend = spend

    def select(
        self,
        cands: Sequence[Candidate],
        x: Look,
        phases: Phases,
        slots: int,
        m: Market,
        sessions: SessionTracker,
        dirty: dict[tuple[str, str], None],
    ) -> list[Action]:
        """Filter each candidate, price what passes (the action the economics finds worth most:
        touch, warm, retain, or nothing), then pick the best net values within slots and budget."""
        rec, now, by = self.rec, x.now, phases.by
        first, after, warm = phases.first, phases.residency, phases.warm
        priced: list[Priced] = []
        for c in cands:
            x.first(c)
            skip = None
            for f in first:
                skip = f(c, x)
                if skip is not None:
                    rec.decide(by[f], skip, c, now)
                    break
            if skip is not None:
                continue
            x.judge(c)
            hit = None
            for f in after:
                skip = f(c, x)
                if skip is not None:
                    hit = f
                    break
            if skip is None and x.missing and not x.h_full:
                for f in warm:
                    skip = f(c, x)
                    if skip is not None:
                        hit = f
                        break
            if hit is not None and skip is not None:
                rec.decide(by[hit], skip, c, now, None, None if skip == "resident" else x.missing)
                continue
            p = self._price(c, x, m, sessions, dirty)
            if p is not None:
                priced.append(p)
                x.seen.add(c.anchor_id)
        return self._pick(priced, now, slots, x.cfg, phases.vetoes)

    def _price(
        self, c: Candidate, x: Look, m: Market, sessions: SessionTracker, dirty: dict[tuple[str, str], None]
    ) -> Priced | None:
        """The pricer: a host-tier load is a touch at the load's price; a resident anchor that may
        be retained is a retain; everything else is what ``economics.assess`` finds worth most."""
        cfg, missing = x.cfg, x.missing
        if x.h_full:
            return (missing, cfg.reload_cost_tokens(missing), TOUCH, c, None, missing)
        if x.full and not x.near and x.retainable:
            return (float("inf"), 0.0, RETAIN, c, None, 0.0)
        v = assess(Prospect(x.total, missing, x.near or (bool(missing) and x.resident > 0), c.prob, c.lead, c.soon), m)
        if v.kind == WAIT:
            if c.session is not None and c.session in sessions.sessions:
                dirty[c.session] = None  # ask again at a tick when the engine has slack
            if v.cost > 0:  # priced: it pays once the clients decoding now are done
                self.rec.decide(PRICER, "wait_for_decodes", c, x.now, v, missing)
            else:
                self.rec.decide(PRICER, "wait_for_slack", c, x.now, None, missing)
            return None
        if v.kind == NOTHING or v.net <= 0:
            self.spend.declined += 1
            self.rec.decide(PRICER, "not_worth_it", c, x.now, v, missing)  # with the saving and cost it compared
            return None
        return (v.net, float(cfg.touch_cost_tokens) if v.kind == TOUCH else missing, v.kind, c, v, missing)

    def _pick(
        self, priced: list[Priced], now: float, slots: int, cfg: PolicyConfig, vetoes: tuple[Veto, ...]
    ) -> list[Action]:
        """The picker and the vetoes: best net value first, within slots and the token bucket,
        unless a veto holds the action back."""
        rec, spend = self.rec, self.spend
        priced.sort(key=lambda e: e[0], reverse=True)
        actions: list[Action] = []
        for _net, cost, kind, c, verdict, lack in priced:
            if len(actions) >= slots:
                rec.decide(PICKER, "no_slot", c, now, verdict, lack, kind)
                continue
            if cost > spend.bucket:
                rec.decide(PICKER, "budget", c, now, verdict, lack, kind)
                continue
            veto = next((v for v in vetoes if not v.allows(c, kind, now)), None)
            if veto is not None:
                rec.decide(veto.name, "vetoed", c, now, verdict, lack, kind)
                continue
            rec.decide(PICKER, ACTED, c, now, verdict, lack, kind)
            spend.bucket -= cost
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
            spend.last_acted[c.anchor_id] = now
            if kind != RETAIN:
                spend.inflight[(c.anchor_id, now)] = (action.deadline, c.block_tokens)
            k = f"{kind}/{c.reason}"
            spend.emitted[k] = spend.emitted.get(k, 0) + 1
            actions.append(action)
        return actions
