#!/usr/bin/python3
"""(Debian's python3, which has jupyter_client: scripts/setup.sh installs it.)

Times a notebook's cells as a reader waits for them: runs every cell once
on the GoNB kernel (the first pass compiles), then runs each code cell again
--repeat times and prints the median wall time per cell, measured from the
request to the kernel's reply.

    scripts/cell-bench.py notebooks/01-tour.ipynb --repeat 5
"""
import argparse
import json
import os
import statistics
import sys
import time

from jupyter_client.manager import start_new_kernel


def source(cell):
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def run(kc, code, timeout=900):
    start = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
    took = time.perf_counter() - start
    if reply["content"]["status"] != "ok":
        sys.exit(f"cell failed: {reply['content'].get('evalue', reply['content'])}\n{code[:200]}")
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebook")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with open(args.notebook) as f:
        cells = [source(c) for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    # GoNB sets GONB_DIR to the directory it starts in, as Jupyter starts it
    # in the notebook's.
    km, kc = start_new_kernel(kernel_name="gonb", cwd=os.path.dirname(os.path.abspath(args.notebook)))
    try:
        first = [run(kc, c) for c in cells]
        print(f"{'cell':>4} {'first':>7} {'warm median':>12}  source")
        warm_all = []
        for i, c in enumerate(cells):
            if c.lstrip().startswith(("!", "%noautoget", "import")):
                print(f"{i:4d} {first[i]:6.2f}s {'':>12}  {c.splitlines()[0][:60]}")
                continue
            warm = [run(kc, c) for _ in range(args.repeat)]
            warm_all.append(statistics.median(warm))
            print(f"{i:4d} {first[i]:6.2f}s {statistics.median(warm):11.2f}s  {c.splitlines()[0][:60]}")
        print(f"median warm cell: {statistics.median(warm_all):.2f} s over {len(warm_all)} cells x {args.repeat}")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()
