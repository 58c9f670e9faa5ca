"""The UI's pages (issue 48) in a real headless Chromium (Selenium with the system's chromedriver,
through envs/web/browser.py's Browser: its flags, and its end leaves no process behind) against `lake ui` on a real
lake (tests/ui_helpers.py): hostile values render as text and never run, the conversation page shows tool calls
with their arguments, thinking folded, step rewards and the final reward, the list's filters and pagination work,
the as_of pin is carried in links, the runs and loop pages show what the lake holds, and the browser's login on a
server with a token (`lake ui` and `lake serve`) lets a browser in without ever opening a write route. Screenshots go
to $LACHESIS_UI_SHOTS when it is set."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import httpx
import pytest

from envs.web import browser as browsers
from lake import Lake
from tests.ingest_helpers import ServerProcess
from tests.ui_helpers import BASE, CALL_ID, HOSTILE_ID, HOSTILE_TASK, XSS, build_lake
from tests.web_helpers import needs_browser

pytestmark = needs_browser
TITLE_OF = {"xss": "Trajectory xss · Lachesis"}


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui-pages") / "lake"
    return root, build_lake(root)


@pytest.fixture(scope="module")
def site(lake):
    root, rows = lake
    with ServerProcess(root, command="ui", log_path=root.parent / "ui.log") as srv:
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


def follow(driver, element) -> None:
    """Click `element` (a link, a submit button) and wait until the browser has left the page it was on: a click
    returns before the next page loads, and reading the old one then is a stale element or a wrong answer."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 20).until(expected_conditions.staleness_of(old))


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
    follow(driver, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    seen = []
    while True:
        seen.append(texts(driver, "a.trajectory"))
        nxt = driver.find_elements(By.ID, "next")
        if not nxt:
            break
        follow(driver, nxt[0])
    shot(driver, "trajectories-last-page")
    flat = [t for page in seen for t in page]
    assert [len(p) for p in seen] == [4, 4, 2] and sorted(flat) == sorted(f"b-{i}" for i in range(10))
    # the filters stay in the form across pages
    assert driver.find_element(By.NAME, "env").get_attribute("value") == "git_repo_env"
    follow(driver, driver.find_element(By.ID, "first"))
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
    follow(driver, driver.find_elements(By.CSS_SELECTOR, "a.trajectory")[0])
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


def cells(driver, table: str, *classes: str) -> list[tuple[str, ...]]:
    """Each body row of `#table` as the texts of its cells of `classes` (in that order)."""
    from selenium.webdriver.common.by import By

    out = []
    for tr in driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr"):
        out.append(tuple(tr.find_element(By.CSS_SELECTOR, f".{c}").text for c in classes))
    return out


def test_the_runs_page_shows_the_runs_newest_first_with_config_and_metrics(site, lake):
    from selenium.webdriver.common.by import By

    url, b, _ = site
    root, _ = lake
    driver = b.driver
    with Lake.open(root).snapshot() as snap:  # the runs table as the test reads it: newest first, ties by event id
        want = snap.sql("SELECT kind, run_id, config, metrics FROM runs "
                        "ORDER BY ingested_at DESC, event_id DESC").fetchall()
    driver.get(f"{url}/ui/runs?as_of={BASE}")
    shot(driver, "runs")
    assert driver.title == "Runs · Lachesis" and no_alert(driver)
    assert cells(driver, "runs", "kind", "run") == [(k, r) for k, r, _, _ in want]
    # config and metrics summarised in a line (the whole value folded under it)
    by_run = {tr.find_element(By.CSS_SELECTOR, ".run").text: tr
              for tr in driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")}
    for _, run_id, config, metrics in want:
        for name, value in (("config", config), ("metrics", metrics)):
            shown = by_run[run_id].find_element(By.CSS_SELECTOR, f".{name}").text
            expect = ", ".join(f"{k}={v}" for k, v in json.loads(value).items()) if value else ""
            assert shown == expect, (run_id, name)
    # a kind links to the runs of that kind, a run id to that run's events; the pin goes along
    kind, run_id = want[-1][0], want[-1][1]
    follow(driver, by_run[run_id].find_element(By.CSS_SELECTOR, "a.kind"))
    assert parse_qs(urlparse(driver.current_url).query) == {"kind": [kind], "as_of": [str(BASE)]}
    assert cells(driver, "runs", "kind", "run") == [(k, r) for k, r, _, _ in want if k == kind]
    follow(driver, driver.find_element(By.CSS_SELECTOR, "#runs a.run"))
    assert cells(driver, "runs", "run") == [(run_id,)] and driver.find_element(By.ID, "run-filter").text == run_id
    # one run a page: the next link leads through them in order, the first link back
    driver.get(f"{url}/ui/runs?as_of={BASE}&limit=1")
    seen = [cells(driver, "runs", "run")]
    while driver.find_elements(By.ID, "next"):
        follow(driver, driver.find_element(By.ID, "next"))
        seen.append(cells(driver, "runs", "run"))
    assert seen == [[(r,)] for _, r, _, _ in want]
    follow(driver, driver.find_element(By.ID, "first"))
    assert cells(driver, "runs", "run") == seen[0]


def test_the_loop_page_shows_success_and_reward_by_policy_version(site, lake):
    from selenium.webdriver.common.by import By

    url, b, rows = site
    driver = b.driver
    groups: dict = {}
    for row in rows.values():  # every trajectory's current row at BASE (the late reward applied)
        groups.setdefault(row.get("policy_version"), []).append(row)
    want = {}
    for version, members in groups.items():
        rewards = [r["reward"] for r in members]
        wins = sum(bool(r["success"]) for r in members)
        want[version or "(none)"] = (str(len(members)), str(wins), f"{100 * wins / len(members):.1f}%",
                                     f"{sum(rewards) / len(rewards):.3f}")
    driver.get(f"{url}/ui/loop?as_of={BASE}")
    shot(driver, "loop")
    assert driver.title == "The loop · Lachesis" and no_alert(driver)
    got = cells(driver, "loop", "policy", "count", "successes", "success-rate", "mean-reward")
    assert {g[0]: g[1:] for g in got} == want and len(got) == len(want)
    assert [g[0] for g in got] == ["v1", "v2", "(none)"]  # the order the versions first appeared in
    # a version links to its trajectories, pinned
    follow(driver, driver.find_element(By.LINK_TEXT, "v2"))
    v2 = sorted(t for t, r in rows.items() if r.get("policy_version") == "v2")
    assert sorted(texts(driver, "a.trajectory")) == v2
    assert "trajectories=3" in driver.find_element(By.ID, "versions").text
    # the overview's navigation leads to both pages
    driver.get(f"{url}/ui")
    assert [a.text for a in driver.find_elements(By.CSS_SELECTOR, "header nav a")][:4] == [
        "Overview", "Trajectories", "Runs", "Loop"]


# -- the browser's login on a server with a token ---------------------------------------------------------------
TOKEN = "s3cret;ui,\"token\""  # characters a cookie cannot carry as they are


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """`lake ui --token-file` and `lake serve --token` over a lake of their own, both started at once."""
    tmp = tmp_path_factory.mktemp("ui-login")
    rows = build_lake(tmp / "lake")
    (tmp / "tokens").write_text(TOKEN + "\n")
    servers = {"ui": ServerProcess(tmp / "lake", command="ui", extra=["--token-file", str(tmp / "tokens")],
                                   log_path=tmp / "ui.log"),
               "serve": ServerProcess(tmp / "lake", token=TOKEN, log_path=tmp / "serve.log")}
    for s in servers.values():
        s.spawn()
    try:
        for s in servers.values():
            s.wait_healthy(60)
        yield {name: s.url for name, s in servers.items()}, rows
    finally:
        for s in servers.values():
            s.kill()


def log_in(driver, token: str) -> None:
    from selenium.webdriver.common.by import By

    form = driver.find_element(By.ID, "login")
    form.find_element(By.NAME, "token").send_keys(token)
    follow(driver, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))


@pytest.mark.parametrize("server", ["ui", "serve"])
def test_a_browser_logs_in_with_the_form_then_reads_the_pages_and_logs_out(site, guarded, server):
    from selenium.webdriver.common.by import By

    _, b, _ = site
    urls, rows = guarded
    url = urls[server]
    driver = b.driver
    driver.delete_all_cookies()
    try:
        driver.get(f"{url}/ui/trajectories?as_of={BASE}")  # no login yet: sent to the form
        assert urlparse(driver.current_url).path == "/ui/login" and driver.title == "Log in · Lachesis"
        log_in(driver, "wrong")
        assert urlparse(driver.current_url).path == "/ui/login" and texts(driver, "#error") == ["wrong token"]
        assert driver.find_elements(By.ID, "login") and driver.get_cookie("lachesis_token") is None
        shot(driver, f"login-wrong-{server}")
        log_in(driver, TOKEN)
        assert urlparse(driver.current_url).path == "/ui" and driver.title == "Overview · Lachesis"
        cookie = driver.get_cookie("lachesis_token")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
        assert TOKEN not in cookie["value"]  # encoded: the token's `;` and quotes would end a cookie
        driver.get(f"{url}/ui/trajectories?as_of={BASE}")
        assert sorted(texts(driver, "a.trajectory")) == sorted(rows)
        follow(driver, driver.find_element(By.CSS_SELECTOR, "#logout button"))
        assert urlparse(driver.current_url).path == "/ui/login" and driver.get_cookie("lachesis_token") is None
        driver.get(f"{url}/ui/runs")
        assert urlparse(driver.current_url).path == "/ui/login"
    finally:
        driver.delete_all_cookies()


@pytest.mark.attack
def test_the_login_cookie_opens_the_pages_only_never_a_write_route(guarded):
    urls, _ = guarded
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=urls["serve"], timeout=30) as c:
        r = c.post("/ui/login", data={"token": TOKEN})
        assert r.status_code == 303 and r.headers["location"] == "/ui"
        jar = {"lachesis_token": r.cookies["lachesis_token"]}
        assert c.get("/ui/runs", cookies=jar).status_code == 200
        # a write with the cookie alone (what a cross-site form could send) is refused, and wrote nothing
        rec = {"trajectory_id": "by-cookie", "messages": [{"role": "user", "content": "hi"}]}
        assert c.post("/v1/trajectories", json=rec, cookies=jar).status_code == 401
        assert c.post("/v1/trajectories", content=json.dumps(rec), cookies=jar,
                      headers={"Content-Type": "text/plain"}).status_code in (401, 415)
        assert c.get("/v1/trajectories/by-cookie", headers=bearer).status_code == 404
        # the JSON API and the Atropos reads take the bearer header only
        for path in ("/v1/runs", "/v1/trajectories", "/batch", "/latest_example"):
            assert c.get(path, cookies=jar).status_code == 401, path
        # a wrong cookie is no login: a page sends to the form, the API answers 401 as to a wrong bearer
        bad = {"lachesis_token": "d3Jvbmc"}
        page = c.get("/ui/trajectories", cookies=bad)
        assert page.status_code == 303 and page.headers["location"] == "/ui/login"
        assert c.get("/v1/trajectories", cookies=bad).status_code == 401
        assert c.get("/ui/trajectories", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert "no longer accepted" in c.get("/ui/login", cookies=bad).text
        # the form itself: from another origin, too large, or not a form, it is refused
        assert c.post("/ui/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"}).status_code == 403
        big = c.post("/ui/login", data={"token": "x" * 100_000})
        assert big.status_code == 413 and "lachesis_token" not in big.cookies
        assert c.post("/ui/login", json={"token": TOKEN}).status_code == 415
        assert c.post("/ui/login", content=b"token=\xff", headers={"Content-Type":
                      "application/x-www-form-urlencoded"}).status_code == 400


def test_without_a_token_no_login_is_needed(site):
    url, b, _ = site
    r = httpx.get(f"{url}/ui/login")
    assert r.status_code == 200 and "no login is needed" in r.text and 'name="token"' not in r.text
    r = httpx.post(f"{url}/ui/login", data={"token": "anything"})
    assert r.status_code == 303 and r.headers["location"] == "/ui" and "lachesis_token" not in r.cookies


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
