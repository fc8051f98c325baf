"""Safe output: the one way every command writes a file or a directory.

The rules (docs/DESIGN.md, "Trust"):
  - a path that exists is refused unless the user passed --force (`check_output`, before any work);
  - an output is never one of the command's inputs, --force or not;
  - it is written to a temporary file in the same directory and renamed into place when complete,
    so a reader never sees half of it and a failure or Ctrl-C leaves nothing behind (`atomic_file`);
  - a directory output (a report) is built beside its destination and swapped in whole, so stale
    files of an earlier run never mix with new ones (`atomic_directory`);
  - JSON is written with `allow_nan=False`: a NaN is a bug to catch, never a file nobody can read;
  - a full disk or a read-only file is one line naming the file and what was kept (`OutputProblem`).

A command adopts them in three lines: a `--force` flag (`ncclprobe.cli.output.force_option`), `check_output(path,
force=force, inputs=...)` right after parsing its options, and `write_text`/`write_json`/`atomic_file`
(or `atomic_directory`) to write. Journals that must survive a kill (the sweep's results file) use
`ncclprobe.records_writer.ResultWriter`, which follows the same rules for creation.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from ncclprobe.errors import UsageProblem

EXISTS = (
    "already exists and is never overwritten without --force; choose another name or pass --force"
)
MARKER = ".ncclprobe-output"  # left in every directory written by atomic_directory


class OutputProblem(UsageProblem):
    """An output cannot be written (exists, not writable, disk full): one line, exit 2."""


def check_output(
    path: str | Path,
    *,
    force: bool = False,
    what: str = "output file",
    inputs: Iterable[str | Path] = (),
) -> Path:
    """Refuse, before any work starts, an output that exists (without --force), is a directory,
    is one of `inputs`, is a symbolic link, or cannot be created in its directory. Returns the path."""
    path = Path(path)
    refuse_link(path, what)
    for item in inputs:
        if _same_file(path, Path(item)):
            raise OutputProblem(
                f"{what} {str(path)!r} is also an input of this command; refusing to replace "
                "what is being read (choose another name)"
            )
    if path.is_dir():
        raise OutputProblem(f"{what} {str(path)!r} is a directory")
    if (
        path.exists() and not path.is_file()
    ):  # /dev/stdout, a FIFO, a device: never replaced by a file
        raise OutputProblem(
            f"{what} {str(path)!r} is not a regular file (leave the option out to print to stdout)"
        )
    if path.exists():
        if not force:
            raise OutputProblem(f"{what} {str(path)!r} {EXISTS}")
        if not os.access(path, os.W_OK) and not os.access(_parent(path), os.W_OK):
            raise OutputProblem(f"{what} {str(path)!r} cannot be replaced: permission denied")
    _probe_directory(_parent(path), path, what)
    return path


def check_output_dir(
    path: str | Path,
    *,
    force: bool = False,
    what: str = "output directory",
    owned: Iterable[str] = (),
    has_force: bool = True,
) -> Path:
    """The directory rule: a missing or empty directory is fine; one with files needs --force, and
    even then only when every entry is one this command writes (`owned` names, or the marker file
    it leaves), so --force can never wipe a directory of the user's own files. `has_force=False`: the
    command has no --force, so the message does not offer it."""
    path = Path(path)
    refuse_link(path, what)
    if path.exists() and not path.is_dir():
        raise OutputProblem(f"{what} {str(path)!r} exists and is not a directory")
    entries = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    if entries:
        if not force:
            raise OutputProblem(
                f"{what} {str(path)!r} is not empty; choose a new directory"
                + (
                    " or pass --force to replace it"
                    if has_force
                    else " (nothing is written into a directory that holds files)"
                )
            )
        foreign = [name for name in entries if name not in set(owned) | {MARKER}]
        if foreign and MARKER not in entries:
            raise OutputProblem(
                f"{what} {str(path)!r} holds files ncclprobe did not write ({', '.join(foreign[:3])}"
                f"{', ...' if len(foreign) > 3 else ''}); refusing to replace it even with --force"
            )
    _probe_directory(_parent(path), path, what, "directory")
    return path


@contextmanager
def atomic_file(
    path: str | Path, *, force: bool = False, binary: bool = False, what: str = "output file"
) -> Iterator:
    """Yield a file handle on a temporary file beside `path`; on success it is fsynced and renamed
    to `path` (refusing an existing one unless `force`); on any failure, Ctrl-C included, it is
    removed and `path` is untouched."""
    path = Path(path)
    refuse_link(path, what)
    parent = _parent(path)
    try:
        fd, temp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _problem(exc, path, what) from None
    handle: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
    try:
        try:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        finally:
            handle.close()
        commit_file(Path(temp), path, force, what)
    except OSError as exc:
        _remove(Path(temp))
        raise _problem(exc, path, what) from None
    except BaseException:
        _remove(Path(temp))
        raise


def write_text(
    path: str | Path, text: str, *, force: bool = False, what: str = "output file"
) -> Path:
    with atomic_file(path, force=force, what=what) as handle:
        handle.write(text)
    return Path(path)


def dumps_json(doc, **kwargs) -> str:
    """JSON as every output writes it: strict (no NaN/Infinity, which no JSON reader accepts)."""
    return json.dumps(doc, allow_nan=False, **kwargs)


def write_json(
    path: str | Path, doc, *, force: bool = False, what: str = "output file", indent: int = 1
) -> Path:
    return write_text(path, dumps_json(doc, indent=indent) + "\n", force=force, what=what)


@contextmanager
def atomic_directory(
    path: str | Path,
    *,
    force: bool = False,
    what: str = "output directory",
    owned: Iterable[str] = (),
) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path` to fill; on success it replaces `path` whole
    (an earlier one goes only with `force`, under `check_output_dir`'s rule); on failure it is removed."""
    path = Path(path)
    owned = tuple(owned)
    check_output_dir(path, force=force, what=what, owned=owned)
    try:  # absolute: processes started in it (env-propagation's drivers) get it as their cwd
        temp = Path(
            os.path.abspath(
                tempfile.mkdtemp(dir=_parent(path), prefix=f".{path.name}.", suffix=".tmp")
            )
        )
    except OSError as exc:
        raise _problem(exc, path, what) from None
    try:
        yield temp
        (temp / MARKER).write_text(
            "written by ncclprobe; --force may replace this directory\n", encoding="utf-8"
        )
        _swap_directory(temp, path, force, what, owned)
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        raise _problem(exc, path, what) from None
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def check_appendable(path: str | Path, what: str) -> Path:
    """A file a command will append to (--resume): it exists, is a regular file (not a symbolic
    link: `open_appending` refuses one too) and is writable."""
    path = Path(path)
    refuse_link(path, what)
    if not path.is_file():
        raise OutputProblem(f"{what} {str(path)!r} does not exist or is not a regular file")
    if not os.access(path, os.W_OK):
        raise OutputProblem(
            f"{what} {str(path)!r} is read-only; make it writable (chmod u+w) to continue it"
        )
    return path


def describe_os_error(
    exc: OSError, path: str | Path, what: str, kept: str = "nothing was changed"
) -> str:
    """One line for a write that the system refused: which file, why, what is left."""
    reason = {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is exceeded",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EFBIG: "the file is too large for this file system",
    }
    return f"cannot write {what} {str(path)!r}: {reason.get(exc.errno or 0, exc.strerror or str(exc))}; {kept}"


# ---------------------------------------------------------------------------------------------


def refuse_link(path: Path, what: str) -> None:
    """An output that is a symbolic link is refused, --force or not, dangling or not: nothing is
    written through a link (resolved in user space, as `realpath` does, the kernel's
    protected_symlinks guard of a sticky directory such as /tmp never applies: the link's owner
    would choose which file the command creates or replaces) and no link is replaced by a file.
    The message names the link's target: naming that file itself writes there. Every writer's
    last step never follows a link either (`commit_file` renames, `ResultWriter` opens with
    O_NOFOLLOW), so a link planted after this check is not written through."""
    if not path.is_symlink():
        return
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    try:
        mode = os.stat(path).st_mode  # through the link: /dev/stdout's is a pipe or a terminal
    except OSError:
        mode = None
    hint = "name the file itself to write there"
    if mode is None:
        hint = f"it points nowhere (dangling); {hint}"
    elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        hint = "leave the option out to print to stdout"
    raise OutputProblem(
        f"{what} {str(path)!r} is a symbolic link (to {target!r}); ncclprobe never writes "
        f"through a link nor replaces one, --force or not: {hint}"
    )


def open_nofollow(path: str | Path, flags: int, what: str, mode: int = 0o666) -> int:
    """`os.open` that refuses a symbolic link in the last component (O_NOFOLLOW: ELOOP), naming it
    in one line: the file a journal appends to or creates is the one the user named."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            refuse_link(Path(path), what)
        raise


def _parent(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _same_file(a: Path, b: Path) -> bool:
    """`a` is `b`, or an existing file inside `b` when `b` is a directory (a checkpoint's weights)."""
    try:
        if b.is_dir():
            return a.exists() and os.path.realpath(a).startswith(
                os.path.join(os.path.realpath(b), "")
            )
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _probe_directory(parent: Path, path: Path, what: str, kind: str = "file") -> None:
    """Create and remove a temporary file where the output will go: the only honest writability test
    (permissions, read-only mounts, /proc, full inode tables all show up here)."""
    if not parent.is_dir():
        why = (
            f"{parent} is not a directory"
            if parent.exists()
            else f"directory {parent} does not exist"
        )
        verb = "cannot create the directory" if kind == "directory" else "cannot write it"
        raise OutputProblem(f"{what} {str(path)!r}: {verb}: {why}")
    try:
        fd, temp = tempfile.mkstemp(dir=parent, prefix=f".{path.name[:64]}.", suffix=".probe")
    except OSError as exc:
        raise _problem(exc, path, what) from None
    os.close(fd)
    _remove(Path(temp))


def commit_file(temp: Path, path: Path, force: bool, what: str) -> None:
    """Move a finished temporary file (in `path`'s directory) to `path`: over an existing one only
    with `force` (never a symbolic link: one planted meanwhile is refused; rename itself replaces
    a name and never writes through it); otherwise atomically refusing a file that appeared
    meanwhile."""
    if force:
        if path.is_symlink():
            _remove(temp)
            raise OutputProblem(
                f"{what} {str(path)!r} became a symbolic link while this command ran; it was kept, "
                "the new output was discarded"
            )
        os.replace(temp, path)
        return
    try:  # link refuses an existing target atomically: a file that appeared meanwhile is kept
        os.link(temp, path)
    except FileExistsError:
        raise OutputProblem(
            f"{what} {str(path)!r} appeared while this command ran; it was kept, the new output "
            "was discarded (pass --force to replace it)"
        ) from None
    except OSError as exc:
        if exc.errno not in (
            errno.EPERM,
            errno.ENOTSUP,
            errno.EOPNOTSUPP,
            errno.EXDEV,
            errno.EMLINK,
        ):
            raise
        if os.path.lexists(path):  # a file system without hard links: check, then rename
            raise OutputProblem(
                f"{what} {str(path)!r} appeared while this command ran; it was kept"
            ) from None
        os.replace(temp, path)
        return
    _remove(temp)


def _swap_directory(temp: Path, path: Path, force: bool, what: str, owned: tuple[str, ...]) -> None:
    if os.path.lexists(path):
        check_output_dir(
            path, force=force, what=what, owned=owned
        )  # again: it may have changed meanwhile
        old = Path(tempfile.mkdtemp(dir=_parent(path), prefix=f".{path.name}.", suffix=".old"))
        os.replace(path, old / "previous")
        os.replace(temp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(temp, path)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _problem(exc: OSError, path: Path, what: str) -> UsageProblem:
    if isinstance(exc, UsageProblem):
        return exc
    return OutputProblem(describe_os_error(exc, path, what))
