"""A Slurm run from the page, in headless Chromium, against the real app and a real two-node
Slurm (tests/slurm_cluster.py): pick "Slurm cluster", two nodes, Start; the run waits, runs
on both nodes with its loss and each node's memory drawn live, finishes, and its adapter
downloads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.i18n import translate
from tests.harness import AppServer, wait_until
from tests.test_browser_app import (
    RUN_TIMEOUT_S,
    UI_TIMEOUT_MS,
    assert_no_error,
    download_adapter,
    fill,
    run_ids,
    shoot,
    wait_for_loss_points,
    wait_for_new_run,
    wait_for_text,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MEMORY_TRACES_JS = """() => {
    const plot = document.querySelector('#memory-chart .js-plotly-plot');
    return plot && plot.data ? plot.data.map(trace => trace.name || '') : [];
}"""


@pytest.fixture(scope="module")
def app_server(demo_assets, slurm_cluster, tmp_path_factory):
    """The app, with SLURM_CONF pointing at the test cluster."""
    with AppServer(workdir=tmp_path_factory.mktemp("app"), env={"SLURM_CONF": str(slurm_cluster.conf)}) as server:
        yield server


def choose_slurm(page, nodes: int) -> None:
    page.get_by_text(translate("accordion.placement", "en")).click()
    page.locator("#run-on").get_by_text(translate("run_on.slurm", "en")).click()
    page.wait_for_selector("#slurm-nodes", state="visible", timeout=UI_TIMEOUT_MS)
    fill(page, "slurm-nodes", str(nodes))


def test_a_demo_run_submitted_from_the_page_trains_on_two_nodes_to_a_downloadable_adapter(app_server, page_of, tmp_path: Path) -> None:
    page = page_of()
    assert not page.locator("#slurm-partition").is_visible()  # the Slurm fields only for Slurm
    choose_slurm(page, 2)
    fill(page, "max-steps", "600")  # long enough to be seen training on both nodes
    fill(page, "run-name", "from-the-page")
    page.get_by_text(translate("accordion.preview", "en")).click()
    page.locator("#preview").click()
    wait_for_text(page, "#preview-command", "#SBATCH --nodes=2")  # what sbatch will be given
    before = run_ids(app_server)
    page.locator("#start").click()
    run_id = wait_for_new_run(app_server, before)["id"]
    # The run's folder exists before sbatch has answered: its job id follows (or its refusal).
    state = wait_until(lambda: next((s for s in app_server.runs() if s["id"] == run_id and (s["job_id"] or s["state"] == "failed")), None), 60, what="the job id")
    assert state["executor"] == "slurm" and state["job_id"].isdigit(), state
    wait_for_text(page, "#status", "Slurm job", timeout_ms=UI_TIMEOUT_MS)
    status = wait_for_text(page, "#status", "Status: running", timeout_ms=RUN_TIMEOUT_S * 1000)
    assert f"Slurm job {state['job_id']} on n[1-2]" in status
    # Live, while it trains: the loss, and each node's memory on one chart.
    wait_for_loss_points(page, 5, RUN_TIMEOUT_S * 1000)
    page.wait_for_function(f"() => {{ const n = ({MEMORY_TRACES_JS})(); return n.some(t => t.startsWith('n1 ·')) && n.some(t => t.startsWith('n2 ·')); }}", timeout=RUN_TIMEOUT_S * 1000, polling=500)
    shoot(page, "slurm-running")
    status = wait_for_text(page, "#status", "Status: finished", "Status: failed", "Status: stopped", timeout_ms=RUN_TIMEOUT_S * 1000)
    assert "Status: finished" in status and "COMPLETED" in status, status
    assert_no_error(page, "a Slurm run from start to end")
    names = download_adapter(page, tmp_path / "adapter.zip")
    assert {"adapter_model.safetensors", "adapter_config.json"} <= {Path(name).name for name in names}
    # The runs table says where it ran.
    page.get_by_role("tab", name=translate("tab.runs", "en")).click()
    # The visit redraws the table; on a loaded machine that redraw was seen to be lost now and
    # then (noted as an open bug): Refresh, as a person would press it, must show the run.
    page.locator("#runs-refresh").click()
    wait_for_text(page, "#runs-table", f"Slurm job {state['job_id']}")
