"""`AutoContextConfig`: every knob of the context manager, validated and immutable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from typing_extensions import TypedDict, Unpack

from langchain_autocontext.errors import InvalidConfigError

__all__ = ["AutoContextConfig", "AutoContextConfigFields"]


#: The smallest budget whose model sees the metadata tags when ``metadata_tags`` is not
#: given. A tag costs about 10 tokens a message whatever the window, while what a
#: token of room is worth falls as the window grows: on the coding runs of
#: ``../shared/data`` the tags cost 1.1 and 1.9 points of next-action support at 8k and
#: 16k, and 0.2 at 32k (within what any small change moves there), where the room they
#: take is worth less
#: (``benchmarks/compare_peers.py --ours-config metadata_tags=True`` or ``=False``).
TAGS_MIN_TOKENS = 32_000


class Thresholds(NamedTuple):
    """Token thresholds of one context (:meth:`AutoContextConfig.thresholds`)."""

    trigger: int
    """Compression starts above this many tokens."""
    target: int
    """Once triggered, compression stops at or under this many tokens."""
    warning: int
    """The memory-pressure notice is shown from this many tokens on."""


class AutoContextConfigFields(TypedDict, total=False):
    """The fields of :class:`AutoContextConfig` as keyword arguments, each optional, with
    the field's type: what ``AutoContext(**fields)``, ``AutoContextMiddleware(**fields)``
    and :meth:`AutoContextConfig.derive` take (``**fields: Unpack[AutoContextConfigFields]``),
    so a type checker catches a misspelt name or a wrong type there too. The meaning and
    default of each are the config's. (A test keeps it equal to the config's fields.)"""

    msg_threshold: int
    max_tokens: int
    token_ratio: float
    target_ratio: float
    keep_ratio: float
    last_keep: int
    min_consecutive_tool_messages: int
    large_payload_threshold: int
    offload_single_preview: int
    current_round_compression_ratio: float
    min_summary_span_tokens: int
    summary_max_tokens: int
    warning_ratio: float
    working_context_max_chars: int
    metadata_tags: bool | None
    pin_max_tokens: int | None
    disclosure: Literal["when_needed", "always"]
    tag_format: Literal["compact", "seed"]
    self_management_tools: bool
    instructions: Literal["compact", "full"]
    xml_commands: bool
    max_autonomous_steps: int
    keep_tool_results: tuple[str, ...]
    plan_note_tools: tuple[str, ...]
    search_language: str
    summarizer_retries: int
    summarizer_timeout: float | None
    summarizer_concurrency: int
    store_prefix: str


class AutoContextConfig(BaseModel):
    """Configuration of :class:`~langchain_autocontext.AutoContext`.

    Budgets are in tokens as counted by the package's token counter (system
    prompt, tool schemas and metadata tags included); sizes of single messages
    are in characters. The object is immutable: use ``config.derive(…)`` to make a
    variant (validated like the constructor; ``model_copy(update=…)`` is not). Invalid
    values raise
    :class:`~langchain_autocontext.errors.InvalidConfigError`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    # --- triggers and budget (AgentScope AutoContextMemory's parameters) ---
    msg_threshold: int = Field(
        default=100,
        ge=1,
        description="Compress when the working context holds more messages than this, down "
        "to msg_threshold * target_ratio / token_ratio messages (the tokens' proportion). "
        "It counts at any window: with a large one and a long agent run it, not the "
        "tokens, starts compaction; raise it to fill the window first.",
    )
    max_tokens: int = Field(
        default=131_072,
        ge=256,
        description="Hard budget: what is sent to the model never counts more tokens than this.",
    )
    token_ratio: float = Field(
        default=0.75,
        gt=0,
        le=1,
        description="Compress when the counted context exceeds max_tokens * token_ratio.",
    )
    target_ratio: float = Field(
        default=0.4,
        gt=0,
        le=1,
        description=(
            "Once triggered, compress until the context is under max_tokens * target_ratio "
            "(hysteresis: compaction stays rare, so the provider's prompt cache survives). "
            "What can never be compressed (system prompt, tool schemas, the latest user "
            "message, pins) is set aside first: the target is that floor plus target_ratio "
            "of the room above it, and the trigger keeps its distance above the target "
            "(see thresholds()). Below token_ratio; not given, with a token_ratio under its "
            "default, it keeps the defaults' proportion (token_ratio * 0.4 / 0.75)."
        ),
    )
    keep_ratio: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Share of the room under the target (beside what is never compressed) "
        "kept verbatim at the newest end (the working set): no strategy offloads or "
        "summarizes these messages unless nothing else fits. Older tool results and user "
        "messages are masked (preview + offload id) before any summary, so the agent's own "
        "older messages stay verbatim beyond this share until the target needs their room.",
    )
    last_keep: int = Field(
        default=50,
        ge=0,
        description="Strategy 2 leaves the last last_keep messages untouched; "
        "older ones count as history for strategies 1-3.",
    )
    min_consecutive_tool_messages: int = Field(
        default=6,
        ge=2,
        description="Strategy 1 compresses runs of more than this many tool calls/results.",
    )
    large_payload_threshold: int = Field(
        default=5120,
        ge=64,
        description="A message larger than this many characters may be offloaded.",
    )
    offload_single_preview: int = Field(
        default=200,
        ge=0,
        description="Characters of an offloaded message kept in context as a preview; a "
        "tool result masked only because it left the working set keeps the first line of "
        "these that has a letter or digit (the call before it says what it was).",
    )
    current_round_compression_ratio: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description=(
            "The summarizing strategies (1, 4-7) aim to shrink what they summarize to this "
            "share of its tokens (within the summary caps); strategy 5 also takes messages "
            "over large_payload_threshold times it as large."
        ),
    )
    min_summary_span_tokens: int = Field(
        default=200,
        ge=0,
        description="A span smaller than this is not worth a summarizer call: the summarizing "
        "strategies (1, 4, 5, 6) leave it alone.",
    )
    summary_max_tokens: int = Field(
        default=1024,
        ge=32,
        description="Cap on the tokens of any one summary (and never more than an eighth of "
        "the room under the target beside what is never compressed; a sixteenth for the "
        "recursive summary and the current round's, which live side by side).",
    )

    # --- the model managing its own context (Auto + MemGPT) ---
    warning_ratio: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description="Show one memory-pressure notice per crossing of max_tokens * warning_ratio.",
    )
    working_context_max_chars: int = Field(
        default=5000,
        ge=0,
        description="Size limit of the MemGPT working-context block (characters); it also "
        "takes at most an eighth of max_tokens in tokens, like pins.",
    )
    metadata_tags: bool | None = Field(
        default=None,
        description="Prefix every message of the model's input view with a <metadata …/> tag "
        "(id and exact token counts) so the model can edit its context by id. Not given: "
        f"on from max_tokens={TAGS_MIN_TOKENS:,} up, off below (there a tag's ~10 tokens a "
        "message cost more of what the next step needs than they give), and on with "
        "xml_commands, whose commands name messages by the ids the tags show. True or "
        "False: always or never.",
    )
    pin_max_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Most tokens pinned messages may take together (default: an eighth of "
        "max_tokens); a pin past it is refused with an error that says the limit and the use.",
    )
    disclosure: Literal["when_needed", "always"] = Field(
        default="when_needed",
        description="'when_needed': the metadata tags, the generated section and (with the "
        "middleware) the package's tools appear with the first compression, then stay (one "
        "change of the prompt prefix, in the request that rewrites the context anyway); a "
        "short conversation costs nothing extra. 'always': from the first call.",
    )
    tag_format: Literal["compact", "seed"] = Field(
        default="compact",
        description="Format of the metadata tags: 'compact' (<id tokens/total/>, about 10 "
        "tokens) or 'seed' (<metadata id cumulative_message_token_count "
        "message_token_count/>, about 24 tokens).",
    )
    self_management_tools: bool = Field(
        default=True,
        description="Give the model update_message, delete_message, pin_message, reload_offloaded, "
        "search_history and the working-context tools.",
    )
    instructions: Literal["compact", "full"] = Field(
        default="compact",
        description="How the package explains itself to the model: 'compact' (a one-line "
        "system section and tool schemas without descriptions: a system prompt plus 'hi' "
        "costs at most 350 tokens more) or 'full' (the detailed section and tool "
        "descriptions, ~1,560 tokens more).",
    )
    xml_commands: bool = Field(
        default=False,
        description="Parse <update>, <delete>, <pin>, <unpin> and <user> commands from the "
        "model's text output.",
    )
    max_autonomous_steps: int = Field(
        default=20, ge=1, description="Step limit of the autonomous loop driven by <user> commands."
    )
    keep_tool_results: tuple[str, ...] = Field(
        default=(),
        description="Tools whose results the steps that act on one message at a time leave "
        "verbatim: strategies 2 and 3 never offload or mask them, strategy 5 never "
        "summarizes them alone (a think or reflection tool, whose output cannot be "
        "fetched again). They still go into a summary with their span (strategies 1, 4, 6, "
        "7) when the budget needs it, the original kept in the history store, and the last "
        "resort before ContextBudgetError may offload them; pin a message to keep it past "
        "those too.",
    )
    plan_note_tools: tuple[str, ...] = Field(
        default=("write_todos", "update_plan", "todo_write"),
        description="Tools whose calls are plan notes (a todo list). The latest plan note, "
        "the newest call of these tools alone with its result, is the agent's current plan "
        "(TodoListMiddleware never shows the model its todos again): it is kept verbatim as "
        "a pin is, while it fits the room the pins leave under the pin limit, without "
        "counting against that limit (a larger one is compressed as any tool call; the last "
        "resorts before ContextBudgetError may compress it). Older plan notes are "
        "superseded: strategy 1 mentions them in one line.",
    )

    # --- summarizer behaviour ---
    search_language: str = Field(
        default="english",
        description="Language whose word forms search_history merges (a Snowball stemmer: "
        "english, german, french, russian, spanish, …; none: no stemming).",
    )
    summarizer_retries: int = Field(
        default=2, ge=0, description="Retries of a failed summarizer call."
    )
    summarizer_timeout: float | None = Field(
        default=None,
        gt=0,
        description="Seconds one summarizer model call may take (None: no limit); a call past "
        "it is a failed attempt: retried, then the offline summarizer answers.",
    )
    summarizer_concurrency: int = Field(
        default=4, ge=1, description="Independent spans summarized at once."
    )

    # --- storage ---
    store_prefix: str = Field(
        default="autocontext",
        min_length=1,
        description="First element of every store namespace; lets several apps share one store.",
    )

    # Hidden from type checkers, which then see pydantic's constructor (one typed keyword
    # per field: a typo or a wrong type is caught before the run).
    if not TYPE_CHECKING:

        def __init__(self, **data: Any) -> None:
            try:
                super().__init__(**data)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
                    for err in exc.errors()
                )
                raise InvalidConfigError(f"Invalid AutoContextConfig: {problems}") from None

    @classmethod
    def _following_target(cls, trigger: Any) -> float | None:
        """The ``target_ratio`` a ``token_ratio`` below its default takes when no target
        is given: the defaults' proportion to the trigger (0.4 / 0.75). ``None`` for a
        trigger at or above the default (the default target stays)."""
        target = cls.model_fields["target_ratio"].default
        default_trigger = cls.model_fields["token_ratio"].default
        number = isinstance(trigger, int | float) and not isinstance(trigger, bool)
        if number and 0 < trigger < default_trigger:
            return round(trigger * target / default_trigger, 6)
        return None

    @model_validator(mode="before")
    @classmethod
    def _target_follows_trigger(cls, data: Any) -> Any:
        """``target_ratio`` not given and a ``token_ratio`` below its default: the target
        keeps the defaults' proportion to the trigger (0.4 / 0.75), so compaction stays
        rare. Only below the default target did it follow before: a trigger of 0.4-0.45
        left the target at or just under it, and compaction ran on almost every call."""
        if isinstance(data, dict) and "token_ratio" in data and "target_ratio" not in data:
            target = cls._following_target(data["token_ratio"])
            if target is not None:
                data = {**data, "target_ratio": target}
        return data

    @model_validator(mode="after")
    def _resolve_tags(self) -> AutoContextConfig:
        """``metadata_tags`` not given: on from :data:`TAGS_MIN_TOKENS` up, and with
        ``xml_commands`` (its commands name messages by the ids the tags show). The field
        stays unset, so ``derive(max_tokens=…)`` (the model's window, read later)
        decides it again for the new budget."""
        if self.metadata_tags is None:
            on = self.max_tokens >= TAGS_MIN_TOKENS or self.xml_commands
            object.__setattr__(self, "metadata_tags", on)
            # ``metadata_tags=None`` given is "not given": derive() decides it again
            self.__pydantic_fields_set__.discard("metadata_tags")
        return self

    @model_serializer(mode="wrap")
    def _dump_auto_tags(self, handler: SerializerFunctionWrapHandler, info: Any) -> Any:
        """Tags decided by the budget dump as not given (``None``), so a config rebuilt
        from its dump (``model_dump``, JSON, ``exclude_defaults``) decides them again for
        its own budget instead of keeping this one's answer."""
        data = handler(self)
        if isinstance(data, dict) and "metadata_tags" not in self.model_fields_set:
            if getattr(info, "exclude_defaults", False):
                data.pop("metadata_tags", None)
            elif "metadata_tags" in data:
                data["metadata_tags"] = None
        return data

    @model_validator(mode="after")
    def _check_ratios(self) -> AutoContextConfig:
        self._check_language()
        if self.target_ratio >= self.token_ratio:
            raise ValueError(
                f"target_ratio ({self.target_ratio}) must be below token_ratio "
                f"({self.token_ratio}): compression aims below its own trigger (at the "
                "trigger itself, it would run on every call)"
            )
        if self.pin_max_tokens is not None and self.pin_max_tokens >= self.max_tokens:
            raise ValueError(
                f"pin_max_tokens ({self.pin_max_tokens}) must be below max_tokens "
                f"({self.max_tokens}): pinned messages are never compressed, so they must "
                "leave room for the rest of the context"
            )
        from langchain_autocontext.store import prefix_problem  # config -> store: one way

        problem = prefix_problem(self.store_prefix)
        if problem:
            raise ValueError(f"store_prefix {problem}")
        return self

    def _check_language(self) -> None:
        from langchain_autocontext.search import check_language  # config -> search: one way

        check_language(self.search_language)

    # Derived budgets -----------------------------------------------------------
    @property
    def pin_limit(self) -> int:
        """Tokens pinned messages may take together (``pin_max_tokens`` or an eighth of the
        window: pins are never compressed, so they must leave room for the working set)."""
        return self.max_tokens // 8 if self.pin_max_tokens is None else self.pin_max_tokens

    @property
    def working_context_token_limit(self) -> int:
        """Tokens the working context may take besides its ``working_context_max_chars``:
        an eighth of ``max_tokens``, as for pins (it is always in view and never
        compressed; 4,900 characters of Japanese are about 4,700 tokens)."""
        return max(1, self.max_tokens // 8)

    @property
    def tags_mode(self) -> str | bool:
        """What the counter's ``tags=`` takes: the tag format, or ``False`` without tags."""
        return self.tag_format if self.metadata_tags else False

    def derive(self, **changes: Unpack[AutoContextConfigFields]) -> AutoContextConfig:
        """This config with ``changes``, validated as a whole like the constructor
        (``model_copy(update=…)`` skips validation). Fields not set here and not given
        keep following their defaults' rules (a lowered ``token_ratio`` takes
        ``target_ratio`` along when that was not set).

        Raises:
            TypeError: a name that is not a field (the fields are listed).
            InvalidConfigError: a value out of range, or ratios that contradict.
        """
        unknown = sorted(set(changes) - set(type(self).model_fields))
        if unknown:
            raise TypeError(
                f"unknown field(s) {', '.join(map(repr, unknown))}; the fields are "
                f"{', '.join(type(self).model_fields)}"
            )
        merged: dict[str, Any] = {**self.model_dump(exclude_unset=True), **changes}
        if (
            "token_ratio" in changes
            and "target_ratio" not in changes
            and self.target_ratio == self._following_target(self.token_ratio)
        ):  # the target followed the old trigger: it follows the new one
            merged.pop("target_ratio", None)
        return type(self)(**merged)

    @property
    def trigger_tokens(self) -> int:
        """Token count above which compression starts."""
        return int(self.max_tokens * self.token_ratio)

    @property
    def target_tokens(self) -> int:
        """Token count the pipeline compresses down to once triggered."""
        return int(self.max_tokens * self.target_ratio)

    @property
    def target_messages(self) -> int:
        """Messages a compaction leaves at most: ``msg_threshold`` in the same proportion
        to its trigger as the token target (``target_ratio / token_ratio``; 53 with the
        defaults), and at least 2."""
        return max(2, int(self.msg_threshold * self.target_ratio / self.token_ratio))

    def due(self, tokens: int, messages: int, floor: int = 0, headroom: int = 0) -> bool:
        """Whether a context of ``tokens`` tokens in ``messages`` messages, whose
        incompressible part counts ``floor`` tokens, is compressed: past the trigger of
        :meth:`thresholds` (with ``headroom``) or past ``msg_threshold`` messages.

        The one rule behind the pipeline, the graph node's measure and the moment the
        package first shows itself to the model."""
        trigger = self.thresholds(floor, headroom).trigger
        return tokens > trigger or messages > self.msg_threshold

    def thresholds(self, floor: int = 0, headroom: int = 0) -> Thresholds:
        """The token thresholds for a context whose incompressible part (system prompt,
        tool schemas, latest user message, pins) counts ``floor`` tokens.

        The target is the floor plus ``target_ratio`` of the room above it, so that a
        large system prompt or task statement does not leave the conversation almost no
        room after each compaction (with ``max_tokens * target_ratio`` alone, a floor
        near the target meant every compaction summarized nearly everything). The
        trigger and the memory-pressure warning move up by as much as the target did,
        keeping their configured distances (how often compaction runs, how early the
        model is warned), and never pass ``max_tokens``. With ``floor=0`` these are
        :attr:`trigger_tokens`, :attr:`target_tokens` and :attr:`warning_tokens`.

        ``headroom``: tokens kept free for what is added to the context after it is
        compressed and before it is sent (a chat history's next input): the trigger
        never passes ``max_tokens - headroom``, unless the floor does (then it is the
        floor: everything that can be compressed is). Held down there, the trigger keeps
        the target at ``target_ratio / token_ratio`` of the room between the floor and
        it, so that compaction does not run every turn.
        """
        floor = max(0, min(int(floor), self.max_tokens))
        target = floor + int(self.target_ratio * (self.max_tokens - floor))
        shift = max(0, target - self.target_tokens)
        trigger = min(self.max_tokens, self.trigger_tokens + shift)
        warning = min(self.max_tokens, self.warning_tokens + shift)
        ceiling = max(floor, self.max_tokens - max(0, int(headroom)))
        if trigger > ceiling:
            trigger = ceiling
            target = floor + int(self.target_ratio / self.token_ratio * (ceiling - floor))
        return Thresholds(trigger, min(target, trigger), warning)

    @property
    def warning_tokens(self) -> int:
        """Token count at which the memory-pressure notice is shown."""
        return int(self.max_tokens * self.warning_ratio)
