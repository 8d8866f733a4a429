"""The replay module: loading every trajectory format, replaying, reports and the plot."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_to_dict,
)
from langgraph.store.memory import InMemoryStore

from langchain_autocontext import AutoContext, AutoContextConfig, ContextBudgetError, OffloadStore
from langchain_autocontext.messages import UUID4_RE
from langchain_autocontext.replay import (
    SAMPLE_ID,
    STRATEGY_LABELS,
    ReplayFormatError,
    ReplayReport,
    areplay,
    count_calls,
    load_trajectories,
    merge_reports,
    parse_trajectory,
    plot_reports,
    replay,
    sample_path,
)
from langchain_autocontext.strategies.pipeline import default_strategies
from tests._builders import DATA, chat_rounds, coding_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def openai_run(n_calls: int = 3, size: int = 40) -> list[dict[str, Any]]:
    """An OpenAI-format coding run: system, task, n tool calls with outputs, an answer."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug in app.py"},
    ]
    for k in range(n_calls):
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{k}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"cmd": f"ls {k}"})},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"call_{k}", "content": "x " * size})
    msgs.append({"role": "assistant", "content": "Fixed."})
    return msgs


def fresh_ac(max_tokens: int = 16_000, **kw: Any) -> AutoContext:
    return AutoContext(
        AutoContextConfig(max_tokens=max_tokens, **kw), store=OffloadStore(InMemoryStore())
    )


def assert_png(path: Path) -> tuple[int, int]:
    """A real PNG: magic bytes, then an IHDR chunk with a non-zero size."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 100
    assert data.rstrip(b"\x00")[-8:-4] == b"IEND"
    return width, height


# --- loading ----------------------------------------------------------------------------
def test_openai_json_list_of_messages(tmp_path: Path) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(openai_run(3)))
    [t] = load_trajectories(p)
    assert t.id == "run-0"
    assert [m.type for m in t.messages[:4]] == ["system", "human", "ai", "tool"]
    assert t.messages[2].tool_calls[0]["args"] == {"cmd": "ls 0"}
    assert t.messages[3].tool_call_id == "call_0"
    assert len({m.id for m in t.messages}) == len(t.messages)
    assert count_calls(t) == 4


def test_json_object_list_and_jsonl_shapes(tmp_path: Path) -> None:
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"id": "only", "messages": openai_run(2)}))
    assert [t.id for t in load_trajectories(obj)] == ["only"]

    many = tmp_path / "many.json"
    many.write_text(json.dumps([{"id": "a", "messages": openai_run(1)}, openai_run(2)]))
    assert [t.id for t in load_trajectories(many)] == ["a", "many-1"]

    jsonl = tmp_path / "runs.jsonl"
    jsonl.write_text(
        "\n".join(json.dumps({"id": f"r{k}", "messages": openai_run(k + 1)}) for k in range(3))
        + "\n\n"
    )
    ts = load_trajectories(jsonl)
    assert [t.id for t in ts] == ["r0", "r1", "r2"]
    assert [count_calls(t) for t in ts] == [2, 3, 4]
    assert [t.id for t in load_trajectories(jsonl, limit=2)] == ["r0", "r1"]

    per_message = tmp_path / "messages.jsonl"
    per_message.write_text("\n".join(json.dumps(m) for m in openai_run(2)))
    [t] = load_trajectories(per_message)
    assert len(t.messages) == len(openai_run(2))


def test_langchain_dumps(tmp_path: Path) -> None:
    msgs = coding_run(4, output_lines=5)
    p = tmp_path / "dump.json"
    p.write_text(json.dumps({"id": "lc", "messages": messages_to_dict(msgs)}))
    [t] = load_trajectories(p)
    assert [m.id for m in t.messages] == [m.id for m in msgs]  # ids kept
    assert [m.content for m in t.messages] == [m.content for m in msgs]
    assert t.messages[2].tool_calls == msgs[2].tool_calls


def test_model_dump_messages(tmp_path: Path) -> None:
    """``[m.model_dump() for m in msgs]``, the dump a LangChain user writes first, was
    refused as "neither a list of messages nor an object with 'messages'"."""
    msgs = coding_run(3, output_lines=4)
    p = tmp_path / "model_dump.json"
    p.write_text(json.dumps([m.model_dump() for m in msgs]))
    [t] = load_trajectories(p)
    assert [type(m) for m in t.messages] == [type(m) for m in msgs]
    assert [m.content for m in t.messages] == [m.content for m in msgs]
    assert t.messages[2].tool_calls == msgs[2].tool_calls


def test_developer_role_null_content_and_exit(tmp_path: Path) -> None:
    raw = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None},
        {"role": "exit", "content": "submitted"},
        {"role": "user", "content": "never read"},
    ]
    t = parse_trajectory(raw, "x")
    assert [type(m) for m in t.messages] == [SystemMessage, HumanMessage, AIMessage]
    assert t.messages[2].content == ""


def test_repeated_ids_get_their_own(tmp_path: Path) -> None:
    p = tmp_path / "dup.jsonl"
    p.write_text("\n".join(json.dumps({"id": "same", "messages": openai_run(1)}) for _ in range(3)))
    ts = load_trajectories(p)
    assert [t.id for t in ts] == ["same", "same#2", "same#3"]
    assert ts[0].messages[0].id != ts[1].messages[0].id


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ('{"a": 1}\nnot json\n', "line 2 is not JSON"),
        ('[\n {"role": "user", "content": "x"},\n oops\n]', "not valid JSON"),
        ('{"messages": [{"role": "wizard", "content": "x"}]}', "unknown message role 'wizard'"),
        ('{"messages": ["just a string"]}', "must be a JSON object"),
        ('{"trajectory": []}', "neither a list of messages"),
        ("[1, 2, 3]", "neither a list of messages"),
        ('{"messages": [{"type": "human", "data": 5}]}', "not a LangChain message dump"),
        ('{"messages": [{"role": "exit", "content": "x"}]}', "no messages"),
        ("[]", "no trajectories"),
    ],
)
def test_bad_content_is_a_format_error(tmp_path: Path, content: str, match: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(ReplayFormatError, match=match):
        load_trajectories(p)


def test_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(ReplayFormatError, match="no such file"):
        load_trajectories(tmp_path / "missing.json")
    with pytest.raises(ReplayFormatError, match="is a directory"):
        load_trajectories(tmp_path)
    binary = tmp_path / "image.png"
    binary.write_bytes(PNG_MAGIC + bytes(range(256)))
    with pytest.raises(ReplayFormatError, match="not a UTF-8"):
        load_trajectories(binary)
    with pytest.raises(ValueError, match="limit"):
        load_trajectories(sample_path(), limit=0)


# --- the bundled sample ----------------------------------------------------------------------
def test_sample_ships_with_attribution_and_licence() -> None:
    path = sample_path()
    assert path.is_file()
    notice = (path.parent / "README.md").read_text()
    licence = (path.parent / "LICENSE-mini-swe-agent.md").read_text()
    assert "SWE-agent/mini-swe-agent" in notice and "MIT" in notice and SAMPLE_ID in notice
    assert "Permission is hereby granted" in licence
    [t] = load_trajectories(path)
    assert t.id == SAMPLE_ID
    assert count_calls(t) == 60 and len(t.messages) == 121  # the `exit` message ends it


def test_sample_is_a_real_shared_trajectory() -> None:
    src = DATA / "mini-swe-agent-dev.jsonl"
    if not src.is_file():
        pytest.skip(f"{src} is absent (the shared real-trajectory data is not beside the repo)")
    bundled = json.loads(sample_path().read_text())
    for line in src.read_text().splitlines():
        if json.loads(line)["id"] == SAMPLE_ID:
            assert json.loads(line) == bundled
            return
    pytest.fail(f"{SAMPLE_ID} not in {src}")


def test_sample_replay_at_the_cli_budget_shows_the_manager_at_work() -> None:
    from langchain_autocontext.cli import DEFAULT_MAX_TOKENS

    [t] = load_trajectories(sample_path())
    seen: list[int] = []
    r = replay(
        t, fresh_ac(DEFAULT_MAX_TOKENS), compare=True, on_call=lambda c: seen.append(c.index)
    )
    assert seen == list(range(60))
    # Unmanaged, the run outgrows the budget; managed it never does.
    assert r.unmanaged_largest > DEFAULT_MAX_TOKENS and r.unmanaged_over_budget > 0
    assert r.largest <= DEFAULT_MAX_TOKENS and r.over_budget == 0 and r.invalid == 0
    assert r.compressions >= 1 and sum(r.strategy_counts.values()) == len(r.events)
    assert r.offloads > 0 and r.offloads_reloadable == r.offloads
    assert r.recoverable == r.originals == 120
    assert r.tokens_sent < r.unmanaged_tokens_sent
    assert 0.5 < r.prefix_share < 1
    assert r.ok
    # The default library budget is far above this run: only the message count triggers.
    big = replay(t, fresh_ac(131_072))
    assert big.largest < 131_072 // 4


# --- replay accounting ----------------------------------------------------------------------
def test_report_numbers_add_up_and_serialize() -> None:
    t = parse_trajectory(openai_run(30, size=400), "acc")
    r = replay(t, fresh_ac(4_000), compare=True)
    assert len(r.calls) == 31 == len(r.unmanaged_tokens)
    assert r.tokens_sent == sum(c.tokens for c in r.calls)
    assert r.largest == max(c.tokens for c in r.calls) <= 4_000
    assert 0 <= r.prefix_tokens <= r.tokens_sent
    assert all(c.prefix_tokens <= c.tokens for c in r.calls)
    assert r.calls[0].prefix_tokens == 0
    assert sum(r.strategy_counts.values()) == len(r.events) > 0
    # Pipeline order, whatever order the events came in.
    order = list(STRATEGY_LABELS)
    assert [order.index(k) for k in r.strategy_counts] == sorted(
        order.index(k) for k in r.strategy_counts
    )
    doc = json.loads(json.dumps(r.to_dict()))
    assert doc["calls"] == 31 and len(doc["per_call"]) == 31
    assert doc["per_call"][0]["unmanaged_tokens"] == r.unmanaged_tokens[0]
    assert doc["unmanaged"]["tokens_sent"] == r.unmanaged_tokens_sent
    assert doc["recoverable_originals"] == doc["originals"]


def test_unmanaged_count_is_what_the_agent_would_send() -> None:
    t = parse_trajectory(openai_run(5), "u")
    ac = fresh_ac(100_000, metadata_tags=False, self_management_tools=False)
    r = replay(t, ac, compare=True)
    # Far under budget and trigger, no tags, no context tools: the manager sends exactly
    # what the agent had.
    assert r.events == []
    assert [c.tokens for c in r.calls] == r.unmanaged_tokens


def test_merge_reports() -> None:
    ts = [parse_trajectory(openai_run(k + 20, size=300), f"t{k}") for k in range(3)]
    reports = [replay(t, fresh_ac(4_000), compare=True) for t in ts]
    total = merge_reports(reports)
    assert total.trajectories == 3 and total.trajectory_id == "total"
    assert len(total.calls) == sum(len(r.calls) for r in reports)
    assert total.tokens_sent == sum(r.tokens_sent for r in reports)
    assert total.largest == max(r.largest for r in reports)
    assert total.originals == sum(r.originals for r in reports) == total.recoverable
    assert total.unmanaged_tokens_sent == sum(r.unmanaged_tokens_sent for r in reports)
    assert total.strategy_counts == {
        k: sum(r.strategy_counts.get(k, 0) for r in reports) for k in total.strategy_counts
    }
    with pytest.raises(ValueError):
        merge_reports([])


class LossyStore(InMemoryStore):
    """Drops every write to the history namespace (a store that loses originals)."""

    def batch(self, ops):  # type: ignore[no-untyped-def]
        from langgraph.store.base import PutOp

        kept = [op for op in ops if not (isinstance(op, PutOp) and "history" in op.namespace)]
        results = super().batch(kept)
        it = iter(results)
        return [
            None if (isinstance(op, PutOp) and "history" in op.namespace) else next(it)
            for op in ops
        ]


def test_recoverable_check_detects_lost_originals() -> None:
    t = parse_trajectory(openai_run(10, size=300), "lossy")
    ac = AutoContext(AutoContextConfig(max_tokens=4_000), store=OffloadStore(LossyStore()))
    r = replay(t, ac)
    assert r.originals > 0 and r.recoverable == 0
    assert not r.ok


#: The report's timings (how long the manager took): the only figures that vary.
TIMINGS = {"seconds", "overhead_s", "overhead_ms", "overhead_ms_p50", "overhead_ms_p99"}


def untimed(doc: Any) -> Any:
    """A report's JSON (``ReplayReport.to_dict``, the CLI's ``--json``) without timings."""
    if isinstance(doc, dict):
        return {k: untimed(v) for k, v in doc.items() if k not in TIMINGS}
    if isinstance(doc, list):
        return [untimed(v) for v in doc]
    return doc


def test_two_replays_of_the_same_trajectory_give_the_same_report() -> None:
    """Offload ids are shown in the context and a uuid's token count varies: with random
    ids, two replays of the bundled sample differed (prefix tokens 418,685 against
    418,639), noise a user comparing two configurations cannot tell from a change. The
    package's ids come from one sequence per trajectory (``seed``, default 0)."""
    t = parse_trajectory(openai_run(25, size=300), "same")
    first, again = (untimed(replay(t, fresh_ac(4_000)).to_dict()) for _ in range(2))
    assert first == again and first["offloads"] > 3
    offload_ids = [
        oid for c in first["per_call"] for e in c["events"] for oid in e.get("offload_ids") or ()
    ]
    assert offload_ids and all(UUID4_RE.match(oid) for oid in offload_ids)  # still uuid4s
    # another seed, other ids (and so other token counts); None draws random ones
    other = untimed(replay(t, fresh_ac(4_000), seed=3).to_dict())
    assert other != first
    unseeded = [replay(t, fresh_ac(4_000), seed=None).to_dict() for _ in range(2)]
    ids = [
        {oid for c in r["per_call"] for e in c["events"] for oid in e.get("offload_ids") or ()}
        for r in unseeded
    ]
    assert ids[0] and not ids[0] & ids[1] and not ids[0] & set(offload_ids)


async def test_async_replay_matches_sync() -> None:
    t = parse_trajectory(openai_run(25, size=300), "same")
    sync = replay(t, fresh_ac(4_000))  # the same ids: both seed 0 (see above)
    asyn = await areplay(t, fresh_ac(4_000))
    assert untimed(sync.to_dict()) == untimed(asyn.to_dict())
    assert [(c.tokens, c.messages, c.prefix_tokens) for c in sync.calls] == [
        (c.tokens, c.messages, c.prefix_tokens) for c in asyn.calls
    ]
    assert [[e["strategy"] for e in c.events] for c in sync.calls] == [
        [e["strategy"] for e in c.events] for c in asyn.calls
    ]
    assert sync.events and asyn.ok and asyn.recoverable == sync.recoverable == sync.originals


async def test_async_replay_reads_an_async_only_store_back_with_its_async_api(
    tmp_path: Path,
) -> None:
    """``areplay`` with ``AsyncSqliteStore`` (sync calls refused on the event loop): the
    final report read the history and the offloads back with the sync API and raised
    InvalidStateError after the whole replay had run."""
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    t = parse_trajectory(openai_run(25, size=300), "async-only")
    async with AsyncSqliteStore.from_conn_string(str(tmp_path / "s.db")) as backend:
        await backend.setup()
        report = await areplay(t, fresh_ac(4_000), store=backend)
    assert report.events and report.offloads and report.ok
    assert report.recoverable == report.originals > 0
    assert report.offloads_reloadable == report.offloads


def test_impossible_budget_raises_before_sending() -> None:
    raw = [
        {"role": "system", "content": "rule " * 400},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    t = parse_trajectory(raw, "tight")
    with pytest.raises(ContextBudgetError):
        replay(t, fresh_ac(256, msg_threshold=1))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    budget=st.integers(min_value=3_500, max_value=16_000),
    kind=st.sampled_from(["coding", "chat"]),
    size=st.integers(min_value=3, max_value=40),
)
def test_replayed_runs_stay_in_budget_and_recoverable(budget: int, kind: str, size: int) -> None:
    msgs = coding_run(size, output_lines=30) if kind == "coding" else chat_rounds(size // 3 + 1)
    t = parse_trajectory(messages_to_dict(msgs), f"{kind}-{size}")
    r = replay(t, fresh_ac(budget))
    assert r.ok, r.summary()
    assert all(c.tokens <= budget for c in r.calls)
    last_call = max(i for i, m in enumerate(msgs) if isinstance(m, AIMessage))
    assert r.recoverable == r.originals == last_call  # everything the model was shown


@pytest.mark.parametrize("name", ["tau-bench-airline.jsonl", "mini-swe-agent-dev.jsonl"])
def test_real_trajectories_replay_cleanly(name: str) -> None:
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared real-trajectory data is not beside the repo)")
    budget = 4_000 if name.startswith("tau") else 12_000
    for t in load_trajectories(path, limit=3):
        r = replay(t, fresh_ac(budget), compare=True)
        assert r.ok, (t.id, r.summary())
        assert r.calls and r.largest <= budget


# --- plot --------------------------------------------------------------------------------------
def test_strategy_labels_cover_the_pipeline() -> None:
    assert {s.name for s in default_strategies()} <= set(STRATEGY_LABELS)


def test_plot_writes_a_png_with_one_panel_per_trajectory(tmp_path: Path) -> None:
    ts = [parse_trajectory(openai_run(20 + k, size=300), f"p{k}") for k in range(3)]
    reports = [replay(t, fresh_ac(4_000), compare=True) for t in ts]
    out = tmp_path / "plot.png"
    fig = plot_reports(reports, out)
    assert_png(out)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["p0", "p1", "p2"]
    ax = panels[0]
    # The managed curve and the budget line are drawn; events are marked.
    ys = [list(line.get_ydata()) for line in ax.get_lines()]
    assert [c.tokens for c in reports[0].calls] in ys
    assert [4_000, 4_000] in [list(map(float, y)) for y in ys]
    assert len(ax.collections) == len(reports[0].events) > 0
    one = plot_reports(reports, max_panels=1)
    assert sum(ax.get_visible() for ax in one.axes) == 1
    assert "first 1 of 3" in one.texts[0].get_text()


def test_plot_single_report_and_errors(tmp_path: Path) -> None:
    r = replay(parse_trajectory(openai_run(3), "s"), fresh_ac())
    assert isinstance(r, ReplayReport)
    fig = plot_reports(r)
    assert len(fig.axes) == 1
    with pytest.raises(ValueError):
        plot_reports([])


# --- audit fixes ------------------------------------------------------------------------
HI = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "hi again"},
    {"role": "assistant", "content": "again"},
]


def test_package_tools_counted_only_once_engaged_as_the_middleware_sends_them() -> None:
    ac = AutoContext(max_tokens=16_000, store=OffloadStore(InMemoryStore()))
    report = replay(parse_trajectory(HI, "hi"), ac)
    # a short chat never engages the package: no tool schema is sent (the middleware
    # sends 8 and 19 tokens here), not the package's seven (~306 tokens each call)
    expected = [ac.counter.count(parse_trajectory(HI[:k], "x").messages) for k in (1, 3)]
    assert [c.tokens for c in report.calls] == expected
    always = AutoContext(
        AutoContextConfig(max_tokens=16_000, disclosure="always"),
        store=OffloadStore(InMemoryStore()),
    )
    shown = replay(parse_trajectory(HI, "hi"), always)
    assert all(c.tokens > 180 for c in shown.calls)  # 4 tools below 32k without the tags


def test_request_body_tools_are_counted(tmp_path: Path) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a shell command and return what it prints.",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            },
        }
    ]
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"model": "gpt-4o", "messages": openai_run(2), "tools": tools}))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"messages": openai_run(2)}))
    (with_tools,) = load_trajectories(body)
    (without,) = load_trajectories(bare)
    assert with_tools.tools == tools and without.tools == []
    a = replay(with_tools, AutoContext(max_tokens=16_000, store=OffloadStore(InMemoryStore())))
    b = replay(without, AutoContext(max_tokens=16_000, store=OffloadStore(InMemoryStore())))
    extra = a.calls[0].tokens - b.calls[0].tokens
    assert extra > 10
    assert [x.tokens - y.tokens for x, y in zip(a.calls, b.calls, strict=True)] == [extra] * 3


def test_jsonl_splits_at_newlines_only_and_reads_bom_gzip_and_pipes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip
    import io
    import os
    import sys
    import threading

    rows = [{"id": "a", "messages": openai_run(1)}, {"id": "b", "messages": openai_run(2)}]
    rows[0]["messages"][1]["content"] = "line\u2028sep\u2029par\u0085nel end"
    text = "".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows)
    plain = tmp_path / "runs.jsonl"
    plain.write_text(text, encoding="utf-8")
    got = load_trajectories(plain)
    assert [t.id for t in got] == ["a", "b"]
    assert got[0].messages[1].content == "line\u2028sep\u2029par\u0085nel end"
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert [t.id for t in load_trajectories(bom)] == ["a", "b"]
    bom_json = tmp_path / "bom.json"
    bom_json.write_bytes(b"\xef\xbb\xbf" + json.dumps(openai_run(1)).encode())
    assert [t.id for t in load_trajectories(bom_json)] == ["bom-0"]
    packed = tmp_path / "runs.jsonl.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    assert [len(t.messages) for t in load_trajectories(packed)] == [
        len(r["messages"]) for r in rows
    ]
    no_suffix = tmp_path / "runs.dat"  # gzip recognised by its magic bytes
    no_suffix.write_bytes(gzip.compress(json.dumps(openai_run(1)).encode()))
    assert [t.id for t in load_trajectories(no_suffix)] == ["runs-0"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert [t.id for t in load_trajectories("-")] == ["a", "b"]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "w", encoding="utf-8") as f:
            f.write(json.dumps(openai_run(1)))

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    (from_pipe,) = load_trajectories(fifo)
    writer.join(5)
    assert from_pipe.id == "pipe-0" and len(from_pipe.messages) == len(openai_run(1))


def test_remove_messages_are_skipped_with_a_note(tmp_path: Path) -> None:
    from langchain_core.messages import RemoveMessage

    dumped = messages_to_dict(
        [
            SystemMessage("s", id="1"),
            HumanMessage("hi", id="2"),
            AIMessage("a", id="3"),
            RemoveMessage(id="3"),
            AIMessage("b", id="4"),
        ]
    )
    path = tmp_path / "lc_remove.json"
    path.write_text(json.dumps(dumped))
    (trajectory,) = load_trajectories(path)
    assert [m.id for m in trajectory.messages] == ["1", "2", "3", "4"]
    assert len(trajectory.notes) == 1 and "RemoveMessage" in trajectory.notes[0]
    report = replay(trajectory, AutoContext(max_tokens=16_000, store=OffloadStore(InMemoryStore())))
    assert report.ok and report.summary()["notes"] == trajectory.notes
    assert merge_reports([report]).notes == [f"lc_remove-0: {trajectory.notes[0]}"]


def test_tool_call_arguments_that_are_not_an_object_stay_invalid_tool_calls() -> None:
    def call(cid: str, arguments: Any) -> dict[str, Any]:
        fn = {"name": "f", "arguments": arguments}
        return {"role": "assistant", "content": "", "tool_calls": [{"id": cid, "function": fn}]}

    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for cid, arguments in [("c1", "{not json"), ("c2", "[1, 2]"), ("c3", None), ("c4", '{"a": 1}')]:
        msgs += [call(cid, arguments), {"role": "tool", "tool_call_id": cid, "content": "r"}]
    msgs.append({"role": "assistant", "content": "done"})
    trajectory = parse_trajectory(msgs, "args")
    ais = [m for m in trajectory.messages if isinstance(m, AIMessage)]
    assert [[c["args"] for c in m.invalid_tool_calls] for m in ais[:2]] == [
        ["{not json"],
        ["[1, 2]"],
    ]
    assert all(m.invalid_tool_calls[0]["id"] == f"c{k}" for k, m in enumerate(ais[:2], 1))
    assert "not valid JSON" in str(ais[0].invalid_tool_calls[0]["error"])
    assert [m.tool_calls for m in ais[:2]] == [[], []]
    assert [c["args"] for c in ais[2].tool_calls] == [{}]  # null: a tool without parameters
    assert [c["args"] for c in ais[3].tool_calls] == [{"a": 1}]
    report = replay(trajectory, AutoContext(max_tokens=16_000, store=OffloadStore(InMemoryStore())))
    assert len(report.calls) == 5 and not report.invalid


def test_merged_limits_are_a_range_and_every_strategy_has_a_label_and_colour() -> None:
    from langchain_autocontext.replay import _COLORS
    from langchain_autocontext.strategies.offload import LargeMessageOffload

    def rep(tid: str, trigger: int, target: int) -> ReplayReport:
        return ReplayReport(tid, 16_000, [], 0, 0, trigger_tokens=trigger, target_tokens=target)

    total = merge_reports(
        [rep("a", 12_000, 6_000), rep("b", 12_500, 7_000), rep("c", 12_200, 6_500)]
    )
    assert (total.trigger_range, total.target_range) == ((12_000, 12_500), (6_000, 7_000))
    summary = total.summary()
    assert summary["trigger_tokens_range"] == [12_000, 12_500]
    assert summary["target_tokens_range"] == [6_000, 7_000]
    assert "trigger_tokens_range" not in rep("a", 1, 1).summary()
    fresh = LargeMessageOffload(keep_last=False, fresh=True).name
    assert fresh in STRATEGY_LABELS and set(_COLORS) == set(STRATEGY_LABELS)


def test_anthropic_messages_transcripts_are_read_with_their_tool_calls(tmp_path: Path) -> None:
    """An Anthropic Messages API request body was read without error and modelled
    wrongly: ``tool_use`` blocks did not become tool calls, ``tool_result`` blocks
    became user messages, and the top-level ``system`` was dropped, so only FIFO
    eviction ever ran (replay audit)."""
    from langchain_autocontext.messages import find_violations

    body = {
        "model": "claude-sonnet-4",
        "system": "You are a coding agent.",
        "messages": [
            {"role": "user", "content": "Fix the build."},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Read the log.", "signature": "sig"},
                    {"type": "text", "text": "Reading the log."},
                    {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"n": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "line 1: ok"}],
                    },
                    {"type": "text", "text": "And then?"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
        ],
    }
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    [t] = load_trajectories(path)
    types = [m.type for m in t.messages]
    assert types == ["system", "human", "ai", "tool", "human", "ai"]
    assert t.messages[0].content == "You are a coding agent."
    ai = t.messages[2]
    assert isinstance(ai, AIMessage) and ai.tool_calls[0]["name"] == "read"
    assert ai.tool_calls[0]["args"] == {"n": 1} and ai.tool_calls[0]["id"] == "toolu_1"
    assert isinstance(t.messages[3], ToolMessage) and t.messages[3].content == "line 1: ok"
    assert not find_violations(t.messages)


def test_cleaned_and_renamed_originals_are_not_reported_lost() -> None:
    """The engine gives a repeated id a fresh one and cleans text no store takes (a
    lone surrogate, a NUL); the report matched originals by their recorded id and exact
    text, and called them lost (replay audit)."""
    messages = [
        SystemMessage("You are terse.", id="s"),
        HumanMessage("bad \\ud800 text and a \\x00 NUL", id="u"),
        AIMessage("one", id="dup"),
        HumanMessage("again", id="dup"),  # a repeated id
        AIMessage("two", id="a2"),
    ]
    t = parse_trajectory([messages_to_dict([m])[0] for m in messages], "t")
    report = replay(t, AutoContext(AutoContextConfig(max_tokens=8_000)))
    assert report.originals == 4 and report.recoverable == 4  # all seen before the last call


def test_a_report_reads_at_a_glance() -> None:
    """Displaying a report in a notebook printed every call and event: 12 KB for the
    bundled sample, 840 KB merged over the 49 shared runs."""
    [trajectory] = load_trajectories(sample_path())
    report = replay(
        trajectory, AutoContext(AutoContextConfig(max_tokens=16_000), store=InMemoryStore())
    )
    merged = merge_reports([report, report])
    for shown in (report, merged):
        text = repr(shown)
        assert len(text) < 300 and "ok=True" in text and f"calls={len(shown.calls)}" in text


def test_legacy_function_call_runs_are_read_as_tool_calls(tmp_path: Path) -> None:
    """OpenAI's legacy ``function_call`` / ``role: function`` messages were read without
    error as an AI message with no tool calls and a FunctionMessage no strategy takes for
    a tool result, so the replay compressed them otherwise than the same run written
    with ``tool_calls`` (replay audit)."""
    from langchain_autocontext.messages import find_violations

    modern = openai_run(8, size=900)
    legacy: list[dict[str, Any]] = []
    for m in modern:
        if m.get("tool_calls"):
            legacy.append(
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": m["tool_calls"][0]["function"],
                }
            )
        elif m["role"] == "tool":
            legacy.append({"role": "function", "name": "bash", "content": m["content"]})
        else:
            legacy.append(m)
    (tmp_path / "legacy.json").write_text(json.dumps(legacy))
    (tmp_path / "modern.json").write_text(json.dumps(modern))
    [old] = load_trajectories(tmp_path / "legacy.json")
    [new] = load_trajectories(tmp_path / "modern.json")
    assert [m.type for m in old.messages] == [m.type for m in new.messages]
    ai, result = old.messages[2], old.messages[3]
    assert isinstance(ai, AIMessage) and ai.tool_calls[0]["args"] == {"cmd": "ls 0"}
    assert isinstance(result, ToolMessage) and result.tool_call_id == ai.tool_calls[0]["id"]
    assert result.name == "bash" and not find_violations(old.messages)
    a, b = replay(old, fresh_ac(3_000)), replay(new, fresh_ac(3_000))
    assert a.strategy_counts == b.strategy_counts and a.ok and b.ok
    # a legacy request body's "functions" are the schemas the model was sent
    schema = {"name": "bash", "description": "Run a command.", "parameters": {"type": "object"}}
    (tmp_path / "body.json").write_text(json.dumps({"messages": legacy, "functions": [schema]}))
    [body] = load_trajectories(tmp_path / "body.json")
    assert body.tools == [schema]
    with_schema = replay(body, fresh_ac(3_000))
    assert with_schema.calls[0].tokens > a.calls[0].tokens


def test_format_errors_name_the_line_and_the_message_as_in_the_file(tmp_path: Path) -> None:
    """A JSONL line that is no trajectory was named as a 0-based entry that skipped blank
    lines ("entry 2" for line 4), and a bad message after an Anthropic turn by its place
    after the turn's tool results were split out (replay audit)."""
    run = json.dumps({"messages": openai_run(1)})
    path = tmp_path / "runs.jsonl"
    path.write_text(f"{run}\n\n{run}\n{json.dumps({'id': 'meta', 'count': 2})}\n")
    with pytest.raises(ReplayFormatError, match=r"runs\.jsonl: line 4 is neither"):
        load_trajectories(path)
    results = [{"type": "tool_result", "tool_use_id": f"t{k}", "content": "ok"} for k in range(3)]
    bad = [{"role": "user", "content": results}, {"role": "bogus", "content": "x"}]
    with pytest.raises(ReplayFormatError, match=r"^b message 1: unknown message role"):
        parse_trajectory(bad, "b")


def test_openai_responses_api_items_are_read_as_chat_turns(tmp_path: Path) -> None:
    """A Responses API transcript (``function_call`` / ``function_call_output`` items,
    ``reasoning`` items, a request body's ``input`` and ``instructions``) was refused
    as "entry 0 is neither a list of messages nor an object with 'messages'", entry 0
    being a message (replay audit)."""
    from langchain_autocontext.messages import find_violations

    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
    for k in range(3):
        items += [
            {"type": "reasoning", "id": f"rs_{k}", "summary": []},
            {
                "type": "message",
                "id": f"msg_{k}",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"step {k}", "annotations": []}],
            },
            {"type": "function_call", "call_id": f"c{k}", "name": "bash", "arguments": '{"n": 1}'},
            {"type": "function_call", "call_id": f"d{k}", "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{k}", "output": "x " * 50},
            {
                "type": "function_call_output",
                "call_id": f"d{k}",
                "output": [{"type": "input_text", "text": "ok"}],
            },
        ]
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Done."}],
    }
    body = {
        "id": "resp_1",
        "instructions": "You are a coding agent.",
        "input": items,
        "output": [answer],
    }
    (tmp_path / "body.json").write_text(json.dumps(body))
    (tmp_path / "items.json").write_text(json.dumps([*items, answer]))
    [t] = load_trajectories(tmp_path / "body.json")
    assert t.id == "resp_1" and t.messages[0].content == "You are a coding agent."
    assert [m.type for m in t.messages[1:6]] == ["human", "ai", "tool", "tool", "ai"]
    ai = t.messages[2]
    assert isinstance(ai, AIMessage) and [c["id"] for c in ai.tool_calls] == ["c0", "d0"]
    assert ai.content == [{"type": "text", "text": "step 0"}] and not ai.additional_kwargs
    assert count_calls(t) == 4 and not find_violations(t.messages)
    assert any("3 Responses API reasoning items" in n for n in t.notes)
    [plain] = load_trajectories(tmp_path / "items.json")
    assert [m.type for m in plain.messages] == [m.type for m in t.messages[1:]]
    assert replay(t, fresh_ac()).ok
    assert t.messages[4].content == "ok"  # input_text parts read as text
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K"}
    shot = {"type": "function_call_output", "call_id": "c0", "output": [image]}
    [_, _, result] = parse_trajectory([items[0], items[3], shot], "i").messages
    assert result.content == [image]  # kept: the model was sent it
    other = [*items, {"type": "web_search_call", "id": "ws_1", "status": "completed"}]
    with pytest.raises(ReplayFormatError, match="Responses API item of type 'web_search_call'"):
        parse_trajectory(other, "w")


def test_langchain_serialized_messages_and_langsmith_runs(tmp_path: Path) -> None:
    """LangChain's own serialization (``dumpd``/``dumps``: ``{"lc": 1, "type":
    "constructor", …}``, what LangSmith exports) and LangSmith run exports were refused as
    "neither a list of messages nor an object with 'messages'" (replay audit)."""
    from langchain_core.load import dumpd

    msgs = [
        SystemMessage("You are a coding agent."),
        HumanMessage("Fix it."),
        AIMessage("", tool_calls=[{"name": "bash", "args": {"n": 1}, "id": "c1"}]),
        ToolMessage("x " * 40, tool_call_id="c1"),
        AIMessage("Fixed."),
    ]
    lc = [dumpd(m) for m in msgs]
    llm_run = {
        "id": "run-llm",
        "run_type": "llm",
        "inputs": {"messages": [lc[:-1]]},
        "outputs": {"generations": [[{"text": "Fixed.", "message": lc[-1]}]]},
    }
    graph_run = {
        "id": "run-graph",
        "run_type": "chain",
        "inputs": {"messages": lc[1:2]},
        "outputs": {"messages": lc},
    }
    (tmp_path / "lc.json").write_text(json.dumps(lc))
    (tmp_path / "runs.jsonl").write_text(f"{json.dumps(llm_run)}\n{json.dumps(graph_run)}\n")
    [t] = load_trajectories(tmp_path / "lc.json")
    a, b = load_trajectories(tmp_path / "runs.jsonl")
    assert (a.id, b.id) == ("run-llm", "run-graph")
    for traj in (t, a, b):
        assert [type(m) for m in traj.messages] == [type(m) for m in msgs]
        assert [m.content for m in traj.messages] == [m.content for m in msgs]
        assert traj.messages[2].tool_calls[0]["args"] == {"n": 1}
        assert traj.messages[3].tool_call_id == "c1"
        assert replay(traj, fresh_ac()).ok


def test_limit_stops_reading_a_jsonl_of_trajectories(tmp_path: Path) -> None:
    """``--limit N`` parsed every line of the file before keeping N trajectories: on a
    large log, ``--limit 1`` took the memory and time of the whole file (replay audit).
    Lines past the limit are not read now (a broken one there is no error); a file of one
    message a line is still read whole (it is one trajectory)."""
    run = json.dumps({"messages": openai_run(1)})
    path = tmp_path / "runs.jsonl"
    path.write_text(f"{run}\n\n{run}\n{{broken\n")
    assert len(load_trajectories(path, limit=2)) == 2
    with pytest.raises(ReplayFormatError, match="line 4 is not JSON"):
        load_trajectories(path, limit=3)
    per_message = tmp_path / "messages.jsonl"
    per_message.write_text("".join(json.dumps(m) + "\n" for m in openai_run(2)))
    [t] = load_trajectories(per_message, limit=1)
    assert len(t.messages) == len(openai_run(2))


def test_anthropic_tool_results_keep_their_images_and_errors() -> None:
    """An Anthropic ``tool_result`` holding an image (a computer-use screenshot) was read
    as its text alone: the image the model was sent vanished from the replay and from
    its counts; ``is_error`` was dropped too (replay audit)."""
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
    }
    turns = [
        {"role": "user", "content": "Take a screenshot."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "here"}, image],
                }
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t2", "name": "shot", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t2", "is_error": True, "content": "boom"}
            ],
        },
        {"role": "assistant", "content": "Seen."},
    ]
    t = parse_trajectory(turns, "cu")
    shot, failed = t.messages[2], t.messages[4]
    assert isinstance(shot, ToolMessage) and shot.content[1] == image
    assert isinstance(failed, ToolMessage) and failed.status == "error" and failed.content == "boom"
    text_only = parse_trajectory(
        [*turns[:2], {**turns[2], "content": [{**turns[2]["content"][0], "content": "here"}]}], "t"
    )
    ac = fresh_ac()
    assert ac.counter.count([shot]) > ac.counter.count([text_only.messages[2]])
    assert replay(t, fresh_ac()).ok
