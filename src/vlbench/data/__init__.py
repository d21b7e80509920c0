"""Stage 1 (workflow/rules/data.smk): benchmark sources -> the canonical parquet layout."""
