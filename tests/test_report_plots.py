"""Report plots at page size: every PNG 1,000-1,600 px wide, each one referenced from report.md with a caption,
one colour per backend in every plot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from portkern.portability import report
from portkern.portability.report import plots

DATA = Path(__file__).parent / "data"
XEON = DATA / "synthetic-xeon-two-drivers-run.json"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    report.write([str(XEON)], out)
    return out


def test_every_png_is_between_1000_and_1600_px_wide(written: Path) -> None:
    import matplotlib.image as mpimg

    pngs = sorted(written.glob("*.png"))
    assert {p.name for p in pngs} >= {"cross-device.png", "ratios.png", "spectrum.png", "data-paths.png"}
    for p in pngs:
        height, width = mpimg.imread(p).shape[:2]
        assert 1000 <= width <= 1600, f"{p.name}: {width} px wide"
        assert height <= 2.5 * width, f"{p.name}: {height} px high"


def test_every_png_is_referenced_from_report_md_with_a_caption(written: Path) -> None:
    md = (written / "report.md").read_text()
    section = md[md.index("## Plots"):md.index("## Definitions")]
    for p in written.glob("*.png"):
        line = next(x for x in section.splitlines() if x.startswith(f"* `{p.name}`: "))
        assert len(line) > len(f"* `{p.name}`: ") + 20  # a caption, not just the name
        assert f"]({p.name})" in section
    named = set(re.findall(r"\(([\w.-]+\.png)\)", section))
    assert named == {p.name for p in written.glob("*.png")}  # and nothing named that was not drawn


def test_one_colour_per_backend_in_every_plot() -> None:
    assert plots.colour("opencl") == plots.BACKEND_COLOURS["opencl"]
    assert len(set(plots.BACKEND_COLOURS.values())) == len(plots.BACKEND_COLOURS)
    assert plots.colour("some-new-backend") == plots.colour("some-new-backend")  # fixed by the name, not the order


def test_device_labels_wrap_and_are_never_cut() -> None:
    label = "AMD EPYC 9654 96-Core Processor (Portable Computing Language)"
    wrapped = plots.wrap(label, 24)
    assert wrapped.replace("\n", " ") == label and max(len(x) for x in wrapped.splitlines()) <= 24
