"""Write the large class's gather entry of one row of the shipped table from a search at 524,288 rows.

usage: python merge_large.py ROW FILE.json   (ROW: intel-cpu)
The winner of the file's rounds (tuning.class_entries: the median's best) becomes the row's
classes -> large -> kernels/families -> gather; every other entry is untouched.
"""
import json
import sys
from pathlib import Path

from portkern import tuning
from portkern.runs import load_run

PATH = Path(tuning.__file__).parent / "data" / "tuned_defaults.json"
row_name, path = sys.argv[1], sys.argv[2]
data = json.loads(PATH.read_text())
recs = [r for r in load_run(path).records if r.kernel == "gather" and r.status == "pass"]
new = tuning.class_entries(recs)["large"]
part = data["rows"][row_name].setdefault("classes", {}).setdefault("large", {"kernels": {}, "families": {}, "sizes": []})
part["kernels"]["gather"] = tuning._strip(new["kernels"]["gather"])
part["families"]["gather"] = dict(new["families"]["gather"])
part["sizes"] = sorted(set(part["sizes"]) | set(new["sizes"]))
print(row_name, "large", part)
PATH.write_text(json.dumps(data, indent=1) + "\n")
