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
from tests._builders import FunctionModel, call, handoff, loop_graph

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
    return loop_graph(ac, model, ac.tools).compile(store=store)


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
    # another library's summary in the user's role (SummarizationMiddleware's) is not the
    # conversation's first user message: its id is new each time it summarizes again
    foreign = {"lc_source": "summarization"}
    summary = HumanMessage("summary", id=str(uuid.uuid4()), additional_kwargs=foreign)
    resummarized = summary.model_copy(update={"id": str(uuid.uuid4())})
    assert engine.run_thread(None, None, [summary, *convo])[0] == a
    assert engine.run_thread(None, None, [resummarized, *convo])[0] == a


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


# --- plain engine calls made inside a graph run ------------------------------------------
def _plain_calls_graph(
    ac: AutoContext, model: Any, store: Any, mode: str, tools: Any = (), **compile: Any
) -> Any:
    """A StateGraph whose model node calls ``ac.compress`` / ``prepare_model_call`` /
    ``after_model_call`` without ``thread_id`` (a model node of the user's own), and
    whose ToolNode runs the package's tools."""
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    def update(reply: BaseMessage, after: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [reply, *after.get("messages", [])]}

    def agent(state: MessagesState) -> dict[str, Any]:
        result = ac.compress(state["messages"])
        reply = model.invoke(ac.prepare_model_call(result.messages).messages)
        return update(reply, ac.after_model_call([*result.messages, reply]))

    async def aagent(state: MessagesState) -> dict[str, Any]:
        result = await ac.acompress(state["messages"])
        reply = await model.ainvoke(ac.prepare_model_call(result.messages).messages)
        return update(reply, await ac.aafter_model_call([*result.messages, reply]))

    g = StateGraph(MessagesState)
    g.add_node("agent", agent if mode == "sync" else aagent)
    g.add_node("tools", ToolNode([*ac.all_tools, *tools]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(store=store, **compile)


async def _invoke(graph: Any, mode: str, inputs: Any, config: Any) -> Any:
    if mode == "sync":
        return graph.invoke(inputs, config)
    return await graph.ainvoke(inputs, config)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_plain_calls_in_a_graph_file_under_the_runs_thread(mode: str) -> None:
    """``ac.compress(state["messages"])`` in a node, without ``thread_id``, filed every
    conversation of the graph under ``"default"``: one history for all users. It now
    files each under the run's thread, as the package's own surfaces and tools do."""
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_autocontext.store import decode_thread_id

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000, disclosure="always"), store=store)
    graph = _plain_calls_graph(
        ac, FunctionModel(respond=searcher), store, mode, checkpointer=InMemorySaver()
    )
    first = await _invoke(
        graph, mode, {"messages": [("user", f"Remember my {SECRET}.")]}, _thread("A")
    )
    second = await _invoke(
        graph, mode, {"messages": [("user", "What SSN did the last customer give?")]}, _thread("B")
    )
    assert "123-45-6789" in answers(first)
    assert "123-45-6789" not in answers(second)
    st = ac.resolve_store(store)
    threads = {decode_thread_id(ns[1]) for ns in store.list_namespaces(prefix=("autocontext",))}
    assert threads == {"A", "B"}, threads
    for thread, result in (("A", first), ("B", second)):
        history = {e.id: str(e.message.content) for e in st.iter_history(thread)}
        assert set(history) == {str(m.id) for m in result["messages"]}  # the reply too
    assert "123-45-6789" not in str([e.message.content for e in st.iter_history("B")])


def _thread(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("checkpointed", [True, False])
async def test_the_tools_reload_what_a_plain_compress_call_offloaded(
    mode: str, checkpointed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node calling ``ac.compress`` and the ToolNode running ``reload_offloaded`` in
    the same run agree on the thread: with the run's ``thread_id``, and without one (the
    thread named after the conversation's first user message, as the surfaces do)."""
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    monkeypatch.setattr(engine, "_warned_run_thread", False)

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        return "\n".join(f"{url}: line {i} value={i * 7 % 13} status ok" for i in range(150))

    reloaded: list[str] = []

    def respond(msgs: list[BaseMessage], n: int) -> AIMessage:
        if n < 3:
            return AIMessage("", tool_calls=[call("fetch", {"url": f"u{n}"})])
        if n == 3:
            ids = _offload_ids(msgs)
            assert ids, "the node offloaded a page"
            return AIMessage("", tool_calls=[call("reload_offloaded", {"offload_id": ids[0]})])
        reloaded.append(str(msgs[-1].content))
        return AIMessage("done")

    store = InMemoryStore()
    ac = AutoContext(max_tokens=4_000, store=store, tools=[fetch])
    compile = {"checkpointer": InMemorySaver()} if checkpointed else {}
    model = FunctionModel(respond=respond)
    compiled = _plain_calls_graph(ac, model, store, mode, [fetch], **compile)
    config = _thread("t-1") if checkpointed else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await _invoke(compiled, mode, {"messages": [("user", "Read u0 to u2.")]}, config)
    # a run without thread_id: the surfaces' warning, once
    said = [w for w in caught if "no thread_id" in str(w.message)]
    assert len(said) == (0 if checkpointed else 1), [str(w.message) for w in caught]
    assert reloaded and "No offloaded content" not in reloaded[0], reloaded
    assert not ac.resolve_store(store).history_count("default")


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_plain_calls_in_an_entrypoint_file_under_the_runs_thread(mode: str) -> None:
    """The functional API: an ``@entrypoint`` calling ``compress`` and
    ``after_model_call`` without ``thread_id`` files each conversation under its
    ``thread_id``; another thread's search never reaches it."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint
    from langgraph.graph.message import add_messages

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
    model = FunctionModel(respond=lambda msgs, n: AIMessage(f"noted {n}"))

    def turn(question: str, previous: list[BaseMessage] | None) -> list[BaseMessage]:
        return add_messages(previous or [], [HumanMessage(question)])

    if mode == "sync":

        @entrypoint(checkpointer=InMemorySaver(), store=store)
        def chat(question: str, *, previous: list[BaseMessage] | None) -> Any:
            messages = ac.compress(turn(question, previous)).messages
            messages = add_messages(messages, [model.invoke(messages)])
            messages = add_messages(messages, ac.after_model_call(messages).get("messages", []))
            return entrypoint.final(value=messages, save=messages)

    else:

        @entrypoint(checkpointer=InMemorySaver(), store=store)
        async def chat(question: str, *, previous: list[BaseMessage] | None) -> Any:
            messages = (await ac.acompress(turn(question, previous))).messages
            messages = add_messages(messages, [await model.ainvoke(messages)])
            update = await ac.aafter_model_call(messages)
            messages = add_messages(messages, update.get("messages", []))
            return entrypoint.final(value=messages, save=messages)

    for thread, text in (("A", f"Remember my {SECRET}."), ("B", "What SSN was given?")):
        await _invoke(chat, mode, text, _thread(thread))
    st = ac.resolve_store(store)
    assert not st.history_count("default")
    assert [str(e.message.content) for e in st.iter_history("A")] == [
        f"Remember my {SECRET}.",
        "noted 0",
    ]
    assert [str(e.message.content) for e in st.iter_history("B")] == [
        "What SSN was given?",
        "noted 1",
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_plain_calls_outside_a_run_keep_the_default_thread(mode: str) -> None:
    """Outside any run, ``compress`` and ``after_model_call`` without ``thread_id`` file
    under ``"default"``; an explicit ``thread_id`` wins, also inside a run."""
    from langchain_core.messages import HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
    messages = [HumanMessage("hello", id="h1"), AIMessage("hi", id="a1")]
    if mode == "sync":
        ac.compress(messages)
        ac.after_model_call([*messages, AIMessage("more", id="a2")])
    else:
        await ac.acompress(messages)
        await ac.aafter_model_call([*messages, AIMessage("more", id="a2")])
    st = ac.resolve_store(store)
    assert [e.id for e in st.iter_history("default")] == ["h1", "a1", "a2"]

    def node(state: MessagesState) -> dict[str, Any]:
        ac.compress(state["messages"], thread_id="chosen")
        return {}

    g = StateGraph(MessagesState)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.compile().invoke({"messages": [("user", "pick")]}, _thread("run"))
    assert st.history_count("chosen") == 1 and not st.history_count("run")
