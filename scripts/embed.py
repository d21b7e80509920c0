"""Rule embed_shard: shard k of every modality of one benchmark through one loaded model.

The job itself is `vlbench.embedding.shard_job.run`; this script only turns Snakemake's job into
its payload and hands it to a warm worker (or runs it here: `vlbench.warm.client`).
"""

from vlbench.warm.client import run_job

payload = {
    "log": snakemake.log[0],
    "benchmark": snakemake.wildcards.benchmark,
    "shard": snakemake.wildcards.shard,
    "model": dict(snakemake.params.model),
    "identity": dict(snakemake.params.identity),
    # Result keys come as params; speed knobs (RUN_TIME_KEYS) from the config, so that
    # changing them reruns nothing.
    "embedding": {**snakemake.config["embedding"], **snakemake.params.identity["embedding"]},
    "pixel_cache_dir": snakemake.params.pixel_cache_dir,
    "threads": snakemake.threads,  # after --set-threads and the --cores cap
    "work": {
        modality: {
            "plan": snakemake.input[f"{modality}_plan"],
            "data": snakemake.input[f"{modality}_data"],
            "digest": digest,
        }
        for modality, digest in snakemake.params.content.items()
    },
    "embeddings_dir": snakemake.params.embeddings_dir,
    "record": snakemake.output.record,
}
idle_seconds = snakemake.config["warm_workers"]["idle_seconds"]
run_job("vlbench.embedding.shard_job:run", payload, idle_seconds)
