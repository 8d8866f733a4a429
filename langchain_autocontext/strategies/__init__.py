"""The compression strategies, one small module each; ``pipeline`` runs them in order."""

from langchain_autocontext.strategies.base import Job, JobOutput, PassContext, Strategy
from langchain_autocontext.strategies.current_round import (
    CurrentRoundCompression,
    CurrentRoundLargeMessages,
)
from langchain_autocontext.strategies.fifo import FifoEviction
from langchain_autocontext.strategies.offload import LargeMessageOffload
from langchain_autocontext.strategies.rounds import RoundSummary
from langchain_autocontext.strategies.tool_runs import ToolRunCompression

__all__ = [
    "CurrentRoundCompression",
    "CurrentRoundLargeMessages",
    "FifoEviction",
    "Job",
    "JobOutput",
    "LargeMessageOffload",
    "PassContext",
    "RoundSummary",
    "Strategy",
    "ToolRunCompression",
]
