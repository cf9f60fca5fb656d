"""Bottom layer: shared types, errors, configuration, YAML and trial storage; imports nothing above."""
