"""The ``autocontext`` command line: ``autocontext replay [FILE]``.

Replays recorded agent trajectories through the context manager, call by call,
and reports what the model would have been sent (see :mod:`langchain_autocontext.replay`).
Every :class:`~langchain_autocontext.AutoContextConfig` field is an option,
generated from the pydantic model. Exit status: 0 when every call fit the budget
and every original is recoverable, 1 when the replay found a problem, 2 for bad
input (a missing or unreadable file, an unknown format, an impossible budget, a
bad option), 130 when interrupted.

Over 600 lines because besides the parser it checks every input up front (one-line
errors, exit status 2), generates an option per configuration field, and renders the
report: rich tables with a plain-text fallback and a progress bar.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
import types
import typing
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from langchain_autocontext.config import AutoContextConfig
from langchain_autocontext.errors import AutoContextError
from langchain_autocontext.facade import AutoContext
from langchain_autocontext.replay import (
    DEFAULT_SEED,
    PLOT_FORMATS,
    STRATEGY_LABELS,
    CallRecord,
    ReplayReport,
    Trajectory,
    count_calls,
    load_trajectories,
    merge_reports,
    plot_reports,
    replay,
    sample_path,
)
from langchain_autocontext.store import OffloadStore

__all__ = ["DEFAULT_MAX_TOKENS", "DEFAULT_PLOT", "build_parser", "main"]

#: The replay's default budget. The library's default (131,072 tokens) is far above
#: the bundled sample, a coding-agent run that would reach about 20,000 tokens
#: unmanaged: at 16,000 the replay shows the manager at work. Pass
#: ``--max-tokens`` with your model's window to replay your own logs.
DEFAULT_MAX_TOKENS = 16_000
#: Where the plot goes unless ``--plot FILE`` or ``--no-plot`` is given: a file of
#: this name in the current working directory (``.gitignore`` lists it).
DEFAULT_PLOT = "autocontext-replay.png"

_CLI_DEFAULTS: dict[str, Any] = {"max_tokens": DEFAULT_MAX_TOKENS}
_ALIASES: dict[str, list[str]] = {"max_tokens": ["--budget"]}


class CliError(Exception):
    """A problem with the user's input: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# --- options generated from AutoContextConfig --------------------------------------------
def _int(text: str) -> int:
    try:
        return int(text.replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse``, with ``none`` (any case) for an optional field's default, ``None``."""

    def parse_or_none(text: str) -> Any:
        return None if text.strip().casefold() == "none" else parse(text)

    return parse_or_none


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _unwrap(annotation: Any) -> Any:
    """``X | None`` → ``X``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "(none)"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}".replace(",", "_")
    return str(value)


def config_options() -> list[tuple[str, list[str]]]:
    """(field name, option strings) for every :class:`AutoContextConfig` field."""
    return [
        (name, [f"--{name.replace('_', '-')}", *_ALIASES.get(name, [])])
        for name in AutoContextConfig.model_fields
    ]


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "configuration (every AutoContextConfig field; see docs/configuration.md)"
    )
    for name, flags in config_options():
        info = AutoContextConfig.model_fields[name]
        annotation = _unwrap(info.annotation)
        default = _CLI_DEFAULTS.get(name, info.default)
        note = ""
        if name in _CLI_DEFAULTS:
            note = f"; the library default is {_show(info.default)}"
        # a default of None is decided by others (the description says how)
        shown = "" if default is None else f" (default: {_show(default)}{note})"
        help_text = f"{info.description}{shown}".replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": help_text}
        if annotation is bool:
            group.add_argument(*flags, action=argparse.BooleanOptionalAction, **kwargs)
            continue
        if annotation in (int, float):
            number: Callable[[str], Any] = _int if annotation is int else _float
            if annotation is not info.annotation and info.default is None:
                number = _or_none(number)  # "None" in the description: the default
            kwargs.update(type=number, metavar="N" if annotation is int else "X")
        elif typing.get_origin(annotation) is tuple:
            kwargs.update(type=_names, metavar="A,B,…")
        elif typing.get_origin(annotation) is typing.Literal:
            kwargs.update(type=str, choices=list(typing.get_args(annotation)))
        else:
            kwargs.update(type=str, metavar="TEXT")
        group.add_argument(*flags, **kwargs)


def config_from_args(args: argparse.Namespace) -> AutoContextConfig:
    """The :class:`AutoContextConfig` the options describe (CLI defaults applied)."""
    values = dict(_CLI_DEFAULTS)
    for name in AutoContextConfig.model_fields:
        value = getattr(args, name, None)
        if value is not None:
            values[name] = value
    return AutoContextConfig(**values)


# --- the parser ----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The ``autocontext`` argument parser (sub-command ``replay``)."""
    from langchain_autocontext import __version__

    parser = _Parser(
        prog="autocontext",
        description="langchain-autocontext: keep LangChain/LangGraph agents inside a fixed "
        "context window, losing nothing.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    rp = sub.add_parser(
        "replay",
        help="replay recorded agent trajectories through the context manager",
        description="Stream recorded agent trajectories through the context manager, call by "
        "call, as the agent would have called its model, and report what the model would have "
        "been sent: context tokens per call, compression events by strategy, summarizer calls "
        "and tokens, the prompt-cache-friendly prefix share, and whether every original "
        "message is recoverable. Runs offline.",
        epilog="Formats: OpenAI chat messages (role/content/tool_calls/tool_call_id), OpenAI "
        "Responses API items, Anthropic Messages API turns or LangChain message dumps "
        "(messages_to_dict), as a JSON list of messages, a JSON "
        'object {"messages": [...]}, a JSON list of such objects, or JSONL with one '
        "trajectory (or one message) per line; a message of role 'exit' (mini-swe-agent) ends "
        "a run. Exit status: 0 all good, 1 the replay found a problem (a call over budget, an "
        "invalid sequence, an unrecoverable original), 2 bad input.",
    )
    rp.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="trajectory file (JSON or JSONL, may be gzip-compressed; - reads standard "
        "input); default: the real coding-agent trajectory bundled with the package",
    )
    rp.add_argument(
        "--summarizer",
        default="offline",
        metavar="SPEC",
        help="'offline' (default: the deterministic extractive summarizer, no API key) or a "
        "'provider:model' string for init_chat_model, e.g. 'openai:gpt-4o-mini' (needs the "
        "provider's package and key)",
    )
    rp.add_argument(
        "--store",
        default="memory",
        metavar="STORE",
        help="'memory' (default) or the path of a SQLite file that keeps the history, offloads "
        "and events afterwards (needs langgraph-checkpoint-sqlite, the 'sqlite' extra); a file "
        "that already holds data of a replayed trajectory is refused unless --append is given",
    )
    rp.add_argument(
        "--append",
        action="store_true",
        help="with a SQLite --store that already holds data of a replayed trajectory: replay "
        "into it anyway, adding a second copy of that trajectory's events and offloads (its ids "
        "drawn with a seed derived from --seed, which the report names)",
    )
    rp.add_argument(
        "--token-counter",
        default=None,
        metavar="NAME",
        help="tiktoken encoding or model name to count with (default: cl100k_base)",
    )
    plot = rp.add_mutually_exclusive_group()
    plot.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="write the plot of context tokens per call here, as PNG, SVG or PDF after the "
        f"file's suffix (default: {DEFAULT_PLOT} in the current directory)",
    )
    plot.add_argument("--no-plot", action="store_true", help="do not write a plot")
    rp.add_argument(
        "--json", metavar="FILE", help="also write the full report (every call) as JSON"
    )
    rp.add_argument(
        "--compare",
        action="store_true",
        help="also count what an agent without context management would have sent",
    )
    rp.add_argument("--limit", type=_int, metavar="N", help="replay only the first N trajectories")
    rp.add_argument(
        "--seed",
        type=_int,
        default=DEFAULT_SEED,
        metavar="N",
        help="seed of the package's own ids (offload ids, ids of the messages it writes), "
        "shown in the context: the same seed gives the same report for the same input; "
        f"another shows how much a figure owes to where they fall (default: {DEFAULT_SEED})",
    )
    rp.add_argument(
        "--no-progress", action="store_true", help="no progress bar or progress lines on stderr"
    )
    _add_config_options(rp)
    return parser


# --- running -------------------------------------------------------------------------------
@dataclass
class _Setup:
    config: AutoContextConfig
    summarizer: Any
    counter: Any
    source: str
    trajectories: list[Trajectory]
    plot: Path | None
    json_path: Path | None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _output_path(value: str, what: str) -> Path:
    path = Path(value).expanduser()
    if path.is_dir():
        raise CliError(f"{what} {value}: is a directory")
    if not path.parent.is_dir():
        raise CliError(f"{what} {value}: the directory {path.parent} does not exist")
    return path


#: How every ``--json`` report begins (:func:`_write_json`): a file that does not is not
#: overwritten.
_REPORT_HEAD = '{\n  "tool": "autocontext replay"'


def _report_path(value: str) -> Path:
    """The ``--json`` path, refused when it names an existing file that is neither empty
    nor an earlier report (the trajectory file, say): ``--json runs.json`` read as "my file is JSON" would
    otherwise replay the bundled sample and write its report over the user's log."""
    path = _output_path(value, "--json")
    if not path.is_file():  # a new file, or no regular file (/dev/stdout, a pipe)
        return path
    try:
        with path.open("rb") as f:
            head = f.read(len(_REPORT_HEAD.encode()))
    except OSError as exc:
        raise CliError(f"--json {value}: cannot read ({exc.strerror or exc})") from None
    if head and head != _REPORT_HEAD.encode():  # an empty file (mktemp) holds nothing
        raise CliError(
            f"--json {value}: the file exists and is not an autocontext replay report; "
            "refusing to overwrite it (the trajectory file is the positional FILE; --json "
            "names where the report goes)"
        )
    return path


def _setup(args: argparse.Namespace) -> _Setup:
    from langchain_autocontext.summarizers import LLMSummarizer, resolve_summarizer
    from langchain_autocontext.tokens import resolve_counter

    try:
        config = config_from_args(args)
    except AutoContextError as exc:  # InvalidConfigError names the field
        raise CliError(_one_line(exc)) from None
    if args.limit is not None and args.limit < 1:
        raise CliError(f"--limit must be at least 1, got {args.limit}")
    plot: Path | None = None
    if not args.no_plot:
        explicit = args.plot is not None
        plot = _output_path(args.plot if explicit else DEFAULT_PLOT, "--plot")
        if plot.suffix.lower() not in PLOT_FORMATS:
            raise CliError(
                f"--plot {args.plot}: the plot is written as PNG, SVG or PDF; name the file "
                f"{', '.join(PLOT_FORMATS)}"
            )
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            if explicit:
                raise CliError(
                    'the plot needs matplotlib: pip install "langchain-autocontext[replay]"'
                ) from None
            print(
                "autocontext: note: no plot (matplotlib is not installed: "
                'pip install "langchain-autocontext[replay]")',
                file=sys.stderr,
            )
            plot = None
    json_path = _report_path(args.json) if args.json else None
    try:
        summarizer = resolve_summarizer(
            args.summarizer,
            retries=config.summarizer_retries,
            timeout=config.summarizer_timeout,
            concurrency=config.summarizer_concurrency,
        )
        if isinstance(summarizer, LLMSummarizer):
            _ = summarizer.model  # resolve "provider:model" now: a bad spec fails up front
    except Exception as exc:
        raise CliError(f"--summarizer {args.summarizer}: {_one_line(exc)}") from None
    try:
        counter = resolve_counter(args.token_counter)
    except Exception as exc:
        raise CliError(f"--token-counter {args.token_counter}: {_one_line(exc)}") from None
    if not _in_memory(args.store):
        _sqlite_store(args.store)  # a missing extra or a bad path fails before the loading
    file = Path(args.file) if args.file else sample_path()
    try:
        trajectories = load_trajectories(file, limit=args.limit)
    except (AutoContextError, ValueError, TypeError) as exc:
        raise CliError(_one_line(exc)) from None
    source = str(args.file) if args.file else f"the bundled sample ({file.name})"
    return _Setup(config, summarizer, counter, source, trajectories, plot, json_path)


def _in_memory(spec: str) -> bool:
    return spec.strip().lower() in ("memory", "inmemory", ":memory:")


def _sqlite_store(spec: str) -> tuple[Callable[[sqlite3.Connection], Any], Path]:
    """``(SqliteStore, path)`` of a ``--store`` file, checked without opening it: the
    setup checks it before loading the trajectories (a big file takes a while)."""
    try:
        from langgraph.store.sqlite import SqliteStore
    except ImportError:
        raise CliError(
            f"--store {spec}: a SQLite store needs langgraph-checkpoint-sqlite "
            '(pip install "langchain-autocontext[sqlite]")'
        ) from None
    path = Path(spec).expanduser()
    if path.is_dir() or not path.parent.is_dir():
        raise CliError(f"--store {spec}: not a file path in an existing directory")
    return SqliteStore, path


@contextmanager
def _open_store(spec: str) -> Iterator[Callable[[], BaseStore]]:
    """A factory of the store each trajectory replays into."""
    if _in_memory(spec):
        yield InMemoryStore
        return
    sqlite_store, path = _sqlite_store(spec)
    try:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        store = sqlite_store(conn)
        store.setup()
    except sqlite3.Error as exc:
        raise CliError(f"--store {spec}: not a usable SQLite file ({exc})") from None
    try:
        yield lambda: store
    finally:
        conn.close()


class _Progress:
    """A rich progress bar on a terminal; one plain line per trajectory otherwise."""

    def __init__(self, total_calls: int, trajectories: int, enabled: bool) -> None:
        self.trajectories = trajectories
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.total = total_calls
        self.done = 0
        if enabled and sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                )
            except ImportError:
                return
            self.bar = Progress(
                TextColumn("[bold]replay[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("calls"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )

    def __enter__(self) -> _Progress:
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task("", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def start(self, k: int, trajectory: Trajectory, calls: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=f"{trajectory.id} ({k}/{self.trajectories})")
        elif self.enabled:
            print(
                f"replaying {trajectory.id} ({k}/{self.trajectories}): {calls} model calls",
                file=sys.stderr,
                flush=True,
            )

    def call(self, _record: CallRecord) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)


def _check_unused(args: argparse.Namespace, setup: _Setup, backend: BaseStore) -> None:
    """Refuse a persistent store that already holds data of a replayed thread.

    Each trajectory replays into the thread named by its id: replaying it again into
    the same file would add a second copy of its events and offloads (the history
    keeps one entry per message id), and the file's counts would no longer be one
    run's. ``--append`` replays into it anyway.
    """
    store = OffloadStore.wrap(backend, prefix=setup.config.store_prefix)
    used = [
        t.id for t in setup.trajectories if backend.search(store.thread_namespace(t.id), limit=1)
    ]
    if used:
        raise CliError(
            f"--store {args.store}: already holds replay data of "
            f"{'this trajectory' if len(used) == 1 else f'{len(used)} of these trajectories'}"
            f" (first: {used[0]}); replaying again "
            "would add a second copy of their events and offloads: pass --append to do so, "
            "or use another file"
        )


def _append_seed(seed: int, store: OffloadStore, thread: str) -> int | None:
    """The seed of an ``--append`` replay into ``thread``: ``None`` when the thread holds
    nothing yet (``seed`` itself), else one derived from ``seed`` and what the thread
    holds. The same seed would draw the earlier run's ids again, and an offload never
    takes an id already taken, so every id after the first taken one would shift: the
    figures would be those of no seed (no fresh store gives them). A derived seed draws
    ids no earlier run took, and the report names it."""
    held = len(store.list_offloads(thread)) + len(store.list_events(thread))
    if not held:
        return None
    digest = hashlib.sha256(f"autocontext-append:{seed}:{thread}:{held}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def _run(args: argparse.Namespace, setup: _Setup) -> list[ReplayReport]:
    reports: list[ReplayReport] = []
    calls = [count_calls(t) for t in setup.trajectories]
    with ExitStack() as stack:
        new_store = stack.enter_context(_open_store(args.store))
        if not (args.append or _in_memory(args.store)):
            _check_unused(args, setup, new_store())
        progress = stack.enter_context(
            _Progress(sum(calls), len(setup.trajectories), not args.no_progress)
        )
        for k, (trajectory, n) in enumerate(zip(setup.trajectories, calls, strict=True), 1):
            progress.start(k, trajectory, n)
            store = OffloadStore.wrap(new_store(), prefix=setup.config.store_prefix)
            derived = _append_seed(args.seed, store, trajectory.id) if args.append else None
            seed = args.seed if derived is None else derived
            try:
                ac = AutoContext(
                    setup.config, setup.summarizer, store=store, token_counter=setup.counter
                )
                report = replay(
                    trajectory,
                    ac,
                    on_call=progress.call,
                    compare=args.compare,
                    seed=seed,
                )
                if derived is not None:
                    report.notes.append(
                        f"its thread already held a replay: its ids were drawn with seed {seed} "
                        f"(derived from --seed {args.seed}; a fresh store gives the same figures "
                        f"with --seed {seed})"
                    )
            except AutoContextError as exc:  # ContextBudgetError: an impossible budget
                # this trajectory fails; the others still replay (the report says why)
                report = ReplayReport.failure(
                    trajectory,
                    setup.config.max_tokens,
                    _one_line(exc),
                    str(getattr(setup.summarizer, "name", type(setup.summarizer).__name__)),
                )
                report.seed = seed  # the seed its ids would have been drawn with
            except (ValueError, TypeError) as exc:  # a message the store or view cannot take
                raise CliError(f"{trajectory.id}: cannot replay ({_one_line(exc)})") from None
            reports.append(report)
    if all(r.failed for r in reports):  # nothing replayed: bad input, as before
        raise CliError(f"{reports[0].trajectory_id}: {reports[0].error}")
    return reports


# --- the report ----------------------------------------------------------------------------
def _pct(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "n/a"


def _span(low: int, high: int) -> str:
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def _limits(rep: ReplayReport) -> str:
    """Where compression starts / stops: a range over the trajectories of a total."""
    if rep.trigger_range is None or rep.target_range is None:
        return f"{rep.trigger_tokens:,} / {rep.target_tokens:,}"
    return f"{_span(*rep.trigger_range)} / {_span(*rep.target_range)}"


def _rows(rep: ReplayReport) -> list[tuple[str, str, str]]:
    """(metric, managed, unmanaged) rows of one report."""
    c = rep.compared
    rows = [
        ("messages replayed", f"{rep.messages:,}", ""),
        ("model calls", f"{len(rep.calls):,}", ""),
        ("budget (max_tokens)", f"{rep.max_tokens:,}", ""),
        ("  compress above / down to", _limits(rep), ""),
        ("largest context", f"{rep.largest:,}", f"{rep.unmanaged_largest:,}" if c else ""),
        (
            "calls over budget",
            f"{rep.over_budget:,}",
            f"{rep.unmanaged_over_budget:,}" if c else "",
        ),
        (
            "tokens sent (all calls)",
            f"{rep.tokens_sent:,}",
            f"{rep.unmanaged_tokens_sent:,}" if c else "",
        ),
        ("prefix share (prompt cache)", _pct(rep.prefix_tokens, rep.tokens_sent), ""),
        (
            "compression events",
            f"{len(rep.events):,} (before {rep.compressions:,} of the calls)",
            "0" if c else "",
        ),
    ]
    for name, n in rep.strategy_counts.items():
        rows.append((f"  {STRATEGY_LABELS.get(name, name)}", f"{n:,}", ""))
    rows += [
        ("offloads (reloadable)", f"{rep.offloads:,} ({rep.offloads_reloadable:,})", ""),
        ("summarizer", rep.summarizer, ""),
        ("  LLM calls", f"{rep.summarizer_calls:,}", ""),
        (
            "  tokens in / out",
            f"{rep.summarizer_input_tokens:,} / {rep.summarizer_output_tokens:,}",
            "",
        ),
    ]
    if rep.summarizer_fallbacks:
        rows.append(("  offline fallbacks", f"{rep.summarizer_fallbacks:,}", ""))
    rows += [
        (
            "recoverable originals",
            f"{rep.recoverable:,} of {rep.originals:,} seen ({_pct(rep.recoverable, rep.originals)})",
            "",
        ),
        ("invalid sequences", f"{rep.invalid:,}", ""),
    ]
    if rep.failed:
        rows.append(("failed", rep.error, ""))
    if rep.notes:
        rows.append(("notes (on standard error)", f"{len(rep.notes):,}", ""))
    return rows


def _overview(reports: Sequence[ReplayReport], compare: bool) -> tuple[list[str], list[list[str]]]:
    """Head and rows of the one-row-per-trajectory table."""
    head = ["trajectory", "calls", "largest", "over budget", "tokens sent", "prefix", "events"]
    head += ["recoverable"]
    if compare:
        head += ["largest unmanaged", "over unmanaged"]
    rows = []
    for r in reports:
        row = [
            r.trajectory_id + (" (failed)" if r.failed else ""),
            f"{len(r.calls):,}",
            f"{r.largest:,}",
            f"{r.over_budget:,}",
            f"{r.tokens_sent:,}",
            _pct(r.prefix_tokens, r.tokens_sent),
            f"{len(r.events):,}",
            f"{r.recoverable:,}/{r.originals:,}",
        ]
        if compare:
            row += [f"{r.unmanaged_largest:,}", f"{r.unmanaged_over_budget:,}"]
        rows.append(row)
    return head, rows


def _plain_table(
    title: str, head: Sequence[str], rows: Sequence[Sequence[str]], out: IO[str]
) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
    print(title, file=out)
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=False))
    print(line.rstrip(), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for row in rows:
        cells = [
            str(x).ljust(w) if i == 0 else str(x).rjust(w)
            for i, (x, w) in enumerate(zip(row, widths, strict=False))
        ]
        print("  ".join(cells).rstrip(), file=out)
    print(file=out)


def _table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]], out: IO[str]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        _plain_table(title, head, rows, out)
        return
    table = Table(title=title, title_justify="left", title_style="bold")
    for i, h in enumerate(head):
        table.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    # A terminal wraps at its width; a pipe or file gets the table at its natural width.
    width = None if out.isatty() else 200
    Console(file=out, width=width, highlight=False, soft_wrap=False).print(table)


def _print_report(setup: _Setup, args: argparse.Namespace, reports: list[ReplayReport]) -> None:
    out = sys.stdout
    cfg = setup.config
    print(
        f"autocontext replay: {setup.source}: {len(reports)} "
        f"trajector{'y' if len(reports) == 1 else 'ies'}, max_tokens={cfg.max_tokens:,}, "
        f"summarizer {reports[0].summarizer if reports else setup.summarizer}, "
        f"store {args.store}",
        file=out,
    )
    print(file=out)
    head = ["metric", "managed", "unmanaged"] if args.compare else ["metric", "managed"]
    width = len(head)
    if len(reports) > 1:
        _table(
            "Per trajectory",
            *_overview(reports, args.compare),
            out,
        )
        total = merge_reports(reports)
        _table(
            f"Total over {len(reports)} trajectories",
            head,
            [row[:width] for row in _rows(total)],
            out,
        )
    else:
        rep = reports[0]
        _table(f"Replay of {rep.trajectory_id}", head, [row[:width] for row in _rows(rep)], out)


def _write_json(
    path: Path, setup: _Setup, args: argparse.Namespace, reports: list[ReplayReport]
) -> None:
    from langchain_autocontext import __version__

    doc = {
        "tool": "autocontext replay",
        "version": __version__,
        "source": setup.source,
        "config": setup.config.model_dump(mode="json"),
        "store": args.store,
        "compare": bool(args.compare),
        "seed": args.seed,
        "total": merge_reports(reports).summary(),
        "trajectories": [r.to_dict() for r in reports],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")  # _REPORT_HEAD


def _replay_command(args: argparse.Namespace) -> int:
    setup = _setup(args)
    reports = _run(args, setup)
    _print_report(setup, args, reports)
    if setup.plot is not None:
        import matplotlib

        matplotlib.use("Agg")  # headless: no display needed, whatever the environment
        try:
            plot_reports(reports, setup.plot)
        except OSError as exc:
            raise CliError(f"--plot {setup.plot}: cannot write ({exc.strerror or exc})") from None
        print(f"plot: {setup.plot}")
    if setup.json_path is not None:
        try:
            _write_json(setup.json_path, setup, args, reports)
        except OSError as exc:
            raise CliError(
                f"--json {setup.json_path}: cannot write ({exc.strerror or exc})"
            ) from None
        print(f"json: {setup.json_path}")
    for r in reports:
        for note in r.notes:
            print(f"autocontext replay: note: {r.trajectory_id}: {note}", file=sys.stderr)
        if r.failed:
            print(
                f"autocontext replay: problem: {r.trajectory_id} failed: {r.error}",
                file=sys.stderr,
            )
    bad = [r for r in reports if not r.ok]
    if bad:
        print(
            f"autocontext replay: problem: {len(bad)} trajector{'y' if len(bad) == 1 else 'ies'} "
            "failed or with a call over budget, an invalid sequence or an unrecoverable "
            f"original (first: {bad[0].trajectory_id})",
            file=sys.stderr,
        )
        return 1
    return 0


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: IO[str] | None = None,
    line: str | None = None,
) -> None:
    print(f"autocontext: warning: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``autocontext`` command; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else 0
    with warnings.catch_warnings():
        warnings.simplefilter("once")
        warnings.showwarning = _show_warning
        try:
            if args.command == "replay":
                return _replay_command(args)
        except CliError as exc:
            print(f"autocontext {args.command}: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"autocontext {args.command}: interrupted", file=sys.stderr)
            return 130
    parser.print_usage(sys.stderr)  # pragma: no cover - argparse requires a command
    return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
