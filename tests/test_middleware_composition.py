"""LangChain's own agent middlewares beside ``AutoContextMiddleware`` in one
``create_agent(middleware=[…])`` list, in both orders, at a budget small enough that
compaction fires: every request the model receives fits ``max_tokens`` by the
package's count, every request and the state are valid sequences, and every message a
checkpoint held is in the history store. Plus the claims docs/surfaces.md makes about
each (``LLMToolSelectorMiddleware``, the call limits, ``ToolRetryMiddleware``, the shell
and file-search tools, ``ContextEditingMiddleware``, ``PIIMiddleware``,
``HumanInTheLoopMiddleware``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _builders import FunctionModel, log_text, sh, view_ids
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command
from pydantic import Field

from langchain_autocontext import AutoContext, AutoContextConfig, OffloadStore
from langchain_autocontext.messages import find_violations, marker, text_of
from langchain_autocontext.search import search_history

CFG = AutoContextConfig(max_tokens=6000, token_ratio=0.6, target_ratio=0.4, last_keep=4)
THREAD = {"configurable": {"thread_id": "t"}, "recursion_limit": 500}
#: A compact metadata tag at the start of a message's text.
TAG = re.compile(r"<[\w.:-]+ \d+/\d+/>")
ORDERS = ["listed-before", "listed-after"]
MODES = ["sync", "async"]


def calls(name: str, args: dict[str, Any], n: int, text: str = "") -> AIMessage:
    return AIMessage(text, tool_calls=[{"name": name, "args": args, "id": f"c{n}"}])


def loop(steps: int, name: str = "sh", lines: int = 40) -> Callable[..., AIMessage]:
    """A model that calls ``name`` ``steps`` times, then answers."""

    def respond(messages: list[BaseMessage], n: int) -> AIMessage:
        if n < steps:
            return calls(name, {"command": f"make {n}", "lines": lines}, n)
        return AIMessage(f"done after {n} calls")

    return respond


def build(
    model: BaseChatModel,
    other: list[Any],
    order: str,
    *,
    tools: list[Any] | None = None,
    cfg: AutoContextConfig = CFG,
) -> tuple[Any, AutoContext, OffloadStore]:
    ac = AutoContext(cfg)
    ours = ac.middleware()
    middleware = [*other, ours] if order == "listed-before" else [ours, *other]
    raw = InMemoryStore()
    graph = create_agent(
        model,
        [sh] if tools is None else tools,
        system_prompt="Be brief.",
        middleware=middleware,
        checkpointer=InMemorySaver(),
        store=raw,
    )
    return graph, ac, OffloadStore(raw)


async def run(graph: Any, inputs: Any, mode: str, config: Any = THREAD) -> dict[str, Any]:
    return await graph.ainvoke(inputs, config) if mode == "async" else graph.invoke(inputs, config)


def go(text: str = "go") -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


def check(graph: Any, ac: AutoContext, store: OffloadStore, model: FunctionModel) -> None:
    """Each request within the budget and valid, the state valid, and every message a
    checkpoint of the thread held (the package's own summaries aside) archived."""
    assert model.seen
    for sent, bound in zip(model.seen, model.tools_seen, strict=True):
        assert not find_violations(sent)
        assert ac.counter.count(sent, bound) <= ac.config.max_tokens
    state = graph.get_state(THREAD).values["messages"]
    assert not find_violations(state)
    held = {
        m.id
        for snapshot in graph.get_state_history(THREAD)
        for m in snapshot.values.get("messages", [])
        if not marker(m)
    }
    assert held <= {e.message.id for e in store.get_history("t")}


def compressed(store: OffloadStore) -> bool:
    return any(e.kind == "compression" for e in store.list_events("t"))


# --- LLMToolSelectorMiddleware -------------------------------------------------------------------
class Selector(BaseChatModel):
    """A selection model: its structured output picks the tools named in ``choose``
    among those offered, and records each question (the last user-role message) and
    the names offered."""

    choose: list[str] = Field(default_factory=list)
    asked: list = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "selector"

    def _generate(self, messages, stop=None, run_manager=None, **kw):  # pragma: no cover
        raise NotImplementedError

    def with_structured_output(self, schema, **kwargs):  # type: ignore[override]
        items = schema["properties"]["tools"]["items"]
        offered = [s["const"] for s in items.get("anyOf", [items])]

        def select(messages: list[Any]) -> dict[str, Any]:
            self.asked.append((messages[-1], offered))
            return {"tools": [n for n in self.choose if n in offered]}

        return RunnableLambda(select)


@tool
def grep(pattern: str) -> str:
    """Search the files for a pattern."""
    return "no match"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("always", [True, False], ids=["always-include-ours", "selector-alone"])
async def test_a_tool_selector_listed_before_ours_keeps_our_tools_with_always_include(
    always: bool, mode: str
) -> None:
    """docs/surfaces.md: list ``LLMToolSelectorMiddleware`` before the package with
    ``always_include=[t.name for t in ac.all_tools]``; otherwise the selector may drop
    the context tools. It picks from the last user-role message, which can be the
    package's summary of the work so far."""
    from langchain.agents.middleware import LLMToolSelectorMiddleware

    ac0 = AutoContext(CFG)
    ours = {t.name for t in ac0.all_tools}
    keep = {"always_include": [t.name for t in ac0.all_tools]} if always else {}
    selector = Selector(choose=["sh"])
    model = FunctionModel(respond=loop(30))
    graph = create_agent(
        model,
        [sh, grep],
        system_prompt="Be brief.",
        middleware=[LLMToolSelectorMiddleware(model=selector, **keep), ac0.middleware()],
        checkpointer=InMemorySaver(),
        store=(raw := InMemoryStore()),
    )
    out = await run(graph, go(), mode)
    assert out["messages"][-1].content == "done after 30 calls"
    store = OffloadStore(raw)
    assert compressed(store)
    check(graph, ac0, store, model)
    sent = [{t.name for t in bound} for bound in model.tools_seen]
    assert all("grep" not in names and "sh" in names for names in sent)  # the selection
    if always:  # ours reach the model once the package shows itself, then for good
        offered = {t.name for t in ac0.tools}
        shown = [offered <= names for names in sent]
        assert shown[0] is False and True in shown
        first = shown.index(True)
        assert shown[first:] == [True] * (len(sent) - first)
    else:  # the selector is offered ours and drops them: the model never gets them
        assert all(ours <= set(names) for _, names in selector.asked)
        assert not any(ours & names for names in sent)
    # the question the selector is asked: the user's "go" at first, later the summary
    questions = [m for m, _ in selector.asked]
    assert text_of(questions[0]) == "go"
    assert any(marker(m) for m in questions)


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_selector_listed_after_ours_sees_no_context_tool_until_we_show(
    mode: str,
) -> None:
    """Listed after the package, the selector sees none of the context tools until the
    package shows itself, and ``always_include`` naming them raises at the first call."""
    from langchain.agents.middleware import LLMToolSelectorMiddleware

    selector = Selector(choose=["sh"])
    model = FunctionModel(respond=loop(30))
    graph, ac, store = build(
        model, [LLMToolSelectorMiddleware(model=selector)], "listed-after", tools=[sh, grep]
    )
    await run(graph, go(), mode)
    check(graph, ac, store, model)
    ours = {t.name for t in ac.all_tools}
    offered = [ours & set(names) for _, names in selector.asked]
    assert offered[0] == set()
    assert {t.name for t in ac.tools} in offered  # once shown: those the package offers
    assert not any(ours & {t.name for t in bound} for bound in model.tools_seen)  # dropped

    always = LLMToolSelectorMiddleware(model=selector, always_include=sorted(ours))
    graph, ac, store = build(FunctionModel(respond=loop(3)), [always], "listed-after")
    with pytest.raises(ValueError, match="always_include not found"):
        await run(graph, go(), mode)


# --- ToolCallLimitMiddleware / ModelCallLimitMiddleware --------------------------------------------
LIMITS = {
    "tool-calls-end": lambda: _limits().ToolCallLimitMiddleware(run_limit=12, exit_behavior="end"),
    "tool-calls-continue": lambda: _limits().ToolCallLimitMiddleware(run_limit=12),
    "model-calls-end": lambda: _limits().ModelCallLimitMiddleware(run_limit=15),
}


def _limits() -> Any:
    from langchain.agents import middleware

    return middleware


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("limit", sorted(LIMITS))
async def test_a_run_a_call_limit_ends_is_archived_valid_and_resumes(
    limit: str, order: str, mode: str
) -> None:
    """A call limit ends the run by jumping to the end with an ``AIMessage`` of its own
    (and, for tool calls, error ``ToolMessage``s for the calls it stops), or answers
    blocked calls with error ``ToolMessage``s and lets the run go on: those are
    archived, the sequences stay valid, and a second run on the thread compresses and
    fits like the first."""
    model = FunctionModel(respond=loop(40))
    graph, ac, store = build(model, [LIMITS[limit]()], order)
    out = await run(graph, go(), mode)
    last = text_of(out["messages"][-1])
    if limit.endswith("-end"):
        assert "limit" in last and len(model.seen) in (13, 15)
    else:
        assert last == "done after 40 calls"
        blocked = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert any(m.status == "error" for m in blocked)
    assert compressed(store)
    check(graph, ac, store, model)
    first_run = len(model.seen)
    await run(graph, go("again"), mode)  # a new run on the thread after the limit
    assert len(model.seen) > first_run
    check(graph, ac, store, model)
    archived = [text_of(e.message) for e in store.get_history("t")]
    assert archived.count(last) >= 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
async def test_a_tool_call_limit_in_either_order_leaves_no_copied_tag_in_the_state(
    order: str, mode: str
) -> None:
    """``ToolCallLimitMiddleware(exit_behavior="end")`` listed after the package runs its
    ``after_model`` first and jumps to the end: the package's ``after_model`` never sees
    the blocked reply, whose copied tag stayed in the state (and was archived with it).
    Its ``after_agent``, where the jump lands, strips it: in either order neither the
    state nor the history keeps a tag."""
    from langchain.agents.middleware import ToolCallLimitMiddleware

    def respond(messages: list[BaseMessage], n: int) -> AIMessage:
        copied = TAG.match(text_of(messages[-1]))
        text = (copied.group(0) + "\n" if copied else "") + f"step {n}"
        return calls("sh", {"command": f"make {n}", "lines": 40}, n, text)

    limit = ToolCallLimitMiddleware(run_limit=12, exit_behavior="end")
    cfg = CFG.model_copy(update={"metadata_tags": True})
    model = FunctionModel(respond=respond)
    graph, ac, store = build(model, [limit], order, cfg=cfg)
    out = await run(graph, go(), mode)
    assert TAG.match(text_of(model.seen[-1][-1]))  # the blocked reply copied a tag
    assert f"step {len(model.seen) - 1}" in text_of(out["messages"][-3])  # kept, untagged
    state = graph.get_state(THREAD).values["messages"]
    assert not [m for m in state if m.type == "ai" and TAG.search(text_of(m))]
    assert not [e for e in store.get_history("t") if TAG.search(text_of(e.message))]
    check(graph, ac, store, model)


# --- ToolRetryMiddleware -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
async def test_retried_and_failed_tool_calls_are_archived_once(order: str, mode: str) -> None:
    """A tool that fails once is retried (one result archived per call, not one per
    attempt); one that always fails ends in the error ``ToolMessage`` the retry
    middleware writes, archived and compressed like any result."""
    from langchain.agents.middleware import ToolRetryMiddleware

    attempts = {"flaky": 0, "broken": 0}

    @tool
    def flaky(command: str, lines: int = 40) -> str:
        """Run a command over a flaky connection."""
        attempts["flaky"] += 1
        if attempts["flaky"] % 2:
            raise ConnectionError("connection reset")
        return log_text(lines, sum(map(ord, command)))

    @tool
    def broken(command: str, lines: int = 40) -> str:
        """Run a command on a host that is down."""
        attempts["broken"] += 1
        raise ConnectionError("host down " + "x" * 2000)

    def respond(messages: list[BaseMessage], n: int) -> AIMessage:
        if n < 24:
            return calls("flaky" if n % 2 else "broken", {"command": f"make {n}"}, n)
        return AIMessage("done")

    model = FunctionModel(respond=respond)
    retry = ToolRetryMiddleware(
        max_retries=2, initial_delay=0, jitter=False, retry_on=(ConnectionError,)
    )
    graph, ac, store = build(model, [retry], order, tools=[flaky, broken])
    await run(graph, go(), mode)
    assert attempts == {"flaky": 24, "broken": 36}
    assert compressed(store)
    check(graph, ac, store, model)
    results = [e.message for e in store.get_history("t") if isinstance(e.message, ToolMessage)]
    assert len(results) == len({m.tool_call_id for m in results}) == 24
    failed = [m for m in results if m.status == "error"]
    assert len(failed) == 12 and all("failed after 3 attempts" in text_of(m) for m in failed)


# --- ShellToolMiddleware / FilesystemFileSearchMiddleware (large tool outputs) -------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", ["shell", "file-search"])
async def test_large_outputs_of_the_shell_and_file_search_tools_fit(
    kind: str, order: str, mode: str, tmp_path: Path
) -> None:
    """The tools these middlewares register return outputs far over the budget (a
    9,000-character ``seq``, a 156,000-character grep): each request still fits and the
    outputs are archived whole."""
    from langchain.agents.middleware import (
        FilesystemFileSearchMiddleware,
        HostExecutionPolicy,
        ShellToolMiddleware,
    )

    for i in range(40):
        lines = (f"def handler_{i}_{j}(): return {j}  # TODO check" for j in range(60))
        (tmp_path / f"mod{i}.py").write_text("\n".join(lines))

    def respond(messages: list[BaseMessage], n: int) -> AIMessage:
        if n >= 8:
            return AIMessage("done")
        if kind == "shell":
            return calls("shell", {"command": f"seq 1 {2000 + n}"}, n)
        if n % 2:
            return calls("glob_search", {"pattern": "**/*.py"}, n)
        return calls("grep_search", {"pattern": "TODO", "output_mode": "content"}, n)

    other: Any
    if kind == "shell":
        policy = HostExecutionPolicy(max_output_lines=5_000)
        other = ShellToolMiddleware(workspace_root=str(tmp_path), execution_policy=policy)
    else:
        other = FilesystemFileSearchMiddleware(root_path=str(tmp_path), use_ripgrep=False)
    model = FunctionModel(respond=respond)
    graph, ac, store = build(model, [other], order, tools=[])
    await run(graph, go(), mode)
    assert compressed(store)
    check(graph, ac, store, model)
    outputs = [e.message for e in store.get_history("t") if isinstance(e.message, ToolMessage)]
    assert len(outputs) == 8
    assert max(len(text_of(m)) for m in outputs) > 8_000  # archived whole, not cut


# --- ContextEditingMiddleware ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
async def test_a_context_edit_in_a_tool_loop_never_reaches_state_or_history(
    order: str, mode: str
) -> None:
    """``ContextEditingMiddleware`` clears old tool results in the request only, in
    either order: the model receives ``[cleared]``, the state and the history never."""
    from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware

    model = FunctionModel(respond=loop(30))
    edit = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=1500, keep=2)])
    graph, ac, store = build(model, [edit], order)
    out = await run(graph, go(), mode)
    assert any(text_of(m) == "[cleared]" for sent in model.seen for m in sent)
    assert not any("[cleared]" in text_of(m) for m in out["messages"])
    assert not any("[cleared]" in text_of(e.message) for e in store.get_history("t"))
    assert compressed(store)
    check(graph, ac, store, model)


# --- PIIMiddleware -----------------------------------------------------------------------------------------
@tool
def customers(query: str) -> str:
    """List the customers matching the query."""
    return "\n".join(f"row {i}: customer{i}@example.com " + "data " * 8 for i in range(40))


def mailing(copy_tags: bool) -> Callable[..., AIMessage]:
    """A model whose replies carry an address; with ``copy_tags`` it starts each with
    the metadata tag of the last message it was shown, as models sometimes do."""

    def respond(messages: list[BaseMessage], n: int) -> AIMessage:
        copied = TAG.match(text_of(messages[-1])) if copy_tags else None
        text = (copied.group(0) + "\n" if copied else "") + f"mailing user{n}@example.com"
        if n < 20:
            return calls("customers", {"query": f"q{n}"}, n, text)
        return AIMessage(text)

    return respond


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
async def test_the_history_keeps_what_the_redaction_left_in_the_documented_order(
    order: str, mode: str
) -> None:
    """docs/surfaces.md: after ``PIIMiddleware`` (listed before it) the package archives
    inputs, tool results and replies as redacted; listed before it, it archives the
    inputs and tool results the redaction would remove (``search_history`` finds them),
    the replies redacted. The model is sent none either way."""
    from langchain.agents.middleware import PIIMiddleware

    pii = PIIMiddleware(
        "email", apply_to_input=True, apply_to_output=True, apply_to_tool_results=True
    )
    model = FunctionModel(respond=mailing(copy_tags=False))
    graph, ac, store = build(model, [pii], order, tools=[customers])
    await run(graph, {"messages": [HumanMessage("my mail is alice@example.com")]}, mode)
    assert not any("@example.com" in text_of(m) for sent in model.seen for m in sent)
    assert compressed(store)
    check(graph, ac, store, model)
    raw = [e.message for e in store.get_history("t") if "@example.com" in text_of(e.message)]
    if order == "listed-before":
        assert raw == []
    else:
        assert {m.type for m in raw} == {"human", "tool"}
        assert len(raw) == 21  # the user's input and each of the 20 tool results
        hits = search_history(store, "t", "alice@example.com")
        assert any("alice@example.com" in h.snippet for h in hits)


@pytest.mark.parametrize("mode", MODES)
async def test_a_reply_with_a_copied_tag_is_archived_as_redacted(mode: str) -> None:
    """With metadata tags, a reply that starts with a copied tag is changed by the
    package's ``after_model`` (the tag stripped), which archived the reply as the model
    wrote it, before ``PIIMiddleware``'s ``after_model`` (listed before the package, so
    run after it) redacted it: 16 of the 21 replies reached the history with the
    address the redaction removes. The reply is archived once every ``after_model``
    hook has run, as one without a tag is."""
    from langchain.agents.middleware import PIIMiddleware

    pii = PIIMiddleware(
        "email", apply_to_input=True, apply_to_output=True, apply_to_tool_results=True
    )
    cfg = CFG.model_copy(update={"metadata_tags": True})
    model = FunctionModel(respond=mailing(copy_tags=True))
    graph, ac, store = build(model, [pii], "listed-before", tools=[customers], cfg=cfg)
    out = await run(graph, {"messages": [HumanMessage("my mail is alice@example.com")]}, mode)
    assert sum(bool(TAG.match(text_of(sent[-1]))) for sent in model.seen) > 10  # tags copied
    assert not any(TAG.match(text_of(m)) for m in out["messages"] if m.type == "ai")
    check(graph, ac, store, model)
    archived = [text_of(e.message) for e in store.get_history("t")]
    assert not [text for text in archived if "@example.com" in text]
    assert not [text for text in archived if TAG.match(text)]


SECRET = "bob.secret@example.com"


def commanding(kind: str) -> Callable[..., AIMessage]:
    """A model that looks something up, then replies with an address and an XML
    command (``kind``: ``delete`` the earlier call, or ``user``: its next message)."""

    def respond(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 0:
            return calls("customers", {"query": "q"}, n, "looking")
        if n > 1:
            return AIMessage("finished")
        if kind == "delete":
            call_id = next(sid for sid, m in view_ids(messages) if m.type == "ai")
            return AIMessage(f'Write to {SECRET}. <delete id="{call_id}"/>')
        return AIMessage(f"Done. <user>now mail {SECRET}</user>")

    return respond


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", ["delete", "user"])
async def test_a_reply_its_commands_rewrote_reaches_the_store_as_redacted(
    kind: str, order: str, mode: str
) -> None:
    """A reply with an address and an XML command, ``PIIMiddleware`` redacting the
    replies: listed before the package (its ``after_model`` runs after the package's),
    the package archived the reply as the model wrote it, address and all, before the
    redaction (a ``<user>`` command's text too, which the redaction of the reply never
    sees). Now nothing in the store holds the address, in either order, and the
    commands ran."""
    from langchain.agents.middleware import PIIMiddleware

    pii = PIIMiddleware(
        "email", apply_to_input=True, apply_to_output=True, apply_to_tool_results=True
    )
    shown = {"metadata_tags": True, "xml_commands": True, "disclosure": "always"}
    model = FunctionModel(respond=commanding(kind))
    graph, ac, store = build(
        model, [pii], order, tools=[customers], cfg=CFG.model_copy(update=shown)
    )
    out = await run(graph, go(), mode)
    assert [e for e in store.list_events("t") if e.strategy == f"xml:{kind}"]
    assert len(model.seen) == (3 if kind == "user" else 2)
    assert not any(SECRET in text_of(m) for m in out["messages"])
    raw = store.backend
    held = [
        (ns, item.key)
        for ns in raw.list_namespaces()
        for item in raw.search(ns, limit=10_000)
        if SECRET in json.dumps(item.value, default=str)
    ]
    assert held == []
    check(graph, ac, store, model)


# --- HumanInTheLoopMiddleware ----------------------------------------------------------------------------
@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


DECISIONS: list[dict[str, Any]] = [
    {"type": "approve"},
    {"type": "edit", "edited_action": {"name": "delete_file", "args": {"path": "/tmp/kept"}}},
    {"type": "reject", "message": "not that one"},
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("review", ["batched", "per_call"])
async def test_reviews_interrupt_and_resume_across_compactions(
    review: str, order: str, mode: str
) -> None:
    """Every fifth call asks to delete a file and the review interrupts; the run
    resumes (approve, edit, reject in turn) with compactions between the interrupts.
    The reply under review reaches the history before the interrupt only when the
    review runs inside the tool call (``interrupt_mode="per_call"``) and the package's
    ``wrap_tool_call`` is outside it (listed before it); otherwise when the run resumes."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    def respond(messages: list[BaseMessage], n: int) -> AIMessage:
        if n >= 30:
            return AIMessage("all done")
        if n % 5 == 4:
            return calls("delete_file", {"path": f"/tmp/f{n}"}, n, f"deleting f{n}")
        return calls("sh", {"command": f"make {n}", "lines": 40}, n)

    hitl = HumanInTheLoopMiddleware({"delete_file": True}, interrupt_mode=review)  # type: ignore[arg-type]
    model = FunctionModel(respond=respond)
    graph, ac, store = build(model, [hitl], order, tools=[sh, delete_file])
    out = await run(graph, go(), mode)
    held: list[bool] = []
    k = 0
    while "__interrupt__" in out:
        reviewed = next(m for m in reversed(out["messages"]) if m.type == "ai")
        held.append(store.get_history_message("t", str(reviewed.id)) is not None)
        decision = DECISIONS[k % 3]
        answer = decision if review == "per_call" else {"decisions": [decision]}
        if review == "per_call":
            answer = {out["__interrupt__"][0].id: decision}
        out = await run(graph, Command(resume=answer), mode)
        k += 1
    assert k == 6 and out["messages"][-1].content == "all done"
    assert held == [review == "per_call" and order == "listed-after"] * 6
    assert len([e for e in store.list_events("t") if e.kind == "compression"]) >= 3
    check(graph, ac, store, model)
    results = [
        text_of(e.message)
        for e in store.get_history("t")
        if isinstance(e.message, ToolMessage) and e.message.name == "delete_file"
    ]
    assert len(results) == 6
    assert [r.startswith("deleted /tmp/f") for r in results] == [True, False, False] * 2
    assert all("/tmp/kept" in r for r in results[1::3])  # the edit, as its tool ran
