"""What the Snakemake files call at parse time: targets, checks, fingerprints."""
