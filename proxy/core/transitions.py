"""TransitionLearner: one tenant's decaying Markov chain over agents, and its predictability R.

Counts live in a dense numpy matrix indexed by agent *slot* (slots are reused after an agent is
evicted; the matrix doubles when full). Decay is lazy: each row has a scale factor that is
multiplied by γ on every transition out of that row, so an update is O(1) and a row's counts halve
every ``decay_half_life`` steps out of it — a drifting workflow is followed within a few hundred
dispatches of each agent.

Predictability R (the gate) is the normalised entropy reduction of the next agent given the current
one, computed on the smoothed chain:

    P_ij = (C_ij + ε) / Σ_k (C_ik + ε),  w_i = V_i / Σ V,  q_j = Σ_i w_i P_ij
    R = (H(q) − Σ_i w_i H(P_i·)) / H(q)        (R = 1 when only one agent exists)

i.e. the mutual information I(current; next) over H(next). V_i counts visits to agent i with a
*global* decay (half-life 5× the row half-life, in all dispatches): row totals cannot be used as
weights because per-row decay lets rarely-left rows keep more mass than often-left ones. Smoothing makes rows with few counts
look uncertain, so R starts low and the gate stays shut until evidence accumulates. R is refreshed
every ``refresh_steps`` transitions (numpy), not per request.
"""

from __future__ import annotations

import math

import numpy as np

_RENORM_BELOW = 1e-150


class TransitionLearner:
    def __init__(self, epsilon: float = 0.1, half_life: float = 200.0, refresh_steps: int = 32) -> None:
        self.epsilon = float(epsilon)
        self.gamma = 0.5 ** (1.0 / half_life) if half_life > 0 else 1.0
        self.refresh_steps = max(1, int(refresh_steps))
        self._cap = 8
        self._raw = np.zeros((self._cap, self._cap))    # C_ij = raw[i, j] * scale[i]
        self._scale = np.ones(self._cap)
        self._rowraw = np.zeros(self._cap)             # Σ_j raw[i, j]
        self._visits = np.zeros(self._cap)             # V_i = visits[i] * vscale (global decay)
        self._vscale = 1.0
        self.vgamma = 0.5 ** (1.0 / (5.0 * half_life)) if half_life > 0 else 1.0
        self._best: dict[int, int] = {}                # row -> argmax column
        self._live: set[int] = set()
        self._succ_cache: dict[tuple[int, int, float], list[tuple[int, float]]] = {}
        self.steps = 0                                 # transitions learned (not decayed)
        self.predictions = 0
        self.hits = 0
        self._r = 0.0
        self._r_at = -1

    # --- slots ---------------------------------------------------------------------------------
    def add_slot(self, slot: int) -> None:
        if slot >= self._cap:
            new = self._cap
            while new <= slot:
                new *= 2
            raw = np.zeros((new, new))
            raw[: self._cap, : self._cap] = self._raw
            self._raw = raw
            self._scale = np.concatenate([self._scale, np.ones(new - self._cap)])
            self._rowraw = np.concatenate([self._rowraw, np.zeros(new - self._cap)])
            self._visits = np.concatenate([self._visits, np.zeros(new - self._cap)])
            self._cap = new
        self._live.add(slot)
        self._succ_cache.clear()

    def remove_slot(self, slot: int) -> None:
        """Forget an evicted agent: its row and column go to zero."""
        if slot >= self._cap:
            return
        self._live.discard(slot)
        self._raw[slot, :] = 0.0
        self._scale[slot] = 1.0
        self._rowraw[slot] = 0.0
        self._visits[slot] = 0.0
        col = self._raw[:, slot].copy()
        self._raw[:, slot] = 0.0
        self._rowraw -= col
        self._best.pop(slot, None)
        for i, b in list(self._best.items()):
            if b == slot:
                self._best[i] = int(np.argmax(self._raw[i]))
        self._succ_cache.clear()
        self._r_at = -1

    @property
    def n_agents(self) -> int:
        return len(self._live)

    # --- learning --------------------------------------------------------------------------------
    def predict_top1(self, i: int) -> int | None:
        return self._best.get(i)

    def update(self, i: int, j: int) -> bool | None:
        """Learn one step i -> j; returns whether the prior top-1 prediction was j (None: none)."""
        predicted = self._best.get(i)
        hit = None
        if predicted is not None:
            hit = predicted == j
            self.predictions += 1
            self.hits += hit
        scale = self._scale[i] * self.gamma
        if scale < _RENORM_BELOW:
            self._raw[i] *= scale
            self._rowraw[i] *= scale
            scale = 1.0
        self._scale[i] = scale
        vs = self._vscale * self.vgamma
        if vs < _RENORM_BELOW:
            self._visits *= vs
            vs = 1.0
        self._vscale = vs
        self._visits[i] += 1.0 / vs
        inc = 1.0 / scale
        raw = self._raw
        raw[i, j] += inc
        self._rowraw[i] += inc
        if predicted is None or (predicted != j and raw[i, j] > raw[i, predicted]):
            self._best[i] = j
        self.steps += 1
        if self._succ_cache:
            for key in [k for k in self._succ_cache if k[0] == i]:
                del self._succ_cache[key]
        return hit

    def count(self, i: int, j: int) -> float:
        return float(self._raw[i, j] * self._scale[i])

    def row_total(self, i: int) -> float:
        return float(self._rowraw[i] * self._scale[i])

    def prob(self, i: int, j: int) -> float:
        n = max(1, len(self._live))
        return (self.count(i, j) + self.epsilon) / (self.row_total(i) + self.epsilon * n)

    def successors(self, i: int, k: int, tau: float) -> list[tuple[int, float]]:
        """Up to k (slot, P) with P >= tau, most likely first (cached until row i changes)."""
        key = (i, k, tau)
        hit = self._succ_cache.get(key)
        if hit is not None:
            return hit
        out: list[tuple[int, float]] = []
        if i < self._cap and self._rowraw[i] > 0:
            n = max(1, len(self._live))
            scale = self._scale[i]
            denom = self._rowraw[i] * scale + self.epsilon * n
            row = self._raw[i]
            nz = np.flatnonzero(row)
            if len(nz):
                order = nz[np.argsort(-row[nz], kind="stable")][: max(k, 0)]
                for j in order:
                    p = (row[j] * scale + self.epsilon) / denom
                    if p >= tau:
                        out.append((int(j), float(p)))
        self._succ_cache[key] = out
        return out

    # --- predictability ----------------------------------------------------------------------------
    @property
    def decayed_transitions(self) -> float:
        return float(np.dot(self._rowraw, self._scale))

    def predictability(self, force: bool = False) -> float:
        if force or self._r_at < 0 or self.steps - self._r_at >= self.refresh_steps:
            self._r = self._compute_r()
            self._r_at = self.steps
        return self._r

    def _compute_r(self) -> float:
        live = sorted(self._live)
        n = len(live)
        if n == 0 or self.steps == 0:
            return 0.0
        idx = np.asarray(live)
        counts = self._raw[np.ix_(idx, idx)] * self._scale[idx, None]
        totals = counts.sum(axis=1)
        visits = self._visits[idx]
        grand = visits.sum()
        if grand <= 0 or totals.sum() <= 0:
            return 0.0
        if n == 1:
            return 1.0
        p = (counts + self.epsilon) / (totals[:, None] + self.epsilon * n)
        w = visits / grand
        with np.errstate(divide="ignore", invalid="ignore"):
            h_rows = -np.sum(np.where(p > 0, p * np.log2(p), 0.0), axis=1)
            q = w @ p
            h_next = float(-np.sum(np.where(q > 0, q * np.log2(q), 0.0)))
        if h_next <= 1e-12:
            return 1.0
        h_cond = float(w @ h_rows)
        r = (h_next - h_cond) / h_next
        return float(min(1.0, max(0.0, r))) if math.isfinite(r) else 0.0

    # --- snapshot ------------------------------------------------------------------------------------
    def export_counts(self, min_count: float = 1e-3) -> list[list[float]]:
        """Sparse [i, j, C_ij] triples (decayed counts, 4 significant digits)."""
        out = []
        for i in sorted(self._live):
            scale = self._scale[i]
            row = self._raw[i]
            for j in np.flatnonzero(row):
                c = float(row[j] * scale)
                if c >= min_count:
                    out.append([i, int(j), float(f"{c:.4g}")])
        return out

    def import_counts(self, triples: list[list[float]]) -> None:
        for i, j, c in triples:
            i, j = int(i), int(j)
            for s in (i, j):
                if s not in self._live:
                    self.add_slot(s)
            self._raw[i, j] = float(c) / self._scale[i]
            self._rowraw[i] += float(c) / self._scale[i]
            self._visits[i] += float(c) / self._vscale
        for i in self._live:
            row = self._raw[i]
            if row.any():
                self._best[i] = int(np.argmax(row))
        self._succ_cache.clear()
        self._r_at = -1
