"""Every `next:` command that diagnose suggests for the CPU scenario traces runs as printed.

Each recorded CPU trace of examples/traces is diagnosed (with and without the recorded sweep) in a
fresh directory that already holds the outputs the README's commands leave behind, as a user's
working directory would. Every command is then run through the real CLI, step by step (`A && B`:
B after A, with A's output in place, as the shell would have it), up to the point where the command
starts its real work: there the test stops it (`Reached`), because the work itself (an engine
run, a sweep, training) takes minutes on this machine. Everything before that point is real:
option parsing, validation, refusal of existing outputs, missing inputs. None may exit 2.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclprobe.cli import cli
from ncclprobe.diagnose.rank import diagnose
from ncclprobe.evidence.bundle import load_evidence

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
SWEEP = TRACES / "collective-bound.sweep.jsonl"
CPU_TRACES = sorted(
    p.name
    for p in TRACES.glob("*.json")
    if json.loads(p.read_text()).get("config", {}).get("device") == "cpu"
)
LEFT_BY_THE_README = (
    "sweep.jsonl",
    "trace.json",
    "trace-repeats.json",
    "trace-tuned.json",
    "ev.jsonl",
)


class Reached(BaseException):
    """The command got past its validation to its real work (not an Exception: no handler eats it)."""


def _stop(*args, **kwargs):
    raise Reached


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in LEFT_BY_THE_README:
        (tmp_path / name).write_text("{}\n")
    from ncclprobe.engine import runner, train_job
    from ncclprobe.sweep import session

    monkeypatch.setattr(runner, "run_engine", _stop)  # the engine's workers start here
    monkeypatch.setattr(train_job, "train_and_save", _stop)
    monkeypatch.setattr(session, "run_job", _stop)
    return tmp_path


def _suggestions(trace: str, sweep: Path | None) -> list[str]:
    result = diagnose(load_evidence(TRACES / trace, sweep=sweep))
    return sorted({o.next_command for o in result.findings + result.not_checked if o.next_command})


def _steps(command: str) -> list[list[str]]:
    """The ncclprobe invocations of a suggestion: the comment dropped, `&&` chains split, `env -u VAR`
    (run the command without VAR) applied by the test's caller."""
    code = command.split("  # ", 1)[0]
    steps = []
    for part in code.split(" && "):
        words = shlex.split(part)
        while words[:2] and words[0] == "env" and words[1] == "-u":
            words = words[3:]
        assert words[0] == "ncclprobe", f"not an ncclprobe command: {part!r} in {command!r}"
        steps.append(words[1:])
    return steps


def _untrained_draft(args: list[str], path: str) -> None:
    """A draft file in train-draft's format for the step's preset, untrained (training is the work
    the test skips)."""
    import torch

    from ncclprobe.engine.build import build_draft, build_target
    from ncclprobe.engine.config import preset
    from ncclprobe.engine.draft import save_draft

    target = build_target(
        preset(args[args.index("--preset") + 1]), seed=0, device="cpu", dtype=torch.float32
    )
    save_draft(build_draft(target, seed=0), path)


def _output_of(args: list[str]) -> str | None:
    for flag in ("--out", "--output", "--trace"):
        if flag in args:
            return args[args.index(flag) + 1]
    return None


@pytest.mark.parametrize("trace", CPU_TRACES)
@pytest.mark.parametrize("with_sweep", [False, True])
def test_every_suggested_command_runs_as_printed(workdir, trace, with_sweep):
    commands = _suggestions(trace, SWEEP if with_sweep else None)
    assert commands, "every CPU scenario suggests something"
    before = set(workdir.iterdir())
    for command in commands:  # each one from the directory as diagnose saw it
        for made in set(workdir.iterdir()) - before:
            made.unlink()
        assert "<" not in command.split("  # ", 1)[0], f"a placeholder in {command!r}"
        for args in _steps(command):
            try:
                result = CliRunner().invoke(cli, args, catch_exceptions=False)
            except Reached:
                output = _output_of(args)
                if output and args[0] == "train-draft":
                    _untrained_draft(args, output)  # what the step makes, for the step after it
                continue
            assert result.exit_code != 2, f"{command!r} exits 2: {result.output.strip()}"
