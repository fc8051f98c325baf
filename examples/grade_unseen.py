"""Grade an ncclprobe executable on a corpus of real inputs with hand-written truth files.

Why: issue 36 asks that ncclprobe be judged on inputs nobody on the project wrote. Each input
sits beside `NAME.truth.json`, written from the input's public source (never from ncclprobe's
output). The truth names the command a user would run, the claims a correct output must make
(`must`), the claims it must not make (`must_not`) and the acceptable exit codes. This script
runs every command with a bounded time, applies the regexes (case-insensitive, over stdout and
stderr, and over the string values of JSON output with its escapes undone; every path that names
the input is masked first, since an echoed file name is no claim; an item's optional `outside`
list names JSON keys, such as `ruled_out`, whose entries are not claims for that item) and prints
one line per input and the totals:

    right   every `must` met, no `must_not` hit, exit code acceptable
    partly  some `must` met, no `must_not` hit, exit code acceptable
    wrong   a `must_not` hit, or no `must` met, or the exit code unacceptable

    python examples/grade_unseen.py tests/fixtures/unseen
    python examples/grade_unseen.py /work/heldout --ncclprobe .venv/bin/ncclprobe --format json --output grade.json

A command that fails, hangs or cannot start is a result, never a crash of this script.
Standard library only. Exit codes: 0 graded; 1 a truth file is invalid (reported, others graded);
2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

TRUTH_SUFFIX = ".truth.json"
KINDS = (
    "nccl-tests",
    "nccl-log",
    "job-log",
    "server-log",
    "collect-env",
    "topo",
    "p2p-matrix",
    "flight-recorder",
    "profile",
)
DETAIL_CHARS = 6000


class TruthError(ValueError):
    """A truth file that does not follow the format; reported per file, never fatal."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "directory", type=Path, help="corpus root: inputs beside NAME.truth.json, any depth"
    )
    p.add_argument(
        "--ncclprobe", default="ncclprobe", help="the executable to grade (default: on PATH)"
    )
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per command (default 60)")
    p.add_argument("--only", default=None, help="grade only inputs whose name contains this text")
    p.add_argument("--output", type=Path, default=None, help="also write the JSON report here")
    args = p.parse_args(argv)
    if not args.directory.is_dir():
        p.error(f"{args.directory} is not a directory")
    if args.timeout <= 0:
        p.error("--timeout must be positive")
    if shutil.which(args.ncclprobe) is None:
        p.error(f"{args.ncclprobe}: not an executable (give --ncclprobe PATH)")
    return args


def compile_items(truth: dict, key: str) -> list[dict]:
    """Check one list of claims and compile its regexes (case-insensitive)."""
    items = truth.get(key, [])
    if not isinstance(items, list):
        raise TruthError(f"{key} must be a list")
    out = []
    for n, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("what"), str):
            raise TruthError(f"{key}[{n}] needs a 'what' string")
        any_of, all_of = item.get("any_of", []), item.get("all_of", [])
        outside = item.get("outside", [])
        if not (isinstance(outside, list) and all(isinstance(k, str) for k in outside)):
            raise TruthError(f"{key}[{n}]: outside must be a list of JSON keys")
        if not isinstance(any_of, list) or not isinstance(all_of, list) or not (any_of or all_of):
            raise TruthError(f"{key}[{n}] needs a non-empty any_of or all_of list")
        try:
            out.append(
                {
                    "what": item["what"],
                    "any_of": [re.compile(r, re.IGNORECASE) for r in any_of],
                    "all_of": [re.compile(r, re.IGNORECASE) for r in all_of],
                    "outside": frozenset(outside),
                }
            )
        except (re.error, TypeError) as exc:
            raise TruthError(f"{key}[{n}]: bad regex: {exc}") from None
    return out


def load_truth(path: Path) -> dict:
    """Read and validate one truth file; find its input beside it."""
    try:
        truth = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TruthError(f"unreadable: {exc}") from None
    if not isinstance(truth, dict):
        raise TruthError("not a JSON object")
    if truth.get("kind") not in KINDS:
        raise TruthError(f"kind must be one of {', '.join(KINDS)}")
    command = truth.get("command")
    if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
        raise TruthError("command must be a non-empty list of strings")
    if not any("{input}" in a for a in command):
        raise TruthError("command does not use {input}")
    exits = truth.get("exit")
    if not (isinstance(exits, list) and exits and all(isinstance(e, int) for e in exits)):
        raise TruthError("exit must be a non-empty list of integers")
    name = truth.get("input") or path.name[: -len(TRUTH_SUFFIX)]
    target = path.parent / name
    if not target.exists():
        raise TruthError(f"input {name} not found beside the truth file")
    return {
        "truth": truth,
        "input": target,
        "must": compile_items(truth, "must"),
        "must_not": compile_items(truth, "must_not"),
    }


class _Key:
    """A dict key on the walk's stack, so keys come out just before their values."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def json_strings(value) -> list[str]:
    """Every key, string and number of a JSON document in document order, unescaped, for regexes."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, item in reversed(list(v.items())):
                stack.append(item)
                stack.append(_Key(k))
        elif isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, _Key):
            out.append(str(v.name))
        elif v is not None:
            out.append(str(v))
    return out


def mask_input_paths(text: str, target: Path) -> str:
    """Blank every path that names the input: an echoed file name is not a claim.

    The inputs' names describe them (`..._late_5ms`, `..._accept_len_1.7`), so a regex must
    never be satisfied by the output repeating the path it was given.
    """
    return re.sub(r"\S*" + re.escape(target.name) + r"\S*", "<input>", text)


def without_keys(value, keys: frozenset):
    """The JSON document without the subtrees under `keys` (e.g. what the output rules out)."""
    if isinstance(value, dict):
        return {k: without_keys(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without_keys(v, keys) for v in value]
    return value


def parse_json_docs(stdout: str) -> list:
    """stdout as one JSON document, or the JSON lines in it; [] when it is not JSON."""
    try:
        return [json.loads(stdout)]
    except json.JSONDecodeError:
        docs = []
        for line in stdout.splitlines():
            line = line.strip()
            if line.startswith(("{", "[")):
                try:
                    docs.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return docs


def searchable_texts(
    stdout: str, stderr: str, target: Path, outside: frozenset = frozenset()
) -> list[str]:
    """The output as text, and the JSON values unescaped, with the input's paths masked.

    `outside`: JSON keys whose subtrees are left out (a claim item may say that an entry under
    `ruled_out` or `not_checked` is not a claim of the output).
    """
    docs = parse_json_docs(stdout)
    if docs and outside:
        docs = [without_keys(d, outside) for d in docs]
        raw = "\n".join(json.dumps(d, indent=2, ensure_ascii=False) for d in docs)
    else:
        raw = stdout
    texts = [raw + "\n" + stderr]
    if docs:
        texts.append("\n".join(s for d in docs for s in json_strings(d)))
    return [mask_input_paths(t, target) for t in texts]


def first_match(patterns: list[re.Pattern], texts: list[str]) -> tuple[str, str] | None:
    for pat in patterns:
        for text in texts:
            m = pat.search(text)
            if m:
                lo, hi = max(0, m.start() - 60), min(len(text), m.end() + 60)
                return pat.pattern, text[lo:hi].replace("\n", " ")
    return None


def claim_met(item: dict, texts: list[str]) -> tuple[bool, str | None]:
    """any_of: one regex matches; all_of: every regex matches (both when both are given)."""
    evidence = None
    if item["any_of"]:
        hit = first_match(item["any_of"], texts)
        if hit is None:
            return False, None
        evidence = hit[1]
    for pat in item["all_of"]:
        hit = first_match([pat], texts)
        if hit is None:
            return False, None
        evidence = evidence or hit[1]
    return True, evidence


def run_command(exe: str, command: list[str], target: Path, timeout: float) -> dict:
    """Run one command in its own session; a failure to start, a crash or a timeout is a result.

    On timeout the whole process group is killed, so a hung worker of the command does not outlive it.
    """
    argv = [exe] + [a.replace("{input}", str(target)) for a in command]
    env = dict(os.environ, COLUMNS="100", NO_COLOR="1")
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return {
            "argv": argv,
            "exit": None,
            "state": f"could not start: {exc}",
            "seconds": 0.0,
            "stdout": "",
            "stderr": str(exc),
        }
    try:
        out, err = proc.communicate(timeout=timeout)
        rc, state = proc.returncode, "ran"
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        rc, state = None, f"timed out after {timeout:g} s"
    return {
        "argv": argv,
        "exit": rc,
        "state": state,
        "seconds": round(time.monotonic() - start, 2),
        "stdout": out,
        "stderr": err,
    }


def grade_one(entry: dict, exe: str, timeout: float) -> dict:
    truth = entry["truth"]
    run = run_command(exe, truth["command"], entry["input"], timeout)
    cache: dict[frozenset, list[str]] = {}

    def texts_for(item: dict) -> list[str]:
        if item["outside"] not in cache:
            cache[item["outside"]] = searchable_texts(
                run["stdout"], run["stderr"], entry["input"], item["outside"]
            )
        return cache[item["outside"]]

    musts = []
    for item in entry["must"]:
        ok, evidence = claim_met(item, texts_for(item))
        musts.append({"what": item["what"], "met": ok, "evidence": evidence})
    hits = []
    for item in entry["must_not"]:
        ok, evidence = claim_met(item, texts_for(item))
        if ok:
            hits.append({"what": item["what"], "evidence": evidence})
    met = sum(m["met"] for m in musts)
    exit_ok = run["exit"] in truth["exit"]
    if hits or not exit_ok or (musts and met == 0):
        verdict = "wrong"
    elif met == len(musts):
        verdict = "right"
    else:
        verdict = "partly"
    reasons = []
    if not exit_ok:
        reasons.append(
            f"exit {run['exit'] if run['exit'] is not None else run['state']} not in {truth['exit']}"
        )
    reasons += [f"said: {h['what']}" for h in hits]
    reasons += [f"missing: {m['what']}" for m in musts if not m["met"]]
    return {
        "verdict": verdict,
        "kind": truth["kind"],
        "input": entry["input"].name,
        "must_met": met,
        "must_total": len(musts),
        "must_not_hits": len(hits),
        "exit": run["exit"],
        "exit_ok": exit_ok,
        "state": run["state"],
        "seconds": run["seconds"],
        "reasons": reasons,
        "must": musts,
        "must_not_hit": hits,
        "argv": run["argv"],
        "stdout_tail": run["stdout"][-DETAIL_CHARS:],
        "stderr_tail": run["stderr"][-DETAIL_CHARS:],
    }


def collect(directory: Path, only: str | None) -> list[Path]:
    paths = sorted(p for p in directory.rglob("*" + TRUTH_SUFFIX) if p.is_file())
    return [p for p in paths if only is None or only in p.name]


def totals(results: list[dict]) -> dict:
    out: dict = {"right": 0, "partly": 0, "wrong": 0, "invalid": 0, "by_kind": {}}
    for r in results:
        out[r["verdict"]] += 1
        kind = out["by_kind"].setdefault(
            r.get("kind", "?"), {"right": 0, "partly": 0, "wrong": 0, "invalid": 0}
        )
        kind[r["verdict"]] += 1
    return out


def print_table(results: list[dict], summary: dict) -> None:
    width = max((len(r["input"]) for r in results), default=10)
    for r in results:
        if r["verdict"] == "invalid":
            print(
                f"{'invalid':7}  {r.get('kind', '?'):12}  {r['input']:{width}}  {r['reasons'][0]}"
            )
            continue
        head = (
            f"{r['verdict']:7}  {r['kind']:12}  {r['input']:{width}}  "
            f"must {r['must_met']}/{r['must_total']}, must_not hits {r['must_not_hits']}, "
            f"exit {r['exit'] if r['exit'] is not None else '-'}"
        )
        print(head)
        for reason in r["reasons"]:
            print(f"{'':9}- {reason}")
    print(
        f"# {len(results)} input(s): {summary['right']} right, {summary['partly']} partly, "
        f"{summary['wrong']} wrong"
        + (f", {summary['invalid']} invalid truth" if summary["invalid"] else "")
    )
    for kind, c in sorted(summary["by_kind"].items()):
        extra = f", {c['invalid']} invalid truth" if c["invalid"] else ""
        print(f"#   {kind}: {c['right']} right, {c['partly']} partly, {c['wrong']} wrong{extra}")


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = []
    for path in collect(args.directory, args.only):
        name = path.name[: -len(TRUTH_SUFFIX)]
        try:
            entry = load_truth(path)
        except TruthError as exc:
            results.append({"verdict": "invalid", "input": name, "reasons": [f"{path}: {exc}"]})
            continue
        print(f"grading {entry['input'].name}", file=sys.stderr)
        results.append(grade_one(entry, args.ncclprobe, args.timeout))
    summary = totals(results)
    report = {
        "directory": str(args.directory),
        "ncclprobe": args.ncclprobe,
        "timeout_s": args.timeout,
        "totals": summary,
        "results": results,
    }
    text = json.dumps(report, indent=2) + "\n"
    if args.output is not None:
        write_atomically(args.output, text)
    if args.format == "json":
        sys.stdout.write(text)
    else:
        print_table(results, summary)
    return 1 if summary["invalid"] else 0


if __name__ == "__main__":
    sys.exit(main())
