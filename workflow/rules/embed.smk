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


# embedding.jobs: per_benchmark (default) makes one job per (model, benchmark); per_model one
# job per model over every benchmark (the model loaded once; config/README.md says what each
# reruns). Both write the same files and numbers.
if config["embedding"]["jobs"] == "per_benchmark":

    rule embed:
        input:
            images="results/data/{benchmark}/images.parquet",
            texts="results/data/{benchmark}/texts.parquet",
            weights=checkpoint_input,
        output:
            **EMBEDDING_FILES,
        params:
            model=model_spec,
            identity=embedding_identity,
            benchmarks=lambda wildcards: [wildcards.benchmark],
            resume_dirs=lambda wildcards: [EMBEDDING_SHARDS.format(**wildcards)],
            # Speed knobs (threads, num_workers, pixel_cache, jobs) are read from the config by
            # the job: a change to them reruns nothing (vlbench.config.RUN_TIME_KEYS).
            pixel_cache_dir=PIXEL_CACHE_DIR,
        # Decode workers follow the threads (embedding.num_workers: null); on a GPU node give
        # each GPU job the node's cores per GPU: embedding.threads, or --set-threads embed=N.
        threads: config["embedding"]["threads"]
        resources:
            gpu=1,
        conda:
            "../../envs/vlbench.yaml"
        log:
            "logs/embed/{model}/{benchmark}.log",
        benchmark:
            EMBED_TIMINGS
        script:
            "../../scripts/embed.py"

else:

    rule embed:
        input:
            images=expand("results/data/{benchmark}/images.parquet", benchmark=BENCHMARKS),
            texts=expand("results/data/{benchmark}/texts.parquet", benchmark=BENCHMARKS),
            weights=checkpoint_input,
        output:
            [
                path.replace("{benchmark}", benchmark)
                for benchmark in BENCHMARKS
                for path in EMBEDDING_FILES.values()
            ],
        params:
            model=model_spec,
            identity=embedding_identity,
            benchmarks=BENCHMARKS,
            resume_dirs=lambda wildcards: [
                EMBEDDING_SHARDS.format(model=wildcards.model, benchmark=benchmark)
                for benchmark in BENCHMARKS
            ],
            pixel_cache_dir=PIXEL_CACHE_DIR,
        threads: config["embedding"]["threads"]
        resources:
            gpu=1,
        conda:
            "../../envs/vlbench.yaml"
        log:
            "logs/embed/{model}.log",
        benchmark:
            EMBED_TIMINGS
        script:
            "../../scripts/embed.py"
