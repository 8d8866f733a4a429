"""Strategy 1: compress long runs of tool calls and results in history into one message."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage

from langchain_autocontext.messages import atomic_groups, marker, text_of, tool_call_ids
from langchain_autocontext.strategies.base import (
    KIND_TOOL_RUN,
    Job,
    JobOutput,
    PassContext,
    replacement_message,
)
from langchain_autocontext.summarizers.transcript import tool_calls_of

__all__ = ["ToolRunCompression"]


def _is_tool_group(ctx: PassContext, start: int, end: int) -> bool:
    m = ctx.messages[start]
    return bool(tool_call_ids(m)) and end - start > 1 and not marker(m)


class ToolRunCompression:
    """Replace each run of more than ``min_consecutive_tool_messages`` tool messages.

    A run is a maximal sequence of complete tool-call groups (an AI message with
    tool calls plus its results) inside history. Plan-note tools (todo lists) are
    passed to the summarizer as a one-line mention only (after the text the assistant
    wrote beside the call; their results left out). The replacement's header counts
    every call the run made: the one count of the run (the summarizer reads the plan
    calls as mentions).
    """

    name = "tool_run"

    def plan(self, ctx: PassContext) -> list[Job]:
        end = ctx.history_end
        runs: list[tuple[int, int]] = []
        run_start: int | None = None
        run_end = 0
        for i, j in atomic_groups(ctx.messages, ctx.body_start, end):
            if _is_tool_group(ctx, i, j) and not any(ctx.protected(k) for k in range(i, j)):
                if run_start is None:
                    run_start = i
                run_end = j
            else:
                if run_start is not None:
                    runs.append((run_start, run_end))
                run_start = None
        if run_start is not None:
            runs.append((run_start, run_end))
        limit = ctx.config.min_consecutive_tool_messages
        candidates = []
        for a, b in runs:  # oldest first, until the target
            tokens = ctx.tokens_of(a, b)
            if b - a > limit and ctx.worth_summarizing(tokens):
                freed = tokens - ctx.expected_summary(tokens)
                candidates.append((self._job(ctx, a, b), freed, b - a - 1))
        return ctx.take_until_target(candidates)

    def _job(self, ctx: PassContext, start: int, end: int) -> Job:
        span = ctx.messages[start:end]
        plan_tools = set(ctx.config.plan_note_tools)
        shown: list[BaseMessage] = []
        names: list[str] = []
        skip_results: set[str] = set()
        for m in span:
            # the calls whose arguments did not parse count too: each has its result
            # (an error) in the span, and the header says how many calls it replaced
            calls_made = tool_calls_of(m)
            if calls_made:
                names += [tc["name"] for tc in calls_made]
                # a plan tool's call whose arguments did not parse updated nothing (its
                # result is an error): read as the failed call it is, error and all
                parsed = isinstance(m, AIMessage) and not m.invalid_tool_calls
                if parsed and all(tc["name"] in plan_tools for tc in calls_made):
                    skip_results.update(tool_call_ids(m))
                    listed = ", ".join(sorted({tc["name"] for tc in calls_made}))
                    mention = f"(updated its plan notes with {listed})"
                    said = text_of(m).strip()  # what the assistant wrote beside the call
                    shown.append(AIMessage(content=f"{said}\n{mention}" if said else mention))
                    continue
            if getattr(m, "tool_call_id", None) in skip_results:
                continue
            shown.append(m)
        calls = len(names)
        distinct = ", ".join(dict.fromkeys(names))
        after = ctx.messages[end] if end < len(ctx.messages) else None

        def build(out: JobOutput) -> list[BaseMessage]:
            header = f"Compressed {calls} tool calls ({distinct}) and their results"
            return [
                replacement_message(
                    KIND_TOOL_RUN, header, out.summary or "", out, followed_by=after, calls=calls
                )
            ]

        return ctx.summary_job(
            start,
            end,
            self.name,
            build,
            strategy="tool_run",
            messages=shown,
            preview=f"{calls} tool calls: {distinct}",
        )
