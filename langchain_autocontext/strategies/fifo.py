"""Strategy 7: MemGPT FIFO eviction into a recursive summary first after the system message."""

from __future__ import annotations

from langchain_core.messages import BaseMessage, ToolMessage

from langchain_autocontext.messages import atomic_groups, marker
from langchain_autocontext.strategies.base import (
    KIND_RECURSIVE,
    Job,
    JobOutput,
    PassContext,
    clip_text,
    conversation_origin,
    is_summary,
    replacement_summary,
    summarizer_input,
    summary_body,
)
from langchain_autocontext.summarizers import SummaryRequest
from langchain_autocontext.summarizers.extractive import CUT_EVERYTHING

__all__ = ["FifoEviction"]

#: Tokens of the recursive summary's header line (count and offload id, shortened:
#: :func:`~langchain_autocontext.store.offload_ref`), as eviction plans with it: the
#: usual size (19 to 24); the pipeline counts after.
HEADER_TOKENS = 21


class FifoEviction:
    """Move the oldest messages into the recursive summary until the target holds.

    Evicts whole tool-call groups (never half a pair), oldest first, hopping over
    the latest user message (kept in place) and stopping at the protected tail.
    It evicts just enough to reach the target, counting the summary it writes
    against what it frees (the old summary it replaces included).

    The recursive summary *extends itself*: the evicted originals are summarized
    once, the result is appended to the previous summary, and summaries the
    package wrote earlier (of tool runs, rounds, the current round) are appended
    with their full text rather than summarized again. When the summary outgrows
    its cap, its oldest lines go (they stay in the offload chain: the summary's
    offload holds the previous summary).
    """

    name = "fifo"

    def __init__(self, *, squeeze: bool = False) -> None:
        #: squeeze: evict everything evictable (the pipeline's last resort before
        #: ContextBudgetError), not just enough to reach the target.
        self.squeeze = squeeze

    def plan(self, ctx: PassContext) -> list[Job]:
        sys_end = 0 if ctx.system_index is None else 1
        has_summary = ctx.body_start > sys_end
        first = ctx.body_start
        lu = ctx.latest_user
        end = ctx.tail_start
        if not self.squeeze and ctx.need_tokens <= 0 and ctx.need_messages <= 0:
            return []  # already at the target: nothing to evict
        groups = atomic_groups(ctx.messages, first, len(ctx.messages))
        if len(groups) <= 1:
            return []
        old_tokens = ctx.cost(sys_end) if has_summary else 0
        cap = ctx.summary_cap(running=True)
        evict_end = first
        freed = 0  # tokens of the evicted messages
        fresh_tokens = 0  # of those, what the summarizer reads (not earlier summaries)
        kept_tokens = 0  # earlier summaries' text, appended as it is
        removed = 0
        # the old summary's text, which the new one carries (its header replaced)
        old_body = (
            ctx.counter.count_message(ctx.messages[sys_end]) - HEADER_TOKENS if has_summary else 0
        )

        def gain() -> int:
            """What evicting the groups so far frees, net of the summary it writes (an
            estimate: the header is counted at its usual size)."""
            fresh = ctx.summary_budget(fresh_tokens, running=True) if fresh_tokens else 0
            expected = HEADER_TOKENS + ctx.tag_tokens + min(cap, old_body + kept_tokens + fresh)
            return freed + old_tokens - expected

        def fewer() -> int:
            """How many messages fewer evicting the groups so far leaves (the summary it
            writes replaces the old one, or is one more)."""
            return removed - (0 if has_summary else 1)

        for k, (a, b) in enumerate(groups):
            if k == len(groups) - 1 or a >= end:
                break  # the protected tail (and always the freshest group) stays
            if any(ctx.protected(i) for i in range(a, b)):
                if (lu is not None and a <= lu < b) or all(
                    i in ctx.pinned_indices for i in range(a, b)
                ):
                    continue  # hop over the latest user message and pins (kept in place)
                break
            evict_end = b
            for i in range(a, b):
                m = ctx.messages[i]
                freed += ctx.cost(i)  # its tag goes with it
                t = ctx.counter.count_message(m)
                if is_summary(m):
                    kept_tokens += t
                else:
                    fresh_tokens += t
            removed += b - a
            if self.squeeze:
                continue
            if gain() >= ctx.need_tokens and fewer() >= ctx.need_messages:
                break
        if evict_end == first:
            return []
        if not self.squeeze and not (
            (ctx.need_tokens > 0 and gain() > 0) or (ctx.need_messages > 0 and fewer() > 0)
        ):
            # What it can reach frees nothing: a summary it would only wrap in a new
            # header (the current round's, all that is left before the protected tail),
            # a few tokens larger or smaller as the new offload id tokenizes.
            return []
        # What stays in place (the latest user message, pins) cuts the evicted range.
        spans = ctx.spans_between_protected(first, evict_end)
        kept_at = next((i for i in range(first, evict_end) if ctx.protected(i)), None)
        prev = summary_body(ctx.messages[sys_end]) if has_summary else ""
        start = sys_end if has_summary else first
        evicted = [m for a, b in spans for m in ctx.messages[a:b]]
        previous_count = (
            int((marker(ctx.messages[sys_end]) or {}).get("evicted", 0)) if has_summary else 0
        )
        total = previous_count + len(evicted)
        # How many of them came after each message kept in place below the summary (the
        # latest user message, pins): the summary stands before them, and its header
        # counts those after the first one rather than call work done on the request
        # "earlier". The counts are carried per kept message (a few: the request and the
        # pins), so when the first is evicted the next one down keeps its own.
        summary_end = evict_end if kept_at is None else kept_at
        after_each = _after_each(
            ctx,
            _carried_after(ctx.messages[sys_end], ctx.messages[first]) if has_summary else {},
            spans,
            first,
            evict_end,
        )
        below = ctx.messages[summary_end] if summary_end < len(ctx.messages) else None
        after = after_each.get(below.id, 0) if below is not None and below.id else 0
        preview = ctx.config.offload_single_preview
        to_read = summarizer_input([m for m in evicted if not is_summary(m)], preview)
        carried = [summary_body(m) for m in evicted if is_summary(m)]
        originals = ([ctx.messages[sys_end]] if has_summary else []) + evicted
        counter = ctx.counter
        origin = conversation_origin(originals)

        def build(out: JobOutput) -> list[BaseMessage]:
            parts = [p for p in (prev, *carried, out.summary or "") if p.strip()]
            body = clip_text(_one_cut_line("\n".join(parts)), cap, counter, keep="end")
            return [
                replacement_summary(
                    body, out, total, origin, after=after, below=below, after_each=after_each
                )
            ]

        request = (
            SummaryRequest(
                messages=to_read,
                strategy="recursive",
                max_tokens=cap,
                target_tokens=ctx.summary_budget(fresh_tokens, running=True),
            )
            if to_read
            else None
        )
        # The summary replaces the old summary and the evicted span before the latest
        # user message (an insertion when that span is empty).
        jobs = [
            Job(
                start,
                summary_end,
                self.name,
                build,
                request=request,
                preview=f"{total} evicted messages",
                originals=originals,
                extra={"kind": KIND_RECURSIVE},
            )
        ]
        # What was evicted after a kept message is removed: its originals are in the
        # summary's offload above, whose id is shown.
        for a2, b2 in spans:
            if a2 >= summary_end:
                jobs.append(Job(a2, b2, self.name, lambda out: [], offload=False))
        return jobs


def _one_cut_line(text: str) -> str:
    """``text`` with only the last of the offline summarizer's "nothing fit" lines: at a
    tiny budget each summary it extends is one, and the recursive summary filled its cap
    with the same line again and again (its header says how many messages it covers)."""
    lines = text.split("\n")
    cuts = [i for i, line in enumerate(lines) if line.startswith(CUT_EVERYTHING)]
    if len(cuts) <= 1:
        return text
    dropped = set(cuts[:-1])
    return "\n".join(line for i, line in enumerate(lines) if i not in dropped)


def _carried_after(summary: BaseMessage, first_below: BaseMessage) -> dict[str, int]:
    """What the recursive summary ``summary`` counted after each message kept below it
    (``after_each`` in its marker); a summary written before those were kept per message
    counted them after the one right below it (``first_below``) alone."""
    info = marker(summary) or {}
    each = info.get("after_each")
    if isinstance(each, dict):
        return {k: v for k, v in each.items() if isinstance(v, int) and v > 0}
    after = info.get("after", 0)
    if isinstance(after, int) and after > 0 and first_below.id:
        return {first_below.id: after}
    return {}


def _after_each(
    ctx: PassContext,
    carried: dict[str, int],
    spans: list[tuple[int, int]],
    first: int,
    evict_end: int,
) -> dict[str, int]:
    """Message id -> how many of the new summary's messages came after it, for each
    message that stays below the summary and has some: the ones kept in place in the
    evicted range (whose assistant turns and user messages the summary can stand right
    before: a tool result never does), and those beyond it that the old summary
    counted (``carried``)."""
    out: dict[str, int] = {}
    for i in range(first, evict_end):
        m = ctx.messages[i]
        if not ctx.protected(i) or not m.id or isinstance(m, ToolMessage):
            continue
        n = carried.get(m.id, 0) + sum(b - a for a, b in spans if a > i)
        if n > 0:
            out[m.id] = n
    if carried:
        for m in ctx.messages[evict_end:]:
            if m.id in carried and m.id not in out:
                out[m.id] = carried[m.id]
    return out
