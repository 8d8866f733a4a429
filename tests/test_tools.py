"""The model's six context tools, driven by scripted models through real graphs.

Every test runs a LangGraph agent (``create_react_agent`` with the package's hooks,
or a hand-written ``StateGraph`` with ``node``/``model_node``/``command_node``) whose
fake model decides from its input view — tags, short ids, previews — which tool to
call, and checks the resulting state, the store and the messages the model got back.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from _builders import (
    FunctionModel,
    call,
    fetch,
    saved,
    self_managed_agent,
    view_ids,
)
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool as tool_decorator
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig
from langchain_autocontext.messages import find_violations, mark, marker
from langchain_autocontext.metadata import strip_tags
from langchain_autocontext.store import OffloadStore, offload_ref
from langchain_autocontext.strategies.base import KIND_OFFLOADED, offload_note

#: The tool behaviours are checked with the detailed instructions and the seed's tags
#: (the budgets below were sized for them); the compact defaults: test_overhead.py.
DETAILED: dict[str, Any] = {
    "instructions": "full",
    "tag_format": "seed",
    "disclosure": "always",
    "metadata_tags": True,
}
CFG = AutoContextConfig(max_tokens=8_000, **DETAILED)


def start(system: str = "You are a careful agent.", user: str = "Collect the documents.") -> dict:
    return {"messages": [SystemMessage(system), HumanMessage(user)]}


def cfg(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 100}


def tool_results(messages) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def shown_id(view, predicate) -> str:
    """The id the model is shown for the last message matching ``predicate``."""
    hits = [sid for sid, m in view_ids(view) if predicate(m)]
    assert hits, "no such message in the view"
    return hits[-1]


def last_result(view) -> ToolMessage:
    return [m for m in view if isinstance(m, ToolMessage)][-1]


def check_state(state: dict) -> None:
    msgs = state["messages"]
    assert not find_violations(msgs)
    assert isinstance(msgs[0], SystemMessage)


# --- update_message / delete_message ------------------------------------------------------
def test_update_shortens_a_tool_output_and_keeps_the_original(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("fetch", {"name": "alpha"})])
        if n == 1:
            target = shown_id(view, lambda m: isinstance(m, ToolMessage))
            assert len(target) < 36  # a short id: a unique prefix of the uuid
            return AIMessage(
                "",
                tool_calls=[
                    call("update_message", {"message_id": target, "content": "alpha: 40 lines"})
                ],
            )
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    graph = build(ac, model, store, tools=[fetch])
    out = graph.invoke(start(), cfg("u1"))
    check_state(out)
    fetched, receipt = tool_results(out["messages"])
    assert fetched.content == "alpha: 40 lines" and fetched.name == "fetch"
    assert receipt.status == "success" and "Updated message" in receipt.content
    # the original stays in the append-only history
    entry = OffloadStore.wrap(store).get_history_message("u1", fetched.id)
    assert entry is not None and entry.message.content.startswith("alpha line 0:")
    events = [e for e in OffloadStore.wrap(store).list_events("u1") if e.data.get("op") == "update"]
    assert events and events[0].message_ids == [fetched.id]
    # the model saw the shortened content on its next call
    assert "alpha: 40 lines" in last_result(model.seen[2][:-1] or model.seen[2]).content or any(
        "alpha: 40 lines" in str(m.content) for m in model.seen[2]
    )


def test_a_shown_id_still_names_its_message_when_the_calling_message_shares_it(build) -> None:
    """The message that issues the edit is appended after the view was built; its id may
    start with the short id the model was shown. The shown id still names the message
    the model saw it on (it used to be answered "ambiguous")."""
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("fetch", {"name": "alpha"})])
        if n == 1:
            target = shown_id(view, lambda m: isinstance(m, ToolMessage))
            twin = target + str(uuid.uuid4())[len(target) :]  # same first characters
            return AIMessage(
                "",
                id=twin,
                tool_calls=[call("update_message", {"message_id": target, "content": "short"})],
            )
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    out = build(ac, model, store, tools=[fetch]).invoke(start(), cfg("twin"))
    check_state(out)
    fetched, receipt = tool_results(out["messages"])
    assert receipt.status == "success", receipt.content
    assert fetched.content == "short"


def test_delete_of_a_tool_calling_message_takes_its_results(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage(
                "two at once",
                tool_calls=[call("fetch", {"name": "a"}), call("fetch", {"name": "b"})],
                id="ai-parallel",
            )
        if n == 1:
            target = shown_id(view, lambda m: isinstance(m, AIMessage) and m.tool_calls)
            return AIMessage("", tool_calls=[call("delete_message", {"message_id": target})])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    out = build(ac, model, store, tools=[fetch]).invoke(start(), cfg("d1"))
    check_state(out)
    ids = [m.id for m in out["messages"]]
    assert "ai-parallel" not in ids
    assert not [m for m in tool_results(out["messages"]) if m.name == "fetch"]
    receipt = tool_results(out["messages"])[-1]
    assert "with its 2 tool result(s)" in receipt.content
    ws = OffloadStore.wrap(store)
    assert ws.get_history_message("d1", "ai-parallel") is not None
    event = next(e for e in ws.list_events("d1") if e.data.get("op") == "delete")
    assert len(event.message_ids) == 3


def test_bad_edits_are_answered_with_errors_and_change_nothing(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)
    before: dict[str, Any] = {}

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("fetch", {"name": "doc"})], id="ai-fetch")
        if n == 1:
            before["ids"] = [m.id for m in view]
            system_id = "irrelevant"
            user = shown_id(view, lambda m: isinstance(m, HumanMessage))
            result = shown_id(view, lambda m: isinstance(m, ToolMessage))
            return AIMessage(
                "",
                id="ai-self",
                tool_calls=[
                    call("delete_message", {"message_id": user}, "e-user"),
                    call("delete_message", {"message_id": "ai-self"}, "e-self"),
                    call("update_message", {"message_id": "ai-self", "content": "x"}, "e-self2"),
                    call("delete_message", {"message_id": "no-such-id"}, "e-unknown"),
                    call("update_message", {"message_id": result, "content": "  "}, "e-empty"),
                    call(
                        "update_message",
                        {
                            "message_id": result,
                            "content": '<metadata id="x" message_token_count="3"/>',
                        },
                        "e-tag-only",
                    ),
                    call("delete_message", {"message_id": result}, "e-pair"),
                    call("delete_message", {"message_id": system_id}, "e-system-unknown"),
                    call("delete_message", {"message_id": "autocontext-notice"}, "e-notice"),
                ],
            )
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    out = build(ac, model, store, tools=[fetch]).invoke(start(), cfg("e1"))
    check_state(out)
    answers = {m.tool_call_id: m for m in tool_results(out["messages"])}
    expect = {
        "e-user": "latest user message",
        "e-self": "issued this edit",
        "e-self2": "issued this edit",
        "e-unknown": "No message with id 'no-such-id'",
        "e-empty": "is empty",
        "e-tag-only": "is empty",
        "e-pair": "would leave that call unanswered",
        "e-system-unknown": "No message with id",
        "e-notice": "notice or instructions of the context manager",
    }
    for call_id, phrase in expect.items():
        assert answers[call_id].status == "error", call_id
        assert phrase in answers[call_id].content, (call_id, answers[call_id].content)
    # nothing but the tool messages changed: the fetched result is intact
    fetched = next(m for m in tool_results(out["messages"]) if m.name == "fetch")
    assert fetched.content.startswith("doc line 0")
    assert not [e for e in OffloadStore.wrap(store).list_events("e1") if e.kind == "context_edit"]


def test_the_system_message_cannot_be_edited() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            sys_id = view[0].id  # the model may guess it from elsewhere: still refused
            return AIMessage(
                "",
                tool_calls=[
                    call("update_message", {"message_id": sys_id, "content": "obey me"}, "s1"),
                    call("delete_message", {"message_id": sys_id}, "s2"),
                ],
            )
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    inp = {"messages": [SystemMessage("rules", id="sys-1"), HumanMessage("hi")]}
    out = self_managed_agent(ac, model, store).invoke(inp, cfg("s1"))
    assert out["messages"][0].content == "rules"
    for m in tool_results(out["messages"]):
        assert m.status == "error" and "it is the system message" in m.content


def test_two_edits_of_one_message_in_one_turn_apply_once(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("fetch", {"name": "x"})])
        if n == 1:
            target = shown_id(view, lambda m: isinstance(m, ToolMessage))
            return AIMessage(
                "",
                tool_calls=[
                    call("update_message", {"message_id": target, "content": "short"}, "p1"),
                    call("update_message", {"message_id": target, "content": "other"}, "p2"),
                ],
            )
        return AIMessage("done")

    out = build(ac, FunctionModel(respond=respond), store, tools=[fetch]).invoke(start(), cfg("p"))
    check_state(out)
    answers = {m.tool_call_id: m for m in tool_results(out["messages"])}
    assert answers["p1"].status == "success"
    assert answers["p2"].status == "error" and "already edited" in answers["p2"].content
    assert next(m for m in tool_results(out["messages"]) if m.name == "fetch").content == "short"


# --- reload_offloaded ------------------------------------------------------------------------
SMALL = AutoContextConfig(
    **DETAILED,
    max_tokens=3_000,
    large_payload_threshold=600,
    offload_single_preview=80,
    last_keep=2,
    msg_threshold=200,
)


#: room for a search result while older fetches are offloaded
SEARCH = SMALL.model_copy(update={"max_tokens": 8_000, "large_payload_threshold": 2_000})


def offload_ids(view, *, single: bool = False) -> list[str]:
    """Offload ids named in the view (``single``: only previews of one offloaded message)."""
    text = " ".join(str(m.content) for m in view)
    if single:
        return re.findall(r'\[Offloaded [^\]]*?offload_id="([0-9a-f-]{8,36})"', text)
    return re.findall(r'offload_id="([0-9a-f-]{8,36})"', text)


def test_reload_returns_originals_truncated_with_a_note_and_reads_on(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(SMALL.model_copy(update={"max_tokens": 6_000}), store=store)
    oid: list[str] = []
    parts: list[str] = []

    def respond(view, n):
        if n < 3:
            return AIMessage("", tool_calls=[call("fetch", {"name": f"d{n}", "size": 400})])
        if n == 3:
            oid.append(offload_ids(view, single=True)[0])
            return AIMessage("", tool_calls=[call("reload_offloaded", {"offload_id": oid[0]})])
        result = last_result(view)
        if result.name == "reload_offloaded":
            assert result.status == "success", result.content
            parts.append(strip_tags(result.content))
            more = re.search(r"offset=(\d+)\) to read on\]$", result.content)
            if not more:
                return AIMessage("done")
            # the part fills the context: keep a note of it, then read on
            done = shown_id(view, lambda m: m is result)
            return AIMessage(
                "",
                tool_calls=[call("update_message", {"message_id": done, "content": "read"})],
                additional_kwargs={"next": more.group(1)},
            )
        offset = int(view[-2].additional_kwargs["next"])
        return AIMessage(
            "", tool_calls=[call("reload_offloaded", {"offload_id": oid[0], "offset": offset})]
        )

    model = FunctionModel(respond=respond)
    out = build(ac, model, store, tools=[fetch]).invoke(start(), cfg("r1"))
    check_state(out)
    original = OffloadStore.wrap(store).reload("r1", oid[0]).messages[0]
    assert len(parts) >= 2
    assert "truncated to fit your context budget" in parts[0]
    assert parts[-1].endswith("of 10,491: the end]") or "the end]" in parts[-1]
    body = "".join(re.sub(r"\n\[(truncated|characters) [^\]]*\]$", "", p) for p in parts)
    # the parts hold the original exactly, in order
    assert original.content in body
    # never more than the hard budget
    for sent in model.seen:
        assert ac.counter.count(sent, ac.count_tools) <= ac.config.max_tokens


def test_reload_with_restore_puts_a_single_offload_back(build) -> None:
    store = InMemoryStore()
    # no tool-run compression: the offload strategies are what fires here
    cfg_ = SMALL.model_copy(update={"max_tokens": 8_000, "min_consecutive_tool_messages": 50})
    ac = AutoContext(cfg_, store=store)
    seen_ids: list[str] = []

    def respond(view, n):
        oids = offload_ids(view, single=True) if n >= 2 and not seen_ids else []
        if oids:  # a single offloaded message is in view (the freshest results never are)
            seen_ids.append(oids[0])
            return AIMessage(
                "",
                tool_calls=[call("reload_offloaded", {"offload_id": oids[0], "restore": True})],
            )
        if not seen_ids and n < 12:  # until compression has offloaded one
            return AIMessage("", tool_calls=[call("fetch", {"name": f"d{n}", "size": 40})])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    out = build(ac, model, store, tools=[fetch]).invoke(start(), cfg("r2"))
    check_state(out)
    assert seen_ids, "no single-message offload was ever shown"
    record = OffloadStore.wrap(store).reload("r2", seen_ids[0])
    receipt = tool_results(out["messages"])[-1]
    assert receipt.status == "success" and "Restored 1 original message" in receipt.content
    restored = next(m for m in out["messages"] if m.id == record.messages[0].id)
    assert restored.content == record.messages[0].content
    assert marker(restored) is None


def test_reload_restores_a_summarized_span_in_place() -> None:
    """A summary's offload goes back as the original messages, in the summary's place."""
    store = InMemoryStore()
    cfg_ = AutoContextConfig(max_tokens=4_000, msg_threshold=30, last_keep=4, **DETAILED)
    ac = AutoContext(cfg_, store=store)
    state: dict[str, Any] = {}

    def respond(view, n):
        if "oid" in state:
            return AIMessage("done")
        summaries = [m for m in view if "[Summary of" in str(m.content)]
        if summaries:  # right after the first compression: room to restore
            state["oid"] = offload_ids(summaries[:1])[0]
            return AIMessage(
                "",
                tool_calls=[
                    call("reload_offloaded", {"offload_id": state["oid"], "restore": True})
                ],
            )
        assert n < 60
        # results large enough that masking them frees most of what compression needs:
        # the summary then stands for a small span, which fits back under the trigger
        return AIMessage("", tool_calls=[call("fetch", {"name": f"s{n}", "size": 24})])

    model = FunctionModel(respond=respond)
    out = self_managed_agent(ac, model, store, tools=[fetch]).invoke(start(), cfg("r3"))
    check_state(out)
    record = OffloadStore.wrap(store).reload("r3", state["oid"])
    receipt = tool_results(out["messages"])[-1]
    assert receipt.status == "success" and "Restored" in receipt.content, receipt.content
    ids = [m.id for m in out["messages"]]
    positions = [ids.index(o.id) for o in record.messages]
    assert positions == sorted(positions) and positions[-1] - positions[0] == len(positions) - 1
    assert all(f'offload_id="{state["oid"]}"' not in str(m.content) for m in out["messages"])


def test_restore_is_refused_when_it_does_not_fit() -> None:
    store = InMemoryStore()
    cfg_ = AutoContextConfig(max_tokens=4_000, msg_threshold=12, last_keep=4, **DETAILED)
    ac = AutoContext(cfg_, store=store)
    state: dict[str, Any] = {}

    def respond(view, n):
        if "oid" in state or n >= 30:
            return AIMessage("done")
        # restore once the context is one message short of the compression trigger (how
        # soon that is depends on the fixed costs: the system section and tool schemas)
        if n >= 10 and offload_ids(view) and len(view) >= cfg_.msg_threshold - 1:
            state["oid"] = offload_ids(view)[0]
            return AIMessage(
                "",
                tool_calls=[
                    call("reload_offloaded", {"offload_id": state["oid"], "restore": True})
                ],
            )
        return AIMessage("", tool_calls=[call("fetch", {"name": f"s{n}", "size": 2})])

    out = self_managed_agent(ac, FunctionModel(respond=respond), store, tools=[fetch]).invoke(
        start(), cfg("r4")
    )
    check_state(out)
    receipt = tool_results(out["messages"])[-1]
    # Not restored: either it would pass the message trigger, or the compression that
    # made room first took the summary that stood for it (age-ordered summaries extend
    # the oldest summary); either way the originals are shown instead.
    assert (
        "[not restored: your context would hold" in receipt.content
        or "[not restored: its summary or preview is no longer in your context" in receipt.content
    ), receipt.content[-300:]
    assert "--- message 1/" in receipt.content


def test_restore_on_a_nearly_full_context_makes_room_first() -> None:
    """Issue 13, item 8: restore=True just under the trigger compresses first (as a plain
    reload does) instead of answering that the context is too full."""
    store = InMemoryStore()
    cfg_ = AutoContextConfig(max_tokens=4_000, msg_threshold=200, last_keep=4, **DETAILED)
    ac = AutoContext(cfg_, store=store)
    trigger = ac.config.trigger_tokens
    state: dict[str, Any] = {}

    def respond(view, n):
        if "oid" in state:
            return AIMessage("done")
        used = ac.counter.count(view, ac.count_tools)
        oids = offload_ids(view)
        if oids and used > trigger - 340:  # the view reserves ~250 tokens under the trigger
            state["oid"], state["used"] = oids[0], used
            return AIMessage(
                "",
                tool_calls=[call("reload_offloaded", {"offload_id": oids[0], "restore": True})],
            )
        assert n < 150
        size = 1 if oids else 30  # large results until something is offloaded, then small
        return AIMessage("", tool_calls=[call("fetch", {"name": f"s{n}", "size": size})])

    out = self_managed_agent(ac, FunctionModel(respond=respond), store, tools=[fetch]).invoke(
        start(), {**cfg("r-full"), "recursion_limit": 1_000}
    )
    check_state(out)
    assert "oid" in state, "the context never came near the trigger with an offload in view"
    receipt = tool_results(out["messages"])[-1]
    assert receipt.status == "success", receipt.content
    assert "too full" not in receipt.content
    assert "Restored" in receipt.content or "--- message 1/" in receipt.content


def test_reload_errors_unknown_and_foreign_thread_ids() -> None:
    store = InMemoryStore()
    ac = AutoContext(SMALL, store=store)
    foreign = OffloadStore.wrap(store).offload(
        "other-thread",
        [HumanMessage("classified-payload", id="h-secret")],
        strategy="t",
        preview="p",
        tokens=3,
    )

    def respond(view, n):
        if n == 0:
            return AIMessage(
                "",
                tool_calls=[
                    call("reload_offloaded", {"offload_id": foreign.offload_id}, "f1"),
                    call("reload_offloaded", {"offload_id": "h-secret"}, "f2"),
                    call("reload_offloaded", {"offload_id": "nope"}, "f3"),
                    call("reload_offloaded", {"offload_id": "  "}, "f4"),
                    call("reload_offloaded", {"offload_id": offload_ref(foreign.offload_id)}, "f5"),
                ],
            )
        return AIMessage("done")

    out = self_managed_agent(ac, FunctionModel(respond=respond), store).invoke(start(), cfg("mine"))
    answers = {m.tool_call_id: m for m in tool_results(out["messages"])}
    for cid in ("f1", "f2", "f3", "f4", "f5"):
        assert answers[cid].status == "error"
        assert "classified-payload" not in answers[cid].content
    assert "No offloaded content with id" in answers["f1"].content
    # the model is told what it can do: its tools, not the store's API
    assert "search_history" in answers["f3"].content
    assert "list_offloads" not in answers["f3"].content


def drive(graph: Any, inputs: dict, config: dict, run: str) -> dict:
    """``graph.invoke`` or, through the tools' async path, ``graph.ainvoke``."""
    if run == "ainvoke":
        return asyncio.run(graph.ainvoke(inputs, config))
    return graph.invoke(inputs, config)


@pytest.mark.random_ids
@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_a_shortened_id_that_starts_two_offloads_reloads_the_one_in_view(
    monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    """Two offloads of the thread whose ids share their first 8 characters (1 in 4
    billion): the note the model read names the one in its context, and that is what it
    gets; with neither in view the answer lists both whole ids, and reloads neither."""
    store = InMemoryStore()
    ac = AutoContext(SMALL, store=store)
    twins = iter(uuid.UUID(f"abcdef12-0000-4000-8000-00000000000{k}") for k in (1, 2))
    real = uuid.uuid4
    monkeypatch.setattr(uuid, "uuid4", lambda: next(twins, None) or real())
    ost = OffloadStore.wrap(store)
    first, second = (
        ost.offload(
            "t",
            [ToolMessage(text, tool_call_id="c0", id=f"o{k}")],
            strategy="offload_all",
            preview=text[:10],
            tokens=9,
        )
        for k, text in enumerate(("first original log", "second original log"))
    )
    shown = offload_note(second.offload_id)
    assert shown == 'reload_offloaded(offload_id="abcdef12")'
    masked = mark(
        ToolMessage(f"second…\n[Offloaded 9 tokens; {shown}]", tool_call_id="c0", id="o1"),
        KIND_OFFLOADED,
        offload_id=second.offload_id,
    )

    def respond(view, n):
        if n == 0:
            return AIMessage(
                "", tool_calls=[call("reload_offloaded", {"offload_id": "abcdef12"}, "r1")]
            )
        return AIMessage("done")

    agent = self_managed_agent(ac, FunctionModel(respond=respond), store)
    history = [
        HumanMessage("Collect the logs.", id="u0"),
        AIMessage("", id="a0", tool_calls=[call("read_log", {"name": "x"}, "c0")]),
    ]
    out = drive(agent, {"messages": [*history, masked]}, cfg("t"), run)
    answer = next(m for m in tool_results(out["messages"]) if m.tool_call_id == "r1")
    assert "second original log" in answer.content and answer.status != "error"
    # the same thread in a fresh checkpointer (its store kept): neither offload in view
    fresh = self_managed_agent(ac, FunctionModel(respond=respond), store)
    out = drive(fresh, {"messages": [HumanMessage("And now?", id="u9")]}, cfg("t"), run)
    answer = next(m for m in tool_results(out["messages"]) if m.tool_call_id == "r1")
    assert answer.status == "error" and "original log" not in answer.content
    assert first.offload_id in answer.content and second.offload_id in answer.content


# --- search_history ------------------------------------------------------------------------
def test_search_history_finds_messages_that_left_the_context(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(SEARCH, store=store)
    found: dict[str, Any] = {}

    def respond(view, n):
        if n < 4:
            return AIMessage("", tool_calls=[call("fetch", {"name": f"doc{n}", "size": 120})])
        if n == 4:
            return AIMessage(
                "", tool_calls=[call("search_history", {"query": "value-doc1-919", "limit": 3})]
            )
        if n == 5:
            found["text"] = strip_tags(last_result(view).content)
        return AIMessage("done")

    out = build(ac, FunctionModel(respond=respond), store, tools=[fetch]).invoke(start(), cfg("s"))
    check_state(out)
    text = found["text"]
    first = text.splitlines()[1]
    holder = next(
        m
        for m in OffloadStore.wrap(store).get_history("s")
        if "doc1 line 1:" in str(m.message.content)
    )
    assert f"id={holder.id}" in first and "tool (fetch)" in first
    assert "value-doc1-919" in text.splitlines()[2]
    assert f'shortened version; reload_offloaded("{holder.id}") returns it in full' in first
    assert f"position {holder.seq}" in first


def test_the_tools_read_autocontexts_store_when_the_graph_has_another(build) -> None:
    """AutoContext(store=A) in a graph compiled with store=B: the surfaces archive to A,
    so reload_offloaded and search_history must read A (they read B: "not found")."""
    own, graphs = InMemoryStore(), InMemoryStore()
    ac = AutoContext(SEARCH, store=own)
    answers: dict[str, ToolMessage] = {}

    def respond(view, n):
        if n < 4:
            return AIMessage("", tool_calls=[call("fetch", {"name": f"doc{n}", "size": 120})])
        if n == 4:
            oid = offload_ids(view)[0]
            return AIMessage(
                "",
                tool_calls=[
                    call("reload_offloaded", {"offload_id": oid}, "r1"),
                    call("search_history", {"query": "value-doc1-919", "limit": 3}, "s1"),
                ],
            )
        if n == 5:
            answers.update({m.tool_call_id: m for m in tool_results(view)})
        return AIMessage("done")

    graph = build(ac, FunctionModel(respond=respond), graphs, tools=[fetch])
    # a server (LangGraph Platform) injects its store: the user is told it is not used
    with pytest.warns(UserWarning, match="this AutoContext was given another"):
        out = graph.invoke(start(), cfg("t"))
    check_state(out)
    assert answers["r1"].status == "success", answers["r1"].content
    assert answers["s1"].status == "success" and "value-doc1-919" in answers["s1"].content
    # everything the package keeps is in AutoContext's store, nothing in the graph's
    assert OffloadStore.wrap(own).get_history("t")
    assert not graphs.list_namespaces()


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_a_search_result_never_outgrows_the_room_under_the_trigger(build, run: str) -> None:
    """A search asked for 50 hits at a small budget used to answer with more tokens than
    the whole budget; the next call offloaded it and the model read a preview of its own
    search. The result now holds the best hits that fit and says how many were left out."""
    import asyncio

    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"max_tokens": 3_000}), store=store)
    seen: dict[str, Any] = {}
    history = [
        m
        for k in range(60)
        for m in (
            HumanMessage(f"Day {k}: I painted a lake sunrise with {k} shades of blue today."),
            AIMessage(f"A lake sunrise in {k} shades of blue sounds calming; paint more!"),
        )
    ]

    def respond(view, n):
        if n == 0:
            return AIMessage(
                "", tool_calls=[call("search_history", {"query": "painted lake", "limit": 50})]
            )
        if n == 1:
            seen["result"] = last_result(view)
            seen["tokens"] = ac.counter.count(view, ac.count_tools)
        return AIMessage("done")

    agent = build(ac, FunctionModel(respond=respond), store)
    state = {"messages": [SystemMessage("You paint."), *history, HumanMessage("What did I paint?")]}
    if run == "invoke":
        out = agent.invoke(state, cfg("fit"))
    else:
        out = asyncio.run(agent.ainvoke(state, cfg("fit")))
    assert out["messages"][-1].content == "done"
    text = strip_tags(seen["result"].content)
    assert marker(seen["result"]) is None, "the model must read the result itself"
    shown = len(re.findall(r"^\d+\. id=", text, flags=re.M))
    assert 1 <= shown < 50
    assert f"{50 - shown} more result(s) not shown" in text
    assert seen["tokens"] <= 3_000


def test_search_history_bad_query() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("search_history", {"query": " "})])
        if n == 1:
            return AIMessage("", tool_calls=[call("search_history", {"query": "x", "limit": 0})])
        return AIMessage("done")

    out = self_managed_agent(ac, FunctionModel(respond=respond), store).invoke(start(), cfg("q"))
    a, b = tool_results(out["messages"])
    assert a.status == "error" and "query is empty" in a.content
    assert b.status == "error"  # the schema rejects limit=0 (ge=1)


def test_a_huge_search_query_is_an_error_and_the_run_goes_on() -> None:
    """Issue 13: a 100 KB query at 6,000 tokens escaped as ContextBudgetError from the
    tools node (and again on resume); it is an error result now, and the run goes on."""
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"max_tokens": 6_000}), store=store)
    huge = "lorem ipsum dolor " * 6_000  # ~100 KB

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("search_history", {"query": huge})])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    out = self_managed_agent(ac, model, store).invoke(start(), cfg("huge"))
    assert out["messages"][-1].content == "done"
    (result,) = tool_results(out["messages"])
    assert result.status == "error" and "a few keywords" in result.content
    assert len(result.content) < 500
    for view in model.seen:
        assert ac.counter.count(view, ac.count_tools) <= 6_000


def test_a_runaway_argument_is_not_echoed_whole_in_the_error(build) -> None:
    """A whole text pasted as a message id, a speaker or a date came back whole in the
    error result (5,300 characters for a 5,000-character id, about 650 tokens each time);
    it is named by its start and length, as reload_offloaded already did."""
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)
    runaway = "pasted-log-line;" * 320  # 5,120 characters
    calls = [
        call("update_message", {"message_id": runaway, "content": "x"}, "r-update"),
        call("delete_message", {"message_id": runaway}, "r-delete"),
        call("pin_message", {"message_id": runaway}, "r-pin"),
        call("search_history", {"query": "x", "speaker": runaway}, "r-speaker"),
        call("search_history", {"query": "x", "after": runaway}, "r-after"),
    ]

    def respond(view, n):
        if n < len(calls):
            return AIMessage("", tool_calls=[calls[n]])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    build(ac, model, store).invoke(start(), cfg("runaway"))
    answers = {
        m.tool_call_id: strip_tags(str(m.content))
        for view in model.seen
        for m in view
        if isinstance(m, ToolMessage)
    }
    assert set(answers) == {c["id"] for c in calls}
    for call_id, text in answers.items():
        assert "5,120 characters" in text, (call_id, text[:200])
        assert len(text) < 600, (call_id, len(text))


# --- the working context -----------------------------------------------------------------------
def test_working_context_edits_persist_and_are_shown(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"working_context_max_chars": 60}), store=store)

    def respond(view, n):
        script = [
            call("working_context_append", {"text": "goal: ship v2"}),
            call("working_context_append", {"text": "owner: ana"}),
            call("working_context_replace", {"old": "ana", "new": "bo"}),
            call("working_context_replace", {"old": "missing", "new": "x"}),
            call("working_context_append", {"text": "z" * 80}),
            call("working_context_replace", {"old": "o", "new": "0"}),
        ]
        if n < len(script):
            return AIMessage("", tool_calls=[script[n]])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    graph = build(ac, model, store)
    out = graph.invoke(start(), cfg("w"))
    assert saved(graph, cfg("w"))["working_context"] == "goal: ship v2\nowner: bo"
    results = tool_results(out["messages"])
    assert [r.status for r in results] == ["success"] * 3 + ["error"] * 3
    assert "not found" in results[3].content
    assert "over its limit of 60" in results[4].content
    assert "occurs 3 times" in results[5].content
    system = model.seen[-1][0]
    assert isinstance(system, SystemMessage)
    assert "<working_context>\ngoal: ship v2\nowner: bo\n</working_context>" in system.content
    # both limits in the header: the characters and the tokens (an eighth of the window)
    assert f"(23/60 characters, at most {CFG.max_tokens // 8:,} tokens)" in system.content
    # persisted by the checkpointer: a new turn sees it
    graph.invoke({"messages": [HumanMessage("next")]}, cfg("w"))
    assert saved(graph, cfg("w"))["working_context"] == "goal: ship v2\nowner: bo"
    assert "goal: ship v2\nowner: bo\n</working_context>" in str(model.seen[-1][0].content)


@pytest.mark.parametrize("run_async", [False, True])
async def test_working_context_edits_are_recorded_as_events(build, run_async: bool) -> None:
    """The model's working-context edits are context edits like its message edits: one
    event per applied edit (none for a refused one), so an operator can see when the
    model rewrote its working context."""
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        script = [
            call("working_context_append", {"text": "goal: ship v2"}, "wa"),
            call("working_context_replace", {"old": "v2", "new": "v3"}, "wr"),
            call("working_context_replace", {"old": "missing", "new": "x"}, "wx"),
        ]
        return AIMessage("", tool_calls=[script[n]]) if n < len(script) else AIMessage("done")

    graph = build(ac, FunctionModel(respond=respond), store)
    if run_async:
        await graph.ainvoke(start(), cfg("we"))
    else:
        graph.invoke(start(), cfg("we"))
    assert saved(graph, cfg("we"))["working_context"] == "goal: ship v3"
    events = [e for e in OffloadStore.wrap(store).list_events("we") if e.kind == "context_edit"]
    assert [(e.strategy, e.op, e.data["via"], e.data["tool_call_id"]) for e in events] == [
        ("tool:working_context_append", "working_context_append", "tool", "wa"),
        ("tool:working_context_replace", "working_context_replace", "tool", "wr"),
    ]
    assert [(e.data["chars_before"], e.data["chars_after"]) for e in events] == [(0, 13), (13, 13)]


def test_working_context_replace_refuses_overlapping_matches(build) -> None:
    # "retry, retry" occurs twice in "retry, retry, retry" (overlapping): str.count
    # says once, and the first place was replaced although old matched two places
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        script = [
            call("working_context_append", {"text": "todo: retry, retry, retry the upload"}),
            call("working_context_replace", {"old": "retry, retry", "new": "done"}),
        ]
        if n < len(script):
            return AIMessage("", tool_calls=[script[n]])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    graph = build(ac, model, store)
    out = graph.invoke(start(), cfg("wo"))
    results = tool_results(out["messages"])
    assert [r.status for r in results] == ["success", "error"]
    assert "occurs 2 times" in results[1].content
    assert saved(graph, cfg("wo"))["working_context"] == "todo: retry, retry, retry the upload"


def test_parallel_working_context_edits_do_not_crash() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage(
                "",
                tool_calls=[
                    call("working_context_append", {"text": "one"}, "w1"),
                    call("working_context_append", {"text": "two"}, "w2"),
                ],
            )
        return AIMessage("done")

    graph = self_managed_agent(ac, FunctionModel(respond=respond), store)
    out = graph.invoke(start(), cfg("pw"))
    answers = {m.tool_call_id: m for m in tool_results(out["messages"])}
    assert answers["w1"].status == "success"
    assert (
        answers["w2"].status == "error"
        and "one working-context edit per turn" in answers["w2"].content
    )
    assert saved(graph, cfg("pw"))["working_context"] == "one"


def test_a_refused_working_context_edit_does_not_block_the_next_of_its_turn() -> None:
    """One working-context edit per turn is applied: the first that is applied. A
    refused first call (its old text not found) leaves the second to be judged on its
    own, not refused as if the first had edited the block."""
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage(
                "",
                tool_calls=[
                    call("working_context_replace", {"old": "missing", "new": "x"}, "w1"),
                    call("working_context_append", {"text": "two"}, "w2"),
                    call("working_context_append", {"text": "three"}, "w3"),
                ],
            )
        return AIMessage("done")

    graph = self_managed_agent(ac, FunctionModel(respond=respond), store)
    out = graph.invoke(start(), cfg("wf"))
    answers = {m.tool_call_id: m for m in tool_results(out["messages"])}
    assert answers["w1"].status == "error" and "not found" in answers["w1"].content
    assert answers["w2"].status == "success", answers["w2"].content
    assert answers["w3"].status == "error" and "one working-context edit" in answers["w3"].content
    assert saved(graph, cfg("wf"))["working_context"] == "two"


def test_working_context_edits_in_a_state_without_the_key_say_they_were_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """create_react_agent's plain AgentState has no 'autocontext' key: LangGraph drops
    the edit's state update, so the tool must not answer "updated" (it did, and the
    model's second edit showed the first was gone); the developer's warning names the
    state schema to use."""
    import warnings

    from langgraph.checkpoint.memory import InMemorySaver

    import langchain_autocontext.tools as tools_module

    monkeypatch.setattr(tools_module, "_warned_no_state_key", False)  # once per process
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("working_context_append", {"text": "goal"})])
        return AIMessage("done")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langgraph.prebuilt import create_react_agent

        graph = create_react_agent(
            FunctionModel(respond=respond),
            ac.tools,
            pre_model_hook=ac.pre_model_hook,
            post_model_hook=ac.post_model_hook,
            checkpointer=InMemorySaver(),
            store=store,
        )
    with pytest.warns(UserWarning, match="AutoContextAgentState"):
        out = graph.invoke(start(), cfg("plain"))
    [answer] = tool_results(out["messages"])
    assert answer.status == "error" and "updated" not in answer.content
    assert "'autocontext' state key" in answer.content


# --- schemas, switches, async, SQLite -------------------------------------------------------------
def test_tool_schemas_are_strict_and_counted() -> None:
    ac = AutoContext(CFG)
    names = [t.name for t in ac.tools]
    assert names == [
        "update_message",
        "delete_message",
        "pin_message",
        "reload_offloaded",
        "search_history",
        "working_context_append",
        "working_context_replace",
    ]
    for t in ac.tools:
        schema = t.tool_call_schema.model_json_schema()
        assert "runtime" not in schema.get("properties", {})
        assert t.description and len(t.description) > 80
        assert t.args_schema.model_config.get("extra") == "forbid"
    assert ac.counter.count_tools(ac.count_tools) == ac.counter.count_tools(ac.tools)
    off = AutoContext(CFG.model_copy(update={"self_management_tools": False}))
    assert off.tools == [] and off.count_tools == []


def test_unknown_arguments_are_rejected() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage(
                "", tool_calls=[call("delete_message", {"message_id": "x", "force": True})]
            )
        return AIMessage("done")

    out = self_managed_agent(ac, FunctionModel(respond=respond), store).invoke(start(), cfg("x"))
    (answer,) = tool_results(out["messages"])
    assert answer.status == "error" and "force" in answer.content


async def test_tools_async_in_both_graphs(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("fetch", {"name": "q"})])
        if n == 1:
            target = shown_id(view, lambda m: isinstance(m, ToolMessage))
            return AIMessage(
                "",
                tool_calls=[
                    call("update_message", {"message_id": target, "content": "q: short"}),
                    call("search_history", {"query": "value-q-007"}),
                    call("working_context_append", {"text": "q done"}),
                ],
            )
        if n == 2:
            target = shown_id(view, lambda m: isinstance(m, AIMessage) and m.tool_calls)
            return AIMessage("", tool_calls=[call("delete_message", {"message_id": target})])
        return AIMessage("done")

    graph = build(ac, FunctionModel(respond=respond), store, tools=[fetch])
    out = await graph.ainvoke(start(), cfg("a"))
    check_state(out)
    assert saved(graph, cfg("a"))["working_context"] == "q done"
    assert all(m.status == "success" for m in tool_results(out["messages"])), [
        m.content for m in tool_results(out["messages"])
    ]
    ops = [e.op for e in await OffloadStore.wrap(store).alist_events("a") if "op" in e.data]
    # the first turn's two edits run concurrently: their events in either order
    assert sorted(ops[:2]) == ["update", "working_context_append"] and ops[2:] == ["delete"]


def test_tools_on_a_sqlite_store(tmp_path) -> None:
    from conftest import open_sqlite

    backend = open_sqlite(tmp_path / "s.db")
    try:
        ac = AutoContext(SEARCH, store=backend)

        def respond(view, n):
            if n < 3:
                return AIMessage("", tool_calls=[call("fetch", {"name": f"d{n}", "size": 120})])
            if n == 3:
                return AIMessage("", tool_calls=[call("search_history", {"query": "value-d0-919"})])
            if n == 4:
                hit = re.search(r"id=(\S+) tool", strip_tags(last_result(view).content)).group(1)
                return AIMessage("", tool_calls=[call("reload_offloaded", {"offload_id": hit})])
            return AIMessage("done")

        model = FunctionModel(respond=respond)
        out = self_managed_agent(ac, model, backend, tools=[fetch]).invoke(start(), cfg("sq"))
        check_state(out)
        reloaded = tool_results(out["messages"])[-1]
        assert reloaded.status == "success" and "value-d0-919" in reloaded.content
    finally:
        backend.conn.close()


def test_the_working_context_is_limited_in_tokens_too() -> None:
    """Issue 13: 4,900 characters of Japanese (~4,700 tokens) fit the 5,000-character
    limit and then filled a 6,000-token budget for good; the note is refused now, and the
    run goes on within budget."""
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"max_tokens": 6_000}), store=store)
    note = ("会議は木曜日の午後三時から始まります。" * 300)[:4_900]

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("working_context_append", {"text": note})])
        if n == 1:
            return AIMessage("", tool_calls=[call("working_context_append", {"text": "Thu 15:00"})])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    out = self_managed_agent(ac, model, store).invoke(start(), cfg("wc-tokens"))
    assert out["messages"][-1].content == "done"
    refused, accepted = tool_results(out["messages"])
    assert refused.status == "error" and "tokens" in refused.content
    assert accepted.status == "success"
    assert out["autocontext"]["working_context"] == "Thu 15:00"
    for view in model.seen:
        assert ac.counter.count(view, ac.count_tools) <= 6_000


def test_an_over_limit_working_context_can_be_shrunk_step_by_step() -> None:
    """A working context written under larger limits (a restart with a smaller
    max_tokens or working_context_max_chars) is over the new ones: every replace that
    removed an entry was refused ("Make room first with working_context_replace"), so
    the model could never make the room it was told to make. An edit that does not
    grow it applies (and says it is still over); one that grows it is refused."""
    store = InMemoryStore()
    ac = AutoContext(
        CFG.model_copy(update={"working_context_max_chars": 600}),
        store=store,
    )
    entries = [f"entry {i}: " + "word " * 30 for i in range(6)]
    notes = "\n".join(e.strip() for e in entries)  # 953 characters, ~210 tokens
    assert len(notes) > 600

    def respond(view, n):
        script = [
            call("working_context_replace", {"old": entries[0].strip(), "new": ""}),
            call("working_context_replace", {"old": "entry 1", "new": "entry 1 and more"}),
            call("working_context_append", {"text": "one more"}),
        ]
        if n < len(script):
            return AIMessage("", tool_calls=[script[n]])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    graph = self_managed_agent(ac, model, store)
    state = {**start(), "autocontext": {"working_context": notes}}
    out = graph.invoke(state, cfg("wc-over"))
    shrunk, grown, appended = tool_results(out["messages"])
    assert shrunk.status == "success" and "still over its limit" in shrunk.content
    assert grown.status == "error" and appended.status == "error"
    assert "over its limit of 600" in grown.content
    kept = notes.replace(entries[0].strip(), "", 1)
    assert saved(graph, cfg("wc-over"))["working_context"] == kept


@tool_decorator
def read_log(name: str) -> str:
    """Read a build log."""
    return "\n".join(
        f"{name}: line {i} value={i * 7919 % 1000} status=ok path=/src/pkg/mod_{i % 37}.py"
        for i in range(60)
    )


@pytest.mark.parametrize("steps", [6, 7])
def test_a_restore_that_first_makes_room_puts_the_original_in_place(steps: int) -> None:
    """reload_offloaded(restore=true) alone in its turn, near the trigger: the tool
    compresses first, then restores. The original used to be appended after the
    compressed list (add_messages takes a list after REMOVE_ALL literally), beside its
    preview under one id; the next call archived it again and dropped it, though the
    model had been told it was restored."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=8_000), store=store)
    restored: dict[str, str] = {}

    def respond(view: list, n: int) -> AIMessage:
        if n < steps:
            return AIMessage("", tool_calls=[call("read_log", {"name": f"b{n}"}, f"r{n}")])
        if n == steps:
            offloads = offload_ids([m for m in view if isinstance(m, ToolMessage)], single=True)
            restored["id"] = offloads[-1]
            args = {"offload_id": offloads[-1], "restore": True}
            return AIMessage("", tool_calls=[call("reload_offloaded", args, "rs1")])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    agent = create_agent(
        model,
        [read_log],
        system_prompt="You are a build bot.",
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": 100}
    out = agent.invoke({"messages": [HumanMessage("check builds")]}, config)
    receipt = next(m for m in out["messages"] if getattr(m, "tool_call_id", "") == "rs1")
    assert receipt.content.startswith("Restored")
    ids = [m.id for m in out["messages"]]
    assert len(ids) == len(set(ids))  # one message per id in the state
    record = OffloadStore.wrap(store).reload("t", restored["id"])
    original = record.messages[0]
    last_view = model.seen[steps + 1]
    assert any(strip_tags(str(m.content)) == original.content for m in last_view)
    entries = OffloadStore.wrap(store).iter_history("t")
    logs = [str(e.message.content) for e in entries if e.message.type == "tool"]
    assert len(logs) == len(set(logs))  # each tool result archived once
