"""A running job's processes as env-check reads them: the tree from /proc (`walk`), what each
process's NCCL log says it read (`logcheck`, by pid, this host's lines only), and what the user
expects each to have (`--expect`, `--expect-from`): the evidence the process-environment rule set
(`ncclprobe.diagnose.process_env`) judges. Gathered live by `ncclprobe.gather.processes`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ncclprobe.errors import UsageProblem
from ncclprobe.evidence.live.logcheck import ProcessNcclLog
from ncclprobe.evidence.live.walk import ProcessInfo
from ncclprobe.secrets import display_value


@dataclass(frozen=True)
class Expectation:
    variable: str
    value: str
    source: str  # "--expect" or the recommendation file's path


def merge(expectations: Iterable[Expectation]) -> list[Expectation]:
    """One expectation per variable; two different values for one variable is a usage error."""
    chosen: dict[str, Expectation] = {}
    for item in expectations:
        earlier = chosen.get(item.variable)
        if earlier is not None and earlier.value != item.value:
            raise UsageProblem(
                f"{item.variable} is expected with two values: "
                f"{display_value(item.variable, earlier.value)!r} ({earlier.source}) and "
                f"{display_value(item.variable, item.value)!r} ({item.source})"
            )
        chosen[item.variable] = item
    return list(chosen.values())


@dataclass
class ProcessEvidence:
    root_pid: int
    processes: list[ProcessInfo]  # the root and its descendants, parents first
    logs: dict[int, ProcessNcclLog] = field(default_factory=dict)  # this host's, by pid
    expectations: list[Expectation] = field(default_factory=list)
    show_all: bool = False  # every variable shown, not only NCCL's and its neighbours'
    notes: list[str] = field(default_factory=list)  # what this reading cannot tell

    def by_pid(self) -> dict[int, ProcessInfo]:
        return {info.pid: info for info in self.processes}
