"""Writing a benchmark report and its data next to the earlier ones."""
import json
import os


def write_report_files(doc, markdown, out_dir, prefix):
    """Writes <prefix>-<date>.md and .json (-2, -3, ... if taken: an earlier
    run is never overwritten). Returns both paths."""
    os.makedirs(out_dir, exist_ok=True)
    stem, n = f"{prefix}-{doc['date'][:10]}", 1
    while os.path.exists(os.path.join(out_dir, stem + ".md")):
        n += 1
        stem = f"{prefix}-{doc['date'][:10]}-{n}"
    md_path, json_path = os.path.join(out_dir, stem + ".md"), os.path.join(out_dir, stem + ".json")
    with open(md_path, "w") as f:
        f.write(markdown)
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return md_path, json_path
