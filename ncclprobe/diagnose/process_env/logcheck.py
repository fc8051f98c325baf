"""Cross-check /proc against what NCCL itself says it read (`--log`, NCCL_DEBUG=INFO logs).

/proc/PID/environ is the environment at exec; NCCL's `VAR set by environment to VALUE` lines are
what it found when it looked (`ncclprobe.evidence.live.logcheck` reads them). The three
disagreements worth a user's time:
  set, never read     in /proc, but NCCL never reported reading it (unused on this path, a name
                      NCCL doesn't know, or the ENV debug subsystem was off);
  read, other value   NCCL read a value different from /proc (the process changed it at runtime);
  read, not in /proc  NCCL read it but exec didn't carry it (set in os.environ/setenv inside the
                      process, or from ~/.nccl.conf or /etc/nccl.conf).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ncclprobe.evidence.live.logcheck import normalise
from ncclprobe.nccl.recipes import PROOF_VARIABLES
from ncclprobe.secrets import display_value

# NCCL reads these without a `set by environment` line, so their absence proves nothing;
# NCCL_VERSION is not NCCL's at all: NVIDIA's containers set it to the NCCL they ship.
NOT_ECHOED = frozenset(
    {
        *PROOF_VARIABLES,
        "NCCL_DEBUG_TIMESTAMP_FORMAT",
        "NCCL_DEBUG_TIMESTAMP_LEVELS",
        "NCCL_CONF_FILE",
        "NCCL_NO_CACHE",
        "NCCL_VERSION",
    }
)


@dataclass(frozen=True)
class Disagreement:
    pid: int
    variable: str
    kind: str  # "set, never read" | "read, other value" | "read, not in /proc"
    proc_value: str | None
    nccl_value: str | None

    @property
    def severity(self) -> str:
        """Only expectations and lint decide the exit code; these explain what /proc hides."""
        return "info" if self.kind == "read, not in /proc" else "warning"

    def to_json(self) -> dict:
        return {
            "pid": self.pid,
            "variable": self.variable,
            "kind": self.kind,
            "severity": self.severity,
            "proc_value": display_value(self.variable, self.proc_value),
            "nccl_value": display_value(self.variable, self.nccl_value),
        }


def cross_check(
    pid: int, proc_env: Mapping[str, str], nccl_env: Mapping[str, str]
) -> list[Disagreement]:
    out = []
    for name in sorted(set(proc_env) | set(nccl_env)):
        if not name.startswith("NCCL_") or name in NOT_ECHOED:
            continue
        in_proc, in_log = proc_env.get(name), nccl_env.get(name)
        if in_log is None and in_proc is not None:
            out.append(Disagreement(pid, name, "set, never read", in_proc, None))
        elif in_log is not None and in_proc is None:
            out.append(Disagreement(pid, name, "read, not in /proc", None, in_log))
        elif in_log is not None and normalise(name, in_proc) != normalise(name, in_log):
            out.append(Disagreement(pid, name, "read, other value", in_proc, in_log))
    return out
