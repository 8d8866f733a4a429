"""How messages read as text: the transcript a summarizer model is shown.

:func:`render_transcript` writes a span of messages as numbered blocks (role, text,
tool calls with their arguments, tool results with their call ids and status). The
small helpers it uses to name a message's role, its tool calls and the tool a
result answers are shared with :mod:`~langchain_autocontext.summarizers.extractive`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_autocontext.messages import (
    is_foreign_summary,
    marker,
    result_tool_name,
    sent_calls,
    text_of,
    tool_call_names,
)

__all__ = ["call_strings", "render_transcript", "tool_calls_of"]


def tool_calls_of(message: BaseMessage) -> list[dict[str, Any]]:
    """The tool calls an AI message sends (:func:`~langchain_autocontext.messages.sent_calls`:
    those whose arguments did not parse too, their raw argument text as ``args``, a
    missing name as ``"?"``); empty for other messages."""
    return [{**tc, "name": tc.get("name") or "?"} for tc in sent_calls(message)]


def call_strings(message: BaseMessage) -> list[str]:
    """The strings of the arguments of ``message``'s tool calls, as the agent wrote them
    (the paths, ids and commands it acted on; a JSON rendering would escape quotes and
    backslashes): nested values walked, other values as ``str``, arguments that did not
    parse whole."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)
        elif value is not None:
            out.append(str(value))

    for call in tool_calls_of(message):
        walk(call.get("args"))
    return out


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        # another library's summary in the user role (SummarizationMiddleware's) is no user turn
        return "system" if is_foreign_summary(message) else "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, SystemMessage):
        return "system"
    return str(getattr(message, "role", None) or message.type)


def _kind_label(message: BaseMessage) -> str:
    """`` [autocontext <kind>]`` for messages this package wrote, else ``""``."""
    info = marker(message)
    if info is None:
        return ""
    return f" [autocontext {info.get('kind', 'note')}]"


def render_transcript(
    messages: Sequence[BaseMessage], *, max_chars: int | None = None, args_chars: int = 8000
) -> str:
    """A readable transcript of ``messages`` for a summarizer prompt.

    Each message is a block ``[k] role:`` followed by its text; tool calls are
    listed as ``-> tool call NAME (call id ID): {json args}``; tool results name the
    call id, the tool and the status. With ``max_chars``, the largest texts are cut
    in the middle (saying how much) until the whole fits; arguments longer than
    ``args_chars`` are shortened, saying so.
    """
    names = tool_call_names(messages)
    texts = [text_of(m) for m in messages]
    caps: int | None = None
    if max_chars is not None:
        sizes = [len(t) for t in texts]
        if sum(sizes) > max_chars:
            lo, hi = 0, max(sizes)
            while lo < hi:  # largest cap with sum(min(size, cap)) <= max_chars
                mid = (lo + hi + 1) // 2
                if sum(min(size, mid) for size in sizes) <= max_chars:
                    lo = mid
                else:
                    hi = mid - 1
            caps = max(200, lo)
    blocks: list[str] = []
    for k, (m, text) in enumerate(zip(messages, texts, strict=True), start=1):
        role = _role(m)
        if isinstance(m, ToolMessage):
            status = f", status: {m.status}" if m.status == "error" else ""
            head = f"[{k}] tool result for call {m.tool_call_id} ({result_tool_name(m, names)}{status})"
        else:
            head = f"[{k}] {role}"
        head += _kind_label(m) + ":"
        if caps is not None and len(text) > caps:
            half = caps // 2
            text = (
                f"{text[:half]}\n[… {len(text) - 2 * half:,} characters omitted from the "
                f"middle of this message …]\n{text[-half:]}"
            )
        lines = [head]
        if text.strip():
            lines.append(text.strip("\n"))
        elif not tool_calls_of(m):
            lines.append("(empty)")
        for tc in tool_calls_of(m):
            args = json.dumps(tc.get("args", {}), ensure_ascii=False, default=str)
            if len(args) > args_chars:
                args = f"{args[:args_chars]}…[arguments cut: {len(args):,} characters in full]"
            lines.append(f"-> tool call {tc.get('name', '?')} (call id {tc.get('id')}): {args}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
