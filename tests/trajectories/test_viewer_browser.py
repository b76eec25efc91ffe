"""The trajectory viewer in real headless Chromium (Debian ``chromium`` + ``chromium-driver``,
driven by Selenium; ``.ci/run`` installs them): the page loads, filters work, a trajectory opens
with its chat, reward components and tokens coloured by loss mask and by advantage."""

from __future__ import annotations

import shutil

import pytest

from agentic_rl.trajectories import open_run_store
from agentic_rl.trajectories.viewer import write_view

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip(
            "Debian chromium/chromium-driver not installed: apt-get install chromium chromium-driver "
            "(`make test` installs them when run as root)"
        )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def test_page_loads_filters_and_opens_a_trajectory(browser, recorded_run, chat, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    records = list(open_run_store(recorded_run).read())
    page = write_view(
        tmp_path / "view.html", records, lambda i: chat.decode([i]), title="recorded <run>"
    )
    browser.get(page.as_uri())
    assert browser.title == "recorded <run>"
    assert browser.execute_script("return document.readyState") == "complete"
    rows = lambda: browser.find_elements(By.CSS_SELECTOR, "#rows tr")  # noqa: E731
    assert len(rows()) == 6 and browser.find_element(By.ID, "count").text == "6 of 6 trajectories"

    Select(browser.find_element(By.ID, "f-phase")).select_by_value("eval")
    assert len(rows()) == 2 and all(
        r.find_elements(By.TAG_NAME, "td")[1].text == "eval" for r in rows()
    )
    Select(browser.find_element(By.ID, "f-phase")).select_by_value("")
    browser.find_element(By.ID, "f-rmin").send_keys(
        "0.5"
    )  # the two scripted wrong answers drop out
    assert len(rows()) == 4
    browser.find_element(By.ID, "f-rmin").clear()
    browser.execute_script("document.getElementById('f-rmin').dispatchEvent(new Event('input'))")
    assert len(rows()) == 6

    wanted = records[0]
    target = next(r for r in rows() if r.get_attribute("data-id") == wanted["trajectory_id"])
    target.click()
    assert browser.find_element(By.ID, "detail").is_displayed()
    assert browser.find_element(By.ID, "d-title").text == wanted["trajectory_id"]
    chat_text = browser.find_element(By.ID, "d-chat").text
    assert (
        "calculator" in chat_text and wanted["turns"][1]["action"]["text"] in chat_text
    )  # call + final answer
    assert "correct_answer" in browser.find_element(By.ID, "d-rewards").text
    spans = browser.find_elements(By.CSS_SELECTOR, "#tokens span")
    assert len(spans) == len(wanted["token_ids"])
    masks = [int(s.get_attribute("data-mask")) for s in spans]
    assert masks == wanted["loss_mask"]
    assert {s.get_attribute("class") for s in spans} == {"m0", "m1"}
    assert "".join(s.text for s in spans[:3]) != ""  # decoded token text, not ids

    browser.find_element(By.CSS_SELECTOR, "input[name=colour][value=adv]").click()
    spans = browser.find_elements(By.CSS_SELECTOR, "#tokens span")
    coloured = [s for s in spans if s.get_attribute("class") == "adv"]
    assert len(coloured) == sum(wanted["loss_mask"])  # sampled tokens carry the advantage colour
    assert "rgba(0, 150, 0" in coloured[0].get_attribute("style")  # advantage +0.5: green


def test_context_segments_are_marked_in_the_token_stream(browser, recorded_run, chat, tmp_path):
    from selenium.webdriver.common.by import By

    record = dict(next(iter(open_run_store(recorded_run).read())))
    cut = record["loss_mask"].index(
        1
    )  # pretend the context was rebuilt before the first sampled token
    record["segment_starts"] = [0, cut]
    page = write_view(tmp_path / "view.html", [record], lambda i: chat.decode([i]))
    browser.get(page.as_uri())
    browser.find_element(By.CSS_SELECTOR, "#rows tr").click()
    markers = browser.find_elements(By.CSS_SELECTOR, "#tokens .seg")
    assert len(markers) == 1 and "segment 2 of 2" in markers[0].text
    # the marker sits right before token `cut`; tokens are all still there
    before = browser.execute_script(
        "return arguments[0].previousElementSibling ? "
        "[...arguments[0].parentNode.children].indexOf(arguments[0]) : -1",
        markers[0],
    )
    assert before == cut
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tokens span")) == len(record["token_ids"])
