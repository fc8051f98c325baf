"""Writing a results file (the format is `ncclprobe.records`'): the one writer every command that
records results goes through, and the cut a killed sweep's file needs before --resume appends to it.

Kept apart from the format and its reader because only the sweep and `ncclprobe import` write
(recommend, report and diagnose only read), and writing has its own rules: each record fsynced
before the next piece of work, a journal created at once or a file written whole and renamed
(`ncclprobe.safe_output`), and a resumed file cut back to its last complete configuration group.
"""

from __future__ import annotations

import codecs
import json
import os
import tempfile
from pathlib import Path
from typing import TextIO

from ncclprobe import interrupts
from ncclprobe.errors import UsageProblem
from ncclprobe.records import SCHEMA_VERSION, ResultsFile, read_results
from ncclprobe.safe_output import (
    EXISTS,
    OutputProblem,
    check_appendable,
    commit_file,
    describe_os_error,
    dumps_json,
    open_nofollow,
)


class ResultWriter:
    """Append-only JSONL writer: every record is flushed and fsynced before `write` returns.

    Two ways to create a file, both following `ncclprobe.safe_output`'s rules:
      - a journal (the sweep): created at `path` at once, so a killed run keeps every finished
        configuration for --resume; an existing file is refused unless `force`; when the run fails
        before one configuration was recorded, the file goes (a bare header would only block the rerun);
      - `atomic=True` (import, collect): written beside `path` and renamed into place when closed
        cleanly; on any failure nothing is left.
    `resume=True` appends to an existing, writable results file.
    """

    def __init__(
        self,
        path: str | Path,
        header: dict | None,
        *,
        resume: bool = False,
        force: bool = False,
        atomic: bool = False,
    ):
        self.path, self.force, self.atomic = Path(path), force, atomic
        self.configs_written, self._created = 0, False
        self._temp: Path | None = None
        self._fh: TextIO | None = None
        if resume:
            check_appendable(self.path, "results file")
            self._fh = self._open(lambda: self._file(os.O_WRONLY | os.O_APPEND))
            return
        if header is None:
            raise ValueError("a new results file needs a header")
        try:
            # A Ctrl-C is held from the file's creation until this writer notes it: it returns
            # through Python calls after the open, where a pending SIGINT raised and left the file
            # (empty, and the CLI said "no output file was left behind": tests/test_trust_writers.py)
            with interrupts.held():
                self._create()
            self.write({"record": "header", "schema_version": SCHEMA_VERSION, **header})
        except BaseException:  # no `with` owns this writer yet: clean up here
            if self._fh is not None:
                self.close(failed=True)
            raise

    def _create(self) -> None:
        """The new file (or, atomic, its temporary twin), noted as this writer's."""
        if self.atomic:
            fd, temp = self._open(
                lambda: tempfile.mkstemp(
                    dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
                )
            )
            self._temp, self._fh = Path(temp), os.fdopen(fd, "w", encoding="utf-8")
            return
        if self.force and self.path.is_file() and not self.path.is_symlink():
            self.path.unlink()  # the user asked to replace it; everything was validated before
        self._fh = self._open(  # never overwrite otherwise, nor create through a link
            lambda: self._file(os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        )
        self._created = True

    def _file(self, flags: int):
        return os.fdopen(open_nofollow(self.path, flags, "results file"), "w", encoding="utf-8")

    def _open(self, opener):
        try:
            return opener()
        except FileExistsError:
            raise OutputProblem(
                f"results file {str(self.path)!r} {EXISTS} (or --resume it)"
            ) from None
        except OSError as exc:
            raise OutputProblem(describe_os_error(exc, self.path, "results file")) from None

    def write(self, record: dict) -> None:
        line = dumps_json(record, sort_keys=False, default=str) + "\n"
        if self._fh is None:
            raise RuntimeError("write() on a results file that was never opened")
        try:
            self._fh.write(line)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            kept = (
                f"the {self.configs_written} configuration(s) recorded before are kept (--resume continues)"
                if self.configs_written and not self.atomic
                else "nothing was left behind"
            )
            raise OutputProblem(describe_os_error(exc, self.path, "results file", kept)) from None
        if record.get("record") == "config":
            self.configs_written += 1

    def close(self, failed: bool = False) -> None:
        try:
            if self._fh is not None:
                self._fh.close()
        except OSError:
            failed = True
        if self._temp is not None:
            if failed:
                self._temp.unlink(missing_ok=True)
            else:
                commit_file(self._temp, self.path, self.force, "results file")
        elif failed and self._created and not self._holds_a_configuration():
            self.path.unlink(missing_ok=True)

    def _holds_a_configuration(self) -> bool:
        """Whether the journal recorded a configuration. The file decides, not the counter: an
        interrupt can land after a record reached the disk and before the counter moved."""
        if self.configs_written:
            return True
        try:
            lines = self.path.read_bytes().splitlines()
        except OSError:
            return False
        return any(
            line.startswith(b'{"record": "config"') and line.endswith(b"}") for line in lines[1:]
        )

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(failed=exc_type is not None)


def trim_incomplete_tail(path: str | Path) -> ResultsFile:
    """Cut a torn last line and an unfinished last configuration group off a results file."""
    path = Path(path)
    read_results(path)  # validates the header and schema first
    data = path.read_bytes()
    if b"\x00" in data[:65536] or data.startswith(
        codecs.BOM_UTF8
    ):  # read fine, but cut by bytes below
        raise UsageProblem(
            f"results file {str(path)!r} is not UTF-8 (as ncclprobe writes it); convert it to resume it"
        )
    keep = _complete_length(data)
    if keep < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
            os.fsync(fh.fileno())
    return read_results(path)


def _complete_length(data: bytes) -> int:
    """Bytes up to the end of the last complete configuration group (or non-config record)."""
    offset, keep, open_group = 0, 0, None  # open_group: [offset, results still expected]
    for line in data.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        try:
            record = json.loads(line) if line.endswith(b"\n") else None
        except (ValueError, RecursionError):  # torn, or no record (read_results says why)
            record = None
        if record is None:
            break
        if record.get("record") == "config":
            open_group = [start, int(record.get("results_expected", 0))]
        elif record.get("record") == "result" and open_group:
            open_group[1] -= 1
        if open_group is None or open_group[1] <= 0:
            keep, open_group = offset, None
    return keep
