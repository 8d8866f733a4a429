"""Streams stay clean, and summarizer calls of independent threads run concurrently.

The summarizer is an :class:`LLMSummarizer` over a *streaming* fake chat model whose
every summary starts with a marker word; the agent's model streams its own words.
Through every surface, the user's ``stream_mode="messages"`` and
``astream_events(version="v2")`` output carries the agent's tokens and never a token,
a chunk or a chat-model event of the summarizer. (The compressed context the
compression step writes to the state is a state update like any other: in
``stream_mode="messages"`` its new messages come whole, from the compression node,
marked with ``additional_kwargs["autocontext"]``; that is checked too.)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from _builders import build_surface, script_model, user_turn
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessageChunk
from langgraph.config import get_config

from langchain_autocontext import ExtractiveSummarizer, LLMSummarizer, SummaryRequest
from langchain_autocontext.messages import marker
from langchain_autocontext.store import OffloadStore

MARK = "ZQXSUMMARY"
SUMMARY = f"{MARK} the agent ran make checks on module_3 and module_4; all passed, no errors"
ROUNDS, STEPS = 3, 6
GRAPHS = ("middleware", "react", "node")


def summarizer_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=itertools.cycle([AIMessage(SUMMARY)]))


def llm_summarizer(*, hide: bool = True) -> tuple[LLMSummarizer, GenericFakeChatModel]:
    model = summarizer_model()
    return LLMSummarizer(model, retries=0, hide_from_stream=hide), model


def summarizer_calls(surface) -> int:
    events = OffloadStore.wrap(surface.store).list_events(surface.thread)
    return sum(e.data.get("summarizer_calls", 0) for e in events)


def summaries_reached_the_model(surface) -> bool:
    """The summaries were written (the model was shown them), just never streamed."""
    return any(MARK in str(m.content) for sent in surface.model.seen for m in sent)


def graph_input(surface, r: int) -> dict[str, Any]:
    return surface._graph_input(r)


def chunk_text(chunk: Any) -> str:
    content = getattr(chunk, "content", "")
    return content if isinstance(content, str) else str(content)


# --- stream_mode="messages" ------------------------------------------------------------------
COMPRESSION_NODES = {"AutoContextMiddleware.before_model", "pre_model_hook", "autocontext"}


def check_messages_stream(surface, items: list[tuple[Any, dict[str, Any]]]) -> None:
    assert summarizer_calls(surface) > 0, "the summarizer never ran: the test proves nothing"
    assert summaries_reached_the_model(surface)
    chunks = [(c, m) for c, m in items if isinstance(c, BaseMessageChunk)]
    streamed = "".join(chunk_text(c) for c, _ in chunks)
    assert "round 2 finished after" in streamed  # the agent's own tokens do stream
    assert MARK not in streamed  # ... and no token of the summarizer
    assert not [m for _, m in items if "autocontext:summarizer" in (m.get("tags") or [])]
    for message, meta in items:
        if not isinstance(message, BaseMessageChunk) and not marker(message):
            # the model's view (tagged copies of the history) never reaches the stream:
            # its copies keep the state's ids, what it adds is marked
            assert not re.match(r"\[?\{?.{0,40}<[\w\"-]{4,} \d+/\d+/>", chunk_text(message)), meta
        if message.type == "remove":
            # the "remove every message" sentinel of a rewrite is the package's too: a UI
            # that skips the package's messages by their marker skips it
            assert marker(message) is not None, meta
        if MARK in chunk_text(message):
            # a summary can only arrive whole, as part of the compressed state update
            assert not isinstance(message, BaseMessageChunk)
            assert meta["langgraph_node"] in COMPRESSION_NODES
            assert marker(message) is not None


@pytest.mark.parametrize("kind", GRAPHS)
def test_messages_stream_has_agent_tokens_not_summarizer_tokens(kind: str) -> None:
    summarizer, _ = llm_summarizer()
    surface = build_surface(kind, script_model(STEPS), summarizer=summarizer)
    items: list[tuple[Any, dict[str, Any]]] = []
    for r in range(ROUNDS):
        items += surface.runner.stream(
            graph_input(surface, r), surface.config, stream_mode="messages"
        )
    check_messages_stream(surface, items)


@pytest.mark.parametrize("kind", GRAPHS)
async def test_async_messages_stream_has_agent_tokens_not_summarizer_tokens(kind: str) -> None:
    summarizer, _ = llm_summarizer()
    surface = build_surface(kind, script_model(STEPS), summarizer=summarizer)
    items: list[tuple[Any, dict[str, Any]]] = []
    for r in range(ROUNDS):
        async for item in surface.runner.astream(
            graph_input(surface, r), surface.config, stream_mode="messages"
        ):
            items.append(item)
    check_messages_stream(surface, items)


def test_a_summary_streams_as_the_state_keeps_it_not_as_the_view_shows_it() -> None:
    """With the metadata tags on, the ``pre_model_hook`` streamed each new summary in
    ``stream_mode="messages"`` as its tagged copy from ``llm_input_messages`` (the view:
    ``<d1e1 570/1023/>\n[Summary of …``), not as the state keeps it under the same id:
    LangGraph emits each message id once, the first it finds in the update, and the hook
    put the view before the compressed messages. A UI that shows the compaction saw the
    view's tag; the middleware and the node stream the summary clean."""
    from _builders import SURFACE_CONFIG_KW

    from langchain_autocontext import AutoContextConfig

    config = AutoContextConfig(**{**SURFACE_CONFIG_KW, "metadata_tags": True})
    surface = build_surface("react", script_model(STEPS), config=config)
    streamed = []
    for r in range(ROUNDS):
        for message, meta in surface.runner.stream(
            graph_input(surface, r), surface.config, stream_mode="messages"
        ):
            kind = (marker(message) or {}).get("kind", "")
            if meta["langgraph_node"] == "pre_model_hook" and kind.endswith("summary"):
                streamed.append(message)
    assert streamed, "no summary was written: the test proves nothing"
    history = OffloadStore.wrap(surface.store)
    for message in streamed:
        assert not re.match(r"<[\w\"-]{4,} \d+/\d+/>", chunk_text(message))
        stored = history.get_history_message(surface.thread, str(message.id))
        kept = stored.message if stored is not None else None
        state = surface.runner.get_state(surface.config).values["messages"]
        kept = kept or next((m for m in state if m.id == message.id), None)
        if kept is not None:
            assert chunk_text(kept) == chunk_text(message)


# --- astream_events(version="v2") ---------------------------------------------------------------
async def collect_events(surface, r: int) -> list[dict[str, Any]]:
    if surface.kind in GRAPHS:
        inp: Any = graph_input(surface, r)
        return [e async for e in surface.runner.astream_events(inp, surface.config, version="v2")]
    # chains: the caller runs the tool loop; collect the events of every call
    events: list[dict[str, Any]] = []
    msgs = [user_turn(r)]
    while msgs:
        inp = surface._chain_input(msgs)
        final = None
        async for e in surface.runner.astream_events(inp, surface.config, version="v2"):
            events.append(e)
            if e["event"] == "on_chat_model_end" and "autocontext:summarizer" not in e["tags"]:
                final = e["data"]["output"]
        msgs = surface._chain_output(final)
    return events


def stream_texts(events: list[dict[str, Any]]) -> str:
    return "".join(
        chunk_text(e["data"]["chunk"]) for e in events if e["event"] == "on_chat_model_stream"
    )


@pytest.mark.parametrize("kind", [*GRAPHS, "history", "lcel"])
async def test_astream_events_have_agent_tokens_not_summaries(kind: str) -> None:
    summarizer, _ = llm_summarizer()
    surface = build_surface(kind, script_model(STEPS), summarizer=summarizer)
    events: list[dict[str, Any]] = []
    for r in range(ROUNDS):
        events += await collect_events(surface, r)
    assert summarizer_calls(surface) > 0
    assert summaries_reached_the_model(surface)
    streamed = stream_texts(events)
    assert "round 2 finished after" in streamed
    assert MARK not in streamed
    # no event at all of the summarizer's model: not its start, its tokens or its end
    assert not [e for e in events if "autocontext:summarizer" in e.get("tags", [])]
    model_events = [e for e in events if e["event"].startswith("on_chat_model")]
    assert model_events
    assert not [e for e in model_events if MARK in str(e["data"].get("output", ""))]
    assert not [e for e in model_events if e["name"] == "autocontext_summarizer"]


async def test_the_check_sees_summaries_when_they_are_not_hidden() -> None:
    """Control: with ``hide_from_stream=False`` the same collection finds the summaries,
    so the clean-stream tests above can fail."""
    summarizer, _ = llm_summarizer(hide=False)
    surface = build_surface("middleware", script_model(STEPS), summarizer=summarizer)
    events: list[dict[str, Any]] = []
    for r in range(ROUNDS):
        events += await collect_events(surface, r)
    assert MARK in stream_texts(events)


# --- independent threads summarize concurrently -------------------------------------------------
class OverlapSummarizer(ExtractiveSummarizer):
    """Records which conversation threads are inside a summarizer call at once.

    The first call waits (bounded) for a call of *another* thread to start, so two
    threads that run concurrently are seen overlapping, and two that are serialized
    are not (the wait times out and nothing overlaps).
    """

    def __init__(self, wait: float = 10.0) -> None:
        super().__init__()
        self.concurrency = 1  # spans of one compression run one by one: only threads overlap
        self.wait = wait
        self.lock = threading.Lock()
        self.active: list[str] = []
        self.overlaps: set[frozenset[str]] = set()
        self.met = threading.Event()
        self.ameet: asyncio.Event | None = None
        self.calls = 0

    @staticmethod
    def thread() -> str:
        conf = get_config().get("configurable") or {}
        return str(conf.get("thread_id") or conf.get("session_id"))

    def _enter(self, thread: str) -> bool:
        with self.lock:
            self.calls += 1
            self.active.append(thread)
            others = {t for t in self.active if t != thread}
            if others:
                self.overlaps.add(frozenset({thread, *others}))
                self.met.set()
                if self.ameet is not None:
                    self.ameet.set()
            return not self.met.is_set()

    def _exit(self, thread: str) -> None:
        with self.lock:
            self.active.remove(thread)

    def summarize(self, request: SummaryRequest):
        thread = self.thread()
        should_wait = self._enter(thread)
        try:
            if should_wait:
                self.met.wait(self.wait)
            return super().summarize(request)
        finally:
            self._exit(thread)

    async def asummarize(self, request: SummaryRequest):
        thread = self.thread()
        if self.ameet is None:
            self.ameet = asyncio.Event()
        should_wait = self._enter(thread)
        try:
            if should_wait:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.ameet.wait(), self.wait)
            return super().summarize(request)
        finally:
            self._exit(thread)


def two_threads(kind: str, summarizer: OverlapSummarizer):
    first = build_surface(kind, script_model(STEPS), summarizer=summarizer, thread="t-a")
    second = dataclasses.replace(first, thread="t-b")
    return first, second


@pytest.mark.parametrize("kind", ["middleware", "react", "node", "history", "lcel"])
async def test_async_threads_summarize_concurrently(kind: str) -> None:
    summarizer = OverlapSummarizer()
    a, b = two_threads(kind, summarizer)

    async def run(surface) -> str:
        answer = ""
        for r in range(ROUNDS):
            answer = await surface.around(r, "ainvoke")
        return answer

    answers = await asyncio.gather(run(a), run(b))
    assert answers == [f"round {ROUNDS - 1} finished after {STEPS} steps"] * 2
    assert frozenset({"t-a", "t-b"}) in summarizer.overlaps, summarizer.overlaps
    # each thread's history holds its own run, complete
    store = OffloadStore.wrap(a.store)
    assert store.history_count("t-a") == store.history_count("t-b") > 0


def test_sync_threads_summarize_concurrently() -> None:
    summarizer = OverlapSummarizer()
    a, b = two_threads("middleware", summarizer)

    def run(surface) -> str:
        answer = ""
        for r in range(ROUNDS):
            answer = surface.round(r, "invoke")
        return answer

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(run, [a, b]))
    assert answers == [f"round {ROUNDS - 1} finished after {STEPS} steps"] * 2
    assert frozenset({"t-a", "t-b"}) in summarizer.overlaps


def test_overlap_check_fails_for_serialized_threads() -> None:
    """Control: one thread after the other never overlaps (the detector can say no)."""
    summarizer = OverlapSummarizer(wait=0.0)
    a, b = two_threads("middleware", summarizer)
    for surface in (a, b):
        for r in range(ROUNDS):
            surface.round(r, "invoke")
    assert summarizer.calls > 0
    assert not summarizer.overlaps
