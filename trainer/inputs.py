"""Reading the selections a run trains on, with the checks that they belong together."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Sequence

from tapt.errors import InputError
from tapt.indexer.store.identity import describe
from tapt.retriever.selections.file_format import (
    SelectedSegment,
    checked_selection,
    manifest_path,
    read_manifest,
)
from tapt.util.files import sha256_file

if TYPE_CHECKING:
    from tapt.indexer.reading.reader import TextInput

logger = logging.getLogger(__name__)


def read_texts(paths: Sequence[str], strings: Sequence[str], text_field: str, what: str,
               param: str) -> TextInput | None:
    """Task or held-out text given as files (read with the corpus readers) or as strings (one
    document each, `retriever.tasks.forms.text_from_strings`); None when neither is given.

    Args:
        paths: Files, folders, URLs or "-".
        strings: Or the text itself.
        text_field: The field or column with the text in files.
        what: How messages name the text ("task text").
        param: The argument's name, for errors.

    Returns:
        The text, split into sentences as a corpus is.
    """
    from tapt.indexer.reading.reader import read_text
    from tapt.retriever.tasks.forms import text_from_strings

    if strings:
        return text_from_strings(strings, True, what=what, param=param)
    if paths:
        return read_text(paths, text_field=text_field, what=f"the {what}")
    return None


def check_selections(paths: Sequence[str]) -> None:
    """The cheap refusals of `load_selections`, from the manifests alone (no segment read, no
    torch imported): a file that is no selection (an export), a missing manifest, selections
    of different indexes or generations. `tapt.train` runs them before anything slow.

    Args:
        paths: The selection files.

    Raises:
        InputError: as `load_selections` would, before it reads a segment.
    """
    first: tuple[str, dict[str, Any]] | None = None
    for path in paths:
        first = _one_index(first, str(path), read_manifest(path))


def _one_index(first: tuple[str, dict[str, Any]] | None, path: str, manifest: dict[str, Any]
               ) -> tuple[str, dict[str, Any]] | None:
    """The first selection's (path, index) once `manifest`'s index is checked against it: a
    selection of another index, or of another generation of it, is refused (its rows would
    refer to other text)."""
    index = manifest.get("index") or {}
    if not (isinstance(index, dict) and index.get("uuid")):
        return first
    if first is None:
        return path, index
    if index["uuid"] != first[1]["uuid"]:
        raise InputError(
            f"selections {first[0]} and {path} come from different indexes "
            f"(uuid {first[1]['uuid']} vs {index['uuid']}); train on selections of one index")
    if index.get("manifest_sha256") != first[1].get("manifest_sha256"):
        raise InputError(
            f"selections {first[0]} and {path} come from different generations of "
            f"index {index['uuid']}: {describe(first[1])} vs {describe(index)}; select "
            "again from one generation")
    return first


def load_selections(paths: Sequence[str], progress: bool = False
                    ) -> tuple[list[SelectedSegment], list[dict[str, Any]]]:
    """All segments of the selection files (in order) and a provenance record per file.

    Refuses a selection without segments, and selections made from different indexes or from
    different generations of one index (after `tapt index add`, or copies that grew apart under
    one uuid): their rows would refer to different text. A selection given twice (the same
    file, or a copy of it) is read once, with a warning; selections that overlap are not
    merged (each keeps its segments). `progress` shows a bar of the segments read.
    """
    from tqdm.auto import tqdm

    segments: list[SelectedSegment] = []
    records: list[dict[str, Any]] = []
    first: tuple[str, dict[str, Any]] | None = None
    seen: dict[str, str] = {}
    check_selections(paths)
    bar = tqdm(desc="read selections", unit="seg", disable=not progress, dynamic_ncols=True)
    for path in paths:
        with checked_selection(path) as (manifest, read):
            segs = []
            for segment in read:
                segs.append(segment)
                if len(segs) % 4096 == 0:
                    bar.update(4096)
            bar.update(len(segs) % 4096)
        manifest_sha = sha256_file(manifest_path(path))    # the same run: same manifest
        if manifest_sha in seen:
            logger.warning("selection %s is the same as %s: read once", path, seen[manifest_sha])
            continue
        seen[manifest_sha] = str(path)
        digest = manifest.get("selection_sha256") or sha256_file(path)
        if not segs:
            raise InputError(f"selection {path} has no segments; nothing to train on")
        first = _one_index(first, str(path), manifest)
        index = manifest.get("index") or {}
        segments.extend(segs)
        records.append({
            "path": str(path),
            "selection_sha256": digest,
            "manifest_sha256": manifest_sha,
            "method": manifest.get("method"),
            "index": index if isinstance(index, dict) else None,
            "task": manifest.get("task"),
            "segments": len(segs),
        })
    bar.close()
    return segments, records


def check_task_matches(records: Sequence[dict[str, Any]], task_hashes: Sequence[str],
                       combined: str | None = None) -> None:
    """Warn when --task is not the task text the selections were made for (per their manifests).

    Args:
        records: The selections' records (`load_selections`), each with its manifest's task.
        task_hashes: SHA-256 of each --task file.
        combined: The one SHA-256 over all of them in order, as a selection made from several
            task files records it.
    """
    if not task_hashes:
        return
    given = set(task_hashes) | ({combined} if combined else set())
    for rec in records:
        task = rec.get("task") or {}
        recorded = task.get("sha256") if isinstance(task, dict) else None
        if isinstance(recorded, str):
            recorded = [recorded]
        if recorded and not given & set(recorded):
            logger.warning(
                "--task differs from the task text selection %s was made for (sha256 mismatch)",
                rec["path"],
            )
