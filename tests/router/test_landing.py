"""The warmup-landing and isolation classifiers of proxy/harness/router_fleet.py, on hand-made engine logs."""

from proxy.harness.router_fleet import isolation, landing


def req(t, hashes, warmup=False):
    return {"t": t, "warmup": warmup, "hashes": hashes, "prompt_tokens": 16 * len(hashes), "cached_tokens": 0}


def test_next_user_decides_where_a_warmup_landed():
    r0 = [
        req(1.0, [1, 2], warmup=True),  # used next on replica 0: landed
        req(2.0, [1, 2, 3]),
        req(3.0, [7, 8], warmup=True),  # next user of 8 is on replica 1: wrong replica
        req(6.0, [7, 8, 9]),  # (later used here too)
        req(7.0, [5], warmup=True),
    ]  # nobody uses 5 again: unused
    r1 = [req(4.0, [7, 8, 10]), req(0.5, [5])]  # a use before the warmup does not count
    out = landing([r0, r1])
    assert (out["warmups"], out["landed"], out["wrong_replica"], out["unused"]) == (3, 1, 1, 1)
    assert out["used_here_later"] == 2 and abs(out["wrong_replica_share"] - 1 / 3) < 1e-9


def test_isolation_flags_a_warmup_without_its_tenants_salt():
    logs = [[req(1.0, [11, 12]), req(2.0, [11, 13], warmup=True)], [req(1.5, [21]), req(2.5, [99], warmup=True)]]
    assert isolation(logs) == {"warmups_without_matching_traffic": 1, "client_first_blocks": 2}


def sreq(t, hashes, session, warmup=False):
    return dict(req(t, hashes, warmup), session=session)


def test_by_session_a_sidecar_warmup_is_for_the_sessions_its_replica_holds():
    # replica 0 holds session a; replica 1 holds b. Both use anchor block 5.
    r0 = [sreq(1.0, [5, 6], "a"), sreq(2.0, [5], None, warmup=True), sreq(4.0, [5, 7], "a")]
    r1 = [sreq(1.5, [5, 8], "b"), sreq(3.0, [5, 9], "b")]
    # anyone's next use of 5 after t=2 is b's on replica 1; a's (the one replica 0 warmed for) is here
    assert landing([r0, r1])["wrong_replica"] == 1
    assert landing([r0, r1], by_session=True)["landed"] == 1
    # round-robin: a's next turn went to replica 1
    moved = [[sreq(1.0, [5, 6], "a"), sreq(2.0, [5], None, warmup=True)], [sreq(3.0, [5, 7], "a")]]
    assert landing(moved, by_session=True)["wrong_replica"] == 1
