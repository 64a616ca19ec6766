"""Write gather's entry of every size class of one row of the shipped table from a search at one size per class.

usage: python merge_classes.py ROW FILE.json   (ROW: intel-cpu)
The winner of the file's rounds per class (tuning.class_entries: the median's best) becomes the row's
classes -> CLASS -> kernels/families -> gather; every other entry is untouched.
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
for cls, new in tuning.class_entries(recs).items():
    part = data["rows"][row_name].setdefault("classes", {}).setdefault(cls, {"kernels": {}, "families": {}, "sizes": []})
    part["kernels"]["gather"] = tuning._strip(new["kernels"]["gather"])
    part["families"]["gather"] = dict(new["families"]["gather"])
    part["sizes"] = sorted(set(part.get("sizes", [])) | set(new["sizes"]))
    print(row_name, cls, part["kernels"]["gather"])
PATH.write_text(json.dumps(data, indent=1) + "\n")
