"""The versions part of a Scenario, for the scenarios that roll a candidate out (rollout,
canary, weighted_canary, adapter_rollout, pd_rollout): the candidate's settings, a config
error before acting when the rollout would meet no new candidate, the pods the act made,
and golden prompts asked of one pod directly."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from harness.engines.kinds import kind_of
from harness.scenario_context import ScenarioContext
from harness.timeline import disruption_time


class Versions:
    def __init__(self, ctx: ScenarioContext):
        self.ctx = ctx
        self.target, self.cfg = ctx.target, ctx.cfg

    def candidate_engine(self, section) -> dict:
        """The candidate's engine settings (a canary section's `engine`). An engine upgrade
        on the same weights (mode same) keeps them: the simulator answers from its
        weights, not its version, so the local simulator's candidate is given the
        baseline's."""
        engine = dict(section.engine)
        local = self.target.name == "local"
        if section.mode == "same" and local and kind_of(self.cfg.engine).answers_from_weights:
            engine = {"weights": self.cfg.engine.weights or self.cfg.version} | engine
        return engine

    def require_candidate(self, version: str, engine: dict | None = None, key: str = "") -> None:
        """Before acting: a one-line config error when a rollout to `version` would not meet
        a new candidate (its version is the baseline's; on a cluster, an image and engine
        settings that change nothing in the pod template), naming the keys to set."""
        from harness.config import ConfigError

        problem = self.target.candidate_problem(version, engine or {}, key or "next_version")
        if problem:
            raise ConfigError(problem)

    def new_pods(self, version: str, pods: list) -> list:
        """Of these pods, the ones the act made: of the version, created after the rollout
        (a second's slack: Kubernetes stamps creation to the second), and running the
        candidate's image where the target has images."""
        since = disruption_time(self.target.events())
        if since is None:
            return []  # nothing was rolled out: no pod is the candidate's
        image = self.target.candidate_image(version)
        return [
            p
            for p in pods
            if p.version == version
            and p.created_at >= since - 1.0
            and (image is None or p.image is None or p.image == image)
        ]

    def wait_ready(self, version: str, timeout_s: float):
        """The first ready pod of a version made by the rollout (the canary replica)."""
        found = self.ctx.wait_for(
            lambda: self.new_pods(version, self.target.ready_pods()),
            timeout_s,
            f"a ready pod of version {version}",
        )
        if not found:
            self.ctx.stop(
                f"no pod of version {version} made by the rollout became ready within "
                f"{timeout_s:g} s: nothing to compare (the startup scenario shows why a "
                "version does not start)",
                stage="disruption",
            )
        return found[0]

    def ask(self, pod, prompts: list, model: str | None = None) -> list:
        """Golden prompts to one pod directly (not through the gateway), so each answer is
        known to come from that pod's version (model: the model they name, an adapter;
        load.model by default). One at a time: the pod is also serving the load, whose
        TTFT the prompts must not push over its SLO (two at a time did, on kube-local's
        two replicas of four slots each)."""
        url, settings = self.target.pod_endpoint(pod.name)
        return self.ctx.load().ask(url, prompts, model or self.cfg.load.model, settings)

    def ask_each(self, pods: list, prompts: list, model: str | None = None) -> dict[str, list]:
        """ask() of every pod at once (each pod still one prompt at a time): pod name ->
        its answers."""
        with ThreadPoolExecutor(max_workers=max(1, len(pods))) as pool:
            asked = list(pool.map(lambda pod: self.ask(pod, prompts, model), pods))
        return {pod.name: answers for pod, answers in zip(pods, asked, strict=True)}
