"""Smoke runs of benchmarks/compare_peers.py and benchmarks/scaling.py, so they cannot rot.

One real trajectory per data set, one budget, tiny scaling sizes. The assertions
are the benchmark's own claims on that sample (no budget overrun or invalid
sequence for this package, everything recoverable with its tools, the unmanaged
baseline over budget), not timings. A peer that is not installed is skipped.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId
from pydantic import BaseModel, ConfigDict

from tests._builders import DATA, FunctionModel, benchmark

MINI = DATA / "mini-swe-agent-dev.jsonl"
TAU = DATA / "tau-bench-airline.jsonl"


@pytest.fixture(scope="module")
def cp() -> ModuleType:
    return benchmark("compare_peers")


@pytest.fixture(scope="module")
def scaling() -> ModuleType:
    pytest.importorskip("langgraph.checkpoint.sqlite", reason="needs the [sqlite] extra")
    return benchmark("scaling")


def _data(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data)")
    return path


def test_fake_summarizer_is_150_words_and_counts(cp: ModuleType) -> None:
    from langchain_core.messages import HumanMessage

    from langchain_autocontext.tokens import default_counter

    counter = default_counter()
    model = cp.CountingSummarizer(counter=counter)
    reply = model.invoke([HumanMessage("summarize this please")])
    model.invoke("and this")
    assert len(reply.content.split()) == 150
    assert model.calls == 2
    expected = counter.count_messages([HumanMessage("summarize this please")])
    expected += counter.count_messages([HumanMessage("and this")])
    assert model.input_tokens == expected


@pytest.mark.parametrize("system", ["none", "middleware", "ours", "ours-lean"])
def test_compare_one_trajectory(cp: ModuleType, system: str) -> None:
    rows = cp.run(_data(MINI), [system], [8_000], limit=1)
    (row,) = rows
    assert row.trajectories == 1 and row.calls > 50
    assert row.count_mismatches == 0  # the exact count of what was sent agrees everywhere
    if system == "none":
        assert row.over_budget > 0 and row.largest > 8_000
        assert row.recoverable_share == 1.0 and row.summarizer_calls == 0
        assert row.cached_share > 0.9  # append-only: almost every token repeats the prefix
    else:
        assert row.largest <= 8_000 + 1_000  # managed: at or near the budget
        assert row.summarizer_calls > 0 and row.summarizer_input > 0
    if system.startswith("ours"):
        assert row.over_budget == 0 and row.invalid == 0
        assert 0 < row.cached < row.sent
    if system == "ours":  # search_history/reload_offloaded reach every original
        assert row.recoverable_share == 1.0
    if system in ("middleware", "ours-lean"):  # summarized away, no tool to get it back
        assert row.recoverable_share < 1.0


def test_a_run_is_reproducible_and_leaves_the_package_ids_random(cp: ModuleType) -> None:
    from langchain_autocontext.messages import UUID4_RE, new_id

    def measured(row) -> dict:
        return {k: v for k, v in row.as_dict().items() if not k.endswith("_ms")}  # timings vary

    first, again = (cp.run(_data(MINI), ["ours"], [8_000], limit=2)[0] for _ in range(2))
    assert measured(first) == measured(again) and first.compactions > 0
    # random again after every trajectory
    first_id, second_id = new_id(), new_id()
    assert first_id != second_id and UUID4_RE.match(first_id) and UUID4_RE.match(second_id)


def test_task_statement_presence_and_the_stand_in_ablation(
    cp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package keeps the task statement (the latest user message) on every
    over-budget call; with --task-stand-in every system gets a one-line stand-in instead,
    and the needed facts stay those of the recorded run."""
    (kept,) = cp.run(_data(MINI), ["ours-lean"], [8_000], limit=1)
    assert kept.task_checks > 0 and kept.task_kept == kept.task_checks
    assert kept.compactions > 0 and kept.placeholders == 0
    monkeypatch.setattr(cp, "TASK_STAND_IN", "Fix the issue in the task statement.")
    (stand_in,) = cp.run(_data(MINI), ["ours-lean"], [8_000], limit=1)
    assert stand_in.support.needed == kept.support.needed  # same facts to find
    assert stand_in.task_kept == stand_in.task_checks  # the stand-in is kept instead
    assert stand_in.sent < kept.sent  # a much shorter first user message


def test_padded_system_prompts_are_sent_and_counted(
    cp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--pad-system appends rules to every system prompt: more is sent, more calls are
    over the budget, and the package still holds the budget with every original
    recoverable."""
    (plain,) = cp.run(_data(MINI), ["ours"], [8_000], limit=1)
    monkeypatch.setattr(cp, "PAD_SYSTEM", 2_000)
    (padded,) = cp.run(_data(MINI), ["ours"], [8_000], limit=1)
    assert padded.sent > plain.sent and padded.support.over_needed > plain.support.over_needed
    assert padded.over_budget == 0 and padded.invalid == 0 and padded.recoverable_share == 1.0
    from langchain_core.messages import SystemMessage

    from langchain_autocontext.tokens import default_counter

    counter = default_counter()
    grown = cp.padded_system(SystemMessage("You help."), 500, counter)
    assert str(grown.content).startswith("You help.") and counter.count_message(grown) >= 500


def test_text_protocol_reshapes_the_runs_as_an_agent_without_tool_calls(
    cp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--text-protocol replays each run as an agent without tool calling records it:
    every command in a fenced block of the assistant's text, every result read as a
    user message, in the recorded order; the package still holds the budget, keeps
    every sequence valid and every original recoverable."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from langchain_autocontext.messages import find_violations
    from langchain_autocontext.replay import load_trajectories

    (t,) = load_trajectories(_data(MINI), limit=1)
    reshaped = cp.text_protocol(t)
    assert not find_violations(reshaped.messages)
    assert [m.id for m in reshaped.messages] == [m.id for m in t.messages]
    assert not any(isinstance(m, ToolMessage) for m in reshaped.messages)
    assert not any(isinstance(m, AIMessage) and m.tool_calls for m in reshaped.messages)
    for before, after in zip(t.messages, reshaped.messages, strict=True):
        if isinstance(before, ToolMessage):
            assert isinstance(after, HumanMessage) and after.content == before.content
        elif isinstance(before, AIMessage):
            for tc in before.tool_calls:
                assert f"```bash\n{tc['args']['command']}\n```" in after.content
    monkeypatch.setattr(cp, "TEXT_PROTOCOL", True)
    (row,) = cp.run(_data(MINI), ["ours"], [8_000], limit=1)
    assert row.over_budget == 0 and row.invalid == 0 and row.recoverable_share == 1.0


def test_parallel_calls_reshape_the_runs_validly(
    cp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--parallel-calls replays each two one-call steps as one turn making both calls:
    the same calls and results in fewer model calls, every sequence valid, and the
    package still holds the budget with every original recoverable."""
    from langchain_core.messages import AIMessage, ToolMessage

    from langchain_autocontext.messages import find_violations
    from langchain_autocontext.replay import load_trajectories

    (t,) = load_trajectories(_data(MINI), limit=1)
    reshaped = cp.parallel_calls(t)
    assert not find_violations(reshaped.messages)
    calls = [tc["id"] for m in t.messages if isinstance(m, AIMessage) for tc in m.tool_calls]
    again = [tc["id"] for m in reshaped.messages if isinstance(m, AIMessage) for tc in m.tool_calls]
    assert again == calls  # every call, in order
    results = [m.content for m in t.messages if isinstance(m, ToolMessage)]
    assert [m.content for m in reshaped.messages if isinstance(m, ToolMessage)] == results
    assert any(len(m.tool_calls) == 2 for m in reshaped.messages if isinstance(m, AIMessage))
    # tau-bench reuses call ids across steps: those steps stay apart, every sequence valid
    for tau in load_trajectories(_data(TAU)):
        assert not find_violations(cp.parallel_calls(tau).messages), tau.id
    (plain,) = cp.run(_data(MINI), ["ours"], [8_000], limit=1)
    monkeypatch.setattr(cp, "PARALLEL_CALLS", True)
    (paired,) = cp.run(_data(MINI), ["ours"], [8_000], limit=1)
    assert 0 < paired.calls < plain.calls
    assert paired.over_budget == 0 and paired.invalid == 0 and paired.recoverable_share == 1.0


def test_uuid_ids_give_every_message_a_langgraph_id(
    cp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--uuid-ids replays the runs with LangGraph's kind of ids: a distinct uuid4 for
    every message, the same on every run, everything else as recorded; the package's
    figures stay sound (tags show short ids whatever the ids are)."""
    import uuid

    from langchain_autocontext.replay import load_trajectories, sample_path

    (t,) = load_trajectories(sample_path())
    once, twice = cp.uuid_ids(t), cp.uuid_ids(t)
    ids = [m.id for m in once.messages]
    assert ids == [m.id for m in twice.messages] and len(set(ids)) == len(ids)
    assert all(
        uuid.UUID(i).version == 4 and i != m.id for i, m in zip(ids, t.messages, strict=True)
    )
    assert [m.model_copy(update={"id": None}) for m in once.messages] == [
        m.model_copy(update={"id": None}) for m in t.messages
    ]
    monkeypatch.setattr(cp, "UUID_IDS", True)
    (row,) = cp.run(_data(MINI), ["ours"], [32_000], limit=2)
    assert row.over_budget == 0 and row.invalid == 0 and row.count_mismatches == 0
    assert row.recoverable_share == 1.0


def test_middleware_placeholder_summaries_are_counted(cp: ModuleType) -> None:
    """When no user message falls in the middleware's trim window it writes langchain's
    placeholder instead of calling the summary model (langchain#39261); the runner
    counts those compactions."""
    (row,) = cp.run(_data(MINI), ["middleware"], [16_000], limit=1)
    assert row.compactions > 0
    assert 0 < row.placeholders <= row.compactions
    assert row.task_share is not None and row.task_share < 1.0  # summarized away


def test_compare_langmem(cp: ModuleType) -> None:
    pytest.importorskip(
        "langmem", reason="LangMem is a benchmark-only peer: pip install -e '.[bench]'"
    )
    (row,) = cp.run(_data(MINI), ["langmem"], [8_000], limit=1)
    assert row.over_budget == 0 and row.summarizer_calls > 0
    # LangMem puts its running summary in a second system message
    assert set(row.violation_kinds) <= {"system message not first"}


def test_compare_main_writes_table_json_and_plot(cp: ModuleType, tmp_path: Path, capsys) -> None:
    _data(MINI), _data(TAU)
    pytest.importorskip("matplotlib")
    code = cp.main(
        ["--limit", "1", "--budgets", "8000", "--systems", "none,ours-lean", "--out", str(tmp_path)]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "### mini-swe-agent-dev.jsonl" in out and "### tau-bench-airline.jsonl" in out
    assert "| ours-lean | 8k |" in out
    data = json.loads((tmp_path / "compare_peers.json").read_text())
    assert {r["system"] for r in data["tau-bench-airline.jsonl"]} == {"none", "ours-lean"}
    # per data set: the main table and the support-by-distance table
    assert (tmp_path / "compare_peers.md").read_text().count("| none | 8k |") == 4
    assert (tmp_path / "compare_peers.png").stat().st_size > 10_000
    assert (tmp_path / "frontier.png").stat().st_size > 10_000
    row = data["mini-swe-agent-dev.jsonl"][0]
    assert row["system"] == "none" and row["support"] == 1.0 and row["needed_facts"] > 0


def test_ids_seed_draws_the_package_ids_from_another_sequence(
    cp: ModuleType, tmp_path: Path, monkeypatch
) -> None:
    """--ids-seed reaches the runner: the same seed gives the same offload ids (a run is
    reproducible), another seed other ids, and the report says which seed ran."""
    _data(MINI)
    monkeypatch.setattr(cp, "IDS_SEED", 0)
    (trajectory,) = cp.load_trajectories(_data(MINI), limit=1)

    def offload_ids(seed: int) -> list[str]:
        cp.IDS_SEED = seed
        counter = cp.default_counter()
        runner = cp.make_runner("ours", 8000, counter, cp.CountingSummarizer(counter=counter))
        with runner.ids():
            cp.replay_one(trajectory, runner, cp.Row("ours", 8000, MINI.name))
        return [r.offload_id for r in runner.store.list_offloads(runner.thread)]

    first = offload_ids(0)
    assert first and offload_ids(0) == first
    assert set(offload_ids(7)).isdisjoint(first)
    args = ["--limit", "1", "--budgets", "8000", "--systems", "ours", "--no-plot"]
    assert cp.main([*args, "--files", MINI.name, "--out", str(tmp_path), "--ids-seed", "3"]) == 0
    assert cp.IDS_SEED == 3
    assert "sequence of seed 3" in (tmp_path / "compare_peers.md").read_text()


def test_support_counts_only_original_text_still_sent(cp: ModuleType) -> None:
    """A needed fact counts when an original message still holds it verbatim; text the
    manager wrote (our summaries, the peers' fixed summary) does not."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    from langchain_autocontext.messages import mark
    from langchain_autocontext.tokens import default_counter

    call = {"name": "bash", "args": {"command": "cat src/pkg/models.py"}, "id": "c1"}
    msgs = [
        SystemMessage("You are a coding agent."),
        HumanMessage("Fix the bug in the parser."),
        AIMessage("", tool_calls=[call]),
        ToolMessage("class QueryBuilder: defined at line 4817", tool_call_id="c1"),
        AIMessage("QueryBuilder at line 4817 of src/pkg/models.py needs the fix"),
    ]
    tracker = cp.FactTracker(msgs, frozenset(), default_counter())
    needed = tracker.needed(4)
    assert {"QueryBuilder", "4817", "src/pkg/models.py"} <= set(needed)
    assert "parser" not in needed  # in the task statement
    summary = mark(AIMessage("QueryBuilder 4817 src/pkg/models.py"), "current_round_summary")
    assert cp.original_text(summary) == ""
    peer = AIMessage(f"{cp.SUMMARY_150_WORDS}")
    assert "QueryBuilder" not in cp.original_text(peer)
    assert "QueryBuilder" in cp.original_text(msgs[3])


def test_compare_runs_a_variant_of_this_package(
    cp: ModuleType, tmp_path: Path, capsys, monkeypatch
) -> None:
    """--ours-order and --ours-config reach the engine: AgentScope's order is a different
    list of strategies than the default one, and a bad order stops before the run."""
    _data(MINI)
    monkeypatch.setattr(cp, "OURS_CONFIG", {})
    monkeypatch.setattr(cp, "OURS_ORDER", None)
    assert [s.name for s in cp.strategies_in_order("2314567")] == [
        "offload_history",
        "offload_all",
        "tool_run",
        "round",
        "current_large",
        "current_round",
        "fifo",
    ]
    with pytest.raises(ValueError, match="each of 1-7 once"):
        cp.main(["--ours-order", "231456", "--limit", "1"])
    args = ["--limit", "1", "--budgets", "8000", "--systems", "ours", "--no-plot"]
    code = cp.main(
        [
            *args,
            "--files",
            MINI.name,
            "--out",
            str(tmp_path),
            "--ours-order",
            "2314567",
            "--ours-config",
            "keep_ratio=0.4",
        ]
    )
    assert code == 0
    assert cp.OURS_ORDER == "2314567" and cp.OURS_CONFIG == {"keep_ratio": 0.4}
    runner = cp.make_runner("ours", 8000, None, None)
    runner.counter = cp.default_counter()
    runner.summarizer = cp.CountingSummarizer(counter=runner.counter)
    runner.start(None)
    assert runner.ac.config.keep_ratio == 0.4
    assert [s.name for s in runner.ac.strategies][2] == "tool_run"


def test_ours_config_takes_literals_words_and_lists_of_names(cp: ModuleType) -> None:
    """A tool list's commas are not pair separators; a wrong name is an error."""
    assert cp.parse_ours_config("keep_ratio=0.4, metadata_tags=True") == {
        "keep_ratio": 0.4,
        "metadata_tags": True,
    }
    assert cp.parse_ours_config("keep_tool_results=think,calculate,target_ratio=0.3") == {
        "keep_tool_results": ("think", "calculate"),
        "target_ratio": 0.3,
    }
    assert cp.parse_ours_config("tag_format=seed") == {"tag_format": "seed"}
    assert cp.parse_ours_config("") == {}
    with pytest.raises(ValueError, match="config field"):
        cp.parse_ours_config("keep_rato=0.4")


def test_sweep_runs_each_variant_as_a_system_of_its_own(
    cp: ModuleType, tmp_path: Path, monkeypatch
) -> None:
    """Each --sweep variant runs as ``ours[...]`` with its fields on top of the defaults
    (and of --ours-config); a variant that restates a default replays exactly as the
    defaults; a misspelt field stops before the run."""
    _data(MINI)
    monkeypatch.setattr(cp, "OURS_CONFIG", {})
    monkeypatch.setattr(cp, "OURS_ORDER", None)
    sweep = "keep_ratio=0.25;target_ratio=0.6,keep_ratio=0.1"
    args = ["--limit", "1", "--budgets", "8000", "--files", MINI.name, "--no-plot"]
    code = cp.main([*args, "--systems", "ours", "--sweep", sweep, "--out", str(tmp_path)])
    assert code == 0
    rows = {
        r["system"]: r for r in json.loads((tmp_path / "compare_peers.json").read_text())[MINI.name]
    }
    assert set(rows) == {"ours", "ours[keep_ratio=0.25]", "ours[target_ratio=0.6,keep_ratio=0.1]"}
    same, other = rows["ours[keep_ratio=0.25]"], rows["ours[target_ratio=0.6,keep_ratio=0.1]"]
    timings = ("system", "p50_ms", "p99_ms")
    assert {k: v for k, v in same.items() if k not in timings} == {
        k: v for k, v in rows["ours"].items() if k not in timings
    }
    assert other["sent"] != rows["ours"]["sent"]  # a later target sends more
    runner = cp.make_runner("ours[target_ratio=0.6,keep_ratio=0.1]", 8000, None, None)
    runner.counter = cp.default_counter()
    runner.summarizer = cp.CountingSummarizer(counter=runner.counter)
    runner.start(None)
    assert runner.name == "ours[target_ratio=0.6,keep_ratio=0.1]"
    assert (runner.ac.config.target_ratio, runner.ac.config.keep_ratio) == (0.6, 0.1)
    with pytest.raises(SystemExit):
        cp.main([*args, "--systems", "ours", "--sweep", "target_rato=0.6"])


def test_standing_places_each_configuration_against_the_peers(cp: ModuleType) -> None:
    """The margin over the peers' line, the gap to the middleware's support, the cost
    against LangMem's and which configuration of this package dominates which."""

    def row(system: str, cost: int, present: int) -> object:
        r = cp.Row(system, 16_000, "runs")
        r.sent = cost  # nothing cached, no summarizer: the effective cost is what is sent
        r.support.over_needed, r.support.over_present = 100, present
        return r

    rows = [
        row("langmem", 4_000_000, 60),
        row("middleware", 6_000_000, 80),
        row("ours", 5_000_000, 75),
        row("ours-lean", 4_800_000, 75),
        row("ours[target_ratio=0.5]", 6_000_000, 85),
    ]
    lines = cp.standing(rows).splitlines()
    by = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert by["ours"] == "| ours | 16k | 75.0% | 5.00M | +5.0 | -5.0 | 1.25x | ours-lean |"
    assert by["ours-lean"].endswith("| +7.0 | -5.0 | 1.20x | – |")
    assert by["ours[target_ratio=0.5]"].endswith("| +5.0 | +5.0 | 1.50x | – |")
    assert cp.standing(rows[1:]) == ""  # no LangMem: no line to stand against


def test_frontier_by_budget_draws_a_panel_per_budget_with_both_peers(
    cp: ModuleType, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")

    def row(system: str, budget: int, cost: int, present: int) -> object:
        r = cp.Row(system, budget, "runs")
        r.sent, r.support.over_needed, r.support.over_present = cost, 100, present
        return r

    rows = [
        row(system, budget, cost * budget // 8_000, present)
        for budget in (8_000, 16_000)
        for system, cost, present in (
            ("langmem", 4_000_000, 60),
            ("middleware", 6_000_000, 80),
            ("ours", 5_000_000, 75),
            ("ours[target_ratio=0.5]", 5_500_000, 78),
        )
    ]
    path = cp.frontier_by_budget(rows, tmp_path / "by-budget.png")
    assert path is not None and path.stat().st_size > 10_000
    assert cp.frontier_by_budget(rows[1:4], tmp_path / "none.png") is None  # no LangMem
    assert not (tmp_path / "none.png").exists()


def test_chat_standing_measures_both_chat_measures_against_the_line(cp: ModuleType) -> None:
    def row(system: str, cost: int, end: int, sessions: int) -> object:
        r = cp.ChatRow(system, 4_000)
        r.sent, r.questions, r.in_context = cost, 100, end
        r.session_questions, r.session_in_context = 200, sessions
        return r

    rows = [
        row("langmem", 400_000, 2, 20),
        row("middleware", 800_000, 10, 30),
        row("ours[token_ratio=0.9,target_ratio=0.5]", 600_000, 9, 28),
    ]
    (line,) = cp.chat_standing(rows).splitlines()[2:]
    assert line == (
        "| ours[token_ratio=0.9,target_ratio=0.5] | 4k | 0.090 | 0.140 | 0.60M | "
        "+0.030 / +0.015 | 0.75x |"
    )


def _locomo(path: Path, sessions: int, turns: int) -> Path:
    """A LoCoMo-shaped file: one conversation, ``sessions`` sessions of ``turns`` turns,
    one question per session whose evidence is that session's first turn."""
    conversation: dict = {"speaker_a": "Ann", "speaker_b": "Bo"}
    qa = []
    plants = ["tulips", "cedars", "ferns", "roses", "maples"]
    for k, plant in zip(range(1, sessions + 1), plants, strict=False):
        conversation[f"session_{k}_date_time"] = f"{k} May 2023"
        conversation[f"session_{k}"] = [
            {
                "speaker": "Ann" if t % 2 else "Bo",
                "dia_id": f"D{k}:{t}",
                "text": (f"I planted {plant} today. " if t == 1 else f"turn {t}: ")
                + "we talked about the garden " * 12,
            }
            for t in range(1, turns + 1)
        ]
        qa.append(
            {"question": f"When were {plant} planted?", "evidence": [f"D{k}:1"], "category": 1}
        )
    path.write_text(json.dumps([{"sample_id": "c-1", "conversation": conversation, "qa": qa}]))
    return path


def test_chats_read_the_file_named_by_chat_file(cp: ModuleType, tmp_path: Path, capsys) -> None:
    """Held-back conversations under another name run with --chat-file; an absent file
    is said, not silently skipped."""
    _locomo(tmp_path / "held-back.json", sessions=2, turns=4)
    base = ["--chats", "--data", str(tmp_path), "--files", "", "--systems", "ours", "--no-plot"]
    out = tmp_path / "out"
    assert cp.main([*base, "--chat-file", "held-back.json", "--out", str(out)]) == 0
    assert "### held-back.json" in (out / "compare_peers.md").read_text()
    assert list(json.loads((out / "compare_peers.json").read_text())) == ["held-back.json"]
    assert cp.main([*base, "--out", str(out)]) == 1  # locomo-dev.json is not there
    assert "locomo-dev.json is absent" in capsys.readouterr().err


@pytest.mark.parametrize("system", ["middleware", "ours"])
def test_chats_count_evidence_at_every_session_end(
    cp: ModuleType, system: str, tmp_path: Path
) -> None:
    """Each question counts at every session end from its evidence's session on (3 + 2 +
    1 pairs for 3 sessions); with room for everything all evidence is there, with a
    small budget the oldest is not, and no question is counted before it was said."""
    path = _locomo(tmp_path / "locomo.json", sessions=3, turns=8)
    (roomy,) = cp.run_chats(path, [system], [100_000])
    assert (roomy.questions, roomy.in_context) == (3, 3)
    assert (roomy.session_questions, roomy.session_in_context) == (6, 6)
    (tight,) = cp.run_chats(path, [system], [1_500])
    assert tight.session_questions == 6 and tight.questions == 3
    assert tight.in_context < 3  # session 1's first turn no longer fits
    assert tight.session_in_context < 6
    if system == "ours":
        assert tight.findable == 3  # search_history brings every evidence turn back
    assert "| 6 |" not in cp.chat_table([tight]) and "(6)" in cp.chat_table([tight])
    # what the chats cost is measured on every call, not only at the session ends
    assert roomy.calls > roomy.session_questions // 2 and roomy.calls == tight.calls
    assert 0 < roomy.cached < roomy.sent and roomy.summarizer_input == 0
    assert tight.sent < roomy.sent and tight.summarizer_calls > 0
    assert tight.effective == pytest.approx(
        tight.sent - tight.cached + cp.CACHED_PRICE * tight.cached + tight.summarizer_input
    )


def test_chat_comparison_names_each_target(cp: ModuleType, tmp_path: Path) -> None:
    """The chat targets (evidence at least the middleware's at the end and at every
    session's end, search top 5 at least 0.75) are each stated met or missed; without
    LangMem's point there is no peers' line to measure against."""
    path = _locomo(tmp_path / "locomo.json", sessions=3, turns=8)
    lines = cp.chat_comparison(cp.run_chats(path, ["middleware", "ours"], [1_500]))
    assert len([x for x in lines if "vs the middleware's" in x]) == 2
    assert any("search_history's top 5" in x for x in lines)
    assert all(("met" in x) or ("MISSED" in x) for x in lines if "vs the" in x)
    assert not any("against the line" in x for x in lines)


def test_chat_comparison_measures_the_defaults_against_the_peers_line(
    cp: ModuleType, tmp_path: Path
) -> None:
    """With LangMem's point too, each chat measure gets its margin against the line."""
    pytest.importorskip(
        "langmem", reason="LangMem is a benchmark-only peer: pip install -e '.[bench]'"
    )
    path = _locomo(tmp_path / "locomo.json", sessions=3, turns=8)
    rows = cp.run_chats(path, ["langmem", "middleware", "ours"], [1_500])
    lines = cp.chat_comparison(rows)
    assert len([x for x in lines if "against the line" in x]) == 2


def test_bootstrap_intervals_pair_the_trajectories(cp: ModuleType) -> None:
    """The gap to the middleware and the margin against the peers' line get intervals
    over the trajectories, each resample taking the same runs for every system: a system
    that keeps 5 points more on every run has a gap of exactly 5 whatever is drawn."""

    def row(system: str, runs: list[tuple[int, int, float]]) -> object:
        r = cp.Row(system, 16_000, "runs")
        r.per_trajectory = runs
        return r

    mw_runs = [(100, 80, 10.0), (200, 150, 20.0), (60, 45, 5.0), (120, 60, 12.0)]
    ours = row("ours", [(n, p + n // 20, c) for n, p, c in mw_runs])  # +5 points each
    mw = row("middleware", mw_runs)
    lm = row("langmem", [(n, p - n // 10, c / 2) for n, p, c in mw_runs])  # -10, half cost
    spread = cp.bootstrap(ours, lm, mw, resamples=300)
    assert spread["gap"] == pytest.approx((5.0, 5.0))
    low, high = spread["margin"]
    assert low == pytest.approx(high) == pytest.approx(5.0)  # the line passes through mw
    uneven = row("ours", [(100, 90, 10.0), (200, 100, 20.0), (50, 45, 5.0), (120, 110, 12.0)])
    low, high = cp.bootstrap(uneven, None, mw, resamples=300)["gap"]
    assert low < high  # runs that differ unevenly spread the gap
    assert cp.bootstrap(row("ours", mw_runs[:3]), lm, mw) == {}  # not the same runs


def test_peer_line_measures_the_height_above_the_peers_trade(cp: ModuleType) -> None:
    """On the line through two peers' (cost, quality) points the margin is 0, above it
    positive, below negative; the line extends past either peer; equal costs: no line."""
    a, b = (4.0, 60.0), (6.0, 80.0)
    assert cp.peer_line((5.0, 70.0), a, b) == pytest.approx(0.0)
    assert cp.peer_line((5.0, 75.0), a, b) == pytest.approx(5.0)
    assert cp.peer_line((7.0, 85.0), a, b) == pytest.approx(-5.0)  # the line goes on to 90
    assert cp.peer_line((3.0, 50.0), a, b) == pytest.approx(0.0)
    assert cp.peer_line((5.0, 70.0), a, (4.0, 90.0)) is None


def test_compare_rejects_unknown_system(cp: ModuleType) -> None:
    with pytest.raises(SystemExit):
        cp.main(["--systems", "nope"])


def test_scaling_overhead_rows(scaling: ModuleType) -> None:
    """The rows, and an engine that counts the tool its agent calls (no warning that the
    schema of ``bash`` goes uncounted: the measured calls carry it)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calm = scaling.overhead(100, compress=False, calls=3)
    assert not [w for w in caught if "does not count" in str(w.message)]
    assert calm["compressing_calls"] == 0
    assert calm["working_messages_after"] == 100 + 2 * 3  # nothing was touched
    busy = scaling.overhead(150, compress=True, calls=3)
    assert busy["first_call_compressed"]
    assert busy["working_messages_after"] < 150
    assert "| 150 |" in scaling.overhead_table([calm, busy])


def test_scaling_history_has_realistic_sizes(scaling: ModuleType) -> None:
    from langchain_autocontext.messages import find_violations, message_chars

    msgs = scaling.history(200)
    assert len(msgs) == 200 and not find_violations(msgs)
    sizes = sorted(message_chars(m) for m in msgs if m.type == "tool")
    assert sizes[len(sizes) // 2] > 300 and sizes[-1] > 4_000


def test_scaling_checkpoints_stay_bounded_with_the_node(scaling: ModuleType) -> None:
    managed = scaling.checkpoint_growth(8, [4, 8], managed=True, budget=4_000, window=2)
    unmanaged = scaling.checkpoint_growth(8, [4, 8], managed=False, window=2)
    for run in (managed, unmanaged):
        assert set(run["marks"]) == {4, 8}
        assert all(m["checkpoint_bytes_per_turn"] > 0 for m in run["marks"].values())
    assert managed["marks"][8]["store_bytes_per_turn"] > 0  # originals go to the store
    assert unmanaged["state_messages_at_end"] == 8 * 4  # user, call, result, answer per turn
    assert managed["state_messages_at_end"] < unmanaged["state_messages_at_end"]
    assert "| unmanaged | 8 |" in scaling.checkpoint_table([managed, unmanaged])


def test_composition_runs_on_one_trajectory(capsys: pytest.CaptureFixture[str]) -> None:
    if not MINI.is_file():
        pytest.skip(f"{MINI} is absent")
    assert (
        benchmark("composition").main(["--budget", "8000", "--limit", "1", "--systems", "ours"])
        == 0
    )
    out = capsys.readouterr().out
    assert "average tokens per over-budget call" in out and "human" in out


def test_composition_splits_masked_messages_and_finds_what_only_their_previews_hold() -> None:
    """The notes of masked messages are part of what those messages take; the facts the
    next actions reuse that only a masked preview still holds are a part of those needed."""
    if not MINI.is_file():
        pytest.skip(f"{MINI} is absent")
    parts, counts = benchmark("composition").composition("ours", 8_000, 8, MINI)
    assert 0 < parts["offloaded: the notes (size, offload id)"] < parts["offloaded"]
    assert counts["facts needed"] > 0
    assert 0 <= counts.get("facts only in masked previews", 0) < counts["facts needed"]
    missed = {k: v for k, v in counts.items() if k.startswith("missed: ")}
    assert 0 < sum(missed.values()) < counts["facts needed"]
    # at 8k the package summarizes or evicts some of the agent's own calls
    assert missed["missed: the assistant's tool-call arguments, summarized or evicted"] > 0


def test_a_missed_fact_is_told_by_where_it_was_last_seen_and_what_became_of_it() -> None:
    from langchain_core.messages import AIMessage, ToolMessage

    from langchain_autocontext.messages import mark

    kind = benchmark("composition").miss_kind
    call = AIMessage(
        "I will look at widget_core.py",
        tool_calls=[{"name": "bash", "args": {"command": "cat util_x9.py"}, "id": "c1"}],
        id="a1",
    )
    result = ToolMessage("def helper_q7(): ...", tool_call_id="c1", id="t1")
    masked = mark(ToolMessage("def helper_q7", tool_call_id="c1", id="t1"), "offloaded")
    assert kind("util_x9.py", call, None) == (
        "the assistant's tool-call arguments, summarized or evicted"
    )
    assert kind("widget_core.py", call, call) == "the assistant's text, verbatim"
    assert kind("helper_q7", result, masked) == "a tool result, offloaded (preview kept)"


def test_fact_density_weighs_each_kind_and_size_of_message(tmp_path: Path) -> None:
    """Facts a next action reuses per 1,000 tokens of where they were last seen: here
    each run's next action reuses two names its (small or large) tool result showed, and
    nothing of its first call, whose words every run shares (boilerplate, never a fact)."""
    from langchain_core.messages import (
        AIMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        messages_to_dict,
    )

    runs = []
    for i in range(6):
        filler = " ".join(f"line{i}x{k}" for k in range(600)) if i % 2 else ""
        call = {"name": "bash", "args": {"command": "grep -rn widget"}, "id": f"c{i}"}
        runs.append(
            messages_to_dict(
                [
                    SystemMessage("You are a coder."),
                    HumanMessage("Fix the bug."),
                    AIMessage("Looking.", tool_calls=[call]),
                    ToolMessage(
                        f"found alpha_{i}_fn in mod_{i}_beta.py {filler}", tool_call_id=f"c{i}"
                    ),
                    AIMessage(f"Editing mod_{i}_beta.py to rename alpha_{i}_fn."),
                ]
            )
        )
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps({"messages": m}) for m in runs))
    composition = benchmark("composition")
    density = composition.fact_density(composition.fact_walk(None, path))
    small, large = density["tool, up to 100 tokens"], density["tool, over 1,600 tokens"]
    assert density["ai, up to 100 tokens"] == 0.0  # its words are every run's
    assert small > 10 * large > 0  # the same two facts, in far more tokens
    assert list(density) == sorted(density, key=lambda k: (k.split(",")[0], "over" in k))


def test_composition_of_chats_at_session_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _locomo(tmp_path / "locomo.json", sessions=3, turns=8)
    args = ["--chats", "--data", str(path), "--budget", "1500", "--systems", "ours,middleware"]
    assert benchmark("composition").main(args) == 0
    out = capsys.readouterr().out
    ours, middleware = out.split("middleware at 1,500")
    # the package's overhead is counted apart; the middleware has none of it
    assert "tool schemas and priming" in ours and "verbatim turns (count)" in middleware
    totals = [
        float(line.split()[-1].replace(",", ""))
        for line in out.splitlines()
        if "total sent" in line
    ]
    assert len(totals) == 2 and all(0 < t <= 1_500 for t in totals)


def test_search_scaling_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    benchmark("search_scaling").main(["--sizes", "300", "--backends", "memory,sqlite"])
    out = capsys.readouterr().out
    assert "| memory | 300 |" in out and "| sqlite | 300 |" in out and "met" in out


def test_adversarial_runs_a_few_conversations(capsys: pytest.CaptureFixture[str]) -> None:
    assert benchmark("adversarial").main(["--examples", "2", "--steps", "3"]) == 0
    assert "no run died" in capsys.readouterr().out


# --- the benchmark's runner is the middleware as users run it ---------------------------------
def test_replay_bench_is_reproducible_and_its_summary_gets_no_names_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two runs of replay_bench on the same trajectory print the same figures (the
    package's offload ids, whose token counts vary, come from a fixed sequence), and
    its fixed summary names nothing the summarized messages lack, so the names check
    adds no note that would take the place of the summary."""
    from langchain_autocontext.summarizers import SummaryRequest

    bench = benchmark("replay_bench")
    args = ["--limit", "1", "--budgets", "8000", "--data", str(_data(MINI).parent)]

    def figures() -> list[list[str]]:
        assert bench.main(args) == 0
        rows = [line.split("|") for line in capsys.readouterr().out.splitlines()]
        return [row[:-4] + row[-2:] for row in rows if len(row) > 4]  # less the timings

    first = figures()
    assert any(row[1].strip() == "8,000" for row in first)
    assert figures() == first
    (trajectory,) = bench.load_trajectories(MINI, limit=1)
    request = SummaryRequest(trajectory.messages[:6], "tool_run", max_tokens=400)
    summary = bench.fake_summarizer().summarize(request).text
    assert "[Not in the summarized messages" not in summary
    assert summary.startswith(bench.SUMMARY_150_WORDS[:100])


def _as_sent(message) -> tuple:
    """What the provider receives of a message (its id aside: LangChain and the recorded
    data name the system message differently)."""
    calls = [(c["name"], c["args"], c["id"]) for c in getattr(message, "tool_calls", [])]
    return (message.type, message.content, calls, getattr(message, "tool_call_id", None))


class _AnyArgs(BaseModel):
    model_config = ConfigDict(extra="allow")
    tool_call_id: Annotated[str, InjectedToolCallId]


class _RecordedTool(BaseTool):
    """A tool of a recorded run: answers each call with the run's next recorded result
    (in order: a run may reuse a call id)."""

    args_schema: type[BaseModel] = _AnyArgs
    results: Any = None  # one list for all the run's tools (not copied, as a list field is)

    def _run(self, tool_call_id: str, **kwargs: Any) -> Any:
        if not self.results:
            return ToolMessage("done", tool_call_id=tool_call_id)
        result = self.results.pop(0)
        assert result.tool_call_id == tool_call_id
        return result


def _recorded_tools(run: Any) -> list[BaseTool]:
    """The run's tools, sharing one queue of its recorded results."""
    results = [m for m in run.messages if isinstance(m, ToolMessage)]
    names = sorted({c["name"] for m in run.messages for c in getattr(m, "tool_calls", [])})
    return [
        _RecordedTool(name=name, description=f"The recorded {name}.", results=results)
        for name in names
    ]


def _runner_sends(cp: ModuleType, run: Any, budget: int, tools: list, counter: Any) -> list:
    """What the benchmark's runner sends on each call, as ``replay_one`` drives it."""
    runner = cp.OursRunner(budget, counter, cp.CountingSummarizer(counter=counter), tools=tools)
    sends = []
    with runner.ids():
        runner.start(run.messages[0])
        cursor = 0
        for point in cp._call_points(run.messages):
            sent = runner.measure(runner.step(list(run.messages[cursor:point])))
            cursor = point
            sends.append(
                (
                    [_as_sent(m) for m in sent.messages],
                    sorted(t.name for t in sent.tools),
                    sent.total,
                )
            )
    assert runner.compactions > 0
    return sends


def _graph_gets(
    cp: ModuleType, run: Any, budget: int, tools: list, counter: Any, mode: str = "invoke"
) -> list:
    """What the model of a ``create_agent`` graph with the middleware gets on each call:
    a model replaying the recorded replies, each user turn of the run one ``invoke``."""
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    from langchain_autocontext import AutoContext, AutoContextConfig
    from langchain_autocontext.messages import seeded_ids
    from langchain_autocontext.store import OffloadStore

    replies = [m for m in run.messages if isinstance(m, AIMessage)]
    model = FunctionModel(
        respond=lambda messages, n: replies[n] if n < len(replies) else AIMessage("done")
    )
    ac = AutoContext(
        AutoContextConfig(max_tokens=budget),
        summarizer=cp.CountingSummarizer(counter=counter),
        store=OffloadStore(InMemoryStore()),
        token_counter=counter,
    )
    agent = create_agent(
        model,
        tools=tools,
        system_prompt=run.messages[0].text,
        middleware=[ac.middleware()],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 1_000}
    users = [m for m in run.messages if isinstance(m, HumanMessage)]

    async def ainvoke_all() -> None:
        for user in users:
            await agent.ainvoke({"messages": [user]}, config)

    with seeded_ids(cp.IDS_SEED):
        if mode == "ainvoke":
            asyncio.run(ainvoke_all())
        else:
            for user in users:
                agent.invoke({"messages": [user]}, config)
    return list(zip(model.seen, model.tools_seen, strict=True))


def _tau_run(run_id: str) -> Any:
    from langchain_autocontext.replay import load_trajectories

    return next(t for t in load_trajectories(_data(TAU)) if t.id == run_id)


@pytest.mark.parametrize(
    ("source", "budget", "mode"),
    [
        ("coding sample", 8_000, "invoke"),
        ("coding sample", 8_000, "ainvoke"),
        ("coding sample", 32_000, "invoke"),
        ("tau-bench airline-2#2", 4_000, "ainvoke"),
    ],
)
def test_the_runner_sends_what_a_create_agent_graph_sends(
    cp: ModuleType, source: str, budget: int, mode: str
) -> None:
    """``compare_peers``' figures are those of a real ``create_agent`` graph with the
    middleware: a model replaying a recorded run's replies, with tools answering the
    recorded results, is sent exactly what the benchmark's runner sends (messages, tool
    schemas, token count) on every call, through compactions: the bundled coding run
    (60 calls, at 32k with the metadata tags too) and a customer-service run whose
    user turns each start an ``invoke``; the async path (``ainvoke``) sends the same."""
    from langchain_autocontext.replay import load_trajectories, sample_path
    from langchain_autocontext.tokens import default_counter

    run = (
        load_trajectories(sample_path())[0]
        if source == "coding sample"
        else _tau_run("airline-2#2")
    )
    counter = default_counter()
    tools = _recorded_tools(run)
    expected = _runner_sends(cp, run, budget, tools, counter)
    calls = _graph_gets(cp, run, budget, tools, counter, mode)
    # the recorded calls (and one more when the run ends on a tool result)
    assert len(expected) <= len(calls) <= len(expected) + 1
    for k, ((messages, names, total), (got, got_tools)) in enumerate(
        zip(expected, calls, strict=False)
    ):
        assert [_as_sent(m) for m in got] == messages, f"call {k}"
        assert sorted(t.name for t in got_tools) == names, f"call {k}"
        assert counter.count(got, got_tools) == total, f"call {k}"


def test_engine_memory_reports_what_engine_py_holds(capsys) -> None:
    """The engine's per-thread memo of a long thread (benchmarks/engine_memory.py): a
    row per turn count, and a memo that is not the thread's whole data."""
    module = benchmark("engine_memory")
    size, history = module.engine_bytes(40)
    assert history == 81 and size > 0
    assert module.main(["--turns", "10"]) == 0
    assert "| 10 | 21 |" in capsys.readouterr().out
