"""The generated `sitecustomize.py` that loads capture's in-job module into the job's processes.

Python imports `sitecustomize` from its path at start-up (the `site` module), so a directory first
on PYTHONPATH holding one is run by every Python process of the job that inherits the environment,
before any of the user's code; `usercustomize` would not do (venvs turn the user site off). The
file is written for one capture: the paths of its configuration and of the in-job module are in
it, so the job's interpreter needs no ncclprobe and reads no variable of ours. It then runs the
`sitecustomize` it shadows, if the interpreter has one (Debian's, a site's own), as Python would
have. Processes started with `python -S`, `-I` or `-E`, or given an environment without our
PYTHONPATH, do not load it: the manifest names them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ncclprobe.evidence.live import capture_dir as D
from ncclprobe.safe_output import dumps_json

INJOB = Path(__file__).with_name("injob.py")

TEMPLATE = """\
# Written by `ncclprobe capture` for one run: loads its in-job module, then the sitecustomize this
# file shadows. Nothing here runs once the capture is over (its directory is gone).
def _ncclprobe_capture():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        if os.path.isdir({directory!r}):
            spec = importlib.util.spec_from_file_location("_ncclprobe_capture_injob", {module!r})
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.install({config!r})
    except Exception as exc:
        sys.stderr.write(f"ncclprobe capture: in-job module not loaded: {{exc}}\\n")
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        shadowed = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shadowed)


_ncclprobe_capture()
del _ncclprobe_capture
"""


def write_hook(
    directory: Path, profile: dict, peer_grace_s: float, fr_respell: dict | None = None
) -> Path:
    """Write the hook directory (`.capture/`) and its configuration; returns the directory that
    goes first on the job's PYTHONPATH. `fr_respell` (where the job's torch was not known before
    it ran): the in-job module adds the older Flight Recorder names in a process whose torch is
    older than `below` (`injob._respell`)."""
    hook = directory / D.PRIVATE
    hook.mkdir(parents=True, exist_ok=True)
    config = hook / "injob.json"
    config.write_text(
        dumps_json(
            {
                "dir": str(directory),
                "fr_prefix": str(directory / D.FLIGHT_RECORDER / D.FR_PREFIX),
                "profile": profile,
                "peer_grace_s": peer_grace_s,
                "fr_respell": fr_respell,
            }
        ),
        encoding="utf-8",
    )
    text = TEMPLATE.format(directory=str(directory), module=str(INJOB), config=str(config))
    (hook / "sitecustomize.py").write_text(text, encoding="utf-8")
    for name in (D.NCCL_LOGS, D.FLIGHT_RECORDER, D.PROFILES, D.ENGINE_PROFILES, D.CONTROL):
        (directory / name).mkdir(exist_ok=True)
    return hook


def request(directory: Path, what: str, generation: int, word: str) -> None:
    """Ask the in-job module of every process for something (`dump`, `profile`): a new generation
    is a new request; the file is replaced whole."""
    target = directory / D.CONTROL / what
    temporary = target.with_name(f".{what}.tmp")
    temporary.write_text(f"{generation} {word}\n", encoding="utf-8")
    temporary.replace(target)


def injob_records(directory: Path) -> dict[int, dict]:
    """What the in-job module recorded per pid (the processes it ran in)."""
    found = {}
    for path in sorted((directory / D.INJOB).glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            found[int(doc["pid"])] = doc
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced right now, or not ours
    return found


def events(directory: Path) -> int:
    """How many events the in-job module has recorded, over every process."""
    return sum(len(r.get("events") or ()) for r in injob_records(directory).values())


def progress(directory: Path) -> int:
    """The steps every process has counted so far, summed."""
    total = 0
    for path in (directory / D.PROGRESS).glob("*"):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        total += int(text) if text.isdigit() else 0
    return total
