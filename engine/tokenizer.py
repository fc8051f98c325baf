"""Text in, text out: the tokenizer of a checkpoint directory (Hugging Face `tokenizer.json` and
`tokenizer_config.json`, as `gguf_tokenizer` writes them or a downloaded checkpoint holds them).

Tokenizing happens in the parent process only: workers receive token ids and return token ids,
and the parent decodes them for the table and the trace. Special tokens are kept in decoded text
(an instruct model's `<|im_end|>` shows where it ended its answer; the engine runs on for
`--new-tokens`, as benchmarks with ignore-EOS do).

`--chat` wraps each prompt in the checkpoint's chat template (jinja2, sandboxed, as transformers'
`apply_chat_template` renders it: one user message and the generation prompt).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ncclprobe.errors import UsageProblem

if TYPE_CHECKING:  # the `gguf` extra's package, imported where a tokenizer is loaded
    from tokenizers import Tokenizer


@dataclass(frozen=True)
class TextCodec:
    tokenizer: Tokenizer
    config: dict  # tokenizer_config.json
    source: str

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        bos = self.config.get("bos_token")
        if isinstance(
            bos, dict
        ):  # older configs write an AddedToken object: {"content": "<s>", ...}
            bos = bos.get("content")
        if not self.config.get("add_bos_token") or bos is None:
            return ids
        bos_id = self.tokenizer.token_to_id(str(bos))
        if bos_id is None:
            raise UsageProblem(
                f"{self.source}: its tokenizer config adds the BOS token {bos!r}, which its "
                "vocabulary does not hold"
            )
        return [bos_id, *ids]

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def chat(self, text: str) -> str:
        """`text` as the single user turn of the checkpoint's chat template, ready for the answer."""
        template = self.config.get("chat_template")
        if not template:
            raise UsageProblem(f"{self.source} has no chat template; leave out --chat")
        try:
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:
            raise UsageProblem("--chat needs jinja2: pip install jinja2") from None

        def refuse(message):
            raise UsageProblem(f"{self.source}: its chat template refused the prompt: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = refuse
        return env.from_string(template).render(
            messages=[{"role": "user", "content": text}],
            add_generation_prompt=True,
            bos_token=self.config.get("bos_token") or "",
            eos_token=self.config.get("eos_token") or "",
        )


def load_codec(directory: str | Path) -> TextCodec:
    """The tokenizer of a checkpoint directory, or a one-line reason why text cannot be used."""
    directory = Path(directory)
    path = directory / "tokenizer.json"
    if not path.exists():
        from ncclprobe.engine.gguf_loader import conversion_record

        record = (conversion_record(directory) or {}).get("tokenizer") or {}
        why = f" ({record['reason']})" if record.get("reason") else ""
        raise UsageProblem(
            f"{directory} has no tokenizer.json{why}: text prompts cannot be encoded; "
            f'give token ids (--prompts FILE.jsonl with "ids") or none (random prompts)'
        )
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UsageProblem(
            "text prompts need the tokenizers package: pip install 'ncclprobe[gguf]'"
        ) from None
    config_path = directory / "tokenizer_config.json"
    try:
        config = json.loads(config_path.read_text()) if config_path.exists() else {}
        return TextCodec(Tokenizer.from_file(str(path)), config, str(directory))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for a malformed file
        raise UsageProblem(f"cannot read the tokenizer of {directory}: {exc}") from None
