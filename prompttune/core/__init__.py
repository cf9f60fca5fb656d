"""Bottom layer: shared types, errors, configuration, YAML, trial storage and the run-directory schema
(`run_files`); imports nothing above."""
