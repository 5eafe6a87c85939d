"""The README's sections that the documentation site includes, for the tests that check them."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def readme_section(name: str) -> str:
    """The text between README's `--8<-- [start:NAME]` and `[end:NAME]` markers (the sections
    the documentation site includes)."""
    match = re.search(rf"<!-- --8<-- \[start:{name}\] -->\n(.*?)<!-- --8<-- \[end:{name}\] -->",
                      README, re.S)
    assert match, f"README.md has no section {name!r}"
    return match.group(1)
