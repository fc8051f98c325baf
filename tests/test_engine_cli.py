"""`run-engine` and `train-draft` through the CLI: JSON output and trace contents, refusals."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli


def _run(args, env=None):
    """A real `python -m ncclprobe` process: exit codes and streams exactly as a user sees them."""
    return subprocess.run(
        [sys.executable, "-m", "ncclprobe", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _refused(args):
    """A refusal is decided before any worker starts: in-process (the same main, exit code and
    streams) saves an interpreter and a torch import per case."""
    result = CliRunner().invoke(cli, args, prog_name="ncclprobe")
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def test_run_engine_json_and_trace_tp2(tmp_path):
    """tiny at TP=2 with a tensor-parallel draft: per mode tokens and histogram, collective counts
    exactly 2 per layer per decode step, plus 2 per draft step in the speculative mode."""
    trace = tmp_path / "trace.json"
    result = _run(
        [
            "-q",
            "run-engine",
            "--preset",
            "tiny",
            "--tp",
            "2",
            "--batch",
            "2",
            "-k",
            "3",
            "--new-tokens",
            "12",
            "--prompt-len",
            "8",
            "--draft-tp",
            "--env",
            "NCCL_ALGO=Ring",
            "--trace",
            str(trace),
            "--format",
            "json",
        ]
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # -q: nothing but errors
    doc = json.loads(result.stdout)
    assert json.loads(trace.read_text()) == doc
    assert doc["schema_version"] == 1 and doc["kind"] == "engine-trace"
    assert doc["checks"]["ranks_agree"] is True and doc["checks"]["greedy_match"] is True
    for check in doc["checks"]["settings"]:  # from the workers' own reports
        assert check["received_by_every_worker"] == {"NCCL_ALGO": True}
        assert check["read_by_nccl"] == {"NCCL_ALGO": None}  # gloo: no NCCL log to read
    runs = {r["mode"]: r for r in doc["runs"]}
    layers = doc["config"]["model"]["layers"]
    base, spec = runs["baseline"], runs["speculative"]
    assert (
        base["tokens"] == spec["tokens"]
        and len(base["tokens"]) == 2
        and len(base["tokens"][0]) == 12
    )
    assert base["collectives"]["per_token_count"] == 2 * layers  # prefill + 11 decode steps
    cycles = spec["acceptance"]["cycles"]
    assert (
        cycles <= sum(spec["acceptance"]["histogram"]) <= 2 * cycles
    )  # one entry per live sequence
    # prefill: target 2L + draft extend 2; each cycle: verify 2L + (k-1) draft steps + extend, 2 each
    expected = (2 * layers + 2) + cycles * (2 * layers + 2 * 3)
    assert sum(s["count"] for s in spec["collectives"]["sizes"]) == expected
    hidden_bytes = 64 * 4
    assert {s["size_bytes"] for s in base["collectives"]["sizes"]} == {
        2 * 8 * hidden_bytes,
        2 * hidden_bytes,
    }
    assert {s["phase"] for s in spec["collectives"]["sizes"]} == {
        "prefill",
        "draft",
        "verify",
        "draft_extend",
    }
    for run in doc["runs"]:
        assert run["settings"] == {"NCCL_ALGO": "Ring"}
        assert sorted(w["rank"] for w in run["workers"]) == [0, 1]
        assert all(
            w["env_at_comm_init"].get("NCCL_ALGO") == "Ring" for w in run["workers"]
        )  # their own report
        assert set(run["phases"]) >= {"prefill", "host"}
        for phase in run["phases"].values():
            assert phase["count"] >= 1 and phase["total_ms"] >= 0 and phase["graphed"] is False
        # host = wall minus the timed phases, so all phases together account for the wall time
        assert sum(p["total_ms"] for p in run["phases"].values()) == pytest.approx(
            1000 * run["wall_s"], rel=1e-6
        )
        assert (
            0.0 < run["collective_share"] <= 1.0 and run["graph_coverage"] is None
        )  # measured; no graphs on CPU
    assert (
        spec["phases"]["host"]["count"] == cycles
        and spec["phases"]["host"]["median_ms"] is not None
    )
    assert (
        base["phases"]["host"]["count"] == 11 and base["phases"]["host"]["median_ms"] is None
    )  # never syncs
    _check_loop_arithmetic(spec, batch=2, k=3, new_tokens=12)
    assert doc["config"]["repeats"] == 3  # a CPU preset: cheap, so repeated
    for run in (base, spec):
        repeats = run["repeats"]
        assert repeats["n"] == len(repeats["tokens_per_s"]) == 3
        assert run["tokens_per_s"] == pytest.approx(
            sorted(repeats["tokens_per_s"])[1]
        )  # the median run's
        assert repeats["spread"] == pytest.approx(
            (max(repeats["tokens_per_s"]) - min(repeats["tokens_per_s"]))
            / repeats["tokens_per_s_median"]
        )
    _check_capture_list_notes(doc)


def _check_capture_list_notes(doc):
    """The table says when the run's batch is outside the capture list (a GPU-only situation,
    so the notes are checked on this real CPU trace with its config set as a GPU run's would be)."""
    from ncclprobe.evidence.run.trace_table import table_notes

    config = doc["config"]
    outside = {**doc, "config": {**config, "graphs": "all", "capture_batches": [1, 4]}}
    inside = {**doc, "config": {**config, "graphs": "all", "capture_batches": [1, 2]}}
    assert "batch 2 is not in the capture list" in table_notes(outside)[1]
    assert "(batches 1,2)" in table_notes(inside)[0] and "not in the capture list" not in " ".join(
        table_notes(inside)
    )


def _check_loop_arithmetic(run, *, batch, k, new_tokens):
    """The loop record against the run's raw observations, not against its own formulas: the tokens
    emitted and the wall time, the acceptance histogram (cycles that accepted i drafts), and the
    timed phases, which lie inside the wall time."""
    loop, acceptance = run["loop"], run["acceptance"]
    emitted = sum(len(sequence) for sequence in run["tokens"])
    assert emitted == batch * new_tokens
    assert loop["measured_tokens_per_s"] == pytest.approx(emitted / run["wall_s"], rel=1e-6)
    histogram = acceptance["histogram"]
    assert len(histogram) == k + 1
    produced = sum(
        (accepted + 1) * cycles for accepted, cycles in enumerate(histogram)
    )  # tokens per live sequence
    assert acceptance["mean_length"] == pytest.approx(produced / sum(histogram))
    # every token past the prefill's came out of a cycle; the last cycle may overshoot by at most k
    assert batch * (new_tokens - 1) <= produced <= batch * (new_tokens - 1 + k)
    cycle_phases_ms = sum(
        run["phases"][p]["total_ms"] for p in ("draft", "verify", "accept", "draft_extend")
    )
    assert cycle_phases_ms < 1000 * run["wall_s"]  # the cycles ran inside the wall time
    assert loop["ideal_tokens_per_s"] * cycle_phases_ms / 1000 == pytest.approx(
        batch * produced / sum(histogram) * loop["cycles"], rel=1e-6
    )


def test_tuned_file_reaches_every_worker(tmp_path):
    """--tuned FILE: the tuned runs' workers report the recommended settings in their own
    environment at communicator creation; the untuned runs' workers do not have them."""
    recommendation = tmp_path / "rec.json"
    recommendation.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "kind": "recommendation",
                "env": {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"},
            }
        )
    )
    result = _run(
        [
            "-q",
            "run-engine",
            "--tp",
            "2",
            "--new-tokens",
            "6",
            "--prompt-len",
            "4",
            "--mode",
            "baseline",
            "--repeats",
            "1",
            "--tuned",
            str(recommendation),
            "--format",
            "json",
        ]
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    runs = {r["label"]: r for r in doc["runs"]}
    assert set(runs) == {"untuned", "tuned"}
    assert all("NCCL_PROTO" not in w["env_at_comm_init"] for w in runs["untuned"]["workers"])
    assert [w["env_at_comm_init"].get("NCCL_PROTO") for w in runs["tuned"]["workers"]] == [
        "LL",
        "LL",
    ]
    assert [w["env_at_comm_init"].get("NCCL_ALGO") for w in runs["tuned"]["workers"]] == [
        "Ring",
        "Ring",
    ]
    assert doc["checks"]["settings"][0]["received_by_every_worker"] == {
        "NCCL_PROTO": True,
        "NCCL_ALGO": True,
    }
    assert (
        doc["comparison"][0]["mode"] == "baseline"
        and runs["tuned"]["tokens"] == runs["untuned"]["tokens"]
    )
    from ncclprobe.evidence.run.trace_table import table_notes

    notes = " ".join(table_notes(doc))  # on gloo the tuned/untuned difference is noise, and says so
    assert "tuned settings: NCCL_ALGO=Ring, NCCL_PROTO=LL; gloo does not use NCCL settings" in notes
    assert "tuned vs untuned, baseline:" in notes
    nothing = {
        **doc,
        "tuning": {**doc["tuning"], "settings": {}},
    }  # what the quick sweep gives on gloo
    assert "the recommendation changes no setting" in " ".join(table_notes(nothing))


PLANTED = "Qz41592653PlntVk"  # a credential the workers inherit in an NCCL_* variable (issue 29)


def test_env_after_init_is_set_too_late_on_purpose_and_caught():
    """--env-after-init reproduces the classic mistake: every worker sets the variable only after
    its communicator exists. The workers' own snapshots show it absent at creation and present at
    exit, the settings check fails and the command exits 1. The workers' environments are written
    masked: a token inherited in an NCCL_* variable is never in the trace."""
    env = {**os.environ, "NCCL_NET_PLUGIN": f"https://hub.example/p?token={PLANTED}"}
    result = _run(
        [
            "-q",
            "run-engine",
            "--tp",
            "2",
            "--new-tokens",
            "6",
            "--prompt-len",
            "4",
            "--mode",
            "baseline",
            "--repeats",
            "1",
            "--env-after-init",
            "NCCL_PROTO=LL",
            "--format",
            "json",
        ],
        env=env,
    )
    assert result.returncode == 1, result.stderr
    assert PLANTED not in result.stdout + result.stderr
    doc = json.loads(result.stdout)
    workers = doc["runs"][0]["workers"]
    assert [w["env_at_comm_init"].get("NCCL_PROTO") for w in workers] == [None, None]
    assert [w["env_at_exit"].get("NCCL_PROTO") for w in workers] == ["LL", "LL"]
    assert [w["env_at_comm_init"]["NCCL_NET_PLUGIN"] for w in workers] == [
        "https://hub.example/p?token=<masked>"
    ] * 2  # read, and written masked
    assert doc["runs"][0]["settings"] == {"NCCL_PROTO": "LL"} and doc["runs"][0][
        "env_after_init"
    ] == {"NCCL_PROTO": "LL"}
    assert doc["checks"]["settings"][0]["received_by_every_worker"] == {"NCCL_PROTO": False}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--graphs", "decode"], "needs a CUDA GPU"),
        (["--tp", "0"], "tp must be at least 1"),
        (["--draft", "/nonexistent/draft.safetensors"], "does not exist"),
        (["--env", "NOEQUALS"], "NAME=VALUE"),
        (["--env-after-init", "NOEQUALS"], "--env-after-init expects NAME=VALUE"),
        (["--tuned", "/nonexistent/rec.json"], "cannot read recommendation file"),
        (["--tuned"], "issues no collectives"),
        (["--capture-batches", "1,x", "--graphs", "all"], "comma-separated batch sizes"),
        (["--capture-batches", "1,2"], "needs --graphs decode or --graphs all"),
        (["--capture-batches", "0,2", "--graphs", "all"], "at least 1"),
        (["--compile"], "--compile compiles the steps that CUDA graphs capture"),
    ],
)
def test_run_engine_refuses_bad_options(args, message):
    result = _refused(["run-engine", "--device", "cpu", *args])
    assert result.returncode == 2
    assert result.stdout == ""
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_inputs_found_by_the_workers_are_one_line_usage_errors(tmp_path):
    """Some inputs are only checked where the model is built, inside the workers: they must still
    end as one line and exit 2, not as a rank's traceback and 'workers crashed' (exit 1)."""
    not_safetensors = tmp_path / "draft.safetensors"
    not_safetensors.write_text("{not a draft")
    cases = (
        (["--draft", str(not_safetensors)], "is not a readable safetensors file"),
        # found by the parent now (engine.tp.check_tp_shape), before any worker starts
        (["--tp", "3", "--mode", "baseline"], "use --tp 1 or 2"),
    )
    with ThreadPoolExecutor(max_workers=2) as pool:  # independent: side by side
        results = pool.map(
            lambda args: _run(["run-engine", "--device", "cpu", "--new-tokens", "4", *args]),
            [args for args, _ in cases],
        )
    for (_, message), result in zip(cases, results):
        assert result.returncode == 2, result.stderr
        assert result.stdout == ""
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, (
            result.stderr
        )


def test_trace_is_never_overwritten(tmp_path):
    existing = tmp_path / "t.json"
    existing.write_text("{}")
    result = _refused(["run-engine", "--trace", str(existing)])
    assert result.returncode == 2 and "already exists" in result.stderr
    assert existing.read_text() == "{}"


def test_help_has_examples():
    for command in ("run-engine", "train-draft"):
        result = CliRunner().invoke(cli, [command, "--help"])
        assert (
            result.exit_code == 0
            and result.output.startswith("Usage:")
            and "Examples:" in result.output
        )


def test_train_draft_saves_a_loadable_draft_and_reports_json(tmp_path):
    """A few steps through the CLI: JSON with schema_version on stdout only, a draft file that
    run-engine's loader reads, and the exit code saying whether acceptance rose."""
    out = tmp_path / "d.safetensors"
    result = _run(
        [
            "-q",
            "train-draft",
            "--preset",
            "tiny",
            "--steps",
            "5",
            "--sequences",
            "4",
            "--gen-len",
            "8",
            "--output",
            str(out),
            "--format",
            "json",
        ]
    )
    assert result.returncode in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1 and doc["kind"] == "draft-training" and doc["out"] == str(out)
    rose = doc["acceptance_length_after"] > doc["acceptance_length_before"]
    assert result.returncode == (0 if rose else 1)
    from ncclprobe.engine import safetensors_io
    from ncclprobe.engine.draft import draft_target

    tensors, _ = safetensors_io.load(out)
    assert "fc.weight" in tensors
    assert draft_target(out) == {
        "shape": {"hidden": 64, "layers": 4, "vocab": 256, "heads": 4, "kv_heads": 2},
        "preset": "tiny",
        "seed": 0,
    }
    # the same draft on the target of another seed: same shapes, other weights; warned, and diagnosed
    trace = tmp_path / "other-seed.json"
    other = _run(
        [
            "run-engine",
            "--preset",
            "tiny",
            "--seed",
            "1",
            "--draft",
            str(out),
            "--prompt-len",
            "4",
            "--new-tokens",
            "4",
            "--mode",
            "speculative",
            "--repeats",
            "1",
            "--trace",
            str(trace),
        ]
    )
    assert other.returncode == 0, other.stderr
    assert "was trained for another target: seed 0 (now 1)" in other.stderr
    from ncclprobe.diagnose import diagnose
    from ncclprobe.evidence.bundle import load_evidence

    [finding] = [f for f in diagnose(load_evidence(trace)).findings if f.rule == "draft-target"]
    assert (
        "seed 0 (now 1)" in finding.title
        and "train-draft --preset tiny --seed 1" in finding.next_command
    )


def test_a_run_beyond_the_drafts_trained_positions_is_warned_about(tmp_path):
    """train-draft records the positions it trained on; a longer run says so on stderr, in the
    table notes and in the trace's `warnings`, and still runs."""
    import torch

    from ncclprobe.engine.build import build_draft, build_target
    from ncclprobe.engine.config import preset
    from ncclprobe.engine.draft import save_draft, trained_positions

    path = tmp_path / "d.safetensors"
    save_draft(
        build_draft(
            build_target(preset("tiny"), seed=0, device="cpu", dtype=torch.float32), seed=0
        ),
        path,
        {"training": {"trained_positions": 16}},
    )
    assert trained_positions(path) == 16
    args = [
        "run-engine",
        "--preset",
        "tiny",
        "--draft",
        str(path),
        "--prompt-len",
        "8",
        "--mode",
        "speculative",
        "--repeats",
        "1",
    ]
    # one rank each, so side by side they cost the longer run, not the sum
    with ThreadPoolExecutor(max_workers=2) as pool:
        inside, beyond = pool.map(
            _run, ([*args, "--new-tokens", "8"], [*args, "--new-tokens", "12", "--format", "json"])
        )
    assert inside.returncode == 0 and "trained on positions" not in inside.stderr + inside.stdout
    assert beyond.returncode == 0, beyond.stderr
    assert "trained on positions below 16, this run reaches 20" in beyond.stderr
    warnings = json.loads(beyond.stdout)["warnings"]
    assert (
        len(warnings) == 1 and "trained on positions below 16, this run reaches 20" in warnings[0]
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--output", "/nonexistent-dir/d.safetensors"],
            "directory /nonexistent-dir does not exist",
        ),
        (
            ["--output", "/nonexistent-dir/d.safetensors", "--steps", "0"],
            "steps must be at least 1",
        ),
        (  # one token is the prefill's: no speculative cycle, no acceptance to compare
            ["--output", "/nonexistent-dir/d.safetensors", "--gen-len", "1"],
            "gen_len must be at least 2",
        ),
    ],
)
def test_train_draft_refuses_bad_options_before_training(args, message):
    result = _refused(["train-draft", "--preset", "tiny", *args])
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("dtype,exit_code", [("float32", 1), ("bfloat16", 0)])
def test_a_greedy_mismatch_fails_the_exit_code_in_float32_only(monkeypatch, dtype, exit_code):
    """The recorded healthy trace with one speculative token changed, as a broken verify step would
    produce it, through the command's own verdict: float32 must match token for token (exit 1 when
    not); bf16 may diverge at a near-tie (reported, exit 0)."""
    import copy
    from pathlib import Path

    from ncclprobe.engine import runner
    from ncclprobe.evidence.run import trace_checks

    recorded = json.loads(
        (Path(__file__).parent.parent / "examples/traces/healthy.json").read_text()
    )

    def broken(specs, **_kwargs):  # the engine's runs, as the workers would have reported them
        doc = copy.deepcopy(recorded)
        doc["config"]["dtype"] = dtype
        speculative = next(r for r in doc["runs"] if r["mode"] == "speculative")
        speculative["tokens"][0][-1] += 1
        speculative["loop"] = None  # recorded before the loop record had its per-phase inputs
        return trace_checks.finish(doc)

    monkeypatch.setattr(runner, "run_engine", broken)
    result = CliRunner().invoke(cli, ["-q", "run-engine", "--format", "json"])
    assert result.exit_code == exit_code, result.output
    assert json.loads(result.output)["checks"]["greedy_match"] is False


def test_sampling_end_to_end_at_tp2():
    """--temperature > 0 through the CLI at --tp 2: every rank draws the same tokens (the sampling
    generator is seeded alike on each, or the shards would decode different sequences), repeats of
    one seed sample the same run, the output is a sample, not the greedy continuation of the same
    prompts, and greedy equality is not judged."""
    import torch

    from ncclprobe.engine.build import build_target, random_prompts
    from ncclprobe.engine.config import preset
    from ncclprobe.engine.generate import Engine

    result = _run(
        [
            "-q",
            "run-engine",
            "--tp",
            "2",
            "--temperature",
            "1.0",
            "--batch",
            "2",
            "--new-tokens",
            "10",
            "--prompt-len",
            "4",
            "--repeats",
            "2",
            "--format",
            "json",
        ]
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["checks"]["ranks_agree"] is True and doc["checks"]["greedy_match"] is None
    vocab = doc["config"]["model"]["vocab"]
    runs = {r["mode"]: r for r in doc["runs"]}
    for run in runs.values():
        assert [len(seq) for seq in run["tokens"]] == [10, 10]
        assert all(0 <= t < vocab for seq in run["tokens"] for t in seq)
        assert run["repeats"]["n"] == 2
    target = build_target(preset("tiny"), seed=0, device="cpu", dtype=torch.float32)
    target.setup_caches(2, 4 + 10 + 4)
    greedy = Engine(target, k=3, temperature=0.0, seed=0).baseline(
        random_prompts(vocab, 2, 4, 0, "cpu"), 10
    )
    assert runs["baseline"]["tokens"] != greedy.tokens
    assert runs["speculative"]["acceptance"]["cycles"] > 0
