"""End to end on a real PostgreSQL: ``PostgresStore`` + ``PostgresSaver``.

Every surface runs its tool-calling script with both from ``langgraph-checkpoint-postgres``;
a thread is restarted over new connections and continued; the self-management tools
reload and search through the server; many threads run at once; and the store's
``seq_key`` range filters are checked against the server's own text comparison.

Skipped (with the reason) unless ``AUTOCONTEXT_TEST_POSTGRES_URI`` names a server
and ``langgraph-checkpoint-postgres`` is installed; ``.ci/run`` starts one.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from _builders import (
    FunctionModel,
    ScriptedModel,
    build_surface,
    call,
    check_model_inputs,
    expected_originals,
    history_originals,
    log_text,
    node_agent,
    script_model,
    self_managed_graph,
)
from conftest import POSTGRES_ENV, TextCompareStore, _postgres_uri, unique_prefix
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.base import SearchOp

from langchain_autocontext import AutoContext, AutoContextConfig, OffloadStore
from langchain_autocontext.messages import find_violations, marker, text_of
from langchain_autocontext.store import offload_ref

pytestmark = pytest.mark.postgres

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import load_test  # noqa: E402

ROUNDS, STEPS = 3, 8


@pytest.fixture
def uri() -> str:
    return _postgres_uri()  # skips with the reason when no server is configured


@contextmanager
def pg(uri: str) -> Iterator[tuple[Any, Any]]:
    """A fresh ``(PostgresStore, PostgresSaver)`` pair on their own connections."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(uri) as store, PostgresSaver.from_conn_string(uri) as saver:
        store.setup()
        saver.setup()
        yield store, saver


@asynccontextmanager
async def apg(uri: str) -> AsyncIterator[tuple[Any, Any]]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.store.postgres import AsyncPostgresStore

    async with (
        AsyncPostgresStore.from_conn_string(uri) as store,
        AsyncPostgresSaver.from_conn_string(uri) as saver,
    ):
        await store.setup()
        await saver.setup()
        yield store, saver


def test_skip_reason_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POSTGRES_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=POSTGRES_ENV):
        _postgres_uri()


# --- every surface, sync and async, on PostgresStore + PostgresSaver ---------------------
GRAPH_SURFACES = ["middleware", "react", "node"]


@pytest.mark.parametrize("kind", [*GRAPH_SURFACES, "history", "lcel"])
def test_surface_runs_on_postgres(uri: str, kind: str) -> None:
    thread = f"pg-{kind}-{uuid.uuid4().hex[:8]}"
    with pg(uri) as (store, saver):
        surface = build_surface(
            kind, script_model(STEPS), store=store, checkpointer=saver, thread=thread
        )
        answer = ""
        for r in range(ROUNDS):
            answer = surface.round(r)
        assert answer == f"round {ROUNDS - 1} finished after {STEPS} steps"
        check_model_inputs(surface.model, surface.ac)
        assert history_originals(store, thread, answer) == expected_originals(ROUNDS, STEPS)
        assert OffloadStore.wrap(store).list_events(thread), "compression never fired"
        if kind in GRAPH_SURFACES:  # the checkpoint holds the compressed, valid state
            state = surface.runner.get_state(surface.config).values["messages"]
            assert not find_violations(state)


@pytest.mark.parametrize("kind", GRAPH_SURFACES)
async def test_surface_runs_on_async_postgres(uri: str, kind: str) -> None:
    thread = f"apg-{kind}-{uuid.uuid4().hex[:8]}"
    async with apg(uri) as (store, saver):
        surface = build_surface(
            kind, script_model(STEPS), store=store, checkpointer=saver, thread=thread
        )
        answer = ""
        for r in range(ROUNDS):
            answer = await surface.around(r, "astream")
        assert answer == f"round {ROUNDS - 1} finished after {STEPS} steps"
        check_model_inputs(surface.model, surface.ac)
        ost = OffloadStore.wrap(store)
        got = []
        async for e in ost.aiter_history(thread):
            if not isinstance(e.message, SystemMessage):
                got.append((e.message.type, text_of(e.message)))
        if got and got[-1] == ("ai", answer):
            got.pop()
        assert got == expected_originals(ROUNDS, STEPS)


# --- restart: new connections, new objects, same thread ----------------------------------


def test_thread_resumes_after_restart_with_everything_recoverable(uri: str) -> None:
    cfg = AutoContextConfig(
        max_tokens=6_000, last_keep=6, msg_threshold=40, store_prefix=unique_prefix()
    )
    thread = f"restart-{uuid.uuid4().hex[:8]}"  # checkpoints outlive a test run locally
    config = {"configurable": {"thread_id": thread}, "recursion_limit": 500}
    with pg(uri) as (store, saver):
        first = ScriptedModel(steps=20)
        graph = node_agent(AutoContext(cfg), first, store, saver)
        graph.invoke({"messages": [SystemMessage("You code."), HumanMessage("fix it")]}, config)
        before = graph.get_state(config).values["messages"]
    # a new process: new connections, engine, graph
    with pg(uri) as (store, saver):
        model = ScriptedModel(steps=30, calls=first.calls)
        graph = node_agent(AutoContext(cfg), model, store, saver)
        assert [m.id for m in graph.get_state(config).values["messages"]] == [m.id for m in before]
        graph.invoke({"messages": [HumanMessage("now the docs")]}, config)
        final = graph.get_state(config).values["messages"]
        assert final[-1].content == "finished after 30 steps"
        assert not find_violations(final)
        ost = OffloadStore(store, prefix=cfg.store_prefix)
        assert ost.list_events(thread), "compression never fired"
        history = {e.id: e.message for e in ost.iter_history(thread)}
        # every original ever checkpointed is in the history (or is the final answer)
        for snap in graph.get_state_history(config):
            for m in snap.values.get("messages", []):
                if marker(m) is None:
                    assert m.id in history or m.id == final[-1].id
                elif (marker(m) or {}).get("offload_id"):
                    assert ost.reload(thread, marker(m)["offload_id"]).messages
        steps = [t for m in history.values() if (t := text_of(m)).startswith("step ")]
        assert steps == [f"step {n}" for n in range(30) if n != 20]  # call 20 answered


# --- the model's tools through the server --------------------------------------------------
def test_reload_and_search_tools_on_postgres(uri: str) -> None:
    with pg(uri) as (store, _saver):
        cfg = AutoContextConfig(
            max_tokens=4_000, large_payload_threshold=2_000, store_prefix=unique_prefix()
        )
        thread = f"tools-{uuid.uuid4().hex[:8]}"
        ac = AutoContext(cfg)
        secret = f"needle-{uuid.uuid4().hex[:6]}"
        msgs = [SystemMessage("sys", id="s"), HumanMessage(f"remember {secret}", id="u0")]
        msgs += [
            AIMessage("", tool_calls=[call("bash", {"command": "cat log"}, "c1")], id="a1"),
            ToolMessage(log_text(150), tool_call_id="c1", id="big"),
            AIMessage("The log is long.", id="a2"),
        ]
        res = ac.compress(msgs, thread_id=thread, store=store)
        ost = OffloadStore(store, prefix=cfg.store_prefix)
        oid = next(r.offload_id for r in ost.list_offloads(thread) if "big" in r.message_ids)
        ref = offload_ref(oid)  # as the context shows it, resolved by a filtered search
        assert any(f'offload_id="{ref}"' in text_of(m) for m in res.messages)
        assert ost.reload(thread, ref).offload_id == oid
        steps = [
            call("reload_offloaded", {"offload_id": ref}),
            call("search_history", {"query": secret}),
        ]

        answers: list[ToolMessage] = []

        def respond(view: list, n: int) -> AIMessage:
            if n:  # what the previous call returned, as the model sees it
                answers.append(next(m for m in reversed(view) if isinstance(m, ToolMessage)))
            return AIMessage("", tool_calls=[steps[n]]) if n < len(steps) else AIMessage("ok")

        graph = self_managed_graph(ac, FunctionModel(respond=respond), store)
        graph.invoke({"messages": res.messages}, {"configurable": {"thread_id": thread}})
        reload_result, search_result = answers
        assert reload_result.status != "error" and "/src/pkg/module_" in text_of(reload_result)
        assert secret in text_of(search_result)


# --- the zero-padded seq_key against the server's text comparison --------------------------
def test_seq_key_ranges_on_the_server_and_the_text_emulation_matches(uri: str) -> None:
    with pg(uri) as (store, _saver):
        ost = OffloadStore(store, prefix=unique_prefix())
        for n in range(120):  # one append per message: 1-, 2- and 3-digit seqs
            ost.append_history("seq", [HumanMessage(f"m{n}", id=f"id{n}")])
        assert [e.seq for e in ost.get_history("seq", start=9, end=101)] == list(range(9, 101))
        assert [text_of(e.message) for e in ost.get_history("seq", start=99)] == [
            f"m{n}" for n in range(99, 120)
        ]
        # The raw numeric "seq" compared by the server: the conftest emulation (used to
        # run the suite without a server) must give the same answer as the real thing.
        emulated = TextCompareStore()
        for item in store.search(ost.namespace("seq", "history"), limit=500):
            emulated.put(item.namespace, item.key, item.value)
        for cond in ({"$gte": 9}, {"$lt": 100, "$gte": 10}, {"$gt": 2}):
            op = SearchOp(ost.namespace("seq", "history"), {"seq": cond}, 500, 0, None, False)
            real = sorted(i.key for i in store.batch([op])[0])
            assert real == sorted(i.key for i in emulated.batch([op])[0]), cond


# --- many threads at once ---------------------------------------------------------------------
async def test_concurrent_threads_on_postgres(uri: str) -> None:
    async with load_test.open_backend("postgres", uri=uri, pool_size=10) as (store, saver):
        report = await load_test.run_load(store, saver, backend="postgres", threads=8, turns=10)
    assert report.calls == 8 * 10 * 2
    assert report.compressions > 0 and report.offloads > 0
    assert report.lost == 0 and report.foreign == 0 and report.invalid_states == 0
    assert report.ok, report.problems
