"""A crash loop's next crash is on disk before the service is stopped, as a new incident's row is.

Before: the `recurred` step of an open incident was written only after the stop (with the exit
code the stop told), so a power cut or a kill of ddtreed during the stop lost a crash the daemon
had already read, and `detection_latency.py` could not time half its events. Now the step is
written right after the diagnosis, and what the stop tells (exit code, the service's last lines)
is added to that same step afterwards: one step per crash, its evidence complete."""

from __future__ import annotations

from ddtreed.loop.daemon import EXIT_GAVE_UP
from ddtreed.testing import crashing
from test_loop_middle import Loop


def test_each_recurrence_is_recorded_before_its_stop_and_completed_after(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: crashing(), stop_on=None,
                policy={"mode": "off", "max_restarts": 3, "backoff_initial_s": 0.5})
    daemon, seen = loop.daemon, []
    stop = daemon.stop_service

    def stop_service(reason, *args, **kwargs):
        if reason == "crash":  # what the store holds when the daemon stops a crashed service
            incidents = daemon.store.list_incidents()
            seen.append([(row["id"], row["recurrences"]) for row in incidents])
        return stop(reason, *args, **kwargs)

    daemon.stop_service = stop_service
    assert loop.run() == EXIT_GAVE_UP
    [incident_id] = {outcome.incident_id for outcome in loop.outcomes}
    # the founding crash's row, then each recurrence, each already counted at its stop
    assert seen == [[(incident_id, n)] for n in range(len(loop.outcomes))], seen
    incident = loop.incident(incident_id)
    recurred = [step for step in incident["steps"] if step["step"] == "recurred"]
    assert len(recurred) == len(loop.outcomes) - 1 == incident["recurrences"] >= 2
    for step in recurred:  # completed after the stop: the exit code the stop told is in the step
        assert step["data"]["evidence"]["exit_code"] == 1, step
        assert step["detail"].startswith("exit code 1 again"), step["detail"]
    assert incident["evidence"]["exit_code"] == 1
