"""What an action carries so that an engine adapter can rebuild its prefix: `ActionPayload`.

Why a typed object and not a dict: the core builds a payload in a few places (an agent's anchor, a
paused session's context plus its assistant turn, a fan-out parent) and the adapters read it in one
(`engines.base.warm_spec`). A bare ``{"context": ..., "assistant": ...}`` dict made every reader
guess the shape; this dataclass names the two parts once, and `request()` is the one decoder.

The prompt itself stays opaque to the core: it is whatever the request's view carried (a mapping
from `fingerprint`, a replay's placeholder) or a `KeptPrompt`, a compact form that rebuilds the
mapping on demand (the live proxy keeps a session's context as its body bytes,
`runtime/payload.py`). Pure: no I/O, no framework imports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass


class KeptPrompt(ABC):
    """A prompt kept compactly that rebuilds the request mapping an adapter replays on demand."""

    __slots__ = ()

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes held (the core's session byte budget reads this)."""

    @abstractmethod
    def to_warm_dict(self) -> Mapping[str, object] | None:
        """The request mapping (model, messages or prompt, tools, ...); None when not replayable."""


@dataclass(frozen=True, slots=True)
class ActionPayload:
    """The prefix an action acts on, as an adapter rebuilds it.

    ``prompt``: the request that rebuilds the prefix — an agent's anchor payload, or a paused
    session's kept context (a mapping or a `KeptPrompt`); opaque to the core.
    ``assistant``: a session paused on tool calls: its assistant tool-call turn, appended to the
    context's messages (the resume reads the context *and* that turn). None otherwise.
    """

    prompt: object
    assistant: Mapping[str, object] | None = None

    def request(self) -> Mapping[str, object] | None:
        """The prompt as a request mapping (a kept prompt is decoded here); None: nothing to replay."""
        prompt = self.prompt
        if isinstance(prompt, KeptPrompt):
            return prompt.to_warm_dict()
        return prompt if isinstance(prompt, Mapping) else None
