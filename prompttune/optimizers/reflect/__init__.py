"""The reflective race, by composition: the strategy (`strategy.py`) runs the stages over parts that keep their
own state and are built and tested alone: the pool of genomes and candidates (`pool.py`, over `genome.py`), the
race on the dev block (`race.py`), the calibrated twins as pure functions (`calibration.py`), the moves that
make children (`moves.py`) and the final race (`final.py`); its options in `options.py`."""
