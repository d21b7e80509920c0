"""Write a filled paper table as Markdown, CSV (paper layout, wide), LaTeX and HTML."""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Callable
from pathlib import Path

from vlbench.atomic import write_text
from vlbench.paths import PAPER_TABLE_FILES
from vlbench.report.paper_table_model import Cell, PaperTable, Row

DASH = "–"
NOT_COMPUTABLE = "n/c"
TOLERANCE_MARK = "⚠"
CHANCE_OURS = "chance level (ours)"
CHANCE_PUBLISHED = "chance level (published)"
BEST_LEGEND = (
    "Bold (ours): the best of our models in that metric column, or not significantly worse "
    "than it on the same queries (one-sided paired sign-flip permutation test, Holm-corrected "
    "across the models; results/tables/standings.csv)."
)


def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return DASH
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def cell_parts(cell: Cell) -> tuple[str, str, str]:
    """The three printed parts of a cell: ours, published (as printed), difference."""
    published = cell.published_text if cell.published_text is not None else DASH
    ours = NOT_COMPUTABLE if cell.not_computable else _number(cell.ours)
    return ours, published, _number(cell.difference, signed=True)


def _markdown_bold(text: str) -> str:
    return f"**{text}**"


def cell_text(cell: Cell, bold: Callable[[str], str] = _markdown_bold) -> str:
    """'ours / published / difference', ours in `bold` when tied with the best, with the
    tolerance mark when the difference is too big."""
    ours, published, difference = cell_parts(cell)
    ours = bold(ours) if cell.tied_with_best else ours
    text = f"{ours} / {published} / {difference}"
    return f"{text} {TOLERANCE_MARK}" if cell.beyond_tolerance else text


def row_flags(row: Row) -> list[str]:
    """The row-level flags in words."""
    flags = []
    if row.ours_at_chance:
        flags.append(CHANCE_OURS)
    if row.published_at_chance:
        flags.append(CHANCE_PUBLISHED)
    return flags


def legend(table: PaperTable, mark: str = TOLERANCE_MARK, dash: str = DASH) -> list[str]:
    """Lines that explain the cells and flags, shared by every format (coverage first)."""
    coverage = [f"Coverage: {table.coverage.summary()}"] if table.coverage else []
    return [
        *coverage,
        "Each cell: ours / published / difference (ours - published), in percent; "
        f"{dash} where a value is missing; {NOT_COMPUTABLE} where ours cannot be computed on "
        "the data (the notes say why).",
        f"{mark} marks a difference larger than {table.tolerance:g} percentage points.",
        f"'{CHANCE_OURS}': no cell of our row is above chance (every 95% interval reaches the "
        f"chance level). '{CHANCE_PUBLISHED}': no published cell is above chance at our query "
        "count (95% Wilson interval).",
        *([BEST_LEGEND] if any(c.tied_with_best for row in table.rows for c in row.cells) else []),
        f"Benchmarks: {', '.join(table.benchmark_keys)}.",
    ]


def markdown(table: PaperTable) -> str:
    """The table in Markdown, with its title, legend and notes."""
    header = ["model", *table.labels, "flags"]
    lines = [f"# {table.layout.title}", "", *(f"- {line}" for line in legend(table)), ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("| " + " | ".join(["---", *["---:"] * len(table.labels), "---"]) + " |")
    for row in table.rows:
        cells = [row.label, *map(cell_text, row.cells), "; ".join(row_flags(row))]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    if table.notes:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in table.notes]
    return "\n".join(lines) + "\n"


def _optional(value: float | None) -> str:
    return "" if value is None else repr(round(value, 6))


def csv_text(table: PaperTable) -> str:
    """The table in the paper's layout: one row per model, ours/published/difference per column."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = ["row", "model_key", "reference_model"]
    for label in table.labels:
        header += [
            f"{label} ours",
            f"{label} ci_low",
            f"{label} ci_high",
            f"{label} published",
            f"{label} difference",
            f"{label} beyond_tolerance",
            f"{label} tied_with_best",
        ]
    writer.writerow([*header, "ours_at_chance", "published_at_chance"])
    for row in table.rows:
        values = [row.label, row.model_key or "", row.reference_model or ""]
        for cell in row.cells:
            values += [
                _optional(cell.ours),
                _optional(cell.ci_low),
                _optional(cell.ci_high),
                cell.published_text or "",
                _optional(cell.difference),
                str(cell.beyond_tolerance).lower(),
                str(cell.tied_with_best).lower(),
            ]
        values += [_flag(row.ours_at_chance), _flag(row.published_at_chance)]
        writer.writerow(values)
    return buffer.getvalue()


def _flag(flag: bool | None) -> str:
    return "" if flag is None else str(flag).lower()


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "→": r"$\rightarrow$",
    "–": "--",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters."""
    return "".join(_LATEX_ESCAPES.get(char, char) for char in text)


def _latex_cell(cell: Cell) -> str:
    ours, published, difference = (latex_escape(part) for part in cell_parts(cell))
    ours = rf"\textbf{{{ours}}}" if cell.tied_with_best else ours
    text = f"{ours} / {published} / {difference}"
    return text + r"$^\dagger$" if cell.beyond_tolerance else text


def latex(table: PaperTable) -> str:
    """A booktabs tabular; dagger marks a difference beyond tolerance."""
    spec = "l" + "r" * len(table.labels) + "l"
    header = ["Model", *table.labels, "Flags"]
    lines = [
        f"% {table.layout.title}",
        *(f"% {line}" for line in legend(table, mark="dagger", dash="--")),
        r"\begin{tabular}{" + spec + "}",
        r"\toprule",
        " & ".join(latex_escape(label) for label in header) + r" \\",
        r"\midrule",
    ]
    for row in table.rows:
        cells = [
            latex_escape(row.label),
            *map(_latex_cell, row.cells),
            latex_escape("; ".join(row_flags(row))),
        ]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [f"% Note: {note}" for note in table.notes]
    return "\n".join(lines) + "\n"


def html_fragment(table: PaperTable) -> str:
    """A standalone HTML page of the table (for the Snakemake report)."""
    escape = html.escape
    head = "".join(f"<th>{escape(label)}</th>" for label in ["model", *table.labels, "flags"])
    body = []
    for row in table.rows:
        cells = [f"<td>{escape(row.label)}</td>"]
        for cell in row.cells:
            style = ' class="beyond"' if cell.beyond_tolerance else ""
            text = escape(cell_text(cell, bold=lambda ours: f"\0{ours}\1"))
            text = text.replace("\0", "<b>").replace("\1", "</b>")
            cells.append(f"<td{style}>{text}</td>")
        flags = "; ".join(row_flags(row))
        cells.append(f'<td class="flag">{escape(flags)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    items = "".join(f"<li>{escape(line)}</li>" for line in [*legend(table), *table.notes])
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{escape(table.layout.title)}</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap}"
        "td:first-child,td.flag{text-align:left}.beyond{background:#fde2a7}"
        ".flag{color:#b00020}</style></head><body>"
        f"<h2>{escape(table.layout.title)}</h2><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table><ul>{items}</ul></body></html>\n"
    )


_RST_BULLETS = ("*", "+", "-", "•", "‣", "⁃")


def _rst_cell(text: str) -> str:
    """A list-table cell: one line, a leading bullet character escaped."""
    text = " ".join(text.split()) or DASH
    bullet = text.startswith(_RST_BULLETS) and not text.startswith("**")
    return "\\" + text if bullet else text


def rst_fragment(table: PaperTable) -> str:
    """The table as reStructuredText (a section of the report's first page)."""
    title = table.layout.title
    lines = [title, "~" * len(title), ""]
    if table.coverage:
        lines += [f"*Coverage:* {table.coverage.summary()}", ""]
    if any(cell.tied_with_best for row in table.rows for cell in row.cells):
        lines += [BEST_LEGEND, ""]
    lines += [".. list-table::", "   :header-rows: 1", ""]
    rows = [["model", *table.labels, "flags"]]
    rows += [
        [row.label, *map(cell_text, row.cells), "; ".join(row_flags(row))] for row in table.rows
    ]
    for row in rows:
        lines += [f"   * - {_rst_cell(row[0])}", *(f"     - {_rst_cell(cell)}" for cell in row[1:])]
    return "\n".join(lines) + "\n"


def coverage_json(table: PaperTable) -> str:
    """The table's coverage record as JSON."""
    assert table.coverage is not None
    return json.dumps(table.coverage.as_dict(), indent=1, sort_keys=True) + "\n"


def write_paper_table(table: PaperTable, directory: str | Path) -> list[Path]:
    """Write every file of vlbench.paths.PAPER_TABLE_FILES (<table>.md, .csv, .tex, .html, .rst
    and .coverage.json) into `directory`."""
    directory = Path(directory)
    renderers = {
        "markdown": markdown,
        "csv": csv_text,
        "latex": latex,
        "html": html_fragment,
        "rst": rst_fragment,
        "coverage": coverage_json,
    }
    paths = []
    for name, extension in PAPER_TABLE_FILES.items():
        text = renderers[name](table)
        path = directory / f"{table.layout.table}.{extension}"
        write_text(path, text)
        paths.append(path)
    return paths
