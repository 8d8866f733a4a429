"""Strategies 5 and 6: shrink the current round (everything after the latest user message)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from langchain_autocontext.messages import atomic_groups, mark, marker, message_chars
from langchain_autocontext.store import made_of
from langchain_autocontext.strategies.base import (
    KIND_CURRENT,
    KIND_SUMMARIZED,
    Job,
    JobOutput,
    PassContext,
    replacement_message,
    shrunk_calls,
)

__all__ = ["CurrentRoundCompression", "CurrentRoundLargeMessages"]


def _round_start(ctx: PassContext) -> int:
    lu = ctx.latest_user
    return ctx.body_start if lu is None else lu + 1


class CurrentRoundLargeMessages:
    """Strategy 5: summarize the current round's large messages one by one.

    Messages over ``large_payload_threshold`` were offloaded by strategy 3, so
    here "large" means over ``large_payload_threshold * current_round_compression_ratio``
    characters; each becomes a summary of about that ratio of its tokens (same id
    and role, so tool-call pairs hold).
    """

    name = "current_large"

    def plan(self, ctx: PassContext) -> list[Job]:
        if not ctx.over_tokens:
            return []
        floor = ctx.config.large_payload_threshold * ctx.config.current_round_compression_ratio
        candidates = []
        for i in range(_round_start(ctx), ctx.tail_start):  # the working set stays whole
            m = ctx.messages[i]
            if ctx.protected(i) or marker(m) or message_chars(m) <= floor or i in ctx.kept_results:
                continue
            tokens = ctx.counter.count_message(m)
            if not ctx.worth_summarizing(tokens):
                continue
            # replaced in place: its tag stays, so what it frees is its own tokens
            freed = ctx.cost(i) - ctx.expected_summary(tokens)
            candidates.append((self._job(ctx, i, tokens), freed, 0))
        jobs = ctx.take_until_target(candidates)
        # Strategy 6 summarizes this same span in one call: when even the best case
        # of summarizing these messages one by one cannot reach the target, strategy 6
        # will run anyway, and summarizing twice would only pay the summarizer twice.
        best = sum(j.extra["tokens"] - ctx.summary_budget(j.extra["tokens"]) for j in jobs)
        if (
            ctx.tokens - best > ctx.target_tokens
            and CurrentRoundCompression.name in ctx.later
            and CurrentRoundCompression().plan(ctx)  # it would really act (plan is pure)
        ):
            return []
        return jobs

    def _job(self, ctx: PassContext, i: int, tokens: int) -> Job:
        original = ctx.messages[i]

        keep = max(ctx.config.offload_single_preview, 32)

        def build(out: JobOutput) -> list[BaseMessage]:
            content = f"[Summarized from {tokens} tokens; {out.note}]\n" + (out.summary or "")
            update: dict[str, Any] = {"content": content.rstrip()}
            if isinstance(original, AIMessage) and original.tool_calls:
                # the calls stay (their results answer them), long arguments as previews
                update.update(shrunk_calls(original, keep, out.note))
            replaced = original.model_copy(update=update)
            return [made_of(mark(replaced, KIND_SUMMARIZED, offload_id=out.offload_id), original)]

        return ctx.summary_job(
            i,
            i + 1,
            self.name,
            build,
            strategy="large_message",
            preview=f"{original.type} message of {tokens} tokens",
            extra={"tokens": tokens},
        )


class CurrentRoundCompression:
    """Strategy 6: replace the current round's work so far with one summary.

    Keeps the latest user message and the last tool-call group (the results the
    model is about to read, or a call still waiting for its results).
    """

    name = "current_round"

    def plan(self, ctx: PassContext) -> list[Job]:
        if ctx.need_tokens <= 0 and ctx.need_messages <= 0:
            return []  # already at the target
        start = _round_start(ctx)
        limit = min(ctx.tail_start, ctx.fresh_start)  # the working set stays whole
        groups = atomic_groups(ctx.messages, start, limit)
        # Only the groups before the first protected (pinned) one: the summary takes
        # one contiguous span and a pinned message stays verbatim where it is.
        for k, (a, b) in enumerate(groups):
            if any(ctx.protected(i) for i in range(a, b)):
                groups = groups[:k]
                break
        if not groups:
            return []
        # The oldest groups, just enough to reach the target (counting the summary).
        end, tokens = start, 0
        for a, b in groups:
            end, tokens = b, tokens + ctx.tokens_of(a, b)
            freed = tokens - ctx.expected_summary(tokens, running=True)
            if freed >= ctx.need_tokens and (end - start - 1) >= ctx.need_messages:
                break
        span = ctx.messages[start:end]
        if len(span) == 1 and marker(span[0]):
            return []  # already compressed
        if not ctx.worth_summarizing(tokens, running=True) and not (
            ctx.over_messages and end - start > 2
        ):
            return []
        n = end - start
        after = ctx.messages[end] if end < len(ctx.messages) else None

        def build(out: JobOutput) -> list[BaseMessage]:
            header = f"Summary of the {n} messages of work so far on the current request"
            return [
                replacement_message(
                    KIND_CURRENT, header, out.summary or "", out, followed_by=after, messages=n
                )
            ]

        return [
            ctx.summary_job(
                start,
                end,
                self.name,
                build,
                strategy="current_round",
                preview=f"current round, {n} messages",
                running=True,
            )
        ]
