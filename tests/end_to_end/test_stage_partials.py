"""Every writing stage, killed with its process group before its output's rename, leaves only a
hidden partial, and that stage's next run sweeps it (vlbench.atomic.sweep_partials).

Each stage runs the package function its rule script calls, on the outputs of the stages before
it (a small chain built once: synthetic source -> canonical parquet -> stored shards ->
gathered matrices -> index -> ranks -> metrics -> tables, paper table, plots, provenance).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_helpers import SHIPPED_MAP, SHIPPED_REFERENCE, TINY_MODEL_CONFIG

from vlbench import atomic

SETUP = """
import json
from pathlib import Path
import numpy as np
root = Path(ROOT)
"""

# Stage -> (code run with `root` set, the output whose rename the kill precedes).
STAGES: dict[str, tuple[str, str]] = {
    "write_synthetic_source": (
        "from vlbench.data.synthetic import write_synthetic_biomedflickr\n"
        "write_synthetic_biomedflickr(root / 'source', 12, 0, 'test')",
        "source",
    ),
    "prepare_benchmark": (
        "from vlbench.data.prepare import prepare_benchmark\n"
        "prepare_benchmark('demo', 'paired', {'path': str(root / 'source'), 'split': 'test'},\n"
        "                  root / 'source', root / 'data')",
        "data/texts.parquet",
    ),
    "init_random_checkpoint": (
        "from vlbench.embedding.models import write_random_checkpoint\n"
        f"write_random_checkpoint('vlbench-tiny', {str(TINY_MODEL_CONFIG)!r}, 0, root / 'c.pt')",
        "c.pt",
    ),
    # The embedding job: each shard stored in its resume folder, then the gathered matrices.
    "embed (stored shard)": (
        "import pyarrow.parquet as pq\n"
        "from vlbench.embedding.shard_files import ShardStore, plan_shards\n"
        "rng = np.random.default_rng(0)\n"
        "for modality, column in (('image', 'image_id'), ('text', 'text_id')):\n"
        "    source = root / 'data' / f'{modality}s.parquet'\n"
        "    (shard,) = plan_shards(modality, source, 100)\n"
        "    ids = pq.read_table(source, columns=[column]).column(column).to_pylist()\n"
        "    vectors = rng.normal(size=(len(ids), 8)).astype(np.float32)\n"
        "    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)\n"
        "    record = {'modality': modality, 'rows': [0, len(ids)], 'seconds': 0.1,\n"
        "              'source': str(source)}\n"
        "    ShardStore(root / 'shards' / modality, {}).save(shard, ids, vectors, record)",
        "shards/text/shard-00000.ids.parquet",
    ),
    "embed (gathered matrices)": (
        "from vlbench.embedding.shard_files import ShardStore, gather_shards\n"
        "from vlbench.embedding.matrix_files import MatrixFiles\n"
        "from vlbench.embedding.shard_files import plan_shards\n"
        "for modality in ('image', 'text'):\n"
        "    store = ShardStore(root / 'shards' / modality, {})\n"
        "    (shard,) = plan_shards(modality, root / 'data' / f'{modality}s.parquet', 100)\n"
        "    gather_shards([store.files(shard)], [store.stored(shard)],\n"
        "                  MatrixFiles.at(root / 'embeddings' / modality))",
        "embeddings/image.npy",
    ),
    # The evaluation job: indexes, ranks and metrics of a direction.
    "build_index": (
        "from vlbench.rank.index import build_flat_index\n"
        "for modality in ('image', 'text'):\n"
        "    build_flat_index(root / 'embeddings' / f'{modality}.npy',\n"
        "                     root / 'index' / f'{modality}.faiss')",
        "index/image.faiss",
    ),
    "rank": (
        "from vlbench.protocols import PROTOCOLS\n"
        "from vlbench.rank.job import rank_direction\n"
        "e = root / 'embeddings'\n"
        "rank_direction(PROTOCOLS['paired'], 'image_to_text',\n"
        "               e / 'image.npy', e / 'image.ids.parquet',\n"
        "               root / 'index' / 'text.faiss', e / 'text.ids.parquet', root / 'data',\n"
        "               root / 'ranks' / 'image_to_text.parquet')",
        "ranks/image_to_text.parquet",
    ),
    "metrics": (
        "from vlbench.metrics.job import write_metrics\n"
        "from vlbench.protocols import PROTOCOLS\n"
        "labels = {'benchmark': 'demo', 'subset': 'test', 'model': 'm',\n"
        "          'direction': 'image_to_text'}\n"
        "write_metrics(root / 'ranks' / 'image_to_text.parquet', PROTOCOLS['paired'], [1, 5],\n"
        "              labels, 'index', {'bootstrap_samples': 10}, root / 'metrics' / 'i2t.csv',\n"
        "              root / 'metrics' / 'i2t.outcomes.parquet')",
        "metrics/i2t.outcomes.parquet",
    ),
    "tables": (
        "from vlbench.report.tables import write_tables\n"
        "t = root / 'tables'\n"
        "write_tables([root / 'metrics' / 'i2t.csv'], t / 'metrics.csv', t,\n"
        "             full_csv=t / 'metrics_full.csv')",
        "tables/metrics_full.csv",
    ),
    "paper_table": (
        "from vlbench.report.paper_layouts import LAYOUTS\n"
        "from vlbench.report.paper_tables import build_paper_table\n"
        "from vlbench.report.reference import read_map, read_reference\n"
        "from vlbench.report.table_writers import write_paper_table\n"
        "from vlbench.report.tables import read_full_metrics\n"
        "table = build_paper_table(LAYOUTS['biomedflickr'],\n"
        "    read_full_metrics(root / 'tables' / 'metrics_full.csv'),\n"
        f"    read_reference({str(SHIPPED_REFERENCE)!r}), read_map({str(SHIPPED_MAP)!r}),\n"
        "    ['demo'], 0.5, {})\n"
        "write_paper_table(table, root / 'tables' / 'paper')",
        "tables/paper/biomedflickr.csv",
    ),
    "plot_benchmark": (
        "from vlbench.report.plots import write_benchmark_plots\n"
        "from vlbench.report.tables import read_full_metrics\n"
        "write_benchmark_plots(read_full_metrics(root / 'tables' / 'metrics_full.csv'), 'demo',\n"
        "                      root / 'plots' / 'curves.png', root / 'plots' / 'bars.png')",
        "plots/bars.png",
    ),
    "provenance": (
        "from vlbench.report.provenance import collect_provenance, write_provenance\n"
        "record = collect_provenance('demo', root / 'data' / 'benchmark.json',\n"
        "    [root / 'embeddings' / 'image.json'], [], root / 'timings')\n"
        "write_provenance(record, root / 'provenance.csv', root / 'provenance.html')",
        "provenance.html",
    ),
}


def run_stage(stage: str, root: Path, crash: bool) -> int:
    """Run one stage in a child process of its own group; its exit code (-9: killed)."""
    code, output = STAGES[stage]
    env = {key: value for key, value in os.environ.items() if key != atomic.CRASH_ENV}
    if crash:
        env[atomic.CRASH_ENV] = str((root / output).resolve())
    script = SETUP.replace("ROOT", repr(str(root))) + code + "\n"
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, start_new_session=True, capture_output=True
    )
    assert result.returncode in (0, -9), result.stderr.decode()[-3000:]
    return result.returncode


def partials(root: Path) -> list[Path]:
    return sorted(root.rglob("*.partial"))


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every stage's outputs, each stage run once in order (in this process)."""
    root = tmp_path_factory.mktemp("stages")
    for code, _ in STAGES.values():
        exec(SETUP.replace("ROOT", repr(str(root))) + code, {})
    assert partials(root) == []
    return root


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_stage_killed_before_its_rename_is_swept_by_its_next_run(stage: str, chain: Path) -> None:
    output = chain / STAGES[stage][1]
    before = output.stat().st_mtime_ns
    assert run_stage(stage, chain, crash=True) == -9
    left = partials(chain)
    assert any(path.name.startswith(f".{output.name}.") for path in left), left
    assert all(path.name.startswith(".") for path in left), left
    assert output.stat().st_mtime_ns == before  # the finished output was not touched
    exec(SETUP.replace("ROOT", repr(str(chain))) + STAGES[stage][0], {})
    assert partials(chain) == []
    assert output.exists()
