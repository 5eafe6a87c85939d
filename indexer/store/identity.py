"""Which exact generation of an index a selection was made from, and whether two agree.

A selection's manifest names the index it was made from (`index`: path, uuid, manifest_sha256,
model, rows, generation). Its rows mean the same sentences only in that generation: after
`tapt index add` (or in a copy that grew apart under the same uuid) the same row ids can hold
other text. `tapt index reindex`, `repair` and `upgrade` keep the rows and the text; they list the
manifest hashes they replaced under `same_content_as`, so selections made before them still match.
Pure dictionaries: the trainer imports this without faiss or torch.
"""

from __future__ import annotations

from typing import Any


def describe(block: dict[str, Any]) -> str:
    """`generation 2 (1,234 sentences, manifest 3f2a9c1b0d4e)` from an index block."""
    rows = block.get("rows")
    sha = str(block.get("manifest_sha256") or "?")[:12]
    return (f"generation {block.get('generation', '?')} ("
            + (f"{int(rows):,} sentences, " if isinstance(rows, int) else "")
            + f"manifest {sha})")


CONTENT_KEYS = ("uuid", "manifest_sha256", "generation", "rows")


def same_snapshot(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two index blocks (`Index.identity`) name the very same generation, by content:
    its uuid, manifest hash, generation number and rows. The path is never compared: one
    directory has many spellings (relative, absolute, through a symlink, another node's mount).

    Args:
        a: An index block.
        b: Another index block.

    Returns:
        True when both name one generation.
    """
    return bool(a.get("uuid")) and bool(a.get("manifest_sha256")) and all(
        a.get(key) == b.get(key) for key in CONTENT_KEYS)


def same_generation(recorded: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether an index block recorded by a selection names the generation `current` is."""
    if recorded.get("uuid") != current.get("uuid"):
        return False
    sha = recorded.get("manifest_sha256")
    if not sha:
        return False
    if sha != current.get("manifest_sha256") and sha not in (current.get("same_content_as") or ()):
        return False
    rows = recorded.get("rows")
    return rows is None or rows == current.get("rows")


def generation_mismatch(recorded: Any, current: dict[str, Any]) -> str | None:
    """Why a selection's recorded index block does not fit the index `current`, or None."""
    if not isinstance(recorded, dict) or not recorded.get("uuid"):
        return "does not name the index it was selected from; select again"
    if recorded["uuid"] != current.get("uuid"):
        return (f"was selected from another index ({recorded.get('path')}, uuid "
                f"{recorded['uuid']}), not {current.get('path')} (uuid {current.get('uuid')})")
    if same_generation(recorded, current):
        return None
    return (f"was selected from another generation of index {current.get('path')}: the selection "
            f"names {describe(recorded)}, the index is {describe(current)} (changed by tapt index "
            "add, or a copy that grew apart); select again from this index")
