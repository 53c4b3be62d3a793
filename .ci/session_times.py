"""Print the per-session times of a `nox --report` file (the end of every CI log)."""

import json
import sys
from pathlib import Path

path = Path(sys.argv[1])
if not path.is_file():
    print(f"no session report at {path}: nox stopped before it could write one")
    sys.exit(0)
sessions = json.loads(path.read_text())["sessions"]
total = 0.0
print("\nsession times")
for s in sessions:
    total += s["duration"]
    print(f"  {s['name']:<12} {s['result']:<8} {s['duration'] / 60:5.1f} min")
print(f"  {'all':<12} {'':<8} {total / 60:5.1f} min")
