"""What the package costs the model with its defaults, and pinned messages.

Overhead (issue 11): a system prompt plus "hi" costs at most 350 tokens more with the
defaults than without the package; a metadata tag at most 12 tokens; the seed's tag
format and the full instructions stay available. Pins: the developer (a flag on a
message), the model (the ``pin_message`` tool, the ``<pin>`` command) pin a message,
no strategy compresses it, it survives a restart, and pins have a limit.
"""

from __future__ import annotations

import re
import uuid
import warnings
from typing import Any

import pytest
from _builders import FunctionModel, call, fetch, self_managed_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig
from langchain_autocontext.commands import pin_op, process_reply, update_op
from langchain_autocontext.errors import ContextBudgetError
from langchain_autocontext.messages import is_pinned, pin
from langchain_autocontext.metadata import strip_tags
from langchain_autocontext.view import resolve_message_ref

COMPACT_TAG = re.compile(r"^<([\w.:-]+) (\d+)/(\d+)/>")


def hi() -> list:
    return [
        SystemMessage("You are a helpful assistant.", id="s"),
        HumanMessage("hi", id=str(uuid.uuid4())),
    ]


@pytest.mark.parametrize("budget", [4_000, 8_000, 16_000, 32_000, 128_000])
def test_defaults_add_at_most_350_tokens_to_a_system_prompt_and_hi(budget: int) -> None:
    bare = AutoContext(
        AutoContextConfig(max_tokens=budget, self_management_tools=False, metadata_tags=False)
    )
    base = bare.prepare_model_call(hi()).tokens
    ac = AutoContext(AutoContextConfig(max_tokens=budget, disclosure="always"))
    assert (
        AutoContext(AutoContextConfig(max_tokens=budget))
        .prepare_model_call(hi())
        .messages[0]
        .content
        == "You are a helpful assistant."
    )  # shown only when needed
    for _ in range(5):  # ids are random: their short forms vary in tokens
        call_ = ac.prepare_model_call(hi())
        assert call_.tokens == ac.counter.count(call_.messages, ac.count_tools)
        assert call_.tokens - base <= 350
    full = AutoContext(
        AutoContextConfig(max_tokens=budget, instructions="full", disclosure="always")
    )
    # the detailed mode stays: every tool offered taught at length (the editing three
    # with the tags, from 32k)
    assert full.prepare_model_call(hi()).tokens - base > (1_000 if budget >= 32_000 else 800)


def test_engines_share_the_compact_tool_schemas_and_each_still_validates() -> None:
    """The compact schemas are built once per tool, not per ``AutoContext`` (pydantic's
    ``create_model`` made every construction take ~48 ms); shared, they still validate
    each engine's calls with the same defaults and bounds."""
    one, two = AutoContext(max_tokens=8_000), AutoContext(max_tokens=16_000)
    schemas = {t.name: t.args_schema for t in one.tools}
    assert all(schemas[t.name] is t.args_schema for t in two.tools)
    for ac in (one, two):  # what the model's call is validated against
        sent = next(t for t in ac.tools if t.name == "search_history").tool_call_schema
        assert sent.model_validate({"query": "x"}).model_dump()["limit"] == 5
        with pytest.raises(ValueError):
            sent.model_validate({"query": "x", "limit": 0})


def test_compact_tags_cost_at_most_12_tokens_and_address_every_id() -> None:
    ac = AutoContext(AutoContextConfig(max_tokens=16_000, disclosure="always", metadata_tags=True))
    msgs: list = [SystemMessage("s", id="s")]
    for k in range(30):
        msgs.append(HumanMessage(f"question {k}", id=str(uuid.uuid4())))
        # LangChain's run ids: time-ordered, shown by their alias
        msgs.append(
            AIMessage(f"answer {k}", id=f"lc_run--01a20ba8-{k:04x}-7187-a237-ee8b7eead32e-0")
        )
    view = ac.prepare_model_call(msgs).messages
    counter = ac.counter
    for sent, original in zip(view[1:], msgs[1:], strict=True):
        tag = COMPACT_TAG.match(sent.content)
        assert tag, sent.content
        assert counter.count_text(tag.group(0)) <= 12
        idx, why = resolve_message_ref(msgs, tag.group(1))
        assert why is None and msgs[idx] is original
        assert strip_tags(sent.content) == original.content  # a copied tag is removed
    seed = AutoContext(
        AutoContextConfig(
            max_tokens=16_000, tag_format="seed", disclosure="always", metadata_tags=True
        )
    )
    assert seed.prepare_model_call(msgs).messages[1].content.startswith('<metadata id="')


# --- pins ----------------------------------------------------------------------------------------
def test_pin_op_limits_and_unpins() -> None:
    counter = AutoContext(AutoContextConfig(max_tokens=4_000)).counter
    msgs = [
        SystemMessage("s", id="s"),
        HumanMessage("the plan: " + "step " * 200, id="plan"),
        HumanMessage("now go", id="u"),
    ]
    refused = pin_op(msgs, "plan", counter=counter, limit=100)
    assert not refused.ok and "100" in refused.text and refused.reason == "limit"
    assert "Pinned now" not in refused.text  # nothing pinned yet
    done = pin_op(msgs, "plan", counter=counter, limit=1_000)
    crowded = pin_op(
        [*done.messages[:2], HumanMessage("x " * 300, id="x"), msgs[2]],
        "x",
        counter=counter,
        limit=300,
    )
    assert not crowded.ok and "Pinned now: plan (" in crowded.text  # what could be unpinned
    assert done.ok and is_pinned(done.messages[1]) and done.messages[1].id == "plan"
    again = pin_op(done.messages, "plan", counter=counter, limit=1_000)
    assert again.ok and again.event is None  # already pinned: nothing changed
    off = pin_op(done.messages, "plan", False, counter=counter, limit=1_000)
    assert off.ok and not is_pinned(off.messages[1])


def test_xml_pin_command() -> None:
    cfg = AutoContextConfig(max_tokens=8_000, xml_commands=True)
    msgs = [
        SystemMessage("s", id="s"),
        HumanMessage("Constraint: never book red-eye flights.", id="c1"),
        HumanMessage("book it", id="u"),
        AIMessage('Noted. <pin id="c1"/>', id="a"),
    ]
    out = process_reply(msgs, config=cfg)
    assert not out.errors and is_pinned(out.messages[1])
    assert "<pin" not in out.messages[-1].content and "[pinned c1]" in out.messages[-1].content


def test_a_pinned_message_cannot_be_updated_past_the_pin_limit() -> None:
    """Found by benchmarks/adversarial.py: the model pinned a short message, then updated
    it with 9,000 characters; the oversized pin stopped every later call. The update is
    refused (tool and XML alike) and the thread goes on."""
    counter = AutoContext(AutoContextConfig(max_tokens=4_000)).counter
    msgs = [
        SystemMessage("s", id="s"),
        pin(HumanMessage("Constraint: no red-eye flights.", id="c1")),
        HumanMessage("book it", id="u"),
    ]
    refused = update_op(msgs, "c1", "y" * 9_000, counter=counter, pin_limit=500)
    assert not refused.ok and refused.reason == "limit" and "500" in refused.text
    fine = update_op(
        msgs, "c1", "Constraint: no red-eye or overnight flights.", counter=counter, pin_limit=500
    )
    assert fine.ok and is_pinned(fine.messages[1])
    cfg = AutoContextConfig(max_tokens=4_000, xml_commands=True, pin_max_tokens=500)
    reply = AIMessage(f'<update id="c1">{"y" * 9_000}</update>', id="a")
    out = process_reply([*msgs, reply], config=cfg)
    assert out.errors and len(out.messages[1].content) < 100


def test_developer_pins_past_the_limit_are_a_clear_error() -> None:
    ac = AutoContext(AutoContextConfig(max_tokens=4_000, pin_max_tokens=50), store=InMemoryStore())
    msgs = [
        SystemMessage("s", id="s"),
        pin(HumanMessage("rules: " + "be careful " * 100, id="r")),
        HumanMessage("go", id="u"),
    ]
    with pytest.raises(ContextBudgetError, match="pin limit of 50"):
        ac.compress(msgs, thread_id="t")
    with warnings.catch_warnings():  # the error says it all: no warning of what comes later
        warnings.simplefilter("error")
        with pytest.raises(ContextBudgetError, match="pin limit of 50"):
            ac.compress([*msgs[:2], pin(msgs[2])], thread_id="t2")


def test_a_developer_pin_on_the_latest_user_message_takes_nothing_from_the_pin_limit() -> None:
    """The latest user message is never compressed, pin or not: a long pinned task
    statement must not exhaust the pin limit while it is the latest; once a later user
    message follows it, it counts, and the first call says so (once), not the error at
    the next user message alone."""
    ac = AutoContext(AutoContextConfig(max_tokens=2_000), store=InMemoryStore())
    task = pin(HumanMessage("Migrate the billing tables; never drop a column. " * 30, id="t"))
    msgs = [SystemMessage("You are a careful agent.", id="s"), task]
    with pytest.warns(UserWarning, match="once a later user message arrives") as seen:
        out = ac.compress(msgs, thread_id="t")  # 335 tokens pinned, limit 250: not counted
    assert [w.filename for w in seen if "pin limit" in str(w.message)] == [__file__]
    assert next(m for m in out.messages if m.id == "t").content == task.content
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        ac.compress([*msgs, AIMessage("step", id="a0")], thread_id="t")
    later = [*msgs, AIMessage("on it", id="a"), HumanMessage("go on", id="u")]
    with pytest.raises(ContextBudgetError, match="pin limit of 250"):
        ac.compress(later, thread_id="t")


def test_the_pin_warnings_an_engine_remembers_are_bounded() -> None:
    """A long-running engine serving many threads, each with a pinned task statement
    past the limit, remembered every message it had warned about for the life of the
    process; it keeps the newest 4,096, and still warns once for each."""
    ac = AutoContext(AutoContextConfig(max_tokens=2_000), store=InMemoryStore())
    text = "Migrate the billing tables; never drop a column. " * 30
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for k in range(4_200):
            msgs = [SystemMessage("s", id="s"), pin(HumanMessage(text, id=f"t{k}"))]
            ac.compress(msgs, thread_id=f"t{k}")
        ac.compress(msgs, thread_id="t4199")  # the last one again: not said twice
    assert sum("pin limit" in str(w.message) for w in seen) == 4_200
    assert len(ac._pin_warned) == 4_096


def test_the_model_s_pin_of_the_latest_user_message_counts_at_once() -> None:
    """The model's pins are judged with the latest user message counted: a pin of it
    left out would pass the limit as soon as the next user message arrives, and stop
    every later call of the thread."""
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=2_000), store=store)
    task = HumanMessage("Migrate the billing tables; never drop a column. " * 30, id="t")
    msgs, receipt = _tool(
        ac, store, [SystemMessage("s", id="s"), task], "pin_message", {"message_id": "t"}
    )
    assert receipt.status == "error" and "was not pinned" in receipt.content
    assert not is_pinned(next(m for m in msgs if m.id == "t"))


def test_pins_past_a_limit_lowered_across_a_restart_are_named_and_unpinning_recovers() -> None:
    """The model pinned a result under max_tokens=3,000; the thread resumes under 1,200,
    whose pin limit the pin passes. The error names the pin and how to unpin it in a
    checkpointed thread; doing so recovers the thread with nothing lost."""
    store = InMemoryStore()

    def respond(view: list, n: int) -> AIMessage:
        if n == 0:
            return AIMessage("", tool_calls=[call("fetch", {"name": "contract", "size": 12})])
        if n == 1:
            result = next(m for m in reversed(view) if isinstance(m, ToolMessage))
            shown = COMPACT_TAG.match(result.content).group(1)
            return AIMessage("", tool_calls=[call("pin_message", {"message_id": shown})])
        return AIMessage("done")

    def agent(max_tokens: int, model: Any) -> Any:
        cfg = AutoContextConfig(max_tokens=max_tokens, disclosure="always", metadata_tags=True)
        return self_managed_agent(AutoContext(cfg, store=store), model, store, tools=[fetch])

    first = agent(3_000, FunctionModel(respond=respond))
    config = {"configurable": {"thread_id": "lowered"}}
    first.invoke({"messages": [SystemMessage("Be exact."), HumanMessage("Read it.")]}, config)
    again = agent(1_200, FunctionModel(respond=lambda view, n: AIMessage("ok")))
    again.checkpointer = first.checkpointer
    pinned = [m for m in again.get_state(config).values["messages"] if is_pinned(m)]
    assert len(pinned) == 1
    with pytest.raises(ContextBudgetError, match="pin limit of 150") as caught:
        again.invoke({"messages": [HumanMessage("next")]}, config)
    assert str(pinned[0].id) in str(caught.value) and "update_state" in str(caught.value)
    # what the error says to do
    again.update_state(config, {"messages": [pin(m, False) for m in pinned]})
    out = again.invoke({"messages": [HumanMessage("and now")]}, config)
    assert out["messages"][-1].content == "ok"
    kept = {m.id: m for m in out["messages"]}
    assert kept[pinned[0].id].content == pinned[0].content and not is_pinned(kept[pinned[0].id])
    assert [m.content for m in out["messages"] if isinstance(m, HumanMessage)][-2:] == [
        "next",
        "and now",
    ]


def test_the_model_pins_a_result_and_it_survives_compression_and_a_restart() -> None:
    store = InMemoryStore()
    cfg = AutoContextConfig(
        max_tokens=3_000, msg_threshold=20, disclosure="always", metadata_tags=True
    )
    ac = AutoContext(cfg, store=store)
    state: dict[str, Any] = {}

    def respond(view: list, n: int) -> AIMessage:
        if n == 0:
            return AIMessage("", tool_calls=[call("fetch", {"name": "contract", "size": 6})])
        if n == 1:  # pin the contract, by the id its tag shows
            result = next(m for m in reversed(view) if isinstance(m, ToolMessage))
            state["shown"] = COMPACT_TAG.match(result.content).group(1)
            return AIMessage("", tool_calls=[call("pin_message", {"message_id": state["shown"]})])
        if n < 40:
            return AIMessage("", tool_calls=[call("fetch", {"name": f"doc{n}", "size": 30})])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    agent = self_managed_agent(ac, model, store, tools=[fetch])
    config = {"configurable": {"thread_id": "pins"}, "recursion_limit": 200}
    out = agent.invoke(
        {"messages": [SystemMessage("Be exact."), HumanMessage("Read it all.")]}, config
    )
    assert out["messages"][-1].content == "done"
    pinned = [m for m in out["messages"] if is_pinned(m)]
    assert len(pinned) == 1 and "contract line 0" in pinned[0].content
    receipt = [m for m in model.seen[2] if isinstance(m, ToolMessage)][-1]
    assert receipt.status == "success" and "Pinned" in receipt.content
    # every model call after the pin saw the contract verbatim, through every compression
    later = model.seen[2:]
    assert len(later) > 30
    for view in later:
        assert any(
            strip_tags(m.content) == pinned[0].content for m in view if isinstance(m.content, str)
        )
    # a restart (new graph, same checkpointer): the pin is in the checkpointed message
    again = self_managed_agent(ac, model, store, tools=[fetch])
    again.checkpointer = agent.checkpointer
    restored = again.get_state(config).values["messages"]
    assert [m.id for m in restored if is_pinned(m)] == [pinned[0].id]


def _tool(ac: AutoContext, store: Any, messages: list, name: str, args: dict) -> tuple[list, Any]:
    """Call one of the package's tools as the model would (a ToolRuntime over the graph
    state), apply its update; returns the messages and the tool's receipt."""
    from langgraph.graph.message import add_messages
    from langgraph.prebuilt import ToolRuntime

    tool_call = call(name, args)
    msgs = add_messages(
        list(messages), [AIMessage("", tool_calls=[tool_call], id=uuid.uuid4().hex)]
    )
    runtime = ToolRuntime(
        state={"messages": msgs, "autocontext": {}},
        context=None,
        config={"configurable": {"thread_id": "t"}},
        stream_writer=lambda _: None,
        tool_call_id=tool_call["id"],
        store=store,
    )
    tool = next(t for t in ac.all_tools if t.name == name)
    out = tool.invoke({**tool_call, "args": {**args, "runtime": runtime}})
    msgs = add_messages(msgs, out.update["messages"])
    return msgs, msgs[-1]


def _dump_pair() -> list:
    """A tool call with two results: a tiny one and a ~6,800-token one."""
    calls = [call("dump", {"k": 1}, "c1"), call("dump", {"k": 2}, "c2")]
    big = "\n".join(
        f"/src/pkg/module_{i % 37}.py:{i}: checked item {i} status=ok" for i in range(400)
    )
    return [
        SystemMessage("sys", id="s"),
        HumanMessage("task: read the dumps", id="u0"),
        AIMessage("", tool_calls=calls, id="ai1"),
        ToolMessage("ok", tool_call_id="c1", name="dump", id="t1"),
        ToolMessage(big, tool_call_id="c2", name="dump", id="t2"),
        AIMessage("read them", id="a2"),
        HumanMessage("go on", id="u1"),
    ]


@pytest.mark.parametrize("target", ["ai1", "t1"])
def test_the_pin_limit_counts_the_tool_call_group_a_pin_keeps(target: str) -> None:
    """A pin keeps its whole tool-call group (the call and every result), so the limit
    counts the group: pinning the tiny call or its tiny sibling result must not make a
    6,800-token result incompressible (it used to, and every later call was refused)."""
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=4_000, disclosure="always"), store=store)
    msgs = _dump_pair()
    refused = pin_op(msgs, target, counter=ac.counter, limit=ac.config.pin_limit)
    assert not refused.ok and refused.reason == "limit"
    assert "paired with it" in refused.text and f"{ac.config.pin_limit:,}" in refused.text
    out, receipt = _tool(ac, store, msgs, "pin_message", {"message_id": target})
    assert receipt.status == "error" and not any(is_pinned(m) for m in out)
    assert ac.compress(out, thread_id="t", force=True).tokens_after <= 4_000
    # a developer pin on the same message: a clear error that names the pins
    msgs[2 if target == "ai1" else 3] = pin(msgs[2 if target == "ai1" else 3])
    with pytest.raises(ContextBudgetError, match="pin limit of 500"):
        ac.compress(msgs, thread_id="dev")


def test_restore_keeps_the_pin_and_the_pin_limit() -> None:
    """reload_offloaded(restore=true) puts the original where its shortened copy was: a
    pinned copy stays pinned, and a restore that would take the pins past their limit is
    refused (the original is shown instead), so the next call still goes through."""
    store = InMemoryStore()
    cfg = AutoContextConfig(max_tokens=8_000, pin_max_tokens=500, disclosure="always")
    ac = AutoContext(cfg, store=store)
    spec = HumanMessage("SPEC: " + "keep every column; " * 70, id="spec")  # ~290 tokens
    note = HumanMessage("NOTE: " + "prefer small commits; " * 60, id="note")  # ~250 tokens
    msgs = [SystemMessage("sys", id="s"), spec, note, AIMessage("ok", id="a0")]
    msgs = ac.compress([*msgs, HumanMessage("go", id="u")], thread_id="t").messages
    msgs, _ = _tool(ac, store, msgs, "update_message", {"message_id": "spec", "content": "SPEC."})
    msgs, receipt = _tool(ac, store, msgs, "pin_message", {"message_id": "spec"})
    assert receipt.status == "success"
    msgs, receipt = _tool(
        ac, store, msgs, "reload_offloaded", {"offload_id": "spec", "restore": True}
    )
    restored = next(m for m in msgs if m.id == "spec")
    assert "Restored" in receipt.content and restored.content == spec.content
    assert is_pinned(restored)  # the pin stayed with the message
    # now the same with the note pinned too: restoring would pass the limit
    msgs, _ = _tool(ac, store, msgs, "update_message", {"message_id": "spec", "content": "SPEC."})
    msgs, receipt = _tool(ac, store, msgs, "pin_message", {"message_id": "note"})
    assert receipt.status == "success"
    msgs, receipt = _tool(
        ac, store, msgs, "reload_offloaded", {"offload_id": "spec", "restore": True}
    )
    assert "not restored" in receipt.content and "pin limit of 500" in receipt.content
    assert next(m for m in msgs if m.id == "spec").content == "SPEC."
    assert "keep every column" in receipt.content  # read here instead
    ac.compress(msgs, thread_id="t")  # no ContextBudgetError: the thread goes on


def test_restoring_a_pinned_preview_keeps_its_original_pinned() -> None:
    store = InMemoryStore()
    cfg = AutoContextConfig(max_tokens=6_000, disclosure="always", min_consecutive_tool_messages=50)
    ac = AutoContext(cfg, store=store)
    msgs: list = [SystemMessage("sys", id="s"), HumanMessage("read the files", id="u")]
    for k in range(8):
        calls = [call("cat", {"f": k}, f"c{k}")]
        msgs += [
            AIMessage("", tool_calls=calls, id=f"ai{k}"),
            ToolMessage(
                fetch.invoke({"name": f"file{k}", "size": 25}), tool_call_id=f"c{k}", id=f"t{k}"
            ),
        ]
    msgs = ac.compress(
        [*msgs, AIMessage("read all", id="done")], thread_id="t", force=True
    ).messages
    from langchain_autocontext.messages import marker

    held = next(
        m for m in msgs if isinstance(m, ToolMessage) and (marker(m) or {}).get("offload_id")
    )
    msgs, receipt = _tool(ac, store, msgs, "pin_message", {"message_id": held.id})
    assert receipt.status == "success"
    oid = marker(held)["offload_id"]
    msgs, receipt = _tool(ac, store, msgs, "reload_offloaded", {"offload_id": oid, "restore": True})
    now = next(m for m in msgs if m.id == held.id)
    assert "Restored" in receipt.content and marker(now) is None and is_pinned(now)


def test_the_running_summary_cannot_be_pinned() -> None:
    """The recursive summary is rewritten whenever more messages are evicted into it: a
    pin on it could not hold, so it is refused with what to do instead."""
    ac = AutoContext(
        AutoContextConfig(max_tokens=4_000, self_management_tools=False), store=InMemoryStore()
    )
    msgs: list = [SystemMessage("You are an airline agent.", id="sys")]
    for r in range(12):
        msgs += [
            HumanMessage(f"Request {r}: " + "details " * 60, id=f"user{r}"),
            AIMessage(f"Done {r}. " + "answer " * 60, id=f"answer{r}"),
        ]
    msgs = ac.compress(msgs, thread_id="t", force=True).messages
    from langchain_autocontext.messages import marker

    assert (marker(msgs[1]) or {}).get("kind") == "summary"
    refused = pin_op(msgs, msgs[1].id, counter=ac.counter, limit=ac.config.pin_limit)
    assert not refused.ok and refused.reason == "summary" and "working context" in refused.text
    assert pin_op(msgs, msgs[2].id, counter=ac.counter, limit=ac.config.pin_limit).ok


def test_a_runnable_sees_a_pin_added_to_a_message_it_has_seen() -> None:
    """as_runnable() recognises a resent conversation by its messages; a pin added later
    changes what may be compressed, so the runnable must not reuse its unpinned copy."""
    ac = AutoContext(
        AutoContextConfig(max_tokens=3_000, self_management_tools=False), store=InMemoryStore()
    )
    runnable = ac.as_runnable()
    cfg = {"configurable": {"thread_id": "chain"}}
    task = HumanMessage("TASK: migrate billing; never drop a column. " + "details " * 30, id="task")
    convo: list = [SystemMessage("sys", id="s"), task, AIMessage("ok", id="a0")]
    runnable.invoke(convo, cfg)
    convo[1] = pin(task)
    for r in range(30):
        convo += [
            HumanMessage(f"step {r}: " + "more input " * 25, id=f"u{r}"),
            AIMessage(f"done {r} " + "reply " * 25, id=f"a{r + 1}"),
        ]
        out = runnable.invoke(convo, cfg)
    kept = [m for m in out if m.id == "task"]
    assert kept and kept[0].content == task.content and is_pinned(kept[0])


@pytest.mark.parametrize("instructions", ["compact", "full"])
def test_the_xml_pin_commands_are_taught(instructions: str) -> None:
    from langchain_autocontext.view import system_section

    text = system_section(AutoContextConfig(xml_commands=True, instructions=instructions))
    assert '<pin id="ID"/>' in text and '<unpin id="ID"/>' in text
    full = system_section(AutoContextConfig(instructions="full"))
    assert "pin_message(message_id" in full and "<pin" not in full  # no XML: not offered


def test_parallel_pins_of_one_turn_share_the_pin_limit() -> None:
    """Two pin_message calls in one turn, each within the limit alone, used to be both
    accepted: together they took the pins past the limit and every later model call
    raised ContextBudgetError (found by the property test over random programs). The
    later call of the turn now counts the earlier one's pin and is refused."""
    store = InMemoryStore()
    cfg = AutoContextConfig(
        max_tokens=4_000, msg_threshold=30, disclosure="always", metadata_tags=True
    )
    ac = AutoContext(cfg, store=store)

    def respond(view: list, n: int) -> AIMessage:
        if n < 2:
            return AIMessage("", tool_calls=[call("fetch", {"name": f"doc{n}", "size": 30})])
        if n == 2:
            ids = [COMPACT_TAG.match(m.content).group(1) for m in view if m.type == "tool"]
            return AIMessage(
                "", tool_calls=[call("pin_message", {"message_id": i}) for i in ids[-2:]]
            )
        if n == 3:
            receipts[:] = [m for m in view if isinstance(m, ToolMessage)][-2:]
        if n < 12:
            return AIMessage("", tool_calls=[call("fetch", {"name": f"more{n}", "size": 30})])
        return AIMessage("done")

    receipts: list[ToolMessage] = []
    model = FunctionModel(respond=respond)
    agent = self_managed_agent(ac, model, store, tools=[fetch])
    config = {"configurable": {"thread_id": "parallel-pins"}, "recursion_limit": 100}
    out = agent.invoke({"messages": [SystemMessage("s"), HumanMessage("read")]}, config)
    assert out["messages"][-1].content == "done"
    assert sorted(r.status for r in receipts) == ["error", "success"]
    assert "was not pinned" in strip_tags(next(r.content for r in receipts if r.status == "error"))
    assert len([m for m in out["messages"] if is_pinned(m)]) == 1
    for view in model.seen:
        assert ac.counter.count(view, ac.count_tools) <= 4_000


def test_a_pin_on_the_system_message_changes_nothing_and_counts_nothing() -> None:
    """The model pinned the system message: its pin counted toward the limit at its size
    in the view (with the package's section and the working context), which took the
    pins past the limit that the pin tool had just checked (found by the property test
    over random programs: 625 tokens checked, 730 counted by the next call)."""
    store = InMemoryStore()
    ac = AutoContext(AutoContextConfig(max_tokens=4_000, disclosure="always"), store=store)
    msgs = [SystemMessage("rules " * 200, id="sys"), HumanMessage("task", id="u")]
    out, receipt = _tool(ac, store, msgs, "pin_message", {"message_id": "sys"})
    assert receipt.status == "success" and "always in your context" in receipt.content
    assert not any(is_pinned(m) for m in out)
    # a developer pin on the system message is not counted against the limit either
    dev = [pin(msgs[0]), msgs[1]]
    assert ac.compress(dev, thread_id="dev").tokens_after <= 4_000


@pytest.mark.parametrize("via", ["tool", "xml"])
def test_a_pin_of_a_message_whose_tool_calls_are_still_running_is_refused(via: str) -> None:
    """A pin keeps the results of the message's tool calls; pinned while they were still
    running (the pin beside a large call, on the message that issued both), the pin was
    accepted at the call's size, the large result then landed inside the pinned group,
    and every later model call of the thread raised ContextBudgetError."""
    store = InMemoryStore()
    ac = AutoContext(
        AutoContextConfig(max_tokens=4_000, disclosure="always", xml_commands=True), store=store
    )
    receipts: list[str] = []

    def respond(view: list, n: int) -> AIMessage:
        if n == 0:
            big = call("fetch", {"name": "dump", "size": 150})
            if via == "xml":
                return AIMessage('Keeping it. <pin id="me"/>', id="me", tool_calls=[big])
            pin_call = call("pin_message", {"message_id": "me"})
            return AIMessage("", id="me", tool_calls=[pin_call, big])
        if n == 1:
            receipts.append(strip_tags(str(view[-1].content)))
            receipts.extend(strip_tags(str(m.content)) for m in view[-3:])
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    agent = self_managed_agent(ac, model, store, tools=[fetch])
    config = {"configurable": {"thread_id": f"pending-pin-{via}"}, "recursion_limit": 20}
    out = agent.invoke({"messages": [SystemMessage("s"), HumanMessage("read")]}, config)
    assert out["messages"][-1].content == "done"
    assert not any(is_pinned(m) for m in out["messages"])
    assert any("no result yet" in r for r in receipts)
    for view in model.seen:
        assert ac.counter.count(view, ac.count_tools) <= 4_000
