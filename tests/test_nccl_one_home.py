"""Each NCCL fact has one home, in ncclprobe/nccl/ (issue 18 §1): the other modules use it and none
writes it again. A restatement outside the package fails here with its file and line."""

import re
from pathlib import Path

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.nccl import recipes
from ncclprobe.nccl.p2p import LEGACY_P2P_LEVELS, legacy_level

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "ncclprobe" / "nccl"
SOURCES = sorted(
    path
    for folder in ("ncclprobe", "engine", "probes", "examples")
    for path in (ROOT / folder).rglob("*.py")
    if HOME not in path.parents
)

# fact -> a pattern that matches a restatement of it in code (prose like "NCCL_DEBUG=INFO logs" is fine)
RESTATEMENTS = {
    "the proof environment (NCCL_DEBUG=INFO)": r"""NCCL_DEBUG["']?\s*[:=]\s*["']INFO""",
    "the proof environment (its subsystems)": r"INIT,ENV",
    "a rank's NCCL log name": r"rank\{rank\}\.log|rank\{ctx\.rank\}|nccl\.%|\{pid\}\.log|getpid\(\)\}\.log",
    "the --share-gpu rank count": r"at least (?:2|\{SHARE_GPU_MIN_RANKS\}) ranks",
    "the --share-gpu host ids": r"""NCCL_HOSTID["']?\s*[:=]\s*f?["']""",
    "NVLink multicast off": r"""NCCL_NVLS_ENABLE["']?\s*[:=]\s*["']0""",
    "the legacy NCCL_P2P_LEVEL integers": r"""\(\s*"LOC",\s*"PIX"|"0":\s*"LOC"|"1":\s*"PIX\"""",
    "the P2P level names": r""""LOC",\s*"NVL",\s*"(?:PIX|NVB)\"""",
    "NCCL_PROTO / NCCL_ALGO list parsing": r"""lstrip\(["']\^["']\)|startswith\(["']\^["']\)""",
    "the variables that are ncclprobe's own": r""""NCCL_DEBUG",\s*"NCCL_DEBUG_SUBSYS"|startswith\(["']NCCL_DEBUG""",
    "the default protocol x algorithm grid": r""""LL",\s*"LL128",\s*"Simple"|default,LL,LL128,Simple|default,Ring,Tree|"default",\s*"Ring\"""",
    # issue 30: NCCL's names of algorithms, protocols and collectives in every spelling (nccl.names)
    "the algorithm names": r"""["'](COLLNET_DIRECT|CollnetDirect|CollNetDirect|collnet_?direct|NVLS_TREE|NVLSTree|nvls_?tree)["']""",
    "the protocol names": r"""["']LL128["'],\s*["'](LL|SIMPLE|Simple)["']|["']LL["'],\s*["']LL128["'],\s*["'](SIMPLE|Simple)["']|["']SIMPLE["'],\s*["']Simple["']""",
    "NCCL's function names": r"""["'](AllReduce|AllGather|ReduceScatter|AlltoAll|AllToAll|SendRecv)["']\s*[:,)]""",
}


@pytest.mark.parametrize("fact", sorted(RESTATEMENTS))
def test_no_module_outside_the_nccl_package_restates(fact):
    pattern = re.compile(RESTATEMENTS[fact])
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in SOURCES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, (
        f"{fact} is written again outside ncclprobe/nccl/ (import it from there):\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize("fact", sorted(RESTATEMENTS))
def test_the_nccl_package_defines_each_fact(fact):
    """The patterns above are live: each finds its fact at home, so a passing scan means something."""
    pattern = re.compile(RESTATEMENTS[fact])
    assert any(pattern.search(path.read_text(encoding="utf-8")) for path in HOME.glob("*.py")), fact


def test_the_sweep_and_the_probes_use_the_shared_recipes():
    from ncclprobe.probes import graph_capture_run
    from ncclprobe.sweep import plan

    assert plan.NOT_WITH_SHARED_GPU is recipes.NOT_WITH_SHARED_GPU
    assert graph_capture_run.NOT_WITH_SHARED_GPU is recipes.NOT_WITH_SHARED_GPU


def test_the_cli_grid_and_the_tuned_sweep_are_the_default_grid():
    from ncclprobe.cli.sweep import command
    from ncclprobe.sweep.build import SweepRequest, build_spec
    from ncclprobe.sweep.defaults import QUICK

    shown = {p.name: p.show_default for p in command.params}
    assert shown["protocols"] == ",".join(recipes.DEFAULT_GRID["NCCL_PROTO"])
    assert shown["algorithms"] == ",".join(recipes.DEFAULT_GRID["NCCL_ALGO"])
    spec, _ = build_spec(
        SweepRequest(sizes=(4096,), backend="gloo"), effort=QUICK
    )  # what --tuned sweeps
    assert {k: spec.grid[k] for k in ("NCCL_PROTO", "NCCL_ALGO")} == recipes.DEFAULT_GRID


def test_every_nccl_pool_gets_the_proof_environment_and_a_log_per_rank(tmp_path):
    from ncclprobe.launch import worker_env
    from ncclprobe.probes.graph_capture_run import GraphCaptureSpec, pool_spec
    from ncclprobe.sweep.plan import Config, Pool, SweepSpec
    from ncclprobe.sweep.run import pool_spec as sweep_pool_spec

    sweep = SweepSpec(grid={"NCCL_PROTO": ("LL",)}, sizes=(4096,), nranks=2, backend="nccl")
    pools = {
        "sweep": sweep_pool_spec(sweep, Pool({}, [Config({})]), tmp_path),
        "graph-capture": pool_spec(GraphCaptureSpec(sizes=(4096,), share_gpu=2), str(tmp_path)),
    }
    for name, spec in pools.items():
        for rank in range(2):
            env = worker_env(spec, rank, tmp_path, 1234)
            assert recipes.proof_env().items() <= env.items(), name
            assert env["NCCL_DEBUG_FILE"] == str(recipes.rank_log(tmp_path, rank)), name


def test_share_gpu_with_one_rank_is_refused_in_the_same_words_everywhere():
    from ncclprobe.probes.graph_capture_run import GraphCaptureSpec
    from ncclprobe.sweep.build import SweepRequest, build_spec
    from ncclprobe.sweep.plan import SweepSpec

    with pytest.raises(UsageProblem) as home:
        recipes.check_share_gpu_ranks(1)
    refusals = [
        lambda: SweepSpec(grid={}, sizes=(4,), nranks=1, backend="nccl", share_gpu=True),
        lambda: GraphCaptureSpec(sizes=(4,), share_gpu=1),
        lambda: build_spec(SweepRequest(share_gpu=1, backend="nccl")),
    ]
    for refuse in refusals:
        with pytest.raises(UsageProblem) as caught:
            refuse()
        assert str(caught.value) == str(home.value)


@pytest.mark.parametrize(
    "value, name",
    [
        ("0", "LOC"),
        ("1", "PIX"),
        ("2", "PXB"),
        ("3", "PHB"),
        ("4", "SYS"),
        ("5", "SYS"),
        ("17", "SYS"),
        ("01", "PIX"),
        ("010", "SYS"),
        ("08", "LOC"),
    ],
)
def test_legacy_levels_read_as_nccl_reads_them_in_every_module(value, name):
    """levelsOldToNew with strtol(str, NULL, 0) (src/graph/paths.cc): a leading 0 is octal."""
    from ncclprobe.evidence.live.logcheck import normalise
    from ncclprobe.nccl.lint import lint_env
    from ncclprobe.nccl.logged_reads import verdict_for

    assert legacy_level(value) == name and name in LEGACY_P2P_LEVELS
    assert normalise("NCCL_P2P_LEVEL", value) == name
    assert verdict_for("NCCL_P2P_LEVEL", value, name) == "applied"
    [finding] = lint_env({"NCCL_P2P_LEVEL": value})
    assert finding.fix == f"export NCCL_P2P_LEVEL={name}"
