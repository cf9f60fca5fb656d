"""What a run, a comparison or an evaluation hands back, and how it is recorded: the result types
(`run`, `evaluate`, `arms`, `compare`), the run record (`run_record`: verdict.json's facts), finished runs
read back (`finished_run`) and the prompt formats every export writes (`prompt_formats`). Below the engine and
the reports, so the engine produces these types and the reports read them without either naming the other."""
