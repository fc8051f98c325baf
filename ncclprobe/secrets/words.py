"""The context half of `ncclprobe.secrets`: one pass over a stream of words that hides a credential
by what introduces it (the flag, key or header before it); `shapes` finds what has no context.

Context, not a list of names: a value is hidden when what introduces it is a credential word
(`--password X`, `-passin pass:X`, `-Dpassword=X`, `--password:X`, `--api-key -- X`, `login user:X`,
`?token=X`, `"secret": "X"`, `Authorization: Bearer X`, `redis-cli -a X`, mysql's `-pX`), also
inside a word after punctuation (`/tmp/x?--password:X`, `x?login user:X`; a short flag only where
it starts a word); a
key=value pair whose key names nothing secret (`kernel.numa_balancing=0`, `opId=0x7f..`,
`bos_token_id`) is kept as it is.

A word holding spaces (an `sh -c "..."` string, a setproctitle title, a JSON config) is a stream of
its own, so flags inside it are found the same way.

Linear time: every pattern that scans a run starts only at the run's first character (a
look-behind) or at a quote, and each word is visited once.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ncclprobe.secrets.shapes import MASK, mask_pem, mask_shapes, mask_userinfo

# Name words that mark a credential (variable names, keys, flags).
SECRET_WORDS = frozenset(
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
SECRET_FRAGMENTS = ("SECRET", "TOKEN", "PASSW", "CREDENTIAL", "APIKEY", "ACCESSKEY", "PRIVATEKEY")
# Keys (`key=value`, `"key": value`) and flags: the same words, short forms too; not TOKENS
# (`--max-num-batched-tokens` counts tokens) and not the TOKEN fragment (`--tokenizer`).
_KEY_WORDS = (SECRET_WORDS - {"TOKENS"}) | {
    "PW",
    "SIG",
    "CONN",
    "CONNECTION",
    "CONNSTR",
    "USERPASS",
    "PASSIN",
    "PASSOUT",
    "SAS",
}
_KEY_FRAGMENTS = (
    "SECRET",
    "PASSW",
    "CREDENTIAL",
    "APIKEY",
    "ACCESSKEY",
    "PRIVATEKEY",
    "AUTHTOKEN",
    "ACCESSTOKEN",
    "APITOKEN",
)
# Credential words that mean nothing else, wherever they stand in a key.
_STRONG_WORDS = frozenset({"AUTHORIZATION", "COOKIE", "SIGNATURE", "PASSPHRASE", "BEARER", "JWT"})
# A key's last word that says it describes a credential rather than holds one.
_ABOUT_WORDS = frozenset(
    {"ID", "IDS", "IDX", "INDEX", "COUNT", "NUM", "SIZE", "LEN", "LENGTH", "DIM", "DIMS", "HEADS"}
    | {"HEAD", "LIMIT", "TYPE", "TYPES", "MODE", "METHOD", "FORMAT", "FILE", "PATH", "DIR", "NAME"}
    | {"NAMES", "URL", "URI", "TTL", "EXPIRY", "EXPIRES", "EXPIRATION", "AT", "LEVEL", "VERSION"}
    | {"ENABLED", "ENABLE", "PREFIX", "SUFFIX", "ALGORITHM", "ALG", "KIND", "SOURCE"}
)
_SHORT_VALUE_FLAGS = frozenset({"-p"})  # mysql -p PW, on a command line
_HEADER_FLAGS = frozenset({"-H", "--header", "--headers", "--proxy-header"})  # -H: curl's
_USER_FLAGS = frozenset({"-u", "--user", "--proxy-user", "--username", "--login", "login"})
# Programs whose short flags take a password: (flags followed by it, flags it is glued to).
_PROGRAMS = {
    "mysql": (("-p",), ("-p",)),
    "mysqldump": (("-p",), ("-p",)),
    "mysqladmin": (("-p",), ("-p",)),
    "mariadb": (("-p",), ("-p",)),
    "mariadb-dump": (("-p",), ("-p",)),
    "sshpass": (("-p",), ("-p",)),
    "mongo": (("-p",), ()),
    "mongosh": (("-p",), ()),
    "redis-cli": (("-a",), ()),
    "curl": (("-H",), ()),  # mpirun's -H is its hosts
    "wget": (("-H",), ()),
    "http": (("-H",), ()),
    "openssl": (("-k",), ()),
    **{  # programs whose -p/-a/-H mean something else: each ends the forms of the one before
        name: ((), ())
        for name in ("ssh", "scp", "rsync", "mpirun", "srun", "torchrun", "python", "python3")
        + ("sh", "bash", "env", "docker", "kubectl", "psql")
    },
}
AUTH_SCHEMES = frozenset(
    {"Bearer", "bearer", "Basic", "Digest", "Token", "ApiKey", "Api-Key", "Negotiate", "HMAC"}
)

_PAIR_KEY = re.compile(r"(?<![A-Za-z0-9_.\-])([A-Za-z0-9_.\-]+)=", re.ASCII)
_PAIR_VALUE = re.compile(r"[^;&,|\s'\"]*")  # to a separator or the quote around the pair
# `"key": "value"`, `'key': value` (JSON, a Python dict): from a quote, so each start is cheap
_QUOTED_PAIR = re.compile(
    r"([\"'])([A-Za-z_][A-Za-z0-9_.\-]*)\1(\s*:\s*)(\"[^\"\\]*(?:\\.[^\"\\]*)*\"|'[^']*'|[^\s,;}\]]+)",
    re.ASCII,
)
ENV_WORD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.ASCII | re.S)
_SPACES = re.compile(r"(\s+)")
_SPECIAL = re.compile(r"[:=@]")
_HEADER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9\-]{0,63}", re.ASCII)  # an HTTP header's name
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NOT_WORD = re.compile(r"[^A-Z0-9]+")
_QUOTES = "\"'"
_STARTS = "-\"'"  # a flag or a quote: the word needs the full look
_PLAIN_STOP = re.compile(r"[:=@/?&(,;|]")  # a pair, a header, a URL, a path, a query, a list
# A credential flag or `login` inside a word, after punctuation (`/tmp/x?--password:X`,
# `(--token X`, `a=--password:X`, `x?login admin:X`); a name run starts only after a character
# outside it, so the scan stays linear.
_EMBEDDED_FLAG = re.compile(r"(?<=[^A-Za-z0-9_.\-'\"\s])(-{1,2}[A-Za-z][A-Za-z0-9_.\-]*)", re.ASCII)
_EMBEDDED_LOGIN = re.compile(r"(?<=[^A-Za-z0-9_.\-'\"\s])login$", re.ASCII | re.I)


@lru_cache(maxsize=4096)
def credential_key(key: str) -> bool:
    """A key or flag name that introduces a credential: its last word is one (`password`,
    `accessToken`, `X-Amz-Signature`, `sig`, `api_key`, `AccountKey`), an unambiguous one is
    anywhere before a last word that does not merely describe it (`cookie_value`), or it holds an
    unambiguous fragment (`client_secret_id`, `apikey`). Not `opId`, `kernel.numa_balancing`,
    `tokenizer`, `NCCL_IB_PKEY`, `pass_config`, `bos_token_id`, `num_key_value_heads`,
    `ms_per_token`, `per_token_bytes`: ML configs are full of tokens and keys that are counts."""
    words = [w for w in _NOT_WORD.split(_CAMEL.sub(r"\1_\2", key).upper()) if w]
    if any(f in "".join(words) for f in _KEY_FRAGMENTS):
        return True
    if not words or "PER" in words:  # a rate
        return False
    if words[-1] in _KEY_WORDS:
        return True
    return bool(set(words) & _STRONG_WORDS) and words[-1] not in _ABOUT_WORDS


class Words:
    """One stream of words (a command line, a log line, a value) masked in one pass. `command`: the
    words are a command line, so `NAME=value` words are environment assignments, shown only under
    the environment policy (`env_value`)."""

    def __init__(self, env_value, command: bool = False):
        self.env_value = env_value  # (name, value) -> what may be shown: ncclprobe.secrets' policy
        self.command = command
        self.pending: str | None = None  # the flag whose value the next word is
        self.hide = 0  # words an auth scheme or header left to hide
        self.quote = ""  # a hidden value opened by this quote runs until it closes
        # short flags that take a password: a command line's `-p X` always (mysql's; an ssh port is
        # hidden too), free text's only after a program that reads it so (`ssh -p 2222` in a log)
        self.takes: set[str] = set(_SHORT_VALUE_FLAGS) if command else set()
        self.glued: set[str] = set()

    def arg(self, word: str) -> str:
        """One word of a command line; spaces inside it make it a stream of its own (`sh -c`)."""
        if self.pending is not None and not self.hide:
            return self._value(self.pending, word, whole=True)
        return self.text(word)

    def text(self, text: str) -> str:
        if not text:
            return text
        text = mask_quoted_pairs(mask_pem(text))
        parts = _SPACES.split(text)
        for index in range(0, len(parts), 2):
            if parts[index]:
                parts[index] = self.word(parts[index])
        self.quote = ""  # a quote left open ends with its text
        return "".join(parts)

    def word(self, word: str) -> str:
        """One whitespace-free word."""
        if self.quote:
            if word.endswith(self.quote):
                self.quote = ""
                return MASK + word[-1]
            return MASK
        if self.hide:
            self.hide -= 1
            if word in AUTH_SCHEMES:  # `Authorization: Bearer X`: the scheme, then X
                self.hide = 1
            return MASK
        if self.pending is not None:
            return self._value(self.pending, word)
        if word[0] not in _STARTS and len(word) < 15 and not _PLAIN_STOP.search(word):
            return self._plain(word)
        lead = len(word) - len(word.lstrip(_QUOTES))
        trail = len(word) - len(word.rstrip(_QUOTES)) if lead else 0  # `'--password`, `"-pX"`
        core = word[lead : len(word) - trail] if lead + trail < len(word) else ""
        self._note_program(core)
        if core.startswith("-") and len(core) > 1:
            flagged = self._flag(core)
            if flagged is not None:
                return word[:lead] + flagged + word[len(word) - trail :]
        elif core.lower() == "login":
            self.pending = "login"
            return word
        env = ENV_WORD.fullmatch(core) if self.command else None
        if env and env.group(1).upper() == env.group(1):  # `env HF_TOKEN=x cmd`, `NCCL_PROTO=LL`
            shown = f"{env.group(1)}={self.env_value(env.group(1), env.group(2))}"
            return word[:lead] + shown + word[len(word) - trail :]
        embedded = self._embedded(core)
        if embedded is not None:
            return word[:lead] + embedded + word[len(word) - trail :]
        masked, self.hide = mask_word(word)
        return masked

    def _embedded(self, core: str) -> str | None:
        """A word whose credential flag or `login` follows punctuation inside it: what comes
        before is masked by shape, the flag as a flag; None where there is none."""
        if _EMBEDDED_LOGIN.search(core):
            self.pending = "login"
            return mask_word(core)[0]
        for match in _EMBEDDED_FLAG.finditer(core):
            flag = _split_flag(match.group(1))[0]
            if len(flag.lstrip("-")) < 2 or not self._takes(flag):  # short flags: only at a start
                continue
            flagged = self._flag(core[match.start() :])
            if flagged is not None:
                return mask_word(core[: match.start()])[0] + flagged
        return None

    def _plain(self, word: str) -> str:
        """A short word without structure (most of any text): only a program's name, `login` or an
        auth scheme change what the next words are."""
        if word in _PROGRAMS:
            self._note_program(word)
        elif word in AUTH_SCHEMES:
            self.hide = 1
        elif word.lower() == "login":
            self.pending = "login"
        return word

    def _value(self, flag: str, word: str, whole: bool = False) -> str:
        """The word after `flag` (the pending credential flag), masked as its value."""
        self.pending = None
        if word == "--":  # `--api-key -- X`: the end of options, then X
            self.pending = flag
            return word
        if word.startswith("--") and not self._takes(_split_flag(word)[0]):
            return self.word(word)  # the flag before took no value (`--enable-auth --port 80`)
        chained = word in ("-", "") or (word.startswith("-") and self._takes(_split_flag(word)[0]))
        if chained:  # `--password - X`, `--token --token X`: X too
            self.pending = flag
        if not whole and word[:1] in _QUOTES and not (len(word) > 1 and word.endswith(word[0])):
            self.quote = word[0]  # `--password "two words"`
            return word[0] + MASK
        core = word.strip(_QUOTES)
        if whole or not core:
            return flag_value(flag, word)
        lead = word[: len(word) - len(word.lstrip(_QUOTES))]  # a message's `'--password X'`
        return lead + flag_value(flag, core) + word[len(lead) + len(core) :]

    def _flag(self, core: str) -> str | None:
        """A word that starts with `-`, masked where it is or introduces a credential; None: not a
        credential flag (the word is then masked by shape)."""
        if core.startswith("-D") and "=" in core:  # a Java property: -Dpassword=X
            key, _, value = core[2:].partition("=")
            return f"-D{key}={MASK}" if value and credential_key(key) else None
        flag, sep, value = _split_flag(core)
        if self._takes(flag):
            if sep and value[:1] in _QUOTES and not (len(value) > 1 and value.endswith(value[0])):
                self.quote = value[0]  # `--token="two words"`
                return f"{flag}{sep}{value[0]}{MASK}"
            if sep and value:
                return f"{flag}{sep}{flag_value(flag, value)}"
            self.pending = flag
            return core
        if core[:2] in self.glued and len(core) > 2 and core[1] != "-":
            return core[:2] + MASK  # `-pSECRET`, mysql style
        return None

    def _takes(self, flag: str) -> bool:
        """Whether a flag's value is a credential."""
        if flag in self.takes or (flag in _HEADER_FLAGS and flag != "-H") or flag in _USER_FLAGS:
            return True
        name = flag.lstrip("-")
        return len(name) > 1 and credential_key(name)  # --password, -passin, --api-key

    def _note_program(self, word: str) -> None:
        if word not in _PROGRAMS and "/" not in word:
            return
        name = word.rsplit("/", 1)[-1]
        if name in _PROGRAMS:  # a new program: its own short forms replace the last one's
            takes, glued = _PROGRAMS[name]
            self.takes = set(takes) | (_SHORT_VALUE_FLAGS if self.command else set())
            self.glued = set(glued)


def flag_value(flag: str, value: str) -> str:
    """A credential flag's value: `user:password` keeps the user, a header keeps its name."""
    if flag in _USER_FLAGS:
        user, sep, _ = value.partition(":")
        return f"{mask_word(user)[0]}:{MASK}" if sep else mask_word(value)[0]
    if flag in _HEADER_FLAGS:
        name, sep, _ = value.partition(":")
        return f"{name}: {MASK}" if sep and " " not in name else MASK
    return MASK


def _split_flag(word: str) -> tuple[str, str, str]:
    """`--password=X`, `--password:X` -> (flag, separator, value)."""
    cut = [i for i in (word.find("="), word.find(":")) if i != -1]
    if not cut:
        return word, "", ""
    at = min(cut)
    return word[:at], word[at], word[at + 1 :]


def mask_word(word: str) -> tuple[str, int]:
    """One whitespace-free word masked by shape and by its own keys; also how many following words
    to hide (an auth header or scheme whose credential comes next)."""
    if word in AUTH_SCHEMES:
        return word, 1
    if len(word) < 15 and not _SPECIAL.search(word):  # too short for any token shape, no structure
        return word, 0
    head, sep, rest = word.partition(":")
    header = sep and _HEADER_NAME.fullmatch(head) and credential_key(head)  # not `tiktoken:`
    if header and not rest:
        return word, 1  # `Authorization:` then its value
    if header and not rest.startswith("//"):
        return f"{head}:{MASK}", 0  # `Authorization:Bearer_x`, `X-Api-Key:abc`
    scheme_last = re.split(r"[=:]", word)[-1] in AUTH_SCHEMES  # `...=Bearer` then the token
    word = mask_pairs(mask_userinfo(word)) if "=" in word else word
    return mask_shapes(word), int(scheme_last)


def mask_pairs(word: str) -> str:
    """`password=X`, `?token=X`, `&sig=X`, `Password=X;`, `NCCL_IB_HCA=h?token=X` -> the key kept,
    the value masked; a key that names nothing secret keeps its value (`kernel.numa_balancing=0`,
    `opId=0x..`), whose own text is still searched for pairs (a query inside a setting)."""
    out, done = [], 0
    for match in _PAIR_KEY.finditer(word):
        key = match.group(1)
        if match.start() < done or not credential_key(key.lstrip("-.")):
            continue
        found = _PAIR_VALUE.match(word, match.end())  # always: it matches the empty string too
        value = found.group(0) if found else ""
        if not value or value == MASK:
            continue
        if key.upper() in ("PWD", "OLDPWD") and value[:1] in ("/", "~"):  # the shell's directory
            continue
        out += [word[done : match.end()], MASK]
        done = match.end() + len(value)
    return "".join(out) + word[done:]


def mask_quoted_pairs(text: str) -> str:
    """`"password": "X"` -> `"password": "<masked>"`, in JSON or a Python dict printed as text."""
    if ":" not in text or not ('"' in text or "'" in text):
        return text

    def masked(match: re.Match) -> str:
        quote, key, colon, value = match.groups()
        if not credential_key(key) or value.strip(_QUOTES) == MASK:
            return match.group(0)
        shown = f"{value[0]}{MASK}{value[0]}" if value[0] in _QUOTES else MASK
        return f"{quote}{key}{quote}{colon}{shown}"

    return _QUOTED_PAIR.sub(masked, text)
