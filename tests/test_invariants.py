"""Property-based tests of the engine's hard invariants on random histories."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig, ContextBudgetError
from langchain_autocontext.messages import find_violations, latest_user_index, marker
from langchain_autocontext.store import OffloadStore
from langchain_autocontext.strategies.base import KIND_RECURSIVE
from langchain_autocontext.strategies.pipeline import minimal_context

OFFLOAD_ID = re.compile(r'offload_id="([0-9a-f-]{8,36})"')
HUGE = "\n".join(f"line {i}: /var/log/app.log value={i * 31 % 977}" for i in range(1500))
WORDS = [
    "error",
    "path/to/file.py",
    "id=42",
    "ok",
    "Traceback",
    "value",
    "ünïcode",
    "数据",
    "\n",
    "  ",
]


@st.composite
def texts(draw: st.DrawFn, max_words: int = 400) -> str:
    n = draw(st.sampled_from([0, 1, 5, 40, max_words]))
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=n, max_size=n)))


@st.composite
def contents(draw: st.DrawFn) -> str | list:
    text = draw(texts())
    if draw(st.booleans()):
        return text
    blocks: list = [{"type": "text", "text": text}]
    if draw(st.booleans()):
        blocks.append({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}})
    return blocks


@st.composite
def histories(draw: st.DrawFn) -> list[BaseMessage]:
    counter = iter(range(10_000))

    def nid() -> str:
        return f"id{next(counter)}"

    msgs: list[BaseMessage] = []
    if draw(st.booleans()):
        msgs.append(SystemMessage("You are helpful. " * draw(st.integers(1, 20)), id=nid()))
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["user", "tools", "tools", "tools", "answer", "huge"]))
        if kind == "user":
            msgs.append(HumanMessage(draw(contents()), id=nid()))
        elif kind == "answer":
            msgs.append(AIMessage(draw(contents()), id=nid()))
        else:
            k = draw(st.integers(1, 3))  # parallel tool calls
            calls = [
                {
                    "name": draw(st.sampled_from(["bash", "read", "write_todos"])),
                    "args": {"q": draw(texts(20))},
                    "id": nid(),
                    "type": "tool_call",
                }
                for _ in range(k)
            ]
            msgs.append(AIMessage(draw(texts(20)), tool_calls=calls, id=nid()))
            for c in calls:
                body = HUGE if kind == "huge" else draw(texts())
                msgs.append(ToolMessage(body, tool_call_id=c["id"], id=nid()))
    if draw(st.booleans()):  # a pending last call
        msgs.append(
            AIMessage(
                "",
                tool_calls=[{"name": "bash", "args": {}, "id": nid(), "type": "tool_call"}],
                id=nid(),
            )
        )
    return msgs


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    msgs=histories(),
    max_tokens=st.sampled_from([600, 2_000, 8_000]),
    last_keep=st.sampled_from([0, 3, 50]),
    threshold=st.sampled_from([5, 100]),
)
def test_invariants_hold_after_compression(msgs, max_tokens, last_keep, threshold) -> None:
    cfg = AutoContextConfig(
        max_tokens=max_tokens,
        last_keep=last_keep,
        msg_threshold=threshold,
        large_payload_threshold=2_000,
        summary_max_tokens=128,
    )
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(cfg, store=store)
    try:
        res = ac.compress(msgs, thread_id="t")
    except ContextBudgetError:
        # only allowed when what can never be compressed does not fit
        floor = _view_tokens(ac, minimal_context(msgs))
        # ...or, with the recursive summary's header (~60 tokens with its offload id),
        # the minimal context plus the last tool-call group.
        assert floor > max_tokens or _incompressible_tail(msgs, ac) + 100 > max_tokens
        return
    sent = res.messages
    # what the model receives is the view (tags, generated section, tool schemas)
    view = ac.prepare_model_call(sent, state={}, thread_id="t").messages
    assert ac.counter.count(view, ac.count_tools) <= max_tokens
    assert res.tokens_after <= max_tokens
    assert not find_violations(sent), find_violations(sent)
    assert not find_violations(view), find_violations(view)
    if msgs and isinstance(msgs[0], SystemMessage):
        assert sent[0] is msgs[0]
        assert sum(isinstance(m, SystemMessage) for m in sent) == 1
    lu = latest_user_index(msgs)
    if lu is not None:
        assert msgs[lu].id in {m.id for m in sent}
        assert next(m for m in sent if m.id == msgs[lu].id).content == msgs[lu].content
    history = {e.id: e.message for e in store.iter_history("t")}
    for m in msgs:
        assert history[m.id].type == m.type and history[m.id].content == m.content
    # every offload the context names holds originals as they were (or a summary that
    # names its own offload), and they reach every original the context no longer holds
    originals = {m.id: m for m in msgs}
    todo = [oid for m in sent for oid in OFFLOAD_ID.findall(str(m.content))]
    todo += [info["offload_id"] for m in sent if (info := marker(m)) and info.get("offload_id")]
    reached: set[str | None] = set()
    done: set[str] = set()
    while todo:
        oid = todo.pop()
        if oid in done:
            continue
        done.add(oid)
        record = store.reload("t", oid)
        assert record.messages
        for held in record.messages:
            info = marker(held)
            if info is None:
                m = originals[held.id]
                assert (held.type, held.content) == (m.type, m.content), (oid, held.id)
                reached.add(held.id)
            else:
                todo.append(info["offload_id"])
    in_context = {m.id for m in sent if marker(m) is None}
    unreachable = [m.id for m in msgs if m.id not in in_context | reached]
    if unreachable:  # only the last resort drops the recursive summary of evicted messages
        assert "fifo" in {e["strategy"] for e in res.events}, unreachable
        assert not any((marker(m) or {}).get("kind") == KIND_RECURSIVE for m in sent)


def _incompressible_tail(msgs, ac) -> int:
    """Minimal context plus the last tool group (kept by every strategy)."""
    from langchain_autocontext.messages import atomic_groups

    groups = atomic_groups(msgs)
    last = msgs[groups[-1][0] :] if groups else []
    keep = {id(m) for m in minimal_context(msgs)} | {id(m) for m in last}
    kept = [m for m in msgs if id(m) in keep]
    return _view_tokens(ac, kept)


def _view_tokens(ac, msgs) -> int:
    """Tokens of the model's view of ``msgs`` (generated section and tool schemas too)."""
    big = ac.config.model_copy(update={"max_tokens": 10_000_000, "disclosure": "always"})
    probe = AutoContext(big, store=OffloadStore(InMemoryStore()))
    view = probe.prepare_model_call(list(msgs), state={}, thread_id="probe").messages
    return probe.counter.count(view, probe.count_tools)
