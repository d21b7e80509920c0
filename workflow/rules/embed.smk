# Stage 2: per (model, benchmark, modality) -> L2-normalised embeddings plus their ids.
# Each modality is cut into row-range shards (plan_shards); job k (embed_shard, one GPU each)
# embeds shard k of both modalities with one model load; gather_embeddings concatenates a
# modality's shards into the final matrix.
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


# Job k embeds shard k of every modality that has one (texts, then images) through one loaded
# model. Its inputs are `ancient` and its params hold the shards' content digests: re-preparing a
# benchmark reruns the job only when its rows changed, and a stored shard whose content key
# (rows digest + model identity) still matches is reused, not embedded again (an edited caption
# re-embeds the text shard and keeps the image shard; a killed job resumes shard by shard).


rule embed_shard:
    input:
        unpack(shard_job_inputs),
        weights=checkpoint_input,
    output:
        record=EMBED_JOB_RECORD,
    params:
        model=model_spec,
        identity=embedding_identity,
        content=shard_content_digests,
        embeddings_dir=EMBEDDINGS_DIR,
        # Speed knobs (threads, num_workers, pixel_cache) are read from the config by the
        # job: a change to them reruns nothing (vlbench.config.RUN_TIME_KEYS).
        pixel_cache_dir=PIXEL_CACHE_DIR,
    # Decode workers follow the threads (embedding.num_workers: null); on a GPU node give each
    # GPU job the node's cores per GPU: embedding.threads, or --set-threads embed_shard=N.
    threads: config["embedding"]["threads"]
    resources:
        gpu=1,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/embed_shard/{model}/{benchmark}/{shard}.log",
    benchmark:
        "results/timings/embed_shard/{model}/{benchmark}/{shard}.tsv"
    script:
        "../../scripts/embed.py"


# A gathered matrix follows its shard jobs' records; it checks that each stored shard holds the
# current rows (digests) for the current model (identity) before concatenating.
rule gather_embeddings:
    input:
        unpack(embedding_shards),
    output:
        embeddings="results/embeddings/{model}/{benchmark}/{modality}.npy",
        ids="results/embeddings/{model}/{benchmark}/{modality}.ids.parquet",
        provenance="results/embeddings/{model}/{benchmark}/{modality}.json",
    params:
        identity=embedding_identity,
        digests=modality_shard_digests,
        embeddings_dir=EMBEDDINGS_DIR,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/gather_embeddings/{model}/{benchmark}/{modality}.log",
    benchmark:
        "results/timings/gather_embeddings/{model}/{benchmark}/{modality}.tsv"
    script:
        "../../scripts/gather_embeddings.py"
