"""The command line only: each module parses one command's options, calls the engine
(`prompttune.engine`) and prints. Nothing but `prompttune.cli` imports this package."""
