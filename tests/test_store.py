"""Conformance suite of `OffloadStore` over every backend, sync and async.

Most tests take ``api`` (see :class:`StoreAPI`): the same test body runs on each
backend of ``tests/conftest.py`` through the sync helpers and through their async
twins, so "the twins behave identically" is checked by every test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import math
import sqlite3
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from conftest import open_sqlite, unique_prefix
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings.fake import DeterministicFakeEmbedding
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config, get_store
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import AsyncSqliteStore, SqliteStore

from langchain_autocontext.errors import (
    AmbiguousOffloadRefError,
    AutoContextError,
    OffloadNotFoundError,
)
from langchain_autocontext.messages import UUID4_RE, dump_message, new_id, seeded_ids
from langchain_autocontext.store import (
    OFFLOAD_REF_LENGTH,
    EventRecord,
    HistoryEntry,
    OffloadRecord,
    OffloadStore,
    decode_thread_id,
    encode_thread_id,
    offload_ref,
)


# --- the harness -------------------------------------------------------------------------
class StoreAPI:
    """Calls the sync helpers or their ``a``-twins, behind one awaitable interface."""

    def __init__(self, store: OffloadStore, is_async: bool) -> None:
        self.store = store
        self.is_async = is_async

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.store, f"a{name}")(*args, **kwargs)
        return getattr(self.store, name)(*args, **kwargs)

    async def append_history(self, thread_id: str, messages: Sequence[BaseMessage]) -> list[str]:
        return await self._call("append_history", thread_id, messages)  # type: ignore[no-any-return]

    async def get_history(
        self, thread_id: str, *, start: int = 0, end: int | None = None
    ) -> list[HistoryEntry]:
        return await self._call("get_history", thread_id, start=start, end=end)  # type: ignore[no-any-return]

    async def get_history_message(self, thread_id: str, message_id: str) -> HistoryEntry | None:
        return await self._call("get_history_message", thread_id, message_id)  # type: ignore[no-any-return]

    async def history_count(self, thread_id: str) -> int:
        return await self._call("history_count", thread_id)  # type: ignore[no-any-return]

    async def iter_history(self, thread_id: str, **kwargs: Any) -> list[HistoryEntry]:
        if self.is_async:
            return [e async for e in self.store.aiter_history(thread_id, **kwargs)]
        return list(self.store.iter_history(thread_id, **kwargs))

    async def offload(
        self, thread_id: str, messages: Sequence[BaseMessage], **kwargs: Any
    ) -> OffloadRecord:
        return await self._call("offload", thread_id, messages, **kwargs)  # type: ignore[no-any-return]

    async def reload(self, thread_id: str, offload_id: str) -> OffloadRecord:
        return await self._call("reload", thread_id, offload_id)  # type: ignore[no-any-return]

    async def list_offloads(self, thread_id: str) -> list[OffloadRecord]:
        return await self._call("list_offloads", thread_id)  # type: ignore[no-any-return]

    async def record_event(self, thread_id: str, event: dict[str, Any]) -> str:
        return await self._call("record_event", thread_id, event)  # type: ignore[no-any-return]

    async def list_events(self, thread_id: str) -> list[EventRecord]:
        return await self._call("list_events", thread_id)  # type: ignore[no-any-return]


@pytest.fixture
def api(any_store: tuple[OffloadStore, bool]) -> StoreAPI:
    """Every backend, through the sync and the async helpers."""
    return StoreAPI(*any_store)


# --- data --------------------------------------------------------------------------------
def every_message_type() -> list[BaseMessage]:
    """One of each LangChain message type, with every field that must survive."""
    return [
        SystemMessage("You are terse.", id="sys-1"),
        HumanMessage(
            content=[
                {"type": "text", "text": "What is in these images?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
                },
                {
                    "type": "image",
                    "source_type": "base64",
                    "data": "iVBORw0KGgo=",
                    "mime_type": "image/png",
                },
                {"type": "image", "url": "https://example.com/cat.png"},
            ],
            id="human-1",
            name="alice",
        ),
        AIMessage(
            content="Let me look.",
            id="ai-1",
            name="assistant-bot",
            tool_calls=[
                {
                    "name": "read_file",
                    "args": {"path": "src/a.py", "lines": [1, 20], "opts": {"raw": True}},
                    "id": "call_1",
                    "type": "tool_call",
                }
            ],
            invalid_tool_calls=[
                {
                    "name": "grep",
                    "args": '{"pattern": ',
                    "id": "call_2",
                    "error": "JSONDecodeError: Expecting value",
                    "type": "invalid_tool_call",
                }
            ],
            usage_metadata={
                "input_tokens": 120,
                "output_tokens": 30,
                "total_tokens": 150,
                "input_token_details": {"cache_read": 100},
                "output_token_details": {"reasoning": 10},
            },
            response_metadata={"model_name": "gpt-x", "finish_reason": "tool_calls", "seed": 7},
            additional_kwargs={"refusal": None, "custom": {"nested": [1, "two", None, True, 2.5]}},
        ),
        ToolMessage(
            content="Traceback (most recent call last): FileNotFoundError",
            tool_call_id="call_1",
            status="error",
            artifact={"exit_code": 1, "stderr": "boom", "paths": ["a", "b"]},
            id="tool-1",
            name="read_file",
        ),
        ToolMessage(content=[{"type": "text", "text": "ok"}], tool_call_id="call_3", id="tool-2"),
        ChatMessage(content="This answer is too long.", role="critic", id="chat-1"),
        FunctionMessage(content="42", name="compute", id="fn-1"),
        AIMessageChunk(
            content="partial",
            id="chunk-1",
            tool_call_chunks=[
                {
                    "name": "f",
                    "args": '{"a": 1}',
                    "id": "call_9",
                    "index": 0,
                    "type": "tool_call_chunk",
                }
            ],
        ),
        AIMessage(
            content=[
                {"type": "reasoning", "reasoning": "think"},
                {"type": "text", "text": "answer ✓"},
            ],
            id="ai-2",
        ),
        HumanMessage('ünïcødé 𝄞 — "quotes" \\ back\nslash \x01', id="human-2"),
    ]


def convo(n: int, start: int = 0, tag: str = "m") -> list[BaseMessage]:
    """``n`` alternating human/AI messages with ids ``{tag}{i}``."""
    out: list[BaseMessage] = []
    for i in range(start, start + n):
        cls = HumanMessage if i % 2 == 0 else AIMessage
        out.append(cls(f"message {i} " + "x" * (i % 50), id=f"{tag}{i}"))
    return out


def ids_of(entries: Sequence[HistoryEntry]) -> list[str]:
    return [e.id for e in entries]


# --- history: round trips ----------------------------------------------------------------
async def test_every_message_type_round_trips_exactly(api: StoreAPI) -> None:
    messages = every_message_type()
    assert await api.append_history("t", messages) == [m.id for m in messages]
    entries = await api.get_history("t")
    assert [e.seq for e in entries] == list(range(len(messages)))
    for original, entry in zip(messages, entries, strict=True):
        assert type(entry.message) is type(original)
        assert entry.message == original
        assert dump_message(entry.message) == dump_message(original)
        assert entry.id == original.id
        single = await api.get_history_message("t", original.id or "")
        assert single == entry


async def test_stored_values_are_plain_json_with_search_text(api: StoreAPI) -> None:
    await api.append_history("t", every_message_type())
    ns = api.store.namespace("t", "history")
    item = await api.store.aget(ns, "ai-1") if api.is_async else api.store.get(ns, "ai-1")
    assert item is not None
    assert set(item.value) == {"seq", "seq_key", "message", "type", "text", "ts"}
    assert item.value["seq"] == 2 and item.value["seq_key"] == "000000000000002"
    assert item.value["type"] == "ai"
    assert "Let me look." in item.value["text"]
    assert 'read_file({"path": "src/a.py"' in item.value["text"]  # tool calls are searchable


async def test_remove_message_is_rejected_and_nothing_written(api: StoreAPI) -> None:
    with pytest.raises(ValueError, match="RemoveMessage"):
        await api.append_history("t", [HumanMessage("a", id="a"), RemoveMessage(id="a")])
    assert await api.history_count("t") == 0
    assert await api.get_history("t") == []
    with pytest.raises(ValueError, match="RemoveMessage"):
        await api.offload("t", [RemoveMessage(id="a")], strategy="s", preview="", tokens=0)


async def test_message_without_id_is_rejected(api: StoreAPI) -> None:
    with pytest.raises(ValueError, match="no id"):
        await api.append_history("t", [HumanMessage("a", id="a"), AIMessage("no id")])
    assert await api.history_count("t") == 0
    with pytest.raises(TypeError, match="BaseMessage"):
        await api.append_history("t", ["not a message"])  # type: ignore[list-item]


async def test_non_json_content_is_kept_as_a_marker_not_an_error(api: StoreAPI) -> None:
    """Issue 13: a value not even LangGraph's serializer can encode is kept as a marker
    (its type and repr): the message is stored, the thread goes on."""
    odd = ToolMessage("x", tool_call_id="c", artifact=object(), id="tool-x")
    await api.append_history("t", [HumanMessage("a", id="a"), odd])
    assert await api.history_count("t") == 2
    (entry,) = [e for e in await api.get_history("t") if e.id == "tool-x"]
    assert entry.message.artifact["type"] == "object" and "object" in entry.message.artifact["repr"]


async def test_numbers_json_cannot_hold_come_back_as_they_were_on_every_backend(
    api: StoreAPI,
) -> None:
    """``NaN``/``±Infinity`` (a tool's pandas rows, a provider's ``-inf`` logprob) and
    integers beyond 64 bits: ``InMemoryStore`` kept them, ``SqliteStore`` stored
    ``null`` for the first and refused the second (a TypeError out of ``compress``),
    Postgres refused ``NaN``. Every backend now gives them back as they were."""
    data = {"price": math.nan, "hi": math.inf, "lo": -math.inf, "big": 2**70, "neg": -(2**70)}
    data["edge"] = 2**63 - 1
    odd = ToolMessage(
        "rows", tool_call_id="c1", id="t1", artifact=data, response_metadata={"lp": [-math.inf]}
    )

    def same(got: dict[str, Any]) -> None:
        assert math.isnan(got["price"])
        assert {k: v for k, v in got.items() if k != "price"} == {
            k: v for k, v in data.items() if k != "price"
        }

    await api.append_history("t", [odd])
    (entry,) = await api.get_history("t")
    same(entry.message.artifact)
    assert entry.message.response_metadata == {"lp": [-math.inf]}
    record = await api.offload("t", [odd], strategy="s", preview="p", tokens=1, extra=data)
    back = await api.reload("t", record.offload_id)
    same(back.messages[0].artifact)
    same(back.extra)
    await api.record_event("t", {"strategy": "custom", "value": 2**70, "score": math.inf})
    (event,) = await api.list_events("t")
    assert event.data["value"] == 2**70 and event.data["score"] == math.inf


async def test_empty_append_is_a_no_op(api: StoreAPI) -> None:
    assert await api.append_history("t", []) == []
    assert await api.history_count("t") == 0


# --- history: idempotency and order ---------------------------------------------------------
async def test_append_is_idempotent_by_id(api: StoreAPI) -> None:
    messages = convo(5)
    assert await api.append_history("t", messages) == [f"m{i}" for i in range(5)]
    first = await api.get_history("t")
    assert await api.append_history("t", messages) == []
    assert await api.get_history("t") == first
    assert await api.history_count("t") == 5


async def test_edit_with_known_id_keeps_the_original_and_the_new_version(
    api: StoreAPI,
) -> None:
    """An edit that reuses an id (LangGraph's add_messages replaces by id): the original
    stays under the id, the new content is appended once as a later version of it, so
    every content the message had is readable (and searchable)."""
    await api.append_history("t", convo(3))
    edited = AIMessage("EDITED by update_message", id="m1")
    written = await api.append_history("t", [edited, *convo(1, start=3)])
    assert len(written) == 2 and written[0].startswith("m1~") and written[1] == "m3"
    entry = await api.get_history_message("t", "m1")
    assert entry is not None
    assert entry.seq == 1
    assert entry.message.content == convo(3)[1].content
    version = await api.get_history_message("t", written[0])
    assert version is not None and version.seq == 3
    assert version.message.content == "EDITED by update_message"
    # loaded under its own key: a list of the history never holds one id twice
    assert version.message.id == version.id == written[0] and version.version_of == "m1"
    assert entry.version_of is None and entry.message.id == "m1"
    assert ids_of(await api.get_history("t")) == ["m0", "m1", "m2", written[0], "m3"]
    # each content once: the same edit again, or the original again, writes nothing
    assert await api.append_history("t", [edited]) == []
    assert await api.append_history("t", convo(3)) == []
    again = await api.append_history("t", [AIMessage("a second edit", id="m1")])
    assert len(again) == 1 and again[0].startswith("m1~") and again[0] != written[0]
    assert await api.history_count("t") == 6


def test_messages_the_history_holds_are_not_serialized_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An archive call handed messages the history holds (an engine that does not
    remember the thread: another process, a restart, one of many threads) serialized
    every one of them to compare it with its stored version, where before versions it
    read their keys only: 0.1 ms grew to 500 ms for a working list with 20 one-MB
    screenshots. A message stored as it is costs no serialization; an edit still
    becomes a later version."""
    from langchain_autocontext import store as store_module

    dumps: list[str | None] = []

    def counting(message: BaseMessage) -> Any:
        dumps.append(message.id)
        return dump_message(message)

    monkeypatch.setattr(store_module, "dump_message", counting)
    image = {"type": "image", "base64": "QUJD" * 100, "mime_type": "image/png"}
    call = {"name": "shot", "args": {"n": 1}, "id": "c1", "type": "tool_call"}
    msgs: list[BaseMessage] = [
        HumanMessage("look", id="u1"),
        AIMessage("", tool_calls=[call], id="a1"),
        ToolMessage([image], tool_call_id="c1", id="t1"),
    ]
    store = OffloadStore(InMemoryStore())
    store.append_history("t", msgs)
    dumps.clear()
    assert store.append_history("t", [*msgs, HumanMessage("next", id="u2")]) == ["u2"]
    assert dumps == ["u2"]
    edited = ToolMessage([{**image, "base64": "REVG"}], tool_call_id="c1", id="t1")
    written = store.append_history("t", [*msgs[:2], edited])
    assert len(written) == 1 and written[0].startswith("t1~")


async def test_repeated_id_within_one_call_first_wins(api: StoreAPI) -> None:
    batch = [HumanMessage("first", id="x"), AIMessage("y", id="y"), HumanMessage("second", id="x")]
    assert await api.append_history("t", batch) == ["x", "y"]
    entries = await api.get_history("t")
    assert [(e.seq, e.id, e.message.content) for e in entries] == [
        (0, "x", "first"),
        (1, "y", "y"),
    ]


async def test_seq_orders_history_across_appends(api: StoreAPI) -> None:
    for n in range(6):
        await api.append_history("t", convo(n + 1, start=n * (n + 1) // 2))
    entries = await api.get_history("t")
    assert [e.seq for e in entries] == list(range(21))
    assert ids_of(entries) == [f"m{i}" for i in range(21)]
    assert all(a.ts <= b.ts for a, b in itertools.pairwise(entries))
    assert await api.history_count("t") == 21


async def test_range_reads(api: StoreAPI) -> None:
    await api.append_history("t", convo(10))
    assert ids_of(await api.get_history("t", start=3, end=6)) == ["m3", "m4", "m5"]
    assert ids_of(await api.get_history("t", start=8)) == ["m8", "m9"]
    assert ids_of(await api.get_history("t", end=2)) == ["m0", "m1"]
    assert ids_of(await api.get_history("t", start=7, end=100)) == ["m7", "m8", "m9"]
    assert await api.get_history("t", start=5, end=5) == []
    assert await api.get_history("t", start=6, end=2) == []
    assert await api.get_history("t", start=50) == []
    with pytest.raises(ValueError, match="non-negative"):
        await api.get_history("t", start=-1)
    everything = await api.get_history("t")
    assert await api.iter_history("t", batch_size=3) == everything
    assert await api.iter_history("t", batch_size=1000) == everything
    assert await api.iter_history("t", start=4, end=9, batch_size=2) == everything[4:9]
    with pytest.raises(ValueError, match="batch_size"):
        await api.iter_history("t", batch_size=0)


@pytest.mark.parametrize(("start", "end"), [(0, 1.5), (1.0, None), ("0", 2), (0, True)])
async def test_a_range_bound_that_is_not_an_int_is_refused_alike_everywhere(
    api: StoreAPI, start: Any, end: Any
) -> None:
    """A float ``end`` was a slicing TypeError from memory and an IntegrityError
    ("datatype mismatch") from SQLite: every backend, sync and async, now says what is
    wrong, before any read."""
    await api.append_history("t", convo(3))
    with pytest.raises(TypeError, match="history range bounds must be ints"):
        await api.get_history("t", start=start, end=end)
    if end is not None:
        read = api.store.aget_history_items if api.is_async else api.store.get_history_items
        with pytest.raises(TypeError, match="history range bounds must be ints"):
            result = read("t", start=start, end=end)
            if api.is_async:
                await result


async def test_get_by_id(api: StoreAPI) -> None:
    await api.append_history("t", convo(3))
    entry = await api.get_history_message("t", "m2")
    assert entry is not None and entry.seq == 2 and entry.message.content == "message 2 xx"
    assert await api.get_history_message("t", "nope") is None
    assert await api.get_history_message("other-thread", "m2") is None


async def test_unknown_thread_is_empty(api: StoreAPI) -> None:
    assert await api.get_history("never") == []
    assert await api.history_count("never") == 0
    assert await api.iter_history("never") == []
    assert await api.list_offloads("never") == []
    assert await api.list_events("never") == []


async def test_ten_thousand_messages(api: StoreAPI) -> None:
    """An agent appending 100 messages at a time; read everything back in order."""
    total, batch = 10_000, 100
    t0 = time.perf_counter()
    for start in range(0, total, batch):
        await api.append_history("long", convo(batch, start=start))
    t_write = time.perf_counter() - t0
    entries = await api.get_history("long")
    t_read = time.perf_counter() - t0 - t_write
    assert len(entries) == total
    assert [e.seq for e in entries] == list(range(total))
    assert ids_of(entries) == [f"m{i}" for i in range(total)]
    assert await api.history_count("long") == total
    streamed = await api.iter_history("long", start=9_000, batch_size=250)
    assert ids_of(streamed) == [f"m{i}" for i in range(9_000, total)]
    # Appending again (idempotent) still writes nothing.
    assert await api.append_history("long", convo(batch, start=5_000)) == []
    elapsed = time.perf_counter() - t0
    print(f"10k history: write {t_write:.2f}s, read {t_read:.2f}s, total {elapsed:.2f}s")
    assert elapsed < 60, "a 10k-message history should take seconds, not minutes"


async def test_concurrent_appends_get_unique_seqs(api: StoreAPI) -> None:
    groups = [convo(25, start=i * 25) for i in range(8)]
    if api.is_async:
        await asyncio.gather(*(api.store.aappend_history("t", g) for g in groups))
    else:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda g: api.store.append_history("t", g), groups))
    entries = await api.get_history("t")
    assert sorted(e.seq for e in entries) == list(range(200))
    assert sorted(ids_of(entries)) == sorted(f"m{i}" for i in range(200))
    for g in groups:  # each call's messages keep their relative order
        seqs = [e.seq for e in entries if e.id in {m.id for m in g}]
        assert seqs == sorted(seqs) and len(seqs) == 25


async def test_lost_counter_is_recovered(api: StoreAPI) -> None:
    """Without the meta counter (e.g. deleted), seqs continue after the largest one."""
    await api.append_history("t", convo(37))
    await api.record_event("t", {"kind": "a"})
    await api.offload("t", convo(1), strategy="s", preview="p", tokens=1)
    for kind in ("history", "events", "offload"):
        ns = api.store.namespace("t", "meta")
        if api.is_async:
            await api.store.adelete(ns, kind)
        else:
            api.store.delete(ns, kind)
    assert await api.history_count("t") == 37
    assert await api.append_history("t", convo(2, start=37)) == ["m37", "m38"]
    assert [e.seq for e in await api.get_history("t")] == list(range(39))
    await api.record_event("t", {"kind": "b"})
    assert [(e.kind, e.seq) for e in await api.list_events("t")] == [("a", 0), ("b", 1)]
    record = await api.offload("t", convo(1), strategy="s", preview="p", tokens=1)
    assert record.seq == 1


# --- offloads --------------------------------------------------------------------------------
async def test_offload_with_reuse_keeps_one_record_per_content(api: StoreAPI) -> None:
    """``reuse=True`` (messages sent with one model call only, offloaded anew by every
    call under new ids): the same content returns the first record, unchanged; other
    content, another strategy or another thread gets its own; without it, a new one."""
    doc = HumanMessage("Retrieved: the build uses make.", id="d1")
    kw: dict[str, Any] = {"strategy": "fifo", "preview": "p", "tokens": 9, "reuse": True}
    first = await api.offload("t", [doc], **kw)
    again = await api.offload("t", [doc.model_copy(update={"id": "d2"})], **kw)
    assert again == first and again.message_ids == ("d1",)
    other = await api.offload("t", [HumanMessage("Retrieved: other.", id="d3")], **kw)
    moved = await api.offload("t", [doc], **{**kw, "strategy": "offload_all"})
    elsewhere = await api.offload("u", [doc], **kw)
    plain = await api.offload("t", [doc], strategy="fifo", preview="p", tokens=9)
    ids = {r.offload_id for r in (first, other, moved, plain)}
    assert len(ids) == 4 and elsewhere.thread_id == "u"
    assert [r.offload_id for r in await api.list_offloads("t")] == [
        first.offload_id,
        other.offload_id,
        moved.offload_id,
        plain.offload_id,
    ]
    assert await api.reload("t", first.offload_id) == first


async def test_offload_reload_round_trip(api: StoreAPI) -> None:
    originals = every_message_type()[2:5]
    record = await api.offload(
        "t",
        originals,
        strategy="offload_large",
        preview="[offloaded 3 messages] Let me look…",
        tokens=1234,
        replacement_tokens=40,
        extra={"reason": "large", "chars": [10, 20]},
    )
    assert len(record.offload_id) == 36 and record.offload_id.count("-") == 4  # uuid4
    assert record.thread_id == "t" and record.seq == 0
    assert record.messages == tuple(originals)
    assert record.message_ids == ("ai-1", "tool-1", "tool-2")
    again = await api.reload("t", record.offload_id)
    assert again == record
    assert [dump_message(m) for m in again.messages] == [dump_message(m) for m in originals]
    assert (again.strategy, again.preview, again.tokens, again.replacement_tokens) == (
        "offload_large",
        "[offloaded 3 messages] Let me look…",
        1234,
        40,
    )
    assert again.extra == {"reason": "large", "chars": [10, 20]}
    assert await api.reload("t", f"  {record.offload_id}\n") == record  # pasted with whitespace


async def test_offload_ids_are_unique_and_listed_in_order(api: StoreAPI) -> None:
    records = [
        await api.offload("t", convo(1, start=i), strategy=f"s{i}", preview=f"p{i}", tokens=i)
        for i in range(5)
    ]
    assert len({r.offload_id for r in records}) == 5
    listed = await api.list_offloads("t")
    assert listed == records
    assert [r.seq for r in listed] == list(range(5))


async def test_reload_unknown_or_foreign_offload_raises(api: StoreAPI) -> None:
    record = await api.offload("alice", convo(2), strategy="s", preview="p", tokens=5)
    for thread, offload_id in [
        ("alice", "00000000-0000-4000-8000-000000000000"),
        ("alice", ""),
        ("bob", record.offload_id),  # another thread's id is not visible
    ]:
        with pytest.raises(OffloadNotFoundError) as info:
            await api.reload(thread, offload_id)
        assert isinstance(info.value, AutoContextError) and isinstance(info.value, KeyError)
        assert info.value.offload_id == offload_id
        assert f"Searched thread {thread!r}" in str(info.value)  # where it looked
        # advice for the developer who called reload, not the model's tools
        assert "list_offloads" in str(info.value)
        assert "reload_offloaded" not in str(info.value)
        assert "search_history" not in str(info.value)
    assert (await api.reload("alice", record.offload_id)).offload_id == record.offload_id
    # a model's runaway argument is named by its head and length, not echoed whole
    with pytest.raises(OffloadNotFoundError) as info:
        await api.reload("alice", "x" * 5_000)
    assert info.value.offload_id == "x" * 5_000
    assert len(str(info.value)) < 600 and "5,000 characters" in str(info.value)


@pytest.mark.random_ids
async def test_reload_takes_the_shortened_id_a_note_shows(
    api: StoreAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note in the context names an offload by ``offload_ref`` (the first 8 characters
    of its uuid4): reload takes that, any longer prefix, or the whole id, within the
    thread only; a shortened id that starts two offloads names both, never reloads one."""
    record = await api.offload("alice", convo(2), strategy="s", preview="p", tokens=5)
    ref = offload_ref(record.offload_id)
    assert len(ref) == OFFLOAD_REF_LENGTH == 8 and record.offload_id.startswith(ref)
    for shown in (ref, ref.upper(), f" {ref}\n", record.offload_id[:13], record.offload_id):
        assert (await api.reload("alice", shown)).offload_id == record.offload_id
    for thread, wrong in (("bob", ref), ("alice", ref[:7]), ("alice", ref[:7] + "x")):
        with pytest.raises(OffloadNotFoundError):
            await api.reload(thread, wrong)  # another thread's, too short, not its prefix
    # two offload ids that share their first 8 characters (1 in 4 billion by chance)
    twins = iter(uuid.UUID(f"abcdef12-0000-4000-8000-00000000000{k}") for k in (1, 2))
    real = uuid.uuid4
    monkeypatch.setattr(uuid, "uuid4", lambda: next(twins, None) or real())
    first = await api.offload("alice", convo(1), strategy="s", preview="p", tokens=1)
    second = await api.offload("alice", convo(1, start=1), strategy="s", preview="p", tokens=1)
    assert offload_ref(first.offload_id) == offload_ref(second.offload_id) == "abcdef12"
    with pytest.raises(AmbiguousOffloadRefError) as info:
        await api.reload("alice", "abcdef12")
    assert isinstance(info.value, OffloadNotFoundError)
    assert info.value.offload_ids == (first.offload_id, second.offload_id)
    assert first.offload_id in str(info.value) and "whole id" in str(info.value)
    assert (await api.reload("alice", second.offload_id)).messages == second.messages


async def test_offload_validates_arguments(api: StoreAPI) -> None:
    with pytest.raises(ValueError, match="no messages"):
        await api.offload("t", [], strategy="s", preview="p", tokens=1)
    with pytest.raises(ValueError, match="strategy"):
        await api.offload("t", convo(1), strategy="", preview="p", tokens=1)
    with pytest.raises(ValueError, match="tokens"):
        await api.offload("t", convo(1), strategy="s", preview="p", tokens=-1)
    # a set is not JSON: kept through LangGraph's serializer (issue 13), not an error
    rec = await api.offload("t", convo(1), strategy="s", preview="p", tokens=1, extra={"x": {1, 2}})
    assert [r.extra for r in await api.list_offloads("t")] == [{"x": {1, 2}}] and rec.offload_id


# --- events ------------------------------------------------------------------------------------
async def test_events_are_ordered_by_seq(api: StoreAPI) -> None:
    keys = []
    for i in range(12):
        keys.append(
            await api.record_event(
                "t", {"strategy": f"s{i}", "tokens_before": 1000 - i, "info": {"n": [i]}}
            )
        )
    assert len(set(keys)) == 12
    events = await api.list_events("t")
    assert [e.seq for e in events] == list(range(12))
    assert [e.strategy for e in events] == [f"s{i}" for i in range(12)]
    assert events[3].info == {"n": [3]} and events[3].tokens_before == 997
    assert events[3].data == {"strategy": "s3", "tokens_before": 997, "info": {"n": [3]}}
    assert all(isinstance(e.ts, float) for e in events)
    assert await api.list_events("other") == []


async def test_events_are_records(api: StoreAPI) -> None:
    await api.record_event(
        "t", {"strategy": "offload_large", "tokens_before": 900, "tokens_after": 300, "x": 1}
    )
    await api.record_event("t", {"kind": "calibration", "strategy": "calibration"})
    await api.record_event("t", {"note": "no strategy, no counts"})
    first, second, third = await api.list_events("t")
    assert all(isinstance(e, EventRecord) for e in (first, second, third))
    assert (first.strategy, first.kind, first.tokens_before, first.tokens_after) == (
        "offload_large",
        "compression",
        900,
        300,
    )
    assert first.x == 1 and first.data["x"] == 1  # the other fields: attributes and data
    assert first.to_dict() == {**first.data, "seq": 0, "ts": first.ts}
    assert (second.kind, second.tokens_before, third.strategy) == ("calibration", None, "")
    with pytest.raises(AttributeError, match="no field 'missing'"):
        _ = third.missing


def test_dict_access_to_events_still_works_and_warns() -> None:
    store = OffloadStore()
    store.record_event("t", {"strategy": "fifo", "tokens_after": 10})
    (event,) = store.list_events("t")
    with pytest.deprecated_call(match="event.strategy"):
        assert event["strategy"] == "fifo"
    with pytest.deprecated_call():
        assert event.get("tokens_after") == 10 and event.get("absent", 3) == 3
    with pytest.deprecated_call():
        assert "seq" in event and event["seq"] == 0
    with pytest.deprecated_call():
        assert dict(event.items()) == event.to_dict()


def test_offload_record_id_is_a_deprecated_alias_of_offload_id() -> None:
    store = OffloadStore()
    record = store.offload("t", [HumanMessage("x", id="m1")], strategy="s", preview="p", tokens=1)
    with pytest.deprecated_call(match="offload_id"):
        assert record.id == record.offload_id


def test_the_deprecated_names_are_marked_for_type_checkers() -> None:
    """PEP 702's ``@deprecated`` (``__deprecated__``) lets checkers and IDEs flag
    ``record.id`` and dict access to events; the run-time warnings stay the ones above."""
    assert "offload_id" in OffloadRecord.id.fget.__deprecated__
    for name in ("__getitem__", "get", "__contains__", "keys", "items"):
        assert "deprecated" in getattr(EventRecord, name).__deprecated__, name
    assert not hasattr(EventRecord.to_dict, "__deprecated__")


async def test_event_validation(api: StoreAPI) -> None:
    with pytest.raises(ValueError, match="seq"):
        await api.record_event("t", {"seq": 3})
    with pytest.raises(TypeError, match="dict"):
        await api.record_event("t", ["not", "a", "dict"])  # type: ignore[arg-type]
    assert await api.list_events("t") == []


# --- thread ids ----------------------------------------------------------------------------------
async def test_thread_ids_with_dots_slashes_and_unicode(api: StoreAPI) -> None:
    threads = ["a.b", "a%2Eb", "a/b", "a", "線程-🧵", "..", "%", "user@example.com/run.1", " "]
    for i, thread in enumerate(threads):
        await api.append_history(thread, convo(i + 1, tag=f"{i}-"))
        await api.record_event(thread, {"thread": thread})
        await api.offload(thread, convo(1), strategy="s", preview=thread, tokens=1)
    for i, thread in enumerate(threads):
        assert ids_of(await api.get_history(thread)) == [f"{i}-{j}" for j in range(i + 1)]
        assert [e.thread for e in await api.list_events(thread)] == [thread]
        assert [r.preview for r in await api.list_offloads(thread)] == [thread]
    for bad in ["", None, 3]:
        with pytest.raises(ValueError, match="thread_id"):
            await api.append_history(bad, convo(1))  # type: ignore[arg-type]


@given(st.text(min_size=1))
def test_thread_id_encoding_is_reversible(thread_id: str) -> None:
    label = encode_thread_id(thread_id)
    assert label and "." not in label and "\x00" not in label
    assert decode_thread_id(label) == thread_id


# --- persistence (SQLite file) -------------------------------------------------------------------
def test_sqlite_file_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "ctx.db"
    backend = open_sqlite(path)
    store = OffloadStore(backend)
    store.append_history("t.1", convo(5))
    record = store.offload("t.1", every_message_type(), strategy="s", preview="p", tokens=9)
    store.record_event("t.1", {"n": 0})
    backend.conn.close()

    backend = open_sqlite(path)
    store = OffloadStore(backend)
    assert ids_of(store.get_history("t.1")) == [f"m{i}" for i in range(5)]
    assert store.reload("t.1", record.offload_id) == record
    assert store.append_history("t.1", convo(3, start=3)) == ["m5"]  # m3, m4 known
    assert [e.seq for e in store.get_history("t.1")] == list(range(6))
    store.record_event("t.1", {"n": 1})
    assert [(e.n, e.seq) for e in store.list_events("t.1")] == [(0, 0), (1, 1)]
    assert store.offload("t.1", convo(1), strategy="s", preview="p", tokens=1).seq == 1
    backend.conn.close()


async def test_async_sqlite_file_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "ctx.db")
    async with AsyncSqliteStore.from_conn_string(path) as backend:
        await backend.setup()
        store = OffloadStore(backend)
        await store.aappend_history("t", convo(4))
        record = await store.aoffload("t", convo(2), strategy="s", preview="p", tokens=2)
        await store.arecord_event("t", {"n": 0})
    async with aiosqlite.connect(path, isolation_level=None) as conn:
        backend = AsyncSqliteStore(conn)
        await backend.setup()
        store = OffloadStore(backend)
        assert await store.ahistory_count("t") == 4
        assert await store.aappend_history("t", convo(2, start=3)) == ["m4"]
        assert [e.seq for e in await store.aget_history("t")] == list(range(5))
        assert await store.areload("t", record.offload_id) == record
        await store.arecord_event("t", {"n": 1})
        assert [e.seq for e in await store.alist_events("t")] == [0, 1]


# --- the BaseStore surface ----------------------------------------------------------------------
def test_wrap_and_constructor() -> None:
    store = OffloadStore()
    assert isinstance(store, BaseStore) and isinstance(store.backend, InMemoryStore)
    assert store.prefix == "autocontext"
    assert store.namespace("a.b", "history") == ("autocontext", "a%2Eb", "history")
    assert OffloadStore.wrap(store) is store
    other = OffloadStore.wrap(store, prefix="app2")
    assert other is not store and other.backend is store.backend and other.prefix == "app2"
    backend = InMemoryStore()
    wrapped = OffloadStore.wrap(backend)
    assert isinstance(wrapped, OffloadStore) and wrapped.backend is backend
    assert isinstance(OffloadStore.wrap(None).backend, InMemoryStore)
    for bad in ["", " ", "a.b", "a/b", "langgraph"]:
        with pytest.raises(ValueError, match="prefix"):
            OffloadStore(prefix=bad)
    with pytest.raises(TypeError, match="BaseStore"):
        OffloadStore({})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        store.namespace("t", "nope")  # type: ignore[arg-type]


def test_prefixes_separate_apps_on_one_backend() -> None:
    backend = InMemoryStore()
    one, two = OffloadStore(backend, prefix="one"), OffloadStore(backend, prefix="two")
    one.append_history("t", convo(2))
    assert two.get_history("t") == [] and len(one.get_history("t")) == 2


def test_generic_operations_and_config_pass_through(backend: BaseStore) -> None:
    store = OffloadStore(backend, prefix=unique_prefix())
    store.put(("user-data", "x"), "k", {"v": 1})
    assert store.get(("user-data", "x"), "k").value == {"v": 1}  # type: ignore[union-attr]
    assert backend.get(("user-data", "x"), "k").value == {"v": 1}  # type: ignore[union-attr]
    assert [i.key for i in store.search(("user-data",))] == ["k"]
    store.delete(("user-data", "x"), "k")
    assert backend.get(("user-data", "x"), "k") is None
    assert store.supports_ttl == backend.supports_ttl
    assert store.ttl_config == backend.ttl_config
    store.append_history("t", convo(1))
    assert (store.prefix, "t", "history") in store.list_namespaces(prefix=(store.prefix,))


def test_sqlite_ttl_config_passes_through(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "ttl.db", check_same_thread=False, isolation_level=None)
    backend = SqliteStore(conn, ttl={"default_ttl": 5, "refresh_on_read": True})
    backend.setup()
    store = OffloadStore(backend)
    assert store.supports_ttl is True and store.ttl_config == {
        "default_ttl": 5,
        "refresh_on_read": True,
    }
    store.put(("user",), "k", {"v": 1})  # generic writes follow the backend's TTL config
    store.append_history("t", convo(1))  # the helpers' items never expire
    rows = dict(conn.execute("SELECT key, ttl_minutes FROM store").fetchall())
    assert rows["k"] == 5 and rows["m0"] is None
    conn.close()


async def test_sync_sqlite_store_works_through_async_api(tmp_path: Path) -> None:
    backend = open_sqlite(tmp_path / "s.db")
    store = OffloadStore(backend)
    assert await store.aappend_history("t", convo(3)) == ["m0", "m1", "m2"]
    await store.aput(("user",), "k", {"v": 1})
    assert (await store.aget(("user",), "k")).value == {"v": 1}  # type: ignore[union-attr]
    assert ids_of(await store.aget_history("t")) == ["m0", "m1", "m2"]
    assert ids_of(store.get_history("t")) == ["m0", "m1", "m2"]
    backend.conn.close()


@pytest.mark.parametrize("use_async", [False, True])
async def test_deleting_a_thread_takes_one_round_trip_per_page(
    tmp_path: Path, use_async: bool
) -> None:
    """``adelete_thread`` on a sync ``SqliteStore`` raised NotImplementedError (it called
    the backend's async methods directly), and both twins made one backend call per item
    (3,365 calls for a 3,357-item thread: a minute on a remote Postgres)."""
    calls: list[int] = []

    class Counting(SqliteStore):
        def batch(self, ops: Any) -> list[Any]:
            ops = list(ops)
            calls.append(len(ops))
            return super().batch(ops)

    conn = sqlite3.connect(tmp_path / "d.db", check_same_thread=False, isolation_level=None)
    backend = Counting(conn)
    backend.setup()
    store = OffloadStore(backend)
    store.append_history("t", convo(1_200))
    store.append_history("other", convo(3))
    calls.clear()
    deleted = await store.adelete_thread("t") if use_async else store.delete_thread("t")
    round_trips = len(calls)
    assert deleted >= 1_200
    assert store.history_count("t") == 0 and store.history_count("other") == 3
    assert (
        round_trips <= 2 * (deleted // store.max_batch_ops + 1) + 1
    )  # search, delete; last search
    conn.close()


def test_text_is_indexed_when_the_backend_has_a_semantic_index() -> None:
    backend = InMemoryStore(index={"dims": 16, "embed": DeterministicFakeEmbedding(size=16)})
    store = OffloadStore(backend)
    store.append_history("t", [HumanMessage("the parser crashes on tabs", id="a")])
    store.record_event("t", {"kind": "x"})
    hits = store.search(store.namespace("t", "history"), query="parser crashes on tabs")
    assert [h.key for h in hits] == ["a"] and hits[0].score is not None
    # Only "text" is embedded (not the serialized message), and events are not embedded.
    assert list(backend._vectors[store.namespace("t", "history")]["a"]) == ["text"]
    assert not backend._vectors.get(store.namespace("t", "events"))


async def test_sync_and_async_twins_agree() -> None:
    stores = OffloadStore(InMemoryStore()), OffloadStore(InMemoryStore())
    batches = [convo(3), [*convo(2, start=2), AIMessage("edit", id="m0")], convo(1, start=9)]
    sync_new = [stores[0].append_history("t", b) for b in batches]
    async_new = [await stores[1].aappend_history("t", b) for b in batches]
    assert sync_new == async_new
    views = []
    for s, is_async in zip(stores, (False, True), strict=True):
        api = StoreAPI(s, is_async)
        record = await api.offload("t", convo(2), strategy="s", preview="p", tokens=3)
        await api.record_event("t", {"a": 1})
        views.append(
            (
                [(e.seq, e.id, dump_message(e.message)) for e in await api.get_history("t")],
                await api.history_count("t"),
                (await api.reload("t", record.offload_id)).messages,
                [e.a for e in await api.list_events("t")],
            )
        )
    assert views[0] == views[1]


def _record_answer_record(record: Any, answer: Any, store: BaseStore) -> Any:
    """A graph that records the history, answers, and records again."""
    graph = StateGraph(MessagesState)
    graph.add_node("record_in", record)
    graph.add_node("answer", answer)
    graph.add_node("record_out", record)
    graph.add_edge(START, "record_in")
    graph.add_edge("record_in", "answer")
    graph.add_edge("answer", "record_out")
    graph.add_edge("record_out", END)
    return graph.compile(checkpointer=InMemorySaver(), store=store)


# --- inside a LangGraph graph ------------------------------------------------------------------------
def _thread_id() -> str:
    return str(get_config()["configurable"]["thread_id"])


def test_as_the_store_of_a_compiled_graph(backend: BaseStore) -> None:
    offload_store = OffloadStore(backend, prefix=unique_prefix())
    seen: list[bool] = []

    def record(state: MessagesState) -> dict[str, Any]:
        store = get_store()
        seen.append(OffloadStore.wrap(store, prefix=offload_store.prefix) is offload_store)
        assert isinstance(store, OffloadStore)
        store.append_history(_thread_id(), state["messages"])
        return {}

    def answer(state: MessagesState, runtime: Runtime[None]) -> dict[str, Any]:
        store = runtime.store
        assert isinstance(store, OffloadStore)
        thread = _thread_id()
        n = store.history_count(thread)
        rec = store.offload(thread, state["messages"][-1:], strategy="s", preview="p", tokens=1)
        store.record_event(thread, {"history": n})
        return {"messages": [AIMessage(f"history has {n}; offload {rec.offload_id}")]}

    app = _record_answer_record(record, answer, offload_store)

    config: RunnableConfig = {"configurable": {"thread_id": "session.42"}}
    app.invoke({"messages": [HumanMessage("hi")]}, config)
    state = app.invoke({"messages": [HumanMessage("again")]}, config)

    assert all(seen) and len(seen) == 4
    messages = state["messages"]
    assert [m.content.split(";")[0] for m in messages if isinstance(m, AIMessage)] == [
        "history has 1",
        "history has 3",
    ]
    history = offload_store.get_history("session.42")
    assert [e.id for e in history] == [m.id for m in messages]
    assert [e.message for e in history] == messages
    offload_id = messages[-1].content.rsplit("offload ", 1)[1]
    assert offload_store.reload("session.42", offload_id).messages == (messages[2],)
    assert [e.history for e in offload_store.list_events("session.42")] == [1, 3]


async def test_as_the_store_of_an_async_graph(abackend: BaseStore) -> None:
    offload_store = OffloadStore(abackend, prefix=unique_prefix())

    async def record(state: MessagesState) -> dict[str, Any]:
        store = OffloadStore.wrap(get_store(), prefix=offload_store.prefix)
        assert store is offload_store
        await store.aappend_history(_thread_id(), state["messages"])
        return {}

    async def answer(state: MessagesState, runtime: Runtime[None]) -> dict[str, Any]:
        store = runtime.store
        assert isinstance(store, OffloadStore)
        n = await store.ahistory_count(_thread_id())
        await store.arecord_event(_thread_id(), {"history": n})
        return {"messages": [AIMessage(f"history has {n}")]}

    app = _record_answer_record(record, answer, offload_store)
    config: RunnableConfig = {"configurable": {"thread_id": "a/b"}}
    await app.ainvoke({"messages": [HumanMessage("hi")]}, config)
    state = await app.ainvoke({"messages": [HumanMessage("again")]}, config)
    history = await offload_store.aget_history("a/b")
    assert [e.message for e in history] == state["messages"]
    assert [e.history for e in await offload_store.alist_events("a/b")] == [1, 3]


# --- property: history == first occurrences, in order ---------------------------------------------
_batches = st.lists(
    st.lists(st.tuples(st.integers(0, 15), st.text(max_size=8)), max_size=8), max_size=10
)


def _msgs(batch: list[tuple[int, str]]) -> list[BaseMessage]:
    return [(HumanMessage if i % 2 else AIMessage)(content=text, id=f"id-{i}") for i, text in batch]


def _versions(batches: list[list[tuple[int, str]]]) -> list[tuple[str, str, bool]]:
    """``(message id, content, first)`` of what the history holds: each id's first
    occurrence in a batch, appended when the id is new or its content is new for it."""
    held: dict[str, set[str]] = {}
    out = []
    for batch in batches:
        first: dict[str, str] = {}
        for i, text in batch:
            first.setdefault(f"id-{i}", text)
        for mid, text in first.items():
            if text not in held.setdefault(mid, set()):
                out.append((mid, text, not held[mid]))
                held[mid].add(text)
    return out


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=_batches)
def test_property_history_is_each_content_of_each_id_once_in_order(
    kind: str, batches: list[list[tuple[int, str]]]
) -> None:
    if kind == "memory":
        backend: BaseStore = InMemoryStore()
        conn = None
    else:
        conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        backend = SqliteStore(conn)
        backend.setup()
    store = OffloadStore(backend)
    twin = OffloadStore(InMemoryStore())
    for batch in batches:
        new = store.append_history("t", _msgs(batch))
        assert new == asyncio.run(twin.aappend_history("t", _msgs(batch)))
    expected = _versions(batches)
    for s in (store, twin):
        entries = s.get_history("t")
        assert [
            (e.version_of or e.id, e.message.content, e.version_of is None) for e in entries
        ] == (expected)
        assert all(e.message.id == e.id for e in entries)  # no id twice
        assert [e.seq for e in entries] == list(range(len(expected)))
        assert s.history_count("t") == len(expected)
    if conn is not None:
        conn.close()


#: More sessions than a fixed set of hash-striped locks could keep apart (64 stripes
#: made two sessions share a lock about 1 time in 64, and 100 always).
MANY_SESSIONS = 100


def test_every_session_holds_its_working_lock_at_once() -> None:
    """The working lock (held by the chat history across a compression, summarizer
    call included) of one session never makes another session wait: a hundred
    sessions all hold theirs at the same moment, on one backend and two wrappers."""
    backend = InMemoryStore()
    stores = [OffloadStore(backend), OffloadStore(backend)]
    inside = threading.Barrier(MANY_SESSIONS, timeout=10)

    def hold(i: int) -> None:
        with stores[i % 2].working_lock(f"session-{i}"):
            inside.wait()  # BrokenBarrierError when some session could not get in

    with ThreadPoolExecutor(MANY_SESSIONS) as pool:
        list(pool.map(hold, range(MANY_SESSIONS)))


async def test_every_session_holds_its_working_lock_at_once_async() -> None:
    store = OffloadStore(InMemoryStore())
    inside = asyncio.Barrier(MANY_SESSIONS)

    async def hold(i: int) -> None:
        async with store.aworking_lock(f"session-{i}"):
            await inside.wait()

    await asyncio.wait_for(asyncio.gather(*(hold(i) for i in range(MANY_SESSIONS))), 10)


async def test_one_sessions_working_lock_still_excludes_its_writers() -> None:
    """Control: the same session's second writer waits for the first (sync and async
    holders of one backend exclude each other), and the lock is free again after."""
    backend = InMemoryStore()
    store, twin = OffloadStore(backend), OffloadStore(backend)
    entered = asyncio.Event()

    async def second() -> None:
        async with twin.aworking_lock("s"):
            entered.set()

    with store.working_lock("s"):
        waiter = asyncio.ensure_future(second())
        await asyncio.sleep(0.05)
        assert not entered.is_set()
    await asyncio.wait_for(waiter, 5)
    assert entered.is_set()
    with store.working_lock("s"):  # released by both
        pass


def test_an_async_waiter_for_a_lock_sleeps_until_the_release_wakes_it() -> None:
    """A coroutine waiting for a thread's lock that a sync caller holds (the chat
    history's working lock, held across a summarizer call: seconds) polled it every
    millisecond: its event loop woke a thousand times a second for nothing. It sleeps
    until the release wakes it: here the holder lets go once the loop woke 50 times,
    or after half a second: the loop woke a few times (53 when polled)."""
    import selectors

    wakes = threading.Condition()
    count = 0

    class CountingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
        def select(self, timeout: float | None = None) -> Any:
            nonlocal count
            with wakes:
                count += 1
                wakes.notify_all()
            return super().select(timeout)

    store = OffloadStore(InMemoryStore())
    held, waiting = threading.Event(), threading.Event()

    def holder() -> None:
        with store.working_lock("s"):
            held.set()
            waiting.wait(timeout=10)
            with wakes:
                start = count
                wakes.wait_for(lambda: count - start >= 50, timeout=0.5)

    async def waiter() -> int:
        waiting.set()
        async with store.aworking_lock("s"):
            return count

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(timeout=10)
    loop = asyncio.SelectorEventLoop(CountingSelector())
    try:
        woke = loop.run_until_complete(waiter())
    finally:
        loop.close()
        thread.join(timeout=10)
    assert woke < 10


def _loop_thread() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """An event loop running in its own thread (a second server, a worker's loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return loop, thread


def _stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def test_a_released_lock_wakes_the_waiters_of_every_loop_past_cancelled_and_failed_ones() -> None:
    """A thread's lock shared by a sync caller (a worker thread) and coroutines on two
    other event loops (two servers): a waiter cancelled while waiting (a wait_for
    timeout) never holds it, a holder whose locked section raises lets it go, and
    every remaining waiter of every loop gets in once the sync holder lets go (no
    wake-up lost to the cancelled one)."""
    store = OffloadStore(InMemoryStore())
    loops = [_loop_thread(), _loop_thread()]
    held, release = threading.Event(), threading.Event()
    order: list[str] = []

    def holder() -> None:
        with store.working_lock("s"):
            held.set()
            release.wait(timeout=10)
            order.append("sync")

    async def enter(name: str, fail: bool = False) -> None:
        async with store.aworking_lock("s"):
            order.append(name)
            if fail:
                raise ValueError(name)

    sync = threading.Thread(target=holder)
    sync.start()
    held.wait(timeout=10)
    try:
        # a waiter cancelled while the sync caller holds the lock
        doomed = asyncio.run_coroutine_threadsafe(enter("cancelled"), loops[0][0])
        failing = asyncio.run_coroutine_threadsafe(enter("failing", fail=True), loops[0][0])
        others = [asyncio.run_coroutine_threadsafe(enter(f"b{i}"), loops[1][0]) for i in range(3)]
        for loop, _ in loops:  # each waiter has run up to the lock, and waits there
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(timeout=10)
        assert doomed.cancel()  # cancelled on its loop, where it waits
        release.set()
        with pytest.raises(ValueError, match="failing"):
            failing.result(timeout=10)
        for f in others:
            f.result(timeout=10)
        assert doomed.cancelled()
    finally:
        release.set()
        sync.join(timeout=10)
        for loop, thread in loops:
            _stop(loop, thread)
    assert order[0] == "sync" and sorted(order[1:]) == ["b0", "b1", "b2", "failing"]
    with store.working_lock("s"):  # free again: nobody kept it
        pass


def test_a_waiter_whose_loop_closed_keeps_no_other_waiter_from_the_lock() -> None:
    """A coroutine waiting for a thread's lock when its event loop is closed (a worker
    that ran its own loop) never runs again: the release still wakes the waiters of
    the other loops."""
    store = OffloadStore(InMemoryStore())
    dead_loop = asyncio.new_event_loop()
    live = _loop_thread()
    got: list[str] = []

    async def enter(name: str) -> None:
        async with store.aworking_lock("s"):
            got.append(name)

    try:
        with store.working_lock("s"):
            abandoned = dead_loop.create_task(enter("abandoned"))
            dead_loop.run_until_complete(asyncio.sleep(0))  # it waits for the lock
            dead_loop.close()  # not cancelled: its loop is simply gone
            waiting = asyncio.run_coroutine_threadsafe(enter("live"), live[0])
        waiting.result(timeout=10)
    finally:
        _stop(*live)
    assert got == ["live"] and not abandoned.done()
    abandoned.get_coro().close()  # what the collector would do, here rather than anywhere


def test_one_threads_lock_excludes_every_holder_of_threads_and_loops_under_cancellation() -> None:
    """Worker threads (sync) and coroutines of two event loops take the locks of three
    threads at random, with wait_for timeouts cancelling waiters and holders and
    locked sections that raise: never two holders of one lock at once, nothing hangs,
    and each lock is free after."""
    import random

    store = OffloadStore(InMemoryStore())
    keys = ["k0", "k1", "k2"]
    inside = dict.fromkeys(keys, 0)
    overlaps: list[str] = []

    def enter(key: str) -> None:
        inside[key] += 1
        if inside[key] > 1:
            overlaps.append(key)

    def worker(seed: int) -> None:
        rnd = random.Random(seed)
        for _ in range(300):
            key = rnd.choice(keys)
            with contextlib.suppress(ValueError), store.working_lock(key):
                enter(key)
                inside[key] -= 1
                if rnd.random() < 0.1:
                    raise ValueError(key)

    async def coroutine(rnd: random.Random) -> None:
        for _ in range(100):
            key = rnd.choice(keys)

            async def held(key: str) -> None:
                async with store.aworking_lock(key):
                    enter(key)
                    try:
                        await asyncio.sleep(0)
                    finally:
                        inside[key] -= 1
                    if rnd.random() < 0.1:
                        raise ValueError(key)

            with contextlib.suppress(ValueError, TimeoutError):
                await asyncio.wait_for(held(key), rnd.choice([1e-5, 1e-4, 10]))

    def loop_worker(seed: int) -> None:
        async def main() -> None:
            await asyncio.gather(*(coroutine(random.Random(seed * 10 + i)) for i in range(4)))

        asyncio.run(main())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    threads += [threading.Thread(target=loop_worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not overlaps
    for key in keys:
        with store.working_lock(key):  # free again
            pass


def test_a_slow_writer_of_one_thread_blocks_no_other_threads_writer() -> None:
    """Every other thread's append lands while one thread's history write is held."""
    store = OffloadStore()
    pool = ThreadPoolExecutor(8)
    try:
        with store._locked("t0", "history"):
            writes = [
                pool.submit(store.append_history, f"t{i}", convo(1))
                for i in range(1, MANY_SESSIONS)
            ]
            _, waiting = concurrent.futures.wait(writes, timeout=10)
        assert not waiting, f"{len(waiting)} writers of other threads waited for t0"
    finally:
        pool.shutdown()


def test_values_json_cannot_hold_are_stored_faithfully_never_a_dead_thread() -> None:
    """Issue 13: an artifact with datetime/Decimal/bytes, or a datetime in
    additional_kwargs, raised "not JSON-serializable" on every later turn. They are
    encoded with LangGraph's checkpoint serializer and come back equal; what even that
    cannot encode is kept as a marker."""
    import datetime
    import decimal

    from langchain_core.messages import HumanMessage, ToolMessage

    from langchain_autocontext.store import SERIALIZED_KEY

    when = datetime.datetime(2024, 5, 7, 13, 56, tzinfo=datetime.UTC)
    artifact = {"when": when, "amount": decimal.Decimal("12.50"), "raw": b"\x00\xff", "n": 3}
    store = OffloadStore(InMemoryStore())
    msgs = [
        HumanMessage("hi", id="u", additional_kwargs={"sent_at": when}),
        ToolMessage("42 rows", tool_call_id="c1", id="t", artifact=artifact),
        HumanMessage("odd", id="o", additional_kwargs={"thing": object()}),
    ]
    store.append_history("th", msgs)
    back = {e.id: e.message for e in store.iter_history("th")}
    assert back["u"].additional_kwargs["sent_at"] == when
    assert back["t"].artifact == artifact
    marker = back["o"].additional_kwargs["thing"]
    assert marker[SERIALIZED_KEY] == "unserializable" and marker["type"] == "object"
    oid = store.offload("th", [msgs[1]], strategy="test", preview="42 rows", tokens=3)
    assert store.reload("th", oid.offload_id).messages[0].artifact == artifact


async def test_two_engines_sharing_a_store_never_hand_out_one_seq_twice(tmp_path: Path) -> None:
    """An agent and its subagent, each with its own AutoContext on one store, archiving
    into one thread at once: each engine's store wrapper had its own locks, so both
    read the same counter (50 of 100 messages shared a seq, history_count said 50)."""
    from langchain_autocontext import AutoContext

    async with AsyncSqliteStore.from_conn_string(str(tmp_path / "two.db")) as backend:
        await backend.setup()
        parent, sub = (AutoContext(max_tokens=8_000, store=backend) for _ in range(2))

        async def writer(ac: AutoContext, tag: str) -> None:
            for k in range(40):
                await ac.acompress([HumanMessage(f"{tag} {k}", id=f"{tag}-{k}")], thread_id="t")

        await asyncio.gather(writer(parent, "parent"), writer(sub, "sub"))
        store = OffloadStore(backend)
        seqs = [e.seq for e in await store.aget_history("t")]
        assert sorted(seqs) == list(range(80))
        assert await store.ahistory_count("t") == 80


async def test_a_cancelled_write_keeps_its_lock_until_it_lands() -> None:
    """A sync-only backend runs each batch in a worker thread; a caller cancelled
    mid-write released the thread's lock at once, the retry wrote, and the abandoned
    write landed afterwards with the same seq."""
    from langchain_autocontext import AutoContext

    class SlowSyncStore(InMemoryStore):
        slow_once = True

        def batch(self, ops: Any) -> list[Any]:
            ops = list(ops)
            slow = [o for o in ops if isinstance(o, PutOp) and o.namespace[-1] == "history"]
            if self.slow_once and slow:
                self.slow_once = False
                time.sleep(0.3)
            return super().batch(ops)

        async def abatch(self, ops: Any) -> list[Any]:
            raise NotImplementedError

    def msg(k: int) -> BaseMessage:
        return HumanMessage(f"m {k}", id=f"m{k}") if k % 2 == 0 else AIMessage(f"r {k}", id=f"m{k}")

    backend = SlowSyncStore()
    ac = AutoContext(max_tokens=8_000, store=backend)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(ac.acompress([msg(0), msg(1)], thread_id="x"), 0.05)
    await ac.acompress([msg(0), msg(1), msg(2)], thread_id="x")
    await asyncio.sleep(0.4)  # an abandoned write would land now
    await ac.acompress([msg(k) for k in range(4)], thread_id="x")
    history = OffloadStore(backend).get_history("x")
    assert [(e.seq, e.id) for e in history] == [(k, f"m{k}") for k in range(4)]


def test_an_offload_record_reads_at_a_glance() -> None:
    """Printing a record dumped every original message (194 ids and their contents)."""
    store = OffloadStore(InMemoryStore())
    record = store.offload("t", convo(40), strategy="fifo", preview="p" * 500, tokens=9_999)
    text = repr(record)
    assert len(text) < 250 and record.offload_id in text and "messages=40" in text
    assert "9,999" in text


def test_a_history_entry_reads_at_a_glance() -> None:
    """Printing ``store.get_history(thread)`` dumped every message whole (409 KB for one
    mini-swe-agent run): an entry shows its position, id, type and the start of its text."""
    from langchain_core.messages import ToolMessage

    store = OffloadStore(InMemoryStore())
    store.append_history("t", [ToolMessage("log line\n" * 5_000, tool_call_id="c1", id="m1")])
    [entry] = store.get_history("t")
    text = repr(entry)
    assert len(text) < 200 and "'m1'" in text and "seq=0" in text and "'tool'" in text


# --- the package's ids under seeded_ids ------------------------------------------------------
async def test_seeded_ids_are_one_sequence_sync_and_async_and_random_without(
    tmp_path: Path,
) -> None:
    """``seeded_ids`` (what makes a replay reproducible) on a ``SqliteStore``, whose async
    calls run on the store's worker threads: offload ids, event keys and the engine's
    offloads are the same sequence sync and async, valid uuid4s; outside the block the
    ids are random again."""
    from _builders import coding_run

    from langchain_autocontext import AutoContext, AutoContextConfig

    backend = open_sqlite(tmp_path / "ids.db")
    store = OffloadStore(backend)
    msgs = [HumanMessage("original", id="m1")]
    kw: dict[str, Any] = {"strategy": "test", "preview": "p", "tokens": 3}
    run = coding_run(30, output_lines=80)
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)

    def offloaded(events: Sequence[dict[str, Any]]) -> list[str]:
        return [oid for e in events for oid in e.get("offload_ids") or ()]

    try:
        with seeded_ids(5):
            sync = [store.offload("s", msgs, **kw).offload_id for _ in range(3)]
            sync.append(store.record_event("s", {"k": 1}))
            sync += offloaded(ac.compress(run, thread_id="cs").events)
        with seeded_ids(5):
            asyn = [(await store.aoffload("a", msgs, **kw)).offload_id for _ in range(3)]
            asyn.append(await store.arecord_event("a", {"k": 1}))
            asyn += offloaded((await ac.acompress(run, thread_id="ca")).events)
        assert sync == asyn and len(sync) > 5 and len(set(sync)) == len(sync)
        assert all(UUID4_RE.match(i) for i in sync[:3] + sync[4:])
        free = [store.offload("s", msgs, **kw).offload_id, new_id()]
        free += [(await store.aoffload("a", msgs, **kw)).offload_id, new_id()]
        assert all(UUID4_RE.match(i) for i in free) and not set(free) & set(sync)
        assert len(set(free)) == len(free)
    finally:
        backend.conn.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_repeated_seeded_sequence_never_overwrites_an_offload(mode: str) -> None:
    """A replay run twice into one store and thread (``autocontext replay --append``)
    draws the same seeded ids: the second run's offloads overwrote the first's, which
    its events name (half the offloads ``--append`` should add were missing). An id
    already taken in the thread is drawn again."""
    store = OffloadStore(InMemoryStore())
    kw: dict[str, Any] = {"strategy": "test", "preview": "p", "tokens": 3}

    async def offload(text: str) -> str:
        msgs = [HumanMessage(text, id=text)]
        if mode == "sync":
            return store.offload("t", msgs, **kw).offload_id
        return (await store.aoffload("t", msgs, **kw)).offload_id

    with seeded_ids(0):
        first = [await offload("first"), await offload("first, again")]
    with seeded_ids(0):
        second = [await offload("second"), await offload("second, again")]
    assert len(set(first + second)) == 4 and UUID4_RE.match(second[0])
    assert [store.reload("t", oid).messages[0].content for oid in first + second] == [
        "first",
        "first, again",
        "second",
        "second, again",
    ]
