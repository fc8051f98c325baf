"""The `ncclprobe` command group: global options, lazy subcommands and the exit-code contract.

Exit codes, for every command:
  0  everything measured or checked is fine;
  1  findings (wrong results, unmet expectations, lint errors, hung or crashed configurations);
  2  bad usage or bad input (one line on stderr, never a traceback);
  3  nothing could be measured or read here (no GPU for a GPU-only probe, no readable process);
  4  internal error (a bug: one line, the traceback with -v);
  130  interrupted by Ctrl-C, 143 terminated by SIGTERM: one line saying how to continue (e.g.
     `--resume FILE`); nothing half-written is left behind (`ncclprobe.interrupts`).

Every file a command writes goes through `ncclprobe.safe_output` (an existing path is refused
unless --force, written to a temporary file and renamed); every number is parsed by
`ncclprobe.numbers` (click options through `ncclprobe.cli.types`, applied to every command here).

Subcommands are imported only when used, so `ncclprobe --help` and the parsers never import
torch. Each lives in its own module and exposes a click command named `command`.
"""

from __future__ import annotations

import errno
import importlib
import logging
import sys
import textwrap

import click

from ncclprobe import __version__, interrupts, visible
from ncclprobe.errors import NcclprobeError, UsageProblem

# name -> "module:attribute"; one module per command keeps each command thin and separate.
SUBCOMMANDS = {
    "sweep": "ncclprobe.cli.sweep:command",
    "knobs": "ncclprobe.cli.knobs:command",
    "topo": "ncclprobe.cli.topo:command",
    "nccl-log": "ncclprobe.cli.nccl_log:command",
    "import": "ncclprobe.cli.import_tests:command",
    "export": "ncclprobe.cli.export:command",
    "env-check": "ncclprobe.cli.env_check:command",
    "probe": "ncclprobe.cli.probe:group",
    "run-engine": "ncclprobe.cli.run_engine:command",
    "train-draft": "ncclprobe.cli.train_draft:command",
    "train-target": "ncclprobe.cli.train_target:command",
    "recommend": "ncclprobe.cli.recommend:command",
    "report": "ncclprobe.cli.report:command",
    "diagnose": "ncclprobe.cli.diagnose:command",
    "capture": "ncclprobe.cli.capture:command",
}

log = logging.getLogger("ncclprobe")
# an internal error's traceback is logged from this verbosity on; every hint names this flag
TRACEBACK_VERBOSITY, TRACEBACK_FLAG = 1, "-v"
HELP_WIDTH = 100  # every --help is wrapped to this width
# OSErrors that describe the machine, not a bug: reported as one line with exit 2
ENVIRONMENT_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.EFBIG,
        errno.EIO,
        errno.EMFILE,
        errno.ENFILE,
    }
)


def load_target(target: str | None):
    """The click command named by "module:attribute" (None for no name).

    Its number options are made strict here (`ncclprobe.cli.types.harden`), so every command,
    new ones included, parses numbers one way."""
    if target is None:
        return None
    module_name, attr = target.split(":")
    module = importlib.import_module(module_name)
    from ncclprobe.cli.types import harden

    command = harden(getattr(module, attr))
    _accept_common_options(command)  # lazily loaded subcommands of groups (`probe X -q`) too
    return command


def exit_codes(
    fine: str,
    findings: str | None = None,
    nothing_here: str | None = None,
    interrupted: str = "nothing half-written is left",
) -> str:
    """The `Exit codes:` paragraph of a command's --help: what 0, 1 and 3 mean for this command,
    then the codes every command shares (this module's contract, `ncclprobe.verdict`)."""
    codes = (
        [f"0 {fine}"]
        + ([f"1 {findings}"] if findings else [])
        + ["2 bad usage or input (one line)"]
    )
    codes += [f"3 {nothing_here}"] if nothing_here else []
    codes += [
        f"4 internal error ({TRACEBACK_FLAG} shows the traceback)",
        f"130 interrupted (Ctrl-C) and 143 terminated (SIGTERM): {interrupted}",
    ]
    text = "Exit codes: " + "; ".join(codes) + "."
    return "\b\n" + textwrap.fill(
        text, width=HELP_WIDTH - 4, break_on_hyphens=False, break_long_words=False
    )


class _Interrupted(Exception):
    """Carries a KeyboardInterrupt (Ctrl-C or SIGTERM) past click, which would otherwise turn it
    into Abort after printing a blank line; by then every `finally` of the command has run."""

    def __init__(self, original: BaseException):
        super().__init__(str(original))
        self.original = original


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it is needed, and turns
    every error into one line on stderr with the documented exit code."""

    def list_commands(self, ctx):
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx, name):
        return self._load(name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted(exc) from None

    @staticmethod
    def _load(name):
        return load_target(SUBCOMMANDS.get(name))

    def main(self, args=None, prog_name=None, **extra):
        """Every byte the command prints passes the one terminal guard (`ncclprobe.visible`)."""
        with visible.guarded():
            self._main(args, prog_name, **extra)

    def _main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        interrupts.install()
        interrupts.set_hint(None)
        try:
            code = exit_code(
                super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
            )
        except _Interrupted as exc:
            _exit_interrupted(exc.original)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help(), err=True)
            sys.exit(2)
        except (click.UsageError, click.BadParameter, UsageProblem) as exc:
            _one_line_error(
                exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
            )
            sys.exit(2)
        except NcclprobeError as exc:
            _one_line_error(str(exc))
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            _one_line_error(exc.format_message())
            sys.exit(exc.exit_code)
        except click.exceptions.Abort as exc:
            _exit_interrupted(exc.__cause__ or KeyboardInterrupt())
        except KeyboardInterrupt as exc:
            _exit_interrupted(exc)
        except OSError as exc:
            if exc.errno not in ENVIRONMENT_ERRNOS:
                _internal_error(exc)
            _one_line_error(
                _os_error_text(exc)
            )  # a full disk, a read-only file: the system's reason
            sys.exit(2)
        except Exception as exc:  # a bug: say so in one line, traceback only with -v
            _internal_error(exc)
        sys.exit(code)


def exit_code(returned) -> int:
    """The one mapping from what a command returned to the process's exit code: a command returns
    its library call's `Verdict`, or nothing (it printed what was asked: 0); click itself returns
    the code of its own exits (--help, --version)."""
    from ncclprobe.verdict import Verdict

    if isinstance(returned, Verdict):
        return returned.exit_code
    return returned if isinstance(returned, int) else 0


def _internal_error(exc: BaseException) -> None:
    if log.isEnabledFor(_LEVELS[TRACEBACK_VERBOSITY]):
        log.error("internal error", exc_info=exc)
    _one_line_error(
        f"internal error: {type(exc).__name__}: {exc} (run with {TRACEBACK_FLAG} for the traceback)"
    )
    sys.exit(4)


def _accept_common_options(command: click.Command) -> None:
    """Let -q/-v/--wide also follow the subcommand (`ncclprobe sweep -q`), where users type them;
    they act exactly like the group's. Added once per command, to a group's subcommands too."""
    names = {name for param in command.params for name in param.opts}
    if not names & {"-q", "--quiet", "-v", "--verbose", "--wide"}:
        command.params += [
            click.Option(
                ["-v", "--verbose"],
                count=True,
                expose_value=False,
                callback=_set_verbosity,
                help="More detail on stderr (-vv for debug); same as before the command.",
            ),
            click.Option(
                ["-q", "--quiet"],
                is_flag=True,
                expose_value=False,
                callback=_set_quiet,
                help="Only errors on stderr; no progress; same as before the command.",
            ),
            click.Option(
                ["--wide"],
                is_flag=True,
                expose_value=False,
                callback=_set_wide,
                help="Tables with every column, unwrapped; same as before the command.",
            ),
        ]
    for sub in getattr(command, "commands", {}).values():
        _accept_common_options(sub)


def _set_verbosity(ctx: click.Context, _param, count: int) -> None:
    state = ctx.ensure_object(dict)
    if count and not state.get("quiet"):
        state["verbosity"] = max(count, state.get("verbosity", 0))
        _configure_logging(state["verbosity"])


def _set_quiet(ctx: click.Context, _param, quiet: bool) -> None:
    if quiet:
        ctx.ensure_object(dict).update(quiet=True, verbosity=-1)
        _configure_logging(-1)


def _set_wide(ctx: click.Context, _param, wide: bool) -> None:
    if wide:
        ctx.find_root().ensure_object(dict)["wide"] = True


def _exit_interrupted(exc: BaseException) -> None:
    """The one line, then exit with the documented code. Every `finally` has run by now; the exit
    handlers run here, then the process ends at once. Seen on the CPU machine (strace): a Ctrl-C that
    came early in a sweep was caught and reported, yet the process died by SIGINT (-2) after
    `sys.exit(130)`: CPython's own exit path reset SIGINT and killed itself, which it does when it
    believes a KeyboardInterrupt went unhandled (a flag that code run through PyRun_String sets even
    when the exception is caught further up; not pinned down further). Ending here keeps 130/143."""
    import atexit
    import os

    line, code = interrupts.describe(exc)
    click.echo(f"ncclprobe: {line}", err=True)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _os_error_text(exc: OSError) -> str:
    where = f" {exc.filename!r}" if getattr(exc, "filename", None) else ""
    return f"cannot write or read{where}: {exc.strerror or exc}"


def _one_line_error(message: str) -> None:
    """The one line of every error; a secret the message quotes (a typed `--password X`, a URL
    password, `NCCL_PASSWORD=X`, a token) is masked by the one policy (`ncclprobe.secrets`)."""
    from ncclprobe.secrets import mask_text

    text = mask_text(" ".join(str(message).split()))
    click.echo(f"ncclprobe: error: {text}", err=True)


class _MaskingFormatter(logging.Formatter):
    """Every log line in the one format of ncclprobe's messages (`ncclprobe: ...` for progress and
    results, `ncclprobe: warning: ...`, `ncclprobe: error: ...` as the error line of a usage error),
    and the traceback -v adds, masked like the error line: a log message or an exception that
    quotes a user's input (a URL with a password, a token, a flag's value) never prints it."""

    KINDS = {logging.INFO: "", logging.WARNING: "warning: ", logging.DEBUG: "debug: "}

    def format(self, record: logging.LogRecord) -> str:
        from ncclprobe.secrets import mask_text

        kind = self.KINDS.get(record.levelno, "error: ")
        where = f"{record.name}: " if record.levelno == logging.DEBUG else ""
        record.kind = f"{kind}{where}"
        return "\n".join(mask_text(line) for line in super().format(record).split("\n"))


_LEVELS = {
    -1: logging.ERROR,
    0: logging.INFO,
    1: logging.DEBUG,
}  # -q, default (progress and results shown), -v and more: detail (a worker's stderr, tracebacks)


def _configure_logging(verbosity: int) -> None:
    level = _LEVELS.get(verbosity, logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_MaskingFormatter("ncclprobe: %(kind)s%(message)s"))
    root = logging.getLogger("ncclprobe")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


@click.group(
    cls=LazyGroup,
    epilog=exit_codes(
        "everything measured or checked is fine",
        "findings: wrong results, unmet expectations, lint errors, hung or crashed configurations",
        "nothing could be measured or read here (no GPU for a GPU-only probe, no readable process)",
        interrupted="one line says how to continue (`--resume FILE` where it applies)",
    ),
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH},
)
@click.version_option(__version__, "--version", prog_name="ncclprobe")
@click.option("-v", "--verbose", count=True, help="More detail on stderr (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr; no progress.")
@click.option(
    "--wide",
    is_flag=True,
    help="Tables with every column, unwrapped (default: they fit the terminal; "
    "JSON and CSV are always complete).",
)
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool, wide: bool) -> None:
    """Diagnostics for multi-GPU collectives: measure NCCL settings, show that they reached
    the workers and, from NCCL's own log, that NCCL read them and (where its log shows it) chose
    them, and recommend settings that help.

    Data goes to stdout (a table, or JSON/CSV with --format); progress, logs and warnings
    go to stderr.
    """
    verbosity = -1 if quiet else verbose
    _configure_logging(verbosity)
    ctx.obj = {"verbosity": verbosity, "quiet": quiet, "wide": wide}


def main() -> None:
    cli.main(prog_name="ncclprobe")
