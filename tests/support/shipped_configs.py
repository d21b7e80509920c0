"""Run a shipped config as shipped, on small copies of its sources in their real layouts.

What stays as shipped: every model key, every benchmark key and all of its options (protocol,
source repository and revision, format, subset, files, columns, text type, k, ...), data_root's
relative paths and the reference map. What changes, and why:

- each model becomes a tiny open_clip architecture whose seeded random weights the test saves as
  a local checkpoint in open_clip's format (hub weights cannot be downloaded here, and the big
  architectures would take minutes per image on 2 cores);
- every hub repository is served by a loopback hub on 127.0.0.1 at the commit the config pins
  (or, unpinned, pinned on first use into the config's lock file as a user's first run does),
  holding a miniature in the repository's real layout (tests/support/fixtures_sources.py);
- every folder under `data_root` is made by `vlbench import` from a miniature in its
  publisher's layout (tests/support/fixtures_publishers.py), or written in the Karpathy layout;
- every reference annotation file (`source.reference`) is served by the same loopback server's
  GitHub raw route at the pinned repository, commit and path, made from the miniature the
  benchmark reads its images from (hub repository or data_root folder) in the reference's real
  layout (tests/support/fixtures_sources.py; for NABirds and Meta-Album, the metadata.csv
  `vlbench import` wrote, which is BioCAP's layout); its `sha256` becomes the miniature's (the
  pinned one is the full file's);
- `expected` row counts are dropped: they are the full datasets' counts;
- the run asks for the paper tables and their coverage (every job they need), not for the
  per-benchmark plots, provenance pages and examples, which the demo's run covers;
- the embedding work is one job (`embedding.jobs: single`, a job-shape key whose results are
  byte-identical, tests/end_to_end/test_embed_workflow.py): importing torch and open_clip costs
  every embedding job seconds, which 126 (model, benchmark) jobs of biocap.yaml would pay 126
  times.

Zero-shot miniatures hold six images per class, except where the real data is smaller: IDLE-OO
island's 'domestic chicken' and 'petrel chick' have one image each (so its five-shot is not
computable, as on the real data) and one Rare Species species has fewer images than the others.
"""

from __future__ import annotations

import gc
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from fixtures_publishers import (
    CORNELL,
    PLANTID,
    write_meta_album,
    write_nabirds,
    write_retrieval,
)
from fixtures_sources import (
    IDLE_SUBSETS,
    rare_species_reference,
    write_biovita_repo,
    write_biovita_t2i_repo,
    write_idle_oo_repo,
    write_inquire_repo,
    write_karpathy,
    write_nlphuji_repo,
    write_rare_species_repo,
    write_wds_repo,
)
from loopback_hub import LoopbackHub, client_environment
from scipy import stats
from statsmodels.stats.multitest import multipletests
from workflow_helpers import REPO, TINY_MODEL_CONFIG, snakemake_command

from vlbench.data.importers.biocap_retrieval import import_retrieval
from vlbench.data.importers.meta_album import import_meta_album
from vlbench.data.importers.nabirds import import_nabirds
from vlbench.data.synthetic import write_synthetic_biomedflickr

CONFIG_DIR = REPO / "config"
SHIPPED_CONFIGS = ("config", "biomedflickr", "biovita", "biocap", "retrieval-classic")


def _nlphuji_coco(root: Path) -> object:
    return write_nlphuji_repo(root, 4, "test_5k_mscoco_2014.csv", "images_mscoco_2014_5k_test.zip")


# Hub dataset repository -> the writer of its miniature (real file names, columns, card).
HUB_FIXTURES: dict[str, Callable[[Path], object]] = {
    "Alejandro98/BioMedFlickr": lambda root: write_synthetic_biomedflickr(root, 12, 3),
    "myang333/BioVITAI2TRetrieval": lambda root: write_biovita_repo(root, n_queries=6),
    "myang333/BioVITAT2IRetrieval": lambda root: write_biovita_t2i_repo(root, n_queries=6),
    # One species short of the others, as five of the real 400 are.
    "imageomics/rare-species": lambda root: write_rare_species_repo(root, 6, sizes={2: 5}),
    "imageomics/IDLE-OO-Camera-Traps": lambda root: write_idle_oo_repo(root, 6, island_shape=True),
    # One query per supercategory, so every INQUIRE column of BioCAP Table 2 has a value.
    "evendrow/INQUIRE-Rerank": lambda root: write_inquire_repo(root, n_queries=4, per_query=6),
    "nlphuji/flickr_1k_test_image_text_retrieval": lambda root: write_nlphuji_repo(root, 4),
    "nlphuji/mscoco_2014_5k_test_image_text_retrieval": _nlphuji_coco,
    "clip-benchmark/wds_flickr30k": lambda root: write_wds_repo(root, 4, per_shard=2),
    "clip-benchmark/wds_mscoco_captions": lambda root: write_wds_repo(root, 4, per_shard=3),
}


def _rare_species_reference(hub_folder: Path) -> bytes:
    import csv

    with open(hub_folder / "metadata.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))[1:]
    return rare_species_reference(rows)


def _imported_metadata(folder: Path) -> bytes:
    return (folder / "metadata.csv").read_bytes()


# (GitHub repository, path) of a reference annotation file -> its miniature, made from the
# miniature of the hub repository or data_root folder the benchmark reads its images from.
REFERENCE_FIXTURES: dict[tuple[str, str], Callable[[Path], bytes]] = {
    (
        "Imageomics/biocap",
        "data/classification_annotation/rare_species/metadata.csv",
    ): _rare_species_reference,
    **{
        (
            "Imageomics/biocap",
            f"data/classification_annotation/camera_trap/{subset}-balanced.csv",
        ): (lambda hub_folder, subset=subset: (hub_folder / f"{subset}-balanced.csv").read_bytes())
        for subset in IDLE_SUBSETS
    },
    ("Imageomics/biocap", "data/classification_annotation/nabirds/metadata.csv"): (
        _imported_metadata
    ),
    **{
        (
            "Imageomics/biocap",
            f"data/classification_annotation/meta-album/{code}_Mini/metadata.csv",
        ): (_imported_metadata)
        for code in ("PLK", "INS", "INS_2", "PLT_NET", "FNG", "PLT_VIL", "MED_LF")
    },
}


def _meta_album(code: str) -> Callable[[Path, Path], object]:
    def build(scratch: Path, dest: Path) -> object:
        return import_meta_album(write_meta_album(scratch, name=f"{code}_Mini", per_class=6), dest)

    return build


def _biocap_retrieval(name: str, csv_name: str, items: list) -> Callable[[Path, Path], object]:
    def build(scratch: Path, dest: Path) -> object:
        images = write_retrieval(scratch, csv_name, items)
        return import_retrieval(
            name, images, dest, annotations=scratch / csv_name, allow_other_annotations=True
        )

    return build


# Folder under data_root (as the shipped configs name it) -> how it is made from the
# publisher's layout (scratch folder, destination).
LOCAL_FIXTURES: dict[str, Callable[[Path, Path], object]] = {
    "nabirds": lambda scratch, dest: import_nabirds(write_nabirds(scratch, per_class=6), dest),
    **{
        f"meta-album/{code}": _meta_album(code)
        for code in ("PLK", "INS", "INS_2", "PLT_NET", "FNG", "PLT_VIL", "MED_LF")
    },
    "cornell-bird": _biocap_retrieval("cornell-bird", "cornell_bird.csv", CORNELL),
    "plantid": _biocap_retrieval("plantid", "plantID.csv", PLANTID),
    "flickr30k": lambda scratch, dest: write_karpathy(
        dest, {"train": 2, "val": 1, "test": 3}, images_dir="flickr30k-images"
    ),
    "coco": lambda scratch, dest: write_karpathy(
        dest, {"train": 2, "val": 1, "test": 3}, coco=True, images_dir="."
    ),
}
DATA_ROOT_PREFIX = "{data_root}/"
# What a run of a shipped config is asked for: the paper tables and their coverage lines.
TARGETS = (
    "results/tables/coverage.md",
    "results/tables/metrics.csv",
    "results/mteb",
    "results/clip_benchmark",
)


def shipped(name: str) -> dict[str, Any]:
    """A shipped config file as its YAML reads."""
    return yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text(encoding="utf-8"))


def tiny_checkpoints(keys: list[str], folder: Path) -> dict[str, dict[str, Any]]:
    """A tiny open_clip model spec per key, each with its own seeded checkpoint file."""
    from vlbench.embedding.models import write_random_checkpoint

    specs = {}
    for seed, key in enumerate(keys):
        path = folder / f"{key}.pt"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            write_random_checkpoint("vlbench-tiny", str(TINY_MODEL_CONFIG), seed, path)
        specs[key] = {
            "name": "vlbench-tiny",
            "model_config": str(TINY_MODEL_CONFIG),
            "pretrained": str(path),
        }
    return specs


def as_tested(
    config: dict[str, Any], checkpoints: Path, references: dict[str, str] | None = None
) -> dict[str, Any]:
    """The shipped config with tiny seeded checkpoints under the same model keys, no
    `expected` counts, and each reference file's sha256 that of its miniature
    (`references`: benchmark key -> sha256)."""
    tested = dict(config)
    tested["models"] = tiny_checkpoints(list(config["models"]), checkpoints)
    tested["benchmarks"] = {}
    for key, spec in config["benchmarks"].items():
        source = {k: v for k, v in spec["source"].items() if k != "expected"}
        if "reference" in source:
            source["reference"] = {**source["reference"], "sha256": (references or {})[key]}
        tested["benchmarks"][key] = {**spec, "source": source}
    return tested


def hub_repos(config: dict[str, Any]) -> dict[str, str | None]:
    """Every hub dataset repository the config reads, with its pinned revision (None: unpinned)."""
    repos: dict[str, str | None] = {}
    for spec in config["benchmarks"].values():
        source = spec["source"]
        if "repo" in source:
            repos[source["repo"]] = source.get("revision")
    return repos


def local_folders(config: dict[str, Any]) -> list[str]:
    """The folders under data_root the config reads."""
    return sorted(
        spec["source"]["path"].removeprefix(DATA_ROOT_PREFIX)
        for spec in config["benchmarks"].values()
        if str(spec["source"].get("path", "")).startswith(DATA_ROOT_PREFIX)
    )


def publish(
    hub: LoopbackHub, config: dict[str, Any], scratch: Path, data_root: Path
) -> dict[str, str]:
    """Serve a miniature of each of the config's hub repositories, at its pinned commit, and of
    each reference annotation file (made from the hub miniatures and the data_root folders,
    which must exist); returns each reference's sha256 by benchmark key."""
    import hashlib

    for repo, revision in hub_repos(config).items():
        folder = scratch / "hub" / repo
        if not folder.exists():
            HUB_FIXTURES[repo](folder)
        hub.commit_folder("dataset", repo, folder, sha=revision)
    digests = {}
    for key, spec in config["benchmarks"].items():
        reference = spec["source"].get("reference")
        if reference is None:
            continue
        source = spec["source"]
        folder = (
            scratch / "hub" / source["repo"]
            if "repo" in source
            else data_root / source["path"].removeprefix(DATA_ROOT_PREFIX)
        )
        data = REFERENCE_FIXTURES[(reference["repo"], reference["path"])](folder)
        hub.publish_github(reference["repo"], reference["commit"], reference["path"], data)
        digests[key] = hashlib.sha256(data).hexdigest()
    return digests


def make_data_root(config: dict[str, Any], data_root: Path, scratch: Path) -> None:
    """Make every folder under data_root that the config reads, from its publisher's layout."""
    for folder in local_folders(config):
        dest = data_root / folder
        if not dest.exists():
            LOCAL_FIXTURES[folder](scratch / "publishers" / folder, dest)


def run_shipped(
    name: str, workdir: Path, hub: LoopbackHub, *extra: str
) -> subprocess.CompletedProcess:
    """Run shipped config `name` (as tested) in `workdir` against `hub`; returns the process."""
    config = shipped(name)
    scratch = workdir / "fixtures"
    make_data_root(config, scratch / "data", scratch)
    references = publish(hub, config, scratch, scratch / "data")
    configfile = workdir / f"{name}.yaml"
    tested = as_tested(config, scratch / "checkpoints", references)
    configfile.write_text(yaml.safe_dump(tested, sort_keys=False), encoding="utf-8")
    command = snakemake_command(
        workdir,
        *(extra or TARGETS),
        configfile=configfile,
        config=[f"data_root={scratch / 'data'}", "embedding={jobs: single}"],
    )
    env = {**os.environ, **client_environment(hub, workdir / "hf-home")}
    return subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=env)


# The paper tables each shipped config feeds (README: "Which config feeds which table").
TABLES = {
    "config": {"biomedflickr"},
    "biomedflickr": {"biomedflickr"},
    "biovita": {"biovita-unseen"},
    "biocap": {"biocap-table1", "biocap-table2", "bioclip2-zeroshot", "bioclip-fewshot"},
    "retrieval-classic": {"openclip-retrieval", "clip-paper-table13"},
}


def paper_tables(workdir: Path) -> dict[str, dict[str, Any]]:
    """Each paper table's coverage record, by table."""
    import json

    folder = workdir / "results" / "tables" / "paper"
    return {
        path.name.removesuffix(".coverage.json"): json.loads(path.read_text(encoding="utf-8"))
        for path in folder.glob("*.coverage.json")
    }


def table_rows(workdir: Path, table: str) -> list[dict[str, str]]:
    """The rows of a paper table's CSV."""
    import csv

    path = workdir / "results" / "tables" / "paper" / f"{table}.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def run_against_a_loopback_hub(
    name: str, workdir: Path, *extra: str
) -> subprocess.CompletedProcess:
    """`run_shipped` with a loopback hub of its own, stopped afterwards."""
    hub = LoopbackHub()
    try:
        return run_shipped(name, workdir, hub, *extra)
    finally:
        hub.stop()


def check_every_cell_filled(
    workdir: Path,
    result: subprocess.CompletedProcess,
    name: str,
    also_allowed: dict[str, set[str]] | None = None,
) -> dict[str, dict[str, Any]]:
    """The run succeeded, made exactly the config's paper tables, and every cell of every
    configured model's row is filled or says why it cannot be computed; a published cell stays
    empty only because no config can reproduce its row (or for a reason `also_allowed` names
    for that table). Returns the tables' coverage records."""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    tables = paper_tables(workdir)
    assert set(tables) == TABLES[name]
    models = set(shipped(name)["models"])
    for table, coverage in tables.items():
        filled = coverage["our_filled"] + coverage["our_not_computable"]
        assert coverage["our_cells"] > 0 and filled == coverage["our_cells"], table
        keys = {row["model_key"] for row in table_rows(workdir, table) if row["model_key"]}
        assert keys == models, table
        allowed = {"not reproducible"} | (also_allowed or {}).get(table, set())
        assert set(coverage["reasons"]) <= allowed, coverage["line"]
    return tables


def check_standings(workdir: Path) -> pl.DataFrame:
    """Every column's standings in a finished run against an independent computation: ranks
    are scipy's ranking of the values, the Holm-corrected p-values and the tied-with-best set
    statsmodels' from the file's one-sided p-values, each rank lies in its interval, and
    metrics_full.csv carries the same standing. Returns the standings."""
    tables = workdir / "results" / "tables"
    standings = pl.read_csv(tables / "standings.csv", schema_overrides={"k": pl.Int64})
    assert standings.height
    with pytest.MonkeyPatch.context() as patch:
        # statsmodels' Holm branch calls gc.collect() on every call: in a test process's large
        # heap about 0.7 s a column, over 100 s for a shipped config's columns.
        patch.setattr(gc, "collect", lambda generation=2: 0)
        _check_columns(standings)
    full = pl.read_csv(tables / "metrics_full.csv", schema_overrides={"k": pl.Int64})
    keys = ["benchmark", "subset", "direction", "metric", "k", "model"]
    joined = full.join(standings, on=keys, nulls_equal=True, suffix="_standings")
    assert joined.height == standings.height
    assert (joined["rank"] == joined["rank_standings"]).all()
    assert (joined["tied_with_best"] == joined["tied_with_best_standings"]).all()
    return standings


def _check_columns(standings: pl.DataFrame) -> None:
    """Each column's ranks (scipy), Holm p-values and tied-with-best set (statsmodels)."""
    for _, column in standings.group_by(["benchmark", "subset", "direction", "metric", "k"]):
        sign = -1.0 if column["metric"][0] == "mean_rank" else 1.0
        values = column["value"].to_numpy()
        assert column["rank"].to_list() == stats.rankdata(-sign * values, method="min").tolist()
        assert column["n_models"].to_list() == [column.height] * column.height
        assert column.filter(pl.col("p_worse").is_null())["model"].to_list() == [
            column["best_model"][0]
        ]
        others = column.filter(pl.col("p_worse").is_not_null())
        if others.height:
            reject, corrected, _, _ = multipletests(others["p_worse"].to_numpy(), 0.05, "holm")
            assert others["p_holm"].to_numpy() == pytest.approx(corrected)
            assert others["tied_with_best"].to_list() == (~reject).tolist()
        assert (column["rank_low"] <= column["rank"]).all()
        assert (column["rank"] <= column["rank_high"]).all()
