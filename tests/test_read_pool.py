"""The capped reader pool's wall clock: it stops a worker that is blocked (no CPU spent), never one
that is only slow to get a core on a loaded host (issue 37's reader; a loaded 2-core machine once
refused a healthy 128-rank job's dump as "a pickle built to be slow")."""

import time

from ncclprobe.evidence.read_pool import WALL_FACTOR, Failed, Limits, Read, map_files

ONE_CPU_S = Limits(memory_bytes=64 << 20, cpu_s=1)
WALL_S = ONE_CPU_S.cpu_s * WALL_FACTOR + 2  # what a worker may stay silent and idle


def _starved(seconds: float) -> str:
    """A reader that gets a core only now and then: 20 ms of CPU every 0.25 s, for `seconds` of
    wall time (under 0.1 s of CPU a second, far under the 1 s CPU cap)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        spin = time.process_time() + 0.02
        while time.process_time() < spin:
            pass
        time.sleep(0.25)
    return "read"


def _blocked(seconds: float) -> str:
    """A reader that never gets its bytes (as a FIFO without a writer): no CPU at all."""
    time.sleep(seconds)
    return "read"


def test_a_reader_that_keeps_spending_cpu_is_read_past_the_wall_clock():
    (outcome,) = map_files(_starved, [WALL_S + 1.5], lambda _: ONE_CPU_S)
    assert isinstance(outcome, Read) and outcome.value == "read", outcome


def test_a_reader_that_spends_no_cpu_is_stopped_and_named_blocked():
    started = time.monotonic()
    (outcome,) = map_files(_blocked, [WALL_S + 30], lambda _: ONE_CPU_S)
    assert isinstance(outcome, Failed), outcome
    assert f"spent no CPU for {WALL_S} s (blocked" in outcome.problem
    assert time.monotonic() - started < WALL_S + 10  # stopped at its bound, not at the sleep's end
