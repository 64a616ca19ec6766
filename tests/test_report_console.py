"""What bench, tune and report print: the summary and the narrow tables within 100 columns, cells folded
(never cut), the wide tables named and left to report.md."""

from __future__ import annotations

from pathlib import Path

from portkern.portability import commands, report
from portkern.runs import load_run, merge

DATA = Path(__file__).parent / "data"
XEON = DATA / "synthetic-xeon-two-drivers-run.json"
H200 = DATA / "synthetic-h200-run.json"


def test_the_console_output_fits_100_columns_and_names_what_it_leaves_out(capsys) -> None:
    rep = report.build(merge([load_run(XEON), load_run(H200)]))
    commands._print_tables(report.headline(rep))
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= commands.CONSOLE_COLUMNS
    assert "…" not in out  # folded onto more lines, never cut with an ellipsis
    assert lines[0] == report.SUMMARY_TITLE and "1. Workload" in out
    assert "Cross-device" in out and "In report.md (too wide for the console)" in out
    assert "Application efficiency and performant portability ratio" in " ".join(out.split("In report.md")[1].split())
