"""Each workflow, verdict, default and idiom has one home (issue 18 §2-§4), and docs/DESIGN.md's
layer table is the real import graph. A second copy, or a CLI that decides for itself, fails here
with its file and line.

Issue 38 §4 moved to behaviour every check whose defect a public call can see (a default that
diverges, a command that no longer parses). The source scans left here guard facts with no
behaviour: a second copy that agrees with the first today behaves exactly like the one home, so
only reading the source can tell them apart; each says so in its docstring."""

import ast
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(
    p
    for folder in ("ncclprobe", "engine", "probes", "examples")
    for p in (ROOT / folder).rglob("*.py")
)


def _grep(
    pattern: str,
    *,
    outside: tuple[str, ...] = (),
    within: tuple[str, ...] = ("ncclprobe", "engine", "probes", "examples"),
) -> list[str]:
    regex = re.compile(pattern)
    return [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in SOURCES
        if path.relative_to(ROOT).parts[0] in within and str(path.relative_to(ROOT)) not in outside
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if regex.search(line)
    ]


def test_the_layer_table_in_design_is_the_real_import_graph():
    """Kept as a scan: a document matching the import graph is a fact about files, not behaviour."""
    from tests import layers

    edges = layers.imports()
    assert layers.design_table() == layers.table(edges), (
        "docs/DESIGN.md is stale: python -m tests.layers --write"
    )
    assert not edges["engine"] & {
        "sweep",
        "recommend",
        "engine_session",
        "cli",
    }  # the engine never bounces up


def test_commands_return_their_library_verdict_and_decide_no_exit_code():
    """No `return 0/1/3`, `sys.exit` or `ctx.exit` in a command module: the one mapping is
    ncclprobe.cli.exit_code. Kept as a scan: each command's exit codes are tested by running it,
    but a command that maps its own verdict the same way today exits the same; only its source
    shows the second mapping that will drift."""
    found = []
    for path in sorted((ROOT / "ncclprobe" / "cli").glob("*.py")):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Return)
                and isinstance(node.value, ast.Constant)
                and type(node.value.value) is int
            ):
                found.append(f"{path.name}:{node.lineno}: return {node.value.value}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "exit"
            ):
                found.append(f"{path.name}:{node.lineno}: .exit(...)")
    assert not found, found


def test_run_engine_tuned_is_one_library_call():
    """Kept as a scan: the CLI re-doing the tuned workflow's steps would behave as the library does
    (until one side changes); which module calls the steps is visible only in the source."""
    from ncclprobe import engine_session

    assert "tuning" in inspect.signature(engine_session.run).parameters
    assert not _grep(
        r"quick_sweep|add_tuned_runs|SettingsGuard",
        within=("ncclprobe",),
        outside=("ncclprobe/engine_session.py",),
    )


def test_the_sweep_defaults_and_spec_builder_have_one_home():
    from ncclprobe.cli.sweep import SPEC_OPTIONS, command, request
    from ncclprobe.sizes import parse_sizes
    from ncclprobe.sweep import defaults
    from ncclprobe.sweep.build import SweepRequest, build_spec
    from ncclprobe.sweep.plan import SweepSpec

    unset = {
        p.name: p.default
        if isinstance(p.default, (str, int, float, tuple))
        else (() if p.multiple else None)
        for p in command.params
    }
    # what the command hands the library when nothing is given: the library's own "default of where it runs"
    assert request({o.field: unset[o.field] for o in SPEC_OPTIONS}) == SweepRequest()
    spec = SweepSpec(grid={}, sizes=(8,))
    assert (spec.warmup, spec.iters, spec.trials) == (
        defaults.CPU.warmup,
        defaults.CPU.iters,
        defaults.CPU.trials,
    )
    # what it measures when told nothing: CHOICES, in the request, the spec and the options alike
    choices = defaults.CHOICES
    assert (spec.collectives, spec.dtypes, spec.ops, spec.agg, spec.check, spec.buffers) == (
        choices.collectives,
        choices.dtypes,
        choices.ops,
        choices.agg,
        choices.check,
        choices.buffers,
    )
    assert (spec.path, spec.iter_events, spec.timeout_s) == (
        choices.path,
        choices.iter_events,
        choices.timeout_s,
    )
    # where it runs decides sizes, warm-up, iterations and trials: the spec built from an empty
    # request is each effort's, so a copy of these defaults that drifts fails here (issue 38 §4
    # replaced the scans for the literals with this)
    for effort in (defaults.CPU, defaults.GPU, defaults.SHARED_GPU):
        built, _ = build_spec(SweepRequest(), effort=effort)
        assert built.sizes == tuple(parse_sizes(effort.sizes))
        assert (built.warmup, built.iters, built.trials) == (
            effort.warmup,
            effort.iters,
            effort.trials,
        )


def test_sweep_is_one_library_call():
    """cli/sweep.py hands a SessionRequest to sweep.session.run (a plan to session.plan) and renders
    the Outcome's report; the steps of a session are the library's, as run-engine's are. Kept as a
    scan: a CLI that called the steps itself would sweep the same; only the source shows it."""
    import ncclprobe.cli.sweep as cli_sweep
    from ncclprobe.sweep import session

    assert "started" in inspect.signature(session.run).parameters
    steps = r"\b(new_job|resume_job|collect_job|run_job|build_spec|thresholds\.|table\.)"
    assert not _grep(steps, within=("ncclprobe",), outside=_not(cli_sweep.__file__))
    assert not _grep(r"new_job|run_job", within=("ncclprobe",), outside=_not(__engine_session()))


def _not(path) -> tuple[str, ...]:
    """Every library file but `path` (the scans below look at one file)."""
    one = str(Path(path).resolve().relative_to(ROOT))
    return tuple(str(p.relative_to(ROOT)) for p in SOURCES if str(p.relative_to(ROOT)) != one)


def __engine_session() -> str:
    from ncclprobe import engine_session

    return engine_session.__file__


def test_the_cuda_graph_capture_idiom_is_written_once():
    """Kept as a scan: a second capture written out correctly captures the same graph (and only on
    a GPU); that it is a copy, to fix twice, shows only in the source."""
    assert not _grep(r"torch\.cuda\.graph\(|\.wait_stream\(", outside=("ncclprobe/cudagraph.py",))


def test_objects_are_whole_when_built():
    """Kept as a scan (its second half): a collaborator assigned after construction works until the
    object is used before the assignment; no call shows the assignment, the source does."""
    from ncclprobe.sweep.run import PoolRun

    init = inspect.signature(PoolRun.__init__).parameters
    assert all(
        p.kind is p.KEYWORD_ONLY for name, p in init.items() if name not in ("self", "spec", "pool")
    )
    # collaborators are given to the constructor, never assigned afterwards
    assert not _grep(r"\b(engine|steps)\.(steps|timer|trace)\s*=(?!=)")


def test_run_modes_statuses_and_labels_are_named_once():
    """The engine, the sweep, recommend and report compare against the enums, not against strings
    written again (diagnose's rules, which issue 17 rewrites, still read the view's mode strings).
    Kept as a scan: the enums are str enums, so `== "ok"` behaves as `is Status.OK` until a value is
    renamed; only the source shows the string written again."""
    diagnose = tuple(
        str(p.relative_to(ROOT)) for p in (ROOT / "ncclprobe" / "diagnose").rglob("*.py")
    )
    assert not _grep(
        r"""==\s*["'](speculative|baseline|untuned|tuned)["']|["'](speculative|baseline)["']\s+in\b""",
        within=("engine", "ncclprobe"),
        outside=("ncclprobe/evidence/run/modes.py", *diagnose),
    )
    # a result's or configuration's status is compared through records.Status everywhere it is
    # read or written; these modules' "status" is another record's, with its own words
    other_vocabularies = (
        "ncclprobe/records.py",  # the home (its docstring spells the format)
        "ncclprobe/gather/p2p.py",  # the P2P measurement's process: ok, hang, error, skipped
        "ncclprobe/diagnose/p2p/check.py",  # ... as the P2P check reads it
        "ncclprobe/diagnose/p2p/advice.py",  # platform checks: severities
        "ncclprobe/evidence/live/topo_live.py",  # the P2P check's summary: ok, corrupt, hang, error
        "probes/p2p_check.py",
        "probes/nccl_dump.py",
        "probes/custom_allreduce_report.py",  # a method's row: ok, or why it did not run
        "probes/env_propagation.py",  # a probe row: measured, skipped, error
    )
    statuses = "ok|hang|error|wrong|ignored|skipped"
    assert not _grep(
        rf"""status["'\])]*\s*[!=]=\s*["']({statuses})["']|"""
        rf"""status["']\s*:\s*["']({statuses})["']|"""
        rf"""status\s+(not\s+)?in\s+\(["']({statuses})["']|"""
        rf"""return\s+\(?["']({statuses})["'],""",
        outside=other_vocabularies,
    )


@pytest.mark.parametrize("name", ["train_and_save", "training_prompts", "check_training_limits"])
def test_train_draft_is_a_library_workflow(name):
    """Kept: the workflow's steps behave the same whichever module holds them; where they live is
    the fact (read from the modules' names, not their text)."""
    import ncclprobe.cli.train_draft as cli_module
    from ncclprobe.engine import train_job

    assert hasattr(train_job, name) and not hasattr(cli_module, name)


def test_every_command_an_example_script_runs_is_a_command():
    """The GPU scripts run ncclprobe's commands (train-target among them), never a copy of one; each
    line parses as ncclprobe parses it: a renamed command or option fails here, not on the GPU
    machine. `--help` at the end stops after parsing, so nothing runs."""
    import shlex

    from click.testing import CliRunner

    from ncclprobe.cli import cli

    lines = [
        shlex.split(re.sub(r'"?\$\{?\w+\}?(/[^"\s]*)?"?', "x", match))
        for script in sorted((ROOT / "examples").glob("*.sh"))
        for match in re.findall(r"\bncclprobe ([a-z][^|;&#>\n]*)", script.read_text())
    ]
    assert any(line[0] == "train-target" for line in lines)  # the one that used to be disguised
    for line in lines:
        ran = CliRunner().invoke(cli, [*line, "--help"])
        assert ran.exit_code == 0, (line, ran.output)


def test_a_collective_and_an_element_size_are_spelled_once():
    """ncclprobe's names of collectives are nccl.names' (a profile's all-to-all is `alltoall`, as
    the sweep measures it, not `all_to_all`): the readers' answers below say it. Bytes per element
    are ncclprobe.dtypes': kept as a scan, since a second table with the same sizes behaves alike."""
    sizes = (
        r"""["'](bfloat16|float16)["']\s*:\s*2\b|["']float32["']\s*:\s*4\b"""  # not NCCL's codes
    )
    assert not _grep(sizes, outside=("ncclprobe/dtypes.py",))
    assert _grep(sizes, within=("ncclprobe",))  # live: it finds the one table
    from ncclprobe.evidence.run.profile.names import collective_kernel
    from ncclprobe.nccl.names import COLLECTIVE
    from ncclprobe.probes.collectives import COLLECTIVES

    assert set(COLLECTIVES) == set(COLLECTIVE)  # the probes' registry is the names' table
    assert collective_kernel("ncclDevKernel_AlltoAll(int)")["op"] in COLLECTIVES
    assert collective_kernel("ncclDevKernel_SendRecv(int)")["op"] in COLLECTIVES
    # a kernel named after NVLS_TREE holds TREE and NVLS too: the whole name is read
    assert (
        collective_kernel("ncclDevKernel_AllReduce_Sum_f32_NVLS_TREE_SIMPLE(x)")["algo"]
        == "NVLS_TREE"
    )
