"""Strategy 7: MemGPT FIFO eviction into a recursive summary first after the system message."""

from __future__ import annotations

from langchain_core.messages import BaseMessage

from langchain_autocontext.messages import atomic_groups, marker
from langchain_autocontext.strategies.base import (
    KIND_RECURSIVE,
    Job,
    JobOutput,
    PassContext,
    replacement_summary,
    summary_body,
)
from langchain_autocontext.summarizers import SummaryRequest

__all__ = ["FifoEviction"]


class FifoEviction:
    """Move the oldest messages into the recursive summary until the budget holds.

    Evicts whole tool-call groups (never half a pair), oldest first, stopping
    before the latest user message; the old summary is folded into the new one.
    If the context is still too large, the current round's older groups follow
    (the last group always stays).
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
        groups = atomic_groups(ctx.messages, first, len(ctx.messages))
        if len(groups) <= 1:
            return []
        evict_end = first
        freed = 0
        need_tokens = ctx.tokens - ctx.target_tokens + ctx.config.summary_max_tokens
        need_msgs = len(ctx.messages) - ctx.target_messages + 1
        for k, (a, b) in enumerate(groups):
            if k == len(groups) - 1:
                break  # the last group (the model's freshest input) always stays
            if any(ctx.protected(i) for i in range(a, b)):
                if lu is not None and a <= lu < b:
                    continue  # hop over the latest user message (kept in place)
                break
            evict_end = b
            freed += ctx.tokens_of(a, b)
            if not self.squeeze and freed >= need_tokens and (b - first) >= need_msgs:
                break
        if evict_end == first:
            return []
        if lu is not None and first <= lu < evict_end:
            spans = [(first, lu), (lu + 1, evict_end)]
        else:
            spans = [(first, evict_end)]
        spans = [(a, b) for a, b in spans if b > a]
        prev = summary_body(ctx.messages[sys_end]) if has_summary else None
        start = sys_end if has_summary else first
        evicted_msgs = [m for a, b in spans for m in ctx.messages[a:b]]
        previous_count = (
            int((marker(ctx.messages[sys_end]) or {}).get("evicted", 0)) if has_summary else 0
        )
        total = previous_count + len(evicted_msgs)
        tokens = sum(ctx.counter.count_message(m) for m in evicted_msgs)
        originals = ([ctx.messages[sys_end]] if has_summary else []) + evicted_msgs

        def build(out: JobOutput) -> list[BaseMessage]:
            return [replacement_summary(out.summary or "", out, total)]

        request = SummaryRequest(
            messages=evicted_msgs,
            strategy="recursive",
            max_tokens=ctx.config.summary_max_tokens,
            previous_summary=prev,
            target_tokens=ctx.summary_budget(
                tokens + (ctx.counter.count_text(prev) if prev else 0)
            ),
        )
        # The summary replaces the old summary and the evicted span before the latest
        # user message (an insertion when that span is empty).
        summary_end = lu if lu is not None and first <= lu < evict_end else evict_end
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
        # Older work of the current round (after the kept latest user message) is
        # removed: its originals are in the summary's offload above, whose id is shown.
        for a2, b2 in spans:
            if lu is not None and a2 > lu:
                jobs.append(Job(a2, b2, self.name, lambda out: [], offload=False))
        return jobs
