"""Interleaved measurement: machine drift lands on every arm equally.

Each round times one batch of every arm, rotating which goes first, so a
noisy neighbour on a 2-core machine slows all of them alike. Results are
per-operation seconds, one sample per batch (or, for a self-timed arm, the
per-operation laps the arm measured itself).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

import trio

__all__ = [
    "Arm",
    "Samples",
    "SyncArm",
    "format_seconds",
    "interleave",
    "interleave_async",
    "interleave_blocking",
    "rotations",
]


@dataclass(frozen=True)
class Samples:
    """Per-operation seconds of one arm. Empty samples have no median (``StatisticsError``)."""

    name: str
    per_op: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.per_op)

    @property
    def p99(self) -> float:
        """The sorted sample at index ``floor(0.99 n)``: the maximum when there are 100 or fewer."""
        ordered = sorted(self.per_op)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]

    @property
    def ops_per_second(self) -> float:
        return 1.0 / self.median if self.median > 0 else float("inf")


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: ``fn`` is awaited ``batch`` times per round.

    A ``self_timed`` arm measures itself: ``fn`` returns the per-operation
    seconds it saw (for example laps taken inside a script), which become the
    samples instead of the batch's wall time; its ``batch`` must be 1.
    """

    name: str
    fn: Callable[[], Awaitable[object]]
    batch: int = 1
    self_timed: bool = False

    def __post_init__(self) -> None:
        if self.batch < 1 or (self.self_timed and self.batch != 1):
            raise ValueError(f"arm {self.name!r}: batch must be >= 1 (exactly 1 when self-timed)")


@dataclass(frozen=True)
class SyncArm:
    """A blocking arm, timed without an event loop in the way (for µs-scale calls)."""

    name: str
    fn: Callable[[], object]
    batch: int = 1


def rotations(n: int, rounds: int) -> Iterable[list[int]]:
    """Arm indices per round, rotated by one each round (for two arms: A B, B A, …)."""
    for r in range(rounds):
        yield [(r + i) % n for i in range(n)]


async def interleave(
    arms: Sequence[Arm], *, rounds: int, warmup: int = 0, pause: float = 0.0
) -> dict[str, Samples]:
    """Run ``rounds`` rounds of every arm; returns samples by arm name.

    ``warmup`` untimed batches of each arm run first. ``pause`` seconds of
    untimed sleep precede each round (lets background work, such as a spare
    runner starting, settle so every round starts from the same state).
    """
    samples = {arm.name: Samples(arm.name) for arm in arms}
    for arm in arms:
        for _ in range(warmup):
            await _batch(arm)
    for order in rotations(len(arms), rounds):
        if pause:
            await trio.sleep(pause)
        for i in order:
            arm = arms[i]
            start = time.perf_counter()
            laps = await _batch(arm)
            elapsed = time.perf_counter() - start
            if arm.self_timed:
                samples[arm.name].per_op.extend(laps)  # type: ignore[arg-type]
            else:
                samples[arm.name].per_op.append(elapsed / arm.batch)
    return samples


async def _batch(arm: Arm) -> object:
    result = None
    for _ in range(arm.batch):
        result = await arm.fn()
    return result


def interleave_blocking(
    arms: Sequence[SyncArm], *, rounds: int, warmup: int = 0
) -> dict[str, Samples]:
    """:func:`interleave` for blocking arms; no awaits inside the timed loop."""
    samples = {arm.name: Samples(arm.name) for arm in arms}
    for arm in arms:
        for _ in range(warmup * arm.batch):
            arm.fn()
    for order in rotations(len(arms), rounds):
        for i in order:
            arm = arms[i]
            fn = arm.fn
            start = time.perf_counter()
            for _ in range(arm.batch):
                fn()
            samples[arm.name].per_op.append((time.perf_counter() - start) / arm.batch)
    return samples


async def interleave_async(
    baseline: Callable[[], Awaitable[object]],
    subject: Callable[[], Awaitable[object]],
    *,
    rounds: int,
    batch: int,
    names: tuple[str, str],
    warmup: int = 0,
) -> tuple[Samples, Samples]:
    """Two arms, A B / B A: (baseline samples, subject samples)."""
    s = await interleave(
        [Arm(names[0], baseline, batch), Arm(names[1], subject, batch)],
        rounds=rounds,
        warmup=warmup,
    )
    return s[names[0]], s[names[1]]


def format_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"
