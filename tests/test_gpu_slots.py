"""The node's allocator (backend/runs/gpu_slots.py): which queued runs start, on which GPUs,
and that a run asking for several GPUs is not starved by runs asking for one. Pure: no
process is started."""

from __future__ import annotations

import pytest

from backend.runs.gpu_slots import MAX_GPUS, Ask, Grant, SlotsError, Wait, ask_problem, cpu_slots, decide


def test_one_cpu_slot_is_one_run_at_a_time() -> None:
    node = cpu_slots()
    assert node == (0,)
    first = decide(node, {}, [Ask("a"), Ask("b")])
    assert first.start == (Grant("a", (0,)),)
    assert first.waiting == (Wait("b", "busy", ("a",), None),)  # held by the run that starts now
    while_a_trains = decide(node, {"a": (0,)}, [Ask("b")])
    assert while_a_trains.start == ()
    assert while_a_trains.waiting == (Wait("b", "busy", ("a",), None),)


def test_three_one_gpu_runs_on_two_gpus_run_two_at_once_then_the_third() -> None:
    node = (0, 1)
    queue = [Ask("r1"), Ask("r2"), Ask("r3")]
    now = decide(node, {}, queue)
    assert now.start == (Grant("r1", (0,)), Grant("r2", (1,)))
    assert [w.run_id for w in now.waiting] == ["r3"]
    assert now.free == ()
    # r2 ends first: r3 gets its GPU, never r1's
    later = decide(node, {"r1": (0,)}, [Ask("r3")])
    assert later.start == (Grant("r3", (1,)),)


def test_a_two_gpu_run_is_not_starved_by_one_gpu_runs_queued_after_it() -> None:
    node = (0, 1)
    held = {"long": (0,)}
    stream = [Ask(f"small{n}") for n in range(5)]
    queue = [Ask("big", count=2), *stream]
    # GPU 1 is free, but it is the big run's: no small run takes it
    waiting = decide(node, held, queue)
    assert waiting.start == ()
    assert waiting.reserved == {1: "big"}
    assert waiting.waiting[0] == Wait("big", "busy", ("long",), None)
    assert all(w.reason == "reserved" and w.behind == "big" for w in waiting.waiting[1:])
    # the long run ends: the big run starts on both GPUs, ahead of every small one
    freed = decide(node, {}, queue)
    assert freed.start == (Grant("big", (0, 1)),)
    # a stream of 1-GPU runs, queued before the big one, keeps one GPU busy at every turn:
    # once the big run is at the head, the next GPU to free is kept for it, and it starts
    # as soon as both are free (first come, first served otherwise)
    held = {"small0": (0,), "small1": (1,)}
    queue = [Ask("small2"), Ask("big", count=2), Ask("small3"), Ask("small4")]
    small1_ends = decide(node, {"small0": (0,)}, queue)
    assert small1_ends.start == (Grant("small2", (1,)),)  # it was ahead of the big run
    queue = queue[1:]
    small0_ends = decide(node, {"small2": (1,)}, queue)
    assert small0_ends.start == () and small0_ends.reserved == {0: "big"}
    small2_ends = decide(node, {}, queue)
    assert small2_ends.start == (Grant("big", (0, 1)),)
    assert [w.run_id for w in small2_ends.waiting] == ["small3", "small4"]


def test_runs_behind_a_named_gpu_run_backfill_only_other_gpus() -> None:
    node = (0, 1, 2, 3)
    held = {"a": (2,)}
    queue = [Ask("wants2", indices=(2, 3)), Ask("one"), Ask("two", count=2), Ask("three")]
    decision = decide(node, held, queue)
    # GPU 3 is kept for wants2 (it waits for a's GPU 2); 0 and 1 are free for the others
    assert decision.reserved == {2: "wants2", 3: "wants2", 1: "two"}
    assert decision.start == (Grant("one", (0,)),)
    assert decision.waiting[0] == Wait("wants2", "busy", ("a",), None)
    # "two" asks for 2 GPUs with only GPU 1 left open: it waits and keeps GPU 1, so "three"
    # behind it does not take it either (it would delay "two")
    assert decision.waiting[1] == Wait("two", "reserved", (), "wants2")  # GPUs 1 and 3 are free, 3 is kept
    assert decision.waiting[2] == Wait("three", "reserved", (), "two")
    assert decision.free == (1, 3)
    # without the named run's wait, a 1-GPU run behind it would start on 0 or 1 only, never 3
    assert decide(node, held, [Ask("wants2", indices=(2, 3)), Ask("x")]).start == (Grant("x", (0,)),)


def test_a_count_run_that_waits_reserves_the_free_gpus_for_itself() -> None:
    node = (0, 1, 2, 3)
    decision = decide(node, {"a": (0,), "b": (1,)}, [Ask("four", count=4), Ask("one")])
    assert decision.start == ()
    assert decision.reserved == {2: "four", 3: "four"}
    assert decision.waiting == (Wait("four", "busy", ("a", "b"), None), Wait("one", "reserved", (), "four"))


def test_a_run_that_can_never_start_does_not_block_the_queue() -> None:
    node = (0, 1)
    queue = [Ask("too-many", count=3), Ask("no-such", indices=(5,)), Ask("fine")]
    decision = decide(node, {}, queue)
    assert decision.start == (Grant("fine", (0,)),)
    assert [(w.run_id, w.reason) for w in decision.waiting] == [("too-many", "impossible"), ("no-such", "impossible")]
    assert decision.reserved == {}
    assert ask_problem(Ask("x", indices=(1, 5)), node) == "GPU 5 is not on this node (it has 0, 1)"
    assert ask_problem(Ask("x", count=3), node) == "3 GPUs asked, the node has 2"
    assert ask_problem(Ask("x", count=2), node) is None


def test_bounds_are_refused() -> None:
    with pytest.raises(SlotsError):
        decide(tuple(range(MAX_GPUS + 1)), {}, [])
    with pytest.raises(SlotsError):
        decide((0, 0), {}, [])
    with pytest.raises(SlotsError):
        decide((0,), {}, [Ask(str(n)) for n in range(1001)])
    with pytest.raises(SlotsError):
        decide((0,), {}, [Ask("x", count=0)])
    with pytest.raises(SlotsError):
        decide((0, 1), {}, [Ask("x", indices=(1, 1))])
    with pytest.raises(SlotsError):
        cpu_slots(0)


def test_a_gpu_is_never_given_twice_nor_one_that_is_held() -> None:
    import random

    rng = random.Random(30)
    for _ in range(300):
        node = tuple(sorted(rng.sample(range(16), rng.randint(1, 8))))
        held: dict[str, tuple[int, ...]] = {}
        pool = list(node)
        rng.shuffle(pool)
        for n in range(rng.randint(0, 3)):
            if pool:
                held[f"live{n}"] = (pool.pop(),)
        queue = []
        for n in range(rng.randint(0, 12)):
            if rng.random() < 0.3:
                queue.append(Ask(f"q{n}", indices=tuple(rng.sample(node, rng.randint(1, len(node))))))
            else:
                queue.append(Ask(f"q{n}", count=rng.randint(1, 3)))
        decision = decide(node, held, queue)
        given = [g for grant in decision.start for g in grant.gpus]
        assert len(given) == len(set(given))
        assert not set(given) & {g for gpus in held.values() for g in gpus}
        assert set(given) <= set(node)
        for grant in decision.start:
            ask = next(a for a in queue if a.run_id == grant.run_id)
            assert len(grant.gpus) == ask.wanted and (not ask.indices or grant.gpus == ask.indices)
            # no run started on a GPU reserved by a run ahead of it
            ahead = {a.run_id for a in queue[: queue.index(ask)]}
            assert not any(decision.reserved.get(g) in ahead for g in grant.gpus)
        assert {w.run_id for w in decision.waiting} | {g.run_id for g in decision.start} == {a.run_id for a in queue}


def test_the_node_is_the_gpus_the_app_sees_else_its_cpu_slots(tmp_path) -> None:
    from backend.runs.gpu_slots import node_gpus
    from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards
    from ui.serve import parse_args

    root = build_fake_sysfs(tmp_path / "sys", server_cards(4), bmc_vga=False)
    assert node_gpus(root, env={}) == (0, 1, 2, 3)
    # a container's or Slurm's ROCR_VISIBLE_DEVICES bounds the node; HIP numbers what is left
    assert node_gpus(root, env={"ROCR_VISIBLE_DEVICES": "1,3"}) == (0, 1)
    assert node_gpus(tmp_path / "no-gpus", env={}) == (0,)
    assert node_gpus(tmp_path / "no-gpus", env={}, cpu_slot_count=3) == (0, 1, 2)
    assert parse_args([]).cpu_slots == 1 and parse_args(["--cpu-slots", "4"]).cpu_slots == 4
    for bad in ("0", "65"):
        with pytest.raises(SystemExit):
            parse_args(["--cpu-slots", bad])
