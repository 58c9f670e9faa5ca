"""The UI's pages (issue 48, first slice) in a real headless Chromium (Selenium with the system's chromedriver,
through envs/web/browser.py's Browser: its flags, and its end leaves no process behind) against `lake ui` on a real
lake (tests/ui_helpers.py): hostile values render as text and never run, the conversation page shows tool calls
with their arguments, thinking folded, step rewards and the final reward, the list's filters and pagination work,
and the as_of pin is carried in links. Screenshots go to $LACHESIS_UI_SHOTS when it is set."""
from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import httpx
import pytest

from envs.web import browser as browsers
from tests.ingest_helpers import ServerProcess
from tests.ui_helpers import BASE, CALL_ID, HOSTILE_ID, HOSTILE_TASK, XSS, build_lake
from tests.web_helpers import needs_browser

pytestmark = needs_browser
TITLE_OF = {"xss": "Trajectory xss · Lachesis"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-pages")
    rows = build_lake(tmp / "lake")
    with ServerProcess(tmp / "lake", command="ui", log_path=tmp / "ui.log") as srv:
        b = browsers.Browser(command_timeout_s=20).start()
        try:
            yield srv.url, b, rows
        finally:
            b.close()


def shot(driver, name: str) -> None:
    folder = os.environ.get("LACHESIS_UI_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def no_alert(driver) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def texts(driver, css: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


@pytest.mark.attack
def test_a_script_in_a_message_is_shown_as_text_and_never_runs(site):
    from selenium.webdriver.common.by import By

    url, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/trajectories/xss")
    shot(driver, "conversation-xss")
    assert driver.title == TITLE_OF["xss"]  # neither the <script> nor the onerror handler set it
    assert no_alert(driver)
    assert texts(driver, "pre.content") == [XSS, XSS, XSS]  # the text, visible as written
    assert driver.find_elements(By.CSS_SELECTOR, "main script, main img") == []  # no element made of it
    # the server's answer says no script may run, whatever a page holds
    csp = httpx.get(f"{url}/ui/trajectories/xss").headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp


@pytest.mark.attack
def test_quotes_and_markup_in_ids_and_tasks_stay_text_in_the_list_and_the_links(site):
    url, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/trajectories?as_of={BASE}&env=web_form_env")
    assert driver.title == "Trajectories · Lachesis" and no_alert(driver)
    from selenium.webdriver.common.by import By

    links = {a.text: a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a.trajectory")}
    assert set(links) == {"xss", HOSTILE_ID}
    assert urlparse(links[HOSTILE_ID]).path == "/ui/trajectories/" + quote(HOSTILE_ID, safe="")
    driver.get(links[HOSTILE_ID])  # the link leads to that trajectory, the id one path segment
    assert driver.find_element(By.ID, "trajectory-id").text == HOSTILE_ID
    assert driver.find_element(By.ID, "task").text == HOSTILE_TASK and driver.title.startswith("Trajectory evil/")
    assert no_alert(driver)


@pytest.mark.attack
def test_an_ingest_error_holding_a_script_is_text_on_the_overview(site):
    url, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui")
    shot(driver, "overview")
    assert driver.title == "Overview · Lachesis" and no_alert(driver)
    assert any(XSS in t for t in texts(driver, "#errors td"))
    tables = dict(row.split(" ", 1) for row in texts(driver, "#tables tbody tr"))
    assert tables["trajectories"] == f"{BASE} 23" and tables["runs"].split() == ["1", "2"]


def test_the_conversation_shows_turns_tool_calls_thinking_and_rewards(site):
    from selenium.webdriver.common.by import By

    url, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/trajectories/{CALL_ID}")
    shot(driver, "conversation")
    roles = [li.get_attribute("data-role") for li in driver.find_elements(By.CSS_SELECTOR, "#turns > li")]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    # the Hermes <tool_call> block of the stored text is a structured call with its arguments
    assert texts(driver, ".call .call-name") == ["bash"]
    assert '"command": "wc -l < notes.txt"' in texts(driver, ".call pre.arguments")[0]
    assert not any("<tool_call>" in t for t in texts(driver, "pre.content"))
    # the thinking is folded: there, closed, its text hidden until opened
    details = driver.find_element(By.CSS_SELECTOR, "details.thinking")
    assert details.get_attribute("open") is None and not details.find_element(By.TAG_NAME, "pre").is_displayed()
    details.find_element(By.TAG_NAME, "summary").click()
    assert details.find_element(By.TAG_NAME, "pre").text == "wc counts lines"
    assert texts(driver, "#steps td.step-reward") == ["0.25", "0.75"]
    assert driver.find_element(By.ID, "reward").text == "1.0" and driver.find_element(By.ID, "success").text == "True"
    assert driver.find_element(By.ID, "task").text == "count-lines-3"


def test_filters_and_pagination_in_the_browser(site):
    from selenium.webdriver.common.by import By

    url, b, rows = site
    driver = b.driver
    driver.get(f"{url}/ui/trajectories?as_of={BASE}&limit=4")
    form = driver.find_element(By.ID, "filters")
    form.find_element(By.NAME, "env").send_keys("git_repo_env")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    seen = []
    while True:
        seen.append(texts(driver, "a.trajectory"))
        nxt = driver.find_elements(By.ID, "next")
        if not nxt:
            break
        nxt[0].click()
    shot(driver, "trajectories-last-page")
    flat = [t for page in seen for t in page]
    assert [len(p) for p in seen] == [4, 4, 2] and sorted(flat) == sorted(f"b-{i}" for i in range(10))
    # the filters stay in the form across pages
    assert driver.find_element(By.NAME, "env").get_attribute("value") == "git_repo_env"
    driver.find_element(By.ID, "first").click()
    assert texts(driver, "a.trajectory") == seen[0]


def test_the_as_of_pin_is_carried_in_every_link(site):
    from selenium.webdriver.common.by import By

    url, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/trajectories?as_of=1")
    assert sorted(texts(driver, "a.trajectory")) == sorted(f"a-{i}" for i in range(10))
    assert "trajectories=1" in driver.find_element(By.ID, "versions").text
    for a in driver.find_elements(By.CSS_SELECTOR, "a.trajectory, nav a[href^='/ui'], header nav a"):
        href = a.get_attribute("href")
        if urlparse(href).path.startswith("/ui"):
            assert parse_qs(urlparse(href).query).get("as_of") == ["1"], href
    driver.find_elements(By.CSS_SELECTOR, "a.trajectory")[0].click()
    assert "trajectories=1" in driver.find_element(By.ID, "versions").text


def test_a_bad_filter_is_a_400_page_naming_it(site):
    from selenium.webdriver.common.by import By

    url, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/trajectories?where=1%3D1)%20UNION%20SELECT%201%20--")
    assert driver.find_element(By.ID, "error").text.startswith("where:")
    assert httpx.get(f"{url}/ui/trajectories", params={"where": "1=1) UNION SELECT 1 --"}).status_code == 400
    r = httpx.get(f"{url}/ui/trajectories/no-such-id")
    assert r.status_code == 404 and "no-such-id" in r.text


def test_no_browser_is_left_behind(site):
    """Last in the module: the browser's end leaves none of its processes (driver, Chromium, helpers) alive."""
    _, b, _ = site
    started = [(b.pgid, b.tag)]
    assert browsers.leftovers(started)  # it was running
    b.close()
    deadline = time.monotonic() + 5
    while browsers.leftovers(started) and time.monotonic() < deadline:
        time.sleep(0.1)  # polling a process table: SIGKILLed processes are reaped asynchronously
    assert browsers.leftovers(started) == []
