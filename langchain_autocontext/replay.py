"""Replay recorded agent trajectories through the manager, call by call.

Used by the ``autocontext replay`` CLI and the benchmarks: load OpenAI chat JSON /
JSONL or LangChain message dumps, stream each trajectory through
:meth:`AutoContext.compress` as the agent would have called its model, and report
what the model would have been sent.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages

from langchain_autocontext.errors import AutoContextError
from langchain_autocontext.messages import find_violations, load_message

__all__ = [
    "CallRecord",
    "ReplayFormatError",
    "ReplayReport",
    "Trajectory",
    "load_trajectories",
    "parse_trajectory",
    "replay",
]

_ROLES = {"system", "user", "assistant", "tool", "human", "ai", "developer", "function"}
_END_ROLES = {"exit"}  # mini-swe-agent's final submission: the end of the run, not a chat role


class ReplayFormatError(AutoContextError, ValueError):
    """The file is not a trajectory format the replay understands."""


@dataclass
class Trajectory:
    """One recorded agent run, as LangChain messages with stable ids."""

    id: str
    messages: list[BaseMessage]


def _convert_one(raw: Any, where: str) -> BaseMessage | None:
    if not isinstance(raw, dict):
        raise ReplayFormatError(
            f"{where}: a message must be a JSON object, got {type(raw).__name__}"
        )
    if "type" in raw and "data" in raw:  # LangChain messages_to_dict format
        try:
            return load_message(raw)
        except Exception as exc:
            raise ReplayFormatError(f"{where}: not a LangChain message dump ({exc})") from None
    role = raw.get("role")
    if role in _END_ROLES:
        return None
    if role not in _ROLES:
        raise ReplayFormatError(
            f"{where}: unknown message role {role!r} (expected OpenAI chat roles "
            "system/user/assistant/tool, or LangChain dumps with 'type' and 'data')"
        )
    data = dict(raw)
    if role == "developer":
        data["role"] = "system"
    if data.get("content") is None:
        data["content"] = ""
    try:
        return convert_to_messages([data])[0]
    except Exception as exc:
        raise ReplayFormatError(f"{where}: cannot read message ({exc})") from None


def parse_trajectory(raw_messages: Sequence[Any], traj_id: str) -> Trajectory:
    """Convert raw messages; each gets the id ``{traj_id}-{index}`` unless it has one."""
    out: list[BaseMessage] = []
    for i, raw in enumerate(raw_messages):
        msg = _convert_one(raw, f"{traj_id} message {i}")
        if msg is None:
            break
        if not msg.id:
            msg = msg.model_copy(update={"id": f"{traj_id}-{i}"})
        out.append(msg)
    if not out:
        raise ReplayFormatError(f"{traj_id}: the trajectory has no messages")
    return Trajectory(traj_id, out)


def _is_message(obj: Any) -> bool:
    return isinstance(obj, dict) and ("role" in obj or ("type" in obj and "data" in obj))


def _from_obj(obj: Any, name: str, index: int) -> Trajectory:
    if isinstance(obj, dict) and isinstance(obj.get("messages"), list):
        return parse_trajectory(obj["messages"], str(obj.get("id") or f"{name}-{index}"))
    if isinstance(obj, list) and all(_is_message(m) for m in obj):
        return parse_trajectory(obj, f"{name}-{index}")
    raise ReplayFormatError(
        f"{name}: entry {index} is neither a list of messages nor an object with 'messages'"
    )


def load_trajectories(path: str | Path, *, limit: int | None = None) -> list[Trajectory]:
    """Read a JSON or JSONL file of one or many trajectories.

    Accepted shapes: a JSON list of messages; a JSON object ``{"messages": […]}``;
    a JSON list of such objects (or of message lists); JSONL with one such object
    (or message list) per line; JSONL with one message per line (one trajectory).
    Messages are OpenAI chat dicts or LangChain ``messages_to_dict`` dumps.
    """
    p = Path(path)
    if not p.is_file():
        raise ReplayFormatError(f"{p}: no such file")
    name = p.stem
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ReplayFormatError(f"{p}: not a UTF-8 text file") from None
    if not text.strip():
        raise ReplayFormatError(f"{p}: the file is empty")
    objs: list[Any]
    try:
        whole = json.loads(text)
        if isinstance(whole, list) and whole and all(_is_message(m) for m in whole):
            objs = [whole]
        elif isinstance(whole, list):
            objs = whole
        else:
            objs = [whole]
    except json.JSONDecodeError:
        objs = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                objs.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ReplayFormatError(f"{p}: line {n} is not JSON ({exc.msg})") from None
        if objs and all(_is_message(o) for o in objs):
            objs = [objs]
    trajectories = []
    for i, obj in enumerate(objs):
        if limit is not None and len(trajectories) >= limit:
            break
        trajectories.append(_from_obj(obj, name, i))
    if not trajectories:
        raise ReplayFormatError(f"{p}: no trajectories found")
    return trajectories


# --- replay ---------------------------------------------------------------------------
@dataclass
class CallRecord:
    """One model call of a replay."""

    index: int
    tokens: int
    messages: int
    overhead_s: float
    prefix_tokens: int
    over_budget: bool
    violations: list[str]
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ReplayReport:
    """Everything measured while replaying one trajectory."""

    trajectory_id: str
    max_tokens: int
    calls: list[CallRecord]
    originals: int
    recoverable: int
    unmanaged_tokens: list[int] = field(default_factory=list)

    @property
    def largest(self) -> int:
        return max((c.tokens for c in self.calls), default=0)

    @property
    def over_budget(self) -> int:
        return sum(c.over_budget for c in self.calls)

    @property
    def invalid(self) -> int:
        return sum(bool(c.violations) for c in self.calls)

    @property
    def tokens_sent(self) -> int:
        return sum(c.tokens for c in self.calls)

    @property
    def prefix_tokens(self) -> int:
        return sum(c.prefix_tokens for c in self.calls)

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e for c in self.calls for e in c.events]

    @property
    def summarizer_calls(self) -> int:
        return sum(int(e.get("summarizer_calls", 0)) for e in self.events)

    @property
    def summarizer_input_tokens(self) -> int:
        return sum(int(e.get("summarizer_input_tokens", 0)) for e in self.events)

    @property
    def overheads(self) -> list[float]:
        return [c.overhead_s for c in self.calls]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest-rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _call_points(messages: Sequence[BaseMessage]) -> list[int]:
    """Indices of the assistant messages: the model was called right before each."""
    return [i for i, m in enumerate(messages) if isinstance(m, AIMessage)]


def replay(
    trajectory: Trajectory,
    ac: Any,
    *,
    thread_id: str | None = None,
    store: Any = None,
    on_call: Callable[[CallRecord], None] | None = None,
    compare: bool = False,
) -> ReplayReport:
    """Stream ``trajectory`` through ``ac`` (an :class:`AutoContext`) call by call.

    Before each recorded assistant message the agent would have called its model
    with its working messages: those are compressed with ``ac.compress`` exactly as
    a pre-model hook would, the compressed list becomes the new working state, and
    the recorded assistant message (and what follows it) is appended. ``compare``
    also counts what an unmanaged agent would have sent.
    """
    thread = thread_id or trajectory.id
    st = ac.resolve_store(store)
    counter = ac.counter
    tools = ac.count_tools
    tags = ac.config.metadata_tags
    working: list[BaseMessage] = []
    cursor = 0
    previous: list[tuple[str | None, Any]] = []
    calls: list[CallRecord] = []
    unmanaged: list[int] = []
    msgs = trajectory.messages
    for call_index, point in enumerate(_call_points(msgs)):
        working.extend(msgs[cursor:point])
        cursor = point
        started = time.perf_counter()
        result = ac.compress(working, thread_id=thread, store=st)
        overhead = time.perf_counter() - started
        sent = result.messages
        key = [(m.id, m.content) for m in sent]
        common = 0
        for a, b in zip(key, previous, strict=False):
            if a != b:
                break
            common += 1
        # Tokens a provider's prompt cache can reuse: the tool schemas and the messages
        # identical to the previous call's (their tags too: a tag depends only on what
        # precedes it). The reply-priming tokens are not part of a prefix.
        prefix = 0
        if common:
            prefix = min(result.tokens_after, counter.count(sent[:common], tools, tags=tags) - 3)
        previous = key
        record = CallRecord(
            index=call_index,
            tokens=result.tokens_after,
            messages=len(sent),
            overhead_s=overhead,
            prefix_tokens=prefix,
            over_budget=result.tokens_after > ac.config.max_tokens,
            violations=find_violations(sent),
            events=result.events,
        )
        calls.append(record)
        if compare:
            unmanaged.append(counter.count(msgs[:point], tools, tags=False))
        if on_call is not None:
            on_call(record)
        working = list(sent)
    originals = [m for m in msgs[:cursor] if m.id]
    stored = {e.id for e in st.iter_history(thread)}
    recoverable = sum(1 for m in originals if m.id in stored)
    return ReplayReport(
        trajectory_id=trajectory.id,
        max_tokens=ac.config.max_tokens,
        calls=calls,
        originals=len(originals),
        recoverable=recoverable,
        unmanaged_tokens=unmanaged,
    )


def iter_reports(
    trajectories: Iterable[Trajectory], make_ac: Callable[[], Any], **kwargs: Any
) -> Iterable[ReplayReport]:
    """Replay each trajectory with a fresh manager from ``make_ac``."""
    for t in trajectories:
        yield replay(t, make_ac(), **kwargs)
