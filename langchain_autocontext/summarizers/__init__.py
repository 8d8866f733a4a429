"""Summarizers: replace a span of messages with one text.

The compression strategies call a :class:`Summarizer` with a
:class:`SummaryRequest` (the span, the strategy, a token cap) and get a
:class:`SummaryResult` back (the text plus accounting: model calls, tokens, whether
a fallback answered).

Two implementations ship with the package:

* :class:`ExtractiveSummarizer` -- deterministic, no LLM, the default. It keeps what
  an agent needs to carry on (tool names with their exact arguments, errors, ids,
  paths, URLs, the first and last lines of long outputs) and says what it cut.
* :class:`LLMSummarizer` -- any LangChain chat model (or a ``"provider:model"``
  string), with one prompt per strategy, retries with backoff, a fallback to the
  extractive summarizer, bounded concurrency, and calls hidden from the user's
  token streams.

:func:`resolve_summarizer` turns what a user passes as ``summarizer=`` into one.

The package is split by concept; everything is importable from here:

* :mod:`~langchain_autocontext.summarizers.base` -- the interface, requests, results
  and shared helpers;
* :mod:`~langchain_autocontext.summarizers.extractive` -- :class:`ExtractiveSummarizer`;
* :mod:`~langchain_autocontext.summarizers.llm` -- :class:`LLMSummarizer` and
  :func:`resolve_summarizer`;
* :mod:`~langchain_autocontext.summarizers.prompts` -- the prompt texts;
* :mod:`~langchain_autocontext.summarizers.replies` -- reading a model's reply;
* :mod:`~langchain_autocontext.summarizers.calls` -- running one model call;
* :mod:`~langchain_autocontext.summarizers.names` -- the names of a model's summary
  that its originals do not contain;
* :mod:`~langchain_autocontext.summarizers.transcript` -- :func:`render_transcript`.
"""

from langchain_autocontext.summarizers.base import (
    STRATEGIES,
    SUMMARIZER_RUN_NAME,
    SUMMARIZER_TAGS,
    Summarizer,
    SummaryRequest,
    SummaryResult,
    TextTokenCounter,
)
from langchain_autocontext.summarizers.base import (
    _clip_to_tokens as _clip_to_tokens,  # tests import it from here
)
from langchain_autocontext.summarizers.extractive import ExtractiveSummarizer
from langchain_autocontext.summarizers.llm import LLMSummarizer, resolve_summarizer
from langchain_autocontext.summarizers.prompts import DEFAULT_PROMPTS, SYSTEM_PROMPT
from langchain_autocontext.summarizers.transcript import render_transcript

__all__ = [
    "DEFAULT_PROMPTS",
    "STRATEGIES",
    "SUMMARIZER_RUN_NAME",
    "SUMMARIZER_TAGS",
    "SYSTEM_PROMPT",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "TextTokenCounter",
    "render_transcript",
    "resolve_summarizer",
]
