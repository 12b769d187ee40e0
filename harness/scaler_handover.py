"""The replica count handed back to the workload's own scaler (kube.scaler=cluster: its
HPA or ScaledObject decides), for the scale scenarios. The part a Scenario is built
with: it is given the target, the scenario settings and the scenario's own way to let
time pass, to wait, to stop early and to skip."""

from __future__ import annotations

import time
from collections.abc import Callable


class ScalerHandover:
    def __init__(
        self,
        target,
        settings,
        let_pass: Callable[[float, str], None],
        wait_for: Callable,
        stop: Callable[[str], None],
        skip: Callable[[str], None],
        in_flight: Callable[[], int],
    ):
        """settings: the config's scenario section (hpa_sync_s, recovery_s); stop: end the
        scenario INCONCLUSIVE with a reason; in_flight: the load's streams in flight."""
        self.target, self.settings = target, settings
        self.let_pass, self.wait_for, self.stop, self.skip = let_pass, wait_for, stop, skip
        self.in_flight = in_flight

    @property
    def cluster(self) -> bool:
        """True when the workload's own HPA or ScaledObject decides the replica count
        (kube.scaler=cluster on a cluster); False where rollcheck plays the scaler."""
        return self.target.scaler() == "cluster"

    def require(self) -> None:
        """Before acting, with kube.scaler=cluster: SKIPPED if no scaler targets the workload."""
        if self.cluster:
            blocker = self.target.autoscaler_blocker()
            if blocker:
                self.skip(f"cannot hand over to an autoscaler here: {blocker}")

    def hand_over(self, as_act: bool = True) -> None:
        """With kube.scaler=cluster: the replica count goes back to the workload's own
        scaler, and what it decides from here is on the timeline. as_act: this is the
        scenario's act (scale_down); scale_up's act is the load step that follows."""
        # first, the scaler's metrics catch up with what it is handed (scrape, query,
        # polling: scenario.hpa_sync_s): handed an answer its source has not seen yet, a
        # scaler acts on a reading from before it (measured: KEDA read 0 from Prometheus
        # one scrape behind and scaled the replica with the answer to zero)
        self.let_pass(self.settings.hpa_sync_s, "the scaler's metrics to catch up")
        if as_act:
            self.target.hand_back(as_act)
            return
        # A preparation (the load is on): the scaler may add replicas but not remove any
        # until it shows it has read the load, so what it decides next is from readings
        # of this load. (CI: Prometheus first scraped a pod 6 s after it was Ready; KEDA,
        # handed the count 5 s after, read nothing and, never active before, scaled the
        # replica with seven streams on it to zero at once.)
        t = time.time()
        self.target.hand_back(as_act, hold_scale_in=True)
        if self.target.scaler_active_since(t) is not None:
            bound = self.settings.recovery_s
            if not self.wait_for(
                lambda: self.target.scaler_active_since(t), bound, "the scaler to read the load"
            ):
                self.stop(
                    f"the workload's scaler never read its triggers as active within "
                    f"scenario.recovery_s ({bound:g} s) of being handed the count with "
                    f"{self.in_flight()} streams in flight: its metrics do not "
                    "see the engines (the scrape, the query, the trigger's threshold)"
                )
            self.target.action("scaler_read_load", waited_s=round(time.time() - t, 1))
        self.target.release_scale_in()
