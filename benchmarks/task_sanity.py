"""Sanity run of the task layer on a real model (issue: tasks).

For each benchmark in ../shared/data, collect N rows with greedy decoding, then print the
accuracy, seconds per record, the label distribution and unparseable answers, and write
20 labelled generations per task to <out>/spot_check.md for reading by a person.

    python benchmarks/task_sanity.py --rows 200 --out runs/sanity
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

TASKS = {  # task -> (data path relative to the data root, split)
    "triviaqa": ("triviaqa/validation.jsonl", None),
    "sciq": ("sciq/test.jsonl", None),
    "sciq-mc": ("sciq/test.jsonl", None),
    "truthfulqa": ("truthfulqa/validation.jsonl", None),
    "truthfulqa-gen": ("truthfulqa/validation.jsonl", None),
    "mmlu": ("mmlu", "test"),
    "apigen": ("apigen/test.jsonl", None),
    "scitldr": ("scitldr/test.jsonl", None),
    "default": (None, None),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--tasks", nargs="*", default=list(TASKS),
                    help="task names, each optionally with its own row count: mmlu:100")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", default="runs/sanity")
    args = ap.parse_args()

    from acute.collect import collect
    from acute.store.generation import GenerationSettings
    from acute.models import load_model
    from acute.store import open_store
    from acute.tasks import get_task

    model, tok = load_model(args.model)
    out = Path(args.out)
    rows, spots = [], ["# Spot check: 20 labelled generations per task\n"]
    for spec in args.tasks:
        name, _, n_rows = spec.partition(":")
        n_rows = int(n_rows) if n_rows else args.rows
        rel, split = TASKS[name]
        task = get_task(name)
        data = None if rel is None else str(Path(args.data_root) / rel)
        examples = task.load(data, split=split, limit=n_rows)
        s = collect(model, tok, task, examples, out / name, GenerationSettings(batch_size=args.batch_size))
        store = open_store(out / name)
        rows.append((name, s.records, s.accuracy, s.seconds_per_record, int(store.correct.sum()),
                     int((~store.correct).sum()), s.unparseable, s.mean_raw_confidence))
        spots.append(f"\n## {name}\n")
        for r in random.Random(0).sample(store.records, min(20, len(store))):
            gen = r["generation"].replace("\n", " ")[:200]
            spots.append(f"- `{r['id']}` {'RIGHT' if r['correct'] else 'wrong'} | answer={r['answer']!r} "
                         f"| gold={r['gold'][:3]} | generation: {gen}")
    table = ["| task | records | accuracy | s/record | correct | wrong | unparseable | mean raw conf |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n, k, acc, spr, c, w, u, rc in rows:
        table.append(f"| {n} | {k} | {acc:.3f} | {spr:.2f} | {c} | {w} | {u} | {rc:.3f} |")
    (out / "sanity.md").write_text("\n".join(table) + "\n")
    (out / "spot_check.md").write_text("\n".join(spots) + "\n")
    print("\n".join(table))
    print(f"tables: {out / 'sanity.md'}; spot checks: {out / 'spot_check.md'}")


if __name__ == "__main__":
    main()
