# Stage 2: per (model, benchmark) -> L2-normalised embeddings of both modalities plus their ids.
# embed (one GPU; one job per pair, per model or for all: embedding.jobs) loads each model once
# and stores every shard of the texts, then of the images, listing each pair's stored shards;
# embedding_identity records each model's identity; gather_embeddings (one light job per pair)
# concatenates a pair's shards into the matrices every later stage reads.
# Decoded, resized and cropped images are cached once per (benchmark, geometric transform)
# (vlbench.paths.PIXEL_CACHE_FOLDER) and reused by every model that shares the transform.

from vlbench.paths import (
    EMBEDDING_FILES,
    EMBEDDING_IDENTITY,
    EMBEDDING_SHARD_LIST,
    GATHER_TIMINGS,
    RANDOM_CHECKPOINT,
    modality_file,
)


rule init_random_checkpoint:
    output:
        RANDOM_CHECKPOINT,
    params:
        name=lambda wildcards: config["models"][wildcards.model]["name"],
        model_config=lambda wildcards: config["models"][wildcards.model]["model_config"],
        seed=lambda wildcards: config["models"][wildcards.model]["random_init_seed"],
        model_files=lambda wildcards: JOB_PARAMS.model_files(wildcards.model),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/init_random_checkpoint/{model}.log",
    script:
        "../../scripts/init_random_checkpoint.py"


# Each modality is cut into shards of embedding.shard_size rows, stored in the pair's resume
# folder (vlbench.paths.EMBEDDING_SHARDS) under a content key (the rows' digest
# and the model's identity): a rerun reuses every stored shard whose key still matches, so a
# killed job resumes shard by shard, an edited caption re-embeds only its text shard, and a
# model whose shards are all stored is not even loaded. For each pair it covers, the job writes
# the list of the pair's stored shards (shards.json), which the pair's gather job reads.


# embedding.jobs cuts this work into jobs (common.smk, EMBED): auto (default) picks
# single on one machine with one GPU slot, per_model with several (--resources gpu=N), and
# per_benchmark when the jobs go to a cluster (vlbench.planning.embed_cut, printed by the run);
# per_benchmark is one job per (model, benchmark), per_model one per model over every benchmark
# (the model loaded once), single one job for every model on every benchmark (torch and
# open_clip imported once: the shortest run on one GPU). Every cut writes the same files and
# numbers, and under every cut a change costs only its own work: see gather_embeddings.
# A checkpoint: once it has finished, Snakemake plans the jobs after it again, weighing each
# one's own reasons to rerun (changed params, fewer inputs), which it does not weigh for the jobs
# downstream of a job that reruns. So a dry run may list fewer of them than the run runs when
# one edit changes the embedding and something after it (config/README.md).
checkpoint embed:
    input:
        images=EMBED.sources("images"),
        texts=EMBED.sources("texts"),
        weights=embed_weights,
    output:
        # The list of stored shards of each (model, benchmark) of the job. `update`: not
        # removed before the job runs, and put back if it fails, so a failed or killed job
        # leaves every pair's last list (and so its gather) as it was.
        [update(path) for path in EMBED.outputs(EMBEDDING_SHARD_LIST)],
    params:
        models=embed_model_params,
        benchmarks=EMBED.benchmarks_of,
        # Each model's spec and identity (its result settings too: a change reruns the job).
        # Speed knobs (threads, num_workers, pixel_cache) are read from the config by the job:
        # a change to them reruns nothing. What reruns an embedding: vlbench.embedding.identity.
    # Decode workers follow the threads (embedding.num_workers: null); on a GPU node give
    # each GPU job the node's cores per GPU: embedding.threads, or --set-threads embed=N.
    threads: config["embedding"]["threads"]
    resources:
        gpu=1,
    conda:
        "../../envs/vlbench.yaml"
    log:
        EMBED.log,
    benchmark:
        EMBED.timings
    script:
        "../../scripts/embed.py"


# A model's embedding identity (its spec, its files' fingerprint, the result settings), written
# only when it changes (params): the trigger of the model's gathers below. (A parameter of the
# gather itself would not do: Snakemake does not weigh the parameters of a job downstream of
# one that reruns, here the embed job, whose `ancient` output it reads.)
rule embedding_identity:
    output:
        EMBEDDING_IDENTITY,
    params:
        identity=lambda wildcards: JOB_PARAMS.embedding_identity(wildcards.model),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/embedding_identity/{model}.log",
    script:
        "../../scripts/embedding_identity.py"


# One job per (model, benchmark), on the submitting host of a cluster run too (localrules):
# the pair's listed shards concatenated into its matrices, ids and provenance. The list is
# `ancient`: an embed job that covers other pairs too rewrites every pair's list each time it
# runs (a new model, an edit to another benchmark), and that alone reruns nothing here. This
# pair's gather (and its evaluation after it) reruns when its model's identity file or its
# benchmark's prepared rows change (both inputs).
rule gather_embeddings:
    input:
        shard_list=ancient(EMBEDDING_SHARD_LIST),
        identity=EMBEDDING_IDENTITY,
        images=lambda wildcards: modality_file(wildcards.benchmark, "image"),
        texts=lambda wildcards: modality_file(wildcards.benchmark, "text"),
    output:
        **EMBEDDING_FILES,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/gather_embeddings/{model}/{benchmark}.log",
    benchmark:
        GATHER_TIMINGS
    script:
        "../../scripts/gather_embeddings.py"
