"""Summaries written by a chat model: :class:`LLMSummarizer`, and :func:`resolve_summarizer`.

:class:`LLMSummarizer` takes any LangChain chat model (or a ``"provider:model"``
string for ``init_chat_model``), with one prompt per strategy, retries with backoff
(LangChain's ``Runnable.with_retry``), a fallback to the extractive summarizer, bounded
concurrency, calls hidden from the user's token streams, and a note after a summary
that names what the summarized messages do not (:mod:`~.names`). :func:`resolve_summarizer` turns what a user passes as
``summarizer=`` (``None``, ``"offline"``, a summarizer, a chat model or a
``"provider:model"`` string) into a :class:`~langchain_autocontext.summarizers.base.Summarizer`.

Over 600 lines because :class:`LLMSummarizer` is one class with two paths (sync and
async attempts, kept side by side so they stay alike) and its documented arguments;
reading replies (:mod:`~langchain_autocontext.summarizers.replies`) and running one
call (:mod:`~langchain_autocontext.summarizers.calls`) are modules of their own.
"""

from __future__ import annotations

import asyncio
import copy
import difflib
import functools
import importlib.util
import re
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from langchain_autocontext.budget import model_window
from langchain_autocontext.errors import caller_stacklevel
from langchain_autocontext.messages import clean_text, text_of
from langchain_autocontext.summarizers.base import (
    STRATEGIES,
    SUMMARIZER_RUN_NAME,
    SUMMARIZER_TAGS,
    Summarizer,
    SummaryRequest,
    SummaryResult,
    TextTokenCounter,
    _clip_to_tokens,
)
from langchain_autocontext.summarizers.calls import (
    _model_name,
    _reasons,
    athread,
    awithin,
    cannot_succeed,
    native_async,
    rate_limited,
    retry_after,
    within,
)
from langchain_autocontext.summarizers.extractive import ExtractiveSummarizer
from langchain_autocontext.summarizers.names import (
    names_note,
    originals_text,
    unsupported_names,
)
from langchain_autocontext.summarizers.prompts import (
    _LIMIT,
    DEFAULT_PROMPTS,
    RECURSIVE_FOLD_PROMPT,
    SYSTEM_PROMPT,
    _fill,
)
from langchain_autocontext.summarizers.replies import (
    _EmptySummaryError,
    _refusal,
    _RefusalError,
    _reply_text,
    _strip_thinking,
    _ToolCallsOnlyError,
    _UnreadableReplyError,
    _unwrap_reply,
)
from langchain_autocontext.summarizers.transcript import render_transcript

__all__ = ["LLMSummarizer", "resolve_summarizer"]


#: The elements the prompts wrap data in: a text that opens or closes one (a tool
#: result with ``</transcript>``) is escaped so it cannot end the data early.
_WRAPPER_TAG = re.compile(
    r"<(/?\s*(?:transcript|evicted_messages|existing_summary)\b)", re.IGNORECASE
)


def _escape_wrappers(text: str) -> str:
    return _WRAPPER_TAG.sub(r"&lt;\1", text)


# --- the LLM summarizer ----------------------------------------------------------------------
class _Default:
    """Sentinel: "a fresh ExtractiveSummarizer"."""

    def __repr__(self) -> str:
        return "ExtractiveSummarizer()"


_DEFAULT_FALLBACK: Any = _Default()


class _DefaultInt(int):
    """An int default that says it was not passed (``retries``, ``concurrency``), so a
    configuration's own setting can apply to an instance built without one."""


_DEFAULT_RETRIES: int = _DefaultInt(2)
_DEFAULT_CONCURRENCY: int = _DefaultInt(4)
#: Chat-model fields that cap the reply, in the order they are tried.
_MAX_TOKEN_FIELDS = ("max_tokens", "max_output_tokens", "max_completion_tokens")


class _Retry(Exception):
    """A failed attempt worth another one (what ``with_retry`` retries); ``error`` is
    the failure itself, re-raised or reported once the attempts are spent."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _unwrap(exc: Exception) -> Exception:
    return exc.error if isinstance(exc, _Retry) else exc


def _missing_provider_package(spec: str) -> str | None:
    """The pip name of the package ``init_chat_model`` needs for ``spec``
    (``"openai:gpt-4o-mini"`` -> ``langchain-openai``) when it is not installed; ``None``
    when it is, or when langchain's layout is not the one known here.

    Raises:
        ValueError: ``spec`` names no provider and none can be told from the model name
            (``"offlin"``, a typo of ``"offline"``), or names one ``init_chat_model``
            does not know (``"google:gemini-2.0-flash"``, ``"opneai:gpt-4o"``), as
            ``init_chat_model`` would say at the first summary, many tool calls later
            (and the offline summarizer would write every summary meanwhile).
    """
    try:
        from langchain.chat_models.base import _BUILTIN_PROVIDERS, _parse_model
    except ImportError:  # another langchain layout: init_chat_model says at the first call
        return None
    try:
        _, provider = _parse_model(spec, None)
        module = str(_BUILTIN_PROVIDERS[provider][0])
    except (ValueError, KeyError) as exc:
        if ":" in spec:
            named = spec.split(":", 1)[0].strip()
            known = sorted(_BUILTIN_PROVIDERS)
            near = difflib.get_close_matches(named.lower().replace("-", "_"), known, n=1)
            near = near or [p for p in known if p.startswith(named.lower() + "_")][:1]
            guess = f" Did you mean {near[0]!r}?" if near else ""
            raise ValueError(
                f"The summarizer {spec!r} names the provider {named!r}, which LangChain's "
                f"init_chat_model does not know.{guess} Known providers: {', '.join(known)}. "
                "Or pass a chat model instance, or summarizer='offline' for the offline "
                "extractive summarizer."
            ) from exc
        near = difflib.get_close_matches(spec.strip().lower(), sorted(_OFFLINE_NAMES), n=1)
        guess = f" Did you mean summarizer={near[0]!r}?" if near else ""
        raise ValueError(
            f"The summarizer {spec!r} names no chat model LangChain can tell: give it as "
            f"'provider:model' (e.g. 'openai:gpt-4o-mini'), pass a chat model instance, or "
            f"use summarizer='offline' for the offline extractive summarizer.{guess}"
        ) from exc
    except Exception:  # another langchain layout
        return None
    top = module.split(".")[0]
    return None if importlib.util.find_spec(top) is not None else top.replace("_", "-")


#: Characters a token of a transcript is taken to hold when it is sized to a summarizer
#: model's window: fewer than any data set of ``../shared/data`` holds (cl100k_base:
#: 4.0 on the coding runs' messages, 3.1 on tau-bench's JSON tool results).
CHARS_PER_TOKEN = 3


class LLMSummarizer(Summarizer):
    """Summaries written by a chat model, with retries, a fallback and hidden calls.

    Args:
        model: A LangChain chat model (or any Runnable that takes a list of
            messages and returns a message), or a ``"provider:model"`` string
            resolved on first use with ``langchain.chat_models.init_chat_model``.
        prompts: Overrides of :data:`DEFAULT_PROMPTS` per strategy, and of the system
            prompt under the key ``"system"``. A strategy prompt must contain
            ``{transcript}``; if it names no length placeholder the length sentence
            is appended.
        retries: Extra attempts after a failed call (exceptions or an empty reply).
            Failures that would recur are not retried (a context overflow,
            ``NotImplementedError``, a 4xx, a refusal, a reply of tool calls only):
            the fallback answers at once. A rate limit's ``retry-after`` is honoured
            up to ``max_backoff`` (or ``timeout`` when longer); a longer one is not
            waited for.
        fallback: Answers when every attempt failed (the result then has
            ``fallback=True`` and ``error``). ``None`` re-raises the last error.
            Default: a fresh :class:`ExtractiveSummarizer`.
        concurrency: Spans summarized at once by the ``*_many`` methods.
        hide_from_stream: When True (default), calls run with ``callbacks=[]`` so no
            token reaches the caller's ``stream_mode="messages"`` or
            ``astream_events``; when False the caller's callbacks (tracing, cost
            tracking) see the calls. The tags in :data:`SUMMARIZER_TAGS` are
            always added.
        backoff: Seconds before the first retry; doubles per retry (four times as long
            after a rate limit without ``retry-after``).
        max_backoff: Cap on one wait between retries.
        bind_max_tokens: Bind the request's ``max_tokens`` to the call when the
            chat model has such a field (``max_tokens``, ``max_output_tokens``, …)
            and does not reason before it answers (a reasoning model spends such a
            cap on its reasoning and answers with nothing; Anthropic with thinking
            rejects a cap below the thinking budget): those keep their own setting.
            The reply is truncated to ``max_tokens`` by the counter in any case.
        max_input_chars: Cap on the transcript's characters (the largest messages
            are cut in the middle to fit), so a huge span cannot overflow the
            summarizer model's own window. When the model's profile states its input
            window, the transcript is also cut to fit it (less the prompt and the
            reply's cap); a span of very many messages keeps each one's header line,
            so it may still not fit a window of a few hundred tokens.
        token_counter: Counter for budgets and for usage when the response has no
            ``usage_metadata`` (``None``: a len/4 estimate).
        timeout: Seconds one model call may take (``None``: no limit). A call past it
            counts as a failed attempt (retried, then the fallback answers), like
            any other failure. Async calls are cancelled; a sync call runs in a
            daemon thread that is abandoned (its late answer is ignored).
        check_names: When True (default), a summary that names what the summarized
            messages do not (a function, a path, a dotted name, an id: see
            :mod:`~langchain_autocontext.summarizers.names`) gets one line that lists
            those names, ``[Not in the summarized messages: `x`, `y`.]``, within
            ``max_tokens`` and without another model call. For ``recursive``, the
            previous summary counts as summarized, less the names its own note
            listed. A summary whose names all occur in
            the messages is unchanged.

    Errors from resolving a model string (a missing provider package, an
    unknown provider) are configuration errors: they are raised, never retried
    or hidden behind the fallback.
    """

    def __init__(
        self,
        model: BaseChatModel | Runnable[Any, Any] | str,
        *,
        prompts: dict[str, str] | None = None,
        retries: int = _DEFAULT_RETRIES,
        fallback: Summarizer | None = _DEFAULT_FALLBACK,
        concurrency: int = _DEFAULT_CONCURRENCY,
        hide_from_stream: bool = True,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        bind_max_tokens: bool = True,
        max_input_chars: int = 200_000,
        token_counter: TextTokenCounter | None = None,
        timeout: float | None = None,
        check_names: bool = True,
    ) -> None:
        if isinstance(model, str):
            if not model.strip():
                raise ValueError("LLMSummarizer needs a model: got an empty string")
            missing = _missing_provider_package(model)
            if missing:  # fail now, not 15 tool calls later inside before_model
                raise ImportError(
                    f"The summarizer {model!r} needs the package {missing!r}, which is not "
                    f"installed: pip install {missing} (or pass a chat model instance, or "
                    "summarizer='offline' for the offline extractive summarizer)."
                )
        elif not isinstance(model, Runnable):
            raise TypeError(
                f"LLMSummarizer needs a LangChain chat model or a 'provider:model' string, "
                f"got {type(model).__name__}"
            )
        if retries < 0:
            raise ValueError("retries must be >= 0")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if backoff < 0 or max_backoff < 0:
            raise ValueError("backoff and max_backoff must be >= 0")
        if timeout is not None and not timeout > 0:
            raise ValueError(
                f"timeout must be a positive number of seconds or None, got {timeout!r}"
            )
        #: the settings passed to the constructor (a configuration's apply to the others)
        self._own_settings = frozenset(
            name
            for name, value in (
                ("retries", retries),
                ("concurrency", concurrency),
                ("timeout", timeout),
            )
            if value is not None and not isinstance(value, _DefaultInt)
        )
        self.timeout = timeout
        self._model_spec = model
        self._model: Runnable[Any, Any] | None = None if isinstance(model, str) else model
        self._model_lock = threading.Lock()
        self._load_warned = False
        self._fail_warned = False
        self.prompts = self._check_prompts(prompts or {})
        self.retries = int(retries)
        self._owns_fallback = fallback is _DEFAULT_FALLBACK
        self.fallback: Summarizer | None = (
            ExtractiveSummarizer() if self._owns_fallback else fallback
        )
        if self.fallback is not None and not isinstance(self.fallback, Summarizer):
            raise TypeError("fallback must be a Summarizer or None")
        self.concurrency = int(concurrency)
        self.hide_from_stream = hide_from_stream
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.bind_max_tokens = bind_max_tokens
        self.max_input_chars = max_input_chars
        self.name = f"llm:{_model_name(model)}"
        self.token_counter = token_counter
        self.check_names = check_names

    def adopt_settings(self, **settings: Any) -> dict[str, tuple[Any, Any]]:
        """Apply a configuration's ``retries``/``timeout``/``concurrency`` (the
        ``summarizer_*`` fields of :class:`~langchain_autocontext.AutoContextConfig`)
        to those this summarizer was not given when built; returns the others whose
        value differs, as ``{name: (own value, the configuration's)}``: its own stay.

        Raises:
            ValueError: an unknown setting or an invalid value.
        """
        unknown = set(settings) - {"retries", "timeout", "concurrency"}
        if unknown:
            raise ValueError(f"Unknown summarizer settings {sorted(unknown)}")
        kept: dict[str, tuple[Any, Any]] = {}
        for name, value in settings.items():
            if name in self._own_settings:
                if getattr(self, name) != value:
                    kept[name] = (getattr(self, name), value)
                continue
            if name == "timeout" and value is not None and not value > 0:
                raise ValueError(
                    f"timeout must be a positive number of seconds or None, got {value!r}"
                )
            if name == "retries" and value < 0:
                raise ValueError("retries must be >= 0")
            if name == "concurrency" and value < 1:
                raise ValueError("concurrency must be >= 1")
            setattr(self, name, value)
        return kept

    def with_settings(self, **settings: Any) -> LLMSummarizer:
        """This summarizer when ``settings`` (see :meth:`adopt_settings`) change nothing it
        was not built with; else a copy that adopts them, so an instance shared by two
        ``AutoContext`` s keeps each one's configuration (it took the last one's)."""
        changes = {
            name: value
            for name, value in settings.items()
            if name not in self._own_settings and getattr(self, name, value) != value
        }
        if not changes:
            self.adopt_settings(**settings)  # validates; changes nothing
            return self
        twin = copy.copy(self)
        twin.adopt_settings(**settings)
        return twin

    def __repr__(self) -> str:
        return (
            f"LLMSummarizer({self.name[4:]!r}, retries={self.retries}, fallback={self.fallback!r})"
        )

    @staticmethod
    def _check_prompts(prompts: dict[str, str]) -> dict[str, str]:
        unknown = set(prompts) - set(STRATEGIES) - {"system"}
        if unknown:
            raise ValueError(
                f"Unknown prompt keys {sorted(unknown)}; expected strategies {STRATEGIES} or 'system'"
            )
        merged = {"system": SYSTEM_PROMPT, **DEFAULT_PROMPTS}
        for key, text in prompts.items():
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"Prompt {key!r} must be a non-empty string")
            if key != "system" and "{transcript}" not in text:
                raise ValueError(f"Prompt {key!r} must contain the placeholder {{transcript}}")
            if key != "system" and not re.search(r"\{(limit|max_tokens|max_words)\}", text):
                text = f"{text}\n\n{{limit}}"
            merged[key] = text
        return merged

    # -- token counter shared with the default fallback --------------------------------
    @Summarizer.token_counter.setter  # type: ignore[attr-defined]
    def token_counter(self, counter: TextTokenCounter | None) -> None:
        Summarizer.token_counter.fset(self, counter)  # type: ignore[attr-defined]
        if getattr(self, "_owns_fallback", False) and self.fallback is not None:
            self.fallback.token_counter = counter

    # -- the model ------------------------------------------------------------------------
    @property
    def model(self) -> Runnable[Any, Any]:
        """The chat model; a ``"provider:model"`` string is resolved on first access."""
        if self._model is None:
            with self._model_lock:
                if self._model is None:
                    self._model = self._resolve(str(self._model_spec))
        return self._model

    @staticmethod
    def _resolve(spec: str) -> Runnable[Any, Any]:
        try:
            from langchain.chat_models import init_chat_model
        except ImportError as exc:  # pragma: no cover - langchain is a dependency
            raise ImportError(
                f"LLMSummarizer cannot resolve {spec!r}: the 'langchain' package is missing "
                "(pip install langchain). Pass a chat model instance instead."
            ) from exc
        hint = (
            "Pass a chat model instance, install the provider's package, or use "
            "summarizer='offline' for the offline extractive summarizer."
        )
        try:
            return init_chat_model(spec)
        except ImportError as exc:
            raise ImportError(
                f"LLMSummarizer cannot load the model {spec!r}: {exc}. {hint}"
            ) from exc
        except ValueError as exc:
            raise ValueError(f"LLMSummarizer cannot load the model {spec!r}: {exc} {hint}") from exc

    def _runnable(self, request: SummaryRequest) -> Runnable[Any, Any]:
        model = self.model
        if self.bind_max_tokens and isinstance(model, BaseChatModel) and not _reasons(model):
            fields = type(model).model_fields
            for name in _MAX_TOKEN_FIELDS:
                if name in fields:
                    return model.bind(**{name: request.max_tokens})
        return model

    def call_config(self, request: SummaryRequest | None = None) -> RunnableConfig:
        """The config of every model call: hidden from streams unless told otherwise."""
        config: RunnableConfig = {
            "tags": list(SUMMARIZER_TAGS),
            "run_name": SUMMARIZER_RUN_NAME,
        }
        if request is not None:
            config["metadata"] = {"autocontext_strategy": request.strategy}
        if self.hide_from_stream:
            config["callbacks"] = []
        return config

    # -- prompt ---------------------------------------------------------------------------
    def build_prompt(self, request: SummaryRequest) -> list[BaseMessage]:
        """The messages sent to the model for ``request`` (system + task with transcript)."""
        max_words = max(1, request.max_tokens * 3 // 4)
        target = ""
        if request.target_tokens is not None and request.target_tokens < request.max_tokens:
            target = f"; aim for about {request.target_tokens} tokens"
        limit = _LIMIT.format(max_tokens=request.max_tokens, max_words=max_words, target=target)
        values = {
            "transcript": _escape_wrappers(self._transcript(request)),
            "message_count": str(len(request.messages)),
            "limit": limit,
            "max_tokens": str(request.max_tokens),
            "max_words": str(max_words),
            "target_tokens": str(request.target_tokens or request.max_tokens),
            "previous_summary": _escape_wrappers((request.previous_summary or "").strip())
            or "(not shown: the agent keeps it, and your text is appended to it)",
        }
        template = self.prompts[request.strategy]
        if (
            request.strategy == "recursive"
            and template == DEFAULT_PROMPTS["recursive"]
            and (request.previous_summary or "").strip()
        ):
            template = RECURSIVE_FOLD_PROMPT  # one text to replace both
        return [
            SystemMessage(content=self.prompts["system"]),
            HumanMessage(content=_fill(template, values)),
        ]

    def _transcript(self, request: SummaryRequest) -> str:
        """The span as a transcript of at most ``max_input_chars`` characters, and within
        the summarizer model's own input window when its profile states one (a
        summarizer with a smaller window than the agent's got prompts past it: a
        context-length error on every span): the window less the prompt's fixed text,
        the reply's cap and a tenth. Sized at :data:`CHARS_PER_TOKEN` characters a
        token, then counted and cut again in proportion while over (numbers and logs
        run fewer characters a token)."""
        chars = self.max_input_chars
        window = model_window(self._model) if self._model is not None else None
        room = None
        if window is not None:
            template = self.prompts[request.strategy] + self.prompts["system"]
            fixed = self.count(template) + request.max_tokens + 64
            room = max(250, int(window.max_input_tokens * 0.9) - fixed)
            chars = min(chars, room * CHARS_PER_TOKEN)
        transcript = render_transcript(request.messages, max_chars=chars)
        for _ in range(4):
            tokens = self.count(transcript) if room is not None else 0
            if room is None or tokens <= room or chars <= 1_000:
                break
            chars = max(1_000, int(chars * room / tokens * 0.95))
            transcript = render_transcript(request.messages, max_chars=chars)
        return transcript

    def _prompt_tokens(self, prompt: list[BaseMessage]) -> int:
        return sum(self.count(text_of(m)) for m in prompt)

    def _read(self, response: Any, prompt_tokens: int) -> tuple[str, int, int, bool]:
        """(reply text, input tokens, output tokens, whether the provider reported
        them) of a response (see :func:`_reply_text`); unreported usage is estimated:
        the prompt's tokens and the reply's."""
        text, usage = _reply_text(response)
        # cleaned like every input: a lone surrogate or a NUL from a model would make the
        # summary unstorable (PostgreSQL's jsonb rejects NUL) and kill the thread
        raw = clean_text(str(text))
        text = _unwrap_reply(_strip_thinking(raw))  # its reasoning was generated (and billed) too
        if usage:
            used_in, used_out = (
                int(usage.get("input_tokens", 0)),
                int(usage.get("output_tokens", 0)),
            )
            return text, used_in, used_out, True
        return text, prompt_tokens, self.count(raw.strip()), False

    def _finish(self, text: str, request: SummaryRequest) -> str:
        """The reply within ``max_tokens``; with ``check_names``, and when it names what
        the originals do not (:func:`~.names.unsupported_names`), followed by one line
        that lists those names, for which the body is clipped to leave room. A reply
        whose names all occur in the originals is only clipped."""
        cap = request.max_tokens
        clipped = self._clip(text, cap)
        if not self.check_names:
            return clipped
        originals = originals_text(request.messages, self._folded(request))
        missing = self._unsupported(clipped, cap, originals)
        if not missing:
            return clipped
        room = cap - self.count(f"\n{names_note(missing)}")
        for _ in range(3):  # again only for a counter that does not add up
            if room < 1:  # no room for a note beside any summary: the clipped reply alone
                break
            body = self._clip(text, room, cap)
            missing = self._unsupported(body, cap, originals)  # those the clipping kept
            noted = f"{body}\n{names_note(missing)}" if missing else body
            over = self.count(noted) - cap
            if over <= 0:
                return noted
            room -= over
        return clipped

    def _clip(self, text: str, limit: int, max_tokens: int | None = None) -> str:
        """``text`` within ``limit`` tokens, saying it was cut to the request's
        ``max_tokens`` (``limit`` by default; less when a note is to follow)."""
        note = self._cut_note(limit if max_tokens is None else max_tokens)
        return _clip_to_tokens(text, limit, self.count, note)

    @staticmethod
    def _cut_note(max_tokens: int) -> str:
        return f"[summary truncated to {max_tokens} tokens]"

    def _unsupported(self, summary: str, max_tokens: int, originals: str) -> list[str]:
        """The names of a clipped ``summary`` that ``originals`` do not support (the
        line saying it was cut is the package's, not the model's)."""
        body = summary.removesuffix(self._cut_note(max_tokens))
        return unsupported_names(body, originals)

    @staticmethod
    def _folded(request: SummaryRequest) -> str | None:
        """The previous summary a ``recursive`` request folds in (names it holds are
        the originals' too); ``None`` for the other strategies, which ignore it."""
        return request.previous_summary if request.strategy == "recursive" else None

    def _delay(self, retry: int) -> float:
        """Seconds before retry number ``retry`` (1, 2, …): doubling from ``backoff``."""
        return min(self.max_backoff, self.backoff * (2 ** (retry - 1)))

    def _retry_wait(self, exc: Exception, retry: int) -> float | None:
        """Seconds to wait before retry number ``retry`` after ``exc``, or ``None`` when
        retrying cannot help and the fallback should answer at once: a reply that is
        not a summary (a refusal, tool calls only, an unreadable output), a request
        that fails the same way again (:func:`~.calls.cannot_succeed`: a context
        overflow, ``NotImplementedError``, a 4xx), or a rate limit whose ``retry-after``
        is longer than ``max_backoff`` (or ``timeout`` when longer). A rate limit's
        ``retry-after`` is honoured; without one it waits four times the usual
        backoff (at most ``max_backoff``)."""
        if isinstance(exc, (_RefusalError, _ToolCallsOnlyError, _UnreadableReplyError)):
            return None
        if cannot_succeed(exc):
            return None
        delay = self._delay(retry)
        hint = retry_after(exc)
        if hint is not None:
            if hint > max(self.max_backoff, self.timeout or 0.0):
                return None
            return max(hint, delay)
        if rate_limited(exc):
            return min(self.max_backoff, delay * 4)
        return delay

    def _failed(self, attempts: int, exc: BaseException) -> str:
        """:meth:`_fail`'s text, and the first time, a warning: a model that fails at
        every call (a wrong key, an unreachable endpoint) otherwise only shows in the
        events while the offline summarizer quietly writes every summary."""
        error = self._fail(attempts, exc)
        if not self._fail_warned:
            self._fail_warned = True
            warnings.warn(
                f"langchain-autocontext: the summarizer {error}; the offline extractive "
                "summarizer wrote this summary (later failures are recorded in the "
                "events' summarizer_errors, without a warning).",
                UserWarning,
                stacklevel=caller_stacklevel(),
            )
        return error

    def _fail(self, attempts: int, exc: BaseException) -> str:
        return f"{self.name} failed after {attempts} attempt{'s' if attempts > 1 else ''}: {type(exc).__name__}: {exc}"

    # -- summarize --------------------------------------------------------------------------
    def _retrying(
        self, request: SummaryRequest
    ) -> tuple[Runnable[Any, str], list[BaseMessage], _Usage]:
        """One model call as a Runnable that LangChain retries (``Runnable.with_retry``),
        the prompt to invoke it with, and the tally of its attempts.

        Each attempt counts its own usage in the tally: a reply its reported usage (used
        as the summary or not: it was billed); without reported usage, the estimate
        (prompt and reply tokens) of a reply used as the summary only. A call that
        failed or timed out reports nothing and adds no tokens (its ``calls`` count):
        the totals are what was billed or, when unknown, what the summaries read. A reply without text is a failed
        attempt too (:class:`_EmptySummaryError`), retried like an exception, and so is
        a refusal (:class:`_RefusalError`: a provider's refusal or content-filter stop,
        or a short reply that is a refusal). A retry first waits
        ``backoff`` seconds, doubling, at most ``max_backoff`` (no jitter); a timeout is
        applied per attempt.

        The wait is the attempt's own, not ``with_retry``'s: that one can only be scaled
        through tenacity's ``initial`` (deprecated in tenacity 9.1, which warns), as
        LangChain's ``ExponentialJitterParams`` drops tenacity's newer ``multiplier``.
        """
        model = self._runnable(request)  # configuration errors raise here, never retried
        prompt = self.build_prompt(request)
        prompt_tokens = self._prompt_tokens(prompt)
        usage = _Usage()

        def settle(response: Any) -> str:
            text, used_in, used_out, reported = self._read(response, prompt_tokens)
            if reported:  # billed, whether or not the reply is used
                usage.input_tokens += used_in
                usage.output_tokens += used_out
            raw = response.get("raw") if isinstance(response, dict) else None
            refused = _refusal(raw if isinstance(raw, BaseMessage) else response, text)
            if refused is not None:
                raise _RefusalError(f"{refused}; not used as a summary")
            if not text:
                calls = getattr(
                    raw if isinstance(raw, BaseMessage) else response, "tool_calls", None
                )
                if calls:
                    names = ", ".join(sorted({str(c.get("name")) for c in calls}))
                    raise _ToolCallsOnlyError(
                        f"the model answered with tool calls only ({names}), not a summary: "
                        "give the summarizer a model without tools bound"
                    )
                raise _EmptySummaryError("the model returned an empty summary")
            if not reported:  # estimated for the calls that answered with a summary
                usage.input_tokens += used_in
                usage.output_tokens += used_out
            return text

        def attempt(messages: list[BaseMessage], config: RunnableConfig) -> str:
            usage.calls += 1
            if usage.calls > 1 and usage.wait > 0:
                time.sleep(usage.wait)
            try:
                call = functools.partial(model.invoke, messages, config=config)
                return settle(within(self.timeout, call))
            except Exception as exc:
                if (wait := self._retry_wait(exc, usage.calls)) is None:
                    raise  # retrying cannot help: the fallback answers now
                usage.wait = wait
                raise _Retry(exc) from exc

        async def aattempt(messages: list[BaseMessage], config: RunnableConfig) -> str:
            usage.calls += 1
            if usage.calls > 1 and usage.wait > 0:
                await asyncio.sleep(usage.wait)
            try:
                if native_async(model):
                    pending = model.ainvoke(messages, config=config)
                else:  # its own thread, as on the sync path (see calls.athread)
                    pending = athread(functools.partial(model.invoke, messages, config=config))
                return settle(await awithin(self.timeout, pending))
            except Exception as exc:
                if (wait := self._retry_wait(exc, usage.calls)) is None:
                    raise  # retrying cannot help: the fallback answers now
                usage.wait = wait
                raise _Retry(exc) from exc

        retrying = RunnableLambda(attempt, afunc=aattempt, name=_ATTEMPT_RUN_NAME).with_retry(
            retry_if_exception_type=(_Retry,),
            stop_after_attempt=self.retries + 1,
            wait_exponential_jitter=False,  # the attempt waits (see above)
        )
        return retrying, prompt, usage

    def _result(self, text: str, request: SummaryRequest, usage: _Usage) -> SummaryResult:
        return SummaryResult(
            text=self._finish(text, request),
            calls=usage.calls,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            fallback=False,
            error=None,
            summarizer=self.name,
        )

    def _fallback_result(self, fb: SummaryResult, usage: _Usage, error: str) -> SummaryResult:
        """The fallback's summary, carrying the failed attempts' calls and tokens too."""
        return SummaryResult(
            text=fb.text,
            calls=usage.calls + fb.calls,
            input_tokens=usage.input_tokens + fb.input_tokens,
            output_tokens=usage.output_tokens + fb.output_tokens,
            fallback=True,
            error=error,
            summarizer=fb.summarizer,
        )

    # The fallback is not ``with_fallbacks``: it takes the request (not the prompt), and
    # its result must carry the failed attempts' usage and the last error.
    def _unloadable(self, exc: Exception) -> str:
        """A ``"provider:model"`` model that cannot be built (a missing API key, a bad
        option) answers with the fallback, warned once: the agent goes on."""
        error = f"{self.name} could not be loaded: {type(exc).__name__}: {exc}"
        if self._load_warned:
            return error
        self._load_warned = True
        warnings.warn(
            f"langchain-autocontext: the summarizer model {self._model_spec!r} could not be "
            f"loaded ({type(exc).__name__}: {exc}); the offline extractive summarizer "
            "writes the summaries until it can be.",
            UserWarning,
            stacklevel=3,
        )
        return error

    def _loaded(self) -> Exception | None:
        """``None`` once the model is at hand; the error when it could not be loaded and
        a fallback will answer (without a fallback the error is raised)."""
        try:
            self.model  # noqa: B018 - resolves a "provider:model" string
        except Exception as exc:
            if self.fallback is None or not isinstance(self._model_spec, str):
                raise
            return exc
        return None

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize with the model; retry, then fall back (or raise without a fallback)."""
        failed = self._loaded()
        if failed is not None and self.fallback is not None:
            fb = self.fallback.summarize(request)
            return self._fallback_result(fb, _Usage(), self._unloadable(failed))
        retrying, prompt, usage = self._retrying(request)
        try:
            text = retrying.invoke(prompt, config=self.call_config(request))
        except Exception as wrapped:
            exc = _unwrap(wrapped)
            if self.fallback is None:
                raise exc from exc.__cause__
            fb = self.fallback.summarize(request)
            return self._fallback_result(fb, usage, self._failed(usage.calls, exc))
        return self._result(text, request, usage)

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        """Async :meth:`summarize` (``ainvoke``, ``asyncio.sleep`` between retries)."""
        failed = self._loaded()
        if failed is not None and self.fallback is not None:
            fb = await self.fallback.asummarize(request)
            return self._fallback_result(fb, _Usage(), self._unloadable(failed))
        retrying, prompt, usage = self._retrying(request)
        try:
            text = await retrying.ainvoke(prompt, config=self.call_config(request))
        except Exception as wrapped:
            exc = _unwrap(wrapped)
            if self.fallback is None:
                raise exc from exc.__cause__
            fb = await self.fallback.asummarize(request)
            return self._fallback_result(fb, usage, self._failed(usage.calls, exc))
        return self._result(text, request, usage)


#: Name of one attempt's run (inside the ``autocontext_summarizer`` run) in traces.
_ATTEMPT_RUN_NAME = "autocontext_summarizer_attempt"


@dataclass
class _Usage:
    """Calls and tokens of one summary's attempts, counted as they run."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: seconds before the next attempt (set by the failed one)
    wait: float = 0.0


# --- resolution ---------------------------------------------------------------------------------
_OFFLINE_NAMES = frozenset({"offline", "extractive"})


def resolve_summarizer(summarizer: Any = None, **llm_options: Any) -> Summarizer:
    """Turn what a user passes as ``summarizer=`` into a :class:`Summarizer`.

    * ``None``, ``"offline"`` or ``"extractive"``: a new :class:`ExtractiveSummarizer`;
    * a :class:`Summarizer`: itself (an :class:`LLMSummarizer` adopts the
      ``retries``/``timeout``/``concurrency`` among ``llm_options`` that it was not
      built with, on a copy when they change it: see :meth:`LLMSummarizer.with_settings`);
    * a chat model (any LangChain ``Runnable``) or a ``"provider:model"`` string:
      an :class:`LLMSummarizer`, built with ``llm_options`` (``retries``,
      ``concurrency``, ``prompts`` …);
    * anything else: :class:`TypeError`.
    """
    if summarizer is None:
        return ExtractiveSummarizer()
    if isinstance(summarizer, Summarizer):
        if isinstance(summarizer, LLMSummarizer):
            return summarizer.with_settings(
                **{
                    k: v
                    for k, v in llm_options.items()
                    if k in ("retries", "timeout", "concurrency")
                }
            )
        return summarizer
    if isinstance(summarizer, str):
        if summarizer.strip().lower() in _OFFLINE_NAMES:
            return ExtractiveSummarizer()
        return LLMSummarizer(summarizer, **llm_options)
    if isinstance(summarizer, Runnable):
        return LLMSummarizer(summarizer, **llm_options)
    raise TypeError(
        "summarizer must be None or 'offline' (the offline extractive summarizer), a "
        "Summarizer, a LangChain chat model, or a 'provider:model' string such as "
        f"'openai:gpt-4o-mini'; got {type(summarizer).__name__}: {summarizer!r:.80}"
    )
