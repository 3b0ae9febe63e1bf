#!/bin/sh
# python3 -m json.tool over a ~4 MB generated document: parse, sort keys,
# pretty-print; the whole output is compared.
# Usage: json_tool_workload.sh PYTHON GEN_DATA TMPDIR
set -eu
py=$1 gen=$2 tmp=$3
"$py" "$gen" json 25000 >"$tmp/doc.json"
"$py" -m json.tool --sort-keys "$tmp/doc.json"
"$py" -m json.tool --compact "$tmp/doc.json" | cksum
