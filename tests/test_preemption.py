"""Preemption detection, notices and seeded draws, without Ray (pure, fast).

The metadata endpoint of a cloud cannot exist here: a stand-in HTTP server on 127.0.0.1
answers as AWS and GCP do.
"""

from __future__ import annotations

import http.server
import math
import signal
import threading
import time

import pytest

from hpsearch.recovery.preemption import (Notice, NoticePoller, SimulatedPreemptions, is_notice,
                                 node_lost, preemption_delay_s, preemption_reason,
                                 unreachable, watch_sigterm)

# -- which evidence makes a preemption ---------------------------------------------------


@pytest.mark.parametrize("evidence, reason", [
    ({"notice": "SIGTERM"}, "SIGTERM"),
    ({"notice": "notice: http://169.254.169.254/latest/meta-data/spot/instance-action",
      "killed": "simulated"}, "notice: http://169.254.169.254/latest/meta-data/spot/"
                              "instance-action"),
    ({"killed": "simulated preemption (rate)"}, "simulated preemption (rate)"),
    ({"note": {"reason": "SIGTERM", "epoch": 3}}, "SIGTERM at epoch 3"),
    ({"note": {}}, None),  # an empty note is no evidence
    ({"error_text": "ray.exceptions.NodeDiedError: the node has died"}, "its node went away"),
    ({"error_text": "RayActorError: The actor died because its node was terminated"},
     "its node went away"),
    ({"error_text": "RuntimeError: boom at epoch 2"}, None),
    # Unreachable, then Ray reported its node dead: a spot node taken back.
    ({"error_text": "ray.exceptions.ActorUnavailableError: The actor 1f is unavailable: "
                    "The actor is temporarily unavailable: RpcError: Connection reset by "
                    "peer", "node_gone": True}, "its node went away"),
    ({"error_text": "ray.exceptions.ActorUnavailableError: The actor 1f is unavailable"},
     None),
    ({}, None),
])
def test_preemption_reason_weighs_every_kind_of_evidence(evidence, reason):
    assert preemption_reason(**evidence) == reason


def test_node_lost_is_case_blind():
    assert node_lost("NodeDiedError") and node_lost("The NODE DIED")
    assert not node_lost("the node is fine")


def test_an_unreachable_trial_process_is_told_apart_from_the_trials_own_error():
    assert unreachable("ray.exceptions.ActorUnavailableError: The actor 1f is unavailable")
    assert unreachable("The actor is TEMPORARILY UNAVAILABLE: RpcError")
    assert not unreachable("RuntimeError: boom at epoch 2")
    assert not unreachable("ray.exceptions.NodeDiedError: the node has died")


class FakeClock:
    """Simulated seconds; sleeping advances them."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize("dies_at, listed, expected, waited", [
    (None, True, False, 30.0),   # still alive after the wait: the trial's own error
    (4.0, True, True, 4.0),      # Ray's health check declares it dead 4 s later
    (0.0, True, True, 0.0),      # already dead
    (None, False, True, 0.0),    # no longer listed at all
])
def test_node_died_waits_for_rays_health_check_at_most_wait_s(dies_at, listed, expected,
                                                              waited):
    from hpsearch.adapters.ray.tune import node_died

    clock = FakeClock()

    def nodes():
        alive = dies_at is None or clock() < dies_at
        other = {"NodeID": "other", "Alive": True}
        return [other, {"NodeID": "abc", "Alive": alive}] if listed else [other]

    assert node_died("abc", wait_s=30.0, list_nodes=nodes, clock=clock,
                     sleep=clock.sleep) is expected
    assert clock() == pytest.approx(waited, abs=0.5)


# -- notices -------------------------------------------------------------------------


@pytest.mark.parametrize("status, body, notice", [
    (404, "", False),  # AWS without a notice
    (200, '{"action": "terminate", "time": "2026-12-01T10:00:00Z"}', True),
    (200, "FALSE", False), (200, "TRUE", True),  # GCP
    (200, "", False), (200, "null", False), (500, "TRUE", False),
])
def test_metadata_answers(status, body, notice):
    assert is_notice(status, body) is notice


def test_a_notice_has_a_deadline_and_is_set_once():
    notice = Notice()
    assert not notice.is_set() and notice.remaining_s() == math.inf
    notice.set("SIGTERM", 30.0)
    notice.set("later", 1.0)
    assert notice.is_set() and notice.reason == "SIGTERM"
    assert 29.0 < notice.remaining_s() <= 30.0


class Metadata(http.server.BaseHTTPRequestHandler):
    """AWS's spot/instance-action on 127.0.0.1: 404 until ``armed``, then a notice."""

    armed = threading.Event()
    #: Set once the endpoint has answered 404 twice (the poller kept polling).
    refused_twice = threading.Event()
    refusals = 0

    def do_GET(self):  # noqa: N802 - http.server's name
        if not self.armed.is_set():
            self.send_response(404)
            self.end_headers()
            Metadata.refusals += 1
            if Metadata.refusals >= 2:
                self.refused_twice.set()
            return
        body = b'{"action": "terminate"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.timeout(30)
def test_the_poller_sets_the_notice_when_the_metadata_says_so():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
    # A short poll interval: shutdown() waits for serve_forever's next poll (0.5 s).
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/latest/meta-data/spot/instance-action"
    notice = Notice()
    poller = NoticePoller(url, 0.05, notice, grace_s=120.0)
    try:
        poller.start()
        assert Metadata.refused_twice.wait(10)
        assert not notice.is_set()  # two answers without a notice set nothing
        Metadata.armed.set()
        deadline = time.monotonic() + 10
        while not notice.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert notice.is_set() and notice.reason == f"notice: {url}"
        assert notice.remaining_s() > 100
    finally:
        poller.stop()
        server.shutdown()
        server.server_close()
        Metadata.armed.clear()
        Metadata.refused_twice.clear()
        Metadata.refusals = 0


def test_an_unreachable_endpoint_counts_errors_and_sets_nothing():
    notice = Notice()
    poller = NoticePoller("http://127.0.0.1:9/none", 0.01, notice, 1.0)
    assert poller.check() is False and poller.errors == 1
    assert not notice.is_set()


def test_sigterm_in_the_main_thread_sets_the_notice_and_chains_the_old_handler():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        notice = Notice()
        undo = watch_sigterm(notice, 5.0, on_signal=lambda: True)
        signal.raise_signal(signal.SIGTERM)
        assert notice.is_set() and notice.reason == "SIGTERM" and notice.via_signal
        assert seen == [signal.SIGTERM]  # the handler that was there still runs
        undo()
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM, signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- seeded simulated preemptions ------------------------------------------------------


def test_draws_are_seeded_per_trial_and_attempt():
    a = preemption_delay_s(3, 1, 1, 3600.0)
    assert a == preemption_delay_s(3, 1, 1, 3600.0)
    assert a != preemption_delay_s(3, 1, 2, 3600.0) != preemption_delay_s(4, 1, 1, 3600.0)
    assert preemption_delay_s(3, 1, 1, 0.0) == math.inf


def test_the_mean_delay_follows_the_rate():
    delays = [preemption_delay_s(0, trial, 1, 60.0) for trial in range(4000)]
    assert sum(delays) / len(delays) == pytest.approx(60.0, rel=0.06)  # 1 / (60 per hour)


def test_simulated_preemptions_and_their_script():
    sim = SimulatedPreemptions(rate_per_hour=0.0, at=((2, 3),), seed=1)
    assert sim.draw_after_s(2, 1) is None
    assert not sim.scripted(2, 2)
    assert sim.scripted(2, 3) and not sim.scripted(2, 3)  # each fires once
    rated = SimulatedPreemptions(rate_per_hour=10.0, seed=1)
    assert rated.draw_after_s(0, 1) == preemption_delay_s(1, 0, 1, 10.0)
