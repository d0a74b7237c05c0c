"""The Doctor tab in headless Chromium: its table reads cleanly (a verdict on one line, a
variable's name never cut in the middle of a word), and what the telemetry sources say is in
the page's language.

One app server for the module, started with `--sysfs-root` on a temporary folder that stands
in for /sys: each test writes the machine it needs there (no GPU; AMD cards whose VRAM files
are missing; AMD cards that can be read) and presses "Check this machine", which looks again.
amd-smi, rocm-smi and nvidia-smi are kept off the server's PATH, so what the sources say does
not depend on the machine the test runs on. Every word is looked up with `translate()`.
"""

from __future__ import annotations

import os
import shutil
import string
from pathlib import Path

import pytest

from backend.i18n import translate
from backend.telemetry.fake_sysfs import build_fake_sysfs
from tests.harness import AppServer

pytestmark = pytest.mark.browser

UI_TIMEOUT_MS = 60_000
DOCTOR_TIMEOUT_MS = 240_000  # the check imports torch in a helper process: tens of seconds on two busy cores
TOOLS = ("amd-smi", "rocm-smi", "nvidia-smi")


@pytest.fixture(scope="module")
def sysfs_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fake-sys")


@pytest.fixture(scope="module")
def app_server(demo_assets, tmp_path_factory, sysfs_root):
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not any((Path(d) / tool).exists() for tool in TOOLS))
    server = AppServer("--sysfs-root", str(sysfs_root), env={"PATH": path}, workdir=tmp_path_factory.mktemp("doctor-app")).start()
    try:
        yield server
    finally:
        server.stop()


def machine(root: Path, kind: str) -> None:
    """Writes the machine `kind` under `root`: "none" (no GPU), "amd" (three AMD GPUs whose
    memory can be read), "amd-no-vram" (the same without their VRAM files)."""
    for child in root.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    if kind == "none":
        return
    build_fake_sysfs(root)
    if kind == "amd-no-vram":
        for memory_file in root.rglob("mem_info_vram_*"):
            memory_file.unlink()


def open_doctor(page_of, browser_locale: str):
    locale = "zh-CN" if browser_locale == "zh-CN" else "en"
    page = page_of(browser_locale, editable=False)
    page.wait_for_function("(text) => document.querySelector('#start')?.innerText.trim() === text", arg=translate("button.start", locale), timeout=UI_TIMEOUT_MS)
    page.get_by_role("tab", name=translate("tab.doctor", locale)).click()
    page.locator("#doctor-run").click()
    # The button's own run: the hint goes, the table comes (with this machine's rows).
    page.wait_for_function(
        "(name) => [...document.querySelectorAll('#doctor-report tbody tr')].some(r => r.cells[1]?.innerText.trim() === name)",
        arg=translate("doctor.name.telemetry", locale),
        timeout=DOCTOR_TIMEOUT_MS,
    )
    page.wait_for_function("() => document.querySelectorAll('#doctor-report .pending, #doctor-report .wrap.default.full:not(.hide)').length === 0", timeout=UI_TIMEOUT_MS)
    return page, locale


def telemetry_row(page, locale: str) -> dict:
    return page.evaluate(
        """(name) => { const row = [...document.querySelectorAll('#doctor-report tbody tr')].find(r => r.cells[1]?.innerText.trim() === name);
            return {saw: row.cells[2].innerText.split(/\\s+/).join(' '), fix: row.cells[3].innerText.split(/\\s+/).join(' ')}; }""",
        translate("doctor.name.telemetry", locale),
    )


def literal_parts(key: str, locale: str) -> list[str]:
    """The words of a message without its placeholders: what must show however it is filled."""
    parts = [literal.replace("`", "").strip() for literal, _, _, _ in string.Formatter().parse(translate(key, locale))]
    return [part for part in parts if len(part) >= 2]


# Per cell: its text and, for each character, the line it is on (a new line where a
# character starts lower than the one before it by more than a third of a line).
CELL_LINES_JS = """() => [...document.querySelectorAll('#doctor-report tbody tr')].map(row => [...row.cells].slice(0, 2).map(cell => {
    let text = '', lines = [], line = 0, lastTop = null;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    const range = document.createRange();
    const height = parseFloat(getComputedStyle(cell).lineHeight) || 20;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (let i = 0; i < node.data.length; i++) {
            range.setStart(node, i); range.setEnd(node, i + 1);
            const rect = [...range.getClientRects()].find(r => r.width > 0);
            if (!rect) { text += node.data[i]; lines.push(line); continue; }
            if (lastTop !== null && rect.top > lastTop + height / 3) line += 1;
            lastTop = rect.top;
            text += node.data[i]; lines.push(line);
        }
    }
    return {text, lines};
}))"""


def cut_inside(text: str, lines: list[int], token: str) -> list[str]:
    """Where `token` (in `text`) goes on to a new line other than after an underscore."""
    cuts = []
    start = text.find(token)
    while start >= 0:
        for i in range(start + 1, start + len(token)):
            if lines[i] != lines[i - 1] and text[i - 1] != "_":
                cuts.append(f"{text[start:i]} | {text[i:start + len(token)]}")
        start = text.find(token, start + 1)
    return cuts


@pytest.mark.parametrize("browser_locale", ["en-US", "zh-CN"])
def test_a_verdict_stays_on_one_line_and_a_variable_breaks_only_at_its_underscores(app_server, page_of, sysfs_root, browser_locale) -> None:
    machine(sysfs_root, "none")
    page, locale = open_doctor(page_of, browser_locale)
    cells = page.evaluate(CELL_LINES_JS)
    assert cells, "the Doctor shows no rows"
    wrapped = [status["text"].strip() for status, _ in cells if len(set(status["lines"])) > 1]
    assert not wrapped, f"verdicts wrapped onto two lines: {wrapped}"
    assert any(translate("verdict.ok", locale) in status["text"] for status, _ in cells)
    token = "HSA_OVERRIDE_GFX_VERSION"
    names = [name for _, name in cells if token in name["text"]]
    assert names, f"no check is named with {token}"
    for name in names:
        assert not cut_inside(name["text"], name["lines"], token), f"{token} is cut inside a word: {cut_inside(name['text'], name['lines'], token)}"


@pytest.mark.parametrize("browser_locale", ["en-US", "zh-CN"])
def test_no_gpu_names_the_process_memory_source_in_the_pages_language(app_server, page_of, sysfs_root, browser_locale) -> None:
    machine(sysfs_root, "none")
    page, locale = open_doctor(page_of, browser_locale)
    saw = telemetry_row(page, locale)["saw"]
    expected = translate("doctor.telemetry.process", locale, source=translate("doctor.telemetry.source.process", locale))
    assert saw == " ".join(expected.split()), saw
    if locale == "zh-CN":
        assert "process" not in saw, saw


def test_the_telemetry_sources_hints_are_in_chinese_on_the_chinese_page(app_server, page_of, sysfs_root) -> None:
    machine(sysfs_root, "amd-no-vram")
    page, locale = open_doctor(page_of, "zh-CN")
    row = telemetry_row(page, locale)
    # What RocBoard says of each source and what to do, in Chinese; never the English words.
    for english in ("not found on PATH", "Install amd-smi", "has no mem_info_vram_total", "Use a newer kernel", "Only for NVIDIA GPUs"):
        assert english not in row["saw"] + row["fix"], f"English on the Chinese page: {english!r} in {row}"
    for key in ("telemetry.sysfs.no_vram_file", "telemetry.tool_not_found"):
        for part in literal_parts(key, locale):
            assert part in row["saw"], f"{part!r} ({key}) not in {row['saw']!r}"
    for key in ("telemetry.hint.newer_kernel", "telemetry.hint.install_amd_smi"):
        for part in literal_parts(key, locale):
            assert part in row["fix"], f"{part!r} ({key}) not in {row['fix']!r}"


def test_a_working_source_is_described_in_chinese_on_the_chinese_page(app_server, page_of, sysfs_root) -> None:
    machine(sysfs_root, "amd")
    page, locale = open_doctor(page_of, "zh-CN")
    saw = telemetry_row(page, locale)["saw"]
    assert "AMD card(s)" not in saw and "the run sees" not in saw, saw
    for part in literal_parts("telemetry.sysfs.works", locale):
        assert part in saw, f"{part!r} not in {saw!r}"
