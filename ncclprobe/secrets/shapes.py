"""Secrets known by their shape alone, whatever introduces them: URL userinfo (with or without a
scheme: `https://u:pw@host`, `admin:pw@bastion`), token formats,
JWTs, PEM blocks and long random-looking runs (`ncclprobe.secrets.words` adds the context).

A run is random-looking when mixed case and digits fill a piece of 16 or more characters; words
joined by `-`/`_` are names, a path's segments are judged one by one, and a URL's segments must
also change kind of character as often as random text does, so `github.com/NVIDIA/...`,
`/home/Alice2/...` and `GooxiAS4110GServer.md` stay readable.

Linear time: every pattern that scans a run starts only at the run's first character.
"""

from __future__ import annotations

import re

MASK = "<masked>"

_B = r"(?<![A-Za-z0-9_\-])"  # start of a run: the look-behind that keeps every scan linear
_TOKEN_SHAPES = re.compile(
    _B
    + r"(?:hf_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|gh[opsur]_[A-Za-z0-9]{20,}|github_pat_\w{20,}"
    r"|sk-[A-Za-z0-9_\-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}|xox[abprs]-[A-Za-z0-9\-]{10,}|glpat-[\w\-]{16,}"
    r"|AIza[0-9A-Za-z_\-]{30,}|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_\-]{30,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}(?:\.[A-Za-z0-9_\-]*)?)",
    re.ASCII,
)
# `user:password@host` without a scheme (ssh's `-o ProxyJump=admin:pw@bastion`, `ssh admin:pw@host`
# in a log): the password, between a user that starts a run and a host; a docker image's
# `name:tag@sha256` follows a `/` and is left alone
_LOGIN_AT = re.compile(
    r"(?<![A-Za-z0-9_.\-:/@%])([A-Za-z_][A-Za-z0-9_.\-]{0,63}):([^\s:@/]+)@(?=[A-Za-z0-9\[])",
    re.ASCII,
)
_RANDOM_RUN = re.compile(_B + r"[A-Za-z0-9+/_\-]{32,}={0,2}", re.ASCII)  # `=` only as padding
_JOINERS = re.compile(r"[-_]")


def mask_shapes(word: str) -> str:
    """One whitespace-free word with every secret-shaped part masked."""
    word = mask_userinfo(word)
    if "@" in word:
        word = _LOGIN_AT.sub(lambda m: f"{m[1]}:{MASK}@" if m[2] != MASK else m[0], word)
    word = _TOKEN_SHAPES.sub(MASK, word)
    return _RANDOM_RUN.sub(_masked_url_run if "://" in word else _masked_run, word)


def _masked_run(match: re.Match) -> str:
    """A long run masked when random-looking; a path's segments each on their own."""
    run, start = match.group(0), match.start()
    after_dot = start > 0 and match.string[start - 1] in ".~"  # `Qwen2.5/...`, `~/...`
    if "/" in run and (run.startswith("/") or after_dot or "-" in run or "_" in run):
        return "/".join(MASK if len(p) >= 32 and _random(p) else p for p in run.split("/"))
    return MASK if _random(run) else run


def _masked_url_run(match: re.Match) -> str:
    """A URL's path: a segment of 16 or more characters that change case and digits as often as
    random text does is masked (a webhook's key, a presigned path); names stay
    (`github.com/NVIDIA/nccl/issues`, `GooxiAS4110GServer.md`)."""
    return "/".join(
        MASK if len(p) >= 16 and _random(p) and _changes(p) * 5 >= len(p) * 2 else p
        for p in match.group(0).split("/")
    )


def _random(run: str) -> bool:
    """Random-looking: mixed case and digits in a piece of 16 or more characters; words joined by
    `-`/`_` (`nccl-tests-efa-worker-0`, `Meta_Llama_3_8B_Instruct_v2`) are names."""
    return mixed(run) and any(len(p) >= 16 and mixed(p) for p in _JOINERS.split(run))


def _changes(text: str) -> int:
    """How often the kind of character (lower, upper, digit) changes: ~0.6 per character in random
    text, ~0.3 in CamelCase names."""
    kinds = [c.islower() - c.isupper() for c in text if c.isalnum()]
    return sum(a != b for a, b in zip(kinds, kinds[1:], strict=False))


def mask_userinfo(word: str) -> str:
    """`scheme://user:pw@host` -> `scheme://<masked>@host`, for each URL in the word (a password
    may hold `/`; a user alone, as in `https://TOKEN@github.com`, is masked too)."""
    if "://" not in word:
        return word
    pieces = word.split("://")
    for index in range(1, len(pieces)):
        piece = pieces[index]
        at = piece.rfind("@", 0, _url_end(piece))
        if at <= 0:
            continue
        info = piece[:at]
        slash = info.find("/")
        if slash == -1 or 0 <= info.find(":") < slash:
            pieces[index] = MASK + piece[at:]
    return "://".join(pieces)


def _url_end(piece: str) -> int:
    """Where one URL's text ends inside a word (a list separator), so `@` further on is not its."""
    ends = [i for i in (piece.find(","), piece.find(";"), piece.find(" ")) if i != -1]
    return min(ends) if ends else len(piece)


def mask_pem(text: str) -> str:
    """`-----BEGIN ... KEY-----` ... `-----END ...-----` (or to the end when cut) -> MASK."""
    start = text.find("-----BEGIN")
    while start != -1:
        end = text.find("-----END", start)
        stop = len(text) if end == -1 else text.find("-----", end + 8)
        stop = len(text) if stop == -1 else stop + 5
        text = text[:start] + MASK + text[stop:]
        start = text.find("-----BEGIN", start + len(MASK))
    return text


def mixed(run: str) -> bool:
    """Random-looking: lower and upper case letters and digits all present."""
    return (
        any(c.islower() for c in run)
        and any(c.isupper() for c in run)
        and any(c.isdigit() for c in run)
    )
