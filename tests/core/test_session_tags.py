"""core/session_tags: the opaque per-tenant session id, the bounded key <-> id book, and
`SessionTracker.peek` (the conversation `resolve` would pick, without side effects)."""

from __future__ import annotations

from proxy.core.config import PolicyConfig
from proxy.core.session_tags import SessionTagBook, engine_session_id, peek_conversation
from proxy.core.sessions import SessionTracker
from proxy.core.view import view_from_blocks


def test_engine_session_id_is_opaque_stable_and_keyed_by_the_tenant_salt():
    a = engine_session_id("n:1", "salt-a")
    assert a == engine_session_id("n:1", "salt-a")  # deterministic
    assert a != engine_session_id("n:1", "salt-b")  # another tenant's id never coincides
    assert a != engine_session_id("n:2", "salt-a")
    assert a.startswith("cs-") and len(a) == 3 + 24 and "n:1" not in a
    assert engine_session_id("n:1", "") != engine_session_id("n:1", "x")
    long_salt = "s" * 300  # longer than BLAKE2b's key: hashed down, still salt-dependent
    assert engine_session_id("n:1", long_salt) != engine_session_id("n:1", "s" * 299)


def test_book_keeps_a_conversations_first_id_and_is_bounded():
    book = SessionTagBook("nonce", max_tags=2)
    t1, t2 = book.mint("t"), book.mint("t")
    assert t1 != t2 and book.mint("u") != t1
    assert book.bind(("t", "~1"), t1) == t1
    assert book.bind(("t", "~1"), t2) == t1  # a conversation keeps its first id
    assert book.bind(("t", "~2"), t1) == t1 and book.tag_of(("t", "~2")) is None  # an id names one conversation
    book.bind(("t", "~2"), t2)
    assert book.key_of(t1) == ("t", "~1") and book.key_of(t2) == ("t", "~2")
    book.bind(("t", "~3"), book.mint("t"))
    assert len(book) == 2 and book.tag_of(("t", "~1")) is None and book.key_of(t1) is None  # oldest dropped
    assert book.info()["dropped"] == 1
    assert SessionTagBook("a").mint("t") != SessionTagBook("b").mint("t")  # per-process nonce


def _view(hashes, sid=None, tenant="t"):
    return view_from_blocks(tenant, list(hashes), [16] * len(hashes), session_id=sid)


def test_peek_names_the_conversation_resolve_picks_and_changes_nothing():
    tr = SessionTracker(PolicyConfig())
    first = _view([1, 2, 3])
    assert peek_conversation(tr, first) is None  # a new conversation
    s = tr.resolve(first, 0.0)
    tr.record_request(s, first, None, 0.0)
    follow = _view([1, 2, 3, 4, 5])
    before = (dict(tr._index), len(tr.sessions), tr.created)
    assert peek_conversation(tr, follow) == s.key
    assert (dict(tr._index), len(tr.sessions), tr.created) == before  # no side effects
    assert tr.resolve(follow, 1.0).key == s.key
    assert peek_conversation(tr, _view([9, 8])) is None  # continues nothing
    assert peek_conversation(tr, _view([1, 2, 3, 4], tenant="u")) is None  # another tenant's chain
    # with a client id: its run's conversation (ids never merge across runs)
    run = _view([20, 21], sid="run-1")
    rs = tr.resolve(run, 2.0)
    tr.record_request(rs, run, None, 2.0)
    assert peek_conversation(tr, _view([20, 21, 22], sid="run-1")) == rs.key
    assert peek_conversation(tr, _view([20, 21, 22], sid="run-2")) is None


def test_session_residency_follows_stores_and_removals_exactly():
    from proxy.core.session_residency import SessionResidency

    sr = SessionResidency(max_sessions=2)
    assert sr.blocks("a") is None and sr.tokens("a") is None  # no truth yet
    sr.stored("a", [1, 2, 3], 16)
    sr.stored("b", [3, 4], 16)  # 3 is a's (first store wins: vLLM names the storing request)
    assert sr.blocks("a") == {1, 2, 3} and sr.blocks("b") == {4}
    assert sr.removed([3, 99]) == 1 and sr.blocks("a") == {1, 2} and sr.tokens("a") == (32, 16)
    assert sr.removed([99]) == 0
    sr.stored("a", [3], 16)  # stored again (a resume recomputed it): resident, nothing missing
    assert sr.tokens("a") == (48, 0)
    sr.stored("c", [5], 16)  # a third session: the oldest activity (b) is dropped
    assert sr.blocks("b") is None and len(sr) == 2
    sr.stored("b", [4], 16)  # b's old block is attributable again after b was dropped
    assert sr.blocks("b") == {4}
    sr.cleared()
    assert sr.blocks("a") is None and not sr


def test_session_verdict_replaces_the_estimate_only_where_the_engine_said_something():
    from proxy.core.residency import ResidencyShadow

    res = ResidencyShadow(capacity_tokens=10_000)
    key = ("t", "~1")
    hashes, toks = (1, 2, 3, 4, 5, 6), (16,) * 6
    assert res.session_verdict(key, hashes, toks, (6, True, False)) == (6, True, False)  # no id: unchanged
    res.engine_session_of = lambda k: "cs-x" if k == key else None
    assert res.session_verdict(key, hashes, toks, (6, True, False)) == (6, True, False)  # no truth yet
    res.sessions.stored("cs-x", ["e1", "e2", "e3"], 16)
    res.sessions.removed(["e3", "e2"])  # 32 tokens of its own evicted: the context's last two blocks
    assert res.session_verdict(key, hashes, toks, (6, True, False)) == (4, False, False)
    assert res.session_verdict(key, hashes, toks, (3, False, False)) == (3, False, False)
    res.sessions.stored("cs-x", ["e2", "e3"], 16)  # all of its blocks resident again
    # its own 48 tokens (the last 3 blocks) are there; the shadow holds the 3 before: fully resident
    assert res.session_verdict(key, hashes, toks, (3, False, False))[:2] == (6, True)
    assert res.session_verdict(key, hashes, toks, (2, False, False)) == (2, False, False)  # shared part gone
    assert res.session_blocks(key) == {"e1", "e2", "e3"} and res.session_blocks(("t", "~2")) is None
