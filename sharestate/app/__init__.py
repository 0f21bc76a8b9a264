"""What users run on top of the core: the long-running `serve` service."""
