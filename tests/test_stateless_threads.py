"""Runs without a ``thread_id`` (no checkpointer: stateless requests) never share a
history: each run files its messages under a thread of its own, so one user's
``search_history`` cannot return another user's message, while a run still finds its
own (issue 13, item 4)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig, engine
from tests._builders import FunctionModel, call

SECRET = "SSN 123-45-6789"


def searcher(messages: list[BaseMessage], n: int) -> AIMessage:
    """Searches the history for "SSN" once per run, then answers with what it found."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(f"found: {last.content}")
    return AIMessage("", tool_calls=[call("search_history", {"query": "SSN"})])


def build(kind: str, ac: AutoContext, model: Any, store: Any) -> Any:
    """The surface wired with a store and no checkpointer."""
    if kind == "middleware":
        from langchain.agents import create_agent

        return create_agent(model, tools=[], middleware=[ac.middleware()], store=store)
    if kind == "hooks":
        from langchain_autocontext import AutoContextAgentState

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent

            return create_react_agent(
                model,
                ac.tools,
                pre_model_hook=ac.pre_model_hook,
                post_model_hook=ac.post_model_hook,
                state_schema=AutoContextAgentState,
                store=store,
            )
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from langchain_autocontext import AutoContextState

    g = StateGraph(AutoContextState)
    g.add_node("autocontext", ac.node())
    g.add_node("model", ac.model_node(model))
    g.add_node("commands", ac.command_node())
    g.add_node("tools", ToolNode(ac.tools))
    g.add_edge(START, "autocontext")
    g.add_edge("autocontext", "model")
    g.add_edge("model", "commands")
    g.add_conditional_edges("commands", tools_condition)
    g.add_edge("tools", "autocontext")
    return g.compile(store=store)


def answers(result: dict[str, Any]) -> str:
    return str(result["messages"][-1].content)


@pytest.mark.parametrize("kind", ["middleware", "hooks", "node"])
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_runs_without_thread_id_do_not_share_a_history(
    kind: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "_warned_run_thread", False)
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000, disclosure="always"), store=store)
    graph = build(kind, ac, FunctionModel(respond=searcher), store)

    async def run(text: str) -> dict[str, Any]:
        inputs = {"messages": [{"role": "user", "content": text}]}
        if mode == "sync":
            return graph.invoke(inputs)
        return await graph.ainvoke(inputs)

    with pytest.warns(UserWarning, match="no thread_id"):
        first = await run(f"Remember my {SECRET}.")
    assert "123-45-6789" in answers(first)  # a run finds its own history
    second = await run("What SSN did the last customer give?")
    assert "123-45-6789" not in answers(second)
    assert "no match" in answers(second).lower() or "found: " in answers(second)
    # nothing was filed under the shared "default" thread
    assert not ac.resolve_store(store).history_count("default")


@pytest.mark.parametrize("kind", ["hooks", "node"])
def test_the_final_answer_reaches_the_history_when_the_run_ends(kind: str) -> None:
    """Issue 13: with the node surfaces the run's final answer reached the history store
    only at the next model call; the command node (post_model_hook) archives it."""
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
    graph = build(kind, ac, FunctionModel(respond=searcher), store)
    out = graph.invoke(
        {"messages": [{"role": "user", "content": f"Remember my {SECRET}."}]},
        {"configurable": {"thread_id": "final"}},
    )
    final = out["messages"][-1]
    assert final.content.startswith("found: ")
    history = {e.id: e.message for e in ac.resolve_store(store).iter_history("final")}
    assert final.id in history and history[final.id].content == final.content
