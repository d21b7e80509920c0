"""Stage 2 (workflow/rules/embed.smk): models, image decoding and sharded embedding."""
