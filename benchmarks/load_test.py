"""Load test: many agent threads at once, compression firing, nothing crossing threads.

    python benchmarks/load_test.py --backend postgres --uri postgresql://…   # 50 x 200
    python benchmarks/load_test.py --backend sqlite --threads 10 --turns 50
    python benchmarks/load_test.py --backend memory --threads 4 --turns 20  # smoke

Each thread is a LangGraph agent (``StateGraph``: the ``AutoContext`` node, a
deterministic async chat model, a ``ToolNode``) with a real checkpointer and
store: ``AsyncPostgresSaver`` + ``AsyncPostgresStore`` on a connection pool, or
``AsyncSqliteSaver`` + ``AsyncSqliteStore`` on a file. All threads run
concurrently on one event loop. Every turn is a user message, a tool call, a
~2,500-character tool result and an answer, each tagged ``[thread:turn]``, so the
budget forces offloads, round summaries and FIFO eviction every few turns.

Afterwards every thread is checked:

* its history holds exactly its own messages, in order, with the exact content
  it was sent (regenerated from the ``[thread:turn]`` tags): ``lost`` counts
  missing or altered ones, ``foreign`` counts anything of another thread;
* every offload of the thread holds only its own messages; every offload id its
  state shows reloads in its namespace and in no other thread's;
* its final state is a valid sequence with its own messages only.

"Overhead" is the wall time of the ``AutoContext`` node per model call
(archive, count, compress when triggered), measured under the full concurrent
load: it includes waiting for the event loop while other threads run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langchain_autocontext import (
    AutoContext,
    AutoContextConfig,
    AutoContextState,
    OffloadNotFoundError,
)
from langchain_autocontext.messages import find_violations, marker, text_of
from langchain_autocontext.store import OffloadStore

__all__ = ["LoadReport", "default_config", "open_backend", "run_load"]

SYSTEM = "You are a support agent. Look things up with the lookup tool, then answer."
TAG = re.compile(r"\[(t\d+):(\d+)\]")


def default_config(prefix: str) -> AutoContextConfig:
    """A budget small enough that every thread compresses every few turns."""
    return AutoContextConfig(
        max_tokens=8_000,
        msg_threshold=60,
        last_keep=8,
        large_payload_threshold=2_000,
        store_prefix=prefix,
    )


# --- the deterministic conversation -----------------------------------------------------
def user_text(t: str, k: int) -> str:
    return f"[{t}:{k}] Please check order {t}-{k:04d} and tell me its status."


def call_text(t: str, k: int) -> str:
    return f"[{t}:{k}] Looking up order {t}-{k:04d}."


def tool_text(t: str, k: int) -> str:
    lines = [f"[{t}:{k}] order {t}-{k:04d}"]
    lines += [f"event {i}: order {t}-{k:04d} moved to depot {(k * 31 + i) % 97}" for i in range(60)]
    return "\n".join(lines)


def answer_text(t: str, k: int) -> str:
    return f"[{t}:{k}] Order {t}-{k:04d} is at depot {(k * 31 + 59) % 97}."


def expected(t: str, turns: int) -> list[tuple[str, str]]:
    """(type, content) of every original of thread ``t``, in order (the final answer is
    archived at the next turn, so it is not in the history yet)."""
    out = [("system", SYSTEM)]
    for k in range(turns):
        out += [
            ("human", user_text(t, k)),
            ("ai", call_text(t, k)),
            ("tool", tool_text(t, k)),
            ("ai", answer_text(t, k)),
        ]
    return out[:-1]


@tool
async def lookup(thread: str, turn: int) -> str:
    """Look up an order's tracking events."""
    await asyncio.sleep(0)
    return tool_text(thread, turn)


class ScriptModel(BaseChatModel):
    """Calls ``lookup`` once per user turn, then answers; stateless (reads its input)."""

    @property
    def _llm_type(self) -> str:
        return "load-script"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptModel:
        return self

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        user = next(m for m in reversed(messages) if m.type == "human" and marker(m) is None)
        found = TAG.search(text_of(user))
        assert found, "the latest user message was not kept"
        t, k = found.group(1), int(found.group(2))
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(answer_text(t, k))
        call = {"name": "lookup", "args": {"thread": t, "turn": k}, "id": f"call-{t}-{k}"}
        return AIMessage(call_text(t, k), tool_calls=[{**call, "type": "tool_call"}])

    def _generate(self, messages: list[BaseMessage], stop: Any = None, **kw: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, **kw: Any
    ) -> ChatResult:
        return self._generate(messages)


class _State(AutoContextState):
    pass


def build_agent(ac: AutoContext, store: Any, checkpointer: Any, samples: list[float]) -> Any:
    """The agent graph; ``samples`` receives the node's wall time per model call."""
    sub = ac.node()
    model = ScriptModel()
    inputs: list[list[BaseMessage]] = []

    async def autocontext(state: _State, config: RunnableConfig) -> dict[str, Any]:
        started = time.perf_counter()
        out = await sub.ainvoke(state, config)
        samples.append(time.perf_counter() - started)
        return out

    async def call_model(state: _State) -> dict[str, Any]:
        msgs = state["messages"]
        if find_violations(msgs):
            raise AssertionError(f"invalid model input: {find_violations(msgs)[:2]}")
        inputs.append(msgs)
        return {"messages": [await model.ainvoke(msgs)]}

    g = StateGraph(_State)
    g.add_node("autocontext", autocontext)
    g.add_node("model", call_model)
    g.add_node("tools", ToolNode([lookup]))
    g.add_edge(START, "autocontext")
    g.add_edge("autocontext", "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "autocontext")
    return g.compile(store=store, checkpointer=checkpointer)


# --- backends -----------------------------------------------------------------------------
@asynccontextmanager
async def open_backend(
    kind: str, *, uri: str | None = None, path: str | None = None, pool_size: int = 20
) -> AsyncIterator[tuple[Any, Any]]:
    """``(store, checkpointer)`` for ``kind``: ``postgres``, ``sqlite`` or ``memory``."""
    if kind == "postgres":
        if not uri:
            raise SystemExit("--backend postgres needs --uri (or AUTOCONTEXT_TEST_POSTGRES_URI)")
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from langgraph.store.postgres import AsyncPostgresStore
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
        async with (
            AsyncConnectionPool(
                uri, min_size=2, max_size=pool_size, kwargs=kwargs, open=False
            ) as pool,
            AsyncPostgresStore.from_conn_string(
                uri, pool_config={"min_size": 2, "max_size": pool_size}
            ) as store,
        ):
            saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
            await saver.setup()
            await store.setup()
            yield store, saver
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        from langgraph.store.sqlite import AsyncSqliteStore

        base = Path(path or tempfile.mkdtemp(prefix="autocontext-load-"))
        base.mkdir(parents=True, exist_ok=True)
        async with (
            AsyncSqliteStore.from_conn_string(str(base / "store.db")) as store,
            AsyncSqliteSaver.from_conn_string(str(base / "checkpoints.db")) as saver,
        ):
            await store.setup()
            yield store, saver
    elif kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore(), InMemorySaver()
    else:
        raise SystemExit(f"unknown backend {kind!r}: postgres, sqlite or memory")


# --- the run and its checks ----------------------------------------------------------------
@dataclass
class LoadReport:
    """What a load run did and what the checks found (``lost`` and ``foreign`` must be 0)."""

    backend: str
    threads: int
    turns: int
    calls: int = 0
    """AutoContext node calls (one before every model call)."""
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    calls_per_second: float = 0.0
    """Node calls completed per second of wall time, all threads together."""
    solo_p50_ms: float | None = None
    solo_p99_ms: float | None = None
    """The same per-call overhead with one thread alone (no queueing behind others)."""
    compressions: int = 0
    """Compression events recorded (strategies that ran)."""
    offloads: int = 0
    messages_checked: int = 0
    """History items and offloaded messages compared with what each thread was sent."""
    lost: int = 0
    """Originals missing from a thread's history, out of order, or with other content."""
    foreign: int = 0
    """Items of another thread found in a thread's history, offloads, or state; or a
    foreign offload id that reloaded."""
    invalid_states: int = 0
    wall_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.foreign or self.invalid_states or self.problems)

    def table(self) -> str:
        rows = [
            ("backend", self.backend),
            ("threads x turns", f"{self.threads} x {self.turns}"),
            ("calls (node runs before a model call)", f"{self.calls}"),
            (
                "overhead per call p50 / p99 / max",
                f"{self.p50_ms:.1f} / {self.p99_ms:.1f} / {self.max_ms:.1f} ms",
            ),
            ("throughput", f"{self.calls_per_second:.0f} calls/s"),
            (
                "one thread alone: p50 / p99",
                "-"
                if self.solo_p50_ms is None
                else f"{self.solo_p50_ms:.1f} / {self.solo_p99_ms:.1f} ms",
            ),
            ("compression events / offloads", f"{self.compressions} / {self.offloads}"),
            ("messages checked", f"{self.messages_checked}"),
            ("lost", f"{self.lost}"),
            ("foreign (crossed threads)", f"{self.foreign}"),
            ("invalid states", f"{self.invalid_states}"),
            ("wall time", f"{self.wall_seconds:.1f} s"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def _tags_of(messages: Sequence[BaseMessage]) -> set[str]:
    return {t for m in messages for t, _ in TAG.findall(text_of(m))}


async def _check_thread(
    ost: OffloadStore,
    graph: Any,
    run: str,
    t: str,
    others: list[str],
    turns: int,
    report: LoadReport,
) -> None:
    tid = f"{run}-{t}"
    history = [e async for e in ost.aiter_history(tid)]
    want = expected(t, turns)
    report.messages_checked += len(history)
    got = [(e.message.type, text_of(e.message)) for e in history]
    if got != want:
        present = set(got)
        missing = [w for w in want if w not in present]
        report.lost += len(missing)
        report.problems.append(
            f"{tid}: history differs from what was sent ({len(got)} items for {len(want)}, "
            f"{len(missing)} missing; the rest out of order or extra)"
        )
    report.foreign += len(_tags_of([e.message for e in history]) - {t})

    offloads = await ost.alist_offloads(tid)
    report.offloads += len(offloads)
    for rec in offloads:
        report.messages_checked += len(rec.messages)
        report.foreign += len(_tags_of(rec.messages) - {t})
    report.compressions += len(await ost.alist_events(tid))

    state = (await graph.aget_state({"configurable": {"thread_id": tid}})).values
    msgs = state.get("messages", [])
    if find_violations(msgs):
        report.invalid_states += 1
    report.foreign += len(_tags_of(msgs) - {t})
    shown = {(marker(m) or {}).get("offload_id") for m in msgs} - {None}
    for oid in list(shown)[:3]:
        rec = await ost.areload(tid, oid)  # its own namespace: must reload
        report.foreign += len(_tags_of(rec.messages) - {t})
        for other in others[:2]:
            try:
                await ost.areload(f"{run}-{other}", oid)
                report.foreign += 1
            except OffloadNotFoundError:
                pass


async def run_load(
    store: Any,
    checkpointer: Any,
    *,
    backend: str,
    threads: int,
    turns: int,
    config: AutoContextConfig | None = None,
    progress: bool = False,
) -> LoadReport:
    """Run ``threads`` agents of ``turns`` turns each concurrently, then check them all."""
    run = f"load{uuid.uuid4().hex[:8]}"
    config = config or default_config(f"ac{run}")
    samples: list[float] = []
    ac = AutoContext(config)
    graph = build_agent(ac, store, checkpointer, samples)
    names = [f"t{i:03d}" for i in range(threads)]
    report = LoadReport(backend=backend, threads=threads, turns=turns)
    done = 0

    async def one(t: str) -> None:
        nonlocal done
        cfg = {"configurable": {"thread_id": f"{run}-{t}"}, "recursion_limit": 50}
        for k in range(turns):
            new: list[BaseMessage] = [HumanMessage(user_text(t, k))]
            if k == 0:
                new.insert(0, SystemMessage(SYSTEM))
            await graph.ainvoke({"messages": new}, cfg)
        done += 1
        if progress:
            print(f"\r  threads done: {done}/{threads}", end="", file=sys.stderr, flush=True)

    started = time.perf_counter()
    await asyncio.gather(*(one(t) for t in names))
    report.wall_seconds = time.perf_counter() - started
    if progress:
        print(file=sys.stderr)

    report.calls = len(samples)
    report.p50_ms = _pct(samples, 0.50) * 1e3
    report.p99_ms = _pct(samples, 0.99) * 1e3
    report.max_ms = max(samples, default=0.0) * 1e3
    report.calls_per_second = len(samples) / report.wall_seconds if report.wall_seconds else 0.0
    ost = OffloadStore.wrap(store, prefix=config.store_prefix)
    for i, t in enumerate(names):
        others = [names[(i + 1) % threads], names[(i + 7) % threads]] if threads > 1 else []
        await _check_thread(ost, graph, run, t, [o for o in others if o != t], turns, report)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    import os

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["postgres", "sqlite", "memory"], default="postgres")
    parser.add_argument("--uri", default=os.environ.get("AUTOCONTEXT_TEST_POSTGRES_URI"))
    parser.add_argument("--path", help="directory of the SQLite files (default: a temp dir)")
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--pool-size", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-solo", action="store_true", help="skip the one-thread baseline run")
    args = parser.parse_args(argv)

    async def go() -> LoadReport:
        async with open_backend(
            args.backend, uri=args.uri, path=args.path, pool_size=args.pool_size
        ) as (store, saver):
            solo = None
            if not args.no_solo:  # the same turns with no other thread in the loop
                solo = await run_load(
                    store, saver, backend=args.backend, threads=1, turns=args.turns
                )
            report = await run_load(
                store,
                saver,
                backend=args.backend,
                threads=args.threads,
                turns=args.turns,
                progress=not args.json,
            )
            if solo is not None:
                report.solo_p50_ms, report.solo_p99_ms = solo.p50_ms, solo.p99_ms
                report.lost += solo.lost
                report.foreign += solo.foreign
                report.invalid_states += solo.invalid_states
                report.problems += solo.problems
            return report

    report = asyncio.run(go())
    if args.json:
        print(json.dumps({**asdict(report), "ok": report.ok}, indent=2))
    else:
        print(report.table())
        for p in report.problems[:10]:
            print("PROBLEM:", p)
        print("OK: nothing lost, nothing crossed threads" if report.ok else "FAILED")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
