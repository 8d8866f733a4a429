"""Strategy 4: summarize each historical round into one message, keeping the user message."""

from __future__ import annotations

from langchain_core.messages import BaseMessage

from langchain_autocontext.messages import marker, round_starts
from langchain_autocontext.strategies.base import (
    KIND_ROUND,
    Job,
    JobOutput,
    PassContext,
    replacement_ai,
)

__all__ = ["RoundSummary"]


class RoundSummary:
    """A round runs from a user message to the assistant's final answer.

    For every round before the current one, everything after the user message is
    replaced with one summary (the user message itself stays, id and all).
    """

    name = "round"

    def plan(self, ctx: PassContext) -> list[Job]:
        starts = [s for s in round_starts(ctx.messages) if s >= ctx.body_start]
        latest = ctx.latest_user
        jobs = []
        for k, s in enumerate(starts):
            if s == latest:
                break
            end = starts[k + 1] if k + 1 < len(starts) else len(ctx.messages)
            a = s + 1
            if end - a < 1:
                continue
            span = ctx.messages[a:end]
            if len(span) == 1 and marker(span[0]):
                continue  # already one summary
            if len(span) == 1 and not ctx.over_tokens:
                continue  # a lone answer: nothing to gain in message count
            jobs.append(self._job(ctx, a, end))
        return jobs

    def _job(self, ctx: PassContext, start: int, end: int) -> Job:
        n = end - start

        def build(out: JobOutput) -> list[BaseMessage]:
            header = f"Summary of the {n} messages that answered the user message above"
            return [replacement_ai(KIND_ROUND, header, out.summary or "", out, messages=n)]

        # The summarizer also reads the user message (for context); it stays in place.
        return ctx.summary_job(
            start,
            end,
            self.name,
            build,
            strategy="round",
            messages=ctx.messages[start - 1 : end],
            preview=f"round of {n} messages",
        )
