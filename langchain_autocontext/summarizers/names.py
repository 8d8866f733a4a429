"""Exact names a summary asserts that its originals do not contain.

A model's summary may name an API, a path or an id that appears nowhere in what it
summarized (a "close enough" function name, a guessed path); an agent that trusts it
calls that name and fails. :func:`unsupported_names` finds the *exact names* of a
summary -- spans in backticks, file paths, dotted names, identifiers with ``_`` or
internal capitals, tokens mixing letters and digits, numbers of five or more digits --
and keeps those the originals do not support; :func:`names_note` is the short line
:class:`~langchain_autocontext.summarizers.llm.LLMSummarizer` appends to say so.

A name is supported when it occurs in the originals (case-insensitively, as a
substring); a path also when its last component does, a dotted name also when its last
part does (a summary may qualify a name from its context: ``views.get_user`` for a
``get_user`` the transcript shows). Ordinary words and tokens under four characters are
never names.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence

from langchain_core.messages import BaseMessage

from langchain_autocontext.summarizers.transcript import call_strings, render_transcript

__all__ = ["exact_names", "names_note", "originals_text", "unsupported_names"]

#: Names listed in a note at most (the rest are counted).
NOTE_NAMES = 5

_BACKTICKED = re.compile(r"`([^`\n]+)`")
#: A token: a run of characters that no space, quote, bracket, arrow or dash splits
#: (``HAT017→HAT277``, ``a.py–b.py``: two names joined in prose), nor a character of
#: the scripts written without spaces (Chinese and Japanese write a name into the
#: sentence, Korean adds its particles to it, Thai, Lao, Myanmar and Khmer run words
#: together; their punctuation and full-width forms).
_TOKEN = re.compile(
    r"[^\s`'\"‘’“”«»()\[\]{}<>,;|=*→←↔⇒⇐–—"
    r"\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
    r"\u3000-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef]+"
)
#: Stripped from a token's ends: sentence punctuation, and the ellipsis of a cut name
#: (``settings.c…``: what is left of it is checked, as a prefix of what it was).
_EDGE = ".:!?-…"
#: Stripped from a token's start: a currency sign, an approximation or a number sign
#: before what it qualifies (``$596.00``, ``~2.5``, ``#4BMN53``: a price of ``596``,
#: the id ``4BMN53``).
_LEAD = "$€£¥₹~≈±+#§"
_LINE_NUMBER = re.compile(r":\d+(?::\d+)?$")
_NUMBER = re.compile(r"[\d.,]+")
#: Numbers in prose, no names: ordinals and decades (``10th``, ``1990s``), measures
#: (``60-token``, ``3.2s``, ``100ms``, ``2.5GB``), versions (``4.2.1``), times (``10:30am``).
_PROSE_NUMBER = re.compile(r"\d[\d.,:]*(?:-[a-z]+|[a-z%]{1,3})?", re.IGNORECASE)
_INTERNAL_CAPITAL = re.compile(r".(?:[a-z][A-Z]|[A-Z]{2}[a-z])")
#: The last part of a dotted token that makes it a file name (``models.py``, ``a.json``):
#: a short one, or a longer extension that is no attribute name.
_EXTENSION = re.compile(
    r"[a-z0-9]{1,3}|json|jsonl|yaml|toml|html|ipynb|java|scss|lock|conf|diff|xlsx|docx"
)
_MIN_CHARS = 4
_NOTE_START = "[Not in the summarized messages: "
#: A note of :func:`names_note`, its list of names captured.
_NOTE = re.compile(re.escape(_NOTE_START) + r"([^\n]*?)\.\]")


def _is_name(token: str) -> bool:
    """Whether a token (stripped of its punctuation) is an exact name."""
    if len(token) < _MIN_CHARS:
        return False
    if _NUMBER.fullmatch(token):  # numbers: only ids of five or more digits
        return token.isdigit() and len(token) >= 5
    if _PROSE_NUMBER.fullmatch(token):
        return False
    if "/" in token:
        if token.startswith(("/", "./", "~/")) or token.count("/") > 1:
            return True
        # one slash between two plain words ("and/or", "read/write") is prose
        return not all(part.isalpha() for part in token.split("/") if part)
    if "." in token.strip("."):
        return True
    has_letter = any(c.isalpha() for c in token)
    if "_" in token and has_letter:
        return True
    if _INTERNAL_CAPITAL.search(token):
        return True
    return has_letter and any(c.isdigit() for c in token)


def _tokens(text: str) -> Iterator[str]:
    # ``::`` joins names (a pytest node id ``path::Class::test``, ``Type::method``): each
    # is a name of its own, as the messages name it
    for raw in _TOKEN.findall(text.replace("::", " ")):
        token = _LINE_NUMBER.sub("", raw.strip(_EDGE).lstrip(_LEAD)).strip(_EDGE)
        if token:
            yield token


def exact_names(text: str) -> list[str]:
    """The exact names of ``text``, each once, in order of appearance: backticked
    spans whole (the names of a command or a call with its arguments are taken apart
    only when it is not found: see :func:`unsupported_names`), then the names among
    the rest's tokens."""
    names: dict[str, None] = {}
    for span in _BACKTICKED.findall(text):
        span = span.strip().rstrip("…")
        if span.endswith("()"):
            span = span[:-2]
        if len(span) >= _MIN_CHARS:
            names.setdefault(span)
    for token in _tokens(_BACKTICKED.sub(" ", text)):
        if _is_name(token):
            names.setdefault(token)
    return list(names)


def _supported(name: str, originals: str) -> bool:
    """Whether ``name`` occurs in ``originals`` (already lower-cased): whole, or as a
    path's last component, or as a dotted name's last part."""
    low = name.lower()
    if low in originals:
        return True
    if "/" in low:
        last = low.rstrip("/").rsplit("/", 1)[-1]
        return len(last) >= _MIN_CHARS and last in originals
    if "." in low.strip("."):
        last = low.rstrip(".").rsplit(".", 1)[-1]
        # a file name's extension (``models.py``) says nothing: the whole name must occur
        return not _EXTENSION.fullmatch(last) and last in originals
    return False


def unsupported_names(summary: str, originals: str) -> list[str]:
    """The exact names of ``summary`` (see :func:`exact_names`) that ``originals``
    does not support, in order of appearance."""
    source = originals.lower()
    missing: dict[str, None] = {}
    for name in exact_names(summary):
        if _supported(name, source):
            continue
        tokens = list(_tokens(name))
        if tokens != [name]:  # a command or a call, reworded: its own names count
            for token in tokens:
                if _is_name(token) and not _supported(token, source):
                    missing.setdefault(token)
        else:
            missing.setdefault(name)
    return list(missing)


def originals_text(messages: Sequence[BaseMessage], previous_summary: str | None = None) -> str:
    """What a summary of ``messages`` may name: their whole transcript (message texts,
    tool calls with their names and arguments, tool results; nothing cut), the
    arguments' strings as they are (a JSON rendering escapes quotes and backslashes),
    and ``previous_summary`` (what the ``recursive`` strategy folds in) without the
    names its own note listed."""
    parts = [render_transcript(messages, args_chars=sys.maxsize)]
    for message in messages:
        parts.extend(call_strings(message))
    if previous_summary:
        parts.append(_unnoted(previous_summary))
    return "\n".join(parts)


def _unnoted(summary: str) -> str:
    """``summary`` without its notes (:func:`names_note`) and the names they list: a
    name a summary was noted for is no support for the next fold (a fold that repeats
    it without the note would pass it on as found)."""
    listed = [n for note in _NOTE.findall(summary) for n in _BACKTICKED.findall(note)]
    text = _NOTE.sub(" ", summary)
    for name in sorted(listed, key=len, reverse=True):
        text = re.sub(re.escape(name), " ", text, flags=re.IGNORECASE)
    return text


def names_note(names: Sequence[str], limit: int = NOTE_NAMES) -> str:
    """The line that lists ``names`` (at most ``limit``, the rest counted):
    ``[Not in the summarized messages: `x`, `y`.]``."""
    shown = ", ".join(f"`{name}`" for name in names[:limit])
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return f"{_NOTE_START}{shown}{more}.]"
