"""`lake export VIEW --format hf`: a datasets save_to_disk folder with a dataset card that load_from_disk loads,
holding the same rows as the view on the same lake version (read with SQL), byte-identical on a repeat; and
`lake export` in other formats never imports datasets. --push-to-hub needs the network: never called here."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import yaml
from typer.testing import CliRunner

from tests.views_helpers import new_lake, read_manifest, seeded_trajectories
from views.export import ExportError
from views.export_hf import export_view_hf
from views.registry import view_sql_hash

runner = CliRunner()


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lk = new_lake(tmp_path_factory.mktemp("hf") / "lake")
    lk.append("trajectories", seeded_trajectories(300, seed=9, n_tasks=60))
    lk.append("rewards", [{"trajectory_id": "traj-00003", "reward": 0.99, "success": True,
                           "labels": {"judge": "good"}, "label_source": "judge"}])
    return lk


@pytest.fixture(scope="module")
def cli_app():
    import typer

    from lachesis.views_cli import register

    app = typer.Typer(pretty_exceptions_enable=False)
    register(app)
    return app


@pytest.fixture(scope="module")
def exported(lake, cli_app, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "sft_hf"
    r = runner.invoke(cli_app, ["export", "sft", "--format", "hf", "--output", str(out), "--lake", str(lake.root),
                                "--license", "cc-by-4.0", "--json"])
    assert r.exit_code == 0, r.output
    return out, json.loads(r.stdout)


def card_yaml(folder: Path) -> dict:
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def test_load_from_disk_gives_the_view_rows(lake, exported):
    out, info = exported
    ds = datasets.load_from_disk(str(out))
    assert isinstance(ds, datasets.DatasetDict) and list(ds) == ["train", "test"]
    with lake.snapshot() as snap:
        for split in ("train", "test"):
            want = snap.arrow(f"SELECT trajectory_id, task_id, reward, success, messages, reward_labels FROM sft "
                              f"WHERE split = '{split}' ORDER BY split, sample_hash").to_pylist()
            got = ds[split].select_columns(["trajectory_id", "task_id", "reward", "success", "messages",
                                            "reward_labels"]).to_list()
            assert len(got) == len(want) == info["splits"][split] > 0
            assert got == want
        total = snap.arrow("SELECT count(*) AS n FROM sft").to_pylist()[0]["n"]
    assert sum(len(d) for d in ds.values()) == total == info["row_count"]
    labelled = [r for d in ds.values() for r in d if r["trajectory_id"] == "traj-00003"]
    assert [json.loads(r["reward_labels"]) for r in labelled] == [{"judge": "good"}]  # the late label
    assert ds["train"][0]["messages"][0]["role"] == "system"


def test_card_header_and_manifest(lake, exported):
    out, info = exported
    m = read_manifest(out)
    assert m == {k: v for k, v in info.items() if k != "output"} and m["format"] == "hf"
    card = card_yaml(out)
    assert card["license"] == "cc-by-4.0" and "lachesis" in card["tags"]
    features = [f["name"] for f in card["dataset_info"]["features"]]
    assert features == [c["name"] for c in m["columns"]]
    assert {s["name"]: s["num_examples"] for s in card["dataset_info"]["splits"]} == m["splits"]
    lineage = card["lachesis"]
    assert lineage["lake_versions"] == m["lake_versions"] == {t: lake.version(t) for t in sorted(lake.tables())}
    assert lineage["view_sql_sha256"] == view_sql_hash("sft")["sha256"] == m["view_sql_sha256"]
    assert lineage["row_count"] == m["row_count"]
    listed = {f["path"] for f in m["files"]}
    assert {"dataset_dict.json", "train/data-00000-of-00001.arrow", "test/state.json"} <= listed
    # the card is written from the manifest, so the manifest lists every file but itself and the card
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert on_disk == listed | {"manifest.json", "README.md"}


def test_repeat_is_byte_identical_and_overwrite_is_guarded(lake, exported, tmp_path):
    out, info = exported
    again = export_view_hf(lake, "sft", tmp_path / "again", license="cc-by-4.0")
    assert again == read_manifest(out)
    for f in again["files"]:
        assert (tmp_path / "again" / f["path"]).read_bytes() == (out / f["path"]).read_bytes(), f["path"]
    with pytest.raises(ExportError, match="not empty"):
        export_view_hf(lake, "sft", tmp_path / "again")
    smaller = export_view_hf(lake, "sft", tmp_path / "again", overwrite=True, where="split = 'train'")
    ds = datasets.load_from_disk(str(tmp_path / "again"))
    assert list(ds) == ["train"] and len(ds["train"]) == smaller["row_count"]  # the old test split is gone
    (tmp_path / "again" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not part of an hf export"):
        export_view_hf(lake, "sft", tmp_path / "again", overwrite=True)
    assert (tmp_path / "again" / "notes.txt").exists()


def test_views_without_split_and_cli_errors(lake, cli_app, tmp_path):
    m = export_view_hf(lake, "trajectories_current", tmp_path / "cur")
    ds = datasets.load_from_disk(str(tmp_path / "cur"))
    assert list(ds) == ["train"] and len(ds["train"]) == m["row_count"] == 300
    assert card_yaml(tmp_path / "cur")["license"] == "unknown"
    r = runner.invoke(cli_app, ["export", "sft", "--output", str(tmp_path / "p"), "--lake", str(lake.root),
                                "--push-to-hub", "me/data"])
    assert r.exit_code == 2 and "--format hf" in r.output and not (tmp_path / "p").exists()


def test_other_formats_do_not_import_datasets(lake, tmp_path):
    code = ("import sys; from lachesis.cli import main; sys.argv = ['lake', 'export', 'sft', '--output', sys.argv[1], "
            "'--lake', sys.argv[2]]\ntry:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e\n"
            "assert 'datasets' not in sys.modules, 'datasets imported'\nprint('ok')")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pq"), str(lake.root)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr
    assert (tmp_path / "pq" / "manifest.json").exists()
