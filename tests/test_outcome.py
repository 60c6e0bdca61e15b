"""The job outcome record (`entrypoints/service/outcome.py`): what an executor returns, the queue
stores as JSON and `/jobs` shows, in the shape the job's JSON has always had."""

import pytest

from hfexport.entrypoints.service.outcome import HfJobRun, JobOutcome


def test_a_local_outcome_stores_the_fields_it_has_and_reads_back_the_same():
    outcome = JobOutcome(action="opened", pr_url="http://127.0.0.1/org/m/discussions/1", exit_code=0, warm=False)
    stored = outcome.to_dict()
    assert stored == {
        "action": "opened",
        "pr_url": "http://127.0.0.1/org/m/discussions/1",
        "exit_code": 0,
        "warm": False,
    }
    assert JobOutcome.of(stored) == outcome
    assert outcome["action"] == "opened" and dict(outcome) == stored  # read as the job's JSON


def test_an_hf_jobs_outcome_keeps_each_groups_job_without_empty_fields():
    outcome = JobOutcome(stage="COMPLETED", jobs={"cpu": HfJobRun(hf_job="j1", flavor="cpu-basic", timeout_s=60)})
    stored = outcome.timed(12.345).to_dict()
    assert stored == {
        "stage": "COMPLETED",
        "jobs": {"cpu": {"hf_job": "j1", "flavor": "cpu-basic", "timeout_s": 60}},
        "seconds": 12.3,
    }
    assert JobOutcome.of(stored).jobs["cpu"].hf_job == "j1"


def test_a_dict_with_a_key_no_outcome_has_is_refused_naming_it():
    with pytest.raises(TypeError, match="prurl"):
        JobOutcome.of({"action": "opened", "prurl": "x"})
