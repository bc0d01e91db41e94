"""`python -m benchmarks.merge A.json B.json ... [--out STEM]`: one report from the JSON files of several runs.

Made for the parts of a split run (`python -m benchmarks --part K/N`), but any runs can be merged. Rows keep
the order of the files given; a (section, case, mode) measured twice keeps the later file's row (and says so
in the notes). The environment and the copy ceiling come from the first file that has them; differences in
device, torch, fastcomp or commit between the files are listed in the notes, since such numbers should not
share a table. Writes STEM.json, STEM.md and STEM.png (default: `<date>_<device>` beside the first file, i.e.
the name a single run would have had) and prints the markdown.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from benchmarks import run

COMPARED = ("device_name", "torch", "cuda", "python", "fastcomp", "fastcomp_file", "driver")


def _load(path: Path) -> dict:
    results = json.loads(path.read_text())
    if results.get("schema") != 1 or "rows" not in results or "meta" not in results:
        raise ValueError(f"{path}: not a benchmarks results file (schema 1)")
    return results


def merge(parts: list[dict], names: list[str]) -> dict:
    first = parts[0]
    meta = {key: first["meta"].get(key) for key in ("date", "started", "device", "effort", "timeout_s", "jobs", "git")}
    meta.update(command=" && ".join(p["meta"].get("command", "?") for p in parts),
                commands=[p["meta"].get("command") for p in parts], merged_from=names,
                sections=list(dict.fromkeys(s for p in parts for s in p["meta"].get("sections", []))),
                part=None, budget_s=None, notes=[], plan=[], skipped=[])
    notes = meta["notes"]
    rows: dict[tuple, dict] = {}
    for name, part in zip(names, parts):
        for note in part["meta"].get("notes", []):
            # "Part k of n" and a missing chart are true of that file only
            if not note.startswith(("Part", "No chart:")) and note not in notes:
                notes.append(note)
        meta["plan"] += [key for key in part["meta"].get("plan", []) if key not in meta["plan"]]
        meta["skipped"] += part["meta"].get("skipped") or []
        for row in part["rows"]:
            key = (row["section"], row["case"], row["mode"])
            if key in rows:
                notes.append(f"{' '.join(key)} was measured in more than one file; the row from {name} is kept.")
            rows[key] = row
    measured = {key for key, row in rows.items() if not (row.get("cold") or {}).get("budget_cut")}
    meta["skipped"] = [s for s in meta["skipped"] if (s["section"], s["case"], s["mode"]) not in measured]
    meta["started"] = min((p["meta"].get("started") or "" for p in parts), default=None) or None

    environment = next((p["environment"] for p in parts if p.get("environment")), None)
    for name, part in zip(names, parts):
        env = part.get("environment") or {}
        differing = [k for k in COMPARED if environment and env and env.get(k) != environment.get(k)]
        if differing:
            notes.append(f"{name} differs from the first file in {', '.join(differing)}: "
                         + ", ".join(f"{k}={env.get(k)!r}" for k in differing) + ".")
        commit, first_commit = (part["meta"].get("git") or {}), (meta["git"] or {})
        if commit.get("commit") != first_commit.get("commit") or commit.get("dirty") != first_commit.get("dirty"):
            notes.append(f"{name} was measured at commit {commit.get('commit')} (dirty: {commit.get('dirty')}), "
                         f"the first file at {first_commit.get('commit')} (dirty: {first_commit.get('dirty')}).")
        if part["meta"].get("effort") != meta["effort"]:
            notes.append(f"{name} used a different effort: {part['meta'].get('effort')}.")
    ceilings = [(name, p["copy_ceiling"]) for name, p in zip(names, parts)
                if isinstance(p.get("copy_ceiling"), dict) and "gb_per_s" in p["copy_ceiling"]]
    copy_ceiling = ceilings[0][1] if ceilings else next((p.get("copy_ceiling") for p in parts if p.get("copy_ceiling")),
                                                       None)
    if len(ceilings) > 1:
        notes.append("Copy ceilings measured by the parts: " + ", ".join(f"{c['gb_per_s']:.0f} GB/s ({n})"
                                                                          for n, c in ceilings)
                     + f"; the table uses the first.")
    notes.append(f"Merged from {len(parts)} files: {', '.join(names)}.")
    return {"schema": 1, "meta": meta, "environment": environment, "copy_ceiling": copy_ceiling,
            "rows": list(rows.values())}


def default_stem(first_path: Path, results: dict) -> Path:
    """The first file's name without its `_partKofN` (and `_2`...) suffix, made unique in its folder."""
    match = re.match(r"(\d{4}-\d{2}-\d{2})_(.+?)(_part\d+of\d+|_redo)?(_\d+)?$", first_path.stem)
    date, slug = (match.group(1), match.group(2)) if match else (results["meta"]["date"], "merged")
    return run.output_stem(first_path.parent, date, slug)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.merge", description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="results JSON files, e.g. the parts of a split run")
    parser.add_argument("--out", type=Path, help="output path without suffix (default: the unsplit run's name "
                                                 "beside the first file)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        parts = [_load(path) for path in args.files]
    except (OSError, ValueError) as error:
        print(f"python -m benchmarks.merge: {error}", file=sys.stderr)
        return 2
    results = merge(parts, [path.name for path in args.files])
    stem = args.out.with_suffix("") if args.out else default_stem(args.files[0], results)
    return run.finish(results, run.Reports(results, stem))


if __name__ == "__main__":
    sys.exit(main())
