"""The run engine under every command and the Python API: set-up checked before any model loads
(`setup`; the searches it runs are looked up in `prompttune.optimizers.registry`), one search and its
held-out verdict written to a run directory (`study`), comparisons of strategies (`comparison`; `--jobs` in `workers`),
prompt-set evaluations (`evaluate`), exports (`export`: the writers of `prompttune.results.prompt_formats`)
and the test-split ledger (`verdicts`). What they hand back is in `prompttune.results`."""
