"""A request whose answer lacks a source the probe reads (or holds a NaN in one) is that request's
400 naming the source; the other requests of its batch are scored as if alone."""

from __future__ import annotations

import numpy as np
import pytest
from servers import running  # tests/servers.py
from service import NAME, TIMEOUT  # tests/serving/service.py

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from acute.scoring import Scorer  # noqa: E402
from acute.scoring.sources import SourceError  # noqa: E402
from acute.serving import create_app  # noqa: E402
from acute.serving.jobs import Job, JobResult, score_jobs  # noqa: E402


class NaNLogprobs(Scorer):
    """A scorer whose answers to prompts mentioning Mars come back with a NaN token log-prob (as a
    broken engine's would): the live sources refuse them."""

    def _decided(self, items, texts, gens, answers, gates, generation_s=0.0):
        for item, g in zip(items, gens):
            if "Mars" in str(item):
                g.token_logprobs = np.full_like(g.token_logprobs, np.nan)
        return super()._decided(items, texts, gens, answers, gates, generation_s)


def test_the_failing_request_alone_is_refused_naming_the_source(loaded, probe):
    model, tok = loaded
    scorer = NaNLogprobs(model, tok, probe)
    bad, good = score_jobs(scorer, [Job(item="Mars is"), Job(item="Gold is")])
    assert isinstance(bad, SourceError) and bad.source == "confidence" and "NaN" in str(bad)
    assert isinstance(good, JobResult)
    alone = Scorer(model, tok, probe).generate("Gold is")
    assert good.scored.confidence == pytest.approx(alone.confidence, abs=1e-6)


def test_over_http_it_is_a_400_naming_the_source(loaded, probe):
    model, tok = loaded
    app = create_app(NaNLogprobs(model, tok, probe), model_name=NAME, max_wait_ms=0)
    with running(app) as url:
        bad = httpx.post(url + "/v1/score", json={"prompt": "Mars is", "risk": 0.5}, timeout=TIMEOUT)
        good = httpx.post(url + "/v1/score", json={"prompt": "Gold is", "risk": 0.5}, timeout=TIMEOUT)
    assert bad.status_code == 400, bad.text
    err = bad.json()["error"]
    assert err["type"] == "invalid_request_error" and "'confidence' source" in err["message"]
    assert good.status_code == 200
