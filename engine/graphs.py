"""CUDA graphs for the engine's fixed-shape steps, with the collectives captured inside them.

`CapturedGraphs` captures every graph a run can replay when it is built (once per mode; the
repeats of a run share them). `GraphedSteps` stands in for `generate.Steps` in one timed run: a call
whose (kind, batch, tokens per sequence, feature flag) was captured copies its inputs into the
graph's static buffers and replays; anything else runs eagerly; it records which phases replayed
and adds the replayed collectives to that run's trace. What is captured, for each batch size of
the capture list (a run replays the graphs of its own batch size; a batch size outside the list
runs eagerly, and its graph coverage says so):
- `decode`: the target's 1-token step (the baseline decode). Verify and the draft stay eager:
  the seed case's "verify runs in extend mode without graphs", reproducible on purpose.
- `all`: additionally the target's k+1-token verify and the draft: for greedy runs the whole
  chain of k-1 draft steps as one graph and the whole draft extend (inputs, forward, pick) as
  another (`generate.greedy_chain`, `greedy_extend`: replayed step by step, the host's launches
  around a small draft cost more than its GPU time); for sampling runs the draft's 1-token step
  and its extend forward over k+1 slots.

Capture writes garbage into the KV caches at the dummy positions 0..T-1; harmless, because
prefill and every later step write a slot before any query at or after it attends to it (the
position-indexed design of kv_cache.py). Each graph gets its own memory pool, so one graph's
replay can never overwrite another graph's outputs.

With `compile` (a mode: default or max-autotune), each captured step is first compiled by
`torch.compile` (inductor, static shapes, no cudagraphs of its own) and the compiled code is what
gets captured: at batch 1 a decode step is hundreds of tiny elementwise kernels around the GEMMs,
and fusing them is the step's largest cost after the weights. The collectives stay plain calls
between the compiled pieces (comm.py).

All-reduces issued while capturing are recorded into the graph by ProcessGroupNCCL; the NCCL
settings in force at capture are the ones every replay uses. The communicator's listener sees
them once, at capture; each replay then adds the captured records to the collective trace.
"""

from __future__ import annotations

from collections import Counter

import torch

from ncclprobe.cudagraph import capture_graph
from ncclprobe.engine.comm import keep_out_of_compile
from ncclprobe.engine.generate import greedy_chain, greedy_extend
from ncclprobe.engine.instrument import CollectiveTrace, PhaseTimer
from ncclprobe.evidence.run.modes import GraphMode

WARMUP_CALLS = 2  # eager calls on a side stream before capture (cuBLAS handles, NCCL channels)


class CapturedStep:
    """One captured call: static inputs, static outputs, the graph, and its collectives."""

    def __init__(self, name: str, fn, example_inputs: tuple, comm, pool=None):
        self.name = name
        # the graph reads every tensor `fn` closed over by its address: keeping `fn` keeps them
        # alive (a freed one's memory is reused, and the replay reads garbage)
        self.fn = fn
        self.inputs = tuple(x.clone() for x in example_inputs)
        recorder = CollectiveTrace()
        recorder.capturing = name

        def captured():  # the warm-up calls are not recorded; the captured one is, once
            comm.listener = recorder.record
            return fn(*self.inputs)

        listener, comm.listener = comm.listener, None
        try:
            self.graph, self.outputs = capture_graph(
                captured,
                warmup=lambda: fn(*self.inputs),
                warmups=WARMUP_CALLS,
                pool=pool,
                synchronize=False,
            )
        finally:
            comm.listener = listener
        self.collectives: Counter = recorder.counts

    def __call__(self, *inputs):
        for static, value in zip(self.inputs, inputs):
            static.copy_(value)
        self.graph.replay()
        return self.outputs


class CapturedGraphs:
    """Every graph `mode` asks for, captured when built: at each batch size of `batches` (an int or
    a list, none above the caches' batch), after the caches exist and before the run. `greedy`: the
    run is greedy (temperature 0), so the draft's chain and extend are captured whole. `prompt_len`
    (mode `all`): the prefill too, target and draft, for prompts of that length (eager, it is a
    tenth of a short run: docs/LOG.md). `compile`: each step compiled first (`compile_for_capture`)."""

    def __init__(
        self,
        target,
        draft,
        comm,
        *,
        mode: str,
        batches=(),
        k: int = 1,
        speculative: bool = False,
        greedy: bool = True,
        prompt_len: int | None = None,
        compile: str = "",
    ):
        self.target_model, self.draft_model, self.comm, self.mode = (
            target,
            draft,
            comm,
            GraphMode(mode),
        )
        self.target_fn, self.draft_fn = target, draft
        if compile:
            self.target_fn, self.draft_fn = (
                compile_for_capture(target, compile),
                compile_for_capture(draft, compile),
            )
        self.captured: dict[tuple, CapturedStep] = {}
        self._capture(batches, k, speculative, greedy, prompt_len)

    @torch.inference_mode()
    def _capture(
        self, batches, k: int, speculative: bool, greedy: bool, prompt_len: int | None
    ) -> None:
        device = next(self.target_model.parameters()).device
        for batch in [batches] if isinstance(batches, int) else sorted(set(batches)):
            if self.mode == GraphMode.ALL and prompt_len:
                self._capture_prefill(batch, prompt_len, speculative, device)
            if not speculative:
                self._capture_target(batch, 1, False, device)
            elif self.mode == GraphMode.ALL:
                self._capture_target(batch, k + 1, True, device)
                if self.draft_model is not None and greedy:
                    self._capture_chain(batch, k, device)
                    self._capture_extend(batch, k, device)
                elif self.draft_model is not None:
                    self._capture_draft(batch, 1, False, device)
                    self._capture_draft(batch, k + 1, True, device)

    def _capture_prefill(self, batch, tokens, speculative, device):
        """The prompt's target step and, when speculative, the draft's step over the prompt: the
        same functions as verify and draft extend, at the prompt's length (a shape a later step
        shares keeps that step's graph)."""
        if ("target", batch, tokens, speculative) not in self.captured:
            self._capture_target(batch, tokens, speculative, device, name="prefill")
        if (
            speculative
            and self.draft_model is not None
            and ("draft", batch, tokens, True) not in self.captured
        ):
            self._capture_draft(batch, tokens, True, device, name="prefill")

    def _capture_target(self, batch, tokens, features, device, name=None):
        name = f"target_{name or ('verify' if features else 'decode')}_b{batch}_t{tokens}"
        inputs = (
            torch.zeros(batch, tokens, dtype=torch.long, device=device),
            _dummy_positions(batch, tokens, device),
        )
        self.captured[("target", batch, tokens, features)] = CapturedStep(
            name, lambda t, p: self.target_fn(t, p, features), inputs, self.comm
        )

    def _capture_draft(self, batch, tokens, fuse, device, name=None):
        cfg = self.draft_model.cfg
        width = 3 * cfg.target_hidden if fuse else cfg.hidden
        dtype = self.draft_model.fc.weight.dtype
        name = f"draft_{name or ('extend' if fuse else 'step')}_b{batch}_t{tokens}"
        inputs = (
            torch.zeros(batch, tokens, dtype=torch.long, device=device),
            torch.zeros(batch, tokens, width, dtype=dtype, device=device),
            _dummy_positions(batch, tokens, device),
        )
        self.captured[("draft", batch, tokens, fuse)] = CapturedStep(
            name, lambda t, h, p: self.draft_fn(t, h, p, fuse), inputs, self.comm
        )

    def _draft_ids(self, device):
        return self.draft_model.to_target(torch.arange(self.draft_model.cfg.vocab, device=device))

    def _capture_chain(self, batch, k, device):
        draft_ids, hidden = self._draft_ids(device), self.draft_model.cfg.hidden
        inputs = (
            torch.zeros(batch, dtype=torch.long, device=device),
            torch.zeros(batch, 1, hidden, dtype=self.draft_model.fc.weight.dtype, device=device),
            torch.zeros(batch, dtype=torch.long, device=device),
        )
        self.captured[("chain", batch, k)] = CapturedStep(
            f"draft_chain_b{batch}_k{k}",
            lambda d1, h, p: greedy_chain(self.draft_fn, draft_ids, k, d1, h, p),
            inputs,
            self.comm,
        )

    def _capture_extend(self, batch, k, device):
        draft_ids, width = self._draft_ids(device), 3 * self.draft_model.cfg.target_hidden
        long = dict(dtype=torch.long, device=device)
        inputs = (
            torch.zeros(batch, k, **long),
            torch.zeros(batch, **long),
            torch.zeros(batch, **long),
            torch.zeros(batch, k + 1, width, dtype=self.draft_model.fc.weight.dtype, device=device),
            torch.zeros(batch, **long),
        )
        self.captured[("extend", batch, k)] = CapturedStep(
            f"draft_extend_b{batch}_t{k + 1}",
            lambda *tensors: greedy_extend(self.draft_fn, draft_ids, *tensors),
            inputs,
            self.comm,
        )

    def graph_names(self) -> list[str]:
        return sorted(step.name for step in self.captured.values())


class GraphedSteps:
    """`generate.Steps` for one timed run over `graphs`: replays where a shape was captured, eager
    elsewhere. It notes the phases (from `timer`) that replayed a graph, and adds each replay's
    captured collectives to `trace`; both None for an untimed run (the warm-up)."""

    def __init__(
        self,
        graphs: CapturedGraphs,
        *,
        trace: CollectiveTrace | None = None,
        timer: PhaseTimer | None = None,
    ):
        self.graphs, self.trace, self.timer = graphs, trace, timer
        self.target_model, self.draft_model = graphs.target_model, graphs.draft_model
        self.captured = graphs.captured
        self.graphed_phases: set[str] = set()

    def chain(self, d1, hidden, pos, draft_ids, k):
        step = self.captured.get(("chain", d1.shape[0], k))
        if step is None:
            return greedy_chain(self.draft, draft_ids, k, d1, hidden, pos)
        return self._replay(step, d1, hidden, pos)

    def extend(self, drafts, accepted, nxt, features, pos, draft_ids):
        step = self.captured.get(("extend", *drafts.shape))
        if step is None:
            return greedy_extend(self.draft, draft_ids, drafts, accepted, nxt, features, pos)
        return self._replay(step, drafts, accepted, nxt, features, pos)

    def target(self, tokens, positions, features):
        step = self.captured.get(("target", *tokens.shape, features))
        if step is None:
            return self.target_model(tokens, positions, features)
        return self._replay(step, tokens, positions)

    def draft(self, tokens, hidden, positions, fuse):
        step = self.captured.get(("draft", *tokens.shape, fuse))
        if step is None:
            return self.draft_model(tokens, hidden, positions, fuse)
        return self._replay(step, tokens, hidden, positions)

    def _replay(self, step: CapturedStep, *inputs):
        phase = self.timer.current if self.timer else None
        if phase:
            self.graphed_phases.add(phase)
        if self.trace is not None:
            self.trace.replayed(step.collectives, phase)
        return step(*inputs)

    def graph_names(self) -> list[str]:
        return self.graphs.graph_names()


# our names -> torch.compile modes; CUDA graphs are ours (captured around the compiled code), so
# never inductor's: `max-autotune` benchmarks Triton GEMM templates against cuBLAS per shape
COMPILE_MODES = {"default": "default", "max-autotune": "max-autotune-no-cudagraphs"}


def compile_for_capture(model, mode: str = "default"):
    """`model`'s forward compiled for fixed shapes (one specialisation per captured shape, made
    during the warm-up calls before capture, never inside it).

    On Hopper and later GPUs the Triton kernels are launched with programmatic dependent launch
    (PDL): each may start while its predecessor drains and waits on the device for its inputs, so
    the gaps between a decode step's hundreds of small kernels shrink (docs/LOG.md)."""
    if model is None:
        return None
    keep_out_of_compile()
    # one specialisation per captured shape: past dynamo's default limit of 8 it would silently
    # run the remaining shapes uncompiled
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    options = dict(torch._inductor.list_mode_options(COMPILE_MODES.get(mode, mode)))
    device = next(model.parameters()).device
    options["triton.enable_pdl"] = (
        device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9
    )
    return torch.compile(model, dynamic=False, options=options)


def _dummy_positions(batch: int, tokens: int, device) -> torch.Tensor:
    return torch.arange(tokens, device=device).expand(batch, tokens).contiguous()
