"""The UI's pages (issue 48) in a real headless Chromium (Selenium with the system's chromedriver,
through envs/web/browser.py's Browser: its flags, and its end leaves no process behind) against `lake ui` on a real
lake (tests/ui_helpers.py): hostile values render as text and never run, the conversation page shows tool calls
with their arguments, thinking folded, step rewards and the final reward, the list's filters and pagination work,
the as_of pin is carried in links, the runs and loop pages show what the lake holds, the conversation's log-prob
heat, a web episode's screenshot (served from inside `--screenshots` only) and the exports holding a trajectory
(`--exports`), and the browser's login on a server with a token (`lake ui` and `lake serve`) lets a browser in
without ever opening a write route. Screenshots go to $LACHESIS_UI_SHOTS when it is set."""
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
from tests.ingest_helpers import ServerProcess, lake_cmd
from tests.ui_helpers import (BASE, BIG_CHARS, BIG_ID, CALL_ID, EVERYWHERE_ID, HOSTILE_ID, HOSTILE_TASK, INCREMENTS,
                              JS_URL, MANY_ID, MANY_TURNS, RL_EVAL_EVERY, RL_RUN, RL_STEPS, SERIAL, SURROGATE_ID, XSS,
                              add_skills, build_hostile_lake, build_lake, build_runs_lake)
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
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    # A mark on the old page's window: the next document's window has none. (selenium's staleness_of asks the old
    # node, and under load chromedriver answers that with "Node with given id does not belong to the document", a
    # WebDriverException rather than a stale element.)
    driver.execute_script("window.__lachesis_old_page = true;")
    failed = None
    try:
        element.click()
    except WebDriverException as exc:  # under load the navigation can outrun chromedriver's bookkeeping of the click
        failed = exc  # (the same message): whether the page left is what counts
    try:
        WebDriverWait(driver, 20, ignored_exceptions=(WebDriverException,)).until(lambda d: d.execute_script(
            "return window.__lachesis_old_page === undefined && document.readyState === 'complete';"))
    except TimeoutException:
        raise AssertionError(f"the page did not change after the click ({failed})") from None


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


def test_a_column_header_sorts_the_list_and_again_reverses_it(site):
    from selenium.webdriver.common.by import By

    url, b, rows = site
    driver = b.driver
    driver.get(f"{url}/ui/trajectories?as_of={BASE}&env=git_repo_env&limit=500")
    follow(driver, driver.find_element(By.CSS_SELECTOR, "th a.sort[data-sort=reward]"))
    want = sorted((t for t in rows if t.startswith("b-")), key=lambda t: rows[t]["reward"], reverse=True)
    assert texts(driver, "a.trajectory") == want  # the filters kept, highest reward first
    assert driver.find_element(By.CSS_SELECTOR, "th[aria-sort]").get_attribute("aria-sort") == "descending"
    follow(driver, driver.find_element(By.CSS_SELECTOR, "th a.sort[data-sort=reward]"))
    assert texts(driver, "a.trajectory") == want[::-1]
    assert parse_qs(urlparse(driver.current_url).query)["env"] == ["git_repo_env"]


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


# -- hostile rows: markup in every field, 5 MB in a turn, 10,000 turns, lone surrogates ------------------------------
PAGE_BYTES = 1_500_000  # what one conversation page may weigh, whatever the row (ui/conversation.py PAGE_CHARS)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """`lake ui` over a lake of hostile rows (tests/ui_helpers.py build_hostile_lake)."""
    root = tmp_path_factory.mktemp("ui-hostile") / "lake"
    rows = build_hostile_lake(root)
    with ServerProcess(root, command="ui", log_path=root.parent / "ui.log") as srv:
        yield srv.url, rows


def conversation_url(url: str, tid: str) -> str:
    return f"{url}/ui/trajectories/{quote(tid, safe='')}"


@pytest.mark.attack
@pytest.mark.parametrize("path, title", [
    (f"/ui/trajectories/{EVERYWHERE_ID}", f"Trajectory {EVERYWHERE_ID}"), ("/ui", "Overview"), ("/ui/runs", "Runs"),
    ("/ui/loop", "The loop"), ("/ui/trajectories", "Trajectories"),
    ("/ui/runs/" + quote(f"{XSS} {JS_URL}", safe=""), f"Run {f'{XSS} {JS_URL}'[:80]}"),  # its id, as text
])
def test_markup_in_every_rendered_field_is_text_on_every_page(site, hostile, path, title):
    """The task, env, split, model, policy, group, every turn, the thinking, a tool call's name, id and arguments,
    the tool result and its name, the steps, the metadata, a run's fields and an ingest error: each carries a
    <script>, an onerror= attribute and a javascript: URL, shown as text; no element is made of them, no link leads
    to a javascript: URL, nothing ran."""
    from selenium.webdriver.common.by import By

    url, rows = hostile
    _, b, _ = site
    driver = b.driver
    driver.get(url + path)
    shot(driver, "hostile" + path.replace("/", "-")[:40])
    assert driver.title == f"{title} · Lachesis" and no_alert(driver)  # nothing set it
    assert driver.find_elements(By.CSS_SELECTOR, "main script, main img, main iframe, main object") == []
    hrefs = [a.get_attribute("href") or "" for a in driver.find_elements(By.TAG_NAME, "a")]
    assert hrefs and not any(h.lower().startswith("javascript:") for h in hrefs)
    shown = driver.find_element(By.TAG_NAME, "main").text
    assert XSS in shown and JS_URL in shown
    if path.endswith(EVERYWHERE_ID):  # every field of the conversation, each once at least
        assert driver.find_element(By.ID, "task").text.startswith(XSS[:40])
        assert [li.get_attribute("data-role") for li in driver.find_elements(By.CSS_SELECTOR, "#turns > li")] == [
            "system", "user", "assistant", "tool"]
        for css in (".call-name", ".call-id", "pre.arguments", "pre.content", "#steps td", "#metadata pre"):
            assert any(XSS[:40] in t or XSS.replace('"', '\\"')[:40] in t for t in texts(driver, css)), css
        details = driver.find_element(By.CSS_SELECTOR, "details.thinking")
        details.find_element(By.TAG_NAME, "summary").click()
        assert XSS in details.find_element(By.TAG_NAME, "pre").text and no_alert(driver)


@pytest.mark.attack
def test_a_5_mb_turn_is_cut_with_a_note_and_a_link_to_the_whole_json(site, hostile):
    from selenium.webdriver.common.by import By

    url, _ = hostile
    _, b, _ = site
    r = httpx.get(conversation_url(url, BIG_ID), timeout=60)
    assert r.status_code == 200 and len(r.content) < PAGE_BYTES, len(r.content)
    driver = b.driver
    driver.get(conversation_url(url, BIG_ID))
    assert no_alert(driver) and "pwned" not in driver.title
    notes = texts(driver, "p.cut")
    assert any(f"of {BIG_CHARS:,} characters" in n for n in notes), notes
    assert driver.find_element(By.ID, "cut").is_displayed()
    shown = driver.find_element(By.CSS_SELECTOR, "pre.content").text
    assert 0 < len(shown) < BIG_CHARS and shown.startswith("<b><script>x</script>")
    link = driver.find_element(By.CSS_SELECTOR, "#cut a").get_attribute("href")
    assert urlparse(link).path == f"/v1/trajectories/{BIG_ID}"
    whole = httpx.get(link, timeout=60).json()["trajectory"]
    assert len(whole["messages"][0]["content"]) == BIG_CHARS and len(whole["messages"][1]["reasoning"]) == BIG_CHARS
    # the list shows the row like any other
    assert BIG_ID in httpx.get(f"{url}/ui/trajectories", params={"task": "big"}).text


@pytest.mark.attack
def test_10k_turns_render_a_bounded_page_saying_how_many_are_shown(site, hostile):
    from selenium.webdriver.common.by import By
    from ui.conversation import MAX_STEPS, MAX_TURNS

    url, _ = hostile
    _, b, _ = site
    t0 = time.monotonic()
    r = httpx.get(conversation_url(url, MANY_ID), timeout=60)
    assert r.status_code == 200 and len(r.content) < PAGE_BYTES and time.monotonic() - t0 < 10
    driver = b.driver
    driver.get(conversation_url(url, MANY_ID))
    assert len(driver.find_elements(By.CSS_SELECTOR, "#turns > li")) == MAX_TURNS
    assert driver.find_element(By.ID, "turns-cut").text.startswith(f"shown {MAX_TURNS} of {MAX_TURNS_SHOWN} turns")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#steps tbody tr")) == MAX_STEPS
    assert driver.find_element(By.ID, "steps-cut").text.startswith(f"shown {MAX_STEPS} of {MAX_TURNS_SHOWN} steps")
    assert [driver.find_element(By.CSS_SELECTOR, f"#turns > li:nth-child({n}) pre.content").text
            for n in (1, MAX_TURNS)] == ["turn 0", f"turn {MAX_TURNS - 1}"]


MAX_TURNS_SHOWN = f"{MANY_TURNS:,}"


@pytest.mark.attack
def test_lone_surrogates_in_json_escapes_are_shown_as_replacement_characters(site, hostile):
    """A tool call's arguments and the metadata escape lone surrogates (valid UTF-8 text, the one way the lake can
    hold them); parsed, they are U+FFFD on the page and in the API's JSON, never a 500."""
    url, _ = hostile
    _, b, _ = site
    r = httpx.get(f"{url}/v1/trajectories/{SURROGATE_ID}")
    assert r.status_code == 200, r.text[:300]
    call = r.json()["trajectory"]["messages"][1]["tool_calls"][0]
    assert call["arguments"] == {"command": "echo \ufffd x"}
    driver = b.driver
    driver.get(conversation_url(url, SURROGATE_ID))
    assert '"command": "echo \ufffd x"' in texts(driver, "pre.arguments")[0]
    assert httpx.get(f"{url}/v1/health").status_code == 200


def test_the_lake_refuses_a_raw_lone_surrogate(tmp_path):
    """The premise of the case above: the writer never stores one (Arrow strings are UTF-8)."""
    from transcript.trajectory_row import trajectory_row

    lake = Lake.init(tmp_path / "lake")
    with pytest.raises(UnicodeEncodeError):
        lake.append("trajectories", [trajectory_row(trajectory_id="s", messages=[
            {"role": "user", "content": "lone \ud800"}])])
    assert lake.version("trajectories") == 0


# -- the browser's login on a server with a token ---------------------------------------------------------------
TOKEN = "s3cret;ui,\"token\""  # characters a cookie cannot carry as they are


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """`lake ui --token-file` and `lake serve --token` over a lake of their own (and a second `lake ui` for the rate
    limit's test), all started at once."""
    tmp = tmp_path_factory.mktemp("ui-login")
    rows = build_lake(tmp / "lake")
    (tmp / "tokens").write_text(TOKEN + "\n")
    servers = {"ui": ServerProcess(tmp / "lake", command="ui", extra=["--token-file", str(tmp / "tokens"),
                                                                     "--exports", str(tmp / "exports")],
                                   log_path=tmp / "ui.log"),
               "serve": ServerProcess(tmp / "lake", token=TOKEN, log_path=tmp / "serve.log"),
               # the rate limit's test locks its address out of this one (the others' logins must not be)
               "limited": ServerProcess(tmp / "lake", command="ui", extra=["--token-file", str(tmp / "tokens")],
                                        log_path=tmp / "limited.log")}
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


@pytest.mark.attack
@pytest.mark.attack
def test_on_a_server_with_a_token_the_cookie_opens_the_export_with_its_token_only(guarded):
    import re

    urls, _ = guarded
    with httpx.Client(base_url=urls["ui"], timeout=60) as c:
        jar = {"lachesis_token": c.post("/ui/login", data={"token": TOKEN}).cookies["lachesis_token"]}
        c.cookies.clear()  # each request below sends the cookies it names, no more
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get("/ui/views/sft", cookies=jar).text).group(1)
        pin = "trajectories=3"
        # without the cookie: the guard sends to the login; with it and another cookie's token: refused
        assert c.post("/ui/views/sft/export", data={"csrf": token, "as_of": pin}).status_code == 303
        stale = {"lachesis_token": "d3Jvbmc"}
        assert c.post("/ui/views/sft/export", data={"csrf": token, "as_of": pin}, cookies=stale).status_code == 303
        r = c.post("/ui/views/sft/export", data={"csrf": token, "as_of": pin}, cookies=jar)
        assert r.status_code == 200 and 'id="output"' in r.text, r.text[:300]
        # the cookie still does not open the JSON API (nor lake serve's writes: test_the_login_cookie_opens_...)
        assert c.get("/v1/views", cookies=jar).status_code == 401
    with httpx.Client(base_url=urls["serve"], timeout=30) as c:  # `lake serve` carries the UI without exports
        r = c.post("/ui/views/sft/export", data={"csrf": token}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 404


def test_wrong_logins_from_one_address_are_limited_with_retry_after(guarded):
    """LOGIN_FAILURES wrong tokens from an address within the window, then 429 with Retry-After for every login from
    it, the right token included (a guesser learns nothing while refused); another address is not held up, and the
    pages still answer a bearer header."""
    from edge.attempts import LOGIN_FAILURES, LOGIN_WINDOW_S

    urls, _ = guarded
    url = urls["limited"]
    with httpx.Client(base_url=url, timeout=30) as c:
        for i in range(LOGIN_FAILURES):
            r = c.post("/ui/login", data={"token": f"guess-{i}"})
            assert r.status_code == 401 and "Retry-After" not in r.headers, i
        for token in ("guess-again", TOKEN):
            r = c.post("/ui/login", data={"token": token})
            assert r.status_code == 429 and "lachesis_token" not in r.cookies, token
            assert 1 <= int(r.headers["Retry-After"]) <= LOGIN_WINDOW_S
            assert "too many wrong tokens" in r.text and r.headers["content-security-policy"]
        assert c.get("/ui/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    other = httpx.HTTPTransport(local_address="127.0.0.2")  # loopback is all of 127/8: another client address
    with httpx.Client(base_url=url, timeout=30, transport=other) as c:
        r = c.post("/ui/login", data={"token": TOKEN})
        assert r.status_code == 303 and "lachesis_token" in r.cookies


def test_failed_attempts_slide_out_of_the_window_and_memory_is_bounded():
    from edge.attempts import FailedAttempts

    now = [0.0]
    a = FailedAttempts(3, 10.0, max_clients=2, clock=lambda: now[0])
    for t in (0.0, 1.0, 2.0):
        now[0] = t
        assert a.retry_after("x") is None
        a.failed("x")
    assert a.retry_after("x") == 8  # the first failure leaves the window at 10.0
    now[0] = 9.5
    assert a.retry_after("x") == 1
    now[0] = 10.0
    assert a.retry_after("x") is None  # one slid out: two left, under the limit
    a.failed("x")
    assert a.retry_after("x") == 1  # the second leaves at 11.0
    a.failed("y")
    a.failed("z")  # a third address: the least recently failed (x) is forgotten
    assert len(a) == 2 and a.retry_after("x") is None


def test_without_a_token_no_login_is_needed(site):
    url, b, _ = site
    r = httpx.get(f"{url}/ui/login")
    assert r.status_code == 200 and "no login is needed" in r.text and 'name="token"' not in r.text
    r = httpx.post(f"{url}/ui/login", data={"token": "anything"})
    assert r.status_code == 303 and r.headers["location"] == "/ui" and "lachesis_token" not in r.cookies


# -- a run's page and the loop's chart over runs as the trainers record them --------------------------------------
@pytest.fixture(scope="module")
def runs_site(tmp_path_factory):
    """`lake ui --runs --exports` over a lake of runs as their writers record them and of skills as `lake watch`
    ingests them (tests/ui_helpers.py build_runs_lake, add_skills)."""
    tmp = tmp_path_factory.mktemp("ui-runs")
    info = build_runs_lake(tmp / "lake", tmp / "runs")
    info["skill_users"] = add_skills(tmp / "lake")
    info.update(lake=tmp / "lake", exports=tmp / "exports")
    with ServerProcess(tmp / "lake", command="ui", extra=["--runs", str(tmp / "runs"), "--exports",
                                                           str(tmp / "exports")], log_path=tmp / "ui.log") as srv:
        yield srv.url, info


def chart_points(driver, figure_id: str) -> dict[str, list[tuple[float, float]]]:
    """{series: [(x, y)]} as the chart's table of points lists them."""
    from selenium.webdriver.common.by import By

    out: dict = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, f"#{figure_id} details.points tbody tr"):
        name, x, y = (td.get_attribute("textContent") for td in tr.find_elements(By.TAG_NAME, "td"))
        out.setdefault(name, []).append((float(x), float(y)))
    return out


def test_a_run_page_draws_its_loss_and_evaluations_and_links_its_episodes(site, runs_site):
    from selenium.webdriver.common.by import By

    url, info = runs_site
    _, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/runs/{RL_RUN}")
    shot(driver, "run")
    assert driver.title == f"Run {RL_RUN} · Lachesis" and no_alert(driver)
    # the loss curve: every step of train_log.jsonl, drawn as SVG on the server (no script), checkpoints marked
    loss = [(float(r["step"]), r["loss"]) for r in info["log"] if "loss" in r]
    assert chart_points(driver, "loss")["loss"] == [pytest.approx(p, rel=5e-3) for p in loss]  # 3 digits shown
    assert len(driver.find_elements(By.CSS_SELECTOR, "#loss svg circle.dot")) == RL_STEPS
    assert len(driver.find_elements(By.CSS_SELECTOR, "#loss svg line.mark")) == RL_STEPS // RL_EVAL_EVERY
    assert driver.find_elements(By.CSS_SELECTOR, "script") == []
    # the evaluations: each eval run's success rate at its step
    evals = chart_points(driver, "evals")["success rate"]
    assert evals == [(float(s), round(0.2 + s / 100, 3)) for s in range(RL_EVAL_EVERY, RL_STEPS + 1, RL_EVAL_EVERY)]
    assert [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#evaluations a.run-page")] == info["evals"]
    # the lineage: the data it trained on, pinned in a link to the list at those versions
    trained = driver.find_element(By.ID, "trained-on")
    pin = parse_qs(urlparse(trained.get_attribute("href")).query)["as_of"]
    assert len(pin) == 1 and json.loads(pin[0]) == info["trained_on"]
    follow(driver, trained)
    assert "trajectories=1" in driver.find_element(By.ID, "versions").text
    driver.back()
    assert "lr" in driver.find_element(By.ID, "config").text
    # its evaluation episodes, each a link to its conversation
    links = driver.find_elements(By.CSS_SELECTOR, "#episodes a.trajectory")
    assert sorted(a.text for a in links) == sorted(info["episodes"])
    first = links[0].text
    follow(driver, links[0])
    assert driver.find_element(By.ID, "trajectory-id").text == first
    # and the conversation links back to the evaluation that played it and the run it belongs to
    back = {a.get_attribute("data-key"): urlparse(a.get_attribute("href")).path
            for a in driver.find_elements(By.CSS_SELECTOR, "a.run-page")}
    assert back == {"eval_run_id": f"/ui/runs/{first.rsplit('-ep', 1)[0]}", "train_run_id": f"/ui/runs/{RL_RUN}"}
    # the runs list leads to the page
    driver.get(f"{url}/ui/runs?run_id={RL_RUN}&limit=1")
    follow(driver, driver.find_element(By.CSS_SELECTOR, "#runs a.run-page"))
    assert urlparse(driver.current_url).path == f"/ui/runs/{RL_RUN}"


def test_an_increment_page_shows_the_trainer_lineage_and_what_was_served(site, runs_site):
    from selenium.webdriver.common.by import By

    url, info = runs_site
    _, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/runs/{info['increments'][1]}")
    shot(driver, "run-increment")
    assert [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#increments a.run-page")] == info["increments"]
    # no per-step log in its folder: the loss by increment from the lake, the reason said
    assert chart_points(driver, "loss") == {"final loss": [(1.0, 1.0), (2.0, 0.5), (3.0, 0.333)]}
    assert "train_log.jsonl not read" in driver.find_element(By.TAG_NAME, "main").text
    # each evaluation placed at the increment whose weights it evaluated, the increments marked
    assert chart_points(driver, "evals")["success rate"] == [(1.0, 0.1), (2.0, 0.2), (3.0, 0.3)]
    assert len(driver.find_elements(By.CSS_SELECTOR, "#evals svg line.mark")) == INCREMENTS
    # served from the second increment's weights (their sha256), a link to those trajectories
    assert cells(driver, "served", "policy", "count") == [(f"tiny@{SERIAL}:2", str(len(info["served"])))]
    follow(driver, driver.find_element(By.CSS_SELECTOR, "#served a.policy"))
    assert sorted(texts(driver, "a.trajectory")) == sorted(info["served"])


@pytest.mark.attack
@pytest.mark.parametrize("run_id, why", [("outside", "is not inside"), ("linked", "symbolic link"),
                                         ("climbs", "not a path inside the folder")])
def test_a_run_folder_outside_the_runs_folder_is_never_read(runs_site, run_id, why):
    """A run's recorded folder is data any writer of the runs table chose: outside --runs, through a link or a
    climbing path, its log is not read, and the page says why."""
    url, _ = runs_site
    r = httpx.get(f"{url}/ui/runs/{run_id}")
    assert r.status_code == 200 and why in r.text and 'id="loss"' in r.text and "circle" not in r.text


def test_the_run_api_and_unknown_runs(runs_site):
    url, info = runs_site
    body = httpx.get(f"{url}/v1/runs/{RL_RUN}").json()
    assert [e["kind"] for e in body["events"]] == ["checkpoint"] * (RL_STEPS // RL_EVAL_EVERY) + ["train"]
    assert {r["run_id"] for r in body["related"] if r["relation"] == "evaluation"} == set(info["evals"])
    assert body["episodes_total"] == len(info["episodes"])
    for path in ("/v1/runs/no-such-run", "/ui/runs/no-such-run"):
        r = httpx.get(url + path)
        assert r.status_code == 404 and "no-such-run" in r.text


def test_the_loop_chart_marks_each_training_event(site, runs_site):
    from selenium.webdriver.common.by import By

    url, info = runs_site
    _, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/loop")
    shot(driver, "loop-chart")
    body = httpx.get(f"{url}/v1/loop").json()
    marks = driver.find_elements(By.CSS_SELECTOR, "#loop-over-time svg line.mark")
    assert len(marks) == len(body["increments"]) == 1 + INCREMENTS + 3  # rl-1's end, the increments, 3 more
    titles = [m.find_element(By.TAG_NAME, "title").get_attribute("textContent") for m in marks]
    assert f"{info['increments'][0]} (increment 1)" in titles
    points = chart_points(driver, "loop-over-time")
    assert len(points["success rate"]) == len(body["rows"])
    # split by kind: the evaluations' episodes (RL's at each step, the watcher's per weights), the served calls
    # (one version), the skills' trajectories (other)
    kinds = {(s["policy_version"], s["kind"]): s for s in body["split"]}
    assert kinds[(f"tiny@{SERIAL}:2", "served")]["trajectories"] == len(info["served"])
    assert {v for v, k in kinds if k == "evaluation"} >= {str(s) for s in range(RL_EVAL_EVERY, RL_STEPS + 1,
                                                                               RL_EVAL_EVERY)}
    assert len(points["served: success rate"]) == 1 and len(points["evaluation: success rate"]) == len(
        [k for k in kinds if k[1] == "evaluation"])
    assert sum(s["trajectories"] for s in body["split"]) == sum(r["trajectories"] for r in body["rows"])
    assert sorted(y for _, y in points["success rate"]) == [pytest.approx(r, rel=5e-3)
                                                            for r in sorted(r["success_rate"] for r in body["rows"])]


# -- skills, views and the export button -------------------------------------------------------------------------
def test_the_skills_page_shows_skills_their_effect_and_the_selection(site, runs_site):
    from selenium.webdriver.common.by import By

    url, info = runs_site
    _, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/skills")
    shot(driver, "skills")
    assert driver.title == "Skills · Lachesis" and no_alert(driver)
    with Lake.open(info["lake"]).snapshot(for_query="SELECT * FROM skills_current") as snap:
        current = [r[0] for r in snap.sql("SELECT name FROM skills_current ORDER BY name").fetchall()]
    assert texts(driver, "#skills td.name") == current and "old-skill" not in current  # archived: not current
    # skill_effect: deploy-check's users succeed 5 of 6; the same env without it 3 of 10 plus quick-notes' 1 of 4
    effect = {row[0]: row[1:] for row in cells(driver, "effect", "skill", "trajectories", "success-rate", "baseline")}
    assert effect["deploy-check"] == ("6", "83.3%", f"{100 * 4 / 14:.1f}%")
    assert effect["quick-notes"] == ("4", "25.0%", f"{100 * 8 / 16:.1f}%")
    # what skill_to_instruction would pick (its defaults; tests/test_skill_to_instruction.py has the same four)
    assert texts(driver, "#selection td.name") == ["deploy-check", "fast-serve", "python-debug-loop", "quick-notes"]
    form = driver.find_element(By.ID, "selection-filters")
    for name, value in (("min_uses", "4"), ("provenance", "agent,bundled")):
        field = form.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)
    follow(driver, form.find_element(By.CSS_SELECTOR, "button"))
    assert {"rare-skill", "gh-helper"} < set(texts(driver, "#selection td.name"))
    r = httpx.get(f"{url}/v1/skills", params={"provenance": "nope"})
    assert r.status_code == 400 and r.json()["param"] == "provenance"


def test_the_views_page_lists_every_view_and_a_view_shows_its_rows(site, runs_site):
    from selenium.webdriver.common.by import By
    from views import VIEWS_DIR

    url, info = runs_site
    _, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/views")
    shot(driver, "views")
    assert texts(driver, "#views a.view") == sorted(p.stem for p in VIEWS_DIR.glob("*.sql"))
    follow(driver, driver.find_element(By.LINK_TEXT, "skill_effect"))
    with Lake.open(info["lake"]).snapshot(for_query="SELECT * FROM skill_effect") as snap:
        total = snap.sql("SELECT count(*) FROM skill_effect").fetchall()[0][0]
        first = [r[0] for r in snap.sql("SELECT skill FROM skill_effect ORDER BY skill").fetchall()]
    assert driver.find_element(By.ID, "total").text.startswith(f"{total} rows")
    assert [tr.find_element(By.TAG_NAME, "td").text for tr in driver.find_elements(By.CSS_SELECTOR, "#rows tbody tr")
            ] == first[:20]
    assert httpx.get(f"{url}/v1/views/skill_effect", params={"limit": 2}).json()["total"] == total
    assert httpx.get(f"{url}/ui/views/no_such_view").status_code == 404


def test_the_export_button_runs_lake_export_into_the_exports_folder(site, runs_site, tmp_path):
    """The button writes what `lake export VIEW --as-of PIN` writes: the same rows, event ids and versions."""
    import subprocess

    from selenium.webdriver.common.by import By

    url, info = runs_site
    _, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/views/sft")
    pin = driver.find_element(By.CSS_SELECTOR, "#export input[name=as_of]").get_attribute("value")
    follow(driver, driver.find_element(By.CSS_SELECTOR, "#export button"))
    shot(driver, "exported")
    out = Path(driver.find_element(By.ID, "output").text)
    assert out.parent == info["exports"] and (out / "manifest.json").is_file()
    mine = json.loads((out / "manifest.json").read_text())
    cli = tmp_path / "cli-export"
    done = subprocess.run(lake_cmd() + ["export", "sft", "--lake", str(info["lake"]), "--as-of", pin, "--output",
                                        str(cli), "--allow-empty"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    theirs = json.loads((cli / "manifest.json").read_text())
    for key in ("row_count", "lake_versions", "event_ids_sha256", "view_sql_sha256", "splits"):
        assert mine[key] == theirs[key], key
    assert mine["lake_versions"] == json.loads(pin) and mine["row_count"] > 0


@pytest.mark.attack
def test_the_export_post_needs_this_page_token_and_this_origin(runs_site):
    """Without the form's CSRF token, with another page's, or from another origin, nothing is written."""
    import re

    url, info = runs_site
    before = set(info["exports"].iterdir()) if info["exports"].exists() else set()
    page = httpx.get(f"{url}/ui/views/sft").text
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    with_cookie = httpx.get(f"{url}/ui/views/sft", cookies={"lachesis_token": "b3RoZXI"}).text  # another browser
    other = re.search(r'name="csrf" value="([0-9a-f]+)"', with_cookie).group(1)
    assert other != token
    for data, headers in (({"as_of": ""}, {}), ({"csrf": "0" * 64}, {}), ({"csrf": other}, {}),
                          ({"csrf": token}, {"Origin": "http://evil.example"}),
                          ({"csrf": token}, {"Sec-Fetch-Site": "cross-site"}),
                          ({"csrf": [token, token]}, {})):
        r = httpx.post(f"{url}/ui/views/sft/export", data=data, headers=headers)
        assert r.status_code == 403, (data, headers, r.text[:200])
    assert httpx.post(f"{url}/ui/views/sft/export", json={"csrf": token}).status_code == 415
    assert (set(info["exports"].iterdir()) if info["exports"].exists() else set()) == before
    assert httpx.post(f"{url}/ui/views/no_such/export", data={"csrf": token}).status_code == 404


# -- the conversation's log-prob heat, a web episode's screenshot, the exports holding a trajectory ---------------
HEAT_ID, LONG_ID, LATE_ID, PLAIN_ID, SHOTS_ID = "heat", "long-heat", "late", "plain", "bad-shots"
HEAT_LPS = [1.0, 1.0, 1.0, -0.01, -0.5, -2.5, -0.105, -4.0]  # three prompt tokens (Atropos' 1.0), five sampled
LONG_PROMPT, LONG_TOKENS = 3500, 5000
OUTSIDE = "refused: not inside the screenshots folder "  # and the folder
SHOT_ROWS = {"shot-out": OUTSIDE, "shot-climb": OUTSIDE, "shot-link": OUTSIDE, "shot-txt": "refused: not a .png file",
             "shot-gone": "not shown: no such file in the screenshots folder"}


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=60)  # a loaded machine: a page may take seconds


def png(width: int = 3, height: int = 2) -> bytes:
    """A real PNG (RGB, every pixel red)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\0" + b"\xff\0\0" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def extras(tmp_path_factory):
    """`lake ui --screenshots --exports` over a lake of web episodes with screenshots (one inside the folder, the
    others outside it, through `..` or a link, not a .png, gone) and rows with token log-probs, and an exports folder
    of real `lake export`s (views.export.export_view): sft at each of two versions (parquet, then jsonl) and
    family_success (no trajectory id column)."""
    from transcript.trajectory_row import trajectory_row
    from views.export import export_snapshot, export_view

    tmp = tmp_path_factory.mktemp("ui-extras")
    shots, ex = tmp / "shots", tmp / "exports"
    shots.mkdir()
    (shots / "end.png").write_bytes(png())
    (tmp / "outside.png").write_bytes(png())
    (shots / "link.png").symlink_to(tmp / "outside.png")
    (shots / "end.txt").write_text("not a picture")
    paths = {"shot-out": str(tmp / "outside.png"), "shot-climb": f"{shots}/../outside.png",
             "shot-link": str(shots / "link.png"), "shot-txt": str(shots / "end.txt"),
             "shot-gone": str(shots / "gone.png")}

    def row(tid: str, success: bool = False, pictures: list[str] = (), **cols) -> dict:
        meta = {"checks": {"passed": 1, "total": 1, "details": [{"type": "miniwob", "screenshot": p} for p in pictures]}}
        return trajectory_row(trajectory_id=tid, task_id=f"task-{tid}", env="web_form_env", split="train",
                              reward=1.0 if success else 0.0, success=success, metadata=meta,
                              messages=[{"role": "user", "content": f"fill the form {tid}"},
                                        {"role": "assistant", "content": f"done {tid}"}], **cols)

    lake = Lake.init(tmp / "lake")
    srv = ServerProcess(tmp / "lake", command="ui", extra=["--screenshots", str(shots), "--exports", str(ex)],
                        log_path=tmp / "ui.log").spawn()  # it starts while the rows and the exports are written
    try:
        lake.append("trajectories", [
            row(HEAT_ID, True, [str(shots / "end.png")], tokens=list(range(101, 109)),
                masks=[-100, -100, -100] + list(range(104, 109)), inference_logprobs=HEAT_LPS),
            row(LONG_ID, tokens=list(range(LONG_TOKENS)),
                masks=[-100] * LONG_PROMPT + list(range(LONG_PROMPT, LONG_TOKENS)),
                inference_logprobs=[1.0] * LONG_PROMPT + [-0.05] * (LONG_TOKENS - LONG_PROMPT)),
            row(PLAIN_ID, tokens=[1, 2, 3]),  # tokens without log-probs: no heat
            row(SHOTS_ID, pictures=list(paths.values()))])
        export_view(lake, "sft", ex / "sft-v1")
        lake.append("trajectories", [row(LATE_ID, True)])
        with lake.snapshot(for_query="SELECT 1 FROM sft, family_success", read_only=True) as snap:  # one for both
            export_snapshot(snap, "sft", ex / "sft-v2", format="jsonl")
            export_snapshot(snap, "family_success", ex / "family-v2")
        srv.wait_healthy(60)
        get(f"{srv.url}/ui/trajectories/{HEAT_ID}")  # the lake opened, a first export read: the tests' pages warm
        yield {"url": srv.url, "tmp": tmp, "shots": shots, "exports": ex, "paths": paths}
    finally:
        srv.kill()


def heat_cells(html: str) -> list[tuple[str, str]]:
    """(class, title) of each cell of the page's heat strip."""
    import html as htmllib
    import re

    strip = re.search(r'<div class="heat" id="heat-strip"[^>]*>(.*?)</div>', html, re.S).group(1)
    return [(c, htmllib.unescape(t)) for c, t in re.findall(r'<span class="tok (\w+)" title="([^"]*)"></span>', strip)]


def test_the_conversation_shows_token_log_probs_as_a_heat(extras):
    import math
    import re

    url = extras["url"]
    r = get(f"{url}/ui/trajectories/{HEAT_ID}")
    assert r.status_code == 200
    cells = heat_cells(r.text)
    # one cell per token: the prompt grey (Atropos' 1.0 is no log-prob), each sampled one by its probability's decile
    assert [c for c, _ in cells] == ["ns", "ns", "ns", "h9", "h6", "h0", "h9", "h0"]
    assert cells[0][1] == "#0 · token 101 · prompt (masked) · not sampled"
    assert cells[5][1] == f"#5 · token 106 · trained on · p {math.exp(-2.5):.4f} · log-prob -2.5000"
    # the accessible summary (the strip's name too): count, mean and min probability
    sampled = [math.exp(v) for v in HEAT_LPS[3:]]
    summary = (f"8 tokens, 5 sampled: mean p {sum(sampled) / 5:.3f}, min p {min(sampled):.4f}, "
               f"mean log-prob {sum(HEAT_LPS[3:]) / 5:.3f}")
    assert f'<p id="heat-summary">{summary}.</p>' in r.text and f'aria-label="{summary}"' in r.text
    # the least likely tokens as a table (readable without a mouse), least likely first
    least = re.search(r'id="least-likely">.*?<tbody>(.*?)</tbody>', r.text, re.S).group(1)
    assert [int(p) for p in re.findall(r"<tr><td>(\d+)</td>", least)] == [7, 5, 4, 6, 3]
    # no script and no style attribute: the colours are the stylesheet's classes (the CSP allows no other)
    assert "<script" not in r.text and "style=" not in r.text
    assert ".tok.h0" in get(f"{url}/ui/static/ui.css").text
    # a row without log-probs has no heat
    plain = get(f"{url}/ui/trajectories/{PLAIN_ID}").text
    assert 'id="heat"' not in plain and "Log-probs" not in plain


def test_a_long_heat_is_bounded_from_the_first_sampled_token_and_says_so(extras):
    from ui.heat import MAX_CELLS

    r = get(f"{extras['url']}/ui/trajectories/{LONG_ID}")
    cells = heat_cells(r.text)
    start = LONG_TOKENS - MAX_CELLS  # the window ends at the last token: as much of the sampled part as fits
    assert len(cells) == MAX_CELLS and cells[0][1].startswith(f"#{start} · token {start} ")
    assert sum(c == "ns" for c, _ in cells) == LONG_PROMPT - start
    assert (f"tokens {start:,} to {LONG_TOKENS - 1:,} shown ({MAX_CELLS:,} of {LONG_TOKENS:,}, from the first "
            "sampled token)") in r.text
    assert f"{LONG_TOKENS:,} tokens, {LONG_TOKENS - LONG_PROMPT:,} sampled" in r.text  # the summary: every token


def test_token_heat_takes_no_log_prob_for_a_placeholder_nan_or_a_missing_value():
    from ui.heat import token_heat

    h = token_heat({"tokens": [5, 6, 7, 8], "masks": [-100, 6], "inference_logprobs": [1.0, float("nan"), -0.0, 0.5]})
    assert [c.level for c in h.cells] == ["ns", "ns", "h9", "ns"] and h.sampled == 1 and h.min_prob == 1.0
    assert not h.aligned and h.lengths == {"tokens": 4, "masks": 2, "inference_logprobs": 4}
    assert h.cells[3].title == "#3 · token 8 · not sampled"  # no mask recorded for it: none claimed
    assert token_heat({"tokens": [1, 2], "inference_logprobs": []}) is None
    assert token_heat({"inference_logprobs": [1.0, 1.0]}).summary == "2 tokens, none with a sampling log-prob"


def test_a_web_episode_shows_its_screenshot_inline_from_the_screenshots_folder(site, extras):
    from selenium.webdriver.common.by import By

    url = extras["url"]
    r = get(f"{url}/ui/trajectories/{HEAT_ID}")
    assert '<img src="/ui/screenshots/end.png"' in r.text and "img-src 'self'" in r.headers["content-security-policy"]
    pic = get(f"{url}/ui/screenshots/end.png")
    assert pic.status_code == 200 and pic.headers["content-type"] == "image/png" and pic.content == png()
    assert pic.headers["x-content-type-options"] == "nosniff"
    # in the browser: the picture loads under the page's CSP, the heat's colours come from the stylesheet
    _, b, _ = site
    driver = b.driver
    driver.get(f"{url}/ui/trajectories/{HEAT_ID}")
    driver.execute_script("document.getElementById('screenshots').scrollIntoView();")
    shot(driver, "conversation-screenshot")
    driver.execute_script("document.getElementById('heat').scrollIntoView();")
    shot(driver, "conversation-heat")
    img = driver.find_element(By.CSS_SELECTOR, "#screenshots img")
    assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth;", img) == 3
    colour = "return getComputedStyle(document.querySelector(arguments[0])).backgroundColor;"
    hot, cool, grey = (driver.execute_script(colour, f"#heat-strip .tok.{c}") for c in ("h0", "h9", "ns"))
    assert len({hot, cool, grey}) == 3 and "rgba(0, 0, 0, 0)" not in (hot, cool, grey)
    assert driver.find_element(By.ID, "heat-strip").get_attribute("aria-label").startswith("8 tokens, 5 sampled")
    assert no_alert(driver)


@pytest.mark.attack
def test_a_screenshot_path_outside_the_folder_is_text_and_the_route_refuses_it(extras):
    """A screenshot's path is data any writer of the lake chose: outside --screenshots (absolute, climbing with
    `..`, through a link in the folder), not a .png or not there, the page shows it as text and says why, and the
    route serves nothing for it, asked by the recorded path or relative to the folder."""
    import html as htmllib
    import re

    url, shots = extras["url"], extras["shots"]
    r = get(f"{url}/ui/trajectories/{SHOTS_ID}")
    assert r.status_code == 200 and "<img" not in r.text
    shown = dict(re.findall(r'<p class="screenshot-path"><code>([^<]*)</code> <span class="cut">([^<]*)</span>', r.text))
    assert {htmllib.unescape(k): htmllib.unescape(v) for k, v in shown.items()} == {
        p: SHOT_ROWS[tid] + (str(shots.resolve()) if SHOT_ROWS[tid] == OUTSIDE else "")
        for tid, p in extras["paths"].items()}
    for tid, recorded in extras["paths"].items():  # the path as recorded, and relative to the folder (`..` encoded)
        for asked in (quote(recorded), quote(os.path.relpath(recorded, shots)).replace(".", "%2E")):
            got = get(f"{url}/ui/screenshots/{asked.lstrip('/')}" if asked[0] != "/" else
                            f"{url}/ui/screenshots/{asked}")
            assert got.status_code == (404 if tid == "shot-gone" else 403), (tid, asked, got.status_code)
            assert got.content[:8] != b"\x89PNG\r\n\x1a\n" and "image" not in got.headers["content-type"]


@pytest.mark.attack
def test_a_file_named_png_that_is_no_png_is_not_served(extras):
    (extras["shots"] / "fake.png").write_text("<script>document.title='pwned'</script>")
    r = get(f"{extras['url']}/ui/screenshots/fake.png")
    assert r.status_code == 403 and "not a PNG" in r.text and "<script>document" not in r.text


def test_the_conversation_links_every_export_holding_it(extras):
    import re

    url = extras["url"]

    def links(tid: str) -> tuple[list[str], str]:
        page = get(f"{url}/ui/trajectories/{tid}").text
        return re.findall(r'<a class="export" href="/ui/exports/([^"]+)">', page), page

    found, page = links(HEAT_ID)
    assert sorted(found) == ["sft-v1", "sft-v2"]  # both sft exports hold it (parquet and jsonl)
    # an export of a view whose rows carry no trajectory id: said, not guessed
    assert re.search(r'id="exports-no-column">[^<]*family-v2 \(family_success\)', page)
    assert links(LATE_ID)[0] == ["sft-v2"]  # appended after the first export
    none, page = links(LONG_ID)  # a failure: in no sft export
    assert none == [] and 'id="exports-none"' in page
    # a link leads to the export's manifest, and to the view at the export's versions
    shown = get(f"{url}/ui/exports/sft-v1")
    manifest = json.loads((extras["exports"] / "sft-v1" / "manifest.json").read_text())
    assert shown.status_code == 200 and manifest["event_ids_sha256"] in shown.text
    assert get(f"{url}/ui/exports/no-such").status_code == 404
    assert get(f"{url}/ui/exports/%2E%2E").status_code == 404


def test_an_export_is_read_once_until_its_manifest_changes(extras):
    """Kept per export folder by its manifest's mtime and size: its files are not read again at the next page; a
    new manifest is read again (here: its data file gone, so it is listed as not read, saying why)."""
    import shutil

    url, ex = extras["url"], extras["exports"]
    copy = ex / "sft-copy"
    shutil.copytree(ex / "sft-v1", copy)
    try:
        assert "sft-copy" in get(f"{url}/ui/trajectories/{HEAT_ID}").text
        for f in copy.glob("*.parquet"):
            f.unlink()
        assert '/ui/exports/sft-copy"' in get(f"{url}/ui/trajectories/{HEAT_ID}").text  # kept: not read again
        st = (copy / "manifest.json").stat()
        os.utime(copy / "manifest.json", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        page = get(f"{url}/ui/trajectories/{HEAT_ID}").text
        assert '/ui/exports/sft-copy"' not in page and "sft-copy: its files are not read" in page
    finally:
        shutil.rmtree(copy)


@pytest.mark.attack
def test_an_export_manifest_naming_a_file_outside_its_folder_or_a_link_is_not_read(extras, monkeypatch):
    """A manifest is data: a file it names outside its export folder, or through a link, is never opened; and the
    scan is bounded (exports looked at, rows read), saying so."""
    import shutil

    from ui import export_index
    from ui.export_index import ExportIndex

    ex = extras["tmp"] / "exports-hostile"
    shutil.copytree(extras["exports"], ex)
    manifest = json.loads((ex / "sft-v1" / "manifest.json").read_text())
    (ex / "climbs").mkdir()
    (ex / "climbs" / "manifest.json").write_text(json.dumps(
        {**manifest, "files": [{**f, "path": "../sft-v1/" + f["path"]} for f in manifest["files"]]}))
    shutil.copytree(ex / "sft-v1", ex / "linked")
    for f in manifest["files"]:
        (ex / "linked" / f["path"]).unlink()
        (ex / "linked" / f["path"]).symlink_to(ex / "sft-v1" / f["path"])
    held = ExportIndex(ex).holding(HEAT_ID)
    assert sorted(e.name for e in held.found) == ["sft-v1", "sft-v2"]
    why = {e.name: e.why for e in held.unread}
    assert "not a path inside the folder" in why["climbs"] and "symbolic link" in why["linked"]
    monkeypatch.setattr(export_index, "MAX_EXPORTS", 2)
    monkeypatch.setattr(export_index, "MAX_EXPORT_ROWS", 0)
    held = ExportIndex(ex).holding(HEAT_ID)
    assert held.cut and (held.looked, held.total) == (2, 5) and held.found == []
    assert all("not read" in e.why for e in held.unread)


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
