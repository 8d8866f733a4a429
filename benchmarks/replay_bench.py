"""Replay the real trajectories in ../shared/data through ``ac.compress`` at several budgets.

    python benchmarks/replay_bench.py                  # all trajectories, 8k/16k/64k
    python benchmarks/replay_bench.py --limit 5        # a quick look

The summarizer is a fake chat model that returns compare_peers.py's fixed 150-word
summary (it names nothing, so the summarizer's names check adds no note); its calls
and input tokens are counted. The package's own ids (offload ids, shown in the
context) come from compare_peers.py's fixed sequence for every trajectory, so a run
is reproducible. Prints one markdown table per data set.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.store.memory import InMemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import SUMMARY_150_WORDS

from langchain_autocontext import AutoContext, AutoContextConfig
from langchain_autocontext.replay import ReplayReport, load_trajectories, median, percentile, replay
from langchain_autocontext.store import OffloadStore
from langchain_autocontext.summarizers import LLMSummarizer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FILES = ("mini-swe-agent-dev.jsonl", "tau-bench-airline.jsonl")


def fake_summarizer() -> LLMSummarizer:
    return LLMSummarizer(FakeListChatModel(responses=[SUMMARY_150_WORDS]), retries=0)


def run(path: Path, budget: int, limit: int | None) -> dict[str, float]:
    trajectories = load_trajectories(path, limit=limit)
    reports: list[ReplayReport] = []
    for t in trajectories:  # replay seeds the package's ids per trajectory (its ``seed``)
        ac = AutoContext(
            AutoContextConfig(max_tokens=budget),
            summarizer=fake_summarizer(),
            store=OffloadStore(InMemoryStore()),
        )
        reports.append(replay(t, ac))
    calls = [c for r in reports for c in r.calls]
    overheads = [c.overhead_s for c in calls]
    sent = sum(r.tokens_sent for r in reports)
    return {
        "trajectories": len(reports),
        "calls": len(calls),
        "largest": max((r.largest for r in reports), default=0),
        "over": sum(r.over_budget for r in reports),
        "invalid": sum(r.invalid for r in reports),
        "sent": sent,
        "prefix": sum(r.prefix_tokens for r in reports) / sent if sent else 0.0,
        "sum_calls": sum(r.summarizer_calls for r in reports),
        "sum_in": sum(r.summarizer_input_tokens for r in reports),
        "p50_ms": median(overheads) * 1000,
        "p99_ms": percentile(overheads, 0.99) * 1000,
        "recoverable": sum(r.recoverable for r in reports)
        / max(1, sum(r.originals for r in reports)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--budgets", default="8000,16000,64000")
    ap.add_argument("--limit", type=int, default=None, help="trajectories per file")
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    for name in FILES:
        path = args.data / name
        if not path.is_file():
            print(f"skipping {name}: {path} is absent", file=sys.stderr)
            continue
        print(f"\n### {name}\n")
        print(
            "| budget | calls | largest sent | over budget | invalid seqs | tokens sent | prefix share | summarizer calls | summarizer input tok | overhead p50 ms | p99 ms | recoverable |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for budget in budgets:
            t0 = time.perf_counter()
            r = run(path, budget, args.limit)
            print(
                f"| {budget:,} | {r['calls']:,} | {r['largest']:,} | {r['over']} | {r['invalid']} | "
                f"{r['sent']:,} | {r['prefix']:.1%} | {r['sum_calls']:,} | {r['sum_in']:,} | "
                f"{r['p50_ms']:.2f} | {r['p99_ms']:.1f} | {r['recoverable']:.1%} |",
                flush=True,
            )
            print(f"<!-- {budget}: {time.perf_counter() - t0:.1f}s -->", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
