"""Strategies 2 and 3: offload large messages, leaving a preview and the offload id."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from langchain_autocontext.messages import (
    LEADING_BLOCK_TYPES,
    is_real_user,
    mark,
    marker,
    message_chars,
    open_loop_index,
    sent_calls,
    text_of,
)
from langchain_autocontext.store import made_of
from langchain_autocontext.strategies.base import (
    KIND_OFFLOADED,
    Job,
    JobOutput,
    PassContext,
    clip_text,
    shrunk_calls,
)
from langchain_autocontext.tokens import CHARS_PER_TOKEN

__all__ = ["LargeMessageOffload"]


def _says_something(line: str) -> bool:
    """A line with a letter or digit in it that is not a code fence: ``{``, ``[``, a
    rule of dashes or a fence says nothing of how a call went."""
    stripped = line.strip()
    return not stripped.startswith(("```", "~~~")) and any(c.isalnum() for c in stripped)


def is_observation(message: BaseMessage) -> bool:
    """What the agent read rather than wrote: a tool result, or a user's message. An
    agent that talks to its environment in text (mini-swe-agent's own format, ReAct
    agents, models without tool calling) reads each command's output as a user message,
    and a user's pasted log or document is read the same way: outside the working set,
    strategy 3 masks them as it masks tool results. (The latest user message and pins
    are never masked, :meth:`PassContext.protected`; nor, for its age alone, is the
    opening request, :func:`opens_the_conversation`.)"""
    return isinstance(message, ToolMessage) or is_real_user(message)


def opens_the_conversation(ctx: PassContext, i: int) -> bool:
    """Whether message ``i`` is the user's opening request: the first message after the
    system prompt (nothing evicted before it). It states the task; when a harness adds
    user messages later (a reminder, a step count) or the user follows up, it is no
    longer the latest user message, and observation masking would have cut it to its
    first line while strategy 4 keeps a round's request whole. FIFO eviction may still
    take it, oldest first; a pin keeps it (see :func:`~langchain_autocontext.pin`). A
    document a middleware adds to the request only is no request of the user's."""
    m = ctx.messages[i]
    opening = i == (0 if ctx.system_index is None else 1)
    return opening and is_real_user(m) and m.id not in ctx.request_only


def preview_of(message: BaseMessage, size: int, *, first_line: bool = False) -> str:
    """The first ``size`` characters of the message's text (tool calls when no text);
    with ``first_line``, only the first of their lines that says something (a letter or
    digit, not a code fence: pretty-printed JSON shows its first field, not ``{``), else
    the first non-blank one (``[]`` says the result was empty)."""
    text = text_of(message)
    if not text.strip() and isinstance(message, AIMessage) and message.tool_calls:
        text = "; ".join(
            f"{tc['name']}({json.dumps(tc['args'], ensure_ascii=False)})"
            for tc in message.tool_calls
        )
    text = text[:size]
    if not first_line:
        return text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if _says_something(line)), lines[0] if lines else "")


#: Tokens of the note an offloaded message carries (its size in tokens and the offload
#: id as shortened, :func:`~langchain_autocontext.store.offload_ref`) with the line
#: break before it, as an offload plans with it: the usual size (the eight characters'
#: tokens vary, the note with them from 18 to 24); the pipeline counts after.
NOTE_TOKENS = 21
#: An offload that frees fewer tokens than this is not worth a store record.
MIN_SAVING = 64


class LargeMessageOffload:
    """Move messages into the store, leaving a preview and the offload id.

    ``keep_last=True`` is strategy 2: messages over ``large_payload_threshold``
    characters, except the last ``last_keep`` messages; each keeps a preview of its
    first ``offload_single_preview`` characters plus the offload id. ``keep_last=False``
    is strategy 3, which also masks tool results and user messages of any size outside
    the protected tail ("observation masking", :func:`is_observation`; one that frees
    fewer than :data:`MIN_SAVING` tokens stays). An observation masked only because it
    left the working set keeps the first line of that preview and the offload id: the
    call or command before it, kept verbatim, already says what it was, and its first
    line says how it went (an exit status, a count, the head of a record; the first line
    that says something, see :func:`preview_of`). On the coding runs of ``../shared/data``
    at 16k (``benchmarks/composition.py``), 200-character previews took 279 tokens a
    call and were the only place left of 0.41% of the facts the next actions reused;
    the first lines take 112 and hold 0.09%. Both work oldest first and stop once the
    target is reached; neither touches the protected tail
    (:attr:`PassContext.tail_start`). The message keeps its id, role and tool-call
    pairing. ``fresh=True`` is the pipeline's last resort before
    :class:`~langchain_autocontext.errors.ContextBudgetError`: any tool result or
    large message, the freshest group's included, largest first.
    """

    def __init__(self, *, keep_last: bool, fresh: bool = False) -> None:
        self.keep_last = keep_last
        self.fresh = fresh
        self.name = "offload_fresh" if fresh else "offload_history" if keep_last else "offload_all"

    def _maskable(self, ctx: PassContext, i: int) -> bool:
        """Large messages (any role); for strategy 3 and the last resort, observations too;
        for the last resort anything whose offload frees tokens (a long tool-call
        argument is measured in tokens there: 4,900 characters of Japanese are ~4,700)."""
        m = ctx.messages[i]
        if ctx.protected(i) or marker(m):
            return False
        if self.fresh and not isinstance(m, SystemMessage):
            return True
        if i in ctx.kept_results:  # keep_tool_results: only the last resort (above) takes them
            return False
        masked_for_age = is_observation(m) and not opens_the_conversation(ctx, i)
        return ctx.is_large(i) or (not self.keep_last and masked_for_age)

    def plan(self, ctx: PassContext) -> list[Job]:
        if not ctx.over_tokens:
            return []  # offloading never reduces the message count
        n = len(ctx.messages)
        end = n if self.fresh else ctx.tail_start
        if self.keep_last:
            end = min(end, n - ctx.config.last_keep)
        candidates = []
        for i in range(ctx.body_start, max(end, 0)):
            if not self._maskable(ctx, i):
                continue
            job, freed = self._job(ctx, i)
            if freed >= MIN_SAVING:
                candidates.append((job, freed, 0))
        if self.fresh:  # last resort: the largest first, fewest messages touched
            candidates.sort(key=lambda c: -c[1])
        return ctx.take_until_target(candidates)

    def _job(self, ctx: PassContext, i: int) -> tuple[Job, int]:
        original = ctx.messages[i]
        size = ctx.config.offload_single_preview
        aged_out = not self.fresh and is_observation(original) and not ctx.is_large(i)
        preview = preview_of(original, size, first_line=aged_out)
        if self.fresh:
            # The last resort must fit: a preview of ``size`` characters is ~size/4
            # tokens of English but up to ~2.5 tokens a character of CJK or emoji, and
            # the freshest group's previews are never shortened again. Cap it in tokens.
            cap = max(8, size // CHARS_PER_TOKEN)
            preview = clip_text(preview, cap, ctx.counter).rstrip("…").rstrip()
        chars = message_chars(original)
        tokens = ctx.counter.count_message(original)
        freed = tokens - ctx.counter.count_text(preview) - NOTE_TOKENS
        calls = sent_calls(original)
        if calls:
            freed -= ctx.counter.count_text(json.dumps([tc["args"] for tc in calls])[:size])
        # the turn the model continues keeps its thinking blocks, every one in order and
        # first (Anthropic rejects that turn when it does not start with them or one of
        # them is missing: interleaved thinking puts more after a server tool's result);
        # older turns may drop them
        blocks = original.content
        lead = (
            [b for b in blocks if isinstance(b, dict) and b.get("type") in LEADING_BLOCK_TYPES]
            if i == open_loop_index(ctx.messages) and not isinstance(blocks, str)
            else []
        )
        if lead:
            freed -= ctx.counter.count_text(json.dumps(lead))

        def build(out: JobOutput) -> list[BaseMessage]:
            note = f"[Offloaded {tokens} tokens; {out.note}]"
            text = f"{preview}…\n{note}" if preview else note
            content: Any = [*lead, {"type": "text", "text": text}] if lead else text
            update: dict[str, Any] = {"content": content}
            if calls and isinstance(original, AIMessage):
                update.update(shrunk_calls(original, max(size, 32), out.note))
            replaced = original.model_copy(update=update)
            marked = mark(replaced, KIND_OFFLOADED, offload_id=out.offload_id, chars=chars)
            return [made_of(marked, original)]

        return Job(i, i + 1, self.name, build, request=None, preview=preview), freed
