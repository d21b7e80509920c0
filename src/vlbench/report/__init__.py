"""Stage 6 (workflow/rules/tables.smk): tables, paper tables, plots and provenance."""
