"""The session id the proxy gives an engine (and a router) for a conversation it inferred.

Why: vLLM reads a session id from `X-Session-ID` (and the body's `session_id`, `vllm_xargs.session_id`)
and echoes it on its KV events; vllm-router's `consistent_hash` keys replicas on the same header; SGLang
tags radix KV with a session. Most apps send none, while the proxy infers every conversation from the
prompts' lineage (sessions.py). Handing that knowledge to the engine needs an id that is

- opaque: a keyed hash, never prompt text nor a block hash an observer could test guesses against;
- per tenant: keyed with the tenant's salt (the request's `cache_salt`, "" when absent, the same key
  that isolates tenants everywhere else in the core), so two tenants' ids never coincide or link;
- stable for the conversation: the first request of a new conversation is forwarded before the
  tracker has a key for it, so its id is minted then (`SessionTagBook.mint`) and bound to the
  conversation once the tracker names it (`bind`); every later request of the conversation, and
  every action the planner takes for it, carries the same id (`tag_of`).

`engine_session_id` is the one derivation (the SGLang adapter reuses it); `SessionTagBook` is the
bounded map between the tracker's conversation keys and those ids, both ways (KV events name the
id; the planner names the key). Pure: no I/O, the caller passes what it needs.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING

from .sessions import common_prefix

if TYPE_CHECKING:
    from .sessions import SessionTracker
    from .view import RequestView

TAG_PREFIX = "cs-"
TAG_HEX = 24  # 96 bits: collisions need ~2^48 live sessions
MAX_TAGS = 16384  # bounded both ways (~200 bytes an entry: a few MiB at most)


def engine_session_id(session_key: str, tenant_salt: str) -> str:
    """The opaque id an engine sees for `session_key`, keyed with the tenant's salt.

    `session_key` must name one conversation for as long as the engine may hold its KV (the live
    proxy passes a per-process nonce and a counter, never prompt-derived text). BLAKE2b's key is at
    most 64 bytes: a longer salt is hashed down to one first (still secret-dependent)."""
    key = tenant_salt.encode("utf-8", "surrogatepass")
    if len(key) > 64:
        key = hashlib.blake2b(key, digest_size=64).digest()
    digest = hashlib.blake2b(session_key.encode("utf-8", "surrogatepass"), key=key, digest_size=TAG_HEX // 2)
    return TAG_PREFIX + digest.hexdigest()


class SessionTagBook:
    """Conversation key (tenant, sid) <-> engine session id, bounded (oldest binding first)."""

    def __init__(self, nonce: str, max_tags: int = MAX_TAGS) -> None:
        self.nonce = nonce  # per process: ids minted by another process never collide with ours
        self.max_tags = max(1, int(max_tags))
        self._seq = 0
        self._by_key: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._by_tag: dict[str, tuple[str, str]] = {}
        self.minted = 0
        self.bound = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._by_key)

    def mint(self, tenant: str) -> str:
        """A fresh id for a conversation not seen yet (its first request)."""
        self._seq += 1
        self.minted += 1
        return engine_session_id(f"{self.nonce}:{self._seq:x}", tenant)

    def bind(self, key: tuple[str, str], tag: str) -> str:
        """Bind `tag` to conversation `key` unless it has one already; returns the key's id. A
        conversation keeps its first id (its KV and its replica are under it)."""
        have = self._by_key.get(key)
        if have is not None:
            self._by_key.move_to_end(key)
            return have
        if tag in self._by_tag:  # already another conversation's: keep that binding
            return tag
        self._by_key[key] = tag
        self._by_tag[tag] = key
        self.bound += 1
        while len(self._by_key) > self.max_tags:
            _, old_tag = self._by_key.popitem(last=False)
            self._by_tag.pop(old_tag, None)
            self.dropped += 1
        return tag

    def tag_of(self, key: tuple[str, str] | None) -> str | None:
        return self._by_key.get(key) if key is not None else None

    def key_of(self, tag: str) -> tuple[str, str] | None:
        return self._by_tag.get(tag)

    def info(self) -> dict[str, int]:
        return {"tags": len(self._by_key), "minted": self.minted, "bound": self.bound, "dropped": self.dropped}


def peek_conversation(
    tracker: SessionTracker, view: RequestView, anchor_len: int = 0, agent_len: int | None = None
) -> tuple[str, str] | None:
    """The conversation ``tracker.resolve`` would put ``view`` in, without changing anything (None:
    it would start a new one). What the proxy asks before forwarding: the request is observed only
    later, once the engine accepted it. Mirrors ``SessionTracker.resolve`` (same lookups, no writes)."""
    s = tracker._infer(view, anchor_len)
    rid = view.session_id
    if not rid:
        return s.key if s is not None else None
    if s is not None and s.run == rid:
        return s.key
    tenant = view.tenant
    run = tracker._runs.get((tenant, rid))
    latest = tracker.sessions.get(run[0]) if run is not None else None
    if latest is None:
        return (tenant, rid) if (tenant, rid) in tracker.sessions else None
    split = anchor_len if agent_len is None else agent_len
    if view.history_keys and latest.chat and common_prefix(view.block_hashes, latest.hashes) <= split:
        return None  # a new conversation in the run
    return latest.key
