"""A launcher's own failure lines: what mpirun, srun, aprun or the shell printed when the program
it started failed, or never started.

A job's output is often only that: the program printed nothing (a missing library, a binary not
found, a rank killed before its first line) and the launcher's report is the one evidence. Each
pattern is a line the launcher itself prints, taken from its source or its documented messages:
- Open MPI (orte/prte help texts): `mpirun noticed that process rank N with PID P on node H exited
  on signal S (...)`, `mpirun was unable to launch the specified application ...`, `mpirun detected
  that one or more processes exited with non-zero status ...`, `Primary job  terminated normally,
  but N process returned a non-zero exit code.`, `There are not enough slots available ...`,
  `ORTE was unable to reliably start one or more daemons.`; prterun/mpiexec for mpirun;
- MPICH's Hydra: the `BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES` banner with its
  `EXIT CODE: N` line, `[mpiexec@host] ...` lines that name an error;
- Slurm: `srun: error: ...`, `slurmstepd: error: ...`, `srun: Job step aborted ...`;
- Cray ALPS: `Application N exit codes: ...`, `aprun: ...` lines that name an error or a signal;
- the dynamic loader: `...: error while loading shared libraries: ...`; the shell, for an nccl-tests
  binary (`..._perf: No such file or directory`, `command not found`, `Permission denied`).
Exit codes count only when not 0.
The lines are shown verbatim (masked); what they prove is that the launch or the program failed,
not why the program did.
"""

from __future__ import annotations

from ncclprobe.numbers import ascii_re
from ncclprobe.secrets import mask_text

_LAUNCHER_FAILURE = ascii_re(
    r"^(?:"
    r"(?:mpirun|mpiexec|prterun|orterun) noticed that process rank \d{1,19} with PID \d{1,19} on node \S+ "
    r"exited on signal"
    r"|(?:mpirun|mpiexec|prterun|orterun) (?:was unable to|detected that one or more processes exited"
    r"|has exited due to process rank)"
    r"|Primary job\s+terminated normally, but \d{1,19} process(?:es)? returned"
    r"|a non-zero exit code\. Per user-direction, the job has been aborted\."
    r"|Exit code:\s+[1-9]\d{0,18}\s*$"  # Open MPI's block under `mpirun detected that ...`
    r"|There are not enough slots available in the system"
    r"|(?:ORTE|PRTE) was unable to reliably start"
    r"|=+\s+BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
    r"|=+\s+EXIT CODE: [1-9]\d{0,18}"
    r"|\[mpiexec@\S+\] .*(?i:error|fail)"
    r"|srun: error: "
    r"|slurmstepd: error: "
    r"|srun: Job step aborted"
    r"|Application \d{1,19} exit (?:codes: [1-9]|signals: )"
    r"|aprun: .*(?i:error|fail|caught signal|exiting)"
    r"|\S+: error while loading shared libraries: "
    r"|(?:(?:bash|sh|zsh|dash): (?:line \d{1,19}: )?)?\S*_perf(?:_mpi)?: "
    r"(?:No such file or directory|command not found|Permission denied)\s*$"
    r")"
)


def launcher_failures(lines: list[str]) -> list[str]:
    """The lines (stripped, in order, each once) in which a launcher or the shell reports a
    failure of the program it ran."""
    found: list[str] = []
    for line in lines:
        stripped = line.strip()
        if _LAUNCHER_FAILURE.match(stripped) and stripped not in found:
            found.append(stripped)
    return found


def launch_failure(launched: list[str]) -> dict:
    """The launcher's (or the shell's) failure lines as one failure, verbatim (`evidence.launcher`)."""
    shown = [mask_text(line) for line in launched[:5]]
    more = f" (and {len(launched) - 5} more launcher line(s))" if len(launched) > 5 else ""
    return {
        "kind": "launch-failure",
        "severity": "error",
        "message": "the launcher reports a failure: " + " | ".join(shown) + more,
        "fix": "the lines before it (each rank's own output) say why the program failed; with "
        "none, it failed before printing: check that the binary and its libraries exist where "
        "each rank runs",
        "lines": len(launched),
    }
