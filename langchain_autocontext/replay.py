"""Replay recorded agent trajectories through the manager, call by call.

Used by the ``autocontext replay`` CLI, the notebooks and the benchmarks: load
agent logs as JSON / JSONL (OpenAI chat or Responses API, Anthropic Messages API,
LangChain message dumps, LangSmith runs), stream each trajectory
through :meth:`AutoContext.compress` as the agent would have called its model,
and report what the model would have been sent (:class:`ReplayReport`), as
numbers, a JSON document or a plot (:func:`plot_reports`).

Over 600 lines because it holds the four parts of a replay that the CLI, the notebooks
and the benchmarks all import: loading every accepted format (about 400 lines: each
provider's shapes read as chat messages), the call-by-call run, the
report with its measures (about 175 lines) and the plot.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import statistics
import sys
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    InvalidToolCall,
    RemoveMessage,
    convert_to_messages,
)
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call

from langchain_autocontext.errors import AutoContextError, OffloadNotFoundError
from langchain_autocontext.messages import (
    ensure_ids,
    find_violations,
    load_message,
    sanitize_message,
    seeded_ids,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from langchain_autocontext.engine import CompressionResult, ContextEngine
    from langchain_autocontext.store import OffloadStore
    from langchain_autocontext.view import ModelCall

__all__ = [
    "DEFAULT_SEED",
    "PLOT_FORMATS",
    "SAMPLE_ID",
    "STRATEGY_LABELS",
    "CallRecord",
    "ReplayFormatError",
    "ReplayReport",
    "Trajectory",
    "aiter_reports",
    "areplay",
    "count_calls",
    "iter_reports",
    "load_trajectories",
    "merge_reports",
    "parse_trajectory",
    "plot_format",
    "plot_reports",
    "replay",
    "sample_path",
]

_ROLES = {"system", "user", "assistant", "tool", "human", "ai", "developer", "function"}
_END_ROLES = {"exit"}  # mini-swe-agent's final submission: the end of the run, not a chat role

#: Id of the trajectory bundled with the package (``autocontext replay`` with no file).
SAMPLE_ID = "django__django-13768"

#: Short labels of the default strategies, in pipeline order (reports and plots).
STRATEGY_LABELS: dict[str, str] = {
    "tool_run": "1 tool runs",
    "offload_history": "2 offload (history)",
    "offload_all": "3 offload (all)",
    "round": "4 round summaries",
    "current_large": "5 current-round large",
    "current_round": "6 current round",
    "fifo": "7 FIFO eviction",
    "offload_fresh": "8 offload (fresh, last resort)",
}


class ReplayFormatError(AutoContextError, ValueError):
    """The file is not a trajectory format the replay understands."""


def sample_path() -> Path:
    """Path of the real trajectory shipped inside the package.

    One SWE-bench coding-agent run recorded with mini-swe-agent (MIT licence; the
    attribution is in ``langchain_autocontext/data/README.md``).
    """
    return Path(str(resources.files("langchain_autocontext") / "data" / "sample-trajectory.jsonl"))


@dataclass
class Trajectory:
    """One recorded agent run, as LangChain messages with stable ids."""

    id: str
    messages: list[BaseMessage]
    tools: list[Any] = field(default_factory=list)
    """The agent's own tool schemas, when the file gives them (an OpenAI request
    body's ``"tools"``): counted in every call, as the model was sent them."""
    notes: list[str] = field(default_factory=list)
    """What the loader left out or what the replay cannot show (the report repeats them)."""


# --- loading ----------------------------------------------------------------------------
def _convert_one(raw: Any, where: str) -> BaseMessage | None:
    if not isinstance(raw, dict):
        raise ReplayFormatError(
            f"{where}: a message must be a JSON object, got {type(raw).__name__}"
        )
    if _is_lc_dump(raw):  # LangChain's own serialization (dumpd/dumps, LangSmith)
        raw = _lc_fields(raw)
    if "type" in raw and "data" in raw:  # LangChain messages_to_dict format
        try:
            return load_message(raw)
        except Exception as exc:
            raise ReplayFormatError(f"{where}: not a LangChain message dump ({exc})") from None
    if _is_model_dump(raw):  # a LangChain message's model_dump(): its fields, typed
        try:
            return load_message({"type": raw["type"], "data": raw})
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
    invalid: list[InvalidToolCall] = []
    if role in ("assistant", "ai") and isinstance(data.get("tool_calls"), list):
        data["tool_calls"], invalid = _split_tool_calls(data["tool_calls"])
    try:
        msg = convert_to_messages([data])[0]
    except Exception as exc:
        raise ReplayFormatError(f"{where}: cannot read message ({exc})") from None
    if invalid and isinstance(msg, AIMessage):
        msg = msg.model_copy(update={"invalid_tool_calls": [*msg.invalid_tool_calls, *invalid]})
    return msg


def _split_tool_calls(raw_calls: list[Any]) -> tuple[list[Any], list[InvalidToolCall]]:
    """OpenAI tool calls whose arguments parse to a JSON object, and the others as
    ``invalid_tool_calls`` (truncated JSON, an array, a number …), as LangChain's OpenAI
    adapter keeps what the model sent: the replay goes on, the call is sent as it was."""
    valid: list[Any] = []
    invalid: list[InvalidToolCall] = []
    for raw in raw_calls:
        fn = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str | None):
            valid.append(raw)  # not the OpenAI shape: the converter says what is wrong
            continue
        try:
            parsed = parse_tool_call(raw, return_id=True)
        except OutputParserException as exc:
            invalid.append(make_invalid_tool_call(raw, " ".join(str(exc).split())))
            continue
        if parsed is not None and not isinstance(parsed.get("args"), dict):
            error = f"arguments are JSON but not an object: {fn.get('arguments')}"
            invalid.append(make_invalid_tool_call(raw, error))
            continue
        if not fn.get("arguments"):  # null or "": a tool without parameters, as LangChain reads it
            raw = {**raw, "function": {**fn, "arguments": "{}"}}
        valid.append(raw)
    return valid, invalid


def _block_text(content: Any) -> str:
    """The text of a tool result's content: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    return "" if content is None else str(content)


def _result_content(content: Any) -> Any:
    """A ``tool_result``'s content as a tool message holds it: its text, or its blocks
    when it has more than text (a screenshot's image stays an image, counted as one)."""
    if isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") not in (None, "text") for b in content
    ):
        return content
    return _block_text(content)


def _from_anthropic(raw: Any) -> list[Any]:
    """An Anthropic Messages API message as the chat messages it stands for: an
    assistant turn's ``tool_use`` blocks become its tool calls, a user turn's
    ``tool_result`` blocks become tool messages (before the rest of the turn). Any other
    message is returned as it is."""
    if not isinstance(raw, dict) or not isinstance(raw.get("content"), list):
        return [raw]
    blocks = raw["content"]

    def kind(b: Any) -> Any:
        return b.get("type") if isinstance(b, dict) else None

    if raw.get("role") == "assistant" and any(kind(b) == "tool_use" for b in blocks):
        calls = [
            {
                "id": b.get("id"),
                "type": "function",
                "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input", {}))},
            }
            for b in blocks
            if kind(b) == "tool_use"
        ]
        rest = [b for b in blocks if kind(b) != "tool_use"]
        return [{**raw, "content": rest, "tool_calls": calls}]
    if raw.get("role") == "user" and any(kind(b) == "tool_result" for b in blocks):
        out: list[Any] = [
            {
                "role": "tool",
                "tool_call_id": b.get("tool_use_id"),
                "content": _result_content(b.get("content")),
                **({"status": "error"} if b.get("is_error") else {}),
            }
            for b in blocks
            if kind(b) == "tool_result"
        ]
        rest = [b for b in blocks if kind(b) != "tool_result"]
        if rest:
            out.append({**raw, "content": rest})
        return out
    return [raw]


def _from_function_call(raw: Any, pending: str | None, call_id: str) -> tuple[Any, str | None]:
    """OpenAI's legacy function calling as the tool call and tool message it stands for:
    an assistant message's ``function_call`` becomes a tool call with id ``call_id``, and
    the ``function`` message right after it that call's result. Returns the message and
    the id a ``function`` message that follows answers (``pending``: the one before's)."""
    if not isinstance(raw, dict):
        return raw, None
    call = raw.get("function_call")
    if raw.get("role") in ("assistant", "ai") and isinstance(call, dict):
        if raw.get("tool_calls"):  # both given: the tool calls are what LangChain reads
            return raw, None
        rest = {k: v for k, v in raw.items() if k != "function_call"}
        return {**rest, "tool_calls": [{"id": call_id, "type": "function", "function": call}]}, (
            call_id
        )
    if raw.get("role") == "function" and pending is not None:
        return {**raw, "role": "tool", "tool_call_id": pending}, None
    return raw, None


#: OpenAI Responses API items the replay reads, by ``type`` (a ``reasoning`` item is
#: left out with a note: what the model is sent of it is not in the file).
_RESPONSES_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})
_RESPONSES_TEXT = frozenset({"input_text", "output_text", "text"})


def _responses_kind(obj: Any) -> str | None:
    """The ``type`` of an OpenAI Responses API item (``function_call``, ``message`` …),
    else ``None`` (a chat message or a LangChain dump)."""
    if not isinstance(obj, dict) or "data" in obj:
        return None
    kind = obj.get("type")
    if not isinstance(kind, str):
        return None
    if kind in _RESPONSES_ITEMS or kind.endswith(("_call", "_call_output")):
        return kind
    return None


def _responses_content(content: Any) -> Any:
    """A Responses message's content as chat content: its ``input_text`` /
    ``output_text`` / ``refusal`` parts as text blocks."""
    if not isinstance(content, list):
        return content
    out: list[Any] = []
    for b in content:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind in _RESPONSES_TEXT:
            out.append({"type": "text", "text": str(b.get("text", ""))})
        elif kind == "refusal":
            out.append({"type": "text", "text": str(b.get("refusal", ""))})
        else:
            out.append(b)
    return out


def _from_responses(raw: Any, out: list[tuple[int, Any]], n: int, where: str) -> bool:
    """Add the chat message an OpenAI Responses API item stands for to ``out``: a
    ``message`` item as that message, a ``function_call`` as a tool call of the
    assistant message before it (one model response) or of a new one, a
    ``function_call_output`` as a tool message, a ``reasoning`` item as nothing.
    Returns False when ``raw`` is not a Responses item."""
    kind = _responses_kind(raw)
    if kind is None:
        return False
    if kind == "message":
        msg = {k: v for k, v in raw.items() if k in ("role", "id", "name")}
        out.append((n, {**msg, "content": _responses_content(raw.get("content"))}))
    elif kind == "function_call":
        call = {
            "id": raw.get("call_id") or raw.get("id"),
            "type": "function",
            "function": {"name": raw.get("name"), "arguments": raw.get("arguments")},
        }
        last = out[-1][1] if out else None
        if isinstance(last, dict) and last.get("role") == "assistant":
            out[-1] = (out[-1][0], {**last, "tool_calls": [*(last.get("tool_calls") or ()), call]})
        else:
            out.append((n, {"role": "assistant", "content": "", "tool_calls": [call]}))
    elif kind == "function_call_output":
        result = {"role": "tool", "tool_call_id": raw.get("call_id")}
        out.append(
            (n, {**result, "content": _result_content(_responses_content(raw.get("output")))})
        )
    elif kind != "reasoning":
        raise ReplayFormatError(
            f"{where}: a Responses API item of type {kind!r} is not replayed (message, "
            "function_call, function_call_output and reasoning items are)"
        )
    return True


def _expand(raw_messages: Sequence[Any], traj_id: str) -> list[tuple[int, Any]]:
    """The chat messages the file's messages stand for, each with its place in the file:
    Anthropic turns split into tool calls and results, legacy ``function_call`` turns
    read as tool calls, OpenAI Responses API items as chat messages."""
    out: list[tuple[int, Any]] = []
    pending: str | None = None
    for n, raw in enumerate(raw_messages):
        if _from_responses(raw, out, n, f"{traj_id} message {n}"):
            continue
        for m in _from_anthropic(raw):
            m, pending = _from_function_call(m, pending, f"{traj_id}-call-{n}")
            out.append((n, m))
    return out


def parse_trajectory(raw_messages: Sequence[Any], traj_id: str) -> Trajectory:
    """Convert raw messages; each gets the id ``{traj_id}-{index}`` unless it has one.

    A message of role ``exit`` (mini-swe-agent's final submission) ends the run. A
    ``RemoveMessage`` (a LangGraph state update, not a message) is skipped, with a note.
    Anthropic Messages API turns are read too (``tool_use`` / ``tool_result`` blocks),
    and OpenAI's legacy ``function_call`` / ``function`` messages as tool calls and
    results. Errors name a message by its place in ``raw_messages``.
    """
    out: list[BaseMessage] = []
    removed = 0
    expanded = _expand(raw_messages, traj_id)
    for i, (n, raw) in enumerate(expanded):
        msg = _convert_one(raw, f"{traj_id} message {n}")  # n: its place in the file
        if msg is None:
            break
        if isinstance(msg, RemoveMessage):
            removed += 1
            continue
        if not msg.id:
            msg = msg.model_copy(update={"id": f"{traj_id}-{i}"})
        out.append(msg)
    if not out:
        raise ReplayFormatError(f"{traj_id}: the trajectory has no messages")
    trajectory = Trajectory(traj_id, out)
    if not any(isinstance(m, AIMessage) for m in out):
        trajectory.notes.append(
            "no assistant message: the model was never called, nothing to replay (0 calls)"
        )
    reasoning = sum(1 for raw in raw_messages if _responses_kind(raw) == "reasoning")
    if reasoning:
        trajectory.notes.append(
            f"left out {reasoning} Responses API reasoning item{'' if reasoning == 1 else 's'}"
            " (what the model is sent of them is not in the file)"
        )
    if removed:
        trajectory.notes.append(
            f"skipped {removed} RemoveMessage entr{'y' if removed == 1 else 'ies'} (a "
            "LangGraph instruction to delete a message, not a message the model was sent)"
        )
    return trajectory


def _is_lc_dump(obj: Any) -> bool:
    """A message as LangChain serializes it (``langchain_core.load.dumpd``, LangSmith):
    ``{"lc": 1, "type": "constructor", "id": [..., "HumanMessage"], "kwargs": {...}}``."""
    if not isinstance(obj, dict) or obj.get("lc") != 1 or obj.get("type") != "constructor":
        return False
    path = obj.get("id")
    return (
        isinstance(obj.get("kwargs"), dict)
        and isinstance(path, list)
        and bool(path)
        and str(path[-1]).endswith(("Message", "MessageChunk"))
    )


_LC_TYPES = {
    "HumanMessage": "human",
    "AIMessage": "ai",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "ChatMessage": "chat",
    "FunctionMessage": "function",
    "RemoveMessage": "remove",
}


def _lc_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A serialized message (:func:`_is_lc_dump`) as its fields, typed (what
    ``model_dump()`` writes): the class name gives the type when the fields do not."""
    kwargs = dict(obj["kwargs"])
    cls = str(obj["id"][-1])
    kind = kwargs.get("type") or (cls if cls.endswith("Chunk") else _LC_TYPES.get(cls, cls))
    kwargs.setdefault("content", "")
    return {"type": kind, "data": {**kwargs, "type": kind}}


#: The ``type`` of LangChain's message classes, as ``model_dump()`` writes it.
_DUMP_TYPES = frozenset({"human", "ai", "system", "tool", "chat", "function"})


def _is_model_dump(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and "role" not in obj
        and obj.get("type") in _DUMP_TYPES
        and "content" in obj
    )


def _is_message(obj: Any) -> bool:
    return isinstance(obj, dict) and (
        "role" in obj
        or ("type" in obj and "data" in obj)
        or _is_model_dump(obj)
        or _is_lc_dump(obj)
        or _responses_kind(obj) is not None
    )


def _raw_id(obj: Any, name: str, index: int) -> str:
    if isinstance(obj, dict) and obj.get("id") not in (None, ""):
        return str(obj["id"])
    return f"{name}-{index}"


def _responses_body(obj: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI Responses API request body (``input``, ``instructions``; with the
    response's ``output`` when the record holds both) as ``{"messages", "system"}``."""
    items = obj.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return obj
    output = obj.get("output")
    messages = [*items, *(output if isinstance(output, list) else ())]
    return {**obj, "messages": messages, "system": obj.get("instructions")}


def _langsmith_run(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A LangSmith run export as ``{"messages"}``: a chain or graph run's final
    ``outputs.messages`` (its whole history), else a chat model run's
    ``inputs.messages`` and the message it generated. ``None`` for anything else."""
    inputs, outputs = obj.get("inputs"), obj.get("outputs")
    if not isinstance(inputs, dict) or not isinstance(outputs, dict):
        return None
    if isinstance(outputs.get("messages"), list):
        return {**obj, "messages": outputs["messages"]}
    messages = inputs.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], list):
        messages = messages[0]  # a chat model run's inputs: a batch of one conversation
    if not isinstance(messages, list):
        return None
    generations = outputs.get("generations")
    while isinstance(generations, list) and generations and isinstance(generations[0], list):
        generations = generations[0]
    first = generations[0] if isinstance(generations, list) and generations else None
    reply = first.get("message") if isinstance(first, dict) else None
    return {**obj, "messages": [*messages, *([reply] if reply is not None else [])]}


def _from_obj(obj: Any, traj_id: str, where: str) -> Trajectory:
    if isinstance(obj, dict) and not isinstance(obj.get("messages"), list):
        obj = _langsmith_run(obj) or _responses_body(obj)
    if isinstance(obj, dict) and isinstance(obj.get("messages"), list):
        messages = obj["messages"]
        system = obj.get("system")  # an Anthropic request body's system prompt
        if system and not (
            messages and isinstance(messages[0], dict) and messages[0].get("role") == "system"
        ):
            messages = [{"role": "system", "content": _block_text(system)}, *messages]
        trajectory = parse_trajectory(messages, traj_id)
        tools = [
            t
            for key in ("tools", "functions")  # "functions": legacy function calling's
            if isinstance(obj.get(key), list)
            for t in obj[key]
            if isinstance(t, dict)
        ]
        trajectory.tools = tools
        return trajectory
    if isinstance(obj, list) and obj and all(_is_message(m) for m in obj):
        return parse_trajectory(obj, traj_id)
    raise ReplayFormatError(
        f"{where} is neither a list of messages nor an object with 'messages' (or a "
        "Responses API 'input') (expected OpenAI chat messages or Responses API items, "
        "Anthropic Messages API turns, or LangChain messages as messages_to_dict, "
        "model_dump or dumpd write them, or a LangSmith run, as JSON or JSONL)"
    )


_GZIP_MAGIC = b"\x1f\x8b"


def _read_text(p: Path) -> tuple[str, str]:
    """The file's text (UTF-8, a BOM dropped, gunzipped when gzip) and the name its
    trajectory ids start with. ``-`` is standard input; pipes and other files that
    are not regular (``/dev/stdin``, ``<(…)``) are read as they are."""
    try:
        if str(p) == "-":
            data, name = sys.stdin.buffer.read(), "stdin"
        else:
            if p.is_dir():
                raise ReplayFormatError(f"{p}: is a directory, not a trajectory file")
            if not p.exists():
                raise ReplayFormatError(f"{p}: no such file")
            data = p.read_bytes()
            name = Path(p.stem).stem if p.suffix.lower() == ".gz" else p.stem
    except OSError as exc:
        raise ReplayFormatError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ReplayFormatError(f"{p}: not a readable gzip file ({exc})") from None
    try:
        return data.decode("utf-8-sig"), name
    except UnicodeDecodeError:
        raise ReplayFormatError(f"{p}: not a UTF-8 text file (expected JSON or JSONL)") from None


def _jsonl_rows(text: str) -> Iterator[tuple[int, str]]:
    r"""(line number, line) of ``text``, split at ``"\n"`` only (JSON strings may hold
    U+2028, U+2029, U+0085 … unescaped), one at a time: no second copy of a large file."""
    start, n = 0, 0
    while start <= len(text):
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        n += 1
        yield n, text[start:end]
        start = end + 1


def load_trajectories(path: str | Path, *, limit: int | None = None) -> list[Trajectory]:
    """Read a JSON or JSONL file of one or many trajectories.

    Accepted shapes: a JSON list of messages; a JSON object ``{"messages": […]}``;
    a JSON list of such objects (or of message lists); JSONL with one such object
    (or message list) per line; JSONL with one message per line (one trajectory).
    Messages are OpenAI chat dicts, OpenAI Responses API items (``message``,
    ``function_call``, ``function_call_output``; a request body's ``input`` and
    ``instructions``), Anthropic Messages API turns (``tool_use`` / ``tool_result``
    blocks; a request body's ``system``), LangChain dumps (``messages_to_dict``,
    ``model_dump()``, ``dumpd``) or LangSmith run exports.
    Trajectory ids come from an ``"id"`` key, else ``{file stem}-{index}``; a
    repeated id gets a ``#2``, ``#3`` … suffix so every trajectory has its own.
    The file is UTF-8 (a BOM is allowed), plain or gzip-compressed (recognised by
    its first bytes); ``-`` reads standard input, and pipes (``/dev/stdin``) work.

    Raises:
        ReplayFormatError: missing or unreadable file, unknown format, bad message.
        ValueError: ``limit`` below 1.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    p = Path(path)
    text, name = _read_text(p)
    if not text.strip():
        raise ReplayFormatError(f"{p}: the file is empty")
    objs: list[Any]
    lines: list[int] = []  # JSONL: the line of each object (errors name it)
    try:
        whole = json.loads(text)
        if isinstance(whole, list) and whole and all(_is_message(m) for m in whole):
            objs = [whole]
        elif isinstance(whole, list):
            objs = whole
        else:
            objs = [whole]
    except json.JSONDecodeError as whole_exc:
        objs = []
        # JSONL lines end at "\n" only: str.splitlines() would also split at U+2028,
        # U+2029, U+0085 … which JSON strings may hold unescaped ("\r" is whitespace)
        for n, line in _jsonl_rows(text):
            if limit is not None and len(objs) >= limit and not _is_message(objs[0]):
                break  # one trajectory a line: the lines past the limit are not read
            if not line.strip():
                continue
            try:
                objs.append(json.loads(line))
                lines.append(n)
            except json.JSONDecodeError as exc:
                if n == 1 and "\n" in text.strip() and text.lstrip()[:1] in "[{":
                    # A pretty-printed JSON document that does not parse.
                    raise ReplayFormatError(
                        f"{p}: not valid JSON (line {whole_exc.lineno}: {whole_exc.msg})"
                    ) from None
                raise ReplayFormatError(
                    f"{p}: line {n} is not JSON ({exc.msg}); expected JSON or JSONL"
                ) from None
        if objs and all(_is_message(o) for o in objs):
            objs = [objs]
    trajectories: list[Trajectory] = []
    seen: Counter[str] = Counter()
    for i, obj in enumerate(objs):
        if limit is not None and len(trajectories) >= limit:
            break
        base = _raw_id(obj, name, i)
        seen[base] += 1
        traj_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
        where = f"{p.name}: line {lines[i]}" if len(lines) == len(objs) else f"{p.name}: entry {i}"
        trajectories.append(_from_obj(obj, traj_id, where))
    if not trajectories:
        raise ReplayFormatError(f"{p}: no trajectories found")
    return trajectories


# --- reports ----------------------------------------------------------------------------
@dataclass
class CallRecord:
    """One model call of a replay."""

    index: int
    """Position of the call in its trajectory (0-based)."""
    tokens: int
    """Tokens the model would have been sent (metadata tags included when shown)."""
    messages: int
    """Messages the model would have been sent."""
    overhead_s: float
    """Time the manager took before this call."""
    prefix_tokens: int
    """Tokens identical to the previous call's prompt (a prompt cache can reuse them)."""
    over_budget: bool
    violations: list[str]
    """Sequence problems a provider would reject (always empty unless there is a bug)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """The compression events of this call (one per strategy that ran)."""
    tokens_before: int | None = None
    """Tokens of the working messages before compression (None: not measured)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            "index": self.index,
            "tokens": self.tokens,
            "tokens_before": self.tokens_before,
            "messages": self.messages,
            "prefix_tokens": self.prefix_tokens,
            "over_budget": self.over_budget,
            "overhead_ms": round(self.overhead_s * 1000, 3),
            "violations": list(self.violations),
            "events": [dict(e) for e in self.events],
        }


def _strategy_order(name: str) -> tuple[int, str]:
    order = list(STRATEGY_LABELS)
    return (order.index(name) if name in order else len(order), name)


@dataclass
class ReplayReport:
    """Everything measured while replaying one trajectory (or, merged, many)."""

    trajectory_id: str
    max_tokens: int
    calls: list[CallRecord]
    originals: int
    """Original messages the model saw over the run (history entries expected)."""
    recoverable: int
    """Originals found in the history store, identical to what was recorded."""
    unmanaged_tokens: list[int] = field(default_factory=list)
    """With ``compare``: tokens an agent without context management would have sent."""
    trigger_tokens: int = 0
    """Where compression starts for the context as the run left it (the ratios apply
    above what can never be compressed: :meth:`AutoContextConfig.thresholds`)."""
    target_tokens: int = 0
    """Where compression stops for that context."""
    summarizer: str = ""
    messages: int = 0
    """Messages in the recorded trajectory."""
    offloads_reloadable: int = 0
    """Offload ids named by the events that reload from the store."""
    trajectories: int = 1
    error: str = ""
    """Why the replay of this trajectory failed (e.g. a budget too small for its system
    prompt and latest message: nothing would have been sent); ``""`` when it ran.
    Merged: how many of the trajectories failed."""
    failed: int = 0
    """Trajectories whose replay failed (``error``)."""
    trigger_range: tuple[int, int] | None = None
    """Merged: the lowest and highest ``trigger_tokens`` of the trajectories (each
    trajectory's floor moves them); ``None`` for one trajectory."""
    target_range: tuple[int, int] | None = None
    """Merged: the lowest and highest ``target_tokens``."""
    notes: list[str] = field(default_factory=list)
    """Warnings about the input (entries skipped, nothing to replay …)."""
    seed: int | None = None
    """The seed the package's ids were drawn with (:func:`replay`'s ``seed``: the same
    seed gives the same report for the same input); ``None`` for random ids. Merged: the
    trajectories' seed when they share one, else ``None``."""

    def __repr__(self) -> str:  # the default printed every call and event (~840 KB merged)
        failed = f", failed={self.failed}" if self.failed else ""
        return (
            f"ReplayReport({self.trajectory_id!r}, trajectories={self.trajectories}, "
            f"calls={len(self.calls)}, max_tokens={self.max_tokens:,}, "
            f"largest={self.largest:,}, over_budget={self.over_budget}, "
            f"events={len(self.events)}, recoverable={self.recoverable}/{self.originals}"
            f"{failed}, ok={self.ok})"
        )

    @classmethod
    def failure(
        cls, trajectory: Trajectory, max_tokens: int, error: str, summarizer: str = ""
    ) -> ReplayReport:
        """The report of a trajectory that could not be replayed: no calls, the reason."""
        return cls(
            trajectory_id=trajectory.id,
            max_tokens=max_tokens,
            calls=[],
            originals=0,
            recoverable=0,
            summarizer=summarizer,
            messages=len(trajectory.messages),
            error=error,
            failed=1,
            notes=list(trajectory.notes),
        )

    # -- managed ---------------------------------------------------------------------
    @property
    def largest(self) -> int:
        """The largest context sent."""
        return max((c.tokens for c in self.calls), default=0)

    @property
    def over_budget(self) -> int:
        """Calls whose context exceeded ``max_tokens`` (0 unless there is a bug)."""
        return sum(c.over_budget for c in self.calls)

    @property
    def invalid(self) -> int:
        """Calls with a sequence a provider would reject (0 unless there is a bug)."""
        return sum(bool(c.violations) for c in self.calls)

    @property
    def tokens_sent(self) -> int:
        """Tokens sent over all calls."""
        return sum(c.tokens for c in self.calls)

    @property
    def prefix_tokens(self) -> int:
        """Tokens each call shares with the previous call's prompt, summed."""
        return sum(c.prefix_tokens for c in self.calls)

    @property
    def prefix_share(self) -> float:
        """Share of the tokens sent that a provider's prompt cache can reuse."""
        sent = self.tokens_sent
        return self.prefix_tokens / sent if sent else 0.0

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every compression event, in order."""
        return [e for c in self.calls for e in c.events]

    @property
    def compressions(self) -> int:
        """Calls before which the pipeline ran at least one strategy."""
        return sum(bool(c.events) for c in self.calls)

    @property
    def strategy_counts(self) -> dict[str, int]:
        """Compression events by strategy name, in pipeline order."""
        counts = Counter(str(e.get("strategy", "?")) for e in self.events)
        return {k: counts[k] for k in sorted(counts, key=_strategy_order)}

    @property
    def offloads(self) -> int:
        """Offloads written (every span a strategy replaced is offloaded first)."""
        return sum(len(e.get("offload_ids") or ()) for e in self.events)

    @property
    def summarizer_calls(self) -> int:
        """Summarizer model calls (0 with the offline summarizer)."""
        return sum(int(e.get("summarizer_calls", 0)) for e in self.events)

    @property
    def summarizer_input_tokens(self) -> int:
        return sum(int(e.get("summarizer_input_tokens", 0)) for e in self.events)

    @property
    def summarizer_output_tokens(self) -> int:
        return sum(int(e.get("summarizer_output_tokens", 0)) for e in self.events)

    @property
    def summarizer_fallbacks(self) -> int:
        """Summaries the offline fallback wrote after the model failed."""
        return sum(int(e.get("summarizer_fallbacks", 0)) for e in self.events)

    @property
    def summarizer_errors(self) -> list[str]:
        return [str(err) for e in self.events for err in e.get("summarizer_errors") or ()]

    @property
    def overheads(self) -> list[float]:
        return [c.overhead_s for c in self.calls]

    @property
    def ok(self) -> bool:
        """No call over budget, no invalid sequence, every original and offload recoverable."""
        return (
            not self.failed
            and not self.over_budget
            and not self.invalid
            and self.recoverable == self.originals
            and self.offloads_reloadable == self.offloads
        )

    # -- unmanaged (with compare) ----------------------------------------------------
    @property
    def compared(self) -> bool:
        return bool(self.unmanaged_tokens)

    @property
    def unmanaged_largest(self) -> int:
        return max(self.unmanaged_tokens, default=0)

    @property
    def unmanaged_over_budget(self) -> int:
        return sum(t > self.max_tokens for t in self.unmanaged_tokens)

    @property
    def unmanaged_tokens_sent(self) -> int:
        return sum(self.unmanaged_tokens)

    def summary(self) -> dict[str, Any]:
        """The headline numbers as plain JSON (what the CLI's tables show)."""
        out: dict[str, Any] = {
            "trajectory_id": self.trajectory_id,
            "trajectories": self.trajectories,
            "messages": self.messages,
            "calls": len(self.calls),
            "max_tokens": self.max_tokens,
            "trigger_tokens": self.trigger_tokens,
            "target_tokens": self.target_tokens,
            "largest_context": self.largest,
            "calls_over_budget": self.over_budget,
            "invalid_sequences": self.invalid,
            "tokens_sent": self.tokens_sent,
            "prefix_tokens": self.prefix_tokens,
            "prefix_share": round(self.prefix_share, 4),
            "compressions": self.compressions,
            "events_by_strategy": self.strategy_counts,
            "offloads": self.offloads,
            "offloads_reloadable": self.offloads_reloadable,
            "summarizer": self.summarizer,
            "summarizer_calls": self.summarizer_calls,
            "summarizer_input_tokens": self.summarizer_input_tokens,
            "summarizer_output_tokens": self.summarizer_output_tokens,
            "summarizer_fallbacks": self.summarizer_fallbacks,
            "originals": self.originals,
            "recoverable_originals": self.recoverable,
            "overhead_ms_p50": round(median(self.overheads) * 1000, 3),
            "overhead_ms_p99": round(percentile(self.overheads, 0.99) * 1000, 3),
            "ok": self.ok,
            "seed": self.seed,
        }
        if self.trigger_range is not None and self.target_range is not None:
            out["trigger_tokens_range"] = list(self.trigger_range)
            out["target_tokens_range"] = list(self.target_range)
        if self.failed:
            out["failed"] = self.failed
            out["error"] = self.error
        if self.notes:
            out["notes"] = list(self.notes)
        if self.compared:
            out["unmanaged"] = {
                "largest_context": self.unmanaged_largest,
                "calls_over_budget": self.unmanaged_over_budget,
                "tokens_sent": self.unmanaged_tokens_sent,
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        """The summary plus every call (plain JSON, for ``--json``)."""
        out = self.summary()
        out["per_call"] = [c.to_dict() for c in self.calls]
        if self.compared:
            for row, unmanaged in zip(out["per_call"], self.unmanaged_tokens, strict=False):
                row["unmanaged_tokens"] = unmanaged
        out["summarizer_errors"] = self.summarizer_errors
        return out


def merge_reports(reports: Sequence[ReplayReport], trajectory_id: str = "total") -> ReplayReport:
    """One report over several replays: calls concatenated, counts summed.

    ``max_tokens`` and the summarizer are taken from the first report that ran (a CLI
    run uses one config); ``trigger_tokens`` and ``target_tokens`` too, and their
    range over the reports is in ``trigger_range`` and ``target_range`` (each
    trajectory's floor moves them).
    """
    if not reports:
        raise ValueError("merge_reports needs at least one report")
    first = next((r for r in reports if not r.failed), reports[0])
    failed = sum(r.failed for r in reports)
    ran = [r for r in reports if not r.failed] or list(reports)
    triggers = [r.trigger_range or (r.trigger_tokens,) * 2 for r in ran]
    targets = [r.target_range or (r.target_tokens,) * 2 for r in ran]
    return ReplayReport(
        trajectory_id=trajectory_id,
        max_tokens=first.max_tokens,
        calls=[c for r in reports for c in r.calls],
        originals=sum(r.originals for r in reports),
        recoverable=sum(r.recoverable for r in reports),
        unmanaged_tokens=(
            [t for r in reports for t in r.unmanaged_tokens]
            if all(r.compared or not r.calls for r in reports)
            else []
        ),
        trigger_tokens=first.trigger_tokens,
        target_tokens=first.target_tokens,
        summarizer=first.summarizer,
        messages=sum(r.messages for r in reports),
        offloads_reloadable=sum(r.offloads_reloadable for r in reports),
        trajectories=sum(r.trajectories for r in reports),
        failed=failed,
        error=f"{failed} of {len(reports)} trajectories failed" if failed else "",
        trigger_range=(min(t[0] for t in triggers), max(t[1] for t in triggers)),
        target_range=(min(t[0] for t in targets), max(t[1] for t in targets)),
        notes=[f"{r.trajectory_id}: {n}" for r in reports for n in r.notes],
        seed=seeds.pop() if len(seeds := {r.seed for r in reports}) == 1 else None,
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest-rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def median(values: Sequence[float]) -> float:
    """The median; 0.0 for no values."""
    return statistics.median(values) if values else 0.0


# --- replay -----------------------------------------------------------------------------
def _call_points(messages: Sequence[BaseMessage]) -> list[int]:
    """Indices of the assistant messages: the model was called right before each."""
    return [i for i, m in enumerate(messages) if isinstance(m, AIMessage)]


def count_calls(trajectory: Trajectory) -> int:
    """Model calls a replay of ``trajectory`` makes (one per recorded assistant message)."""
    return len(_call_points(trajectory.messages))


class _Run:
    """The bookkeeping shared by :func:`replay` and :func:`areplay`.

    It plays the graph around the manager: the working messages and the
    ``autocontext`` state (working context, memory-pressure flag) carry over from
    call to call, and what is measured is the model's input view
    (:meth:`AutoContext.prepare_model_call`): the exact request, tags, generated
    instructions, notices and tool schemas included.
    """

    def __init__(
        self, trajectory: Trajectory, ac: ContextEngine, compare: bool, seed: int | None
    ) -> None:
        self.trajectory = trajectory
        self.ac = ac
        self.compare = compare
        self.seed = seed
        self.working: list[BaseMessage] = []
        self.state: dict[str, Any] = {}
        self.cursor = 0
        self.previous: list[tuple[Any, ...]] = []
        self.calls: list[CallRecord] = []
        self.unmanaged: list[int] = []
        self.sent_tools: list[Any] = []
        if trajectory.tools:  # the agent's own schemas: counted in the budget and sent
            ac.learn_tools(trajectory.tools)

    def steps(self) -> Iterator[tuple[int, int, list[BaseMessage]]]:
        """(call index, message index, working messages before the call)."""
        msgs = self.trajectory.messages
        for call_index, point in enumerate(_call_points(msgs)):
            self.working.extend(msgs[self.cursor : point])
            self.cursor = point
            yield call_index, point, self.working

    def view(self, result: CompressionResult) -> ModelCall:
        # The tool schemas the middleware sends (``_sent_tools``): the agent's always,
        # the package's own only once the model is shown the package (``engaged``).
        ac = self.ac
        engaged = ac.engaged(result.messages, self.state)
        own = {t.name for t in ac.tools}
        self.sent_tools = [
            t for t in ac.count_tools if engaged or getattr(t, "name", None) not in own
        ]
        call = ac.prepare_model_call(result.messages, state=self.state, tools=self.sent_tools)
        if call.state_update:
            self.state = dict(call.state_update)
        return call

    def record(
        self,
        call_index: int,
        point: int,
        result: CompressionResult,
        call: ModelCall,
        overhead: float,
    ) -> CallRecord:
        ac = self.ac
        counter, tools = ac.counter, self.sent_tools
        sent = call.messages
        # What a provider's prompt cache compares: the serialized messages in order
        # (LangChain ids are not sent; the content, tags included, and tool calls are).
        key = [(m.type, repr(m.content), repr(getattr(m, "tool_calls", None) or ())) for m in sent]
        common = 0
        for a, b in zip(key, self.previous, strict=False):
            if a != b:
                break
            common += 1
        # Tokens the cache can reuse: the tool schemas and the messages identical to the
        # previous call's. The reply-priming tokens are not part of a prefix.
        prefix = 0
        if common:
            prefix = max(0, min(call.tokens, counter.count(sent[:common], tools) - 3))
        self.previous = key
        record = CallRecord(
            index=call_index,
            tokens=call.tokens,
            messages=len(sent),
            overhead_s=overhead,
            prefix_tokens=prefix,
            over_budget=call.tokens > ac.config.max_tokens,
            violations=find_violations(sent),
            events=list(result.events),
            tokens_before=result.tokens_before,
        )
        self.calls.append(record)
        if self.compare:
            msgs = self.trajectory.messages
            self.unmanaged.append(counter.count(msgs[:point], list(ac.agent_tools)))
        self.working = list(result.messages)
        return record

    def offload_ids(self) -> list[str]:
        """Every offload id the run's events name (each is checked to reload)."""
        return [oid for c in self.calls for e in c.events for oid in (e.get("offload_ids") or ())]

    def report(self, store: OffloadStore, thread: str) -> ReplayReport:
        """Read the store back (the thread's history, each offload) and build the report."""
        stored = {e.id: e.message for e in store.iter_history(thread)}
        reloadable = 0
        for oid in self.offload_ids():
            try:
                store.reload(thread, oid)
            except OffloadNotFoundError:
                continue
            reloadable += 1
        return self.build_report(stored, reloadable)

    async def areport(self, store: OffloadStore, thread: str) -> ReplayReport:
        """Async twin of :meth:`report`: an async-only store (``AsyncSqliteStore``)
        refuses sync calls from the event loop."""
        stored = {e.id: e.message async for e in store.aiter_history(thread)}
        reloadable = 0
        for oid in self.offload_ids():
            try:
                await store.areload(thread, oid)
            except OffloadNotFoundError:
                continue
            reloadable += 1
        return self.build_report(stored, reloadable)

    def build_report(self, stored: dict[str, BaseMessage], reloadable: int) -> ReplayReport:
        """The report, from the history read back (``stored``, by id) and how many of
        the offloads the events name reload."""
        originals = [m for m in self.trajectory.messages[: self.cursor] if m.id]
        # as the engine archives them: a repeated id given a fresh one, text no store
        # takes (a lone surrogate, a NUL) cleaned; not a loss, so not reported as one
        archived = ensure_ids([sanitize_message(m) for m in originals])
        recoverable = sum(1 for m in archived if m.id and _same(stored.get(m.id), m))
        cfg = self.ac.config
        # where compression starts and stops for the context as the run left it (the
        # ratios apply above what can never be compressed: AutoContextConfig.thresholds)
        limits = cfg.thresholds(self.ac.floor_tokens(self.working) if self.working else 0)
        return ReplayReport(
            trajectory_id=self.trajectory.id,
            max_tokens=cfg.max_tokens,
            calls=self.calls,
            originals=len(originals),
            recoverable=recoverable,
            unmanaged_tokens=self.unmanaged,
            trigger_tokens=limits.trigger,
            target_tokens=limits.target,
            summarizer=str(getattr(self.ac.summarizer, "name", type(self.ac.summarizer).__name__)),
            messages=len(self.trajectory.messages),
            offloads_reloadable=reloadable,
            notes=list(self.trajectory.notes),
            seed=self.seed,
        )


def _same(stored: BaseMessage | None, original: BaseMessage) -> bool:
    """The stored copy is the recorded message (type, content, tool calls)."""
    if stored is None or stored.type != original.type or stored.content != original.content:
        return False
    if isinstance(original, AIMessage):
        calls = [(c["id"], c["name"], c["args"]) for c in original.tool_calls]
        return calls == [(c["id"], c["name"], c["args"]) for c in getattr(stored, "tool_calls", [])]
    return getattr(stored, "tool_call_id", None) == getattr(original, "tool_call_id", None)


#: The seed of the package's ids in a replay (:func:`replay`'s ``seed``).
DEFAULT_SEED = 0


def _ids(seed: int | None) -> contextlib.AbstractContextManager[None]:
    """The package's ids from the sequence of ``seed`` (random with None)."""
    return contextlib.nullcontext() if seed is None else seeded_ids(seed)


def replay(
    trajectory: Trajectory,
    ac: ContextEngine,
    *,
    thread_id: str | None = None,
    store: Any = None,
    on_call: Callable[[CallRecord], None] | None = None,
    compare: bool = False,
    seed: int | None = DEFAULT_SEED,
) -> ReplayReport:
    """Stream ``trajectory`` through ``ac`` (an :class:`AutoContext`) call by call.

    Before each recorded assistant message the agent would have called its model
    with its working messages: those are compressed with ``ac.compress`` exactly as
    a pre-model hook would, the compressed list becomes the new working state, and
    the recorded assistant message (and what follows it) is appended. ``compare``
    also counts what an unmanaged agent would have sent. ``on_call`` is called
    after every call (progress bars). At the end the history store is read back to
    check that every original message is there, unchanged, and that every offload
    id the events name reloads.

    The package's own ids (offload ids, ids of the messages it writes) are shown in
    the context and a uuid's token count varies, so they are drawn from a fixed
    sequence seeded with ``seed`` (:func:`~langchain_autocontext.messages.seeded_ids`)
    for the trajectory: the same input and configuration give the same report. Another
    seed shows how much a figure owes to where those ids fall; ``None`` draws random
    ids, as in production.

    Raises:
        ContextBudgetError: the budget cannot hold the system prompt and latest
            user message (nothing would have been sent).
    """
    thread = thread_id or trajectory.id
    st = ac.resolve_store(store)
    run = _Run(trajectory, ac, compare, seed)
    with _ids(seed):
        for call_index, point, working in run.steps():
            started = time.perf_counter()
            # the schemas the file records are what is counted (no warning for those it
            # lacks)
            tools = ac.count_tools
            result = ac.compress(working, thread_id=thread, store=st, state=run.state, tools=tools)
            call = run.view(result)
            record = run.record(call_index, point, result, call, time.perf_counter() - started)
            if on_call is not None:
                on_call(record)
        return run.report(st, thread)


async def areplay(
    trajectory: Trajectory,
    ac: ContextEngine,
    *,
    thread_id: str | None = None,
    store: Any = None,
    on_call: Callable[[CallRecord], None] | None = None,
    compare: bool = False,
    seed: int | None = DEFAULT_SEED,
) -> ReplayReport:
    """Async twin of :func:`replay` (uses ``ac.acompress``; the same ids for ``seed``)."""
    thread = thread_id or trajectory.id
    st = ac.resolve_store(store)
    run = _Run(trajectory, ac, compare, seed)
    with _ids(seed):
        for call_index, point, working in run.steps():
            started = time.perf_counter()
            tools = ac.count_tools  # the schemas the file records: see the sync twin
            result = await ac.acompress(
                working, thread_id=thread, store=st, state=run.state, tools=tools
            )
            call = run.view(result)
            record = run.record(call_index, point, result, call, time.perf_counter() - started)
            if on_call is not None:
                on_call(record)
        return await run.areport(st, thread)


def iter_reports(
    trajectories: Iterable[Trajectory], make_ac: Callable[[], Any], **kwargs: Any
) -> Iterator[ReplayReport]:
    """Replay each trajectory with a fresh manager from ``make_ac``."""
    for t in trajectories:
        yield replay(t, make_ac(), **kwargs)


async def aiter_reports(
    trajectories: Iterable[Trajectory], make_ac: Callable[[], Any], **kwargs: Any
) -> AsyncIterator[ReplayReport]:
    """Async twin of :func:`iter_reports`."""
    for t in trajectories:
        yield await areplay(t, make_ac(), **kwargs)


# --- plot -------------------------------------------------------------------------------
#: File formats :func:`plot_reports` writes, by file suffix.
PLOT_FORMATS: dict[str, str] = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def plot_format(path: str | Path) -> str:
    """The format :func:`plot_reports` writes ``path`` in: SVG or PDF for those
    suffixes, PNG for anything else."""
    return PLOT_FORMATS.get(Path(path).suffix.lower(), "png")


_COLORS = {
    "tool_run": "#1f77b4",
    "offload_history": "#17becf",
    "offload_all": "#2ca02c",
    "round": "#9467bd",
    "current_large": "#ff7f0e",
    "current_round": "#d62728",
    "fifo": "#8c564b",
    "offload_fresh": "#e377c2",
}


def plot_reports(
    reports: ReplayReport | Sequence[ReplayReport],
    path: str | Path | None = None,
    *,
    max_panels: int = 12,
    dpi: int = 110,
) -> Figure:
    """Plot context tokens per call, with the budget and every compression event.

    One panel per trajectory (the first ``max_panels``): the tokens sent at each
    call, the budget (``max_tokens``) and the trigger line, and for each
    compression event a vertical bar from the tokens before the strategy ran to
    the tokens after, coloured by strategy. With ``compare`` reports, the
    unmanaged agent's context is drawn in grey. Returns a matplotlib ``Figure``
    (shown inline in Jupyter); with ``path``, also writes it: as SVG or PDF when
    the file is named ``.svg`` or ``.pdf``, as PNG otherwise (see
    :data:`PLOT_FORMATS`).

    Needs matplotlib (``pip install "langchain-autocontext[replay]"``). Uses no
    pyplot state, so it works under any backend, headless included.
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError:
        raise ImportError(
            'plotting needs matplotlib: pip install "langchain-autocontext[replay]"'
        ) from None
    items = [reports] if isinstance(reports, ReplayReport) else list(reports)
    if not items:
        raise ValueError("plot_reports needs at least one report")
    shown = items[:max_panels]
    cols = 1 if len(shown) == 1 else 2 if len(shown) <= 4 else 3
    rows = -(-len(shown) // cols)
    fig = Figure(figsize=(10 if cols == 1 else 5 * cols, 4.8 if rows == 1 else 3.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    used: dict[str, str] = {}
    for ax, rep in zip(axes.flat, shown, strict=False):
        x = [c.index + 1 for c in rep.calls]
        if rep.compared:
            ax.plot(x, rep.unmanaged_tokens, color="0.6", lw=1.2, ls="--")
        ax.plot(x, [c.tokens for c in rep.calls], color="black", lw=1.6)
        ax.axhline(rep.max_tokens, color="red", lw=1.2)
        if rep.trigger_tokens:
            ax.axhline(rep.trigger_tokens, color="red", lw=0.8, ls=":")
        width = max(0.15, min(0.5, len(rep.calls) / 150))  # events of one call side by side
        for call in rep.calls:
            n = len(call.events)
            for k, event in enumerate(call.events):
                name = str(event.get("strategy", "?"))
                color = _COLORS.get(name, "#7f7f7f")
                used[name] = color
                ax.vlines(
                    call.index + 1 + (k - (n - 1) / 2) * width,
                    event.get("tokens_after", call.tokens),
                    event.get("tokens_before", call.tokens),
                    color=color,
                    lw=3,
                    alpha=0.85,
                )
        ax.set_title(rep.trajectory_id + (" (failed)" if rep.failed else ""), fontsize=10)
        ax.set_xlabel("model call")
        ax.set_ylabel("context tokens")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.25)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    handles = [Line2D([], [], color="black", lw=1.6, label="sent (managed)")]
    if any(r.compared for r in shown):
        handles.append(Line2D([], [], color="0.6", lw=1.2, ls="--", label="unmanaged"))
    handles.append(Line2D([], [], color="red", lw=1.2, label="budget (max_tokens)"))
    if any(r.trigger_tokens for r in shown):
        handles.append(Line2D([], [], color="red", lw=0.8, ls=":", label="trigger"))
    for name in sorted(used, key=_strategy_order):
        handles.append(
            Line2D([], [], color=used[name], lw=3, label=STRATEGY_LABELS.get(name, name))
        )
    title = "autocontext replay: context tokens per model call"
    if len(items) > len(shown):
        title += f" (first {len(shown)} of {len(items)} trajectories)"
    fig.suptitle(title, fontsize=11)
    fig.legend(handles=handles, loc="lower center", ncol=min(5, len(handles)), fontsize=8)
    legend_rows = -(-len(handles) // 5)
    fig.tight_layout(rect=(0, 0.04 + 0.035 * legend_rows, 1, 0.97))
    if path is not None:
        fig.savefig(path, format=plot_format(path), dpi=dpi)
    return fig
