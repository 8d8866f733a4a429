"""Counting and rendering the metadata tags exactly: the mechanism under :mod:`~langchain_autocontext.metadata`.

A tag states its own message's token count and the running total of the request, so
its digits change the count they state. This module computes those numbers for a
:class:`~langchain_autocontext.tokens.TokenCounter` (already resolved) and renders the
tagged copies. It sits below :mod:`~langchain_autocontext.tokens`:
``TokenCounter.count(..., tags=...)`` calls :func:`count_view`, and this module needs
the counter only as an argument (it never imports ``tokens`` at run time).
:mod:`~langchain_autocontext.metadata` is the public face (``render_view``,
``view_counts``, ``strip_tags``).

How counting stays fast: a tag's digits change its own length, so each count is a
fixed point, solved by iteration. For tiktoken encodings whose pre-tokenizer keeps
digit runs apart (``cl100k_base``, ``o200k_base``, ``p50k_base``, ``r50k_base``,
``gpt2``; checked once per encoding by a self-test against real encodes), the
tokens of a rendered message are computed from cached parts: the message's cached
count, a per-id tag skeleton, the tokens of the two digit strings, and a per-message
join term (the tag's last pre-token ``"/>`` absorbs the newline and any leading
newlines of the content; computed exactly with the encoding's own pre-tokenizer
pattern). :func:`tagged_view` then verifies every new tag string with a real
encode; a mismatch turns the shortcut off for that encoding (with a warning) and
the view is recounted the slow, exact way: by counting each rendered message.
Pluggable counters and the character estimate always take the exact slow way.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, SystemMessage

from langchain_autocontext.copies import memo_copy
from langchain_autocontext.messages import leading_blocks

if TYPE_CHECKING:
    import tiktoken

    from langchain_autocontext.tokens import TokenCounter

__all__ = ["TAG_FORMATS", "ViewCounts", "count_view", "render_tag", "tagged_view"]

_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;"}
_ESCAPE_RE = re.compile(r"[&<>\"']")


def _escape(value: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group()], value)


#: Tag formats: ``"compact"`` (``<id tokens/total/>``, ~10 tokens with a short id) and
#: ``"seed"`` (the "Auto" design's ``<metadata id cumulative_message_token_count
#: message_token_count/>``, ~24 tokens).
TAG_FORMATS = ("compact", "seed")
_PLAIN_ID = re.compile(r"[\w.:-]+")


def render_tag(message_id: str, cumulative: int, count: int, fmt: str = "seed") -> str:
    """The metadata tag of one message; values are escaped.

    >>> render_tag('a"b', 120, 15)
    '<metadata id="a&quot;b" cumulative_message_token_count="120" message_token_count="15"/>'
    >>> render_tag("3f2a", 120, 15, "compact")
    '<3f2a 15/120/>'
    """
    if fmt == "compact":
        mid = str(message_id)
        shown = mid if _PLAIN_ID.fullmatch(mid) else f'"{_escape(mid)}"'
        return f"<{shown} {int(count)}/{int(cumulative)}/>"
    return (
        f'<metadata id="{_escape(str(message_id))}" '
        f'cumulative_message_token_count="{int(cumulative)}" '
        f'message_token_count="{int(count)}"/>'
    )


# --- rendering --------------------------------------------------------------------------
def _is_tagged(message: BaseMessage) -> bool:
    return not isinstance(message, SystemMessage)


def _render_content(content: Any, tag: str) -> Any:
    """The content with its tag first, after the blocks a provider requires first."""
    if isinstance(content, str):
        return f"{tag}\n{content}" if content else tag
    k = len(leading_blocks(content))
    return [*content[:k], {"type": "text", "text": tag}, *content[k:]]


def _render_message(message: BaseMessage, tag: str) -> BaseMessage:
    """The tagged copy of ``message`` (the same copy again while message and tag are:
    when messages are only appended, no earlier tag changes)."""
    return memo_copy(
        message,
        ("tag", tag),
        lambda m: m.model_copy(update={"content": _render_content(m.content, tag)}),
    )


@dataclass(frozen=True, slots=True)
class ViewCounts:
    """Token counts of the rendered input view.

    Attributes:
        total: tokens of the whole request as rendered (the last tag's cumulative
            count, or the plain total when no message is tagged).
        counts: tokens of each message as rendered (tag included when tagged).
        cumulative: running total after each message (priming and tools included).
        tagged: whether each message carries a tag.
        base: the request overhead before the first message (priming + tool schemas).
    """

    total: int
    counts: list[int]
    cumulative: list[int]
    tagged: list[bool]
    base: int


def count_view(
    messages: Sequence[BaseMessage],
    tc: TokenCounter,
    *,
    tools: Sequence[Any] | None = None,
    fmt: str = "seed",
) -> ViewCounts:
    """Exact token counts of the tagged view of ``messages`` counted with ``tc``,
    without building it (see :func:`langchain_autocontext.metadata.view_counts`)."""
    base = tc.reply_priming + tc.count_tools(tools)
    state = _state(tc, fmt)
    if state.fast:
        try:
            return _fast_counts(messages, tc, state, base)
        except _FastPathMismatchError as exc:  # pragma: no cover - self-tested arithmetic
            _disable_fast(state, str(exc))
    return _slow_counts(messages, tc, base, fmt)


def tagged_view(
    messages: Sequence[BaseMessage],
    tc: TokenCounter,
    *,
    tools: Sequence[Any] | None = None,
    fmt: str = "seed",
) -> list[BaseMessage]:
    """Copies of ``messages`` with their tags, counted with ``tc`` (see
    :func:`langchain_autocontext.metadata.render_view`). On the fast path every tag
    string not seen before is encoded to verify its count; a mismatch switches to the
    exact slow path."""
    state = _state(tc, fmt)
    fast = state.fast
    vc = count_view(messages, tc, tools=tools, fmt=fmt)
    tags = _tags(messages, vc, fmt)
    if fast and state.fast:
        try:
            _verify_tags(state, messages, vc, tags)
        except _FastPathMismatchError as exc:
            _disable_fast(state, str(exc))
            vc = _slow_counts(messages, tc, vc.base, fmt)
            tags = _tags(messages, vc, fmt)
    return [
        message if tag is None else _render_message(message, tag)
        for message, tag in zip(messages, tags, strict=True)
    ]


def _tags(messages: Sequence[BaseMessage], vc: ViewCounts, fmt: str) -> list[str | None]:
    return [
        render_tag(message.id or "", cumulative, count, fmt) if tagged else None
        for message, tagged, cumulative, count in zip(
            messages, vc.tagged, vc.cumulative, vc.counts, strict=True
        )
    ]


# --- the fixed point ---------------------------------------------------------------------
def _solve(fn: Callable[[int], int], start: int) -> int:
    """A fixed point ``n == fn(n)`` near ``start``.

    ``fn`` is the token count of a message whose tag states ``n``; it grows with
    the number of digits, so plain iteration from below converges in a few steps.
    Cycles (a non-monotone tokenizer) are resolved by scanning the cycle's range.
    """
    n = start
    seen: set[int] = set()
    for _ in range(64):
        value = fn(n)
        if value == n:
            return n
        if value in seen:
            break
        seen.add(n)
        n = value
    seen.add(n)
    low, high = min(seen), max(seen)
    for candidate in range(max(0, low - 16), high + 17):
        if fn(candidate) == candidate:
            return candidate
    warnings.warn(  # pragma: no cover - needs a tokenizer without a self-consistent count
        "langchain-autocontext: no self-consistent metadata token count exists for a "
        f"message (tried {low}..{high}); its tag is off by a few tokens.",
        UserWarning,
        stacklevel=3,
    )
    return n  # pragma: no cover


def _slow_counts(
    messages: Sequence[BaseMessage], tc: TokenCounter, base: int, fmt: str = "seed"
) -> ViewCounts:
    """Exact by construction: counts each rendered candidate message with ``tc``."""
    bases = tc.message_counts(messages)
    running = base
    counts: list[int] = []
    cumulative: list[int] = []
    tagged: list[bool] = []
    for message, plain in zip(messages, bases, strict=True):
        if _is_tagged(message):
            mid = message.id or ""
            prev = running

            def rendered(
                n: int, message: BaseMessage = message, prev: int = prev, mid: str = mid
            ) -> int:
                tag = render_tag(mid, prev + n, n, fmt)
                return tc.count_message(_render_message(message, tag))

            count = _solve(rendered, plain)
            tagged.append(True)
        else:
            count = plain
            tagged.append(False)
        running += count
        counts.append(count)
        cumulative.append(running)
    return ViewCounts(running, counts, cumulative, tagged, base)


# --- the fast path (tiktoken encodings that isolate digit runs) ----------------------------------
class _FastPathMismatchError(Exception):
    """A verified tag disagreed with the fast-path arithmetic."""


#: Per format: a reference tag and its closing characters (the last pre-token
#: starts there; see :meth:`_TagState.join`).
_REF_TAGS = {fmt: render_tag("", 0, 0, fmt) for fmt in TAG_FORMATS}
_ENDS = {"seed": '"/>', "compact": "/>"}
_SELF_TEST: dict[tuple[str, str], tuple[bool, bool]] = {}
_SELF_TEST_LOCK = threading.Lock()


class _TagState:
    """Per-counter caches of the fast path."""

    __slots__ = (
        "digits",
        "digits_by_length",
        "enc",
        "end",
        "extras",
        "fast",
        "fmt",
        "maxsize",
        "pattern",
        "ref_end",
        "ref_tag",
        "skeletons",
        "verified",
    )

    def __init__(self, enc: tiktoken.Encoding | None, maxsize: int, fmt: str = "seed") -> None:
        self.enc = enc
        self.fmt = fmt
        self.ref_tag = _REF_TAGS[fmt]
        self.end = _ENDS[fmt]
        self.maxsize = maxsize
        self.pattern: Any = _pretokenizer(enc) if enc is not None else None
        self.ref_end = len(enc.encode_ordinary(self.end)) if enc is not None else 0
        self.fast = False
        self.digits_by_length = False
        self.digits: dict[str, int] = {}
        self.skeletons: dict[str, int] = {}
        #: message cache key -> skeleton + join terms of its tagged count
        self.extras: dict[Hashable, int] = {}
        #: tag strings whose count a real encode confirmed (cleared when full)
        self.verified: set[str] = set()

    def digit_tokens(self, value: int) -> int:
        text = str(value)
        got = self.digits.get(text)
        if got is None:
            if len(self.digits) > 200_000:
                self.digits.clear()
            got = len(self.enc.encode_ordinary(text))  # type: ignore[union-attr]
            self.digits[text] = got
        return got

    def skeleton(self, message_id: str) -> int:
        """Tokens of the tag of ``message_id`` without its two digit strings."""
        got = self.skeletons.get(message_id)
        if got is None:
            if len(self.skeletons) > 200_000:
                self.skeletons.clear()
            tag = render_tag(message_id, 0, 0, self.fmt)
            got = len(self.enc.encode_ordinary(tag)) - 2 * self.digit_tokens(0)  # type: ignore[union-attr]
            self.skeletons[message_id] = got
        return got

    def join(self, content: str, content_tokens: int) -> int:
        """tokens(tag + "\\n" + content) - tokens(tag) - tokens(content), for any tag.

        The tag's last pre-token starts at its closing ``"/>`` and absorbs the
        newline and whatever leading characters of the content the pattern joins
        to it (newlines; also ``/`` in ``o200k_base``); the rest of the content is
        pre-tokenized exactly as on its own (the patterns have no look-behind).
        """
        enc = self.enc
        assert enc is not None
        ref = self.ref_tag
        joined = f"{ref}\n{content}"
        start = len(ref) - len(self.end)
        match = self.pattern.match(joined, start)
        if match is not None and match.end() > len(ref):
            end = match.end()
            piece = joined[start:end]
            whole = self.pattern.match(piece)
            if whole is not None and whole.end() == len(piece):
                absorbed = end - len(ref) - 1
                rest = (
                    content_tokens
                    if absorbed == 0
                    else len(enc.encode_ordinary(content[absorbed:]))
                )
                return len(enc.encode_ordinary(piece)) - self.ref_end + rest - content_tokens
        full = len(enc.encode_ordinary(joined))
        return full - len(enc.encode_ordinary(ref)) - content_tokens


def _pretokenizer(enc: tiktoken.Encoding) -> Any:
    """The encoding's pre-tokenizer pattern, compiled, if it has no look-behind/anchors."""
    pat = getattr(enc, "_pat_str", None)
    if not isinstance(pat, str):
        return None
    if "(?<" in pat or "\\b" in pat or "\\A" in pat or "\\G" in pat or re.search(r"(?<!\[)\^", pat):
        return None
    try:
        import regex

        return regex.compile(pat)
    except Exception:
        return None


def _self_test(enc: tiktoken.Encoding, pattern: Any, fmt: str = "seed") -> tuple[bool, bool]:
    """Check the fast-path arithmetic against real encodes, once per encoding.

    Returns ``(fast path exact, digit tokens depend only on the number of digits)``.
    """
    with _SELF_TEST_LOCK:
        known = _SELF_TEST.get((enc.name, fmt))
    if known is not None:
        return known
    scratch = _TagState(enc, 1024, fmt)
    encode = enc.encode_ordinary
    ids = [
        "",
        "a",
        "123",
        "x-9",
        "q\"<&>'",
        "3f1c9a7e-8e0b-4c55-9d5b-0a6b2f9f7c11",
        "ü é",
        "run_1/2",
    ]
    numbers = [(0, 0), (7, 5), (99, 12), (1000, 999), (123456, 1234), (10**9 + 7, 10**6), (5, 1)]
    contents = [
        "hello",
        "\n\nx",
        "\r\nx",
        "\n",
        " x",
        "  \n x",
        "123 abc",
        "/usr/bin",
        "//x",
        '"quoted"',
        "'s",
        "é",
        "\t",
        ">x",
        "x\n",
        "<metadata/>",
        "\n/\n/x",
        "!!!",
    ]
    ok = True
    by_length = False
    try:
        ok = encode(scratch.ref_tag)[-scratch.ref_end :] == encode(scratch.end)
        for mid in ids:
            for n1, n2 in numbers:
                tag = render_tag(mid, n1, n2, fmt)
                expected = (
                    scratch.skeleton(mid) + scratch.digit_tokens(n1) + scratch.digit_tokens(n2)
                )
                ok = ok and len(encode(tag)) == expected
                for text in contents if mid in {"", "a", "q\"<&>'"} else contents[:3]:
                    ctoks = len(encode(text))
                    joined = len(encode(f"{tag}\n{text}"))
                    ok = ok and joined == expected + ctoks + scratch.join(text, ctoks)
        # every 1-3 digit string (leading zeros too) is one token, and longer numbers
        # split into runs of 3: then a number costs ceil(digits / 3) tokens
        by_length = all(
            len(encode(f"{i:0{width}d}")) == 1 for width in (1, 2, 3) for i in range(10**width)
        ) and all(
            len(encode(str(v))) == (len(str(v)) + 2) // 3
            for v in (*range(0, 2000, 7), *(10**k + k for k in range(3, 19)), 987654321987)
        )
    except Exception:
        ok = False
    result = (ok, ok and by_length)
    with _SELF_TEST_LOCK:
        _SELF_TEST[(enc.name, fmt)] = result
    return result


def _state(tc: TokenCounter, fmt: str = "seed") -> _TagState:
    if fmt not in _REF_TAGS:
        raise ValueError(f"unknown tag format {fmt!r}; expected one of {', '.join(TAG_FORMATS)}")
    enc = tc.encoding if tc._fn is None else None
    states = tc._tag_state
    if not isinstance(states, dict):
        states = tc._tag_state = {}
    state = states.get(fmt)
    if state is None or state.enc is not enc:
        state = _TagState(enc, tc._cache.maxsize, fmt)
        if enc is not None and state.pattern is not None:
            state.fast, state.digits_by_length = _self_test(enc, state.pattern, fmt)
        states[fmt] = state
    return state


def _disable_fast(state: _TagState, detail: str) -> None:
    state.fast = False
    if state.enc is not None:
        with _SELF_TEST_LOCK:
            _SELF_TEST[(state.enc.name, state.fmt)] = (False, False)
    warnings.warn(
        "langchain-autocontext: the fast metadata-tag count disagreed with a real encode "
        f"({detail}); counting rendered messages directly from now on (exact, slower).",
        UserWarning,
        stacklevel=4,
    )


def _fast_counts(
    messages: Sequence[BaseMessage],
    tc: TokenCounter,
    state: _TagState,
    base: int,
) -> ViewCounts:
    keys, entries = tc._entries(messages)
    extras = state.extras
    by_length = state.digits_by_length
    digit_tokens = state.digit_tokens
    running = base
    counts: list[int] = []
    cumulative: list[int] = []
    tagged: list[bool] = []
    for message, key, (plain, content_tokens) in zip(messages, keys, entries, strict=True):
        if isinstance(message, SystemMessage):
            running += plain
            counts.append(plain)
            cumulative.append(running)
            tagged.append(False)
            continue
        tag_key = (key, message.id)  # the tag shows the id, the count's key leaves it out
        extra = extras.get(tag_key)
        if extra is None:
            extra = state.skeleton(message.id or "")
            content = message.content
            if isinstance(content, str) and content:
                extra += state.join(content, content_tokens)
            if len(extras) >= state.maxsize:
                extras.clear()
            extras[tag_key] = extra
        fixed = plain + extra
        prev = running
        n = fixed + 2  # a lower bound: each number is at least one token
        for _ in range(64):
            if by_length:  # each run of up to 3 digits is one token (cl100k, o200k)
                value = fixed + (len(str(prev + n)) + 2) // 3 + (len(str(n)) + 2) // 3
            else:
                value = fixed + digit_tokens(prev + n) + digit_tokens(n)
            if value == n:
                break
            n = value
        else:  # pragma: no cover - digit tokens never shrink as numbers grow here
            raise _FastPathMismatchError("no self-consistent count")
        running += n
        counts.append(n)
        cumulative.append(running)
        tagged.append(True)
    return ViewCounts(running, counts, cumulative, tagged, base)


def _verify_tags(
    state: _TagState,
    messages: Sequence[BaseMessage],
    vc: ViewCounts,
    tags: Sequence[str | None],
) -> None:
    """Encode every tag string not verified before and compare with the arithmetic."""
    enc = state.enc
    assert enc is not None
    verified = state.verified
    for i, tag in enumerate(tags):
        if tag is None or tag in verified:
            continue
        n1, n2 = vc.cumulative[i], vc.counts[i]
        expected = (
            state.skeleton(messages[i].id or "") + state.digit_tokens(n1) + state.digit_tokens(n2)
        )
        actual = len(enc.encode_ordinary(tag))
        if actual != expected:
            raise _FastPathMismatchError(f"tag {tag!r}: {actual} tokens, expected {expected}")
        if len(verified) >= state.maxsize:
            verified.clear()
        verified.add(tag)
