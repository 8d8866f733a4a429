"""Builders of realistic message histories for tests (not a test module)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if not DATA.is_dir():  # CI clones the repo with shared/ beside it
    DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

_ids = itertools.count()


def uid(prefix: str = "m") -> str:
    return f"{prefix}{next(_ids)}"


def log_text(n_lines: int, seed: int = 0) -> str:
    """A tool output that looks like a build/test log (newlines, paths, numbers)."""
    lines = []
    for i in range(n_lines):
        k = (i * 7919 + seed) % 1000
        lines.append(
            f"/src/pkg/module_{k % 37}.py:{k}: checked item {k} status=ok time={k / 7:.2f}s"
        )
    return "\n".join(lines)


def tool_group(name: str, args: dict[str, Any], outputs: Sequence[str]) -> list[BaseMessage]:
    """One AI message calling ``len(outputs)`` tools (parallel calls) and their results."""
    calls = [
        {"name": name, "args": {**args, "i": k}, "id": uid("call"), "type": "tool_call"}
        for k in range(len(outputs))
    ]
    ai = AIMessage(content=f"Running {name}", tool_calls=calls, id=uid("ai"))
    results = [
        ToolMessage(content=out, tool_call_id=c["id"], name=name, id=uid("tool"))
        for c, out in zip(calls, outputs, strict=True)
    ]
    return [ai, *results]


def coding_run(
    steps: int, output_lines: int = 60, system: str = "You are a coding agent."
) -> list[BaseMessage]:
    """System, one task message, then ``steps`` tool calls with log outputs (one round)."""
    msgs: list[BaseMessage] = [
        SystemMessage(system, id=uid("sys")),
        HumanMessage("Fix the failing test in pkg/module_3.py", id=uid("user")),
    ]
    for s in range(steps):
        msgs += tool_group("bash", {"command": f"pytest -k case_{s}"}, [log_text(output_lines, s)])
    return msgs


def chat_rounds(rounds: int, tools_per_round: int = 2, output_lines: int = 20) -> list[BaseMessage]:
    """Customer-service style: many user rounds, each with a few tool calls and an answer."""
    msgs: list[BaseMessage] = [SystemMessage("You are an airline agent.", id=uid("sys"))]
    for r in range(rounds):
        msgs.append(HumanMessage(f"Request {r}: change reservation R{r:04d}", id=uid("user")))
        for t in range(tools_per_round):
            msgs += tool_group(
                "get_reservation", {"id": f"R{r:04d}"}, [log_text(output_lines, r * 10 + t)]
            )
        msgs.append(
            AIMessage(f"Done with request {r}: reservation R{r:04d} updated.", id=uid("ai"))
        )
    return msgs


def trajectories(name: str, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Read trajectories from ../shared/data, skipping the test when absent."""
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared real-trajectory data is not beside the repo)")
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if limit is not None and n >= limit:
                return
            yield json.loads(line)


# --- a scripted, tool-calling fake chat model -------------------------------------------
from langchain_core.callbacks import CallbackManagerForLLMRun  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from pydantic import Field  # noqa: E402


class ScriptedModel(BaseChatModel):
    """Calls ``tool_name`` ``steps`` times, then answers; records every input it saw."""

    steps: int = 10
    tool_name: str = "bash"
    seen: list = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):  # the script decides which tool to call
        return self

    def _generate(
        self, messages, stop=None, run_manager: CallbackManagerForLLMRun | None = None, **kw
    ):
        self.seen.append(list(messages))
        n = self.calls
        self.calls += 1
        if n < self.steps:
            msg = AIMessage(
                content=f"step {n}",
                tool_calls=[
                    {
                        "name": self.tool_name,
                        "args": {"command": f"run {n}"},
                        "id": f"call-{n}",
                        "type": "tool_call",
                    }
                ],
            )
        else:
            msg = AIMessage(content=f"finished after {n} steps")
        return ChatResult(generations=[ChatGeneration(message=msg)])


@tool
def bash(command: str) -> str:
    """Run a shell command and return its output."""
    seed = sum(map(ord, command))
    return log_text(70, seed)


# --- a multi-round, tool-calling, streaming script (the surfaces' end-to-end runs) --------
from collections.abc import AsyncIterator  # noqa: E402

from langchain_core.messages import AIMessageChunk  # noqa: E402
from langchain_core.outputs import ChatGenerationChunk  # noqa: E402


def _script_thread() -> str:
    """The thread (or RunnableWithMessageHistory session) the current call belongs to."""
    try:
        from langgraph.config import get_config

        conf = get_config().get("configurable") or {}
    except RuntimeError:
        return "default"
    return str(conf.get("thread_id") or conf.get("session_id") or "default")


class RoundScriptModel(BaseChatModel):
    """A user's rounds of work: per round ``steps`` calls of ``sh``, then an answer.

    The script depends only on how many calls the thread has made (never on what the
    model is shown), so every surface runs the same trajectory. Every ``big_every``-th
    call asks for a large output (``big_lines`` lines), the others for
    ``small_lines``. Records each input (``seen``) and the tools bound to it
    (``bound``); streams its answers word by word with tool-call chunks.
    """

    steps: int = 20
    big_every: int = 7
    big_lines: int = 120
    small_lines: int = 12
    seen: list = Field(default_factory=list)
    bound: list = Field(default_factory=list)
    calls: dict = Field(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "round-script"

    def bind_tools(self, tools, **kwargs):  # the script decides which tool to call
        self.bound = list(tools)
        return self

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def _next(self, messages) -> AIMessage:
        thread = _script_thread()
        self.seen.append(list(messages))
        n = self.calls.get(thread, 0)
        self.calls[thread] = n + 1
        r, p = divmod(n, self.steps + 1)
        if p == self.steps:
            return AIMessage(content=f"round {r} finished after {self.steps} steps")
        lines = self.big_lines if n % self.big_every == 0 else self.small_lines
        return AIMessage(
            content=f"round {r} step {p} running",
            tool_calls=[
                {
                    "name": "sh",
                    "args": {"command": f"make check-{n}", "lines": lines},
                    "id": f"call-{thread}-{n}",
                    "type": "tool_call",
                }
            ],
        )

    def _generate(self, messages, stop=None, run_manager=None, **kw):
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    def _stream(self, messages, stop=None, run_manager=None, **kw):
        msg = self._next(messages)
        words = msg.content.split(" ")
        for k, word in enumerate(words):
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(content=word if k == 0 else f" {word}")
            )
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        if msg.tool_calls:
            tc = msg.tool_calls[0]
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        {
                            "name": tc["name"],
                            "args": json.dumps(tc["args"]),
                            "id": tc["id"],
                            "index": 0,
                            "type": "tool_call_chunk",
                        }
                    ],
                )
            )

    async def _astream(self, messages, stop=None, run_manager=None, **kw) -> AsyncIterator:
        msg_chunks = list(self._stream(messages, stop=stop, run_manager=None, **kw))
        for chunk in msg_chunks:
            if run_manager is not None and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


@tool
def sh(command: str, lines: int = 12) -> str:
    """Run a shell command; ``lines`` is how much output it prints."""
    seed = sum(map(ord, command))
    return log_text(lines, seed)
