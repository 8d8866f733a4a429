"""Stop a run, drop the process state, resume the thread: nothing differs.

For each checkpointer (``InMemorySaver``, ``SqliteSaver``) and store
(``InMemoryStore``, ``SqliteStore``) a run dies in the middle of a round (the model
raises). Then everything of the process is dropped — the AutoContext, the graph, the
model; SQLite files are closed and reopened — and new objects resume the same
thread. The resumed thread has the same working messages (the recursive summary
among them), the same ``autocontext`` state (working context), the same offloads and
the same history; the run finishes with the outcome of an uninterrupted run, and
the model is sent the same inputs it would have been sent without the crash.

Checkpoints are read with LangGraph's *strict* serializer (only its allow-listed
types): nothing in them is a custom class, no deserialization warning or serde event.
"""

from __future__ import annotations

import json
import re
import sqlite3
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _builders import (
    build_surface,
    check_model_inputs,
    expected_originals,
    history_originals,
    loop_graph,
    script_model,
)
from conftest import open_sqlite
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContextChatMessageHistory
from langchain_autocontext.history import surface_namespace
from langchain_autocontext.messages import PIN_KEY, dump_messages, text_of
from langchain_autocontext.store import OffloadStore

ROUNDS, STEPS = 6, 10
CRASH_AT = 3 * (STEPS + 1) + 7  # round 3, step 7


def strict_serde() -> JsonPlusSerializer:
    """LangGraph's serializer allowing only its own safe types (LANGGRAPH_STRICT_MSGPACK)."""
    return JsonPlusSerializer(allowed_msgpack_modules=None)


@pytest.fixture
def serde_events() -> Iterator[list[dict[str, Any]]]:
    """Every serde allow-list event (an unregistered or blocked type) during the test."""
    seen: list[dict[str, Any]] = []
    unregister = register_serde_event_listener(lambda e: seen.append(dict(e)))
    yield seen
    unregister()


class Backends:
    """A checkpointer and a store of the given kinds that can be "restarted"."""

    def __init__(self, saver: str, store: str, tmp: Path) -> None:
        self.saver_kind, self.store_kind, self.tmp = saver, store, tmp
        self.saver: Any = None
        self.store: Any = None
        self.open()

    def open(self) -> None:
        if self.saver_kind == "memory":
            self.saver = self.saver or InMemorySaver(serde=strict_serde())
        else:
            conn = sqlite3.connect(self.tmp / "checkpoints.db", check_same_thread=False)
            self.saver = SqliteSaver(conn, serde=strict_serde())
        if self.store_kind == "memory":
            self.store = self.store or InMemoryStore()
        else:
            self.store = open_sqlite(self.tmp / "store.db")

    def restart(self) -> None:
        """Drop the process: close the files and reopen them (memory backends survive as
        the "database" they stand for; everything else is rebuilt by the caller)."""
        self.close()
        if self.saver_kind == "sqlite":
            self.saver = None
        if self.store_kind == "sqlite":
            self.store = None
        self.open()

    def close(self) -> None:
        if self.saver_kind == "sqlite" and self.saver is not None:
            self.saver.conn.close()
        if self.store_kind == "sqlite" and self.store is not None:
            self.store.conn.close()


@contextmanager
def backends(saver: str, store: str, tmp: Path) -> Iterator[Backends]:
    b = Backends(saver, store, tmp)
    try:
        yield b
    finally:
        b.close()


def texts(sent) -> list[tuple[str, str]]:
    return [(m.type, text_of(m)) for m in sent]


def snapshot(surface) -> dict[str, Any]:
    """What the thread is made of: checkpointed state, offloads, history, events."""
    values = surface.runner.get_state(surface.config).values
    store = OffloadStore.wrap(surface.store)
    return {
        "messages": json.dumps(dump_messages(values["messages"]), sort_keys=True),
        "autocontext": values.get("autocontext"),
        "offloads": sorted(
            (r.offload_id, json.dumps(dump_messages(r.messages), sort_keys=True))
            for r in store.list_offloads(surface.thread)
        ),
        "history": [
            (e.seq, e.id, json.dumps(dump_messages([e.message]), sort_keys=True))
            for e in store.iter_history(surface.thread)
        ],
        "events": len(store.list_events(surface.thread)),
    }


def crash_and_resume(kind: str, b: Backends, *, mode: str = "invoke") -> tuple[Any, dict, dict]:
    dying = script_model(STEPS).model_copy(update={"fail_at": CRASH_AT})
    first = build_surface(kind, dying, store=b.store, checkpointer=b.saver)
    crash_round = CRASH_AT // (STEPS + 1)
    for r in range(crash_round):
        first.round(r, mode)
    with pytest.raises(RuntimeError, match="process died"):
        first.round(crash_round, mode)
    before = snapshot(first)
    before["crashed_on"] = texts(dying.crashed_on[0])
    assert before["offloads"] and before["events"], "nothing was compressed before the crash"
    del first, dying

    b.restart()
    model = script_model(STEPS).model_copy(update={"calls": {"t-1": CRASH_AT}})
    second = build_surface(kind, model, store=b.store, checkpointer=b.saver)
    after = snapshot(second)
    after["crashed_on"] = before["crashed_on"]
    # resume the interrupted round from its checkpoint, then the rest of the script
    if mode == "invoke":
        state = second.runner.invoke(None, second.config)
    else:
        for chunk in second.runner.stream(None, second.config, stream_mode="values"):
            state = chunk
    answer = state["messages"][-1].content
    for r in range(crash_round + 1, ROUNDS):
        answer = second.round(r, mode)
    # the call that died is sent again, exactly as the old process built it
    assert texts(second.model.seen[0]) == before["crashed_on"]
    return (second, answer), before, after


PAIRS = [(s, t) for s in ("memory", "sqlite") for t in ("memory", "sqlite")]


@pytest.mark.parametrize(("saver", "store"), PAIRS, ids=[f"{s}-saver-{t}-store" for s, t in PAIRS])
def test_resume_after_restart(saver: str, store: str, tmp_path: Path, serde_events) -> None:
    with backends(saver, store, tmp_path) as b:
        (resumed, answer), before, after = crash_and_resume("middleware", b)
        # the new process sees exactly what the old one left
        assert after == before
        assert isinstance(after["autocontext"], dict) and "working_context" in after["autocontext"]
        # ... and finishes as if nothing had happened
        assert answer == f"round {ROUNDS - 1} finished after {STEPS} steps"
        assert history_originals(b.store, "t-1", answer) == expected_originals(ROUNDS, STEPS)
        check_model_inputs(resumed.model, resumed.ac)
        assert resumed.model.total_calls == ROUNDS * (STEPS + 1)
    assert serde_events == []  # no unregistered type was ever read from a checkpoint


@pytest.mark.parametrize("kind", ["react", "node"])
def test_resume_after_restart_other_graph_surfaces(kind: str, tmp_path: Path, serde_events) -> None:
    with backends("sqlite", "sqlite", tmp_path) as b:
        (resumed, answer), before, after = crash_and_resume(kind, b, mode="stream")
        assert after == before
        assert answer == f"round {ROUNDS - 1} finished after {STEPS} steps"
        assert history_originals(b.store, "t-1", answer) == expected_originals(ROUNDS, STEPS)
        check_model_inputs(resumed.model, resumed.ac)
    assert serde_events == []


async def test_async_resume_after_restart(tmp_path: Path, serde_events) -> None:
    """AsyncSqliteSaver + AsyncSqliteStore, driven with astream, restarted in between."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.store.sqlite import AsyncSqliteStore

    crash_round = CRASH_AT // (STEPS + 1)
    saver_path, store_path = str(tmp_path / "c.db"), str(tmp_path / "s.db")

    async def open_both():
        saver_cm = AsyncSqliteSaver.from_conn_string(saver_path)
        store_cm = AsyncSqliteStore.from_conn_string(store_path)
        saver, store = await saver_cm.__aenter__(), await store_cm.__aenter__()
        saver.serde = strict_serde()
        await store.setup()
        return (saver_cm, store_cm), saver, store

    cms, saver, store = await open_both()
    dying = script_model(STEPS).model_copy(update={"fail_at": CRASH_AT})
    first = build_surface("middleware", dying, store=store, checkpointer=saver)
    for r in range(crash_round):
        await first.around(r, "astream")
    with pytest.raises(RuntimeError, match="process died"):
        await first.around(crash_round, "astream")
    before = (await first.runner.aget_state(first.config)).values
    before_history = await OffloadStore.wrap(store).ahistory_count("t-1")
    del first
    for cm in cms:
        await cm.__aexit__(None, None, None)

    cms, saver, store = await open_both()
    try:
        model = script_model(STEPS).model_copy(update={"calls": {"t-1": CRASH_AT}})
        second = build_surface("middleware", model, store=store, checkpointer=saver)
        after = (await second.runner.aget_state(second.config)).values
        assert dump_messages(after["messages"]) == dump_messages(before["messages"])
        assert after.get("autocontext") == before.get("autocontext")
        assert await OffloadStore.wrap(store).ahistory_count("t-1") == before_history
        async for chunk in second.runner.astream(None, second.config, stream_mode="values"):
            state = chunk
        answer = state["messages"][-1].content
        for r in range(crash_round + 1, ROUNDS):
            answer = await second.around(r, "astream")
        assert answer == f"round {ROUNDS - 1} finished after {STEPS} steps"
        assert texts(second.model.seen[0]) == texts(dying.crashed_on[0])
        history = [e.message async for e in OffloadStore.wrap(store).aiter_history("t-1")]
        got = [(m.type, text_of(m)) for m in history if m.type != "system"]
        assert got[: len(expected_originals(ROUNDS, STEPS))] == expected_originals(ROUNDS, STEPS)
    finally:
        for cm in cms:
            await cm.__aexit__(None, None, None)
    assert serde_events == []


def session_record(kind: str, surface) -> Any:
    """What a chain keeps in the store between calls: its working messages."""
    if kind == "history":
        hist = AutoContextChatMessageHistory("t-1", surface.ac, store=surface.store)
        return json.dumps(dump_messages(hist.messages), sort_keys=True)
    store = OffloadStore.wrap(surface.store)
    return store.get(surface_namespace(store, "t-1"), "runnable").value


@pytest.mark.parametrize("kind", ["history", "lcel"])
def test_chain_sessions_survive_a_restart(kind: str, tmp_path: Path) -> None:
    """Chains keep their session in the store: reopen the SQLite file, rebuild, go on."""
    half = ROUNDS // 2
    store = open_sqlite(tmp_path / "store.db")
    first = build_surface(kind, script_model(STEPS), store=store)
    for r in range(half):
        first.round(r)
    convo = list(first.convo)  # the lcel caller keeps its own conversation
    before = session_record(kind, first)
    events = len(OffloadStore.wrap(store).list_events("t-1"))
    assert events, "nothing was compressed before the restart"
    store.conn.close()
    del first

    store = open_sqlite(tmp_path / "store.db")
    try:
        model = script_model(STEPS).model_copy(update={"calls": {"t-1": half * (STEPS + 1)}})
        second = build_surface(kind, model, store=store)
        second.convo = convo
        assert session_record(kind, second) == before
        answer = ""
        for r in range(half, ROUNDS):
            answer = second.round(r)
        assert answer == f"round {ROUNDS - 1} finished after {STEPS} steps"
        # nothing archived twice, nothing lost
        assert history_originals(store, "t-1", answer) == expected_originals(ROUNDS, STEPS)
        check_model_inputs(second.model, second.ac)
    finally:
        store.conn.close()


def test_strict_serde_would_notice_a_custom_class(tmp_path: Path, serde_events) -> None:
    """Control: a custom class in a checkpoint is reported by the listener used above."""
    from dataclasses import dataclass

    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    @dataclass
    class Custom:
        x: int

    class S(TypedDict):
        value: Any

    g = StateGraph(S)
    g.add_node("n", lambda s: {"value": Custom(1)})
    g.add_edge(START, "n")
    saver = SqliteSaver(sqlite3.connect(tmp_path / "c.db", check_same_thread=False))
    saver.serde = strict_serde()
    graph = g.compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "x"}}
    graph.invoke({"value": 0}, cfg)
    graph.get_state(cfg)
    saver.conn.close()
    assert serde_events, "the serde listener saw nothing: the checks above would prove nothing"


def test_a_new_store_is_never_taken_for_a_freed_one_at_its_address() -> None:
    """One AutoContext and a store per job: the engine's memo of archived ids was keyed
    by the store's address, so a new store that got a freed one's address was taken for
    it and the job's history was never written (22 of 150 jobs lost theirs)."""
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_autocontext import AutoContext, OffloadStore

    ac = AutoContext(max_tokens=8_000)
    msgs = [HumanMessage("hello", id="h1"), AIMessage("hi", id="a1")]
    addresses: set[int] = set()
    reused = 0
    for _ in range(400):  # the engine keeps the last 64 stores: later ones are freed
        backend = InMemoryStore()
        reused += id(backend) in addresses
        addresses.add(id(backend))
        ac.compress(msgs, thread_id="t", store=backend)
        assert OffloadStore(backend).history_count("t") == 2
        del backend
    if not reused:
        pytest.skip("no store got a freed one's address on this interpreter")


def test_plain_compress_on_a_kept_id_less_list_archives_each_message_once() -> None:
    """A caller keeping its own list of id-less messages and passing it to ``compress``
    each turn: a fresh uuid4 per call archived every message again on every call (30
    history items for 10 messages); derived ids make the same list the same messages."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    from langchain_autocontext import AutoContext, OffloadStore

    store = OffloadStore(InMemoryStore())
    ac = AutoContext(max_tokens=8_000, store=store)
    msgs: list[Any] = [SystemMessage("You are helpful."), HumanMessage("hello")]
    for _ in range(5):
        ac.compress(msgs, thread_id="kept")
        msgs += [AIMessage("ok"), HumanMessage("ok")]  # repeated texts stay distinct
    ac.compress(msgs, thread_id="kept")
    history = store.get_history("kept")
    assert len(history) == len(msgs)
    assert len({h.id for h in history}) == len(msgs)
    again = ac.compress(msgs, thread_id="kept").messages
    assert [m.id for m in again] == [h.id for h in history]


# --- a graph deployed on LangGraph's server (langgraph dev, LangGraph Platform) -----------
def _deployable(surface: str, ac: Any, model: Any) -> Any:
    """The graph as a module for ``langgraph.json`` defines it: no store, no checkpointer."""
    from _builders import fetch
    from langchain.agents import create_agent

    if surface == "create_agent":
        return create_agent(model, [fetch], middleware=[ac.middleware()])
    tools = [fetch, *ac.tools]
    return loop_graph(ac, model.bind_tools(tools), tools).compile()


def _on_the_wire(values: dict[str, Any]) -> dict[str, Any]:
    """What the package put in the state, as a client of the server gets it: the server
    writes the state with orjson, whose fallback dumps a pydantic object (a message) and
    writes ``null`` for any other object it does not know (``langgraph_api.serde``)."""
    return {
        "autocontext": values.get("autocontext"),
        "messages": [
            {k: m.model_dump()[k] for k in ("id", "additional_kwargs", "response_metadata")}
            for m in values["messages"]
        ],
    }


@pytest.mark.parametrize("surface", ["create_agent", "graph"])
async def test_a_graph_deployed_on_a_langgraph_server(surface: str, serde_events) -> None:
    """LangGraph's server imports the graph compiled without store or checkpointer and
    runs, for each run, a copy given its own (``langgraph_api.graph.get_graph``:
    ``graph.copy(update={"checkpointer": …, "store": …})``), asynchronously, streaming
    ``["values", "custom", "updates"]`` (subgraphs too when asked); the client reads the
    state as JSON. The package files offloads and history in the server's store (found
    through the run, with no warning), so a later run, here after a restart of the
    server process, reloads and searches them; what it keeps in state (the
    ``autocontext`` key, the markers and pins of messages) is plain JSON, the same on the
    wire as in the checkpoint; its progress events reach the custom stream as JSON."""
    from _builders import FunctionModel, call, view_ids
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    from langchain_autocontext import AutoContext

    saver, store = InMemorySaver(serde=strict_serde()), InMemoryStore()  # the server's
    thread: Any = {"configurable": {"thread_id": "platform-1"}, "recursion_limit": 40}
    seen: dict[str, str] = {}
    first_run: list[str] = []  # the offloads of the first run

    def respond(view: list[Any], n: int) -> Any:
        if n < 5:  # long results: the run compacts
            return AIMessage("", tool_calls=[call("fetch", {"name": f"d{n}"})])
        if n == 5:  # the model pins its task (the tags show ids once the run compacted)
            task = next(i for i, m in view_ids(view) if "Fetch" in str(m.content))
            return AIMessage("", tool_calls=[call("pin_message", {"message_id": task})])
        if n == 7:  # the next run: an offload and the history of the first
            ids = re.findall(r'offload_id="([0-9a-f-]{8,36})"', " ".join(map(str, view)))
            seen["reloaded"] = ids[-1]
            return AIMessage(
                "",
                tool_calls=[
                    call("reload_offloaded", {"offload_id": ids[-1]}, "r1"),
                    call("search_history", {"query": "value-d1-919"}, "s1"),
                ],
            )
        seen.update({m.tool_call_id: str(m.content) for m in view if m.type == "tool"})
        return AIMessage("Done.")

    model = FunctionModel(respond=respond)  # the provider: it outlives the server

    def deploy() -> Any:  # the module imported by the server (again after a restart)
        ac = AutoContext(max_tokens=3_000, metadata_tags=True)
        graph = _deployable(surface, ac, model)
        return graph.copy(update={"checkpointer": saver, "store": store})

    custom: list[dict[str, Any]] = []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for question in ("Fetch the documents.", "Read one again."):
            server = deploy()
            async for _, mode, chunk in server.astream(
                {"messages": [{"role": "user", "content": question}]},
                thread,
                stream_mode=["values", "custom", "updates"],
                subgraphs=True,  # the SDK's stream_subgraphs, for ac.node()'s events
            ):
                if mode == "custom" and "autocontext" in chunk:
                    custom.append(chunk)
            values = (await server.aget_state(thread)).values
            first_run = first_run or [
                r.offload_id for r in OffloadStore.wrap(store).list_offloads("platform-1")
            ]
            wire = _on_the_wire(values)
            assert json.loads(json.dumps(wire)) == wire
    assert not [w for w in said if "store" in str(w.message)], [str(w.message) for w in said]
    # the offloads and the history are in the server's store, not in the process
    offloads = OffloadStore.wrap(store).list_offloads("platform-1")
    assert offloads and OffloadStore.wrap(store).get_history("platform-1")
    assert any(o.startswith(seen["reloaded"]) for o in first_run), (seen, first_run)
    assert "[offload " in seen["r1"] and "value-d" in seen["r1"], seen["r1"]
    assert "value-d1-919" in seen["s1"], seen["s1"]
    # the pin made in the first run holds in the second
    pinned = [m for m in values["messages"] if "Fetch" in str(m.content)]
    assert pinned and pinned[0].additional_kwargs.get(PIN_KEY) is True
    events = [c["autocontext"]["event"] for c in custom]
    assert "compression_started" in events and "compression_finished" in events
    assert json.loads(json.dumps(custom)) == custom
    assert serde_events == []
