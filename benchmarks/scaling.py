"""How the package scales with history length: per-call overhead and checkpoint growth.

    python benchmarks/scaling.py                          # everything (a few minutes)
    python benchmarks/scaling.py --sizes 100,1000 --turns 10,100 --calls 50   # a quick look

1. **Per-call overhead** with 100, 150, 1,000 and 10,000 messages of synthetic
   history (a coding agent's sizes: short assistant turns with a tool call, tool
   outputs of a few hundred to ~10k characters). For each size, an agent loop
   appends one tool call and its result per call and calls ``AutoContext.compress``
   (plus ``prepare_model_call``, the model's input view, as the pre-model hook does):

   * *no compression needed*: the budget and message threshold are above the
     history, so every call only archives, counts and passes through;
   * *compression needed*: the same history under a 32k budget. The first call
     compacts the whole history (reported apart: a one-off when an unmanaged
     thread is taken over); the loop's calls after it are the steady state, where
     the store already holds the n originals.

   The median and p99 are over the loop's calls (the first call, which archives
   the n originals, is excluded and reported apart).

2. **Checkpoint bytes per turn**: a real LangGraph graph (``ac.node()`` → agent →
   ``ToolNode`` → ``ac.node()`` → agent) compiled with ``SqliteSaver`` and a
   ``SqliteStore`` on files; one turn = one user request, a tool call with a
   ~3k-character result and a final answer. Bytes are the checkpoint and write
   blobs added by the turn (and the store's values), averaged over the 10 turns
   ending at turns 10, 100 and 1,000. An unmanaged graph (no ``ac.node()``) is
   measured alongside for contrast, over ``--baseline-turns`` turns.

The summarizer is the benchmarks' fake 150-word chat model. Prints markdown tables
and writes ``scaling.md`` / ``scaling.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.memory import InMemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import CountingSummarizer

from langchain_autocontext import AutoContext, AutoContextConfig, AutoContextState
from langchain_autocontext.replay import percentile
from langchain_autocontext.store import OffloadStore
from langchain_autocontext.tokens import default_counter

OUT = Path(__file__).resolve().parent / "results"
SIZES = (100, 150, 1_000, 10_000)
TURNS = (10, 100, 1_000)
SYSTEM_PROMPT = (
    "You are a careful software engineer working in a repository checked out at /testbed. "
    "Use the bash tool to inspect files, run tests and edit code. Think step by step, keep "
    "changes minimal, and explain what you changed. "
) * 8


# --- synthetic histories ----------------------------------------------------------------------
def _output(rng: random.Random, n: int) -> str:
    """A tool output of realistic size (log-normal, median ~1.2k chars, some ~10k)."""
    size = int(min(12_000, max(80, rng.lognormvariate(7.1, 1.0))))
    lines = []
    total = 0
    while total < size:
        k = rng.randrange(10_000)
        line = f"/testbed/pkg/module_{k % 97}.py:{k}: {rng.choice(WORDS)} {rng.choice(WORDS)} ok={k % 3 == 0}"
        lines.append(line)
        total += len(line) + 1
    return f"$ step {n}\n" + "\n".join(lines)


WORDS = ("checked", "imported", "failed", "passed", "skipped", "collected", "patched", "found")


def tool_pair(rng: random.Random, n: int) -> list[BaseMessage]:
    """One assistant turn with a bash call and its result."""
    call_id = f"call_{n}"
    thought = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 60)))
    ai = AIMessage(
        content=f"Step {n}: {thought}",
        tool_calls=[
            {
                "name": "bash",
                "args": {"command": f"grep -rn 'case_{n}' /testbed/pkg | head -{20 + n % 50}"},
                "id": call_id,
                "type": "tool_call",
            }
        ],
        id=f"ai-{n}",
    )
    result = ToolMessage(_output(rng, n), tool_call_id=call_id, name="bash", id=f"tool-{n}")
    return [ai, result]


def history(n_messages: int, seed: int = 0) -> list[BaseMessage]:
    """System prompt, one task, then tool calls and results: ``n_messages`` in all."""
    rng = random.Random(seed)
    msgs: list[BaseMessage] = [
        SystemMessage(SYSTEM_PROMPT, id="sys"),
        HumanMessage("Fix the failing test in pkg/module_3.py and explain the cause.", id="task"),
    ]
    n = 0
    while len(msgs) < n_messages:
        msgs.extend(tool_pair(rng, n))
        n += 1
    return msgs[:n_messages] if n_messages % 2 == 0 else msgs[: n_messages + 1]


# --- part 1: per-call overhead ---------------------------------------------------------------
def _engine(max_tokens: int, msg_threshold: int) -> AutoContext:
    """The engine of an agent bound to the ``bash`` tool the history calls (its schema
    counted, as the package asks: uncounted, every call warned that it was not)."""
    counter = default_counter()
    return AutoContext(
        AutoContextConfig(max_tokens=max_tokens, msg_threshold=msg_threshold),
        summarizer=CountingSummarizer(counter=counter),
        store=OffloadStore(InMemoryStore()),
        token_counter=counter,
        tools=[bash],
    )


def _call(
    ac: AutoContext, working: list[BaseMessage], state: dict[str, Any]
) -> tuple[list[BaseMessage], float, bool]:
    """One model call's work, as the pre-model hook does it: compress, then the view."""
    started = time.perf_counter()
    result = ac.compress(working, thread_id="scaling", state=state.get("ac"))
    call = ac.prepare_model_call(result.messages, state=state.get("ac"))
    if call.state_update:
        state["ac"] = call.state_update
    return list(result.messages), time.perf_counter() - started, result.triggered


def overhead(n_messages: int, *, compress: bool, calls: int) -> dict[str, Any]:
    """Per-call overhead of an agent loop over ``n_messages`` of history."""
    msgs = history(n_messages)
    counter = default_counter()
    tokens = counter.count_messages(msgs)
    if compress:
        ac = _engine(32_000, 100)
    else:  # every threshold above the history, even after the loop's additions
        ac = _engine(4 * (tokens + 4_000 * calls), 2 * n_messages + 4 * calls + 10)
    state: dict[str, Any] = {}
    working, first, first_triggered = _call(ac, msgs, state)
    rng = random.Random(n_messages)
    times = []
    triggered = 0
    for k in range(calls):
        working.extend(tool_pair(rng, 1_000_000 + k))
        working, elapsed, was = _call(ac, working, state)
        times.append(elapsed)
        triggered += was
    return {
        "messages": n_messages,
        "history_tokens": tokens,
        "compress": compress,
        "first_call_ms": first * 1000,
        "first_call_compressed": first_triggered,
        "calls": calls,
        "compressing_calls": triggered,
        "working_messages_after": len(working),
        "p50_ms": statistics.median(times) * 1000,
        "p99_ms": percentile(times, 0.99) * 1000,
        "mean_ms": statistics.fmean(times) * 1000,
    }


# --- part 2: checkpoint bytes per turn --------------------------------------------------------
@tool
def bash(command: str) -> str:
    """Run a shell command in the repository (a fake: returns a log of realistic size)."""
    seed = sum(map(ord, command))
    rng = random.Random(seed)
    lines = [
        f"/testbed/pkg/module_{(seed + i) % 97}.py:{i}: {rng.choice(WORDS)} item {i}"
        for i in range(60)
    ]
    return "\n".join(lines)


def agent(state: dict[str, Any]) -> dict[str, Any]:
    """A deterministic stand-in for the model: one tool call per request, then an answer."""
    msgs = state["messages"]
    last = msgs[-1]
    turn = sum(1 for m in msgs if isinstance(m, HumanMessage))
    if isinstance(last, ToolMessage):
        return {"messages": [AIMessage(f"Done with request {turn}: the log shows no failure.")]}
    call = {
        "name": "bash",
        "args": {"command": f"pytest -q tests/test_case_{turn}.py"},
        "id": f"call-{turn}-{len(msgs)}",
        "type": "tool_call",
    }
    return {"messages": [AIMessage(f"Running the tests for request {turn}.", tool_calls=[call])]}


def build_graph(ac: AutoContext | None, checkpointer: Any, store: Any) -> Any:
    graph = StateGraph(AutoContextState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([bash]))
    if ac is not None:
        graph.add_node("autocontext", ac.node())
        graph.add_edge(START, "autocontext")
        graph.add_edge("autocontext", "agent")
        graph.add_edge("tools", "autocontext")
    else:
        graph.add_edge(START, "agent")
        graph.add_edge("tools", "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    return graph.compile(checkpointer=checkpointer, store=store)


def _blob_bytes(conn: sqlite3.Connection) -> int:
    row = conn.execute(
        "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints"
    ).fetchone()
    writes = conn.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes").fetchone()
    return int(row[0]) + int(writes[0])


def _store_bytes(conn: sqlite3.Connection) -> int:
    try:
        row = conn.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM store").fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(row[0])


def checkpoint_growth(
    turns: int, marks: Sequence[int], *, managed: bool, budget: int = 16_000, window: int = 10
) -> dict[str, Any]:
    """Run ``turns`` turns on one thread; bytes added per turn around each mark."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        ck_conn = sqlite3.connect(Path(tmp) / "checkpoints.sqlite", check_same_thread=False)
        st_conn = sqlite3.connect(
            Path(tmp) / "store.sqlite", check_same_thread=False, isolation_level=None
        )
        saver = SqliteSaver(ck_conn)
        store = SqliteStore(st_conn)
        store.setup()
        ac = None
        if managed:
            counter = default_counter()
            ac = AutoContext(
                AutoContextConfig(max_tokens=budget),
                summarizer=CountingSummarizer(counter=counter),
                token_counter=counter,
                tools=[bash],
            )
        graph = build_graph(ac, saver, store)
        config = {"configurable": {"thread_id": "scaling"}}
        per_turn_ckpt: list[int] = []
        per_turn_store: list[int] = []
        per_turn_ms: list[float] = []
        prev_ckpt = prev_store = 0
        state_messages = 0
        for t in range(1, turns + 1):
            started = time.perf_counter()
            out = graph.invoke({"messages": [HumanMessage(f"Request {t}: run the tests")]}, config)
            per_turn_ms.append((time.perf_counter() - started) * 1000)
            ck, sb = _blob_bytes(ck_conn), _store_bytes(st_conn)
            per_turn_ckpt.append(ck - prev_ckpt)
            per_turn_store.append(sb - prev_store)
            prev_ckpt, prev_store = ck, sb
            state_messages = len(out["messages"])
        file_bytes = (Path(tmp) / "checkpoints.sqlite").stat().st_size
        ck_conn.close()
        st_conn.close()
    result: dict[str, Any] = {
        "managed": managed,
        "budget": budget if managed else None,
        "turns": turns,
        "state_messages_at_end": state_messages,
        "checkpoint_file_bytes": file_bytes,
        "marks": {},
    }
    for mark in marks:
        if mark > turns:
            continue
        lo = max(0, mark - window)
        result["marks"][mark] = {
            "checkpoint_bytes_per_turn": statistics.fmean(per_turn_ckpt[lo:mark]),
            "store_bytes_per_turn": statistics.fmean(per_turn_store[lo:mark]),
            "ms_per_turn": statistics.fmean(per_turn_ms[lo:mark]),
        }
    return result


# --- output -----------------------------------------------------------------------------------
def overhead_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| history messages | history tokens | compression | first call ms | "
        "per-call p50 ms | p99 ms | mean ms | calls that compressed | working messages after |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['messages']:,} | {r['history_tokens']:,} | "
            f"{'needed (32k budget)' if r['compress'] else 'not needed'} | "
            f"{r['first_call_ms']:.1f} | {r['p50_ms']:.3f} | {r['p99_ms']:.2f} | "
            f"{r['mean_ms']:.3f} | {r['compressing_calls']}/{r['calls']} | "
            f"{r['working_messages_after']:,} |"
        )
    return "\n".join(lines)


def checkpoint_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| graph | turn | checkpoint bytes per turn | store bytes per turn | ms per turn |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        name = f"with ac.node() ({r['budget'] // 1000}k budget)" if r["managed"] else "unmanaged"
        for mark, m in r["marks"].items():
            lines.append(
                f"| {name} | {int(mark):,} | {m['checkpoint_bytes_per_turn']:,.0f} | "
                f"{m['store_bytes_per_turn']:,.0f} | {m['ms_per_turn']:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    ap.add_argument("--calls", type=int, default=200, help="loop calls per size")
    ap.add_argument("--turns", default=",".join(str(t) for t in TURNS), help="turn marks")
    ap.add_argument("--baseline-turns", type=int, default=100, help="turns of the unmanaged graph")
    ap.add_argument("--budget", type=int, default=16_000, help="budget of the checkpoint graph")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-checkpoints", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    report: list[str] = []
    data: dict[str, Any] = {}
    if not args.skip_overhead:
        rows = []
        for compress in (False, True):
            for n in (int(s) for s in args.sizes.split(",") if s):
                rows.append(overhead(n, compress=compress, calls=args.calls))
                print(f"<!-- overhead n={n} compress={compress} done -->", file=sys.stderr)
        data["overhead"] = rows
        report += ["### Per-call overhead vs history length", "", overhead_table(rows), ""]
        print("\n".join(report[-4:]), flush=True)
    if not args.skip_checkpoints:
        marks = [int(t) for t in args.turns.split(",") if t]
        rows = [checkpoint_growth(max(marks), marks, managed=True, budget=args.budget)]
        if args.baseline_turns:
            base_marks = sorted(
                {m for m in marks if m <= args.baseline_turns} | {args.baseline_turns}
            )
            rows.append(checkpoint_growth(args.baseline_turns, base_marks, managed=False))
        data["checkpoints"] = rows
        section = [
            "### Checkpoint bytes per turn (SqliteSaver + SqliteStore)",
            "",
            checkpoint_table(rows),
            "",
        ]
        report += section
        print("\n".join(section), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    (args.out / "scaling.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
