"""The pipeline: case -> run -> observe -> check -> compare (the ledger, predicted by the
control-flow model), and repro files."""
