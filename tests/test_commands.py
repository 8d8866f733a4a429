"""The XML command protocol: parsing, semantics, injection safety, the autonomous loop."""

from __future__ import annotations

from typing import Any

import pytest
from _builders import (
    FunctionModel,
    call,
    copying_tags,
    fetch,
    saved,
    view_ids,
)
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig
from langchain_autocontext.commands import code_spans, parse_commands, process_reply
from langchain_autocontext.messages import autonomous_steps, find_violations, text_of
from langchain_autocontext.metadata import TAG_PATTERN
from langchain_autocontext.search import search_history
from langchain_autocontext.store import OffloadStore

XML = AutoContextConfig(
    max_tokens=8_000,
    xml_commands=True,
    max_autonomous_steps=3,
    disclosure="always",
    metadata_tags=True,
)


# --- parsing -----------------------------------------------------------------------------------
def ops(text: str) -> list[tuple[str, str | None, str | None]]:
    return [(c.op, c.id, c.content) for c in parse_commands(text).commands]


def test_parse_the_three_commands_in_their_forms() -> None:
    text = (
        'First <delete id="a1"/> then <delete id=\'a2\' /> and <delete id="a3"></delete>.\n'
        '<update id="b1">line one\nline two</update>\n'
        "<user>carry on with step 2</user>"
    )
    assert ops(text) == [
        ("delete", "a1", None),
        ("delete", "a2", None),
        ("delete", "a3", None),
        ("update", "b1", "line one\nline two"),
        ("user", None, "carry on with step 2"),
    ]
    assert not parse_commands(text).errors


def test_code_and_entities_are_not_commands() -> None:
    text = (
        'To delete, write `<delete id="x"/>`; for example:\n'
        '```xml\n<delete id="y"/>\n<user>no</user>\n```\n'
        '~~~\n<update id="z">no</update>\n~~~\n'
        'Escaped: &lt;delete id="w"/&gt; and ``<user>double ticks</user>``.'
    )
    assert ops(text) == []
    assert not parse_commands(text).errors


@pytest.mark.parametrize(
    "text",
    [
        'You wrote:\n> <delete id="a"/>\nShould I?',
        'Noted <!-- <delete id="a"/> --> ok',
        'Example:\n\n    <delete id="a"/>\n\nthat is how.',
        'The user asked me to type "<delete id="a"/>" as an example.',
        "It said \u201c<user>go on</user>\u201d, which I will not do.",
    ],
)
def test_quoted_commented_and_indented_commands_are_mentions(text: str) -> None:
    """A model quoting the user's pasted text (a blockquote, quotation marks), an HTML
    comment or an indented code block ran the commands it showed: the user's text could
    delete messages through the model's reply."""
    assert ops(text) == []
    assert not parse_commands(text).errors


def test_an_indented_list_continuation_is_still_meant() -> None:
    text = '- first, clean up:\n\n    <delete id="a"/>\n'
    assert ops(text) == [("delete", "a", None)]


def test_an_unclosed_fence_hides_the_rest() -> None:
    text = 'real <delete id="a"/>\n```\n<delete id="b"/>'
    assert ops(text) == [("delete", "a", None)]
    spans = code_spans(text)
    assert spans and spans[-1][1] == len(text)


def test_a_command_inside_update_content_is_content() -> None:
    text = '<update id="m">keep <user>this</user> as text</update>'
    assert ops(text) == [("update", "m", "keep <user>this</user> as text")]


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("<delete/>", "has no id"),
        ('<delete id=""/>', "has no id"),
        ('<delete id="a" force="1"/>', "only an id"),
        ('<update id="a"/>', "has no content"),
        ('<update id="a">never closed', "no closing </update>"),
        ('<update id="a">   </update>', "empty content"),
        ('<user id="x">hi</user>', "takes no attributes"),
        ('<delete id="a">', "is not closed"),
        ("<delete id=a/>", 'quote the id, as in id="ID"'),
    ],
)
def test_malformed_commands_are_reported(text: str, phrase: str) -> None:
    parsed = parse_commands(text)
    assert not parsed.commands
    assert len(parsed.errors) == 1 and phrase in parsed.errors[0]


# --- process_reply (pure) ------------------------------------------------------------------------
def convo() -> list:
    return [
        SystemMessage("sys", id="sys"),
        HumanMessage("old question", id="u1"),
        AIMessage("old answer", id="a1"),
        HumanMessage("new question", id="u2"),
        AIMessage("", tool_calls=[call("fetch", {"name": "d"}, "c1")], id="a2"),
        ToolMessage("long output", tool_call_id="c1", name="fetch", id="t1"),
    ]


def test_deletes_run_before_updates_before_user_as_written() -> None:
    reply = AIMessage(
        '<user>next step</user> <update id="a1">short</update> <delete id="a1"/> '
        '<update id="t1">out: ok</update> <delete id="u1"/>',
        id="r",
    )
    out = process_reply([*convo(), reply], config=XML, state=None)
    kept = {m.id: m for m in out.messages}
    # both deletes first (a1 and u1), so the update of a1 finds nothing
    assert "a1" not in kept and "u1" not in kept
    assert kept["t1"].content == "out: ok"
    assert [e["op"] for e in out.events] == ["delete", "delete", "update", "user"]
    assert any("No message with id 'a1'" in e for e in out.errors)
    assert isinstance(out.messages[-1], HumanMessage) and out.messages[-1].content == "next step"
    cleaned = kept["r"].content
    assert "[deleted a1]" in cleaned and "[updated t1]" in cleaned and "<user>" not in cleaned
    assert '<update id="a1">short</update>' in cleaned  # the failed one stays as written
    assert not find_violations(out.messages)
    assert out.state["command_errors"] and out.state["autonomous_pending"] is True


def test_each_id_names_the_message_the_model_saw_by_it() -> None:
    # A and B share their first four characters: A is shown as "abcd", B as "abcd2".
    # Once A is deleted, B's short id becomes "abcd": an update of "abcd" written
    # next to the delete still names A (gone), never B.
    a, b = "abcd1111-1111-4111-8111-111111111111", "abcd2222-2222-4222-8222-222222222222"
    msgs = [
        SystemMessage("sys", id="s"),
        HumanMessage("q1", id="11111111-0000-4000-8000-000000000001"),
        AIMessage("old answer", id=a),
        HumanMessage("q2", id="22222222-0000-4000-8000-000000000002"),
        AIMessage("important answer", id=b),
        HumanMessage("q3", id="33333333-0000-4000-8000-000000000003"),
    ]
    reply = AIMessage(
        '<delete id="abcd"/> <update id="abcd">short</update> <pin id="abcd2"/>', id="r"
    )
    out = process_reply([*msgs, reply], config=XML, state=None)
    kept = {m.id: m for m in out.messages}
    assert a not in kept
    assert kept[b].content == "important answer"
    assert [e["op"] for e in out.events] == ["delete", "pin"]
    assert any(e.startswith('<update id="abcd">short</update>') for e in out.errors)


def test_protected_targets_and_pairs_are_refused() -> None:
    reply = AIMessage(
        '<delete id="sys"/><delete id="u2"/><delete id="t1"/><delete id="r"/>'
        '<update id="u2">x</update>',
        id="r",
    )
    out = process_reply([*convo(), reply], config=XML, state=None)
    assert [m.id for m in out.messages] == [m.id for m in [*convo(), reply]]
    joined = "\n".join(out.errors)
    for phrase in (
        "it is the system message",
        "latest user message",
        "would leave that call unanswered",
        "issued this edit",
    ):
        assert phrase in joined
    assert not out.events


def test_tags_copied_by_the_model_are_stripped_even_without_commands() -> None:
    cfg = XML.model_copy(update={"xml_commands": False})
    tag = '<metadata id="r" cumulative_message_token_count="9" message_token_count="3"/>\n'
    reply = AIMessage(tag + 'Done. <delete id="t1"/>', id="r")
    out = process_reply([*convo(), reply], config=cfg, state=None)
    assert out.messages[-1].content == 'Done. <delete id="t1"/>'  # commands off: left alone
    assert out.changed and not out.events


def test_user_command_is_refused_next_to_tool_calls() -> None:
    reply = AIMessage("<user>go on</user>", tool_calls=[call("fetch", {"name": "x"})], id="r")
    out = process_reply([*convo(), reply], config=XML, state=None)
    assert not out.user_messages
    assert "also calls tools" in out.errors[0]


def test_nothing_to_do_is_no_change() -> None:
    out = process_reply([*convo(), AIMessage("plain answer", id="r")], config=XML, state=None)
    assert not out.changed and not out.state_changed and out.update([]) == {}


# --- through real graphs ------------------------------------------------------------------------
def start() -> dict:
    return {"messages": [SystemMessage("You are terse."), HumanMessage("Look up d1 and d2.")]}


def cfg(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 60}


def test_commands_edit_the_state_and_keep_originals(build, request: pytest.FixtureRequest) -> None:
    store = InMemoryStore()
    ac = AutoContext(XML, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("fetch", {"name": "d1"})])
        if n == 1:
            return AIMessage("", tool_calls=[call("fetch", {"name": "d2"})])
        if n == 2:
            results = [sid for sid, m in view_ids(view) if isinstance(m, ToolMessage)]
            calls = [sid for sid, m in view_ids(view) if isinstance(m, AIMessage) and m.tool_calls]
            return AIMessage(
                f'Keeping notes. <update id="{results[1]}">d2: 40 lines</update>'
                f'<delete id="{calls[0]}"/> Answer: d1 and d2 fetched.'
            )
        return AIMessage("unused")

    model = FunctionModel(respond=respond)
    out = build(ac, model, store, tools=[fetch]).invoke(start(), cfg("x1"))
    msgs = out["messages"]
    assert not find_violations(msgs)
    fetched = [m for m in msgs if isinstance(m, ToolMessage)]
    assert [m.content for m in fetched] == ["d2: 40 lines"]  # d1's call went with its result
    final = msgs[-1]
    assert final.content.startswith("Keeping notes. [updated ")
    assert "[deleted " in final.content and "<delete" not in final.content
    ws = OffloadStore.wrap(store)
    raw = ws.get_history_message("x1", final.id)
    assert raw is not None
    if request.node.callspec.params["build"] == "create_agent":  # as every after_model left it
        assert raw.message.content == final.content
    else:
        assert '<delete id="' in raw.message.content  # the raw reply is kept
    assert [e.op for e in ws.list_events("x1") if e.data.get("via") == "xml"] == [
        "delete",
        "update",
    ]
    assert ws.history_count("x1") == 2 + 4 + 1  # system, user, 2 calls + 2 results, the reply


def zebras(calls: int) -> Any:
    """A model that calls ``fetch`` ``calls`` times, then answers; reply ``n`` says
    ``zebra{n}``, after the metadata tag of the last message it received, copied."""

    def respond(view, n):
        if n < calls:
            return AIMessage(f"step {n} zebra{n}", tool_calls=[call("fetch", {"name": f"d{n}"})])
        return AIMessage(f"done zebra{n}")

    return copying_tags(respond)


def archived_once(store: Any, thread: str, messages: list, model: FunctionModel) -> None:
    """The history holds each message of ``messages`` once, as the state does: no reply
    also as the model wrote it, with the tag it copied, and a search finds it once."""
    assert all(TAG_PATTERN.match(text_of(sent[-1])) for sent in model.seen)  # tags to copy
    ws = OffloadStore.wrap(store)
    history = [e.message for e in ws.iter_history(thread)]
    assert not any(TAG_PATTERN.search(text_of(m)) for m in history)
    assert sorted(str(m.id) for m in history) == sorted(str(m.id) for m in messages)
    replies = {m.id: m.content for m in messages if isinstance(m, AIMessage)}
    assert {m.id: m.content for m in history if isinstance(m, AIMessage)} == replies
    hits = [h for h in search_history(ws, thread, "zebra3") if h.role == "assistant"]
    assert len(hits) == 1 and hits[0].version_of is None


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_reply_with_a_copied_tag_is_archived_once_as_the_state_holds_it(
    build, mode: str
) -> None:
    """A reply that starts with the tag the model copied was archived as written, tag
    and all, by the post_model_hook and the command node, then again without the tag
    (a later version under its id) at the next call: 26 history entries for a state of
    18 messages, and search_history found each reply twice, once with the tag."""
    store = InMemoryStore()
    ac = AutoContext(XML, store=store)
    model = FunctionModel(respond=zebras(6))
    graph = build(ac, model, store, tools=[fetch])
    inputs = start()
    out = (
        await graph.ainvoke(inputs, cfg("z")) if mode == "async" else graph.invoke(inputs, cfg("z"))
    )
    assert out["messages"][-1].content == "done zebra6"
    archived_once(store, "z", out["messages"], model)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_functional_api_archives_a_reply_with_a_copied_tag_once(mode: str) -> None:
    """docs/surfaces.md's entrypoint loop (compress, prepare_model_call, the model,
    after_model_call) archived each reply twice too: with its copied tag, then stripped."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint
    from langgraph.graph.message import add_messages

    store = InMemoryStore()
    ac = AutoContext(XML.model_copy(update={"self_management_tools": False}), store=store)
    model = FunctionModel(respond=zebras(0))

    if mode == "sync":

        @entrypoint(checkpointer=InMemorySaver(), store=store)
        def chat(question: str, *, previous: list | None) -> Any:
            messages = add_messages(previous or [], [HumanMessage(question)])
            messages = ac.compress(messages).messages
            view = ac.prepare_model_call(messages).messages
            messages = add_messages(messages, [model.invoke(view)])
            messages = add_messages(messages, ac.after_model_call(messages).get("messages", []))
            return entrypoint.final(value=messages, save=messages)

    else:

        @entrypoint(checkpointer=InMemorySaver(), store=store)
        async def chat(question: str, *, previous: list | None) -> Any:
            messages = add_messages(previous or [], [HumanMessage(question)])
            messages = (await ac.acompress(messages)).messages
            view = ac.prepare_model_call(messages).messages
            messages = add_messages(messages, [await model.ainvoke(view)])
            update = await ac.aafter_model_call(messages)
            messages = add_messages(messages, update.get("messages", []))
            return entrypoint.final(value=messages, save=messages)

    for n in range(5):
        text = f"question {n}"
        messages = (
            await chat.ainvoke(text, cfg("f")) if mode == "async" else chat.invoke(text, cfg("f"))
        )
    ac.compress(messages, thread_id="f")  # the next call archives what the last one left
    assert [m.content for m in messages if isinstance(m, AIMessage)] == [
        f"done zebra{n}" for n in range(5)
    ]
    archived_once(store, "f", messages, model)


def test_a_reply_its_commands_rewrote_is_archived_as_written_less_the_copied_tag(
    build, request: pytest.FixtureRequest
) -> None:
    """The reply as the model wrote it (its commands kept, docs/self-management.md) is
    archived without the tag it copied: the history never holds a copied tag. Under
    ``create_agent`` the middleware archives it as the state holds it once every
    ``after_model`` hook has run (a redaction's), its commands as their receipts."""
    store = InMemoryStore()
    ac = AutoContext(XML, store=store)

    def respond(view, n):
        if n == 0:
            return AIMessage("", tool_calls=[call("fetch", {"name": "d1"})])
        result = next(sid for sid, m in view_ids(view) if isinstance(m, ToolMessage))
        return AIMessage(f'Noted. <update id="{result}">d1: 40 lines</update> Done.')

    model = FunctionModel(respond=copying_tags(respond))
    out = build(ac, model, store, tools=[fetch]).invoke(start(), cfg("w"))
    final = out["messages"][-1]
    assert final.content.startswith("Noted. [updated ")
    ws = OffloadStore.wrap(store)
    written = ws.get_history_message("w", final.id)
    as_written = request.node.callspec.params["build"] != "create_agent"
    expected = 'Noted. <update id="' if as_written else "Noted. [updated "
    assert written is not None and written.message.content.startswith(expected)
    assert not any(TAG_PATTERN.search(text_of(e.message)) for e in ws.iter_history("w"))
    assert ws.history_count("w") == 2 + 3  # system, user, the call, its result, the reply


def test_errors_are_reported_on_the_next_turn_once(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(XML, store=store)

    def respond(view, n):
        return AIMessage('Tidying. <delete id="no-such"/><update id="x"/>' if n == 0 else "ok")

    model = FunctionModel(respond=respond)
    graph = build(ac, model, store)
    graph.invoke(start(), cfg("e1"))
    assert saved(graph, cfg("e1"))["command_errors"]
    graph.invoke({"messages": [HumanMessage("and now?")]}, cfg("e1"))
    notice = model.seen[1][-1]
    assert notice.id == "autocontext-notice" and "2 error(s)" in notice.content
    assert "No message with id 'no-such'" in notice.content and "has no content" in notice.content
    graph.invoke({"messages": [HumanMessage("again")]}, cfg("e1"))
    assert all(m.id != "autocontext-notice" for m in model.seen[2])


def test_the_autonomous_loop_is_bounded(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(XML, store=store)

    def respond(view, n):
        return AIMessage(f"step {n} <user>continue after step {n}</user>")

    model = FunctionModel(respond=respond)
    graph = build(ac, model, store)
    out = graph.invoke(start(), cfg("loop"))
    # the first reply plus 3 autonomous steps; the 4th <user> is refused
    assert len(model.seen) == 4
    humans = [m.content for m in out["messages"] if isinstance(m, HumanMessage)]
    assert humans == [
        "Look up d1 and d2.",
        "continue after step 0",
        "continue after step 1",
        "continue after step 2",
    ]
    assert autonomous_steps(out["messages"]) == 3
    assert "limit of 3 autonomous steps" in saved(graph, cfg("loop"))["command_errors"][0]
    # a real user message resets the count
    out = graph.invoke({"messages": [HumanMessage("new task")]}, cfg("loop"))
    assert len(model.seen) == 8
    assert autonomous_steps(out["messages"]) == 3


def _agent_of_schema(schema: str, ac: Any, model: Any, store: Any) -> Any:
    """An agent whose state has the package's ``autocontext`` key (``"ac"``) or not
    (``"plain"``): create_react_agent with its hooks, or a StateGraph with the node."""
    import warnings

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph

    from langchain_autocontext import AutoContextAgentState, AutoContextState

    kind, keyed = schema.split("-")
    if kind == "react":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent
            from langgraph.prebuilt.chat_agent_executor import AgentState

            return create_react_agent(
                model,
                ac.tools,
                pre_model_hook=ac.pre_model_hook,
                post_model_hook=ac.post_model_hook,
                state_schema=AutoContextAgentState if keyed == "ac" else AgentState,
                checkpointer=InMemorySaver(),
                store=store,
            )
    g = StateGraph(AutoContextState if keyed == "ac" else MessagesState)
    g.add_node("autocontext", ac.node())
    g.add_node("model", ac.model_node(model))
    g.add_node("commands", ac.command_node())
    g.add_edge(START, "autocontext")
    g.add_edge("autocontext", "model")
    g.add_edge("model", "commands")
    return g.compile(store=store, checkpointer=InMemorySaver())


@pytest.mark.parametrize("schema", ["react-plain", "react-ac", "graph-plain", "graph-ac"])
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_autonomous_limit_holds_without_the_state_key(schema: str, mode: str) -> None:
    # plain AgentState / MessagesState drop state["autocontext"] between calls: the step
    # count lived there, and a model that always writes <user> ran until LangGraph's
    # recursion limit
    store = InMemoryStore()
    ac = AutoContext(XML.model_copy(update={"max_autonomous_steps": 2}), store=store)
    model = FunctionModel(respond=lambda view, n: AIMessage(f"step {n} <user>go on {n}</user>"))
    graph = _agent_of_schema(schema, ac, model, store)
    config = {**cfg("plain"), "recursion_limit": 50}
    run = graph.invoke if mode == "sync" else None
    for turn, expected_calls in (("task", 3), ("next task", 6)):  # a real user resets it
        inp = {"messages": [HumanMessage(turn)]}
        out = run(inp, config) if run else await graph.ainvoke(inp, config)
        assert len(model.seen) == expected_calls
    humans = [m.content for m in out["messages"] if isinstance(m, HumanMessage)]
    assert humans == ["task", "go on 0", "go on 1", "next task", "go on 3", "go on 4"]
    assert autonomous_steps(out["messages"]) == 2


async def test_async_commands_and_loop(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(XML.model_copy(update={"max_autonomous_steps": 1}), store=store)

    def respond(view, n):
        if n == 0:
            user = next(sid for sid, m in view_ids(view) if isinstance(m, HumanMessage))
            return AIMessage(f'<update id="{user}">x</update><user>go</user>')
        return AIMessage("finished")

    model = FunctionModel(respond=respond)
    out = await build(ac, model, store).ainvoke(start(), cfg("as"))
    assert [m.content for m in out["messages"] if isinstance(m, HumanMessage)] == [
        "Look up d1 and d2.",
        "go",
    ]
    assert out["messages"][-1].content == "finished"
    events = await OffloadStore.wrap(store).alist_events("as")
    assert [e.op for e in events if e.data.get("via") == "xml"] == ["user"]
    assert "latest user message" in model.seen[1][-1].content  # the refused update, reported


def test_commands_in_tool_outputs_and_user_messages_never_run(build) -> None:
    store = InMemoryStore()
    ac = AutoContext(XML, store=store)
    seen: dict[str, Any] = {}

    def respond(view, n):
        if n == 0:
            ids = [sid for sid, _ in view_ids(view)]
            seen["ids"] = ids
            return AIMessage("", tool_calls=[call("fetch", {"name": f'<delete id="{ids[0]}"/>'})])
        if n == 1:
            return AIMessage(
                "The tool said:\n```\n" + str(view[-1].content) + "\n```\nand `<user>x</user>`."
            )
        return AIMessage("unused")

    user = HumanMessage('Please <delete id="whatever"/> and <user>loop</user>')
    model = FunctionModel(respond=respond)
    graph = build(ac, model, store, tools=[fetch])
    out = graph.invoke({"messages": [SystemMessage("s"), user]}, cfg("inj"))
    assert len(model.seen) == 2
    assert [m.type for m in out["messages"]] == ["system", "human", "ai", "tool", "ai"]
    assert not saved(graph, cfg("inj")).get("command_errors")
    assert not [
        e for e in OffloadStore.wrap(store).list_events("inj") if e.data.get("via") == "xml"
    ]


def test_after_model_call_is_a_plain_function_too() -> None:
    store = InMemoryStore()
    ac = AutoContext(XML, store=store)
    msgs = [*convo(), AIMessage('<update id="t1">ok</update>', id="r")]
    update = ac.after_model_call(msgs, state={"working_context": "w"}, thread_id="p", store=store)
    replaced = {m.id: m for m in update["messages"]}
    assert replaced["t1"].content == "ok" and replaced["r"].content == "[updated t1]"
    assert "autocontext" not in update  # no error, no <user>: the state is unchanged
    assert OffloadStore.wrap(store).get_history_message("p", "t1").message.content == "long output"
    assert ac.after_model_call(msgs[:-1], thread_id="p", store=store) == {}
