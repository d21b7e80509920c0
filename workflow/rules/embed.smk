# Stage 2: per (model, benchmark) -> L2-normalised embeddings of both modalities plus their ids.
# One job (one GPU) per model and benchmark loads the model once and embeds every shard of the
# texts, then of the images; shards are its internal resume state (see the rule).
# Decoded, resized and cropped images are cached once per (benchmark, geometric transform)
# under results/pixels/ and reused by every model that shares the transform.


rule init_random_checkpoint:
    output:
        RANDOM_CHECKPOINT,
    params:
        name=lambda wildcards: config["models"][wildcards.model]["name"],
        model_config=lambda wildcards: config["models"][wildcards.model]["model_config"],
        seed=lambda wildcards: config["models"][wildcards.model]["random_init_seed"],
        model_files=model_files_fingerprint,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/init_random_checkpoint/{model}.log",
    script:
        "../../scripts/init_random_checkpoint.py"


# Each modality is cut into shards of embedding.shard_size rows, stored in the job's resume
# folder (results/embeddings/{model}/{benchmark}/shards/, read by no other job) under a content
# key (the rows' digest and the model's identity): a rerun reuses every stored shard whose key
# still matches, so a killed job resumes shard by shard and an edited caption re-embeds only
# its text shard. The outputs are the gathered matrices.


# embedding.jobs cuts this work into jobs (common.smk, EMBED_WILDCARDS): per_benchmark (default)
# one job per (model, benchmark), per_model one per model over every benchmark (the model loaded
# once), single one job for every model on every benchmark (the libraries imported once: the
# shortest run on one GPU). Every shape writes the same files and numbers; config/README.md says
# what each reruns.
rule embed:
    input:
        images=embed_sources("images"),
        texts=embed_sources("texts"),
        weights=embed_weights,
    output:
        # EMBEDDING_FILES of each (model, benchmark) of the job, model by model.
        [
            path
            for files in zip(*map(embed_pattern, EMBEDDING_FILES.values()))
            for path in files
        ],
    params:
        models=embed_model_params,
        benchmarks=embed_benchmarks,
        # Speed knobs (threads, num_workers, pixel_cache) are read from the config by the job:
        # a change to them reruns nothing (vlbench.config.RUN_TIME_KEYS).
        pixel_cache_dir=PIXEL_CACHE_DIR,
    # Decode workers follow the threads (embedding.num_workers: null); on a GPU node give
    # each GPU job the node's cores per GPU: embedding.threads, or --set-threads embed=N.
    threads: config["embedding"]["threads"]
    resources:
        gpu=1,
    conda:
        "../../envs/vlbench.yaml"
    log:
        EMBED_LOG,
    benchmark:
        EMBED_TIMINGS
    script:
        "../../scripts/embed.py"
