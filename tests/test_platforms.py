"""Platforms as data and the NCCL cost model: the nccl-tests parser on real-format tables
(tests/data, rows of the public Echo logs), the link ceiling over a sweep, the hierarchy,
JSON round trips, the fit on known parameters, and ``ailens calibrate --from-nccl-tests``."""

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO

from ailens.predict.nccl import busbw_factor, nccl_collective_s
from ailens.predict.nccl_fit import fit_platform
from ailens.predict.nccl_tests import NcclTestsTable, parse_nccl_tests, platform_from_nccl_tests
from ailens.predict.platforms import (
    DEFAULT_PLATFORMS,
    load_platform,
    platform_from_dict,
    platform_to_dict,
    relayed_ring_links,
    ring_links,
)

DATA = Path(__file__).parent / "data"
LOG8 = DATA / "nccl_tests_ndv4_8gpu.log"
LOG2 = DATA / "nccl_tests_ndv4_2gpu.log"
LOG16 = DATA / "nccl_tests_ndv4_16gpu_2nodes.log"


def test_parse_single_process_table():
    t = parse_nccl_tests(LOG8.read_text(), source=str(LOG8))
    assert (t.op, t.ranks, t.nodes, t.ranks_per_node, t.devices_per_process) == (
        "allreduce",
        8,
        1,
        8,
        8,
    )
    assert t.sizes[0] == 8 and t.sizes[-1] == 1 << 30 and len(t.sizes) == 28
    # First row of Echo's nccl_8.log: 31.44 us out of place, 32.30 us in place.
    assert t.oop_s[0] == pytest.approx(31.44e-6) and t.ip_s[0] == pytest.approx(32.30e-6)
    assert t.seconds(0) == pytest.approx(31.44e-6)  # the placements agree: the faster one


def test_parse_multi_node_table_with_root_column_and_no_check():
    t = parse_nccl_tests(LOG16.read_text(), source=str(LOG16))
    assert (t.ranks, t.nodes, t.ranks_per_node, t.devices_per_process) == (16, 2, 8, 1)
    assert t.hosts.count("node-a") == 8 and t.hosts.count("node-b") == 8
    assert t.sizes[0] == 1024 and t.sizes[-1] == 16 << 30
    assert t.oop_s[-1] == pytest.approx(251757e-6) and t.ip_s[-1] == pytest.approx(250681e-6)


def test_parse_counts_ranks_without_device_lines():
    """Only the table (header lines cut): the rank count comes from busbw / algbw."""
    rows = [ln for ln in LOG8.read_text().splitlines() if not ln.startswith("#")]
    t = parse_nccl_tests("\n".join(rows), source="cut")
    assert t.ranks == 8


def test_parse_mpi_run_without_device_lines():
    """Under MPI the header says nGpus 1 (per process): without the device lines the ranks
    come from busbw / algbw, not from the header."""
    rows = [ln for ln in LOG16.read_text().splitlines() if "Rank" not in ln]
    t = parse_nccl_tests("\n".join(rows), source="mpi")
    assert t.ranks == 16 and t.devices_per_process == 1
    # Where the ranks ran is not said: the platform's nodes are filled in order (2 x 8).
    plat = platform_from_nccl_tests(["\n".join(rows)], base="azure-nd-a100-v4")
    assert "fitted on" in plat.network.source and "fitted on" not in plat.intra.source


def test_parse_rejects_text_without_a_table():
    with pytest.raises(ValueError, match="notes.txt: no nccl-tests table"):
        parse_nccl_tests("hello\nworld\n", source="notes.txt")


EXAMPLE = REPO / "docs" / "examples" / "platform_4gpu_nodes.json"


def _sweep_platforms():
    yield from DEFAULT_PLATFORMS.values()
    yield load_platform(EXAMPLE)
    yield platform_from_nccl_tests(
        [LOG2.read_text(), LOG8.read_text(), LOG16.read_text()],
        base="azure-nd-a100-v4",
        sources=["2", "8", "16"],
    )


@pytest.mark.parametrize("op", ["allreduce", "allgather", "reduce_scatter", "broadcast"])
def test_never_above_the_link_ceiling(op):
    """nccl-tests' bus bandwidth of every modelled time stays at or under the bottleneck
    link's, whatever the platform, ranks, placement and size."""
    checked = 0
    for plat in _sweep_platforms():
        dpn = plat.devices_per_node
        for ranks in (2, 3, 4, 5, 7, 8, 16, 64, 512):
            for rpn in {min(ranks, dpn), 1, max(min(ranks, dpn) // 2, 1)}:
                if -(-ranks // rpn) > 1 and plat.network is None:
                    continue
                for size in (8, 1000, 1 << 16, 3 << 20, 1 << 27, 1 << 32):
                    e = nccl_collective_s(op, size, ranks, plat, rpn)
                    wire = size * ranks if op == "allgather" else size
                    bus = wire / e.seconds * busbw_factor(op, ranks)
                    assert bus <= e.ceiling_Bps * (1 + 1e-9), (plat.name, op, ranks, rpn, size)
                    assert math.isclose(bus, e.bus_bandwidth_Bps, rel_tol=1e-9)
                    checked += 1
    assert checked > 1000


def test_two_nodes_slower_than_one_for_large_messages():
    for label in ("dgx-a100", "dgx1-v100", "dgx2-v100", "dgx-h100"):
        plat = DEFAULT_PLATFORMS[label]
        n = plat.devices_per_node
        one = nccl_collective_s("allreduce", 1 << 30, n, plat, ranks_per_node=n)
        two = nccl_collective_s("allreduce", 1 << 30, n, plat, ranks_per_node=n // 2)
        assert (one.nodes, two.nodes) == (1, 2)
        assert two.seconds > 1.5 * one.seconds, label
        assert "network" in two.bottleneck and "intra-node" in one.bottleneck


def test_small_message_latency_grows_with_log_of_nodes():
    """At 8 KiB across nodes NCCL's tree wins: from 2 to 64 nodes the latency grows by the
    log2 of the nodes (5 more network steps up and down), not with the 480 more ranks."""
    plat = DEFAULT_PLATFORMS["dgx-a100"]
    two = nccl_collective_s("allreduce", 8192, 16, plat)
    many = nccl_collective_s("allreduce", 8192, 512, plat)
    assert many.algorithm == "tree" and many.protocol == "LL"
    net_step = 5.0 / 2.7 * plat.network.latency_s  # NCCL's tree LL step over the ring LL one
    assert many.seconds - two.seconds == pytest.approx(2 * 5 * net_step, rel=0.05)
    # 1 GiB: bandwidth-bound, near the network's ceiling (NCCL's tree too at 64 nodes, where
    # a ring's 126 network steps cost more than the tree's half bandwidth).
    big = nccl_collective_s("allreduce", 1 << 30, 512, plat)
    assert big.protocol in ("LL128", "Simple") and "network" in big.bottleneck
    assert 0.5 * big.ceiling_Bps < big.bus_bandwidth_Bps <= big.ceiling_Bps


def test_ring_links_of_the_dgx1_hybrid_cube_mesh():
    nv = DEFAULT_PLATFORMS["dgx1-v100"].nvlinks
    got = {k: ring_links(nv, k) for k in range(2, 9)}
    assert got[2] == 1 and got[4] == 4 and got[8] == 6
    assert got[5] == 0  # GPU 4 reaches only GPU 0 among the first five: no NVLink ring


def test_a_device_set_with_no_direct_nvlink_ring_relays_through_a_third_device():
    """DGX-1, first five GPUs: GPU 4's only NVLinks go to GPU 0, so no ring closes over
    direct links; NCCL then routes the missing hops over NVLink through a third GPU (its NVB
    paths) before the host. Both of GPU 4's hops use its two links to GPU 0: two rings, priced
    per link as measured at 8 devices, not at the unmeasured host path."""
    dgx1 = DEFAULT_PLATFORMS["dgx1-v100"]
    assert relayed_ring_links(dgx1.nvlinks, 5) == 2
    assert relayed_ring_links(dgx1.nvlinks, 8) == ring_links(dgx1.nvlinks, 8) == 6
    p = replace(dgx1, intra_by_devices={8: 134.5e9})
    five = nccl_collective_s("allreduce", 1 << 28, 5, p)
    assert five.ceiling_Bps == pytest.approx(134.5e9 * 2 / 6)
    assert five.ceiling_Bps > 2 * dgx1.host.bandwidth_Bps
    assert any("relayed" in a for a in five.assumptions)
    assert not any("host path" in a for a in five.assumptions)
    # PCI-class step latency (NCCL's latency class for NVB rings): slower than 4 on NVLink.
    tiny5 = nccl_collective_s("allreduce", 8, 5, p, algorithm="ring", protocol="LL")
    tiny4 = nccl_collective_s("allreduce", 8, 4, p, algorithm="ring", protocol="LL")
    assert tiny5.seconds - tiny4.seconds > 2 * 1.8 * 0.47e-6
    # Saturation beyond the largest measured count scales by the relayed rings too (2 / 4).
    sat = nccl_collective_s("allreduce", 1 << 28, 5, replace(dgx1, busbw_by_devices={4: 40e9}))
    bus = min(40e9 * 2 / 4, sat.ceiling_Bps)
    assert sat.seconds == pytest.approx((1 << 28) * busbw_factor("allreduce", 5) / bus)
    # Pairs bridged apart (no link between the pairs): nothing to relay through, the host.
    pairs = ((0, 1, 0, 0), (1, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0))
    assert relayed_ring_links(pairs, 4) == 0


def test_the_documented_hand_written_platform():
    """docs/examples/platform_4gpu_nodes.json: NVLink bridges in pairs, so 2 GPUs ride the
    bridge and 4 cross the host path; 2 nodes are bound by the one NIC."""
    plat = load_platform(EXAMPLE)
    pair = nccl_collective_s("allreduce", 1 << 28, 2, plat)
    four = nccl_collective_s("allreduce", 1 << 28, 4, plat)
    nodes = nccl_collective_s("allreduce", 1 << 28, 8, plat)
    assert pair.ceiling_Bps == pytest.approx(100e9) and four.ceiling_Bps == pytest.approx(24e9)
    assert pair.seconds < four.seconds < nodes.seconds
    assert "network" in nodes.bottleneck and nodes.ceiling_Bps == pytest.approx(12.5e9)


def test_platform_json_round_trip(tmp_path):
    for plat in DEFAULT_PLATFORMS.values():
        doc = json.loads(json.dumps(platform_to_dict(plat)))
        back = platform_from_dict(doc, "x.json")
        assert platform_to_dict(back) == platform_to_dict(plat)
    f = tmp_path / "p.json"
    f.write_text(json.dumps(platform_to_dict(DEFAULT_PLATFORMS["dgx1-v100"])))
    assert load_platform(f).nvlinks == DEFAULT_PLATFORMS["dgx1-v100"].nvlinks
    assert load_platform("dgx-a100") is DEFAULT_PLATFORMS["dgx-a100"]


def test_fitted_labels_load_and_say_what_they_were_fitted_on():
    for label in ("ndv4-echo", "a100-vtrain", "dgx1-v100-vtrain"):
        plat = load_platform(label)
        assert plat.name == label and "fitted on" in plat.intra.source
    echo = load_platform("ndv4-echo")
    assert "fitted on" in echo.network.source and echo.nics_per_node == 8
    # The 2-node log it was fitted on: 16 GiB at 127.95 GB/s bus bandwidth, against a
    # datasheet ceiling of 200 GB/s per node.
    e = nccl_collective_s("allreduce", 16 << 30, 16, echo)
    assert e.bus_bandwidth_Bps / 1e9 == pytest.approx(127.95, rel=0.05)
    assert "vtrain" in load_platform("dgx1-v100-vtrain").description.lower()


def test_bad_platform_files_name_the_file_and_the_fix(tmp_path):
    f = tmp_path / "old.json"
    f.write_text(json.dumps({"version": 99}))
    with pytest.raises(ValueError, match=r"old.json: platform version 99"):
        load_platform(f)
    f.write_text(json.dumps({"version": 1, "devices_per_node": 8, "intra": {"latency_s": 1}}))
    with pytest.raises(ValueError, match=r"old.json: 'intra' needs bandwidth_Bps"):
        load_platform(f)
    doc = platform_to_dict(DEFAULT_PLATFORMS["dgx1-v100"])
    doc["devices_per_node"] = 4
    f.write_text(json.dumps(doc))
    with pytest.raises(
        ValueError, match=r"old.json: platform 'dgx1-v100': nvlinks must be a 4 x 4"
    ):
        load_platform(f)
    with pytest.raises(ValueError, match="no such file and not a known label"):
        load_platform(tmp_path / "missing.json")


def _synthetic(plat, ranks: int, per_process: int = 1) -> NcclTestsTable:
    sizes = tuple(8 << i for i in range(28))  # 8 B .. 1 GiB, as all_reduce_perf -f 2
    t = tuple(
        nccl_collective_s("allreduce", s, ranks, plat, devices_per_process=per_process).seconds
        for s in sizes
    )
    return NcclTestsTable(
        "allreduce", ranks, ("h",) * ranks, ranks, sizes, t, t, f"synthetic {ranks}", per_process
    )


def test_fit_recovers_a_known_platform_and_predicts_an_unseen_count():
    truth = replace(
        DEFAULT_PLATFORMS["dgx-a100"],
        intra=replace(DEFAULT_PLATFORMS["dgx-a100"].intra, bandwidth_Bps=180e9, latency_s=0.9e-6),
        base_latency_s=9e-6,
    )
    fitted = fit_platform(
        [_synthetic(truth, 2), _synthetic(truth, 8)], DEFAULT_PLATFORMS["dgx-a100"]
    )
    assert fitted.intra.bandwidth_Bps == pytest.approx(180e9, rel=0.03)
    for size in (8, 1 << 16, 1 << 22, 1 << 30):
        want = nccl_collective_s("allreduce", size, 4, truth).seconds
        got = nccl_collective_s("allreduce", size, 4, fitted).seconds
        assert got == pytest.approx(want, rel=0.05), size


def test_fit_rejects_one_rank_logs():
    t = NcclTestsTable("allreduce", 1, ("h",), 1, (8,), (1e-6,), (1e-6,), "one.log")
    with pytest.raises(ValueError, match="2 or more ranks"):
        fit_platform([t], DEFAULT_PLATFORMS["dgx-a100"])


def _calibrate(*args):
    return subprocess.run(
        [sys.executable, "-m", "ailens", "calibrate", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_calibrate_from_nccl_tests_end_to_end(tmp_path):
    out = tmp_path / "ndv4.json"
    r = _calibrate("--from-nccl-tests", LOG8, LOG16, "--platform", "azure-nd-a100-v4", "--out", out)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stdout
    plat = load_platform(out)
    assert plat.devices_per_node == 8 and plat.network is not None
    assert "fitted on" in plat.network.source and "fitted on" in plat.intra.source
    assert plat.launch_s > 0  # the 8-GPU log drove its GPUs from one thread
    # The fitted platform reproduces its own 2-node log's large messages within 10 %.
    t = parse_nccl_tests(LOG16.read_text())
    e = nccl_collective_s("allreduce", t.sizes[-1], 16, plat)
    assert e.seconds == pytest.approx(t.seconds(len(t.sizes) - 1), rel=0.10)


def test_calibrate_from_nccl_tests_errors(tmp_path):
    r = _calibrate("--from-nccl-tests", tmp_path / "none.log", "--out", tmp_path / "p.json")
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.log"
    bad.write_text("no table here\n")
    r = _calibrate("--from-nccl-tests", bad, "--out", tmp_path / "p.json")
    assert r.returncode == 2 and "bad.log: no nccl-tests table" in r.stderr
    assert not (tmp_path / "p.json").exists()


TAGGED16 = DATA / "nccl_tests_p4d_16gpu_2nodes_tagged.log"


def test_parse_mpirun_tag_output_log():
    """A real ``mpirun --tag-output`` log (AWS p4d, 2 nodes x 8 A100 over EFA): every line
    prefixed ``[1,RANK]<stdout>:``, other ranks' NCCL INFO lines among the header's."""
    text = TAGGED16.read_text()
    assert text.count("<stdout>:") > 100  # it is tagged
    t = parse_nccl_tests(text, source=str(TAGGED16))
    assert (t.ranks, t.nodes, t.ranks_per_node, t.devices_per_process) == (16, 2, 8, 1)
    assert t.hosts.count("nccl-tests-efa-16-worker-1") == 8
    assert t.sizes[0] == 8 and t.sizes[-1] == 4 << 30 and len(t.sizes) == 30
    # The last row: 183834 us out of place, 184216 us in place.
    assert t.oop_s[-1] == pytest.approx(183834e-6) and t.ip_s[-1] == pytest.approx(184216e-6)
    # Read as the untagged lines of rank 0 are read.
    plain = "\n".join(ln.split("<stdout>:", 1)[1] for ln in text.splitlines() if "[1,0]" in ln)
    assert parse_nccl_tests(plain, source="plain") == replace(t, source="plain")


def test_parse_tagged_output_of_one_rank_tests_per_process_keeps_one_table():
    """nccl-tests built without MPI under mpirun: each process prints its own table; the
    first one is read, not the rows of every process one after the other."""
    rows = LOG8.read_text().splitlines()
    text = "\n".join(f"[1,{r}]<stdout>:{ln}" for r in (0, 1) for ln in rows)
    t = parse_nccl_tests(text, source="two")
    assert t == parse_nccl_tests("\n".join(rows), source="two")


def test_beyond_the_largest_measured_count_large_messages_run_at_its_measured_busbw():
    """Fitted on Echo's 2-GPU log, 8 GPUs of the same node: from 64 MiB up the measured 2-GPU
    bus bandwidth at the largest message (saturation) is the estimate, closer to Echo's
    measured 8-GPU times than the model's own link figure; smaller messages keep the model."""
    two = parse_nccl_tests(LOG2.read_text(), source="2")
    eight = parse_nccl_tests(LOG8.read_text(), source="8")
    fitted = fit_platform([two], DEFAULT_PLATFORMS["azure-nd-a100-v4"])
    top = max(range(len(two.sizes)), key=lambda i: two.sizes[i])
    bus2 = two.sizes[top] / two.seconds(top) * busbw_factor("allreduce", 2)
    assert fitted.busbw_by_devices == {2: pytest.approx(bus2)}
    assert platform_from_dict(platform_to_dict(fitted)).busbw_by_devices == {2: pytest.approx(bus2)}
    unsaturated = replace(fitted, busbw_by_devices={})
    err_sat, err_model = [], []
    for i, s in enumerate(eight.sizes):
        est = nccl_collective_s("allreduce", s, 8, fitted, 8)
        old = nccl_collective_s("allreduce", s, 8, unsaturated, 8).seconds
        if s < (64 << 20):
            assert est.seconds == old and not any("saturated" in a for a in est.assumptions)
            continue
        bus = min(bus2, est.ceiling_Bps)  # never above the link's ceiling
        assert est.seconds == pytest.approx(s * busbw_factor("allreduce", 8) / bus)
        assert any("saturated bus bandwidth" in a for a in est.assumptions)
        err_sat.append(abs(est.seconds / eight.seconds(i) - 1))
        err_model.append(abs(old / eight.seconds(i) - 1))
    assert err_sat and sorted(err_sat)[len(err_sat) // 2] < sorted(err_model)[len(err_model) // 2]
    # Forced algorithms (NCCL_ALGO) and measured counts keep the model.
    s = 1 << 30
    assert nccl_collective_s("allreduce", s, 8, fitted, 8, algorithm="ring").seconds == (
        nccl_collective_s("allreduce", s, 8, unsaturated, 8, algorithm="ring").seconds
    )
    assert nccl_collective_s("allreduce", s, 2, fitted, 2).seconds == (
        nccl_collective_s("allreduce", s, 2, unsaturated, 2).seconds
    )


def test_saturation_on_an_uneven_mesh_scales_by_the_rings_each_device_set_closes():
    """DGX-1's hybrid cube mesh: rings over 8 devices use 6 links per device, over 4 use 4;
    a 4-device measurement prices 8 devices at 6/4 of its bus bandwidth."""
    dgx1 = DEFAULT_PLATFORMS["dgx1-v100"]
    k4, k8 = ring_links(dgx1.nvlinks, 4), ring_links(dgx1.nvlinks, 8)
    assert (k4, k8) == (4, 6)
    p = replace(dgx1, busbw_by_devices={4: 40e9})
    est = nccl_collective_s("allreduce", 1 << 28, 8, p, 8)
    bus = min(40e9 * k8 / k4, est.ceiling_Bps)
    assert est.seconds == pytest.approx((1 << 28) * busbw_factor("allreduce", 8) / bus)
    assert any("NVLink rings" in a for a in est.assumptions)


def test_ring_latency_across_nodes_pays_the_network_post_on_every_step():
    """NCCL's tuning model (getNetOverhead): a ring that spans nodes pays at least the host's
    network post overhead on every step, intra-node ones too (x3 with Simple), so its latency
    grows with all the ranks, not with the nodes alone. AMD hosts (DGX A100, ND A100 v4): 2 us."""
    plat = DEFAULT_PLATFORMS["azure-nd-a100-v4"]
    assert plat.net_overhead_s == pytest.approx(2e-6)
    assert DEFAULT_PLATFORMS["dgx1-v100"].net_overhead_s == pytest.approx(1e-6)

    def ring(ranks, proto):
        return nccl_collective_s("allreduce", 8, ranks, plat, 8, algorithm="ring", protocol=proto)

    # 16 -> 32 ranks on 8 per node: 32 more ring steps, 4 of them across nodes.
    for proto, floor in (("LL", 2e-6), ("Simple", 6e-6)):
        grown = ring(32, proto).seconds - ring(16, proto).seconds
        assert grown >= 28 * floor, proto
    # One node: the steps stay at the NVLink latency.
    one = nccl_collective_s("allreduce", 8, 8, plat, 8, algorithm="ring", protocol="LL")
    assert one.seconds < plat.base_latency_s + 14 * 1e-6
    # The figure travels with the platform file.
    doc = platform_to_dict(replace(plat, net_overhead_s=3e-6))
    assert platform_from_dict(doc, "x.json").net_overhead_s == pytest.approx(3e-6)


def test_network_latency_beyond_the_measured_nodes_gets_a_range_not_a_point():
    """A network fitted on a 2-node log: NCCL's tree adds a network level per doubling of the
    nodes; the interval lets the latency grow with every node up to 16 nodes ((16-1)/log2(16)
    = 3.75 x per level), and no wider at the measured count."""
    from ailens.predict.cluster import predict
    from ailens.predict.job import JobDescription
    from ailens.predict.nccl import latency_growth_beyond_measured

    a100 = DEFAULT_PLATFORMS["dgx-a100"]
    fitted = replace(
        a100,
        network=replace(a100.network, source="fitted on a 2-node log"),
        intra=replace(a100.intra, source="fitted on a 1-node log"),
        network_nodes=2,
    )
    assert latency_growth_beyond_measured(fitted, 2) == 1.0
    assert latency_growth_beyond_measured(fitted, 16) == pytest.approx(15 / 4)
    assert latency_growth_beyond_measured(replace(fitted, network_nodes=4), 4) == 1.0
    est = nccl_collective_s("allreduce", 8192, 128, fitted)
    assert any("beyond the 2" in a and "x3.75" in a for a in est.assumptions)
    # Many small buckets: latency-bound, so the range shows in the step's interval.
    job = JobDescription(
        name="j", grad_bytes=64 * 8192, buckets=(8192,) * 64, step_s=0.01,
        batch_per_device=32.0, platform="dgx-a100", overlap=False,
    )  # fmt: skip
    two, many = predict(job, [16, 128], fitted)
    two_m, many_m = predict(job, [16, 128], replace(fitted, network_nodes=16))
    assert many.step_time_s == many_m.step_time_s and many.step_low_s == many_m.step_low_s
    assert many.step_high_s > many_m.step_high_s + 0.5 * many.comm_step_s
    assert (two.step_low_s, two.step_high_s) == (two_m.step_low_s, two_m.step_high_s)
    doc = platform_to_dict(fitted)
    assert platform_from_dict(doc, "x.json").network_nodes == 2


def test_bus_bandwidth_follows_its_log_trend_beyond_the_measured_counts():
    # Bus bandwidth measured at 4 and 8 devices: 2 devices lie one span below, on the log-log
    # line through them, not at the nearest count's value (every public A100 table grows
    # with the devices). The fitted protocol corrections follow no common trend: nearest.
    a100 = DEFAULT_PLATFORMS["dgx-a100"]
    p = replace(
        a100,
        intra_by_devices={4: 220e9, 8: 235e9},
        protocols_by_devices={4: {"LL": {"bandwidth": 0.8}}, 8: {"LL": {"bandwidth": 1.0}}},
    )
    assert p.intra_bandwidth(2)[0] == pytest.approx(220e9**2 / 235e9)
    assert "extrapolated" in p.intra_bandwidth(2)[1]
    assert p.protocol_tuning(2, "LL")["bandwidth"] == pytest.approx(0.8)
    # Continued by at most the measured span (4 -> 8: one doubling): 16 is 8's line, 32 too.
    assert p.intra_bandwidth(16)[0] == pytest.approx(235e9**2 / 220e9)
    assert p.intra_bandwidth(32)[0] == pytest.approx(p.intra_bandwidth(16)[0])
    # One measured count: nothing to follow.
    one = replace(a100, intra_by_devices={8: 235e9})
    assert one.intra_bandwidth(2)[0] == pytest.approx(235e9)
    # The 2-GPU time of a 32 MiB all-reduce follows: slower than at the 4-GPU bandwidth.
    nearest = replace(p, intra_by_devices={4: 220e9})
    t = nccl_collective_s("allreduce", 32 << 20, 2, p).seconds
    assert t > nccl_collective_s("allreduce", 32 << 20, 2, nearest).seconds
