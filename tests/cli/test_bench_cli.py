"""The benchmark commands through the CLI (fake index; no model needed)."""

import json

from click.testing import CliRunner

from tapt.cli import cli


def test_bench_clusters_and_plot_domains(fake_index, tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["-q", "bench", "clusters", str(fake_index), "--k", "3",
                              "--sample", "300", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)[0]["k"] == 3
    png = tmp_path / "map.png"
    res = runner.invoke(cli, ["-q", "plot", "domains", str(fake_index), "--out", str(png)])
    assert res.exit_code == 0, res.output
    assert png.stat().st_size > 1000 and not list(tmp_path.glob(".*tmp*"))
    res = runner.invoke(cli, ["-q", "bench", "clusters", str(fake_index), "--k", "x"])
    assert res.exit_code != 0 and "comma-separated integers" in res.output
