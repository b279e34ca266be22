"""Protocol study: verbalized vs token confidence under explicit measurement choices.

A comparison "is verbalized confidence better calibrated than token probability?" depends on
choices that papers rarely state. This module makes each one an explicit setting, measures the
signed gap ``g = metric(c_verb) - metric(c_tok)`` (positive: the verbalized confidence is *worse*
calibrated) for every combination, and reports how much ``g`` moves when one choice is toggled.

Settings (paper names)
----------------------
* **elicitation provenance**: the answer the model is asked to rate: its own ``generated``
  answer, or a provided ``gold``, ``plausible_wrong`` (the task's first plausible wrong answer)
  or ``wrong_type`` answer (an answer of another type). The elicitation template is fixed
  (:mod:`acute.protocol.verbalize`), greedy decoding.
* **scored answer**: whose token probability is the token confidence: the model's
  ``generated`` answer, or the ``gold`` reference answer by teacher forcing.
* **token readout**: ``T1`` = geometric mean of the answer span's token probabilities
  ``exp(mean(log p))``; ``T2`` = probability of the first answer token; ``product`` = the
  product of all span probabilities ``exp(sum(log p))`` (recorded and tabulated; the readout
  shift compares T1 and T2 as in the paper).
* **conditioning context**: the token probabilities are measured under the ``query`` (the
  task's own prompt, the text the model answered) or under the ``verbal`` prefix (the
  verbalization prompt up to and including the answer: the very text the model saw when it
  verbalized). The verbalization prompt shows the question as the task shows it to a base
  model, without the task's answering instruction and demonstrations
  (:func:`acute.protocol.verbalize.question_text`), so the two contexts differ by those (and, for base
  models, by ``Answer:`` vs ``Proposed answer:``); ``counts.n_context_identical`` reports how many generated
  answers had the same text before them in both contexts (a no-op axis would show there).
* **estimator**: 10-bin ``ECE``, ``KDE-ECE``, ``KS-Cal``, ``smECE``; ``Brier``, ``NLL`` and
  ``AUROC`` as robustness metrics (for AUROC higher is better, so ``g < 0`` there means the
  verbalized confidence ranks worse).

Which triple each cell compares
-------------------------------
Every cell compares two confidences *about the same answer*, against that answer's correctness,
on the same rows (so a paired bootstrap over rows gives the interval of ``g``):

* ``scored = generated``: one row per example whose generation is usable. ``c_verb`` = the
  verbalized confidence elicited on the generated answer (provenance ``generated``); ``c_tok`` =
  the readout of the generated answer's teacher-forced token log-probs under the chosen context;
  label = the task's correctness of the generated answer (``task.is_correct``).
* ``scored = gold``: the provided-answer rows pooled, one row per (example, provided answer):
  gold (label 1), plausible-wrong (label 0) and wrong-type (label 0), where the task has such an
  answer. ``c_verb`` = the verbalized confidence elicited on *that* provided answer; ``c_tok`` =
  the readout of *that* answer's teacher-forced log-probs under the chosen context; label known
  by construction.

Why not pair ``c_verb`` on the generated answer with the probability of the gold answer: the
two would then rate different answers, and ``P(gold)`` is not a probability that the generated
answer is correct; comparing their calibration against one label would mix the scored-answer
choice with a change of what is being rated. Pooling the wrong provided answers with the gold
one keeps both classes present (a gold-only set has every label 1). The provided answers'
token log-probs and verbalizations are all stored per record, so other pairings can be
recomputed from ``protocol.json``.

Intervals resample rows; in the pooled ``gold`` cells an example contributes up to three rows,
so those intervals treat rows as independent (a cluster bootstrap over examples would be
somewhat wider).

A row enters a cell only when its verbalization parsed and its answer was scored under *both*
contexts, so toggling context, readout or estimator never changes the rows. A reply without a
parseable number is a *parse failure*: counted per cell, excluded, never replaced; when every
elicitation of a cell failed the cell reads ``n/a: 100% parse failures``. An answer that
tokenizes to nothing (e.g. an empty generation) and a prompt beyond the context window are
counted and excluded with a warning.

Outputs of :func:`run_protocol`: ``protocol.json`` (settings, templates, wall time, every
per-record value: ids, correctness, generated answer, raw verbalization text and ``c_verb`` per
provenance, token log-probs per (answer, context); plus the computed cells) and ``protocol.md``
(gap table with paired-bootstrap intervals, shift table, provenance table, reporting checklist,
templates). The answers live in a store (``store/``, or one passed in and reused) and the
per-record results in resumable, atomically committed shards (``records/``,
:class:`~acute.protocol.records.RecordShards`); :func:`analyze_protocol` recomputes both files
from the shards alone. :func:`write_protocol_report` combines several runs into the same tables.

The names below are the package's public API (docs/api.md): running, re-analysing, loading and
reporting a study; its settings (:mod:`acute.protocol.settings`: ``SCORED``, ``READOUTS``,
``CONTEXTS``, ``ESTIMATORS``, ...) and the analysis' pieces (:mod:`acute.protocol.analysis`)
are imported from their modules.
"""

from .render import load_protocol, write_protocol_report
from .runner import ProtocolResult, analyze_protocol, run_protocol

__all__ = ["ProtocolResult", "analyze_protocol", "load_protocol", "run_protocol", "write_protocol_report"]
