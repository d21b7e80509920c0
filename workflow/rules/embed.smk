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


rule embed:
    input:
        images="results/data/{benchmark}/images.parquet",
        texts="results/data/{benchmark}/texts.parquet",
        weights=checkpoint_input,
    output:
        image="results/embeddings/{model}/{benchmark}/image.npy",
        image_ids="results/embeddings/{model}/{benchmark}/image.ids.parquet",
        image_provenance="results/embeddings/{model}/{benchmark}/image.json",
        text="results/embeddings/{model}/{benchmark}/text.npy",
        text_ids="results/embeddings/{model}/{benchmark}/text.ids.parquet",
        text_provenance="results/embeddings/{model}/{benchmark}/text.json",
    params:
        model=model_spec,
        identity=embedding_identity,
        resume_dir=EMBEDDING_SHARDS,
        # Speed knobs (threads, num_workers, pixel_cache) are read from the config by the
        # job: a change to them reruns nothing (vlbench.config.RUN_TIME_KEYS).
        pixel_cache_dir=PIXEL_CACHE_DIR,
    # Decode workers follow the threads (embedding.num_workers: null); on a GPU node give each
    # GPU job the node's cores per GPU: embedding.threads, or --set-threads embed=N.
    threads: config["embedding"]["threads"]
    resources:
        gpu=1,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/embed/{model}/{benchmark}.log",
    benchmark:
        "results/timings/embed/{model}/{benchmark}.tsv"
    script:
        "../../scripts/embed.py"
