"""A Ctrl-C that lands just as ncclprobe creates a temporary directory or a results file leaves
nothing behind.

The creating call (`tempfile.mkdtemp`, the results file's `open`) returns through Python calls
after the file system has the new entry, and a pending SIGINT raised there: the directory had no
owner stamp, so no later run would reap it (`tempdirs.reap_stale` leaves unstamped directories
alone), and the results file stayed (empty) while the CLI said "no output file was left behind".
Both were the leftovers (`ncclprobe-pool-*`, a file) that made tests/test_trust_writers.py's
interrupted-sweep test fail under load, 2 runs in 9. The signal here is real
(`signal.raise_signal`); only its moment is chosen: right after the entry exists."""

import signal
import tempfile

import pytest

from ncclprobe import records_writer, tempdirs
from ncclprobe.records_writer import ResultWriter


def _then_ctrl_c(monkeypatch, owner, name: str) -> None:
    """`owner.name` does what it did, then a Ctrl-C arrives."""
    real = getattr(owner, name)

    def then_ctrl_c(*args, **kwargs):
        made = real(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)
        return made

    monkeypatch.setattr(owner, name, then_ctrl_c)


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in ncclprobe's CLI
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def ctrl_c_after_mkdir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _then_ctrl_c(monkeypatch, tempfile, "mkdtemp")
    return tmp_path


def test_a_ctrl_c_between_the_directory_and_its_stamp_leaves_nothing(ctrl_c_after_mkdir):
    with pytest.raises(KeyboardInterrupt):
        tempdirs.make("ncclprobe-pool-")
    assert list(ctrl_c_after_mkdir.iterdir()) == []


def test_an_owned_directory_interrupted_as_it_is_made_leaves_nothing(ctrl_c_after_mkdir):
    with pytest.raises(KeyboardInterrupt), tempdirs.owned("ncclprobe-sweep-"):
        pass
    assert list(ctrl_c_after_mkdir.iterdir()) == []


def test_without_a_ctrl_c_the_directory_is_made_and_stamped(tmp_path, monkeypatch):
    """The healthy twin: made, stamped with this process, removed by `owned` on the way out."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with tempdirs.owned("ncclprobe-sweep-") as path:
        assert path.parent == tmp_path and (path / tempdirs.OWNER).read_text().strip()
    assert list(tmp_path.iterdir()) == []


HEADER = {"tool": "test"}


def test_a_ctrl_c_as_the_results_file_is_created_leaves_no_file(tmp_path, monkeypatch):
    _then_ctrl_c(monkeypatch, records_writer, "open_nofollow")
    with pytest.raises(KeyboardInterrupt):
        ResultWriter(tmp_path / "sweep.jsonl", HEADER)
    assert list(tmp_path.iterdir()) == []


def test_a_ctrl_c_as_an_atomic_file_is_created_leaves_no_temporary(tmp_path, monkeypatch):
    _then_ctrl_c(monkeypatch, tempfile, "mkstemp")
    with pytest.raises(KeyboardInterrupt):
        ResultWriter(tmp_path / "imported.jsonl", HEADER, atomic=True)
    assert list(tmp_path.iterdir()) == []


def test_without_a_ctrl_c_the_results_file_holds_its_header(tmp_path):
    with ResultWriter(tmp_path / "sweep.jsonl", HEADER) as writer:
        writer.write({"record": "config", "config_id": "default"})
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.jsonl"]
    assert (tmp_path / "sweep.jsonl").read_text().startswith('{"record": "header"')
