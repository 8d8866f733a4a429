"""What a system sends on calls over budget, by part, and where its prompt cache breaks.

Replays the coding runs of ``../shared/data`` through ``compare_peers``' runners and
averages, over the calls whose unmanaged context exceeds the budget, the tokens of each
part of the request: messages by kind (the package's summaries, previews and markers by
their marker kind), tool schemas and reply priming, and what the view adds (tags, the
generated section). For this package it also counts the calls that changed the prompt
prefix without a compression event. For every system, the facts a next action needed
and the request lacked, by where they were last seen (the assistant's text, its tool-call
arguments, a tool result) and what became of that message (summarized or evicted,
offloaded with a preview).

    python benchmarks/composition.py --budget 8000 --limit 12
    python benchmarks/composition.py --chats --budget 8000   # LoCoMo, at every session's end
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare_peers as cp

from langchain_autocontext.messages import marker

#: Where the note of a masked (offloaded) message starts, after its preview.
NOTE = "[Offloaded "


def add_parts(parts: collections.Counter[str], runner: Any, sent: Any, counter: Any) -> int:
    """Add to ``parts`` the tokens of each part of the request ``sent``: its messages by
    kind (the package's summaries, previews and markers by their marker kind), tool
    schemas and reply priming, and what the view adds (tags, the generated section).
    Returns how many of its messages are original user or assistant turns."""
    own = turns = 0
    for m in runner.context_messages(sent):
        n = counter.count_message(m)
        own += n
        kind = (marker(m) or {}).get("kind") or m.type
        parts[kind] += n
        turns += kind in ("human", "ai")
        if kind == "offloaded":  # a masked message: its preview, then the note
            text = cp.message_text(m)
            note = text[text.rfind(NOTE) :] if NOTE in text else ""
            parts["offloaded: the notes (size, offload id)"] += counter.count_text(note)
    parts["tool schemas and priming"] += sent.base
    parts["view additions (tags, section)"] += sent.total - sent.base - own
    return turns


def composition(system: str, budget: int, limit: int, data: Path) -> tuple[dict, dict]:
    """The average parts of a request over the calls over budget (:func:`add_parts`), and
    counts: calls, prompt-prefix changes without a compression event, and the facts the
    next actions reuse (needed on those calls) found only in masked messages' previews."""
    trajectories = cp.load_trajectories(data, limit=limit)
    counter = cp.default_counter()
    boilerplate = cp.frequent_tokens(trajectories)
    parts: collections.Counter[str] = collections.Counter()
    cache: collections.Counter[str] = collections.Counter()
    calls = 0
    for t in trajectories:
        runner = cp.make_runner(system, budget, counter, cp.CountingSummarizer(counter=counter))
        msgs = t.messages
        facts = cp.FactTracker(msgs, boilerplate, counter)
        with runner.ids():
            runner.start(msgs[0] if isinstance(msgs[0], cp.SystemMessage) else None)
            cursor, previous, events = 0, [], 0
            for point in cp._call_points(msgs):
                sent = runner.measure(runner.step(list(msgs[cursor:point])))
                cursor = point
                keys = [cp._key(m) for m in sent.messages]
                common = cp.common_prefix(keys, previous)
                if cp.is_ours(system):
                    now = len(runner.store.list_events(runner.thread))
                    if now == events and previous and common < len(previous):
                        cache["prefix changed without an event"] += 1
                    cache["calls"] += 1
                    events = now
                previous = keys
                needed = facts.needed(point)
                if sum(facts.tokens[:point]) <= budget:
                    continue
                calls += 1
                add_parts(parts, runner, sent, counter)
                texts: dict[bool, list[str]] = {True: [], False: []}  # masked or not
                for m in runner.context_messages(sent):
                    is_masked = (marker(m) or {}).get("kind") == "offloaded"
                    texts[is_masked].append(cp.original_text(m))
                masked, rest = "\n".join(texts[True]), "\n".join(texts[False])
                cache["facts needed"] += len(needed)
                cache["facts only in masked previews"] += sum(
                    f in masked and f not in rest for f in needed
                )
                shown = {m.id: m for m in runner.context_messages(sent) if m.id}
                for fact in needed:
                    if fact not in masked and fact not in rest:
                        source = msgs[facts.last_seen[fact]]
                        cache[f"missed: {miss_kind(fact, source, shown.get(source.id))}"] += 1
    return {k: round(v / max(calls, 1)) for k, v in parts.most_common()}, dict(cache)


def miss_kind(fact: str, source: Any, shown: Any) -> str:
    """Where a fact the next action needs and the request lacks was last seen, and what
    became of that message: ``shown`` is the message the request holds under the
    source's id (``None``: summarized into another message, or evicted)."""
    if source.type == "ai":
        in_text = fact in cp.text_of(source)
        part = "the assistant's text" if in_text else "the assistant's tool-call arguments"
    else:
        part = "a tool result" if source.type == "tool" else f"a {source.type} message"
    if shown is None:
        return f"{part}, summarized or evicted"
    kind = (marker(shown) or {}).get("kind")
    return f"{part}, {'offloaded (preview kept)' if kind == 'offloaded' else kind or 'verbatim'}"


def chat_composition(system: str, budget: int, data: Path) -> dict[str, float]:
    """The same parts for the long chats of ``data`` (LoCoMo), averaged over the end of
    every session (:func:`compare_peers.chat_snapshots`), with the number of original
    turns still verbatim."""
    counter = cp.default_counter()
    parts: collections.Counter[str] = collections.Counter()
    snapshots = 0
    for trajectory, _texts, _qa in cp.locomo_chats(data):
        runner = cp.make_runner(system, budget, counter, cp.CountingSummarizer(counter=counter))
        with runner.ids():
            for _fed, sent in cp.chat_snapshots(trajectory, runner):
                snapshots += 1
                parts["verbatim turns (count)"] += add_parts(parts, runner, sent, counter)
                parts["total sent"] += sent.total
    return {k: round(v / max(snapshots, 1), 1) for k, v in parts.most_common()}


#: One replay of the facts a data set's next actions reuse (:func:`fact_walk`): each
#: trajectory, its fact tracker, and every needed fact with the index of the message it
#: was last seen in (a fact once per call that needs it).
FactWalk = list[tuple[Any, Any, list[tuple[str, int]]]]


def fact_walk(limit: int | None, data: Path) -> FactWalk:
    """Walk the needed facts of every call of ``data``'s trajectories once, for
    :func:`fact_sources` and :func:`fact_density` (no system involved)."""
    trajectories = cp.load_trajectories(data, limit=limit)
    counter = cp.default_counter()
    common = cp.frequent_tokens(trajectories)
    walk: FactWalk = []
    for t in trajectories:
        tracker = cp.FactTracker(t.messages, common, counter)
        needed = [
            (fact, tracker.last_seen[fact])
            for point in cp._call_points(t.messages)
            for fact in tracker.needed(point)
        ]
        walk.append((t, tracker, needed))
    return walk


#: Upper bounds of the message sizes (tokens) :func:`fact_density` groups by.
SIZES = (100, 400, 1_600)


def fact_density(walk: FactWalk) -> dict[str, float]:
    """Facts a next action reuses per 1,000 tokens of the message they were last seen in,
    by kind and size of that message (each fact counted at every call that needs it):
    what a token of each kind of message is worth to the next steps, recency aside."""
    facts: collections.Counter[tuple[str, int]] = collections.Counter()
    tokens: collections.Counter[tuple[str, int]] = collections.Counter()

    def group(message: Any, size: int) -> tuple[str, int]:
        return message.type, next((k for k, b in enumerate(SIZES) if size <= b), len(SIZES))

    def label(key: tuple[str, int]) -> str:
        kind, k = key
        if k < len(SIZES):
            return f"{kind}, up to {SIZES[k]:,} tokens"
        return f"{kind}, over {SIZES[-1]:,} tokens"

    for t, tracker, needed in walk:
        for _fact, k in needed:
            facts[group(t.messages[k], tracker.tokens[k])] += 1
        for m, n in zip(t.messages, tracker.tokens, strict=True):
            if m.type in ("ai", "tool"):
                tokens[group(m, n)] += n
    return {label(k): 1000 * facts[k] / tokens[k] for k in sorted(tokens) if tokens[k]}


def fact_sources(walk: FactWalk) -> dict[str, float]:
    """Where the facts a next action reuses were last seen (no system involved): the share
    of those facts by the kind of message, beside the share of the tokens each kind holds,
    and for assistant messages the share found in their tool-call arguments."""
    facts: collections.Counter[str] = collections.Counter()
    tokens: collections.Counter[str] = collections.Counter()
    in_args = 0
    for t, tracker, needed in walk:
        for fact, k in needed:
            source = t.messages[k]
            facts[source.type] += 1
            if source.type == "ai" and any(
                fact in json.dumps(tc["args"], ensure_ascii=False) for tc in source.tool_calls
            ):
                in_args += 1
        for m, n in zip(t.messages, tracker.tokens, strict=True):
            tokens[m.type] += n
    n_facts, n_tokens = sum(facts.values()), sum(tokens.values())
    out = {f"facts last seen in {k} messages": v / n_facts for k, v in facts.most_common()}
    out |= {f"tokens in {k} messages": v / n_tokens for k, v in tokens.most_common()}
    out["of the assistant's, in its tool-call arguments"] = in_args / max(facts["ai"], 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--budget", type=int, default=8_000)
    ap.add_argument("--limit", type=int, default=12, help="trajectories")
    ap.add_argument("--systems", default="ours,middleware")
    ap.add_argument(
        "--data",
        type=Path,
        default=None,
        help=f"default: mini-swe-agent-dev.jsonl, or {cp.LOCOMO} with --chats",
    )
    ap.add_argument(
        "--chats",
        action="store_true",
        help="long chats in LoCoMo's format instead, at the end of every session",
    )
    args = ap.parse_args(argv)
    data = args.data or cp.DATA / (cp.LOCOMO if args.chats else "mini-swe-agent-dev.jsonl")
    if not data.is_file():
        print(f"no data: {data} is absent", file=sys.stderr)
        return 1
    if args.chats:
        for system in args.systems.split(","):
            print(f"\n{system} at {args.budget:,}, average tokens at a session's end:")
            for key, value in chat_composition(system, args.budget, data).items():
                print(f"  {key:32s} {value:9,.1f}")
        return 0
    print(f"where the facts a next action reuses were last seen ({data.name}):")
    walk = fact_walk(args.limit, data)
    for key, share in fact_sources(walk).items():
        print(f"  {key:48s} {share:6.1%}")
    print("reused facts per 1,000 tokens of the message they were last seen in:")
    for key, density in fact_density(walk).items():
        print(f"  {key:48s} {density:6.1f}")
    for system in args.systems.split(","):
        parts, cache = composition(system, args.budget, args.limit, data)
        print(f"\n{system} at {args.budget:,}, average tokens per over-budget call:")
        for key, value in parts.items():
            print(f"  {key:32s} {value:7,}")
        if cache.get("calls"):
            print(
                f"  calls: {cache['calls']:,}; prompt prefix changed without a compression "
                f"event: {cache.get('prefix changed without an event', 0):,}"
            )
        if cache.get("facts needed"):
            only = cache.get("facts only in masked previews", 0)
            print(
                f"  facts the next actions reuse, found only in masked previews: {only:,} of "
                f"{cache['facts needed']:,} ({only / cache['facts needed']:.2%})"
            )
            misses = sorted(
                ((k, v) for k, v in cache.items() if k.startswith("missed: ")),
                key=lambda kv: -kv[1],
            )
            total = sum(v for _, v in misses)
            print(f"  facts missed: {total:,}; last seen in, and what became of that message:")
            for key, value in misses:
                print(f"    {key.removeprefix('missed: '):58s} {value:6,} ({value / total:.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
