"""Message helpers: serialization, ids, markers, rounds, tool-call pairs, invariants.

Everything here is pure (no I/O) and shared by the engine, the strategies, the
store, the tools and the replay.

Over 600 lines because the design's layering names this the one module of pure message
helpers that every layer imports (content blocks as text, ids, markers, rounds, tool
pairs, invariants, sanitizing), and the keys this package writes into a message (its
marker, the pin, the context-edit flag) are one vocabulary with the helpers that read
them; each helper is short, and a split would add modules to that layering for no
concept of their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import random
import re
import uuid
import weakref
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from langchain_autocontext.errors import InvariantViolationError

__all__ = [
    "AC_KEY",
    "AUTONOMOUS_KEY",
    "COMPACTION_BLOCK_TYPE",
    "EDIT_KEY",
    "FOREIGN_SUMMARY_KWARGS",
    "LEADING_BLOCK_TYPES",
    "PIN_KEY",
    "REASONING_BLOCK_TYPES",
    "TOOL_CALL_BLOCK_TYPES",
    "UUID4_RE",
    "assert_valid_sequence",
    "atomic_groups",
    "autonomous_steps",
    "carries_compaction",
    "clean_text",
    "content_hash",
    "context_edit",
    "dump_message",
    "dump_messages",
    "ensure_ids",
    "find_violations",
    "group_start",
    "is_context_edit",
    "is_foreign_summary",
    "is_pinned",
    "is_real_user",
    "is_user_turn",
    "latest_plan_note",
    "latest_user_index",
    "leading_blocks",
    "load_message",
    "load_messages",
    "mark",
    "marker",
    "message_chars",
    "new_id",
    "new_uuid",
    "open_loop_index",
    "pending_call_index",
    "pin",
    "pinned_group_indices",
    "pinned_tokens",
    "remove_all",
    "repair_tool_pairs",
    "result_tool_name",
    "round_starts",
    "sanitize_message",
    "seeded_ids",
    "sent_calls",
    "speaker_role",
    "state_messages",
    "text_of",
    "tool_call_ids",
    "tool_call_names",
]

#: A uuid4 as ``str(uuid.uuid4())`` writes it (either case): the random ids LangGraph
#: gives messages and the package gives offloads, which the context may show shortened.
UUID4_RE = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", re.IGNORECASE
)

#: Key in ``additional_kwargs`` of every message this package writes (summaries,
#: previews, notices). Plain JSON, so checkpoints hold no custom classes.
AC_KEY = "autocontext"

#: Key in ``additional_kwargs`` that pins a message: no strategy summarizes,
#: offloads, masks or evicts a pinned message (nor the tool calls/results paired with it).
PIN_KEY = "autocontext_pinned"


#: Key in ``additional_kwargs`` of a working copy this package rewrote as a context edit
#: (the model's update command, a reply whose XML commands became receipts): the
#: original was archived first and the edit recorded as an event, so the history does
#: not keep the rewrite as a later version of the message (as it keeps an edit made
#: outside the package, e.g. ``graph.update_state`` with the message's id). Its value
#: is a digest of what the edit wrote: a copy edited since (a developer's
#: ``model_copy`` of it, which keeps ``additional_kwargs``) is no longer the package's.
EDIT_KEY = "autocontext_edited"


#: Key in ``additional_kwargs`` of a user message a ``<user>`` command supplied: its
#: step number in the autonomous run (1, 2, …). Kept on the message, which every surface
#: keeps (a graph state without the package's ``autocontext`` key included), so the step
#: limit holds everywhere. Not :data:`AC_KEY`: the message is the user's request the model
#: works on (the latest user message), not something the package adds to the view.
AUTONOMOUS_KEY = "autocontext_autonomous_step"


def content_hash(value: Any) -> int:
    """A hash of ``value`` (message content: str, blocks, their nested dicts and lists;
    a message's tool calls) through its values, for in-process memos of what a message
    holds: a str caches its hash, so a block's payload (a screenshot's base64) costs one
    pass the first time and nothing after, where its ``repr`` or JSON was rendered whole
    on every call. Other values are hashed with their type (``1``, ``1.0`` and ``True``,
    equal in Python, are different JSON); numbers by their text (CPython hashes ``-1``
    and ``-2`` alike, and integers ``2**61 - 1`` apart); unhashable ones (a set, an
    object of a provider's) as they print."""
    if isinstance(value, str):
        return hash(value)
    if isinstance(value, dict):
        return hash(tuple((k, content_hash(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return hash((type(value) is tuple, *map(content_hash, value)))
    if isinstance(value, int | float):
        return hash((type(value), repr(value)))
    try:
        return hash((type(value), value))
    except TypeError:
        return hash(repr(value))


def is_pinned(message: BaseMessage) -> bool:
    """Whether ``message`` is pinned (see :data:`PIN_KEY`)."""
    return bool(message.additional_kwargs.get(PIN_KEY))


_M = TypeVar("_M", bound=BaseMessage)


def pin(message: _M, pinned: bool = True) -> _M:
    """Return a copy of ``message`` with its pin set (or cleared); same id and type."""
    extra = dict(message.additional_kwargs)
    if pinned:
        extra[PIN_KEY] = True
    else:
        extra.pop(PIN_KEY, None)
    return message.model_copy(update={"additional_kwargs": extra})


def _edit_digest(message: BaseMessage) -> str:
    """What a context edit wrote (type, content, tool calls), as a short digest."""
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    held = json.dumps(
        [message.type, message.content, calls], sort_keys=True, ensure_ascii=False, default=str
    )
    return hashlib.sha256(held.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def is_context_edit(message: BaseMessage) -> bool:
    """Whether ``message`` is this package's rewrite of a working copy, as the package
    wrote it (see :data:`EDIT_KEY`)."""
    flag = message.additional_kwargs.get(EDIT_KEY)
    return isinstance(flag, str) and flag == _edit_digest(message)


def is_rewrite(message: BaseMessage) -> bool:
    """Whether ``message`` is this package's rewrite of a working copy under its id (a
    preview, a summary: a marker with a ``kind``; the model's update: a context edit)."""
    return bool((marker(message) or {}).get("kind")) or is_context_edit(message)


def context_edit(message: _M, **update: Any) -> _M:
    """``message`` with ``update`` applied, flagged as this package's context edit
    (:data:`EDIT_KEY`, with the digest of what it holds); same id and type."""
    edited = message.model_copy(update=update)
    extra = {**message.additional_kwargs, EDIT_KEY: _edit_digest(edited)}
    return edited.model_copy(update={"additional_kwargs": extra})


# --- serialization --------------------------------------------------------------
def dump_message(message: BaseMessage) -> dict[str, Any]:
    """Serialize with LangChain's own message dict format (lossless round-trip)."""
    return message_to_dict(message)


def load_message(data: dict[str, Any]) -> BaseMessage:
    """Inverse of :func:`dump_message`."""
    return messages_from_dict([data])[0]


def dump_messages(messages: Iterable[BaseMessage]) -> list[dict[str, Any]]:
    """Serialize many messages (see :func:`dump_message`)."""
    return [message_to_dict(m) for m in messages]


def load_messages(data: Iterable[dict[str, Any]]) -> list[BaseMessage]:
    """Inverse of :func:`dump_messages`."""
    return messages_from_dict(list(data))


# --- ids and markers --------------------------------------------------------------
#: The seeded generator :func:`seeded_ids` puts in place for the current context (None:
#: random uuid4s). A ContextVar, so one override is scoped to its block, its thread and
#: its asyncio task, and follows into the workers that copy the context.
_SEEDED_IDS: contextvars.ContextVar[random.Random | None] = contextvars.ContextVar(
    "langchain_autocontext_seeded_ids", default=None
)


def new_uuid() -> uuid.UUID:
    """A fresh uuid4: every random id the package draws (message ids, offload ids, event
    keys, run threads) comes from here. Unguessable (``uuid.uuid4``), except inside
    :func:`seeded_ids`, where it is the next of a fixed sequence."""
    rng = _SEEDED_IDS.get()
    if rng is None:
        return uuid.uuid4()
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def new_id() -> str:
    """A fresh, unguessable id (uuid4), the form LangGraph gives messages (see
    :func:`new_uuid`)."""
    return str(new_uuid())


@contextlib.contextmanager
def seeded_ids(seed: int = 0) -> Iterator[None]:
    """Within the block, the package's own ids (:func:`new_uuid`: offload ids, ids of
    the messages it writes, event keys) are one fixed sequence of valid uuid4s, drawn
    from ``random.Random(seed)``; outside it they are random again.

    Offload ids are shown in the context and a uuid's token count varies, so two runs
    of the same input differ by a few tokens with random ids; the replay runs each
    trajectory under a seed so the same input gives the same report. The override is
    scoped to the current context (thread, asyncio task, and the workers the package
    starts with a copy of it); ids LangChain and LangGraph draw are left alone. Not
    for production: seeded ids are guessable.
    """
    token = _SEEDED_IDS.set(random.Random(seed))
    try:
        yield
    finally:
        _SEEDED_IDS.reset(token)


#: The namespace of the ids :func:`ensure_ids` derives (uuid5).
_DERIVED_IDS = uuid.UUID("0d4c6c53-5b0e-4a43-9a4c-7f1f3a0c2e61")


def derived_id(previous: str, message: BaseMessage) -> str:
    """The id :func:`ensure_ids` gives ``message`` when it has none: a uuid5 of the id
    of the message before it (``previous``) and of its own kind and content. The same
    message after the same messages gets the same id on every call; two messages differ
    in id as soon as they or anything before them differ."""
    body = json.dumps(
        [
            previous,
            message.type,
            message.content,
            message.name,
            getattr(message, "tool_call_id", None),
            getattr(message, "tool_calls", None),
        ],
        default=str,
        sort_keys=True,
    )
    return str(uuid.uuid5(_DERIVED_IDS, body))


def ensure_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Return the messages with an id on each; a message lacking one (or repeating an
    id seen earlier in the list: hostile or buggy input) gets a copy with the
    :func:`derived_id` of its place and content.

    Derived, not random: a caller who passes the same id-less list again (plain
    ``compress`` on a list it keeps itself, a node that prepares the same messages twice)
    gets the same ids, so nothing is archived twice under two ids.

    A ``RemoveMessage`` keeps its id: it names the message to delete, not itself (the
    error that refuses it must name the id the caller gave).
    """
    seen: set[str] = set()
    out: list[BaseMessage] = []
    previous = ""
    for m in messages:
        if isinstance(m, RemoveMessage):
            out.append(m)
            continue
        if not m.id or m.id in seen:
            mid = derived_id(previous, m)
            m = m.model_copy(update={"id": mid if mid not in seen else new_id()})
        seen.add(m.id)  # type: ignore[arg-type]
        previous = m.id  # type: ignore[assignment]
        out.append(m)
    return out


_REDUCER_HELP = (
    "The package's surfaces on a graph state (ac.node(), the hooks, ac.model_node(), "
    "ac.command_node(), ac.middleware()) replace and edit the state's messages by id "
    "with RemoveMessage, "
    "which only LangGraph's add_messages reducer applies: declare the key as "
    "`messages: Annotated[list[AnyMessage], add_messages]` (MessagesState, "
    "AutoContextState), not with operator.add or without a reducer."
)


def state_messages(state: Mapping[str, Any], *, required: bool = False) -> list[Any]:
    """The state's ``messages``, checked for what only a reducer other than LangGraph's
    ``add_messages`` leaves in it.

    ``add_messages`` applies a ``RemoveMessage`` and merges a message written again under
    its id, so a state it keeps never holds a ``RemoveMessage`` and never holds a message
    without an id next to the copy the package wrote of it with its derived id. Another
    reducer (``operator.add``) or none keeps both, and the model would see the
    conversation twice: refused with a ``ValueError`` naming the cause. Every surface
    that reads a graph state's messages (the graph nodes and hooks, the agent
    middleware) reads them through this one check.

    ``required``: the state must have the key (the model node: a state whose messages
    live under another name would send the model nothing).
    """
    if required and "messages" not in state:
        raise ValueError(
            "langchain-autocontext: the graph state has no 'messages' key (its keys: "
            f"{sorted(state)}). The package's graph surfaces read and write the "
            "conversation under `messages`; name your key so, or manage another key in a "
            "node of your own with ac.compress(…) and ac.prepare_model_call(…)."
        )
    messages = list(state.get("messages") or [])
    removal = next((m for m in messages if isinstance(m, RemoveMessage)), None)
    if removal is not None:
        raise ValueError(
            f"langchain-autocontext: the state's messages hold a RemoveMessage "
            f"(id={removal.id!r}): its reducer kept the deletion as a message instead of "
            f"applying it. {_REDUCER_HELP}"
        )
    if not all(isinstance(m, BaseMessage) and m.id for m in messages):
        given = [m for m in messages if isinstance(m, BaseMessage)]
        ids = {m.id for m in given if m.id}
        if any(not g.id and f.id in ids for g, f in zip(given, ensure_ids(given), strict=True)):
            raise ValueError(
                "langchain-autocontext: the state's messages hold a message twice, once "
                "without an id and once with the id the package gave it: its reducer "
                f"appended the package's write instead of merging it by id. {_REDUCER_HELP}"
            )
    return messages


def mark(message: BaseMessage, kind: str, **info: Any) -> BaseMessage:
    """Return ``message`` marked as written by this package (``kind`` + JSON info)."""
    extra = dict(message.additional_kwargs)
    extra[AC_KEY] = {"kind": kind, **info}
    return message.model_copy(update={"additional_kwargs": extra})


def remove_all() -> RemoveMessage:
    """LangGraph's "remove every message" sentinel, marked as the package's (a UI that
    skips what the package writes, by ``additional_kwargs["autocontext"]``, skips it
    too in ``stream_mode="messages"``)."""
    return mark(RemoveMessage(id=REMOVE_ALL_MESSAGES), "remove_all")  # type: ignore[return-value]


def marker(message: BaseMessage) -> dict[str, Any] | None:
    """The package's marker of a message (``{"kind": …, …}``) or ``None``."""
    value = message.additional_kwargs.get(AC_KEY)
    return value if isinstance(value, dict) else None


#: ``additional_kwargs`` entries by which another library marks the summary it writes in
#: the user role: LangChain's ``SummarizationMiddleware`` (``langchain.agents.middleware``)
#: writes ``HumanMessage("Here is a summary of the conversation to date: …",
#: additional_kwargs={"lc_source": "summarization"})`` in place of the messages it removed.
#: (LangMem's ``summarize_messages``/``SummarizationNode`` write theirs as a system message.)
FOREIGN_SUMMARY_KWARGS: Mapping[str, str] = {"lc_source": "summarization"}


def is_foreign_summary(extra: Mapping[str, Any] | BaseMessage) -> bool:
    """Whether a message (or its ``additional_kwargs``, as stored) is a summary another
    library wrote (:data:`FOREIGN_SUMMARY_KWARGS`): the user did not say it. It is kept,
    archived and searchable like any message, but it is no user turn (see
    :func:`is_real_user`) and the history shows it in the ``system`` role
    (:func:`speaker_role`)."""
    if isinstance(extra, BaseMessage):
        extra = extra.additional_kwargs
    return isinstance(extra, Mapping) and any(
        extra.get(k) == v for k, v in FOREIGN_SUMMARY_KWARGS.items()
    )


def is_real_user(message: BaseMessage) -> bool:
    """A human message written by the user: not a summary or notice of this package,
    nor a summary another library wrote in the user role (:func:`is_foreign_summary`).
    The latest one is the request the model works on; each opens a round."""
    return (
        isinstance(message, HumanMessage)
        and marker(message) is None
        and not is_foreign_summary(message)
    )


#: Marker kinds of a message the package rewrote in place (same id, role and place): its
#: content offloaded behind a preview, or summarized.
KIND_OFFLOADED = "offloaded"
KIND_SUMMARIZED = "summarized"


def is_user_turn(message: BaseMessage) -> bool:
    """A user message the user wrote (:func:`is_real_user`), or one the package offloaded
    or summarized in place (a long pasted log): it still opens its round. Only the
    package's messages written in the user role (summaries, notices) and other
    libraries' summaries are not user turns."""
    if is_real_user(message):
        return True
    return (
        isinstance(message, HumanMessage)
        and (marker(message) or {}).get("kind") in (KIND_OFFLOADED, KIND_SUMMARIZED)
        and not is_foreign_summary(message)
    )


#: LangChain message types (``message.type``, a chunk's class name) and the role each is.
_ROLE_OF = {
    "human": "user",
    "HumanMessageChunk": "user",
    "ai": "assistant",
    "AIMessageChunk": "assistant",
    "ToolMessageChunk": "tool",
    "SystemMessageChunk": "system",
}


def speaker_role(kind: str, extra: Any = None) -> str:
    """The role (``user``, ``assistant``, ``tool``, ``system``) of a message of type
    ``kind`` (``message.type``) with ``additional_kwargs`` ``extra``, as the history
    shows and filters it: a summary another library wrote in the user role
    (:func:`is_foreign_summary`) is ``system``, not the user's words."""
    role = _ROLE_OF.get(kind, kind)
    if role == "user" and is_foreign_summary(extra):
        return "system"
    return role


# --- content ----------------------------------------------------------------------
#: A provider's own compaction of the conversation, as langchain-anthropic and
#: langchain-openai keep it in a reply's content and send it back: Anthropic's
#: ``compact_20260112`` edit returns ``{"type": "compaction", "content": <summary>}``
#: (later requests are read from it on: the API drops every block before it), the OpenAI
#: Responses API's ``context_management`` a ``compaction`` item (``encrypted_content``).
COMPACTION_BLOCK_TYPE = "compaction"
#: Reasoning blocks of every provider: Anthropic's thinking, OpenAI's reasoning items
#: (and LangChain's standard ``reasoning``), Bedrock Converse's ``reasoning_content``.
REASONING_BLOCK_TYPES = frozenset(
    {"thinking", "redacted_thinking", "reasoning_content", "reasoning"}
)
#: Content blocks a provider requires first in an assistant message, unchanged:
#: Anthropic's extended thinking (the assistant turn that continues a tool loop must
#: start with them), and the same thinking as Bedrock Converse returns it
#: (``reasoning_content``, sent back as ``reasoningContent``: Claude on Bedrock keeps
#: the rule); a provider's compaction, which opens its reply (Anthropic reads a request
#: from it on: a block before it, a metadata tag, would be dropped and the thinking
#: after it no longer first). OpenAI's reasoning items are not among them: each must
#: be followed by the item it produced, so nothing may come between them and their reply.
LEADING_BLOCK_TYPES = (REASONING_BLOCK_TYPES - {"reasoning"}) | {COMPACTION_BLOCK_TYPE}
#: Blocks that repeat an ``AIMessage``'s ``tool_calls`` (Anthropic/Responses content).
TOOL_CALL_BLOCK_TYPES = frozenset({"tool_use", "tool_call", "function_call"})


def carries_compaction(message: Any) -> bool:
    """Whether ``message`` holds a provider's compaction (:data:`COMPACTION_BLOCK_TYPE`)."""
    content = getattr(message, "content", None)
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == COMPACTION_BLOCK_TYPE for b in content
    )


def text_of(message: BaseMessage) -> str:
    """The message's content flattened to text: text blocks as they are, code a provider
    ran, its output, server-side tool calls and results and refusals as their text (led
    by their type), other non-text blocks as ``[type]`` placeholders; tool calls and
    reasoning are left out.

    A provider's own server-tool blocks (Anthropic's ``server_tool_use`` and
    ``*_tool_result``, the OpenAI Responses API's ``web_search_call``,
    ``code_interpreter_call``, ``image_generation_call``, …) are read through
    langchain-core's translation to the standard blocks (``AIMessage.content_blocks``),
    by the message's ``response_metadata["model_provider"]`` or, without one, by the
    provider those block types belong to."""
    content = message.content
    if isinstance(message, AIMessage) and not isinstance(content, str):
        standard = _standard_blocks(message)
        if standard is not None:
            return content_text(standard)
    return content_text(content)


#: Provider block types :func:`content_text` does not read itself, and the provider
#: (langchain-core's translator name) whose blocks they are: LangChain's translation
#: turns them into standard ``server_tool_call``/``server_tool_result``/``image`` blocks.
_PROVIDER_BLOCKS = {
    "server_tool_use": "anthropic",
    "mcp_tool_use": "anthropic",
    "web_search_call": "openai",
    "file_search_call": "openai",
    "code_interpreter_call": "openai",
    "image_generation_call": "openai",
    "mcp_call": "openai",
    "mcp_list_tools": "openai",
    "tool_search_call": "openai",
    "tool_search_output": "openai",
}


def _provider_of(kind: Any) -> str | None:
    """The provider whose server-tool block ``kind`` is (see :data:`_PROVIDER_BLOCKS`);
    Anthropic's server tools' results are all ``*_tool_result`` (its client tools'
    ``tool_result`` and LangChain's standard ``server_tool_result`` are not theirs)."""
    if not isinstance(kind, str):
        return None
    if kind.endswith("_tool_result") and kind not in ("tool_result", "server_tool_result"):
        return "anthropic"
    return _PROVIDER_BLOCKS.get(kind)


def _standard_blocks(message: AIMessage) -> list[Any] | None:
    """``message.content_blocks`` when its content holds provider server-tool blocks
    (``None`` otherwise, or when the translation fails: the content is then read as it
    is). The provider is the message's own ``model_provider``, else the one those
    blocks belong to (a message stored before langchain-core 1.0, or built by hand)."""
    inferred = None
    for block in message.content:
        if isinstance(block, dict) and (inferred := _provider_of(block.get("type"))):
            break
    if inferred is None:
        return None
    if not message.response_metadata.get("model_provider"):
        message = message.model_copy(
            update={"response_metadata": {**message.response_metadata, "model_provider": inferred}}
        )
    try:
        return list(message.content_blocks)
    except Exception:  # a shape the translator does not expect: read the content as it is
        return None


def content_text(content: Any) -> str:
    """A message content (a string or a list of blocks) flattened as :func:`text_of`
    does (for content read from a stored message dict), but as the blocks are: a
    provider's own server-tool blocks, which :func:`text_of` reads through their
    translation to standard blocks, show as their ``[type]``."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            if block.get("type") == "text" or "text" in block:
                parts.append(str(block.get("text", "")))
            elif (shown := _block_text(block)) is not None:
                parts.append(shown)
            elif block.get("type") == "non_standard" and isinstance(block.get("value"), dict):
                if shown := content_text([block["value"]]):  # a block the translation kept
                    parts.append(shown)
            elif block.get("type") not in _UNSHOWN_BLOCKS:
                parts.append(f"[{block.get('type', 'block')}]")
    return "\n".join(parts)


def _block_text(block: Mapping[str, Any]) -> str | None:
    """The readable text of a block that says something without being a ``text`` block
    (``None`` for the others): code a provider ran and its output (Gemini's
    ``executable_code`` and ``code_execution_result``), a server-side tool's call and
    result (LangChain's standard ``server_tool_call``, ``server_tool_call_chunk`` and
    ``server_tool_result``, what the providers' own blocks translate to: a call's
    ``code`` argument shown as it is, below it, a result's output by :func:`_readable`),
    a ``refusal``, and a provider's ``compaction`` that holds its summary as text
    (Anthropic's; OpenAI's is encrypted). Each is led by its type, so a preview or a
    summary still tells them from the model's own words."""
    kind = block.get("type")
    if kind == COMPACTION_BLOCK_TYPE and isinstance(block.get("content"), str):
        # Anthropic's summary of what it compacted (OpenAI's compaction is encrypted)
        return f"[compaction]\n{block['content']}"
    if kind == "executable_code":
        language = str(block.get("language") or "").lower()
        lead = f"[executable_code {language}]" if language else "[executable_code]"
        return f"{lead}\n{_as_text(block.get('executable_code'))}"
    if kind == "code_execution_result":
        outcome = block.get("outcome")
        failed = outcome not in (None, 1, "OUTCOME_OK", "outcome_ok")
        lead = f"[code_execution_result {outcome}]" if failed else "[code_execution_result]"
        return f"{lead}\n{_as_text(block.get('code_execution_result'))}"
    if kind in ("server_tool_call", "server_tool_call_chunk"):
        name = block.get("name") or "?"
        extras = block.get("extras")
        if isinstance(extras, Mapping) and extras.get("tool_name"):  # a remote MCP server's
            name = f"{name} {extras['tool_name']}"
        lead = f"[{kind} {name}]"
        args = block.get("args")
        if isinstance(args, str):
            return f"{lead} {args}"
        args = dict(args) if isinstance(args, Mapping) else args
        code = (
            args.pop("code")
            if isinstance(args, dict) and isinstance(args.get("code"), str)
            else None
        )
        shown = f"{lead} {_as_text(args or {})}" if args or code is None else lead
        return shown if code is None else f"{shown}\n{code}"
    if kind == "server_tool_result":
        status = block.get("status") or "success"
        output = _readable(block.get("output"))
        return f"[server_tool_result {status}]" + (f"\n{output}" if output else "")
    if kind == "refusal":
        return f"[refusal] {_as_text(block.get('refusal'))}"
    return None


def _as_text(value: Any) -> str:
    """A block field as text: a string as it is, anything else as its JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


#: Fields of a server tool's output left out of its text: encrypted page content,
#: citation indexes and signatures (opaque to the model and to a reader), base64 data
#: (a standard block's ``base64``; ``data`` beside ``"type": "base64"``, Anthropic's).
_OPAQUE_OUTPUT_FIELDS = frozenset({"encrypted_content", "encrypted_index", "signature", "base64"})
#: Fields of a server tool's output shown as they are, on their own lines: what code
#: printed, a found passage, a fetched page's text.
_STREAM_FIELDS = ("stdout", "stderr", "logs", "text", "content", "output", "data")


def _readable(value: Any) -> str:
    """A server tool's output as text: a string as it is; an object as the JSON of its
    plain fields, then its printed output and found text as they are, then what it
    nests (each read the same way), without its opaque fields (an Anthropic web search
    result's ``encrypted_content``) or its ``type``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(text for item in value if (text := _readable(item)))
    if not isinstance(value, Mapping):
        return _as_text(value)
    plain: dict[str, Any] = {}
    streams: list[str] = []
    nested: list[str] = []
    for key, field in value.items():
        if key == "type" or field in (None, "", [], {}):
            continue
        if isinstance(field, str) and (
            key in _OPAQUE_OUTPUT_FIELDS or (key == "data" and value.get("type") == "base64")
        ):
            continue
        if key in _STREAM_FIELDS and isinstance(field, str):
            streams.append(field)
        elif isinstance(field, (Mapping, list)):
            nested.append(_readable(field))
        else:
            plain[key] = field
    head = [_as_text(plain)] if plain else []
    return "\n".join(part for part in (*head, *streams, *nested) if part)


#: Blocks :func:`content_text` leaves out: tool calls (the message's ``tool_calls`` and
#: ``invalid_tool_calls`` say them) and reasoning (opaque or private to the provider),
#: so a preview or a summary is not made of placeholders such as ``[thinking]`` and
#: ``[tool_use]``. A provider's server-side tool calls are not among them: no
#: ``tool_calls`` say them (:func:`text_of` shows them).
_UNSHOWN_BLOCKS = (
    REASONING_BLOCK_TYPES
    | TOOL_CALL_BLOCK_TYPES
    | {
        "tool_call_chunk",
        "invalid_tool_call",  # the translation of a call in ``invalid_tool_calls``
    }
)


def sent_calls(message: BaseMessage) -> list[Any]:
    """An AI message's ``tool_calls`` and ``invalid_tool_calls``: providers are sent both
    (langchain-openai, langchain-anthropic), each needing a result (create_agent's: an error)."""
    return (
        [*message.tool_calls, *message.invalid_tool_calls] if isinstance(message, AIMessage) else []
    )


def tool_call_ids(message: BaseMessage) -> list[str]:
    """Ids of the tool calls an AI message makes (:func:`sent_calls`)."""
    return [cid for tc in sent_calls(message) if (cid := tc.get("id"))]


def tool_call_names(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """The tool each call id of ``messages``' assistant turns calls."""
    return {
        tc["id"]: tc.get("name") or "?" for m in messages for tc in sent_calls(m) if tc.get("id")
    }


def result_tool_name(message: ToolMessage, names: Mapping[str, str]) -> str:
    """The tool a result answers: its own ``name``, else its call's in ``names``
    (:func:`tool_call_names`), else ``"?"``."""
    return message.name or names.get(message.tool_call_id, "") or "?"


def message_chars(message: BaseMessage) -> int:
    """Size in characters: text content plus tool-call names and arguments."""
    size = len(text_of(message))
    if isinstance(message, AIMessage):
        for tc in message.tool_calls:
            size += len(tc.get("name", "")) + len(
                json.dumps(tc.get("args", {}), ensure_ascii=False)
            )
    return size


# --- structure: rounds and tool-call groups ----------------------------------------
def latest_user_index(
    messages: Sequence[BaseMessage], request_only: Collection[str] = ()
) -> int | None:
    """Index of the latest real user message, or ``None``. Messages whose id is in
    ``request_only`` (another middleware's additions to one model request, a retrieved
    document: not turns of the conversation) are not user turns."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if is_real_user(m) and not (request_only and m.id in request_only):
            return i
    return None


def autonomous_steps(messages: Sequence[BaseMessage]) -> int:
    """How many ``<user>`` commands in a row supplied the latest user message: its
    :data:`AUTONOMOUS_KEY` step number, 0 when a real user wrote it (or there is none)."""
    lu = latest_user_index(messages)
    step = messages[lu].additional_kwargs.get(AUTONOMOUS_KEY) if lu is not None else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step > 0 else 0


def round_starts(messages: Sequence[BaseMessage], request_only: Collection[str] = ()) -> list[int]:
    """Indices of the user's messages (:func:`is_user_turn`: those offloaded or
    summarized in place included): each opens a round (user … final answer), so no
    round holds another's request; ``request_only`` as :func:`latest_user_index` has it."""
    return [
        i
        for i, m in enumerate(messages)
        if is_user_turn(m) and not (request_only and m.id in request_only)
    ]


def atomic_groups(
    messages: Sequence[BaseMessage], start: int = 0, end: int | None = None
) -> list[tuple[int, int]]:
    """Split ``messages[start:end]`` into units that must stay together.

    A unit is an AI message with tool calls plus the tool messages that follow
    it, or any other single message. Returned as half-open ``(i, j)`` spans.
    """
    end = len(messages) if end is None else end
    groups: list[tuple[int, int]] = []
    i = start
    while i < end:
        j = i + 1
        if tool_call_ids(messages[i]):
            while j < end and isinstance(messages[j], ToolMessage):
                j += 1
        groups.append((i, j))
        i = j
    return groups


def leading_blocks(content: Any) -> list[Any]:
    """The blocks of ``content`` a provider requires first (:data:`LEADING_BLOCK_TYPES`)."""
    if isinstance(content, str):
        return []
    k = 0
    while (
        k < len(content)
        and isinstance(content[k], dict)
        and content[k].get("type") in LEADING_BLOCK_TYPES
    ):
        k += 1
    return list(content[:k])


def open_loop_index(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the assistant message whose tool calls the context ends with (followed
    by nothing but their results): the turn a provider sees the model continue, which
    Anthropic requires unchanged from its thinking blocks on."""
    i = len(messages) - 1
    while i >= 0 and isinstance(messages[i], ToolMessage):
        i -= 1
    if i >= 0 and sent_calls(messages[i]):
        return i
    return None


def pinned_group_indices(messages: Sequence[BaseMessage], start: int = 0) -> list[int]:
    """Indices (from ``start`` on) of what the pins protect: each pinned message and every
    message of its tool-call group (a pinned call keeps its results, a pinned result its
    call and its sibling results). This is what no strategy compresses and what the pin
    limit counts. A system message is never counted: it is always kept, pin or not
    (and the view grows it with the package's section and working context)."""
    if not any(is_pinned(m) for m in messages[start:]):
        return []
    return [
        k
        for a, b in atomic_groups(messages, start)
        if any(is_pinned(messages[i]) for i in range(a, b))
        for k in range(a, b)
        if not isinstance(messages[k], SystemMessage)
    ]


def latest_plan_note(
    messages: Sequence[BaseMessage], tools: Collection[str], start: int = 0
) -> tuple[int, int] | None:
    """The newest tool-call group (from ``start`` on) that calls only ``tools``
    (``config.plan_note_tools``: a todo list's ``write_todos``), with its results, as a
    half-open span: the agent's current plan, which ``TodoListMiddleware`` keeps in the
    state but never shows the model again. ``None`` when there is none, when it was
    compressed already (a message of it carries the package's marker), or when the
    newest call of ``tools`` came with calls of other tools (no note alone: an older
    note is superseded, not the current plan)."""
    if not tools:
        return None
    for a in range(len(messages) - 1, start - 1, -1):
        m = messages[a]
        if not isinstance(m, AIMessage) or not m.tool_calls:
            continue
        named = [tc["name"] in tools for tc in m.tool_calls]
        if not any(named):
            continue
        if not all(named):
            return None  # the newest plan came with other calls: an older one is stale
        b = a + 1
        while b < len(messages) and isinstance(messages[b], ToolMessage):
            b += 1
        return None if any(marker(messages[i]) for i in range(a, b)) else (a, b)
    return None


def pinned_tokens(messages: Sequence[BaseMessage], counter: Any) -> int:
    """Tokens of what the pins of ``messages`` protect (:func:`pinned_group_indices`),
    each message counted by ``counter.count_message``: what the pin limit bounds."""
    return sum(counter.count_message(messages[i]) for i in pinned_group_indices(messages))


def group_start(messages: Sequence[BaseMessage], index: int) -> int:
    """Move ``index`` back to the start of the tool-call group it falls inside.

    A cut at the returned index never separates an AI message from its results.
    """
    i = min(index, len(messages))
    while 0 < i < len(messages) and isinstance(messages[i], ToolMessage):
        i -= 1
    return i


def pending_call_index(messages: Sequence[BaseMessage]) -> int | None:
    """Index of a trailing AI message whose tool calls are not all answered yet."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, ToolMessage):
            continue
        calls = set(tool_call_ids(m))
        if not calls:
            return None
        answered = {t.tool_call_id for t in messages[i + 1 :] if isinstance(t, ToolMessage)}
        return i if calls - answered else None
    return None


# --- invariants ----------------------------------------------------------------------
def find_violations(messages: Sequence[BaseMessage]) -> list[str]:
    """Structural problems a provider would reject (empty list when valid).

    Checks: at most one system message and only first; every tool message
    answers a call of the AI message right before its block of tool results; every
    tool call is answered, except the calls of a pending last AI message.
    """
    problems: list[str] = []
    open_calls: set[str] = set()
    open_owner: int | None = None
    for i, m in enumerate(messages):
        if isinstance(m, SystemMessage) and i != 0:
            problems.append(f"message {i} ({m.id}) is a system message that is not first")
        if isinstance(m, ToolMessage):
            if open_owner is None or m.tool_call_id not in open_calls:
                problems.append(
                    f"message {i} ({m.id}) answers tool call {m.tool_call_id!r} "
                    "that the AI message before it did not make"
                )
            else:
                open_calls.discard(m.tool_call_id)
            continue
        if open_calls:
            problems.append(
                f"AI message {open_owner} ({messages[open_owner].id}) has unanswered "  # type: ignore[index]
                f"tool calls {sorted(open_calls)}"
            )
        ids = tool_call_ids(m)
        open_calls = set(ids)
        open_owner = i if ids else None
    # Calls still open here belong to the last AI message: pending calls are allowed.
    return problems


# --- hostile input: unstorable text, broken tool pairs ----------------------------------
_UNSAFE_RE = re.compile("[\x00\ud800-\udfff]")
_MESSAGE_FIELDS = (
    "content",
    "id",
    "name",
    "tool_call_id",
    "tool_calls",
    "invalid_tool_calls",
    "additional_kwargs",
    "response_metadata",
    "artifact",
)
#: Marker kind of the result the package adds for a tool call that never got one.
KIND_MISSING_RESULT = "missing_tool_result"


def clean_text(text: str) -> str:
    """``text`` as every store and provider accepts it (the same object when already fine).

    Python strings may hold what UTF-8 cannot: surrogate code points (from
    ``errors="surrogateescape"`` decoding or broken UTF-16 JSON) and NUL, which
    PostgreSQL's ``jsonb`` rejects. A valid surrogate pair becomes the character it
    encodes; a lone surrogate and NUL become U+FFFD (the replacement character).
    """
    if "\x00" not in text and (text.isascii() or _UNSAFE_RE.search(text) is None):
        return text
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", "\ufffd")


def _clean_value(value: Any) -> Any:
    """``value`` with :func:`clean_text` applied to every string in it (same object if clean)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list | tuple):
        items = [_clean_value(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        pairs = [(_clean_value(k), _clean_value(v)) for k, v in value.items()]
        if all(k2 is k and v2 is v for (k2, v2), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value


def sanitize_message(message: BaseMessage) -> BaseMessage:
    """``message`` with its text made storable (see :func:`clean_text`).

    Covers the content (strings and blocks), id, name, tool-call ids and
    arguments, and the provider metadata. Returns the same object when nothing
    needed cleaning, else a copy: the copy is what gets archived and sent, so the
    history and the working messages always agree.
    """
    if _KNOWN_CLEAN.get(id(message)) is message:
        return message  # checked before (the engine sees the same objects every call)
    update: dict[str, Any] = {}
    for name in _MESSAGE_FIELDS:
        value = getattr(message, name, None)
        if value is None:
            continue
        cleaned = _clean_value(value)
        if cleaned is not value:
            update[name] = cleaned
    result = message.model_copy(update=update) if update else message
    _KNOWN_CLEAN[id(result)] = result
    return result


#: Message objects already known to be clean, by identity (weak: no memory is held).
#: Replacing a field (``message.content = …``) is not seen; mutate copies, not messages.
_KNOWN_CLEAN: weakref.WeakValueDictionary[int, BaseMessage] = weakref.WeakValueDictionary()


def _tool_pairs_ok(messages: Sequence[BaseMessage]) -> bool:
    """The tool-pair part of :func:`find_violations`, without building messages."""
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, ToolMessage):
            if m.tool_call_id not in open_calls:
                return False
            open_calls.discard(m.tool_call_id)
            continue
        if open_calls:
            return False
        open_calls = set(tool_call_ids(m))
    return True


def _is_stand_in(message: BaseMessage) -> bool:
    """The result :func:`repair_tool_pairs` stands in for a lost one."""
    return (marker(message) or {}).get("kind") == KIND_MISSING_RESULT


def repair_tool_pairs(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Make tool calls and results pair up as every provider requires.

    Returns ``messages`` itself (as a list) when they already pair up. Otherwise:
    each AI message is followed by the results of its calls (a result found later
    in the list is moved up to its call; the first result of a call wins, a real one
    over a stand-in written before it arrived); a call without any result gets a short
    placeholder result (marked ``missing_tool_result``), except the calls of a pending last AI message; a tool
    result whose call is nowhere before it (an orphan) or that answers a call a
    second time leaves the working messages. Nothing is lost: the engine archives
    every original in the history store *before* repairing.
    """
    msgs = list(messages)
    if not any(isinstance(m, ToolMessage) or tool_call_ids(m) for m in msgs):
        return msgs
    if _tool_pairs_ok(msgs):
        return msgs
    last = len(msgs)
    while last > 0 and isinstance(msgs[last - 1], ToolMessage):
        last -= 1
    pending_owner = last - 1 if last > 0 and tool_call_ids(msgs[last - 1]) else None
    results: dict[str, list[int]] = {}
    for i, m in enumerate(msgs):
        if isinstance(m, ToolMessage):
            results.setdefault(m.tool_call_id, []).append(i)
    used: set[int] = set()
    out: list[BaseMessage] = []
    for i, m in enumerate(msgs):
        if isinstance(m, ToolMessage):
            continue  # placed right after the AI message that called it, or dropped
        out.append(m)
        calls = sent_calls(m)
        answered: set[str] = set()
        for call in calls:
            cid = call.get("id")
            if not cid or cid in answered:
                continue
            answered.add(cid)
            later = [j for j in results.get(cid, ()) if j > i and j not in used]
            # a real result arriving after the stand-in written for it wins over it
            found = next((j for j in later if not _is_stand_in(msgs[j])), None)
            if found is None and later:
                found = later[0]
            if found is not None:
                used.add(found)
                out.append(msgs[found])
            elif i != pending_owner:
                note = ToolMessage(
                    content=(
                        f"[No result was recorded for this call to {call.get('name') or 'a tool'}: "
                        "it was interrupted or its result was lost. Call it again if it is "
                        "still needed.]"
                    ),
                    tool_call_id=cid,
                    name=call.get("name"),
                    # derived from its call and the message making it: the same at every
                    # call (a tag shown with it would otherwise change, and the prompt
                    # cache break there), and one of its own for each message repeating a
                    # call id (providers and fake models that number calls per message)
                    id=str(uuid.uuid5(_DERIVED_IDS, f"missing-result:{m.id or i}:{cid}")),
                    status="error",
                )
                out.append(mark(note, KIND_MISSING_RESULT))
    return out


def assert_valid_sequence(messages: Sequence[BaseMessage]) -> None:
    """Raise :class:`InvariantViolationError` when :func:`find_violations` finds any."""
    problems = find_violations(messages)
    if problems:
        raise InvariantViolationError("; ".join(problems[:5]))


def plain_message(role: str, content: str, **kwargs: Any) -> BaseMessage:
    """Build a message from a role name (``system``, ``user``, ``assistant``, ``tool``)."""
    cls: dict[str, type[BaseMessage]] = {
        "system": SystemMessage,
        "user": HumanMessage,
        "human": HumanMessage,
        "assistant": AIMessage,
        "ai": AIMessage,
        "tool": ToolMessage,
    }
    if role not in cls:
        raise ValueError(f"unknown role {role!r}")
    return cls[role](content=content, **kwargs)
