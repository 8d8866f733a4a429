"""The engine's promises, checked as properties over the real trajectories of ../shared/data.

Each example replays a real run (a coding agent, with tool calls or writing its commands
in its text, or a customer-service agent) call by call through ``AutoContext.compress``
at a budget hypothesis picks, as a ``pre_model_hook`` drives it, and checks what issue
11 asks of every strategy:

* the protected tail (the newest whole groups within ``keep_ratio`` of the room the
  target leaves beside what can never be compressed) reaches the model verbatim;
* no strategy runs once the target holds (compression stops at the target);
* no pass grows the context, and every replacement is smaller than what it replaced;
* no original message is read by the summarizer twice (summaries extend themselves);
* the two running summaries (the recursive one and the current round's) take at most a
  sixteenth of the room each;
* a pinned message reaches the model verbatim on every later call;
* a result of a ``keep_tool_results`` tool is never masked or offloaded on its own;
* every summary's header says what the offload it names holds (the model reads the
  header as a fact about the conversation), also over generated multi-round chats.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from functools import cache
from typing import Any

import pytest
from _builders import DATA, benchmark, log_text
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig, ContextBudgetError
from langchain_autocontext.messages import (
    atomic_groups,
    is_user_turn,
    marker,
    message_chars,
    pin,
    seeded_ids,
    sent_calls,
    text_of,
)
from langchain_autocontext.replay import load_trajectories
from langchain_autocontext.store import OffloadStore
from langchain_autocontext.strategies.base import (
    KIND_CURRENT,
    KIND_RECURSIVE,
    KIND_ROUND,
    KIND_TOOL_RUN,
    SPAN_KINDS,
    is_summary,
    summary_body,
)
from langchain_autocontext.strategies.pipeline import minimal_context
from langchain_autocontext.summarizers import ExtractiveSummarizer, SummaryRequest, SummaryResult

#: The data sets' runs as recorded, and the coding runs as an agent without tool calling
#: records them (commands in its text, outputs as user messages: ``--text-protocol``).
FILES = ("mini-swe-agent-dev.jsonl", "tau-bench-airline.jsonl", "mini-swe-agent-dev.jsonl text")
LAST_RESORTS = {"offload_fresh"}
#: Room the model's view sets aside beyond what is never compressed (notices, working
#: context), as ContextBudgetError's message itemizes it: at most this many tokens here.
SET_ASIDE = 200


@cache
def _runs(name: str) -> list[list[BaseMessage]]:
    file, _, shape = name.partition(" ")
    path = DATA / file
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared real-trajectory data is not beside the repo)")
    trajectories = load_trajectories(path, limit=12)
    if shape == "text":
        trajectories = [benchmark("compare_peers").text_protocol(t) for t in trajectories]
    return [t.messages for t in trajectories]


class RecordingSummarizer(ExtractiveSummarizer):
    """The offline summarizer, remembering the id of every message it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.read: Counter[str] = Counter()
        self.summaries_read = 0

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.read.update(m.id for m in request.messages if m.id)
        self.summaries_read += sum(is_summary(m) for m in request.messages)
        return super().summarize(request)


def _replay(
    messages: list[BaseMessage],
    budget: int,
    pin_at: int | None = None,
    *,
    ids: int,
    **fields: Any,
) -> tuple[AutoContext, RecordingSummarizer, list[dict[str, Any]]]:
    """Drive ``compress`` before every recorded assistant message; check each call.

    ``ids``: the seed of the ids the package draws (:func:`seeded_ids`). An offload id
    is shown in the context and its token count varies, so the sizes of what a replay
    writes depend on them: hypothesis draws the seed, and a failure it finds replays."""
    with seeded_ids(ids):
        return _replay_seeded(messages, budget, pin_at, **fields)


def _replay_seeded(
    messages: list[BaseMessage], budget: int, pin_at: int | None, **fields: Any
) -> tuple[AutoContext, RecordingSummarizer, list[dict[str, Any]]]:
    summarizer = RecordingSummarizer()
    cfg = AutoContextConfig(
        max_tokens=budget, self_management_tools=False, metadata_tags=False, **fields
    )
    ac = AutoContext(cfg, store=OffloadStore(InMemoryStore()), summarizer=summarizer)
    if pin_at is not None:
        messages = [pin(m) if k == pin_at else m for k, m in enumerate(messages)]
    working: list[BaseMessage] = []
    cursor = 0
    calls: list[dict[str, Any]] = []
    for point in [k for k, m in enumerate(messages) if isinstance(m, AIMessage)]:
        working.extend(messages[cursor:point])
        cursor = point
        before = list(working)
        try:
            result = ac.compress(working, thread_id="t")
        except ContextBudgetError:
            # promised when what can never be compressed passes the budget alone: an agent
            # reading outputs as user messages got one larger than the window (its latest
            # user message); a tool result that large would have been offloaded
            floor = ac.counter.count(minimal_context(working))
            assert floor > budget - SET_ASIDE, (floor, budget)
            break
        working = list(result.messages)
        calls.append(
            {"before": before, "result": result, "pinned": pin_at is not None and pin_at < point}
        )
    return ac, summarizer, calls


def _tail(ac: AutoContext, msgs: list[BaseMessage], target: int) -> list[BaseMessage]:
    """The protected tail as the documentation defines it, computed independently
    (``target``: the pipeline's, as its events record it)."""
    cfg = ac.config
    count = ac.counter.count
    floor = count(minimal_context(msgs))
    room = int(max(0, target - floor) * cfg.keep_ratio)
    start = 1 if msgs and isinstance(msgs[0], SystemMessage) else 0
    groups = atomic_groups(msgs, start, len(msgs))
    if not groups:
        return []
    first, used = groups[-1][0], count(msgs[groups[-1][0] :]) - count([])
    for a, b in reversed(groups[:-1]):
        used += count(msgs[a:b]) - count([])
        if used > room:
            break
        first = a
    return msgs[first:]


budgets = st.sampled_from([4_000, 8_000, 16_000])
#: (file, run, seed of the package's ids)
runs = st.tuples(st.sampled_from(FILES), st.integers(0, 11), st.integers(0, 2**16))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs, budget=budgets)
def test_real_runs_keep_the_tail_stop_at_the_target_and_never_grow(run, budget) -> None:
    name, k, ids = run
    trajectories = _runs(name)
    messages = trajectories[k % len(trajectories)]
    ac, summarizer, calls = _replay(messages, budget, ids=ids)
    for call in calls:
        result, before = call["result"], call["before"]
        assert result.tokens_after <= ac.config.max_tokens
        # what the package writes never puts two assistant turns in a row (Anthropic
        # merges them, Gemini rejects a function call right after a model turn)
        out = result.messages
        for m, nxt in itertools.pairwise(out):
            if marker(m) and isinstance(nxt, AIMessage):
                assert not isinstance(m, AIMessage), (marker(m), nxt.id)
        events = result.events
        strategies = {e["strategy"] for e in events}
        # the agent's own messages stay verbatim: one is offloaded only when it is large
        # or by the last resort (observation masking takes what it read, not what it wrote)
        was = {m.id: m for m in before}
        for m in out:
            if isinstance(m, AIMessage) and (marker(m) or {}).get("kind") == "offloaded":
                original = was.get(m.id)
                if original is not None and not marker(original):
                    large = message_chars(original) > ac.config.large_payload_threshold
                    assert large or strategies & LAST_RESORTS, (m.id, strategies)
        for e in events:
            # each pass shrinks the context (a summary is never larger than its span)
            assert e["tokens_after"] <= e["tokens_before"], e
            if e["strategy"] not in LAST_RESORTS:
                # no strategy runs once the target holds
                over = (
                    e["tokens_before"] > e["target_tokens"]
                    or e["messages_before"] > ac.config.target_messages
                )
                assert over, e
        target = events[0]["target_tokens"] if events else 0
        if not events or strategies & LAST_RESORTS or result.tokens_after > target:
            continue
        # the running summaries leave the room to the verbatim messages: a sixteenth each
        # (of the room this compaction had; one written earlier may have had a little more)
        room = target - ac.counter.count(minimal_context(before))
        cap = max(48, min(ac.config.summary_max_tokens, room // 16))
        for m in result.messages:
            if (marker(m) or {}).get("kind") in (KIND_CURRENT, KIND_RECURSIVE):
                assert ac.counter.count_text(summary_body(m)) <= cap * 1.1 + 8, (room, m)
        # the protected tail reaches the model verbatim (same ids, same content)
        sent = {m.id: m for m in result.messages}
        for m in _tail(ac, before, target):
            assert m.id in sent and sent[m.id].content == m.content and not marker(sent[m.id])
    # each original is read by the summarizer at most once over the whole run
    twice = {i: n for i, n in summarizer.read.items() if n > 1}
    assert not twice, twice
    assert summarizer.summaries_read == 0  # a summary is carried, never summarized again


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(run=runs, budget=budgets, where=st.floats(0.0, 0.6), threshold=st.sampled_from([6, 12]))
def test_a_pinned_message_survives_every_strategy(run, budget, where, threshold) -> None:
    name, k, ids = run
    trajectories = _runs(name)
    messages = trajectories[k % len(trajectories)]
    at = 1 + int(where * (len(messages) - 2))
    target = messages[at]
    group = next((a, b) for a, b in atomic_groups(messages) if a <= at < b)
    probe = AutoContext(AutoContextConfig(max_tokens=budget))
    # beyond a sensible pin limit the pin tool refuses the pin: try another message
    assume(probe.counter.count(messages[group[0] : group[1]]) <= budget // 8)
    # a short message threshold compresses the short runs too, while the pin is there
    _ac, _summarizer, calls = _replay(messages, budget, pin_at=at, ids=ids, msg_threshold=threshold)
    compressed = 0
    for call in calls:
        if not call["pinned"]:
            continue
        sent = {m.id: m for m in call["result"].messages}
        assert target.id in sent, "the pinned message left the context"
        assert sent[target.id].content == target.content
        compressed += bool(call["result"].events)
    assume(compressed)  # else nothing was compressed while it was pinned: no evidence


def _tool_names(messages: list[BaseMessage]) -> list[str]:
    return sorted({tc["name"] for m in messages if isinstance(m, AIMessage) for tc in m.tool_calls})


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs, budget=st.sampled_from([4_000, 8_000]), data=st.data())
def test_results_of_kept_tools_are_sent_whole_or_summarized_with_their_span(
    run, budget, data
) -> None:
    name, k, ids = run
    trajectories = _runs(name)
    messages = trajectories[k % len(trajectories)]
    names = _tool_names(messages)
    assume(names)
    kept = data.draw(st.sets(st.sampled_from(names), min_size=1), label="kept")
    originals = {m.id: m for m in messages}
    ac, _summarizer, calls = _replay(messages, budget, keep_tool_results=tuple(kept), ids=ids)
    last_resort: set[str] = set()  # offloads of the last resort (it may take anything)
    for call in calls:
        result = call["result"]
        assert result.tokens_after <= ac.config.max_tokens
        for e in result.events:
            if e["strategy"] in LAST_RESORTS:
                last_resort.update(e.get("offload_ids") or ())
        called = {
            tc["id"]: tc["name"]
            for m in result.messages
            if isinstance(m, AIMessage)
            for tc in m.tool_calls
        }
        for m in result.messages:
            if isinstance(m, ToolMessage) and called.get(m.tool_call_id) in kept:
                # here it is the original; otherwise it went into a summary with its span
                if (marker(m) or {}).get("offload_id") in last_resort:
                    continue
                assert not marker(m), (m.id, marker(m))
                assert m.content == originals[m.id].content


RECURSIVE_HEADER = re.compile(
    r"\[Summary of (\d+) (?:earlier messages|messages, (all|the last (\d+)) after the "
    r"(request|message) below);"
)


def _absorbed(store: OffloadStore, summary: BaseMessage) -> list[BaseMessage]:
    """The messages a recursive summary absorbed, oldest first (through the summaries
    it extended, each in its offload's first place)."""
    held = store.reload("t", (marker(summary) or {})["offload_id"]).messages
    if held and (marker(held[0]) or {}).get("kind") == KIND_RECURSIVE:
        return [*_absorbed(store, held[0]), *held[1:]]
    return held


def _position(store: OffloadStore, order: dict[str, int], m: BaseMessage) -> int:
    """Where ``m`` stood in the thread's history: a summary where its first original did."""
    info = marker(m) or {}
    if info.get("kind") in SPAN_KINDS:
        return _position(store, order, store.reload("t", info["offload_id"]).messages[0])
    return order[m.id or ""]


def _check_headers(ac: AutoContext, calls: list[dict[str, Any]]) -> int:
    """Every summary sent says in its header what the offload it names holds: a round's
    or the current round's summary how many messages it replaced (none of them a user
    request: each replaces work that answered the one above it), a tool run's how many
    calls, the recursive summary how many messages it absorbed in all and how many of
    them came after the message kept below it (it stands before the latest request,
    and work done on that request is no "earlier messages"). Returns how many summaries
    were checked."""
    store = ac.store
    assert store is not None
    order: dict[str, int] = {}
    for k, entry in enumerate(store.iter_history("t")):
        order.setdefault(entry.message.id or "", k)
    seen: set[str] = set()
    for call in calls:
        sent = call["result"].messages
        for i, m in enumerate(sent):
            info = marker(m) or {}
            kind, oid = info.get("kind"), info.get("offload_id")
            if kind not in (KIND_ROUND, KIND_CURRENT, KIND_TOOL_RUN, KIND_RECURSIVE):
                continue
            if oid in seen:
                continue
            seen.add(oid)
            held = store.reload("t", oid).messages
            header = text_of(m).split("\n", 1)[0]
            if kind in (KIND_ROUND, KIND_CURRENT):
                assert header.startswith(f"[Summary of the {len(held)} messages "), header
                assert not any(is_user_turn(x) for x in held), (header, [x.type for x in held])
            elif kind == KIND_TOOL_RUN:
                calls_held = sum(len(sent_calls(x)) for x in held)
                assert header.startswith(f"[Compressed {calls_held} tool calls "), header
            else:
                found = RECURSIVE_HEADER.match(header)
                assert found, header
                absorbed = _absorbed(store, m)
                assert int(found[1]) == len(absorbed), header
                below = sent[i + 1] if i + 1 < len(sent) else None
                at = _position(store, order, below) if below is not None else len(order)
                later = sum(_position(store, order, x) > at for x in absorbed)
                said = (
                    0 if found[2] is None else len(absorbed) if found[2] == "all" else int(found[3])
                )
                assert said == later, (header, later)
    return len(seen)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs, budget=budgets)
def test_every_summary_header_says_what_its_offload_holds_in_real_runs(run, budget) -> None:
    name, k, ids = run
    trajectories = _runs(name)
    ac, _summarizer, calls = _replay(trajectories[k % len(trajectories)], budget, ids=ids)
    _check_headers(ac, calls)


@st.composite
def chats(draw: st.DrawFn) -> list[BaseMessage]:
    """A multi-round chat: each request short or a pasted log (large enough to be
    offloaded in place), then tool calls (some with arguments that did not parse, as
    create_agent answers them with an error) with outputs of varied sizes, then an
    answer; the last request still being worked on."""
    msgs: list[BaseMessage] = [SystemMessage("You are a support agent.", id="sys")]
    rounds = draw(st.integers(3, 8), label="rounds")
    n = itertools.count()
    for r in range(rounds):
        text = f"Request {r}: look into ticket T-{r}"
        if draw(st.booleans(), label="pasted log"):
            text += ". The log:\n" + log_text(draw(st.integers(30, 60)), seed=r)
        msgs.append(HumanMessage(text, id=f"u{r}"))
        for _ in range(draw(st.integers(0, 6), label="calls")):
            k = next(n)
            if draw(st.integers(0, 5)) == 0:
                bad = {
                    "type": "invalid_tool_call",
                    "id": f"c{k}",
                    "name": "lookup",
                    "error": "json",
                }
                msgs.append(
                    AIMessage("", id=f"a{k}", invalid_tool_calls=[{**bad, "args": '{"id": "T'}])
                )
                msgs.append(
                    ToolMessage("Error: invalid arguments", tool_call_id=f"c{k}", id=f"t{k}")
                )
                continue
            call = {
                "name": "lookup",
                "args": {"id": f"T-{r}-{k}"},
                "id": f"c{k}",
                "type": "tool_call",
            }
            msgs.append(AIMessage(f"checking {k}", id=f"a{k}", tool_calls=[call]))
            out = log_text(draw(st.sampled_from([2, 15, 60])), seed=k)
            msgs.append(ToolMessage(out, tool_call_id=f"c{k}", id=f"t{k}"))
        if r < rounds - 1:
            msgs.append(AIMessage(f"Done with request {r}.", id=f"done{r}"))
    msgs.append(AIMessage("working on it", id="last"))
    return msgs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=chats(),
    budget=st.sampled_from([3_000, 4_000, 8_000]),
    min_run=st.sampled_from([2, 8]),
    ids=st.integers(0, 2**16),
)
def test_every_summary_header_says_what_its_offload_holds(messages, budget, min_run, ids) -> None:
    ac, _summarizer, calls = _replay(
        messages,
        budget,
        ids=ids,
        min_consecutive_tool_messages=min_run,
        large_payload_threshold=1_500,  # a pasted log is offloaded in place
        last_keep=2,
        target_ratio=0.3,
    )
    _check_headers(ac, calls)
