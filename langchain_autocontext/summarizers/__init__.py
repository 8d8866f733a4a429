"""Summarizers: replace a span of messages with one text (see :mod:`.llm` for now)."""

from langchain_autocontext.summarizers.llm import *  # noqa: F403
from langchain_autocontext.summarizers.llm import __all__ as __all__
from langchain_autocontext.summarizers.llm import _clip_to_tokens as _clip_to_tokens
