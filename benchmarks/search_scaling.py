"""The first ``search_history`` of a long thread: indexing time against history length.

Archives a synthetic chat of N messages (short user/assistant turns with names, ids and
numbers) into ``InMemoryStore`` and ``SqliteStore``, then times the first search (which
reads and indexes the whole history) and a second one (incremental: nothing new), in
CPU time of the process (``time.process_time``: the figures hold on a machine other
jobs keep busy; the stores are in-process).

    python benchmarks/search_scaling.py                    # 15k, 30k, 60k messages
    python benchmarks/search_scaling.py --sizes 60000 --backends sqlite
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage

from langchain_autocontext import OffloadStore
from langchain_autocontext.search import search_history

TARGET_S = 2.0
WORDS = [
    "camping",
    "museum",
    "painting",
    "violin",
    "marathon",
    "pottery",
    "garden",
    "recipe",
    "concert",
    "hiking",
]


def messages(n: int) -> list:
    out = []
    for i in range(n):
        w = WORDS[i % len(WORDS)]
        text = f"On day {i // 40} we talked about {w} plans; ticket T{i:06d} for {WORDS[(i * 7) % 10]}."
        out.append(
            HumanMessage(text, id=f"m{i}", name="Caroline")
            if i % 2 == 0
            else AIMessage(text, id=f"m{i}", name="Melanie")
        )
    return out


def backend(kind: str, tmp: Path):
    if kind == "memory":
        from langgraph.store.memory import InMemoryStore

        return InMemoryStore()
    import sqlite3

    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(tmp / "store.db", check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    return store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="15000,30000,60000")
    ap.add_argument("--backends", default="memory,sqlite")
    args = ap.parse_args(argv)
    print(
        "| backend | messages | archive CPU s | first search CPU s | second search CPU s | target |"
    )
    print("|---|---:|---:|---:|---:|---|")
    missed = False
    for kind in args.backends.split(","):
        for n in (int(s) for s in args.sizes.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                store = OffloadStore(backend(kind, Path(tmp)))
                msgs = messages(n)
                t0 = time.process_time()
                for k in range(0, n, 2_000):
                    store.append_history("t", msgs[k : k + 2_000])
                t1 = time.process_time()
                hits = search_history(store, "t", f"ticket T{n - 3:06d}", 5)
                t2 = time.process_time()
                search_history(store, "t", "violin concert", 5)
                t3 = time.process_time()
                assert hits and hits[0].id == f"m{n - 3}", hits[:1]
                ok = t2 - t1 <= TARGET_S
                missed |= n >= 60_000 and not ok
                print(
                    f"| {kind} | {n:,} | {t1 - t0:.1f} | {t2 - t1:.2f} | {t3 - t2:.3f} | "
                    f"{'met' if ok else 'MISSED'} (≤ {TARGET_S:.0f} s) |",
                    flush=True,
                )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
