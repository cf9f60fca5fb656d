"""How long a process takes to get the embedded model ready, with and without its saved GGUF parts.

Every `optimize`, every compare worker and every test that loads the model pays this once. Each
repeat is a fresh Python process (nothing shared but the disk cache): it imports the backend, then
builds `TransformersBackend()` on the embedded GGUF file, and prints both times. `cold` gives each
process an empty `PROMPTTUNE_CACHE_DIR`, so the tokenizer and config are read from the GGUF file
(and saved); `warm` shares one cache directory filled by an untimed first process, so they come from
the saved parts (prompttune/backends/gguf_parts.py). Run it alone: another model process on the same
cores slows every figure.

Run: python benchmarks/startup.py [--repeats 3] [--model PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROBE = """
import json, sys, time
start = time.perf_counter()
from prompttune.backends.transformers_backend import TransformersBackend
imported = time.perf_counter()
TransformersBackend(*sys.argv[1:2])
print(json.dumps({"import_s": imported - start, "load_s": time.perf_counter() - imported}))
"""


def one_process(cache_dir: str, model: str | None) -> dict[str, float]:
    env = {**os.environ, "PROMPTTUNE_CACHE_DIR": cache_dir}
    args = [sys.executable, "-c", PROBE, *([model] if model else [])]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed processes per mode")
    parser.add_argument("--model", default=None, help="a model path or id (default: the embedded GGUF)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        warm_dir = os.path.join(root, "warm")
        one_process(warm_dir, args.model)  # fills the parts folder; not timed
        runs = {"cold": [one_process(tempfile.mkdtemp(dir=root), args.model) for _ in range(args.repeats)],
                "warm": [one_process(warm_dir, args.model) for _ in range(args.repeats)]}
    print(f"model start-up, {args.repeats} fresh processes per mode, {os.cpu_count()} cores; median (min-max) s")
    print(f"{'mode':<6} {'import':>18} {'load model':>18} {'total':>18}")
    for mode, rows in runs.items():
        cells = []
        for values in ([r["import_s"] for r in rows], [r["load_s"] for r in rows],
                       [r["import_s"] + r["load_s"] for r in rows]):
            cells.append(f"{statistics.median(values):6.1f} ({min(values):.1f}-{max(values):.1f})")
        print(f"{mode:<6} " + " ".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
