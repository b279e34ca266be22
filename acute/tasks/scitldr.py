"""SciTLDR-A: zero-shot one-sentence summary (TL;DR) of a paper abstract, labelled by ROUGE-L.

Data: the original SciTLDR-A JSONL (``source`` sentences, ``target`` TLDRs, ``paper_id``) or the
normalised JSONL (``id``, ``source``, ``targets``). A folder is searched for ``<split>.jsonl``,
then ``SciTLDR-A/<split>.jsonl``. Splits: ``train``, ``dev`` (alias ``validation``), ``test``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TaskDataError
from .base import Example, Task, clean_texts, find_file, read_jsonl
from .normalize import first_line, strip_answer_prefix
from .rouge import best_rouge_l_f1
from ..validation import check_level
from .answer_types import assign_wrong_types

__all__ = ["SciTLDRTask", "parse_scitldr_row"]


def parse_scitldr_row(obj: dict, where: str) -> Example:
    """An Example from an original (``paper_id``/``target``) or normalised (``id``/``targets``) row."""
    pid = obj.get("id", obj.get("paper_id"))
    if pid is None or str(pid).strip() == "":
        raise TaskDataError(f"{where}: missing 'paper_id' (or 'id')")
    if "source" not in obj:
        raise TaskDataError(f"{where}: missing 'source'")
    source = clean_texts(obj["source"], where, "'source'", dedupe=False) if obj["source"] else []
    if not source:
        raise TaskDataError(f"{where}: empty 'source'")
    targets = obj.get("targets", obj.get("target"))
    if targets is None:
        raise TaskDataError(f"{where}: missing 'target' (or 'targets')")
    targets = clean_texts([targets] if isinstance(targets, str) else targets, where, "targets")
    if not targets:
        raise TaskDataError(f"{where}: empty gold answer (no non-empty target)")
    return Example(id=str(pid), question=" ".join(source), answers=targets,
                   payload={"source": source})


class SciTLDRTask(Task):
    """SciTLDR-A summaries: correct iff the best ROUGE-L F1 to a target is >= ``threshold``."""

    name = "scitldr"
    description = ("SciTLDR-A: one-sentence summary of an abstract, zero-shot; correct iff ROUGE-L F1 "
                   "to the best target >= threshold (0.3)")
    data_hint = ("SciTLDR-A <split>.jsonl (original: source/target/paper_id, or normalised: "
                 "id/source/targets), or a folder holding it or SciTLDR-A/")
    data_folder = "scitldr"
    default_split = "test"
    split_aliases = {"validation": "dev", "val": "dev", "valid": "dev"}
    max_new_tokens = 64
    stop_strings = ("\n",)
    options = {"threshold": 0.3, "n_plausible_wrong": 3}

    def _read(self, path: Path, split: str) -> list[Example]:
        check_level(self.threshold, f"task {self.name}: option threshold", "the ROUGE-L F1 a summary needs",
                    closed=True)
        if path.is_dir():
            path = find_file(path, [f"{split}.jsonl", f"SciTLDR-A/{split}.jsonl"], self.name, split)
        return self._rows(read_jsonl(path), lambda _, obj, where: parse_scitldr_row(obj, where),
                          lambda ln: f"{path}:{ln}")

    def _assign_wrong_types(self, examples: list[Example]) -> list[Example]:
        """Every answer is a free-text summary, so the typer cannot tell them apart: the wrong-type
        answer is the first TLDR of another paper (a fluent summary of the wrong thing)."""
        out = assign_wrong_types(examples, seed=self.seed, type_of=lambda ex: ("paper", ex.id),
                                 accept=self._is_wrong_reply)
        for ex in out:
            ex.meta["answer_type"] = "summary"
        return out

    def chat_messages(self, ex: Example) -> list[dict[str, str]]:
        return [{"role": "user", "content": "Write a one-sentence summary (TL;DR) of the following "
                 f"paper abstract. Reply with the sentence only.\n\nAbstract: {ex.question}"}]

    def plain_prompt(self, ex: Example) -> str:
        return f"Abstract: {ex.question}\nTL;DR:"

    def extract(self, ex: Example, generation: str) -> str | None:
        """The first non-empty line without a "TL;DR:"/"Summary:" prefix, or ``None`` when empty."""
        text = strip_answer_prefix(first_line(generation))
        return text or None

    def score(self, ex: Example, generation: str) -> float:
        """Best ROUGE-L F1 of the extracted summary against the targets (0.0 when empty)."""
        return best_rouge_l_f1(self.extract(ex, generation) or "", ex.answers)

    def is_correct(self, ex: Example, generation: str) -> bool:
        return self.score(ex, generation) >= float(self.threshold)

    def label_details(self, ex: Example, generation: str) -> dict[str, Any]:
        details = super().label_details(ex, generation)
        details["rouge_l"] = self.score(ex, generation)
        return details

    def plausible_wrong(self, ex: Example) -> list[str]:
        """Abstract sentences that score below the threshold against every target, best first
        (on-topic but labelled wrong); at most ``n_plausible_wrong``."""
        sentences = [" ".join(s.split()) for s in ex.payload["source"]]
        scored = [(self.score(ex, s), i, s) for i, s in enumerate(sentences)]
        wrong = sorted((t for t in scored if t[0] < float(self.threshold)), key=lambda t: (-t[0], t[1]))
        return [s for _, _, s in wrong[: int(self.n_plausible_wrong)]]

