"""Strategies 2 and 3: offload large messages, leaving a preview and the offload id."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from langchain_autocontext.messages import mark, marker, message_chars, text_of
from langchain_autocontext.strategies.base import (
    KIND_OFFLOADED,
    Job,
    JobOutput,
    PassContext,
    offload_note,
)

__all__ = ["LargeMessageOffload"]


def _shrink_args(value: Any, keep: int) -> Any:
    """Tool-call arguments with long strings cut to ``keep`` characters (still valid JSON)."""
    if isinstance(value, str) and len(value) > keep:
        return value[:keep] + f"… [{len(value) - keep} characters offloaded]"
    if isinstance(value, dict):
        return {k: _shrink_args(v, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink_args(v, keep) for v in value]
    return value


def preview_of(message: BaseMessage, size: int) -> str:
    """The first ``size`` characters of the message's text (tool calls when no text)."""
    text = text_of(message)
    if not text.strip() and isinstance(message, AIMessage) and message.tool_calls:
        text = "; ".join(
            f"{tc['name']}({json.dumps(tc['args'], ensure_ascii=False)})"
            for tc in message.tool_calls
        )
    return text[:size]


class LargeMessageOffload:
    """Move messages over ``large_payload_threshold`` characters into the store.

    ``keep_last=True`` is strategy 2 (the last ``last_keep`` messages stay as they
    are); ``keep_last=False`` is strategy 3. The message keeps its id, role and
    tool-call pairing; its content becomes a preview plus the offload id. Neither
    touches the freshest tool results (the last tool-call group, which the model is
    about to read) unless ``fresh=True``: the pipeline's last resort before
    :class:`~langchain_autocontext.errors.ContextBudgetError`.
    """

    def __init__(self, *, keep_last: bool, fresh: bool = False) -> None:
        self.keep_last = keep_last
        self.fresh = fresh
        self.name = "offload_fresh" if fresh else "offload_history" if keep_last else "offload_all"

    def plan(self, ctx: PassContext) -> list[Job]:
        if not ctx.over_tokens:
            return []  # offloading never reduces the message count
        n = len(ctx.messages)
        end = n - ctx.config.last_keep if self.keep_last else n
        if not self.fresh:
            end = min(end, ctx.fresh_start)
        jobs = []
        for i in range(ctx.body_start, max(end, 0)):
            m = ctx.messages[i]
            if ctx.protected(i) or marker(m) or not ctx.is_large(i):
                continue
            jobs.append(self._job(ctx, i))
        return jobs

    def _job(self, ctx: PassContext, i: int) -> Job:
        original = ctx.messages[i]
        size = ctx.config.offload_single_preview
        preview = preview_of(original, size)
        chars = message_chars(original)
        tokens = ctx.counter.count_message(original)

        def build(out: JobOutput) -> list[BaseMessage]:
            note = (
                f"[Offloaded {chars} characters ({tokens} tokens); {offload_note(out.offload_id)}]"
            )
            content = f"{preview}…\n{note}" if preview else note
            update: dict[str, Any] = {"content": content}
            if isinstance(original, AIMessage) and original.tool_calls:
                update["tool_calls"] = [
                    {**tc, "args": _shrink_args(tc["args"], max(size, 32))}
                    for tc in original.tool_calls
                ]
                update["invalid_tool_calls"] = []
            replaced = original.model_copy(update=update)
            return [mark(replaced, KIND_OFFLOADED, offload_id=out.offload_id, chars=chars)]

        return Job(i, i + 1, self.name, build, request=None, preview=preview)
