"""The reflective race, one part per file: the stages (`strategy.py`), its options (`options.py`), racing and
the final stage (`race.py`), the moves that make children (`moves.py`) from genomes (`genome.py`), and the
calibrated twins (`calibration.py`)."""
