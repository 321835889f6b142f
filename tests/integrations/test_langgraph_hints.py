"""A real LangGraph graph drives agents through the proxy to the simulated engine, and the
CacheScout callback sends tool-start/end, fan-out and session-end hints as it runs; the proxy
receives, acts on and checks them (the resumed model call confirms the tool hint)."""

from __future__ import annotations

import operator
import time
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph", reason="optional integration: pip install -e '.[langgraph]' (in the test extra)")
openai = pytest.importorskip("openai")

from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Send  # noqa: E402

from proxy.core.hints import source_id  # noqa: E402
from proxy.harness.proxy_server import run_proxy_server  # noqa: E402
from proxy.harness.sim_server import run_sim_server  # noqa: E402
from proxy.integrations.langgraph import CacheScoutCallback  # noqa: E402
from tests.live.conftest import MODEL, agent_prompts, proxy_settings, sim_config  # noqa: E402

pytestmark = pytest.mark.sockets
PROMPTS = agent_prompts(3, 80)


@tool
def search(q: str) -> str:
    """Look something up (sleeps briefly, like a real tool)."""
    time.sleep(0.05)
    return f"result for {q}"


class State(TypedDict):
    notes: Annotated[list, operator.add]


def build_graph(llm: openai.OpenAI, hints: CacheScoutCallback):
    def ask(agent: str, text: str, config) -> str:
        thread = config["configurable"]["thread_id"]
        r = llm.chat.completions.create(
            model=MODEL,
            max_tokens=8,
            user=thread,
            messages=[{"role": "system", "content": PROMPTS[agent]}, {"role": "user", "content": text}],
        )
        return r.choices[0].message.content or ""

    def researcher(state: State, config) -> dict:
        first = ask("A", "what should we look up?", config)
        found = search.invoke({"q": first[:20]}, config)  # on_tool_start / on_tool_end
        return {"notes": [ask("A", f"the tool said: {found}", config)]}

    def split(state: State, config) -> list:
        return hints.fanout([Send("worker", {"notes": [f"part {i}"]}) for i in range(3)], config)

    def worker(state: State, config) -> dict:
        return {"notes": [ask("B", f"work on {state['notes'][-1]}", config)]}

    g = StateGraph(State)
    g.add_node("researcher", researcher)
    g.add_node("worker", worker)
    g.add_edge(START, "researcher")
    g.add_conditional_edges("researcher", split, ["worker"])
    g.add_edge("worker", END)
    return g.compile()


def test_langgraph_callback_sends_hints_the_proxy_acts_on_and_checks():
    with run_sim_server(sim_config(capacity_blocks=256)) as sim, run_proxy_server(proxy_settings(sim.url)) as px:
        hints = CacheScoutCallback(px.url, api_key="graph-key", source="research-graph")
        llm = openai.OpenAI(base_url=px.url + "/v1", api_key="graph-key")
        out = build_graph(llm, hints).invoke(
            {"notes": []}, {"callbacks": [hints], "configurable": {"thread_id": "lg-thread-1"}}
        )
        assert len(out["notes"]) == 4
        px.call(lambda: px.live.settle(5.0))
        report = px.live.hints.driver.report()
    assert hints.hints.failed == 0 and hints.hints.sent == 4
    kinds = report["sources"][source_id(api_key="graph-key", source="research-graph")]["kinds"]
    assert kinds["tool_started"]["acted"] == 1 and kinds["tool_finished"]["acted"] == 1
    assert kinds["tool_started"]["checked"] == 1 and kinds["tool_started"]["conversion"] == 1.0  # it resumed
    assert kinds["fanout"]["acted"] == 1 and kinds["fanout"]["conversion"] == 1.0  # 3 branches came
    assert kinds["session_ended"]["acted"] == 1
    assert report["released_sessions"] == 1
