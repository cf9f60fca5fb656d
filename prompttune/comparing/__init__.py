"""Matched-budget comparison of optimizers (prompttune's and DSPy's) on one model and one test split."""
