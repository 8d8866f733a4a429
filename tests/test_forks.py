"""Time travel and forks (LangGraph's "time travel"), through real graphs.

A thread is run at a small budget until compression has fired, then rewound: replayed
from an earlier checkpoint (``graph.invoke(None, config_with_checkpoint_id)``), or
forked by editing an old state (``graph.update_state(old_config, …)``, then
``graph.invoke(None or new input, new_config)``): a user message retried with other
words, a tool call undone. The package keeps per-thread memory outside the checkpoint
(the engine's memos, the middleware's held fits, the store's history, offloads and
counters), which stays at the later point; whatever the fork's state is, the model must
get:

* requests within the budget by the package's count and valid sequences;
* the fork's messages only: nothing of the abandoned branch (no view, summary or
  fitted copy made there, no working-context entry, pin, edit or calibration of it);
* offload ids that reload (``reload_offloaded``), and a ``search_history`` that finds
  both branches' originals (the history is append-only: docs/production.md).

The model is the round script of the end-to-end runs (``RoundScriptModel``: its
calls are numbered per thread, so the fork's commands differ from the abandoned
branch's), which a user message ``DO:<json>`` turns into a caller of the package's
tools, one call per step, as a model would call them.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from _builders import (
    SURFACE_CONFIG_KW,
    RoundScriptModel,
    SurfaceRun,
    build_surface,
    check_model_inputs,
    sh,
    user_turn,
    view_ids,
)
from conftest import open_sqlite
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContextConfig, OffloadStore
from langchain_autocontext.messages import PIN_KEY, find_violations, text_of

STEPS = 6  # tool calls per round; a round is STEPS + 1 model calls
EDITED = "Task 2b: edited, make module_9 pass instead"


class ProbeModel(RoundScriptModel):
    """The round script, except after a user message ``DO:[[tool, args], …]``: one
    tool call per step, then ``"did it"``. An argument ``"@view:TEXT"`` is the id the
    view's tag shows for the newest message containing TEXT (as a model reads it);
    ``usage_scale`` > 0 reports that many times the counted input tokens (a provider
    whose tokenizer counts more)."""

    usage_scale: float = 0.0
    counter: Any = None

    def _next(self, messages: Sequence[BaseMessage]) -> AIMessage:
        last = max(i for i, m in enumerate(messages) if m.type == "human")
        text = text_of(messages[last])
        if "DO:[" not in text:  # the view's tag, when shown, comes first
            return self._usage(super()._next(messages), messages)
        self.seen.append(list(messages))
        steps = json.loads(text[text.index("DO:[") + 3 :])
        k = sum(1 for m in messages[last:] if m.type == "tool")
        if k >= len(steps):
            return self._usage(AIMessage("did it"), messages)
        name, args = steps[k]
        args = {a: self._resolve(v, messages) for a, v in args.items()}
        call = {"name": name, "args": args, "id": f"probe-{len(self.seen)}", "type": "tool_call"}
        return self._usage(AIMessage(f"calling {name}", tool_calls=[call]), messages)

    @staticmethod
    def _resolve(value: Any, messages: Sequence[BaseMessage]) -> Any:
        if not (isinstance(value, str) and value.startswith("@view:")):
            return value
        want = value.removeprefix("@view:")
        hits = [i for i, m in view_ids(messages) if want in text_of(m) and "DO:" not in text_of(m)]
        assert hits, f"no message with {want!r} in the view"
        return hits[-1]

    def _usage(self, msg: AIMessage, messages: Sequence[BaseMessage]) -> AIMessage:
        if self.usage_scale and self.counter is not None:
            counted = self.counter.count(list(messages), self.bound)
            reported = int(counted * self.usage_scale)
            msg.usage_metadata = {
                "input_tokens": reported,
                "output_tokens": 5,
                "total_tokens": reported + 5,
            }
        return msg


def probe_model(**kw: Any) -> ProbeModel:
    return ProbeModel(steps=STEPS, small_lines=16, big_lines=100, varied=True, **kw)


class Thread:
    """A surface (create_agent with the middleware, or a StateGraph with ``ac.node()``,
    ``model_node`` and ``command_node``) on a checkpointer and a store, and its model."""

    def __init__(self, kind: str, saver: Any, store: Any, tags: bool = False) -> None:
        self.model = probe_model()
        cfg = AutoContextConfig(**SURFACE_CONFIG_KW, metadata_tags=tags or None)
        self.s: SurfaceRun = build_surface(
            kind, self.model, store=store, checkpointer=saver, config=cfg
        )
        self.model.counter = self.s.ac.counter
        self.runner = self.s.runner

    @property
    def store(self) -> OffloadStore:
        return OffloadStore.wrap(self.s.store)

    def events(self) -> int:
        return len(self.store.list_events(self.s.thread))

    def state(self, config: Any = None) -> Any:
        return self.runner.get_state(config or self.s.config)

    def checkpoint(self, pred: Any) -> Any:
        """The earliest checkpoint of the thread's history (all branches) for which
        ``pred(snapshot)`` holds."""
        found = [sn for sn in self.runner.get_state_history(self.s.config) if pred(sn)]
        assert found, "no such checkpoint"
        return found[-1]

    def run(self, inputs: Any, config: Any, asynchronous: bool = False) -> dict[str, Any]:
        config = {**config, "recursion_limit": 1_000}
        if asynchronous:
            return asyncio.run(self.runner.ainvoke(inputs, config))
        return self.runner.invoke(inputs, config)

    def do(self, steps: list[Any], config: Any = None) -> list[Any]:
        """The model calls the package's tools (``steps``); returns their results."""
        asked = HumanMessage("DO:" + json.dumps(steps))
        out = self.run({"messages": [asked]}, config or self.s.config)["messages"]
        start = next(i for i, m in enumerate(out) if m.id == asked.id)
        return [m for m in out[start:] if m.type == "tool"]


@pytest.fixture(params=["memory", "sqlite"])
def backends(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """A checkpointer and a store of one kind."""
    if request.param == "memory":
        yield InMemorySaver(), InMemoryStore()
        return
    conn = sqlite3.connect(tmp_path / "checkpoints.db", check_same_thread=False)
    store = open_sqlite(tmp_path / "store.db")
    try:
        yield SqliteSaver(conn), store
    finally:
        conn.close()
        store.conn.close()


def texts(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(text_of(m) for m in messages)


def commands(messages: Sequence[BaseMessage]) -> set[int]:
    """The numbers of the script's commands (``make check-<n>``) a list shows."""
    return {int(n) for n in re.findall(r"check-(\d+)", texts(messages))}


def shown_offloads(messages: Sequence[BaseMessage]) -> set[str]:
    return set(re.findall(r'offload_id="([0-9a-f-]+)"', texts(messages)))


def found_ids(result: str) -> set[str]:
    """The message ids of a ``search_history`` result."""
    return set(re.findall(r"^\d+\. id=(\S+) ", result, re.M))


def round_start(r: int) -> Any:
    """The checkpoint where round ``r``'s user message is in and nothing ran on it."""

    def pred(sn: Any) -> bool:
        msgs = sn.values.get("messages") or []
        return bool(
            msgs
            and text_of(msgs[-1]).startswith(f"Task {r}:")
            and sn.next
            and sn.next[0] != "__start__"
        )

    return pred


def abandoned_after(sent: list[list[BaseMessage]], first_call: int) -> None:
    """No input in ``sent`` shows a command of the abandoned branch (calls numbered from
    ``first_call`` to the fork) nor its user messages."""
    for k, view in enumerate(sent):
        shown = texts(view)
        leaked = {n for n in commands(view) if first_call <= n < 4 * (STEPS + 1)}
        assert not leaked, f"fork call {k} shows the abandoned branch's commands {leaked}"
        assert "Task 2: make" not in shown and "Task 3:" not in shown, f"fork call {k}"


# --- (1) and (2): a fork with an edited user message, and a replay -------------------------
@pytest.mark.parametrize("kind", ["middleware", "node"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_fork_with_an_edited_user_message_sends_only_the_forks_messages(
    kind: str, asynchronous: bool, backends: tuple[Any, Any]
) -> None:
    if asynchronous and isinstance(backends[0], SqliteSaver):
        pytest.skip("SqliteSaver has no async methods")
    t = Thread(kind, *backends)
    for r in range(4):
        t.s.round(r)
    fork_point = t.checkpoint(round_start(2))
    assert t.events(), "nothing was compressed before the fork point"
    user2 = fork_point.values["messages"][-1]
    events_before, first = t.events(), len(t.model.seen)
    config = t.runner.update_state(
        fork_point.config, {"messages": [HumanMessage(EDITED, id=user2.id)]}
    )
    t.run(None, config, asynchronous)
    for r in range(4, 7):  # the fork goes on until it compressed too
        t.s.round(r)
    assert t.events() > events_before, "nothing was compressed after the fork"
    sent = t.model.seen[first:]
    check_model_inputs(t.model, t.s.ac)  # within the budget, valid sequences
    assert EDITED in texts(sent[0])
    with pytest.raises(AssertionError):  # the check sees the abandoned branch's inputs
        abandoned_after(t.model.seen[:first], 2 * (STEPS + 1))
    abandoned_after(sent, 2 * (STEPS + 1))
    final = t.state().values["messages"]
    assert not find_violations(final)
    abandoned_after([final], 2 * (STEPS + 1))

    # (2) every offload the fork shows reloads, and holds nothing of the abandoned branch
    refs = sorted(shown_offloads(final))
    assert refs
    results = t.do([["reload_offloaded", {"offload_id": r}] for r in refs])
    assert [r.status for r in results] == ["success"] * len(refs), [text_of(r) for r in results]
    abandoned_after([list(results)], 2 * (STEPS + 1))
    # the history keeps both branches: the original under its id, the edit as a version
    (found,) = t.do([["search_history", {"query": "Task 2 module_2 module_9", "limit": 50}]])
    ids = found_ids(text_of(found))
    assert user2.id in ids, text_of(found)
    assert any(i.startswith(f"{user2.id}~") for i in ids), text_of(found)


@pytest.mark.parametrize("kind", ["middleware", "node"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_replay_from_an_earlier_checkpoint_sends_only_what_it_holds(
    kind: str, asynchronous: bool
) -> None:
    t = Thread(kind, InMemorySaver(), InMemoryStore())
    for r in range(4):
        t.s.round(r)

    # mid-round 3, after compression: the model is about to make its 4th call of the round
    def mid_round(sn: Any) -> bool:
        msgs = sn.values.get("messages") or []
        calls = [m for m in msgs if m.type == "ai" and "round 3 step 2" in text_of(m)]
        return bool(calls and msgs[-1].type == "tool" and sn.next and "model" in sn.next[0])

    replayed = t.checkpoint(mid_round)
    held = commands(replayed.values["messages"])
    first = len(t.model.seen)
    t.run(None, replayed.config, asynchronous)
    sent = t.model.seen[first:]
    assert sent
    check_model_inputs(t.model, t.s.ac)
    later = set(range(3 * (STEPS + 1) + 3, 4 * (STEPS + 1)))  # round 3's later calls
    for k, view in enumerate(sent):
        assert not (commands(view) & later - held), f"replayed call {k} shows the later branch"
        assert "round 3 finished" not in texts(view)
    assert not find_violations(t.state().values["messages"])


# --- (3): the package's state follows the checkpoint -------------------------------------------
@pytest.mark.parametrize("kind", ["middleware", "node"])
def test_working_context_pins_edits_and_calibration_follow_the_checkpoint(kind: str) -> None:
    t = Thread(kind, InMemorySaver(), InMemoryStore(), tags=True)
    for r in range(2):
        t.s.round(r)
    t.do([["working_context_append", {"text": "BASE-FACT"}]])
    base = t.state()
    answer = next(
        m for m in reversed(base.values["messages"]) if m.type == "ai" and not m.tool_calls
    )
    # the abandoned branch: a round, then the model edits its context, and the provider
    # reports more tokens than counted
    t.s.round(2)
    t.model.usage_scale = 1.3
    done = t.do(
        [
            ["working_context_append", {"text": "ABANDONED-FACT"}],
            ["pin_message", {"message_id": "@view:Task 2:"}],
            [
                "update_message",
                {"message_id": f"@view:{text_of(answer)}", "content": "ABANDONED-EDIT"},
            ],
        ]
    )
    assert [r.status for r in done] == ["success"] * 3, [text_of(r) for r in done]
    later = t.state().values
    assert "ABANDONED-FACT" in later["autocontext"]["working_context"]
    assert any(m.additional_kwargs.get(PIN_KEY) for m in later["messages"])
    if kind == "middleware":  # calibration runs in the middleware only (docs/surfaces.md)
        assert (later.get("autocontext") or {}).get("token_scale", 1) > 1
    t.model.usage_scale = 0.0
    assert "ABANDONED-FACT" in texts(t.model.seen[-1])

    first = len(t.model.seen)
    t.run({"messages": [HumanMessage("Task F: something else")]}, base.config)
    sent = t.model.seen[first:]
    check_model_inputs(t.model, t.s.ac)
    for k, view in enumerate(sent):
        shown = texts(view)
        assert "BASE-FACT" in shown and "ABANDONED" not in shown, f"fork call {k}"
    assert text_of(answer) in texts(sent[0])  # the update made in the abandoned branch is not
    fork = t.state().values
    assert not any(m.additional_kwargs.get(PIN_KEY) for m in fork["messages"])
    assert (fork.get("autocontext") or {}).get("token_scale", 1) == (
        base.values.get("autocontext") or {}
    ).get("token_scale", 1)
    assert "ABANDONED" not in (fork.get("autocontext") or {}).get("working_context", "")


# --- (4): undo a tool call -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["middleware", "node"])
@pytest.mark.parametrize("how", ["new_input", "as_tools"])
def test_undoing_a_tool_call_keeps_every_sequence_valid(kind: str, how: str) -> None:
    t = Thread(kind, InMemorySaver(), InMemoryStore())
    for r in range(4):
        t.s.round(r)

    def pending(sn: Any) -> bool:  # after compression, the model's call not run yet
        msgs = sn.values.get("messages") or []
        return sn.next == ("tools",) and "round 3 step 3" in text_of(msgs[-1])

    at = t.checkpoint(pending)
    undone = at.values["messages"][-1]
    call_id = undone.tool_calls[0]["id"]
    first = len(t.model.seen)
    if how == "new_input":
        config = t.runner.update_state(at.config, {"messages": [RemoveMessage(id=undone.id)]})
        t.run({"messages": [HumanMessage("No, not that. Task U: stop")]}, config)
    else:
        config = t.runner.update_state(
            at.config, {"messages": [RemoveMessage(id=undone.id)]}, as_node="tools"
        )
        t.run(None, config)
    sent = t.model.seen[first:]
    assert sent
    check_model_inputs(t.model, t.s.ac)
    for k, view in enumerate(sent):
        ids = {c["id"] for m in view for c in getattr(m, "tool_calls", None) or []}
        ids |= {getattr(m, "tool_call_id", None) for m in view}
        assert call_id not in ids, f"call {k} shows the undone call"
    final = t.state().values["messages"]
    assert not find_violations(final)
    assert all(m.id != undone.id for m in final)


# --- a fit held for after_model meets an edited checkpoint --------------------------------------
class OverflowOnce(ProbeModel):
    """The probe model, rejecting its call number ``overflow_on`` once as too long."""

    overflow_on: int = -1

    def _next(self, messages: Sequence[BaseMessage]) -> AIMessage:
        if self.total_calls == self.overflow_on:
            self.overflow_on = -1
            raise ContextOverflowError("prompt is too long: 200000 tokens > 100000 maximum")
        return super()._next(messages)


def test_an_edit_made_after_the_model_call_is_not_undone_by_the_view_it_fitted() -> None:
    """The model's request was compressed during the call (a rejection as too long), and
    the run stopped after the model node (``interrupt_after``, or an ``after_model``
    hook that interrupts). The user edits the round's message there
    (``update_state``: a fork of that checkpoint) and resumes: the fitted working
    messages of the call, made from the message as it was, must not be written over
    the edited state (they were: the edit was lost, and the next request sent the
    abandoned text)."""
    from langchain.agents import create_agent

    from langchain_autocontext import AutoContext

    # call 19: round 2's last step, the state at its largest (compressing it changes it)
    model = OverflowOnce(steps=STEPS, small_lines=16, big_lines=100, varied=True, overflow_on=19)
    ac = AutoContext(AutoContextConfig(**SURFACE_CONFIG_KW))
    agent = create_agent(
        model,
        [sh],
        system_prompt="You are a coding agent.",
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        interrupt_after=["model"],
    )
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": 1_000}

    def until_done_or_rejected(inputs: Any) -> Any:
        agent.invoke(inputs, config)
        while agent.get_state(config).next:
            if model.overflow_on == -1:  # the rejected call returned on its retry
                return agent.get_state(config)
            agent.invoke(None, config)
        return None

    for r in range(3):
        stopped = until_done_or_rejected({"messages": [user_turn(r)]})
    assert stopped is not None and "after_model" in stopped.next[0]
    user = next(m for m in reversed(stopped.values["messages"]) if m.type == "human")
    edited = HumanMessage("Task 2, edited: make module_9 pass", id=user.id)
    forked = agent.update_state(stopped.config, {"messages": [edited]})
    first = len(model.seen)
    agent.invoke(None, {**forked, "recursion_limit": 1_000})
    final = agent.get_state(config).values["messages"]
    assert [text_of(m) for m in final if m.id == user.id] == [text_of(edited)]
    sent = model.seen[first:]
    assert sent and all(text_of(edited) in texts(view) for view in sent)
    assert not any("Task 2: make" in texts(view) for view in sent)
    check_model_inputs(model, ac)
