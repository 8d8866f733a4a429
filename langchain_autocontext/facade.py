"""`AutoContext`: the thin facade on top of the engine that hands out the surfaces.

:class:`AutoContext` is a :class:`~langchain_autocontext.engine.ContextEngine` (every
engine method: ``compress``, ``prepare_model_call``, ``after_model_call``,
``resolve_store``, …) plus the factories of the surfaces: :meth:`AutoContext.node`,
:attr:`AutoContext.pre_model_hook`, :meth:`AutoContext.command_node`,
:attr:`AutoContext.post_model_hook`, :meth:`AutoContext.model_node`,
:meth:`AutoContext.middleware`, :meth:`AutoContext.as_runnable`, and the model's
:attr:`~langchain_autocontext.engine.ContextEngine.tools` (through
:attr:`~langchain_autocontext.engine.ContextEngine.tool_factory`).

The imports go one way: this module → the surfaces (:mod:`~langchain_autocontext.graph`,
:mod:`~langchain_autocontext.middleware`, :mod:`~langchain_autocontext.tools`,
:mod:`~langchain_autocontext.history`) → the engine. Nothing below imports this module;
import :class:`AutoContext` from the package: ``from langchain_autocontext import AutoContext``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableLambda
from langgraph.graph.state import CompiledStateGraph

from langchain_autocontext import graph
from langchain_autocontext.engine import ContextEngine
from langchain_autocontext.history import AutoContextRunnable
from langchain_autocontext.middleware import AutoContextMiddleware
from langchain_autocontext.tools import make_tools

__all__ = ["AutoContext"]


class AutoContext(ContextEngine):
    """Keeps an agent's context under budget; see the package README.

    Args:
        config: budgets and behaviour (defaults: :class:`AutoContextConfig`).
        summarizer: ``None``/``"offline"`` for the deterministic offline summarizer,
            any LangChain chat model, a ``"provider:model"`` string, or a
            :class:`~langchain_autocontext.summarizers.Summarizer`.
        store: where originals, offloads and events live. Any LangGraph
            ``BaseStore`` (wrapped in an :class:`OffloadStore`); ``None`` uses the
            graph's store when run inside a graph compiled with one, else an
            in-memory store owned by this object.
        token_counter: an encoding name, a model name, a callable, a chat model or
            a :class:`TokenCounter` (default: tiktoken ``cl100k_base``).
        tools: the agent's tools, so their schemas are counted in the budget.
        system_prompt: a system prompt your agent adds *after* this package runs
            (``create_react_agent(prompt=…)``), counted in the budget.
        strategies: replace the default seven strategies (advanced).
        trigger: LangChain's form of the trigger, ``("tokens", n)``, ``("fraction", x)``
            or ``("messages", n)`` (or a list of a token and a message form); sets
            ``token_ratio``/``msg_threshold``.
        keep: what compression keeps, ``("tokens", n)`` or ``("fraction", x)``; sets
            ``target_ratio``.
        model: a chat model whose ``profile["max_input_tokens"]`` gives the budget when
            ``max_tokens`` is not given (the window less room for the reply).
    """

    tool_factory = staticmethod(make_tools)

    # --- LangGraph surfaces (langchain_autocontext.graph) --------------------------------
    def node(self, *, name: str = "autocontext") -> CompiledStateGraph[Any, None, Any, Any]:
        """A compiled subgraph (measure → strategies → commit) to put before the model node.

        The parent state needs a ``messages`` key with the ``add_messages`` reducer
        (``MessagesState``, :class:`~langchain_autocontext.AutoContextState`; a state
        kept by another reducer is refused with a ``ValueError``); add
        ``autocontext: dict`` to persist the package's own state.
        """
        return graph.build_node(self, name=name)

    @property
    def pre_model_hook(self) -> RunnableLambda[Any, dict[str, Any]]:
        """For ``create_react_agent(model, tools, pre_model_hook=ac.pre_model_hook)``.

        Compresses the state's messages (persisted with ``RemoveMessage`` s) and
        hands the model its input view in ``llm_input_messages``.
        """
        return graph.pre_model_hook(self)

    def command_node(
        self, *, loop_to: str | None = "autocontext"
    ) -> Runnable[Any, graph.NodeUpdate]:
        """A StateGraph node to put right after the model node: runs :meth:`after_model_call`.

        After a ``<user>`` command it returns ``Command(goto=loop_to)`` so the model
        is called again (the node added with :meth:`node`, named ``"autocontext"``
        by default); route the rest as usual, e.g.
        ``graph.add_conditional_edges("commands", tools_condition)``.
        """
        return graph.command_node(self, loop_to=loop_to)

    @property
    def post_model_hook(self) -> Runnable[Any, graph.NodeUpdate]:
        """For ``create_react_agent(…, post_model_hook=ac.post_model_hook)``.

        Runs :meth:`after_model_call`; after a ``<user>`` command it sends the run
        back to the ``pre_model_hook`` node (use both hooks together).
        """
        return graph.command_node(self, loop_to="pre_model_hook")

    def model_node(
        self, model: Runnable[list[BaseMessage], BaseMessage]
    ) -> Runnable[Any, dict[str, Any]]:
        """A StateGraph model node: view → ``model`` → reply (+ the ``autocontext`` update).

        ``model`` is your chat model (already ``bind_tools``-ed, with :attr:`tools`
        among its tools when you use them). Put :meth:`node` before it. The tools bound
        to ``model`` are counted in the budget from here on (by :meth:`node` too), so
        ``AutoContext(tools=…)`` need not repeat them.
        """
        return graph.model_node(self, model)

    # --- the create_agent and LCEL surfaces (middleware, history) --------------------------
    def middleware(self) -> AutoContextMiddleware:
        """For ``langchain.agents.create_agent(model, tools, middleware=[ac.middleware()])``.

        Compresses before each model call, renders the model's view without persisting
        it, processes the reply, and registers the context tools with the agent
        (:attr:`all_tools`; each request sends those offered, :attr:`tools`).
        """
        return AutoContextMiddleware(self)

    def as_runnable(self) -> Runnable[Any, list[BaseMessage]]:
        """A Runnable ``messages -> managed messages``: ``prompt | ac.as_runnable() | model``.

        See :class:`~langchain_autocontext.history.AutoContextRunnable`.
        """
        return AutoContextRunnable(autocontext=self)
