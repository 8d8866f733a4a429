"""Stateful fuzzing of a real ``create_agent`` with the middleware (issue 13).

A hypothesis state machine plays the user and the model: each user turn the model
follows a random plan — parallel tool calls with results sized around every threshold,
the self-management tools with valid and hostile arguments, XML commands, answers —
and the agent may be rebuilt between turns (new engine, middleware and graph over
the same checkpointer and store: a restart). After every turn:

* the run returned (nothing raised: no thread dies);
* every request the model received counts at most ``max_tokens`` with the tool
  schemas it was bound with, and is a valid sequence;
* every message that ever was in the agent's state (but the package's own
  replacements) is in the thread's history store, under its id, with the content it
  had there (the model's own edits aside: the history keeps the original).

``benchmarks/adversarial.py`` runs the same machine much longer and reports.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any, ClassVar

from _builders import FunctionModel, call, view_ids
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig
from langchain_autocontext.messages import find_violations, is_rewrite, marker, text_of

CFG = AutoContextConfig(
    max_tokens=6_000,
    large_payload_threshold=2_000,
    xml_commands=True,
    working_context_max_chars=1_500,
    disclosure="always",
)
THREAD = {"configurable": {"thread_id": "fuzz-agent"}, "recursion_limit": 200}
WORDS = ["alpha", "kernel", "ledger", "quartz", "delta", "matrix", "harbor", "pixel"]
NOTE_REF = re.compile(r'offload_id="([^"]+)"')
#: Result sizes in characters: empty, small, around the offload threshold, huge.
SIZES = [0, 40, 1_900, 2_100, 4_900, 20_000]


@tool
def blob(size: int, seed: int = 0) -> str:
    """Return a document of ``size`` characters."""
    unit = f"{WORDS[seed % len(WORDS)]} /srv/f{seed}.py:{seed} status=ok\n"
    return (unit * (size // len(unit) + 1))[:size]


class FuzzModel(FunctionModel):
    """Records the tool schemas each request was bound with."""

    bound: list = []  # noqa: RUF012 - pydantic copies the default per instance
    requests: list = []  # noqa: RUF012

    def bind_tools(self, tools, **kwargs):
        self.bound = list(tools)
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        self.requests.append((list(messages), list(self.bound)))
        return super()._generate(messages, stop, run_manager, **kw)


texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)
#: Whether the agent is rebuilt before a turn: about one turn in four. Drawn with the
#: turn, not a rule of its own: hypothesis disables a random subset of the rules in
#: each example (swarm testing) and sorts a rule without arguments first, its simplest
#: choice, so a ``restart`` rule beside ``user_turn`` made a third of the examples
#: restart at every step and never talk (12 examples of 10 steps: 47 restarts, 43
#: turns, 0.9 a restart; now 10 examples: 13 restarts, 72 turns, 5.5 a restart, in
#: the same time).
restarts = st.sampled_from([False, False, False, True])
ref = st.one_of(st.integers(0, 40), st.sampled_from(["", "nope", "x" * 300, "<tag>", "'\""]))
actions = st.one_of(
    st.tuples(st.just("tools"), st.lists(st.sampled_from(SIZES), min_size=1, max_size=4)),
    st.tuples(st.just("update"), ref, st.one_of(texts, st.just("y" * 9_000))),
    st.tuples(st.just("delete"), ref),
    st.tuples(st.just("pin"), ref, st.booleans()),
    st.tuples(st.just("reload"), ref, st.booleans()),
    st.tuples(st.just("search"), st.one_of(texts, st.just("q" * 2_000))),
    st.tuples(st.just("note"), st.one_of(texts, st.just("n" * 3_000))),
    st.tuples(st.just("xml"), st.sampled_from(["delete", "update", "user"]), ref, texts),
    st.tuples(st.just("mixed"), ref, st.sampled_from(SIZES)),
)


def pick(view: list[BaseMessage], r: Any) -> str:
    """An id the model is shown (by index), or a hostile string as it is."""
    if isinstance(r, str):
        return r
    shown = [i for i, _ in view_ids(view)]
    offloads = [
        (marker(m) or {}).get("offload_id") for m in view if (marker(m) or {}).get("offload_id")
    ]
    # and the shortened ids the notes show, as a model reads them
    notes = [ref for m in view for ref in NOTE_REF.findall(text_of(m))]
    pool = shown + [o for o in offloads if o] + notes
    return pool[r % len(pool)] if pool else "missing"


def act(action: tuple, view: list[BaseMessage], n: int) -> AIMessage:
    kind = action[0]
    if kind == "tools":
        return AIMessage(
            "",
            tool_calls=[call("blob", {"size": s, "seed": n + k}) for k, s in enumerate(action[1])],
        )
    if kind == "update":
        return AIMessage(
            "",
            tool_calls=[
                call("update_message", {"message_id": pick(view, action[1]), "content": action[2]})
            ],
        )
    if kind == "delete":
        return AIMessage(
            "", tool_calls=[call("delete_message", {"message_id": pick(view, action[1])})]
        )
    if kind == "pin":
        return AIMessage(
            "",
            tool_calls=[
                call("pin_message", {"message_id": pick(view, action[1]), "pinned": action[2]})
            ],
        )
    if kind == "reload":
        return AIMessage(
            "",
            tool_calls=[
                call(
                    "reload_offloaded", {"offload_id": pick(view, action[1]), "restore": action[2]}
                )
            ],
        )
    if kind == "search":
        return AIMessage("", tool_calls=[call("search_history", {"query": action[1]})])
    if kind == "note":
        return AIMessage("", tool_calls=[call("working_context_append", {"text": action[1]})])
    if kind == "xml":
        op, r, text = action[1], pick(view, action[2]), action[3]
        body = {
            "delete": f'<delete id="{r}"/>',
            "update": f'<update id="{r}">{text}</update>',
            "user": f"<user>{text}</user>",
        }[op]
        return AIMessage(f"Tidying up. {body}")
    # a self-management call next to a large parallel result
    return AIMessage(
        "",
        tool_calls=[
            call("delete_message", {"message_id": pick(view, action[1])}),
            call("blob", {"size": action[2], "seed": n}),
        ],
    )


class AgentMachine(RuleBasedStateMachine):
    """One conversation with a ``create_agent`` agent, turn by turn."""

    #: What every run of the machine did, summed (``benchmarks/adversarial.py`` reports it).
    stats: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.store = InMemoryStore()
        self.saver = InMemorySaver()
        self.plan: list[tuple] = []
        self.model = FuzzModel(respond=self.respond)
        self.ever: set[str] = set()
        #: (type, content) of each message the state held as it came (not rewritten)
        self.as_held: dict[str, tuple[str, Any]] = {}
        self.checked = 0
        self.config = CFG
        self.build()

    @initialize(keep=st.booleans())
    def keep_blob_results(self, keep: bool) -> None:
        """Half the conversations keep every result verbatim past the one-message steps
        (``keep_tool_results``): the summaries and the last resorts must hold the budget."""
        if keep:
            self.config = CFG.derive(keep_tool_results=("blob",))
            self.stats["conversations keeping results"] += 1
            self.build()

    def build(self) -> None:
        self.ac = AutoContext(self.config, store=self.store)
        self.agent = create_agent(
            self.model,
            tools=[blob],
            system_prompt="You are an operations agent.",
            middleware=[self.ac.middleware()],
            checkpointer=self.saver,
            store=self.store,
        )

    def respond(self, view: list[BaseMessage], n: int) -> AIMessage:
        if self.plan:
            return act(self.plan.pop(0), view, n)
        return AIMessage(f"Done ({n}).")

    @rule(text=texts, plan=st.lists(actions, max_size=5), restart=restarts)
    def user_turn(self, text: str, plan: list[tuple], restart: bool) -> None:
        if restart:
            self.restart()
        self.plan = list(plan)
        out = self.agent.invoke({"messages": [HumanMessage(text)]}, THREAD)  # must not raise
        self.stats["turns"] += 1
        self.stats["actions"] += len(plan)
        errors = {str(m.id) for m in out["messages"] if getattr(m, "status", None) == "error"}
        self.stats["error results"] += len(errors - self.ever)
        self.ever.update(
            str(m.id) for m in out["messages"] if m.id and not (marker(m) or {}).get("kind")
        )
        for m in out["messages"]:
            if m.id and not is_rewrite(m):
                self.as_held.setdefault(str(m.id), (m.type, m.content))

    def restart(self) -> None:
        """A new engine, middleware and graph over the same checkpointer and store."""
        self.stats["restarts"] += 1
        self.build()

    @invariant()
    def every_request_fits_and_is_valid(self) -> None:
        for messages, tools in self.model.requests[self.checked :]:
            assert not find_violations(messages), find_violations(messages)
            tokens = self.ac.counter.count(messages, tools)
            assert tokens <= CFG.max_tokens, tokens
            self.stats["requests"] += 1
            self.stats["largest request"] = max(self.stats["largest request"], tokens)
        self.checked = len(self.model.requests)

    @invariant()
    def every_original_is_in_the_store(self) -> None:
        if not self.ever:
            return
        entries = self.ac.resolve_store(self.store).iter_history("fuzz-agent")
        history = {e.id: (e.message.type, e.message.content) for e in entries}
        missing = self.ever - set(history)
        assert not missing, sorted(missing)[:5]
        changed = {mid for mid, held in self.as_held.items() if history[mid] != held}
        assert not changed, [(mid, history[mid], self.as_held[mid]) for mid in sorted(changed)[:3]]

    def teardown(self) -> None:
        events = self.ac.resolve_store(self.store).list_events("fuzz-agent")
        self.stats.update(f"event {e.strategy}" for e in events)


TestAgentMachine = AgentMachine.TestCase
TestAgentMachine.settings = settings(
    max_examples=int(os.environ.get("AUTOCONTEXT_FUZZ_EXAMPLES", "10")),
    stateful_step_count=int(os.environ.get("AUTOCONTEXT_FUZZ_STEPS", "10")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
