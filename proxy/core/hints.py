"""Hints from the agent runtime: what they are, and how far each source is trusted.

Why trust is per source and earned: the runtime that drives the agents knows things the traffic
reveals late or never (a tool call just started, five branches were forked, this session is over,
the coder runs next), but it sits outside the proxy's trust boundary. Following the design
background, hints come in three classes:

- **facts** (``tool_started``, ``tool_finished``, ``fanout``, ``session_ended``): acted on at once,
  and checked afterwards (the session did resume; the branches did arrive; the ended session never
  came back);
- **predictions** (``next_agent`` with a probability, the expected duration of a tool): weighted by
  how well the source's earlier predictions came true;
- **directives** (``pin``/``retain`` with a TTL): only from sources the operator lists, and capped
  by a share of the cache.

Each source keeps two Beta posteriors (facts, predictions) over "the hint came true". Every
checked hint updates one with a score ``x`` in [0, 1] after forgetting: ``a = g*a + x``,
``b = g*b + (1 - x)``, ``g = 1 - 1/evidence_cap``. The standing is the posterior mean. A new source
starts at the sceptical prior (1, 2): mean 1/3, enough for facts (used at once, floor 0.25) but not
for predictions (standing x claimed probability must reach 0.5: one confirmed hint earns it), nor
for releases: a false ``session_ended`` costs a whole context's re-prefill where a false protective
fact costs one bounded warm, so releases need a fact standing of 0.5 (one confirmed fact).

Bound on a lying source (``ignore_bound``): since ``a + b`` never decreases below its start while
it is under the cap, after ``k`` refuted hints in a row the standing is at most ``g**k`` whatever it
was before. With the defaults (cap 10, g = 0.9) predictions and releases stop driving actions after at most
**7** refuted hints of their class and protective facts after at most **14** refuted facts. Because checks arrive late,
a source may also have at most ``max_unchecked`` (16) action-driving hints awaiting their check;
further ones are ignored until checks come in. So a liar drives at most N + 16 hints in total, and
each hint at most one warm (the driver offers a hinted context for warming once per hint; touches
of what is still cached are cheap and may repeat).

Everything here is pure: explicit ``now``, bounded dicts, no I/O.

The per-source calibration (``TrustBook``: admission and the scores of checks) is in hint_trust.py.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from .action_payload import ActionPayload

TOOL_STARTED = "tool_started"
TOOL_FINISHED = "tool_finished"
FANOUT = "fanout"
SESSION_ENDED = "session_ended"
NEXT_AGENT = "next_agent"
PIN = "pin"
RETAIN = "retain"
FACT_KINDS = (TOOL_STARTED, TOOL_FINISHED, FANOUT, SESSION_ENDED)
PREDICTION_KINDS = (NEXT_AGENT,)
DIRECTIVE_KINDS = (PIN, RETAIN)
HINT_KINDS = FACT_KINDS + PREDICTION_KINDS + DIRECTIVE_KINDS
FACT, PREDICTION, DIRECTIVE = "fact", "prediction", "directive"

# admission outcomes (bounded label set for metrics)
ACCEPTED = "accepted"
IGNORED_STANDING = "ignored_standing"  # the source's standing is below the floor
IGNORED_UNCHECKED = "ignored_unchecked"  # too many of its hints still await their check
REFUSED = "refused"  # a directive from a source the operator did not list
OUTCOMES = (ACCEPTED, IGNORED_STANDING, IGNORED_UNCHECKED, REFUSED)


def hint_class(kind: str) -> str:
    if kind in PREDICTION_KINDS:
        return PREDICTION
    if kind in DIRECTIVE_KINDS:
        return DIRECTIVE
    return FACT


def source_id(api_key: str | None = None, source: str | None = None, tenant: str = "") -> str:
    """Stable, log-safe id of a hint source: the API key's hash (unforgeable without the key),
    combined with the source header when both are given; the header alone otherwise. A tenant
    (``cache_salt``) other than the default is part of the id, so tenants never share a record."""
    t = tenant.encode("utf-8", "surrogatepass")
    if api_key:
        raw = b"k|" + api_key.encode("utf-8", "surrogatepass") + b"|" + (source or "").encode("utf-8", "surrogatepass")
        return "k" + hashlib.sha256(raw + (b"|t|" + t if t else b"")).hexdigest()[:12]
    if source:
        return (
            "s"
            + hashlib.sha256(b"s|" + source.encode("utf-8", "surrogatepass") + (b"|t|" + t if t else b"")).hexdigest()[
                :12
            ]
        )
    return "anonymous" if not t else "a" + hashlib.sha256(b"a|t|" + t).hexdigest()[:12]


def keyed(sid: str) -> bool:
    """Whether a source id comes from a credential (``k…``), not from a name alone."""
    return sid.startswith("k")


@dataclass(frozen=True, slots=True)
class Hint:
    """One parsed hint (the edges validate shapes; see ``proxy/runtime/hint_inputs.py``)."""

    kind: str
    session_id: str | None = None
    expected_s: float | None = None  # tool_started: expected tool duration
    branches: int = 0  # fanout: branch count (or len(branch_ids))
    branch_ids: tuple[str, ...] = ()
    agent: str | None = None  # next_agent / pin: the runtime's agent name
    probability: float = 1.0  # next_agent
    ttl_s: float | None = None  # pin / retain


@dataclass(frozen=True, slots=True)
class HintCandidate:
    """What the planner turns into one of its own candidates (same fields, same meaning)."""

    score: float
    reason: str
    tenant: str
    anchor_id: str
    hashes: tuple[int, ...]
    block_tokens: tuple[int, ...]
    payload: ActionPayload
    prob: float
    lead: float | None
    warm_ok: bool
    context: bool
    kind: str  # the hint kind behind it (attribution)
    source: str


@dataclass(frozen=True, slots=True)
class HintConfig:
    evidence_cap: float = 10.0  # a + b saturates here: old evidence is forgotten at 1/cap per hint
    prior_alpha: float = 1.0  # new source: Beta(1, 2), standing 1/3 ("sceptical")
    prior_beta: float = 2.0
    fact_min_standing: float = 0.25  # facts are used while the source's fact standing is >= this
    prediction_min_p: float = 0.5  # predictions: standing x claimed probability >= this
    release_min_standing: float = 0.5  # session_ended: a false one costs a whole context, a false
    # protective fact one bounded warm: releases need a record
    max_unchecked: int = 16  # hints of one source awaiting their check that may drive actions
    max_sources: int = 4096  # sources remembered (count cap; the byte budget below binds first)
    max_pending: int = 8192  # checks awaited over all sources (count cap; the byte budget binds first)
    max_checks_per_source: int = 1024  # checks one source may have open (exposed or not)
    sources_max_bytes: int = 1 << 20  # the source table's byte budget (evicts the least valuable)
    checks_max_bytes: int = 4 << 20  # the pending-check table's byte budget
    state_max_bytes: int = 1 << 20  # each of: hinted plans, pins, agent names, session owners
    resume_horizon_s: float = 120.0  # tool_started: the session must resume within max(this, 3 x expected)
    duration_tolerance: float = 0.5  # expected duration within +-50% (or 0.5 s) of the truth counts as right
    ended_watch_s: float = 300.0  # session_ended: a request of that session within this refutes it
    fanout_horizon_s: float = 60.0  # fanout: branches must arrive within this
    next_agent_horizon_s: float = 300.0  # next_agent: the session's next request must come within this
    directive_sources: frozenset[str] = frozenset()  # source ids the operator lets pin/retain
    directive_cache_share: float = 0.1  # pinned tokens <= this share of the cache (capacity known)
    directive_max_ttl_s: float = 3600.0  # TTLs are clamped to this

    @property
    def forget(self) -> float:
        return 1.0 - 1.0 / max(1.0, self.evidence_cap)


def ignore_bound(cfg: HintConfig, cls: str = PREDICTION) -> int:
    """N: refuted hints in a row after which a source of any standing no longer drives actions of
    class ``cls`` (``fact``, ``prediction``, or ``session_ended`` for releases; standing <=
    forget**k, see the module docstring)."""
    floor = {PREDICTION: cfg.prediction_min_p, SESSION_ENDED: cfg.release_min_standing}.get(cls, cfg.fact_min_standing)
    g = cfg.forget
    if floor <= 0.0:
        return 0
    if g <= 0.0:
        return 1
    return max(1, math.ceil(math.log(floor) / math.log(g)))


@dataclass(slots=True)
class KindTally:
    """Per source and hint kind: what was sent, acted on, checked, and how it turned out."""

    hints: int = 0
    acted: int = 0
    ignored: int = 0
    refused: int = 0
    checked: int = 0
    score: float = 0.0  # sum of check scores (conversion = score / checked)
    tokens: int = 0  # tokens the checked hints were about
    tokens_confirmed: float = 0.0  # ... weighted by their score (token-weighted conversion)
    lead_weighted: float = 0.0  # sum of lead seconds x confirmed tokens
    lead_weight: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "hints": self.hints,
            "acted": self.acted,
            "ignored": self.ignored,
            "refused": self.refused,
            "checked": self.checked,
            "conversion": round(self.score / self.checked, 4) if self.checked else None,
            "token_conversion": round(self.tokens_confirmed / self.tokens, 4) if self.tokens else None,
            "lead_s": round(self.lead_weighted / self.lead_weight, 3) if self.lead_weight else None,
        }


@dataclass(slots=True)
class SourceRecord:
    sid: str
    fact_a: float
    fact_b: float
    pred_a: float
    pred_b: float
    unchecked: int = 0  # exposed checks open (maintained by the CheckBook, recounted on its sweeps)
    checks: int = 0  # all checks open
    last_seen: float = 0.0
    kinds: dict[str, KindTally] = field(default_factory=dict)

    def value(self) -> float:
        """What forgetting this record would lose: its evidence and its open checks (a fresh
        source is worth least; a refuted liar's record, which keeps it below the floors, more)."""
        return self.fact_a + self.fact_b + self.pred_a + self.pred_b + self.checks

    def standing(self, cls: str) -> float:
        if cls == PREDICTION:
            return self.pred_a / (self.pred_a + self.pred_b)
        return self.fact_a / (self.fact_a + self.fact_b)

    def tally(self, kind: str) -> KindTally:
        t = self.kinds.get(kind)
        if t is None:
            t = self.kinds[kind] = KindTally()
        return t


@dataclass(slots=True)
class Check:
    """A hint awaiting the traffic that confirms or refutes it."""

    source: str
    kind: str
    cls: str  # which posterior the outcome updates
    issued: float
    deadline: float
    tokens: int = 0
    expected_at: float | None = None  # predicted arrival (tool duration), None = only "whether"
    exposed: bool = True  # counted in the source's unchecked hints until closed
