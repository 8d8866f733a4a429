"""The summarizer interface and what its implementations share.

The compression strategies call a :class:`Summarizer` with a
:class:`SummaryRequest` (the span, the strategy, a token cap) and get a
:class:`SummaryResult` back (the text plus accounting: model calls, tokens, whether
a fallback answered). This module also holds the names of the strategies a
summarizer is asked about (:data:`STRATEGIES`), the tags and run name of summarizer
model calls, and the text helpers both implementations use (clipping a text to a
character or token limit).
"""

from __future__ import annotations

import asyncio
import contextvars
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from langchain_core.messages import BaseMessage
from langchain_core.runnables.config import run_in_executor

__all__ = [
    "STRATEGIES",
    "SUMMARIZER_RUN_NAME",
    "SUMMARIZER_TAGS",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "TextTokenCounter",
]


#: The spans a summarizer is asked about (see :class:`SummaryRequest`).
STRATEGIES: tuple[str, ...] = ("tool_run", "round", "large_message", "current_round", "recursive")

#: Tags on every summarizer model call. ``nostream`` is LangGraph's own opt-out of
#: ``stream_mode="messages"``; ``langsmith:nostream`` is LangSmith's.
SUMMARIZER_TAGS: tuple[str, ...] = ("autocontext:summarizer", "langsmith:nostream", "nostream")

#: ``run_name`` of every summarizer model call (visible in traces).
SUMMARIZER_RUN_NAME = "autocontext_summarizer"


# --- token counting ------------------------------------------------------------------
@runtime_checkable
class TextTokenCounter(Protocol):
    """Anything that counts the tokens of a text (the package's ``TokenCounter`` is one)."""

    def count_text(self, text: str) -> int:
        """Number of tokens in ``text``."""
        ...


class _ApproxCounter:
    """The fallback estimate: one token per four characters (rounded up)."""

    def count_text(self, text: str) -> int:
        return (len(text) + 3) // 4


_APPROX = _ApproxCounter()


# --- requests and results -------------------------------------------------------------
@dataclass(frozen=True)
class SummaryRequest:
    """What to summarize, and how large the summary may be.

    Attributes:
        messages: The span to summarize (stored as a tuple).
        strategy: One of :data:`STRATEGIES`: ``tool_run`` (a run of tool calls and
            results in history), ``round`` (one historical round without its user
            message, which the caller keeps), ``large_message`` (one large message of
            the current round), ``current_round`` (the current round's work so far),
            ``recursive`` (MemGPT FIFO eviction: fold ``messages`` into
            ``previous_summary``).
        max_tokens: Hard cap on the summary's tokens (>= 1).
        previous_summary: The recursive summary so far (``recursive`` only; ignored
            by the other strategies).
        target_tokens: Desired size (e.g. 30% of the span). Values above
            ``max_tokens`` are clamped to it.
    """

    messages: Sequence[BaseMessage]
    strategy: str
    max_tokens: int
    previous_summary: str | None = None
    target_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"Unknown summary strategy {self.strategy!r}; expected one of {STRATEGIES}"
            )
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        if self.target_tokens is not None:
            if self.target_tokens < 1:
                raise ValueError(f"target_tokens must be positive, got {self.target_tokens!r}")
            if self.target_tokens > self.max_tokens:
                object.__setattr__(self, "target_tokens", self.max_tokens)
        object.__setattr__(self, "messages", tuple(self.messages))

    @property
    def budget(self) -> int:
        """The size to aim for: ``target_tokens`` when given, else ``max_tokens``."""
        return self.target_tokens or self.max_tokens


@dataclass(frozen=True)
class SummaryResult:
    """A summary and what it cost.

    Attributes:
        text: The summary (within the request's ``max_tokens`` by the summarizer's
            counter).
        calls: Model calls made, failed attempts included (0 offline).
        input_tokens: Prompt tokens the model was billed for over all attempts (the
            responses' ``usage_metadata``); without it, the counted prompt of the call
            whose reply became the summary. A call that failed or timed out, or whose
            reply was rejected without reported usage, adds none. 0 offline.
        output_tokens: Tokens the model generated (the same rules), 0 offline.
        fallback: True when the LLM failed and the fallback summarizer answered.
        error: The last error when ``fallback`` is True.
        summarizer: Who wrote ``text``: ``"extractive"`` or ``"llm:<model name>"``.
    """

    text: str
    calls: int
    input_tokens: int
    output_tokens: int
    fallback: bool
    error: str | None
    summarizer: str


# --- the interface -----------------------------------------------------------------------
class Summarizer(ABC):
    """Base class of summarizers.

    Subclasses implement :meth:`summarize` (and may override :meth:`asummarize`,
    which by default runs :meth:`summarize` in a worker thread). The ``*_many``
    methods summarize independent spans concurrently, at most :attr:`concurrency`
    at a time, and return results in request order; an override of
    :meth:`summarize_many` alone is run in a worker thread by :meth:`asummarize_many`.
    """

    #: A short name for results and events (``"extractive"``, ``"llm:<model>"``).
    name: str = "summarizer"
    #: How many independent spans are summarized at once by the ``*_many`` methods.
    concurrency: int = 1
    _token_counter: TextTokenCounter | None = None

    @property
    def token_counter(self) -> TextTokenCounter | None:
        """The counter used for budgets (settable; ``None`` means a len/4 estimate)."""
        return self._token_counter

    @token_counter.setter
    def token_counter(self, counter: TextTokenCounter | None) -> None:
        if counter is not None and not callable(getattr(counter, "count_text", None)):
            raise TypeError("token_counter needs a count_text(str) -> int method")
        self._token_counter = counter

    def count(self, text: str) -> int:
        """Tokens of ``text`` by :attr:`token_counter` (or the len/4 estimate)."""
        return (self._token_counter or _APPROX).count_text(text)

    @abstractmethod
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize one span."""

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        """Async :meth:`summarize` (default: the sync method in a worker thread)."""
        return await run_in_executor(None, self.summarize, request)

    def summarize_many(self, requests: Sequence[SummaryRequest]) -> list[SummaryResult]:
        """Summarize independent spans on a bounded thread pool; results in request order.

        The first failure, in request order, is raised once the spans being summarized
        have finished; those not started yet are not started (as :meth:`asummarize_many`
        does)."""
        reqs = list(requests)
        workers = min(max(1, self.concurrency), len(reqs))
        if workers <= 1:
            return [self.summarize(r) for r in reqs]
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="autocontext-sum")
        try:
            # Each task runs in a copy of the caller's context (callbacks, config).
            futures = [pool.submit(contextvars.copy_context().run, self.summarize, r) for r in reqs]
            return [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    async def asummarize_many(self, requests: Sequence[SummaryRequest]) -> list[SummaryResult]:
        """Summarize independent spans concurrently, at most :attr:`concurrency` at a
        time; results in request order.

        The first failure, in request order, is raised and the other spans' tasks are
        cancelled first: none keeps calling a model after the call failed (as
        :meth:`summarize_many`, which starts no further span).

        A subclass that overrides :meth:`summarize_many` (a batch API, say) and not
        this method has its override run in a worker thread, as :meth:`asummarize`
        runs :meth:`summarize`: the async path summarizes as the sync path does."""
        reqs = list(requests)
        if _overridden_below(type(self), "summarize_many", "asummarize_many"):
            return await run_in_executor(None, self.summarize_many, reqs)
        semaphore = asyncio.Semaphore(max(1, self.concurrency))

        async def one(request: SummaryRequest) -> SummaryResult:
            async with semaphore:
                return await self.asummarize(request)

        tasks = [asyncio.ensure_future(one(r)) for r in reqs]
        try:
            return [await task for task in tasks]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _overridden_below(cls: type, sync: str, async_: str) -> bool:
    """Whether ``cls`` defines method ``sync`` in a class below the one defining
    ``async_``: a newer override of the sync method than of its async twin, which the
    async default must then honour."""
    mro = cls.__mro__
    sync_owner = next(k for k in mro if sync in vars(k))
    async_owner = next(k for k in mro if async_ in vars(k))
    return mro.index(sync_owner) < mro.index(async_owner)


# --- text helpers ----------------------------------------------------------------------------
def _clip(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to about ``limit`` characters with a marker; returns (text, kept chars)."""
    if len(text) <= limit:
        return text, len(text)
    keep = max(1, limit - 16)
    return f"{text[:keep]}…[+{len(text) - keep:,} chars]", keep


def _clip_to_tokens(text: str, limit: int, count: Callable[[str], int], note: str = "") -> str:
    """``text`` within ``limit`` tokens: whole lines dropped from the end, then characters.

    ``note`` (e.g. "[truncated]") is appended as a last line when anything was cut
    and it fits.
    """
    if count(text) <= limit:
        return text
    lines = text.split("\n")
    tail = f"\n{note}" if note else ""
    if note and count(note) > limit:
        tail = ""
    # Keep the most whole lines that fit (at least one): a binary search on how many,
    # so a long text is counted O(log lines) times, never once per line.
    lo, hi = 1, len(lines)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count("\n".join(lines[:mid]) + tail) <= limit:
            lo = mid
        else:
            hi = mid - 1
    lines = lines[:lo]
    candidate = "\n".join(lines) + tail
    if count(candidate) <= limit:
        return candidate
    # One line left that is still too long: binary search on its characters.
    line = lines[0]
    lo, hi = 0, len(line)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(line[:mid] + "…" + tail) <= limit:
            lo = mid
        else:
            hi = mid - 1
    cut = line.rfind(" ", 0, lo + 1)
    if cut > lo * 4 // 5:  # end on a word boundary when one is near
        lo = cut
    candidate = line[:lo].rstrip() + "…" + tail
    if count(candidate) <= limit:
        return candidate
    return line[:lo] if count(line[:lo]) <= limit else ""
