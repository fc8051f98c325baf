"""The terminal walk one string at a time (issue 40 §1; tests/test_trust_terminal.py plants every
string at once, in CI).

Run: python examples/bench_terminal_walk.py [--per-input 60] [--json OUT]   (CPU only)

For every input kind of tests/test_trust_terminal.py (NCCL logs, nccl-tests text and -J,
nvbandwidth, p2pBandwidthLatencyTest, collect-env, check_env, topology, server log, job log,
profile, engine trace, results, Flight Recorder dumps as pickles and JSON): each string of a JSON
input alone, or each line of a text input alone (`--per-input` of them, drawn with a fixed seed;
0: all), gets the payload of tests/data/control.py (ESC sequences, OSC 0/52, CR, BS, BEL, C1 CSI,
bidi overrides, zero-width and tag characters); the command that reads it runs in table,
`--wide`, CSV and JSON. Counted: runs, runs whose output shows the payload (escaped), exits by
code, and raw control characters on stdout or stderr (must be 0).
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cases(base: Path, per_input: int):
    """(kind, path, command) for each planted string or line."""
    from ncclprobe.evidence.hang.safe_pickle import loads_data
    from tests.data.control import JSON_PAYLOAD, PAYLOAD, slots
    from tests.test_trust_terminal import FIXTURES, FR, INPUTS

    count = 0
    for name, fixture, command in INPUTS:
        text = (FIXTURES / fixture).read_text()
        rng = random.Random(name)
        try:
            docs = [json.loads(text)]
            lines_of_json = False
        except ValueError:
            try:
                docs = [json.loads(line) for line in text.splitlines() if line.strip()]
                lines_of_json = True
            except ValueError:
                docs = None
        if docs is not None:
            total = sum(len(slots(doc)) for doc in docs)
            picks = (
                range(total)
                if not per_input
                else sorted(rng.sample(range(total), min(per_input, total)))
            )
            for pick in picks:
                fresh = json.loads(json.dumps(docs))
                found = [s for doc in fresh for s in slots(doc)]
                container, key = found[pick]
                container[key] += JSON_PAYLOAD
                body = (
                    "".join(json.dumps(d) + "\n" for d in fresh)
                    if lines_of_json
                    else json.dumps(fresh[0])
                )
                count += 1
                path = base / f"{count}-{Path(fixture).name}"
                path.write_text(body, encoding="utf-8", errors="surrogatepass")
                yield name, str(path), command
            continue
        lines = text.splitlines()
        picks = (
            range(len(lines))
            if not per_input
            else sorted(rng.sample(range(len(lines)), min(per_input, len(lines))))
        )
        for pick in picks:
            planted = list(lines)
            planted[pick] = f"{planted[pick]} {PAYLOAD}"
            count += 1
            path = base / f"{count}-{Path(fixture).name}"
            path.write_text("\n".join(planted) + "\n")
            yield name, str(path), command
    dumps = {d.name: loads_data(d.read_bytes(), str(d)) for d in sorted((FR / "dumps").iterdir())}
    all_slots = [(n, i) for n, doc in dumps.items() for i in range(len(slots(doc)))]
    rng = random.Random("flight recorder")
    picks = all_slots if not per_input else rng.sample(all_slots, min(per_input, len(all_slots)))
    for dump_name, index in picks:
        for form in ("pickle", "json"):
            count += 1
            folder = base / f"{count}-fr"
            folder.mkdir()
            for name, doc in dumps.items():
                fresh = pickle.loads(pickle.dumps(doc))
                if name == dump_name:
                    container, key = slots(fresh)[index]
                    container[key] += JSON_PAYLOAD
                data = pickle.dumps(fresh, 2) if form == "pickle" else json.dumps(fresh).encode()
                (folder / name).write_bytes(data)
            yield f"flight recorder {form}", str(folder), ["diagnose", "--flight-recorder"]


def main() -> int:
    from click.testing import CliRunner

    from ncclprobe.cli import cli
    from tests.data.control import SHOWN, raw_controls

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-input", type=int, default=60)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    formats = (["--format", "table"], ["--wide"], ["--format", "csv"], ["--format", "json"])
    runner, codes, shown, leaks, runs = CliRunner(), Counter(), Counter(), [], Counter()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for kind, path, command in cases(Path(tmp), args.per_input):
            for fmt in formats:
                argv = [fmt[0], *command, path] if fmt == ["--wide"] else [*command, path, *fmt]
                result = runner.invoke(cli, argv, prog_name="ncclprobe", env={"COLUMNS": "100"})
                text = result.stdout + result.stderr
                runs[kind] += 1
                codes[result.exit_code] += 1
                shown[kind] += SHOWN in text or "\\u202eRLO" in result.stdout
                if raw_controls(text):
                    leaks.append((kind, path, fmt, raw_controls(text)))
    doc = {
        "runs": sum(runs.values()),
        "by_kind": {k: {"runs": runs[k], "shown": shown[k]} for k in runs},
        "exit_codes": dict(sorted(codes.items())),
        "raw_control_characters": leaks,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(doc, indent=1))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 1 if leaks or any(c not in (0, 1, 2, 3) for c in codes) else 0


if __name__ == "__main__":
    sys.exit(main())
