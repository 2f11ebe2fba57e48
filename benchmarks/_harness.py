"""Interleaved A/B measurement: machine drift lands on both sides equally.

Each round times one batch of the baseline and one batch of the subject
(alternating which goes first), so a noisy neighbour on a 2-core machine
slows both. Results are per-operation seconds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Samples:
    name: str
    per_op: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.per_op)

    @property
    def p99(self) -> float:
        ordered = sorted(self.per_op)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]

    @property
    def ops_per_second(self) -> float:
        return 1.0 / self.median if self.median > 0 else float("inf")


@dataclass(frozen=True)
class Comparison:
    scenario: str
    baseline: Samples
    subject: Samples
    goal: str

    @property
    def ratio(self) -> float:
        return self.subject.median / self.baseline.median

    @property
    def overhead_seconds(self) -> float:
        return self.subject.median - self.baseline.median


async def interleave_async(
    baseline: Callable[[], Awaitable[object]],
    subject: Callable[[], Awaitable[object]],
    *,
    rounds: int,
    batch: int,
    names: tuple[str, str],
) -> tuple[Samples, Samples]:
    """Run ``rounds`` A/B rounds of ``batch`` operations each; per-op time per batch."""
    a, b = Samples(names[0]), Samples(names[1])
    for i in range(rounds):
        order = [(baseline, a), (subject, b)] if i % 2 == 0 else [(subject, b), (baseline, a)]
        for fn, samples in order:
            start = time.perf_counter()
            for _ in range(batch):
                await fn()
            samples.per_op.append((time.perf_counter() - start) / batch)
    return a, b


def interleave_sync(
    baseline: Callable[[], object],
    subject: Callable[[], object],
    *,
    rounds: int,
    batch: int,
    names: tuple[str, str],
) -> tuple[Samples, Samples]:
    a, b = Samples(names[0]), Samples(names[1])
    for i in range(rounds):
        order = [(baseline, a), (subject, b)] if i % 2 == 0 else [(subject, b), (baseline, a)]
        for fn, samples in order:
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            samples.per_op.append((time.perf_counter() - start) / batch)
    return a, b


def format_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"
