"""What the yield ledger needs per executed action, one rule for the live proxy and the replay.

Why a module of its own: the ledger (``yield_ledger.py``) sums what each signal saved and spent;
this decides the two numbers per action. *Spent* is what the engine prefilled for the action.
*Saved* is credited when a later client request the core attributed to the action (its
``acted_reason``/``acted_hash``) finds the prefix cached: ``min(cached, acted tokens)`` minus the
counterfactual, i.e. what was already cached when the action ran, unless the residency shadow says
that part would have been evicted since (``counterfactual_cached``). A hit counts only when the
engine confirms it: ``cached >= CONVERSION_SHARE`` of the action's tokens (the same rule that
counts conversion). Live (``runtime/live_accounting.py``) and the replay (``replay/scout.py``) feed
it their engine's usage; neither keeps its own copy of the rule. Bounded: the last ``max_entries``
executed actions are remembered.
"""

from __future__ import annotations

from collections import OrderedDict

from .actions import Action
from .residency import ResidencyShadow
from .yield_ledger import counterfactual_cached, remaining_life

CONVERSION_SHARE = 0.8  # cached >= 80% of the action's prompt counts as a confirmed hit
MAX_ACTED = 4096  # executed actions remembered for the counterfactual


def ran_alongside_traffic(sent_at: float, inflight_now: bool, last_start: float, last_end: float) -> bool:
    """Did a client request overlap an action that was sent at ``sent_at`` and has just answered?

    Only then can its prefill have delayed a client (the ledger charges it in full; otherwise at
    the idle share). A request overlapped it if it is still in flight, started since the send, or
    ended since the send (so it was in flight at the send). When the action was *planned* does not
    matter: a warm planned during a burst and sent after it delayed nobody.
    """
    return inflight_now or last_start >= sent_at or last_end >= sent_at


class YieldBook:
    """Per-action counterfactual bookkeeping: (tenant, last hash of the acted prefix) -> what the
    engine had cached when the action ran, how long the shadow gave that part, and when."""

    def __init__(self, max_entries: int = MAX_ACTED) -> None:
        self.max_entries = max(1, int(max_entries))
        self._info: OrderedDict[tuple[str, int], tuple[int, int, float | None, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._info)

    def charge(
        self, action: Action, residency: ResidencyShadow, prompt_tokens: int, cached_tokens: int, computed_tokens: int
    ) -> int:
        """An executed action, before the shadow marks its blocks fresh: the tokens to charge its
        signal (what the engine prefilled for it), remembering what the counterfactual needs."""
        if not action.block_hashes:
            return 0
        resident, full, near = residency.verdict(action.block_hashes)
        if resident and not full:
            near = residency.near_eviction(action.block_hashes[:resident])
        if action.kind != "retain":
            key = (action.tenant, action.block_hashes[-1])
            life = remaining_life(residency.capacity_tokens, residency.zone_tokens(), near)
            self._info[key] = (int(prompt_tokens), int(cached_tokens), life, residency.inserted_tokens)
            self._info.move_to_end(key)
            while len(self._info) > self.max_entries:
                self._info.popitem(last=False)
        return max(0, int(computed_tokens))

    def credit(
        self,
        tenant: str,
        acted_hash: int,
        acted_tokens: int,
        prompt_tokens: int,
        cached_tokens: int,
        residency: ResidencyShadow,
    ) -> int | None:
        """A client request attributed to the action that ended in ``acted_hash``: the tokens its
        hit saved beyond the no-action counterfactual, or None (no such action, or no confirmed hit).
        ``acted_tokens``: the action's size in the engine's tokens, used when it reported none."""
        if cached_tokens <= 0:
            return None
        info = self._info.pop((tenant, acted_hash), None)
        if info is None:
            return None
        tokens, pre_cached, life, inserted_at = info
        tokens = tokens or acted_tokens
        if cached_tokens < CONVERSION_SHARE * min(tokens, prompt_tokens):
            return None
        cf = counterfactual_cached(pre_cached, life, inserted_at, residency.inserted_tokens)
        return max(0, min(cached_tokens, tokens) - cf)
