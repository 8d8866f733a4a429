"""A compaction reports its progress on the LangGraph run's custom stream.

A chat UI streaming an agent sees nothing while the context is compacted (seconds,
with an LLM summarizer): every surface that compresses inside a graph writes
``{"autocontext": {...}}`` to ``stream_mode="custom"`` — ``compression_started``, one
``strategy`` per event the store records, ``compression_finished`` — before the model's
first token of that call, and nothing on a call that does not compress. The
summarizer's own tokens stay out of ``stream_mode="messages"``. Outside a graph run
(``ac.compress`` plain, a Runnable chain) there is no stream and nothing breaks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import pytest
from _builders import build_surface, script_model
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    BaseMessage,
    BaseMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import (
    AutoContext,
    AutoContextConfig,
    LLMSummarizer,
    Summarizer,
    SummaryRequest,
    SummaryResult,
)
from langchain_autocontext.store import OffloadStore

MARK = "ZQXSUMMARY"
ROUNDS, STEPS = 3, 6
GRAPHS = ("middleware", "react", "node")
PHASES = ("compression_started", "strategy", "compression_finished")
STORE_FIELDS = ("seq", "ts", "agent")  # what the store adds to an event


def llm_summarizer() -> LLMSummarizer:
    model = GenericFakeChatModel(messages=itertools.cycle([AIMessage(f"{MARK} all passed")]))
    return LLMSummarizer(model, retries=0)


def stream_kwargs(kind: str) -> dict[str, Any]:
    # ``ac.node()`` is a compiled subgraph: LangGraph streams a subgraph's custom chunks
    # to the caller only with ``subgraphs=True`` (items are then ``(namespace, mode, data)``)
    return {"stream_mode": ["messages", "custom"], "subgraphs": kind == "node"}


def plain(item: tuple[Any, ...]) -> tuple[str, Any]:
    """``(mode, data)`` of a streamed item, with or without its namespace."""
    return (item[1], item[2]) if len(item) == 3 else (item[0], item[1])


def progress_of(items: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [data["autocontext"] for mode, data in items if mode == "custom"]


def stored_strategy_events(store: Any, thread: str) -> list[dict[str, Any]]:
    events = OffloadStore.wrap(store).list_events(thread)
    return [
        {k: v for k, v in e.data.items() if k not in STORE_FIELDS}
        for e in events
        if "strategy" in e.data
    ]


def check_round(items: list[tuple[str, Any]], thread: str) -> list[dict[str, Any]]:
    """Each compaction streams started → strategy… → finished, with no model token
    inside it, and the model's tokens follow it before the next one starts; returns the
    strategy events streamed."""
    strategies: list[dict[str, Any]] = []
    open_: dict[str, Any] | None = None
    block: list[str] = []
    tokens_since_finish = True  # a compaction must be followed by the model's tokens
    for mode, data in items:
        if mode == "messages":
            chunk = data[0]
            if isinstance(chunk, BaseMessageChunk):  # a summary arrives whole, as state
                assert MARK not in str(chunk.content)  # the summarizer's tokens never stream
            if isinstance(chunk, AIMessageChunk) and chunk.content:
                assert open_ is None, "a model token inside a compaction"
                tokens_since_finish = True
            continue
        assert set(data) == {"autocontext"}, data  # the one key users filter on
        event = data["autocontext"]
        assert event["thread_id"] == thread
        assert event["event"] in PHASES, event
        if event["event"] == "compression_started":
            assert open_ is None and tokens_since_finish, "compactions not closed or no call"
            open_, block = event, []
            assert event["tokens"] > 0 and event["messages"] > 0
            assert event["target_tokens"] > 0  # (past the trigger: tokens or messages)
        elif event["event"] == "strategy":
            assert open_ is not None, "a strategy outside a compaction"
            block.append(event["strategy"])
            strategies.append({k: v for k, v in event.items() if k not in ("event", "thread_id")})
        else:
            assert open_ is not None, "finished without started"
            assert event["strategies"] == block
            assert event["tokens_before"] == open_["tokens"]
            assert event["tokens_after"] <= event["tokens_before"]
            assert event["seconds"] >= 0 and "error" not in event
            open_, tokens_since_finish = None, False
    assert open_ is None
    assert tokens_since_finish, "the model never answered after the last compaction"
    return strategies


def check_run(surface: Any, rounds: list[list[tuple[str, Any]]]) -> None:
    assert progress_of(rounds[0]) == []  # the first call is under the trigger
    assert stored_strategy_events(surface.store, surface.thread) or len(rounds) > 1
    streamed: list[dict[str, Any]] = []
    for items in rounds:
        streamed += check_round(items, surface.thread)
    assert streamed, "nothing compressed: the test proves nothing"
    # one strategy chunk per stored event, with the fields the store keeps
    assert streamed == stored_strategy_events(surface.store, surface.thread)
    assert any(e["summarizer_calls"] for e in streamed), "the summarizer never ran"


@pytest.mark.parametrize("kind", GRAPHS)
def test_each_compaction_streams_its_progress_before_the_model_answers(kind: str) -> None:
    surface = build_surface(kind, script_model(STEPS), summarizer=llm_summarizer())
    rounds = [
        [
            plain(item)
            for item in surface.runner.stream(
                surface._graph_input(r), surface.config, **stream_kwargs(kind)
            )
        ]
        for r in range(ROUNDS)
    ]
    check_run(surface, rounds)


@pytest.mark.parametrize("kind", GRAPHS)
async def test_each_compaction_streams_its_progress_async(kind: str) -> None:
    surface = build_surface(kind, script_model(STEPS), summarizer=llm_summarizer())
    rounds = []
    for r in range(ROUNDS):
        rounds.append(
            [
                plain(item)
                async for item in surface.runner.astream(
                    surface._graph_input(r), surface.config, **stream_kwargs(kind)
                )
            ]
        )
    check_run(surface, rounds)


def test_custom_mode_alone_yields_the_progress() -> None:
    surface = build_surface("middleware", script_model(STEPS))
    chunks = []
    for r in range(ROUNDS):
        chunks += surface.runner.stream(
            surface._graph_input(r), surface.config, stream_mode="custom"
        )
    assert chunks and all(set(c) == {"autocontext"} for c in chunks)
    phases = [c["autocontext"]["event"] for c in chunks]
    assert phases[0] == "compression_started" and phases[-1] == "compression_finished"
    assert phases.count("compression_started") == phases.count("compression_finished")


# --- the functional API -----------------------------------------------------------------
def long_turn(r: int) -> list[BaseMessage]:
    """A user turn and a finished tool run long enough to compress."""
    out: list[BaseMessage] = [HumanMessage(f"Task {r}: fix module_{r}.")]
    for k in range(4):
        cid = f"c{r}-{k}"
        out.append(
            AIMessage(
                "", tool_calls=[{"name": "sh", "args": {"n": k}, "id": cid, "type": "tool_call"}]
            )
        )
        out.append(ToolMessage(f"log line {r}.{k} " * 120, tool_call_id=cid, name="sh"))
    out.append(AIMessage(f"module_{r} fixed"))
    return out


def functional_agent() -> tuple[Any, Any]:
    ac = AutoContext(
        AutoContextConfig(max_tokens=3_000, self_management_tools=False),
        summarizer=llm_summarizer(),
    )
    model = GenericFakeChatModel(messages=itertools.cycle([AIMessage("done and dusted")]))

    @entrypoint(checkpointer=InMemorySaver(), store=InMemoryStore())
    def agent(turn: list[AnyMessage], *, previous: list[AnyMessage] | None) -> Any:
        messages = add_messages(previous or [SystemMessage("You code.")], turn)
        messages = ac.compress(messages).messages
        reply = model.invoke(ac.prepare_model_call(messages).messages)
        return entrypoint.final(value=reply.content, save=add_messages(messages, [reply]))

    @entrypoint(checkpointer=InMemorySaver(), store=InMemoryStore())
    async def aagent(turn: list[AnyMessage], *, previous: list[AnyMessage] | None) -> Any:
        messages = add_messages(previous or [SystemMessage("You code.")], turn)
        messages = (await ac.acompress(messages)).messages
        reply = await model.ainvoke(ac.prepare_model_call(messages).messages)
        return entrypoint.final(value=reply.content, save=add_messages(messages, [reply]))

    return agent, aagent


def check_functional(rounds: list[list[tuple[str, Any]]]) -> None:
    assert progress_of(rounds[0]) == []  # one short turn: nothing to compress
    assert any(progress_of(items) for items in rounds[1:])
    for items in rounds:
        check_round(items, "fn-1")


def test_entrypoint_streams_the_progress() -> None:
    agent, _ = functional_agent()
    config = {"configurable": {"thread_id": "fn-1"}}
    turns = [[HumanMessage("Hi.")], *(long_turn(r) for r in range(3))]
    rounds = [list(agent.stream(t, config, stream_mode=["messages", "custom"])) for t in turns]
    check_functional(rounds)


async def test_async_entrypoint_streams_the_progress() -> None:
    _, aagent = functional_agent()
    config = {"configurable": {"thread_id": "fn-1"}}
    rounds = []
    for turn in [[HumanMessage("Hi.")], *(long_turn(r) for r in range(3))]:
        rounds.append(
            [i async for i in aagent.astream(turn, config, stream_mode=["messages", "custom"])]
        )
    check_functional(rounds)


# --- outside a graph run ----------------------------------------------------------------
def test_outside_a_graph_compression_runs_without_a_stream() -> None:
    ac = AutoContext(AutoContextConfig(max_tokens=3_000))
    messages = [SystemMessage("You code."), *long_turn(0), *long_turn(1)]
    plain_result = ac.compress(messages, thread_id="plain", force=True)
    assert plain_result.events  # compressed, no run, no stream: nothing raised
    # inside a Runnable chain (a run without a graph, so without a stream writer)
    chain = RunnableLambda(lambda msgs: ac.compress(msgs, thread_id="chain", force=True))
    assert chain.invoke(messages).events


# --- a compaction that raises -----------------------------------------------------------
class BrokenSummarizer(Summarizer):
    """A summarizer of the user's own that raises (the package's fall back instead)."""

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        raise RuntimeError("the summarizer's backend is down")


def chat(rounds: int) -> list[BaseMessage]:
    """Rounds of plain talk: nothing to offload, only to summarize."""
    out: list[BaseMessage] = [SystemMessage("You code.")]
    for r in range(rounds):
        out += [HumanMessage(f"Question {r}: " + "why? " * 60), AIMessage("Because. " * 60)]
    return [*out, HumanMessage("Next.")]


def node_graph() -> Any:
    """A StateGraph whose own node calls ``compress`` / ``acompress``."""
    ac = AutoContext(AutoContextConfig(max_tokens=3_000), summarizer=BrokenSummarizer())

    def squeeze(state: MessagesState) -> dict[str, Any]:
        ac.compress(state["messages"], thread_id="t-broken", force=True)
        return {}

    async def asqueeze(state: MessagesState) -> dict[str, Any]:
        await ac.acompress(state["messages"], thread_id="t-broken", force=True)
        return {}

    graph = StateGraph(MessagesState)
    graph.add_node("squeeze", RunnableLambda(squeeze, afunc=asqueeze))
    graph.add_edge(START, "squeeze")
    return graph.compile()


def check_failed(chunks: list[dict[str, Any]]) -> None:
    events = [c["autocontext"] for c in chunks]
    assert events[0]["event"] == "compression_started"
    # a UI showing "Compacting…" is told it ended, and how
    assert events[-1]["event"] == "compression_finished"
    assert events[-1]["error"] == "RuntimeError"
    assert events[-1]["tokens_before"] == events[0]["tokens"]


def test_a_compaction_that_raises_streams_its_end() -> None:
    chunks: list[dict[str, Any]] = []
    messages = chat(12)
    with pytest.raises(RuntimeError, match="backend is down"):
        for chunk in node_graph().stream({"messages": messages}, stream_mode="custom"):
            chunks.append(chunk)
    check_failed(chunks)


async def test_a_compaction_that_raises_streams_its_end_async() -> None:
    chunks: list[dict[str, Any]] = []
    messages = chat(12)
    with pytest.raises(RuntimeError, match="backend is down"):
        async for chunk in node_graph().astream({"messages": messages}, stream_mode="custom"):
            chunks.append(chunk)
    check_failed(chunks)


class StuckSummarizer(Summarizer):
    """A summarizer whose backend never answers (a hung connection)."""

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        raise AssertionError("the async path is under test")

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        await asyncio.sleep(3_600)
        raise AssertionError("cancelled before")


async def test_a_cancelled_compaction_streams_its_end() -> None:
    """A node that bounds its compaction's time (``asyncio.wait_for``) cancels it while
    the summarizer hangs: the stream still says it ended, with the cancellation."""
    ac = AutoContext(AutoContextConfig(max_tokens=3_000), summarizer=StuckSummarizer())

    async def squeeze(state: MessagesState) -> dict[str, Any]:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                ac.acompress(state["messages"], thread_id="t-stuck", force=True), 0.2
            )
        return {}

    graph = StateGraph(MessagesState)
    graph.add_node("squeeze", squeeze)
    graph.add_edge(START, "squeeze")
    chunks = [
        c async for c in graph.compile().astream({"messages": chat(12)}, stream_mode="custom")
    ]
    events = [c["autocontext"] for c in chunks]
    assert [e["event"] for e in events[:1]] == ["compression_started"]
    assert events[-1]["event"] == "compression_finished"
    assert events[-1]["error"] == "CancelledError"
