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
from tests._builders import FunctionModel, call, handoff

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


def _offload_ids(messages: list[BaseMessage]) -> list[str]:
    import re

    text = " ".join(str(m.content) for m in messages)
    return re.findall(r'reload_offloaded\(offload_id="([0-9a-f-]+)"\)', text)


def test_agents_of_one_stateless_request_share_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A supervisor and a researcher (each ``create_agent`` with the middleware) in one
    parent graph, no checkpointer and no ``thread_id``: the offload the researcher made
    is reloaded by the supervisor (its id in the shared messages). Each ``create_agent``
    invocation starts without the package's private state, so a thread made up per
    invocation filed one request under five threads and every reload failed."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph

    from langchain_autocontext.store import decode_thread_id

    monkeypatch.setattr(engine, "_warned_run_thread", True)
    store = InMemoryStore()

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        return "\n".join(f"{url}: line {i} value={i * 7 % 13} status ok" for i in range(150))

    reloaded: list[str] = []

    def supervisor(msgs: list[BaseMessage], n: int) -> AIMessage:
        if n == 0:
            return AIMessage("", tool_calls=[call("transfer_to_researcher", {})])
        if n == 1:
            ids = _offload_ids(msgs)
            assert ids, "the researcher's offload is in the shared messages"
            return AIMessage("", tool_calls=[call("reload_offloaded", {"offload_id": ids[0]})])
        reloaded.append(str(msgs[-1].content))
        return AIMessage("done")

    def researcher(msgs: list[BaseMessage], n: int) -> AIMessage:
        if n < 3:
            return AIMessage("", tool_calls=[call("fetch", {"url": f"u{n}"})])
        return AIMessage("", tool_calls=[call("transfer_to_supervisor", {})])

    def agent(fn: Any, tools: list[Any], name: str) -> Any:
        ac = AutoContext(max_tokens=4_000, store=store)
        return create_agent(
            FunctionModel(respond=fn), tools, system_prompt=name, middleware=[ac.middleware()]
        )

    g = StateGraph(MessagesState)
    g.add_node("supervisor", agent(supervisor, [handoff("researcher")], "sup"))
    g.add_node("researcher", agent(researcher, [fetch, handoff("supervisor")], "res"))
    g.add_edge(START, "supervisor")
    g.add_edge("supervisor", END)
    app = g.compile(store=store)  # no checkpointer: a stateless request
    app.invoke({"messages": [HumanMessage("go")]}, {"recursion_limit": 40})

    assert reloaded and "No offloaded content" not in reloaded[0], reloaded
    assert "[offload " in reloaded[0]
    threads = {decode_thread_id(ns[1]) for ns in store.list_namespaces(prefix=("autocontext",))}
    assert len(threads) == 1 and next(iter(threads)).startswith("run-"), threads


def test_a_stateless_conversation_is_filed_by_its_first_user_message() -> None:
    """The thread of a run without ``thread_id`` is named after its first user message's
    id when that is a random uuid4 (the same conversation sent again finds its history;
    another conversation does not), and made up when the id could be shared."""
    import uuid

    from langchain_core.messages import HumanMessage

    first = str(uuid.uuid4())
    convo = [HumanMessage("hi", id=first), AIMessage("hello", id=str(uuid.uuid4()))]
    a, _ = engine.run_thread(None, None, convo)
    again, made = engine.run_thread(None, None, [*convo, HumanMessage("more")])
    assert a == again and a.startswith("run-") and made == {"run_thread": a}
    other, _ = engine.run_thread(None, None, [HumanMessage("hi", id=str(uuid.uuid4()))])
    assert other != a
    # offloaded in place, the first message keeps its id and the thread
    from langchain_autocontext.messages import mark

    offloaded = mark(HumanMessage("[preview]", id=first), "offloaded", offload_id="o1")
    assert engine.run_thread(None, None, [offloaded, HumanMessage("more")])[0] == a
    # client-chosen or derived (uuid5) ids could be shared by two users: a fresh thread
    for mid in ("1", str(uuid.uuid5(uuid.NAMESPACE_URL, "hi")), None):
        t1, _ = engine.run_thread(None, None, [HumanMessage("hi", id=mid)])
        t2, _ = engine.run_thread(None, None, [HumanMessage("hi", id=mid)])
        assert t1 != t2
    # a thread_id, or a thread already kept in the state, wins
    assert engine.run_thread({"configurable": {"thread_id": "t"}}, None, convo) == ("t", None)
    assert engine.run_thread(None, {"run_thread": "run-x"}, convo) == ("run-x", None)


def test_a_stateless_conversation_keeps_one_thread_once_its_first_message_is_compressed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stateless server (no checkpointer, no ``thread_id``, a ``MessagesState`` that
    drops the package's key) gets the conversation back from its client each request.
    Its thread was named after the first user message in the list, so once the node
    evicted that message into the recursive summary, the conversation went on under
    another thread and ``search_history`` no longer found its start. The recursive
    summary now names the message it absorbed, and the thread stays."""
    import uuid

    from langchain_core.messages import HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    from langchain_autocontext.store import OffloadStore, decode_thread_id

    monkeypatch.setattr(engine, "_warned_run_thread", True)
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=2_000, self_management_tools=False), store=store)
    model = FunctionModel(respond=lambda msgs, n: AIMessage(f"answer {n} " + "noted " * 60))
    g = StateGraph(MessagesState)
    g.add_node("context", ac.node())
    g.add_node("model", lambda s: {"messages": [model.invoke(s["messages"])]})
    g.add_edge(START, "context")
    g.add_edge("context", "model")
    g.add_edge("model", END)
    app = g.compile(store=store)  # no checkpointer: the client keeps the conversation

    first = HumanMessage("My locker code is 4471. " + "context " * 80, id=str(uuid.uuid4()))
    conversation: list[BaseMessage] = [first]
    for k in range(14):
        conversation = app.invoke({"messages": conversation})["messages"]
        conversation.append(HumanMessage(f"question {k} " + "detail " * 80, id=str(uuid.uuid4())))
    assert first.id not in {m.id for m in conversation}, "the first message was never evicted"
    threads = {decode_thread_id(ns[1]) for ns in store.list_namespaces(prefix=("autocontext",))}
    assert len(threads) == 1, threads
    history = OffloadStore(store).iter_history(next(iter(threads)))
    assert "locker code is 4471" in str(next(iter(history)).message.content)
