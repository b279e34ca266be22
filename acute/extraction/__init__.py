"""Record pooled hidden states of every layer while a causal LM generates.

The recorder attaches forward hooks to the decoder layers and the final norm of a transformers
causal LM and, *during* ``model.generate`` with the KV cache, keeps per sequence and per layer only
a running sum and a count of the hidden states it pools (memory independent of the number of
generated tokens; it never holds ``T x L x d`` per sample).

Layer indexing follows transformers' ``output_hidden_states``: index 0 is the input of the first
decoder layer (the embedding output, already scaled for Gemma, plus position embeddings for GPT-2),
index ``i`` the output of decoder layer ``i`` and index ``L`` the output of the final norm (not the
last layer's pre-norm residual).

Pooling modes (``pool``):

``"decoding"`` (default)
    the hidden states from which the generated tokens were decoded: the last prompt position
    (decodes the first token) and each generated position before the final one. One state per
    generated token, the final EOS included, so the mean is never empty.
``"generated"``
    the states at the generated tokens' own positions. The final token is never fed back to the
    model by ``generate``, so the recorder keeps each sequence alive for exactly one more decoding
    step after it finishes (its stopping criterion reports it finished one step late and
    ``generate`` runs with ``max_new_tokens + 1``); the token sampled in that extra step is
    discarded. This costs one extra forward step per batch and gives the same states as feeding
    the last token with the returned KV cache.

Besides the mean over these pooled positions (``layer_means``) the recorder keeps, per layer, two
single states (``Generation.last_prompt`` and ``Generation.last_answer``, float32 ``[L+1, d]``,
same indexing):

``last_prompt``
    the state at the prompt's last token (position ``P - 1`` of ``prompt + answer``, ``P`` the
    prompt's length), the one that decodes the first answer token; in both modes (``"generated"``
    does not pool it but records it). With a shared prefix it is the last position of the first
    forward over the row's own prompt tokens.
``last_answer``
    the state at the last pooled position: ``"decoding"``: position ``P + T - 2`` (``T`` answer
    tokens), the one that decoded the final token (for an answer ending in EOS the position of the
    token before the EOS, where the model decided to stop; for a one-token answer it is
    ``last_prompt``); ``"generated"``: position ``P + T - 1``, the final token's own.

Devices and dtypes: each layer's running sum is allocated on the device where that layer's hidden
states appear, so a model split over several devices (``device_map="auto"``, accelerate's
dispatch hooks) is recorded without moving any hidden state between devices; per step only the
row weights and picked positions (:class:`~acute.extraction.pooler.LayerPooler`) are copied to each device once. Sums are float32 (or float64) whatever the
model's dtype, so bfloat16 / float16 states are accumulated without half-precision rounding, and
they are gathered to the CPU in float64 once, after ``generate`` returns.

Per-sequence termination (EOS ids and stop strings) is decided by the recorder's own
``StoppingCriteria``, so the hooks know exactly which rows are finished before the next forward;
finished rows stop accumulating while the rest of the batch goes on. For plain greedy decoding
the recorder runs its own loop (the inputs ``generate`` would build: positions from the attention
mask, the same KV cache) and drops finished rows from the batch and the cache after each step,
so a batch's cost follows its rows' own lengths; the hooks then add each row's state at its
original index. Each generated token's
log-probability is taken under the model's raw distribution: ``log_softmax`` of the logits the model
returns (captured by a forward hook on the model, i.e. before any logits processor such as
temperature or top-k; Gemma's final-logit soft-capping, part of the model, is included), gathered
once the token is known.

The states at a prompt's last token alone (what a question-only probe reads before anything is
generated) come from one forward pass over the prompt (``prompt_states.record_prompt_states``),
with the same hooks: they equal the recorder's ``last_prompt`` up to float rounding.

Responses produced elsewhere are recorded by teacher forcing (``responses.record_responses``): one
forward pass over prompt + response, pooled by the same :class:`~acute.extraction.pooler.LayerPooler` (weights over the
fed positions instead of one position per decoding step), gives the same pooled states, token
log-probs and raw confidence as the recorder does while generating those tokens.
"""

from .continuations import continuation_logprobs, token_continuation_logprobs
from .generate import Generation, generate_after_prompt_pass, generate_and_record, generate_with
from .layers import context_window
from .prompt_states import PromptState, record_prompt_states
from .recorder import HiddenStateRecorder
from .responses import record_responses

__all__ = [
    "Generation",
    "HiddenStateRecorder",
    "PromptState",
    "context_window",
    "continuation_logprobs",
    "generate_after_prompt_pass",
    "generate_and_record",
    "generate_with",
    "record_prompt_states",
    "record_responses",
    "token_continuation_logprobs",
]
