"""Our BioVITA results as mteb result files, for local comparison with mteb's own results.

mteb (2.26.24) has BioVITA as two tasks, `BioVITAI2TReranking` and `BioVITAT2IReranking`, whose
datasets are the hub repositories our BioVITA benchmarks read, each with the subsets
`unseen_species` and `unseen_genus` (`mteb/tasks/reranking/eng/biovita.py`: dataset path and
revision, eval_langs, main_score `taxon_top_1_accuracy`). One file per (model, task) is written in
the layout of mteb's result cache, `<cache>/results/<org>__<model>/<revision>/<Task>.json` (with
`model_meta.json` beside it, `mteb/cache/result_cache.py`), so that
`mteb.ResultCache(cache_path="results/mteb").load_results(include_remote=False)` reads them.

What the files are: vlbench's taxon top-k accuracies (fractions, as mteb writes them) under mteb's
score names, one entry per configured subset. Our scorer max-pools every candidate taxon, which
is mteb's taxon max-pooling without its truncation of each query's results to the top documents
before pooling (vlbench/docs: PROTOCOLS); `mteb_version` is null (mteb did not compute them) and
each score entry names vlbench's version and scorer. They are not a leaderboard submission: that
needs the model in mteb's registry and a run of mteb itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from vlbench import __version__

# Hub repository of a BioVITA benchmark's source -> (mteb task, the direction it evaluates).
# Source: mteb 2.26.24 (PyPI), mteb/tasks/reranking/eng/biovita.py, BioVITAI2TReranking and
# BioVITAT2IReranking (dataset "path"; category i2t / t2i).
MTEB_TASKS = {
    "myang333/BioVITAI2TRetrieval": ("BioVITAI2TReranking", "image_to_text"),
    "myang333/BioVITAT2IRetrieval": ("BioVITAT2IReranking", "text_to_image"),
}
TASK_LANGUAGES = ["eng-Latn"]  # eval_langs of both tasks, per subset
TAXON_METRIC = "taxon_top_k_accuracy"
MAIN_SCORE = "taxon_top_1_accuracy"
NO_REVISION = "no_revision_available"  # mteb's folder name for a model without a revision
SCORER = (
    "vlbench taxon top-k accuracy: each candidate taxon scores the max similarity over all of "
    "its entries (no truncation before pooling), ties in candidate order"
)


def mteb_model(model_key: str, spec: Mapping[str, Any]) -> tuple[str, str]:
    """The (name, revision) mteb files a model under: its hub id and commit for a hub model,
    else our model key (and mteb's no-revision folder)."""
    name = str(spec.get("name", ""))
    if name.startswith("hf-hub:"):
        return name.removeprefix("hf-hub:"), str(spec.get("revision") or NO_REVISION)
    return model_key, NO_REVISION


def mteb_task_files(
    metrics: pl.DataFrame,
    benchmarks: Mapping[str, Mapping[str, Any]],
    models: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Path under the cache folder -> JSON record, for every (model, mteb task) with results.

    `benchmarks`: each benchmark's prepared metadata (benchmark.json: repo, revision, subset);
    `models`: each model's configured spec (name, revision).
    """
    files: dict[str, dict[str, Any]] = {}
    for benchmark, meta in sorted(benchmarks.items()):
        task = MTEB_TASKS.get(str(meta.get("repo")))
        if task is None:
            continue
        task_name, direction = task
        rows = metrics.filter(
            (pl.col("benchmark") == benchmark)
            & (pl.col("direction") == direction)
            & (pl.col("metric") == TAXON_METRIC)
            & (pl.col("subset") == meta["subset"])
            & pl.col("value").is_not_null()
        )
        for model in sorted(set(rows["model"].to_list())):
            name, revision = mteb_model(model, models.get(model, {}))
            folder = f"results/{name.replace('/', '__').replace(' ', '_')}/{revision}"
            scores = {
                f"taxon_top_{row['k']}_accuracy": row["value"] / 100.0
                for row in rows.filter(pl.col("model") == model).iter_rows(named=True)
            }
            if MAIN_SCORE not in scores:
                continue
            record = files.setdefault(
                f"{folder}/{task_name}.json",
                {
                    "dataset_revision": meta["revision"],
                    "task_name": task_name,
                    "mteb_version": None,
                    "scores": {"test": []},
                    "evaluation_time": None,
                    "kg_co2_emissions": None,
                    "written_by": f"vlbench {__version__}",
                },
            )
            if record["dataset_revision"] != meta["revision"]:
                raise ValueError(
                    f"{task_name}: benchmarks of model {model!r} read different revisions "
                    f"({record['dataset_revision']} and {meta['revision']})"
                )
            if any(entry["hf_subset"] == meta["subset"] for entry in record["scores"]["test"]):
                raise ValueError(
                    f"{task_name}: two benchmarks hold subset {meta['subset']!r} for model "
                    f"{model!r} (the second is {benchmark!r}); configure one of them"
                )
            record["scores"]["test"].append(
                {
                    "hf_subset": meta["subset"],
                    "languages": TASK_LANGUAGES,
                    "main_score": scores[MAIN_SCORE],
                    **dict(sorted(scores.items())),
                    "vlbench_benchmark": benchmark,
                    "scorer": SCORER,
                }
            )
            files[f"{folder}/model_meta.json"] = {
                "name": name,
                "revision": revision,
                "vlbench_model": model,
            }
    return files
