"""The text codec's BOS token, as tokenizer_config.json writes it (a string, or an older AddedToken
object), and a BOS token the vocabulary lacks (named, never a None id in the prompt)."""

import pytest

from ncclprobe.engine.tokenizer import TextCodec
from ncclprobe.errors import UsageProblem

tokenizers = pytest.importorskip("tokenizers")


def _codec(config: dict) -> TextCodec:
    vocab = {"<s>": 0, "<unk>": 1, "hello": 2, "world": 3}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return TextCodec(tokenizer, config, "ckpt")


@pytest.mark.parametrize("bos", ["<s>", {"__type": "AddedToken", "content": "<s>"}])
def test_the_bos_token_is_added_as_either_form_writes_it(bos):
    assert _codec({"add_bos_token": True, "bos_token": bos}).encode("hello world") == [0, 2, 3]


def test_without_add_bos_token_no_bos_is_added():
    assert _codec({"add_bos_token": False, "bos_token": "<s>"}).encode("hello world") == [2, 3]


def test_a_bos_token_outside_the_vocabulary_is_named():
    with pytest.raises(UsageProblem, match="adds the BOS token '<bos>', which its vocabulary"):
        _codec({"add_bos_token": True, "bos_token": "<bos>"}).encode("hello")
