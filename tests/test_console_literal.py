"""Rich output shows data as it is: no markup (`a = x[i]`, `list[int]`) and no emoji codes (`:train:`) in any cell
or user string (issue 27 item 2). Every table goes through lachesis.console.table, every console is new_console."""
import io

from typer.testing import CliRunner

from lachesis.cli import app
import train_helpers as th
from train_helpers import tiny_dir  # noqa: F401  (session fixture)

runner = CliRunner()
VALUES = ["a = x[i]", "list[int]", "bash_exec_env:train:00001", "[bold]not bold[/]"]


def test_lake_sql_table_prints_brackets_and_colon_codes_as_they_are(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKE_ROOT", str(tmp_path / "lake"))
    assert runner.invoke(app, ["init"]).exit_code == 0
    select = ", ".join(f"'{v}' AS c{i}" for i, v in enumerate(VALUES))
    res = runner.invoke(app, ["sql", f"SELECT {select}"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    for v in VALUES:
        assert v in res.output, (v, res.output)
    assert "\U0001f68b" not in res.output  # the tram Rich draws for :train:


def test_table_and_literal_keep_values_and_titles():
    from lachesis.console import literal, new_console, table

    out = io.StringIO()
    c = new_console()
    c.file = out
    c.width = 250
    c.print(table(["k[x]", "v"], [[v, None] for v in VALUES], title="run :train: [i]"))
    c.print(f"[bold]{literal('list[int] :train:')}[/]")
    text = out.getvalue()
    for v in VALUES + ["k[x]", "run :train: [i]", "list[int] :train:"]:
        assert v in text, (v, text)


def test_hermes_eval_table_shows_train_task_ids_without_emoji(tiny_dir):
    r = th.run_cli("hermes_eval", "--task", "shell", "--split", "train", "--limit", "2", "--max-new-tokens", "1",
                   "--max-turns", "1", "--no-lake", "--quiet", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "bash_exec_env:train:00000" in r.stderr and "bash_exec_env:train:00001" in r.stderr, r.stderr
