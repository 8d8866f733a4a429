"""Message helpers: serialization, ids, markers, rounds, tool-call pairs, invariants.

Everything here is pure (no I/O) and shared by the engine, the strategies, the
store, the tools and the replay.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from langchain_autocontext.errors import InvariantViolationError

__all__ = [
    "AC_KEY",
    "assert_valid_sequence",
    "atomic_groups",
    "dump_message",
    "dump_messages",
    "ensure_ids",
    "find_violations",
    "group_start",
    "is_real_user",
    "latest_user_index",
    "load_message",
    "load_messages",
    "mark",
    "marker",
    "message_chars",
    "new_id",
    "pending_call_index",
    "round_starts",
    "text_of",
    "tool_call_ids",
]

#: Key in ``additional_kwargs`` of every message this package writes (summaries,
#: previews, notices). Plain JSON, so checkpoints hold no custom classes.
AC_KEY = "autocontext"


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
def new_id() -> str:
    """A fresh, unguessable id (uuid4), the form LangGraph gives messages."""
    return str(uuid.uuid4())


def ensure_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Return the messages with an id on each; messages lacking one get a uuid4 copy.

    Duplicate ids (hostile or buggy input) are made unique too: a later message
    with an id already seen gets a fresh one, so history and edits stay unambiguous.
    """
    seen: set[str] = set()
    out: list[BaseMessage] = []
    for m in messages:
        if not m.id or m.id in seen:
            m = m.model_copy(update={"id": new_id()})
        seen.add(m.id)  # type: ignore[arg-type]
        out.append(m)
    return out


def mark(message: BaseMessage, kind: str, **info: Any) -> BaseMessage:
    """Return ``message`` marked as written by this package (``kind`` + JSON info)."""
    extra = dict(message.additional_kwargs)
    extra[AC_KEY] = {"kind": kind, **info}
    return message.model_copy(update={"additional_kwargs": extra})


def marker(message: BaseMessage) -> dict[str, Any] | None:
    """The package's marker of a message (``{"kind": …, …}``) or ``None``."""
    value = message.additional_kwargs.get(AC_KEY)
    return value if isinstance(value, dict) else None


def is_real_user(message: BaseMessage) -> bool:
    """A human message written by the user (not a summary/notice of this package)."""
    return isinstance(message, HumanMessage) and marker(message) is None


# --- content ----------------------------------------------------------------------
def text_of(message: BaseMessage) -> str:
    """The message's content flattened to text; non-text blocks become placeholders."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            if block.get("type") == "text" or "text" in block:
                parts.append(str(block.get("text", "")))
            else:
                parts.append(f"[{block.get('type', 'block')}]")
    return "\n".join(parts)


def tool_call_ids(message: BaseMessage) -> list[str]:
    """Ids of the tool calls an AI message makes (empty for other messages)."""
    if isinstance(message, AIMessage):
        return [tc["id"] for tc in message.tool_calls if tc.get("id")]
    return []


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
def latest_user_index(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the latest real user message, or ``None``."""
    for i in range(len(messages) - 1, -1, -1):
        if is_real_user(messages[i]):
            return i
    return None


def round_starts(messages: Sequence[BaseMessage]) -> list[int]:
    """Indices of the real user messages: each opens a round (user … final answer)."""
    return [i for i, m in enumerate(messages) if is_real_user(m)]


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
