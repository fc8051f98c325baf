"""A model's shape from a Hugging Face `config.json` (`diagnose --model-config FILE`), for the
expected verify/decode ratio when the evidence itself (a profile, a log) carries no shape.

Only the widths and counts are read, under the names `diagnose.expectations` knows; nothing of
the model is loaded.
"""

from __future__ import annotations

from pathlib import Path

from ncclprobe.errors import UsageProblem
from ncclprobe.validate import MIB, load_json

_FIELDS = {
    "hidden": ("hidden_size", "d_model", "n_embd"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "vocab": ("vocab_size",),
}


def read_model_config(path: str | Path) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    doc = load_json(
        p, "model config", limit=16 * MIB
    )  # size limit, /dev/zero, binary, NaN: validate
    if isinstance(doc, dict) and isinstance(doc.get("text_config"), dict):
        doc = {**doc, **doc["text_config"]}  # multimodal configs nest the language model's
    if not isinstance(doc, dict):
        raise UsageProblem(
            f"{str(p)!r} is not a model config (a JSON object with hidden_size, num_hidden_layers)"
        )
    model = {
        name: next((doc[k] for k in keys if _count(doc.get(k))), None)
        for name, keys in _FIELDS.items()
    }
    if not model["hidden"] or not model["layers"]:
        raise UsageProblem(
            f"{str(p)!r} has no hidden_size and num_hidden_layers: not a transformer config.json"
        )
    model.update({k: v for k, v in doc.items() if _count(v)})
    model["moe"] = bool(
        doc.get("num_experts") or doc.get("n_routed_experts") or doc.get("num_local_experts")
    )
    if doc.get("num_local_experts") and not doc.get("num_experts"):
        model["num_experts"] = doc["num_local_experts"]
    model["name"] = doc.get("_name_or_path") or p.parent.name
    return model


def _count(value: object) -> bool:
    """A width or a count: a positive whole number (`true` is not one, nor a 5000-digit number)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63
