"""The core's input types: what the policy knows about one request, its response and the engine.

The edges (live proxy, replay evaluator) build these; the core never sees raw HTTP. Views are
frozen so a view can be shared between the policy, the residency shadow and an action safely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestView:
    tenant: str  # cache_salt ("" when absent): isolates agents, sessions, transitions
    model: str
    block_hashes: tuple[int, ...]  # chained hashes: equal prefix -> equal chain
    block_tokens: tuple[int, ...]  # (estimated) tokens in each block
    anchor_blocks: int  # leading blocks of the agent's fixed context; 0 = unknown (learn the skip)
    session_id: str | None  # explicit id, if any
    max_tokens: int | None
    is_warmup: bool  # proxy warmup header, or max_tokens <= 1: never learned from
    anchor_payload: object = None  # opaque to the core: what an adapter needs to rebuild the anchor
    context_payload: object = None  # opaque: what an adapter needs to rebuild the whole prompt (tool_resume)
    n: int = 1  # choices requested (n > 1: the engine forks the prompt: fan-out)
    header_blocks: int = 0  # leading blocks that are only the envelope (model + tools): never an agent alone
    # chained hashes of the messages after the system/developer ones, by content only (not role,
    # name or the system prompt before them): the conversation every agent of a group chat shares
    history_keys: tuple[int, ...] = ()

    @property
    def total_tokens(self) -> int:
        return sum(self.block_tokens)


@dataclass(frozen=True, slots=True)
class ResponseOutcome:
    finish_reason: str | None  # "stop" | "length" | "tool_calls" | ...
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    assistant_payload: Mapping[str, object] | None = None  # the assistant turn (rebuilds a paused context)


@dataclass(frozen=True, slots=True)
class EngineLoad:
    inflight: int = 0  # client requests in flight through the proxy
    waiting: int = 0  # engine's waiting queue (from metrics), 0 if unknown
    prefilling: int = 0  # client requests in flight with no first token yet
    # client requests past their first output and still generating: an engine step that carries a
    # warm's prefill is that much longer for each of them (vLLM batches prefill and decode in one step)
    decoding: int = 0
    running_tokens: int = 0  # prompt tokens (view estimate) of the client requests in flight
    utilisation: float = 0.0  # share of recent wall time the engine spent prefilling (0..1)
    # the engine runs a priority policy and actions go at its lowest priority (the slack lane): an
    # action is never admitted ahead of a client request, the proxy's or another client's (`external`)
    priority_lane: bool = False
    external: int = 0  # requests the engine runs or queues that are neither this proxy's nor its actions (scraped)


def view_from_blocks(
    tenant: str,
    block_ids: Sequence[int],
    block_tokens: Sequence[int] | int,
    *,
    anchor_blocks: int = 0,
    session_id: str | None = None,
    model: str = "",
    max_tokens: int | None = None,
    is_warmup: bool = False,
    anchor_payload: object = None,
    context_payload: object = None,
    n: int = 1,
    header_blocks: int = 0,
) -> RequestView:
    """A view from engine-style block ids (traces, the simulator), used as the hash chain as-is.

    Keeping the caller's ids (instead of re-hashing) lets the residency shadow match the ids the
    simulated engine reports back through ``on_engine_truth``. ``block_tokens`` may be one int for
    every block. Tenants are isolated by the core's per-tenant state, not by salting these ids.
    """
    ids = tuple(map(int, block_ids))
    if isinstance(block_tokens, int):
        toks = (int(block_tokens),) * len(ids)
    else:
        toks = tuple(map(int, block_tokens))
    if len(toks) != len(ids):
        raise ValueError(f"block_tokens has {len(toks)} entries for {len(ids)} blocks")
    if max_tokens is not None and max_tokens <= 1:
        is_warmup = True
    return RequestView(
        tenant=tenant,
        model=model,
        block_hashes=ids,
        block_tokens=toks,
        anchor_blocks=max(0, min(int(anchor_blocks), len(ids))),
        session_id=session_id,
        max_tokens=max_tokens,
        is_warmup=bool(is_warmup),
        anchor_payload=anchor_payload,
        context_payload=context_payload,
        n=max(1, int(n)),
        header_blocks=max(0, int(header_blocks)),
    )
