"""Each tool's pure parser on captured (rocm-smi 5.2.3) or layout-exact output."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.telemetry.amd_smi import memory_bytes, parse_amd_smi_list, parse_amd_smi_metric, value_and_unit
from backend.telemetry.command import extract_json
from backend.telemetry.nvidia_smi import parse_nvidia_smi
from backend.telemetry.rocm_smi import diagnose_rocm_smi, parse_rocm_smi, parse_rocm_smi_identities

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
MIB = 1024**2


def fixture(name: str) -> str:
    return (FIXTURES / name).read_bytes().decode("utf-8", errors="replace")


def fields(readings):
    return [(r.gpu, r.used_bytes, r.total_bytes, r.util_pct, r.temp_c, r.power_w) for r in readings]


# ---- rocm-smi -------------------------------------------------------------------------

CAPTURED_CARDS = [
    (0, 794341376, 25753026560, 37.0, 49.0, 19.0),
    (1, 4294967296, 17163091968, 82.0, 71.0, 187.0),
]


def test_rocm_smi_captured_json_reads_both_cards_with_edge_temperature():
    readings = parse_rocm_smi(fixture("rocm-smi-5.2.3-json.stdout"), at=5.0)
    assert fields(readings) == CAPTURED_CARDS
    assert {r.source for r in readings} == {"rocm-smi"}
    assert {r.at for r in readings} == {5.0}


def test_rocm_smi_captured_text_output_gives_the_same_readings_as_json():
    text = fixture("rocm-smi-5.2.3-text.stdout")
    assert "\t\t: " in text  # the real tabs survived
    assert fields(parse_rocm_smi(text)) == CAPTURED_CARDS


def test_rocm_smi_memory_only_output_leaves_the_rest_unknown():
    assert fields(parse_rocm_smi(fixture("rocm-smi-5.2.3-vram.stdout"))) == [
        (0, 794341376, 25753026560, None, None, None),
        (1, 4294967296, 17163091968, None, None, None),
    ]


def test_rocm_smi_gfx_activity_counter_is_not_taken_for_utilisation():
    # "GFX Activity": "123456789" is an accumulating counter; "GPU use (%)" is the percentage.
    assert [r.util_pct for r in parse_rocm_smi(fixture("rocm-smi-5.2.3-json.stdout"))] == [37.0, 82.0]


def test_rocm_smi_concise_table_is_not_mistaken_for_readings():
    assert parse_rocm_smi(fixture("rocm-smi-5.2.3-concise.stdout")) == []


def test_rocm_smi_6_socket_power_key_missing_metric_and_pci_bus():
    text = fixture("rocm-smi-6.2-json.stdout")
    assert fields(parse_rocm_smi(text)) == [
        (0, 21474836480, 25753026560, 99.0, 45.0, 212.0),
        (1, 15917056, 17163091968, 0.0, 38.0, None),  # its power metric failed: left out
    ]
    identities = parse_rocm_smi_identities(text)
    assert identities[0].pci_address == "0000:03:00.0"
    assert identities[1].pci_address == "0000:0c:00.0"  # upper-case hex normalised


def test_rocm_smi_no_json_data_and_no_driver_give_no_readings():
    assert parse_rocm_smi("") == []
    assert diagnose_rocm_smi("", fixture("rocm-smi-no-json-data.stderr")) is None


def test_rocm_smi_no_driver_answer_is_unavailable_with_a_hint():
    status = diagnose_rocm_smi("", fixture("rocm-smi-5.2.3-no-driver.stderr"))
    assert status is not None and not status.available
    assert status.detail == "Driver not initialized (amdgpu not found in modules)"
    assert "amdgpu" in status.hint


def test_rocm_smi_warning_on_stdout_before_json_is_skipped():
    text = "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\n\n"
    text += fixture("rocm-smi-5.2.3-json.stdout")
    assert fields(parse_rocm_smi(text)) == CAPTURED_CARDS


def test_rocm_smi_na_values_become_none_not_errors():
    text = '{"card0": {"VRAM Total Memory (B)": "N/A", "VRAM Total Used Memory (B)": "12", "GPU use (%)": "N/A"}}'
    assert fields(parse_rocm_smi(text)) == [(0, 12, None, None, None, None)]


# ---- amd-smi --------------------------------------------------------------------------

AMD_GPU0 = (0, 757 * MIB, 24560 * MIB, 37.0, 49.0, 19.0)
AMD_GPU1 = (1, 4096 * MIB, 16368 * MIB, None, 79.0, None)  # edge N/A: hotspot stands in


@pytest.mark.parametrize(
    "name, expected",
    [
        ("amd-smi-6.0-metric.json", [AMD_GPU0]),
        ("amd-smi-6.1-metric.json", [AMD_GPU0, AMD_GPU1]),
        ("amd-smi-26-metric.stdout", [AMD_GPU0, AMD_GPU1]),
        ("amd-smi-duplicate-metric.stdout", [AMD_GPU0, AMD_GPU1]),
    ],
)
def test_amd_smi_metric_layouts_of_every_version(name, expected):
    assert fields(parse_amd_smi_metric(fixture(name))) == expected


def test_amd_smi_printing_nothing_or_a_listing_gives_no_readings():
    assert parse_amd_smi_metric("") == []
    assert parse_amd_smi_metric(fixture("amd-smi-6.1-list.json")) == []


@pytest.mark.parametrize("name", ["amd-smi-6.1-list.json", "amd-smi-26-list.json"])
def test_amd_smi_list_gives_pci_addresses(name):
    identities = parse_amd_smi_list(fixture(name))
    assert {k: v.pci_address for k, v in identities.items()} == {0: "0000:03:00.0", 1: "0000:0c:00.0"}


@pytest.mark.parametrize(
    "field, expected",
    [(42, (42.0, None)), ({"value": 42, "unit": "%"}, (42.0, "%")), ("N/A", (None, None)),
     ({"value": "N/A", "unit": "MB"}, (None, "MB")), ("16 GB", (16.0, "GB")), (True, (None, None)), (None, (None, None))],
)
def test_amd_smi_value_shapes(field, expected):
    assert value_and_unit(field) == expected


def test_amd_smi_memory_units():
    assert memory_bytes(100) == 100 * MIB  # ROCm 6.0: plain MB
    assert memory_bytes({"value": 2, "unit": "GB"}) == 2 * 1024**3
    assert memory_bytes({"value": 512, "unit": "B"}) == 512
    assert memory_bytes("N/A") is None


# ---- nvidia-smi -----------------------------------------------------------------------


def test_nvidia_smi_csv_in_mib_with_unsupported_fields():
    assert fields(parse_nvidia_smi(fixture("nvidia-smi-query.csv"))) == [
        (0, 1024 * MIB, 24564 * MIB, 37.0, 49.0, 19.41),
        (1, 81559 * MIB, 81920 * MIB, 100.0, 71.0, None),
        (2, None, None, None, None, None),
    ]


def test_nvidia_smi_failure_message_gives_no_readings():
    assert parse_nvidia_smi(fixture("nvidia-smi-no-driver.stdout")) == []


# ---- garbage --------------------------------------------------------------------------


@pytest.mark.parametrize("parser", [parse_rocm_smi, parse_amd_smi_metric, parse_nvidia_smi])
def test_garbage_gives_no_readings_and_no_exception(parser):
    assert parser(fixture("garbage.stdout")) == []
    assert parser("\x00\x01 ]]][[{{") == []


def test_extract_json_skips_leading_text_and_broken_starts():
    assert extract_json('warn [x\n{"a": [1]}') == {"a": [1]}
    assert extract_json("nothing here") is None
