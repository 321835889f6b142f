"""TransitionLearner: one tenant's decaying Markov chain over agents, and its predictability R.

Counts live in sparse Python rows indexed by agent *slot* (slots are reused after an agent is
evicted): an update is a handful of dict operations, far cheaper than numpy scalar indexing on the
request path. Decay is lazy: each row has a scale factor multiplied by γ on every transition out
of that row, so an update is O(1) and a row's counts halve every ``decay_half_life`` steps out of
it — a drifting workflow is followed within a few hundred dispatches of each agent. numpy is used
where it pays: the entropy computation over the whole chain.

Predictability R (the gate) is the normalised entropy reduction of the next agent given the current
one, computed on the smoothed chain:

    P_ij = (C_ij + ε) / Σ_k (C_ik + ε),  w_i = V_i / Σ V,  q_j = Σ_i w_i P_ij
    R = (H(q) − Σ_i w_i H(P_i·)) / H(q)        (R = 1 when only one agent exists)

i.e. the mutual information I(current; next) over H(next). V_i counts visits to agent i with a
*global* decay (half-life 5× the row half-life, in all dispatches): row totals cannot be used as
weights because per-row decay lets rarely-left rows keep more mass than often-left ones.
Smoothing makes rows with few counts look uncertain, so R starts low and the gate stays shut until
evidence accumulates. R is refreshed
every ``refresh_steps`` transitions once the chain is old (every quarter of its age before that;
numpy, dense over live slots), not per request.
"""

from __future__ import annotations

import math

import numpy as np

_RENORM_BELOW = 1e-150
_STALE_STEPS = 8


class TransitionLearner:
    def __init__(self, epsilon: float = 0.1, half_life: float = 200.0, refresh_steps: int = 256) -> None:
        self.epsilon = float(epsilon)
        self.gamma = 0.5 ** (1.0 / half_life) if half_life > 0 else 1.0
        self.vgamma = 0.5 ** (1.0 / (5.0 * half_life)) if half_life > 0 else 1.0
        self.refresh_steps = max(1, int(refresh_steps))
        self._rows: dict[int, dict[int, float]] = {}  # C_ij = rows[i][j] * scale[i]
        self._scale: dict[int, float] = {}
        self._rowraw: dict[int, float] = {}  # Σ_j rows[i][j]
        self._visits: dict[int, float] = {}  # V_i = visits[i] * vscale (global decay)
        self._vscale = 1.0
        self._best: dict[int, int] = {}  # row -> argmax column
        self._live: set[int] = set()
        self._succ_cache: dict[int, dict[tuple[int, float], list[tuple[int, float]]]] = {}
        self._stale: dict[int, int] = {}
        self.steps = 0  # transitions learned (not decayed)
        self.predictions = 0
        self.hits = 0
        self._r = 0.0
        self._r_at = -1
        self._r_time: float | None = None  # `now` of the last refresh (when callers pass it)
        self.min_refresh_s = 1.0  # ... and at most this often once R exists
        self._succ_members: dict[int, set[int]] = {}  # slots listed in row i's cached successor lists

    # --- slots ---------------------------------------------------------------------------------
    def add_slot(self, slot: int) -> None:
        self._live.add(slot)
        self._succ_cache.clear()
        self._succ_members.clear()

    def remove_slot(self, slot: int) -> None:
        """Forget an evicted agent: its row and column go."""
        self._live.discard(slot)
        self._rows.pop(slot, None)
        self._scale.pop(slot, None)
        self._rowraw.pop(slot, None)
        self._visits.pop(slot, None)
        self._best.pop(slot, None)
        for i, row in self._rows.items():
            v = row.pop(slot, None)
            if v is not None:
                self._rowraw[i] -= v
                if self._best.get(i) == slot:
                    if row:
                        self._best[i] = max(row, key=row.__getitem__)
                    else:
                        del self._best[i]
        self._succ_cache.clear()
        self._succ_members.clear()
        # R is refreshed at its usual cadence: resetting it here recomputed R (O(agents^2)) on
        # every gate check while agents churn (agent-less traces evict one per request)

    @property
    def n_agents(self) -> int:
        return len(self._live)

    # --- learning --------------------------------------------------------------------------------
    def predict_top1(self, i: int) -> int | None:
        return self._best.get(i)

    def update(self, i: int, j: int) -> bool | None:
        """Learn one step i -> j; returns whether the prior top-1 prediction was j (None: none)."""
        best = self._best
        predicted = best.get(i)
        hit = None
        if predicted is not None:
            hit = predicted == j
            self.predictions += 1
            if hit:
                self.hits += 1
        row = self._rows.get(i)
        if row is None:
            row = self._rows[i] = {}
            scale = 1.0
            self._rowraw[i] = 0.0
        else:
            scale = self._scale[i] * self.gamma
            if scale < _RENORM_BELOW:
                for k in row:
                    row[k] *= scale
                self._rowraw[i] *= scale
                scale = 1.0
        self._scale[i] = scale
        inc = 1.0 / scale
        v = row.get(j, 0.0) + inc
        row[j] = v
        self._rowraw[i] += inc
        vs = self._vscale * self.vgamma
        if vs < _RENORM_BELOW:
            for k in self._visits:
                self._visits[k] *= vs
            vs = 1.0
        self._vscale = vs
        self._visits[i] = self._visits.get(i, 0.0) + 1.0 / vs
        if predicted is None or (predicted != j and v > row.get(predicted, 0.0)):
            best[i] = j
        self.steps += 1
        # successor lists may lag a row by a few steps (their P values move by ~1/row-mass per
        # step); they are recomputed when j is not already listed or after STALE_STEPS updates
        if i in self._succ_cache:
            stale = self._stale.get(i, 0) + 1
            if stale >= _STALE_STEPS or j not in self._succ_members.get(i, ()):
                del self._succ_cache[i]
                self._succ_members.pop(i, None)
                stale = 0
            self._stale[i] = stale
        return hit

    def count(self, i: int, j: int) -> float:
        row = self._rows.get(i)
        return row.get(j, 0.0) * self._scale[i] if row else 0.0

    def row_total(self, i: int) -> float:
        return self._rowraw.get(i, 0.0) * self._scale.get(i, 1.0)

    def prob(self, i: int, j: int) -> float:
        n = max(1, len(self._live))
        return (self.count(i, j) + self.epsilon) / (self.row_total(i) + self.epsilon * n)

    def successors(self, i: int, k: int, tau: float) -> list[tuple[int, float]]:
        """Up to k (slot, P) with P >= tau, most likely first (cached until row i changes)."""
        rc = self._succ_cache.get(i)
        if rc is None:
            rc = self._succ_cache[i] = {}
        key = (k, tau)
        hit = rc.get(key)
        if hit is not None:
            return hit
        out: list[tuple[int, float]] = []
        row = self._rows.get(i)
        if row:
            eps = self.epsilon
            scale = self._scale[i]
            denom = self._rowraw[i] * scale + eps * max(1, len(self._live))
            thr = (tau * denom - eps) / scale  # raw count needed for P >= tau
            cands = sorted(((v, j) for j, v in row.items() if v >= thr), key=lambda vj: (-vj[0], vj[1]))
            out = [(j, (v * scale + eps) / denom) for v, j in cands[: max(k, 0)]]
        rc[key] = out
        members = self._succ_members.get(i)
        if members is None:
            members = self._succ_members[i] = set()
        members.update(j for j, _ in out)
        return out

    # --- predictability ----------------------------------------------------------------------------
    def predictability(self, force: bool = False, now: float | None = None) -> float:
        # refresh often while the chain is young (R moves fast), every refresh_steps later on, and
        # (when the caller passes `now`) at most every min_refresh_s: the O(agents^2) recompute is
        # the request path's largest single cost, and R moves slowly once the chain has history
        every = min(self.refresh_steps, max(4, self._r_at // 4))
        if force or self._r_at < 0 or self.steps - self._r_at >= every:
            if (
                not force
                and now is not None
                and self._r_time is not None
                and self._r_at >= 0
                and now - self._r_time < self.min_refresh_s
                and self._r_at >= self.refresh_steps
            ):
                return self._r
            self._r = self._compute_r()
            self._r_at = self.steps
            self._r_time = now
        return self._r

    def _compute_r(self) -> float:
        live = sorted(self._live)
        n = len(live)
        visits = np.array([self._visits.get(s, 0.0) for s in live])
        grand = visits.sum() if n else 0.0
        if grand <= 0:
            return 0.0  # nothing learned yet
        if n == 1:
            return 1.0
        pos = {s: k for k, s in enumerate(live)}
        counts = np.zeros((n, n))
        rows_i, cols_j, vals = [], [], []
        for i, row in self._rows.items():
            pi = pos.get(i)
            if pi is None:
                continue
            sc = self._scale[i]
            for j, v in row.items():
                pj = pos.get(j)
                if pj is not None:
                    rows_i.append(pi)
                    cols_j.append(pj)
                    vals.append(v * sc)
        if vals:
            counts[rows_i, cols_j] = vals
        totals = counts.sum(axis=1)
        p = (counts + self.epsilon) / (totals + self.epsilon * n)[:, None]
        h_rows = -(p * np.log2(p)).sum(axis=1)
        w = visits / grand
        q = w @ p
        qpos = q[q > 0]
        h_next = float(-(qpos * np.log2(qpos)).sum())
        if h_next <= 1e-12:
            return 1.0
        r = (h_next - float(w @ h_rows)) / h_next
        return float(min(1.0, max(0.0, r))) if math.isfinite(r) else 0.0

    # --- snapshot ------------------------------------------------------------------------------------
    def export_counts(self, min_count: float = 1e-3) -> list[list[float]]:
        """Sparse [i, j, C_ij] triples (decayed counts, 4 significant digits) and visits."""
        out = []
        for i in sorted(self._rows):
            if i not in self._live:
                continue
            sc = self._scale[i]
            for j, v in sorted(self._rows[i].items()):
                c = v * sc
                if c >= min_count and j in self._live:
                    out.append([i, j, float(f"{c:.4g}")])
        return out

    def export_visits(self) -> list[list[float]]:
        return [[i, float(f"{v * self._vscale:.4g}")] for i, v in sorted(self._visits.items()) if i in self._live]

    def import_counts(self, triples: list[list[float]], visits: list[list[float]] | None = None) -> None:
        for i, j, c in triples:
            i, j = int(i), int(j)
            for s in (i, j):
                if s not in self._live:
                    self.add_slot(s)
            row = self._rows.setdefault(i, {})
            sc = self._scale.setdefault(i, 1.0)
            row[j] = row.get(j, 0.0) + float(c) / sc
            self._rowraw[i] = self._rowraw.get(i, 0.0) + float(c) / sc
        if visits is None:
            visits = [[i, self.row_total(i)] for i in self._rows]
        for i, v in visits:
            self._visits[int(i)] = float(v) / self._vscale
        for i, row in self._rows.items():
            if row:
                self._best[i] = max(sorted(row), key=row.__getitem__)
        self._succ_cache.clear()
        self._succ_members.clear()
        self._r_at = -1
