"""Crash safety: kill a run at every step of a compression, restart, check nothing is lost.

A "crash" is a ``BaseException`` nobody catches (like the process dying): raised by a
store wrapper before or after each store write of a compression (history, offload,
event), by the summarizer, and by the checkpointer when the compressed state is about
to be saved. The restart builds new objects (store, checkpointer, engine, graph)
over the same SQLite files, resumes the thread and runs it to the end. Then:

* the thread resumed and finished, every model input and the final state are valid;
* every original message that ever was in a checkpoint is in the history store
  (same content) or still in the final state unchanged;
* no checkpoint ever held a working message pointing to an offload that does not
  exist.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _builders import FunctionModel, ScriptedModel, call, fetch, loop_graph, node_agent, view_ids
from conftest import open_sqlite
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.store.base import BaseStore, Op, PutOp, Result
from langgraph.store.sqlite import AsyncSqliteStore

from langchain_autocontext import (
    AutoContext,
    AutoContextConfig,
    ExtractiveSummarizer,
    OffloadStore,
)
from langchain_autocontext.messages import find_violations, marker, text_of

CFG = AutoContextConfig(
    max_tokens=2_500,
    last_keep=4,
    msg_threshold=30,
    large_payload_threshold=1_500,
    min_summary_span_tokens=50,
)
STEPS = 9
THREAD = {"configurable": {"thread_id": "crashy"}, "recursion_limit": 200}
OFFLOAD_ID = re.compile(r'offload_id="([^"]+)"')
TOOLS_FILE = "langchain_autocontext/tools.py"
START_MESSAGES = [SystemMessage("You are a coding agent."), HumanMessage("Fix the build.")]


class Crash(BaseException):
    """The process dies here (a BaseException: no fallback or retry catches it)."""


# --- fault injection ----------------------------------------------------------------------
def _kinds(ops: Iterable[Op]) -> frozenset[str]:
    """The namespace kinds ("history", "offload", "events", "meta") written by ``ops``."""
    return frozenset(op.namespace[-1] for op in ops if isinstance(op, PutOp))


@dataclass
class Faults:
    """Where to crash: the n-th store write batch (before or after it runs), the n-th
    summarizer call, or the first checkpoint save after a compression."""

    write: int | None = None
    after: bool = True
    summarizer: int | None = None
    checkpoint: str | None = None  # "put_writes" or "put"
    writes: list[frozenset[str]] = field(default_factory=list)
    in_tool: list[int] = field(default_factory=list)  # indices of writes made by a tool
    summaries: int = 0
    fired: str | None = None

    def crash(self, where: str) -> None:
        self.fired = where
        raise Crash(where)


def _called_from_tools() -> bool:
    """Whether one of the package's context tools is on the call stack."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(TOOLS_FILE):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class CrashingStore(BaseStore):
    """Delegates to ``backend``; crashes around the ``faults.write``-th write batch."""

    def __init__(self, backend: BaseStore, faults: Faults) -> None:
        self.backend = backend
        self.faults = faults

    def _check(self, ops: list[Op], done: bool) -> None:
        f = self.faults
        kinds = _kinds(ops)
        if not kinds:
            return
        if not done:
            f.writes.append(kinds)
            if _called_from_tools():
                f.in_tool.append(len(f.writes) - 1)
        n = len(f.writes) - 1
        if n == f.write and done == f.after:
            f.crash(f"{'after' if done else 'before'} store write #{n} {sorted(kinds)}")

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self._check(ops, False)
        out = self.backend.batch(ops)
        self._check(ops, True)
        return out

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self._check(ops, False)
        out = await self.backend.abatch(ops)
        self._check(ops, True)
        return out


class CrashingSummarizer(ExtractiveSummarizer):
    def __init__(self, faults: Faults) -> None:
        super().__init__()
        self.faults = faults

    def _maybe(self) -> None:
        self.faults.summaries += 1
        if self.faults.summaries - 1 == self.faults.summarizer:
            self.faults.crash(f"in summarizer call #{self.faults.summarizer}")

    def summarize_many(self, requests):  # type: ignore[no-untyped-def]
        self._maybe()
        return super().summarize_many(requests)

    async def asummarize_many(self, requests):  # type: ignore[no-untyped-def]
        self._maybe()
        return await super().asummarize_many(requests)


def _compressed(store: BaseStore) -> bool:
    return bool(OffloadStore.wrap(store, prefix=CFG.store_prefix).list_events("crashy"))


class CrashingSaver(SqliteSaver):
    """Crashes when the first state after a compression is about to be saved."""

    faults: Faults
    store: BaseStore

    def put_writes(self, config, writes, task_id, task_path=""):  # type: ignore[no-untyped-def]
        f = self.faults
        if f.checkpoint and f.checkpoint.startswith("tool:") and not f.fired:
            name = f.checkpoint[5:]
            if any(
                isinstance(m, ToolMessage) and m.name == name
                for _chan, value in writes
                for m in (value if isinstance(value, list) else [value])
            ):
                f.crash(f"before the state update of {name} is saved")
        if f.checkpoint == "put_writes" and not f.fired and _compressed(self.store):
            self.faults.crash("before the compressed state is saved (put_writes)")
        return super().put_writes(config, writes, task_id, task_path)

    def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
        f = self.faults
        if f.checkpoint == "put" and not f.fired and _compressed(self.store):
            self.faults.crash("before the compressed checkpoint is saved (put)")
        return super().put(config, checkpoint, metadata, new_versions)


# --- the agent ------------------------------------------------------------------------------


@contextmanager
def sqlite_saver(path: Path, cls: type[SqliteSaver] = SqliteSaver) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = cls(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


# --- the checks -------------------------------------------------------------------------------
def offload_refs(messages: Sequence[BaseMessage]) -> set[str]:
    refs: set[str] = set()
    for m in messages:
        info = marker(m) or {}
        if info.get("offload_id"):
            refs.add(info["offload_id"])
        refs.update(OFFLOAD_ID.findall(text_of(m)))
    return refs


def check_after_restart(graph: Any, store: BaseStore, model: ScriptedModel) -> None:
    ost = OffloadStore.wrap(store, prefix=CFG.store_prefix)
    final = graph.get_state(THREAD).values["messages"]
    assert final[-1].content == f"finished after {STEPS} steps", "the thread did not finish"
    assert not find_violations(final)
    for sent in model.seen:
        assert not find_violations(sent)
        assert isinstance(sent[0], SystemMessage)
    history = {e.id: e.message for e in ost.iter_history("crashy")}
    final_by_id = {m.id: m for m in final}
    originals: dict[str, BaseMessage] = {}
    for snapshot in graph.get_state_history(THREAD):
        msgs = snapshot.values.get("messages", [])
        for m in msgs:
            if marker(m) is None:
                originals.setdefault(m.id, m)
        for oid in offload_refs(msgs):  # no checkpoint points to a missing offload
            assert ost.reload("crashy", oid).messages
    assert len(originals) >= 2 + 2 * STEPS
    for mid, m in originals.items():
        kept = history.get(mid) or final_by_id.get(mid)
        assert kept is not None, f"original {mid} ({m.type}) lost"
        assert kept.content == m.content
    # the thread's model answers are in the history in order. (The history may also
    # hold answers of steps whose checkpoint the crash lost: archived when they ran,
    # then made again on resume. Append-only keeps them; nothing is rewritten.)
    steps = [
        text_of(e.message)
        for e in ost.iter_history("crashy")
        if e.id in originals and text_of(e.message).startswith("step ")
    ]
    assert steps == sorted(steps, key=lambda s: int(s.split()[1]))
    assert len(steps) == STEPS


def saved_steps(graph: Any) -> int:
    """How many model answers the checkpoints hold (the script position to resume at):
    those of the saved states and those of the pending writes a resume will apply (a
    crash in ``put`` after ``put_writes`` leaves the model's answer there)."""
    saved = [m for snap in graph.get_state_history(THREAD) for m in snap.values.get("messages", [])]
    latest = graph.checkpointer.get_tuple(THREAD)
    for _, channel, value in (latest.pending_writes or []) if latest else []:
        if channel == "messages":
            saved.extend(value if isinstance(value, list) else [value])
    steps = {
        m.id
        for m in saved
        if isinstance(m, BaseMessage)
        and m.type == "ai"
        and marker(m) is None
        and text_of(m).startswith("step ")
    }
    return len(steps)


def dry_run(tmp_path: Path) -> Faults:
    """One clean run, recording the store writes and summarizer calls."""
    faults = Faults()
    backend = open_sqlite(tmp_path / "dry-store.db")
    try:
        with sqlite_saver(tmp_path / "dry-ckpt.db") as saver:
            graph = node_agent(
                AutoContext(CFG, CrashingSummarizer(faults)),
                ScriptedModel(steps=STEPS),
                CrashingStore(backend, faults),
                saver,
            )
            graph.invoke({"messages": START_MESSAGES}, THREAD)
    finally:
        backend.conn.close()
    assert faults.fired is None
    return faults


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Faults:
    return dry_run(tmp_path_factory.mktemp("dry"))


def crash_and_restart(tmp_path: Path, faults: Faults) -> str:
    """Run until the crash, restart over the same files, resume to the end, check."""
    store_path, ckpt_path = tmp_path / "store.db", tmp_path / "ckpt.db"
    model = ScriptedModel(steps=STEPS)
    backend = open_sqlite(store_path)
    try:
        with sqlite_saver(ckpt_path, CrashingSaver) as saver:
            store = CrashingStore(backend, faults)
            saver.faults, saver.store = faults, backend
            graph = node_agent(AutoContext(CFG, CrashingSummarizer(faults)), model, store, saver)
            with pytest.raises(Crash):
                graph.invoke({"messages": START_MESSAGES}, THREAD)
    finally:
        backend.conn.close()
    assert faults.fired
    # restart: new objects over the same files
    backend = open_sqlite(store_path)
    try:
        with sqlite_saver(ckpt_path) as saver:
            graph = node_agent(AutoContext(CFG), ScriptedModel(), backend, saver)
            # the scripted "LLM service" continues after the last answer that was saved
            # (a call whose answer was lost in the crash is simply made again)
            resumed = ScriptedModel(steps=STEPS, calls=saved_steps(graph))
            graph = node_agent(AutoContext(CFG), resumed, backend, saver)
            graph.invoke(None, THREAD)
            check_after_restart(graph, backend, resumed)
    finally:
        backend.conn.close()
    return faults.fired


# --- the sweep ----------------------------------------------------------------------------
def test_dry_run_compresses_with_offloads_and_summaries(plan: Faults) -> None:
    writes = set().union(*plan.writes)
    assert {"history", "offload", "events", "meta"} <= writes
    assert plan.summaries >= 1, "no summarizer call: the sweep would not cover it"
    assert sum("offload" in w for w in plan.writes) >= 2


def _first_compression(plan: Faults) -> range:
    """Write batches from the archive before the first offload to the last event of it."""
    first_offload = next(i for i, w in enumerate(plan.writes) if "offload" in w)
    start = max(i for i in range(first_offload) if "history" in plan.writes[i])
    end = first_offload
    while end + 1 < len(plan.writes) and "history" not in plan.writes[end + 1]:
        end += 1
    return range(start, end + 1)


@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
def test_crash_around_every_store_write_of_a_compression(
    plan: Faults, tmp_path: Path, after: bool
) -> None:
    seen: list[str] = []
    for n in _first_compression(plan):
        sub = tmp_path / f"w{n}"
        sub.mkdir()
        seen.append(crash_and_restart(sub, Faults(write=n, after=after)))
    text = " | ".join(seen)
    for kind in ("history", "offload", "events"):
        assert kind in text, f"no crash around a {kind} write: {text}"


def test_crash_around_every_later_store_write_sampled(plan: Faults, tmp_path: Path) -> None:
    first = _first_compression(plan)
    later = [n for n in range(first.stop, len(plan.writes)) if "offload" in plan.writes[n]]
    assert later, "compression fired only once"
    for n in later[:: max(1, len(later) // 4)]:
        sub = tmp_path / f"w{n}"
        sub.mkdir()
        crash_and_restart(sub, Faults(write=n, after=True))


def test_crash_in_every_summarizer_call(plan: Faults, tmp_path: Path) -> None:
    for n in range(plan.summaries):
        sub = tmp_path / f"s{n}"
        sub.mkdir()
        assert "summarizer" in crash_and_restart(sub, Faults(summarizer=n))


@pytest.mark.parametrize("where", ["put_writes", "put"])
def test_crash_before_the_compressed_state_is_saved(tmp_path: Path, where: str) -> None:
    assert where in crash_and_restart(tmp_path, Faults(checkpoint=where))


# --- async: the same guarantees through acompress/adrive --------------------------------------
async def test_async_crash_after_offload_write_then_resume(tmp_path: Path) -> None:
    faults = Faults()
    store_path, ckpt_path = str(tmp_path / "store.db"), str(tmp_path / "ckpt.db")
    model = ScriptedModel(steps=STEPS)
    async with (
        AsyncSqliteStore.from_conn_string(store_path) as backend,
        AsyncSqliteSaver.from_conn_string(ckpt_path) as saver,
    ):
        await backend.setup()
        faults.write = 10**9  # count only, then arm on the second offload write
        store = CrashingStore(backend, faults)
        graph = node_agent(AutoContext(CFG, CrashingSummarizer(faults)), model, store, saver)

        orig = store._check

        def arm(ops: list[Op], done: bool) -> None:
            if not done and "offload" in _kinds(ops):
                arm.offloads += 1  # type: ignore[attr-defined]
                if arm.offloads == 2:  # type: ignore[attr-defined]
                    faults.write, faults.after = len(faults.writes), True
            orig(ops, done)

        arm.offloads = 0  # type: ignore[attr-defined]
        store._check = arm  # type: ignore[method-assign]
        with pytest.raises(Crash):
            await graph.ainvoke({"messages": START_MESSAGES}, THREAD)
    assert faults.fired and "offload" in faults.fired
    async with (
        AsyncSqliteStore.from_conn_string(store_path) as backend,
        AsyncSqliteSaver.from_conn_string(ckpt_path) as saver,
    ):
        resumed = ScriptedModel(steps=STEPS, calls=model.calls)
        graph = node_agent(AutoContext(CFG), resumed, backend, saver)
        await graph.ainvoke(None, THREAD)
        ost = OffloadStore.wrap(backend, prefix=CFG.store_prefix)
        final = (await graph.aget_state(THREAD)).values["messages"]
        assert final[-1].content == f"finished after {STEPS} steps"
        assert not find_violations(final)
        history = {e.id async for e in ost.aiter_history("crashy")}
        async for snap in graph.aget_state_history(THREAD):
            msgs = snap.values.get("messages", [])
            for m in msgs:
                if marker(m) is None:
                    assert m.id in history or m.id == final[-1].id
            for oid in offload_refs(msgs):
                assert (await ost.areload("crashy", oid)).messages


# --- a failing (not crashing) summarizer model is handled, not fatal ---------------------------
def test_summarizer_errors_fall_back_and_the_run_continues(tmp_path: Path) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    class Broken(FakeListChatModel):
        def _call(self, *args: Any, **kwargs: Any) -> str:
            raise ConnectionError("provider down")

    backend = open_sqlite(tmp_path / "store.db")
    try:
        with sqlite_saver(tmp_path / "ckpt.db") as saver:
            model = ScriptedModel(steps=STEPS)
            cfg = CFG.model_copy(update={"summarizer_retries": 0})
            graph = node_agent(AutoContext(cfg, Broken(responses=["x"])), model, backend, saver)
            graph.invoke({"messages": START_MESSAGES}, THREAD)
            check_after_restart(graph, backend, model)
            events = OffloadStore.wrap(backend).list_events("crashy")
            assert sum(e.data.get("summarizer_fallbacks", 0) for e in events) >= 1
            assert any("provider down" in str(e.data.get("summarizer_errors")) for e in events)
    finally:
        backend.conn.close()


# --- the model's tools: crash around their store writes and before their state updates ----
TOOL_CFG = AutoContextConfig(
    max_tokens=6_000,
    last_keep=6,
    large_payload_threshold=3_000,
    disclosure="always",
    metadata_tags=True,
)


def _tool_script(view: list[BaseMessage], n: int) -> AIMessage:
    """fetch, fetch, update_message, delete_message, working_context_append,
    search_history, done; targets are found by the ids the view shows."""

    def shown(pred: Any) -> str | None:
        hits = [sid for sid, m in view_ids(view) if pred(m)]
        return hits[-1] if hits else None

    if n < 2:
        return AIMessage("", tool_calls=[call("fetch", {"name": ["alpha", "beta"][n], "size": 90})])
    if n == 2:
        target = shown(lambda m: isinstance(m, ToolMessage) and "alpha line 0" in text_of(m))
        if target:
            args = {"message_id": target, "content": "alpha: 90 lines, all fine"}
            return AIMessage("", tool_calls=[call("update_message", args)])
    if n == 3:
        target = shown(
            lambda m: (
                isinstance(m, AIMessage)
                and any(tc["args"].get("name") == "beta" for tc in m.tool_calls)
            )
        )
        if target:
            return AIMessage("", tool_calls=[call("delete_message", {"message_id": target})])
    if n == 4:
        args = {"text": "alpha is fine; beta was noise"}
        return AIMessage("", tool_calls=[call("working_context_append", args)])
    if n in (2, 3, 5):
        return AIMessage("", tool_calls=[call("search_history", {"query": "value-beta"})])
    return AIMessage("done")


def tool_agent(ac: AutoContext, model: FunctionModel, store: BaseStore, saver: Any) -> Any:
    return loop_graph(ac, model, [fetch, *ac.tools]).compile(store=store, checkpointer=saver)


def _answers_saved(graph: Any) -> int:
    return len(
        {
            m.id
            for snap in graph.get_state_history(THREAD)
            for m in snap.values.get("messages", [])
            if isinstance(m, AIMessage) and marker(m) is None
        }
    )


def tool_crash_and_restart(tmp_path: Path, faults: Faults) -> str | None:
    store_path, ckpt_path = tmp_path / "store.db", tmp_path / "ckpt.db"
    backend = open_sqlite(store_path)
    try:
        with sqlite_saver(ckpt_path, CrashingSaver) as saver:
            saver.faults, saver.store = faults, backend
            store = CrashingStore(backend, faults)
            graph = tool_agent(
                AutoContext(TOOL_CFG), FunctionModel(respond=_tool_script), store, saver
            )
            with suppress(Crash):
                graph.invoke({"messages": START_MESSAGES}, THREAD)
    finally:
        backend.conn.close()
    backend = open_sqlite(store_path)
    try:
        with sqlite_saver(ckpt_path) as saver:
            probe = tool_agent(
                AutoContext(TOOL_CFG), FunctionModel(respond=_tool_script), backend, saver
            )
            done = _answers_saved(probe)
            model = FunctionModel(respond=_tool_script, seen=[[] for _ in range(done)])
            graph = tool_agent(AutoContext(TOOL_CFG), model, backend, saver)
            if faults.fired:
                graph.invoke(None, THREAD)
            final = graph.get_state(THREAD).values
            msgs = final["messages"]
            assert msgs[-1].content == "done" and not find_violations(msgs)
            ost = OffloadStore.wrap(backend, prefix=TOOL_CFG.store_prefix)
            history = {e.id: e.message for e in ost.iter_history("crashy")}
            final_ids = {m.id for m in msgs}
            for snap in graph.get_state_history(THREAD):
                for m in snap.values.get("messages", []):
                    if marker(m) is None and not isinstance(m, SystemMessage):
                        assert m.id in history or m.id in final_ids, f"{m.type} {m.id} lost"
                for oid in offload_refs(snap.values.get("messages", [])):
                    assert ost.reload("crashy", oid).messages
            alpha = [
                m
                for m in history.values()
                if isinstance(m, ToolMessage) and m.name == "fetch" and "alpha line 0" in text_of(m)
            ]
            assert len(alpha) == 1  # the original survives its update
            assert any(
                isinstance(m, ToolMessage) and text_of(m) == "alpha: 90 lines, all fine"
                for m in msgs
            ), "the update was lost or applied twice"
            assert "beta was noise" in str(final.get("autocontext", {}))
            assert not any(  # the delete held: beta's call and result left the context
                m.name == "fetch" and "beta line 0" in text_of(m)
                for m in msgs
                if isinstance(m, ToolMessage)
            )
    finally:
        backend.conn.close()
    return faults.fired


@pytest.fixture(scope="module")
def tool_plan(tmp_path_factory: pytest.TempPathFactory) -> Faults:
    faults = Faults()
    assert tool_crash_and_restart(tmp_path_factory.mktemp("tools-dry"), faults) is None
    # (the command node archives each reply as it is written, so the tools themselves
    # write only their events and edited originals: two writes in this script)
    assert len(faults.in_tool) >= 2, "the tools wrote too little to sweep"
    return faults


@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
def test_crash_around_every_store_write_of_the_tools(
    tool_plan: Faults, tmp_path: Path, after: bool
) -> None:
    for n in tool_plan.in_tool:
        sub = tmp_path / f"t{n}"
        sub.mkdir()
        assert tool_crash_and_restart(sub, Faults(write=n, after=after))


@pytest.mark.parametrize(
    "tool",
    ["fetch", "update_message", "delete_message", "working_context_append", "search_history"],
)
def test_crash_before_a_tools_state_update_is_saved(tmp_path: Path, tool: str) -> None:
    fired = tool_crash_and_restart(tmp_path, Faults(checkpoint=f"tool:{tool}"))
    assert fired and tool in fired
