"""Stages 3-4 (workflow/rules/index.smk, rank in metrics.smk): indexes and exact ranks."""
