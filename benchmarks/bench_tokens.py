"""Benchmark of :class:`langchain_autocontext.tokens.TokenCounter` and the metadata tags.

Run with ``python benchmarks/bench_tokens.py`` (options: ``--messages``,
``--repeats``, ``--seed``). It builds a coding-agent history of about 1,000
messages and 500k tokens (tool outputs of source code and logs, assistant text,
tool calls with JSON arguments) and reports:

* the first full count (cold cache), with tokens/second, next to tiktoken's own
  ``encode_ordinary_batch`` and ``encode_ordinary`` over the same texts;
* the median time to recount the whole history after ONE message changed
  (each repetition edits a different message: a new object with the same id);
* the same with ``tags=True`` (the metadata-tagged view's exact total), and the
  time of ``render_view`` (building the tagged copies) after one change;
* a warm recount with nothing changed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from langchain_autocontext.metadata import render_view
from langchain_autocontext.tokens import TokenCounter

WORDS = [
    "config",
    "parser",
    "token",
    "window",
    "budget",
    "summary",
    "offload",
    "message",
    "history",
    "store",
    "thread",
    "request",
    "response",
    "handler",
    "client",
    "server",
    "cache",
    "index",
    "retry",
    "timeout",
    "buffer",
    "stream",
    "record",
    "schema",
    "field",
    "value",
    "error",
    "result",
    "context",
    "agent",
    "model",
    "tool",
    "call",
    "args",
]
LEVELS = ["DEBUG", "INFO", "INFO", "INFO", "WARNING", "ERROR"]


def _ident(rng: random.Random) -> str:
    return "_".join(rng.sample(WORDS, rng.randint(1, 3)))


def _code(rng: random.Random, lines: int) -> str:
    out: list[str] = []
    while len(out) < lines:
        name = _ident(rng)
        args = ", ".join(_ident(rng) for _ in range(rng.randint(0, 3)))
        out.append(f"def {name}({args}) -> dict[str, int]:")
        out.append(f'    """Return the {rng.choice(WORDS)} of the {rng.choice(WORDS)}."""')
        for _ in range(rng.randint(2, 8)):
            var = _ident(rng)
            out.append(f"    {var} = {_ident(rng)}.get({rng.randint(0, 9999)!r}, {_ident(rng)!r})")
            if rng.random() < 0.3:
                out.append(f"    if {var} is None:")
                out.append(
                    f'        raise ValueError(f"missing {{{var}}} at line {rng.randint(1, 900)}")'
                )
        out.append(f"    return {{'{rng.choice(WORDS)}': {rng.randint(0, 10**6)}}}")
        out.append("")
    return "\n".join(out[:lines])


def _log(rng: random.Random, lines: int) -> str:
    out = []
    for _ in range(lines):
        ts = (
            f"2025-0{rng.randint(1, 9)}-{rng.randint(10, 28)}T{rng.randint(10, 23)}:"
            f"{rng.randint(10, 59)}:{rng.randint(10, 59)}.{rng.randint(100, 999)}Z"
        )
        level = rng.choice(LEVELS)
        msg = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
        out.append(
            f"{ts} {level:<7} [{_ident(rng)}] {msg} id={uuid.UUID(int=rng.getrandbits(128))}"
        )
    return "\n".join(out)


def _prose(rng: random.Random, sentences: int) -> str:
    return " ".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."
        for _ in range(sentences)
    )


def build_history(n_messages: int, seed: int) -> list[BaseMessage]:
    """A coding-agent trajectory: user tasks, tool calls and large tool outputs."""
    rng = random.Random(seed)
    msgs: list[BaseMessage] = [
        SystemMessage(_prose(rng, 30), id="system"),
    ]
    while len(msgs) < n_messages:
        if rng.random() < 0.04 or len(msgs) == 1:
            msgs.append(HumanMessage(_prose(rng, rng.randint(1, 6)), id=str(uuid.uuid4())))
            continue
        call_id = f"call_{rng.getrandbits(64):016x}"
        tool = rng.choice(["read_file", "run_tests", "grep", "edit_file"])
        args: dict[str, object] = {"path": f"src/{_ident(rng)}/{_ident(rng)}.py"}
        if tool == "edit_file":
            args["new_text"] = _code(rng, rng.randint(3, 12))
        elif tool == "grep":
            args = {"pattern": _ident(rng), "max_results": rng.randint(5, 50)}
        text = _prose(rng, rng.randint(1, 3)) if rng.random() < 0.5 else ""
        msgs.append(
            AIMessage(
                text,
                id=str(uuid.uuid4()),
                tool_calls=[{"name": tool, "args": args, "id": call_id, "type": "tool_call"}],
            )
        )
        if tool == "read_file":
            output = _code(rng, rng.randint(50, 145))
        elif tool == "run_tests":
            output = _log(rng, rng.randint(20, 60))
        elif tool == "grep":
            output = "\n".join(
                f"src/{_ident(rng)}.py:{rng.randint(1, 999)}: {_code(rng, 1)}"
                for _ in range(rng.randint(10, 40))
            )
        else:
            output = "ok: applied edit"
        msgs.append(ToolMessage(output, tool_call_id=call_id, id=str(uuid.uuid4()), name=tool))
    return msgs[:n_messages]


def _texts(messages: list[BaseMessage]) -> list[str]:
    """The strings the counter encodes (content, tool names, JSON arguments)."""
    out: list[str] = []
    for m in messages:
        out.append(m.content if isinstance(m.content, str) else json.dumps(m.content))
        if isinstance(m, AIMessage):
            for tc in m.tool_calls:
                out.append(tc["name"])
                out.append(json.dumps(tc["args"], ensure_ascii=False))
    return out


def _edit(message: BaseMessage, k: int) -> BaseMessage:
    """A new object with the same id and slightly different content."""
    content = message.content if isinstance(message.content, str) else ""
    return message.model_copy(update={"content": content + f"\n(edited {k})"})


def _median_after_edit(
    history: list[BaseMessage],
    repeats: int,
    rng: random.Random,
    action: Callable[[list[BaseMessage]], object],
) -> tuple[float, float]:
    positions = rng.sample(range(1, len(history)), repeats)
    times: list[float] = []
    for k, pos in enumerate(positions):
        history[pos] = _edit(history[pos], k)
        t0 = time.perf_counter()
        action(history)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    opts = parser.parse_args()

    history = build_history(opts.messages, opts.seed)
    counter = TokenCounter()
    enc = counter.encoding
    print(f"counter: {counter.description}")
    if enc is None:
        print("no tiktoken encoding available: figures below measure the estimate")

    t0 = time.perf_counter()
    total = counter.count(history)
    first = time.perf_counter() - t0
    texts = _texts(history)
    rows: list[tuple[str, str, str]] = []
    rows.append(("history", f"{len(history)} messages", f"{total:,} tokens"))
    rows.append(
        ("first count (cold cache)", f"{first * 1e3:,.1f} ms", f"{total / first:,.0f} tok/s")
    )
    if enc is not None:
        t0 = time.perf_counter()
        batch = enc.encode_ordinary_batch(texts)
        t_batch = time.perf_counter() - t0
        n_batch = sum(len(b) for b in batch)
        t0 = time.perf_counter()
        n_single = sum(len(enc.encode_ordinary(t)) for t in texts)
        t_single = time.perf_counter() - t0
        rows.append(
            (
                "tiktoken encode_ordinary_batch",
                f"{t_batch * 1e3:,.1f} ms",
                f"{n_batch / t_batch:,.0f} tok/s",
            )
        )
        rows.append(
            (
                "tiktoken encode_ordinary (loop)",
                f"{t_single * 1e3:,.1f} ms",
                f"{n_single / t_single:,.0f} tok/s",
            )
        )

    def warm(msgs: list[BaseMessage]) -> object:
        return counter.count(msgs)

    times = []
    for _ in range(opts.repeats):
        t0 = time.perf_counter()
        counter.count(history)
        times.append(time.perf_counter() - t0)
    rows.append(
        ("recount, nothing changed (median)", f"{statistics.median(times) * 1e3:.3f} ms", "")
    )

    rng = random.Random(opts.seed + 1)
    med, worst = _median_after_edit(history, opts.repeats, rng, warm)
    rows.append(
        ("recount after 1 edit (median)", f"{med * 1e3:.3f} ms", f"max {worst * 1e3:.3f} ms")
    )

    def tagged(msgs: list[BaseMessage]) -> object:
        return counter.count(msgs, tags=True)

    t0 = time.perf_counter()
    tagged_total = counter.count(history, tags=True)
    rows.append(
        (
            "first count, tags=True",
            f"{(time.perf_counter() - t0) * 1e3:,.1f} ms",
            f"{tagged_total:,} tokens",
        )
    )
    med, worst = _median_after_edit(history, opts.repeats, rng, tagged)
    rows.append(
        (
            "count tags=True after 1 edit (median)",
            f"{med * 1e3:.3f} ms",
            f"max {worst * 1e3:.3f} ms",
        )
    )

    def append_one(msgs: list[BaseMessage]) -> object:
        return counter.count(msgs, tags=True)

    def view(msgs: list[BaseMessage]) -> object:
        return render_view(msgs, counter)

    med, worst = _median_after_edit(history, opts.repeats, rng, view)
    rows.append(
        ("render_view after 1 edit (median)", f"{med * 1e3:.3f} ms", f"max {worst * 1e3:.3f} ms")
    )

    # Append-only: the common agent step (one new message at the end).
    times = []
    for k in range(opts.repeats):
        history.append(HumanMessage(f"next step {k}", id=f"append-{k}"))
        t0 = time.perf_counter()
        append_one(history)
        times.append(time.perf_counter() - t0)
    rows.append(
        ("count tags=True after 1 append (median)", f"{statistics.median(times) * 1e3:.3f} ms", "")
    )

    width = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    print()
    for name, a, b in rows:
        print(f"{name:<{width}}  {a:>{w2}}  {b}")


if __name__ == "__main__":
    main()
