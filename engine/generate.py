"""The generation loops: baseline (target only) and speculative (EAGLE-3 chain drafting).

One speculative cycle, for a sequence whose last committed token `cur` sits at position n
(not yet in the target's KV cache), with d_1 and the draft hidden g already produced:
  draft         k-1 chained draft steps at slots n+1..n+k-1 produce d_2..d_k
  verify        one target forward over [cur, d_1..d_k] at positions n..n+k (logits + features)
  accept        greedy or rejection sampling: keep d_1..d_a, then the target's next token
  draft_extend  one draft forward over slots n+1..n+k+1 with the target's features, whose output
                at slot n+a+1 gives the next cycle's d_1 and g
Every step has a fixed shape per (batch, k), so the runtime can capture each one in a CUDA graph;
positions and lengths differ per sequence and live in tensors, never in Python branches. The one
host sync per cycle is the acceptance readout (the loop must know what was emitted and when to
stop); the baseline loop never syncs until the end.

The steps are called through `Steps`, so the runtime can swap in graph-replaying versions. A greedy
cycle calls its draft chain and its draft extend as whole functions (`Steps.chain`, `Steps.extend`:
forward, pick and bookkeeping together), so the runtime can capture each as one graph.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from ncclprobe.engine.speculative import greedy_accept, probabilities, rejection_accept, sample
from ncclprobe.evidence.run.modes import Mode


class ModelSteps(Protocol):
    """The model calls the loops make: `Steps` (the models, eager), or the runtime's
    `graphs.GraphedSteps` (CUDA-graph replays where a shape was captured)."""

    def target(self, tokens: torch.Tensor, positions: torch.Tensor, capture: bool) -> Any:
        """(logits [B, T, vocab], the draft's features or None) at `positions` [B, T]."""

    def draft(
        self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, fuse: bool
    ) -> Any:
        """(draft logits, draft hidden) at `positions`."""

    def chain(self, d1, hidden, pos, draft_ids, k: int) -> torch.Tensor:
        """The greedy cycle's chained draft steps (`greedy_chain`)."""

    def extend(self, drafts, accepted, nxt, features, pos, draft_ids) -> Any:
        """The greedy cycle's draft extend (`greedy_extend`)."""


@dataclass
class Steps:
    """The model calls of the loops, eager; the runtime replaces them with CUDA-graph replays."""

    target_model: nn.Module  # (tokens [B,T], positions [B,T], capture) -> (logits, features|None)
    draft_model: nn.Module | None = None  # (tokens, hidden, positions, fuse) -> (logits, hidden)

    def target(self, tokens, positions, capture):
        return self.target_model(tokens, positions, capture)

    def draft(self, tokens, hidden, positions, fuse):
        if self.draft_model is None:
            raise RuntimeError("this engine has no draft model: only the baseline loop runs")
        return self.draft_model(tokens, hidden, positions, fuse)

    def chain(self, d1, hidden, pos, draft_ids, k):
        return greedy_chain(self.draft, draft_ids, k, d1, hidden, pos)

    def extend(self, drafts, accepted, nxt, features, pos, draft_ids):
        return greedy_extend(self.draft, draft_ids, drafts, accepted, nxt, features, pos)


def greedy_chain(draft, draft_ids, k: int, d1, hidden, pos) -> torch.Tensor:
    """The greedy cycle's k-1 chained draft steps: drafts [B, k] from d_1, the draft hidden
    [B, 1, H] and the positions n [B]. A function of tensors only, so the runtime can capture the
    whole chain as one CUDA graph: step by step, the host launches (input copies, replay, argmax,
    vocabulary map) cost more than a small draft's GPU time, and the GPU waits for them."""
    drafts = [d1]
    for j in range(1, k):
        dlogits, hidden = draft(drafts[-1][:, None], hidden, (pos + j)[:, None], False)
        drafts.append(draft_ids[dlogits[:, -1].argmax(-1)])
    return torch.stack(drafts, dim=1)


def greedy_extend(draft, draft_ids, drafts, accepted, nxt, features, pos):
    """The greedy draft extend (see `Engine._draft_extend`) as a function of tensors, for the
    same reason as `greedy_chain`: (d1 [B], hidden [B, 1, H]) of the next cycle."""
    tokens, positions = _extend_inputs(drafts, accepted, nxt, pos)
    dlogits, dhidden = draft(tokens, features, positions, True)
    last = accepted[:, None, None]
    d1 = draft_ids[dlogits.gather(1, last.expand(-1, 1, dlogits.shape[-1]))[:, 0].argmax(-1)]
    return d1, dhidden.gather(1, last.expand(-1, 1, dhidden.shape[-1]))


def _extend_inputs(drafts, accepted, nxt, pos):
    """Draft-extend tokens and positions over slots n+1..n+k+1: d_1..d_a, then the target's
    token at slot n+a+1; the slots beyond hold filler whose cache entries are masked and later
    overwritten."""
    span = torch.arange(drafts.shape[1] + 1, device=drafts.device)
    keep = span[None, :] < accepted[:, None]
    tokens = torch.where(keep, torch.cat([drafts, nxt[:, None]], dim=1), nxt[:, None])
    return tokens, pos[:, None] + 1 + span


@dataclass(frozen=True)
class CycleState:
    """What one speculative cycle hands the next, per sequence: the last committed token `cur`
    [B] at position `pos` [B] (not yet in the target's KV cache), the first draft token `d1` [B]
    with its draft distribution `q1` [B, V] (None when greedy) and the draft hidden `hidden` [B, 1, H]."""

    cur: torch.Tensor
    pos: torch.Tensor
    d1: torch.Tensor
    q1: torch.Tensor | None
    hidden: torch.Tensor


@dataclass
class Generation:
    tokens: list[list[int]]  # per sequence, exactly new_tokens ids
    wall_s: float
    histogram: list[int] = field(default_factory=list)  # cycles that accepted i drafts, i = 0..k
    cycles: int = 0

    @property
    def mean_acceptance_length(self) -> float | None:
        """Mean tokens emitted per sequence per cycle (accepted drafts + the target's token)."""
        total = sum(self.histogram)
        return sum((i + 1) * c for i, c in enumerate(self.histogram)) / total if total else None


class Engine:
    """The loops over one target (and draft), with the steps they call (`Steps`, or the runtime's
    graph-replaying ones) and the timer of their phases (None: untimed), both fixed when built."""

    def __init__(
        self,
        target,
        draft=None,
        *,
        k: int = 3,
        temperature: float = 0.0,
        seed: int = 0,
        steps: ModelSteps | None = None,
        timer=None,
    ):
        self.target, self.draft, self.k, self.temperature = target, draft, k, temperature
        self.device = next(target.parameters()).device
        self.seed = seed
        self.steps: ModelSteps = steps or Steps(target, draft)
        self.timer = timer
        if draft is not None:
            self.draft_ids = draft.to_target(torch.arange(draft.cfg.vocab, device=self.device))

    def _phase(self, name: str, joined: bool = False):
        return self.timer.phase(name, joined=joined) if self.timer is not None else nullcontext()

    def _mark(self) -> None:
        if self.timer is not None:
            self.timer.mark()

    def loop(self, mode: str):
        """The generation loop of a run mode (`Mode`): `baseline` or `speculative`."""
        return {Mode.BASELINE: self.baseline, Mode.SPECULATIVE: self.speculative}[Mode(mode)]

    def _generator(self) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(self.seed)

    def pick(self, logits: torch.Tensor, gen) -> torch.Tensor:
        if self.temperature == 0:
            return logits.argmax(-1)
        return sample(probabilities(logits, self.temperature), gen)

    def draft_pick(self, logits: torch.Tensor, gen):
        """(target ids [B], draft distribution over the target vocabulary [B, V] or None)."""
        if self.temperature == 0:
            return self.draft_ids[logits.argmax(-1)], None
        q = probabilities(logits, self.temperature)
        full = torch.zeros(q.shape[0], self.target.cfg.vocab, device=q.device)
        full[:, self.draft_ids] = q
        return self.draft_ids[sample(q, gen)], full

    @torch.inference_mode()
    def baseline(
        self, prompt: torch.Tensor, new_tokens: int, lengths: torch.Tensor | None = None
    ) -> Generation:
        """Greedy or sampled decoding of `new_tokens` per sequence. `lengths` [B]: each prompt's
        own length when the rows of `prompt` are right-padded to a common one (see `_last`)."""
        started = time.perf_counter()
        gen = self._generator()
        B, n = prompt.shape
        last = _last(lengths, B, n, self.device)
        with self._phase("prefill"):
            logits, _ = self.steps.target(prompt, _positions(B, 0, n, self.device), False)
            cur = self.pick(_at(logits, last), gen)
        out = torch.empty(B, new_tokens, dtype=torch.long, device=self.device)
        out[:, 0] = cur
        pos = (last + 1)[:, None]
        for i in range(1, new_tokens):
            with self._phase("decode"):
                logits, _ = self.steps.target(cur[:, None], pos, False)
                cur = self.pick(logits[:, -1], gen)
                out[:, i] = cur
                pos += 1
        tokens = out.tolist()
        return Generation(tokens=tokens, wall_s=time.perf_counter() - started)

    @torch.inference_mode()
    def speculative(
        self, prompt: torch.Tensor, new_tokens: int, lengths: torch.Tensor | None = None
    ) -> Generation:
        started = time.perf_counter()
        gen = self._generator()
        B, n = prompt.shape
        last = _last(lengths, B, n, self.device)
        with self._phase("prefill"):
            state = self._prefill(prompt, last, gen)
        emitted = [[t] for t in state.cur.tolist()]  # a sync: the first cycle starts from here
        self._mark()
        result = Generation(tokens=emitted, wall_s=0.0, histogram=[0] * (self.k + 1))
        while min(len(seq) for seq in emitted) < new_tokens:
            active = [len(seq) < new_tokens for seq in emitted]
            state = self._cycle(state, gen, active, result)
        result.tokens = [seq[:new_tokens] for seq in emitted]
        result.wall_s = time.perf_counter() - started
        return result

    def _prefill(self, prompt, last, gen) -> CycleState:
        B, n = prompt.shape
        logits, features = self.steps.target(prompt, _positions(B, 0, n, self.device), True)
        cur = self.pick(_at(logits, last), gen)
        # draft slots 1..n: token x_p with the feature of position p-1; the target's token goes
        # into the slot after each prompt's last token (slot n, unless the prompt is shorter)
        tokens = torch.cat([prompt[:, 1:], cur[:, None]], dim=1).scatter(
            1, last[:, None], cur[:, None]
        )
        dlogits, dhidden = self.steps.draft(
            tokens, features, _positions(B, 1, n, self.device), True
        )
        d1, q1 = self.draft_pick(_at(dlogits, last), gen)
        return CycleState(cur=cur, pos=last + 1, d1=d1, q1=q1, hidden=_at(dhidden, last)[:, None])

    def _cycle(self, state: CycleState, gen, active: list[bool], result: Generation) -> CycleState:
        """One draft-verify-accept-extend cycle; appends what each live sequence emitted to `result`."""
        k, greedy = self.k, self.temperature == 0
        cur, pos, d1, q1, hidden = state.cur, state.pos, state.d1, state.q1, state.hidden
        with self._phase("draft"):
            if greedy:
                drafts, qs = self.steps.chain(d1, hidden, pos, self.draft_ids, k), None
            else:
                drafts, qs = self._draft_chain(d1, q1, hidden, pos, gen)
        with self._phase("verify", joined=True):
            tokens = torch.cat([cur[:, None], drafts], dim=1)
            logits, features = self.steps.target(tokens, pos[:, None] + self._span(k + 1), True)
        with self._phase("accept", joined=True):
            if qs is None:  # greedy: the drafts are the draft's argmax, no distribution kept
                accepted, nxt = greedy_accept(drafts, logits)
            else:
                accepted, nxt = rejection_accept(
                    drafts, qs, probabilities(logits, self.temperature), gen
                )
        with self._phase("draft_extend", joined=True):
            if greedy:
                (d1, hidden), q1 = (
                    self.steps.extend(drafts, accepted, nxt, features, pos, self.draft_ids),
                    None,
                )
            else:
                d1, q1, hidden = self._draft_extend(drafts, accepted, nxt, features, pos, gen)
        with self._phase("accept", joined=True):
            readout = torch.cat(
                [accepted[:, None], nxt[:, None], drafts], dim=1
            ).tolist()  # the one sync
        self._mark()
        if all(active):  # the common case: no host-to-device copy of the flags
            pos = pos + accepted + 1
        else:  # finished sequences stand still, inside their cache
            pos = pos + (accepted + 1) * torch.tensor(active, device=self.device, dtype=torch.long)
        for seq, row, live in zip(result.tokens, readout, active):
            if live:
                a = row[0]
                seq.extend(row[2 : 2 + a] + [row[1]])
                result.histogram[a] += 1
        result.cycles += 1
        return CycleState(cur=nxt, pos=pos, d1=d1, q1=q1, hidden=hidden)

    def _draft_chain(self, d1, q1, hidden, pos, gen):
        """Sampling's chain: each draft step samples from the draft's distribution, which is kept
        for rejection sampling (greedy runs use `greedy_chain`)."""
        drafts, qs = [d1], [q1]
        for j in range(1, self.k):
            dlogits, hidden = self.steps.draft(
                drafts[-1][:, None], hidden, (pos + j)[:, None], False
            )
            d, q = self.draft_pick(dlogits[:, -1], gen)
            drafts.append(d)
            qs.append(q)
        probs = torch.stack(qs, dim=1) if qs[0] is not None else None
        return torch.stack(drafts, dim=1), probs

    def _draft_extend(self, drafts, accepted, nxt, features, pos, gen):
        """Sampling's draft extend: `greedy_extend`, with d_1 sampled and its distribution kept."""
        tokens, positions = _extend_inputs(drafts, accepted, nxt, pos)
        dlogits, dhidden = self.steps.draft(tokens, features, positions, True)
        last = accepted[:, None, None]
        d1, q1 = self.draft_pick(
            dlogits.gather(1, last.expand(-1, 1, dlogits.shape[-1]))[:, 0], gen
        )
        return d1, q1, dhidden.gather(1, last.expand(-1, 1, dhidden.shape[-1]))

    def _span(self, length: int) -> torch.Tensor:
        return torch.arange(length, device=self.device)


def _positions(batch: int, start: int, length: int, device) -> torch.Tensor:
    return torch.arange(start, start + length, device=device).expand(batch, length)


def _last(lengths: torch.Tensor | None, batch: int, n: int, device) -> torch.Tensor:
    """Index of each prompt's last token [B]. Right padding needs nothing else: a sequence's first
    generated token goes to the position after its own prompt, and the static cache (kv_cache.py)
    masks every slot above a query's position, so the pad tokens' cache entries are never read
    before a later step has overwritten them."""
    if lengths is None:
        return torch.full((batch,), n - 1, dtype=torch.long, device=device)
    return lengths.to(device=device, dtype=torch.long) - 1


def _at(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Row b of `x` [B, T, ...] at position index[b]: [B, ...]."""
    return x[torch.arange(x.shape[0], device=x.device), index]
