"""Warm workers: a rule's heavy imports done once per machine, a forked child per job."""
