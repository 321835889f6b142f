"""Make a tiny random-weight Llama plus a locally trained tokenizer, with no downloads.

Why: the e2e job must run on a machine that reaches only package registries, so no Hub model can
be fetched. Text quality is irrelevant to what the job proves (KV prefix-cache behaviour and real
prefill cost), so random weights are fine. The tokenizer is a byte-level BPE trained on the Python
standard library's own sources (always present), saved as a fast tokenizer with a ChatML chat
template that renders `tools`, assistant `tool_calls` and `tool` messages, so agents with distinct
tools have distinct anchors and tool-call sessions can be resumed. `<tool_call>`/`</tool_call>` are
added (non-special) tokens so vLLM's `hermes` tool parser can run on guided outputs.

Runs inside the vLLM venv (needs torch, transformers, tokenizers). Deterministic given the seed.
Usage: python make_model.py OUT_DIR [--hidden 256 --layers 4 --vocab 4096]
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from pathlib import Path

CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n{% endif %}"
    "# Tools\n<tools>\n"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>"
    "<|im_end|>\n"
    "{% set start = 1 if (messages and messages[0]['role'] == 'system') else 0 %}"
    "{% else %}{% set start = 0 %}{% endif %}"
    "{% for message in messages[start:] %}"
    "{% if message['role'] == 'assistant' and message.get('tool_calls') %}"
    "<|im_start|>assistant\n{% if message['content'] %}{{ message['content'] }}\n{% endif %}"
    "{% for tc in message['tool_calls'] %}"
    "{% set fn = tc['function'] if tc.get('function') else tc %}"
    '<tool_call>\n{"name": "{{ fn[\'name\'] }}", "arguments": '
    "{{ fn['arguments'] if fn['arguments'] is string else (fn['arguments'] | tojson) }}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif message['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] if message['content'] is string else "
    "(message['content'] | map(attribute='text') | join('')) }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def corpus_files(limit_bytes: int) -> list[str]:
    """Stdlib .py files, sorted for determinism, up to `limit_bytes` in total."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files: list[str] = []
    total = 0
    for path in sorted(root.glob("*.py")):
        size = path.stat().st_size
        if total + size > limit_bytes:
            break
        files.append(str(path))
        total += size
    if not files:
        raise SystemExit(f"make_model: no stdlib sources under {root} to train a tokenizer on")
    return files


def train_tokenizer(out: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(corpus_files(6_000_000), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.add_tokens(ADDED_TOKENS, special_tokens=False)
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 8192
    fast.save_pretrained(str(out))


def make_model(out: Path, vocab_size: int, hidden: int, layers: int, heads: int, seed: int) -> int:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(out))
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=8192,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out), safe_serialization=True)
    GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id).save_pretrained(str(out))
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    train_tokenizer(args.out, args.vocab)
    params = make_model(args.out, args.vocab, args.hidden, args.layers, args.heads, args.seed)
    # Smoke check: the chat template renders tools / tool calls / tool results.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(args.out))
    msgs = [
        {"role": "system", "content": "You are a test agent."},
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    text = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    for needle in ("# Tools", "<tool_call>", "<tool_response>", "<|im_start|>assistant\n"):
        if needle not in text:
            raise SystemExit(f"make_model: chat template lost {needle!r}:\n{text}")
    info = {"params": params, "vocab": len(tok), "hidden": args.hidden, "layers": args.layers}
    (args.out / "cachescout-model.json").write_text(json.dumps(info))
    print(json.dumps(info), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
