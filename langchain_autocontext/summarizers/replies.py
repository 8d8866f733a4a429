"""Reading a summarizer model's reply: what of it is the summary, and when it is none.

:func:`_reply_text` reads what the summarizer runnable returned (a message, a string,
a structured output); :func:`_strip_thinking` and :func:`_unwrap_reply` remove what
is not summary (reasoning written into the text, wrappers, the package's own tags);
:func:`_refusal` tells a refusal from a summary. The errors name why an attempt failed
(:class:`~langchain_autocontext.summarizers.llm.LLMSummarizer` retries some, not
others). Private to the summarizers package.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_autocontext.metadata import strip_tags

__all__: list[str] = []


class _EmptySummaryError(ValueError):
    """The model answered with no text."""


class _ToolCallsOnlyError(ValueError):
    """The model answered with tool calls and no text (tools bound to it)."""


class _UnreadableReplyError(TypeError):
    """The model's output is neither a message, a text nor a structure with a summary."""


#: Fields of a structured reply (``with_structured_output``) that hold the summary.
_TEXT_FIELDS = ("summary", "text", "content")


def _reply_text(response: Any) -> tuple[str, Any]:
    """(text, ``usage_metadata`` or ``None``) of what the summarizer runnable returned:
    a message (its text blocks only), a string, a structured output's ``summary``
    (or ``text``/``content``) field (a pydantic object or a dict), or
    ``with_structured_output(include_raw=True)``'s dict (the parsed value, else the raw
    message's text; the raw message's usage).

    Raises:
        _UnreadableReplyError: anything else (never written as its ``repr``).
    """
    if isinstance(response, BaseMessage):
        text = response.text if isinstance(response.content, list) else response.content
        return str(text), getattr(response, "usage_metadata", None)
    if isinstance(response, str):
        return response, None
    if isinstance(response, dict) and "raw" in response and "parsed" in response:
        raw = response["raw"]
        usage = getattr(raw, "usage_metadata", None) if isinstance(raw, BaseMessage) else None
        if response["parsed"] is not None:
            return _reply_text(response["parsed"])[0], usage
        if isinstance(raw, BaseMessage):
            return _reply_text(raw)[0], usage
    fields = response if isinstance(response, dict) else None
    for name in _TEXT_FIELDS:
        value = fields.get(name) if fields is not None else getattr(response, name, None)
        if isinstance(value, str):
            return value, None
        if isinstance(value, BaseMessage):
            return _reply_text(value)
    raise _UnreadableReplyError(
        f"the summarizer returned a {type(response).__name__}, not a message, a string or "
        f"a structure with a {'/'.join(_TEXT_FIELDS)} text field"
    )


class _RefusalError(ValueError):
    """The model refused, or the provider filtered its reply: not a summary."""


#: Provider stop signals of a refused or filtered reply (Anthropic ``stop_reason``,
#: OpenAI/Azure ``finish_reason``, Gemini ``finish_reason``).
_REFUSAL_STOPS = frozenset(
    {"refusal", "content_filter", "safety", "prohibited_content", "blocklist"}
)
#: A reply this short that opens with a refusal is one (a summary never starts so).
_REFUSAL_MAX_CHARS = 300
_REFUSAL = re.compile(
    r"^(?:(?:i'm |i am |we're |we are )?(?:sorry|afraid)[,.!]?\s*(?:but\s*)?|"
    r"i apologi[sz]e[,.!]?\s*(?:but\s*)?|unfortunately,?\s*)?"
    r"(?:i|we)\s*(?:can't|cannot|can not|won't|will not|am unable to|'m unable to|are unable to|"
    r"am not able to|'m not able to|must decline to|must refuse to)\s+"
    r"(?:help|assist|comply|provide|do|fulfil|fulfill|summari[sz]e|complete|process|"
    r"continue|engage|create|write|support)\b",
    re.IGNORECASE,
)


_THINK_BLOCK = re.compile(r"<(think|thinking)>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<(?:think|thinking)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking)\s*>", re.IGNORECASE)


def _strip_thinking(text: str) -> str:
    """``text`` without the reasoning some models write into the reply itself
    (``<think>…</think>``: Qwen3, DeepSeek-R1, gpt-oss behind OpenAI-compatible
    servers; ``<thinking>…</thinking>``): closed blocks are removed; an unclosed one
    (the reply was cut while reasoning) is removed to the end; text before a lone
    closing tag (a template that opened the block in the prompt) is reasoning too."""
    if "think" not in text.lower():
        return text
    text = _THINK_BLOCK.sub("", text)
    opened = _THINK_OPEN.search(text)
    if opened is not None:
        text = text[: opened.start()]
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    return text


_FENCED = re.compile(r"\A```[\w.+-]*[ \t]*\n(.*?)\n?```\Z", re.DOTALL)
_SUMMARY_TAGS = re.compile(r"\A<summary>\s*(.*?)\s*</summary>\Z", re.DOTALL | re.IGNORECASE)
#: A first line that only announces the summary ("Here is a summary of …:", "Summary:").
_PREAMBLE = re.compile(
    r"\A(?:(?:sure|certainly|ok(?:ay)?)[,!.]?\s*)?"
    r"(?:here(?:'s| is| are)\b[^\n]{0,160}?summar[^\n]{0,160}?|(?:\*\*)?summary(?:\*\*)?)"
    r":(?:\*\*)?[ \t]*(?:\n|\Z)",
    re.IGNORECASE,
)


def _unwrap_reply(text: str) -> str:
    """``text`` without what wraps a summary rather than being one: the package's own
    metadata tags (a model imitates the tags it sees), a code fence around the whole
    reply, a ``<summary>…</summary>`` wrapper, a first line that only announces the
    summary ("Here is a summary of the conversation:")."""
    text = strip_tags(text).strip()
    for _ in range(3):
        before = text
        for pattern in (_FENCED, _SUMMARY_TAGS):
            match = pattern.match(text)
            if match:
                text = match.group(1).strip()
        match = _PREAMBLE.match(text.replace("\u2019", "'"))
        if match:
            text = text[match.end() :].strip()
        if text == before:
            break
    return text


def _refusal(response: Any, text: str) -> str | None:
    """Why ``response`` is a refusal rather than a summary, or ``None``: a provider's
    refusal or content-filter stop (``"length"`` is normal when the cap is bound), an
    OpenAI ``refusal`` (content block or ``additional_kwargs``), or a short reply that
    opens with a refusal ("I can't help with that.", "I'm sorry, but I cannot …")."""
    if isinstance(response, BaseMessage):
        meta = response.response_metadata or {}
        for key in ("stop_reason", "finish_reason"):
            stop = meta.get(key)
            if isinstance(stop, str) and stop.strip().lower() in _REFUSAL_STOPS:
                return f"the provider stopped the reply ({key}={stop!r})"
        if response.additional_kwargs.get("refusal"):
            return f"the model refused: {str(response.additional_kwargs['refusal'])[:200]!r}"
        if isinstance(response.content, list):
            for block in response.content:
                if isinstance(block, dict) and block.get("type") == "refusal":
                    return f"the model refused: {str(block.get('refusal', ''))[:200]!r}"
    plain = text.strip().replace("\u2019", "'")
    if len(plain) <= _REFUSAL_MAX_CHARS and _REFUSAL.match(plain):
        return f"the model refused: {plain[:200]!r}"
    return None
