"""Recovery's truthful statuses, pinned where an adversary would look: an incident with two
applications (the first reverted by the dead daemon, the second verified, or the second applied
and never verified), and recovery run twice in a row (two restarts): the second run changes
nothing the first wrote. The real recover() on a real store and engine."""

from __future__ import annotations

from ddtreed.incidents import Store, database_path
from ddtreed.loop.recovery import recover
from ddtreed.paths import shipped
from ddtreed.records import ServiceContext
from ddtreed.remediation import Engine, load_remediations
from ddtreed.service.host import LocalHost


def snapshot(store, ids):
    return [(i, (row := store.get(i))["status"], row["outcome"], len(row["steps"]),
             [a["status"] for a in row["applications"]]) for i in ids]


def test_two_applications_and_a_second_recovery(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    store = Store(database_path(state))
    engine = Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]), incidents=store)
    context = ServiceContext(argv=("python", "-m", "sglang.launch_server", "--port", "30000"))

    def apply(incident_id: int) -> str:
        plan = engine.plan("disable-cuda-graph", context)
        assert plan.applicable, plan.reason
        application = engine.apply(plan, incident_id=incident_id)
        store.add_step(incident_id, "applied", "disable-cuda-graph")
        return application.application_id

    held = store.open_incident("crash", message="first fix failed, the second held, then the kill")
    engine.revert(apply(held))
    store.mark_application(apply(held), "verified")
    probing = store.open_incident("crash", message="first fix failed, killed while probing the second")
    engine.revert(apply(probing))
    second = apply(probing)

    recover(engine, store, LocalHost(), str(state), None, None)
    first = snapshot(store, (held, probing))
    (_, status, outcome, _, applications), (_, status2, outcome2, _, applications2) = first
    assert status == "resolved" and "disable-cuda-graph held" in outcome and "the fix stays" in outcome, outcome
    assert applications == ["reverted", "verified"]
    assert status2 == "reverted" and "not verified when ddtreed stopped" in outcome2, outcome2
    assert applications2 == ["reverted", "reverted"] and store.application_entry(second)["status"] == "reverted"

    recover(engine, store, LocalHost(), str(state), None, None)  # the start after that one
    assert snapshot(store, (held, probing)) == first
    store.close()
