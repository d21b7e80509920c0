# Stage 2: per (model, benchmark, modality) -> L2-normalised embeddings plus their ids.
# Each modality is cut into row-range shards (plan_shards); every shard is an independent job
# (embed_shard, one GPU each); gather_embeddings concatenates them into the final matrix.
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


checkpoint plan_shards:
    input:
        data=modality_data,
    output:
        plan=SHARD_PLAN,
    params:
        shard_size=config["embedding"]["shard_size"],
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/plan_shards/{benchmark}/{modality}.log",
    script:
        "../../scripts/plan_shards.py"


# The prepared data and the plan are `ancient`: re-preparing a benchmark (say, after one caption
# was edited) reruns a shard only when its rows' content digest (a param, from the plan) changed,
# so the image shards are kept when only texts changed, and vice versa.
rule embed_shard:
    input:
        data=lambda wildcards: ancient(modality_data(wildcards)),
        plan=ancient(SHARD_PLAN),
        weights=checkpoint_input,
    output:
        embeddings="results/embeddings/{model}/{benchmark}/{modality}/{shard}.npy",
        ids="results/embeddings/{model}/{benchmark}/{modality}/{shard}.ids.parquet",
        provenance="results/embeddings/{model}/{benchmark}/{modality}/{shard}.json",
    params:
        model=model_spec,
        model_files=model_files_fingerprint,
        content=shard_content_digest,
        # Speed knobs (threads, num_workers, pixel_cache) are read from the config by the
        # job: a change to them reruns nothing (vlbench.config.RUN_TIME_KEYS).
        embedding=result_keys(config, "embedding"),
        pixel_cache_dir=PIXEL_CACHE_DIR,
    # Decode workers follow the threads (embedding.num_workers: null); on a GPU node give each
    # GPU job the node's cores per GPU: embedding.threads, or --set-threads embed_shard=N.
    threads: config["embedding"]["threads"]
    resources:
        gpu=1,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/embed_shard/{model}/{benchmark}/{modality}/{shard}.log",
    benchmark:
        "results/timings/embed_shard/{model}/{benchmark}/{modality}/{shard}.tsv"
    script:
        "../../scripts/embed.py"


rule gather_embeddings:
    input:
        unpack(embedding_shards),
    output:
        embeddings="results/embeddings/{model}/{benchmark}/{modality}.npy",
        ids="results/embeddings/{model}/{benchmark}/{modality}.ids.parquet",
        provenance="results/embeddings/{model}/{benchmark}/{modality}.json",
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/gather_embeddings/{model}/{benchmark}/{modality}.log",
    benchmark:
        "results/timings/gather_embeddings/{model}/{benchmark}/{modality}.tsv"
    script:
        "../../scripts/gather_embeddings.py"
