"""What every strategy shares: the pass context, jobs, and the replacement messages.

A strategy never performs I/O. It looks at the working messages and returns
:class:`Job` s: spans to replace, each with an optional summary request. The
pipeline offloads each span's originals *first*, runs the summaries (concurrently),
and only then builds the replacements, so a crash in between loses nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_autocontext.messages import (
    group_start,
    latest_user_index,
    mark,
    marker,
    message_chars,
    new_id,
    pending_call_index,
    text_of,
    tool_call_ids,
)

if TYPE_CHECKING:
    from langchain_autocontext.config import AutoContextConfig
    from langchain_autocontext.summarizers import SummaryRequest
    from langchain_autocontext.tokens import TokenCounter

__all__ = [
    "Job",
    "JobOutput",
    "PassContext",
    "Strategy",
    "offload_note",
    "replacement_ai",
    "summary_body",
]

#: Marker kinds of messages the package writes.
KIND_OFFLOADED = "offloaded"  # a message whose content was offloaded (id kept, preview shown)
KIND_SUMMARIZED = "summarized"  # a message whose content was summarized (id kept)
KIND_TOOL_RUN = "tool_run"
KIND_ROUND = "round_summary"
KIND_CURRENT = "current_round_summary"
KIND_RECURSIVE = "summary"  # the MemGPT recursive summary, first after the system message


@dataclass(frozen=True)
class JobOutput:
    """What the pipeline hands back to a job's ``build``."""

    offload_id: str
    summary: str | None
    span_tokens: int


@dataclass
class Job:
    """Replace ``messages[start:end]`` with what ``build`` returns.

    ``request`` asks the summarizer for a text (``None``: no summary needed).
    ``preview`` is stored with the offload record.
    """

    start: int
    end: int
    strategy: str
    build: Callable[[JobOutput], list[BaseMessage]]
    request: SummaryRequest | None = None
    preview: str = ""
    originals: list[BaseMessage] | None = None  # what to offload (default: the span)
    offload: bool = True  # False: the originals are in another job's offload of the same pass
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PassContext:
    """A read-only view of the working messages for one strategy pass."""

    messages: list[BaseMessage]
    config: AutoContextConfig
    counter: TokenCounter
    tokens: int
    target_tokens: int
    target_messages: int
    #: Names of the strategies that run after this one in the same pass.
    later: frozenset[str] = frozenset()

    @property
    def system_index(self) -> int | None:
        return 0 if self.messages and isinstance(self.messages[0], SystemMessage) else None

    @property
    def body_start(self) -> int:
        """First index after the system message and the recursive summary."""
        i = 0 if self.system_index is None else 1
        if i < len(self.messages) and (marker(self.messages[i]) or {}).get("kind") == (
            KIND_RECURSIVE
        ):
            i += 1
        return i

    @property
    def latest_user(self) -> int | None:
        return latest_user_index(self.messages)

    @property
    def pending(self) -> int | None:
        return pending_call_index(self.messages)

    @property
    def history_end(self) -> int:
        """End of what strategies 1-3 treat as history.

        Everything before the latest user message, and in a long single round
        (coding agents) everything older than the last ``last_keep`` messages too.
        """
        n = len(self.messages)
        lu = self.latest_user
        end = max(lu if lu is not None else self.body_start, n - self.config.last_keep)
        return group_start(self.messages, end)

    @property
    def fresh_start(self) -> int:
        """Start of the freshest tool results: the last group, when it is a tool call
        with its results (what the model is about to read); else the end."""
        n = len(self.messages)
        start = group_start(self.messages, n - 1) if n else 0
        if n and start < n - 1 and tool_call_ids(self.messages[start]):
            return start
        return n

    def protected(self, i: int) -> bool:
        """System message, the latest user message and a pending last tool call."""
        return i == self.system_index or i == self.latest_user or i == self.pending

    @property
    def over_tokens(self) -> bool:
        return self.tokens > self.target_tokens

    @property
    def over_messages(self) -> bool:
        return len(self.messages) > self.target_messages

    def tokens_of(self, start: int, end: int) -> int:
        return sum(self.counter.count_message(m) for m in self.messages[start:end])

    def is_large(self, i: int) -> bool:
        return message_chars(self.messages[i]) > self.config.large_payload_threshold

    def summary_job(
        self,
        start: int,
        end: int,
        name: str,
        build: Callable[[JobOutput], list[BaseMessage]],
        *,
        strategy: str,
        preview: str,
        messages: Sequence[BaseMessage] | None = None,
        span_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Job:
        """A job replacing ``messages[start:end]`` with a summary of about the ratio's size.

        ``messages`` is what the summarizer reads (default: the span itself).
        """
        from langchain_autocontext.summarizers import SummaryRequest

        tokens = self.tokens_of(start, end) if span_tokens is None else span_tokens
        request = SummaryRequest(
            messages=list(self.messages[start:end] if messages is None else messages),
            strategy=strategy,
            max_tokens=self.config.summary_max_tokens,
            target_tokens=self.summary_budget(tokens),
        )
        return Job(
            start, end, name, build, request=request, preview=preview[:200], extra=extra or {}
        )

    def summary_budget(self, span_tokens: int, ratio: float | None = None) -> int:
        """Target size of a summary of ``span_tokens`` tokens."""
        ratio = self.config.current_round_compression_ratio if ratio is None else ratio
        return max(48, min(self.config.summary_max_tokens, int(span_tokens * ratio)))


class Strategy(Protocol):
    """One compression step."""

    name: str

    def plan(self, ctx: PassContext) -> list[Job]:
        """Jobs that would shrink the context (empty when the strategy cannot help)."""
        ...


# --- replacement builders -----------------------------------------------------------
def offload_note(offload_id: str) -> str:
    """How the model is told to get a replaced span back."""
    return f'originals: reload_offloaded(offload_id="{offload_id}")'


def replacement_ai(kind: str, header: str, body: str, out: JobOutput, **info: Any) -> AIMessage:
    """An assistant-role message that stands for a replaced span."""
    msg = AIMessage(
        content=f"[{header}; {offload_note(out.offload_id)}]\n{body}".rstrip(), id=new_id()
    )
    return mark(msg, kind, offload_id=out.offload_id, **info)  # type: ignore[return-value]


def replacement_summary(body: str, out: JobOutput, evicted: int) -> HumanMessage:
    """The MemGPT recursive summary (user role: providers accept it right after system)."""
    msg = HumanMessage(
        content=(
            f"[Summary of {evicted} earlier messages; {offload_note(out.offload_id)}]\n{body}"
        ).rstrip(),
        id=new_id(),
    )
    return mark(msg, KIND_RECURSIVE, offload_id=out.offload_id, evicted=evicted)  # type: ignore[return-value]


def summary_body(message: BaseMessage) -> str:
    """The text of a package-written summary without its bracketed header line."""
    text = text_of(message)
    if text.startswith("[") and "\n" in text:
        return text.split("\n", 1)[1]
    return "" if text.startswith("[") else text


def span_messages(ctx: PassContext, start: int, end: int) -> Sequence[BaseMessage]:
    return ctx.messages[start:end]
