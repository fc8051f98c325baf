"""Read `vllm collect-env` (also `python collect_env.py`) and `python -m sglang.check_env` text.

What they print that matters here: versions (PyTorch, CUDA, driver, vLLM or SGLang, the NCCL that pip
installed as `nvidia-nccl-cu12==X`), the `nvidia-smi topo -m` block (`GPU Topology:` in vLLM,
`NVIDIA Topology:` in SGLang; rocm-smi text on ROCm boxes), and, in vLLM, the environment variables
it shows (`NAME=value` lines, or an `Environment Variables` section in newer versions). Users paste it
indented, inside markdown, or with other text around it; common indentation is removed first.

The environment is the one of the shell that ran collect-env, not the one the serving workers
saw: a setting here may never reach the workers (or workers may have more). `ncclprobe env-check
--pid` reads the workers' own environment.

The platform is read from the lines each tool prints for it, never assumed to be NVIDIA's:
sglang's check_env prints `CUDA available` / `ROCM available` / `MUSA available` with `CUDA_HOME` /
`ROCM_HOME` / `MUSA_HOME`, a driver version per vendor and a `NVIDIA Topology:` / `AMD Topology:`
(rocm-smi --showtopotype) / `MTHREADS Topology:` block (sglang/check_env.py and its MUSA port);
vLLM's and torch's collect_env print `CUDA used to build PyTorch`, `ROCM used to build PyTorch`,
`HIP runtime version` (N/A where not used) and `GPU models and configuration`. A non-NVIDIA
platform's topology block is named and not read as nvidia-smi's.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.failure_lines import FailureLines, scan
from ncclprobe.evidence.node.topo import Topology, node_facts, parse_topo
from ncclprobe.evidence.text import read_text_file, strip_ansi
from ncclprobe.nccl.node import NodeFacts
from ncclprobe.numbers import ascii_re
from ncclprobe.secrets import mask_env

CAVEAT = (
    "collect-env shows the environment of the shell that ran it, not of the serving workers; "
    "`ncclprobe env-check --pid PID` reads what a worker really has"
)
# a key's spaces only between its words (a lazy key before `\s*` tried every split of a line of
# spaces: quadratic); at most 80 pieces (keys over 40 characters are not read anyway)
_KEY_VALUE = ascii_re(
    r"^(?P<key>[A-Za-z](?:[A-Za-z0-9._/()-]| +(?=[A-Za-z0-9._/()-])){0,80})\s*:\s*(?P<value>.*)$"
)
_ENV = ascii_re(r"^(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")
_PIP = ascii_re(r"^\[(?:pip3?|conda)\]\s+(?P<name>[A-Za-z0-9_.-]+)(?:==|\s+)(?P<version>\S+)")
# `GPU 0: NVIDIA H100 80GB HBM3` (collect-env), `GPU 0,1,2: NVIDIA H20` and `GPU 0,1 Compute
# Capability: 9.0` (sglang check_env), `Architecture: x86_64` (lscpu in vLLM's CPU section)
# `GPU models and configuration: AMD Instinct MI300X (gfx942:sramecc+:xnack-)`: the name, less
# its gfx target (ROCm's torch collect_env)
_GPU_ON_KEY_LINE = re.compile(r"^(?P<name>[^()]+?)\s*(?:\((?P<arch>gfx[^)]*)\))?$")
_GPU = re.compile(r"^GPU (?:\d+)(?:\s*,\s*\d+)*\s*(?::|(?= Compute))\s*(?P<what>.+)$")
_CAPABILITY = re.compile(r"^Compute Capability:\s*(?P<major>\d{1,2})\.(?P<minor>\d)$")
_ARCH = re.compile(r"^Architecture:\s*(?P<arch>x86_64|aarch64|ppc64le|arm64)$")
_TOPO_HEADERS = ("GPU Topology", "NVIDIA Topology", "GPU topology")
_OTHER_TOPO = ascii_re(r"^(?P<name>AMD|MTHREADS|MUSA|ROCM|ROCm) Topology\s*:")
# (platform, its vendor, the keys whose value says it is in use); the first platform with a key
# whose value is set (not N/A, None, False or empty) is the platform
PLATFORMS = (
    ("MUSA", "Moore Threads", ("MUSA available", "MUSA_HOME", "MUSA Driver Version", "MCC")),
    (
        "ROCm",
        "AMD",
        (
            "ROCM available",
            "ROCM_HOME",
            "ROCM Driver Version",
            "HIPCC",
            "ROCM used to build PyTorch",
            "HIP runtime version",
            "ROCM Version",
        ),
    ),
    (
        "CUDA",
        "NVIDIA",
        (
            "CUDA available",
            "CUDA_HOME",
            "CUDA Driver Version",
            "NVCC",
            "CUDA used to build PyTorch",
            "Nvidia driver version",
            "CUDA runtime version",
        ),
    ),
)
_UNSET = frozenset(("", "n/a", "none", "false", "not available", "could not collect"))
# variables collect-env prints that describe the image, not NCCL settings
IMAGE_FACTS = ("NCCL_VERSION",)


@dataclass
class CollectEnv:
    tool: str  # "vllm collect-env" | "sglang check_env"
    versions: dict[str, str]
    nccl: dict[str, str]  # source -> version
    env: dict[str, str]
    topology: Topology | None
    notes: list[str] = field(default_factory=list)
    # "MUSA (Moore Threads)", "ROCm (AMD)", "CUDA (NVIDIA)": the lines that say which; None unsaid
    platform: str | None = None
    platform_lines: list[str] = field(default_factory=list)
    gpu_names: tuple[str, ...] = ()  # `GPU 0: NVIDIA GeForce RTX 5090` lines, one per name
    compute_capabilities: tuple[int, ...] = ()  # `GPU 0,1 Compute Capability: 9.0` (check_env)
    host_arch: str | None = None  # `Architecture: x86_64` (lscpu's, in the CPU section)
    # lines that look like a failure (a tool that could not run: `Failed to initialize NVML`, CUDA
    # errors), shown as they are (`evidence.failure_lines`)
    failure_lines: FailureLines = field(default_factory=lambda: FailureLines("output"))

    @property
    def nccl_version(self) -> str | None:
        return self.nccl.get("pip nvidia-nccl") or self.nccl.get("NCCL version line")

    @property
    def nccl_settings(self) -> dict[str, str]:
        return {k: v for k, v in self.env.items() if k.startswith("NCCL_") and k not in IMAGE_FACTS}

    @property
    def node(self) -> NodeFacts | None:
        """What NCCL's topology rules know of the GPUs its topology block shows (None without one)."""
        return node_facts(self.topology) if self.topology is not None else None

    def to_json(self) -> dict:
        return {
            "schema_version": 1,
            "kind": "collect-env",
            "tool": self.tool,
            "versions": self.versions,
            "nccl_versions": self.nccl,
            "nccl_version": self.nccl_version,
            "env": mask_env(self.env),
            "nccl_settings": mask_env(self.nccl_settings),
            "platform": self.platform,
            "platform_lines": self.platform_lines,
            "gpu_names": list(self.gpu_names),
            "topology": self.topology.to_json() if self.topology else None,
            "caveat": CAVEAT,
            "notes": self.notes,
        }


def looks_like_collect_env(text: str) -> bool:
    head = text[:300_000]
    return bool(
        re.search(
            r"^[ \t]*(PyTorch version\s*:|vLLM Version\s*:|sglang\s*:|Versions of relevant libraries)",
            head,
            re.M,
        )
    )


def load_collect_env(path: str | Path) -> CollectEnv:
    """The one loader of a collect-env file (diagnose, knobs --lint): read, then parsed."""
    return parse_collect_env(read_text_file(path, "collect-env output"), str(path))


# characters of a line kept: collect-env's longest real lines (an environment value, a library
# list) are a few hundred; one line of 50 MB cost 1.1 GB once split into words (the topology's)
MAX_LINE = 8192


def parse_collect_env(text: str, source: str = "collect-env output") -> CollectEnv:
    raw = text.splitlines()  # \r\n is one break
    long = sum(len(line) > MAX_LINE for line in raw)
    lines = textwrap.dedent("\n".join(strip_ansi(line[:MAX_LINE]) for line in raw)).splitlines()
    del raw
    tool = (
        "sglang check_env"
        if any(re.match(r"^sglang\s*:", l.strip()) for l in lines)
        else "vllm collect-env"
        if any("vLLM Version" in l for l in lines)
        else None
    )
    if tool is None:
        if not any(l.strip().startswith("PyTorch version") for l in lines):
            raise UsageProblem(
                "not collect-env or check_env output: no 'PyTorch version', 'vLLM Version' or "
                "'sglang:' line"
            )
        tool = "torch collect_env"
    versions: dict[str, str] = {}
    nccl: dict[str, str] = {}
    env: dict[str, str] = {}
    said: dict[str, str] = {}  # every `key: value` line's first value, for the platform
    gpus: list[str] = []
    caps: list[int] = []
    arch: str | None = None
    for line in lines:
        s = line.strip()
        gpu = _GPU.match(s)
        if gpu:
            cap = _CAPABILITY.match(gpu["what"])
            if cap:
                caps.append(int(cap["major"]) * 10 + int(cap["minor"]))
            elif gpu["what"] not in gpus:
                gpus.append(gpu["what"])
            continue
        machine = _ARCH.match(s)
        if machine and arch is None:
            arch = machine["arch"]
        pip = _PIP.match(s)
        if pip:
            if pip["name"].startswith("nvidia-nccl"):
                nccl["pip nvidia-nccl"] = pip["version"]
            continue
        var = _ENV.match(s)
        if var:
            env[var["name"]] = var["value"]
            continue
        kv = _KEY_VALUE.match(s)
        if kv and kv["value"] and len(kv["key"]) < 40:
            key = kv["key"].strip()
            said.setdefault(key, kv["value"].strip())
            if key in (
                "PyTorch version",
                "PyTorch",
                "vLLM Version",
                "sglang",
                "CUDA runtime version",
                "CUDA used to build PyTorch",
                "Nvidia driver version",
                "CUDA Driver Version",
                "Python version",
                "Python",
                "ROCM Version",
                "NCCL version",
                "transformers",
                "triton",
            ):
                if kv["value"].strip() not in ("Could not collect", "N/A"):  # said, not a version
                    versions[key] = kv["value"].strip()
    if not gpus:  # ROCm's torch prints its GPU on the key's own line, no `GPU 0:` lines below
        gpus += _gpu_on_its_line(said.get("GPU models and configuration", ""))
    if "NCCL version" in versions:
        nccl["NCCL version line"] = versions["NCCL version"]
    if "NCCL_VERSION" in env:
        nccl["NCCL_VERSION variable (the image's system NCCL; torch loads its own)"] = env[
            "NCCL_VERSION"
        ]
    # masked as read (ncclprobe.secrets): every user of it (import's table, knobs --lint, diagnose)
    # then shows only what the policy shows; a value the mask changes is no valid setting anyway
    out = CollectEnv(tool, versions, nccl, mask_env(env), None)
    out.gpu_names, out.compute_capabilities, out.host_arch = tuple(gpus), tuple(set(caps)), arch
    out.platform, out.platform_lines = _platform(said, lines)
    if long:
        out.notes.append(
            f"{long} line(s) longer than {MAX_LINE} characters read only to that length"
        )
    out.topology = _topology(lines, out.notes)
    if out.platform:
        out.notes.append(_platform_note(out))
    if tool == "sglang check_env":
        out.notes.append(
            "sglang check_env prints no environment variables: no NCCL setting to lint from it"
        )
    out.notes.append(CAVEAT)
    out.failure_lines = scan(lines, source)
    return out


def _gpu_on_its_line(value: str) -> list[str]:
    value = value.strip()
    if value in ("", "Could not collect", "N/A", "None") or value.startswith("GPU "):
        return []
    m = _GPU_ON_KEY_LINE.match(value)
    return [m["name"]] if m else [value]


def _platform(said: dict[str, str], lines: list[str]) -> tuple[str | None, list[str]]:
    """The first platform (MUSA, ROCm, CUDA) with a key set, and the lines that say so."""
    other = next((m["name"] for l in lines if (m := _OTHER_TOPO.match(l.strip()))), None)
    for name, vendor, keys in PLATFORMS:
        shown = [f"{k}: {said[k]}" for k in keys if said.get(k, "").lower() not in _UNSET]
        if name != "CUDA" and other and other.upper() in (vendor.upper(), name.upper(), "MTHREADS"):
            shown.append(f"{other} Topology:")
        if shown:
            return f"{name} ({vendor})", shown[:4]
    return None, []


def _platform_note(env: CollectEnv) -> str:
    gpus = ", ".join(env.gpu_names[:4])
    said = f"platform {env.platform}, read from `{env.platform_lines[0]}`" + (
        f" ({gpus})" if gpus else ""
    )
    if env.platform and env.platform.startswith("ROCm"):
        return said + ": RCCL, AMD's port of NCCL, is its collective library"
    if env.platform and not env.platform.startswith("CUDA"):
        return (
            said + ": not an NVIDIA or AMD system; its collective library is the vendor's, "
            "which ncclprobe's NCCL and RCCL readings do not cover"
        )
    return said


def _topology(lines: list[str], notes: list[str]) -> Topology | None:
    other = next((m for l in lines if (m := _OTHER_TOPO.match(l.strip()))), None)
    if other is not None:
        notes.append(
            f"topology block '{other['name']} Topology' not read: it is not nvidia-smi's "
            "(ncclprobe reads nvidia-smi topo -m)"
        )
        return None
    start = next(
        (
            n
            for n, l in enumerate(lines)
            if l.strip().rstrip(":").strip() in _TOPO_HEADERS
            or any(l.strip().startswith(h + ":") for h in _TOPO_HEADERS)
        ),
        None,
    )
    if start is None:
        notes.append("no GPU topology block")
        return None
    first = lines[start].split(":", 1)[1].strip()
    block = ([first] if first else []) + lines[start + 1 :]
    try:
        topo = parse_topo("\n".join(block))
    except UsageProblem as exc:
        text = " ".join(block[:3])
        why = "rocm-smi output (ROCm), not nvidia-smi" if "ROCm" in text else str(exc)
        notes.append(f"topology block not read: {why}")
        return None
    topo.source = "collect-env"
    return topo
