"""A deterministic, dependency-free tokenizer for the simulated engine.

Why not a real tokenizer: tests, the demo and the replay must run offline with no model files, yet
the prefix cache only needs *stable* token ids and the property real BPE tokenizers have at chat
message boundaries: equal text prefixes that end at a special token or a newline give equal token
prefixes.

Scheme ("sim-wordpiece-v1"):
- special tokens (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`) have fixed ids 0..2 and split
  the text; each segment between them is tokenized on its own;
- a segment splits with the regex `\\n | [ \\t]*\\w+ | [ \\t]*[^\\w\\s] | [ \\t]+`: a newline is always its
  own token, a run of spaces/tabs attaches to the word or punctuation mark that follows (GPT style);
- a word longer than 8 characters is cut into 8-character pieces (keeps token counts close to
  ~1.3 tokens per English word, like a BPE model);
- piece id = 3 + xxh32(piece) mod (vocab_size - 3); the default vocabulary is Llama-3's 128,256.
Decoding uses a reverse map of the pieces this instance has seen (collisions keep the first piece).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import xxhash

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = (IM_START, IM_END, END_OF_TEXT)
DEFAULT_VOCAB = 128_256
MAX_PIECE = 8
NAME = "sim-wordpiece-v1"

_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL_TOKENS) + ")")
_PIECE_RE = re.compile(r"\n|[ \t]*\w+|[ \t]*[^\w\s]|[ \t]+|\s")


class SimTokenizer:
    """Stateless apart from a bounded decode map; safe to share within one process."""

    def __init__(self, vocab_size: int = DEFAULT_VOCAB, decode_map_limit: int = 200_000):
        if vocab_size <= len(SPECIAL_TOKENS) + 1:
            raise ValueError("vocab_size too small")
        self.vocab_size = vocab_size
        self.special_ids = {s: i for i, s in enumerate(SPECIAL_TOKENS)}
        self.eos_id = self.special_ids[IM_END]
        self._decode: dict[int, str] = {i: s for s, i in self.special_ids.items()}
        self._limit = decode_map_limit
        self._cache: dict[str, int] = {}

    # ----------------------------------------------------------------- encode
    def piece_id(self, piece: str) -> int:
        tid = self._cache.get(piece)
        if tid is None:
            n = len(SPECIAL_TOKENS)
            tid = n + xxhash.xxh32_intdigest(piece.encode("utf-8")) % (self.vocab_size - n)
            if len(self._cache) < self._limit:
                self._cache[piece] = tid
                self._decode.setdefault(tid, piece)
        return tid

    def pieces(self, text: str, allow_special: bool = True) -> list[str]:
        """Text pieces, one per token (special tokens included when `allow_special`)."""
        out: list[str] = []
        segments: Iterable[str] = _SPECIAL_RE.split(text) if allow_special else (text,)
        for seg in segments:
            if not seg:
                continue
            if allow_special and seg in self.special_ids:
                out.append(seg)
                continue
            for m in _PIECE_RE.finditer(seg):
                p = m.group(0)
                if len(p) <= MAX_PIECE:
                    out.append(p)
                else:
                    out.extend(p[i : i + MAX_PIECE] for i in range(0, len(p), MAX_PIECE))
        return out

    def encode(self, text: str, allow_special: bool = True) -> list[int]:
        special = self.special_ids
        return [
            special[p] if (allow_special and p in special) else self.piece_id(p)
            for p in self.pieces(text, allow_special)
        ]

    def encode_with_pieces(self, text: str) -> tuple[list[int], list[str]]:
        ps = self.pieces(text)
        return [self.special_ids.get(p) if p in self.special_ids else self.piece_id(p) for p in ps], ps

    # ----------------------------------------------------------------- decode
    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Best effort: ids never produced by this instance decode to `<|tok_N|>`."""
        out = []
        for i in ids:
            if skip_special and i < len(SPECIAL_TOKENS):
                continue
            out.append(self._decode.get(i, f"<|tok_{i}|>"))
        return "".join(out)

    def valid_id(self, tid: int) -> bool:
        return isinstance(tid, int) and not isinstance(tid, bool) and 0 <= tid < self.vocab_size
