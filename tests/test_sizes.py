"""Size parsing: the forms the CLI accepts and the one-line errors for everything else."""

import pytest

from ncclprobe.errors import UsageProblem
from ncclprobe.sizes import format_size, parse_size, parse_sizes


@pytest.mark.parametrize(
    "text,expected",
    [
        ("8", 8),
        ("64K", 65536),
        ("1M", 1 << 20),
        ("1G", 1 << 30),
        ("4k", 4096),
        ("2MiB", 2 << 20),
        ("16B", 16),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("8..64", [8, 16, 32, 64]),
        ("4K,64K,1M", [4096, 65536, 1 << 20]),
        ("1M..16M:4", [1 << 20, 4 << 20, 16 << 20]),
        ("64,8..16,64", [8, 16, 64]),  # sorted, duplicates once
        ("8..1G", [8 << i for i in range(28)]),
        ("5..5", [5]),
    ],
)
def test_parse_sizes(spec, expected):
    assert parse_sizes(spec) == expected


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("1Q", "'1Q'"),
        ("-5", "'-5'"),
        ("1M..1K", "below the minimum"),
        ("0", "positive"),
        ("", "empty"),
        ("1.5K", "'1.5K'"),
        ("8..64:1", "factor"),
        ("8..", "''"),
    ],
)
def test_bad_sizes_name_the_problem(spec, needle):
    with pytest.raises(UsageProblem) as info:
        parse_sizes(spec)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "nbytes,text", [(7, "7B"), (1024, "1K"), (1536, "1.5K"), (1 << 30, "1G"), (65536, "64K")]
)
def test_format_size(nbytes, text):
    assert format_size(nbytes) == text
