"""The official `openai` client talks to the sim engine: chat, streaming with usage, tools, completions."""

import pytest

from proxy.harness.sim_server import run_sim_server
from proxy.simengine.service import SimConfig

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.sockets

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def test_openai_sdk_roundtrip():
    cfg = SimConfig(speed=0, capacity_blocks=1024, output_tokens=10, tool_call_share=1.0)
    with run_sim_server(cfg) as sim:
        client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0)
        msgs = [{"role": "system", "content": "You are terse. " * 30}, {"role": "user", "content": "hi"}]
        r = client.chat.completions.create(model=cfg.model, messages=msgs, max_tokens=20)
        assert r.choices[0].message.content and r.usage.prompt_tokens > 0
        stream = client.chat.completions.create(
            model=cfg.model,
            messages=msgs,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"cache_salt": "s1"},
        )
        chunks = list(stream)
        assert chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens
        r2 = client.chat.completions.create(
            model=cfg.model, messages=msgs, max_tokens=20, extra_body={"cache_salt": "s1"}
        )
        assert r2.usage.prompt_tokens_details.cached_tokens == (r2.usage.prompt_tokens - 1) // 16 * 16
        t = client.chat.completions.create(
            model=cfg.model, messages=[{"role": "user", "content": "weather?"}], tools=TOOLS
        )
        call = t.choices[0].message.tool_calls[0]
        assert t.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
        c = client.completions.create(model=cfg.model, prompt=[1, 2, 3, 4], max_tokens=3)
        assert c.usage.completion_tokens == 3 and c.choices[0].finish_reason == "length"
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="other", messages=msgs)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=cfg.model, messages=msgs, n=2)
