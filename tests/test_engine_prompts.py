"""Prompts of different lengths in one batch (right padding), the prompts file formats and the
shipped prompt set; on `tiny` (random weights, token-id prompts), so nothing needs a tokenizer."""

import json

import pytest
import torch

from ncclprobe.engine.build import build_draft, build_target
from ncclprobe.engine.config import preset
from ncclprobe.engine.generate import Engine
from ncclprobe.engine.prompts import (
    SPLITS,
    Prompt,
    gather_prompts,
    read_prompts_file,
    shipped_prompts,
)
from ncclprobe.engine.spec import RunSpec
from ncclprobe.errors import UsageProblem


def test_prompts_of_different_lengths_decode_together_as_they_do_alone():
    """Right-padded rows (generate._last) give each prompt the tokens it gets alone, in the
    baseline and in speculative decoding (whose first draft slot sits after each own prompt)."""
    target = build_target(preset("tiny"), seed=0, device="cpu", dtype=torch.float32)
    draft = build_draft(target, seed=0)
    prompts = [[5, 9, 200, 17, 3, 44, 8], [71, 2, 90], [13, 13, 13, 13, 13]]
    padded = torch.zeros(3, 7, dtype=torch.long)
    for row, ids in enumerate(prompts):
        padded[row, : len(ids)] = torch.tensor(ids)
    lengths = torch.tensor([len(p) for p in prompts])
    target.setup_caches(3, 40)
    draft.setup_caches(3, 40)
    engine = Engine(target, draft, k=3)
    together = engine.baseline(padded, 12, lengths).tokens
    speculative = engine.speculative(padded, 12, lengths).tokens
    alone = [engine.baseline(torch.tensor([ids]), 12).tokens[0] for ids in prompts]
    assert together == alone == speculative
    assert (
        engine.baseline(padded, 12).tokens[1] != alone[1]
    )  # the padding does matter without lengths


def test_prompts_file_formats(tmp_path):
    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\n  second one  \n")
    assert read_prompts_file(text) == [Prompt(text="first prompt"), Prompt(text="  second one  ")]
    lines = tmp_path / "p.jsonl"
    lines.write_text(
        json.dumps({"text": "a\nb"})
        + "\n"
        + json.dumps("plain")
        + "\n"
        + json.dumps({"ids": [1, 2, 3]})
        + "\n"
    )
    assert read_prompts_file(lines) == [
        Prompt(text="a\nb"),
        Prompt(text="plain"),
        Prompt(ids=(1, 2, 3)),
    ]
    assert gather_prompts(None) == ()


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"ids": [1, -2]}\n', "p.jsonl:1: expected"),
        ('{"ids": [1, true]}\n', "p.jsonl:1: expected"),
        ("not json\n", "p.jsonl:1 is not JSON"),
        ('{"ids": NaN}\n', "p.jsonl:1: NaN is not a JSON number"),
        ("\n\n", "holds no prompt"),
        ("\x7fELF\x00\x01\x02" * 50, "binary file"),
    ],
)
def test_bad_prompts_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(UsageProblem, match=message):
        read_prompts_file(path)


def test_text_needs_a_tokenizer_and_ids_do_not(tmp_path):
    with pytest.raises(UsageProblem, match="need a checkpoint with a tokenizer"):
        gather_prompts(None, texts=["hello"])
    ids = tmp_path / "ids.jsonl"
    ids.write_text('{"ids": [4, 5, 6]}\n{"ids": [7, 8]}\n')
    assert gather_prompts(None, file=str(ids)) == ((4, 5, 6), (7, 8))


def test_run_spec_takes_prompts_in_batches():
    spec = RunSpec(prompts=((4, 5, 6), (7, 8), (1, 2), (3, 3)), batch=2)
    assert (spec.prompt_len, spec.groups(), spec.sequences()) == (3, 2, 4)
    with pytest.raises(UsageProblem, match="--batch 3 must divide the number of prompts"):
        RunSpec(prompts=((4, 5), (7, 8)), batch=3)
    with pytest.raises(UsageProblem, match="fewer than 2 tokens"):
        RunSpec(prompts=((4,),))
    with pytest.raises(UsageProblem, match="outside tiny's vocabulary of 256"):
        RunSpec(prompts=((4, 300),)).check_runnable()


def test_prompts_decode_batch_after_batch_in_one_record():
    """Four prompts at --batch 2: two batches one after the other, one record per mode with every
    prompt's tokens in order, the same as each prompt decoded alone; histogram and cycles summed."""
    from ncclprobe.engine.comm import Communicator
    from ncclprobe.engine.worker import run_job

    prompts = ((5, 9, 200, 17), (71, 2), (13, 13, 13), (8, 1))
    spec = RunSpec(
        prompts=prompts, batch=2, new_tokens=8, k=2, warmup_tokens=0, measure_share=False
    )
    records = {r["mode"]: r for r in run_job(spec, Communicator(rank=0, world_size=1), "cpu")}
    alone = [
        next(
            r["tokens"][0]
            for r in run_job(
                RunSpec(
                    prompts=(p,),
                    new_tokens=8,
                    k=2,
                    warmup_tokens=0,
                    measure_share=False,
                    modes=("baseline",),
                ),
                Communicator(rank=0, world_size=1),
                "cpu",
            )
        )
        for p in prompts
    ]
    assert records["baseline"]["tokens"] == records["speculative"]["tokens"] == alone
    speculative = records["speculative"]
    assert sum(speculative["histogram"]) >= speculative["cycles"] >= 2 * (8 - 1) // 3


def test_shipped_prompt_set_splits():
    train, held = shipped_prompts("train"), shipped_prompts("heldout")
    assert (len(train), len(held), SPLITS) == (64, 16, ("train", "heldout"))
    assert not {p.text for p in train} & {p.text for p in held}
    with pytest.raises(UsageProblem, match="choose train or heldout"):
        shipped_prompts("test")
