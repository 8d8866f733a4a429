"""Run the agent fuzzer of ``tests/test_agent_fuzz.py`` long, and report.

A real ``create_agent`` with the middleware, driven by a hypothesis state machine:
random user turns, a model that makes parallel tool calls with results sized around
every threshold, calls the self-management tools with valid and hostile arguments,
writes XML commands, and restarts between turns. Every turn must return; every
request must fit the budget and be a valid sequence; every original must be in the
store. A failure prints hypothesis' shrunk example and exits 1.

    python benchmarks/adversarial.py --examples 200 --steps 25
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--examples", type=int, default=100, help="conversations (hypothesis examples)")
    ap.add_argument("--steps", type=int, default=20, help="turns per conversation")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from hypothesis import HealthCheck, seed, settings
    from hypothesis.stateful import run_state_machine_as_test
    from test_agent_fuzz import AgentMachine

    started = time.perf_counter()
    failed = None
    try:
        seed(args.seed)(
            lambda: run_state_machine_as_test(
                AgentMachine,
                settings=settings(
                    max_examples=args.examples,
                    stateful_step_count=args.steps,
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        )()
    except Exception as exc:  # the shrunk counterexample was printed by hypothesis
        failed = exc
    stats = AgentMachine.stats
    print(
        f"{args.examples} conversations x up to {args.steps} steps, "
        f"{time.perf_counter() - started:.0f} s"
    )
    for key in sorted(stats):
        print(f"  {key}: {stats[key]:,}")
    if failed is not None:
        print(f"FAILED: {type(failed).__name__}: {failed}")
        return 1
    print("no run died; every request fit and was valid; every original was in the store")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
