"""The GPU busy-wait queued ahead of a batch of CUDA-event samples, so that the batch starts on a
busy GPU: an event recorded behind it is stamped when the GPU gets to it, not when the host
queued it.

The spin kernel (torch.cuda._sleep) counts SM clock cycles, so the seconds a number of cycles
lasts depend on the clock it runs at: an idle GPU runs a few hundred MHz, a loaded one near its
boost clock, several times faster. Its rate is therefore measured under load, with spins queued
back to back until two in a row agree, and the fastest rate seen is kept: a busy-wait sized by
it lasts at least what was asked at any clock up to that one. Each batch's busy-wait is timed
with events as well (CudaClock): one that spanned less than it was asked for ran at a faster
clock than any seen, and the rate becomes the one that spin measured, at no cost in GPU time.
The event and spin APIs are arguments, so that all of this runs on a CPU with fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from itertools import pairwise
from typing import Any

#: Cycles of one timed spin: 5-6 ms at an H100's 1.7-2 GHz, 25 ms at an idle 400 MHz.
CALIBRATION_CYCLES = 10_000_000
#: Spins timed back to back in one round of the calibration.
SPINS_PER_ROUND = 6
#: The clock has settled when the last two spins of a round agree within this share.
SETTLED = 0.02
#: Rounds before the calibration keeps what it has (a clock that never settles: its fastest).
MAX_ROUNDS = 5


def calibrate_cycles_per_second(event_factory: Callable[[], Any], synchronize: Callable[[], None],
                                spin: Callable[[int], Any], cycles: int = CALIBRATION_CYCLES,
                                spins: int = SPINS_PER_ROUND,
                                max_rounds: int = MAX_ROUNDS) -> float:
    """Cycles per second of the spin kernel under load, timed with events.

    torch does not expose the SM clock (CUDA 13 dropped clockRate), and the clock under load is
    not the nominal one, nor the idle one a calibration on a resting GPU would meet: rounds of
    `spins` spins run back to back (one synchronize per round, too short a pause for the clock
    to drop) until the last two agree within SETTLED, and the fastest rate is returned."""
    fastest = 0.0
    for _ in range(max_rounds):
        marks = [event_factory() for _ in range(spins + 1)]
        spin(cycles // 10)  # queued first: the first timed spin starts on a busy GPU
        marks[0].record()
        for mark in marks[1:]:
            spin(cycles)
            mark.record()
        synchronize()
        seconds = [start.elapsed_time(end) / 1e3 for start, end in pairwise(marks)]
        if not all(s > 0 for s in seconds):
            raise RuntimeError("the GPU spin kernel took no measurable time; cannot calibrate")
        rates = [cycles / s for s in seconds]
        fastest = max(fastest, *rates)
        if abs(rates[-1] - rates[-2]) <= SETTLED * max(rates[-2:]):
            break
    return fastest


class BusyWait:
    """Queues about `seconds` of GPU spinning when called; `observe` tells it how long the last
    one actually spanned on the GPU."""

    def __init__(self, spin: Callable[[int], Any], cycles_per_second: float) -> None:
        if not cycles_per_second > 0:
            raise ValueError(f"cycles_per_second must be > 0, got {cycles_per_second!r}")
        self._spin = spin
        self.cycles_per_second = cycles_per_second
        self.recalibrations = 0  # busy-waits that fell short and set the rate
        self._last_cycles = 0

    def __call__(self, seconds: float) -> None:
        self._last_cycles = max(1, int(seconds * self.cycles_per_second))
        self._spin(self._last_cycles)

    def observe(self, asked: float, spanned: float) -> bool:
        """The last busy-wait was asked for `asked` seconds and spanned `spanned` on the GPU
        (events around it). One that fell short ran faster than calibrated (the clock rose
        since): the rate becomes what it measured. Returns whether it fell short."""
        if not (0 < spanned < asked) or not self._last_cycles:
            return False
        self.cycles_per_second = max(self.cycles_per_second, self._last_cycles / spanned)
        self.recalibrations += 1
        return True


@cache
def gpu_busy_wait(device: Any = "cuda") -> BusyWait:  # pragma: no cover - needs a GPU
    """The busy-wait of `device` (torch.cuda._sleep on its current stream), calibrated under
    load once per device and process; call it with the seconds to cover."""
    import torch

    device = torch.device(device)
    with torch.cuda.device(device):
        rate = calibrate_cycles_per_second(lambda: torch.cuda.Event(enable_timing=True),
                                           lambda: torch.cuda.synchronize(device),
                                           torch.cuda._sleep)
    return BusyWait(torch.cuda._sleep, rate)
