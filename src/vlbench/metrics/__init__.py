"""Stage 5 (workflow/rules/metrics.smk): outcomes, metric rows, intervals and tests."""
