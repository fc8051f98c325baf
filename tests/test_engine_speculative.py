"""Acceptance functions: greedy against hand-worked cases, rejection sampling against the target
distribution it must reproduce (a statistical test whose bound comes from the sample size)."""

import math

import pytest
import torch

from ncclprobe.engine.speculative import greedy_accept, rejection_accept, sample


def _logits_choosing(choices, vocab=6):
    logits = torch.zeros(len(choices), len(choices[0]), vocab)
    for b, row in enumerate(choices):
        for i, token in enumerate(row):
            logits[b, i, token] = 1.0
    return logits


def test_greedy_keeps_matching_prefix_and_target_token():
    drafts = torch.tensor([[1, 2, 3], [1, 2, 3], [4, 2, 3], [1, 5, 3]])
    target = _logits_choosing([[1, 2, 3, 0], [1, 2, 4, 0], [1, 2, 3, 0], [1, 2, 3, 5]])
    accepted, nxt = greedy_accept(drafts, target)
    assert accepted.tolist() == [3, 2, 0, 1]  # a later match after a mismatch does not count
    assert nxt.tolist() == [0, 4, 1, 2]  # bonus when all match, else the target's choice


def _bound(p: float, n: int, sigmas: float = 5.0) -> float:
    """|empirical - p| stays below `sigmas` binomial standard deviations: for 5 sigma the chance a
    correct sampler fails one category is < 6e-7, so the whole test fails spuriously < 1e-5."""
    return sigmas * math.sqrt(p * (1 - p) / n) + 1e-9


def test_sample_follows_probabilities():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125, 0.0])
    n = 40000
    draws = sample(probs.expand(n, 5), torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).double() / n
    for p, f in zip(probs.tolist(), freq.tolist()):
        assert abs(f - p) <= _bound(p, n)
    assert freq[4] == 0


@pytest.mark.parametrize("seed", [0, 1])
def test_rejection_sampling_emits_the_target_distribution(seed):
    """Both emitted positions (first draft slot, and second slot given k=2) follow p, whatever q is."""
    n, vocab, k = 60000, 5, 2
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(k + 1, vocab, generator=gen) * 1.5, -1)
    q = torch.softmax(torch.randn(k, vocab, generator=gen) * 1.5, -1)
    drafts = sample(q.expand(n, k, vocab), gen)
    accepted, nxt = rejection_accept(drafts, q.expand(n, k, vocab), p.expand(n, k + 1, vocab), gen)
    first = torch.where(accepted >= 1, drafts[:, 0], nxt)
    second_rows = accepted >= 1  # sequences that reached position 1
    second = torch.where(accepted[second_rows] >= 2, drafts[second_rows, 1], nxt[second_rows])
    for emitted, target in ((first, p[0]), (second, p[1])):
        freq = torch.bincount(emitted, minlength=vocab).double() / len(emitted)
        for want, got in zip(target.tolist(), freq.tolist()):
            assert abs(got - want) <= _bound(want, len(emitted)), (target, freq)


def test_rejection_accepts_everything_when_draft_equals_target():
    p = torch.softmax(torch.randn(3, 7, generator=torch.Generator().manual_seed(3)), -1)
    drafts = sample(p[:2].expand(500, 2, 7), torch.Generator().manual_seed(4))
    accepted, _ = rejection_accept(
        drafts, p[:2].expand(500, 2, 7), p.expand(500, 3, 7), torch.Generator().manual_seed(5)
    )
    assert accepted.eq(2).all()  # u * q < p with p == q holds for every u < 1


def test_phase_timer_host_time_between_marks():
    """Host time per interval is the wall time between two marks minus the phases recorded in
    between; a sleep outside any phase is host time, a sleep inside a phase is not."""
    import time

    from ncclprobe.engine.instrument import PhaseTimer

    timer = PhaseTimer("cpu")
    started = time.perf_counter()
    timer.mark()
    for _ in range(3):
        with timer.phase("verify"):
            time.sleep(0.04)
        time.sleep(0.01)
        timer.mark()
    wall_s = time.perf_counter() - started
    phases = timer.summary(wall_s=wall_s, steps=3)
    host = phases["host"]
    assert host["count"] == 3 and host["graphed"] is False
    assert all(
        0.01 <= ms / 1000 < 0.035 for ms in (host["median_ms"], host["p90_ms"])
    )  # not the phase's 0.04
    assert phases["verify"]["total_ms"] + host["total_ms"] == pytest.approx(1000 * wall_s)
    assert PhaseTimer("cpu").summary(wall_s=0.5, steps=7)["host"] == {
        "count": 7,
        "total_ms": 500.0,
        "median_ms": None,
        "p90_ms": None,
        "graphed": False,
    }
