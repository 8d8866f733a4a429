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
uses for ``count(..., tags=...)``); this module is the public face: render, count, strip.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_autocontext.tag_counts import (
    TAG_FORMATS,
    ViewCounts,
    count_view,
    render_tag,
    tagged_view,
)
from langchain_autocontext.tokens import resolve_counter

__all__ = [
    "TAG_FORMATS",
    "TAG_PATTERN",
    "ViewCounts",
    "render_tag",
    "render_view",
    "strip_message_tags",
    "strip_tags",
    "view_counts",
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


def strip_message_tags(message: BaseMessage) -> BaseMessage:
    """``message`` without metadata tags in its content (str or list of blocks).

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
                if not new:
                    continue
                block = {**block, "text": new}
            blocks.append(block)
        else:
            blocks.append(block)
    if not changed:
        return message
    return message.model_copy(update={"content": blocks})


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
    """
    return tagged_view(messages, resolve_counter(counter), tools=tools, fmt=fmt)
