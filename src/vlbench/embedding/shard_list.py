"""The list of one (model, benchmark)'s stored shards: what its embed job hands to its gather.

An embed job (one pair, one model, or every model: `embedding.jobs`) stores each pair's shards
in the pair's resume folder and writes, per pair, `shards.json`: the identity it embedded for
and each modality's shards with their provenance. The pair's gather job reads that list and
concatenates the shards into the matrices every later job reads.

The gather declares the list `ancient`, so a rerun of an embed job that covers other pairs too
(a new model, an edit to another benchmark) leaves this pair's matrices, and its evaluations,
untouched. What reruns the gather: its benchmark's prepared rows (an input) and the model's
identity file (`identity.json`, written by a job of its own only when the identity changes: a
parameter of the gather itself would not do, as Snakemake does not weigh the parameters of a job
downstream of one that reruns). The list records the identity's digest, and a gather whose
model identity is not the one listed stops instead of gathering shards embedded for something
else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlbench.atomic import write_text
from vlbench.embedding.identity import identity_digest
from vlbench.embedding.matrix_files import MatrixFiles
from vlbench.embedding.shard_files import gather_shards
from vlbench.errors import VlbenchError
from vlbench.hashing import require_intact
from vlbench.paths import MODALITIES

if TYPE_CHECKING:
    from vlbench.embedding.plan import PairKey, PairPlan

# A pair's records: each modality's shard records, in row order.
Records = dict[str, list[dict[str, Any]]]

# What makes a listed shard that is gone or damaged again.
REEMBED = "rerun with `--forcerun embed`: the embed job embeds it again and reuses the others"


def write_shard_list(
    path: str | Path,
    identity: Mapping[str, Any],
    shards: Mapping[str, Sequence[tuple[str, Mapping[str, Any]]]],
) -> None:
    """Write a pair's list (atomically): per modality, each shard's file stem in the pair's
    resume folder (`<modality>/<stem>`) and its provenance record. A list that names the same
    stored files already (every shard reused) is left as it is, modification time included."""
    record = {
        "identity": identity_digest(identity),
        "modalities": {
            modality: [{"shard": stem, "record": dict(record)} for stem, record in entries]
            for modality, entries in shards.items()
        },
    }
    if _same_stored_files(path, record):
        return
    write_text(path, json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")


def write_lists(plans: Mapping[PairKey, PairPlan]) -> dict[PairKey, Records]:
    """Write the list of each planned pair, every shard of which is stored by now (reused, or
    embedded by the job); return each pair's records."""
    written = {}
    for key, plan in plans.items():
        entries = {}
        for modality, records in plan.records.items():
            if any(record is None for record in records):
                raise RuntimeError(f"{plan.pair.shard_list}: a {modality} shard was left unstored")
            shards = zip(plan.shards[modality], records, strict=True)
            entries[modality] = [(f"{modality}/{shard.name}", record) for shard, record in shards]
        write_shard_list(plan.pair.shard_list, plan.pair.identity, entries)
        written[key] = {
            modality: [record for _, record in got] for modality, got in entries.items()
        }
    return written


def _stored_files(record: Mapping[str, Any]) -> tuple:
    """What a list says is stored: identity, and per shard its stem, content key and digests."""
    return (
        record["identity"],
        sorted(
            (
                modality,
                entry["shard"],
                entry["record"].get("content_key"),
                str(entry["record"].get("files")),
            )
            for modality, entries in record["modalities"].items()
            for entry in entries
        ),
    )


def _same_stored_files(path: str | Path, record: Mapping[str, Any]) -> bool:
    """Whether the list at `path` names exactly the stored files `record` does."""
    try:
        existing = json.loads(Path(path).read_text(encoding="utf-8"))
        return _stored_files(existing) == _stored_files(record)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def write_identity(path: str | Path, identity: Mapping[str, Any]) -> None:
    """Write a model's identity file: the identity and its digest (what the gathers compare
    with each shard list's)."""
    record = {"digest": identity_digest(identity), "identity": identity}
    write_text(path, json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")


def read_identity(path: str | Path) -> str:
    """The identity digest a model's identity file records; stop naming the file otherwise."""
    try:
        return str(json.loads(Path(path).read_text(encoding="utf-8"))["digest"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise VlbenchError(
            f"{path}: not a readable identity file ({exc}); remove it and rerun"
        ) from None


def read_shard_list(path: str | Path, digest: str) -> dict[str, list[dict]]:
    """A pair's listed shards per modality, once the list is readable and was written for the
    identity whose digest is `digest`; stop naming the file otherwise."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        listed, modalities = record["identity"], record["modalities"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise VlbenchError(
            f"{path}: not a readable list of stored shards ({exc}); remove it and rerun: the "
            "embed job writes it again, reusing every stored shard"
        ) from None
    if listed != digest:
        raise VlbenchError(
            f"{path}: lists shards embedded for another model identity than this gather's "
            "(the embed job did not run for the current config); rerun with "
            "`--forcerun embed`, which reuses every stored shard that still matches"
        )
    missing = [modality for modality in MODALITIES if not modalities.get(modality)]
    if missing:
        raise VlbenchError(f"{path}: no {missing[0]} shards listed")
    return modalities


def gather_pair(
    shard_list: str | Path,
    digest: str,
    resume_dir: str | Path,
    outputs: Mapping[str, MatrixFiles],
) -> dict[str, int]:
    """Gather a pair's listed shards into its matrices (`outputs` per modality); return the
    rows per modality. `digest`: the model's current identity digest (`read_identity`). A
    listed shard whose files are gone or damaged stops the gather."""
    listed = read_shard_list(shard_list, digest)
    rows = {}
    for modality, out in outputs.items():
        entries = listed[modality]
        files = [MatrixFiles.at(Path(resume_dir, entry["shard"])) for entry in entries]
        for shard, entry in zip(files, entries, strict=True):
            require_intact(shard.data, entry["record"].get("files"), REEMBED)
        rows[modality] = gather_shards(files, [entry["record"] for entry in entries], out)
    return rows
