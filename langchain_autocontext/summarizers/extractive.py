"""The offline summarizer: :class:`ExtractiveSummarizer` (deterministic, no LLM).

It keeps what an agent needs to carry on -- tool names with their exact arguments,
error lines, ids, paths and URLs, the first and last lines of long outputs -- within
the request's token cap, and says what it cut. The default summarizer of the
package, and the fallback of :class:`~langchain_autocontext.summarizers.llm.LLMSummarizer`.

Over 600 lines because the extraction rules (what of a tool call, an error, an output
is worth keeping) and the cap that trims their result are one summary read together;
split, each half would only make sense beside the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from langchain_autocontext.messages import (
    is_real_user,
    message_chars,
    result_tool_name,
    text_of,
    tool_call_names,
)
from langchain_autocontext.summarizers.base import (
    Summarizer,
    SummaryRequest,
    SummaryResult,
    TextTokenCounter,
    _clip,
    _clip_to_tokens,
)
from langchain_autocontext.summarizers.transcript import (
    _kind_label,
    _role,
    call_strings,
    tool_calls_of,
)

__all__ = ["ExtractiveSummarizer"]


def _args_json(args: Any, value_chars: int, total_chars: int) -> tuple[str, int, bool]:
    """Tool-call arguments as JSON; huge strings/lists shortened, saying so.

    Returns (rendered, characters of the exact JSON reproduced, truncated?).
    """
    exact = json.dumps(args, ensure_ascii=False, default=str)
    if len(exact) <= total_chars:
        return exact, len(exact), False
    removed = 0

    def shrink(value: Any) -> Any:
        nonlocal removed
        if isinstance(value, str) and len(value) > value_chars:
            keep = value_chars * 4 // 5
            removed += len(value) - keep
            return f"{value[:keep]}…[+{len(value) - keep:,} chars]"
        if isinstance(value, dict):
            return {k: shrink(v) for k, v in value.items()}
        if isinstance(value, list):
            if len(value) > 20:
                removed += len(json.dumps(value[20:], ensure_ascii=False, default=str))
                return [shrink(v) for v in value[:20]] + [f"…[+{len(value) - 20} items]"]
            return [shrink(v) for v in value]
        return value

    shown = json.dumps(shrink(args), ensure_ascii=False, default=str)
    shown, kept = _clip(shown, total_chars)
    return shown, max(0, min(kept, len(exact) - removed)), True


# Error-looking lines: words, CamelCase exception names, non-zero exit statuses.
_ERROR_RE = re.compile(
    r"(?i:\b(?:errors?|exceptions?|traceback|failed|failures?|fatal|panic(?:ked)?|"
    r"permission denied|segmentation fault|not found|abort(?:ed)?)\b)"
    r"|\b[A-Z]\w*(?:Error|Exception)\b"
    r"|(?i:\b(?:returncode|return code|exit code|exit status|exited with(?: code)?)\s*[=:]?\s*-?[1-9])"
    r"|(?i:non-zero exit)"
)
# Phrases that look like errors but report their absence.
_NOT_ERROR_RE = re.compile(
    r"(?i:\b(?:0|no|zero|without)\s+(?:errors?|failures?|failed|exceptions?)\b)"
)


def _is_error_line(line: str) -> bool:
    return bool(_ERROR_RE.search(_NOT_ERROR_RE.sub(" ", line)))


_FRAME_RE = re.compile(r'^\s*File "[^"]+", line \d+')


def _error_indices(lines: list[str]) -> list[int]:
    """Indices of error lines; for a Python traceback also its innermost frame
    (the ``File "…", line N`` line and the code line under it)."""
    errors = [k for k, line in enumerate(lines) if _is_error_line(line)]
    extra: set[int] = set()
    for k in errors:
        if not lines[k].lstrip().startswith("Traceback"):
            continue
        frame = None
        for j in range(k + 1, min(len(lines), k + 200)):
            if _FRAME_RE.match(lines[j]):
                frame = j
            elif not lines[j].startswith((" ", "\t")):
                break  # the exception line ends the traceback
        if frame is not None:
            extra.update(j for j in (frame, frame + 1) if j < len(lines))
    return sorted(set(errors) | extra)


_URL_RE = re.compile(r"https?://[^\s<>\"'`)\]}]+")
_REF_RES = (
    # absolute or ./ ../ ~/ paths (not the name of a closing tag: </output>)
    re.compile(r"(?<![\w/.:<])(?:~|\.{1,2})?/(?:[\w.@+\-]+/)*[\w.@+\-]+"),
    # relative paths with an extension: src/app/main.py
    re.compile(r"(?<![\w/.])(?:[\w.\-]+/)+[\w\-]+\.[A-Za-z0-9]{1,8}\b"),
    # Windows paths
    re.compile(r"\b[A-Za-z]:\\[^\s\"'<>|]+"),
    # bare file names with a common extension
    re.compile(
        r"\b[\w\-]+\.(?:py|pyi|ipynb|js|mjs|ts|tsx|jsx|json|jsonl|md|rst|txt|ya?ml|toml|cfg|ini|"
        r"go|rs|java|kt|c|h|cc|cpp|hpp|cs|rb|php|sh|sql|html|css|xml|csv|lock|log)\b"
    ),
    # uuids
    re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
    # hex hashes (letters and digits both present)
    re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b"),
    # key=value ids: user_id=42, id: 7781
    re.compile(r"\b\w*id\s*[=:]\s*[\"']?[\w\-.:]*\d[\w\-.:]*", re.IGNORECASE),
    # prefixed ids: call_abc123, toolu_01AbC, JIRA-123, #123
    re.compile(r"\b[a-z]+_[A-Za-z0-9]*\d[A-Za-z0-9]*\b"),
    re.compile(r"\b[A-Z][A-Z0-9]+-\d+\b"),
    # codes of capitals and digits: a booking reference REF1003, a flight BA103, E501
    re.compile(r"\b[A-Z]{1,6}\d[A-Z0-9]*\b"),
    re.compile(r"(?<![\w&])#\d+\b"),
    # long numbers (ids, ports, pids, line counts rarely reach five digits)
    re.compile(r"(?<![\w.])\d{5,}(?![\w.])"),
)


def _references(text: str, limit: int, skip: str) -> list[str]:
    """Identifiers, paths, URLs and id-like numbers in ``text``, in order, deduplicated.

    References that already appear in ``skip`` (the header shown) are left out.
    """
    found: dict[str, int] = {}

    def add(ref: str, pos: int) -> None:
        ref = ref.rstrip(".,;:")
        if len(ref) < 2 or ref in skip or ref in found:
            return
        found[ref] = pos

    if len(text) > 150_000:  # only the first `limit` refs are kept: scan the two ends
        text = f"{text[:100_000]}\n{text[-50_000:]}"
    for m in _URL_RE.finditer(text):
        add(m.group(), m.start())
    rest = _URL_RE.sub(lambda m: " " * len(m.group()), text)
    for regex in _REF_RES:
        for m in regex.finditer(rest):
            add(m.group(), m.start())
    # Drop references contained in a longer one (a file name inside its path).
    refs = sorted(found, key=lambda r: (found[r], -len(r)))
    kept: list[str] = []
    for ref in refs:
        if any(ref in other for other in kept):
            continue
        kept.append(ref)
        if len(kept) >= limit:
            break
    return [_clip(r, 160)[0] for r in kept]


def _ref_text(message: BaseMessage) -> str:
    """The text :func:`_references` reads of a message: its text and the strings of
    its tool calls' arguments (the paths and ids the agent acted on)."""
    return "\n".join([text_of(message), *call_strings(message)])


# --- the extractive summarizer ---------------------------------------------------------------
@dataclass
class _Item:
    """A unit of summary text the budget may keep or drop."""

    tier: int  # lower = kept first
    rank: tuple[int, ...]  # order inside a tier
    msg: int  # message index; -1 for lines of the previous summary
    pos: int  # render order inside its message (or previous summary)
    lines: list[str]
    covered: int  # characters of the original reproduced verbatim
    header: bool = False
    chain: str | None = None  # items of one chain are kept as a contiguous prefix
    cost: int = 0
    alt: _Item | None = None  # a shorter variant, tried when this one does not fit


@dataclass
class _Plan:
    """Everything the renderer needs besides the selected items."""

    title: str
    section: str | None
    messages: Sequence[BaseMessage]
    names: dict[str, str]
    total_chars: int
    prev_lines: list[str] = field(default_factory=list)
    prev_label: str | None = None


#: How the line of the references of the messages left out begins.
_REFS_LEAD = "- references in the messages left out: "
#: How the line of references opens in a summary none of whose lines fit its budget.
_TINY_REFS_LEAD = "- references: "
#: How the line opens that stands for a summary none of whose lines fit its budget.
CUT_EVERYTHING = "[cut: everything; "

#: Titles of this summarizer's own recursive summaries (stripped when folding).
_RECURSIVE_TITLE_RE = re.compile(
    r"^Recursive summary of (?:([\d,]+) evicted messages?|everything evicted so far)\b"
)


class ExtractiveSummarizer(Summarizer):
    """Deterministic summarizer without an LLM: the package's default.

    For each message, in order, it keeps the role; tool calls with their names
    and exact JSON arguments (huge values shortened, saying so); tool results with
    their call id, tool name and status; lines that report errors (error,
    exception, traceback, failed, fatal, non-zero exit codes …); identifiers, file
    paths, URLs and id-like numbers; and the first and last lines of long text.
    For ``recursive`` it starts from the previous summary, dropping its oldest
    lines only when the budget requires it. The last line always says what was
    cut. When the budget is short, details go first (extra lines, references,
    errors), then whole messages from the middle of the span; a line marks each gap,
    and a line lists the references of the messages left out. When not even the title
    fits, the summary is that line of references and the cut line.

    The output stays within ``max_tokens`` by :attr:`token_counter`, and aims for
    ``target_tokens`` for everything beyond message headers and the previous
    summary. Same input, same output, byte for byte.

    Every exact name it writes (a path, an identifier, an id) is quoted from the span
    or the previous summary, or is a prefix of one marked ``…`` where a line was cut:
    it needs none of the check of names that
    :class:`~langchain_autocontext.summarizers.llm.LLMSummarizer` applies to a model's
    summary (:mod:`~langchain_autocontext.summarizers.names`).

    Args:
        token_counter: Counter for budgets (``None``: a len/4 estimate).
        line_chars: Longest line kept from a message before it is shortened.
        max_refs: Most references listed per message.
    """

    name = "extractive"

    def __init__(
        self,
        *,
        token_counter: TextTokenCounter | None = None,
        line_chars: int = 240,
        max_refs: int = 15,
    ) -> None:
        if line_chars < 40:
            raise ValueError("line_chars must be at least 40")
        self.token_counter = token_counter
        self.line_chars = line_chars
        self.max_refs = max_refs

    def __repr__(self) -> str:
        return f"ExtractiveSummarizer(line_chars={self.line_chars}, max_refs={self.max_refs})"

    # -- public ------------------------------------------------------------------
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize one span without any model call."""
        text = self.summarize_text(request)
        return SummaryResult(
            text=text,
            calls=0,
            input_tokens=0,
            output_tokens=0,
            fallback=False,
            error=None,
            summarizer=self.name,
        )

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        """Same as :meth:`summarize` (pure CPU work, no I/O)."""
        return self.summarize(request)

    def summarize_text(self, request: SummaryRequest) -> str:
        """The summary text alone."""
        plan, items = self._plan(request)
        count = self.count
        for it in items:
            it.cost = sum(count(line + "\n") for line in it.lines)
            if it.alt is not None:
                it.alt.cost = sum(count(line + "\n") for line in it.alt.lines)
        hard = request.max_tokens
        soft = min(request.budget, hard)
        # Reserve the title, a gap line and the worst-case cut line.
        fixed = self._render(plan, [], reserve=True)
        fixed_cost = count(fixed) + 1
        # The newest lines of a previous summary, up to half the budget, come before
        # the new messages; its older lines after their headers (FIFO: oldest go first).
        share = max(0, hard - fixed_cost) // 2
        for it in items:  # previous-summary items arrive newest first
            if it.msg == -1:
                share -= it.cost
                it.tier = 0 if share >= 0 else 2
        chosen = self._select(items, hard, soft, fixed_cost)
        cap = hard
        refs = self._unshown_refs(plan, chosen)
        if refs:
            # Not every message keeps even its header: a line of the references of what
            # is not reproduced (an order number, a path, a booking code: what a later
            # step asks for, and what search_history finds the messages by) is worth more
            # than the headers it displaces. Up to a third of the budget is set aside
            # for it, and the headers are chosen again within the rest.
            digest = count(_REFS_LEAD + ", ".join(refs)) + 1
            cap = hard - min(digest, hard // 3)
            chosen = self._select(items, cap, min(soft, cap), fixed_cost)
        # The reservation above assumed the worst; top up with what really fits.
        text = self._render(plan, chosen)
        used = count(text)
        if used < min(soft, cap):
            chosen = self._select(items, cap, min(soft, cap), used, chosen)
        while True:
            text = self._render(plan, chosen)
            if count(text) <= hard:
                return self._with_refs(plan, chosen, text, hard)
            if not chosen:
                break
            dropped = chosen.pop()
            if dropped.header:
                chosen = [c for c in chosen if c.msg != dropped.msg]
        n = len(plan.messages)
        tiny = _clip_to_tokens(
            f"{CUT_EVERYTHING}{n} messages ({plan.total_chars:,} characters) do not fit "
            f"a {hard}-token summary]",
            hard,
            count,
        )
        # Not even a header fits: the room the cut line leaves holds the span's most
        # telling references (a path, an id, a booking code: what the next step reuses).
        refs = self._unshown_refs(plan, [])
        lo, hi = 0, len(refs) if count(tiny) < hard else 0
        while lo < hi:  # the most references that fit (the line only grows)
            mid = (lo + hi + 1) // 2
            if count(f"{_TINY_REFS_LEAD}{', '.join(refs[:mid])}\n{tiny}") <= hard:
                lo = mid
            else:
                hi = mid - 1
        return f"{_TINY_REFS_LEAD}{', '.join(refs[:lo])}\n{tiny}" if lo else tiny

    def _unshown_refs(self, plan: _Plan, chosen: list[_Item], shown: str = "") -> list[str]:
        """References (:func:`_references`) of the texts and tool-call arguments of the
        messages ``chosen`` does not keep a header of, without those ``shown`` already
        has, the most telling first: those the user or the agent named (not only a
        tool's output: a pip warning's URL in every install log), then those more
        messages name, then those named most recently (what the next step most likely
        reuses). A reference inside a longer one (a directory in a path) is left out."""
        headed = {it.msg for it in chosen if it.header}
        mentions: dict[str, list[int]] = {}
        named: set[str] = set()
        for i, m in enumerate(plan.messages):
            if i not in headed:
                for ref in _references(_ref_text(m), self.max_refs, shown):
                    mentions.setdefault(ref, []).append(i)
                    if not isinstance(m, ToolMessage):
                        named.add(ref)
        joined = "\0".join(mentions)  # a reference inside another occurs in it twice
        refs = [r for r in mentions if joined.count(r) == 1]
        return sorted(refs, key=lambda r: (r not in named, -len(mentions[r]), -mentions[r][-1]))

    def _with_refs(self, plan: _Plan, chosen: list[_Item], text: str, hard: int) -> str:
        """``text`` with the references of the messages it leaves out, before its cut
        line, as many as the budget still holds."""
        refs = self._unshown_refs(plan, chosen, text)
        if not refs or "\n" not in text:
            return text
        body, cut = text.rsplit("\n", 1)
        count = self.count
        kept = 0
        lo, hi = 0, len(refs)  # the most references that fit (the line only grows)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            line = _REFS_LEAD + ", ".join(refs[:mid])
            if count(f"{body}\n{line}\n{cut}") <= hard:
                lo = mid
            else:
                hi = mid - 1
        kept = lo
        if not kept:
            return text
        return f"{body}\n{_REFS_LEAD}{', '.join(refs[:kept])}\n{cut}"

    # -- planning ---------------------------------------------------------------------
    def _plan(self, request: SummaryRequest) -> tuple[_Plan, list[_Item]]:
        msgs = request.messages
        if request.strategy == "round" and msgs and is_real_user(msgs[0]):
            msgs = msgs[1:]  # the caller keeps the user's request in the conversation
        n = len(msgs)
        names = tool_call_names(msgs)
        total_chars = sum(message_chars(m) for m in msgs)
        s = "" if n == 1 else "s"
        tag = "offline extractive summary"
        section: str | None = None
        prev_lines: list[str] = []
        prev_label: str | None = None
        if request.strategy == "tool_run":
            # no count of calls: the caller's header counts the run's calls (what is
            # read here may mention some in one line: a plan update's, see ToolRunCompression)
            title = f"Summary of a run of tool calls ({n} message{s}; {tag}):"
        elif request.strategy == "round":
            title = f"Summary of the agent's work in this round ({n} message{s}; {tag}):"
        elif request.strategy == "large_message":
            what = f"{_role(msgs[0])} message" if n == 1 else f"{n} messages"
            title = f"Summary of one large {what} ({total_chars:,} characters; {tag}):"
        elif request.strategy == "current_round":
            title = f"Summary of the current round's work so far ({n} message{s}; {tag}):"
        else:  # recursive
            earlier: int | None = 0
            prev = (request.previous_summary or "").strip("\n")
            if prev.strip():
                prev_lines = [line.rstrip() for line in prev.split("\n") if line.strip()]
                match = _RECURSIVE_TITLE_RE.match(prev_lines[0])
                if match:  # our own: its body continues, its count adds up
                    earlier = int(match.group(1).replace(",", "")) if match.group(1) else None
                    prev_lines = prev_lines[1:]
                else:
                    earlier = None
                    prev_label = "Earlier summary:"
            if earlier is None:
                title = f"Recursive summary of everything evicted so far (oldest first; {tag}):"
            else:
                total = earlier + n
                title = (
                    f"Recursive summary of {total:,} evicted message{'' if total == 1 else 's'} "
                    f"(oldest first; {tag}):"
                )
            section = f"Evicted ({n} message{s}):"

        items: list[_Item] = []
        # Messages: interleave from both ends so that, when headers must go, the
        # middle of the span goes first.
        order = [i for pair in zip(range(n), range(n - 1, -1, -1), strict=True) for i in pair]
        ranks: dict[int, int] = {}
        for i in order:
            ranks.setdefault(i, len(ranks))
        detail_budget = max(1, 12 // max(1, n))  # generous for small spans
        for i, m in enumerate(msgs):
            items.extend(self._message_items(i, m, ranks[i], names, detail_budget))
        # Previous summary: newest lines first, kept as a contiguous suffix (the
        # tier is set in summarize_text, once costs are known).
        for k, line in enumerate(reversed(prev_lines)):
            clipped, kept = _clip(line, self.line_chars * 2)
            items.append(
                _Item(
                    tier=2,
                    rank=(k,),
                    msg=-1,
                    pos=len(prev_lines) - 1 - k,
                    lines=[clipped],
                    covered=kept,
                    chain="previous",
                )
            )
        plan = _Plan(
            title=title,
            section=section,
            messages=msgs,
            names=names,
            total_chars=total_chars,
            prev_lines=prev_lines,
            prev_label=prev_label,
        )
        return plan, items

    def _message_items(
        self, i: int, m: BaseMessage, rank: int, names: dict[str, str], detail_budget: int
    ) -> list[_Item]:
        role = _role(m)
        text = text_of(m)
        lines = [line.rstrip() for line in text.split("\n") if line.strip()]
        width = self.line_chars
        items: list[_Item] = []
        chain = f"m{i}"
        conversational = role in ("user", "assistant", "system")

        # Header: role, status, size, and the text inline when it is one short line.
        label = f"- {role}{_kind_label(m)}"
        is_error = False
        errors = _error_indices(lines)
        if isinstance(m, ToolMessage):
            is_error = m.status == "error"
            status = "error" if is_error else ("ok, output mentions errors" if errors else "ok")
            label = f"- tool result [{m.tool_call_id}] {result_tool_name(m, names)}{_kind_label(m)} — {status}"
        inline = len(lines) == 1 and len(lines[0]) <= 200
        covered = 0
        if not lines:
            head = f"{label}: (empty)" if not tool_calls_of(m) else f"{label} (tool calls only):"
        elif inline:
            head = f"{label}: {lines[0].strip()}"
            covered = len(text.strip())
        else:
            head = f"{label} ({len(lines):,} lines, {len(text):,} chars):"
        header = self._header_item(i, rank, head, covered, m, 200, 600)
        compact = self._header_item(i, rank, head, covered, m, 48, 160)
        if compact.lines != header.lines:
            header.alt = compact  # used when the full arguments do not fit
        items.append(header)
        header_lines = header.lines
        if inline or not lines:
            return items

        def line_item(tier: int, k: int, mark: str, order: int) -> _Item:
            clipped, kept = _clip(lines[k], width)  # indentation kept (code)
            extra = [] if k == 0 else ["    …"]  # a possible gap marker, paid for upfront
            return _Item(
                tier=tier,
                rank=(rank, order, k),
                msg=i,
                pos=k,
                lines=[f"    {mark} {clipped}", *extra],
                covered=kept + 1,
            )

        short = len(lines) <= 6 and len(text) <= 800
        taken: set[int] = set()
        if short:
            tier = 3 if conversational or is_error else 5
            for k in range(len(lines)):
                mark = "!" if _is_error_line(lines[k]) else "|"
                item = line_item(tier, k, mark, 0)
                item.chain = chain
                items.append(item)
            return items
        # Long text: errors, first and last lines, references, more edge lines.
        n_lines = len(lines)
        error_cap = max(8, 4 * detail_budget)
        if len(errors) > error_cap:  # keep the first and the last ones
            errors = errors[: error_cap // 2] + errors[-(error_cap - error_cap // 2) :]
        for order, k in enumerate(errors):
            items.append(line_item(3, k, "!", order))
            taken.add(k)
        edge_tier = 3 if conversational or is_error else 5
        for k in (0, n_lines - 1):
            if k not in taken:
                items.append(line_item(edge_tier, k, "|", k))
                taken.add(k)
        head_tail = min(10, 1 + detail_budget)
        for depth in range(1, head_tail + 1):
            for k in (depth, n_lines - 1 - depth):
                if 0 <= k < n_lines and k not in taken:
                    items.append(line_item(6, k, "|", depth))
                    taken.add(k)
        header_text = "\n".join(header_lines)
        refs = _references(text, self.max_refs, header_text)
        if refs:
            ref_line, _ = _clip("    refs: " + ", ".join(refs), width * 3)
            items.append(
                _Item(tier=4, rank=(rank,), msg=i, pos=n_lines + 1, lines=[ref_line], covered=0)
            )
        return items

    @staticmethod
    def _header_item(
        i: int,
        rank: int,
        head: str,
        covered: int,
        m: BaseMessage,
        value_chars: int,
        total_chars: int,
    ) -> _Item:
        """The header of message ``i``: its first line plus one line per tool call."""
        lines = [head]
        for tc in tool_calls_of(m):
            args, kept, truncated = _args_json(tc.get("args", {}), value_chars, total_chars)
            note = " (arguments truncated)" if truncated else ""
            lines.append(f"    call {tc.get('name', '?')} {args} [id {tc.get('id')}]{note}")
            covered += len(tc.get("name", "")) + kept
        return _Item(tier=1, rank=(rank,), msg=i, pos=-1, lines=lines, covered=covered, header=True)

    @staticmethod
    def _select(
        items: list[_Item],
        hard: int,
        soft: int,
        used: int,
        chosen: list[_Item] | None = None,
    ) -> list[_Item]:
        """Greedy by (tier, rank): headers and the previous summary against the hard cap,
        details against the soft target. Details need their message's header.

        With ``chosen`` (a previous pass), only items not chosen yet are considered and
        ``used`` is the size of that pass's text."""
        chosen = list(chosen or [])
        taken = {id(it) for it in chosen} | {id(it.alt) for it in chosen if it.alt}
        headers = {it.msg for it in chosen if it.header}
        broken: set[str] = set()
        for it in sorted(items, key=lambda it: (it.tier, it.rank, it.pos)):
            if id(it) in taken or (it.alt is not None and id(it.alt) in taken):
                continue
            if not it.header and it.msg >= 0 and it.msg not in headers:
                continue
            if it.chain is not None and it.chain in broken:
                continue
            limit = hard if it.tier <= 2 else soft
            if used + it.cost > limit and it.alt is not None:
                it = it.alt
            if used + it.cost <= limit:
                chosen.append(it)
                used += it.cost
                if it.header:
                    headers.add(it.msg)
            elif it.chain is not None:
                broken.add(it.chain)
        return chosen

    # -- rendering ----------------------------------------------------------------------
    def _render(self, plan: _Plan, chosen: list[_Item], *, reserve: bool = False) -> str:
        msgs = plan.messages
        n = len(msgs)
        out: list[str] = [plan.title]
        prev_shown = sorted((it for it in chosen if it.msg == -1), key=lambda it: it.pos)
        prev_dropped = len(plan.prev_lines) - len(prev_shown)
        if plan.prev_lines and (prev_shown or reserve):
            if plan.prev_label:
                out.append(plan.prev_label)
            if prev_dropped and (prev_shown or reserve):
                out.append(f"[… the {prev_dropped:,} oldest lines of the earlier summary dropped]")
            out.extend(line for it in prev_shown for line in it.lines)
        if plan.section:
            out.append(plan.section)
        by_msg: dict[int, list[_Item]] = {}
        for it in chosen:
            if it.msg >= 0:
                by_msg.setdefault(it.msg, []).append(it)
        covered = 0
        gap: list[int] = []
        omitted = 0
        for i in range(0 if reserve else n):
            group = by_msg.get(i)
            if not group or not any(it.header for it in group):
                gap.append(i)
                continue
            if gap:
                out.append(self._gap_line(plan, gap))
                omitted += len(gap)
                gap = []
            group.sort(key=lambda it: it.pos)
            last_pos = -1
            for it in group:
                covered += it.covered
                if it.header or it.msg < 0:
                    out.extend(it.lines)
                    continue
                if it.pos > last_pos + 1 and it.lines[0].startswith(("    |", "    !")):
                    out.append("    …")  # lines of the original left out here
                out.append(it.lines[0])
                last_pos = it.pos
        if gap:
            out.append(self._gap_line(plan, gap))
            omitted += len(gap)
        if reserve:  # worst case: everything cut
            out.append(self._gap_line(plan, list(range(n))))
            omitted, covered, prev_dropped = n, 0, len(plan.prev_lines)
        out.append(self._cut_line(n, omitted, plan.total_chars, covered, prev_dropped))
        return "\n".join(out)

    @staticmethod
    def _gap_line(plan: _Plan, gap: list[int]) -> str:
        roles: dict[str, int] = {}
        tools: dict[str, int] = {}
        for i in gap:
            m = plan.messages[i]
            role = _role(m)
            roles[role] = roles.get(role, 0) + 1
            for tc in tool_calls_of(m):
                name = tc.get("name", "?")
                tools[name] = tools.get(name, 0) + 1
        parts = [f"{role} ×{k}" for role, k in sorted(roles.items())]
        detail = ", ".join(parts)
        if tools:
            listed = sorted(tools.items(), key=lambda kv: (-kv[1], kv[0]))
            names = ", ".join(f"{name} ×{k}" for name, k in listed[:6])
            more = f", +{len(listed) - 6} more" if len(listed) > 6 else ""
            detail += f"; calls: {names}{more}"
        s = "" if len(gap) == 1 else "s"
        return f"- … {len(gap)} message{s} left out here ({detail})"

    @staticmethod
    def _cut_line(n: int, omitted: int, total: int, covered: int, prev_dropped: int) -> str:
        parts: list[str] = []
        if omitted:
            parts.append(f"{omitted:,} of {n:,} messages left out entirely")
        missing = max(0, total - covered)
        if missing:
            parts.append(f"about {missing:,} of {total:,} characters of content not reproduced")
        if prev_dropped:
            parts.append(f"the {prev_dropped:,} oldest lines of the earlier summary dropped")
        if not parts:
            if n == 0:
                return "[cut: nothing; there were no messages]"
            what = "the message above is" if n == 1 else f"the {n:,} messages above are"
            return f"[cut: nothing; {what} complete]"
        return "[cut: " + "; ".join(parts) + "]"
