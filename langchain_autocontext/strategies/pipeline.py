"""The progressive pipeline: run the strategies in order until the context fits.

The pipeline is a generator that *yields* its I/O (offload writes, summarizer
calls, event records) and receives the results, so one body of logic serves the
sync driver (:func:`drive`) and the async one (:func:`adrive`).

Over 600 lines because what no strategy may compress is decided here, beside the run
that sets it aside and checks it: the floor, the pins and their limit, and the plan
note kept in the room the pins leave (the engine reads the floor from here too); a
module of their own would split the pin limit from the one error that enforces it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from langchain_autocontext.config import AutoContextConfig
from langchain_autocontext.errors import ContextBudgetError, InvariantViolationError
from langchain_autocontext.messages import (
    assert_valid_sequence,
    is_foreign_summary,
    is_pinned,
    latest_plan_note,
    latest_user_index,
    marker,
    open_loop_index,
    pending_call_index,
    pinned_group_indices,
    pinned_tokens,
    text_of,
)
from langchain_autocontext.metadata import as_shown, view_counts
from langchain_autocontext.strategies.base import (
    KIND_RECURSIVE,
    Job,
    JobOutput,
    PassContext,
    Strategy,
    clip_text,
    offload_note,
)
from langchain_autocontext.strategies.current_round import (
    CurrentRoundCompression,
    CurrentRoundLargeMessages,
)
from langchain_autocontext.strategies.fifo import FifoEviction
from langchain_autocontext.strategies.offload import LargeMessageOffload
from langchain_autocontext.strategies.rounds import RoundSummary
from langchain_autocontext.strategies.tool_runs import ToolRunCompression
from langchain_autocontext.summarizers import Summarizer, SummaryRequest, SummaryResult
from langchain_autocontext.tokens import TokenCounter

__all__ = [
    "PipelineResult",
    "adrive",
    "applied",
    "default_strategies",
    "developer_pin_tokens",
    "drive",
    "floor_tokens",
    "pinned_now",
    "run_pipeline",
    "soft_pins",
]


def default_strategies() -> list[Strategy]:
    """The seven strategies: lossless first, then summaries by age before size.

    Order 2, 3, 4, 6, 1, 5, 7. Offloading (2, 3) needs no summarizer and loses
    nothing (the preview and the offload id stay in place), so it runs before any
    summary. Then the summaries that take the *oldest* work first: historical rounds
    (4), then the oldest groups of the current round, just enough to reach the
    target (6). The summaries chosen by *size* rather than age, tool runs (1) and
    the current round's large messages (5), come after them: what an agent reuses
    next is mostly what it did last (on the coding runs of ``../shared/data``, 68%
    of the facts a next action reuses were last seen in the agent's own messages,
    which hold 49% of the tokens: ``benchmarks/composition.py``), so a whole run of
    tool calls in the middle of the history, or a large recent message, is
    summarized only when evicting older work cannot reach the target. FIFO eviction
    (7) closes. Every strategy leaves the protected tail alone, works oldest first
    and stops at the target.
    """
    return [
        LargeMessageOffload(keep_last=True),
        LargeMessageOffload(keep_last=False),
        RoundSummary(),
        CurrentRoundCompression(),
        ToolRunCompression(),
        CurrentRoundLargeMessages(),
        FifoEviction(),
    ]


# --- I/O requests the pipeline yields ---------------------------------------------------
@dataclass(frozen=True)
class OffloadOp:
    thread_id: str
    items: list[tuple[list[BaseMessage], str, str, int, dict[str, Any]]]  # + offload options


@dataclass(frozen=True)
class SummarizeOp:
    requests: list[SummaryRequest]


@dataclass(frozen=True)
class EventOp:
    thread_id: str
    event: dict[str, Any]


@dataclass(frozen=True)
class StartOp:
    """The pipeline compresses (it was triggered or forced): what it starts from and
    what it aims at. Nothing to do but report it (:data:`Progress`)."""

    thread_id: str
    tokens: int
    messages: int
    target_tokens: int


#: What the drivers report one compression's progress to (the LangGraph run's custom
#: stream): ``{"event": "compression_started" | "strategy" | "compression_finished", …}``.
Progress = Callable[[dict[str, Any]], None]


def applied(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the passes that changed the messages: a dropped pass's event (one
    that would have grown the context, :func:`run_pipeline`) records what it spent,
    its offloads included, and nothing it replaced."""
    return [e for e in events if not e.get("dropped")]


@dataclass
class PipelineResult:
    """What one pass of the pipeline did."""

    messages: list[BaseMessage]
    tokens_before: int
    tokens_after: int
    triggered: bool
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """A pass changed the messages (not one that was dropped)."""
        return bool(applied(self.events))


Pipeline = Generator[OffloadOp | SummarizeOp | EventOp | StartOp, Any, PipelineResult]
Msgs = Sequence[BaseMessage]


def _check_pass(before: Msgs, after: Msgs, strategy: str, skip: frozenset[str]) -> None:
    """The invariants every strategy must keep (a violation is a bug, never input)."""
    try:
        assert_valid_sequence(after)
    except InvariantViolationError as exc:
        raise InvariantViolationError(f"strategy {strategy!r} broke the sequence: {exc}") from None
    if before and isinstance(before[0], SystemMessage) and (not after or after[0] is not before[0]):
        raise InvariantViolationError(f"strategy {strategy!r} moved or changed the system message")
    lu, lu_after = latest_user_index(before, skip), latest_user_index(after, skip)
    if lu is not None and (lu_after is None or after[lu_after].id != before[lu].id):
        raise InvariantViolationError(f"strategy {strategy!r} dropped the latest user message")


def minimal_context(
    messages: Msgs, skip: Collection[str] = (), soft: Collection[int] = ()
) -> list[BaseMessage]:
    """What can never be compressed: system message, latest user message (none of the
    request-only ``skip``), pending call, and pinned messages with their tool-call groups;
    ``soft``: the indices of what is kept as a pin while there is room (:func:`soft_pins`)."""
    keep: list[int] = []
    if messages and isinstance(messages[0], SystemMessage):
        keep.append(0)
    for idx in (latest_user_index(messages, skip), pending_call_index(messages)):
        if idx is not None and idx not in keep:
            keep.append(idx)
    keep.extend(i for i in pinned_group_indices(messages) if i not in keep)
    keep.extend(i for i in soft if i not in keep)
    return [messages[i] for i in sorted(keep)]


def floor_tokens(
    messages: Msgs,
    counter: TokenCounter,
    tools: Any,
    tags: bool | str,
    skip: Collection[str] = (),
    *,
    plan_note_tools: Collection[str] = (),
    pin_limit: int = 0,
) -> int:
    """Tokens of :func:`minimal_context` as sent (tool schemas and tags included, the
    tags naming each message by the short id the view shows): the ``floor`` that
    :meth:`AutoContextConfig.thresholds` sets aside. ``plan_note_tools`` and
    ``pin_limit``: the config's, for what is kept as a pin while there is room
    (:func:`soft_pins`)."""
    kept = soft_pins(messages, counter, plan_note_tools, pin_limit, skip)
    return counter.count(minimal_context(as_shown(messages, tags), skip, kept), tools, tags=tags)


def _room_report(
    msgs: Msgs, counter: TokenCounter, tools: Any, reserved: int, skip: frozenset[str]
) -> str:
    """What the incompressible part is made of, with the switches that shrink each."""
    parts: list[str] = []
    if msgs and isinstance(msgs[0], SystemMessage):
        parts.append(
            f"the system message {counter.count_message(msgs[0])} (your prompt plus the "
            "package's section: instructions='compact', metadata_tags=False and "
            "self_management_tools=False shrink the section)"
        )
    if tools:
        parts.append(
            f"{len(tools)} tool schemas {counter.count_tools(tools)} (the package's own: "
            "self_management_tools=False)"
        )
    lu = latest_user_index(msgs, skip)
    if lu is not None:
        parts.append(f"the latest user message {counter.count_message(msgs[lu])}")
    pc = pending_call_index(msgs)
    if pc is not None:
        parts.append(f"a pending tool call {counter.count_message(msgs[pc])}")
    loop = open_loop_index(msgs)
    if loop is not None and loop != pc:
        round_ = msgs[loop:]
        parts.append(
            f"the tool calls in progress {sum(map(counter.count_message, round_))} (the last "
            f"assistant message's {len(round_) - 1} result(s), already shortened where that "
            "saves room, and its calls: the next model call answers them; fewer tool calls "
            "per turn shrink it)"
        )
    pinned = developer_pin_tokens(msgs, counter, skip)  # the latest user's: above
    if pinned:
        n = sum(is_pinned(m) for i, m in enumerate(msgs) if i != lu)
        parts.append(
            f"{n} pinned message(s) {pinned} with their tool-call groups "
            "(unpin some, or lower pin_max_tokens)"
        )
    if reserved:
        parts.append(
            f"set aside {reserved} (the view's notices; the provider's larger count: "
            "token_scale, window_scale)"
        )
    return "; ".join(parts)


def developer_pin_tokens(messages: Msgs, counter: Any, skip: Collection[str] = ()) -> int:
    """:func:`~.messages.pinned_tokens` less the latest user message (none of the request-only
    ``skip``): never compressed, a developer's pin on it (a long task statement) takes nothing
    from the pin limit until a later user message follows. The model's pins count it."""
    used = pinned_tokens(messages, counter)
    lu = latest_user_index(messages, skip)
    if lu is not None and is_pinned(messages[lu]):  # a user message is its own group
        used -= counter.count_message(messages[lu])
    return used


def soft_pins(
    messages: Msgs,
    counter: Any,
    tools: Collection[str],
    limit: int,
    skip: Collection[str] = (),
) -> list[int]:
    """Indices of what is kept as a pin while there is room for it: what the agent needs
    next that no one pinned. The latest plan note (:func:`~.messages.latest_plan_note`):
    its current plan, which ``TodoListMiddleware`` never shows again. And, when no real
    user message follows it (another library, ``SummarizationMiddleware``, summarized the
    request away), that library's latest summary: all the model has of its task. Only
    while they fit the room the pins leave under the pin ``limit``
    (:func:`developer_pin_tokens`), the newest first: they never count against that
    limit, and one larger is compressed as any message. One pinned already is a pin."""
    spans: list[range] = []
    note = latest_plan_note(messages, tools)
    if note is not None:
        spans.append(range(*note))
    stand_in = next(
        (i for i in range(len(messages) - 1, -1, -1) if is_foreign_summary(messages[i])),
        None,
    )
    if (
        stand_in is not None
        and not marker(messages[stand_in])
        and latest_user_index(messages[stand_in + 1 :], skip) is None
    ):
        spans.append(range(stand_in, stand_in + 1))
    if not spans:
        return []
    room = limit - developer_pin_tokens(messages, counter, skip)
    kept: list[int] = []
    for span in sorted(spans, key=lambda r: -r.start):
        if any(is_pinned(messages[i]) for i in span):
            continue
        size = sum(counter.count_message(messages[i]) for i in span)
        if size <= room:
            room -= size
            kept.extend(span)
    return sorted(kept)


def pinned_now(
    messages: Msgs, counter: Any, *, latest_user_free: bool = False, skip: Collection[str] = ()
) -> str:
    """`` Pinned now: <id> (<tokens>), …``: the pins of ``messages`` that count against
    the pin limit (``latest_user_free``: as :func:`developer_pin_tokens` counts them), so
    whoever must free room knows what to unpin (the model's tags do not show pins; the
    developer did not set the model's)."""
    lu = latest_user_index(messages, skip) if latest_user_free else None
    pinned = [m for i, m in enumerate(messages) if is_pinned(m) and i != lu]
    if not pinned:
        return ""
    shown = ", ".join(f"{m.id} ({counter.count_message(m):,} tokens)" for m in pinned[:10])
    more = f" and {len(pinned) - 10} more" if len(pinned) > 10 else ""
    return f" Pinned now: {shown}{more}."


def _check_pins(msgs: Msgs, limit: int, counter: TokenCounter, skip: frozenset[str]) -> None:
    """Pins past the pin limit: a clear error that names them and says how to free room.

    The model's pins are refused before they pass it (counting the latest user message,
    which this check leaves out until a later one follows it), so this is a developer's
    pin (``messages.pin``), or pins set under a larger limit (``max_tokens`` or
    ``pin_max_tokens`` lowered since, the thread resumed from its checkpoint)."""
    if not any(is_pinned(m) for m in msgs):
        return
    used = developer_pin_tokens(msgs, counter, skip)
    if used > limit:
        listed = pinned_now(msgs, counter, latest_user_free=True, skip=skip)
        raise ContextBudgetError(
            f"Pinned messages take {used} tokens with their tool-call groups (a pin keeps "
            f"the call and results it is paired with), more than the pin limit of {limit} "
            "(pin_max_tokens, default max_tokens // 8; pins set under a larger max_tokens "
            "or pin_max_tokens keep their size when it is lowered): pinned messages are "
            f"never compressed.{listed} Unpin some: replace each by "
            "langchain_autocontext.pin(message, False) in the messages you pass, or, for a "
            'checkpointed graph thread, graph.update_state(config, {"messages": '
            "[pin(message, False)]}) with the message from graph.get_state(config) (same "
            "id: it replaces the pinned one); or raise pin_max_tokens. Nothing was sent and "
            "nothing changed: every message is kept as it was.",
            required_tokens=used,
            max_tokens=limit,
        )


def run_pipeline(
    messages: Sequence[BaseMessage],
    *,
    config: AutoContextConfig,
    counter: TokenCounter,
    thread_id: str,
    tools: Sequence[Any] | None = None,
    tags: bool | str = False,
    strategies: Sequence[Strategy] | None = None,
    force: bool = False,
    reserved_tokens: int = 0,
    reload_tool: bool = True,
    droppable_tokens: int = 0,
    headroom: int = 0,
    floor: int | None = None,
    request_only: frozenset[str] = frozenset(),
) -> Pipeline:
    """Compress ``messages`` if triggered (or ``force``); see the module docstring.

    ``config.max_tokens`` is what the messages may use; ``reserved_tokens`` is what
    the model's view adds on top (so errors quote the budget the user configured).
    ``reload_tool``: the model has ``reload_offloaded`` (from its first compression on),
    so a replacement names its offload as that call; else by its id alone.
    ``droppable_tokens``: the part of ``reserved_tokens`` the view drops rather than
    exceed the budget (the memory-pressure notice): the strategies still aim below
    ``config.max_tokens``, but a context that fits once it is dropped is sent, never
    refused with :class:`ContextBudgetError`.
    ``headroom``: tokens the messages leave free for what the caller adds before the
    model call (see :meth:`AutoContextConfig.thresholds`).
    ``floor``: :func:`floor_tokens` of ``messages`` with these ``tools`` and ``tags``,
    when the caller measured it already.
    ``request_only``: ids of messages sent with this call only: none is a user turn.
    """
    configured = config.max_tokens + reserved_tokens
    hard = config.max_tokens + max(0, min(droppable_tokens, reserved_tokens))
    reserve_note = (
        f" ({reserved_tokens} of the {configured} are set aside: what the model's view "
        "adds (instructions, working context, notices) and, when the provider counts this "
        "thread's requests larger than this package does, its calibration "
        "(state['autocontext']['token_scale'] and ['window_scale'])"
        if reserved_tokens
        else ""
    )
    strategies = list(default_strategies() if strategies is None else strategies)

    def count(msgs: Sequence[BaseMessage]) -> int:
        """Tokens as the view sends ``msgs`` (its tags name messages by short ids)."""
        return counter.count(as_shown(msgs, tags), tools, tags=tags)

    measured: list[Any] = [None, []]  # the message list last measured, its tag costs

    def tag_costs(msgs: list[BaseMessage]) -> list[int]:
        """What each message's tag adds as sent (strategies count what they free as
        sent: evicting twenty tagged messages frees twenty tags too). Measured once per
        message list: a pass that plans nothing leaves the list as it was."""
        if not tags:
            return []
        if measured[0] is not msgs:
            fmt = tags if isinstance(tags, str) else "seed"
            rendered = view_counts(as_shown(msgs, fmt), counter, tools=tools, fmt=fmt).counts
            measured[:] = [
                msgs,
                [r - counter.count_message(m) for r, m in zip(rendered, msgs, strict=True)],
            ]
        return measured[1]

    msgs = list(messages)
    limit = config.model_copy(update={"max_tokens": configured}).pin_limit
    _check_pins(msgs, limit, counter, request_only)
    tokens = count(msgs)
    before = tokens
    if floor is None:
        floor = floor_tokens(
            msgs,
            counter,
            tools,
            tags,
            request_only,
            plan_note_tools=config.plan_note_tools,
            pin_limit=limit,
        )
    triggered = force or config.due(tokens, len(msgs), floor, headroom)
    if not triggered:
        return PipelineResult(msgs, before, tokens, triggered=False)
    # what is kept as a pin while there is room (soft_pins) is set aside; the last
    # resorts compress it, so it never makes a context impossible to fit
    if floor > hard and floor_tokens(msgs, counter, tools, tags, request_only) > hard:
        raise ContextBudgetError(
            f"What can never be compressed (system prompt, tool schemas, latest user "
            f"message, pinned messages) alone counts {floor + reserved_tokens} tokens, more "
            f"than max_tokens={configured}{reserve_note}. "
            "What takes the room: "
            f"{_room_report(msgs, counter, tools, reserved_tokens, request_only)}. "
            "Raise max_tokens, shorten the system prompt or the user message, unpin messages "
            "or send fewer tools. Nothing was sent.",
            required_tokens=floor + reserved_tokens,
            max_tokens=configured,
        )
    target_tokens = config.thresholds(floor, headroom).target
    target_messages = config.target_messages
    events: list[dict[str, Any]] = []
    yield StartOp(thread_id, tokens, len(msgs), target_tokens)

    def fits() -> bool:
        return tokens <= target_tokens and len(msgs) <= target_messages

    def run_pass(
        strategy: Strategy,
        later: frozenset[str] = frozenset(),
        *,
        target: int | None = None,
        keep_tail: bool = True,
    ) -> Any:
        """Plan and apply one strategy; returns (messages, tokens) or None (no jobs)."""
        ctx = PassContext(
            msgs,
            config,
            counter,
            tokens,
            target_tokens if target is None else target,
            target_messages,
            later=later,
            keep_tail=keep_tail,
            floor_tokens=floor,
            tag_costs=tag_costs(msgs),
            request_only=request_only,
            # the last resorts may compress what is kept while there is room, as they do
            # the protected tail
            soft_pins=frozenset(
                soft_pins(msgs, counter, config.plan_note_tools, limit, request_only)
                if keep_tail
                else ()
            ),
        )
        jobs = strategy.plan(ctx)
        if not jobs:
            return None
        started = time.perf_counter()
        new, stats = yield from _apply_jobs(
            msgs, jobs, strategy.name, thread_id, ctx, reload_tool=reload_tool
        )
        _check_pass(msgs, new, strategy.name, request_only)
        new_tokens = count(new)
        # No pass grows the context: one whose estimate missed (a replacement's header,
        # an offload id that tokenizes long) is dropped, as if it had planned nothing.
        # Its event says so and keeps what it spent; what it offloaded stays in the
        # store, unreferenced.
        dropped = new_tokens > tokens
        event = {
            "strategy": strategy.name,
            "tokens_before": tokens,
            "tokens_after": tokens if dropped else new_tokens,
            "messages_before": len(msgs),
            "messages_after": len(msgs) if dropped else len(new),
            "target_tokens": ctx.target_tokens,
            "seconds": round(time.perf_counter() - started, 6),
            **stats,
            **({"dropped": True} if dropped else {}),
        }
        yield EventOp(thread_id, event)
        events.append(event)
        return None if dropped else (new, new_tokens)

    # The tool results just returned, too large to fit under the hard budget beside what
    # is never compressed, are shortened first: compressing older work cannot make room
    # for them, and the last resort below would shorten them anyway, after every older
    # step had been summarized or evicted for nothing (a 9,000-token result at an
    # 8,000-token budget left the model its last step alone, in 735 tokens).
    loop = open_loop_index(msgs)
    if loop is not None and floor + count(msgs[loop:]) - count([]) > config.max_tokens:
        done = yield from run_pass(
            LargeMessageOffload(keep_last=False, fresh=True),
            target=config.max_tokens,
            keep_tail=False,
        )
        if done is not None:
            msgs, tokens = done

    # The strategies in order; the last one (FIFO) may repeat while it makes progress.
    queue = list(strategies)
    fifo_rounds = 0
    while queue and (force or not fits()):
        strategy = queue.pop(0)
        done = yield from run_pass(strategy, frozenset(s.name for s in queue))
        if done is None:
            continue
        progressed = done[1] < tokens or len(done[0]) < len(msgs)
        msgs, tokens = done
        if isinstance(strategy, FifoEviction) and progressed and fifo_rounds < 3 and not fits():
            fifo_rounds += 1
            queue.append(strategy)

    # Last resorts, only to get under the hard budget: the protected tail gives way
    # (its tool results become previews, then it is evicted into the summary), and
    # finally even the freshest tool results are offloaded, whatever their size (the
    # model reloads what it needs); a call is never refused for what can be offloaded.
    for last_resort in (
        LargeMessageOffload(keep_last=False),
        FifoEviction(squeeze=True),
        LargeMessageOffload(keep_last=False, fresh=True),
    ):
        if tokens <= config.max_tokens:
            break
        done = yield from run_pass(last_resort, target=config.max_tokens, keep_tail=False)
        if done is not None:
            msgs, tokens = done
    if tokens > config.max_tokens:
        msgs, tokens = _trim_summary(msgs, tokens, config, count)
    if tokens > hard:
        raise ContextBudgetError(
            f"After every strategy the context still counts {tokens + reserved_tokens} tokens, "
            f"more than max_tokens={configured}{reserve_note}: what cannot be compressed "
            "(system prompt, tool schemas, latest user message, the tool calls in progress, "
            "pinned messages: "
            f"{_room_report(msgs, counter, tools, reserved_tokens, request_only)}) is too large. "
            "Raise max_tokens, unpin messages or lower large_payload_threshold. Nothing was "
            "sent.",
            required_tokens=tokens + reserved_tokens,
            max_tokens=configured,
        )
    return PipelineResult(msgs, before, tokens, triggered=True, events=events)


def _apply_jobs(
    msgs: list[BaseMessage],
    jobs: list[Job],
    strategy: str,
    thread_id: str,
    ctx: PassContext,
    *,
    reload_tool: bool = True,
) -> Generator[OffloadOp | SummarizeOp, Any, tuple[list[BaseMessage], dict[str, Any]]]:
    """Offload originals first, then summarize, then build the replacements."""
    items = []
    for job in jobs:
        originals = job.originals if job.originals is not None else msgs[job.start : job.end]
        tokens = sum(map(ctx.counter.count_message, originals))
        items.append(
            (list(originals), strategy, job.preview, tokens, ctx.offload_options(originals))
        )
    offloading = [k for k, job in enumerate(jobs) if job.offload]
    written = yield OffloadOp(thread_id, [items[k] for k in offloading])
    records: dict[int, Any] = dict(zip(offloading, written, strict=True))
    requests = [job.request for job in jobs if job.request is not None]
    results: list[SummaryResult] = (yield SummarizeOp(requests)) if requests else []
    by_job: dict[int, SummaryResult] = {}
    it = iter(results)
    for k, job in enumerate(jobs):
        if job.request is not None:
            by_job[k] = next(it)
    new = list(msgs)
    touched = 0
    for k in sorted(range(len(jobs)), key=lambda k: jobs[k].start, reverse=True):
        job = jobs[k]
        res = by_job.get(k)
        oid = records[k].offload_id if k in records else ""
        out = JobOutput(
            offload_id=oid,
            summary=res.text if res else None,
            span_tokens=items[k][3],
            note=offload_note(oid, reload_tool) if oid else "",
        )
        new[job.start : job.end] = _no_larger(job, out, ctx.counter, msgs[job.start : job.end])
        touched += job.end - job.start
    stats = {
        "messages_touched": touched,
        "offload_ids": [r.offload_id for r in records.values()],
        "summarizer_calls": sum(r.calls for r in results),
        "summarizer_input_tokens": sum(r.input_tokens for r in results),
        "summarizer_output_tokens": sum(r.output_tokens for r in results),
        "summarizer_fallbacks": sum(1 for r in results if r.fallback),
        "summarizer_errors": [r.error for r in results if r.error],
    }
    return new, stats


def _no_larger(
    job: Job, out: JobOutput, counter: TokenCounter, span: list[BaseMessage]
) -> list[BaseMessage]:
    """The job's replacement, its summary clipped when it would not be smaller than
    the span it replaces; a replacement that still is not smaller leaves the span as
    it was (a summary never grows the context; the offload written for it is kept)."""
    built = job.build(out)
    if not out.summary or not out.span_tokens:
        return built
    for _ in range(3):
        size = sum(counter.count_message(m) for m in built)
        if size < out.span_tokens or not out.summary:
            break
        room = counter.count_text(out.summary) - (size - out.span_tokens) - 8
        out = replace(out, summary=clip_text(out.summary, max(0, room), counter))
        built = job.build(out)
    if job.originals is None and sum(counter.count_message(m) for m in built) >= out.span_tokens:
        return span  # nothing else rides on this job: keep the span verbatim
    return built


def _trim_summary(
    msgs: list[BaseMessage], tokens: int, config: AutoContextConfig, count: Any
) -> tuple[list[BaseMessage], int]:
    """Last resort: shorten the recursive summary until the hard budget holds (drop it
    when even its header does not fit)."""
    idx = 1 if msgs and isinstance(msgs[0], SystemMessage) else 0
    if idx >= len(msgs) or (marker(msgs[idx]) or {}).get("kind") != KIND_RECURSIVE:
        return msgs, tokens
    text = text_of(msgs[idx])
    header, _, body = text.partition("\n")
    while tokens > config.max_tokens and body:
        body = body[: len(body) // 2]
        trimmed = msgs[idx].model_copy(
            update={"content": f"{header}\n{body}… [summary trimmed to fit]" if body else header}
        )
        msgs = [*msgs[:idx], trimmed, *msgs[idx + 1 :]]
        tokens = count(msgs)
    if tokens > config.max_tokens:
        # Even its header does not fit: the summary goes. Nothing is lost: every
        # original it stood for stays in the thread's history (search_history).
        msgs = [*msgs[:idx], *msgs[idx + 1 :]]
        tokens = count(msgs)
    return msgs, tokens


# --- drivers --------------------------------------------------------------------------
class _Watch:
    """One compression as the drivers report it to ``progress``: started, each
    strategy's event once it is recorded (the fields the store keeps), finished (or
    failed, with the error's class); nothing for a pipeline that does not compress."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.start: StartOp | None = None
        self.clock = 0.0

    def started(self, op: StartOp) -> None:
        self.start, self.clock = op, time.perf_counter()
        self._emit(
            event="compression_started",
            tokens=op.tokens,
            messages=op.messages,
            target_tokens=op.target_tokens,
        )

    def strategy(self, op: EventOp) -> None:
        self._emit(**op.event, event="strategy")

    def finished(self, result: PipelineResult) -> None:
        if self.start is not None:
            self._emit(
                event="compression_finished",
                tokens_before=result.tokens_before,
                tokens_after=result.tokens_after,
                messages_before=self.start.messages,
                messages_after=len(result.messages),
                strategies=[e["strategy"] for e in result.events],
                seconds=round(time.perf_counter() - self.clock, 6),
            )

    def failed(self, exc: BaseException) -> None:
        if self.start is not None:
            self._emit(
                event="compression_finished",
                tokens_before=self.start.tokens,
                error=type(exc).__name__,
                seconds=round(time.perf_counter() - self.clock, 6),
            )

    def _emit(self, **fields: Any) -> None:
        if self.progress is not None and self.start is not None:
            self.progress(
                {"event": fields.pop("event"), "thread_id": self.start.thread_id, **fields}
            )


def drive(
    gen: Pipeline, store: Any, summarizer: Summarizer, progress: Progress | None = None
) -> PipelineResult:
    """Run the pipeline synchronously against a store and a summarizer, reporting a
    compression's progress to ``progress`` (see :class:`_Watch`)."""
    watch = _Watch(progress)
    try:
        op = next(gen)
        while True:
            if isinstance(op, OffloadOp):
                reply: Any = [
                    store.offload(op.thread_id, m, strategy=s, preview=p, tokens=t, **o)
                    for m, s, p, t, o in op.items
                ]
            elif isinstance(op, SummarizeOp):
                reply = summarizer.summarize_many(op.requests)
            elif isinstance(op, StartOp):
                watch.started(op)
                reply = None
            else:
                store.record_event(op.thread_id, op.event)
                watch.strategy(op)
                reply = None
            op = gen.send(reply)
    except StopIteration as stop:
        watch.finished(stop.value)
        return stop.value
    except BaseException as exc:  # a cancelled or interrupted compaction ends too
        watch.failed(exc)
        raise


async def adrive(
    gen: Pipeline, store: Any, summarizer: Summarizer, progress: Progress | None = None
) -> PipelineResult:
    """Run the pipeline with the store's and summarizer's async methods (``progress``:
    as :func:`drive` reports it)."""
    watch = _Watch(progress)
    try:
        op = next(gen)
        while True:
            if isinstance(op, OffloadOp):
                reply: Any = [
                    await store.aoffload(op.thread_id, m, strategy=s, preview=p, tokens=t, **o)
                    for m, s, p, t, o in op.items
                ]
            elif isinstance(op, SummarizeOp):
                reply = await summarizer.asummarize_many(op.requests)
            elif isinstance(op, StartOp):
                watch.started(op)
                reply = None
            else:
                await store.arecord_event(op.thread_id, op.event)
                watch.strategy(op)
                reply = None
            op = gen.send(reply)
    except StopIteration as stop:
        watch.finished(stop.value)
        return stop.value
    except BaseException as exc:  # a cancelled or interrupted compaction ends too
        watch.failed(exc)
        raise
