"""A speculative draft checkpoint's `config.json` (`diagnose --draft-config`, or the draft directory a
server log names when it is on this machine): what the draft is, for the configuration checks
(`diagnose.run.rules_spec_config`). Only the fields named here are read; nothing is loaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.validate import MIB, load_json


@dataclass(frozen=True)
class DraftConfig:
    path: str
    architectures: tuple[str, ...]
    vocab_size: int | None
    draft_vocab_size: int | None
    hidden_size: int | None
    aux_layer_ids: tuple[int, ...] | None  # eagle_config.eagle_aux_hidden_state_layer_ids
    use_aux_hidden_state: bool | None


def read_draft_config(path: str | Path) -> DraftConfig:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    doc = load_json(p, "draft config", limit=16 * MIB)
    if not isinstance(doc, dict) or not isinstance(doc.get("architectures"), list):
        raise UsageProblem(f"{str(p)!r} is not a draft config (a JSON object with architectures)")
    raw = doc.get("eagle_config")
    eagle = raw if isinstance(raw, dict) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    use = eagle.get("use_aux_hidden_state")
    return DraftConfig(
        path=str(p),
        architectures=tuple(str(a) for a in doc["architectures"]),
        vocab_size=_count(doc.get("vocab_size")),
        draft_vocab_size=_count(doc.get("draft_vocab_size")),
        hidden_size=_count(doc.get("hidden_size")),
        aux_layer_ids=tuple(ids) if isinstance(ids, list) and all(_whole(i) for i in ids) else None,
        use_aux_hidden_state=use if isinstance(use, bool) else None,
    )


def local_draft(path: str | None) -> Path | None:
    """The draft a log names, when it is a directory on this machine holding a config.json."""
    if not path:
        return None
    candidate = Path(path)
    return candidate if (candidate / "config.json").is_file() else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and _whole(value) and value > 0 else None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
