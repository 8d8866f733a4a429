"""Side by side: this package against LangMem and LangChain's SummarizationMiddleware.

    python benchmarks/compare_peers.py                   # both data sets, 8k/16k/32k
    python benchmarks/compare_peers.py --limit 3         # a quick look
    python benchmarks/compare_peers.py --systems ours,ours-lean --budgets 16000
    python benchmarks/compare_peers.py --sweep "target_ratio=0.5;token_ratio=0.9"  # variants

Replays the real trajectories of ../shared/data (mini-swe-agent, tau-bench) call by
call through five context managers:

* ``none``        no management: everything is sent;
* ``langmem``     LangMem's ``summarize_messages`` with a ``RunningSummary`` (the
                  full history stays in state, as ``SummarizationNode`` keeps it);
* ``middleware``  LangChain's ``SummarizationMiddleware.before_model`` (the system
                  prompt passed separately, as ``create_agent(system_prompt=…)`` does);
* ``ours``        ``AutoContext`` with its defaults (metadata tags, self-management tools);
* ``ours-lean``   ``AutoContext`` with ``self_management_tools=False, metadata_tags=False``;
* ``ours[…]``     each ``--sweep`` variant: the defaults with its config fields.

Before each recorded assistant message the system gets its own working messages
(as its previous call left them) plus the new recorded messages; what it returns
is what the model is sent. Every system gets the same fake summarizer (a chat
model that answers a fixed 150-word summary and counts its calls and input
tokens) and the same exact token counter (tiktoken ``cl100k_base``), which counts
what is sent (tags and tool schemas included). Peers are configured from the budget
with the package's own ratios: summarize once the context would pass 75% of the
budget, keep 50% (the middleware's ``keep``), thresholds net of the system prompt
and a 256-token summary allowance.

Prints one markdown table per data set, the targets met or missed, and where each of
this package's configurations stands against the peers; writes ``compare_peers.md``,
``compare_peers.json`` and the plots to ``--out``.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import hashlib
import json
import keyword
import random
import re
import statistics
import sys
import threading
import time
import typing
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.store.memory import InMemoryStore
from pydantic import ConfigDict, PrivateAttr

from langchain_autocontext import AutoContext, AutoContextConfig
from langchain_autocontext.messages import find_violations, seeded_ids, text_of
from langchain_autocontext.replay import Trajectory, load_trajectories, percentile
from langchain_autocontext.store import OffloadStore
from langchain_autocontext.tokens import TokenCounter, default_counter

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FILES = ("mini-swe-agent-dev.jsonl", "tau-bench-airline.jsonl")
OUT = Path(__file__).resolve().parent / "results"
SYSTEMS = ("none", "langmem", "middleware", "ours", "ours-lean")
LABELS = {
    "none": "no management",
    "langmem": "LangMem summarize_messages",
    "middleware": "LangChain SummarizationMiddleware",
    "ours": "autocontext (defaults)",
    "ours-lean": "autocontext (no tools, no tags)",
}
BUDGETS = (8_000, 16_000, 32_000)
#: Set from --ours-config / --ours-order: a variant of this package's systems to compare
#: (config fields, and the strategy order by the design's numbers, e.g. "2314567").
OURS_CONFIG: dict[str, Any] = {}
OURS_ORDER: str | None = None
#: Set from --task-stand-in: every system gets the task statement (the first user
#: message) replaced by this line, so the support a kept task statement costs shows.
TASK_STAND_IN: str | None = None
#: Set from --pad-system: tokens of policy rules appended to every system prompt (real
#: agents often carry prompts of thousands of tokens; the data sets' are short).
PAD_SYSTEM = 0
#: Set from --ids-seed: the seed of the fixed sequence the package's own ids come from
#: (:func:`langchain_autocontext.messages.seeded_ids`, per trajectory: ``OursRunner.ids``). Another seed shifts offload ids' token counts, and with
#: them where compactions fall: how much a figure owes to that phase.
IDS_SEED = 0
#: Set from --parallel-calls: the data reshaped as agents that call tools in parallel
#: record it (:func:`parallel_calls`).
PARALLEL_CALLS = False
#: Set from --uuid-ids: every message id replaced by a uuid4, the ids LangGraph gives
#: messages (:func:`uuid_ids`).
UUID_IDS = False
#: Set from --text-protocol: the data reshaped as an agent that talks to its environment
#: in text records it (:func:`text_protocol`).
TEXT_PROTOCOL = False


def padded_system(message: SystemMessage, tokens: int, counter: Any) -> SystemMessage:
    """``message`` with numbered filler rules appended, about ``tokens`` tokens of them."""
    rules: list[str] = []
    while counter.count_text("\n".join(rules)) < tokens:
        k = len(rules)
        rules.append(f"Rule {k}: confirm step {k} of the procedure before running it.")
    body = f"{text_of(message)}\n\n" + "\n".join(rules)
    return message.model_copy(update={"content": body})


#: The package's default ratios, applied to the peers' knobs too.
TRIGGER_RATIO = 0.75
KEEP_RATIO = 0.5
#: Room the peers reserve for their summary (LangMem's own default max_summary_tokens).
SUMMARY_ALLOWANCE = 256
#: What a provider's prompt cache bills for a cached input token.
CACHED_PRICE = 0.1

#: The fixed summary every system gets back: exactly 150 words.
SUMMARY_150_WORDS = (
    "The agent read the task, listed the repository, opened the relevant module and its "
    "tests, and reproduced the reported failure with a short script. It traced the error "
    "to a helper that builds the query before the related field exists, then edited that "
    "helper to defer the lookup until the field is created, keeping the public signature "
    "unchanged. It reran the reproduction script, which now passes, and ran the focused "
    "test module, where two older tests failed because they asserted the previous order of "
    "operations. It updated those assertions to the new order, reran the whole module "
    "successfully, and checked that no other caller depends on the old behaviour by "
    "searching the code base for the helper's name. Remaining work: review the diff, "
    "remove the temporary script, and submit the change with an explanation of the "
    "cause, the fix, and the tests that cover it, naming the two adjusted tests."
)
assert len(SUMMARY_150_WORDS.split()) == 150


# --- next-action support -----------------------------------------------------------------------
#: Distinctive tokens: paths and dotted names, identifiers, numbers of 3+ digits, and the
#: insides of quoted strings.
_FACT = re.compile(
    r"""(?x)
    (?:[A-Za-z0-9_.-]*/[A-Za-z0-9_./-]+)      # a path
    | [A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+   # a dotted name
    | [A-Za-z_][A-Za-z0-9_]{3,}               # an identifier or word of 4+ characters
    | \d{3,}                                  # a number of 3+ digits
    """
)
_QUOTED = re.compile(r"'([^'\n]{4,80})'|\"([^\"\n]{4,80})\"")
#: Words no answer is "about": Python's keywords and builtins, and English function words.
_COMMON = {w.lower() for w in (*keyword.kwlist, *dir(builtins))} | set(
    [
        "that",
        "this",
        "with",
        "from",
        "have",
        "will",
        "what",
        "when",
        "then",
        "there",
        "their",
        "they",
        "them",
        "these",
        "those",
        "which",
        "would",
        "could",
        "should",
        "about",
        "into",
        "your",
        "some",
        "more",
        "only",
        "also",
        "just",
        "like",
        "than",
        "each",
        "other",
        "been",
        "were",
        "does",
        "make",
        "need",
        "here",
        "file",
        "line",
    ]
)
#: A token in more than this share of a data set's trajectories is boilerplate there
#: (prompt templates, tool names, common commands), not a fact of one run.
DF_CUT = 0.2
#: Distance buckets (tokens back the fact was last seen).
DISTANCES = (
    (0, 2_000, "<2k"),
    (2_000, 4_000, "2-4k"),
    (4_000, 8_000, "4-8k"),
    (8_000, 16_000, "8-16k"),
    (16_000, 10**12, ">16k"),
)


def message_text(message: BaseMessage) -> str:
    """A message's text and its tool calls' arguments (what a fact can be read from)."""
    text = text_of(message)
    if isinstance(message, AIMessage) and message.tool_calls:
        text += "\n" + "\n".join(
            json.dumps(tc["args"], ensure_ascii=False) for tc in message.tool_calls
        )
    return text


def raw_facts(text: str) -> set[str]:
    """Every candidate fact of ``text`` (before the common-word and frequency cuts)."""
    out = {t.strip(".-/") for t in _FACT.findall(text)}
    out |= {a or b for a, b in _QUOTED.findall(text)}
    return {t for t in out if len(t) >= 3 and t.lower() not in _COMMON}


def frequent_tokens(trajectories: Sequence[Trajectory], cut: float = DF_CUT) -> frozenset[str]:
    """Tokens found in more than ``cut`` of the trajectories (document frequency)."""
    df: Counter[str] = Counter()
    for t in trajectories:
        df.update(set().union(*(raw_facts(message_text(m)) for m in t.messages)))
    floor = max(2, cut * len(trajectories))
    return frozenset(tok for tok, n in df.items() if n > floor)


def original_text(message: BaseMessage) -> str:
    """What of a sent message is original conversation text: summaries the package wrote
    and the peers' summaries (the fake summarizer's fixed text) do not count; an
    offloaded message counts for the verbatim preview it still shows."""
    from langchain_autocontext.messages import marker
    from langchain_autocontext.strategies.base import SUMMARY_KINDS

    if isinstance(message, SystemMessage):
        return ""  # the system prompt and any generated section: never a needed fact
    if (marker(message) or {}).get("kind") in SUMMARY_KINDS:
        return ""
    return message_text(message).replace(SUMMARY_150_WORDS, "")


@dataclass
class Support:
    """Needed facts of the recorded next actions, and how many were in what was sent."""

    needed: int = 0
    present: int = 0
    over_needed: int = 0
    over_present: int = 0
    by_distance: Counter[str] = field(default_factory=Counter)
    by_distance_present: Counter[str] = field(default_factory=Counter)

    def add(self, other: Support) -> None:
        self.needed += other.needed
        self.present += other.present
        self.over_needed += other.over_needed
        self.over_present += other.over_present
        self.by_distance.update(other.by_distance)
        self.by_distance_present.update(other.by_distance_present)

    @property
    def share(self) -> float:
        return self.present / self.needed if self.needed else 1.0

    @property
    def over_share(self) -> float:
        return self.over_present / self.over_needed if self.over_needed else 1.0

    def distance_share(self, label: str) -> float | None:
        n = self.by_distance[label]
        return self.by_distance_present[label] / n if n else None


class FactTracker:
    """Walks one trajectory: the facts of each recorded next action that an earlier
    message holds (and not the system prompt or the task statement), with how many
    tokens back each was last seen."""

    def __init__(self, messages: Sequence[BaseMessage], common: frozenset[str], counter: Any):
        self.messages = messages
        self.facts = [raw_facts(message_text(m)) - common for m in messages]
        self.tokens = [counter.count_message(m) for m in messages]
        first_user = next((k for k, m in enumerate(messages) if m.type == "human"), None)
        #: Index of the task statement (the first user message), if any.
        self.first_user = first_user
        self.task = set().union(
            *(
                self.facts[k]
                for k, m in enumerate(messages)
                if isinstance(m, SystemMessage) or k == first_user
            )
        )
        self.last_seen: dict[str, int] = {}
        self.cursor = 0

    def needed(self, point: int) -> dict[str, int]:
        """Needed facts of the assistant message at ``point`` → distance in tokens."""
        for k in range(self.cursor, point):
            for f in self.facts[k]:
                self.last_seen[f] = k
        self.cursor = point
        out: dict[str, int] = {}
        for f in self.facts[point] - self.task:
            k = self.last_seen.get(f)
            if k is not None:
                out[f] = sum(self.tokens[k + 1 : point])
        return out

    @staticmethod
    def bucket(distance: int) -> str:
        return next(label for lo, hi, label in DISTANCES if lo <= distance < hi)


# --- the shared fake summarizer --------------------------------------------------------------
class CountingSummarizer(BaseChatModel):
    """A fake chat model: answers a fixed 150-word summary, counts calls and input tokens.

    Input tokens are counted with the benchmark's exact counter on the messages the
    model receives, so every system's summarizer cost is measured the same way.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    counter: Any = None
    summary: str = SUMMARY_150_WORDS
    calls: int = 0
    input_tokens: int = 0
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "counting-fake-summarizer"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        tokens = self.counter.count_messages(messages)
        with self._lock:
            self.calls += 1
            self.input_tokens += tokens
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.summary))])


# --- one call's measurements ------------------------------------------------------------------
@dataclass
class Sent:
    """What one model call receives, with its exact token counts."""

    messages: list[BaseMessage]  # the input view, as sent
    counts: list[int]  # tokens of each message as sent
    base: int  # reply priming + tool schemas
    tools: list[Any] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.base + sum(self.counts)


def _key(message: BaseMessage) -> tuple[str, str, str, str]:
    """What a provider sees of a message (ids are not sent), for prefix comparison."""
    content = message.content
    body = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
    calls = ""
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = json.dumps(
            [(tc["name"], tc["args"], tc.get("id")) for tc in message.tool_calls], sort_keys=True
        )
    tool_id = message.tool_call_id if isinstance(message, ToolMessage) else ""
    return (message.type, body, calls, tool_id)


def _content_key(message: BaseMessage) -> tuple[str, str, str]:
    """An original message's identity for 'is it still in the context verbatim'."""
    t, body, calls, _ = _key(message)
    return (t, body, calls)


# --- the systems ------------------------------------------------------------------------------
class Runner:
    """One system replaying one trajectory: ``step`` is called before each model call."""

    name = "base"
    tool_names: frozenset[str] = frozenset()

    def __init__(self, budget: int, counter: TokenCounter, summarizer: CountingSummarizer):
        self.budget = budget
        self.counter = counter
        self.summarizer = summarizer
        #: Compaction events so far, and those closed with a placeholder, not a summary.
        self.compactions = 0
        self.placeholders = 0

    def start(self, system: SystemMessage | None) -> None:
        """Called once per trajectory with its system message (if any)."""

    def step(self, new: list[BaseMessage]) -> list[BaseMessage]:
        """Take the new recorded messages; return the messages the model is sent."""
        raise NotImplementedError

    def measure(self, sent: list[BaseMessage]) -> Sent:
        return Sent(sent, self.counter.message_counts(sent), self.counter.reply_priming)

    def reachable_by_tool(self, originals: Sequence[BaseMessage], last: Sent) -> set[str]:
        """Ids of originals the model can get back with a tool it has (none for peers)."""
        return set()

    def ids(self) -> contextlib.AbstractContextManager[None]:
        """Where the system's own ids come from during a replay (see OursRunner)."""
        return contextlib.nullcontext()

    def context_messages(self, last: Sent) -> list[BaseMessage]:
        """The last call's messages without any rendering (tags), to find originals in."""
        return last.messages

    def peer_counter(self) -> Callable[[Iterable[Any]], int]:
        """The exact counter handed to a peer (tokens of the messages, no priming)."""
        counter = self.counter

        def count(messages: Iterable[Any]) -> int:
            msgs = [
                m if isinstance(m, BaseMessage) else convert_to_messages([m])[0] for m in messages
            ]
            return sum(counter.message_counts(msgs))

        return count


class NoManagement(Runner):
    name = "none"

    def start(self, system: SystemMessage | None) -> None:
        self.working: list[BaseMessage] = []

    def step(self, new: list[BaseMessage]) -> list[BaseMessage]:
        self.working.extend(new)
        return list(self.working)


class LangMemRunner(Runner):
    """``langmem.short_term.summarize_messages`` with a running summary.

    Used as its docs show (and as ``SummarizationNode`` does with its default
    ``output_messages_key``): the full history stays in state, the running summary
    remembers what was summarized, and the returned messages go to the model.
    """

    name = "langmem"

    def start(self, system: SystemMessage | None) -> None:
        from langmem.short_term import summarize_messages

        self._summarize = summarize_messages
        self.state: list[BaseMessage] = []
        self.running: Any = None
        self._count = self.peer_counter()
        sys_tokens = self._count([system]) if system is not None else 0
        self.max_tokens = self.budget
        self.before_summary = max(
            256, int(self.budget * TRIGGER_RATIO) - sys_tokens - SUMMARY_ALLOWANCE
        )

    def step(self, new: list[BaseMessage]) -> list[BaseMessage]:
        self.state.extend(new)
        result = self._summarize(
            self.state,
            running_summary=self.running,
            model=self.summarizer,
            max_tokens=self.max_tokens,
            max_tokens_before_summary=self.before_summary,
            max_summary_tokens=SUMMARY_ALLOWANCE,
            token_counter=self._count,
        )
        if result.running_summary is not None:
            self.compactions += result.running_summary is not self.running
            self.running = result.running_summary
        return list(result.messages)


#: What ``SummarizationMiddleware`` writes when it drops history without a summary.
PLACEHOLDER = "Previous conversation was too long to summarize."


class MiddlewareRunner(Runner):
    """``langchain.agents.middleware.SummarizationMiddleware.before_model``.

    The state holds the conversation without the system prompt (``create_agent``
    adds ``system_prompt`` to every model request); the middleware's update
    (``RemoveMessage(REMOVE_ALL_MESSAGES)``, summary, kept messages) replaces it.
    """

    name = "middleware"

    def start(self, system: SystemMessage | None) -> None:
        from langchain.agents.middleware import SummarizationMiddleware

        count = self.peer_counter()
        sys_tokens = count([system]) if system is not None else 0
        self.system = system
        self.state: list[BaseMessage] = []
        self.mw = SummarizationMiddleware(
            model=self.summarizer,
            trigger=("tokens", max(256, int(self.budget * TRIGGER_RATIO) - sys_tokens)),
            keep=(
                "tokens",
                max(128, int(self.budget * KEEP_RATIO) - sys_tokens - SUMMARY_ALLOWANCE),
            ),
            token_counter=count,
        )

    def step(self, new: list[BaseMessage]) -> list[BaseMessage]:
        from langgraph.graph.message import REMOVE_ALL_MESSAGES

        self.state.extend(m for m in new if not isinstance(m, SystemMessage))
        update = self.mw.before_model({"messages": self.state}, None)  # type: ignore[arg-type]
        if update is not None:
            msgs = update["messages"]
            assert getattr(msgs[0], "id", None) == REMOVE_ALL_MESSAGES
            self.state = list(msgs[1:])
            self.compactions += 1
            # langchain writes this instead of calling the summary model when no user
            # message falls in the last trim_tokens_to_summarize tokens of what it
            # summarizes (langchain-ai/langchain#39261): the history is dropped unsummarized.
            self.placeholders += any(
                PLACEHOLDER in text_of(m) for m in self.state if m.type == "human"
            )
        return ([self.system] if self.system is not None else []) + list(self.state)


class OursRunner(Runner):
    """``AutoContext`` driven as its ``create_agent`` middleware drives it.

    Each call: ``compress`` the working messages (with the graph's ``autocontext``
    state), then ``prepare_model_call`` builds the model's input view (generated
    system section, metadata tags, notices); the view is what is sent, with the
    tool schemas the middleware sends: the package's own tools once the view shows
    the package (``call.engaged``, see ``AutoContextConfig.disclosure``).

    ``tools``: the agent's own tools, counted and sent with every call as
    ``create_agent`` sends them (the benchmark sends none, as for the peers;
    ``tests/test_benchmarks_smoke.py`` gives the recorded ``bash`` tool to check that
    this runner sends what a ``create_agent`` graph with the middleware sends).
    """

    name = "ours"

    def __init__(
        self,
        budget: int,
        counter: TokenCounter,
        summarizer: CountingSummarizer,
        *,
        tools: Sequence[Any] = (),
        **config: Any,
    ):
        super().__init__(budget, counter, summarizer)
        self.config_overrides = config
        self.agent_tools = list(tools)
        if config.get("self_management_tools") is False:
            self.name = "ours-lean"

    def start(self, system: SystemMessage | None) -> None:
        self.store = OffloadStore(InMemoryStore())
        self.ac = AutoContext(
            AutoContextConfig(max_tokens=self.budget, **{**OURS_CONFIG, **self.config_overrides}),
            summarizer=self.summarizer,
            store=self.store,
            token_counter=self.counter,
            tools=self.agent_tools,
            strategies=strategies_in_order(OURS_ORDER) if OURS_ORDER else None,
        )
        self.working: list[BaseMessage] = []
        self.ac_state: dict[str, Any] | None = None
        self.thread = "bench"
        self.tool_names = frozenset(t.name for t in self.ac.tools)
        self.engine_tokens = 0

    def step(self, new: list[BaseMessage]) -> list[BaseMessage]:
        self.working.extend(new)
        result = self.ac.compress(  # tools: what is counted (the data holds no schemas)
            self.working,
            thread_id=self.thread,
            store=self.store,
            state=self.ac_state,
            tools=self.ac.count_tools,
        )
        self.working = list(result.messages)
        self.compactions += bool(result.events)
        engaged = self.ac.engaged(self.working, self.ac_state)
        own = {t.name for t in self.ac.tools}
        self.tools_sent = [
            t for t in self.ac.count_tools if engaged or getattr(t, "name", None) not in own
        ]
        call = self.ac.prepare_model_call(self.working, state=self.ac_state, tools=self.tools_sent)
        if call.state_update:
            self.ac_state = call.state_update
        self.engine_tokens = call.tokens
        return call.messages

    def measure(self, sent: list[BaseMessage]) -> Sent:
        tools = self.tools_sent
        return Sent(
            sent,
            self.counter.message_counts(sent),
            self.counter.reply_priming + self.counter.count_tools(tools),
            tools,
        )

    def ids(self) -> contextlib.AbstractContextManager[None]:
        """The package's ids from one fixed sequence per trajectory (reproducible runs).

        Offload ids are shown in the context and a uuid's token count varies, so with
        random ids two runs of the same code differed by about 0.3 points of support;
        seeded for every trajectory, a run is reproducible and two variants differ only
        by what they change. LangChain's and the peers' ids are left alone.
        """
        return seeded_ids(IDS_SEED)

    def context_messages(self, last: Sent) -> list[BaseMessage]:
        return self.working

    def reachable_by_tool(self, originals: Sequence[BaseMessage], last: Sent) -> set[str]:
        """Originals the model's own tools return: every one via ``search_history``,
        offloaded spans via ``reload_offloaded`` on ids shown in the context (followed
        through the offloads they return)."""
        reached: set[str] = set()
        if "search_history" in self.tool_names:
            reached |= {e.id for e in self.store.iter_history(self.thread)}
        if "reload_offloaded" in self.tool_names:
            records = {r.offload_id: r for r in self.store.list_offloads(self.thread)}
            seen: set[str] = set()
            frontier = [text_of(m) for m in last.messages]
            while frontier:
                text = frontier.pop()
                for oid, rec in records.items():
                    if oid in seen or oid not in text:
                        continue
                    seen.add(oid)
                    reached |= {i for i in rec.message_ids if i}
                    frontier.extend(text_of(m) for m in rec.messages)
        return reached


def strategies_in_order(order: str) -> list[Any]:
    """The seven strategies in ``order``, named by the design's numbers (``"2346157"`` is
    the default order, ``"2314567"`` AgentScope's with the offloads first)."""
    from langchain_autocontext.strategies import (
        CurrentRoundCompression,
        CurrentRoundLargeMessages,
        FifoEviction,
        LargeMessageOffload,
        RoundSummary,
        ToolRunCompression,
    )

    by_number = {
        "1": ToolRunCompression,
        "2": lambda: LargeMessageOffload(keep_last=True),
        "3": lambda: LargeMessageOffload(keep_last=False),
        "4": RoundSummary,
        "5": CurrentRoundLargeMessages,
        "6": CurrentRoundCompression,
        "7": FifoEviction,
    }
    if sorted(order) != sorted(by_number):
        raise ValueError(f"--ours-order {order!r}: each of 1-7 once, e.g. 2346157")
    return [by_number[k]() for k in order]


def sweep_system(spec: str) -> str:
    """The system name of a ``--sweep`` variant: the defaults with ``spec``'s config
    fields (``--ours-config`` syntax) on top, ``"ours[target_ratio=0.5]"``."""
    parse_ours_config(spec)  # a misspelt field fails before the long run
    return f"ours[{spec.strip()}]"


def sweep_config(system: str) -> dict[str, Any] | None:
    """The config fields a ``--sweep`` variant's name carries (``None``: not a variant)."""
    if system.startswith("ours[") and system.endswith("]"):
        return parse_ours_config(system[5:-1])
    return None


def is_ours(system: str) -> bool:
    """This package's systems: the defaults, the lean mode and every ``--sweep`` variant."""
    return system.startswith("ours")


def make_runner(
    system: str, budget: int, counter: TokenCounter, summarizer: CountingSummarizer
) -> Runner:
    if system == "none":
        return NoManagement(budget, counter, summarizer)
    if system == "langmem":
        return LangMemRunner(budget, counter, summarizer)
    if system == "middleware":
        return MiddlewareRunner(budget, counter, summarizer)
    if system == "ours":
        return OursRunner(budget, counter, summarizer)
    if system == "ours-lean":
        return OursRunner(
            budget, counter, summarizer, self_management_tools=False, metadata_tags=False
        )
    variant = sweep_config(system)
    if variant is not None:
        runner = OursRunner(budget, counter, summarizer, **variant)
        runner.name = system
        return runner
    raise ValueError(f"unknown system {system!r}; expected one of {', '.join(SYSTEMS)}")


def peer_versions() -> str:
    """The installed versions of what is compared (the peers change between releases)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for dist in ("langchain-autocontext", "langchain", "langmem", "langchain-core"):
        try:
            out.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            out.append(f"{dist} (not installed)")
    return ", ".join(out)


def available(system: str) -> str | None:
    """``None`` when the system can run here, else why not."""
    try:
        if system == "langmem":
            import langmem.short_term  # noqa: F401
        elif system == "middleware":
            from langchain.agents.middleware import SummarizationMiddleware  # noqa: F401
    except ImportError as exc:
        return f"{exc.name or exc} is not installed (pip install -e '.[bench]')"
    return None


# --- the replay ------------------------------------------------------------------------------
@dataclass
class Row:
    """Everything measured for one system at one budget on one data set."""

    system: str
    budget: int
    dataset: str
    trajectories: int = 0
    calls: int = 0
    largest: int = 0
    over_budget: int = 0
    invalid: int = 0
    violation_kinds: Counter[str] = field(default_factory=Counter)
    sent: int = 0
    cached: int = 0
    summarizer_calls: int = 0
    summarizer_input: int = 0
    overheads: list[float] = field(default_factory=list)
    originals: int = 0
    recoverable: int = 0
    count_checks: int = 0
    count_mismatches: int = 0
    support: Support = field(default_factory=Support)
    #: Over-budget calls, and those whose sent context holds the task statement verbatim.
    task_checks: int = 0
    task_kept: int = 0
    #: Compaction events, and those a peer closed with a placeholder instead of a summary.
    compactions: int = 0
    placeholders: int = 0
    #: Per trajectory, in the data set's order: (needed facts on over-budget calls, of
    #: those present, effective cost), for the intervals of :func:`bootstrap`.
    per_trajectory: list[tuple[int, int, float]] = field(default_factory=list)

    @property
    def task_share(self) -> float | None:
        return self.task_kept / self.task_checks if self.task_checks else None

    @property
    def effective(self) -> float:
        """Uncached input + 0.1 x cached input + summarizer input."""
        return (self.sent - self.cached) + CACHED_PRICE * self.cached + self.summarizer_input

    @property
    def cached_share(self) -> float:
        return self.cached / self.sent if self.sent else 0.0

    @property
    def recoverable_share(self) -> float:
        return self.recoverable / self.originals if self.originals else 1.0

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.overheads) * 1000 if self.overheads else 0.0

    @property
    def p99_ms(self) -> float:
        return percentile(self.overheads, 0.99) * 1000

    def as_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "budget": self.budget,
            "dataset": self.dataset,
            "trajectories": self.trajectories,
            "calls": self.calls,
            "largest": self.largest,
            "over_budget": self.over_budget,
            "invalid": self.invalid,
            "violation_kinds": dict(self.violation_kinds),
            "sent": self.sent,
            "cached": self.cached,
            "effective": round(self.effective),
            "summarizer_calls": self.summarizer_calls,
            "summarizer_input": self.summarizer_input,
            "p50_ms": round(self.p50_ms, 4),
            "p99_ms": round(self.p99_ms, 4),
            "originals": self.originals,
            "recoverable": self.recoverable,
            "count_mismatches": self.count_mismatches,
            "task_statement_kept_over_budget": (
                None if self.task_share is None else round(self.task_share, 4)
            ),
            "compactions": self.compactions,
            "placeholder_summaries": self.placeholders,
            "support": round(self.support.share, 4),
            "support_over_budget": round(self.support.over_share, 4),
            "needed_facts": self.support.needed,
            "needed_facts_over_budget": self.support.over_needed,
            "support_by_distance": {
                label: self.support.distance_share(label) for _, _, label in DISTANCES
            },
        }


def _violation_kind(problem: str) -> str:
    if "system message that is not first" in problem:
        return "system message not first"
    if "unanswered" in problem:
        return "tool call without result"
    return "tool result without call"


def common_prefix(keys: Sequence[Any], previous: Sequence[Any]) -> int:
    """How many leading message keys two consecutive calls share."""
    return next(
        (k for k, (a, b) in enumerate(zip(keys, previous, strict=False)) if a != b),
        min(len(keys), len(previous)),
    )


def cached_prefix(
    sent: Sent, previous: Sequence[tuple[str, str, str, str]], counter: TokenCounter
) -> tuple[int, list[tuple[str, str, str, str]]]:
    """Tokens of ``sent`` a prompt cache can reuse after the call whose message keys were
    ``previous``: the tool schemas and the identical leading messages (the reply priming
    closes the request, it is never a prefix); with this call's keys, for the next."""
    keys = [_key(m) for m in sent.messages]
    common = common_prefix(keys, previous)
    if not common:
        return 0, keys
    return sent.base - counter.reply_priming + sum(sent.counts[:common]), keys


def _call_points(messages: Sequence[BaseMessage]) -> list[int]:
    return [i for i, m in enumerate(messages) if isinstance(m, AIMessage)]


def uuid_ids(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` with every message id replaced by a uuid4 derived from it (the same
    for every run of the benchmark): the ids a LangGraph graph gives messages, about 20
    tokens each where the recorded ones (``django__django-13768-3``) take about 9. The
    metadata tags show short ids either way; what an id costs elsewhere (in what the
    package counts, in the notes) shows here."""

    def as_uuid4(value: str) -> str:
        digest = hashlib.blake2b(value.encode("utf-8"), digest_size=16).digest()
        return str(uuid.UUID(bytes=digest, version=4))

    messages = [
        m.model_copy(update={"id": as_uuid4(f"{trajectory.id}/{m.id}")}) if m.id else m
        for m in trajectory.messages
    ]
    return replace(trajectory, messages=messages)


def parallel_calls(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` with each two consecutive one-call steps (an assistant turn making
    one tool call, then its result) made into one assistant turn making both calls,
    followed by both results: the shape of an agent that calls tools in parallel (not
    when both calls have one id). The texts, calls and results are the recorded ones;
    the merged turn keeps the first turn's id, and its text is both turns' texts."""
    msgs = trajectory.messages
    out: list[BaseMessage] = []
    i = 0

    def one_call(k: int) -> bool:
        m = msgs[k]
        return (
            isinstance(m, AIMessage)
            and len(m.tool_calls) == 1
            and k + 1 < len(msgs)
            and isinstance(msgs[k + 1], ToolMessage)
            and msgs[k + 1].tool_call_id == m.tool_calls[0]["id"]
        )

    def pairable(k: int) -> bool:
        """Steps ``k`` and ``k + 2`` make one call each, of two different ids (one turn
        cannot make two calls of one id; tau-bench reuses ids across steps)."""
        return (
            k + 3 < len(msgs)
            and one_call(k)
            and one_call(k + 2)
            and msgs[k].tool_calls[0]["id"] != msgs[k + 2].tool_calls[0]["id"]
        )

    while i < len(msgs):
        if pairable(i):
            first, second = msgs[i], msgs[i + 2]
            text = "\n".join(t for t in (text_of(first), text_of(second)) if t)
            merged = AIMessage(
                text, tool_calls=[*first.tool_calls, *second.tool_calls], id=first.id
            )
            out += [merged, msgs[i + 1], msgs[i + 3]]
            i += 4
        else:
            out.append(msgs[i])
            i += 1
    return replace(trajectory, messages=out)


def text_protocol(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` as an agent without tool calling records it: each assistant turn
    writes its calls in its text, a fenced block per call (a ``bash`` block holding the
    command when the call's only argument is ``command``, else the tool's name and its
    arguments as JSON), and reads each result as a user message. This is
    mini-swe-agent's own format (the data set's runs were recorded with tool calls),
    and that of ReAct agents and of models without tool calling. Texts, commands,
    outputs and ids are the recorded ones."""
    out: list[BaseMessage] = []
    for m in trajectory.messages:
        if isinstance(m, AIMessage) and m.tool_calls:
            blocks = []
            for tc in m.tool_calls:
                args = tc["args"]
                if set(args) == {"command"} and isinstance(args["command"], str):
                    blocks.append(f"```bash\n{args['command']}\n```")
                else:
                    blocks.append(f"```\n{tc['name']} {json.dumps(args, ensure_ascii=False)}\n```")
            text = "\n\n".join(t for t in (text_of(m).strip(), *blocks) if t)
            out.append(AIMessage(text, id=m.id))
        elif isinstance(m, ToolMessage):
            out.append(HumanMessage(text_of(m), id=m.id))
        else:
            out.append(m)
    return replace(trajectory, messages=out)


def replay_one(
    trajectory: Trajectory,
    runner: Runner,
    row: Row,
    *,
    check_every: int = 25,
    common: frozenset[str] = frozenset(),
) -> None:
    """Replay one trajectory through ``runner``, adding its measurements to ``row``.

    ``common`` are the data set's boilerplate tokens (see :func:`frequent_tokens`),
    never counted as facts the next action needs. With :data:`TASK_STAND_IN` set, the
    system is fed that line in place of the task statement (needed facts are still
    those of the recorded trajectory, where task facts never count).
    """
    facts = FactTracker(trajectory.messages, common, runner.counter)
    msgs = list(trajectory.messages)
    padding = 0  # what --pad-system adds to every unmanaged context
    if PAD_SYSTEM and msgs and isinstance(msgs[0], SystemMessage):
        msgs[0] = padded_system(msgs[0], PAD_SYSTEM, runner.counter)
        padding = runner.counter.count_message(msgs[0]) - facts.tokens[0]
    task = facts.first_user
    if TASK_STAND_IN is not None and task is not None:
        msgs[task] = HumanMessage(TASK_STAND_IN, id=msgs[task].id)
    task_key = _content_key(msgs[task]) if task is not None else None
    system = msgs[0] if msgs and isinstance(msgs[0], SystemMessage) else None
    runner.start(system)
    calls_before = runner.summarizer.calls
    input_before = runner.summarizer.input_tokens
    before = (row.support.over_needed, row.support.over_present, row.effective)
    cursor = 0
    previous: list[tuple[str, str, str, str]] = []
    last: Sent | None = None
    for k, point in enumerate(_call_points(msgs)):
        new = msgs[cursor:point]
        cursor = point
        started = time.perf_counter()
        sent_messages = runner.step(list(new))
        row.overheads.append(time.perf_counter() - started)
        sent = runner.measure(sent_messages)
        total = sent.total
        claimed = getattr(runner, "engine_tokens", None)
        if claimed is not None and claimed != total:
            row.count_mismatches += 1
        if k % check_every == 0:  # one exact count of the view as sent, from scratch
            row.count_checks += 1
            if runner.counter.count(sent.messages, sent.tools) != total:
                row.count_mismatches += 1
        cached, previous = cached_prefix(sent, previous, runner.counter)
        row.cached += cached
        unmanaged = padding + sum(facts.tokens[:point])  # what an unmanaged agent would send
        needed = facts.needed(point)
        over = unmanaged > runner.budget
        if over and task_key is not None:
            row.task_checks += 1
            row.task_kept += any(_content_key(m) == task_key for m in runner.context_messages(sent))
        if needed:
            text = "\n".join(original_text(m) for m in runner.context_messages(sent))
            for fact, distance in needed.items():
                hit = fact in text
                label = FactTracker.bucket(distance)
                row.support.needed += 1
                row.support.present += hit
                row.support.by_distance[label] += 1
                row.support.by_distance_present[label] += hit
                if over:
                    row.support.over_needed += 1
                    row.support.over_present += hit
        row.calls += 1
        row.sent += total
        row.largest = max(row.largest, total)
        row.over_budget += total > runner.budget
        problems = find_violations(sent.messages)
        if problems:
            row.invalid += 1
            row.violation_kinds.update({_violation_kind(p) for p in problems})
        last = sent
    row.trajectories += 1
    row.summarizer_calls += runner.summarizer.calls - calls_before
    row.compactions += runner.compactions
    row.placeholders += runner.placeholders
    row.summarizer_input += runner.summarizer.input_tokens - input_before
    row.per_trajectory.append(
        (
            row.support.over_needed - before[0],
            row.support.over_present - before[1],
            row.effective - before[2],
        )
    )
    if last is None:
        return
    originals = [m for m in msgs[:cursor] if m.id]
    in_context = {_content_key(m) for m in runner.context_messages(last)}
    texts = [text_of(m) for m in last.messages]
    by_tool = runner.reachable_by_tool(originals, last)
    for m in originals:
        body = text_of(m)
        if (
            m.id in by_tool
            or _content_key(m) in in_context
            or (len(body) >= 40 and any(body in t for t in texts))  # verbatim inside a summary
        ):
            row.recoverable += 1
    row.originals += len(originals)


def run(
    path: Path,
    systems: Sequence[str],
    budgets: Sequence[int],
    *,
    limit: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """Replay every trajectory of ``path`` through every system at every budget."""
    trajectories = load_trajectories(path, limit=limit)
    if PARALLEL_CALLS:
        trajectories = [parallel_calls(t) for t in trajectories]
    if TEXT_PROTOCOL:
        trajectories = [text_protocol(t) for t in trajectories]
    if UUID_IDS:
        trajectories = [uuid_ids(t) for t in trajectories]
    common = frequent_tokens(trajectories)
    counter = default_counter()
    rows = []
    for system in systems:
        for budget in budgets:
            row = Row(system, budget, path.name)
            started = time.perf_counter()
            for t in trajectories:
                runner = make_runner(system, budget, counter, CountingSummarizer(counter=counter))
                with runner.ids():
                    replay_one(t, runner, row, common=common)
            rows.append(row)
            if progress is not None:
                progress(f"{path.name} {system} {budget}: {time.perf_counter() - started:.1f}s")
    return rows


# --- output -----------------------------------------------------------------------------------
HEADER = (
    "| system | budget | support (all calls) | support (over budget) | largest sent | "
    "calls over budget | invalid seqs | tokens sent | cached prefix | effective cost | "
    "summarizer calls | summarizer input | overhead p50 ms | p99 ms | recoverable |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def table(rows: Sequence[Row]) -> str:
    lines = [HEADER]
    for r in rows:
        lines.append(
            f"| {r.system} | {r.budget // 1000}k | {r.support.share:.1%} | "
            f"{r.support.over_share:.1%} | {r.largest:,} | {r.over_budget:,} | "
            f"{r.invalid:,} | {r.sent:,} | {r.cached_share:.1%} | {r.effective:,.0f} | "
            f"{r.summarizer_calls:,} | {r.summarizer_input:,} | {r.p50_ms:.2f} | "
            f"{r.p99_ms:.1f} | {r.recoverable_share:.1%} |"
        )
    return "\n".join(lines)


def distance_table(rows: Sequence[Row]) -> str:
    """Support by how far back the needed fact was last seen, and how often the task
    statement (never a needed fact) was in the context on over-budget calls."""
    labels = [label for _, _, label in DISTANCES]
    lines = [
        "| system | budget | "
        + " | ".join(f"last seen {lb} back" for lb in labels)
        + " | task statement in context |",
        "|---|---:|" + "---:|" * (len(labels) + 1),
    ]
    for r in rows:
        cells = []
        for lb in labels:
            share = r.support.distance_share(lb)
            cells.append("–" if share is None else f"{share:.0%} ({r.support.by_distance[lb]:,})")
        cells.append("–" if r.task_share is None else f"{r.task_share:.0%}")
        lines.append(f"| {r.system} | {r.budget // 1000}k | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(rows: Sequence[Row]) -> list[str]:
    """Facts a reader of the table needs: violation kinds, count checks, targets at 16k."""
    out = []
    for r in rows:
        if r.placeholders:
            out.append(
                f"- {r.system} at {r.budget // 1000}k: {r.placeholders} of {r.compactions} "
                "compactions dropped the history with langchain's placeholder summary "
                f"({PLACEHOLDER!r}: the summary model is not called when no user message falls "
                "in the last trim_tokens_to_summarize tokens; langchain-ai/langchain#39261)"
            )
        if r.violation_kinds:
            kinds = ", ".join(f"{k}: {v}" for k, v in r.violation_kinds.most_common())
            out.append(f"- {r.system} at {r.budget // 1000}k: invalid sequences are {kinds}")
        if r.count_mismatches:
            out.append(
                f"- {r.system} at {r.budget // 1000}k: {r.count_mismatches} of {r.count_checks} "
                "spot checks of the sent view's token count did not match (a bug)"
            )
    return out


def cost_and_support(row: Row) -> tuple[float, float]:
    """A row's point on the frontier: (effective cost, support on over-budget calls, %)."""
    return row.effective, 100 * row.support.over_share


def peer_line(
    point: tuple[float, float], a: tuple[float, float], b: tuple[float, float]
) -> float | None:
    """The quality on the straight line through the peers' points ``a`` and ``b`` (each
    ``(effective cost, quality)``) at ``point``'s cost, extended past either end, and
    how far ``point``'s quality lies above it: what the peers' own trade between
    quality and cost would give for what ours costs. ``None`` when both peers cost the
    same (no line)."""
    (ca, qa), (cb, qb) = a, b
    if ca == cb:
        return None
    return point[1] - (qa + (point[0] - ca) * (qb - qa) / (cb - ca))


#: Resamples of :func:`bootstrap`, and the share of them its intervals leave out.
RESAMPLES = 2_000
ALPHA = 0.10


def bootstrap(
    ours: Row, lm: Row | None, mw: Row | None, *, resamples: int = RESAMPLES, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """Intervals (the central ``1 - ALPHA``) of the defaults' gap to the middleware in
    support on over-budget calls (points) and of their margin against the peers' line,
    over the trajectories: a paired bootstrap, each resample draws trajectories with
    replacement and takes the same ones for every system (they replayed the same runs).
    Says how much of a difference is the data set's luck of the draw; empty when the
    rows do not cover the same trajectories."""
    rows = [r for r in (ours, lm, mw) if r is not None]
    n = len(ours.per_trajectory)
    if n < 2 or any(len(r.per_trajectory) != n for r in rows):
        return {}
    rng = random.Random(seed)

    def point(r: Row, picks: Sequence[int]) -> tuple[float, float]:
        needed = sum(r.per_trajectory[i][0] for i in picks)
        present = sum(r.per_trajectory[i][1] for i in picks)
        cost = sum(r.per_trajectory[i][2] for i in picks)
        return cost, 100 * present / needed if needed else 100.0

    gaps: list[float] = []
    margins: list[float] = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        o = point(ours, picks)
        if mw is not None:
            m = point(mw, picks)
            gaps.append(o[1] - m[1])
            if lm is not None:
                margin = peer_line(o, point(lm, picks), m)
                if margin is not None:
                    margins.append(margin)

    def interval(values: list[float]) -> tuple[float, float]:
        ordered = sorted(values)
        return (
            ordered[int(len(ordered) * ALPHA / 2)],
            ordered[min(len(ordered) - 1, int(len(ordered) * (1 - ALPHA / 2)))],
        )

    out = {}
    if gaps:
        out["gap"] = interval(gaps)
    if len(margins) == len(gaps) and margins:
        out["margin"] = interval(margins)
    return out


def by_budget(rows: Sequence[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each budget that has a row of the defaults (``"8k"``), with its rows by system."""
    for budget in sorted({r.budget for r in rows}):
        at = {r.system: r for r in rows if r.budget == budget}
        if "ours" in at:
            yield f"{budget // 1000}k", at


def comparison(rows: Sequence[Row]) -> list[str]:
    """The defaults against the peers at every budget (issue 11's targets), misses named."""
    out = []
    level = f"{1 - ALPHA:.0%}"
    for k, at in by_budget(rows):
        ours, mw, lm = at["ours"], at.get("middleware"), at.get("langmem")
        spread = bootstrap(ours, lm, mw)
        if mw is not None:
            ok = ours.support.over_share >= mw.support.over_share
            gap = spread.get("gap")
            within = (
                f"; the difference's {level} interval over the trajectories "
                f"{gap[0]:+.1f} to {gap[1]:+.1f} points"
                if gap
                else ""
            )
            out.append(
                f"- {k}: support on over-budget calls {ours.support.over_share:.1%} vs the "
                f"middleware's {mw.support.over_share:.1%} ({'met' if ok else 'MISSED'}: at "
                f"least{within})"
            )
        if mw is not None and lm is not None:
            margin = peer_line(*map(cost_and_support, (ours, lm, mw)))
            if margin is not None:
                band = spread.get("margin")
                within = f" ({level} interval {band[0]:+.1f} to {band[1]:+.1f})" if band else ""
                out.append(
                    f"- {k}: support on over-budget calls {margin:+.1f} points{within} against "
                    "the line through LangMem's and the middleware's points at the defaults' "
                    "cost (the frontier: above it is better than the peers' own trade)"
                )
        if lm is not None:
            ok = ours.effective <= lm.effective
            out.append(
                f"- {k}: effective cost {ours.effective:,.0f} vs LangMem's {lm.effective:,.0f} "
                f"({'met' if ok else 'MISSED'}: at most)"
            )
            if lm.summarizer_input:
                ratio = ours.summarizer_input / lm.summarizer_input
                out.append(
                    f"- {k}: summarizer input {ours.summarizer_input:,} = {ratio:.2f}x LangMem's "
                    f"({'met' if ratio <= 0.5 else 'MISSED'}: at most 0.50x)"
                )
        none = at.get("none")
        if none is not None and none.over_budget == 0 and none.effective:
            ratio = ours.effective / none.effective
            out.append(
                f"- {k}: nothing needs compressing; the defaults cost {ratio:.2f}x the unmanaged "
                f"agent ({'met' if ratio <= 1.05 else 'MISSED'}: at most 1.05x)"
            )
    return out


def _dominated_by(system: str, points: dict[str, tuple[float, float]]) -> list[str]:
    """The other systems of ``points`` (each ``(effective cost, quality)``) that keep at
    least as much for at most as much, and are better on one of the two."""
    cost, quality = points[system]
    return [
        other
        for other, (c, q) in points.items()
        if other != system and c <= cost and q >= quality and (c, q) != (cost, quality)
    ]


def with_both_peers(rows: Sequence[Any]) -> Iterator[tuple[int, dict[str, Any], Any, Any]]:
    """Each budget where both LangMem and the middleware ran: the budget, its rows by
    system, LangMem's row and the middleware's (the two points of the peers' line)."""
    for budget in sorted({r.budget for r in rows}):
        at = {r.system: r for r in rows if r.budget == budget}
        lm, mw = at.get("langmem"), at.get("middleware")
        if lm is not None and mw is not None:
            yield budget, at, lm, mw


STANDING_HEADER = (
    "| system | budget | support (over budget) | effective cost | against the peers' line "
    "| against the middleware's support | cost against LangMem's | dominated by |\n"
    "|---|---:|---:|---:|---:|---:|---:|---|"
)


def standing(rows: Sequence[Row]) -> str:
    """Every configuration of this package in ``rows`` (the defaults, the lean mode, each
    ``--sweep`` variant) against the peers at each budget: support on over-budget calls
    and effective cost; how far above the line through LangMem's and the middleware's
    points (points of support at the same cost); the gap to the middleware's support; the
    cost as a multiple of LangMem's; and which of this package's other configurations
    dominate it (as much support or more for as little or less). Empty without both
    peers' rows."""
    lines = [STANDING_HEADER]
    for budget, at, lm, mw in with_both_peers(rows):
        points = {s: cost_and_support(r) for s, r in at.items() if is_ours(s)}
        for system, point in points.items():
            margin = peer_line(point, cost_and_support(lm), cost_and_support(mw))
            above = "–" if margin is None else f"{margin:+.1f}"
            lines.append(
                f"| {system} | {budget // 1000}k | {point[1]:.1f}% | {point[0] / 1e6:.2f}M | "
                f"{above} | {point[1] - 100 * mw.support.over_share:+.1f} | "
                f"{point[0] / max(lm.effective, 1):.2f}x | "
                f"{', '.join(_dominated_by(system, points)) or '–'} |"
            )
    return "\n".join(lines) if len(lines) > 1 else ""


def _pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or ``None`` (said) when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[bench]')", file=sys.stderr)
        return None
    return plt


def frontier(results: dict[str, list[Row]], path: Path) -> Path | None:
    """Support on over-budget calls against effective cost: one point per system x budget."""
    plt = _pyplot()
    if plt is None:
        return None
    datasets = [d for d, rows in results.items() if any(r.support.over_needed for r in rows)]
    if not datasets:
        return None
    fig, axes = plt.subplots(1, len(datasets), figsize=(6.5 * len(datasets), 4.6), squeeze=False)
    markers = {8_000: "o", 16_000: "s", 32_000: "^"}
    for d, name in enumerate(datasets):
        ax = axes[0][d]
        rows = [r for r in results[name] if r.system != "none"]
        for s, system in enumerate(dict.fromkeys(r.system for r in rows)):
            pts = sorted((r for r in rows if r.system == system), key=lambda r: r.budget)
            color = f"C{s}"
            ax.plot(
                [r.effective / 1e6 for r in pts],
                [100 * r.support.over_share for r in pts],
                color=color,
                linewidth=0.8,
                alpha=0.6,
            )
            for r in pts:
                ax.scatter(
                    r.effective / 1e6,
                    100 * r.support.over_share,
                    color=color,
                    marker=markers.get(r.budget, "o"),
                    label=f"{LABELS.get(system, system)} {r.budget // 1000}k",
                )
        ax.set_xlabel("effective cost (M tokens): lower is better")
        ax.set_ylabel("next-action support on over-budget calls (%)")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def frontier_by_budget(rows: Sequence[Row], path: Path) -> Path | None:
    """One panel per budget where both peers ran: the peers' two points and the line
    through them, and each configuration of this package as a labelled point (the
    defaults, the lean mode, every ``--sweep`` variant), support on over-budget calls
    against effective cost. ``None`` (no file) without a panel to draw."""
    panels = list(with_both_peers(rows))
    plt = _pyplot() if panels else None
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 5.6), squeeze=False)
    order: dict[str, int] = {}  # one colour and marker per configuration in every panel
    for ax, (budget, at, lm, mw) in zip(axes[0], panels, strict=True):
        peers = [(c / 1e6, q) for c, q in map(cost_and_support, (lm, mw))]
        ours = {s: r for s, r in at.items() if is_ours(s)}
        xs = [r.effective / 1e6 for r in ours.values()] + [c for c, _ in peers]
        lo, hi = min(xs), max(xs)
        (c1, q1), (c2, q2) = peers
        if c1 != c2:
            slope = (q2 - q1) / (c2 - c1)
            ax.plot([lo, hi], [q1 + (lo - c1) * slope, q1 + (hi - c1) * slope], "k--", lw=0.8)
        for (c, q), name in zip(peers, ("langmem", "middleware"), strict=True):
            ax.scatter(c, q, color="black", marker="s")
            ax.annotate(name, (c, q), fontsize=7, xytext=(4, -9), textcoords="offset points")
        for system, r in ours.items():
            k = order.setdefault(system, len(order))
            ax.scatter(
                r.effective / 1e6,
                100 * r.support.over_share,
                color=f"C{k % 10}",
                marker="o" if sweep_config(system) is None else "^v<>"[k // 10 % 4],
                label=LABELS.get(system, system[5:-1] if sweep_config(system) else system),
            )
        ax.set_title(f"{lm.dataset} at {budget // 1000}k", fontsize=10)
        ax.set_xlabel("effective cost (M tokens): lower is better")
        ax.set_ylabel("next-action support on over-budget calls (%)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=7.5)
    fig.tight_layout(rect=(0, 0.06 + 0.025 * ((len(labels) - 1) // 4), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot(results: dict[str, list[Row]], path: Path) -> Path | None:
    """Effective cost, largest context sent and recoverable share, per data set."""
    plt = _pyplot()
    if plt is None:
        return None
    datasets = list(results)
    fig, axes = plt.subplots(len(datasets), 3, figsize=(15, 4.2 * len(datasets)), squeeze=False)
    for d, name in enumerate(datasets):
        rows = results[name]
        systems = list(dict.fromkeys(r.system for r in rows))
        budgets = sorted({r.budget for r in rows})
        width = 0.8 / max(1, len(systems))
        panels = [
            ("effective cost (M tokens)", lambda r: r.effective / 1e6),
            ("largest context sent / budget", lambda r: r.largest / r.budget),
            ("originals recoverable (%)", lambda r: 100 * r.recoverable_share),
        ]
        for p, (title, value) in enumerate(panels):
            ax = axes[d][p]
            for s, system in enumerate(systems):
                by_budget = {r.budget: r for r in rows if r.system == system}
                xs = [b + (s - (len(systems) - 1) / 2) * width for b in range(len(budgets))]
                ys = [value(by_budget[b]) if b in by_budget else 0 for b in budgets]
                ax.bar(xs, ys, width, label=LABELS.get(system, system))
            ax.set_xticks(range(len(budgets)), [f"{b // 1000}k" for b in budgets])
            ax.set_title(f"{name}: {title}", fontsize=10)
            if p == 1:
                ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
                ax.set_yscale("log")
            ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- long chats: LoCoMo ----------------------------------------------------------------------------
LOCOMO = "locomo-dev.json"
CHAT_BUDGETS = (4_000, 8_000)
CHAT_SYSTEMS = ("langmem", "middleware", "ours", "ours-lean")


def locomo_chats(path: Path) -> list[tuple[Trajectory, dict[str, str], list[dict[str, Any]]]]:
    """Each LoCoMo conversation as a chat: the first speaker's turns are user messages,
    the second speaker's assistant messages, each ``"Name (session date): text"`` with the
    speaker as the message name (what a chat app that stores both sides would keep); with the text of each ``dia_id`` and
    the questions of categories 1-4."""
    from langchain_core.messages import HumanMessage

    out = []
    for conv in json.loads(path.read_text(encoding="utf-8")):
        c = conv["conversation"]
        first = c["speaker_a"]
        msgs: list[BaseMessage] = [
            SystemMessage(f"You are {c['speaker_b']}, chatting with {first}.", id="system")
        ]
        texts: dict[str, str] = {}
        k = 1
        while f"session_{k}" in c:
            date = c.get(f"session_{k}_date_time", "")
            for turn in c[f"session_{k}"]:
                text = f"{turn['speaker']} ({date}): {turn['text']}"
                texts[turn["dia_id"]] = text
                cls = HumanMessage if turn["speaker"] == first else AIMessage
                # the speaker as the message's name too, as LangChain records who spoke
                # (benchmarks/search_recall.py archives the turns the same way)
                msgs.append(
                    cls(text, id=f"{conv['sample_id']}-{turn['dia_id']}", name=turn["speaker"])
                )
            k += 1
        qa = [q for q in conv["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]
        out.append((Trajectory(str(conv["sample_id"]), msgs), texts, qa))
    return out


@dataclass
class ChatRow:
    """Evidence of LoCoMo's questions at the end of each conversation, and over the ends
    of its sessions (every question whose evidence turns were all said by then)."""

    system: str
    budget: int
    questions: int = 0
    in_context: int = 0
    findable: int = 0  # in context, or an evidence turn in search_history's top 5
    session_questions: int = 0  # (question, session end) pairs, the evidence said by then
    session_in_context: int = 0
    #: What the chats cost: model calls, tokens sent, the cached prefix, the summarizer.
    calls: int = 0
    sent: int = 0
    cached: int = 0
    summarizer_calls: int = 0
    summarizer_input: int = 0

    @property
    def effective(self) -> float:
        """Uncached input + 0.1 x cached input + summarizer input (as :attr:`Row.effective`)."""
        return (self.sent - self.cached) + CACHED_PRICE * self.cached + self.summarizer_input

    def as_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "budget": self.budget,
            "questions": self.questions,
            "evidence_in_context": round(self.in_context / max(self.questions, 1), 4),
            "in_context_or_search_top5": round(self.findable / max(self.questions, 1), 4),
            "session_end_questions": self.session_questions,
            "evidence_in_context_at_session_ends": round(
                self.session_in_context / max(self.session_questions, 1), 4
            ),
            "calls": self.calls,
            "sent": self.sent,
            "cached": self.cached,
            "summarizer_calls": self.summarizer_calls,
            "summarizer_input": self.summarizer_input,
            "effective": round(self.effective),
        }


def _session(message: BaseMessage) -> str:
    """The LoCoMo session of a turn, from its id (``"<sample>-D<session>:<turn>"``)."""
    return str(message.id).rsplit("-", 1)[-1].split(":", 1)[0]


def chat_calls(trajectory: Trajectory, runner: Runner) -> Iterator[tuple[int, Sent, bool]]:
    """Replay one chat through ``runner`` as :func:`replay_one` does (the system called
    before each assistant message) and, at the end of each session, feed what is left of
    it too: yields ``(messages fed, what was sent, at a session's end)`` for every call,
    the conversation's end last."""
    msgs = trajectory.messages
    has_system = bool(msgs) and isinstance(msgs[0], SystemMessage)
    runner.start(msgs[0] if has_system else None)
    cursor = int(has_system)
    for i in range(cursor, len(msgs)):
        if isinstance(msgs[i], AIMessage) and cursor < i:  # a model call before message i
            sent = runner.measure(runner.step(list(msgs[cursor:i])))
            cursor = i
            yield cursor, sent, False
        if i + 1 == len(msgs) or _session(msgs[i + 1]) != _session(msgs[i]):
            sent = runner.measure(runner.step(list(msgs[cursor : i + 1])))
            cursor = i + 1
            yield cursor, sent, True


def chat_snapshots(trajectory: Trajectory, runner: Runner) -> Iterator[tuple[int, Sent]]:
    """:func:`chat_calls` at each session's end only: ``(messages fed, what was sent)``."""
    for fed, sent, session_end in chat_calls(trajectory, runner):
        if session_end:
            yield fed, sent


def run_chats(path: Path, systems: Sequence[str], budgets: Sequence[int]) -> list[ChatRow]:
    """Replay every conversation; at each session's end and at the conversation's end,
    which questions' evidence is still there (and, at the end, which ``search_history``
    finds)."""
    from langchain_autocontext.search import search_history

    chats = locomo_chats(path)
    counter = default_counter()
    rows = []
    for system in systems:
        for budget in budgets:
            row = ChatRow(system, budget)
            for trajectory, texts, qa in chats:
                runner = make_runner(system, budget, counter, CountingSummarizer(counter=counter))
                turn = {m.id: k for k, m in enumerate(trajectory.messages)}
                # the index of the last evidence turn of each question: said from then on
                said_at = [
                    max(turn.get(f"{trajectory.id}-{e}", 0) for e in q["evidence"]) for q in qa
                ]
                calls_before = runner.summarizer.calls
                input_before = runner.summarizer.input_tokens
                previous: list[tuple[str, str, str, str]] = []
                with runner.ids():
                    for fed, sent, session_end in chat_calls(trajectory, runner):
                        cached, previous = cached_prefix(sent, previous, counter)
                        row.calls += 1
                        row.sent += sent.total
                        row.cached += cached
                        if not session_end:
                            continue
                        context = "\n".join(original_text(m) for m in runner.context_messages(sent))
                        end = fed == len(trajectory.messages)
                        for q, at in zip(qa, said_at, strict=True):
                            if at >= fed:
                                continue  # not said yet
                            wanted = [texts[e] for e in q["evidence"] if e in texts]
                            here = any(t in context for t in wanted)
                            row.session_questions += 1
                            row.session_in_context += here
                            if not end:
                                continue
                            found = here
                            if not here and isinstance(runner, OursRunner):
                                ids = {f"{trajectory.id}-{e}" for e in q["evidence"]}
                                hits = search_history(
                                    runner.store, runner.thread, str(q["question"]), 5
                                )
                                found = any(h.id in ids for h in hits)
                            row.questions += 1
                            row.in_context += here
                            row.findable += found
                row.summarizer_calls += runner.summarizer.calls - calls_before
                row.summarizer_input += runner.summarizer.input_tokens - input_before
            rows.append(row)
    return rows


def chat_table(rows: Sequence[ChatRow]) -> str:
    lines = [
        "| system | budget | questions | evidence turn in context | in context or in "
        "search_history's top 5 | evidence in context at every session's end | "
        "tokens sent | cached prefix | summarizer input | effective cost |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        d = r.as_dict()
        findable = f"{d['in_context_or_search_top5']:.2f}" if is_ours(r.system) else "–"
        lines.append(
            f"| {r.system} | {r.budget // 1000}k | {r.questions} | "
            f"{d['evidence_in_context']:.2f} | {findable} | "
            f"{d['evidence_in_context_at_session_ends']:.2f} "
            f"({r.session_questions:,}) | {r.sent:,} | {r.cached / max(r.sent, 1):.1%} | "
            f"{r.summarizer_input:,} | {r.effective:,.0f} |"
        )
    return "\n".join(lines)


def chat_comparison(rows: Sequence[ChatRow]) -> list[str]:
    """The defaults against the peers on the chats (issue 11's targets), misses named, and
    where they lie against the line through the peers' (cost, evidence) points."""
    out = []
    for k, at in by_budget(rows):
        ours, mw, lm = at["ours"], at.get("middleware"), at.get("langmem")
        d = ours.as_dict()
        if mw is not None:
            m = mw.as_dict()
            for key, what in (
                ("evidence_in_context", "at the end"),
                ("evidence_in_context_at_session_ends", "at every session's end"),
            ):
                ok = d[key] >= m[key]
                out.append(
                    f"- {k}: evidence in context {what} {d[key]:.3f} vs the middleware's "
                    f"{m[key]:.3f} ({'met' if ok else 'MISSED'}: at least), for "
                    f"{ours.effective / max(mw.effective, 1):.2f}x its effective cost"
                )
                if lm is not None:
                    margin = peer_line(
                        (ours.effective, d[key]),
                        (lm.effective, lm.as_dict()[key]),
                        (mw.effective, m[key]),
                    )
                    if margin is not None:
                        out.append(
                            f"- {k}: evidence {what} {margin:+.3f} against the line through "
                            "LangMem's and the middleware's points at the defaults' cost"
                        )
        ok = d["in_context_or_search_top5"] >= 0.75
        out.append(
            f"- {k}: in context or in search_history's top 5 "
            f"{d['in_context_or_search_top5']:.2f} ({'met' if ok else 'MISSED'}: at least 0.75)"
        )
    return out


CHAT_STANDING_HEADER = (
    "| system | budget | evidence at the end | at every session's end | effective cost | "
    "against the peers' line, end / session ends | cost against the middleware's |\n"
    "|---|---:|---:|---:|---:|---:|---:|"
)


def chat_standing(rows: Sequence[ChatRow]) -> str:
    """:func:`standing` for the chats: every configuration of this package against the
    line through the peers' (cost, evidence) points, at the end and over the session
    ends, and its cost as a multiple of the middleware's. Empty without both peers."""
    keys = ("evidence_in_context", "evidence_in_context_at_session_ends")
    lines = [CHAT_STANDING_HEADER]
    for budget, at, lm, mw in with_both_peers(rows):
        for system, r in at.items():
            if not is_ours(system):
                continue
            d, lmd, mwd = r.as_dict(), lm.as_dict(), mw.as_dict()
            margins = [
                peer_line((r.effective, d[k]), (lm.effective, lmd[k]), (mw.effective, mwd[k]))
                for k in keys
            ]
            above = " / ".join("–" if m is None else f"{m:+.3f}" for m in margins)
            lines.append(
                f"| {system} | {budget // 1000}k | {d[keys[0]]:.3f} | {d[keys[1]]:.3f} | "
                f"{r.effective / 1e6:.2f}M | {above} | "
                f"{r.effective / max(mw.effective, 1):.2f}x |"
            )
    return "\n".join(lines) if len(lines) > 1 else ""


def parse_ours_config(text: str) -> dict[str, Any]:
    """``--ours-config``: ``name=value`` pairs separated by commas; a value is a Python
    literal, or a word, and a tuple field takes names separated by commas
    (``keep_tool_results=think,calculate,target_ratio=0.5``)."""
    fields = AutoContextConfig.model_fields
    config: dict[str, Any] = {}
    for item in re.split(r",\s*(?=[A-Za-z_]\w*\s*=)", text.strip()):
        if not item.strip():
            continue
        name, eq, raw = (part.strip() for part in item.partition("="))
        if not eq or name not in fields:
            raise ValueError(f"{item!r} is not name=value with a config field's name")
        try:
            value: Any = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        if typing.get_origin(fields[name].annotation) is tuple and isinstance(value, str):
            value = tuple(n.strip() for n in raw.split(",") if n.strip())
        config[name] = value
    return config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--budgets", default=",".join(str(b) for b in BUDGETS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--files", default=",".join(FILES), help="data files under --data")
    ap.add_argument("--limit", type=int, default=None, help="trajectories per file")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT, help="where the .md, .json and .png go")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument(
        "--chats",
        action="store_true",
        help="also the long-chat benchmark on --chat-file (4k and 8k budgets)",
    )
    ap.add_argument(
        "--chat-file",
        default=LOCOMO,
        help=f"the LoCoMo-format conversations under --data for --chats (default {LOCOMO})",
    )
    ap.add_argument(
        "--ours-config",
        default="",
        help="config fields for this package's systems, e.g. keep_ratio=0.5,target_ratio=0.4 "
        "or keep_tool_results=think,calculate (a tuple field's names take commas too)",
    )
    ap.add_argument(
        "--task-stand-in",
        action="store_true",
        help="an ablation: every system gets a one-line stand-in for the task statement "
        "(the first user message), to show the support that keeping it costs",
    )
    ap.add_argument(
        "--pad-system",
        type=int,
        default=0,
        metavar="TOKENS",
        help="append about TOKENS tokens of rules to every system prompt (all systems)",
    )
    ap.add_argument(
        "--ours-order",
        default=None,
        help="strategy order for this package's systems by the design's numbers, e.g. 2314567",
    )
    ap.add_argument(
        "--ids-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the package's id sequence (another seed: how much a figure owes to "
        "where compactions happen to fall)",
    )
    ap.add_argument(
        "--parallel-calls",
        action="store_true",
        help="reshape the trajectories: each two consecutive one-call steps become one "
        "assistant turn making both calls (agents that call tools in parallel)",
    )
    ap.add_argument(
        "--text-protocol",
        action="store_true",
        help="reshape the trajectories: every tool call written as a fenced block in the "
        "assistant's text and every result read as a user message (agents without tool "
        "calling; mini-swe-agent's own format)",
    )
    ap.add_argument(
        "--uuid-ids",
        action="store_true",
        help="replace every message id by a uuid4, the ids LangGraph gives messages",
    )
    ap.add_argument(
        "--sweep",
        default="",
        metavar="VARIANTS",
        help="more configurations of this package to run beside the systems, separated by "
        "semicolons, each in --ours-config's syntax (on top of it): "
        "'target_ratio=0.3;target_ratio=0.5;token_ratio=0.9,target_ratio=0.5'; each "
        "runs as the system ours[...] and takes its place in the table of where this "
        "package's configurations stand against the peers",
    )
    ap.add_argument(
        "--peer-trigger",
        type=float,
        default=0.75,
        metavar="RATIO",
        help="the peers' trigger as a share of the budget (default: the package's "
        "token_ratio, 0.75): with --sweep 'token_ratio=0.9', whether a later trigger is "
        "the package's edge or the same trade for every system",
    )
    args = ap.parse_args(argv)
    global OURS_ORDER, TASK_STAND_IN, PAD_SYSTEM, IDS_SEED, PARALLEL_CALLS, UUID_IDS
    global TEXT_PROTOCOL
    if not 0 < args.peer_trigger <= 1:
        ap.error(f"--peer-trigger must be in (0, 1], got {args.peer_trigger}")
    global TRIGGER_RATIO
    TRIGGER_RATIO = args.peer_trigger
    PAD_SYSTEM = max(0, args.pad_system)
    PARALLEL_CALLS = args.parallel_calls
    UUID_IDS = args.uuid_ids
    TEXT_PROTOCOL = args.text_protocol
    IDS_SEED = args.ids_seed
    if args.task_stand_in:
        TASK_STAND_IN = "Fix the issue in the task statement given earlier."
    try:
        OURS_CONFIG.update(parse_ours_config(args.ours_config))
    except ValueError as exc:
        ap.error(f"--ours-config: {exc}")
    if args.ours_order:
        strategies_in_order(args.ours_order)  # a bad order fails before the long run
        OURS_ORDER = args.ours_order
    budgets = [int(b) for b in args.budgets.split(",") if b]
    systems = []
    for s in (s.strip() for s in args.systems.split(",") if s.strip()):
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}; expected some of {', '.join(SYSTEMS)}")
        why = available(s)
        if why:
            print(f"skipping {s}: {why}", file=sys.stderr)
            continue
        systems.append(s)
    try:
        systems += [sweep_system(v) for v in args.sweep.split(";") if v.strip()]
    except ValueError as exc:
        ap.error(f"--sweep: {exc}")
    results: dict[str, list[Row]] = {}
    report = [
        "Same fake 150-word summarizer and the same exact counter (tiktoken cl100k_base) for "
        "every system; effective cost = uncached input + 0.1 x cached prefix + summarizer input.",
    ]
    report.append(f"Versions: {peer_versions()}.")
    if PAD_SYSTEM:
        report.append(f"Every system prompt carried about {PAD_SYSTEM:,} more tokens of rules.")
    if IDS_SEED:
        report.append(f"The package's ids came from the sequence of seed {IDS_SEED}.")
    if TRIGGER_RATIO != 0.75:
        report.append(f"The peers' trigger was {TRIGGER_RATIO} of the budget (not 0.75).")
    if PARALLEL_CALLS:
        report.append(
            "Reshaped (--parallel-calls): each two consecutive one-call steps were replayed "
            "as one assistant turn making both calls, then both results."
        )
    if TEXT_PROTOCOL:
        report.append(
            "Reshaped (--text-protocol): every tool call was replayed as a fenced block in "
            "the assistant's text and every result as a user message."
        )
    if UUID_IDS:
        report.append(
            "Every message id was replaced by a uuid4 (--uuid-ids), as LangGraph ids them."
        )
    if TASK_STAND_IN is not None:
        report.append(
            f"Ablation (--task-stand-in): every system was given {TASK_STAND_IN!r} in place of "
            "the task statement."
        )
    for name in (f.strip() for f in args.files.split(",") if f.strip()):
        path = args.data / name
        if not path.is_file():
            print(f"skipping {name}: {path} is absent", file=sys.stderr)
            continue
        rows = run(
            path,
            systems,
            budgets,
            limit=args.limit,
            progress=lambda msg: print(f"<!-- {msg} -->", file=sys.stderr, flush=True),
        )
        results[name] = rows
        n_traj = rows[0].trajectories if rows else 0
        n_calls = rows[0].calls if rows else 0
        section = [
            f"\n### {name} ({n_traj} trajectories, {n_calls:,} model calls)\n",
            table(rows),
            "",
            "Next-action support by how far back the needed fact was last seen, and the share "
            "of over-budget calls whose context holds the task statement (the first user "
            "message; its facts never count as needed):\n",
            distance_table(rows),
            "",
            *notes(rows),
            *comparison(rows),
        ]
        table_of_standing = standing(rows)
        if table_of_standing:
            section += [
                "",
                "Where each configuration of this package stands against the peers at each "
                "budget (the margin: points of support above the line through LangMem's and "
                "the middleware's points, at the same cost):\n",
                table_of_standing,
            ]
        print("\n".join(section), flush=True)
        report.extend(section)
    chats: list[ChatRow] = []
    chat_file = args.data / args.chat_file
    if args.chats and not chat_file.is_file():
        print(f"--chats: {chat_file} is absent; the long chats are left out", file=sys.stderr)
    if args.chats and chat_file.is_file():
        chat_systems = [s for s in systems if s in CHAT_SYSTEMS or sweep_config(s) is not None]
        chats = run_chats(chat_file, chat_systems, CHAT_BUDGETS)
        section = [
            f"\n### {args.chat_file} (long chats; at the end of each conversation, the questions "
            "of categories 1-4 whose evidence turn is still there; the last column over "
            "the end of every session, each question from the session of its evidence "
            "on, with the number of such pairs)\n",
            chat_table(chats),
            "",
            *chat_comparison(chats),
        ]
        table_of_standing = chat_standing(chats)
        if table_of_standing:
            section += [
                "",
                "Where each configuration of this package stands against the peers' line "
                "(evidence above the line through their points at the same cost):\n",
                table_of_standing,
            ]
        print("\n".join(section), flush=True)
        report.extend(section)
    if not results and not chats:
        print("no data: nothing to compare", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare_peers.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    (args.out / "compare_peers.json").write_text(
        json.dumps(
            {
                **{k: [r.as_dict() for r in v] for k, v in results.items()},
                **({args.chat_file: [r.as_dict() for r in chats]} if chats else {}),
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    if not args.no_plot:
        png = plot(results, args.out / "compare_peers.png")
        if png is not None:
            print(f"\nplot: {png}", file=sys.stderr)
        png = frontier(results, args.out / "frontier.png")
        if png is not None:
            print(f"frontier: {png}", file=sys.stderr)
        if args.sweep.strip():  # the variants, budget by budget against the peers' line
            for name, rows in results.items():
                if any(r.support.over_needed for r in rows):
                    png = frontier_by_budget(rows, args.out / f"frontier-{Path(name).stem}.png")
                    if png is not None:
                        print(f"frontier by budget: {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
