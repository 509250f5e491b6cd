"""An unlucky operator's config files (issue hostile table): one line naming
the file and what is wrong, never a traceback; a key that could never be sent
is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlm.server.settings.sources import ConfigError, load_settings


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'a = "\xff\xfe"\n', r"bad.toml: not UTF-8 text \(byte 5"),
        (("x = " + "[" * 3000 + "]" * 3000 + "\n").encode(), r"bad.toml: nested too deep"),
        (b'[[keys]]\nkey = " "\n', r"keys\[0\].key: must be printable ASCII without spaces"),
        (b'[[keys]]\nkey = "two words"\n', r"keys\[0\].key: must be printable ASCII"),
    ],
)
def test_a_hostile_file_is_one_line_naming_it(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        load_settings(path)
