"""Recall of ``search_history`` on long multi-session conversations (LoCoMo).

    python benchmarks/search_recall.py            # ../shared/data/locomo-dev.json

Each conversation is archived turn by turn into a thread's history, as a chat app that
stores both sides would keep it (``"Name (session date): text"``, the first speaker as
the user, the speaker as the message's ``name``, LangChain's field for who said it;
``--no-names`` leaves ``name`` out, so the speaker is only in the text); then every
question of categories 1-4 is searched with the default offline search. A question is found at k when one of its evidence turns is among the top k
hits (recall@1/5/10), and fully when every evidence turn is in the top 5. Per
category too. Prints a markdown table; ``--json PATH`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig
from langchain_autocontext.search import search_history
from langchain_autocontext.store import OffloadStore

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"
KS = (1, 5, 10)


def recall(path: Path, names: bool = True) -> dict[str, Any]:
    """Recall@k over every question of categories 1-4, overall and per category
    (``names``: each turn's speaker as its message's ``name``)."""
    found: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for conv in json.loads(path.read_text(encoding="utf-8")):
        c = conv["conversation"]
        sample = str(conv["sample_id"])
        msgs = []
        k = 1
        while f"session_{k}" in c:
            date = c.get(f"session_{k}_date_time", "")
            for turn in c[f"session_{k}"]:
                cls = HumanMessage if turn["speaker"] == c["speaker_a"] else AIMessage
                text = f"{turn['speaker']} ({date}): {turn['text']}"
                name = {"name": turn["speaker"]} if names else {}
                msgs.append(cls(text, id=f"{sample}-{turn['dia_id']}", **name))
            k += 1
        store = OffloadStore(InMemoryStore())
        AutoContext(AutoContextConfig(max_tokens=1_000_000)).archive(
            msgs, thread_id=sample, store=store
        )
        for q in conv["qa"]:
            if q.get("category") not in (1, 2, 3, 4) or not q.get("evidence"):
                continue
            wanted = {f"{sample}-{e}" for e in q["evidence"]}
            hits = [h.id for h in search_history(store, sample, str(q["question"]), max(KS))]
            for group in ("all", f"category {q['category']}"):
                found[group]["questions"] += 1
                for kk in KS:
                    found[group][f"@{kk}"] += bool(wanted & set(hits[:kk]))
                found[group]["all@5"] += wanted <= set(hits[:5])
    return {
        g: {
            "questions": v["questions"],
            **{f"recall@{kk}": round(v[f"@{kk}"] / v["questions"], 4) for kk in KS},
            "all-evidence@5": round(v["all@5"] / v["questions"], 4),
        }
        for g, v in sorted(found.items())
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--no-names", action="store_true", help="archive without message names (speaker in text)"
    )
    args = ap.parse_args(argv)
    if not args.data.is_file():
        print(f"{args.data} is absent: nothing to measure", file=sys.stderr)
        return 1
    result = recall(args.data, names=not args.no_names)
    print("| questions | n | recall@1 | recall@5 | recall@10 | all evidence @5 |")
    print("|---|---:|---:|---:|---:|---:|")
    for group, r in result.items():
        print(
            f"| {group} | {r['questions']} | {r['recall@1']:.2f} | {r['recall@5']:.2f} | "
            f"{r['recall@10']:.2f} | {r['all-evidence@5']:.2f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
