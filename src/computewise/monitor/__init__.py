"""Watching jobs: process-tree and GPU sampling, the launcher, track(), diagnosis and run summaries."""
