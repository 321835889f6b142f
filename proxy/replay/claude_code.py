"""Claude Code session traces (callanjfox/kv-cache-tester, `../shared/traces/claude-code/`).

Why a loader of its own: these files are not one request a line but one JSON document per recorded
session, with nested subagent conversations, per-file hash namespaces and per-request timing (the
API's time, the tool's or the human's time). The replay, the live driver and the demo need the same
reading of them, so this module is the one place that turns a file into sessions and many files into
one multi-user stream, under the README's rules (`../shared/traces/README.md`):

- one user per file; its main conversation is a session named by the file's `id`;
- a request of `type: "subagent"` is its own session (`<id>/<agent_id>`) in the *parent's* hash
  namespace; its `t` is when it finished, so it started at `t - duration_ms / 1000` and its requests'
  `t` count from that start (subagents launched by one response overlap: a fan-out);
- `stop: tool_use` is a response ending in tool calls (the client sends the tool's result next),
  `end_turn` a plain stop (the turn is back with the human); `api_time` and `think_time` are kept;
- `hash_ids` are one id per *full* 64-token block of the prompt (`len == in // 64`), chained, scoped to
  the file: the composer maps `(user, id)` to a globally distinct integer (`global_block`), so two
  users never share a block while a subagent shares its parent's;
- the composer draws `users` files: sorted names, `random.Random(seed).shuffle`, the first `users`,
  then one start offset per drawn file, in that order, `uniform(0, window)` from the same generator;
  requests arriving after `horizon` seconds are dropped.

Unknown fields are ignored. A file that is not JSON or lacks what a session needs is counted and
named in `ClaudeCodeLoad.malformed` (never fatal); a request inside an otherwise good file that lacks
`t` or `hash_ids` is counted per file (`ClaudeCodeFile.skipped`).

Public API: `parse_file(path) -> ClaudeCodeFile` (raises `MalformedFile`), `load(path) ->
ClaudeCodeLoad` (a file or a folder), `compose(files, users, window, horizon, seed) -> Composition`
(`.requests`: `ReplayRequest`s in arrival order; `.meta`: the per-request `CCRequest` alongside),
`load_trace_cc(path, users=..., ...) -> LoadResult` for the replay CLI.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.replay.traces import LoadResult, ReplayRequest

BLOCK_SIZE = 64  # tokens per hash id in these traces
NAMESPACE_BITS = 32  # local ids are < 2**32 (max 25,568 in the shared files); user k owns (k+1) << 32
TOOL_USE = "tool_use"
END_TURN = "end_turn"
FINISH = {TOOL_USE: "tool_calls", END_TURN: "stop"}  # the OpenAI finish_reason a proxy sees
MAX_NAMED = 20  # malformed files named in a load result (all are counted)


class MalformedFile(ValueError):
    """A file that is not a Claude Code session document (message says why)."""


@dataclass(frozen=True, slots=True)
class CCRequest:
    """One API request of a session. `t` is seconds from its *file's* start (a subagent's requests
    already shifted by the subagent's start); `hash_ids` are the file's local ids."""

    t: float
    hash_ids: tuple[int, ...]
    input_tokens: int
    output_tokens: int
    stop: str  # "tool_use", "end_turn", or "" when the trace does not say
    api_time: float | None  # seconds the API took (None when absent)
    think_time: float | None  # seconds between the previous response and this request
    model: str = ""
    kind: str = ""  # the trace's `type` ("n"/"s")
    input_types: tuple[str, ...] = ()
    output_types: tuple[str, ...] = ()

    @property
    def finish_reason(self) -> str | None:
        return FINISH.get(self.stop)


@dataclass(frozen=True, slots=True)
class CCSession:
    """A conversation: the file's main one (`parent is None`) or one of its subagents."""

    session_id: str  # "<file id>" or "<file id>/<agent_id>"
    namespace: str  # the file id: hash ids are scoped to it
    start: float  # seconds from the file's start (0 for the main conversation)
    requests: tuple[CCRequest, ...]
    tool_tokens: int
    system_tokens: int
    parent: str | None = None
    subagent_type: str = ""
    launched_after: int | None = None  # index in the parent of the last request before the launch

    @property
    def fixed_tokens(self) -> int:
        """The tools + system prefix at the head of every prompt."""
        return self.tool_tokens + self.system_tokens


@dataclass(frozen=True, slots=True)
class ClaudeCodeFile:
    name: str  # the file name (the draw sorts these)
    id: str  # the document's `id` (the namespace)
    sessions: tuple[CCSession, ...]  # main first, then subagents in file order
    skipped: int = 0  # requests inside the file without `t` or `hash_ids`

    @property
    def requests(self) -> int:
        return sum(len(s.requests) for s in self.sessions)


@dataclass
class ClaudeCodeLoad:
    files: list[ClaudeCodeFile]
    malformed: int = 0
    malformed_files: list[tuple[str, str]] = field(default_factory=list)  # (name, why), first MAX_NAMED


@dataclass
class Composition:
    """Many users on one engine: the merged stream and what the draw was."""

    requests: list[ReplayRequest]
    meta: list[CCRequest]  # meta[i] is requests[i]'s source request
    users: list[tuple[str, float]]  # (file name, start offset s), in draw order
    dropped: int  # requests past the horizon
    seed: int
    window: float
    horizon: float

    @property
    def block_accesses(self) -> int:
        return sum(len(r.block_hashes) for r in self.requests)

    @property
    def unique_blocks(self) -> int:
        return len({h for r in self.requests for h in r.block_hashes})


# ---------------------------------------------------------------------------------------- parsing
def _num(obj: dict, key: str) -> float | None:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _int(obj: dict, key: str) -> int:
    v = _num(obj, key)
    return int(v) if v is not None else 0


def _strs(v: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in v) if isinstance(v, list) else ()


def _request(obj: Any, offset: float) -> CCRequest | None:
    """One API request, or None when it lacks `t` or integer `hash_ids`."""
    if not isinstance(obj, dict):
        return None
    t = _num(obj, "t")
    ids = obj.get("hash_ids")
    if t is None or not isinstance(ids, list):
        return None
    if not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h < (1 << NAMESPACE_BITS) for h in ids):
        return None
    stop = obj.get("stop")
    return CCRequest(
        t=offset + t,
        hash_ids=tuple(ids),
        input_tokens=_int(obj, "in") or BLOCK_SIZE * len(ids),
        output_tokens=_int(obj, "out"),
        stop=stop if isinstance(stop, str) else "",
        api_time=_num(obj, "api_time"),
        think_time=_num(obj, "think_time"),
        model=str(obj.get("model", "") or ""),
        kind=str(obj.get("type", "") or ""),
        input_types=_strs(obj.get("input_types")),
        output_types=_strs(obj.get("output_types")),
    )


def parse_document(doc: Any, name: str = "") -> ClaudeCodeFile:
    """A parsed JSON document -> its sessions. Raises `MalformedFile`."""
    if not isinstance(doc, dict):
        raise MalformedFile("not a JSON object")
    reqs = doc.get("requests")
    if not isinstance(reqs, list):
        raise MalformedFile("'requests' missing or not a list")
    bs = doc.get("block_size", BLOCK_SIZE)
    if bs != BLOCK_SIZE:
        raise MalformedFile(f"block_size {bs!r}, expected {BLOCK_SIZE}")
    fid = str(doc.get("id") or Path(name).stem or "session")
    main: list[CCRequest] = []
    subs: list[CCSession] = []
    skipped = 0
    for obj in reqs:
        if isinstance(obj, dict) and obj.get("type") == "subagent":
            end = _num(obj, "t")
            dur = _num(obj, "duration_ms")
            inner = obj.get("requests")
            if end is None or dur is None or not isinstance(inner, list):
                skipped += 1
                continue
            start = end - dur / 1000.0
            sub_reqs = []
            for o in inner:
                r = _request(o, start)
                if r is None:
                    skipped += 1
                else:
                    sub_reqs.append(r)
            agent = str(obj.get("agent_id") or f"agent_{len(subs) + 1:03d}")
            subs.append(
                CCSession(
                    session_id=f"{fid}/{agent}",
                    namespace=fid,
                    start=start,
                    requests=tuple(sorted(sub_reqs, key=lambda r: r.t)),
                    tool_tokens=_int(obj, "tool_tokens"),
                    system_tokens=_int(obj, "system_tokens"),
                    parent=fid,
                    subagent_type=str(obj.get("subagent_type", "") or ""),
                    launched_after=len(main) - 1 if main else None,
                )
            )
            continue
        r = _request(obj, 0.0)
        if r is None:
            skipped += 1
        else:
            main.append(r)
    if not main and not any(s.requests for s in subs):
        raise MalformedFile("no readable request")
    head = CCSession(
        session_id=fid,
        namespace=fid,
        start=0.0,
        requests=tuple(sorted(main, key=lambda r: r.t)),
        tool_tokens=_int(doc, "tool_tokens"),
        system_tokens=_int(doc, "system_tokens"),
    )
    return ClaudeCodeFile(name=name or fid, id=fid, sessions=(head, *subs), skipped=skipped)


def parse_file(path: str | Path) -> ClaudeCodeFile:
    """One session document. Raises `MalformedFile` (also for unreadable or non-JSON files)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8", errors="replace"))
    except (OSError, json.JSONDecodeError) as exc:
        raise MalformedFile(f"not readable JSON: {exc}") from None
    return parse_document(doc, p.name)


def load(path: str | Path) -> ClaudeCodeLoad:
    """A file or a folder (its `*.json`, sorted by name; other files ignored). Malformed files are
    counted and named, never fatal."""
    p = Path(path)
    paths = sorted(p.glob("*.json"), key=lambda x: x.name) if p.is_dir() else [p]
    out = ClaudeCodeLoad(files=[])
    for fp in paths:
        try:
            out.files.append(parse_file(fp))
        except MalformedFile as exc:
            out.malformed += 1
            if len(out.malformed_files) < MAX_NAMED:
                out.malformed_files.append((fp.name, str(exc)))
    return out


# ---------------------------------------------------------------------------------------- composing
def global_block(user: int, local_id: int) -> int:
    """The stream-wide id of local hash id `local_id` of the `user`-th drawn file: distinct across
    users, equal within one file (a subagent shares its parent's namespace)."""
    return ((user + 1) << NAMESPACE_BITS) | local_id


def draw(names: Sequence[str], users: int, window: float, seed: int) -> list[tuple[str, float]]:
    """The README's draw: sorted names, `Random(seed).shuffle`, the first `users`, then one
    `uniform(0, window)` start offset per drawn name, in that order, from the same generator."""
    rng = random.Random(seed)
    order = sorted(names)
    rng.shuffle(order)
    chosen = order[: max(0, users)]
    return [(n, rng.uniform(0.0, window)) for n in chosen]


def compose(
    files: Sequence[ClaudeCodeFile],
    users: int | None = None,
    window: float = 1800.0,
    horizon: float | None = 7200.0,
    seed: int = 0,
) -> Composition:
    """Many users on one engine. `users=None` takes every file; `horizon=None` keeps every request
    (a request is dropped when its arrival is later than `horizon`). Session ids stay the files'
    (each file is drawn at most once), so a subagent's session is `<parent>/<agent_id>`."""
    by_name = {f.name: f for f in files}
    picked = draw(list(by_name), len(by_name) if users is None else users, window, seed)
    rows: list[tuple[float, int, int, ReplayRequest, CCRequest]] = []
    dropped = 0
    for k, (name, offset) in enumerate(picked):
        f = by_name[name]
        for s_idx, sess in enumerate(f.sessions):
            anchor = sess.fixed_tokens // BLOCK_SIZE
            for r_idx, r in enumerate(sess.requests):
                t = offset + r.t
                if horizon is not None and t > horizon:
                    dropped += 1
                    continue
                ids = tuple(global_block(k, h) for h in r.hash_ids)
                rr = ReplayRequest(
                    t=t,
                    tenant="",
                    block_hashes=ids,
                    block_tokens=(BLOCK_SIZE,) * len(ids),
                    output_tokens=max(1, r.output_tokens),
                    session_id=sess.session_id,
                    agent=sess.subagent_type or "main",
                    category=sess.subagent_type or "main",
                    anchor_blocks=min(anchor, len(ids)),
                    finish_reason=r.finish_reason,
                    tool_seconds=_tool_seconds(sess.requests, r_idx),
                    model=r.model,
                )
                rows.append((t, k, s_idx * 1_000_000 + r_idx, rr, r))
    rows.sort(key=lambda x: (x[0], x[1], x[2]))
    return Composition(
        requests=[x[3] for x in rows],
        meta=[x[4] for x in rows],
        users=picked,
        dropped=dropped,
        seed=seed,
        window=window,
        horizon=math.inf if horizon is None else horizon,
    )


def _tool_seconds(reqs: Sequence[CCRequest], i: int) -> float | None:
    """Ground truth for measurement: after a `tool_use` response, how long the client took before
    its next request (the next request's `think_time`)."""
    if reqs[i].stop != TOOL_USE or i + 1 >= len(reqs):
        return None
    return reqs[i + 1].think_time


def load_trace_cc(
    path: str | Path, users: int | None = None, window: float = 1800.0, horizon: float | None = 7200.0, seed: int = 0
) -> LoadResult:
    """`--format claude-code` for the replay CLI: load a file or a folder and compose it into one
    `LoadResult` (malformed files counted in `malformed`, named in `malformed_examples`)."""
    loaded = load(path)
    comp = compose(loaded.files, users, window, horizon, seed)
    res = LoadResult(requests=comp.requests, format="claude-code", block_size=BLOCK_SIZE)
    res.lines = len(loaded.files) + loaded.malformed
    for name, why in loaded.malformed_files:
        res.note(0, f"{name}: {why}")
    res.malformed = loaded.malformed
    return res
