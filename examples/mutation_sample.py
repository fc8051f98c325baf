"""A sampled mutation run over the analyses and readers with cosmic-ray (issue 28 §4; not in CI: slow).

    pip install cosmic-ray        # into your own venv; not a dependency of ncclprobe
    python examples/mutation_sample.py --output mutation.json [--per-lines 50] [--seed 28]
    python examples/mutation_sample.py --only-survivors mutation.json --output again.json

Why sampled: cosmic-ray makes every operator replacement at every site (845 mutants for the 300 lines of
stats.py), too many to run on a shared 2-core machine. Each module gets ceil(lines / --per-lines)
mutants (at least 2), drawn with a fixed seed from its mutants in a stable order (module, operator,
occurrence), so the same code gives the same sample. Each mutant runs only the tests that exercise its
module (MODULES below), with -x: the first failure kills it.

The run happens in a copy of the working tree (the mutated file is written there, never in yours); the
copy imports its own `ncclprobe`. Printed: per module, killed / sampled and every survivor's diff; the
JSON holds the same, and --only-survivors reruns exactly those mutants after tests were added.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the venv's own cosmic-ray, whether or not the venv is activated
COSMIC_RAY = shutil.which("cosmic-ray") or str(Path(sys.executable).parent / "cosmic-ray")
# --noconftest: the suite's conftest only sets torch's thread count, and importing torch for it
# doubles the time of every mutant's run
PY = "python -m pytest -x -q -p no:cacheprovider --noconftest"
DIAGNOSE = (
    "tests/test_diagnose.py tests/test_diagnose_claims.py tests/test_diagnose_draft.py "
    "tests/test_diagnose_boundaries.py"
)
SERVER_LOGS = (
    "tests/test_server_log_pins.py tests/test_noise_rule.py tests/test_diagnose_boundaries.py "
    "tests/test_profile.py -k 'log or sglang or vllm or break'"
)
NCCL = (
    "tests/test_knobs_lint.py tests/test_nccl_rules.py tests/test_nccl_one_home.py "
    "tests/test_nccl_value_reads.py tests/test_diagnose_claims.py tests/test_nccl_pins.py"
)
PINS = "tests/test_evidence_pins.py"
TRACES = f"{DIAGNOSE} tests/test_handwritten_fixtures.py"
NCCL_TESTS = f"tests/test_nccl_tests_runs.py tests/test_nccl_tests_import.py {PINS}"
PCIE = f"{PINS} tests/test_pcie_readers.py"
SECRETS = "tests/test_trust_secrets.py tests/test_masking_pins.py tests/test_trust_secrets_walk.py"
# runs across hosts: the pure parts (the real launchers across namespace hosts are too slow per mutant)
HOSTS_LAUNCH = "tests/test_hosts_launchers.py"
HOSTS_MERGE = "tests/test_hosts_merge.py -k 'not contradictions'"
KNOWN_BAD = "tests/test_known_bad.py"
CAPTURE_RULES = "tests/test_host_time.py tests/test_capture_rules.py"
# module -> the tests that exercise it (rules_profile.py and evidence/run/profile/ are issue 26's)
MODULES = {
    "ncclprobe/rank_ranges.py": "tests/test_flight_recorder_scale.py -k ranges",
    "ncclprobe/evidence/hang/safe_pickle.py": "tests/test_flight_recorder_reader.py",
    "ncclprobe/evidence/hang/fr_entries.py": "tests/test_flight_recorder_reader.py "
    "tests/test_flight_recorder_scale.py",
    "ncclprobe/diagnose/hang/hang.py": "tests/test_diagnose_hang.py tests/test_diagnose_hang_details.py "
    "tests/test_flight_recorder_scale.py",
    "ncclprobe/stats.py": "tests/test_noise_rule.py tests/test_recommend.py tests/test_sweep_records.py",
    "ncclprobe/secrets/__init__.py": SECRETS,
    "ncclprobe/secrets/words.py": SECRETS,
    "ncclprobe/secrets/shapes.py": SECRETS,
    # issue 40: the terminal guard, writers' links, inputs that are no regular file
    "ncclprobe/visible.py": "tests/test_trust_terminal.py",
    "ncclprobe/safe_output.py": "tests/test_trust_writers.py -k 'link or relative or appeared or "
    "force or device or leaves_nothing'",
    "ncclprobe/validate.py": "tests/test_trust_readers.py tests/test_trust_walk.py",
    "ncclprobe/diagnose/run/rules.py": f"{TRACES} tests/test_noise_rule.py",
    "ncclprobe/diagnose/run/rules_speed.py": f"{TRACES} tests/test_noise_rule.py",
    "ncclprobe/diagnose/run/rules_collectives.py": TRACES,
    "ncclprobe/diagnose/run/run_costs.py": TRACES,
    "ncclprobe/diagnose/run/rules_log.py": SERVER_LOGS,
    "ncclprobe/diagnose/settings/rules_settings.py": f"{DIAGNOSE} tests/test_nccl_value_reads.py",
    "ncclprobe/diagnose/process_env/rules_envcheck.py": DIAGNOSE,
    "ncclprobe/diagnose/settings/rules_safety.py": f"{DIAGNOSE} tests/test_diagnose_collect_env.py",
    "ncclprobe/diagnose/run/rules_draft.py": DIAGNOSE,
    "ncclprobe/diagnose/run/sweep_match.py": TRACES,
    "ncclprobe/diagnose/run/expectations.py": DIAGNOSE,
    "ncclprobe/diagnose/rank.py": DIAGNOSE,
    "ncclprobe/diagnose/commands.py": f"{DIAGNOSE} tests/test_next_commands.py",
    "ncclprobe/evidence/bundle.py": f"{DIAGNOSE} tests/test_diagnose_collect_env.py",
    "ncclprobe/evidence/run/view.py": TRACES,
    "ncclprobe/evidence/run/trace.py": f"{TRACES} tests/test_noise_rule.py tests/test_nccl_value_reads.py "
    f"tests/test_trust_readers.py {PINS}",
    "ncclprobe/evidence/run/trace_checks.py": f"{TRACES} tests/test_noise_rule.py "
    f"tests/test_nccl_value_reads.py {PINS}",
    "ncclprobe/evidence/run/serverlog.py": f"{PINS} {SERVER_LOGS}",
    # review fixes (2026-12-07): machines never joined, strict profile times, plain-English levers
    "ncclprobe/diagnose/rules_machines.py": "tests/test_machines.py tests/test_known_bad.py "
    "tests/test_diagnose_nccl_log.py",
    "ncclprobe/evidence/machines.py": "tests/test_machines.py tests/test_diagnose_nccl_log.py",
    "ncclprobe/diagnose/run/levers.py": "tests/test_levers.py",
    "ncclprobe/evidence/run/profile/timeline.py": "tests/test_profile_malformed.py "
    "tests/test_profile_steps_unit.py",
    "ncclprobe/evidence/run/serverlog_lines.py": f"{PINS} {SERVER_LOGS} tests/test_trust_numbers.py",
    "ncclprobe/evidence/run/__init__.py": "tests/test_profile.py tests/test_diagnose.py",
    "ncclprobe/evidence/run/model_config.py": f"{PINS} tests/test_profile.py",
    "ncclprobe/evidence/nccl/nccl_log.py": f"tests/test_nccl_log.py {PINS}",
    "ncclprobe/evidence/nccl/nccl_failure_kinds.py": "tests/test_nccl_failure_kinds.py",
    "ncclprobe/evidence/nccl/nccl_failures.py": "tests/test_nccl_failure_kinds.py "
    "tests/test_nccl_log_failures.py tests/test_failure_lines.py",
    "ncclprobe/evidence/nccl/nccl_errors.py": "tests/test_nccl_failure_kinds.py "
    "tests/test_nccl_log_failures.py tests/test_nccl_tests_measured_nothing.py",
    "ncclprobe/evidence/nccl/nccl_tests.py": f"{NCCL_TESTS} tests/test_nccl_tests_shapes.py "
    "tests/test_nccl_tests_cputime.py tests/test_nccl_tests_measured_nothing.py",
    "ncclprobe/evidence/nccl/nccl_tests_run.py": f"{NCCL_TESTS} tests/test_nccl_tests_shapes.py "
    "tests/test_nccl_version_sources.py",
    "ncclprobe/evidence/nccl/nccl_tests_json.py": f"{NCCL_TESTS} tests/test_nccl_tests_cputime.py",
    "ncclprobe/evidence/nccl/nccl_tests_split.py": NCCL_TESTS,
    "ncclprobe/evidence/nccl/nccl_tests_layout.py": "tests/test_nccl_tests_measured_nothing.py "
    f"{NCCL_TESTS}",
    "ncclprobe/evidence/launcher.py": "tests/test_nccl_tests_measured_nothing.py",
    "ncclprobe/evidence/node/p2p_access.py": f"tests/test_p2p_partial_pastes.py {PCIE}",
    "ncclprobe/evidence/nccl/nccl_tests_records.py": NCCL_TESTS,
    "ncclprobe/evidence/node/topo.py": f"{PINS} tests/test_topo.py tests/test_topo_cut_platform.py",
    "ncclprobe/evidence/wrapped.py": "tests/test_job_log_sentinels.py tests/test_job_log.py",
    "ncclprobe/evidence/hang/job_log.py": "tests/test_job_log_sentinels.py tests/test_job_log.py "
    "tests/test_hang_log_agrees.py",
    "ncclprobe/diagnose/hang/rules_hang_log.py": "tests/test_job_log_sentinels.py tests/test_job_log.py "
    "tests/test_hang_log_agrees.py tests/test_diagnose_hang.py",
    "ncclprobe/evidence/hang/log_rank.py": "tests/test_job_log_sentinels.py tests/test_job_log.py "
    "tests/test_hang_log_agrees.py",
    "ncclprobe/evidence/hang/torchrun_summary.py": "tests/test_job_log_sentinels.py tests/test_job_log.py "
    "tests/test_hang_log_agrees.py",
    "ncclprobe/diagnose/hang/log_collectives.py": "tests/test_job_log_sentinels.py tests/test_job_log.py "
    "tests/test_hang_log_agrees.py tests/test_diagnose_hang.py",
    "ncclprobe/diagnose/hang/rules_log_watchdog.py": "tests/test_job_log_sentinels.py tests/test_job_log.py "
    "tests/test_hang_log_agrees.py tests/test_diagnose_hang.py",
    "ncclprobe/evidence/live/topo_live.py": f"{PINS} tests/test_topo.py",
    "ncclprobe/evidence/node/matrix.py": PCIE,
    "ncclprobe/evidence/node/p2p_test_output.py": f"tests/test_p2p_partial_pastes.py {PCIE}",
    "ncclprobe/evidence/node/nvbandwidth.py": PCIE,
    "ncclprobe/evidence/node/collect_env.py": f"{PCIE} tests/test_diagnose_collect_env.py "
    "tests/test_topo_cut_platform.py",
    "ncclprobe/evidence/live/env_check_document.py": f"{PINS} tests/test_trust_readers.py tests/test_envcheck.py",
    "ncclprobe/evidence/recommendation_file.py": f"{PINS} tests/test_recommend_emit.py "
    "tests/test_trust_readers.py",
    "ncclprobe/evidence/text.py": f"{PCIE} tests/test_trust_readers.py",
    "ncclprobe/evidence/labels.py": f"{NCCL_TESTS}",
    "ncclprobe/nccl/values.py": NCCL,
    "ncclprobe/nccl/lint.py": NCCL,
    "ncclprobe/nccl/lint_finding.py": NCCL,
    "ncclprobe/nccl/lint_datapath.py": NCCL,
    "ncclprobe/nccl/lint_tooling.py": NCCL,
    "ncclprobe/nccl/knobs.py": NCCL,
    "ncclprobe/nccl/knob_row.py": NCCL,
    "ncclprobe/nccl/knobs_datapath.py": NCCL,
    "ncclprobe/nccl/knobs_tooling.py": NCCL,
    "ncclprobe/nccl/ll128.py": NCCL,
    "ncclprobe/nccl/node.py": f"{NCCL} tests/test_topo.py",
    "ncclprobe/nccl/safety.py": f"{NCCL} tests/test_recommend.py",
    "ncclprobe/nccl/recipes.py": NCCL,
    "ncclprobe/nccl/p2p.py": NCCL,
    "ncclprobe/nccl/version.py": NCCL,
    "ncclprobe/hosts/hostlist.py": HOSTS_LAUNCH,
    "ncclprobe/hosts/identity.py": HOSTS_LAUNCH,
    "ncclprobe/hosts/launchers.py": HOSTS_LAUNCH,
    "ncclprobe/hosts/run.py": HOSTS_LAUNCH,
    "ncclprobe/sweep/host_merge.py": HOSTS_MERGE,
    "ncclprobe/diagnose/process_env/hosts.py": HOSTS_MERGE,
    "ncclprobe/evidence/live/job_processes.py": HOSTS_MERGE,
    "ncclprobe/evidence/live/host_env_checks.py": HOSTS_MERGE,
    # issue 39: capture's rules and readers (its real runs are too slow per mutant)
    "ncclprobe/nccl/known_bad.py": KNOWN_BAD,
    "ncclprobe/diagnose/settings/rules_known_bad.py": KNOWN_BAD,
    "ncclprobe/evidence/nccl/known_bad_scan.py": KNOWN_BAD,
    "ncclprobe/diagnose/run/rules_host.py": CAPTURE_RULES,
    "ncclprobe/evidence/run/profile/host.py": CAPTURE_RULES,
    "ncclprobe/diagnose/hang/rules_arrival.py": "tests/test_capture_rules.py",
    "ncclprobe/diagnose/process_env/rules_capture.py": "tests/test_capture_rules.py",
    "ncclprobe/diagnose/run/rules_spec_config.py": "tests/test_capture_rules.py",
    "ncclprobe/engine_facts/spec_config.py": "tests/test_capture_rules.py tests/test_capture_engines.py",
}


def annotation_spans(module: str) -> set[tuple]:
    """Lines inside type annotations: with `from __future__ import annotations` they are never
    evaluated, so a mutant there (`dict | None` -> `dict + None`) is equivalent by construction."""
    tree = ast.parse((ROOT / module).read_text())
    spans = set()
    for node in ast.walk(tree):
        found = []
        if isinstance(node, ast.arg) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
        spans.update((a.lineno, a.col_offset, a.end_lineno, a.end_col_offset) for a in found)
    return spans


def _in_annotation(spans, row: int, col: int) -> bool:
    return any((s[0], s[1]) <= (row, col) <= (s[2], s[3]) for s in spans)


def sample(session: Path, module: str, count: int, seed: int, keep: set | None) -> list[tuple]:
    """Mark every mutant of the session but the chosen ones done ("skipped"): cosmic-ray exec runs
    only work items without a result. Mutants inside annotations are never chosen. Returns the
    chosen (operator, occurrence, line) keys."""
    db = sqlite3.connect(session)
    spans = annotation_spans(module)
    specs = sorted(
        (
            s
            for s in db.execute(
                "select job_id, operator_name, occurrence, start_pos_row, start_pos_col "
                "from mutation_specs"
            ).fetchall()
            if not _in_annotation(spans, s[3], s[4])
        ),
        key=lambda s: (s[1], s[2]),
    )
    skipped_everywhere = {
        row[0] for row in db.execute("select job_id from mutation_specs").fetchall()
    }
    if keep is not None:
        chosen = [s for s in specs if (module, s[1], s[2]) in keep]
    else:
        chosen = random.Random(f"{seed}:{module}").sample(specs, min(count, len(specs)))
    ids = {s[0] for s in chosen}
    db.executemany(
        "insert into work_results (worker_outcome, output, test_outcome, diff, job_id) "
        "values ('SKIPPED', 'not sampled', 'SURVIVED', '', ?)",
        [(job,) for job in sorted(skipped_everywhere - ids)],
    )
    db.commit()
    db.close()
    return [(s[1], s[2], s[3]) for s in chosen]


def outcomes(session: Path) -> list[dict]:
    db = sqlite3.connect(session)
    rows = db.execute(
        "select s.operator_name, s.occurrence, s.start_pos_row, r.worker_outcome, r.test_outcome, r.diff "
        "from mutation_specs s join work_results r on s.job_id = r.job_id "
        "where r.worker_outcome != 'SKIPPED'"
    ).fetchall()
    db.close()
    return [
        {"operator": o, "occurrence": n, "line": line, "worker": w, "test": t, "diff": d}
        for o, n, line, w, t, d in rows
    ]


def run_module(copy: Path, module: str, tests: str, count: int, seed: int, keep, timeout: float):
    work = Path(tempfile.mkdtemp(prefix="cr-", dir=copy.parent))
    config, session = work / "cr.toml", work / "session.sqlite"
    config.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{module}"\n'
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f'test-command = "{PY} {tests.replace(chr(34), chr(39))}"\n'
        "[cosmic-ray.distributor]\n"
        'name = "local"\n'
    )
    subprocess.run([COSMIC_RAY, "init", str(config), str(session)], cwd=copy, check=True)
    chosen = sample(session, module, count, seed, keep)
    subprocess.run([COSMIC_RAY, "exec", str(config), str(session)], cwd=copy, check=True)
    results = outcomes(session)
    killed = [r for r in results if r["test"] != "SURVIVED"]
    return {
        "module": module,
        "tests": tests,
        "sampled": len(chosen),
        "killed": len(killed),
        "survivors": [r for r in results if r["test"] == "SURVIVED"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--per-lines", type=int, default=50)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--module", action="append", help="only these modules")
    parser.add_argument("--only-survivors", help="a previous --output: rerun its survivors")
    args = parser.parse_args()
    keep = None
    if args.only_survivors:
        previous = json.loads(Path(args.only_survivors).read_text())
        keep = {
            (m["module"], s["operator"], s["occurrence"])
            for m in previous["modules"]
            for s in m["survivors"]
        }
    base = Path(tempfile.mkdtemp(prefix="ncclprobe-mutation-"))
    copy = base / "tree"
    shutil.copytree(
        ROOT, copy, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info")
    )
    report = {"seed": args.seed, "per_lines": args.per_lines, "modules": []}
    try:
        for module, tests in MODULES.items():
            if args.module and module not in args.module:
                continue
            if keep is not None and not any(k[0] == module for k in keep):
                continue
            lines = len((ROOT / module).read_text().splitlines())
            count = max(2, math.ceil(lines / args.per_lines))
            result = run_module(copy, module, tests, count, args.seed, keep, args.timeout)
            report["modules"].append(result)
            print(f"{module}: {result['killed']}/{result['sampled']} killed", flush=True)
            for s in result["survivors"]:
                print(
                    f"  survived {s['operator']} #{s['occurrence']} line {s['line']}\n{s['diff']}"
                )
            Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sampled = sum(m["sampled"] for m in report["modules"])
    killed = sum(m["killed"] for m in report["modules"])
    print(f"total: {killed}/{sampled} killed ({100 * killed / max(sampled, 1):.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
