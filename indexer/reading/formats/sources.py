"""Where an input's bytes come from: local files and folders, fsspec URLs (s3://, gs://, hf://,
https://, memory://, file://), standard input, or a Hugging Face Hub dataset; and the pieces of
decompression (.gz, .zst, .bz2, .xz) and line reading that `base.InputFile` uses."""

from __future__ import annotations

import codecs
import hashlib
import io
import lzma
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from tapt.errors import InputError
from tapt.util.files import hash_stream, sha256_file

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
SNIFF_BYTES = 8192
MAX_LINE_BYTES = 256 << 20     # one line (one record of a line format) at most


class Source:
    """One input location. `name` is how messages and manifests show it; `key` identifies it
    for deduplication (a resolved path, a URL)."""

    name: str
    key: str
    local: Path | None = None

    def open(self) -> BinaryIO:
        """The raw bytes (compressed as stored)."""
        raise InputError(f"{self.name}: not a file")

    def is_dir(self) -> bool:
        return False

    def exists(self) -> bool:
        return True

    def child(self, relative: str) -> "Source":
        raise InputError(f"{self.name}: not a folder")

    def entries(self) -> list[tuple[str, str]]:
        """(name, kind) of a folder's entries, sorted by name; kind: file, dir or other."""
        return []

    def files(self) -> list["Source"]:
        """Every file under a folder, sorted by path (the file itself when it is one)."""
        if not self.is_dir():
            return [self]
        out: list[Source] = []
        for name, kind in self.entries():
            if kind in ("file", "dir"):
                out.extend(self.child(name).files())
        return out

    @property
    def basename(self) -> str:
        return self.name.rstrip("/").rsplit("/", 1)[-1]

    def identity(self) -> list[Any]:
        """What changes when the input changes (a changed input forbids resuming a build)."""
        return [self.key]

    def digest(self, *digests: Any) -> None:
        """Feed the input's bytes (a folder's files in order) to hashlib objects."""
        for file in self.files():
            with file.open() as fh:
                hash_stream(fh, *digests)

    def sha256(self) -> str:
        h = hashlib.sha256()
        self.digest(h)
        return h.hexdigest()


@dataclass(eq=False)
class LocalSource(Source):
    path: Path

    def __post_init__(self) -> None:
        self.name = str(self.path)
        # opened through its absolute path: a Ray worker's working directory is not the driver's
        self.path = Path(os.path.abspath(self.path))
        self.key = os.path.realpath(self.path)  # never raises, even on a symlink loop
        self.local = self.path

    def open(self) -> BinaryIO:
        try:
            return open(self.path, "rb")
        except OSError as exc:
            raise InputError(f"{self.name}: cannot read ({exc.strerror or exc})") from exc

    def exists(self) -> bool:
        return self.path.exists()

    def is_dir(self) -> bool:
        return self.path.is_dir()

    def child(self, relative: str) -> "LocalSource":
        child = LocalSource(self.path / relative)
        child.name = str(Path(self.name) / relative)   # shown as its folder was given
        return child

    def entries(self) -> list[tuple[str, str]]:
        out = []
        try:
            with os.scandir(self.path) as it:
                for entry in it:
                    try:  # symlinked folders are not followed (no loops); symlinked files are
                        kind = ("dir" if entry.is_dir(follow_symlinks=False) else
                                "file" if entry.is_file() else "other")
                    except OSError:
                        kind = "other"
                    out.append((entry.name, kind))
        except OSError as exc:
            raise InputError(f"{self.name}: cannot list ({exc.strerror or exc})") from exc
        return sorted(out)

    def identity(self) -> list[Any]:
        if self.is_dir():
            return [f.identity() for f in self.files()]
        st = self.path.stat()
        return [self.key, st.st_size, st.st_mtime_ns]

    def sha256(self) -> str:
        if self.is_dir():
            return super().sha256()
        return sha256_file(self.path)


@dataclass(eq=False)
class RemoteSource(Source):
    """A file or folder behind an fsspec URL (`name` is the URL as given, `path` the
    filesystem's own path for it)."""

    fs: Any
    path: str
    url: str

    def __post_init__(self) -> None:
        self.name = self.url
        self.key = self.fs.unstrip_protocol(self.path)

    def _fail(self, exc: Exception) -> InputError:
        return InputError(f"{self.name}: cannot read ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})")

    def open(self) -> BinaryIO:
        try:
            return self.fs.open(self.path, "rb")
        except Exception as exc:  # any backend's error (network, permissions) is one line
            raise self._fail(exc) from exc

    def exists(self) -> bool:
        try:
            return bool(self.fs.exists(self.path))
        except Exception as exc:
            raise self._fail(exc) from exc

    def is_dir(self) -> bool:
        try:
            return bool(self.fs.isdir(self.path))
        except Exception as exc:
            raise self._fail(exc) from exc

    def child(self, relative: str) -> "RemoteSource":
        return RemoteSource(self.fs, self.path.rstrip("/") + "/" + relative,
                            self.url.rstrip("/") + "/" + relative)

    def entries(self) -> list[tuple[str, str]]:
        try:
            listing = self.fs.ls(self.path, detail=True)
        except Exception as exc:
            raise self._fail(exc) from exc
        out = []
        for info in listing:
            name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
            kind = {"file": "file", "directory": "dir"}.get(info.get("type"), "other")
            out.append((name, kind))
        return sorted(out)

    def identity(self) -> list[Any]:
        if self.is_dir():
            return [f.identity() for f in self.files()]
        try:
            return [self.key, self.fs.ukey(self.path)]
        except Exception as exc:
            raise self._fail(exc) from exc


@dataclass(eq=False)
class StdinSource(Source):
    """Standard input, read once into memory (task text is small)."""

    data: bytes

    def __post_init__(self) -> None:
        self.name = "<stdin>"
        self.key = "-"

    def open(self) -> BinaryIO:
        return io.BytesIO(self.data)

    def identity(self) -> list[Any]:
        return [self.key, hashlib.sha256(self.data).hexdigest()]


@dataclass(frozen=True)
class HubDataset:
    """A dataset on the Hugging Face Hub (or a local folder `datasets.load_dataset` reads),
    streamed through `datasets`.

    Attributes:
        name: The dataset's Hub name ("allenai/c4") or a local dataset folder.
        config: Its configuration ("en"), if it has several.
        split: The split to read [default: train].
    """

    name: str
    config: str | None = None
    split: str | None = None

    @classmethod
    def parse(cls, spec: str, split: str | None = None) -> "HubDataset":
        """"NAME" or "NAME:CONFIG" (as `--hf-dataset` takes it)."""
        name, _, config = spec.partition(":")
        if not name:
            raise InputError(f"{spec!r}: give NAME or NAME:CONFIG", param="hf_dataset")
        return cls(name, config or None, split)

    def __str__(self) -> str:
        return f"hf-dataset:{self.name}" + (f":{self.config}" if self.config else "") + (
            f"[{self.split}]" if self.split else "")


@dataclass(eq=False)
class HubSource(Source):
    dataset: HubDataset

    def __post_init__(self) -> None:
        self.name = str(self.dataset)
        self.key = self.name

    def identity(self) -> list[Any]:
        return [self.key]

    def digest(self, *digests: Any) -> None:
        for d in digests:
            d.update(self.name.encode("utf-8"))


def remote_source(url: str) -> Source:
    """The Source of an fsspec URL; file:// URLs are local paths."""
    protocol = url.split("://", 1)[0].lower()
    if protocol == "file":
        return LocalSource(Path(urlsplit(url).path))
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise InputError(f"{url}: reading {protocol}:// URLs needs an fsspec backend that is not "
                         f"installed ({str(exc).splitlines()[0]})") from exc
    except ValueError as exc:
        raise InputError(f"{url}: unknown URL scheme {protocol}:// ({exc})") from exc
    except Exception as exc:
        raise InputError(f"{url}: cannot open ({type(exc).__name__}: {exc})") from exc
    return RemoteSource(fs, path, url)


_GLOB = re.compile(r"[*?\[]")


def glob_matches(spec: str | Path | HubDataset) -> list[str] | None:
    """The paths or URLs a glob pattern (`*`, `?`, `[...]`, `**` for any depth) matches, sorted,
    for a spec that is a pattern and not itself an existing path; None for anything else.

    Raises:
        InputError: a pattern that matches nothing.
    """
    if isinstance(spec, HubDataset) or not _GLOB.search(str(spec)):
        return None
    text = str(spec)
    if isinstance(spec, str) and _URL.match(text) and not text.lower().startswith("file://"):
        import fsspec

        try:
            fs, path = fsspec.core.url_to_fs(text)
            if fs.exists(path):
                return None
            found = sorted(fs.unstrip_protocol(p) for p in fs.glob(path))
        except ImportError as exc:
            raise InputError(f"{text}: reading this URL needs an fsspec backend that is not "
                             f"installed ({str(exc).splitlines()[0]})") from exc
        except Exception as exc:  # noqa: BLE001 - every backend fails its own way
            raise InputError(f"{text}: cannot list ({type(exc).__name__}: {exc})") from exc
    else:
        import glob

        local = urlsplit(text).path if text.lower().startswith("file://") else text
        if Path(local).expanduser().exists():
            return None
        found = sorted(glob.glob(str(Path(local).expanduser()), recursive=True))
    # as in a folder: hidden files and Hadoop/Spark markers (_SUCCESS) are not corpus files
    found = [f for f in found if not f.rstrip("/").rsplit("/", 1)[-1].startswith((".", "_"))]
    # a folder whose own files match too (`data/**/*`) is read through those files alone
    parents = {f.rstrip("/").rsplit("/", k)[0] for f in found
               for k in range(1, f.rstrip("/").count("/") + 1)}
    found = [f for f in found if f.rstrip("/") not in parents]
    if not found:
        raise InputError(f"{text}: the pattern matches no files")
    return found


def source_of(spec: str | Path | HubDataset) -> Source:
    """A Source for a path, URL or HubDataset (standard input is handled by the reader)."""
    if isinstance(spec, HubDataset):
        return HubSource(spec)
    if isinstance(spec, str) and _URL.match(spec):
        return remote_source(spec)
    return LocalSource(Path(spec))


def compression_of(filename: str) -> tuple[str, str | None]:
    """(name without its compression suffix, compression) of a file name."""
    lower = filename.lower()
    for suffix, kind in COMPRESSIONS.items():
        if lower.endswith(suffix):
            return filename[: -len(suffix)], kind
    return filename, None


class ZstdReader(io.RawIOBase):
    """Streaming zstd decompression that, unlike zstandard's stream_reader, notices a file that
    ends inside a frame (a truncated download) instead of returning its first part as all."""

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor(max_window_size=2**31)  # `zstd --long=31` files
        self._obj = self._dctx.decompressobj()
        self._fed = False
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = self._raw.read(1 << 20)
            if not chunk:
                if self._fed:
                    raise EOFError("zstd stream ended inside a frame (truncated file?)")
                return 0
            out = []
            while chunk:
                self._fed = True
                out.append(self._obj.decompress(chunk))
                if self._obj.eof:  # frame complete; the rest of the chunk starts another
                    chunk = self._obj.unused_data
                    self._obj, self._fed = self._dctx.decompressobj(), False
                else:
                    chunk = b""
            self._pending = b"".join(out)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def read_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "this input cannot be read" (damaged compression, I/O)."""
    errors: list[type[BaseException]] = [OSError, EOFError, zlib.error, lzma.LZMAError]
    try:
        import zstandard

        errors.append(zstandard.ZstdError)
    except ImportError:  # pragma: no cover - a core dependency
        pass
    return tuple(errors)


def looks_binary(head: bytes) -> bool:
    """Whether the first bytes of a file that hold NUL are those of a binary file (an image,
    UTF-16 text) rather than text with a stray NUL (refused, or replaced, at its line): NUL is
    more than 1 byte in 4, or the rest is not UTF-8."""
    if head.count(b"\x00") * 4 > len(head):
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head.replace(b"\x00", b""), final=False)
    except UnicodeDecodeError:
        return True
    return False


def invalid_utf8_message(exc: UnicodeDecodeError) -> str:
    """What to say about text that is not valid UTF-8 (after its "file:line: ")."""
    return (f"not valid UTF-8 (byte {exc.start}); re-encode the file as UTF-8 (index build "
            "and add can read invalid bytes as U+FFFD: --invalid-utf8 replace)")
