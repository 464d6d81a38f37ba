"""`python -m gpurig.diagnose.threads`: the maintainer's commands for the index of resolved threads
(calibrate, measure, stats, table, show); see `threads.py` for the index itself."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from gpurig.diagnose.threads import (
    ALTERNATIVE,
    CLASSES_FILE,
    ENTRY_RECORD_FILE,
    FLOOR,
    SURE,
    TOKENS_FILE,
    load_cases,
    measure_splits,
    parse_classes,
    raw_example_cases,
    score_for,
    shipped_record,
    threads_dir,
    tokens_key,
    write_calibration,
    write_entry_record,
)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... show | head` ends quietly
    ap = argparse.ArgumentParser(prog="python -m gpurig.diagnose.threads",
                                 description="Maintain the index of resolved threads shipped with gpurig.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("calibrate", help="rewrite tokens.json, calibration.toml and the catalogue's errors.json "
                   "(after any change to the threads or the catalogue)")
    sub.add_parser("stats", help="how many threads, per split and per class")
    m = sub.add_parser("measure", help="explain's rates on the development part (leave-one-out) and the test part")
    m.add_argument("--test", action="store_true", help="also measure the held-out test part (report it; never tune on it)")
    m.add_argument("--wrong", action="store_true", help="list the development threads answered wrongly")
    sub.add_parser("table", help="the catalogue as a Markdown table (for docs/explain.md)")
    sh = sub.add_parser("show", help="print development threads (the test part is never shown)")
    sh.add_argument("--class", dest="cls", help="only this class")
    args = ap.parse_args(argv)
    cases = load_cases()
    if args.cmd == "calibrate":
        from gpurig.knowledge import loaders

        files = loaders.catalogue_files()
        Path(str(resources.files("gpurig.knowledge").joinpath(loaders.CATALOGUE_SNAPSHOT))).write_text(
            loaders.snapshot_text(files), encoding="utf-8")
        classes = parse_classes(threads_dir().joinpath(CLASSES_FILE).read_text(encoding="utf-8"))
        Path(str(threads_dir().joinpath(TOKENS_FILE))).write_text(
            json.dumps({"key": tokens_key(), **shipped_record(cases, raw_example_cases()), "classes": classes},
                       separators=(",", ":")) + "\n", encoding="utf-8")  # (ASCII: read and parsed twice as fast)
        path = Path(str(threads_dir().joinpath("calibration.toml")))
        fit = write_calibration(path, cases)
        if fit is not None:
            print(f"calibration: a {fit.a}, b {fit.b}, scores {fit.low}..{fit.high}, at most {fit.cap}; "
                  + ", ".join(f"{p:.0%} from score {s:.3f}" if (s := score_for(p, fit)) is not None else f"never {p:.0%}"
                              for p in (ALTERNATIVE, FLOOR, 0.5, SURE)))
        record = write_entry_record(Path(str(threads_dir().joinpath(ENTRY_RECORD_FILE))), cases)
        low = sorted((r / a, k, a) for k, (a, r) in record.items() if a >= 3 and r / a < 0.7)
        print(f"catalogue entries: {len(record)} matched development threads; right under 70% of the time: "
              + (", ".join(f"{k} {p:.0%} of {a}" for p, k, a in low) or "none"))
        return 0
    if args.cmd == "measure":
        for name, rates in measure_splits(cases, test=args.test).items():
            print(f"{name}: {json.dumps(rates.to_dict())}")
            if args.wrong and name == "dev":
                for w in rates.wrong:
                    print("   ", json.dumps(w))
        return 0
    if args.cmd == "table":
        from gpurig.diagnose.catalogue import load_catalogue

        counts: dict[str, int] = {}
        for c in cases:
            counts[c.cls] = counts.get(c.cls, 0) + 1
        print("| id | what | role | threads | a real example |")
        print("|---|---|---|---|---|")
        for e in sorted(load_catalogue(), key=lambda e: e.id):
            example = " / ".join(e.examples[0].strip().splitlines()[-2:])
            example = example if len(example) <= 110 else example[:107] + "..."
            cell = example.replace("|", "\\|").replace("`", "'")
            print(f"| `{e.id}` | {e.title.replace('|', '/')} | {e.role} | {counts.get(e.id, 0)} | `{cell}` |")
        return 0
    if args.cmd == "show":
        for c in cases:
            if c.split == "dev" and (args.cls is None or c.cls == args.cls):
                print(json.dumps({"id": c.id, "url": c.url, "class": c.cls, "title": c.title, "log": c.log,
                                  "cause": c.cause, "fix": c.fix}, ensure_ascii=False))
        return 0
    by_split: dict[str, int] = {}
    by_class: dict[str, int] = {}
    for c in cases:
        by_split[c.split] = by_split.get(c.split, 0) + 1
        by_class[c.cls] = by_class.get(c.cls, 0) + 1
    print(f"{len(cases)} threads: " + ", ".join(f"{k} {v}" for k, v in sorted(by_split.items())))
    for k, v in sorted(by_class.items(), key=lambda kv: -kv[1]):
        print(f"  {v:4d}  {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
