"""pod_kill on a cluster: the means it needs (kube.kill_command or a deletion named for
what it is), the permissions each asks, and the container's own status as the evidence."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client

from harness.cluster.kube import access
from harness.cluster.kube.watches import _back_off, _termination
from harness.config import ConfigError
from harness.config.schema import load_config

pytestmark = pytest.mark.unit


def test_a_kill_command_needs_no_verb_of_the_api_and_a_deletion_needs_delete_pods():
    def refused(kinds):
        base, own = access.missing(
            lambda p: not (p.verb == "delete" and p.resource == "pods"), kinds
        )
        return [access.line(p, "ns") for p in base + own]

    assert refused(access.kinds_of("pod_kill", "command")) == []
    (line,) = refused(access.kinds_of("pod_kill", "delete"))
    assert "needed by pod_kill with kube.pod_kill: delete" in line
    assert refused(access.kinds_of("drain", "delete")) == []  # only pod_kill deletes


@pytest.mark.parametrize(
    "sets, words",
    [
        (["kube.pod_kill=shoot"], "kube.pod_kill must be command or delete"),
        (["kube.kill_command=[ctr, kill, '{container}', '{pid}']"], "'{pid}' names 'pid'"),
        (["kube.kill_command=[ctr, '{0}']"], "the fields are {namespace}, {pod}"),
    ],
)
def test_bad_kill_settings_are_one_line_errors(sets, words):
    with pytest.raises(ConfigError) as info:
        load_config(None, sets)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_kill_command_reads_every_field():
    cfg = load_config(
        None,
        [
            "kube.kill_command=[k, '{namespace}/{pod}/{container}', '{container_id}', '{node}', '{signal}']"
        ],
    )
    assert cfg.kube.kill_command[1] == "{namespace}/{pod}/{container}"


def pod(state=None, last=None, restarts=0, name="engine") -> client.V1Pod:
    status = client.V1ContainerStatus(
        name=name, image="i", image_id="", ready=False, restart_count=restarts,
        state=state or client.V1ContainerState(running=client.V1ContainerStateRunning()),
        last_state=last or client.V1ContainerState(),
    )  # fmt: skip
    return client.V1Pod(status=client.V1PodStatus(container_statuses=[status]))


def killed(code=137, reason="Error") -> client.V1ContainerState:
    return client.V1ContainerState(
        terminated=client.V1ContainerStateTerminated(
            exit_code=code, reason=reason, container_id="containerd://abcdef0123456789",
            finished_at=datetime(2026, 12, 5, 14, 0, 1, tzinfo=UTC),
        )
    )  # fmt: skip


def test_one_exit_reads_the_same_before_and_after_the_kubelet_restarts_the_container():
    """The kubelet shows a SIGKILLed engine as state terminated (137), then, restarted, as
    last state terminated with restartCount up: one exit, reported once by the watch."""
    assert _termination(pod(), "engine") is None  # never exited
    down = _termination(pod(state=killed()), "engine")
    up = _termination(pod(last=killed(), restarts=1), "engine")
    assert down == up and down["code"] == 137 and down["container_id"] == "abcdef012345"
    oom = _termination(pod(last=killed(137, "OOMKilled"), restarts=2), "engine")
    assert oom["reason"] == "OOMKilled" and oom != up


def test_a_crash_loop_back_off_is_read_from_the_containers_waiting_state():
    """CrashLoopBackOff, as the kubelet writes it into the status while it waits: the
    back-off in seconds and the restarts so far; nothing while the container runs."""

    def waiting(message, reason="CrashLoopBackOff"):
        return client.V1ContainerState(
            waiting=client.V1ContainerStateWaiting(reason=reason, message=message)
        )

    twenty = "back-off 20s restarting failed container=engine pod=sim-1_ns(uid)"
    assert _back_off(pod(state=waiting(twenty), restarts=2), "engine") == {
        "delay_s": 20,
        "restarts": 2,
    }
    five_min = waiting("back-off 5m0s restarting failed container=engine pod=sim-1_ns(uid)")
    assert _back_off(pod(state=five_min, restarts=9), "engine")["delay_s"] == 300
    assert _back_off(pod(state=waiting("", "ContainerCreating")), "engine") is None
    assert _back_off(pod(), "engine") is None
