"""Tiny, randomly initialised models and tokenizers for fast offline tests and examples.

They produce random text: use them to test shapes, equalities and determinism, not answers.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .errors import InputError

__all__ = ["CHATML_TEMPLATE", "TOOLS_TEMPLATE", "hash_label", "make_tiny_model", "make_tiny_tokenizer", "save_tiny_model"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: ChatML that shows tools (``apply_chat_template(tools=...)``) in a system turn and an assistant's
#: tool calls as ``<tool_call>`` blocks, as Qwen2.5's template does
TOOLS_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\n# Tools\n<tools>' }}"
    "{% for tool in tools %}{{ '\n' }}{{ tool | tojson }}{% endfor %}"
    "{{ '\n</tools><|im_end|>\n' }}{% endif %}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}"
    "{% for call in message.tool_calls or [] %}{{ '<tool_call>\n' }}{{ call.function | tojson }}"
    "{{ '\n</tool_call>' }}{% endfor %}{{ '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)



def hash_label(key) -> bool:
    """A label that depends on ``key`` alone (a record id, a row number or a text; compared as its
    ``str``): True for about half the keys, the same in every run and process. Tests give tiny
    random models' answers these labels, so a store has both classes and its folds can be fitted."""
    return hashlib.sha256(str(key).encode()).digest()[0] % 2 == 0


_CORPUS = [
    "What is the capital of France? The capital of France is Paris.",
    "The chemical symbol for gold is Au. Water is H2O.",
    "Question: How many legs does a spider have? Answer: 8",
    "Confidence: 0.9. The answer is B. 1 2 3 4 5 6 7 8 9 0 . , ? ! :",
    "Mars, Venus, Jupiter and Saturn are planets of the solar system.",
    "Shakespeare wrote Hamlet in about 1600 in London, England.",
]


def make_tiny_tokenizer(chat_template: bool = True):
    """A byte-level BPE tokenizer (~300 tokens) with ChatML special tokens, trained offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # heavy: tokenizers
    from transformers import PreTrainedTokenizerFast  # heavy: transformers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        padding_side="left",
    )
    if chat_template:
        hf.chat_template = CHATML_TEMPLATE
    return hf


def make_tiny_model(arch: str = "llama", vocab_size: int = 320, seed: int = 0, **overrides):
    """A randomly initialised causal LM (4 layers, hidden 64) of the given architecture."""
    import torch  # heavy: torch
    import transformers  # heavy: transformers

    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    common.update(overrides)
    if arch == "llama":
        cfg = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    elif arch == "qwen2":
        cfg = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    elif arch == "gemma3":
        cfg = transformers.Gemma3TextConfig(**{"head_dim": 16, "sliding_window": 64, **common})
        cls = transformers.Gemma3ForCausalLM
    elif arch == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=vocab_size, n_embd=64, n_layer=4, n_head=4, n_positions=256,
            bos_token_id=1, eos_token_id=2, pad_token_id=2,
        )
        cls = transformers.GPT2LMHeadModel
    else:
        raise InputError(f"unknown tiny architecture {arch!r}")
    model = cls(cfg)
    model.eval()
    return model


def save_tiny_model(path: str | Path, arch: str = "llama", seed: int = 0, chat_template: str | None = None,
                    **overrides) -> Path:
    """Save a tiny model (config ``overrides`` as in :func:`make_tiny_model`) and tokenizer (its
    ``chat_template``, default :data:`CHATML_TEMPLATE`) with ``save_pretrained`` into ``path`` and
    return it."""
    path = Path(path)
    make_tiny_model(arch, seed=seed, **overrides).save_pretrained(path)
    tok = make_tiny_tokenizer()
    if chat_template is not None:
        tok.chat_template = chat_template
    tok.save_pretrained(path)
    return path
