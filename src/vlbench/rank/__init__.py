"""Stages 3-4 (the evaluate rules in workflow/rules/metrics.smk): indexes and exact ranks."""
