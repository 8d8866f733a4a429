"""Strategy 4: summarize each historical round into one message, keeping the user message."""

from __future__ import annotations

from langchain_core.messages import BaseMessage

from langchain_autocontext.messages import marker, round_starts
from langchain_autocontext.strategies.base import (
    KIND_ROUND,
    Job,
    JobOutput,
    PassContext,
    replacement_message,
)

__all__ = ["RoundSummary"]


class RoundSummary:
    """A round runs from a user message to the assistant's final answer.

    For every round before the current one, everything after the user message is
    replaced with one summary (the user message itself stays, id and all).

    A round answered by a single message is no round of work and is left alone: its
    summary would rewrite that one reply with a summarizer call of its own, where FIFO
    eviction (strategy 7) takes many such replies into the recursive summary with one.
    An agent that reads each command's output as a user message (mini-swe-agent's own
    format, ReAct agents, models without tool calling) opens a "round" at every step,
    and summarizing those one by one took its own newest commands out of view: on the
    coding runs of ``../shared/data`` recorded that way, 1,260 summarizer calls at 8k
    and 70.7% next-action support, against 371 calls and 77.9% with such rounds left to
    eviction (``benchmarks/compare_peers.py --text-protocol``).
    """

    name = "round"

    def plan(self, ctx: PassContext) -> list[Job]:
        starts = [s for s in round_starts(ctx.messages, ctx.request_only) if s >= ctx.body_start]
        latest = ctx.latest_user
        candidates = []
        for k, s in enumerate(starts):  # oldest first, until the target
            if s == latest:
                break
            end = starts[k + 1] if k + 1 < len(starts) else len(ctx.messages)
            if end > ctx.tail_start:
                break  # the protected tail stays verbatim
            if end - s <= 2:
                continue  # answered by one message (or none): no round of work
            # Pinned messages stay verbatim in place: the round is summarized around them.
            for a, b in ctx.spans_between_protected(s + 1, end):
                span = ctx.messages[a:b]
                if len(span) == 1 and marker(span[0]):
                    continue  # already one summary
                tokens = ctx.tokens_of(a, b)
                if not ctx.worth_summarizing(tokens):
                    continue  # its summary would not be smaller than the round
                freed = tokens - ctx.expected_summary(tokens)
                candidates.append((self._job(ctx, a, b), freed, b - a - 1))
        return ctx.take_until_target(candidates)

    def _job(self, ctx: PassContext, start: int, end: int) -> Job:
        n = end - start
        after = ctx.messages[end] if end < len(ctx.messages) else None

        def build(out: JobOutput) -> list[BaseMessage]:
            header = f"Summary of the {n} messages that answered the user message above"
            return [
                replacement_message(
                    KIND_ROUND, header, out.summary or "", out, followed_by=after, messages=n
                )
            ]

        # The user message stays in place verbatim: the summarizer reads only the
        # span it replaces (every original token is summarized at most once).
        return ctx.summary_job(
            start, end, self.name, build, strategy="round", preview=f"round of {n} messages"
        )
