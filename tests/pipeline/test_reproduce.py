"""The reproduction pipeline (``acute run``, :mod:`acute.pipeline`) end to end on a tiny random
model, plus its pure helpers and acute.report.

The tiny model answers at random, so the fixture makes labels informative the honest way: it
runs the tiny model once (greedy, batch 1, exactly the prompts the driver builds) and, for half
of the rows, writes the model's own extracted answer as the gold answer. The driver then labels
those rows correct through the normal task code; nothing in the product is patched.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


import acute.pipeline as rp  # noqa: E402

N_ROWS = 40


def _tiny_model_dir(path: Path) -> Path:
    """A tiny Llama + tokenizer, like ``save_tiny_model`` but with an untied output head (the
    tied one echoes the last prompt token, so under the ChatML prompt every answer is an empty
    line) and 2048 positions (open-QA prompts carry demonstrations)."""
    from acute.testing import make_tiny_model, make_tiny_tokenizer

    make_tiny_model("llama", seed=0, tie_word_embeddings=False,
                    max_position_embeddings=2048).save_pretrained(path)
    make_tiny_tokenizer().save_pretrained(path)
    return path


def _write_fixture_data(data_dir: Path, model_dir: Path) -> dict[str, bool]:
    """Write ``qa.jsonl`` whose even rows' gold is the tiny model's own answer; return the
    expected correctness per id (checked with the task's own labelling)."""
    from acute.extraction import generate_and_record
    from acute.models import load_model
    from acute.tasks import get_task

    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "qa.jsonl"
    rows = [{"id": f"q{i:03d}", "question": f"What is item {i} of list {i % 7}?",
             "answers": ["never generated"], "incorrect": ["also wrong"]} for i in range(N_ROWS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    model, tok = load_model(model_dir)
    task = get_task(str(path))
    examples = task.load(path)
    prompts = [task.prompt(tok, ex) for ex in examples]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=task.max_new_tokens, batch_size=1,
                               stop_strings=task.stop_strings)
    for i, (row, ex, gen) in enumerate(zip(rows, examples, gens)):
        answer = task.extract(ex, gen.text)
        if i % 2 == 0 and answer:
            row["answers"] = [answer]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    task = get_task(str(path))
    expected = {ex.id: bool(task.is_correct(ex, gen.text)) for ex, gen in zip(task.load(path), gens)}
    n_ok = sum(expected.values())
    assert 12 <= n_ok <= N_ROWS - 12, f"fixture needs both classes, got {n_ok}/{N_ROWS} correct"
    return expected


def _write_config(root: Path, model_dir: Path) -> Path:
    cfg = root / "tiny.toml"
    cfg.write_text(f"""
[run]
data_root = "{(root / 'data').as_posix()}"
seed = 0
test_fraction = 0.3
n_bootstrap = 20
protocol_n_bootstrap = 20
batch_size = 1
probe_params = {{ n_estimators = 8, search_n_estimators = 8 }}
estimators = ["all"]

[tasks.qa]
task = "jsonl"
data = "qa.jsonl"
records = {N_ROWS}
protocol = 4
shard_size = 16
description = "Tiny open-QA fixture."

[models.tiny]
model = "{model_dir.as_posix()}"
""", encoding="utf-8")
    return cfg


@pytest.fixture(scope="module")
def driven(tmp_path_factory):
    """Run the driver twice on the tiny model (the second run must do no work)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")  # the workers inherit it: no thread spinning for a tiny model
        yield _drive(tmp_path_factory)


def _drive(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("reproduce")
    model_dir = _tiny_model_dir(root / "tiny-model")
    expected = _write_fixture_data(root / "data", model_dir)
    cfg = _write_config(root, model_dir)
    out, work = root / "results", root / "work"
    argv = [str(cfg), "--out", str(out), "--work", str(work)]
    rc1 = rp.main(argv)
    readme_mtime = (out / "README.md").stat().st_mtime_ns if (out / "README.md").exists() else None
    rc2 = rp.main(argv)
    timings = json.loads((work / "timings.json").read_text(encoding="utf-8"))
    return {"root": root, "cfg": cfg, "out": out, "work": work, "rc": (rc1, rc2), "timings": timings,
            "expected": expected, "readme_mtime": readme_mtime, "argv": argv}


# ----------------------------------------------------------------------------- end to end
def test_first_run_runs_every_stage_and_measures_it(driven):
    assert driven["rc"][0] == 0
    first, _ = driven["timings"]["invocations"][-2:]
    assert [j["key"] for j in first["jobs"]] == [
        "collect/tiny/qa", "protocol/tiny/qa", "evaluate/tiny/qa", "report"]
    assert all(j["status"] == "ran" for j in first["jobs"]), first["jobs"]
    for key in ("collect/tiny/qa", "evaluate/tiny/qa", "protocol/tiny/qa"):
        e = driven["timings"]["stages"][key]
        assert e["status"] == "ran" and e["wall_s"] > 0
        # each stage is its own process that imported numpy/torch: well above 50 MB, below 8 GB
        assert 50 < e["peak_rss_mb"] < 8192


def test_second_run_does_no_work(driven):
    assert driven["rc"][1] == 0
    last = driven["timings"]["invocations"][-1]
    assert len(last["jobs"]) == 4
    assert all(j["status"] == "skipped" for j in last["jobs"]), last["jobs"]
    assert (driven["out"] / "README.md").stat().st_mtime_ns == driven["readme_mtime"]


def test_collected_labels_and_recorded_split(driven):
    from acute.store import open_store

    pair = driven["work"] / "tiny" / "qa"
    store = open_store(pair / "store")
    assert len(store) == N_ROWS
    # the task's shard_size reached the collector: 40 records committed as 16 + 16 + 8
    assert sorted(p.name for p in (pair / "store").glob("shard-*.safetensors")) == [
        "shard-00000.safetensors", "shard-00001.safetensors", "shard-00002.safetensors"]
    got = {str(i): bool(c) for i, c in zip(store.ids, store.correct)}
    assert got == driven["expected"]  # the subprocess generated what the fixture predicted
    split = json.loads((pair / "eval" / "split.json").read_text(encoding="utf-8"))
    assert set(split["train"]).isdisjoint(split["test"])
    assert set(split["train"]) | set(split["test"]) == set(got)
    assert split["seed"] == 0 and split["test_fraction"] == 0.3
    # the protocol study reused the collected answers instead of generating its own
    assert not (pair / "protocol" / "store").exists()
    generations = {r["id"]: r["generation"] for r in store.records}
    protocol = json.loads((pair / "protocol" / "protocol.json").read_text(encoding="utf-8"))
    assert len(protocol["records"]) == 4
    assert all(r["generation"] == generations[r["id"]] for r in protocol["records"])


def test_report_numbers_agree_with_the_evaluation(driven):
    """The report recomputes every metric from predictions.csv; its point estimates must equal
    the ones evaluate_store computed on its own."""
    report = json.loads((driven["out"] / "report.json").read_text(encoding="utf-8"))
    results = json.loads((driven["work"] / "tiny" / "qa" / "eval" / "results.json").read_text())
    per_model = report["tasks"]["qa"]["per_model"]["tiny"]
    average = report["tasks"]["qa"]["average"]
    from acute.estimators import ESTIMATORS
    from acute.estimators.controls import CONTROLS

    # every estimator (estimators = ["all"]), then the controls this store feeds (the rest are named in "skipped")
    assert [r["estimator"] for r in results["results"]] == list(ESTIMATORS) + results["params"]["controls"]
    assert set(results["params"]["controls"]) | set(results["skipped"]) == set(CONTROLS)
    for row in results["results"]:
        est = row["estimator"]
        for key in ("accuracy", "smece", "auc_euro_low", "auc_euro_med", "auc_euro_high", "auc_euro_all"):
            assert per_model[est][key]["estimate"] == pytest.approx(row[key], abs=1e-9)
            # one model: the average is that model
            assert average[est][key]["estimate"] == pytest.approx(row[key], abs=1e-9)
        lo, hi = per_model[est]["auc_euro_all"]["low"], per_model[est]["auc_euro_all"]["high"]
        assert lo <= hi


def test_readme_has_every_section_and_table(driven):
    from acute.estimators import ESTIMATORS

    text = (driven["out"] / "README.md").read_text(encoding="utf-8")
    for heading in ("# Reproduction results", "## Calibration and selective trust per task", "### qa",
                    "## Ablation: ACUTE views", "## Protocol study", "### Shift table",
                    "### Provenance table", "## Comparison with the papers", "## Wall time and peak memory"):
        assert heading in text, heading
    assert rp.driver._command(driven["argv"]) in text  # the full command (no --only / --stages)
    assert rp.driver._command(driven["argv"] + ["--stages", "report"]) in text
    for est in ESTIMATORS:
        assert f"| {est} " in text or f"| {est} (" in text, est
    assert "0.72" in text and "0.88" in text and "0.28" in text  # the papers' numbers
    assert "| tiny | qa |" in text  # timing row
    assert "<!-- interpretation:start -->" in text
    figs = sorted(p.name for p in (driven["out"] / "figures").iterdir())
    # euro curves, the default against the best baseline on one reliability diagram, their euro difference
    assert {"qa-euro-curves.png", "qa-reliability.png", "qa-euro-difference.png"} <= set(figs)
    for name in figs:
        assert f"figures/{name}" in text
    assert (driven["out"] / "protocol-report.md").is_file()
    assert (driven["out"] / "timings.json").is_file()


def test_force_reruns_the_selected_stages_only(driven, capsys):
    """``--force`` reruns complete stages (the report here); the others stay skipped."""
    argv = driven["argv"] + ["--stages", "evaluate,report"]
    assert rp.main(argv + ["--plan", "--force"]) == 0
    plan = capsys.readouterr().out
    assert "evaluate/tiny/qa" in plan and "complete, would skip" not in plan
    assert rp.main(argv + ["--plan"]) == 0
    assert capsys.readouterr().out.count("complete, would skip") == 2
    before = (driven["out"] / "README.md").stat().st_mtime_ns
    assert rp.main(driven["argv"] + ["--stages", "report", "--force"]) == 0
    last = json.loads((driven["work"] / "timings.json").read_text(encoding="utf-8"))["invocations"][-1]
    assert [(j["key"], j["status"]) for j in last["jobs"]] == [("report", "ran")]
    assert (driven["out"] / "README.md").stat().st_mtime_ns > before


def test_changed_settings_rerun_only_what_depends_on_them(driven, tmp_path):
    cfg_text = driven["cfg"].read_text(encoding="utf-8")
    changed = tmp_path / "changed.toml"
    changed.write_text(cfg_text.replace("protocol = 4", "protocol = 5")
                       .replace("n_bootstrap = 20\n", "n_bootstrap = 21\n"), encoding="utf-8")
    cfg = rp.load_config(changed)
    jobs = {j.key: j for j in rp.plan_jobs(cfg, driven["work"], driven["out"])}
    assert jobs["collect/tiny/qa"].is_complete()
    assert not jobs["protocol/tiny/qa"].is_complete()
    assert not jobs["evaluate/tiny/qa"].is_complete()
    cfg2 = rp.load_config(driven["cfg"])
    assert all(j.is_complete() for j in rp.plan_jobs(cfg2, driven["work"], driven["out"]) if j.stage != "report")


def test_a_smaller_size_reuses_the_store_without_the_model(driven, tmp_path):
    import shutil

    work = tmp_path / "work"
    shutil.copytree(driven["work"], work)
    smaller = tmp_path / "smaller.toml"
    smaller.write_text(driven["cfg"].read_text(encoding="utf-8").replace(
        f"records = {N_ROWS}", "records = 30"), encoding="utf-8")
    assert rp.main([str(smaller), "--out", str(tmp_path / "out"), "--work", str(work),
                    "--stages", "collect"]) == 0
    t = json.loads((work / "timings.json").read_text(encoding="utf-8"))
    detail = t["stages"]["collect/tiny/qa"]["detail"]
    assert detail["selected"] == 30 and detail["new_records"] == 0 and detail["load_s"] == 0.0
    done = json.loads((work / "tiny" / "qa" / "collect.done.json").read_text(encoding="utf-8"))
    assert done["summary"]["selected_ids"] == [e.id for e in rp.plan.select_examples(
        [_Ex(f"q{i:03d}") for i in range(N_ROWS)], 30, seed=0)]
    # the evaluation's settings include the collection's, so it is due again
    jobs = {j.key: j for j in rp.plan_jobs(rp.load_config(smaller), work, tmp_path / "out")}
    assert jobs["collect/tiny/qa"].is_complete() and not jobs["evaluate/tiny/qa"].is_complete()


def test_a_failed_stage_is_recorded_and_blocks_its_evaluation(driven, tmp_path):
    bad = tmp_path / "data"
    bad.mkdir()
    (bad / "qa.jsonl").write_text('{"id": "a", "question": "q?"}\n', encoding="utf-8")  # no answers
    cfg = tmp_path / "bad.toml"
    cfg.write_text(driven["cfg"].read_text(encoding="utf-8").replace(
        f'data_root = "{(driven["root"] / "data").as_posix()}"', f'data_root = "{bad.as_posix()}"'),
        encoding="utf-8")
    work = tmp_path / "work"
    rc = rp.main([str(cfg), "--out", str(tmp_path / "out"), "--work", str(work),
                  "--stages", "collect,evaluate"])
    assert rc == 1
    t = json.loads((work / "timings.json").read_text(encoding="utf-8"))
    status = {j["key"]: j["status"] for j in t["invocations"][-1]["jobs"]}
    assert status == {"collect/tiny/qa": "failed", "evaluate/tiny/qa": "blocked"}
    assert "answers" in t["stages"]["collect/tiny/qa"]["detail"]


def test_peak_memory_is_the_workers_own():
    """A child that touches 320 MB reports at least that; one that allocates nothing reports far
    less than this (large, torch-importing) test process, whose peak ``ru_maxrss`` would carry."""
    code = ("import sys; sys.path.insert(0, {ex!r}); import acute.pipeline.processes as r; import numpy as np; "
            "a = np.ones({n}); print(r.own_peak_rss_mb())")
    import subprocess

    def peak(n: int) -> float:
        out = subprocess.run([sys.executable, "-c", code.format(ex=str(REPO), n=n)],
                             capture_output=True, text=True, check=True)
        return float(out.stdout.strip())

    small, big = peak(1), peak(40_000_000)
    assert big - small >= 300  # 40e6 float64 = 305 MiB, all touched by np.ones
    assert small < 150


# ----------------------------------------------------------------------------- driver helpers
class _Ex:
    def __init__(self, i):
        self.id = i


def test_select_examples_is_fixed_nested_and_order_free():
    exs = [_Ex(f"id{i}") for i in range(50)]
    a = [e.id for e in rp.plan.select_examples(exs, 10, seed=0)]
    assert a == [e.id for e in rp.plan.select_examples(list(reversed(exs)), 10, seed=0)]
    assert a == [e.id for e in rp.plan.select_examples(exs, 20, seed=0)][:10]
    assert a != [e.id for e in rp.plan.select_examples(exs, 10, seed=1)]
    assert len(rp.plan.select_examples(exs, 500, seed=0)) == 50
    assert rp.plan.select_examples(exs, 0, seed=0) == []


def test_only_patterns():
    assert rp.plan.matches(None, "m", "t")
    assert rp.plan.matches(["m"], "m", "anything")
    assert rp.plan.matches(["*/sciq"], "qwen", "sciq") and not rp.plan.matches(["*/sciq"], "qwen", "mmlu")
    assert not rp.plan.matches(["smollm*/mmlu"], "gemma", "mmlu")


def test_config_errors_name_the_key(tmp_path):
    def write(text):
        p = tmp_path / "c.toml"
        p.write_text(text, encoding="utf-8")
        return p

    base = '[tasks.a]\ndata = "x.jsonl"\nrecords = 5\n[models.m]\n'
    assert rp.load_config(write(base), data_root=tmp_path).records(
        rp.load_config(write(base), data_root=tmp_path).models[0],
        rp.load_config(write(base), data_root=tmp_path).tasks[0]) == 5
    with pytest.raises(ValueError, match=r"tasks\.a.*unknown key.*recrods"):
        rp.load_config(write(base.replace("records", "recrods")))
    with pytest.raises(ValueError, match=r"models\.m\.records.*unknown task"):
        rp.load_config(write(base + "records = { b = 3 }\n"))
    with pytest.raises(ValueError, match=r"records: must be >= 0"):
        rp.load_config(write(base.replace("records = 5", "records = -1")))
    with pytest.raises(ValueError, match="figures_model"):
        rp.load_config(write('[run]\nfigures_model = "zz"\n' + base))
    with pytest.raises(ValueError, match="test_fraction"):
        rp.load_config(write('[run]\ntest_fraction = 1.5\n' + base))
    with pytest.raises(ValueError, match="missing 'data'"):
        rp.load_config(write('[tasks.a]\n[models.m]\n'))
    for key in ("shard_size", "max_new_tokens"):
        with pytest.raises(ValueError, match=rf"tasks\.a\.{key}: must be >= 1, got 0"):
            rp.load_config(write(base.replace("records = 5", f"records = 5\n{key} = 0")))
    # estimators: names checked, ["all"] for every one (the default table when absent)
    assert rp.load_config(write('[run]\nestimators = ["all"]\n' + base)).estimators == ["all"]
    assert rp.load_config(write(base)).estimators is None
    with pytest.raises(ValueError, match=r"run\.estimators.*unknown"):
        rp.load_config(write('[run]\nestimators = ["platt", "temperature"]\n' + base))
    with pytest.raises(FileNotFoundError):
        rp.load_config(tmp_path / "nope.toml")


def test_shard_size_is_no_part_of_the_collection_identity(tmp_path):
    """Records per shard change no record: a collection resumed with another shard size is the
    same work (same stage hash), so the run neither redoes it nor treats the store as stale."""
    def jobs(extra):
        p = tmp_path / "c.toml"
        p.write_text(f'[tasks.a]\ndata = "x.jsonl"\nrecords = 5\n{extra}[models.m]\n', encoding="utf-8")
        cfg = rp.load_config(p, data_root=tmp_path)
        assert cfg.tasks[0].shard_size == (8 if extra else None)
        return {j.stage: j for j in rp.plan_jobs(cfg, tmp_path / "w", tmp_path / "o", stages=["collect"])}

    plain, small = jobs(""), jobs("shard_size = 8\n")
    assert plain["collect"].hash == small["collect"].hash
    assert small["collect"].payload["task"]["shard_size"] == 8


def test_stop_strings_override_the_tasks_and_are_part_of_the_collection_identity(tmp_path):
    """A task's ``stop_strings`` replace the task's own (``[]``: none) in the task the collect
    worker builds, so in its store's settings; they change records, so they change the collect
    stage's hash; a run config without them keeps the hash it had."""
    data = tmp_path / "x.jsonl"
    data.write_text('{"id": "q1", "question": "Which?", "answers": ["B"], "incorrect": ["no", "never"]}\n',
                    encoding="utf-8")

    def plan(extra):
        p = tmp_path / "c.toml"
        p.write_text(f'[tasks.a]\ntask = "truthfulqa"\ndata = "x.jsonl"\nrecords = 1\n{extra}[models.m]\n',
                     encoding="utf-8")
        cfg = rp.load_config(p, data_root=tmp_path)
        return cfg, {j.stage: j for j in rp.plan_jobs(cfg, tmp_path / "w", tmp_path / "o", stages=["collect"])}

    (plain_cfg, plain), (none_cfg, none) = plan(""), plan("stop_strings = []\n")
    _, blank_line = plan('stop_strings = ["\\n\\n"]\n')
    assert plain_cfg.tasks[0].stop_strings is None and none_cfg.tasks[0].stop_strings == ()
    assert "stop_strings" not in plain_cfg.tasks[0].identity()
    assert len({plain["collect"].hash, none["collect"].hash, blank_line["collect"].hash}) == 3
    from acute.pipeline.workers import load_task_examples

    task, _ = load_task_examples(plain["collect"].payload["task"])
    assert task.stop_strings == ("\n",) and task.settings()["stop_strings"] == ["\n"]  # the task's own
    task, _ = load_task_examples(none["collect"].payload["task"])
    assert task.stop_strings == () and task.settings()["stop_strings"] == []
    task, _ = load_task_examples(blank_line["collect"].payload["task"])
    assert task.stop_strings == ("\n\n",)
    for bad in ('"\\n"', '[1]', '[""]'):
        with pytest.raises(ValueError, match=r"tasks\.a\.stop_strings: expected a list of non-empty strings"):
            plan(f"stop_strings = {bad}\n")


@pytest.mark.parametrize("name", ["reproduce.toml", "reproduce-smoke.toml"])
def test_shipped_configs_parse(name):
    cfg = rp.load_config(REPO / "examples" / name, data_root=REPO.parent / "shared" / "data")
    assert cfg.models and cfg.tasks
    for t in cfg.tasks:
        for m in cfg.models:
            assert cfg.records(m, t) >= 30
    if name == "reproduce.toml":
        assert [m.key for m in cfg.models] == ["smollm2-135m-instruct", "gemma-3-270m",
                                               "qwen2.5-coder-0.5b-instruct"]
        assert [t.key for t in cfg.tasks] == ["mmlu", "sciq", "triviaqa", "truthfulqa", "apigen", "scitldr"]
        for m in cfg.models:  # every model gets a protocol study; the first on all four tasks
            with_protocol = {t.key for t in cfg.tasks if cfg.protocol_rows(m, t) > 0}
            assert with_protocol and with_protocol <= {"mmlu", "sciq", "triviaqa", "truthfulqa"}
        assert all(cfg.protocol_rows(cfg.models[0], t) == 300 for t in cfg.tasks[:4])
        assert cfg.tasks[0].options == {"shots": 5}
    if cfg.data_root.is_dir():  # the shared benchmark data of the project machines
        for t in cfg.tasks:
            assert all(Path(d).exists() for d in t.data), t.data


# ----------------------------------------------------------------------------- acute.report
def test_average_summaries_by_hand():
    from acute.report.runs import average_summaries

    a = {"raw": {"smece": {"estimate": 0.2, "low": 0.1, "high": 0.3}},
         "only-a": {"smece": {"estimate": 1.0, "low": 1.0, "high": 1.0}}}
    b = {"raw": {"smece": {"estimate": 0.4, "low": 0.2, "high": 0.6}}}
    avg = average_summaries([a, b])
    assert list(avg) == ["raw"]  # estimators present in every run only
    s = avg["raw"]["smece"]
    # half-widths 0.1 and 0.2: se = sqrt(0.1^2 + 0.2^2) / 1.96 / 2; the interval is 0.3 -/+ 1.96 se
    half = math.sqrt(0.1 ** 2 + 0.2 ** 2) / 2
    assert s["estimate"] == pytest.approx(0.3)
    assert (s["low"], s["high"]) == (pytest.approx(0.3 - half), pytest.approx(0.3 + half))
    c = {"raw": {"smece": {"estimate": 0.5, "low": None, "high": None}}}
    assert average_summaries([a, c])["raw"]["smece"] == {"estimate": pytest.approx(0.35), "low": None, "high": None}
    assert average_summaries([]) == {}
    # one evaluation keeps its own asymmetric interval (smECE's [0.000, 0.022] is not made [-0.010, 0.012])
    d = {"constant": {"smece": {"estimate": 0.001, "low": 0.0, "high": 0.022}}}
    assert average_summaries([d]) == d


def test_run_summary_reads_the_evaluations_rows():
    from acute.report import EvalRun
    from acute.report.runs import run_summary

    rows = [{"estimator": "raw", "accuracy": 0.5, "smece": 0.1, "smece_ci_low": 0.05, "smece_ci_high": 0.2,
             "auc_euro_all": 0.7, "auc_euro_all_ci_low": 0.6, "auc_euro_all_ci_high": float("nan")}]
    run = EvalRun(model="m", task="t", path=Path("x"), ids=["a"], correct=np.array([True]),
                  predictions={"raw": np.array([0.5])}, results={"results": rows})
    s = run_summary(run)["raw"]
    assert s["smece"] == {"estimate": 0.1, "low": 0.05, "high": 0.2}
    assert s["auc_euro_all"] == {"estimate": 0.7, "low": 0.6, "high": None}  # NaN is no bound
    assert s["aurc"] == {"estimate": None, "low": None, "high": None}  # an older evaluation


def test_interpretation_block_is_kept():
    from acute.report.tables import INTERPRETATION_END, INTERPRETATION_START, preserved_block

    old = f"x\n{INTERPRETATION_START}\nOur reading: context matters most.\n{INTERPRETATION_END}\ny"
    assert preserved_block(old) == "Our reading: context matters most."
    assert preserved_block(None).startswith("_Interpretation")
    assert preserved_block(f"{INTERPRETATION_START}\n\n{INTERPRETATION_END}").startswith("_Interpretation")


def test_timings_table_totals():
    from acute.report.tables import timings_markdown

    stages = {"collect/m/t": {"status": "ran", "wall_s": 30.0, "cpu_s": 55.0, "peak_rss_mb": 900.0},
              "evaluate/m/t": {"status": "ran", "wall_s": 90.0, "cpu_s": 170.0, "peak_rss_mb": 2048.0},
              "collect/m/u": {"status": "failed", "wall_s": 5.0}}
    md = timings_markdown(stages, ["m"], ["t", "u"])
    assert "| m | t | 30.0 s / 55.0 s / 900 MB | 1m 30s / 2m 50s / 2.00 GB | - |" in md
    assert "| m | u | failed after 5.0 s | - | - |" in md
    assert "All stages together: 2m 00s of wall time, 3m 45s of CPU time." in md


# ----------------------------------------------------------------------------- evidence settings
@pytest.fixture(scope="module")
def cross_validated(tmp_path_factory):
    """The driver with the evidence settings (cv, estimators, learning curves, transfer) on two
    tasks of the tiny model: ``{"cfg", "out", "work", "rc"}``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        yield _drive_cross_validated(tmp_path_factory)


def _drive_cross_validated(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("evidence")
    model_dir = _tiny_model_dir(root / "tiny-model")
    _write_fixture_data(root / "data", model_dir)
    cfg = root / "cv.toml"
    cfg.write_text(f"""
[run]
data_root = "{(root / 'data').as_posix()}"
cv = 3
repeats = 1
n_bootstrap = 20
batch_size = 4
probe_params = {{ n_estimators = 8, search_n_estimators = 8 }}
estimators = ["raw", "platt", "isotonic", "acute-pca10-stacked"]
learning_curve = {{ repeats = 1 }}
transfer = {{ repeats = 1 }}

[tasks.qa]
task = "jsonl"
data = "qa.jsonl"
records = {N_ROWS}

[tasks.qa2]
task = "jsonl"
data = "qa.jsonl"
records = {N_ROWS}

[models.tiny]
model = "{model_dir.as_posix()}"
""", encoding="utf-8")
    out, work = root / "results", root / "work"
    rc = rp.main([str(cfg), "--out", str(out), "--work", str(work)])
    return {"cfg": cfg, "out": out, "work": work, "rc": rc}


def test_cross_validated_run_with_learning_curves_transfer_and_summary(cross_validated):
    """cv / estimators / learning_curve / transfer in [run]: every record scored out of fold, a
    learning curve per pair, a transfer table per model and summary.csv agreeing with results.json."""

    from acute.report.summary import SUMMARY_COLUMNS

    out, work = cross_validated["out"], cross_validated["work"]
    assert cross_validated["rc"] == 0
    timings = json.loads((work / "timings.json").read_text(encoding="utf-8"))
    assert [j["key"] for j in timings["invocations"][-1]["jobs"]] == [
        "collect/tiny/qa", "collect/tiny/qa2", "evaluate/tiny/qa", "evaluate/tiny/qa2",
        "transfer/tiny/transfer", "report"]
    results = json.loads((work / "tiny" / "qa" / "eval" / "results.json").read_text(encoding="utf-8"))
    assert results["split"]["mode"] == "cv" and results["split"]["n_splits"] == 3
    assert results["split"]["n_records"] == N_ROWS
    assert [r["estimator"] for r in results["results"]] == (["raw", "platt", "isotonic", "acute-pca10-stacked"]
                                                            + results["params"]["controls"])
    lc = json.loads((work / "tiny" / "qa" / "eval" / "learning-curve" / "learning_curve.json").read_text())
    assert lc["complete"] and lc["shown"][1:] == ["acute-pca10-stacked"]
    transfer = json.loads((work / "tiny" / "transfer" / "transfer.json").read_text(encoding="utf-8"))
    assert {(c["train"], c["test"]) for c in transfer["table"]["cells"]} == {
        ("qa", "qa"), ("qa", "qa2"), ("qa2", "qa"), ("qa2", "qa2")}

    with open(out / "summary.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == list(SUMMARY_COLUMNS)
    # each pair's own tables, folds, learning-curve table and repeat-0 predictions (6 significant
    # digits, gzip) are kept beside the report
    copied = out / "evaluations" / "tiny" / "qa"
    assert sorted(p.name for p in copied.iterdir()) == ["folds.json", "learning-curve.json", "predictions.csv.gz",
                                                        "results.csv", "results.json", "results.md"]
    assert json.loads((copied / "results.json").read_text()) == results
    evaluated = work / "tiny" / "qa" / "eval"
    assert (copied / "folds.json").read_text() == (evaluated / "folds.json").read_text()
    with gzip.open(copied / "predictions.csv.gz", "rt", encoding="utf-8", newline="") as fh:
        compact = list(csv.reader(fh))
    with open(evaluated / "predictions.csv", newline="", encoding="utf-8") as fh:
        full = list(csv.reader(fh))
    assert compact[0] == full[0] and [r[:2] for r in compact] == [r[:2] for r in full] and len(full) == N_ROWS + 1
    np.testing.assert_allclose(np.array([r[2:] for r in compact[1:]], dtype=float),
                               np.array([r[2:] for r in full[1:]], dtype=float), rtol=5e-6, atol=0)
    from acute.evaluation import read_predictions  # reads the committed copy as repeat 0
    ids, y, kept = read_predictions(copied)
    ids0, y0, every = read_predictions(evaluated)
    assert ids == ids0 and (y == y0).all() and set(kept) == set(every)
    for name, p in kept.items():
        assert p.shape == (1, N_ROWS)
        np.testing.assert_allclose(p[0], every[name][0], rtol=5e-6, atol=0)
    assert json.loads((copied / "learning-curve.json").read_text()) == lc
    assert [(r["model"], r["task"]) for r in rows] == [("tiny", "qa"), ("tiny", "qa2")]
    by = {r["estimator"]: r for r in results["results"]}
    ref = results["reference"]
    assert rows[0]["best_baseline"] == ref and ref in ("raw", "platt", "isotonic")
    assert float(rows[0]["default_auc_euro"]) == pytest.approx(by["acute-pca10-stacked"]["auc_euro_all"], abs=1e-6)
    assert float(rows[0]["diff"]) == pytest.approx(
        by["acute-pca10-stacked"]["auc_euro_all"] - by[ref]["auc_euro_all"], abs=1e-6)
    assert int(rows[0]["n_records"]) == N_ROWS
    assert (rows[0]["folds"], rows[0]["repeats"]) == ("3", "1")
    # the controls' columns: the constant's auc-euro and the skill over it, the corrected t-interval
    # around the difference, Holm's verdict across the two rows
    assert float(rows[0]["constant_auc_euro"]) == pytest.approx(by["constant"]["auc_euro_all"], abs=1e-6)
    assert float(rows[0]["t_ci_low"]) <= float(rows[0]["diff"]) <= float(rows[0]["t_ci_high"])
    assert rows[0]["holm_significant"] in ("True", "False")
    # the best control without hidden states (platt+meta / tfidf+platt / answer rows, those present)
    best = rows[0]["best_visible_control"]
    assert best == by["acute-pca10-stacked"]["best_visible_reference"] and best in results["params"]["controls"]
    assert float(rows[0]["best_visible_auc_euro"]) == pytest.approx(by[best]["auc_euro_all"], abs=1e-6)
    assert float(rows[0]["best_visible_diff"]) == pytest.approx(
        by["acute-pca10-stacked"]["auc_euro_all"] - by[best]["auc_euro_all"], abs=1e-6)
    readme = (out / "README.md").read_text(encoding="utf-8")
    for title in ("## Summary: the default estimator against the best baseline", "## Learning curves",
                  "## Transfer between tasks", "### tiny"):
        assert title in readme, title
    assert (out / "figures" / "learning-curve-tiny-qa.png").is_file()
    assert f"| tiny | qa | {N_ROWS} | {N_ROWS} |" in readme and "| evaluated |" in readme  # plan and status


def test_comparison_falls_back_to_the_default_for_views_not_evaluated():
    from acute.report.tables import comparison_markdown

    cell = {f"auc_euro_{b}": {"estimate": 0.5, "low": 0.4, "high": 0.6} for b in ("all", "low", "med", "high")}
    md = comparison_markdown({"mmlu": {"raw": cell, "acute-pca10-stacked": cell}}, None)
    assert "| mmlu | acute-late -> acute-pca10-stacked | 0.83 |" in md
    assert "| apigen | acute-pca20 | 0.88 | not run |" in md


def test_unknown_task_model_or_data_fail_before_any_work(tmp_path):
    (tmp_path / "q.jsonl").write_text('{"id": "a", "question": "Q?", "answers": ["x"]}\n', encoding="utf-8")

    def run(task_table, model="smollm2-135m-instruct"):
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[run]\ndata_root = "{tmp_path.as_posix()}"\n{task_table}\n[models.m]\nmodel = "{model}"\n',
                       encoding="utf-8")
        return rp.main([str(cfg), "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")])

    with pytest.raises(ValueError, match=r"tasks\.a\.task: unknown task 'mmluu'"):
        run('[tasks.a]\ntask = "mmluu"\ndata = "q.jsonl"\nrecords = 5\n')
    with pytest.raises(FileNotFoundError, match=r"tasks\.a\.data: .*nope\.jsonl does not exist"):
        run('[tasks.a]\ntask = "sciq"\ndata = "nope.jsonl"\nrecords = 5\n')
    with pytest.raises(ValueError, match=r"models\.m\.model: 'no-such-model' is neither a model card"):
        run('[tasks.a]\ntask = "jsonl"\ndata = "q.jsonl"\nrecords = 5\n', model="no-such-model")
    with pytest.raises(ValueError, match=r"tasks\.a\.options"):
        run('[tasks.a]\ntask = "sciq"\ndata = "q.jsonl"\noptions = { shotz = 2 }\nrecords = 5\n')
    with pytest.raises(ValueError, match=r"run\.estimators: unknown"):
        run('estimators = ["acute-nope"]\n[tasks.a]\ntask = "jsonl"\ndata = "q.jsonl"\nrecords = 5\n')
    assert not (tmp_path / "work").exists()  # nothing was started


def test_a_transfer_stage_covers_every_task_of_its_model_whatever_only_names(tmp_path):
    (tmp_path / "x.jsonl").write_text("", encoding="utf-8")
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text('[run]\ntransfer = { repeats = 1 }\n'
                        '[tasks.a]\ndata = "x.jsonl"\n[tasks.b]\ndata = "x.jsonl"\n'
                        '[models.m]\nrecords = { a = 5, b = 5 }\n', encoding="utf-8")
    cfg = rp.load_config(cfg_path, data_root=tmp_path)

    def transfer_job(only):
        (job,) = [j for j in rp.plan_jobs(cfg, tmp_path / "w", tmp_path / "o", only=only) if j.stage == "transfer"]
        return job

    full = transfer_job(None)
    assert [t["key"] for t in full.payload["tasks"]] == ["a", "b"]
    narrowed = transfer_job(["m/b", "m/transfer"])
    assert narrowed.payload["tasks"] == full.payload["tasks"] and narrowed.hash == full.hash


def test_the_report_lists_failures_of_planned_stages_only(tmp_path):
    (tmp_path / "x.jsonl").write_text("", encoding="utf-8")
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text('[tasks.a]\ndata = "x.jsonl"\n[tasks.b]\ndata = "x.jsonl"\n'
                        '[models.m]\nrecords = { a = 5, b = 0 }\n', encoding="utf-8")
    cfg = rp.load_config(cfg_path, data_root=tmp_path)
    stages = {"collect/m/a": {"status": "failed", "detail": "boom"},
              "collect/m/b": {"status": "failed", "detail": "dropped from the plan since"},
              "evaluate/m/a": {"status": "ran"}}
    assert rp.plan.planned_failures(cfg, {"stages": stages}) == [("collect/m/a", "boom")]


def test_an_earlier_summary_keeps_the_pairs_this_report_did_not_evaluate(tmp_path):
    from acute.report.summary import SUMMARY_COLUMNS, kept_summary_rows, summary_csv, summary_markdown

    old = [{k: None for k in SUMMARY_COLUMNS} | {"model": "m", "task": "t", "n_records": 600, "accuracy": 0.5,
            "best_baseline": "platt", "best_baseline_auc_euro": 0.8, "default_estimator": "acute-cosine-stacked",
            "default_auc_euro": 0.81, "diff": 0.01, "ci_low": -0.01, "ci_high": 0.03, "default_smece": 0.02,
            "best_baseline_smece": 0.03},
           {k: None for k in SUMMARY_COLUMNS} | {"model": "m", "task": "u", "n_records": 700}]
    path = tmp_path / "summary.csv"
    path.write_text(summary_csv(old), encoding="utf-8")
    kept = kept_summary_rows(path, present={("m", "u")})
    assert [(r["model"], r["task"]) for r in kept] == [("m", "t")]
    assert kept[0]["evaluation"] == "kept" and kept[0]["diff"] == pytest.approx(0.01)
    assert kept[0]["n_records"] == 600 and kept[0]["skill"] is None
    assert "| m (kept) | t |" in summary_markdown(kept)
    assert kept_summary_rows(tmp_path / "missing.csv", set()) == []


def test_pairs_of_an_earlier_report_are_kept_in_their_own_table(driven, tmp_path):
    """A summary row whose evaluation is gone moves to summary-kept.csv and its own section, out of
    summary.csv and its Holm correction; regenerating again keeps it (read back from either file)."""
    import shutil

    from acute.report import ReportInputs, write_report
    from acute.report.summary import SUMMARY_COLUMNS, summary_csv

    out = tmp_path / "results"
    shutil.copytree(driven["out"], out)
    with open(out / "summary.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    old = {k: None for k in SUMMARY_COLUMNS} | {"model": "gone", "task": "qa", "n_records": 900, "diff": 0.02,
                                                "default_estimator": "acute-cosine-stacked"}
    (out / "summary.csv").write_text(summary_csv([old]), encoding="utf-8")
    evals = [("tiny", t, driven["work"] / "tiny" / t / "eval") for t in ("qa", "qa2")
             if (driven["work"] / "tiny" / t / "eval" / "results.json").is_file()]
    inputs = ReportInputs(out_dir=out, eval_runs=evals, protocol_runs=[], models=["tiny"], tasks=["qa", "qa2"])
    for _ in range(2):
        text = write_report(inputs).read_text(encoding="utf-8")
        with open(out / "summary.csv", newline="", encoding="utf-8") as fh:
            assert [(r["model"], r["task"]) for r in csv.DictReader(fh)] == [(r["model"], r["task"]) for r in rows]
        with open(out / "summary-kept.csv", newline="", encoding="utf-8") as fh:
            kept = list(csv.DictReader(fh))
        assert [(r["model"], r["task"], r["evaluation"], r["diff"]) for r in kept] == [("gone", "qa", "kept", "0.02")]
        assert "### Earlier evaluations (kept)" in text and "| gone (kept) | qa |" in text


# ----------------------------------------------------------------------------- committed tables
def _csv_rows(path: Path) -> list[dict]:

    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _section(text: str, heading: str) -> str:
    """``heading``'s line and what follows up to the next heading of its level or above."""
    level = heading.split(" ")[0]
    start = text.index(heading + "\n")
    ends = [i for i in (text.find("\n" + "#" * n + " ", start + 1) for n in range(1, len(level) + 1)) if i >= 0]
    return text[start:min(ends, default=len(text))]


def _report_only(fixture: dict, out: Path, work: Path) -> str:
    # --force: the report's settings hash covers the work folder, not the committed tables edited here
    argv = [str(fixture["cfg"]), "--out", str(out), "--work", str(work), "--stages", "report", "--force"]
    assert rp.main(argv) == 0
    return (out / "README.md").read_text(encoding="utf-8")


def _replaced_machine(cross_validated: dict, tmp_path: Path) -> tuple[Path, Path]:
    """Copies of the report and work folder where the pair tiny/qa2 was evaluated on another
    machine: its store and evaluation folder are gone, its tables are committed in the report."""
    import shutil

    out, work = tmp_path / "results", tmp_path / "work"
    shutil.copytree(cross_validated["out"], out)
    shutil.copytree(cross_validated["work"], work)
    shutil.rmtree(work / "tiny" / "qa2")
    timings = json.loads((work / "timings.json").read_text(encoding="utf-8"))  # nor are its stage times
    timings["stages"] = {k: v for k, v in timings["stages"].items() if not k.endswith("/tiny/qa2")}
    (work / "timings.json").write_text(json.dumps(timings), encoding="utf-8")
    return out, work


def test_a_pair_evaluated_elsewhere_is_read_back_from_its_committed_tables(cross_validated, tmp_path):
    """A planned pair without an evaluation folder here stays in the report from the tables an
    earlier report committed (same settings): the same summary row with evaluation "committed
    tables" (in summary.csv, so in its Holm correction), the same per-task section, its figures
    kept on disk and shown, its learning-curve row and plot; once its learning-curve.json is
    gone (tables committed before the report kept it) the earlier README's row is kept verbatim."""
    before = (cross_validated["out"] / "README.md").read_text(encoding="utf-8")
    rows_before = _csv_rows(cross_validated["out"] / "summary.csv")
    out, work = _replaced_machine(cross_validated, tmp_path)
    kept = {name: (out / "figures" / name).read_bytes()
            for name in ("qa2-euro-curves.png", "qa2-reliability.png", "learning-curve-tiny-qa2.png")}
    (out / "figures" / "gone-euro-curves.png").write_bytes(b"a task no longer in the report")
    lc_row = next(line for line in _section(before, "## Learning curves").splitlines()
                  if line.startswith("| tiny | qa2 |"))
    for lc_table in (True, False):  # the learning-curve row from learning-curve.json, then from the earlier README
        if not lc_table:
            (out / "evaluations" / "tiny" / "qa2" / "learning-curve.json").unlink()
        text = _report_only(cross_validated, out, work)
        rows = _csv_rows(out / "summary.csv")
        assert [(r["model"], r["task"], r["evaluation"]) for r in rows] == [
            ("tiny", "qa", "this run"), ("tiny", "qa2", "committed tables")]
        assert [dict(r, evaluation=None) for r in rows] == [dict(r, evaluation=None) for r in rows_before]
        assert not (out / "summary-kept.csv").exists() and "(kept)" not in text
        assert "Read back from the tables an earlier report committed" in text and "tiny/qa2." in text
        assert _section(text, "### qa2") == _section(before, "### qa2")  # tables, sizes, figures as before
        for name, data in kept.items():
            assert (out / "figures" / name).read_bytes() == data and f"(figures/{name})" in text
        assert (out / "figures" / "qa-euro-curves.png").is_file()  # drawn again from qa's predictions
        assert not (out / "figures" / "gone-euro-curves.png").exists()
        assert lc_row in _section(text, "## Learning curves").splitlines()
        assert "| tiny | qa2 | 40 | 40 |" in text and "| committed tables |" in text  # plan and status
        # the wall times of qa2's stages are the earlier run's, carried over with its tables
        stages = json.loads((out / "timings.json").read_text(encoding="utf-8"))["stages"]
        assert {"collect/tiny/qa2", "evaluate/tiny/qa2"} <= set(stages)


def test_committed_tables_of_other_settings_or_unfinished_stay_kept_rows(cross_validated, tmp_path):
    """Committed tables of another cross-validation, or of an evaluation that did not finish, are
    not read back: the pair stays a kept row of the earlier summary, as before."""
    out, work = _replaced_machine(cross_validated, tmp_path)
    path = out / "evaluations" / "tiny" / "qa2" / "results.json"
    original = json.loads(path.read_text(encoding="utf-8"))
    diff = next(r["diff"] for r in _csv_rows(out / "summary.csv") if r["task"] == "qa2")
    for change in ({"split": {**original["split"], "n_repeats": 2}}, {"complete": False}):
        path.write_text(json.dumps({**original, **change}), encoding="utf-8")
        text = _report_only(cross_validated, out, work)
        assert [(r["model"], r["task"]) for r in _csv_rows(out / "summary.csv")] == [("tiny", "qa")]
        assert [(r["model"], r["task"], r["evaluation"], r["diff"]) for r in _csv_rows(out / "summary-kept.csv")] == [
            ("tiny", "qa2", "kept", diff)]
        assert "| tiny (kept) | qa2 |" in text and "### qa2" not in text


def test_committed_tables_are_read_only_when_complete_and_of_the_same_settings(tmp_path, caplog):
    from acute.report.runs import committed_eval_run, settings_differences

    folder = tmp_path / "evaluations" / "m" / "t"
    folder.mkdir(parents=True)
    results = {"complete": True, "split": {"mode": "cv", "seed": 0, "n_splits": 5, "n_repeats": 5, "n_records": 600,
                                           "accuracy": 0.25, "group_by": None},
               "params": {"estimators": ["raw", "platt", "constant"], "controls": ["constant"], "n_bootstrap": 1000,
                          "probe_params": {"oof": "oob"}, "n_jobs": 1}, "results": []}
    expected = {"split": {"mode": "cv", "seed": 0, "n_splits": 5, "n_repeats": 5, "group_by": None},
                "params": {"estimators": ["raw", "platt"], "n_bootstrap": 1000, "probe_params": {"oof": "oob"}}}
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")
    run = committed_eval_run(folder, "m", "t", expected)  # the controls a store can feed are no setting
    assert run is not None and run.tables_only
    assert (run.n, run.accuracy, run.ids, run.predictions) == (600, 0.25, [], {})
    assert settings_differences(results, {"split": {"n_repeats": 2}, "params": {"probe_params": {}}}) == [
        "split.n_repeats = 5 (expected 2)", 'params.probe_params = {"oof": "oob"} (expected {})']
    with caplog.at_level("WARNING", logger="acute.report.runs"):
        assert committed_eval_run(folder, "m", "t", {"params": {"estimators": ["raw"]}}) is None
        (folder / "results.json").write_text(json.dumps({**results, "complete": False}), encoding="utf-8")
        assert committed_eval_run(folder, "m", "t", expected) is None
    other, unfinished = (r.getMessage() for r in caplog.records)
    assert str(folder / "results.json") in other and "params.estimators" in other
    assert str(folder / "results.json") in unfinished and "not a complete evaluation" in unfinished


def test_committed_tables_are_rows_of_the_holm_correction():
    from acute.report import EvalRun
    from acute.report.summary import summary_rows

    def run(model: str, p: float, tables_only: bool) -> EvalRun:
        default = {"estimator": "acute-pca10-stacked", "accuracy": 0.5, "auc_euro_all": 0.80, "smece": 0.02,
                   "diff_auc_euro_all": 0.01, "diff_auc_euro_all_t_p": p, "diff_auc_euro_all_boot_p": p}
        results = {"reference": "platt", "split": {"mode": "cv", "n_splits": 5, "n_repeats": 5, "n_records": 2},
                   "results": [default, {"estimator": "platt", "accuracy": 0.5, "auc_euro_all": 0.79, "smece": 0.02}]}
        n = 0 if tables_only else 2
        return EvalRun(model=model, task="t", path=Path(model), ids=["a", "b"][:n], correct=np.zeros(n, dtype=bool),
                       predictions={} if tables_only else {"platt": np.full(2, 0.5)}, results=results)

    rows = summary_rows([run("here", 0.03, False), run("elsewhere", 0.04, True)], "acute-pca10-stacked")
    assert [(r["evaluation"], r["holm_significant"]) for r in rows] == [
        ("this run", False), ("committed tables", False)]
    # alone the first would survive (0.03 < 0.05): the committed row is one of Holm's family of two
    assert summary_rows([run("here", 0.03, False)], "acute-pca10-stacked")[0]["holm_significant"] is True


def test_learning_curve_rows_of_committed_pairs_without_their_table_come_from_the_earlier_readme(tmp_path):
    from acute.report import EvalRun
    from acute.report.figures import learning_curve_section

    header = "| model | task | training records | best baseline | its auc-euro | acute-pca10-stacked auc-euro |"
    previous = "\n".join([
        "# Reproduction results", "", "## Learning curves", "", "auc-euro (all) ...:", "", header,
        "|---|---:|---:|---:|---:|---:|", "| m | t | 200 / 800 | platt | 0.875 / 0.875 | 0.874 / 0.877 |",
        "| m | u | 200 / 800 | raw | 0.700 / 0.700 | 0.700 / 0.700 |", "",
        "![learning curve, m, t](figures/learning-curve-m-t.png)", "", "## Ablation: ACUTE views", "", "| a | b |"])
    fig_dir = tmp_path / "figures"
    fig_dir.mkdir()
    (fig_dir / "learning-curve-m-t.png").write_bytes(b"png")

    def tables_only(task: str) -> EvalRun:
        folder = tmp_path / "evaluations" / "m" / task
        folder.mkdir(parents=True, exist_ok=True)
        return EvalRun(model="m", task=task, path=folder, ids=[], correct=np.zeros(0, dtype=bool), predictions={})

    lines = learning_curve_section([tables_only("t")], fig_dir, previous)
    assert [line for line in lines if line.startswith("| ")] == [
        header, "| m | t | 200 / 800 | platt | 0.875 / 0.875 | 0.874 / 0.877 |"]
    assert "![learning curve, m, t](figures/learning-curve-m-t.png)" in lines
    # a committed learning-curve.json of other probes sets another header: the earlier rows do not fit it
    other = tables_only("v")
    (other.path / "learning-curve.json").write_text(json.dumps({
        "sizes": [50, 100], "best_baseline": "platt", "shown": ["platt", "auto"],
        "rows": [{"estimator": e, "size": n, "auc_euro_all_mean": 0.8} for e in ("platt", "auto") for n in (50, 100)]}))
    lines = learning_curve_section([tables_only("t"), other], fig_dir, previous)
    assert [line for line in lines if line.startswith("| ")] == [
        "| model | task | training records | best baseline | its auc-euro | auto auc-euro |",
        "| m | v | 50 / 100 | platt | 0.800 / 0.800 | 0.800 / 0.800 |"]
    assert learning_curve_section([tables_only("t")], fig_dir, None) == []
