"""Speculative-decoding configuration facts of SGLang and vLLM, each with its source.

- Which algorithm an EAGLE-3 draft needs, and which names run it without its hidden-state capture.
  An EAGLE-3 draft's `fc` projects three target layers' hidden states (3 x hidden) to one; SGLang's
  `EAGLE` (and its alias `NEXTN`) captures no auxiliary hidden states, so the draft gets one layer's
  (1 x hidden), the reference code's dimension check (`hidden_states.shape[-1] != embeds.shape[-1]`)
  is then false and `fc` is skipped: the drafts are garbage and every cycle keeps only the target's
  own token (acceptance 1.00), with no error or warning (sgl-project/sglang#21272). vLLM's docs say
  the same of its `method` (vllm-project/vllm#21737).
- How a draft checkpoint says it is EAGLE-3: an architecture name holding `Eagle3`
  (`LlamaForCausalLMEagle3` is SGLang's entry class and what SpecForge and ModelOpt export;
  `Eagle3DeepseekV3ForCausalLM` elsewhere), the test SGLang's fix applies.
- SGLang's draft tokens with top-k 1: "If topk=1, it is adjusted to num_steps + 1", and the three
  speculative flags are meant to be left all unset or all set (docs/advanced_features/
  speculative_decoding.md).
- The draft's own vocabulary (`draft_vocab_size`, mapped back through `d2t`) is a subset of the
  target's (SafeAILab/EAGLE eagle/traineagle3/cnets.py `scandata`: the N most common target tokens);
  its auxiliary layers (`eagle_config.eagle_aux_hidden_state_layer_ids`) are target layers, captured
  before layer id + 1 (SGLang `set_eagle3_layers_to_capture`), so each id is below the target's
  layer count; by default (2, L // 2, L - 3).
"""

from __future__ import annotations

from dataclasses import dataclass

EAGLE3_MARK = "Eagle3"  # in a draft's `architectures`: an EAGLE-3 draft


@dataclass(frozen=True)
class AlgorithmFact:
    engine: str
    eagle3: str  # the value that runs an EAGLE-3 draft as one
    without_capture: tuple[str, ...]  # values that run it without the hidden-state capture
    flag: str  # where the user sets it
    source: str


ALGORITHMS = {
    "sglang": AlgorithmFact(
        engine="sglang",
        eagle3="EAGLE3",
        without_capture=("EAGLE", "NEXTN"),
        flag="--speculative-algorithm",
        source="sgl-project/sglang#21272 (jhinpan, 2026-03-24: an EAGLE-3 draft under "
        "--speculative-algorithm EAGLE keeps accept_len at exactly 1.00, no error or warning; "
        "EAGLE captures no auxiliary hidden states, so the draft's fc is skipped); "
        "docs/advanced_features/speculative_decoding.md (NEXTN is an alias of EAGLE)",
    ),
    "vllm": AlgorithmFact(
        engine="vllm",
        eagle3="eagle3",
        without_capture=("eagle",),
        flag="--speculative-config '{\"method\": ...}'",
        source='vllm-project/vllm#21737 (docs: "When using EAGLE-3 based draft model, option '
        '\\"method\\" must be set to \\"eagle3\\"")',
    ),
}

TOPK1_SOURCE = (
    'SGLang docs/advanced_features/speculative_decoding.md: --speculative-num-draft-tokens "If '
    'topk=1, it is adjusted to num_steps + 1"; leave the three flags unset (auto) or set all three'
)
DRAFT_SOURCE = (
    "SafeAILab/EAGLE eagle/traineagle3/cnets.py (scandata: the draft vocabulary is the "
    "draft_vocab_size most common target tokens, d2t maps them back); SGLang "
    "set_eagle3_layers_to_capture (python/sglang/srt/models/llama.py: captured before layer id + 1)"
)
NOT_WORKING = 1.005  # tokens per cycle at or below: no draft token was ever kept


def is_eagle3(architectures) -> bool:
    return any(EAGLE3_MARK in str(a) for a in architectures or ())


def named_eagle3(path: str | None) -> bool:
    """A draft whose path or name says EAGLE-3 (`lightseekorg/kimi-k2.5-eagle3`): weaker than its
    config's architectures, which a name cannot prove."""
    return bool(path) and "eagle3" in (path or "").lower().replace("-", "").replace("_", "")
