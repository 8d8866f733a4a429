"""What every strategy shares: the pass context, jobs, and the replacement messages.

A strategy never performs I/O. It looks at the working messages and returns
:class:`Job` s: spans to replace, each with an optional summary request. The
pipeline offloads each span's originals *first*, runs the summaries (concurrently),
and only then builds the replacements, so a crash in between loses nothing.

Over 600 lines because the rules of the messages the strategies write (their kinds,
roles, notes, and where a summary stands among the messages it replaced) belong with
the context and the jobs that make them: every strategy and the engine read them
here, and split across modules each rule would be stated twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from langchain_autocontext.messages import (
    KIND_OFFLOADED,
    KIND_SUMMARIZED,
    atomic_groups,
    group_start,
    is_user_turn,
    latest_user_index,
    mark,
    marker,
    message_chars,
    new_id,
    pending_call_index,
    pinned_group_indices,
    result_tool_name,
    sent_calls,
    text_of,
    tool_call_ids,
    tool_call_names,
)
from langchain_autocontext.store import offload_ref

if TYPE_CHECKING:
    from langchain_autocontext.config import AutoContextConfig
    from langchain_autocontext.summarizers import SummaryRequest
    from langchain_autocontext.tokens import TokenCounter

__all__ = [
    "SUMMARY_KINDS",
    "Job",
    "JobOutput",
    "PassContext",
    "Strategy",
    "clip_text",
    "is_summary",
    "markers",
    "offload_note",
    "place_summaries",
    "replacement_message",
    "shrink_args",
    "summarizer_input",
    "summarizer_view",
    "summary_body",
    "summary_offload_ids",
]

#: Marker kinds of messages the package writes (KIND_OFFLOADED and KIND_SUMMARIZED, a
#: message rewritten in place, are :mod:`~langchain_autocontext.messages`').
KIND_TOOL_RUN = "tool_run"
KIND_ROUND = "round_summary"
KIND_CURRENT = "current_round_summary"
KIND_RECURSIVE = "summary"  # the MemGPT recursive summary, first after the system message
#: Kinds whose text is a summary: carried over as it is, never summarized again.
SUMMARY_KINDS = frozenset(
    {KIND_SUMMARIZED, KIND_TOOL_RUN, KIND_ROUND, KIND_CURRENT, KIND_RECURSIVE}
)


def is_summary(message: BaseMessage) -> bool:
    """Whether ``message`` is a summary the package wrote."""
    return (marker(message) or {}).get("kind") in SUMMARY_KINDS


def _cut(text: str, chars: int, keep: str) -> tuple[str, str]:
    """``text`` cut to about ``chars`` characters from the kept end, and the separator
    between what was dropped and what is kept: at a line boundary when one is near
    (``"\n"``), else at a word boundary (``" "``) so no identifier is cut in two,
    else (one long word) at the character."""
    if keep == "end":
        cut = text[-chars:]
        if "\n" in cut[: len(cut) // 4]:
            return cut.split("\n", 1)[1], "\n"  # start at a whole line
        if not text[-chars - 1 : -chars].isspace() and not cut[:1].isspace():
            space = re.search(r"\s", cut)
            if space is not None:
                return cut[space.end() :].lstrip(), " "
        return cut.lstrip(), " "
    cut = text[:chars]
    if "\n" in cut[-len(cut) // 4 :]:
        return cut.rsplit("\n", 1)[0], "\n"  # end at a whole line
    if not text[chars : chars + 1].isspace() and not cut[-1:].isspace():
        at = max(cut.rfind(" "), cut.rfind("\t"))
        if at > 0:
            return cut[:at].rstrip(), " "
    return cut.rstrip(), " "


def clip_text(text: str, max_tokens: int, counter: TokenCounter, *, keep: str = "start") -> str:
    """``text`` cut at line (else word, else character) boundaries to at most
    ``max_tokens``, with ``…`` where text was dropped.

    ``keep="end"`` drops from the front (the oldest lines of a recursive summary): the
    result starts with ``…``; else it ends with ``…``. A text too short for any of it
    with the marker is ``""``. A few proportional cuts, each one count: linear in the
    text, never a loop per line.
    """
    tokens = counter.count_text(text)
    if tokens <= max_tokens:
        return text
    if max_tokens <= 0:
        return ""
    body = text
    clipped = text
    while tokens > max_tokens and body:
        chars = max(0, int(len(body) * max_tokens / tokens * 0.95) - 1)
        if not chars:
            return ""
        body, sep = _cut(body, chars, keep)
        clipped = f"…{sep}{body}" if keep == "end" else f"{body}{sep}…"
        tokens = counter.count_text(clipped)
    return clipped if body and tokens <= max_tokens else ""


@dataclass(frozen=True)
class JobOutput:
    """What the pipeline hands back to a job's ``build``."""

    offload_id: str
    summary: str | None
    span_tokens: int
    #: How the replacement names the offload (:func:`offload_note`; empty without one).
    note: str = ""


@dataclass
class Job:
    """Replace ``messages[start:end]`` with what ``build`` returns.

    ``request`` asks the summarizer for a text (``None``: no summary needed).
    ``preview`` is stored with the offload record.
    """

    start: int
    end: int
    strategy: str
    build: Callable[[JobOutput], list[BaseMessage]]
    request: SummaryRequest | None = None
    preview: str = ""
    originals: list[BaseMessage] | None = None  # what to offload (default: the span)
    offload: bool = True  # False: the originals are in another job's offload of the same pass
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PassContext:
    """A read-only view of the working messages for one strategy pass."""

    messages: list[BaseMessage]
    config: AutoContextConfig
    counter: TokenCounter
    tokens: int
    target_tokens: int
    target_messages: int
    #: Names of the strategies that run after this one in the same pass.
    later: frozenset[str] = frozenset()
    #: ``False`` for the last resorts: the protected tail may then be compressed
    #: too (everything but the freshest group), rather than fail the call.
    keep_tail: bool = True
    #: What can never be compressed (system prompt, tool schemas, latest user
    #: message, a pending call): the protected tail is a share of the rest.
    floor_tokens: int = 0
    #: Tokens each message's metadata tag adds as sent (aligned with ``messages``;
    #: empty without tags). Removing a message frees its tag too; a replacement
    #: brings one of its own (:attr:`tag_tokens`).
    tag_costs: Sequence[int] = ()
    #: Ids of messages sent with this call only (another middleware's retrieved
    #: documents, see :meth:`~langchain_autocontext.engine.ContextEngine.compress`):
    #: compressible like any other, never the latest user message nor a round's start.
    request_only: frozenset[str] = frozenset()
    #: Indices of what is kept as a pin while there is room (the latest plan note,
    #: another library's summary standing for the request: the pipeline's
    #: :func:`~langchain_autocontext.strategies.pipeline.soft_pins`): protected as
    #: pinned messages are, so each strategy leaves it verbatim.
    soft_pins: frozenset[int] = frozenset()

    # The messages do not change during a pass: what is found by scanning them is
    # found once (``protected`` runs per message; a scan per call made a pass over a
    # long history quadratic: 30 s for the first call of a 10,000-message thread).
    @cached_property
    def system_index(self) -> int | None:
        return 0 if self.messages and isinstance(self.messages[0], SystemMessage) else None

    @cached_property
    def body_start(self) -> int:
        """First index after the system message and the recursive summary."""
        i = 0 if self.system_index is None else 1
        if i < len(self.messages) and (marker(self.messages[i]) or {}).get("kind") == (
            KIND_RECURSIVE
        ):
            i += 1
        return i

    @cached_property
    def latest_user(self) -> int | None:
        return latest_user_index(self.messages, self.request_only)

    @cached_property
    def pending(self) -> int | None:
        return pending_call_index(self.messages)

    @property
    def history_end(self) -> int:
        """End of what strategies 1-3 treat as history.

        Everything before the latest user message, and in a long single round
        (coding agents) everything older than the last ``last_keep`` messages too.
        """
        n = len(self.messages)
        lu = self.latest_user
        end = max(lu if lu is not None else self.body_start, n - self.config.last_keep)
        return min(group_start(self.messages, end), self.tail_start)

    @property
    def fresh_start(self) -> int:
        """Start of the freshest tool results: the last group, when it is a tool call
        with its results (what the model is about to read); else the end."""
        n = len(self.messages)
        start = group_start(self.messages, n - 1) if n else 0
        if n and start < n - 1 and tool_call_ids(self.messages[start]):
            return start
        return n

    @cached_property
    def tail_start(self) -> int:
        """Start of the protected tail: the newest whole groups whose tokens add up to
        at most ``keep_ratio`` of the room the target leaves beside what can never be
        compressed (the freshest group always belongs).

        No strategy summarizes or offloads a message from here on (only the last
        resorts, ``keep_tail=False``, may reach into it, down to the freshest group).
        The tail is the agent's working set: what it read and did last is what its
        next step most often reuses.
        """
        n = len(self.messages)
        groups = atomic_groups(self.messages, self.body_start, n)
        if not groups:
            return n
        fresh = min(groups[-1][0], self.fresh_start)
        if not self.keep_tail:
            return fresh
        budget = int(max(0, self.target_tokens - self.floor_tokens) * self.config.keep_ratio)
        # Over the message target (msg_threshold), the tail must leave that target
        # reachable: a chat of short messages fitted whole in a tail sized in tokens, and
        # compaction by message count removed nothing (241 messages stayed over a
        # threshold of 50). Room for the messages before the body and one summary.
        most = len(self.messages) if not self.over_messages else self.target_messages
        most -= self.body_start + 1
        start, used = groups[-1][0], self.tokens_of(*groups[-1])
        for a, b in reversed(groups[:-1]):
            used += self.tokens_of(a, b)
            if used > budget or n - a > most:
                break
            start = a
        return min(start, fresh)

    @property
    def need_tokens(self) -> int:
        """Tokens to free to reach the target (0 when already there)."""
        return max(0, self.tokens - self.target_tokens)

    @property
    def need_messages(self) -> int:
        """Messages to remove to reach the message target (0 when already there)."""
        return max(0, len(self.messages) - self.target_messages)

    def take_until_target(self, candidates: Sequence[tuple[Job, int, int]]) -> list[Job]:
        """The first of ``candidates`` (oldest first) that together reach the target.

        Each candidate is ``(job, tokens it frees, messages it removes)``. Compression
        stops at the target rather than below it: what is not needed to get there
        stays verbatim (and the provider's prompt cache keeps more of its prefix).
        While the message count is still over its target, a candidate that only frees
        tokens is taken too: masking then reaches every tool result outside the
        protected tail, which is what observation masking does, and stopping it at the
        token target instead kept no more of what the next actions reuse for more cost
        (``docs/performance.md``).
        """
        need_t, need_m = self.need_tokens, self.need_messages
        jobs: list[Job] = []
        for job, freed, removed in candidates:
            if need_t <= 0 and need_m <= 0:
                break
            if freed <= 0 and (need_m <= 0 or removed <= 0):
                continue  # would not move us towards what is still needed
            jobs.append(job)
            need_t -= freed
            need_m -= removed
        return jobs

    def summary_cap(self, running: bool = False) -> int:
        """The most tokens one summary may take: ``summary_max_tokens``, and never more
        than an eighth of the room the target leaves beside what can never be
        compressed (a summary must not crowd out the working set); at least 48.

        ``running``: one of the two summaries that grow by carrying what they absorb
        to their cap and live side by side, the recursive summary (strategy 7) and
        the current round's (strategy 6). Each of those gets a sixteenth, so together
        they stay within the eighth and the rest of the room stays verbatim."""
        room = max(0, self.target_tokens - self.floor_tokens)
        return max(48, min(self.config.summary_max_tokens, room // (16 if running else 8)))

    def protected(self, i: int) -> bool:
        """System message, the latest user message, a pending last tool call, and
        pinned messages (with the tool calls or results paired with them; the latest
        plan note while it is kept as a pin)."""
        return (
            i == self.system_index
            or i == self.latest_user
            or i == self.pending
            or i in self.pinned_indices
        )

    def offload_options(self, originals: Sequence[BaseMessage]) -> dict[str, Any]:
        """The options of :meth:`~langchain_autocontext.store.OffloadStore.offload` for
        ``originals``: when all are request-only (sent anew with every call), one record
        per content (``reuse``), flagged ``request_only`` in its ``extra``."""
        if not self.request_only or any(m.id not in self.request_only for m in originals):
            return {}
        return {"reuse": True, "extra": {"request_only": True}}

    @cached_property
    def pinned_indices(self) -> frozenset[int]:
        """Indices of pinned messages and of every message in their tool-call group
        (a pinned call keeps its results, a pinned result its call), and of what is
        kept as a pin while there is room (:attr:`soft_pins`)."""
        return frozenset(pinned_group_indices(self.messages, self.body_start)) | self.soft_pins

    @cached_property
    def kept_results(self) -> frozenset[int]:
        """Indices of the results of ``config.keep_tool_results`` tools (named by the
        result, or by the call it answers when the result carries no name): the
        one-message steps (2, 3, 5) leave them verbatim."""
        keep = set(self.config.keep_tool_results)
        if not keep:
            return frozenset()
        names = tool_call_names(self.messages)
        return frozenset(
            i
            for i, m in enumerate(self.messages)
            if isinstance(m, ToolMessage) and result_tool_name(m, names) in keep
        )

    def spans_between_protected(self, start: int, end: int) -> list[tuple[int, int]]:
        """``[start, end)`` cut around protected messages: the unprotected runs."""
        spans: list[tuple[int, int]] = []
        a = start
        for k in range(start, end):
            if self.protected(k):
                if k > a:
                    spans.append((a, k))
                a = k + 1
        if end > a:
            spans.append((a, end))
        return spans

    @property
    def over_tokens(self) -> bool:
        return self.tokens > self.target_tokens

    @property
    def over_messages(self) -> bool:
        return len(self.messages) > self.target_messages

    def cost(self, i: int) -> int:
        """Tokens message ``i`` takes as sent: its own and its tag's."""
        tag = self.tag_costs[i] if i < len(self.tag_costs) else 0
        return self.counter.count_message(self.messages[i]) + tag

    def tokens_of(self, start: int, end: int) -> int:
        """Tokens ``messages[start:end]`` take as sent (tags included)."""
        return sum(self.cost(i) for i in range(start, end))

    @cached_property
    def tag_tokens(self) -> int:
        """Tokens of the tag a new message (a summary replacing a span) brings: the
        largest tag in the context (0 without tags)."""
        return max(self.tag_costs, default=0)

    def is_large(self, i: int) -> bool:
        return message_chars(self.messages[i]) > self.config.large_payload_threshold

    def summary_job(
        self,
        start: int,
        end: int,
        name: str,
        build: Callable[[JobOutput], list[BaseMessage]],
        *,
        strategy: str,
        preview: str,
        messages: Sequence[BaseMessage] | None = None,
        extra: dict[str, Any] | None = None,
        running: bool = False,
    ) -> Job:
        """A job replacing ``messages[start:end]`` with a summary of about the ratio's size.

        ``messages`` is what the summarizer reads (default: the span itself). Summaries
        the package wrote earlier are not read again: their text is carried into the
        new summary as it is (each original token is summarized at most once).
        ``running``: see :meth:`summary_cap`.
        """
        from langchain_autocontext.summarizers import SummaryRequest

        source = list(self.messages[start:end] if messages is None else messages)
        chars = self.config.offload_single_preview
        to_read = summarizer_input([m for m in source if not is_summary(m)], chars)
        carried = [summary_body(m) for m in source if is_summary(m)]
        read_tokens = sum(self.counter.count_message(m) for m in to_read)
        cap = self.summary_cap(running)
        request = (
            SummaryRequest(
                messages=to_read,
                strategy=strategy,
                max_tokens=cap,
                target_tokens=self.summary_budget(read_tokens, running=running),
            )
            if to_read and read_tokens
            else None
        )
        counter = self.counter

        def build_with_carried(out: JobOutput) -> list[BaseMessage]:
            if carried:
                text = "\n".join(p for p in (*carried, out.summary or "") if p.strip())
                out = replace(out, summary=clip_text(text, cap, counter, keep="end"))
            return build(out)

        return Job(
            start,
            end,
            name,
            build_with_carried,
            request=request,
            preview=preview[:200],
            extra=extra or {},
        )

    def expected_summary(self, span_tokens: int, running: bool = False) -> int:
        """Tokens a summary of ``span_tokens`` tokens is expected to take, header and
        tag included."""
        return self.summary_budget(span_tokens, running=running) + 64 + self.tag_tokens

    def summary_budget(
        self, span_tokens: int, ratio: float | None = None, *, running: bool = False
    ) -> int:
        """Target size of a summary of ``span_tokens`` tokens."""
        ratio = self.config.current_round_compression_ratio if ratio is None else ratio
        return max(48, min(self.summary_cap(running), int(span_tokens * ratio)))

    def worth_summarizing(self, span_tokens: int, running: bool = False) -> bool:
        """Whether a summary of ``span_tokens`` tokens can be smaller than the span:
        at least ``min_summary_span_tokens``, and twice the summary it would get plus
        the replacement's header (a summary is never larger than what it replaces)."""
        return span_tokens >= max(
            self.config.min_summary_span_tokens,
            2 * self.summary_budget(span_tokens, running=running) + 64,
        )


class Strategy(Protocol):
    """One compression step."""

    @property
    def name(self) -> str:
        """The strategy's name, in events and in what it writes. Read only, so that a
        class attribute (``name = "mine"``), an instance attribute, a frozen dataclass
        field or a property conforms."""
        ...

    def plan(self, ctx: PassContext) -> list[Job]:
        """Jobs that would shrink the context (empty when the strategy cannot help)."""
        ...


# --- replacement builders -----------------------------------------------------------
def summarizer_view(message: BaseMessage, preview_chars: int) -> BaseMessage:
    """What the summarizer reads of a working message.

    A masked (offloaded) message is read as its preview alone: the reload note is for
    the model. Long string arguments of tool calls (a file written through a heredoc,
    a long script) are read as their first ``preview_chars`` characters, the preview
    an offload leaves: a summary records which action was taken, not its payload. The
    originals stay whole in the offload chain of the summary that replaces them.
    """
    info = marker(message) or {}
    if info.get("kind") == KIND_OFFLOADED and isinstance(message.content, str):
        preview = message.content.rsplit("\n[Offloaded ", 1)[0]
        return message.model_copy(update={"content": f"{preview} [rest offloaded]"})
    if isinstance(message, AIMessage) and sent_calls(message):
        update = shrunk_calls(message, max(preview_chars, 32))
        if update != {
            "tool_calls": message.tool_calls,
            "invalid_tool_calls": message.invalid_tool_calls,
        }:
            return message.model_copy(update=update)
    return message


def summarizer_input(messages: Sequence[BaseMessage], preview_chars: int) -> list[BaseMessage]:
    """The messages a summarizer reads for a span: each as :func:`summarizer_view` has
    it, and provider tool-call ids (``call_00_q49iXkS1…``, ~15 tokens each, twice per
    call) renamed ``c1``, ``c2``… consistently across calls and results; the
    summary never needs them, and the originals keep theirs in the offload."""
    names: dict[str, str] = {}

    def short(call_id: str | None) -> str | None:
        if not call_id:
            return call_id
        return names.setdefault(call_id, f"c{len(names) + 1}")

    out: list[BaseMessage] = []
    for m in messages:
        v = summarizer_view(m, preview_chars)
        if isinstance(v, AIMessage) and sent_calls(v):
            # the calls whose arguments did not parse too: the summary should know one
            # was attempted, and their results are renamed with the rest
            v = v.model_copy(
                update={
                    key: [{**tc, "id": short(tc.get("id"))} for tc in getattr(v, key)]
                    for key in ("tool_calls", "invalid_tool_calls")
                }
            )
        elif isinstance(v, ToolMessage):
            v = v.model_copy(update={"tool_call_id": short(v.tool_call_id) or ""})
        out.append(v)
    return out


def shrink_args(value: Any, keep: int, note: str | None = None) -> Any:
    """Tool-call arguments with long strings cut to ``keep`` characters (still valid JSON).

    With ``note`` (:func:`offload_note`), each cut says where the rest is: some providers' integrations
    (langchain-google-genai) send an assistant message that calls tools as its calls
    alone, without its text, where the offload note is."""
    if isinstance(value, str) and len(value) > keep:
        where = f": {note}" if note else ""
        return value[:keep] + f"… [{len(value) - keep} characters offloaded{where}]"
    if isinstance(value, dict):
        return {k: shrink_args(v, keep, note) for k, v in value.items()}
    if isinstance(value, list):
        return [shrink_args(v, keep, note) for v in value]
    return value


def shrunk_calls(message: AIMessage, keep: int, note: str | None = None) -> dict[str, Any]:
    """The ``model_copy`` update that keeps ``message``'s calls with their long arguments
    cut (:func:`shrink_args`): the valid ones (each result answers one), and those whose
    arguments did not parse, which providers are sent too and ``create_agent`` answers."""
    return {
        "tool_calls": [
            {**tc, "args": shrink_args(tc["args"], keep, note)} for tc in message.tool_calls
        ],
        "invalid_tool_calls": [
            {**bad, "args": shrink_args(bad.get("args"), keep, note)}
            for bad in message.invalid_tool_calls
        ],
    }


def offload_note(offload_id: str, tools: bool = True) -> str:
    """How a replacement names its offload: by the shortened id
    (:func:`~langchain_autocontext.store.offload_ref`, which a reload resolves), as the
    call that gets it back when the model has the tools (``tools``), else as the id
    alone (the developer's handle: a model without the tools is not told of one)."""
    ref = offload_ref(offload_id)
    return f'reload_offloaded(offload_id="{ref}")' if tools else f"id {ref}"


def replacement_message(
    kind: str,
    header: str,
    body: str,
    out: JobOutput,
    *,
    followed_by: BaseMessage | None,
    **info: Any,
) -> BaseMessage:
    """The message that stands for a replaced span: in the assistant's role, except
    right before an assistant message, where it takes the user's role. Two assistant
    turns in a row are merged by Anthropic's API (the turn that continues a tool loop
    must then start with its thinking blocks, and a summary's text came first) and
    rejected by Gemini before a function call; two user turns in a row are merged by
    every provider without complaint."""
    cls = HumanMessage if isinstance(followed_by, AIMessage) else AIMessage
    msg = cls(content=f"[{header}; {out.note}]\n{body}".rstrip(), id=new_id())
    return mark(msg, kind, offload_id=out.offload_id, **info)


#: Kinds of the package's messages that stand, under an id of their own, for the
#: messages they replaced (a summarized message keeps its own id).
SPAN_KINDS = SUMMARY_KINDS - {KIND_SUMMARIZED}
#: Kinds whose role :func:`replacement_message` chose by the message that follows.
_ROLE_BY_FOLLOWER = frozenset({KIND_TOOL_RUN, KIND_ROUND, KIND_CURRENT})


def markers(messages: Sequence[BaseMessage]) -> dict[int, dict[str, Any]]:
    """The package's marker of each message in ``messages`` that has one (a non-empty
    one), by position, in order: one scan that the steps of a call which look for the
    package's messages share."""
    return {i: info for i, m in enumerate(messages) if (info := marker(m))}


def summary_offload_ids(
    messages: Sequence[BaseMessage], marks: Mapping[int, Mapping[str, Any]] | None = None
) -> list[str]:
    """The offload ids of the summaries in ``messages`` that stand for other messages.
    ``marks``: the :func:`~langchain_autocontext.messages.markers` of ``messages``, when
    the caller has them."""
    out = []
    for info in (markers(messages) if marks is None else marks).values():
        if info.get("kind") in SPAN_KINDS:
            oid = info.get("offload_id")
            if isinstance(oid, str) and oid:
                out.append(oid)
    return out


def place_summaries(
    messages: list[BaseMessage],
    spans: Mapping[str, frozenset[str]],
    marks: Mapping[int, Mapping[str, Any]] | None = None,
) -> list[BaseMessage]:
    """Each summary where the messages it replaced stood, and those messages dropped.

    ``spans`` maps a summary's offload id to the ids of the messages it replaced (its
    offload record's). A list holds a summary beside its originals when LangGraph
    merged an agent's compressed messages into a parent state by id (the supervisor
    pattern: a handoff returns the agent's ``messages``): the summary's new id is
    appended at the end and the originals, never removed from the parent, stay. Left
    so, every agent would summarize those originals again, and the summary would sit
    out of order. A summary of summaries stands where the first of all it stands for
    stood; the recursive summary first after the system message, where strategy 7
    writes it (before a task statement its first originals followed). Then a summary
    in the assistant's role right before an assistant message takes the user's role,
    as when it was written (:func:`replacement_message`).
    Only messages *before* a summary are taken for its originals (a merge appends the
    summary after them): one after it that carries one of its ids is a new message
    reusing that id (a model that returns one reply object every turn) and stays.
    Returns ``messages`` itself when nothing changes. ``marks``: the
    :func:`~langchain_autocontext.messages.markers` of ``messages``, when the caller
    has them.
    """
    if marks is None:
        marks = markers(messages)
    index: dict[str, int] | None = None  # built once a summary with a span needs it
    covers: dict[int, set[int]] = {}
    for i, info in marks.items():
        if info.get("kind") not in SPAN_KINDS:
            continue
        ids = spans.get(str(info.get("offload_id")))
        if not ids:
            continue
        if index is None:
            index = {msg.id: k for k, msg in enumerate(messages) if msg.id}
        # the smaller side is walked: a long thread's recursive summary stands for every
        # id it ever absorbed, while the list holds a few dozen messages
        if len(ids) <= len(index):
            present = {index[x] for x in ids if index.get(x, i) < i}
        else:
            present = {k for x, k in index.items() if k < i and x in ids}
        if present:
            covers[i] = present
    out = messages
    if covers:
        dropped = set().union(*covers.values())

        def reach(i: int, seen: set[int]) -> set[int]:
            found = set(covers.get(i, ()))
            for j in list(found):
                if j in covers and j not in seen:
                    seen.add(j)
                    found |= reach(j, seen)
            return found

        # the recursive summary's place is first after the system message, before the
        # latest user message it hops over (strategy 7 writes it there)
        sys_end = 1 if messages and isinstance(messages[0], SystemMessage) else 0
        placed: dict[int, list[int]] = {}  # position -> the summaries put before it
        for i in covers:
            if i not in dropped:
                first = min(reach(i, {i}))
                if marks[i].get("kind") == KIND_RECURSIVE:
                    first = min(first, sys_end)
                if first < i:
                    placed.setdefault(first, []).append(i)
        moved = {i for at in placed.values() for i in at}
        out = []
        for k, m in enumerate(messages):
            out += [messages[i] for i in sorted(placed.get(k, ()))]
            if k not in dropped and k not in moved:
                out.append(m)
    fixed: list[BaseMessage] | None = None
    for k, info in (marks if out is messages else markers(out)).items():
        m = out[k]
        if (
            info.get("kind") in _ROLE_BY_FOLLOWER
            and isinstance(m, AIMessage)
            and k + 1 < len(out)
            and isinstance(out[k + 1], AIMessage)
        ):
            fixed = list(out) if fixed is None else fixed
            fixed[k] = HumanMessage(
                content=m.content, id=m.id, additional_kwargs=dict(m.additional_kwargs)
            )
    return fixed if fixed is not None else out


def replacement_summary(
    body: str,
    out: JobOutput,
    evicted: int,
    conversation: str | None = None,
    *,
    after: int = 0,
    below: BaseMessage | None = None,
    after_each: Mapping[str, int] | None = None,
) -> HumanMessage:
    """The MemGPT recursive summary (user role: providers accept it right after system).
    ``conversation``: the id of the conversation's first user message, when the summary
    stands for it (:func:`conversation_origin`). ``after``: how many of the ``evicted``
    messages (the last ones) came after ``below``, the message kept in place right
    after the summary (the latest user message, a pin): the header says so, since
    the summary stands before it. ``after_each``: that count for each message kept in
    place below the summary (by id, those with some), which the next eviction carries
    on when ``below`` is evicted and another of them stands right after the summary."""
    if after <= 0:
        header = f"Summary of {evicted} earlier messages"
    else:
        # "request": the view may put its instructions, a user-role note, in between
        what = "request" if isinstance(below, HumanMessage) else "message"
        last = "all" if after >= evicted else f"the last {after}"
        header = f"Summary of {evicted} messages, {last} after the {what} below"
    msg = HumanMessage(content=f"[{header}; {out.note}]\n{body}".rstrip(), id=new_id())
    info: dict[str, Any] = {"conversation": conversation} if conversation else {}
    if after > 0:
        info["after"] = after
    if after_each:
        info["after_each"] = dict(after_each)
    return mark(msg, KIND_RECURSIVE, offload_id=out.offload_id, evicted=evicted, **info)  # type: ignore[return-value]


def conversation_origin(messages: Sequence[BaseMessage]) -> str | None:
    """The id of the first user message of the conversation ``messages`` hold: the
    first user message's, whether verbatim, offloaded or summarized in place (either
    keeps its id), or the one a recursive summary that evicted it names (another
    library's summary in the user's role is none). ``None``
    when none is there. A thread derived from it stays the same after compression
    (the engine's stateless conversations)."""
    for m in messages:
        # another library's summary in the user's role is no user message: its id is
        # new each time that library summarizes again
        if is_user_turn(m):
            return m.id
        info = marker(m) or {}
        if info.get("kind") == KIND_RECURSIVE:
            origin = info.get("conversation")
            if isinstance(origin, str) and origin:
                return origin
    return None


def summary_body(message: BaseMessage) -> str:
    """The text of a package-written summary without its bracketed header line."""
    text = text_of(message)
    if text.startswith("[") and "\n" in text:
        return text.split("\n", 1)[1]
    return "" if text.startswith("[") else text


def span_messages(ctx: PassContext, start: int, end: int) -> Sequence[BaseMessage]:
    return ctx.messages[start:end]
