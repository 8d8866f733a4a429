"""Isolation: threads and apps sharing one store never see each other's data.

* offload ids are uuid4 (unguessable), never sequential;
* ``reload_offloaded`` and ``search_history`` only ever read the calling thread's
  namespace, even when handed another thread's valid ids or its exact words;
* the store prefix separates apps sharing one database;
* thread ids that look alike (``t1``/``t10``, LIKE wildcards ``_``/``%``, ``.``
  and its escape) stay apart on every backend;
* many threads running concurrently keep exactly their own history
  (``benchmarks/load_test.py`` at a small scale).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _builders import FunctionModel, call, log_text, self_managed_graph, shown_offload_ids
from conftest import _param, sync_backend, unique_prefix
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import (
    AutoContext,
    AutoContextConfig,
    OffloadNotFoundError,
    OffloadStore,
)
from langchain_autocontext.messages import text_of
from langchain_autocontext.store import offload_ref

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import load_test

CFG = AutoContextConfig(
    max_tokens=3_000, last_keep=4, msg_threshold=40, large_payload_threshold=1_500
)
SECRET = "zebra-quartz-4417"


@pytest.fixture(params=[_param(k) for k in ("memory", "sqlite", "postgres")])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    with sync_backend(request.param, tmp_path / "store.db") as store:
        yield store


def secret_run(thread: str, n: int = 6) -> list[BaseMessage]:
    """A conversation whose every message carries ``SECRET`` and ``thread``."""
    msgs: list[BaseMessage] = [SystemMessage("You are a records clerk.", id=f"{thread}-sys")]
    for r in range(n):
        msgs += [
            HumanMessage(f"{thread} {SECRET} request {r}", id=f"{thread}-u{r}"),
            AIMessage(f"{thread} {SECRET} answer {r}\n" + log_text(60, r), id=f"{thread}-a{r}"),
        ]
    msgs.append(HumanMessage(f"{thread} {SECRET} last request", id=f"{thread}-last"))
    return msgs


# --- offload ids ------------------------------------------------------------------------------
def test_offload_ids_are_uuid4_and_unpredictable() -> None:
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(CFG, store=store)
    for t in range(4):
        ac.compress(secret_run(f"T{t}"), thread_id=f"T{t}", force=True)
    ids = [rec.offload_id for t in range(4) for rec in store.list_offloads(f"T{t}")]
    assert len(ids) >= 8 and len(set(ids)) == len(ids)
    for oid in ids:
        parsed = uuid.UUID(oid)
        assert parsed.version == 4 and str(parsed) == oid
    # consecutive ids share no structure a caller could walk (not time- or counter-based)
    ints = [uuid.UUID(i).int for i in ids]
    assert len({b >> 96 for b in ints}) == len(ints)


# --- the store API -------------------------------------------------------------------------
def test_another_threads_valid_ids_are_not_found(backend: BaseStore) -> None:
    cfg = CFG.model_copy(update={"store_prefix": unique_prefix()})
    ac = AutoContext(cfg, store=backend)
    store = ac.store
    assert store is not None
    res_a = ac.compress(secret_run("A"), thread_id="A", force=True)
    ac.compress([SystemMessage("sys", id="b-sys"), HumanMessage("hi", id="b-u")], thread_id="B")
    a_offloads = shown_offload_ids(res_a.messages)
    assert a_offloads
    for ref in [*a_offloads, *map(offload_ref, a_offloads)]:  # whole, and as notes show them
        assert store.reload("A", ref).messages
        with pytest.raises(OffloadNotFoundError) as info:
            store.reload("B", ref)
        assert SECRET not in str(info.value)
    assert store.get_history_message("A", "A-u0") is not None
    assert store.get_history_message("B", "A-u0") is None
    assert [e.id for e in store.iter_history("B")] == ["b-sys", "b-u"]
    assert store.list_offloads("B") == []


LOOKALIKES = ["t1", "t10", "t_", "tX", "t%", "t%25", "a.b", "a%2Eb", "a/b", "a", "A"]


def test_lookalike_thread_ids_stay_apart(backend: BaseStore) -> None:
    """Namespace prefix search must not treat ``_``/``%`` as wildcards or mix ``t1``/``t10``."""
    store = OffloadStore(backend, prefix=unique_prefix())
    for tid in LOOKALIKES:
        store.append_history(tid, [HumanMessage(f"owner={tid}", id=f"{tid}#1")])
        store.offload(
            tid, [AIMessage(f"owner={tid}", id=f"{tid}#2")], strategy="s", preview="p", tokens=1
        )
        store.record_event(tid, {"owner": tid})
    for tid in LOOKALIKES:
        assert [text_of(e.message) for e in store.iter_history(tid)] == [f"owner={tid}"]
        assert [text_of(r.messages[0]) for r in store.list_offloads(tid)] == [f"owner={tid}"]
        assert [e.owner for e in store.list_events(tid)] == [tid]
        assert store.history_count(tid) == 1


# --- the model's tools ------------------------------------------------------------------------
def _probe(ac: AutoContext, backend: BaseStore, thread: str, refs: list[str]) -> list[ToolMessage]:
    """Run thread ``thread``'s agent; its model calls reload_offloaded on every ref and
    search_history for the other thread's secret, then stops. Returns the tool results."""
    steps = [call("reload_offloaded", {"offload_id": r}) for r in refs]
    steps.append(call("search_history", {"query": f"{SECRET} request"}))

    def respond(view: list[BaseMessage], n: int) -> AIMessage:
        if n < len(steps):
            return AIMessage("", tool_calls=[steps[n]])
        return AIMessage("done")

    graph = self_managed_graph(ac, FunctionModel(respond=respond), backend)
    out = graph.invoke(
        {"messages": [SystemMessage("You are a clerk."), HumanMessage("look around")]},
        {"configurable": {"thread_id": thread}, "recursion_limit": 100},
    )
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


def test_tools_never_read_another_threads_namespace(backend: BaseStore) -> None:
    cfg = CFG.model_copy(update={"store_prefix": unique_prefix()})
    ac = AutoContext(cfg)
    res_a = ac.compress(secret_run("A"), thread_id="A", force=True, store=backend)
    oids = shown_offload_ids(res_a.messages)[:2]
    refs = [
        *oids,
        offload_ref(oids[0]),
        "A-u0",
        "A-a1",
    ]  # offload ids, a shortened one, message ids
    results = _probe(ac, backend, "B", refs)
    assert len(results) == len(refs) + 1
    for tm in results[:-1]:
        assert tm.status == "error", tm.content
        assert f"A {SECRET}" not in text_of(tm)
    assert f"A {SECRET}" not in text_of(results[-1])  # the search found nothing of thread A
    # the same calls in thread A do see its own data (the probe is not vacuous)
    own = _probe(ac, backend, "A", refs)
    assert all(tm.status != "error" for tm in own[:-1])
    assert all(f"A {SECRET}" in text_of(tm) for tm in own)


def test_store_prefix_separates_apps_on_one_database(backend: BaseStore) -> None:
    base = unique_prefix()
    app1 = AutoContext(CFG.model_copy(update={"store_prefix": f"{base}-one"}), store=backend)
    app2 = AutoContext(CFG.model_copy(update={"store_prefix": f"{base}-two"}), store=backend)
    res1 = app1.compress(secret_run("shared"), thread_id="shared", force=True)
    app2.compress(
        [SystemMessage("other app", id="o-sys"), HumanMessage("hello", id="o-u")],
        thread_id="shared",
    )
    s1, s2 = app1.store, app2.store
    assert s1 is not None and s2 is not None
    assert s1.history_count("shared") == len(secret_run("shared"))
    assert [e.id for e in s2.iter_history("shared")] == ["o-sys", "o-u"]
    for oid in shown_offload_ids(res1.messages):
        s1.reload("shared", oid)
        with pytest.raises(OffloadNotFoundError):
            s2.reload("shared", oid)
    # app2's tools, same thread id, cannot reach app1's data either
    results = _probe(app2, backend, "shared", shown_offload_ids(res1.messages)[:1])
    assert results[0].status == "error"
    assert all(f"shared {SECRET}" not in text_of(tm) for tm in results)


def test_an_offload_store_names_the_engines_namespace() -> None:
    backend = InMemoryStore()
    ac = AutoContext(store=OffloadStore(backend, prefix="billing"))
    assert ac.config.store_prefix == "billing"
    ac.compress([SystemMessage("s", id="s"), HumanMessage("u", id="u")], thread_id="t")
    assert OffloadStore(backend, prefix="billing").history_count("t") == 2
    assert OffloadStore(backend).history_count("t") == 0
    with pytest.raises(ValueError, match="store_prefix"):
        AutoContext(
            AutoContextConfig(store_prefix="sales"), store=OffloadStore(backend, prefix="billing")
        )


def test_an_offload_store_given_per_call_or_by_the_graph_keeps_its_prefix() -> None:
    """Two apps on one database, each compiling its graph with (or passing) its own
    ``OffloadStore(backend, prefix=…)`` and a default config: each app's data stays
    under its prefix (it was re-filed under "autocontext", where the other app's
    search_history and reload found it under the same thread id)."""
    backend = InMemoryStore()
    billing, support = (
        OffloadStore(backend, prefix="billing"),
        OffloadStore(backend, prefix="support"),
    )
    app1, app2 = AutoContext(CFG), AutoContext(CFG)
    res = app1.compress(secret_run("user-7"), thread_id="user-7", store=billing, force=True)
    assert billing.history_count("user-7") == len(secret_run("user-7"))
    assert OffloadStore(backend).history_count("user-7") == 0
    assert app2.resolve_store(support).history_count("user-7") == 0
    # a graph compiled with the other app's store: its tools cannot reach app1's data
    results = _probe(app2, support, "user-7", shown_offload_ids(res.messages)[:1])
    assert results[0].status == "error"
    assert all(f"user-7 {SECRET}" not in text_of(tm) for tm in results)
    # one engine, one thread, two prefixes on one backend: each gets the whole history
    for store in (billing, support):
        app1.compress(secret_run("user-8"), thread_id="user-8", store=store)
        assert store.history_count("user-8") == len(secret_run("user-8"))
    # a store_prefix the config names explicitly contradicts it, as in the constructor
    sales = AutoContext(CFG.model_copy(update={"store_prefix": "sales"}))
    with pytest.raises(ValueError, match="store_prefix"):
        sales.compress(secret_run("t"), thread_id="t", store=billing)


# --- many threads at once -------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "threads", "turns"), [("memory", 6, 12), ("sqlite", 4, 10)])
async def test_concurrent_threads_keep_their_own_history(
    kind: str, threads: int, turns: int, tmp_path: Path
) -> None:
    async with load_test.open_backend(kind, path=str(tmp_path)) as (store, saver):
        report = await load_test.run_load(store, saver, backend=kind, threads=threads, turns=turns)
    assert report.calls == threads * turns * 2
    assert report.compressions > 0 and report.offloads > 0, "compression never fired"
    assert report.messages_checked >= threads * (turns * 4 - 1)
    assert report.lost == 0 and report.foreign == 0 and report.invalid_states == 0
    assert report.ok, report.problems


async def test_load_check_detects_a_crossed_thread() -> None:
    """The load test's checks are not vacuous: plant a foreign message and see it flagged."""
    store = InMemoryStore()
    from langgraph.checkpoint.memory import InMemorySaver

    report = await load_test.run_load(store, InMemorySaver(), backend="memory", threads=2, turns=3)
    assert report.ok
    ns = [n for n in store.list_namespaces() if n[-1] == "history"]
    prefix, thread, _ = ns[0]
    OffloadStore(store, prefix=prefix).append_history(
        thread, [HumanMessage("[t001:0] planted", id="planted")]
    )
    bad = load_test.LoadReport(backend="memory", threads=2, turns=3)
    ost = OffloadStore(store, prefix=prefix)
    name = thread.rsplit("-", 1)[1]
    graph: Any = load_test.build_agent(
        AutoContext(load_test.default_config(prefix)), store, InMemorySaver(), []
    )
    await load_test._check_thread(ost, graph, thread.rsplit("-", 1)[0], name, [], 3, bad)
    assert bad.foreign >= 1 or bad.problems
