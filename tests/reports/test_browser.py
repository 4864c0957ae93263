"""The HTML report in a real browser: headless Chromium loads it, every image decodes, and the
screenshot is not blank. Skipped where Chromium is absent (.ci/run installs it)."""

import re
import shutil
import subprocess

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)"
)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
# counts the images that failed to decode, once the page has loaded
PROBE = (
    "<script>window.addEventListener('load', () => {const imgs = [...document.images];"
    "document.body.dataset.images = imgs.length;"
    "document.body.dataset.broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0))"
    ".length;});</script>"
)


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=120, check=True
    )


def _probe(page: str, path) -> tuple[int, int]:
    """(images, broken images) once Chromium has loaded ``page``."""
    path.write_text(page.replace("</body>", PROBE + "</body>"))
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", path.as_uri()).stdout
    images = re.search(r'data-images="(\d+)"', dom)
    broken = re.search(r'data-broken="(\d+)"', dom)
    assert images and broken, "the page did not finish loading"
    return int(images.group(1)), int(broken.group(1))


def test_every_image_in_the_report_decodes_in_chromium(dp_report, tmp_path):
    # communication, heatmap, ROC, score histograms, privacy-utility: all decode
    assert _probe(dp_report.read_text(), tmp_path / "probed.html") == (5, 0)
    # the probe does see a broken image
    spoiled = dp_report.read_text().replace("<h1>", '<img src="data:image/png;base64,AAAA"><h1>', 1)
    assert _probe(spoiled, tmp_path / "spoiled.html") == (6, 1)


def test_chromium_screenshot_of_the_report_is_not_blank(dp_report, tmp_path, drawn):
    shot = tmp_path / "report.png"
    _chromium(f"--screenshot={shot}", "--window-size=1200,2400", dp_report.as_uri())
    # text, tables and figures drawn: more than 3 % of the pixels off white
    assert drawn(shot, (1200, 2400)) > 0.03


def test_markup_in_report_text_stays_text_in_chromium(every_block_report, tmp_path):
    from fgl_workbench.reports.html import render_html

    # the one figure decodes; the <img onerror> written in every text is not an image
    assert _probe(render_html(every_block_report), tmp_path / "hostile.html") == (1, 0)


def test_the_quickstart_report_opens_with_its_verdict_in_chromium(quickstart, tmp_path, drawn):
    """`make demo`'s report as a reader first sees it: the verdict before anything else, the
    undefended configuration flagged (an attack leaks), the DP one blue: its rows read
    inconclusive, which is no evidence of safety, so not green; the top of the page,
    screenshotted, carries both boxes' colours (border of a warning, of an info)."""
    from PIL import Image

    page = quickstart / "report.html"
    dom = _chromium("--dump-dom", page.as_uri()).stdout
    assert dom.index(">Verdict<") < dom.index(">Setup<")
    boxes = re.findall(r'<div class="callout (\w+)" role="note">([^<]*)</div>', dom)
    kinds = {text.split(" (seed")[0].rsplit("/", 1)[-1]: kind for kind, text in boxes}
    assert kinds == {"fedavg": "warn", "fedavg+dp-sgd": "info"}
    shot = tmp_path / "top.png"
    _chromium(f"--screenshot={shot}", "--window-size=1200,1400", page.as_uri())
    drawn(shot, (1200, 1400))
    colours = {rgb for _, rgb in Image.open(shot).convert("RGB").getcolors(1 << 24)}
    assert (0xE6, 0x51, 0x00) in colours and (0x15, 0x65, 0xC0) in colours
