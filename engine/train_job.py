"""train-draft from options to a saved draft: the prompts, the limits, the target, the training and
the verdict, as library calls (`ncclprobe train-draft` is a thin layer over them).

Everything that can be wrong is found before the target is built or any step runs: the output
path (the caller checks it first), the prompts and the positions training will touch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ncclprobe.verdict import Verdict

if TYPE_CHECKING:
    from ncclprobe.engine.train_spec import TrainSpec


def training_prompts(
    checkpoint: str | None, prompts_file: str | None, eval_file: str | None, chat: bool
):
    """(training prompt ids, held-out prompt ids, a sentence naming their source): the given
    files, else the shipped set when the checkpoint has a tokenizer, else random tokens."""
    from ncclprobe.engine.prompts import (
        SHIPPED,
        codec_for,
        encode_prompts,
        read_prompts_file,
        shipped_prompts,
    )

    codec = codec_for(checkpoint)
    if codec is None and not (prompts_file or eval_file or chat):
        return (), (), "random tokens (the target has no tokenizer)"
    if codec is None:
        codec_for(checkpoint, required=True)  # says why text cannot be used
    train = read_prompts_file(prompts_file) if prompts_file else shipped_prompts("train")
    held = read_prompts_file(eval_file) if eval_file else shipped_prompts("heldout")
    source = (
        f"{prompts_file}"
        if prompts_file
        else f"the shipped set's train split ({len(train)} prompts, {SHIPPED.name}, Apache-2.0)"
    ) + f"; acceptance on {eval_file or f'its {len(held)} held-out prompts'}"
    return encode_prompts(train, codec, chat), encode_prompts(held, codec, chat), source


def check_training_limits(preset_name: str, checkpoint: str | None, spec: TrainSpec) -> None:
    """The positions training touches (prompt + generated + the evaluation's last cycle) against the
    context the target serves; one line before any work."""
    from ncclprobe.engine.spec import RunSpec

    longest = max((len(p) for p in (*spec.prompts, *spec.eval_prompt_ids)), default=spec.prompt_len)
    RunSpec(
        preset=preset_name,
        checkpoint=checkpoint,
        prompt_len=max(2, longest),
        new_tokens=spec.gen_len,
        k=spec.eval_k,
        device="cpu" if checkpoint is None else "auto",
    ).check_limits()


def resolve_device(device: str) -> str:
    """auto -> cuda when torch sees a GPU, else cpu; cuda without one is a usage error."""
    from ncclprobe.errors import UsageProblem
    from ncclprobe.provenance import gpu_device_visible

    if not gpu_device_visible():
        if device == "cuda":
            raise UsageProblem("--device cuda was requested but this machine shows no GPU device")
        return "cpu"  # known without importing torch
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise UsageProblem("--device cuda was requested but torch sees no CUDA GPU")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def train_and_save(
    spec: TrainSpec,
    out,
    *,
    preset_name: str = "tiny",
    checkpoint: str | None = None,
    device: str = "cpu",
    replace: bool = False,
    progress=None,
    data_progress=None,
) -> dict:
    """Build the target (the seeded preset, or the checkpoint), train a draft for it and save it to
    `out` (an existing file only with `replace`); the training report."""
    import torch

    from ncclprobe.engine.build import build_draft, build_target
    from ncclprobe.engine.config import preset
    from ncclprobe.engine.draft import save_draft
    from ncclprobe.engine.gguf_loader import resolve_checkpoint
    from ncclprobe.engine.target_identity import target_identity
    from ncclprobe.engine.train_draft import train

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(spec.seed)
    if checkpoint:
        from ncclprobe.engine.hf_loader import load_checkpoint

        target = load_checkpoint(resolve_checkpoint(checkpoint), device=device, dtype=dtype)
    else:
        target = build_target(preset(preset_name), seed=spec.seed, device=device, dtype=dtype)
    draft = build_draft(target, seed=spec.seed, vocab=spec.draft_vocab or None)
    report = train(target, draft, spec, progress=progress, data_progress=data_progress)
    # the target the draft serves, so run-engine can warn before it serves another (engine/target_identity)
    identity = target_identity(
        target.cfg.summary(),
        preset=None if checkpoint else preset_name,
        seed=spec.seed,
        checkpoint=str(resolve_checkpoint(checkpoint)) if checkpoint else None,
    )
    save_draft(draft, out, {"training": report, "target": identity}, replace=replace)
    return report


def verdict(report: dict) -> Verdict:
    """FINDINGS when training did not raise the draft's acceptance length on the held-out prompts."""
    return Verdict.of(not report["acceptance_length_after"] > report["acceptance_length_before"])
