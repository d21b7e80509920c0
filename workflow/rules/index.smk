# Stage 3: a faiss IndexFlatIP per (model, benchmark, gallery modality).


rule build_index:
    input:
        embeddings="results/embeddings/{model}/{benchmark}/{modality}.npy",
    output:
        index="results/index/{model}/{benchmark}/{modality}.faiss",
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/build_index/{model}/{benchmark}/{modality}.log",
    benchmark:
        "results/timings/build_index/{model}/{benchmark}/{modality}.tsv"
    script:
        "../../scripts/build_index.py"
