"""The `vlbench` command line: `vlbench score` evaluates precomputed embeddings.

The file formats are documented in docs/score.md. `vlbench lock CONFIG` pins every hub
download of a config in its lock file (vlbench.planning.lock_command); `vlbench preflight CONFIG`
prints the state of every model and benchmark (vlbench.planning.preflight_command);
`vlbench import <dataset> SRC DEST` turns a dataset as its publisher distributes it into the
folder a config reads (vlbench.data.importers); `vlbench clean MODEL [BENCHMARK]` removes a
model's stored embeddings and what was made from them (vlbench.planning.clean_command).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl

from vlbench.atomic import is_no_space, no_space_error
from vlbench.config import fewshot_defaults, schema_defaults
from vlbench.errors import VlbenchError
from vlbench.metrics.fewshot import SHUFFLES
from vlbench.metrics.fewshot_job import score_fewshot
from vlbench.metrics.job import score_ranks, write_csv
from vlbench.metrics.rows import StatsSettings, per_class_table
from vlbench.metrics.score_inputs import read_candidate_lists, read_judgements, read_side
from vlbench.protocols import PROTOCOLS, Protocol
from vlbench.rank.exact import TIE_POLICIES
from vlbench.rank.protocol_ranks import Side, rank_protocol

STDOUT = "-"
# Integer options must fit the int64 arithmetic they end up in.
INT64_MAX = 2**63 - 1


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not minimum <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(
            f"must be between {minimum} and {INT64_MAX}, got {text}"
            if value > INT64_MAX
            else f"must be at least {minimum}, got {text}"
        )
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 that fits int64."""
    return _integer(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 that fits int64."""
    return _integer(text, 0)


def probability(text: str) -> float:
    """argparse type: a float strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text}")
    return value


def output_file(text: str) -> str:
    """argparse type: a file path to write (or '-' for stdout where the option allows it)."""
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    if text != STDOUT and Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vlbench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    score = commands.add_parser(
        "score",
        help="metrics from precomputed query and gallery embeddings (see docs/score.md)",
    )
    score.add_argument("--protocol", required=True, choices=sorted(PROTOCOLS))
    score.add_argument("--queries", required=True, help="query embeddings (.npy, rows)")
    score.add_argument("--query-ids", required=True, help="parquet: id[, group] per query row")
    score.add_argument(
        "--gallery", help="gallery embeddings (.npy, rows); may be left out with --shots"
    )
    score.add_argument("--gallery-ids", help="parquet: id[, group] per gallery row")
    score.add_argument("--qrels", help="parquet: query_id, item_id[, relevance]")
    score.add_argument("--candidates", help="parquet: query_id, candidate_ids[, candidate_groups]")
    score.add_argument("--k", type=positive_int, nargs="+", default=[1, 5, 10], help="cut-offs")
    # Defaults of the options that are also config keys come from the config schema.
    ranking, metrics = schema_defaults("ranking"), schema_defaults("metrics")
    score.add_argument("--tie-policy", default=ranking["tie_policy"], choices=TIE_POLICIES)
    score.add_argument(
        "--block-mb", type=positive_int, default=ranking["block_mb"], help="score block (MiB)"
    )
    score.add_argument(
        "--direction",
        default=None,
        help="image_to_text or text_to_image; needed where the protocol has both",
    )
    score.add_argument("--benchmark", default="custom", help="label for the benchmark column")
    score.add_argument("--subset", default="test", help="label for the subset column")
    score.add_argument("--model", default="model", help="label for the model column")
    score.add_argument(
        "--confidence", type=probability, default=metrics["confidence"], help="in (0, 1)"
    )
    score.add_argument(
        "--bootstrap-samples", type=non_negative_int, default=metrics["bootstrap_samples"]
    )
    score.add_argument("--seed", type=non_negative_int, default=metrics["seed"])
    score.add_argument("--notebook-columns", action="store_true", help="add BioMedFlickr names")
    fewshot = fewshot_defaults()
    score.add_argument(
        "--shots",
        type=positive_int,
        nargs="+",
        help="also few-shot accuracy (BioCLIP's) of the query images by their group, for these "
        f"k, in order (the config's default: {' '.join(map(str, fewshot['shots']))})",
    )
    score.add_argument(
        "--folds", type=positive_int, default=fewshot["folds"], help="few-shot folds per k"
    )
    score.add_argument("--shuffle", default=fewshot["shuffle"], choices=SHUFFLES)
    score.add_argument(
        "--out", required=True, type=output_file, help="metric CSV to write ('-': stdout)"
    )
    score.add_argument(
        "--ranks-out", type=output_file, help="also write the per-pair ranks parquet"
    )
    score.add_argument(
        "--outcomes-out", type=output_file, help="also write the per-query outcomes parquet"
    )
    score.add_argument(
        "--per-class-out", type=output_file, help="zeroshot: also write the per-class CSV"
    )
    lock = commands.add_parser(
        "lock",
        help="pin every unpinned hub download of a config in its lock file (x.yaml -> x.lock)",
    )
    lock.add_argument("config", help="the config file (YAML)")
    lock.add_argument(
        "--update", action="store_true", help="move locked entries to their branch's commit now"
    )
    lock.add_argument(
        "--check",
        action="store_true",
        help="ask no hub; fail if a download is pinned neither in the config nor in the lock",
    )
    check = commands.add_parser(
        "preflight",
        help="table of every model and benchmark of a config: pinned, locked, present or missing",
    )
    check.add_argument("config", help="the config file (YAML)")
    check.add_argument("--data-root", help="override the config's data_root")
    check.add_argument(
        "--config",
        dest="overrides",
        nargs="+",
        metavar="KEY=VALUE",
        help="settings for this run, as snakemake --config (dotted keys set nested ones)",
    )
    clean = commands.add_parser(
        "clean",
        help="remove a model's stored embeddings (of one benchmark, or all) and the index, "
        "ranks and metrics made from them, so that the next run makes them again",
    )
    clean.add_argument("model", help="the model key")
    clean.add_argument("benchmark", nargs="?", help="the benchmark key (default: every one)")
    clean.add_argument("--results", default="results", help="the results folder (default: results)")
    add_import_parser(commands)
    return parser


def add_import_parser(commands: argparse._SubParsersAction) -> None:
    """`vlbench import <dataset> SRC DEST [options]`, one sub-command per importer."""
    from vlbench.data.importers import COMMON_OPTIONS, IMPORTERS

    imports = commands.add_parser(
        "import",
        help="turn a dataset as its publisher distributes it into the folder a config reads",
    )
    datasets = imports.add_subparsers(dest="dataset", required=True, metavar="DATASET")
    for importer in IMPORTERS.values():
        sub = datasets.add_parser(importer.name, help=f"{importer.dataset}; from {importer.get}")
        sub.add_argument("src", metavar="SRC", help=importer.src)
        sub.add_argument("dest", metavar="DEST", help="the folder to write (the config's path)")
        for option in (*importer.options, *COMMON_OPTIONS):
            if option.value is None:
                sub.add_argument(option.flag, action="store_true", help=option.help)
            else:
                sub.add_argument(
                    option.flag, required=option.required, metavar="PATH", help=option.help
                )


def run_import(args: argparse.Namespace) -> int:
    """Run one importer; print its summary, or a one-line error (exit code 1)."""
    from vlbench.data.importers import COMMON_OPTIONS, IMPORTERS

    importer = IMPORTERS[args.dataset]
    options = {o.dest: getattr(args, o.dest) for o in (*importer.options, *COMMON_OPTIONS)}
    try:
        result = importer.run(Path(args.src), Path(args.dest), **options)
    except VlbenchError as error:
        print(f"vlbench error: {error}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0


def _write(option: str, path: str, write: Callable[[str], None]) -> None:
    """Write one output, turning an OS error into a one-line error naming the option."""
    try:
        write(path)
    except Exception as exc:
        if is_no_space(exc):
            raise no_space_error(f"{option} {path}", None, exc) from exc
        if not isinstance(exc, OSError):
            raise
        where = f": {exc.filename}" if exc.filename and str(exc.filename) != path else ""
        raise VlbenchError(f"{option} {path}: cannot write ({exc.strerror or exc}{where})") from exc


def _check_score_inputs(args: argparse.Namespace, protocol: Protocol) -> bool:
    """Refuse option combinations that cannot run; return whether a gallery is given."""
    for option in ("ranks_out", "outcomes_out", "per_class_out"):
        if getattr(args, option) == STDOUT:
            raise VlbenchError(f"--{option.replace('_', '-')}: only --out can be '-' (stdout)")
    if args.shots is not None and not protocol.fewshot:
        allowed = ", ".join(name for name, record in PROTOCOLS.items() if record.fewshot)
        raise VlbenchError(f"--shots: few-shot needs images with classes (protocol {allowed})")
    if (args.gallery is None) != (args.gallery_ids is None):
        raise VlbenchError("--gallery and --gallery-ids go together")
    if args.gallery is None:
        if args.shots is None:
            raise VlbenchError(
                "--gallery and --gallery-ids are required (only --shots runs without them)"
            )
        for option in ("ranks_out", "outcomes_out", "per_class_out"):
            if getattr(args, option):
                raise VlbenchError(f"--{option.replace('_', '-')} needs --gallery")
    directions = protocol.all_directions
    if args.gallery is not None and args.direction is None and len(directions) > 1:
        raise VlbenchError(
            f"--direction is needed for protocol {protocol.name}: its queries may be images "
            f"or texts ({' or '.join(directions)}), and the direction labels the rows"
        )
    return args.gallery is not None


def _ranked_rows(
    args: argparse.Namespace, protocol: Protocol, queries: Side, labels: dict[str, str]
) -> pl.DataFrame:
    """Rank the queries against the gallery; write the optional outputs; return metric rows."""
    gallery = read_side(args.gallery, args.gallery_ids, "gallery")
    ranks = rank_protocol(
        protocol,
        queries,
        gallery,
        read_judgements(args.qrels, labels["direction"]),
        read_candidate_lists(args.candidates, labels["direction"]),
        tie_policy=args.tie_policy,
        block_mb=args.block_mb,
    )
    settings = StatsSettings.from_config(
        {
            "confidence": args.confidence,
            "bootstrap_samples": args.bootstrap_samples,
            "seed": args.seed,
        }
    )
    rows, outcomes = score_ranks(
        ranks, protocol, args.k, labels, args.tie_policy, settings, args.notebook_columns
    )
    if args.ranks_out:
        _write("--ranks-out", args.ranks_out, ranks.write_parquet)
    if args.outcomes_out:
        _write("--outcomes-out", args.outcomes_out, outcomes.write_parquet)
    if args.per_class_out and protocol.per_class:
        keys = ("benchmark", "subset", "model")
        per_class = per_class_table(ranks, **{k: labels[k] for k in keys})
        _write("--per-class-out", args.per_class_out, lambda path: write_csv(per_class, path))
    return rows


def run_score(args: argparse.Namespace) -> int:
    """Rank, score and write; returns the number of metric rows."""
    protocol = PROTOCOLS[args.protocol]  # one of the parser's choices
    with_gallery = _check_score_inputs(args, protocol)
    labels = {
        "benchmark": args.benchmark,
        "subset": args.subset,
        "model": args.model,
        "direction": args.direction or protocol.directions[0],
    }
    queries = read_side(args.queries, args.query_ids, "queries")
    parts = [_ranked_rows(args, protocol, queries, labels)] if with_gallery else []
    if args.shots is not None:
        settings = {"shots": args.shots, "folds": args.folds, "shuffle": args.shuffle}
        keys = ("benchmark", "subset", "model")
        parts.append(
            score_fewshot(
                queries.vectors,
                list(queries.require_groups("few-shot (--shots)")),
                settings,
                {key: labels[key] for key in keys},
                args.confidence,
            )
        )
    rows = pl.concat(parts, how="diagonal_relaxed")
    if args.out == STDOUT:
        rows.write_csv(sys.stdout)
        sys.stdout.flush()
    else:
        _write("--out", args.out, lambda path: write_csv(rows, path))
    return rows.height


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vlbench` command."""
    args = build_parser().parse_args(argv)
    if args.command == "lock":
        from vlbench.planning.lock_command import run_lock

        return run_lock(args.config, update=args.update, check=args.check)
    if args.command == "preflight":
        from vlbench.planning.preflight_command import run_preflight

        return run_preflight(args.config, args.data_root, args.overrides)
    if args.command == "import":
        return run_import(args)
    if args.command == "clean":
        from vlbench.planning.clean_command import run_clean

        return run_clean(args.model, args.benchmark, args.results)
    try:
        rows = run_score(args)
    except VlbenchError as error:
        print(f"vlbench error: {error}", file=sys.stderr)
        return 1
    except MemoryError as error:
        print(
            f"vlbench error: out of memory ({error or 'MemoryError'}); lower --bootstrap-samples "
            "or --block-mb",
            file=sys.stderr,
        )
        return 1
    if args.out == STDOUT:  # stdout holds the CSV: the summary goes to stderr
        print(f"wrote {rows} metric rows to stdout", file=sys.stderr)
    else:
        print(f"wrote {rows} metric rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
