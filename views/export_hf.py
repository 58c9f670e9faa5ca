"""`lake export VIEW --format hf`: a view as a Hugging Face `datasets` folder (`DatasetDict.save_to_disk`) with a
dataset card, so `datasets.load_from_disk(DIR)` loads it and `--push-to-hub REPO` publishes it.

The rows and the lineage are export.py's: the view is first exported as parquet (same order, same manifest:
lake versions, view SQL hash, variables, event-id hash), then each split's rows become one `Dataset` with a
fingerprint taken from its parquet file, so the same lake version gives byte-identical Arrow files. The folder
holds `dataset_dict.json`, one folder per split (train/validation/test from the view's `split` column, else all
rows in train), `manifest.json` and `README.md`: a card whose YAML header carries the license, the features and
splits (row counts) as the Hub writes them, and the lake versions and view SQL hash.

This is the one module that imports `datasets` (an optional dependency and a slow import), a front above the export
core (export.py, which never imports this module): only --format hf loads it, so `lake export` in parquet or jsonl
and `lake sql` do not pay for it.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from datasets.info import DatasetInfosDict
from huggingface_hub import DatasetCard, DatasetCardData
from huggingface_hub.errors import HFValidationError, HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

from ground.atomic import folder_atomically
from ground.digest import file_sha256
from lake import Lake
from lake.as_of import MANIFEST_NAME, AsOf
from lake.snapshot import Snapshot
from views.export import ExportError, check_outside_lake, export_snapshot, view_snapshot

CARD_NAME = "README.md"
DEFAULT_LICENSE = "unknown"
SPLIT_ORDER = ("train", "validation", "test")
_HF_TOP = {"dataset_dict.json", "dataset_info.json", "state.json", MANIFEST_NAME, CARD_NAME}


def export_view_hf(lake: Lake, view: str, output: str | os.PathLike, *, as_of: AsOf = None, where: str | None = None,
                   overwrite: bool = False, variables: Mapping[str, Any] | None = None, allow_empty: bool = True,
                   license: str | None = None) -> dict:
    """export.export_view in the hf format: `license` is the dataset card's (default "unknown")."""
    with view_snapshot(lake, view, as_of, where) as snap:
        return export_snapshot_hf(snap, view, output, where=where, overwrite=overwrite, variables=variables,
                                  allow_empty=allow_empty, license=license)


def export_snapshot_hf(snap: Snapshot, view: str, output: str | os.PathLike, *, where: str | None = None,
                       overwrite: bool = False, variables: Mapping[str, Any] | None = None,
                       allow_empty: bool = True, license: str | None = None) -> dict:
    """Export `view` of an open snapshot as a save_to_disk folder with manifest.json and README.md; returns the
    manifest. Nothing is written when it raises."""
    out = Path(output)
    check_outside_lake(snap, out)
    _check_output(out, overwrite)
    old = list(out.iterdir()) if out.is_dir() else None  # _check_output allowed only this format's entries
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.parquet-", dir=parent) as parquet, \
            folder_atomically(out, in_place_of=old) as folder:
        staged = Path(parquet) / "parquet"
        manifest = export_snapshot(snap, view, staged, format="parquet", where=where, variables=variables,
                                   allow_empty=allow_empty)
        dataset = _dataset_dict(staged, manifest["files"])
        was_disabled = datasets.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # a progress bar per split is noise in a CLI that prints a summary
        try:
            dataset.save_to_disk(str(folder))
        finally:
            if not was_disabled:
                datasets.enable_progress_bars()
        manifest.update(format="hf", files=_files(folder), license=license or DEFAULT_LICENSE,
                        writer={**manifest["writer"], "datasets": datasets.__version__, "staged_as": "parquet"})
        (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        (folder / CARD_NAME).write_text(dataset_card(manifest, dataset), encoding="utf-8")
    return manifest


def _dataset_dict(staged: Path, files: list[dict]) -> datasets.DatasetDict:
    """One Dataset per split from the staged parquet files (named `<split>-NNNNN-of-NNNNN.parquet`)."""
    by_split: dict[str, list[dict]] = {}
    for f in files:
        by_split.setdefault(f["path"].split("-", 1)[0], []).append(f)
    order = sorted(by_split, key=lambda s: (SPLIT_ORDER.index(s) if s in SPLIT_ORDER else len(SPLIT_ORDER), s))
    out = {}
    for split in order:
        parts = sorted(by_split[split], key=lambda f: f["path"])
        table = pa.concat_tables([pq.read_table(staged / f["path"]) for f in parts])
        # the fingerprint names the content (datasets would draw a random one): identical exports, identical files
        fingerprint = hashlib.sha256("".join(f["sha256"] for f in parts).encode()).hexdigest()[:16]
        out[split] = datasets.Dataset(table, split=datasets.NamedSplit(split), fingerprint=fingerprint)
    return datasets.DatasetDict(out)


def _files(folder: Path) -> list[dict]:
    return [{"path": p.relative_to(folder).as_posix(), "sha256": file_sha256(p)}
            for p in sorted(folder.rglob("*")) if p.is_file()]


def dataset_card(manifest: dict, dataset: datasets.DatasetDict) -> str:
    """README.md: the Hub's YAML header (license, dataset_info with features and splits, tags) plus the
    lineage under `lachesis:`, and a short body saying how to load it and where it came from."""
    first = next(iter(dataset.values()))
    info = first.info.copy()
    info.splits = datasets.SplitDict({name: datasets.SplitInfo(name, num_bytes=ds.data.nbytes,
                                                               num_examples=ds.num_rows)
                                      for name, ds in dataset.items()})
    info.dataset_size = sum(ds.data.nbytes for ds in dataset.values())
    data = DatasetCardData(license=manifest["license"], pretty_name=f"Lachesis view {manifest['view']}",
                           tags=["lachesis", "agent-trajectories"],
                           lachesis={k: manifest[k] for k in ("view", "lake_versions", "view_sql_sha256", "where",
                                                              "variables", "row_count", "event_ids_sha256")})
    DatasetInfosDict({"default": info}).to_dataset_card_data(data)
    rows = "\n".join(f"| {name} | {ds.num_rows} |" for name, ds in dataset.items())
    versions = ", ".join(f"{t}@{v}" for t, v in manifest["lake_versions"].items())
    body = f"""
# Lachesis view `{manifest['view']}`

Exported from a Lachesis trajectory lake by `lake export {manifest['view']} --format hf`: the view's rows at lake
versions {versions}.

```python
import datasets
ds = datasets.load_from_disk("path/to/this/folder")
```

| split | rows |
|---|---|
{rows}

Lineage: view SQL sha256 `{manifest['view_sql_sha256']}`, event ids sha256 `{manifest['event_ids_sha256']}`
({manifest['event_id_count']} events); `manifest.json` holds the files' hashes and the writer settings, and
`lake export {manifest['view']} --as-of manifest.json` reproduces the rows. Set `license` above to the terms
the data may be shared under before you publish it.
"""
    return f"---\n{data.to_yaml()}\n---\n{body}"


def push_to_hub(folder: str | os.PathLike, repo: str, *, private: bool | None = None) -> None:
    """Publish an exported folder to the Hub dataset repo `repo` (datasets' push_to_hub, then this card as the
    repo's README). Needs network access and a token (`hf auth login` or HF_TOKEN)."""
    folder = Path(folder)
    dataset = datasets.load_from_disk(str(folder))
    if not isinstance(dataset, datasets.DatasetDict):
        raise ExportError(f"{folder} is not a dataset folder written by --format hf")
    try:
        dataset.push_to_hub(repo, private=private, commit_message="lake export --format hf")
        DatasetCard((folder / CARD_NAME).read_text(encoding="utf-8")).push_to_hub(repo, repo_type="dataset")
    except (HfHubHTTPError, HFValidationError, LocalTokenNotFoundError, OfflineModeIsEnabled, OSError) as exc:
        raise ExportError(f"push to the Hub repo {repo!r} failed: {str(exc).splitlines()[0]}") from None


def _is_hf_entry(p: Path) -> bool:
    """A file or split folder this format writes (what --overwrite may replace)."""
    if p.is_file():
        return p.name in _HF_TOP
    return p.is_dir() and (p / "state.json").is_file() and (p / "dataset_info.json").is_file()


def _check_output(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"output {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(f"output folder {out} is not empty; pass --overwrite to replace its dataset")
        stray = [p.name for p in out.iterdir() if not _is_hf_entry(p)]
        if stray:
            raise ExportError(f"refusing to overwrite {out}: it holds files that are not part of an hf export "
                              f"({', '.join(sorted(stray)[:5])}); choose an empty or new folder")
