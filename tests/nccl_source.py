"""Reading the pinned excerpts of NCCL's source (tests/fixtures/nccl_source/README.md): each file's
header lines checked, the lines by number, and the few C constructs the checks parse (string lists,
NCCL_PARAM lines). Test data only: the library never reads these."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from ncclprobe.nccl.version import Version, parse_version

ROOT = Path(__file__).parent / "fixtures" / "nccl_source"
HEADER = re.compile(r"# NVIDIA/nccl (v2\.\d+\.\d+-1) ([0-9a-f]{40}) (\S+) lines (\d+)-(\d+)$")
TAG = re.compile(r"v(2\.\d+\.\d+)-1")


def tag_version(tag: str) -> Version:
    match = TAG.fullmatch(tag)
    assert match, f"{tag!r} is not an NCCL release tag"
    return parse_version(match[1])


@dataclass(frozen=True)
class Excerpt:
    tag: str
    path: str
    commit: str
    lines: dict[int, str]  # line number in the file at that tag -> the line

    @property
    def text(self) -> str:
        return "\n".join(self.lines[n] for n in sorted(self.lines))

    def line(self, pattern: str) -> str:
        """The first line matching `pattern` (a regular expression); fails the test when none does."""
        found = [line for line in self.lines.values() if re.search(pattern, line)]
        assert found, f"{self.tag} {self.path}: no line matches {pattern!r}"
        return found[0]

    def block(self, pattern: str) -> str:
        """From the line matching `pattern` to the first line `}` after it: one function."""
        numbers = sorted(self.lines)
        start = next(n for n in numbers if re.search(pattern, self.lines[n]))
        end = next(n for n in numbers if n > start and self.lines[n] == "}")
        return "\n".join(self.lines[n] for n in numbers if start <= n <= end)

    def has(self, pattern: str) -> bool:
        return any(re.search(pattern, line) for line in self.lines.values())

    def strings(self, pattern: str) -> list[str]:
        """The C string literals of the first line matching `pattern`, with its continuation lines
        up to the closing `;` (a `{"Tree", "Ring", ...};` list)."""
        numbers = sorted(self.lines)
        start = next(n for n in numbers if re.search(pattern, self.lines[n]))
        text = ""
        for n in numbers[numbers.index(start) :]:
            text += self.lines[n]
            if text.rstrip().endswith(";"):
                break
        return re.findall(r'"([^"]*)"', text)

    def param(self, env: str) -> str:
        """The default of `NCCL_PARAM(Name, "ENV", default)`, as written."""
        line = self.line(rf'NCCL_PARAM\(\w+, "{env}", ')
        return re.search(rf'"{env}", (.+)\);', line)[1].strip()


@cache
def load(tag: str, path: str) -> Excerpt:
    """The excerpt of `path` at `tag`, its headers checked against the folder it sits in."""
    file = ROOT / tag / path
    assert file.is_file(), f"no excerpt of {path} at {tag} ({file})"
    lines: dict[int, str] = {}
    commit, number, last = None, None, None
    for raw in file.read_text().split("\n")[:-1]:
        header = HEADER.fullmatch(raw)
        if header:
            assert number is None or number == last + 1, f"{file}: block before {raw!r} is short"
            assert header[1] == tag and header[3] == path, f"{file}: header names {raw!r}"
            assert commit in (None, header[2]), f"{file}: two commits"
            first, last = int(header[4]), int(header[5])
            assert first <= last and (not lines or first > max(lines)), f"{file}: {raw!r}"
            commit, number = header[2], first
            continue
        assert number is not None and number <= last, f"{file}: a line outside any block"
        lines[number] = raw
        number += 1
    assert number == last + 1, f"{file}: the last block is short"
    return Excerpt(tag, path, commit, lines)


def excerpt_files() -> list[tuple[str, str]]:
    """Every (tag, path) with an excerpt."""
    return sorted(
        (file.relative_to(ROOT).parts[0], "/".join(file.relative_to(ROOT).parts[1:]))
        for file in ROOT.glob("v2.*/**/*")
        if file.is_file()
    )


@dataclass
class Source:
    """NCCL's source at one tag, as a fact check reads it: which files it read is recorded."""

    tag: str
    read: set[str] = field(default_factory=set)

    @property
    def version(self) -> Version:
        return tag_version(self.tag)

    def __call__(self, path: str) -> Excerpt:
        self.read.add(path)
        return load(self.tag, path)


def cited_paths(source: str) -> set[str]:
    """The files a row's `source` text names (src/..., ext-tuner/..., docs/...)."""
    return set(re.findall(r"\b(?:src|ext-tuner|docs)/[\w/.-]+\.(?:cc|h|c|rst)\b", source))
