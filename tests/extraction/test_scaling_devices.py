"""Scale-out: device placement in ``load_model`` and the recorder on split / half-precision models.

No accelerator is needed. A model split over devices is emulated on the CPU with accelerate's
``dispatch_model``, which installs the same ``AlignDevicesHook`` on every module as
``device_map="auto"`` does on a multi-GPU machine (and, with ``"disk"`` entries, keeps those
layers' weights on the ``meta`` device between calls). Tensors on a second device are emulated
with the ``meta`` device, which runs the recorder's accumulation but cannot be copied to the CPU:
any attempt to move a hidden state off its device fails loudly.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import acute.models as am
from acute import extraction
from acute.extraction import HiddenStateRecorder, generate_and_record
from acute.extraction.batching import batch_order
from acute.extraction.pooler import LayerPooler
from acute.testing import make_tiny_model, make_tiny_tokenizer
from test_extraction import PROMPTS, assert_close_scaled, reference

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _layer_map(num_layers: int = 4, **targets) -> dict:
    """A tiny Llama's device map: every module on the CPU unless ``layer<i>=...`` says otherwise."""
    device_map = {"model.embed_tokens": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu",
                  "lm_head": "cpu"}
    for i in range(num_layers):
        device_map[f"model.layers.{i}"] = targets.get(f"layer{i}", "cpu")
    return device_map


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


def _twin_models():
    """Two identical tiny Llamas (the large init makes greedy decoding vary its tokens)."""
    return (make_tiny_model("llama", initializer_range=0.3),
            make_tiny_model("llama", initializer_range=0.3))


# ------------------------------------------------------------------ load_model: placement


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_device_without_cuda_fails_before_loading(monkeypatch, tiny_model_dir, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(am.loading, "_load_folder", lambda *a, **k: pytest.fail("loaded before checking"))
    with pytest.raises(ValueError, match=r"needs a CUDA GPU.*is_available\(\) is False"):
        am.load_model(tiny_model_dir, device=device)


def test_cuda_index_is_checked_against_the_device_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    am.loading._check_device("cuda")
    am.loading._check_device("cuda:0")
    with pytest.raises(ValueError, match=r"1 CUDA device"):
        am.loading._check_device("cuda:1")


@pytest.mark.parametrize("device_map", [{"": "cuda:0"}, {"": 0}, "cuda"])
def test_device_map_naming_cuda_without_cuda(monkeypatch, tiny_model_dir, device_map):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(am.loading, "_load_folder", lambda *a, **k: pytest.fail("loaded before checking"))
    with pytest.raises(ValueError, match="device_map.*needs a CUDA GPU"):
        am.load_model(tiny_model_dir, device_map=device_map)


@pytest.mark.parametrize("kwargs,match", [
    (dict(device="cuda:0", device_map="auto"), "either device"),
    (dict(device_map=3.5), "device_map must be"),
    (dict(device_map=_layer_map(layer2="disk")), "disk offload"),
    (dict(device="gpu"), "must name a device"),
    (dict(dtype="int8"), "floating-point"),
])
def test_bad_placement_arguments(tiny_model_dir, kwargs, match):
    with pytest.raises(ValueError, match=match):
        am.load_model(tiny_model_dir, **kwargs)


def test_gguf_without_cache_rejects_device_map(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="cache=True"):
        am.load_model(gguf, cache=False, device_map="auto")


@pytest.mark.parametrize("name,expected", [
    ("bf16", torch.bfloat16), ("float16", torch.float16), ("half", torch.float16),
    (torch.bfloat16, torch.bfloat16),
])
def test_half_precision_dtype_names(name, expected):
    assert am.loading._parse_dtype(name) is expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the accelerator-free fallback")
def test_device_map_auto_without_accelerators_loads_on_cpu(tiny_model_dir, tok):
    model, loaded = am.load_model(tiny_model_dir, device_map="auto", dtype="bfloat16")
    assert not model.training and loaded.padding_side == "left"
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert next(model.parameters()).dtype == torch.bfloat16
    gens = generate_and_record(model, tok, PROMPTS[:2], max_new_tokens=3)
    assert all(g.layer_means.shape == (5, 64) and np.isfinite(g.layer_means).all() for g in gens)


# ------------------------------------------------------------------ recorder on split models


def _dispatch(model, device_map, offload_dir):
    from accelerate import dispatch_model

    return dispatch_model(model, device_map=device_map, offload_dir=str(offload_dir),
                          force_hooks=True)


@pytest.mark.parametrize("layout", ["hooks", "disk-offload"])
def test_recorder_on_dispatched_model_matches_reference(tok, tmp_path, layout):
    plain, split = _twin_models()
    device_map = _layer_map(**({"layer1": "disk", "layer3": "disk"} if layout == "disk-offload"
                               else {}))
    split = _dispatch(split, device_map, tmp_path)
    layers = extraction.layers.find_layers(split).layers
    assert all(hasattr(layer, "_hf_hook") for layer in layers)  # the emulation is real
    if layout == "disk-offload":
        assert layers[1].mlp.up_proj.weight.device.type == "meta"

    gens = generate_and_record(split, tok, PROMPTS, max_new_tokens=6, batch_size=4)
    expected = generate_and_record(plain, tok, PROMPTS, max_new_tokens=6, batch_size=4)
    for prompt, gen, ref_gen in zip(PROMPTS, gens, expected):
        np.testing.assert_array_equal(gen.token_ids, ref_gen.token_ids)
        means, logprobs = reference(plain, tok, prompt, gen.token_ids)
        assert_close_scaled(gen.layer_means, means)
        np.testing.assert_allclose(gen.token_logprobs, logprobs, rtol=0, atol=1e-5)
    # The recorder's hooks are gone, accelerate's stay.
    assert all(not layer._forward_hooks and hasattr(layer, "_hf_hook") for layer in layers)


def test_recorder_with_device_map_auto_from_load_model(tiny_model_dir, tok):
    model, _ = am.load_model(tiny_model_dir, device_map="auto")
    reference_model, _ = am.load_model(tiny_model_dir)
    for gen, prompt in zip(generate_and_record(model, tok, PROMPTS, max_new_tokens=5), PROMPTS):
        means, _ = reference(reference_model, tok, prompt, gen.token_ids)
        assert_close_scaled(gen.layer_means, means)


def test_sums_live_on_each_layers_device_and_only_weights_move():
    """States on another device (``meta`` here) are summed there, never copied to the CPU."""
    meta = torch.device("meta")
    with LayerPooler(make_tiny_model("llama")) as pooler:
        pooler.reset(2)
        pooler.set_weights(torch.ones(2, 1), picks={"last": torch.tensor([0, -1])})
        on_cpu = torch.randn(2, 5, 8, dtype=torch.bfloat16)
        elsewhere = torch.empty(2, 5, 8, dtype=torch.bfloat16, device="meta")
        pooler._add(0, on_cpu)
        pooler._add(1, elsewhere)
        pooler._add(2, elsewhere)
        sums = pooler.sums
        assert sums[0].device.type == "cpu" and sums[1].device.type == "meta"
        assert pooler.picked["last"][1].device.type == "meta"
        assert all(s.dtype == torch.float32 for s in sums[:3])
        # one copy of the weights (and of the pick) for two layers on that device
        assert sorted(pooler._copies) == [("last:take", meta), ("weights", meta)]
        copy = pooler._copies[("weights", meta)]
        assert pooler._on("weights", pooler._weights, meta) is copy
        pooler.set_weights(torch.tensor([[1.0], [0.0]]))  # next step: new weights, stale copies dropped
        assert pooler._copies == {}
    torch.testing.assert_close(sums[0], on_cpu[:, -1].float())


# ------------------------------------------------------------------ half-precision models


def _decoding_states(model, ids, mask, steps: int) -> torch.Tensor:
    """The states the recorder pools, from ``output_hidden_states``: [steps, L+1, B, d]."""
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=steps,
                             min_new_tokens=steps, do_sample=False, output_hidden_states=True,
                             return_dict_in_generate=True, pad_token_id=2)
    return torch.stack([torch.stack([h[:, -1, :] for h in step]) for step in out.hidden_states])


class _SumDtypes(HiddenStateRecorder):
    """Remembers the dtypes of the running sums when the batch is collected."""

    def _collect(self):
        self.sum_dtypes = {s.dtype for s in self._pooler.sums}
        return super()._collect()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_states_are_accumulated_in_float32(tok, dtype):
    steps = 48
    model = make_tiny_model("llama", initializer_range=0.3).to(dtype)
    enc = tok([f"<|im_start|>{p}" for p in PROMPTS], add_special_tokens=False, padding=True,
              return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    with _SumDtypes(model) as rec:
        batch = rec.generate(ids, mask, max_new_tokens=steps, min_new_tokens=steps,
                             eos_token_ids=[2], do_sample=False)
    assert rec.sum_dtypes == {torch.float32}
    assert batch.counts.tolist() == [steps] * len(PROMPTS)

    states = _decoding_states(model, ids, mask, steps)  # the very same half-precision states
    assert states.dtype == dtype
    exact = states.double().mean(0).permute(1, 0, 2).numpy()  # [B, L+1, d]
    half_sum = torch.zeros_like(states[0])
    for state in states:  # what accumulating in the model's dtype would give
        half_sum += state
    half_mean = (half_sum.double() / steps).permute(1, 0, 2).numpy()

    scale = np.maximum(1.0, np.abs(exact).max(axis=-1, keepdims=True))
    recorder_error = (np.abs(batch.layer_means - exact) / scale).max()
    half_error = (np.abs(half_mean - exact) / scale).max()
    assert recorder_error <= 1e-6
    assert half_error >= 1e-4 and half_error >= 100 * recorder_error


# ------------------------------------------------------------------ batching order


def test_batch_order_sorted_and_unsorted():
    lengths = [3, 9, 5, 9, 1]
    assert batch_order(lengths, 2) == [[1, 3], [2, 0], [4]]
    assert batch_order(lengths, 2, sort_by_length=False) == [[0, 1], [2, 3], [4]]
    assert batch_order([], 4) == []


def test_generate_and_record_without_sorting_keeps_input_order(tok, monkeypatch):
    model = make_tiny_model("llama", initializer_range=0.3)
    seen = []
    left_pad = extraction.batching.left_pad

    def spy(seqs, pad_id):
        seen.append([len(s) for s in seqs])
        return left_pad(seqs, pad_id)

    monkeypatch.setattr(extraction.generate, "left_pad", spy)  # where generate_and_record looks it up
    lengths = [len(tok(p, add_special_tokens=False)["input_ids"]) for p in PROMPTS]
    unsorted = generate_and_record(model, tok, PROMPTS, max_new_tokens=4, batch_size=2,
                                   sort_by_length=False)
    assert seen == [lengths[:2], lengths[2:]]
    seen.clear()
    ordered = generate_and_record(model, tok, PROMPTS, max_new_tokens=4, batch_size=2,
                                  reuse_prefix=False)
    assert seen == [sorted(lengths, reverse=True)[:2], sorted(lengths, reverse=True)[2:]]
    seen.clear()
    grouped = generate_and_record(model, tok, PROMPTS, max_new_tokens=4, batch_size=2)
    longest_first = sorted(lengths, reverse=True)  # these prompts share no prefix: one group
    assert seen == [longest_first[:2], longest_first[2:]]
    for a, b, c in zip(unsorted, ordered, grouped):  # same results, in input order, every way
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_array_equal(a.token_ids, c.token_ids)
        np.testing.assert_allclose(a.layer_means, b.layer_means, rtol=0, atol=1e-4)
        np.testing.assert_allclose(a.layer_means, c.layer_means, rtol=0, atol=1e-4)


# ------------------------------------------------------------------ benchmarks


def _load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_collect_without_cuda_exits_2_and_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    bench = _load_benchmark("gpu_collect")
    monkeypatch.setattr(bench, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    out = tmp_path / "gpu.md"
    assert bench.main(["--out", str(out)]) == 2
    assert not out.exists()
    assert "CUDA is not available" in capsys.readouterr().err


def test_gpu_collect_batches_match_the_recorders(tok):
    """Plain generate (a) gets the very batches generate_and_record (b) forms."""
    bench = _load_benchmark("gpu_collect")
    batches = bench.padded_batches(tok, PROMPTS, 3, "cpu")
    encoded = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    for (ids, mask), batch in zip(batches, batch_order([len(e) for e in encoded], 3)):
        want_ids, want_mask = extraction.batching.left_pad([encoded[i] for i in batch], 2)
        assert torch.equal(ids, want_ids) and torch.equal(mask, want_mask)


def test_gpu_collect_runs_end_to_end_with_cuda_stubbed(monkeypatch, tmp_path, long_context_dir):
    """Everything but the GPU itself: the script's own code runs on the CPU with stubbed CUDA."""
    bench = _load_benchmark("gpu_collect")
    monkeypatch.setattr(bench, "cuda_problem", lambda device: None)
    for name, stub in [("synchronize", lambda: None), ("reset_peak_memory_stats", lambda: None),
                       ("max_memory_allocated", lambda: 2**30),
                       ("get_device_name", lambda device: "stub GPU")]:
        monkeypatch.setattr(torch.cuda, name, stub)
    out = tmp_path / "gpu.md"
    assert bench.main(["--model", str(long_context_dir), "--device", "cpu", "--dtype", "float32",
                       "--n", "8", "--batch-sizes", "1", "4", "--new-tokens", "3", "--reps", "1",
                       "--out", str(out)]) == 0
    text = out.read_text()
    assert "| 4 |" in text and "recorder overhead" in text and "stub GPU" in text
    diff = float(text.split("max |difference| ")[1].split(".\n")[0])
    assert diff < 1e-4  # recorder == output_hidden_states pooling


def test_batch_throughput_writes_a_table(tmp_path, long_context_dir):
    out = tmp_path / "throughput.md"
    bench = _load_benchmark("batch_throughput")
    assert bench.main(["--model", str(long_context_dir), "--n", "4", "--reps", "1",
                       "--batch-sizes", "1", "2", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| 1 | sorted |" in text and "| 1 | prefix |" in text and "| 2 | shuffled |" in text
    assert "| 1 | shuffled |" not in text and "| 2 | prefix |" in text
    assert "| 1 | prefix-keep |" not in text and "| 2 | prefix-keep |" in text
    assert "vs batch 1" in text


def test_batch_throughput_on_a_task_with_data(tmp_path, long_context_dir):
    data = tmp_path / "scitldr" / "test.jsonl"
    data.parent.mkdir()
    data.write_text("\n".join(json.dumps({"id": f"P{i}", "source": [f"We study topic {i}.", "It works."],
                                          "targets": [f"Topic {i} works."]}) for i in range(3)) + "\n",
                    encoding="utf-8")
    out = tmp_path / "throughput.md"
    bench = _load_benchmark("batch_throughput")
    assert bench.main(["--model", str(long_context_dir), "--task", "scitldr", "--data", str(data),
                       "--n", "3", "--reps", "1", "--batch-sizes", "1", "--out", str(out)]) == 0
    text = out.read_text()
    assert "task `scitldr`: the first 3 examples of `" + str(data) + "`" in text
    assert "max_new_tokens 64" in text and "| 1 | prefix |" in text
    with pytest.raises(SystemExit, match="task 'scitldr' has only 3 examples"):
        bench.main(["--model", str(long_context_dir), "--task", "scitldr", "--data", str(data),
                    "--n", "4", "--out", str(out)])
    with pytest.raises(SystemExit, match="task 'scitldr': .*does not exist"):
        bench.main(["--model", str(long_context_dir), "--task", "scitldr",
                    "--data", str(tmp_path / "missing.jsonl"), "--out", str(out)])
