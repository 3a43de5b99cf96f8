"""A multiple-results model: one row per matrix size in the CSV named by MAD_OUTPUT_CSV."""

import csv
import os
import time

import numpy as np

rows = []
for size in (64, 128, 256):
    a = np.ones((size, size), dtype=np.float32)
    a @ a
    start = time.perf_counter()
    for _ in range(5):
        a @ a
    seconds = (time.perf_counter() - start) / 5
    rows.append({"model": f"n{size}", "performance": f"{2 * size ** 3 / seconds / 1e9:.3f}", "metric": "GFLOPS",
                 "size": size})
with open(os.environ.get("MAD_OUTPUT_CSV", "sweep_results.csv"), "w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=["model", "performance", "metric", "size"])
    writer.writeheader()
    writer.writerows(rows)
print(f"wrote {len(rows)} results")
