"""Collection: run a model over a task's examples, record activations, label, and write a store.

This is the glue between the model (``acute.models``), the recorder (``acute.extraction``),
the task layer (``acute.tasks``) and the store (``acute.store``). It is resumable: records
already committed to ``out_dir`` are skipped, so an interrupted collection (Ctrl-C, a crash)
is continued by running the same command again.

Three ways to fill a store share the commit loop: :func:`collect` generates answers to a task's
examples; :func:`collect_responses` records responses produced elsewhere, given with their
prompts and labels in a JSONL file, by teacher forcing (:func:`acute.extraction.record_responses`);
:func:`rerecord_store` teacher-forces the generations of an existing store again (e.g. with
another pooling) without regenerating.
"""

from .generated import collect
from .records import CollectSummary, collection_settings
from .rerecord import rerecord_store
from .responses import ResponseRow, collect_responses, read_responses

__all__ = ["CollectSummary", "ResponseRow", "collect", "collect_responses", "collection_settings", "read_responses",
           "rerecord_store"]
