"""``python -m pipeline.interop.fault_inside OUT CASE_JSON``: one fault case (``FaultCase`` as JSON: the case
as its caller made it, not only its name), run where this process is (inside the namespace ``fault_namespace``
made for it), its result written to ``OUT/NAME/case.json``; the working folder is the repository."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pipeline.interop.fault_kinds import FaultCase
from pipeline.interop.fault_run import run_here


def main(argv: list[str]) -> int:
    out, case = Path(argv[0]), FaultCase(**json.loads(argv[1]))
    result = run_here(case, out, os.environ, Path.cwd())
    (out / case.name / "case.json").write_text(json.dumps(result.as_dict(), indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
