"""Masking secrets by their structure, for every output: environments, command lines, free text.

A process environment, a command line or an nccl-tests `-J` file routinely holds tokens, cloud
keys and passwords, under names no list foresees (`DB_PASS2`, `OTEL_EXPORTER_OTLP_HEADERS`) and
inside values (`Server=db;Password=...`). So masking does not depend on recognising secret names:

  - environment values are shown only for families known to hold no credentials (NCCL, CUDA,
    torch.distributed, the shell's own: `is_harmless_name`); every other value is `MASK`;
  - and every value or word that is shown still goes through `mask_text`, which masks by shape:
    URL userinfo (`scheme://user:pw@host`, a password with `/` too), `Authorization`-style headers
    and their schemes (`Bearer`, `Basic`, `Token`), `key=value` pairs inside a value, JWTs, PEM
    blocks, well-known token formats and long random-looking strings; a multi-line value is masked
    whole (no harmless setting spans lines);
  - command lines (`mask_argv`) also hide the value of flags that take credentials, given with `=`
    or as the next word (`--password X`, `--token=X`, `-p X`, `-u user:pw`, `-H "Authorization: ..."`),
    repeated or chained (`--password - X`).

Every function here runs in linear time: patterns that scan a run of characters start only at the
run's first character (a look-behind), so no input makes them quadratic.

Use: `mask_env_value(name, value)` for one variable, `mask_env(env)` for a whole environment (an
nccl-tests `-J` file's `env`), `mask_argv(words)` for a command line, `mask_text(text)` for any
other text that may quote a user's values (log lines, error messages).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

MASK = "<masked>"

# Families whose values decide what NCCL, CUDA, torch.distributed, MPI and the shell do, and that
# hold no credentials by design; `mask_text` still runs over their values.
HARMLESS_PREFIXES = (
    "NCCL_",
    "TORCH_NCCL_",
    "TORCH_DISTRIBUTED_",
    "TORCHELASTIC_",
    "NVSHMEM_",
    "CUDA_",
    "NVIDIA_",
    "OMP_",
    "KMP_",
    "MKL_",
    "LC_",
    "SLURM_",
    "PMI_",
    "OMPI_MCA_",
    "UCX_",
    "FI_",
)
HARMLESS_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TERM",
        "LANG",
        "LANGUAGE",
        "PWD",
        "OLDPWD",
        "HOSTNAME",
        "SHLVL",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "VLLM_NCCL_SO_PATH",
        "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY",
        "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY",
    }
)
# Name words that mark a credential even inside a harmless family (a second line of defence).
_SECRET_WORDS = frozenset(
    {
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "PASSPHRASE",
        "PWD",
        "KEY",
        "KEYS",
        "APIKEY",
        "CREDENTIAL",
        "CREDENTIALS",
        "CRED",
        "CREDS",
        "AUTH",
        "AUTHORIZATION",
        "COOKIE",
        "SESSION",
        "PRIVATE",
        "SIGNATURE",
        "DSN",
        "CERT",
        "JWT",
        "BEARER",
        "WEBHOOK",
    }
)
_SECRET_FRAGMENTS = ("SECRET", "TOKEN", "PASSW", "CREDENTIAL", "APIKEY", "ACCESSKEY", "PRIVATEKEY")
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
# Flags whose value is a credential: any flag with one of these words in its name, plus short forms.
_FLAG_WORDS = _SECRET_WORDS | {"PW", "CONN", "CONNECTION", "CONNSTR", "USERPASS"}
_SHORT_VALUE_FLAGS = frozenset({"-p"})  # mysql -p PW (a port after ssh -p is hidden too: harmless)
_HEADER_FLAGS = frozenset({"-H", "--header", "--headers", "--proxy-header"})
_USER_FLAGS = frozenset({"-u", "--user", "--proxy-user", "--username"})  # curl: user:password
_AUTH_SCHEMES = frozenset(
    {"Bearer", "bearer", "Basic", "Digest", "Token", "ApiKey", "Api-Key", "Negotiate", "HMAC"}
)
_FLAG_FRAGMENTS = (
    "SECRET",
    "PASSW",
    "CREDENTIAL",
    "APIKEY",
    "ACCESSKEY",
    "PRIVATEKEY",
)  # not TOKEN: --tokenizer
_AUTH_HEADER_WORDS = (
    "authorization",
    "auth",
    "token",
    "key",
    "cookie",
    "secret",
    "password",
    "credential",
    "signature",
    "session",
)

_B = r"(?<![A-Za-z0-9_\-])"  # start of a run: the look-behind that keeps every scan linear
_TOKEN_SHAPES = re.compile(
    _B
    + r"(?:hf_[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|gh[opsur]_[A-Za-z0-9]{20,}|github_pat_\w{20,}"
    r"|sk-[A-Za-z0-9_\-]{16,}|sk_(?:live|test)_[A-Za-z0-9]{16,}|xox[abprs]-[A-Za-z0-9\-]{10,}|glpat-[\w\-]{16,}"
    r"|AIza[0-9A-Za-z_\-]{30,}|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_\-]{30,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}(?:\.[A-Za-z0-9_\-]*)?)",
    re.ASCII,
)
_RANDOM_RUN = re.compile(_B + r"[A-Za-z0-9+/=_\-]{32,}", re.ASCII)
_ENV_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.ASCII | re.S)
_PAIR_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_ .\-]*", re.ASCII)
_SPACES = re.compile(r"(\s+)")
_SPECIAL = re.compile(r"[:=@]")
_HEADER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9\-]{0,63}", re.ASCII)  # an HTTP header's name


@lru_cache(maxsize=4096)
def is_harmless_name(name: str) -> bool:
    """Whether a variable's value may be shown: a known family that holds no credentials, and a
    name without credential words."""
    return (name in HARMLESS_NAMES or name.startswith(HARMLESS_PREFIXES)) and not is_secret_name(
        name
    )


def is_secret_name(name: str) -> bool:
    """A name made of credential words (`HF_TOKEN`, `db-password`); NCCL_IB_PKEY is not (`PKEY`)."""
    upper = name.upper()
    if upper in _NOT_SECRET_NAMES:
        return False
    words = set(re.split(r"[^A-Z0-9]+", upper))
    squashed = upper.replace("_", "").replace("-", "")
    return bool(words & _SECRET_WORDS) or any(
        fragment in squashed for fragment in _SECRET_FRAGMENTS
    )


def mask_env_value(name: str, value: str | None) -> str | None:
    """The value of variable `name` as it may be printed."""
    if value is None:
        return None
    if not is_harmless_name(name) or "\n" in value or "\r" in value:
        return MASK
    return mask_text(value)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """A whole environment (names kept, values masked), e.g. the `env` an nccl-tests `-J` file records."""
    return {str(name): mask_env_value(str(name), str(value)) for name, value in env.items()}


def mask_provenance(doc: dict) -> dict:
    """A file's record of where it came from (`env`, `argv`) masked as it is read: a results file or
    trace written by another tool, an older ncclprobe or a hand may hold what ours never writes, and
    every command that echoes a header (recommend's JSON, report, diagnose) then prints it."""
    out = dict(doc)
    if isinstance(out.get("env"), dict):
        out["env"] = mask_env(out["env"])
    if isinstance(out.get("argv"), list) and all(isinstance(word, str) for word in out["argv"]):
        out["argv"] = mask_argv(out["argv"])
    return out


def mask_text(text: str) -> str:
    """Free text with every secret-shaped part replaced by MASK; the rest is kept as it was."""
    return _mask_words(text)[0]


def _mask_words(text: str, hide: int = 0) -> tuple[str, int]:
    """`mask_text`, starting with `hide` words to hide; also returns how many words the next text
    must hide (an auth header or scheme at the end: `Authorization:`, `Bearer`)."""
    if not text:
        return text, hide
    if not hide and len(text) < 15 and not _SPECIAL.search(text) and text not in _AUTH_SCHEMES:
        return text, 0
    text = _mask_pem(text)
    parts = _SPACES.split(text)
    for index in range(0, len(parts), 2):
        word = parts[index]
        if not word:
            continue
        if hide:
            parts[index], hide = MASK, hide - 1
            if word in _AUTH_SCHEMES:  # `Authorization: Bearer X`: the scheme, then X
                hide = 1
            continue
        parts[index], hide = _mask_word(word)
    return "".join(parts), hide


def mask_shapes(text: str) -> str:
    """Only what is a secret whatever surrounds it: URL userinfo, token formats, JWTs and PEM blocks.
    The last line of defence for messages that quote a user's input (an error line), where the
    looser rules (key=value, headers) would garble the message itself."""
    if not text or not (_SPECIAL.search(text) or "-----BEGIN" in text or len(text) >= 15):
        return text
    parts = _SPACES.split(_mask_pem(text))
    for index in range(0, len(parts), 2):
        parts[index] = _TOKEN_SHAPES.sub(MASK, _mask_userinfo(parts[index]))
    return "".join(parts)


def mask_argv(argv: Iterable[str]) -> list[str]:
    """A command line safe to print: credential flags' values hidden, every word masked by shape."""
    out: list[str] = []
    pending = None  # the flag whose value the next word is
    hide = 0  # words an auth scheme or header in the previous word left to hide
    for word in argv:
        if hide:
            masked, hide = _mask_words(word, hide)
            out.append(masked)
            continue
        if pending is not None:
            out.append(_flag_value(pending, word))
            chained = word in ("-", "") or (
                word.startswith("-") and _takes_credential(word.split("=", 1)[0])
            )
            pending = pending if chained else None  # `--password - X`, `--token --token X`: X too
            continue
        flag, sep, value = word.partition("=")
        if word.startswith("-") and _takes_credential(flag):
            if sep:
                out.append(f"{flag}={_flag_value(flag, value)}")
            elif len(flag) > 2 and flag[1] != "-" and flag[:2] in _SHORT_VALUE_FLAGS:
                out.append(flag[:2] + MASK)  # `-pSECRET`, mysql style
            else:
                out.append(word)
                pending = flag
            continue
        env = _ENV_WORD.fullmatch(word) if not word.startswith("-") else None
        if env and env.group(1).upper() == env.group(1):  # `env HF_TOKEN=x cmd`, `NCCL_PROTO=LL`
            out.append(f"{env.group(1)}={mask_env_value(env.group(1), env.group(2))}")
        else:
            masked, hide = _mask_words(word)
            out.append(masked)
    return out


# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _takes_credential(flag: str) -> bool:
    if flag in _SHORT_VALUE_FLAGS or flag in _HEADER_FLAGS or flag in _USER_FLAGS:
        return True
    if not flag.startswith("--"):
        return False
    words = set(re.split(r"[^A-Z0-9]+", flag.lstrip("-").upper()))
    squashed = flag.lstrip("-").upper().replace("-", "").replace("_", "")
    return bool(words & _FLAG_WORDS) or any(fragment in squashed for fragment in _FLAG_FRAGMENTS)


def _flag_value(flag: str, value: str) -> str:
    """A credential flag's value: `user:password` keeps the user, a header keeps its name."""
    if flag in _USER_FLAGS:
        user, sep, _ = value.partition(":")
        return f"{mask_text(user)}:{MASK}" if sep else mask_text(value)
    if flag in _HEADER_FLAGS:
        name, sep, _ = value.partition(":")
        return f"{name}: {MASK}" if sep and " " not in name else MASK
    return MASK


def _mask_word(word: str) -> tuple[str, int]:
    """One whitespace-free word masked by shape; also how many following words to hide (an auth
    header or scheme whose credential comes next)."""
    if word in _AUTH_SCHEMES:
        return word, 1
    if len(word) < 15 and not _SPECIAL.search(word):  # too short for any token shape, no structure
        return word, 0
    head, sep, rest = word.partition(":")
    header = (
        sep and _HEADER_NAME.fullmatch(head) and any(w in head.lower() for w in _AUTH_HEADER_WORDS)
    )
    if header and not rest:
        return word, 1  # `Authorization:` then its value
    if header and not rest.startswith("//"):
        return f"{head}:{MASK}", 0  # `Authorization:Bearer_x`, `X-Api-Key:abc`
    scheme_last = re.split(r"[=:]", word)[-1] in _AUTH_SCHEMES  # `...=Bearer` then the token
    word = _mask_userinfo(word)
    word = _mask_pairs(word)
    word = _TOKEN_SHAPES.sub(MASK, word)
    word = _RANDOM_RUN.sub(lambda m: MASK if _mixed(m.group(0)) else m.group(0), word)
    return word, int(scheme_last)


def _mask_userinfo(word: str) -> str:
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


def _mask_pairs(word: str) -> str:
    """`Server=db;Password=pw` -> `Server=<masked>;Password=<masked>`: values of key=value pairs
    inside a word; a pair whose key is a harmless variable name (`NCCL_PROTO=LL`) is kept."""
    if "=" not in word:
        return word
    out = []
    for piece in re.split(r"([;&,|])", word):
        key, sep, value = piece.partition("=")
        if (
            sep
            and value
            and _PAIR_KEY.fullmatch(key)
            and not is_harmless_name(key)
            and value != MASK
        ):
            piece = f"{key}={MASK}"
        out.append(piece)
    return "".join(out)


def _mask_pem(text: str) -> str:
    """`-----BEGIN ... KEY-----` ... `-----END ...-----` (or to the end when cut) -> MASK."""
    start = text.find("-----BEGIN")
    while start != -1:
        end = text.find("-----END", start)
        stop = len(text) if end == -1 else text.find("-----", end + 8)
        stop = len(text) if stop == -1 else stop + 5
        text = text[:start] + MASK + text[stop:]
        start = text.find("-----BEGIN", start + len(MASK))
    return text


def _mixed(run: str) -> bool:
    """Random-looking: lower and upper case letters and digits all present."""
    return (
        any(c.islower() for c in run)
        and any(c.isupper() for c in run)
        and any(c.isdigit() for c in run)
    )


# ---- the environment display policy: which names are shown, and how their values are ----------
# Why an allowlist: a process environment routinely holds tokens, cloud keys and passwords. By
# default only the families that decide what NCCL and torch.distributed do are shown; `--all`
# shows every name, but values only of families known to hold no credentials, and those masked by
# shape too (`mask_env_value`).

# Families whose values decide what NCCL, CUDA and torch.distributed do in a worker.
RELEVANT_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "NVSHMEM_", "TORCHELASTIC_")
RELEVANT_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_DEVICE_ORDER",
        "CUDA_MODULE_LOADING",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",  # decide which libnccl gets loaded
        "VLLM_NCCL_SO_PATH",
        "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY",
        "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY",
        "OMP_NUM_THREADS",
    }
)


def is_relevant(name: str) -> bool:
    return name.startswith(RELEVANT_PREFIXES) or name in RELEVANT_NAMES


def display_value(name: str, value: str | None) -> str | None:
    """The value as it may be printed (`mask_env_value`): shown only for harmless families, and
    even then masked by shape (URL passwords, key=value pairs, tokens)."""
    return mask_env_value(name, value)


def visible_env(env: Mapping[str, str], show_all: bool = False) -> dict[str, str]:
    """The names that may be shown (allowlisted families, or all with --all), values masked."""
    names = sorted(name for name in env if show_all or is_relevant(name))
    return {name: display_value(name, env[name]) for name in names}
