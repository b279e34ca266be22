"""A function-calling store the tests collect themselves (imported by them): a tiny model whose
chat template shows tools (:data:`acute.testing.TOOLS_TEMPLATE`), BFCL ``simple_python`` rows in
BFCL's own file format (20 functions, 2 questions each, so folds grouped by tool set have
groups to split), collected with ``acute collect``, relabelled with hash labels, and a
``visible-all`` stack exported from it ``--for serve`` (it reads the reply's calls counted
against the offered tools)."""

from __future__ import annotations

import json
from pathlib import Path

from acute.cli import main
from acute.testing import TOOLS_TEMPLATE, save_tiny_model
from smaller import small_searches  # tests/smaller.py
from stores import relabel  # tests/stores.py

N_FUNCTIONS = 20


def _function(k: int) -> dict:
    return {"name": f"tool_{k}", "description": f"Tool number {k}.",
            "parameters": {"type": "dict", "properties": {"x": {"type": "integer", "description": "A number."},
                                                          "unit": {"type": "string", "description": "A unit.",
                                                                   "default": "m"}},
                           "required": ["x"]}}


def write_rows(folder: Path) -> Path:
    """BFCL_v4_simple_python.json and its possible answers: question 2k + j calls tool_k."""
    questions, answers = [], []
    for k in range(N_FUNCTIONS):
        for j in range(2):
            rid = f"simple_python_{2 * k + j}"
            questions.append({"id": rid, "question": [[{"role": "user", "content": f"Use tool {k} on {j + 3}."}]],
                              "function": [_function(k)]})
            answers.append({"id": rid, "ground_truth": [{f"tool_{k}": {"x": [j + 3], "unit": ["", "m"]}}]})
    (folder / "possible_answer").mkdir(parents=True, exist_ok=True)
    (folder / "BFCL_v4_simple_python.json").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (folder / "possible_answer" / "BFCL_v4_simple_python.json").write_text("".join(json.dumps(a) + "\n" for a in answers))
    return folder


def build(root: Path) -> dict[str, Path]:
    """``{"model", "data", "store", "stack"}`` under ``root``."""
    model = save_tiny_model(root / "model", chat_template=TOOLS_TEMPLATE, max_position_embeddings=2048)
    data = write_rows(root / "bfcl")
    assert main(["collect", "--model", str(model), "--task", "bfcl", "--data", str(data), "--out", str(root / "raw"),
                 "--max-new-tokens", "6", "--batch-size", "1", "--quiet", "--task-option",
                 "categories=simple_python"]) == 0
    relabel(root / "raw", root / "store")
    with small_searches():
        assert main(["export", "--store", str(root / "store"), "--estimator", "visible-all", "--for", "serve",
                     "--out", str(root / "stack"), "--n-estimators", "10"]) == 0
    return {"model": model, "data": data, "store": root / "store", "stack": root / "stack"}
