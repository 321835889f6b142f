"""Small-sample statistics for the switchback experiment: a load-adjusted difference of window
means with a t-interval.

Why windows, not requests: every request of a window shares one cache, so requests are not
independent; the window is the unit of randomisation and of inference (Bojinov, Simchi-Levi and
Zhao 2023). Per-request intervals would be far too narrow.

Why a regression: windows differ in traffic. ``effect`` fits, by ordinary least squares over the
windows, ``y = a + effect·on + Σ b_k·(x_k − mean x_k)`` where ``on`` is the window's arm and the
``x_k`` are load covariates that the policy does not change (the switchback passes prompt tokens
per request; request rate is not one for closed-loop agent clients, see ``switchback.estimate``).
Covariates are dropped, last first, while there are too few windows to estimate them with
at least 3 residual degrees of freedom, or when a covariate does not vary. Uncached tokens are not
a covariate: they are how the policy acts on TTFT, and adjusting for them would remove the very
effect being measured (they are reported per window instead).

Pure Python on purpose: a handful of windows, a 4×4 system; no numpy on this path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist


@dataclass(frozen=True, slots=True)
class EffectEstimate:
    effect: float  # on − off (same unit as y), adjusted
    low: float  # two-sided interval at `confidence`
    high: float
    se: float
    df: int
    off_mean: float  # raw mean of y over the off (observe-only) windows
    on_mean: float
    covariates: tuple[str, ...]  # the covariates actually adjusted for
    n_on: int
    n_off: int

    @property
    def relative(self) -> float:
        return self.effect / self.off_mean if self.off_mean else 0.0

    @property
    def relative_low(self) -> float:
        return self.low / self.off_mean if self.off_mean else 0.0

    @property
    def relative_high(self) -> float:
        return self.high / self.off_mean if self.off_mean else 0.0


def t_quantile(p: float, df: int) -> float:
    """Student-t quantile (Cornish-Fisher expansion around the normal; within ~1% for df >= 3,
    exact limit for large df). df 1 and 2 use their closed forms."""
    if df <= 0:
        return math.inf
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        a = 4 * p * (1 - p)
        return (2 * p - 1) * math.sqrt(2 / a)
    z = NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gauss-Jordan with partial pivoting; None when singular."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                if f:
                    for c in range(col, n + 1):
                        m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def _inverse_entry(a: list[list[float]], i: int) -> float | None:
    e = [0.0] * len(a)
    e[i] = 1.0
    col = _solve(a, e)
    return None if col is None else col[i]


def effect(
    y: Sequence[float],
    on: Sequence[bool],
    covariates: Mapping[str, Sequence[float]] | None = None,
    confidence: float = 0.9,
) -> EffectEstimate | None:
    """Load-adjusted on − off effect over windows; None until each arm has two windows."""
    n = len(y)
    n_on = sum(1 for z in on if z)
    n_off = n - n_on
    if n_on < 2 or n_off < 2:
        return None
    names = [
        k for k, xs in (covariates or {}).items() if len(xs) == n and max(xs) - min(xs) > 1e-9 * max(1.0, abs(max(xs)))
    ]
    off_mean = sum(v for v, z in zip(y, on, strict=True) if not z) / n_off
    on_mean = sum(v for v, z in zip(y, on, strict=True) if z) / n_on
    while True:
        p = 2 + len(names)
        if n - p >= 3 or not names:
            fit = _ols(y, on, [covariates[k] for k in names] if names else [])  # type: ignore[index]
            if fit is not None or not names:
                break
        names = names[:-1]
    if fit is None:
        return None
    beta, se, df = fit
    t = t_quantile(0.5 + confidence / 2, df)
    return EffectEstimate(beta, beta - t * se, beta + t * se, se, df, off_mean, on_mean, tuple(names), n_on, n_off)


def _ols(y: Sequence[float], on: Sequence[bool], xs: list[Sequence[float]]) -> tuple[float, float, int] | None:
    """Coefficient of `on` and its standard error in y ~ 1 + on + centred xs."""
    n = len(y)
    cols = [[1.0] * n, [1.0 if z else 0.0 for z in on]]
    for x in xs:
        mu = sum(x) / n
        cols.append([v - mu for v in x])
    p = len(cols)
    df = n - p
    if df < 1:
        return None
    xtx = [[sum(ci[k] * cj[k] for k in range(n)) for cj in cols] for ci in cols]
    xty = [sum(c[k] * y[k] for k in range(n)) for c in cols]
    beta = _solve(xtx, xty)
    if beta is None:
        return None
    resid = [y[k] - sum(beta[j] * cols[j][k] for j in range(p)) for k in range(n)]
    sigma2 = sum(r * r for r in resid) / df
    inv = _inverse_entry(xtx, 1)
    if inv is None or inv < 0:
        return None
    return beta[1], math.sqrt(sigma2 * inv), df
