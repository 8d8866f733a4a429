"""The budget the LangChain way: ``trigger=``/``keep=`` and the window of the model.

``SummarizationMiddleware`` users write ``trigger=("tokens", 6_000)`` or
``("fraction", 0.8)`` and ``keep=(...)``; :class:`BudgetSpec` maps those forms onto
the :class:`~langchain_autocontext.AutoContextConfig` fields that mean the same here:

* trigger ``("tokens", n)`` -> ``token_ratio = n / max_tokens``;
  ``("fraction", x)`` -> ``token_ratio = x``; ``("messages", n)`` -> ``msg_threshold = n``
  (a list of a token trigger and a message trigger sets both: either one triggers).
* keep ``("tokens", n)`` -> ``target_ratio = n / max_tokens`` (what compression
  compresses down to); ``("fraction", x)`` -> ``target_ratio = x``.
  ``("messages", n)`` is refused: the package keeps the newest messages by tokens.

:func:`model_window` reads ``model.profile["max_input_tokens"]`` (and
``"max_output_tokens"``), or the window a local model is run with (ChatOllama's
``num_ctx``, ChatLlamaCpp's ``n_ctx``; the smaller when both are known);
:attr:`ModelWindow.budget` is that window less room for the reply: the profile's
``max_output_tokens``, at most a quarter of the window (a quarter when the profile does
not say).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from langchain_core.runnables import RunnableWithFallbacks
from langchain_core.runnables.base import RunnableBindingBase

from langchain_autocontext.errors import InvalidConfigError

if TYPE_CHECKING:
    from langchain_autocontext.config import AutoContextConfig

__all__ = ["BudgetSpec", "ModelWindow", "model_window", "sent_settings"]

_KINDS = ("tokens", "fraction", "messages")
_FORMS = "('tokens', n), ('fraction', x) with 0 < x <= 1, or ('messages', n)"


@dataclass(frozen=True)
class ModelWindow:
    """A model's context window as its LangChain profile states it."""

    max_input_tokens: int
    max_output_tokens: int | None = None
    #: The reply size the model object itself asks for (its ``max_tokens``): providers
    #: that share the window between input and reply (Anthropic) reject a request whose
    #: input plus this exceeds it.
    requested_output: int | None = None
    #: Where ``max_input_tokens`` comes from: ``"max_input_tokens"`` (the profile), or
    #: the field of a local model's integration that sets the window it runs with
    #: (``"num_ctx"``, ``"n_ctx"``).
    source: str = "max_input_tokens"

    @property
    def reply_room(self) -> int:
        """Tokens left for the reply: ``max_output_tokens``, at most a quarter of the
        window (a quarter when the profile does not state it); at least what the model
        asks for (``requested_output``), up to half the window."""
        quarter = self.max_input_tokens // 4
        room = quarter if self.max_output_tokens is None else min(self.max_output_tokens, quarter)
        if self.requested_output is not None:
            room = max(room, min(self.requested_output, self.max_input_tokens // 2))
        return room

    @property
    def budget(self) -> int:
        """The ``max_tokens`` this window gives: the window less :attr:`reply_room`."""
        return self.max_input_tokens - self.reply_room

    def describe(self) -> str:
        where = "the model's profile" if self.source == "max_input_tokens" else "the model"
        return (
            f"{where}: {self.source}={self.max_input_tokens:,} less "
            f"{self.reply_room:,} for the reply"
        )


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


#: Fields of local models' integrations that set the context window the server runs the
#: model with, prompt and reply together: ChatOllama's ``num_ctx`` (unset, Ollama runs the
#: model with its own default of a few thousand tokens and cuts a longer prompt silently,
#: so only a set value says the window), ChatLlamaCpp's ``n_ctx``.
_RUN_WINDOW_FIELDS = ("num_ctx", "n_ctx")


def model_window(
    model: Any, _depth: int = 0, _settings: Mapping[str, Any] | None = None
) -> ModelWindow | None:
    """The window the model runs with: ``model.profile["max_input_tokens"]`` (a positive
    int), or a local model's own setting (:data:`_RUN_WINDOW_FIELDS`), the smaller of
    the two when both are known (a model served with a window below its profile's is cut
    at the served one); None when neither is known.

    A model wrapped by LangChain is read through its wrapper: ``with_retry()`` (and any
    binding) by the model it binds; ``with_fallbacks([...])`` by the smallest budget of
    the primary and its fallbacks that states a window, since the request may go to any
    of them. What a binding sends with the request (``model.bind(max_tokens=4_096)``,
    ChatOllama's ``bind(options={...})``) is read before the model's own fields, as
    LangChain sends it: an outer binding's over an inner one's, over the model's."""
    settings, model = sent_settings(model, _settings)
    if isinstance(model, RunnableWithFallbacks) and _depth < 8:
        known = [
            w
            for w in (model_window(m, _depth + 1, settings) for m in _fallback_chain(model))
            if w is not None
        ]
        return min(known, key=lambda w: w.budget) if known else None
    try:
        profile = getattr(model, "profile", None)
        run = [(name, _setting(model, settings, name)) for name in _RUN_WINDOW_FIELDS]
        requested = _requested_output(model, settings)
    except Exception:  # a wrapper whose attribute lookup fails: no window known
        return None
    served = next(((name, v) for name, v in run if _count(v)), None)
    stated = profile.get("max_input_tokens") if isinstance(profile, Mapping) else None
    output = profile.get("max_output_tokens") if isinstance(profile, Mapping) else None
    output = output if _count(output) else None
    if served is not None and not (_count(stated) and stated <= served[1]):
        return ModelWindow(served[1], output, requested, source=served[0])
    if not _count(stated):
        return None
    return ModelWindow(stated, output, requested)


def sent_settings(model: Any, outer: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """What the bindings around ``model`` send with each request, and the runnable they
    bind: ``model.bind(...)``, ``with_retry()`` and ``with_config()`` layers are walked
    down, their ``kwargs`` merged as LangChain passes them on (an outer binding's over an
    inner one's; ``outer``: what is sent from further out still)."""
    settings = dict(outer or {})
    for _ in range(16):  # bindings of bindings
        if not isinstance(model, RunnableBindingBase):
            break
        if isinstance(model.kwargs, Mapping):
            settings = {**model.kwargs, **settings}
        model = model.bound
    return settings, model


def _fallback_chain(model: RunnableWithFallbacks) -> list[Any]:
    """The models a ``with_fallbacks([...])`` may send to: its primary and fallbacks
    (each gets the kwargs of the call)."""
    return [model.runnable, *model.fallbacks]


#: Fields that ChatOllama sends inside its ``options``: a bound ``options`` mapping is
#: sent instead of all of the model's own (``ChatOllama._chat_params``).
_OPTIONS_FIELDS = ("num_ctx", "num_predict")


def _bound(settings: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """``(True, value)`` when the request sends ``name`` from a binding (``settings``,
    its kwargs; ChatOllama's from a bound ``options``, which replaces all of the model's
    own), else ``(False, None)``: the model's own field is sent."""
    options = settings.get("options")
    if name in _OPTIONS_FIELDS and isinstance(options, Mapping):
        return True, options.get(name)
    return (True, settings[name]) if name in settings else (False, None)


def _setting(model: Any, settings: Mapping[str, Any], name: str) -> Any:
    """``name`` as the request sends it: bound, else the model's own field."""
    bound, value = _bound(settings, name)
    return value if bound else getattr(model, name, None)


def _requested_output(model: Any, settings: Mapping[str, Any] | None = None) -> int | None:
    """The reply size the request asks for (``max_tokens`` of ChatAnthropic and
    ChatOpenAI, ``max_completion_tokens``, ``max_output_tokens`` of Gemini's,
    ``num_predict`` of ChatOllama's): a bound one before the model's own; or None."""
    names = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict")
    sent = [_bound(settings or {}, name) for name in names]
    for bound, value in sent:
        if bound and _count(value):
            return int(value)
    for name, (bound, _) in zip(names, sent, strict=True):
        if bound:
            continue
        try:
            value = getattr(model, name, None)
        except Exception:  # a wrapper whose attribute lookup fails
            return None
        if _count(value):
            return int(value)
    return None


def _pair(value: Any, name: str) -> tuple[str, int | float]:
    """One ``(kind, value)`` tuple, validated."""
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)):
        raise InvalidConfigError(f"{name}={value!r} is not a (kind, value) tuple: use {_FORMS}")
    kind, size = value
    if kind not in _KINDS:
        raise InvalidConfigError(f"{name}={value!r}: unknown kind {kind!r}; use {_FORMS}")
    if isinstance(size, bool) or not isinstance(size, int | float):
        raise InvalidConfigError(f"{name}={value!r}: the value must be a number")
    if kind == "fraction":
        if not (math.isfinite(size) and 0 < size <= 1):
            raise InvalidConfigError(
                f"{name}={value!r}: a fraction of the window must be in (0, 1]"
            )
    elif not isinstance(size, int):
        raise InvalidConfigError(f"{name}={value!r}: {kind} must be a whole number")
    elif size <= 0:
        raise InvalidConfigError(f"{name}={value!r}: {kind} must be greater than 0")
    return kind, size


def _ratio(tokens: int, max_tokens: int) -> float:
    """``tokens / max_tokens`` such that ``int(max_tokens * ratio) == tokens`` (the
    config's ``trigger_tokens``/``target_tokens`` give back exactly ``tokens``)."""
    ratio = tokens / max_tokens
    while int(max_tokens * ratio) < tokens and ratio < 1:
        ratio = math.nextafter(ratio, math.inf)
    return min(ratio, 1.0)


@dataclass(frozen=True)
class BudgetSpec:
    """``trigger=`` and ``keep=`` as given; :meth:`fields` maps them onto config fields
    for a given ``max_tokens`` (again when the budget changes)."""

    trigger: tuple[tuple[str, int | float], ...] = ()
    keep: tuple[str, int | float] | None = None

    @classmethod
    def parse(cls, trigger: Any, keep: Any, fields: Mapping[str, Any]) -> BudgetSpec | None:
        """Validate the forms (not yet against a budget); None when neither is given.

        ``fields``: the config fields given as keyword arguments next to them; a field
        that says the same thing as ``trigger=``/``keep=`` is an error.
        """
        if trigger is None and keep is None:
            return None
        pairs: tuple[tuple[str, int | float], ...] = ()
        if trigger is not None:
            clash = sorted({"token_ratio", "msg_threshold"} & set(fields))
            if clash:
                raise InvalidConfigError(
                    f"give trigger= or {' and '.join(f'{c}=' for c in clash)}, not both: "
                    "trigger=('tokens'|'fraction', …) sets token_ratio, "
                    "trigger=('messages', n) sets msg_threshold"
                )
            pairs = cls._triggers(trigger)
        kept = None
        if keep is not None:
            if "target_ratio" in fields:
                raise InvalidConfigError(
                    "give keep= or target_ratio=, not both: keep=('tokens'|'fraction', …) "
                    "sets target_ratio (what compression keeps)"
                )
            kept = _pair(keep, "keep")
            if kept[0] == "messages":
                raise InvalidConfigError(
                    f"keep={keep!r} is not supported: compression keeps the newest messages "
                    "by tokens, not by count. Use keep=('tokens', n) or keep=('fraction', x) "
                    "(what compression keeps, i.e. compresses down to); last_keep=n leaves "
                    "the last n messages out of large-message offloading."
                )
        spec = cls(pairs, kept)
        spec._check_same_kind()
        return spec

    @staticmethod
    def _triggers(trigger: Any) -> tuple[tuple[str, int | float], ...]:
        if isinstance(trigger, tuple) and trigger and isinstance(trigger[0], str):
            pairs: tuple[tuple[str, int | float], ...] = (_pair(trigger, "trigger"),)
        elif isinstance(trigger, Sequence) and not isinstance(trigger, str) and trigger:
            pairs = tuple(_pair(item, "trigger") for item in trigger)
        else:
            raise InvalidConfigError(
                f"trigger={trigger!r}: use a (kind, value) tuple, {_FORMS}, or a list of one "
                "token trigger and one message trigger (either one triggers)"
            )
        token_kinds = [p for p in pairs if p[0] != "messages"]
        if len(token_kinds) > 1 or len(pairs) - len(token_kinds) > 1:
            raise InvalidConfigError(
                f"trigger={trigger!r}: at most one token trigger (('tokens', n) or "
                "('fraction', x)) and one message trigger (('messages', n))"
            )
        return pairs

    def _check_same_kind(self) -> None:
        """keep below trigger, when both are in the same unit (needs no budget)."""
        if self.keep is None:
            return
        for kind, size in self.trigger:
            if kind == self.keep[0] and self.keep[1] >= size:
                raise InvalidConfigError(
                    f"keep={self.keep!r} must be below trigger={(kind, size)!r}: compression "
                    "starts at the trigger and compresses down to what keep says"
                )

    def fields(
        self, base: AutoContextConfig, max_tokens: int, origin: str
    ) -> dict[str, int | float]:
        """The config fields for a budget of ``max_tokens`` (``origin`` says where that
        number comes from, for the error messages)."""
        out: dict[str, int | float] = {}
        budget = f"the budget max_tokens={max_tokens:,} ({origin})"

        def ratio(kind: str, size: int | float, too_large: str) -> float:
            """A fraction as it is; tokens as their share of ``max_tokens``."""
            if kind == "fraction":
                return float(size)
            if size > max_tokens:
                raise InvalidConfigError(too_large)
            return _ratio(int(size), max_tokens)

        for kind, size in self.trigger:
            if kind == "messages":
                out["msg_threshold"] = int(size)
            else:
                out["token_ratio"] = ratio(
                    kind,
                    size,
                    f"trigger=('tokens', {size}) is above {budget}: compression could never "
                    "start. Lower the trigger or raise max_tokens.",
                )
        if self.keep is not None:
            kind, size = self.keep
            out["target_ratio"] = ratio(
                kind,
                size,
                f"keep=('tokens', {size}) is above {budget}. Lower keep or raise max_tokens.",
            )
            trigger = out.get("token_ratio", base.token_ratio)
            if out["target_ratio"] >= trigger:
                said = next((p for p in self.trigger if p[0] != "messages"), None)
                what = f"trigger={said!r}" if said else f"token_ratio={trigger}"
                raise InvalidConfigError(
                    f"keep={self.keep!r} ({int(max_tokens * out['target_ratio']):,} tokens of "
                    f"{budget}) must be below {what} ({int(max_tokens * trigger):,} tokens): "
                    "compression starts at the trigger and compresses down to what keep says"
                )
        return out
