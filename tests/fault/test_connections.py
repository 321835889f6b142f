"""Connection-level limits and parse floods (issue 22), against the real `cachescout serve`.

Each case of the issue's table, scaled to run in seconds on a 2-core shared machine (the sizes are
in each test; the full-size figures are in docs/hardening.md): trickled request bodies, idle
sockets, engine reply headers over 8 KB, sustained large bodies (parse flood), agents with
multi-megabyte system prompts, adversarial prompts against the prefix index. `/livez` is polled
from its own process on a new connection each time (so it competes for the connection cap like a
real client) and every answer's status is kept: it must never be anything but 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.harness.child_process import free_port

from .conftest import GOOD, proxy

pytestmark = pytest.mark.sockets

CHAT = "/v1/chat/completions"

# /livez on a fresh connection every 10 ms; prints [[latency_s, status], ...] (status 0: error)
PROBE = r"""
import http.client, json, os, sys, time
host, port, stop_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = []
while not os.path.exists(stop_file):
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection(host, port, timeout=10)
        c.request("GET", "/livez")
        status = c.getresponse().status
        c.close()
    except Exception:
        status = 0
    out.append([time.perf_counter() - t0, status])
    time.sleep(0.01)
print(json.dumps(out))
"""


@contextlib.contextmanager
def livez(url: str, tmp_path: Path, port: int | None = None) -> Iterator[list[tuple[float, int]]]:
    """Polls `/livez` on ``url`` (or on its host's ``port``: the health listener)."""
    host, main_port = url.removeprefix("http://").split(":")
    port = str(port or main_port)
    stop = tmp_path / f"livez-stop-{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", PROBE, host, port, str(stop)], stdout=subprocess.PIPE, text=True)
    samples: list[tuple[float, int]] = []
    try:
        time.sleep(0.3)
        yield samples
    finally:
        stop.touch()
        out, _ = proc.communicate(timeout=60)
        samples.extend((lat, st) for lat, st in json.loads(out or "[]"))


def p99(samples: list[tuple[float, int]]) -> float:
    lat = [s[0] for s in samples]
    return statistics.quantiles(lat, n=100)[98] if len(lat) >= 20 else max(lat)


def _addr(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _is_closed(s: socket.socket, wait: float = 0.2) -> bool:
    s.settimeout(wait)
    try:
        data = s.recv(4096)
    except TimeoutError:
        return False
    except OSError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 408")


# --- engine reply headers larger than aiohttp's defaults -------------------------------------------
def test_engine_reply_headers_as_large_as_a_direct_client_accepts(engine_url, tmp_path):
    """A 100 KB header line and 2,000 header fields: httpx (what OpenAI clients use, 100 KiB
    header block) accepts both going direct; so must the proxy (before: 502)."""
    with proxy(engine_url, tmp_path) as px, httpx.Client(timeout=30) as c:
        for query in ("line=100000", "fields=2000", "line=60000&fields=1500"):
            d, p = c.get(f"{engine_url}/headers?{query}"), c.get(f"{px.url}/headers?{query}")
            assert d.status_code == 200, query
            assert (p.status_code, p.content) == (d.status_code, d.content), query
            assert [(k, v) for k, v in p.headers.raw if k.startswith(b"x-")] == [
                (k, v) for k, v in d.headers.raw if k.startswith(b"x-")
            ]


# --- trickled request bodies -------------------------------------------------------------------------
def test_trickled_bodies_are_timed_out_and_never_take_livez_down(engine_url, tmp_path):
    """300 connections (over a cap of 100) each announce a 100 kB body and trickle it a few bytes
    a second. Before: no body-read timeout, they held the cap and `/livez` answered 503 for as long
    as they trickled. Now: the slowest are shed when a new connection needs room, and each is cut
    (408) once it falls below the minimum rate after the grace."""
    with proxy(engine_url, tmp_path, "server_max_connections=100", "server_body_timeout_s=2") as px:
        host, port = _addr(px.url)
        socks: list[socket.socket] = []
        head = b"POST " + CHAT.encode() + b" HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n{"
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(0.25):
                for s in socks:
                    with contextlib.suppress(OSError):
                        s.send(b" ")

        t = threading.Thread(target=trickle, daemon=True)
        with livez(px.url, tmp_path) as samples:
            for _ in range(300):
                s = socket.create_connection((host, port))
                s.sendall(head)
                socks.append(s)
            t.start()
            time.sleep(4.5)  # > grace + the rate check: every trickler is cut by now
            stop.set()
            t.join()
        closed = sum(_is_closed(s) for s in socks)
        for s in socks:
            s.close()
        r = httpx.post(px.url + CHAT, content=b'{"model":"m","messages":[]}', headers=GOOD, timeout=30)
        shed = _metric(httpx.get(px.url + "/metrics", timeout=10).text, "cachescout_connections_shed_total")
    print(f"\ntrickled bodies: /livez n={len(samples)} p99={p99(samples) * 1000:.1f} ms; closed {closed}/300; {shed}")
    assert shed['{reason="slow_body"}'] + shed['{reason="body_timeout"}'] == 300
    assert shed['{reason="body_timeout"}'] > 0 and shed['{reason="refused"}'] == 0
    statuses = {st for _, st in samples}
    assert statuses == {200}, (statuses, len(samples))
    assert closed == 300
    assert r.status_code == 200
    assert p99(samples) < 0.05 * MARGIN, p99(samples)


# --- idle sockets -----------------------------------------------------------------------------------
def test_idle_sockets_are_shed_oldest_first_not_livez(engine_url, tmp_path):
    """1,100 idle sockets (never a byte, and keep-alive connections between requests) against a cap
    of 200. Before: `/livez` answered 503 until the idle timeout closed them. Now: a new connection
    at the cap closes the oldest idle one."""
    with proxy(engine_url, tmp_path, "server_max_connections=200") as px:
        host, port = _addr(px.url)
        kept = []
        for _ in range(50):  # keep-alive connections that served one request, then went idle
            s = socket.create_connection((host, port))
            s.sendall(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n")
            s.settimeout(5)
            reply = b""
            while not reply.endswith(b"}"):  # the whole reply (head and body may come apart)
                reply += s.recv(4096)
            assert reply.startswith(b"HTTP/1.1 200")
            kept.append(s)
        silent = [socket.create_connection((host, port)) for _ in range(1100)]
        time.sleep(0.5)  # the burst of connects is over; 1,100 idle sockets are held
        with livez(px.url, tmp_path) as samples:  # each probe connection sheds the oldest idle one
            time.sleep(1.5)
        newest = silent[-100:]
        oldest_closed = sum(_is_closed(s) for s in kept + silent[:500])
        newest_open = sum(not _is_closed(s, 0.05) for s in newest)
        for s in kept + silent:
            s.close()
        httpx.get(px.url + "/livez", timeout=10).raise_for_status()
        shed = _metric(httpx.get(px.url + "/metrics", timeout=10).text, "cachescout_connections_shed_total")
    print(f"\nidle sockets: /livez n={len(samples)} p99={p99(samples) * 1000:.1f} ms; {shed}")
    assert shed['{reason="idle"}'] >= 900 and shed['{reason="refused"}'] == 0
    statuses = {st for _, st in samples}
    assert statuses == {200}, statuses
    assert oldest_closed == 550  # the oldest went first
    assert newest_open >= 50  # the newest stay (the oldest made way for the probe's connections)
    assert p99(samples) < 0.05 * MARGIN, p99(samples)


# --- parse floods ----------------------------------------------------------------------------------------
def _flood_body(k: int, size: int) -> bytes:
    """A chat body of ~size bytes: a system prompt and many 2 kB turns (json.loads-heavy)."""
    msgs = [{"role": "system", "content": f"You are flood agent {k % 4}. " * 40}]
    turn = 0
    while sum(len(m["content"]) for m in msgs) < size - 4096:
        msgs.append({"role": "user" if turn % 2 == 0 else "assistant", "content": f"turn {turn} of {k}: " + "x" * 2000})
        turn += 1
    return json.dumps({"model": "m", "user": f"flood-{k}", "max_tokens": 8, "messages": msgs}).encode()


def _metric(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key.removeprefix(name)] = float(value)
    return out


def test_parse_flood_sheds_work_not_livez(engine_url, tmp_path):
    """8 concurrent 1-4 MiB chat bodies, sustained. Before: the parse worker's queue kept it busy
    (and holding the GIL) the whole time: `/livez` p99 224 ms (10.7 ms with the policy off) and
    most requests not learned anyway (queue full). Now the worker may use only a share of the time
    (`policy_parse_share`): what does not fit is dropped at once (counted, reason parse_budget).

    Phase A sends the same bytes as non-JSON bodies (forwarded, never parsed): what forwarding
    alone costs `/livez` on this machine right now. Phase B is the parse flood. The policy's own
    share of `/livez` p99 (B - A) must stay under 50 ms (x MARGIN). During B `/livez` is also polled
    on the health port (`health_port`: a child process the event loop cannot delay, what the
    Kubernetes probes use): there the acceptance figure itself, p99 < 50 ms, unscaled."""
    import os

    bodies = [_flood_body(k, (1 << 20) + k * (3 << 20) // 7 - (256 << 10)) for k in range(8)]
    raw = [b"x" + b[1:] for b in bodies]  # not JSON: the policy does not parse these
    extra = [x for x in os.environ.get("X_SETS", "").split(";") if x]
    health_port = free_port()
    with proxy(engine_url, tmp_path, f"health_port={health_port}", *extra) as px:

        async def flood(path: str, payloads: list[bytes], until: float) -> int:
            async with httpx.AsyncClient(timeout=60) as c:

                async def worker(k: int) -> int:
                    n = 0
                    while time.monotonic() < until:
                        r = await c.post(px.url + path, content=payloads[(k + n) % 8], headers=GOOD)
                        assert r.status_code == 200
                        n += 1
                    return n

                return sum(await asyncio.gather(*(worker(k) for k in range(8))))

        with livez(px.url, tmp_path) as base:
            asyncio.run(flood("/echo-sha", raw, time.monotonic() + 2.5))
        rss = [px.rss_mb()]
        done = threading.Event()

        def sample_rss() -> None:
            while not done.wait(0.1):
                rss.append(px.rss_mb())

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        with livez(px.url, tmp_path) as samples, livez(px.url, tmp_path, health_port) as health:
            sent = asyncio.run(flood(CHAT, bodies, time.monotonic() + 3.5))
        time.sleep(0.5)
        done.set()
        sampler.join()
        metrics = httpx.get(px.url + "/metrics", timeout=10).text
        obs = px.state()["observer"]
    skipped = _metric(metrics, "cachescout_policy_skipped_total")
    shed_ratio = _metric(metrics, "cachescout_policy_shed_ratio")[""]
    print(
        f"\nparse flood: sent {sent}, observed {obs['observed']}, parse_budget {obs['parse_budget']}, "
        f"offload_full {obs['offload_full']}, shed ratio {shed_ratio:.2f}; /livez p99 forwarding only "
        f"{p99(base) * 1000:.1f} ms (n={len(base)}), parse flood {p99(samples) * 1000:.1f} ms (n={len(samples)}); "
        f"health_port /livez p50 {statistics.median(s[0] for s in health) * 1000:.1f} "
        f"p99 {p99(health) * 1000:.1f} ms max {max(s[0] for s in health) * 1000:.1f} ms (n={len(health)}); "
        f"RSS {rss[0]:.0f} -> peak {max(rss):.0f} MB"
    )
    assert max(rss) < 300, rss  # issue 22: 398 MB before the parse budget
    assert {st for _, st in base + samples + health} == {200}
    assert len(health) >= 100  # a probe every ~10 ms for 3.5 s
    assert p99(health) < 0.05, p99(health)  # the acceptance figure, unscaled
    assert sent >= 16 and obs["observed"] >= 1  # some are still learned
    assert skipped['{reason="parse_budget"}'] == obs["parse_budget"] > 0 and shed_ratio > 0
    assert p99(samples) - p99(base) < 0.05 * MARGIN, (p99(base), p99(samples))


# --- agents with multi-megabyte system prompts; adversarial prompts --------------------------------------
def _agent_prompt(a: int, size: int) -> str:
    return (f"agent {a} " + "".join(f"rule {a}-{j}. " for j in range(size // 9)))[:size]


def test_agents_with_huge_system_prompts_are_bounded_in_bytes(engine_url, tmp_path):
    """Agents with 3.5 MB system prompts, two calls each (so each becomes an agent), all 2xx.
    Before: anchor text, hash chain and index node of every agent kept, bounded by count only
    (300 agents: 2,102 MB; ~9 MB an agent). Then `agents_max_bytes` (16 MiB) and the index budget:
    300 agents 316 MB, over the 300 MB acceptance bound: the residency shadow (64-84 MB at 200k
    entries, not the 52 MB counted) and free heap memory glibc kept after 3.5 MB bodies (47 MB).
    Now: a leaner shadow at 160k entries (~40 MB) and large blocks mapped on their own
    (`malloc_mmap_threshold_bytes`). 60 agents here (every structure full: 120 prompts fill the
    sessions' 64 MiB and the shadow's 160k entries); FAULT_FULL_SIZE=1 runs the issue's 300
    (~2-4 min). The parse budget is off here (every body is learned)."""
    import os

    n = 300 if os.environ.get("FAULT_FULL_SIZE") else 60
    size = 3_500_000
    with proxy(engine_url, tmp_path, "policy_parse_share=1") as px:
        rss0 = px.rss_mb()
        peak = rss0

        async def drive() -> None:
            nonlocal peak
            async with httpx.AsyncClient(timeout=300) as c:
                sem = asyncio.Semaphore(3)

                async def one(a: int, r: int) -> None:
                    async with sem:
                        body = json.dumps(
                            {
                                "model": "m",
                                "user": f"s{a}-{r}",
                                "max_tokens": 8,
                                "messages": [
                                    {"role": "system", "content": _agent_prompt(a, size)},
                                    {"role": "user", "content": f"task {r}"},
                                ],
                            }
                        ).encode()
                        assert (await c.post(px.url + CHAT, content=body, headers=GOOD)).status_code == 200

                for base in range(0, n, 10):
                    for r in range(2):
                        await asyncio.gather(*(one(a, r) for a in range(base, min(n, base + 10))))
                    peak = max(peak, px.rss_mb())

        asyncio.run(drive())
        time.sleep(1.0)  # the last parses finish, a plan tick updates the gauges
        rss = px.rss_mb()
        peak = max(peak, rss)
        metrics = httpx.get(px.url + "/metrics", timeout=10).text
        st = px.state()
    kept = _metric(metrics, "cachescout_kept_bytes")
    drops = _metric(metrics, "cachescout_memory_drops_total")
    print(
        f"\n{n} agents x 3.5 MB: RSS {rss0:.0f} -> {rss:.0f} MB (peak sampled {peak:.0f}), agents {len(st['agents'])}, "
        f"kept {kept}, drops {drops}"
    )
    obs = st["observer"]
    assert obs["observed"] + obs["offload_full"] == 2 * n and obs["observed"] >= 1.5 * n, obs
    assert kept['{store="agents"}'] <= 16 << 20 and kept['{store="prefix_index"}'] <= 16 << 20
    assert drops['{store="agents"}'] > 0
    assert peak < 300, (rss0, rss, peak)  # the acceptance bound (before: 316 MB at 300 agents)
    # The documented bound (docs/hardening.md): the byte budgets (sessions 64 MiB, agents and
    # index 16 MiB each), ~250 B per residency-shadow entry, and what is in flight (3 requests:
    # body and parsed prompt). Before this fix: 175 MB over the start at 60 agents.
    bound = ((64 + 16 + 16) << 20) + 250 * 160_000 + 3 * 2 * size
    assert (rss - rss0) * (1 << 20) < bound, (rss0, rss, bound / (1 << 20))


def test_adversarial_prompts_keep_the_index_within_its_real_budget(engine_url, tmp_path):
    """Prompts shaped to maximise prefix-index nodes per byte (every prompt branches off a shared
    stem at a different block, ending one block later). Before: the index counted 16 MiB was
    24-34 MB real (200 B a node); the node estimate is now fitted to tracemalloc
    (tests/core/test_memory_accounting.py), so the budget holds in real bytes. Here: 500 such
    prompts against a 256 KiB index budget (100k at 16 MiB is benchmarks-sized)."""
    stem = "".join(f"s{j:04d}" + "z" * 58 for j in range(64))  # 64 blocks of 64 chars
    with proxy(engine_url, tmp_path, 'policy_overrides={"prefix_index_max_bytes": 262144}') as px:
        rss0 = px.rss_mb()

        async def drive() -> None:
            async with httpx.AsyncClient(timeout=60) as c:
                sem = asyncio.Semaphore(8)

                async def one(k: int) -> None:
                    cut = (k * 7919) % 64 * 64
                    text = stem[:cut] + f"v{k:06d}" + "q" * 57
                    body = json.dumps({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": text}]})
                    async with sem:
                        assert (await c.post(px.url + CHAT, content=body, headers=GOOD)).status_code == 200

                await asyncio.gather(*(one(k) for k in range(500)))

        asyncio.run(drive())
        time.sleep(0.6)
        rss = px.rss_mb()
        kept = _metric(httpx.get(px.url + "/metrics", timeout=10).text, "cachescout_kept_bytes")
    index = kept['{store="prefix_index"}']
    print(f"\nadversarial: RSS {rss0:.0f} -> {rss:.0f} MB, index {index / 1e6:.2f} MB")
    assert 0 < index <= 256 << 10
    assert rss - rss0 < 48, (rss0, rss)


# The acceptance figure is /livez p99 < 50 ms. This box has 2 cores shared with other jobs (the
# load generator, the engine stand-in, the probe and the proxy all run here), so a test run may
# see scheduler delays that have nothing to do with the proxy: MARGIN (x2 -> 100 ms) is the slack
# allowed here; the unscaled figure is checked and reported by `benchmarks/hardening.py`.
MARGIN = 2.0


@pytest.fixture
def engine_url() -> Iterator[str]:
    from .conftest import upstream

    with upstream() as url:
        yield url


_ = asyncio
