"""Just enough PromQL lexing to list the metrics and labels a dashboard query uses.

Why not a full parser: the checks only need the series names (to prove each one is defined by the
proxy or is a known engine metric) and the label names in groupings and matchers (to catch a typo
such as `by (kinds)`). Prometheus itself parses every query in the integration test, so this lexer
does not have to reject bad syntax; it must only never miss a metric name in valid PromQL.
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{([^}]*)\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_IN_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "atan2",
        "inf",
        "nan",
        "Inf",
        "NaN",
    }
)


def _strip_strings(expr: str) -> str:
    return _STRING.sub('""', expr)


def metric_names(expr: str) -> set[str]:
    """Series names the expression selects (e.g. `foo_bucket`, `vllm:prefix_cache_hits_total`)."""
    text = _strip_strings(expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        token = match.group()
        before = text[match.start() - 1] if match.start() else " "
        if before.isdigit() or before in ".$":  # 1e3, 0.5e-2, $variable
            continue
        if text[match.end() :].lstrip().startswith("("):  # function or aggregation operator
            continue
        if token in KEYWORDS:
            continue
        names.add(token)
    return names


def label_names(expr: str) -> set[str]:
    """Label names used in groupings (`by (kind)`) and selectors (`{outcome="hit"}`)."""
    text = _strip_strings(expr)
    labels: set[str] = set()
    for _, inner in _GROUPING.findall(text):
        labels.update(part.strip() for part in inner.split(",") if part.strip())
    for inner in _MATCHERS.findall(text):
        labels.update(_LABEL_IN_MATCHER.findall(inner))
    return labels
