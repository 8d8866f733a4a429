"""The "Auto" metadata tags: render them into the model's input view, strip them from output.

Every non-system message the model sees starts with::

    <metadata id="…" cumulative_message_token_count="…" message_token_count="…"/>

followed by a newline. ``message_token_count`` is the exact token count of the
message *as rendered* (tag included) and ``cumulative_message_token_count`` the
running total of the whole request up to and including that message (reply
priming, tool schemas and the system message included), so the last tag tells the
model how full its context is. Both are exact: recounting each rendered message
from scratch with a fresh :class:`~langchain_autocontext.tokens.TokenCounter`
gives the numbers written in its tag.

Tags live only in the input view: :func:`render_view` returns copies and never
mutates its input; :func:`strip_tags` / :func:`strip_message_tags` remove tags a
model copied into its own output before that output is stored.

The counting and the rendering of the tags live one layer down, in
:mod:`langchain_autocontext.tag_counts` (which :class:`~langchain_autocontext.tokens.TokenCounter`
uses for ``count(..., tags=...)``); this module is the public face: render, count,
strip, and the *short ids* the tags show (:func:`short_id_map`): a uuid4 id by its
shortest prefix that no earlier message's id starts with, stable as messages are added.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage, SystemMessage

from langchain_autocontext.copies import memo_with_id
from langchain_autocontext.messages import UUID4_RE
from langchain_autocontext.tag_counts import (
    TAG_FORMATS,
    ViewCounts,
    count_view,
    render_tag,
    tagged_view,
)
from langchain_autocontext.tokens import resolve_counter

__all__ = [
    "SHORT_ID_RULES",
    "TAG_FORMATS",
    "TAG_PATTERN",
    "ViewCounts",
    "as_shown",
    "id_alias",
    "ref_matches",
    "render_tag",
    "render_view",
    "short_id_map",
    "strip_message_tags",
    "strip_tags",
    "view_counts",
    "view_id_map",
    "with_ids",
]

#: Attribute names a metadata tag may carry.
_ATTRS = r"(?:id|cumulative_message_token_count|message_token_count)"
_ATTR = _ATTRS + r"""\s*=\s*(?:"[^"]*"|'[^']*')"""
#: A metadata tag (attributes in any order, quoted with " or ', self-closing
#: ``<metadata …/>`` or an opening ``<metadata …>`` with an optional
#: ``</metadata>`` right after it) plus one following newline. Only tags whose
#: attributes are all among ``id``, ``cumulative_message_token_count`` and
#: ``message_token_count`` match, so ordinary XML such as Maven's ``<metadata>``
#: is left alone.
TAG_PATTERN = re.compile(
    rf"<metadata(?:\s+{_ATTR})+\s*(?:/>|>(?:[ \t]*</metadata>)?)(?:\r?\n)?"
    r'|<(?:[\w.:-]+|"[^"<>]*") \d+/\d+/>(?:\r?\n)?',
)


def strip_tags(text: str) -> str:
    """Remove metadata tags (and the newline after each) from ``text``.

    Meant for what a model wrote: it may imitate the tags it sees. Text that is
    not a metadata tag is returned unchanged, character for character.
    """
    if "<" not in text:
        return text
    return TAG_PATTERN.sub("", text)


_M = TypeVar("_M", bound=BaseMessage)


def strip_message_tags(message: _M) -> _M:
    """``message`` without metadata tags in its content (str or list of blocks), of its
    own type.

    Returns the same object when nothing was removed, else a copy. A text block
    that held nothing but tags is dropped; other blocks are kept as they are.
    """
    content = message.content
    if isinstance(content, str):
        stripped = strip_tags(content)
        if stripped == content:
            return message
        return message.model_copy(update={"content": stripped})
    changed = False
    blocks: list[Any] = []
    for block in content:
        if isinstance(block, str):
            new = strip_tags(block)
            if new != block:
                changed = True
                if not new:
                    continue
            blocks.append(new)
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            text = block["text"]
            new = strip_tags(text)
            if new != text:
                changed = True
                if not new and "id" not in block:
                    continue  # a block of nothing but tags (one with an id is an item of
                    # the provider's own, e.g. a Responses message a reasoning item needs)
                block = {**block, "text": new}
                if block.get("annotations"):
                    block["annotations"] = _shift_annotations(text, block["annotations"])
            blocks.append(block)
        else:
            blocks.append(block)
    if not changed:
        return message
    return message.model_copy(update={"content": blocks})


def _shift_annotations(text: str, annotations: Any) -> Any:
    """``annotations`` (OpenAI's url citations: ``start_index``/``end_index`` into the
    text) moved to where their characters are once the tags of ``text`` are removed."""
    cuts = [(m.start(), m.end()) for m in TAG_PATTERN.finditer(text)]

    def moved(index: Any) -> Any:
        if not isinstance(index, int):
            return index
        return index - sum(min(end, index) - start for start, end in cuts if start < index)

    if not isinstance(annotations, list):
        return annotations
    return [
        {k: moved(v) if k in ("start_index", "end_index") else v for k, v in a.items()}
        if isinstance(a, dict)
        else a
        for a in annotations
    ]


def view_counts(
    messages: Sequence[BaseMessage],
    counter: Any = None,
    *,
    tools: Sequence[Any] | None = None,
    fmt: str = "seed",
) -> ViewCounts:
    """Exact token counts of the tagged view of ``messages``, without building it.

    ``counter`` is anything :func:`~langchain_autocontext.tokens.resolve_counter`
    accepts; ``fmt`` one of :data:`TAG_FORMATS`. This is what
    ``TokenCounter.count(..., tags=fmt)`` returns (as ``.total``); :func:`render_view`
    uses the same numbers.
    """
    return count_view(messages, resolve_counter(counter), tools=tools, fmt=fmt)


def render_view(
    messages: Sequence[BaseMessage],
    counter: Any = None,
    *,
    tools: Sequence[Any] | None = None,
    fmt: str = "seed",
) -> list[BaseMessage]:
    """The model's input view: copies of ``messages`` with metadata tags.

    Every non-system message gets its tag and a newline before its content
    (string content); a leading ``{"type": "text", "text": tag}`` block (list
    content); or the tag alone (empty content, e.g. an AI message with only tool
    calls). System messages are returned unchanged and untagged (the same objects;
    nothing is ever mutated). Messages without an id are tagged with ``id=""``:
    give messages ids (``messages.ensure_ids``) so the model can address them.

    On the fast path every tag string not seen before is encoded to verify its
    token count (see :mod:`langchain_autocontext.tag_counts`); a mismatch switches
    to the exact slow path.

    Args:
        messages: the working messages (never modified).
        counter: anything :func:`~langchain_autocontext.tokens.resolve_counter`
            accepts (default: the shared ``cl100k_base`` counter).
        tools: the tool schemas sent with the request (counted in the cumulative
            totals).
        fmt: the tag format, one of :data:`TAG_FORMATS`: ``"seed"`` (the default,
            ``<metadata id cumulative_message_token_count message_token_count/>``) or
            ``"compact"`` (``<id tokens/total/>``, what ``AutoContextConfig.tag_format``
            defaults to).
    """
    return tagged_view(messages, resolve_counter(counter), tools=tools, fmt=fmt)


# --- short ids --------------------------------------------------------------------------
MIN_SHORT = 8
#: How each tag format shortens ids: ``(min_length, aliases)`` for :func:`short_id_map`.
SHORT_ID_RULES: dict[str, tuple[int, bool]] = {"compact": (4, True), "seed": (MIN_SHORT, False)}
_ALIAS_CHARS = frozenset("ghijklmnopqrstuv")


def short_id_map(
    ids: Sequence[str | None], min_length: int = MIN_SHORT, aliases: bool = False
) -> dict[str, str]:
    """See :func:`_short_id_map`; remembered for the last few id lists (every model
    call renders the view of mostly the same ids)."""
    key = (min_length, aliases, *ids)
    hit = _SHORT_IDS.get(key)
    if hit is None:
        hit = _short_id_map(tuple(ids), min_length, aliases)
        if len(_SHORT_IDS) >= 8:
            _SHORT_IDS.pop(next(iter(_SHORT_IDS)))
        _SHORT_IDS[key] = hit
    return dict(hit)


_SHORT_IDS: dict[tuple[Any, ...], dict[str, str]] = {}


def id_alias(message_id: str) -> str:
    """A stable short name for an id that is not a uuid4 (``lc_run--…`` run ids, custom
    ids): 16 letters from ``g``-``v`` (never hex, so an alias prefix is never a uuid
    prefix) of the id's BLAKE2b digest. :func:`resolve_message_ref` accepts any
    unique prefix of it."""
    digest = hashlib.blake2b(message_id.encode("utf-8"), digest_size=8).hexdigest()
    return digest.translate(_ALIAS_LETTERS)


_ALIAS_LETTERS = str.maketrans("0123456789abcdef", "ghijklmnopqrstuv")


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _stable_prefixes(names: Sequence[str], min_length: int) -> list[int]:
    """For each of ``names`` (in order), the length of its shortest prefix (at least
    ``min_length``) that no *earlier* name starts with."""
    earlier: list[str] = []  # sorted: the names sharing most with a new one are its neighbours
    lengths = []
    for name in names:
        k = bisect.bisect_left(earlier, name)
        shared = max(
            (_common_prefix(name, earlier[j]) for j in (k - 1, k) if 0 <= j < len(earlier)),
            default=0,
        )
        lengths.append(max(min_length, shared + 1))
        bisect.insort(earlier, name)
    return lengths


def view_id_map(messages: Sequence[BaseMessage], fmt: str) -> dict[str, str]:
    """The short ids the model's view shows in tags of format ``fmt`` for
    ``messages``: :func:`short_id_map` of the non-system messages' ids, by the
    format's rule (:data:`SHORT_ID_RULES`)."""
    ids = [m.id for m in messages if not isinstance(m, SystemMessage)]
    return short_id_map(ids, *SHORT_ID_RULES[fmt])


def with_ids(messages: Sequence[BaseMessage], id_map: dict[str, str]) -> list[BaseMessage]:
    """``messages`` with each id in ``id_map`` replaced by its value: memoized copies
    (:func:`~langchain_autocontext.copies.memo_with_id`), the same objects elsewhere."""
    if not id_map:
        return list(messages)
    return [memo_with_id(m, id_map[m.id]) if m.id in id_map else m for m in messages]


def as_shown(messages: Sequence[BaseMessage], fmt: str | bool) -> list[BaseMessage]:
    """``messages`` as the model's view names them: with tags (``fmt`` a format, or
    ``True`` for ``"seed"``), each id replaced by the short id its tag shows;
    ``False``: unchanged. What the view sends is counted on these
    (``counter.count(as_shown(msgs, fmt), tools, tags=fmt)``): a tag with a full uuid
    takes about 20 tokens more than with its short id, and counting the full ids made
    every tagged message look that much larger than it was sent."""
    if not fmt:
        return list(messages)
    name = fmt if isinstance(fmt, str) else "seed"
    return with_ids(messages, view_id_map(messages, name))


def _short_id_map(
    ids: Sequence[str | None], min_length: int = MIN_SHORT, aliases: bool = False
) -> dict[str, str]:
    """Short ids of the uuid4 ids (and, with ``aliases``, of the others), *stable*.

    A message's short id is the shortest prefix (at least ``min_length`` characters)
    of its id that no **earlier** message's id starts with. So a new message never
    changes the short id of a message before it: the model keeps addressing a message
    by the id it was shown, and the prompt prefix (the provider's cache) does not
    change when a new id happens to share a prefix with an old one. A later message
    that shares an earlier one's short id gets a longer one; :func:`resolve_message_ref`
    matches shown short ids exactly before it tries prefixes.

    Only random ids are shortened: a uuid4 (what LangGraph gives messages) is random
    from its first character. Time-ordered ids (uuid7, LangChain's ``lc_run--…`` run
    ids) share long prefixes with the next message and are shown whole, or, with
    ``aliases``, by a prefix of their alias (:func:`id_alias`). A short id is never
    another message's full id.
    """
    ordered = list(dict.fromkeys(i for i in ids if i))
    id_set = set(ordered)
    out: dict[str, str] = {}
    uuids = [i for i in ordered if UUID4_RE.match(i)]
    for mid, n in zip(uuids, _stable_prefixes(uuids, min_length), strict=True):
        while n < len(mid) and (mid[n - 1] == "-" or mid[:n] in id_set):
            n += 1
        if n <= len(mid) - 4:
            out[mid] = mid[:n]
    if aliases:  # the other ids by a prefix of their alias
        others = [i for i in ordered if not UUID4_RE.match(i)]
        names = [id_alias(i) for i in others]
        for mid, alias, n in zip(others, names, _stable_prefixes(names, min_length), strict=True):
            if n < len(mid):
                out[mid] = alias[:n]
    return out


def _shown_refs(messages: Sequence[BaseMessage]) -> dict[str, list[int]]:
    """Short id -> indices of the messages shown by it, in every tag format
    (:data:`SHORT_ID_RULES`)."""
    order = [(i, m.id) for i, m in enumerate(messages) if m.id and not isinstance(m, SystemMessage)]
    ids = [mid for _, mid in order]
    index = {mid: i for i, mid in order}
    refs: dict[str, list[int]] = {}
    for min_length, aliases in SHORT_ID_RULES.values():
        for mid, short in short_id_map(ids, min_length=min_length, aliases=aliases).items():
            hits = refs.setdefault(short, [])
            if index[mid] not in hits:
                hits.append(index[mid])
    return refs


def ref_matches(messages: Sequence[BaseMessage], ref: str) -> list[int]:
    """Indices of the messages a short reference (4+ characters) may name, best rule
    first: the messages a tag shows by exactly ``ref`` (:func:`short_id_map`, either
    tag format); else those whose id starts with it; else those (not uuid4) whose
    alias starts with it. One index is an answer, several an ambiguity."""
    hits = _shown_refs(messages).get(ref) or []
    if not hits:
        hits = [i for i, m in enumerate(messages) if m.id and m.id.startswith(ref)]
    if not hits and set(ref) <= _ALIAS_CHARS:  # an alias (see :func:`id_alias`)
        hits = [
            i
            for i, m in enumerate(messages)
            if m.id and not UUID4_RE.match(m.id) and id_alias(m.id).startswith(ref)
        ]
    return hits
