"""A throwaway process run before the timed workers: `python -m torchferry.check.warm JOB.json`.

The first process to import torch, a device's backend and the workload's libraries reads
them from disk; the next finds them in the page cache. The reference worker starts first,
so without this step it alone paid that cost and the cold-start figures favoured the target
by seconds. Here torch is imported, every device of the job is resolved (its backend
registered and loaded) and the workload is built once on the CPU; nothing is timed or
kept. A failure here is not reported: the timed worker that hits it reports it properly.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    import torch  # noqa: F401 - the import is the point

    from torchferry.harness import devices
    from torchferry.workloads.protocol import load_workload

    for name in job["devices"]:
        devices.resolve(name)
    load_workload(job["workload"], job["options"], job["source"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
