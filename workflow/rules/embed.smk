# Stage 2: per (model, benchmark, modality) -> L2-normalised float32 embeddings plus their ids.


rule init_random_checkpoint:
    output:
        "results/checkpoints/{model}.pt",
    params:
        name=lambda wildcards: config["models"][wildcards.model]["name"],
        model_config=lambda wildcards: config["models"][wildcards.model]["model_config"],
        seed=lambda wildcards: config["models"][wildcards.model]["random_init_seed"],
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/init_random_checkpoint/{model}.log",
    script:
        "../../scripts/init_random_checkpoint.py"


rule embed:
    input:
        data=lambda wildcards: f"results/data/{wildcards.benchmark}/{MODALITY_FILES[wildcards.modality]}",
        weights=checkpoint_input,
    output:
        embeddings="results/embeddings/{model}/{benchmark}/{modality}.npy",
        ids="results/embeddings/{model}/{benchmark}/{modality}.ids.parquet",
        provenance="results/embeddings/{model}/{benchmark}/{modality}.json",
    params:
        model=lambda wildcards: model_spec_for_job(
            wildcards.model, config["models"][wildcards.model]
        ),
        batch_size=config["embedding"]["batch_size"],
    threads: 2
    resources:
        gpu=1,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/embed/{model}/{benchmark}/{modality}.log",
    benchmark:
        "results/timings/embed/{model}/{benchmark}/{modality}.tsv"
    script:
        "../../scripts/embed.py"
