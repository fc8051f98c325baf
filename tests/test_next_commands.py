"""Every `next:` command that diagnose prints runs as printed (issue 31), pasted from its text output.

Each shipped input (the engine traces of examples/traces, with and without the recorded sweep; the
profiler traces of tests/fixtures/profiles, the directory `run-engine --profile DIR` writes; the
server logs) is diagnosed once and rendered as the CLI prints it, at 80 and at 100 columns. The
`next:` blocks are read back from that text as a user would copy them: every command on one line
of its own at both widths (a wrapped command would run as two), the same commands at both widths.

Each ncclprobe command is then run through the real CLI in a fresh directory that holds the outputs
the README's commands leave behind, step by step (`A && B`: B after A, with A's output in place, as
the shell would have it; `env -u VAR` dropped). Fast commands run whole (diagnose, knobs, topo
--from, nccl-log, import, recommend, export); an engine run, a sweep or a training is stopped where
its real work starts (`Reached`: runner.run_engine, session.run_job, train_job.train_and_save), after
its option parsing, validation, refusal of existing outputs and missing inputs. The device check is
skipped for commands suggested from GPU evidence: this machine lacks the GPU, not the command its
validity. None may exit 2. A server's directory that a recipe's earlier (non-ncclprobe) steps fill
(`/tmp/sglang-profile`) is a directory here holding that engine's shipped trace.
"""

from __future__ import annotations

import functools
import json
import shlex
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose import diagnose
from ncclprobe.diagnose.render import text as render_text
from ncclprobe.evidence.bundle import load_evidence
from ncclprobe.evidence.run.profile_dir import expand

# the shipped traces this module diagnoses are parsed once per session (conftest.py)
pytestmark = pytest.mark.usefixtures("shared_timelines")

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "examples" / "traces"
SWEEP = TRACES / "collective-bound.sweep.jsonl"
PROFILES = ROOT / "tests" / "fixtures" / "profiles"
LOGS = ROOT / "tests" / "fixtures" / "server_logs"
LEFT_BY_THE_README = (
    "sweep.jsonl",
    "trace.json",
    "trace-repeats.json",
    "trace-tuned.json",
    "ev.jsonl",
)
# what a server's recipe points `diagnose --profile` at, and the shipped trace of that engine
RECIPE_DIRS = {
    "/tmp/sglang-profile": PROFILES / "sglang_qwen3-8b_decode_bs32_mi300x_tracelens.json.gz",
    "/tmp/vllm-profile": PROFILES / "vllm_decode_full_cudagraph_bs32_mi300x_tracelens.json.gz",
    "/tmp/profile": PROFILES / "ddp_training_2rank_nccl_metadata_hta.json.gz",
}
PROGRAMS = (
    "ncclprobe",
    "env",
    "curl",
    "vllm",
    "SGLANG_TORCH_PROFILER_DIR=",
    "nvidia-smi",
    "python",
)


def _profile_dir(tmp: Path) -> Path:
    """The directory `run-engine --profile DIR --graphs decode` writes, from the H200 recordings."""
    directory = tmp / "profiles"
    directory.mkdir(exist_ok=True)
    h200 = PROFILES / "h200"
    for mode, name in (
        ("speculative", "engine_small_graphs_decode_speculative_trimmed"),
        ("baseline", "engine_small_graphs_decode_baseline"),
    ):
        shutil.copy(h200 / f"{name}.json.gz", directory / f"untuned-{mode}-rank0.trace.json.gz")
    return directory


def _inputs() -> list[tuple[str, dict]]:
    """(id, load_evidence arguments) of every shipped input; HF generate() traces: the llama8l
    shape of each method, recorded with shapes (the other shapes and the shape-less recordings
    print the same steps: four times the suite's time for no other command)."""
    cases = []
    for trace in sorted(TRACES.glob("*.json")):
        if json.loads(trace.read_text()).get("kind") != "engine-trace":
            continue  # proto-ll.json: the recommendation file tuned.json used
        cases.append((trace.name, {"trace": str(trace)}))
        cases.append((f"{trace.name}+sweep", {"trace": str(trace), "sweep": str(SWEEP)}))
    for profile in sorted(PROFILES.glob("*.json.gz")) + sorted(
        (PROFILES / "hf").glob("hf_llama8l_*_shapes.json.gz")
    ):
        cases.append((profile.name, {"profiles": [str(profile)]}))
    h200 = sorted((PROFILES / "h200").glob("*.json.gz"))
    for profile in h200:
        cases.append((profile.name, {"profiles": [str(profile)]}))
    for graphs in ("all", "decode"):
        spec = next(p for p in h200 if f"graphs_{graphs}_speculative" in p.name)
        base = next(p for p in h200 if f"graphs_{graphs}_baseline" in p.name)
        cases.append(
            (
                f"h200 graphs {graphs} pair",
                {"profiles": [str(spec)], "baseline_profiles": [str(base)]},
            )
        )
    for scenario in sorted(
        {p.name.rsplit("_rank", 1)[0] for p in (PROFILES / "ranks").glob("*_rank*.json.gz")}
    ):
        ranks = sorted(str(p) for p in (PROFILES / "ranks").glob(f"{scenario}_rank*.json.gz"))
        cases.append((scenario, {"profiles": ranks}))
    cases.append(("run-engine --profile DIR", {"profile_dir": True}))
    for log in sorted(LOGS.glob("*.log")):
        cases.append((log.name, {"server_logs": [str(log)]}))
    cases.append(
        (
            "sglang eagle3 + baseline log",
            {
                "server_logs": [str(LOGS / "sglang_eagle3_cuda_graph_true_issue11948.log")],
                "baseline_server_logs": [str(LOGS / "sglang_plain_decode_issue6949.log")],
            },
        )
    )
    return cases


INPUTS = _inputs()


@functools.cache
def _diagnosed(case: str, tmp: Path):
    """The evidence and diagnosis of an input, made in a directory that holds what the README's
    commands leave behind (a suggested output is numbered past them), as each command then runs in."""
    import os

    for name in LEFT_BY_THE_README:
        (tmp / name).write_text("{}\n")
    here = os.getcwd()
    os.chdir(tmp)
    try:
        return _diagnose(case, tmp)
    finally:
        os.chdir(here)


def _diagnose(case: str, tmp: Path):
    kwargs = dict(dict(INPUTS)[case])
    if kwargs.pop("profile_dir", False):
        profiles, baselines = expand([str(_profile_dir(tmp))], [])
        kwargs = {"profiles": profiles, "baseline_profiles": baselines}
    trace = kwargs.pop("trace", None)
    ev = load_evidence(trace, **kwargs)
    return ev, diagnose(ev)


def _blocks(text: str) -> list[list[str]]:
    """The `next:` blocks of diagnose's text: the line with `next: ` and the lines under it."""
    blocks, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("next: "):
            continue
        column = line.index("next: ") + len("next: ")
        block = [line[column:]]
        for below in lines[i + 1 :]:
            if len(below) - len(below.lstrip()) != column:
                break
            block.append(below[column:])
        blocks.append(block)
    return blocks


def _commands(text: str) -> list[str]:
    """Every command line of every `next:` block, each checked to be a whole command."""
    commands = []
    for block in _blocks(text):
        for line in block:
            if line.startswith("# "):
                continue  # a remark: prose, which may wrap into further `# ` lines
            code = line.split("  # ", 1)[0]
            assert code.startswith(PROGRAMS), f"a command cut by the width? {line!r} in {block}"
            shlex.split(code)  # balanced quotes: nothing of it is on another line
            commands.append(code)
    return commands


def _printed(case: str, tmp: Path, monkeypatch) -> list[str]:
    ev, result = _diagnosed(case, tmp)
    per_width = []
    for columns in (80, 100):
        per_width.append(_commands(render_text(result, columns)))
    assert per_width[0] == per_width[1], "the same commands at 80 and 100 columns"
    return per_width[0]


class Reached(BaseException):
    """The command got past its validation to its real work (not an Exception: no handler eats it)."""


def _stop(*args, **kwargs):
    raise Reached


def _steps(command: str) -> list[list[str]]:
    """The ncclprobe invocations of a command line: `&&` chains split, `env -u VAR` dropped."""
    steps = []
    for part in command.split(" && "):
        words = shlex.split(part)
        while words[:2] and words[0] == "env" and words[1] == "-u":
            words = words[3:]
        if words and words[0] == "ncclprobe":
            steps.append(words[1:])
    return steps


def _draft_header(path: str) -> None:
    """What the stopped train-draft would have written, as far as the step after it reads before its
    own stop: a safetensors file with train-draft's metadata keys and no tensors."""
    header = json.dumps({"__metadata__": {"training": "{}", "target": "null"}}).encode()
    Path(path).write_bytes(struct.pack("<Q", len(header)) + header)


def _run(command: str, workdir: Path, gpu_evidence: bool) -> None:
    made = []
    for args in _steps(command):
        for directory, trace in RECIPE_DIRS.items():  # a recipe's server wrote it
            if directory in args:
                local = workdir / Path(directory).name
                local.mkdir(exist_ok=True)
                shutil.copy(trace, local / trace.name)
                args = [str(local) if a == directory else a for a in args]
        try:
            result = CliRunner().invoke(cli, args, catch_exceptions=False)
        except Reached:
            if args[0] == "train-draft":
                made.append(args[args.index("--output") + 1])
                _draft_header(made[-1])
            continue
        assert result.exit_code != 2, (
            f"{command!r} exits 2 (gpu evidence {gpu_evidence}): {result.output}"
        )


@pytest.fixture
def stopped(monkeypatch):
    from ncclprobe.engine import runner, train_job
    from ncclprobe.sweep import session

    monkeypatch.setattr(runner, "run_engine", _stop)  # the engine's workers start here
    monkeypatch.setattr(train_job, "train_and_save", _stop)
    monkeypatch.setattr(session, "run_job", _stop)


@pytest.mark.parametrize("case", [name for name, _ in INPUTS])
def test_every_printed_next_command_runs_as_pasted(
    case, tmp_path_factory, tmp_path, monkeypatch, stopped
):
    shared = tmp_path_factory.getbasetemp() / "next-inputs"
    shared.mkdir(exist_ok=True)
    commands = _printed(case, shared, monkeypatch)
    if case.endswith(".json") and "h200" not in case:
        assert commands, "every CPU scenario suggests something"
    ev, _ = _diagnosed(case, shared)
    gpu_evidence = ev.kind != "engine-trace" or ev.config.get("device") == "cuda"
    if gpu_evidence:
        from ncclprobe.engine.spec import RunSpec

        monkeypatch.setattr(RunSpec, "check_device", lambda self: None)
    monkeypatch.chdir(tmp_path)
    for command in dict.fromkeys(commands):
        workdir = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        workdir.mkdir()
        monkeypatch.chdir(workdir)
        for name in LEFT_BY_THE_README:
            (workdir / name).write_text("{}\n")
        assert "<" not in command, f"a placeholder in {command!r}"
        _run(command, workdir, gpu_evidence)


def test_sizes_are_exact_and_a_given_sweep_is_not_suggested_again(monkeypatch):
    """The README's SmolLM2 run (--tp 3) suggested `--sizes 2.25K,9K,83.2K`, which the sweep refuses;
    with the sweep passed back as --sweep, the same sweep was suggested again."""
    from ncclprobe.diagnose.commands import sizes_arg, sweep_next
    from ncclprobe.evidence.bundle import Evidence
    from ncclprobe.sizes import parse_sizes

    assert sizes_arg([2304, 9216, 85248]) == "2304,9K,85248"
    assert parse_sizes(sizes_arg([2304, 9216, 85248])) == [2304, 9216, 85248]
    trace = json.loads((TRACES / "collective-bound.json").read_text())
    sweep = [json.loads(line) for line in SWEEP.read_text().splitlines()]
    results = [r for r in sweep if r.get("record") == "result"]
    bare = Evidence.from_trace(trace)
    given = Evidence.from_trace(trace, sweep=results)
    assert "--proto default --algo default" in sweep_next(
        bare, [256, 1024, 4096]
    )  # gloo: one config
    assert sweep_next(given, [256, 1024, 4096]) == ""  # the sweep holds every size
    assert "--sizes 64K " in sweep_next(given, [256, 65536])  # only what it lacks
    assert sweep_next(given, [256, 8192]) == ""  # 2x from 4K: the matching limit, inclusive
    assert "--sizes 8193 " in sweep_next(given, [256, 8193])  # beyond it
    result = diagnose(given)
    bound = next(f for f in result.findings if f.rule == "collective-bound")
    assert bound.next_command == ""


def test_train_draft_step_carries_the_runs_options_and_is_sized_to_the_device():
    from ncclprobe.diagnose.commands import draft_command, draft_note, engine_command

    cpu_checkpoint = {
        "checkpoint": "model.gguf",
        "chat": True,
        "prompt_options": ["--chat", "--prompt", "What is the capital of France?"],
        "device": "cpu",
        "tp": 3,
    }
    train = draft_command(cpu_checkpoint, "d.st", "--gen-len", "61")
    assert train.startswith(
        "ncclprobe train-draft --checkpoint model.gguf --chat --sequences 16 --steps 30"
    )
    assert "--gen-len 61" in train and "--gen-len 24" not in train  # the rule's positions win
    assert "5 min" in draft_note(cpu_checkpoint)
    run = engine_command({**cpu_checkpoint, "draft": "d.st"}, train_missing_draft=False)
    assert "--chat --prompt 'What is the capital of France?' --trace" in run
    gpu_checkpoint = {**cpu_checkpoint, "device": "cuda"}
    assert "--sequences" not in draft_command(gpu_checkpoint, "d.st")
    assert "about a minute on one H200" in draft_note(gpu_checkpoint)
    assert draft_command({"preset": "tiny", "device": "cpu"}, "d.st") == (
        "ncclprobe train-draft --preset tiny --output d.st"
    )
    assert "40 s" in draft_note({"preset": "tiny", "device": "cpu"})


def test_a_directory_of_run_engine_profiles_is_the_run_and_its_baseline(tmp_path):
    from ncclprobe.errors import UsageProblem

    directory = _profile_dir(tmp_path)
    profiles, baselines = expand([str(directory)], [])
    assert [Path(p).name for p in profiles] == ["untuned-speculative-rank0.trace.json.gz"]
    assert [Path(p).name for p in baselines] == ["untuned-baseline-rank0.trace.json.gz"]
    given = expand([str(directory)], ["other.json.gz"])
    assert given[1] == ["other.json.gz"]  # a baseline given is kept
    shutil.copy(
        directory / "untuned-speculative-rank0.trace.json.gz",
        directory / "tuned-speculative-rank0.trace.json.gz",
    )
    with pytest.raises(UsageProblem, match="--profile .*tuned-speculative-rank0"):
        expand([str(directory)], [])
    other = tmp_path / "sglang"
    other.mkdir()
    for rank in (0, 1):
        shutil.copy(
            RECIPE_DIRS["/tmp/sglang-profile"], other / f"1700000000-TP-{rank}.trace.json.gz"
        )
    (other / "notes.txt").write_text("not a trace")
    assert [Path(p).name for p in expand([str(other)], [])[0]] == [
        "1700000000-TP-0.trace.json.gz",
        "1700000000-TP-1.trace.json.gz",
    ]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageProblem, match="holds no .json or .json.gz trace"):
        expand([str(tmp_path / "empty")], [])


def test_run_engine_prints_the_diagnose_command_of_the_profiles_it_wrote():
    """`run-engine --profile DIR` wrote a directory that `diagnose --profile DIR` refused; now it
    prints the command, and with --tuned (two labels there) the tuned run's files by name."""
    from ncclprobe.evidence.run.profile_dir import next_command

    one = ["p/untuned-baseline-rank0.trace.json.gz", "p/untuned-speculative-rank0.trace.json.gz"]
    assert next_command(one, "p") == "ncclprobe diagnose --profile p"
    both = one + ["p/tuned-baseline-rank0.trace.json.gz", "p/tuned-speculative-rank0.trace.json.gz"]
    assert next_command(both, "p") == (
        "ncclprobe diagnose --baseline-profile p/tuned-baseline-rank0.trace.json.gz "
        "--profile p/tuned-speculative-rank0.trace.json.gz"
    )
