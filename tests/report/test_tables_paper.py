"""Paper tables: ours / published / difference cells, tolerance and chance flags, means, writers."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import polars as pl
import pytest
from workflow_helpers import SHIPPED_MAP, SHIPPED_REFERENCE

from vlbench.errors import VlbenchError
from vlbench.report.paper_layouts import LAYOUTS, layouts_for
from vlbench.report.paper_table_model import PaperTable
from vlbench.report.paper_tables import (
    build_paper_table,
    match_metric_rows,
)
from vlbench.report.reference import (
    ReferenceMap,
    read_map,
    read_reference,
)
from vlbench.report.table_writers import (
    csv_text,
    html_fragment,
    latex,
    markdown,
    rst_fragment,
    write_paper_table,
)

I2T, T2I, ZEROSHOT = "image_to_text", "text_to_image", "zeroshot_top1_accuracy"
HEADER = "table,benchmark,subset,model,model_spec,direction,metric,k,value,unit,source\n"
SOURCE = "A small test paper, Table 9"


def write_reference(path: Path, rows: list[tuple]) -> Path:
    """A reference CSV in the shipped format from (table, benchmark, subset, model, dir, metric,
    k, value) tuples."""
    lines = [HEADER]
    for table, benchmark, subset, model, direction, metric, k, value in rows:
        lines.append(
            f'{table},{benchmark},{subset},{model},spec,{direction},{metric},{k},{value},percent,"{SOURCE}"\n'
        )
    path.write_text("".join(lines), encoding="utf-8")
    return path


def metric_row(
    model: str,
    benchmark: str,
    direction: str,
    k: int,
    value: float,
    ci: float,
    chance: float,
    metric: str = "recall",
) -> dict:
    """One metric row in the per-job format: contract columns plus the chance level."""
    n, subset = 1000, "test"
    return {
        "benchmark": benchmark,
        "subset": subset,
        "model": model,
        "direction": direction,
        "metric": metric,
        "k": k,
        "value": value,
        "ci_low": value - ci,
        "ci_high": value + ci,
        "n_queries": n,
        "chance": chance,
    }


def bmf(model: str, direction: str, k: int, value: str) -> tuple:
    """A published BioMedFlickr Recall@k cell."""
    return ("biomedflickr", "biomedflickr", "test", model, direction, "recall", k, value)


@pytest.fixture
def biomedflickr_table(tmp_path: Path):
    """Our 'mine' (mapped to RefModel) and 'random' on a benchmark mapped to BioMedFlickr."""
    reference = write_reference(
        tmp_path / "ref.csv",
        [
            bmf("RefModel", "text_to_image", 1, "3.0"),
            bmf("RefModel", "text_to_image", 10, "12.0"),
            bmf("RefModel", "image_to_text", 1, "4.25"),
            bmf("AtChance", "text_to_image", 1, "0.1"),
            bmf("AtChance", "text_to_image", 10, "0.9"),
        ],
    )
    mapping = tmp_path / "map.yaml"
    mapping.write_text(
        "models:\n  mine: [Other name, RefModel]\nbenchmarks:\n  bmf: {reference: biomedflickr}\n",
        encoding="utf-8",
    )
    metrics = pl.DataFrame(
        [
            metric_row("mine", "bmf", "text_to_image", 1, 3.2, 1.0, 0.1),
            metric_row("mine", "bmf", "text_to_image", 10, 13.0, 2.0, 1.0),
            metric_row("mine", "bmf", "image_to_text", 1, 4.0, 1.0, 0.1),
            metric_row("random", "bmf", "text_to_image", 1, 0.2, 0.3, 0.1),
            metric_row("random", "bmf", "text_to_image", 10, 0.5, 0.6, 1.0),
            metric_row("random", "bmf", "image_to_text", 1, 0.0, 0.0, 0.1),
        ]
    )
    return build_paper_table(
        LAYOUTS["biomedflickr"],
        metrics,
        read_reference(reference),
        read_map(mapping),
        ["bmf"],
        tolerance=0.5,
    )


def test_cells_hold_ours_published_and_difference(biomedflickr_table) -> None:
    rows = {row.label: row for row in biomedflickr_table.rows}
    assert list(rows) == ["mine (RefModel)", "AtChance (published)", "random"]
    labels = biomedflickr_table.labels
    mine = rows["mine (RefModel)"]
    # The notebook's "I2T" column is text->image.
    i2t_1 = mine.cells[labels.index("I2T R@1")]
    assert (i2t_1.ours, i2t_1.published) == (3.2, 3.0)
    assert i2t_1.difference == pytest.approx(0.2)
    assert not i2t_1.beyond_tolerance
    i2t_10 = mine.cells[labels.index("I2T R@10")]
    assert i2t_10.difference == pytest.approx(1.0)
    assert i2t_10.beyond_tolerance
    t2i_1 = mine.cells[labels.index("T2I R@1")]
    assert (t2i_1.ours, t2i_1.published_text) == (4.0, "4.25")
    assert t2i_1.difference == pytest.approx(-0.25)
    assert mine.cells[labels.index("T2I R@10")].ours is None


def test_chance_flags_for_ours_and_published(biomedflickr_table) -> None:
    rows = {row.label: row for row in biomedflickr_table.rows}
    assert rows["mine (RefModel)"].ours_at_chance is False
    assert rows["random"].ours_at_chance is True
    assert rows["AtChance (published)"].published_at_chance is True
    assert rows["AtChance (published)"].ours_at_chance is None
    assert rows["mine (RefModel)"].published_at_chance is False


def test_markdown_csv_and_latex_show_cells_and_flags(biomedflickr_table) -> None:
    text = markdown(biomedflickr_table)
    line = next(line for line in text.splitlines() if line.startswith("| mine (RefModel)"))
    assert "| 3.20 / 3.0 / +0.20 |" in line
    assert "| 13.00 / 12.0 / +1.00 ⚠ |" in line
    assert "| 4.00 / 4.25 / -0.25 |" in line
    random_line = next(line for line in text.splitlines() if line.startswith("| random"))
    assert random_line.rstrip(" |").endswith("chance level (ours)")
    assert "chance level (published)" in next(
        line for line in text.splitlines() if line.startswith("| AtChance")
    )
    assert "text queries against the image gallery" in text
    assert SOURCE in text

    rows = list(csv.DictReader(io.StringIO(csv_text(biomedflickr_table))))
    mine = next(row for row in rows if row["model_key"] == "mine")
    assert float(mine["I2T R@10 ours"]) == 13.0
    assert mine["I2T R@10 published"] == "12.0"
    assert float(mine["I2T R@10 difference"]) == pytest.approx(1.0)
    assert mine["I2T R@10 beyond_tolerance"] == "true"
    assert mine["I2T R@1 beyond_tolerance"] == "false"
    assert mine["reference_model"] == "RefModel"
    assert next(row for row in rows if row["model_key"] == "random")["ours_at_chance"] == "true"

    tex = latex(biomedflickr_table)
    assert r"13.00 / 12.0 / +1.00$^\dagger$" in tex
    assert r"\begin{tabular}" in tex and r"\bottomrule" in tex


def test_writer_writes_every_format_and_the_coverage(biomedflickr_table, tmp_path: Path) -> None:
    paths = write_paper_table(biomedflickr_table, tmp_path / "out")
    assert sorted(path.name for path in paths) == [
        "biomedflickr.coverage.json",
        "biomedflickr.csv",
        "biomedflickr.html",
        "biomedflickr.md",
        "biomedflickr.rst",
        "biomedflickr.tex",
    ]
    assert "13.00 / 12.0 / +1.00 ⚠" in (tmp_path / "out" / "biomedflickr.html").read_text()
    coverage = json.loads((tmp_path / "out" / "biomedflickr.coverage.json").read_text())
    # RefModel's three published cells are ours; AtChance's two have no model key.
    assert (coverage["published_cells"], coverage["ours"]) == (5, 3)
    assert coverage["reasons"] == {"not configured": {"model AtChance": 2}}
    assert coverage["line"].startswith("BioMedFlickr retrieval")
    for extension in ("md", "html", "tex", "rst"):
        text = (tmp_path / "out" / f"biomedflickr.{extension}").read_text()
        assert "3/5 published cells ours; 2 not configured (model AtChance)" in text, extension


def test_coverage_names_what_cannot_be_reproduced_and_what_was_not_run(tmp_path: Path) -> None:
    """No published row of BioCAP Table 1 is unreproducible; a benchmark left out is not run."""
    layout = LAYOUTS["biocap-table1"]
    mapping = read_map(SHIPPED_MAP)
    reference = read_reference(SHIPPED_REFERENCE)
    keys = ["rare-species"]
    rows = [metric_row("bioclip", "rare-species", I2T, 1, 40.0, 1.0, 0.3, ZEROSHOT)]
    table = build_paper_table(
        layout, pl.DataFrame(rows), reference, mapping, keys, 0.5, {"benchmarks": ["nabirds"]}
    )
    coverage = table.coverage
    assert coverage is not None
    published = [v for v in reference if v.table == "biocap-table1"]
    assert coverage.published == len(published) and coverage.ours == 1
    assert "not reproducible" not in coverage.reasons  # every model of the table runs
    # The NABirds and Mean cells (NABirds is part of the mean) of its six models.
    assert coverage.reasons["not run, data missing"] == {"nabirds": 12}
    configured = coverage.reasons["not configured"]
    assert configured["model BioCAP"] == 9  # no key of this config stands for BioCAP
    assert configured["benchmark of Plankton"] == 1  # BioCLIP's row: no key for the column
    assert coverage.our_cells == 11 and coverage.our_filled == 1


def test_layout_only_benchmark_shows_no_published_values(tmp_path: Path) -> None:
    mapping = ReferenceMap(models={"mine": ["BioMedCLIP"]})
    mapping.benchmarks = read_map_from_text(
        tmp_path, "benchmarks:\n  synth: {reference: biomedflickr, published: false}\n"
    ).benchmarks
    metrics = pl.DataFrame([metric_row("mine", "synth", "text_to_image", 1, 3.4, 0.1, 0.1)])
    table = build_paper_table(
        LAYOUTS["biomedflickr"],
        metrics,
        read_reference(SHIPPED_REFERENCE),
        mapping,
        ["synth"],
        0.5,
    )
    assert [row.label for row in table.rows] == ["mine (BioMedCLIP)"]
    assert all(cell.published is None for cell in table.rows[0].cells)
    assert any("published: false" in note for note in table.notes)


def read_map_from_text(tmp_path: Path, text: str) -> ReferenceMap:
    path = tmp_path / "map.yaml"
    path.write_text(text, encoding="utf-8")
    return read_map(path)


def test_mean_column_is_the_papers_mean_and_inconsistencies_are_noted(tmp_path: Path) -> None:
    layout = LAYOUTS["biocap-table1"]
    ours = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 15.0]
    published = [11.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 15.0]
    rows = [
        (
            "biocap-table1",
            column.benchmark,
            "test",
            "Ref",
            "image_to_text",
            "zeroshot_top1_accuracy",
            1,
            str(value),
        )
        for column, value in zip(layout.columns, published, strict=True)
    ]
    rows.append(
        (
            "biocap-table1",
            "mean",
            "test",
            "Ref",
            "image_to_text",
            "zeroshot_top1_accuracy",
            1,
            "49.0",
        )
    )
    reference = read_reference(write_reference(tmp_path / "ref.csv", rows))
    mapping = ReferenceMap(models={"mine": ["Ref"]})
    metrics = pl.DataFrame(
        [
            {**metric_row("mine", column.benchmark, I2T, 1, value + offset, 0.5, 1.0, ZEROSHOT),
             "subset": part}
            for column, value in zip(layout.columns, ours, strict=True)
            # A column that averages subsets gets one row per subset, averaging to `value`.
            for part, offset in zip(
                column.parts or (column.subset,),
                [-2.0, -1.0, 0.0, 1.0, 2.0] if column.parts else [0.0],
                strict=True,
            )
        ]
    )  # fmt: skip
    keys = [column.benchmark for column in layout.columns]
    table = build_paper_table(layout, metrics, reference, mapping, keys, 0.5)
    camera = table.rows[0].cells[table.labels.index("Camera Trap")]
    assert camera.ours == pytest.approx(ours[table.labels.index("Camera Trap")])
    mean = table.rows[0].cells[table.labels.index("Mean")]
    assert mean.ours == pytest.approx(statistics.fmean(ours))
    assert mean.published == 49.0
    assert mean.difference == pytest.approx(statistics.fmean(ours) - 49.0)
    notes = [note for note in table.notes if "inconsistent" in note]
    assert len(notes) == 1
    assert f"{statistics.fmean(published):.2f}" in notes[0]


def test_shipped_biocap_table1_notes_the_siglip_mean_only() -> None:
    layout = LAYOUTS["biocap-table1"]
    empty = pl.DataFrame(
        schema={
            "benchmark": pl.String,
            "subset": pl.String,
            "model": pl.String,
            "direction": pl.String,
            "metric": pl.String,
            "k": pl.Int64,
            "value": pl.Float64,
        }
    )
    keys = [column.benchmark for column in layout.columns]
    table = build_paper_table(
        layout, empty, read_reference(SHIPPED_REFERENCE), read_map(SHIPPED_MAP), keys, 0.5
    )
    assert len(table.rows) == 6
    notes = [note for note in table.notes if "inconsistent" in note]
    assert len(notes) == 1
    assert "SigLIP" in notes[0] and "32.3" in notes[0] and "31.46" in notes[0]


def test_every_shipped_published_cell_has_a_column() -> None:
    """A typo in a layout would silently drop published cells from its table."""
    for value in read_reference(SHIPPED_REFERENCE):
        layout = LAYOUTS[value.table]
        coordinates = (value.benchmark, value.subset, value.direction, value.metric, value.k)
        columns = [(c.benchmark, c.subset, c.direction, c.metric, c.k) for c in layout.columns]
        mean = layout.mean
        means = (
            []
            if mean is None
            else [(mean.benchmark, mean.subset, mean.direction, mean.metric, mean.k)]
        )
        assert coordinates in columns + means, value


def test_shipped_map_names_exist_in_the_reference() -> None:
    names = {value.model for value in read_reference(SHIPPED_REFERENCE)}
    benchmarks = {column.benchmark for layout in LAYOUTS.values() for column in layout.columns}
    mapping = read_map(SHIPPED_MAP)
    for key, model_names in mapping.models.items():
        assert set(model_names) <= names, key
    for key, ref in mapping.benchmarks.items():
        assert ref.reference in benchmarks, key


def test_only_tables_of_configured_benchmarks_are_made() -> None:
    mapping = read_map(SHIPPED_MAP)
    assert [layout.table for layout in layouts_for(["synthetic-biomedflickr"], mapping)] == [
        "biomedflickr"
    ]
    tables = {layout.table for layout in layouts_for(["flickr30k", "rare-species"], mapping)}
    assert tables == {
        "openclip-retrieval",
        "clip-paper-table13",
        "biocap-table1",
        "bioclip2-zeroshot",
        "bioclip-fewshot",
    }


def test_reference_errors_name_file_and_row(tmp_path: Path) -> None:
    bad = write_reference(
        tmp_path / "bad.csv",
        [("biomedflickr", "biomedflickr", "test", "M", "text_to_image", "recall", 1, "n/a")],
    )
    with pytest.raises(VlbenchError, match=r"bad\.csv row 2: value 'n/a'"):
        read_reference(bad)
    with pytest.raises(VlbenchError, match="reference file not found"):
        read_reference(tmp_path / "missing.csv")
    with pytest.raises(VlbenchError, match=r"benchmarks\.x: unknown key colour"):
        read_map_from_text(tmp_path, "benchmarks:\n  x: {reference: y, colour: red}\n")
    with pytest.raises(VlbenchError, match=r"models\.m: expected a reference model name"):
        read_map_from_text(tmp_path, "models:\n  m: 3\n")


def test_two_benchmarks_filling_one_column_is_an_error(tmp_path: Path) -> None:
    mapping = read_map_from_text(
        tmp_path, "benchmarks:\n  a: {reference: biomedflickr}\n  b: {reference: biomedflickr}\n"
    )
    metrics = pl.DataFrame(
        [
            metric_row("m", "a", "text_to_image", 1, 1.0, 0.1, 0.1),
            metric_row("m", "b", "text_to_image", 1, 2.0, 0.1, 0.1),
        ]
    )
    with pytest.raises(VlbenchError, match="'a' and 'b' both fill column 'I2T R@1'"):
        build_paper_table(LAYOUTS["biomedflickr"], metrics, [], mapping, ["a", "b"], 0.5)


def test_camera_trap_is_the_mean_of_the_five_subsets_and_empty_while_one_is_missing() -> None:
    """Each IDLE-OO subset benchmark fills one part; the cell is their unweighted mean."""
    layout = LAYOUTS["biocap-table1"]
    column = layout.columns[[c.label for c in layout.columns].index("Camera Trap")]
    mapping = read_map(SHIPPED_MAP)
    keys = {
        "desert-lion": "idle-oo-desert-lion",
        "ENA24": "idle-oo-ena24",
        "island": "idle-oo-island",
        "ohio-small-animals": "idle-oo-ohio-small-animals",
        "orinoquia": "idle-oo-orinoquia",
    }
    assert set(keys) == set(column.parts)
    values = dict(zip(column.parts, [10.0, 20.0, 40.0, 50.0, 80.0], strict=True))
    rows = [
        {**metric_row("m", keys[part], I2T, 1, values[part], 1.0, 5.0, ZEROSHOT), "subset": part}
        for part in column.parts
    ]
    found = match_metric_rows(pl.DataFrame(rows), layout, mapping)
    index = layout.columns.index(column)
    assert found[("m", index)]["value"] == pytest.approx(40.0)
    assert found[("m", index)]["n_queries"] == 5000
    partial = match_metric_rows(pl.DataFrame(rows[1:]), layout, mapping)
    assert ("m", index) not in partial


def test_inquire_supercategories_join_whatever_their_casing() -> None:
    """INQUIRE's data says `Appearance`; the layout and the published CSV say `appearance`."""
    layout = LAYOUTS["biocap-table2"]
    rows = [
        {
            **metric_row("m", "inquire-rerank", T2I, 50, 30.0 + i, 1.0, 5.0, "average_precision"),
            "group": group,
        }
        for i, group in enumerate(["Appearance", "Behavior", "Context", "Species"])
    ]
    found = match_metric_rows(pl.DataFrame(rows), layout, read_map(SHIPPED_MAP))
    labels = [column.label for column in layout.columns]
    for i, name in enumerate(["Appearance", "Behavior", "Context", "Species"]):
        assert found[("m", labels.index(f"INQUIRE {name}"))]["value"] == 30.0 + i


def fewshot_table(five_shot: float | None, column: str, values: tuple) -> PaperTable:
    """BioCLIP's few-shot layout filled with a bioclip row (zero-, one-, five-shot on Rare
    Species); `column` takes `values` in the one- and five-shot rows (the zero-shot row: None)."""
    zero = metric_row("bioclip", "rare-species", I2T, 1, 37.5, 1.0, 0.25, ZEROSHOT)
    one = metric_row("bioclip", "rare-species", "image_to_image", 1, 45.2, 0.8, 0.25)
    five = metric_row("bioclip", "rare-species", "image_to_image", 5, five_shot or 0.0, 0.5, 0.25)
    for row, value in zip((one, five), values, strict=True):
        row.update({"metric": "fewshot_accuracy", column: value})
    zero[column] = None
    if five_shot is None:
        five.update(value=None, ci_low=None, ci_high=None)
    return build_paper_table(
        LAYOUTS["bioclip-fewshot"],
        pl.DataFrame([zero, one, five]),
        read_reference(SHIPPED_REFERENCE),
        read_map(SHIPPED_MAP),
        ["rare-species"],
        tolerance=0.5,
    )


def test_fewshot_table_sets_zero_one_and_five_shot_side_by_side_and_names_flags() -> None:
    """BioCLIP's layout on Rare Species: published cells from the dataset card, our few-shot
    rows (image_to_image, k = shots) beside the zero-shot row; a flagged benchmark is noted."""
    table = fewshot_table(64.9, "n_short_classes", (0, 3))
    assert table.labels == [
        "Rare Species zero-shot", "Rare Species one-shot", "Rare Species five-shot",
    ]  # fmt: skip
    ours = next(row for row in table.rows if row.model_key == "bioclip")
    assert [(cell.ours, cell.published) for cell in ours.cells] == [
        (37.5, 38.09), (45.2, 44.9), (64.9, 65.7),
    ]  # fmt: skip
    assert [round(cell.difference, 2) for cell in ours.cells] == [-0.59, 0.3, -0.8]
    labels = [row.label for row in table.rows]
    assert "CLIP (ViT-B/16) (published)" in labels and "BioCLIP iNat21 Only (published)" in labels
    flagged = [note for note in table.notes if note.startswith("Flagged")]
    assert flagged == [
        "Flagged: few-shot on rare-species had classes with fewer than k + 5 images (k=5: 3 "
        "classes); BioCLIP's few_shot.py logs them as not enough for evaluation and keeps them, "
        "as we do."
    ]
    assert "Flagged: few-shot on rare-species" in markdown(table)


def test_a_not_computable_cell_is_marked_noted_and_counted_apart_from_the_filled() -> None:
    """Five-shot on a set with a class smaller than five: the cell says n/c, a note names the
    reason and the models, and the coverage counts the cell as not computable, not empty."""
    from vlbench.report.table_writers import cell_text

    reason = "k=5: 1 class(es) with fewer than 5 images: 'x' (3)"
    table = fewshot_table(None, "not_computable", (None, reason))
    ours = next(row for row in table.rows if row.model_key == "bioclip")
    assert [cell.not_computable for cell in ours.cells] == ["", "", reason]
    assert cell_text(ours.cells[2]) == "n/c / 65.7 / –"  # published as printed
    assert f"Not computable: fewshot_accuracy@5 on rare-species (bioclip): {reason}." in table.notes
    coverage = table.coverage
    assert (coverage.our_cells, coverage.our_filled, coverage.our_not_computable) == (3, 2, 1)
    assert coverage.complete
    assert coverage.reasons["not computable"] == {f"BioCLIP: {reason}": 1}
    assert "(1 not computable, named in the notes)" in coverage.line()


def test_our_cells_tied_with_the_best_are_bold_in_every_format(tmp_path: Path) -> None:
    """A metric row tied with the best of two or more models is bold in Markdown, LaTeX, HTML
    and reStructuredText and flagged in the CSV; one alone in its column is not."""
    rows = [
        {**metric_row("mine", "bmf", "text_to_image", 1, 3.2, 1.0, 0.1), "tied_with_best": True,
         "n_models": 2},
        {**metric_row("random", "bmf", "text_to_image", 1, 0.2, 0.3, 0.1),
         "tied_with_best": False, "n_models": 2},
        {**metric_row("mine", "bmf", "image_to_text", 1, 4.0, 1.0, 0.1), "tied_with_best": True,
         "n_models": 1},
    ]  # fmt: skip
    mapping = tmp_path / "map.yaml"
    mapping.write_text("benchmarks:\n  bmf: {reference: biomedflickr}\n", encoding="utf-8")
    reference = write_reference(tmp_path / "ref.csv", [bmf("Ref", "text_to_image", 1, "3.0")])
    table = build_paper_table(
        LAYOUTS["biomedflickr"], pl.DataFrame(rows), read_reference(reference),
        read_map(mapping), ["bmf"], tolerance=0.5,
    )  # fmt: skip
    text = markdown(table)
    mine = next(line for line in text.splitlines() if line.startswith("| mine"))
    assert "| **3.20** / – / – |" in mine and "| 4.00 / – / – |" in mine
    assert "**" not in next(line for line in text.splitlines() if line.startswith("| random"))
    assert "Bold (ours)" in text
    assert r"\textbf{3.20} / --" in latex(table)
    assert "<b>3.20</b> / – / –" in html_fragment(table)
    assert "- **3.20** / – / –" in rst_fragment(table)
    flags = {row["model_key"]: row for row in csv.DictReader(io.StringIO(csv_text(table)))}
    assert flags["mine"]["I2T R@1 tied_with_best"] == "true"
    assert flags["mine"]["T2I R@1 tied_with_best"] == "false"
    assert flags["random"]["I2T R@1 tied_with_best"] == "false"
