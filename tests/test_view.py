"""The model's input view: generated section, working context, tags, short ids, notices."""

from __future__ import annotations

import re
import uuid
import warnings
from typing import Any

import pytest
from _builders import (
    FunctionModel,
    call,
    chat_rounds,
    fetch,
    self_managed_agent,
    self_managed_graph,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig, ContextBudgetError, pin
from langchain_autocontext.messages import find_violations, marker
from langchain_autocontext.tokens import TokenCounter
from langchain_autocontext.view import (
    INSTRUCTIONS_ID,
    NOTICE_ID,
    OPENER_ID,
    build_view,
    resolve_message_ref,
    short_id_map,
    system_section,
)

#: This module checks the detailed modes: the full section and the seed's tags (the
#: compact defaults are checked in test_overhead.py).
DETAILED = {
    "instructions": "full",
    "tag_format": "seed",
    "disclosure": "always",
    "metadata_tags": True,
}
CFG = AutoContextConfig(max_tokens=8_000, **DETAILED)
TAG = re.compile(
    r'<metadata id="([^"]*)" cumulative_message_token_count="(\d+)" message_token_count="(\d+)"/>'
)


def convo(n: int = 3) -> list:
    msgs = [
        SystemMessage("You help.", id=str(uuid.uuid4())),
        HumanMessage("hi", id=str(uuid.uuid4())),
    ]
    for k in range(n):
        msgs.append(AIMessage(f"answer {k}", id=str(uuid.uuid4())))
        msgs.append(HumanMessage(f"question {k}", id=str(uuid.uuid4())))
    return msgs


# --- the generated section ---------------------------------------------------------------------
def test_the_section_teaches_what_is_on_and_nothing_else() -> None:
    full = system_section(CFG.model_copy(update={"xml_commands": True}))
    for phrase in ("<metadata id=", "update_message(", "<delete id=", "Working context", "70%"):
        assert phrase in full
    no_tools = system_section(CFG.model_copy(update={"self_management_tools": False}))
    assert "update_message(" not in no_tools and "<delete id=" not in no_tools
    assert "<metadata id=" in no_tools and "Memory pressure" in no_tools
    off = CFG.model_copy(
        update={"metadata_tags": False, "self_management_tools": False, "xml_commands": False}
    )
    assert system_section(off) == ""
    view = AutoContext(off).prepare_model_call(convo())
    assert view.messages[0].content == "You help."  # nothing added at all
    assert system_section(CFG) == system_section(CFG)  # stable: the prompt cache survives
    # without the tags the model has no ids: the tools that take them are neither offered
    # nor taught, nor is editing suggested under memory pressure
    untagged = CFG.model_copy(update={"metadata_tags": False})
    taught = system_section(untagged)
    offered = {t.name for t in AutoContext(untagged).tools}
    for name in ("update_message", "delete_message", "pin_message"):
        assert f"{name}(" not in taught and name not in offered
    for name in ("reload_offloaded", "search_history", "working_context_append"):
        assert f"{name}(" in taught and name in offered
    assert "delete what you no longer need" not in taught


def test_working_context_is_rendered_into_the_system_prompt() -> None:
    ac = AutoContext(CFG)
    msgs = convo()
    call_ = ac.prepare_model_call(msgs, state={"working_context": "deadline: friday"})
    system = call_.messages[0]
    assert isinstance(system, SystemMessage) and system.id == msgs[0].id
    assert system.content.startswith("You help.\n\n# Your context window")
    assert "<working_context>\ndeadline: friday\n</working_context>" in system.content
    assert "(16/5,000 characters, at most 1,000 tokens)" in system.content
    assert msgs[0].content == "You help."  # never mutated
    assert not find_violations(call_.messages)


def test_without_a_system_message_the_section_is_one() -> None:
    ac = AutoContext(CFG)
    msgs = convo()[1:]
    view = ac.prepare_model_call(msgs).messages
    assert isinstance(view[0], SystemMessage) and view[0].id == INSTRUCTIONS_ID
    assert sum(isinstance(m, SystemMessage) for m in view) == 1


def test_an_agent_owned_prompt_gets_the_instructions_as_a_message_after_the_summary() -> None:
    """create_react_agent(prompt=…) adds its own system message: no second one from us."""
    store = InMemoryStore()
    cfg = AutoContextConfig(max_tokens=3_000, msg_threshold=20, last_keep=4, **DETAILED)
    ac = AutoContext(cfg, store=store, system_prompt="You are an airline agent.")
    history = chat_rounds(8)[1:]  # no system message: the agent adds it
    result = ac.compress(history, thread_id="t", state={"working_context": "PNR R0003"})
    view = ac.prepare_model_call(result.messages, state={"working_context": "PNR R0003"})
    msgs = view.messages
    assert not any(isinstance(m, SystemMessage) for m in msgs)
    assert (marker(msgs[0]) or {}).get("kind") == "summary"  # the recursive summary first
    assert msgs[1].id == INSTRUCTIONS_ID and "PNR R0003" in msgs[1].content
    # counted with the agent's prompt in front: the tags' totals include it
    sent = [SystemMessage("You are an airline agent."), *msgs]
    assert view.tokens == ac.counter.count(sent, ac.count_tools)
    assert view.tokens <= cfg.max_tokens


# --- tags and short ids ------------------------------------------------------------------------
def test_tags_are_exact_and_use_short_unique_ids() -> None:
    ac = AutoContext(CFG)
    msgs = convo(5)
    call_ = ac.prepare_model_call(msgs, state={"working_context": "x"})
    fresh = TokenCounter()
    tools = ac.count_tools
    assert call_.tokens == fresh.count(call_.messages, tools)
    running = fresh.reply_priming + fresh.count_tools(tools)
    for sent, original in zip(call_.messages, msgs, strict=True):
        running += fresh.count_message(sent)
        if isinstance(sent, SystemMessage):
            continue
        shown, cumulative, count = TAG.match(sent.content).groups()
        assert int(count) == fresh.count_message(sent) and int(cumulative) == running
        assert len(shown) == 8 and original.id.startswith(shown)
        idx, why = resolve_message_ref(msgs, shown)
        assert why is None and msgs[idx] is original
    assert call_.id_map == {m.id: m.id[:8] for m in msgs if not isinstance(m, SystemMessage)}
    assert call_.messages[0].id == msgs[0].id  # the system message is not tagged


def test_ids_that_are_not_uuid4_are_shown_whole() -> None:
    ids = ["lc_run--01a20054-5e1e-736a-98a1-dff5f827f574-0", "m1", "chatcmpl-abc"]
    assert short_id_map(ids) == {}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.uuids(version=4).map(str), min_size=1, max_size=40, unique=True),
    st.data(),
)
def test_short_ids_resolve_to_their_own_message(ids: list[str], data) -> None:
    # some ids share long prefixes with others (the hard case)
    twins = data.draw(st.lists(st.sampled_from(ids), max_size=5))
    for t in twins:
        cut = data.draw(st.integers(8, 20))
        tail = str(uuid.uuid4())[cut:]
        ids.append(t[:cut] + tail)
    ids = list(dict.fromkeys(i for i in ids if len(i) == 36))
    msgs = [HumanMessage("x", id=i) for i in ids]
    shown = short_id_map(ids)
    for i, m in enumerate(msgs):
        ref = shown.get(m.id, m.id)
        assert ref == m.id or ref not in ids
        idx, why = resolve_message_ref(msgs, ref)
        assert why is None and idx == i


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_short_ids_stay_put_as_messages_are_added(data) -> None:
    """A new message never changes the short id of an earlier one (the model keeps
    using what it was shown, the prompt prefix stays cached), even when it shares
    that short id's characters; every shown id still names its own message."""
    prefixes = ["abcd", "abce", "0000"]
    ids: list[str] = []
    for _ in range(data.draw(st.integers(2, 30))):
        u = str(uuid.uuid4())
        if data.draw(st.booleans()):  # a collision on the first characters
            u = data.draw(st.sampled_from(prefixes)) + u[4:]
        if data.draw(st.integers(0, 4)) == 0:  # a LangChain run id (shown by its alias)
            u = f"lc_run--{u}-0"
        ids.append(u)
    ids = list(dict.fromkeys(ids))
    msgs = [HumanMessage("x", id=i) for i in ids]
    for min_length, aliases in ((4, True), (8, False)):
        before = {}
        for n in range(1, len(ids) + 1):
            shown = short_id_map(ids[:n], min_length=min_length, aliases=aliases)
            assert all(shown.get(i) == s for i, s in before.items()), "an earlier id moved"
            before = shown
            for k, m in enumerate(msgs[:n]):
                idx, why = resolve_message_ref(msgs[:n], shown.get(m.id, m.id))
                assert why is None and idx == k


def test_a_colliding_new_message_leaves_the_shown_id_working() -> None:
    ac = AutoContext(AutoContextConfig(max_tokens=16_000, disclosure="always", metadata_tags=True))
    old = AIMessage("the old answer", id="abcd" + str(uuid.uuid4())[4:])
    msgs = [SystemMessage("s", id="s"), HumanMessage("q", id=str(uuid.uuid4())), old]
    first = ac.prepare_model_call(msgs)
    assert first.id_map[old.id] == "abcd"
    new = AIMessage("a new answer", id="abcd" + str(uuid.uuid4())[4:])
    second = ac.prepare_model_call([*msgs, new])
    assert second.messages[2].content == first.messages[2].content  # same tag, same prefix
    assert second.id_map[old.id] == "abcd" and len(second.id_map[new.id]) > 4
    assert resolve_message_ref([*msgs, new], "abcd") == (2, None)
    assert resolve_message_ref([*msgs, new], second.id_map[new.id]) == (3, None)


def test_ambiguous_and_view_only_refs() -> None:
    msgs = [HumanMessage("a", id="abcd1111-x"), HumanMessage("b", id="abcd2222-y")]
    assert resolve_message_ref(msgs, "abcd")[1].startswith("ambiguous")
    assert resolve_message_ref(msgs, "abcd2")[0] == 1
    assert resolve_message_ref(msgs, NOTICE_ID) == (None, "view-only")
    assert resolve_message_ref(msgs, "zzz") == (None, "missing")


# --- memory pressure ------------------------------------------------------------------------------
def test_pressure_notice_once_per_crossing_and_rearmed() -> None:
    cfg = AutoContextConfig(max_tokens=4_000, warning_ratio=0.5, **DETAILED)
    ac = AutoContext(cfg)
    base = convo(1)
    big = [*base, AIMessage("z " * 1_400, id=str(uuid.uuid4())), HumanMessage("go", id="u-last")]
    first = ac.prepare_model_call(big)
    assert first.pressure and first.messages[-1].id == NOTICE_ID
    assert "Memory pressure" in first.messages[-1].content
    assert "working_context_append" in first.messages[-1].content
    assert first.state_update["pressure_warned"] is True
    again = ac.prepare_model_call(big, state=first.state_update)
    assert not again.pressure and again.messages[-1].id != NOTICE_ID
    below = ac.prepare_model_call(base, state=first.state_update)
    assert below.state_update["pressure_warned"] is False  # re-armed
    third = ac.prepare_model_call(big, state=below.state_update)
    assert third.pressure
    for c in (first, again, below, third):
        assert c.tokens <= cfg.max_tokens


def test_the_warning_moves_up_with_what_cannot_be_compressed() -> None:
    """A large system prompt moves the trigger up (AutoContextConfig.thresholds); the
    memory-pressure notice moves with it, so that it still comes just before compaction,
    and it names the trigger that applies."""
    cfg = AutoContextConfig(max_tokens=6_000, **DETAILED)
    ac = AutoContext(cfg)
    rules = "\n".join(f"Rule {i}: cite the source of every figure." for i in range(150))
    head = [SystemMessage(rules, id=str(uuid.uuid4())), HumanMessage("go", id=str(uuid.uuid4()))]
    limits = cfg.thresholds(ac.floor_tokens(head))
    assert limits.warning > cfg.warning_tokens and limits.trigger > cfg.trigger_tokens

    def call_at(tokens: int):
        words = 1
        while True:
            msgs = [*head, AIMessage("w " * words, id="fill")]
            view = ac.prepare_model_call(msgs)
            plain = ac.counter.count(
                [m for m in view.messages if m.id != NOTICE_ID], ac.count_tools
            )
            if plain >= tokens:
                return view, plain
            words += max(1, (tokens - plain) // 2)

    below, plain = call_at(cfg.warning_tokens + 50)
    assert plain < limits.warning and not below.pressure  # past the old warning: quiet
    above, plain = call_at(limits.warning + 10)
    assert plain >= limits.warning and above.pressure
    assert f"Past {limits.trigger:,} tokens" in above.messages[-1].content


def test_a_notice_never_breaks_the_budget() -> None:
    cfg = AutoContextConfig(max_tokens=2_000, warning_ratio=0.1, **DETAILED)
    ac = AutoContext(cfg, token_counter=TokenCounter())
    msgs = convo(1)
    filler = AIMessage("", id=str(uuid.uuid4()))
    # grow the context until the plain view is just under max_tokens
    words = 1
    while True:
        filler = filler.model_copy(update={"content": "w " * words})
        trial = [*msgs, filler, HumanMessage("go", id="u")]
        plain = build_view(
            trial,
            config=cfg.model_copy(update={"warning_ratio": 1.0}),
            counter=ac.counter,
            tools=ac.count_tools,
            state={"pressure_warned": True},
        )
        if plain.tokens > cfg.max_tokens - 20:
            break
        words += 20
    view = ac.prepare_model_call(trial)
    assert view.tokens <= cfg.max_tokens and not view.pressure


def test_an_uncompressed_context_is_refused_not_sent() -> None:
    ac = AutoContext(AutoContextConfig(max_tokens=1_000))
    msgs = [*convo(1), ToolMessage("x " * 3_000, tool_call_id="c", id="t")]
    msgs[-2] = AIMessage("", tool_calls=[call("fetch", {"name": "a"}, "c")], id="a")
    with pytest.raises(ContextBudgetError, match="Compress the working messages"):
        ac.prepare_model_call(msgs)


# --- the invariant on the view, through a long run -------------------------------------------------
@pytest.mark.parametrize("owned_prompt", [False, True])
def test_every_view_sent_fits_max_tokens_in_a_long_run(owned_prompt: bool) -> None:
    """Long run, big working context, tags, XML and tools: what is sent never exceeds max."""
    cfg = AutoContextConfig(
        max_tokens=5_000,
        xml_commands=True,
        last_keep=6,
        msg_threshold=40,
        warning_ratio=0.6,
        working_context_max_chars=1_500,
    )
    store = InMemoryStore()
    prompt = "You are a researcher." if owned_prompt else None
    ac = AutoContext(cfg, store=store, system_prompt=prompt, tools=[fetch])

    def respond(view, n):
        if n % 7 == 3:
            return AIMessage(
                "", tool_calls=[call("working_context_append", {"text": f"n{n} " * 40})]
            )
        if n < 60:
            return AIMessage(
                f"step {n}", tool_calls=[call("fetch", {"name": f"doc{n}", "size": 60})]
            )
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        from langchain_autocontext import AutoContextAgentState

        agent = create_react_agent(
            model,
            [fetch, *ac.tools],
            prompt=prompt,
            pre_model_hook=ac.pre_model_hook,
            post_model_hook=ac.post_model_hook,
            state_schema=AutoContextAgentState,
            checkpointer=InMemorySaver(),
            store=store,
        )
    first = [HumanMessage("research it")]
    if not owned_prompt:
        first.insert(0, SystemMessage("You are a researcher."))
    out = agent.invoke(
        {"messages": first}, {"configurable": {"thread_id": "L"}, "recursion_limit": 400}
    )
    assert out["messages"][-1].content == "done"
    assert len(out["autocontext"]["working_context"]) > 1_000
    notices = 0
    previous = False
    engaged = False
    for sent in model.seen:
        assert not find_violations(sent)
        assert sum(isinstance(m, SystemMessage) for m in sent) == 1
        assert ac.counter.count(sent, ac.count_tools) <= cfg.max_tokens
        shown = "# Context: 5,000 tokens" in str(sent[0].content) or any(
            m.id == INSTRUCTIONS_ID for m in sent
        )
        # the section appears once the package engages, and stays (one prefix change)
        assert shown or not engaged
        engaged = engaged or shown
        notice = any(m.id == NOTICE_ID and "Memory pressure" in m.content for m in sent)
        base = ac.counter.count([m for m in sent if m.id != NOTICE_ID], ac.count_tools)
        # the warning sits at warning_tokens moved up with what cannot be compressed
        # (AutoContextConfig.thresholds): never below warning_tokens, once per crossing
        assert not notice or base >= cfg.warning_tokens
        assert not (notice and previous)
        previous = notice
        notices += notice
    assert notices >= 1 and engaged


def test_model_call_update_helper() -> None:
    ac = AutoContext(CFG)
    view = ac.prepare_model_call(convo())
    reply = AIMessage("ok")
    assert view.update(reply) == {"messages": [reply], "autocontext": {"working_context": ""}}
    again = ac.prepare_model_call(convo(), state=view.state_update)
    assert again.state_update == {} and again.update(reply) == {"messages": [reply]}


def test_the_hook_persists_what_it_must() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)
    model = FunctionModel(respond=lambda view, n: AIMessage("hello"))
    out = self_managed_agent(ac, model, store).invoke(
        {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "h"}}
    )
    assert out["autocontext"] == {"working_context": ""}
    assert "llm_input_messages" not in out or out["messages"][0].id != INSTRUCTIONS_ID
    assert all(m.id != INSTRUCTIONS_ID for m in out["messages"])  # the view is never persisted


SIGNATURE = "EqQBCkgIARABGAIiQL" + "x" * 120


def _thinking_loop() -> list:
    """An Anthropic extended-thinking tool loop, as langchain-anthropic records it, and
    an OpenAI Responses reply with a reasoning item."""
    tool_call = {"name": "screenshot", "args": {}, "id": "toolu_01", "type": "tool_call"}
    return [
        SystemMessage("You are a coding agent.", id="sys"),
        HumanMessage("Fix the bug.", id="u"),
        AIMessage(
            [{"type": "reasoning", "id": "rs_1", "summary": []}, {"type": "text", "text": "Ok."}],
            id="msg_1",
        ),
        HumanMessage("Go on.", id="u2"),
        AIMessage(
            [
                {"type": "redacted_thinking", "data": "ENCRYPTED" * 10},
                {"type": "thinking", "thinking": "Look at the screen.", "signature": SIGNATURE},
                {"type": "tool_use", "id": "toolu_01", "name": "screenshot", "input": {}},
            ],
            tool_calls=[tool_call],
            id="lc_run--loop",
        ),
        ToolMessage("screenshot taken", tool_call_id="toolu_01", id="t1"),
    ]


@pytest.mark.parametrize("fmt", ["compact", "seed"])
def test_a_tag_goes_after_the_blocks_a_provider_requires_first(fmt: str) -> None:
    """Anthropic requires the assistant turn that continues a tool loop to start with
    its thinking blocks, unchanged: the tag goes right after them. An OpenAI reasoning
    item must be followed by the reply it produced: the tag goes before it. The counts
    stay exact."""
    msgs = _thinking_loop()
    ac = AutoContext(
        AutoContextConfig(max_tokens=8_000, disclosure="always", tag_format=fmt, metadata_tags=True)
    )
    view = ac.prepare_model_call(msgs)
    assert len(view.messages) == len(msgs)
    for before, m in zip(msgs, view.messages, strict=True):
        if not isinstance(before.content, list):
            continue
        original = before.content
        lead = [b for b in original if b.get("type") in ("thinking", "redacted_thinking")]
        assert m.content[: len(lead)] == lead  # first and unchanged
        tag = m.content[len(lead)]
        assert tag["type"] == "text" and re.match(r"<\S", tag["text"])
        assert m.content[len(lead) + 1 :] == original[len(lead) :]
    assert view.tokens == TokenCounter().count(view.messages, ac.count_tools)
    anthropic = pytest.importorskip("langchain_anthropic.chat_models")
    _system, formatted = anthropic._format_messages(
        view.messages[:1] + view.messages[3:], model="claude-sonnet-4-5"
    )
    last = [m for m in formatted if m["role"] == "assistant"][-1]
    assert last["content"][0]["type"] == "redacted_thinking"


@pytest.mark.parametrize("fmt", ["compact", "seed"])
def test_the_full_instructions_describe_the_tags_the_model_sees(fmt: str) -> None:
    """``instructions="full"`` described the seed's ``<metadata …/>`` tags whatever
    the format, so with the default compact tags (``<u1 13/1594/>``) the model was told
    of a shape it never saw (config audit)."""
    from langchain_autocontext.view import system_section

    cfg = AutoContextConfig(instructions="full", tag_format=fmt, disclosure="always")
    text = system_section(cfg)
    ac = AutoContext(cfg)
    view = ac.prepare_model_call([SystemMessage("s", id="s"), HumanMessage("hi", id="u1")]).messages
    shown = str(view[1].content).split("\n", 1)[0]
    if fmt == "compact":
        assert "<id tokens/total/>" in text and "<metadata" not in text
        assert re.fullmatch(r"<u1 \d+/\d+/>", shown)
    else:
        assert '<metadata id="…"' in text and shown.startswith('<metadata id="u1"')


def test_xml_commands_are_taught_once_the_package_engages() -> None:
    """With ``disclosure="when_needed"`` the package shows nothing before it engages; the
    section teaching XML commands was shown from the first call all the same (61 tokens
    compact, ~1,000 full), with no tags to give the model ids, and the prompt prefix
    changed a second time at engagement (config audit). Replies are still read for
    commands before then."""
    cfg = AutoContextConfig(max_tokens=4_000, xml_commands=True)
    ac = AutoContext(cfg)
    short = [SystemMessage("You are terse.", id="s"), HumanMessage("hi", id="u")]
    view = ac.prepare_model_call(short).messages
    assert view[0].content == "You are terse." and len(view) == 2
    # xml_commands brings the tags, and the tags the three editing tools: nothing else
    plain = AutoContext(AutoContextConfig(max_tokens=4_000, metadata_tags=True))
    assert ac.prepare_model_call(short).tokens == plain.prepare_model_call(short).tokens
    long = [*short, *[AIMessage("x " * 400, id=f"a{k}") for k in range(8)]]
    engaged = ac.prepare_model_call(long).messages
    assert "<delete" in str(engaged[0].content)  # engaged: the commands are taught
    # a reply's command still runs before engagement
    convo = [*short, AIMessage("a", id="a1"), HumanMessage("more", id="u2")]
    out = ac.after_model_call([*convo, AIMessage('ok <delete id="a1"/>', id="r")])
    assert [getattr(m, "type", "") for m in out["messages"]] == ["remove", "ai"]


@pytest.mark.parametrize(
    ("kwargs", "offered", "withheld"),
    [
        ({}, ["working_context_append", "delete_message"], []),
        ({"metadata_tags": False}, ["working_context_append"], ["delete_message"]),
        ({"self_management_tools": False, "xml_commands": True}, ["<delete id="], []),
        (
            {"self_management_tools": False, "xml_commands": True, "metadata_tags": False},
            ["keep your replies focused"],
            ["<delete", "delete_message"],
        ),
    ],
)
def test_the_pressure_notice_offers_only_edits_the_model_can_address(
    kwargs: dict[str, Any], offered: list[str], withheld: list[str]
) -> None:
    """Edits name a message by the id its tag shows. With tags off the notice still told
    the model to shorten or delete messages, by ids it never sees (config audit)."""
    from langchain_autocontext.view import pressure_notice

    text = pressure_notice(
        AutoContextConfig(**{"max_tokens": 8_000, "metadata_tags": True, **kwargs}), 6_500
    )
    assert all(o in text for o in offered) and not any(w in text for w in withheld)


@settings(max_examples=12, deadline=None)
@given(
    fmt=st.sampled_from(["compact", "seed"]),
    sizes=st.lists(st.integers(min_value=20, max_value=60), min_size=25, max_size=35),
    ids=st.sampled_from(["uuid4", "run", "none"]),
)
def test_compress_counts_the_tags_as_the_view_sends_them(
    fmt: str, sizes: list[int], ids: str
) -> None:
    """The tags name each message by its short id; the pipeline counts those same tags,
    so what ``compress`` counts is what the view sends (no notice on the call). Counted
    with the full ids (a uuid is about 20 tokens, a short id 1-3), a tagged context
    looked about 20 tokens a message larger than it was sent: compaction fired that
    much early and stopped that much below its target."""
    ac = AutoContext(
        AutoContextConfig(
            max_tokens=6_000, metadata_tags=True, tag_format=fmt, disclosure="always"
        ),
        tools=[fetch],
    )

    def new_id(k: int) -> str | None:  # LangGraph's uuid4s, LangChain's run ids, or none
        if ids == "uuid4":
            return str(uuid.uuid4())
        return f"lc_run--019a{k:04x}-7aac-74c3-8048-a57d6f965408-0" if ids == "run" else None

    msgs: list = [SystemMessage("You fetch documents."), HumanMessage("read", id=new_id(0))]
    state: dict[str, Any] | None = None
    compacted = 0
    for k, size in enumerate(sizes, start=1):
        msgs += [
            AIMessage(
                f"step {k}",
                tool_calls=[call("fetch", {"name": f"d{k}"}, f"c{k}")],
                id=new_id(2 * k),
            ),
            ToolMessage(
                fetch.invoke({"name": f"d{k}", "size": size}),
                tool_call_id=f"c{k}",
                id=new_id(2 * k + 1),
            ),
        ]
        result = ac.compress(msgs, state=state)
        view = ac.prepare_model_call(result.messages, state=state)
        state = view.state_update or state
        msgs = list(result.messages)
        compacted += result.triggered
        if not view.pressure:
            assert view.tokens == result.tokens_after, k
    assert compacted


def test_a_compress_builds_the_views_reserve_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reserve for the view's notice and the part of it the pipeline may drop (the
    pressure notice's) come from one build of the notice per compress (it was built
    once for the budget and again for the slack), and are what the two measures give."""
    import langchain_autocontext.view as view_mod
    from langchain_autocontext.view import pressure_slack, view_reserve, view_reserve_and_slack

    built: list[int] = []
    notice = view_mod.pressure_notice

    def counting(*args: Any, **kwargs: Any) -> str:
        built.append(1)
        return notice(*args, **kwargs)

    monkeypatch.setattr(view_mod, "pressure_notice", counting)
    ac = AutoContext(
        AutoContextConfig(max_tokens=8_000, disclosure="always"),
        store=InMemoryStore(),
        system_prompt="Be brief.",
    )
    msgs = [HumanMessage("go", id="h1"), AIMessage("ok", id="a1"), HumanMessage("more", id="h2")]
    ac.compress(msgs, state={"command_errors": ["<delete> names no message"]})
    assert len(built) == 1
    counter = TokenCounter()
    for state in (None, {"command_errors": ["<delete> names no message"]}):
        for separate in (False, True):
            for opener in (False, True):
                args = (ac.config, counter, state)
                kw = {"separate_instructions": separate, "opener": opener}
                both = view_reserve_and_slack(*args, **kw)
                alone = view_reserve(*args, **kw)
                assert both == (alone, pressure_slack(ac.config, counter, state))


def test_a_full_context_that_opens_with_an_assistant_turn_still_fits() -> None:
    """A view that would open with an assistant turn (a greeting, or the first user
    message deleted by the model) gets the package's user-role note first; the budget
    keeps room for it, as for the other notices: a context right at its budget is sent
    with it, never refused with ContextBudgetError because of it (a pinned greeting
    beside a latest user message that takes the rest of the budget)."""
    cfg = AutoContextConfig(max_tokens=2_000, disclosure="always")
    greeting = pin(AIMessage("Hello! How can I help you today?", id="greet"))
    sent = 0
    for n in range(1_700, 1_800):
        ac = AutoContext(cfg, store=InMemoryStore())
        msgs = [SystemMessage("Be brief.", id="sys"), greeting, HumanMessage("word " * n, id="u")]
        try:
            fitted = ac.compress(msgs, thread_id="t")
        except ContextBudgetError:  # the floor alone is over the budget: said before sending
            continue
        view = ac.prepare_model_call(fitted.messages).messages
        assert view[1].id == OPENER_ID and isinstance(view[1], HumanMessage)
        assert ac.counter.count(view, ac.count_tools) <= cfg.max_tokens
        sent += 1
    assert sent > 10


@pytest.mark.parametrize("disclosure", ["always", "when_needed"])
@pytest.mark.parametrize("build", [self_managed_agent, self_managed_graph])
def test_the_graph_surfaces_never_open_a_view_with_an_assistant_turn(
    build: Any, disclosure: str
) -> None:
    """The pre-model hook and the node + model node: once the model deleted the first
    user message with ``<delete>``, the view opens with a user-role message (the
    package's instructions when they travel as one, else its opening note), never the
    assistant's reply that followed it."""
    ac = AutoContext(
        AutoContextConfig(max_tokens=6_000, xml_commands=True, disclosure=disclosure),
        store=InMemoryStore(),
    )

    def respond(messages: list, n: int) -> AIMessage:
        return AIMessage('<delete id="secret-1"/> forgot it' if n == 1 else "noted")

    model = FunctionModel(respond=respond)
    graph = build(ac, model, InMemoryStore())
    thread = {"configurable": {"thread_id": "t"}}
    for k, text in enumerate(["my password is hunter2", "forget my password", "hello"]):
        graph.invoke({"messages": [HumanMessage(text, id="secret-1" if k == 0 else None)]}, thread)
    last = model.seen[-1]
    first = last[1] if isinstance(last[0], SystemMessage) else last[0]
    assert isinstance(first, HumanMessage) and first.id in (OPENER_ID, INSTRUCTIONS_ID)
    assert not any("hunter2" in str(m.content) for m in last)
