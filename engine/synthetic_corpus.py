"""A synthetic language whose next token is mostly predictable: a seeded order-2 Markov chain.

Why: a target with random weights picks its greedy token as a hash of the whole context, which no
draft can learn (acceptance 1.02 on `small`, docs/LOG.md), and no real checkpoint is available
offline. A target trained on this corpus follows a rule a draft can learn too, so speculative
decoding can be measured at a realistic acceptance length ("target trained on a synthetic corpus").

The rule, for the next token after the context (a, b), over the full model vocabulary:
- a or b outside the `active` sub-vocabulary: uniform over the active tokens (the chain starts);
- both active: the order-2 successors of (a, b).
Successors are `successors` distinct active tokens with probabilities (top_prob, then the rest
split evenly), found by hashing (a, b, seed) with integer arithmetic on tensors: nothing of size
V^2 is ever built and a batch of contexts is one vectorised call on any device. The most likely
successor is never a or b, so greedy decoding cannot lock into repeating one or two tokens.

Greedy decoding of a trained target is therefore a walk on the A^2 states (a, b): it starts at
two tokens the prompt decides (the target's argmax over a nearly flat distribution), then follows
each state's most likely successor into one of the few cycles of that map (a random map on N
states has cycles and tails of about sqrt(pi N / 8) states). The active vocabulary trades how
learnable the walk is (A^2 contexts for the target, the visited states for a draft) against how
long it runs before it repeats.

Training sequences open with a prefix of uniformly random tokens from the FULL vocabulary (the
positions that predict it carry no loss), because `train-draft` and `run-engine` prompt the target
with exactly such tokens (`build.random_prompts`): after any prompt the trained target then
starts a chain and follows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ncclprobe.errors import UsageProblem

MASK31 = (1 << 31) - 1
MIX = (0x45D9F3B, 0x2C1B3C6D)  # odd multipliers below 2^31: products stay inside int64


@dataclass(frozen=True, kw_only=True)
class ChainSpec:
    vocab: int  # the model's vocabulary (token ids 0..vocab-1)
    active_vocab: int = 64  # tokens the chain moves between (active_vocab^2 order-2 contexts)
    successors: int = 5  # distinct successors per context
    top_prob: float = 0.75  # probability of the most likely successor; the rest share 1 - top_prob
    prefix_min: int = 2  # random full-vocabulary tokens opening each training sequence ...
    prefix_max: int = 24  # ... uniform in [prefix_min, prefix_max] (covers prompts of 8 and 16)
    seed: int = 0

    def __post_init__(self):
        if (
            not 3 <= self.active_vocab <= min(self.vocab, 46000)
        ):  # 46000^2 keys fit the 31-bit hash input
            raise UsageProblem(
                f"active vocabulary must be between 3 and min(vocab {self.vocab}, 46000), "
                f"got {self.active_vocab}"
            )
        if not 1 <= self.successors <= self.active_vocab:
            raise UsageProblem(
                f"successors must be between 1 and the active vocabulary, got {self.successors}"
            )
        single = self.successors == 1 and self.top_prob == 1
        if not single and not 1 / self.successors < self.top_prob < 1:
            raise UsageProblem(
                f"top_prob must lie between 1/successors (so the top successor is the most likely) "
                f"and 1 (exactly 1 with one successor), got {self.top_prob}"
            )
        if not 2 <= self.prefix_min <= self.prefix_max:
            raise UsageProblem(
                f"prefix lengths need 2 <= min <= max, got {self.prefix_min}..{self.prefix_max}"
            )


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 31-bit integer hash (xorshift-multiply rounds); identical on CPU and GPU."""
    x = x & MASK31
    for multiplier in MIX:
        x = (((x >> 16) ^ x) * multiplier) & MASK31
    return (x >> 16) ^ x


class MarkovChain:
    """The rule of the module docstring, vectorised over any shape of contexts."""

    def __init__(self, spec: ChainSpec, device="cpu"):
        self.spec = spec
        gen = torch.Generator().manual_seed(spec.seed)
        A, m = spec.active_vocab, spec.successors
        self.active = torch.randperm(spec.vocab, generator=gen)[:A].to(device)
        self.index = torch.full((spec.vocab,), -1, dtype=torch.long)
        self.index[self.active.cpu()] = torch.arange(A)
        self.index = self.index.to(device)
        # successor j of a context is active[(base + offsets[j]) % A]: distinct by construction
        self.offsets = torch.cat(
            [torch.zeros(1, dtype=torch.long), torch.randperm(A - 1, generator=gen)[: m - 1] + 1]
        )
        self.offsets = self.offsets.to(device)
        rest = (1 - spec.top_prob) / (m - 1) if m > 1 else 0.0
        self.probs = torch.tensor(
            [spec.top_prob] + [rest] * (m - 1), dtype=torch.float64, device=device
        )
        self.cumulative = self.probs.cumsum(0).float()
        self.salt = int(_mix(torch.tensor(spec.seed + 0x9E3779B)))

    @property
    def chain_entropy(self) -> float:
        """Nats per token of one order-2 step: the loss floor once the chain runs."""
        return float(-(self.probs * self.probs.log()).sum())

    def _context(self, a: torch.Tensor, b: torch.Tensor):
        """(index in `active` of the most likely successor, whether the context starts the chain)."""
        A = self.spec.active_vocab
        ia, ib = self.index[a], self.index[b]
        start = (ia < 0) | (ib < 0)
        base = _mix((ia.clamp(min=0) * A + ib.clamp(min=0)) ^ self.salt) % A
        for _ in range(2):  # step past a and b: two moves always suffice
            base = torch.where((base == ia) | (base == ib), (base + 1) % A, base)
        return base, start

    def top(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The most likely next token after (a, b); -1 where the context starts the chain (uniform)."""
        base, start = self._context(a, b)
        return torch.where(start, -1, self.active[base])

    def entropy(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Entropy (nats) of the next token after (a, b): ln A at a chain start, else the profile's."""
        _, start = self._context(a, b)
        return torch.where(start, math.log(self.spec.active_vocab), self.chain_entropy)

    def sample_next(self, a: torch.Tensor, b: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        A = self.spec.active_vocab
        base, start = self._context(a, b)
        u = torch.rand(a.shape, generator=gen, device=a.device)
        j = torch.searchsorted(self.cumulative, u.contiguous(), right=True).clamp(
            max=len(self.offsets) - 1
        )
        chained = self.active[(base + self.offsets[j]) % A]
        uniform = self.active[torch.randint(0, A, a.shape, generator=gen, device=a.device)]
        return torch.where(start, uniform, chained)

    def sample(
        self, batch: int, length: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [batch, length], ruled [batch, length]): `ruled` marks tokens drawn by the rule
        (after each row's random prefix); only the positions predicting them carry a loss."""
        spec, device = self.spec, self.active.device
        if length <= spec.prefix_max:
            raise UsageProblem(
                f"sequence length {length} leaves no chain after a prefix of up to {spec.prefix_max}"
            )
        prefix_len = torch.randint(
            spec.prefix_min, spec.prefix_max + 1, (batch, 1), generator=gen, device=device
        )
        tokens = torch.randint(0, spec.vocab, (batch, length), generator=gen, device=device)
        ruled = torch.arange(length, device=device)[None, :] >= prefix_len
        for t in range(spec.prefix_min, length):
            drawn = self.sample_next(tokens[:, t - 2], tokens[:, t - 1], gen)
            tokens[:, t] = torch.where(ruled[:, t], drawn, tokens[:, t])
        return tokens, ruled


def greedy_walk(chain: MarkovChain) -> dict:
    """Where greedy decoding of a perfectly trained target goes: the cycles of the map
    (a, b) -> (b, top(a, b)) over the A^2 active states, each with the share of states that end in
    it, and the mean number of steps before a state reaches its cycle. Reported next to any
    acceptance length measured with this target: after its tail, greedy output repeats the cycle."""
    A = chain.spec.active_vocab
    a, b = chain.active.repeat_interleave(A), chain.active.repeat(A)
    step = (chain.index[b] * A + chain.index[chain.top(a, b)]).tolist()
    cycle_of, tail, lengths = [-1] * (A * A), [0] * (A * A), []
    for state in range(A * A):
        path: list[int] = []
        seen: dict[int, int] = {}
        x = state
        while cycle_of[x] < 0 and x not in seen:
            seen[x] = len(path)
            path.append(x)
            x = step[x]
        if cycle_of[x] < 0:  # the walk closed a new cycle at x
            lengths.append(len(path) - seen[x])
            for y in path[seen[x] :]:
                cycle_of[y] = len(lengths) - 1
            path = path[: seen[x]]
        for y in reversed(path):  # the tail states, nearest the cycle first
            cycle_of[y], tail[y] = cycle_of[step[y]], tail[step[y]] + 1
    shares = [cycle_of.count(c) / (A * A) for c in range(len(lengths))]
    cycles = sorted(zip(lengths, shares), key=lambda pair: -pair[1])
    return {
        "cycles": [{"length": n, "share": round(s, 4)} for n, s in cycles],
        "mean_tail": sum(tail) / (A * A),
    }
