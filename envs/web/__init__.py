"""web_form_env: MiniWoB++ form and widget tasks in a real headless Chromium (issue 39).

Modules, one job each: browser.py (start, own and end Chromium; the tab pool; the watchdog in watchdog.py),
observe.py (the page as a compact element list), actions.py (the tools and what they do to a page), suite.py
(the MiniWoB tasks, splits and seeds), experts.py (scripted expert and noisy policies), env.py (the ToolEnv).
Importing this package starts nothing and needs neither Selenium nor Chromium; `browser.missing()` says what a
machine lacks.
"""
