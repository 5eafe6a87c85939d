"""Every corpus format read from a real file written by its own library (zstandard, pyarrow, csv,
datasets), fsspec URLs, and the same sentences indexed from five formats."""

from __future__ import annotations

import bz2
import csv
import datetime
import gzip
import importlib.util
import json
import lzma
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from conftest import HashingEncoder
from tapt.errors import InputError
from tapt.indexer.building.pipeline import BuildConfig, build_index
from tapt.indexer.index import Index
from tapt.indexer.reading.reader import HubDataset, iter_documents, read_text, scan_inputs

ROWS = [
    {"text": "The patient had a fever. It rose at night.", "doc": "d1", "source": "web"},
    {"text": "A biopsy of the kidney was taken.", "doc": "d1", "source": "web"},
    {"text": "   ", "doc": "d1", "source": "web"},  # blank: skipped, counted
    {"text": "The contract names two parties. Each signs it.", "doc": "d2", "source": "law"},
    {"text": "Ships sail at dawn.", "doc": "d3", "source": "sea"},
    {"text": "The harbour was calm; the crew slept.", "doc": "d3", "source": "sea"},
]
EXPECTED = [  # (document key, record texts, metadata of the first record)
    ("d1", ["The patient had a fever. It rose at night.", "A biopsy of the kidney was taken."],
     {"doc": "d1", "source": "web"}),
    ("d2", ["The contract names two parties. Each signs it."], {"doc": "d2", "source": "law"}),
    ("d3", ["Ships sail at dawn.", "The harbour was calm; the crew slept."],
     {"doc": "d3", "source": "sea"}),
]
needs_datasets = pytest.mark.skipif(importlib.util.find_spec("datasets") is None,
                                    reason="the datasets package is not installed (pip install "
                                           "'tapt[hf]'): Hugging Face dataset tests skipped")


def jsonl_bytes(rows=ROWS) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")


def documents(paths, **kw):
    scan = scan_inputs(paths, **kw)
    return scan, [(d.key, [r.text for r in d.records], d.records[0].meta)
                  for d in iter_documents(scan)]


def write_csv(path: Path, rows=ROWS, delimiter=",") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_hf(path: Path, rows=ROWS) -> Path:
    import datasets

    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


# ----------------------------------------------------------------------------- line formats


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson", ".jl", ".json"])
@pytest.mark.parametrize("compression", ["", ".gz", ".zst", ".bz2", ".xz"])
def test_jsonl_in_every_compression(tmp_path, suffix, compression):
    data = jsonl_bytes()
    path = tmp_path / f"corpus{suffix}{compression}"
    if compression == ".zst":  # two frames, as concatenated shards are
        half = len(data) // 2
        cctx = zstandard.ZstdCompressor(level=3)
        path.write_bytes(cctx.compress(data[:half]) + cctx.compress(data[half:]))
    else:
        opener = {"": open, ".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}[compression]
        with opener(path, "wb") as fh:
            fh.write(data)
    scan, found = documents([path])
    assert found == EXPECTED
    assert scan.records == 5 and scan.skipped_blank == 1
    assert scan.manifest_files()[0]["format"] == "jsonl"


def test_zstd_stream_without_content_size_and_long_window(tmp_path):
    path = tmp_path / "shard.jsonl.zst"
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=28)  # zstd --long=28
    with open(path, "wb") as raw, zstandard.ZstdCompressor(
            compression_params=params).stream_writer(raw) as writer:
        writer.write(jsonl_bytes())
    with pytest.raises(zstandard.ZstdError, match="too much memory"):  # beyond zstd's default
        zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
    assert documents([path])[1] == EXPECTED


@pytest.mark.parametrize("compression", [".gz", ".zst", ".bz2", ".xz"])
def test_truncated_compressed_files_fail_never_read_as_shorter(tmp_path, compression):
    data = b"".join(json.dumps({"text": f"Line {i} of a long file."}).encode() + b"\n"
                    for i in range(20000))
    packed = {".gz": gzip.compress, ".zst": zstandard.ZstdCompressor().compress,
              ".bz2": bz2.compress, ".xz": lzma.compress}[compression](data)
    path = tmp_path / f"t.jsonl{compression}"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(InputError, match="t.jsonl.*cannot read"):
        scan_inputs([path])


def test_plain_text_compressed(tmp_path):
    path = tmp_path / "notes.txt.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(
        b"First block line one.\nline two.\n\nSecond block.\n"))
    assert read_text([path]).documents == [["First block line one.", "line two."],
                                           ["Second block."]]


def test_csv_and_tsv_written_by_the_csv_module(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[1]["text"] = 'A biopsy, "quoted",\nover two lines.'  # quoting and an inner newline
    path = write_csv(tmp_path / "c.csv", rows)
    scan, found = documents([path])
    assert found[0][1][1] == 'A biopsy, "quoted",\nover two lines.'
    assert [f[0] for f in found] == ["d1", "d2", "d3"]
    assert scan.records == 5 and scan.skipped_blank == 1
    tsv = write_csv(tmp_path / "c.tsv.gz.tmp", ROWS, delimiter="\t")
    gz = tmp_path / "c.tsv.gz"
    gz.write_bytes(gzip.compress(tsv.read_bytes()))
    assert documents([gz])[1] == EXPECTED
    # a row that starts after a multi-line record is located by its own line
    bad = tmp_path / "bad.csv"
    bad.write_text('text,doc\n"two\nlines",a\nok,b,extra\n')
    with pytest.raises(InputError, match="bad.csv:4: 3 fields"):
        scan_inputs([bad])


# ----------------------------------------------------------------------------- columnar


def test_parquet_row_groups_metadata_and_types(tmp_path):
    n = 2500
    table = pa.table({
        "text": [f"Sentence number {i}." if i % 1000 else None for i in range(n)],
        "id": list(range(n)),
        "score": [i / 10 for i in range(n)],
        "tags": [["a", str(i)] for i in range(n)],
        "when": [datetime.datetime(2024, 1, 1) + datetime.timedelta(days=i % 30) for i in range(n)],
        "blob": [b"\x00\x01" for _ in range(n)],
    })
    path = tmp_path / "shard.parquet"
    pq.write_table(table, path, row_group_size=700)
    assert pq.ParquetFile(path).metadata.num_row_groups == 4
    scan = scan_inputs([path])
    assert scan.records == n and scan.files[0].scanned.exact is False
    docs = list(iter_documents(scan))
    assert len(docs) == n - 3  # three null texts are blank records
    assert scan.skipped_blank == 3
    first = docs[0].records[0]
    assert first.text == "Sentence number 1."
    assert first.meta == {"id": 1, "score": 0.1, "tags": ["a", "1"],
                          "when": "2024-01-02T00:00:00"}  # binary column not kept
    assert docs[0].key == f"{path}:row 2"
    assert docs[-1].records[0].meta["id"] == n - 1


def test_parquet_scan_reads_only_the_footer(tmp_path, monkeypatch):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_pylist([r for r in ROWS]), path, row_group_size=2)

    def no_data(*args, **kwargs):
        raise AssertionError("the scan read data pages")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", no_data)
    monkeypatch.setattr(pq.ParquetFile, "read", no_data)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", no_data)
    assert scan_inputs([path]).records == len(ROWS)


def test_parquet_refusals(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"body": ["x"], "n": [1]}), path)
    with pytest.raises(InputError, match=r"no column 'text' \(columns: body, n\)") as err:
        scan_inputs([path])
    assert err.value.param == "text_field"
    with pytest.raises(InputError, match="column 'n' holds int64, not text"):
        scan_inputs([path], text_field="n")
    assert read_text([path], text_field="body").sentences == ["x"]
    fake = tmp_path / "fake.parquet"
    fake.write_text('{"text": "not parquet"}\n')
    with pytest.raises(InputError, match="fake.parquet: cannot read as Parquet"):
        scan_inputs([fake])
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), empty)
    with pytest.raises(InputError, match="holds no text"):
        scan_inputs([empty])


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_arrow_ipc_file_and_stream(tmp_path, kind):
    table = pa.Table.from_pylist(ROWS)
    path = tmp_path / f"data.{'arrow' if kind == 'stream' else 'feather'}"
    with pa.OSFile(str(path), "wb") as sink:
        writer = (pa.ipc.new_file if kind == "file" else pa.ipc.new_stream)(sink, table.schema)
        for batch in table.to_batches(max_chunksize=2):
            writer.write_batch(batch)
        writer.close()
    scan, found = documents([path])
    assert found == EXPECTED and scan.records == len(ROWS)
    assert scan.manifest_files()[0]["format"] == "arrow"


# ----------------------------------------------------------------------------- Hugging Face


@needs_datasets
def test_hf_save_to_disk_folder_and_its_arrow_file(tmp_path):
    folder = write_hf(tmp_path / "hf")
    scan, found = documents([folder])
    assert found == EXPECTED
    assert scan.manifest_files() == [{"path": str(folder), "format": "hf-disk",
                                      "compression": None, "records": len(ROWS)}]
    # inside a corpus folder it is one input (its state.json is not read as JSONL)
    (tmp_path / "more.jsonl").write_bytes(jsonl_bytes(ROWS[:1]))
    assert [f["format"] for f in scan_inputs([tmp_path]).manifest_files()] == ["hf-disk", "jsonl"]
    arrow_files = sorted(folder.glob("*.arrow"))
    assert documents(arrow_files)[1] == EXPECTED  # the Arrow file datasets wrote


@needs_datasets
def test_hf_dataset_dict_split_is_chosen(tmp_path):
    import datasets

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS),
                               "test": datasets.Dataset.from_list(ROWS[:2])})
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(InputError, match="DatasetDict with splits train, test") as err:
        scan_inputs([tmp_path / "dd"])
    assert err.value.param == "hf_split"
    assert documents([tmp_path / "dd"], hf_split="train")[1] == EXPECTED
    assert len(documents([tmp_path / "dd"], hf_split="test")[1]) == 1
    with pytest.raises(InputError, match="no split 'dev'"):
        scan_inputs([tmp_path / "dd"], hf_split="dev")


@needs_datasets
def test_hub_dataset_offline_is_one_clear_error(monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(InputError, match="cannot reach the Hugging Face Hub") as err:
        scan_inputs([HubDataset.parse("someone/corpus:en", "train")])
    assert err.value.param == "hf_dataset" and "\n" not in str(err.value)


@needs_datasets
def test_hub_code_path_streams_a_local_dataset_folder(tmp_path, monkeypatch):
    """`--hf-dataset` goes through datasets.load_dataset(streaming=True); a local folder of
    data files is the offline way to run that path."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "local-dataset"
    folder.mkdir()
    (folder / "train.jsonl").write_bytes(jsonl_bytes())
    (folder / "test.jsonl").write_bytes(jsonl_bytes(ROWS[:1]))
    spec = HubDataset.parse(str(folder), "train")
    scan, found = documents([spec])
    assert found == EXPECTED
    assert scan.files[0].format.name == "hf-hub" and scan.skipped_blank == 1
    assert len(documents([HubDataset(str(folder), None, "test")])[1]) == 1
    with pytest.raises(InputError, match=r"no column 'body'"):
        scan_inputs([spec], text_field="body")
    with pytest.raises(InputError, match="cannot load"):
        scan_inputs([HubDataset(str(folder), None, "validation")])


def test_hub_dataset_without_datasets_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("No module named 'datasets'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(InputError, match=r"needs the datasets package: pip install 'tapt\[hf\]'"):
        scan_inputs([HubDataset("someone/corpus")])


# ----------------------------------------------------------------------------- fsspec URLs


def test_memory_urls_files_and_folders():
    import fsspec

    root = f"memory://corpus-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    with fs.open(f"{root}/a.jsonl.zst", "wb") as fh:
        fh.write(zstandard.ZstdCompressor().compress(jsonl_bytes(ROWS[:3])))
    with fs.open(f"{root}/b.parquet", "wb") as fh:
        pq.write_table(pa.Table.from_pylist(ROWS[3:]), fh)
    with fs.open(f"{root}/README.md", "wb") as fh:
        fh.write(b"not corpus")
    try:
        scan, found = documents([root])
        assert found == EXPECTED
        assert [f["path"] for f in scan.manifest_files()] == [f"{root}/a.jsonl.zst",
                                                              f"{root}/b.parquet"]
        assert read_text([f"{root}/a.jsonl.zst"]).sentences[:2] == [
            "The patient had a fever.", "It rose at night."]
        with pytest.raises(InputError, match="does not exist"):
            scan_inputs([f"{root}/missing.jsonl"])
        with pytest.raises(InputError, match="not corpus files"):
            scan_inputs([root], strict=True)
    finally:
        fs.rm(root, recursive=True)


def test_file_urls_are_local_paths(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(jsonl_bytes()))
    assert documents([path.as_uri()])[1] == EXPECTED


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed")
def test_missing_fsspec_backend_names_the_package():
    with pytest.raises(InputError, match=r"s3://bucket/corpus.jsonl: reading s3:// URLs needs an "
                                         r"fsspec backend that is not installed \(.*s3fs"):
        scan_inputs(["s3://bucket/corpus.jsonl"])
    with pytest.raises(InputError, match="unknown URL scheme nosuch://"):
        scan_inputs(["nosuch://x/y.jsonl"])


# ----------------------------------------------------------------------------- equivalence


@needs_datasets
def test_same_sentences_from_five_formats_make_the_same_index(tmp_path):
    """.jsonl, .jsonl.zst, .parquet, .csv and a save_to_disk folder: same texts, order,
    documents and metadata in the built index."""
    sources = {
        "jsonl": tmp_path / "c.jsonl",
        "zst": tmp_path / "c.jsonl.zst",
        "parquet": tmp_path / "c.parquet",
        "csv": tmp_path / "c.csv",
        "hf": tmp_path / "c-hf",
    }
    sources["jsonl"].write_bytes(jsonl_bytes())
    sources["zst"].write_bytes(zstandard.ZstdCompressor().compress(jsonl_bytes()))
    pq.write_table(pa.Table.from_pylist(ROWS), sources["parquet"], row_group_size=4)
    write_csv(sources["csv"])
    write_hf(sources["hf"])
    built = {}
    for name, path in sources.items():
        out = tmp_path / f"idx-{name}"
        manifest = build_index([path], out, HashingEncoder(),
                               BuildConfig(segment_size=2, progress=False))
        ix = Index(out)
        records = ix.store.records(range(ix.n_sentences))
        built[name] = {
            "records": [{k: r[k] for k in ("text", "doc", "pos", "doc_key", "meta")}
                        for r in records],
            "docs": ix.doc_offsets.tolist(),
            "embeddings": np.asarray(ix.embeddings).tolist(),
            "counts": {k: manifest["counts"][k] for k in
                       ("documents", "sentences", "segments", "skipped_blank_records")},
            "format": manifest["ingest"]["files"][0]["format"],
        }
    reference = built["jsonl"]
    assert [r["text"] for r in reference["records"]][:3] == [
        "The patient had a fever.", "It rose at night.", "A biopsy of the kidney was taken."]
    assert reference["counts"] == {"documents": 3, "sentences": 7, "segments": 4,
                                   "skipped_blank_records": 1}
    for name, got in built.items():
        for key in ("records", "docs", "embeddings", "counts"):
            assert got[key] == reference[key], (name, key)
    assert [b["format"] for b in built.values()] == ["jsonl", "jsonl", "parquet", "csv", "hf-disk"]


# ----------------------------------------------------------------------------- invalid UTF-8

BAD = b"caf\xe9 au lait"          # Latin-1, not UTF-8
REPAIRED = "caf\ufffd au lait"


def _invalid_utf8_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """One file per format, with one record holding invalid UTF-8: (path, where it is)."""
    files = {}
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_bytes(b'{"text": "Fine words here."}\n{"text": "' + BAD + b'", "doc": "x"}\n')
    files["jsonl"] = (jsonl, "bad.jsonl:2")
    text = tmp_path / "bad.txt.gz"
    text.write_bytes(gzip.compress(b"Fine words here.\n" + BAD + b"\n"))
    files["text"] = (text, "bad.txt.gz:2")
    table = tmp_path / "bad.csv"
    table.write_bytes(b"text,label\nFine words here.,a\n" + BAD + b",b\n")
    files["csv"] = (table, "bad.csv:3")
    raw = pa.array([b"Fine words here.", BAD], type=pa.binary())
    strings = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())   # unchecked bytes
    pq.write_table(pa.table({"text": strings, "label": ["a", "b"]}), tmp_path / "bad.parquet")
    files["parquet"] = (tmp_path / "bad.parquet", "bad.parquet:row 2: column 'text'")
    return files


@pytest.mark.parametrize("fmt", ["jsonl", "text", "csv", "parquet"])
def test_invalid_utf8_is_refused_at_its_record_or_read_as_replacement(tmp_path, fmt):
    path, where = _invalid_utf8_files(tmp_path)[fmt]
    with pytest.raises(InputError, match=f"{where}.*not valid UTF-8 .*--invalid-utf8 replace"):
        list(iter_documents(scan_inputs([path])))
    scan = scan_inputs([path], invalid_utf8="replace")
    texts = [r.text for d in iter_documents(scan) for r in d.records]
    assert texts == ["Fine words here.", REPAIRED]
    assert scan.invalid_utf8_records == 1
    with pytest.raises(InputError, match="must be one of error, replace") as err:
        scan_inputs([path], invalid_utf8="ignore")
    assert err.value.param == "invalid_utf8"


def test_invalid_utf8_in_metadata_and_dictionary_columns(tmp_path):
    raw = pa.array([b"ok", BAD, None], type=pa.binary())
    strings = pa.Array.from_buffers(pa.string(), 3, raw.buffers())
    table = pa.table({"text": pa.array(["One.", "Two.", "Three."]).dictionary_encode(),
                      "source": strings})
    pq.write_table(table, tmp_path / "meta.parquet")
    with pytest.raises(InputError, match="meta.parquet:row 2: column 'source' is not valid"):
        list(iter_documents(scan_inputs([tmp_path / "meta.parquet"])))
    scan = scan_inputs([tmp_path / "meta.parquet"], invalid_utf8="replace")
    metas = [d.records[0].meta for d in iter_documents(scan)]
    assert metas == [{"source": "ok"}, {"source": REPAIRED}, {"source": None}]
    assert scan.invalid_utf8_records == 1
    dictionary = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()),
                                                pa.Array.from_buffers(pa.string(), 2,
                                                                      raw.buffers()))
    pq.write_table(pa.table({"text": dictionary}), tmp_path / "dict.parquet")
    scan = scan_inputs([tmp_path / "dict.parquet"], invalid_utf8="replace")
    assert [d.records[0].text for d in iter_documents(scan)] == ["ok", REPAIRED, "ok"]
    assert scan.invalid_utf8_records == 1


def test_build_and_add_record_invalid_utf8(tmp_path, caplog):
    from tapt.indexer.building.add import add_to_index

    files = _invalid_utf8_files(tmp_path)
    config = BuildConfig(segment_size=2, progress=False, invalid_utf8="replace")
    with caplog.at_level("WARNING", logger="tapt.indexer.building.pipeline"):
        manifest = build_index([files["jsonl"][0]], tmp_path / "idx", HashingEncoder(), config)
    assert "1 record(s) held bytes that are not valid UTF-8" in caplog.text
    assert manifest["ingest"]["invalid_utf8"] == "replace"
    assert manifest["counts"]["invalid_utf8_records"] == 1
    assert Index(tmp_path / "idx").store.records([1])[0]["text"] == REPAIRED
    # an add reads as the index was built unless told otherwise
    raw = pa.array([b"Other words. " + BAD], type=pa.binary())
    pq.write_table(pa.table({"text": pa.Array.from_buffers(pa.string(), 1, raw.buffers())}),
                   tmp_path / "more.parquet")
    manifest = add_to_index(tmp_path / "idx", [tmp_path / "more.parquet"], HashingEncoder(),
                            progress=False)
    assert manifest["counts"]["invalid_utf8_records"] == 2
    with pytest.raises(InputError, match="bad.csv:3: not valid UTF-8"):
        add_to_index(tmp_path / "idx", [files["csv"][0]], HashingEncoder(), progress=False,
                     invalid_utf8="error")
    (tmp_path / "ok.jsonl").write_bytes(jsonl_bytes())
    plain = build_index([tmp_path / "ok.jsonl"], tmp_path / "plain", HashingEncoder(),
                        BuildConfig(segment_size=2, progress=False))
    assert plain["ingest"]["invalid_utf8"] == "error"
    assert plain["counts"]["invalid_utf8_records"] == 0


# ----------------------------------------------------------------------------- add and CLI


def test_add_reads_any_format_with_its_own_text_field(tmp_path):
    from tapt.indexer.building.add import add_to_index

    first = tmp_path / "a.jsonl"
    first.write_bytes(jsonl_bytes(ROWS[:3]))
    whole = tmp_path / "all.jsonl"
    whole.write_bytes(jsonl_bytes())
    config = BuildConfig(segment_size=2, progress=False)
    build_index([whole], tmp_path / "all", HashingEncoder(), config)
    build_index([first], tmp_path / "idx", HashingEncoder(), config)
    renamed = [{"body" if k == "text" else k: v for k, v in r.items()} for r in ROWS[3:]]
    pq.write_table(pa.Table.from_pylist(renamed), tmp_path / "b.parquet")
    manifest = add_to_index(tmp_path / "idx", [tmp_path / "b.parquet"], HashingEncoder(),
                            progress=False, text_field="body")
    assert [f["format"] for f in manifest["ingest"]["files"]] == ["jsonl", "parquet"]
    added, reference = Index(tmp_path / "idx"), Index(tmp_path / "all")
    strip = [{k: r[k] for k in ("text", "doc", "pos", "doc_key", "meta")}
             for r in reference.store.records(range(reference.n_sentences))]
    got = [{k: r[k] for k in ("text", "doc", "pos", "doc_key", "meta")}
           for r in added.store.records(range(added.n_sentences))]
    assert got == strip


@pytest.fixture
def cli_runner(monkeypatch):
    from click.testing import CliRunner

    import tapt.indexer.encoding.encoder
    from tapt.cli import cli

    monkeypatch.setattr(tapt.indexer.encoding.encoder, "load_encoder",
                        lambda spec=None, device="auto", backend="auto", threads=None, **_:
                        HashingEncoder())

    def run(*args, input=None):
        return CliRunner().invoke(cli, ["-q", *map(str, args)], input=input)

    return run


def test_cli_build_input_options(tmp_path, cli_runner):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "part-0").write_bytes(jsonl_bytes())
    result = cli_runner("index", "build", corpus / "part-0", "--out", tmp_path / "i1")
    assert result.exit_code == 1 and "unknown format" in result.output
    assert "--input-format" in result.output and len(result.output.strip().splitlines()) == 1
    result = cli_runner("index", "build", corpus, "--out", tmp_path / "i1", "--strict",
                        "--input-format", "jsonl")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "i1" / "manifest.json").read_text())
    assert manifest["ingest"]["files"][0]["format"] == "jsonl"
    assert manifest["ingest"]["input_format"] == "jsonl"
    (corpus / "notes.md").write_text("notes\n")
    result = cli_runner("index", "build", corpus / "part-0", corpus, "--out", tmp_path / "i2",
                        "--strict", "--input-format", "jsonl")
    # a forced format reads every file: notes.md as JSONL, which it is not
    assert result.exit_code == 1 and "notes.md:1: not valid JSON" in result.output
    result = cli_runner("index", "build", corpus, "--out", tmp_path / "i3", "--strict")
    assert result.exit_code == 1 and "--strict" in result.output, result.output
    result = cli_runner("index", "build", "--out", tmp_path / "i4")
    assert result.exit_code != 0 and "--hf-dataset" in result.output


def test_cli_invalid_utf8_option(tmp_path, cli_runner):
    path, _ = _invalid_utf8_files(tmp_path)["csv"]
    result = cli_runner("index", "build", path, "--out", tmp_path / "idx")
    assert result.exit_code == 1 and not (tmp_path / "idx").exists()
    assert result.output.startswith("Error: ") and "bad.csv:3: not valid UTF-8" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = cli_runner("index", "build", path, "--out", tmp_path / "idx", "--invalid-utf8",
                        "replace")
    assert result.exit_code == 0, result.output
    result = cli_runner("index", "info", tmp_path / "idx")
    assert "1 records with invalid UTF-8 read as U+FFFD" in result.output
    result = cli_runner("index", "build", path, "--out", tmp_path / "i2", "--invalid-utf8", "skip")
    assert result.exit_code == 2 and "'skip' is not one of 'error', 'replace'" in result.output


@needs_datasets
def test_cli_hub_dataset_offline_is_one_error_line(tmp_path, cli_runner, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    result = cli_runner("index", "build", "--hf-dataset", "someone/corpus:en", "--hf-split",
                        "train", "--out", tmp_path / "idx")
    assert result.exit_code == 1
    assert result.output.startswith("Error: --hf-dataset: someone/corpus: cannot reach the Hugging"), \
        result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "idx").exists()


def test_a_path_the_system_cannot_open_is_one_input_error(tmp_path):
    too_long = tmp_path / ("a" * 300 + ".txt")
    with pytest.raises(InputError, match="cannot be opened .*too long"):
        scan_inputs([str(too_long)])
