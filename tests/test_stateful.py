"""Stateful fuzzing: a hypothesis state machine over one agent thread.

Rules: append (user turns, tool calls with results of any size, answers), each
compressed as before every model call and sometimes followed by a forced compression
or a restart (new engine and store objects, the SQLite connection closed and
reopened); update and delete (the model's edit operations,
``commands.update_op``/``delete_op``), reload (every offload id the context shows),
fork (the application edits a message under its id, as a user editing what they sent;
the latest user message included), search (the history, for a word: each hit holds it
or follows a message holding it, and every message holding it is found first, within
the limit; a fork's versions among them).

After every step:

* the working messages are a valid sequence (``messages.find_violations`` is empty)
  and count at most ``max_tokens``;
* the system message is first and unchanged; the latest user message is kept;
* no loss: every original ever appended is in the history store with its
  original content, every fork's version under its own key naming the message, and
  every offload the context names reloads what the working messages held (an
  original, or the model's edit of one) under the ids it names.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from conftest import open_sqlite
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_autocontext import AutoContext, AutoContextConfig, OffloadStore
from langchain_autocontext.commands import delete_op, update_op
from langchain_autocontext.messages import (
    find_violations,
    latest_user_index,
    marker,
    new_id,
    text_of,
)
from langchain_autocontext.search import search_history
from langchain_autocontext.store import message_version_key

CFG = AutoContextConfig(
    max_tokens=3_000,
    msg_threshold=24,
    last_keep=6,
    large_payload_threshold=1_200,
    min_consecutive_tool_messages=3,
    min_summary_span_tokens=60,
    summary_max_tokens=200,
)
SYSTEM = SystemMessage("You are a meticulous operations agent.", id="system")
THREAD = "fuzz"
OFFLOAD_ID = re.compile(r'offload_id="([^"]+)"')
WORDS = ["alpha", "kernel", "ledger", "quartz", "delta", "matrix", "harbor", "pixel", "nova"]

texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
sizes = st.sampled_from([0, 5, 40, 120, 400])  # lines of tool output: empty to ~20k chars
#: What an append is followed by: mostly nothing more (the next call compresses as
#: usual), sometimes a forced compression or a restart. Drawn as an argument of the
#: appending rules: as rules of their own they took steps from the tool steps that give
#: compression something to do (129 forced compressions and 45 restarts against 66 tool
#: steps in the CI profile; now about 110 tool steps and 47 compressions that changed
#: the context against 28).
afters = st.sampled_from(["", "", "", "compress", "restart"])


def tool_output(seed: int, lines: int) -> str:
    return "\n".join(
        f"{WORDS[(seed + i) % len(WORDS)]} /srv/app/f{(seed * 7 + i) % 50}.py:{i} status={i % 3}"
        for i in range(lines)
    )


class ContextMachine(RuleBasedStateMachine):
    """One thread driven through the engine the way an agent drives it."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ac-fuzz-"))
        self.conn: sqlite3.Connection | None = None
        self.working: list[BaseMessage] = []
        self.originals: dict[str, tuple[str, Any]] = {}
        #: (id, type, content) of every message the working list held, edits included
        self.held: set[tuple[str, str, str]] = set()
        #: the searchable text (content and tool calls) of every original, in append order
        self.said: dict[str, str] = {}
        self.latest_user: str | None = None
        #: what the latest user message holds now (a fork may have edited it)
        self.latest_content: Any = None
        #: history key -> (message id, content) of every later version a fork made
        self.versions: dict[str, tuple[str, Any]] = {}
        self.n = 0
        self.open()

    # --- plumbing -------------------------------------------------------------------------
    def open(self) -> None:
        backend = open_sqlite(self.dir / "store.db")
        self.conn = backend.conn
        self.conn.execute("PRAGMA synchronous=OFF")  # durability is not under test here
        self.store = OffloadStore(backend, prefix=CFG.store_prefix)
        self.ac = AutoContext(CFG, store=self.store)

    def teardown(self) -> None:
        if self.conn is not None:
            self.conn.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def nid(self, kind: str) -> str:
        self.n += 1
        return f"{kind}-{self.n}"

    def add(self, *messages: BaseMessage) -> None:
        for m in messages:
            self.originals[m.id] = (m.type, m.content)  # type: ignore[index]
            calls = " ".join(str(c["args"]) for c in getattr(m, "tool_calls", None) or [])
            self.said[str(m.id)] = f"{text_of(m)} {calls}"
        self.working.extend(messages)
        self.compress()

    def compress(self, force: bool = False) -> None:
        self.held.update(
            (str(m.id), m.type, repr(m.content)) for m in self.working if marker(m) is None
        )
        res = self.ac.compress(self.working, thread_id=THREAD, force=force)
        self.working = res.messages

    def offloads_shown(self) -> set[str]:
        found: set[str] = set()
        for m in self.working:
            info = marker(m) or {}
            if info.get("offload_id"):
                found.add(info["offload_id"])
            found.update(OFFLOAD_ID.findall(text_of(m)))
        return found

    def check_offload(self, oid: str) -> None:
        """The offload reloads the messages it replaced, as the working list held them."""
        record = self.store.reload(THREAD, oid)
        assert record.messages
        for m in record.messages:
            if marker(m) is None:  # an original, or an edit of one (not a summary it absorbed)
                assert (str(m.id), m.type, repr(m.content)) in self.held, (oid, m)

    def editable(self) -> list[str]:
        return [
            str(m.id)
            for m in self.working
            if not isinstance(m, SystemMessage | ToolMessage) and m.id != self.latest_user
        ]

    def forkable(self) -> list[str]:
        """User and assistant messages the working list holds as they were said (not
        rewritten by the package, the model or an earlier fork), the latest user
        message included."""
        return [
            str(m.id)
            for m in self.working
            if isinstance(m, HumanMessage | AIMessage)
            and marker(m) is None
            and m.content == self.originals[str(m.id)][1]
        ]

    # --- rules ----------------------------------------------------------------------------
    @initialize(text=texts)
    def start(self, text: str) -> None:
        user = HumanMessage(f"Task: {text}", id=self.nid("user"))
        self.latest_user, self.latest_content = user.id, user.content
        self.add(SYSTEM, user)

    @rule(text=texts, after=afters)
    def user_turn(self, text: str, after: str) -> None:
        if self.working and isinstance(self.working[-1], AIMessage) and self.working[-1].tool_calls:
            return  # a pending call is answered by its tool first
        user = HumanMessage(text, id=self.nid("user"))
        self.latest_user, self.latest_content = user.id, user.content
        self.add(user)
        self.then(after)

    @rule(n_calls=st.integers(1, 3), lines=sizes, text=texts, after=afters)
    def tool_step(self, n_calls: int, lines: int, text: str, after: str) -> None:
        if self.working and isinstance(self.working[-1], AIMessage) and self.working[-1].tool_calls:
            return
        calls = [
            {
                "name": "run",
                "args": {"q": f"{text} {k}"},
                "id": self.nid("call"),
                "type": "tool_call",
            }
            for k in range(n_calls)
        ]
        ai = AIMessage(text, tool_calls=calls, id=self.nid("ai"))
        results = [
            ToolMessage(tool_output(self.n + k, lines), tool_call_id=c["id"], id=self.nid("tool"))
            for k, c in enumerate(calls)
        ]
        self.add(ai, *results)
        self.then(after)

    @rule(text=texts, after=afters)
    def answer(self, text: str, after: str) -> None:
        if self.working and isinstance(self.working[-1], AIMessage) and self.working[-1].tool_calls:
            return
        self.add(AIMessage(f"Answer: {text}", id=self.nid("ai")))
        self.then(after)

    def then(self, after: str) -> None:
        """A forced compression, or a restart: new connection, store and engine (the
        working messages are the state)."""
        if after == "compress":
            self.compress(force=True)
        elif after == "restart":
            assert self.conn is not None
            self.conn.close()
            self.open()

    @precondition(lambda self: bool(self.editable()))
    @rule(data=st.data(), text=texts)
    def update(self, data: st.DataObject, text: str) -> None:
        target = data.draw(st.sampled_from(self.editable()))
        edit = update_op(self.working, target, f"edited: {text}")
        assert edit.ok, edit.text
        self.working = edit.messages
        self.compress()

    @precondition(lambda self: bool(self.editable()))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(self.editable()))
        edit = delete_op(self.working, target)
        if not edit.ok:  # a pending call: refused with a reason, nothing changed
            assert edit.reason == "protected" and edit.messages == self.working
            return
        self.working = edit.messages
        self.compress()

    @precondition(lambda self: bool(self.forkable()))
    @rule(data=st.data(), text=texts)
    def fork(self, data: st.DataObject, text: str) -> None:
        """A fork: the application edits a message under its id (a user editing what they
        sent, as LangGraph's ``add_messages`` replaces a message with one of the same id).
        The history keeps both versions; search finds each."""
        target = data.draw(st.sampled_from(self.forkable()))
        i = next(k for k, m in enumerate(self.working) if m.id == target)
        edited = self.working[i].model_copy(update={"content": f"forked {text}"})
        key = message_version_key(edited)
        self.versions[key] = (target, edited.content)
        calls = " ".join(str(c["args"]) for c in getattr(edited, "tool_calls", None) or [])
        self.said[key] = f"{text_of(edited)} {calls}"
        if target == self.latest_user:
            self.latest_content = edited.content
        self.working[i] = edited
        self.compress()

    @precondition(lambda self: bool(self.offloads_shown()))
    @rule(data=st.data())
    def reload(self, data: st.DataObject) -> None:
        self.check_offload(data.draw(st.sampled_from(sorted(self.offloads_shown()))))

    @rule(word=st.sampled_from(WORDS), limit=st.sampled_from([50, 4]))
    def search(self, word: str, limit: int) -> None:
        """What docs/search.md promises for a one-word query: every hit holds the word or
        follows a message holding it (the turn before is indexed with each message), the
        messages holding it rank first, and every one of them is found when the limit
        allows (more of them than the limit: the hits are all such messages)."""
        hits = search_history(self.store, THREAD, word, limit=limit)
        ids = [hit.id for hit in hits]
        assert len(ids) == len(set(ids)) <= limit, ids
        assert set(ids) <= set(self.said), set(ids) - set(self.said)
        pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.I)
        holds = {mid for mid, text in self.said.items() if pattern.search(text)}
        order = list(self.said)
        before = {mid: order[i - 1] for i, mid in enumerate(order) if i}
        for mid in ids:
            assert mid in holds or before.get(mid) in holds, (word, mid, self.said[mid][:80])
        holding = [mid in holds for mid in ids]
        assert holding == sorted(holding, reverse=True), (word, ids)  # holders first
        if len(holds) <= limit:
            assert holds <= set(ids), (word, sorted(holds - set(ids)))
        else:
            assert all(holding) and len(ids) == limit, (word, ids)

    # --- invariants -------------------------------------------------------------------------
    @invariant()
    def valid_and_within_budget(self) -> None:
        if not self.working:
            return
        assert not find_violations(self.working), find_violations(self.working)
        tokens = self.ac.counter.count(self.working, self.ac.count_tools, tags=CFG.tags_mode)
        assert tokens <= CFG.max_tokens

    @invariant()
    def system_first_and_latest_user_kept(self) -> None:
        if not self.working:
            return
        assert self.working[0] == SYSTEM
        lu = latest_user_index(self.working)
        assert lu is not None and self.working[lu].id == self.latest_user
        assert self.working[lu].content == self.latest_content

    @invariant()
    def nothing_lost(self) -> None:
        entries = {e.id: e for e in self.store.iter_history(THREAD)}
        history = {key: e.message for key, e in entries.items()}
        for mid, (kind, content) in self.originals.items():
            assert mid in history, f"original {mid} is not in the history"
            assert history[mid].type == kind and history[mid].content == content
            assert entries[mid].version_of is None
        for key, (mid, content) in self.versions.items():  # a fork's edit: a later version
            assert key in history, f"the fork of {mid} is not in the history"
            assert entries[key].version_of == mid and history[key].content == content
        for oid in self.offloads_shown():
            self.check_offload(oid)


TestContextMachine = ContextMachine.TestCase
TestContextMachine.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the harness: an example's package ids are part of the example ---------------------------
FIRST_IDS: set[str] = set()


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 9))
def test_every_example_draws_the_same_package_ids_when_replayed(_n: int) -> None:
    """The machine's draws depend on the context (what it may edit, which offloads it
    may reload) and the context on the offload ids (a uuid's token count varies), so
    hypothesis can only replay an example, to shrink or report it, if the package's ids
    restart with every example (conftest ``_fixed_package_ids``); with one sequence
    running on through the test, an explore run stopped on "Inconsistent data
    generation" instead of reporting its example."""
    FIRST_IDS.add(new_id())
    assert len(FIRST_IDS) == 1
