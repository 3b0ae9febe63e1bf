"""Writing a benchmark report and its data next to the earlier ones."""
import json
import os
import sys


def unused_stem(out_dir, prefix, day):
    """<out_dir>/<prefix>-<day>, or -2, -3, ... after it if a report has that
    name already: an earlier run is never overwritten."""
    os.makedirs(out_dir, exist_ok=True)
    stem, n = f"{prefix}-{day}", 1
    while os.path.exists(os.path.join(out_dir, stem + ".md")):
        n += 1
        stem = f"{prefix}-{day}-{n}"
    return os.path.join(out_dir, stem)


def write_report_files(doc, markdown, out_dir, prefix):
    """Writes <prefix>-<date>.md and .json (see unused_stem). Returns both
    paths."""
    stem = unused_stem(out_dir, prefix, doc["date"][:10])
    md_path, json_path = stem + ".md", stem + ".json"
    with open(md_path, "w") as f:
        f.write(markdown)
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return md_path, json_path


def _log(message):
    print(message, file=sys.stderr, flush=True)


def publish_report(doc, render, out_dir, prefix, write, tool):
    """Prints the report, writes its files (unless not `write`), repeats its
    problems on stderr. Returns the exit status: 1 if it has problems."""
    markdown = render(doc)
    print(markdown)
    if write:
        md_path, json_path = write_report_files(doc, markdown, out_dir, prefix)
        _log(f"{tool}: wrote {md_path} and {json_path}")
    for p in doc["problems"]:
        _log(f"{tool}: !!! {p}")
    return 1 if doc["problems"] else 0


def rerender_report(json_path, render, write, tool):
    """The Markdown of a saved report from its JSON (the same data, the
    current wording), written beside it unless not `write`. Returns the
    exit status: 1 if the report has problems."""
    with open(json_path) as f:
        doc = json.load(f)
    markdown = render(doc)
    print(markdown)
    if write:
        md_path = os.path.splitext(json_path)[0] + ".md"
        with open(md_path, "w") as f:
            f.write(markdown)
        _log(f"{tool}: wrote {md_path}")
    return 1 if doc["problems"] else 0
