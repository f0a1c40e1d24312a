"""deploy/prefect.yaml must point at real flows with matching parameters, pools and valid schedules."""

from __future__ import annotations

import inspect

import pytest
import yaml

from tests.conftest import REPO


@pytest.fixture(scope="module")
def prefect_yaml() -> dict:
    return yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())


def test_deployments_load_real_flows_with_matching_parameters(prefect_yaml, monkeypatch):
    from prefect.flows import load_flow_from_entrypoint

    monkeypatch.chdir(REPO)
    deployments = prefect_yaml["deployments"]
    assert {d["work_pool"]["name"] for d in deployments} == {"cpu", "gpu"}
    assert {d["name"] for d in deployments} >= {"demo-nightly", "pipeline-gpu", "lm-gpu"}
    for d in deployments:
        flow = load_flow_from_entrypoint(d["entrypoint"])
        signature = inspect.signature(flow.fn).parameters
        required = {n for n, p in signature.items() if p.default is inspect.Parameter.empty}
        assert required <= set(d["parameters"]) <= set(signature), d["name"]
        if "config_path" in d["parameters"]:
            assert (REPO / d["parameters"]["config_path"]).is_file()


def test_nightly_schedule_is_a_valid_cron(prefect_yaml):
    from prefect.client.schemas.schedules import CronSchedule

    nightly = next(d for d in prefect_yaml["deployments"] if d["name"] == "demo-nightly")
    (schedule,) = nightly["schedules"]
    assert CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"]).cron == "0 3 * * *"


def test_team_services_bind_loopback_only():
    compose = yaml.safe_load((REPO / "deploy" / "team" / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
