"""The leaderboard page: its embedded data matches the tables, and in a real headless browser
it draws without errors, sorts by a header, filters by model and benchmark and marks the best.

The browser tests use Debian's chromium and chromedriver (installed by .ci/browser-setup.sh
when missing, else skipped with its reason). The screenshot goes to the path in
VLBENCH_LEADERBOARD_SCREENSHOT when set (docs/images/leaderboard.png), else to the test's folder.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from workflow_helpers import REPO

from vlbench.errors import VlbenchError
from vlbench.report.leaderboard import (
    coverage_entry,
    leaderboard_data,
    paper_entry,
    write_leaderboard,
)
from vlbench.report.paper_table_model import Coverage
from vlbench.report.tables import FEWSHOT_LEGEND

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SETUP = REPO / ".ci" / "browser-setup.sh"
SCREENSHOT_ENV = "VLBENCH_LEADERBOARD_SCREENSHOT"
# Skill per model and Recall@1 of a skill-1 model per benchmark: the synthetic values.
MODELS = {"bioclip": 1.0, "biomedclip": 1.25, "openai-vit-b-16": 0.8, "pubmedclip-vit-b-32": 0.45}
BENCHMARKS = {"biomedflickr": 22.0, "flickr30k": 58.0}
ARROWS = {"image_to_text": "image→text", "text_to_image": "text→image"}
PAPER = "openclip-retrieval"
PAPER_TITLE = "open_clip retrieval (Flickr30k, 1K test images)"
PAPER_LABELS = {
    (direction, k): f"{short} R@{k}"
    for direction, short in (("image_to_text", "I2T"), ("text_to_image", "T2I"))
    for k in (1, 5)
}
# Published model and published = ours - offset, for the paper rows that have one.
PUBLISHED = {"openai-vit-b-16": ("CLIP ViT-B/16", 3.5), "bioclip": ("BioCLIP", -0.8)}
PAPER_PARTS = ["ours", "ci_low", "ci_high", "published", "difference", "beyond_tolerance"]
# A model name that would end the data block, and load an image, if it were not escaped.
HOSTILE = 'x</script><img src="missing.png" onerror="alert(1)">'


def metric_row(benchmark: str, model: str, direction: str, metric: str, **rest: Any) -> dict:
    """A metrics_full.csv row (columns a row lacks are empty in the file)."""
    return {
        "benchmark": benchmark,
        "subset": "test",
        "model": model,
        "direction": direction,
        "metric": metric,
        "n_queries": 1000,
        **rest,
    }


def recall_rows(benchmark: str, models: dict[str, float]) -> list[dict[str, Any]]:
    """Recall@k rows of a benchmark with their standings (tied: within 3 points of the best)."""
    rows = []
    for direction in ARROWS:
        for k in (1, 5, 10):
            hit = BENCHMARKS[benchmark] / 100 * (0.93 if direction == "text_to_image" else 1.0)
            values = {
                model: round(100 * (1 - (1 - hit * skill) ** (k**0.6)), 2)
                for model, skill in models.items()
            }
            ordered = sorted(values, key=lambda model: -values[model])
            for rank, model in enumerate(ordered, 1):
                value, tied = values[model], values[ordered[0]] - values[model] < 3.0
                rows.append(
                    metric_row(
                        benchmark,
                        model,
                        direction,
                        "recall",
                        k=k,
                        value=value,
                        unit="percent",
                        chance=k / 10,
                        ci_low=round(value - 2.5 / k**0.5, 2),
                        ci_high=round(min(100.0, value + 2.5 / k**0.5), 2),
                        rank=rank,
                        rank_low=1 if tied else rank,
                        rank_high=min(len(models), rank + 1),
                        tied_with_best=tied,
                        p_vs_best_holm=None if rank == 1 else (0.4 if tied else 0.001),
                        n_models=len(models),
                    )
                )
    return rows


def median_rank_rows(models: dict[str, float]) -> list[dict[str, Any]]:
    """flickr30k's image→text median rank (no standings); the weakest model has none."""
    rows = []
    for model, skill in models.items():
        if skill >= 0.5:
            value = round(4.0 / skill, 1)
            rows.append(
                metric_row(
                    "flickr30k",
                    model,
                    "image_to_text",
                    "median_rank",
                    value=value,
                    ci_low=value - 1,
                    ci_high=value + 1,
                    unit="rank",
                )
            )
    return rows


def text(value: Any) -> str:
    """A CSV field as the paper tables write it."""
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def write_paper(folder: Path, metrics: Path, models: dict[str, float], tied: bool = True) -> Path:
    """The open_clip-style paper table: our flickr30k R@1 and R@5 beside published values,
    and a published-only row (`tied`: with the tied_with_best columns of newer files)."""
    ours = {
        (row["model"], row["direction"], row["k"]): row
        for row in pl.read_csv(metrics).filter(pl.col("metric") == "recall").iter_rows(named=True)
        if row["benchmark"] == "flickr30k"
    }
    parts = [*PAPER_PARTS, *(["tied_with_best"] if tied else [])]
    header = ["row", "model_key", "reference_model"]
    header += [f"{label} {part}" for label in PAPER_LABELS.values() for part in parts]
    lines = [[*header, "ours_at_chance", "published_at_chance"]]
    for model in models:
        reference, offset = PUBLISHED.get(model, ("", None))
        line = [model, model, reference]
        for direction, k in PAPER_LABELS:
            row = ours[(model, direction, k)]
            published = None if offset is None else round(row["value"] - offset, 1)
            difference = None if published is None else round(row["value"] - published, 6)
            beyond = difference is not None and abs(difference) > 3.0
            cells = [row["value"], row["ci_low"], row["ci_high"], published, difference, beyond]
            line += [text(cell) for cell in [*cells, row["tied_with_best"]][: len(parts)]]
        lines.append([*line, "false", ""])
    published_only = ["", "", "", "88.0", "", "false", "false"][: len(parts)]
    lines.append(
        ["CLIP ViT-L/14", "", "CLIP ViT-L/14", *published_only * len(PAPER_LABELS), "", ""]
    )
    path = folder / f"{PAPER}.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows(lines)
    return path


def write_coverage(folder: Path) -> Path:
    reasons = {"not reproducible": Counter({"CLIP ViT-L/14: weights not in open_clip": 4})}
    coverage = Coverage(PAPER, PAPER_TITLE, published=12, ours=8, reasons=reasons)
    coverage.our_cells = coverage.our_filled = 4 * len(MODELS)
    path = folder / f"{PAPER}.coverage.json"
    path.write_text(json.dumps(coverage.as_dict(), indent=1), encoding="utf-8")
    return path


def inputs(folder: Path, models: dict[str, float] = MODELS) -> tuple[Path, Path, Path]:
    """metrics_full.csv, the paper table and its coverage record, in `folder`."""
    metrics = folder / "metrics_full.csv"
    rows = [row for name in BENCHMARKS for row in recall_rows(name, models)]
    rows += median_rank_rows(models)
    pl.DataFrame(rows, infer_schema_length=None).write_csv(metrics)
    return metrics, write_paper(folder, metrics, models), write_coverage(folder)


def build_page(folder: Path, models: dict[str, float] = MODELS) -> Path:
    metrics, paper, coverage = inputs(folder, models)
    page = folder / "leaderboard.html"
    write_leaderboard(metrics, [paper], [coverage], page)
    return page


def embedded(page: Path) -> dict[str, Any]:
    """The JSON data block of a written page."""
    block = re.search(
        r'<script type="application/json" id="leaderboard-data">(.*?)</script>',
        page.read_text(encoding="utf-8"),
        re.S,
    )
    assert block is not None
    return json.loads(block.group(1))


def column_label(row: dict[str, Any]) -> str:
    if row["metric"] == "median_rank":
        return f"{ARROWS[row['direction']]} median_rank (rank)"
    return f"{ARROWS[row['direction']]} R@{row['k']} (%)"


def test_the_embedded_data_round_trips_the_metric_rows(tmp_path: Path) -> None:
    metrics, paper, coverage = inputs(tmp_path)
    page = tmp_path / "leaderboard.html"
    write_leaderboard(metrics, [paper], [coverage], page)
    data = embedded(page)
    assert data == leaderboard_data(metrics, [paper], [coverage])
    benchmarks = {entry["name"]: entry for entry in data["benchmarks"]}
    assert list(benchmarks) == sorted(BENCHMARKS)
    assert benchmarks["flickr30k"]["columns"][:2] == [
        "image→text median_rank (rank)",
        "image→text R@1 (%)",
    ]
    for row in pl.read_csv(tmp_path / "metrics_full.csv").iter_rows(named=True):
        entry = benchmarks[row["benchmark"]]
        grid = {item["model"]: item["cells"] for item in entry["rows"]}
        cell = grid[row["model"]][entry["columns"].index(column_label(row))]
        assert (cell["value"], cell["lo"], cell["hi"]) == (
            row["value"],
            row["ci_low"],
            row["ci_high"],
        )
        assert (cell["rank"], cell["rank_lo"], cell["rank_hi"]) == (
            row["rank"],
            row["rank_low"],
            row["rank_high"],
        )
        assert cell["best"] is bool(row["tied_with_best"])
    flickr = benchmarks["flickr30k"]
    weakest = next(item for item in flickr["rows"] if item["model"] == "pubmedclip-vit-b-32")
    assert weakest["cells"][0] is None
    assert flickr["chance"][:2] == [None, 0.1]


def test_the_embedded_data_round_trips_the_paper_table(tmp_path: Path) -> None:
    data = embedded(build_page(tmp_path))
    assert data["coverage"] == [
        {
            "table": PAPER,
            "title": PAPER_TITLE,
            "text": json.loads((tmp_path / f"{PAPER}.coverage.json").read_text(encoding="utf-8"))[
                "line"
            ],
        }
    ]
    (paper,) = data["papers"]
    assert (paper["name"], paper["title"]) == (PAPER, PAPER_TITLE)
    assert paper["labels"] == list(PAPER_LABELS.values())
    with open(tmp_path / f"{PAPER}.csv", newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    assert [row["label"] for row in paper["rows"]] == [record["row"] for record in records]
    for row, record in zip(paper["rows"], records, strict=True):
        assert (row["model"], row["reference"]) == (record["model_key"], record["reference_model"])
        for label, cell in zip(paper["labels"], row["cells"], strict=True):
            ours = record[f"{label} ours"]
            assert cell["value"] == (float(ours) if ours else None)
            assert cell["published"] == record[f"{label} published"]
            assert cell["beyond"] is (record[f"{label} beyond_tolerance"] == "true")
            assert cell["best"] is (record[f"{label} tied_with_best"] == "true")
    assert any(cell["beyond"] for row in paper["rows"] for cell in row["cells"])
    assert paper["rows"][0]["flags"] == []


def test_paper_tables_without_the_tied_column_read_as_unmarked(tmp_path: Path) -> None:
    metrics, newer, _ = inputs(tmp_path)
    (tmp_path / "older").mkdir()
    older = write_paper(tmp_path / "older", metrics, MODELS, tied=False)
    new, old = paper_entry(newer), paper_entry(older)
    assert any(cell["best"] for row in new["rows"] for cell in row["cells"])
    for row in new["rows"]:
        for cell in row["cells"]:
            cell["best"] = False
    assert old == new


def test_a_file_that_is_no_paper_table_is_named(tmp_path: Path) -> None:
    metrics, _, _ = inputs(tmp_path)
    with pytest.raises(VlbenchError, match=r"metrics_full\.csv: not a paper table CSV"):
        paper_entry(metrics)


def test_a_script_end_in_a_model_name_cannot_end_the_data_block(tmp_path: Path) -> None:
    page = build_page(tmp_path, {**MODELS, HOSTILE: 0.6})
    written = page.read_text(encoding="utf-8")
    assert written.count("</script>") == 2
    assert "<img" not in written
    models = {row["model"] for entry in embedded(page)["benchmarks"] for row in entry["rows"]}
    assert HOSTILE in models


def test_coverage_shows_the_summary_else_the_line_else_the_record(tmp_path: Path) -> None:
    records = {
        "a": {"table": "a", "title": "Table A", "summary": "3/5 cells", "line": "ignored"},
        "b": {"table": "b", "title": "Table B", "line": "Table B: 0/0 cells."},
        "c": {"published_cells": 2, "reasons": {}},
    }
    texts = []
    for name, record in records.items():
        path = tmp_path / f"{name}.coverage.json"
        path.write_text(json.dumps(record), encoding="utf-8")
        texts.append(coverage_entry(path)["text"])
    assert texts == [
        "Table A: 3/5 cells",
        "Table B: 0/0 cells.",
        "c: published_cells 2; reasons {}",
    ]


def test_not_computable_cells_keep_their_reason(tmp_path: Path) -> None:
    rows = [
        {"k": 1, "value": 40.0, "not_computable": None},
        {"k": 5, "value": None, "not_computable": "a class has fewer than 5 images"},
    ]
    common = {"benchmark": "b", "subset": "test", "model": "m", "direction": "image_to_image"}
    common |= {"metric": "fewshot_accuracy", "ci_low": None, "ci_high": None, "unit": "percent"}
    metrics = tmp_path / "metrics_full.csv"
    pl.DataFrame([common | row for row in rows], infer_schema_length=None).write_csv(metrics)
    (entry,) = leaderboard_data(metrics, [], [])["benchmarks"]
    computed, missing = entry["rows"][0]["cells"]
    assert (computed["value"], computed["nc"], computed["rank"]) == (40.0, "", None)
    assert (missing["value"], missing["nc"]) == (None, "a class has fewer than 5 images")
    assert entry["note"] == FEWSHOT_LEGEND and entry["chance"] is None


# ---- in a real headless browser ----


def browser_missing() -> str | None:
    """None when chromium and chromedriver are there (after .ci/browser-setup.sh if need be),
    else why not."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return None
    try:
        proc = subprocess.run(
            ["bash", str(SETUP)], capture_output=True, text=True, timeout=900, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{SETUP.name} failed: {exc}"
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return None
    said = [line for line in proc.stdout.splitlines() if line.startswith("BROWSER-SETUP-")]
    return said[-1] if said else (proc.stdout + proc.stderr).strip()[-500:]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian chromium driven by its own chromedriver (Selenium Manager never runs)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    reason = browser_missing()
    if reason is not None:
        pytest.skip(f"no headless chromium: {reason}")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    viewport = {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", viewport)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_page(tmp_path_factory.mktemp("leaderboard"))


def load(driver: Any, path: Path) -> list[dict[str, Any]]:
    """Open the page from disk; return the SEVERE console entries it caused."""
    driver.get_log("browser")
    driver.get(path.as_uri())
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def board(driver: Any, name: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'table.board[data-table="{name}"]')


def shown_models(table: Any) -> list[str]:
    """The models of the table's shown rows, top to bottom."""
    from selenium.webdriver.common.by import By

    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    return [row.get_attribute("data-model") for row in rows if row.is_displayed()]


def header(table: Any, label: str) -> Any:
    from selenium.webdriver.common.by import By

    return next(
        th for th in table.find_elements(By.CSS_SELECTOR, "th[data-col]") if th.text == label
    )


def test_the_page_draws_without_console_errors(browser: Any, page: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    assert load(browser, page) == []
    tables = browser.find_elements(By.CSS_SELECTOR, "table.board")
    assert [table.get_attribute("data-table") for table in tables] == [
        f"paper:{PAPER}",
        *sorted(BENCHMARKS),
    ]
    (line,) = browser.find_elements(By.CSS_SELECTOR, "#coverage li")
    assert line.text.startswith(f"{PAPER_TITLE}: 8/12 published cells ours")
    assert shown_models(board(browser, "flickr30k")) == sorted(MODELS)
    target = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "leaderboard.png")
    target.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(target))
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_header_click_sorts_numerically_and_toggles(browser: Any, page: Path) -> None:
    load(browser, page)
    table = board(browser, "biomedflickr")
    assert shown_models(table) == sorted(MODELS)
    column = header(table, "image→text R@1 (%)")
    column.click()
    by_skill = sorted(MODELS, key=MODELS.__getitem__)
    assert shown_models(table) == by_skill  # 9.9 before 17.6: numbers, not text
    assert column.get_attribute("aria-sort") == "ascending"
    column.click()
    assert shown_models(table) == by_skill[::-1]
    assert column.get_attribute("aria-sort") == "descending"
    header(table, "model").click()
    assert shown_models(table) == sorted(MODELS)


def test_missing_values_sort_last_either_way(browser: Any, page: Path) -> None:
    load(browser, page)
    table = board(browser, "flickr30k")
    column = header(table, "image→text median_rank (rank)")
    column.click()
    assert shown_models(table) == [
        "biomedclip",
        "bioclip",
        "openai-vit-b-16",
        "pubmedclip-vit-b-32",
    ]
    column.click()
    assert shown_models(table) == [
        "openai-vit-b-16",
        "bioclip",
        "biomedclip",
        "pubmedclip-vit-b-32",
    ]


def test_the_model_filter_hides_rows_in_every_table(browser: Any, page: Path) -> None:
    from selenium.webdriver.common.by import By

    load(browser, page)
    field = browser.find_element(By.ID, "model-filter")
    tables = browser.find_elements(By.CSS_SELECTOR, "table.board")
    field.send_keys("bioclip")  # a whole name: that model only, not biomedclip
    assert all(shown_models(table) == ["bioclip"] for table in tables)
    field.clear()
    assert shown_models(board(browser, f"paper:{PAPER}")) == [*MODELS, ""]
    field.send_keys("PubMed")  # part of a name, any case
    assert all(shown_models(table) == ["pubmedclip-vit-b-32"] for table in tables)


def test_the_benchmark_filter_hides_the_other_sections(browser: Any, page: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    load(browser, page)
    Select(browser.find_element(By.ID, "benchmark-filter")).select_by_value("flickr30k")
    assert board(browser, "flickr30k").is_displayed()
    assert not board(browser, "biomedflickr").is_displayed()
    assert board(browser, f"paper:{PAPER}").is_displayed()
    Select(browser.find_element(By.ID, "benchmark-filter")).select_by_value("")
    assert board(browser, "biomedflickr").is_displayed()


def test_tied_with_best_cells_are_bold_and_marked(browser: Any, page: Path) -> None:
    from selenium.webdriver.common.by import By

    load(browser, page)
    for name in BENCHMARKS:
        table = board(browser, name)
        labels = [th.text for th in table.find_elements(By.CSS_SELECTOR, "th[data-col]")]
        marked = set()
        for row in table.find_elements(By.CSS_SELECTOR, "tbody tr"):
            for index, cell in enumerate(row.find_elements(By.TAG_NAME, "td")):
                if "best" in (cell.get_attribute("class") or "").split():
                    assert cell.find_element(By.CLASS_NAME, "mark").text == "★"
                    assert cell.value_of_css_property("font-weight") == "700"
                    marked.add((row.get_attribute("data-model"), labels[index]))
        expected = {
            (row["model"], column_label(row))
            for row in recall_rows(name, MODELS)
            if row["tied_with_best"]
        }
        assert marked == expected
    paper = board(browser, f"paper:{PAPER}")
    best = paper.find_elements(By.CSS_SELECTOR, 'tr[data-model="biomedclip"] td.best')
    assert len(best) == len(PAPER_LABELS)
    assert paper.find_elements(By.CSS_SELECTOR, "td.beyond")


def test_a_hostile_model_name_stays_text(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    page = build_page(tmp_path, {**MODELS, HOSTILE: 0.6})
    assert load(browser, page) == []
    assert browser.find_elements(By.TAG_NAME, "img") == []
    rows = board(browser, "biomedflickr").find_elements(By.CSS_SELECTOR, "tbody tr")
    assert HOSTILE in [row.get_attribute("data-model") for row in rows]
    assert HOSTILE in [row.find_element(By.TAG_NAME, "td").text for row in rows]
