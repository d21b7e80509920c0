"""Our retrieval and zero-shot results as clip_benchmark result files, one per (model, benchmark),
so that `clip_benchmark build` merges them with a user's own clip_benchmark runs.

The record is the one `clip_benchmark eval` dumps (clip_benchmark 1.6.2, clip_benchmark/cli.py
L405-420: dataset, model, pretrained, task, metrics, language), with fractions (0..1) under its
metric names:

- zeroshot_retrieval (paired benchmarks): `image_retrieval_recall@k` is the text -> image hit
  rate (a caption finds its image in the top k) and `text_retrieval_recall@k` the image -> text
  one (any of an image's captions in its top k), clip_benchmark/metrics/zeroshot_retrieval.py
  L66-83; ours are the `recall` rows of the two directions;
- zeroshot_classification: `acc1`, `acc5` and `mean_per_class_recall` (its
  balanced_accuracy_score), clip_benchmark/metrics/zeroshot_classification.py L229-235; ours
  are zeroshot_top1_accuracy, zeroshot_top5_accuracy and balanced_accuracy;
- linear_probe (zero-shot benchmarks with the `linear` probe, one file per k): `lp_acc1`,
  `lp_acc5`, `lp_mean_per_class_recall` and `fewshot_k`, `normalized` as
  clip_benchmark/metrics/linear_probe.py returns them (L311-312); ours are the means over the
  folds (fold n is its `--seed n`), with the number of folds as `vlbench_folds`, so such a row
  is a mean over seeds where a clip_benchmark row is one seed.

`dataset` is clip_benchmark's name where our benchmark reads clip_benchmark's own webdataset
repository (`clip-benchmark/wds_<name>` holds `wds/<name>`: its README L297-303), else our
benchmark key. Extra keys (`vlbench_model`, `vlbench_benchmark`, `written_by`) are kept by
`build` as columns; it reads every `*.json` of a folder whatever its name (cli.py L89-114), so
files are named `<benchmark>__<model key>.json`, unique where `eval`'s own pattern
(`{dataset}_{pretrained}_{model}_{language}_{task}`) is not (two of our models on one
architecture and checkpoint name).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from vlbench import __version__
from vlbench.protocols import protocol

# Source: github.com/LAION-AI/CLIP_benchmark at commit 48de38c1689fa6d8b4dd53e3370c669c3bb18117,
# README.md L297-303 (`wds/<name>` is read from clip-benchmark/wds_<name, "/" as "-">).
WDS_DATASETS = {
    "clip-benchmark/wds_flickr30k": "wds/flickr30k",
    "clip-benchmark/wds_mscoco_captions": "wds/mscoco_captions",
}
RETRIEVAL_NAMES = {"text_to_image": "image_retrieval", "image_to_text": "text_retrieval"}
CLASSIFICATION_NAMES = {
    "zeroshot_top1_accuracy": "acc1",
    "zeroshot_top5_accuracy": "acc5",
    "balanced_accuracy": "mean_per_class_recall",
}


def clip_benchmark_model(spec: Mapping[str, Any]) -> tuple[str, str]:
    """(model, pretrained) as a clip_benchmark run of the same weights names them: the open_clip
    name, and the checkpoint file's name, the random initialisation's seed or the hub
    revision."""
    name, pretrained = str(spec.get("name", "")), spec.get("pretrained")
    if pretrained:
        return name, Path(str(pretrained)).name
    if spec.get("random_init_seed") is not None:
        return name, f"random-init-seed-{spec['random_init_seed']}"
    return name, str(spec.get("revision") or "")


def _metrics(rows: pl.DataFrame, task: str) -> dict[str, float]:
    metrics = {}
    for row in rows.iter_rows(named=True):
        if task == "zeroshot_retrieval" and row["metric"] == "recall":
            name = f"{RETRIEVAL_NAMES[row['direction']]}_recall@{row['k']}"
        elif task == "zeroshot_classification" and row["metric"] in CLASSIFICATION_NAMES:
            name = CLASSIFICATION_NAMES[row["metric"]]
        else:
            continue
        metrics[name] = row["value"] / 100.0
    return dict(sorted(metrics.items()))


LINEAR_PROBE_METRICS = ("lp_acc1", "lp_acc5", "lp_mean_per_class_recall")


def _linear_probe_records(rows: pl.DataFrame) -> dict[int, dict[str, Any]]:
    """k -> the linear probe's metrics of one (model, benchmark), as fractions."""
    records: dict[int, dict[str, Any]] = {}
    for row in rows.filter(pl.col("metric").is_in(LINEAR_PROBE_METRICS)).iter_rows(named=True):
        record = records.setdefault(int(row["k"]), {"fewshot_k": int(row["k"]), "normalized": True})
        record[row["metric"]] = row["value"] / 100.0
        if row.get("n_folds") is not None:
            record["vlbench_folds"] = int(row["n_folds"])
    return {k: dict(sorted(record.items())) for k, record in sorted(records.items())}


def clip_benchmark_files(
    metrics: pl.DataFrame,
    benchmarks: Mapping[str, Mapping[str, Any]],
    models: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """File name -> record for every (model, benchmark) of a paired or zero-shot protocol.

    `benchmarks`: each benchmark's prepared metadata (benchmark.json: protocol, repo);
    `models`: each model's configured spec.
    """
    files: dict[str, dict[str, Any]] = {}
    for benchmark, meta in sorted(benchmarks.items()):
        record = protocol(str(meta["protocol"]))
        if record.item_retrieval:
            task = "zeroshot_retrieval"
        elif record.per_class:
            task = "zeroshot_classification"
        else:
            continue
        dataset = WDS_DATASETS.get(str(meta.get("repo")), benchmark)
        rows = metrics.filter(
            (pl.col("benchmark") == benchmark)
            & (pl.col("subset") == meta["subset"])
            & pl.col("value").is_not_null()
        )
        for model in sorted(set(rows["model"].to_list())):
            found = _metrics(rows.filter(pl.col("model") == model), task)
            if not found:
                continue
            name, pretrained = clip_benchmark_model(models.get(model, {}))
            common = {
                "dataset": dataset,
                "model": name,
                "pretrained": pretrained,
                "language": "en",
                "vlbench_model": model,
                "vlbench_benchmark": benchmark,
                "written_by": f"vlbench {__version__}",
            }
            files[f"{benchmark}__{model}.json"] = {**common, "task": task, "metrics": found}
            probes = _linear_probe_records(rows.filter(pl.col("model") == model))
            for k, probe in probes.items():
                files[f"{benchmark}__{model}__linear_probe_k{k}.json"] = {
                    **common,
                    "task": "linear_probe",
                    "metrics": probe,
                }
    return files
