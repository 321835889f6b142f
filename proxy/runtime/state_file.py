"""The state file's I/O and the observer's hardening settings, kept out of `live.py`'s flow.

Reading: the file's size is checked before it is read (a huge or hostile file is refused without
being loaded), then `ScoutPolicy.restore` validates the whole document before applying any of it.
Writing: to a temporary file in the same directory, flushed and fsync'ed, renamed over the old one
(atomic on POSIX), then the directory is fsync'ed, so a crash leaves either the old or the new file,
never half of one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from proxy.core.snapshot import tenant_tag
from proxy.runtime.offload import ObserveLimits, ParseOffload
from proxy.runtime.response_tap import TapBudget

if TYPE_CHECKING:
    from proxy.core.policy import ScoutPolicy
    from proxy.runtime.live_policy import LivePolicyObserver
    from proxy.settings import Settings

__all__ = [
    "harden_observer",
    "load_learned_state",
    "read_state_file",
    "save_learned_state",
    "tenant_tag",
    "write_state_file",
]
log = logging.getLogger("cachescout.live")


def initial_state_path(settings: Settings) -> str | None:
    """Where the initial state comes from: this replica's own `state_path` when it has saved one,
    else the read-only `state_bootstrap_path` (a fleet snapshot on a shared volume/ConfigMap)."""
    for path in (settings.state_path, settings.state_bootstrap_path):
        if path and Path(path).is_file():
            return path
    return None


def load_learned_state(policy: ScoutPolicy, settings: Settings, max_bytes: int) -> str | None:
    """Restore the policy from its initial state file; the path it came from, or None. A bad file
    is logged and ignored: it must not stop the proxy."""
    path = initial_state_path(settings)
    if path is None:
        return None
    try:
        policy.restore(read_state_file(path, max_bytes))
    except Exception as exc:  # noqa: BLE001 - a bad state file must not stop the proxy
        log.warning("ignoring state file %s: %s: %s", path, type(exc).__name__, exc)
        return None
    log.info("learned state loaded from %s", path)
    return path


def save_learned_state(policy: ScoutPolicy, path: str | None) -> None:
    """Write the policy's snapshot to `path` (none: nothing); a failure is logged, never raised."""
    if not path:
        return
    try:
        write_state_file(path, policy.snapshot())
        log.info("learned state saved to %s", path)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not save state to %s: %s", path, exc)


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
