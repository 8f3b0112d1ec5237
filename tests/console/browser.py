"""The browser tier's machinery: the console served for real, and headless Chromium.

Chromium and its driver come from the system (Debian ``chromium`` and
``chromium-driver``); Selenium drives them through the given driver path, so
nothing is downloaded at test time. Every run gets a fresh profile directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

import jobwarden
from jobwarden.console.app import build_app
from jobwarden.console.settings import ConsoleSettings
from tests.support.waiting import wait_for

#: How long a page load or a click's effect may take before the test fails: a bound on a
#: hang, not a speed claim (20 s was missed in a CI run whose suite took 3.7x its usual
#: time).
PAGE_WAIT = 90

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--window-size=1360,900",
                  "--disable-dev-shm-usage"]


def browser_paths() -> tuple[str, str] | None:
    """(chromium, chromedriver) from PATH, or None when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def listening_socket() -> socket.socket:
    """A listening TCP socket on a free loopback port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as uvicorn does itself
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@contextlib.contextmanager
def serve(client: jobwarden.Client, settings: ConsoleSettings, *,
          sock: socket.socket | None = None) -> Iterator[str]:
    """The console in a thread, on ``sock`` (default: a free loopback port); yields its URL."""
    app = build_app(client, settings)
    sock = sock or listening_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False,
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="console-server", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), timeout=30,
                 message="the console to start")
        if not server.started:
            raise RuntimeError("the console did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextlib.contextmanager
def chromium(profile: Path, *, flags: tuple[str, ...] = ()) -> Iterator[webdriver.Chrome]:
    paths = browser_paths()
    assert paths is not None
    browser, driver = paths
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in [*CHROMIUM_FLAGS, *flags, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    service = Service(executable_path=driver, log_output=os.devnull)
    chrome = webdriver.Chrome(options=options, service=service)
    try:
        yield chrome
    finally:
        chrome.quit()


#: How navigate() and text_of() find an element in the page's own script, by Selenium locator kind.
_FIND = {By.XPATH: "document.evaluate(arguments[0], document, null, "
                   "XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue",
         By.ID: "document.getElementById(arguments[0])",
         By.CSS_SELECTOR: "document.querySelector(arguments[0])",
         By.CLASS_NAME: "document.getElementsByClassName(arguments[0])[0]",
         By.TAG_NAME: "document.getElementsByTagName(arguments[0])[0]"}


def text_of(browser: WebDriver, by: str, value: str) -> str:
    """The shown text of what ``(by, value)`` finds, read in one script call (a lookup
    and a read as two calls may straddle a live refresh's swap); fails when absent."""
    text = browser.execute_script(f"const e = {_FIND[by]}; return e ? e.innerText : null;",
                                  value)
    assert text is not None, f"nothing found by {by} {value!r}"
    return str(text)


def navigate(browser: WebDriver, by: str, value: str) -> None:
    """Click what ``(by, value)`` finds, which loads a new page; wait for that page.

    The element is found and clicked in one script call, and only when it is shown: the
    live refresh (every 0.5 s here) swaps the rows for identical fresh ones, and on a
    loaded machine a lookup and a click made as two WebDriver calls straddled a swap every
    time for 90 s (StaleElementReferenceException, seen in a fresh-clone run).
    """
    page = browser.find_element(By.TAG_NAME, "html")
    script = (f"const e = {_FIND[by]};"
              " if (!e || e.getClientRects().length === 0) return false;"
              " e.click(); return true;")
    WebDriverWait(browser, PAGE_WAIT).until(lambda b: b.execute_script(script, value))
    WebDriverWait(browser, PAGE_WAIT).until(expected_conditions.staleness_of(page))
    WebDriverWait(browser, PAGE_WAIT).until(
        lambda b: b.execute_script("return document.readyState") == "complete")
