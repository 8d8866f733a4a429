"""What a long thread costs the engine's process memory, beside the store.

    python benchmarks/engine_memory.py                  # 500, 2,000 and 4,000 turns
    python benchmarks/engine_memory.py --turns 200      # a quick look

One thread, a coding agent's loop: each turn appends a tool call and its result
(40 lines of output) and calls ``AutoContext.compress`` at an 8k budget, with the
offline summarizer, on ``InMemoryStore``; compaction runs every few turns, so the
working list stays a few dozen messages while the history grows by two messages a
turn. The figure is what ``tracemalloc`` finds still allocated by
``langchain_autocontext/engine.py`` at the end: the engine's per-thread memo (the
ids of the working messages it archived, what the summaries present stand for). The
store's own memory (the history, the offloads: the thread's data) is not counted.
"""

from __future__ import annotations

import argparse
import tracemalloc
import warnings

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, OffloadStore


def engine_bytes(turns: int) -> tuple[int, int]:
    """``(bytes held by engine.py, messages in the thread's history)`` after ``turns``."""
    store = OffloadStore(InMemoryStore())
    ac = AutoContext(max_tokens=8_000, store=store)
    msgs: list[BaseMessage] = [HumanMessage("Fix the bug in parser.py; keep the tests green.")]
    tracemalloc.start()
    try:
        for t in range(turns):
            call = {"name": "read", "args": {"path": f"file_{t}.py"}, "id": f"c{t}"}
            msgs.append(AIMessage(f"step {t}: reading file_{t}.py", tool_calls=[call]))
            output = "\n".join(f"line {i} of file_{t}: value={i * t % 97}" for i in range(40))
            msgs.append(ToolMessage(output, tool_call_id=f"c{t}"))
            msgs = ac.compress(msgs, thread_id="soak").messages
        snap = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = snap.filter_traces([tracemalloc.Filter(True, "*langchain_autocontext/engine.py")])
    return sum(s.size for s in held.statistics("filename")), store.history_count("soak")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--turns", default="500,2000,4000", help="comma-separated turn counts")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # the loop's tool is not counted: not what is measured
    print("| turns | history messages | engine memory | per history message |")
    print("|---:|---:|---:|---:|")
    for turns in (int(t) for t in args.turns.split(",")):
        size, history = engine_bytes(turns)
        print(f"| {turns:,} | {history:,} | {size / 1e3:,.0f} KB | {size / history:.0f} B |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
