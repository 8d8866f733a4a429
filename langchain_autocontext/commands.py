"""Editing the working messages: the operations, and the XML command protocol.

Two surfaces let the model edit its context: the LangChain tools
(:mod:`langchain_autocontext.tools`) and XML commands written in the text of its
own replies. Both go through the pure operations here, so they share their
semantics and their error messages:

- :func:`delete_op` removes a message; an AI message that called tools takes its
  tool results with it, so no call/result pair ever breaks;
- :func:`update_op` replaces a message's content, keeping its id and role (and
  the tool calls of an AI message, the ``tool_call_id`` of a tool result);
- :func:`pin_op` pins (or unpins) a message: no strategy compresses a pinned
  message; pins together may take ``config.pin_limit`` tokens.

Neither may touch the system message, the latest user message, the message that
issued the command, or a tool call still waiting for its result. Every refusal
is an :class:`Edit` with ``ok=False`` and a message telling the model what to do
instead: nothing here raises on bad input, and a refused edit changes nothing.

The XML protocol (:func:`parse_commands`, :func:`process_reply`)::

    <delete id="ID"/>                      (or <delete id="ID"></delete>)
    <update id="ID">new content</update>
    <user>the next user message</user>
    <pin id="ID"/>  <unpin id="ID"/>

Commands are read from the model's *own* reply only (never from tool outputs or
user messages). Text inside markdown code (fenced blocks, inline code spans,
indented code blocks), blockquotes, HTML comments or quotation marks is not a
command, nor is anything written with XML entities (``&lt;delete …/&gt;``): that is
how a model mentions a command without running it. Deletes run first,
then updates, pins, unpins, then ``<user>`` commands, each group in the order written.

Everything here is pure (no I/O): the engine archives the originals, records the
events and persists the result.

Over 600 lines because the three operations and the XML protocol share their refusal
rules and messages; the parser (code spans, entities) and :func:`process_reply` (about
140 lines) are most of it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from langchain_autocontext.config import AutoContextConfig
from langchain_autocontext.errors import shown_value
from langchain_autocontext.messages import (
    AUTONOMOUS_KEY,
    atomic_groups,
    autonomous_steps,
    context_edit,
    find_violations,
    is_pinned,
    latest_user_index,
    marker,
    message_chars,
    new_id,
    pending_call_index,
    pin,
    pinned_group_indices,
    pinned_tokens,
    text_of,
    tool_call_ids,
)
from langchain_autocontext.metadata import strip_message_tags, strip_tags
from langchain_autocontext.store import made_of
from langchain_autocontext.strategies.base import KIND_RECURSIVE
from langchain_autocontext.strategies.pipeline import pinned_now
from langchain_autocontext.tokens import resolve_counter
from langchain_autocontext.view import normalize_state, resolve_message_ref

__all__ = [
    "Edit",
    "ParsedCommands",
    "ReplyOutcome",
    "XmlCommand",
    "code_spans",
    "delete_op",
    "diff_updates",
    "parse_commands",
    "pin_op",
    "pinned_tokens",
    "process_reply",
    "protected_reasons",
    "update_op",
]


# --- the shared edit operations ------------------------------------------------------------
@dataclass
class Edit:
    """The outcome of one edit: the new working messages, or why nothing changed."""

    ok: bool
    text: str
    """What to tell the model (the outcome, or the error and what to do instead)."""
    messages: list[BaseMessage]
    """The working messages after the edit (the input unchanged when refused)."""
    originals: list[BaseMessage] = field(default_factory=list)
    """The messages as they were before the edit (archive them first)."""
    event: dict[str, Any] | None = None
    """The event to record in the store when ``ok``."""
    reason: str | None = None
    """Why it was refused: ``missing``, ``view-only``, ``ambiguous``, ``protected``,
    ``pair``, ``empty``, ``invalid``, ``summary``, ``limit``, ``pending``."""


def protected_reasons(
    messages: Sequence[BaseMessage], *, issuing_id: str | None = None
) -> dict[str, str]:
    """Id -> why that message may not be edited or deleted."""
    reasons: dict[str, str] = {}
    if messages and isinstance(messages[0], SystemMessage) and messages[0].id:
        reasons[messages[0].id] = "it is the system message"
    lu = latest_user_index(messages)
    if lu is not None and (lu_id := messages[lu].id):
        reasons[lu_id] = "it is the latest user message, the request you are working on"
    pc = pending_call_index(messages)
    if pc is not None and (pc_id := messages[pc].id):
        reasons[pc_id] = "it makes a tool call that has no result yet"
    if issuing_id:
        reasons[issuing_id] = "it is the message that issued this edit"
    return reasons


def _refuse(messages: Sequence[BaseMessage], reason: str, text: str) -> Edit:
    return Edit(False, text, list(messages), reason=reason)


def _resolve(
    messages: Sequence[BaseMessage], ref: Any, verb: str
) -> tuple[int | None, Edit | None]:
    if not isinstance(ref, str) or not ref.strip():
        return None, _refuse(
            messages,
            "missing",
            f"No message id given. To {verb} a message, pass its id as shown in its "
            '<metadata id="…"/> tag.',
        )
    idx, why = resolve_message_ref(messages, ref)
    if idx is not None:
        return idx, None
    ref = ref.strip()
    if why == "view-only":
        return None, _refuse(
            messages,
            "view-only",
            f"{ref!r} is a note, notice or instructions of the context manager, added to "
            "what you are shown; it is not a message of your context and cannot be edited.",
        )
    if why and why.startswith("ambiguous"):
        return None, _refuse(
            messages,
            "ambiguous",
            f"The id prefix {ref!r} matches several messages ({why.split(': ', 1)[1]}); "
            "write more characters of the id, or the full id.",
        )
    return None, _refuse(
        messages,
        "missing",
        f"No message with id {shown_value(ref)} in your context. Use an id exactly as the tag "
        "at the start of each message shows it (the short id or the full id). A message "
        "that left your context (summarized or offloaded) cannot be edited (with the "
        "search_history and reload_offloaded tools you can read it back).",
    )


def _event(op: str, via: str, **info: Any) -> dict[str, Any]:
    return {"kind": "context_edit", "strategy": f"{via}:{op}", "op": op, "via": via, **info}


def delete_op(
    messages: Sequence[BaseMessage],
    ref: Any,
    *,
    issuing_id: str | None = None,
    via: str = "tool",
) -> Edit:
    """Remove the working message ``ref`` names (with its tool results, for a caller).

    ``issuing_id`` is the message that issued the command (protected).
    """
    idx, refused = _resolve(messages, ref, "delete")
    if refused is not None:
        return refused
    assert idx is not None
    target = messages[idx]
    mid = str(target.id)
    reasons = protected_reasons(messages, issuing_id=issuing_id)
    if mid in reasons:
        return _refuse(messages, "protected", f"Message {mid} cannot be deleted: {reasons[mid]}.")
    if isinstance(target, ToolMessage):
        owner = next(
            (
                m
                for m in reversed(messages[:idx])
                if isinstance(m, AIMessage) and target.tool_call_id in tool_call_ids(m)
            ),
            None,
        )
        owner_text = f"message {owner.id}" if owner is not None else "the message that called it"
        return _refuse(
            messages,
            "pair",
            f"Message {mid} is the result of tool call {target.tool_call_id!r} made by "
            f"{owner_text}; deleting the result alone would leave that call unanswered. "
            f"Delete {owner_text} instead (its results go with it), or shorten this result "
            "with update_message.",
        )
    calls = set(tool_call_ids(target))
    removed = [target]
    if calls:
        removed += [m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id in calls]
    gone = {id(m) for m in removed}
    new = [m for m in messages if id(m) not in gone]
    if find_violations(new) and not find_violations(messages):  # pragma: no cover - defensive
        return _refuse(messages, "invalid", f"Deleting message {mid} would break a tool-call pair.")
    results = len(removed) - 1
    text = f"Deleted message {mid} ({target.type}"
    text += f", with its {results} tool result(s))." if results else ")."
    # what it removed: the original, or the version a user's edit (a fork) made of it
    text += " What it removed stays in the history: search_history finds it."
    return Edit(
        True,
        text,
        new,
        originals=removed,
        event=_event(
            "delete",
            via,
            message_ids=[str(m.id) for m in removed],
            chars_removed=sum(message_chars(m) for m in removed),
        ),
    )


def update_op(
    messages: Sequence[BaseMessage],
    ref: Any,
    content: Any,
    *,
    issuing_id: str | None = None,
    via: str = "tool",
    counter: Any = None,
    pin_limit: int | None = None,
) -> Edit:
    """Replace the content of the working message ``ref`` names (id and role kept).

    A pinned message keeps within the pin limit: with ``counter`` and ``pin_limit``,
    an update that would take the pins past ``pin_limit`` tokens is refused (pins are
    never compressed: an oversized pin would stop every later call).
    """
    idx, refused = _resolve(messages, ref, "update")
    if refused is not None:
        return refused
    assert idx is not None
    target = messages[idx]
    mid = str(target.id)
    reasons = protected_reasons(messages, issuing_id=issuing_id)
    if mid in reasons:
        return _refuse(messages, "protected", f"Message {mid} cannot be updated: {reasons[mid]}.")
    new_text = strip_tags(content) if isinstance(content, str) else None
    if not new_text or not new_text.strip():
        return _refuse(
            messages,
            "empty",
            f"The new content for message {mid} is empty. Give the text that should replace "
            "it, or delete the message with delete_message.",
        )
    if text_of(target) == new_text:
        return Edit(
            True, f"Message {mid} already has this content; nothing changed.", list(messages)
        )
    updated = made_of(context_edit(target, content=new_text), target)
    if (
        counter is not None
        and pin_limit is not None
        and idx in pinned_group_indices(messages)  # pinned, or paired with a pinned message
    ):
        over = _past_pin_limit(messages, idx, updated, counter, pin_limit)
        if over is not None:
            others, size = over
            how = "pinned" if is_pinned(target) else "paired with a pinned message"
            return _refuse(
                messages,
                "limit",
                f"Message {mid} is {how}, "
                f"and its new content ({size:,} tokens{_with_group(messages, idx)}) would take "
                f"the pins past their limit of {pin_limit:,} tokens ({others:,} in use by "
                "other pins). Write a shorter content, or unpin it first (pin_message with "
                "pinned=false)." + pinned_now(messages, counter),
            )
    new = list(messages)
    new[idx] = updated
    before, after = message_chars(target), message_chars(updated)
    return Edit(
        True,
        f"Updated message {mid} ({target.type}): {before:,} -> {after:,} characters. "
        "The text it replaced stays in the history: search_history finds it.",
        new,
        originals=[target],
        event=_event("update", via, message_ids=[mid], chars_before=before, chars_after=after),
    )


def _past_pin_limit(
    messages: Sequence[BaseMessage],
    idx: int,
    replacement: BaseMessage,
    counter: Any,
    limit: int,
) -> tuple[int, int] | None:
    """``(tokens the other pins protect, tokens of the tool-call group of idx)`` when
    ``messages`` with ``messages[idx]`` replaced by ``replacement`` would take what the
    pins protect (:func:`~.messages.pinned_tokens`: each pin with its tool-call group)
    past ``limit``; else None."""
    new = list(messages)
    new[idx] = replacement
    total = pinned_tokens(new, counter)
    if total <= limit:
        return None
    size = sum(counter.count_message(new[k]) for k in _group_of(new, idx))
    return total - size, size


def _group_of(messages: Sequence[BaseMessage], idx: int) -> range:
    """The indices of the tool-call group ``messages[idx]`` belongs to."""
    return next(range(a, b) for a, b in atomic_groups(messages) if a <= idx < b)


def _with_group(messages: Sequence[BaseMessage], idx: int) -> str:
    """`` with the tool call/results it is paired with`` when the pin of ``messages[idx]``
    protects more than the message itself."""
    return (
        " with the tool call and results paired with it"
        if len(_group_of(messages, idx)) > 1
        else ""
    )


def pin_op(
    messages: Sequence[BaseMessage],
    ref: Any,
    pinned: bool = True,
    *,
    counter: Any,
    limit: int,
    via: str = "tool",
) -> Edit:
    """Pin (or unpin) the working message ``ref`` names: no strategy summarizes,
    offloads or evicts a pinned message. Refused past ``limit`` pinned tokens."""
    verb = "pin" if pinned else "unpin"
    idx, refused = _resolve(messages, ref, verb)
    if refused is not None:
        return refused
    assert idx is not None
    target = messages[idx]
    mid = str(target.id)
    if isinstance(target, SystemMessage):
        return Edit(
            True,
            f"Message {mid} is the system message: it is always in your context, so it "
            "needs no pin; nothing changed.",
            list(messages),
        )
    if is_pinned(target) == pinned:
        state = "pinned" if pinned else "not pinned"
        return Edit(True, f"Message {mid} is already {state}; nothing changed.", list(messages))
    if pinned and (marker(target) or {}).get("kind") == KIND_RECURSIVE:
        return _refuse(
            messages,
            "summary",
            f"Message {mid} is the running summary of older messages: it is rewritten each "
            "time more of them are moved into it, so it cannot be pinned. Save what you need "
            "from it in your working context, or pin the messages that follow it.",
        )
    if pinned and idx == pending_call_index(messages):
        # its results are not in yet: the pin would keep them whatever their size, past
        # the limit (a pin of the message issuing it beside a large tool call stopped
        # every later call of the thread with ContextBudgetError)
        return _refuse(
            messages,
            "pending",
            f"Message {mid} makes a tool call that has no result yet; a pin keeps the "
            "results too, and their size is not known yet. Pin it once its results are in.",
        )
    if pinned:
        over = _past_pin_limit(messages, idx, pin(target), counter, limit)
        if over is not None:
            used, size = over
            return _refuse(
                messages,
                "limit",
                f"Message {mid} ({size:,} tokens{_with_group(messages, idx)}) was not pinned: "
                f"pins may take {limit:,} tokens and {used:,} are in use. Unpin a message "
                "first (pinned=false), or save the part that matters in your working context."
                + pinned_now(messages, counter),
            )
    new = list(messages)
    new[idx] = pin(target, pinned)
    done = "Pinned" if pinned else "Unpinned"
    note = " It stays in your context verbatim until you unpin it." if pinned else ""
    return Edit(
        True,
        f"{done} message {mid}.{note}",
        new,
        originals=[target],
        event=_event(verb, via, message_ids=[mid]),
    )


def diff_updates(old: Sequence[BaseMessage], new: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The ``add_messages`` update that turns ``old`` into ``new``.

    Removed ids become ``RemoveMessage`` s, changed messages replace theirs in place
    (same id), and new messages are appended (they must come after every kept one).
    """
    new_ids = {m.id for m in new}
    old_by_id = {m.id: m for m in old}
    ops: list[BaseMessage] = [RemoveMessage(id=str(m.id)) for m in old if m.id not in new_ids]
    seen_new = False
    for m in new:
        prev = old_by_id.get(m.id)
        if prev is None:
            seen_new = True
            ops.append(m)
        else:
            if seen_new:
                raise ValueError("diff_updates: a new message precedes a kept one")
            if prev is not m:
                ops.append(m)
    return ops


# --- the XML protocol ---------------------------------------------------------------------
@dataclass(frozen=True)
class XmlCommand:
    """One command found in a reply."""

    op: Literal["delete", "update", "user", "pin", "unpin"]
    id: str | None
    content: str | None
    start: int
    end: int
    raw: str


@dataclass
class ParsedCommands:
    """Commands (in the order written) and the malformed ones, as error texts."""

    commands: list[XmlCommand] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Spans of every command-like tag run, valid or not (removed from the reply)."""


_FENCE_RE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})", re.M)
_OPEN_RE = re.compile(r"<\s*(delete|update|user|pin|unpin)\b([^<>]*)>", re.I)
_ATTR_RE = re.compile(r"""\s*([A-Za-z_][\w.-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_UNQUOTED_RE = re.compile(r"""[A-Za-z_][\w.-]*\s*=\s*[^"'\s]""")


#: Markdown a model quotes or comments out, never what it means to do: HTML comments,
#: blockquote lines, and indented code blocks (4 spaces or a tab after a blank line that
#: does not end a list item).
_COMMENT_RE = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_QUOTE_LINE_RE = re.compile(r"^[ \t]{0,3}>.*$", re.M)
_INDENTED_RE = re.compile(r"(?:^|\n)[ \t]*\n((?:(?: {4}|\t)[^\n]*(?:\n|\Z)|[ \t]*\n)+)")
_LIST_ITEM_RE = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]")
#: Quotation marks around a command that is only mentioned ("type <delete id="a"/>").
_QUOTE_PAIRS = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019", "\u00ab": "\u00bb"}


def quoted_spans(text: str) -> list[tuple[int, int]]:
    """Spans a model quotes or comments out: HTML comments, blockquote lines and
    indented code blocks (commands there are shown, not meant)."""
    spans = [m.span() for m in _COMMENT_RE.finditer(text)]
    spans += [m.span() for m in _QUOTE_LINE_RE.finditer(text)]
    for m in _INDENTED_RE.finditer(text):
        before = text[: m.start(1)].rstrip("\n \t")
        last_line = before.rsplit("\n", 1)[-1]
        if not _LIST_ITEM_RE.match(last_line):  # not the continuation of a list item
            spans.append(m.span(1))
    return spans


def code_spans(text: str) -> list[tuple[int, int]]:
    """Spans of markdown code: fenced blocks (``` or ~~~) and inline code spans."""
    spans: list[tuple[int, int]] = []
    pos = 0
    n = len(text)
    fences: list[tuple[int, int]] = []
    while pos < n:
        m = _FENCE_RE.search(text, pos)
        if m is None:
            break
        fence = m.group(1)
        line_end = text.find("\n", m.end())
        body = n if line_end < 0 else line_end + 1
        close = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        c = close.search(text, body)
        end = n if c is None else c.end()
        fences.append((m.start(), end))
        pos = max(end, m.end())
    spans.extend(fences)
    # inline code: a run of n backticks up to the next run of exactly n, outside fences
    i = 0
    fi = 0
    while i < n:
        while fi < len(fences) and fences[fi][1] <= i:
            fi += 1
        if fi < len(fences) and fences[fi][0] <= i:
            i = fences[fi][1]
            continue
        if text[i] != "`":
            i += 1
            continue
        j = i
        while j < n and text[j] == "`":
            j += 1
        run = j - i
        k = j
        found = -1
        while True:
            k = text.find("`" * run, k)
            if k < 0:
                break
            e = k
            while e < n and text[e] == "`":
                e += 1
            if e - k == run:
                found = e
                break
            k = e
        if found < 0:
            i = j
            continue
        spans.append((i, found))
        i = found
    return sorted(spans)


def _mask(text: str, spans: Sequence[tuple[int, int]]) -> str:
    chars = list(text)
    for a, b in spans:
        for k in range(a, b):
            if chars[k] != "\n":
                chars[k] = " "
    return "".join(chars)


def _attrs(raw: str) -> tuple[dict[str, str], str]:
    attrs: dict[str, str] = {}
    pos = 0
    while True:
        m = _ATTR_RE.match(raw, pos)
        if m is None:
            break
        attrs[m.group(1).lower()] = m.group(2) if m.group(2) is not None else m.group(3)
        pos = m.end()
    return attrs, raw[pos:].strip()


def _short(raw: str) -> str:
    raw = " ".join(raw.split())
    return raw if len(raw) <= 80 else raw[:77] + "..."


def parse_commands(text: str) -> ParsedCommands:
    """Find the commands in the text of a reply (see the module docstring)."""
    out = ParsedCommands()
    if "<" not in text:
        return out
    masked = _mask(text, code_spans(text) + quoted_spans(text))
    pos = 0
    while True:
        m = _OPEN_RE.search(masked, pos)
        if m is None:
            break
        op = m.group(1).lower()
        inner = m.group(2)
        self_closing = inner.rstrip().endswith("/")
        attrs, junk = _attrs(inner.rstrip().rstrip("/") if self_closing else inner)
        start, end = m.start(), m.end()
        raw_open = text[start:end]
        error: str | None = None
        content: str | None = None
        if _UNQUOTED_RE.match(junk):
            error = f'{_short(raw_open)} is not a valid command: quote the id, as in id="ID"'
        elif junk or set(attrs) - {"id"}:
            error = (
                f'{_short(raw_open)} is not a valid command: only an id="…" attribute is allowed'
            )
        elif op in ("delete", "update", "pin", "unpin") and not attrs.get("id", "").strip():
            error = f'{_short(raw_open)} has no id: write <{op} id="ID"…>'
        elif op == "user" and attrs:
            error = f"{_short(raw_open)}: <user> takes no attributes"
        elif op in ("delete", "pin", "unpin"):
            if not self_closing:
                close = re.compile(rf"\s*<\s*/\s*{op}\s*>", re.I).match(masked, end)
                if close is None:
                    error = f'{_short(raw_open)} is not closed: write <{op} id="ID"/>'
                else:
                    end = close.end()
        else:
            if self_closing:
                error = f"{_short(raw_open)} has no content: write <{op}…>content</{op}>"
            else:
                close = re.compile(rf"<\s*/\s*{op}\s*>", re.I).search(masked, end)
                if close is None:
                    error = f"{_short(raw_open)} has no closing </{op}>"
                else:
                    content = text[end : close.start()].strip("\n")
                    end = close.end()
                    if not content.strip():
                        error = f"<{op}> command with empty content: nothing was done"
        opening = text[start - 1] if start else ""
        if opening in _QUOTE_PAIRS and text[end : end + 1] == _QUOTE_PAIRS[opening]:
            pos = max(end, m.start() + 1)  # between quotation marks: mentioned, not meant
            continue
        out.spans.append((start, end))
        if error:
            out.errors.append(f"Malformed command: {error}.")
        else:
            out.commands.append(
                XmlCommand(
                    op=op,  # type: ignore[arg-type]
                    id=attrs.get("id", "").strip() or None,
                    content=content,
                    start=start,
                    end=end,
                    raw=text[start:end],
                )
            )
        pos = max(end, m.start() + 1)
    return out


@dataclass
class ReplyOutcome:
    """What :func:`process_reply` decided for the model's last reply."""

    messages: list[BaseMessage]
    """The working messages after the reply was processed."""
    changed: bool
    originals: list[BaseMessage] = field(default_factory=list)
    """Messages to archive before persisting: the reply as the model wrote it (its copied
    metadata tags stripped, as they are from everything stored) and every original its
    commands edited."""
    events: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    """The new ``autocontext`` state dict."""
    state_changed: bool = False
    errors: list[str] = field(default_factory=list)
    user_messages: list[HumanMessage] = field(default_factory=list)
    """Next user messages supplied by ``<user>`` commands (appended to ``messages``)."""

    def update(self, old: Sequence[BaseMessage]) -> dict[str, Any]:
        """The LangGraph state update (``{}`` when nothing changed)."""
        out: dict[str, Any] = {}
        if self.changed:
            out["messages"] = diff_updates(old, self.messages)
        if self.state_changed:
            out["autocontext"] = self.state
        return out


def _map_text(message: BaseMessage, fn: Any) -> BaseMessage:
    """Apply ``fn(text) -> text`` to the message's text (str content or text blocks)."""
    content = message.content
    if isinstance(content, str):
        new = fn(content)
        return message if new == content else message.model_copy(update={"content": new})
    blocks: list[Any] = []
    changed = False
    for block in content:
        if (
            isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ):
            new_text = fn(block["text"])
            if new_text != block["text"]:
                changed = True
                block = {**block, "text": new_text}
        elif isinstance(block, str):
            new_text = fn(block)
            changed = changed or new_text != block
            block = new_text
        blocks.append(block)
    return message.model_copy(update={"content": blocks}) if changed else message


def process_reply(
    messages: Sequence[BaseMessage],
    *,
    config: AutoContextConfig,
    state: Mapping[str, Any] | None = None,
    counter: Any = None,
) -> ReplyOutcome:
    """Strip copied metadata tags from the last reply and apply its XML commands.

    ``messages`` are the working messages, the model's reply last. Commands run
    only when ``config.xml_commands`` is on. Each applied command is replaced in
    the reply by a short receipt (``[deleted ID]``, ``[updated ID]``); a malformed
    or refused command leaves its text as written and is reported to the model on
    its next turn (``state["command_errors"]``). ``<user>`` commands append the
    next user message, at most ``config.max_autonomous_steps`` in a row (each carries
    its step number, :data:`~langchain_autocontext.messages.AUTONOMOUS_KEY`).
    """
    msgs = list(messages)
    st = normalize_state(state)
    new_state = dict(st)
    if not msgs or not isinstance(msgs[-1], AIMessage):
        return ReplyOutcome(msgs, False, state=st)
    raw = msgs[-1]
    reply = strip_message_tags(raw)
    errors: list[str] = []
    events: list[dict[str, Any]] = []
    originals: list[BaseMessage] = []
    users: list[HumanMessage] = []
    working = [*msgs[:-1], reply]

    if config.xml_commands:
        receipts: dict[tuple[int, int], str] = {}
        found: list[XmlCommand] = []
        parsed_spans: list[tuple[int, int]] = []

        def collect(text: str) -> str:
            parsed = parse_commands(text)
            errors.extend(parsed.errors)
            found.extend(parsed.commands)
            parsed_spans.extend(parsed.spans)
            return text

        _map_text(reply, collect)
        issuing = str(reply.id) if reply.id else None
        ordered = [c for op in ("delete", "update", "pin", "unpin") for c in found if c.op == op]
        pin_counter = resolve_counter(counter)
        # each id names the message the model saw by it: resolved against the messages
        # as shown, not as the earlier commands left them (a delete can make a later
        # message's short id the one the deleted message was shown by)
        shown = list(working)
        for cmd in ordered:
            idx, unresolved = _resolve(shown, cmd.id, cmd.op)
            if unresolved is not None:
                errors.append(f"{_short(cmd.raw)}: {unresolved.text}")
                continue
            assert idx is not None
            ref = str(shown[idx].id)
            if cmd.op == "delete":
                edit = delete_op(working, ref, issuing_id=issuing, via="xml")
            elif cmd.op in ("pin", "unpin"):
                edit = pin_op(
                    working,
                    ref,
                    cmd.op == "pin",
                    counter=pin_counter,
                    limit=config.pin_limit,
                    via="xml",
                )
            else:
                edit = update_op(
                    working,
                    ref,
                    cmd.content,
                    issuing_id=issuing,
                    via="xml",
                    counter=pin_counter,
                    pin_limit=config.pin_limit,
                )
            if edit.ok:
                working = edit.messages
                originals.extend(edit.originals)
                if edit.event:
                    events.append(edit.event)
                    done = {"pin": "pinned", "unpin": "unpinned"}.get(cmd.op, f"{cmd.op}d")
                    receipts[(cmd.start, cmd.end)] = f"[{done} {cmd.id}]"
                else:
                    receipts[(cmd.start, cmd.end)] = f"[{cmd.op}: no change to {cmd.id}]"
            else:
                errors.append(f"{_short(cmd.raw)}: {edit.text}")
        user_cmds = [c for c in found if c.op == "user"]
        if user_cmds:
            # counted on the messages, which every surface keeps (a state schema without
            # the package's key drops the state between calls: the loop ran unbounded)
            steps = autonomous_steps(working)
            if tool_call_ids(reply):
                errors.append(
                    "<user> was not applied: your reply also calls tools; write <user> only in "
                    "a reply without tool calls."
                )
            elif steps >= config.max_autonomous_steps:
                errors.append(
                    f"<user> was not applied: the limit of {config.max_autonomous_steps} "
                    "autonomous steps in a row is reached, so the run waits for the user."
                )
            else:
                text = "\n\n".join(strip_tags(c.content or "") for c in user_cmds).strip()
                human = HumanMessage(
                    text, id=new_id(), additional_kwargs={AUTONOMOUS_KEY: steps + 1}
                )
                users.append(human)
                new_state["autonomous_pending"] = True
                for c in user_cmds:
                    receipts[(c.start, c.end)] = ""
                events.append(
                    {
                        "kind": "context_edit",
                        "strategy": "xml:user",
                        "op": "user",
                        "via": "xml",
                        "message_ids": [human.id],
                        "autonomous_step": steps + 1,
                    }
                )

        if receipts:

            def clean(text: str) -> str:
                parsed = parse_commands(text)
                out, last = [], 0
                for c in parsed.commands:
                    if (c.start, c.end) in receipts:
                        out.append(text[last : c.start])
                        out.append(receipts[(c.start, c.end)])
                        last = c.end
                out.append(text[last:])
                return re.sub(r"\n{3,}", "\n\n", "".join(out)).strip()

            idx = next(i for i, m in enumerate(working) if m.id == reply.id)
            cleaned = _map_text(working[idx], clean)
            if not text_of(cleaned).strip() and not tool_call_ids(cleaned):
                done = ", ".join(r for r in receipts.values() if r) or "next user message set"
                cleaned = cleaned.model_copy(update={"content": f"[context commands: {done}]"})
            if cleaned is not working[idx]:
                working[idx] = made_of(context_edit(cleaned), working[idx])

    if errors:
        new_state["command_errors"] = [*(st.get("command_errors") or []), *errors]
    working.extend(users)
    changed = len(working) != len(msgs) or any(
        a is not b for a, b in zip(working, msgs, strict=False)
    )
    if changed:
        # the reply as the model wrote it, less the tags it copied: those are never stored
        # (kept as raw, the history held the reply twice, tagged and as the state has it)
        originals = [reply, *originals]
    return ReplyOutcome(
        messages=working,
        changed=changed,
        originals=originals,
        events=events,
        state=new_state,
        state_changed=new_state != st,
        errors=errors,
        user_messages=users,
    )
