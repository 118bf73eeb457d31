"""``cl-graft run`` refuses a bad ``--stream`` before it imports the harness: the command's options are built
from the strategies' entries without Avalanche (about 7 s to import), and the runner is imported only once the
stream and every option are checked."""
from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
from click.testing import CliRunner
from cl_graft.cli import main
result = CliRunner().invoke(main, sys.argv[1:])
print(json.dumps({"code": result.exit_code, "output": result.output,
                  "avalanche": sorted(m for m in sys.modules if m.split(".")[0] == "avalanche")}))
"""


def test_a_bad_stream_is_refused_before_avalanche_is_imported(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", CODE, "run", "--stream", "no-such-task", "--data-dir",
                           str(tmp_path), "--out", str(out)], capture_output=True, text=True, check=True, timeout=300)
    seen = json.loads(done.stdout)
    assert seen["code"] == 2 and seen["output"].startswith("error: unknown task 'no-such-task'"), seen["output"]
    assert seen["output"].strip().count("\n") == 0, seen["output"]
    assert seen["avalanche"] == [] and not out.exists(), seen["avalanche"][:5]
