"""MMLU: 4-option multiple choice, k-shot (default 5) from the dev split of the same subject.

Data: the original per-subject headerless CSVs (``question, A, B, C, D, answer``) in
``<root>/[data/]<split>/<subject>_<split>.csv`` or the normalised ``<split>.jsonl``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .base import (Example, clean_texts, read_csv_rows, read_jsonl, require)
from .choice import MultipleChoiceTask
from ..errors import InputError, TaskDataError

__all__ = ["MMLUTask", "parse_mmlu_csv_row"]

_SPLIT_SUFFIX = re.compile(r"^(.+)_(dev|val|test|train|auxiliary_train)$")


def parse_mmlu_csv_row(row: list[str], where: str, subject: str, split: str, index: int) -> Example:
    """An Example from one MMLU CSV row; ``TaskDataError`` for a wrong column count, an empty
    question/option or an answer letter outside A-D. Id: ``mmlu-<subject>-<split>-<index:04d>``."""
    if len(row) != 6:
        raise TaskDataError(f"{where}: expected 6 columns (question, A, B, C, D, answer), got {len(row)}")
    question = row[0].strip()
    if not question:
        raise TaskDataError(f"{where}: empty question")
    choices = [c.strip() for c in row[1:5]]
    for letter, c in zip("ABCD", choices):
        if not c:
            raise TaskDataError(f"{where}: empty option {letter}")
    answer = row[5].strip()
    if answer not in ("A", "B", "C", "D"):
        raise TaskDataError(f"{where}: answer letter {row[5]!r} is not one of A, B, C, D")
    label = "ABCD".index(answer)
    return Example(id=f"mmlu-{subject}-{split}-{index:04d}", question=question,
                   answers=[choices[label]], choices=choices, label=label,
                   incorrect=[c for i, c in enumerate(choices) if i != label],
                   meta={"subject": subject})


def _parse_mmlu_jsonl(obj: dict, where: str) -> Example:
    qid = require(obj.get("id"), "'id'", where)
    question = require(obj.get("question"), "'question'", where)
    choices = clean_texts(require(obj.get("choices"), "'choices'", where), where, "'choices'",
                          dedupe=False)
    if len(choices) != 4:
        raise TaskDataError(f"{where}: MMLU rows need 4 choices, got {len(choices)}")
    label = obj.get("label", obj.get("answer"))
    if isinstance(label, str) and label.strip() in ("A", "B", "C", "D"):
        label = "ABCD".index(label.strip())
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < 4:
        raise TaskDataError(f"{where}: 'label' must be 0-3 (or an answer letter A-D), got {label!r}")
    answers = obj.get("answers")
    if answers and (not isinstance(answers, list) or str(answers[0]).strip() != choices[label]):
        raise TaskDataError(f"{where}: 'answers' {answers!r} disagrees with choices[label] "
                            f"{choices[label]!r}")
    subject = obj.get("subject")
    if not subject:
        m = re.match(r"^mmlu-(.+)-(?:dev|val|test|train)-\d+$", str(qid))
        subject = m.group(1) if m else "unknown"
    return Example(id=str(qid), question=question.strip(), answers=[choices[label]],
                   choices=choices, label=label,
                   incorrect=[c for i, c in enumerate(choices) if i != label],
                   meta={"subject": subject})


class MMLUTask(MultipleChoiceTask):
    """MMLU with k-shot prompts from the same subject's dev split.

    Options: ``shots`` (default 5; dev rows of the same subject, the example itself excluded when
    loading ``dev``), ``subjects`` (list or comma-separated names; ``None`` = all), ``mc_reply``.

    ``load(path, split)``: ``path`` is a folder or a file. A folder is searched for
    ``<split>.jsonl`` (normalised; shots from ``dev.jsonl`` next to it), else for the CSV folder
    ``<split>/`` or ``data/<split>/`` (or ``*_<split>.csv`` in the folder itself; shots from the
    sibling ``dev/`` folder). A single ``.csv`` file is one subject; its split is the file-name
    suffix (``anatomy_test.csv``). Splits: ``dev``, ``val`` (alias ``validation``), ``test``.
    """

    name = "mmlu"
    metadata_fields = ("subject",)
    description = "MMLU 4-option multiple choice, 5-shot from the subject's dev split, letter answer"
    data_hint = ("the MMLU data folder (data/{dev,val,test}/<subject>_<split>.csv, headerless) or "
                 "normalised <split>.jsonl, or one subject CSV / one JSONL file")
    data_folder = "mmlu"
    default_split = "test"
    split_aliases = {"validation": "val", "valid": "val"}
    options = {"shots": 5, "subjects": None}

    def header(self, ex: Example) -> str:
        subject = ex.meta.get("subject", "").replace("_", " ")
        about = f" about {subject}" if subject and subject != "unknown" else ""
        return (f"The following are multiple choice questions (with answers){about}. Answer with "
                "the letter of the correct option.")

    def settings(self) -> dict[str, Any]:
        s = super().settings()
        if isinstance(s.get("subjects"), str):
            s["subjects"] = self._subject_filter()
        return s

    def _subject_filter(self) -> list[str] | None:
        if self.subjects is None:
            return None
        if isinstance(self.subjects, str):
            return [s.strip() for s in self.subjects.split(",") if s.strip()]
        return list(self.subjects)

    # ---------------------------------------------------------------- reading
    def _read_csv_files(self, files: list[Path], split: str) -> list[Example]:
        out: list[Example] = []
        for f in files:
            m = _SPLIT_SUFFIX.match(f.stem)
            subject, file_split = (m.group(1), m.group(2)) if m else (f.stem, split)
            rows = ((ln, (i, row)) for i, (ln, row) in enumerate(read_csv_rows(f, header=False)))
            out += self._rows(
                rows,
                lambda _, ir, where, s=subject, sp=file_split: parse_mmlu_csv_row(ir[1], where, s, sp, ir[0]),
                lambda ln, f=f: f"{f}:{ln}")
        return out

    def _read_jsonl(self, path: Path) -> list[Example]:
        return self._rows(read_jsonl(path), lambda _, obj, where: _parse_mmlu_jsonl(obj, where),
                          lambda ln: f"{path}:{ln}")

    def _locate(self, path: Path, split: str) -> tuple[str, Any, Any]:
        """``("jsonl", file, dev_file)`` or ``("csv", [files], dev_folder)`` for ``split``."""
        if path.is_file():
            if path.suffix == ".jsonl":
                return "jsonl", path, path.parent / "dev.jsonl"
            if path.suffix == ".csv":
                m = _SPLIT_SUFFIX.match(path.stem)
                file_split = m.group(2) if m else split
                parent = path.parent
                dev = parent.parent / "dev" if parent.name == file_split else parent
                return "csv", [path], dev
            raise InputError(f"task 'mmlu': {path} is neither a .csv nor a .jsonl file")
        if (path / f"{split}.jsonl").is_file():
            return "jsonl", path / f"{split}.jsonl", path / "dev.jsonl"
        for base in (path, path / "data"):
            if (base / split).is_dir():
                files = sorted((base / split).glob(f"*_{split}.csv"))
                if files:
                    return "csv", files, base / "dev"
        files = sorted(path.glob(f"*_{split}.csv"))
        if files:
            return "csv", files, path
        raise FileNotFoundError(f"task 'mmlu': no data for split {split!r} in {path}; looked for "
                                f"{split}.jsonl, {split}/*_{split}.csv, data/{split}/*_{split}.csv "
                                f"and *_{split}.csv")

    def _read(self, path: Path, split: str) -> list[Example]:
        kind, source, dev = self._locate(path, split)
        examples = self._read_jsonl(source) if kind == "jsonl" else self._read_csv_files(source, split)
        wanted = self._subject_filter()
        if wanted is not None:
            known = sorted({ex.meta["subject"] for ex in examples})
            missing = sorted(set(wanted) - set(known))
            if missing:
                raise InputError(f"task 'mmlu': unknown subject(s) {missing}; subjects in {path}: {known}")
            examples = [ex for ex in examples if ex.meta["subject"] in set(wanted)]
        if self.shots < 0:
            raise InputError(f"shots must be >= 0, got {self.shots}")
        if self.shots == 0:
            return examples
        dev_examples = self._read_dev(kind, dev, {ex.meta["subject"] for ex in examples})
        by_subject: dict[str, list[Example]] = {}
        for d in dev_examples:
            by_subject.setdefault(d.meta["subject"], []).append(d)
        for ex in examples:
            subject = ex.meta["subject"]
            pool = [d for d in by_subject.get(subject, []) if d.id != ex.id]
            if not pool:
                raise FileNotFoundError(f"task 'mmlu': no dev rows for subject {subject!r} "
                                        f"(looked in {dev}); pass shots=0 for zero-shot prompts")
            ex.shots = tuple(pool[: self.shots])
            ex.meta["n_shots"] = len(ex.shots)
        return examples

    def _read_dev(self, kind: str, dev: Path, subjects: set[str]) -> list[Example]:
        hint = "; pass shots=0 for zero-shot prompts"
        if kind == "jsonl":
            if not dev.is_file():
                raise FileNotFoundError(f"task 'mmlu': {self.shots}-shot prompts need the dev split "
                                        f"{dev}{hint}")
            return self._read_jsonl(dev)
        files = [dev / f"{s}_dev.csv" for s in sorted(subjects)]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"task 'mmlu': {self.shots}-shot prompts need the dev split; "
                                    f"missing {', '.join(missing[:3])}{hint}")
        return self._read_csv_files(files, "dev")

