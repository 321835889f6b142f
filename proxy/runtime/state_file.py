"""The state file's I/O and the observer's hardening settings, kept out of `live.py`'s flow.

Reading: the file's size is checked before it is read (a huge or hostile file is refused without
being loaded), then `ScoutPolicy.restore` validates the whole document before applying any of it.
Writing: to a temporary file in the same directory, flushed and fsync'ed, renamed over the old one
(atomic on POSIX), then the directory is fsync'ed, so a crash leaves either the old or the new file,
never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from proxy.core.snapshot import tenant_tag
from proxy.runtime.offload import ObserveLimits, ParseOffload
from proxy.runtime.response_tap import TapBudget

if TYPE_CHECKING:
    from proxy.runtime.live_policy import LivePolicyObserver
    from proxy.settings import Settings

__all__ = ["harden_observer", "read_state_file", "tenant_tag", "write_state_file"]


def read_state_file(path: str, max_bytes: int) -> dict[str, object]:
    size = os.stat(path).st_size
    if size > max_bytes:
        raise ValueError(f"state file is {size} bytes, limit {max_bytes}")
    with open(path, "rb") as f:
        doc = json.loads(f.read(max_bytes + 1))
    if not isinstance(doc, dict):
        raise ValueError("state file is not a JSON object")
    return doc


def write_state_file(path: str, doc: Mapping[str, object]) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc, separators=(",", ":")).encode()
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def harden_observer(observer: LivePolicyObserver, settings: Settings) -> None:
    """Apply the `policy_*` hardening settings to a LivePolicyObserver."""
    observer.limits = ObserveLimits.from_settings(settings)
    limits = observer.limits
    observer.offload = ParseOffload(limits.offload_queue, limits.parse_share, limits.parse_burst_s)
    observer.tap_budget = TapBudget(settings.policy_tap_max_bytes)
    hashes = settings.policy_client_auth_sha256
    observer.allowed_auth = frozenset(h.strip().lower() for h in hashes if h.strip())
