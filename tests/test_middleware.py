"""``AutoContextMiddleware`` inside real ``langchain.agents.create_agent`` agents.

Compression in ``before_model`` (persisted only when it changed), the model's view
rendered in ``wrap_model_call`` and never persisted, the reply processed in
``after_model`` (tags stripped, XML commands, ``<user>`` loops back to the model),
the package's tools registered, the private ``autocontext`` state key, the system
prompt learned per thread (and found again after a restart), and the fallback
when a call's view would not fit.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import operator
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Annotated, Any, get_args, get_origin

import pytest
from _builders import b64, log_text, pdf_document, png_image, sh, shown_offload_ids, wav_audio
from langchain.agents import create_agent
from langchain.agents.middleware import AgentState, before_model
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore
from pydantic import Field

from langchain_autocontext import (
    AutoContext,
    AutoContextChatMessageHistory,
    AutoContextConfig,
    AutoContextMiddleware,
    AutoContextMiddlewareState,
    InvalidConfigError,
    OffloadStore,
)
from langchain_autocontext.history import surface_namespace
from langchain_autocontext.messages import find_violations, marker, text_of
from langchain_autocontext.search import search_history
from langchain_autocontext.store import offload_ref
from langchain_autocontext.strategies.base import summary_offload_ids
from langchain_autocontext.view import NOTICE_ID, OPENER_ID

Reply = Callable[[list[BaseMessage], int], AIMessage]


class ReplyModel(BaseChatModel):
    """Answers with ``reply(messages, n)``; records inputs and bound tools."""

    reply: Any
    seen: list = Field(default_factory=list)
    bound: list = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "reply-model"

    def bind_tools(self, tools, **kwargs):
        self.bound = list(tools)
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        self.seen.append(list(messages))
        msg = self.reply(list(messages), len(self.seen) - 1)
        return ChatResult(generations=[ChatGeneration(message=msg)])


def call(name: str, args: dict[str, Any], n: int) -> AIMessage:
    return AIMessage(
        "", tool_calls=[{"name": name, "args": args, "id": f"c{n}", "type": "tool_call"}]
    )


def steps_then_answer(steps: int, lines: int = 40) -> Reply:
    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n < steps:
            return call("sh", {"command": f"make {n}", "lines": lines}, n)
        return AIMessage(f"done after {n} calls")

    return reply


def agent(
    model: ReplyModel, ac: AutoContext, store=None, *, system: str | None = "Be brief.", extra=()
):
    return create_agent(
        model,
        [sh],
        system_prompt=system,
        middleware=[*extra, ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store if store is not None else InMemoryStore(),
    )


#: A compact metadata tag at the start of a message's text.
TAG = re.compile(r"<[\w.:-]+ \d+/\d+/>(\n|$)")
CFG = AutoContextConfig(max_tokens=6000, token_ratio=0.6, target_ratio=0.4, last_keep=4)
THREAD = {"configurable": {"thread_id": "t"}, "recursion_limit": 500}


def assert_fits(model: ReplyModel, ac: AutoContext) -> None:
    for sent in model.seen:
        assert isinstance(sent[0], SystemMessage)
        assert not find_violations(sent)
        assert ac.counter.count(sent, model.bound) <= ac.config.max_tokens


# --- construction -------------------------------------------------------------------------------
def test_middleware_registers_the_package_tools_and_declares_its_state() -> None:
    ac = AutoContext(CFG.model_copy(update={"disclosure": "always"}))
    mw = ac.middleware()
    assert isinstance(mw, AutoContextMiddleware)
    # every tool registered; the editing tools (which take the ids the tags show) are
    # offered with the tags only
    assert [t.name for t in mw.tools] == [t.name for t in ac.all_tools]
    assert {t.name for t in ac.all_tools} - {t.name for t in ac.tools} == {
        "update_message",
        "delete_message",
        "pin_message",
    }
    assert "autocontext" in mw.state_schema.__annotations__
    model = ReplyModel(reply=steps_then_answer(1))
    graph = agent(model, ac)
    graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    # the model was offered the package's tools next to the agent's own
    assert {t.name for t in model.bound} == {"sh", *(t.name for t in ac.tools)}
    # by default they are offered only once the context needs them: not on a short run
    quiet = ReplyModel(reply=steps_then_answer(1))
    agent(quiet, AutoContext(CFG)).invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert {t.name for t in quiet.bound} == {"sh"}
    assert all(not TAG.match(text_of(m)) for m in quiet.seen[-1][1:])
    # the key is private: kept in the checkpoint, not part of the agent's input or output
    assert "autocontext" in graph.get_state(THREAD).values
    assert "autocontext" not in graph.get_input_jsonschema()["properties"]
    assert "autocontext" not in graph.get_output_jsonschema()["properties"]


def test_the_middleware_is_typed_as_langchains_own_so_they_mix_in_one_list() -> None:
    """``create_agent(middleware=[PIIMiddleware(…), ac.middleware(), ModelRetryMiddleware()])``
    failed to type-check: AgentMiddleware's state parameter is invariant and ours was
    ``AutoContextMiddlewareState``, LangChain's ``AgentState[Any]``. The type parameter is
    ``AgentState[Any]`` now; the state schema (what runs) is still the package's."""
    from langchain.agents.middleware import AgentMiddleware, ModelRetryMiddleware, PIIMiddleware
    from langchain.agents.middleware.types import AgentState
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    [base] = [b for b in AutoContextMiddleware.__orig_bases__ if get_origin(b) is AgentMiddleware]
    assert get_args(base)[0] == AgentState[Any]
    assert AutoContextMiddleware.state_schema is AutoContextMiddlewareState
    ac = AutoContext(max_tokens=4_000, store=InMemoryStore())
    model = GenericFakeChatModel(messages=iter([AIMessage("done")]))
    middleware = [PIIMiddleware("email"), ac.middleware(), ModelRetryMiddleware()]
    graph = create_agent(model, middleware=middleware, checkpointer=InMemorySaver())
    graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert "autocontext" in graph.get_state(THREAD).values


def test_no_tools_when_self_management_is_off() -> None:
    ac = AutoContext(CFG.model_copy(update={"self_management_tools": False}))
    assert ac.middleware().tools == []


def test_middleware_needs_an_autocontext() -> None:
    with pytest.raises(TypeError, match="AutoContext"):
        AutoContextMiddleware(object())  # type: ignore[arg-type]


# --- the view ------------------------------------------------------------------------------------
async def test_view_is_sent_but_never_persisted() -> None:
    for run_async in (False, True):
        ac = AutoContext(CFG.derive(disclosure="always", metadata_tags=True))
        model = ReplyModel(reply=steps_then_answer(3, lines=2))
        graph = agent(model, ac)
        if run_async:
            await graph.ainvoke({"messages": [HumanMessage("go")]}, THREAD)
        else:
            graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
        last = model.seen[-1]
        assert last[0].content.startswith("Be brief.")
        assert "# Context: " in last[0].content  # the generated section
        assert all(TAG.match(text_of(m)) for m in last[1:])
        state = graph.get_state(THREAD).values
        assert not any(isinstance(m, SystemMessage) for m in state["messages"])
        assert not any("<metadata" in text_of(m) for m in state["messages"])
        assert state["messages"][-1].content == "done after 3 calls"
        assert_fits(model, ac)


def test_before_model_writes_only_when_something_changed() -> None:
    ac = AutoContext(CFG)
    graph = agent(ReplyModel(reply=steps_then_answer(1, lines=2)), ac)
    updates = list(graph.stream({"messages": [HumanMessage("go")]}, THREAD, stream_mode="updates"))
    ours = [
        u["AutoContextMiddleware.before_model"]
        for u in updates
        if "AutoContextMiddleware.before_model" in u
    ]
    assert ours and all(u is None for u in ours)  # small context: nothing to write


def test_compression_is_persisted_and_inputs_fit() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG)
    model = ReplyModel(reply=steps_then_answer(30))
    graph = agent(model, ac, store)
    graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert_fits(model, ac)
    assert OffloadStore.wrap(store).list_events("t")
    state = graph.get_state(THREAD).values["messages"]
    assert len(state) < 1 + 30 * 2 + 1
    # every original, the final answer included (archived when the run ends)
    assert OffloadStore.wrap(store).history_count("t") == 1 + 30 * 2 + 1


# --- the system prompt: learned, remembered, and the fallback -----------------------------------
BIG_SYSTEM = "You follow these rules.\n" + log_text(60, 7)  # ~1,400 tokens


def test_system_prompt_is_learned_and_remembered_in_the_store() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG)
    model = ReplyModel(reply=steps_then_answer(25))
    graph = agent(model, ac, store, system=BIG_SYSTEM)
    graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert_fits(model, ac)
    wrapped = OffloadStore.wrap(store)
    record = wrapped.get(surface_namespace(wrapped, "t"), "model_request")
    assert record is not None and record.value["system"]["data"]["content"] == BIG_SYSTEM
    names = {t["function"]["name"] for t in record.value["tools"]}
    assert names >= {"sh", "reload_offloaded"} and "update_message" not in names  # no tags
    # a new process (new AutoContext, new middleware) knows it before its first call
    fresh = AutoContext(CFG).middleware()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh.autocontext.store = OffloadStore.wrap(store)
        shape = fresh._shape("t")
    assert shape is not None and shape.system.content == BIG_SYSTEM
    assert fresh._shape("another-thread") is None


GROUPS = 13


async def test_a_view_that_would_not_fit_is_compressed_on_the_spot(monkeypatch) -> None:
    """First call of a process, a long round, a large system prompt it never saw: the
    compression in before_model cannot count the prompt; wrap_model_call fits the view."""
    cfg = CFG.model_copy(update={"token_ratio": 0.75, "target_ratio": 0.7})
    system = "You follow these rules.\n" + log_text(110, 7)  # ~2,500 tokens
    # ~3,800 tokens: under the trigger without the system prompt, over the budget with it
    history: list[BaseMessage] = [HumanMessage("start", id="u0")]
    for k in range(GROUPS):
        history.append(
            call("sh", {"command": f"make {k}", "lines": 5}, k).model_copy(update={"id": f"a{k}"})
        )
        history.append(ToolMessage(log_text(11, k), tool_call_id=f"c{k}", id=f"t{k}"))
    fallbacks: list[bool] = []
    prepare = AutoContextMiddleware._prepare

    def spy(self, request, thread_id):
        out = prepare(self, request, thread_id)
        fallbacks.append(out[0] is None)
        return out

    monkeypatch.setattr(AutoContextMiddleware, "_prepare", spy)
    for run_async in (False, True):
        ac = AutoContext(cfg)
        model = ReplyModel(reply=lambda m, n: AIMessage("finished"))
        graph = agent(model, ac, system=system)
        if run_async:
            out = await graph.ainvoke({"messages": history}, THREAD)
        else:
            out = graph.invoke({"messages": history}, THREAD)
        assert out["messages"][-1].content == "finished"
        assert_fits(model, ac)
        assert model.seen[0][0].content.startswith(system)
    assert fallbacks == [True, True]  # the fallback was needed, in both runs


# --- after_model: the reply -------------------------------------------------------------------------
def test_tags_the_model_copies_are_stripped_from_state() -> None:
    ac = AutoContext(CFG)

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        return AIMessage(
            '<metadata id="x" cumulative_message_token_count="9" message_token_count="3"/>\nok'
        )

    graph = agent(ReplyModel(reply=reply), ac)
    out = graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert out["messages"][-1].content == "ok"


async def test_xml_user_command_calls_the_model_again() -> None:
    for run_async in (False, True):
        ac = AutoContext(CFG.model_copy(update={"xml_commands": True}))

        def reply(messages: list[BaseMessage], n: int) -> AIMessage:
            if n == 0:
                return AIMessage("first part done. <user>now do the second part</user>")
            return AIMessage("second part done")

        model = ReplyModel(reply=reply)
        graph = agent(model, ac)
        inp = {"messages": [HumanMessage("do two parts")]}
        out = await graph.ainvoke(inp, THREAD) if run_async else graph.invoke(inp, THREAD)
        assert len(model.seen) == 2
        assert "now do the second part" in text_of(model.seen[1][-1])
        assert out["messages"][-1].content == "second part done"
        assert [m.type for m in out["messages"]] == ["human", "ai", "human", "ai"]


def test_xml_delete_command_edits_state_and_keeps_the_original() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"xml_commands": True}))

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 0:
            return AIMessage("noted")
        return AIMessage('<delete id="secret-1"/> forgot it')

    graph = agent(ReplyModel(reply=reply), ac, store)
    graph.invoke({"messages": [HumanMessage("my password is hunter2", id="secret-1")]}, THREAD)
    out = graph.invoke({"messages": [HumanMessage("forget my password")]}, THREAD)
    assert "secret-1" not in {m.id for m in out["messages"]}
    original = OffloadStore.wrap(store).get_history_message("t", "secret-1")
    assert original is not None and "hunter2" in original.message.content


@pytest.mark.parametrize("run_async", [False, True])
@pytest.mark.parametrize("via", ["tool", "xml"])
async def test_a_conversation_whose_first_user_message_was_deleted_opens_with_a_user_turn(
    via: str, run_async: bool
) -> None:
    """The model deleted the conversation's first user message ("forget my password"):
    every later request opened with the assistant's reply right after the system
    message, which Anthropic's Messages API ("first message must use the user role"),
    Gemini and Bedrock Converse reject. The view puts the package's one-line user-role
    note first, the same at every call (the prompt cache holds), without the deleted
    text; the state never holds it."""
    ac = AutoContext(
        CFG.model_copy(update={"xml_commands": True, "metadata_tags": True, "disclosure": "always"})
    )

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 1:
            if via == "xml":
                return AIMessage('<delete id="secret-1"/> forgot it')
            return call("delete_message", {"message_id": "secret-1"}, n)
        return AIMessage("noted")

    model = ReplyModel(reply=reply)
    graph = agent(model, ac)
    turns = ["my password is hunter2", "forget my password", "hello again"]
    for k, text in enumerate(turns):
        inp = {"messages": [HumanMessage(text, id="secret-1" if k == 0 else None)]}
        out = await graph.ainvoke(inp, THREAD) if run_async else graph.invoke(inp, THREAD)
    assert "secret-1" not in {m.id for m in out["messages"]}
    assert OPENER_ID not in {m.id for m in out["messages"]}  # the view is never persisted
    after = model.seen[2:]
    assert len(after) == (2 if via == "tool" else 1)
    for sent in after:
        assert isinstance(sent[0], SystemMessage)
        assert isinstance(sent[1], HumanMessage) and sent[1].id == OPENER_ID
        assert "hunter2" not in text_of(sent[1]) and "earlier messages" in text_of(sent[1]).lower()
        assert not find_violations(sent)
        assert ac.counter.count(sent, model.bound) <= ac.config.max_tokens
    assert len({text_of(sent[1]) for sent in after}) == 1  # the same at every call
    # before the deletion the conversation opened with the user's own message
    assert all(sent[1].id == "secret-1" for sent in model.seen[:2])


@pytest.mark.parametrize("via", ["tool", "xml"])
def test_a_message_edited_in_state_is_kept_before_the_model_deletes_it(via: str) -> None:
    """``graph.update_state`` with a message's id (LangGraph's way to edit one): the
    model then deleted the edited message and its text was nowhere, while the answer
    said the original stays in the history (LangGraph audit). The history keeps the
    edit as a later version of the message, and nothing else: no second copy is
    offloaded (``keep_edited`` compared with the first version only)."""
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"xml_commands": True, "metadata_tags": True}))

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 0 or n == 2:
            return AIMessage("noted")
        if via == "xml":
            return AIMessage('<delete id="note-1"/> forgot it')
        return call("delete_message", {"message_id": "note-1"}, n)

    graph = agent(ReplyModel(reply=reply), ac, store)
    graph.invoke({"messages": [HumanMessage("codename REDFOX", id="note-1")]}, THREAD)
    graph.update_state(THREAD, {"messages": [HumanMessage("codename BLUEBIRD", id="note-1")]})
    out = graph.invoke({"messages": [HumanMessage("forget the codename")]}, THREAD)
    assert "note-1" not in {m.id for m in out["messages"]}
    ost = OffloadStore.wrap(store)
    assert ost.get_history_message("t", "note-1").message.content == "codename REDFOX"
    versions = [e for e in ost.get_history("t") if e.version_of == "note-1"]
    assert [e.message.content for e in versions] == ["codename BLUEBIRD"]
    assert not [e for e in ost.list_events("t") if e.strategy == "edited_copy"]
    assert not ost.list_offloads("t")
    if via == "tool":
        answer = next(m for m in out["messages"] if m.type == "tool")
        assert "offloaded" not in answer.content


def test_search_and_reload_agree_on_the_versions_of_a_message_edited_in_state() -> None:
    """A message edited with ``graph.update_state`` has two contents in the history.
    The search tool said the first one was in the context (it was not) and the one in
    the context was not; the history listed both under one id. Each content now has
    its own id (the version's key), the one in the context is said to be there, and
    ``reload_offloaded`` restores either under the working copy's id."""
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"metadata_tags": True}))
    answers: list[str] = []

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            answers.append(text_of(messages[-1]))
        if n == 1:
            return call("search_history", {"query": "codename"}, n)
        if n == 2:
            return call("reload_offloaded", {"offload_id": "note-4", "restore": True}, n)
        if n == 3:
            version = re.search(r"id=(note-4~\w+)", answers[0])
            assert version, answers[0]
            return call("reload_offloaded", {"offload_id": version[1], "restore": True}, n)
        return AIMessage("noted")

    graph = agent(ReplyModel(reply=reply), ac, store)
    graph.invoke({"messages": [HumanMessage("codename REDFOX", id="note-4")]}, THREAD)
    graph.update_state(THREAD, {"messages": [HumanMessage("codename BLUEBIRD", id="note-4")]})
    graph.invoke({"messages": [HumanMessage("what was the codename?")]}, THREAD)
    found = re.finditer(r"id=(\S+) \w+[^,\n]*, position \d+, ([^;\n]+)", answers[0])
    lines = {m[1]: m[2] for m in found}
    version = next(key for key in lines if key.startswith("note-4~"))
    assert lines == {
        "note-4": "not in your context",
        version: "in your context",
        **{k: v for k, v in lines.items() if not k.startswith("note-4")},
    }, answers[0]
    assert "Error" not in answers[1] and "Error" not in answers[2], answers
    (working,) = [m for m in graph.get_state(THREAD).values["messages"] if m.id == "note-4"]
    assert text_of(working) == "codename BLUEBIRD", answers  # restored last: the version
    originals = AutoContextChatMessageHistory("t", ac, store=store).original_messages
    assert len({m.id for m in originals}) == len(originals)  # no id twice
    assert [text_of(m) for m in originals if m.id in ("note-4", version)] == [
        "codename REDFOX",
        "codename BLUEBIRD",
    ]


def test_a_context_edit_the_history_does_not_hold_is_offloaded_before_a_delete() -> None:
    """The model's own update is a context edit, not a version of the message: deleted
    later, its text is offloaded first (``edited_copy``), the first version staying in
    the history."""
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"metadata_tags": True}))

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 1:
            return call("update_message", {"message_id": "note-3", "content": "GREENFINCH"}, n)
        if n == 3:
            return call("delete_message", {"message_id": "note-3"}, n)
        return AIMessage("noted")

    graph = agent(ReplyModel(reply=reply), ac, store)
    graph.invoke({"messages": [HumanMessage("codename REDFOX", id="note-3")]}, THREAD)
    graph.invoke({"messages": [HumanMessage("rename the codename")]}, THREAD)
    out = graph.invoke({"messages": [HumanMessage("forget the codename")]}, THREAD)
    assert "note-3" not in {m.id for m in out["messages"]}
    ost = OffloadStore.wrap(store)
    assert [e.message.content for e in ost.get_history("t") if "note-3" in e.id] == [
        "codename REDFOX"
    ]
    (event,) = [e for e in ost.list_events("t") if e.strategy == "edited_copy"]
    (record,) = [ost.reload("t", oid) for oid in event.data["offload_ids"]]
    assert [m.content for m in record.messages] == ["GREENFINCH"]


def test_a_context_edit_the_history_does_not_hold_is_offloaded_before_a_restore() -> None:
    """A restore by message id puts the history's original back in place of the model's
    own update: the updated text is offloaded first (``edited_copy``), as before a delete
    or a second update; the restore dropped it, and nothing held it any more."""
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"metadata_tags": True}))
    answers: list[str] = []

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 1:
            return call("update_message", {"message_id": "note-5", "content": "GREENFINCH"}, n)
        if n == 3:
            return call("reload_offloaded", {"offload_id": "note-5", "restore": True}, n)
        if n == 4:
            answers.append(text_of(messages[-1]))
        return AIMessage("noted")

    graph = agent(ReplyModel(reply=reply), ac, store)
    graph.invoke({"messages": [HumanMessage("codename REDFOX", id="note-5")]}, THREAD)
    graph.invoke({"messages": [HumanMessage("rename the codename")]}, THREAD)
    graph.invoke({"messages": [HumanMessage("restore the codename")]}, THREAD)
    (working,) = [m for m in graph.get_state(THREAD).values["messages"] if m.id == "note-5"]
    assert working.content == "codename REDFOX", answers
    ost = OffloadStore.wrap(store)
    (event,) = [e for e in ost.list_events("t") if e.strategy == "edited_copy"]
    assert event.data["message_ids"] == ["note-5"]
    (oid,) = event.data["offload_ids"]
    assert [m.content for m in ost.reload("t", oid).messages] == ["GREENFINCH"]
    assert "Restored" in answers[0] and offload_ref(oid) in answers[0], answers


def test_a_developer_edit_of_a_message_the_model_updated_is_kept_as_a_version() -> None:
    """The flag marking the package's own edit survived a developer's ``model_copy`` of
    the message (``additional_kwargs`` are copied): the developer's edit was taken for
    the package's and never reached the history, so search could not find it."""
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"metadata_tags": True}))

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 1:
            return call("update_message", {"message_id": "note-6", "content": "GREENFINCH"}, n)
        return AIMessage("noted")

    graph = agent(ReplyModel(reply=reply), ac, store)
    graph.invoke({"messages": [HumanMessage("codename REDFOX", id="note-6")]}, THREAD)
    graph.invoke({"messages": [HumanMessage("rename the codename")]}, THREAD)
    (mine,) = [m for m in graph.get_state(THREAD).values["messages"] if m.id == "note-6"]
    assert mine.content == "GREENFINCH"
    edited = mine.model_copy(update={"content": "codename OSPREY"})
    graph.update_state(THREAD, {"messages": [edited]})
    graph.invoke({"messages": [HumanMessage("go on")]}, THREAD)
    ost = OffloadStore.wrap(store)
    held = [e.message.content for e in ost.get_history("t") if "note-6" in e.id]
    assert held == ["codename REDFOX", "codename OSPREY"]  # not the model's own edit
    (hit,) = search_history(ost, "t", "OSPREY", 1)
    assert hit.version_of == "note-6"


def test_a_message_deleted_as_the_history_holds_it_is_not_offloaded_again() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"xml_commands": True}))

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        return AIMessage("noted") if n == 0 else AIMessage('<delete id="note-2"/> done')

    graph = agent(ReplyModel(reply=reply), ac, store)
    graph.invoke({"messages": [HumanMessage("codename REDFOX", id="note-2")]}, THREAD)
    graph.invoke({"messages": [HumanMessage("forget the codename")]}, THREAD)
    ost = OffloadStore.wrap(store)
    assert not [e for e in ost.list_events("t") if e.strategy == "edited_copy"]
    assert not ost.list_offloads("t")


def test_working_context_tool_reaches_the_next_view() -> None:
    ac = AutoContext(CFG)

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 0:
            return call("working_context_append", {"text": "User prefers tabs."}, n)
        return AIMessage("ok")

    model = ReplyModel(reply=reply)
    graph = agent(model, ac)
    graph.invoke({"messages": [HumanMessage("remember: tabs")]}, THREAD)
    assert "User prefers tabs." in graph.get_state(THREAD).values["autocontext"]["working_context"]
    assert "User prefers tabs." in model.seen[1][0].content  # shown in the system message


def test_works_after_other_middleware() -> None:
    """Another middleware's before_model runs first; ours (listed last) sees its update."""
    seen_counts: list[int] = []

    @before_model
    def count_messages(state, runtime) -> None:
        seen_counts.append(len(state["messages"]))

    ac = AutoContext(CFG)
    model = ReplyModel(reply=steps_then_answer(20))
    graph = agent(model, ac, extra=[count_messages])
    graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert len(seen_counts) == 21
    assert_fits(model, ac)


def test_a_dynamic_prompt_is_followed() -> None:
    """A middleware before ours changes the system prompt per call: the view and the
    remembered shape follow it."""
    from langchain.agents.middleware import dynamic_prompt

    @dynamic_prompt
    def numbered(request) -> str:
        return f"Prompt for message {len(request.messages)}."

    store = InMemoryStore()
    ac = AutoContext(CFG)
    model = ReplyModel(reply=steps_then_answer(3, lines=2))
    graph = agent(model, ac, store, extra=[numbered])
    graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    firsts = [sent[0].content.split("\n")[0] for sent in model.seen]
    assert firsts == [f"Prompt for message {n}." for n in (1, 3, 5, 7)]
    wrapped = OffloadStore.wrap(store)
    record = wrapped.get(surface_namespace(wrapped, "t"), "model_request")
    assert record.value["system"]["data"]["content"] == "Prompt for message 7."


# --- issue 13, item 1: parallel results just under the offload threshold --------------------------
@tool
def read(path: str) -> str:
    """Read a file."""
    digest = hashlib.sha256(path.encode()).hexdigest()
    lines = [f"{k:04d} {hashlib.sha256(f'{digest}{k}'.encode()).hexdigest()}" for k in range(80)]
    return "\n".join(lines)[:4_990]  # just under large_payload_threshold (5,120 characters)


async def test_parallel_results_just_under_the_offload_threshold_keep_the_run_alive() -> None:
    """Seven parallel reads of ~5,000 characters at 16k (issue 13): the next call used to
    raise ContextBudgetError, and every later one; now the freshest results are offloaded
    (the model reloads what it needs) and the run goes on, every request within budget."""
    ac = AutoContext(AutoContextConfig(max_tokens=16_000))

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n == 0:
            calls = [
                {
                    "name": "read",
                    "args": {"path": f"src/m{k}.py"},
                    "id": f"r{k}",
                    "type": "tool_call",
                }
                for k in range(7)
            ]
            return AIMessage("", tool_calls=calls)
        return AIMessage(f"read them ({n})")

    for run_async in (False, True):
        model = ReplyModel(reply=reply)
        graph = create_agent(
            model,
            [read],
            system_prompt="Be brief.",
            middleware=[ac.middleware()],
            checkpointer=InMemorySaver(),
            store=InMemoryStore(),
        )
        msgs = {"messages": [HumanMessage("read the seven modules")]}
        out = await graph.ainvoke(msgs, THREAD) if run_async else graph.invoke(msgs, THREAD)
        assert out["messages"][-1].content.startswith("read them")
        assert len(model.seen) == 2
        assert_fits(model, ac)
        # a later turn of the same thread runs too
        more = {"messages": [HumanMessage("and now?")]}
        out = await graph.ainvoke(more, THREAD) if run_async else graph.invoke(more, THREAD)
        assert out["messages"][-1].content.startswith("read them")


async def test_an_input_system_message_next_to_system_prompt_is_sent_as_one() -> None:
    """Issue 13: create_agent(system_prompt=…) with a system message in the input passed
    two system messages through; the model gets one, first, on every call."""
    ac = AutoContext(CFG)
    for run_async in (False, True):
        model = ReplyModel(reply=steps_then_answer(12, lines=30))
        graph = agent(model, ac, system="Be brief.")
        msgs = {"messages": [SystemMessage("Policy: never delete files."), HumanMessage("go")]}
        out = await graph.ainvoke(msgs, THREAD) if run_async else graph.invoke(msgs, THREAD)
        assert out["messages"][-1].content.startswith("done")
        for sent in model.seen:
            assert [type(m) for m in sent].count(SystemMessage) == 1
            assert "Be brief." in sent[0].content and "never delete files" in sent[0].content
        assert_fits(model, ac)


# --- issue 12, item 1: built the LangChain way ------------------------------------------------------
async def test_the_middleware_is_built_from_config_fields_like_langchains_own() -> None:
    for run_async in (False, True):
        model = ReplyModel(reply=steps_then_answer(12, lines=30))
        mw = AutoContextMiddleware(max_tokens=6_000, token_ratio=0.6, target_ratio=0.4)
        graph = create_agent(
            model,
            [sh],
            system_prompt="Be brief.",
            middleware=[mw],
            checkpointer=InMemorySaver(),
            store=InMemoryStore(),
        )
        msgs = {"messages": [HumanMessage("go")]}
        out = await graph.ainvoke(msgs, THREAD) if run_async else graph.invoke(msgs, THREAD)
        assert out["messages"][-1].content.startswith("done")
        assert mw.autocontext.config.max_tokens == 6_000
        assert_fits(model, mw.autocontext)
    built = AutoContextMiddleware(AutoContextConfig(max_tokens=5_000))
    assert built.autocontext.config.max_tokens == 5_000
    ac = AutoContext(AutoContextConfig(max_tokens=5_000, last_keep=3), token_ratio=0.6)
    assert (ac.config.max_tokens, ac.config.last_keep, ac.config.token_ratio) == (5_000, 3, 0.6)
    with pytest.raises(TypeError, match="max_tokenz"):
        AutoContext(max_tokenz=1)
    with pytest.raises(TypeError, match="not both"):
        AutoContextMiddleware(ac, max_tokens=1_000)
    with pytest.raises(InvalidConfigError, match="max_tokens"):
        AutoContextMiddleware(max_tokens=-5)


async def test_the_final_answer_is_archived_when_the_run_ends() -> None:
    """Issue 13: a run's final answer reached the history store only at the next model
    call (it existed only in the checkpoint until then)."""
    for run_async in (False, True):
        store = InMemoryStore()
        ac = AutoContext(CFG, store=store)
        graph = agent(ReplyModel(reply=steps_then_answer(2, lines=3)), ac, store)
        msgs = {"messages": [HumanMessage("go")]}
        out = await graph.ainvoke(msgs, THREAD) if run_async else graph.invoke(msgs, THREAD)
        final = out["messages"][-1]
        assert final.content.startswith("done")
        history = [e.message for e in OffloadStore.wrap(store).iter_history("t")]
        assert history[-1].id == final.id and history[-1].content == final.content


@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
async def test_a_reply_whose_tool_interrupted_stays_in_the_history_after_a_rewind(
    run_async: bool,
) -> None:
    """Time travel: a tool asked the human (``interrupt()``), and instead of resuming
    the user went back to an earlier checkpoint and asked something else. The model's
    reply that called the tool was in the abandoned checkpoint only: archived at the
    run's end or at the next model call, neither of which came, it was in no history
    (``search_history`` never found it). It is archived before its tools run, once
    every ``after_model`` hook has run."""
    from langgraph.types import interrupt

    @tool
    def ask_human(question: str) -> str:
        """Ask the human a question."""
        return str(interrupt(question))

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if "restore" in str(messages[-1].content):
            return AIMessage(
                "Restoring the quarterly ledger needs your approval.",
                tool_calls=[{"name": "ask_human", "args": {"question": "ok?"}, "id": "q1"}],
            )
        return AIMessage(f"ok {n}")

    store = OffloadStore(InMemoryStore())
    ac = AutoContext(CFG, store=store)
    graph = create_agent(
        ReplyModel(reply=reply),
        [ask_human],
        system_prompt="sys",
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )

    async def run(inp: Any, config: Any) -> dict[str, Any]:
        return await graph.ainvoke(inp, config) if run_async else graph.invoke(inp, config)

    await run({"messages": [HumanMessage("hello")]}, THREAD)
    before = graph.get_state(THREAD).config
    out = await run({"messages": [HumanMessage("restore the ledger")]}, THREAD)
    assert "__interrupt__" in out
    asked = out["messages"][-1]
    await run({"messages": [HumanMessage("never mind")]}, before)  # the rewind
    assert asked.id not in {m.id for m in graph.get_state(THREAD).values["messages"]}
    archived = store.get_history_message("t", str(asked.id))
    assert archived is not None and archived.message.tool_calls[0]["id"] == "q1"
    hits = search_history(store, "t", "quarterly")
    assert hits[0].id == asked.id and hits[0].in_context == "no"


@pytest.mark.parametrize("run_async", [False, True], ids=["sync", "async"])
async def test_the_parallel_tool_calls_of_one_reply_archive_it_once(run_async: bool) -> None:
    """Each tool call archives the reply before its tool runs; the calls of one reply
    run at once, and each found the reply new: one history read and one append planned
    per call (40 calls of one reply: 90 store round trips in a turn, against 12 for one
    call). The store is read as often whether the reply calls one tool or twelve."""
    import asyncio
    import threading
    import time

    class Counting(InMemoryStore):
        """Counts round trips; each a little slow, as a database's is."""

        def __init__(self) -> None:
            super().__init__()
            self.trips = 0
            self.guard = threading.Lock()

        def batch(self, ops: Any) -> Any:
            with self.guard:
                self.trips += 1
            time.sleep(0.002)
            return super().batch(ops)

        async def abatch(self, ops: Any) -> Any:
            self.trips += 1
            await asyncio.sleep(0.002)
            return await super().abatch(ops)

    @tool
    def look(k: int) -> str:
        """Look something up."""
        return f"found {k}"

    async def trips(calls: int) -> int:
        def reply(messages: list[BaseMessage], n: int) -> AIMessage:
            if n == 0:
                return AIMessage(
                    "Looking.",
                    tool_calls=[
                        {"name": "look", "args": {"k": k}, "id": f"c{k}", "type": "tool_call"}
                        for k in range(calls)
                    ],
                )
            return AIMessage("done")

        store = Counting()
        ac = AutoContext(CFG, store=store)
        graph = create_agent(
            ReplyModel(reply=reply),
            [look],
            system_prompt="sys",
            middleware=[ac.middleware()],
            checkpointer=InMemorySaver(),
            store=store,
        )
        inp = {"messages": [HumanMessage("look")]}
        await graph.ainvoke(inp, THREAD) if run_async else graph.invoke(inp, THREAD)
        assert len(OffloadStore.wrap(store).get_history("t")) == 3 + calls
        return store.trips

    assert await trips(12) == await trips(1)


def test_a_view_fitted_on_one_branch_is_not_applied_to_an_older_checkpoint_resumed() -> None:
    """Time travel with a review after the model (``HumanInTheLoopMiddleware`` listed
    after ours, so its ``after_model`` interrupts before ours runs). A view fitted in
    the model call (an outer middleware grew the prompt) waits, per thread, for our
    ``after_model``. The user resumed an *older* interrupted checkpoint instead of the
    latest: the latest call's fitted view was written into that older branch, with a
    summary of messages it never had (abandoned turns shown as in its context) beside
    the originals the summary also stood for."""
    from _builders import fetch
    from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
    from langgraph.types import Command

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    def asks_delete(messages: list[BaseMessage]) -> bool:
        return any(m.type == "human" and "delete" in str(m.content) for m in messages[-2:])

    class Policies(AgentMiddleware):  # a long policy text for requests to delete
        def wrap_model_call(self, request, handler):
            text = "policy clause. " * (1_000 if asks_delete(request.messages) else 10)
            return handler(request.override(system_message=SystemMessage("sys " + text)))

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if messages[-1].type != "tool" and asks_delete(messages):
            return AIMessage(
                "", tool_calls=[{"name": "delete_file", "args": {"path": "/x"}, "id": f"d{n}"}]
            )
        if messages[-1].type == "human":
            return AIMessage(
                "",
                tool_calls=[
                    {"name": "fetch", "args": {"name": f"doc{n}", "size": 60}, "id": f"f{n}"}
                ],
            )
        return AIMessage(f"ok {n}")

    store = OffloadStore(InMemoryStore())
    ac = AutoContext(AutoContextConfig(max_tokens=4_000), store=store)
    review = HumanInTheLoopMiddleware({"delete_file": True})
    graph = create_agent(
        ReplyModel(reply=reply),
        [fetch, delete_file],
        system_prompt="sys",
        middleware=[Policies(), ac.middleware(), review],
        checkpointer=InMemorySaver(),
        store=store,
    )
    approve = Command(resume={"decisions": [{"type": "approve"}]})
    graph.invoke({"messages": [HumanMessage("fetch", id="u0")]}, THREAD)
    assert "__interrupt__" in graph.invoke({"messages": [HumanMessage("delete", id="u1")]}, THREAD)
    older = graph.get_state(THREAD)
    graph.invoke(approve, THREAD)
    for k in range(2, 14):
        graph.invoke({"messages": [HumanMessage(f"fetch {k}", id=f"u{k}")]}, THREAD)
    out = graph.invoke({"messages": [HumanMessage("delete", id="u99")]}, THREAD)
    assert "__interrupt__" in out  # its call's view was fitted, with a summary of the turns
    graph.invoke(approve, older.config)  # back to the older review

    def covered(messages: Sequence[BaseMessage]) -> list[str]:
        ids: list[str] = []
        for m in messages:
            oid = (marker(m) or {}).get("offload_id")
            ids += covered(store.reload("t", oid).messages) if oid else [str(m.id)]
        return ids

    ids = covered(graph.get_state(THREAD).values["messages"])
    assert len(ids) == len(set(ids)), ids
    assert not {f"u{k}" for k in range(2, 14)} & set(ids)
    assert {m.id for m in older.values["messages"]} <= set(ids)


def test_a_redacting_middleware_before_ours_keeps_its_redaction_in_the_history() -> None:
    """PIIMiddleware redacts the reply in its after_model; ours (listed after it, as the
    docs ask) ran its after_model first, since after-hooks run in reverse, and archived
    the raw reply, which search_history then showed the model. The reply is archived
    once every after_model hook has run."""
    from langchain.agents.middleware import PIIMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    store = OffloadStore(InMemoryStore())
    ac = AutoContext(max_tokens=4_000, store=store)
    model = GenericFakeChatModel(messages=iter([AIMessage("Sure, write to bob@example.com")]))
    pii = PIIMiddleware("email", strategy="redact", apply_to_input=True, apply_to_output=True)
    agent = create_agent(
        model,
        [],
        system_prompt="sys",
        middleware=[pii, ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    config = {"configurable": {"thread_id": "pii"}}
    agent.invoke({"messages": [("user", "my mail is alice@example.com")]}, config)
    archived = [text_of(e.message) for e in store.get_history("pii")]
    assert len(archived) == 2
    assert not any("@example.com" in text for text in archived), archived
    assert all("[REDACTED_EMAIL]" in text for text in archived)


class ToolsSeenModel(ReplyModel):
    """A :class:`ReplyModel` that also records the tools bound for each call."""

    tools_seen: list = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        self.tools_seen.append({getattr(t, "name", None) for t in self.bound})
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)


def _catalogue_tools(n: int) -> list[Any]:
    """``n`` tools with long descriptions, as real agents carry (about 170 tokens each)."""

    def make(k: int) -> Any:
        def lookup(query: str) -> str:
            return f"no record {k} for {query}"

        lookup.__name__ = f"catalogue_{k}"
        lookup.__doc__ = (f"Search catalogue {k} for records matching the query. " * 12).strip()
        return tool(lookup)

    return [make(k) for k in range(n)]


@pytest.mark.parametrize("agent_tools", [0, 12], ids=["sh", "sh-and-12-long-tools"])
async def test_the_package_shows_itself_in_the_call_that_first_compresses(
    agent_tools: int,
) -> None:
    """Tools, section and tags appear together with the first compaction, which rewrites
    the context anyway: the provider's prompt cache breaks once for both. Shown at the
    memory-pressure warning, a step or two earlier, they cost one more uncached request
    of the whole context per thread. The agent's own tool schemas (about 2,000 tokens
    with 12 long ones) count in both decisions alike: counted by the compaction but not
    by the disclosure, the package showed itself a call after it first compressed."""
    cfg = AutoContextConfig(max_tokens=8_000, metadata_tags=True, last_keep=4)
    extra = _catalogue_tools(agent_tools)
    for run_async in (False, True):
        ac = AutoContext(cfg)
        own = {t.name for t in ac.tools}
        model = ToolsSeenModel(reply=steps_then_answer(90, lines=6))
        graph = create_agent(
            model,
            [sh, *extra],
            system_prompt="Be brief.",
            middleware=[ac.middleware()],
            checkpointer=InMemorySaver(),
            store=InMemoryStore(),
        )
        go = {"messages": [HumanMessage("go")]}
        await graph.ainvoke(go, THREAD) if run_async else graph.invoke(go, THREAD)
        sizes = [ac.counter.count(sent) for sent in model.seen]
        shown = [own <= names for names in model.tools_seen]
        first = shown.index(True)
        assert shown == [False] * first + [True] * (len(shown) - first)  # then for good
        assert sizes[first] < sizes[first - 1]  # the call that first compressed
        assert not any(sizes[k] > sizes[k + 1] for k in range(first - 1))  # none before
        # A memory-pressure notice comes at each call that passes the warning from
        # below, before that call too: the floor and the context counted with every tool
        # schema the requests send or will send (the package's own, not yet shown, are
        # reserved by the compaction and left out of the notice's figures alike).
        every = [sh, *extra, *ac.tools]
        sent = [[m for m in seen if m.id != NOTICE_ID] for seen in model.seen]
        sizes = [ac.counter.count(view, every) for view in sent]
        # the floor: the system message and "go" as each view sends them
        floors = [
            ac.counter.count([v[0], *(m for m in v if text_of(m).split("\n")[-1] == "go")], every)
            for v in sent
        ]
        warnings = [cfg.thresholds(floor).warning for floor in floors]
        notices = [k for k, seen in enumerate(model.seen) if any(m.id == NOTICE_ID for m in seen)]
        crossings = [
            k
            for k in range(1, len(sizes))
            if sizes[k] >= warnings[k] and sizes[k - 1] < warnings[k - 1]
        ]
        assert notices == crossings and notices[0] < first
        for k, sent in enumerate(model.seen):
            tagged = [bool(TAG.match(text_of(m))) for m in sent[1:]]
            assert all(tagged) if k >= first else not any(tagged)
            assert ("# Context: " in text_of(sent[0])) is (k >= first)
        assert_fits(model, ac)


# --- events name the agent that recorded them ---------------------------------------------------
def _boss_and_helper(store: InMemoryStore, *, sync: bool) -> Any:
    """A ``create_agent`` agent named "boss" whose ``delegate`` tool runs a subagent named
    "helper"; the subagent inherits the boss's thread (the caller's config) and store."""
    helper = create_agent(
        ReplyModel(reply=steps_then_answer(30)),
        [sh],
        system_prompt="Help.",
        middleware=[AutoContext(CFG).middleware()],
        store=store,
        name="helper",
    )

    if sync:

        @tool
        def delegate(task: str) -> str:
            """Hand a task to the helper."""
            return text_of(helper.invoke({"messages": [HumanMessage(task)]})["messages"][-1])

    else:

        @tool
        async def delegate(task: str) -> str:
            """Hand a task to the helper."""
            out = await helper.ainvoke({"messages": [HumanMessage(task)]})
            return text_of(out["messages"][-1])

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n >= 25:
            return AIMessage("done")
        if n % 10 == 0:
            return call("delegate", {"task": f"task {n}"}, n)
        return call("sh", {"command": f"make {n}", "lines": 40}, n)

    return create_agent(
        ReplyModel(reply=reply),
        [sh, delegate],
        system_prompt="Boss.",
        middleware=[AutoContext(CFG).middleware()],
        checkpointer=InMemorySaver(),
        store=store,
        name="boss",
    )


async def _run_boss_and_helper(sync: bool) -> Any:
    """Run the boss (and through it the helper) once, sync or async; their store."""
    store = InMemoryStore()
    boss = _boss_and_helper(store, sync=sync)
    if sync:
        boss.invoke({"messages": [HumanMessage("go")]}, THREAD)
    else:
        await boss.ainvoke({"messages": [HumanMessage("go")]}, THREAD)
    return AutoContext(CFG).resolve_store(store)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_each_event_names_the_agent_whose_compression_recorded_it(sync: bool) -> None:
    """A subagent run inside a tool shares its caller's thread: both agents' compressions
    land in one event list, told apart by ``EventRecord.agent`` (``create_agent``'s
    ``name``, LangChain's ``lc_agent_name``); the stored dict carries it too."""
    events = (await _run_boss_and_helper(sync)).list_events("t")
    by_agent: dict[Any, set[str]] = {}
    for e in events:
        by_agent.setdefault(e.agent, set()).add(e.strategy)
        assert e.to_dict()["agent"] == e.agent
    assert set(by_agent) == {"boss", "helper"}
    assert all(by_agent.values())  # both compressed


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_each_history_entry_names_the_agent_that_archived_it(sync: bool) -> None:
    """The subagent archives its originals into its caller's thread history: each entry
    names its agent, the boss's request and the helper's tasks (the helper's input) and
    results alike; outside a named agent the name is None."""
    off = await _run_boss_and_helper(sync)
    entries = off.get_history("t")
    by_agent: dict[Any, list[str]] = {}
    for e in entries:
        by_agent.setdefault(e.agent, []).append(text_of(e.message))
    assert set(by_agent) == {"boss", "helper"}
    assert "go" in by_agent["boss"] and "go" not in by_agent["helper"]
    assert "task 0" in by_agent["helper"]  # the helper's own user message
    off.append_history("plain", [HumanMessage("hi", id="h")])
    assert [e.agent for e in off.get_history("plain")] == [None]


def test_events_outside_a_named_agent_name_none_and_a_given_agent_stays() -> None:
    store = InMemoryStore()
    ac = AutoContext(CFG)
    graph = agent(ReplyModel(reply=steps_then_answer(30)), ac, store)  # no name=
    graph.invoke({"messages": [HumanMessage("go")]}, THREAD)
    off = ac.resolve_store(store)
    events = off.list_events("t")
    assert events and all(e.agent is None for e in events)
    assert "agent" not in events[0].to_dict()
    # plain calls outside any graph; an event that names its agent keeps that name
    off.record_event("plain", {"strategy": "custom", "agent": "mine"})
    off.record_event("plain", {"strategy": "custom"})
    assert [e.agent for e in off.list_events("plain")] == ["mine", None]


def _is_record_put(op: Any) -> bool:
    return isinstance(op, PutOp) and op.key.startswith("model_request")


class _CountingPuts(InMemoryStore):
    """An ``InMemoryStore`` that counts the writes of the middleware's request record."""

    record_puts: int = 0

    def batch(self, ops):
        ops = list(ops)
        self.record_puts += sum(_is_record_put(op) for op in ops)
        return super().batch(ops)

    async def abatch(self, ops):
        ops = list(ops)
        self.record_puts += sum(_is_record_put(op) for op in ops)
        return await super().abatch(ops)


def _lead_and_helper_on_one_middleware(mw: Any, store: InMemoryStore) -> Any:
    helper = create_agent(
        ReplyModel(reply=steps_then_answer(4)),
        [sh],
        system_prompt="Help.",
        middleware=[mw],
        store=store,
        name="helper",
    )

    @tool
    def delegate(task: str) -> str:
        """Hand a task to the helper."""
        return text_of(helper.invoke({"messages": [HumanMessage(task)]})["messages"][-1])

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        return call("delegate", {"task": f"task {n}"}, n) if n < 4 else AIMessage("done")

    return create_agent(
        ReplyModel(reply=reply),
        [sh, delegate],
        system_prompt="Lead.",
        middleware=[mw],
        checkpointer=InMemorySaver(),
        store=store,
        name="lead",
    )


def test_two_named_agents_on_one_middleware_and_thread_each_keep_their_request_record() -> None:
    """One middleware serving a lead and its helper on the caller's thread learns each
    agent's system prompt and tools under its own name: written once per agent (not at
    every switch between them), and found again by a new process for each."""
    store = _CountingPuts()
    lead = _lead_and_helper_on_one_middleware(AutoContext(CFG).middleware(), store)
    lead.invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert store.record_puts == 2  # the lead's and the helper's, each once
    wrapped = OffloadStore.wrap(store)
    ns = surface_namespace(wrapped, "t")
    prompts = {
        key: wrapped.get(ns, key).value["system"]["data"]["content"]
        for key in ("model_request:lead", "model_request:helper")
    }
    assert prompts == {"model_request:lead": "Lead.", "model_request:helper": "Help."}
    # a new process: each agent finds its own record, so nothing needs writing again
    again = _lead_and_helper_on_one_middleware(AutoContext(CFG).middleware(), store)
    again.invoke({"messages": [HumanMessage("go on")]}, THREAD)
    assert store.record_puts == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_after_a_fit_the_ids_the_view_shows_name_the_same_messages_in_the_state(
    mode: str,
) -> None:
    """A view fitted in the call (here after the provider rejected the first request as
    too long) was not written to the state: an early answer W, summarized out of the
    view, still stood in the state, where the short id the view showed for a later
    answer X named W. The model's delete_message of X deleted W (self-management
    audit). The state now takes the fitted messages (in after_model, before the tools)."""
    import asyncio
    import re

    early = "abcd1111-1111-4111-8111-111111111111"
    later = "abcd2222-2222-4222-8222-222222222222"
    filler = "lorem ipsum dolor sit amet " * 30
    msgs: list[BaseMessage] = []
    for r in range(12):
        msgs.append(HumanMessage(f"question {r}: " + filler, id=f"q{r:02d}-0000-4000-8000-0"))
        mid = early if r == 0 else later if r == 10 else f"a{r:02d}-0000-4000-8000-0"
        msgs.append(AIMessage(f"answer {r}: " + filler, id=mid))
    msgs.append(HumanMessage("now clean up your context", id="q99-0000-4000-8000-0"))
    shown: list[str] = []

    class Rejecting(ReplyModel):
        def _generate(self, messages, stop=None, run_manager=None, **kw):
            if not self.seen:
                self.seen.append(list(messages))
                raise ValueError("This model's maximum context length is 8192 tokens")
            return super()._generate(messages, stop, run_manager, **kw)

    def reply(view: list[BaseMessage], n: int) -> AIMessage:
        if n == 1:
            assert early not in {m.id for m in view}
            tagged = next(m for m in view if m.id == later)
            shown.append(re.match(r"<(\S+) \d+/\d+/>", text_of(tagged)).group(1))
            return call("delete_message", {"message_id": shown[0]}, n)
        return AIMessage("done")

    ac = AutoContext(AutoContextConfig(max_tokens=8_000, metadata_tags=True, disclosure="always"))
    graph = agent(Rejecting(reply=reply), ac, system=None)
    run = {"messages": msgs}
    out = graph.invoke(run, THREAD) if mode == "sync" else asyncio.run(graph.ainvoke(run, THREAD))
    answer = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert answer.content.startswith(f"Deleted message {later}"), answer.content
    ids = [m.id for m in out["messages"]]
    assert later not in ids and len(ids) == len(set(ids))
    assert out["messages"][-1].content == "done"
    assert not find_violations(out["messages"])


def test_a_deleted_thread_forgets_its_request_shape_and_records_it_again_on_reuse() -> None:
    """``delete_thread`` promises to drop every in-process cache of the thread: the
    middleware kept the thread's request shape (its system prompt, which a dynamic
    prompt makes the user's own), handed it to the next run of the id, and never wrote
    the deleted record again (the cache said it was known)."""
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(CFG, store=store)
    mw = ac.middleware()

    def run(system: str) -> None:
        graph = create_agent(
            ReplyModel(reply=steps_then_answer(3)),
            [sh],
            system_prompt=system,
            middleware=[mw],
            checkpointer=InMemorySaver(),
            store=store,
        )
        graph.invoke({"messages": [HumanMessage("go")]}, THREAD)

    run("Private profile of user 1.")
    ns = surface_namespace(store, "t")
    assert store.get(ns, "model_request") is not None
    store.delete_thread("t")
    assert store.get(ns, "model_request") is None
    assert mw._shape("t") is None  # nothing of the deleted thread is kept in memory
    run("Private profile of user 1.")  # the id reused: its record is written again
    record = store.get(ns, "model_request")
    assert record is not None
    assert record.value["system"]["data"]["content"] == "Private profile of user 1."


@pytest.mark.parametrize("run_async", [False, True])
async def test_one_middleware_on_two_stores_keeps_each_tenants_request_apart(
    run_async: bool,
) -> None:
    """One middleware shared by two agents compiled with different stores (two tenants),
    the same thread id in both: what it learned of tenant A's requests (a large system
    prompt) was cached by thread id alone, so tenant B's budget counted A's prompt and
    B's conversation, well within its own budget, was compressed."""
    mw = AutoContext(CFG).middleware()

    def history() -> list[BaseMessage]:
        out: list[BaseMessage] = [HumanMessage("start", id="u0")]
        for k in range(10):
            out.append(call("sh", {"command": f"make {k}"}, k).model_copy(update={"id": f"a{k}"}))
            out.append(ToolMessage(log_text(11, k), tool_call_id=f"c{k}", id=f"t{k}"))
        return [*out, HumanMessage("go on", id="u1")]

    async def run(middleware: Any, store: Any, system: str, msgs: list[BaseMessage]) -> Any:
        model = ReplyModel(reply=lambda m, n: AIMessage("ok"))
        graph = create_agent(
            model,
            [sh],
            system_prompt=system,
            middleware=[middleware],
            checkpointer=InMemorySaver(),
            store=store,
        )
        run = {"messages": msgs}
        await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
        return model

    large = "You follow these rules.\n" + log_text(110, 7)
    store_a, store_b = InMemoryStore(), InMemoryStore()
    await run(mw, store_a, large, [HumanMessage("hi", id="x")])
    tenant_b = await run(mw, store_b, "Be brief.", history())
    alone = await run(AutoContext(CFG).middleware(), InMemoryStore(), "Be brief.", history())
    assert mw.autocontext.resolve_store(store_b).list_events("t") == []
    assert [text_of(m) for m in tenant_b.seen[0]] == [text_of(m) for m in alone.seen[0]]
    assert "You follow these rules." not in text_of(tenant_b.seen[0][0])


# --- a view fitted in the call, with other middlewares around ours -----------------------------------
def _fit_setup() -> tuple[AutoContext, list[BaseMessage], str]:
    """A first call that must be fitted in wrap_model_call (before_model could not count
    the large system prompt), as in the test of the fallback above."""
    cfg = CFG.model_copy(update={"token_ratio": 0.75, "target_ratio": 0.7})
    system = "You follow these rules.\n" + log_text(110, 7)
    history: list[BaseMessage] = [HumanMessage("start", id="u0")]
    for k in range(GROUPS):
        history.append(
            call("sh", {"command": f"make {k}", "lines": 5}, k).model_copy(update={"id": f"a{k}"})
        )
        history.append(ToolMessage(log_text(11, k), tool_call_id=f"c{k}", id=f"t{k}"))
    return AutoContext(cfg), history, system


def _chars(messages: list[BaseMessage]) -> int:
    return sum(len(text_of(m)) for m in messages)


@pytest.mark.parametrize("run_async", [False, True])
async def test_an_outer_middlewares_change_to_the_reply_survives_a_fitted_view(
    run_async: bool,
) -> None:
    """A middleware listed before ours (the documented order) that rewrites the reply:
    when our wrap_model_call fitted the view, its command wrote the fitted messages and
    the reply as *it* received it, after the reply the outer middleware returned, so the
    state lost the outer middleware's change."""
    from langchain.agents.middleware import AgentMiddleware, ModelResponse

    def checked(response: ModelResponse) -> ModelResponse:
        result = [
            m.model_copy(update={"content": f"{m.content} [checked]"})
            if isinstance(m, AIMessage)
            else m
            for m in response.result
        ]
        return ModelResponse(result=result, structured_response=response.structured_response)

    class Stamp(AgentMiddleware):
        def wrap_model_call(self, request, handler):
            return checked(handler(request))

        async def awrap_model_call(self, request, handler):
            return checked(await handler(request))

    stamp = Stamp()

    ac, history, system = _fit_setup()
    model = ReplyModel(reply=lambda m, n: AIMessage("finished"))
    graph = agent(model, ac, system=system, extra=[stamp])
    run = {"messages": history}
    out = await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
    assert _chars(out["messages"][:-1]) < _chars(history)  # the fitted view reached the state
    assert out["messages"][-1].content == "finished [checked]"
    assert [m for m in out["messages"] if m.content == "finished"] == []
    assert not find_violations(out["messages"])
    assert_fits(model, ac)


@pytest.mark.parametrize("run_async", [False, True])
async def test_a_request_only_message_of_an_outer_middleware_stays_out_of_the_state(
    run_async: bool,
) -> None:
    """A middleware before ours adds a message to the request only (retrieved documents):
    a view fitted in the call was written to the state whole, that message included, so
    it stayed in the conversation for good (and was sent again beside the next copy)."""
    from langchain.agents.middleware import AgentMiddleware

    def with_docs(request):
        docs = HumanMessage("Retrieved: the build uses make.")
        return request.override(messages=[*request.messages, docs])

    class Retrieve(AgentMiddleware):
        def wrap_model_call(self, request, handler):
            return handler(with_docs(request))

        async def awrap_model_call(self, request, handler):
            return await handler(with_docs(request))

    retrieve = Retrieve()

    ac, history, system = _fit_setup()
    model = ReplyModel(reply=lambda m, n: AIMessage("finished"))
    graph = agent(model, ac, system=system, extra=[retrieve])
    run = {"messages": history}
    out = await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
    assert any("Retrieved:" in text_of(m) for m in model.seen[0])
    assert _chars(out["messages"][:-1]) < _chars(history)  # the fitted view reached the state
    assert not any("Retrieved:" in text_of(m) for m in out["messages"])
    assert out["messages"][-1].content == "finished"
    assert not find_violations(out["messages"])


def _retrieve(lines: int, where: str = "last") -> Any:
    """A middleware (listed before ours) that adds a retrieved document of ``lines``
    log lines to every model request as a user message, not to the state."""
    from langchain.agents.middleware import AgentMiddleware

    def with_docs(request):
        docs = HumanMessage("Retrieved: the build uses make.\n" + log_text(lines, 3))
        msgs = request.messages
        new = [*msgs, docs] if where == "last" else [docs, *msgs]
        return request.override(messages=new)

    class Retrieve(AgentMiddleware):
        def wrap_model_call(self, request, handler):
            return handler(with_docs(request))

        async def awrap_model_call(self, request, handler):
            return await handler(with_docs(request))

    return Retrieve()


@pytest.mark.parametrize("run_async", [False, True])
@pytest.mark.parametrize("where", ["last", "first"])
async def test_request_only_messages_stay_out_of_the_history_when_a_view_is_fitted(
    run_async: bool, where: str
) -> None:
    """A middleware before ours adds a large document to every request (not to the
    state), so that each call's view is fitted in the model call: compressing the
    request archived the document as a user turn of the conversation, once per call
    under a new id, and a summary of the document alone reached the state (it was not
    part of the conversation). Neither happens; what the model was shown of it stays
    readable in the offload it names: a summary it was folded into, or its own (first,
    outside the working set, it is masked as any user message there is)."""
    ac, history, system = _fit_setup()
    store = InMemoryStore()
    model = ReplyModel(reply=steps_then_answer(6))
    graph = agent(model, ac, store, system=system, extra=[_retrieve(60, where)])
    run = {"messages": history}
    out = await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
    assert out["messages"][-1].content == "done after 6 calls"
    offloads = ac.resolve_store(store)
    events = offloads.list_events("t")
    assert len({e.seq for e in events}) > 1  # the views were fitted in the calls
    archived = [e.message for e in offloads.get_history("t")]
    assert not [m for m in archived if "Retrieved:" in text_of(m)]
    assert [m.id for m in archived if m.id in {h.id for h in history}] == [m.id for m in history]
    assert not [m for m in out["messages"] if text_of(m).startswith("Retrieved:")]
    for m in out["messages"]:  # no summary stands for the document alone
        for oid in summary_offload_ids([m]):
            record = offloads.reload("t", oid)
            assert [r for r in record.messages if "Retrieved:" not in text_of(r)]
    shown = {oid for sent in model.seen for oid in shown_offload_ids(sent)}
    folded = [
        oid
        for oid in shown
        if any("Retrieved:" in text_of(r) for r in offloads.reload("t", oid).messages)
    ]
    assert folded or where == "last"  # first: folded or masked, its offload id shown
    assert not find_violations(out["messages"])


@pytest.mark.parametrize("run_async", [False, True])
@pytest.mark.parametrize("lines", [100, 140])
async def test_a_request_only_user_message_is_not_the_latest_user_message_of_a_fitted_view(
    run_async: bool, lines: int
) -> None:
    """A middleware before ours appends a retrieved document to every request as a
    user message. Fitting the call's view took the document for the latest user
    message: the user's own question (a long task statement) counted as an older round
    and was evicted into the recursive summary, in the model's view and in the state;
    with a larger document, the document counted as never compressible and the call
    failed with ContextBudgetError. The question stays verbatim in every request and
    in the state, and the document is compressed like any other message."""
    ac, history, system = _fit_setup()
    question = HumanMessage("Why does the build fail?\n" + log_text(20, 9), id="u0")
    history[0] = question
    store = InMemoryStore()
    model = ReplyModel(reply=steps_then_answer(6))
    graph = agent(model, ac, store, system=system, extra=[_retrieve(lines)])
    run = {"messages": history}
    out = await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
    assert out["messages"][-1].content == "done after 6 calls"
    assert len({e.seq for e in ac.resolve_store(store).list_events("t")}) > 1  # fitted
    for sent in model.seen:
        assert [m.content for m in sent if m.id == "u0"] == [question.content]
    assert [m.content for m in out["messages"] if m.id == "u0"] == [question.content]
    assert not find_violations(out["messages"])


@pytest.mark.parametrize("run_async", [False, True])
async def test_a_request_only_user_message_does_not_raise_the_floor_of_an_unfitted_view(
    run_async: bool,
) -> None:
    """A middleware before ours appends a retrieved document to every request as a
    user message, the request under max_tokens (its view is not fitted in the call).
    The view took the document for the latest user message: never compressible, it
    moved the trigger and the memory-pressure warning up by most of its size, so a
    request well past both was sent without the notice and without the package. The
    document placed first or last in the request is judged alike."""

    async def notices(where: str) -> list[bool]:
        ac = AutoContext(CFG)
        model = ReplyModel(reply=steps_then_answer(4, lines=3))
        graph = agent(model, ac, extra=[_retrieve(190, where)])
        run = {"messages": [HumanMessage("Why does the build fail?", id="u0")]}
        await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
        assert not ac.resolve_store().list_events("t")  # no view was fitted or compressed
        return [any(m.id == NOTICE_ID for m in sent) for sent in model.seen]

    first = await notices("first")
    assert any(first)
    assert await notices("last") == first


@pytest.mark.parametrize("run_async", [False, True])
async def test_a_request_only_user_message_does_not_count_a_pinned_question_in_the_pin_limit(
    run_async: bool,
) -> None:
    """A developer pins the user's long task statement (past the pin limit: free while
    it is the latest user message) and a middleware before ours appends a retrieved
    document to every request as a user message. Fitting the call's view took the
    document for the latest user message in the pin check: the pinned question counted
    against the limit and the call failed with ContextBudgetError."""
    from langchain_autocontext import pin

    ac, history, system = _fit_setup()
    question = pin(HumanMessage("Why does the build fail?\n" + log_text(40, 9), id="u0"))
    assert ac.counter.count_message(question) > ac.config.pin_limit
    history[0] = question
    store = InMemoryStore()
    model = ReplyModel(reply=steps_then_answer(3))
    graph = agent(model, ac, store, system=system, extra=[_retrieve(20)])
    run = {"messages": history}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pin's warning: a later user message would fail
        out = await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
    assert out["messages"][-1].content == "done after 3 calls"
    assert len({e.seq for e in ac.resolve_store(store).list_events("t")}) > 1  # fitted
    for sent in model.seen:
        assert [m.content for m in sent if m.id == "u0"] == [question.content]


@pytest.mark.parametrize("run_async", [False, True])
async def test_a_request_only_document_folded_in_every_fitted_call_keeps_one_offload(
    run_async: bool,
) -> None:
    """A middleware before ours puts the same document first in every request; each
    fitted call folded it into a summary of its own (kept out of the state) and wrote
    one more offload record of it: they piled up in list_offloads and the replay
    report. The document keeps one record, whose id every call that folds or masks it
    shows, and the model still reloads it by that id in a later step of the
    conversation."""
    steps = 8
    tool_steps = steps_then_answer(steps)

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n < steps:
            return tool_steps(messages, n)
        if n == steps:  # reload what the summary of the document names
            shown = [text_of(m) for m in messages if "Retrieved:" in text_of(m)]
            oid = re.search(r'offload_id="([\w-]+)"', shown[0])
            assert oid is not None
            return call("reload_offloaded", {"offload_id": oid.group(1)}, n)
        return AIMessage("done")

    ac, history, system = _fit_setup()
    store = InMemoryStore()
    model = ReplyModel(reply=reply)
    graph = agent(model, ac, store, system=system, extra=[_retrieve(60, "first")])
    run = {"messages": history}
    out = await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
    assert out["messages"][-1].content == "done"
    offloads = ac.resolve_store(store)
    docs = [
        r.offload_id
        for r in offloads.list_offloads("t")
        if all("Retrieved:" in text_of(m) for m in r.messages)
    ]
    assert len(docs) == 1
    folded = [sent for sent in model.seen if docs[0] in shown_offload_ids(sent)]
    assert len(folded) > 2  # several fitted calls folded or masked it, under the one record
    reloaded = [
        m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == f"c{steps}"
    ]
    assert len(reloaded) == 1 and "Retrieved: the build uses make." in text_of(reloaded[0])
    assert not [m for m in out["messages"] if docs[0] in shown_offload_ids([m])]
    assert not find_violations(out["messages"])


def test_a_fitted_view_is_not_applied_when_an_outer_middleware_hid_state_messages() -> None:
    """A middleware before ours sends the model part of the state only: writing the view
    fitted from that part to the state would drop the rest from the conversation; the
    state keeps every message and the next before_model compresses it."""
    from langchain.agents.middleware import AgentMiddleware

    class Hide(AgentMiddleware):
        def wrap_model_call(self, request, handler):
            return handler(request.override(messages=request.messages[1:]))

    ac, history, system = _fit_setup()
    model = ReplyModel(reply=lambda m, n: AIMessage("finished"))
    graph = agent(model, ac, system=system, extra=[Hide()])
    out = graph.invoke({"messages": history}, THREAD)
    assert "start" not in [text_of(m) for m in model.seen[0]]
    assert [m.id for m in out["messages"][:-1]] == [m.id for m in history]
    assert out["messages"][-1].content == "finished"
    assert_fits(model, ac)


@pytest.mark.parametrize("run_async", [False, True])
async def test_a_context_edit_of_an_outer_middleware_is_not_written_to_the_state(
    run_async: bool,
) -> None:
    """LangChain's ``ContextEditingMiddleware`` before ours clears old tool results in the
    request only, under their ids: a view fitted in that call was written to the state
    with the cleared copies, so the conversation lost the tool outputs for good (every
    later call sent ``[cleared]``, whether or not the edit would still clear them)."""
    from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware

    cfg = CFG.model_copy(update={"token_ratio": 0.75, "target_ratio": 0.7})
    system = "You follow these rules.\n" + log_text(110, 7)  # not counted in before_model
    history: list[BaseMessage] = []
    for k in range(8):
        history += [
            HumanMessage(f"question {k}", id=f"u{k}"),
            call("sh", {"command": f"make {k}"}, k).model_copy(update={"id": f"a{k}"}),
            ToolMessage(log_text(30, k), tool_call_id=f"c{k}", id=f"t{k}"),
            AIMessage(f"answer {k}", id=f"f{k}"),
        ]
    history.append(HumanMessage("one more", id="u8"))
    ac = AutoContext(cfg)
    model = ReplyModel(reply=lambda m, n: AIMessage("finished"))
    edit = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=100, keep=6)])
    graph = agent(model, ac, system=system, extra=[edit])
    run = {"messages": history}
    out = await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
    assert any(text_of(m) == "[cleared]" for m in model.seen[0])  # the edit was sent
    assert not [m.id for m in out["messages"] if text_of(m) == "[cleared]"]
    assert not [m.id for m in out["messages"] if "context_editing" in m.response_metadata]
    assert not find_violations(out["messages"])
    assert_fits(model, ac)
    # the next turn compresses the state's own messages and still fits
    more = {"messages": [HumanMessage("and then?")]}
    out = await graph.ainvoke(more, THREAD) if run_async else graph.invoke(more, THREAD)
    assert not [m.id for m in out["messages"] if text_of(m) == "[cleared]"]
    assert out["messages"][-1].content == "finished"
    assert_fits(model, ac)


class FailsFirst(ReplyModel):
    """A ``ReplyModel`` whose first attempt at each call raises a transient error."""

    attempts: int = 0

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        self.attempts += 1
        if self.attempts % 2:
            raise RuntimeError("503 Service Unavailable")
        return super()._generate(messages, stop, run_manager, **kw)


@pytest.mark.parametrize("run_async", [False, True])
@pytest.mark.parametrize("outer", ["retry", "fallback"])
async def test_a_retried_model_call_fits_its_view_once(outer: str, run_async: bool) -> None:
    """``ModelRetryMiddleware`` / ``ModelFallbackMiddleware`` before ours call its
    ``wrap_model_call`` again when the model raises: a view fitted in the call was fitted
    anew at each attempt, the same messages summarized and offloaded again (with an LLM
    summarizer, paid again), one more compression event and set of offload records per
    attempt."""
    from langchain.agents.middleware import ModelFallbackMiddleware, ModelRetryMiddleware

    def replies(m: list[BaseMessage], n: int) -> AIMessage:
        return AIMessage("finished")

    def run(model: ReplyModel, extra: list[Any]) -> tuple[Any, OffloadStore]:
        ac, _history, system = _fit_setup()
        raw = InMemoryStore()
        return agent(model, ac, raw, system=system, extra=extra), OffloadStore(raw)

    calm, calm_store = run(ReplyModel(reply=replies), [])
    calm.invoke({"messages": _fit_setup()[1]}, THREAD)
    if outer == "retry":
        extra: list[Any] = [
            ModelRetryMiddleware(
                max_retries=2, initial_delay=0, jitter=False, retry_on=(RuntimeError,)
            )
        ]
    else:
        extra = [ModelFallbackMiddleware(ReplyModel(reply=replies))]
    model = FailsFirst(reply=replies)
    graph, store = run(model, extra)
    go = {"messages": _fit_setup()[1]}
    out = await graph.ainvoke(go, THREAD) if run_async else graph.invoke(go, THREAD)
    assert model.attempts >= 1 and out["messages"][-1].content == "finished"
    assert [e.kind for e in store.list_events("t")] == [e.kind for e in calm_store.list_events("t")]
    assert len(store.list_offloads("t")) == len(calm_store.list_offloads("t")) > 0
    assert store.history_count("t") == calm_store.history_count("t")
    assert not find_violations(out["messages"])


def test_the_request_shape_is_stored_as_json_every_backend_takes(tmp_path) -> None:
    """The middleware's record of the request (system prompt, tool schemas) went to the
    store as it came: a lone surrogate in the system prompt stopped the run on SQLite
    ("surrogates not allowed"), and a datetime in its metadata came back a string. It
    is cleaned and encoded as the package's other records are (parity audit)."""
    import datetime as dt

    from conftest import open_sqlite

    store = open_sqlite(tmp_path / "s.db")
    when = dt.datetime(2026, 1, 2, 3, 4, 5)
    system = SystemMessage("You are terse.\ud800 Be brief.", additional_kwargs={"at": when})

    def agent(ac: AutoContext) -> Any:
        model = ReplyModel(reply=steps_then_answer(1))
        return create_agent(
            model, [sh], system_prompt=system, middleware=[ac.middleware()], store=store
        )

    out = agent(AutoContext(CFG, store=store)).invoke({"messages": [HumanMessage("go")]}, THREAD)
    assert out["messages"][-1].content
    again = AutoContext(CFG, store=store).middleware()  # a new process reads the record
    shape = again._shape("t")
    assert shape is not None and shape.system is not None
    assert shape.system.additional_kwargs["at"] == when
    assert "\ud800" not in str(shape.system.content)
    store.conn.close()


@pytest.mark.parametrize("run_async", [False, True])
async def test_the_model_call_measures_the_floor_once(
    run_async: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the package is shown (``disclosure="when_needed"``), wrap_model_call
    measures the floor once per model call (it measured it for ``engaged`` and again in
    ``prepare_model_call``), and the view sends what it sent before."""
    from langchain.agents.middleware import AgentMiddleware

    from langchain_autocontext.engine import ContextEngine

    inside: list[bool] = [False]
    measured: list[int] = []
    floor_tokens = ContextEngine.floor_tokens

    def counting(self: ContextEngine, *args: Any, **kwargs: Any) -> int:
        if inside[0]:
            measured[-1] += 1
        return floor_tokens(self, *args, **kwargs)

    monkeypatch.setattr(ContextEngine, "floor_tokens", counting)

    class Outer(AgentMiddleware):
        def wrap_model_call(self, request, handler):
            inside[0] = True
            measured.append(0)
            try:
                return handler(request)
            finally:
                inside[0] = False

        async def awrap_model_call(self, request, handler):
            inside[0] = True
            measured.append(0)
            try:
                return await handler(request)
            finally:
                inside[0] = False

    ac = AutoContext(AutoContextConfig(max_tokens=8_000, metadata_tags=True))
    model = ReplyModel(reply=steps_then_answer(3, lines=2))
    graph = agent(model, ac, extra=[Outer()])
    go = {"messages": [HumanMessage("go")]}
    out = await graph.ainvoke(go, THREAD) if run_async else graph.invoke(go, THREAD)
    assert out["messages"][-1].content == "done after 3 calls"
    assert measured == [1] * len(model.seen)  # never shown: the floor measured once each
    own = {t.name for t in ac.tools}
    assert not own & {getattr(t, "name", None) for t in model.bound}


def test_a_document_another_middleware_also_writes_to_the_state_is_conversation() -> None:
    """Request-only means the state does not hold the message's id. A document that
    another middleware writes to the state under a stable id (and adds to the request)
    is kept by the checkpoints, so it is a turn of the conversation: archived once,
    one copy in the state, the tool pairs valid."""
    from langchain.agents.middleware import AgentMiddleware

    doc = "Retrieved: the build uses make.\n" + log_text(30, 3)

    class Both(AgentMiddleware):
        def before_model(self, state, runtime):
            return {"messages": [HumanMessage(doc, id="doc-1")]}

        def wrap_model_call(self, request, handler):
            msgs = [m for m in request.messages if m.id != "doc-1"]
            return handler(request.override(messages=[*msgs, HumanMessage(doc, id="doc-1")]))

    ac, store = AutoContext(CFG), InMemoryStore()
    model = ReplyModel(reply=steps_then_answer(8))
    graph = agent(model, ac, store, extra=[Both()])
    out = graph.invoke({"messages": [HumanMessage("Why does the build fail?", id="u0")]}, THREAD)
    assert out["messages"][-1].content == "done after 8 calls"
    archived = [e.message.id for e in ac.resolve_store(store).get_history("t")]
    assert archived.count("doc-1") == 1
    assert sum(text_of(m).startswith("Retrieved:") for m in out["messages"]) == 1
    assert not find_violations(out["messages"])


def test_the_search_tool_counts_an_edited_message_once_and_its_versions_apart() -> None:
    """The search tool's "among N messages" counted every later version of a message
    edited under its id as one more message: a thread of 8 messages, one edited twice
    with ``graph.update_state``, was "among 10 messages"."""
    store = InMemoryStore()
    ac = AutoContext(CFG)
    answers: list[str] = []

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            answers.append(text_of(messages[-1]))
        if text_of(messages[-1]) == "search it":
            return call("search_history", {"query": "codename"}, n)
        return AIMessage("noted")

    graph = agent(ReplyModel(reply=reply), ac, store)
    graph.invoke({"messages": [HumanMessage("codename REDFOX", id="n1")]}, THREAD)
    for word in ("BLUEBIRD", "OSPREY"):
        graph.update_state(THREAD, {"messages": [HumanMessage(f"codename {word}", id="n1")]})
        graph.invoke({"messages": [HumanMessage("go on")]}, THREAD)
    graph.invoke({"messages": [HumanMessage("search it")]}, THREAD)
    # n1 and its reply, two turns of two, the search's turn and call: 8 messages
    assert " among 8 messages and 2 later versions of edited ones, best first" in answers[0]
    assert OffloadStore.wrap(store).history_count("t") >= 10


def test_a_message_edited_back_is_in_context_shortened_as_the_version_updated() -> None:
    """A message edited (``graph.update_state``) to a new content and back to its first
    one, then updated by the model: the update was made of the first content, yet search
    said the later version (the latest the history appended; the content edited back to
    is held already) was "in your context as a shortened version", the first not. The
    rewrite names the version it was made of."""
    store = InMemoryStore()
    ac = AutoContext(CFG.model_copy(update={"metadata_tags": True}))
    answers: list[str] = []

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            answers.append(text_of(messages[-1]))
        said = text_of(messages[-1])
        if said == "rename it":
            return call("update_message", {"message_id": "x", "content": "a codename"}, n)
        if said == "search it":
            return call("search_history", {"query": "codename"}, n)
        return AIMessage("noted")

    graph = agent(ReplyModel(reply=reply), ac, store)
    graph.invoke({"messages": [HumanMessage("codename REDFOX", id="x")]}, THREAD)
    for word in ("BLUEBIRD", "REDFOX"):
        graph.update_state(THREAD, {"messages": [HumanMessage(f"codename {word}", id="x")]})
        graph.invoke({"messages": [HumanMessage("go on")]}, THREAD)
    graph.invoke({"messages": [HumanMessage("rename it")]}, THREAD)
    graph.invoke({"messages": [HumanMessage("search it")]}, THREAD)
    found = re.finditer(r"id=(x\S*) \w+[^,\n]*, position \d+, ([^;\n]+)", answers[-1])
    lines = {m[1]: m[2] for m in found}
    version = next(key for key in lines if key.startswith("x~"))
    assert lines == {
        "x": "in your context as a shortened version",
        version: "not in your context",
    }, answers[-1]
    # edited again to the later content and updated: that version is the one shortened
    graph.update_state(THREAD, {"messages": [HumanMessage("codename BLUEBIRD", id="x")]})
    graph.invoke({"messages": [HumanMessage("rename it")]}, THREAD)
    graph.invoke({"messages": [HumanMessage("search it")]}, THREAD)
    lines = {m[1]: m[2] for m in re.finditer(r"id=(x\S*) [^\n]*, ([^;\n]+)", answers[-1])}
    assert lines == {
        "x": "not in your context",
        version: "in your context as a shortened version",
    }, answers[-1]


@pytest.mark.parametrize("run_async", [False, True])
async def test_a_tool_result_an_outer_middleware_cut_from_its_call_is_not_sent(
    run_async: bool,
) -> None:
    """A middleware before ours (the documented order) that trims the request to its
    last messages (or applies a summary cut-off recorded against older state, as
    deepagents' summarization does once ours has compressed the state) can cut a tool
    call from its result: the view sent what it was handed, an orphan tool result
    first, which providers reject."""
    from langchain.agents.middleware import AgentMiddleware

    class LastFive(AgentMiddleware):
        def wrap_model_call(self, request, handler):
            return handler(request.override(messages=request.messages[-5:]))

        async def awrap_model_call(self, request, handler):
            return await handler(request.override(messages=request.messages[-5:]))

    ac = AutoContext(AutoContextConfig(max_tokens=20_000))
    model = ReplyModel(reply=steps_then_answer(5, lines=3))
    graph = agent(model, ac, extra=[LastFive()])
    run = {"messages": [HumanMessage("go")]}
    out = await graph.ainvoke(run, THREAD) if run_async else graph.invoke(run, THREAD)
    assert out["messages"][-1].content == "done after 5 calls"
    assert any(isinstance(m, ToolMessage) for sent in model.seen for m in sent)
    assert_fits(model, ac)


class _AddState(AgentState):  # messages appended with operator.add, not add_messages
    messages: Annotated[list[AnyMessage], operator.add]


class _PlainState(AgentState):  # messages without a reducer
    messages: list[AnyMessage]


@pytest.mark.parametrize("schema", [_AddState, _PlainState], ids=["operator.add", "no reducer"])
@pytest.mark.parametrize("run_async", [False, True])
async def test_a_state_whose_messages_are_not_kept_by_add_messages_is_refused(
    schema: Any, run_async: bool
) -> None:
    """``create_agent(state_schema=…)`` whose ``messages`` are appended with
    ``operator.add`` (or kept without a reducer) keeps the middleware's
    ``RemoveMessage`` and its copy of each message next to the original: refused with
    the graph surfaces' error naming ``add_messages``, before the model is called with
    such a state (it failed later, archiving, with an unrelated "has no id" error)."""
    ac = AutoContext(CFG)
    model = ReplyModel(reply=steps_then_answer(3))
    graph = create_agent(
        model,
        [sh],
        system_prompt="Be brief.",
        middleware=[ac.middleware()],
        state_schema=schema,
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    inp = {"messages": [HumanMessage("fix the build")]}
    with pytest.raises(ValueError, match="reducer") as refused:
        await graph.ainvoke(inp, THREAD) if run_async else graph.invoke(inp, THREAD)
    assert "add_messages" in str(refused.value)
    assert not model.seen


# --- LangChain's SummarizationMiddleware beside the package --------------------------------------
class LongSummaries(BaseChatModel):
    """A summarizer for ``SummarizationMiddleware``: a long summary (more than the budget)."""

    @property
    def _llm_type(self) -> str:
        return "long-summaries"

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        summary = "Summary ZEBRA of the work so far.\n" + log_text(150)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(summary))])


@pytest.mark.parametrize("run_async", [False, True])
async def test_a_summarization_middleware_summary_is_not_a_user_turn(run_async: bool) -> None:
    """``SummarizationMiddleware`` before ours writes its summary as a ``HumanMessage``
    (``additional_kwargs={"lc_source": "summarization"}``). The package took it for a
    user turn: once it had summarized the user's request away (mid tool loop) it became
    the latest user message, never compressed, and a summary larger than the budget
    stopped the run with a ContextBudgetError naming "the latest user message"; it was
    archived, found under ``speaker="user"`` and reloaded as the user's words. It is
    compressed like any other message now, and stays searchable and reloadable, as a
    summary (role ``system``), not as the user's."""
    from langchain.agents.middleware import SummarizationMiddleware

    reload: list[str] = []

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if text_of(messages[-1]) == "reload it":
            return call("reload_offloaded", {"offload_id": reload[0]}, n)
        if isinstance(messages[-1], ToolMessage) and messages[-1].name == "reload_offloaded":
            return AIMessage("reloaded")
        if n % 3 == 2:
            return AIMessage(f"answer {n}")
        return call("sh", {"command": f"make {n}", "lines": 5}, n)

    ac = AutoContext(AutoContextConfig(max_tokens=3000))
    raw = InMemoryStore()
    model = ReplyModel(reply=reply)
    lc = SummarizationMiddleware(
        model=LongSummaries(), trigger=("messages", 6), keep=("messages", 2)
    )
    graph = agent(model, ac, raw, extra=[lc])

    async def ask(text: str) -> list[BaseMessage]:
        go = {"messages": [HumanMessage(text)]}
        out = await graph.ainvoke(go, THREAD) if run_async else graph.invoke(go, THREAD)
        return out["messages"]

    for question in ("question alpha", "question beta"):
        assert text_of((await ask(question))[-1]).startswith("answer")
    assert_fits(model, ac)
    store = OffloadStore(raw)
    (hit, *_) = search_history(store, "t", "ZEBRA")
    assert hit.role == "system" and "ZEBRA" in hit.snippet  # found, not as the user's words
    said = [h.snippet for h in search_history(store, "t", "question ZEBRA", speaker="user")]
    assert said and all("ZEBRA" not in s for s in said), said
    # compressed like any message: the model reloads it, as the summary it is
    reload.extend(
        r.offload_id for r in store.list_offloads("t") if any(m.id == hit.id for m in r.messages)
    )
    assert reload
    await ask("reload it")
    shown = text_of(model.seen[-1][-1])
    assert f"system id={hit.id}" in shown and "ZEBRA" in shown, shown


# --- plan notes (TodoListMiddleware) ------------------------------------------------------------
def _todos(version: int, items: int = 6) -> list[dict[str, str]]:
    return [
        {"content": f"plan v{version} step {k}: PLAN{version}-ITEM{k}", "status": "pending"}
        for k in range(items)
    ]


def _planning_reply(plans: int, steps: int, items: int = 6) -> Reply:
    """``write_todos`` with a new plan, then ``steps`` shell commands, ``plans`` times."""

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        version, k = divmod(n, steps + 1)
        if version >= plans:
            return AIMessage("all done")
        if k == 0:
            return call("write_todos", {"todos": _todos(version, items)}, n)
        return call("sh", {"command": f"make {n}", "lines": 40}, n)

    return reply


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_latest_todo_list_stays_in_view_through_compactions(mode: str) -> None:
    """TodoListMiddleware never puts ``state["todos"]`` in the prompt: the model sees its
    plan only in its latest ``write_todos`` call. That call stays verbatim through every
    compaction, while the plans it superseded are compressed."""
    from langchain.agents.middleware import TodoListMiddleware

    ac, store = AutoContext(CFG), InMemoryStore()
    model = ReplyModel(reply=_planning_reply(plans=3, steps=10))
    graph = create_agent(
        model,
        [sh],
        system_prompt="Be brief.",
        middleware=[TodoListMiddleware(), ac.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    go = {"messages": [HumanMessage("fix the build")]}
    if mode == "sync":
        graph.invoke(go, THREAD)
    else:
        asyncio.run(graph.ainvoke(go, THREAD))
    assert_fits(model, ac)
    events = OffloadStore.wrap(store).list_events("t")
    assert len(events) >= 3  # several compactions
    last = "\n".join(f"{text_of(m)} {getattr(m, 'tool_calls', '')}" for m in model.seen[-1])
    for k in range(6):  # the current plan, whole
        assert f"PLAN2-ITEM{k}" in last
    for old in (0, 1):  # the superseded plans, not verbatim
        assert f"PLAN{old}-ITEM5" not in last
    # while a plan was current, every request showed it whole
    for n, sent in enumerate(model.seen):
        version = min(n // 11, 2) if n % 11 else (n // 11) - 1
        if version < 0:
            continue
        shown = "\n".join(f"{text_of(m)} {getattr(m, 'tool_calls', '')}" for m in sent)
        assert f"PLAN{version}-ITEM5" in shown, n


def test_a_todo_list_larger_than_the_pin_room_is_compressed_without_error() -> None:
    """A plan note that does not fit the room pins may take is not kept: it is
    compressed as any other tool call, and no ContextBudgetError is raised."""
    from langchain.agents.middleware import TodoListMiddleware

    ac = AutoContext(CFG.model_copy(update={"pin_max_tokens": 60}))
    model = ReplyModel(reply=_planning_reply(plans=2, steps=10, items=12))
    graph = create_agent(
        model,
        [sh],
        system_prompt="Be brief.",
        middleware=[TodoListMiddleware(), ac.middleware()],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    out = graph.invoke({"messages": [HumanMessage("fix the build")]}, THREAD)
    assert text_of(out["messages"][-1]) == "all done"
    assert_fits(model, ac)
    last = "\n".join(f"{text_of(m)} {getattr(m, 'tool_calls', '')}" for m in model.seen[-1])
    assert "PLAN1-ITEM11" not in last  # too large to keep: compressed as before


SCREENSHOT = b64(png_image(1280, 800))
#: What Claude bills a 1280x800 image: 1280 * 800 / 750 (no scaling below 1568 pixels).
CLAUDE_SCREENSHOT = math.ceil(1280 * 800 / 750)


@tool
def screenshot(step: int) -> list[dict[str, Any]]:
    """Take a screenshot of the browser."""
    return [
        {"type": "text", "text": f"Screenshot after step {step}."},
        {"type": "image", "base64": SCREENSHOT, "mime_type": "image/png"},
    ]


REPORT = b64(pdf_document(3, object_stream=True))
#: What Claude bills a 3-page PDF, its pages' text and images (its PDF docs: "3-page
#: PDF ... approximately 7,000 tokens").
CLAUDE_REPORT = 7000


@tool
def read_report(quarter: int) -> list[dict[str, Any]]:
    """Fetch a quarterly report (a PDF)."""
    return [
        {"type": "text", "text": f"Report for Q{quarter}."},
        {"type": "file", "base64": REPORT, "mime_type": "application/pdf"},
    ]


def billed_by_provider(
    ac: AutoContext, sent: list[BaseMessage], tools: list[Any], kind: str, cost: int
) -> int:
    """The request's tokens with each ``kind`` block billed ``cost`` as the provider
    bills it, its text as the counter."""
    blocks = 0
    plain: list[BaseMessage] = []
    for m in sent:
        if isinstance(m.content, list):
            kept = [b for b in m.content if not (isinstance(b, dict) and b.get("type") == kind)]
            blocks += len(m.content) - len(kept)
            m = m.model_copy(update={"content": kept})
        plain.append(m)
    return ac.counter.count(plain, tools) + blocks * cost


def check_media_agent(
    fetch: Any,
    args: Callable[[int], dict[str, Any]],
    kind: str,
    cost: int,
    max_tokens: int,
    calls: int = 8,
) -> None:
    """A ``create_agent`` run at ``max_tokens`` whose tool ``fetch`` returns a ``kind``
    block the provider bills ``cost``, called ``calls`` times: every request fits by the
    provider's count, and the latest block is still shown."""
    ac = AutoContext(CFG.model_copy(update={"max_tokens": max_tokens}))

    def reply(messages: list[BaseMessage], n: int) -> AIMessage:
        if n < calls:
            return call(fetch.name, args(n), n)
        return AIMessage("done")

    model = ReplyModel(reply=reply)
    graph = create_agent(
        model,
        [fetch],
        system_prompt="Work through what the tool returns.",
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    graph.invoke({"messages": [HumanMessage("Go through all of them.")]}, THREAD)
    assert len(model.seen) == calls + 1
    assert any(
        isinstance(b, dict) and b.get("type") == kind
        for m in model.seen[-1]
        if isinstance(m.content, list)
        for b in m.content
    )  # the latest one is still shown
    for sent in model.seen:
        assert billed_by_provider(ac, sent, model.bound, kind, cost) <= ac.config.max_tokens


def test_an_agent_reading_pdfs_stays_within_the_budget() -> None:
    """A document agent whose tool returns 3-page PDFs: each counted 85 tokens while
    Claude bills ~7,000, so with a 20,000-token budget the fourth report took the
    requests past the budget by the provider's count, and compression never ran. A PDF
    now counts by its pages: every request fits by that count, the latest report is
    still shown and the earlier ones are offloaded (reloadable)."""
    check_media_agent(read_report, lambda n: {"quarter": n % 4 + 1}, "file", CLAUDE_REPORT, 20_000)


VOICE_NOTE = b64(wav_audio(60))
#: What Gemini bills a minute of audio: 32 tokens a second ("Understand and count tokens").
GEMINI_VOICE_NOTE = 60 * 32


@tool
def play_voicemail(index: int) -> list[dict[str, Any]]:
    """Fetch a voicemail (a minute of audio)."""
    # a ``file`` block: a tool's list content keeps text, image, document and file
    # blocks (LangGraph's ToolNode turns a list with an ``audio`` block into its JSON)
    return [
        {"type": "text", "text": f"Voicemail {index}."},
        {"type": "file", "base64": VOICE_NOTE, "mime_type": "audio/wav"},
    ]


def test_an_agent_listening_to_voice_notes_stays_within_the_budget() -> None:
    """A voice agent whose tool returns one-minute voice notes: each counted 85 tokens
    while Gemini bills 1,920, so with an 8,000-token budget the requests went past the
    budget by the provider's count. A recording now counts by its duration (read from
    its header): every request fits by that count."""
    check_media_agent(play_voicemail, lambda n: {"index": n}, "file", GEMINI_VOICE_NOTE, 8000)


def test_a_computer_use_agent_sending_screenshots_stays_within_the_budget() -> None:
    """A browser agent whose tool returns 1280x800 screenshots: each counted 85 tokens
    while Claude bills ~1,366, so with an 8,000-token budget the requests went over
    the budget by the provider's count. Every request now fits by that count."""
    check_media_agent(screenshot, lambda n: {"step": n}, "image", CLAUDE_SCREENSHOT, 8000, 12)
