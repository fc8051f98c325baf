"""Every regular expression ncclprobe matches input against, attacked with long lines built from
its own pieces: the audit for catastrophic and polynomial backtracking (issue 40 §3).

Run: python examples/bench_regex_bombs.py [--size 65536] [--json OUT]   (CPU only, a few minutes)

Which patterns: every compiled pattern held by a module of the package (module constants, class
attributes, tuples and dicts of them), and every pattern compiled while the readers read the real
fixtures (re's own cache after `ncclprobe import`, `nccl-log`, `diagnose`, `knobs --lint` ran over
them in this process): inline `re.search(r"...", line)` calls included.

How: a static linter (regexploit, 2021) was tried first: it reports only cubic or worse, misses
`(a|a)*b` and does not parse Python 3.11's atomic groups; it never saw the quadratic shape that cost
7 s per MB (`X\\s(?:.*\\s)?Y` searched: every occurrence of X scans to the line's end). So the audit
is empirical: for each pattern, lines of `--size` characters made of its own literal runs (each
alone, and each followed by a space, a letter, a digit, a colon, a tab...) and of generic fillers
(spaces, digits, `a `, `0.`, `[`, `=`...), searched, matched and iterated over (`finditer`); a
pattern whose time grows faster than the line (the same line at twice the size takes more than 3x
and over 50 ms, confirmed by the best of two timings) is named with the line that shows it. Prints
one row per flagged pattern and the totals; exits 1 when any pattern is flagged.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
FILLERS = (
    " ",
    "a",
    "0",
    "a ",
    "0 ",
    "0.",
    ".",
    ":",
    "=",
    ",",
    "-",
    "[",
    "]",
    "(",
    "/",
    "\t",
    "x=1 ",
    "a:",
    "0:",
    "[0] ",
    "\\",
    '"',
    "'",
    "#",
    "|",
    "_",
    "%",
    "+",
    "@",
    "a=",
    "0x",
    "\n",
    " \n",
    "a\n",
    "0\n",
    "=\n",
)
AFTER = ("", " ", "a", "0", ":", "=")


def module_patterns() -> dict[tuple[str, int], str]:
    """(pattern, flags) -> where: every compiled pattern a module of the package holds."""
    import ncclprobe

    found: dict[tuple[str, int], str] = {}

    def walk(obj, where: str, depth: int = 0) -> None:
        if isinstance(obj, re.Pattern):
            if isinstance(obj.pattern, str):
                found.setdefault((obj.pattern, obj.flags), where)
            return
        if depth > 3:
            return
        if isinstance(obj, (list, tuple, set, frozenset)):
            for item in obj:
                walk(item, where, depth + 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                walk(item, where, depth + 1)
        elif isinstance(obj, type) and obj.__module__ == where.split(":")[0]:
            for name, item in vars(obj).items():
                walk(item, f"{where}.{name}", depth + 1)

    for info in pkgutil.walk_packages(ncclprobe.__path__, "ncclprobe."):
        if info.name.startswith(("ncclprobe.engine", "ncclprobe.probes")):
            continue  # the engine's tokenizer and the probes read no user's file
        try:
            module = importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 (an optional extra missing: its patterns are not reached)
            continue
        for name, value in vars(module).items():
            walk(value, f"{module.__name__}:{name}")
    return found


def used_patterns() -> dict[tuple[str, int], str]:
    """Patterns compiled while the real fixtures are read (re's cache: inline calls too)."""
    from click.testing import CliRunner

    from ncclprobe.cli import cli

    runs = [["nccl-log", str(p)] for p in sorted((FIXTURES / "nccl_logs").glob("*.log"))[:40]] + [
        ["import", str(p)]
        for kind in ("nccl_tests", "p2p", "nvbandwidth", "collect_env")
        for p in sorted((FIXTURES / kind).glob("*"))
        if p.suffix in (".txt", ".json", ".log")
    ]
    runs += [
        ["knobs", "--lint", "--collect-env", str(p)]
        for p in sorted((FIXTURES / "collect_env").glob("*.txt"))[:6]
    ]
    runs += [["topo", "--from", str(p)] for p in sorted((FIXTURES / "topo").glob("*.txt"))[:6]]
    runs += [
        ["diagnose", "--server-log", str(p)]
        for p in sorted((FIXTURES / "server_logs").glob("*.log"))
    ]
    runs += [
        ["diagnose", "--log", str(p)]
        for p in sorted(FIXTURES.glob("flight_recorder/*/*/torchrun.log"))[:4]
    ]
    runner = CliRunner()
    re.purge()
    for args in runs:
        runner.invoke(cli, args, prog_name="ncclprobe")
    return {
        (key[1], key[2]): "re cache after the fixtures"
        for key in list(re._cache)  # type: ignore[attr-defined]
        if isinstance(key[1], str)
    }


_CATEGORY = {
    "CATEGORY_DIGIT": "0",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "a",
    "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": " ",
}
_CANDIDATES = "a0 :.-x=,/_[]()Z\t"


def _in_class(items, ch: str) -> bool:
    negate, hit = False, False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name.startswith("LITERAL"):
            hit |= ord(ch) == arg
        elif name.startswith("RANGE"):
            hit |= arg[0] <= ord(ch) <= arg[1]
        elif name == "CATEGORY":
            hit |= bool(
                re.fullmatch(
                    {
                        "CATEGORY_DIGIT": r"\d",
                        "CATEGORY_NOT_DIGIT": r"\D",
                        "CATEGORY_SPACE": r"\s",
                        "CATEGORY_NOT_SPACE": r"\S",
                        "CATEGORY_WORD": r"\w",
                        "CATEGORY_NOT_WORD": r"\W",
                    }.get(str(arg), "(?!)"),
                    ch,
                    re.ASCII,
                )
            )
    return hit != negate


def _one(op, arg) -> str:
    """A character the single-character item matches."""
    name = str(op)
    if name.startswith("LITERAL"):
        return chr(arg)
    if name.startswith("NOT_LITERAL"):
        return "a" if arg != ord("a") else "b"
    if name == "ANY":
        return "a"
    if name == "IN":
        return next((c for c in _CANDIDATES if _in_class(arg, c)), "a")
    if name == "CATEGORY":
        return _CATEGORY.get(str(arg), "a")
    return ""


def samples(items, limit: int = 12) -> list[list[str]]:
    """Strings the pattern matches, as lists of tokens (one per element): each branch of each
    alternation in turn (up to `limit`), repeats once or their minimum."""
    results: list[list[str]] = [[]]
    for op, arg in items:
        name = str(op)
        if name in ("SUBPATTERN",):
            options = samples(arg[-1], limit)
        elif name == "ATOMIC_GROUP":
            options = samples(arg, limit)
        elif name == "BRANCH":
            options = [s for branch in arg[1] for s in samples(branch, limit)][:limit]
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, sub = arg
            options = [s * max(low, 1) for s in samples(sub, limit)][:limit]
        elif name in ("AT", "ASSERT", "ASSERT_NOT", "GROUPREF", "GROUPREF_EXISTS"):
            options = [[]]
        elif str(op).startswith("LITERAL"):  # a literal run is one token: `NCCL INFO`
            results = [
                r[:-1] + [r[-1] + chr(arg)]
                if r and r[-1].startswith(_RUN)
                else r + [_RUN + chr(arg)]
                for r in results
            ]
            continue
        else:
            options = [[_one(op, arg)]]
        results = [r + o for r in results for o in options][:limit]
    return results


_RUN = "\x00run:"  # marks a literal run while a sample is built (see `tokens`)


def tokens(sample: list[str]) -> list[str]:
    return [t.removeprefix(_RUN) for t in sample]


def attacks(pattern: str, flags: int, size: int):
    """(piece, line): every prefix of every sample repeated, alone and followed by a filler
    character; the generic fillers repeated; a sample's prefix followed by one long filler."""
    try:
        parsed = re._parser.parse(pattern, flags)  # type: ignore[attr-defined]
        found = [tokens(t) for t in samples(list(parsed))]
    except Exception:  # noqa: BLE001
        found = []
    pieces: list[str] = []
    for sample in found:
        for k in range(1, min(len(sample), 40) + 1):
            prefix = "".join(sample[:k])
            pieces += [prefix + a for a in AFTER]
    pieces += list(FILLERS)
    for piece in dict.fromkeys(p for p in pieces if p):
        yield piece, (piece * (size // len(piece) + 1))[:size]
    for sample in found[:4]:
        for k in range(1, min(len(sample), 40) + 1):
            prefix = "".join(sample[:k])
            for filler in (" ", "a", "0"):
                yield f"{prefix!r} + {filler!r}*", (prefix + filler * size)[:size]


def timed(compiled: re.Pattern, line: str) -> float:
    started = time.perf_counter()
    compiled.search(line)
    compiled.match(line)
    for _ in compiled.finditer(line):
        pass
    return time.perf_counter() - started


def audit(patterns: dict[tuple[str, int], str], size: int) -> tuple[list[dict], int]:
    flagged, cases = [], 0
    for (pattern, flags), where in sorted(patterns.items(), key=lambda kv: kv[1]):
        compiled = re.compile(pattern, flags)
        for piece, line in attacks(pattern, flags, size):
            cases += 1
            small = timed(compiled, line)
            if small < 0.005:
                continue
            big = timed(compiled, line + line)
            if big > 0.05 and big > 3 * small:  # confirmed by the best of two (a loaded machine)
                small = min(small, timed(compiled, line))
                big = min(big, timed(compiled, line + line))
            if big > 0.05 and big > 3 * small:
                flagged.append(
                    {
                        "where": where,
                        "pattern": pattern,
                        "piece": piece,
                        "size": size,
                        "seconds": round(small, 3),
                        "seconds_at_twice": round(big, 3),
                    }
                )
                break
    return flagged, cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1 << 16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    patterns = module_patterns()
    patterns.update({k: v for k, v in used_patterns().items() if k not in patterns})
    flagged, cases = audit(patterns, args.size)
    for row in flagged:
        print(
            f"{row['where']}: {row['pattern']!r}\n    {row['piece']!r} x {row['size']}: "
            f"{row['seconds']} s, twice as long {row['seconds_at_twice']} s"
        )
    summary = {
        "patterns": len(patterns),
        "lines": cases,
        "flagged": len(flagged),
        "size": args.size,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({**summary, "rows": flagged}, indent=1) + "\n")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
