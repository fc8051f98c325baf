"""Regenerate README's `ncclprobe capture` example from a real run: the torchrun job of
examples/capture/train_ranks.py (three gloo ranks: rank 1 late, rank 2's environment rebuilt without
NCCL_*, rank 0 in host code at step 8) under `ncclprobe capture`, at 100 columns. The README block
between `<!-- capture:begin ... -->` and `<!-- capture:end -->` is replaced by the command, the
capture's own lines on stderr, and the diagnosis cut to each finding's first lines (`...` marks a
cut; the job's own output is left out).

  python examples/readme_capture.py [--readme README.md]   # about a minute on 2 cores
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = re.compile(r"<!-- capture:begin[^>]*-->")
END = "<!-- capture:end -->"
LINES_PER_FINDING = 3


def run() -> tuple[str, list[str], list[str]]:
    """(the command as a user types it, stderr lines, stdout lines) of one capture."""
    torchrun = (
        ["torchrun"]
        if shutil.which("torchrun")
        else [sys.executable, "-m", "torch.distributed.run"]
    )
    shown = ["torchrun"] if shutil.which("torchrun") else ["python", "-m", "torch.distributed.run"]
    job = [
        *("--nproc-per-node", "3", "examples/capture/train_ranks.py"),
        *(
            "--late-rank",
            "1",
            "--filtered-rank",
            "2",
            "--hang-rank",
            "0",
            "--hang-at",
            "12",
            "--steps",
            "14",
        ),
    ]
    options = ["--hang-after", "15", "--profile", "2-5"]
    with tempfile.TemporaryDirectory() as work:
        shutil.copytree(ROOT / "examples" / "capture", Path(work) / "examples" / "capture")
        env = {**os.environ, "COLUMNS": "100", "NCCL_SOCKET_IFNAME": "lo"}
        done = subprocess.run(
            ["ncclprobe", "capture", *options, "--", *torchrun, *job],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    typed = "NCCL_SOCKET_IFNAME=lo " + shlex.join(
        ["ncclprobe", "capture", *options, "--", *shown, *job]
    )
    return typed, done.stderr.splitlines(), done.stdout.splitlines()


def block(typed: str, stderr: list[str], stdout: list[str]) -> list[str]:
    ours = [line for line in stderr if line.startswith("ncclprobe: capture:")]
    report = stdout[next(i for i, line in enumerate(stdout) if line.startswith("# diagnosis of")) :]
    out = ["```", f"$ {typed}", ours[0], "# ...  (the job's own output)"]
    kept, finding, note = [], None, False
    for line in report:
        numbered = re.match(r"^\d+\. \[", line)
        if numbered:
            finding = 0
        elif line.startswith(("ruled out:", "not checked")):
            break
        if finding is None:  # the header and its wrapped lines; the notes left out
            note = line.startswith("# note:") or (note and line.startswith("#   "))
            if not note:
                kept.append(line)
            continue
        finding += 1
        if finding <= LINES_PER_FINDING:
            kept.append(line)
        elif finding == LINES_PER_FINDING + 1:
            kept.append("...")
    return out + kept + ["...", *ours[1:], "```"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", default=str(ROOT / "README.md"))
    args = parser.parse_args()
    readme = Path(args.readme)
    text = readme.read_text(encoding="utf-8")
    begin = BEGIN.search(text)
    if begin is None or END not in text:
        sys.exit(f"{readme}: no capture:begin/end markers")
    lines = block(*run())
    new = text[: begin.end()] + "\n" + "\n".join(lines) + "\n" + text[text.index(END) :]
    temporary = readme.with_name(f".{readme.name}.tmp")
    temporary.write_text(new, encoding="utf-8")
    temporary.replace(readme)
    print(f"{readme}: capture example, {len(lines)} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
