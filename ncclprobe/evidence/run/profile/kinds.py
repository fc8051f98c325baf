"""What each forward found from the kernel stream is: the target's or a draft's, a prefill, a
decode or a verify, with the tokens per sequence it processed and the tokens it kept.

- **Model**: two models in one trace (a draft and its target) launch different numbers of kernels
  per forward, since the draft has fewer layers: forwards whose kernel counts fall apart by at
  least DRAFT_SIZE_RATIO are two models, the smaller the draft (eager forwards and graph replays
  apart: a captured forward's kernels are fused and fewer).
- **Tokens per sequence**, in the order the trace can tell them: the forward's own embedding
  lookup with recorded shapes (`record_shapes`: exact); else the launch grids: a kernel run on
  the step's activations launches blocks in proportion to its tokens, so per kernel name the
  median blocks of a step against the model's smallest step give the ratio of their tokens (eager
  forwards against eager ones, replays against replays: a replay's kernels keep their grids); the
  smallest is taken as 1 token (a decode, a draft proposing one token), or, for a target beside a
  draft, as the drafts per cycle + 1 (the verify of the cycle's drafts).
- **Kind**: a model's first forward is its prefill when it processed more tokens than any later
  one (the prompt); any forward of more than MAX_VERIFY_TOKENS is one too, and, with recorded
  shapes, any forward that started from an empty KV cache (a second `generate()` call's prompt,
  a prompt of MAX_VERIFY_TOKENS or fewer). After it, a target
  forward beside a draft is a verify; without a draft, 1 token is a decode and more a verify (a
  draft-free speculative step, e.g. prompt lookup).
- **Kept tokens** (for costs per token): with recorded shapes, how the target's KV cache grew
  from one forward to the next (attention's key length minus its query length: the cache before
  the forward); else 1 per decode, prefill and graph replay, and unknown for a verify.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Set as AbstractSet

from ncclprobe.evidence.run.profile.timeline import Timeline

DRAFT_SIZE_RATIO = 1.6  # a draft launches at most 1/1.6 of its target's kernels per forward
MAX_VERIFY_TOKENS = 16  # more tokens than this in one forward: a prefill (steps.kind_from_tokens)
MIN_BLOCKS = 2  # grids of one block say nothing about the tokens (a one-token step fits one block)
CHANGED = math.log(1.1)  # a kernel whose blocks differ by more than 10%: it scales with the tokens
MIN_CHANGED = 3  # fewer such kernels: the two steps processed the same tokens


def classify(tl: Timeline, steps) -> None:
    """Set each forward step's model, kind, label, tokens per sequence and kept tokens."""
    for step in steps:
        step.model = "target"
    for same_mode in ([s for s in steps if not s.replay], [s for s in steps if s.replay]):
        for step in _drafts(same_mode):
            step.model = "draft"
    for model in ("target", "draft"):
        group = [s for s in steps if s.model == model]
        if group:
            _tokens(tl, group, steps, model)
            _kinds(group, model, {id(s) for s in group if _cache_before(tl, s) == 0})
    _kept(tl, [s for s in steps if s.model == "target"])
    for step in steps:
        if step.model == "draft":
            step.kept = 0.0  # a draft's tokens are the target's to keep


def _drafts(eager) -> list:
    """The forwards of the smaller model, where the launch counts split by DRAFT_SIZE_RATIO."""
    sizes = sorted({s.launch_count for s in eager})
    if len(sizes) < 2:
        return []
    # the highest jump of at least the ratio: the target is above it, however many odd small
    # forwards (a partial one where a trace was cut or joined) jump again below the draft
    cuts = [b for a, b in zip(sizes, sizes[1:]) if a and b / a >= DRAFT_SIZE_RATIO]
    if not cuts:
        return []
    larger = [s for s in eager if s.launch_count >= cuts[-1]]
    if len(larger) == 1 and larger[0] is eager[0]:
        return []  # one prompt run eagerly before compiled forwards of fused kernels: one model
    return [s for s in eager if s.launch_count < cuts[-1]]


def _tokens(tl: Timeline, group, steps, model: str) -> None:
    unknown = []
    for step in group:
        shaped = _looked_up(tl, step)
        if shaped:
            step.batch, step.tokens_per_seq = shaped
            step.tokens_from = "the recorded input shapes"
        else:
            unknown.append(step)
    base = _smallest_tokens(group, steps, model)
    for replay in (False, True):
        alike = [s for s in group if s.replay == replay]
        if len(alike) < 2:
            continue  # one forward of its kind: nothing to compare its grids with
        ref = min(alike, key=lambda s: sum(s.blocks.values()))
        for step in (s for s in unknown if s.replay == replay):
            ratio = relative_tokens(step.blocks, ref.blocks)
            if ratio is None:
                continue
            step.tokens_per_seq = float(max(1, round(ratio * base)))
            step.tokens_from = (
                f"the launch grids{' of the replayed kernels' if replay else ''}, against its smallest "
                f"forward taken as {base:g} token(s)"
                + (" (the drafts per cycle + 1)" if base > 1 else "")
            )


def lookup_tokens(dims: list, batch: int | None) -> tuple[int | None, float] | None:
    """(batch, tokens per sequence) of an embedding lookup's token ids, [batch, tokens] or flat."""
    if len(dims) == 2 and all(isinstance(d, int) for d in dims) and dims[0] > 0:
        return dims[0], float(dims[1])
    if len(dims) == 1 and isinstance(dims[0], int) and batch:
        return batch, dims[0] / batch
    return None


def _looked_up(tl: Timeline, step):
    """(batch, tokens) from the first embedding lookup with shapes inside the step."""
    times = [ts for ts, _, _ in tl.embeddings]
    lo = max(
        0, bisect.bisect_right(times, step.t0) - 1
    )  # the lookup that launched its first kernel
    for ts, dur, dims in tl.embeddings[lo:]:
        if ts > step.t1:
            break
        if ts + dur < step.t0:
            continue
        found = lookup_tokens(dims, step.batch) if dims else None
        if found:
            return found
    return None


def _smallest_tokens(group, steps, model: str) -> int:
    """Tokens of a model's smallest forward: 1, or beside a draft the target's drafts per cycle + 1."""
    if model != "target" or not any(s.model == "draft" for s in steps):
        return 1
    runs, count = [], 0
    for step in steps:
        if step.model == "draft":
            count += 1
        elif count:
            runs.append(count)
            count = 0
    return int(statistics.median(runs)) + 1 if runs else 1


def relative_tokens(blocks: dict, ref: dict) -> float | None:
    """Tokens of a step over a reference step's, from the blocks each kernel name launched:
    kernels that scale with the tokens change their grids, by the ratio of the tokens where the
    work is per token (elementwise kernels on the activations) and by less where a grid is capped
    (reductions, split-K GEMMs): the median of the changed kernels' ratios. None without kernels in
    common."""
    pairs = [(blocks[n], ref[n]) for n in blocks.keys() & ref.keys()]
    pairs = [(b, r) for b, r in pairs if min(b, r) >= MIN_BLOCKS]
    if not pairs:
        return None
    changed = [(b, r) for b, r in pairs if abs(math.log(b / r)) > CHANGED]
    if len(changed) < MIN_CHANGED:
        return 1.0
    return statistics.median(b / r for b, r in changed)


def _kinds(group, model: str, fresh: AbstractSet[int] = frozenset()) -> None:
    """`fresh`: the ids of the forwards whose KV cache was empty (recorded shapes): prompts."""
    known = [s.tokens_per_seq for s in group[1:] if s.tokens_per_seq is not None]
    draft = model == "draft"
    replayed = bool(group[1:]) and all(s.replay for s in group[1:])
    for i, step in enumerate(group):
        tokens = step.tokens_per_seq
        # the prompt: more tokens than any later forward, or the one eager forward before replays
        # (engines capture the decode's shape, never the prompt's)
        first_prompt = i == 0 and (
            (tokens is not None and (not known or tokens > max(known)))
            or (replayed and not step.replay)
        )
        if first_prompt or id(step) in fresh or (tokens is not None and tokens > MAX_VERIFY_TOKENS):
            step.kind, step.label = "prefill", "draft prefill" if draft else "prefill"
        elif draft:
            step.kind, step.label = "draft", "draft"
        elif tokens is None or tokens <= 1.0 or not _speculative(group):
            step.kind, step.label = "decode", "decode"
        else:
            step.kind, step.label = "verify", "verify"


def _speculative(group) -> bool:
    """A target whose forwards after the prefill process more than one token: each one checks drafts."""
    return any(s.model == "target" and (s.tokens_per_seq or 0) > 1.0 for s in group[1:])


def _kept(tl: Timeline, target) -> None:
    """Tokens each target forward kept (see the module docstring)."""
    before = [_cache_before(tl, s) for s in target]
    grew = [b - a for a, b in zip(before, before[1:]) if a is not None and b is not None]
    shapes_ok = len(grew) == len(target) - 1 and grew and all(g >= 1 for g in grew)
    for i, step in enumerate(target):
        if step.kind == "prefill":
            step.kept = 1.0
        elif shapes_ok:
            later = grew[i] if i < len(grew) else statistics.fmean(grew[1:] or grew)
            step.kept = float(later)
        elif step.kind == "decode":
            step.kept = 1.0
        else:
            step.kept = None


def _cache_before(tl: Timeline, step) -> int | None:
    """The KV cache the step started from: its first attention call's key minus query tokens."""
    times = [ts for ts, _, _ in tl.attention]
    at = bisect.bisect_left(times, step.t0)
    if at < len(times) and times[at] <= step.t1:
        _, query, key = tl.attention[at]
        return key - query
    return None


def blocks_by_name(kernels, launches, replayed: bool = False) -> dict[str, float]:
    """Per kernel name, the median blocks its launches asked for: the eager ones, or for a replayed
    forward the ones its graph launch issued (the glue around a replay is not the forward)."""
    seen: dict[str, list[int]] = defaultdict(list)
    for k in kernels:
        launch = launches.get(k.corr) if k.corr is not None else None
        from_graph = bool(launch and launch.kind == "graph")
        if k.blocks and k.category == "kernel" and from_graph == replayed:
            seen[k.name].append(k.blocks)
    return {name: statistics.median(values) for name, values in seen.items()}
