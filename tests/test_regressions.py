"""Tests that catch the regressions an adversarial review planted and the suite missed
(issue 13, "Tests that would catch a regression"): the sequence checker itself, the
pipeline's real budget at its boundary, every replacement's offload id, and the phrase
rule on common words."""

from __future__ import annotations

import hashlib

import pytest
from _builders import chat_rounds, coding_run, log_text, uid
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig, ContextBudgetError, OffloadStore
from langchain_autocontext.errors import InvariantViolationError
from langchain_autocontext.messages import assert_valid_sequence, find_violations, marker, pin
from langchain_autocontext.search import search_history
from langchain_autocontext.strategies.pipeline import minimal_context


def ai_call(*ids: str) -> AIMessage:
    calls = [{"name": "t", "args": {}, "id": i, "type": "tool_call"} for i in ids]
    return AIMessage("", tool_calls=calls, id=uid("ai"))


def result(call_id: str) -> ToolMessage:
    return ToolMessage("ok", tool_call_id=call_id, id=uid("tool"))


# --- the checker, on known-bad sequences -------------------------------------------------------
BAD: dict[str, list[BaseMessage]] = {
    "orphan result first": [result("a")],
    "orphan result after a plain message": [HumanMessage("hi"), result("a")],
    "result with a wrong call id": [HumanMessage("hi"), ai_call("a"), result("b")],
    "unanswered call then another message": [HumanMessage("hi"), ai_call("a"), HumanMessage("?")],
    "one of two calls unanswered then a message": [
        HumanMessage("hi"),
        ai_call("a", "b"),
        result("a"),
        AIMessage("done"),
    ],
    "second system message": [SystemMessage("s"), HumanMessage("hi"), SystemMessage("s2")],
    "system message not first": [HumanMessage("hi"), SystemMessage("s")],
    "result answering an older call": [
        HumanMessage("hi"),
        ai_call("a"),
        result("a"),
        ai_call("b"),
        result("b"),
        result("a"),
    ],
}
GOOD: dict[str, list[BaseMessage]] = {
    "answered calls": [
        SystemMessage("s"),
        HumanMessage("hi"),
        ai_call("a", "b"),
        result("b"),
        result("a"),
    ],
    "a pending last call": [SystemMessage("s"), HumanMessage("hi"), ai_call("a")],
    "plain chat": [HumanMessage("hi"), AIMessage("hello")],
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_the_checker_rejects_each_known_bad_sequence(name: str) -> None:
    assert find_violations(BAD[name]), name
    with pytest.raises(InvariantViolationError):
        assert_valid_sequence(BAD[name])


@pytest.mark.parametrize("name", sorted(GOOD))
def test_the_checker_accepts_valid_sequences(name: str) -> None:
    assert find_violations(GOOD[name]) == []
    assert_valid_sequence(GOOD[name])


# --- the pipeline's real budget, at its boundary -----------------------------------------------
def test_at_the_budget_boundary_a_call_either_fits_or_is_refused_before_sending() -> None:
    """The pipeline works to ``max_tokens`` minus what the view adds (instructions,
    working context, notices). Sweep the incompressible part (the latest user message)
    word by word across the boundary: every size either raises ``ContextBudgetError``
    from ``compress`` or yields a view that ``prepare_model_call`` builds within
    ``max_tokens`` with the memory-pressure notice it owes (the context is far past
    ``warning_ratio``), or without it only when what can never be compressed leaves it
    no room (a call that fits is not refused for a notice the view drops). A pipeline that worked to a looser budget would compress sizes
    whose view has no room left for the notice."""
    ac = AutoContext(AutoContextConfig(max_tokens=2_000, disclosure="always"))
    state = {"working_context": "Customer prefers email; order 4471 ships Friday. " * 12}
    history = coding_run(3, output_lines=30)[:-2]

    def attempt(words: int) -> int | None:
        msgs = [*history, HumanMessage("please " * words, id="latest")]
        try:
            done = ac.compress(msgs, state=state, thread_id="boundary")
        except ContextBudgetError:
            return None
        call = ac.prepare_model_call(done.messages, state=state)
        assert call.tokens <= ac.config.max_tokens, words
        warning = ac.config.thresholds(ac.floor_tokens(done.messages)).warning
        if call.tokens >= warning and not call.pressure:  # a first crossing: the notice
            # is owed, unless what can never be compressed leaves it no room: then the
            # call, which fits, is sent without it (the view drops it), never refused
            rest = minimal_context(done.messages)
            assert [m.id for m in done.messages] == [m.id for m in rest], (
                f"{words}: no room was kept for the memory-pressure notice"
            )
        return call.tokens

    lo, hi = 1, 4_000  # lo fits, hi does not
    assert attempt(lo) is not None and attempt(hi) is None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if attempt(mid) is not None else (lo, mid)
    for words in range(lo - 60, lo + 60):
        attempt(words)  # asserts inside: fits, or refused before anything is sent
    assert attempt(lo + 1) is None


# --- every replacement names an offload that reloads its originals ----------------------------
CASES: dict[str, tuple[list[BaseMessage] | None, AutoContextConfig]] = {
    "coding run": (coding_run(40, output_lines=80), AutoContextConfig(max_tokens=6_000)),
    "chat rounds": (chat_rounds(30), AutoContextConfig(max_tokens=5_000)),
    "long tool runs": (
        chat_rounds(12, tools_per_round=9, output_lines=6),
        AutoContextConfig(max_tokens=4_000, min_consecutive_tool_messages=2),
    ),
    "small budget": (coding_run(60, output_lines=20), AutoContextConfig(max_tokens=2_500)),
    "large outputs": (
        chat_rounds(15, output_lines=400),
        AutoContextConfig(max_tokens=24_000, last_keep=4),
    ),
    "long assistant messages": (None, AutoContextConfig(max_tokens=6_000)),
    # A pinned plan right after the task keeps the current round's oldest work from
    # being summarized by age (strategy 6 never summarizes across a pin): the size-driven
    # strategies, tool runs (1) and large messages (5), then have to reach the target.
    "pinned plan, tool runs": (
        None,
        AutoContextConfig(max_tokens=6_000, last_keep=4, min_consecutive_tool_messages=2),
    ),
    "pinned plan, long analyses": (
        None,
        AutoContextConfig(max_tokens=6_000, last_keep=4, min_consecutive_tool_messages=50),
    ),
}
#: Every strategy but the last resort (which only an impossible-looking budget reaches).
STRATEGIES = {
    "offload_history",
    "offload_all",
    "tool_run",
    "round",
    "current_large",
    "current_round",
    "fifo",
}
FIRED: set[str] = set()


def writer(steps: int) -> list[BaseMessage]:
    """An agent writing long plans (each ~2,000 characters) with a short tool result."""
    msgs: list[BaseMessage] = [SystemMessage("You write code."), HumanMessage("Write it.")]
    for s in range(steps):
        cid = uid("c")
        call = {"name": "write", "args": {"path": f"m{s}.py"}, "id": cid, "type": "tool_call"}
        msgs.append(AIMessage(f"Plan {s}: " + log_text(45, s), tool_calls=[call], id=uid("a")))
        msgs.append(ToolMessage("written", tool_call_id=cid, id=uid("t")))
    return msgs


def pinned_plan(steps: int, *, analyses: bool) -> list[BaseMessage]:
    """A pinned plan after the task, then tool calls; with ``analyses`` a long assistant
    analysis (no tool call, ~1,900 characters) between every two calls."""
    plan = pin(AIMessage("Plan: read each module, fix the parser, run the tests.", id=uid("p")))
    msgs: list[BaseMessage] = [SystemMessage("You write code."), HumanMessage("Fix it."), plan]
    for s in range(steps):
        if analyses and s % 2:
            msgs.append(AIMessage(f"Analysis {s}: " + log_text(40, s), id=uid("a")))
        cid = uid("c")
        call = {"name": "read", "args": {"path": f"m{s}.py"}, "id": cid, "type": "tool_call"}
        msgs.append(AIMessage("", tool_calls=[call], id=uid("a")))
        msgs.append(ToolMessage(log_text(6, s), tool_call_id=cid, id=uid("t")))
    return msgs


BUILDERS = {
    "long assistant messages": lambda: writer(30),
    "pinned plan, tool runs": lambda: pinned_plan(60, analyses=False),
    "pinned plan, long analyses": lambda: pinned_plan(40, analyses=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_replacement_names_an_offload_that_reloads_exactly_its_originals(case: str) -> None:
    messages, config = CASES[case]
    messages = messages if messages is not None else BUILDERS[case]()
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(config, store=store)
    working: list[BaseMessage] = []
    originals = {m.id: m for m in messages}
    fired: set[str] = set()
    cursor = 0
    for k in range(2, len(messages) + 1, 3):  # the run grows, compressing as it goes
        working = ac.compress([*working, *messages[cursor:k]], thread_id=case).messages
        cursor = k
    events = store.list_events(case)
    for event in events:
        fired.add(event.strategy)
        for oid in event.data.get("offload_ids", []):
            assert oid, f"{event.strategy} wrote an empty offload id"
    records = {r.offload_id: r for r in store.list_offloads(case)}
    for m in working:
        info = marker(m) or {}
        if "offload_id" not in info:
            continue
        oid = info["offload_id"]
        assert oid and oid in records, f"{info.get('kind')} names offload {oid!r}, not stored"
    for record in records.values():
        assert record.messages, record.offload_id
        for original in record.messages:
            if marker(original):  # a preview or summary replaced again: a chain back
                continue
            assert original.id in originals, record.strategy
            assert original.content == originals[original.id].content, record.strategy
    assert fired, f"{case}: nothing was compressed"
    FIRED.update(fired)


def test_the_cases_above_exercise_every_strategy() -> None:
    if len(FIRED) < len(STRATEGIES):  # run alone: replay the cases
        for case in CASES:
            test_every_replacement_names_an_offload_that_reloads_exactly_its_originals(case)
    assert FIRED >= STRATEGIES, sorted(STRATEGIES - FIRED)


# --- the phrase rule, on common words ---------------------------------------------------------
def test_an_exact_phrase_of_common_words_ranks_first() -> None:
    """Every message holds both query words, the decoys more often; only one holds them
    as the phrase. Without the phrase rule BM25 ranks a decoy first."""
    store = OffloadStore(InMemoryStore())
    texts = [
        "the car was red and the other car was red too",
        "red paint on a car door, red trim, a car mat",
        "a car wash near the red barn; car keys on the red table",
        "we took the red car to the coast",
        "car seats, red lights, car horns, red signs",
    ]
    msgs = [HumanMessage(t, id=f"m{k}") for k, t in enumerate(texts)]
    store.append_history("t", msgs)
    hits = search_history(store, "t", "red car", 3)
    assert hits[0].id == "m3"


# --- issue 13, item 1 through the create_react_agent hooks -------------------------------------
def test_two_parallel_results_just_under_the_threshold_keep_a_hooks_agent_alive() -> None:
    """Two parallel results of ~4,900 characters at 6,000 tokens failed with the hooks;
    the run goes on, every request within the budget, a later turn too."""
    from _builders import FunctionModel, call, self_managed_agent
    from langchain_core.tools import tool

    @tool
    def read(path: str) -> str:
        """Read a file."""
        digest = hashlib.sha256(path.encode()).hexdigest()
        lines = [
            f"{k:04d} {hashlib.sha256(f'{digest}{k}'.encode()).hexdigest()}" for k in range(80)
        ]
        return "\n".join(lines)[:4_900]  # just under large_payload_threshold, ~2,400 tokens

    def respond(view: list[BaseMessage], n: int) -> AIMessage:
        if isinstance(view[-1], HumanMessage):
            return AIMessage(
                "", tool_calls=[call("read", {"path": f"m{n}-{k}.py"}) for k in range(2)]
            )
        return AIMessage(f"read them ({n})")

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=6_000), store=store)
    model = FunctionModel(respond=respond)
    graph = self_managed_agent(ac, model, store, tools=[read])
    cfg = {"configurable": {"thread_id": "hooks"}}
    for turn in ("read the two modules", "and two more"):
        out = graph.invoke({"messages": [HumanMessage(turn)]}, cfg)
        assert out["messages"][-1].content.startswith("read them")
    for sent in model.seen:
        assert not find_violations(sent)
        assert ac.counter.count(sent, ac.count_tools) <= 6_000


def test_the_view_keeps_no_copy_of_messages_that_are_gone() -> None:
    """A checkpointer hands back new message objects on every call. The view's memo of
    derived copies (tagged, with the section) kept each copy until 100,000 newer ones
    pushed it out: 80-250 MB in a long run, and a deleted thread's text stayed in the
    process (soak audit). A copy now goes with its source."""
    import gc

    from langchain_autocontext import copies as messages

    ac = AutoContext(AutoContextConfig(max_tokens=8_000, disclosure="always"))
    base = [
        SystemMessage("You are terse.", id="s"),
        HumanMessage("my password is hunter2-XYZZY", id="u"),
        *[AIMessage(f"step {k} " + log_text(5, k), id=f"a{k}") for k in range(10)],
    ]
    before = len(messages._MEMO)
    for _ in range(200):  # as a checkpointer would: the same messages, new objects
        ac.prepare_model_call([m.model_copy() for m in base])
    gc.collect()
    messages.drop_dead_copies()
    assert len(messages._MEMO) - before < 4 * len(base)
    del base
    gc.collect()
    messages.drop_dead_copies()
    left = [c for _, c in messages._MEMO.values() if "hunter2-XYZZY" in str(c.content)]
    assert not left


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_system_message_in_the_middle_is_archived_as_it_was(mode: str) -> None:
    """Several system messages become one, first (providers reject others). The merge
    came before the archive, so a system message in the middle of a run was never
    archived, and the first one was archived with the merged text (replay audit)."""
    import asyncio

    msgs = [
        SystemMessage("You are terse.", id="s1"),
        HumanMessage("hi", id="u1"),
        AIMessage("hello", id="a1"),
        SystemMessage("From now on answer in French.", id="s2"),
        HumanMessage("and now?", id="u2"),
    ]
    ac = AutoContext(AutoContextConfig(max_tokens=8_000))
    store = OffloadStore(InMemoryStore())
    if mode == "sync":
        out = ac.compress(msgs, thread_id="t", store=store)
    else:
        out = asyncio.run(ac.acompress(msgs, thread_id="t", store=store))
    assert [m.id for m in out.messages] == ["s1", "u1", "a1", "u2"]  # one system message
    history = {e.id: e.message.content for e in store.iter_history("t")}
    assert history["s1"] == "You are terse."
    assert history["s2"] == "From now on answer in French."


def test_an_empty_system_message_adds_no_empty_block_to_a_merged_list_prompt() -> None:
    """A system prompt in content blocks (Anthropic's cache_control) merged with an empty
    system message (a template whose optional instructions were left empty) gained an
    empty text block, which Anthropic rejects (provider-blocks audit)."""
    prompt = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    msgs = [
        SystemMessage(prompt, id="s1"),
        SystemMessage("", id="s2"),
        HumanMessage("hi", id="u1"),
    ]
    out = AutoContext(AutoContextConfig(max_tokens=8_000)).compress(msgs)
    assert out.messages[0].content == prompt


# --- the last resort's previews, in scripts that take more tokens than characters ---------------
@pytest.mark.parametrize(
    ("text", "calls", "budget"),
    [
        (
            "ログファイルを確認しました。エラーは見つかりませんでした。次のステップに進みます。",
            18,
            4_000,
        ),
        ("🚀✅🔥😀🎉", 7, 4_000),
        ("🚀✅🔥😀🎉", 14, 8_000),
    ],
    ids=["japanese-18-at-4k", "emoji-7-at-4k", "emoji-14-at-8k"],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_many_parallel_results_in_a_dense_script_do_not_stop_the_run(
    text: str, calls: int, budget: int, mode: str
) -> None:
    """One turn of parallel calls whose results are 3,000 characters of Japanese or
    emoji: the last resort offloaded each with a 200-*character* preview (about 190
    tokens of Japanese, 520 of emoji, against 50 of English), the freshest group's
    previews were never shortened again, and the run stopped with ContextBudgetError
    though the system prompt, schemas and user message took under 300 tokens (audit).
    The last resort's previews are now capped in tokens too."""
    import asyncio

    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    @tool
    def fetch_page(url: str) -> str:
        """Fetch a web page."""
        return (text * 1_000)[:3_000]

    seen: list[list[BaseMessage]] = []

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools, **kw):  # type: ignore[no-untyped-def]
            return self

        def _generate(self, messages, *args, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(list(messages))
            return super()._generate(messages, *args, **kwargs)

    tool_calls = [
        {"name": "fetch_page", "args": {"url": f"https://example.jp/{k}"}, "id": f"c{k}"}
        for k in range(calls)
    ]
    script = iter([AIMessage("", tool_calls=tool_calls), AIMessage("summary of the pages")])
    store = InMemoryStore()
    ac = AutoContext(max_tokens=budget, store=store)
    agent = create_agent(
        Scripted(messages=script),
        [fetch_page],
        system_prompt="You research.",
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    run = {"messages": [HumanMessage("Read these pages.")]}
    cfg = {"configurable": {"thread_id": f"{mode}-{calls}"}}
    out = agent.invoke(run, cfg) if mode == "sync" else asyncio.run(agent.ainvoke(run, cfg))
    assert out["messages"][-1].content == "summary of the pages"
    last = seen[-1]
    assert not find_violations(last)
    assert ac.counter.count(last, [fetch_page, *ac.tools]) <= budget
    # every result is still there, offloaded with its id, and reloads whole
    shown = [m for m in last if isinstance(m, ToolMessage)]
    assert len(shown) == calls
    offloaded = OffloadStore(store).list_offloads(cfg["configurable"]["thread_id"])
    bodies = "".join(m.content for r in offloaded for m in r.messages if isinstance(m, ToolMessage))
    assert bodies.count((text * 1_000)[:3_000]) == sum(marker(m) is not None for m in shown)


# --- a floor that fits once the droppable pressure notice is left out ---------------------
@pytest.mark.parametrize("fields", [{}, {"self_management_tools": False, "metadata_tags": False}])
def test_floor_that_fits_without_the_pressure_notice_is_sent(fields: dict) -> None:
    """A system prompt plus "hi" that the view sends within max_tokens (it drops the
    memory-pressure notice rather than exceed the budget) was refused by compress with
    ContextBudgetError: the pipeline counted the notice's reserve as room the floor
    could never use (budget audit)."""
    ac = AutoContext(AutoContextConfig(max_tokens=8_000, **fields))
    for n in range(7_700, 8_000, 5):
        msgs = [SystemMessage("Rule " * n), HumanMessage("hi")]
        view = ac.prepare_model_call(msgs)  # nothing to compress: what would be sent
        if view.tokens > 8_000 - 40:  # inside the notice's reserve
            break
    assert 8_000 - 70 < view.tokens <= 8_000
    result = ac.compress(msgs)  # raised ContextBudgetError although the floor fits
    call = ac.prepare_model_call(result.messages)
    assert call.tokens <= 8_000
    assert ac.counter.count(call.messages, ac.count_tools) <= 8_000
