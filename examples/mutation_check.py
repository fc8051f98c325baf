"""A small mutation check of the core modules: does the test suite notice when the code is wrong?

Each mutant is one targeted edit of the kind a real bug makes (a rule dropped, a comparison
loosened, a per-configuration filter widened), applied to a copy of the repository; the tests that
cover that module run against the copy, and the mutant is *killed* when at least one fails. The
score is killed / total. The first three are the mutants issue 17 found escaping the whole suite.

Run: python examples/mutation_check.py [--only NAME] [--list]   (CPU; a few minutes on 2 cores)
It prints one line per mutant and the score last; the working tree is never touched: the copy
lives in a temporary directory (PYTHONPATH points there, so tests, their subprocesses and the
worker pools all import the mutated copy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # file, relative to the repository root
    old: str  # exact text replaced (must occur once)
    new: str
    tests: tuple[str, ...]  # pytest arguments that cover it


MUTANTS = (
    Mutant(
        "masking: hf_ token pattern removed",
        "ncclprobe/secrets/shapes.py",
        "hf_[A-Za-z0-9]{16,}|",
        "",
        ("tests/test_escaped_mutants.py", "tests/test_envcheck.py"),
    ),
    Mutant(
        "recommend: p90-below-p10 spread rule removed",
        "ncclprobe/stats.py",
        "    if a.high < b.low and won >= floor:",
        "    if won >= floor:",
        (
            "tests/test_recommend.py",
            "tests/test_escaped_mutants.py",
            "tests/test_recommend_chain.py",
        ),
    ),
    Mutant(
        "run-engine: float32 greedy mismatch passes",
        "ncclprobe/evidence/run/trace_checks.py",
        'greedy_ok = result["greedy_match"] is not False or not exact',
        "greedy_ok = True",
        ("tests/test_engine_cli.py", "-k", "greedy_mismatch"),
    ),
    Mutant(
        "proof: another configuration's per-communicator reads count",
        "ncclprobe/sweep/proof.py",
        "if proof_scope(name) is Scope.PROCESS}",
        "if True}",
        ("tests/test_sweep_proof.py",),
    ),
    Mutant(
        "proof: only the lowest rank's log is read",
        "ncclprobe/sweep/proof.py",
        "for rank, (whole, during) in sorted(logs.items())\n",
        "for rank, (whole, during) in sorted(logs.items())[:1]\n",
        ("tests/test_sweep_proof.py",),
    ),
    Mutant(
        "choice: one matching TUNING call proves the choice",
        "ncclprobe/sweep/choice.py",
        'chosen = check["matching"] == check["calls"]',
        'chosen = check["matching"] > 0',
        ("tests/test_sweep_share_gpu.py", "tests/test_sweep_proof.py"),
    ),
    Mutant(
        "choice: connection lines ignored",
        "ncclprobe/sweep/choice.py",
        "offending = [rank for rank, counts in lines.items() if counts.get(transport)]",
        "offending = []",
        ("tests/test_sweep_proof.py",),
    ),
    Mutant(
        "lint: lowercase P2P level accepted",
        "ncclprobe/nccl/lint_datapath.py",
        "elif value.upper() in P2P_LEVELS + P2P_LEVELS_UNDOCUMENTED:",
        "elif False:",
        ("tests/test_knobs_lint.py", "tests/test_nccl_rules.py", "tests/test_diagnose.py"),
    ),
    Mutant(
        "ll128: mixed GPU types allowed before 2.30",
        "ncclprobe/nccl/ll128.py",
        "if low != high and (low < 90 or version < (2, 30, 0)):",
        "if low != high and low < 90:",
        ("tests/test_nccl_rules.py", "tests/test_knobs_lint.py"),
    ),
    Mutant(
        "nccl log: integer values keep NCCL's trailing period",
        "ncclprobe/evidence/nccl/nccl_log.py",
        "            value = value[:-1]\n",
        "            pass\n",
        ("tests/test_nccl_log.py", "tests/test_sweep_proof.py"),
    ),
    Mutant(
        "diagnose: invalid values reported again as 'not read'",
        "ncclprobe/diagnose/settings/rules_settings.py",
        "elif read and var not in read and var in invalid:",
        "elif False:",
        ("tests/test_diagnose.py",),
    ),
    Mutant(
        "diagnose: speculative inside the spread called slower",
        "ncclprobe/diagnose/run/rules_speed.py",
        "    repeats = 2 * max(len(run.tokens_per_s_repeats), 1) + 1\n",
        "    return _slower_finding(ev, run, base, verdict)\n",
        ("tests/test_diagnose.py",),
    ),
    Mutant(
        "diagnose: one faster measurement rules slower out",
        "ncclprobe/diagnose/run/rules_speed.py",
        "    if verdict.basis == stats.NOISE_FLOOR:\n        return NotChecked(",
        "    if verdict.basis == stats.NOISE_FLOOR and speedup >= 1.0:\n"
        "        return RuledOut(rule='speculative-slower', hypothesis=hyp, reason=figures)\n"
        "    if verdict.basis == stats.NOISE_FLOOR:\n        return NotChecked(",
        ("tests/test_diagnose.py",),
    ),
    Mutant(
        "env-check: a rule out from zero processes",
        "ncclprobe/diagnose/process_env/rules_envcheck.py",
        "    if not targets:\n",
        "    if False:\n",
        ("tests/test_diagnose.py",),
    ),
    Mutant(
        "recommend: merging hides the spread",
        "ncclprobe/stats.py",
        "p10_us=min(min(p.p10_us for p in points), times[0]),",
        "p10_us=times[0],",
        (
            "tests/test_recommend.py",
            "tests/test_nccl_tests_runs.py",
            "tests/test_recommend_chain.py",
        ),
    ),
    Mutant(
        "sweep: worker environment not compared",
        "ncclprobe/sweep/proof.py",
        "if seen.get(name) != settings.get(name):",
        "if False:",
        ("tests/test_sweep_proof.py",),
    ),
    Mutant(
        "nccl-tests: an empty redop cell not recognised",
        "ncclprobe/evidence/nccl/nccl_tests.py",
        "redop_shown = columns.redop and len(tokens) > 3 and not _NUMBER.match(tokens[3])",
        "redop_shown = columns.redop",
        ("tests/test_nccl_tests_shapes.py",),
    ),
    Mutant(
        "nccl-tests: a trimmed run's table header does not start a run",
        "ncclprobe/evidence/nccl/nccl_tests_split.py",
        '    ("table", COLUMNS),\n',
        "",
        ("tests/test_nccl_tests_shapes.py", "tests/test_nccl_tests_runs.py"),
    ),
    Mutant(
        "values: spaces around NCCL_PROTO tokens accepted",
        "ncclprobe/nccl/values.py",
        "if token and token.lower() not in allowed:",
        "if token.strip() and token.strip().lower() not in allowed:",
        ("tests/test_knobs_lint.py",),
    ),
    Mutant(
        "sizes: a range's upper bound dropped",
        "ncclprobe/sizes.py",
        "    while size <= hi:",
        "    while size < hi:",
        ("tests/test_sizes.py",),
    ),
)


def copy_repository(into: Path) -> Path:
    """The tracked files (the working tree's versions) and the links that let `ncclprobe.engine` and
    `ncclprobe.probes` resolve inside the copy, as setup.cfg's package_dir maps them."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in files:
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (into / "ncclprobe" / "engine").symlink_to(into / "engine")
    (into / "ncclprobe" / "probes").symlink_to(into / "probes")
    return into


def run_tests(copy: Path, tests: tuple[str, ...]) -> tuple[bool, float]:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.returncode == 0, time.monotonic() - began


def apply(copy: Path, mutant: Mutant) -> str:
    path = copy / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise SystemExit(
            f"{mutant.name}: the text to mutate occurs {text.count(mutant.old)} times in {mutant.path}"
        )
    path.write_text(text.replace(mutant.old, mutant.new))
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the mutants whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or args.only in m.name]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path} -> {' '.join(m.tests)}")
        return
    with tempfile.TemporaryDirectory(prefix="ncclprobe-mutants-") as tmp:
        copy = copy_repository(Path(tmp) / "repo")
        check = subprocess.run(
            [sys.executable, "-c", "import ncclprobe.engine.spec as m; print(m.__file__)"],
            cwd=copy,
            env={**os.environ, "PYTHONPATH": str(copy)},
            capture_output=True,
            text=True,
        )
        if not check.stdout.startswith(str(copy)):
            raise SystemExit(
                f"the copy is not what gets imported ({check.stdout.strip() or check.stderr.strip()})"
            )
        killed = 0
        for mutant in chosen:
            passed, _ = run_tests(copy, mutant.tests)  # unmutated: the tests must pass first
            if not passed:
                print(f"SKIP    {mutant.name}: its tests fail without the mutant")
                continue
            original = apply(copy, mutant)
            try:
                survived, seconds = run_tests(copy, mutant.tests)
            finally:
                (copy / mutant.path).write_text(original)
            killed += not survived
            print(
                f"{'ESCAPED' if survived else 'killed '} {mutant.name} ({seconds:.0f} s)",
                flush=True,
            )
        print(f"mutation score: {killed}/{len(chosen)} killed ({killed / len(chosen):.0%})")


if __name__ == "__main__":
    main()
