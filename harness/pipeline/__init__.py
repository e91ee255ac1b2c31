"""The pipeline: case -> run -> observe -> check -> compare (ledger), and repro files."""
