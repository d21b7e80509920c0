"""The `vlbench` command line: `vlbench score` evaluates precomputed embeddings.

The file formats are documented in docs/score.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from vlbench.errors import VlbenchError
from vlbench.evaluation import Side, normalise_rows, rank_protocol
from vlbench.metrics_job import score_ranks, write_csv
from vlbench.metrics_table import StatsSettings, per_class_table
from vlbench.protocols import PROTOCOL_DIRECTIONS
from vlbench.ranking import TIE_POLICIES


def _read_parquet(path: str | Path, what: str, required: Sequence[str]) -> pl.DataFrame:
    try:
        table = pl.read_parquet(path)
    except FileNotFoundError as exc:
        raise VlbenchError(f"{what}: file not found: {path}") from exc
    except (pl.exceptions.ComputeError, OSError) as exc:
        raise VlbenchError(f"{what}: {path} is not a readable parquet file ({exc})") from exc
    missing = [name for name in required if name not in table.columns]
    if missing:
        raise VlbenchError(
            f"{path}: missing column(s) {', '.join(missing)} (has: {', '.join(table.columns)})"
        )
    return table


def read_side(npy: str, ids_path: str, name: str) -> Side:
    """Vectors from a .npy matrix plus ids (and optional groups) from a parquet file."""
    try:
        vectors = np.load(npy, allow_pickle=False)
    except FileNotFoundError as exc:
        raise VlbenchError(f"{name}: file not found: {npy}") from exc
    except ValueError as exc:
        raise VlbenchError(f"{name}: {npy} is not a plain .npy matrix ({exc})") from exc
    if vectors.ndim != 2:
        raise VlbenchError(f"{npy}: expected a 2-D matrix, got shape {vectors.shape}")
    table = _read_parquet(ids_path, name, ["id"])
    ids = np.asarray([str(item) for item in table["id"].to_list()], dtype=object)
    groups = (
        np.asarray(table["group"].cast(pl.String).to_list(), dtype=object)
        if "group" in table.columns
        else None
    )
    if len(ids) != len(vectors):
        raise VlbenchError(f"{npy}: {len(vectors)} rows but {ids_path} has {len(ids)} ids")
    return Side(normalise_rows(vectors), ids, groups, name=name)


def read_judgements(path: str | None) -> pl.DataFrame | None:
    """query_id, item_id and (optional, default 1) relevance."""
    if path is None:
        return None
    table = _read_parquet(path, "qrels", ["query_id", "item_id"])
    if "relevance" not in table.columns:
        table = table.with_columns(pl.lit(1).alias("relevance"))
    return table.select(
        pl.col("query_id").cast(pl.String),
        pl.col("item_id").cast(pl.String),
        pl.col("relevance").cast(pl.Int64),
    )


def read_candidate_lists(path: str | None) -> pl.DataFrame | None:
    """query_id, candidate_ids (list) and optional candidate_groups (list)."""
    if path is None:
        return None
    table = _read_parquet(path, "candidates", ["query_id", "candidate_ids"])
    columns = [pl.col("query_id").cast(pl.String), pl.col("candidate_ids")]
    if "candidate_groups" in table.columns:
        columns.append(pl.col("candidate_groups"))
    return table.select(columns)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vlbench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    score = commands.add_parser(
        "score",
        help="metrics from precomputed query and gallery embeddings (see docs/score.md)",
    )
    score.add_argument("--protocol", required=True, choices=sorted(PROTOCOL_DIRECTIONS))
    score.add_argument("--queries", required=True, help="query embeddings (.npy, rows)")
    score.add_argument("--query-ids", required=True, help="parquet: id[, group] per query row")
    score.add_argument("--gallery", required=True, help="gallery embeddings (.npy, rows)")
    score.add_argument("--gallery-ids", required=True, help="parquet: id[, group] per row")
    score.add_argument("--qrels", help="parquet: query_id, item_id[, relevance]")
    score.add_argument("--candidates", help="parquet: query_id, candidate_ids[, candidate_groups]")
    score.add_argument("--k", type=int, nargs="+", default=[1, 5, 10], help="cut-offs")
    score.add_argument("--tie-policy", default="index", choices=TIE_POLICIES)
    score.add_argument("--block-mb", type=int, default=1024, help="score block bound (MiB)")
    score.add_argument("--direction", default=None, help="label (default: the protocol's)")
    score.add_argument("--benchmark", default="custom", help="label for the benchmark column")
    score.add_argument("--subset", default="test", help="label for the subset column")
    score.add_argument("--model", default="model", help="label for the model column")
    score.add_argument("--confidence", type=float, default=0.95)
    score.add_argument("--bootstrap-samples", type=int, default=1000)
    score.add_argument("--seed", type=int, default=0)
    score.add_argument("--notebook-columns", action="store_true", help="add BioMedFlickr names")
    score.add_argument("--out", required=True, help="metric CSV to write")
    score.add_argument("--ranks-out", help="also write the per-pair ranks parquet")
    score.add_argument("--outcomes-out", help="also write the per-query outcomes parquet")
    score.add_argument("--per-class-out", help="zeroshot: also write the per-class CSV")
    return parser


def run_score(args: argparse.Namespace) -> int:
    """Rank, score and write; returns the number of metric rows."""
    if args.block_mb < 1 or any(k < 1 for k in args.k):
        raise VlbenchError("--block-mb and every --k must be at least 1")
    queries = read_side(args.queries, args.query_ids, "queries")
    gallery = read_side(args.gallery, args.gallery_ids, "gallery")
    ranks = rank_protocol(
        args.protocol,
        queries,
        gallery,
        read_judgements(args.qrels),
        read_candidate_lists(args.candidates),
        tie_policy=args.tie_policy,
        block_mb=args.block_mb,
    )
    labels = {
        "benchmark": args.benchmark,
        "subset": args.subset,
        "model": args.model,
        "direction": args.direction or PROTOCOL_DIRECTIONS[args.protocol][0],
    }
    settings = StatsSettings(
        confidence=args.confidence, bootstrap_samples=args.bootstrap_samples, seed=args.seed
    )
    rows, outcomes = score_ranks(
        ranks, args.protocol, args.k, labels, args.tie_policy, settings, args.notebook_columns
    )
    write_csv(rows, args.out)
    if args.ranks_out:
        ranks.write_parquet(args.ranks_out)
    if args.outcomes_out:
        outcomes.write_parquet(args.outcomes_out)
    if args.per_class_out and args.protocol == "zeroshot":
        keys = ("benchmark", "subset", "model")
        write_csv(per_class_table(ranks, **{k: labels[k] for k in keys}), args.per_class_out)
    return rows.height


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vlbench` command."""
    args = build_parser().parse_args(argv)
    try:
        rows = run_score(args)
    except VlbenchError as error:
        print(f"vlbench error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {rows} metric rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
