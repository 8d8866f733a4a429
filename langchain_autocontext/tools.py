"""The model's tools for managing its own context (``AutoContext.tools``).

Seven LangChain tools (``AutoContext.all_tools``; those that name a message by the id
its metadata tag shows, ``update_message``, ``delete_message`` and ``pin_message``,
are offered with the tags only), each with a strict argument schema (unknown arguments are
rejected) and a ``ToolRuntime`` parameter that LangGraph injects (graph state,
store, config, tool call id). Each returns a ``Command`` whose update carries the
``ToolMessage`` answering the call, plus the edit of the working messages or of
the working context:

- ``update_message(message_id, content)`` and ``delete_message(message_id)``
  edit the working messages (graph state ``messages``); the original history in
  the store stays append-only and every edit is recorded as an event;
  ``pin_message(message_id, pinned=True)`` keeps a message from every strategy;
- ``reload_offloaded(offload_id, offset=0, restore=False)`` returns offloaded
  originals (or any history message by id), truncated to the free budget with a
  note saying how to read on; ``restore=True`` puts them back when they fit;
- ``search_history(query, limit=5, speaker, after, before)`` ranks the thread's
  complete history, optionally of one speaker and a time range
  (:mod:`langchain_autocontext.search`);
- ``working_context_append(text)`` and ``working_context_replace(old, new)`` edit
  the MemGPT working context (``state["autocontext"]["working_context"]``),
  limited to ``config.working_context_max_chars``.

Bad input never raises: it is answered with a ``ToolMessage`` with
``status="error"`` that says what to do instead, and the state stays as it was.
Several of these tools may be called in parallel in one turn; edits of the same
message by two calls of one turn, and two working-context edits in one turn, are
refused after the first (LangGraph applies parallel updates in no fixed order).

Over 600 lines because it defines seven tools, each with its argument schema, its checks
and its error messages for the model, around one shared call context (``_Call``); the
reload tool alone (truncation, offsets, restore) is about 200 lines.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from langchain_autocontext.commands import Edit, delete_op, diff_updates, pin_op, update_op
from langchain_autocontext.engine import thread_id_of
from langchain_autocontext.errors import AmbiguousOffloadRefError, OffloadNotFoundError
from langchain_autocontext.messages import (
    find_violations,
    is_pinned,
    latest_user_index,
    marker,
    pin,
    pinned_tokens,
    remove_all,
    speaker_role,
    text_of,
    tool_call_ids,
)
from langchain_autocontext.metadata import as_shown
from langchain_autocontext.search import (
    HistorySize,
    SearchFilter,
    asearch_history_sized,
    format_hits,
    mark_in_context,
    search_history_sized,
)
from langchain_autocontext.store import OffloadRecord, OffloadStore, offload_ref, running_agent
from langchain_autocontext.view import instructions_text, normalize_state, resolve_message_ref

if TYPE_CHECKING:
    from langchain_autocontext.engine import ContextEngine

__all__ = [
    "EDIT_TOOLS",
    "TOOL_NAMES",
    "WORKING_CONTEXT_TOOLS",
    "attach_tools",
    "make_tools",
]

TOOL_NAMES = (
    "update_message",
    "delete_message",
    "pin_message",
    "reload_offloaded",
    "search_history",
    "working_context_append",
    "working_context_replace",
)
EDIT_TOOLS = frozenset({"update_message", "delete_message", "pin_message", "reload_offloaded"})
WORKING_CONTEXT_TOOLS = frozenset({"working_context_append", "working_context_replace"})

_STRICT = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


# --- argument schemas (``runtime`` is injected by LangGraph and hidden from the model) ------
class UpdateMessageArgs(BaseModel):
    """Arguments of update_message."""

    model_config = _STRICT
    message_id: str = Field(
        description='Id of the message to change, as its <metadata id="…"/> tag shows it.'
    )
    content: str = Field(
        description="The complete new content. It replaces the old content entirely."
    )
    runtime: ToolRuntime


class PinMessageArgs(BaseModel):
    """Arguments of pin_message."""

    model_config = _STRICT
    message_id: str = Field(description="Id of the message to pin, as its tag shows it.")
    pinned: bool = Field(True, description="False to unpin it.")
    runtime: ToolRuntime


class DeleteMessageArgs(BaseModel):
    """Arguments of delete_message."""

    model_config = _STRICT
    message_id: str = Field(
        description='Id of the message to remove, as its <metadata id="…"/> tag shows it.'
    )
    runtime: ToolRuntime


class ReloadOffloadedArgs(BaseModel):
    """Arguments of reload_offloaded."""

    model_config = _STRICT
    offload_id: str = Field(
        description="An offload id shown in your context (in a marker or summary), or a "
        "message id returned by search_history."
    )
    offset: int = Field(
        0,
        ge=0,
        description="Character offset to continue reading from (the note of a truncated "
        "result gives it).",
    )
    restore: bool = Field(
        False,
        description="Also put the originals back into your context in place of their "
        "summary or preview, if they fit in the budget.",
    )
    runtime: ToolRuntime


class SearchHistoryArgs(BaseModel):
    """Arguments of search_history."""

    model_config = _STRICT
    query: str = Field(
        "", description="Keywords or an exact identifier (id, path, key, error text) to find."
    )
    limit: int = Field(5, ge=1, le=50, description="How many results to return, best first.")
    speaker: str = ""
    after: str = ""
    before: str = ""
    runtime: ToolRuntime


class WorkingContextAppendArgs(BaseModel):
    """Arguments of working_context_append."""

    model_config = _STRICT
    text: str = Field(description="Text to add at the end of your working context.")
    runtime: ToolRuntime


class WorkingContextReplaceArgs(BaseModel):
    """Arguments of working_context_replace."""

    model_config = _STRICT
    old: str = Field(
        description="Text now in your working context, copied exactly; it must occur once."
    )
    new: str = Field(description="Text to put in its place (empty to remove it).")
    runtime: ToolRuntime


_DESCRIPTIONS = {
    "update_message": (
        "Replace the content of a message in your context, keeping its id and role. Use it "
        "to shrink what you no longer need in full (for example a long tool output you "
        "have already used) to the part that still matters. The original stays in the "
        "history. The system message, the latest user message and the message making this "
        "call cannot be changed."
    ),
    "delete_message": (
        "Remove a message from your context. Deleting a message that called tools also "
        "removes their results; to drop a single tool result, shorten it with "
        "update_message instead. The original stays in the history (search_history finds "
        "it). The system message, the latest user message and the message making this "
        "call cannot be deleted."
    ),
    "reload_offloaded": (
        "Read content that is no longer in your context in full: pass an offload id shown "
        "in a marker or summary, or a message id from search_history. Long content is cut "
        "to what fits; the note says which offset to pass to read on. With restore=true the "
        "originals are also put back into your context in place of their summary or "
        "preview, when they fit."
    ),
    "pin_message": (
        "Pin a message so that it stays in your context verbatim: no summary, offload or "
        "eviction touches it (the task statement, a constraint, a plan). Pins together may "
        "take a limited number of tokens; pinned=false unpins."
    ),
    "search_history": (
        "Search the complete history of this conversation, including messages no longer "
        "in your context, by keywords or an exact identifier. Filters: speaker (a name, "
        "user, assistant or tool), after and before (ISO dates or times, UTC, inclusive); "
        "with one the query may be empty (newest first). Returns message ids, speakers, "
        "times, positions and snippets, best first; reload_offloaded(id) returns a message "
        "in full."
    ),
    "working_context_append": (
        "Add text to your working context: a size-limited notepad that always stays in "
        "view, even when older messages are summarized. Save there the task, decisions, "
        "key facts and identifiers you must not lose."
    ),
    "working_context_replace": (
        "Replace text in your working context: old must match exactly one place (copy it "
        "from the working-context block); new may be empty to remove it. Use it to update "
        "or make room in your notes."
    ),
}


# --- runtime helpers ----------------------------------------------------------------------------
def _get(state: Any, key: str, default: Any = None) -> Any:
    if isinstance(state, Mapping):
        return state.get(key, default)
    return getattr(state, key, default)


class _Call:
    """What a tool call sees: working messages, state, thread, store, the issuing message."""

    def __init__(self, engine: ContextEngine, runtime: ToolRuntime, name: str) -> None:
        self.engine = engine
        self.name = name
        state = runtime.state
        self.messages: list[BaseMessage] = list(_get(state, "messages") or [])
        raw_ac = _get(state, "autocontext")
        self.has_ac_key = raw_ac is not None
        self.ac = normalize_state(raw_ac)
        self.call_id = str(runtime.tool_call_id or "")
        # the tool schemas sent with each request: the agent's (the runtime knows them)
        # and the ones AutoContext was told about
        known = list(engine.count_tools)
        names = {getattr(t, "name", None) for t in known}
        names |= {t.name for t in engine.all_tools}  # registered, not offered now: not sent
        extra = [t for t in (getattr(runtime, "tools", None) or []) if t.name not in names]
        self.schemas: list[Any] = known + extra
        config = runtime.config or {}
        self.thread_id = thread_id_of(
            config, raw_ac if isinstance(raw_ac, Mapping) else None, self.messages
        )
        # the graph's store only when AutoContext has none: the surfaces archive to
        # AutoContext's own store first, and the tools must read where they wrote
        self.store: OffloadStore = engine.resolve_store(graph_store=runtime.store)
        #: updates to apply before this call's own (a context rewrite that made room)
        self.room: list[Any] = []
        self.issuing: AIMessage | None = next(
            (
                m
                for m in reversed(self.messages)
                if isinstance(m, AIMessage) and self.call_id in tool_call_ids(m)
            ),
            None,
        )

    @property
    def issuing_id(self) -> str | None:
        return str(self.issuing.id) if self.issuing is not None and self.issuing.id else None

    def earlier_calls(self, names: frozenset[str] | set[str]) -> list[ToolCall]:
        """Calls of the same turn, before this one, to any of ``names``."""
        if self.issuing is None:
            return []
        out = []
        for tc in self.issuing.tool_calls:
            if tc.get("id") == self.call_id:
                break
            if tc.get("name") in names:
                out.append(tc)
        return out

    def with_earlier_pins(self) -> list[BaseMessage]:
        """The working messages with the pins of earlier calls of this turn applied: the
        pin limit counts them (two parallel pins, each within the limit alone, took the
        pins past it together, and every later model call raised ContextBudgetError)."""
        msgs = list(self.messages)
        for tc in self.earlier_calls({"pin_message"}):
            args = tc.get("args") or {}
            if not bool(args.get("pinned", True)):
                continue
            edit = pin_op(
                msgs,
                args.get("message_id"),
                True,
                counter=self.engine.counter,
                limit=self.engine.config.pin_limit,
            )
            if edit.ok:
                msgs = edit.messages
        return msgs

    def claimed(self) -> set[str]:
        """Message ids edited (updated, deleted, pinned) by earlier calls of this turn:
        LangGraph applies parallel updates in no fixed order, so a message is edited
        once per turn."""
        ids: set[str] = set()
        for tc in self.earlier_calls({"update_message", "delete_message", "pin_message"}):
            args = tc.get("args") or {}
            if tc["name"] == "delete_message":
                edit = delete_op(self.messages, args.get("message_id"), issuing_id=self.issuing_id)
            elif tc["name"] == "pin_message":
                edit = pin_op(
                    self.messages,
                    args.get("message_id"),
                    bool(args.get("pinned", True)),
                    counter=self.engine.counter,
                    limit=self.engine.config.pin_limit,
                )
            else:
                edit = update_op(
                    self.messages,
                    args.get("message_id"),
                    args.get("content"),
                    issuing_id=self.issuing_id,
                    counter=self.engine.counter,
                    pin_limit=self.engine.config.pin_limit,
                )
            if edit.ok:
                ids.update(str(m.id) for m in edit.originals)
        return ids

    def reply(self, text: str, *, error: bool = False, updates: Sequence[Any] = ()) -> Command:
        tm = ToolMessage(
            text,
            tool_call_id=self.call_id,
            name=self.name,
            status="error" if error else "success",
        )
        if self.room and updates:
            # the list was rewritten (compressed first): apply the updates to it here, as
            # add_messages would, since everything after REMOVE_ALL is taken literally (a
            # restored original would otherwise sit beside its preview under one id)
            # langgraph annotates add_messages with an invariant list of message-likes
            merged = add_messages(list(self.messages), list(updates))  # type: ignore[arg-type]
            return Command(update={"messages": [remove_all(), *merged, tm]})
        return Command(update={"messages": [*self.room, *updates, tm]})

    def make_room(self, messages: list[BaseMessage]) -> None:
        """Continue with ``messages`` (compressed) in place of the working messages."""
        self.messages = messages
        self.room = [remove_all(), *messages]

    def lacks_room(self, tokens: int) -> bool:
        """Whether ``tokens`` more would push the context past the compression trigger,
        when compressing now is safe (this is the only call of its turn).

        The next model call would compress anyway, and might compress this call's
        result before the model reads it; compressing first keeps the result whole.
        """
        return self.alone and tokens > self.room_tokens()

    def room_tokens(self) -> int:
        """Tokens a result can take before the context passes the compression trigger
        (other results of the same turn not counted)."""
        return max(0, self.trigger_tokens - self.used_tokens() - _MESSAGE_OVERHEAD)

    def compress_first(self) -> None:
        """Compress the working messages now (see :meth:`lacks_room`)."""
        done = self.engine.compress(
            self.messages, thread_id=self.thread_id, store=self.store, state=self.ac, force=True
        )
        self.make_room(done.messages)

    async def acompress_first(self) -> None:
        """Async twin of :meth:`compress_first`."""
        done = await self.engine.acompress(
            self.messages, thread_id=self.thread_id, store=self.store, state=self.ac, force=True
        )
        self.make_room(done.messages)

    @property
    def alone(self) -> bool:
        """Whether this is the only tool call of its turn (a rewrite of the list is safe)."""
        return self.issuing is not None and len(self.issuing.tool_calls) == 1

    def error(self, text: str) -> Command:
        return self.reply(text, error=True)

    @property
    def trigger_tokens(self) -> int:
        """Tokens above which the next model call compresses (the view's reserve taken
        off; see :meth:`AutoContextConfig.thresholds`)."""
        engine = self.engine
        shown = engine.view_config(self.messages, self.ac, self.schemas)
        return engine.trigger_tokens(self.messages, self.ac, shown, self.schemas)

    def used_tokens(self, messages: Sequence[BaseMessage] | None = None) -> int:
        """Tokens of the view of ``messages`` (default: the working messages)."""
        engine = self.engine
        msgs = self.messages if messages is None else messages
        extra = instructions_text(engine.config, self.ac)
        # a system prompt the agent adds after this package runs (none in the messages)
        has_system = bool(msgs) and isinstance(msgs[0], SystemMessage)
        agent_prompt = engine.system_prompt if not has_system else None
        return (
            engine.counter.count(
                as_shown(msgs, engine.config.tags_mode), self.schemas, tags=engine.config.tags_mode
            )
            + (engine.counter.count_text(extra) + 8 if extra else 0)
            + (engine.counter.count_text(agent_prompt) + 4 if agent_prompt else 0)
        )


# --- update / delete ---------------------------------------------------------------------------
def _edit_result(call: _Call, edit: Edit) -> tuple[Command | None, list[BaseMessage]]:
    if not edit.ok:
        return call.error(edit.text), []
    if edit.event is None:  # nothing changed
        return call.reply(edit.text), []
    overlap = call.claimed() & {str(m.id) for m in edit.originals}
    if overlap:
        return (
            call.error(
                f"Message(s) {', '.join(sorted(overlap))} are already edited by an earlier call "
                "of this turn; nothing was done. Edit each message once per turn."
            ),
            [],
        )
    return None, edit.originals


def _copies_note(offload_ids: Sequence[str]) -> str:
    """What an answer adds to name the offloads of the edited working copies an edit or a
    restore kept (:meth:`~langchain_autocontext.engine.ContextEngine.keep_edited`)."""
    if not offload_ids:
        return ""
    refs = ", ".join(f'reload_offloaded(offload_id="{offload_ref(oid)}")' for oid in offload_ids)
    return f" The text it had, edited since the history kept it, is offloaded: {refs}."


def _with_copies(edit: Edit, offload_ids: Sequence[str]) -> Edit:
    """The edit's answer, naming the offloads of the edited working copies it kept."""
    if not offload_ids:
        return edit
    return dataclasses.replace(edit, text=edit.text + _copies_note(offload_ids))


def _structured(func: Any, coroutine: Any, name: str, schema: type[BaseModel]) -> StructuredTool:
    """A tool of the package: sync and async bodies, its description and strict schema."""
    return StructuredTool.from_function(
        func=func,
        coroutine=coroutine,
        name=name,
        description=_DESCRIPTIONS[name],
        args_schema=schema,
    )


def _edit_tool(engine: ContextEngine, name: str) -> StructuredTool:
    def run_op(call: _Call, message_id: str, content: Any) -> Edit:
        if name == "delete_message":
            return delete_op(call.messages, message_id, issuing_id=call.issuing_id)
        # the pin limit counts the pins of earlier calls of the turn; the edit then
        # changes only its own message (the earlier calls write their own pins)
        base = call.with_earlier_pins()
        if name == "pin_message":  # ``content`` is the pinned flag
            edit = pin_op(
                base,
                message_id,
                bool(content),
                counter=engine.counter,
                limit=engine.config.pin_limit,
            )
        else:
            edit = update_op(
                base,
                message_id,
                content,
                issuing_id=call.issuing_id,
                counter=engine.counter,
                pin_limit=engine.config.pin_limit,
            )
        if all(a is b for a, b in zip(base, call.messages, strict=True)):
            return edit  # no earlier pins this turn
        if len(edit.messages) != len(base):  # pragma: no cover - pins and updates keep places
            return edit
        own = [
            new if new is not was else mine
            for mine, was, new in zip(call.messages, base, edit.messages, strict=True)
        ]
        return dataclasses.replace(edit, messages=own)

    def finish(call: _Call, edit: Edit) -> Command:
        return call.reply(edit.text, updates=diff_updates(call.messages, edit.messages))

    def sync(runtime: ToolRuntime, message_id: str, content: Any = None) -> Command:
        call = _Call(engine, runtime, name)
        edit = run_op(call, message_id, content)
        early, originals = _edit_result(call, edit)
        if early is not None:
            return early
        engine.archive(call.messages, thread_id=call.thread_id, store=call.store)
        engine.archive(originals, thread_id=call.thread_id, store=call.store)
        copies = engine.keep_edited(originals, thread_id=call.thread_id, store=call.store)
        call.store.record_event(
            call.thread_id, {**(edit.event or {}), "tool_call_id": call.call_id}
        )
        return finish(call, _with_copies(edit, copies))

    async def asyn(runtime: ToolRuntime, message_id: str, content: Any = None) -> Command:
        call = _Call(engine, runtime, name)
        edit = run_op(call, message_id, content)
        early, originals = _edit_result(call, edit)
        if early is not None:
            return early
        await engine.aarchive(call.messages, thread_id=call.thread_id, store=call.store)
        await engine.aarchive(originals, thread_id=call.thread_id, store=call.store)
        copies = await engine.akeep_edited(originals, thread_id=call.thread_id, store=call.store)
        await call.store.arecord_event(
            call.thread_id, {**(edit.event or {}), "tool_call_id": call.call_id}
        )
        return finish(call, _with_copies(edit, copies))

    if name == "update_message":

        def update_message(message_id: str, content: str, runtime: ToolRuntime) -> Command:
            return sync(runtime, message_id, content)

        async def aupdate_message(message_id: str, content: str, runtime: ToolRuntime) -> Command:
            return await asyn(runtime, message_id, content)

        return _structured(update_message, aupdate_message, name, UpdateMessageArgs)

    if name == "pin_message":

        def pin_message(message_id: str, runtime: ToolRuntime, pinned: bool = True) -> Command:
            return sync(runtime, message_id, pinned)

        async def apin_message(
            message_id: str, runtime: ToolRuntime, pinned: bool = True
        ) -> Command:
            return await asyn(runtime, message_id, pinned)

        return _structured(pin_message, apin_message, name, PinMessageArgs)

    def delete_message(message_id: str, runtime: ToolRuntime) -> Command:
        return sync(runtime, message_id)

    async def adelete_message(message_id: str, runtime: ToolRuntime) -> Command:
        return await asyn(runtime, message_id)

    return _structured(delete_message, adelete_message, name, DeleteMessageArgs)


# --- reload_offloaded ----------------------------------------------------------------------------
#: Tokens of a tool message beyond its content: role/name overhead and its metadata tag.
_MESSAGE_OVERHEAD = 64
_TRUNCATION_NOTE = (
    "\n[truncated to fit your context budget: characters 1,000,000-1,000,000 of 1,000,000 "
    'shown; call reload_offloaded(offload_id="{ref}", offset=1000000) to read on]'
)


def _render_message(m: BaseMessage, n: int, total: int) -> str:
    role = speaker_role(m.type, m.additional_kwargs)
    head = f"--- message {n}/{total}: {role} id={m.id}"
    if isinstance(m, ToolMessage):
        head += f" (result of {m.name or 'tool'} call {m.tool_call_id})"
    lines = [head]
    text = text_of(m)
    if text:
        lines.append(text)
    if isinstance(m, AIMessage):
        for tc in m.tool_calls:
            args = json.dumps(tc.get("args", {}), ensure_ascii=False, default=str)
            lines.append(f"[tool call {tc.get('id')}: {tc.get('name')}({args})]")
    return "\n".join(lines)


def _originals(record: OffloadRecord | None, entry_msg: BaseMessage | None) -> list[BaseMessage]:
    """What a reload shows: the offload's original messages, or the one history message."""
    if record is not None:
        return list(record.messages)
    assert entry_msg is not None
    return [entry_msg]


def _render_record(
    record: OffloadRecord | None, entry_msg: BaseMessage | None, seq: int | None
) -> str:
    if record is not None:
        msgs = list(record.messages)
        head = (
            f"[offload {record.offload_id}: {len(msgs)} original message(s), {record.tokens:,} tokens, "
            f"moved out by {record.strategy}]"
        )
    else:
        msgs = _originals(record, entry_msg)
        head = f"[history message {msgs[0].id}, position {seq}]"
    body = "\n".join(_render_message(m, i, len(msgs)) for i, m in enumerate(msgs, 1))
    return f"{head}\n{body}"


def _cut(engine: ContextEngine, text: str, offset: int, budget: int) -> tuple[str, int | None]:
    """``text[offset:]`` cut to ``budget`` tokens; returns the part and the next offset."""
    rest = text[offset:]
    count = engine.counter.count_text
    if count(rest) <= budget:
        return rest, None
    lo, hi = 0, len(rest)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(rest[:mid]) <= budget:
            lo = mid
        else:
            hi = mid
    nl = rest.rfind("\n", 0, lo)
    if nl > lo * 0.8:
        lo = nl + 1
    lo = max(lo, 1)
    return rest[:lo], offset + lo


def _restore_plan(
    call: _Call, record: OffloadRecord | None, entry_msg: BaseMessage | None
) -> tuple[list[BaseMessage] | None, bool, str]:
    """The working messages with the originals back, whether that needs a full rewrite, or why not."""
    msgs = call.messages
    by_id = {m.id: i for i, m in enumerate(msgs)}
    if record is None:
        assert entry_msg is not None
        i = by_id.get(entry_msg.id)
        if i is None:
            return (
                None,
                False,
                (
                    "it is not in your context any more (it was summarized with others); restore "
                    "the offload id named by that summary instead"
                ),
            )
        if msgs[i].content == entry_msg.content and type(msgs[i]) is type(entry_msg):
            return None, False, "it is already in your context unchanged"
        new = list(msgs)
        new[i] = pin(entry_msg, is_pinned(msgs[i]))  # a pin stays where it was
        return new, False, ""
    originals = list(record.messages)
    holders = [
        i for i, m in enumerate(msgs) if (marker(m) or {}).get("offload_id") == record.offload_id
    ]
    if not holders:
        return (
            None,
            False,
            (
                "its summary or preview is no longer in your context (it was compressed again); "
                "restore the offload id named by the newer summary instead"
            ),
        )
    if all(o.id in by_id for o in originals) and {msgs[by_id[o.id]].id for o in originals} >= {
        msgs[i].id for i in holders
    }:
        new = list(msgs)
        for o in originals:
            new[by_id[o.id]] = pin(o, is_pinned(msgs[by_id[o.id]]))
        return new, False, ""
    if len(holders) != 1 or any(o.id in by_id for o in originals):
        return None, False, "its originals overlap messages already in your context"
    if call.issuing is not None and len(call.issuing.tool_calls) > 1:
        return (
            None,
            False,
            (
                "restoring a span rewrites your context, which cannot be done while other tools "
                "run in the same turn; call reload_offloaded with restore=true on its own"
            ),
        )
    i = holders[0]
    back = [pin(o, is_pinned(msgs[i])) for o in originals]  # a pinned summary's originals too
    return [*msgs[:i], *back, *msgs[i + 1 :]], True, ""


@dataclasses.dataclass(frozen=True)
class _Restored:
    """A restore ``reload_offloaded`` will apply: its answer, the updates, its event and
    the working copies it replaces (kept first when the history does not hold them)."""

    text: str
    updates: list[Any]
    event: dict[str, Any]
    replaced: list[BaseMessage]


#: What the model can do when ``reload_offloaded`` finds nothing under the id it passed.
_MODEL_RELOAD_ADVICE = (
    "Use an offload id exactly as it appears in the context (for example "
    "reload_offloaded(offload_id=\"9f3c2a1b\") in an '[Offloaded …]' note), or "
    "search_history to find the original."
)


def _reload_tool(engine: ContextEngine) -> StructuredTool:
    def lookup_error(ref: str) -> str:
        return str(OffloadNotFoundError(ref, advice=_MODEL_RELOAD_ADVICE))

    def respond(
        call: _Call,
        ref: str,
        offset: int,
        restore: bool,
        record: OffloadRecord | None,
        entry: Any,
    ) -> Command | _Restored:
        """The answer, or the restore to apply."""
        entry_msg = entry.message if entry is not None else None
        seq = entry.seq if entry is not None else None
        full = _render_record(record, entry_msg, seq)
        cfg = engine.config
        if offset > len(full):
            return call.error(
                f"offset {offset} is past the end: the content has {len(full):,} characters."
            )
        note = ""
        if restore:
            if offset:
                return call.error("restore=true reads from the start: pass offset=0.")
            if entry is not None and entry.version_of is not None:  # back under the working id
                entry_msg = entry.message.model_copy(update={"id": entry.version_of})
            new, rewrite, why = _restore_plan(call, record, entry_msg)
            if new is not None:
                lu_old, lu_new = latest_user_index(call.messages), latest_user_index(new)
                problems = find_violations(new)
                same_user = (lu_old is None) or (
                    lu_new is not None and new[lu_new].id == call.messages[lu_old].id
                )
                first_ok = (
                    not (call.messages and isinstance(call.messages[0], SystemMessage))
                    or new[0] is call.messages[0]
                )
                if problems or not same_user or not first_ok:
                    why = "putting them back would leave an invalid sequence of messages"
                    new = None
            if new is not None and len(new) + 1 > cfg.msg_threshold:
                why = (
                    f"your context would hold {len(new) + 1} messages, over the "
                    f"{cfg.msg_threshold} that trigger compression; delete messages first, or "
                    "read it here"
                )
                new = None
            if new is not None:
                pinned_after = pinned_tokens(new, engine.counter)
                if pinned_after > cfg.pin_limit and pinned_after > pinned_tokens(
                    call.messages, engine.counter
                ):
                    why = (
                        f"the pinned messages would take {pinned_after:,} tokens, over the pin "
                        f"limit of {cfg.pin_limit:,}; unpin it first (pin_message with "
                        "pinned=false), or read it here"
                    )
                    new = None
            if new is not None:
                need = call.used_tokens(new)
                if need > call.trigger_tokens:
                    why = (
                        f"your context would count {need:,} tokens, over the {call.trigger_tokens:,} "
                        "that trigger compression; delete or shorten messages first, or read it "
                        "here"
                    )
                    new = None
            if new is not None:
                count = len(record.messages) if record is not None else 1
                event: dict[str, Any] = {
                    "kind": "context_edit",
                    "strategy": "tool:restore",
                    "op": "restore",
                    "via": "tool",
                    "offload_id": record.offload_id if record is not None else None,
                    "message_ids": [str(m.id) for m in _originals(record, entry_msg)],
                    "tool_call_id": call.call_id,
                }
                claimed = call.claimed()
                if claimed & set(event["message_ids"]):
                    return call.error(
                        "Those messages are already edited by an earlier call of this turn."
                    )
                if rewrite:
                    updates: list[Any] = [remove_all(), *new]
                else:
                    updates = diff_updates(call.messages, new)
                text = (
                    f"Restored {count} original message(s) of {ref} into your context, where "
                    "their summary or preview was; read them there."
                )
                ids = set(event["message_ids"])
                replaced = [m for m in call.messages if str(m.id) in ids]
                return _Restored(text, updates, event, replaced)
            note = f"\n[not restored: {why}]"
        # What fits before the next model call would compress: a larger result would be
        # offloaded again before the model reads it. The note, the tool message's own
        # overhead and its metadata tag are kept free too.
        used = call.used_tokens()
        overhead = engine.counter.count_text(_TRUNCATION_NOTE.format(ref=ref) + note)
        overhead += _MESSAGE_OVERHEAD
        budget = call.trigger_tokens - used - overhead
        if budget < 32:
            return call.error(
                f"Your context is too full to show it: {used:,} tokens, and compression starts "
                f"at {call.trigger_tokens:,}. Make room first (delete_message, or shorten "
                "messages with update_message), or find the part you need with search_history."
            )
        part, next_offset = _cut(engine, full, offset, budget)
        if next_offset is not None:
            note = (
                f"\n[truncated to fit your context budget: characters {offset:,}-{next_offset:,} "
                f'of {len(full):,} shown; call reload_offloaded(offload_id="{ref}", '
                f"offset={next_offset}) to read on]" + note
            )
        elif offset:
            note = f"\n[characters {offset:,}-{len(full):,} of {len(full):,}: the end]" + note
        return call.reply(part + note)

    def restored(call: _Call, restore: _Restored, copies: Sequence[str]) -> Command:
        return call.reply(restore.text + _copies_note(copies), updates=restore.updates)

    def in_view(call: _Call, exc: AmbiguousOffloadRefError) -> str | None:
        """Of the offloads a shortened id starts, the one the context shows (the
        model read the id there), if exactly one."""
        shown = {(marker(m) or {}).get("offload_id") for m in call.messages}
        picked = [oid for oid in exc.offload_ids if oid in shown]
        return picked[0] if len(picked) == 1 else None

    def find_sync(call: _Call, ref: str) -> tuple[OffloadRecord | None, Any]:
        try:
            return call.store.reload(call.thread_id, ref), None
        except AmbiguousOffloadRefError as exc:
            if (picked := in_view(call, exc)) is None:
                raise
            return call.store.reload(call.thread_id, picked), None
        except OffloadNotFoundError:
            pass
        entry = call.store.get_history_message(call.thread_id, ref)
        if entry is None:
            idx, _ = resolve_message_ref(call.messages, ref)
            if idx is not None and call.messages[idx].id != ref:
                entry = call.store.get_history_message(call.thread_id, str(call.messages[idx].id))
        return None, entry

    async def find_async(call: _Call, ref: str) -> tuple[OffloadRecord | None, Any]:
        try:
            return await call.store.areload(call.thread_id, ref), None
        except AmbiguousOffloadRefError as exc:
            if (picked := in_view(call, exc)) is None:
                raise
            return await call.store.areload(call.thread_id, picked), None
        except OffloadNotFoundError:
            pass
        entry = await call.store.aget_history_message(call.thread_id, ref)
        if entry is None:
            idx, _ = resolve_message_ref(call.messages, ref)
            if idx is not None and call.messages[idx].id != ref:
                entry = await call.store.aget_history_message(
                    call.thread_id, str(call.messages[idx].id)
                )
        return None, entry

    def needs_room(
        call: _Call, ref: str, offset: int, restore: bool, record: Any, entry: Any
    ) -> bool:
        """Too little room to show much, or to put the originals back: compress first
        (only when it is safe). A restore needs room for all of its originals; if the
        compression takes their preview or summary away, they are shown instead."""
        if not call.alone:
            return False
        full = _render_record(
            record, entry.message if entry else None, entry.seq if entry else None
        )
        if restore and not offset:
            return call.lacks_room(engine.counter.count_text(full))
        want = min(engine.counter.count_text(full[offset:]), 512)
        return call.lacks_room(want + engine.counter.count_text(_TRUNCATION_NOTE.format(ref=ref)))

    def check(ref: Any) -> str | None:
        if not isinstance(ref, str) or not ref.strip():
            return "No offload id given: pass an offload id shown in your context or a message id from search_history."
        return None

    def reload_offloaded(
        offload_id: str, runtime: ToolRuntime, offset: int = 0, restore: bool = False
    ) -> Command:
        call = _Call(engine, runtime, "reload_offloaded")
        bad = check(offload_id)
        if bad:
            return call.error(bad)
        ref = offload_id.strip().strip("\"'`")
        engine.archive(call.messages, thread_id=call.thread_id, store=call.store)
        try:
            record, entry = find_sync(call, ref)
        except AmbiguousOffloadRefError as exc:
            return call.error(str(exc))
        if record is None and entry is None:
            return call.error(lookup_error(ref))
        if needs_room(call, ref, offset, restore, record, entry):
            call.compress_first()
        out = respond(call, ref, offset, restore, record, entry)
        if isinstance(out, Command):
            return out
        # the working copies it replaces, when the history does not hold them (the
        # model's own update of the message): offloaded first, as before an edit
        copies = engine.keep_edited(out.replaced, thread_id=call.thread_id, store=call.store)
        call.store.record_event(call.thread_id, out.event)
        return restored(call, out, copies)

    async def areload_offloaded(
        offload_id: str, runtime: ToolRuntime, offset: int = 0, restore: bool = False
    ) -> Command:
        call = _Call(engine, runtime, "reload_offloaded")
        bad = check(offload_id)
        if bad:
            return call.error(bad)
        ref = offload_id.strip().strip("\"'`")
        await engine.aarchive(call.messages, thread_id=call.thread_id, store=call.store)
        try:
            record, entry = await find_async(call, ref)
        except AmbiguousOffloadRefError as exc:
            return call.error(str(exc))
        if record is None and entry is None:
            return call.error(lookup_error(ref))
        if needs_room(call, ref, offset, restore, record, entry):
            await call.acompress_first()
        out = respond(call, ref, offset, restore, record, entry)
        if isinstance(out, Command):
            return out
        copies = await engine.akeep_edited(out.replaced, thread_id=call.thread_id, store=call.store)
        await call.store.arecord_event(call.thread_id, out.event)
        return restored(call, out, copies)

    return StructuredTool.from_function(
        func=reload_offloaded,
        coroutine=areload_offloaded,
        name="reload_offloaded",
        description=_DESCRIPTIONS["reload_offloaded"],
        args_schema=ReloadOffloadedArgs,
    )


# --- search_history ------------------------------------------------------------------------------
#: A search query is a few keywords or an identifier: a longer one (a pasted document)
#: is answered with an error instead of echoing it into the context (issue 13).
_MAX_QUERY_CHARS = 1_000


def _search_tool(engine: ContextEngine) -> StructuredTool:
    def parse(query: Any, speaker: Any, after: Any, before: Any) -> SearchFilter | str:
        """The filters, or the error to answer with."""
        try:
            filters = SearchFilter.parse(speaker, after, before)
        except ValueError as exc:
            return str(exc)
        if not isinstance(query, str) or (not query.strip() and not filters):
            return (
                "The query is empty: give keywords or an exact identifier to search for, "
                "or a speaker, after or before filter."
            )
        if len(query) > _MAX_QUERY_CHARS:
            return (
                f"The query has {len(query):,} characters, more than {_MAX_QUERY_CHARS:,}: "
                "search for a few keywords or one identifier, not a whole text."
            )
        return filters

    def foreign(hits: list[Any]) -> list[Any]:
        """The hits, naming the agent only of another agent's messages (a subagent that
        shares this thread archives into its history): the searching agent's own, and
        those of a thread with no named agent, read as before."""
        me = running_agent()
        return [dataclasses.replace(h, agent=None) if h.agent == me else h for h in hits]

    def fitted(
        call: _Call,
        query: str,
        hits: list[Any],
        total: HistorySize,
        filters: Any,
        text: str | None,
    ) -> str:
        """The result with as many hits, best first, as the room under the trigger takes
        (at least one): a result past the trigger would itself be offloaded by the next
        model call, and the model would read a preview of its own search. ``text``: the
        result with every hit, when already rendered for these hits."""
        room = call.room_tokens()
        shown = len(hits)
        if text is None:
            text = format_hits(query, hits, total, filters)
        while shown > 1 and engine.counter.count_text(text) > room:
            shown -= 1
            text = format_hits(query, hits[:shown], total, filters, more=len(hits) - shown)
        return text

    def finish(call: _Call, query: str, hits: list[Any], total: HistorySize, filters: Any) -> str:
        text: str | None
        text = format_hits(query, hits, total, filters)
        if call.lacks_room(engine.counter.count_text(text)):
            call.compress_first()
            hits, text = mark_in_context(hits, call.messages), None  # "in your context" changed
        return fitted(call, query, hits, total, filters, text)

    async def afinish(
        call: _Call, query: str, hits: list[Any], total: HistorySize, filters: Any
    ) -> str:
        text: str | None
        text = format_hits(query, hits, total, filters)
        if call.lacks_room(engine.counter.count_text(text)):
            await call.acompress_first()
            hits, text = mark_in_context(hits, call.messages), None  # "in your context" changed
        return fitted(call, query, hits, total, filters, text)

    def search(
        runtime: ToolRuntime,
        query: str = "",
        limit: int = 5,
        speaker: str = "",
        after: str = "",
        before: str = "",
    ) -> Command:
        call = _Call(engine, runtime, "search_history")
        filters = parse(query, speaker, after, before)
        if isinstance(filters, str):
            return call.error(filters)
        engine.archive(call.messages, thread_id=call.thread_id, store=call.store)
        try:
            hits, total = search_history_sized(
                call.store,
                call.thread_id,
                query,
                limit,
                working=call.messages,
                exclude=[call.issuing_id] if call.issuing_id else [],
                speaker=speaker,
                after=after,
                before=before,
                language=engine.config.search_language,
            )
        except ValueError as exc:  # a speaker of no message
            return call.error(str(exc))
        return call.reply(finish(call, query.strip(), foreign(hits), total, filters))

    async def asearch(
        runtime: ToolRuntime,
        query: str = "",
        limit: int = 5,
        speaker: str = "",
        after: str = "",
        before: str = "",
    ) -> Command:
        call = _Call(engine, runtime, "search_history")
        filters = parse(query, speaker, after, before)
        if isinstance(filters, str):
            return call.error(filters)
        await engine.aarchive(call.messages, thread_id=call.thread_id, store=call.store)
        try:
            hits, total = await asearch_history_sized(
                call.store,
                call.thread_id,
                query,
                limit,
                working=call.messages,
                exclude=[call.issuing_id] if call.issuing_id else [],
                speaker=speaker,
                after=after,
                before=before,
                language=engine.config.search_language,
            )
        except ValueError as exc:  # a speaker of no message
            return call.error(str(exc))
        return call.reply(await afinish(call, query.strip(), foreign(hits), total, filters))

    return StructuredTool.from_function(
        func=search,
        coroutine=asearch,
        name="search_history",
        description=_DESCRIPTIONS["search_history"],
        args_schema=SearchHistoryArgs,
    )


# --- working context -----------------------------------------------------------------------------
_warned_no_state_key = False


def _wc_plan(
    engine: ContextEngine, current: str, op: str, a: Any, b: Any = None
) -> tuple[str, str]:
    """``(new working context, "")`` for a working-context edit of ``current``, or
    ``("", why it is refused)``: what :func:`_wc_edit` applies, and how it judges the
    earlier calls of a turn."""
    limit = engine.config.working_context_max_chars
    if op == "append":
        if not isinstance(a, str) or not a.strip():
            return "", "Nothing to append: text is empty."
        new = f"{current}\n{a.strip()}" if current else a.strip()
    else:
        if not isinstance(a, str) or not a:
            return "", (
                "old is empty: copy the exact text to replace from your working context "
                "(to add text, use working_context_append)."
            )
        if not isinstance(b, str):
            return "", "new must be a string (empty to remove the old text)."
        # every place it starts, overlapping ones too: it must name exactly one
        found = sum(current.startswith(a, i) for i in range(len(current) - len(a) + 1))
        if found == 0:
            return "", (
                "old was not found in your working context; it must match exactly, including "
                "spaces and line breaks. Copy it from the working-context block."
            )
        if found > 1:
            return "", (
                f"old occurs {found} times in your working context; include more of the "
                "surrounding text so that it matches exactly one place."
            )
        new = current.replace(a, b, 1)
    # An edit that does not grow an over-limit working context (one written before the
    # limits were lowered: a smaller max_tokens or working_context_max_chars after a
    # restart) is applied: refusing it left the model no way to make the room it was
    # told to make.
    if len(new) > limit and len(new) > len(current):
        return "", (
            f"Not applied: your working context would hold {len(new):,} characters, over its "
            f"limit of {limit:,} (it holds {len(current):,} now). Make room first with "
            "working_context_replace (shorten or remove entries), then try again with less text."
        )
    # Always in view and never compressed: like pins, at most an eighth of the window in
    # tokens (the character limit alone let a Japanese note fill a 6,000-token budget).
    token_limit = engine.config.working_context_token_limit
    tokens = engine.counter.count_text(new)
    if tokens > token_limit and tokens > engine.counter.count_text(current):
        return "", (
            f"Not applied: your working context would take {tokens:,} tokens, over its limit "
            f"of {token_limit:,} (an eighth of your {engine.config.max_tokens:,}-token "
            "context). Keep it to the essentials: shorten or remove entries with "
            "working_context_replace, then add less text."
        )
    return new, ""


def _wc_args(name: str, args: Mapping[str, Any]) -> tuple[str, Any, Any]:
    """``(op, a, b)`` of a working-context tool call's arguments, as :func:`_wc_plan`
    takes them."""
    if name == "working_context_append":
        return "append", args.get("text"), None
    return "replace", args.get("old"), args.get("new")


def _wc_edit(
    engine: ContextEngine, call: _Call, op: str, a: Any, b: Any = None
) -> tuple[Command, dict[str, Any] | None]:
    """The tool's answer, and the event to record when the edit is applied."""
    global _warned_no_state_key
    if not call.has_ac_key:
        # The package's node, hook and middleware write the key (its working context)
        # before the model's first call: a state without it is a schema without it, and
        # LangGraph would drop the edit without a word.
        if not _warned_no_state_key:
            _warned_no_state_key = True
            warnings.warn(
                "langchain-autocontext: the graph state has no 'autocontext' key, so the "
                "model's working-context edits cannot be kept; they are refused, and the "
                "model is told so. Use AutoContextAgentState as create_react_agent's "
                "state_schema, AutoContextState for a StateGraph, or add "
                "`autocontext: Annotated[dict, merge_autocontext]` to your state (and call "
                "the model through the package's node, pre_model_hook or middleware).",
                stacklevel=2,
            )
        return call.error(
            "Not applied: this agent's state has no place for your working context (its "
            "developer must add the package's 'autocontext' state key), so nothing you "
            "write there would be kept. Keep what matters in your replies instead."
        ), None
    limit = engine.config.working_context_max_chars
    current = str(call.ac.get("working_context") or "")
    # LangGraph applies the state updates of parallel calls in no fixed order, each over
    # the same working context: one edit per turn is applied, the first one that is
    # applied (an earlier call that was refused leaves this one to be judged on its own)
    if any(
        _wc_plan(engine, current, *_wc_args(str(tc.get("name")), tc.get("args") or {}))[0]
        for tc in call.earlier_calls(WORKING_CONTEXT_TOOLS)
    ):
        return call.error(
            "Only one working-context edit per turn is applied, and an earlier call of this "
            "turn already edits it; this one was not applied. Repeat it on your next turn."
        ), None
    new, refused = _wc_plan(engine, current, op, a, b)
    if refused:
        return call.error(refused), None
    token_limit = engine.config.working_context_token_limit
    tokens = engine.counter.count_text(new)
    state = {**call.ac, "working_context": new}
    over = len(new) > limit or tokens > token_limit
    tm = ToolMessage(
        f"Working context updated: {len(new):,}/{limit:,} characters."
        + (" It is still over its limit: shorten or remove more entries." if over else ""),
        tool_call_id=call.call_id,
        name=call.name,
    )
    event = {
        "kind": "context_edit",
        "strategy": f"tool:{call.name}",
        "op": call.name,
        "via": "tool",
        "message_ids": [],
        "chars_before": len(current),
        "chars_after": len(new),
        "tool_call_id": call.call_id,
    }
    return Command(update={"messages": [tm], "autocontext": state}), event


def _wc_tools(engine: ContextEngine) -> list[StructuredTool]:
    def run(runtime: ToolRuntime, name: str, *args: Any) -> tuple[_Call, Command, Any]:
        call = _Call(engine, runtime, name)
        op = "append" if name == "working_context_append" else "replace"
        return call, *_wc_edit(engine, call, op, *args)

    def sync(runtime: ToolRuntime, name: str, *args: Any) -> Command:
        call, answer, event = run(runtime, name, *args)
        if event is not None:
            call.store.record_event(call.thread_id, event)
        return answer

    async def asyn(runtime: ToolRuntime, name: str, *args: Any) -> Command:
        call, answer, event = run(runtime, name, *args)
        if event is not None:
            await call.store.arecord_event(call.thread_id, event)
        return answer

    def working_context_append(text: str, runtime: ToolRuntime) -> Command:
        return sync(runtime, "working_context_append", text)

    async def aworking_context_append(text: str, runtime: ToolRuntime) -> Command:
        return await asyn(runtime, "working_context_append", text)

    def working_context_replace(old: str, new: str, runtime: ToolRuntime) -> Command:
        return sync(runtime, "working_context_replace", old, new)

    async def aworking_context_replace(old: str, new: str, runtime: ToolRuntime) -> Command:
        return await asyn(runtime, "working_context_replace", old, new)

    return [
        StructuredTool.from_function(
            func=working_context_append,
            coroutine=aworking_context_append,
            name="working_context_append",
            description=_DESCRIPTIONS["working_context_append"],
            args_schema=WorkingContextAppendArgs,
        ),
        StructuredTool.from_function(
            func=working_context_replace,
            coroutine=aworking_context_replace,
            name="working_context_replace",
            description=_DESCRIPTIONS["working_context_replace"],
            args_schema=WorkingContextReplaceArgs,
        ),
    ]


#: JSON schema of the plain argument types, for compact schemas (no bounds shown).
_PLAIN_TYPES: dict[Any, dict[str, str]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    bool: {"type": "boolean"},
}


@functools.cache
def _compact_args(schema: Any) -> Any:
    """``schema`` as the model sees it without descriptions, defaults and bounds (names,
    types and which are required); validation keeps the same defaults and constraints.
    Built once per schema class (pydantic's ``create_model`` took ~7 ms per tool, 48 ms
    of every ``AutoContext`` built); the classes are the module's own, so it stays small."""
    fields: dict[str, Any] = {}
    for name, info in schema.model_fields.items():
        copy = info._copy() if hasattr(info, "_copy") else FieldInfo.merge_field_infos(info)
        copy.description = None
        plain = _PLAIN_TYPES.get(info.annotation)
        if plain is not None:
            if not info.is_required() and info.default_factory is None:
                # a factory's value is not written into the JSON schema
                copy.default_factory = functools.partial(_same, info.default)
                copy.default = PydanticUndefined
            if info.metadata:  # ge/le bounds: validated, not shown
                copy.metadata = [*info.metadata, WithJsonSchema(plain)]
        fields[name] = (info.annotation, copy)
    return create_model(schema.__name__, __config__=_STRICT, **fields)


def _same(value: Any) -> Any:
    return value


def make_tools(engine: ContextEngine) -> list[BaseTool]:
    """The seven tools bound to ``engine`` (its config, counter and store)."""
    tools: list[BaseTool] = [
        _edit_tool(engine, "update_message"),
        _edit_tool(engine, "delete_message"),
        _edit_tool(engine, "pin_message"),
        _reload_tool(engine),
        _search_tool(engine),
        *_wc_tools(engine),
    ]
    if engine.config.instructions == "compact":
        for tool in tools:
            tool.description = ""  # the names say it; markers show the calls to make
            if isinstance(tool.args_schema, type):  # the module's own classes, all of them
                tool.args_schema = _compact_args(tool.args_schema)
    return tools


def attach_tools(engine: ContextEngine) -> ContextEngine:
    """Give ``engine`` the model's tools (``engine.tools``, counted in its budget) and
    return it: for a surface that builds its own engine (the middleware from keyword
    arguments, the chat history without one). :class:`~langchain_autocontext.AutoContext`
    has them by its class."""
    engine.tool_factory = make_tools
    return engine
