"""What users run, on top of the core and the Spark jobs: the `sharestate` command line
(`cli.py`), the demo, the HTML report, the configuration reference and the long-running
`serve` service."""
