"""Chains: ``AutoContextChatMessageHistory`` and the Runnable of ``ac.as_runnable()``."""

from __future__ import annotations

import asyncio
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest
from _builders import compressions, log_text, sh, tool_group
from conftest import open_sqlite
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from langchain_autocontext import (
    AutoContext,
    AutoContextChatMessageHistory,
    AutoContextConfig,
    AutoContextRunnable,
    ExtractiveSummarizer,
    OffloadStore,
)
from langchain_autocontext.messages import find_violations, is_pinned, marker, seeded_ids, text_of
from langchain_autocontext.strategies.pipeline import minimal_context

CFG = AutoContextConfig(max_tokens=4000, token_ratio=0.6, target_ratio=0.4, last_keep=4)


def make_ac(store=None, **kw) -> AutoContext:
    return AutoContext(CFG, store=store if store is not None else InMemoryStore(), **kw)


def turn(k: int, lines: int = 30) -> list[BaseMessage]:
    """One round: a user message, two tool calls with results, an answer (no ids)."""
    msgs: list[BaseMessage] = [HumanMessage(f"request {k}")]
    for m in tool_group("sh", {"command": f"make {k}"}, [log_text(lines, k), log_text(3, k)]):
        msgs.append(m.model_copy(update={"id": None}))
    msgs.append(AIMessage(f"answer {k}"))
    return msgs


@pytest.mark.parametrize("use_async", [False, True])
def test_the_surfaces_records_never_expire_on_a_store_with_a_default_ttl(
    tmp_path: Path, use_async: bool
) -> None:
    """A store configured with a default TTL (``SqliteStore(ttl=…)``, ``PostgresStore``)
    expired the chat history's working messages, the Runnable's record and the
    middleware's request shape (written without ``ttl=None``): an idle session came back
    with no conversation, where ``InMemoryStore`` (no TTL) kept it. Every item the
    package writes is kept, as the docs promise."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel

    conn = sqlite3.connect(tmp_path / "ttl.db", check_same_thread=False, isolation_level=None)
    backend = SqliteStore(conn, ttl={"default_ttl": 5})
    backend.setup()
    ac = make_ac(backend)
    hist = AutoContextChatMessageHistory("s1", ac)
    runnable = ac.as_runnable()
    agent = create_agent(
        FakeMessagesListChatModel(responses=[AIMessage("done")]),
        [],
        middleware=[ac.middleware()],
        store=backend,
    )
    config = {"configurable": {"thread_id": "t1"}}

    async def arun() -> None:
        await hist.aadd_messages(turn(0))
        await runnable.ainvoke(turn(1), config)
        await agent.ainvoke({"messages": [HumanMessage("hi")]}, config)

    if use_async:
        asyncio.run(arun())
    else:
        hist.add_messages(turn(0))
        runnable.invoke(turn(1), config)
        agent.invoke({"messages": [HumanMessage("hi")]}, config)
    rows = conn.execute("SELECT prefix, key, ttl_minutes FROM store").fetchall()
    surface = {key for prefix, key, _ in rows if prefix.endswith(".surface")}
    assert {"chat_history", "runnable", "model_request"} <= surface
    assert [(p, k) for p, k, ttl in rows if ttl is not None] == []
    conn.close()


# --- the chat-message history --------------------------------------------------------------------
def test_history_adds_reads_and_compresses() -> None:
    ac = make_ac()
    hist = AutoContextChatMessageHistory("s1", ac)
    assert hist.messages == []
    added: list[BaseMessage] = []
    for k in range(12):
        hist.add_messages(turn(k))
        added += turn(k)
        working = hist.messages
        assert not find_violations(working)
        assert all(m.id for m in working)
        # counted as a chain sends them: no tags, none of the package's tools
        count = ac.counter.count(working)
        floor = ac.counter.count(minimal_context(working))
        assert count <= CFG.thresholds(floor).trigger <= CFG.max_tokens
    assert len(hist.messages) < len(added)  # compressed
    assert [text_of(m) for m in hist.original_messages] == [text_of(m) for m in added]
    assert OffloadStore.wrap(ac.store).list_events("s1")


def test_history_normalizes_chunks_and_strips_tags() -> None:
    hist = AutoContextChatMessageHistory("s", make_ac())
    hist.add_messages(
        [
            HumanMessage("hi"),
            AIMessageChunk(
                '<metadata id="x" cumulative_message_token_count="1" message_token_count="1"/>\nhello'
            ),
        ]
    )
    last = hist.messages[-1]
    assert type(last) is AIMessage and last.content == "hello"


def test_history_clear_keeps_the_originals_and_sessions_are_apart() -> None:
    ac = make_ac()
    a = AutoContextChatMessageHistory("a", ac)
    b = AutoContextChatMessageHistory("b", ac)
    a.add_messages(turn(0, 3))
    b.add_messages(turn(1, 3))
    assert [text_of(m) for m in a.messages] == [text_of(m) for m in turn(0, 3)]
    assert [text_of(m) for m in b.messages] == [text_of(m) for m in turn(1, 3)]
    a.clear()
    assert a.messages == [] and len(b.messages) == len(turn(1, 3))
    assert [text_of(m) for m in a.original_messages] == [text_of(m) for m in turn(0, 3)]


async def test_history_async_twins_match_sync() -> None:
    """The async twins do what the sync methods do. Each twin draws the same ids (offload
    ids are shown in the context and a uuid's token count varies, so with random ids the
    two can compress at different points): the same working messages, compressed the
    same way, and the same originals."""
    with seeded_ids(7):
        sync_h = AutoContextChatMessageHistory("s", make_ac())
        for k in range(8):
            sync_h.add_messages(turn(k))
    with seeded_ids(7):
        async_h = AutoContextChatMessageHistory("s", make_ac())
        for k in range(8):
            await async_h.aadd_messages(turn(k))
    working = await async_h.aget_messages()
    assert working and not find_violations(working)
    assert any(marker(m) for m in working)  # compressed
    assert [text_of(m) for m in working] == [text_of(m) for m in sync_h.messages]
    originals = [text_of(m) for m in await async_h.aoriginal_messages()]
    assert originals == [text_of(m) for m in sync_h.original_messages]
    assert await async_h.aoriginal_messages() == async_h.original_messages  # one history
    assert len(originals) == 8 * len(turn(0))  # uncompressed
    await async_h.aclear()
    assert await async_h.aget_messages() == []


def test_history_is_found_again_by_new_objects(tmp_path: Path) -> None:
    store = open_sqlite(tmp_path / "s.db")
    first = AutoContextChatMessageHistory("s", make_ac(store))
    for k in range(6):
        first.add_messages(turn(k))
    before = [(m.id, text_of(m)) for m in first.messages]
    store.conn.close()
    store = open_sqlite(tmp_path / "s.db")
    try:
        again = AutoContextChatMessageHistory("s", AutoContext(CFG), store=store)
        assert [(m.id, text_of(m)) for m in again.messages] == before
    finally:
        store.conn.close()


def test_history_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="session_id"):
        AutoContextChatMessageHistory("", make_ac())
    with pytest.raises(TypeError, match="AutoContext"):
        AutoContextChatMessageHistory("s", "not an AutoContext")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="LangChain messages"):
        AutoContextChatMessageHistory("s", make_ac()).add_messages(["hello"])  # type: ignore[list-item]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=10),
    split=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=10),
)
def test_history_property_valid_fitting_lossless(sizes: list[int], split: list[int]) -> None:
    """Whatever the turns and however they are added, the working messages are valid and
    fit, and the originals are exactly what was added."""
    ac = make_ac()
    hist = AutoContextChatMessageHistory("p", ac)
    stream = [m for k, n in enumerate(sizes) for m in turn(k, n)]
    added: list[BaseMessage] = []
    i = 0
    for cut in split * 20:
        if i >= len(stream):
            break
        batch = stream[i : i + cut]
        # never split a tool call from its results (a chain adds input + output together)
        while i + len(batch) < len(stream) and stream[i + len(batch)].type == "tool":
            batch.append(stream[i + len(batch)])
        i += len(batch)
        hist.add_messages(batch)
        added += batch
        working = hist.messages
        assert not find_violations(working)
        assert ac.prepare_model_call(working).tokens <= CFG.max_tokens
    assert [text_of(m) for m in hist.original_messages] == [text_of(m) for m in added]


# --- the Runnable ----------------------------------------------------------------------------------
PROMPT = ChatPromptTemplate([("system", "You are terse."), MessagesPlaceholder("messages")])


def conversation(rounds: int) -> list[BaseMessage]:
    return [m for k in range(rounds) for m in turn(k)]


def test_runnable_in_a_chain_returns_the_managed_messages() -> None:
    ac = make_ac(tools=[sh])
    chain = PROMPT | ac.as_runnable()
    assert isinstance(ac.as_runnable(), AutoContextRunnable)
    out = chain.invoke({"messages": conversation(10)}, {"configurable": {"thread_id": "c"}})
    assert isinstance(out[0], SystemMessage) and out[0].content == "You are terse."
    assert not find_violations(out)
    assert len(out) < 1 + len(conversation(10))
    assert ac.prepare_model_call(out).tokens <= CFG.max_tokens
    assert OffloadStore.wrap(ac.store).list_events("c")


def test_two_system_entries_become_one_system_message_on_every_call() -> None:
    """Issue 13: a template with instructions and a knowledge block sent two system
    messages, then 'strategy round broke the sequence' on every later turn."""
    prompt = ChatPromptTemplate(
        [
            ("system", "You are terse."),
            ("system", "Knowledge: the office opens at 9."),
            MessagesPlaceholder("messages"),
        ]
    )
    ac = make_ac(tools=[sh])
    chain = prompt | ac.as_runnable()
    for rounds in (2, 10, 14):  # the last ones compress
        out = chain.invoke({"messages": conversation(rounds)}, {"configurable": {"thread_id": "k"}})
        assert [type(m) for m in out].count(SystemMessage) == 1
        assert out[0].content == "You are terse.\n\nKnowledge: the office opens at 9."
        assert not find_violations(out)
        assert ac.prepare_model_call(out).tokens <= CFG.max_tokens
    assert OffloadStore.wrap(ac.store).list_events("k")  # it did compress


def test_runnable_accepts_message_likes() -> None:
    run = make_ac().as_runnable()
    assert [m.type for m in run.invoke("hello")] == ["human"]
    assert [m.type for m in run.invoke([("system", "s"), ("human", "h")])] == ["system", "human"]
    assert [m.type for m in run.invoke(HumanMessage("x"))] == ["human"]
    assert run.invoke(PROMPT.invoke({"messages": [("human", "q")]}))[-1].content == "q"
    with pytest.raises(TypeError, match="prompt value"):
        run.invoke(42)
    with pytest.raises(TypeError, match="AutoContext"):
        AutoContextRunnable(autocontext="not an AutoContext")


def test_runnable_reuses_its_last_result_and_ids() -> None:
    """Called again with the same conversation (plus new messages), it compresses only
    the extension: no span is offloaded or summarized twice, no original archived twice."""
    summarizer = CountingSummarizer()
    ac = make_ac(summarizer=summarizer)
    run = ac.as_runnable()
    cfg = {"configurable": {"thread_id": "r"}}
    convo = conversation(10)
    first = run.invoke(convo, cfg)
    store = OffloadStore.wrap(ac.store)
    offloads, calls, history = (
        len(store.list_offloads("r")),
        summarizer.calls,
        store.history_count("r"),
    )
    assert offloads and calls
    again = run.invoke(convo, cfg)  # the same input: nothing to do
    assert [m.id for m in again] == [m.id for m in first]
    assert (len(store.list_offloads("r")), summarizer.calls) == (offloads, calls)
    assert store.history_count("r") == history
    more = run.invoke([*convo, HumanMessage("one more thing")], cfg)
    assert more[-1].content == "one more thing"
    assert store.history_count("r") == history + 1
    # a new process (new AutoContext, same store) picks up where this one stopped
    fresh = AutoContext(CFG, store=ac.store, summarizer=summarizer).as_runnable()
    fresh.invoke([*convo, HumanMessage("one more thing")], cfg)
    assert store.history_count("r") == history + 1
    # an edited past starts over (and says so in the events), still archiving nothing twice
    edited = [convo[0].model_copy(update={"content": "request 0, edited"}), *convo[1:]]
    run.invoke(edited, cfg)
    assert summarizer.calls > calls
    assert store.history_count("r") == history + 2  # only the edited message is new


async def test_runnable_async_matches_sync_and_threads_are_apart() -> None:
    # the same thread name in two stores: ids the package derives from the thread are
    # then the same too, and a few tokens of id never decide a compression boundary
    ac, twin = make_ac(), make_ac()
    run = ac.as_runnable()
    convo = conversation(8)
    with seeded_ids(7):
        sync_out = run.invoke(convo, {"configurable": {"thread_id": "x"}})
    with seeded_ids(7):
        async_out = await twin.as_runnable().ainvoke(convo, {"configurable": {"thread_id": "x"}})
    assert [m.type for m in sync_out] == [m.type for m in async_out]
    assert [text_of(m) for m in sync_out] == [text_of(m) for m in async_out]
    await run.ainvoke(convo, {"configurable": {"thread_id": "y"}})
    store = OffloadStore.wrap(ac.store)
    assert store.history_count("x") == store.history_count("y") == len(convo)
    # the session id of RunnableWithMessageHistory names the thread too
    run.invoke([HumanMessage("hi")], {"configurable": {"session_id": "sess"}})
    assert store.history_count("sess") == 1


class CountingSummarizer(ExtractiveSummarizer):
    """The offline summarizer, counting its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def summarize(self, request):
        self.calls += 1
        return super().summarize(request)


def test_concurrent_writers_of_one_session_lose_no_turn(tmp_path: Path) -> None:
    """Two threads adding to one session on a SqliteStore: each read the working record,
    compressed and wrote it back, so the second write dropped the first one's turns from
    what the model is sent (43 of 80 kept); the writers now take turns."""
    import threading

    backend = open_sqlite(tmp_path / "race.db")
    ac = AutoContext(max_tokens=64_000)

    def writer(who: str) -> None:
        hist = AutoContextChatMessageHistory("sess", ac, store=backend)
        for k in range(40):
            hist.add_messages([HumanMessage(f"{who} says {k}")])

    threads = [threading.Thread(target=writer, args=(w,)) for w in ("ana", "bo")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    texts = {text_of(m) for m in AutoContextChatMessageHistory("sess", ac, store=backend).messages}
    assert texts == {f"{w} says {k}" for w in ("ana", "bo") for k in range(40)}
    backend.conn.close()


def test_concurrent_async_writers_of_one_session_lose_no_turn(tmp_path: Path) -> None:
    import asyncio

    from conftest import async_backend

    async def main() -> list[BaseMessage]:
        async with async_backend("sqlite", tmp_path / "arace.db") as backend:
            ac = AutoContext(max_tokens=64_000, store=backend)

            async def writer(who: str) -> None:
                hist = AutoContextChatMessageHistory("sess", ac)
                for k in range(30):
                    await hist.aadd_messages([HumanMessage(f"{who} says {k}")])

            await asyncio.gather(writer("ana"), writer("bo"))
            return await AutoContextChatMessageHistory("sess", ac).aget_messages()

    texts = {text_of(m) for m in asyncio.run(main())}
    assert texts == {f"{w} says {k}" for w in ("ana", "bo") for k in range(30)}


def _words(n: int) -> str:
    base = [
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliet",
        "kilo",
        "lima",
    ]
    return " ".join(f"{base[i % len(base)]}{i % 97}" for i in range(n))


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_a_chain_turn_that_fits_is_never_dropped_from_the_working_history() -> None:
    """The history counted the package's seven tool schemas and its section, which a
    chain never sends: a turn that fitted raised ContextBudgetError inside
    RunnableWithMessageHistory's listener, whose errors LangChain only logs, and the turn
    vanished from what the model saw next (the store had archived it)."""
    import itertools

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.runnables.history import RunnableWithMessageHistory

    store = InMemoryStore()
    ac = AutoContext(max_tokens=2_000, store=store)  # the defaults: tools and tags on
    replies = itertools.cycle([f"Sure. {_words(80)}"])
    model = GenericFakeChatModel(messages=(AIMessage(r) for r in replies))
    prompt = ChatPromptTemplate(
        [("system", "You are terse."), MessagesPlaceholder("history"), ("human", "{q}")]
    )
    chain = RunnableWithMessageHistory(
        prompt | model,
        AutoContextChatMessageHistory.factory(ac, store=store),
        input_messages_key="q",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": "ada"}}
    chain.invoke({"q": "My name is Ada."}, config)
    chain.invoke({"q": "Please review this document: " + _words(560)}, config)
    chain.invoke({"q": "What did I ask you to review?"}, config)
    working = AutoContextChatMessageHistory("ada", ac, store=store).messages
    text = "\n".join(text_of(m) for m in working)
    assert "review this document" in text or "Summary of" in text  # kept or summarized
    assert len(working) >= 4
    assert ac.counter.count(working) <= 2_000


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_the_history_leaves_the_next_input_its_room_beside_a_large_system_prompt() -> None:
    """With a large system prompt (the template's, given as ``system_prompt=``), the
    trigger moved up by the floor to ``max_tokens`` itself: the history kept itself
    just under the whole budget between turns, and every turn's prompt (the history
    plus the new question) went past it (31 of 200 prompts over 1,500 tokens). The
    history keeps itself under the configured trigger, the rest being the next input's."""
    import itertools

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.runnables.history import RunnableWithMessageHistory

    system = "You are terse. " + _words(300)
    store = InMemoryStore()
    ac = AutoContext(max_tokens=1_500, store=store, system_prompt=system)
    sent: list[list[BaseMessage]] = []

    def model_call(messages: Any) -> Any:
        sent.append(messages.to_messages())
        return messages

    replies = itertools.cycle([f"Sure. {_words(40)}"])
    model = GenericFakeChatModel(messages=(AIMessage(r) for r in replies))
    prompt = ChatPromptTemplate(
        [("system", system), MessagesPlaceholder("history"), ("human", "{q}")]
    )
    chain = RunnableWithMessageHistory(
        prompt | RunnableLambda(model_call) | model,
        AutoContextChatMessageHistory.factory(ac, store=store),
        input_messages_key="q",
        history_messages_key="history",
    )
    assert ac.counter.count([SystemMessage(system)]) > 1_500 * 0.4
    for k in range(30):
        chain.invoke({"q": f"Question {k}: {_words(30)}"}, {"configurable": {"session_id": "s"}})
    assert max(ac.counter.count(m) for m in sent) <= 1_500
    history = AutoContextChatMessageHistory("s", ac, store=store)
    assert len(history.original_messages) == 60  # nothing lost


@pytest.mark.parametrize("surface", ["history", "runnable"])
def test_a_chain_model_is_told_of_reload_offloaded_only_when_it_has_it(surface: str) -> None:
    """The chain surfaces send none of the package's tools, yet a summary told the model
    to call ``reload_offloaded(offload_id=…)``, a tool it did not have (a model may
    call it anyway, or apologise for not being able to). Without the tool a
    replacement names its offload by id alone; with it given as ``tools=`` (bound to
    the model), as the call."""
    texts = {}
    for with_tools in (False, True):
        store = InMemoryStore()
        ac = AutoContext(max_tokens=1_500, store=store)
        if with_tools:
            ac = AutoContext(max_tokens=1_500, store=store, tools=ac.tools)
        convo: list[BaseMessage] = []
        for k in range(30):
            convo += [HumanMessage(f"Question {k}: {_words(40)}"), AIMessage(_words(40))]
        if surface == "history":
            history = AutoContextChatMessageHistory("s", ac, store=store)
            for k in range(0, len(convo), 2):
                history.add_messages(convo[k : k + 2])
            working = history.messages
        else:
            working = ac.as_runnable().invoke(convo, {"configurable": {"thread_id": "s"}})
        assert OffloadStore.wrap(store).list_offloads("s")  # it did compress
        texts[with_tools] = "\n".join(text_of(m) for m in working)
    assert "reload_offloaded" not in texts[False]
    assert "reload_offloaded(offload_id=" in texts[True]


@pytest.mark.parametrize("surface", ["history", "runnable"])
def test_a_chain_whose_model_calls_an_uncounted_tool_is_warned(surface: str) -> None:
    """A chain's model bound with tools not given as ``tools=``: their schemas go with
    every request, uncounted, and the prompts went past ``max_tokens`` without a word
    (the agent surfaces warn). The chain surfaces warn too, once; not when counted."""
    convo = [HumanMessage("list the files"), *tool_group("sh", {"command": "ls"}, ["a b"])]
    for tools in ([], [sh]):
        ac = make_ac(tools=tools)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if surface == "history":
                AutoContextChatMessageHistory("s", ac).add_messages(convo[:2])
            else:
                ac.as_runnable().invoke(convo[:2], {"configurable": {"thread_id": "s"}})
        said = [str(w.message) for w in caught if "does not count" in str(w.message)]
        assert len(said) == (0 if tools else 1) and (not said or "sh" in said[0])


def test_cleared_then_repeated_messages_are_archived_again() -> None:
    """Ids derived from the content repeated after clear(): the second "hi" was taken
    as already archived and never reached the history."""
    store = InMemoryStore()
    ac = AutoContext(max_tokens=8_000, store=store)
    hist = AutoContextChatMessageHistory("c", ac, store=store)
    hist.add_messages([HumanMessage("hi"), AIMessage("hello")])
    hist.clear()
    hist.add_messages([HumanMessage("hi"), AIMessage("hello")])
    assert [text_of(m) for m in hist.original_messages] == ["hi", "hello", "hi", "hello"]


def test_a_history_that_cannot_fit_is_kept_whole_with_a_warning() -> None:
    """Raising from add_messages loses the turn silently under RunnableWithMessageHistory;
    the history keeps it and says why."""
    store = InMemoryStore()
    ac = AutoContext(max_tokens=600, store=store)
    hist = AutoContextChatMessageHistory("big", ac, store=store)
    hist.add_messages([HumanMessage("hi"), AIMessage("hello")])
    with pytest.warns(UserWarning, match="kept whole"):
        hist.add_messages([HumanMessage("paste: " + "word " * 1_000)])
    assert [text_of(m)[:6] for m in hist.messages] == ["hi", "hello", "paste:"]


def test_runnable_calls_without_a_thread_do_not_share_one() -> None:
    """Two callers without a thread_id were filed under "default": one's messages were
    in the other's history (and its search_history)."""
    import langchain_autocontext.engine as engine_module

    store = InMemoryStore()
    run = AutoContext(max_tokens=8_000, store=store).as_runnable()
    engine_module._warned_run_thread = False
    with pytest.warns(UserWarning, match="no thread_id"):
        run.invoke([HumanMessage("Alice here, my SSN is 123-45-6789")])
    run.invoke([HumanMessage("Bob here, hello")])
    ost = OffloadStore.wrap(store)
    threads = {item.namespace[1] for item in store.search((ost.prefix,), limit=100)}
    assert "default" not in threads and len(threads) == 2


@pytest.mark.parametrize("system", ["Be terse. Turn {n}.", "Be terse."])
def test_a_system_prompt_that_changes_per_call_does_not_restart_the_runnable(system: str) -> None:
    """A template whose system prompt holds the turn (or a date, or retrieved context):
    the Runnable no longer recognised the conversation it had compressed, and compressed
    it from scratch every call (10 compressions in 14 turns, against 5 with a stable
    prompt). The changed system prompt takes the old one's place."""
    import itertools

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    store = InMemoryStore()
    ac = AutoContext(max_tokens=1_500, store=store, self_management_tools=False)
    replies = itertools.cycle([f"Answer {_words(60)}"])
    model = GenericFakeChatModel(messages=(AIMessage(r) for r in replies))
    prompt = ChatPromptTemplate([("system", system), MessagesPlaceholder("messages")])
    chain = prompt | ac.as_runnable()
    conversation: list[BaseMessage] = []
    for turn in range(14):
        conversation.append(HumanMessage(f"Task {turn} {_words(60)}"))
        sent = chain.invoke(
            {"messages": conversation, "n": turn}, {"configurable": {"thread_id": "d"}}
        )
        assert sent[0].content == system.format(n=turn)  # this call's system prompt
        assert not find_violations(sent) and ac.counter.count(sent) <= 1_500
        conversation.append(model.invoke(sent))
    assert len(compressions(store, "d")) <= 5


@pytest.mark.parametrize("use_async", [False, True])
async def test_two_templates_in_a_runnable_parallel_on_one_thread_do_not_restart_each_other(
    use_async: bool,
) -> None:
    """Two branches of a ``RunnableParallel``, each its own prompt template (its own
    few-shot example), on one thread: the Runnable kept one record per thread, so each
    branch's input failed to extend the other's and every call compressed the whole
    conversation again (20 compressions in 14 turns, against 8 on two threads)."""
    from langchain_core.runnables import RunnableParallel

    def templates() -> list[ChatPromptTemplate]:
        return [
            ChatPromptTemplate(
                [("system", system), ("human", example), ("ai", answer), MessagesPlaceholder("m")]
            )
            for system, example, answer in [
                ("Answer.", "Example: 2+2?", "4"),
                ("Critique.", "Example: is 2+2=5?", "No."),
            ]
        ]

    async def compressions(parallel: bool) -> int:
        store = InMemoryStore()
        ac = AutoContext(max_tokens=1_500, store=store, self_management_tools=False)
        answer, critique = (t | ac.as_runnable() for t in templates())
        both = RunnableParallel(answer=answer, critique=critique)
        threads = ["d"] if parallel else ["a", "b"]
        conversation: list[BaseMessage] = []
        for turn in range(14):
            conversation.append(HumanMessage(f"Task {turn} {_words(60)}", id=f"h{turn}"))
            run = {"m": conversation}
            if parallel:
                cfg: Any = {"configurable": {"thread_id": "d"}}
                out = await both.ainvoke(run, cfg) if use_async else both.invoke(run, cfg)
                sent = list(out.values())
            else:
                sent = [
                    chain.invoke(run, {"configurable": {"thread_id": thread}})
                    for chain, thread in zip((answer, critique), threads, strict=True)
                ]
            for msgs in sent:
                assert not find_violations(msgs) and ac.counter.count(msgs) <= 1_500
                assert msgs[-1].content == conversation[-1].content
            conversation.append(AIMessage(f"Answer {_words(60)}", id=f"a{turn}"))
        return sum(len(OffloadStore.wrap(store).list_events(t)) for t in threads)

    assert await compressions(parallel=True) <= await compressions(parallel=False)


@pytest.mark.parametrize("reminder", ["Turn {n}: answer in English.", "Answer in English."])
def test_a_system_message_after_the_history_does_not_restart_the_runnable(reminder: str) -> None:
    """A template with a system message after the history (a reminder, the date): the
    Runnable took each call's input for an edited past (the reminder stood where the
    next message now is) and compressed the whole conversation again every call, each
    time offloading and summarizing it anew (107 offloads in 120 turns, against 17).
    System messages are merged into one, first, wherever the template puts them: the
    new ones take the old ones' place, as a changed leading system message does."""
    import itertools

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    store = InMemoryStore()
    ac = AutoContext(max_tokens=1_500, store=store, self_management_tools=False)
    replies = itertools.cycle([f"Answer {_words(60)}"])
    model = GenericFakeChatModel(messages=(AIMessage(r) for r in replies))
    prompt = ChatPromptTemplate(
        [("system", "Be terse."), MessagesPlaceholder("messages"), ("system", reminder)]
    )
    chain = prompt | ac.as_runnable()
    conversation: list[BaseMessage] = []
    for turn in range(14):
        conversation.append(HumanMessage(f"Task {turn} {_words(60)}"))
        sent = chain.invoke(
            {"messages": conversation, "n": turn}, {"configurable": {"thread_id": "r"}}
        )
        assert [type(m) for m in sent].count(SystemMessage) == 1
        assert sent[0].content == "Be terse.\n\n" + reminder.format(n=turn)
        assert sent[-1].content == conversation[-1].content
        assert not find_violations(sent) and ac.counter.count(sent) <= 1_500
        conversation.append(model.invoke(sent))
    offloads = OffloadStore.wrap(store)
    assert len(compressions(store, "r")) <= 5
    originals = {e.message.content for e in offloads.iter_history("r")}
    assert all(m.content in originals for m in conversation)  # every turn archived
    if "{n}" not in reminder:  # a reminder that stays the same is archived once
        assert offloads.history_count("r") == len(conversation) - 1 + 2


def _runnable_chat(
    chain: Any, store: InMemoryStore, turns: int, *, template_question: bool = False
) -> Any:
    """``turns`` turns of ``chain`` (ending in ``ac.as_runnable()``) and a fake chat model
    on thread "w": what each call sent, the conversation, and the size of the Runnable's
    store item after each call."""
    import itertools
    import json

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    replies = itertools.cycle([f"Answer {_words(60)}"])
    model = GenericFakeChatModel(messages=(AIMessage(r) for r in replies))
    conversation: list[BaseMessage] = []
    sent: list[list[BaseMessage]] = []
    sizes: list[int] = []
    prefix = OffloadStore.wrap(store).prefix
    for turn in range(turns):
        question = HumanMessage(f"Task {turn} {_words(60)}")
        if template_question:  # the template adds the question after the history
            run: dict[str, Any] = {"history": list(conversation), "question": question.content}
        else:
            run = {"messages": [*conversation, question]}
        sent.append(chain.invoke(run, {"configurable": {"thread_id": "w"}}))
        conversation += [question, model.invoke(sent[-1])]
        items = store.search((prefix,), limit=1000)
        sizes.append(sum(len(json.dumps(i.value)) for i in items if i.key == "runnable"))
    return sent, conversation, sizes


@pytest.mark.parametrize("window", ["trim_messages", "drop the oldest turn"])
@pytest.mark.parametrize("fits", [True, False])
def test_a_window_that_drops_the_oldest_messages_does_not_restart_the_runnable(
    window: str, fits: bool
) -> None:
    """A ``trim_messages`` window (or a chain dropping the oldest turn) before the
    Runnable: its input's first message changed every call, so the Runnable compressed
    it from scratch every call (11 compressions in 16 turns of a window over the budget,
    against 4), archived every message again under new ids (82 originals for 32
    messages) and kept four dead records in the store (an item twice as large). It
    continues its record now: the dropped messages leave the managed list, the others
    keep their ids."""
    from langchain_core.messages import trim_messages

    store = InMemoryStore()
    ac = AutoContext(max_tokens=1_500, store=store, self_management_tools=False)
    keep = 6 if fits else 12  # messages of ~160 tokens: 8 of them are over the trigger
    prompt = ChatPromptTemplate([("system", "Be terse."), MessagesPlaceholder("messages")])
    if window == "trim_messages":
        trim: Any = trim_messages(
            max_tokens=keep,
            token_counter=len,
            strategy="last",
            start_on="human",
            include_system=True,
        )
        windowed = prompt | trim
    else:
        windowed = RunnableLambda(lambda run: {"messages": run["messages"][-keep:]}) | prompt
    sent, conversation, sizes = _runnable_chat(windowed | ac.as_runnable(), store, 16)
    offloads = OffloadStore.wrap(store)
    for out in sent:
        assert not find_violations(out) and ac.counter.count(out) <= 1_500
    if fits:  # nothing to compress: the window as the chain sent it
        assert not offloads.list_events("w")
        last = windowed.invoke({"messages": conversation[:-1]})
        last = last if isinstance(last, list) else last.to_messages()
        assert [text_of(m) for m in sent[-1]] == [text_of(m) for m in last]
    else:
        # 6: user messages outside the working set are masked before FIFO evicts, and the
        # compression lands at its target, where eviction alone went below it (4)
        assert len(compressions(store, "w")) <= 6
    # each message sent archived once: the system prompt, all but the last reply
    assert offloads.history_count("w") == 1 + len(conversation) - 1
    full = keep // 2  # the first call whose input is a full window
    assert max(sizes[full:]) <= 1.5 * sizes[full]


@pytest.mark.parametrize("role", ["human", "system"])
def test_a_template_message_after_the_history_does_not_restart_the_runnable(role: str) -> None:
    """A template with an instruction after the history and the question: a human one
    stood where the next call's messages go, so the Runnable compressed the whole
    conversation again every call (12 compressions in 16 turns, against 7) and archived
    the question again each time. The instruction is recognised at the end of the next
    call's input: the messages before it are compressed onto the previous result, and it
    is archived once."""
    store = InMemoryStore()
    ac = AutoContext(max_tokens=1_500, store=store, self_management_tools=False)
    prompt = ChatPromptTemplate(
        [
            ("system", "Be terse."),
            MessagesPlaceholder("history"),
            ("human", "{question}"),
            (role, "Answer briefly."),
        ]
    )
    sent, conversation, sizes = _runnable_chat(
        prompt | ac.as_runnable(), store, 16, template_question=True
    )
    for out, question in zip(sent, conversation[::2], strict=True):
        assert not find_violations(out) and ac.counter.count(out) <= 1_500
        assert question.content in {text_of(m) for m in out[-2:]}
        assert "Answer briefly." in text_of(out[-1] if role == "human" else out[0])
    offloads = OffloadStore.wrap(store)
    # 4, a human instruction as a system one: it is sent as request-only, so the
    # question is the latest user message (taken for it, the small instruction brought
    # the trigger earlier: 7)
    passes = compressions(store, "w")
    assert len(passes) <= 6  # as the window's: masking first, landing at the target
    assert all(events[0].tokens_before >= ac.config.trigger_tokens for events in passes)
    # each message sent archived once: the system prompt and the instruction too
    assert offloads.history_count("w") == 2 + len(conversation) - 1
    assert max(sizes[8:]) <= 1.5 * sizes[8]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_question_before_a_template_instruction_is_the_latest_user_message(mode: str) -> None:
    """``[history, ("human", "{question}"), ("human", "Answer briefly.")]``: the engine took
    the fixed instruction for the latest user message, so a long question (a pasted
    report) was offloaded to a preview like any older message. The template's repeated
    messages after the history are sent with every call, not said by the user: the
    Runnable passes them as request-only, and the question is the message kept whole."""
    import asyncio
    import itertools

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    store = InMemoryStore()
    ac = AutoContext(max_tokens=8_000, store=store, self_management_tools=False)
    prompt = ChatPromptTemplate(
        [
            ("system", "Be terse."),
            MessagesPlaceholder("history"),
            ("human", "{question}"),
            ("human", "Answer briefly."),
        ]
    )
    chain = prompt | ac.as_runnable()
    model = GenericFakeChatModel(messages=itertools.cycle([AIMessage(f"Answer {_words(40)}")]))
    history: list[BaseMessage] = []
    for turn in range(8):
        question = f"Report {turn}: " + " ".join(f"line{turn}x{k} ok" for k in range(450))
        run = {"history": list(history), "question": question}
        cfg: Any = {"configurable": {"thread_id": "q"}}
        out = chain.invoke(run, cfg) if mode == "sync" else asyncio.run(chain.ainvoke(run, cfg))
        assert not find_violations(out) and ac.counter.count(out) <= 8_000
        assert question in {text_of(m) for m in out}, f"turn {turn}: the question was cut"
        assert text_of(out[-1]) == "Answer briefly."
        history += [HumanMessage(question), model.invoke(out)]
    # the instruction is archived once (the first call's, when it was the latest message)
    kinds = [e.message.content for e in OffloadStore.wrap(store).iter_history("q")]
    assert kinds.count("Answer briefly.") == 1


# --- a reply whose id an earlier one used ----------------------------------------------------
def _same_reply_model():
    """A model that returns one reply object every turn (a cycled fake, a cached reply):
    LangChain stamps its id on the first call, so every reply carries that one id."""
    import itertools

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    return GenericFakeChatModel(messages=itertools.cycle([AIMessage("Noted: " + "blah " * 120)]))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_reply_that_reuses_an_id_is_kept_in_history_and_context(mode: str) -> None:
    """Once the first reply with that id had been compressed away, every later one was
    taken for it: not archived, and dropped from the context as already summarized
    (audit). Messages added to a chat history are new by construction: a repeated id
    gets a fresh one."""
    import asyncio

    from langchain_core.runnables.history import RunnableWithMessageHistory

    store = InMemoryStore()
    ac = make_ac(store, max_tokens=2_000)
    prompt = ChatPromptTemplate(
        [("system", "You are terse."), MessagesPlaceholder("history"), ("human", "{q}")]
    )
    chain = RunnableWithMessageHistory(
        prompt | _same_reply_model(),
        AutoContextChatMessageHistory.factory(ac, store=store),
        input_messages_key="q",
        history_messages_key="history",
    )
    cfg = {"configurable": {"session_id": f"u-{mode}"}}
    for k in range(14):
        q = {"q": f"Note {k} " + "word " * 50}
        chain.invoke(q, cfg) if mode == "sync" else asyncio.run(chain.ainvoke(q, cfg))
    kinds = "".join(e.message.type[0] for e in OffloadStore(store).iter_history(f"u-{mode}"))
    assert kinds == "ha" * 14
    context = AutoContextChatMessageHistory(f"u-{mode}", ac, store=store).messages
    assert context[-1].type == "ai" and context[-2].content.startswith("Note 13")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_runnable_keeps_a_reply_that_reuses_an_id(mode: str) -> None:
    import asyncio

    store = InMemoryStore()
    ac = make_ac(store, max_tokens=2_000)
    chain = ChatPromptTemplate([("system", "terse"), MessagesPlaceholder("messages")]) | (
        ac.as_runnable()
    )
    model = _same_reply_model()
    cfg = {"configurable": {"thread_id": f"r-{mode}"}}
    conversation: list[BaseMessage] = []
    for k in range(14):
        conversation.append(HumanMessage(f"Note {k} " + "word " * 50))
        run = {"messages": conversation}
        sent = chain.invoke(run, cfg) if mode == "sync" else asyncio.run(chain.ainvoke(run, cfg))
        assert not find_violations(sent)
        assert ac.counter.count(sent) <= 2_000
        assert sent[-1].content.startswith(f"Note {k}")
        if k:
            assert sent[-2].type == "ai"  # the previous reply reached the model
        conversation.append(model.invoke(sent))
    kinds = "".join(e.message.type[0] for e in OffloadStore(store).iter_history(f"r-{mode}"))
    assert kinds == "s" + "ha" * 13 + "h"


def _counting_serializations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the Runnable's full serializations of a message (JSON and SHA-256 of it)."""
    from langchain_autocontext import history

    count = [0]
    serialize = history._serialized_print

    def counted(message: BaseMessage) -> bytes:
        count[0] += 1
        return serialize(message)

    monkeypatch.setattr(history, "_serialized_print", counted)
    return count


@pytest.mark.parametrize("rebuilt", [False, True], ids=["same objects", "rebuilt objects"])
def test_a_long_chain_serializes_only_what_each_call_adds(
    monkeypatch: pytest.MonkeyPatch, rebuilt: bool
) -> None:
    """A chain sends its whole conversation every call: the Runnable serialized and
    hashed every message of it every call (its work grew with the thread, a fifth of a
    second a call at 3,000 messages, where the engine's stays flat). It serializes only
    the messages it has not seen now, whether the app resends the same objects or
    rebuilds equal ones (from its database) every call."""
    count = _counting_serializations(monkeypatch)
    store = InMemoryStore()
    ac = AutoContext(max_tokens=2_000, store=store, self_management_tools=False)
    chain = ChatPromptTemplate([("system", "terse"), MessagesPlaceholder("messages")]) | (
        ac.as_runnable()
    )
    model = _same_reply_model()
    cfg = {"configurable": {"thread_id": f"long-{rebuilt}"}}
    conversation: list[BaseMessage] = []
    per_call = []
    for k in range(30):
        conversation.append(HumanMessage(f"Note {k} " + "word " * 40))
        sent_in = [m.model_copy(deep=True) for m in conversation] if rebuilt else conversation
        before = count[0]
        sent = chain.invoke({"messages": sent_in}, cfg)
        per_call.append(count[0] - before)
        assert sent[-1].content.startswith(f"Note {k}")
        conversation.append(model.invoke(sent))
    assert OffloadStore.wrap(store).list_events(f"long-{rebuilt}")  # it compressed
    # the question and the previous reply (the system prompt, once)
    assert max(per_call[1:]) <= 2, per_call
    kinds = "".join(
        e.message.type[0]
        for e in OffloadStore(store).iter_history(cfg["configurable"]["thread_id"])
    )
    assert kinds == "s" + "ha" * 29 + "h"


def test_a_thread_resending_its_conversation_keeps_its_prints_past_the_cache_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process-wide cache of prints dropped its oldest-inserted half when full and
    never refreshed a hit: a thread resending its conversation every call lost its
    prints to other threads' one-off messages and serialized them all again. The cache
    keeps the most recently sent (a small one here: what the process sends past it)."""
    from langchain_autocontext import history
    from langchain_autocontext.cache import _LRU

    monkeypatch.setattr(history, "_PRINTS", _LRU(8))
    count = _counting_serializations(monkeypatch)
    ac = AutoContext(max_tokens=8_000, store=InMemoryStore(), self_management_tools=False)
    chain = ChatPromptTemplate([("system", "terse"), MessagesPlaceholder("messages")]) | (
        ac.as_runnable()
    )
    steady = [HumanMessage("q0"), AIMessage("a0"), HumanMessage("q1")]
    cfg = {"configurable": {"thread_id": "steady"}}
    chain.invoke({"messages": steady}, cfg)
    resent = []
    for k in range(12):  # another thread's one-off messages between two of its calls
        one_off = [HumanMessage(f"once {k}"), AIMessage(f"once more {k}")]
        chain.invoke({"messages": one_off}, {"configurable": {"thread_id": f"once-{k}"}})
        before = count[0]
        assert [m.content for m in chain.invoke({"messages": steady}, cfg)][1:] == [
            "q0",
            "a0",
            "q1",
        ]
        resent.append(count[0] - before)
    assert resent == [0] * 12


def _set_pin(message: BaseMessage) -> None:
    from langchain_autocontext.messages import PIN_KEY

    message.additional_kwargs[PIN_KEY] = True


_IN_PLACE = {
    "content reassigned": lambda c: setattr(c[0], "content", "Note 0, rewritten"),
    "block appended": lambda c: c[1].content.append({"type": "text", "text": "and more"}),
    "args edited": lambda c: c[1].tool_calls[0]["args"].update(n=2),
    "args 1 to True": lambda c: c[1].tool_calls[0]["args"].update(n=True),
    "pinned": lambda c: _set_pin(c[0]),
}


@pytest.mark.parametrize("change", list(_IN_PLACE))
def test_a_message_changed_in_place_is_seen_by_the_runnable(
    monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """The Runnable remembers what it serialized of each message: one changed in place in
    the conversation the app resends (the same objects) is serialized again, so the
    input does not pass for the one it saw (the previous result, holding the message as
    it was, is not sent again): the model sees the change."""
    count = _counting_serializations(monkeypatch)
    ac = AutoContext(max_tokens=8_000, store=InMemoryStore(), self_management_tools=False)
    chain = ChatPromptTemplate([("system", "terse"), MessagesPlaceholder("messages")]) | (
        ac.as_runnable()
    )
    call = {"name": "sh", "args": {"n": 1}, "id": "call-1", "type": "tool_call"}
    conversation: list[BaseMessage] = [
        HumanMessage("Note 0"),
        AIMessage([{"type": "text", "text": "running"}], tool_calls=[call]),
        ToolMessage("ok", tool_call_id="call-1"),
        AIMessage("done"),
    ]
    cfg = {"configurable": {"thread_id": "in-place"}}
    for k in range(1, 6):
        conversation += [HumanMessage(f"Note {k}"), AIMessage(f"Answer {k}")]
        chain.invoke({"messages": conversation}, cfg)
    before = count[0]
    assert chain.invoke({"messages": conversation}, cfg)  # nothing new: nothing serialized
    assert count[0] == before
    _IN_PLACE[change](conversation)
    sent = chain.invoke({"messages": conversation}, cfg)
    question, reply = sent[1], sent[2]
    assert question.type == "human" and reply.type == "ai"
    if change == "content reassigned":
        assert question.content == "Note 0, rewritten"
    elif change == "block appended":
        assert "and more" in text_of(reply)
    elif change == "pinned":
        assert is_pinned(question)
    else:
        n = reply.tool_calls[0]["args"]["n"]
        assert (type(n), n) == ((int, 2) if change == "args edited" else (bool, True))
    assert count[0] == before + 1  # the changed message only


_CALL = {"name": "sh", "args": {"n": 1}, "id": "call-1", "type": "tool_call"}
_BAD_CALL = {
    "name": "sh",
    "args": "{oops",
    "id": "call-2",
    "error": "bad JSON",
    "type": "invalid_tool_call",
}


def _rare_conversation(ids: bool, **change: Any) -> list[BaseMessage]:
    """A conversation using the fields few messages set (``change`` sets one of them)."""
    messages: list[BaseMessage] = [
        HumanMessage("q0"),
        AIMessage("running", tool_calls=[_CALL], invalid_tool_calls=change.get("invalid", [])),
        ToolMessage(
            "ok",
            tool_call_id="call-1",
            status=change.get("status", "success"),
            artifact=change.get("artifact"),
        ),
        ChatMessage("a note", role=change.get("role", "user")),
        AIMessage("done"),
        HumanMessage("q1"),
    ]
    return (
        [m.model_copy(update={"id": f"m{k}"}) for k, m in enumerate(messages)] if ids else messages
    )


_RARE_CHANGES = {
    "tool status": {"status": "error"},
    "tool artifact": {"artifact": {"rows": 3}},
    "chat role": {"role": "developer"},
    "invalid tool calls": {"invalid": [_BAD_CALL]},
}


@pytest.mark.parametrize("ids", [False, True], ids=["id-less", "with ids"])
@pytest.mark.parametrize("change", list(_RARE_CHANGES))
def test_a_change_to_a_rarely_set_field_alone_is_seen_by_the_runnable(
    change: str, ids: bool
) -> None:
    """A message's print left out a ``ChatMessage``'s role, a ``ToolMessage``'s status
    and artifact and an AI message's ``invalid_tool_calls``: an input changed in one of
    them only passed for the one the Runnable saw, and its previous result, holding the
    message as it was, was sent again (a failed tool reported as a success)."""
    ac = AutoContext(max_tokens=8_000, store=InMemoryStore(), self_management_tools=False)
    chain = ChatPromptTemplate([("system", "terse"), MessagesPlaceholder("messages")]) | (
        ac.as_runnable()
    )
    cfg = {"configurable": {"thread_id": "rare"}}
    chain.invoke({"messages": _rare_conversation(ids)}, cfg)
    for _ in range(2):  # changed, then continued as changed
        sent = chain.invoke({"messages": _rare_conversation(ids, **_RARE_CHANGES[change])}, cfg)
        reply = next(m for m in sent if isinstance(m, AIMessage))
        result = next(m for m in sent if isinstance(m, ToolMessage))
        note = next(m for m in sent if isinstance(m, ChatMessage))
        seen = {
            "tool status": result.status,
            "tool artifact": result.artifact,
            "chat role": note.role,
            "invalid tool calls": reply.invalid_tool_calls,
        }
        assert seen[change] == next(iter(_RARE_CHANGES[change].values())), sent


#: The window of the record the version before ``ChatMessage.role``, ``ToolMessage.status``
#: and ``artifact`` and ``invalid_tool_calls`` were read wrote for the input of
#: :func:`test_a_record_written_before_the_rare_fields_were_read_is_continued` (the
#: prints of its id-less messages and the ids derived from them).
_WINDOW_BEFORE_RARE_FIELDS = [
    ["2ca3bfd1d7609dbd", "fe4b3120-6766-5967-8c26-4868aa01f261"],
    ["75328edd7c4d021e", "44c72ac9-2468-5013-b5fc-9eba71245b85"],
    ["c4f3aa4504425787", "54782a21-571a-55e2-8271-52882b0f47d5"],
    ["1f7dc95429796ac8", "646832fe-90b3-5327-9610-61aa0fd8170f"],
    ["0e2f820ff18fa246", "264b66d0-acab-580f-aa01-cc09f34ab9bd"],
]


def test_a_record_written_before_the_rare_fields_were_read_is_continued() -> None:
    """Prints name id-less messages and are stored in records: reading the rarely set
    fields left the prints of messages that keep them at their defaults (the common
    case) as they were, so a thread's record from before is continued after an
    upgrade, not restarted with every id-less message archived again under a new id."""
    store = InMemoryStore()
    ac = AutoContext(max_tokens=8_000, store=store, self_management_tools=False)
    chain = ChatPromptTemplate([("system", "terse"), MessagesPlaceholder("messages")]) | (
        ac.as_runnable()
    )
    cfg = {"configurable": {"thread_id": "t"}}
    conversation: list[BaseMessage] = [
        HumanMessage("q0"),
        AIMessage("running", tool_calls=[_CALL]),
        ToolMessage("ok", tool_call_id="call-1"),
        AIMessage("a0"),
        HumanMessage("q1"),
    ]
    chain.invoke({"messages": conversation}, cfg)
    offloads = OffloadStore.wrap(store)
    item = store.get((offloads.prefix, "t", "surface"), "runnable")
    assert item is not None
    assert item.value["records"][0]["window"] == _WINDOW_BEFORE_RARE_FIELDS
    archived = offloads.history_count("t")
    conversation += [AIMessage("a1"), HumanMessage("q2")]
    sent = chain.invoke({"messages": conversation}, cfg)
    assert [m.id for m in sent[1:6]] == [i for _, i in _WINDOW_BEFORE_RARE_FIELDS]
    assert offloads.history_count("t") == archived + 2  # only the added ones


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("fits", [True, False], ids=["fits", "over the budget"])
def test_a_window_over_more_than_256_messages_does_not_restart_the_runnable(
    use_async: bool, fits: bool
) -> None:
    """A ``trim_messages`` window of 300 id-less messages before the Runnable: a record
    keeps the prints of its last 256 messages only, and the drop was recognised only from
    the prints of all of them, so every call restarted: every message of the window was
    named again by its new place and archived again (301, 601, 901… originals) and, over
    the budget, compressed from scratch. The window continues its record now: each turn
    archives what it adds, compresses only when the budget needs it, and the record
    stays the same size."""
    import json

    from langchain_core.messages import trim_messages

    store = InMemoryStore()
    budget = {"max_tokens": 200_000, "msg_threshold": 1_000} if fits else {"max_tokens": 6_000}
    ac = AutoContext(**budget, store=store, self_management_tools=False)
    prompt = ChatPromptTemplate([("system", "Be terse."), MessagesPlaceholder("messages")])
    trim = trim_messages(
        max_tokens=300, token_counter=len, strategy="last", start_on="human", include_system=True
    )
    chain = prompt | trim | ac.as_runnable()
    cfg: Any = {"configurable": {"thread_id": "big"}}
    conversation: list[BaseMessage] = []
    for k in range(160):  # past the window: its first message is dropped from the start
        conversation += [HumanMessage(f"Question {k} {_words(6)}"), AIMessage(f"Answer {k}")]
    offloads = OffloadStore.wrap(store)
    counts, sizes, events = [], [], []
    for k in range(10):
        conversation.append(HumanMessage(f"Task {k} {_words(6)}"))
        run = {"messages": conversation}
        sent = asyncio.run(chain.ainvoke(run, cfg)) if use_async else chain.invoke(run, cfg)
        assert not find_violations(sent) and ac.counter.count(sent) <= ac.config.max_tokens
        assert sent[-1].content == conversation[-1].content
        conversation.append(AIMessage(f"Reply {k}"))
        counts.append(offloads.history_count("big"))
        events.append(len(offloads.list_events("big")))
        items = store.search((offloads.prefix,), limit=1000)
        sizes.append(sum(len(json.dumps(i.value)) for i in items if i.key == "runnable"))
    # the first call archives its window (and the system prompt); each later one the
    # previous reply and the new question
    assert [c - counts[0] for c in counts] == [2 * k for k in range(10)], counts
    window = (prompt | trim).invoke({"messages": conversation[:-1]})
    if fits:
        assert events[-1] == 0
        assert [m.content for m in sent] == [m.content for m in window]
    else:
        assert events[0] >= 1 and events[-1] - events[0] <= 3, events
        # the dropped messages left the managed list (what a summary holds aside)
        said = {m.content for m in window}
        assert all(m.content in said for m in sent[1:] if not marker(m))
    assert max(sizes) <= 1.2 * sizes[0], sizes


# --- a record an earlier version of the Runnable wrote ---------------------------------------
def _as_an_earlier_version_wrote_it(store: Any, thread_id: str) -> None:
    """Rewrite the thread's Runnable records as the version before windows wrote them
    (``inputs``, ``digest``, ``head``, ``messages``: the same digest, no window)."""
    offloads = OffloadStore.wrap(store)
    ns = (offloads.prefix, thread_id, "surface")
    item = store.get(ns, "runnable")
    old = ("inputs", "digest", "head", "messages")
    records = [{k: r[k] for k in old} for r in item.value["records"]]
    store.put(ns, "runnable", {"records": records}, index=False, ttl=None)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_record_of_the_earlier_version_is_continued_without_losing_a_message(
    tmp_path: Path, use_async: bool, backend: str
) -> None:
    """The first call after an upgrade extended the record the earlier version wrote, which
    counts the template's system message among its entries: the first message the input
    added was skipped (never sent to the model, never archived). It is continued message
    for message now, and a window that drops messages later takes them out."""
    store: Any = open_sqlite(tmp_path / "old.db") if backend == "sqlite" else InMemoryStore()
    ac = AutoContext(max_tokens=200_000, store=store, self_management_tools=False)
    chain = ChatPromptTemplate([("system", "Be terse."), MessagesPlaceholder("messages")]) | (
        ac.as_runnable()
    )
    cfg: Any = {"configurable": {"thread_id": "upgraded"}}
    conversation: list[BaseMessage] = [HumanMessage("q0"), AIMessage("a0"), HumanMessage("q1")]

    def call(messages: list[BaseMessage]) -> list[str]:
        run = {"messages": messages}
        out = asyncio.run(chain.ainvoke(run, cfg)) if use_async else chain.invoke(run, cfg)
        return [m.content for m in out]

    call(conversation)
    _as_an_earlier_version_wrote_it(store, "upgraded")
    conversation += [AIMessage("a1"), HumanMessage("q2")]
    assert call(conversation) == ["Be terse.", "q0", "a0", "q1", "a1", "q2"]
    conversation += [AIMessage("a2"), HumanMessage("q3")]
    assert call(conversation[2:]) == ["Be terse.", "q1", "a1", "q2", "a2", "q3"]
    said = [e.message.content for e in OffloadStore.wrap(store).iter_history("upgraded")]
    assert said == ["Be terse.", "q0", "a0", "q1", "a1", "q2", "a2", "q3"]
    if backend == "sqlite":
        store.conn.close()


# --- what recognising an input costs -------------------------------------------------------------
def _lines_run_by(function: Any) -> Any:
    """A context manager counting the lines ``function`` runs (a deterministic measure of
    its work, where a timing would not be): ``with counter as lines: …; lines[0]``."""
    import contextlib
    import sys

    @contextlib.contextmanager
    def counting() -> Any:
        lines = [0]
        code = function.__code__

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line":
                lines[0] += 1
            return local

        def tracer(frame: Any, event: str, arg: Any) -> Any:
            return local if frame.f_code is code else None

        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            yield lines
        finally:
            sys.settrace(previous)

    return counting()


@pytest.mark.parametrize("content", ["distinct", "repeated"])
def test_the_other_templates_record_costs_a_call_the_same_however_long_the_thread(
    content: str,
) -> None:
    """Two templates on one thread (a ``RunnableParallel``, each with its own few-shot
    example): each call looked for its input in the other template's record as in a
    window that dropped 1, 2, 3… of its messages, a few lines of Python for every message
    of the record (3,691 lines a turn at 600 messages, 14,491 at 2,400), and with id-less
    repeated messages (an agent loop's "continue", "ok") a comparison of the record's last
    256 for many of them. The window is looked for as one run in the input now, at C
    speed."""
    from langchain_autocontext import history

    def lines_per_call(n: int) -> int:
        ac = AutoContext(max_tokens=6_000, store=InMemoryStore(), self_management_tools=False)
        runnable = ac.as_runnable()
        templates = [
            ChatPromptTemplate([("system", "Be terse."), *shots, MessagesPlaceholder("m")])
            for shots in ([("human", "Example: 2+2?"), ("ai", "4")], [("human", "Is 2+2=5?")])
        ]
        conversation: list[BaseMessage] = []
        for k in range(n // 2):
            if content == "repeated":
                conversation += [HumanMessage("continue"), AIMessage("ok")]
            else:
                conversation += [HumanMessage(f"Question {k}"), AIMessage(f"Answer {k}")]
        cfg: Any = {"configurable": {"thread_id": "two"}}
        for template in templates:
            runnable.invoke(template.invoke({"m": conversation}), cfg)
        conversation += [HumanMessage("next"), AIMessage("done")]
        with _lines_run_by(history._continued) as lines:
            for template in templates:
                runnable.invoke(template.invoke({"m": conversation}), cfg)
        return lines[0]

    short, long = lines_per_call(600), lines_per_call(2_400)
    assert long <= short + 100, (short, long)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("content", ["distinct", "repeated"])
def test_two_templates_on_a_long_thread_each_send_their_own_examples(
    use_async: bool, content: str
) -> None:
    """Two templates on one thread (a ``RunnableParallel``), one with a longer few-shot
    prefix, over a conversation of more than 256 messages: the window of the first's
    record (its last 256 messages, the conversation's) stood in the second's input as a
    run, and the messages before it were taken as the record's without a check, so the
    second's input was taken for the first's with its first message dropped: its own
    example ("Is 2+2=5?") was never sent nor archived, and the other's answer ("4") was
    sent in its place. The record keeps the prints of its first 256 messages too: a
    window that drops messages must keep those of them it keeps as they were."""
    from langchain_core.runnables import RunnableParallel

    store = InMemoryStore()
    ac = AutoContext(
        max_tokens=200_000, msg_threshold=100_000, store=store, self_management_tools=False
    )
    templates = {
        name: ChatPromptTemplate([("system", "Be terse."), *shots, MessagesPlaceholder("m")])
        for name, shots in [
            ("answer", [("human", "Example: 2+2?"), ("ai", "4")]),
            ("critique", [("human", "Is 2+2=5?")]),
        ]
    }
    both = RunnableParallel({name: t | ac.as_runnable() for name, t in templates.items()})
    conversation: list[BaseMessage] = []
    for k in range(150):
        if content == "repeated":
            conversation += [HumanMessage("continue"), AIMessage("ok")]
        else:
            conversation += [HumanMessage(f"Question {k}"), AIMessage(f"Answer {k}")]
    cfg: Any = {"configurable": {"thread_id": "two"}}
    for turn in range(3):
        conversation += [HumanMessage(f"Task {turn}"), AIMessage(f"Done {turn}")]
        run = {"m": conversation}
        out = asyncio.run(both.ainvoke(run, cfg)) if use_async else both.invoke(run, cfg)
        for name, template in templates.items():
            want = [m.content for m in template.invoke(run).to_messages()]
            assert [m.content for m in out[name]] == want, (turn, name)
    said = [e.message.content for e in OffloadStore.wrap(store).iter_history("two")]
    assert "Is 2+2=5?" in said
